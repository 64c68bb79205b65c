"""``confar certs ca --out DIR``: the consortium CA alone (deployments where each host makes its own key)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.certs import init_ca

HELP = "create the consortium CA (ca.pem, ca.key) in DIR; keep ca.key offline"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="overwrite an existing CA in DIR")


def run(args: argparse.Namespace) -> int:
    try:
        init_ca(args.out, overwrite=args.force)
    except (ValueError, FileExistsError, OSError) as exc:
        print(f"confar certs ca: {exc}", file=sys.stderr)
        return 2
    print(f"ca  {args.out / 'ca.pem'}  (key {args.out / 'ca.key'}, mode 0600: keep it offline)")
    return 0
