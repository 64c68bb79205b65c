"""Why this party refuses a request: the one refusal type of the party's domain.

Every rule, budget and state check of the daemon (``parties.policy``, ``parties.session``,
``parties.peering``, ``parties.steps``, ``parties.ahead``, the privacy ledger ``parties.privacy_budget``)
says no by raising :class:`Refusal` with a :class:`Reason` and a message for the operator and the
coordinator. The domain knows no transport: the service boundary (``parties.service``) turns the reason
into a gRPC status code, once, and writes the audit line (its ``outcome`` is the reason's name). The
reasons are named after the canonical status codes they are answered with, so a reason, its status code and
its audit outcome are one name.
"""

from __future__ import annotations

import enum


class Reason(enum.Enum):
    """What kind of refusal: the value says when it applies."""

    INVALID_ARGUMENT = "the request is malformed or does not fit this daemon (message, parameters, inputs)"
    PERMISSION_DENIED = "this party's policy does not allow it (caller, consortium member, allowlist, bounds)"
    FAILED_PRECONDITION = (
        "the session or run is not in a state for it (unknown, closed or failed session, step out of order, "
        "busy, a completed run step asked with other inputs, a state file that cannot be trusted, an "
        "analysis this party cannot account for)"
    )
    RESOURCE_EXHAUSTED = "a budget or limit of this party would be exceeded (decisions, privacy, sessions)"
    ALREADY_EXISTS = "the session id, or a peer's link in the session, is already in use"
    UNAVAILABLE = "a peer's link is lost or did not answer in time, or the daemon is shutting down"


class Refusal(Exception):
    """A request this party refuses: ``reason`` (what kind) and ``message`` (what was wrong and, where it
    helps, what to do), answered as the reason's status code with the message."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message
