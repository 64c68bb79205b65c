"""Simulators for the ABCDP experiments: shapes, priors, and sanity of the tuberculosis model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mechanisms.simulators import (
    SUMMARY_NAMES,
    CovidCubicModel,
    ToyMixtureModel,
    TuberculosisModel,
    observed_summary,
    tb_distance,
)

TB_REFERENCE = np.array([5.88, 6.74, 0.09, 192.0])
SF_COUNTS = {"30": 1, "23": 1, "15": 1, "10": 1, "8": 1, "5": 2, "4": 4, "3": 13, "2": 20, "1": 282}
SF_MONTHS = [0, 0, 1, 2, 3, 3, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 7, 8, 8,
             10, 11, 12, 14, 16, 16, 18, 20, 21, 23]


def test_toy_prior_and_simulator_shapes() -> None:
    model = ToyMixtureModel()
    rng = np.random.default_rng(0)
    th = model.sample_prior(rng, 7)
    assert th.shape == (7, 5) and np.allclose(th.sum(axis=1), 1.0)
    y = model.simulate(th, 300, rng)
    assert y.shape == (7, 300) and y.min() >= 0 and y.max() < 5
    assert model.simulate(th[0], 10, rng).shape == (1, 10)


def test_toy_component_frequencies_follow_theta() -> None:
    model = ToyMixtureModel()
    theta = np.array([0.25, 0.04, 0.33, 0.04, 0.34])
    y = model.simulate(theta, 5000, np.random.default_rng(1))[0]
    counts = np.bincount(np.floor(y).astype(int), minlength=5)
    assert stats.chisquare(counts, 5000 * theta).pvalue > 1e-3
    within = y - np.floor(y)
    assert stats.kstest(within, "uniform").pvalue > 1e-3
    assert ToyMixtureModel.mean_absolute_error(model.prior_mean, theta) == pytest.approx(0.128)
    with pytest.raises(ValueError, match="sum to 1"):
        model.simulate([0.5, 0.5, 0.5, 0.0, 0.0], 10, np.random.default_rng(0))


def test_covid_model_shapes_and_values() -> None:
    model = CovidCubicModel()
    rng = np.random.default_rng(2)
    th = model.sample_prior(rng, 6)
    y = model.trajectories(th)
    assert th.shape == (6, 4) and y.shape == (6, 18)
    t = np.arange(18.0)
    a0, a1, a2, a3 = th[0]
    assert np.allclose(y[0], a3 + a2 * t + a1 * t**2 + a0 * t**3)
    assert np.array_equal(model.simulate(th, rng), y)  # no observation noise by default
    rec = model.records(y, 1000.0)
    assert rec.shape == (6, 18, 2) and rec[0, -1, 0] == 1.0 and rec[0, 0, 0] == 0.0
    assert model.records(y[0], 1000.0).shape == (18, 2)
    assert model.prior_predictive_scale(rng, 500) > 0
    noisy = CovidCubicModel(noise_sd=5.0).simulate(th, rng)
    assert not np.array_equal(noisy, y)


def test_tb_prior_respects_constraints() -> None:
    model = TuberculosisModel()
    th = model.sample_prior(np.random.default_rng(3), 500)
    assert th.shape == (500, 4)
    r1, t1, r2, burden = th.T
    assert np.all((r1 > 1.01) & (r1 < 20.0)) and np.all((t1 > 0.01) & (t1 < 30.0)) and np.all(burden > 0)
    assert np.all(0.95 * r2 + 0.05 * r1 < 1.0)  # subcritical: stationary population exists
    rates = model.rates(th)
    _, _, mean_obs = model.stationary_means(th)
    assert np.all(rates.trans_nc < 40.0) and np.all((mean_obs > 0) & (mean_obs < 350))
    assert abs(np.std(burden) - 30.0) < 4.0  # std 30, not sqrt(30)


def test_tb_summaries_of_sf_data() -> None:
    s = observed_summary(SF_COUNTS, SF_MONTHS)
    assert s.tolist() == [473, 326, 30, pytest.approx(20 / 3), 282, 20, 24, 17]
    assert tb_distance(s[None], s)[0] == 0.0
    with pytest.raises(ValueError, match="observation months"):
        observed_summary(SF_COUNTS, SF_MONTHS[:-1])


def test_tb_simulator_shapes_and_sanity() -> None:
    model = TuberculosisModel()
    rng = np.random.default_rng(4)
    th = np.vstack([np.repeat(TB_REFERENCE[None], 60, axis=0), model.sample_prior(rng, 40)])
    s = model.simulate(th, rng)
    assert s.shape == (100, len(SUMMARY_NAMES))
    n_obs, n_cl, largest, gap, n1, n2, period, months = s.T
    assert np.all(s >= 0) and np.all(s == np.floor(s * 3) / 3)  # counts (and thirds for the mean gap)
    assert np.all(n_cl <= n_obs) and np.all(largest <= n_obs) and np.all(n1 + 2 * n2 <= n_obs)
    assert np.all(n1 + n2 <= n_cl) and np.all((n_cl == 0) | (largest >= 1))
    assert np.all(months <= period) and np.all(period <= 24) and np.all(months <= largest)
    assert np.all(gap <= largest / 3)
    # at the reference parameters the window holds about two years' worth of stationary observations
    _, _, mean_obs = model.stationary_means(TB_REFERENCE[None])
    ref = n_obs[:60]
    assert abs(ref.mean() - 2 * mean_obs[0]) < 5 * ref.std(ddof=1) / math.sqrt(60)
    d = tb_distance(s, observed_summary(SF_COUNTS, SF_MONTHS))
    assert d.shape == (100,) and np.all(np.isfinite(d))
    assert tb_distance(s[:5], s[:3]).shape == (5, 3)


def test_tb_simulator_edge_cases_and_reproducibility() -> None:
    th = np.repeat(TB_REFERENCE[None], 5, axis=0)
    blind = TuberculosisModel(p_observed=0.0).simulate(th, np.random.default_rng(0))
    assert np.all(blind == 0)
    model = TuberculosisModel()
    a = model.simulate(th, np.random.default_rng(9))
    b = model.simulate(th, np.random.default_rng(9))
    assert np.array_equal(a, b)
    # chunking does not change the law: same seeds, tiny chunks, still valid summaries
    c = model.simulate(th, np.random.default_rng(9), max_clusters=10)
    assert c.shape == a.shape and np.all(c[:, 1] <= c[:, 0])
    with pytest.raises(ValueError, match="R1 > 1"):
        model.rates([[1.0, 1.0, 0.1, 100.0]])


def test_tb_warmup_follows_relaxation_time() -> None:
    model = TuberculosisModel()
    w = model.warmup_years(np.array([TB_REFERENCE, [19.5, 0.05, 0.01, 200.0]]))
    assert w[0] == 15.0  # fast relaxation: the minimum warm-up
    assert w[1] > w[0] and w[1] <= 300.0


def _one_population_gillespie(theta: np.ndarray, model: TuberculosisModel, warmup: float,
                              rng: np.random.Generator) -> tuple[int, int, int]:
    """Reference: the textbook single event loop over the whole population (slow, plain Python)."""
    r = model.rates(theta[None])
    beta, a_c, d_c, a_nc, d_nc = (float(x[0]) for x in
                                  (r.burden, r.trans_c, r.death_c, r.trans_nc, r.death_nc))
    hosts: list[list[int]] = [[], []]  # cluster ids of non-compliant [0] and compliant [1] hosts
    observed: dict[int, int] = {}
    t, next_cluster, t_end = -warmup, 0, float(model.observation_years)
    while True:
        n_nc, n_c = len(hosts[0]), len(hosts[1])
        rates = np.array([beta, a_c * n_c, d_c * n_c, a_nc * n_nc, d_nc * n_nc])
        total = rates.sum()
        t += rng.exponential(1 / total)
        if t >= t_end:
            break
        e = rng.choice(5, p=rates / total)
        if e == 0:
            hosts[int(rng.random() < model.p_compliance)].append(next_cluster)
            next_cluster += 1
        elif e in (1, 3):
            src = hosts[1] if e == 1 else hosts[0]
            cluster = src[rng.integers(len(src))]
            hosts[int(rng.random() < model.p_compliance)].append(cluster)
        else:
            src = hosts[1] if e == 2 else hosts[0]
            cluster = src.pop(rng.integers(len(src)))
            if t >= 0 and rng.random() < model.p_observed:
                observed[cluster] = observed.get(cluster, 0) + 1
    sizes = list(observed.values())
    return sum(sizes), len(sizes), max(sizes, default=0)


@pytest.mark.slow
def test_tb_cluster_superposition_matches_population_event_loop() -> None:
    """The vectorised per-cluster simulator has the law of the one-population event loop."""
    model = TuberculosisModel(warmup_min=8.0, warmup_max=8.0)
    theta = np.array([3.0, 2.0, 0.3, 25.0])
    rng = np.random.default_rng(12)
    ref = np.array([_one_population_gillespie(theta, model, 8.0, rng) for _ in range(150)], dtype=float)
    fast = model.simulate(np.repeat(theta[None], 600, axis=0), rng)[:, :3]
    for j in range(3):
        assert stats.ks_2samp(ref[:, j], fast[:, j]).pvalue > 1e-3, SUMMARY_NAMES[j]
        assert stats.ttest_ind(ref[:, j], fast[:, j], equal_var=False).pvalue > 1e-3, SUMMARY_NAMES[j]
