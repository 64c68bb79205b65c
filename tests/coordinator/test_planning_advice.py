"""What a refused plan advises (issues 35 and 40): the target it names buys the ESS it was refused for (the
advice is self-consistent, also when the budget bought no decision), a warm start that alone spends the
target is named as the cause, and no plan states a spend above its target."""

from __future__ import annotations

import types

import pytest

from coordinator.planner import BudgetTarget, PlanRefused, check_usable
from mechanisms.planning import PlanBudget, ProposalStatistics, plan_mcmc

STATS = ProposalStatistics(
    mean_delta2=0.02, acceptance=0.3, asked=0.95, cap=0.6, c_quantile=0.999, ess_per_proposal=0.15
)


def _plan(eps: float, mu_warm: float = 1.0, alpha: float | None = None):  # type: ignore[no-untyped-def]
    stats = STATS if alpha is None else ProposalStatistics(**{**STATS.__dict__, "mean_rho": 0.01})
    return plan_mcmc(
        stats, PlanBudget(eps=eps, delta=1e-5, mu_warm=mu_warm, alpha=alpha),
        sd_total=2.0, m=7, residual=7, chains=16,
    )  # fmt: skip


@pytest.mark.parametrize("alpha", [None, 4.0])
@pytest.mark.parametrize("ess", [100.0, 400.0])
def test_advised_target_buys_the_ess(alpha: float | None, ess: float) -> None:
    """From a plan that bought nothing (the target barely above the warm start) and from one that bought
    a little, the advised target is one at which the plan buys the ESS (within one iteration's worth)."""
    for eps in (4.6, 6.0):
        p = _plan(eps, alpha=alpha)
        need = p.eps_for_ess(ess)
        again = _plan(need, alpha=alpha)
        assert again.ess >= ess - 16 * STATS.ess_per_proposal * 1.01, (eps, need, again.ess)
        assert _plan(need * 0.97, alpha=alpha).ess < ess  # and it is not far above what is needed


def test_no_plan_states_a_spend_above_its_target() -> None:
    for eps in (1.0, 3.0, 4.38, 5.0, 18.0):
        p = _plan(eps)
        if p.warm_alone:
            assert p.iterations == 0
        else:
            assert p.eps <= eps * (1 + 1e-9)


def _exp(eps: float, min_ess: float = 400.0) -> types.SimpleNamespace:
    return types.SimpleNamespace(budget_target=BudgetTarget(epsilon=eps, delta=1e-5, min_ess=min_ess))


def test_refusal_names_the_warm_start_when_it_alone_spends_the_target() -> None:
    p = _plan(3.0)  # mu_warm = 1 alone is eps 4.38 at delta 1e-5
    assert p.warm_alone
    with pytest.raises(PlanRefused) as err:
        check_usable(_exp(3.0), p, "offline plan")  # type: ignore[arg-type]
    msg = str(err.value)
    assert "warm start alone" in msg and "eps = 4.38" in msg and "x the records" not in msg
    need = float(msg.split("target_epsilon >= ")[1].split(" ")[0])
    assert _plan(need).ess >= 400 - 16 * STATS.ess_per_proposal * 1.01


def test_refusal_of_a_small_budget_gives_a_finite_record_factor() -> None:
    p = _plan(4.6)
    assert not p.warm_alone and p.ess < 400
    with pytest.raises(PlanRefused) as err:
        check_usable(_exp(4.6), p, "offline plan")  # type: ignore[arg-type]
    msg = str(err.value)
    factor = float(msg.split("about ")[1].split("x the records")[0])
    assert 1.0 < factor < 1e4
