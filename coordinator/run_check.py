"""``confar run --check``: what a run would refuse, found before anything is contacted — the file, the
model's public side, every name the outputs will hold, with ``--simulate`` the simulated registries' records
and what their budgets refuse (their own charge rule on the plan, the whole run's projected spend), and a
planned run's pilot plan. Refusals name the experiment file's keys, not the session's wire keys
(:func:`in_file_keys`)."""

from __future__ import annotations

import sys

from coordinator import planner
from coordinator.experiment import Experiment, check_model
from coordinator.plugins import service


def check(exp: Experiment, simulate: bool) -> int:
    """``confar run --check``: the file, the model's public side and, with --simulate, each simulated
    registry's data against the model (schema and log-likelihood); no party is contacted. Exit 0 or 2."""
    from mechanisms.models.base import likelihood_problem

    problems = check_model(exp) + output_name_problems(exp)
    if simulate and not problems and exp.simulate is not None:
        mod = service("local-consortium")
        try:
            data = mod.synthetic_data(exp)
        except ValueError as exc:
            problems.append(f"simulate: {exc}")
        else:
            if not exp.sampler.simulator_run:
                model = exp.model()
                for pid, cols in enumerate(data, start=1):
                    what = likelihood_problem(model, cols)
                    if what is not None:
                        problems.append(f"simulate: registry {pid}'s records: {what}")
                problems += _budget_refusals(exp)
    plan_text = ""
    if not problems and exp.budget_target is not None:  # a planned run: the pilot plan, as the run makes it
        try:
            planned, pilot = planner.with_pilot(exp, exp.model())
            assert pilot is not None
            model = pilot.model  # the pilot's: in the covariate ellipsoid the warm start will set, if any
            what = f"plan from the pilot ({pilot.text})"
            mp = planner.any_plan(planned, model, pilot.laplace)
            planner.check_usable(planned, mp, what)
            plan_text = f"{what}, for {exp.budget_target.text()}: {mp.text()}"
            advice = planner.cap_advice(planned, model, pilot.laplace, mp)
            plan_text += f"\nWARNING: {advice}" if advice is not None else ""
        except planner.PlanRefused as exc:
            problems.append(str(exc))
        sim = exp.simulate
        target = exp.budget_target
        if (
            simulate
            and sim is not None
            and sim.party_epsilon is not None
            and target.epsilon is not None
            and target.epsilon > sim.party_epsilon
        ):
            problems.append(
                f"[privacy] target_epsilon = {target.epsilon:g} is above the simulated registries' budget "
                f"([simulate] party_epsilon = {sim.party_epsilon:g}): they would stop the run when it is "
                "spent"
            )
    for p in problems:
        print(f"confar run: {exp.source}: {p}", file=sys.stderr)
    if problems:
        return 2
    print(f"{exp.source}: valid ({exp.sampler.kind}, {exp.m} parties, reveal {exp.reveal_mode})")
    if plan_text:
        print(plan_text)
    if exp.sampler.scale_adapt:
        print(_auto_proposal_line(exp))
    if not exp.sampler.simulator_run:
        print(f"model: {exp.model_name}: prior draws in bounds with a finite log prior")
        if exp.formats:
            print(f"parameters (as the outputs name them): {', '.join(exp.model().param_names)}")
        if simulate:
            print(f"simulate: {exp.m} registries' records fit the model, log-likelihood finite")
    return 0


def output_name_problems(exp: Experiment) -> list[str]:
    """Every name the run's outputs will hold (posterior.nc variables, draws.csv and summary.csv columns)
    against the output writer's rule (``coordinator.outputs.result.name_problem``): the model's parameter
    names (and a name given twice), the sampler's sample statistics, the public constants. ``confar run
    --check`` reports them, and a run refuses them before anything is released or charged (an unusable
    name once surfaced only when the outputs were written, after the whole run)."""
    if not exp.formats:  # [output] formats = []: nothing is written
        return []
    from coordinator.drivers import stat_names
    from coordinator.outcome import constant_data
    from coordinator.outputs.result import name_problem

    problems = []
    if not exp.sampler.simulator_run:  # ABCDP's draws are w1..wk, named by the coordinator
        formula = exp.model_name == "formula"
        key = "model.formula" if formula else "model.name"
        fix = "rename the column" if formula else "rename it in the model's param_names"
        names = list(exp.model().param_names)
        for name in names:
            why = name_problem(name)
            if why is not None:
                problems.append(f"{key}: parameter name {why}: the run's outputs could not hold it ({fix})")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            problems.append(f"{key}: parameter names {twice} given twice (the outputs need distinct names)")
    for name in (*stat_names(exp.sampler), *constant_data(exp, exp.m)):
        why = name_problem(name)
        if why is not None:
            problems.append(f"sampler: output name {why}")
    return problems


#: the session's wire keys, as the experiment file says them (a registry's refusal names the wire)
WIRE_KEYS = {"model_params.penalty": '[sampler] kind = "penalty"', "model_params.lazy": "[sampler] lazy"}


def _auto_proposal_line(exp: Experiment) -> str:
    """What the automatic proposal (no proposal_scale) will do: the acceptance its accept bits are steered
    to (lowered for a lazy coin or a penalty sd: ``AdaptiveMH.accept_target``) and until when."""
    from mechanisms.samplers.mh import accept_target

    s = exp.sampler
    if s.blocked:
        return (
            "proposal: blocked (a registry random intercept): each registry updates its own effect z_j where "
            "its records are (never sent during the run); the shared block (the coefficients, log sigma_u) "
            f"by a random walk tuned until adapt_stop = {s.adapt_stop}, then frozen: an independence "
            f"proposal fitted to the warm-up's second half (warmup = {s.warmup})"
        )
    rate = accept_target(exp.model().d, s.target_accept, s.penalty, exp.m, s.lazy)
    return (
        f"proposal: tuned automatically: each chain's scale steered to acceptance {rate:.3g} by its accept "
        f"bits until adapt_stop = {s.adapt_stop}, frozen from there (warmup = {s.warmup})"
    )


def in_file_keys(message: str) -> str:
    for wire, key in WIRE_KEYS.items():
        message = message.replace(wire, key)
    return message


def _budget_refusals(exp: Experiment) -> list[str]:
    """What a simulated registry with a privacy budget refuses before the first batch: a plan whose
    decisions it cannot account (``mechanisms.privacy.charge``, the rule its daemon applies), and a run
    whose projected spend passes its budget (as the run's dry run refuses it: for a penalty with sd at the
    cap, the most a decision can cost; not for a planned run, nor with ``[privacy] stop_at_budget``)."""
    sim = exp.simulate
    if sim is None or (sim.party_epsilon is None and sim.party_gdp_mu is None):
        return []
    from mechanisms.kinds import decision_events
    from mechanisms.privacy.charge import Unaccountable
    from mechanisms.privacy.threat import coalition_view

    if exp.budget_target is not None and exp.sampler.blocked:  # its settings are the plan's: it prices each
        return []  # sweep with the registries' own charge (coordinator.planner.blocked_sweep_charge)
    colluding = exp.m - 1 if sim.party_colluding is None else sim.party_colluding
    view = coalition_view(exp.reveal_mode, exp.m, exp.t, colluding)
    plan = exp.decision_plan()
    per_decision = plan.penalty is not None and plan.penalty.fixed
    if per_decision and (exp.budget_target is not None or sim.party_accountant == "renyi"):
        return []  # planned at the expected charge; a Renyi filter reads the cap's charge its own way
    neighbours = sim.party_neighbours or "replace-one"
    n = exp.sampler.decisions_per_batch
    try:
        model = exp.model()
        events = decision_events(plan, model, exp.reveal_mode, view, n, exp.model_name, None, neighbours)
    except Unaccountable as exc:
        return [
            f"the simulated registries have privacy budgets ([simulate] party_epsilon / party_gdp_mu) and "
            f"would refuse this run: {in_file_keys(str(exc))}"
        ]
    if exp.stop_at_budget:  # the run may stop where a registry's budget runs out
        return []
    from coordinator.privacy import recompose
    from mechanisms.privacy.events import scaled

    batches = exp.sampler.batches
    delta = sim.party_delta if sim.party_delta is not None else 1e-5
    spend = recompose(scaled(events, batches), delta)
    at_cap = " at the cap max_sensitivity (the most a decision can cost)" if per_decision else ""
    or_stop = "; or accept a run that stops at the budget: [privacy] stop_at_budget = true"
    if sim.party_epsilon is not None and spend.eps > sim.party_epsilon * (1 + 1e-12):
        return [
            f"the simulated registries' budget ([simulate] party_epsilon = {sim.party_epsilon:g} at delta = "
            f"{delta:g}, {neighbours}) does not fit the run: {batches} batches of {n} decisions spend eps = "
            f"{spend.eps:.4g}{at_cap} (fewer [sampler] iterations, more noise, or a larger budget{or_stop})"
        ]
    if sim.party_gdp_mu is not None and spend.gdp_mu is not None and spend.gdp_mu > sim.party_gdp_mu:
        return [
            f"the simulated registries' budget ([simulate] party_gdp_mu = {sim.party_gdp_mu:g}) does not fit "
            f"the run: {batches} batches of {n} decisions spend mu = {spend.gdp_mu:.4g}{at_cap}{or_stop}"
        ]
    return []
