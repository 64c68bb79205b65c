"""Federated ABCDP over the party network, coordinator side: the driver of one c-sample ABCDP run.

    plan = FederatedSvtPlan(eps_abc=0.1, eps_total=1.0, c=20, resample=False, n_records=5000,
                            n_features=100, bandwidth=0.6, dim=1, map_seed=7)
    with BlockingCoordinator(endpoints, tls) as coord:
        res = run_federated_abcdp(coord, plan, prior_sample, simulate, batch_size=64, public_seed=1)
    res.thetas            # the c accepted θ's (posterior sample of ABCDP)

The coordinator opens a session in reveal mode ``svt`` with the analysis ``abcdp-rff`` (``parties.abcdp``;
``model_params`` = ``plan.to_params()`` plus optional ``columns``), proposes θ's from the prior with the
PUBLIC generator ``np.random.default_rng(public_seed)``, simulates, embeds the simulated data with the public
feature map (``candidate_embeddings``) and sends the embeddings batch by batch (``inputs = {"phibar": ...}``).
The parties answer with the SVT bits only; a :class:`~mechanisms.abcdp.federated.CandidateQueue` keeps the
candidates whose bit was suppressed (after the batch's last allowed accept) for the next batch, so the
revealed bits are the decision sequence of sequential Algorithm 1 on the candidates in proposal order. The
run stops after c accepts, and the session is closed.

Candidates are drawn in blocks of ``batch_size`` whenever fewer than ``batch_size`` wait in the queue:
``thetas = prior_sample(rng, batch_size)`` then ``simulate(thetas, rng)`` with the one public generator, so
a caller can reproduce the candidate stream exactly (the tests compare with single-owner rejection ABC).

Runs and resume: with ``run_id`` the session is a session of that run (``confar run`` gives every run one),
and the run continues from an :class:`AbcdpState` (``start``): the candidate queue bit for bit (pending θ's
and embeddings, decisions, decided ids, accepted θ's, counters), the public generator's state, the steps and
candidates sent so far. ``on_step`` receives the state after every settled step (the caller checkpoints it:
:meth:`AbcdpState.to_json`); a resumed run opens its session at run step ``steps + 1``, checks that every
party's last completed run step is ``steps`` or ``steps + 1`` (a step done after the checkpoint), and then
makes exactly the requests the uninterrupted run makes. The parties replay or re-evaluate the step the
checkpoint missed, draw their noise from their run keys and charge the run's epsilon once per run
(``parties.abcdp``), so with the same party noise keys the resumed run decides exactly as the uninterrupted
one.

What the coordinator learns: the accept bits of the decided candidates (which it needs anyway: they are the
output), nothing about the noise or the parties' feature sums. The privacy charge is the parties' business:
each charges the plan's whole-run ε once, in its own ledger (``charged_epsilons`` reads it back).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import BlockingCoordinator, Coordinator, CoordinatorSession, SessionError
from mechanisms.abcdp.federated import CandidateQueue, FederatedSvtPlan, candidate_embeddings
from proto import party_pb2

F64 = npt.NDArray[np.float64]

MODE = "svt"
ANALYSIS = "abcdp-rff"

#: ``prior_sample(rng, k) -> thetas (k, p)`` (or (k,)) from the public generator.
PriorSampler = Callable[[np.random.Generator, int], npt.NDArray[np.float64]]
#: ``simulate(thetas, rng) -> data (k, n_sim, d)`` (or (k, n_sim) for d = 1), public generator.
Simulator = Callable[[npt.NDArray[np.float64], np.random.Generator], npt.NDArray[np.float64]]


@dataclass(frozen=True)
class AbcdpProgress:
    """Public progress after each step (for progress bars): accepts so far of c, decisions revealed."""

    step: int
    accepted: int
    c: int
    evaluated: int
    sent: int
    elapsed_s: float

    @property
    def fraction(self) -> float:
        return self.accepted / self.c


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


@dataclass
class AbcdpState:
    """The coordinator's public state of a run between two steps: everything needed to make exactly the
    requests of the uninterrupted run from here on. Nothing in it is secret (candidates from the public
    generator, revealed bits)."""

    queue: CandidateQueue
    rng_state: dict[str, Any]  # the public generator's bit_generator.state
    steps: int = 0  # run steps done (the run step of the next request is steps + 1)
    sent: int = 0  # candidates sent so far (suppressed ones count each time)

    def finished(self, max_proposals: int | None) -> bool:
        """c accepts reached, or every allowed candidate proposed and decided."""
        q = self.queue
        return q.done or (max_proposals is not None and q.n_proposed >= max_proposals and q.pending == 0)

    def to_json(self) -> dict[str, Any]:
        """JSON-safe and bit-exact (arrays as base64 of their little-endian bytes)."""
        queue = self.queue.export()
        return {
            "queue": {k: _array_to_json(v) if isinstance(v, np.ndarray) else v for k, v in queue.items()},
            "rng_state": self.rng_state,
            "steps": self.steps,
            "sent": self.sent,
        }

    @classmethod
    def from_json(cls, plan: FederatedSvtPlan, d: dict[str, Any]) -> AbcdpState:
        """Inverse of :meth:`to_json`; ValueError naming what is wrong."""
        try:
            q = {k: _array_from_json(v) if isinstance(v, dict) else v for k, v in d["queue"].items()}
            rng_state, steps, sent = d["rng_state"], d["steps"], d["sent"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"ABCDP checkpoint: missing or malformed {exc}") from exc
        if not (type(steps) is int and type(sent) is int and steps >= 0 and sent >= 0):
            raise ValueError(f"ABCDP checkpoint: steps {steps!r} and sent {sent!r} must be integers >= 0")
        _generator(rng_state)  # refuses a state of another generator
        return cls(CandidateQueue.restore(plan, q), rng_state, steps, sent)


def _array_to_json(a: npt.NDArray[Any]) -> dict[str, Any]:
    le = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype)
    return {"dtype": le.dtype.str, "shape": list(le.shape), "data": base64.b64encode(le.tobytes()).decode()}


def _array_from_json(d: dict[str, Any]) -> npt.NDArray[Any]:
    try:
        dt = np.dtype(d["dtype"])
        if dt.str not in ("<f8", "<i8", "|b1"):
            raise ValueError(f"unexpected dtype {dt.str}")
        raw = base64.b64decode(d["data"], validate=True)
        return np.frombuffer(raw, dtype=dt).reshape([int(n) for n in d["shape"]]).copy()
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"ABCDP checkpoint: bad array {str(d)[:80]!r}: {exc}") from exc


def _generator(state: Any) -> np.random.Generator:
    """A public generator at ``state`` (a ``bit_generator.state`` of numpy's default PCG64)."""
    rng = np.random.default_rng(0)
    if not isinstance(state, dict) or state.get("bit_generator") != type(rng.bit_generator).__name__:
        raise ValueError(f"ABCDP checkpoint: not a {type(rng.bit_generator).__name__} generator state")
    try:
        rng.bit_generator.state = state
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"ABCDP checkpoint: bad generator state: {exc}") from exc
    return rng


def session_params(plan: FederatedSvtPlan, columns: list[str] | None = None) -> dict[str, Any]:
    """The session's ``model_params``: the plan, plus the data columns holding Y* (if not all of them)."""
    params = plan.to_params()
    if columns is not None:
        params["columns"] = list(columns)
    return params


async def arun_federated_abcdp(
    coord: Coordinator,
    plan: FederatedSvtPlan,
    prior_sample: PriorSampler,
    simulate: Simulator,
    batch_size: int,
    public_seed: int,
    *,
    columns: list[str] | None = None,
    topology: str = "mesh",
    max_proposals: int | None = None,
    progress: ProgressFn | None = None,
    session_id: bytes | None = None,
    run_id: str | None = None,
    start: AbcdpState | None = None,
    on_open: Callable[[CoordinatorSession], None] | None = None,
    on_step: Callable[[AbcdpState], None] | None = None,
) -> FederatedAbcdpResult:
    """Run one federated c-sample ABCDP session to c accepts (see the module docstring).

    ``max_proposals`` caps the θ's drawn from the prior (None: no cap); the run then ends with ``done``
    False. The privacy charge does not depend on how many candidates are evaluated. With ``run_id`` the
    session belongs to that run; ``start`` continues the run from a checkpointed state (a run id is then
    required); ``on_open`` is called with the open session, ``on_step`` with the state after every settled
    step (an exception there stops the run like a failure). On any failure the session is aborted at every
    party and the error (``coordinator.api.SessionError``) propagates.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if max_proposals is not None and max_proposals < 1:
        raise ValueError(f"max_proposals must be >= 1, got {max_proposals}")
    if start is not None and not run_id:
        raise ValueError("continuing from a checkpointed state needs the run's run_id")
    if start is None:
        rng = np.random.default_rng(public_seed)  # public: proposals and simulations only, never noise
        state = AbcdpState(CandidateQueue(plan), dict(rng.bit_generator.state))
    else:
        rng, state = _generator(start.rng_state), start
    queue = state.queue
    steps, sent = state.steps, state.sent
    t0 = time.perf_counter()
    propose_s = evaluate_s = 0.0
    if state.finished(max_proposals):  # a run whose checkpoint is after its last step: nothing to ask
        return _result(plan, queue, sent, steps, b"", {"total_s": 0.0, "propose_s": 0.0, "evaluate_s": 0.0})
    sess: CoordinatorSession = await coord.open_session(
        reveal_mode=MODE,
        model=ANALYSIS,
        model_params=session_params(plan, columns),
        topology=topology,
        session_id=session_id,
        run_id=run_id,
        first_run_step=steps + 1,
    )
    try:
        if run_id:  # every party must hold the checkpoint's run step, or the one after it
            bad = {pid: s for pid, s in sess.resume.items() if s not in (steps, steps + 1)}
            if bad:
                raise SessionError(
                    f"run {run_id!r} continues after run step {steps}, but parties report their last "
                    f"completed run step as {bad} (expected {steps} or {steps + 1}): the checkpoint does not "
                    "belong with these parties' records; not continuing"
                )
        if on_open is not None:
            on_open(sess)
        while not queue.done:
            if queue.pending < batch_size and (max_proposals is None or queue.n_proposed < max_proposals):
                tp = time.perf_counter()
                k = batch_size if max_proposals is None else min(batch_size, max_proposals - queue.n_proposed)
                thetas = np.asarray(prior_sample(rng, k), dtype=np.float64)
                phibar = candidate_embeddings(plan, simulate(thetas, rng))
                queue.push(thetas, phibar)
                propose_s += time.perf_counter() - tp
            if queue.pending == 0:
                break
            _, phibar = queue.next_batch(batch_size)
            te = time.perf_counter()
            d = await sess.evaluate({"phibar": phibar}, phibar.shape[0])
            evaluate_s += time.perf_counter() - te
            queue.settle(d.accept)
            steps += 1
            sent += int(phibar.shape[0])
            if on_step is not None:
                on_step(AbcdpState(queue, dict(rng.bit_generator.state), steps, sent))
            if progress is not None:
                progress(
                    AbcdpProgress(
                        step=steps,
                        accepted=queue.count,
                        c=plan.c,
                        evaluated=queue.n_evaluated,
                        sent=sent,
                        elapsed_s=time.perf_counter() - t0,
                    )
                )
    except BaseException:
        await sess.abort("federated ABCDP driver failed")
        raise
    await sess.close("ABCDP run done" if queue.done else "ABCDP run stopped (max_proposals)")
    timings = {"total_s": time.perf_counter() - t0, "propose_s": propose_s, "evaluate_s": evaluate_s}
    return _result(plan, queue, sent, steps, sess.session_id, timings)


def _result(
    plan: FederatedSvtPlan,
    queue: CandidateQueue,
    sent: int,
    steps: int,
    session_id: bytes,
    timings: dict[str, float],
) -> FederatedAbcdpResult:
    return FederatedAbcdpResult(
        plan=plan,
        thetas=queue.accepted_thetas,
        decisions=queue.decisions,
        decided_ids=queue.decided_ids,
        n_proposed=queue.n_proposed,
        n_sent=sent,
        steps=steps,
        done=queue.done,
        session_id=session_id,
        timings=timings,
    )


def run_federated_abcdp(
    coord: BlockingCoordinator,
    plan: FederatedSvtPlan,
    prior_sample: PriorSampler,
    simulate: Simulator,
    batch_size: int,
    public_seed: int,
    **kwargs: Any,
) -> FederatedAbcdpResult:
    """Synchronous :func:`arun_federated_abcdp` on a :class:`BlockingCoordinator` (same keyword options;
    ``progress`` is called from the coordinator's event-loop thread)."""
    return coord._run(
        arun_federated_abcdp(coord.coord, plan, prior_sample, simulate, batch_size, public_seed, **kwargs)
    )


async def acharged_epsilons(coord: Coordinator, session_id: bytes) -> dict[int, float]:
    """Each party's ε charged for one session, read from its own ledger (``PrivacyReport``).

    0.0 for a party that recorded nothing (no privacy budget configured: nothing is enforced or recorded).
    The numbers are the parties' own (``parties.abcdp``: the plan's whole-run ε, once per session)."""
    from mechanisms.privacy import event_from_dict

    answers = await coord.call_all(
        "privacy report", lambda _: party_pb2.PrivacyReportRequest(), "PrivacyReport"
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
