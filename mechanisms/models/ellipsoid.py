"""A public covariate ellipsoid: the tight per-record bound of a linear predictor, and the clipping it needs.

Every regression model here has a linear predictor η = β_0 + zᵀβ in covariates z ∈ ℝ^p. The schema's box
bound |z_k| ≤ x_bound gives |Δη| ≤ |Δβ_0| + x_bound Σ_k |Δβ_k| (an L1 bound, loose by about √p for
correlated or unequally scaled covariates). With a public ellipsoid

    E = {z : (z − μ)ᵀ B⁻¹ (z − μ) ≤ R²},

μ and B a public centre and second-moment matrix (e.g. from a differentially private warm start, or declared
by the consortium) and R a public radius, the sup over E of |a + zᵀv| is exactly |a + μᵀv| + R‖v‖_B with
‖v‖_B = √(vᵀBv): for a proposal's change (Δβ_0, Δβ) this is the most one record can move η, hence (for
log-likelihoods 1-Lipschitz in η, as the logistic one) the per-record bound of the log acceptance ratio.

A record outside E is **clipped** into it along the ray from the centre:
z ← μ + (z − μ)·min(1, R/‖z − μ‖_{B⁻¹}).
Clipping is a modelling choice made in public: the chain is exact for the posterior of the clipped records,
and that is what the outputs say. The number of clipped records is counted for the registry's own audit log
only (a count sent out would be a release). With μ inside the schema's box the clipped point stays in the
box (a segment between two points of a convex set), so every record lies in K = box ∩ E.

**The sup over the intersection** (issue 35 item 3.1). The smaller of the box's and the ellipsoid's bounds
is loose where both bind (measured: 1.12× on the sum of a run's sensitivities, up to 1.56× on one step).
h_K(v) = sup over z ∈ K of zᵀv is a convex problem; :func:`intersection_support` bounds it by weak duality:
for every split v = w + (v − w),

    zᵀv = zᵀw + zᵀ(v − w) ≤ x_bound ‖w‖₁ + μᵀ(v − w) + R‖v − w‖_B        (z ∈ box, z ∈ E),

so every w gives a valid upper bound, whatever solver chose it (it is evaluated exactly, then padded by a
relative 1e-9 for floating point). The w used are the KKT multipliers of the box at each candidate face of
the box: with the coordinates S held at bounds b·σ_S and the others F free, the maximiser over the slice of E
is closed-form (a slice of an ellipsoid is an ellipsoid: centre μ_F + B_FS B_SS⁻¹ d_S, shape the Schur
complement C = B_FF − B_FS B_SS⁻¹ B_SF, radius² ρ² = R² − d_Sᵀ B_SS⁻¹ d_S, d_S = b σ_S − μ_S), and the
multiplier is w_S = v_S + B_SS⁻¹B_SF v_F − (‖v_F‖_C/ρ) B_SS⁻¹ d_S, w_F = 0. The minimum over all 3^p faces
(p ≤ :data:`MAX_ENUMERATED`) contains the true maximiser's, where strong duality holds (μ lies in the box
and R > 0: Slater), so the bound is exact up to rounding. Past that p, w is chosen by a descent on the dual
(:func:`_descent`; still a valid bound, exact where it finds the maximiser's face). The box's and the
ellipsoid's own bounds are w = v and w = 0, so the result is never above the smaller of the two.

Pure: no I/O, no randomness.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

__all__ = ["MAX_ENUMERATED", "Ellipsoid", "ellipsoid_from_args", "intersection_support"]

#: the largest p whose 3^p faces of the box are all tried (729); past it a descent on the dual
MAX_ENUMERATED = 6
_PAD = 1e-9  # relative padding of a computed bound (floating point of its few sums)
_DESCENT_ROUNDS, _POLISH = 200, 10  # past MAX_ENUMERATED: descent rounds, a face tried every 10


def _floats(name: str, value: Any, shape: tuple[int, ...]) -> F64:
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numbers of shape {shape}, got {value!r}") from exc
    if a.shape != shape or not np.isfinite(a).all():
        raise ValueError(f"{name} must be finite numbers of shape {shape}, got shape {a.shape}")
    return a


@dataclass(frozen=True)
class Ellipsoid:
    """E = {z : (z − μ)ᵀ B⁻¹ (z − μ) ≤ R²} in ℝ^p (``center`` μ, ``cov`` B positive definite, ``radius`` R).

    Stored as tuples so that a model holding one stays hashable and compares by value."""

    center: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    radius: float

    def __post_init__(self) -> None:
        p = len(self.center)
        mu = _floats("x_center", self.center, (p,))
        b = _floats("x_cov", self.cov, (p, p))
        if not (isinstance(self.radius, int | float) and 0 < self.radius < math.inf):
            raise ValueError(f"x_radius must be a finite number > 0, got {self.radius!r}")
        if not np.allclose(b, b.T, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(b).max(initial=0.0)))):
            raise ValueError("x_cov must be symmetric")
        if p and float(np.linalg.eigvalsh(b).min()) <= 0.0:
            raise ValueError("x_cov must be positive definite")
        object.__setattr__(self, "center", tuple(float(v) for v in mu))
        object.__setattr__(self, "cov", tuple(tuple(float(v) for v in row) for row in b))
        object.__setattr__(self, "radius", float(self.radius))

    @property
    def p(self) -> int:
        return len(self.center)

    @functools.cached_property
    def mu(self) -> F64:
        """μ as a read-only array (built once: the bounds ask for it many times per batch)."""
        out = np.asarray(self.center, dtype=np.float64)
        out.setflags(write=False)
        return out

    @functools.cached_property
    def matrix(self) -> F64:
        """B as a read-only array (built once)."""
        out = np.asarray(self.cov, dtype=np.float64).reshape(self.p, self.p)
        out.setflags(write=False)
        return out

    def norm_b(self, v: F64) -> F64:
        """‖v‖_B = √(vᵀ B v) per row of ``v`` (k, p)."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        return np.asarray(np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", v, self.matrix, v), 0.0)))

    def support(self, offset: npt.ArrayLike, v: F64) -> F64:
        """sup over z ∈ E of |offset + zᵀv| = |offset + μᵀv| + R‖v‖_B, per row of ``v`` (k, p)."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        return np.asarray(np.abs(np.asarray(offset) + v @ self.mu) + self.radius * self.norm_b(v))

    def extent(self, offset: npt.ArrayLike, v: F64) -> tuple[F64, F64]:
        """(min, max) over z ∈ E of offset + zᵀv, per row of ``v``."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        mid = np.asarray(offset) + v @ self.mu
        half = self.radius * self.norm_b(v)
        return np.asarray(mid - half), np.asarray(mid + half)

    def clip(self, z: F64) -> tuple[F64, int]:
        """Each row of ``z`` (n, p) moved into E along the ray from the centre, and how many were moved."""
        z = np.asarray(z, dtype=np.float64)
        if z.size == 0:
            return z.copy(), 0
        dev = z - self.mu
        q = np.einsum("ij,jk,ik->i", dev, np.linalg.inv(self.matrix), dev)
        scale = np.minimum(1.0, self.radius / np.sqrt(np.maximum(q, 1e-300)))
        moved = scale < 1.0
        out = np.where(moved[:, None], self.mu + dev * scale[:, None], z)  # records inside: untouched
        return np.asarray(out, dtype=np.float64), int(np.count_nonzero(moved))


def ellipsoid_from_args(
    p: int, center: Sequence[float] | None, cov: Sequence[Sequence[float]] | None, radius: float | None
) -> Ellipsoid | None:
    """The model arguments ``x_center`` (default 0), ``x_cov`` (default the identity) and ``x_radius`` as an
    :class:`Ellipsoid` of dimension ``p``, or None when ``x_radius`` is not given (the box bound alone)."""
    if radius is None:
        if center is not None or cov is not None:
            raise ValueError("x_center and x_cov describe the covariate ellipsoid: give x_radius with them")
        return None
    mu = tuple(_floats("x_center", [0.0] * p if center is None else center, (p,)))
    b = _floats("x_cov", np.eye(p) if cov is None else cov, (p, p))
    return Ellipsoid(mu, tuple(tuple(row) for row in b), radius)


@dataclass(frozen=True)
class _Faces:
    """KKT candidates of max zᵀv over box ∩ E, one per face of the box (coordinates S held at b·σ_S, the
    rest F free), stacked on a leading axis: the box multiplier is w = v·``keep`` − (‖v_F‖_C/ρ)·``shift``
    with ‖v_F‖_C² = vᵀ``shape``v (module docstring)."""

    keep: F64  # (faces, p, p)
    shape: F64  # (faces, p, p): the Schur complement C on F × F, zero elsewhere
    shift: F64  # (faces, p): B_SS⁻¹ d_S on S, zero on F
    rho: F64  # (faces,)

    @property
    def count(self) -> int:
        return int(self.rho.shape[0])


def _face(ell: Ellipsoid, bound: float, held: tuple[int, ...]) -> tuple[F64, F64, F64, float] | None:
    """The face of the box with coordinate k held at bound·held[k] (held[k] in {−1, 0, 1}; 0: free), or None
    when the face misses E (ρ² <= 0) or holds no coordinate or all of them (the box's own corner)."""
    p = ell.p
    sigma = np.asarray(held, dtype=np.float64)
    s = np.flatnonzero(sigma != 0.0)
    f = np.flatnonzero(sigma == 0.0)
    if s.size == 0 or f.size == 0:
        return None
    b, mu = ell.matrix, ell.mu
    d_s = bound * sigma[s] - mu[s]
    b_ss = b[np.ix_(s, s)]
    k_s = np.linalg.solve(b_ss, d_s)
    rho2 = ell.radius**2 - float(d_s @ k_s)
    if not rho2 > 0.0:
        return None
    g = np.linalg.solve(b_ss, b[np.ix_(s, f)])  # B_SS⁻¹ B_SF
    schur = b[np.ix_(f, f)] - b[np.ix_(f, s)] @ g
    keep = np.zeros((p, p))
    keep[s, s] = 1.0
    keep[np.ix_(f, s)] = g.T  # w_S = v_S + B_SS⁻¹ B_SF v_F (v is a row: w = v @ keep)
    shape = np.zeros((p, p))
    shape[np.ix_(f, f)] = 0.5 * (schur + schur.T)
    shift = np.zeros(p)
    shift[s] = k_s
    return keep, shape, shift, math.sqrt(rho2)


def _stack(faces: list[tuple[F64, F64, F64, float]], p: int) -> _Faces:
    if not faces:
        return _Faces(np.zeros((0, p, p)), np.zeros((0, p, p)), np.zeros((0, p)), np.zeros(0))
    keep, shape, shift, rho = zip(*faces, strict=True)
    return _Faces(np.stack(keep), np.stack(shape), np.stack(shift), np.asarray(rho))


@functools.lru_cache(maxsize=32)
def _all_faces(ell: Ellipsoid, bound: float) -> _Faces:
    """Every face of the box whose slice of E is not empty (3^p patterns, p <= MAX_ENUMERATED); cached per
    region (a registry and a planner ask for the same one many times)."""
    found = [_face(ell, bound, held) for held in itertools.product((-1, 0, 1), repeat=ell.p)]
    return _stack([x for x in found if x is not None], ell.p)


def _dual_value(ell: Ellipsoid, bound: float, v: F64, w: F64) -> F64:
    """bound ‖w‖₁ + μᵀ(v − w) + R‖v − w‖_B over the last axis, padded by a relative 1e-9: an upper bound of
    sup over box ∩ E of zᵀv for every w (module docstring)."""
    u = v - w
    lin = u @ ell.mu
    quad = ell.radius * np.sqrt(np.maximum(((u @ ell.matrix) * u).sum(axis=-1), 0.0))
    l1 = bound * np.abs(w).sum(axis=-1)
    return np.asarray(lin + quad + l1 + _PAD * (np.abs(lin) + quad + l1), dtype=np.float64)


def _face_values(ell: Ellipsoid, bound: float, v: F64, faces: _Faces) -> F64:
    """The dual bound of every face for every row (faces, n), at the face's box multipliers w (a row with
    v_F = 0 on a face gets w = v_S + B_SS⁻¹B_SF v_F)."""
    nf = np.sqrt(np.maximum((np.matmul(v[None], faces.shape) * v[None]).sum(axis=-1), 0.0))
    scale = nf / faces.rho[:, None]
    w = np.matmul(v[None], faces.keep) - scale[..., None] * faces.shift[:, None, :]
    return _dual_value(ell, bound, v[None], w)


def intersection_support(ell: Ellipsoid, bound: float, v: npt.ArrayLike) -> F64:
    """A certified upper bound of h(v) = sup over z in {|z_k| <= bound} ∩ E of zᵀv per row of ``v`` (n, p),
    exact up to rounding for p <= :data:`MAX_ENUMERATED` and never above the smaller of the box's bound
    ‖v‖₁·bound and the ellipsoid's μᵀv + R‖v‖_B (module docstring: weak duality, evaluated at the box's
    KKT multipliers of every face)."""
    v = np.atleast_2d(np.asarray(v, dtype=np.float64))
    n, p = v.shape
    if p != ell.p:
        raise ValueError(f"directions must have {ell.p} columns (the ellipsoid's dimension), got {p}")
    best = np.minimum(_dual_value(ell, bound, v, v), _dual_value(ell, bound, v, np.zeros_like(v)))
    if n == 0 or p == 0:
        return np.asarray(best, dtype=np.float64)
    if p > MAX_ENUMERATED:
        return np.asarray(np.minimum(best, _descent(ell, bound, v)), dtype=np.float64)
    faces = _all_faces(ell, bound)
    if faces.count == 0:
        return np.asarray(best, dtype=np.float64)
    step = max(1, (1 << 16) // faces.count)  # rows per chunk: at most ~65,000 (face, row) pairs at once
    for i in range(0, n, step):
        values = _face_values(ell, bound, v[i : i + step], faces)
        best[i : i + step] = np.minimum(best[i : i + step], values.min(axis=0))
    return np.asarray(best, dtype=np.float64)


def _faces_of(ell: Ellipsoid, bound: float, v: F64, held: npt.NDArray[np.int8]) -> F64:
    """The dual bound of the face ``held[i]`` (−1, 0, 1 per coordinate) for each row v[i] (inf where the face
    misses E or is not a proper face)."""
    out = np.full(v.shape[0], np.inf)
    patterns, index = np.unique(held, axis=0, return_inverse=True)
    for j, pattern in enumerate(patterns):
        face = _face(ell, bound, tuple(int(x) for x in pattern))
        if face is not None:
            rows = np.flatnonzero(index.reshape(-1) == j)
            out[rows] = _face_values(ell, bound, v[rows], _stack([face], ell.p))[0]
    return out


def _descent(ell: Ellipsoid, bound: float, v: F64) -> F64:
    """Past MAX_ENUMERATED: the dual bound minimised by descent, R‖u‖_B = min over λ > 0 of uᵀBu/(4λ) + λR²
    alternated with exact coordinate steps of the resulting lasso in w, and every :data:`_POLISH` rounds the
    face the iterate's signs name (its KKT multipliers: exact once the face is the maximiser's). Every w
    evaluated is a valid bound; the descent only chooses them."""
    n, p = v.shape
    b = ell.matrix
    best = np.full(n, np.inf)
    w = np.zeros_like(v)
    for rnd in range(1, _DESCENT_ROUNDS + 1):
        nb = ell.norm_b(v - w)
        if not np.any(nb > 0.0):
            break
        two_lam = np.where(nb > 0.0, nb, 1.0) / ell.radius  # 2λ at the current w
        for k in range(p):
            grad = -ell.mu[k] - ((v - w) @ b[:, k]) / two_lam
            curv = b[k, k] / two_lam
            step = w[:, k] - grad / curv
            shrunk = np.sign(step) * np.maximum(np.abs(step) - bound / curv, 0.0)
            w[:, k] = np.where(nb > 0.0, shrunk, w[:, k])
        best = np.minimum(best, _dual_value(ell, bound, v, w))
        if rnd % _POLISH == 0:
            tiny = 1e-12 * np.abs(v).max(axis=1, keepdims=True)
            held = (np.sign(w) * (np.abs(w) > tiny)).astype(np.int8)
            best = np.minimum(best, _faces_of(ell, bound, v, held))
    return best


class CovariateRegion:
    """Mixin of models with a linear predictor η = offset + zᵀβ in covariates z (columns ``covariates``) that
    the schema bounds by |z_k| <= ``x_bound`` and that may also be clipped into a public ellipsoid (model
    arguments ``x_center``, ``x_cov``, ``x_radius``; see the module docstring). The subclass is a frozen
    dataclass with those fields and calls :meth:`_check_region` from its ``__post_init__``."""

    p: int
    x_bound: float
    x_center: Sequence[float] | None
    x_cov: Sequence[Sequence[float]] | None
    x_radius: float | None

    @property
    def covariates(self) -> tuple[str, ...]:
        return tuple(f"x{k}" for k in range(1, self.p + 1))

    def _check_region(self) -> None:
        """Validate the ellipsoid arguments and store them as tuples (hashable, compared by value)."""
        ell = ellipsoid_from_args(self.p, self.x_center, self.x_cov, self.x_radius)
        if ell is None:
            return
        if np.any(np.abs(ell.mu) > self.x_bound):
            raise ValueError(f"x_center must lie in the schema's box |x_k| <= x_bound = {self.x_bound:g}")
        object.__setattr__(self, "x_center", ell.center)
        object.__setattr__(self, "x_cov", ell.cov)
        object.__setattr__(self, "x_radius", ell.radius)

    @functools.cached_property
    def ellipsoid(self) -> Ellipsoid | None:
        """The model's ellipsoid (built once per model object: its arguments are frozen)."""
        return ellipsoid_from_args(self.p, self.x_center, self.x_cov, self.x_radius)

    def eta_change_bound(self, offset: npt.ArrayLike, v: F64) -> F64:
        """sup over the records the model allows of |offset + zᵀv| per row of ``v`` (k, p): the box's L1 bound
        |offset| + x_bound ‖v‖₁, or with the ellipsoid the sup over box ∩ E (:func:`intersection_support`,
        never above the smaller of the box's and the ellipsoid's own bounds)."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        off = np.asarray(offset, dtype=np.float64)
        if self.ellipsoid is None:
            return np.asarray(np.abs(off) + self.x_bound * np.abs(v).sum(axis=1), dtype=np.float64)
        lo, hi = self.eta_extent(off, v)
        return np.asarray(np.maximum(hi, -lo), dtype=np.float64)

    def design_norm_bound(self) -> float:
        """sup over the records the model allows of ‖(1, z)‖₂: √(1 + p x_bound²) in the box, or with the
        ellipsoid √(1 + (‖μ‖ + R √λ_max(B))²) when that is smaller (a score's linear-predictor factor)."""
        z2 = self.p * self.x_bound**2
        ell = self.ellipsoid
        if ell is not None and self.p:
            top = float(np.linalg.eigvalsh(ell.matrix).max())
            reach = float(np.linalg.norm(ell.mu)) + ell.radius * math.sqrt(top)
            z2 = min(z2, reach**2)
        return math.sqrt(1.0 + z2)

    def eta_extent(self, offset: npt.ArrayLike, v: F64) -> tuple[F64, F64]:
        """(min, max) over the records the model allows of offset + zᵀv per row of ``v`` (k, p): the box's
        range, or with the ellipsoid the range over box ∩ E (the allowed records lie in both:
        offset ∓ :func:`intersection_support` of ∓v)."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        off = np.asarray(offset, dtype=np.float64)
        ell = self.ellipsoid
        if ell is None:
            half = self.x_bound * np.abs(v).sum(axis=1)
            return np.asarray(off - half, dtype=np.float64), np.asarray(off + half, dtype=np.float64)
        both = intersection_support(ell, self.x_bound, np.vstack([v, -v]))
        k = v.shape[0]
        return np.asarray(off - both[k:], dtype=np.float64), np.asarray(off + both[:k], dtype=np.float64)

    def clip_records(self, data: Mapping[str, F64]) -> tuple[dict[str, F64], int]:
        """The covariates moved into the ellipsoid (none without one); the other columns unchanged."""
        out = dict(data)
        ell = self.ellipsoid
        if ell is None or not self.p:
            return out, 0
        z = np.column_stack([np.asarray(data[c], dtype=np.float64) for c in self.covariates])
        clipped, moved = ell.clip(z)
        for k, c in enumerate(self.covariates):
            out[c] = np.ascontiguousarray(clipped[:, k])
        return out, moved
