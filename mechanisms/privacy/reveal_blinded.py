"""Per-step privacy of the ``blinded`` reveal mode (v2): the coordinator learns Z = S·W.

Mechanism (DESIGN.md §1): S = a + E with E = Σ_j V_j ~ Exp(1) (a = log r), and an independent
blinding W = w0 + Σ_j W_j, Σ_j W_j ~ Exp(1). The implementation lower-bounds W by a small public
constant w0 (``hss.fixedpoint.FixedPoint().w_shift``, 2^−11 by default) to keep exact signs; w0 = 0
is the idealised model. sign(Z) = sign(S), so everything the sign reveal leaks, this leaks too; the
magnitude is blurred by W.

Threat model: the outside observer (coordinator). For a party that knows its own V_j and W_j, Z
is a post-processing of S (W is data-independent), so the sum-reveal analysis with the party's
residual noise (``reveal_sum``, ``ThreatModel.single_party``) is a valid — if loose — bound; this
module does not compute a tighter one. The continuous model is analysed: the fixed-point trap
(the opened integer S·W is divisible by the integer S; S = 0 is revealed exactly) must be removed
by the implementation (e.g. an independent secret additive term below W's resolution), and any
residual leakage of the fixed-point representation is *not* covered here.

Closed form at a = 0, w0 = 0: ``P(WV > z) = 2√z K₁(2√z)`` for W, V iid Exp(1)
(``blinded_k1_survival``), used to check the quadrature. In general there is no closed form:

* density and survival of Z on each sign branch are one-dimensional integrals over S, evaluated in
  log space with a composite Gauss–Legendre rule after the substitution s = s_lo + e^r, which makes
  the integrands smooth and rapidly decaying (relative accuracy ~1e-10 in tests);
* on a grid in y = log|Z| (per sign branch) the bin masses are exact survival differences and each
  bin's privacy loss is the larger of its end-point losses (the privacy-buckets rule); tails beyond
  the grid and bins where the neighbour has no mass go to the infinite-loss mass. This PLD
  (dp_accounting, pessimistic rounding) gives δ(ε) for the pair;
* the worst case is taken over a grid of a in [a_min, a_max − Δ] with neighbour a + Δ, in both
  orderings (the grid always contains a = −Δ when in range: the pair (−Δ, 0) maximises the sign
  leak), and then raised to at least the sign reveal's rigorous profile over the whole range
  (sign(Z) is a post-processing of Z, so this can only move the estimate towards the truth).

Status: a **numerical estimate**, not a certified bound: it assumes the loss is monotone within each
y-bin, that the worst case over a is attained on the a-grid, and that the worst neighbour is at
the full shift Δ (as for sum and sign). If the range allows a ≥ 0 and a' < 0, the negative sign has
probability 0 under one input and 1 − e^{a'} under the other: δ ≥ 1 − e^{max(a_min, −Δ)} at every ε,
exactly as for the sign reveal. The blinding helps only when the range keeps a < 0 (e.g. an
inflated rejection bound), where it removes the support edge that makes the sum reveal leak.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from scipy import special

from hss.fixedpoint import FixedPoint

from ._numeric import FloatArray, as_float_array, composite_gauss_legendre
from .profile import PrivacyProfile
from .reveal_sign import MetropolisAcceptance, sign_reveal_privacy

if TYPE_CHECKING:  # imported where used: dp_accounting brings scipy.signal and .stats (~0.7 s of CPU per
    # process), which a daemon whose charges compose in closed form never needs
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "BlindedBranches",
    "blinded_branches",
    "blinded_k1_survival",
    "blinded_log_density",
    "blinded_log_survival",
    "blinded_pair_delta",
    "blinded_reveal_profile",
]

DEFAULT_W0 = FixedPoint().w_shift  # the engine's lower bound on W (hss/protocols.py, blinded mode)
_NODES, _WEIGHTS = composite_gauss_legendre(160, 8)
_LOG_WEIGHTS = np.log(_WEIGHTS)
_R_SPAN_TAIL = 40.0  # e^-40 relative truncation where the integrand decays like e^r
_Z_CUT = 800.0  # e^{-z/s} < e^{-800} below s = z/800


def blinded_k1_survival(z: npt.ArrayLike) -> FloatArray:
    """``P(WV > z) = 2√z K₁(2√z)`` for W, V iid Exp(1), z ≥ 0 (closed form)."""
    x = as_float_array(z)
    r = 2.0 * np.sqrt(x)
    with np.errstate(invalid="ignore"):
        out = np.where(x > 0, r * special.kv(1, np.where(x > 0, r, 1.0)), 1.0)
    return np.asarray(out, dtype=np.float64)


def _lse_rows(vals: FloatArray) -> FloatArray:
    m = np.max(vals, axis=1)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.sum(np.exp(vals - safe[:, None]), axis=1)) + safe


def _log_quad_pair(
    log_sv_and_extra: Callable[[FloatArray], tuple[FloatArray, FloatArray]],
    r_lo: FloatArray,
    r_hi: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """log ∫ exp(h) dr and log ∫ exp(h + extra) dr over [r_lo, r_hi] per row (composite GL, log space)."""
    width = np.maximum(r_hi - r_lo, 0.0)
    r = r_lo[:, None] + width[:, None] * _NODES[None, :]
    h, extra = log_sv_and_extra(r)
    h = h + _LOG_WEIGHTS[None, :]
    with np.errstate(divide="ignore"):
        lw = np.log(width)
    ls = _lse_rows(h) + lw
    lg = _lse_rows(h + extra) + lw
    live = width > 0
    return np.where(live, lg, -np.inf), np.where(live, ls, -np.inf)


def _positive_branch(a: float, w0: float, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(log g, log survival) on Z > 0 at z = e^y; g(y) = z f_Z(z)."""
    z = np.exp(y)
    s_lo = max(a, 0.0)
    s_tail = s_lo + 60.0 + 3.0 * np.sqrt(z)
    s_hi = np.minimum(z / w0, s_tail) if w0 > 0 else s_tail
    with np.errstate(divide="ignore"):
        r_hi = np.log(np.maximum(s_hi - s_lo, 0.0))
    r_lo = np.log(z / _Z_CUT)
    if s_lo > 0:
        r_lo = np.minimum(r_lo, math.log(s_lo) - _R_SPAN_TAIL)
    empty = ~np.isfinite(r_hi)
    r_hi_f = np.where(empty, 0.0, r_hi)
    r_lo = np.where(empty, 0.0, np.minimum(r_lo, r_hi_f - _R_SPAN_TAIL))
    zc = z[:, None]
    log_z = np.log(zc)

    def integrand(r: FloatArray) -> tuple[FloatArray, FloatArray]:
        s = s_lo + np.exp(r)
        # survival integrand: f_S(s) P(W > z/s) ds/dr; density adds the factor (z/s) (W's density = its tail)
        return -(s - a) + (w0 - zc / s) + r, log_z - np.log(s)

    lg, ls = _log_quad_pair(integrand, r_lo, r_hi_f)
    if w0 > 0:
        # P(S > max(s_lo, z/w0)): there P(W > z/s) = 1 because W >= w0.
        edge = np.maximum(z / w0, s_lo)
        ls = np.logaddexp(ls, -(edge - a))
    lg = np.where(empty, -np.inf, lg)
    ls = np.where(empty, -(s_lo - a), ls)
    return lg, ls


def _negative_branch(a: float, w0: float, y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(log g, log survival) on Z < 0 at |z| = e^y (only when a < 0)."""
    if a >= 0:
        minus = np.full_like(y, -np.inf)
        return minus, minus
    z = np.exp(y)
    u_hi = np.minimum(-a, z / w0) if w0 > 0 else np.full_like(z, -a)
    r_hi = np.log(u_hi)
    r_lo = np.minimum(np.log(z / _Z_CUT), r_hi - _R_SPAN_TAIL)
    zc = z[:, None]
    log_z = np.log(zc)

    def integrand(r: FloatArray) -> tuple[FloatArray, FloatArray]:
        u = np.exp(r)
        return a + u + (w0 - zc / u) + r, log_z - r

    lg, ls = _log_quad_pair(integrand, r_lo, r_hi)
    if w0 > 0:
        c = z / w0
        # P(|S| > c, S < 0) = 1 − e^{a + c} for c < −a
        with np.errstate(divide="ignore", invalid="ignore"):
            extra = np.where(c < -a, np.log(-np.expm1(np.minimum(a + c, 0.0))), -np.inf)
        ls = np.logaddexp(ls, extra)
    return lg, ls


def blinded_log_density(y: npt.ArrayLike, a: float, w0: float = DEFAULT_W0, branch: int = 1) -> FloatArray:
    """log of ``|z| f_Z(z)`` at ``|z| = e^y`` on the sign branch ``branch`` (+1 or −1)."""
    yy = np.atleast_1d(as_float_array(y))
    fn = _positive_branch if branch > 0 else _negative_branch
    return fn(a, w0, yy)[0].reshape(np.shape(y))


def blinded_log_survival(y: npt.ArrayLike, a: float, w0: float = DEFAULT_W0, branch: int = 1) -> FloatArray:
    """log ``P(Z > e^y)`` (branch +1) or log ``P(Z < −e^y)`` (branch −1)."""
    yy = np.atleast_1d(as_float_array(y))
    fn = _positive_branch if branch > 0 else _negative_branch
    return fn(a, w0, yy)[1].reshape(np.shape(y))


@dataclass(frozen=True)
class BlindedBranches:
    """Tabulated law of Z for one a on a y = log|Z| grid: bin masses and end-point log densities."""

    a: float
    y: FloatArray
    log_g: tuple[FloatArray, FloatArray]  # (positive, negative) branch
    masses: tuple[FloatArray, FloatArray]  # per bin, per branch
    tail_mass: float  # outside the y-grid, both branches


def blinded_branches(a: float, w0: float, y: FloatArray) -> BlindedBranches:
    """Tabulate both sign branches of Z for one a."""
    lg_p, ls_p = _positive_branch(a, w0, y)
    lg_n, ls_n = _negative_branch(a, w0, y)
    p_pos = math.exp(min(a, 0.0))
    p_neg = 1.0 - p_pos
    sv_p, sv_n = np.exp(ls_p), np.exp(ls_n)
    m_p = np.maximum(sv_p[:-1] - sv_p[1:], 0.0)
    m_n = np.maximum(sv_n[:-1] - sv_n[1:], 0.0)
    # Lower tail P(|Z| < c), c = e^{y_0}: |S| has density <= 1 on each branch and P(W < x) <= x, so
    # P(|S| W < c) <= 2 ∫ min(1, c/u) du over u < T, plus P(|S| > T) <= e^{-(T - max(a, 0))}.
    c = math.exp(float(y[0]))
    big_t = 60.0 + max(a, 0.0)
    lower = 2.0 * c * (1.0 + math.log(big_t / c)) + math.exp(-60.0)
    tail = lower + float(sv_p[-1]) + (float(sv_n[-1]) if p_neg > 0 else 0.0)
    return BlindedBranches(a, y, (lg_p, lg_n), (m_p, m_n), tail)


def _direction_pld(
    p: BlindedBranches, q: BlindedBranches, discretization: float
) -> pld_lib.PrivacyLossDistribution:
    """Privacy-buckets PLD of law_a(Z) against law_{a'}(Z) (P = p, Q = q)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    losses: list[FloatArray] = []
    masses: list[FloatArray] = []
    infinity = p.tail_mass
    for b in range(2):
        with np.errstate(invalid="ignore"):
            loss = p.log_g[b] - q.log_g[b]
        bin_loss = np.fmax(loss[:-1], loss[1:])
        mass = p.masses[b]
        # a bin where P has mass but the loss is undefined or +inf: pessimistically infinite.
        bad = (mass > 0) & ~np.isfinite(bin_loss) & ~(bin_loss == -np.inf)
        infinity += float(np.sum(mass[bad]))
        ok = (mass > 0) & np.isfinite(bin_loss)
        losses.append(bin_loss[ok])
        masses.append(mass[ok])
    all_loss = np.concatenate(losses)
    all_mass = np.concatenate(masses)
    keys = np.ceil(all_loss / discretization).astype(np.int64)
    uniq, inv = np.unique(keys, return_inverse=True)
    summed = np.bincount(inv, weights=all_mass)
    pmf = {int(k): float(v) for k, v in zip(uniq, summed, strict=True)}
    return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        pmf, min(infinity, 1.0), discretization, pessimistic_estimate=True
    )


def _default_y_grid(a_hi: float, n: int) -> FloatArray:
    top = math.log(80.0 + 40.0 * max(a_hi, 0.0) + 1.0) + 3.0
    return np.linspace(-45.0, top, n)


def blinded_pair_delta(
    eps: npt.ArrayLike,
    a: float,
    a_prime: float,
    w0: float = DEFAULT_W0,
    n_y: int = 1500,
    discretization: float = 1e-4,
) -> FloatArray:
    """δ(ε) between Z under a and under a', worst of both orderings (numerical estimate)."""
    e = np.atleast_1d(as_float_array(eps))
    y = _default_y_grid(max(a, a_prime), n_y)
    bp, bq = blinded_branches(a, w0, y), blinded_branches(a_prime, w0, y)
    d1 = np.asarray(_direction_pld(bp, bq, discretization).get_delta_for_epsilon(e))
    d2 = np.asarray(_direction_pld(bq, bp, discretization).get_delta_for_epsilon(e))
    out = np.maximum(d1, d2)
    return out.reshape(np.shape(eps))


def blinded_reveal_profile(
    sensitivity: float,
    a_min: float,
    a_max: float,
    w0: float = DEFAULT_W0,
    n_a: int = 9,
    n_y: int = 1500,
    eps_max: float = 10.0,
    eps_step: float = 0.01,
    discretization: float = 1e-4,
) -> PrivacyProfile:
    """Worst case over a ∈ [a_min, a_max − Δ] (n_a grid points) and both orderings of (a, a + Δ).

    Outside-observer model, numerical estimate (see the module docstring for what it assumes).
    Costs about 0.1 s per grid value of a at the default resolution.
    """
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError(f"sensitivity Delta must be positive and finite, got {sensitivity}")
    if not (math.isfinite(a_min) and math.isfinite(a_max) and a_min <= a_max):
        raise ValueError(f"need a finite range a_min <= a_max, got [{a_min}, {a_max}]")
    if w0 < 0:
        raise ValueError(f"w0 must be >= 0, got {w0}")
    if a_max - a_min <= sensitivity:
        pairs = [(a_min, a_max)]
    else:
        lows = np.linspace(a_min, a_max - sensitivity, max(n_a, 1))
        if a_min <= -sensitivity <= a_max - sensitivity:
            lows = np.unique(np.append(lows, -sensitivity))  # the pair (−Δ, 0): worst sign leak
        pairs = [(float(x), float(x) + sensitivity) for x in lows]
    y = _default_y_grid(a_max, n_y)
    cache: dict[float, BlindedBranches] = {}

    def tab(x: float) -> BlindedBranches:
        if x not in cache:
            cache[x] = blinded_branches(x, w0, y)
        return cache[x]

    grid = np.arange(math.ceil(eps_max / eps_step) + 1, dtype=np.float64) * eps_step
    worst = np.zeros_like(grid)
    for lo, hi in pairs:
        p, q = tab(lo), tab(hi)
        for first, second in ((p, q), (q, p)):
            d = np.asarray(_direction_pld(first, second, discretization).get_delta_for_epsilon(grid))
            worst = np.maximum(worst, d)
    # sign(Z) = sign(S) is a post-processing of Z, so the true δ is at least the sign reveal's, whose
    # analysis covers every a in the range; taking the maximum only raises the estimate.
    sign = sign_reveal_privacy(MetropolisAcceptance(), sensitivity, a_min, a_max, eps_step=eps_step)
    worst = np.maximum(worst, sign.profile.delta_at(grid))
    desc = (
        f"blinded reveal (v2), Delta={sensitivity:.4g}, a in [{a_min:.4g}, {a_max:.4g}] "
        f"({len(pairs)} pairs), w0={w0:.3g}, outside observer"
    )
    return PrivacyProfile(tuple(grid), tuple(np.clip(worst, 0.0, 1.0)), desc, "numerical estimate", None)
