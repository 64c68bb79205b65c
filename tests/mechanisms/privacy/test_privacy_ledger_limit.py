"""The ledger's limit rule (issue 12, item 7): spend <= limit * (1 + LIMIT_RTOL), LIMIT_RTOL = 1e-9.

A plan whose last batch lands exactly on the limit is admitted although its floating-point spend is a few
ulps above it; anything more than the relative tolerance above is refused. Here the rule itself and the GDP
filter's float sum; the rule under both budgets is test_budget_contract.py."""

from __future__ import annotations

import math

import pytest

from mechanisms.privacy import (
    BudgetExceededError,
    GaussianEvent,
    GDPBudget,
    PrivacyLedger,
)
from mechanisms.privacy.ledger import LIMIT_RTOL, within_limit


def test_the_tolerance_is_stated() -> None:
    assert LIMIT_RTOL == 1e-9
    assert within_limit(1.0, 1.0) and within_limit(1.0 + 0.5e-9, 1.0)
    assert not within_limit(1.0 + 2e-9, 1.0)
    assert not within_limit(math.nan, 1.0)
    assert within_limit(0.0, 0.0) and not within_limit(1e-300, 0.0)


def test_gdp_last_batch_exactly_on_the_limit_is_admitted() -> None:
    ledger = PrivacyLedger(GDPBudget(mu_max=0.3))
    for _ in range(3):  # 9 decisions of mu = 0.1: exactly sqrt(9) * 0.1 = 0.3
        ledger = ledger.commit([GaussianEvent(0.1, count=3)])
    assert ledger.spent() > 0.3  # 0.30000000000000004: a bare "<=" refuses the last batch
    assert ledger.spent() == pytest.approx(0.3, rel=1e-15)
    assert ledger.would_exceed([GaussianEvent(0.1)])  # one more decision: sqrt(10) * 0.1
    assert ledger.would_exceed([GaussianEvent(1e-4)])  # 0.3 * (1 + 5.6e-8): beyond the tolerance
    with pytest.raises(BudgetExceededError):
        ledger.commit([GaussianEvent(1e-4)])
