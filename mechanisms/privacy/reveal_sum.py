"""Per-step privacy of the ``sum`` reveal mode (v1): the coordinator learns S = a + noise.

Mechanism (Aslett et al., "Confidential Accept-Reject", BayesComp 2025; DESIGN.md §1): with
a = pub + Σ_j ℓ_j the log acceptance ratio, every party adds V_j ~ Gamma(1/m, 1) and the sum
``S = a + Σ_j V_j`` is revealed. Σ_j V_j ~ Exp(1). One individual's record moves a by at most Δ
(the sensitivity of log r, replace-one unless stated; it may depend on (θ, θ*) — pass the bound
for the step).

Threat models (``ThreatModel``): the outside observer (coordinator) faces Exp(1) noise; an observer
knowing t parties' V_j faces Gamma(k, 1) with k = (m − t)/m (k = (m − 1)/m for one party knowing
its own noise).

Exact analysis. Let G ~ Gamma(k, 1), F its CDF, P = law(G) (data a), Q = law(G + Δ) (data a + Δ).
* On (0, Δ) Q has no mass and on x > Δ the loss ``log p/q`` is negative, so
  ``H_{e^ε}(P ‖ Q) = F(Δ)`` for every ε ≥ 0: an infinite privacy loss with probability F(Δ).
* On x > Δ, ``log q/p = Δ + (1 − k) log(x / (x − Δ))`` (decreasing), so with
  ``y_ε = Δ / (exp((ε − Δ)/(1 − k)) − 1)``:
  ``H(Q ‖ P) = 1 − e^ε (1 − F(Δ))`` for ε ≤ Δ and ``F(y_ε) − e^ε [F(Δ + y_ε) − F(Δ)]`` for ε > Δ
  (0 for ε > Δ when k = 1). This ordering is never the worse one: H(Q ‖ P) ≤ TV = F(Δ).
* Hence the profile is flat, ``δ(ε) = F_k(Δ)`` for all ε ≥ 0, and the symmetric trade-off is
  exactly ``f(α) = max(0, 1 − F_k(Δ) − α)``: the line through the end points (0, 1 − F(Δ)) of
  T(Q, P) and (1 − F(Δ), 0) of T(P, Q), both of which lie above it. For Exp(1) noise (outside
  observer) this is DESIGN.md's ``f(α) = e^{−Δ} − α``, δ = 1 − e^{−Δ}; a party knowing its own
  noise does no better than (0, F_{(m−1)/m}(Δ))-DP: there is no ε benefit in any threat model.
* The slide formula ``ε = Δ + (1 − k) log(1 + Δ/τ)``, ``δ = F(τ)`` (1 − k = 1/m for one party)
  bounds H(Q ‖ P) for every τ > 0 but the other ordering needs δ ≥ F(Δ), so it is a valid
  (ε, δ)-DP statement only for τ ≥ Δ; ``sum_reveal_slide_bound`` enforces this. Even then it is
  dominated by the exact (0, F(Δ)) (F(τ) ≥ F(Δ) and ε > 0); it is kept for comparison with the talk.

Composition over many steps is poor: every step leaks F(Δ) with infinite loss.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from scipy import special

from ._numeric import FloatArray, as_float_array
from .profile import PrivacyProfile
from .threat import ThreatModel
from .tradeoff import EpsDeltaTradeOff, TradeOff

if TYPE_CHECKING:  # imported where used: dp_accounting brings scipy.signal and .stats (~0.7 s of CPU per
    # process), which a daemon whose charges compose in closed form never needs
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "sum_reveal_delta",
    "sum_reveal_directional_curve",
    "sum_reveal_pld",
    "sum_reveal_profile",
    "sum_reveal_reverse_delta",
    "sum_reveal_slide_bound",
    "sum_reveal_tradeoff",
]

_GL_X, _GL_W = np.polynomial.legendre.leggauss(40)


def _check(sensitivity: float) -> None:
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity Delta must be positive and finite, got {sensitivity}")


def _gamma_mass(k: float, lo: float, width: FloatArray) -> FloatArray:
    """P(lo < G < lo + width) for G ~ Gamma(k, 1), lo > 0, accurate for tiny widths."""
    width = np.asarray(width, dtype=np.float64)
    direct = special.gammainc(k, lo + width) - special.gammainc(k, lo)
    # Gauss–Legendre on [lo, lo + w] (density analytic there) for w <= lo.
    x = lo + 0.5 * width[:, None] * (1.0 + _GL_X[None, :])
    log_dens = (k - 1.0) * np.log(x) - x - special.gammaln(k)
    quad = 0.5 * width * np.sum(_GL_W[None, :] * np.exp(log_dens), axis=1)
    return np.where(width <= lo, quad, direct)


def _one_way_reverse(eps: FloatArray, sensitivity: float, k: float) -> FloatArray:
    """H_{e^ε}(Q ‖ P) with P = Gamma(k), Q = Gamma(k) + Δ."""
    d = sensitivity
    f_d = float(special.gammainc(k, d))
    out = np.where(eps <= d, 1.0 - np.exp(np.minimum(eps, d)) * (1.0 - f_d), 0.0)
    if k < 1.0:
        big = eps > d
        if np.any(big):
            e = eps[big]
            y = d / np.expm1((e - d) / (1.0 - k))
            val = special.gammainc(k, y) - np.exp(e) * _gamma_mass(k, d, y)
            out[big] = val
    return np.clip(out, 0.0, 1.0)


def sum_reveal_reverse_delta(eps: npt.ArrayLike, sensitivity: float, threat: ThreatModel) -> FloatArray:
    """``H_{e^ε}(a + Δ + G ‖ a + G)``: the ordering the slide formula bounds (closed form).

    Exposed for comparison and testing; the mechanism's δ(ε) is ``sum_reveal_delta``.
    """
    _check(sensitivity)
    e = np.atleast_1d(as_float_array(eps)).astype(np.float64)
    if np.any(e < 0):
        raise ValueError("eps must be >= 0")
    out = _one_way_reverse(e, sensitivity, threat.residual_shape)
    return out.reshape(np.shape(eps))


def sum_reveal_delta(eps: npt.ArrayLike, sensitivity: float, threat: ThreatModel) -> FloatArray:
    """Exact δ(ε) of the sum reveal, worst case over both orderings: ``F_k(Δ)`` at every ε ≥ 0."""
    _check(sensitivity)
    e = np.atleast_1d(as_float_array(eps)).astype(np.float64)
    if np.any(e < 0):
        raise ValueError("eps must be >= 0")
    # H(P ‖ Q) = F(Δ) (the region (0, Δ) where Q has no mass) = TV ≥ H(Q ‖ P) for every ε ≥ 0;
    # the reverse ordering is computed by ``sum_reveal_reverse_delta`` (and tested to stay below).
    out = np.full_like(e, float(special.gammainc(threat.residual_shape, sensitivity)))
    return out.reshape(np.shape(eps))


def sum_reveal_profile(sensitivity: float, threat: ThreatModel, step: float = 0.01) -> PrivacyProfile:
    """Exact (flat) profile of the sum reveal: δ(ε) = F_k(Δ), tabulated on [0, Δ + step]."""
    _check(sensitivity)
    return PrivacyProfile.from_delta_function(
        lambda e: sum_reveal_delta(e, sensitivity, threat),
        sensitivity + step,
        step,
        description=f"sum reveal (v1), Delta={sensitivity:.4g}, {threat.name}",
        method="exact",
        pure_eps=None,
    )


def sum_reveal_pld(
    sensitivity: float, threat: ThreatModel, discretization: float = 1e-3
) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic dp_accounting PLD of one sum-reveal step (connect-the-dots on the exact profile)."""
    return sum_reveal_profile(sensitivity, threat).to_pld(discretization)


def sum_reveal_tradeoff(sensitivity: float, threat: ThreatModel) -> TradeOff:
    """The exact symmetric f-DP curve of one step: ``f_{0, F_k(Δ)}(α) = max(0, 1 − F_k(Δ) − α)``.

    With Exp(1) noise (outside observer) this is ``max(0, e^{−Δ} − α)``.
    """
    _check(sensitivity)
    return EpsDeltaTradeOff(0.0, float(special.gammainc(threat.residual_shape, sensitivity)))


def sum_reveal_directional_curve(
    sensitivity: float, threat: ThreatModel, n: int = 2001
) -> tuple[FloatArray, FloatArray]:
    """Exact points (α, β) of ``T(P, Q)`` with P = Gamma(k), Q = Gamma(k) + Δ (one ordering).

    Neyman–Pearson rejects P on (Δ, t]: ``α = F(t) − F(Δ)``, ``β = 1 − F(t − Δ)``; parametrised by
    ``u = F(t − Δ)`` on a grid, so β = 1 − u exactly. The other ordering is the same curve with α
    and β swapped; the mechanism's symmetric f-DP curve is the convex hull of the minimum of the two.
    """
    _check(sensitivity)
    k = threat.residual_shape
    u = np.linspace(0.0, 1.0, n)
    t = sensitivity + special.gammaincinv(k, u)
    fd = float(special.gammainc(k, sensitivity))
    alpha = np.where(u >= 1.0, 1.0 - fd, special.gammainc(k, t) - fd)
    return alpha.astype(np.float64), (1.0 - u).astype(np.float64)


def sum_reveal_slide_bound(sensitivity: float, threat: ThreatModel, tau: float) -> tuple[float, float]:
    """The slide formula ``(ε, δ) = (Δ + (1 − k) log(1 + Δ/τ), F_k(τ))``, valid only for τ ≥ Δ.

    With k = (m − 1)/m (one party knowing its own V_j) this is ``ε = Δ + (1/m) log(1 + Δ/τ)``.
    Raises ``ValueError`` for τ < Δ: the reverse ordering of the neighbouring pair has δ = F_k(Δ) for
    every ε, which exceeds F_k(τ), so the formula would claim more privacy than the mechanism has.
    For τ ≥ Δ the statement is true but weaker than the exact (0, F_k(Δ)) of ``sum_reveal_delta``.
    """
    _check(sensitivity)
    if not tau > 0:
        raise ValueError(f"tau must be positive, got {tau}")
    if tau < sensitivity:
        k = threat.residual_shape
        raise ValueError(
            f"slide formula needs tau >= Delta (got tau={tau:.6g} < Delta={sensitivity:.6g}): the reverse "
            "ordering of the neighbouring pair has delta = F_V(Delta) = "
            f"{special.gammainc(k, sensitivity):.6g} "
            f"for every eps, larger than F_V(tau) = {special.gammainc(k, tau):.6g}. Use tau >= Delta or "
            "sum_reveal_delta for the exact curve."
        )
    k = threat.residual_shape
    eps = sensitivity + (1.0 - k) * math.log1p(sensitivity / tau)
    return eps, float(special.gammainc(k, tau))
