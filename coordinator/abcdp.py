"""Federated ABCDP over the party network, coordinator side: the driver of one c-sample ABCDP run.

    plan = FederatedSvtPlan(eps_abc=0.1, eps_total=1.0, c=20, resample=False, n_records=5000,
                            n_features=100, bandwidth=0.6, dim=1, map_seed=7)
    with BlockingCoordinator(endpoints, tls) as coord:
        res = run_federated_abcdp(coord, plan, prior_sample, simulate, batch_size=64, public_seed=1)
    res.thetas            # the c accepted θ's (posterior sample of ABCDP)

The coordinator opens a session in reveal mode ``svt`` with the analysis ``abcdp-rff`` (``parties.abcdp``;
``model_params`` = ``plan.to_params()`` plus optional ``columns``) and runs the one ABCDP driver,
:func:`mechanisms.abcdp.driver.drive_abcdp` (the in-memory run uses the same), with the network decider
:class:`coordinator.decider.NetworkSvtDecider`: it proposes θ's from the prior with the PUBLIC generator
``np.random.default_rng(public_seed)``, simulates, embeds the simulated data with the public feature map
(``candidate_embeddings``) and sends the embeddings batch by batch (``inputs = {"phibar": ...}``).
The parties answer with the SVT bits only; a :class:`~mechanisms.abcdp.candidates.CandidateQueue` keeps the
candidates whose bit was suppressed (after the batch's last allowed accept) for the next batch, so the
revealed bits are the decision sequence of sequential Algorithm 1 on the candidates in proposal order. The
run stops after c accepts, and the session is closed.

Candidates are drawn in blocks of ``batch_size`` whenever fewer than ``batch_size`` wait in the queue:
``thetas = prior_sample(rng, batch_size)`` then ``simulate(thetas, rng)`` with the one public generator, so
a caller can reproduce the candidate stream exactly (the tests compare with single-owner rejection ABC).

Runs and resume: with ``run_id`` the session is a session of that run (``confar run`` gives every run one),
and the run continues from an :class:`~mechanisms.abcdp.driver.AbcdpState` (``start``): the candidate
queue bit for bit (pending θ's and embeddings, decisions, decided ids, accepted θ's, counters), the public
generator's state, the steps and candidates sent so far. ``on_step`` receives the state after every
settled step (the caller checkpoints it: :meth:`AbcdpState.to_json`); a resumed run opens its session at
run step ``steps + 1``, checks that every party's last completed run step is ``steps`` or ``steps + 1`` (a
step done after the checkpoint), and then makes exactly the requests the uninterrupted run makes. The
parties replay or re-evaluate the step the checkpoint missed, draw their noise from their run keys and
charge the run's epsilon once per run (``parties.abcdp``), so with the same party noise keys the resumed
run decides exactly as the uninterrupted one.

What the coordinator learns: the accept bits of the decided candidates (which it needs anyway: they are the
output), nothing about the noise or the parties' feature sums. The privacy charge is the parties' business:
each charges the plan's whole-run ε once, in its own ledger (``charged_epsilons`` reads it back).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import (
    BlockingCoordinator,
    BlockingSession,
    Coordinator,
    CoordinatorSession,
    SessionError,
    SessionOptions,
)
from coordinator.decider import NetworkSvtDecider
from mechanisms.abcdp.driver import (
    AbcdpState,
    BatchPolicy,
    PriorProposer,
    PriorSampler,
    Simulator,
    drive_abcdp,
)
from mechanisms.abcdp.federated import FederatedSvtPlan
from proto import serde_privacy

__all__ = [
    "AbcdpProgress", "AbcdpState", "FederatedAbcdpResult", "PriorSampler", "Simulator", "charged_epsilons",
    "run_federated_abcdp", "session_params",
]

F64 = npt.NDArray[np.float64]

MODE = "svt"
ANALYSIS = "abcdp-rff"


@dataclass(frozen=True)
class AbcdpProgress:
    """Public progress after each step (for progress bars): accepts so far of c, decisions revealed."""

    step: int
    accepted: int
    c: int
    evaluated: int
    sent: int
    elapsed_s: float


ProgressFn = Callable[[AbcdpProgress], None]


@dataclass
class FederatedAbcdpResult:
    """Outcome of one federated run (everything here is public)."""

    plan: FederatedSvtPlan
    thetas: F64  # accepted θ's, (n_accepted, p), in decision order
    decisions: npt.NDArray[np.bool_]  # the revealed bits, in decision order
    decided_ids: npt.NDArray[np.int64]  # proposal-order index of each decided candidate
    n_proposed: int  # θ's drawn from the prior
    n_sent: int  # candidates sent to the parties (suppressed ones are sent again)
    steps: int  # Evaluate steps (run steps of the whole run, when resumed)
    done: bool  # c accepts reached
    session_id: bytes  # the (last) session's id; empty if a resumed run had nothing left to ask
    timings: dict[str, float] = field(default_factory=dict)  # total_s, propose_s, evaluate_s

    @property
    def n_evaluated(self) -> int:
        """Revealed decisions (suppressed evaluations, which revealed nothing, not counted)."""
        return int(self.decisions.shape[0])

    @property
    def n_accepted(self) -> int:
        return int(self.thetas.shape[0])

    @property
    def accepted_ids(self) -> npt.NDArray[np.int64]:
        """Proposal-order indices of the accepted candidates."""
        return self.decided_ids[self.decisions]

    @property
    def decisions_per_s(self) -> float:
        t = self.timings.get("total_s", 0.0)
        return self.n_evaluated / t if t > 0 else math.nan

    def posterior_mean(self) -> F64:
        if self.n_accepted == 0:
            return np.full(self.thetas.shape[1] if self.thetas.ndim == 2 else 0, np.nan)
        return np.asarray(self.thetas.mean(axis=0), dtype=np.float64)


def session_params(plan: FederatedSvtPlan, columns: list[str] | None = None) -> dict[str, Any]:
    """The session's ``model_params``: the plan, plus the data columns holding Y* (if not all of them)."""
    params = plan.to_params()
    if columns is not None:
        params["columns"] = list(columns)
    return params


@dataclass(frozen=True)
class FederatedRunOptions:
    """A federated ABCDP session's options: the feature columns, the topology and security, the cap on
    proposals, the progress callback, the session and run ids, the checkpointed state to continue from, and
    the hooks called with the open session and after every settled step."""

    columns: list[str] | None = None
    topology: str = "mesh"
    security: str = "semi-honest"
    max_proposals: int | None = None
    progress: ProgressFn | None = None
    session_id: bytes | None = None
    run_id: str | None = None
    start: AbcdpState | None = None
    on_open: Callable[[CoordinatorSession], None] | None = None
    on_step: Callable[[AbcdpState], None] | None = None


def run_federated_abcdp(
    coord: BlockingCoordinator,
    plan: FederatedSvtPlan,
    prior_sample: PriorSampler,
    simulate: Simulator,
    batch_size: int,
    public_seed: int,
    settings: FederatedRunOptions | None = None,
) -> FederatedAbcdpResult:
    """Run one federated c-sample ABCDP session to c accepts (see the module docstring).

    ``security``: the session's ("abort": hss.abort_svt at every party, the bits decoded by the receiver
    only if all m output shares agree, else ``SessionError`` naming the step and the round).
    ``max_proposals`` caps the θ's drawn from the prior (None: no cap); the run then ends with ``done``
    False. The privacy charge does not depend on how many candidates are evaluated. With ``run_id`` the
    session belongs to that run; ``start`` continues the run from a checkpointed state (a run id is then
    required); ``on_open`` is called with the open session, ``on_step`` with the state after every settled
    step (an exception there stops the run like a failure), ``progress`` after it (all in the caller's
    thread). On any failure the session is aborted at every party and the error
    (``coordinator.api.SessionError``) propagates.
    """
    _s = settings if settings is not None else FederatedRunOptions()
    columns, topology, security = _s.columns, _s.topology, _s.security
    max_proposals, progress, session_id = _s.max_proposals, _s.progress, _s.session_id
    run_id, start, on_open = _s.run_id, _s.start, _s.on_open
    on_step = _s.on_step
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_proposals is not None and max_proposals < 1:
        raise ValueError(f"max_proposals must be >= 1, got {max_proposals}")
    if start is not None and not run_id:
        raise ValueError("continuing from a checkpointed state needs the run's run_id")
    state = AbcdpState.fresh(plan, public_seed) if start is None else start
    t0 = time.perf_counter()
    if state.finished(max_proposals):  # a run whose checkpoint is after its last step: nothing to ask
        return _result(plan, state, b"", {"total_s": 0.0, "propose_s": 0.0, "evaluate_s": 0.0})
    sess = coord.open_session(SessionOptions(
        reveal_mode=MODE,
        model=ANALYSIS,
        model_params=session_params(plan, columns),
        topology=topology,
        session_id=session_id,
        run_id=run_id,
        first_run_step=state.steps + 1,
        security=security,
    ))
    proposer = _TimedProposer(PriorProposer(plan, prior_sample, simulate, state.generator()))
    decider = NetworkSvtDecider(sess)
    policy = BatchPolicy(batch_size, max_proposals=max_proposals)
    try:
        _check_resume(sess, run_id, state.steps)
        if on_open is not None:
            on_open(sess.session)
        end = drive_abcdp(state, proposer, decider, policy, _AfterStep(plan, t0, on_step, progress))
    except BaseException:
        sess.abort("federated ABCDP driver failed")
        raise
    sess.close("ABCDP run done" if end.queue.done else "ABCDP run stopped (max_proposals)")
    total_s = time.perf_counter() - t0
    timings = {"total_s": total_s, "propose_s": proposer.seconds, "evaluate_s": decider.seconds}
    return _result(plan, end, sess.session.session_id, timings)


def _check_resume(sess: BlockingSession, run_id: str | None, steps: int) -> None:
    """Every party must hold the checkpoint's run step, or the one after it."""
    if not run_id:
        return
    bad = {pid: s for pid, s in sess.resume.items() if s not in (steps, steps + 1)}
    if bad:
        raise SessionError(
            f"run {run_id!r} continues after run step {steps}, but parties report their last "
            f"completed run step as {bad} (expected {steps} or {steps + 1}): the checkpoint does not "
            "belong with these parties' records; not continuing"
        )


@dataclass
class _TimedProposer:
    """A proposer that adds up the wall time spent proposing (simulating and embedding)."""

    inner: PriorProposer
    seconds: float = 0.0

    def __call__(self, k: int) -> tuple[F64, F64]:
        t = time.perf_counter()
        try:
            return self.inner(k)
        finally:
            self.seconds += time.perf_counter() - t

    def public_state(self) -> dict[str, Any]:
        return self.inner.public_state()


@dataclass
class _AfterStep:
    """The driver's ``on_step``: the caller's checkpoint hook, then its progress report."""

    plan: FederatedSvtPlan
    t0: float
    on_step: Callable[[AbcdpState], None] | None
    progress: ProgressFn | None

    def __call__(self, st: AbcdpState) -> None:
        if self.on_step is not None:
            self.on_step(st)
        if self.progress is not None:
            q = st.queue
            elapsed = time.perf_counter() - self.t0
            self.progress(AbcdpProgress(st.steps, q.count, self.plan.c, q.n_evaluated, st.sent, elapsed))


def _result(
    plan: FederatedSvtPlan, state: AbcdpState, session_id: bytes, timings: dict[str, float]
) -> FederatedAbcdpResult:
    queue = state.queue
    return FederatedAbcdpResult(
        plan=plan,
        thetas=queue.accepted_thetas,
        decisions=queue.decisions,
        decided_ids=queue.decided_ids,
        n_proposed=queue.n_proposed,
        n_sent=state.sent,
        steps=state.steps,
        done=queue.done,
        session_id=session_id,
        timings=timings,
    )


async def acharged_epsilons(coord: Coordinator, session_id: bytes) -> dict[int, float]:
    """Each party's ε charged for one session, read from its own ledger (``PrivacyReport``).

    0.0 for a party that recorded nothing (no privacy budget configured: nothing is enforced or recorded).
    The numbers are the parties' own (``parties.abcdp``: the plan's whole-run ε, once per session)."""
    from mechanisms.privacy import event_from_dict

    answers = await coord.call_all(
        "privacy report", lambda _: serde_privacy.report_request_to_proto(), "PrivacyReport"
    )
    tag = f"session {session_id.hex()[:16]}"
    out: dict[int, float] = {}
    for pid, resp in answers.items():
        total = 0.0
        for raw in json.loads(resp.events_json or "[]"):
            ev = event_from_dict(raw)
            if tag in ev.label:
                total += float(getattr(ev, "eps", math.nan)) * ev.count
        out[pid] = total
    return out


def charged_epsilons(coord: BlockingCoordinator, session_id: bytes) -> dict[int, float]:
    return coord._run(acharged_epsilons(coord.coord, session_id))
