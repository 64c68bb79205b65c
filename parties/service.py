"""The gRPC services of one party, kept thin: each RPC checks its caller and request, calls the policy
(``parties.policy``), the session state machine (``parties.session``, ``parties.peering``, ``parties.steps``)
and storage (``parties.storage``), and maps what they raise to a status code with one audit line.

Services: ``Party`` (coordinator-facing: open/connect/evaluate/close/status, privacy plan/report, link
probe) and ``Peer`` (the accepting side of mesh share exchange). Every Party RPC is the coordinator's: its
caller is checked once, in :meth:`PartyService.serve`, before its request bytes are parsed; any other caller
is refused there. Error messages sent back are cut to MAX_ERROR_CHARS (inputs echoed in them:
``proto.spec.shown``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any, NoReturn

import grpc
from google.protobuf.message import DecodeError

from parties import lifecycle, sources, steps
from parties.analyses import Dataset
from parties.audit import SUBJECT_KEYS, AuditSubject
from parties.config import PartyConfig
from parties.exchange import LinkLost, Refused
from parties.peering import accept_stream, unwrap_frame
from parties.policy import (
    check_batch,
    run_paid,
)
from parties.refusal import Reason, Refusal
from parties.session import (
    LIVE,
    Party,
    Session,
    check_next_step,
    replay_audit,
    teardown,
)
from parties.sources import Snapshot
from parties.storage import PartyStorage
from proto import party_pb2, peer_pb2, serde, serde_privacy, serde_session
from proto.records import RunCharge
from proto.spec import SessionSpec, shown
from proto.tls import TlsMaterial, caller_identity

MAX_ERROR_CHARS = 2000  # an error message sent back is cut to this (inputs echoed in it: proto.spec.shown)

#: Each refusal of the party's domain (``parties.refusal``) is answered with the gRPC status code of the same
#: name: the one place where the domain's reasons become the transport's codes.
STATUS: dict[Reason, grpc.StatusCode] = {reason: grpc.StatusCode[reason.name] for reason in Reason}

#: The Party service's RPCs by name: request and response message types (the request is parsed by
#: :meth:`PartyService.serve`, after the caller check).
PARTY_RPCS: dict[str, tuple[Any, Any]] = {
    "OpenSession": (party_pb2.OpenSessionRequest, party_pb2.OpenSessionResponse),
    "ConnectSession": (party_pb2.ConnectSessionRequest, party_pb2.ConnectSessionResponse),
    "Evaluate": (party_pb2.EvaluateRequest, party_pb2.EvaluateResponse),
    "CloseSession": (party_pb2.CloseSessionRequest, party_pb2.CloseSessionResponse),
    "Status": (party_pb2.StatusRequest, party_pb2.StatusResponse),
    "PlanPrivacy": (party_pb2.PlanPrivacyRequest, party_pb2.PlanPrivacyResponse),
    "PrivacyReport": (party_pb2.PrivacyReportRequest, party_pb2.PrivacyReportResponse),
    "ProbeLinks": (party_pb2.ProbeLinksRequest, party_pb2.ProbeLinksResponse),
}
Rpc = Callable[[Any, grpc.aio.ServicerContext, str], Awaitable[Any]]  # (request, context, caller)


class PartyService:
    """The Party and Peer services of one daemon and the state they share: the party (``Party``: its
    configuration, TLS material, records and state directory) and its sessions by id. The gRPC server that
    carries them is ``parties.daemon.PartyDaemon``, which has one of these."""

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
        self.audit, self.privacy, self.replays = self.store.audit, self.store.privacy, self.store.replays
        self.party = Party(cfg, self.tls, self.snapshot, self.data, self.store)
        self.sessions: dict[bytes, Session] = {}
        self.refused_frames = 0
        self.serving = True
        self.rpcs: dict[str, Rpc] = {
            "OpenSession": self.open_session,
            "ConnectSession": self.connect_session,
            "Evaluate": self.evaluate,
            "CloseSession": self.close_session,
            "Status": self.status,
            "PlanPrivacy": self.plan_privacy,
            "PrivacyReport": self.privacy_report,
            "ProbeLinks": self.probe_links,
        }
        assert set(self.rpcs) == set(PARTY_RPCS)

    # ---- helpers -----------------------------------------------------------------------------------------

    def who(self, context: grpc.aio.ServicerContext) -> str | None:
        return caller_identity(context, self.insecure)

    def session(self, sid: bytes, want: tuple[str, ...] = ("ready",)) -> Session:
        return lifecycle.session_in(self.sessions, sid, want)

    def timeout(self, context: grpc.aio.ServicerContext) -> float:
        left = context.time_remaining()
        t = self.cfg.round_timeout_s
        return max(0.01, min(t, left - 0.05)) if left is not None else t

    def run_paid(self, spec: SessionSpec) -> RunCharge | None:
        return run_paid(self.privacy, self.replays, self.cfg, spec)

    async def shut_down(self) -> None:
        """Stop serving: new sessions are refused (UNAVAILABLE) and every live session is closed."""
        self.serving = False
        for sess in list(self.sessions.values()):
            if sess.state in LIVE:
                await teardown(sess, "closed")

    async def serve(self, name: str, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        """The Party RPC ``name`` from its raw request bytes: the caller checked (once per RPC: every Party
        RPC is the coordinator's; anyone else is refused before its bytes are parsed, with one audit line of
        bounded size), then the request parsed (undecodable bytes get INVALID_ARGUMENT and an audit line
        instead of grpc's UNKNOWN), then the RPC run by :meth:`handle`."""
        who = self.who(context)
        if who != self.cfg.coordinator_identity:
            await self.refuse_caller(context, name, who)
        req_type = PARTY_RPCS[name][0]
        try:
            req = req_type.FromString(raw)
        except DecodeError as exc:
            msg = f"{name}: request is not a valid {req_type.DESCRIPTOR.full_name}: {exc}"
            invalid = Reason.INVALID_ARGUMENT
            self.audit.record(who=who, what=name, outcome=invalid.name, detail=msg)
            await context.abort(STATUS[invalid], cut(msg))
            raise AssertionError("unreachable") from exc
        return await self.rpcs[name](req, context, who)

    async def handle(
        self,
        context: grpc.aio.ServicerContext,
        who: str,
        what: str,
        fn: Callable[[], Awaitable[Any]],
        session: bytes | None = None,
        step: int | None = None,
    ) -> Any:
        """Run a unary handler for the (checked) caller ``who``: map a Refusal (its :data:`STATUS`) or an
        unexpected error (INTERNAL) to a status code; one audit line either way. Error messages sent back
        are cut to MAX_ERROR_CHARS."""
        sess = self.sessions.get(bytes(session)) if session else None
        about = AuditSubject(
            session, step, sess.spec.model if sess else None, sess.spec.reveal_mode if sess else None
        )
        base: dict[str, Any] = {"who": who, "what": what, "about": about}
        try:
            resp, audit_extra = await fn()
        except Refusal as exc:
            self.audit.record(**base, outcome=exc.reason.name, detail=exc.message)
            await context.abort(STATUS[exc.reason], cut(exc.message))
            raise AssertionError("unreachable") from exc
        except asyncio.CancelledError:
            self.audit.record(**base, outcome="CANCELLED")
            raise
        except Exception as exc:  # never crash the daemon on one request
            msg = f"internal error in {what}: {type(exc).__name__}: {exc}"
            self.audit.record(**base, outcome="INTERNAL", detail=msg)
            await context.abort(grpc.StatusCode.INTERNAL, cut(msg))
            raise AssertionError("unreachable") from exc
        extra = dict(audit_extra)  # what a handler adds: a step's decisions, an opened session's analysis
        base["about"] = replace(about, **{k: extra.pop(k) for k in SUBJECT_KEYS & extra.keys()})
        self.audit.record(**{**base, **extra})
        return resp

    async def refuse_caller(self, context: grpc.aio.ServicerContext, what: str, who: str | None) -> NoReturn:
        """PERMISSION_DENIED for a Party RPC from anyone but the coordinator; its audit line is bounded (the
        audit log cuts every string)."""
        msg = f"caller {shown(who)} is not this party's coordinator ({self.cfg.coordinator_identity!r})"
        denied = Reason.PERMISSION_DENIED
        self.audit.record(who=who, what=what, outcome=denied.name, detail=msg)
        await context.abort(STATUS[denied], msg)
        raise AssertionError("unreachable")

    # ---- Party service -----------------------------------------------------------------------------------

    async def open_session(
        self, req: party_pb2.OpenSessionRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            if not self.serving:
                raise Refusal(Reason.UNAVAILABLE, "party is shutting down")
            if not req.HasField("spec"):
                raise Refusal(Reason.INVALID_ARGUMENT, "OpenSessionRequest.spec is missing")
            try:
                spec = serde.spec_from_open_request(req)  # with its run binding (run_id, first_run_step)
            except serde.WireError as exc:
                raise Refusal(Reason.INVALID_ARGUMENT, str(exc)) from exc
            opened = await lifecycle.open_session(self.party, self.sessions, spec)
            answer, audit = lifecycle.open_answer(self.party, opened)
            return serde_session.open_response_to_proto(answer), audit

        return await self.handle(
            context,
            who,
            "OpenSession",
            run,
            session=bytes(req.spec.session_id) if req.HasField("spec") else None,
        )

    async def connect_session(
        self, req: party_pb2.ConnectSessionRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            sess = self.session(req.session_id, ("open",))

            async def on_frame(src: int, msg: peer_pb2.PeerFrame) -> None:
                await self.on_frame(sess, src, msg)

            bundles = serde_session.connect_bundles_from_proto(req)
            rounds = await lifecycle.connect_session(
                self.party, sess, list(req.resume), bundles, on_frame, self.timeout(context)
            )
            answer = serde_session.connect_response_to_proto(sess.spec.session_id, rounds)
            return answer, {"step": 0, "rounds": rounds, **replay_audit(sess)}

        return await self.handle(context, who, "ConnectSession", run, session=bytes(req.session_id), step=0)

    async def evaluate(
        self, req: party_pb2.EvaluateRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        step = int(req.step)

        async def run() -> tuple[Any, dict[str, Any]]:
            t_begin, cpu_begin = time.perf_counter(), time.process_time()
            sess = self.session(req.session_id)
            check_next_step(sess, step)
            n = int(req.batch)
            check_batch(self.cfg, n)
            ask = steps.Step(step, n, req.inputs, lambda: self.timeout(context), t_begin, cpu_begin)
            return await steps.evaluate(self.party, sess, ask)

        return await self.handle(context, who, "Evaluate", run, session=bytes(req.session_id), step=step)

    async def probe_links(
        self, req: party_pb2.ProbeLinksRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        """A transport probe at the next step: the exchange-round floor of this deployment, measured with the
        links and exchange code decisions use; all-zero payloads, no data, noise, randomness or charge."""
        call = serde_session.probe_request_from_proto(req)
        step = call.step

        async def run() -> tuple[Any, dict[str, Any]]:
            sess = self.session(call.session_id)
            result, audit = await lifecycle.probe_links(self.party, sess, call, lambda: self.timeout(context))
            return serde_session.probe_response_to_proto(sess.spec.session_id, step, result), audit

        return await self.handle(context, who, "ProbeLinks", run, session=call.session_id, step=step)

    async def close_session(
        self, req: party_pb2.CloseSessionRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            sess = self.session(session_id, ("open", "connecting", "ready", "failed"))
            await teardown(sess, "closed")
            self.store.compact()  # the ledger files current again (parties.storage): one write per session
            return serde_session.close_response_to_proto(sess.spec.session_id, sess.last_step), {
                "reason": reason[:200]
            }

        session_id, reason = serde_session.close_request_from_proto(req)
        return await self.handle(context, who, "CloseSession", run, session=session_id)

    async def plan_privacy(
        self, req: party_pb2.PlanPrivacyRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        """Dry run of a planned session (``parties.lifecycle.plan_privacy``): no data, session or charge."""

        async def run() -> tuple[Any, dict[str, Any]]:
            try:
                call = serde_privacy.plan_request_from_proto(req)
            except serde.WireError as exc:
                raise Refusal(Reason.INVALID_ARGUMENT, str(exc)) from exc
            spec = call.spec
            answer = await lifecycle.plan_privacy(self.party, call)
            return serde_privacy.plan_answer_to_proto(answer), {
                "analysis": spec.model,
                "reveal_mode": spec.reveal_mode,
                "batches": call.batches,
                "batch_size": call.batch_size,
                "would_refuse": answer.would_refuse,
                **({"detail": answer.message} if answer.would_refuse else {}),
                **lifecycle.study_audit(spec),
            }

        return await self.handle(context, who, "PlanPrivacy", run)

    async def privacy_report(
        self, req: party_pb2.PrivacyReportRequest, context: grpc.aio.ServicerContext, who: str
    ) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            return serde_privacy.report_to_proto(self.privacy.report(self.cfg, self.store.decisions_used)), {}

        return await self.handle(context, who, "PrivacyReport", run)

    async def status(self, req: party_pb2.StatusRequest, context: grpc.aio.ServicerContext, who: str) -> Any:
        async def run() -> tuple[Any, dict[str, Any]]:
            status = lifecycle.status(self.party, self.sessions, self.refused_frames)
            return serde_session.status_to_proto(status), {}

        return await self.handle(context, who, "Status", run)

    # ---- Peer service (mesh, accepting side) ---------------------------------------------------------------

    async def on_frame(self, sess: Session, src: int, msg: peer_pb2.PeerFrame) -> None:
        """File a frame from peer ``src`` in the session's mailbox; a refused one is counted and audited."""
        try:
            await sess.mailbox.deliver(unwrap_frame(self.party, sess, src, msg))
        except Refused as exc:
            if exc.reason:
                self.refused_frames += 1
                sess.mailbox.refused += 1
                self.audit.record(
                    who=_ident_of(sess, src),
                    what="PeerFrame",
                    outcome="REFUSED",
                    about=AuditSubject(bytes(msg.session_id)[:64], int(msg.step)),
                    detail=exc.reason,
                    round=int(msg.round),
                )

    async def exchange(
        self, raw_frames: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[peer_pb2.PeerFrame | bytes]:
        """A mesh stream dialled by a lower-numbered peer (``parties.peering.accept_stream``, which checks
        the caller before any frame is read). Its frames are parsed here: an undecodable one is counted,
        audited and skipped; a broken stream is :class:`parties.exchange.LinkLost` naming its status. Each
        refusal is counted, audited and answered with its status code."""
        who = self.who(context)

        async def parsed() -> AsyncIterator[peer_pb2.PeerFrame]:
            try:
                async for raw in raw_frames:
                    try:
                        yield peer_pb2.PeerFrame.FromString(raw)
                    except DecodeError:
                        self.refused_frames += 1
                        outcome = Reason.INVALID_ARGUMENT.name
                        self.audit.record(
                            who=who, what="PeerFrame", outcome=outcome, detail="undecodable PeerFrame"
                        )
            except grpc.aio.AioRpcError as exc:
                raise LinkLost(f"{exc.code().name}: {exc.details()}") from exc

        async def refuse(reason: Reason, msg: str, sid: bytes | None = None) -> NoReturn:
            self.refused_frames += 1
            about = AuditSubject(session=sid)
            self.audit.record(who=who, what="PeerExchange", outcome=reason.name, about=about, detail=msg)
            await context.abort(STATUS[reason], cut(msg))
            raise AssertionError("unreachable")

        stream = accept_stream(self.party, self.sessions, who, parsed(), refuse, self.on_frame)
        async with contextlib.aclosing(stream) as frames:
            async for frame in frames:
                yield frame


def _ident_of(sess: Session, src: int) -> str | None:
    for p in sess.spec.parties:
        if p.id == src:
            return p.identity
    return None


def cut(message: str) -> str:
    """An error message as sent back: at most MAX_ERROR_CHARS (well inside a client's 8 KiB header limit)."""
    return message if len(message) <= MAX_ERROR_CHARS else message[: MAX_ERROR_CHARS - 12] + "… (cut)"
