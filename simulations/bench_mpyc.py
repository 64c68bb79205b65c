"""``confar bench mpyc``: MPyC 0.11 doing the comparison our ``sign`` mode does, on m real processes.

The program (this module run as ``python -m simulations.bench_mpyc`` with MPyC's own ``-P``/``-I``
options and a spec file named by ``CONFAR_MPYC_SPEC``) is the same job as one batch of our sign mode:
each of the m parties inputs a secret vector of fixed-point values (``mpc.SecFxp(l=42, f=20)``: the bit
length and fraction bits of our ``FixedPoint()`` default sums), the parties add the m vectors and reveal
only the bits ``[sum >= 0]`` (vectorised secure arrays, ``mpc.np_less`` under the hood: MPyC's LTZ a la
Toft). Threshold t = (m-1)//2 as ours; statistical security parameter ``-K`` 64 by default (our kappa).
The m processes talk plain TCP on 127.0.0.1 (MPyC's default transport, no TLS; ours is gRPC with
mutual TLS); every party's listening socket is bound to 127.0.0.1 only.

Timing: per batch, from the party's ``mpc.input`` call to the revealed bits, each party on its own clock;
the latency of a batch is the slowest party's. Inputs come from a public seed (benchmark data, not
secrets) so that every party can check the revealed bits against the plaintext: ``mismatches`` must be 0.

The same command also measures our sign protocol for the same m and batches (unless ``--no-ours``): over
``confar-party`` daemons on loopback (mesh and relay, inline precompute; ``--pooled``: mesh pooled too) and
in one process (``confar bench hss``, inline and pooled), and prints ours/MPyC. ``confar bench all`` passes
its own records instead. Needs the ``bench`` extra (``pip install -e '.[bench]'``: mpyc 0.11 and gmpy2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from simulations.bench_records import cell

HELP = "MPyC 0.11 secure comparison [sum >= 0] on m local processes, side by side with our sign protocol"
SPEC_ENV = "CONFAR_MPYC_SPEC"
MPYC_VERSION = "0.11"
FRAC_BITS = 20  # FixedPoint() default
BIT_LENGTH = 42  # k of FixedPoint() default sums (with sign)
EXTRA_HINT = "install the bench extra: .venv/bin/pip install -e '.[bench]' (mpyc==0.11, gmpy2)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, help="write the records to this JSON file")
    p.add_argument("--parties", nargs="+", help="m values, space- or comma-separated (default 3 5 7)")
    p.add_argument("--batch", nargs="+", help="batch sizes, space- or comma-separated (default 1 100 1000)")
    p.add_argument("--repeats", type=int, help="timed batches per configuration (default 10; --quick: 2)")
    p.add_argument("--warmup", type=int, help="untimed batches per configuration (default 2; --quick: 1)")
    p.add_argument("--sec-param", type=int, default=64, help="MPyC -K statistical security (default 64)")
    p.add_argument("--seed", type=int, default=0, help="public seed of the benchmark inputs")
    p.add_argument("--no-ours", action="store_true", help="measure MPyC only (no side-by-side)")
    p.add_argument(
        "--ours-json",
        type=Path,
        nargs="*",
        default=[],
        help="take our figures from these confar bench network / hss JSON files instead of measuring",
    )
    p.add_argument(
        "--pooled",
        action="store_true",
        help="also ours over the daemons (mesh) with the pooled precompute (9 rounds, each root once)",
    )
    p.add_argument(
        "--abort",
        action="store_true",
        help="also ours over the daemons (mesh) with security 'abort' (issue 25), side by side",
    )
    p.add_argument("--quick", action="store_true", help="tiny run: m=3, batches 1,10, 2 repeats")


def ints(tokens: list[str] | None, default: list[int]) -> list[int]:
    """Integers from space- and/or comma-separated tokens (``["3", "5,7"]`` -> [3, 5, 7])."""
    if not tokens:
        return list(default)
    return [int(x) for tok in tokens for x in tok.split(",") if x]


def mpyc_version() -> str | None:
    """The installed MPyC version, or None (importing ``mpyc`` alone starts no runtime)."""
    try:
        import mpyc
    except ImportError:
        return None
    return str(mpyc.__version__)


# ---- the MPyC program (worker side) -----------------------------------------------------------------------


def benchmark_inputs(seed: int, m: int, batch: int, rep: int) -> npt.NDArray[np.int64]:
    """Every party's terms of one batch, in units of 2^-20 (public benchmark data, shape (m, batch))."""
    g = np.random.default_rng([seed, m, batch, rep])
    return np.rint(g.normal(-1.0 / m, 2.0 / np.sqrt(m), (m, batch)) * 2.0**FRAC_BITS).astype(np.int64)


def _bytes_sent(mpc: Any) -> int:
    return sum(int(p.protocol.nbytes_sent) for p in mpc.parties if p.pid != mpc.pid and p.protocol)


async def _worker_main(mpc: Any, spec: dict[str, Any]) -> list[dict[str, Any]]:
    await mpc.start()
    secfxp = mpc.SecFxp(BIT_LENGTH, FRAC_BITS)
    me, m = int(mpc.pid), len(mpc.parties)
    out: list[dict[str, Any]] = []
    runs: list[tuple[int, list[npt.NDArray[np.int64]] | None]]
    if spec.get("inputs") is not None:
        fixed = np.asarray(spec["inputs"], dtype=np.int64)
        runs = [(fixed.shape[2], list(fixed))]
    else:
        runs = [(int(b), None) for b in spec["batches"]]
    for batch, given in runs:
        reps = len(given) if given is not None else spec["warmup"] + spec["repeats"]
        warm = 0 if given is not None else spec["warmup"]
        lat: list[float] = []
        bits_out: list[list[int]] = []
        mismatches, nbytes = 0, 0
        for rep in range(reps):
            terms = given[rep] if given is not None else benchmark_inputs(spec["seed"], m, batch, rep)
            mine = terms[me].astype(np.float64) / 2.0**FRAC_BITS  # exact: |k| < 2^53
            b0 = _bytes_sent(mpc)
            t0 = time.perf_counter()
            xs = mpc.input(secfxp.array(mine))
            s = xs[0]
            for a in xs[1:]:
                s = s + a
            revealed = await mpc.output(s >= 0)
            dt = time.perf_counter() - t0
            bits = np.rint(np.asarray(revealed, dtype=np.float64)).astype(np.int64).reshape(-1)
            mismatches += int(np.count_nonzero(bits != (terms.sum(axis=0) >= 0)))
            if given is not None:
                bits_out.append([int(v) for v in bits])
            if rep >= warm:
                lat.append(dt)
                nbytes += _bytes_sent(mpc) - b0
        out.append(
            {
                "batch": batch,
                "latencies_s": lat,
                "mismatches": mismatches,
                "bytes_sent": nbytes,
                "bits": bits_out,
            }
        )
    await mpc.shutdown()
    return out


def _worker(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    from mpyc.runtime import mpc  # parses sys.argv (-P ... -I i -K k) at import

    loop = mpc._loop
    create_server = loop.create_server

    own_host = str(mpc.parties[mpc.pid].host)  # this party's own -P host: 127.0.0.1, or its veth address

    async def create_server_own_host(factory: Any, *args: Any, **kwargs: Any) -> Any:
        # MPyC binds its listening socket to every interface; our rule: a server listens on its own -P host
        # only (127.0.0.1 on loopback; its namespace's veth address in confar bench wan --mpyc)
        if not args and kwargs.get("host") is None:
            kwargs["host"] = own_host
        return await create_server(factory, *args, **kwargs)

    loop.create_server = create_server_own_host
    results = mpc.run(_worker_main(mpc, spec))
    try:
        import gmpy2  # noqa: F401

        have_gmpy2 = True
    except ImportError:
        have_gmpy2 = False
    me = int(mpc.pid)
    doc = {"pid": me, "results": results, "gmpy2": have_gmpy2, "sec_param": mpc.options.sec_param}
    Path(spec["out_dir"], f"party-{me}.json").write_text(json.dumps(doc))
    return 0


# ---- launcher (calling side) ------------------------------------------------------------------------------


class MpycError(RuntimeError):
    """An MPyC party failed or timed out (the message has the tail of its log)."""


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait(5)


Launch = Callable[[int, list[str], dict[str, str], Path], "subprocess.Popen[bytes]"]


def _launch_local(_i: int, cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as fh:
        return subprocess.Popen(
            cmd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=str(Path(__file__).resolve().parent.parent),
            env=env,
        )


@dataclass(frozen=True)
class MpycRun:
    """One MPyC run's settings: batch sizes or the inputs themselves, repeats and warm-up, the security
    parameter, the seed, the timeout, each party's extra arguments and how its processes are launched."""

    batches: list[int] | None = None
    inputs: npt.ArrayLike | None = None
    repeats: int = 10
    warmup: int = 2
    sec_param: int = 64
    seed: int = 0
    timeout_s: float = 600.0
    party_args: Callable[[int], list[str]] | None = None
    launch: Launch | None = None


def run_parties(m: int, settings: MpycRun | None = None) -> list[dict[str, Any]]:
    """Run the MPyC program on m processes; returns each party's result document (sorted by pid).

    Either ``batches`` (timed random batches) or ``inputs`` (integer terms in units of 2^-20, shape
    (reps, m, batch); one untimed check, bits returned) must be given. ``party_args(i)``: party i's MPyC
    address options (default: ``-P 127.0.0.1:<free port>`` for every party, then ``-I i``); ``launch``
    starts a party's command (default: a local process; ``confar bench wan --mpyc``: in its namespace).
    """
    _s = settings if settings is not None else MpycRun()
    batches, inputs, repeats = _s.batches, _s.inputs, _s.repeats
    warmup, sec_param, seed = _s.warmup, _s.sec_param, _s.seed
    timeout_s, party_args, launch = _s.timeout_s, _s.party_args, _s.launch
    if mpyc_version() is None:
        raise MpycError(f"mpyc is not installed; {EXTRA_HINT}")
    if m < 2:
        raise ValueError(f"MPyC comparison needs m >= 2 processes, got m = {m}")
    spec: dict[str, Any] = {"batches": batches or [], "repeats": repeats, "warmup": warmup, "seed": seed}
    if inputs is not None:
        arr = np.asarray(inputs, dtype=np.int64)
        if arr.ndim != 3 or arr.shape[1] != m:
            raise ValueError(f"inputs must have shape (reps, m={m}, batch), got {arr.shape}")
        spec["inputs"] = arr.tolist()
    elif not batches:
        raise ValueError("give batches or inputs")
    with tempfile.TemporaryDirectory(prefix="confar-mpyc-") as tmp:
        spec["out_dir"] = tmp
        spec_path = Path(tmp, "spec.json")
        spec_path.write_text(json.dumps(spec))
        if party_args is None:
            addrs = [a for port in _free_ports(m) for a in ("-P", f"127.0.0.1:{port}")]
            party_args = lambda i: [*addrs, "-I", str(i)]  # noqa: E731
        env = {**os.environ, SPEC_ENV: str(spec_path)}
        procs: list[subprocess.Popen[bytes]] = []
        logs = [Path(tmp, f"party-{i}.log") for i in range(m)]
        try:
            for i in range(m):
                cmd = [sys.executable, "-m", "simulations.bench_mpyc", *party_args(i), "-K", str(sec_param)]
                procs.append((launch or _launch_local)(i, cmd, env, logs[i]))
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs):  # a party that fails leaves the others waiting
                for i, p in enumerate(procs):
                    if p.poll() not in (None, 0):
                        raise MpycError(f"MPyC party {i} exited with code {p.returncode}:\n{_tail(logs[i])}")
                if time.monotonic() > deadline:
                    late = [i for i, p in enumerate(procs) if p.poll() is None]
                    raise MpycError(
                        f"MPyC parties {late} did not finish in {timeout_s:g} s:\n{_tail(logs[late[0]])}"
                    )
                time.sleep(0.02)
            for i, p in enumerate(procs):
                if p.returncode != 0:
                    raise MpycError(f"MPyC party {i} exited with code {p.returncode}:\n{_tail(logs[i])}")
        finally:
            _stop(procs)
        return [json.loads(Path(tmp, f"party-{i}.json").read_text()) for i in range(m)]


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def mpyc_records(
    parties: list[int], batches: list[int], repeats: int, warmup: int, sec_param: int = 64, seed: int = 0
) -> list[dict[str, Any]]:
    """One record per (m, batch): decisions/s, median/p90 latency (slowest party), bytes, mismatches."""
    records = []
    for m in parties:
        t0 = time.perf_counter()
        docs = run_parties(
            m,
            MpycRun(
                batches=batches,
                repeats=repeats,
                warmup=warmup,
                sec_param=sec_param,
                seed=seed,
            ),
        )
        wall = time.perf_counter() - t0
        for k, batch in enumerate(batches):
            rec = mpyc_record(m, batch, [d["results"][k] for d in docs], docs[0], wall)
            records.append(rec)
            print(fmt_mpyc(rec), flush=True)
    return records


def mpyc_record(
    m: int,
    batch: int,
    per_party: list[dict[str, Any]],
    doc0: dict[str, Any],
    wall: float,
    transport: str = "TCP on 127.0.0.1, no TLS (MPyC default)",
) -> dict[str, Any]:
    """The record of one (m, batch) from every party's result (latency of a batch: the slowest party's)."""
    lat = [max(v) for v in zip(*(r["latencies_s"] for r in per_party), strict=True)]
    q = np.quantile(lat, [0.5, 0.9])
    return {
        "suite": "mpyc",
        "mpyc": mpyc_version(),
        "mode": "sign",
        "m": m,
        "t": (m - 1) // 2,
        "batch": batch,
        "bit_length": BIT_LENGTH,
        "frac_bits": FRAC_BITS,
        "sec_param": doc0["sec_param"],
        "gmpy2": doc0["gmpy2"],
        "transport": transport,
        "decisions_per_s": round(batch * len(lat) / sum(lat), 1),
        "latency_ms_median": round(float(q[0]) * 1e3, 3),
        "latency_ms_p90": round(float(q[1]) * 1e3, 3),
        "bytes_per_decision": round(sum(r["bytes_sent"] for r in per_party) / (batch * len(lat)), 1),
        "mismatches": sum(r["mismatches"] for r in per_party),
        "batches_timed": len(lat),
        "process_wall_s": round(wall, 2),
    }


def fmt_mpyc(rec: dict[str, Any]) -> str:
    return (
        f"mpyc    m={rec['m']} batch={rec['batch']:5d} {rec['decisions_per_s']:>10.1f} dec/s  "
        f"median {rec['latency_ms_median']:8.2f} ms  p90 {rec['latency_ms_p90']:8.2f} ms  "
        f"bytes/decision={rec['bytes_per_decision']}  mismatches={rec['mismatches']}"
    )


# ---- ours, for the side-by-side -------------------------------------------------------------------------


def ours_records(
    parties: list[int],
    batches: list[int],
    repeats: int,
    warmup: int,
    seconds: float,
    abort: bool = False,
    pooled: bool = False,
) -> list[Any]:
    """Our sign protocol for the same (m, batch): daemons on loopback (mesh and relay, as bench network) and
    hss; ``abort``: also over the daemons (mesh) with security "abort" (issue 25); ``pooled``: also over the
    daemons (mesh) with the pooled precompute."""
    from coordinator.api import Coordinator
    from simulations.bench_hss import bench_one
    from simulations.bench_network import RECORDS_PER_PARTY, ProtocolOptions, bench_protocol, protocol_shape
    from simulations.launcher import LocalConsortium

    out: list[dict[str, Any]] = []
    for m in parties:
        for batch in batches:
            for pooled in (False, True):
                out.append(bench_one("sign", m, batch, seconds, pooled))
        shapes = {b: protocol_shape("sign", m, b) for b in batches}
        abort_shapes = {b: protocol_shape("sign", m, b, security="abort") for b in batches} if abort else {}
        pool_shapes = {b: protocol_shape("sign", m, b, "pooled") for b in batches} if pooled else {}
        rng = np.random.default_rng(m)
        data = [rng.normal(1.0, 1.0, RECORDS_PER_PARTY) for _ in range(m)]

        async def go(
            lc: LocalConsortium,
            shapes: dict[int, Any],
            abort_shapes: dict[int, Any],
            pool_shapes: dict[int, Any],
        ) -> list[dict[str, Any]]:
            recs = []
            async with Coordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=300.0) as coord:
                for topology in ("mesh", "relay"):
                    for b in batches:
                        recs.append(
                            await bench_protocol(coord, lc, "sign", topology, b, shapes[b], warmup, repeats)
                        )
                for b in pool_shapes:
                    rec = await bench_protocol(
                        coord,
                        lc,
                        "sign",
                        "mesh",
                        b,
                        pool_shapes[b],
                        warmup,
                        repeats,
                        ProtocolOptions(
                            precompute="pooled",
                        ),
                    )
                    recs.append(rec)
                for b in abort_shapes:
                    rec = await bench_protocol(
                        coord,
                        lc,
                        "sign",
                        "mesh",
                        b,
                        abort_shapes[b],
                        warmup,
                        repeats,
                        ProtocolOptions(
                            security="abort",
                        ),
                    )
                    recs.append(rec)
            return recs

        with LocalConsortium.start(m, data, round_timeout_s=300.0, startup_timeout_s=120.0) as lc:
            out += asyncio.run(go(lc, shapes, abort_shapes, pool_shapes))
    return out


_PICK_DEFAULTS = {"security": "semi-honest", "precompute": "inline"}  # fields older records may lack


def compare(mpyc: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Side-by-side rows (sign only): ours / MPyC decisions-per-second ratios for each (m, batch)."""

    def pick(suite: str, m: int, batch: int, **kw: str) -> float | None:
        for r in ours:
            if r.get("suite") == suite and r.get("mode") == "sign" and r["m"] == m and r["batch"] == batch:
                if all(r.get(k, _PICK_DEFAULTS.get(k)) == v for k, v in kw.items()):
                    return float(r["decisions_per_s"])
        return None

    rows = []
    for r in mpyc:
        m, b, ref = r["m"], r["batch"], float(r["decisions_per_s"])
        row: dict[str, Any] = {"m": m, "batch": b, "mpyc_decisions_per_s": ref}
        for key, val in (
            ("ours_network_mesh", pick("network", m, b, topology="mesh", precompute="inline")),
            ("ours_network_relay", pick("network", m, b, topology="relay", precompute="inline")),
            ("ours_network_mesh_pooled", pick("network", m, b, topology="mesh", precompute="pooled")),
            ("ours_network_mesh_abort", pick("network", m, b, topology="mesh", security="abort")),
            ("ours_hss_inline", pick("hss", m, b, precompute="inline")),
            ("ours_hss_pooled", pick("hss", m, b, precompute="pooled")),
        ):
            row[f"{key}_decisions_per_s"] = val
            row[f"{key}_over_mpyc"] = round(val / ref, 2) if val is not None and ref > 0 else None
        rows.append(row)
    return rows


def print_comparison(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print(
        "\nsign, decisions/s: MPyC (m processes, TCP) vs ours (daemons with mTLS, mesh and relay; hss in one "
        "process)"
    )
    with_abort = any(r.get("ours_network_mesh_abort_over_mpyc") for r in rows)
    with_pooled = any(r.get("ours_network_mesh_pooled_over_mpyc") for r in rows)
    print(
        f"{'m':>3} {'batch':>6} {'MPyC':>10} {'ours mesh':>10} {'ratio':>6} {'ours relay':>10} {'ratio':>6}"
        f" {'hss inl':>10} {'ratio':>6} {'hss pool':>10} {'ratio':>6}"
        + (f" {'mesh pool':>10} {'ratio':>6}" if with_pooled else "")
        + (f" {'mesh abort':>10} {'ratio':>6}" if with_abort else "")
    )

    for r in rows:
        print(
            f"{r['m']:>3} {r['batch']:>6} {cell(r['mpyc_decisions_per_s'], 10)} "
            f"{cell(r['ours_network_mesh_decisions_per_s'], 10)} "
            f"{cell(r['ours_network_mesh_over_mpyc'], 6, 2)} "
            f"{cell(r.get('ours_network_relay_decisions_per_s'), 10)} "
            f"{cell(r.get('ours_network_relay_over_mpyc'), 6, 2)} "
            f"{cell(r['ours_hss_inline_decisions_per_s'], 10)} {cell(r['ours_hss_inline_over_mpyc'], 6, 2)} "
            f"{cell(r['ours_hss_pooled_decisions_per_s'], 10)} {cell(r['ours_hss_pooled_over_mpyc'], 6, 2)}"
            + (
                f" {cell(r['ours_network_mesh_pooled_decisions_per_s'], 10)} "
                f"{cell(r['ours_network_mesh_pooled_over_mpyc'], 6, 2)}"
                if with_pooled
                else ""
            )
            + (
                f" {cell(r['ours_network_mesh_abort_decisions_per_s'], 10)} "
                f"{cell(r['ours_network_mesh_abort_over_mpyc'], 6, 2)}"
                if r.get("ours_network_mesh_abort_decisions_per_s") is not None
                else ""
            )
        )


@dataclass(frozen=True)
class MpycSuiteOptions:
    """The side-by-side suite's options: MPyC's security parameter, the public seed, our records (or a run of
    ours for ours_seconds), and our session's security and precompute."""

    sec_param: int = 64
    seed: int = 0
    ours: list[dict[str, Any]] | None = None
    ours_seconds: float = 1.0
    abort: bool = False
    pooled: bool = False


def suite(
    parties: list[int],
    batches: list[int],
    repeats: int,
    warmup: int,
    settings: MpycSuiteOptions | None = None,
) -> dict[str, Any]:
    """The mpyc section of ``confar bench all``: ``{records, comparison}`` or ``{skipped: reason}``.

    ``ours`` None measures our sign protocol too; pass records (bench network / hss) to reuse them.
    """
    _s = settings if settings is not None else MpycSuiteOptions()
    sec_param, seed, ours = _s.sec_param, _s.seed, _s.ours
    ours_seconds, abort, pooled = _s.ours_seconds, _s.abort, _s.pooled
    if mpyc_version() is None:
        return {"skipped": f"mpyc is not installed; {EXTRA_HINT}"}
    recs = mpyc_records(parties, batches, repeats, warmup, sec_param, seed)
    if ours is None:
        ours = ours_records(parties, batches, repeats, warmup, ours_seconds, abort, pooled)
    rows = compare(recs, ours)
    print_comparison(rows)
    return {"records": recs, "ours": [r for r in ours if r.get("mode") == "sign"], "comparison": rows}


def run(args: argparse.Namespace) -> int:
    q = args.quick
    try:
        parties = ints(args.parties, [3] if q else [3, 5, 7])
        batches = ints(args.batch, [1, 10] if q else [1, 100, 1000])
    except ValueError as exc:
        print(f"confar bench mpyc: --parties/--batch must be integers ({exc})", file=sys.stderr)
        return 2
    repeats = args.repeats if args.repeats is not None else (2 if q else 10)
    warmup = args.warmup if args.warmup is not None else (1 if q else 2)
    if any(not 3 <= m <= 15 for m in parties) or any(b < 1 for b in batches) or repeats < 1 or warmup < 0:
        print(
            "confar bench mpyc: need m in 3..15, batches >= 1, --repeats >= 1, --warmup >= 0", file=sys.stderr
        )
        return 2
    if args.sec_param < 30:
        print("confar bench mpyc: --sec-param must be >= 30", file=sys.stderr)
        return 2
    version = mpyc_version()
    if version is None:
        print(f"confar bench mpyc: skipped: mpyc is not installed; {EXTRA_HINT}", file=sys.stderr)
        return 0
    if version != MPYC_VERSION:
        print(f"confar bench mpyc: note: mpyc {version} installed, the figures are meant for {MPYC_VERSION}")
    ours: list[dict[str, Any]] | None = None
    if args.no_ours:
        ours = []
    elif args.ours_json:
        ours = []
        for path in args.ours_json:
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                print(f"confar bench mpyc: cannot read --ours-json {path}: {exc}", file=sys.stderr)
                return 2
            ours += [r for r in doc if isinstance(r, dict)] if isinstance(doc, list) else []
    try:
        sec = suite(
            parties,
            batches,
            repeats,
            warmup,
            MpycSuiteOptions(
                sec_param=args.sec_param,
                seed=args.seed,
                ours=ours,
                ours_seconds=0.2 if q else 1.0,
                abort=args.abort,
                pooled=args.pooled,
            ),
        )
    except (MpycError, RuntimeError) as exc:
        print(f"confar bench mpyc: {exc}", file=sys.stderr)
        return 1
    bad = [r for r in sec["records"] if r["mismatches"]]
    if args.json:
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus, "
            f"{platform.python_implementation()} {platform.python_version()}",
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**sec, **meta}, indent=1) + "\n")
        print(f"wrote {len(sec['records'])} MPyC records to {args.json}")
    if bad:
        print(f"confar bench mpyc: MPyC revealed bits differ from the plaintext in {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if SPEC_ENV in os.environ:
        sys.exit(_worker(os.environ[SPEC_ENV]))
    print("run through `confar bench mpyc`; this entry point is the MPyC party program", file=sys.stderr)
    sys.exit(2)
