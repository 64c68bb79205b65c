"""Shared helpers for the privacy tests: Clopper–Pearson bounds and empirical threshold tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from scipy import stats

# One-sided level for each confidence bound. With at most a few hundred bounds across the suite
# the chance of a false failure is below 1e-4.
LEVEL = 1e-7


def cp_upper(k: int, n: int, level: float = LEVEL) -> float:
    """Clopper–Pearson upper confidence bound for a binomial proportion."""
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - level, k + 1, n - k))


def cp_lower(k: int, n: int, level: float = LEVEL) -> float:
    """Clopper–Pearson lower confidence bound for a binomial proportion."""
    return 0.0 if k <= 0 else float(stats.beta.ppf(level, k, n - k + 1))


def threshold_points(
    x0: npt.NDArray[np.float64], x1: npt.NDArray[np.float64], thresholds: Sequence[float]
) -> list[tuple[int, int, int, int]]:
    """Membership tests "say D' when x > t" and "say D' when x <= t" for each threshold.

    Returns (k_alpha, n0, k_beta, n1): type I errors among draws under D, type II among draws under D'.
    """
    out: list[tuple[int, int, int, int]] = []
    n0, n1 = x0.size, x1.size
    for t in thresholds:
        out.append((int(np.sum(x0 > t)), n0, int(np.sum(x1 <= t)), n1))
        out.append((int(np.sum(x0 <= t)), n0, int(np.sum(x1 > t)), n1))
    return out


def consistent_with(f: Callable[[float], float], point: tuple[int, int, int, int]) -> bool:
    """Is the empirical (α, β) compatible with "true β ≥ f(true α)"? (lenient side)

    True α ≤ α_hi and f is non-increasing, so f(α_hi) ≤ f(α) ≤ β ≤ β_hi w.h.p. when the claim holds.
    """
    ka, n0, kb, n1 = point
    return cp_upper(kb, n1) >= f(cp_upper(ka, n0)) - 1e-12


def refutes(f: Callable[[float], float], point: tuple[int, int, int, int]) -> bool:
    """Does the point show, with high confidence, that some test beats f? (strict side)

    If β_hi < f(α_hi) then true β ≤ β_hi < f(α_hi) ≤ f(true α): f is violated.
    """
    ka, n0, kb, n1 = point
    return cp_upper(kb, n1) < f(cp_upper(ka, n0))
