"""One party's secret sparse-vector state in a federated ABCDP run (``mechanisms.abcdp.federated`` has the
plan, the threat model and the noise shares): the public counters :class:`SvtCounters`, functions of the
revealed bits only, and :class:`PartySvtState`, the threshold share and counters, rebuilt from the counters
and the run's keys after a crash. Pure, secret randomness passed in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp.federated import FederatedSvtPlan, is_int, laplace_share

if TYPE_CHECKING:
    from hss.randomness import SecureRandom

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


class SvtStateError(RuntimeError):
    """A party's SVT state was asked to do something the run does not allow (over-reveal, after done)."""


# -- one party's secret state -------------------------------------------------------------------


@dataclass(frozen=True)
class SvtCounters:
    """The public counters of a party's SVT state: functions of the revealed bits only, so every party and
    the coordinator agree on them, and they can be written down (a run's resume record) without any secret.

    ``count``: accepts revealed so far; ``epoch``: threshold epoch (0 without RESAMPLE; with RESAMPLE the
    number of accepts, except that the c-th accept starts no new epoch); ``n_decided``: candidates whose
    decision was revealed; ``done``: c accepts reached.
    """

    count: int = 0
    epoch: int = 0
    n_decided: int = 0
    done: bool = False

    def check(self, plan: FederatedSvtPlan) -> None:
        """ValueError unless these counters are reachable under ``plan`` (a state written by another run,
        or damaged, is refused before any noise is drawn from it)."""
        ints = (self.count, self.epoch, self.n_decided)
        if not all(is_int(v) and v >= 0 for v in ints) or not isinstance(self.done, bool):
            raise ValueError(f"SVT counters {self} must be integers >= 0 and a bool")
        if self.count > plan.c or self.done != (self.count >= plan.c) or self.n_decided < self.count:
            raise ValueError(f"SVT counters {self} are inconsistent with c = {plan.c}")
        epoch = (self.count - int(self.done)) if plan.resample else 0
        if self.epoch != epoch:
            raise ValueError(
                f"SVT counters {self}: epoch must be {epoch} after {self.count} accepts "
                f"(resample = {plan.resample})"
            )

    def remaining(self, plan: FederatedSvtPlan) -> int:
        """How many accepts the next batch may reveal: 1 with RESAMPLE, c − count without; 0 when done."""
        if self.done:
            return 0
        return 1 if plan.resample else plan.c - self.count

    def after(self, plan: FederatedSvtPlan, revealed: npt.ArrayLike) -> SvtCounters:
        """The counters after a batch whose opened bits are ``revealed``. SvtStateError if the bits reveal
        more than :meth:`remaining` accepts (or the run is done), ValueError if they are not bits."""
        bits = _as_bits(revealed)
        if self.done:
            raise SvtStateError(f"the run is done after {self.count} accepts (c = {plan.c})")
        k = int(bits.sum())
        rem = self.remaining(plan)
        if k > rem:
            raise SvtStateError(
                f"{k} accepts revealed but at most {rem} may be (count {self.count}, c = {plan.c}, "
                f"resample = {plan.resample})"
            )
        # decisions actually revealed: up to the last accept if the batch was gated, else all
        decided = int(np.flatnonzero(bits)[-1]) + 1 if (k and k == rem) else int(bits.shape[0])
        count = self.count + k
        done = count >= plan.c
        epoch = self.epoch + 1 if (k and plan.resample and not done) else self.epoch
        return SvtCounters(count, epoch, self.n_decided + decided, done)

    def to_dict(self) -> dict[str, int | bool]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> SvtCounters:
        keys = {"count", "epoch", "n_decided", "done"}
        if not isinstance(d, dict) or set(d) != keys:
            raise ValueError(f"SVT counters need exactly the keys {sorted(keys)}")
        if not all(type(d[k]) is int for k in ("count", "epoch", "n_decided")) or type(d["done"]) is not bool:
            raise ValueError(f"SVT counters {d!r} have wrong types")
        return cls(d["count"], d["epoch"], d["n_decided"], d["done"])


def _as_bits(revealed: npt.ArrayLike) -> BoolArray:
    bits = np.asarray(revealed)
    if bits.dtype != np.bool_:
        if not np.issubdtype(bits.dtype, np.integer) or not np.isin(bits, (0, 1)).all():
            raise ValueError("revealed must be booleans (or 0/1 integers)")
        bits = bits.astype(bool)
    if bits.ndim != 1:
        raise ValueError(f"revealed must be one-dimensional, got shape {bits.shape}")
    return bits


#: ``threshold_rng(epoch)``: the CSPRNG this party draws its threshold share of that epoch from.
ThresholdSource = Callable[[int], "SecureRandom"]


class PartySvtState:
    """One party's secret SVT state for one run: its threshold share and the public counters.

    Usage per batch: ``tau = state.noise_for_batch(n)`` (this party's τ_j = m_j − ν_j for the n
    candidates), run the decision protocol, then ``state.update(revealed)`` with the opened bits. Calls
    must alternate; a run whose protocol failed between the two must be abandoned (the state refuses to
    continue), never retried with the same state. The threshold share is secret: it is not in the repr.

    Two sources of noise:

    * one stream, ``PartySvtState(plan, m, rng)``: every threshold and query share is drawn from ``rng`` in
      turn (a session's CSPRNG; the state cannot be rebuilt once lost);
    * keyed, :meth:`keyed`: the threshold share of epoch e is drawn from ``threshold_rng(e)`` and each
      batch's query shares from the CSPRNG passed to :meth:`noise_for_batch` (e.g. keyed by the run step
      and its inputs). The state is then a function of the public :class:`SvtCounters` and the keys, so it
      can be rebuilt at any counters (``keyed(..., counters=c)``): asked the same batch with the same
      query stream from the same counters it draws exactly the same τ_j.
    """

    def __init__(
        self,
        plan: FederatedSvtPlan,
        m: int,
        rng: SecureRandom | None,
        *,
        threshold_rng: ThresholdSource | None = None,
        counters: SvtCounters | None = None,
    ) -> None:
        if not is_int(m) or m < 1:
            raise ValueError(f"number of parties m must be a positive integer, got {m!r}")
        if (rng is None) == (threshold_rng is None):
            raise ValueError("give exactly one noise source: rng (one stream) or threshold_rng (keyed)")
        if rng is not None and not callable(getattr(rng, "uniform", None)):
            raise ValueError("rng must be a CSPRNG with uniform(shape) (hss.randomness.SecureRandom)")
        if rng is not None and counters is not None:
            raise ValueError("a one-stream state starts at the beginning of the run (no counters)")
        start = counters if counters is not None else SvtCounters()
        start.check(plan)
        self.plan = plan
        self.m = int(m)
        self.h = plan.share_parties(self.m)
        self._rng = rng
        self._threshold_rng = threshold_rng
        self._b = plan.laplace_scale
        self._set(start)
        self.aborted = False
        self._pending: int | None = None
        self._threshold = math.nan if self.done else self._draw_threshold()

    @classmethod
    def keyed(
        cls,
        plan: FederatedSvtPlan,
        m: int,
        threshold_rng: ThresholdSource,
        counters: SvtCounters | None = None,
    ) -> PartySvtState:
        """A keyed state (see the class docstring) at ``counters`` (default: the start of the run)."""
        return cls(plan, m, None, threshold_rng=threshold_rng, counters=counters)

    def __repr__(self) -> str:
        return (
            f"PartySvtState(m={self.m}, count={self.count}, epoch={self.epoch}, "
            f"n_decided={self.n_decided}, done={self.done})"
        )

    @property
    def counters(self) -> SvtCounters:
        """The public counters (what a resume record keeps; never the threshold share)."""
        return SvtCounters(self.count, self.epoch, self.n_decided, self.done)

    def _draw_threshold(self) -> float:
        rng = self._rng if self._rng is not None else self._threshold_rng(self.epoch)  # type: ignore[misc]
        return float(laplace_share(rng, self.h, self._b, 1)[0])

    @property
    def remaining(self) -> int:
        """How many accepts the next batch may reveal: 1 with RESAMPLE, c − count without; 0 when done."""
        return self.counters.remaining(self.plan)

    def _check_live(self, what: str) -> None:
        if self.aborted:
            raise SvtStateError(f"{what}: this run was aborted after an inconsistent reveal")
        if self.done:
            raise SvtStateError(f"{what}: the run is done after {self.count} accepts (c = {self.plan.c})")

    def noise_for_batch(self, n: int, rng: SecureRandom | None = None) -> FloatArray:
        """τ_j for n candidates: this epoch's threshold share minus fresh Lap(2b) query-noise shares.

        ``rng``: the batch's query-noise stream; required by a keyed state, refused by a one-stream one."""
        self._check_live("noise_for_batch")
        if self._pending is not None:
            raise SvtStateError(
                f"noise_for_batch: the previous batch of {self._pending} was not settled with update()"
            )
        if not is_int(n) or n < 1:
            raise ValueError(f"batch size n must be a positive integer, got {n!r}")
        if (rng is None) != (self._rng is not None):
            raise ValueError(
                "noise_for_batch: a keyed state needs the batch's query-noise rng; a one-stream state "
                "draws from its own"
            )
        nu = laplace_share(rng if rng is not None else self._rng, self.h, 2.0 * self._b, int(n))  # type: ignore[arg-type]
        self._pending = int(n)
        return self._threshold - nu

    def update(self, revealed: npt.ArrayLike) -> int:
        """Apply the opened bits of the pending batch; returns the number of accepts.

        Redraws the threshold share after an accept with RESAMPLE (new epoch); marks the run done at c.
        Raises :class:`SvtStateError` if more than ``remaining`` accepts are revealed (the state is then
        aborted), if no batch is pending, or after done.
        """
        self._check_live("update")
        if self._pending is None:
            raise SvtStateError("update: no batch pending (call noise_for_batch first)")
        bits = _as_bits(revealed)
        if bits.shape != (self._pending,):
            raise ValueError(f"revealed has shape {bits.shape}; the pending batch has {self._pending}")
        return self._apply(bits)

    def advance(self, revealed: npt.ArrayLike) -> int:
        """Apply the bits of a batch this state did not draw noise for: a run step whose result is already
        known (a replayed run step). Keyed states only (the next epoch's threshold comes from its key)."""
        self._check_live("advance")
        if self._rng is not None:
            raise SvtStateError("advance: only a keyed state can skip a batch (its noise is keyed)")
        if self._pending is not None:
            raise SvtStateError(f"advance: a batch of {self._pending} is pending")
        return self._apply(_as_bits(revealed))

    def _set(self, c: SvtCounters) -> None:
        self.count, self.epoch, self.n_decided, self.done = c.count, c.epoch, c.n_decided, c.done

    def _apply(self, bits: BoolArray) -> int:
        before = self.counters
        try:
            after = before.after(self.plan, bits)
        except SvtStateError as exc:
            self.aborted = True
            raise SvtStateError(f"update: {exc}; run aborted") from exc
        self._pending = None
        self._set(after)
        if self.done:
            self._threshold = math.nan
        elif after.epoch != before.epoch:
            self._threshold = self._draw_threshold()
        return after.count - before.count
