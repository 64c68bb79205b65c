"""Fuzzing live registry daemons over gRPC with mutual TLS (issue 12): ``python -m simulations.fuzz``.

A client built from the .proto files' descriptors (every method of ``confar.v1.Party``, ``confar.v1.Peer``
and ``grpc.health.v1.Health``, found in the generated modules' service descriptors, so a new RPC is fuzzed
without touching this file) sends mutations of valid requests to one party of a real consortium
(``LocalConsortium``: m daemon processes on loopback):

* **structure-aware**: one to three fields, chosen by walking the message descriptor (nested messages,
  repeated fields and maps included), set to boundary values of their type (0, -1, the type's extremes,
  NaN, infinities, empty / 100,000-character / NUL / deeply nested JSON strings, unknown enum numbers,
  empty or oversized bytes), or cleared, duplicated, or deleted;
* **byte-level**: the valid request's serialization with bits flipped, bytes inserted, deleted or
  duplicated, or cut short, sent as raw bytes;
* **valid**: the request unchanged (it may be accepted: that is fine).

Both roles: Party RPCs with the coordinator's certificate and with a party's (wrong role), Peer streams with
a party's certificate (a mutated HELLO, then mutated frames) and with the coordinator's (wrong role), and a
client whose certificate comes from another CA. Every call has a deadline (``deadline_s``); the daemon's
round timeout is well below it. The run stops after ``requests`` calls or ``time_limit_s`` seconds.

Checked: no call ends in INTERNAL or UNKNOWN (a refusal must name what was wrong), none hits the client
deadline (a hang), every daemon process is alive and its health check says SERVING afterwards, and a new
session afterwards computes the right sums. :func:`run_fuzz` returns the counts per RPC and status
(recorded in docs/ROBUSTNESS.md); the test suite runs a small size (tests/network/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

from coordinator.api import BlockingCoordinator, Coordinator, CoordinatorSession, SessionOptions
from coordinator.certs import COORDINATOR_IDENTITY, init_consortium, party_identity
from hss.fixedpoint import FixedPoint
from proto import health_pb2, party_pb2, peer_pb2, serde
from proto.records import Kind
from proto.spec import PartyEntry, SessionSpec
from proto.tls import TlsMaterial, secure_channel
from simulations.launcher import LocalConsortium

#: a refusal must be one of these (or OK); INTERNAL / UNKNOWN mean the daemon did not say what was wrong,
#: DEADLINE_EXCEEDED that it did not answer within the deadline
FORBIDDEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED}
SERVICES = [(party_pb2, "Party"), (peer_pb2, "Peer"), (health_pb2, "Health")]
BAIT_EVERY = 200  # requests between two fresh bait sessions (the target of peer streams and ConnectSession)
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # the end of a stream's responses (read API)

_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_RANGES = {
    FieldDescriptor.TYPE_INT32: _I32,
    FieldDescriptor.TYPE_SINT32: _I32,
    FieldDescriptor.TYPE_SFIXED32: _I32,
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT64: _I64,
    FieldDescriptor.TYPE_SINT64: _I64,
    FieldDescriptor.TYPE_SFIXED64: _I64,
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_FLOATS = (float("nan"), float("inf"), float("-inf"), 1e308, -1e308, -0.0, 5e-324, 0.0, 1e-300, 3.0e38)
_STRINGS = (
    "",
    "\x00",
    "::::",
    "x" * 100_000,
    "é" * 300,
    "[" * 5000 + "]" * 5000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "1" * 5000,
    "127.0.0.1:0",
    "[::1]:99999",
    "NaN",
    "sum",
    "sign",
    "gaussian-mean",
    "coordinator",
    "party-1",
    '{"sigma": 1e308}',
    '{"noise": "none", "lazy": {"gamma": 0.5}}',
)


def method_table() -> dict[str, tuple[MethodDescriptor, type[Message], type[Message]]]:
    """Every RPC of the daemon's services, from the .proto descriptors: path -> (method, request,
    response)."""
    out = {}
    for module, name in SERVICES:
        service = module.DESCRIPTOR.services_by_name[name]
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            out[path] = (
                method,
                message_factory.GetMessageClass(method.input_type),
                message_factory.GetMessageClass(method.output_type),
            )
    return out


class Mutator:
    """Structure-aware and byte-level mutations of protobuf messages (randomness: a seeded ``random``)."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd

    def boundary(self, fd: FieldDescriptor) -> Any:
        r = self.rnd
        t = fd.type
        if t in _RANGES:
            lo, hi = _RANGES[t]
            big = 2**53 + 1 if hi > 2**53 else 7
            return r.choice([lo, hi, 0, 1, -1 if lo < 0 else 2, hi - 1, r.randint(lo, hi), big])
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            v = r.choice(_FLOATS)
            return min(max(v, -3.0e38), 3.0e38) if t == FieldDescriptor.TYPE_FLOAT and v == v else v
        if t == FieldDescriptor.TYPE_BOOL:
            return r.random() < 0.5
        if t == FieldDescriptor.TYPE_STRING:
            return r.choice(_STRINGS)
        if t == FieldDescriptor.TYPE_BYTES:
            return r.randbytes(r.choice([0, 1, 15, 16, 17, 32, 64, 65, 1000, 100_000]))
        if t == FieldDescriptor.TYPE_ENUM:
            return r.choice([-1, 0, 1, 2, 3, 4, 9, 99, 2**31 - 1])
        raise TypeError(f"no boundary values for field type {t}")

    def mutate_fields(self, msg: Message, depth: int = 0) -> None:
        """Change one field of ``msg`` (or of a message inside it) in place."""
        r = self.rnd
        fields: list[Any] = list(msg.DESCRIPTOR.fields)
        if not fields:
            return
        fd: Any = r.choice(fields)
        value = getattr(msg, fd.name)
        is_map = fd.message_type is not None and fd.message_type.GetOptions().map_entry
        if is_map:
            op = r.randrange(3)
            if op == 0 or not value:
                key_fd = fd.message_type.fields_by_name["key"]
                known = r.choice(["theta", "theta_star", "public"])
                key = self.boundary(key_fd) if r.random() < 0.5 else known
                val_fd = fd.message_type.fields_by_name["value"]
                if val_fd.message_type is not None:
                    if depth < 4:
                        self.mutate_fields(value[key], depth + 1)
                    else:
                        value[key].Clear()
                else:
                    value[key] = self.boundary(val_fd)
            elif op == 1:
                del value[r.choice(list(value))]
            else:
                key = r.choice(list(value))
                if fd.message_type.fields_by_name["value"].message_type is not None and depth < 4:
                    self.mutate_fields(value[key], depth + 1)
        elif fd.is_repeated:
            op = r.randrange(4)
            if op == 0:
                del value[:]
            elif op == 1 and len(value):
                del value[r.randrange(len(value))]
            elif fd.message_type is not None:
                if op == 2 and len(value):
                    for _ in range(r.choice([1, 2, 50])):
                        value.add().CopyFrom(r.choice(list(value)))
                elif depth < 4:
                    fresh = not len(value) or r.random() < 0.3
                    self.mutate_fields(value.add() if fresh else r.choice(list(value)), depth + 1)
            else:
                for _ in range(r.choice([1, 2, 1000])):
                    value.append(self.boundary(fd))
        elif fd.message_type is not None:
            if r.random() < 0.2 or depth >= 4:
                msg.ClearField(fd.name)
            else:
                self.mutate_fields(value, depth + 1)
        else:
            setattr(msg, fd.name, self.boundary(fd))

    def mutate_bytes(self, data: bytes) -> bytes:
        r = self.rnd
        b = bytearray(data)
        for _ in range(r.choice([1, 1, 2, 4, 16])):
            op = r.randrange(5)
            if op == 0 and b:
                i = r.randrange(len(b))
                b[i] ^= 1 << r.randrange(8)
            elif op == 1:
                i = r.randrange(len(b) + 1)
                b[i:i] = r.randbytes(r.choice([1, 2, 8, 300]))
            elif op == 2 and b:
                i = r.randrange(len(b))
                del b[i : i + r.choice([1, 2, 8, 64])]
            elif op == 3 and b:
                i, j = sorted(r.randrange(len(b) + 1) for _ in range(2))
                b[j:j] = b[i:j] * r.choice([1, 2, 10])
            elif b:
                del b[r.randrange(len(b)) :]
        return bytes(b)

    def variant(self, seed: Message) -> tuple[str, bytes]:
        """(kind, wire bytes) of a mutation of ``seed``: 'valid', 'fields' or 'bytes'."""
        r = self.rnd.random()
        if r < 0.1:
            return "valid", seed.SerializeToString()
        msg = type(seed)()
        msg.CopyFrom(seed)
        if r < 0.7:
            for _ in range(self.rnd.choice([1, 1, 2, 3])):
                try:
                    self.mutate_fields(msg)
                except (ValueError, TypeError, OverflowError):  # a value the Python runtime refuses to set
                    pass
            return "fields", msg.SerializeToString()
        return "bytes", self.mutate_bytes(msg.SerializeToString())


@dataclass
class FuzzReport:
    """Counts per (target, mutation kind, status) and the failures (forbidden statuses, dead daemons)."""

    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0

    def record(self, target: str, kind: str, code: grpc.StatusCode, details: str) -> None:
        self.requests += 1
        self.counts[(target, kind, code.name)] += 1
        if code in FORBIDDEN and len(self.failures) < 50:
            self.failures.append(f"{target} ({kind}): {code.name}: {details[:300]}")

    def by_status(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (_, _, status), n in self.counts.items():
            out[status] += n
        return dict(sorted(out.items()))

    def by_target(self) -> dict[str, dict[str, int]]:
        out: dict[str, Counter[str]] = {}
        for (target, _, status), n in self.counts.items():
            out.setdefault(target, Counter())[status] += n
        return {t: dict(sorted(c.items())) for t, c in sorted(out.items())}

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 1),
            "by_status": self.by_status(),
            "by_target": self.by_target(),
            "failures": self.failures,
        }


def _tls(certs: Path, identity: str) -> TlsMaterial:
    return TlsMaterial.load(certs / f"{identity}.pem", certs / f"{identity}.key", certs / "ca.pem", identity)


def _spec(endpoints: list[PartyEntry], session_id: bytes, security: str = "semi-honest") -> SessionSpec:
    return SessionSpec(
        session_id=session_id,
        parties=tuple(endpoints),
        t=1,
        reveal_mode="sum",
        model="gaussian-mean",
        model_params={"noise": "none"},
        fmt=FixedPoint(),
        coordinator_identity=COORDINATOR_IDENTITY,
        security=security,
    )


def _inputs(n: int) -> dict[str, Any]:
    return {"theta": np.linspace(0.0, 1.0, n), "theta_star": np.linspace(0.5, 1.5, n), "public": np.zeros(n)}


class _Fuzzer:
    """One fuzz run against the target party: its channels, its bait and live sessions, the calls it sends.

    A bait session is opened at every party (never connected): its bundles seed ConnectSession, its id the
    peer streams; fuzzed OpenSession / ConnectSession / CloseSession may open, fail or close sessions (a new
    one every BAIT_EVERY requests: a fuzzed ConnectSession or CloseSession may end it).
    """

    def __init__(
        self, lc: LocalConsortium, target_id: int, deadline_s: float, seed: int, outsider: TlsMaterial
    ) -> None:
        assert lc.certs is not None
        self.rnd = random.Random(seed)
        self.mut = Mutator(self.rnd)
        self.report = FuzzReport()
        self.eps = lc.endpoints()
        self.target_id, self.deadline_s = target_id, deadline_s
        target = self.eps[target_id - 1]
        self.table = method_table()
        self.coord_tls, party_tls = _tls(lc.certs, COORDINATOR_IDENTITY), _tls(lc.certs, party_identity(1))
        self.channels = {
            "coordinator": secure_channel(target.address, self.coord_tls, target.identity),
            "party": secure_channel(target.address, party_tls, target.identity),
            "outsider": secure_channel(target.address, outsider, target.identity),
        }
        self.party_paths = [p for p in self.table if p.startswith("/confar.v1.Party/")]
        self.party_paths.append("/grpc.health.v1.Health/Check")
        self.bait_id = b""
        self.bait_bundles: list[party_pb2.KeyBundle] = []
        self.opened: list[bytes] = []  # sessions a fuzzed OpenSession opened (closed again as the fuzz goes)
        self.live_step = 1
        self.security = "semi-honest"  # the live session's (run_fuzz's ``security``)
        self.seeds: dict[str, Callable[[], Message]] = {}

    async def start(self, coordinator: Coordinator) -> CoordinatorSession:
        """A live session (sum mode: no peer rounds, so the target answers a valid Evaluate on
        its own) and a valid request of every RPC to mutate; the bait session is open already."""
        live = await coordinator.open_session(SessionOptions(
            reveal_mode="sum",
            model="gaussian-mean",
            model_params={"noise": "none"},
            t=1,
            security=self.security,
        ))
        eps, rnd = self.eps, self.rnd
        plan_spec = serde.spec_to_proto(_spec(eps, os.urandom(16)))
        plan = party_pb2.PlanPrivacyRequest(spec=plan_spec, batches=10, batch_size=8)
        self.seeds = {
            "/confar.v1.Party/OpenSession": lambda: serde.open_request_to_proto(
                _spec(eps, os.urandom(16), rnd.choice(("semi-honest", "abort")))
            ),
            "/confar.v1.Party/ConnectSession": lambda: party_pb2.ConnectSessionRequest(
                session_id=self.bait_id, bundles=self.bait_bundles
            ),
            "/confar.v1.Party/Evaluate": lambda: party_pb2.EvaluateRequest(
                session_id=live.session_id if rnd.random() < 0.7 else self.bait_id,
                step=self.live_step,
                batch=4,
                inputs=serde.inputs_to_proto(_inputs(4)),
            ),
            "/confar.v1.Party/CloseSession": lambda: party_pb2.CloseSessionRequest(session_id=os.urandom(16)),
            "/confar.v1.Party/ProbeLinks": lambda: party_pb2.ProbeLinksRequest(
                session_id=self.bait_id, step=1, rounds=2, words=4
            ),
            "/confar.v1.Party/Status": party_pb2.StatusRequest,
            "/confar.v1.Party/PlanPrivacy": lambda: plan,
            "/confar.v1.Party/PrivacyReport": party_pb2.PrivacyReportRequest,
            "/grpc.health.v1.Health/Check": lambda: health_pb2.HealthCheckRequest(service=""),
        }
        missing = set(self.table) - set(self.seeds) - {"/confar.v1.Peer/Exchange"}
        if missing:
            raise RuntimeError(f"no seed request for {sorted(missing)}: add one to simulations.fuzz")
        return live

    async def close_everywhere(self, sid: bytes) -> None:
        for ep in self.eps:
            ch = secure_channel(ep.address, self.coord_tls, ep.identity)
            await _close_session(ch, sid, self.deadline_s)
            await ch.close(None)

    async def new_bait(self) -> None:
        for sid in [self.bait_id, *self.opened] if self.bait_id else []:  # free the target's session slots
            await self.close_everywhere(sid)
        self.opened.clear()
        self.bait_id = os.urandom(16)
        open_req = serde.open_request_to_proto(_spec(self.eps, self.bait_id, self.security))
        bundles = []
        for ep in self.eps:
            ch = secure_channel(ep.address, self.coord_tls, ep.identity)
            call = ch.unary_unary(
                "/confar.v1.Party/OpenSession",
                request_serializer=party_pb2.OpenSessionRequest.SerializeToString,
                response_deserializer=party_pb2.OpenSessionResponse.FromString,
            )
            bundles.append((await call(open_req, timeout=self.deadline_s)).bundle)
            await ch.close(None)
        self.bait_bundles = bundles

    async def close_opened(self) -> None:
        while len(self.opened) > 2:  # sessions the fuzz opened: close them so the party's session limit frees
            await _close_session(self.channels["coordinator"], self.opened.pop(), self.deadline_s)

    async def unary(self, path: str, role: str) -> None:
        kind, blob = self.mut.variant(self.seeds[path]())
        call = self.channels[role].unary_unary(path, request_serializer=None, response_deserializer=None)
        try:
            await call(blob, timeout=self.deadline_s)
            code, details = grpc.StatusCode.OK, ""
            if path.endswith("/OpenSession"):
                self.opened.append(party_pb2.OpenSessionRequest.FromString(blob).spec.session_id)
            if path.endswith("/Evaluate"):
                self.live_step += 1  # the target's step counter of the live session moved on
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
        self.report.record(f"{path.rsplit('/', 1)[1]} as {role}", kind, code, details)

    async def stream(self, role: str) -> None:
        rnd, mut = self.rnd, self.mut
        sid = self.bait_id if rnd.random() < 0.8 else os.urandom(rnd.choice([0, 16, 64]))
        hello = serde.frame_header_to_proto(sid, 0, 0, 1, self.target_id, Kind.HELLO)
        frames = [mut.variant(hello)]
        payload = np.arange(4, dtype=np.uint64).tobytes()
        for _ in range(rnd.choice([0, 1, 3, 10])):
            data = serde.frame_header_to_proto(
                sid, 0, rnd.randrange(0, 4), 1, self.target_id, int(Kind.DATA), payload
            )
            frames.append(mut.variant(data))
        kind = "+".join(sorted({k for k, _ in frames}))
        call = self.channels[role].stream_stream(
            "/confar.v1.Peer/Exchange", request_serializer=None, response_deserializer=None
        )(None, timeout=self.deadline_s)
        # No write may race the daemon's refusal: a write in flight when the stream ends gives the client its
        # own INTERNAL ("Internal error from Core") instead of the daemon's status. A non-member is refused
        # before any frame is read, so its stream sends none; a member sends its HELLO and waits for the
        # answer (the daemon's HELLO, or its refusal) before the further frames.
        try:
            if role == "party":
                await call.write(frames[0][1])
                if await call.read() is not _EOF:
                    for _, b in frames[1:]:
                        await call.write(b)
                    await call.done_writing()
                    while await call.read() is not _EOF:
                        pass
            else:
                kind = "none"
                await call.read()
        except grpc.aio.AioRpcError:
            pass
        code, details = await call.code(), await call.details() or ""
        self.report.record(f"Exchange as {role}", kind, code, details)

    async def one(self) -> None:
        x = self.rnd.random()
        if x < 0.70:
            await self.unary(self.rnd.choice(self.party_paths), "coordinator")
        elif x < 0.78:
            await self.unary(self.rnd.choice(self.party_paths), "party")
        elif x < 0.80:
            await self.unary(self.rnd.choice(self.party_paths), "outsider")
        elif x < 0.97:
            await self.stream("party")
        else:
            await self.stream("coordinator")

    async def close(self) -> None:
        for sid in [*self.opened, self.bait_id]:
            await self.close_everywhere(sid)
        for ch in self.channels.values():
            await ch.close(None)


async def _close_session(ch: grpc.aio.Channel, sid: bytes, deadline_s: float) -> None:
    call = ch.unary_unary(
        "/confar.v1.Party/CloseSession",
        request_serializer=party_pb2.CloseSessionRequest.SerializeToString,
        response_deserializer=party_pb2.CloseSessionResponse.FromString,
    )
    try:
        await call(party_pb2.CloseSessionRequest(session_id=sid), timeout=deadline_s)
    except grpc.aio.AioRpcError:
        pass  # unknown or already closed there


async def _fuzz(
    lc: LocalConsortium,
    target_id: int,
    requests: int,
    time_limit_s: float,
    deadline_s: float,
    seed: int,
    concurrency: int,
    outsider: TlsMaterial,
    security: str = "semi-honest",
) -> FuzzReport:
    fz = _Fuzzer(lc, target_id, deadline_s, seed, outsider)
    fz.security = security
    report = fz.report
    await fz.new_bait()
    coordinator = Coordinator(fz.eps, fz.coord_tls, rpc_timeout_s=deadline_s)
    await coordinator.__aenter__()
    live = await fz.start(coordinator)
    t0 = time.monotonic()
    next_bait = BAIT_EVERY
    while report.requests < requests and time.monotonic() - t0 < time_limit_s:
        await asyncio.gather(*(fz.one() for _ in range(min(concurrency, requests - report.requests))))
        if report.requests >= next_bait:
            await fz.new_bait()
            next_bait += BAIT_EVERY
        await fz.close_opened()
    report.seconds = time.monotonic() - t0
    await live.abort("fuzz done")
    await coordinator.__aexit__(None, None, None)
    await fz.close()
    return report


def check_after(
    lc: LocalConsortium, data: list[np.ndarray], report: FuzzReport, security: str = "semi-honest"
) -> None:
    """Every daemon alive and SERVING, and a new session computes the exact sums (noise none)."""
    for pid, pp in lc.procs.items():
        if pp.proc.poll() is not None:
            report.failures.append(f"party {pid} died (exit code {pp.proc.returncode}):\n{lc.log_tail(pid)}")
    if report.failures:
        return
    with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=30.0) as coord:
        sess = coord.open_session(SessionOptions(
            reveal_mode="sum", model="gaussian-mean", model_params={"noise": "none"}, security=security
        ))
        inp = _inputs(8)
        got = sess.evaluate(inp, 8)
        sess.close()
    th, ts = inp["theta"], inp["theta_star"]
    exact = sum((ts - th) * x.sum() - 0.5 * x.size * (ts**2 - th**2) for x in data)  # sigma = 1
    if got.revealed is None or not np.allclose(got.revealed, exact, atol=1e-3):
        report.failures.append(f"the session after the fuzz is wrong: {got.revealed} != {exact}")


def run_fuzz(
    workdir: Path,
    *,
    m: int = 3,
    requests: int = 1000,
    time_limit_s: float = 120.0,
    deadline_s: float = 20.0,
    seed: int = 1,
    concurrency: int = 8,
    target: int = 3,
    security: str = "semi-honest",
) -> FuzzReport:
    """Start m daemons under ``workdir``, fuzz party ``target``, check them afterwards; return the report.
    ``security``: the live session's and the check's (the fuzzed OpenSession requests carry either)."""
    rng = np.random.default_rng(seed)
    data = [rng.normal(1.0, 1.0, 20) for _ in range(m)]
    outsider_dir = workdir / "other-ca"
    init_consortium(outsider_dir, 1)
    outsider = _tls(outsider_dir, COORDINATOR_IDENTITY)
    with LocalConsortium.start(m, data, workdir=workdir / "consortium", round_timeout_s=3.0) as lc:
        report = asyncio.run(
            _fuzz(lc, target, requests, time_limit_s, deadline_s, seed, concurrency, outsider, security)
        )
        check_after(lc, data, report, security)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulations.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=20_000, help="stop after this many calls (default 20000)")
    p.add_argument("--time-limit", type=float, default=900.0, help="... or after this many seconds (900)")
    p.add_argument("--deadline", type=float, default=20.0, help="per-call deadline in seconds (20)")
    p.add_argument("--seed", type=int, default=1, help="seed of the mutations (public; default 1)")
    p.add_argument("--concurrency", type=int, default=8, help="calls in flight (default 8)")
    p.add_argument("--workdir", type=Path, default=None, help="keep the daemons' logs here (default: temp)")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="confar-fuzz-") as tmp:
        work = args.workdir or Path(tmp)
        report = run_fuzz(
            work,
            requests=args.requests,
            time_limit_s=args.time_limit,
            deadline_s=args.deadline,
            seed=args.seed,
            concurrency=args.concurrency,
        )
    doc = report.to_dict()
    text = json.dumps(doc, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
