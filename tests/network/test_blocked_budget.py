"""`confar run --simulate` of a registry random intercept under the registries' privacy budgets (issue 36,
for issue 40's studies): kind penalty with sd and the noisy local steps (``local_sd``, ``local_max_step``)
is sampled in blocks, every registry's ledger charges each sweep (the shared decisions and its own local
steps, docs/PRIVACY.md "Blocked sampling under a budget") within its budget, and the end-of-run release of
the effect draws is stated in each ledger at mu = 0 (a post-processing of the charged sweeps); the
posterior holds every registry's effect. The file's keys are refused where they do not apply."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError

CHAINS, ITERATIONS = 4, 40
LOCAL_SD, LOCAL_STEP, LOCAL_STEPS = 1.0, 0.05, 2
SD, CAP = 2.0, 0.3
BUDGET = 6.0

EXPERIMENT = f"""
[experiment]
name = "blocked-budget"
output_dir = "out"
seed = 36

[model]
formula = "y ~ x + (1 | registry)"
family = "bernoulli"
columns = {{ y = {{ values = [0, 1] }}, x = [-2, 2], registry = {{ values = [1, 2, 3] }} }}

[sampler]
kind = "penalty"
chains = {CHAINS}
iterations = {ITERATIONS}
sd = {SD}
max_sensitivity = {CAP}
local_sd = {LOCAL_SD}
local_max_step = {LOCAL_STEP}
local_steps = {LOCAL_STEPS}
{{extra}}
[reveal]
mode = "sign"

[simulate]
data = ["r1.csv", "r2.csv", "r3.csv"]
party_gdp_mu = {BUDGET}
"""


def _write(tmp_path: Path, extra: str = "") -> Path:
    rng = np.random.default_rng(3)
    for j, n in enumerate((300, 200, 100)):
        x = rng.uniform(-2, 2, n)
        y = (rng.random(n) < 1 / (1 + np.exp(-(-0.5 + 0.8 * x + 0.4 * (j - 1))))).astype(int)
        rows = ["y,x,registry", *(f"{a},{b:.6f},{j + 1}" for a, b in zip(y, x, strict=True))]
        (tmp_path / f"r{j + 1}.csv").write_text("\n".join(rows) + "\n")
    cfg = tmp_path / "exp.toml"
    cfg.write_text(EXPERIMENT.replace("{extra}", extra))
    return cfg


def test_the_file_asks_for_the_accountable_blocked_plan(tmp_path: Path) -> None:
    exp = load_experiment(_write(tmp_path))
    assert exp.sampler.blocked
    plan = exp.session_params()
    assert plan["blocked"] == {
        "steps": LOCAL_STEPS, "adapt_until": exp.sampler.adapt_stop, "target_accept": 0.44,
        "parameterisation": "centred", "choose_every": 10, "sd": LOCAL_SD, "max_step": LOCAL_STEP,
    }  # fmt: skip
    assert plan["penalty"]["sd"] == pytest.approx(SD / np.sqrt(3))
    assert plan["penalty"]["max_sensitivity"] == CAP
    cfg = _write(tmp_path)
    cfg.write_text(cfg.read_text().replace(f"local_max_step = {LOCAL_STEP}\n", ""))
    with pytest.raises(ExperimentError, match=r"sampler\.local_max_step.*missing"):
        load_experiment(cfg)
    with pytest.raises(ExperimentError, match=r"sampler\.local_max_step: sets the noisy local steps"):
        load_experiment(_write(tmp_path, "blocked = false\n"))


@pytest.mark.slow
def test_a_blocked_run_under_budgets_is_charged_and_releases_its_effects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main

    cfg = _write(tmp_path)
    rc = main(["run", str(cfg), "--simulate", "--no-progress", "--no-reference"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    # the statement names the release for what it is: the draws in the clear, not noisy sums
    said = "released: accept bits (reveal sign), its random effect's draws in the clear (reveal sum; "
    assert captured.out.count(said) + captured.err.count(said) >= 3, captured.out + captured.err
    out = tmp_path / "out"
    for pid in (1, 2, 3):
        doc = json.loads((out / "simulation" / f"party-{pid}" / "state" / "privacy_ledger.json").read_text())
        events = doc["ledger"]["events"]
        shared = [e for e in events if "shared block" in e["label"]]
        local = [e for e in events if "own effect" in e["label"]]
        stated = [e for e in events if "effects release of run" in e["label"]]
        assert sum(e["count"] for e in shared) == sum(e["count"] for e in local) == ITERATIONS
        assert len(stated) == 1 and stated[0]["mu"] == 0.0
        # the local steps at the cap: each sweep chains x steps x (2 h / sd_loc)^2 (replace-one, bernoulli)
        local_mu2 = CHAINS * LOCAL_STEPS * (2 * LOCAL_STEP / LOCAL_SD) ** 2
        assert all(e["mu"] == pytest.approx(np.sqrt(local_mu2)) for e in local)
        mu2 = sum(e["count"] * e["mu"] ** 2 for e in events)
        assert ITERATIONS * local_mu2 < mu2 <= BUDGET**2
    import arviz as az

    idata = az.from_netcdf(out / "posterior.nc")
    for name in ("Intercept", "x", "registry_log_sd", "registry_z1", "registry_z3"):
        assert name in idata.posterior and np.isfinite(idata.posterior[name].values).all()
