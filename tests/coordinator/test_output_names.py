"""Every name a run writes is checked before the run (issue 40 item 1): a formula's ``C(sex)[T.1.0]`` and
``age:creatinine`` once failed the output writer's rule after a whole run (4 min 41 s, exit 1, no outputs).
``confar run --check`` now checks the model's parameter names, the sampler's sample statistics and the public
constants against that rule (``coordinator.outputs.result.name_problem``), naming the name and the rule, and a
run refuses them before any party is contacted."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from coordinator.cli import main as confar
from coordinator.drivers import ABCDP_STATS, MH_STATS, REJECTION_STATS
from coordinator.outputs.result import NAME_RULE, name_problem
from tests.coordinator.experiment_text import head

BAD_NAMES = '''
from dataclasses import dataclass

import numpy as np

from mechanisms.models import Column, Model, as_batch


@dataclass(frozen=True)
class SpacedName(Model):
    """A valid model whose one parameter name the outputs cannot hold."""

    name = "spaced-name"

    @property
    def param_names(self):
        return ("mu", "log sigma")

    @property
    def schema(self):
        return (Column("x", -10.0, 10.0),)

    def log_prior(self, theta):
        return -0.5 * np.sum(as_batch(theta, 2) ** 2, axis=1)

    def sample_prior(self, rng, n):
        return rng.normal(size=(n, 2))

    def record_log_likelihood(self, data, theta):
        th = as_batch(theta, 2)
        return -0.5 * ((data["x"][None, :] - th[:, :1]) / np.exp(th[:, 1:])) ** 2 - th[:, 1:]


@dataclass(frozen=True)
class TwiceNamed(SpacedName):
    @property
    def param_names(self):
        return ("mu", "mu")
'''

SAMPLER = """
[sampler]
kind = "mh"
chains = 2
iterations = 6
warmup = 2
proposal_scale = 0.1

[reveal]
mode = "sign"
"""

FORMULA = """
[model]
formula = "y ~ age + C(sex) + age:draw"
family = "bernoulli"
columns = { y = { values = [0, 1] }, age = [20, 90], sex = { values = [0, 1] }, draw = [0, 1] }
"""


def write(tmp_path: Path, model: str) -> Path:
    (tmp_path / "mymodels").mkdir(exist_ok=True)
    (tmp_path / "mymodels" / "bad_names.py").write_text(BAD_NAMES)
    path = tmp_path / "exp.toml"
    path.write_text(head() + textwrap.dedent(model) + SAMPLER)
    return path


def plugin(name: str) -> str:
    return f'\n[model]\nname = "bad_names:{name}"\npath = "mymodels"\n'


def test_the_rule() -> None:
    for ok in ("Intercept", "age", "sex[1]", "sex[M]", "age.creatinine", "registry_z1", "log_shape", "w-1"):
        assert name_problem(ok) is None, ok
    for bad in ("C(sex)[T.1.0]", "age:creatinine", "log sigma", "1st", "", "chain", "draw", 3):
        assert name_problem(bad) == f"{bad!r} is not a usable name ({NAME_RULE})"
    for stat in (*MH_STATS, *REJECTION_STATS, *ABCDP_STATS):
        assert name_problem(stat) is None


def test_check_refuses_a_plugin_parameter_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert confar(["run", str(write(tmp_path, plugin("SpacedName"))), "--check"]) == 2
    err = capsys.readouterr().err
    assert f"model.name: parameter name 'log sigma' is not a usable name ({NAME_RULE})" in err, err
    assert "rename it in the model's param_names" in err and "'mu'" not in err
    assert confar(["run", str(write(tmp_path, plugin("TwiceNamed"))), "--check"]) == 2
    assert "model.name: parameter names ['mu'] given twice" in capsys.readouterr().err


def test_check_refuses_a_formula_parameter_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A column named as one of draws.csv's own columns: the interaction's name is fine, the column's is
    not (``draw``), and the message says to rename the column."""
    cfg = write(tmp_path, FORMULA.replace("age:draw", "draw"))
    assert confar(["run", str(cfg), "--check"]) == 2
    err = capsys.readouterr().err
    assert "model.formula: parameter name 'draw' is not a usable name" in err and "rename the column" in err
    cfg = write(tmp_path, FORMULA)  # C(sex) and an interaction: sex[1], age.draw
    assert confar(["run", str(cfg), "--check"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "parameters (as the outputs name them): Intercept, age, sex[1], age.draw\n" in out, out


def test_a_run_refuses_before_contacting_anyone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --check: refused at once (exit 2, nothing written), not after the parties were asked (the
    addresses of head() have no party: asking them would fail with exit 1)."""
    cfg = write(tmp_path, plugin("SpacedName"))
    assert confar(["run", str(cfg), "--no-progress"]) == 2
    assert "'log sigma' is not a usable name" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
