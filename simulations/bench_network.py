"""``confar bench network``: decisions over real ``confar-party`` daemons on loopback with mTLS, against the
bare transport floor measured in the same run.

For each m, one :class:`~simulations.launcher.LocalConsortium` (m daemon processes) serves every
configuration; per (topology, reveal mode, batch) a session is opened (key setup not timed), ``--warmup``
batches run untimed, then ``--repeats`` batches are timed one by one from the coordinator's
``evaluate`` call to the decoded decisions. Records (``suite: "network"``) carry the fields of
``confar bench hss`` (rounds, messages and bytes come from the same protocol run in memory) plus
``latency_ms_median`` / ``latency_ms_p90`` / ``topology``, and, from the daemons' audit logs, the parties'
own timings: ``party_compute_ms`` (slowest party: terms + protocol machine steps, wall),
``party_handler_ms`` (slowest party's whole Evaluate handler: compute + waiting for peers) and
``party_cpu_ms_sum`` (CPU time of all daemon processes); with the coordinator's ``coordinator_cpu_ms``,
``cpu_bound_ms`` = total CPU / cores is a lower bound on the latency on this machine (all processes share
its cores): a record whose latency is close to it is CPU-bound, not transport-bound.

The floor (``suite: "floor"``, :mod:`simulations.bench_floor`) uses m bare gRPC worker processes with the
same certificates and TLS: ``floor: "fanout"`` is one parallel unary call to all m with the sizes of that
configuration's EvaluateRequest / EvaluateResponse; ``floor: "exchange"`` is one lock-step all-to-all round
of the configuration's mean peer-message size over persistent streams, direct (``mesh``) or through a hub
in the coordinator process (``relay``); ``relay-packed`` records (a diagnostic: one bundle per party per
round each way through the hub) are the relay's floor, and ``mesh-tls`` records (``--tls-floor``, a
diagnostic: the mesh over plain asyncio TLS streams, no gRPC) show what a peer transport without gRPC's
per-message cost could reach. Each network record gets
``floor_ms`` = fan-out + exchange_rounds x exchange round (``exchange_rounds``: rounds in which parties
message each other; the output round is the fan-out's reply; for the relay, which bundles each party's
frames of a round each way, the ``relay-packed`` round) and ``floor_ratio`` = latency / floor_ms.

The exchange round over the daemons' own links: after each configuration's timed batches, the session runs
a link probe (``ProbeLinks``, ``--probe-rounds`` all-to-all rounds of the configuration's mean peer payload,
all zeros) through the same links, Mailbox and exchange loop as the decisions; ``link_round_ms_median``
is its median round and ``link_floor_ms`` = fan-out floor + exchange_rounds x that round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import Coordinator, SessionError, SessionOptions
from hss.modes import TERMS_MODES, TermsBatch, reveal_mode
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, run_in_memory
from hss.session import SIGN_PRECOMPUTE, PartyContext, SessionParams, key_setup
from parties.exchange import PROBE_MAX_ROUNDS
from proto import party_pb2, serde
from proto.records import Frame, Kind
from simulations.bench_floor import FloorCluster, stats_ms
from simulations.bench_hss import bench_one
from simulations.bench_records import write_records
from simulations.launcher import LaunchError, LocalConsortium

HELP = "benchmark real confar-party daemons (loopback, mTLS) against the bare gRPC fan-out / exchange floor"
TOPOLOGIES = ("mesh", "relay")
RECORDS_PER_PARTY = 200
SID = b"\x01" * 16



def add_ahead_options(p: argparse.ArgumentParser) -> None:
    """--precompute-ahead and --gap-ms (shared with ``confar bench wan``)."""
    p.add_argument(
        "--precompute-ahead",
        action="store_true",
        help="sign mode: sessions with precompute_ahead (issue 16): each party makes step k + 1's precompute "
        "right after answering step k, so a timed step runs its online rounds only when the pool is done",
    )
    p.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="untimed pause of the coordinator between batches (a sampler's own work between steps); "
        "default 0",
    )

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, help="write the records to this JSON file")
    p.add_argument("--parties", help="comma-separated m values (default 3,5,7; --quick: 3)")
    p.add_argument("--batches", help="comma-separated batch sizes (default 1,100,1000; --quick: 1,100)")
    p.add_argument(
        "--modes", default=",".join(TERMS_MODES), help="comma-separated reveal modes (default: all)"
    )
    p.add_argument("--topologies", default=",".join(TOPOLOGIES), help="mesh,relay (default: both)")
    p.add_argument(
        "--sign-precompute",
        choices=SIGN_PRECOMPUTE,
        default="inline",
        help="sign mode: inline (7 rounds, every party computes every root), pooled (9 rounds, each root "
        "once), blocks4 (7 rounds, 5 online: block monomials precomputed) or prefix (4 rounds, 3 online: the "
        "carry over blocks in one round); default inline",
    )
    add_ahead_options(p)
    p.add_argument("--repeats", type=int, help="timed batches per configuration (default 20; --quick: 5)")
    p.add_argument("--warmup", type=int, help="untimed batches per configuration (default 3; --quick: 1)")
    p.add_argument(
        "--floor-repeats",
        type=int,
        help="timed fan-outs / exchange rounds per floor (default 100; --quick: 20)",
    )
    p.add_argument(
        "--probe-rounds",
        type=int,
        help="exchange rounds timed over the daemons' own links after each configuration (ProbeLinks; "
        "default 50; --quick: 10; 0: none)",
    )
    p.add_argument(
        "--tls-floor",
        action="store_true",
        help="also measure the exchange round of the mesh over plain asyncio TLS streams (no gRPC), a "
        "diagnostic of what a peer transport without gRPC's per-message cost would reach",
    )
    p.add_argument("--quick", action="store_true", help="small run: m=3, batches 1,100, few repeats")


# ---- protocol shape (in memory, once per configuration) ----------------------------------------------------


@dataclass(frozen=True)
class Shape:
    rounds: int
    exchange_rounds: int
    messages: int
    bytes: int
    peer_message_bytes: int  # mean serialized PeerFrame size of a party-to-party message
    request_bytes: int  # EvaluateRequest (same to every party)
    reply_bytes: int  # one party's EvaluateResponse
    peer_payload_words: int = 0  # mean payload of a party-to-party message, in uint64 words


def protocol_shape(
    mode: str, m: int, batch: int, precompute: str = "inline", security: str = "semi-honest"
) -> Shape:
    """Rounds, messages and sizes of one batch, from one run of the same machines in memory."""
    params = SessionParams(m=m, t=(m - 1) // 2, session_id=SID)
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    machines = {
        p: reveal_mode(mode).machine(
            PartyContext(params, keys[p]),
            TermsBatch(
                np.zeros(batch), None, 1, rngs[p], blind=np.ones(batch), precompute=precompute,
                security=security,
            ),
        )
        for p in rngs
    }
    _, tr = run_in_memory(machines, keep_log=True)
    peer = [(rnd, payload) for rnd, _src, dst, payload in tr.log if dst != RECEIVER]
    out = [(rnd, payload) for rnd, src, dst, payload in tr.log if dst == RECEIVER and src == 1]
    header = serde.frame_to_proto(SID, Frame(1, 1, 1, 2, Kind.DATA, np.zeros(0, np.uint64))).ByteSize()
    mean_peer = round(header + statistics.fmean(p.nbytes for _, p in peer)) if peer else 0
    g = np.random.default_rng(0)
    inputs: dict[str, npt.ArrayLike] = {
        "theta": g.normal(size=batch), "theta_star": g.normal(size=batch), "public": np.zeros(batch)
    }
    req = party_pb2.EvaluateRequest(
        session_id=SID, step=1, batch=batch, inputs=serde.inputs_to_proto(inputs)
    ).ByteSize()
    rep = party_pb2.EvaluateResponse(
        session_id=SID, step=1, to_receiver=serde.receiver_messages_to_proto(out), rounds=tr.rounds, clamped=0
    ).ByteSize()
    words = round(statistics.fmean(p.size for _, p in peer)) if peer else 0
    return Shape(tr.rounds, len({rnd for rnd, _ in peer}), tr.messages, tr.bytes, mean_peer, req, rep, words)


# ---- the protocol over daemons ---------------------------------------------------------------------------


_PARTS = ("compute_ms", "charge_ms", "send_ms", "wait_ms")


def _audit_timings(workdir: Path, m: int, session_id: bytes, first_step: int) -> dict[str, float]:
    """Median over timed steps of the parties' own timings: the slowest party's compute and handler, the
    daemons' CPU summed, and the mean over parties of each part of the handler (``party_*_ms_mean``)."""
    per_step: dict[int, list[dict[str, float]]] = {}
    sid = session_id.hex()
    for pid in range(1, m + 1):
        path = workdir / f"party-{pid}" / "state" / "audit.log"
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                a = json.loads(line)
            except ValueError:
                continue
            if a.get("what") == "Evaluate" and a.get("session") == sid and "compute_ms" in a:
                if int(a["step"]) >= first_step:
                    per_step.setdefault(int(a["step"]), []).append(a)
    full = [v for v in per_step.values() if len(v) == m]
    if not full:
        return {}

    def med(f: Any) -> float:
        return round(statistics.median(f(v) for v in full), 3)

    out = {
        "party_compute_ms": med(lambda v: max(a["compute_ms"] for a in v)),
        "party_handler_ms": med(lambda v: max(a["handler_ms"] for a in v)),
        "party_cpu_ms_sum": med(lambda v: sum(a.get("cpu_ms", 0.0) for a in v)),
    }
    for part in ("handler_ms", *_PARTS):
        if all(part in a for v in full for a in v):
            out[f"party_{part[:-3]}_ms_mean"] = med(lambda v, p=part: statistics.fmean(a[p] for a in v))
    return out


@dataclass(frozen=True)
class ProtocolOptions:
    """How one protocol is timed: the sign precompute, probe rounds before the step, the precompute run ahead,
    the gap between batches and the session's security."""

    precompute: str = "inline"
    probe_rounds: int = 0
    ahead: bool = False
    gap_ms: float = 0.0
    security: str = "semi-honest"


async def bench_protocol(
    coord: Coordinator,
    lc: LocalConsortium,
    mode: str,
    topology: str,
    batch: int,
    shape: Shape,
    warmup: int,
    repeats: int,
    settings: ProtocolOptions | None = None,
) -> dict[str, Any]:
    _s = settings if settings is not None else ProtocolOptions()
    precompute, probe_rounds, ahead = _s.precompute, _s.probe_rounds, _s.ahead
    gap_ms, security = _s.gap_ms, _s.security
    sess = await coord.open_session(SessionOptions(
        reveal_mode=mode,
        model="gaussian-mean",
        model_params={"model_args": {"sigma": 1.0}},
        topology=topology,
        sign_precompute=precompute,
        precompute_ahead=ahead and mode == "sign",
        security=security,
    ))
    g = np.random.default_rng()
    lat: list[float] = []
    cpu: list[float] = []
    rounds = 0
    link = None
    try:
        for k in range(warmup + repeats):
            theta = g.normal(1.0, 0.5, batch)
            prop = theta + 0.1 * g.normal(size=batch)
            if gap_ms > 0 and k:
                await asyncio.sleep(gap_ms / 1e3)
            t0, c0 = time.perf_counter(), time.process_time()
            await sess.evaluate({"theta": theta, "theta_star": prop, "public": np.zeros(batch)}, batch)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            if k >= warmup:
                lat.append(dt)
                cpu.append(dc)
        assert sess.last_transcript is not None
        rounds = sess.last_transcript.rounds
        if probe_rounds and shape.exchange_rounds:  # the exchange-round floor over the daemons' own links
            link = stats_ms(await sess.probe_links(probe_rounds + 1, shape.peer_payload_words))
    finally:
        await sess.close()
    st = stats_ms(lat)
    rec: dict[str, Any] = {
        "suite": "network",
        "mode": mode,
        "topology": topology,
        "precompute": precompute if mode == "sign" else "",
        **{"precompute_ahead": sess.spec.precompute_ahead, "gap_ms": gap_ms, "security": security},
        "m": lc.m,
        "t": sess.spec.t,
        "batch": batch,
        "decisions_per_s": round(batch * len(lat) / sum(lat), 1),
        "rounds": rounds,
        "exchange_rounds": shape.exchange_rounds,
        "messages": shape.messages,
        "bytes_per_decision": round(shape.bytes / batch, 1),
        "latency_ms_median": st.median_ms,
        "latency_ms_p90": st.p90_ms,
        "batches_timed": len(lat),
        "coordinator_cpu_ms": round(statistics.median(cpu) * 1e3, 3),
    }
    if link is not None:
        rec["link_round_ms_median"], rec["link_round_ms_p90"] = link.median_ms, link.p90_ms
    rec.update(_audit_timings(lc.workdir, lc.m, sess.session_id, warmup + 1))
    if "party_handler_ms" in rec:  # the coordinator's side: fan-out, both gRPC hops, encode and decode
        rec["outside_parties_ms"] = round(st.median_ms - rec["party_handler_ms"], 3)
    if "party_cpu_ms_sum" in rec:
        # CPU of every process of the run (parties + coordinator) spread over all cores: a lower bound on
        # the latency of this machine, however good the transport; near latency_ms_median = CPU-bound
        total = rec["party_cpu_ms_sum"] + rec["coordinator_cpu_ms"]
        rec["cpu_bound_ms"] = round(total / (os.cpu_count() or 1), 3)
    if rounds != shape.rounds:
        rec["note"] = f"daemons reported {rounds} rounds, the in-memory run {shape.rounds}"
    rec.update(engine_share(rec, precompute))
    return rec


def engine_share(rec: dict[str, Any], precompute: str, seconds: float = 1.0) -> dict[str, float]:
    """The same protocol (mode, m, batch, sign precompute) run by the engine alone, all m parties in this
    process (``confar bench hss``'s code), right after the daemons' run: its CPU per step divided by m is one
    party's share of the engine, against which the daemon's CPU per step is set (issue 26's target: at most
    3x). A daemon's CPU is that of its whole process during its handler (the audit line's ``cpu_ms``)."""
    if "party_cpu_ms_sum" not in rec:
        return {}
    m, batch = int(rec["m"]), int(rec["batch"])
    eng = bench_one(rec["mode"], m, batch, seconds, precompute=precompute if rec["mode"] == "sign" else None)
    share = batch / float(eng["decisions_per_cpu_s"]) / m * 1e3
    party = float(rec["party_cpu_ms_sum"]) / m
    return {
        "engine_cpu_ms_per_party": round(share, 3),
        "party_cpu_ms_mean": round(party, 3),
        "party_cpu_over_engine": round(party / share, 2),
    }


# ---- floor ------------------------------------------------------------------------------------------------


def _floor_record(
    kind: str, mode: str, topology: str, m: int, batch: int, size: dict[str, int], st: Any
) -> dict[str, Any]:
    if kind == "fanout":
        messages, nbytes = 2 * m, m * (size["request_bytes"] + size["reply_bytes"])
    else:
        messages, nbytes = m * (m - 1), m * (m - 1) * size["message_bytes"]
    return {
        "suite": "floor",
        "floor": kind,
        "mode": mode,
        "topology": topology,
        "m": m,
        "batch": batch,
        "decisions_per_s": round(batch / (st.median_ms / 1e3), 1) if st.median_ms > 0 else None,
        "rounds": 1,
        "messages": messages,
        "bytes_per_decision": round(nbytes / batch, 1),
        "latency_ms_median": st.median_ms,
        "latency_ms_p90": st.p90_ms,
        "samples": st.samples,
        **size,
    }


async def bench_floor(
    fc: FloorCluster,
    m: int,
    shapes: dict[tuple[str, int], Shape],
    topologies: list[str],
    repeats: int,
    tls_floor: bool = False,
) -> list[dict[str, Any]]:
    """Fan-out and exchange-round floors at each configuration's sizes (identical sizes measured once)."""
    await fc.connect()
    records: list[dict[str, Any]] = []
    fan_cache: dict[tuple[int, int], Any] = {}
    ex_cache: dict[tuple[str, int], Any] = {}
    try:
        for (mode, batch), sh in shapes.items():
            key = (sh.request_bytes, sh.reply_bytes)
            if key not in fan_cache:
                fan_cache[key] = await fc.fanout(sh.request_bytes, sh.reply_bytes, repeats)
            size = {"request_bytes": sh.request_bytes, "reply_bytes": sh.reply_bytes}
            records.append(_floor_record("fanout", mode, "direct", m, batch, size, fan_cache[key]))
        extra = ["relay-packed"] if "relay" in topologies else []  # see bench_floor
        extra += ["mesh-tls"] if "mesh" in topologies and tls_floor else []  # diagnostic only
        for topology in topologies + extra:
            for (mode, batch), sh in shapes.items():
                if sh.exchange_rounds == 0:
                    continue
                ekey = (topology, sh.peer_message_bytes)
                if ekey not in ex_cache:
                    ex_cache[ekey] = await fc.exchange(topology, sh.peer_message_bytes, repeats)
                size = {"message_bytes": sh.peer_message_bytes}
                records.append(_floor_record("exchange", mode, topology, m, batch, size, ex_cache[ekey]))
    finally:
        await fc.close()
    return records


def attach_floors(records: list[dict[str, Any]]) -> None:
    """Give each network record floor_ms = fan-out + exchange_rounds x exchange round, and the ratio."""
    fan = {(r["m"], r["batch"], r["mode"]): r for r in records if r.get("floor") == "fanout"}
    ex = {(r["m"], r["batch"], r["mode"], r["topology"]): r for r in records if r.get("floor") == "exchange"}
    for r in records:
        if r["suite"] != "network":
            continue
        f = fan.get((r["m"], r["batch"], r["mode"]))
        # the relay bundles a party's frames of a round each way (coordinator.relay): its floor is the
        # packed relay round
        topology = "relay-packed" if r["topology"] == "relay" else r["topology"]
        e = ex.get((r["m"], r["batch"], r["mode"], topology))
        if f is None or (r["exchange_rounds"] and e is None):
            continue
        floor = f["latency_ms_median"] + (r["exchange_rounds"] * e["latency_ms_median"] if e else 0.0)
        r["floor_ms"] = round(floor, 3)
        r["floor_ratio"] = round(r["latency_ms_median"] / floor, 3) if floor > 0 else None
        if "link_round_ms_median" in r:  # the same with the exchange round over the daemons' own links
            link = f["latency_ms_median"] + r["exchange_rounds"] * r["link_round_ms_median"]
            r["link_floor_ms"] = round(link, 3)
            r["link_floor_ratio"] = round(r["latency_ms_median"] / link, 3) if link > 0 else None


# ---- driver ---------------------------------------------------------------------------------------------


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x]


def _fmt(r: dict[str, Any]) -> str:
    if r["suite"] == "floor":
        what = f"floor/{r['floor']}"
        size = (
            f"req={r['request_bytes']}B rep={r['reply_bytes']}B"
            if r["floor"] == "fanout"
            else f"msg={r['message_bytes']}B"
        )
        return (
            f"{what:15s} {r['topology']:6s} m={r['m']} batch={r['batch']:5d} (as {r['mode']:7s}) "
            f"median {r['latency_ms_median']:8.2f} ms  p90 {r['latency_ms_p90']:8.2f} ms  {size}"
        )
    extra = ""
    if "party_compute_ms" in r:
        extra += (
            f"  slowest party: compute {r['party_compute_ms']:.1f} ms,"
            f" handler {r['party_handler_ms']:.1f} ms; cpu/cores {r['cpu_bound_ms']:.1f} ms"
        )
    if "party_cpu_over_engine" in r:
        extra += (
            f"\n    CPU per party and step: daemon {r['party_cpu_ms_mean']:.2f} ms, its share of the engine"
            f" alone {r['engine_cpu_ms_per_party']:.2f} ms (x{r['party_cpu_over_engine']:.1f})"
        )
    if "party_send_ms_mean" in r:
        extra += (
            f"\n    mean party: handler {r['party_handler_ms_mean']:.1f}"
            f" = compute {r['party_compute_ms_mean']:.1f} + charge {r['party_charge_ms_mean']:.1f}"
            f" + send {r['party_send_ms_mean']:.1f}"
            f" + wait {r['party_wait_ms_mean']:.1f} + rest; outside the parties' handlers"
            f" {r['outside_parties_ms']:.1f} ms"
        )
    if "floor_ratio" in r:
        extra += f"  floor {r['floor_ms']:.2f} ms (x{r['floor_ratio']:.2f})"
    if "link_round_ms_median" in r:
        extra += f"\n    exchange round over the daemons' links: median {r['link_round_ms_median']:.2f} ms"
        if "link_floor_ratio" in r:
            extra += f"; fan-out + rounds x that: {r['link_floor_ms']:.2f} ms (x{r['link_floor_ratio']:.2f})"
    return (
        f"{r['mode']:7s} {r['topology']:6s} m={r['m']} batch={r['batch']:5d} "
        f"{r['decisions_per_s']:>10.1f} dec/s  median {r['latency_ms_median']:8.2f} ms  "
        f"p90 {r['latency_ms_p90']:8.2f} ms  rounds={r['rounds']}"
        f"{' (precompute ahead)' if r.get('precompute_ahead') else ''}{extra}"
    )


def print_ratios(records: list[dict[str, Any]]) -> None:
    sign = [r for r in records if r["suite"] == "network" and r["mode"] == "sign" and "floor_ms" in r]
    if not sign:
        return
    m = 7 if any(r["m"] == 7 for r in sign) else max(r["m"] for r in sign)
    print(f"\nsign at m = {m}: measured latency / (fan-out floor + exchange_rounds x exchange-round floor)")
    for r in sorted((r for r in sign if r["m"] == m), key=lambda r: (r["batch"], r["topology"])):
        print(
            f"  {r['topology']:6s} batch={r['batch']:5d}: {r['latency_ms_median']:8.2f} ms / "
            f"{r['floor_ms']:7.2f} ms = {r['floor_ratio']:.2f}  (exchange_rounds={r['exchange_rounds']})"
        )


async def _run_m(
    lc: LocalConsortium,
    modes: list[str],
    topologies: list[str],
    batches: list[int],
    shapes: dict[tuple[str, int], Shape],
    warmup: int,
    repeats: int,
    options: ProtocolOptions,
) -> list[dict[str, Any]]:
    out = []
    async with Coordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=300.0) as coord:
        for topology in topologies:
            for mode in modes:
                for batch in batches:
                    rec = await bench_protocol(
                        coord,
                        lc,
                        mode,
                        topology,
                        batch,
                        shapes[(mode, batch)],
                        warmup,
                        repeats,
                        options,
                    )
                    print(_fmt(rec), flush=True)
                    out.append(rec)
    return out


def run(args: argparse.Namespace) -> int:
    q = args.quick
    try:
        parties = _ints(args.parties or ("3" if q else "3,5,7"))
        batches = _ints(args.batches or ("1,100" if q else "1,100,1000"))
    except ValueError as exc:
        print(
            f"confar bench network: --parties/--batches must be comma-separated integers ({exc})",
            file=sys.stderr,
        )
        return 2
    modes = [s for s in args.modes.split(",") if s]
    topologies = [s for s in args.topologies.split(",") if s]
    repeats = args.repeats if args.repeats is not None else (5 if q else 20)
    warmup = args.warmup if args.warmup is not None else (1 if q else 3)
    floor_repeats = args.floor_repeats if args.floor_repeats is not None else (20 if q else 100)
    probe_rounds = args.probe_rounds if args.probe_rounds is not None else (10 if q else 50)
    bad = [x for x in modes if x not in TERMS_MODES] + [x for x in topologies if x not in TOPOLOGIES]
    if bad or not modes or not topologies:
        print(
            f"confar bench network: unknown modes/topologies {bad}; expected {TERMS_MODES} / {TOPOLOGIES}",
            file=sys.stderr,
        )
        return 2
    bad_probe = not 0 <= probe_rounds < PROBE_MAX_ROUNDS
    bad_size = any(not 3 <= m <= 15 for m in parties) or any(b < 1 for b in batches)
    if bad_size or repeats < 1 or warmup < 0 or bad_probe:
        print(
            "confar bench network: need m in 3..15, batches >= 1, --repeats >= 1, --warmup >= 0, "
            f"--probe-rounds in 0..{PROBE_MAX_ROUNDS - 1}",
            file=sys.stderr,
        )
        return 2
    records: list[dict[str, Any]] = []
    try:
        for m in parties:
            shapes = {
                (mode, b): protocol_shape(mode, m, b, args.sign_precompute) for mode in modes for b in batches
            }
            rng = np.random.default_rng(m)
            data = [rng.normal(1.0, 1.0, RECORDS_PER_PARTY) for _ in range(m)]
            t0 = time.perf_counter()
            with LocalConsortium.start(m, data, round_timeout_s=300.0, startup_timeout_s=120.0) as lc:
                print(f"m={m}: {m} daemons up in {time.perf_counter() - t0:.1f} s", flush=True)
                records += asyncio.run(
                    _run_m(
                        lc,
                        modes,
                        topologies,
                        batches,
                        shapes,
                        warmup,
                        repeats,
                        ProtocolOptions(
                            args.sign_precompute, probe_rounds, args.precompute_ahead, args.gap_ms
                        ),
                    )
                )
                assert lc.certs is not None
                with FloorCluster.processes(m, lc.certs) as fc:
                    floor = asyncio.run(
                        bench_floor(fc, m, shapes, topologies, floor_repeats, args.tls_floor)
                    )
                for r in floor:
                    print(_fmt(r), flush=True)
                records += floor
    except (SessionError, LaunchError, RuntimeError) as exc:
        print(f"confar bench network: {exc}", file=sys.stderr)
        return 1
    attach_floors(records)
    print()
    for r in records:
        if r["suite"] == "network":
            print(_fmt(r))
    print_ratios(records)
    if args.json:
        write_records(args.json, records)
    return 0
