"""``confar certs ...``: the consortium's certificates.

* ``confar certs init --out DIR --parties N``: a CA and certificates party-1..party-N and coordinator in one
  place (local experiments and tests);
* a deployment instead makes the CA alone (``certs ca``, its key kept offline), each host its own key and a
  request (``certs request``: the key never leaves the host), and the CA signs each checked request
  (``certs sign``).

Exit codes: 0 done; 2 a bad argument or file (the message names it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from coordinator.certs import init_ca, init_consortium, load_ca, sign_request, write_request
from coordinator.commands import Command, Target
from proto.files import write_durable

HELP = "consortium certificates (CA, parties, coordinator)"


# ---- init: a consortium CA and per-party and coordinator certificates.


def _init_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--parties", required=True, type=int, help="number of parties N")
    p.add_argument("--force", action="store_true", help="overwrite an existing CA in DIR")


def _init(args: argparse.Namespace) -> int:
    try:
        issued = init_consortium(args.out, args.parties, overwrite=args.force)
    except (ValueError, FileExistsError) as exc:
        print(f"confar certs init: {exc}", file=sys.stderr)
        return 2
    for name, it in issued.items():
        print(f"{name:<14} {it.cert}  (key {it.key})")
    return 0


# ---- ca: the consortium CA alone (deployments where each host makes its own key).


def _ca_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="overwrite an existing CA in DIR")


def _ca(args: argparse.Namespace) -> int:
    try:
        init_ca(args.out, overwrite=args.force)
    except (ValueError, FileExistsError, OSError) as exc:
        print(f"confar certs ca: {exc}", file=sys.stderr)
        return 2
    print(f"ca  {args.out / 'ca.pem'}  (key {args.out / 'ca.key'}, mode 0600: keep it offline)")
    return 0


# ---- request: a key and a CSR, made on the host that uses them.


def _request_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--identity", required=True, help="this host's identity, e.g. party-3 or coordinator")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--force", action="store_true", help="replace an existing key for IDENTITY in DIR")


def _request(args: argparse.Namespace) -> int:
    try:
        key, csr = write_request(args.out, args.identity, overwrite=args.force)
    except (ValueError, FileExistsError, OSError) as exc:
        print(f"confar certs request: {exc}", file=sys.stderr)
        return 2
    print(f"key {key} (mode 0600, stays here)\ncsr {csr} (send this to the consortium CA)")
    return 0


# ---- sign: the CA issues a certificate for a checked request.


def _sign_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ca", required=True, type=Path, help="the CA directory (ca.pem, ca.key)")
    p.add_argument("--csr", required=True, type=Path, help="the request made by `confar certs request`")
    p.add_argument("--out", required=True, type=Path, help="where to write the certificate (.pem)")
    p.add_argument("--force", action="store_true", help="overwrite an existing certificate file")


def _sign(args: argparse.Namespace) -> int:
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


SUBCOMMANDS: list[tuple[str, Target]] = [
    (
        "init",
        Command(
            "create a CA and certificates party-1..party-N and coordinator in DIR", _init_arguments, _init
        ),
    ),
    (
        "ca",
        Command("create the consortium CA (ca.pem, ca.key) in DIR; keep ca.key offline", _ca_arguments, _ca),
    ),
    (
        "request",
        Command(
            "make a private key (never leaves this host) and a certificate signing request for IDENTITY",
            _request_arguments,
            _request,
        ),
    ),
    (
        "sign",
        Command(
            "check a certificate signing request and issue its certificate with the consortium CA",
            _sign_arguments,
            _sign,
        ),
    ),
]
