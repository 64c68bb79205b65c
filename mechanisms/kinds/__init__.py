"""Decision kinds: what a model session's batches are (MH or rejection-sampling decisions, a warm-start
release, a blocked run's effects release), each a module owning all that varies with it — its keys of the
session's plan, its checks, its charge, its batch and a registry's terms of it (:mod:`.base`) — and the
session's plan that names one (:class:`DecisionPlan`, :mod:`.plan`). The registry of kinds is
:mod:`.registry`; docs/ARCHITECTURE.md, "Where to add", says what a new kind touches."""

from __future__ import annotations

from mechanisms.models.base import Model
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.privacy.threat import RevealView
from mechanisms.privacy.worst_record import WorstRecordCharge
from mechanisms.samplers.requests import DecisionRequest

from .base import BatchRefused, ChargeAsk, DecisionKind, PartyBatch
from .plan import NOISES, PARAMS, PLAN_KINDS, DecisionPlan
from .registry import KINDS
from .rejection import BOUNDS, RejectionSettings
from .statistics import RELEASE_MODE

__all__ = [
    "BOUNDS",
    "KINDS",
    "NOISES",
    "PARAMS",
    "PLAN_KINDS",
    "RELEASE_MODE",
    "BatchRefused",
    "ChargeAsk",
    "DecisionKind",
    "DecisionPlan",
    "PartyBatch",
    "RejectionSettings",
    "decision_events",
    "worst_record_charge",
]


def decision_events(
    plan: DecisionPlan,
    model: Model,
    mode: str,
    view: RevealView,
    n: int,
    name: str,
    request: DecisionRequest | None = None,
    neighbours: str = "replace-one",
    rdp_orders: tuple[float, ...] | None = None,
) -> list[PrivacyEvent]:
    """The events one batch of ``n`` decisions of ``plan`` adds to a registry's ledger
    (:meth:`DecisionPlan.events` of the :class:`ChargeAsk` of these arguments)."""
    return plan.events(ChargeAsk(model, mode, view, n, name, request, neighbours, rdp_orders))


def worst_record_charge(
    plan: DecisionPlan,
    model: Model,
    view: RevealView,
    neighbours: str = "replace-one",
    rdp_orders: tuple[float, ...] | None = None,
) -> WorstRecordCharge | None:
    """:meth:`DecisionPlan.worst_record_charge`."""
    return plan.worst_record_charge(model, view, neighbours, rdp_orders)
