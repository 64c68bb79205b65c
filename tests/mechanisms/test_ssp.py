"""The noise-aware SSP posterior for linear regression (mechanisms/ssp.py; Bernstein & Sheldon 2019)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from hss.randomness import SecureRandom
from mechanisms import ssp
from mechanisms.models import load_model
from mechanisms.models.linear import LinearRegression
from mechanisms.privacy.events import GaussianEvent

M = 7
BETA = np.array([1.0, 0.5, -0.5])


def _model(**kw: object) -> LinearRegression:
    args: dict[str, object] = {"p": 2, "x_bound": 2.0, "y_bound": 6.0, "sigma": 1.0} | kw
    model = load_model("linear-regression", args)
    assert isinstance(model, LinearRegression)
    return model


def _registries(rng: np.random.Generator, n: int) -> list[dict[str, np.ndarray]]:
    """Records that follow the model (x ~ N(0, 1) clipped to the box, y rarely reaches ±6)."""
    out = []
    for k in rng.multinomial(n, np.full(M, 1.0 / M)):
        x = np.clip(rng.normal(0.0, 1.0, (k, 2)), -2.0, 2.0)
        y = np.clip(BETA[0] + x @ BETA[1:] + rng.normal(0.0, 1.0, k), -6.0, 6.0)
        out.append({"x1": x[:, 0], "x2": x[:, 1], "y": y})
    return out


def _keys(tag: int) -> list[SecureRandom]:
    return [SecureRandom.from_key(bytes([tag % 256, tag // 256 % 256, 7, j]) * 8) for j in range(M)]


def _pooled(model: LinearRegression, data: list[dict[str, np.ndarray]]) -> ssp.SSPRelease:
    total = np.sum([ssp.local_statistics(model, d) for d in data], axis=0)
    return ssp.SSPRelease.from_total(total, model.d)


def _gaussian_logpdf(theta: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    return np.asarray(stats.multivariate_normal(mean, cov).logpdf(theta))


@pytest.mark.parametrize("ellipsoid", [False, True])
def test_no_noise_is_the_exact_conjugate_posterior(ellipsoid: bool) -> None:
    kw = {"x_center": (0.1, -0.1), "x_cov": ((1.0, 0.3), (0.3, 1.0)), "x_radius": 2.0} if ellipsoid else {}
    model = _model(**kw)
    data = _registries(np.random.default_rng(1), 500)
    exact = _pooled(model, data)
    rel = ssp.release(model, data, ssp.SSPPlan(0.0, 0.0, M), _keys(1))
    np.testing.assert_array_equal(rel.u, exact.u)  # no noise: the sums themselves
    post = ssp.noise_aware_posterior(model, rel, ssp.SSPPlan(0.0, 0.0, M), np.random.default_rng(0))
    # the Gaussian is the normalised posterior: log N(θ; m, C) − log prior − log likelihood is constant
    pooled = {k: np.concatenate([model.check_data(d)[k] for d in data]) for k in data[0]}
    theta = post.mean() + 0.05 * np.random.default_rng(2).standard_normal((6, model.d))
    unnorm = model.log_prior(theta) + model.log_likelihood(pooled, theta)
    diff = _gaussian_logpdf(theta, post.mean(), post.cov()) - unnorm
    assert np.ptp(diff) < 1e-8 * np.abs(unnorm).max()
    # μ → ∞: tiny noise through the mixture code path converges to the same posterior
    tiny = ssp.SSPPlan(1e-7, 1e-7, M)
    near = ssp.noise_aware_posterior(
        model, ssp.release(model, data, tiny, _keys(2)), tiny, np.random.default_rng(3)
    )
    np.testing.assert_allclose(near.mean(), post.mean(), atol=1e-6 * post.sd().min())
    np.testing.assert_allclose(near.cov(), post.cov(), rtol=1e-6)
    assert ssp.ssp_mu(model, tiny) > 1e7


def test_release_mu_and_events() -> None:
    model = _model()
    plan = ssp.plan_for_mu(model, 0.8, M)
    assert ssp.ssp_mu(model, plan) == pytest.approx(0.8)
    assert ssp.ssp_mu(model, plan, neighbours="replace-one") == pytest.approx(1.6)
    assert ssp.ssp_mu(model, plan, residual=4) == pytest.approx(0.8 * math.sqrt(7 / 4))
    event = ssp.ssp_event(model, plan)
    assert isinstance(event, GaussianEvent) and event.mu == pytest.approx(0.8)
    with pytest.raises(ValueError):
        ssp.ssp_mu(model, plan, residual=0)
    with pytest.raises(ValueError):
        ssp.plan_for_mu(model, 0.0, M)


@pytest.mark.parametrize("ellipsoid", [False, True])
def test_per_record_bound_holds(ellipsoid: bool) -> None:
    """One record's (x̃y, vech x̃x̃ᵀ) has block norms within (Δ_u, Δ_S), corners and ellipsoid edge included."""
    kw = {"x_center": (0.2, 0.0), "x_cov": ((1.0, 0.5), (0.5, 2.0)), "x_radius": 1.5} if ellipsoid else {}
    model = _model(**kw)
    du, ds = ssp.sensitivities(model)
    rng = np.random.default_rng(4)
    x = np.vstack([rng.uniform(-2, 2, (500, 2)), [[2, 2], [-2, 2], [2, -2], [-2, -2]]])
    y = np.r_[rng.uniform(-6, 6, 500), [6, -6, 6, -6]]
    checked = model.check_data({"x1": x[:, 0], "x2": x[:, 1], "y": y})
    design = model.design(checked)
    u_norm = np.linalg.norm(design * checked["y"][:, None], axis=1)
    s_norm = np.linalg.norm(ssp.vech(design[:, :, None] * design[:, None, :]), axis=1)
    assert u_norm.max() <= du * (1 + 1e-12) and s_norm.max() <= ds * (1 + 1e-12)
    if ellipsoid:  # the ellipsoid's bound is the tighter one here
        assert ssp.record_norm_bound(model) < ssp.record_norm_bound(_model())


def test_noise_shares_add_up_to_the_planned_total() -> None:
    """m registries' shares N(0, sd²/m) sum to N(0, sd²) per coordinate (chi-square bounds, 300 releases)."""
    model = _model()
    data = _registries(np.random.default_rng(5), 70)
    exact = _pooled(model, data)
    plan = ssp.SSPPlan(3.0, 2.0, M)
    k = 300
    err_u, err_s = [], []
    for r in range(k):
        rel = ssp.release(model, data, plan, _keys(1000 + r))
        err_u.append(rel.u - exact.u)
        err_s.append(ssp.vech(rel.s - exact.s))
    for err, sd in ((np.array(err_u), 3.0), (np.array(err_s), 2.0)):
        ss = np.sum(err**2, axis=0) / sd**2  # ~ chi²_k per coordinate (mean known: 0)
        lo, hi = stats.chi2.ppf([1e-4, 1 - 1e-4], k)
        assert np.all((lo < ss) & (ss < hi)), ss


@pytest.mark.slow
def test_coverage_noise_aware_nominal_naive_under() -> None:
    """90 % central intervals over 300 synthetic datasets (n = 300, μ = 1: noise sd ~ 25 on Xᵀy and 13 on
    XᵀX): the noise-aware intervals cover each coefficient at the nominal rate within the two-sided 99.9 %
    binomial band (Bonferroni over the 3 coefficients; the posterior is exact for its model up to Monte
    Carlo, so a failure means a bug, at a false-alarm rate <= 0.1 %), and the naive plug-in's coverage is
    below that band's lower end (measured ~0.6: the noise is not small against the sampling spread)."""
    model = _model()
    rng = np.random.default_rng(11)
    plan = ssp.plan_for_mu(model, 1.0, M)
    reps, level = 300, 0.9
    aware = np.zeros(3, dtype=int)
    naive = np.zeros(3, dtype=int)
    for r in range(reps):
        rel = ssp.release(model, _registries(rng, 300), plan, _keys(r))
        lo, hi = ssp.noise_aware_posterior(model, rel, plan, rng, draws=1000).interval(level)
        aware += (lo <= BETA) & (BETA <= hi)
        lo, hi = ssp.naive_posterior(model, rel).interval(level)
        naive += (lo <= BETA) & (BETA <= hi)
    lo_band, hi_band = stats.binom.ppf([0.001 / 6, 1 - 0.001 / 6], reps, level)
    assert np.all((lo_band <= aware) & (aware <= hi_band)), (aware / reps, lo_band / reps, hi_band / reps)
    assert np.all(naive < lo_band), naive / reps
