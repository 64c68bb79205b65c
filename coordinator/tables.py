"""Typed reading of TOML tables with errors that name the file and the dotted key (:class:`Reader`,
:class:`ExperimentError`), and the experiment file's ``[coordinator]`` and ``[[parties]]`` tables. PLAN.toml
(``confar privacy``) is read with a :class:`Reader` too (``coordinator.privacy``), its ``[coordinator]`` and
``[[parties]]`` tables by its own methods (a plan may be insecure and names no data).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto.spec import PartyEntry, default_identity, identity_problem
from proto.tls import TlsError, TlsMaterial

M_MIN, M_MAX = 2, 15  # registries in a session (the [[parties]] list, [simulate] parties)


class ExperimentError(ValueError):
    """A problem in the experiment file; the message names the file and the dotted key path."""


Err = Callable[[str, str], ExperimentError]


class Reader:
    """Typed access to TOML tables with errors naming ``<file>: <dotted.key>: <problem>``."""

    def __init__(self, source: Path, base_dir: Path, error: type[ValueError] = ExperimentError) -> None:
        self.source, self.base_dir, self.error = source, base_dir, error

    def err(self, key: str, msg: str) -> ValueError:
        return self.error(f"{self.source}: {key}: {msg}")

    def table(self, doc: dict[str, Any], key: str, required: bool = False) -> dict[str, Any] | None:
        v = doc.get(key)
        if v is None:
            if required:
                raise self.err(key, "missing table (required)")
            return None
        if not isinstance(v, dict):
            raise self.err(key, "must be a table")
        return v

    def only(self, tbl: dict[str, Any], where: str, allowed: set[str] | tuple[str, ...]) -> None:
        extra = sorted(set(tbl) - set(allowed))
        if extra:
            raise self.err(f"{where}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def get(
        self, tbl: dict[str, Any], where: str, key: str, typ: type | tuple[type, ...], default: Any = ...
    ) -> Any:
        if key not in tbl:
            if default is ...:
                raise self.err(f"{where}.{key}", "missing (required)")
            return default
        v = tbl[key]
        ok = isinstance(v, typ) and not (isinstance(v, bool) and typ is not bool and bool not in _tuple(typ))
        if not ok:
            raise self.err(f"{where}.{key}", f"has the wrong type: {v!r} (expected {_type_name(typ)})")
        return v

    def number(
        self,
        tbl: dict[str, Any],
        where: str,
        key: str,
        default: Any = ...,
        *,
        gt: float | None = None,
        ge: float | None = None,
        lt: float | None = None,
        allow_inf: bool = False,
    ) -> Any:
        v = self.get(tbl, where, key, (int, float), default)
        if v is None or (key not in tbl and default is not ...):
            return v
        x = float(v)
        if math.isnan(x) or (math.isinf(x) and not allow_inf):
            raise self.err(f"{where}.{key}", f"must be a finite number, got {v!r}")
        if gt is not None and not x > gt:
            raise self.err(f"{where}.{key}", f"must be > {gt:g}, got {v!r}")
        if ge is not None and not x >= ge:
            raise self.err(f"{where}.{key}", f"must be >= {ge:g}, got {v!r}")
        if lt is not None and not x < lt:
            raise self.err(f"{where}.{key}", f"must be < {lt:g}, got {v!r}")
        return x

    def integer(
        self,
        tbl: dict[str, Any],
        where: str,
        key: str,
        default: Any = ...,
        *,
        lo: int = 0,
        hi: int | None = None,
    ) -> Any:
        v = self.get(tbl, where, key, int, default)
        if v is None or (key not in tbl and default is not ...):
            return v
        if v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise self.err(f"{where}.{key}", f"must be in {rng}, got {v}")
        return int(v)

    def choice(
        self, tbl: dict[str, Any], where: str, key: str, choices: tuple[str, ...], default: Any = ...
    ) -> str:
        v = self.get(tbl, where, key, str, default)
        if v not in choices:
            raise self.err(f"{where}.{key}", f"must be one of {', '.join(choices)}, got {v!r}")
        return str(v)

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def _tuple(typ: type | tuple[type, ...]) -> tuple[type, ...]:
    return typ if isinstance(typ, tuple) else (typ,)


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "table"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(typ))


@dataclass(frozen=True)
class CoordinatorSettings:
    identity: str = "coordinator"
    insecure: bool = False
    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    rpc_timeout_s: float = 30.0

    def tls(self, error: type[ValueError] = ExperimentError, source: str = "") -> TlsMaterial | None:
        """Load the coordinator's TLS material (None when insecure); errors name coordinator.<key>."""
        if self.insecure:
            return None
        pre = f"{source}: " if source else ""
        for k, p in (("cert", self.cert), ("key", self.key), ("ca", self.ca)):
            if p is None:
                raise error(f"{pre}coordinator.{k}: missing (required unless insecure = true)")
            if not p.is_file():
                raise error(f"{pre}coordinator.{k}: file {p} does not exist")
        assert self.cert is not None and self.key is not None and self.ca is not None
        try:
            return TlsMaterial.load(self.cert, self.key, self.ca, expect_identity=self.identity)
        except TlsError as exc:
            raise error(f"{pre}coordinator: {exc}") from exc


def read_coordinator(r: Reader, coord: dict[str, Any] | None, need_files: bool = True) -> CoordinatorSettings:
    """The ``[coordinator]`` table (PLAN.toml and EXPERIMENT.toml)."""
    coord = coord or {}
    r.only(coord, "coordinator", ("identity", "cert", "key", "ca", "insecure", "rpc_timeout_s"))
    identity = r.get(coord, "coordinator", "identity", str, "coordinator")
    if identity_problem(identity) is not None:
        raise r.err("coordinator.identity", f"{identity!r} is not a valid certificate name")
    insecure = r.get(coord, "coordinator", "insecure", bool, False)
    timeout = r.number(coord, "coordinator", "rpc_timeout_s", 30.0, gt=0.0)
    files: dict[str, Path | None] = {}
    for k in ("cert", "key", "ca"):
        v = r.get(coord, "coordinator", k, str, None)
        if v is None and not insecure and need_files:
            raise r.err(f"coordinator.{k}", "missing (required unless insecure = true)")
        files[k] = None if v is None else r.path(v)
    return CoordinatorSettings(identity, insecure, files["cert"], files["key"], files["ca"], float(timeout))


def read_parties(r: Reader, raw: Any, required: bool = True) -> list[PartyEntry]:
    """The ``[[parties]]`` array (PLAN.toml and EXPERIMENT.toml): ids 1..m without gaps or repeats."""
    if raw is None and not required:
        return []
    if not isinstance(raw, list) or not raw:
        raise r.err("parties", "needs at least one [[parties]] table")
    parties: list[PartyEntry] = []
    for i, pt in enumerate(raw):
        where = f"parties[{i}]"
        if not isinstance(pt, dict):
            raise r.err(where, "must be a table")
        r.only(pt, where, ("id", "identity", "address"))
        pid = r.integer(pt, where, "id", lo=1)
        ident = r.get(pt, where, "identity", str, default_identity(pid))
        if identity_problem(ident) is not None:
            raise r.err(f"{where}.identity", f"{ident!r} is not a valid certificate name")
        addr = r.get(pt, where, "address", str)
        if ":" not in addr or not addr.rsplit(":", 1)[1].isdigit():
            raise r.err(f"{where}.address", f"must be host:port, got {addr!r}")
        parties.append(PartyEntry(pid, ident, addr))
    ids = [p.id for p in parties]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise r.err("parties", f"duplicate party id {dup[0]}")
    if sorted(ids) != list(range(1, len(ids) + 1)):
        raise r.err("parties", f"ids must be 1..m without gaps, got {sorted(ids)}")
    names = [p.identity for p in parties]
    if len(set(names)) != len(names):
        raise r.err("parties", f"party identities must be distinct, got {names}")
    return sorted(parties, key=lambda p: p.id)
