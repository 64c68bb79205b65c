"""A consortium's own model, end to end (issue 14): a plug-in folder on the coordinator's and on every
daemon's import path, --simulate with the model's synthetic data or with per-registry files, ``confar run
--check`` and ``confar-party check-config`` that import the model and evaluate it on the data, and one place
for the model's public arguments."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import BlockingCoordinator, SessionError
from coordinator.cli import main as confar
from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from parties.cli import main as confar_party
from parties.config import ConfigError, load_config
from simulations.launcher import LocalConsortium, party_config_text, write_csv
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


def test_check_config_imports_allowed_models_and_evaluates_the_likelihood(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment(tmp_path, "broken_models:NoSynthetic")  # writes mymodels/
    pdir = tmp_path / "party-1"
    pdir.mkdir()
    write_csv(pdir / "data.csv", {"x": np.r_[np.zeros(3), 6.0, 1.0]})

    def party(models: str, data_model: str, path: str = '"../mymodels"') -> Path:
        text = party_config_text(1, 3, tmp_path, None, None, models=())
        text = text.replace("models = []", f"models = {models}\nmodel_path = [{path}]")
        cfg = pdir / "party.toml"
        cfg.write_text(text + f'\n[data]\npath = "data.csv"\nmodel = "{data_model}"\n')
        return cfg

    ok = party('["broken_models:NoSynthetic"]', "broken_models:NoSynthetic")
    assert confar_party(["check-config", "--config", str(ok), "--insecure"]) == 0
    out = capsys.readouterr().out
    assert "allow: analyses broken_models:NoSynthetic found" in out
    assert "model: broken_models:NoSynthetic: log-likelihood finite on 5 records at 3 prior draws" in out
    # an allowed model that does not import, a misspelled class: exit 2, the key named
    cfg = party('["broken_models:NoSynthetic", "broken_models:NoSuchClass"]', "broken_models:NoSynthetic")
    assert confar_party(["check-config", "--config", str(cfg), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "allow.models[1]:" in err and "has no class 'NoSuchClass'" in err
    # the log-likelihood is evaluated on the first records: row 4 gives -inf, its value is not shown
    cfg = party('["broken_models:InfiniteLik"]', "broken_models:InfiniteLik")
    assert confar_party(["check-config", "--config", str(cfg), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "data.model: record_log_likelihood is not finite at prior draws in row 4" in err
    assert "6.0" not in err
    # the plug-in folder must exist
    cfg = party('["broken_models:NoSynthetic"]', "broken_models:NoSynthetic", path='"../nothere"')
    with pytest.raises(ConfigError, match=r"allow\.model_path\[0\]: no such folder"):
        load_config(cfg, insecure=True)


def test_model_args_have_one_place(tmp_path: Path) -> None:
    """A registry whose [data] names the session's model refuses other model_args, naming both keys; the
    same model written differently (defaults spelled out) is accepted."""
    g = np.random.default_rng(5)
    data = synthetic_registries(g, BayesLogistic(p=2), sizes=(40, 40, 40))
    with LocalConsortium.start(
        3,
        data,
        models=("bayes-logistic",),
        modes=("sign",),
        data_model="bayes-logistic",
        data_model_args={"p": 2},
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
            same = {"model_args": {"p": 2, "x_bound": 3.0}, "kind": "mh"}  # x_bound = 3.0 is the default
            sess = coord.open_session(reveal_mode="sign", model="bayes-logistic", model_params=same)
            sess.close()
            other = {"model_args": {"p": 2, "x_bound": 5.0}, "kind": "mh"}
            with pytest.raises(
                SessionError,
                match=r"session's model_args .*x_bound.* differ from this "
                r"registry's \[data\.model_args\] \{'p': 2\}.*\[model\.params\]",
            ):
                coord.open_session(reveal_mode="sign", model="bayes-logistic", model_params=other)


@pytest.mark.slow
def test_plugin_model_with_registry_files_runs_simulated(tmp_path: Path) -> None:
    """The example's plug-in with ``[simulate] data`` files instead of its synthetic_data: the daemons
    import it from ``[allow] model_path`` and hold exactly the files' records; the run completes."""
    import sys

    shutil.copytree(PLUGINS, tmp_path / "plugins")
    sys.path.insert(0, str(tmp_path / "plugins"))
    try:
        from registry_models import PoissonRegression  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path / "plugins"))
    model = PoissonRegression(p=1)
    regs = model.synthetic_data(np.random.default_rng(9), (60, 80, 70))
    names = []
    for i, cols in enumerate(regs, start=1):
        write_csv(tmp_path / f"reg{i}.csv", cols)
        names.append(f"reg{i}.csv")
    cfg = tmp_path / "exp.toml"
    cfg.write_text(
        textwrap.dedent(
            f"""
            [experiment]
            name = "plugin-files"
            output_dir = "out"
            seed = 4
            [model]
            name = "registry_models:PoissonRegression"
            path = "plugins"
            [model.params]
            p = 1
            [sampler]
            kind = "mh"
            chains = 2
            iterations = 20
            warmup = 5
            proposal_scale = 0.05
            [reveal]
            mode = "sign"
            [simulate]
            parties = 3
            data = {names!r}
            """
        ).replace("'", '"')
    )
    out = tmp_path / "out"
    assert confar(["run", str(cfg), "--simulate", "--no-progress", "--out", str(out)]) == 0
    assert (out / "posterior.nc").is_file()
    for i, cols in enumerate(regs, start=1):
        party = (out / "simulation" / f"party-{i}" / "party.toml").read_text()
        assert str((tmp_path / "plugins").resolve()) in party  # [allow] model_path
        held = np.genfromtxt(out / "simulation" / f"party-{i}" / "data.csv", delimiter=",", names=True)
        for name, col in cols.items():
            np.testing.assert_array_equal(held[name], col)
