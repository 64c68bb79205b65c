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
imports both. What ``simulations/`` adds to the coordinator (the ``simulate`` and ``bench`` commands, the
local consortium, the privacy audit's engine) the coordinator finds through the package's entry points
(:data:`ENTRY_POINTS_READER`), and any by-name import in ``coordinator/`` or ``parties/`` fails.
"""

from __future__ import annotations

import ast
import re
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
    """Top-level packages ``path`` imports anywhere: at module level, inside functions and classes, and under
    ``if TYPE_CHECKING`` (a layer the type checker needs is still a dependency)."""
    return _tops(ast.parse(path.read_text(), filename=str(path)))


def _tops(tree: ast.AST) -> set[str]:
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


#: Calls that import a module named at run time.
BY_NAME_CALLS = {
    "import_module", "__import__", "spec_from_file_location", "module_from_spec", "run_module", "run_path"
}
#: The coordinator's one way to what ``simulations/`` offers: the package's entry points, read here only.
ENTRY_POINTS_READER = "coordinator/plugins.py"


def _by_name_imports(path: Path) -> set[tuple[str, str]]:
    """(file, enclosing function) of every call in ``path`` that imports a module named at run time, or reads
    the package's entry points (``entry_points``)."""
    rel = str(path.relative_to(ROOT))
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            where = node.name
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in BY_NAME_CALLS or name == "entry_points":
                found.add((rel, where))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(path.read_text(), filename=rel), "<module>")
    return found


def test_coordinator_reaches_simulations_only_through_its_entry_points() -> None:
    """No by-name import anywhere in ``coordinator/`` or ``parties/`` (which the import checks above cannot
    see): the coordinator reaches ``simulations/`` only through the entry points ``pyproject.toml`` declares,
    read in :data:`ENTRY_POINTS_READER` alone."""
    paths = [p for pkg in ("coordinator", "parties") for p in sorted((ROOT / pkg).rglob("*.py"))]
    found = set().union(*(_by_name_imports(p) for p in paths))
    assert found == {(ENTRY_POINTS_READER, "_entries")}, (
        f"by-name imports in coordinator/ and parties/: {sorted(found)}; the coordinator reaches "
        f"simulations/ only through {ENTRY_POINTS_READER} (declare an entry point, or move the code up)"
    )


def test_entry_points_are_declared_in_simulations_and_resolve() -> None:
    """Every ``confar.*`` entry point of ``pyproject.toml`` names a module of ``simulations/`` (the one layer
    above the coordinator) that exists, and the installed metadata has the same table (an install step that
    was not re-run after pyproject.toml changed would leave the coordinator without its local consortium)."""
    import importlib.util
    import tomllib
    from importlib.metadata import entry_points

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    groups = {g: t for g, t in declared.items() if g.startswith("confar.")}
    assert set(groups) == {"confar.commands", "confar.services"}, sorted(groups)
    for group, table in groups.items():
        for name, target in table.items():
            what = f"{group}.{name} = {target!r}"
            assert re.fullmatch(r"simulations(\.\w+)+", target), f"{what}: not a module of simulations/"
            assert importlib.util.find_spec(target) is not None, f"{what}: no such module"
        installed = {ep.name: ep.value for ep in entry_points(group=group)}
        assert installed == table, f"{group}: installed {installed}, pyproject.toml {table}: pip install -e ."


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


class _RunTimeImports(ast.NodeVisitor):
    """The modules of ours (``known``) a module imports when it runs: at module level and inside functions and
    classes alike (a function-level import runs at the first call, so a cycle through it is a cycle all the
    same, only one that surfaces later), but not under ``if TYPE_CHECKING`` (never run)."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.orelse:
                self.visit(stmt)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(a.name for a in node.names if a.name in self.known)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0:
            for a in node.names:  # ``from pkg import module`` names the module, ``from module import x`` it
                sub = f"{node.module}.{a.name}"
                target = sub if sub in self.known else node.module
                if target in self.known:
                    self.found.add(target)


def _run_time_imports(tree: ast.AST, known: set[str]) -> set[str]:
    visitor = _RunTimeImports(known)
    visitor.visit(tree)
    return visitor.found


def _import_graph() -> dict[str, set[str]]:
    paths = {
        _module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "_pb2" not in p.name
    }
    known = set(paths)
    trees = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in paths.items()}
    return {m: _run_time_imports(tree, known) - {m} for m, tree in trees.items()}


def test_imports_inside_functions_are_counted() -> None:
    """Both checks see an import made inside a function (the shape of the cycle issue 22 removed: hss.session
    importing hss.modes inside a method), and the cycle check leaves out ``if TYPE_CHECKING`` blocks."""
    src = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from hss.svt import SvtFormat\n"
        "class SessionParams:\n"
        "    def supports(self, mode):\n        from hss.modes import reveal_mode\n        return mode\n"
        "def helper():\n    import parties.steps\n"
    )
    known = {"hss.modes", "hss.svt", "parties.steps"}
    assert _run_time_imports(src, known) == {"hss.modes", "parties.steps"}
    assert {"hss", "parties"} <= _tops(src)


def test_no_import_cycles() -> None:
    """No module of ours imports a module that imports it back, directly or not, whether at load time or
    inside a function: e.g. the analyses register through one explicit table (parties/registry.py), not by
    import side effects, and hss.session (below the protocols) never reaches up to the reveal-mode table."""
    graph = _import_graph()
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


#: ``hss`` names still importable from a module other than the one that defines them, each with why.
HSS_REEXPORTS = {
    ("hss.svt", "SvtFormat"): "the SVT protocol's format travels with it; not yet moved (issue 22 item 5)",
}


def _defined_at_top(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def test_hss_names_have_one_import_path() -> None:
    """Every ``from hss.x import name`` (in any package or test) takes ``name`` from the module that defines
    it: e.g. ``SessionParams`` from ``hss.session``, not through ``hss.protocols`` (issue 22)."""
    hss_paths = {_module_name(p): p for p in (ROOT / "hss").rglob("*.py")}
    defined = {m: _defined_at_top(ast.parse(p.read_text(), filename=str(p))) for m, p in hss_paths.items()}
    bad = []
    for pkg in (*PACKAGES, "tests"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in defined):
                    continue
                for alias in node.names:
                    name = alias.name
                    if f"{node.module}.{name}" in hss_paths or name in defined[node.module]:
                        continue
                    if (node.module, name) not in HSS_REEXPORTS:
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} takes {name} from {node.module}")
    assert not bad, "hss names imported through a module that does not define them:\n" + "\n".join(bad)


# ---- the variant axes: a kind is asked of its plan, not compared as a string (issue 38, item 1) -----------

#: the sampler's and a decision's kinds (``coordinator.sampler_settings.KINDS``, ``mechanisms.kinds.plan``)
KIND_STRINGS = {"mh", "adaptive-mh", "penalty", "rejection", "abcdp", "statistics", "effects"}
#: the modules that own the kinds and may compare them: the plans and the parser of the experiment file
KIND_OWNERS = {
    "coordinator/sampler_settings.py",  # SamplerSettings: markov, simulator_run, rejection, kept_warmup, ...
    "coordinator/experiment.py",  # the [sampler] / [model] parser (which keys a kind takes)
    "mechanisms/kinds/plan.py",  # DecisionPlan: the kind's name looked up in the registry of kinds
    "mechanisms/samplers/requests.py",  # DecisionRequest: its checks and `rejection`
    "proto/study.py",  # a study's check of a session's wire params (proto does not import mechanisms)
}


def kind_comparisons(path: Path) -> list[int]:
    """Lines of ``path`` comparing something with a kind string (or a tuple of them, or the kinds' tuples)."""

    def is_kind(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in KIND_STRINGS
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return bool(node.elts) and all(is_kind(e) for e in node.elts)
        return isinstance(node, ast.Name) and node.id in ("KINDS", "MH_KINDS", "PLAN_KINDS")

    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare) and any(is_kind(o) for o in (n.left, *n.comparators))
    ]


def test_kinds_are_compared_only_where_they_are_owned() -> None:
    """Outside the modules that own the kinds, code asks the plan what varies with its kind
    (``SamplerSettings.markov``, ``DecisionPlan.rejection``, ...) instead of comparing kind strings.
    ``simulations/`` is not checked: its audit and figure configs have kinds of their own."""
    found = []
    for pkg in ("hss", "mechanisms", "parties", "coordinator", "proto"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in KIND_OWNERS or path.name.endswith("_pb2.py"):
                continue
            found += [f"{rel}:{line}" for line in kind_comparisons(path)]
    assert not found, f"kind strings compared outside their owners: {found}"


#: the reveal modes (``hss.modes.REVEAL``) and the modules that own them: the protocol side's table and the
#: privacy side's (``mechanisms.privacy.threat``: each mode's ``Observation``, which the charge asks)
MODE_STRINGS = {"sum", "blinded", "sign", "svt"}
MODE_OWNERS = {"hss/modes.py", "mechanisms/privacy/threat.py"}


def mode_comparisons(path: Path) -> list[int]:
    """Lines of ``path`` testing a value against a reveal mode's name (``==``, ``!=``, or ``in`` a tuple of
    them; ``"svt" in record``, a key's lookup, is not a comparison of a mode)."""

    def is_mode(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in MODE_STRINGS
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and bool(node.elts) and all(
            is_mode(e) for e in node.elts
        )

    lines = []
    for n in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not isinstance(n, ast.Compare):
            continue
        operands = [n.left, *n.comparators]
        for op, left, right in zip(n.ops, operands[:-1], operands[1:], strict=True):
            equality = isinstance(op, ast.Eq | ast.NotEq) and (is_mode(left) or is_mode(right))
            membership = isinstance(op, ast.In | ast.NotIn) and is_mode(right) and not isinstance(
                right, ast.Constant
            )
            if equality or membership:
                lines.append(n.lineno)
                break
    return lines


def test_reveal_modes_are_compared_only_where_they_are_owned() -> None:
    """Outside the two tables of reveal modes, code asks the mode's entry (``RevealMode.lazy_coin``,
    ``.inputs``) or what its output is to the accounting (``RevealView.observation``: ``only_bit``,
    ``of_sum``, ``noisy_sum``) instead of comparing mode names; a release names ``RELEASE_MODE``.
    ``simulations/`` is not checked: its benchmarks and audit configs choose modes by name."""
    found = []
    for pkg in ("hss", "mechanisms", "parties", "coordinator", "proto"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in MODE_OWNERS or path.name.endswith("_pb2.py"):
                continue
            found += [f"{rel}:{line}" for line in mode_comparisons(path)]
    assert not found, f"reveal-mode names compared outside their owners: {found}"


def test_mode_comparisons_are_seen(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if view.observed != "sign":\n    pass\nok = mode in ("sum", "blinded")\nkey = "svt" in record\n'
        'k = s.kind == "mh"\nb = view.observation.only_bit\nz = "sum" == m\n'
    )
    assert mode_comparisons(probe) == [1, 3, 7]  # not a key's lookup, a kind or a property


def test_kind_comparisons_are_seen(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if s.kind == "abcdp":\n    pass\nok = kind in MH_KINDS\nx = mode == "sign"\n'
        'y = p.kind not in ("mh", "penalty")\nz = s.markov\nw = f.kind in _RUN_KINDS\n'
    )
    assert kind_comparisons(probe) == [1, 3, 5]  # not the mode, the property or a frame kind
