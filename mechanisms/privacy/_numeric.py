"""Small numerical helpers shared by the privacy modules (no privacy logic here).

Owns: array coercion with scalar round-tripping, vectorised bisection for monotone functions,
numerically careful ``log(1 - exp(x))``, and composite Gauss–Legendre nodes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def as_float_array(x: npt.ArrayLike) -> FloatArray:
    """Return ``x`` as a float64 array (0-d for scalars)."""
    return np.asarray(x, dtype=np.float64)


def log1mexp(x: FloatArray) -> FloatArray:
    """``log(1 - exp(x))`` for ``x <= 0``, accurate near 0 and for very negative ``x``.

    Returns ``-inf`` at ``x == 0`` and ``nan`` for ``x > 0``.
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.full_like(x, np.nan)
    small = x > -np.log(2.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(small, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))
    return np.where(x > 0, np.nan, out)


def bisect_decreasing(
    fn: Callable[[FloatArray], FloatArray],
    targets: FloatArray,
    lo: float,
    hi: float,
    iterations: int = 120,
) -> FloatArray:
    """Vectorised bisection: for each target ``t`` find ``x`` in ``[lo, hi]`` with ``fn(x) ≈ t``.

    ``fn`` must be non-increasing. Targets outside ``[fn(hi), fn(lo)]`` return ``lo`` (target above
    ``fn(lo)``) or ``hi`` (target below ``fn(hi)``); callers that need rigour check for this.
    """
    t = np.asarray(targets, dtype=np.float64)
    a = np.full_like(t, lo)
    b = np.full_like(t, hi)
    for _ in range(iterations):
        mid = 0.5 * (a + b)
        above = fn(mid) > t
        a = np.where(above, mid, a)
        b = np.where(above, b, mid)
    return 0.5 * (a + b)


def composite_gauss_legendre(panels: int, order: int) -> tuple[FloatArray, FloatArray]:
    """Nodes and weights of a composite Gauss–Legendre rule on ``[0, 1]``."""
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(0.0, 1.0, panels + 1)
    half = 0.5 * np.diff(edges)
    mids = 0.5 * (edges[:-1] + edges[1:])
    nodes = (mids[:, None] + half[:, None] * x[None, :]).ravel()
    weights = (half[:, None] * w[None, :]).ravel()
    return nodes.astype(np.float64), weights.astype(np.float64)
