"""Privacy of the Yıldırım–Ermiş penalty method, alone and inside the confidential accept-reject.

Mechanism (S. Yıldırım, B. Ermiş, "Exact MCMC with differentially private moves", Statistics and
Computing 2019, arXiv 1604.07177; DESIGN.md §1): each party adds λ_j ~ N(0, σ²) to its log-ratio
ℓ_j, with ``σ = τ n^α c`` where c bounds the change of the log-likelihood ratio caused by one record
(clip each record's log-ratio to ±b‖θ* − θ‖ so that c = 2b‖θ* − θ‖ holds by construction) and α is
the paper's exponent (``n_exponent`` here, to keep α for type I errors). A public correction
−mσ²/2 keeps the chain exact (penalty method, Ceperley & Dewing 1999).

Guarantees provided (sensitivity Δ ≤ c of a = log r to one record):

* ``penalty_reveal_mu``: releasing one noisy ratio ℓ + N(0, σ²) is exactly ``μ = c/σ = 1/(τ n^α)``-GDP
  (Gaussian mechanism); K steps compose to ``√K/(τ n^α)`` (``composition.compose_gdp``).
* ``penalty_gdp_mu``: in the confidential accept-reject an observer who knows t parties' noise
  still faces N(0, (m − t)σ²) (and Gamma((m − t)/m) noise, ignored here), and every reveal mode
  (sum, blinded, sign) is a post-processing of a + N(0, (m − t)σ²) + independent noise, so each is
  ``μ = Δ/(σ√(m − t))``-GDP. Valid for every threat model; exact for the revealed Gaussian part.
* Amplification by the Exp(1) term (outside observer, t = 0, s² = mσ²), computed numerically:
  ``penalty_sum_profile`` (S = a + N(0, s²) + Exp(1) revealed: exact ex-Gaussian shift profile, see
  ``additive``), ``penalty_blinded_profile`` (the same curve, by post-processing: a valid bound,
  not a tight one), ``penalty_sign_profile`` (accept bit with p(a) = P(a + N(0, s²) + Exp(1) ≥ 0),
  rigorous Bernoulli cover, see ``reveal_sign``). Each is intersected with the GDP bound (and the
  sign curve with the sum curve, of which it is a post-processing): all are valid upper bounds on
  δ(ε), so their pointwise minimum is. For t ≥ 1 these functions return the GDP bound and say so.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ._numeric import FloatArray
from .additive import ExGaussianNoise, additive_noise_delta
from .conversions import gdp_delta
from .profile import PrivacyProfile
from .reveal_sign import PenaltyAcceptance, sign_reveal_privacy
from .threat import ThreatModel

__all__ = [
    "penalty_blinded_profile",
    "penalty_gdp_mu",
    "penalty_reveal_mu",
    "penalty_sigma",
    "penalty_sign_profile",
    "penalty_sum_profile",
]


def penalty_sigma(tau: float, n: int, n_exponent: float, c: float) -> float:
    """Per-party penalty noise sd ``σ = τ n^α c`` (α = ``n_exponent``)."""
    if not (tau > 0 and n >= 1 and c > 0):
        raise ValueError(f"need tau > 0, n >= 1, c > 0; got tau={tau}, n={n}, c={c}")
    return tau * float(n) ** n_exponent * c


def penalty_reveal_mu(tau: float, n: int, n_exponent: float) -> float:
    """GDP μ of releasing one noisy ratio: ``1/(τ n^α)`` (= c/σ)."""
    if not (tau > 0 and n >= 1):
        raise ValueError(f"need tau > 0 and n >= 1; got tau={tau}, n={n}")
    return 1.0 / (tau * float(n) ** n_exponent)


def penalty_gdp_mu(sensitivity: float, sigma: float, threat: ThreatModel) -> float:
    """``Δ / (σ √(m − t))``: GDP bound of any reveal mode against t colluding parties (post-processing)."""
    if not (sensitivity > 0 and sigma > 0):
        raise ValueError(f"need sensitivity > 0 and sigma > 0; got {sensitivity}, {sigma}")
    return sensitivity / (sigma * math.sqrt(threat.residual_parties))


def _gdp_profile(mu: float, what: str, threat: ThreatModel) -> PrivacyProfile:
    return PrivacyProfile.from_gdp(
        mu,
        description=f"{what}: GDP bound mu={mu:.6g} from the Gaussian penalty noise only ({threat.name})",
    )


def _eps_top(fn: Callable[[FloatArray], FloatArray], start: float = 1.0) -> float:
    top = start
    while float(np.asarray(fn(np.array([top])))[0]) > 1e-17 and top < 60.0:
        top *= 1.5
    return min(top, 60.0)


def penalty_sum_profile(
    sensitivity: float, sigma: float, threat: ThreatModel, step: float = 0.01
) -> PrivacyProfile:
    """Sum reveal with penalty noise: S = a + N(0, mσ²) + Exp(1) (outside observer; GDP bound otherwise)."""
    mu = penalty_gdp_mu(sensitivity, sigma, threat)
    if threat.colluding > 0:
        return _gdp_profile(mu, "penalty + sum reveal", threat)
    noise = ExGaussianNoise(sigma * math.sqrt(threat.m))

    def delta(e: FloatArray) -> FloatArray:
        return np.minimum(additive_noise_delta(e, sensitivity, noise), np.asarray(gdp_delta(mu, e)))

    return PrivacyProfile.from_delta_function(
        delta,
        _eps_top(delta),
        step,
        description=(
            f"penalty + sum reveal: a + N(0, {threat.m}*sigma^2) + Exp(1), sigma={sigma:.4g}, "
            f"Delta={sensitivity:.4g}, {threat.name}"
        ),
        method="exact",
    )


def penalty_blinded_profile(
    sensitivity: float, sigma: float, threat: ThreatModel, step: float = 0.01
) -> PrivacyProfile:
    """Blinded reveal with penalty noise: bounded by the sum reveal's curve (post-processing)."""
    prof = penalty_sum_profile(sensitivity, sigma, threat, step)
    return PrivacyProfile(
        prof.eps,
        prof.deltas,
        "penalty + blinded reveal, bounded by the sum reveal (post-processing; not tight): "
        + prof.description,
        prof.method,
        prof.pure_eps,
    )


def penalty_sign_profile(
    sensitivity: float,
    sigma: float,
    threat: ThreatModel,
    a_min: float = -math.inf,
    a_max: float = math.inf,
    grid_step: float | None = None,
    eps_step: float = 0.01,
) -> PrivacyProfile:
    """Sign reveal with penalty noise (outside observer: rigorous Bernoulli cover ∧ GDP; else GDP)."""
    mu = penalty_gdp_mu(sensitivity, sigma, threat)
    if threat.colluding > 0:
        return _gdp_profile(mu, "penalty + sign reveal", threat)
    res = sign_reveal_privacy(
        PenaltyAcceptance(sigma * math.sqrt(threat.m)),
        sensitivity,
        a_min,
        a_max,
        grid_step=grid_step,
        eps_step=eps_step,
        threat=threat.name,
    )
    grid = np.asarray(res.profile.eps)
    # The bit is a post-processing of the revealed sum, so the sum's exact curve also bounds it.
    sum_curve = penalty_sum_profile(sensitivity, sigma, threat, eps_step).delta_at(grid)
    deltas = np.minimum.reduce([np.asarray(res.profile.deltas), np.asarray(gdp_delta(mu, grid)), sum_curve])
    return PrivacyProfile(
        tuple(grid),
        tuple(deltas),
        "penalty + sign reveal (min with the sum-reveal curve and the GDP bound): " + res.profile.description,
        "numerical bound",
        res.pure_eps,
    )
