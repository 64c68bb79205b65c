"""One session at this party: its state as an explicit type, and the state machine's moves that need no
network (open-time run resume, the replay agreement at connect, step order, teardown, the noise streams).

A session goes ``open`` (OpenSession: keys made) -> ``connecting`` (ConnectSession: bundles checked, links
opened, key setup) -> ``ready`` (Evaluate / ProbeLinks, one step at a time) and ends ``failed`` (a lost
link, a protocol error, a failed connect: it must be closed) or ``closed`` (CloseSession, a superseding
session of the same run, or the daemon stopping). A closed session keeps its id, so frames for it are
refused as out-of-session, but its secrets (:class:`SessionKeys`) are dropped.

What a session holds is grouped by when it is made: :class:`SessionKeys` at open (frozen; dropped at the
end), :class:`RunPosition` at open and connect (frozen; replaced as run steps complete, ``parties.replay``),
:class:`PeerWiring` at connect (``parties.peering``), and the protocol context at the end of key setup.
An analysis that keeps its own state across steps (``parties.run_state``: federated ABCDP) keeps it in the
session's analysis instance, not here; :func:`run_state_at_open` tells it where a run resumes.
:class:`Party` is what every session sees of its daemon (configuration, TLS, records, state directory).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from hss.modes import FEATURES, reveal_mode
from hss.randomness import SecureRandom, derive_key
from hss.session import PartyContext
from parties import e2e
from parties.analyses import Analysis, Dataset
from parties.config import PartyConfig
from parties.exchange import Mailbox
from parties.links import MeshAcceptLink, RelayLink
from parties.refusal import Reason, Refusal
from parties.replay import ReplayFileError, RunRecord, agreed_record, key_id, run_step_keys
from parties.run_state import ResumeError, run_state_of
from parties.sources import Snapshot
from parties.storage import PartyStorage
from proto import party_pb2, serde
from proto.records import RunStepRef
from proto.spec import SessionSpec
from proto.tls import TlsMaterial

Phase = Literal["open", "connecting", "ready", "failed", "closed"]
LIVE: tuple[Phase, ...] = ("open", "connecting", "ready")  # a live session counts against max_sessions


@dataclass(frozen=True)
class Party:
    """What every session sees of the daemon it runs in."""

    cfg: PartyConfig
    tls: TlsMaterial | None
    snapshot: Snapshot | None  # the records, read once at start-up (parties.sources)
    data: Dataset
    store: PartyStorage

    @property
    def data_sha256(self) -> str:
        return self.snapshot.sha256 if self.snapshot is not None else ""


@dataclass(frozen=True)
class SessionKeys:
    """This party's secrets of one session, made at OpenSession and dropped when the session ends."""

    x25519: Any  # its X25519 private key for the relay's end-to-end encryption (parties.e2e)
    noise_key: bytes  # a run's: this party's run noise key (parties.replay); else the session's
    run_key_id: str  # parties.replay.key_id of the run noise key ("" without a run)
    proto_rng: SecureRandom  # the protocol's own randomness (share polynomials, masks): fresh per session


@dataclass(frozen=True)
class RunPosition:
    """Where a session of a run stands at this party (all None without a run)."""

    held: RunRecord | None = None  # this party's last completed run step of the run (at open, then each step)
    replay: RunRecord | None = None  # ... and it again if every party holds it from one session (at connect)


@dataclass
class PeerWiring:
    """The session's links to its peers (``parties.peering``): mesh streams by peer, or the relay."""

    links: dict[int, Any] = field(default_factory=dict)
    accept_waiters: dict[int, asyncio.Future[MeshAcceptLink]] = field(default_factory=dict)
    relay: RelayLink | None = None


@dataclass
class Session:
    spec: SessionSpec
    me: int
    mailbox: Mailbox
    analysis: Analysis
    keys: SessionKeys | None  # None once the session has ended
    run: RunPosition = RunPosition()
    wiring: PeerWiring = field(default_factory=PeerWiring)
    state: Phase = "open"
    failure: str = ""
    last_step: int = 0
    busy: bool = False  # a step is being driven over the links
    ctx: PartyContext | None = None  # the key setup's result (ConnectSession)
    ahead: Any = None  # precompute_ahead: the next step's sign material being made (parties.ahead.Ahead)

    @property
    def peers(self) -> list[int]:
        return [p.id for p in self.spec.parties if p.id != self.me]

    def fail(self, why: str) -> None:
        self.state, self.failure = "failed", why


def new_session(
    party: Party, spec: SessionSpec, analysis: Analysis, run: RunPosition
) -> tuple[Session, dict[str, Any]]:
    """A session's keys, and the audit fields saying whether its run noise key was created or read.

    A session of a run draws its noise from the run's secret key, kept in the state dir from the run's
    first session on (parties.replay), keyed per run step and step digest (:func:`noise_rng`): a run step
    evaluated again with the same inputs, in any session, reproduces the same noise, so the release it makes
    is the one already charged."""
    cfg = party.cfg
    priv = e2e.new_private()
    base_key = cfg.fixed_rng_key or os.urandom(32)
    run_key_audit: dict[str, Any] = {}
    run_key_id = ""
    if spec.run_id:
        try:
            noise_key, created = party.store.replays.run_key(spec.run_id, cfg.fixed_rng_key)
        except ReplayFileError as exc:
            raise Refusal(Reason.FAILED_PRECONDITION, str(exc)) from exc
        run_key_id = key_id(noise_key)
        run_key_audit = {"run_key": "created" if created else "read"}
    else:
        noise_key = derive_key(base_key, spec.session_id, b"noise")
    proto_rng = SecureRandom(derive_key(base_key, spec.session_id, b"protocol"))
    keys = SessionKeys(priv, noise_key, run_key_id, proto_rng)
    mailbox = Mailbox(cfg.id, spec.m, cfg.max_message_bytes, lookahead=spec.precompute_ahead)
    return Session(spec, cfg.id, mailbox, analysis, keys, run), run_key_audit


def run_resume_at_open(
    party: Party, sessions: dict[bytes, Session], spec: SessionSpec
) -> tuple[RunRecord | None, list[bytes]]:
    """For a session of a run: this party's last completed run step (parties.replay), and the run's
    earlier live sessions that the new one supersedes (refused while one is mid-step)."""
    if not spec.run_id:
        return None, []
    superseded = []
    for k, s in sessions.items():
        if s.spec.run_id == spec.run_id and s.state in LIVE:
            if s.busy:
                raise Refusal(
                    Reason.FAILED_PRECONDITION,
                    f"run {spec.run_id!r} is mid-step {s.last_step + 1} in session {k.hex()[:16]}…; "
                    "retry when it has finished",
                )
            superseded.append(k)
    try:
        held = party.store.replays.load(spec.run_id)
    except ReplayFileError as exc:
        raise Refusal(Reason.FAILED_PRECONDITION, str(exc)) from exc
    now = party.data_sha256
    if held is not None and held.data_sha256 and held.data_sha256 != now:
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"this party's records changed since run step {held.run_step} of run {spec.run_id!r} "
            f"(snapshot sha256 {held.data_sha256[:16]}… then, {now[:16] or 'none'}… now): the run cannot "
            "continue exactly on other data; start a new run (or restore the records)",
        )
    if held is not None and held.svt is not None and reveal_mode(spec.reveal_mode).inputs != FEATURES:
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"run {spec.run_id!r} is an ABCDP run (reveal mode svt) at this party, not a "
            f"{spec.reveal_mode!r} one: a run keeps its reveal mode",
        )
    return held, superseded


def run_state_at_open(
    party: Party, spec: SessionSpec, analysis: Analysis, held: RunRecord | None
) -> dict[str, Any]:
    """A session of a run whose analysis keeps its own run state (``parties.run_state``: federated ABCDP):
    where that state starts, from this party's last completed run step of the run; refused when it cannot be
    rebuilt (FAILED_PRECONDITION). Returns the analysis's audit fields for the OpenSession line."""
    state = run_state_of(analysis)
    if state is None or not spec.run_id:
        return {}
    try:
        return state.open_run(spec, held, party.store.replays.key_path_for(spec.run_id))
    except ResumeError as exc:
        raise Refusal(Reason.FAILED_PRECONDITION, str(exc)) from exc


def agreed_replay(me: int, sess: Session, resume: list[party_pb2.RunResume]) -> RunRecord | None:
    """This party's held run step if every party reports holding it from the same session, else None.

    The reports come from the coordinator (honest-but-curious, DESIGN.md section 2). A false "all hold"
    cannot make this party reveal anything new (its stored messages were sent once already) and a false
    "not all hold" only makes it charge again; so the reports need no further authentication."""
    spec, held = sess.spec, sess.run.held
    if not spec.run_id:
        if resume:
            raise Refusal(Reason.INVALID_ARGUMENT, "resume reports for a session without run_id")
        return None
    try:
        reports = dict(serde.run_ref_from_proto(r) for r in resume)
    except serde.WireError as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, str(exc)) from exc
    if sorted(reports) != list(range(1, spec.m + 1)) or len(resume) != spec.m:
        raise Refusal(
            Reason.INVALID_ARGUMENT,
            f"ConnectSession of run {spec.run_id!r} needs exactly one resume report per party "
            f"1..{spec.m} (each party's OpenSession answer), got parties {sorted(reports)}",
        )
    own = held.ref if held is not None else RunStepRef(spec.run_id, 0)
    if reports[me] != own or any(r.run_id != spec.run_id for r in reports.values()):
        raise Refusal(
            Reason.INVALID_ARGUMENT,
            f"the resume reports do not match what the parties reported for run {spec.run_id!r} "
            f"(this party holds run step {own.run_step})",
        )
    agreed = agreed_record(held, list(reports.values()))  # replayable only as the session's step 1
    return agreed if agreed is not None and agreed.run_step == spec.first_run_step else None


def replay_audit(sess: Session) -> dict[str, Any]:
    if not sess.spec.run_id:
        return {}
    held, replay = sess.run.held, sess.run.replay
    return {
        "run_id": sess.spec.run_id,
        "held_run_step": held.run_step if held is not None else 0,
        "replayable_run_step": replay.run_step if replay is not None else 0,
    }


def check_next_step(sess: Session, step: int) -> None:
    if sess.busy:
        raise Refusal(Reason.FAILED_PRECONDITION, f"session busy with step {sess.last_step + 1}")
    if step <= sess.last_step:
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"step {step} replayed: step {sess.last_step} is done; the next step is {sess.last_step + 1}",
        )
    if step != sess.last_step + 1:
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"step {step} out of order: the next step is {sess.last_step + 1}",
        )


async def teardown(sess: Session, state: Phase) -> None:
    sess.state = state
    if sess.ahead is not None:  # the next step's material: stopped and dropped (parties.ahead)
        ahead, sess.ahead = sess.ahead, None
        await ahead.cancel()
    wiring = sess.wiring
    for link in list(wiring.links.values()):
        await link.close()
    if wiring.relay is not None:
        await wiring.relay.close()
    for fut in wiring.accept_waiters.values():
        if not fut.done():
            fut.cancel()
    wiring.links.clear()
    # keep a closed session's id so its messages are refused as out-of-session, but drop its secrets
    sess.ctx, sess.keys = None, None


def noise_rng(keys: SessionKeys, spec: SessionSpec, step: int, digest: bytes) -> SecureRandom:
    """This party's secret noise for session step ``step``: for a run, from the run noise key, keyed by
    the run step and the step's digest (the same inputs give the same noise in any session, other
    inputs independent noise); otherwise from the session's key."""
    if spec.run_id:
        return SecureRandom(run_step_keys(keys.noise_key, spec.run_step(step), digest)[0])
    return SecureRandom(derive_key(keys.noise_key, spec.session_id, b"step/%d" % step))


def reveal_rng(keys: SessionKeys, spec: SessionSpec, step: int, digest: bytes) -> SecureRandom | None:
    """For a run: the stream of this party's randomness that changes the revealed value (blinded mode's
    E term), keyed like :func:`noise_rng`; without a run None (the protocol's own CSPRNG)."""
    if not spec.run_id:
        return None
    return SecureRandom(run_step_keys(keys.noise_key, spec.run_step(step), digest)[1])
