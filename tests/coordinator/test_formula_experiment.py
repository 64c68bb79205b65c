"""``[model] formula = ...`` in an experiment file (issue 24 item 1): the formula model loads from the file's
own keys, is the model a registry builds from the same arguments, and every mistake is refused naming its
key."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError
from mechanisms.models.base import load_model
from mechanisms.models.formula import FormulaModel
from tests.coordinator.experiment_text import head

ROOT = Path(__file__).resolve().parents[2]

HEAD = head("t", 1) + """
[sampler]
kind = "mh"
chains = 4
iterations = 10
proposal_scale = 0.1

[reveal]
mode = "sign"
"""

MODEL = """
[model]
formula = "y ~ age + C(grade) + (1 | registry)"
family = "bernoulli"
[model.columns]
y = { values = [0, 1] }
age = [20, 90]
grade = { values = [1, 2, 3] }
registry = { lower = 1, upper = 3, integer = true }
"""


def load(tmp_path: Path, text: str) -> object:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return load_experiment(p)


def test_the_study_example_is_a_formula_model() -> None:
    exp = load_experiment(ROOT / "examples" / "poisson-rate.toml")
    model = exp.model()
    assert isinstance(model, FormulaModel) and exp.model_name == "formula"
    assert model.family == "poisson" and model.offset == "person_years"
    assert model.param_names == ("Intercept", "age", "sex", "creatinine")
    # what a registry's [data] model = "formula" with the same [data.model_args] builds: the same object
    assert load_model("formula", exp.session_params()["model_args"]) == model


def test_formula_keys_in_the_model_table(tmp_path: Path) -> None:
    exp = load(
        tmp_path, HEAD + MODEL.replace("[model.columns]", "[model.params]\nprior_sd = 1.5\n[model.columns]")
    )
    model = exp.model()  # type: ignore[attr-defined]
    assert isinstance(model, FormulaModel) and model.prior_sd == 1.5
    assert model.param_names[-4:] == ("registry_log_sd", "registry_z1", "registry_z2", "registry_z3")


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (MODEL.replace("[model]\n", '[model]\nname = "logistic"\n'), "model.formula", "remove model.name"),
        (
            MODEL.replace("[model.columns]", "[model.params]\nfamily = 'poisson'\n[model.columns]"),
            "model.params.family",
            "given twice",
        ),
        (MODEL.replace("C(grade)", "np.log(age)"), "model", "transform confar cannot bound"),
        (MODEL.replace("age = [20, 90]\n", ""), "model", "column 'age' has no declared bounds"),
        (MODEL.replace("y ~ age", "y ~ agee"), "model", "'agee' has no declared bounds: did you mean 'age'?"),
        (MODEL.replace('"bernoulli"', '"binomial"'), "model", "family must be one of"),
        (MODEL.replace("\nfamily", "\nshape = 2\nfamily"), "model.shape", ""),
    ],
)
def test_refusals_name_the_key(tmp_path: Path, text: str, key: str, words: str) -> None:
    with pytest.raises(ExperimentError) as info:
        load(tmp_path, HEAD + text)
    msg = str(info.value)
    assert key in msg and words in msg, msg
