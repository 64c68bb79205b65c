"""``confar certs request --identity ID --out DIR``: a key and a CSR, made on the host that uses them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.certs import write_request

HELP = "make a private key (never leaves this host) and a certificate signing request for IDENTITY"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--identity", required=True, help="this host's identity, e.g. party-3 or coordinator")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="replace an existing key for IDENTITY in DIR")


def run(args: argparse.Namespace) -> int:
    try:
        key, csr = write_request(args.out, args.identity, overwrite=args.force)
    except (ValueError, FileExistsError, OSError) as exc:
        print(f"confar certs request: {exc}", file=sys.stderr)
        return 2
    print(f"key {key} (mode 0600, stays here)\ncsr {csr} (send this to the consortium CA)")
    return 0
