"""``blinded`` under security with abort over real daemons (separate processes, mutual TLS), issue 25.

One consortium of three registries evaluates run step 1 of a run with the semi-honest blinded mode, then with
``security = "abort"`` while registry 2 deviates on purpose (``[testing] deviate``): each deviation ends the
step with an error naming the step and the round. Retried with registry 2 honest again, the step gives the
semi-honest accept bits and bit for bit the same revealed values (the run step's noise, blinding shares and E
draws do not depend on the security), over the mesh and the relay, and every registry charged run step 1
once across every attempt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from hss.protocols import Decisions
from parties.privacy_budget import run_step_counts
from proto import party_pb2
from proto.records import RunCharge
from simulations.launcher import LocalConsortium
from tests.network.test_abort_daemons import _set_deviation
from tests.parties.helpers import party_data
from tests.parties.test_resume import BUDGET, KEYS, PARAMS, M, N, _inputs

RUN = "abort-blinded-run"


def _evaluate(lc: LocalConsortium, security: str, topology: str = "mesh") -> Decisions:
    with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=30.0) as coord:
        sess = coord.open_session(SessionOptions(
            reveal_mode="blinded",
            model="gaussian-mean",
            model_params=PARAMS,
            run_id=RUN,
            topology=topology,
            security=security,
        ))
        try:
            return sess.evaluate(_inputs(1), N)
        finally:
            sess.close()


@pytest.mark.slow
def test_blinded_under_abort_reveals_the_semi_honest_values_and_catches_a_deviation(tmp_path: Path) -> None:
    with LocalConsortium.start(
        M,
        party_data(M, 30, seed=7),
        workdir=tmp_path / "consortium",
        fixed_rng_keys=KEYS,
        privacy_budget=BUDGET,
        round_timeout_s=4.0,
        models=("gaussian-mean",),
        modes=("sum", "blinded", "sign"),
    ) as lc:
        semi = _evaluate(lc, "semi-honest")
        assert 0 < semi.accept.sum() < N and semi.revealed is not None

        cases = [  # before any abort run of the step succeeds (a held step's messages are replayed)
            ("inconsistent@2", r"abort at step 1, round 2 \(MACs and coin\): opened shares do not lie"),
            ("additive@1", r"abort at step 1, round 3 \(product and bit proofs\): opened shares do not lie"),
            ("additive@3", r"abort at step 1, round 6 \(verify\): the MAC check failed"),
            ("additive@out", r"abort at step 1, round 7 \(receiver: outputs\)"),
        ]
        for deviation, message in cases:
            _set_deviation(lc, 2, [deviation])
            with pytest.raises(SessionError, match=message):
                _evaluate(lc, "abort")

        _set_deviation(lc, 2, [])
        for topology in ("mesh", "relay"):  # the retried step: exact, the same noise
            got = _evaluate(lc, "abort", topology)
            assert (got.accept == semi.accept).all()
            assert got.revealed is not None and (got.revealed == semi.revealed).all()  # bit for bit

        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=30.0) as coord:
            reports = coord._run(
                coord.coord.call_all(
                    "privacy report", lambda _: party_pb2.PrivacyReportRequest(), "PrivacyReport"
                )
            )
    for pid, r in reports.items():
        charges = [RunCharge.from_dict(c) for c in json.loads(r.run_charges_json)]
        assert run_step_counts(charges, RUN) == {1: 1}, pid  # charged once across every attempt
