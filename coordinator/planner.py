"""Budget first: ``[privacy] target_epsilon`` chooses the run's length, and says what it will buy, before the
MCMC charges anything (:mod:`mechanisms.planning` has the law).

``[privacy]`` for a planned run::

    [privacy]
    target_epsilon = 3.0      # what each registry may spend on the whole run, warm start included
    delta = 1e-5
    neighbours = "add-remove" # the relation the target is for (default: add-remove)
    colluding = 0             # the coalition it is for (0: the coordinator alone)
    min_ess = 100             # refuse the run when the plan buys fewer effective draws
    accountant = "pld"        # how the registries compose: "pld" (their eps-at-delta ledger; the plan uses
                              # the GDP composition it answers for these Gaussian charges) or "renyi" (their
                              # [budget] accountant = "renyi": a Renyi filter at the order their budget
                              # fixes, which prices each accept bit below the Gaussian; sign reveal only)
    per_run = "per-decision"  # how the registries charge: "per-decision" or "worst-record" (their [budget]
                              # per_run: the run at its worst record over the whole run; the plan
                              # simulates that charge on its chains, mechanisms.privacy.worst_record)

It needs the penalty with a fixed ``sd``, ``[sampler] proposal = "laplace"`` and a ``[warm_start]``.
Twice: before the warm start from a **pilot** — the exact Laplace approximation of the model's public
synthetic registries at the registries' public sizes, or for a formula model of its **design dataset**
(:mod:`mechanisms.models.formula_design`: the declared columns and the public ``[design]`` guesses only;
the posterior's shape is assumed to be like that of these records; stated with the plan) — so that a
budget that cannot buy a usable posterior is refused before anything is released; and after the warm start
from the DP Laplace approximation itself, which sets ``[sampler] iterations`` (the file's value is a
maximum) and, when the file leaves ``[sampler] max_sensitivity`` out, the cap on c(θ, θ*): the 99.9 %
quantile of c under the approximation (:func:`mechanisms.planning.quantile_cap`). A formula model's warm
start releases its scores in the basis of the pilot's covariance (:func:`with_pilot`,
:mod:`mechanisms.warmstart_basis`), with the model's exact bound on them. After the run, the
warm-up's accept bits (a pilot: released and charged) re-plan its ESS at the proposal's offset they show
(:func:`pilot_replan`; the plan assumes the DP noise's offset only), stated beside the plan. Everything used
is public. The registries charge what each decision really is; the run's report states what was spent.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from coordinator.tables import Reader
from mechanisms.floor import floor_of
from mechanisms.models.base import Model
from mechanisms.planning import (
    ChainSettings,
    McmcPlan,
    PlanBudget,
    ProposalStatistics,
    RunCharge,
    StandIn,
    offset_statistics,
    pilot_bits,
    pilot_offset,
    plan_mcmc,
    proposal_statistics,
    quantile_cap,
    refit_warmup,
    replan_after_pilot,
    warmup_of,
)
from mechanisms.planning_blocked import BlockedPlan, BlockedSettings
from mechanisms.privacy.renyi import BitRdpTable
from mechanisms.privacy.worst_record import WorstRecordCharge
from mechanisms.samplers.requests import NEIGHBOURS
from mechanisms.warmstart import LaplaceApproximation, exact_laplace, mean_error_cov

if TYPE_CHECKING:
    from coordinator.experiment import Experiment
    from coordinator.simulate_settings import SimulateSettings
    from mechanisms.privacy import PrivacyEvent

KEYS = ("target_epsilon", "delta", "neighbours", "colluding", "min_ess", "accountant", "per_run")
ACCOUNTANTS = ("pld", "renyi")
PER_RUN = ("per-decision", "worst-record")


@dataclass(frozen=True)
class BudgetTarget:
    epsilon: float
    delta: float
    neighbours: str = "add-remove"
    colluding: int = 0
    min_ess: float = 100.0
    accountant: str = "pld"
    per_run: str = "per-decision"
    choose_cap: bool = False  # [sampler] max_sensitivity left out: the plan chooses the cap

    def text(self) -> str:
        who = "the coordinator" if self.colluding == 0 else f"{self.colluding} colluding registries"
        how = ", Renyi filter" if self.accountant == "renyi" else ""
        how += ", charged per run at the worst record" if self.per_run == "worst-record" else ""
        return f"eps = {self.epsilon:g} at delta = {self.delta:g}, {self.neighbours}, against {who}{how}"


def read_target(r: Reader, tbl: dict[str, object], m: int) -> BudgetTarget:
    r.only(tbl, "privacy", KEYS)
    if "delta" not in tbl:
        raise r.err("privacy.delta", "missing: target_epsilon is at this delta")
    return BudgetTarget(
        epsilon=r.number(tbl, "privacy", "target_epsilon", gt=0.0),
        delta=r.number(tbl, "privacy", "delta", gt=0.0, lt=1.0),
        neighbours=r.choice(tbl, "privacy", "neighbours", NEIGHBOURS, "add-remove"),
        colluding=r.integer(tbl, "privacy", "colluding", 0, lo=0, hi=m - 1),
        min_ess=r.number(tbl, "privacy", "min_ess", 100.0, gt=0.0),
        accountant=r.choice(tbl, "privacy", "accountant", ACCOUNTANTS, "pld"),
        per_run=r.choice(tbl, "privacy", "per_run", PER_RUN, "per-decision"),
    )


def check_accountant(
    r: Reader, target: BudgetTarget, sim: SimulateSettings | None, mode: str, m: int, t: int
) -> None:
    """A plan priced for a Rényi filter needs registries that compose with one (else a registry's ε-at-δ
    ledger reads the same run higher and refuses it partway) and a coalition that sees only the accept bit;
    a plan priced per run needs registries that charge per run and the other way round (a registry charging
    per decision refuses a per-run plan partway; one charging per run leaves a per-decision plan's budget
    largely unspent)."""
    from mechanisms.privacy.threat import coalition_view

    if sim is not None and (sim.party_epsilon is not None or sim.party_gdp_mu is not None):
        charges = sim.party_per_run or "per-decision"
        if charges != target.per_run:
            raise r.err(
                "privacy.per_run",
                f"{target.per_run!r}, but the simulated registries charge {charges!r} ([simulate] "
                "party_per_run): the plan must price the run as their ledgers will",
            )
    if sim is not None and sim.party_epsilon is not None:
        party = sim.party_accountant or "pld"
        if party != target.accountant:
            raise r.err(
                "privacy.accountant",
                f"{target.accountant!r}, but the simulated registries compose with {party!r} "
                "([simulate] party_accountant): the plan must price the run as their ledgers will",
            )
    if target.accountant == "renyi":
        view = coalition_view(mode, m, t, target.colluding)
        if not view.observation.only_bit:
            raise r.err(
                "privacy.accountant",
                f"'renyi' prices the accept bit, but {target.colluding} colluding registries see "
                f"{view.observed!r} in reveal mode {mode!r}: use 'pld'",
            )


class PlanRefused(ValueError):
    """The budget cannot buy a usable posterior (the message says what would)."""


@dataclass(frozen=True)
class Pilot:
    """The pilot: the exact Laplace approximation of public records at the public sizes, the records
    (pooled, checked by ``model``), what they are, in words (stated with the plan), and the model it was made
    with, the one the pilot's plan prices decisions with (:func:`pilot_model`'s in :func:`with_pilot`)."""

    laplace: LaplaceApproximation
    pooled: dict[str, npt.NDArray[np.float64]]
    text: str
    model: Model


_PILOTS: dict[tuple[object, ...], Pilot] = {}  # a pilot is deterministic in its public inputs: made once


def pilot_sizes(exp: Experiment) -> tuple[int, ...]:
    """The registries' public sizes: ``[simulate]``'s, else ``[warm_start] n_records`` split evenly."""
    if exp.simulate is not None and exp.simulate.records:
        return exp.simulate.records
    n = exp.warm_start.n_records if exp.warm_start is not None else None
    if n is None:
        raise PlanRefused("no public record count for the pilot: give [warm_start] n_records")
    return tuple([n // exp.m] * exp.m)


def _pilot_records(exp: Experiment, model: Model) -> tuple[list[dict[str, npt.NDArray[np.float64]]], str]:
    """The pilot's records, one table a registry, and what they are, in words: the model's public synthetic
    registries at the public sizes, or a formula model's design dataset there
    (:func:`mechanisms.models.formula_design.design_dataset` at ``[design]``); :class:`PlanRefused` for a
    model with neither. Never a registry's records."""
    from mechanisms.models.formula import FormulaModel
    from mechanisms.models.formula_design import design_dataset

    sizes = pilot_sizes(exp)
    rng = np.random.default_rng(exp.seed)
    data = model.synthetic_data(rng, sizes)
    text = "the model's synthetic registries at the public sizes"
    if data is None and isinstance(model, FormulaModel):
        try:
            design = design_dataset(model, rng, sizes, exp.design)
        except ValueError as exc:
            raise PlanRefused(f"[design]: {exc}") from exc
        data, text = design.records, design.text
    if data is None:
        raise PlanRefused(
            f"model {model.name!r} has no synthetic_data (nor a formula's design dataset), so no pilot can "
            "be planned from it"
        )
    return data, text


def pilot_model(exp: Experiment, model: Model) -> Model:
    """The model the pilot plans with: with a ``[warm_start] ellipsoid``, the covariate ellipsoid the warm
    start's moments release sets, made from the pilot's records' exact moments (the release's own
    arithmetic without its noise: ``warmstart.with_ellipsoid``), so that the pilot prices decisions in the
    region the run will have (the same assumption as :func:`pilot`: the records are like the pilot's of the
    same size); ``model`` itself without one."""
    from coordinator.warm_start import warm_start_plan
    from mechanisms.models.ellipsoid import CovariateRegion
    from mechanisms.warmstart import in_memory_release, with_ellipsoid

    ws = exp.warm_start
    if ws is None or ws.ellipsoid is None or not isinstance(model, CovariateRegion):
        return model
    moments = warm_start_plan(ws, model, exp.m).moments
    if moments is None:
        return model
    data, _ = _pilot_records(exp, model)

    def exact(size: int) -> npt.NDArray[np.float64]:
        return np.zeros(size)

    total = in_memory_release(data, [exact] * len(data))(moments, None, model)
    n = sum(len(next(iter(d.values()))) for d in data)
    return with_ellipsoid(model, total, n, ws.ellipsoid)


def pilot(exp: Experiment, model: Model) -> Pilot:
    """The pilot of ``exp`` (:func:`_pilot_records`), its records checked, and clipped, by ``model``
    (:func:`pilot_model`'s for a pilot plan). Never a registry's records."""
    sizes = pilot_sizes(exp)
    key = (model, sizes, exp.seed, repr(exp.design))
    if key in _PILOTS:
        return _PILOTS[key]
    data, text = _pilot_records(exp, model)
    checked = [model.check_data(d) for d in data]
    pooled = {k: np.concatenate([d[k] for d in checked]) for k in checked[0]}
    for col in pooled.values():
        col.setflags(write=False)  # read-only: a formula's design of them is computed once
    mean, cov = exact_laplace(model, pooled)
    if len(_PILOTS) > 8:
        _PILOTS.clear()
    _PILOTS[key] = Pilot(LaplaceApproximation(mean, cov), pooled, text, model)
    return _PILOTS[key]


def pilot_laplace(exp: Experiment, model: Model) -> LaplaceApproximation:
    """The pilot's exact Laplace approximation (:func:`pilot`)."""
    return pilot(exp, model).laplace


def with_pilot(exp: Experiment, model: Model) -> tuple[Experiment, Pilot | None]:
    """``exp`` as a run makes it before anything is released, and its pilot (None when it needs none: no
    target and no formula warm start). A formula model's warm start releases its scores in the basis B of
    the pilot's covariance (B Bᵀ = Σ_pilot, Cholesky; ``Statistics.basis``), clipped at the model's exact
    bound on ‖Bᵀs‖ (``FormulaModel.score_norm_bound``; when it depends on θ, the releases' clip is the bound
    at each release's θ and the Gram block's the bound at the pilot's mean). Its steps start at the pilot's
    mean, a public point, unless the model jumps from 0 (bernoulli with an intercept: to the released
    prevalence's logit): a Weibull formula's five Fisher steps from 0 ended 100 posterior sd off, from the
    pilot's mean 0.3-0.6 sd (30,000 records, mu = 2-4). The pilot is made with :func:`pilot_model`'s model
    (with a ``[warm_start] ellipsoid``, in the region the run will have), its ``model``, which the pilot's
    plan uses. Public and deterministic: the same on a resumed run."""
    from mechanisms.models.formula import FormulaModel
    from mechanisms.warmstart import score_bound

    ws = exp.warm_start
    formula = isinstance(model, FormulaModel) and ws is not None
    if exp.budget_target is None and not formula:
        return exp, None
    p = pilot(exp, pilot_model(exp, model))
    if not isinstance(model, FormulaModel) or ws is None or ws.basis is not None:
        return exp, p
    b = np.asarray(np.linalg.cholesky(p.laplace.cov), dtype=np.float64)
    clip = score_bound(model, None, b)
    if clip is None:
        clip = score_bound(model, p.laplace.mean, b)
    if clip is None or not (math.isfinite(clip) and clip > 0):
        return exp, p  # no finite bound at the pilot's mean: the parameters' own coordinates, clipped
    basis = tuple(tuple(float(v) for v in row) for row in b)
    jumps = model.family == "bernoulli" and "Intercept" in model.parsed.names
    start = None if jumps else tuple(float(v) for v in p.laplace.mean)
    settings = dataclasses.replace(ws, basis=basis, basis_clip=clip, start=start)
    return dataclasses.replace(exp, warm_start=settings), p


def renyi_order(exp: Experiment) -> float:
    """The order of the registries' Rényi filter: ``budget_order`` of their own budget (``[simulate]
    party_epsilon``, what a simulated registry's ``RDPBudget`` fixes) when the file sets it, else of the
    target (a registry whose budget is the target)."""
    from mechanisms.privacy.renyi import budget_order

    target, sim = exp.budget_target, exp.simulate
    assert target is not None
    if sim is not None and sim.party_epsilon is not None and sim.party_delta is not None:
        return budget_order(sim.party_epsilon, sim.party_delta)
    return budget_order(target.epsilon, target.delta)


def renyi_table(exp: Experiment, cap: float | None = None) -> BitRdpTable | None:
    """The one-order table of the accept bit's Rényi bound a registry of the target's view charges each
    decision with (``mechanisms.privacy.charge.accept_bit_table``, the ledger's own) up to the cap (``cap``,
    else ``[sampler] max_sensitivity``); None for a target planned with the GDP composition (a Rényi
    target's view sees only the bit: ``check_accountant``)."""
    from mechanisms.privacy.charge import accept_bit_table
    from mechanisms.privacy.threat import coalition_view

    target, pen = exp.budget_target, exp.sampler.penalty
    assert target is not None and pen is not None and pen.sd is not None
    if target.accountant != "renyi":
        return None
    cap = pen.max_sensitivity if cap is None else cap
    if cap is None or not math.isfinite(cap):
        raise PlanRefused(
            "[privacy] accountant = 'renyi' needs a finite cap on c (the table's range): [sampler] "
            "max_sensitivity"
        )
    view = coalition_view(exp.reveal_mode, exp.m, exp.t, target.colluding)
    return accept_bit_table(pen.sd, view, float(cap), (renyi_order(exp),))


def plan_cap(exp: Experiment, model: Model, laplace: LaplaceApproximation) -> float | None:
    """The cap on c(θ, θ*) the plan uses: ``[sampler] max_sensitivity``, or when the file leaves it to the
    plan (``choose_cap``) the 99.9 % quantile of c under ``laplace`` (:func:`quantile_cap`; public seed)."""
    target, pen, ws = exp.budget_target, exp.sampler.penalty, exp.warm_start
    assert target is not None and pen is not None and ws is not None
    if not target.choose_cap:
        return pen.max_sensitivity
    rng = np.random.default_rng(exp.seed + 101)
    cap = quantile_cap(model, laplace.mean, laplace.cov, ws.inflate, rng)
    if not (math.isfinite(cap) and cap > 0):
        raise PlanRefused(
            f"the plan cannot choose a cap on c: its 99.9 % quantile under the approximation is {cap:g} (the "
            "model's bound is infinite for many proposals); give [sampler] max_sensitivity"
        )
    return cap


def cap_advice(exp: Experiment, model: Model, laplace: LaplaceApproximation, p: AnyPlan) -> str | None:
    """A line when the file's cap refuses more than a tenth of the plan's proposals before any registry is
    asked (each such proposal is a rejection the budget does not pay for, but the chain stands still), with
    the cap the plan would choose; None otherwise."""
    target = exp.budget_target
    if isinstance(p, BlockedPlan):  # a blocked plan chooses its cap, or prices the file's (its text says)
        return None
    if target is None or target.choose_cap or p.stats.asked >= 0.9 or exp.warm_start is None:
        return None
    rng = np.random.default_rng(exp.seed + 101)
    q = quantile_cap(model, laplace.mean, laplace.cov, exp.warm_start.inflate, rng)
    return (
        f"the cap [sampler] max_sensitivity = {p.stats.cap:g} refuses {1 - p.stats.asked:.0%} of the "
        "proposals before any registry is asked (the chain stands still there): leave it out and the plan "
        f"chooses the 99.9 % quantile of c, {q:.3g} here"
    )


def worst_record(exp: Experiment, model: Model, cap: float | None = None) -> WorstRecordCharge | None:
    """The per-run charge a registry of the target's view applies to this run when the target says the
    registries charge per run (``[privacy] per_run = "worst-record"``): the ledger's own
    (``DecisionPlan.worst_record_charge`` of the session's plan and ``model``, at the Rényi filter's order
    for a Rényi target), with the cap on c the run will have (``cap``, :func:`plan_cap`'s; None: the
    file's);
    None when they charge per decision, or when their rule keeps the per-decision charge for this session (a
    model without a linear predictor, no cap): the plan then prices per decision, as they charge."""
    from mechanisms.kinds import worst_record_charge
    from mechanisms.privacy.threat import coalition_view

    target = exp.budget_target
    assert target is not None
    if target.per_run != "worst-record":
        return None
    table = renyi_table(exp, cap)
    view = coalition_view(exp.reveal_mode, exp.m, exp.t, target.colluding)
    orders = None if table is None else table.orders
    decisions = exp.decision_plan()
    if cap is not None and decisions.penalty is not None:  # the plan's cap, as planned_experiment sets it
        decisions = dataclasses.replace(
            decisions, penalty=dataclasses.replace(decisions.penalty, max_sensitivity=cap)
        )
    return worst_record_charge(decisions, model, view, target.neighbours, orders)


# A per-run plan's charge is read off runs simulated from the approximation and charged as the registries
# charge them (mechanisms.planning, RunCharge), warm-up and refits included: CHARGE_RUNS of them, priced at
# the largest of them and their mean plus SPREAD standard deviations (one run's charge varies with its chains
# and its proposal's refit: 8 % sd in the demo). A plan never buys past the simulated run: when the budget
# would buy more (read past it at its last rate), the runs are simulated again at LONGER times that length
# (at most PER_RUN_ROUNDS times, and never past the file's [sampler] iterations, which the run never passes:
# the plan then buys the run simulated, less than the budget allows, and says what that spends).
CHARGE_RUNS = 6
SPREAD = 2.0
LONGER = 1.15
PER_RUN_ROUNDS = 3


AnyPlan = McmcPlan | BlockedPlan


def warm_mu(exp: Experiment, model: Model) -> float:
    """The warm start's μ for the target's view: [warm_start] mu (against the coordinator, add-remove) scaled
    by √(m / r) for the coalition; for replace-one each release as the registries' ledgers charge it
    (``mechanisms.warmstart.release_mu``: at most twice, the Gram blocks √2 times)."""
    from coordinator.warm_start import warm_start_plan
    from mechanisms.warmstart import release_mu

    target, ws = exp.budget_target, exp.warm_start
    assert target is not None and ws is not None
    residual = exp.m - target.colluding
    if target.neighbours == "add-remove":
        return ws.mu * math.sqrt(exp.m / residual)
    releases = warm_start_plan(ws, model, exp.m).releases()
    return math.sqrt(sum(release_mu(r, model, residual, target.neighbours) ** 2 for r in releases))


def plan(exp: Experiment, model: Model, laplace: LaplaceApproximation) -> McmcPlan:
    """The plan for ``exp``'s target given a Laplace approximation (pilot or DP); a blocked run's is
    :func:`plan_blocked_run`'s (:func:`any_plan`)."""
    target, pen, ws = exp.budget_target, exp.sampler.penalty, exp.warm_start
    assert target is not None and pen is not None and pen.sd is not None and ws is not None
    sd_total = pen.sd * math.sqrt(exp.m)
    residual = exp.m - target.colluding
    cap = plan_cap(exp, model, laplace)
    table = renyi_table(exp, cap)
    wr = worst_record(exp, model, cap)
    from coordinator.warm_start import warm_start_plan
    from mechanisms.samplers.mh import WARM_INFLATE

    offset = mean_error_cov(warm_start_plan(ws, model, exp.m), model, laplace, exp.m)
    chains = exp.sampler.chains
    stand_in = StandIn(model, laplace.mean, laplace.cov, ws.inflate, sd_total, target.neighbours)
    warm_inflate = max(WARM_INFLATE, ws.inflate)  # a refitted proposal's in its warm-up (coordinator.drivers)
    base = ChainSettings(chains=chains, cap=cap, offset_cov=offset, warm_inflate=warm_inflate)

    def simulate(steps: int, seed: int, charge: bool = True, warmup: int = 0) -> ProposalStatistics:
        """``warmup`` > 0: a whole run as the driver makes it, from draws of the approximation, its proposal
        refitted at half the warm-up and at its end (``drivers.MHDriver.refits``) when it is."""
        refits = (warmup // 2, warmup) if exp.sampler.refit and warmup >= 4 else ()
        run = dataclasses.replace(base, steps=steps, from_proposal=warmup > 0, refits=refits)
        return proposal_statistics(
            stand_in, np.random.default_rng(seed), run, rdp_table=table, worst_record=wr if charge else None
        )

    budget = PlanBudget(
        eps=target.epsilon,
        delta=target.delta,
        mu_warm=warm_mu(exp, model),
        alpha=None if table is None else table.orders[0],
    )
    min_warmup = refit_warmup(model.d, chains) if exp.sampler.refit else 0

    def plan_with(stats: ProposalStatistics) -> McmcPlan:
        return plan_mcmc(
            stats, budget, sd_total=sd_total, m=exp.m, residual=residual, chains=chains, min_warmup=min_warmup
        )

    p = plan_with(simulate(400, exp.seed, charge=False))  # per decision: what per run buys at least
    if wr is not None:
        # charged per run: whole runs, warm-up included, at the length the budget buys (its rate falls with
        # the length), simulated again longer while the budget would buy more than the run simulated
        most = max(50, exp.sampler.iterations)  # the run never goes past the file's iterations
        length = min(most, max(50, math.ceil(3.0 * p.iterations)))  # per run: 0.3-0.4 of per decision
        for _ in range(PER_RUN_ROUNDS):
            warmup = warmup_of(p.stats, length, min_warmup)
            runs = [simulate(length, exp.seed + 10 + k, True, warmup) for k in range(1, CHARGE_RUNS + 1)]
            curve = RunCharge.envelope([r.run_charge for r in runs if r.run_charge is not None], SPREAD)
            p = plan_with(dataclasses.replace(p.stats, run_charge=curve))
            if p.affordable() <= length or length == most:
                break
            length = min(most, math.ceil(LONGER * p.affordable()))
    # ESS per proposal measured on chains of the run's length after its warm-up (short chains mix worse per
    # draw), 3 draws; the run never goes past the file's iterations, however many the budget would buy (a
    # budget of 3,000 bought 13,936 iterations that the Weibull daemon test's 400 never ran: 3 x 8 x 13,900
    # simulated proposals, each with the model's per-record bound, were most of its planner's minutes)
    length = min(p.iterations, max(50, exp.sampler.iterations))
    steps = max(50, length - warmup_of(p.stats, length, min_warmup))
    ess = float(np.mean([simulate(steps, exp.seed + k, False).ess_per_proposal for k in range(1, 4)]))
    p = plan_with(dataclasses.replace(p.stats, ess_per_proposal=ess))
    floor = floor_of(model, laplace.mean, laplace.cov, target.neighbours)
    return dataclasses.replace(p, floor=floor)


def any_plan(exp: Experiment, model: Model, laplace: LaplaceApproximation) -> AnyPlan:
    """The plan of ``exp``: a blocked run's (:func:`plan_blocked_run`) or the independence sampler's."""
    if exp.sampler.blocked:
        return plan_blocked_run(exp, model, laplace)
    return plan(exp, model, laplace)


def blocked_sweep_charge(exp: Experiment, model: Model, st: BlockedSettings) -> float:
    """μ² one sweep of every chain adds to a registry's ledger under ``st``: the registries' own charge
    (``DecisionPlan.events`` of the session's decision plan with these settings, as their dry run makes
    it: every shared decision at the cap, every local step at its cap), for the target's coalition and
    neighbour relation; the GDP reading (μ² summed), which their ledgers never exceed."""
    from mechanisms.kinds import DecisionPlan, decision_events
    from mechanisms.privacy import GaussianEvent
    from mechanisms.privacy.threat import coalition_view
    from mechanisms.samplers.requests import Penalty

    target = exp.budget_target
    assert target is not None
    local = dataclasses.replace(
        exp.local_settings(), sd=st.local_sd, max_step=st.local_max_step, steps=st.local_steps
    )
    pen = Penalty(tau=None, sd=st.sd_total / math.sqrt(exp.m), max_sensitivity=st.cap)
    decisions = DecisionPlan(model_args=dict(exp.model_params), kind="mh", penalty=pen, settings=local)
    view = coalition_view(exp.reveal_mode, exp.m, exp.t, target.colluding)
    events = decision_events(
        decisions, model, exp.reveal_mode, view, exp.sampler.chains, "plan", None, target.neighbours
    )
    assert all(isinstance(e, GaussianEvent) for e in events)
    return float(sum(e.count * e.mu**2 for e in events))  # type: ignore[attr-defined]


def blocked_candidates(exp: Experiment, shared: object, stand: object) -> list[BlockedSettings]:
    """The settings a planned blocked run compares (:mod:`mechanisms.planning_blocked`): the file's where
    it gives them, else the module's grids (the shared sd, the local step cap, the cap on c at public
    quantiles of the stand-in's c; the local noise at :data:`LOCAL_SD`)."""
    from mechanisms.models.hierarchy import SharedModel
    from mechanisms.planning_blocked import CAP_QUANTILES, LOCAL_SD, SD_GRID, STEP_GRID, StandIn, shared_cap

    assert isinstance(shared, SharedModel) and isinstance(stand, StandIn)
    s, target = exp.sampler, exp.budget_target
    assert target is not None and s.penalty is not None and s.local_sd is not None
    assert s.local_max_step is not None and s.penalty_total_sd is not None
    sds = SD_GRID if "sd" in s.chosen else (s.penalty_total_sd,)
    steps = STEP_GRID if "local_max_step" in s.chosen else (s.local_max_step,)
    local_sd = LOCAL_SD if "local_sd" in s.chosen else s.local_sd
    if target.choose_cap:
        caps = tuple(
            shared_cap(shared, stand, np.random.default_rng(exp.seed + 101), q) for q in CAP_QUANTILES
        )
    else:
        assert s.penalty.max_sensitivity is not None
        caps = (s.penalty.max_sensitivity,)
    return [
        BlockedSettings(sd, cap, local_sd, h, s.local_steps) for sd in sds for cap in caps for h in steps
    ]


def plan_blocked_run(exp: Experiment, model: Model, laplace: LaplaceApproximation) -> BlockedPlan:
    """A planned blocked run (:mod:`mechanisms.planning_blocked`): the settings and sweeps that buy the most
    expected ESS within the target, each sweep priced by the registries' own charge
    (:func:`blocked_sweep_charge`), the ESS simulated on the Gaussian stand-in of ``laplace`` (the pilot's:
    the design dataset's exact Laplace approximation); the floor at ``laplace``."""
    from mechanisms.models.hierarchy import SharedModel
    from mechanisms.planning_blocked import BlockedTarget, StandIn, plan_blocked

    target = exp.budget_target
    assert target is not None
    shared = SharedModel(model)
    stand = StandIn.from_laplace(shared, laplace.mean, laplace.cov)
    return plan_blocked(
        shared,
        stand,
        lambda st: blocked_sweep_charge(exp, model, st),
        blocked_candidates(exp, shared, stand),
        BlockedTarget(
            eps=target.epsilon,
            delta=target.delta,
            min_ess=target.min_ess,
            chains=exp.sampler.chains,
            most=exp.sampler.iterations,
            seed=exp.seed,
            floor=floor_of(model, laplace.mean, laplace.cov, target.neighbours),
            target_accept=exp.sampler.target_accept,
        ),
    )


def _check_blocked(exp: Experiment, p: BlockedPlan, what: str) -> None:
    """:func:`check_usable` of a blocked plan: refused below ``min_ess`` with what would buy it (the target
    the cheapest simulated run reaching it spends, its settings, and the iterations when the file's are too
    few), or that no setting tried reached it."""
    from mechanisms.planning_blocked import MAX_NEED_SWEEPS, MIN_SWEEPS

    target = exp.budget_target
    assert target is not None
    if p.ess >= target.min_ess:
        return
    bought = (
        f"buys an expected ESS of {p.ess:.0f} ({p.text()})"
        if p.iterations
        else f"buys fewer than {MIN_SWEEPS} sweeps at every setting tried (no run)"
    )
    head = f"{what}: the budget {target.text()} {bought}, below min_ess = {target.min_ess:g}."
    st = p.need_settings
    if st is None or not math.isfinite(p.need_eps):
        raise PlanRefused(
            f"{head} No setting the plan tried reached it within {MAX_NEED_SWEEPS} sweeps of its simulation "
            "(its chains did not mix, or too slowly, under this noise), whatever the target: a smaller "
            "min_ess, or other [sampler] settings (docs/PRIVACY.md, 'Planned blocked runs')"
        )
    if not p.need_simulated:
        raise PlanRefused(
            f"{head} No setting the plan simulated reached it within {MAX_NEED_SWEEPS} sweeps; at the ESS "
            f"per sweep of its longest simulated run, about {p.need_iterations} sweeps with {st.text()} "
            f"would, i.e. target_epsilon about {p.need_eps:g} and [sampler] iterations about "
            f"{p.need_iterations} (an extrapolation, not a simulated run), or a smaller min_ess"
        )
    longer = (
        f" and [sampler] iterations >= {p.need_iterations} (the file's {p.most} are too few)"
        if p.need_iterations > p.most
        else ""
    )
    raise PlanRefused(
        f"{head} It would fit with target_epsilon >= {p.need_eps:g}{longer}: {p.need_iterations} sweeps "
        f"with {st.text()} (the plan's cheapest simulated run reaching it), or a smaller min_ess. "
        f"{'' if p.floor is None else p.floor.line(target.min_ess, target.delta, p.need_eps)}".rstrip()
    )


def pilot_replan(
    exp: Experiment, model: Model, laplace: LaplaceApproximation, accept: npt.NDArray[np.bool_]
) -> tuple[McmcPlan, McmcPlan, float]:
    """(the plan, the plan re-made from the pilot, the offset in approximation sds the pilot shows): the
    pilot is the run's warm-up, ``accept`` its accept bits (warm-up steps, chains: released to the
    coordinator, charged). The plan from the DP approximation assumes only its DP noise's offset; a warm
    start further off (unconverged, a clip's bias) mixes far worse, and the pilot's acceptance says so
    (:func:`mechanisms.planning.pilot_offset`). Public: post-processing of the plan and the released bits."""
    target, pen, ws = exp.budget_target, exp.sampler.penalty, exp.warm_start
    assert target is not None and pen is not None and pen.sd is not None and ws is not None
    p = plan(exp, model, laplace)
    sd_total = pen.sd * math.sqrt(exp.m)
    accepted, proposed, count_from = pilot_bits(accept)
    steps = accept.shape[0]
    stand_in = StandIn(model, laplace.mean, laplace.cov, ws.inflate, sd_total, target.neighbours)
    r = pilot_offset(
        stand_in, p.stats.cap, accepted=accepted, proposed=proposed, steps=steps, chains=exp.sampler.chains,
        seed=exp.seed + 11, count_from=count_from,
    )  # fmt: skip
    rest = ChainSettings(
        chains=exp.sampler.chains, steps=max(exp.sampler.iterations - steps, 50), cap=p.stats.cap
    )
    after = offset_statistics(
        stand_in, r, rest, seed=exp.seed + 13, rdp_table=renyi_table(exp, p.stats.cap),
        worst_record=worst_record(exp, model, p.stats.cap),
    )  # fmt: skip
    p = dataclasses.replace(p, iterations=exp.sampler.iterations)  # the length run (at most the file's)
    re = replan_after_pilot(p, after, steps, sd_total=sd_total, m=exp.m, residual=exp.m - target.colluding)
    return p, re, r


def check_usable(exp: Experiment, p: AnyPlan, what: str) -> None:
    """Refuse a plan that buys fewer than ``min_ess`` effective draws (:class:`PlanRefused`), saying what
    would fit: the target a planned run needs (priced at this plan's cost per proposal and ESS per
    proposal, also when the budget bought no decision), or that the warm start alone spends the target,
    or how many times the records (a decision's charge falls like 1/n, the warm start's does not)."""
    if isinstance(p, BlockedPlan):
        _check_blocked(exp, p, what)
        return
    target = exp.budget_target
    assert target is not None
    if p.ess >= target.min_ess:
        return
    acc, warm_mu = p.accounting, p.mu_warm
    warm_eps = acc.eps(acc.warm(warm_mu))
    if p.warm_alone:
        raise PlanRefused(
            f"{what}: the warm start alone (mu = {warm_mu:.3g} for this view) spends eps = {warm_eps:.3g} at "
            f"delta = {target.delta:g}, above the target {target.text()}: no decision fits. An ESS of "
            f"{target.min_ess:g} needs target_epsilon >= {p.eps_for_ess(target.min_ess):.3g} with this warm "
            "start, or a smaller [warm_start] mu (a noisier approximation, more decisions)"
        )
    need_total = p.total_for_ess(target.min_ess)
    have = max(p.budget_total - acc.warm(warm_mu), 1e-300)
    records = (need_total - acc.warm(warm_mu)) / have
    spend = "" if p.iterations == 0 else f" ({p.text()})"
    raise PlanRefused(
        f"{what}: the budget {target.text()} buys an expected ESS of {p.ess:.0f}{spend}, below min_ess = "
        f"{target.min_ess:g}. It would fit with target_epsilon >= {p.eps_for_ess(target.min_ess):.3g}, or "
        f"about {records:.3g}x the records (a decision's charge falls like 1/n; the warm start's "
        f"eps = {warm_eps:.3g} does not), or a smaller min_ess. {p.floor_line(target.min_ess)}"
    )


WARM_MUS = (0.5, 1.0, 2.0, 4.0, 8.0)  # the warm start's μ the offline plan compares (registry_scale's range)


def warm_mu_advice(
    exp: Experiment, model: Model, laplace: LaplaceApproximation, made: AnyPlan | None = None
) -> str | None:
    """The registry-scale design chooses the warm start's μ on public records (``simulations.
    registry_scale``: a better proposal repays a larger warm start): a line naming the μ of
    :data:`WARM_MUS` whose plan buys ``min_ess`` for the smallest ε, when it is at least 10 % below the
    file's; None otherwise. Each μ is planned from the same approximation (its DP offset is μ's); ``made``,
    the caller's :func:`plan` of ``exp`` itself from ``laplace`` when it has one, is the file's μ's (the
    same plan: its simulations are seeded by the file)."""
    target, ws = exp.budget_target, exp.warm_start
    assert target is not None
    if ws is None:  # a blocked run: no warm start
        return None

    def need(mu: float) -> float:
        e = dataclasses.replace(exp, warm_start=dataclasses.replace(ws, mu=mu))
        return plan(e, model, laplace).eps_for_ess(target.min_ess)

    mine = made.eps_for_ess(target.min_ess) if isinstance(made, McmcPlan) else need(ws.mu)
    best = min(((need(mu), mu) for mu in WARM_MUS if mu != ws.mu), default=(math.inf, ws.mu))
    if not best[0] < 0.9 * mine:
        return None
    return (
        f"[warm_start] mu = {best[1]:g} would buy min_ess = {target.min_ess:g} for eps = {best[0]:.3g} (this "
        f"file's mu = {ws.mu:g}: {mine:.3g}): a closer proposal repays a larger warm start"
    )


def other_readings(
    exp: Experiment, model: Model, reports: dict[int, object], run_id: str
) -> dict[int, list[str]]:
    """The run's privacy in the views beside each registry's own, for its statement's other readings: its
    ledger charges this run with Gaussian events whose μ is Δ √m / (sd √r) (decisions) or Δ / (sd √r)
    (warm-start releases), r = m - q the registries whose noise the coalition does not know, so another
    coalition size q' scales every μ by √(r / r') exactly, and replace-one at most doubles every Δ of these
    models (their c is twice their bound: no ``record_ratio_range``) and never charges one below its
    add-remove Δ (a tight replace-one range is at least the bound, ``record_replace_range``; a warm start's
    Gram block is charged √2 times its add-remove bound): an add-remove reading of replace-one charges is
    therefore read at the same μ. Recomputed from the registry's own charges of this run, for the q and the
    neighbour relation their labels say they were computed for (none when they do not say, or differ); each
    reading says its view and how it was read. For a registry whose decisions were charged per decision
    with the accept bit's Rényi bound (a Rényi filter, reveal sign) the reading for a
    coalition that still sees only the bit is that bound with the noise it leaves unknown, at the registry's
    order (``mechanisms.privacy.charge.coalition_rdp``: each batch's charge times the largest ratio of the
    two views' bounds over Δ <= the cap; issue 35 item 3.5) or the GDP reading, the smaller (both hold; at the
    filter's one order the Rényi conversion costs more than GDP's for a short run); otherwise the GDP reading
    (valid whatever the accountant)."""
    from coordinator.privacy import parse_events
    from coordinator.privacy_statement import coalition, event_view
    from mechanisms.privacy import GaussianEvent
    from mechanisms.privacy.conversions import gdp_eps

    target = exp.budget_target
    if target is None or model.record_ratio_range(np.zeros((1, model.d)), np.zeros((1, model.d))) is not None:
        return {}
    m, delta = exp.m, target.delta
    out: dict[int, list[str]] = {}
    for pid, r in sorted(reports.items()):
        ledger = parse_events(getattr(r, "events_json", ""))
        events = [e for e in ledger if f"run {run_id}" in (e.label or "")]
        said = [event_view(e.label) for e in events]
        views = {(v.neighbours, v.q) if v is not None else None for v in said}
        if not events or not all(isinstance(e, GaussianEvent) for e in events) or len(views) != 1:
            continue
        (view,) = views  # one relation and one coalition for every charge of the run
        if view is None:
            continue
        neighbours, q_now = view
        mu = math.sqrt(sum(e.count * e.mu**2 for e in events))  # type: ignore[attr-defined]
        what = "GDP reading of this run's charges"
        readings = []
        if len(events) < len(ledger):  # its ledger holds other runs' charges too: this run's alone
            readings.append(
                f"{what} as charged: epsilon = {gdp_eps(mu, delta):.4g} at delta = {delta:.3g} (GDP mu = "
                f"{mu:.4g})"
            )
        for q in sorted({0, min(3, m - 1), (m - 1) // 2} - {q_now}):
            mu_q = mu * math.sqrt((m - q_now) / (m - q))
            eps_q = gdp_eps(mu_q, delta)
            renyi = _coalition_renyi(exp, events, q_now, q, delta)
            if renyi is None:
                readings.append(f"{what} {coalition(q, m)}: epsilon = {eps_q:.4g} at delta = {delta:.3g}")
            else:  # two valid readings of the same charges: the smaller holds
                eps_r, alpha, ratio = renyi
                bits = f"order {alpha:g}, at most {ratio:.3g}x the one charged"
                readings.append(
                    f"reading of this run's charges {coalition(q, m)}: epsilon = {min(eps_r, eps_q):.4g} at "
                    f"delta = {delta:.3g}, the smaller of the accept bits' Renyi bound with the noise they "
                    f"do not know ({bits}): {eps_r:.4g}, and the GDP reading: {eps_q:.4g}"
                )
        other = "replace-one" if neighbours == "add-remove" else "add-remove"
        # replace-one charges each Δ at most twice and at least once its add-remove one (a range of a
        # log-ratio is at least its bound; a warm start's Gram block √2 times it): x2 one way, x1 the other
        mu_n = mu * (2.0 if other == "replace-one" else 1.0)
        eps_n = gdp_eps(mu_n, delta)
        readings.append(f"{what} for {other} neighbours: epsilon = {eps_n:.4g} at delta = {delta:.3g}")
        out[pid] = readings
    return out


def _coalition_renyi(
    exp: Experiment, events: list[PrivacyEvent], q_now: int, q: int, delta: float
) -> tuple[float, float, float] | None:
    """(ε at ``delta``, the order, the largest ratio of the two views' bounds) of the run's ``events`` for a
    coalition of ``q`` by the accept bit's Rényi bound, or None when it does not apply: every decision charge
    must be the fixed-sd penalty's per-decision Rényi event at one order (a run charged at its worst record,
    or under a GDP or PLD budget, keeps the GDP reading), and both coalitions must see only the bit."""
    from mechanisms.privacy import RenyiEvent
    from mechanisms.privacy.charge import coalition_rdp
    from mechanisms.privacy.renyi import rdp_eps

    pen = exp.sampler.penalty
    if pen is None or pen.sd is None or pen.max_sensitivity is None:
        return None
    bits = [e for e in events if isinstance(e, RenyiEvent)]
    decisions = [e for e in events if "warm start" not in (e.label or "")]
    orders = {e.orders for e in bits}
    if not bits or len(bits) != len(decisions) or len(orders) != 1 or len(next(iter(orders))) != 1:
        return None
    if not all("per decision" in (e.label or "") for e in bits):
        return None
    alpha = float(next(iter(orders))[0])
    cap = float(pen.max_sensitivity)
    got = coalition_rdp(events, pen.sd, cap, exp.reveal_mode, exp.m, exp.t, q_now, q, alpha)
    if got is None:
        return None
    rho, ratio = got
    return rdp_eps(rho, alpha, delta), alpha, ratio


def planned_experiment(exp: Experiment, p: AnyPlan) -> Experiment:
    """``exp`` with the planned iterations (at most the file's), the plan's warm-up and, when the file
    leaves it to the plan, the plan's cap (``[sampler] max_sensitivity``); a blocked plan's settings
    (:func:`planned_blocked`)."""
    if isinstance(p, BlockedPlan):
        return planned_blocked(exp, p)
    s = exp.sampler
    iterations = max(2, min(p.iterations, s.iterations))
    warmup = max(1, warmup_of(p.stats, iterations, p.min_warmup))
    s = dataclasses.replace(s, iterations=iterations, warmup=warmup)
    target = exp.budget_target
    if target is not None and target.choose_cap and s.penalty is not None:
        s = dataclasses.replace(s, penalty=dataclasses.replace(s.penalty, max_sensitivity=p.stats.cap))
    return dataclasses.replace(exp, sampler=s)


def planned_blocked(exp: Experiment, p: BlockedPlan) -> Experiment:
    """``exp`` with a blocked plan's settings: its sweeps (``[sampler] iterations``), the adaptation of a
    run that long (the defaults of ``coordinator.sampler_settings._adapt``: adapt_stop and the warm-up its
    half, as the plan simulated), the shared penalty's sd (each registry's sd / √m) and cap, and the local
    steps' sd, cap and count."""
    s, st = exp.sampler, p.settings
    it = max(p.iterations, 8)
    assert s.penalty is not None
    pen = dataclasses.replace(s.penalty, sd=st.sd_total / math.sqrt(exp.m), max_sensitivity=st.cap)
    stop = max(it // 2, 2)
    s = dataclasses.replace(
        s, iterations=it, warmup=stop, adapt_start=max(it // 10, 1), adapt_every=max(it // 40, 1),
        adapt_stop=stop, history_from=it // 20, penalty=pen, penalty_total_sd=st.sd_total,
        local_sd=st.local_sd, local_max_step=st.local_max_step, local_steps=st.local_steps, chosen=(),
    )  # fmt: skip
    return dataclasses.replace(exp, sampler=s)
