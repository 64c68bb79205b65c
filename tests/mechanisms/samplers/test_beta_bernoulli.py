"""Beta–Bernoulli split across 3 parties: every reveal mode, rejection sampling and MH, recovers the exact
Beta posterior (mean and variance within 4 MCSE from ESS, KS on thinned draws at level 1e-3), and the
rejection sampler's acceptance rate matches Z / (M_q Π_j M_j) in a binomial test at level 1e-3."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from mechanisms.samplers import (
    AdaptiveMH,
    ConfidentialRule,
    IndependenceMH,
    LocalParties,
    PublicSeeds,
    RandomWalkMH,
    RejectionSampler,
    plaintext_decide,
    run_kernel,
)
from tests.mechanisms.samplers.helpers import (
    KS_ALPHA,
    MODEL,
    RULES,
    Z,
    beta_bernoulli_data,
    check_draws_match,
    exact_posterior,
    noise_rngs,
    rule_for,
)

M = 3


@pytest.mark.slow
@pytest.mark.parametrize("mode", RULES)
def test_random_walk_mh_recovers_posterior(mode: str) -> None:
    data = beta_bernoulli_data()
    steps = 250 if mode == "sign" else 400
    kernel = RandomWalkMH(MODEL, LocalParties(MODEL, data, rule_for(mode, f"mh/{mode}")), cov=0.12**2)
    seeds = PublicSeeds(100)
    state = kernel.init(MODEL.sample_prior(seeds.init_rng(), 64))
    _, trace = run_kernel(kernel, state, steps, seeds)
    check_draws_match(trace.draws[50:, :, 0], exact_posterior(data), f"RW-MH/{mode}")


def test_independence_and_adaptive_mh_recover_posterior() -> None:
    from mechanisms.samplers import GaussianProposal

    data = beta_bernoulli_data()
    post = exact_posterior(data)
    seeds = PublicSeeds(7)
    rule = ConfidentialRule(plaintext_decide, noise_rngs(M, "imh"), "sign")
    q = GaussianProposal(np.array([post.mean()]), np.array([[(1.5 * post.std()) ** 2]]))
    imh = IndependenceMH(MODEL, LocalParties(MODEL, data, rule), q)
    _, tr = run_kernel(imh, imh.init(MODEL.sample_prior(seeds.init_rng(), 32)), 300, seeds)
    check_draws_match(tr.draws[30:, :, 0], post, "independence MH")

    rule = ConfidentialRule(plaintext_decide, noise_rngs(M, "amh"), "sign")
    amh = AdaptiveMH(MODEL, LocalParties(MODEL, data, rule), init_cov=0.5**2, start=40, every=20, stop=120)
    state, tr = run_kernel(amh, amh.init(MODEL.sample_prior(seeds.init_rng(), 32)), 420, PublicSeeds(8))
    # the adapted scale is (2.38^2) * posterior variance, within a factor 2
    assert 0.5 < state.cov[0, 0] / (2.38**2 * post.var()) < 2.0
    check_draws_match(tr.draws[120:, :, 0], post, "adaptive MH (after adaptation stops)")

    # final = "independence": from stop on, proposals N(mean of chain means, k^2 pooled covariance)
    rule = ConfidentialRule(plaintext_decide, noise_rngs(M, "aimh"), "sign")
    aimh = AdaptiveMH(
        MODEL,
        LocalParties(MODEL, data, rule),
        init_cov=0.5**2,
        start=40,
        every=20,
        stop=120,
        final="independence",
        independence_scale=1.2,
    )
    state, tr = run_kernel(aimh, aimh.init(MODEL.sample_prior(seeds.init_rng(), 32)), 300, PublicSeeds(9))
    prop = aimh.independence_proposal(state)
    assert abs(prop.mean[0] - post.mean()) < 0.2 * post.std()
    assert 0.5 < prop.cov[0, 0] / (1.2**2 * post.var()) < 2.0
    assert tr.accept[120:].mean() > 0.6  # nearly independent draws: most proposals accepted
    check_draws_match(tr.draws[120:, :, 0], post, "adaptive MH, independence after adaptation")


@pytest.mark.parametrize("mode", RULES)
def test_rejection_sampling_exact_and_acceptance_rate(mode: str) -> None:
    data = beta_bernoulli_data((8, 12, 5))
    parties = LocalParties(MODEL, data, rule_for(mode, f"rs/{mode}"))
    budget = 2000 if mode == "sign" else 4000
    res = RejectionSampler(MODEL, parties, batch_size=1000).run(
        PublicSeeds(21), n_accept=10**9, max_proposals=budget
    )
    assert res.stopped == "budget" and res.proposed == budget
    k = sum(float(d["y"].sum()) for d in data)
    n = sum(float(d["y"].size) for d in data)
    p = float(np.exp(MODEL.log_evidence(k, n) - sum(parties.log_bounds())))
    assert stats.binomtest(res.accepted, res.proposed, p).pvalue > KS_ALPHA, (res.accepted, res.proposed, p)
    post = exact_posterior(data)
    x = res.samples[:, 0]
    assert abs(x.mean() - post.mean()) <= Z * post.std() / np.sqrt(x.size)
    assert stats.kstest(x, post.cdf).pvalue > KS_ALPHA


@dataclass(frozen=True)
class UniformProposal:
    def logpdf(self, theta: np.ndarray) -> np.ndarray:
        t = theta[:, 0]
        return np.where((t > 0) & (t < 1), 0.0, -np.inf)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.random((n, 1))


def test_rejection_with_a_proposal_and_stop_after_accepts() -> None:
    data = beta_bernoulli_data((8, 12, 5))
    parties = LocalParties(MODEL, data, ConfidentialRule(plaintext_decide, noise_rngs(M, "rsq"), "sign"))
    log_mq = float(stats.beta(2, 3).logpdf(1 / 3))  # sup of the Beta(2, 3) density over the uniform
    sampler = RejectionSampler(MODEL, parties, batch_size=500, proposal=UniformProposal(), log_bound_q=log_mq)
    res = sampler.run(PublicSeeds(3), n_accept=700, max_proposals=10**6)
    assert res.stopped == "accepts" and res.samples.shape == (700, 1)
    k = sum(float(d["y"].sum()) for d in data)
    p = float(np.exp(MODEL.log_evidence(k, 25.0) - log_mq - sum(parties.log_bounds())))
    assert stats.binomtest(res.accepted, res.proposed, p).pvalue > KS_ALPHA
    assert stats.kstest(res.samples[:, 0], exact_posterior(data).cdf).pvalue > KS_ALPHA
    with pytest.raises(ValueError, match="public bound M_q is wrong"):
        RejectionSampler(MODEL, parties, proposal=UniformProposal(), log_bound_q=0.0).run(
            PublicSeeds(3), 1, 100
        )
