"""Empirical privacy auditing: (α, β) points of membership-inference tests, their confidence bounds, and
what they say about a claimed trade-off curve.

Owns the statistics of ``confar privacy audit`` (the mechanism runs are elsewhere: ``simulations/
privacy_audit/``). An attacker sees N draws of an observation under a dataset D and N under a neighbour
D' and tests "D' or D?"; each test has a type I error α (saying D' under D) and a type II error β. The
mechanism's trade-off function f is the least β at each α, so every test satisfies β ≥ f(α).

* Clopper–Pearson upper bounds (α_hi, β_hi) hold for the true errors with the stated confidence, jointly
  over all points (Bonferroni: each bound at level (1 − confidence) / (2 × points)).
* A claim f is **violated** when f(α_hi) > β_hi for some point: with the stated confidence the test beats
  the claim (true β ≤ β_hi < f(α_hi) ≤ f(true α)). Otherwise the audit is **consistent**: it found no
  evidence against the claim (it proves nothing for the claim).
* The empirical lower bounds: the smallest μ (GDP) and ε at δ whose curves lie below every (α_hi, β_hi)
  (``est_gdp`` / ``est_epsdelta``); with the stated confidence the mechanism is *not* better than that.
  The empirical curve is the lower convex hull of the points (``PointCloudTradeOff``).

Tests: ``threshold_points`` (scalar observations; "say D' when x > t" and "when x ≤ t" at many t), and
``statistic_points`` for any per-run statistic, e.g. the log-likelihood ratio of the observation when the
two laws are known (the Neyman–Pearson optimal test), or its sum over the steps of a K-step transcript.
Pure: no I/O, no randomness.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats

from .conversions import est_epsdelta, est_gdp
from .tradeoff import PointCloudTradeOff, TradeOff

__all__ = [
    "AuditPoint",
    "AuditResult",
    "audit",
    "cp_upper",
    "statistic_points",
    "threshold_points",
]


def cp_upper(k: int, n: int, level: float) -> float:
    """One-sided Clopper–Pearson upper bound on a binomial proportion with error probability ``level``."""
    if not (0 <= k <= n and n >= 1 and 0 < level < 1):
        raise ValueError(f"need 0 <= k <= n, n >= 1, 0 < level < 1; got k={k}, n={n}, level={level}")
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - level, k + 1, n - k))


@dataclass(frozen=True)
class AuditPoint:
    """One test: k0 of n0 draws under D said D' (type I), k1 of n1 draws under D' said D (type II)."""

    k0: int
    n0: int
    k1: int
    n1: int
    test: str  # what the test is (statistic, direction, threshold), for the report

    @property
    def alpha(self) -> float:
        return self.k0 / self.n0

    @property
    def beta(self) -> float:
        return self.k1 / self.n1


def threshold_points(
    x0: npt.ArrayLike, x1: npt.ArrayLike, n_thresholds: int = 40, name: str = "x"
) -> list[AuditPoint]:
    """Both directions of "say D' when x > t" at ``n_thresholds`` thresholds (pooled quantiles)."""
    a0 = np.asarray(x0, dtype=np.float64).ravel()
    a1 = np.asarray(x1, dtype=np.float64).ravel()
    if a0.size == 0 or a1.size == 0:
        raise ValueError("need observations under both datasets")
    pooled = np.concatenate([a0, a1])
    ts = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, n_thresholds + 2)[1:-1]))
    if np.unique(pooled).size <= 2:  # bits (or a two-valued observation): the only tests there are
        ts = np.unique(pooled)[:-1] if np.unique(pooled).size == 2 else ts
    out: list[AuditPoint] = []
    n0, n1 = a0.size, a1.size
    for t in ts:
        out.append(AuditPoint(int(np.sum(a0 > t)), n0, int(np.sum(a1 <= t)), n1, f"{name} > {t:.6g}"))
        out.append(AuditPoint(int(np.sum(a0 <= t)), n0, int(np.sum(a1 > t)), n1, f"{name} <= {t:.6g}"))
    return out


def statistic_points(
    s0: npt.ArrayLike, s1: npt.ArrayLike, n_thresholds: int = 40, name: str = "LLR"
) -> list[AuditPoint]:
    """Threshold tests on a per-run statistic (large means D'), e.g. the log-likelihood ratio."""
    return threshold_points(s0, s1, n_thresholds, name)


@dataclass(frozen=True)
class AuditResult:
    """What an audit found. ``violated`` names the point that beats the claim, if any."""

    points: tuple[AuditPoint, ...]
    confidence: float
    alpha_hi: tuple[float, ...]
    beta_hi: tuple[float, ...]
    mu_lower: float
    eps_lower: float
    delta: float
    claimed_eps: float | None
    violated: AuditPoint | None
    margin: float  # min over points of β_hi − f(α_hi) (negative: violated)

    @property
    def verdict(self) -> str:
        if self.claimed_eps is None:
            return (
                f"NO FINITE CLAIM: the mechanism states no bound; empirically eps >= {self.eps_lower:.4g} at "
                f"delta = {self.delta:g} and mu >= {self.mu_lower:.4g} with confidence {self.confidence:g}"
            )
        if self.violated is not None:
            v = self.violated
            a_hi, b_hi = self._hi(v)
            return (
                f"VIOLATED: the test '{v.test}' has alpha <= {a_hi:.4g} and beta <= {b_hi:.4g} (observed "
                f"{v.alpha:.4g}, {v.beta:.4g}) with confidence {self.confidence:g}, below the claimed curve; "
                f"empirical eps >= {self.eps_lower:.4g}, claimed {self.claimed_eps:.4g} at delta = "
                f"{self.delta:g}"
            )
        return (
            f"consistent: no test beats the claim at confidence {self.confidence:g}; empirical lower bounds "
            f"eps >= {self.eps_lower:.4g} (claimed {self.claimed_eps:.4g}) at delta = {self.delta:g}, "
            f"mu >= {self.mu_lower:.4g}"
        )

    def _hi(self, p: AuditPoint) -> tuple[float, float]:
        i = self.points.index(p)
        return self.alpha_hi[i], self.beta_hi[i]

    def empirical_curve(self) -> PointCloudTradeOff:
        return PointCloudTradeOff(self.alpha_hi, self.beta_hi, name="empirical (upper confidence points)")


def audit(
    points: list[AuditPoint],
    claim: TradeOff | None,
    claimed_eps: float | None,
    delta: float,
    confidence: float = 0.95,
) -> AuditResult:
    """Confidence points, the verdict against ``claim`` (None: no finite claim) and the empirical bounds."""
    if not points:
        raise ValueError("an audit needs at least one test point")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    level = (1.0 - confidence) / (2 * len(points))
    a_hi = np.array([cp_upper(p.k0, p.n0, level) for p in points])
    b_hi = np.array([cp_upper(p.k1, p.n1, level) for p in points])
    with warnings.catch_warnings():  # est_* warn that points give no guarantee: here they are bounds
        warnings.simplefilter("ignore", UserWarning)
        mu_lo = est_gdp(a_hi, b_hi)
        eps_lo = est_epsdelta(a_hi, b_hi, delta)
    violated: AuditPoint | None = None
    margin = math.inf
    if claim is not None:
        f = np.asarray(claim(a_hi), dtype=np.float64)
        gaps = b_hi - f
        i = int(np.argmin(gaps))
        margin = float(gaps[i])
        if margin < -1e-12:
            violated = points[i]
    return AuditResult(
        tuple(points),
        confidence,
        tuple(float(x) for x in a_hi),
        tuple(float(x) for x in b_hi),
        mu_lo,
        eps_lo,
        delta,
        claimed_eps,
        violated,
        margin,
    )
