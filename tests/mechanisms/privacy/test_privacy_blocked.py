"""The charge of a blocked run under a budget (issue 36; docs/PRIVACY.md, "Blocked sampling under a budget"),
checked by brute force: a registry's term of a shared decision, and its local log ratio, are evaluated by the
registry's own code (``RegistryBlock``) on its records and on every neighbouring dataset (one record replaced
by, or added as, each record the schema allows), at effects spread far beyond the posterior's; the largest
change is never above the Δ the charge uses, so the charge (μ per decision = Δ/(sd √r), the local steps'
√(chains × steps) Δ_loc/sd_loc) is never below the truth. Plans and models without a bound are refused."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hss.randomness import SecureRandom
from mechanisms.kinds import DecisionPlan, decision_events
from mechanisms.models.base import F64
from mechanisms.models.formula import FormulaModel, corner_records
from mechanisms.models.hierarchy import SharedModel
from mechanisms.models.random_effects import LogisticRandomIntercept
from mechanisms.privacy import GaussianEvent, coalition_view
from mechanisms.privacy.charge import Unaccountable
from mechanisms.samplers.local import LocalSettings, LocalState, RegistryBlock
from mechanisms.samplers.requests import DecisionRequest, Penalty

M = 3
SD, CAP = 0.7, 4.0
LOCAL = LocalSettings(steps=2, parameterisation="centred", sd=0.9, max_step=0.3)
PENALTY = Penalty(None, sd=SD, max_sensitivity=CAP)
CHAINS = 40


#: family -> (outcome bounds, extra columns, model keywords)
FAMILIES: dict[str, tuple[Any, dict[str, Any], dict[str, Any]]] = {
    "bernoulli": ({"values": [0, 1]}, {}, {}),
    "gaussian": ([-5, 5], {}, {"sigma": 1.0}),
    "poisson": ({"lower": 0, "upper": 20, "integer": True}, {"t": [0.5, 4]}, {"offset": "t"}),
    "weibull": ([0.1, 5], {"event": {"values": [0, 1]}}, {"event": "event"}),
}


def _formula(family: str = "bernoulli") -> FormulaModel:
    outcome, extra, kw = FAMILIES[family]
    levels = {"values": list(range(1, M + 1))}
    cols = {"y": outcome, "x1": [-2, 2], "x2": [-1, 3], **extra, "registry": levels}
    return FormulaModel("y ~ x1 + x2 + (1 | registry)", family, cols, **kw)


def _records(model: Any, n: int, level: float, rng: np.random.Generator) -> dict[str, F64]:
    names = [c.name for c in model.schema]
    x = {c: rng.uniform(-1.0, 1.0, n) for c in names if c.startswith("x")}
    y = {o: (rng.random(n) < 0.4).astype(float) for o in names if o in ("y",)}
    return dict(model.check_data({**x, **y, model.random_intercept().column: np.full(n, level)}))


def _allowed(model: Any, level: float) -> dict[str, F64]:
    """Every corner record of the schema's box at this registry's level (for a bernoulli outcome the change
    of a record's log-likelihood is largest at a corner: |Δη| is convex in x, the log-likelihood monotone)."""
    if isinstance(model, FormulaModel):
        rec = corner_records(model)
    else:
        grid = np.array(np.meshgrid(*[[-model.x_bound, model.x_bound]] * model.p, [0.0, 1.0])).reshape(
            model.p + 1, -1
        )
        rec = {f"x{k + 1}": grid[k] for k in range(model.p)} | {"y": grid[-1]}
        rec["registry"] = np.zeros(grid.shape[1])
    keep = {k: v for k, v in rec.items()}
    col = model.random_intercept().column
    keep[col] = np.full(len(next(iter(keep.values()))), level)
    # one row per distinct record (the registry column fixed to this level)
    rows = np.unique(np.column_stack([keep[k] for k in keep]), axis=0)
    return {k: rows[:, i] for i, k in enumerate(keep)}


def _neighbours(data: dict[str, F64], allowed: dict[str, F64], neighbours: str) -> list[dict[str, F64]]:
    """Every dataset one record away: record 0 (and record 1) replaced by each allowed record (replace-one);
    record 0 removed, or each allowed record added (add-remove)."""
    n_allowed = len(next(iter(allowed.values())))
    out = []
    if neighbours == "replace-one":
        for i in (0, 1):
            for a in range(n_allowed):
                out.append({k: np.where(np.arange(v.size) == i, allowed[k][a], v) for k, v in data.items()})
    else:
        out.append({k: v[1:] for k, v in data.items()})
        for a in range(n_allowed):
            out.append({k: np.r_[v, allowed[k][a]] for k, v in data.items()})
    return out


def _state(block: RegistryBlock, s: F64, rng: np.random.Generator) -> LocalState:
    """A local state of the public coordinate with effects from the posterior's scale to far beyond it."""
    state = block.initial(CHAINS, SecureRandom.from_key(bytes(32)))
    v = np.concatenate([rng.normal(0.0, 1.0, CHAINS // 2), rng.uniform(-30.0, 30.0, CHAINS - CHAINS // 2)])
    return LocalState(0, v, np.ones(CHAINS, dtype=bool), state.centre, state.log_scale, state.p_centred)


@pytest.mark.parametrize("neighbours", ["replace-one", "add-remove"])
@pytest.mark.parametrize("which", ["formula-bernoulli", "logistic-random-intercept"])
def test_the_blocked_charge_is_never_below_the_brute_force_truth(which: str, neighbours: str) -> None:
    rng = np.random.default_rng(3)
    model: Any = _formula()
    if which == "logistic-random-intercept":
        model = LogisticRandomIntercept(p=2, registries=M, x_bound=2.0)
    args = model.config()["args"] if hasattr(model, "config") else {}
    level = 2.0
    data = _records(model, 25, level, rng)
    block = RegistryBlock(model, data, LOCAL)
    shared = SharedModel(model)
    s = shared.sample_prior(rng, CHAINS)
    s_star = s + 0.2 * rng.normal(size=s.shape)  # slopes, intercept and log σ_u all move
    state = _state(block, s, rng)
    chain = np.arange(CHAINS)
    request = DecisionRequest("mh", s_star, np.zeros(CHAINS), s, PENALTY, chain, s, 0)

    def shared_terms(b: RegistryBlock) -> F64:
        current = b.target(b.at(s, state.centre), state.v, state.centred)
        return b.shared_terms(state, current, chain, s, s_star)

    # local moves of every chain by up to ±max_step (the cap), at the same spread of effects
    step = rng.uniform(-1.0, 1.0, CHAINS) * LOCAL.max_step  # type: ignore[operator]
    step[:4] = [LOCAL.max_step, -LOCAL.max_step, LOCAL.max_step, -LOCAL.max_step]  # type: ignore[list-item]

    def local_ratio(b: RegistryBlock) -> F64:
        at = b.at(s, state.centre)
        return b.target(at, state.v + step, state.centred) - b.target(at, state.v, state.centred)

    base_shared, base_local = shared_terms(block), local_ratio(block)
    brute_shared, brute_local = np.zeros(CHAINS), np.zeros(CHAINS)
    for other in _neighbours(data, _allowed(model, level), neighbours):
        b = RegistryBlock(model, dict(model.check_data(other)), LOCAL)
        brute_shared = np.maximum(brute_shared, np.abs(shared_terms(b) - base_shared))
        brute_local = np.maximum(brute_local, np.abs(local_ratio(b) - base_local))
    plan = DecisionPlan(model_args=args, penalty=PENALTY, settings=LOCAL)
    for q in (0, 1):  # the registries whose noise a coalition of q knows
        view = coalition_view("sign", M, 2, q)
        ev_shared, ev_local = decision_events(plan, model, "sign", view, CHAINS, "t", request, neighbours)
        assert isinstance(ev_shared, GaussianEvent) and isinstance(ev_local, GaussianEvent)
        sd_res = SD * math.sqrt(M - q)
        mu_brute = math.sqrt(float(np.sum((brute_shared / sd_res) ** 2)))
        assert mu_brute > 0.0
        assert ev_shared.mu >= mu_brute * (1 - 1e-9), (ev_shared.mu, mu_brute)
        # every local step at the cap: its brute-force worst over the moves tried, times chains × steps
        local_brute = math.sqrt(CHAINS * LOCAL.steps) * float(brute_local.max()) / LOCAL.sd  # type: ignore[operator]
        assert ev_local.mu >= local_brute * (1 - 1e-9), (ev_local.mu, local_brute)
    # not loose: bernoulli's |Δ log σ(η)| → |Δη| far in the tail, so a record reaches the bound sup |Δη|;
    # replace-one charges twice it (the removed record's extreme and the added one's), which one offset
    # does not reach at once (one is in its tail, the other is not): at most about twice the truth
    factor = 2.0 if neighbours == "replace-one" else 1.0
    assert ev_local.mu <= 1.05 * factor * local_brute
    assert ev_shared.mu <= 1.1 * factor * mu_brute
    # a dry run charges n decisions at the cap and the local steps of n chains
    dry_shared, dry_local = decision_events(plan, model, "sign", view, 5, "t", None, neighbours)
    assert dry_shared.mu == pytest.approx(math.sqrt(5) * CAP / sd_res)
    assert dry_local.mu == pytest.approx(ev_local.mu * math.sqrt(5 / CHAINS))


@pytest.mark.parametrize("family", ["gaussian", "poisson", "weibull"])
def test_a_model_bounded_only_at_a_level_of_eta_is_refused(family: str) -> None:
    """A gaussian, poisson or weibull outcome's bound grows with the level of η (the residual, e^η, the
    survival term), which each registry's effect moves and the coordinator does not see: no charge."""
    model = _formula(family)
    assert not model.offset_uniform_bound() and _formula().offset_uniform_bound()
    plan = DecisionPlan(model_args=model.config()["args"], penalty=PENALTY, settings=LOCAL)
    view = coalition_view("sign", M, 2, 0)
    with pytest.raises(Unaccountable, match=r"model 'formula' bounds .* only at a given level"):
        decision_events(plan, model, "sign", view, 4, "t")


def test_exact_steps_are_refused_and_plans_are_checked() -> None:
    model = _formula()
    args = model.config()["args"]
    view = coalition_view("sign", M, 2, 0)
    exact = DecisionPlan(model_args=args, settings=LocalSettings())
    with pytest.raises(Unaccountable, match="shared decisions are exact Metropolis-Hastings"):
        decision_events(exact, model, "sign", view, 4, "t")
    with pytest.raises(ValueError, match="needs noisy local steps"):
        DecisionPlan(model_args=args, penalty=PENALTY, settings=LocalSettings())
    with pytest.raises(ValueError, match="fixed sd, c = 'bound' and max_sensitivity"):
        DecisionPlan(model_args=args, penalty=Penalty(None, sd=SD), settings=LOCAL)
    with pytest.raises(ValueError, match="local parameterisation must be 'centred'"):
        LocalSettings(sd=0.5, max_step=0.1)
    with pytest.raises(ValueError, match=r"both local sd .* and local max_step"):
        LocalSettings(parameterisation="centred", sd=0.5)
    # noisy local steps without the shared penalty: the shared decisions are still exact MH
    noisy_only = DecisionPlan(model_args=args, settings=LOCAL)
    with pytest.raises(Unaccountable, match="shared decisions are exact"):
        decision_events(noisy_only, model, "sign", view, 4, "t")
    plan = DecisionPlan(model_args=args, penalty=PENALTY, settings=LOCAL)
    back = DecisionPlan.from_params(plan.to_params())
    assert back.blocked == LOCAL and back.penalty == PENALTY
