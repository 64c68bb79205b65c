"""The ``abcdp-rff`` analysis (``parties.abcdp``) in process, no daemon: its parameter and session checks, the
run's epsilon charged once and only where the plan's noise backs it against the assumed coalition, and
``confar privacy plan``'s answer naming the collusion reason. Federated ABCDP runs over daemon processes are
tests/network/test_federated_abcdp.py, whose plan this borrows."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mechanisms.abcdp.federated import FederatedSvtPlan
from mechanisms.privacy import EpsDeltaEvent, coalition_view
from parties.abcdp import AbcdpRff, check_session, threat_refusal, tolerated_colluders
from parties.analyses import AnalysisError, Dataset, Unaccountable
from proto.spec import PartyEntry, SessionSpec, SpecError
from tests.network.test_federated_abcdp import BUDGET_DELTA, BUDGET_EPS, D, M, N, _plan


def _spec(params: dict[str, Any], mode: str = "svt", model: str = "abcdp-rff", m: int = 3) -> SessionSpec:
    return SessionSpec(
        session_id=b"a" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, m + 1)),
        t=(m - 1) // 2,
        reveal_mode=mode,
        model=model,
        model_params=params,
    )


def test_analysis_checks() -> None:
    plan = FederatedSvtPlan(
        eps_abc=0.1,
        eps_total=1.0,
        c=3,
        resample=False,
        n_records=N,
        n_features=D,
        bandwidth=0.6,
        dim=1,
        map_seed=5,
    )
    a = AbcdpRff({**plan.to_params(), "columns": ["y"]})
    assert a.plan.svt == plan and a.plan.columns == ("y",)
    for bad, key in (({"c": "three"}, "'c'"), ({"bandwidth": -1.0}, "bandwidth"), ({"foo": 1}, "foo")):
        with pytest.raises(AnalysisError, match=key):
            AbcdpRff({**plan.to_params(), **bad})
    with pytest.raises(AnalysisError, match="missing"):
        AbcdpRff({k: v for k, v in plan.to_params().items() if k != "n_records"})
    with pytest.raises(AnalysisError, match="columns"):
        AbcdpRff({**plan.to_params(), "columns": "y"})
    data = Dataset({"y": np.zeros(3), "z": np.ones(3)})

    def check(params: dict[str, Any], **kw: Any) -> None:
        spec = _spec(params, **kw)
        check_session(spec, data, AbcdpRff(spec.model_params))

    check({**plan.to_params(), "columns": ["y"]})
    with pytest.raises(AnalysisError, match="dimension is 1"):
        check(plan.to_params())  # two columns, plan dim 1
    with pytest.raises(AnalysisError, match=r"no column\(s\) \['w'\]"):
        check({**plan.to_params(), "columns": ["w"]})
    with pytest.raises(AnalysisError, match="exactly the analysis"):
        check(plan.to_params(), mode="sign")
    with pytest.raises(SpecError, match="honest majority"):
        _spec(plan.to_params(), m=2)
    # the run's epsilon, once, whatever the batch size; None where it is not backed
    outside = coalition_view("svt", 3, 1, 0)
    ev = a.privacy_events("svt", outside, 64)
    assert len(ev) == 1 and ev[0].count == 1
    assert isinstance(ev[0], EpsDeltaEvent) and ev[0].eps == pytest.approx(plan.privacy_event().eps)
    assert "up to 1 colluding parties, not more" in ev[0].label  # every report carries its threat model
    exact_ev = AbcdpRff(
        {**dataclasses.replace(plan, noise_shares="exact").to_params(), "columns": ["y"]}
    ).privacy_events("svt", coalition_view("svt", 3, 1, 0), 64)
    assert "coordinator only" in exact_ev[0].label
    ok = tolerated_colluders(plan, 3, 1)
    assert threat_refusal(plan, coalition_view("svt", 3, 1, ok)) is None
    msg = threat_refusal(plan, coalition_view("svt", 3, 1, ok + 1))
    assert msg is not None and "colluding" in msg
    with pytest.raises(Unaccountable, match="holds against at most 1 colluding"):
        a.privacy_events("svt", coalition_view("svt", 3, 1, ok + 1), 64)
    assert ok == 1 and tolerated_colluders(plan, 7, 3) == 3  # robust shares: any h = m - t sum to Lap
    # a session opened with a lower threshold tolerates fewer: q > t parties rebuild the shared sums
    assert tolerated_colluders(plan, 7, 1) == 1
    low_t = threat_refusal(plan, coalition_view("svt", 7, 1, 2))
    assert low_t is not None and "session threshold t = 1" in low_t
    assert "limit is the session threshold" in low_t
    exact = dataclasses.replace(plan, noise_shares="exact")
    assert tolerated_colluders(exact, 7, 3) == 0 and threat_refusal(exact, coalition_view("svt", 7, 3, 1))
    inf = dataclasses.replace(plan, eps_total=math.inf)
    assert threat_refusal(inf, coalition_view("svt", 3, 1, 0)) is not None
    with pytest.raises(Unaccountable, match="non-private"):
        AbcdpRff(inf.to_params()).privacy_events("svt", coalition_view("svt", 3, 1, 0), 1)


def test_plan_names_the_collusion_reason_and_charges_the_run_once(tmp_path: Path) -> None:
    """confar privacy plan for an ABCDP run: a party assuming m - 1 colluders gets the collusion reason
    (not the generic 'unbounded' one), and a run charged once is not reported in batches."""
    from coordinator import privacy as cprivacy
    from parties.config import load_config
    from parties.privacy_budget import PrivacyBudgetStore
    from proto.spec import PartyEntry
    from simulations.launcher import PartyOptions, party_config_text

    plan = _plan(2.0, 3, False, 5, 0.1)
    params = {**plan.to_params(), "columns": ["y"]}
    answers = {}
    for pid, colluding in ((1, "all"), (2, 1), (3, 1)):
        path = tmp_path / f"party-{pid}.toml"
        budget = {"epsilon": BUDGET_EPS, "delta": BUDGET_DELTA, "colluding": colluding}
        path.write_text(
            party_config_text(
                pid,
                M,
                tmp_path,
                None,
                None,
                PartyOptions(
                    models=("abcdp-rff",),
                    modes=("svt",),
                    privacy_budget=budget,
                ),
            )
        )
        cfg = load_config(path, insecure=True)
        answers[pid] = PrivacyBudgetStore.load(cfg).plan(cfg, AbcdpRff(params), _spec(params), 1, 64, "", 0)
    assert answers[1].would_refuse and "holds against at most 1 colluding parties" in answers[1].message
    assert "colluding assumes 2" in answers[1].message and "unbounded" not in answers[1].message
    assert not answers[2].would_refuse and answers[2].batches_allowed == 1
    pf = cprivacy.PlanFile(
        source=tmp_path / "plan.toml",
        identity="coordinator",
        tls=None,
        rpc_timeout_s=1.0,
        parties=[PartyEntry(p, f"party-{p}", "127.0.0.1:1") for p in range(1, M + 1)],
        session=cprivacy.PlannedSession("abcdp-rff", "svt", params, "mesh", None, 50, 64),
    )
    text, bad = cprivacy.format_plan(pf, answers)
    assert bad == 1 and "batches that fit" not in text
    assert text.count("the ABCDP run is charged once, whatever its batches: it fits") == 2
    assert "it does not fit" in text and "for the whole run: eps_delta" in text
