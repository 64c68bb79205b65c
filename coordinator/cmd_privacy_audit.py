"""``confar privacy audit AUDIT.toml --out DIR``: membership-inference audit of a registry's stated guarantee.

The audit engine lives in :mod:`simulations.privacy_audit` (it runs the decision protocol in memory and starts
a local consortium of real daemons for the confirmation run), loaded by name: the coordinator never imports
simulations. Exit codes: 0 consistent (or no finite claim, reported), 1 VIOLATED, 2 bad file or arguments.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

HELP = "membership-inference audit of a stated privacy guarantee on the real protocol (AUDIT.toml)"
ENGINE = "simulations.privacy_audit"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("audit", type=Path, help="AUDIT.toml (schema in simulations/privacy_audit.py)")
    p.add_argument("--out", type=Path, required=True, help="folder for the JSON and the plot")
    p.add_argument("--no-daemons", action="store_true", help="skip the confirmation run over real daemons")


def run(args: argparse.Namespace) -> int:
    engine = importlib.import_module(ENGINE)
    return int(engine.run(args))
