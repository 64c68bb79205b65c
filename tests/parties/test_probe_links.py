"""ProbeLinks, the transport probe over a session's own links: what it returns, that a session decides
exactly as before after it, that its messages are constants (the relay's view of a probe does not depend on
the parties' data), and what the parties refuse."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator.api import SessionError, SessionOptions
from coordinator.relay import RelayRecord
from hss.runtime import run_in_memory
from parties.exchange import probe_machine
from tests.parties.helpers import coordinator_for, gaussian_terms, inproc_consortium, party_data


def test_the_probe_machine_sends_only_zeros_and_reports_each_round() -> None:
    ticks = iter(range(100))
    machines = {
        p: probe_machine(p, [q for q in (1, 2, 3) if q != p], 4, 5, lambda: next(ticks)) for p in (1, 2, 3)
    }
    results, tr = run_in_memory(machines, keep_log=True)
    assert tr.rounds == 4 and tr.messages == 4 * 6
    assert all(not payload.any() and payload.size == 5 for _, _, _, payload in tr.log)
    assert all(len(r) == 4 for r in results.values())
    with pytest.raises(ValueError):
        probe_machine(1, [2, 3], 0, 5)


@pytest.mark.parametrize("topology", ["mesh", "relay"])
def test_probe_then_exact_decisions(tmp_path: Path, topology: str) -> None:
    m, n = 3, 16
    data = party_data(m, 25, seed=4)
    th, ts = np.zeros(n), np.linspace(-1, 1, n)

    async def main() -> tuple[list[float], np.ndarray, int]:
        async with (
            inproc_consortium(tmp_path, m, data) as (daemons, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(SessionOptions(
                reveal_mode="sign", model="gaussian-mean", model_params={"noise": "none"}, topology=topology
            ))
            durations = await sess.probe_links(6, 40)
            d = await sess.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(n)}, n)
            used = daemons[0].decisions_used
            await sess.close()
            return durations, d.accept, used

    durations, accept, used = asyncio.run(main())
    assert len(durations) == 5 and all(x >= 0 for x in durations)
    np.testing.assert_array_equal(accept, sum(gaussian_terms(x, th, ts) for x in data) >= 0)
    assert used == n  # the probe charged nothing


def _probe_view(root: Path, data: list[np.ndarray]) -> list[tuple[int, ...]]:
    seen: list[RelayRecord] = []

    async def main() -> None:
        async with (
            inproc_consortium(root, 3, data) as (_, eps, certs),
            coordinator_for(eps, certs, relay_observer=seen.append) as coord,
        ):
            sess = await coord.open_session(SessionOptions(
                reveal_mode="sign", model="gaussian-mean", model_params={}, topology="relay"
            ))
            await sess.probe_links(4, 12)
            await sess.close()

    asyncio.run(main())
    return sorted(
        (r.step, r.round, r.src, r.dst, r.kind, len(r.payload), len(r.nonce), r.bundle_in, r.bundle_out)
        for r in seen
        if r.step == 1
    )


def test_the_relay_view_of_a_probe_does_not_depend_on_the_data(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    low = _probe_view(tmp_path / "low", [rng.normal(-5, 1, 30) for _ in range(3)])
    high = _probe_view(tmp_path / "high", [rng.normal(40, 10, 30) for _ in range(3)])
    assert low and low == high


def test_probes_the_parties_refuse(tmp_path: Path) -> None:
    async def main() -> None:
        async with (
            inproc_consortium(tmp_path, 3) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(
                SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params={})
            )
            with pytest.raises(SessionError) as bad_rounds:
                await sess.probe_links(0, 4)
            assert bad_rounds.value.code == grpc.StatusCode.INVALID_ARGUMENT
            await sess.abort("test")
            run = await coord.open_session(SessionOptions(
                reveal_mode="sign", model="gaussian-mean", model_params={}, run_id="probe-run"
            ))
            with pytest.raises(SessionError) as in_run:
                await run.probe_links(3, 4)
            assert in_run.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert "run_id" in str(in_run.value)
            await run.abort("test")

    asyncio.run(main())
