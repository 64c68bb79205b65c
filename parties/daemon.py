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
fixed-point format: at most 64 parties, ``proto.serde.FMT_LIMITS``). SIGTERM / SIGINT stop the daemon
within STOP_DEADLINE_S = 10 s, also with requests in flight: in-flight calls get 5 s, then a watchdog ends
the process (exit code 3, ``parties.cli``).

Status codes: INVALID_ARGUMENT (malformed message or parameters), PERMISSION_DENIED (wrong caller or not
allowed by this party's policy), FAILED_PRECONDITION (unknown / closed / failed session, step out of order
or replayed, session busy, a completed run step asked with other inputs, a corrupt run record),
RESOURCE_EXHAUSTED (budget or session limit), ALREADY_EXISTS (session id in
use), DEADLINE_EXCEEDED / UNAVAILABLE (a peer did not answer in time or its link broke: the message names
the peer and the step; the session is then failed and must be closed).

This module is the entry (``parties.cli``): the services themselves are ``parties.service``, the rules
``parties.policy``, the session state machine ``parties.session`` / ``parties.peering`` / ``parties.steps``,
the state directory ``parties.storage``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from parties.config import PartyConfig
from parties.exchange import LinkLost
from parties.policy import reproducible
from parties.service import PartyService, cut
from parties.session import LIVE, teardown
from proto import health_pb2, health_pb2_grpc, party_pb2, peer_pb2
from proto.files import write_durable
from proto.spec import shown
from proto.tls import SERVER_OPTIONS, server_credentials

__all__ = ["EXIT_STOP_DEADLINE", "STOP_DEADLINE_S", "PartyDaemon", "reproducible"]

STOP_GRACE_S = 5.0  # SIGTERM / SIGINT: in-flight calls get this long, then they are cancelled
STOP_DEADLINE_S = 10.0  # ... and the process is gone this long after the signal, whatever is in flight
EXIT_STOP_DEADLINE = 3  # exit code when the watchdog had to end the process (parties.cli)


class PartyDaemon(PartyService):
    """The party's services (``parties.service``) on a gRPC server, from start to a signalled stop."""

    def __init__(self, cfg: PartyConfig, insecure: bool = False) -> None:
        super().__init__(cfg, insecure)
        self.server: grpc.aio.Server | None = None
        self.port = 0

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
            if sess.state in LIVE:
                await teardown(sess, "closed")
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
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, cut(msg))
            return await impl[name](req, context)

        return grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=None, response_serializer=resp_type.SerializeToString
        )

    return grpc.method_handlers_generic_handler("confar.v1.Party", {n: make(n) for n in _PARTY_METHODS})


def _strict_peer_handler(d: PartyDaemon) -> grpc.GenericRpcHandler:
    async def frames(raw_iter: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """The stream's frames, parsed (an undecodable one is counted and audited, and skipped); a broken
        stream is :class:`parties.exchange.LinkLost` naming its status (the domain knows no gRPC error)."""
        try:
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
        except grpc.aio.AioRpcError as exc:
            raise LinkLost(f"{exc.code().name}: {exc.details()}") from exc

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
