"""One privacy sentence per registry, the same everywhere (issue 40 item 5): ε at δ by the registry's own
accountant (never another reading in its place), the neighbour relation, the coalition its charges were
computed for (the q its labels state, the report's [budget] colluding where none does), what was released
and its budget; the other readings beside it, labelled; and ``confar privacy report`` printing the very
string the run's privacy document holds. A run end to end (terminal, API, JSON) is tests/coordinator/
test_study.py and tests/network/test_examples_run.py."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.outputs import RunResult
from coordinator.outputs.privacy_docs import privacy_document
from coordinator.privacy import PlanFile
from coordinator.privacy_statement import (
    RELEASED,
    event_view,
    format_report,
    registry_privacy,
    statement_lines,
)
from mechanisms.privacy import REVEAL_PRIVACY, GaussianEvent, RDPBudget, RenyiEvent, gdp_eps
from proto.records import BudgetState, LedgerReport
from proto.spec import PartyEntry

DELTA = 1e-5


def label(what: str, neighbours: str = "add-remove", q: int = 0, mode: str | None = "sign") -> str:
    """A charge's label as a registry writes it (parties.privacy_budget.batch_events)."""
    reveal = f", reveal {mode}" if mode else ""
    view = f"{neighbours} neighbours, assumes q = {q} colluding, session t = 1{reveal}"
    return f"{what}; {view}; session ab; run r"


def renyi_report(events: list[Any], colluding: str = "0", neighbours: str = "add-remove") -> dict[str, Any]:
    """A registry with a Renyi filter (eps 25 at 1e-5, order 2) whose ledger holds ``events``."""
    budget = RDPBudget(25.0, DELTA, 2.0)
    return {
        "party": 1,
        "identity": "registry-1",
        "budget": {
            "configured": True,
            "budget_json": json.dumps(budget.to_dict()),
            "unit": "eps at delta=1e-05 (Renyi filter, alpha=2)",
            "limit": 25.0,
            "spent": budget.spend(events),
        },
        "events_json": json.dumps([e.to_dict() for e in events]),
        "decisions_used": sum(e.count for e in events),
        "colluding": colluding,
        "neighbours": neighbours,
    }


def gdp_events(
    q: int = 0, neighbours: str = "add-remove", mode: str | None = "sign", n: int = 400
) -> list[Any]:
    return [GaussianEvent(0.05, count=n, label=label("penalty sd=2 sign", neighbours, q, mode))]


def gdp_report(events: list[Any], colluding: str = "", neighbours: str = "") -> dict[str, Any]:
    mu = math.sqrt(sum(e.count * e.mu**2 for e in events))
    return {
        "party": 1,
        "identity": "registry-1",
        "budget": {
            "configured": True,
            "budget_json": json.dumps({"type": "gdp", "mu_max": 2.0}),
            "unit": "mu",
            "limit": 2.0,
            "spent": mu,
        },
        "events_json": json.dumps([e.to_dict() for e in events]),
        "decisions_used": sum(e.count for e in events),
        "colluding": colluding,
        "neighbours": neighbours,
    }


def test_the_statement_states_the_registry_s_own_accountant_not_another_reading() -> None:
    """The notebook printed epsilon = 103 (the GDP reading) beside a statement of 72.11 by the Renyi filter:
    the statement's epsilon, the API's epsilon and the budget are the filter's; the GDP reading of the same
    charges is beside it, labelled, never in its place."""
    events = [
        GaussianEvent(0.4, count=3, label=label("warm start: score release", mode="sum")),
        RenyiEvent(
            0.12, orders=(2.0,), rho=(0.004,), count=600, label=label("penalty sd=2 sign, per decision")
        ),
    ]
    it = registry_privacy(renyi_report(events), 3, DELTA, this_run=600)
    renyi = RDPBudget(25.0, DELTA, 2.0).spend(events)
    mu = math.sqrt(3 * 0.4**2 + 600 * 0.12**2)
    assert gdp_eps(mu, DELTA) > 1.2 * renyi  # two readings far apart: which one is stated matters
    assert it.statement.startswith(f"epsilon = {renyi:.4g} at delta = 1e-05 by its Renyi filter (order 2), ")
    assert it.recomputed["epsilon_by_accountant"] == pytest.approx(renyi, rel=1e-12)
    assert it.recomputed["accountant"] == "renyi"
    assert f"{gdp_eps(mu, DELTA):.4g}" not in it.statement
    assert it.readings == (
        "this run: 600 of the decisions made with its data",
        f"GDP reading of the same charges: epsilon = {gdp_eps(mu, DELTA):.4g} at delta = 1e-05 (GDP mu = "
        f"{mu:.4g})",
    )
    assert ", add-remove neighbours, against the coordinator (q = 0: no registry assumed to collude); " in (
        it.statement
    )
    assert "; released: noisy sums (reveal sum), accept bits (reveal sign); " in it.statement
    assert it.statement.endswith(
        f"; budget: {renyi:.4g} of 25 spent (eps at delta=1e-05 (Renyi filter, alpha=2)), {25 - renyi:.4g} "
        "left (603 decisions made with its data in all)"
    )
    assert it.threat_model == "against the coordinator (q = 0: no registry assumed to collude)"


def test_each_accountant_is_named_with_its_own_number() -> None:
    """A GDP filter states its mu read as epsilon at the run's delta; a PLD budget its PLD composition."""
    events = gdp_events()
    mu = math.sqrt(400) * 0.05
    it = registry_privacy(gdp_report(events, "0", "add-remove"), 3, DELTA)
    assert it.statement.startswith(
        f"epsilon = {gdp_eps(mu, DELTA):.4g} at delta = 1e-05 by its GDP filter (mu = {mu:.4g}), "
    )
    assert it.readings == ()  # all Gaussian: the GDP closed form is the composition, nothing else to show
    pld = dict(gdp_report(events, "0", "add-remove"))
    pld["budget"] = dict(
        pld["budget"], budget_json=json.dumps({"type": "eps_delta", "eps_max": 30.0, "delta": 1e-6})
    )
    it = registry_privacy(pld, 3, DELTA)
    assert it.recomputed["accountant"] == "pld" and it.recomputed["delta"] == 1e-6
    assert it.statement.startswith(
        f"epsilon = {gdp_eps(mu, 1e-6):.4g} at delta = 1e-06 by its PLD accountant, "
    )


@pytest.mark.parametrize(
    ("charges", "colluding", "clause", "note"),
    [
        ([0], "0", "against the coordinator (q = 0: no registry assumed to collude)", None),
        (
            [2],
            "all",
            "against the coordinator and q = 2 colluding registries (all the others: only its own",
            None,
        ),
        ([1], "1", "against the coordinator and q = 1 colluding registries;", None),
        # the charges say q = 0: the number holds against the coordinator, whatever the config says now
        ([0], "all", "against the coordinator (q = 0", "its [budget] colluding now assumes q = 2 for later"),
        ([0, 2], "all", "against the coordinator (q = 0", "computed for different coalitions (q = 0, 2)"),
        ([None], "all", "against the coordinator and q = 2 colluding", "do not say which coalition"),
        ([None], "", "threat model not reported (its report carries no q and no charge says)", None),
    ],
)
def test_the_threat_model_is_what_the_charges_were_computed_for(
    charges: list[int | None], colluding: str, clause: str, note: str | None
) -> None:
    events = [
        GaussianEvent(0.05, count=10, label=label("penalty", q=q) if q is not None else "penalty; session ab")
        for q in charges
    ]
    it = registry_privacy(gdp_report(events, colluding, "add-remove"), 3, DELTA)
    assert clause in it.statement, it.statement
    assert it.statement.count(it.threat_model) == 1 and it.threat_model in clause + it.statement
    if note is None:
        assert "; its" not in it.statement.split("made with its data in all)")[-1]
    else:
        assert note in it.statement
    said = {v.q for e in events if (v := event_view(e.label)) is not None}
    if said:  # the document's threat model agrees with the labels' q (it said "default: all m - 1")
        assert f"q = {min(said)}" in it.threat_model


@pytest.mark.parametrize(
    ("charged", "reported", "words"),
    [
        ("add-remove", "add-remove", ", add-remove neighbours, "),
        ("replace-one", "", ", replace-one neighbours, "),  # an older party: the charges still say
        (None, "replace-one", ", replace-one neighbours, "),  # no charge says: the report's budget does
        (
            "add-remove",
            "replace-one",
            ", add-remove neighbours (its [budget] neighbours is now replace-one), ",
        ),
        (None, "", ", neighbour relation not reported, "),
    ],
)
def test_the_neighbour_relation_is_in_the_statement(charged: str | None, reported: str, words: str) -> None:
    lab = label("penalty", neighbours=charged) if charged else "penalty; session ab"
    it = registry_privacy(gdp_report([GaussianEvent(0.05, count=10, label=lab)], "0", reported), 3, DELTA)
    assert words in it.statement, it.statement


def test_what_was_released_and_what_cannot_be_said() -> None:
    mixed = gdp_events(mode="blinded") + gdp_events(mode=None)
    it = registry_privacy(gdp_report(mixed, "0", "add-remove"), 3, DELTA)
    assert (
        "; released: blinded products (reveal blinded) and 1 charge(s) that do not record their reveal mode;"
        in (it.statement)
    )
    nothing = registry_privacy(gdp_report([], "0", "add-remove"), 3, DELTA)
    assert "; released: nothing charged yet; " in nothing.statement
    assert nothing.statement.startswith("epsilon = 0 at delta = 1e-05 by its GDP filter (mu = 0)")
    assert set(RELEASED) == set(REVEAL_PRIVACY)  # every reveal mode says what it releases


def test_no_budget_states_no_number() -> None:
    rep = {
        "party": 1,
        "identity": "registry-1",
        "budget": {"configured": False, "budget_json": "", "unit": "", "limit": 0.0, "spent": 0.0},
        "events_json": "[]",
        "decisions_used": 640,
    }
    it = registry_privacy(rep, 3, DELTA)
    assert it.statement == (
        "no privacy budget configured: no epsilon is stated; it records no privacy events, so nothing is "
        "accounted (640 decisions made with its data in all)"
    )
    assert it.recomputed["epsilon_by_accountant"] is None and it.spend is None


def _result(reports: dict[int, Any], readings: dict[int, list[str]] | None = None) -> RunResult:
    draws = np.random.default_rng(0).normal(size=(2, 20, 1))
    return RunResult(
        draws=draws,
        param_names=["theta"],
        privacy_reports=reports,
        privacy_readings=readings or {},
        provenance={"parties": {1: "registry-1", 2: "registry-2", 3: "registry-3"}},
    )


def test_privacy_report_prints_the_run_document_s_statement_byte_for_byte() -> None:
    """`confar privacy report` printed its own lines ("GDP mu = ...; eps = ..."), not the statement."""
    events = [RenyiEvent(0.12, orders=(2.0,), rho=(0.004,), count=600, label=label("penalty sd=2 sign"))]
    rep = renyi_report(events)
    result = _result({1: rep})
    result.provenance["counts"] = {"decisions_asked": 550}  # a run's own count goes beside the sentence
    doc, _ = privacy_document(1, rep, result)
    record = LedgerReport(
        1,
        "registry-1",
        BudgetState(**rep["budget"]),
        rep["events_json"],
        rep["decisions_used"],
        colluding="0",
        neighbours="add-remove",
    )
    pf = PlanFile(
        Path("plan.toml"),
        "coordinator",
        None,
        1.0,
        [PartyEntry(i, f"registry-{i}", "") for i in (1, 2, 3)],
        None,
    )
    text, spends, bad = format_report(pf, {1: record}, DELTA)
    assert bad == 0 and set(spends) == {1}
    lines = text.splitlines()
    assert lines[0] == f"party 1 (registry-1): {doc['statement']}"
    assert doc["other_readings"][0] == "this run: 550 of the decisions made with its data"
    beside = doc["other_readings"][1:]  # the same readings, but for the run's count (no run here)
    assert beside and lines[1 : 1 + len(beside)] == [f"  beside it, {r}" for r in beside]
    assert not lines[1 + len(beside)].startswith("  beside it")
    assert doc["threat_model"] in doc["statement"]


def test_readings_from_the_run_go_beside_the_statement_in_the_document() -> None:
    rep = gdp_report(gdp_events(), "0", "add-remove")
    extra = ["GDP reading of this run's charges against the coordinator and q = 1 colluding registries: x"]
    doc, _ = privacy_document(1, rep, _result({1: rep}, {1: extra}))
    assert doc["other_readings"][-1] == extra[0]
    assert statement_lines([("registry-1", doc["statement"], doc["other_readings"])])[1:] == [
        f"  registry-1: {doc['statement']}",
        f"    beside it, {extra[0]}",
    ]
    with pytest.raises(ValueError, match=r"privacy_readings\[2\]"):
        _result({1: rep}, {2: extra})


def test_an_older_party_s_report_reads_as_not_carried() -> None:
    """A PrivacyReport from a party before colluding / neighbours: no field, no guess."""
    rep = gdp_report([GaussianEvent(0.05, count=10, label="penalty; session ab")])
    rep = {k: v for k, v in rep.items() if k not in ("colluding", "neighbours")}
    it = registry_privacy(rep, 3, DELTA)
    assert ", neighbour relation not reported, threat model not reported" in it.statement
    assert it.reported["colluding"] is None and it.reported["neighbours"] is None
    assert dataclasses.asdict(LedgerReport(1, "r", BudgetState()))["colluding"] == ""


def test_epsilon_is_also_stated_at_the_conventional_delta() -> None:
    """Issue 35 item 5: with the largest registry's records public (a simulation), epsilon beside the
    statement at delta = 1/(10 n) by the same accountant: the Renyi filter's conversion at its own order
    (rdp_eps written out here), and for a GDP filter the GDP conversion; none when the budget's delta is
    already below it."""
    from mechanisms.privacy.renyi import rdp_eps

    events = [
        GaussianEvent(0.4, count=3, label=label("warm start: score release", mode="sum")),
        RenyiEvent(0.12, orders=(2.0,), rho=(0.004,), count=600, label=label("penalty sd=2 sign")),
    ]
    it = registry_privacy(renyi_report(events), 3, DELTA, largest_records=27000)
    rho = 3 * 2.0 * 0.4**2 / 2 + 600 * 0.004
    d = 1.0 / 270000
    want = rdp_eps(rho, 2.0, d)
    line = next(r for r in it.readings if r.startswith("at the conventional delta"))
    assert line == (
        f"at the conventional delta = 1/(10 x 27000 records of the largest registry) = {d:.3g}: "
        f"epsilon = {want:.4g} by its Renyi filter (order 2)"
    )
    assert want > it.recomputed["epsilon_by_accountant"]  # a smaller delta costs epsilon
    gdp = registry_privacy(gdp_report(gdp_events(), "0", "add-remove"), 3, DELTA, largest_records=50000)
    mu = math.sqrt(400) * 0.05
    assert f"epsilon = {gdp_eps(mu, 1 / 500000):.4g} by its GDP filter" in " ".join(gdp.readings)
    small = registry_privacy(renyi_report(events), 3, DELTA, largest_records=5000)  # 1/(10 n) = 2e-5 > delta
    assert not any(r.startswith("at the conventional delta") for r in small.readings)
