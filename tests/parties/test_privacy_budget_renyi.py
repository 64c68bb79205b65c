"""``[budget] accountant = "renyi"`` (issue 23 item 4): the party's budget is a Rényi filter at the order its
epsilon/delta fix, persisted and reloaded, and the analysis is asked for the accept bit's Rényi bound."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from mechanisms.privacy import GaussianEvent, RDPBudget, budget_order, rdp_eps
from parties.config import ConfigError, PartyConfig, load_config
from parties.privacy_budget import LEDGER_FILE, PrivacyBudgetStore, PrivacyRefusal
from parties.registry import get_analysis
from proto.spec import PartyEntry, SessionSpec
from simulations.launcher import PartyOptions, party_config_text
from tests.parties.helpers import gm_params

TAU = 10.0
PARAMS: dict[str, Any] = gm_params(1.0, (-4.0, 6.0), tau=TAU)


def _cfg(tmp_path: Path, budget: dict[str, Any]) -> PartyConfig:
    path = tmp_path / "party-1.toml"
    path.write_text(party_config_text(1, 3, tmp_path, None, None, PartyOptions(privacy_budget=budget)))
    return load_config(path, insecure=True)


def test_renyi_accountant_config(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"epsilon": 4.0, "delta": 1e-5, "accountant": "renyi"})
    assert cfg.accountant == "renyi"
    assert _cfg(tmp_path, {"epsilon": 4.0, "delta": 1e-5}).accountant == "pld"
    for budget, msg in [
        ({"epsilon": 4.0, "delta": 1e-5, "accountant": "rdp"}, 'budget.accountant: must be "pld" or "renyi"'),
        ({"gdp_mu": 1.0, "accountant": "renyi"}, "budget.accountant: only used with an eps-at-delta budget"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(msg)):
            _cfg(tmp_path, budget)


def test_renyi_budget_is_enforced_persisted_and_reloaded(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"epsilon": 4.0, "delta": 1e-5, "accountant": "renyi"})
    store = PrivacyBudgetStore.load(cfg)
    assert isinstance(store.budget, RDPBudget) and store.budget.alpha == budget_order(4.0, 1e-5)
    alpha = store.budget.alpha
    spec = SessionSpec(
        session_id=b"s" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, 4)),
        t=1,
        reveal_mode="sign",
        model="gaussian-mean",
        model_params=PARAMS,
    )
    gm = get_analysis("gaussian-mean", PARAMS)
    ev = store.events_for(cfg, gm, spec, 30)
    assert isinstance(ev[0], GaussianEvent)  # tau form: no per-decision bit bound, charged alpha mu^2 / 2
    store.check(ev)
    store.commit(ev)
    assert store.ledger is not None
    assert store.ledger.spent() == pytest.approx(rdp_eps(30 * alpha * (1 / TAU) ** 2 / 2, alpha, 1e-5))
    doc = json.loads((cfg.state_dir / LEDGER_FILE).read_text())
    assert doc["ledger"]["budget"] == {"type": "renyi", "eps_max": 4.0, "delta": 1e-5, "alpha": alpha}
    again = PrivacyBudgetStore.load(cfg)
    assert again.ledger is not None and again.ledger.spent() == pytest.approx(store.ledger.spent())
    big = store.events_for(cfg, gm, spec, 10_000)
    with pytest.raises(PrivacyRefusal):
        store.check(big)
    assert math.isfinite(store.ledger.spent())


def test_the_bridge_passes_the_renyi_order_to_the_charge() -> None:
    """A fixed-sd penalty in the sign reveal, dry run (every decision at the cap): with the order the charge
    is a RenyiEvent with the same μ and the bit's ρ below the Gaussian's; without it, the plain Gaussian."""
    from mechanisms.privacy import RenyiEvent, coalition_view

    params = {"model_args": {"p": 4}, "kind": "mh", "penalty": {"sd": 0.8, "max_sensitivity": 0.6}}
    analysis = get_analysis("bayes-logistic", params)
    view = coalition_view("sign", 5, 2, 0)
    (plain,) = analysis.privacy_events("sign", view, 16)  # type: ignore[attr-defined]
    (ren,) = analysis.privacy_events("sign", view, 16, rdp_orders=(2.0,))  # type: ignore[attr-defined]
    assert type(plain) is GaussianEvent and isinstance(ren, RenyiEvent) and ren.mu == plain.mu
    assert 0 < ren.rho[0] < 0.8 * (2.0 * plain.mu**2 / 2)
