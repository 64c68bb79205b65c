"""The Python API (coordinator.study; issue 24 items 2 and 10): settings changed with the file's own
validation and recorded as run, a run from inside a running event loop (a notebook cell), InferenceData with
the prior and the public constants, each registry's privacy statement."""

from __future__ import annotations

import asyncio
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest

from coordinator import study
from coordinator.outcome import summary_text
from coordinator.tables import ExperimentError

# on the daemon tests' worker (tests/network/conftest.py): its fits start a consortium of daemon processes
pytestmark = pytest.mark.xdist_group("daemons")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = {
    "sampler.chains": 4,
    "sampler.iterations": 60,
    "sampler.warmup": 20,
    "simulate.records": [400, 300, 500],
}


def test_settings_are_validated_and_keep_the_file_s_comments() -> None:
    settings = {"sampler.iterations": 77, "sampler.warmup": 7, "model.params.p": 3}
    exp = study.load(EXAMPLES / "mh.toml", settings)
    assert exp.sampler.iterations == 77 and exp.model_params["p"] == 3
    assert "# confar certs init" in exp.text  # the file's comments kept
    assert tomllib.loads(exp.text)["sampler"]["iterations"] == 77
    with pytest.raises(ExperimentError, match=r"sampler\.iterations"):
        study.change(exp, {"sampler.iterations": -5})
    with pytest.raises(ExperimentError, match=r"sampler\.foo"):
        study.change(exp, {"sampler.foo": 1})
    with pytest.raises(ExperimentError, match=r"table\.key"):
        study.change(exp, {"iterations": 1})
    with pytest.raises(ExperimentError, match="a value, not a table"):
        study.change(exp, {"sampler.iterations.x": 1})


@pytest.mark.slow
def test_fit_inside_a_running_event_loop_records_what_ran(tmp_path: Path) -> None:
    exp = study.load(EXAMPLES / "penalty.toml", SMALL)

    async def cell() -> study.Fit:  # what a Jupyter cell is: code inside a running loop
        return study.fit(exp, simulate=True, out=tmp_path / "run", overwrite=True)

    fit = asyncio.run(cell())
    post = fit.idata.posterior
    assert (post.sizes["chain"], post.sizes["draw"]) == (4, 40)
    assert {"posterior", "sample_stats", "prior", "constant_data"} <= set(fit.idata.groups())
    assert fit.idata.prior.sizes["draw"] == 40
    np.testing.assert_array_equal(fit.idata.constant_data["registry_records"].values, [400, 300, 500])
    assert "absent by design" in fit.idata.attrs["private_groups"]
    assert sorted(fit.privacy) == ["party-1", "party-2", "party-3"]
    assert all(p["epsilon"] is not None and p["epsilon"] > 0 and p["statement"] for p in fit.privacy.values())
    # one statement, byte for byte: the JSON's, the API's, its repr's and the lines `confar run` prints
    printed = summary_text(fit.outcome).splitlines()  # what `confar run` prints at the end (run.py)
    shown = repr(fit).splitlines()
    for name, p in fit.privacy.items():
        doc = json.loads((tmp_path / "run" / "privacy" / f"{name}.json").read_text())
        assert p["statement"] == doc["statement"] and p["readings"] == doc["other_readings"]
        block = [f"  {name}: {doc['statement']}", *(f"    beside it, {r}" for r in doc["other_readings"])]
        for lines in (printed, shown):
            at = lines.index(block[0])
            assert lines[at : at + len(block)] == block
        # epsilon is the registry's own accountant's (penalty.toml: an eps-at-delta budget, PLD), as stated
        assert p["accountant"] == "pld"
        own = f"epsilon = {p['epsilon']:.4g} at delta = 1e-05 by its PLD accountant, "
        assert doc["statement"].startswith(own)
        assert ", replace-one neighbours, " in doc["statement"]  # the daemons' default relation
        qs = {int(e["label"].split("assumes q = ")[1].split()[0]) for e in doc["reported_by_party"]["events"]}
        assert qs == {1} and doc["threat_model"] == "against the coordinator and q = 1 colluding registries"
    # the run folder records the settings that ran, not the file's
    recorded = tomllib.loads((tmp_path / "run" / "experiment.toml").read_text())
    assert recorded["sampler"]["iterations"] == 60 and recorded["sampler"]["chains"] == 4
    assert recorded["experiment"]["output_dir"] == str(tmp_path / "run")
    prov = json.loads((tmp_path / "run" / "provenance.json").read_text())
    assert tomllib.loads(prov["config_text"])["sampler"]["iterations"] == 60
    assert "4 chains x 40 draws" in repr(fit)


def test_fit_without_a_simulation_table_says_how_to_add_one(tmp_path: Path) -> None:
    text = (EXAMPLES / "mh.toml").read_text()
    path = tmp_path / "exp.toml"
    path.write_text(text[: text.index("[simulate]")].replace('"certs/', f'"{EXAMPLES}/certs/'))
    exp = study.load(path)
    with pytest.raises(ExperimentError, match=r"\[simulate\]"):
        study.fit(exp, simulate=True, out=tmp_path)


@pytest.mark.slow
def test_a_run_stopped_in_its_warm_up_raises_run_stopped_with_what_there_is(tmp_path: Path) -> None:
    """Issue 40: registries whose budgets (eps = 10) run out in the warm-up (about 9 of its 20 batches fit)
    and ``[privacy] stop_at_budget = true``: ``fit`` raises ``RunStopped`` saying there is no posterior and
    why, with the warm-up's draws and each registry's statement (it used to raise ``draws: every axis ...
    must be >= 1``, writing nothing)."""
    exp = study.load(
        EXAMPLES / "penalty.toml", SMALL | {"simulate.party_epsilon": 10.0, "privacy.stop_at_budget": True}
    )
    with pytest.raises(study.RunStopped) as ei:
        study.fit(exp, simulate=True, out=tmp_path / "run", overwrite=True)
    err = ei.value
    msg = str(err)
    assert "stopped before any draw after its warm-up, so there is no posterior" in msg
    assert "privacy budget ran out at batch" in msg and "in the warm-up (20 iterations)" in msg
    assert err.warmup is not None and "posterior" not in err.warmup.groups()
    chains, w = err.warmup.warmup_posterior.sizes["chain"], err.warmup.warmup_posterior.sizes["draw"]
    assert chains == 4 and 1 <= w < 20
    assert sorted(err.privacy) == ["party-1", "party-2", "party-3"]
    assert all(p["epsilon"] is not None and p["epsilon"] <= 10.0 for p in err.privacy.values())
    assert (err.out_dir / "warmup.nc").exists() and not (err.out_dir / "posterior.nc").exists()
    assert err.outcome.stopped and not err.outcome.finished


@pytest.mark.slow
def test_a_run_stopped_after_its_warm_up_returns_a_fit_that_says_so(tmp_path: Path) -> None:
    """The same with budgets (eps = 25) that run out after the warm-up (about 39 of 60 batches fit): a fit
    of the draws made, ``fit.stopped`` saying why, the summary opening with it."""
    exp = study.load(
        EXAMPLES / "penalty.toml", SMALL | {"simulate.party_epsilon": 25.0, "privacy.stop_at_budget": True}
    )
    fit = study.fit(exp, simulate=True, out=tmp_path / "run", overwrite=True)
    post = fit.idata.posterior
    assert post.sizes["chain"] == 4 and 1 <= post.sizes["draw"] < 40
    assert fit.stopped.startswith("a registry's privacy budget ran out at batch")
    assert fit.stopped in fit.warnings
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert summary.startswith(f"STOPPED EARLY: {fit.stopped}")
    assert not (tmp_path / "run" / "warmup.nc").exists()
