"""A planned blocked run (issue 40: a registry random intercept with ``[privacy] target_epsilon``): the plan
chooses the accountable blocked settings (shared penalty sd and cap, the local steps' noise and cap) and the
sweeps, each sweep priced by the registries' own charge (``mechanisms.planning_blocked``); `confar run
--check` plans it as the run does, and `confar privacy plan` prints it or refuses with the target that would
buy min_ess (and planning at that target buys it). Before this, target_epsilon with (1 | registry) was
refused (it needed the Laplace proposal, which the blocked sampler does not use). No registry is contacted
here: the run over daemon processes, its outputs and its ledgers against the plan, is
tests/network/test_blocked_planned.py (which imports this file's set-up)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError

EXPERIMENT = """
[experiment]
name = "blocked-planned"
output_dir = "out"
seed = 36

[model]
formula = "y ~ x + (1 | registry)"
family = "bernoulli"
columns = {{ y = {{ values = [0, 1] }}, x = [-2, 2], registry = {{ values = [1, 2, 3] }} }}

[sampler]
kind = "penalty"
chains = 4
iterations = {iterations}
{sampler}
[reveal]
mode = "{mode}"

[privacy]
target_epsilon = {eps}
delta = 1e-5
min_ess = {min_ess}
{privacy}
[simulate]
data = ["r1.csv", "r2.csv", "r3.csv"]
party_epsilon = {eps}
party_delta = 1e-5
party_neighbours = "add-remove"
party_colluding = 0
{extra}"""

PLANNED_EPS = 250.0  # the file's test
# the run's test: the plan buys 600 sweeps whose simulated chains mixed (R-hat <= 1.05) at eps 900; the
# settings given (the plan chooses the cap) and reveal sum (one round a decision; the blocked charge is the
# same in every mode) keep it to about a minute
RUN_EPS, RUN_SWEEPS = 900.0, 600
RUN = "sd = 2.0\nlocal_sd = 2.4\nlocal_max_step = 0.5\n"


def _write(
    tmp_path: Path,
    eps: float,
    iterations: int = 60,
    privacy: str = "",
    extra: str = "",
    sampler: str = "",
    min_ess: float = 3,
    mode: str = "sign",
) -> Path:
    rng = np.random.default_rng(3)
    for j, n in enumerate((300, 200, 100)):
        x = rng.uniform(-2, 2, n)
        y = (rng.random(n) < 1 / (1 + np.exp(-(-0.5 + 0.8 * x + 0.4 * (j - 1))))).astype(int)
        rows = ["y,x,registry", *(f"{a},{b:.6f},{j + 1}" for a, b in zip(y, x, strict=True))]
        (tmp_path / f"r{j + 1}.csv").write_text("\n".join(rows) + "\n")
    cfg = tmp_path / "exp.toml"
    text = EXPERIMENT.format(
        eps=eps, iterations=iterations, privacy=privacy, extra=extra, sampler=sampler, min_ess=min_ess,
        mode=mode,
    )
    cfg.write_text(text)
    return cfg


def _spend(text: str) -> float:
    found = re.search(r"eps = ([0-9.e+]+) at delta = 1e-05\n", text)
    assert found, text
    return float(found.group(1))


@pytest.mark.slow  # the check makes the run's plan: its simulated sweeps
def test_the_file_is_a_planned_blocked_run_and_refuses_what_the_plan_cannot_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main

    cfg = _write(tmp_path, RUN_EPS, RUN_SWEEPS, sampler=RUN, min_ess=20, mode="sum")
    assert main(["run", str(cfg), "--check", "--simulate"]) == 0
    out = capsys.readouterr().out
    assert "plan from the pilot" in out and "blocked: 4 chains x" in out  # checked as the run plans it
    assert _spend(out) <= RUN_EPS
    exp = load_experiment(_write(tmp_path, PLANNED_EPS))
    assert exp.sampler.blocked and exp.budget_target is not None and exp.budget_target.choose_cap
    assert set(exp.sampler.chosen) == {"sd", "local_sd", "local_max_step"}
    with pytest.raises(ExperimentError, match=r"privacy\.accountant.*Gaussian events"):
        load_experiment(_write(tmp_path, PLANNED_EPS, privacy='accountant = "renyi"', extra=""))
    with pytest.raises(ExperimentError, match=r"warm_start.*no warm start"):
        load_experiment(_write(tmp_path, PLANNED_EPS, extra="\n[warm_start]\nmu = 1.0\n"))


@pytest.mark.slow
def test_privacy_plan_refuses_a_small_budget_with_advice_that_buys_min_ess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main

    rc = main(["privacy", "plan", str(_write(tmp_path, 20.0, iterations=200, sampler=RUN, min_ess=20))])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "eps = 20: blocked: 4 chains x 0 sweeps" in out and "REFUSED (min_ess = 20)" in out
    assert "shared penalty sd = 2 (cap" in out and "local_max_step = 0.5" in out  # the file's settings
    fit = r"It would fit with target_epsilon >= ([0-9.e+]+)(?: and \[sampler\] iterations >= (\d+))?"
    advice = re.search(fit, out)
    assert advice, out
    eps, iterations = float(advice.group(1)), int(advice.group(2) or 200)
    assert eps > 20.0
    # planning at the advised target (and iterations) buys min_ess, and spends no more than that target
    rc = main(["privacy", "plan", str(_write(tmp_path, eps, iterations, sampler=RUN, min_ess=20))])
    out = capsys.readouterr().out
    assert rc == 0, out
    line = next(x for x in out.splitlines() if x.startswith(f"  eps = {eps:g}: blocked:"))
    assert line.endswith("-> usable"), out
    assert float(re.findall(r"eps = ([0-9.e+]+) at delta", line)[-1]) <= eps
    assert int(re.search(r"expected ESS (\d+)", line).group(1)) >= 20  # type: ignore[union-attr]
