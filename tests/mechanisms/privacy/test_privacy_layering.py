"""mechanisms/privacy stays pure: no wrong-way imports, no I/O, no global randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import mechanisms.privacy

PKG = Path(mechanisms.privacy.__file__).parent
FORBIDDEN_MODULES = ("grpc", "proto", "parties", "coordinator", "simulations", "socket", "requests")
FORBIDDEN_CALLS = ("open", "print", "input")
FORBIDDEN_ATTRS = ("savefig", "show", "write_text", "write_bytes", "seed")


def _modules() -> list[Path]:
    files = sorted(PKG.glob("*.py"))
    assert len(files) >= 10
    return files


def test_no_wrong_way_imports() -> None:
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{path.name} imports {name}"


def test_no_io_and_no_global_randomness() -> None:
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} calls {node.func.id}"
            if isinstance(node, ast.Attribute):
                assert node.attr not in FORBIDDEN_ATTRS, f"{path.name}:{node.lineno} uses .{node.attr}"
                if isinstance(node.value, ast.Attribute) and node.value.attr == "random":
                    raise AssertionError(f"{path.name}:{node.lineno} uses global np.random.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "matplotlib":
                assert all(a.name != "pyplot" for a in node.names), f"{path.name} imports pyplot"


def test_every_module_has_a_docstring() -> None:
    for path in _modules():
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and len(doc) > 40, f"{path.name} needs a module docstring saying what it owns"
