"""``confar privacy report`` text and plots: a party without a budget keeps no ledger, so its report must
say "not accounted" and state no number (never "eps = 0"), and gets no trade-off plot."""

from __future__ import annotations

import json
from pathlib import Path

from coordinator.privacy import PlanFile, plot_spends
from coordinator.privacy_statement import format_report
from mechanisms.privacy.events import GaussianEvent
from proto import party_pb2
from proto.spec import PartyEntry


def test_unaccounted_party_states_no_number(tmp_path: Path) -> None:
    pf = PlanFile(
        Path("plan.toml"),
        "coordinator",
        None,
        1.0,
        [PartyEntry(1, "p1", ""), PartyEntry(2, "p2", "")],
        None,
    )
    no_budget = party_pb2.PrivacyReportResponse(
        party=1,
        identity="p1",
        budget=party_pb2.PrivacyBudgetState(configured=False),
        events_json="[]",
        decisions_used=640,
    )
    ev = [GaussianEvent(0.05, count=100, label="penalty").to_dict()]
    with_budget = party_pb2.PrivacyReportResponse(
        party=2,
        identity="p2",
        budget=party_pb2.PrivacyBudgetState(
            configured=True,
            budget_json=json.dumps({"type": "gdp", "mu_max": 2.0}),
            unit="mu",
            limit=2.0,
            spent=0.5,
        ),
        events_json=json.dumps(ev),
        decisions_used=100,
    )
    text, spends, bad = format_report(pf, {1: no_budget, 2: with_budget}, 1e-5)
    assert bad == 0
    p1 = [line for line in text.splitlines() if line.startswith("party 1")]
    assert len(p1) == 1 and "nothing is accounted" in p1[0] and "640 decisions" in p1[0]
    assert "eps = 0" not in text
    assert set(spends) == {2} and abs((spends[2].gdp_mu or 0.0) - 0.5) < 1e-12  # sqrt(100) * 0.05
    assert [p.name for p in plot_spends(pf, spends, tmp_path)] == ["p2-tradeoff.png"]
