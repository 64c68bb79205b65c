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
* Amplification by the Gamma noise, computed numerically for every threat model: an observer who knows
  t parties' noise faces N(0, rσ²) + Gamma(r/m, 1), r = m − t (Exp(1) for the outside observer).
  ``penalty_sum_profile`` (S revealed: the exact ex-Gaussian shift profile of ``additive`` for t = 0,
  the numerical bound of ``residual`` for t ≥ 1, where the Gamma part is not log-concave),
  ``penalty_blinded_profile`` (the same curve, by post-processing: a valid bound, not a tight one),
  ``penalty_sign_profile`` (accept bit with p(a) = P(a + residual noise ≥ 0), rigorous Bernoulli cover,
  see ``reveal_sign``). Each is intersected with the GDP bound (and the sign curve with the sum curve,
  of which it is a post-processing): all are valid upper bounds on δ(ε), so their pointwise minimum is.
  ``penalty_step_profile`` picks one by what the coalition observes (``threat.coalition_view``).
* What a registry charges (``penalty_step_profile``), measured against these curves (issue 23): the sign
  cover never lies below the sum curve for the penalty (over m = 3, 7, q = 0 … 3, σ/Δ = 0.3 … 3, the
  composed ε of 100 steps equal to 4 digits; the worst case is a log-ratio far above 0, where the bit is a
  tail event of the sum), so a sign-reveal step is charged the sum curve (valid by post-processing) without
  the seconds the cover takes. When the residual Gaussian sd s = σ√r is large against the Gamma term's unit
  scale (``s >= GAMMA_NEGLIGIBLE_S``), the Gamma amplification is nil to 4 digits (100 steps, s = 9.9:
  4.4287 both ways; at s = 4.2 it is 1.4 %) and the numerical bound would need millions of cells (over
  10 minutes at s = 3,100, a registry assuming a colluder with the demo's τ): the curve is then the GDP
  bound alone.
* The amplification depends on the scale of Δ (the Gamma term does not scale with σ): these functions take
  Δ = the largest sensitivity a step can have. A smaller Δ with σ/Δ fixed is a post-processing of the
  larger one (Exp(1)/c₁ = Exp(1)/c₂ + an independent non-negative term for c₁ < c₂), so one profile at
  Δ_max covers every step whose sensitivity is at most Δ_max.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ._numeric import FloatArray
from .additive import ExGaussianNoise, additive_noise_delta
from .conversions import gdp_delta
from .profile import PrivacyProfile
from .residual import ExGammaNoise, ResidualPenaltyAcceptance, residual_shift_delta
from .reveal_sign import AcceptanceModel, PenaltyAcceptance, sign_reveal_privacy
from .threat import Observation, ThreatModel, observation

__all__ = [
    "GAMMA_NEGLIGIBLE_S",
    "penalty_blinded_profile",
    "penalty_gdp_mu",
    "penalty_reveal_mu",
    "penalty_sigma",
    "penalty_sign_profile",
    "penalty_step_profile",
    "penalty_sum_profile",
]

#: residual Gaussian sd from which the Gamma term's amplification is not computed (see the module docstring)
GAMMA_NEGLIGIBLE_S = 8.0


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


def _eps_top(fn: Callable[[FloatArray], FloatArray], start: float = 1.0) -> float:
    top = start
    while float(np.asarray(fn(np.array([top])))[0]) > 1e-17 and top < 60.0:
        top *= 1.5
    return min(top, 60.0)


def _residual(sigma: float, threat: ThreatModel) -> tuple[float, float]:
    """(s, k): the residual noise N(0, s²) + Gamma(k, 1) an observer under ``threat`` faces."""
    return sigma * math.sqrt(threat.residual_parties), threat.residual_shape


@functools.lru_cache(maxsize=128)
def penalty_sum_profile(
    sensitivity: float, sigma: float, threat: ThreatModel, step: float = 0.01
) -> PrivacyProfile:
    """Sum reveal with penalty noise: S = a + N(0, rσ²) + Gamma(r/m, 1), r = m − t residual parties.

    Outside observer (r = m): the exact ex-Gaussian curve (``additive``). t ≥ 1 colluders: the numerical
    bound of ``residual`` (their own noise removed; the Gamma part left is not log-concave). Both are
    intersected with the GDP bound μ = Δ/(σ√r)."""
    mu = penalty_gdp_mu(sensitivity, sigma, threat)
    s, k = _residual(sigma, threat)
    if k < 1.0 and s >= GAMMA_NEGLIGIBLE_S:
        prof = PrivacyProfile.from_gdp(mu, step=step)
        return PrivacyProfile(
            prof.eps,
            prof.deltas,
            f"penalty + sum reveal: the GDP bound {mu:.6g} alone (residual sd {s:.4g} >= "
            f"{GAMMA_NEGLIGIBLE_S:g}: the Gamma({k:.4g}) term's amplification is nil at this scale), "
            f"sigma={sigma:.4g}, Delta={sensitivity:.4g}, {threat.name}",
            "exact",
        )
    noise_delta: Callable[[FloatArray], FloatArray]
    if k == 1.0:
        ex = ExGaussianNoise(s)
        method = "exact"

        def noise_delta(e: FloatArray) -> FloatArray:
            return additive_noise_delta(e, sensitivity, ex)
    else:
        gam = ExGammaNoise(s, k)
        method = "numerical bound"

        def noise_delta(e: FloatArray) -> FloatArray:
            return residual_shift_delta(e, sensitivity, gam)

    def delta(e: FloatArray) -> FloatArray:
        return np.minimum(noise_delta(e), np.asarray(gdp_delta(mu, e)))

    top = _eps_top(lambda e: np.asarray(gdp_delta(mu, e)))  # the GDP curve caps the minimum
    return PrivacyProfile.from_delta_function(
        delta,
        top,
        step,
        description=(
            f"penalty + sum reveal: a + N(0, {threat.residual_parties}*sigma^2) + Gamma({k:.4g}), "
            f"sigma={sigma:.4g}, Delta={sensitivity:.4g}, {threat.name}"
        ),
        method=method,
    )


def penalty_blinded_profile(
    sensitivity: float, sigma: float, threat: ThreatModel, step: float = 0.01
) -> PrivacyProfile:
    """Blinded reveal with penalty noise: bounded by the sum reveal's curve (post-processing)."""
    return _sum_bound(
        "penalty + blinded reveal, bounded by the sum reveal (post-processing; not tight): ",
        sensitivity,
        sigma,
        threat,
        step,
    )


def _sum_bound(
    what: str, sensitivity: float, sigma: float, threat: ThreatModel, step: float
) -> PrivacyProfile:
    """The sum reveal's curve, described as the bound of a post-processing of it (``what`` first)."""
    prof = penalty_sum_profile(sensitivity, sigma, threat, step)
    return PrivacyProfile(prof.eps, prof.deltas, what + prof.description, prof.method, prof.pure_eps)


@functools.lru_cache(maxsize=128)
def penalty_sign_profile(
    sensitivity: float,
    sigma: float,
    threat: ThreatModel,
    a_min: float = -math.inf,
    a_max: float = math.inf,
    grid_step: float | None = None,
    eps_step: float = 0.01,
) -> PrivacyProfile:
    """Sign reveal with penalty noise: the rigorous Bernoulli cover of p(a) = P(a + N(0, rσ²) + Gamma(r/m)
    ≥ 0) (``reveal_sign``; r = m − t residual parties), intersected with the GDP bound and the sum-reveal
    curve (the bit is a post-processing of the sum)."""
    mu = penalty_gdp_mu(sensitivity, sigma, threat)
    s, k = _residual(sigma, threat)
    model: AcceptanceModel = PenaltyAcceptance(s) if k == 1.0 else ResidualPenaltyAcceptance(s, k)
    res = sign_reveal_privacy(
        model,
        sensitivity,
        a_min,
        a_max,
        grid_step=grid_step,
        eps_step=eps_step,
        threat=threat.name,
    )
    grid = np.asarray(res.profile.eps)
    # The bit is a post-processing of the revealed sum, so the sum's curve also bounds it.
    sum_curve = penalty_sum_profile(sensitivity, sigma, threat, eps_step).delta_at(grid)
    deltas = np.minimum.reduce([np.asarray(res.profile.deltas), np.asarray(gdp_delta(mu, grid)), sum_curve])
    return PrivacyProfile(
        tuple(grid),
        tuple(deltas),
        "penalty + sign reveal (min with the sum-reveal curve and the GDP bound): " + res.profile.description,
        "numerical bound",
        res.pure_eps,
    )


def penalty_step_profile(
    observed: str | Observation, sensitivity: float, sigma: float, threat: ThreatModel, step: float = 0.01
) -> PrivacyProfile:
    """One penalty decision as seen by ``threat`` when it observes ``observed`` (``coalition_view``: the
    view's ``observed`` or its ``observation``): the sum reveal's curve, for the sum itself and for every
    post-processing of it (blinded; the sign, whose own cover is never below it: module docstring)."""
    obs = observation(observed) if isinstance(observed, str) else observed
    if obs.noisy_sum:
        return penalty_sum_profile(sensitivity, sigma, threat, step)
    if obs.of_sum:
        what = f"penalty + {obs.name} reveal, bounded by the sum reveal ({obs.sum_bound}): "
        return _sum_bound(what, sensitivity, sigma, threat, step)
    raise ValueError(f"no penalty profile for what a coalition observes in {obs.name!r}")
