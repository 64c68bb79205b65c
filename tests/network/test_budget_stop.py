"""`confar run --simulate` over daemon processes whose privacy budgets are too small for the run (issue 40).

An unplanned run charged per decision (penalty with sd, a DP warm start, no ``[privacy] target_epsilon``)
whose dry run at the cap passes the registries' budgets is refused before anything is released: exit code
1, the registry and its figures named, the fixes said, no warm start released, nothing charged. The same
run with ``[privacy] stop_at_budget = true`` is told where it may stop, releases its warm start, and stops in
its warm-up when a registry refuses a batch: exit code 3, and the run folder holds what there is — each
registry's privacy report, the provenance, a summary saying there is no posterior and why, and the warm-up's
draws labelled as warm-up (``warmup.nc``'s ``warmup_posterior``, ``warmup_draws.csv``), no ``posterior.nc``.
It used to be accepted and to exit 1 on ``draws: every axis ... got shape (8, 0, 3)``, writing nothing."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

CHAINS, ITERATIONS, WARMUP = 8, 200, 100
EXPERIMENT = f"""
[experiment]
name = "budget-stop"
output_dir = "out"
seed = 11

[model]
name = "bayes-logistic"
[model.params]
p = 2

[warm_start]
mu = 0.5
inflate = 1.1

[sampler]
kind = "penalty"
chains = {CHAINS}
iterations = {ITERATIONS}
warmup = {WARMUP}
proposal = "laplace"
sd = 2.0
max_sensitivity = 1.0

[reveal]
mode = "sign"

[simulate]
parties = 3
records = [1500, 1000, 1200]
party_gdp_mu = 2.0
party_neighbours = "add-remove"
party_colluding = 0
"""


def _ledger_events(out: Path, pid: int) -> list[dict[str, object]]:
    path = out / "simulation" / f"party-{pid}" / "state" / "privacy_ledger.json"
    if not path.exists():
        return []
    return list(json.loads(path.read_text())["ledger"]["events"])


def test_a_run_past_the_budgets_is_refused_or_stops_with_its_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main

    cfg = tmp_path / "exp.toml"
    cfg.write_text(EXPERIMENT)
    out = tmp_path / "out"

    # without stop_at_budget: refused before the warm start releases anything
    assert main(["run", str(cfg), "--simulate", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "does not fit the registries' privacy budgets" in err and "before the warm start" in err
    for pid in (1, 2, 3):
        assert f"party {pid} (party-{pid}): mu: spent 0 of 2; the whole run would reach" in err
    assert "target_epsilon" in err and "stop_at_budget = true" in err and "fewer iterations" in err
    assert not (out / "warm_start.json").exists()
    for pid in (1, 2, 3):
        assert _ledger_events(out, pid) == []  # nothing released, nothing charged

    # with it: told where it may stop, the warm start released, stopped in the warm-up, outputs written
    cfg.write_text(EXPERIMENT + "\n[privacy]\nstop_at_budget = true\n")
    rc = main(["run", str(cfg), "--simulate", "--no-progress", "--overwrite"])
    captured = capsys.readouterr()
    assert rc == 3, captured.err
    err = captured.err
    assert "privacy dry run: this run may stop at batch ~" in err and "that is in the warm-up" in err
    assert "STOPPED EARLY (exit code 3)" in err and "in the warm-up" in err
    assert "there are no draws after the warm-up" in err
    assert (out / "warm_start.json").exists()
    assert not (out / "posterior.nc").exists() and not (out / "draws.csv").exists()

    summary = (out / "summary.txt").read_text()
    assert summary.startswith("NO POSTERIOR: the run stopped early (a registry's privacy budget ran out")
    assert "they are NOT posterior draws" in summary

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import arviz as az

        idata = az.from_netcdf(out / "warmup.nc")
    assert "posterior" not in idata.groups() and "warmup_posterior" in idata.groups()
    warm = np.stack([idata.warmup_posterior[nm].values for nm in ("intercept", "b1", "b2")], axis=-1)
    chains, w, d = warm.shape
    assert chains == CHAINS and 1 <= w < WARMUP and d == 3
    assert idata.warmup_sample_stats["accepted"].shape == (CHAINS, w)
    with open(out / "warmup_draws.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["chain", "draw", "intercept", "b1", "b2"] and len(rows) == 1 + CHAINS * w
    np.testing.assert_array_equal(
        np.array([[float(v) for v in r[2:]] for r in rows[1:]]).reshape(CHAINS, w, 3), warm
    )
    assert f"it stopped after {w} warm-up iteration(s) per chain" in summary

    prov = json.loads((out / "provenance.json").read_text())
    assert prov["stopped"].startswith(f"a registry's privacy budget ran out at batch {w + 1} of {ITERATIONS}")
    assert {"summary.txt", "warmup.nc", "warmup_draws.csv"} <= set(prov["outputs"]["files_sha256"])
    for pid in (1, 2, 3):
        doc = json.loads((out / "privacy" / f"party-{pid}.json").read_text())
        assert doc["identity"] == f"party-{pid}" and "spent" in doc["statement"]
        events = _ledger_events(out, pid)
        warm_events = [e for e in events if "warm start" in str(e.get("label"))]
        assert sum(int(str(e.get("count", 1))) for e in warm_events) == 6  # the warm start's releases
        assert len(events) > len(warm_events)  # then the batches until the budget ran out
        assert doc["reported_by_party"]["spent"] <= 2.0 * (1 + 1e-9)  # the registry refused the batch past it
