"""Convergence warnings (issue 24 item 3): each can fire and names the parameter, the cause and the key."""

from __future__ import annotations

import numpy as np

from coordinator.convergence import chains_agree_p, convergence_warnings


def test_independent_draws_raise_no_warning() -> None:
    rng = np.random.default_rng(0)
    assert convergence_warnings(rng.normal(size=(4, 1000, 2)), ("a", "b"), 400, 1000, 1000) == []


def test_chains_that_disagree_and_too_few_draws_are_named() -> None:
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(4, 60, 2))
    draws[0, :, 1] += 3.0  # one chain elsewhere in b
    out = convergence_warnings(draws, ("a", "b"), 30, 240, 240, planned=True)
    assert any(w.startswith("not converged: R-hat of b") and "target_epsilon" in w for w in out)
    assert any("ESS of b" in w for w in out)


def test_acceptance_and_the_cap_are_reported_with_the_key_to_change() -> None:
    rng = np.random.default_rng(2)
    out = convergence_warnings(rng.normal(size=(4, 500, 1)), ("a",), 2, 2000, 400)
    assert any("acceptance 0.005 is below" in w and "proposal_scale smaller" in w for w in out)
    assert any("1600 of 2000 proposals (80%) were refused by the public sensitivity cap" in w for w in out)
    assert any(
        "above" in w for w in convergence_warnings(rng.normal(size=(4, 500, 1)), ("a",), 990, 1000, 1000)
    )


def test_a_tuned_proposal_is_told_to_adapt_longer_not_to_set_a_scale() -> None:
    rng = np.random.default_rng(2)
    draws = rng.normal(size=(4, 500, 1))
    for accepted in (2, 990):  # below and above
        out = convergence_warnings(draws, ("a",), accepted, 1000, 1000, tuned=True)
        (w,) = [w for w in out if w.startswith("acceptance")]
        assert "automatic proposal tuning" in w and "adapt_stop" in w and "proposal_scale" not in w, w
    out = convergence_warnings(draws, ("a",), 2, 2000, 400, tuned=True)
    (w,) = [w for w in out if "sensitivity cap" in w]
    assert "target_accept" in w and "proposal_scale" not in w, w


def _ar1(rng: np.random.Generator, chains: int, n: int, rho: float) -> np.ndarray:
    x = np.empty((chains, n))
    x[:, 0] = rng.normal(size=chains)
    e = rng.normal(scale=np.sqrt(1 - rho**2), size=(chains, n))
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + e[:, t]
    return x


def test_many_short_mixing_chains_are_not_called_unconverged() -> None:
    """16 chains x 333 draws of one AR(1) law (about 65 effective draws each, as in the demo): R-hat is
    above 1.01 by chance alone, the chains' means agree, so no R-hat warning."""
    import arviz as az

    rng = np.random.default_rng(3)
    draws = np.stack([_ar1(rng, 16, 333, 0.67) for _ in range(3)], axis=-1)
    rhat = az.rhat(az.convert_to_dataset(draws)).to_array().values
    assert rhat.max() > 1.01  # R-hat alone would have warned
    assert not [w for w in convergence_warnings(draws, ("a", "b", "c"), 300, 1000, 1000) if "R-hat" in w]


def test_the_chains_agreement_test_holds_its_level() -> None:
    """Under one law the p-values are about uniform: at most 10 % of 300 replicates below 0.05 (the rate is
    0.05 up to the per-chain ESS estimates' error; a false failure is < 1e-4 at a true rate of 0.05)."""
    rng = np.random.default_rng(4)
    ps = np.array([chains_agree_p(_ar1(rng, 8, 200, 0.5)) for _ in range(300)])
    assert 0.01 <= float(np.mean(ps < 0.05)) <= 0.1
    shifted = _ar1(rng, 8, 200, 0.5)
    shifted[0] += 1.0
    assert chains_agree_p(shifted) < 1e-4


def test_under_a_budget_the_advice_prices_more_effective_draws() -> None:
    """Issue 40 item 4: with every decision charged, "more iterations" spends more epsilon: the advice is
    what the wanted effective draws would cost (the factor handed to the budget's pricing), not a free fix."""
    rng = np.random.default_rng(2)
    sticky = np.cumsum(rng.normal(size=(4, 60, 2)), axis=1) * 0.05 + rng.normal(size=(4, 1, 2))
    asked: list[float] = []

    def price(factor: float) -> str:
        asked.append(factor)
        return f"target_epsilon >= {10 * factor:.3g}"

    plain = convergence_warnings(sticky, ("a", "b"), 100, 240, 240)
    budgeted = convergence_warnings(sticky, ("a", "b"), 100, 240, 240, more=price)
    assert any("more [sampler] iterations" in w for w in plain)
    assert not any("more [sampler] iterations" in w for w in budgeted)
    assert any("target_epsilon >= " in w for w in budgeted) and asked and min(asked) > 1.0


def test_a_plan_prices_a_scaled_run_at_its_own_rate() -> None:
    """McmcPlan.eps_scaled: the warm start once, the decisions' charge times the factor (GDP: mu^2 adds)."""
    from mechanisms.planning import PlanBudget, ProposalStatistics, plan_mcmc
    from mechanisms.privacy.conversions import gdp_eps

    stats = ProposalStatistics(0.02, 0.3, 0.95, 0.6, 0.999, 0.15)
    p = plan_mcmc(
        stats, PlanBudget(eps=12.0, delta=1e-5, mu_warm=1.0), sd_total=2.0, m=7, residual=7, chains=16
    )
    assert abs(p.eps_scaled(1.0) - p.eps) < 1e-9
    want = gdp_eps(np.sqrt(1.0 + 3.0 * (p.mu_total**2 - 1.0)), 1e-5)
    assert abs(p.eps_scaled(3.0) - want) < 1e-9
