"""Imports flow one way (DESIGN.md section 3; the proto rule is issue 13's):

    hss -> mechanisms -> parties, coordinator -> simulations
    hss -> proto      -> parties, coordinator

``proto/`` owns the whole wire contract and what both sides of it share: the .proto files and generated
code, the session spec (``proto.spec``: the one party-entry type and the one identity rule), the serde
modules (``proto.serde``, ``proto.serde_session``, ``proto.serde_privacy``: the only place messages are
built), the records that cross the wire (``proto.records``: peer frames, run-step references, run charges,
the party's answers), mutual TLS (``proto.tls``) and durable writes (``proto.files``). It may use
``hss`` (a session's fixed-point format and protocol parameters) but not ``mechanisms``, and neither ``hss``
nor ``mechanisms`` imports it. ``parties/`` and ``coordinator/`` both build on ``proto`` and never import
each other: all they exchange goes through the wire contract. Only ``simulations/``, which launches both,
imports both.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hss", "mechanisms", "parties", "coordinator", "simulations", "proto")
FORBIDDEN = {
    "hss": {"mechanisms", "parties", "coordinator", "simulations", "proto", "grpc"},
    "mechanisms": {"parties", "coordinator", "simulations", "proto", "grpc"},
    "parties": {"coordinator", "simulations"},
    "coordinator": {"parties", "simulations"},
    "proto": {"mechanisms", "parties", "coordinator", "simulations"},
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


#: The transport modules of ``parties/``, the only ones that may import grpc: the Party and Peer services and
#: their boundary (``service.py``: a domain refusal mapped to its status code, once), the server and its
#: lifecycle (``daemon.py``) and the peer links' gRPC streams (``links.py``). Every other module of
#: ``parties/`` is the party's domain (policy, sessions, peering, steps, ledgers, analyses, sources): it says
#: no with ``parties.refusal.Refusal`` and knows no transport.
PARTIES_TRANSPORT = {"parties/service.py", "parties/daemon.py", "parties/links.py"}


def test_party_domain_imports_no_grpc() -> None:
    """No domain module of ``parties/`` imports grpc, not even inside a function."""
    bad = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "parties").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in PARTIES_TRANSPORT and "grpc" in imported_tops(path)
    ]
    assert not bad, f"grpc imported outside the transport modules {sorted(PARTIES_TRANSPORT)}: {bad}"
    assert all((ROOT / rel).exists() for rel in PARTIES_TRANSPORT)


def test_each_refusal_reason_is_answered_with_its_status_code() -> None:
    """The service maps every reason of ``parties.refusal.Reason`` to the gRPC status code of the same name
    (also the audit line's outcome), and nothing else."""
    from parties.refusal import Reason
    from parties.service import STATUS

    assert set(STATUS) == set(Reason)
    assert all(code.name == reason.name for reason, code in STATUS.items())


def test_pure_layers_do_no_network_io() -> None:
    for pkg in ("hss", "mechanisms"):
        for path in (ROOT / pkg).rglob("*.py"):
            assert not imported_tops(path) & {"socket", "urllib", "http", "requests"}, path


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _load_time_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours imported when ``path`` is loaded: top-level statements only (not inside functions,
    not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                out.update(
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                    for a in node.names
                )
            elif isinstance(node, ast.If | ast.Try | ast.With):
                visit(node.body)
                for extra in getattr(node, "orelse", []), getattr(node, "finalbody", []):
                    visit(extra)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return {m for m in out if m in known}


def test_no_import_cycles() -> None:
    """No module of ours imports (at load time) a module that imports it back, directly or not: e.g. the
    analyses register through one explicit table (parties/registry.py), not by import side effects."""
    paths = {
        _module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "_pb2" not in p.name
    }
    known = set(paths)
    graph = {m: _load_time_imports(p, known) - {m} for m, p in paths.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def dfs(m: str, stack: list[str]) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append([*stack[stack.index(n) :], n])
            elif n not in state:
                dfs(n, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            dfs(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


#: confar's own services; the standard health service's messages are built where they are served.
OWN_MESSAGES = {"party_pb2", "peer_pb2", "relay_pb2", "common_pb2"}
#: Files allowed to build one of confar's messages outside proto/, each with why (none today).
NOT_YET_SERDE: dict[str, str] = {}


def test_messages_built_only_in_proto() -> None:
    """Protobuf messages of confar's services are built only in ``proto/`` (``proto.serde*``): no module in
    ``parties/`` or ``coordinator/`` calls a ``party_pb2.X(...)``-style constructor (stubs, servicers and
    type annotations are fine)."""
    bad = []
    for pkg in ("parties", "coordinator"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
                func = node.func if isinstance(node, ast.Call) else None
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id in OWN_MESSAGES
                    and rel not in NOT_YET_SERDE
                ):
                    bad.append(f"{rel}:{node.lineno} builds {func.value.id}.{func.attr}")
    assert not bad, "protobuf messages built outside proto/ (use proto.serde*):\n" + "\n".join(bad)
