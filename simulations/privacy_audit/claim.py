"""The claim an audit holds its tests against: what registry 1's ledger would charge for the K audited
decisions, read by the accountant ``[audit] accountant`` names.

* ``pld`` (the default): the PLD composition of the events (``compose_events``; the GDP curve when every
  event is Gaussian), ε at the audit's δ and the whole trade-off curve.
* ``renyi``: what a registry with ``[budget] accountant = "renyi"`` would claim. Its ledger charges the
  events of ``privacy_events(..., rdp_orders=(α,))`` at its filter's order α (a fixed-sd penalty's accept
  bit in the ``sign`` reveal gets the bit's Rényi bound, ``renyi.bit_rdp_table``; every other event its
  Gaussian or pure-ε ρ) and ``RDPBudget(·, δ, α)`` spends them: ε = ``rdp_eps(Σ ρ(α), α, δ)``. Both are
  called here, not re-derived. The order is ``[audit] renyi_order`` when given; otherwise every order of
  ``renyi.ORDERS`` is evaluated (each with its own charge, as a registry fixing that order would make it)
  and the smallest ε is the claim. Choosing the order after seeing the ε is valid here because the audited
  sequence of decisions is FIXED and non-adaptive (the same public proposal K times, chosen before any
  output): such a mechanism is (α, Σρ(α))-RDP at every order at once. A registry's Rényi *filter* must fix
  its order before the run (``renyi.budget_order(ε_max, δ)``, which the report gives for a budget of exactly
  the claimed ε); the smallest ε over the grid is the strictest claim any of those filters could back. The
  claim's curve is the (ε, δ)-DP curve at the audit's δ.

Neither reading can be made (``Unaccountable``, or an event without a Rényi bound): no finite claim.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mechanisms.privacy import (
    ORDERS,
    EnvelopeTradeOff,
    EpsDeltaTradeOff,
    GaussianTradeOff,
    PrivacyEvent,
    PrivacyLedger,
    RDPBudget,
    TradeOff,
    UnsupportedEventError,
    budget_order,
    coalition_view,
    compose_events,
)
from simulations.privacy_audit.setup import Setup

#: the limit of the RDPBudget whose spend is the claim: it plays no part in ``spend`` (the order is given)
_NO_LIMIT = sys.float_info.max


@dataclass(frozen=True)
class Claim:
    """The claim: its curve and ε at δ (None: no finite claim), in words, and the events it reads."""

    curve: TradeOff | None
    eps: float | None
    text: str
    events: list[PrivacyEvent]
    accountant: str = "pld"
    order: float | None = None  # renyi: the order of the claim
    rho: float | None = None  # renyi: Σ ρ of the events at that order
    eps_by_order: dict[float, float] = field(default_factory=dict)  # renyi: ε at each order evaluated

    def doc(self, delta: float) -> dict[str, Any]:
        """The report's ``claim`` section."""
        out: dict[str, Any] = {
            "accountant": self.accountant,
            "text": self.text,
            "eps_at_delta": self.eps,
            "delta": delta,
        }
        if self.accountant == "renyi":
            out["renyi_order"] = self.order
            out["rho_at_order"] = self.rho
            out["eps_by_order"] = {f"{a:g}": e for a, e in self.eps_by_order.items()}
            # the same events read by the PLD accountant (the default claim), for comparison
            out["pld_eps_at_delta"] = compose_events(self.events).eps_at(delta) if self.events else 0.0
            if self.eps:  # the order a registry's filter would fix for a budget of exactly this ε
                out["budget_order_at_claimed_eps"] = budget_order(self.eps, delta)
        return out


def claim_of(setup: Setup) -> Claim:
    """What registry 1 would charge for K decisions of this session, read by ``cfg.accountant``."""
    from parties.analyses import Unaccountable

    cfg = setup.cfg
    try:
        if cfg.accountant == "renyi":
            return _renyi_claim(setup)
        events = _events(setup, None)
    except Unaccountable as exc:
        return Claim(None, None, f"no finite claim: {exc}", [], cfg.accountant)
    comp = compose_events(events)
    eps = comp.eps_at(cfg.delta)
    if comp.gdp_only:
        assert comp.mu is not None
        return Claim(GaussianTradeOff(comp.mu), eps, f"{comp.mu:.6g}-GDP (the ledger's events)", events)
    top = min(700.0, max(30.0, 1.5 * eps))
    grid = np.linspace(0.0, top, 1201)
    curve = EnvelopeTradeOff(tuple(grid), tuple(np.clip(comp.delta_at_many(grid), 0, 1)), name="claimed")
    return Claim(curve, eps, "the ledger's events (PLD)", events)


def _events(setup: Setup, rdp_orders: tuple[float, ...] | None) -> list[PrivacyEvent]:
    """The events registry 1's ledger charges for the K audited decisions (priced per decision where the
    plan is); ``rdp_orders``: a Rényi budget's order, as ``parties.privacy_budget`` passes it."""
    from parties.registry import get_analysis

    cfg = setup.cfg
    view = coalition_view(cfg.reveal, cfg.m, cfg.threshold, cfg.colluding)
    batch = {k: np.asarray(v) for k, v in setup.request(cfg.steps).to_inputs().items()}
    analysis: Any = get_analysis(cfg.model_name, setup.session_params)
    if rdp_orders is None:
        return list(analysis.privacy_events(cfg.reveal, view, cfg.steps, batch))
    return list(
        analysis.privacy_events(cfg.reveal, view, cfg.steps, batch, rdp_orders=rdp_orders)
    )


def _renyi_claim(setup: Setup) -> Claim:
    """The Rényi accountant's ε at δ: at ``renyi_order``, else the smallest over ``ORDERS`` (module
    docstring). Raises ``Unaccountable`` when the ledger cannot charge the decisions at all."""
    cfg = setup.cfg
    orders = (cfg.renyi_order,) if cfg.renyi_order is not None else ORDERS
    by_order: dict[float, float] = {}
    charged: dict[float, tuple[list[PrivacyEvent], float]] = {}
    for alpha in orders:
        events = _events(setup, (alpha,))
        budget = RDPBudget(_NO_LIMIT, cfg.delta, alpha)
        try:
            by_order[alpha] = PrivacyLedger(budget, tuple(events)).spent()
        except UnsupportedEventError as exc:
            return Claim(None, None, f"no finite claim (Renyi accountant): {exc}", events, "renyi")
        charged[alpha] = (events, budget.rho(events))
    alpha = min(by_order, key=lambda a: by_order[a])  # the first of equal ones
    events, rho = charged[alpha]
    eps = by_order[alpha]
    how = (
        "the configured renyi_order"
        if cfg.renyi_order is not None
        else "the smallest eps over renyi.ORDERS, valid for the audit's fixed, non-adaptive decisions"
    )
    text = (
        f"Renyi accountant at alpha = {alpha:g} ({how}): sum rho = {rho:.6g} of the ledger's events "
        f"(rdp_orders), RDPBudget spend eps = {eps:.6g} at delta = {cfg.delta:g}"
    )
    return Claim(EpsDeltaTradeOff(eps, cfg.delta), eps, text, events, "renyi", alpha, rho, by_order)
