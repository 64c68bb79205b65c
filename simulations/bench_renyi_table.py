"""Build time of the accept bit's Rényi table (issue 23, docs/BENCHMARKS.md "Renyi table of the accept bit"):
``bit_rdp_table`` for one order (the charge path: the budget's fixed α, here 2) and for all 15 ``ORDERS``
(``simulations/renyi_bit.py`` and the tests), each build from an empty cache, in one process.

The shapes a coalition of q of m registries leaves: k = r/m, r = m − q (k = 1: the outside observer, the
ex-Gaussian; k < 1: the Beta mixture of ex-Gaussians), s = sd·√r, the cap at s (Δ/s from 1/64 to 1, the
table's span) or a fixed cap (the demo's 0.6). Prints wall and CPU seconds per build and the slowest.

Command (defaults: m = 3, 5, 7, sd = 1, 2, 4, cap = s and 0.6; about 5 min on 2 cores)::

    python -m simulations.bench_renyi_table [--m 7] [--sd 2] [--cap 0.6]
"""

from __future__ import annotations

import argparse
import math
import time

from mechanisms.privacy import ORDERS, PenaltyAcceptance, bit_rdp_table
from mechanisms.privacy.residual import ResidualPenaltyAcceptance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--sd", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--cap", nargs="+", default=["s", "0.6"], help='"s" (the cap at s) or a number')
    args = ap.parse_args()
    worst = {1: (0.0, ""), len(ORDERS): (0.0, "")}
    for m in args.m:
        for q in range(m):
            r = m - q
            k = r / m
            for sd in args.sd:
                s = sd * math.sqrt(r)
                model = PenaltyAcceptance(s) if r == m else ResidualPenaltyAcceptance(s, k)
                for cap_arg in args.cap:
                    cap = s if cap_arg == "s" else float(cap_arg)
                    line = f"m={m} q={q} k={k:.3f} sd={sd:g} s={s:.3f} cap={cap:.3f}"
                    for orders in ((2.0,), ORDERS):
                        bit_rdp_table.cache_clear()
                        w0, c0 = time.perf_counter(), time.process_time()
                        table = bit_rdp_table(model, cap, orders)
                        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
                        line += f" | {len(orders)} order(s): {wall:.2f} s (cpu {cpu:.2f})"
                        if wall > worst[len(orders)][0]:
                            worst[len(orders)] = (wall, f"m={m} q={q} sd={sd:g} cap={cap:.3f}")
                    print(f"{line} | {table.deltas.size} Delta points", flush=True)
    for n, (wall, where) in worst.items():
        print(f"slowest with {n} order(s): {wall:.2f} s ({where})")


if __name__ == "__main__":
    main()
