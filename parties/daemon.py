"""The party daemon: gRPC services of one registry (``confar-party serve``).

Services: ``Party`` (coordinator-facing: open/connect/evaluate/close/status, privacy plan/report),
``Peer`` (mesh share exchange), ``grpc.health.v1.Health``. Every channel is mutual TLS with the consortium
CA unless the daemon was started with ``--insecure``. The party decides for itself: only the configured
coordinator identity may drive sessions, only allowlisted models / reveal modes / topologies / parameter
bounds run, and batches past the decision budget or the privacy budget (``parties.privacy_budget``) are
refused (RESOURCE_EXHAUSTED). Every request, and every refused peer frame, is a line in the append-only
audit log. A session of a run (``run_id``) is resumable (``parties.replay``): a run step every party already
completed is answered from the stored messages without a new charge ("replayed run step s" in the audit);
a run step this party charged before, asked again with the same inputs, is evaluated afresh with the same
noise (the run's noise key in the state dir) and not charged again ("charged_in" in the audit). A federated
ABCDP run (reveal mode svt) is charged once per run and resumes its sparse-vector state from the run record
(``parties.abcdp``).

Work a request asks for is bounded by this party's own limits, checked before any of it is done (e.g. the
fixed-point format: at most 64 parties, ``parties.serde.FMT_LIMITS``). SIGTERM / SIGINT stop the daemon
within STOP_DEADLINE_S = 10 s, also with requests in flight: in-flight calls get 5 s, then a watchdog ends
the process (exit code 3, ``parties.cli``).

Status codes: INVALID_ARGUMENT (malformed message or parameters), PERMISSION_DENIED (wrong caller or not
allowed by this party's policy), FAILED_PRECONDITION (unknown / closed / failed session, step out of order
or replayed, session busy, a completed run step asked with other inputs, a corrupt run record),
RESOURCE_EXHAUSTED (budget or session limit), ALREADY_EXISTS (session id in
use), DEADLINE_EXCEEDED / UNAVAILABLE (a peer did not answer in time or its link broke: the message names
the peer and the step; the session is then failed and must be closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from hss.protocols import PartyContext, decide_party, key_setup
from hss.randomness import SecureRandom, derive_key
from hss.runtime import ProtocolError
from parties import abcdp, e2e, serde, sources
from parties.analyses import Analysis, AnalysisError, Dataset, lazy_coin
from parties.config import PartyConfig
from parties.exchange import PROBE_MAX_ROUNDS, Kind, LinkLost, Mailbox, Refused, drive, probe_machine
from parties.links import LinkError, MeshAcceptLink, MeshDialLink, RelayLink
from parties.policy import (
    Abort,
    check_analysis,
    check_batch,
    check_data_model,
    check_decision_budget,
    check_policy,
    check_privacy_at_open,
    check_session_limit,
    paid_run_step,
    recharge_reason,
    reproducible,
    svt_run_paid,
)
from parties.privacy_budget import PrivacyRefusal, RunCharge
from parties.registry import get_analysis
from parties.replay import (
    ReplayFileError,
    RunRecord,
    RunStepRef,
    SvtStep,
    agreed_record,
    key_id,
    run_step_keys,
    step_digest,
)
from parties.sources import Snapshot
from parties.spec import MAX_RUN_STEP, SessionSpec, shown
from parties.storage import PartyStorage
from parties.tls import SERVER_OPTIONS, TlsMaterial, caller_identity, server_credentials
from proto import health_pb2, health_pb2_grpc, party_pb2, peer_pb2
from proto.files import write_durable

__all__ = ["EXIT_STOP_DEADLINE", "STOP_DEADLINE_S", "PartyDaemon", "reproducible"]

OFFLOAD_MIN_BATCH = 64  # machine steps on batches at least this big run in a worker thread
STOP_GRACE_S = 5.0  # SIGTERM / SIGINT: in-flight calls get this long, then they are cancelled
STOP_DEADLINE_S = 10.0  # ... and the process is gone this long after the signal, whatever is in flight
EXIT_STOP_DEADLINE = 3  # exit code when the watchdog had to end the process (parties.cli)
MAX_ERROR_CHARS = 2000  # an error message sent back is cut to this (inputs echoed in it: parties.spec.shown)


@dataclass
class Session:
    spec: SessionSpec
    me: int
    x25519: Any
    mailbox: Mailbox
    analysis: Analysis
    state: str = "open"  # open -> connecting -> ready -> (failed | closed)
    last_step: int = 0
    busy: bool = False
    failure: str = ""
    links: dict[int, Any] = field(default_factory=dict)
    accept_waiters: dict[int, asyncio.Future[MeshAcceptLink]] = field(default_factory=dict)
    relay: RelayLink | None = None
    ctx: PartyContext | None = None
    noise_key: bytes = b""  # a run's: this party's run noise key (parties.replay); else the session's
    run_key_id: str = ""  # parties.replay.key_id of the run noise key ("" without a run)
    proto_rng: SecureRandom | None = None
    held: RunRecord | None = None  # run resume: this party's last completed run step of spec.run_id at open
    replay: RunRecord | None = None  # ... and it again if every party holds it from one session (at connect)
    svt: abcdp.SvtRun | None = None  # reveal mode svt: the ABCDP run's secret state (first Evaluate on)
    svt_resume: abcdp.SvtResume | None = None  # svt with a run_id: where the run's SVT state starts

    @property
    def peers(self) -> list[int]:
        return [p.id for p in self.spec.parties if p.id != self.me]


class PartyDaemon:
    def __init__(self, cfg: PartyConfig, insecure: bool = False) -> None:
        self.cfg = cfg
        self.insecure = insecure
        self.tls: TlsMaterial | None = None
        if not insecure:
            assert cfg.tls_cert and cfg.tls_key and cfg.tls_ca
            self.tls = TlsMaterial.load(cfg.tls_cert, cfg.tls_key, cfg.tls_ca, expect_identity=cfg.identity)
        # the records, read once and fixed for the daemon's life: every session uses this snapshot
        # (parties.sources; SourceError names the [data] key, nothing is loaded on any problem)
        self.snapshot: Snapshot | None = sources.snapshot(cfg.data) if cfg.data is not None else None
        self.data: Dataset = self.snapshot.dataset if self.snapshot is not None else Dataset({})
        self.store = PartyStorage(cfg, self.snapshot)  # audit log, decision and privacy ledgers, run records
        self.audit = self.store.audit
        self.privacy = self.store.privacy
        self.replays = self.store.replays
        self.sessions: dict[bytes, Session] = {}
        self.refused_frames = 0
        self.serving = True
        self.server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def decisions_used(self) -> int:
        return self.store.decisions_used

    @decisions_used.setter
    def decisions_used(self, value: int) -> None:
        self.store.decisions_used = value

    def _load_ledger(self) -> int:
        return self.store.load_ledger()

    def _save_ledger(self) -> None:
        self.store.save_ledger()

    # ---- helpers -----------------------------------------------------------------------------------------

    def who(self, context: grpc.aio.ServicerContext) -> str | None:
        return caller_identity(context, self.insecure)

    def require_coordinator(self, context: grpc.aio.ServicerContext) -> str:
        who = self.who(context)
        if who != self.cfg.coordinator_identity:
            raise Abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"caller {shown(who)} is not this party's coordinator ({self.cfg.coordinator_identity!r})",
            )
        return who

    def session(self, sid: bytes, want: tuple[str, ...] = ("ready",)) -> Session:
        sess = self.sessions.get(bytes(sid))
        if sess is None:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"unknown session {bytes(sid).hex()[:16]}…: open it first",
            )
        if sess.state not in want:
            extra = f" ({sess.failure})" if sess.failure else ""
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"session {sess.spec.session_id.hex()[:16]}… is {sess.state}{extra}; "
                f"expected {'/'.join(want)}",
            )
        return sess

    async def handle(
        self,
        context: grpc.aio.ServicerContext,
        what: str,
        fn: Callable[[], Awaitable[Any]],
        session: bytes | None = None,
        step: int | None = None,
    ) -> Any:
        """Run a unary handler: map Abort/unexpected errors to status codes; one audit line either way.

        The caller is checked first: a caller that is not this party's coordinator is refused before anything
        of its request is looked at, with one audit line of bounded size (every Party RPC is the
        coordinator's). Error messages sent back are cut to MAX_ERROR_CHARS."""
        who = self.who(context)
        if who != self.cfg.coordinator_identity:
            await self.refuse_caller(context, what, who, session)
        sess = self.sessions.get(bytes(session)) if session else None
        base: dict[str, Any] = {
            "who": who,
            "what": what,
            "session": session,
            "step": step,
            "analysis": sess.spec.model if sess else None,
            "reveal_mode": sess.spec.reveal_mode if sess else None,
        }
        try:
            resp, audit_extra = await fn()
        except Abort as exc:
            self.audit.record(**base, outcome=exc.code.name, detail=exc.message)
            await context.abort(exc.code, _cut(exc.message))
            raise AssertionError("unreachable") from exc
        except asyncio.CancelledError:
            self.audit.record(**base, outcome="CANCELLED")
            raise
        except Exception as exc:  # never crash the daemon on one request
            msg = f"internal error in {what}: {type(exc).__name__}: {exc}"
            self.audit.record(**base, outcome="INTERNAL", detail=msg)
            await context.abort(grpc.StatusCode.INTERNAL, _cut(msg))
            raise AssertionError("unreachable") from exc
        self.audit.record(**{**base, **audit_extra})
        return resp

    async def refuse_caller(
        self, context: grpc.aio.ServicerContext, what: str, who: str | None, session: bytes | None = None
    ) -> NoReturn:
        """PERMISSION_DENIED for a Party RPC from anyone but the coordinator; its audit line is bounded (the
        audit log cuts the session id and every string)."""
        msg = f"caller {shown(who)} is not this party's coordinator ({self.cfg.coordinator_identity!r})"
        self.audit.record(who=who, what=what, outcome="PERMISSION_DENIED", session=session, detail=msg)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, msg)
        raise AssertionError("unreachable")

    # ---- Party service -----------------------------------------------------------------------------------

    async def open_session(self, req: party_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            if not self.serving:
                raise Abort(grpc.StatusCode.UNAVAILABLE, "party is shutting down")
            if not req.HasField("spec"):
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "OpenSessionRequest.spec is missing")
            try:
                spec = serde.spec_from_open_request(req)  # with its run binding (run_id, first_run_step)
            except serde.WireError as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
            check_policy(self.cfg, spec, self.decisions_used)
            if spec.session_id in self.sessions:
                raise Abort(
                    grpc.StatusCode.ALREADY_EXISTS, f"session {spec.session_id.hex()[:16]}… already exists"
                )
            held, superseded = self.run_resume_at_open(spec)
            live = sum(
                s.state in ("open", "connecting", "ready")
                for k, s in self.sessions.items()
                if k not in superseded
            )
            check_session_limit(self.cfg, live)
            analysis = check_analysis(self.cfg, spec, self.data)
            svt = spec.reveal_mode == abcdp.SVT_MODE
            svt_resume = None
            if svt and spec.run_id:  # where the ABCDP run's SVT state starts (its last completed step here)
                try:
                    svt_resume = abcdp.resume_at_open(spec, held)
                except abcdp.SvtResumeError as exc:
                    raise Abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
                key_path = self.replays.key_path_for(spec.run_id)
                if held is not None and not key_path.exists():  # a new key would draw other noise
                    raise Abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"the run noise key {key_path} of ABCDP run {spec.run_id!r} is missing although run "
                        f"step {held.run_step} is recorded here: the run's sparse-vector state cannot be "
                        "rebuilt without it (another key draws other threshold noise); restore the key from "
                        "a backup, or start a new run",
                    )
            await check_privacy_at_open(  # an ABCDP run charged here before has nothing left to fit
                self.privacy,
                self.cfg,
                analysis,
                spec,
                lambda: bool(svt and spec.run_id and self.svt_run_paid(spec) is not None),
            )
            priv = e2e.new_private()
            sess = Session(
                spec=spec,
                me=self.cfg.id,
                x25519=priv,
                mailbox=Mailbox(self.cfg.id, spec.m, self.cfg.max_message_bytes),
                analysis=analysis,
            )
            base_key = self.cfg.fixed_rng_key or os.urandom(32)
            run_key_audit: dict[str, Any] = {}
            if spec.run_id:
                # A session of a run draws its noise from the run's secret key, kept in the state dir from
                # the run's first session on (parties.replay), keyed per run step and step digest
                # (noise_rng): a run step evaluated again with the same inputs, in any session, reproduces
                # the same noise, so the release it makes is the one already charged.
                try:
                    sess.noise_key, created = self.replays.run_key(spec.run_id, self.cfg.fixed_rng_key)
                except ReplayFileError as exc:
                    raise Abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
                sess.run_key_id = key_id(sess.noise_key)
                run_key_audit = {"run_key": "created" if created else "read"}
            else:
                sess.noise_key = derive_key(base_key, spec.session_id, b"noise")
            sess.proto_rng = SecureRandom(derive_key(base_key, spec.session_id, b"protocol"))
            sess.held = held
            sess.svt_resume = svt_resume
            for old in superseded:  # the run's earlier session: its coordinator is gone
                await self.teardown(self.sessions[old], "closed")
                self.sessions[old].failure = f"superseded by session {spec.session_id.hex()[:16]}…"
            self.sessions[spec.session_id] = sess
            pub = e2e.public_bytes(priv)
            sig, cert = b"", b""
            if self.tls is not None:
                sig = e2e.sign_bundle(self.tls.key_pem, spec.session_id, self.cfg.id, pub)
                cert = self.tls.cert_pem
            bundle = party_pb2.KeyBundle(
                party=self.cfg.id, x25519_public=pub, signature=sig, certificate_pem=cert
            )
            resp = party_pb2.OpenSessionResponse(bundle=bundle)
            run_audit: dict[str, Any] = {}
            if spec.run_id:
                ref = held.ref if held is not None else RunStepRef(spec.run_id, 0)
                resp.resume.CopyFrom(serde.run_ref_to_proto(self.cfg.id, ref))
                run_audit = {
                    "run_id": spec.run_id,
                    "first_run_step": spec.first_run_step,
                    "held_run_step": ref.run_step,
                    "superseded": [k.hex()[:16] for k in superseded],
                    **run_key_audit,
                    **({"abcdp_start": svt_resume.counters} if svt_resume is not None else {}),
                }
            return resp, {
                "analysis": spec.model,
                "reveal_mode": spec.reveal_mode,
                "topology": spec.topology,
                "m": spec.m,
                **self.data_audit(),
                **run_audit,
            }

        return await self.handle(
            context, "OpenSession", run, session=bytes(req.spec.session_id) if req.HasField("spec") else None
        )

    def data_audit(self) -> dict[str, Any]:
        """The snapshot a session runs on (its records and content hash), for the session's audit line."""
        if self.snapshot is None:
            return {}
        return {"records": self.snapshot.records, "data_sha256": self.snapshot.sha256}

    def svt_run_paid(self, spec: SessionSpec) -> RunCharge | None:
        return svt_run_paid(self.privacy, self.replays, self.cfg, spec)

    def run_resume_at_open(self, spec: SessionSpec) -> tuple[RunRecord | None, list[bytes]]:
        """For a session of a run: this party's last completed run step (parties.replay), and the run's
        earlier live sessions that the new one supersedes (refused while one is mid-step)."""
        if not spec.run_id:
            return None, []
        superseded = []
        for k, s in self.sessions.items():
            if s.spec.run_id == spec.run_id and s.state in ("open", "connecting", "ready"):
                if s.busy:
                    raise Abort(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"run {spec.run_id!r} is mid-step {s.last_step + 1} in session {k.hex()[:16]}…; "
                        "retry when it has finished",
                    )
                superseded.append(k)
        try:
            held = self.replays.load(spec.run_id)
        except ReplayFileError as exc:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
        now = self.snapshot.sha256 if self.snapshot is not None else ""
        if held is not None and held.data_sha256 and held.data_sha256 != now:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"this party's records changed since run step {held.run_step} of run {spec.run_id!r} "
                f"(snapshot sha256 {held.data_sha256[:16]}… then, {now[:16] or 'none'}… now): the run cannot "
                "continue exactly on other data; start a new run (or restore the records)",
            )
        if held is not None and held.svt is not None and spec.reveal_mode != abcdp.SVT_MODE:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"run {spec.run_id!r} is an ABCDP run (reveal mode svt) at this party, not a "
                f"{spec.reveal_mode!r} one: a run keeps its reveal mode",
            )
        return held, superseded

    async def connect_session(
        self, req: party_pb2.ConnectSessionRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            sess = self.session(req.session_id, ("open",))
            sess.replay = self.agreed_replay(sess, list(req.resume))
            sess.state = "connecting"
            try:
                await self.verify_bundles(sess, list(req.bundles))
                await self.open_links(sess)
                rng = sess.proto_rng
                assert rng is not None
                machine = key_setup(sess.spec.params(), self.cfg.id, rng)
                out = await drive(
                    machine,
                    me=self.cfg.id,
                    peers=sess.peers,
                    step=0,
                    send=self.sender(sess),
                    mailbox=sess.mailbox,
                    symmetric=False,
                    timeout_s=self.timeout(context),
                )
                sess.ctx = PartyContext(sess.spec.params(), out.result)
            except Abort:
                sess.state, sess.failure = "failed", "connect failed"
                raise
            except (LinkError, LinkLost) as exc:
                sess.state, sess.failure = "failed", str(exc)
                raise Abort(grpc.StatusCode.UNAVAILABLE, f"session setup: {exc}") from exc
            except ProtocolError as exc:
                sess.state, sess.failure = "failed", str(exc)
                raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"session key setup failed: {exc}") from exc
            sess.state = "ready"
            return party_pb2.ConnectSessionResponse(
                session_id=sess.spec.session_id, setup_rounds=out.rounds
            ), {"step": 0, "rounds": out.rounds, **self.replay_audit(sess)}

        return await self.handle(context, "ConnectSession", run, session=bytes(req.session_id), step=0)

    def agreed_replay(self, sess: Session, resume: list[party_pb2.RunResume]) -> RunRecord | None:
        """This party's held run step if every party reports holding it from the same session, else None.

        The reports come from the coordinator (honest-but-curious, DESIGN.md section 2). A false "all hold"
        cannot make this party reveal anything new (its stored messages were sent once already) and a false
        "not all hold" only makes it charge again; so the reports need no further authentication."""
        spec = sess.spec
        if not spec.run_id:
            if resume:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "resume reports for a session without run_id")
            return None
        try:
            reports = dict(serde.run_ref_from_proto(r) for r in resume)
        except serde.WireError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
        if sorted(reports) != list(range(1, spec.m + 1)) or len(resume) != spec.m:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"ConnectSession of run {spec.run_id!r} needs exactly one resume report per party "
                f"1..{spec.m} (each party's OpenSession answer), got parties {sorted(reports)}",
            )
        own = sess.held.ref if sess.held is not None else RunStepRef(spec.run_id, 0)
        if reports[self.cfg.id] != own or any(r.run_id != spec.run_id for r in reports.values()):
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the resume reports do not match what the parties reported for run {spec.run_id!r} "
                f"(this party holds run step {own.run_step})",
            )
        agreed = agreed_record(sess.held, list(reports.values()))  # replayable only as the session's step 1
        return agreed if agreed is not None and agreed.run_step == spec.first_run_step else None

    def replay_audit(self, sess: Session) -> dict[str, Any]:
        if not sess.spec.run_id:
            return {}
        return {
            "run_id": sess.spec.run_id,
            "held_run_step": sess.held.run_step if sess.held is not None else 0,
            "replayable_run_step": sess.replay.run_step if sess.replay is not None else 0,
        }

    async def verify_bundles(self, sess: Session, bundles: list[party_pb2.KeyBundle]) -> None:
        spec = sess.spec
        by_party = {int(b.party): b for b in bundles}
        if sorted(by_party) != list(range(1, spec.m + 1)) or len(bundles) != spec.m:
            raise Abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"need exactly one key bundle per party 1..{spec.m}, got parties {sorted(by_party)}",
            )
        ciphers: dict[int, e2e.PairCipher] = {}
        for q in sess.peers:
            b = by_party[q]
            if self.tls is not None:
                try:
                    e2e.verify_bundle(
                        self.tls.ca_pem,
                        bytes(b.certificate_pem),
                        spec.party(q).identity,
                        spec.session_id,
                        q,
                        bytes(b.x25519_public),
                        bytes(b.signature),
                    )
                except e2e.KeyExchangeError as exc:
                    raise Abort(grpc.StatusCode.PERMISSION_DENIED, str(exc)) from exc
            try:
                key = e2e.pair_key(sess.x25519, bytes(b.x25519_public), spec.session_id, self.cfg.id, q)
            except ValueError as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"party {q}: bad X25519 key: {exc}") from exc
            ciphers[q] = e2e.PairCipher(key)
        if spec.topology == "relay":
            sess.relay = RelayLink(spec.session_id, self.cfg.id, ciphers)

    def timeout(self, context: grpc.aio.ServicerContext) -> float:
        left = context.time_remaining()
        t = self.cfg.round_timeout_s
        return max(0.01, min(t, left - 0.05)) if left is not None else t

    async def open_links(self, sess: Session) -> None:
        spec, me = sess.spec, self.cfg.id
        to = self.cfg.round_timeout_s
        my_ident = self.cfg.identity

        async def on_frame(src: int, msg: peer_pb2.PeerFrame) -> None:
            await self.on_frame(sess, src, msg)

        async def on_lost(q: int, why: str) -> None:
            await sess.mailbox.lose(q, why)

        if spec.topology == "relay":
            assert sess.relay is not None
            await sess.relay.open(
                spec.relay_address,
                spec.coordinator_identity,
                self.tls,
                my_ident,
                on_frame,
                on_lost,
                sess.peers,
                to,
            )
            return
        cfg_addr = {p.id: p.address for p in self.cfg.peers}
        for q in sess.peers:
            if q < me and q not in sess.accept_waiters:
                sess.accept_waiters[q] = asyncio.get_running_loop().create_future()
        dials = []
        for q in sess.peers:
            if q > me:
                addr = cfg_addr.get(q) or spec.party(q).address
                if not addr:
                    raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"no address for party {q} (mesh topology)")
                link = MeshDialLink(spec.session_id, me, q)
                sess.links[q] = link
                dials.append(
                    link.open(addr, spec.party(q).identity, self.tls, my_ident, on_frame, on_lost, to)
                )
        await asyncio.gather(*dials)
        for q, fut in sess.accept_waiters.items():
            try:
                sess.links[q] = await asyncio.wait_for(asyncio.shield(fut), to)
            except TimeoutError as exc:
                raise LinkError(
                    f"party {q} did not open its mesh link to this party within {to:g} s"
                ) from exc

    def sender(self, sess: Session) -> Callable[[Any], Awaitable[None]]:
        sid = sess.spec.session_id
        send: Callable[[Any], Awaitable[None]]
        if sess.relay is not None:
            relay = sess.relay

            async def send_relay(f: Any) -> None:
                await relay.send(relay.seal(f))

            send = send_relay
        else:

            async def send_mesh(f: Any) -> None:
                link = sess.links.get(f.dst)
                if link is None:
                    raise LinkLost(f"no link to party {f.dst}")
                await link.send(serde.frame_to_proto(sid, f))

            send = send_mesh
        if not any(phase == "mid-exchange" for phase, _ in self.cfg.freeze_at):
            return send
        last_peer = max(sess.peers)

        async def send_then_freeze(f: Any) -> None:  # testing: freeze once round 1 went to every peer
            await send(f)
            if f.step >= 1 and f.round == 1 and f.dst == last_peer:
                # best effort: let the links' writers hand the frames to the network before the process
                # stops (a test's assertions must hold either way: the peers then fail or finish the step)
                await asyncio.sleep(0.2)
                self.store.freeze_point("mid-exchange", sess.spec.run_step(f.step))

        return send_then_freeze

    async def on_frame(self, sess: Session, src: int, msg: peer_pb2.PeerFrame) -> None:
        """File a frame from peer ``src``: authenticated by TLS (mesh) or by its AEAD key (relay)."""
        try:
            if bytes(msg.session_id) != sess.spec.session_id:
                raise Refused("frame for another session on this session's link")
            if int(msg.src) != src:
                raise Refused(f"frame claims src {msg.src} but the link belongs to party {src}")
            # "open": a peer that got its ConnectSession first may send its key-setup frames before this
            # party got its own; the mailbox keeps them (step 0, bounded) for the key setup to collect
            if sess.state not in ("open", "connecting", "ready"):
                raise Refused(f"session is {sess.state}")
            plain = None
            if sess.relay is not None:
                try:
                    plain = sess.relay.unseal(msg)
                except e2e.KeyExchangeError as exc:
                    raise Refused(str(exc)) from exc
            try:
                frame = serde.frame_from_proto(msg, plain, self.cfg.max_message_bytes)
            except serde.WireError as exc:
                raise Refused(str(exc)) from exc
            await sess.mailbox.deliver(frame)
        except Refused as exc:
            if exc.reason:
                self.refused_frames += 1
                sess.mailbox.refused += 1
                self.audit.record(
                    who=_ident_of(sess, src),
                    what="PeerFrame",
                    outcome="REFUSED",
                    session=bytes(msg.session_id)[:64],
                    step=int(msg.step),
                    detail=exc.reason,
                    round=int(msg.round),
                )

    async def evaluate(self, req: party_pb2.EvaluateRequest, context: grpc.aio.ServicerContext) -> Any:
        step = int(req.step)

        async def run() -> tuple[Any, dict[str, Any]]:
            t_begin, cpu_begin = time.perf_counter(), time.process_time()
            self.require_coordinator(context)
            sess = self.session(req.session_id)
            self.check_next_step(sess, step)
            n = int(req.batch)
            check_batch(self.cfg, n)
            run_step = sess.spec.run_step(step)  # 0: no run_id
            if run_step > MAX_RUN_STEP:  # refused before anything runs: run steps live in JSON files
                raise Abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"step {step} would be run step {run_step} of run {sess.spec.run_id!r}, past 2^53",
                )
            digest, run_audit, replayed = self.run_step_check(sess, req, step, run_step, n)
            if replayed is not None:  # run resume: stored messages, nothing computed or charged
                await sess.mailbox.finish(step)  # no frames were exchanged for it; the next step is step + 1
                resumed = sess.svt_resume
                if resumed is not None and resumed.after_redo is not None:  # ABCDP: the state after the step
                    sess.svt_resume = abcdp.SvtResume(resumed.after_redo)
                    run_audit["abcdp_count"] = resumed.after_redo["count"]
                return replayed, run_audit
            # charged before: same inputs, same noise
            paid = paid_run_step(self.privacy, sess.spec, sess.run_key_id, run_step, digest)
            recharge = recharge_reason(self.privacy, sess.spec, run_step) if paid is None else ""
            if paid is None:
                check_decision_budget(self.cfg, self.decisions_used, n)
            if sess.spec.reveal_mode == abcdp.SVT_MODE:  # federated ABCDP: its own charging and protocol
                return await self.evaluate_svt(
                    sess, req, step, run_step, digest, n, context, t_begin, cpu_begin, run_audit
                )
            privacy_events: list[Any] = []
            if paid is None:
                try:  # privacy budget: this party's own events for the batch, dry-run before touching data
                    privacy_events = self.privacy.events_for(self.cfg, sess.analysis, sess.spec, n)
                    self.privacy.check(privacy_events, f"step {step} (batch of {n})")
                except PrivacyRefusal as exc:
                    raise Abort(exc.code, exc.message) from exc
            t_terms = time.perf_counter()
            try:
                inputs = serde.inputs_from_proto(req.inputs, self.cfg.max_message_bytes)
                terms = sess.analysis.terms(
                    self.data,
                    sess.spec.model_params,
                    inputs,
                    n,
                    sess.spec.m,
                    sess.spec.reveal_mode,
                    self.noise_rng(sess, step, digest),
                )
                assert sess.ctx is not None and sess.proto_rng is not None
                machine = decide_party(
                    sess.spec.reveal_mode,
                    sess.ctx,
                    terms.values,
                    terms.public,
                    step,
                    sess.proto_rng,
                    blind=terms.blind,
                    precompute=sess.spec.sign_precompute,
                    lazy=lazy_coin(sess.spec.model_params),
                    reveal_rng=self.reveal_rng(sess, step, digest),
                )
            except (serde.WireError, AnalysisError, ValueError) as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {step}: {exc}") from exc
            prepare_s = time.perf_counter() - t_terms
            self.store.freeze_point("before-charge", run_step)
            if paid is None:
                # the budget is charged before any share leaves this party: a failed run still counts
                try:  # persisted (fsync, atomic rename) before any share leaves this party, with the run step
                    sid16 = sess.spec.session_id.hex()[:16]
                    charge = None
                    if run_step:
                        charge = RunCharge(
                            sess.spec.run_id, sid16, run_step, run_step, n, digest.hex(), sess.run_key_id
                        )
                    self.privacy.commit(privacy_events, charge)
                except PrivacyRefusal as exc:
                    raise Abort(exc.code, exc.message) from exc
                self.store.count_decisions(n)
                self.store.freeze_point("after-charge", run_step)
                if recharge:
                    why = f"run step {run_step} charged again: {recharge}"
                    run_audit.update(recharged=True, detail=why)
            else:
                run_audit.update(
                    decisions_charged=0,
                    charged_in=paid.session,
                    detail=f"run step {run_step} evaluated afresh with the noise of its charge in session "
                    f"{paid.session} (same inputs, same run key): not charged again",
                )
            t_drive = time.perf_counter()
            out = await self.drive_step(sess, machine, step, n, context)
            if run_step and sess.state == "ready":  # kept durably before the messages leave (not superseded)
                ref = RunStepRef(sess.spec.run_id, run_step, digest, sess.spec.session_id)
                data = self.snapshot.sha256 if self.snapshot is not None else ""
                sess.held = RunRecord(ref, n, out.rounds, tuple(out.to_receiver), data_sha256=data)
                self.replays.save(sess.held)
                self.store.freeze_point("before-answer", run_step)
            sess.last_step = step
            clamped = int(np.count_nonzero(out.result.clamped)) if hasattr(out.result, "clamped") else 0
            resp = party_pb2.EvaluateResponse(
                session_id=sess.spec.session_id,
                step=step,
                to_receiver=serde.receiver_messages_to_proto(out.to_receiver),
                rounds=out.rounds,
                clamped=clamped,
                run_step=run_step,
            )
            # timings (this party's own clocks, read by `confar bench network`): compute = inputs, terms,
            # machine set-up and steps (wall); charge = the budget check and the ledger's durable write before
            # any share leaves; send = handing frames to the links; wait = until each round's frames were all
            # in; handler_ms is the whole handler; cpu_ms is the CPU time of the whole daemon process (all
            # threads: compute, gRPC, TLS) meanwhile
            return resp, {
                **run_audit,
                "decisions": n,
                "rounds": out.rounds,
                "clamped": clamped,
                "compute_ms": round((prepare_s + out.stepped_s) * 1e3, 3),
                "charge_ms": round((t_drive - t_terms - prepare_s) * 1e3, 3),
                "send_ms": round(out.sent_s * 1e3, 3),
                "wait_ms": round(out.waited_s * 1e3, 3),
                "handler_ms": round((time.perf_counter() - t_begin) * 1e3, 3),
                "cpu_ms": round((time.process_time() - cpu_begin) * 1e3, 3),
            }

        return await self.handle(context, "Evaluate", run, session=bytes(req.session_id), step=step)

    def check_next_step(self, sess: Session, step: int) -> None:
        if sess.busy:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"session busy with step {sess.last_step + 1}")
        if step <= sess.last_step:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"step {step} replayed: step {sess.last_step} is done; the next step is {sess.last_step + 1}",
            )
        if step != sess.last_step + 1:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"step {step} out of order: the next step is {sess.last_step + 1}",
            )

    async def probe_links(self, req: party_pb2.ProbeLinksRequest, context: grpc.aio.ServicerContext) -> Any:
        """A transport probe at the next step: the exchange-round floor of this deployment, measured with the
        links and exchange code decisions use; all-zero payloads, no data, noise, randomness or charge."""
        step = int(req.step)

        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            sess = self.session(req.session_id)
            self.check_next_step(sess, step)
            if sess.spec.run_id:
                raise Abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"a link probe uses up a session step, which would shift the run steps of run "
                    f"{sess.spec.run_id!r}: probe in a session without run_id",
                )
            rounds, words = int(req.rounds), int(req.words)
            if not 1 <= rounds <= PROBE_MAX_ROUNDS or not 0 <= 8 * words <= self.cfg.max_message_bytes:
                raise Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a link probe needs rounds in 1..{PROBE_MAX_ROUNDS} and words in "
                    f"0..{self.cfg.max_message_bytes // 8} (limits.max_message_bytes), "
                    f"got {rounds} and {words}",
                )
            machine = probe_machine(self.cfg.id, sess.peers, rounds, words)
            out = await self.drive_step(sess, machine, step, 1, context)
            sess.last_step = step
            resp = party_pb2.ProbeLinksResponse(
                session_id=sess.spec.session_id, step=step, round_done=out.result
            )
            return resp, {
                "rounds": rounds,
                "words": words,
                "send_ms": round(out.sent_s * 1e3, 3),
                "wait_ms": round(out.waited_s * 1e3, 3),
            }

        return await self.handle(context, "ProbeLinks", run, session=bytes(req.session_id), step=step)

    async def evaluate_svt(
        self,
        sess: Session,
        req: party_pb2.EvaluateRequest,
        step: int,
        run_step: int,
        digest: bytes,
        n: int,
        context: grpc.aio.ServicerContext,
        t_begin: float,
        cpu_begin: float,
        run_audit: dict[str, Any],
    ) -> tuple[Any, dict[str, Any]]:
        """One batch of federated ABCDP candidates (reveal mode svt, ``parties.abcdp``).

        The run's whole-run epsilon is charged once, at the session's first step, checked and persisted
        before any record is read; the feature sum and the SVT noise state live in the session. Once c
        accepts have been revealed the session refuses further steps.

        A session of a run (``run_id``) is resumable: the run's epsilon is charged once per run (recorded as
        run step 0 of the run and recognised by every later session under the same run noise key); the
        threshold share of each epoch and the query noise of each run step come from the run noise key (the
        latter keyed by the step digest); the SVT state starts where :func:`parties.abcdp.resume_at_open`
        put it; and each completed step is kept (its record with the SVT counters before it and its bits,
        ``parties.replay``) before its answer leaves. A re-evaluated run step (same inputs, from the state
        before it) reveals the bits it revealed the first time, which is checked."""
        spec = sess.spec
        extra: dict[str, Any] = dict(run_audit)
        t_terms = time.perf_counter()
        start = sess.svt_resume
        now = sess.svt.state.counters.to_dict() if sess.svt is not None else start.counters if start else {}
        if now.get("done"):
            count = now["count"]
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"step {step}: the ABCDP run is finished: c accepts reached ({count} of "
                f"c = {abcdp.plan_of(spec.model_params).c}); no further candidate is decided in this session "
                "(close it)",
            )
        try:  # the public inputs first: a malformed request is refused before anything is charged
            inputs = serde.inputs_from_proto(req.inputs, self.cfg.max_message_bytes)
            phibar = abcdp.phibar_input(spec, inputs, n)
        except (serde.WireError, AnalysisError, ValueError) as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {step}: {exc}") from exc
        self.store.freeze_point("before-charge", run_step)
        if sess.svt is None:
            try:  # the run's privacy event, before any record is touched: once per run (per session without)
                events = self.privacy.events_for(self.cfg, sess.analysis, spec, 1)
                plan = abcdp.plan_digest(spec) if spec.run_id else b""
                paid = None
                if spec.run_id:
                    paid = self.privacy.charged_run_step(spec.run_id, 0, plan, sess.run_key_id)
                if paid is None:
                    self.privacy.check(events, "the ABCDP run (charged once)")
                    charge = None
                    if spec.run_id:
                        sid16 = spec.session_id.hex()[:16]
                        charge = RunCharge(spec.run_id, sid16, 0, 0, 0, plan.hex(), sess.run_key_id)
                    self.privacy.commit(events, charge)
                    extra["charged"] = [e.to_dict() for e in events]
                else:
                    extra.update(
                        charged_in=paid.session,
                        detail=f"the ABCDP run's epsilon was charged in session {paid.session} (same plan, "
                        "same run key): not charged again",
                    )
            except PrivacyRefusal as exc:
                raise Abort(exc.code, exc.message) from exc
            try:
                if spec.run_id:
                    assert start is not None
                    sess.svt = abcdp.SvtRun.start(
                        spec.model_params,
                        self.data,
                        spec.m,
                        None,
                        threshold_rng=abcdp.threshold_source(sess.noise_key, plan),
                        counters=start.counters,
                    )
                else:
                    key = derive_key(sess.noise_key, spec.session_id, b"svt-state")
                    sess.svt = abcdp.SvtRun.start(spec.model_params, self.data, spec.m, SecureRandom(key))
            except (AnalysisError, ValueError) as exc:
                sess.state, sess.failure = "failed", f"step {step}: {exc}"  # charged: never charge it again
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {step}: {exc}") from exc
        run = sess.svt
        before = run.state.counters.to_dict()
        redo = start.redo if start is not None and start.redo is not None else None
        if redo is not None and redo.run_step != run_step:
            redo = None  # only the session's first step re-evaluates the step completed here last
        try:
            assert sess.ctx is not None and sess.proto_rng is not None
            query = self.noise_rng(sess, step, digest) if spec.run_id else None
            machine = run.machine(sess.ctx, phibar, step, sess.proto_rng, query)
        except abcdp.SvtRunError as exc:
            sess.state, sess.failure = "failed", f"step {step}: {exc}"
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"step {step}: {exc}") from exc
        except (serde.WireError, AnalysisError, ValueError) as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {step}: {exc}") from exc
        prepare_s = time.perf_counter() - t_terms
        if redo is None:  # a step completed here before was counted then
            self.store.count_decisions(n)
        else:
            extra.update(decisions_charged=0, detail=f"run step {run_step} evaluated again (same inputs)")
        self.store.freeze_point("after-charge", run_step)
        out = await self.drive_step(sess, machine, step, n, context)
        sess.last_step = step
        try:
            accepts = run.settle(out.result.revealed)
            first = redo.svt.revealed if redo is not None and redo.svt is not None else None
            if first is not None and not np.array_equal(out.result.revealed, first):
                raise abcdp.SvtRunError(
                    f"run step {run_step} of run {spec.run_id!r}, evaluated again with the same inputs from "
                    "the same state, revealed other bits than the first time; not answering"
                )
        except abcdp.SvtRunError as exc:  # more accepts revealed than allowed: a deviation or corruption
            sess.state, sess.failure = "failed", f"step {step}: {exc}"
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"step {step}: {exc}") from exc
        if run_step and sess.state == "ready":  # kept durably before the answer leaves (not superseded)
            ref = RunStepRef(spec.run_id, run_step, digest, spec.session_id)
            data = self.snapshot.sha256 if self.snapshot is not None else ""
            bits = np.asarray(out.result.revealed, dtype=bool)
            svt_step = SvtStep(abcdp.plan_digest(spec), before, bits)
            sess.held = RunRecord(ref, n, out.rounds, tuple(out.to_receiver), data_sha256=data, svt=svt_step)
            self.replays.save(sess.held)
            self.store.freeze_point("before-answer", run_step)
        clamped = int(np.count_nonzero(out.result.clamped))
        resp = party_pb2.EvaluateResponse(
            session_id=spec.session_id,
            step=step,
            to_receiver=serde.receiver_messages_to_proto(out.to_receiver),
            rounds=out.rounds,
            clamped=clamped,
            run_step=run_step,
        )
        return resp, {
            **extra,
            "decisions": n,
            "rounds": out.rounds,
            "clamped": clamped,
            "accepts": accepts,
            **run.audit(),
            "compute_ms": round((prepare_s + out.stepped_s) * 1e3, 3),
            "handler_ms": round((time.perf_counter() - t_begin) * 1e3, 3),
            "cpu_ms": round((time.process_time() - cpu_begin) * 1e3, 3),
        }

    def run_step_check(
        self, sess: Session, req: party_pb2.EvaluateRequest, step: int, run_step: int, n: int
    ) -> tuple[bytes, dict[str, Any], party_pb2.EvaluateResponse | None]:
        """Run resume (parties.replay) for session step ``step`` = run step ``run_step`` (0: no run).

        Returns the step's digest, audit fields and, when every party holds this run step from one session
        with the same digest, the stored answer (replay: no computation, no charge). A different digest for
        the run step this party holds is refused; the same digest without every party holding it is
        evaluated afresh (charged again only when :meth:`paid_run_step` cannot vouch for it)."""
        if not run_step:
            return b"", {}, None
        spec = sess.spec
        try:
            inputs = serde.inputs_from_proto(req.inputs, self.cfg.max_message_bytes)
        except serde.WireError as exc:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"step {step}: {exc}") from exc
        digest = step_digest(spec, run_step, n, inputs)
        audit: dict[str, Any] = {"run_id": spec.run_id, "run_step": run_step}
        held = sess.held
        if held is None or held.run_step != run_step:
            return digest, audit, None
        if held.ref.digest != digest:
            raise Abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"run step {run_step} of run {spec.run_id!r} was completed here with other inputs "
                f"(digest {held.ref.digest.hex()[:16]}…, now {digest.hex()[:16]}…; batch {held.batch}, "
                f"now {n}); refusing to evaluate a completed run step with different inputs",
            )
        if sess.replay is None or sess.replay.ref != held.ref:
            audit["detail"] = f"run step {run_step} evaluated afresh: not every party holds it"
            return digest, audit, None
        sess.last_step = step
        resp = party_pb2.EvaluateResponse(
            session_id=spec.session_id,
            step=step,
            to_receiver=serde.receiver_messages_to_proto(list(held.messages)),
            rounds=held.rounds,
            run_step=run_step,
            replayed=True,
        )
        audit.update(
            decisions=0, replayed=True, detail=f"replayed run step {run_step}", rounds=held.rounds
        )
        return digest, audit, resp

    async def drive_step(
        self, sess: Session, machine: Any, step: int, n: int, context: grpc.aio.ServicerContext
    ) -> Any:
        """Run this party's protocol machine for one step over the session's peer links (large batches on
        a worker thread); a lost link or a protocol error fails the session, with the gRPC code to return."""
        sess.busy = True
        offload = _to_thread if n >= OFFLOAD_MIN_BATCH else None
        try:
            return await drive(
                machine,
                me=self.cfg.id,
                peers=sess.peers,
                step=step,
                send=self.sender(sess),
                mailbox=sess.mailbox,
                symmetric=True,
                timeout_s=self.timeout(context),
                offload=offload,
            )
        except LinkLost as exc:
            sess.state, sess.failure = "failed", f"step {step}: {exc}"
            raise Abort(grpc.StatusCode.UNAVAILABLE, str(exc)) from exc
        except ProtocolError as exc:
            sess.state, sess.failure = "failed", f"step {step}: {exc}"
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"step {step}: protocol error: {exc}") from exc
        finally:
            sess.busy = False

    def noise_rng(self, sess: Session, step: int, digest: bytes) -> SecureRandom:
        """This party's secret noise for session step ``step``: for a run, from the run noise key, keyed by
        the run step and the step's digest (the same inputs give the same noise in any session, other
        inputs independent noise); otherwise from the session's key."""
        spec = sess.spec
        if spec.run_id:
            return SecureRandom(run_step_keys(sess.noise_key, spec.run_step(step), digest)[0])
        return SecureRandom(derive_key(sess.noise_key, spec.session_id, b"step/%d" % step))

    def reveal_rng(self, sess: Session, step: int, digest: bytes) -> SecureRandom | None:
        """For a run: the stream of this party's randomness that changes the revealed value (blinded mode's
        E term), keyed like :meth:`noise_rng`; without a run None (the protocol's own CSPRNG)."""
        if not sess.spec.run_id:
            return None
        return SecureRandom(run_step_keys(sess.noise_key, sess.spec.run_step(step), digest)[1])

    async def close_session(
        self, req: party_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            sess = self.session(req.session_id, ("open", "connecting", "ready", "failed"))
            await self.teardown(sess, "closed")
            return party_pb2.CloseSessionResponse(
                session_id=sess.spec.session_id, last_step=sess.last_step
            ), {"reason": req.reason[:200]}

        return await self.handle(context, "CloseSession", run, session=bytes(req.session_id))

    async def teardown(self, sess: Session, state: str) -> None:
        sess.state = state
        for link in list(sess.links.values()):
            await link.close()
        if sess.relay is not None:
            await sess.relay.close()
        for fut in sess.accept_waiters.values():
            if not fut.done():
                fut.cancel()
        sess.links.clear()
        # keep a closed session's id so its messages are refused as out-of-session, but drop its secrets
        sess.ctx, sess.proto_rng, sess.noise_key = None, None, b""

    async def plan_privacy(self, req: party_pb2.PlanPrivacyRequest, context: grpc.aio.ServicerContext) -> Any:
        """Dry run of a planned session (parties.privacy_budget): no data, no session, no ledger change."""

        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            if not req.HasField("spec") or req.batches < 1 or req.batch_size < 1:
                msg = "PlanPrivacy needs a spec, batches >= 1 and batch_size >= 1"
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, msg)
            try:
                spec = serde.spec_from_proto(req.spec)
            except serde.WireError as exc:
                raise Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from exc
            analysis: Analysis | None = None
            refusal = ""
            try:
                check_policy(self.cfg, spec, self.decisions_used)
                analysis = get_analysis(spec.model)
                analysis.check_params(spec.model_params)
                check_data_model(self.cfg, spec, analysis)
            except Abort as exc:
                refusal = f"{exc.code.name}: {exc.message}"
            except AnalysisError as exc:
                refusal = f"INVALID_ARGUMENT: {exc}"
            batches = int(req.batches)
            if spec.reveal_mode == abcdp.SVT_MODE:  # federated ABCDP: one privacy event per run, not batch
                batches = 1
            resp = await asyncio.to_thread(  # PLD compositions can take seconds: off the event loop
                self.privacy.plan_proto,
                self.cfg,
                analysis,
                spec,
                batches,
                int(req.batch_size),
                refusal,
                self.decisions_used,
            )
            return resp, {
                "analysis": spec.model,
                "reveal_mode": spec.reveal_mode,
                "batches": int(req.batches),
                "batch_size": int(req.batch_size),
                "would_refuse": resp.would_refuse,
            }

        return await self.handle(context, "PlanPrivacy", run)

    async def privacy_report(
        self, req: party_pb2.PrivacyReportRequest, context: grpc.aio.ServicerContext
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            return self.privacy.report_proto(self.cfg, self.decisions_used), {}

        return await self.handle(context, "PrivacyReport", run)

    async def status(self, req: party_pb2.StatusRequest, context: grpc.aio.ServicerContext) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            self.require_coordinator(context)
            return party_pb2.StatusResponse(
                party=self.cfg.id,
                identity=self.cfg.identity,
                sessions=[
                    party_pb2.SessionStatus(
                        session_id=s.spec.session_id,
                        last_step=s.last_step,
                        state=s.state,
                        reveal_mode=s.spec.reveal_mode,
                        model=s.spec.model,
                    )
                    for s in self.sessions.values()
                ],
                decisions_used=self.decisions_used,
                decisions_budget=self.cfg.max_decisions,
                refused_messages=self.refused_frames,
            ), {}

        return await self.handle(context, "Status", run)

    # ---- Peer service (mesh, accepting side) ---------------------------------------------------------------

    async def exchange(
        self, request_iterator: AsyncIterator[peer_pb2.PeerFrame], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[peer_pb2.PeerFrame]:
        who = self.who(context)

        async def refuse(code: grpc.StatusCode, msg: str, sid: bytes | None = None) -> NoReturn:
            self.refused_frames += 1
            self.audit.record(who=who, what="PeerExchange", outcome=code.name, session=sid, detail=msg)
            await context.abort(code, _cut(msg))
            raise AssertionError("unreachable")

        if who not in {p.identity for p in self.cfg.peers}:  # the caller first, before any frame is read
            msg = f"caller {shown(who)} is not a consortium member of this party"
            await refuse(grpc.StatusCode.PERMISSION_DENIED, msg)

        try:
            first = await asyncio.wait_for(request_iterator.__anext__(), self.cfg.round_timeout_s)
        except (StopAsyncIteration, TimeoutError):
            await refuse(grpc.StatusCode.INVALID_ARGUMENT, "a peer stream must start with a HELLO frame")
        sid = bytes(first.session_id)
        if first.kind != Kind.HELLO:
            await refuse(
                grpc.StatusCode.INVALID_ARGUMENT, "a peer stream must start with a HELLO frame", sid[:64]
            )
        sess = self.sessions.get(sid)
        if sess is None or sess.state not in ("open", "connecting", "ready"):
            await refuse(grpc.StatusCode.FAILED_PRECONDITION, "unknown or closed session", sid[:64])
        q = sess.spec.id_of(who) if who else None
        if q is None or q == self.cfg.id:
            await refuse(
                grpc.StatusCode.PERMISSION_DENIED, f"caller {shown(who)} is not a party of this session", sid
            )
        if int(first.src) != q:
            await refuse(
                grpc.StatusCode.PERMISSION_DENIED,
                f"caller is {shown(who)} (party {q}) but claims to be party {first.src}",
                sid,
            )
        if q > self.cfg.id or sess.spec.topology != "mesh":
            await refuse(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"party {q} must not dial party {self.cfg.id} in this session",
                sid,
            )
        fut = sess.accept_waiters.get(q)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            sess.accept_waiters[q] = fut
        if fut.done():
            await refuse(grpc.StatusCode.ALREADY_EXISTS, f"party {q} already has a link in this session", sid)
        link = MeshAcceptLink(q)
        fut.set_result(link)
        self.audit.record(
            who=who,
            what="PeerExchange",
            session=sid,
            analysis=sess.spec.model,
            reveal_mode=sess.spec.reveal_mode,
        )

        async def read() -> None:
            why = "peer closed its stream"
            try:
                async for msg in request_iterator:
                    await self.on_frame(sess, q, msg)
            except grpc.aio.AioRpcError as exc:
                why = f"{exc.code().name}: {exc.details()}"
            except asyncio.CancelledError:
                why = "stream cancelled"
            await sess.mailbox.lose(q, why)
            link.queue.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            yield serde.frame_header_to_proto(sid, 0, 0, self.cfg.id, q, Kind.HELLO)
            while True:
                item = await link.queue.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> int:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        health = _strict_health_handler(_HealthServicer(self))
        server.add_generic_rpc_handlers((_strict_party_handlers(self), _strict_peer_handler(self), health))
        if self.tls is None:
            port = server.add_insecure_port(self.cfg.listen)
        else:
            port = server.add_secure_port(self.cfg.listen, server_credentials(self.tls))
        if port == 0:
            raise RuntimeError(f"cannot listen on {self.cfg.listen}")
        await server.start()
        self.server, self.port = server, port
        host = self.cfg.listen.rsplit(":", 1)[0]
        address = f"{host}:{port}"
        if self.cfg.address_file is not None:
            write_durable(self.cfg.address_file, (address + "\n").encode(), private=False)
        self.audit.record(
            who=self.cfg.identity,
            what="Start",
            detail=f"listening on {address}",
            insecure=self.insecure,
            fixed_rng=self.cfg.fixed_rng_key is not None,
        )
        return port

    async def stop(self, grace: float = 5.0) -> None:
        self.serving = False
        for sess in list(self.sessions.values()):
            if sess.state in ("open", "connecting", "ready"):
                await self.teardown(sess, "closed")
        if self.server is not None:
            await self.server.stop(grace)
        self.audit.record(who=self.cfg.identity, what="Stop")
        self.audit.close()

    async def serve_forever(self, on_ready: Callable[[str], None] | None = None) -> None:
        """Serve until SIGTERM / SIGINT, then stop gracefully (in-flight calls get STOP_GRACE_S).

        The first signal also arms a watchdog thread: if the process has not exited STOP_DEADLINE_S after it
        (a handler stuck in Python code, a worker thread that does not return), the watchdog writes an
        audit line and ends the process with EXIT_STOP_DEADLINE. The signal reaches the daemon twice: through
        the event loop (woken from any thread) and through a Python-level handler, which runs in the main
        thread between bytecodes even while a handler keeps the event loop busy. Only a single C call that
        holds the GIL for longer than the deadline could delay it; request validation keeps such work bounded
        by this party's configured limits."""
        port = await self.start()
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        armed = threading.Event()

        def arm() -> None:
            if not armed.is_set():
                armed.set()
                threading.Thread(target=self._stop_watchdog, name="stop-watchdog", daemon=True).start()

        def from_loop() -> None:
            arm()
            stop.set()

        def from_python(signum: int, frame: Any) -> None:
            arm()
            loop.call_soon_threadsafe(stop.set)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, from_loop)  # sets the wakeup fd: wakes the loop from any thread
            signal.signal(sig, from_python)  # the Python-level handler (add_signal_handler's is a no-op)
        if on_ready is not None:
            on_ready(f"{self.cfg.listen.rsplit(':', 1)[0]}:{port}")
        await stop.wait()
        await self.stop(STOP_GRACE_S)

    def _stop_watchdog(self) -> None:
        time.sleep(STOP_DEADLINE_S)
        msg = f"graceful stop did not finish within {STOP_DEADLINE_S:g} s of the signal; exiting without it"
        with contextlib.suppress(Exception):
            self.audit.record(who=self.cfg.identity, what="Stop", outcome="DEADLINE", detail=msg)
        with contextlib.suppress(Exception):
            os.write(2, f"confar-party: {msg}\n".encode())
        os._exit(EXIT_STOP_DEADLINE)


def _ident_of(sess: Session, src: int) -> str | None:
    for p in sess.spec.parties:
        if p.id == src:
            return p.identity
    return None


def _cut(message: str) -> str:
    """An error message as sent back: at most MAX_ERROR_CHARS (well inside a client's 8 KiB header limit)."""
    return message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 12] + "… (cut)"


async def _to_thread(fn: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


_PARTY_METHODS: dict[str, tuple[Any, Any]] = {
    "OpenSession": (party_pb2.OpenSessionRequest, party_pb2.OpenSessionResponse),
    "ConnectSession": (party_pb2.ConnectSessionRequest, party_pb2.ConnectSessionResponse),
    "Evaluate": (party_pb2.EvaluateRequest, party_pb2.EvaluateResponse),
    "CloseSession": (party_pb2.CloseSessionRequest, party_pb2.CloseSessionResponse),
    "Status": (party_pb2.StatusRequest, party_pb2.StatusResponse),
    "PlanPrivacy": (party_pb2.PlanPrivacyRequest, party_pb2.PlanPrivacyResponse),
    "PrivacyReport": (party_pb2.PrivacyReportRequest, party_pb2.PrivacyReportResponse),
    "ProbeLinks": (party_pb2.ProbeLinksRequest, party_pb2.ProbeLinksResponse),
}


def _strict_party_handlers(d: PartyDaemon) -> grpc.GenericRpcHandler:
    """The Party service with requests parsed in the handler, so undecodable bytes get INVALID_ARGUMENT
    (and an audit line) instead of grpc's UNKNOWN."""
    impl: dict[str, Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]] = {
        "OpenSession": d.open_session,
        "ConnectSession": d.connect_session,
        "Evaluate": d.evaluate,
        "CloseSession": d.close_session,
        "Status": d.status,
        "PlanPrivacy": d.plan_privacy,
        "PrivacyReport": d.privacy_report,
        "ProbeLinks": d.probe_links,
    }

    def make(name: str) -> Any:
        req_type, resp_type = _PARTY_METHODS[name]

        async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            who = d.who(context)
            if who != d.cfg.coordinator_identity:  # before the bytes are even parsed
                await d.refuse_caller(context, name, who)
            try:
                req = req_type.FromString(raw)
            except DecodeError as exc:
                msg = f"{name}: request is not a valid {req_type.DESCRIPTOR.full_name}: {exc}"
                d.audit.record(who=who, what=name, outcome="INVALID_ARGUMENT", detail=msg)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _cut(msg))
            return await impl[name](req, context)

        return grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=None, response_serializer=resp_type.SerializeToString
        )

    return grpc.method_handlers_generic_handler("confar.v1.Party", {n: make(n) for n in _PARTY_METHODS})


def _strict_peer_handler(d: PartyDaemon) -> grpc.GenericRpcHandler:
    async def frames(raw_iter: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async for raw in raw_iter:
            try:
                yield peer_pb2.PeerFrame.FromString(raw)
            except DecodeError:
                d.refused_frames += 1
                d.audit.record(
                    who=d.who(context),
                    what="PeerFrame",
                    outcome="INVALID_ARGUMENT",
                    detail="undecodable PeerFrame",
                )

    async def handler(
        raw_iter: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for frame in d.exchange(frames(raw_iter, context), context):
            yield frame

    return grpc.method_handlers_generic_handler(
        "confar.v1.Peer",
        {
            "Exchange": grpc.stream_stream_rpc_method_handler(
                handler, request_deserializer=None, response_serializer=peer_pb2.PeerFrame.SerializeToString
            )
        },
    )


def _strict_health_handler(servicer: _HealthServicer) -> grpc.GenericRpcHandler:
    """grpc.health.v1.Health with the request parsed in the handler: undecodable bytes get INVALID_ARGUMENT
    instead of grpc's UNKNOWN (the health check needs no certificate role: any consortium TLS client)."""

    async def check(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            req = health_pb2.HealthCheckRequest.FromString(raw)
        except DecodeError as exc:
            msg = f"request is not a valid grpc.health.v1.HealthCheckRequest: {exc}"
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, msg)
            raise AssertionError("unreachable") from exc
        return await servicer.Check(req, context)

    return grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health",
        {
            "Check": grpc.unary_unary_rpc_method_handler(
                check,
                request_deserializer=None,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
            )
        },
    )


class _HealthServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, d: PartyDaemon) -> None:
        self.d = d

    async def Check(self, request: Any, context: Any) -> Any:
        if request.service not in ("", "confar.v1.Party", "confar.v1.Peer"):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {shown(request.service)}")
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.d.serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)
