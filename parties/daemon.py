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

Status codes (the reasons of ``parties.refusal``, mapped once by ``parties.service.STATUS``):
INVALID_ARGUMENT (malformed message or parameters), PERMISSION_DENIED (wrong caller or not
allowed by this party's policy), FAILED_PRECONDITION (unknown / closed / failed session, step out of order
or replayed, session busy, a completed run step asked with other inputs, a corrupt run record),
RESOURCE_EXHAUSTED (budget or session limit), ALREADY_EXISTS (session id in
use), DEADLINE_EXCEEDED / UNAVAILABLE (a peer did not answer in time or its link broke: the message names
the peer and the step; the session is then failed and must be closed).

This module is the entry (``parties.cli``): :class:`PartyDaemon` has a ``parties.service.PartyService``
(the services and the party's state; the daemon owns only the server's life), the rules are
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
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from parties import lifecycle
from parties.admin import AdminServer
from parties.analyses import Dataset
from parties.audit import AuditLog
from parties.config import PartyConfig
from parties.policy import reproducible
from parties.replay import ReplayStore
from parties.service import PARTY_RPCS, PartyService
from parties.session import Party, Session
from parties.sources import Snapshot
from proto import health_pb2, health_pb2_grpc, peer_pb2, serde
from proto.files import write_durable
from proto.spec import shown
from proto.tls import SERVER_OPTIONS, server_credentials

__all__ = ["EXIT_STOP_DEADLINE", "STOP_DEADLINE_S", "PartyDaemon", "reproducible"]

STOP_GRACE_S = 5.0  # SIGTERM / SIGINT: in-flight calls get this long, then they are cancelled
STOP_DEADLINE_S = 10.0  # ... and the process is gone this long after the signal, whatever is in flight
EXIT_STOP_DEADLINE = 3  # exit code when the watchdog had to end the process (parties.cli)


class PartyDaemon:
    """One registry's daemon: its services (:class:`parties.service.PartyService`, which holds the party and
    its sessions and answers every RPC) on a gRPC server, from start to a signalled stop. The daemon has a
    service, it is not one: it owns the server, the health service and the stop watchdog, nothing else."""

    def __init__(self, cfg: PartyConfig, insecure: bool = False) -> None:
        self.cfg = cfg
        self.service = PartyService(cfg, insecure)
        self.server: grpc.aio.Server | None = None
        self.port = 0
        self.admin: AdminServer | None = None  # [admin] listen: the read-only report (parties.admin)

    # ---- the party it serves, as operators' scripts and the tests read it ------------------------------

    @property
    def party(self) -> Party:
        return self.service.party

    @property
    def sessions(self) -> dict[bytes, Session]:
        return self.service.sessions

    @property
    def snapshot(self) -> Snapshot | None:
        return self.party.snapshot

    @property
    def data(self) -> Dataset:
        return self.party.data

    @property
    def audit(self) -> AuditLog:
        return self.party.store.audit

    @property
    def replays(self) -> ReplayStore:
        return self.party.store.replays

    @property
    def decisions_used(self) -> int:
        return self.party.store.decisions_used

    @decisions_used.setter
    def decisions_used(self, value: int) -> None:
        self.party.store.decisions_used = value

    def _load_ledger(self) -> int:
        return self.party.store.load_ledger()

    def _save_ledger(self) -> None:
        self.party.store.save_ledger()

    def data_audit(self) -> dict[str, Any]:
        return lifecycle.data_audit(self.party)

    @property
    def refused_frames(self) -> int:
        return self.service.refused_frames

    async def on_frame(self, sess: Session, src: int, msg: peer_pb2.PeerFrame) -> None:
        await self.service.on_frame(sess, src, msg)

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> int:
        server = grpc.aio.server(options=SERVER_OPTIONS)
        health = _strict_health_handler(_HealthServicer(self.service))
        server.add_generic_rpc_handlers((_party_handlers(self.service), _peer_handler(self.service), health))
        tls = self.party.tls
        if tls is None:
            port = server.add_insecure_port(self.cfg.listen)
        else:
            port = server.add_secure_port(self.cfg.listen, server_credentials(tls))
        if port == 0:
            raise RuntimeError(f"cannot listen on {self.cfg.listen}")
        await server.start()
        self.server, self.port = server, port
        host = self.cfg.listen.rsplit(":", 1)[0]
        address = f"{host}:{port}"
        if self.cfg.address_file is not None:
            write_durable(self.cfg.address_file, (address + "\n").encode(), private=False)
        admin: dict[str, Any] = {}
        if self.cfg.admin_listen is not None:
            self.admin = AdminServer(self.cfg)
            admin_port = await self.admin.start()
            admin = {"admin": f"{self.cfg.admin_listen.rsplit(':', 1)[0]}:{admin_port}"}
        self.audit.record(
            who=self.cfg.identity,
            what="Start",
            detail=f"listening on {address}",
            **admin,
            insecure=self.service.insecure,
            fixed_rng=self.cfg.fixed_rng_key is not None,
        )
        return port

    @property
    def admin_address(self) -> str | None:
        """Where the read-only report is served ([admin] listen, its port once bound), or None."""
        if self.admin is None or self.cfg.admin_listen is None:
            return None
        return f"{self.cfg.admin_listen.rsplit(':', 1)[0]}:{self.admin.port}"

    async def stop(self, grace: float = 5.0) -> None:
        if self.admin is not None:
            await self.admin.stop()
        await self.service.shut_down()
        if self.server is not None:
            await self.server.stop(grace)
        self.party.store.close()  # the ledger journal folded into the ledger files
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


def _party_handlers(service: PartyService) -> grpc.GenericRpcHandler:
    """The Party service with each request handed over as raw bytes: :meth:`PartyService.serve` checks the
    caller before it parses them (undecodable bytes get INVALID_ARGUMENT, not grpc's UNKNOWN)."""

    def make(name: str, resp_type: Any) -> grpc.RpcMethodHandler:
        async def handler(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await service.serve(name, raw, context)

        return grpc.unary_unary_rpc_method_handler(
            handler, request_deserializer=None, response_serializer=resp_type.SerializeToString
        )

    methods = {name: make(name, resp_type) for name, (_, resp_type) in PARTY_RPCS.items()}
    return grpc.method_handlers_generic_handler("confar.v1.Party", methods)


def _peer_handler(service: PartyService) -> grpc.GenericRpcHandler:
    """The Peer service's stream with its frames handed over as raw bytes (:meth:`PartyService.exchange`
    parses them)."""

    async def handler(
        raw_iter: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async for frame in service.exchange(raw_iter, context):
            yield frame

    return grpc.method_handlers_generic_handler(
        "confar.v1.Peer",
        {
            "Exchange": grpc.stream_stream_rpc_method_handler(
                handler, request_deserializer=None, response_serializer=serde.wire_message
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
    def __init__(self, service: PartyService) -> None:
        self.service = service

    async def Check(self, request: Any, context: Any) -> Any:
        if request.service not in ("", "confar.v1.Party", "confar.v1.Peer"):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {shown(request.service)}")
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if self.service.serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)
