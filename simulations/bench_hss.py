"""``confar bench hss``: throughput of the decision protocols with every party's compute in one process.

For each reveal mode, number of parties m and batch size, a session is set up once (key setup excluded)
and batches of decisions are run through the in-memory runner until at least ``--seconds`` have passed.
Each record: ``{suite, mode, m, t, batch, decisions_per_s, rounds, messages, bytes_per_decision, ...}``.
The wall time covers everything the m parties compute (precompute included) plus the runner's message
delivery; there is no network. ``decisions_per_cpu_s`` divides by this process's CPU time instead,
which is less sensitive to other load on a shared machine (the load average is recorded too).
Inputs are random terms with Gamma(1/m, 1) noise from a CSPRNG.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from hss.modes import TERMS_MODES, TermsBatch, reveal_mode
from hss.protocols import precompute_sign
from hss.randomness import SecureRandom
from hss.runtime import run_in_memory
from hss.session import SIGN_PRECOMPUTE, PartyContext, SessionParams, key_setup
from mechanisms.noise import gamma_shares

HELP = "benchmark the secret-sharing engine in one process (no network)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, help="write the records to this JSON file")
    p.add_argument(
        "--modes", default=",".join(TERMS_MODES), help="comma-separated reveal modes (default: all)"
    )
    p.add_argument("--parties", default="3,5,7", help="comma-separated m values (default 3,5,7)")
    p.add_argument("--batches", default="1,100,1000", help="comma-separated batch sizes (default 1,100,1000)")
    p.add_argument(
        "--seconds", type=float, default=1.0, help="minimum measured time per record (default 1.0)"
    )
    p.add_argument("--no-pooled", action="store_true", help="skip sign records with a distributed precompute")
    p.add_argument(
        "--sign-precompute",
        help=f"comma-separated sign precomputes to time, of {SIGN_PRECOMPUTE} (default: inline,pooled; "
        "inline only with --no-pooled)",
    )


def bench_one(
    mode: str, m: int, batch: int, seconds: float, pooled: bool = False, precompute: str | None = None
) -> dict[str, Any]:
    """One record; ``pooled`` (sign only) also times the 3-round distributed precompute; ``precompute``
    (sign only, overrides ``pooled``): "inline", "pooled" or "blocks4" (issue 16: 2 precompute rounds,
    5 online). ``precompute_bytes_per_decision`` counts the input-independent rounds' messages."""
    if precompute is not None:
        pooled = precompute == "pooled"
    blocks4 = precompute == "blocks4" and mode == "sign"
    pre_inline = 2 if blocks4 else (1 if mode == "sign" and not pooled else 0)  # in-machine precompute rounds
    entry = reveal_mode(mode)
    params = SessionParams(m=m, t=(m - 1) // 2, session_id=os.urandom(16))
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    ctxs = {p: PartyContext(params, keys[p]) for p in rngs}
    gen = np.random.default_rng()
    noise = SecureRandom.from_os()
    step, decisions, elapsed, cpu = 0, 0, 0.0, 0.0
    rounds = messages = nbytes = pre_nbytes = 0
    while elapsed < seconds or step < 2:
        values = [gen.normal(-1.0, 2.0, batch) + gamma_shares(noise, m, batch) for _ in range(m)]
        blind = [gamma_shares(noise, m, batch) for _ in range(m)]
        step += 1
        t0, c0 = time.perf_counter(), time.process_time()
        mats: dict[int, Any] = dict.fromkeys(ctxs)
        pre_rounds = pre_messages = pre_bytes = 0
        if pooled:
            pre = {p: precompute_sign(c, batch, step, rngs[p]) for p, c in ctxs.items()}
            mats, tr_pre = run_in_memory(pre)
            step += 1
            pre_rounds, pre_messages, pre_bytes = tr_pre.rounds, tr_pre.messages, tr_pre.bytes
        machines = {
            p: entry.machine(c, TermsBatch(
                values[p - 1], None, step, rngs[p], blind=blind[p - 1], material=mats[p],
                precompute="blocks4" if blocks4 else "inline",
            ))
            for p, c in ctxs.items()
        }
        _, tr = run_in_memory(machines, keep_log=pre_inline > 0)
        entry.decode(params, tr.to_receiver[-1], batch, step, "semi-honest")
        elapsed += time.perf_counter() - t0
        cpu += time.process_time() - c0
        decisions += batch
        rounds, messages, nbytes = tr.rounds + pre_rounds, tr.messages + pre_messages, tr.bytes + pre_bytes
        online_rounds = tr.rounds - pre_inline
        pre_nbytes = pre_bytes + sum(int(pl.nbytes) for rnd, _, _, pl in tr.log if rnd <= pre_inline)
    return {
        "suite": "hss",
        "mode": mode,
        "precompute": ("blocks4" if blocks4 else "pooled" if pooled else "inline")
        if mode == "sign"
        else "none",
        "m": m,
        "t": params.t,
        "batch": batch,
        "decisions_per_s": round(decisions / elapsed, 1),
        "decisions_per_cpu_s": round(decisions / cpu, 1),
        "rounds": rounds,
        "online_rounds": online_rounds,
        "messages": messages,
        "bytes_per_decision": round(nbytes / batch, 1),
        "precompute_bytes_per_decision": round(pre_nbytes / batch, 1),
        "batches_timed": step,
    }


def run(args: argparse.Namespace) -> int:
    modes = [s for s in args.modes.split(",") if s]
    for mode in modes:
        if mode not in TERMS_MODES:
            print(f"confar bench hss: unknown mode {mode!r}; expected some of {TERMS_MODES}", file=sys.stderr)
            return 2
    try:
        parties = [int(s) for s in args.parties.split(",")]
        batches = [int(s) for s in args.batches.split(",")]
    except ValueError as exc:
        print(
            f"confar bench hss: --parties/--batches must be comma-separated integers ({exc})", file=sys.stderr
        )
        return 2
    default = "inline" if args.no_pooled else "inline,pooled"
    precomputes = [s for s in (args.sign_precompute or default).split(",") if s]
    for pre in precomputes:
        if pre not in SIGN_PRECOMPUTE:
            print(f"confar bench hss: unknown sign precompute {pre!r}; expected some of {SIGN_PRECOMPUTE}",
                  file=sys.stderr)
            return 2
    records = []
    for mode in modes:
        for m in parties:
            for batch in batches:
                for pre in precomputes if mode == "sign" else ["inline"]:
                    rec = bench_one(mode, m, batch, args.seconds, precompute=pre)
                    records.append(rec)
                    label = f"{mode}/{rec['precompute']}" if mode == "sign" else mode
                    print(
                        f"{label:12s} m={m:2d} batch={batch:5d}  "
                        f"{rec['decisions_per_s']:>10.1f} decisions/s  "
                        f"rounds={rec['rounds']}  messages={rec['messages']}  "
                        f"bytes/decision={rec['bytes_per_decision']} "
                        f"(precompute {rec['precompute_bytes_per_decision']})  "
                        f"{rec['decisions_per_cpu_s']:>10.1f} decisions/cpu-s",
                        flush=True,
                    )
    if args.json:
        meta = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "load_average_1min_at_end": round(os.getloadavg()[0], 2),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus, "
            f"{platform.python_implementation()} {platform.python_version()}",
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([{**r, **meta} for r in records], indent=1) + "\n")
        print(f"wrote {len(records)} records to {args.json}")
    return 0
