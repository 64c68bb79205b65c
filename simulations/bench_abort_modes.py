"""``python -m simulations.bench_abort_modes``: the reveal modes under security with abort against the
semi-honest ones (issue 25), at the engine level.

For each m, batch and sign variant (inline, pooled, blocks4; the lazy coin with inline), all m parties in one
process over the in-memory runner: rounds, bytes per decision (every message of the batch, the receiver's
included) and CPU per decision (this process, all parties; the least of ``--repeat`` runs), semi-honest
(hss.protocols) beside abort (hss.abort_sign), and their ratios. Decisions are checked equal to the
plaintext ones (the lazy coin: a subset of them). Over the daemons and beside MPyC: ``confar bench mpyc
--abort``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np

from hss.abort_sign import sign_party_abort, sign_receiver_abort
from hss.lazy_coin import LazyCoin
from hss.protocols import plaintext_decisions, sign_party, sign_receiver
from hss.randomness import SecureRandom
from hss.runtime import Machine, run_in_memory
from hss.session import PartyContext, SessionParams, key_setup

VARIANTS: dict[str, tuple[str, LazyCoin | None]] = {
    "inline": ("inline", None),
    "pooled": ("pooled", None),
    "blocks4": ("blocks4", None),
    "lazy": ("inline", LazyCoin(1, 1)),
}


def _session(m: int) -> tuple[SessionParams, dict[int, PartyContext], dict[int, SecureRandom]]:
    params = SessionParams(m=m, t=(m - 1) // 2, session_id=os.urandom(16))
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    return params, {p: PartyContext(params, keys[p]) for p in rngs}, rngs


def measure(m: int, n: int, variant: str, security: str, repeat: int) -> dict[str, Any]:
    params, ctxs, rngs = _session(m)
    pre, lazy = VARIANTS[variant]
    gen = np.random.default_rng(n)
    vals = [gen.normal(0.0, 2.0, n) for _ in range(m)]
    want = plaintext_decisions(vals, None, params.fmt)
    best, rounds, nbytes = float("inf"), 0, 0
    for k in range(repeat):
        machines: dict[int, Machine[Any]]
        if security == "abort":
            machines = {
                p: sign_party_abort(c, vals[p - 1], None, k + 1, rngs[p], pre, lazy) for p, c in ctxs.items()
            }
        else:
            machines = {
                p: sign_party(c, vals[p - 1], None, k + 1, rngs[p], precompute=pre, lazy=lazy)
                for p, c in ctxs.items()
            }
        t0 = time.process_time()
        _, tr = run_in_memory(machines)
        out = (
            sign_receiver_abort(params, tr.to_receiver[-1], n, k + 1)
            if security == "abort"
            else sign_receiver(params, tr.to_receiver[-1], n)
        )
        best = min(best, time.process_time() - t0)
        ok = not (out.accept & ~want).any() if lazy is not None else np.array_equal(out.accept, want)
        if not ok:
            raise RuntimeError(f"m={m} n={n} {variant} {security}: decisions differ from the plaintext")
        rounds, nbytes = tr.rounds, tr.bytes
    return {
        "m": m,
        "batch": n,
        "variant": variant,
        "security": security,
        "rounds": rounds,
        "bytes_per_decision": round(nbytes / n, 1),
        "cpu_ms_per_decision": round(best * 1e3 / n, 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--parties", default="3,5,7", help="comma-separated m values (default 3,5,7)")
    ap.add_argument("--batch", default="1,16,1000", help="comma-separated batch sizes (default 1,16,1000)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="of inline, pooled, blocks4, lazy")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; CPU is the least (default 3)")
    args = ap.parse_args(argv)
    parties = [int(x) for x in args.parties.split(",") if x]
    batches = [int(x) for x in args.batch.split(",") if x]
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or any(not 3 <= m <= 15 for m in parties) or any(b < 1 for b in batches) or args.repeat < 1:
        ap.error(f"need m in 3..15, batches >= 1, --repeat >= 1, variants of {list(VARIANTS)} (got {bad})")
    print(
        f"# {datetime.now(UTC).isoformat(timespec='seconds')}  {platform.machine()} {os.cpu_count()} cpus, "
        f"CPython {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'m':>2} {'batch':>5} {'variant':>8} {'rounds':>9} {'bytes/dec semi':>15} {'abort':>10} {'x':>5}"
        f" {'cpu ms/dec semi':>16} {'abort':>9} {'x':>5}"
    )
    for m in parties:
        for n in batches:
            for v in variants:
                a = measure(m, n, v, "semi-honest", args.repeat)
                b = measure(m, n, v, "abort", args.repeat)
                by, bc = a["bytes_per_decision"], a["cpu_ms_per_decision"]
                print(
                    f"{m:>2} {n:>5} {v:>8} {a['rounds']:>4}->{b['rounds']:<4} {by:>15,.0f}"
                    f" {b['bytes_per_decision']:>10,.0f} {b['bytes_per_decision'] / by:>5.2f}"
                    f" {bc:>16.3f} {b['cpu_ms_per_decision']:>9.3f} {b['cpu_ms_per_decision'] / bc:>5.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
