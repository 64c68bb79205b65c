"""Per-message CPU cost of small frames over mTLS on 127.0.0.1.

Roles:
  server (Q): accepts one long-lived bidi stream, waits for k frames, replies with k frames.
  client (P): opens one stream to each of --peers servers; per round sends k frames to every
              peer back to back, then reads k replies from every peer.

Transports:
  aio     grpc.aio bidi streaming RPC, generic handler, identity (bytes) serializers,
          one `await call.write()` / `await call.read()` per frame (server: context.read/write).
  sync    synchronous grpc API: grpc.server(ThreadPoolExecutor), client request iterator fed
          from a queue.Queue, responses consumed by iterating the response iterator.
  asyncio asyncio.start_server/open_connection with ssl.SSLContext (CERT_REQUIRED both sides),
          frames = 4-byte big-endian length + payload.

Each process measures time.process_time() (all threads of the process) over the measured
window (after warm-up rounds, until last round) and prints one JSON line on stdout.
"""

import argparse
import json
import os
import queue
import ssl
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CERTS = os.path.join(HERE, "certs")
METHOD = "/bench.Bench/Pipe"


def rd(name):
    with open(os.path.join(CERTS, name), "rb") as f:
        return f.read()


def emit(d):
    sys.stdout.write(json.dumps(d) + "\n")
    sys.stdout.flush()


def ready(port):
    sys.stdout.write(f"READY {port}\n")
    sys.stdout.flush()


CLK = os.sysconf("SC_CLK_TCK")


def thread_cpu():
    """{tid: (comm, utime+stime ticks)} for all threads of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1 : s.rindex(")")]
        rest = s[s.rindex(")") + 2 :].split()
        out[int(tid)] = (comm, int(rest[11]) + int(rest[12]))
    return out


class Window:
    """Records process CPU + wall between the end of warm-up and the end of the run."""

    def __init__(self, warm, total):
        self.warm, self.total = warm, total
        self.c0 = self.w0 = None

    def round_done(self, r):  # r = number of completed rounds
        if r == self.warm:
            self.t0 = thread_cpu()
            self.c0, self.w0 = time.process_time(), time.perf_counter()
        elif r == self.total:
            self.c1, self.w1 = time.process_time(), time.perf_counter()
            self.t1 = thread_cpu()

    def result(self, role, a, frames_per_round):
        n = self.total - self.warm
        msgs = n * frames_per_round  # messages sent (== messages received) by this process
        cpu = self.c1 - self.c0
        th = {}
        for tid, (name, ticks) in self.t1.items():
            d = ticks - self.t0.get(tid, (name, 0))[1]
            if d:
                key = f"{name}" if name not in th else f"{name}#{tid}"
                th[key] = round(d / CLK / msgs * 1e6, 1)  # us per msg, per thread
        return dict(
            threads_us_per_msg=th,
            role=role,
            transport=a.transport,
            k=a.k,
            peers=a.peers,
            size=a.size,
            rounds=n,
            msgs_sent=msgs,
            cpu_s=cpu,
            wall_s=self.w1 - self.w0,
            cpu_us_per_msg=cpu / msgs * 1e6,
            wall_us_per_round=(self.w1 - self.w0) / n * 1e6,
        )


# --------------------------------------------------------------------------- grpc common
# the server certificate names "localhost" (gencerts.py): the channel expects it, as a daemon names its peer
GRPC_OPTS = [("grpc.max_receive_message_length", 16 << 20), ("grpc.ssl_target_name_override", "localhost")]


def grpc_server_creds(grpc):
    return grpc.ssl_server_credentials(
        [(rd("server.key"), rd("server.pem"))], root_certificates=rd("ca.pem"), require_client_auth=True
    )


def grpc_channel_creds(grpc):
    return grpc.ssl_channel_credentials(rd("ca.pem"), rd("client.key"), rd("client.pem"))


# --------------------------------------------------------------------------- grpc.aio
def aio_server(a):
    import asyncio

    import grpc
    from grpc import aio

    async def main():
        done = asyncio.Event()

        async def pipe(request_iterator, context):
            win = Window(a.warmup, a.warmup + a.rounds)
            r = 0
            while True:
                buf = []
                for _ in range(a.k):
                    m = await context.read()
                    if m is aio.EOF:
                        return
                    buf.append(m)
                for m in buf:
                    await context.write(m)
                r += 1
                win.round_done(r)
                if r == win.total:
                    emit(win.result("server", a, a.k))
                    done.set()

        h = grpc.method_handlers_generic_handler(
            "bench.Bench", {"Pipe": grpc.stream_stream_rpc_method_handler(pipe)}
        )  # None serializers = bytes
        server = aio.server(options=GRPC_OPTS)
        server.add_generic_rpc_handlers((h,))
        port = server.add_secure_port("127.0.0.1:0", grpc_server_creds(grpc))
        await server.start()
        ready(port)
        await done.wait()
        await asyncio.sleep(0.2)
        await server.stop(1)

    asyncio.run(main())


def aio_client(a):
    import asyncio

    import grpc
    from grpc import aio

    async def main():
        payload = os.urandom(a.size)
        chans, calls = [], []
        for p in a.ports:
            ch = aio.secure_channel(f"127.0.0.1:{p}", grpc_channel_creds(grpc), options=GRPC_OPTS)
            await ch.channel_ready()
            chans.append(ch)
            calls.append(ch.stream_stream(METHOD)())  # identity serializers
        win = Window(a.warmup, a.warmup + a.rounds)
        for r in range(1, win.total + 1):
            for c in calls:
                for _ in range(a.k):
                    await c.write(payload)
            for c in calls:
                for _ in range(a.k):
                    m = await c.read()
                    assert len(m) == a.size
            win.round_done(r)
        emit(win.result("client", a, a.k * len(calls)))
        for c in calls:
            await c.done_writing()
        for ch in chans:
            await ch.close()

    asyncio.run(main())


# --------------------------------------------------------------------------- grpc sync
def sync_server(a):
    from concurrent import futures

    import grpc

    done = threading.Event()

    def pipe(request_iterator, context):
        win = Window(a.warmup, a.warmup + a.rounds)
        r = 0
        it = iter(request_iterator)
        while True:
            buf = []
            try:
                for _ in range(a.k):
                    buf.append(next(it))
            except StopIteration:
                return
            yield from buf
            r += 1
            win.round_done(r)  # measured when generator resumes after the yields
            if r == win.total:
                emit(win.result("server", a, a.k))
                done.set()

    h = grpc.method_handlers_generic_handler(
        "bench.Bench", {"Pipe": grpc.stream_stream_rpc_method_handler(pipe)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=GRPC_OPTS)
    server.add_generic_rpc_handlers((h,))
    port = server.add_secure_port("127.0.0.1:0", grpc_server_creds(grpc))
    server.start()
    ready(port)
    done.wait()
    time.sleep(0.2)
    server.stop(1).wait()


def sync_client(a):
    import grpc

    payload = os.urandom(a.size)
    chans, qs, resps = [], [], []
    for p in a.ports:
        ch = grpc.secure_channel(f"127.0.0.1:{p}", grpc_channel_creds(grpc), options=GRPC_OPTS)
        grpc.channel_ready_future(ch).result(timeout=10)
        q = queue.Queue()
        resps.append(ch.stream_stream(METHOD)(iter(q.get, None)))
        chans.append(ch)
        qs.append(q)
    win = Window(a.warmup, a.warmup + a.rounds)
    for r in range(1, win.total + 1):
        for q in qs:
            for _ in range(a.k):
                q.put(payload)
        for it in resps:
            for _ in range(a.k):
                m = next(it)
                assert len(m) == a.size
        win.round_done(r)
    emit(win.result("client", a, a.k * len(qs)))
    for q in qs:
        q.put(None)
    for it in resps:
        for _ in it:
            pass
    for ch in chans:
        ch.close()


# --------------------------------------------------------------------------- plain asyncio+ssl
HDR = struct.Struct(">I")


def ssl_server_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(CERTS, "server.pem"), os.path.join(CERTS, "server.key"))
    ctx.load_verify_locations(os.path.join(CERTS, "ca.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def ssl_client_ctx():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(os.path.join(CERTS, "ca.pem"))
    ctx.load_cert_chain(os.path.join(CERTS, "client.pem"), os.path.join(CERTS, "client.key"))
    return ctx


async def read_frame(reader):
    (n,) = HDR.unpack(await reader.readexactly(4))
    return await reader.readexactly(n)


def asyncio_server(a):
    import asyncio

    async def main():
        done = asyncio.Event()

        async def handle(reader, writer):
            win = Window(a.warmup, a.warmup + a.rounds)
            r = 0
            try:
                while True:
                    buf = [await read_frame(reader) for _ in range(a.k)]
                    for m in buf:
                        writer.write(HDR.pack(len(m)) + m)
                    await writer.drain()
                    r += 1
                    win.round_done(r)
                    if r == win.total:
                        emit(win.result("server", a, a.k))
                        done.set()
            except asyncio.IncompleteReadError:
                pass
            writer.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=None if a.notls else ssl_server_ctx())
        ready(srv.sockets[0].getsockname()[1])
        await done.wait()
        await asyncio.sleep(0.2)
        srv.close()

    asyncio.run(main())


def asyncio_client(a):
    import asyncio

    async def main():
        payload = os.urandom(a.size)
        conns = []
        for p in a.ports:
            if a.notls:  # calibration only: plain TCP, no TLS
                conns.append(await asyncio.open_connection("127.0.0.1", p))
            else:
                conns.append(
                    await asyncio.open_connection(
                        "127.0.0.1", p, ssl=ssl_client_ctx(), server_hostname="localhost"
                    )
                )
        win = Window(a.warmup, a.warmup + a.rounds)
        for r in range(1, win.total + 1):
            for _, w in conns:
                for _ in range(a.k):
                    w.write(HDR.pack(len(payload)) + payload)  # one write per frame
                await w.drain()
            for rd_, _ in conns:
                for _ in range(a.k):
                    m = await read_frame(rd_)
                    assert len(m) == a.size
            win.round_done(r)
        emit(win.result("client", a, a.k * len(conns)))
        for _, w in conns:
            w.close()
            try:
                await w.wait_closed()
            except Exception:
                pass

    asyncio.run(main())


# ---------------------------------------------------------------------------
IMPL = {
    ("aio", "server"): aio_server,
    ("aio", "client"): aio_client,
    ("sync", "server"): sync_server,
    ("sync", "client"): sync_client,
    ("asyncio", "server"): asyncio_server,
    ("asyncio", "client"): asyncio_client,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["server", "client"])
    ap.add_argument("transport", choices=["aio", "sync", "asyncio"])
    ap.add_argument("--k", type=int, default=1, help="frames per round per peer")
    ap.add_argument("--peers", type=int, default=1)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--notls", action="store_true", help="asyncio only: plain TCP baseline")
    ap.add_argument("--ports", type=lambda s: [int(x) for x in s.split(",")], default=[])
    a = ap.parse_args()
    if a.role == "client":
        a.peers = len(a.ports)
    IMPL[(a.transport, a.role)](a)


if __name__ == "__main__":
    main()
