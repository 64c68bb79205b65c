"""Trade-off functions (f-DP) as objects, their validation, and lower convex hulls of point clouds.

Owns the f-DP vocabulary of Dong, Roth, Su ("Gaussian Differential Privacy", JRSSB 84, 2022): a
trade-off function ``f = T(P, Q)`` maps a type I error α (rejecting "the data are D" when they are)
to the smallest achievable type II error β. A mechanism is f-DP when ``T(M(D), M(D')) ≥ f`` for all
neighbouring D, D'. Here:

* ``GaussianTradeOff`` (G_μ), ``EpsDeltaTradeOff`` (f_{ε,δ}), ``LaplaceTradeOff`` (the Laplace
  mechanism with ε = Δ/b), each with its exact δ(ε);
* ``CurveTradeOff`` wraps a user callable, ``PointCloudTradeOff`` the lower convex hull of (α, β)
  points (with the trivial tests (0, 1) and (1, 0) added), ``EnvelopeTradeOff`` the supremum of
  f_{ε_i, δ_i} over a finite family of (ε_i, δ_i) guarantees — the dual (Prop. 2.12) conversion of a
  privacy profile into a trade-off function; it is a *lower* bound on the mechanism's trade-off
  whenever each (ε_i, δ_i) is a valid guarantee, so it is safe to claim.
* ``validate_tradeoff`` checks the defining properties (values in [0, 1], f(α) ≤ 1 − α,
  non-increasing, convex) on a grid with an absolute tolerance and raises ``ValueError`` saying where
  and how it failed.

Threat model: none of its own. Pure, deterministic, no I/O.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np
import numpy.typing as npt
from scipy import special

from ._numeric import FloatArray, as_float_array
from .conversions import delta_from_tradeoff, gdp_delta

__all__ = [
    "CurveTradeOff",
    "EnvelopeTradeOff",
    "EpsDeltaTradeOff",
    "GaussianTradeOff",
    "LaplaceTradeOff",
    "PointCloudTradeOff",
    "TradeOff",
    "epsdelta_delta",
    "lower_convex_hull",
    "validate_tradeoff",
]


class TradeOff(abc.ABC):
    """A trade-off function α ↦ β on [0, 1]; call it on a float or an array of α values."""

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """Short human-readable name, used in plots and reports."""

    @abc.abstractmethod
    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        """Evaluate on a 1-d array of α in [0, 1]."""

    def _delta(self, eps: FloatArray) -> FloatArray:
        """δ(ε) on a 1-d array; subclasses with closed forms override this."""
        return delta_from_tradeoff(self._evaluate, eps)

    @overload
    def __call__(self, alpha: float) -> float: ...
    @overload
    def __call__(self, alpha: FloatArray | Sequence[float]) -> FloatArray: ...
    def __call__(self, alpha: float | FloatArray | Sequence[float]) -> float | FloatArray:
        arr = as_float_array(alpha)
        if np.any((arr < 0) | (arr > 1)) or np.any(np.isnan(arr)):
            raise ValueError("trade-off functions are defined for alpha in [0, 1]")
        out = self._evaluate(np.atleast_1d(arr).ravel())
        if arr.ndim == 0:
            return float(out[0])
        return out.reshape(arr.shape)

    @overload
    def delta_at(self, eps: float) -> float: ...
    @overload
    def delta_at(self, eps: FloatArray | Sequence[float]) -> FloatArray: ...
    def delta_at(self, eps: float | FloatArray | Sequence[float]) -> float | FloatArray:
        """``δ(ε) = sup_α [1 − e^ε α − f(α)]``: an f-DP mechanism is (ε, δ(ε))-DP for every ε."""
        arr = as_float_array(eps)
        out = np.clip(self._delta(np.atleast_1d(arr).ravel()), 0.0, 1.0)
        if arr.ndim == 0:
            return float(out[0])
        return out.reshape(arr.shape)

    def validate(self, tol: float = 1e-9) -> None:
        """Raise ``ValueError`` unless this is a trade-off function (see ``validate_tradeoff``)."""
        validate_tradeoff(self._evaluate, tol=tol, name=self.label)


def _validation_grid(n: int) -> FloatArray:
    tiny = np.logspace(-12, -1, 120)
    return np.unique(np.concatenate([np.linspace(0.0, 1.0, n), tiny, 1.0 - tiny]))


def validate_tradeoff(
    f: Callable[[FloatArray], FloatArray],
    tol: float = 1e-9,
    n: int = 2001,
    name: str = "trade-off function",
) -> None:
    """Check that ``f`` is a trade-off function on a grid: finite, in [0, 1], ``f(α) ≤ 1 − α``,
    non-increasing and convex, each up to absolute tolerance ``tol``.

    Convexity is checked as "every grid value lies on or below the chord of its neighbours", which
    is robust on non-uniform grids. Raises ``ValueError`` naming the first offending α.
    """
    a = _validation_grid(n)
    b = np.asarray(f(a), dtype=np.float64)
    if b.shape != a.shape:
        raise ValueError(f"{name}: returned shape {b.shape} for input shape {a.shape}; it must be vectorised")
    if not np.all(np.isfinite(b)):
        i = int(np.argmax(~np.isfinite(b)))
        raise ValueError(f"{name}: value at alpha={a[i]:.6g} is {b[i]}; trade-off values must be finite")
    bad = (b < -tol) | (b > 1 + tol)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"{name}: f({a[i]:.6g}) = {b[i]:.6g} lies outside [0, 1]")
    bad = b > 1.0 - a + tol
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(
            f"{name}: f({a[i]:.6g}) = {b[i]:.6g} exceeds 1 - alpha = {1 - a[i]:.6g}; no test can do worse "
            "than random guessing, so a trade-off function must satisfy f(alpha) <= 1 - alpha"
        )
    inc = np.diff(b) > tol
    if np.any(inc):
        i = int(np.argmax(inc))
        raise ValueError(
            f"{name}: increases between alpha={a[i]:.6g} and {a[i + 1]:.6g} "
            f"({b[i]:.6g} -> {b[i + 1]:.6g}); trade-off functions are non-increasing"
        )
    left, mid, right = a[:-2], a[1:-1], a[2:]
    chord = (b[:-2] * (right - mid) + b[2:] * (mid - left)) / (right - left)
    nonconvex = b[1:-1] > chord + tol
    if np.any(nonconvex):
        i = int(np.argmax(nonconvex)) + 1
        raise ValueError(
            f"{name}: not convex near alpha={a[i]:.6g} (value {b[i]:.6g} above the chord of its neighbours "
            f"by {b[i] - chord[i - 1]:.3g}); take the lower convex hull (PointCloudTradeOff) if these "
            "are points"
        )


def lower_convex_hull(alphas: npt.ArrayLike, betas: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Vertices of the lower convex hull of the points (α_i, β_i), sorted by α (monotone chain)."""
    a = np.atleast_1d(as_float_array(alphas)).ravel()
    b = np.atleast_1d(as_float_array(betas)).ravel()
    if a.shape != b.shape or a.size == 0:
        raise ValueError("alphas and betas must be non-empty and of equal length")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("points must be finite")
    order = np.lexsort((b, a))
    pts = list(zip(a[order].tolist(), b[order].tolist(), strict=True))
    hull: list[tuple[float, float]] = []
    for p in pts:
        if hull and hull[-1][0] == p[0]:
            continue  # same alpha, larger beta (sorted): not on the lower hull
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            cross = (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1)
            if cross <= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    ha = np.array([p[0] for p in hull], dtype=np.float64)
    hb = np.array([p[1] for p in hull], dtype=np.float64)
    return ha, hb


@dataclass(frozen=True)
class GaussianTradeOff(TradeOff):
    """``G_μ(α) = Φ(Φ⁻¹(1 − α) − μ)``: testing N(0, 1) against N(μ, 1)."""

    mu: float

    def __post_init__(self) -> None:
        if not self.mu >= 0:
            raise ValueError(f"GDP parameter mu must be >= 0, got {self.mu}")

    @property
    def label(self) -> str:
        return f"G_{self.mu:.4g}"

    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        with np.errstate(over="ignore", invalid="ignore"):
            out = special.ndtr(-special.ndtri(alpha) - self.mu)
        return np.asarray(out, dtype=np.float64)

    def _delta(self, eps: FloatArray) -> FloatArray:
        return np.asarray(gdp_delta(self.mu, eps), dtype=np.float64)


def epsdelta_delta(eps: float, delta: float, eps_query: FloatArray) -> FloatArray:
    """Exact δ(ε') of f_{ε,δ}: ``δ + (1 − δ)[e^ε − e^{ε'}]_+ / (1 + e^ε)`` for ε' ≥ 0."""
    q = np.asarray(eps_query, dtype=np.float64)
    gap = np.maximum(np.exp(eps) - np.exp(np.minimum(q, eps)), 0.0)
    return np.asarray(delta + (1.0 - delta) * gap / (1.0 + math.exp(eps)), dtype=np.float64)


@dataclass(frozen=True)
class EpsDeltaTradeOff(TradeOff):
    """``f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α))``: the (ε, δ)-DP trade-off."""

    eps: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        if not (self.eps >= 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps must be finite and >= 0, got {self.eps}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must lie in [0, 1], got {self.delta}")

    @property
    def label(self) -> str:
        return f"({self.eps:.4g}, {self.delta:.3g})-DP"

    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        c = 1.0 - self.delta
        if self.eps > 700.0:  # e^eps overflows a double: the curve is 1 - delta at alpha = 0, else 0
            return np.where(alpha == 0.0, c, 0.0).astype(np.float64)
        e = math.exp(self.eps)
        return np.maximum.reduce([np.zeros_like(alpha), c - e * alpha, (c - alpha) / e])

    def _delta(self, eps: FloatArray) -> FloatArray:
        return epsdelta_delta(self.eps, self.delta, eps)


@dataclass(frozen=True)
class LaplaceTradeOff(TradeOff):
    """Trade-off of the Laplace mechanism with ε = Δ/b: ``T(Lap(0, 1), Lap(ε, 1))``.

    Closed form (Dong, Roth, Su 2022, Appendix): ``1 − e^ε α`` for α < e^{−ε}/2, ``e^{−ε}/(4α)`` for
    e^{−ε}/2 ≤ α ≤ 1/2, and ``e^{−ε}(1 − α)`` for α > 1/2; ``δ(ε') = [1 − e^{(ε' − ε)/2}]_+``.
    """

    eps: float

    def __post_init__(self) -> None:
        if not (self.eps >= 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps must be finite and >= 0, got {self.eps}")

    @property
    def label(self) -> str:
        return f"Lap({self.eps:.4g})"

    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        e = math.exp(-self.eps)
        with np.errstate(divide="ignore"):
            middle = e / (4.0 * np.where(alpha > 0, alpha, 1.0))
        return np.where(
            alpha < e / 2.0, 1.0 - alpha / e, np.where(alpha <= 0.5, middle, e * (1.0 - alpha))
        ).astype(np.float64)

    def _delta(self, eps: FloatArray) -> FloatArray:
        return np.maximum(0.0, -np.expm1(np.minimum((eps - self.eps) / 2.0, 0.0)))


@dataclass(frozen=True)
class CurveTradeOff(TradeOff):
    """A user-supplied trade-off function (vectorised callable), validated at construction."""

    fn: Callable[[FloatArray], FloatArray]
    name: str = "user curve"
    tol: float = 1e-9

    def __post_init__(self) -> None:
        validate_tradeoff(self.fn, tol=self.tol, name=self.name)

    @property
    def label(self) -> str:
        return self.name

    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        return np.clip(np.asarray(self.fn(alpha), dtype=np.float64), 0.0, 1.0)


@dataclass(frozen=True)
class PointCloudTradeOff(TradeOff):
    """Piecewise-linear trade-off: lower convex hull of (α_i, β_i) ∪ {(0, 1), (1, 0)}.

    If the points are *achieved* (α, β) of tests against the mechanism, this curve is an upper
    bound on its trade-off function (what an attacker demonstrably achieves), not a guarantee.
    If they are exact points of a valid trade-off function, chords lie above the curve, so the hull
    over-estimates it between vertices by the chord error; refine the points or use an envelope.
    """

    alphas: tuple[float, ...]
    betas: tuple[float, ...]
    name: str = "point cloud"
    hull_alphas: tuple[float, ...] = field(init=False, repr=False)
    hull_betas: tuple[float, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        a = as_float_array(self.alphas).ravel()
        b = as_float_array(self.betas).ravel()
        if a.shape != b.shape:
            raise ValueError("alphas and betas must have equal length")
        if np.any((a < 0) | (a > 1) | (b < 0) | (b > 1)) or not np.all(np.isfinite(a) & np.isfinite(b)):
            raise ValueError("points must lie in [0, 1] x [0, 1]")
        ha, hb = lower_convex_hull(np.concatenate([a, [0.0, 1.0]]), np.concatenate([b, [1.0, 0.0]]))
        object.__setattr__(self, "alphas", tuple(float(x) for x in a))
        object.__setattr__(self, "betas", tuple(float(x) for x in b))
        object.__setattr__(self, "hull_alphas", tuple(float(x) for x in ha))
        object.__setattr__(self, "hull_betas", tuple(float(x) for x in hb))

    @property
    def label(self) -> str:
        return self.name

    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        return np.interp(alpha, self.hull_alphas, self.hull_betas).astype(np.float64)

    def _delta(self, eps: FloatArray) -> FloatArray:
        ha = np.asarray(self.hull_alphas)
        hb = np.asarray(self.hull_betas)
        vals = 1.0 - np.exp(eps)[:, None] * ha[None, :] - hb[None, :]
        return np.maximum(vals.max(axis=1), 0.0)


@dataclass(frozen=True)
class EnvelopeTradeOff(TradeOff):
    """``f(α) = sup_i f_{ε_i, δ_i}(α)``: the trade-off implied by a family of (ε_i, δ_i) guarantees.

    Dong–Roth–Su Prop. 2.12: a mechanism that is (ε, δ(ε))-DP for all ε ≥ 0 is f-DP with
    ``f = sup_ε f_{ε, δ(ε)}``, and this is tight when δ(ε) is the mechanism's exact privacy profile.
    Over a finite grid of ε the supremum is smaller, hence still a valid (conservative) claim.
    """

    eps: tuple[float, ...]
    deltas: tuple[float, ...]
    name: str = "envelope"

    def __post_init__(self) -> None:
        e = as_float_array(self.eps).ravel()
        d = as_float_array(self.deltas).ravel()
        if e.shape != d.shape or e.size == 0:
            raise ValueError("eps and deltas must be non-empty and of equal length")
        if np.any(e < 0) or np.any((d < 0) | (d > 1)) or np.any(np.isnan(e)) or np.any(np.isnan(d)):
            raise ValueError("need eps >= 0 and deltas in [0, 1]")
        object.__setattr__(self, "eps", tuple(float(x) for x in e))
        object.__setattr__(self, "deltas", tuple(float(x) for x in d))

    @property
    def label(self) -> str:
        return self.name

    def _evaluate(self, alpha: FloatArray) -> FloatArray:
        e = np.asarray(self.eps)
        c = 1.0 - np.asarray(self.deltas)
        finite = np.isfinite(e)
        ex = np.exp(np.where(finite, e, 0.0))
        out = np.zeros_like(alpha)
        chunk = max(1, 2_000_000 // max(1, e.size))
        for start in range(0, alpha.size, chunk):
            a = alpha[start : start + chunk, None]
            lines = np.maximum(c[None, :] - ex[None, :] * a, (c[None, :] - a) / ex[None, :])
            # ε = ∞ guarantees contribute 1 − δ only at α = 0.
            lines = np.where(finite[None, :], lines, np.where(a > 0, 0.0, c[None, :]))
            out[start : start + chunk] = np.maximum(lines.max(axis=1), 0.0)
        return out
