"""A planned blocked run (issue 40: a registry random intercept with ``[privacy] target_epsilon``) over
registry daemons in processes: `confar run --simulate` runs the plan's sweeps to outputs and privacy reports
with every registry's ledger at or below the planned epsilon. The file's checks and `confar privacy plan`'s
refusal and advice, which contact no registry, are tests/coordinator/test_blocked_planned.py (its set-up is
imported here). Small data and few sweeps: the plan's own simulations and the run take seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.coordinator.test_blocked_planned import RUN, RUN_EPS, RUN_SWEEPS, _spend, _write


@pytest.mark.slow
def test_a_planned_blocked_run_writes_outputs_and_privacy_reports_within_its_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coordinator.cli import main

    cfg = _write(tmp_path, RUN_EPS, RUN_SWEEPS, sampler=RUN, min_ess=20, mode="sum")
    rc = main(["run", str(cfg), "--simulate", "--no-progress", "--no-reference"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    plan_line = next(x for x in captured.err.splitlines() if "plan from the pilot" in x)
    assert "blocked: 4 chains x" in plan_line
    planned = _spend(plan_line + "\n")
    assert planned <= RUN_EPS
    sweeps = int(re.search(r"4 chains x (\d+) sweeps", plan_line).group(1))  # type: ignore[union-attr]
    # what eps 900 buys at the chosen cap (the file's 600 at most): 584-600 as the shared kernel's cap moves
    assert 0.9 * RUN_SWEEPS <= sweeps <= RUN_SWEEPS, plan_line
    assert "R-hat 1.0" in plan_line, plan_line  # the run planned: mixed in the simulation
    out = tmp_path / "out"
    assert (out / "posterior.nc").exists() and (out / "summary.csv").exists()
    for pid in (1, 2, 3):
        assert (out / "privacy" / f"party-{pid}.json").exists()
        doc = json.loads((out / "simulation" / f"party-{pid}" / "state" / "privacy_ledger.json").read_text())
        events = doc["ledger"]["events"]
        shared = [e for e in events if "shared block" in e["label"]]
        assert sum(e["count"] for e in shared) == sweeps  # every planned sweep charged
        from mechanisms.privacy.conversions import gdp_eps

        mu = float(np.sqrt(sum(e["count"] * e["mu"] ** 2 for e in events)))
        assert gdp_eps(mu, 1e-5) <= planned * (1 + 1e-9)  # the ledger ends at or below the plan
