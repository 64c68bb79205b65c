"""mechanisms/abcdp and mechanisms/simulators stay pure: no wrong-way imports, no I/O modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FORBIDDEN = {"grpc", "proto", "parties", "coordinator", "simulations",
             "socket", "requests", "urllib", "shutil"}


@pytest.mark.parametrize("package", ["mechanisms/abcdp", "mechanisms/simulators"])
def test_no_forbidden_imports_or_file_io(package: str) -> None:
    files = sorted((ROOT / package).glob("*.py"))
    assert files
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]}
            else:
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    assert node.func.id != "open", f"{path.name} opens a file"
                continue
            assert not roots & FORBIDDEN, f"{path.name} imports {roots & FORBIDDEN}"


def test_readme_lists_every_module() -> None:
    for package in ("mechanisms/abcdp", "mechanisms/simulators"):
        readme = (ROOT / package / "README.md").read_text()
        for path in (ROOT / package).glob("*.py"):
            if path.name != "__init__.py":
                assert f"`{path.name}`" in readme, f"{package}/README.md does not list {path.name}"
