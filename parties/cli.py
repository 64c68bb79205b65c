"""``confar-party``: the party daemon's command line.

    confar-party serve --config party.toml [--insecure]
    confar-party check-config --config party.toml [--insecure]

Exit codes: 0 stopped cleanly (SIGTERM / SIGINT: in-flight calls get a grace period of 5 s, sessions are
closed, the audit log is closed); 1 runtime failure; 2 bad command line or configuration (the message names
the key); 3 the graceful stop did not finish within 10 s of the signal and the daemon ended itself (an audit
line says so; every state file is written atomically, so none is torn). SIGTERM always ends the daemon
within those 10 s, also with requests in flight. Once serving, ``serve`` prints ``confar-party <identity>
listening on <host:port>`` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from parties.analyses import AnalysisError
from parties.config import ConfigError, load_config
from parties.tls import TlsError, warn_insecure

EXIT_OK, EXIT_FAILURE, EXIT_CONFIG = 0, 1, 2  # and 3: parties.daemon.EXIT_STOP_DEADLINE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="confar-party", description="confar party daemon (one registry)")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, help_ in (("serve", "run the daemon"), ("check-config", "validate the config and exit")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--config", required=True, help="party TOML config")
        p.add_argument(
            "--insecure",
            action="store_true",
            help="plaintext gRPC without authentication (local experiments only; prints a warning)",
        )
    args = ap.parse_args(argv)

    if args.insecure:
        warn_insecure("confar-party")
    try:
        cfg = load_config(args.config, insecure=args.insecure)
    except ConfigError as exc:
        print(f"confar-party: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if cfg.fixed_rng_key is not None:
        print(
            "WARNING: [testing] fixed_rng_key is set: this party's noise and shares are REPEATABLE. "
            "Never use it with real data.",
            file=sys.stderr,
            flush=True,
        )
    if args.command == "check-config":
        print(f"{args.config}: ok (party {cfg.id}, {cfg.identity})")
        return EXIT_OK

    from parties.daemon import PartyDaemon  # grpc import only when serving

    try:
        daemon = PartyDaemon(cfg, insecure=args.insecure)
    except (TlsError, AnalysisError) as exc:
        print(f"confar-party: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except RuntimeError as exc:
        print(f"confar-party: {exc}", file=sys.stderr)
        return EXIT_FAILURE

    def ready(address: str) -> None:
        print(f"confar-party {cfg.identity} listening on {address}", flush=True)

    try:
        asyncio.run(daemon.serve_forever(ready))
    except RuntimeError as exc:
        print(f"confar-party: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
