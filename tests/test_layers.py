"""Imports flow one way: hss -> mechanisms -> parties, coordinator -> simulations (DESIGN.md section 3)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hss", "mechanisms", "parties", "coordinator", "simulations", "proto")
FORBIDDEN = {
    "hss": {"mechanisms", "parties", "coordinator", "simulations", "proto", "grpc"},
    "mechanisms": {"parties", "coordinator", "simulations", "proto", "grpc"},
    "parties": {"coordinator", "simulations"},
    "coordinator": {"simulations"},
}


def imported_tops(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    tops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops.add(node.module.split(".")[0])
    return tops


def test_no_wrong_way_imports() -> None:
    bad = []
    for pkg, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / pkg).rglob("*.py")):
            hits = imported_tops(path) & forbidden
            if hits:
                bad.append(f"{path.relative_to(ROOT)} imports {sorted(hits)}")
    assert not bad, "wrong-way imports:\n" + "\n".join(bad)


def test_pure_layers_do_no_network_io() -> None:
    for pkg in ("hss", "mechanisms"):
        for path in (ROOT / pkg).rglob("*.py"):
            assert not imported_tops(path) & {"socket", "urllib", "http", "requests"}, path
