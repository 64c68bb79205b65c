"""A run's privacy, coordinator side: the dry run before it, the target check, what it spent, the reports.

Before a run (or a resumed run's remaining batches) every party answers ``PlanPrivacy`` for the planned
session (no data read, nothing charged); a party that would refuse stops the run with its reason. A run
whose dry run passes a registry's privacy budget is refused too, also when its decisions are charged per
decision (where the dry run charges the cap, an upper bound): a registry refuses a batch past its budget,
and a run cut short in its warm-up has no posterior. Two exceptions: a planned run (``[privacy]
target_epsilon``, sized by the planner at the expected charge), and ``[privacy] stop_at_budget = true``,
which accepts a run that stops where a registry's budget runs out and says up front where that may be. With
a run with a DP warm start the sampling's dry run is asked before the warm start too, so that a run whose
sampling alone passes a budget releases nothing. With a ``[privacy]`` target, each party's per-batch events
for the whole run are composed here (GDP μ, or ε at δ by PLD) and must fit it. After the run every party's
``PrivacyReport`` (its own ledger) goes to the outputs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from coordinator import privacy as cprivacy
from coordinator.checkpoint import RunError
from coordinator.experiment import Experiment
from mechanisms.privacy import scaled
from proto.spec import PartyEntry
from proto.tls import TlsMaterial


def plan_file(exp: Experiment, endpoints: list[PartyEntry], tls: TlsMaterial | None, batches: int) -> Any:
    s = exp.sampler
    return cprivacy.PlanFile(
        source=exp.source,
        identity=exp.coordinator.identity,
        tls=tls,
        rpc_timeout_s=exp.coordinator.rpc_timeout_s,
        parties=endpoints,
        session=cprivacy.PlannedSession(
            analysis=exp.analysis(),
            reveal_mode=exp.reveal_mode,
            params=exp.session_params(),
            topology=exp.topology,
            threshold=exp.threshold,
            batches=max(batches, 1),
            batch_size=s.decisions_per_batch,
            security=exp.security,
            study=exp.study_text,
        ),
    )


@dataclass
class PrivacyPlan:
    per_batch: dict[int, list[Any]]  # party -> events of one batch (what the party reported)
    text: str
    composed: dict[int, cprivacy.Spend] = field(default_factory=dict)
    per_decision: bool = False  # decisions charged at their own sensitivity: per_batch is the cap's bound
    may_stop: str = ""  # [privacy] stop_at_budget: where the run may stop at a registry's budget
    per_run: bool = False  # the registries charge the run at its worst record (charged_per_run)

    def spent_text(self, run_steps: int) -> str:
        """Largest GDP μ over parties after ``run_steps`` batches, when every event has a GDP bound."""
        if self.per_decision:
            how = "per run at its worst record" if self.per_run else "per decision"
            return f"privacy: charged {how} by each registry (its ledger; `confar privacy report`)"
        mus = []
        if any(not events for events in self.per_batch.values()):
            return "privacy: not accounted (a party keeps no budget: no number is stated)"
        for events in self.per_batch.values():
            per = [e.gdp_mu() for e in events]
            if any(mu is None for mu in per):
                return ""
            mus.append(
                math.sqrt(run_steps * sum(e.count * mu * mu for e, mu in zip(events, per, strict=True)))
            )
        return f"privacy spent <= mu {max(mus):.3g} (GDP, planned per-batch events)" if mus else ""


def check_privacy(
    exp: Experiment,
    pf: Any,
    remaining: int,
    already_charged: set[int] | frozenset[int] = frozenset(),
    before_release: bool = False,
) -> PrivacyPlan:
    """Every party's PlanPrivacy; raise RunError with each refusing party's reason or a missed target.

    A party that refuses only because the run would pass its privacy budget (:func:`_over_budget`) stops
    the run here too, naming the figures and the fix, unless the run may stop partway: a planned run
    (``[privacy] target_epsilon``) charged per decision, whose length the planner priced at the expected
    charge (the dry run charges the cap, an upper bound), or ``[privacy] stop_at_budget = true``, which
    accepts a run that stops when a registry's budget runs out (the plan's ``may_stop`` says where).

    ``already_charged``: parties that charged this (resumed ABCDP) run's whole-run epsilon already; their
    refusal does not stop the run (they charge nothing more, and refuse at open if they cannot go on).
    ``before_release``: the check before the DP warm start releases anything, of the sampling's session as
    the file gives it (its charge at the cap does not depend on the warm start's covariate region): only a
    budget it would pass stops the run (the check after the warm start, with the session that runs, is the
    complete one)."""
    answers = cprivacy.plan(pf)
    text, _ = cprivacy.format_plan(pf, answers)
    refusing = {pid for pid, r in answers.items() if isinstance(r, str) or r.would_refuse}
    moot = {pid for pid in refusing if pid in already_charged and not isinstance(answers[pid], str)}
    pen = exp.sampler.penalty
    per_decision = pen is not None and pen.fixed
    cap = pen.max_sensitivity if pen is not None else None
    over: set[int] = set()
    if not exp.sampler.simulator_run:  # ABCDP is charged once per run, at its start: it cannot stop partway
        over = {pid for pid in refusing - moot if _over_budget(answers[pid], pf, per_decision)}
    others = refusing - moot - over
    if before_release:
        others = set()  # refusals for other reasons are asked again, of the session that runs
    if others:
        if over and per_decision:
            text += f"\nparties {sorted(over)}: {_cap_note(cap, per_run=charged_per_run(exp))}"
        raise RunError(f"the privacy dry run failed ({len(others | over)} party/parties refused):\n{text}")
    may_stop = ""
    if over:
        planned = exp.budget_target is not None and per_decision
        if not planned and not exp.stop_at_budget:
            if per_decision:
                raise RunError(_over_budget_refusal(exp, pf, answers, over, cap, before_release))
            failed = f"the privacy dry run failed ({len(over)} party/parties refused)"
            raise RunError(f"{failed}:\n{text}\n{_STOP_HINT}")
        if per_decision:
            text = _per_decision_text(pf, answers, over, cap, planned, charged_per_run(exp))
        if exp.stop_at_budget:
            may_stop = _may_stop_text(exp, pf, answers, over, per_decision)
    if moot:
        text += (
            f"\nparties {sorted(moot)} already charged this run's epsilon (once per run): their dry-run "
            "refusal does not apply to it"
        )
    per_batch = {  # every party answered here (one that could not be asked refuses above)
        pid: cprivacy.parse_events(r.events_json) for pid, r in answers.items() if not isinstance(r, str)
    }
    plan = PrivacyPlan(
        per_batch, text, per_decision=per_decision, may_stop=may_stop, per_run=charged_per_run(exp)
    )
    target = exp.privacy
    if target is None or per_decision or before_release:  # per decision: checked against the plan's
        return plan  # expected charge (coordinator.planner), not the cap; each registry enforces its budget
    total = exp.sampler.charged_batches
    misses = []
    for pid, events in sorted(per_batch.items()):
        who = f"party {pid} ({pf.parties[pid - 1].identity})"
        if not events:
            misses.append(
                f"{who}: reports no privacy accounting for this session, so the target cannot be shown"
            )
            continue
        whole = scaled(events, total)  # ABCDP: total = 1, its run is one event
        sp = cprivacy.recompose(whole, target.delta if target.delta is not None else 1e-6)
        plan.composed[pid] = sp
        if target.gdp_mu is not None:
            if sp.gdp_mu is None:
                misses.append(f"{who}: its events have no GDP bound; give the target as epsilon and delta")
            elif sp.gdp_mu > target.gdp_mu * (1 + 1e-12):
                misses.append(f"{who}: the whole run is mu = {sp.gdp_mu:.6g} GDP > target {target.gdp_mu:g}")
        elif target.epsilon is not None and sp.eps > target.epsilon * (1 + 1e-12):
            misses.append(
                f"{who}: the whole run is eps = {sp.eps:.6g} at delta = {sp.delta:g} > target "
                f"{target.epsilon:g}"
            )
    if misses:
        raise RunError(
            f"the run does not fit the privacy target [privacy] {target.text()} ({total} batches of "
            f"{exp.sampler.decisions_per_batch} decisions):\n  " + "\n  ".join(misses)
        )
    return plan


_STOP_HINT = (
    "each refusing registry's only reason is its privacy budget: plan a run that fits (fewer iterations, "
    "more noise), or accept a run that stops when a registry's budget runs out: [privacy] stop_at_budget "
    "= true (without a posterior if it stops in the warm-up)"
)


def _over_budget(answer: Any, pf: Any, per_decision: bool) -> bool:
    """Whether a party's dry run refuses only because the run would pass its privacy budget: it accounts
    the session (its per-batch events), it has a budget the projection passes, its decision budget holds
    every batch, and (for charges that are exact, not a cap's bound) at least one batch fits."""
    if isinstance(answer, str) or not answer.would_refuse or not answer.events_json:
        return False
    b, s = answer.budget, pf.session
    decisions_fit = answer.decisions_used + s.batches * s.batch_size <= answer.decisions_budget
    return (
        b.configured
        and answer.projected > b.limit
        and decisions_fit
        and (per_decision or answer.batches_allowed >= 1)
    )


def _fit_line(pf: Any, pid: int, answer: Any) -> str:
    b = answer.budget
    return (
        f"party {pid} ({pf.parties[pid - 1].identity}): {b.unit}: spent {b.spent:.4g} of {b.limit:.4g}; the "
        f"whole run would reach {answer.projected:.4g}; {answer.batches_allowed} of {pf.session.batches} "
        "batches fit"
    )


def _over_budget_refusal(
    exp: Experiment, pf: Any, answers: dict[int, Any], over: set[int], cap: float | None, before: bool
) -> str:
    """Why an unplanned run charged per decision is refused when its dry run passes a registry's budget: the
    cap's charge is the only bound on what the run spends that holds whatever the chains do, and a run
    past a budget stops where the registry refuses a batch (in the warm-up: without a posterior)."""
    fit = min(answers[pid].batches_allowed for pid in over)
    s = exp.sampler
    lines = [
        "the run does not fit the registries' privacy budgets: its dry run charges every decision at the cap "
        f"max_sensitivity = {'none' if cap is None else f'{cap:g}'} (the most a decision can cost: each "
        "is charged at its own sensitivity, at most the cap), and at the cap"
        + (" (before the warm start, whose releases add to it)" if before else "")
    ]
    lines += [f"  {_fit_line(pf, pid, answers[pid])}" for pid in sorted(over)]
    warmup = s.kept_warmup
    where = "in the warm-up, without a posterior" if fit < warmup else "partway"
    lines.append(
        f"A registry refuses a batch past its budget, so the run may stop at batch {fit + 1} of "
        f"{pf.session.batches} or later ({where}). Plan a run that fits: [privacy] target_epsilon = ... "
        "(the planner prices the expected charge and sets the length; it needs proposal = \"laplace\" "
        f"and a [warm_start]), or ask for fewer iterations ([sampler] iterations: at most {fit} fit at "
        "the cap) or more noise ([sampler] sd), or accept a run that may stop early: [privacy] "
        "stop_at_budget = true"
    )
    return "\n".join(lines)


def _may_stop_text(
    exp: Experiment, pf: Any, answers: dict[int, Any], over: set[int], per_decision: bool
) -> str:
    """What a run with ``[privacy] stop_at_budget = true`` is told before it starts: where it may stop."""
    fit = min(answers[pid].batches_allowed for pid in over)
    total, warmup = pf.session.batches, exp.sampler.kept_warmup
    who = ", ".join(f"party {pid} ({pf.parties[pid - 1].identity})" for pid in sorted(over))
    if per_decision:
        when = (
            f"this run may stop at batch ~{fit + 1} of {total} when a registry's budget runs out (at the cap "
            f"the budget of {who} covers {fit} batch(es); each decision is charged at its own sensitivity, "
            "at most the cap, so it may go further)"
        )
    else:
        when = f"this run will stop at batch {fit + 1} of {total} when a registry's budget runs out ({who})"
    if fit < warmup:
        when += f"; that is in the warm-up ({warmup} iterations): then it has no posterior, only its draws"
    return when + " ([privacy] stop_at_budget = true)"


_CAP_NOTE = (
    "the dry run charges every decision at the cap max_sensitivity = {cap}, an upper bound, not the "
    "charge{planned}; {how}, and a registry refuses a batch past its budget when it comes"
)
_EACH = "each decision is charged at its own sensitivity"
_PER_RUN = (
    "registries charging per run ([budget] per_run = \"worst-record\") charge each batch the increase of "
    "the run's worst-record bound, at most the decisions' own sensitivities"
)


def charged_per_run(exp: Experiment) -> bool:
    """Whether the run's registries say they charge per run at the worst record: a planned run's target
    (``[privacy] per_run``, checked against simulated registries by ``planner.check_accountant``) or the
    simulated registries' ``[simulate] party_per_run``."""
    if exp.budget_target is not None:
        return exp.budget_target.per_run == "worst-record"
    return exp.simulate is not None and exp.simulate.party_per_run == "worst-record"


def _cap_note(cap: float | None, planned: bool = True, per_run: bool = False) -> str:
    return _CAP_NOTE.format(
        cap="none" if cap is None else f"{cap:g}",
        planned=" (the plan gives the expected spend)" * planned,
        how=_PER_RUN if per_run else _EACH,
    )


def _per_decision_text(
    pf: Any,
    answers: dict[int, Any],
    upper: set[int],
    cap: float | None,
    planned: bool = True,
    per_run: bool = False,
) -> str:
    """The dry run of a run charged per decision whose projection at the cap exceeds some budgets, every
    other party accepting: each such party's numbers, without the verdict "WOULD REFUSE" (it refuses a
    batch past its budget when it comes, at the decision's own sensitivity, or per run)."""
    lines = [f"parties {sorted(upper)} accept the session: {_cap_note(cap, planned, per_run)}"]
    for pid in sorted(upper):
        r = answers[pid]
        b = r.budget
        who = f"party {pid} ({pf.parties[pid - 1].identity})"
        lines.append(
            f"  {who}: {b.unit}: spent {b.spent:.4g} of {b.limit:.4g}; at the cap the whole run would "
            f"reach {r.projected:.4g}"
        )
    return "\n".join(lines)


def parties_charged_for_run(pf: Any, run_id: str) -> set[int]:
    """The parties whose ledger already holds the whole-run charge of ``run_id`` (PrivacyReport): their
    dry-run refusal (e.g. a budget that fits the run only once) is moot, they charge nothing again and refuse
    at open themselves if they cannot continue."""
    from proto.records import RunCharge

    out = set()
    for pid, r in cprivacy.report(pf).items():
        if isinstance(r, str):
            continue
        try:
            charges = [RunCharge.from_dict(c) for c in json.loads(r.run_charges_json or "[]")]
        except (ValueError, TypeError):
            continue
        if any(c.run_id == run_id and c.is_whole_run for c in charges):
            out.add(pid)
    return out


def privacy_reports(
    exp: Experiment, endpoints: list[PartyEntry], tls: TlsMaterial | None
) -> dict[int, Any]:
    """Each party's PrivacyReport answer (its ledger), or the error string when it could not be asked."""
    return dict(cprivacy.report(plan_file(exp, endpoints, tls, 1)))
