"""Issue 24 item 2: the coordinator's synchronous helpers work from inside a running event loop (a notebook
cell), where asyncio.run refuses."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.privacy import run_sync


async def _value() -> int:
    await asyncio.sleep(0)
    return 42


def test_run_sync_outside_and_inside_a_running_loop() -> None:
    assert run_sync(_value()) == 42

    async def cell() -> int:  # what a notebook cell runs inside
        pending = _placeholder()
        with pytest.raises(RuntimeError, match="running event loop"):
            asyncio.run(pending)
        pending.close()
        return int(run_sync(_value()))

    assert asyncio.run(cell()) == 42


async def _placeholder() -> None:
    return None
