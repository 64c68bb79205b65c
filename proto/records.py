"""Plain records that cross the wire or are kept on both sides of it (no protobuf here).

* :class:`Kind`, :class:`Frame`: one party-to-party frame of the share exchange (``proto/peer.proto``
  ``PeerFrame``), as the transport-agnostic runner ``parties.exchange`` and the coordinator's relay see it.
* :class:`RunStepRef`: which run step a party holds, as it reports it to the coordinator when a run is
  resumed (``party.proto`` ``RunResume``; ``parties.replay`` keeps the records it refers to).
* :class:`RunCharge`: run steps a party charged to its privacy budget, as kept in its ledger file
  (``parties.privacy_budget``) and reported to the coordinator (``PrivacyReport.run_charges_json``).
* :class:`BudgetState`, :class:`PlanAnswer`, :class:`LedgerReport`: a party's privacy budget and its
  answers to ``PlanPrivacy`` and ``PrivacyReport`` (``party.proto``).
* :class:`KeyBundle`, :class:`SessionState`, :class:`PartyStatus`, :class:`EvaluateAnswer`: a party's signed
  session key and its answers to ``Status`` and ``Evaluate`` (``party.proto``).

:mod:`proto.serde` converts frames and run-step references to and from protobuf, :mod:`proto.serde_privacy`
the privacy answers and :mod:`proto.serde_session` the session calls; a run charge travels as JSON
(:meth:`RunCharge.to_dict` / :meth:`RunCharge.from_dict`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import IntEnum

from hss.runtime import Payload

ReceiverMessages = tuple[tuple[int, Payload], ...]  # (round, payload) for the receiver, in order


class Kind(IntEnum):
    HELLO = 1
    DATA = 2
    EMPTY = 3
    DONE = 4


@dataclass(frozen=True)
class Frame:
    step: int
    round: int
    src: int
    dst: int
    kind: Kind
    payload: Payload | None = None


@dataclass(frozen=True)
class RunStepRef:
    """Which run step a party holds, as it reports it to the coordinator (no messages)."""

    run_id: str
    run_step: int  # 0: no run step completed here
    digest: bytes = b""  # step_digest(...) of the request that computed it
    execution: bytes = b""  # the id of the session that computed it


_RUN_CHARGE_KEYS = {"run_id", "session", "from_step", "to_step", "decisions"}
_RUN_CHARGE_PROOF = {"digest", "noise_key"}  # since run charges are idempotent; absent in older ledgers


@dataclass(frozen=True)
class RunCharge:
    """Run steps ``from_step..to_step`` of run ``run_id`` charged (once each) in session ``session``.

    ``digest`` (hex) is the step digest (``parties.replay.step_digest``) of ``to_step`` as charged and
    ``noise_key`` the ``parties.replay.key_id`` of the run noise key that drew its noise: together they let a
    later session recognise a re-evaluation of ``to_step`` that reproduces the charged release exactly
    (``parties.privacy_budget.PrivacyBudgetStore.charged_run_step``). Both are empty in ledgers written
    before that existed (such a charge is never matched, so its step is charged again: conservative)."""

    run_id: str
    session: str  # the session id's first 16 hex digits, as in the events' labels
    from_step: int
    to_step: int
    decisions: int
    digest: str = ""
    noise_key: str = ""

    @property
    def is_whole_run(self) -> bool:
        """The charge of a run whose privacy event covers the whole run whatever its steps (federated
        ABCDP): recorded as run step 0 (``from_step = to_step = 0``, ``decisions = 0``), its ``digest`` the
        step digest of run step 0 with no inputs (the session's parameters: the run's plan)."""
        return self.from_step == 0

    def to_dict(self) -> dict[str, str | int]:
        d = asdict(self)
        return {k: v for k, v in d.items() if k not in _RUN_CHARGE_PROOF or v}

    @classmethod
    def from_dict(cls, d: object) -> RunCharge:
        if not isinstance(d, dict) or not _RUN_CHARGE_KEYS <= set(d) <= _RUN_CHARGE_KEYS | _RUN_CHARGE_PROOF:
            raise ValueError(
                "a run charge needs exactly run_id, session, from_step, to_step, decisions (and optionally "
                "digest, noise_key)"
            )
        c = cls(**d)
        ints = (c.from_step, c.to_step, c.decisions)
        strs = all(isinstance(v, str) for v in (c.run_id, c.session, c.digest, c.noise_key))
        if not (strs and all(type(v) is int for v in ints)):
            raise ValueError(f"run charge {d!r} has wrong types")
        if c.is_whole_run:
            if c.to_step != 0 or c.decisions != 0:
                raise ValueError(f"whole-run charge {d!r} (from_step 0) needs to_step 0 and decisions 0")
        elif not 1 <= c.from_step <= c.to_step or c.decisions < 1:
            raise ValueError(f"run charge {d!r} has an empty step range or no decisions")
        if not (_is_hex(c.digest, 64) and _is_hex(c.noise_key, 32)):
            raise ValueError(f"run charge {d!r}: digest must be 64 and noise_key 32 hex digits (or absent)")
        return c


def _is_hex(text: str, length: int) -> bool:
    return text == "" or (len(text) == length and all(ch in "0123456789abcdef" for ch in text))


# ---- the party service's answers ------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetState:
    """A party's privacy budget (``PrivacyBudgetState``): unconfigured (only ``max_decisions``), or the
    budget as JSON (``mechanisms.privacy``'s ledger format), its unit ("mu" or "eps at delta=..."), limit
    and what is committed so far, in that unit."""

    configured: bool = False
    budget_json: str = ""
    unit: str = ""
    limit: float = 0.0
    spent: float = 0.0


@dataclass(frozen=True)
class PlanAnswer:
    """A party's answer to a planned session (``PlanPrivacyResponse``): its budget, the projected spend
    after the whole session (in ``budget.unit``), whether it would refuse and why, the events one batch
    adds (JSON), how many of the planned batches fit, and its decision budget."""

    party: int
    identity: str
    budget: BudgetState
    projected: float = 0.0
    would_refuse: bool = False
    message: str = ""
    events_json: str = ""
    batches_allowed: int = 0
    decisions_used: int = 0
    decisions_budget: int = 0


@dataclass(frozen=True)
class LedgerReport:
    """A party's ledger as it reports it (``PrivacyReportResponse``): its budget, the committed events
    (JSON), decisions answered, its run charges (JSON list of :meth:`RunCharge.to_dict`), and what its ledger
    accounts under: ``colluding`` ("all" or a decimal q) and ``neighbours`` ("add-remove" | "replace-one"),
    both "" without a budget or from a party that predates them."""

    party: int
    identity: str
    budget: BudgetState
    events_json: str = ""
    decisions_used: int = 0
    run_charges_json: str = ""
    colluding: str = ""
    neighbours: str = ""


@dataclass(frozen=True)
class KeyBundle:
    """A party's fresh X25519 key for one session, signed with its certificate key (``KeyBundle``)."""

    party: int
    x25519_public: bytes
    signature: bytes = b""
    certificate_pem: bytes = b""


@dataclass(frozen=True)
class SessionState:
    """One session as a party's ``Status`` lists it (``SessionStatus``)."""

    session_id: bytes
    last_step: int
    state: str
    reveal_mode: str
    model: str


@dataclass(frozen=True)
class PartyStatus:
    """A party's ``Status`` answer: who it is, its sessions, its decision budget and refused frames."""

    party: int
    identity: str
    sessions: tuple[SessionState, ...] = ()
    decisions_used: int = 0
    decisions_budget: int = 0
    refused_messages: int = 0


@dataclass(frozen=True)
class EvaluateAnswer:
    """A party's answer to one step (``EvaluateResponse``): its messages to the receiver, the rounds, how
    many of its terms were clamped, the run step (0: no run) and whether it was replayed from storage."""

    session_id: bytes
    step: int
    to_receiver: ReceiverMessages = ()
    rounds: int = 0
    clamped: int = 0
    run_step: int = 0
    replayed: bool = False
