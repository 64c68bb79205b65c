"""A decision kind added as ``docs/ARCHITECTURE.md`` ("Where to add") says: one module (here, this test's
``CountKind``) and its line in the registry of kinds (here, ``monkeypatch.setitem``). Nothing else changes:
the plan parses its key and refuses it elsewhere, a registry's bridge makes its terms and charges it
through the plan, and real daemons (gRPC with mutual TLS, in this process) reveal its sum. The kind is a
release of each registry's record count with its own Gaussian noise (add-remove sensitivity 1), the
smallest kind that is neither MH nor rejection nor a warm-start release."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.api import SessionOptions
from mechanisms import noise
from mechanisms.kinds import KINDS, BatchRefused, ChargeAsk, DecisionKind, DecisionPlan, PartyBatch
from mechanisms.kinds.base import part
from mechanisms.privacy.charge import Unaccountable
from mechanisms.privacy.events import GaussianEvent, PrivacyEvent
from mechanisms.privacy.threat import coalition_view
from mechanisms.samplers.terms import Terms
from parties.analyses import AnalysisError, Dataset
from parties.analyses import Unaccountable as PartyUnaccountable
from parties.registry import get_analysis
from tests.parties.helpers import coordinator_for, inproc_consortium

SD = 2.0


@dataclass(frozen=True)
class Count:
    """The kind's settings: each registry's noise sd on its record count."""

    sd: float

    def __post_init__(self) -> None:
        if not (isinstance(self.sd, int | float) and 0 < self.sd < math.inf):
            raise ValueError(f"sd must be a finite number > 0, got {self.sd!r}")


class CountKind(DecisionKind):
    name = "count"
    keys = ("count",)

    def read(self, params: Mapping[str, Any]) -> Count | None:
        return part(params, "count", lambda d: Count(**d))  # type: ignore[no-any-return]

    def write(self, settings: Count) -> dict[str, Any]:
        return {"count": {"sd": settings.sd}}

    def check(self, plan: Any) -> None:
        if not isinstance(plan.settings, Count):
            raise ValueError("kind 'count' needs its count settings")
        if plan.penalty is not None or plan.lazy is not None:
            raise ValueError("a count release takes no penalty or lazy acceptance")

    def events(self, plan: Any, ask: ChargeAsk) -> list[PrivacyEvent]:
        view, name, neighbours = ask.view, ask.name, ask.neighbours
        if not view.observation.noisy_sum:
            raise Unaccountable(f"{name}: a count release is accounted in reveal mode 'sum' only")
        delta = 1.0 if neighbours == "add-remove" else 0.0
        mu = delta / (plan.settings.sd * math.sqrt(view.threat.residual_parties))
        return [GaussianEvent(mu, count=1, label=f"{name} record count, sd={plan.settings.sd:g}")]

    def terms(self, plan: Any, batch: PartyBatch) -> Terms:
        if batch.n != 1:
            raise BatchRefused(f"{batch.name}: a count release has 1 value, got a batch of {batch.n}")
        count = float(batch.model.n_records(batch.cols))
        values = np.array([count]) + noise.normal(batch.rng, plan.settings.sd, 1)
        return Terms(values, None, public=np.zeros(1))


@pytest.fixture
def count_kind(monkeypatch: pytest.MonkeyPatch) -> CountKind:
    kind = CountKind()
    monkeypatch.setitem(KINDS, kind.name, kind)
    return kind


def test_the_plan_parses_writes_and_refuses_a_new_kind(count_kind: CountKind) -> None:
    plan = DecisionPlan.from_params({"kind": "count", "count": {"sd": SD}})
    assert plan.settings == Count(SD) and plan.decision_kind is count_kind
    assert DecisionPlan.from_params(plan.to_params()) == plan
    with pytest.raises(ValueError, match=r"\['count'\] are parameters of kind 'count', not of kind 'mh'"):
        DecisionPlan.from_params({"count": {"sd": SD}})
    with pytest.raises(ValueError, match="needs its count settings"):
        DecisionPlan.from_params({"kind": "count"})
    with pytest.raises(ValueError, match="bad count"):
        DecisionPlan.from_params({"kind": "count", "count": {"sd": -1.0}})
    with pytest.raises(ValueError, match="no penalty"):
        DecisionPlan.from_params({"kind": "count", "count": {"sd": SD}, "penalty": {"tau": 1.0, "n": 5}})


def test_a_registry_makes_and_charges_the_new_kinds_batch(count_kind: CountKind) -> None:
    a = get_analysis("gaussian-mean", {"kind": "count", "count": {"sd": SD}})
    data = Dataset({"x": np.arange(17.0)})
    from hss.randomness import SecureRandom

    got = a.terms(data, {}, 1, 3, "sum", SecureRandom(b"k" * 32))
    assert got.values.shape == (1,) and abs(got.values[0] - 17.0) < 8 * SD  # 17 + N(0, 4)
    with pytest.raises(AnalysisError, match="has 1 value, got a batch of 2"):
        a.terms(data, {}, 2, 3, "sum", SecureRandom(b"k" * 32))
    view = coalition_view("sum", 3, 1, 0)
    (ev,) = a.privacy_events("sum", view, 1, neighbours="add-remove")
    assert isinstance(ev, GaussianEvent) and ev.mu == pytest.approx(1.0 / (SD * math.sqrt(3)))
    with pytest.raises(PartyUnaccountable, match="reveal mode 'sum' only"):
        a.privacy_events("sign", coalition_view("sign", 3, 1, 0), 1)


def test_daemons_reveal_the_new_kinds_sum(count_kind: CountKind, tmp_path: Path) -> None:
    """Three registries of 30, 40 and 50 records: the revealed total is 120 plus the sum of their three
    N(0, sd^2) draws (sd 2: |error| < 8 sqrt(3) sd fails with probability ~1e-15)."""
    rng = np.random.default_rng(0)
    data = [rng.normal(0.0, 1.0, k) for k in (30, 40, 50)]

    async def main() -> float:
        async with (
            inproc_consortium(tmp_path, 3, data) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            params = DecisionPlan(kind="count", settings=Count(SD)).to_params()
            sess = await coord.open_session(
                SessionOptions(reveal_mode="sum", model="gaussian-mean", model_params=params)
            )
            d = await sess.evaluate({}, 1)
            await sess.close()
            return float(np.asarray(d.revealed, dtype=np.float64)[0])

    total = asyncio.run(main())
    assert abs(total - 120.0) < 8 * math.sqrt(3) * SD, total
