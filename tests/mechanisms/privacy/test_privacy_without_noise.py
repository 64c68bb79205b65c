"""A decision plan with ``noise = "none"`` (tests only: the parties drop their Gamma(1/m, 1) shares of Exp(1))
is charged at nothing (issue 35): :func:`mechanisms.kinds.decision_events` raises ``Unaccountable`` for
every decision kind, where it used to price it exactly like ``"exp"`` (lazy MH γ = 0.5 at cap 0.5: the
same ε 8.01 for an accept bit that without the noise is deterministic given the coin). A warm-start
release adds no Gamma noise (its Gaussian noise is the mechanism), so its charge does not depend on the
plan's noise. The same over daemons with a budget: tests/parties/test_privacy_budget.py."""

from __future__ import annotations

import dataclasses

import pytest

from mechanisms.kinds import DecisionPlan, RejectionSettings, decision_events
from mechanisms.models import load_model
from mechanisms.privacy import GaussianEvent, coalition_view
from mechanisms.privacy.charge import Unaccountable
from mechanisms.samplers.requests import Lazy, Penalty
from mechanisms.warmstart import Statistics

M, T = 3, 1
GM_ARGS = {"sigma": 1.0, "clip": [-4.0, 6.0]}
#: every decision kind a registry charges, on a model that serves it, with the reason words its refusal gives
KINDS: dict[str, tuple[str, DecisionPlan, str]] = {
    "penalty-sd": (
        "gaussian-mean",
        DecisionPlan(model_args=GM_ARGS, penalty=Penalty(None, sd=0.7, max_sensitivity=0.5)),
        "penalty MH (sd fixed)",
    ),
    "penalty-tau": (
        "gaussian-mean",
        DecisionPlan(model_args=GM_ARGS, penalty=Penalty(40.0, max_sensitivity=0.5)),
        "penalty MH (sd tau)",
    ),
    "lazy-mh": (
        "gaussian-mean",
        DecisionPlan(model_args=GM_ARGS, lazy=Lazy(0.5, 0.5)),
        "deterministic given the secret coin: an unbounded loss",
    ),
    "rejection": (
        "beta-bernoulli",
        DecisionPlan(kind="rejection", settings=RejectionSettings(0.4, max_sensitivity=1.0)),
        "a rejection decision",
    ),
    "lazy-rejection": (
        "beta-bernoulli",
        DecisionPlan(kind="rejection", lazy=Lazy(0.5), settings=RejectionSettings(max_sensitivity=1.0)),
        "a lazy rejection decision",
    ),
}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("q", [0, 1])
def test_a_plan_without_the_noise_is_unaccountable_for_every_decision_kind(kind: str, q: int) -> None:
    model_name, plan, reason = KINDS[kind]
    model = load_model(model_name, dict(plan.model_args))
    view = coalition_view("sign", M, T, q)
    events = decision_events(plan, model, "sign", view, 8, "t")  # with the noise: charged
    assert events and all(e.count >= 1 for e in events)
    quiet = dataclasses.replace(plan, noise="none")
    with pytest.raises(Unaccountable) as ei:
        decision_events(quiet, model, "sign", view, 8, "t")
    msg = str(ei.value)
    assert "noise is 'none'" in msg and "Gamma(1/m, 1)" in msg and reason in msg
    assert "use noise 'exp'" in msg


def test_a_plan_without_the_noise_is_refused_in_every_reveal_mode() -> None:
    """Not only sign: the penalty in sum and blinded, where the noise-free total was charged as well."""
    _, plan, _ = KINDS["penalty-tau"]
    model = load_model("gaussian-mean", GM_ARGS)
    quiet = dataclasses.replace(plan, noise="none")
    for mode in ("sum", "blinded"):
        view = coalition_view(mode, M, T, 0)
        assert decision_events(plan, model, mode, view, 4, "t")
        with pytest.raises(Unaccountable, match="noise is 'none'"):
            decision_events(quiet, model, mode, view, 4, "t")


def test_a_warm_start_release_does_not_use_the_gamma_noise() -> None:
    """A statistics release is each registry's sums plus its own Gaussian noise (``warmstart.noisy_release``),
    never the Gamma shares: its charge is the same whatever the plan's noise says."""
    args = {"p": 2}
    model = load_model("bayes-logistic", args)
    stats = Statistics("moments", 3.0, 40.0, 1000.0)
    plan = DecisionPlan(model_args=args, kind="statistics", settings=stats)
    view = coalition_view("sum", M, T, 1)
    (ev,) = decision_events(plan, model, "sum", view, 5, "t", None, "add-remove")
    quiet_plan = dataclasses.replace(plan, noise="none")
    (quiet,) = decision_events(quiet_plan, model, "sum", view, 5, "t", None, "add-remove")
    assert isinstance(ev, GaussianEvent) and quiet == ev
