"""Does exactness pay for its epsilon? (issue 35): the run's one line compares the exact chain's Monte Carlo
error with what the DP Laplace approximation alone would err by at the same budget, and says which wins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from coordinator.experiment import load_experiment
from coordinator.run import exactness_line
from mechanisms.planning import PlanBudget, ProposalStatistics, plan_mcmc
from mechanisms.warmstart import LaplaceApproximation

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.toml"


def _setup(offset_sd: float, draws_per_chain: int, sticky: bool = False):  # type: ignore[no-untyped-def]
    exp = load_experiment(DEMO)
    model = exp.model()
    d = model.d
    cov = np.diag(np.full(d, 0.01**2))
    mean = np.zeros(d)
    lap = LaplaceApproximation(mean + offset_sd * 0.01, cov)  # the DP approximation, offset_sd sds off
    exp = dataclasses.replace(exp, sampler=dataclasses.replace(exp.sampler, laplace=lap))
    stats = ProposalStatistics(0.02, 0.3, 0.95, 0.6, 0.999, 0.15)
    assert exp.warm_start is not None  # the plan's warm start is the experiment's (its noise is scaled by it)
    mu_warm = exp.warm_start.mu
    p = plan_mcmc(
        stats, PlanBudget(eps=18.0, delta=1e-5, mu_warm=mu_warm), sd_total=2.0, m=7, residual=7, chains=16
    )
    rng = np.random.default_rng(0)
    draws = mean + 0.01 * rng.standard_normal((16, draws_per_chain, d))  # the exact posterior N(0, 0.01^2)
    if sticky:  # chains that barely move: few effective draws
        draws = np.repeat(draws[:, :5], draws_per_chain // 5, axis=1)
    return exp, model, draws, p


def test_a_far_off_approximation_makes_exactness_pay() -> None:
    exp, model, draws, p = _setup(offset_sd=2.0, draws_per_chain=100)
    line = exactness_line(exp, model, draws, p)
    assert line.startswith("exactness pays here: the exact chain's Monte Carlo error 0.0"), line


def test_an_accurate_approximation_and_few_draws_do_not_pay() -> None:
    exp, model, draws, p = _setup(offset_sd=0.0, draws_per_chain=50, sticky=True)
    line = exactness_line(exp, model, draws, p)
    assert line.startswith("exactness does NOT pay here: "), line
    assert "the DP approximation alone is as accurate" in line


def test_no_line_without_a_plan() -> None:
    exp, model, draws, _ = _setup(offset_sd=0.0, draws_per_chain=50)
    assert exactness_line(exp, model, draws, None) == ""
