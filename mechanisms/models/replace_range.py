"""The replace-one range of a Bernoulli log-ratio over a public region of records (issue 35 item 3.4).

A registry protecting replace-one neighbours (record x replaced by x') is charged, per decision, the most one
replaced record moves its log acceptance ratio: sup over allowed records of |r(x) − r(x')|, r the record's
log-ratio log p(x | θ*) − log p(x | θ). Without more, that is twice the add-remove bound sup |r(x)|. For a
model with a Bernoulli outcome on a linear predictor η = zᵀθ (``f = log σ``),

    r(x, 1) = f(η*) − f(η),      r(x, 0) = f(−η*) − f(−η),        η = zᵀθ, η* = zᵀθ*,

so r depends on the record only through the point (η, η*) (outcome 1) or (−η, −η*) (outcome 0), and the
replace-one sensitivity is exactly sup g − inf g over T ∪ (−T), g(a, b) = f(b) − f(a) and T the region's
image under z ↦ (zᵀθ, zᵀθ*) (:func:`ratio_range`). The outcome matters: r(x, 1) − r(x, 0) = zᵀ(θ* − θ)
exactly (f(t) − f(−t) = t), so the range is never below the add-remove bound sup |zᵀ(θ* − θ)|, and a
bound that ignored the outcome — e.g. max zᵀv − min zᵀv, in which an intercept-only move cancels — is
below the truth (a move of the intercept alone by c moves every record's ratio, with range at least |c|).

**Certificate.** T is a convex polygon: the hull of the box's projected corners (exact), cut by half-planes
u·(a, b) ≤ h(u) whose h(u) is a certified support of the records' region in direction u (the model's
``eta_extent``: box ∩ ellipsoid) — a superset of the records' image, so sup and inf over it bound the true
ones. g is strictly increasing in b and decreasing in a (f' = σ(−t) ∈ (0, 1)), so from any interior point
a move along (−1, 1) raises g and along (1, −1) lowers it: both extremes lie on the boundary. On an edge
p(t) = p₀ + t(p₁ − p₀), t ∈ [0, 1], h(t) = g(p(t)) has |h''| ≤ (Δa² + Δb²)/4 (|f''| = σ(t)σ(−t) ≤ ¼), so
on a grid of K equal steps max h ≤ max of the grid values + (Δa² + Δb²)/(32 K²) (a function with
|h''| ≤ M is at most the larger end value plus M w²/8 on a step of width w), and min h likewise. The result
is padded by a relative 1e-9 for floating point. Pure: no I/O, no randomness.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

__all__ = ["GRID", "clip_halfplane", "convex_hull", "ratio_range"]

GRID = 64  # steps per polygon edge (the curvature term is (Δa² + Δb²)/(32 · 64²))
_PAD = 1e-9  # relative padding of a computed range (floating point of the polygon and of log σ)


def convex_hull(points: npt.ArrayLike) -> F64:
    """The convex hull of 2-D ``points`` (k, 2) as its vertices in counter-clockwise order (Andrew's
    monotone chain on plain floats; collinear points dropped; one or two vertices for a degenerate set)."""
    pts = sorted({(float(a), float(b)) for a, b in np.asarray(points, dtype=np.float64).reshape(-1, 2)})
    if len(pts) <= 2:
        return np.asarray(pts, dtype=np.float64).reshape(-1, 2)

    def half(seq: list[tuple[float, float]]) -> list[tuple[float, float]]:
        out: list[tuple[float, float]] = []
        for p in seq:
            while len(out) >= 2:
                o, q = out[-2], out[-1]
                if (q[0] - o[0]) * (p[1] - o[1]) - (q[1] - o[1]) * (p[0] - o[0]) > 0.0:
                    break
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(pts[::-1])
    return np.asarray(lower[:-1] + upper[:-1], dtype=np.float64)


def clip_halfplane(poly: F64, u: F64, h: float) -> F64:
    """The convex polygon ``poly`` (k, 2; vertices in order) cut to {p : u·p ≤ h} (Sutherland-Hodgman for one
    half-plane; empty (0, 2) when nothing is left)."""
    if poly.shape[0] == 0:
        return poly
    s = poly @ u - h
    if np.all(s <= 0.0):
        return poly
    out: list[F64] = []
    k = poly.shape[0]
    for i in range(k):
        p, q, sp, sq = poly[i], poly[(i + 1) % k], s[i], s[(i + 1) % k]
        if sp <= 0.0:
            out.append(p)
        if (sp < 0.0 < sq) or (sq < 0.0 < sp):
            out.append(p + (sp / (sp - sq)) * (q - p))
    return np.asarray(out, dtype=np.float64).reshape(-1, 2)


def clip_halfplanes(poly: F64, normals: npt.ArrayLike, bounds: npt.ArrayLike) -> F64:
    """``poly`` cut to {p : n_k·p ≤ h_k} for every row n_k of ``normals`` and h_k of ``bounds``, in order (the
    same cuts as :func:`clip_halfplane`, on plain floats: a polygon has a few dozen vertices at most)."""
    pts: list[list[float]] = np.asarray(poly, dtype=np.float64).reshape(-1, 2).tolist()
    nrm = np.asarray(normals, dtype=np.float64).reshape(-1, 2).tolist()
    for (u0, u1), h in zip(nrm, np.asarray(bounds, dtype=np.float64).reshape(-1).tolist(), strict=True):
        if not pts:
            break
        sv = [u0 * a + u1 * b - h for a, b in pts]
        if max(sv) <= 0.0:
            continue
        out: list[list[float]] = []
        for (pa, pb), sp, (qa, qb), sq in zip(pts, sv, pts[1:] + pts[:1], sv[1:] + sv[:1], strict=True):
            if sp <= 0.0:
                out.append([pa, pb])
            if (sp < 0.0 < sq) or (sq < 0.0 < sp):
                w = sp / (sp - sq)
                out.append([pa + w * (qa - pa), pb + w * (qb - pb)])
        pts = out
    return np.asarray(pts, dtype=np.float64).reshape(-1, 2)


def _log_sigmoid(t: F64) -> F64:
    return np.asarray(-np.logaddexp(0.0, -t), dtype=np.float64)


def ratio_ranges(polys: Sequence[npt.ArrayLike], grid: int = GRID) -> F64:
    """:func:`ratio_range` of each polygon, evaluated together (each padded to the most vertices by
    repeating its last vertex: the extra edges have length 0 and add their vertex's value only)."""
    pgs = [np.asarray(pg, dtype=np.float64).reshape(-1, 2) for pg in polys]
    if not pgs:
        return np.zeros(0)
    if any(pg.shape[0] == 0 for pg in pgs):
        raise ValueError("the records' region is empty in the (eta, eta*) plane")
    k = max(pg.shape[0] for pg in pgs)
    p0 = np.stack([np.vstack([pg, np.repeat(pg[-1:], k - pg.shape[0], axis=0)]) for pg in pgs])  # (n, k, 2)
    if not np.all(np.isfinite(p0)):
        raise ValueError("the records' region must be finite in the (eta, eta*) plane")
    p0 = np.concatenate([p0, -p0], axis=1)  # outcome 1's points, then outcome 0's (their negatives)
    p1 = np.concatenate([np.roll(p0[:, :k], -1, axis=1), np.roll(p0[:, k:], -1, axis=1)], axis=1)
    t = np.linspace(0.0, 1.0, grid + 1)
    d = p1 - p0
    pts = p0[:, :, None, :] + t[None, None, :, None] * d[:, :, None, :]  # (n, 2k edges, grid + 1, 2)
    g = _log_sigmoid(pts[..., 1]) - _log_sigmoid(pts[..., 0])
    curve = (d[..., 0] ** 2 + d[..., 1] ** 2) / (32.0 * grid**2)  # M w² / 8, M = (Δa² + Δb²)/4, w = 1/grid
    hi = np.max(g.max(axis=2) + curve, axis=1)
    lo = np.min(g.min(axis=2) - curve, axis=1)
    scale = 1.0 + np.abs(p0).max(axis=(1, 2))
    return np.asarray((hi - lo) + _PAD * scale, dtype=np.float64)


def ratio_range(poly: npt.ArrayLike, grid: int = GRID) -> float:
    """A certified upper bound of sup − inf of g(a, b) = log σ(b) − log σ(a) over T ∪ (−T), T the convex
    polygon ``poly`` (vertices (k, 2) in order, k ≥ 1) of the points (η, η*) a record of outcome 1 can
    take (outcome 0: their negatives): the replace-one range of a Bernoulli log-ratio (module docstring)."""
    return float(ratio_ranges([poly], grid)[0])
