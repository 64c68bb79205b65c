"""A consortium's own model (issue 14), the coordinator's side: a plug-in folder on the coordinator's import
path (``[model] path``), and ``confar run --check --simulate`` that imports the model and evaluates it on the
model's synthetic data or on per-registry files, before any daemon starts. The registry's side
(``confar-party check-config``) is tests/parties/test_plugin_workflow.py; one place for the model's public
arguments and a run with a plug-in over daemon processes are tests/network/test_plugin_workflow.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli import main as confar
from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError
from simulations.launcher import write_csv
from simulations.run_local import synthetic_data

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "examples" / "plugins"

BROKEN = '''
from dataclasses import dataclass

import numpy as np

from mechanisms.models import Column, Model, as_batch


@dataclass(frozen=True)
class NoSynthetic(Model):
    """A valid model without synthetic_data."""

    name = "no-synthetic"

    @property
    def param_names(self):
        return ("mu",)

    @property
    def schema(self):
        return (Column("x", -10.0, 10.0),)

    def log_prior(self, theta):
        return -0.5 * np.sum(as_batch(theta, 1) ** 2, axis=1)

    def sample_prior(self, rng, n):
        return rng.normal(size=(n, 1))

    def record_log_likelihood(self, data, theta):
        return -0.5 * (data["x"][None, :] - as_batch(theta, 1)) ** 2

    def max_log_likelihood(self, data):
        return 0.0


@dataclass(frozen=True)
class BadPrior(NoSynthetic):
    """sample_prior returns the wrong shape."""

    def sample_prior(self, rng, n):
        return rng.normal(size=n)


@dataclass(frozen=True)
class InfiniteLik(NoSynthetic):
    """log-likelihood -inf for records above 5 (a model bug check-config must catch)."""

    def record_log_likelihood(self, data, theta):
        ll = -0.5 * (data["x"][None, :] - as_batch(theta, 1)) ** 2
        return np.where(data["x"][None, :] > 5.0, -np.inf, ll)
'''


def experiment(tmp_path: Path, model: str, extra: str = "", params: str = "") -> Path:
    (tmp_path / "mymodels").mkdir(exist_ok=True)
    (tmp_path / "mymodels" / "broken_models.py").write_text(BROKEN)
    path = tmp_path / "exp.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [experiment]
            name = "t"
            output_dir = "out"
            seed = 3
            [model]
            name = "{model}"
            path = "mymodels"
            [model.params]
            {params}
            [sampler]
            kind = "mh"
            chains = 2
            iterations = 6
            warmup = 2
            proposal_scale = 0.1
            [reveal]
            mode = "sign"
            [simulate]
            parties = 3
            """
        )
        + textwrap.dedent(extra)
    )
    return path


def test_model_path_is_checked_and_used(tmp_path: Path) -> None:
    exp = load_experiment(experiment(tmp_path, "broken_models:NoSynthetic"))
    assert exp.model_path == ((tmp_path / "mymodels").resolve(),) or exp.model_path == (
        tmp_path / "mymodels",
    )
    assert exp.model().name == "no-synthetic"
    bad = experiment(tmp_path, "broken_models:NoSynthetic")
    bad.write_text(bad.read_text().replace('path = "mymodels"', 'path = "nothere"'))
    with pytest.raises(ExperimentError, match=r"model\.path: no such folder: .*nothere"):
        load_experiment(bad)
    missing = experiment(tmp_path, "not_a_module_anywhere:Model")
    with pytest.raises(
        ExperimentError, match=r"cannot import module 'not_a_module_anywhere'.*\[model\] path"
    ):
        load_experiment(missing)


def test_run_check_names_model_and_simulate_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a plug-in without synthetic_data: --check --simulate says why, naming both ways out
    cfg = experiment(tmp_path, "broken_models:NoSynthetic")
    assert confar(["run", str(cfg), "--check", "--simulate"]) == 2
    err = capsys.readouterr().err
    assert "defines no synthetic_data" in err and "[simulate] data" in err
    # a prior of the wrong shape is named with its key (before any data is made)
    assert confar(["run", str(experiment(tmp_path, "broken_models:BadPrior")), "--check", "--simulate"]) == 2
    assert "model.name: sample_prior(rng, 8) returned shape (8,), expected (8, 1)" in capsys.readouterr().err
    # per-registry files: read as the daemons read them; a bad row is refused naming the file's key
    files = []
    for i in range(3):
        f = tmp_path / f"r{i + 1}.csv"
        write_csv(f, {"x": np.linspace(-1.0, 1.0, 20) + i})
        files.append(f.name)
    extra = f"data = {files!r}\n".replace("'", '"')
    cfg = experiment(tmp_path, "broken_models:NoSynthetic", extra=extra)
    assert confar(["run", str(cfg), "--check", "--simulate"]) == 0
    assert "3 registries' records fit the model, log-likelihood finite" in capsys.readouterr().out
    exp = load_experiment(cfg)
    got = synthetic_data(exp)
    assert [len(d["x"]) for d in got] == [20, 20, 20]
    np.testing.assert_array_equal(got[2]["x"], np.linspace(-1.0, 1.0, 20) + 2)
    write_csv(tmp_path / "r2.csv", {"x": np.r_[np.zeros(5), 11.0]})  # outside the public bounds [-10, 10]
    assert confar(["run", str(cfg), "--check", "--simulate"]) == 2
    err = capsys.readouterr().err
    assert "simulate.data[1]" in err and "row 6" in err and "11" not in err.split("row 6")[1][:40]
    # a log-likelihood that is not finite on the records is caught before any daemon starts
    write_csv(tmp_path / "r2.csv", {"x": np.r_[np.zeros(2), 6.0]})
    cfg = experiment(tmp_path, "broken_models:InfiniteLik", extra=extra)
    assert confar(["run", str(cfg), "--check", "--simulate"]) == 2
    assert "registry 2's records: record_log_likelihood is not finite at prior draws in row 3" in (
        capsys.readouterr().err
    )
    # keys checked at load: one file per party, no records count beside them, files must exist
    for bad, key in (
        ('data = ["r1.csv"]\n', "simulate.data: needs one file per party"),
        ('data = ["r1.csv", "r2.csv", "zz.csv"]\n', r"simulate.data\[2\]: no such file"),
        (extra + "records = 10\n", "simulate.records: not with simulate.data"),
    ):
        with pytest.raises(ExperimentError, match=key):
            load_experiment(experiment(tmp_path, "broken_models:NoSynthetic", extra=bad))
