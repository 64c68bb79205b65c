"""The plan against the realised chain (issue 23): an independence sampler from an approximation further off
than its DP noise (an unconverged warm start, a clip's bias) mixes far worse than the plan from the
approximation predicts; the pilot (the warm-up's released accept bits) measures the offset and re-plans the
rest, and that prediction matches the realised chain."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from hss.randomness import SecureRandom
from mechanisms.models import load_model
from mechanisms.planning import (
    ChainSettings,
    McmcPlan,
    StandIn,
    offset_statistics,
    pilot_bits,
    pilot_offset,
    proposal_statistics,
    replan_after_pilot,
    warmup_of,
)
from mechanisms.samplers import (
    ConfidentialRule,
    GaussianProposal,
    IndependenceMH,
    LocalParties,
    PublicSeeds,
    plaintext_decide,
    run_kernel,
)
from mechanisms.samplers.requests import Penalty
from mechanisms.warmstart import exact_laplace
from simulations.reference import run_ess

M, CHAINS, SD_TOTAL, INFLATE, CAP = 3, 16, 2.0, 1.1, 5.0
OFF = 2.5  # the approximation's offset from the posterior's mode, in its sds (the plan assumes 0.3)
ITERATIONS, PILOT = 600, 100


def _case() -> tuple[object, list[dict[str, np.ndarray]], np.ndarray, np.ndarray, np.ndarray]:
    model = load_model("bayes-logistic", {"p": 2})
    data = model.synthetic_data(np.random.default_rng(5), (800, 700, 500))
    assert data is not None
    checked = [model.check_data(d) for d in data]
    pooled = {k: np.concatenate([d[k] for d in checked]) for k in checked[0]}
    mode, cov = exact_laplace(model, pooled)
    u = np.ones(model.d) / math.sqrt(model.d)
    mean = mode + np.linalg.cholesky(cov) @ (OFF * u)
    return model, checked, mode, mean, cov


def _chain(model, checked, mean, cov):  # type: ignore[no-untyped-def]
    """The realised chain (the confidential decision law in memory): the pilot's accept bits, then the
    draws after it."""
    rngs = [SecureRandom(bytes([90 + j, 1]) * 16) for j in range(M)]
    decide = LocalParties(model, checked, ConfidentialRule(plaintext_decide, rngs, "sign"))
    penalty = Penalty(None, sd=SD_TOTAL / math.sqrt(M), max_sensitivity=CAP)
    kernel = IndependenceMH(model, decide, GaussianProposal(mean, INFLATE**2 * cov), penalty=penalty, m=M)
    seeds = PublicSeeds(11)
    theta0 = GaussianProposal(mean, cov).sample(seeds.init_rng(), CHAINS)
    state, pilot = run_kernel(kernel, kernel.init(theta0), PILOT, seeds)
    _, rest = run_kernel(kernel, state, ITERATIONS - PILOT, seeds, first_batch=PILOT)
    return pilot, np.ascontiguousarray(rest.draws.transpose(1, 0, 2))


@pytest.mark.slow
def test_the_pilot_re_plans_an_off_centre_proposal_to_the_realised_ess() -> None:
    model, checked, _mode, mean, cov = _case()
    # the plan from the approximation alone (its DP noise: 0.3 sd in each direction)
    stand_in = StandIn(model, mean, cov, INFLATE, SD_TOTAL)
    rest = ChainSettings(chains=CHAINS, steps=ITERATIONS - PILOT, cap=CAP)
    stats = proposal_statistics(
        stand_in, np.random.default_rng(2), dataclasses.replace(rest, offset_cov=0.09 * cov)
    )
    plan = McmcPlan(ITERATIONS, CHAINS, 1.0, 0.0, 1.0, 1e-5, 0.0, math.inf, stats)
    planned = CHAINS * (ITERATIONS - PILOT) * stats.ess_per_proposal
    pilot, draws = _chain(model, checked, mean, cov)
    realised = run_ess(draws)
    assert planned > 2.0 * realised  # the defect: the plan from the approximation alone is optimistic
    accepted, proposed, count_from = pilot_bits(pilot.accept)
    r = pilot_offset(
        stand_in, CAP, accepted=accepted, proposed=proposed, steps=PILOT, chains=CHAINS, seed=4,
        count_from=count_from,
    )  # fmt: skip
    # the offset the pilot shows is the one the approximation has, within the pilot's sampling error: it
    # counts ~15-70 accepts, and fewer accepts read as a larger offset (right-skewed). Over 40 noise keys
    # (20 with each of the two Gamma(1/m) samplers of mechanisms.noise, the same law) r was 2.07-5.21, 7 of
    # the 40 more than 1.0 from OFF (the bound this test had, calibrated on 5 keys, which failed once the
    # decision noise's sampler changed); the bound below holds all 40 and still fails a pilot that misses
    # the offset (the plan alone assumes 0.3)
    assert OFF - 1.0 < r < OFF + 3.0, r
    after = offset_statistics(stand_in, r, rest, seed=6)
    re = replan_after_pilot(plan, after, PILOT, sd_total=SD_TOTAL, m=M, residual=M)
    predicted = CHAINS * (ITERATIONS - PILOT) * after.ess_per_proposal
    assert re.ess > 0 and re.stats is after
    # the pilot's second half has ~40 accepts here: a ±16 % Poisson error, about ±0.4 sd in the offset, and
    # the ESS per proposal falls ~2x per 0.5 sd at this offset; the realised ESS has its own error (34-72
    # over 5 seeds of the chain). Measured over those seeds, predicted / realised was 0.29-2.0 (median 1):
    # a factor 3.5 either way, where the plan from the approximation alone is off by ~40x
    assert 1 / 3.5 < predicted / realised < 3.5, (predicted, realised, planned)
    assert warmup_of(stats, ITERATIONS) <= PILOT


def test_offset_statistics_refuses_settings_without_the_plan_s_cap() -> None:
    """The re-plan simulates at the cap the plan fixed: settings that leave it to a quantile are refused,
    naming the setting, before anything is simulated."""
    model = load_model("bayes-logistic", {"p": 2})
    stand_in = StandIn(model, np.zeros(3), np.eye(3) * 0.01, INFLATE, SD_TOTAL)
    with pytest.raises(ValueError, match=r"ChainSettings\.cap is None"):
        offset_statistics(stand_in, 1.0, ChainSettings(chains=CHAINS, steps=10), seed=1)
