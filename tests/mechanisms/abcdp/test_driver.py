"""The one federated ABCDP driver (mechanisms.abcdp.driver): batch policy, checkpoint and resume, the seam.

The network decider is exercised by tests/network/test_federated_abcdp.py and test_resume_abcdp.py; here
the in-memory decider (``LocalSvtParties``, plaintext reference backend) stands in for the parties.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from mechanisms.abcdp.candidates import CandidateQueue
from mechanisms.abcdp.driver import (
    AbcdpState,
    BatchPolicy,
    PriorProposer,
    SvtRequest,
    drive_abcdp,
)
from mechanisms.abcdp.federated import FederatedSvtPlan
from mechanisms.abcdp.federated_run import LocalSvtParties
from mechanisms.simulators.toy import ToyMixtureModel
from tests.mechanisms.abcdp.test_federated import THETA_TRUE, make_plan, srng

MODEL = ToyMixtureModel()
N_OBS = 300


class _Stop(Exception):
    pass


def _setup(**kw: Any) -> tuple[FederatedSvtPlan, LocalSvtParties]:
    plan = make_plan(n_records=N_OBS, eps_abc=0.25, eps_total=2.0, c=4, **kw)
    obs = MODEL.simulate(THETA_TRUE, N_OBS, np.random.default_rng(1))[0]
    cuts = np.linspace(0, N_OBS, 4).astype(int)
    shards = [obs[a:b] for a, b in itertools.pairwise(cuts)]
    rngs = {p: srng(f"driver/{p}") for p in range(1, 4)}
    return plan, LocalSvtParties(plan, shards, 3, np.random.default_rng(0), rngs, backend="plaintext")


def _proposer(plan: FederatedSvtPlan, state: AbcdpState) -> PriorProposer:
    return PriorProposer(
        plan, MODEL.sample_prior, lambda th, g: MODEL.simulate(th, 100, g), state.generator()
    )


def test_policy_batch_and_proposals() -> None:
    q = CandidateQueue(make_plan(c=4))
    assert BatchPolicy(16).batch(q) == 16 and BatchPolicy(16).to_propose(q, 16) == 16
    assert BatchPolicy(16, top_up=True, max_decisions=5).batch(q) == 5
    assert BatchPolicy(16, adaptive=True, min_batch=2).batch(q) == 8  # ⌈4 / (1/2)⌉
    assert BatchPolicy(16, max_proposals=10).to_propose(q, 16) == 10
    q.push(np.zeros((10, 5)), np.zeros((10, 20)))
    assert BatchPolicy(16, max_proposals=10).to_propose(q, 16) == 0
    assert BatchPolicy(16, top_up=True).to_propose(q, 16) == 6
    assert BatchPolicy(8).to_propose(q, 8) == 0


def test_requests_are_public_and_numbered() -> None:
    plan, parties = _setup()
    seen: list[SvtRequest] = []

    def decide(req: SvtRequest) -> np.ndarray:
        seen.append(req)
        return parties(req)

    state = AbcdpState.fresh(plan, 3)
    end = drive_abcdp(state, _proposer(plan, state), decide, BatchPolicy(8))
    assert [r.step for r in seen] == list(range(1, end.steps + 1))
    assert end.sent == sum(r.n for r in seen) and end.queue.done
    assert all(r.remaining == plan.c - int(np.sum(end.queue.decisions[: int(r.ids[0])])) for r in seen)


@pytest.mark.parametrize("stop_at", [1, 3])
def test_resumed_from_checkpoint_equals_uninterrupted(stop_at: int) -> None:
    plan, parties = _setup(resample=True)
    state = AbcdpState.fresh(plan, 11)
    want = drive_abcdp(state, _proposer(plan, state), parties, BatchPolicy(6))

    plan, parties = _setup(resample=True)
    saved: list[dict[str, Any]] = []

    def checkpoint(st: AbcdpState) -> None:
        saved.append(json.loads(json.dumps(st.to_json())))
        if st.steps == stop_at:
            raise _Stop

    state = AbcdpState.fresh(plan, 11)
    with pytest.raises(_Stop):
        drive_abcdp(state, _proposer(plan, state), parties, BatchPolicy(6), on_step=checkpoint)
    start = AbcdpState.from_json(plan, saved[-1])
    got = drive_abcdp(start, _proposer(plan, start), parties, BatchPolicy(6))
    assert got.queue.accepted_thetas.tobytes() == want.queue.accepted_thetas.tobytes()
    np.testing.assert_array_equal(got.queue.decisions, want.queue.decisions)
    assert (got.steps, got.sent, got.rng_state) == (want.steps, want.sent, want.rng_state)
