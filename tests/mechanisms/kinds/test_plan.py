"""The decision plan: one typed value from the experiment file to the registry's charge, and its wire form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.experiment import load_experiment
from mechanisms.kinds import PARAMS, DecisionPlan, RejectionSettings
from mechanisms.samplers.requests import Lazy, Penalty

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

PLANS = [
    DecisionPlan(),
    DecisionPlan(model_args={"p": 4, "x_bound": 3.0}),
    DecisionPlan(
        model_args={"sigma": 1.5, "clip": [-4.0, 6.0]},
        penalty=Penalty(tau=0.7, alpha=0.25, n=11_300, c="bound", max_sensitivity=2.0),
    ),
    DecisionPlan(penalty=Penalty(tau=2.0, alpha=0.0, n=90, c="clip", b=0.5)),
    DecisionPlan(lazy=Lazy(0.5, 0.3), noise="none"),
    DecisionPlan(kind="rejection", settings=RejectionSettings(0.5, "public", 1.5)),
    DecisionPlan(kind="rejection", lazy=Lazy(0.25), settings=RejectionSettings(max_sensitivity=0.2)),
]


@pytest.mark.parametrize("plan", PLANS, ids=range(len(PLANS)))
def test_round_trip_through_json(plan: DecisionPlan) -> None:
    wire = json.loads(json.dumps(plan.to_params()))
    assert DecisionPlan.from_params(wire) == plan
    assert set(wire) <= set(PARAMS) and wire["kind"] == plan.kind


def test_defaults_are_not_written() -> None:
    assert DecisionPlan(model_args={"p": 2}).to_params() == {"model_args": {"p": 2}, "kind": "mh"}
    assert DecisionPlan.from_params({}) == DecisionPlan()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"kind": "gibbs"}, "kind must be one of"),
        ({"noise": "loud"}, "noise must be"),
        ({"kind": "rejection", "log_bound_margin": -1.0}, "log_bound_margin must be"),
        ({"kind": "rejection", "log_bound_margin": True}, "log_bound_margin must be"),
        ({"log_bound_margin": 0.5}, "parameters of kind 'rejection', not of kind 'mh'"),
        ({"kind": "statistics", "blocked": {}}, "parameters of kind 'mh', not of kind 'statistics'"),
        ({"kind": "statistics"}, "kind 'statistics' and the statistics release go together"),
        ({"kind": 3}, "kind must be one of"),
        ({"kind": "rejection", "bound": "oracle"}, "bound must be one of"),
        ({"kind": "rejection", "max_sensitivity": 0}, "max_sensitivity must be"),
        ({"max_sensitivity": 1.0}, r"\['max_sensitivity'\] are parameters of kind 'rejection'"),
        ({"kind": "rejection", "penalty": {"tau": 1.0, "n": 10}}, "applies to kind 'mh' only"),
        ({"penalty": {"tau": 1.0, "n": 10}, "lazy": {"gamma": 0.5}}, "not combined"),
        ({"penalty": {"tau": -1.0, "n": 10}}, r"bad penalty .* tau must be > 0"),
        ({"penalty": 3}, "penalty must be an object"),
        ({"lazy": {"gamma": 0.3}}, "bad lazy"),
        ({"model_args": [1]}, "model_args must be an object"),
        ({"sigma": 1.0}, r"unknown parameters \['sigma'\]"),
    ],
)
def test_bad_parameters_are_refused_naming_the_key(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecisionPlan.from_params(params)


def test_step_cap_and_numbers() -> None:
    pen = DecisionPlan(model_args={"p": 4, "name": "x"}, penalty=Penalty(2.0, 0.0, 50, max_sensitivity=1.0))
    assert pen.step_cap == 1.0
    want = {"p": 4.0, "tau": 2.0, "alpha": 0.0, "n": 50.0, "max_sensitivity": 1.0, "log_bound_margin": 0.0}
    assert pen.numbers() == want
    assert DecisionPlan(lazy=Lazy(0.5, 0.25)).step_cap == 0.25
    assert DecisionPlan(kind="rejection", settings=RejectionSettings(max_sensitivity=3.0)).step_cap == 3.0
    assert DecisionPlan().step_cap is None


@pytest.mark.parametrize(
    "name",
    [
        "mh.toml",
        "adaptive-mh.toml",
        "demo.toml",
        "penalty.toml",
        "lazy-mh.toml",
        "rejection.toml",
        "private-rejection.toml",
    ],
)
def test_every_example_sends_a_plan_that_parses_back(name: str) -> None:
    exp = load_experiment(EXAMPLES / name)
    plan = exp.decision_plan()
    assert DecisionPlan.from_params(json.loads(json.dumps(exp.session_params()))) == plan
    assert plan.penalty == exp.sampler.penalty and plan.lazy == exp.sampler.lazy


def test_another_kinds_key_is_refused_only_when_it_says_something() -> None:
    """Null or the owning kind's default says nothing (an explicit default on the wire parses as before);
    any other value of another kind's key is refused, naming its kind."""
    quiet = {
        "bound": "data",
        "log_bound_margin": 0,
        "max_sensitivity": None,
        "statistics": None,
        "blocked": None,
    }
    assert DecisionPlan.from_params({"kind": "mh", **quiet}) == DecisionPlan()
    assert DecisionPlan.from_params({"kind": "effects", "effects": _EFFECTS, "bound": "data"}).effects
    for key, value in [("log_bound_margin", 0.5), ("bound", "public"), ("log_bound_margin", False)]:
        with pytest.raises(
            ValueError, match=rf"\['{key}'\] are parameters of kind 'rejection', not of kind 'mh'"
        ):
            DecisionPlan.from_params({key: value})
    with pytest.raises(ValueError, match="kind must be one of"):
        DecisionPlan(kind=["mh"])  # type: ignore[arg-type]


_EFFECTS = {"run": "r", "first": 0, "sweeps": 2, "chains": 3}
