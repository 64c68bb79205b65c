"""Yıldırım–Ermiş penalty MH: the acceptance formula Φ(λ/s − s/2) + e^λ Φ(−λ/s − s/2) in its limits, and the
penalty chain targets the exact posterior (also with a public sensitivity cap). That every accept rule's
penalty decision has this acceptance rate is test_decider_contract.py."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.samplers import (
    ConfidentialRule,
    DecisionRequest,
    LocalParties,
    Penalty,
    PublicSeeds,
    RandomWalkMH,
    penalty_acceptance,
    plaintext_decide,
    run_kernel,
)
from tests.mechanisms.samplers.helpers import (
    MODEL,
    beta_bernoulli_data,
    check_draws_match,
    exact_posterior,
    noise_rngs,
)

M = 3


def test_formula_limits() -> None:
    lam = np.array([-3.0, -0.5, 0.0, 0.7, 4.0])
    np.testing.assert_allclose(penalty_acceptance(lam, 1e-9), np.minimum(1, np.exp(lam)), atol=1e-6)
    a, b = penalty_acceptance(lam, 1.3), penalty_acceptance(-lam, 1.3)
    np.testing.assert_allclose(a / b, np.exp(lam), rtol=1e-10)  # detailed balance


@pytest.mark.parametrize("c", ["bound", "clip"])
def test_penalty_chain_targets_exact_posterior(c: str) -> None:
    data = beta_bernoulli_data()
    # clipping at b = 12 binds only for proposals with θ* < 1/12 (far in the tail, rejected almost surely),
    # so the target is indistinguishable from the posterior here; where it binds, exactness is lost
    pen = Penalty(tau=0.08, alpha=0.5, n=70, c=c, b=12.0 if c == "clip" else None)
    rule = ConfidentialRule(plaintext_decide, noise_rngs(M, f"penchain/{c}"), "sign")
    kernel = RandomWalkMH(MODEL, LocalParties(MODEL, data, rule), cov=0.1**2, penalty=pen, m=M)
    seeds = PublicSeeds(31)
    _, trace = run_kernel(kernel, kernel.init(np.full((64, 1), 0.3)), 400, seeds)
    check_draws_match(trace.draws[50:, :, 0], exact_posterior(data), f"penalty MH ({c})")
    if c == "clip":
        assert rule.clipped_records > 0  # counted, so a party can audit it


def test_sensitivity_cap_keeps_the_posterior_and_rejects_publicly() -> None:
    """max_sensitivity: proposals with c(θ, θ*) above the cap are rejected without asking the parties (a
    symmetric restriction of the proposal), and the chain still targets the exact posterior."""
    data = beta_bernoulli_data()
    cap = 0.25  # binds often with proposal sd 0.1 around θ ≈ 0.3 (c = 2 max|log θ*/θ|, |log(1-θ*)/(1-θ)|)
    pen = Penalty(tau=0.08, alpha=0.5, n=70, max_sensitivity=cap)
    asked: list[DecisionRequest] = []

    class Recording(LocalParties):
        def __call__(self, request: DecisionRequest) -> np.ndarray:
            asked.append(request)
            return super().__call__(request)

    rule = ConfidentialRule(plaintext_decide, noise_rngs(M, "pencap"), "sign")
    kernel = RandomWalkMH(MODEL, Recording(MODEL, data, rule), cov=0.1**2, penalty=pen, m=M)
    _, trace = run_kernel(kernel, kernel.init(np.full((64, 1), 0.3)), 400, PublicSeeds(32))
    check_draws_match(trace.draws[50:, :, 0], exact_posterior(data), "penalty MH with a sensitivity cap")
    sent = np.concatenate(
        [pen.sensitivity(MODEL, r.theta, r.theta_star) for r in asked if r.theta is not None]
    )
    assert sent.max() <= cap * (1 + 1e-12)  # nothing above the cap reached the parties
    assert trace.asked < 0.9 * 64 * 400  # and the cap did bind
