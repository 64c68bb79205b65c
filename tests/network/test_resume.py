"""Run resume with the party daemons as separate processes (``simulations.launcher.LocalConsortium``, mutual
TLS on loopback): a coordinator resuming a run in a new session gets the completed run step replayed, and the
PrivacyReport RPC shows each run step charged once. The record file, the run key, the step digest and
in-process daemons restarted on their state are tested in tests/parties/test_resume.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import BlockingCoordinator, SessionOptions
from parties.privacy_budget import run_step_counts
from proto import party_pb2
from proto.records import RunCharge
from simulations.launcher import LocalConsortium
from tests.parties.helpers import party_data
from tests.parties.test_resume import BUDGET, KEYS, PARAMS, M, N, _decode, _inputs


@pytest.mark.slow
def test_multiprocess_resume_reports_each_run_step_charged_once(tmp_path: Path) -> None:
    """Party daemons as separate processes; the PrivacyReport RPC shows each run step charged once."""
    k, run, work = 2, "chain-D", tmp_path / "consortium"
    data = party_data(M, 30, seed=7)
    with LocalConsortium.start(
        M, data, workdir=work, fixed_rng_keys=KEYS, privacy_budget=BUDGET, round_timeout_s=10.0
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=20.0) as c1:
            s1 = c1.open_session(
                SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params=PARAMS, run_id=run)
            )
            dropped = [s1.evaluate(_inputs(s), N).accept for s in range(1, k + 1)][-1]
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=20.0) as c2:
            s2 = c2.open_session(SessionOptions(
                reveal_mode="sign", model="gaussian-mean", model_params=PARAMS, run_id=run, first_run_step=k
            ))
            assert s2.resume == {1: k, 2: k, 3: k} and s2.warnings == []
            tr = s2.evaluate_transcript(_inputs(k), N)
            assert tr.replayed and np.array_equal(_decode(s2.session, tr), dropped)
            s2.evaluate(_inputs(k + 1), N)
            s2.close()
            reports = c2._run(
                c2.coord.call_all(
                    "privacy report", lambda _: party_pb2.PrivacyReportRequest(), "PrivacyReport"
                )
            )
    for r in reports.values():
        charges = [RunCharge.from_dict(c) for c in json.loads(r.run_charges_json)]
        assert run_step_counts(charges, run) == {s: 1 for s in range(1, k + 2)}
        assert sum(e["count"] for e in json.loads(r.events_json)) == (k + 1) * N
        assert r.decisions_used == (k + 1) * N
    for pid in range(1, M + 1):
        audit = (work / f"party-{pid}" / "state" / "audit.log").read_text()
        assert audit.count(f'"detail": "replayed run step {k}"') == 1
