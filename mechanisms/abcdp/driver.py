"""The one driver of federated c-sample ABCDP, and the seam where the SVT decisions are made.

    state = AbcdpState.fresh(plan, public_seed)
    proposer = PriorProposer(plan, prior_sample, simulate, state.generator())
    end = drive_abcdp(state, proposer, decide, BatchPolicy(batch_size=64), on_step=checkpoint)
    end.queue.accepted_thetas          # the c accepted θ's

The driver proposes candidates with the public generator (``prior_sample`` then ``simulate`` then the plan's
public feature map), keeps them in a :class:`~mechanisms.abcdp.candidates.CandidateQueue`, hands each batch
to an *SVT decider* and settles the queue with the bits it returns: candidates whose bit was suppressed
(after the batch's last allowed accept) go back to the front of the queue and are evaluated again, so the
revealed bits are sequential Algorithm 1 on the candidates in proposal order. It stops after c accepts (or
when its :class:`BatchPolicy` allows no more decisions or proposals).

The decider is any callable ``decide(SvtRequest) -> revealed bits``; the driver never knows how the bits
were made, exactly like the samplers' deciders (``mechanisms.samplers.decision``):

* ``mechanisms.abcdp.federated_run.LocalSvtParties`` — the m parties' SVT on shares in this process
  (``hss.svt`` over ``hss.runtime.run_in_memory``), or the float reference of the same gated decisions;
* ``coordinator.decider.NetworkSvtDecider`` — one ``Evaluate`` step of a session in reveal mode ``svt``.

Resume: ``on_step`` receives an :class:`AbcdpState` after every settled step — the candidate queue bit for
bit, the proposer's public generator state, the steps and candidates sent — and ``AbcdpState.to_json`` /
``from_json`` make it a JSON checkpoint; driving from a restored state makes exactly the requests the
uninterrupted run makes. Everything in the state and the requests is public (candidates from the public
generator, revealed bits); the secret noise lives with the deciders.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp.candidates import CandidateQueue
from mechanisms.abcdp.federated import FederatedSvtPlan, candidate_embeddings

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bits = npt.NDArray[np.bool_]

#: ``prior_sample(rng, k) -> thetas (k, p)`` (or (k,)) from the public generator.
PriorSampler = Callable[[np.random.Generator, int], F64]
#: ``simulate(thetas, rng) -> data (k, n_sim, d)`` (or (k, n_sim) for d = 1), public generator.
Simulator = Callable[[F64, np.random.Generator], F64]


@dataclass(frozen=True)
class SvtRequest:
    """One batch for the parties' SVT test; everything in it is public.

    ``phibar`` (n, D): the candidates' simulated mean embeddings; ``ids``: their proposal-order indices;
    ``remaining``: accepts still allowed before this batch (the queue's count of c); ``step``: the run step
    of this evaluation (1 for a run's first).
    """

    phibar: F64
    ids: I64
    remaining: int
    step: int

    @property
    def n(self) -> int:
        return int(self.phibar.shape[0])


#: ``decide(request) -> bits (n,)``: the revealed SVT bits of a batch (suppressed ones False).
SvtDecider = Callable[[SvtRequest], Bits]


class Proposer(Protocol):
    """Public candidates: ``propose(k) -> (thetas (k, p), phibars (k, D))``; ``public_state()`` is what a
    checkpoint keeps of the proposer to continue the same candidate stream ({} when nothing is kept)."""

    def __call__(self, k: int) -> tuple[F64, F64]: ...

    def public_state(self) -> dict[str, Any]: ...


@dataclass
class PriorProposer:
    """θ's from the prior, simulated and embedded with the plan's public feature map, all from the one public
    generator ``rng`` (never the noise's): ``thetas = prior_sample(rng, k)`` then ``simulate(thetas, rng)``,
    so a caller can reproduce the candidate stream exactly."""

    plan: FederatedSvtPlan
    prior_sample: PriorSampler
    simulate: Simulator
    rng: np.random.Generator

    def __call__(self, k: int) -> tuple[F64, F64]:
        thetas = np.asarray(self.prior_sample(self.rng, k), dtype=np.float64)
        return thetas, candidate_embeddings(self.plan, self.simulate(thetas, self.rng))

    def public_state(self) -> dict[str, Any]:
        return dict(self.rng.bit_generator.state)


@dataclass
class CallableProposer:
    """A caller's ``propose(k) -> (thetas, phibars)`` that keeps its own generator (not checkpointed)."""

    propose: Callable[[int], tuple[F64, F64]]

    def __call__(self, k: int) -> tuple[F64, F64]:
        return self.propose(k)

    def public_state(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class BatchPolicy:
    """How many candidates each step evaluates and proposes, and when the driver stops before c accepts.

    ``batch_size``: the largest batch. ``adaptive``: the batch is ⌈remaining / p̂⌉ clipped to
    [``min_batch``, ``batch_size``], p̂ = (accepts + 1)/(decisions + 2) — a function of the revealed bits only,
    so it costs no privacy. ``top_up``: when the queue holds fewer candidates than the batch, propose just
    enough to fill it (True) or a whole block of ``batch_size`` (False). ``max_decisions`` caps the revealed
    decisions, ``max_proposals`` the θ's drawn (None: no cap).
    """

    batch_size: int
    adaptive: bool = False
    min_batch: int = 8
    top_up: bool = False
    max_decisions: int | None = None
    max_proposals: int | None = None

    def stop(self, queue: CandidateQueue) -> bool:
        """c accepts reached, or the decisions cap."""
        return queue.done or (self.max_decisions is not None and queue.n_evaluated >= self.max_decisions)

    def batch(self, queue: CandidateQueue) -> int:
        n = self.batch_size
        if self.adaptive:
            p_hat = (queue.count + 1) / (queue.n_evaluated + 2)
            n = max(self.min_batch, min(self.batch_size, math.ceil(queue.remaining / p_hat)))
        if self.max_decisions is not None:
            n = min(n, self.max_decisions - queue.n_evaluated)
        return n

    def to_propose(self, queue: CandidateQueue, n: int) -> int:
        """Candidates to propose before a batch of ``n`` (0 when enough wait or the proposals cap is hit)."""
        if queue.pending >= n:
            return 0
        if self.top_up:
            return n - queue.pending
        if self.max_proposals is None:
            return self.batch_size
        return max(0, min(self.batch_size, self.max_proposals - queue.n_proposed))


@dataclass
class AbcdpState:
    """The driver's public state between two steps: everything needed to make exactly the requests of the
    uninterrupted run from here on. Nothing in it is secret (candidates from the public generator, revealed
    bits)."""

    queue: CandidateQueue
    rng_state: dict[str, Any]  # the public generator's bit_generator.state
    steps: int = 0  # run steps done (the run step of the next request is steps + 1)
    sent: int = 0  # candidates sent so far (suppressed ones count each time)

    @classmethod
    def fresh(cls, plan: FederatedSvtPlan, public_seed: int) -> AbcdpState:
        """A run's start: an empty queue and ``np.random.default_rng(public_seed)``'s state."""
        return cls(CandidateQueue(plan), dict(np.random.default_rng(public_seed).bit_generator.state))

    def generator(self) -> np.random.Generator:
        """The public generator at ``rng_state`` (a fresh object: drawing from it leaves the state as is)."""
        return _generator(self.rng_state)

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


def drive_abcdp(
    state: AbcdpState,
    propose: Proposer,
    decide: SvtDecider,
    policy: BatchPolicy,
    on_step: Callable[[AbcdpState], None] | None = None,
) -> AbcdpState:
    """Evaluate batches from ``state`` until c accepts (or the policy's caps); the state at the end.

    Per step: propose when the queue runs short (``policy.to_propose``), take the next batch (the suppressed
    candidates of the previous one first), ``decide`` it, settle the queue with the bits; then ``on_step``
    gets the state (an exception there stops the run). ``state.queue`` is updated in place.
    """
    queue = state.queue
    steps, sent = state.steps, state.sent
    while not policy.stop(queue):
        n = policy.batch(queue)
        k = policy.to_propose(queue, n)
        if k > 0:
            queue.push(*propose(k))
        if queue.pending == 0:
            break
        _, phibar = queue.next_batch(n)
        bits = decide(SvtRequest(phibar, queue.batch_ids, queue.remaining, steps + 1))
        queue.settle(bits)
        steps += 1
        sent += int(phibar.shape[0])
        if on_step is not None:
            on_step(AbcdpState(queue, propose.public_state(), steps, sent))
    return AbcdpState(queue, propose.public_state(), steps, sent)


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
