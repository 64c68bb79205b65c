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
box (a segment between two points of a convex set), so the box bound still holds too and a model may use the
smaller of the two.

Pure: no I/O, no randomness.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

__all__ = ["Ellipsoid", "ellipsoid_from_args"]


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

    @property
    def mu(self) -> F64:
        return np.asarray(self.center, dtype=np.float64)

    @property
    def matrix(self) -> F64:
        return np.asarray(self.cov, dtype=np.float64).reshape(self.p, self.p)

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
        |offset| + x_bound ‖v‖₁, or the ellipsoid's |offset + μᵀv| + R‖v‖_B when that is smaller."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        box = np.abs(np.asarray(offset, dtype=np.float64)) + self.x_bound * np.abs(v).sum(axis=1)
        ell = self.ellipsoid
        return np.asarray(box if ell is None else np.minimum(box, ell.support(offset, v)), dtype=np.float64)

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
        """(min, max) over the records the model allows of offset + zᵀv per row of ``v`` (k, p): the tighter
        of the box's and the ellipsoid's ranges (the allowed records lie in both)."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        off = np.asarray(offset, dtype=np.float64)
        half = self.x_bound * np.abs(v).sum(axis=1)
        lo, hi = off - half, off + half
        ell = self.ellipsoid
        if ell is not None:
            e_lo, e_hi = ell.extent(off, v)
            lo, hi = np.maximum(lo, e_lo), np.minimum(hi, e_hi)
        return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)

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
