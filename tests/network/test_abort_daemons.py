"""Security with abort over real daemons (separate processes, mutual TLS, mesh and relay), issue 25.

One consortium of three registries evaluates run step 1 of a run first with the semi-honest sign protocol,
then with ``security = "abort"`` while registry 2 deviates on purpose (``[testing] deviate``: an additive
error in a carry-tree round, different errors to different peers in the masked opening, a dropped message,
a corrupted output share to the coordinator). Every deviation ends the step with an error naming the step
and the round and nothing decoded; the abort is in each honest registry's audit log; the step retried with
registry 2 honest again gives bit for bit the semi-honest decisions (the same noise: the run step's digest
does not depend on the security), and every registry's ledger holds run step 1 charged once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from parties.privacy_budget import run_step_counts
from proto import party_pb2
from proto.records import RunCharge
from simulations.launcher import LocalConsortium
from tests.parties.helpers import party_data
from tests.parties.test_resume import BUDGET, KEYS, PARAMS, M, N, _inputs

RUN = "abort-run"


def _set_deviation(lc: LocalConsortium, pid: int, deviate: list[str]) -> None:
    """Restart party ``pid`` with ``[testing] deviate`` set to ``deviate`` (nothing: honest again)."""
    lc.kill(pid)
    cfg = lc.procs[pid].config
    text = re.sub(r"(?m)^deviate = .*\n", "", cfg.read_text())
    if deviate:
        if "[testing]\n" not in text:
            text += "\n[testing]\n"
        text = text.replace("[testing]\n", "[testing]\n" + f"deviate = {json.dumps(deviate)}\n")
    cfg.write_text(text)
    lc.restart(pid)
    lc.wait_ready(30.0)


def _evaluate(
    lc: LocalConsortium, security: str, topology: str = "mesh", precompute: str = "inline"
) -> np.ndarray:
    with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=30.0) as coord:
        sess = coord.open_session(SessionOptions(
            reveal_mode="sign",
            model="gaussian-mean",
            model_params=PARAMS,
            run_id=RUN,
            topology=topology,
            security=security,
            sign_precompute=precompute,
        ))
        accept = sess.evaluate(_inputs(1), N).accept  # an abort closes the session at every registry
        sess.close()
        return accept


@pytest.mark.slow
def test_a_deviating_registry_is_caught_and_the_retried_step_is_exact_and_charged_once(
    tmp_path: Path,
) -> None:
    work = tmp_path / "consortium"
    with LocalConsortium.start(
        M,
        party_data(M, 30, seed=7),
        workdir=work,
        fixed_rng_keys=KEYS,
        privacy_budget=BUDGET,
        round_timeout_s=4.0,
    ) as lc:
        semi = _evaluate(lc, "semi-honest")
        assert 0 < semi.sum() < N

        cases = [
            ("additive@7", "mesh", r"abort at step 1, round 14 \(verify\): the MAC check failed"),
            ("additive@7", "relay", r"abort at step 1, round 14 \(verify\): the MAC check failed"),
            ("inconsistent@6", "mesh", r"abort at step 1, round 6 \(masked terms opened\): opened shares do"),
            ("noncanonical@1", "relay", r"abort at step 1, round 1 \(inputs and squares\): .*non-canonical"),
            ("duplicate@12", "mesh", r"abort at step 1, round 12 \(verify: coin and key\): a message of 8"),
            ("drop@2", "mesh", r"step 1 round [23]: no message from party [12] before the deadline"),
            ("additive@out", "mesh", r"abort at step 1, the output round \(receiver: outputs\)"),
        ]
        for deviation, topology, message in cases:
            _set_deviation(lc, 2, [deviation])
            with pytest.raises(SessionError, match=message):
                _evaluate(lc, "abort", topology)

        _set_deviation(lc, 2, [])
        assert np.array_equal(_evaluate(lc, "abort"), semi)  # the retried step: exact, the same noise
        assert np.array_equal(_evaluate(lc, "abort", topology="relay"), semi)
        assert np.array_equal(_evaluate(lc, "abort", precompute="pooled"), semi)
        assert np.array_equal(_evaluate(lc, "abort", topology="relay", precompute="blocks4"), semi)

        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=30.0) as coord:
            reports = coord._run(
                coord.coord.call_all(
                    "privacy report", lambda _: party_pb2.PrivacyReportRequest(), "PrivacyReport"
                )
            )
    for pid, r in reports.items():
        charges = [RunCharge.from_dict(c) for c in json.loads(r.run_charges_json)]
        assert run_step_counts(charges, RUN) == {1: 1}, pid  # charged once across every attempt
        assert sum(e["count"] for e in json.loads(r.events_json)) == N
    for pid in (1, 3):  # the honest registries logged every abort (their own check or the close's reason)
        audit = (work / f"party-{pid}" / "state" / "audit.log").read_text()
        for _, _, message in cases:
            assert re.search(message, audit), (pid, message)



@pytest.mark.slow
def test_lazy_sign_under_abort_over_daemons_equals_semi_honest_when_the_coin_is_almost_sure(
    tmp_path: Path,
) -> None:
    """A lazy coin with gamma = 1 - 2^-16 through the daemons: the same run step under semi-honest and under
    abort (the same noise) accepts the same candidates unless one of the 2 x 16 coins came up 0 (probability
    below 32 x 2^-16 = 4.9e-4, the test's false-failure rate); a deviation in the coin's round is caught."""
    from tests.network.test_lazy_daemons import _batch, _data

    params = {"kind": "mh", "lazy": {"gamma": 1 - 2.0**-16, "max_sensitivity": 0.6}}
    batch = _batch(np.random.default_rng(4))

    def run(lc: LocalConsortium, security: str, run_id: str = "lazy-run") -> np.ndarray:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=30.0) as coord:
            sess = coord.open_session(SessionOptions(
                reveal_mode="sign",
                model="beta-bernoulli",
                model_params=params,
                run_id=run_id,
                security=security,
            ))
            accept = sess.evaluate(batch, N).accept
            sess.close()
            return accept

    with LocalConsortium.start(
        M, _data(), workdir=tmp_path, models=("beta-bernoulli",), modes=("sign",), data_model="beta-bernoulli"
    ) as lc:
        semi = run(lc, "semi-honest")
        assert np.array_equal(run(lc, "abort"), semi)  # (the noise is fresh per consortium: any count)
        _set_deviation(lc, 3, ["inconsistent@5"])  # (a new run: run step 1 of lazy-run would be replayed)
        with pytest.raises(SessionError, match=r"abort at step 1, round \d+ \("):
            run(lc, "abort", "lazy-run-2")
