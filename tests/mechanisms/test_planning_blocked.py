"""The planned blocked run's arithmetic (mechanisms.planning_blocked, coordinator.planner): each sweep is
priced as the registries' dry run charges it (checked against the formula of docs/PRIVACY.md, "Planned
blocked runs", for both neighbour relations and coalitions), the sweeps bought never spend above the
target, an advised target rounds up, and the stand-in in the blocked coordinates keeps the registries'
effects independent given the shared block (as the model does)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from coordinator.experiment import load_experiment
from coordinator.planner import blocked_sweep_charge, pilot
from mechanisms.models.hierarchy import SharedModel
from mechanisms.planning_blocked import BlockedSettings, StandIn, bought_sweeps, round_up
from mechanisms.privacy.conversions import gdp_eps

EXPERIMENT = """
[experiment]
name = "blocked-plan-arithmetic"
output_dir = "out"
seed = 36

[model]
formula = "y ~ x + (1 | registry)"
family = "bernoulli"
columns = {{ y = {{ values = [0, 1] }}, x = [-2, 2], registry = {{ values = [1, 2, 3] }} }}

[sampler]
kind = "penalty"
chains = 4
iterations = 100

[reveal]
mode = "sign"

[privacy]
target_epsilon = 50
delta = 1e-5
neighbours = "{neighbours}"
colluding = {colluding}

[simulate]
records = [300, 200, 100]
"""


@pytest.mark.parametrize(("neighbours", "colluding"), [("add-remove", 0), ("replace-one", 2)])
def test_a_sweep_is_priced_as_the_formula_says(tmp_path: Path, neighbours: str, colluding: int) -> None:
    cfg = tmp_path / "exp.toml"
    cfg.write_text(EXPERIMENT.format(neighbours=neighbours, colluding=colluding))
    exp = load_experiment(cfg)
    st = BlockedSettings(sd_total=2.0, cap=0.7, local_sd=2.4, local_max_step=0.3, local_steps=3)
    m, r, chains = 3, 3 - colluding, 4
    k = 1.0 if neighbours == "add-remove" else 2.0  # bernoulli: a local step moves a record's term by k h
    shared = chains * (st.cap * math.sqrt(m) / (st.sd_total * math.sqrt(r))) ** 2  # every decision at the cap
    local = chains * st.local_steps * (k * st.local_max_step / st.local_sd) ** 2
    assert blocked_sweep_charge(exp, exp.model(), st) == pytest.approx(shared + local, rel=1e-9)


def test_the_sweeps_bought_never_spend_above_the_target() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        eps, mu2 = float(rng.uniform(0.5, 2000.0)), float(rng.uniform(1e-3, 50.0))
        k = bought_sweeps(eps, 1e-5, mu2, 10**9)
        assert k == 0 or gdp_eps(math.sqrt(k * mu2), 1e-5) <= eps
        assert gdp_eps(math.sqrt((k + 1) * mu2), 1e-5) > eps * (1 - 1e-9)  # and no more would fit
    assert bought_sweeps(1e6, 1e-5, 1.0, 37) == 37  # never past the file's iterations


def test_an_advised_target_is_rounded_up() -> None:
    for x in (380.6, 381.0, 0.012341, 1234567.0, 99.95, 7.0):
        up = round_up(x)
        assert up >= x and float(f"{up:.3g}") == up
        assert up - x < 10 ** (math.floor(math.log10(x)) - 2) * (1 + 1e-9)


def test_the_stand_in_keeps_the_effects_independent_given_the_shared_block(tmp_path: Path) -> None:
    cfg = tmp_path / "exp.toml"
    cfg.write_text(EXPERIMENT.format(neighbours="add-remove", colluding=0))
    exp = load_experiment(cfg)
    model = exp.model()
    lap = pilot(exp, model).laplace
    shared = SharedModel(model)
    stand = StandIn.from_laplace(shared, lap.mean, lap.cov)
    assert stand.ds == shared.d and stand.m == 3
    prec = np.linalg.inv(stand.cov)[stand.ds :, stand.ds :]
    off = prec - np.diag(np.diag(prec))
    assert np.abs(off).max() <= 1e-6 * np.abs(np.diag(prec)).max()
    # v_j = beta_0 + sigma_u z_j at the approximation's mean
    z = lap.mean[list(shared.hierarchy.z)]
    sigma = math.exp(lap.mean[shared.hierarchy.log_sd])
    assert np.allclose(stand.mean[stand.ds :], lap.mean[0] + sigma * z)
