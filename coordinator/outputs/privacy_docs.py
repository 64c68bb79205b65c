"""The per-party privacy documents of a run's outputs (``privacy/party-<id>.json`` / ``.png``): what the party
*reported* (its ``PrivacyReport`` answer, verbatim) kept apart from what was *recomputed here* from its
reported events with ``mechanisms.privacy`` (:func:`coordinator.privacy.recompose`: GDP μ where every event
has one, ε at δ), a one-line statement in plain words, and the ``confar privacy report --plot`` figure
(:func:`coordinator.privacy.plot_spends`)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coordinator.outputs.result import RunResult
from coordinator.privacy import PlanFile, Spend, parse_events, plot_spends, recompose, report_delta
from proto.spec import PartyEntry

THREAT_MODEL_NOTE = (
    "not carried in the PrivacyReport answer: the party's ledger accounts under its own [budget] "
    "'colluding' setting (default: all m - 1 other parties pool their noise, so only the party's own "
    "noise is relied on)"
)


def party_identity(pid: int, rep: dict[str, Any] | str, result: RunResult) -> str:
    if isinstance(rep, dict):
        return str(rep["identity"])
    parties = result.provenance.get("parties")
    if isinstance(parties, Mapping) and pid in parties:
        return str(parties[pid])
    return f"party-{pid}"


def _decisions_text(reported: Mapping[str, Any], this_run: int | None) -> str:
    """How many decisions used the registry's data: in this run (the coordinator's count: every decision of a
    run involves every registry) and in all (the registry's own count, every run and session)."""
    used = reported.get("decisions_used")
    if this_run is None:
        return f"{used} decisions made with its data in all"
    return f"{this_run} decisions of this run; {used} made with its data in all"


def privacy_statement(
    reported: Mapping[str, Any], recomputed: Mapping[str, Any], this_run: int | None = None
) -> str:
    """One line in plain words: what this party's data has spent, or why no number is stated."""
    used = _decisions_text(reported, this_run)
    if "not_accounted" in recomputed:
        return f"no privacy budget configured: no epsilon is stated ({used})"
    if "error" in recomputed:
        return f"reported events could not be recomposed: {recomputed['error']}"
    parts = []
    renyi = recomputed.get("renyi_eps_at_delta")
    mu = recomputed.get("gdp_mu")
    if mu is not None:
        parts.append(f"GDP mu = {mu:.4g}")
    eps = recomputed.get("eps_at_delta")
    if eps is not None:
        parts.append(f"epsilon = {eps:.4g} at delta = {recomputed['delta']:.3g}")
    plain = recomputed.get("plain_penalty_eps_at_delta")
    if plain is not None and eps:
        parts.append(
            f"(the same noise as a plain penalty release: epsilon = {plain:.4g}, {plain / eps:.3g}x; the "
            "confidential accept-reject amplifies it)"
        )
    spent = "spent " + ", ".join(parts) if parts else "spent nothing it accounts"
    if renyi is not None:  # the party's own accountant first; the GDP reading of the same events beside it
        spent = (
            f"spent epsilon = {renyi:.4g} at delta = {recomputed['delta']:.3g} by its Renyi filter (order "
            f"{recomputed['renyi_order']:g}); the GDP reading of the same events: " + ", ".join(parts)
        )
    if reported.get("budget_configured"):
        spent += (
            f"; its ledger: {reported['spent']:.4g} of {reported['limit']:.4g} ({reported['unit']}), "
            f"{recomputed.get('remaining_from_reported', 0.0):.4g} left"
        )
    scopes = sorted(
        {
            str(e.get("label", "")).split("; session")[0]
            for e in reported.get("events", [])
            if "holds against" in str(e.get("label", ""))
        }
    )
    return f"{spent} ({used})" + "".join(f"; {x}" for x in scopes)


def _run_decisions(result: RunResult) -> int | None:
    counts = result.provenance.get("counts") if isinstance(result.provenance, Mapping) else None
    if isinstance(counts, Mapping) and "decisions_asked" in counts:
        return int(counts["decisions_asked"])
    return None


def privacy_document(
    pid: int, rep: dict[str, Any] | str, result: RunResult
) -> tuple[dict[str, Any], Spend | None]:
    """The JSON document for one party: what it reported, kept apart from what was recomputed here."""
    ident = party_identity(pid, rep, result)
    if isinstance(rep, str):
        return {"party": pid, "identity": ident, "error": f"could not be asked: {rep}"}, None
    b = rep["budget"]
    budget = json.loads(b["budget_json"]) if b.get("configured") and b.get("budget_json") else {}
    events = parse_events(str(rep["events_json"]))
    delta = report_delta(budget, result.privacy_delta)
    recompose_error = ""
    try:
        sp: Spend | None = recompose(events, delta, b.get("budget_json", "") if b.get("configured") else "")
    except (
        ValueError,
        ArithmeticError,
    ) as exc:  # a report we cannot recompose must not sink the run's outputs
        sp = None
        recompose_error = f"{type(exc).__name__}: {exc}"
    reported = _reported(rep, b, budget, events)
    recomputed, sp = _recomputed(b, budget, events, delta, sp, recompose_error, rep.get("decisions_used"))
    doc = {
        "party": pid,
        "identity": ident,
        "statement": privacy_statement(reported, recomputed, _run_decisions(result)),
        "threat_model": rep.get("threat_model", THREAT_MODEL_NOTE),
        "reported_by_party": reported,
        "recomputed_here": recomputed,
    }
    return doc, sp


def _reported(
    rep: dict[str, Any], b: Mapping[str, Any], budget: dict[str, Any], events: list[Any]
) -> dict[str, Any]:
    """What the party reported, as the document keeps it."""
    reported: dict[str, Any] = {
        "budget_configured": bool(b.get("configured")),
        "budget": budget or None,
        "unit": b.get("unit", "") or None,
        "limit": float(b["limit"]) if b.get("configured") else None,
        "spent": float(b["spent"]) if b.get("configured") else None,
        "events": [e.to_dict() for e in events],
        "decisions_used": rep.get("decisions_used"),
    }
    if rep.get("run_charges_json"):
        reported["run_charges"] = json.loads(str(rep["run_charges_json"]))
    return reported


def _recomputed(
    b: Mapping[str, Any],
    budget: Mapping[str, Any],
    events: list[Any],
    delta: float,
    sp: Spend | None,
    recompose_error: str,
    decisions_used: Any,
) -> tuple[dict[str, Any], Spend | None]:
    """What was recomputed here from the reported events, and the spend to plot (``None``: no plot)."""
    how = (
        "mechanisms.privacy composition of the events the party reported (coordinator.privacy.recompose): "
        "GDP mu = sqrt(sum count * mu^2) when every event has a GDP bound; eps at delta by the GDP closed "
        "form (all Gaussian) or pessimistic PLD"
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


def write_privacy_plots(
    folder: Path, result: RunResult, spends: Mapping[int, Spend], put: Callable[[str, bytes], None]
) -> None:
    """``coordinator.privacy.plot_spends`` (the ``confar privacy report --plot`` figure) into a scratch dir,
    then each PNG renamed to ``privacy/party-<id>.png``."""
    top = max(max(spends), max(result.privacy_reports))
    endpoints = [
        PartyEntry(i, party_identity(i, result.privacy_reports.get(i, ""), result), "")
        for i in range(1, top + 1)
    ]
    pf = PlanFile(Path("run outputs"), "coordinator", None, 0.0, endpoints, None)
    scratch = Path(tempfile.mkdtemp(prefix=".privacy-plots.", dir=folder))
    try:
        made = plot_spends(pf, dict(spends), scratch)
        for pid, path in zip(sorted(spends), made, strict=True):
            put(f"privacy/party-{pid}.png", path.read_bytes())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
