"""``confar certs sign --ca DIR --csr FILE --out FILE``: the CA issues a certificate for a checked request."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from coordinator.certs import load_ca, sign_request
from proto.files import write_durable

HELP = "check a certificate signing request and issue its certificate with the consortium CA"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ca", required=True, type=Path, help="the CA directory (ca.pem, ca.key)")
    p.add_argument("--csr", required=True, type=Path, help="the request made by `confar certs request`")
    p.add_argument("--out", required=True, type=Path, help="where to write the certificate (.pem)")
    p.add_argument("--force", action="store_true", help="overwrite an existing certificate file")


def run(args: argparse.Namespace) -> int:
    try:
        if args.out.exists() and not args.force:
            raise FileExistsError(f"{args.out} exists; pass --force to overwrite it")
        ca_key, ca_cert = load_ca(args.ca)
        identity, cert = sign_request(args.csr.read_bytes(), ca_key, ca_cert)
        write_durable(args.out, cert.public_bytes(serialization.Encoding.PEM), private=False)
    except (ValueError, FileExistsError, OSError) as exc:
        print(f"confar certs sign: {exc}", file=sys.stderr)
        return 2
    print(f"{identity}  {args.out}  (valid until {cert.not_valid_after_utc:%Y-%m-%d})")
    return 0
