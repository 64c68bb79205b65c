"""The ``confar`` commands: one module per command group, and the shape the command line is built from.

A target is a :class:`Command` (help, arguments, run) or a module that is either a command itself (``HELP``,
``add_arguments(parser)``, ``run(args) -> int``) or a group (``HELP`` and ``SUBCOMMANDS``, a table of
``(name, target)``). :mod:`coordinator.cli` lists the coordinator's own groups and adds the commands other
packages register (``simulate`` and ``bench`` from ``simulations/``, found through the package's entry
points by :mod:`coordinator.plugins`, so no import arrow points from ``coordinator`` up to ``simulations``).

To add a command: an entry in a group's ``SUBCOMMANDS`` (a :class:`Command` next to its siblings, or a
module), a new group module in :mod:`coordinator.cli`'s table, or (outside the coordinator) an entry point in
the group ``confar.commands``.

Exit codes, every command: 0 success; 1 the run failed or a party refused (message on stderr); 2 bad command
line, configuration or input file (the message names it); 130 interrupted (Ctrl-C), after every process the
command started has been stopped. A command may add its own (``confar privacy audit``: 1 = VIOLATED;
``confar run``: 3 = stopped early at a registry's privacy budget, its outputs written for what it drew).
"""

from __future__ import annotations

import argparse
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


Target = Command | ModuleType
