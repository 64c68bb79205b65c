"""Transport floor for ``confar bench network``: bare gRPC with the consortium's mTLS, no protocol at all.

:class:`FloorCluster` starts m tiny worker processes (``python -m simulations.bench_floor``), each holding
party i's certificate, on 127.0.0.1 ephemeral ports, and measures from the calling (coordinator) process:

* **fan-out**: one unary call carrying ``request_bytes`` to each of the m workers in parallel, each
  answering ``reply_bytes``; the latency of one fan-out is until the last reply is in. Channels stay open,
  as the coordinator's do.
* **exchange round**: the workers run R lock-step all-to-all rounds of ``size``-byte payloads (each sends
  one payload to every other worker, then waits for one from each) over persistent bidirectional streams:
  ``mesh`` (one stream per pair, dialled by the lower id, as ``parties.links.MeshDialLink``) or ``relay``
  (one stream per worker to a hub in the calling process that forwards by destination, as
  ``coordinator.relay.RelayHub``; no end-to-end sealing), or ``relay-packed``, a diagnostic of what a relay
  protocol with one bundle per party per round each way (2m messages a round instead of 2m(m-1)) would
  cost: the hub waits for all m bundles and sends each worker its pieces in one message; or ``mesh-tls``,
  a diagnostic of a peer transport without gRPC: the same mesh over plain asyncio TLS streams (mutual TLS
  with the same certificates, TLS 1.3, each frame prefixed by its 4-byte length). Each worker
  stamps the completion of every round
  with ``time.monotonic()`` (one clock for all processes on Linux); the duration of round r is
  ``max_i done_i[r] - max_i done_i[r-1]``.

The service is raw bytes through grpc generic handlers (no protobuf), so it costs what gRPC costs and
nothing else. It is a benchmark fixture, not part of the product's wire format; workers accept only
clients with a certificate from the consortium CA (mTLS), but do not check identities beyond that.

Frame of the exchange: ``struct <IIBB`` = (epoch, round, src, dst) + payload; HELLO = (0, 0, src, dst).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from coordinator.certs import COORDINATOR_IDENTITY, party_identity
from coordinator.relay import drain
from proto.tls import SERVER_OPTIONS, TlsMaterial, secure_channel, server_credentials

_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # end-of-stream sentinel, missing from the stubs

SERVICE = "confar.bench.v1.Floor"
HUB_SERVICE = "confar.bench.v1.FloorHub"
HEADER = struct.Struct("<IIBB")
PACKED = 255  # dst of a worker's per-round bundle to the hub (relay-packed); src 0 marks the hub's bundles
LENGTH = struct.Struct("<I")  # mesh-tls: each frame is prefixed by its length
CALL_TIMEOUT_S = 60.0


def _hello(src: int, dst: int) -> bytes:
    return HEADER.pack(0, 0, src, dst)


# ---- worker process ------------------------------------------------------------------------------------


class FloorWorker:
    """One worker: Echo (fan-out target), Link (accepting side of mesh streams), Setup, Rounds."""

    def __init__(self, me: int, tls: TlsMaterial, certs: Path | None = None) -> None:
        self.me, self.tls, self.certs = me, tls, certs
        self.streams: list[asyncio.StreamWriter] = []
        self.peers: list[int] = []
        self.senders: dict[int, Any] = {}  # dst -> async fn(bytes)
        self.accept_queues: dict[int, asyncio.Queue[bytes | None]] = {}
        self.accept_waiters: dict[int, asyncio.Future[None]] = {}
        self.channels: list[grpc.aio.Channel] = []
        self.calls: list[Any] = []
        self.readers: list[asyncio.Task[None]] = []
        self.counts: dict[tuple[int, int], int] = {}
        self.waiting: tuple[tuple[int, int], asyncio.Future[None]] | None = None
        self.epoch = 0
        self.packed = False  # relay-packed: one bundle to the hub per round, one bundle back

    # -- frames --

    def on_frame(self, raw: bytes) -> None:
        epoch, rnd, src, _dst = HEADER.unpack_from(raw)
        key = (epoch, rnd)
        self.counts[key] = self.counts.get(key, 0) + (len(self.peers) if src == 0 else 1)
        w = self.waiting
        if w is not None and w[0] == key and self.counts[key] >= len(self.peers) and not w[1].done():
            w[1].set_result(None)

    async def wait_round(self, epoch: int, rnd: int) -> None:
        key = (epoch, rnd)
        if self.counts.get(key, 0) >= len(self.peers):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting = (key, fut)
        try:
            await asyncio.wait_for(fut, CALL_TIMEOUT_S)
        finally:
            self.waiting = None

    # -- RPC handlers (raw bytes) --

    async def echo(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        (reply,) = struct.unpack_from("<I", raw)
        return bytes(reply)

    async def link(self, it: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        first = await it.__anext__()
        _, _, src, _ = HEADER.unpack_from(first)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.accept_queues[src] = queue

        async def send(b: bytes) -> None:
            queue.put_nowait(b)

        self.senders[src] = send
        fut = self.accept_waiters.setdefault(src, asyncio.get_running_loop().create_future())
        if not fut.done():
            fut.set_result(None)

        async def read() -> None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
                async for raw in it:
                    self.on_frame(raw)
            queue.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            yield _hello(self.me, src)
            async for item in drain(queue):
                yield item
        finally:
            reader.cancel()

    # -- mesh-tls: plain asyncio TLS streams --

    def ssl_context(self, server: bool) -> ssl.SSLContext:
        assert self.certs is not None
        ident = party_identity(self.me)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(self.certs / f"{ident}.pem", self.certs / f"{ident}.key")
        ctx.load_verify_locations(self.certs / "ca.pem")
        ctx.verify_mode = ssl.CERT_REQUIRED  # mutual TLS; the client also checks the server's name
        return ctx

    def tls_stream(self, peer: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.streams.append(writer)

        async def send(b: bytes) -> None:
            writer.write(LENGTH.pack(len(b)) + b)

        self.senders[peer] = send

        async def read() -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                while True:
                    (n,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
                    self.on_frame(await reader.readexactly(n))

        self.readers.append(asyncio.create_task(read()))

    async def tls_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (n,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
        _, _, src, _ = HEADER.unpack_from(await reader.readexactly(n))
        self.tls_stream(src, reader, writer)
        fut = self.accept_waiters.setdefault(src, asyncio.get_running_loop().create_future())
        if not fut.done():
            fut.set_result(None)

    async def teardown(self) -> None:
        for w in self.streams:
            w.close()
        self.streams = []
        for call in self.calls:
            with contextlib.suppress(Exception):
                await call.done_writing()
        for q in self.accept_queues.values():
            q.put_nowait(None)
        for t in self.readers:
            t.cancel()
        for ch in self.channels:
            await ch.close(grace=None)
        self.calls, self.readers, self.channels = [], [], []
        self.senders, self.accept_queues, self.accept_waiters = {}, {}, {}
        self.counts.clear()

    async def reset(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """Close every link (the driver resets all workers before any of them sets up new links)."""
        await self.teardown()
        return b"ok"

    async def setup(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """JSON {topology, peers: {id: address}, hub: address}: open the links; answer when all are up."""
        cfg = json.loads(raw)
        peers = {int(k): v for k, v in cfg["peers"].items() if int(k) != self.me}
        self.peers = sorted(peers)
        loop = asyncio.get_running_loop()

        async def dial(address: str, identity: str, method: str, dst: int) -> Any:
            ch = secure_channel(address, self.tls, identity)
            self.channels.append(ch)
            call = ch.stream_stream(method, None, None)(None)  # type: ignore[arg-type]  # write() API
            self.calls.append(call)
            await call.write(_hello(self.me, dst))
            resp = await call.read()
            if resp is _EOF:
                raise RuntimeError(f"worker {self.me}: {address} closed the stream")

            async def read() -> None:
                with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
                    while True:
                        msg = await call.read()
                        if msg is _EOF:
                            break
                        self.on_frame(bytes(msg))  # type: ignore[call-overload]

            self.readers.append(asyncio.create_task(read()))
            return call

        self.packed = cfg["topology"] == "relay-packed"
        if cfg["topology"] == "mesh-tls":
            tls_peers = {int(k): v for k, v in cfg["tls_peers"].items() if int(k) != self.me}
            for q in self.peers:
                if q < self.me:
                    self.accept_waiters.setdefault(q, loop.create_future())
            for q in self.peers:
                if q > self.me:
                    host, port = tls_peers[q].rsplit(":", 1)
                    reader, writer = await asyncio.open_connection(
                        host, int(port), ssl=self.ssl_context(False), server_hostname=party_identity(q)
                    )
                    hello = _hello(self.me, q)
                    writer.write(LENGTH.pack(len(hello)) + hello)
                    self.tls_stream(q, reader, writer)
            for fut in list(self.accept_waiters.values()):
                await asyncio.wait_for(fut, CALL_TIMEOUT_S)
        elif cfg["topology"] in ("relay", "relay-packed"):
            call = await dial(cfg["hub"], COORDINATOR_IDENTITY, f"/{HUB_SERVICE}/Connect", 0)
            lock = asyncio.Lock()

            async def send_hub(b: bytes) -> None:
                async with lock:
                    await call.write(b)

            for q in self.peers:
                self.senders[q] = send_hub
        else:
            for q in self.peers:
                if q < self.me:
                    self.accept_waiters.setdefault(q, loop.create_future())
            dials = []
            for q in self.peers:
                if q > self.me:
                    dials.append(dial(peers[q], party_identity(q), f"/{SERVICE}/Link", q))
            calls = await asyncio.gather(*dials)
            for q, call in zip([q for q in self.peers if q > self.me], calls, strict=True):
                self.senders[q] = call.write
            for fut in list(self.accept_waiters.values()):
                await asyncio.wait_for(fut, CALL_TIMEOUT_S)
        return b"ok"

    async def rounds(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        """JSON {rounds, size}: R lock-step all-to-all rounds; returns {done: [monotonic time per round]}."""
        cfg = json.loads(raw)
        self.epoch += 1
        epoch, size = self.epoch, int(cfg["size"])
        payload = bytes(size)
        done: list[float] = []
        bundle = payload * len(self.peers)
        for rnd in range(1, int(cfg["rounds"]) + 1):
            if self.packed:
                await self.senders[self.peers[0]](HEADER.pack(epoch, rnd, self.me, PACKED) + bundle)
            else:
                for q in self.peers:
                    await self.senders[q](HEADER.pack(epoch, rnd, self.me, q) + payload)
            await self.wait_round(epoch, rnd)
            self.counts.pop((epoch, rnd), None)
            done.append(time.monotonic())
        return json.dumps({"done": done}).encode()


def _unary(fn: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=None)


async def _worker_main(me: int, certs: Path, address_file: Path) -> None:
    ident = party_identity(me)
    tls = TlsMaterial.load(certs / f"{ident}.pem", certs / f"{ident}.key", certs / "ca.pem", ident)
    w = FloorWorker(me, tls, certs)
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE,
                {
                    "Echo": _unary(w.echo),
                    "Reset": _unary(w.reset),
                    "Setup": _unary(w.setup),
                    "Rounds": _unary(w.rounds),
                    "Link": grpc.stream_stream_rpc_method_handler(
                        w.link, request_deserializer=None, response_serializer=None
                    ),
                },
            ),
        )
    )
    port = server.add_secure_port("127.0.0.1:0", server_credentials(tls))
    await server.start()
    tls_server = await asyncio.start_server(w.tls_accept, "127.0.0.1", 0, ssl=w.ssl_context(True))
    tls_port = tls_server.sockets[0].getsockname()[1]
    tmp = Path(str(address_file) + ".tmp")
    tmp.write_text(f"127.0.0.1:{port}\n127.0.0.1:{tls_port}\n")
    os.replace(tmp, address_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await w.teardown()
    tls_server.close()
    await server.stop(0.5)


# ---- hub (in the calling process, like the coordinator's relay) ------------------------------------------


class FloorHub:
    """Forwards frames by destination; in ``packed`` mode it waits for every worker's bundle of a round
    and sends each worker one bundle of the pieces addressed to it (2m messages per round, not 2m(m-1))."""

    def __init__(self) -> None:
        self.m = 0
        self.packed = False
        self.queues: dict[int, asyncio.Queue[bytes | None]] = {}
        self.joined = asyncio.Event()
        self.bundles: dict[tuple[int, int], dict[int, bytes]] = {}

    def reset(self, m: int, packed: bool = False) -> None:
        for q in self.queues.values():
            q.put_nowait(None)
        self.m, self.packed, self.queues, self.joined = m, packed, {}, asyncio.Event()
        self.bundles = {}

    def on_bundle(self, raw: bytes) -> None:
        epoch, rnd, src, _ = HEADER.unpack_from(raw)
        got = self.bundles.setdefault((epoch, rnd), {})
        got[src] = raw
        if len(got) < self.m:
            return
        del self.bundles[(epoch, rnd)]
        piece = (len(raw) - HEADER.size) // (self.m - 1)
        for dst, q in self.queues.items():
            parts = [HEADER.pack(epoch, rnd, 0, dst)]
            for s, b in sorted(got.items()):
                if s != dst:
                    k = dst - 1 if dst < s else dst - 2  # dst's index among s's peers
                    parts.append(b[HEADER.size + k * piece : HEADER.size + (k + 1) * piece])
            q.put_nowait(b"".join(parts))

    async def connect(
        self, it: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        first = await it.__anext__()
        _, _, me, _ = HEADER.unpack_from(first)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.queues[me] = queue
        joined = self.joined
        if len(self.queues) == self.m:
            joined.set()
        await asyncio.wait_for(joined.wait(), CALL_TIMEOUT_S)
        queues = self.queues

        async def read() -> None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
                async for raw in it:
                    dst = raw[HEADER.size - 1]
                    if dst == PACKED:
                        self.on_bundle(raw)
                        continue
                    q = queues.get(dst)
                    if q is not None:
                        q.put_nowait(raw)
            queue.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            yield _hello(0, me)
            async for item in drain(queue):
                yield item
        finally:
            reader.cancel()


# ---- driver ----------------------------------------------------------------------------------------------


@dataclass
class FloorStats:
    median_ms: float
    p90_ms: float
    samples: int


def stats_ms(seconds: list[float]) -> FloorStats:
    ms = sorted(s * 1e3 for s in seconds)
    if not ms:
        return FloorStats(float("nan"), float("nan"), 0)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return FloorStats(round(statistics.median(ms), 3), round(p90, 3), len(ms))


@dataclass
class FloorCluster:
    m: int
    certs: Path
    workdir: Path
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    addresses: dict[int, str] = field(default_factory=dict)
    tls_addresses: dict[int, str] = field(default_factory=dict)  # mesh-tls: each worker's TLS stream server
    channels: dict[int, grpc.aio.Channel] = field(default_factory=dict)
    hub: FloorHub = field(default_factory=FloorHub)
    hub_server: grpc.aio.Server | None = None
    hub_address: str = ""
    topology: str = ""

    @classmethod
    @contextlib.contextmanager
    def processes(cls, m: int, certs: Path, startup_timeout_s: float = 30.0) -> Iterator[FloorCluster]:
        """Start m worker processes (stopped by PID on exit); call :meth:`connect` in the event loop next."""
        with tempfile.TemporaryDirectory(prefix="confar-floor-") as tmp:
            fc = cls(m, certs, Path(tmp))
            try:
                root = str(Path(__file__).resolve().parent.parent)
                for i in range(1, m + 1):
                    log = open(fc.workdir / f"worker-{i}.log", "ab")  # closed below, kept by the child
                    cmd = [sys.executable, "-m", "simulations.bench_floor", "--id", str(i)]
                    cmd += ["--certs", str(certs), "--address-file", str(fc.workdir / f"address-{i}")]
                    fc.procs[i] = subprocess.Popen(
                        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root
                    )
                    log.close()
                fc._wait_ready(startup_timeout_s)
                yield fc
            finally:
                fc._stop()

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for i, p in self.procs.items():
            f = self.workdir / f"address-{i}"
            while not f.exists():
                if p.poll() is not None or time.monotonic() > deadline:
                    log = (self.workdir / f"worker-{i}.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"floor worker {i} did not start:\n{log}")
                time.sleep(0.02)
            grpc_address, tls_address = f.read_text().split()
            self.addresses[i], self.tls_addresses[i] = grpc_address, tls_address

    def _stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                p.wait(5)

    async def connect(self) -> None:
        """Open the coordinator's channels (kept for the cluster's life) and the relay hub server."""
        c = self.certs
        self.tls = TlsMaterial.load(
            c / "coordinator.pem", c / "coordinator.key", c / "ca.pem", COORDINATOR_IDENTITY
        )
        for i, addr in self.addresses.items():
            self.channels[i] = secure_channel(addr, self.tls, party_identity(i))
        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    HUB_SERVICE,
                    {
                        "Connect": grpc.stream_stream_rpc_method_handler(
                            self.hub.connect, request_deserializer=None, response_serializer=None
                        )
                    },
                ),
            )
        )
        port = server.add_secure_port("127.0.0.1:0", server_credentials(self.tls))
        await server.start()
        self.hub_server, self.hub_address = server, f"127.0.0.1:{port}"

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close(grace=None)
        self.channels.clear()
        if self.hub_server is not None:
            self.hub.reset(0)
            await self.hub_server.stop(0.2)
            self.hub_server = None

    async def _call_all(self, method: str, make: Any) -> dict[int, bytes]:
        async def one(i: int) -> bytes:
            fn = self.channels[i].unary_unary(f"/{SERVICE}/{method}", None, None)
            out: bytes = await fn(make(i), timeout=CALL_TIMEOUT_S)
            return out

        res = await asyncio.gather(*(one(i) for i in self.channels))
        return dict(zip(self.channels, res, strict=True))

    async def fanout(self, request_bytes: int, reply_bytes: int, repeats: int, warmup: int = 3) -> FloorStats:
        """Latency of one parallel unary call to every worker (request and reply of the given sizes)."""
        req = struct.pack("<I", reply_bytes) + bytes(max(0, request_bytes - 4))
        calls = [self.channels[i].unary_unary(f"/{SERVICE}/Echo", None, None) for i in sorted(self.channels)]
        times = []
        for k in range(warmup + repeats):
            t0 = time.perf_counter()
            await asyncio.gather(*(c(req, timeout=CALL_TIMEOUT_S) for c in calls))
            if k >= warmup:
                times.append(time.perf_counter() - t0)
        return stats_ms(times)

    async def use_topology(self, topology: str) -> None:
        if topology == self.topology:
            return
        if topology in ("relay", "relay-packed"):
            self.hub.reset(self.m, packed=topology == "relay-packed")
        cfg = json.dumps(
            {
                "topology": topology,
                "peers": self.addresses,
                "tls_peers": self.tls_addresses,
                "hub": self.hub_address,
            }
        ).encode()
        await self._call_all("Reset", lambda _: b"")
        await self._call_all("Setup", lambda _: cfg)
        self.topology = topology

    async def exchange(self, topology: str, size: int, repeats: int, warmup: int = 3) -> FloorStats:
        """Duration of one lock-step all-to-all round of ``size``-byte payloads among the m workers."""
        await self.use_topology(topology)
        req = json.dumps({"rounds": warmup + repeats + 1, "size": size}).encode()
        res = await self._call_all("Rounds", lambda _: req)
        done = [json.loads(r)["done"] for r in res.values()]
        ends = [max(d[r] for d in done) for r in range(len(done[0]))]
        durations = [b - a for a, b in zip(ends[warmup:], ends[warmup + 1 :], strict=False)]
        return stats_ms(durations)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="bare gRPC floor worker (started by confar bench network)")
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--certs", type=Path, required=True)
    ap.add_argument("--address-file", type=Path, required=True)
    a = ap.parse_args(argv)
    asyncio.run(_worker_main(a.id, a.certs, a.address_file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
