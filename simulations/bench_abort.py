"""``python -m simulations.bench_abort``: the cost of security with abort at the engine level (issue 25).

For m = 3, 5, 7 and a batch of N multiplications and N random bits, all m parties in one process over
the in-memory runner: rounds, messages, bytes and CPU time (this process, all parties) of

* the semi-honest GRR multiplication (``hss.primitives.multiply``) and random bits
  (``hss.primitives.random_bits``), against
* the authenticated ones (``hss.authenticated``): the duplicated multiplication, the random bits by
  squaring with it, each followed by the one ``verify`` of the step (3 rounds, a few field elements),
  and the authenticated input sharing of the multiplication's 2N operands (2 rounds; for reference).

CPU time is the least of ``--repeat`` runs (the machine may be shared). No network: rounds are the
sequential message exchanges a network run would pay a latency for.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hss import primitives as prim
from hss.authenticated import Auth, AuthParty
from hss.randomness import SecureRandom
from hss.runtime import Machine, PartyGen, Transcript, run_in_memory
from hss.session import PartyContext, SessionParams, key_setup

#: PRSS purpose of the semi-honest operands (outside the engine's purposes)
P_OPERANDS = 900


def session(m: int) -> tuple[dict[int, PartyContext], dict[int, SecureRandom]]:
    params = SessionParams(m=m, t=(m - 1) // 2, session_id=os.urandom(16))
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    return {p: PartyContext(params, keys[p]) for p in rngs}, rngs


def timed(make: Callable[[], dict[int, Machine[Any]]], repeat: int) -> tuple[Transcript, float, list[Any]]:
    """The transcript of the last run, the least CPU seconds over ``repeat`` runs, and every run's results."""
    best, tr, results = float("inf"), Transcript(), []
    for _ in range(repeat):
        machines = make()
        t0 = time.process_time()
        res, tr = run_in_memory(machines)
        best = min(best, time.process_time() - t0)
        results.append(res)
    return tr, best, results


def once(machines: dict[int, Machine[Any]]) -> tuple[Transcript, float, dict[int, Any]]:
    t0 = time.process_time()
    res, tr = run_in_memory(machines)
    return tr, time.process_time() - t0, res


def bench_m(m: int, n: int, repeat: int) -> list[dict[str, Any]]:
    ctxs, rngs = session(m)
    rows: list[dict[str, Any]] = []
    step = iter(range(1, 10**9))

    def row(op: str, variant: str, tr: Transcript, cpu: float) -> None:
        rows.append(
            {"m": m, "op": op, "variant": variant, "rounds": tr.rounds, "messages": tr.messages,
             "bytes": tr.bytes, "cpu_s": cpu}
        )

    def semi_mul() -> dict[int, Machine[Any]]:
        s = next(step)
        return {
            p: prim.multiply(
                c, c.prss.random(P_OPERANDS, s, (n,)), c.prss.random(P_OPERANDS + 1, s, (n,)), rngs[p]
            )
            for p, c in ctxs.items()
        }

    tr, cpu, _ = timed(semi_mul, repeat)
    row("multiply", "semi-honest GRR", tr, cpu)
    tr, cpu, _ = timed(lambda: {p: prim.random_bits(c, n, next(step)) for p, c in ctxs.items()}, repeat)
    row("random bits", "semi-honest", tr, cpu)

    # authenticated: one AuthParty per party and step, its phases run as separate machines
    def parties() -> dict[int, AuthParty]:
        s = next(step)
        return {p: AuthParty(c, rngs[p], s) for p, c in ctxs.items()}

    def inputs(ap: AuthParty) -> PartyGen[dict[int, Auth]]:
        own = ap.draw((n,)) if ap.ctx.party in (1, 2) else None  # any values: two operand vectors
        return (yield from ap.share_inputs(own, {1: (n,), 2: (n,)}))

    def mult(ap: AuthParty, xs: dict[int, Auth]) -> PartyGen[list[Auth]]:
        return (yield from ap.multiply([(xs[1], xs[2])]))

    def bits(ap: AuthParty) -> PartyGen[Auth]:
        return (yield from ap.random_bits(n))

    phases: dict[str, list[tuple[Transcript, float]]] = {
        k: [] for k in ("in", "mul", "vmul", "bits", "vbits")
    }
    for _ in range(repeat):
        aps = parties()
        tr, cpu, xs = once({p: Machine(p, inputs(a)) for p, a in aps.items()})
        phases["in"].append((tr, cpu))
        phases["mul"].append(once({p: Machine(p, mult(a, xs[p])) for p, a in aps.items()})[:2])
        phases["vmul"].append(once({p: Machine(p, a.verify()) for p, a in aps.items()})[:2])
        aps = parties()
        phases["bits"].append(once({p: Machine(p, bits(a)) for p, a in aps.items()})[:2])
        phases["vbits"].append(once({p: Machine(p, a.verify()) for p, a in aps.items()})[:2])
    best = {k: (v[-1][0], min(c for _, c in v)) for k, v in phases.items()}

    def both(a: str, b: str) -> tuple[Transcript, float]:
        (ta, ca), (tb, cb) = best[a], best[b]
        return Transcript(ta.rounds + tb.rounds, ta.messages + tb.messages, ta.bytes + tb.bytes), ca + cb

    row("multiply", "authenticated + verify", *both("mul", "vmul"))
    row("multiply", "(of which verify)", *best["vmul"])
    row("random bits", "authenticated + verify", *both("bits", "vbits"))
    row("random bits", "(of which verify)", *best["vbits"])
    row("inputs (2N values)", "authenticated sharing", *best["in"])
    return rows


def ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}x" if a < 0.1 * b else f"{a / b:.2f}x"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--parties", default="3,5,7", help="comma-separated m values (default 3,5,7)")
    ap.add_argument("-n", "--batch", type=int, default=1000, help="multiplications and bits per batch")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; CPU is the least (default 5)")
    a = ap.parse_args(argv)
    print(
        f"# {datetime.now(UTC).isoformat(timespec='seconds')}  {platform.machine()} {os.cpu_count()} cpus, "
        f"load {os.getloadavg()[0]:.2f}, batch N = {a.batch}, CPU = least of {a.repeat} runs, all m parties"
    )
    print(
        "| m | operation | variant | rounds | messages | bytes | bytes / semi-honest "
        "| CPU ms | CPU / semi-honest |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for m in (int(x) for x in a.parties.split(",")):
        rows = bench_m(m, a.batch, a.repeat)
        base = {r["op"]: r for r in rows if r["variant"].startswith("semi")}
        for r in rows:
            b = base.get(r["op"])
            rb = ratio(r["bytes"], b["bytes"]) if b else "-"
            rc = ratio(r["cpu_s"], b["cpu_s"]) if b else "-"
            print(
                f"| {m} | {r['op']} | {r['variant']} | {r['rounds']} | {r['messages']} "
                f"| {r['bytes']:,} | {rb} | {1000 * r['cpu_s']:.1f} | {rc} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
