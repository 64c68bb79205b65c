"""Trade-off objects: closed forms vs independent computations, validation, hulls, plotting."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy import stats

from mechanisms.privacy import (
    CurveTradeOff,
    EnvelopeTradeOff,
    EpsDeltaTradeOff,
    GaussianTradeOff,
    LaplaceTradeOff,
    PointCloudTradeOff,
    PrivacyProfile,
    delta_from_tradeoff,
    lower_convex_hull,
    plot_tradeoffs,
    validate_tradeoff,
)


@pytest.mark.parametrize("mu", [0.1, 1.0, 3.0])
def test_gaussian_tradeoff_matches_neyman_pearson_tests(mu: float) -> None:
    # Independent: the NP test "reject N(0,1) when x > t" has α = 1 − Φ(t), β = Φ(t − μ).
    t = np.linspace(-6, 6 + mu, 301)
    alpha = stats.norm.sf(t)
    beta = stats.norm.cdf(t - mu)
    np.testing.assert_allclose(GaussianTradeOff(mu)(alpha), beta, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("mu", [0.2, 1.0, 2.5])
def test_gaussian_delta_vs_mpmath_and_dp_accounting(mu: float) -> None:
    mpmath.mp.dps = 40
    eps = np.array([0.0, 0.1, 0.5, 1.0, 3.0, 6.0])
    f = GaussianTradeOff(mu)
    ours = f.delta_at(eps)
    for e, d in zip(eps, ours, strict=True):
        ref = mpmath.ncdf(-e / mu + mu / 2) - mpmath.e**e * mpmath.ncdf(-e / mu - mu / 2)
        assert d == pytest.approx(float(ref), rel=1e-9, abs=1e-300)
    pld = pld_lib.from_gaussian_mechanism(1.0 / mu, value_discretization_interval=1e-3)
    theirs = np.asarray(pld.get_delta_for_epsilon(eps))
    assert np.all(theirs >= ours - 1e-12)  # dp_accounting is pessimistic
    np.testing.assert_allclose(theirs, ours, rtol=2e-2, atol=1e-8)


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0])
def test_laplace_tradeoff_matches_neyman_pearson_tests(eps: float) -> None:
    # Reject Lap(0,1) when x > t; likelihood ratio is monotone, so these tests are optimal.
    t = np.linspace(-4, eps + 4, 401)
    alpha = stats.laplace.sf(t)
    beta = stats.laplace.cdf(t, loc=eps)
    np.testing.assert_allclose(LaplaceTradeOff(eps)(alpha), beta, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0])
def test_laplace_delta_vs_dp_accounting_exact(eps: float) -> None:
    grid = np.array([0.0, 0.1, eps / 2, eps * 0.99, eps, eps + 1])
    ref = plm.LaplacePrivacyLoss(1.0 / eps, sensitivity=1.0).get_delta_for_epsilon(grid)
    np.testing.assert_allclose(LaplaceTradeOff(eps).delta_at(grid), ref, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize(
    "f",
    [GaussianTradeOff(0.7), EpsDeltaTradeOff(0.8, 0.05), LaplaceTradeOff(1.3), EpsDeltaTradeOff(0.0, 0.2)],
    ids=["gauss", "epsdelta", "laplace", "zero-eps"],
)
def test_generic_delta_matches_closed_forms(f: object) -> None:
    assert hasattr(f, "_evaluate") and hasattr(f, "delta_at")
    eps = np.array([0.0, 0.2, 0.7, 1.5, 4.0])
    generic = delta_from_tradeoff(f._evaluate, eps)  # type: ignore[attr-defined]
    np.testing.assert_allclose(generic, f.delta_at(eps), atol=1e-9)  # type: ignore[attr-defined]


def test_valid_curves_validate() -> None:
    for f in [GaussianTradeOff(0.0), GaussianTradeOff(2.0), EpsDeltaTradeOff(1.0, 0.1), LaplaceTradeOff(0.5)]:
        f.validate()
    CurveTradeOff(lambda a: np.maximum(0.0, 1.0 - 2.0 * a), name="line")


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (lambda a: np.minimum(1.0, 1.01 - a), "exceeds 1 - alpha"),
        (lambda a: np.where(a < 0.5, 0.1 * (1 - a), 0.3 * (1 - a)), "increases"),
        (lambda a: 0.5 * (1 - a**2), "convex"),
        (lambda a: -0.1 + 0 * a, "outside"),
        (lambda a: np.full_like(a, np.nan), "finite"),
        (lambda a: 0.5, "vectorised"),
    ],
)
def test_invalid_curves_raise_with_message(fn: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CurveTradeOff(fn, name="bad")  # type: ignore[arg-type]


def test_validate_tradeoff_tolerance() -> None:
    # a kink of size 1e-12 above the chord passes at the default tolerance and fails at a tiny one
    def f(a: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, 0.5 - a) + np.where(np.isclose(a, 0.25), 1e-12, 0.0)

    validate_tradeoff(f)
    with pytest.raises(ValueError, match="convex"):
        validate_tradeoff(f, tol=1e-14)


def test_lower_convex_hull_against_brute_force() -> None:
    rng = np.random.default_rng(12345)
    for _ in range(20):
        a = rng.uniform(0, 1, 40)
        b = rng.uniform(0, 1, 40)
        ha, hb = lower_convex_hull(a, b)
        assert np.all(np.diff(ha) > 0)
        # every point lies on or above the hull's piecewise-linear interpolation
        assert np.all(b >= np.interp(a, ha, hb) - 1e-12)
        # slopes are non-decreasing (convex)
        slopes = np.diff(hb) / np.diff(ha)
        assert np.all(np.diff(slopes) >= -1e-12)
        # hull vertices are input points
        pts = set(zip(a.tolist(), b.tolist(), strict=True))
        assert all((x, y) in pts for x, y in zip(ha.tolist(), hb.tolist(), strict=True))


def test_point_cloud_tradeoff() -> None:
    f = PointCloudTradeOff((0.1, 0.2, 0.5, 0.3), (0.5, 0.3, 0.05, 0.4))
    f.validate()
    assert f(0.0) == 1.0 and f(1.0) == 0.0
    assert f.hull_alphas[0] == 0.0 and f.hull_alphas[-1] == 1.0
    assert f(0.3) < 0.4  # (0.3, 0.4) is above the hull
    eps = np.array([0.0, 0.5, 2.0])
    np.testing.assert_allclose(f.delta_at(eps), delta_from_tradeoff(f._evaluate, eps), atol=1e-9)
    with pytest.raises(ValueError):
        PointCloudTradeOff((0.1,), (1.2,))


def test_envelope_of_gdp_profile_is_conservative_and_tight() -> None:
    mu = 1.3
    env = PrivacyProfile.from_gdp(mu, step=0.01).tradeoff()
    a = np.linspace(0, 1, 1001)
    exact = GaussianTradeOff(mu)(a)
    assert isinstance(env, EnvelopeTradeOff)
    assert np.all(env(a) <= exact + 1e-12)
    assert np.max(exact - env(a)) < 2e-3
    env.validate()


def test_eps_delta_tradeoff_closed_form() -> None:
    f = EpsDeltaTradeOff(math.log(3.0), 0.1)
    assert f(0.0) == pytest.approx(0.9)
    assert f(0.9) == 0.0
    # kink at α* = (1 − δ)/(1 + e^ε)
    assert f(0.9 / 4) == pytest.approx(0.9 / 4)


def test_plot_tradeoffs_draws_curves_and_points() -> None:
    ax = plot_tradeoffs(
        {"G_1": GaussianTradeOff(1.0), "eps=1": EpsDeltaTradeOff(1.0)},
        points={"audit": ([0.1, 0.2], [0.6, 0.5])},
        title="t",
    )
    assert len(ax.lines) == 3  # diagonal + two curves
    assert ax.get_xlabel().startswith("Type I")
    ax2 = plot_tradeoffs([LaplaceTradeOff(1.0)], ax=ax)
    assert ax2 is ax


def test_epsdelta_tradeoff_with_a_huge_epsilon() -> None:
    """A budget of eps = 1000 (e^eps overflows a double) still draws: 1 - delta at 0, then 0."""
    f = EpsDeltaTradeOff(1000.0, 1e-5)
    np.testing.assert_array_equal(f(np.array([0.0, 1e-9, 0.5, 1.0])), [1 - 1e-5, 0.0, 0.0, 0.0])
    assert float(EpsDeltaTradeOff(600.0, 1e-5)(np.array([0.0]))[0]) == 1 - 1e-5
