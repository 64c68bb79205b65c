"""``confar-party``: the party daemon's command line.

    confar-party serve --config party.toml [--insecure]
    confar-party check-config --config party.toml [--insecure]
    confar-party study show|approve|revoke|list ...   (the custodian's commands: parties/custodian.py)
    confar-party report --config party.toml --out report.html [--json [PATH]]   (parties/report.py)

``check-config`` validates the file, imports every allowed analysis (a model plug-in's class, from
``[allow] model_path`` when given), then reads the registry's records exactly as ``serve`` would
(``parties.sources``: connects to the database or endpoint, runs the query, converts and checks every
record against ``[data] model``'s schema) and prints where from, the record count, the columns and the
snapshot's SHA-256, and evaluates the ``[data] model``'s log-likelihood on the first records at a few
prior draws (it must be a finite (draws, records) array); on a problem it prints the key to fix, the
problems by column and the first problem rows (row numbers and what is wrong, never a record's value) and
exits 2. It writes nothing (no state dir,
no audit line).

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

from mechanisms.models.base import (
    LOGLIK_DRAWS,
    LOGLIK_RECORDS,
    add_import_path,
    likelihood_problem,
    load_model,
)
from parties import custodian
from parties.analyses import AnalysisError
from parties.config import ConfigError, PartyConfig, load_config
from parties.registry import model_ref
from parties.sources import DataProblems, SourceError, snapshot
from proto.tls import TlsError, warn_insecure

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
    custodian.add_arguments(sub)  # study show / approve / revoke / list (issue 37)
    args = ap.parse_args(argv)
    if args.command == "study":
        return custodian.run(args)
    if args.command == "report":
        return custodian.report(args)

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
    if cfg.deviate:
        print(
            "WARNING: [testing] deviate is set: this party sends WRONG protocol messages on purpose "
            f"({sorted(cfg.deviate)}). Only for testing security with abort.",
            file=sys.stderr,
            flush=True,
        )
    add_import_path(cfg.model_path)  # [allow] model_path: where this registry's model plug-ins live
    if args.command == "check-config":
        return check_config(args.config, cfg)

    from parties import process_settings
    from parties.daemon import PartyDaemon  # grpc import only when serving

    process_settings.apply()  # BLAS on one thread, freed memory kept (parties/process_settings.py)
    try:
        daemon = PartyDaemon(cfg, insecure=args.insecure)
    except SourceError as exc:
        print(f"confar-party: data error: {args.config}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (TlsError, AnalysisError) as exc:
        print(f"confar-party: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except RuntimeError as exc:
        print(f"confar-party: {exc}", file=sys.stderr)
        return EXIT_FAILURE

    def ready(address: str) -> None:
        print(f"confar-party {cfg.identity} listening on {address}", flush=True)
        if daemon.admin_address is not None:  # [admin] listen: the custodian's report, loopback only
            print(f"confar-party {cfg.identity} report at http://{daemon.admin_address}/", flush=True)

    try:
        asyncio.run(daemon.serve_forever(ready))
    except RuntimeError as exc:
        print(f"confar-party: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def check_allowed(cfg: PartyConfig) -> list[str]:
    """Every ``[allow] models`` entry resolves to an analysis, a model plug-in's class imports; problems."""
    problems = []
    for i, name in enumerate(cfg.allow_models):
        try:
            ref = model_ref(name)
            if ref is not None:
                from mechanisms.models.base import resolve_model_class

                resolve_model_class(ref)
        except (AnalysisError, ValueError) as exc:
            problems.append(f"allow.models[{i}]: {exc}")
    return problems


def check_config(path: str, cfg: PartyConfig) -> int:
    """Read the records as ``serve`` would and report (module docstring); exit code 0 or 2."""
    print(f"{path}: configuration ok (party {cfg.id}, {cfg.identity})")
    problems = check_allowed(cfg)
    for p in problems:
        print(f"confar-party: {path}: {p}", file=sys.stderr)
    if not problems:
        print(f"allow: analyses {', '.join(cfg.allow_models)} found")
    if cfg.data is None:
        print("data: none configured ([data]): this party holds no records")
        return EXIT_CONFIG if problems else EXIT_OK
    schema = f"model {cfg.data.model}" if cfg.data.model else "no [data] model: every column must be a number"
    print(f"data: {cfg.data.source.describe()} ({schema})", flush=True)
    try:
        snap = snapshot(cfg.data)
    except DataProblems as exc:
        shown = f"the first {len(exc.rows)} problem rows" if exc.rows else "no row-level problems"
        print(f"confar-party: {path}: {exc.key}: refused ({exc.records} records, {shown}):", file=sys.stderr)
        for row, whats in exc.rows:
            print(f"  row {row}: " + "; ".join(whats), file=sys.stderr)
        print(f"  all problems: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    except SourceError as exc:
        print(f"confar-party: {path}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except AnalysisError as exc:
        print(f"confar-party: {path}: data: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"data: {snap.records} records, columns {', '.join(snap.columns)} ({snap.nbytes} bytes)")
    if snap.ignored:
        print(f"data: result columns not in the schema, ignored: {', '.join(snap.ignored)}")
    print(f"data: snapshot sha256 {snap.sha256}")
    if cfg.data.model is not None:
        model = load_model(cfg.data.model, cfg.data.model_args)  # loaded by snapshot() already
        what = likelihood_problem(model, snap.dataset.columns)
        if what is not None:
            print(f"confar-party: {path}: data.model: {what}", file=sys.stderr)
            return EXIT_CONFIG
        n = min(LOGLIK_RECORDS, snap.records)
        print(f"model: {cfg.data.model}: log-likelihood finite on {n} records at {LOGLIK_DRAWS} prior draws")
    return EXIT_CONFIG if problems else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
