"""Rényi-DP accounting of the penalty accept bit (issue 23 item 4): the bit's amplification at small Δ.

Owns the Rényi side of a fixed-sd penalty decision in the ``sign`` reveal: the coalition sees only
``B = 1[L + X ≥ 0]``, X = N(0, s²) + Gamma(k, 1) (k = 1: Exp(1), the outside observer), L the log ratio,
moved by at most Δ by one record. In GDP the bit gains nothing over the Gaussian (its trade-off as L → ∞
tends to G_{Δ/s}); in Rényi DP it does: ρ_bit(α, Δ) = sup_L max(D_α(Bern(p(L+Δ)) ‖ Bern(p(L))), reverse),
p(L) = P(L + X ≥ 0), is about 0.4–0.8 of the Gaussian's αΔ²/(2s²) (measured in the tests).

* ``ORDERS``: the order grid; ``rdp_eps(rho, alpha, delta)``: the improved RDP → (ε, δ) conversion
  ε = ρ + log((α − 1)/α) − (log δ + log α)/(α − 1) (Balle et al. 2020; Canonne, Kamath, Steinke 2020; the
  one dp_accounting's ``RdpAccountant`` uses). ``budget_order(eps_max, delta)``: the one order a Rényi
  filter fixes before the run (Feldman & Zrnic 2021: a filter at a FIXED α stays (α, B)-RDP under fully
  adaptive choice of the steps; choosing α afterwards is not valid): the grid order minimising the
  conversion of a Gaussian-shaped curve ρ(α) = αμ²/2 that lands exactly on (ε_max, δ).
* ``bit_rdp(orders, delta_shift, model)``: a rigorous upper bound on ρ_bit on the grid; ``BitRdpTable``:
  the bound on a geometric grid of Δ for one session (charged at the next grid Δ above each decision's).

Method of ``bit_rdp`` (rigorous up to floating point and the models' relative accuracy, padded):
for a ≤ b, D_α(Bern(a) ‖ Bern(b)) and D_α(Bern(b) ‖ Bern(a)) grow as a decreases or b increases (convexity
in the second argument and joint quasi-convexity, van Erven & Harremoës 2014, Thms 12–13: a Bernoulli
between a and b is a mixture of the two). p is non-decreasing, so for L in a cell [x_i, x_{i+1}] of a grid
the pair (p(L), p(L + Δ)) is dominated by (p(x_i), p(x_{i+1} + Δ)): on a uniform grid of spacing h with
Δ = n h, ρ_bit ≤ max_i D(p_i, p_{i+n+1}) (slack: a shift of Δ + h, O(h/Δ)). The same argument makes ρ_bit
non-decreasing in Δ, so a table on a Δ grid charges each decision at the next grid point above. Beyond
the grid, closed-form tail bounds (``_left_tail``, ``_right_tail``). Always also min'ed with the Gaussian
αΔ²/(2s²) (the bit is a post-processing of L + N(0, s²)). Pure: no I/O, no randomness.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy import special

from ._numeric import FloatArray
from .additive import ExGaussianNoise
from .residual import ResidualPenaltyAcceptance, exgamma_log_tails
from .reveal_sign import AcceptanceModel, PenaltyAcceptance

IntArray = npt.NDArray[np.int64]

__all__ = [
    "ORDERS",
    "BitRdpTable",
    "bit_rdp",
    "bit_rdp_table",
    "budget_order",
    "gaussian_rdp",
    "rdp_eps",
    "table_ratio",
]

#: the order grid (every Rényi event carries its ρ at these orders; a budget fixes one of them)
ORDERS: tuple[float, ...] = (1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0, 32.0)

_H = 32  # grid cells per Δ (slack of the cell argument: a shift of Δ(1 + 1/_H))
_TAIL_FRACTION = 1e-3  # tails are cut where their bound is below this fraction of the Gaussian at Δ_min
_C = 32  # cells per top block of the branch and bound in ``_core_max`` (a power of 2)
_CUT_BATCH = 64  # candidate tail cuts evaluated per batch in ``_build``
_G0 = 0.25  # the Gamma split of the right tail's lower bound on v


def rdp_eps(rho: float, alpha: float, delta: float) -> float:
    """ε at δ of an (α, ρ)-RDP mechanism: ρ + log((α − 1)/α) − (log δ + log α)/(α − 1), floored at 0."""
    if not alpha > 1:
        raise ValueError(f"order alpha must be > 1, got {alpha}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if not rho >= 0:
        raise ValueError(f"rho must be >= 0, got {rho}")
    eps = rho + math.log((alpha - 1.0) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)
    return max(0.0, eps)


def gaussian_rdp(alpha: float | FloatArray, mu: float) -> FloatArray:
    """ρ(α) = αμ²/2 of a μ-GDP Gaussian mechanism (exact)."""
    return np.asarray(np.asarray(alpha, dtype=np.float64) * mu * mu / 2.0, dtype=np.float64)


@functools.lru_cache(maxsize=128)
def budget_order(eps_max: float, delta: float, orders: tuple[float, ...] = ORDERS) -> float:
    """The fixed order of a Rényi filter for the budget (ε_max, δ): μ* solves
    min_α rdp_eps(αμ*²/2, α, δ) = ε_max (bisection), and the order attaining that minimum is returned.
    A function of the public budget alone, chosen before any output."""
    if not (eps_max > 0 and math.isfinite(eps_max)):
        raise ValueError(f"eps_max must be positive and finite, got {eps_max}")

    def best(mu: float) -> tuple[float, float]:
        vals = [(rdp_eps(a * mu * mu / 2.0, a, delta), a) for a in orders]
        return min(vals)

    lo, hi = 0.0, 1.0
    while best(hi)[0] < eps_max:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if best(mid)[0] < eps_max:
            lo = mid
        else:
            hi = mid
    return best(hi)[1]


# -- the accept bit ---------------------------------------------------------------------------------------
def _noise_params(model: AcceptanceModel) -> tuple[float, float, float]:
    """(s, k, relative accuracy of p and 1 − p) of a penalty accept-bit model."""
    if isinstance(model, PenaltyAcceptance):
        return model.s, 1.0, 1e-9
    if isinstance(model, ResidualPenaltyAcceptance):
        return model.s, model.k, 1e-7
    raise TypeError(f"bit_rdp needs a penalty accept-bit model, got {type(model).__name__}")


def _log_probs(s: float, k: float, x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(log p(x), log(1 − p(x))) with p(L) = P(L + X ≥ 0), computed in log space in chunks: k = 1 by the
    ex-Gaussian's closed form, k < 1 by the Beta mixture of ex-Gaussians (``exgamma_log_tails``)."""
    lp, lr = [], []
    for i in range(0, x.size, 8192):
        part = -x[i : i + 8192]
        if k == 1.0:
            ex = ExGaussianNoise(s)
            lp.append(np.asarray(ex.logsf(part), dtype=np.float64))
            lr.append(np.asarray(ex.logcdf(part), dtype=np.float64))
            continue
        sf, cdf = exgamma_log_tails(s, k, part)
        lp.append(sf)
        lr.append(cdf)
    return np.concatenate(lp), np.concatenate(lr)


def _left_tail(alphas: FloatArray, k: float, delta: float, log_b: float, log_rb: float) -> FloatArray:
    """sup over L ≤ x₀ of both orderings, given log b ≥ log p(x₀ + Δ) and log(1 − b) ≤ log(1 − p(x₀ + Δ)).
    With a = p(L) ≤ b' = p(L + Δ) ≤ b: b'/a ≤ R = 1/P(G ≥ Δ) (G ~ Gamma(k ≤ 1) is DFR, hence new-worse-
    than-used: P(G > y + Δ) ≥ P(G > y) P(G > Δ), which survives adding N), so
    D(b'‖a) ≤ log(1 + b R^{α−1})/(α − 1) and D(a‖b') ≤ log(b + (1 − b)^{1−α})/(α − 1)."""
    log_r = -math.log(special.gammaincc(k, delta))
    d1 = np.log1p(np.exp(log_b + (alphas - 1.0) * log_r)) / (alphas - 1.0)
    d2 = np.logaddexp(log_b, (1.0 - alphas) * log_rb) / (alphas - 1.0)
    return np.asarray(np.maximum(d1, d2), dtype=np.float64)


def _right_tail(alpha: float, s: float, k: float, delta: float, t: float, log_u_t: float) -> float:
    """sup over L ≥ t of both orderings, given log u_t ≥ log(1 − p(t)). With u = 1 − p(L) ≥ v = 1 − p(L + Δ):
    D(a‖b) ≤ log(1 + u^α v^{1−α})/(α − 1) and D(b‖a) ≤ log((1 − u)^{1−α} + v)/(α − 1), which is at most its
    value at u = v = u_t;
    u ≤ min(u_t, Φ(−L/s)) (X ≥ N) and v ≥ P(G ≤ g₀) Φ(−(L + Δ + g₀)/s). The product bound
    g(L) = Φ(−L/s)^α [P(G ≤ g₀) Φ(−(L + Δ + g₀)/s)]^{1−α} decreases for L ≥ (α − 1)(Δ + g₀): its log-
    derivative is (−α λ(x) + (α − 1) λ(y))/s, λ the inverse Mills ratio, x = L/s < λ(x), y = x + (Δ + g₀)/s,
    and 0 < λ' < 1 (Sampford 1953). Cells of width s/50 between t and there."""
    u_t = math.exp(log_u_t)
    if u_t >= 0.5:
        return math.inf
    d2 = math.log(math.exp((1.0 - alpha) * math.log1p(-u_t)) + u_t) / (alpha - 1.0)
    log_pg = math.log(special.gammainc(k, _G0))
    turn = max(t, (alpha - 1.0) * (delta + _G0))
    edges = np.append(np.arange(t, turn, s / 50.0), turn)
    lo, hi = edges[:-1], edges[1:]
    lu = np.minimum(log_u_t, special.log_ndtr(-lo / s)) if lo.size else np.array([])
    lv = log_pg + special.log_ndtr(-(hi + delta + _G0) / s) if hi.size else np.array([])
    cells = alpha * lu + (1.0 - alpha) * lv
    last = alpha * min(log_u_t, float(special.log_ndtr(-turn / s))) + (1.0 - alpha) * (
        log_pg + float(special.log_ndtr(-(turn + delta + _G0) / s))
    )
    log_g = max(float(np.max(cells)) if cells.size else -math.inf, last)
    d1 = float(np.logaddexp(0.0, log_g)) / (alpha - 1.0)
    return max(d1, d2)


@dataclass(frozen=True)
class BitRdpTable:
    """ρ_bit bounds for one session: ``bounds[j, i]`` ≥ ρ_bit(orders[i], deltas[j]) (and ≤ the Gaussian's)."""

    s: float
    k: float
    orders: tuple[float, ...]
    deltas: FloatArray = field(repr=False)
    bounds: FloatArray = field(repr=False)

    def rho(self, delta_shift: npt.ArrayLike) -> FloatArray:
        """Per decision (rows) and order (columns): the table at the next grid Δ ≥ the decision's (ρ_bit is
        non-decreasing in Δ); below the grid or above it the Gaussian αΔ²/(2s²) (above it: min with it)."""
        d = np.atleast_1d(np.asarray(delta_shift, dtype=np.float64))
        if np.any(d < 0) or np.any(~np.isfinite(d)):
            raise ValueError("sensitivities must be finite and >= 0")
        al = np.asarray(self.orders, dtype=np.float64)
        gauss = al[None, :] * (d[:, None] / self.s) ** 2 / 2.0
        idx = np.searchsorted(self.deltas, d * (1.0 - 1e-12), side="left")
        inside = idx < self.deltas.size
        out = gauss.copy()
        tab = self.bounds[np.minimum(idx, self.deltas.size - 1)]
        out[inside] = np.minimum(gauss[inside], tab[inside])
        return np.asarray(out, dtype=np.float64)

    def batch_rho(self, delta_shift: npt.ArrayLike) -> FloatArray:
        """Σ over a batch's decisions of ``rho``, per order."""
        return np.asarray(self.rho(delta_shift).sum(axis=0), dtype=np.float64)


def table_ratio(to: BitRdpTable, base: BitRdpTable, cap: float) -> FloatArray:
    """Per order, an upper bound of sup over 0 < Δ <= ``cap`` of to.rho(Δ)/base.rho(Δ): what a decision
    charged ``base.rho(Δ)`` costs at most under ``to`` (another coalition's view of the same bit), whatever
    its Δ. Each table is min(αΔ²/(2s²), b_j) on its cells (δ_{j−1}, δ_j], so on the elementary intervals
    between both grids' points and the points where either switches from the Gaussian to b_j both are a
    fixed c·Δ^0 or c·Δ², their ratio is monotone there, and its sup is at an end: evaluated at every right
    end and just past every left end (a relative 1e-9 in Δ, covered by a padding of 1e-8); near 0 both are
    Gaussian, the ratio (s_base/s_to)²."""
    if to.orders != base.orders:
        raise ValueError(f"the two tables must have the same orders, got {to.orders} and {base.orders}")
    if not (cap > 0 and math.isfinite(cap)):
        raise ValueError(f"cap must be positive and finite, got {cap}")
    al = np.asarray(base.orders, dtype=np.float64)
    points = [np.asarray([cap])]
    for t in (to, base):
        points.append(np.asarray(t.deltas, dtype=np.float64))
        g = al[None, :] / (2.0 * t.s**2)
        points.append(np.sqrt(np.asarray(t.bounds, dtype=np.float64) / g).ravel())  # Gaussian = b_j
    p = np.unique(np.concatenate(points))
    p = p[(p > 0) & (p <= cap)]
    lefts = np.r_[p[0] * 1e-6, p[:-1] * (1.0 + 1e-9)]  # just past each left end (the first: near 0)
    where = np.concatenate([lefts, p])
    num, den = to.rho(where), base.rho(where)
    ratio = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    return np.asarray(ratio.max(axis=0) * (1.0 + 1e-8), dtype=np.float64)


def _pair_matrix(
    alphas: FloatArray, la: FloatArray, lra: FloatArray, lb: FloatArray, lrb: FloatArray, eta: float
) -> FloatArray:
    """max(D_α(a‖b), D_α(b‖a)) per pair (rows) and order (columns) for a ≤ b, from the logs, every log value
    moved by ``eta`` in the pessimistic direction: a^α b^{1−α} is increasing in a and decreasing in b for
    α > 1 (likewise for 1 − a, 1 − b), so the padding adds (2α − 1)η to the log of each sum."""
    al = alphas[None, :]
    la, lra, lb, lrb = la[:, None], lra[:, None], lb[:, None], lrb[:, None]
    f1 = np.logaddexp(al * la + (1.0 - al) * lb, al * lra + (1.0 - al) * lrb)
    f2 = np.logaddexp(al * lb + (1.0 - al) * la, al * lrb + (1.0 - al) * lra)
    d = (np.maximum(f1, f2) + (2.0 * al - 1.0) * eta) / (al - 1.0)
    return np.asarray(np.maximum(d, 0.0), dtype=np.float64)


def _pair_sums(alphas: FloatArray, lp: FloatArray, lr: FloatArray, ia: IntArray, ib: IntArray) -> FloatArray:
    """max(S₁, S₂) per pair (rows) and order (columns) for the pairs (a, b) = (p[ia], p[ib]), a ≤ b, with
    S₁ = a^α b^{1−α} + (1 − a)^α (1 − b)^{1−α} and S₂ the same with a and b swapped: the Rényi divergences
    before their log (log S/(α − 1) is increasing in S, so a maximum over pairs needs one log, not one per
    pair). Linear space: S₁ = b e₁ + (1 − b) e₂, S₂ = a/e₁ + (1 − a)/e₂ with e₁ = (a/b)^α, e₂ = ((1 − a)/
    (1 − b))^α (two exponentials per pair and order, four per pair shared by the orders, so for three
    orders or more); rows where a probability or e^{±α·log ratio} could leave the floating-point range
    take one exponential per term. inf where a sum overflows (S > e^709)."""
    al = alphas[None, :]
    la, lra, lb, lrb = lp[ia], lr[ia], lp[ib], lr[ib]
    dp, dr = la - lb, lra - lrb

    def each_term(rows: npt.NDArray[np.bool_] | slice) -> FloatArray:
        la_, lra_, lb_, lrb_ = la[rows][:, None], lra[rows][:, None], lb[rows][:, None], lrb[rows][:, None]
        dp_, dr_ = dp[rows][:, None], dr[rows][:, None]
        with np.errstate(over="ignore"):
            s1 = np.exp(lb_ + al * dp_) + np.exp(lrb_ + al * dr_)
            s2 = np.exp(la_ - al * dp_) + np.exp(lra_ - al * dr_)
        return np.asarray(np.maximum(s1, s2), dtype=np.float64)

    if alphas.size <= 2:
        return each_term(slice(None))
    lim = 700.0 / float(np.max(alphas))
    lo = np.minimum(np.minimum(la, lra), np.minimum(lb, lrb))
    safe = (lo > -700.0) & (np.abs(dp) < lim) & (np.abs(dr) < lim)
    out = np.empty((ia.size, alphas.size))
    e1 = np.exp(al * dp[safe][:, None])
    e2 = np.exp(al * dr[safe][:, None])
    a, ra, b, rb = (np.exp(v[safe])[:, None] for v in (la, lra, lb, lrb))
    out[safe] = np.maximum(b * e1 + rb * e2, a / e1 + ra / e2)
    if not np.all(safe):
        out[~safe] = each_term(~safe)
    return out


def _core_max(
    alphas: FloatArray, lp: FloatArray, lr: FloatArray, first: int, last: int, n: int, stride: int, eta: float
) -> FloatArray:
    """Per order: max over the cells starting at first, first + stride, ... ≤ last of the pair bound
    (p_c, p_{c + stride + n}), by branch and bound over nested blocks, all orders at once: a block of w
    cells starting at c is bounded by the pair (p_c, p_{c + w stride + n}), which dominates each of its
    cells (the same monotonicity); blocks of ``_C`` cells are bounded first, and a block whose bound exceeds
    the best cell found so far at some order is halved, down to single cells. Exact maximum of the cell
    bounds (``_pair_matrix``'s, padded by η); an order whose sums overflow is redone in log space."""

    def bound(starts: IntArray, w: int) -> FloatArray:
        return _pair_sums(alphas, lp, lr, starts, starts + w * stride + n)

    w = _C
    starts = np.arange(first, last + 1, stride * w)
    vals = bound(starts, w)
    # a first best per order: the single cells of the highest block at each order
    top = np.unique(starts[np.argmax(vals, axis=0)])
    cells = (top[:, None] + stride * np.arange(w)[None, :]).ravel()
    cells = cells[cells <= last]
    best = np.max(bound(cells, 1), axis=0) if cells.size else np.zeros(alphas.size)
    while w > 1:
        starts = starts[np.any(vals > best[None, :], axis=1)]
        if starts.size == 0:
            break
        w //= 2
        starts = np.concatenate([starts, starts + stride * w])
        starts = starts[starts <= last]
        vals = bound(starts, w)
        if w == 1 and starts.size:
            best = np.maximum(best, np.max(vals, axis=0))
    with np.errstate(divide="ignore"):
        out = (np.log(best) + (2.0 * alphas - 1.0) * eta) / (alphas - 1.0)
    for i in np.nonzero(~np.isfinite(best))[0]:  # overflow: the log-space bound of every cell
        idx = np.arange(first, last + 1, stride)
        j = idx + stride + n
        out[i] = np.max(_pair_matrix(alphas[i : i + 1], lp[idx], lr[idx], lp[j], lr[j], eta))
    return np.asarray(np.maximum(out, 0.0), dtype=np.float64)


def _build(
    s: float, k: float, cap: float, orders: tuple[float, ...], ratio: float, span: float
) -> BitRdpTable:
    eta = 1e-9 if k == 1.0 else 1e-7
    al = np.asarray(orders, dtype=np.float64)
    d_min = cap / span
    h = d_min / _H
    # tails are cut where their bound is below a thousandth of the Gaussian at Δ_min, or (when the models'
    # accuracy padding is larger than that) twice the padding every cell carries anyway
    floor = np.maximum(
        _TAIL_FRACTION * al * (d_min / s) ** 2 / 2.0, 2.0 * (2.0 * al - 1.0) * eta / (al - 1.0)
    )
    # per order: the left cut x0 (left tail bound at Δ = cap below the floor) and the right cut t (right tail
    # bound at Δ = cap below the floor); both tail bounds are non-decreasing in Δ
    x0s = np.empty(al.size)
    t_cut = np.empty(al.size)
    steps = 0.5 * np.arange(_CUT_BATCH)  # candidate cuts every 0.5, their probabilities in one batch each
    lb = lrb = lr = np.empty(0)
    for i, a in enumerate(al):
        j = 0
        while True:
            if j % _CUT_BATCH == 0:
                lb, lrb = _log_probs(s, k, np.asarray(cap - 2.0 * s - 0.5 * j - steps, dtype=np.float64))
            x0 = -2.0 * s - 0.5 * j
            jj = j % _CUT_BATCH
            if _left_tail(al[i : i + 1], k, cap, float(lb[jj]) + eta, float(lrb[jj]) - eta)[0] <= floor[i]:
                break
            j += 1
        x0s[i] = x0
        j = 0
        while True:
            if j % _CUT_BATCH == 0:
                _, lr = _log_probs(s, k, np.asarray(2.0 * s + 0.5 * j + steps, dtype=np.float64))
            t = 2.0 * s + 0.5 * j
            if _right_tail(float(a), s, k, cap, t, float(lr[j % _CUT_BATCH]) + eta) <= floor[i]:
                break
            j += 1
        t_cut[i] = t
    x_start = float(x0s.min())
    n_cap = math.ceil(cap / h)
    size = math.ceil((float(t_cut.max()) - x_start) / h) + n_cap + (_C + 3) * (n_cap // _H + 1) + 2
    x = np.asarray(x_start + h * np.arange(size), dtype=np.float64)
    lp, lr = _log_probs(s, k, x)
    deltas: list[float] = []
    rows: list[FloatArray] = []
    target = d_min
    while True:
        n_raw = math.ceil(target / h - 1e-9)
        stride = max(1, n_raw // _H)
        n = math.ceil(n_raw / stride) * stride
        dj = n * h
        row = np.empty(al.size)
        # cells [x_c, x_c + stride h] covering [min x0, max t] (every order's [x0, t]: a superset of cells
        # only raises the maximum), each bounded by (p(x_c), p(x_c + stride h + Δ))
        core = _core_max(al, lp, lr, 0, int(np.searchsorted(x, t_cut.max(), side="left")), n, stride, eta)
        for i, a in enumerate(al):
            first = round((x0s[i] - x_start) / h)
            jb = first + n  # x0 + Δ
            left = float(_left_tail(al[i : i + 1], k, dj, float(lp[jb]) + eta, float(lr[jb]) - eta)[0])
            jt = int(np.searchsorted(x, t_cut[i], side="right")) - 1  # the grid point at or below t
            right = _right_tail(float(a), s, k, dj, float(t_cut[i]), float(lr[jt]) + eta)
            row[i] = min(max(float(core[i]), left, right), a * (dj / s) ** 2 / 2.0)
        deltas.append(dj)
        rows.append(row)
        if dj >= cap * (1.0 - 1e-12):
            break
        target = min(max(target * ratio, dj * (1.0 + 1e-9)), cap)
    return BitRdpTable(s, k, tuple(orders), np.asarray(deltas), np.asarray(rows))


@functools.lru_cache(maxsize=32)
def bit_rdp_table(
    model: AcceptanceModel,
    cap: float,
    orders: tuple[float, ...] = ORDERS,
    ratio: float = 1.03,
    span: float = 64.0,
) -> BitRdpTable:
    """The session's table: ρ_bit bounds on a geometric grid of Δ from cap/span to cap (ratio ≤ ``ratio``
    before rounding to the L grid), for the accept-bit ``model`` (``PenaltyAcceptance`` or
    ``ResidualPenaltyAcceptance``). Cached by its arguments (one build per session)."""
    s, k, _ = _noise_params(model)
    if not (cap > 0 and math.isfinite(cap)):
        raise ValueError(f"cap must be positive and finite, got {cap}")
    if not (ratio > 1 and span >= 1):
        raise ValueError("need ratio > 1 and span >= 1")
    if any(not a > 1 for a in orders):
        raise ValueError("orders must be > 1")
    return _build(s, k, float(cap), tuple(float(a) for a in orders), float(ratio), float(span))


def bit_rdp(orders: Sequence[float], delta_shift: float, model: AcceptanceModel) -> FloatArray:
    """A rigorous upper bound on ρ_bit(α, Δ) at each order (see the module docstring): the table of one
    Δ (span 1)."""
    table = bit_rdp_table(model, float(delta_shift), tuple(float(a) for a in orders), 1.03, 1.0)
    return np.asarray(table.bounds[-1], dtype=np.float64)
