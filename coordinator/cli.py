"""``confar``: the coordinator's command line, built from a registry of subcommands.

Each entry of :data:`SUBCOMMANDS` is ``(name, "module.path")``; the module provides ``HELP: str``,
``add_arguments(parser)`` and ``run(args) -> int``. A module may instead provide ``SUBCOMMANDS`` (same
shape) to make a command group (``confar certs init``, ``confar bench network``). Modules are imported by
name when the parser is built (an unimportable one is listed as unavailable), so a command in
``simulations/`` (the composition layer, which may import everything) adds no import arrow from
``coordinator`` to ``simulations``.

To add a command, append an entry here (or to a group's list) and write the module.

Exit codes: 0 success; 1 the run failed (message on stderr); 2 bad command line or configuration;
130 interrupted (Ctrl-C), after every process the command started has been stopped.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Any

SUBCOMMANDS: list[tuple[str, str]] = [
    ("certs", "coordinator.cmd_certs"),
    ("simulate", "simulations.launcher"),
    ("bench", "coordinator.cmd_bench"),
    ("demo", "coordinator.demo"),
    ("privacy", "coordinator.cmd_privacy"),
    ("run", "coordinator.run"),
    # the lead adds: ("run", ...), ("demo", ...); ("hss", ...) goes in coordinator.cmd_bench.SUBCOMMANDS
]

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Lazy:
    """A registry entry: help text is read from the module, which is imported on first use."""

    def __init__(self, name: str, module: str) -> None:
        self.name, self.module_name = name, module
        self._module: ModuleType | None = None

    @property
    def module(self) -> ModuleType:
        if self._module is None:
            self._module = importlib.import_module(self.module_name)
        return self._module


def _add(sub: Any, entries: list[tuple[str, str]], depth: int) -> None:
    for name, module in entries:
        entry = _Lazy(name, module)
        try:
            mod = entry.module
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
    _add(sub, SUBCOMMANDS, 0)
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
