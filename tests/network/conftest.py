"""Every test in tests/network/ starts processes (daemons, MPC parties, servers) and talks to them over
sockets: all of them are ``slow`` (tests/README.md, "The tiers"), whether or not the module says so."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
