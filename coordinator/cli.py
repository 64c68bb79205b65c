"""``confar``: the coordinator's command line, built from the table of :mod:`coordinator.commands`.

Exit codes (every command; see :mod:`coordinator.commands`): 0 success; 1 the run failed (message on
stderr); 2 bad command line or configuration; 130 interrupted (Ctrl-C), after every process the command
started has been stopped.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.commands import COMMANDS, EXIT_FAILURE, EXIT_INTERRUPTED, Command, Target, import_by_name


def _add(sub: Any, entries: list[tuple[str, Target]], depth: int) -> None:
    for name, target in entries:
        if isinstance(target, Command):
            p = sub.add_parser(name, help=target.help, description=target.help)
            target.add_arguments(p)
            p.set_defaults(_run=target.run)
            continue
        try:
            mod = import_by_name(target)
        except ImportError as exc:  # a command whose module is missing must not break the others
            p = sub.add_parser(name, help=f"(unavailable: {exc})")
            p.set_defaults(_run=lambda _a, exc=exc: _unavailable(exc))
            continue
        p = sub.add_parser(name, help=getattr(mod, "HELP", ""), description=getattr(mod, "HELP", ""))
        if hasattr(mod, "SUBCOMMANDS"):
            inner = p.add_subparsers(dest=f"command_{depth + 1}", required=True)
            _add(inner, mod.SUBCOMMANDS, depth + 1)
        else:
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)


def _unavailable(exc: Exception) -> int:
    print(f"confar: this command is unavailable: {exc}", file=sys.stderr)
    return EXIT_FAILURE


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="confar", description="confidential accept-reject across registries")
    sub = ap.add_subparsers(dest="command", required=True)
    _add(sub, COMMANDS, 0)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except KeyboardInterrupt:
        print("confar: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
