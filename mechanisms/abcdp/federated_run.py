"""In-memory federated c-sample ABCDP: m party machines and the coordinator's queue in one process.

:class:`LocalSvtParties` is the in-memory SVT decider of :func:`mechanisms.abcdp.driver.drive_abcdp` (the
network one is ``coordinator.decider.NetworkSvtDecider``): the pieces of :mod:`mechanisms.abcdp.federated`
the way the party daemons run them, with :func:`hss.runtime.run_in_memory` as the transport: one key setup
per run, then per batch every party computes its τ_j (:meth:`PartySvtState.noise_for_batch`), the parties
run ``hss.svt.svt_decide_party`` on (S_j, φ̄, τ_j), the coordinator decodes the gated accept bits with
``hss.svt.svt_decide_receiver`` and the parties update their states; the driver settles its
:class:`CandidateQueue` (suppressed candidates are re-evaluated with fresh noise).
:func:`run_abcdp_in_memory` wires the two together (the run over the party network is
``coordinator.abcdp.run_federated_abcdp``). Used by tests (the federated decisions against the
single-owner ones for the same noise) and by the federated toy reproduction in ``simulations/abcdp_repro/``.

``backend="plaintext"`` replaces the protocol by :func:`candidates.reference_decisions` (float arithmetic,
same gating, same noise shares): for checking the protocol against its specification, never a private
run (everything is computed in one place).

Randomness: ``public_rng`` (numpy, public) makes the session id; ``secret_rngs[j]`` (a CSPRNG, e.g.
``hss.randomness.SecureRandom.from_os()``) is party j's secret source for keys, shares and noise. The
candidates come from the caller's ``propose`` (public; must not depend on the private data).
``keep_trace=True`` records every party's noise τ_j per batch: secret, for tests and simulations only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from hss.modes import reveal_mode
from hss.runtime import ProtocolError, run_in_memory
from hss.session import PartyContext, SessionParams, key_setup
from mechanisms.abcdp import events
from mechanisms.abcdp.candidates import CandidateQueue, reference_decisions
from mechanisms.abcdp.driver import AbcdpState, BatchPolicy, CallableProposer, SvtRequest, drive_abcdp
from mechanisms.abcdp.federated import FederatedSvtPlan, party_feature_sum
from mechanisms.abcdp.svt import ABCDPResult
from mechanisms.abcdp.svt_state import PartySvtState

if TYPE_CHECKING:
    from hss.randomness import SecureRandom

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Backend = Literal["mpc", "plaintext"]

#: ``propose(n) -> (thetas (n, p), phibars (n, D))``: public candidates and their simulated mean embeddings.
FederatedProposer = Callable[[int], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]


@dataclass(frozen=True)
class BatchTrace:
    """One batch as the simulation saw it (secret: holds every party's noise)."""

    ids: npt.NDArray[np.int64]  # proposal-order ids of the batch's candidates
    taus: FloatArray = field(repr=False)  # (m, n): τ_j per party
    revealed: BoolArray
    remaining: int


@dataclass(frozen=True)
class InMemoryAbcdpResult(ABCDPResult):
    """An :class:`ABCDPResult` of a federated run plus what the parties and the transport saw.

    Attributes (beyond ABCDPResult's):
        party_events: the event each party charges to its ledger (one per run).
        n_suppressed: evaluations whose bits were suppressed by the gate (re-evaluated later; not revealed).
        n_batches: protocol runs (one per batch).
        n_proposed: candidates proposed (decided + still queued at the end).
        rounds, messages, bytes_sent: protocol totals over the run (0 for the plaintext backend).
        n_clamped: party terms clamped by the fixed-point format (should be 0).
        decided_ids: proposal-order id of each decided candidate (equal to ``arange(n_evaluated)``).
        trace: per-batch noise and bits when ``keep_trace`` was set (secret; tests only).
    """

    party_events: dict[int, events.AbcdpPrivacyEvent] = field(default_factory=dict)
    n_suppressed: int = 0
    n_batches: int = 0
    n_proposed: int = 0
    rounds: int = 0
    messages: int = 0
    bytes_sent: int = 0
    n_clamped: int = 0
    decided_ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    trace: tuple[BatchTrace, ...] | None = field(default=None, repr=False)


class _MpcDecider:
    """The decision protocol over an in-memory transport (one session per run)."""

    def __init__(
        self, plan: FederatedSvtPlan, m: int, public_rng: np.random.Generator,
        secret_rngs: Mapping[int, SecureRandom],
    ) -> None:
        from hss import svt as hsvt

        self._svt = hsvt
        self.plan = plan
        self.params = SessionParams(m=m, t=(m - 1) // 2, session_id=public_rng.bytes(16))
        reveal_mode("svt").check_supported(self.params)
        keys, _ = run_in_memory({p: key_setup(self.params, p, secret_rngs[p]) for p in range(1, m + 1)})
        self.ctxs = {p: PartyContext(self.params, keys[p]) for p in range(1, m + 1)}
        self.fmt = plan.svt_format(m)
        self.rngs = secret_rngs
        self.rounds = self.messages = self.bytes = self.clamped = 0

    def __call__(
        self, step: int, sums: Mapping[int, FloatArray], phibar: FloatArray, taus: Mapping[int, FloatArray],
        remaining: int,
    ) -> BoolArray:
        n = phibar.shape[0]
        machines = {
            p: self._svt.svt_decide_party(
                ctx, self.fmt, sums[p], phibar, taus[p], self.plan.eps_abc, remaining, step, self.rngs[p]
            )
            for p, ctx in self.ctxs.items()
        }
        results, tr = run_in_memory(machines)
        self.rounds += tr.rounds
        self.messages += tr.messages
        self.bytes += tr.bytes
        bits = np.asarray(self._svt.svt_decide_receiver(self.params, tr.to_receiver[-1], n), dtype=bool)
        for p, res in results.items():
            if not np.array_equal(np.asarray(res.revealed, dtype=bool), bits):
                raise ProtocolError(f"party {p} opened different bits than the receiver decoded")
            self.clamped += int(np.count_nonzero(res.clamped))
        return bits


class LocalSvtParties:
    """The in-memory SVT decider (:data:`~mechanisms.abcdp.driver.SvtDecider`): m parties' records, SVT states
    and secret generators in this process. Per request every party draws its τ_j
    (:meth:`PartySvtState.noise_for_batch`), the batch is decided by the protocol on shares (``"mpc"``) or
    by :func:`reference_decisions` (``"plaintext"``), and the parties update their states with the bits."""

    def __init__(
        self,
        plan: FederatedSvtPlan,
        shards: Sequence[npt.ArrayLike],
        m: int,
        public_rng: np.random.Generator,
        secret_rngs: Mapping[int, SecureRandom],
        backend: Backend = "mpc",
        keep_trace: bool = False,
    ) -> None:
        self.plan = plan
        self.sums: dict[int, FloatArray] = {}
        total = 0
        for p in range(1, m + 1):
            x = np.asarray(shards[p - 1], dtype=np.float64)
            total += x.shape[0]
            self.sums[p] = party_feature_sum(plan, x)
        if total != plan.n_records:
            raise ValueError(
                f"the shards hold {total} records but the plan says n_records = {plan.n_records}"
            )
        self.states = {p: PartySvtState(plan, m, secret_rngs[p]) for p in range(1, m + 1)}
        self.mpc = _MpcDecider(plan, m, public_rng, secret_rngs) if backend == "mpc" else None
        self.trace: list[BatchTrace] | None = [] if keep_trace else None

    def __call__(self, request: SvtRequest) -> BoolArray:
        phibar, remaining = request.phibar, request.remaining
        taus = {p: st.noise_for_batch(request.n) for p, st in self.states.items()}
        if any(st.remaining != remaining for st in self.states.values()):
            raise ProtocolError("party states and the coordinator's queue disagree on the remaining accepts")
        if self.mpc is not None:
            bits = self.mpc(request.step, self.sums, phibar, taus, remaining)
        else:
            bits = reference_decisions(
                self.plan, np.stack([self.sums[p] for p in sorted(self.sums)]), phibar,
                np.stack([taus[p] for p in sorted(taus)]), remaining,
            )
        if self.trace is not None:
            tau_all = np.stack([taus[p] for p in sorted(taus)])
            self.trace.append(BatchTrace(request.ids, tau_all, bits.copy(), remaining))
        for st in self.states.values():
            st.update(bits)
        return bits


@dataclass(frozen=True)
class InMemoryOptions:
    """How an in-memory federated ABCDP run is made: the candidates' cap, the backend, whether to keep the
    trace, and the adaptive batch with its smallest size."""

    max_candidates: int = 100_000
    backend: Backend = "mpc"
    keep_trace: bool = False
    adaptive_batch: bool = True
    min_batch: int = 8


def run_abcdp_in_memory(
    plan: FederatedSvtPlan,
    shards: Sequence[npt.ArrayLike],
    propose: FederatedProposer,
    m: int,
    batch_size: int,
    public_rng: np.random.Generator,
    secret_rngs: Mapping[int, SecureRandom],
    settings: InMemoryOptions | None = None,
) -> InMemoryAbcdpResult:
    """Run federated c-sample ABCDP until c accepts or ``max_candidates`` revealed decisions.

    ``shards[j - 1]`` are party j's records ((n_j, d), Σ n_j = plan.n_records); ``secret_rngs`` maps
    1..m to each party's CSPRNG. Each batch holds at most ``batch_size`` candidates (the suppressed ones
    of the previous batch first). Returns the accepted θ's, the revealed bits in decision order, and each
    party's privacy event (the whole-run ε of the plan, charged once).

    With ``adaptive_batch`` the batch size is ⌈remaining / p̂⌉ clipped to [min_batch, batch_size], p̂ the
    acceptance rate so far ((accepts + 1)/(decisions + 2)): a public function of the revealed bits, so it
    costs no privacy, and it keeps the evaluations wasted by gating (each accept with RESAMPLE suppresses
    the rest of its batch) near one batch's worth per accept. The loop is :func:`driver.drive_abcdp`, the
    decider :class:`LocalSvtParties`.
    """
    _s = settings if settings is not None else InMemoryOptions()
    max_candidates, backend, keep_trace = _s.max_candidates, _s.backend, _s.keep_trace
    adaptive_batch, min_batch = _s.adaptive_batch, _s.min_batch
    if not isinstance(m, int) or m < 1:
        raise ValueError(f"number of parties m must be a positive integer, got {m!r}")
    if backend == "mpc" and m < 3:
        raise ValueError(f"the SVT decision protocol needs an honest majority, m >= 3 parties; got m = {m}")
    if backend not in ("mpc", "plaintext"):
        raise ValueError(f"backend must be 'mpc' or 'plaintext', got {backend!r}")
    if len(shards) != m:
        raise ValueError(f"{len(shards)} shards for m = {m} parties")
    if set(secret_rngs) != set(range(1, m + 1)):
        raise ValueError(f"secret_rngs must have keys 1..{m}, got {sorted(secret_rngs)}")
    if batch_size < 1 or max_candidates < 1:
        raise ValueError("batch_size and max_candidates must be >= 1")
    parties = LocalSvtParties(plan, shards, m, public_rng, secret_rngs, backend, keep_trace)
    policy = BatchPolicy(
        batch_size, adaptive=adaptive_batch, min_batch=min_batch, top_up=True, max_decisions=max_candidates
    )
    end = drive_abcdp(AbcdpState(CandidateQueue(plan), {}), CallableProposer(propose), parties, policy)
    return _result(plan, end, parties)


def _result(plan: FederatedSvtPlan, end: AbcdpState, parties: LocalSvtParties) -> InMemoryAbcdpResult:
    queue, mpc = end.queue, parties.mpc
    decisions = queue.decisions
    return InMemoryAbcdpResult(
        thetas=queue.accepted_thetas,
        accepted_index=np.flatnonzero(decisions).astype(np.int64),
        decisions=decisions,
        halted=queue.done,
        event=plan.privacy_event(),
        party_events={p: plan.privacy_event() for p in parties.states},
        n_suppressed=queue.n_suppressed,
        n_batches=end.steps,
        n_proposed=queue.n_proposed,
        rounds=mpc.rounds if mpc else 0,
        messages=mpc.messages if mpc else 0,
        bytes_sent=mpc.bytes if mpc else 0,
        n_clamped=mpc.clamped if mpc else 0,
        decided_ids=queue.decided_ids,
        trace=tuple(parties.trace) if parties.trace is not None else None,
    )


def summed_noise_by_candidate(result: InMemoryAbcdpResult) -> FloatArray:
    """Σ_j τ_j used at each decided candidate's revealed evaluation, in decision order (needs a trace).

    Suppressed evaluations are skipped: their noise never influenced a revealed bit.
    """
    if result.trace is None:
        raise ValueError("the run was not traced (keep_trace=True)")
    noise: dict[int, float] = {}
    for bt in result.trace:
        total = bt.taus.sum(axis=0)
        hits = np.flatnonzero(bt.revealed)
        used = int(hits[-1]) + 1 if (hits.size and hits.size == bt.remaining) else bt.ids.shape[0]
        for i in range(used):
            noise[int(bt.ids[i])] = float(total[i])
    return np.array([noise[int(i)] for i in result.decided_ids])
