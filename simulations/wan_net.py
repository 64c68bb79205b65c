"""The network of ``confar bench wan`` (:mod:`simulations.bench_wan`): the delayed links and the namespaces.

:class:`DelayProxy` gives every link its delay in userspace (this kernel has no ``sch_netem``): a TCP proxy
that holds every chunk for a fixed time per direction, byte stream and order kept, no bandwidth limit, no
jitter; it waits for a target that is not listening yet (``CONNECT_WAIT_S``) instead of dropping the client.
:class:`WanNet` creates one network namespace per party and one for the coordinator (unique name prefix per
run), joins each party to a bridge in the coordinator's namespace by a veth pair (addresses from
10.77.0.0/24), starts processes in them and stops and deletes all of it by PID and by name; nothing of it
touches the host's own network namespace. Needs root and ``ip`` (:func:`wan_unavailable` says why not).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBNET = "10.77.0"
COORD_IP = f"{SUBNET}.1"
PARTY_PORT = 7000
PROXY_BASE = 17000  # 127.0.0.1:17000+q in a namespace: the delayed link to party q
RELAY_PORT = 17999  # the coordinator's relay: 127.0.0.1 in every namespace (proxied to the coordinator)
CHUNK = 1 << 16
CONNECT_WAIT_S = 60.0  # a proxy waits this long for a target that refuses (still starting)


def party_ip(pid: int) -> str:
    return f"{SUBNET}.{10 + pid}"


# ---- the delay proxy --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """Accept on ``listen`` (host, port), connect to ``target``, hold each chunk ``delay_s`` per direction."""

    listen: tuple[str, int]
    target: tuple[str, int]
    delay_s: float

    @staticmethod
    def parse(text: str) -> Route:
        """``LISTEN_HOST:PORT=TARGET_HOST:PORT@DELAY_MS`` (one direction's delay, in milliseconds)."""
        try:
            pair, delay = text.rsplit("@", 1)
            lst, tgt = pair.split("=", 1)
            lh, lp = lst.rsplit(":", 1)
            th, tp = tgt.rsplit(":", 1)
            return Route((lh, int(lp)), (th, int(tp)), float(delay) / 1e3)
        except ValueError as exc:
            raise ValueError(f"bad route {text!r}: expected LISTEN:PORT=TARGET:PORT@DELAY_MS") from exc

    def text(self) -> str:
        return f"{self.listen[0]}:{self.listen[1]}={self.target[0]}:{self.target[1]}@{self.delay_s * 1e3:g}"


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy reader to writer, each chunk written no earlier than ``delay_s`` after it was read.

    Reading goes on while earlier chunks wait (the link stays pipelined); a FIFO keeps the byte order.
    End of stream is delayed like data, then forwarded as a half-close.
    """
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                queue.put_nowait((time.monotonic() + delay_s, data))
                if not data:
                    return
        except (ConnectionError, OSError):
            queue.put_nowait((time.monotonic() + delay_s, b""))

    async def write() -> None:
        while True:
            due, data = await queue.get()
            while (wait := due - time.monotonic()) > 0:  # the loop may wake a hair early: sleep again
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    rd = asyncio.ensure_future(read())
    try:
        await write()
    finally:
        rd.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await rd


async def _connect(
    target: tuple[str, int], wait_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to ``target``, retrying while it refuses for up to ``wait_s``: the proxy has already accepted
    its client, so a target that is not listening yet (a peer still starting) must not look like a
    connection that opened and broke (MPyC's runtime does not survive that; it retries a refused dial)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await asyncio.open_connection(target[0], target[1])
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


class DelayProxy:
    """A set of delayed TCP routes served by one asyncio loop (one process per namespace in the suite)."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes
        self.servers: list[asyncio.Server] = []
        self.connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for r in self.routes:
            self.servers.append(await asyncio.start_server(self._handler(r), r.listen[0], r.listen[1]))

    def bound(self) -> list[tuple[str, int]]:
        """The (host, port) each route listens on (port 0 in a route is resolved here)."""
        out = []
        for s in self.servers:
            host, port = s.sockets[0].getsockname()[:2]
            out.append((str(host), int(port)))
        return out

    def _handler(self, route: Route) -> Any:
        async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self.connections.add(task)
            uw: asyncio.StreamWriter | None = None
            try:
                ur, uw = await _connect(route.target, CONNECT_WAIT_S)
                await asyncio.gather(_pump(cr, uw, route.delay_s), _pump(ur, cw, route.delay_s))
            except (ConnectionError, OSError, asyncio.CancelledError):
                pass  # a peer went away, or the proxy is closing: drop the connection
            finally:
                for w in (cw, uw):
                    if w is not None:
                        w.close()
                self.connections.discard(task)

        return handle

    async def close(self) -> None:
        for s in self.servers:
            s.close()
        for t in list(self.connections):
            t.cancel()
        for s in self.servers:
            with contextlib.suppress(Exception):
                await s.wait_closed()


async def proxy_main(routes: list[Route], ready: Path | None) -> None:
    """Serve ``routes`` until SIGTERM or SIGINT; write the bound addresses to ``ready`` once listening."""
    proxy = DelayProxy(routes)
    await proxy.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready.write_text(json.dumps(proxy.bound()))
    await stop.wait()
    await proxy.close()


# ---- namespaces -------------------------------------------------------------------------------------------


class NetnsError(RuntimeError):
    """An ``ip`` command failed, or a process in a namespace did not start."""


def wan_unavailable() -> str | None:
    """Why the namespace suite cannot run here (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (run as root, e.g. sudo .venv/bin/confar bench wan ...)"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def _ip(*args: str) -> None:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {res.stderr.strip() or res.stdout.strip()}")


@dataclass
class WanNet:
    """Namespaces, veths and a bridge for m parties + the coordinator; processes started in them."""

    m: int
    prefix: str = field(default_factory=lambda: "cw" + secrets.token_hex(3))
    created: list[str] = field(default_factory=list)
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    @property
    def coord_ns(self) -> str:
        return f"{self.prefix}c"

    def party_ns(self, pid: int) -> str:
        return f"{self.prefix}p{pid}"

    @classmethod
    @contextlib.contextmanager
    def create(cls, m: int) -> Iterator[WanNet]:
        net = cls(m)
        try:
            net._build()
            yield net
        finally:
            net.destroy()

    def _add_ns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _build(self) -> None:
        c = self.coord_ns
        self._add_ns(c)
        _ip("-n", c, "link", "add", "br0", "type", "bridge")
        _ip("-n", c, "addr", "add", f"{COORD_IP}/24", "dev", "br0")
        _ip("-n", c, "link", "set", "br0", "up")
        for pid in range(1, self.m + 1):
            ns = self.party_ns(pid)
            self._add_ns(ns)
            hub_end, party_end = f"{self.prefix}v{pid}a", f"{self.prefix}v{pid}b"
            # both ends are created inside our namespaces (never in the host's)
            _ip("-n", c, "link", "add", hub_end, "type", "veth", "peer", "name", party_end, "netns", ns)
            _ip("-n", c, "link", "set", hub_end, "master", "br0")
            _ip("-n", c, "link", "set", hub_end, "up")
            _ip("-n", ns, "addr", "add", f"{party_ip(pid)}/24", "dev", party_end)
            _ip("-n", ns, "link", "set", party_end, "up")

    def spawn(
        self, ns: str, cmd: list[str], log: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        if ns not in self.created:
            raise NetnsError(f"namespace {ns} was not created by this run")
        with open(log, "ab") as fh:
            # `ip netns exec` enters the namespace and execs the command: the PID is the command's
            proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, *cmd],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(Path(__file__).resolve().parent.parent),
                env=env,
            )
        self.procs.append((ns, proc))
        return proc

    def stop_processes(self, grace_s: float = 5.0) -> None:
        for _, p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    p.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(5)

    def destroy(self) -> list[str]:
        """Stop our processes, delete our namespaces (veths and bridge go with them); returns leftovers."""
        self.stop_processes()
        left = []
        for ns in reversed(self.created):
            try:
                _ip("netns", "del", ns)
            except NetnsError:
                left.append(ns)
        self.created = left
        if left:
            print(f"confar bench wan: could not delete namespaces {left}", file=sys.stderr)
        return left


def wait_files(
    paths: list[Path], procs: list[subprocess.Popen[bytes]], logs: list[Path], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    for path, proc, log in zip(paths, procs, logs, strict=True):
        while not path.exists():
            if proc.poll() is not None:
                raise NetnsError(f"process exited with code {proc.returncode}:\n{tail(log)}")
            if time.monotonic() > deadline:
                raise NetnsError(f"process did not start within {timeout_s:g} s:\n{tail(log)}")
            time.sleep(0.02)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wan_party_config(pid: int, m: int, workdir: Path, certs: Path, data_path: Path, **kw: Any) -> str:
    """``launcher.party_config_text`` with the daemon listening on its veth address and peers via proxies."""
    from simulations.launcher import PartyOptions, party_config_text

    peers = {q: f"127.0.0.1:{PROXY_BASE + q}" for q in range(1, m + 1) if q != pid}
    text = party_config_text(pid, m, workdir, certs, data_path, PartyOptions(peer_addresses=peers, **kw))
    default = 'listen = "127.0.0.1:0"'
    if default not in text:
        raise NetnsError("launcher.party_config_text no longer writes the listen line this suite replaces")
    return text.replace(default, f'listen = "{party_ip(pid)}:{PARTY_PORT}"', 1)


# ---- the suite --------------------------------------------------------------------------------------------


_BENCH_WAN = [sys.executable, "-m", "simulations.bench_wan"]  # its `proxy` entry point runs a DelayProxy


@dataclass
class Started:
    """The proxies and daemons started so far: their ready files, processes and logs, in step."""

    ready: list[Path] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def spawn(self, net: WanNet, ns: str, cmd: list[str], ready: Path, log: Path) -> None:
        self.ready.append(ready)
        self.logs.append(log)
        self.procs.append(net.spawn(ns, cmd, log))



def spawn_proxy(
    net: WanNet, ns: str, routes: list[Route], workdir: Path, name: str, started: Started
) -> None:
    ready = workdir / f"proxy-{name}.ready"
    args = [a for r in routes for a in ("--route", r.text())]
    started.spawn(
        net, ns, [*_BENCH_WAN, "proxy", *args, "--ready", str(ready)], ready, workdir / f"proxy-{name}.log"
    )
