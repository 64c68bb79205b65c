"""One contract, every analysis a registry can serve (``parties.registry.ANALYSES``: federated ABCDP and every
built-in model): what the daemon relies on when it opens a session and charges a batch.

* ``get_analysis`` gives a fresh instance per call (one per session), its parameters parsed into its plan:
  it accepts the analysis' own parameters and refuses junk with ``AnalysisError`` (which the daemon answers
  with INVALID_ARGUMENT), never another exception.
* ``privacy_events`` either returns privacy events or raises ``Unaccountable`` (a party with a budget then
  refuses the session with the reason), for every reveal mode the analysis is served in and every coalition
  a registry may assume (q = 0 .. m - 1 colluders at the session threshold t = (m - 1) // 2; m = 3, 5).
* ``lazy_coin`` is None unless the parameters ask for lazy acceptance, then the coin of that gamma.
* ``public_numbers`` are named floats (what ``[allow.bounds]`` ranges are checked against).

A new analysis gets an entry in CASES (test_every_analysis_has_cases fails until it does). The numbers each
analysis charges are tested with the analysis: tests/parties/test_models_bridge.py,
tests/mechanisms/models/test_gaussian_mean.py, tests/parties/test_federated_abcdp.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest

from hss.lazy_coin import LazyCoin
from hss.modes import FEATURES, REVEAL_MODES, reveal_mode
from mechanisms.abcdp.federated import FederatedSvtPlan
from mechanisms.models.base import BUILTIN
from mechanisms.privacy import PrivacyEvent, coalition_view
from parties.abcdp import ANALYSIS as ABCDP
from parties.analyses import AnalysisError, PrivacyAccounted, Unaccountable
from parties.registry import ANALYSES, get_analysis

#: the parameter forms of a model analysis (a DecisionPlan): each sampler kind, with and without a cap
MODEL_PARAMS: dict[str, dict[str, Any]] = {
    "mh": {"kind": "mh"},
    "mh-model-args": {"kind": "mh", "model_args": {}},
    "penalty": {"kind": "mh", "penalty": {"tau": 1.0, "n": 100}},
    "penalty-cap": {"kind": "mh", "penalty": {"tau": 1.0, "n": 100, "max_sensitivity": 0.5}},
    "lazy": {"kind": "mh", "lazy": {"gamma": 0.5, "max_sensitivity": 0.5}},
    "rejection": {"kind": "rejection"},
    "rejection-cap": {"kind": "rejection", "max_sensitivity": 0.5},
}
FORMULA_ARGS = {"formula": "y ~ x", "family": "bernoulli", "columns": {"y": {"values": [0, 1]}, "x": [-2, 2]}}
MODEL_JUNK: list[dict[str, Any]] = [
    {"no_such_parameter": 1},
    {"kind": "gibbs"},
    {"kind": None},
    {"penalty": "loud"},
    {"penalty": {"tau": math.nan, "n": 10}},
    {"lazy": 3},
    {"model_args": "p=2"},
    {"model_args": {"no_such_arg": 1}},
    {"noise": 5},
]

_PLAN = FederatedSvtPlan(
    eps_abc=0.1,
    eps_total=1.0,
    c=3,
    resample=False,
    n_records=600,
    n_features=20,
    bandwidth=0.6,
    dim=1,
    map_seed=5,
)
ABCDP_PARAMS: dict[str, dict[str, Any]] = {
    "robust-shares": {**_PLAN.to_params(), "columns": ["y"]},
    "exact-shares": {**_PLAN.to_params(), "noise_shares": "exact", "columns": ["y"]},
}
ABCDP_JUNK: list[dict[str, Any]] = [
    {},
    {**_PLAN.to_params(), "no_such_parameter": 1},
    {**_PLAN.to_params(), "c": "three"},
    {**_PLAN.to_params(), "bandwidth": -1.0},
    {**_PLAN.to_params(), "columns": "y"},
    {"kind": "mh"},
]


@dataclass(frozen=True)
class Case:
    """An analysis' valid parameter forms, junk it must refuse, and the reveal modes it is served in (the
    daemon serves ABCDP only in a mode that takes features and every other analysis only in a mode that takes
    decision terms: ``parties.policy.check_analysis``)."""

    params: dict[str, dict[str, Any]]
    junk: list[dict[str, Any]]
    features: bool = False

    def modes(self) -> list[str]:
        return [m for m in REVEAL_MODES if (reveal_mode(m).inputs == FEATURES) == self.features]


CASES: dict[str, Case] = {
    ABCDP: Case(ABCDP_PARAMS, ABCDP_JUNK, features=True),
    **{name: Case(MODEL_PARAMS, MODEL_JUNK) for name in BUILTIN if name != "formula"},
    "formula": Case(  # a formula has no default: every form names one (mechanisms/models/formula.py)
        {k: {**v, "model_args": FORMULA_ARGS} for k, v in MODEL_PARAMS.items()},
        [*MODEL_JUNK, {"kind": "mh"}, {"model_args": FORMULA_ARGS | {"formula": "y ~ np.log(x)"}}],
    ),
}
NAMES = sorted(ANALYSES)


def test_every_analysis_has_cases() -> None:
    assert set(CASES) == set(ANALYSES)
    for name in NAMES:
        params = next(iter(CASES[name].params.values()))
        assert get_analysis(name, params) is not get_analysis(name, params)  # one instance per session
        assert CASES[name].modes()


@pytest.mark.parametrize("name", NAMES)
def test_get_analysis_accepts_its_parameters_and_refuses_junk(name: str) -> None:
    for params in CASES[name].params.values():
        get_analysis(name, params)
    for junk in CASES[name].junk:
        with pytest.raises(AnalysisError):
            get_analysis(name, junk)


@pytest.mark.slow  # the amplified profiles of a capped penalty: about 20 s for the first model, then cached
@pytest.mark.parametrize("name", NAMES)
def test_privacy_events_are_events_or_unaccountable(name: str) -> None:
    charged = 0
    for label, params in CASES[name].params.items():
        analysis = get_analysis(name, params)
        assert isinstance(analysis, PrivacyAccounted)
        for mode in CASES[name].modes():
            for m in (3, 5):
                for q in range(m):
                    view = coalition_view(mode, m, (m - 1) // 2, q)
                    try:
                        events = analysis.privacy_events(mode, view, 8)
                    except Unaccountable as exc:
                        assert str(exc), (label, mode, m, q)  # the reason a budgeted party refuses with
                        continue
                    assert isinstance(events, list) and events, (label, mode, m, q)
                    assert all(isinstance(e, PrivacyEvent) and e.count >= 1 for e in events)
                    charged += 1
    assert charged > 0  # some parameter form can run under a budget


@pytest.mark.parametrize("name", NAMES)
def test_lazy_coin_is_none_unless_asked_for(name: str) -> None:
    for params in CASES[name].params.values():
        coin = get_analysis(name, params).lazy_coin()
        if "lazy" in params:
            assert isinstance(coin, LazyCoin) and coin.gamma == params["lazy"]["gamma"]
        else:
            assert coin is None


@pytest.mark.parametrize("name", NAMES)
def test_public_numbers_are_named_floats(name: str) -> None:
    for params in CASES[name].params.values():
        numbers = get_analysis(name, params).public_numbers()
        assert isinstance(numbers, dict)
        for key, value in numbers.items():
            assert isinstance(key, str) and type(value) is float and not math.isnan(value), (key, value)


def test_run_state_of_tells_run_state_analyses_from_decision_analyses() -> None:
    """parties.run_state.run_state_of (decided once per class, asked at every step): federated ABCDP keeps
    run state, every built-in model does not, the same answer for every instance and every call."""
    from parties.registry import ANALYSES, get_analysis
    from parties.run_state import RunStateAnalysis, run_state_of

    for name in ANALYSES:
        for _ in range(2):
            a = get_analysis(name, next(iter(CASES[name].params.values())))
            assert (run_state_of(a) is a) == (name == ABCDP) == isinstance(a, RunStateAnalysis), name
            assert run_state_of(a) is a or run_state_of(a) is None
