"""``confar privacy plan PLAN.toml``: each party's projected privacy spend for a planned session.

A dry run: every party computes, from its own config, the privacy events the planned session (analysis,
parameters, reveal mode, batches x batch size) would add to its ledger and answers with its projected spend,
remaining budget and whether it would refuse. No session is opened, no data is read, no ledger changes.
PLAN.toml's schema is in :mod:`coordinator.privacy`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "dry run: each party's projected privacy spend for the session in PLAN.toml (touches no data)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "plan", type=Path, help="PLAN.toml: parties, coordinator TLS, [session] (see coordinator.privacy)"
    )


def run(args: argparse.Namespace) -> int:
    from coordinator.privacy import (
        PlanFileError,
        format_plan,
        load_plan,
        plan,
    )  # mechanisms.privacy is slow to import

    try:
        pf = load_plan(args.plan, need_session=True)
        answers = plan(pf)
    except PlanFileError as exc:
        print(f"confar privacy plan: {exc}", file=sys.stderr)
        return 2
    text, bad = format_plan(pf, answers)
    print(text)
    if bad:
        print(
            f"confar privacy plan: {bad} of {len(answers)} parties would refuse this session", file=sys.stderr
        )
        return 1
    return 0
