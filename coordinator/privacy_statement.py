"""A registry's privacy statement: one sentence, built once here and printed the same everywhere.

``confar run``'s end-of-run lines, ``confar privacy report``, the Python API (``fit.privacy[name]
["statement"]`` and ``Fit``'s repr) and the privacy JSON (``privacy/party-<id>.json``, ``statement``) all
print the string :func:`registry_privacy` builds from the registry's ``PrivacyReport`` answer, byte for byte,
in the block :func:`statement_lines` lays out (``confar privacy report``'s, with each ledger's details under
it: :func:`format_report`). The sentence says, in this order:

* ε at δ by the registry's **own accountant**, the one its ledger enforces (its ``[budget]``): its Rényi
  filter (at the order its budget fixes), its PLD composition (an ε-at-δ budget) or its GDP filter (μ, read
  as ε at δ by the GDP closed form); δ is the budget's own, or the run's ``privacy_delta`` for a GDP filter;
* the **neighbour relation** its budget protects: add-remove or replace-one;
* the **threat model**: how many registries its accounting assumes pool their noise (``[budget]
  colluding``, q; q = 0 is "against the coordinator" alone);
* what was **released**: the reveal modes of the sessions it charged (accept bits, noisy sums, ...);
* its **budget**: spent of total in the ledger's unit, as its ledger reports it, and what is left;
* how many decisions used its data, in all (the registry's count; this run's is beside it).

The sentence depends on the registry's report alone (and m and the run's δ), so a run's document and
``confar privacy report`` after it print the same string while the ledger is unchanged.

Where q, the relation and the reveal mode come from: every charge a registry makes carries a label it wrote
(``parties.privacy_budget``: "<relation> neighbours, assumes q = <q> colluding, session t = <t>, reveal
<mode>"), which says what that charge was computed for, so what the composed number holds for; the report's
``colluding`` / ``neighbours`` (the registry's current ``[budget]``) stand in where no charge says, and a
difference between the two is stated. Where nothing says, the sentence says so: it never guesses.

Other readings of the same events (the GDP or PLD composition beside a Rényi filter, the plain-penalty
figure, a planned run's figures for other q and the other neighbour relation) go beside it, each labelled
(``readings``), never in its place. Without a budget a registry records no events: no number is stated.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.privacy import (
    PlanFile,
    Spend,
    budget_text,
    event_text,
    parse_events,
    recompose,
    report_delta,
)
from mechanisms.privacy import PrivacyEvent, gdp_eps
from proto import serde_privacy
from proto.records import LedgerReport

#: the head of the block ``confar run`` prints and ``Fit`` shows
HEAD = "privacy spent by each registry (by its own accountant, other readings beside; details in privacy/):"
#: what each reveal mode releases (the keys are ``mechanisms.privacy.REVEAL_PRIVACY``'s; a test checks)
RELEASED = {
    "sum": "noisy sums",
    "sign": "accept bits",
    "blinded": "blinded products",
    "svt": "SVT output bits",
}
#: a ledger's budget type -> (the accountant's short name, how the sentence names it)
ACCOUNTANTS = {
    "renyi": ("renyi", "its Renyi filter"),
    "eps_delta": ("pld", "its PLD accountant"),
    "gdp": ("gdp", "its GDP filter"),
}
#: the segment a registry writes on each charge's label (``parties.privacy_budget.batch_events``)
_VIEW = re.compile(
    r"(add-remove|replace-one) neighbours, assumes q = (\d+) colluding, session t = (\d+)(?:, reveal (\w+))?"
)
_COMPOSITION = {  # mechanisms.privacy.Composition.method -> the reading's name
    "gdp closed form": "GDP reading",
    "pld": "PLD reading",
    "pld and gdp (the smaller)": "PLD and GDP reading (the smaller)",
}


@dataclass(frozen=True)
class EventView:
    """What one charge says it was computed for (its label)."""

    neighbours: str
    q: int
    t: int
    reveal: str | None  # None: a label written before the reveal mode was recorded


def event_view(label: str) -> EventView | None:
    """The view a charge's label states, or None when the label does not say (an older or foreign label)."""
    found = _VIEW.search(label or "")
    if found is None:
        return None
    return EventView(found[1], int(found[2]), int(found[3]), found[4])


@dataclass(frozen=True)
class RegistryPrivacy:
    """One registry's privacy, as every printer shows it: the sentence, the other readings (each "what:
    value"), the threat model in the sentence's words, and the two halves of its document: what it reported
    and what was recomputed here (``spend``: the recomposition, None when there is none to plot)."""

    statement: str
    readings: tuple[str, ...]
    threat_model: str
    reported: dict[str, Any]
    recomputed: dict[str, Any]
    spend: Spend | None


def registry_privacy(
    rep: Mapping[str, Any],
    m: int | None,
    delta: float,
    this_run: int | None = None,
    readings: Sequence[str] = (),
    largest_records: int | None = None,
) -> RegistryPrivacy:
    """The statement of a registry from its ``PrivacyReport`` answer ``rep`` (the dict
    ``coordinator.outputs.result.privacy_report_dict`` makes), for a consortium of ``m`` registries (None:
    unknown), ε at the budget's δ or else ``delta``; ``this_run``: the decisions of this run (the
    coordinator's count: every decision of a run involves every registry; None: not a run), beside the
    sentence, which counts the registry's own (every run and session): the sentence is the registry's
    ledger's, the same in a run's outputs and in ``confar privacy report``; ``readings``: other readings
    computed elsewhere (labelled), put beside it; ``largest_records``: the records of the consortium's
    largest registry when public (a simulation's sizes): ε is then also stated, beside the sentence, at the
    conventional δ = 1/(10 x those records) by the same accountant (issue 35 item 5)."""
    b = rep["budget"]
    budget = json.loads(b["budget_json"]) if b.get("configured") and b.get("budget_json") else {}
    events = parse_events(str(rep["events_json"]))
    delta = report_delta(budget, delta)
    error = ""
    try:
        sp: Spend | None = recompose(events, delta, b.get("budget_json", "") if b.get("configured") else "")
    except (ValueError, ArithmeticError) as exc:  # a report we cannot recompose must not sink the outputs
        sp, error = None, f"{type(exc).__name__}: {exc}"
    reported = _reported(rep, b, budget, events)
    recomputed, sp = _recomputed(b, budget, events, delta, sp, error, rep.get("decisions_used"))
    views = [event_view(e.label) for e in events]
    used = f"{reported.get('decisions_used')} decisions made with its data in all"
    run = () if this_run is None else (f"this run: {this_run} of the decisions made with its data",)
    if "not_accounted" in recomputed:
        statement = (
            "no privacy budget configured: no epsilon is stated; it records no privacy events, so nothing is "
            f"accounted ({used})"
        )
        nobody = "none stated: no privacy budget configured"
        return RegistryPrivacy(statement, run, nobody, reported, recomputed, sp)
    threat = threat_model(views, str(rep.get("colluding", "")), m)
    eps_clause, eps = _accountant_clause(budget, recomputed, sp)
    recomputed["accountant"] = ACCOUNTANTS.get(str(budget.get("type")), (None, ""))[0]
    recomputed["epsilon_by_accountant"] = eps
    parts = [
        f"{eps_clause}, {_neighbours_clause(views, str(rep.get('neighbours', '')))}, {threat.clause}",
        f"released: {_released(views, [e.label for e in events])}",
        f"budget: {_budget_clause(reported, recomputed)} ({used})",
    ]
    scopes = sorted(  # federated ABCDP's whole-run charge says against whom its epsilon holds
        {str(e.label).split("; ")[0] for e in events if "holds against" in str(e.label)}
    )
    statement = "; ".join(parts + scopes + list(threat.notes))
    conventional = _conventional(budget, events, sp, largest_records, recomputed)
    others = run + tuple(_readings(budget, recomputed, sp)) + conventional + tuple(readings)
    return RegistryPrivacy(statement, others, threat.clause, reported, recomputed, sp)


def conventional_delta(largest_records: int) -> float:
    """δ = 1/(10 n), n the records of the largest registry: the conventional bound (a δ well below 1/n
    cannot be met by releasing one record outright)."""
    return 1.0 / (10.0 * largest_records)


def _conventional(
    budget: Mapping[str, Any],
    events: list[PrivacyEvent],
    sp: Spend | None,
    largest: int | None,
    recomputed: dict[str, Any],
) -> tuple[str, ...]:
    """ε by the registry's own accountant at the conventional δ (:func:`conventional_delta`), when the
    largest registry's size is known and its δ is not already at or below it."""
    if sp is None or not sp.events or not largest or largest < 1:
        return ()
    d = conventional_delta(largest)
    if recomputed["delta"] <= d:
        return ()
    kind = budget.get("type")
    eps: float | None
    if kind == "renyi":
        from mechanisms.privacy import RDPBudget

        eps = RDPBudget(float(budget["eps_max"]), d, float(budget["alpha"])).spend(events)
        how = f"its Renyi filter (order {budget['alpha']:g})"
    elif kind == "gdp":
        eps = None if sp.gdp_mu is None else gdp_eps(sp.gdp_mu, d)
        how = "its GDP filter"
    elif sp.composition is not None:
        eps = sp.composition.eps_at(d)
        how = "its PLD accountant" if kind == "eps_delta" else "the composition of its charges"
    else:
        return ()
    if eps is None:
        return ()
    recomputed["conventional_delta"] = d
    recomputed["epsilon_at_conventional_delta"] = eps
    return (
        f"at the conventional delta = 1/(10 x {largest} records of the largest registry) = {d:.3g}: "
        f"epsilon = {eps:.4g} by {how}",
    )


def statement_lines(
    entries: Iterable[tuple[str, str, Sequence[str]]], head: str | None = HEAD, indent: str = "  "
) -> list[str]:
    """The block every printer prints: ``head``, then per registry ``"<indent><who>: <statement>"`` and its
    other readings beside it, one a line (``"<indent>  beside it, <what>: <value>"``). ``entries``: (who,
    statement, readings)."""
    lines = [head] if head else []
    for who, statement, readings in entries:
        lines.append(f"{indent}{who}: {statement}")
        lines += [f"{indent}  beside it, {r}" for r in readings]
    return lines


def format_report(pf: PlanFile, answers: dict[int, Any], delta: float) -> tuple[str, dict[int, Spend], int]:
    """``confar privacy report``'s text: each party's privacy statement with the other readings beside it (the
    sentence ``confar run`` and the run's outputs print), then its ledger: the budget, its events composed
    here, each event. Also the spends to plot and how many parties could not be asked."""
    lines: list[str] = []
    spends: dict[int, Spend] = {}
    bad = 0
    for pid, r in sorted(answers.items()):
        who = f"party {pid} ({pf.parties[pid - 1].identity})"
        if isinstance(r, str):
            bad += 1
            lines.append(f"{who}: could not be asked: {r}")
            continue
        rep = r if isinstance(r, LedgerReport) else serde_privacy.report_from_proto(r)
        it = registry_privacy(dataclasses.asdict(rep), len(pf.parties), delta)
        lines += statement_lines([(who, it.statement, it.readings)], head=None, indent="")
        sp = it.spend
        if sp is None:  # no budget and no events (nothing accounted), or events that do not recompose
            continue
        spends[pid] = sp
        b = rep.budget
        if b.configured:
            left = max(0.0, b.limit - b.spent)
            lines.append(
                f"    budget: {budget_text(sp.budget)}; spent {b.unit} = {b.spent:.6g} of {b.limit:.6g} "
                f"(remaining {left:.6g})"
            )
        mu = "none (some event has no GDP bound)" if sp.gdp_mu is None else f"{sp.gdp_mu:.6g}"
        lines.append(
            f"    {len(sp.events)} event(s), {sp.decisions} decisions accounted; "
            f"{rep.decisions_used} decisions answered in total"
        )
        lines.append(f"    composed here: GDP mu = {mu}; eps = {sp.eps:.6g} at delta = {sp.delta:g}")
        if sp.renyi_eps is not None:
            lines.append(
                f"    composed here by its Renyi filter (order {sp.budget['alpha']:g}): "
                f"eps = {sp.renyi_eps:.6g} at delta = {sp.budget['delta']:g}"
            )
        for e in sp.events:
            lines.append(f"    - {event_text(e)}")
    return "\n".join(lines), spends, bad


# ---- the sentence's parts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Threat:
    clause: str  # the sentence's words (also the document's threat_model)
    notes: tuple[str, ...]  # what the charges and the report disagree on, said after the sentence


def coalition(q: int | None, m: int | None) -> str:
    """Who a q-coalition accounting holds against, in words (q None: all the others, m unknown)."""
    if q == 0:
        return "against the coordinator (q = 0: no registry assumed to collude)"
    if q is None:
        return "against the coordinator and all the other registries (q = m - 1: only its own noise)"
    everyone = " (all the others: only its own noise)" if m is not None and q == m - 1 else ""
    return f"against the coordinator and q = {q} colluding registries{everyone}"


def threat_model(views: Sequence[EventView | None], colluding: str, m: int | None) -> Threat:
    """The coalition the composed number holds against: the smallest q its charges were computed for (a
    charge for a smaller coalition does not hold against a larger one); the report's ``colluding`` (its
    current ``[budget]``) where no charge says. Differences are stated as notes."""
    qs = sorted({v.q for v in views if v is not None})
    unsaid = sum(v is None for v in views)
    configured: int | str | None  # an int q, None for "all" with m unknown, a str when not understood
    if colluding == "all":
        configured = m - 1 if m is not None else None
    elif colluding.isdigit():
        configured = int(colluding) if m is None else min(int(colluding), m - 1)
    else:
        configured = colluding  # "" (not reported) or something this coordinator does not read
    notes: list[str] = []
    if qs:
        clause = coalition(qs[0], m)
        if len(qs) > 1:
            notes.append(
                f"its charges were computed for different coalitions (q = {', '.join(map(str, qs))}): the "
                f"number holds against the smallest, q = {qs[0]}"
            )
        if unsaid:
            notes.append(f"{unsaid} of its charges do not say which coalition they were computed for")
        latest = [v.q for v in views if v is not None][-1]
        if not isinstance(configured, str) and configured is not None and configured != latest:
            notes.append(f"its [budget] colluding now assumes q = {configured} for later charges")
        return Threat(clause, tuple(notes))
    if isinstance(configured, str):
        said = "not reported" if not configured else f"not understood ({configured!r})"
        return Threat(f"threat model {said} (its report carries no q and no charge says)", ())
    if views:  # charges that do not say: the current setting, stated as such
        notes.append("its charges do not say which coalition they were computed for: q is its [budget]'s now")
    return Threat(coalition(configured, m), tuple(notes))


def _neighbours_clause(views: Sequence[EventView | None], reported: str) -> str:
    said = sorted({v.neighbours for v in views if v is not None})
    if len(said) > 1:
        return f"neighbour relation mixed in its charges ({', '.join(said)})"
    if said and (not reported or reported == said[0]):
        return f"{said[0]} neighbours"
    if said:  # the charges say one relation, its budget now another
        return f"{said[0]} neighbours (its [budget] neighbours is now {reported})"
    return f"{reported} neighbours" if reported else "neighbour relation not reported"


#: the label of a blocked run's release of a registry's effect draws (``mechanisms.privacy.charge``)
EFFECTS_RELEASE = "effects release of run"


def _released(views: Sequence[EventView | None], labels: Sequence[str] = ()) -> str:
    """What the charged sessions released, by reveal mode; a blocked run's effects release (reveal sum, but
    the draws in the clear, not noisy sums) is named as such."""
    if not views:
        return "nothing charged yet"
    effects = [i for i, label in enumerate(labels) if EFFECTS_RELEASE in label]
    kept = [v for i, v in enumerate(views) if i not in set(effects)]
    modes = list(dict.fromkeys(v.reveal for v in kept if v is not None and v.reveal))
    unsaid = sum(v is None or not v.reveal for v in kept)
    said = ", ".join(f"{RELEASED.get(md, md)} (reveal {md})" for md in modes)
    if effects:
        clear = "its random effect's draws in the clear (reveal sum; a post-processing of its charged sweeps)"
        said = f"{said}, {clear}" if said else clear
    if not unsaid:
        return said
    rest = f"{unsaid} charge(s) that do not record their reveal mode"
    return f"{said} and {rest}" if said else "not recorded in its charges"


def _budget_clause(reported: Mapping[str, Any], recomputed: Mapping[str, Any]) -> str:
    if not reported.get("budget_configured"):
        return "none configured now (nothing enforced)"
    return (
        f"{reported['spent']:.4g} of {reported['limit']:.4g} spent ({reported['unit']}), "
        f"{recomputed.get('remaining_from_reported', 0.0):.4g} left"
    )


def _accountant_clause(
    budget: Mapping[str, Any], recomputed: Mapping[str, Any], sp: Spend | None
) -> tuple[str, float | None]:
    """ε at δ by the ledger's own accountant, and that ε (None: no number can be backed; the clause says
    why)."""
    delta = recomputed["delta"]
    if sp is None:
        return f"no epsilon is stated: {recomputed.get('error', 'nothing recomposed')}", None
    kind = budget.get("type")
    if kind == "renyi":
        eps = sp.renyi_eps
        if eps is None:
            return "epsilon by its Renyi filter: not available (no Renyi reading of its charges)", None
        order = f"order {budget['alpha']:g}"
        return f"epsilon = {eps:.4g} at delta = {delta:.3g} by its Renyi filter ({order})", eps
    if kind == "eps_delta":
        return f"epsilon = {sp.eps:.4g} at delta = {delta:.3g} by its PLD accountant", sp.eps
    if kind == "gdp":
        if sp.gdp_mu is None:
            return "epsilon by its GDP filter: not available (a charge has no GDP bound)", None
        eps = gdp_eps(sp.gdp_mu, delta)
        return f"epsilon = {eps:.4g} at delta = {delta:.3g} by its GDP filter (mu = {sp.gdp_mu:.4g})", eps
    if not budget:  # events of an earlier configuration, no budget now: composed here, enforced by nothing
        return (
            f"epsilon = {sp.eps:.4g} at delta = {delta:.3g} by the composition of its reported charges (no "
            "accountant: no budget configured now)",
            sp.eps,
        )
    return f"no epsilon is stated: its budget type {kind!r} is not one this coordinator reads", None


def _readings(budget: Mapping[str, Any], recomputed: Mapping[str, Any], sp: Spend | None) -> list[str]:
    """The other readings of the same charges, each labelled: the composition where it is not the
    accountant's own reading, its GDP μ, and the plain-penalty figure."""
    if sp is None or not sp.events:
        return []
    delta, kind, mu = recomputed["delta"], budget.get("type"), sp.gdp_mu
    method = sp.composition.method if sp.composition is not None else ""
    out = []
    mu_text = f" (GDP mu = {mu:.4g})" if mu is not None else " (no GDP mu: a charge has no GDP bound)"
    if kind in ("renyi", "gdp") and not (kind == "gdp" and method == "gdp closed form"):
        what = _COMPOSITION.get(method, "composition")
        out.append(f"{what} of the same charges: epsilon = {sp.eps:.4g} at delta = {delta:.3g}{mu_text}")
    elif kind == "eps_delta" and mu is not None and method != "gdp closed form":
        eps = gdp_eps(mu, delta)
        out.append(f"GDP reading of the same charges: epsilon = {eps:.4g} at delta = {delta:.3g}{mu_text}")
    plain = sp.plain_eps
    if plain is not None and sp.eps:
        out.append(
            "the same noise as a plain penalty release (no confidential accept-reject): epsilon = "
            f"{plain:.4g} at delta = {delta:.3g}, {plain / sp.eps:.3g}x the composition's"
        )
    return out


# ---- the document's two halves ---------------------------------------------------------------------------


def _reported(
    rep: Mapping[str, Any], b: Mapping[str, Any], budget: dict[str, Any], events: list[PrivacyEvent]
) -> dict[str, Any]:
    """What the party reported, as the document keeps it."""
    reported: dict[str, Any] = {
        "budget_configured": bool(b.get("configured")),
        "budget": budget or None,
        "unit": b.get("unit", "") or None,
        "limit": float(b["limit"]) if b.get("configured") else None,
        "spent": float(b["spent"]) if b.get("configured") else None,
        "colluding": rep.get("colluding") or None,  # None: not carried (no budget, or an older party)
        "neighbours": rep.get("neighbours") or None,
        "events": [e.to_dict() for e in events],
        "decisions_used": rep.get("decisions_used"),
    }
    if rep.get("run_charges_json"):
        reported["run_charges"] = json.loads(str(rep["run_charges_json"]))
    return reported


def _recomputed(
    b: Mapping[str, Any],
    budget: Mapping[str, Any],
    events: list[PrivacyEvent],
    delta: float,
    sp: Spend | None,
    recompose_error: str,
    decisions_used: Any,
) -> tuple[dict[str, Any], Spend | None]:
    """What was recomputed here from the reported events, and the spend to plot (``None``: no plot)."""
    how = (
        "mechanisms.privacy composition of the events the party reported (coordinator.privacy.recompose): "
        "GDP mu = sqrt(sum count * mu^2) when every event has a GDP bound; eps at delta by the GDP closed "
        "form (all Gaussian) or pessimistic PLD; the Renyi filter's reading for a Renyi budget"
    )
    recomputed: dict[str, Any] = {
        "how": how,
        "delta": delta,
        "delta_source": "the party's eps-at-delta budget"
        if budget.get("type") in ("eps_delta", "renyi")
        else "the run's privacy_delta (the party's budget is not an eps-at-delta budget)",
    }
    if not b.get("configured") and not events:
        # Without a budget a party records no events (parties/privacy_budget.py): "no events" then means
        # "not accounted", never "nothing spent". No number is stated.
        recomputed["eps_at_delta"] = None
        recomputed["gdp_mu"] = None
        recomputed["accountant"] = None
        recomputed["epsilon_by_accountant"] = None
        recomputed["not_accounted"] = (
            "this party has no privacy budget configured, so it records no privacy events: no epsilon or "
            f"mu can be stated for its data ({decisions_used} decisions made with its data)"
        )
        sp = None  # and no trade-off plot: a "nothing spent" curve would be a claim we cannot back
    elif sp is None:
        recomputed["error"] = f"could not recompose the reported events: {recompose_error}"
    else:
        recomputed["eps_at_delta"] = sp.eps
        recomputed["gdp_mu"] = sp.gdp_mu
        recomputed["gdp_mu_note"] = (
            None if sp.gdp_mu is not None or not events else "no GDP bound: some reported event has none"
        )
        recomputed["decisions_accounted"] = sp.decisions
        if sp.renyi_eps is not None:
            recomputed["renyi_eps_at_delta"] = sp.renyi_eps
            recomputed["renyi_order"] = float(budget["alpha"])
            recomputed["renyi_note"] = (
                "the party's Renyi filter recomposed here: rdp_eps of the sum over its events of rho at its "
                "budget's fixed order (the accept bit's Renyi bound where the event carries one, else the "
                "Gaussian alpha mu^2 / 2); what its budget is enforced in"
            )
        if sp.plain_eps is not None:
            recomputed["plain_penalty_eps_at_delta"] = sp.plain_eps
            recomputed["plain_penalty_note"] = (
                "epsilon at the same delta had every penalty step been a plain Gaussian release of each "
                "registry's noisy term (Yildirim-Ermis without the confidential accept-reject): mu = "
                "1/(tau n^alpha) per step; eps_at_delta above is what the confidential reveal backs"
            )
    if b.get("configured"):
        same = None
        if sp is not None and budget.get("type") in ("gdp", "eps_delta", "renyi"):
            same = {"gdp": sp.gdp_mu, "eps_delta": sp.eps, "renyi": sp.renyi_eps}[budget["type"]]
        recomputed["unit"] = str(b.get("unit", ""))
        recomputed["spent_in_budget_unit"] = same
        recomputed["spent_difference_vs_reported"] = None if same is None else same - float(b["spent"])
        recomputed["remaining_from_reported"] = max(0.0, float(b["limit"]) - float(b["spent"]))
    return recomputed, sp
