"""The registry-scale figure's realised-ESS mode (issue 35 item 7): the default sampler run until its
realised bulk ESS reaches the target, charged per run at the worst record as its registries charge it, and
the row's columns consistent with each other (ε over the floor, the floor never above ε, the ESS reached or
flagged)."""

from __future__ import annotations

import math

import pytest

from mechanisms.privacy import GaussianEvent, RDPBudget
from mechanisms.privacy.renyi import ORDERS, budget_order, rdp_eps
from simulations.registry_scale import DELTA, filter_eps, main, realised_row


@pytest.mark.slow
def test_a_realised_row_is_consistent_at_a_tiny_size() -> None:
    row = realised_row("logistic", 2000, 3, 60.0, max_iterations=400)
    eps, floor = row["eps_renyi"], row["eps_floor"]
    assert math.isfinite(eps) and math.isfinite(floor) and floor > 0
    assert row["floor_ratio"] == pytest.approx(eps / floor, rel=1e-12)
    assert row["floor_ratio"] >= 1.0  # below 1 the floor or the charge would be wrong
    assert row["ess_reached"] == (row["mcmc_ess"] >= 60.0)
    assert row["ess_reached"] or row["iterations"] == 400  # short only when the cap stopped it
    assert row["eps_floor_target"] <= floor * (1 + 1e-12) or not row["ess_reached"]  # the floor grows with k
    assert row["renyi_order"] == budget_order(eps, DELTA)  # the order a registry with that budget fixes
    # charged per run at the worst record: never more than the same decisions per decision
    assert 0 < row["worst_record_ratio_renyi"] <= 1.0 + 1e-12
    assert row["decisions"] > 0 and row["iterations"] > row["warmup"]
    assert row["better"] in ("exact chain", "DP approximation")
    exact = max(row["mcmc_mean_err"], row["mcmc_quantile_err"])
    approx = max(row["laplace_mean_err"], row["laplace_quantile_err"])
    assert (row["better"] == "exact chain") == (exact < approx)
    assert math.isnan(row["eps_conventional_delta"])  # 1/(10 x 540 records) is above 1e-5: not stated
    # the ratio split into the Renyi conversion's factor and the sampler's
    assert row["conversion_factor"] * row["sampler_factor"] == pytest.approx(row["floor_ratio"], rel=1e-9)
    assert row["conversion_factor"] >= 1.0 - 1e-9  # the exact GDP conversion is the tightest for a Gaussian
    assert row["rho_ratio"] > 0 and row["rho_warmup"] <= row["rho_run"]


def test_filter_eps_is_a_budget_the_filter_admits_and_no_smaller_candidate_is() -> None:
    events = [GaussianEvent(0.8, label="warm start"), GaussianEvent(0.3, count=40, label="decisions")]
    eps, alpha = filter_eps(events, DELTA)
    assert alpha == budget_order(eps, DELTA)
    assert RDPBudget(eps, DELTA, alpha).spend(events) <= eps * (1 + 1e-12)
    mu2 = 0.8**2 + 40 * 0.3**2  # Gaussian events: rho = alpha mu^2 / 2 at every order
    best = min(rdp_eps(a * mu2 / 2, a, DELTA) for a in ORDERS)
    assert eps >= best * (1 - 1e-12)  # no budget below the best order's conversion is admissible
    assert eps <= best * 1.05  # and the filter's fixed order is close to the best one for a Gaussian


def test_a_model_not_run_gets_a_row_that_says_why(tmp_path: pytest.TempPathFactory) -> None:
    out = tmp_path / "fig"  # type: ignore[operator]
    argv = ["--out", str(out), "--realised-ess", "400", "--models", "random-intercept", "--sizes", "10000"]
    assert main(argv) == 0
    text = (out / "realised_ess400.csv").read_text(encoding="utf-8")
    assert "random-intercept" in text and "blocked sampler" in text
    assert (out / "realised_ess400.png").exists()
