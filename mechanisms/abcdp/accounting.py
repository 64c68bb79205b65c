"""Privacy accounting for the ABCDP variants: noise scale from a target ε and ε from a noise scale.

Owns the formulas only (no sampling):

* Laplace SVT (c-sample ABCDP, Park, Vinaroz, Jitkrittum, Entropy 2021, Theorem 1): threshold noise
  Lap(b), distance noise Lap(2b), cut-off c. ε_total = (c+1)Δ/b without RESAMPLE (one threshold draw
  costs Δ/b, each of the c accepts 2Δ/(2b)), ε_total = 2cΔ/b with RESAMPLE (c AboveThreshold runs of
  2Δ/b each). Pure DP, δ = 0.
* Gaussian SVT (option): threshold noise N(0, σ₁²), distance noise N(0, σ₂²), RESAMPLE only. Each
  AboveThreshold segment (up to the next accept) over at most k candidates is
  (α, αΔ²/σ₁² + 2αΔ²/σ₂² + log(k)/(α−1))-RDP: Zhu & Wang, "Improving sparse vector technique with Rényi
  differential privacy", NeurIPS 2020, Theorem 8, as transcribed from the authors' reference
  implementation (autodp, ``RDP_gaussian_svt_c1``, general case); we did not re-derive it. The c segments
  compose additively in RDP and are converted to (ε, δ) with ``dp_accounting.rdp.compute_epsilon``.
  Without RESAMPLE (one threshold for all c accepts) we know no bound we can vouch for, so it is refused.
* Rejection ABCDP with Gaussian noise (arXiv version): each candidate releases the bit
  1[min(ρ, B) + n ≤ ε_abc], n ~ N(0, σ²). The paper's per-candidate bound h(σ) is

      h(σ) = min(1, Δ / (σ √(2π))) / Φ(min(ε_abc − B, −ε_abc) / σ),

  read from the ParkLabML/ABCDP reference code (``rejectABCDP.log_eps_dp``); our derivation of it: with
  z = (ε_abc − ρ)/σ the accept probability is Φ(z) and |z − z'| ≤ Δ/σ for neighbours, so
  log Φ(z) − log Φ(z') ≤ (Φ(z) − Φ(z'))/Φ(z') ≤ min(1, Δ φ(0)/σ)/Φ(z'), and ρ ∈ [0, B] gives
  Φ(z') ≥ Φ((ε_abc − B)/σ); the reject probability Φ(−z') ≥ Φ(−ε_abc/σ) likewise. We also give the
  tight value (log Φ is concave, so the largest log-ratio over a window of width Δ/σ sits at the lowest
  end of the feasible range), which h(σ) upper-bounds. σ for a target is found by bisection. T candidates
  compose: basic (Tε₀) or, with δ > 0, via ε₀-DP ⇒ ε₀²/2-zCDP (Bun & Steinke 2016, Prop. 3.3) and the
  RDP→(ε, δ) conversion; we report the smaller.
* Soft ABCDP (arXiv version): each candidate releases ρ/ε_abc + σ·N(0, 1) (weights exp(−max(·, 0)) are
  post-processing): a Gaussian mechanism with sensitivity Δ/ε_abc, noise multiplier σ ε_abc/Δ, composed
  over T candidates with ``dp_accounting.rdp.RdpAccountant`` and converted to (ε, δ).

Δ is always the replace-one sensitivity of the distance ρ to one record of the private data.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import dp_accounting
import numpy as np
import numpy.typing as npt
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import special

FloatArray = npt.NDArray[np.float64]

#: RDP orders used for the conversions here: dense near 1, geometric up to 1e5.
RDP_ORDERS: FloatArray = np.unique(
    np.concatenate([np.linspace(1.01, 12.0, 220), np.geomspace(12.0, 1e5, 160)])
)


def _check_positive(name: str, value: float) -> None:
    if not (value > 0.0) or math.isnan(value):
        raise ValueError(f"{name} must be > 0, got {value}")


def _check_c(c: int) -> None:
    if int(c) != c or c < 1:
        raise ValueError(f"the cut-off c must be a positive integer, got {c}")


def _check_delta(delta: float, *, allow_zero: bool) -> None:
    lo_ok = delta >= 0.0 if allow_zero else delta > 0.0
    if not (lo_ok and delta < 1.0):
        raise ValueError(f"delta must be in {'[0, 1)' if allow_zero else '(0, 1)'}, got {delta}")


# ---------------------------------------------------------------------------------------------------
# Laplace SVT (Algorithm 1, Theorem 1)
# ---------------------------------------------------------------------------------------------------


def svt_laplace_scale(eps_total: float, sensitivity: float, c: int, resample: bool) -> float:
    """Threshold noise scale b for a target ε_total: (c+1)Δ/ε, or 2cΔ/ε with RESAMPLE; 0 for ε = inf."""
    _check_c(c)
    _check_positive("sensitivity", sensitivity)
    _check_positive("eps_total", eps_total)
    if math.isinf(eps_total):
        return 0.0
    factor = 2 * c if resample else c + 1
    return factor * sensitivity / eps_total


def svt_laplace_eps(b: float, sensitivity: float, c: int, resample: bool) -> float:
    """ε_total of c-sample ABCDP with threshold scale b (distance scale 2b); inf for b = 0."""
    _check_c(c)
    _check_positive("sensitivity", sensitivity)
    if b < 0 or math.isnan(b):
        raise ValueError(f"noise scale b must be >= 0, got {b}")
    if b == 0.0:
        return math.inf
    factor = 2 * c if resample else c + 1
    return factor * sensitivity / b


# ---------------------------------------------------------------------------------------------------
# RDP helpers
# ---------------------------------------------------------------------------------------------------


def rdp_to_eps(orders: FloatArray, rdp: FloatArray, delta: float) -> float:
    """(ε, δ) from an RDP curve (dp_accounting's conversion, Canonne-Kamath-Steinke form)."""
    _check_delta(delta, allow_zero=False)
    eps, _ = rdp_lib.compute_epsilon(list(orders), list(rdp), delta)
    return float(eps)


def _bisect_decreasing(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """Smallest x (to ~1e-10 relative) in [lo, hi] with f(x) <= target, for f decreasing in x.

    Searches in log x; widens the bracket geometrically if needed.
    """
    for _ in range(200):
        if f(hi) <= target:
            break
        hi *= 4.0
    else:
        raise ValueError(f"could not reach target {target}: f({hi}) = {f(hi)}")
    for _ in range(200):
        if f(lo) > target:
            break
        lo /= 4.0
    else:
        return lo
    log_lo, log_hi = math.log(lo), math.log(hi)
    for _ in range(200):
        mid = 0.5 * (log_lo + log_hi)
        if f(math.exp(mid)) <= target:
            log_hi = mid
        else:
            log_lo = mid
        if log_hi - log_lo < 1e-11:
            break
    return math.exp(log_hi)


# ---------------------------------------------------------------------------------------------------
# Gaussian SVT (option; RESAMPLE only)
# ---------------------------------------------------------------------------------------------------


def gaussian_above_threshold_rdp(
    orders: FloatArray, sigma_threshold: float, sigma_distance: float, sensitivity: float, max_queries: int
) -> FloatArray:
    """RDP curve of one Gaussian AboveThreshold over at most ``max_queries`` candidates (Zhu & Wang Thm 8)."""
    _check_positive("sigma_threshold", sigma_threshold)
    _check_positive("sigma_distance", sigma_distance)
    _check_positive("sensitivity", sensitivity)
    if max_queries < 1:
        raise ValueError(f"max_queries must be >= 1, got {max_queries}")
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1.0):
        raise ValueError("RDP orders must be > 1 for the Gaussian SVT bound")
    d2 = sensitivity**2
    return a * d2 / sigma_threshold**2 + 2.0 * a * d2 / sigma_distance**2 + math.log(max_queries) / (a - 1.0)


def svt_gaussian_eps(
    sigma_threshold: float,
    sigma_distance: float,
    sensitivity: float,
    c: int,
    max_candidates: int,
    delta: float,
) -> float:
    """ε (at δ) of c-sample Gaussian SVT with RESAMPLE: c composed AboveThreshold segments."""
    _check_c(c)
    rdp = c * gaussian_above_threshold_rdp(
        RDP_ORDERS, sigma_threshold, sigma_distance, sensitivity, max_candidates
    )
    return rdp_to_eps(RDP_ORDERS, rdp, delta)


def svt_gaussian_scale(
    eps_total: float,
    delta: float,
    sensitivity: float,
    c: int,
    max_candidates: int,
    distance_ratio: float = 2.0,
) -> float:
    """σ₁ (threshold noise std) reaching ε_total at δ, with σ₂ = distance_ratio·σ₁; 0 for ε = inf."""
    _check_positive("eps_total", eps_total)
    _check_positive("distance_ratio", distance_ratio)
    _check_delta(delta, allow_zero=False)
    if math.isinf(eps_total):
        return 0.0

    def eps_of(s: float) -> float:
        return svt_gaussian_eps(s, distance_ratio * s, sensitivity, c, max_candidates, delta)

    return _bisect_decreasing(eps_of, eps_total, lo=sensitivity * 1e-3, hi=sensitivity * 10.0)


# ---------------------------------------------------------------------------------------------------
# Rejection ABCDP with Gaussian noise (arXiv version): h(σ)
# ---------------------------------------------------------------------------------------------------


def _check_rejection_args(sigma: float, sensitivity: float, eps_abc: float, rho_bound: float) -> None:
    _check_positive("sigma", sigma)
    _check_positive("sensitivity", sensitivity)
    _check_positive("eps_abc", eps_abc)
    _check_positive("rho_bound", rho_bound)


def rejection_gaussian_h(sigma: float, sensitivity: float, eps_abc: float, rho_bound: float) -> float:
    """The paper's per-candidate bound h(σ) = min(1, Δ/(σ√(2π))) / Φ(min(ε_abc − B, −ε_abc)/σ)."""
    _check_rejection_args(sigma, sensitivity, eps_abc, rho_bound)
    log_num = min(0.0, math.log(sensitivity) - math.log(sigma) - 0.5 * math.log(2.0 * math.pi))
    log_den = float(special.log_ndtr(min(eps_abc - rho_bound, -eps_abc) / sigma))
    log_h = log_num - log_den
    return math.exp(log_h) if log_h < 700.0 else math.inf


def rejection_gaussian_exact_eps(sigma: float, sensitivity: float, eps_abc: float, rho_bound: float) -> float:
    """Tight per-candidate ε of the bit 1[min(ρ, B) + N(0, σ²) ≤ ε_abc] over ρ, ρ' ∈ [0, B], |ρ−ρ'| ≤ Δ."""
    _check_rejection_args(sigma, sensitivity, eps_abc, rho_bound)
    step = min(sensitivity, rho_bound) / sigma
    z_accept = (eps_abc - rho_bound) / sigma  # lowest argument of Φ for "accept"
    z_reject = -eps_abc / sigma  # lowest argument of Φ for "reject"
    gaps = [float(special.log_ndtr(z + step) - special.log_ndtr(z)) for z in (z_accept, z_reject)]
    return max(gaps)


def compose_pure_dp(eps_each: float, count: int, delta: float = 0.0) -> float:
    """ε of ``count`` adaptively composed ε_each-DP releases: basic, or via zCDP when δ > 0 (smaller)."""
    if eps_each < 0 or math.isnan(eps_each):
        raise ValueError(f"eps_each must be >= 0, got {eps_each}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    _check_delta(delta, allow_zero=True)
    basic = eps_each * count
    if delta == 0.0 or count == 0 or math.isinf(eps_each):
        return basic
    rho = count * eps_each**2 / 2.0
    zcdp = rdp_to_eps(RDP_ORDERS, rho * RDP_ORDERS, delta)
    return min(basic, zcdp)


def rejection_gaussian_sigma(
    eps_total: float,
    n_candidates: int,
    sensitivity: float,
    eps_abc: float,
    rho_bound: float,
    delta: float = 0.0,
    bound: str = "paper",
) -> float:
    """σ such that n_candidates released bits cost at most ε_total (at δ); 0 for ε = inf.

    ``bound`` is "paper" (h(σ), as in the arXiv version) or "exact" (the tight per-candidate value).
    """
    _check_positive("eps_total", eps_total)
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
    if math.isinf(eps_total):
        return 0.0
    per_candidate = rejection_gaussian_h if bound == "paper" else rejection_gaussian_exact_eps
    if bound not in ("paper", "exact"):
        raise ValueError(f"bound must be 'paper' or 'exact', got {bound!r}")

    def total(sigma: float) -> float:
        return compose_pure_dp(per_candidate(sigma, sensitivity, eps_abc, rho_bound), n_candidates, delta)

    return _bisect_decreasing(total, eps_total, lo=sensitivity * 1e-2, hi=max(rho_bound, eps_abc))


# ---------------------------------------------------------------------------------------------------
# Soft ABCDP (arXiv version)
# ---------------------------------------------------------------------------------------------------


def soft_abcdp_eps(
    sigma_soft: float, sensitivity: float, eps_abc: float, n_candidates: int, delta: float
) -> float:
    """ε (at δ) of releasing ρ_t/ε_abc + σ_soft·N(0,1) for n_candidates candidates (RDP-accounted)."""
    _check_positive("sigma_soft", sigma_soft)
    _check_positive("sensitivity", sensitivity)
    _check_positive("eps_abc", eps_abc)
    _check_delta(delta, allow_zero=False)
    if n_candidates < 1:
        raise ValueError(f"n_candidates must be >= 1, got {n_candidates}")
    accountant = rdp_lib.RdpAccountant(
        orders=list(RDP_ORDERS), neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    accountant.compose(dp_accounting.GaussianDpEvent(sigma_soft * eps_abc / sensitivity), n_candidates)
    return float(accountant.get_epsilon(delta))


def soft_abcdp_sigma(
    eps_total: float, delta: float, sensitivity: float, eps_abc: float, n_candidates: int
) -> float:
    """σ_soft reaching ε_total at δ over n_candidates releases; 0 for ε = inf."""
    _check_positive("eps_total", eps_total)
    if math.isinf(eps_total):
        return 0.0

    def eps_of(s: float) -> float:
        return soft_abcdp_eps(s, sensitivity, eps_abc, n_candidates, delta)

    unit = sensitivity / eps_abc
    return _bisect_decreasing(eps_of, eps_total, lo=1e-3 * unit, hi=10.0 * unit)
