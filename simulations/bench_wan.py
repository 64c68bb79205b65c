"""``confar bench wan``: the decision protocols between parties in their own network namespaces, with a
round-trip time of ``--rtt-ms`` on every link.

Layout (needs root and ``ip``): one namespace per party and one for the coordinator, all created by this
command with a unique name prefix per run. Each party namespace is joined by a veth pair to a bridge in
the coordinator namespace (addresses from 10.77.0.0/24, private to these namespaces); a daemon listens on
its namespace's veth address. Nothing of it touches the host's own network namespace.

Delay: this kernel has no ``sch_netem`` (nor ``fq``), so links get their delay from :class:`DelayProxy`, a
userspace TCP proxy that holds every chunk for a fixed time per direction (byte stream and order kept,
no bandwidth limit, no jitter). Every connection is made through a proxy in the namespace of the side
that dials: party i reaches party q (i < q dials, as ``parties.daemon`` does) through
127.0.0.1:17000+q in its own namespace, held rtt/2 each way; the coordinator reaches the parties, and the
parties reach the coordinator's relay, through proxies held ``--coordinator-rtt-ms``/2 each way (default:
the same RTT). So a protocol round between parties costs at least one RTT, as between registries on a WAN.

Timing is as in ``confar bench network`` (the same code: :func:`simulations.bench_network.bench_protocol`
runs in a driver process inside the coordinator namespace): per (mode, topology, batch) a session, warm-up
batches, then timed batches from ``evaluate`` to the decoded decisions. Records (``suite: "wan"``) add
``rtt_ms``, ``latency_rtts`` = median latency / RTT and ``latency_floor_ms``, the propagation floor: one
coordinator RTT (request and reply) plus, per exchange round, one way between parties (rtt/2, mesh) or
party -> relay -> party (one coordinator RTT, relay); sign in the mesh: 1 + 6/2 = 4 RTT (blocks4 with
``--precompute-ahead``: the step's 5 rounds, 1 + 4/2 = 3 RTT). All processes run
on this machine's cores (the CPU-bound part is as on loopback). ``--parties`` takes several m (one WAN each).

``--mpyc`` (:mod:`simulations.wan_mpyc`): for each m, just before ours, ``confar bench mpyc``'s MPyC program
on a WAN of the same m, each MPyC party in a party namespace and each of its connections through the same
proxies and RTT; then, per (m, batch), MPyC's and our sign decisions/s and latency in RTTs and ours / MPyC.

Every process it starts (daemons, proxies, the driver) is stopped by PID, and every namespace it created
is deleted, at the end, on failure and on Ctrl-C/SIGTERM (try/finally). Namespaces left by a SIGKILLed
run have names ``cw<6 hex>c`` / ``cw<6 hex>p<i>``; ``ip netns list`` shows them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from simulations.bench_records import write_records
from simulations.wan_net import (
    COORD_IP,
    PARTY_PORT,
    PROXY_BASE,
    RELAY_PORT,
    NetnsError,
    Route,
    Started,
    WanNet,
    party_ip,
    proxy_main,
    spawn_proxy,
    tail,
    wait_files,
    wan_party_config,
    wan_unavailable,
)

HELP = "decision protocols between parties in network namespaces with an emulated WAN round-trip time"
MODES = ("sum", "blinded", "sign")  # = hss.modes.TERMS_MODES (not imported here)
TOPOLOGIES = ("mesh", "relay")
SIGN_PRECOMPUTE = ("inline", "pooled", "blocks4", "prefix")  # = hss.session.SIGN_PRECOMPUTE (not imported)
SECURITY = ("semi-honest", "abort")  # = hss.abort_modes.SECURITY (not imported here)
_SELF = [sys.executable, "-m", "simulations.bench_wan"]  # this module's subprocess entry points (_main)


@dataclass(frozen=True)
class WanSettings:
    m: int = 7
    rtt_ms: float = 25.0
    coordinator_rtt_ms: float | None = None  # None: rtt_ms
    batches: tuple[int, ...] = (1, 100, 1000)
    modes: tuple[str, ...] = MODES
    topologies: tuple[str, ...] = ("mesh",)
    repeats: int = 10
    warmup: int = 2
    records_per_party: int = 200
    sign_precompute: str = "inline"  # hss.session.SIGN_PRECOMPUTE
    precompute_ahead: bool = False  # sign: step k + 1's precompute made after answering step k
    gap_ms: float = 0.0  # untimed pause between batches
    parties: tuple[int, ...] = ()  # the m values of run_all (empty: m alone)
    mpyc: bool = False  # run_all: MPyC 0.11's comparison on the same WAN too (simulations.wan_mpyc)
    sec_param: int = 64  # MPyC -K
    securities: tuple[str, ...] = ("semi-honest",)  # each protocol timed under each (hss SECURITY)
    rtts: tuple[float, ...] = ()  # the RTTs of run_all, one WAN each (empty: rtt_ms alone)

    @property
    def c_rtt_ms(self) -> float:
        return self.rtt_ms if self.coordinator_rtt_ms is None else self.coordinator_rtt_ms

    @property
    def ms(self) -> tuple[int, ...]:
        return self.parties or (self.m,)

    @property
    def rtt_list(self) -> tuple[float, ...]:
        return self.rtts or (self.rtt_ms,)


def run_all(s: WanSettings) -> dict[str, Any]:
    """Ours for every RTT and m (:func:`run_wan`, one WAN each, every security in it) and, with ``s.mpyc``,
    MPyC on a WAN of the same m and RTT just before: ``{records, mpyc, comparison}`` (the last two empty
    without ``s.mpyc``)."""
    from simulations import wan_mpyc

    ours: list[dict[str, Any]] = []
    mp: list[dict[str, Any]] = []
    for rtt in s.rtt_list:
        for m in s.ms:
            if s.mpyc:
                mp += wan_mpyc.run_mpyc_wan(m, rtt, list(s.batches), s.repeats, s.warmup, s.sec_param)
            ours += run_wan(replace(s, m=m, parties=(), rtt_ms=rtt, rtts=()))
    rows = wan_mpyc.compare(mp, ours)
    wan_mpyc.print_comparison(rows)
    return {"records": ours, "mpyc": mp, "comparison": rows}


def run_wan(s: WanSettings, workdir: Path | None = None) -> list[dict[str, Any]]:
    """Build the namespaces, start proxies, daemons and the driver, return the driver's records."""
    from coordinator.certs import init_consortium

    why = wan_unavailable()
    if why:
        raise NetnsError(why)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="confar-wan-")))
        net = stack.enter_context(WanNet.create(s.m))
        certs = workdir / "certs"
        init_consortium(certs, s.m)
        started = Started()
        _start_proxies(net, s, workdir, started)
        _start_daemons(net, s, workdir, certs, started)
        wait_files(started.ready, started.procs, started.logs, 60.0)
        return _run_driver(net, s, workdir, started)


def _start_proxies(net: WanNet, s: WanSettings, workdir: Path, started: Started) -> None:
    """Proxies: parties -> other parties and -> the relay; coordinator -> parties; relay entry."""
    half, c_half = s.rtt_ms / 2, s.c_rtt_ms / 2
    for pid in range(1, s.m + 1):
        routes = [
            Route(("127.0.0.1", PROXY_BASE + q), (party_ip(q), PARTY_PORT), half / 1e3)
            for q in range(1, s.m + 1)
            if q != pid
        ]
        routes.append(Route(("127.0.0.1", RELAY_PORT), (COORD_IP, RELAY_PORT), c_half / 1e3))
        spawn_proxy(net, net.party_ns(pid), routes, workdir, str(pid), started)
    routes = [
        Route(("127.0.0.1", PROXY_BASE + q), (party_ip(q), PARTY_PORT), c_half / 1e3)
        for q in range(1, s.m + 1)
    ]
    routes.append(Route((COORD_IP, RELAY_PORT), ("127.0.0.1", RELAY_PORT), 0.0))  # relay entry, no delay
    spawn_proxy(net, net.coord_ns, routes, workdir, "c", started)


def _start_daemons(net: WanNet, s: WanSettings, workdir: Path, certs: Path, started: Started) -> None:
    """One party daemon per party namespace, with its own synthetic data."""
    from simulations.launcher import write_csv

    rng = np.random.default_rng(s.m)
    for pid in range(1, s.m + 1):
        pdir = workdir / f"party-{pid}"
        pdir.mkdir(parents=True, exist_ok=True)
        write_csv(pdir / "data.csv", {"x": rng.normal(1.0, 1.0, s.records_per_party)})
        cfg = pdir / "party.toml"
        cfg.write_text(wan_party_config(pid, s.m, workdir, certs, pdir / "data.csv", round_timeout_s=300.0))
        cmd = [sys.executable, "-m", "parties.cli", "serve", "--config", str(cfg)]
        started.spawn(net, net.party_ns(pid), cmd, pdir / "address", pdir / "daemon.log")


def _run_driver(net: WanNet, s: WanSettings, workdir: Path, started: Started) -> list[dict[str, Any]]:
    """The driver in the coordinator namespace, its progress lines relayed; fails if anything else exits."""
    spec = {
        "m": s.m,
        "workdir": str(workdir),
        "rtt_ms": s.rtt_ms,
        "coordinator_rtt_ms": s.c_rtt_ms,
        "batches": list(s.batches),
        "modes": list(s.modes),
        "topologies": list(s.topologies),
        "repeats": s.repeats,
        "warmup": s.warmup,
        "sign_precompute": s.sign_precompute,
        "precompute_ahead": s.precompute_ahead,
        "gap_ms": s.gap_ms,
        "securities": list(s.securities),
        "out": str(workdir / "records.json"),
    }
    (workdir / "driver.json").write_text(json.dumps(spec))
    dlog = workdir / "driver.log"
    driver = net.spawn(net.coord_ns, [*_SELF, "driver", str(workdir / "driver.json")], dlog)
    procs, logs = started.procs, started.logs
    shown = 0
    while True:
        done = driver.poll() is not None
        with contextlib.suppress(OSError):  # relay the driver's progress lines
            text = dlog.read_text(errors="replace")
            if done or "\n" in text[shown:]:
                end = len(text) if done else text.rindex("\n") + 1
                if driver.returncode in (None, 0):
                    print(text[shown:end], end="", flush=True)
                shown = end
        if done:
            break
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            i = procs.index(dead[0])
            raise NetnsError(f"a daemon or proxy exited during the run:\n{tail(logs[i])}")
        time.sleep(0.1)
    if driver.returncode != 0:
        raise NetnsError(f"the driver failed (code {driver.returncode}):\n{tail(dlog, 40)}")
    records: list[dict[str, Any]] = json.loads((workdir / "records.json").read_text())
    return records


async def _driver_main(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Inside the coordinator namespace: the timed sessions (code shared with ``confar bench network``)."""
    from coordinator.api import Coordinator, PartyEntry
    from coordinator.certs import party_identity
    from simulations.bench_network import ProtocolOptions, bench_protocol, protocol_shape
    from simulations.launcher import LocalConsortium

    m = int(spec["m"])
    workdir = Path(spec["workdir"])
    lc = LocalConsortium(
        m, workdir, workdir / "certs"
    )  # not started: carries workdir/certs for bench_protocol
    eps = [PartyEntry(q, party_identity(q), f"127.0.0.1:{PROXY_BASE + q}") for q in range(1, m + 1)]
    out: list[dict[str, Any]] = []
    rtt = float(spec["rtt_ms"])
    async with Coordinator(
        eps, lc.coordinator_tls(), rpc_timeout_s=600.0, relay_listen=f"127.0.0.1:{RELAY_PORT}"
    ) as coord:
        for topology, mode, batch, security in itertools.product(
            spec["topologies"], spec["modes"], spec["batches"], spec.get("securities", ["semi-honest"])
        ):
            pre = str(spec.get("sign_precompute", "inline"))
            shape = protocol_shape(mode, m, batch, pre, security)
            rec = await bench_protocol(
                coord,
                lc,
                mode,
                topology,
                batch,
                shape,
                spec["warmup"],
                spec["repeats"],
                ProtocolOptions(
                    precompute=pre,
                    ahead=bool(spec.get("precompute_ahead", False)),
                    gap_ms=float(spec.get("gap_ms", 0.0)),
                    security=security,
                ),
            )
            # propagation floor: request + reply (one coordinator RTT) and each exchange round one
            # way between parties (mesh: rtt/2) or party -> relay -> party (relay: coordinator RTT)
            crtt = float(spec["coordinator_rtt_ms"])
            per_round = rtt / 2 if topology == "mesh" else crtt
            ex = step_exchange_rounds(shape.rounds, shape.exchange_rounds, int(rec["rounds"]))
            rec.update(
                suite="wan",
                latency_floor_ms=round(crtt + ex * per_round, 3),
                rtt_ms=rtt,
                coordinator_rtt_ms=spec["coordinator_rtt_ms"],
                latency_rtts=round(rec["latency_ms_median"] / rtt, 2) if rtt > 0 else None,
                delay="userspace TCP proxy per link, rtt/2 each direction, no bandwidth limit",
            )
            print(_fmt(rec), flush=True)
            out.append(rec)
    return out


def step_exchange_rounds(shape_rounds: int, shape_exchange: int, step_rounds: int) -> int:
    """Exchange rounds in a timed step: the in-memory shape's, less the rounds the daemons made ahead of the
    step (``precompute_ahead``: blocks4's 2 precompute rounds, a step of 5 rounds instead of 7)."""
    return max(0, shape_exchange - max(0, shape_rounds - step_rounds))


def _fmt(r: dict[str, Any]) -> str:
    return (
        f"wan {r['mode']:7s} {r['topology']:5s} {r.get('security', 'semi-honest'):11s} m={r['m']} "
        f"rtt={r['rtt_ms']:g}ms batch={r['batch']:5d} "
        f"{r['decisions_per_s']:>10.1f} dec/s  median {r['latency_ms_median']:9.2f} ms "
        f"(= {r['latency_rtts']} RTT; propagation floor {r['latency_floor_ms']:g} ms)  "
        f"p90 {r['latency_ms_p90']:9.2f} ms  rounds={r['rounds']}"
    )


def suite(s: WanSettings) -> dict[str, Any]:
    """The wan section of ``confar bench all``: ``{records}`` or ``{skipped: reason}``."""
    why = wan_unavailable()
    if why:
        return {"skipped": why}
    return {**run_all(s), "settings": {**s.__dict__, "coordinator_rtt_ms": s.c_rtt_ms}}


# ---- command line -----------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, help="write the records to this JSON file")
    p.add_argument("--parties", nargs="+", help="m values, space- or comma-separated (default 7; --quick: 3)")
    p.add_argument(
        "--rtt-ms",
        nargs="+",
        help="round-trip times between parties in ms, space- or comma-separated, one WAN each (default 25)",
    )
    p.add_argument(
        "--security",
        nargs="+",
        help="semi-honest and/or abort, space- or comma-separated: each protocol timed under each "
        "(default semi-honest)",
    )
    p.add_argument("--coordinator-rtt-ms", type=float, help="RTT coordinator <-> parties (default: --rtt-ms)")
    p.add_argument("--batch", nargs="+", help="batch sizes, space- or comma-separated (default 1 100 1000)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated reveal modes (default: all)")
    p.add_argument("--topologies", default="mesh", help="mesh and/or relay, comma-separated (default mesh)")
    p.add_argument("--repeats", type=int, help="timed batches per configuration (default 10; --quick: 2)")
    p.add_argument("--warmup", type=int, help="untimed batches per configuration (default 2; --quick: 1)")
    p.add_argument(
        "--sign-precompute",
        choices=SIGN_PRECOMPUTE,
        default="inline",
        help="sign mode: inline (7 rounds), pooled (9 rounds, each public root computed once), blocks4 "
        "(7 rounds, 5 online) or prefix (4 rounds, 3 online; semi-honest, batch 1 on a WAN)",
    )
    from simulations.bench_network import add_ahead_options  # lazy: proxies import this module too

    add_ahead_options(p)
    p.add_argument(
        "--mpyc",
        action="store_true",
        help="also MPyC 0.11's comparison (confar bench mpyc's program) with every party in its namespace "
        "and every link through the same delay proxies, side by side with our sign (needs the bench extra)",
    )
    p.add_argument("--quick", action="store_true", help="tiny run: m=3, batch 1, 2 repeats")


def settings_from_args(args: argparse.Namespace) -> WanSettings:
    """Validated settings; ValueError names what is wrong."""
    q = args.quick
    batches = [
        int(x) for tok in (args.batch or (["1"] if q else ["1", "100", "1000"])) for x in tok.split(",") if x
    ]
    modes = tuple(x for x in args.modes.split(",") if x)
    topologies = tuple(x for x in args.topologies.split(",") if x)
    ms = tuple(int(x) for tok in (args.parties or ["3" if q else "7"]) for x in tok.split(",") if x)
    rtts = tuple(float(x) for tok in (args.rtt_ms or ["25"]) for x in tok.split(",") if x)
    securities = tuple(x for tok in (args.security or ["semi-honest"]) for x in tok.split(",") if x)
    s = WanSettings(
        m=ms[0] if ms else 0,
        parties=ms,
        mpyc=args.mpyc,
        rtt_ms=rtts[0] if rtts else 0.0,
        rtts=rtts,
        securities=securities,
        coordinator_rtt_ms=args.coordinator_rtt_ms,
        batches=tuple(batches),
        modes=modes,
        topologies=topologies,
        repeats=args.repeats if args.repeats is not None else (2 if q else 10),
        warmup=args.warmup if args.warmup is not None else (1 if q else 2),
        sign_precompute=args.sign_precompute,
        precompute_ahead=args.precompute_ahead,
        gap_ms=args.gap_ms,
    )
    bad = [x for x in modes if x not in MODES] + [x for x in topologies if x not in TOPOLOGIES]
    if bad or not modes or not topologies:
        raise ValueError(f"unknown modes/topologies {bad}; expected {MODES} / {TOPOLOGIES}")
    if (
        not ms
        or any(not 3 <= m <= 15 for m in ms)
        or any(b < 1 for b in batches)
        or not batches
        or s.repeats < 1
        or s.warmup < 0
    ):
        raise ValueError("need --parties in 3..15, batches >= 1, --repeats >= 1, --warmup >= 0")
    if not rtts or any(r < 0 for r in rtts) or s.c_rtt_ms < 0:
        raise ValueError(f"RTTs must be >= 0 ms, got --rtt-ms {list(rtts)}")
    bad_sec = [x for x in securities if x not in SECURITY]
    if bad_sec or not securities:
        raise ValueError(f"unknown --security {bad_sec}; expected {SECURITY}")
    if s.mpyc and ("sign" not in modes or "mesh" not in topologies):
        raise ValueError(
            "--mpyc compares with our sign mode in the mesh: keep sign in --modes, mesh in --topologies"
        )
    return s


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt here, so the finally blocks remove namespaces and processes."""

    def handler(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run(args: argparse.Namespace) -> int:
    try:
        s = settings_from_args(args)
    except ValueError as exc:
        print(f"confar bench wan: {exc}", file=sys.stderr)
        return 2
    why = wan_unavailable()
    if why:
        print(f"confar bench wan: skipped: {why}", file=sys.stderr)
        return 0
    try:
        with sigterm_as_interrupt():
            res = run_all(s)
    except (NetnsError, RuntimeError) as exc:  # MpycError is a RuntimeError
        print(f"confar bench wan: {exc}", file=sys.stderr)
        return 1
    if args.json:
        write_records(args.json, res["records"] + res["mpyc"] + res["comparison"])
    if any(r["mismatches"] for r in res["mpyc"]):
        print("confar bench wan: MPyC revealed bits differ from the plaintext", file=sys.stderr)
        return 1
    return 0


def _main(argv: list[str]) -> int:
    """Subprocess entry points: ``proxy --route R ... [--ready FILE]`` and ``driver SPEC.json``."""
    ap = argparse.ArgumentParser(prog="python -m simulations.bench_wan")
    sub = ap.add_subparsers(dest="what", required=True)
    pp = sub.add_parser("proxy")
    pp.add_argument("--route", action="append", required=True, type=Route.parse)
    pp.add_argument("--ready", type=Path)
    dp = sub.add_parser("driver")
    dp.add_argument("spec", type=Path)
    a = ap.parse_args(argv)
    if a.what == "proxy":
        asyncio.run(proxy_main(a.route, a.ready))
        return 0
    spec = json.loads(a.spec.read_text())
    records = asyncio.run(_driver_main(spec))
    Path(spec["out"]).write_text(json.dumps(records))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
