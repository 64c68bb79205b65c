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
