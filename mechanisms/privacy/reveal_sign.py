"""Per-step privacy of the ``sign`` reveal mode: the coordinator learns only the accept bit.

Mechanism (DESIGN.md §1): the bit ``1{S ≥ 0}``, S = a + noise, is a Bernoulli(p(a)) draw whose
success probability depends on the data only through a = log r. One record moves a by at most Δ,
so a step is the pair Bernoulli(p(a)) vs Bernoulli(p(a')), |a − a'| ≤ Δ, and its privacy is the
worst case over a in the range the analysis is told a can take, ``[a_min, a_max]`` (both a and a'
must lie in it).

Acceptance models (each states its exactness and threat model):

* ``MetropolisAcceptance(shape)``: ``p(a) = P(a + G ≥ 0)``, G ~ Gamma(shape, 1). shape = 1 is the
  exact MH / rejection-sampling rule ``min(1, e^a)`` seen by the outside observer; shape =
  (m − t)/m is what t colluding parties see (they fold their own V_j into a). Exact (the chain
  targets the posterior), but p = 1 for a ≥ 0, so whenever the range lets a ≥ 0 and a' < 0 the
  "reject" outcome is impossible under one input and possible under the other: unbounded privacy
  loss with probability 1 − p(a'). Rejection sampling (a ≤ 0) approaches this near the mode; a
  bound inflated by e^c (a_max = −c < 0) keeps it bounded at the cost of acceptance rate e^{−c}.
* ``LazyAcceptance(gamma, base)``: accept only if also a secret coin with P(1) = γ < 1 comes up,
  evaluated inside the MPC so only the AND is revealed. Exact: a lazy MH kernel
  γ·P_MH + (1 − γ)·I is reversible with respect to the posterior (mixing slowed by 1/γ), and lazy
  rejection sampling is rejection sampling with bound M/γ. p ∈ (0, γ], so with the Metropolis base
  it is pure ε-DP with ``ε = max(Δ, log((1 − γ e^{−Δ}) / (1 − γ)))``. Needs: no coalition of the
  size in the threat model knows the coin.
* ``PenaltyAcceptance(s)``: ``p(a) = P(a + N(0, s²) + Exp(1) ≥ 0)`` — the Yıldırım–Ermiş penalty
  rule inside the confidential accept-reject (a includes the public correction −s²/2; exact
  chain). Bounded p ∈ (0, 1) on all of ℝ; the loss on "reject" still grows without bound as a → ∞
  but with vanishing probability, so δ(ε) > 0 for all ε yet → 0. Outside observer: s² = mσ².

Analysis (rigorous up to floating point, assuming p is non-decreasing in a — true for all models
here): for ε ≥ 0 the Bernoulli hockey-stick divergence is increasing in p(a') and decreasing in
p(a) for a ≤ a', so every pair with a ∈ [a_i, a_i + h) is dominated by the grid pair
``(a_i, min(a_i + h + Δ, a_max))``; the grid covers all a. Unbounded ranges are cut where
p is within ``tail_tol`` of its infimum / supremum; pairs beyond have δ ≤ tail_tol (δ ≤ |p − p'|),
which is added as a floor. Infinite privacy loss is detected exactly (p = 0 or 1 at a grid point)
and reported: ``eps_at`` then returns ``inf`` for δ below the infinite-loss mass, never a finite ε
that cannot be backed.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from ._numeric import FloatArray, as_float_array
from .additive import ExGaussianNoise
from .profile import PrivacyProfile
from .threat import ThreatModel
from .tradeoff import EnvelopeTradeOff

__all__ = [
    "AcceptanceModel",
    "LazyAcceptance",
    "MetropolisAcceptance",
    "PenaltyAcceptance",
    "SignPrivacy",
    "bernoulli_delta",
    "sign_reveal_privacy",
    "sign_step_profile",
]


class AcceptanceModel(abc.ABC):
    """Acceptance probability p(a) of the revealed bit as a function of a = log r (non-decreasing)."""

    @property
    @abc.abstractmethod
    def label(self) -> str: ...

    @abc.abstractmethod
    def accept_prob(self, a: FloatArray) -> FloatArray:
        """p(a)."""

    @abc.abstractmethod
    def reject_prob(self, a: FloatArray) -> FloatArray:
        """1 − p(a), computed without cancellation."""

    @property
    def p_inf(self) -> float:
        """inf_a p(a)."""
        return 0.0

    @property
    def p_sup(self) -> float:
        """sup_a p(a)."""
        return 1.0

    def lower_gap(self, a: FloatArray) -> FloatArray:
        """p(a) − p_inf, accurately."""
        return self.accept_prob(a) - self.p_inf

    def upper_gap(self, a: FloatArray) -> FloatArray:
        """p_sup − p(a), accurately."""
        return self.reject_prob(a) - (1.0 - self.p_sup)

    def pure_eps_bound(self, sensitivity: float, a_max: float = math.inf) -> float | None:
        """A closed-form pure-DP bound over all a ≤ a_max, when one exists."""
        return None


@dataclass(frozen=True)
class MetropolisAcceptance(AcceptanceModel):
    """``p(a) = P(a + Gamma(shape, 1) ≥ 0)``; shape 1 gives ``min(1, e^a)`` (exact MH / RS)."""

    shape: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.shape <= 1:
            raise ValueError(f"shape must lie in (0, 1] (it is (m - t)/m), got {self.shape}")

    @classmethod
    def for_threat(cls, threat: ThreatModel) -> MetropolisAcceptance:
        """The rule as seen under ``threat``: residual noise Gamma((m − t)/m, 1)."""
        return cls(threat.residual_shape)

    @property
    def label(self) -> str:
        return (
            "Metropolis min(1, e^a)" if self.shape == 1.0 else f"Metropolis, residual Gamma({self.shape:.4g})"
        )

    def accept_prob(self, a: FloatArray) -> FloatArray:
        x = np.maximum(-a, 0.0)
        if self.shape == 1.0:
            return np.exp(-x)
        return np.asarray(special.gammaincc(self.shape, x), dtype=np.float64)

    def reject_prob(self, a: FloatArray) -> FloatArray:
        x = np.maximum(-a, 0.0)
        if self.shape == 1.0:
            return -np.expm1(-x)
        return np.asarray(special.gammainc(self.shape, x), dtype=np.float64)

    def pure_eps_bound(self, sensitivity: float, a_max: float = math.inf) -> float | None:
        """shape 1 and a_max < 0: ``max(Δ, log((1 − e^{a_max − Δ}) / (1 − e^{a_max})))``; else None."""
        if self.shape != 1.0 or not a_max < 0:
            return None
        return _lazy_metropolis_bound(1.0, sensitivity, a_max)


@dataclass(frozen=True)
class LazyAcceptance(AcceptanceModel):
    """Accept iff the base rule accepts AND a secret coin with P(1) = gamma does: p = γ·p_base."""

    gamma: float
    base: AcceptanceModel = MetropolisAcceptance()

    def __post_init__(self) -> None:
        if not 0 < self.gamma < 1:
            raise ValueError(f"lazy coin probability gamma must lie in (0, 1), got {self.gamma}")

    @property
    def label(self) -> str:
        return f"lazy (gamma={self.gamma:.4g}) {self.base.label}"

    def accept_prob(self, a: FloatArray) -> FloatArray:
        return self.gamma * self.base.accept_prob(a)

    def reject_prob(self, a: FloatArray) -> FloatArray:
        return (1.0 - self.gamma) + self.gamma * self.base.reject_prob(a)

    @property
    def p_sup(self) -> float:
        return self.gamma * self.base.p_sup

    @property
    def p_inf(self) -> float:
        return self.gamma * self.base.p_inf

    def lower_gap(self, a: FloatArray) -> FloatArray:
        return self.gamma * self.base.lower_gap(a)

    def upper_gap(self, a: FloatArray) -> FloatArray:
        return self.gamma * self.base.upper_gap(a)

    def pure_eps_bound(self, sensitivity: float, a_max: float = math.inf) -> float | None:
        """Metropolis base (shape 1): ``max(Δ, log((1 − γ e^{x − Δ}) / (1 − γ e^x)))``, x = min(a_max, 0)."""
        if isinstance(self.base, MetropolisAcceptance) and self.base.shape == 1.0:
            return _lazy_metropolis_bound(self.gamma, sensitivity, min(a_max, 0.0))
        return None


@dataclass(frozen=True)
class PenaltyAcceptance(AcceptanceModel):
    """``p(a) = P(a + N(0, s²) + Exp(1) ≥ 0)``: penalty noise (total sd s) plus the Exp(1) term."""

    s: float

    def __post_init__(self) -> None:
        if not self.s > 0:
            raise ValueError(f"penalty noise sd s must be positive, got {self.s}")

    @property
    def label(self) -> str:
        return f"penalty (s={self.s:.4g}) + Exp(1)"

    def accept_prob(self, a: FloatArray) -> FloatArray:
        return np.exp(ExGaussianNoise(self.s).logsf(-np.asarray(a, dtype=np.float64)))

    def reject_prob(self, a: FloatArray) -> FloatArray:
        return np.exp(ExGaussianNoise(self.s).logcdf(-np.asarray(a, dtype=np.float64)))


def _lazy_metropolis_bound(gamma: float, sensitivity: float, x: float) -> float:
    """Max loss of p(a) = γ min(1, e^a) over a ≤ x ≤ 0, |a − a'| ≤ Δ.

    Accept ratio ≤ e^Δ; the reject ratio (1 − γe^{a})/(1 − γe^{a+Δ}) increases in a, so its worst case
    is at a + Δ = x.
    """
    num = 1.0 - gamma * math.exp(x - sensitivity)
    den = 1.0 - gamma * math.exp(x)
    if den <= 0.0:
        return math.inf
    return max(sensitivity, math.log(num / den))


def _pair_delta(
    eps: FloatArray, p_lo: FloatArray, r_lo: FloatArray, p_hi: FloatArray, r_hi: FloatArray
) -> FloatArray:
    """max over pairs of the two-ordering Bernoulli hockey stick, for p_lo ≤ p_hi and ε ≥ 0."""
    out = np.zeros_like(eps)
    chunk = max(1, 4_000_000 // max(1, eps.size))
    g = np.exp(eps)[None, :]
    for s in range(0, p_lo.size, chunk):
        pl, rl = p_lo[s : s + chunk, None], r_lo[s : s + chunk, None]
        ph, rh = p_hi[s : s + chunk, None], r_hi[s : s + chunk, None]
        d = np.maximum(ph - g * pl, rl - g * rh)
        out = np.maximum(out, d.max(axis=0))
    return np.maximum(out, 0.0)


def bernoulli_delta(p: float, q: float, eps: npt.ArrayLike) -> FloatArray:
    """Exact δ(ε) between Bernoulli(p) and Bernoulli(q), worst of both orderings (ε ≥ 0)."""
    if not (0 <= p <= 1 and 0 <= q <= 1):
        raise ValueError("p and q must be probabilities")
    e = np.atleast_1d(as_float_array(eps))
    lo, hi = min(p, q), max(p, q)
    out = _pair_delta(e, np.array([lo]), np.array([1.0 - lo]), np.array([hi]), np.array([1.0 - hi]))
    return out.reshape(np.shape(eps))


@dataclass(frozen=True)
class SignPrivacy:
    """Result of a sign-reveal analysis. Read ``message`` before using the numbers.

    Attributes:
        profile: conservative worst-case δ(ε) profile (composable via ``profile.to_pld``).
        infinity_mass: probability of an outcome that is impossible under a neighbouring input
            (infinite privacy loss); δ(ε) ≥ this for every ε. 0 when bounded.
        max_loss: largest finite-or-infinite privacy loss over the analysed pairs (``inf`` if some
            outcome is impossible under a neighbour); over the cut range only if a range is unbounded.
        pure_eps: a pure ε-DP bound backed by the analysis, or ``None``.
        message: plain-language verdict, including the threat model and assumptions.
    """

    profile: PrivacyProfile
    infinity_mass: float
    max_loss: float
    pure_eps: float | None
    message: str

    @property
    def bounded(self) -> bool:
        """True when no outcome has infinite privacy loss."""
        return self.infinity_mass == 0.0

    def eps_at(self, delta: float) -> float:
        """Smallest backed ε at this δ; ``inf`` when δ is below the infinite-loss mass (or tail floor)."""
        return self.profile.eps_at(delta)

    def delta_at(self, eps: float) -> float:
        return float(self.profile.delta_at(eps))

    def tradeoff(self) -> EnvelopeTradeOff:
        return self.profile.tradeoff()


def _find_tail(gap_fn: Callable[[FloatArray], FloatArray], direction: float, tol: float) -> float:
    """Smallest |A| (doubling) in the given direction with gap(A) ≤ tol."""
    a = direction
    for _ in range(60):
        if float(gap_fn(np.array([a]))[0]) <= tol:
            return a
        a *= 2.0
    raise ValueError(f"acceptance probability does not approach its limit within |a| <= {abs(a):.3g}")


def sign_reveal_privacy(
    model: AcceptanceModel,
    sensitivity: float,
    a_min: float = -math.inf,
    a_max: float = math.inf,
    grid_step: float | None = None,
    eps_step: float = 0.01,
    eps_cap: float = 30.0,
    tail_tol: float = 1e-14,
    threat: ThreatModel | str = "outside observer (coordinator)",
) -> SignPrivacy:
    """Worst-case per-step privacy of revealing the accept bit, over a, a' ∈ [a_min, a_max], |a − a'| ≤ Δ.

    Args:
        model: the acceptance rule as seen by the observer (see module docstring).
        sensitivity: Δ, the bound on |a − a'| for neighbouring data.
        a_min, a_max: the range a = log r can take for *any* dataset (e.g. a_max = 0 for rejection
            sampling, a_max = −c with a bound inflated by e^c); infinite ends are allowed.
        grid_step: a-grid spacing h (default min(Δ/100, 0.02), coarsened to ≤ 50 000 points); the
            analysis is rigorous for any h, smaller h is tighter.
        eps_step, eps_cap: profile grid; δ beyond eps_cap is held at δ(eps_cap) (conservative).
        tail_tol: where an end is infinite, the range is cut where p is within tail_tol of its
            limit; tail_tol is added as a δ floor.
        threat: the threat model the ``model`` corresponds to (a ``ThreatModel`` or text), for the
            report; the model itself must already reflect it (e.g. ``MetropolisAcceptance.for_threat``).
    """
    if isinstance(threat, ThreatModel):
        threat = threat.name
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity Delta must be positive and finite, got {sensitivity}")
    if not a_min <= a_max:
        raise ValueError(f"need a_min <= a_max, got [{a_min}, {a_max}]")
    lo, hi, floor = _cut_range(model, sensitivity, a_min, a_max, tail_tol)
    width = max(hi - lo, 0.0)
    h = grid_step if grid_step is not None else min(sensitivity / 100.0, 0.02)
    if not h > 0:
        raise ValueError("grid_step must be positive")
    h = max(h, width / 50_000.0)
    n = max(1, math.ceil(width / h))
    a_lo = lo + h * np.arange(n, dtype=np.float64)
    a_hi = np.minimum(a_lo + h + sensitivity, a_max)
    p_lo, r_lo = model.accept_prob(a_lo), model.reject_prob(a_lo)
    p_hi, r_hi = model.accept_prob(a_hi), model.reject_prob(a_hi)

    loss_acc, loss_rej, infinity_mass, max_loss, reject_infinite = _pair_losses(p_lo, r_lo, p_hi, r_hi)
    finite_losses = np.concatenate([loss_acc[np.isfinite(loss_acc)], loss_rej[np.isfinite(loss_rej)], [0.0]])
    eps_top = min(eps_cap, float(np.max(finite_losses)) + eps_step)
    grid = np.arange(math.ceil(eps_top / eps_step) + 1, dtype=np.float64) * eps_step
    deltas = np.maximum(_pair_delta(grid, p_lo, r_lo, p_hi, r_hi), floor)

    pure = _pure_eps(model, sensitivity, a_min, a_max, infinity_mass, max_loss)
    desc = f"sign reveal, {model.label}, Delta={sensitivity:.4g}, a in [{a_min:.4g}, {a_max:.4g}], {threat}"
    profile = PrivacyProfile(tuple(grid), tuple(deltas), desc, "numerical bound", pure)

    if infinity_mass > 0:
        outcome = "reject" if reject_infinite else "accept"
        msg = (
            f"UNBOUNDED ({threat}): the acceptance probability reaches {'1' if outcome == 'reject' else '0'} "
            f"inside a in [{a_min:.4g}, {a_max:.4g}] while a neighbour's does not, so '{outcome}' has "
            f"infinite privacy loss with probability up to {infinity_mass:.4g}. No finite eps holds for "
            f"delta < {infinity_mass:.4g}; use a bounded variant (lazy coin, penalty noise) or "
            "restrict the range (e.g. inflate the rejection bound so a_max < 0)."
        )
    else:
        msg = (
            f"bounded ({threat}): {model.label}, Delta={sensitivity:.4g}; "
            + (
                f"pure eps = {pure:.6g}"
                if pure is not None
                else "no pure-DP bound (loss unbounded in the tails)"
            )
            + (f"; range cut at tail_tol={tail_tol:.1e}, added as a delta floor" if floor > 0 else "")
        )
    return SignPrivacy(profile, infinity_mass, max_loss, pure, msg)


def _pair_losses(
    p_lo: FloatArray, r_lo: FloatArray, p_hi: FloatArray, r_hi: FloatArray
) -> tuple[FloatArray, FloatArray, float, float, bool]:
    """The grid pairs' privacy losses on accept and on reject, the infinite-loss mass, the largest loss
    (``inf`` with an infinite one), and whether "reject" is an outcome of infinite loss."""
    with np.errstate(divide="ignore", invalid="ignore"):
        loss_acc = np.where(p_hi > 0, np.log(p_hi) - np.log(p_lo), 0.0)
        loss_rej = np.where(r_lo > 0, np.log(r_lo) - np.log(r_hi), 0.0)
    inf_acc = (p_lo == 0) & (p_hi > 0)
    inf_rej = (r_hi == 0) & (r_lo > 0)
    infinity_mass = float(
        max(np.max(p_hi, where=inf_acc, initial=0.0), np.max(r_lo, where=inf_rej, initial=0.0))
    )
    max_loss = float(np.max(np.maximum(loss_acc, loss_rej))) if p_lo.size else 0.0
    if infinity_mass > 0:
        max_loss = math.inf
    return loss_acc, loss_rej, infinity_mass, max_loss, bool(np.any(inf_rej))


def _cut_range(
    model: AcceptanceModel, sensitivity: float, a_min: float, a_max: float, tail_tol: float
) -> tuple[float, float, float]:
    """The analysed range [lo, hi]: an infinite end cut where p is within tail_tol of its limit (the
    lower one a further Δ down, for the neighbour), and the δ floor that cut costs (0 when none)."""
    floor = 0.0
    lo = a_min
    hi = a_max
    if math.isinf(a_min):
        lo = _find_tail(model.lower_gap, -1.0, tail_tol) - sensitivity
        floor = tail_tol
    if math.isinf(a_max):
        hi = _find_tail(model.upper_gap, 1.0, tail_tol)
        floor = tail_tol
    return lo, hi, floor


def _pure_eps(
    model: AcceptanceModel,
    sensitivity: float,
    a_min: float,
    a_max: float,
    infinity_mass: float,
    max_loss: float,
) -> float | None:
    """A backed pure ε: none with infinite loss, the largest loss over a finite range, else the model's."""
    ranged = math.isfinite(a_min) and math.isfinite(a_max)
    if infinity_mass > 0:
        return None
    if ranged and max_loss < math.inf:
        return max_loss
    bound = model.pure_eps_bound(sensitivity, a_max)
    return bound if bound is not None and math.isfinite(bound) else None


@functools.lru_cache(maxsize=128)
def sign_step_profile(
    sensitivity: float, threat: ThreatModel, gamma: float | None = None, a_max: float = math.inf
) -> SignPrivacy:
    """One exact MH or rejection-sampling decision revealed as its accept bit, as ``threat`` sees it
    (the Metropolis rule with the residual Gamma((m − q)/m, 1) noise: ``MetropolisAcceptance.for_threat``),
    optionally lazy with a secret coin of probability ``gamma`` (``LazyAcceptance``), for a = log r ≤
    ``a_max`` (rejection sampling: a ≤ 0, or −c with a bound inflated by e^c) and sensitivity Δ. Read
    ``bounded`` / ``message`` before using the profile (exact MH with a ≥ 0 possible is unbounded)."""
    base = MetropolisAcceptance.for_threat(threat)
    model: AcceptanceModel = base if gamma is None else LazyAcceptance(gamma, base)
    return sign_reveal_privacy(model, sensitivity, -math.inf, a_max, threat=threat)
