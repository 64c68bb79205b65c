"""The refitting independence sampler (issue 35 item 4): from a proposal several posterior sds off, the
warm-up's refit recovers the posterior's location and spread, and the frozen kernel's draws are exact (the
known Gaussian posterior of a linear regression, within Monte Carlo error from the ESS)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mechanisms.samplers import BernoulliRule, LocalParties, PublicSeeds, RefitIndependenceMH, run_kernel
from mechanisms.samplers.diagnostics import ess

from .test_auto_tuning import regression_case


def _kernel(offset_sd: float, scale: float, seed: int = 0) -> tuple[RefitIndependenceMH, object]:
    case = regression_case(2)
    chol = np.linalg.cholesky(case.cov)
    d = case.mean.size
    direction = np.ones(d) / np.sqrt(d)
    mean0 = case.mean + offset_sd * chol @ direction  # a DP approximation `offset_sd` sds off
    decide = LocalParties(case.model, case.data, BernoulliRule(np.random.default_rng(seed)))
    kernel = RefitIndependenceMH(case.model, decide, mean0, scale**2 * case.cov, refits=(40, 80))
    return kernel, case


def test_refit_recovers_the_posterior_from_a_proposal_three_sds_off() -> None:
    kernel, case = _kernel(3.0, 0.8)
    seeds = PublicSeeds(11)
    start = kernel.proposal(kernel.init(np.tile(kernel.mean0, (32, 1)))).sample(seeds.init_rng(), 32)
    state, _ = run_kernel(kernel, kernel.init(start), kernel.frozen_from + 1, seeds)
    chol = np.linalg.cholesky(case.cov)
    off = np.linalg.norm(np.linalg.solve(chol, state.mean - case.mean))
    assert off < 0.5, off  # from 3 sds to within half a posterior sd
    w = np.linalg.eigvalsh(np.linalg.solve(chol, np.linalg.solve(chol, state.cov).T))
    assert 0.5 < w.min() and w.max() < 2.0, w  # the spread within a factor of sqrt(2) in every direction


def test_frozen_kernel_is_exact() -> None:
    """After the freeze the chain is a fixed independence MH kernel: its draws' mean and variance agree with
    the exact posterior within 4 Monte Carlo standard errors (ESS-based), per parameter."""
    kernel, case = _kernel(2.0, 1.3, seed=3)
    seeds = PublicSeeds(5)
    chains = 32
    start = np.random.default_rng(1).multivariate_normal(kernel.mean0, kernel.cov0, chains)
    _, trace = run_kernel(kernel, kernel.init(start), kernel.frozen_from + 400, seeds)
    draws = trace.draws[kernel.frozen_from :]  # (steps, chains, d)
    n_eff = ess(draws.transpose(1, 0, 2))
    flat = draws.reshape(-1, draws.shape[-1])
    sd = np.sqrt(np.diag(case.cov))
    z = (flat.mean(axis=0) - case.mean) / (sd / np.sqrt(n_eff))
    assert np.all(np.abs(z) < 4.0), z
    # variance: the MCSE of a variance estimate of a Gaussian is about var * sqrt(2 / ESS)
    var = flat.var(axis=0)
    zv = (var - sd**2) / (sd**2 * np.sqrt(2.0 / n_eff))
    assert np.all(np.abs(zv) < 4.0), zv
    # and by a KS test on one draw per chain every 20 steps (nearly independent at this acceptance)
    thin = draws[::20].reshape(-1, draws.shape[-1])
    for k in range(thin.shape[1]):
        assert stats.kstest((thin[:, k] - case.mean[k]) / sd[k], "norm").pvalue > 1e-3


def test_frozen_proposal_does_not_change() -> None:
    kernel, _ = _kernel(1.0, 1.0)
    seeds = PublicSeeds(2)
    state, _ = run_kernel(kernel, kernel.init(np.tile(kernel.mean0, (8, 1))), kernel.frozen_from + 1, seeds)
    later, _ = run_kernel(kernel, state, 30, seeds, first_batch=kernel.frozen_from + 1)
    assert np.array_equal(later.mean, state.mean) and np.array_equal(later.cov, state.cov)


def test_bad_schedules_are_refused() -> None:
    kernel, _ = _kernel(0.0, 1.0)
    for refits in ((), (10, 10), (0, 5), (20, 10)):
        with pytest.raises(ValueError, match="refits"):
            RefitIndependenceMH(kernel.model, kernel.decide, kernel.mean0, kernel.cov0, refits=refits)


def _held_pool(rng: np.random.Generator, centre: np.ndarray, chains: int, steps: int, hold: int) -> list:
    """Each chain's pooled states as an independence sampler leaves them: a fresh N(centre, I) draw every
    ``hold`` iterations, held in between (``steps`` iterations of ``chains`` chains)."""
    fresh = [centre + rng.standard_normal((chains, centre.size)) for _ in range(steps // hold)]
    return [fresh[k // hold] for k in range(steps)]


def test_the_pools_effective_size_counts_each_held_state_once_by_its_holding_time() -> None:
    from mechanisms.planning import _refit
    from mechanisms.samplers.mh import RefitState

    pool = _held_pool(np.random.default_rng(0), np.zeros(3), 8, 16, 4)  # 32 distinct states, each held 4
    x = np.vstack(pool)
    run_len, sum_h2 = np.full(8, 4.0), 8 * 3 * 16.0  # as the kernel's pooling leaves them
    base = (np.zeros(3), np.eye(3))
    st = RefitState(x, np.zeros(len(x)), 0, *base, len(x), x.mean(axis=0), None, run_len, sum_h2)
    assert st.pooled_ess() == pytest.approx(128**2 / (32 * 16))  # 32: the distinct states, not the 128 pooled
    assert RefitState(x, np.zeros(len(x)), 0, np.zeros(3), np.eye(3), len(x)).pooled_ess() == 128
    got = _refit(np.zeros(3), np.eye(3), pool, 0.5)  # the plan's mirror reads the same holding times
    assert np.all(np.isfinite(got[0]))


def test_a_refit_on_few_distinct_states_keeps_a_good_proposal_and_moves_a_bad_one() -> None:
    """The refit's shrinkage toward the previous base (James-Stein, by the pool's effective size): from a
    pool of about 30 distinct states (8 chains, 16 iterations, each state held 4) around a base that is right,
    the refitted mean's squared error is a small part of the pooled mean's (the planned Weibull run's failure:
    its refit moved a good proposal 0.81 sd); from a base 3 sds off it moves at least 95 % of the way to the
    pooled mean."""
    from mechanisms.planning import _refit

    d, truth = 4, np.zeros(4)
    rng = np.random.default_rng(7)
    shrunk, pooled, widths = [], [], []
    for _ in range(200):
        pool = _held_pool(rng, truth, 8, 16, 4)
        mean, cov = _refit(truth, np.eye(d), pool, 0.5)
        shrunk.append(np.sum((mean - truth) ** 2))
        pooled.append(np.sum((np.vstack(pool).mean(axis=0) - truth) ** 2))
        widths.append(np.linalg.eigvalsh(cov))
    assert np.mean(shrunk) < 0.35 * np.mean(pooled), (np.mean(shrunk), np.mean(pooled))
    w = np.array(widths)
    assert np.median(np.abs(np.log(w))) < 0.1, np.median(np.abs(np.log(w)))  # the covariance kept as well
    off = truth + 3.0 * np.ones(d) / 2.0  # 3 sds off
    for _ in range(20):
        pool = _held_pool(rng, truth, 8, 16, 4)
        mean, cov = _refit(off, np.eye(d), pool, 0.5)
        centre = np.vstack(pool).mean(axis=0)
        assert np.linalg.norm(mean - centre) < 0.05 * np.linalg.norm(off - centre), (mean, centre)
