"""``confar certs init --out DIR --parties N``: a consortium CA and per-party and coordinator certificates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.certs import init_consortium

HELP = "create a CA and certificates party-1..party-N and coordinator in DIR"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--parties", required=True, type=int, help="number of parties N")
    p.add_argument("--force", action="store_true", help="overwrite an existing CA in DIR")


def run(args: argparse.Namespace) -> int:
    try:
        issued = init_consortium(args.out, args.parties, overwrite=args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"confar certs init: {exc}", file=sys.stderr)
        return 2
    for name, it in issued.items():
        print(f"{name:<14} {it.cert}  (key {it.key})")
    return 0
