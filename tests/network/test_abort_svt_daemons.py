"""Federated ABCDP under security with abort over real daemons (separate processes, mutual TLS), issue 25.

One consortium of three registries (the plan and data of tests/network/test_federated_abcdp.py). Registry 2
first deviates on purpose (``[testing] deviate``: an additive error in round 5, a carry-tree product): the
run fails with an error naming the step and the round of the check before the gate, and an honest
registry's audit log holds the abort. With registry 2 honest again: without noise the run under abort
accepts exactly the candidates of the semi-honest run (mesh); with noise (over the relay) its bits are the
float reference rebuilt from every registry's own noise, as for the semi-honest protocol.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from coordinator.abcdp import FederatedRunOptions, run_federated_abcdp
from coordinator.api import BlockingCoordinator, SessionError
from hss.abort_svt import abort_svt_rounds
from simulations.launcher import LocalConsortium
from tests.network.test_abort_daemons import _set_deviation
from tests.network.test_federated_abcdp import (
    BATCH,
    KEYS,
    M,
    _check_against_reference,
    _observed,
    _plan,
    _prior,
    _simulate,
)


@pytest.mark.slow
def test_federated_abcdp_under_abort_equals_semi_honest_and_catches_a_deviation(tmp_path: Path) -> None:
    data = [{"y": y} for y in _observed()]
    work = tmp_path / "consortium"
    noisy = _plan(2.0, 3, False, 31, 0.1)
    exact = _plan(math.inf, 4, False, 21, 0.12)
    fmt = noisy.svt_format(M)
    assert abort_svt_rounds(fmt, M, BATCH, 3) == 20  # 6 + 4 tree levels + AND + 3 + 1 + gate 0 + 1 + 3 + 1
    with LocalConsortium.start(
        M,
        data,
        workdir=work,
        models=("abcdp-rff",),
        modes=("svt",),
        startup_timeout_s=120.0,
        fixed_rng_keys=KEYS,
        deviate={2: ["additive@7"]},
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            # an error in the trees' first product level (round 7): the check before the gate's opening
            # (rounds 12..14, after the AND in round 11) catches it
            message = r"abort at step 1, round 14 \(check before the gate\): the MAC check failed"
            with pytest.raises(SessionError, match=message):
                run_federated_abcdp(
                    coord,
                    noisy,
                    _prior,
                    _simulate,
                    BATCH,
                    31,
                    FederatedRunOptions(
                        columns=["y"],
                        security="abort",
                    ),
                )
        _set_deviation(lc, 2, [])
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            runs = {
                security: run_federated_abcdp(
                    coord,
                    exact,
                    _prior,
                    _simulate,
                    BATCH,
                    21,
                    FederatedRunOptions(
                        columns=["y"],
                        security=security,
                    ),
                )
                for security in ("semi-honest", "abort")
            }
            semi, abort = runs["semi-honest"], runs["abort"]
            assert abort.done and abort.n_accepted == exact.c
            np.testing.assert_array_equal(abort.decisions, semi.decisions)
            np.testing.assert_array_equal(abort.accepted_ids, semi.accepted_ids)
            np.testing.assert_array_equal(abort.thetas, semi.thetas)
            sid = b"abcdp-abort-0001"
            res = run_federated_abcdp(
                coord,
                noisy,
                _prior,
                _simulate,
                BATCH,
                31,
                FederatedRunOptions(
                    columns=["y"],
                    session_id=sid,
                    topology="relay",
                    security="abort",
                ),
            )
            assert res.done and res.n_accepted == noisy.c
            _check_against_reference(noisy, sid, 31, res.decisions, res.decided_ids)
    # the registries logged the abort with its step and round; the coordinator cancels the other parties'
    # calls at the first error, so a registry may log its Evaluate as CANCELLED instead (never ok): when the
    # deviating registry's own check answers first (it runs the same check), both honest ones may be
    # cancelled, so the step and round are looked for in all three logs (a full run saw exactly that)
    logged = []
    for pid in (1, 2, 3):
        lines = [
            json.loads(x) for x in (work / f"party-{pid}" / "state" / "audit.log").read_text().splitlines()
        ]
        first = next(e for e in lines if e["what"] == "Evaluate")
        assert first["outcome"] in ("FAILED_PRECONDITION", "CANCELLED"), first
        logged.append("abort at step 1, round 14 (check before the gate)" in first.get("detail", ""))
    assert any(logged)


@pytest.mark.slow
def test_an_aborted_federated_abcdp_run_retried_completes_charged_once(tmp_path: Path) -> None:
    """A run (run_id) aborted by a deviating registry, retried with it honest again: the run completes and
    every registry's ledger holds the run charged once (an eps = 2 event, as the semi-honest run's)."""
    from parties.privacy_budget import run_step_counts
    from proto import party_pb2
    from proto.records import RunCharge

    data = [{"y": y} for y in _observed()]
    noisy = _plan(2.0, 3, False, 31, 0.1)
    with LocalConsortium.start(
        M,
        data,
        workdir=tmp_path,
        models=("abcdp-rff",),
        modes=("svt",),
        startup_timeout_s=120.0,
        fixed_rng_keys=KEYS,
        deviate={2: ["inconsistent@3"]},
        privacy_budget={"epsilon": 50.0, "delta": 1e-6, "colluding": 1},
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            with pytest.raises(SessionError, match=r"abort at step 1, round 3 "):
                run_federated_abcdp(
                    coord,
                    noisy,
                    _prior,
                    _simulate,
                    BATCH,
                    31,
                    FederatedRunOptions(
                        columns=["y"],
                        security="abort",
                        run_id="r",
                    ),
                )
        _set_deviation(lc, 2, [])
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            res = run_federated_abcdp(
                coord,
                noisy,
                _prior,
                _simulate,
                BATCH,
                31,
                FederatedRunOptions(
                    columns=["y"],
                    security="abort",
                    run_id="r",
                ),
            )
            assert res.done and res.n_accepted == noisy.c
            request = party_pb2.PrivacyReportRequest()
            reports = coord._run(coord.coord.call_all("privacy report", lambda _: request, "PrivacyReport"))
    for pid, r in reports.items():
        charges = [RunCharge.from_dict(c) for c in json.loads(r.run_charges_json)]
        assert run_step_counts(charges, "r") == {0: 1}, pid
        events = [e for e in json.loads(r.events_json) if "run r" in e.get("label", "")]
        assert len(events) == 1 and events[0]["count"] == 1, (pid, events)
