"""``confar privacy report PLAN.toml [--plot DIR] [--delta D]``: what each party's data has spent.

Asks every party for its privacy ledger (the events its data took part in, its budget and its own spend in
the budget's unit), prints it, recomposes the events here with ``mechanisms.privacy`` (GDP mu when every
event has a GDP bound; eps at delta, with delta the party's budget delta or ``--delta``), and with ``--plot``
writes one trade-off plot per party (spent curve and budget curve) to DIR. PLAN.toml's ``[session]`` table is
not needed (schema in :mod:`coordinator.privacy`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "print (and plot) each party's privacy ledger: events, GDP mu, eps at delta, remaining budget"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "plan", type=Path, help="PLAN.toml with [coordinator] and [[parties]] (see coordinator.privacy)"
    )
    p.add_argument("--plot", type=Path, metavar="DIR", help="write <identity>-tradeoff.png per party to DIR")
    p.add_argument(
        "--delta",
        type=float,
        default=1e-5,
        help="delta for eps at delta when a party's budget is a GDP filter (default 1e-5)",
    )


def run(args: argparse.Namespace) -> int:
    from coordinator.privacy import (
        PlanFileError,
        format_report,
        load_plan,
        plot_spends,
        report,
    )  # mechanisms.privacy is slow to import

    if not 0 < args.delta < 1:
        print("confar privacy report: --delta must lie in (0, 1)", file=sys.stderr)
        return 2
    try:
        pf = load_plan(args.plan, need_session=False)
        answers = report(pf)
    except PlanFileError as exc:
        print(f"confar privacy report: {exc}", file=sys.stderr)
        return 2
    text, spends, bad = format_report(pf, answers, args.delta)
    print(text)
    if args.plot is not None:
        for path in plot_spends(pf, spends, args.plot):
            print(f"wrote {path}")
    if bad:
        print(f"confar privacy report: {bad} of {len(answers)} parties could not be asked", file=sys.stderr)
        return 1
    return 0
