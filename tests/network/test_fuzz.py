"""The descriptor-driven fuzz (simulations/fuzz.py) at a small size against daemon processes
(``simulations.launcher.LocalConsortium``). Fuzzed messages at daemons in the test's process are
tests/parties/test_fuzz.py; the mutator itself is tested in tests/simulations/test_fuzz.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.fuzz import method_table, run_fuzz


@pytest.mark.slow
def test_descriptor_fuzz_of_every_rpc_against_daemon_processes(tmp_path: Path) -> None:
    """simulations.fuzz at a small size: structure-aware and byte-level mutations of valid requests to every
    RPC of the .proto services (both roles, peer streams, another CA's client) at a daemon process; no
    INTERNAL / UNKNOWN, no call past its deadline, the daemons alive and serving a correct session after.
    The live session and the check run with security "abort" (issue 25: its key check and checked decoding
    under the same probe); the fuzzed OpenSession requests carry either security.
    The longer run is documented in docs/ROBUSTNESS.md."""
    report = run_fuzz(tmp_path, requests=400, time_limit_s=120.0, deadline_s=20.0, seed=7, security="abort")
    assert report.failures == [], report.failures
    assert report.requests >= 100  # the time limit is generous; a loaded machine still does this many
    targets = report.by_target()
    for path in method_table():
        name = path.rsplit("/", 1)[1]
        assert any(t.startswith(name + " as ") for t in targets), (name, sorted(targets))
    kinds = {kind for _, kind, _ in report.counts}
    assert {"valid", "fields", "bytes"} <= kinds
    assert any(role in t for t in targets for role in ("as party",)) and "Exchange as coordinator" in targets
