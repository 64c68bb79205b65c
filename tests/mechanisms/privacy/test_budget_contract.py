"""One contract, both budgets: a party's ledger (``PrivacyLedger``) keeps the same promises under the GDP
filter (``GDPBudget``) and under the eps-at-delta budget (``EpsDeltaBudget``); every test here runs over both.

* ``check`` is a dry run: it reports the spend before and after the batch in the budget's unit and changes
  nothing; ``would_exceed`` is exactly "``check`` does not allow it"; an empty ledger has spent 0.
* ``commit`` returns a new ledger with the batch appended (the old one unchanged) and, past the limit, raises
  ``BudgetExceededError`` and leaves the ledger as it was.
* The limit rule: a batch is admitted iff the spend after it is <= limit * (1 + LIMIT_RTOL); a batch landing
  exactly on the limit is admitted, one beyond the tolerance is refused.
* Persistence: the ledger round-trips through JSON (``to_dict`` / ``from_dict``) with the same spend; another
  version or budget type is refused.

Each budget's own arithmetic (the filter's sum of squares and its pure-DP conversions, the PLD composition and
its infinite-loss refusal, the capacity's precision) is tested in test_privacy_ledger.py,
test_privacy_ledger_limit.py and test_privacy_amplified_ledger.py; the daemon's persisted store over both
budgets in tests/parties/test_privacy_budget.py."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest

from mechanisms.privacy import (
    BudgetExceededError,
    EpsDeltaBudget,
    GaussianEvent,
    GDPBudget,
    LaplaceEvent,
    PrivacyEvent,
    PrivacyLedger,
    gdp_eps,
)
from mechanisms.privacy.ledger import LIMIT_RTOL, Budget, within_limit
from tests.mechanisms.privacy.test_privacy_ledger import _all_event_kinds


@dataclass(frozen=True)
class BudgetKind:
    """One implementation of the budget seam, with what the contract needs to know about it."""

    name: str
    make: Callable[[float], Budget]  # a budget of this kind whose limit is the given number
    gaussian_spend: Callable[[float], float]  # its spend for Gaussian events of total GDP mu (closed form)
    ledger: PrivacyLedger  # a ledger of events this budget accounts for, for the JSON round trip


DELTA = 1e-6
BUDGETS = [
    BudgetKind(
        "gdp",
        lambda limit: GDPBudget(mu_max=limit),
        lambda mu: mu,
        PrivacyLedger(GDPBudget(3.0), (GaussianEvent(0.2, count=3), LaplaceEvent(0.1))),
    ),
    BudgetKind(
        "eps_delta",
        lambda limit: EpsDeltaBudget(eps_max=limit, delta=DELTA),
        lambda mu: gdp_eps(mu, DELTA),
        PrivacyLedger(EpsDeltaBudget(50.0, 1e-6, 1e-3), tuple(_all_event_kinds())),
    ),
]


@pytest.fixture(params=BUDGETS, ids=[b.name for b in BUDGETS])
def kind(request: pytest.FixtureRequest) -> BudgetKind:
    k: BudgetKind = request.param
    return k


def _spend(kind: BudgetKind, events: Sequence[PrivacyEvent]) -> float:
    """What this kind of budget computes for ``events`` (a limit far above them does not change it)."""
    return PrivacyLedger(kind.make(1e6)).check(events).spent_after


def test_check_is_a_dry_run(kind: BudgetKind) -> None:
    ledger = PrivacyLedger(kind.make(_spend(kind, [GaussianEvent(0.3, count=11)])))
    assert ledger.spent() == 0.0
    batch = [GaussianEvent(0.3, count=5, label="steps 0-4")]
    report = ledger.check(batch)
    assert report.allowed and report.spent_before == 0.0
    assert report.spent_after == pytest.approx(kind.gaussian_spend(math.sqrt(5) * 0.3), rel=1e-9)
    assert (report.limit, report.unit) == (ledger.budget.limit, ledger.budget.unit)
    assert not ledger.would_exceed(batch) and ledger.events == ()  # the dry run changed nothing
    ledger = ledger.commit(batch)
    more = [GaussianEvent(0.3, count=7)]  # 12 steps in all: one past the limit
    report = ledger.check(more)
    assert report.spent_before == ledger.spent()
    assert report.spent_after == ledger.budget.spend([*batch, *more])
    assert not report.allowed and ledger.would_exceed(more) and ledger.events == tuple(batch)


def test_commit_appends_and_refuses_past_the_limit_unchanged(kind: BudgetKind) -> None:
    empty = PrivacyLedger(kind.make(_spend(kind, [GaussianEvent(0.3, count=11)])))
    first = empty.commit([GaussianEvent(0.3, count=5)])
    assert empty.events == () and first.events == (GaussianEvent(0.3, count=5),)  # a new ledger
    assert first.spent() == pytest.approx(kind.gaussian_spend(math.sqrt(5) * 0.3), rel=1e-9)
    full = first.commit([GaussianEvent(0.3, count=6)])  # 11 steps: exactly the limit
    assert full.spent() >= first.spent() and len(full.events) == 2
    too_much = [GaussianEvent(0.3)]
    assert full.would_exceed(too_much)
    before = full
    with pytest.raises(BudgetExceededError, match="REFUSED"):
        full.commit(too_much)
    assert full == before and full.spent() == before.spent()


def test_a_batch_exactly_on_the_limit_is_admitted(kind: BudgetKind) -> None:
    batch = [GaussianEvent(0.2, count=10)]
    budget_limit = PrivacyLedger(kind.make(100.0)).check(batch).spent_after
    ledger = PrivacyLedger(kind.make(budget_limit))
    report = ledger.check(batch)
    assert report.allowed and report.spent_after == budget_limit
    assert report.spent_after == pytest.approx(kind.gaussian_spend(0.2 * math.sqrt(10)), rel=1e-9)
    below = PrivacyLedger(kind.make(budget_limit * (1 - 1e-6)))
    assert not below.check(batch).allowed


def test_the_limit_rule_is_the_stated_tolerance(kind: BudgetKind) -> None:
    batch = [GaussianEvent(0.2, count=10)]
    spend = _spend(kind, batch)
    for limit, admitted in (
        (spend, True),
        (spend / (1 + 0.5 * LIMIT_RTOL), True),  # the spend is above the limit, within the tolerance
        (spend / (1 + 2 * LIMIT_RTOL), False),  # beyond it
    ):
        report = PrivacyLedger(kind.make(limit)).check(batch)
        assert report.allowed is admitted and report.allowed == within_limit(report.spent_after, limit)


def test_ledger_round_trip_through_json(kind: BudgetKind) -> None:
    ledger = kind.ledger
    text = json.dumps(ledger.to_dict(), allow_nan=False)
    back = PrivacyLedger.from_dict(json.loads(text))
    assert back == ledger
    assert back.spent() == pytest.approx(ledger.spent())


def test_another_ledger_version_or_budget_type_is_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        PrivacyLedger.from_dict({"version": 99, "budget": {}, "events": []})
    with pytest.raises(ValueError, match="budget type"):
        PrivacyLedger.from_dict({"version": 1, "budget": {"type": "rdp"}, "events": []})
