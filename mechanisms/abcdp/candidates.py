"""The coordinator's side of a federated ABCDP run: :class:`CandidateQueue` (public candidates, suppressed
ones pushed back, exported and restored for the checkpoint), :func:`gate` (a batch's revealed bits) and
:func:`reference_decisions`, the float reference of the revealed bits. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp.federated import FederatedSvtPlan, distances_from_sum, is_int
from mechanisms.abcdp.svt_state import SvtStateError

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def gate(accept: npt.ArrayLike, remaining: int) -> BoolArray:
    """Keep the first ``remaining`` accepts, zero the rest (the revealed bits of a batch)."""
    a = np.array(accept, dtype=bool)
    if remaining < 0:
        raise ValueError(f"remaining must be >= 0, got {remaining}")
    hits = np.flatnonzero(a)
    if hits.size > remaining:
        a[hits[remaining]:] = False
    return a


def reference_decisions(
    plan: FederatedSvtPlan,
    feature_sums: npt.ArrayLike,
    phibar: npt.ArrayLike,
    taus: npt.ArrayLike,
    remaining: int,
) -> BoolArray:
    """Float reference of the revealed bits (the semantics of ``hss.svt.svt_plaintext``).

    ``feature_sums`` (m, D), ``phibar`` (n, D), ``taus`` (m, n): accept_i iff t_i ≥ 0 ∧ ρ_i² ≤ t_i² with
    t_i = ε_abc + Σ_j τ_j[i], ρ_i² = ‖S/N − φ̄_i‖²; gated to the first ``remaining`` accepts.
    """
    fs = np.atleast_2d(np.asarray(feature_sums, dtype=np.float64))
    tau = np.atleast_2d(np.asarray(taus, dtype=np.float64))
    rho = distances_from_sum(plan, fs.sum(axis=0), phibar)
    if tau.shape != (fs.shape[0], rho.shape[0]):
        raise ValueError(f"taus must have shape (m, n) = ({fs.shape[0]}, {rho.shape[0]}), got {tau.shape}")
    t = plan.eps_abc + tau.sum(axis=0)
    return gate((t >= 0.0) & (rho * rho <= t * t), remaining)


# -- the coordinator's candidate queue ----------------------------------------------------------


@dataclass
class CandidateQueue:
    """Public candidates (θ, φ̄) waiting for a decision, on the coordinator's side.

    ``push`` appends proposals; ``next_batch(n)`` hands out (up to) n from the front; ``settle(revealed)``
    consumes the candidates whose bits were revealed (up to and including the last accept if the batch was
    gated, else all), records the accepted θ's, and puts the suppressed ones back at the front. The counters
    mirror :class:`PartySvtState` (both are functions of the public revealed bits).
    """

    plan: FederatedSvtPlan
    count: int = 0
    n_proposed: int = 0
    n_suppressed: int = 0
    done: bool = False
    _thetas: FloatArray | None = field(default=None, repr=False)
    _phibars: FloatArray | None = field(default=None, repr=False)
    _ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    _in_flight: int | None = field(default=None, repr=False)
    _decisions: list[BoolArray] = field(default_factory=list, repr=False)
    _decided_ids: list[npt.NDArray[np.int64]] = field(default_factory=list, repr=False)
    _accepted: list[FloatArray] = field(default_factory=list, repr=False)

    @property
    def pending(self) -> int:
        """Candidates in the queue (including any batch in flight)."""
        return int(self._ids.shape[0])

    @property
    def remaining(self) -> int:
        if self.done:
            return 0
        return 1 if self.plan.resample else self.plan.c - self.count

    @property
    def n_evaluated(self) -> int:
        """Revealed decisions so far (suppressed evaluations are not counted)."""
        return int(sum(d.shape[0] for d in self._decisions))

    @property
    def decisions(self) -> BoolArray:
        return np.concatenate(self._decisions) if self._decisions else np.zeros(0, dtype=bool)

    @property
    def decided_ids(self) -> npt.NDArray[np.int64]:
        """Proposal-order ids of the decided candidates, in decision order."""
        return np.concatenate(self._decided_ids) if self._decided_ids else np.zeros(0, dtype=np.int64)

    @property
    def accepted_thetas(self) -> FloatArray:
        if not self._accepted:
            d = 0 if self._thetas is None else self._thetas.shape[1]
            return np.zeros((0, d))
        return np.concatenate(self._accepted, axis=0)

    @property
    def batch_ids(self) -> npt.NDArray[np.int64]:
        """Proposal-order ids of the batch in flight (empty if none)."""
        return self._ids[: self._in_flight or 0].copy()

    def push(self, thetas: npt.ArrayLike, phibars: npt.ArrayLike) -> None:
        """Append proposed candidates: θ (n, p) (or (n,)) and their simulated mean embeddings (n, D)."""
        th = np.asarray(thetas, dtype=np.float64)
        if th.ndim == 1:
            th = th[:, None]
        ph = np.asarray(phibars, dtype=np.float64)
        if th.ndim != 2 or ph.shape != (th.shape[0], self.plan.n_features):
            raise ValueError(
                f"push: thetas must be (n, p) and phibars (n, {self.plan.n_features}); "
                f"got {th.shape}, {ph.shape}"
            )
        if not (np.isfinite(th).all() and np.isfinite(ph).all()):
            raise ValueError("push: candidates must be finite")
        ids = np.arange(self.n_proposed, self.n_proposed + th.shape[0], dtype=np.int64)
        if self._thetas is None or self._phibars is None:
            self._thetas, self._phibars = th, ph
        else:
            if th.shape[1] != self._thetas.shape[1]:
                raise ValueError(f"push: theta dimension {th.shape[1]} != {self._thetas.shape[1]}")
            self._thetas = np.concatenate([self._thetas, th])
            self._phibars = np.concatenate([self._phibars, ph])
        self._ids = np.concatenate([self._ids, ids])
        self.n_proposed += th.shape[0]

    def next_batch(self, n: int) -> tuple[FloatArray, FloatArray]:
        """The (up to) n candidates at the front: (θ (k, p), φ̄ (k, D)); one batch in flight at a time."""
        if self.done:
            raise SvtStateError(f"next_batch: the run is done after {self.count} accepts")
        if self._in_flight is not None:
            raise SvtStateError("next_batch: the previous batch was not settled")
        if not is_int(n) or n < 1:
            raise ValueError(f"batch size must be a positive integer, got {n!r}")
        k = min(int(n), self.pending)
        if k == 0 or self._thetas is None or self._phibars is None:
            raise SvtStateError("next_batch: the queue is empty (push candidates first)")
        self._in_flight = k
        return self._thetas[:k].copy(), self._phibars[:k].copy()

    def settle(self, revealed: npt.ArrayLike) -> int:
        """Consume the batch in flight given its opened bits; returns the number of accepts."""
        if self._in_flight is None or self._thetas is None or self._phibars is None:
            raise SvtStateError("settle: no batch in flight")
        bits = np.asarray(revealed, dtype=bool)
        k_in = self._in_flight
        if bits.shape != (k_in,):
            raise ValueError(f"settle: revealed has shape {bits.shape}, the batch has {k_in} candidates")
        k = int(bits.sum())
        if k > self.remaining:
            raise SvtStateError(f"settle: {k} accepts revealed but at most {self.remaining} may be")
        used = int(np.flatnonzero(bits)[-1]) + 1 if (k and k == self.remaining) else k_in
        self._decisions.append(bits[:used].copy())
        self._decided_ids.append(self._ids[:used].copy())
        self._accepted.append(self._thetas[:used][bits[:used]])
        self.n_suppressed += k_in - used
        # the decided candidates leave; the suppressed ones stay at the front (re-evaluated next)
        self._thetas, self._phibars, self._ids = self._thetas[used:], self._phibars[used:], self._ids[used:]
        self._in_flight = None
        self.count += k
        if self.count >= self.plan.c:
            self.done = True
        return k

    # checkpoints (public state only: the coordinator writes it after every settled batch)

    def export(self) -> dict[str, Any]:
        """The queue between batches as plain values and numpy arrays (bit-exact; no batch in flight):
        counters, the pending candidates (θ, φ̄, proposal ids), and the decisions, decided ids and accepted
        θ's so far. :meth:`restore` is its inverse."""
        if self._in_flight is not None:
            raise SvtStateError("export: a batch is in flight (settle it first)")
        p = self._thetas.shape[1] if self._thetas is not None else None
        return {
            "count": self.count,
            "n_proposed": self.n_proposed,
            "n_suppressed": self.n_suppressed,
            "done": self.done,
            "theta_dim": p,
            "thetas": self._thetas.copy() if self._thetas is not None else np.zeros((0, 0)),
            "phibars": np.zeros((0, self.plan.n_features)) if self._phibars is None else self._phibars.copy(),
            "ids": self._ids.copy(),
            "decisions": self.decisions.copy(),
            "decided_ids": self.decided_ids.copy(),
            "accepted": self.accepted_thetas.copy(),
        }

    @classmethod
    def restore(cls, plan: FederatedSvtPlan, d: dict[str, Any]) -> CandidateQueue:
        """The queue :meth:`export` wrote; ValueError naming what is inconsistent (another plan's queue, a
        damaged checkpoint)."""
        try:
            count, n_proposed, n_suppressed = (int(d[k]) for k in ("count", "n_proposed", "n_suppressed"))
            done, p = bool(d["done"]), d["theta_dim"]
            thetas = np.asarray(d["thetas"], dtype=np.float64)
            phibars = np.asarray(d["phibars"], dtype=np.float64)
            ids = np.asarray(d["ids"], dtype=np.int64)
            decisions = np.asarray(d["decisions"], dtype=bool)
            decided_ids = np.asarray(d["decided_ids"], dtype=np.int64)
            accepted = np.asarray(d["accepted"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"candidate queue checkpoint: {type(exc).__name__}: {exc}") from exc
        k = ids.shape[0]
        problems = []
        if p is not None and (not is_int(p) or p < 1):
            problems.append(f"theta_dim {p!r}")
        if p is not None and (thetas.shape != (k, p) or phibars.shape != (k, plan.n_features)):
            problems.append(f"pending thetas {thetas.shape} / phibars {phibars.shape} for {k} ids")
        if p is None and (k or n_proposed):
            problems.append("candidates without a theta dimension")
        if decisions.ndim != 1 or decided_ids.shape != decisions.shape:
            problems.append(f"decisions {decisions.shape} vs decided ids {decided_ids.shape}")
        hits = int(decisions.sum())
        if count != hits or accepted.shape[0] != count or count > plan.c:
            problems.append(f"count {count}, {hits} accepts decided, {accepted.shape[0]} kept")
        elif count and (accepted.ndim != 2 or accepted.shape[1] != p):
            problems.append(f"accepted thetas {accepted.shape} for theta_dim {p}")
        decided = decided_ids.shape[0]
        if done != (count >= plan.c) or not 0 <= n_suppressed or n_proposed != k + decided:
            problems.append(f"done {done}, {n_proposed} proposed, {k} pending, {decided} decided")
        if not (np.isfinite(thetas).all() and np.isfinite(phibars).all() and np.isfinite(accepted).all()):
            problems.append("non-finite candidates")
        if problems:
            raise ValueError("candidate queue checkpoint is inconsistent: " + "; ".join(problems))
        q = cls(plan, count=count, n_proposed=n_proposed, n_suppressed=n_suppressed, done=done)
        if p is not None:
            q._thetas, q._phibars = thetas.copy(), phibars.copy()
        q._ids = ids.copy()
        if decisions.shape[0]:
            q._decisions, q._decided_ids = [decisions.copy()], [decided_ids.copy()]
        if accepted.shape[0]:
            q._accepted = [accepted.reshape(count, -1).copy()]
        return q
