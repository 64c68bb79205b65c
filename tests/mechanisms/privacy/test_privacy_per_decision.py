"""The per-decision charge of a fixed-sd penalty and of the warm-start releases (issue 23), checked against
independent computations: the step sensitivity by brute force over the records the model allows, the GDP μ
of a batch against the closed form, the ε of the composition against dp_accounting's Gaussian PLD."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from mechanisms.kinds import DecisionPlan, decision_events
from mechanisms.models import load_model
from mechanisms.models.base import F64
from mechanisms.privacy import GaussianEvent, coalition_view, compose_events
from mechanisms.privacy.charge import Unaccountable
from mechanisms.samplers.requests import DecisionRequest, Penalty
from mechanisms.warmstart import Statistics, release_mu

ARGS = {
    "p": 3,
    "x_bound": 3.0,
    "x_center": [0.1, -0.2, 0.0],
    "x_cov": [[1.0, 0.3, 0.0], [0.3, 1.5, 0.2], [0.0, 0.2, 0.8]],
    "x_radius": 2.5,
}
MODEL = load_model("bayes-logistic", ARGS)
M = 5


def _batch(rng: np.random.Generator, n: int, scale: float) -> DecisionRequest:
    theta = rng.normal(0.0, 0.5, (n, MODEL.d))
    star = theta + scale * rng.normal(size=(n, MODEL.d))
    return DecisionRequest("mh", star, np.zeros(n), theta, Penalty(None, sd=0.7, max_sensitivity=10.0))


def _brute_sensitivity(req: DecisionRequest, rng: np.random.Generator, neighbours: str = "add-remove") -> F64:
    """max over allowed records of |log p(x | θ*) − log p(x | θ)| per decision (replace-one: max − min of
    it over pairs of records): records on the ellipsoid's boundary and the box's corners, both outcomes (the
    extremes lie on the boundary)."""
    ell = MODEL.ellipsoid  # type: ignore[attr-defined]
    u = rng.normal(size=(20_000, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    z = ell.mu + ell.radius * u @ np.linalg.cholesky(ell.matrix).T
    z = np.clip(z, -3.0, 3.0)
    out, hi, lo = np.zeros(req.n), np.full(req.n, -np.inf), np.full(req.n, np.inf)
    for y in (0.0, 1.0):
        cols = {f"x{k + 1}": z[:, k] for k in range(3)} | {"y": np.full(len(z), y)}
        cols = MODEL.check_data(cols)
        assert req.theta is not None
        r = MODEL.record_log_likelihood(cols, req.theta_star) - MODEL.record_log_likelihood(cols, req.theta)
        out = np.maximum(out, np.abs(r).max(axis=1))
        hi, lo = np.maximum(hi, r.max(axis=1)), np.minimum(lo, r.min(axis=1))
    return hi - lo if neighbours == "replace-one" else out


@pytest.mark.parametrize(("q", "neighbours"), [(0, "add-remove"), (2, "add-remove"), (0, "replace-one")])
def test_per_decision_charge_is_the_gaussian_mechanism_at_each_step(q: int, neighbours: str) -> None:
    rng = np.random.default_rng(1)
    req = _batch(rng, 24, 0.02)
    plan = DecisionPlan(model_args=ARGS, penalty=req.penalty)
    view = coalition_view("sign", M, 2, q)
    (ev,) = decision_events(plan, MODEL, "sign", view, req.n, "t", req, neighbours)
    assert isinstance(ev, GaussianEvent) and ev.count == 1
    brute = _brute_sensitivity(req, rng, neighbours)
    sd_res = 0.7 * math.sqrt(M - q)
    mu_brute = math.sqrt(float(np.sum((brute / sd_res) ** 2)))
    # the charge never falls below the brute-force sensitivity's, and the public bound is not loose by much
    assert ev.mu >= mu_brute * (1 - 1e-9)
    assert ev.mu <= 1.6 * mu_brute
    # a dry run (no batch) charges every decision at the cap
    (dry,) = decision_events(plan, MODEL, "sign", view, 3, "t", None, neighbours)
    assert dry.mu == pytest.approx(math.sqrt(3) * 10.0 / sd_res)


def test_a_batch_composes_like_its_decisions_and_eps_matches_dp_accounting() -> None:
    """One event per batch with μ² = Σ μ_t²; composed over batches, ε(δ) equals dp_accounting's PLD of a
    Gaussian mechanism with that μ (the GDP route is exact for Gaussians)."""
    rng = np.random.default_rng(2)
    plan = DecisionPlan(model_args=ARGS, penalty=Penalty(None, sd=0.7, max_sensitivity=10.0))
    view = coalition_view("sign", M, 2, 0)
    events = []
    for _ in range(5):
        req = _batch(rng, 16, 0.03)
        events += decision_events(plan, MODEL, "sign", view, req.n, "t", req, "add-remove")
        halves = [
            decision_events(plan, MODEL, "sign", view, 8, "t", _sub(req, s), "add-remove")[0].mu
            for s in (slice(0, 8), slice(8, 16))
        ]
        assert events[-1].mu == pytest.approx(math.hypot(*halves), rel=1e-12)
    mu = math.sqrt(sum(e.mu**2 for e in events))
    eps = compose_events(events).eps_at(1e-5)
    pld = pld_lib.from_gaussian_mechanism(1.0 / mu, value_discretization_interval=1e-4)
    assert eps == pytest.approx(pld.get_epsilon_for_delta(1e-5), rel=2e-3)


def _sub(req: DecisionRequest, s: slice) -> DecisionRequest:
    assert req.theta is not None
    return DecisionRequest("mh", req.theta_star[s], req.public[s], req.theta[s], req.penalty)


def test_per_decision_charge_needs_a_cap_and_other_plans_stay_replace_one() -> None:
    view = coalition_view("sign", M, 2, 0)
    with pytest.raises(Unaccountable, match="needs max_sensitivity"):
        decision_events(
            DecisionPlan(model_args=ARGS, penalty=Penalty(None, sd=0.7)), MODEL, "sign", view, 1, "t"
        )
    tau = DecisionPlan(model_args=ARGS, penalty=Penalty(2.0, 0.0, 100, max_sensitivity=1.0))
    with pytest.raises(Unaccountable, match="replace-one neighbours only"):
        decision_events(tau, MODEL, "sign", view, 1, "t", None, "add-remove")


@pytest.mark.parametrize("what", ["moments", "score", "gradient"])
def test_warm_start_release_is_charged_for_the_registry_s_view(what: str) -> None:
    stats = Statistics(what, 3.0, 40.0, 1000.0, clip=None if what == "moments" else 2.0)
    plan = DecisionPlan(model_args=ARGS, kind="statistics", settings=stats)
    for q, neighbours in [(0, "add-remove"), (3, "add-remove"), (1, "replace-one")]:
        view = coalition_view("sum", M, 2, q)
        (ev,) = decision_events(plan, MODEL, "sum", view, 20, "t", None, neighbours)
        assert isinstance(ev, GaussianEvent)
        assert ev.mu == pytest.approx(release_mu(stats, MODEL, M - q, neighbours))
    with pytest.raises(Unaccountable, match="noisy sum"):
        decision_events(plan, MODEL, "sign", coalition_view("sign", M, 2, 0), 20, "t")
