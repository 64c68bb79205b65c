"""What the coordinator uses from the layer above it, found through the package's entry points.

``simulations/`` composes everything (the local consortium of ``confar run --simulate``, the privacy audit's
engine, the benchmarks), so the coordinator must not import it: an import arrow would point up (DESIGN.md
§3). Instead ``pyproject.toml`` declares what ``simulations`` offers, and the coordinator finds it by name in
the installed package's metadata (:func:`importlib.metadata.entry_points`), the standard plug-in registry:

* group ``confar.commands``: top-level ``confar`` commands (``simulate``; ``bench`` and its benchmarks), each
  a module with ``HELP`` and ``add_arguments(parser)`` / ``run(args) -> int`` or a group's ``SUBCOMMANDS``;
* group ``confar.services``: ``local-consortium`` (``simulate_experiment``, ``synthetic_data``: ``confar run
  --simulate`` and ``--check``, ``study.fit(simulate=True)``) and ``privacy-audit`` (``run``: ``confar
  privacy audit``).

This module is the coordinator's one way to reach them (``tests/test_layers.py`` fails on any other
by-name import in ``coordinator/`` or ``parties/``, and on an entry point that is not in ``simulations``).
A command whose module does not import is listed as unavailable with the reason; a missing service is a
clear error naming the install step (the metadata exists only once the project is installed:
``pip install -e .``, which ``make`` does).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

COMMANDS_GROUP = "confar.commands"
SERVICES_GROUP = "confar.services"


class MissingService(RuntimeError):
    """A service the coordinator needs is not installed (or its module does not import)."""


def _entries(group: str) -> list[EntryPoint]:
    return sorted(entry_points(group=group), key=lambda ep: ep.name)


def commands() -> list[tuple[str, ModuleType | ImportError]]:
    """The commands other packages add to ``confar``, by name: the module, or why it could not be loaded."""
    out: list[tuple[str, ModuleType | ImportError]] = []
    for ep in _entries(COMMANDS_GROUP):
        try:
            out.append((ep.name, ep.load()))
        except ImportError as exc:  # a command whose module is missing must not break the others
            out.append((ep.name, exc))
    return out


def service(name: str) -> ModuleType:
    """The module registered as service ``name`` (group ``confar.services``)."""
    found = [ep for ep in _entries(SERVICES_GROUP) if ep.name == name]
    if not found:
        raise MissingService(
            f"no {name!r} service is installed (entry point group {SERVICES_GROUP!r}): install confar into "
            "the environment (pip install -e . in the checkout; make does it)"
        )
    try:
        module: ModuleType = found[0].load()
    except ImportError as exc:
        raise MissingService(f"the {name!r} service ({found[0].value}) does not import: {exc}") from exc
    return module
