"""``confar``: the coordinator's command line: its own command groups (:data:`COMMANDS`) and those other
packages register (:func:`coordinator.plugins.commands`: ``simulate`` and ``bench`` from ``simulations/``).

Exit codes (every command; see :mod:`coordinator.commands`): 0 success; 1 the run failed (message on
stderr); 2 bad command line or configuration; 130 interrupted (Ctrl-C), after every process the command
started has been stopped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from coordinator import demo, plugins, run
from coordinator.commands import EXIT_FAILURE, EXIT_INTERRUPTED, Command, Target, certs, privacy, study

#: The coordinator's own commands, in the order ``confar --help`` lists them (then the registered ones).
COMMANDS: list[tuple[str, Target]] = [
    ("certs", certs),
    ("demo", demo),
    ("privacy", privacy),
    ("run", run),
    ("study", study),
]


def _add(sub: Any, entries: Sequence[tuple[str, Target | ImportError]], depth: int) -> None:
    for name, target in entries:
        if isinstance(target, ImportError):  # a registered command whose module is missing: the others stay
            p = sub.add_parser(name, help=f"(unavailable: {target})")
            p.set_defaults(_run=lambda _a, exc=target: _unavailable(exc))
            continue
        if isinstance(target, Command):
            p = sub.add_parser(name, help=target.help, description=target.help)
            target.add_arguments(p)
            p.set_defaults(_run=target.run)
            continue
        mod = target
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
    _add(sub, [*COMMANDS, *plugins.commands()], 0)
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
