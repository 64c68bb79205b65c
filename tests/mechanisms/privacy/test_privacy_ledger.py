"""Party ledger: dry run, commit, refusal, unsupported events, event dict/JSON round trips, plug-in events,
with each budget's own numbers. What both budgets promise alike (dry run, commit, limit rule, the ledger's
JSON round trip) is test_budget_contract.py, run over both."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import ClassVar

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from mechanisms.privacy import (
    BudgetExceededError,
    EpsDeltaBudget,
    EpsDeltaEvent,
    GaussianEvent,
    GDPBudget,
    LaplaceEvent,
    LazyAcceptance,
    MetropolisAcceptance,
    PrivacyEvent,
    PrivacyLedger,
    ProfileEvent,
    UnsupportedEventError,
    composed_eps,
    event_from_dict,
    gdp_eps,
    pure_dp_to_gdp,
    register_event_type,
    sign_reveal_privacy,
)


def test_gdp_filter_dry_run_commit_and_refusal() -> None:
    ledger = PrivacyLedger(GDPBudget(mu_max=1.0))
    batch = [GaussianEvent(0.3, count=5, label="sign steps 0-4")]  # sqrt(5)*0.3 = 0.67
    report = ledger.check(batch)
    assert report.allowed and report.spent_before == 0.0
    assert report.spent_after == pytest.approx(math.sqrt(5) * 0.3)
    assert not ledger.would_exceed(batch) and ledger.events == ()  # dry run changed nothing
    ledger = ledger.commit(batch)
    assert ledger.spent() == pytest.approx(math.sqrt(0.45))
    # 0.45 + 0.3² * 6 = 0.99 ≤ 1: allowed; one more step (1.08) is refused
    ledger = ledger.commit([GaussianEvent(0.3, count=6)])
    too_much = [GaussianEvent(0.3)]
    assert ledger.would_exceed(too_much)
    before = ledger
    with pytest.raises(BudgetExceededError, match="REFUSED"):
        ledger.commit(too_much)
    assert ledger == before and ledger.spent() == pytest.approx(math.sqrt(0.99))


def test_gdp_filter_boundary_is_inclusive() -> None:
    ledger = PrivacyLedger(GDPBudget(mu_max=0.5)).commit([GaussianEvent(0.3), GaussianEvent(0.4)])
    assert ledger.spent() == pytest.approx(0.5)
    assert ledger.would_exceed([GaussianEvent(1e-3)])  # 0.5 * (1 + 2e-6): past the 1e-9 tolerance


def test_gdp_filter_admits_pure_events_and_refuses_approximate_ones() -> None:
    ledger = PrivacyLedger(GDPBudget(mu_max=2.0))
    pure = [EpsDeltaEvent(0.5, 0.0, label="abcdp svt run"), LaplaceEvent(0.2)]
    report = ledger.check(pure)
    assert report.spent_after == pytest.approx(math.hypot(pure_dp_to_gdp(0.5), pure_dp_to_gdp(0.2)))
    with pytest.raises(UnsupportedEventError, match="no GDP guarantee"):
        ledger.check([EpsDeltaEvent(0.5, 1e-6)])
    unbounded = sign_reveal_privacy(MetropolisAcceptance(), 0.5).profile
    with pytest.raises(UnsupportedEventError):
        ledger.would_exceed([ProfileEvent(unbounded)])
    lazy = sign_reveal_privacy(LazyAcceptance(0.5), 0.5).profile
    assert lazy.pure_eps is not None
    assert ledger.check([ProfileEvent(lazy)]).spent_after == pytest.approx(pure_dp_to_gdp(lazy.pure_eps))


def test_eps_delta_budget_via_pld() -> None:
    budget = EpsDeltaBudget(eps_max=4.0, delta=1e-6)
    ledger = PrivacyLedger(budget)
    steps: list[PrivacyEvent] = [GaussianEvent(0.2, count=10)]
    ledger = ledger.commit(steps)
    assert ledger.spent() == pytest.approx(gdp_eps(0.2 * math.sqrt(10), 1e-6), rel=1e-9)
    # mixed events go through the PLD
    mixed: list[PrivacyEvent] = [LaplaceEvent(0.1, count=3)]
    assert ledger.check(mixed).spent_after == pytest.approx(composed_eps(steps + mixed, 1e-6), rel=1e-12)
    # an unbounded sign-reveal step: its infinite-loss mass exceeds δ, so ε = ∞ and it is refused
    unbounded = sign_reveal_privacy(MetropolisAcceptance(), 0.5).profile
    report = ledger.check([ProfileEvent(unbounded)])
    assert not report.allowed and report.spent_after == math.inf
    with pytest.raises(BudgetExceededError):
        ledger.commit([ProfileEvent(unbounded)])


def _all_event_kinds() -> list[PrivacyEvent]:
    prof = sign_reveal_privacy(LazyAcceptance(0.6), 0.3, -5.0, 1.0, eps_step=0.05).profile
    return [
        GaussianEvent(0.25, count=7, label="penalty step"),
        LaplaceEvent(0.1),
        EpsDeltaEvent(0.9, 1e-7, count=2, label="svt"),
        ProfileEvent(prof, count=3, label="lazy sign step"),
    ]


def test_event_round_trip_through_json() -> None:
    for event in _all_event_kinds():
        data = json.loads(json.dumps(event.to_dict(), allow_nan=False))
        assert event_from_dict(data) == event
    with pytest.raises(ValueError, match="unknown privacy event type"):
        event_from_dict({"type": "nope"})
    with pytest.raises(ValueError):
        GaussianEvent(0.1, count=0)


@register_event_type
@dataclasses.dataclass(frozen=True)
class _ToySVTEvent(PrivacyEvent):
    """Test plug-in: an ABCDP-like sparse-vector run, pure eps-DP with eps = (c + 1) * sens / b."""

    kind: ClassVar[str] = "test_toy_svt"
    accepts: int
    sensitivity: float
    scale: float

    def _eps(self) -> float:
        return (self.accepts + 1) * self.sensitivity / self.scale

    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        return EpsDeltaEvent(self._eps()).pld(discretization)

    def gdp_mu(self) -> float | None:
        return pure_dp_to_gdp(self._eps())


def test_new_event_types_plug_into_ledger() -> None:
    ev = _ToySVTEvent(accepts=3, sensitivity=0.02, scale=0.1, label="abcdp")
    assert event_from_dict(json.loads(json.dumps(ev.to_dict()))) == ev
    budgets: list[GDPBudget | EpsDeltaBudget] = [GDPBudget(5.0), EpsDeltaBudget(2.0, 1e-6)]
    for budget in budgets:
        ledger = PrivacyLedger(budget).commit([ev])
        assert PrivacyLedger.from_dict(ledger.to_dict()) == ledger
        assert ledger.spent() > 0
    with pytest.raises(ValueError, match="already registered"):

        @register_event_type
        @dataclasses.dataclass(frozen=True)
        class _Clash(_ToySVTEvent):
            kind: ClassVar[str] = "gaussian"
