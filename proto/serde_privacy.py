"""Conversion of the privacy calls of the party service (``PlanPrivacy``, ``PrivacyReport``) between
:mod:`proto.records` and protobuf: ``x_to_proto`` / ``x_from_proto`` pairs, split from :mod:`proto.serde`
(which owns arrays, the session spec and peer frames) to keep each module short.

A party answers with :class:`~proto.records.PlanAnswer` / :class:`~proto.records.LedgerReport`
(``parties.privacy_budget``); the coordinator reads them back as the same records (``coordinator.privacy``,
``coordinator.outputs``). The request a party reads is validated here (:class:`proto.serde.WireError`, which
the party turns into INVALID_ARGUMENT). Each pair has a round-trip test in ``tests/proto/test_serde.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from proto import party_pb2
from proto.records import BudgetState, LedgerReport, PlanAnswer
from proto.serde import WireError, spec_from_proto, spec_to_proto
from proto.spec import SessionSpec


@dataclass(frozen=True)
class PlanCall:
    """A ``PlanPrivacy`` request: the planned session (never opened), its batches and decisions per batch."""

    spec: SessionSpec
    batches: int
    batch_size: int


def plan_request_to_proto(call: PlanCall) -> party_pb2.PlanPrivacyRequest:
    return party_pb2.PlanPrivacyRequest(
        spec=spec_to_proto(call.spec), batches=call.batches, batch_size=call.batch_size
    )


def plan_request_from_proto(msg: party_pb2.PlanPrivacyRequest) -> PlanCall:
    """The planned session; WireError without a spec, with batches or batch_size < 1, or a bad spec."""
    if not msg.HasField("spec") or msg.batches < 1 or msg.batch_size < 1:
        raise WireError("PlanPrivacy needs a spec, batches >= 1 and batch_size >= 1")
    return PlanCall(spec_from_proto(msg.spec), int(msg.batches), int(msg.batch_size))


def report_request_to_proto() -> party_pb2.PrivacyReportRequest:
    return party_pb2.PrivacyReportRequest()


def budget_to_proto(b: BudgetState) -> party_pb2.PrivacyBudgetState:
    if not b.configured:
        return party_pb2.PrivacyBudgetState(configured=False)
    return party_pb2.PrivacyBudgetState(
        configured=True, budget_json=b.budget_json, unit=b.unit, limit=b.limit, spent=b.spent
    )


def budget_from_proto(msg: party_pb2.PrivacyBudgetState) -> BudgetState:
    return BudgetState(bool(msg.configured), msg.budget_json, msg.unit, float(msg.limit), float(msg.spent))


def plan_answer_to_proto(a: PlanAnswer) -> party_pb2.PlanPrivacyResponse:
    return party_pb2.PlanPrivacyResponse(
        party=a.party,
        identity=a.identity,
        budget=budget_to_proto(a.budget),
        projected=a.projected,
        would_refuse=a.would_refuse,
        message=a.message,
        events_json=a.events_json,
        batches_allowed=a.batches_allowed,
        decisions_used=a.decisions_used,
        decisions_budget=a.decisions_budget,
    )


def plan_answer_from_proto(msg: party_pb2.PlanPrivacyResponse) -> PlanAnswer:
    return PlanAnswer(
        party=int(msg.party),
        identity=msg.identity,
        budget=budget_from_proto(msg.budget),
        projected=float(msg.projected),
        would_refuse=bool(msg.would_refuse),
        message=msg.message,
        events_json=msg.events_json,
        batches_allowed=int(msg.batches_allowed),
        decisions_used=int(msg.decisions_used),
        decisions_budget=int(msg.decisions_budget),
    )


def report_to_proto(r: LedgerReport) -> party_pb2.PrivacyReportResponse:
    return party_pb2.PrivacyReportResponse(
        party=r.party,
        identity=r.identity,
        budget=budget_to_proto(r.budget),
        events_json=r.events_json,
        decisions_used=r.decisions_used,
        run_charges_json=r.run_charges_json,
        colluding=r.colluding,
        neighbours=r.neighbours,
    )


def report_from_proto(msg: party_pb2.PrivacyReportResponse) -> LedgerReport:
    return LedgerReport(
        party=int(msg.party),
        identity=msg.identity,
        budget=budget_from_proto(msg.budget),
        events_json=msg.events_json,
        decisions_used=int(msg.decisions_used),
        run_charges_json=msg.run_charges_json,
        colluding=msg.colluding,
        neighbours=msg.neighbours,
    )
