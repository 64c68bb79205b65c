"""Every test in tests/network/ starts processes (daemons, MPC parties, servers) and talks to them over
sockets: all of them are ``slow`` (tests/README.md, "The tiers"), whether or not the module says so, and all
of them run on one pytest-xdist worker, one after another (``xdist_group("daemons")`` with ``make test``'s
``--dist loadgroup``): two consortia of seven daemons at once on two cores starve each other past their RPC
deadlines, while a daemon test beside a single-process test does not."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook, which reads xdist_group into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("daemons"))
