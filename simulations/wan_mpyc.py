"""``confar bench wan --mpyc``: MPyC 0.11 doing our comparison on the same emulated WAN as our daemons.

The MPyC program is :mod:`simulations.bench_mpyc`'s worker, unchanged (same protocol, inputs, timing and
record); only where the m processes run and how they reach each other differs. MPyC party k (0-based)
runs in the namespace of our party k + 1 (:class:`~simulations.wan_net.WanNet`, one per m) and listens on
that namespace's veth address, port :data:`MPYC_PORT` (the worker binds its own ``-P`` host).

How MPyC 0.11 connects (``mpyc.runtime.Runtime.start``): party k listens on the port of its own ``-P``
entry (for every party j < k, which dials it) and dials ``host:port`` of the ``-P`` entry of every party
q > k; so each unordered pair has exactly one TCP connection, dialled by the lower pid, as in our daemons
(i < q dials). Party k's ``-P`` list therefore names, for q > k, 127.0.0.1:``MPYC_PROXY_BASE`` + q in k's
own namespace: a :class:`~simulations.wan_net.DelayProxy` route to party q's veth address held rtt/2 per
direction, as ours. Entries for q < k are never dialled by k; they name the same loopback ports, where
nothing listens in k's namespace, so nothing could reach a peer without the delay.

The proxies and MPyC processes are started, stopped and the namespaces removed by the same code as ours
(``WanNet.create``, :class:`simulations.bench_wan.Started`, ``spawn_proxy``).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from simulations.bench_records import cell
from simulations.wan_net import Route, Started, WanNet, party_ip, spawn_proxy, wait_files

MPYC_PORT = 7100  # MPyC party k listens on party_ip(k + 1):7100
MPYC_PROXY_BASE = 17100  # 127.0.0.1:17100+q in a namespace: the delayed link to MPyC party q (0-based)


def mpyc_listen(k: int) -> tuple[str, int]:
    """Where MPyC party k (0-based) listens: the veth address of our party k + 1's namespace."""
    return party_ip(k + 1), MPYC_PORT


def mpyc_routes(m: int, rtt_ms: float) -> list[list[Route]]:
    """Per MPyC party k, its namespace's proxy routes: one per party q > k it dials, rtt/2 each way."""
    return [
        [Route(("127.0.0.1", MPYC_PROXY_BASE + q), mpyc_listen(q), rtt_ms / 2 / 1e3) for q in range(k + 1, m)]
        for k in range(m)
    ]


def mpyc_party_args(m: int, k: int) -> list[str]:
    """MPyC party k's address options: ``-P`` per party (its own: where it listens), then ``-I k``."""
    out: list[str] = []
    for q in range(m):
        host, port = mpyc_listen(k) if q == k else ("127.0.0.1", MPYC_PROXY_BASE + q)
        out += ["-P", f"{host}:{port}"]
    return [*out, "-I", str(k)]


def run_mpyc_wan(
    m: int,
    rtt_ms: float,
    batches: list[int],
    repeats: int,
    warmup: int,
    sec_param: int = 64,
    seed: int = 0,
    timeout_s: float = 900.0,
) -> list[dict[str, Any]]:
    """bench_mpyc's program on m processes in the WAN's namespaces; one record per batch size."""
    from simulations.bench_mpyc import MpycError, MpycRun, fmt_mpyc, mpyc_record, mpyc_version, run_parties

    if mpyc_version() is None:
        from simulations.bench_mpyc import EXTRA_HINT

        raise MpycError(f"mpyc is not installed; {EXTRA_HINT}")
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="confar-wan-mpyc-")))
        net = stack.enter_context(WanNet.create(m))
        started = Started()
        for k, routes in enumerate(mpyc_routes(m, rtt_ms)):
            if routes:
                spawn_proxy(net, net.party_ns(k + 1), routes, workdir, f"mpyc{k}", started)
        wait_files(started.ready, started.procs, started.logs, 60.0)

        def launch(k: int, cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
            return net.spawn(net.party_ns(k + 1), cmd, log, env)

        t0 = time.perf_counter()
        docs = run_parties(
            m,
            MpycRun(
                batches=batches,
                repeats=repeats,
                warmup=warmup,
                sec_param=sec_param,
                seed=seed,
                timeout_s=timeout_s,
                party_args=lambda k: mpyc_party_args(m, k),
                launch=launch,
            ),
        )
        wall = time.perf_counter() - t0
        transport = f"TCP through the WAN's delay proxies ({rtt_ms:g} ms RTT, rtt/2 each way), no TLS"
        out = []
        for i, batch in enumerate(batches):
            rec = mpyc_record(m, batch, [d["results"][i] for d in docs], docs[0], wall, transport)
            rec.update(
                suite="wan-mpyc",
                rtt_ms=rtt_ms,
                latency_rtts=round(rec["latency_ms_median"] / rtt_ms, 2) if rtt_ms > 0 else None,
            )
            print(f"wan {fmt_mpyc(rec)}  (= {rec['latency_rtts']} RTT)", flush=True)
            out.append(rec)
        return out


def compare(mpyc: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per MPyC record and each security our sign ran under on that WAN, our sign record (mesh) of the same
    (m, batch, RTT) and ours / MPyC decisions/s; one row with ``ours_*`` None when we have none. MPyC runs
    semi-honest only: an abort row compares our abort with its semi-honest."""
    rows = []
    for r in mpyc:
        mine = [
            o
            for o in ours
            if o.get("suite") == "wan"
            and o.get("mode") == "sign"
            and o.get("topology") == "mesh"
            and (o["m"], o["batch"], o["rtt_ms"]) == (r["m"], r["batch"], r["rtt_ms"])
        ]
        firsts: dict[str, dict[str, Any] | None] = {}
        for o in mine:
            firsts.setdefault(o.get("security", "semi-honest"), o)
        for security, first in (firsts or {"semi-honest": None}).items():
            rows.append(_row(r, security, first))
    return rows


def _row(r: dict[str, Any], security: str, o: dict[str, Any] | None) -> dict[str, Any]:
    ref = float(r["decisions_per_s"])
    ours_v = float(o["decisions_per_s"]) if o else None
    return {
        "suite": "wan-compare",
        "m": r["m"],
        "batch": r["batch"],
        "rtt_ms": r["rtt_ms"],
        "security": security,
        "mpyc_decisions_per_s": ref,
        "mpyc_latency_ms_median": r["latency_ms_median"],
        "mpyc_latency_rtts": r["latency_rtts"],
        "mpyc_mismatches": r["mismatches"],
        "ours_precompute": o.get("precompute") if o else None,
        "ours_precompute_ahead": o.get("precompute_ahead") if o else None,
        "ours_rounds": o.get("rounds") if o else None,
        "ours_decisions_per_s": ours_v,
        "ours_latency_ms_median": o["latency_ms_median"] if o else None,
        "ours_latency_rtts": o["latency_rtts"] if o else None,
        "ours_over_mpyc": round(ours_v / ref, 2) if ours_v is not None and ref > 0 else None,
    }


def print_comparison(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print(
        "\nsign on the WAN: MPyC 0.11 (TCP, no TLS, semi-honest) vs ours (daemons with mTLS, mesh), same "
        "proxies and RTT"
    )
    print(
        f"{'m':>3} {'batch':>6} {'RTT ms':>6} {'MPyC dec/s':>11} {'RTTs':>6} {'ours security':>13} "
        f"{'rounds':>6} {'ours dec/s':>11} {'RTTs':>6} {'ours/MPyC':>9}"
    )

    for r in rows:
        print(
            f"{r['m']:>3} {r['batch']:>6} {r['rtt_ms']:>6g} {cell(r['mpyc_decisions_per_s'], 11)} "
            f"{cell(r['mpyc_latency_rtts'], 6, 2)} {r.get('security', 'semi-honest'):>13} "
            f"{cell(r.get('ours_rounds'), 6, 0)} {cell(r['ours_decisions_per_s'], 11)} "
            f"{cell(r['ours_latency_rtts'], 6, 2)} {cell(r['ours_over_mpyc'], 9, 2)}"
        )
