"""A run's privacy, coordinator side: the dry run before it, the target check, what it spent, the reports.

Before a run (or a resumed run's remaining batches) every party answers ``PlanPrivacy`` for the planned
session (no data read, nothing charged); a party that would refuse stops the run with its reason. With a
``[privacy]`` target, each party's per-batch events for the whole run are composed here (GDP μ, or ε at δ
by PLD) and must fit it. After the run every party's ``PrivacyReport`` (its own ledger) goes to the outputs.
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
        ),
    )


@dataclass
class PrivacyPlan:
    per_batch: dict[int, list[Any]]  # party -> events of one batch (what the party reported)
    text: str
    composed: dict[int, cprivacy.Spend] = field(default_factory=dict)
    per_decision: bool = False  # decisions charged at their own sensitivity: per_batch is the cap's bound

    def spent_text(self, run_steps: int) -> str:
        """Largest GDP μ over parties after ``run_steps`` batches, when every event has a GDP bound."""
        if self.per_decision:
            return "privacy: charged per decision by each registry (its ledger; `confar privacy report`)"
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
    exp: Experiment, pf: Any, remaining: int, already_charged: set[int] | frozenset[int] = frozenset()
) -> PrivacyPlan:
    """Every party's PlanPrivacy; raise RunError with each refusing party's reason or a missed target.

    ``already_charged``: parties that charged this (resumed ABCDP) run's whole-run epsilon already; their
    refusal does not stop the run (they charge nothing more, and refuse at open if they cannot go on)."""
    answers = cprivacy.plan(pf)
    text, _ = cprivacy.format_plan(pf, answers)
    refusing = {pid for pid, r in answers.items() if isinstance(r, str) or r.would_refuse}
    moot = {pid for pid in refusing if pid in already_charged and not isinstance(answers[pid], str)}
    pen = exp.sampler.penalty
    per_decision = pen is not None and pen.fixed
    upper: set[int] = set()
    if per_decision:  # charged per decision at its own sensitivity: the dry run is an upper bound
        assert pen is not None
        upper = {pid for pid in refusing if not isinstance(a := answers[pid], str) and a.events_json}
        if upper and not refusing - upper - moot:  # only the projection at the cap is over budget
            text = _per_decision_text(pf, answers, upper, pen.max_sensitivity)
        elif upper:  # another party refuses: its reasons are in the full text
            text += f"\nparties {sorted(upper)}: {_cap_note(pen.max_sensitivity)}"
        refusing -= upper
    if refusing - moot:
        raise RunError(f"the privacy dry run failed ({len(refusing - moot)} party/parties refused):\n{text}")
    if moot:
        text += (
            f"\nparties {sorted(moot)} already charged this run's epsilon (once per run): their dry-run "
            "refusal does not apply to it"
        )
    per_batch = {  # every party answered here (one that could not be asked refuses above)
        pid: cprivacy.parse_events(r.events_json) for pid, r in answers.items() if not isinstance(r, str)
    }
    plan = PrivacyPlan(per_batch, text, per_decision=per_decision)
    target = exp.privacy
    if target is None or (pen is not None and pen.fixed):  # per decision: checked against the plan's
        return plan  # expected charge (coordinator.planner), not the cap; each registry enforces its budget
    total = exp.sampler.batches if exp.sampler.kind != "abcdp" else 1
    misses = []
    for pid, events in sorted(per_batch.items()):
        who = f"party {pid} ({pf.parties[pid - 1].identity})"
        if not events:
            misses.append(
                f"{who}: reports no privacy accounting for this session, so the target cannot be shown"
            )
            continue
        whole = events if exp.sampler.kind == "abcdp" else scaled(events, total)
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


_CAP_NOTE = (
    "the dry run charges every decision at the cap max_sensitivity = {cap}, an upper bound, not the "
    "charge (the plan gives the expected spend); each decision is charged at its own sensitivity, and a "
    "registry refuses a batch past its budget when it comes"
)


def _cap_note(cap: float | None) -> str:
    return _CAP_NOTE.format(cap="none" if cap is None else f"{cap:g}")


def _per_decision_text(pf: Any, answers: dict[int, Any], upper: set[int], cap: float | None) -> str:
    """The dry run of a run charged per decision whose projection at the cap exceeds some budgets, every
    other party accepting: each such party's numbers, without the verdict "WOULD REFUSE" (it refuses a
    batch past its budget when it comes, at the decision's own sensitivity)."""
    lines = [f"parties {sorted(upper)} accept the session: {_cap_note(cap)}"]
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
