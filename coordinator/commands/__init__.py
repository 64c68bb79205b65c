"""The ``confar`` commands: one module per command group, and the table the command line is built from.

:data:`COMMANDS` maps each top-level name to a target: a :class:`Command` (help, arguments, run), or the
dotted name of a module that is either a command itself (``HELP``, ``add_arguments(parser)``,
``run(args) -> int``) or a group (``HELP`` and ``SUBCOMMANDS``, a table of the same shape). Modules are
imported by name when the parser is built (an unimportable one is listed as unavailable), so commands in
``simulations/`` (the composition layer, which may import everything: the benchmarks, the local
consortium) add no import arrow from ``coordinator`` to ``simulations``.

:func:`import_by_name` is the coordinator's one way to reach ``simulations/``: the command table's
modules, ``confar run --simulate``'s local consortium and ``confar privacy audit``'s engine all go through
it. ``tests/test_layers.py`` names it as the one exception to "coordinator never imports simulations" and
fails on any other by-name import in ``coordinator/`` or ``parties/``.

To add a command: an entry in a group's ``SUBCOMMANDS`` (a :class:`Command` next to its siblings, or a
module), or a new group module listed here.

Exit codes, every command: 0 success; 1 the run failed or a party refused (message on stderr); 2 bad command
line, configuration or input file (the message names it); 130 interrupted (Ctrl-C), after every process the
command started has been stopped. A command may add its own (``confar privacy audit``: 1 = VIOLATED;
``confar run``: 3 = stopped early at a registry's privacy budget, its outputs written for what it drew).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass(frozen=True)
class Command:
    """A leaf command defined inside its group's module."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


Target = Command | str


def import_by_name(name: str) -> ModuleType:
    """Import the module ``name`` (dotted) when called, not when this package is loaded: how the coordinator
    uses modules of ``simulations/``, the layer above it, without an import arrow pointing up."""
    return importlib.import_module(name)


SIMULATE_MODULE = "simulations.run_local"  # the local consortium of `confar run --simulate` (and --check)

COMMANDS: list[tuple[str, Target]] = [
    ("certs", "coordinator.commands.certs"),
    ("simulate", "simulations.launcher"),
    ("bench", "coordinator.commands.bench"),
    ("demo", "coordinator.demo"),
    ("privacy", "coordinator.commands.privacy"),
    ("run", "coordinator.run"),
]
