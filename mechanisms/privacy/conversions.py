"""Conversions between privacy notions: GDP ↔ (ε, δ), trade-off function → δ(ε), pure DP → GDP,
and curve fitting below empirical (α, β) points.

Owns the closed forms of Gaussian differential privacy (Dong, Roth, Su, "Gaussian Differential
Privacy", JRSSB 84, 2022):

* ``δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` (Corollary 2.13), evaluated in log space so it
  stays accurate for large ε;
* its inverses in ε (``gdp_eps``) and in μ (``gdp_mu``), by bracketed root finding, rounded in the
  conservative direction;
* the general primal–dual conversion ``δ_f(ε) = sup_α [1 − e^ε α − f(α)] = 1 + f*(−e^ε)``
  (Proposition 2.12);
* pure ε-DP → μ-GDP (the smallest μ with G_μ ≤ f_{ε,0}), by a grid cover that is rigorous;
* ``est_gdp`` / ``est_epsdelta``: the tightest GDP / (ε, δ) curve lying on or below a finite set of
  (α, β) points. These are *descriptive* fits (an audit's lower bound on leakage) and never a
  privacy guarantee; both functions say so with a ``UserWarning``.

Threat model: none of its own; these are statements about trade-off functions. Everything here is
pure and deterministic.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import overload

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from ._numeric import FloatArray, as_float_array, bisect_decreasing

__all__ = [
    "delta_from_tradeoff",
    "est_epsdelta",
    "est_gdp",
    "gdp_delta",
    "gdp_eps",
    "gdp_mu",
    "pure_dp_to_gdp",
]


def _gdp_delta_array(mu: FloatArray, eps: FloatArray) -> FloatArray:
    mu, eps = np.broadcast_arrays(np.asarray(mu, dtype=np.float64), np.asarray(eps, dtype=np.float64))
    out = np.zeros(mu.shape, dtype=np.float64)
    live = (mu > 0) & np.isfinite(eps)
    infinite_mu = np.isinf(mu) & np.isfinite(eps)
    out[infinite_mu] = 1.0
    live &= ~infinite_mu
    if np.any(live):
        m = mu[live]
        e = eps[live]
        log_a = special.log_ndtr(-e / m + m / 2.0)
        log_b = e + special.log_ndtr(-e / m - m / 2.0)
        # δ = A − B = A (1 − B/A), B/A < 1 always; A = 0 (log A = −inf) means δ = 0.
        finite = np.isfinite(log_a)
        diff = np.minimum(np.where(finite, log_b - np.where(finite, log_a, 0.0), -np.inf), 0.0)
        out[live] = np.where(finite, np.exp(log_a) * -np.expm1(diff), 0.0)
    return np.clip(out, 0.0, 1.0)


def _gdp_delta_scalar(mu: float, eps: float) -> float:
    """:func:`_gdp_delta_array` for one finite μ > 0 and ε (the same log-space formula, without arrays: the
    root finding of :func:`gdp_eps` calls it a few dozen times, and a registry checks a batch with it)."""
    log_a = float(special.log_ndtr(-eps / mu + mu / 2.0))
    if not math.isfinite(log_a):
        return 0.0
    log_b = eps + float(special.log_ndtr(-eps / mu - mu / 2.0))
    return min(max(math.exp(log_a) * -math.expm1(min(log_b - log_a, 0.0)), 0.0), 1.0)


@overload
def gdp_delta(mu: float, eps: float) -> float: ...
@overload
def gdp_delta(mu: float, eps: FloatArray) -> FloatArray: ...
def gdp_delta(mu: float, eps: float | FloatArray) -> float | FloatArray:
    """δ(ε) of μ-GDP: ``Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` (exact, log-space evaluation).

    ``mu = 0`` gives 0 (identical distributions); ``eps = inf`` gives 0.
    """
    if mu < 0 or math.isnan(mu):
        raise ValueError(f"GDP parameter mu must be >= 0, got {mu}")
    arr = as_float_array(eps)
    out = _gdp_delta_array(np.asarray(mu, dtype=np.float64), arr)
    if arr.ndim == 0:
        return float(out)
    return out


def gdp_eps(mu: float, delta: float) -> float:
    """Smallest ε ≥ 0 with ``gdp_delta(mu, ε) <= delta`` (root finding, rounded up).

    Returns 0 when δ already covers ε = 0 and ``inf`` for ``delta <= 0`` with ``mu > 0``.
    """
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta}")
    if mu < 0:
        raise ValueError(f"GDP parameter mu must be >= 0, got {mu}")
    if mu == 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    if delta <= 0.0:
        return math.inf
    if math.isinf(mu):
        return math.inf
    f = _gdp_delta_scalar
    hi = 1.0
    while f(mu, hi) > delta:
        hi *= 2.0
        if hi > 1e8:
            return math.inf
    eps = float(optimize.brentq(lambda e: f(mu, e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-14))
    while f(mu, eps) > delta or gdp_delta(mu, eps) > delta:  # conservative rounding
        eps = math.nextafter(eps, math.inf) if eps > 1 else eps + 1e-13
    return eps


def gdp_mu(eps: float, delta: float) -> float:
    """The μ whose GDP curve passes through (ε, δ): solves ``gdp_delta(μ, ε) = δ`` for μ.

    ``gdp_delta`` is increasing in μ, so this is the unique root (bracketed, tolerance 1e-14).
    Note the direction of the implication: μ-GDP implies (ε, gdp_delta(μ, ε))-DP, but an
    (ε, δ)-DP mechanism is in general *not* μ-GDP for any μ. Use this to express one point of a
    GDP curve as μ, or to compare curves.
    """
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta}")
    if delta == 0.0:
        return 0.0
    if delta == 1.0:
        return math.inf
    hi = 1.0
    while gdp_delta(hi, eps) < delta:
        hi *= 2.0
    return float(optimize.brentq(lambda m: gdp_delta(m, eps) - delta, 1e-300, hi, xtol=1e-14, rtol=1e-14))


def delta_from_tradeoff(
    f: Callable[[FloatArray], FloatArray],
    eps: npt.ArrayLike,
) -> FloatArray:
    """Numerical ``δ(ε) = sup_α [1 − e^ε α − f(α)]`` for a convex trade-off function ``f``.

    ``f`` takes and returns float arrays. The objective is concave in α when ``f`` is convex, so a
    dense grid (log-spaced near α = 0, where the maximiser sits for large ε) followed by bounded
    scalar refinement around the best grid point finds the supremum to optimiser tolerance
    (~1e-12). For non-convex ``f`` the result is only a lower estimate of the supremum.
    """
    e = np.atleast_1d(as_float_array(eps))
    grid = np.unique(np.concatenate([[0.0, 1.0], np.logspace(-16, 0, 800), np.linspace(0.0, 1.0, 2001)]))
    fv = np.asarray(f(grid), dtype=np.float64)
    out = np.empty_like(e)
    for k, ek in enumerate(e):
        if np.isposinf(ek):
            # δ(∞) = 1 − f(0+) captured by the smallest positive grid point and by α = 0.
            out[k] = max(0.0, 1.0 - float(fv[0]))
            continue
        slope = math.exp(ek)
        vals = 1.0 - slope * grid - fv
        i = int(np.argmax(vals))
        best = float(vals[i])
        lo = grid[max(i - 1, 0)]
        hi = grid[min(i + 1, grid.size - 1)]
        if hi > lo:
            res = optimize.minimize_scalar(
                lambda a, s=slope: -(1.0 - s * a - float(np.asarray(f(np.array([a])))[0])),
                bounds=(lo, hi),
                method="bounded",
                options={"xatol": 1e-14},
            )
            best = max(best, float(-res.fun))
        out[k] = max(0.0, best)
    return out.reshape(np.shape(eps))


def pure_dp_to_gdp(eps: float, n_grid: int = 4000) -> float:
    """Smallest μ (rounded up) such that every ε-DP mechanism is μ-GDP, i.e. ``G_μ ≤ f_{ε,0}``.

    Uses ``δ_{ε,0}(ε') = (e^ε − e^{ε'}) / (1 + e^ε)`` for ``0 ≤ ε' ≤ ε`` and the ordering of trade-off
    functions through their δ curves. Between grid points ``ε'_i < ε'_{i+1}`` the requirement
    ``δ_μ(ε'_{i+1}) ≥ δ_{ε,0}(ε'_i)`` covers the whole interval (both curves are non-increasing), so the
    answer is rigorous for any grid; a finer grid only tightens it.
    """
    if eps < 0 or math.isnan(eps):
        raise ValueError(f"eps must be >= 0, got {eps}")
    if eps == 0:
        return 0.0
    if math.isinf(eps):
        return math.inf
    grid = np.linspace(0.0, eps, n_grid + 1)
    target = (math.exp(eps) - np.exp(grid[:-1])) / (1.0 + math.exp(eps))
    at = grid[1:]
    hi = 4.0 * eps + 40.0

    def neg_delta(mu: FloatArray) -> FloatArray:
        return -_gdp_delta_array(mu, at)

    # Solve -δ_μ(ε'_{i+1}) = -target_i; -δ is decreasing in μ. Take the upper end for safety.
    mus = bisect_decreasing(neg_delta, -target, 0.0, hi, iterations=200)
    mu = float(np.max(mus)) * (1.0 + 1e-12) + 1e-15
    return mu


def _ceil_significant(x: float, digits: int) -> float:
    if x == 0.0 or not math.isfinite(x):
        return x
    exponent = math.floor(math.log10(abs(x))) - digits + 1
    scale = 10.0**exponent
    y = math.ceil(x / scale) * scale
    while y < x:
        y = math.nextafter(y, math.inf)
    return y


def _check_points(alphas: npt.ArrayLike, betas: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    a = np.atleast_1d(as_float_array(alphas))
    b = np.atleast_1d(as_float_array(betas))
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"alphas and betas must be equal-length 1-d sequences, got {a.shape} and {b.shape}")
    if np.any(~np.isfinite(a)) or np.any(~np.isfinite(b)):
        raise ValueError("alphas and betas must be finite")
    if np.any((a < 0) | (a > 1) | (b < 0) | (b > 1)):
        raise ValueError("alphas and betas must lie in [0, 1] (they are error probabilities)")
    return a, b


_NO_GUARANTEE = (
    "{name}: a curve fitted below a finite set of (alpha, beta) points is NOT a privacy guarantee; "
    "the points only upper-bound the true trade-off function at those alphas (an audit's lower bound "
    "on leakage). Use an analysed mechanism's curve for accounting."
)


def est_gdp(alphas: npt.ArrayLike, betas: npt.ArrayLike, digits: int = 4) -> float:
    """Smallest μ (rounded *up* to ``digits`` significant digits) with ``G_μ(α_i) ≤ β_i`` for all points.

    Point i needs ``μ ≥ Φ⁻¹(1 − α_i) − Φ⁻¹(β_i)``. A point with α = 0 and β < 1 (or β = 0 and α < 1)
    forces μ = ∞. Always emits a ``UserWarning``: points give no guarantee.
    """
    a, b = _check_points(alphas, betas)
    warnings.warn(_NO_GUARANTEE.format(name="est_gdp"), UserWarning, stacklevel=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = -special.ndtri(a) - special.ndtri(b)
    need = np.where((a >= 1.0) | (b >= 1.0), 0.0, need)
    need = np.where(np.isnan(need), 0.0, need)
    mu = max(0.0, float(np.max(need)))
    return _ceil_significant(mu, digits)


def est_epsdelta(alphas: npt.ArrayLike, betas: npt.ArrayLike, delta: float = 0.0, digits: int = 4) -> float:
    """Smallest ε (rounded *up*) with ``f_{ε,δ}(α_i) ≤ β_i`` for all points, at the given δ.

    ``f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α))``, so point i needs
    ``e^ε ≥ (1 − δ − β_i)/α_i`` and ``e^ε ≥ (1 − δ − α_i)/β_i``. Always emits a ``UserWarning``.
    """
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [0, 1], got {delta}")
    a, b = _check_points(alphas, betas)
    warnings.warn(_NO_GUARANTEE.format(name="est_epsdelta"), UserWarning, stacklevel=2)
    num1 = 1.0 - delta - b
    num2 = 1.0 - delta - a
    with np.errstate(divide="ignore", invalid="ignore"):
        r1 = np.where(num1 <= 0, 0.0, np.where(a > 0, num1 / np.where(a > 0, a, 1.0), np.inf))
        r2 = np.where(num2 <= 0, 0.0, np.where(b > 0, num2 / np.where(b > 0, b, 1.0), np.inf))
        need = np.log(np.maximum(np.maximum(r1, r2), 1.0))
    eps = max(0.0, float(np.max(need)))
    return _ceil_significant(eps, digits)
