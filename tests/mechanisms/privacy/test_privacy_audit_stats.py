"""The audit's statistics: a Gaussian mechanism at mu = 1 is found consistent with its claim and its
empirical lower bound reaches near 1 with the runs used (power), while the same mechanism with its noise
halved (mu = 2) is flagged VIOLATED against the unchanged claim, and bits are handled exactly."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.privacy import EpsDeltaTradeOff, GaussianTradeOff, gdp_eps
from mechanisms.privacy.audit import AuditPoint, audit, cp_upper, threshold_points

N = 20_000


def test_gaussian_power_and_consistency() -> None:
    rng = np.random.default_rng(1)
    x0, x1 = rng.normal(0.0, 1.0, N), rng.normal(1.0, 1.0, N)
    res = audit(threshold_points(x0, x1), GaussianTradeOff(1.0), gdp_eps(1.0, 1e-5), 1e-5, 0.95)
    assert res.violated is None and res.verdict.startswith("consistent")
    assert 0.8 <= res.mu_lower <= 1.0  # power: within 0.2 of the truth with 20,000 runs per side
    assert res.eps_lower <= gdp_eps(1.0, 1e-5)


def test_broken_noise_is_flagged() -> None:
    """Noise scaled by 0.5 (so mu = 2) against the unchanged claim mu = 1: VIOLATED, naming the test."""
    rng = np.random.default_rng(2)
    x0, x1 = rng.normal(0.0, 0.5, N), rng.normal(1.0, 0.5, N)
    res = audit(threshold_points(x0, x1), GaussianTradeOff(1.0), gdp_eps(1.0, 1e-5), 1e-5, 0.95)
    assert res.violated is not None and res.verdict.startswith("VIOLATED")
    assert "x >" in res.violated.test or "x <=" in res.violated.test
    assert res.mu_lower > 1.5


def test_bits_and_unbounded_claims() -> None:
    """A bit that is never 0 under D' but sometimes under D: pure DP is refuted, and with no claim the
    lower bound grows with the number of runs (the unbounded loss of exact MH's sign reveal)."""
    rng = np.random.default_rng(3)
    lows = []
    for n in (1_000, 100_000):
        b0 = (rng.random(n) < 0.6).astype(float)
        b1 = np.ones(n)
        pts = threshold_points(b0, b1)
        assert len(pts) == 2  # the two non-trivial tests on a bit
        res = audit(pts, EpsDeltaTradeOff(2.0, 0.0), 2.0, 0.0, 0.95)
        assert res.violated is not None
        lows.append(audit(pts, None, None, 1e-6, 0.95).eps_lower)
    assert lows[1] > lows[0] + 3.0
    with pytest.raises(ValueError):
        audit([], None, None, 1e-5)
    assert cp_upper(0, 100, 0.025) == pytest.approx(1 - 0.025 ** (1 / 100))
    p = AuditPoint(3, 10, 4, 20, "t")
    assert (p.alpha, p.beta) == (0.3, 0.2)
