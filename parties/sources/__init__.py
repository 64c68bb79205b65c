"""Where a registry's records live, and how its daemon reads them: the ``[data]`` table of the party config.

One interface (:class:`parties.sources.base.DataSource`) with one implementation per ``data.source``:

=========== ============================================== ===========================================
source      where                                          module
=========== ============================================== ===========================================
``csv``     a CSV file (``path``; the default for .csv)    ``parties.sources.files``
``parquet`` a Parquet file (``path``; needs pyarrow)       ``parties.sources.files``
``sql``     a SELECT on a SQLAlchemy URL (``url``, ``query``)  ``parties.sources.sql``
``sparql``  a SELECT on a SPARQL endpoint (``endpoint``)    ``parties.sources.sparql``
=========== ============================================== ===========================================

Each module's docstring documents its keys (``sql``: ``url``, ``query`` / ``query_file``,
``password_file`` / ``password_env``, ``timeout_s``; ``sparql``: ``endpoint``, ``query`` / ``query_file``,
``default_graph``, ``named_graph``, ``page_size``, ``timeout_s``, ``tls_cert`` / ``tls_key`` / ``tls_ca``,
``username`` with ``password_file`` / ``password_env``). No key ever holds a secret: a URL with a password is
refused.

Common keys: ``model`` and ``model_args`` (the schema the records are checked against, at start-up and by
``confar-party check-config``), ``max_records`` (default 10,000,000: a larger result is refused, nothing
is loaded). The daemon reads its source **once, when it starts** (:func:`parties.sources.base.take_snapshot`),
and runs every session on that snapshot; its size and SHA-256 content hash go to the audit log (a
``DataSnapshot`` line at start-up, and ``data_sha256`` on every OpenSession line). New records reach the
daemon when it is restarted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from parties.sources.base import (
    DataProblems,
    DataSource,
    RawTable,
    Snapshot,
    SourceError,
    content_hash,
    take_snapshot,
)
from parties.sources.files import CsvSource, ParquetSource
from parties.sources.sparql import SparqlSource
from parties.sources.sql import SqlSource

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "SOURCES",
    "DataConfig",
    "DataProblems",
    "DataSource",
    "RawTable",
    "Snapshot",
    "SourceError",
    "content_hash",
    "read_data_config",
    "snapshot",
    "take_snapshot",
]

DEFAULT_MAX_RECORDS = 10_000_000
LOOPBACK = ("127.0.0.1", "localhost", "::1")
SOURCES = ("csv", "parquet", "sql", "sparql")
COMMON_KEYS = {"source", "model", "model_args", "max_records"}
QUERY_KEYS = {"query", "query_file"}
KEYS: dict[str, set[str]] = {
    "csv": {"path"},
    "parquet": {"path"},
    "sql": {"url", "password_file", "password_env", "timeout_s"} | QUERY_KEYS,
    "sparql": {
        "endpoint",
        "default_graph",
        "named_graph",
        "page_size",
        "timeout_s",
        "tls_cert",
        "tls_key",
        "tls_ca",
        "username",
        "password_file",
        "password_env",
    }
    | QUERY_KEYS,
}

Err = Callable[[str, str], Exception]


@dataclass(frozen=True)
class DataConfig:
    """The validated ``[data]`` table: where the records are, and the schema they must match."""

    source: DataSource
    model: str | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    max_records: int = DEFAULT_MAX_RECORDS

    @property
    def kind(self) -> str:
        return self.source.kind


class Table:
    """Typed access to one config table, errors through the config reader's ``err(key, message)``."""

    def __init__(self, tbl: dict[str, Any], where: str, base: Path, err: Err) -> None:
        self.tbl, self.where, self.base, self.err = tbl, where, base, err

    def get(self, key: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
        full = f"{self.where}.{key}"
        if key not in self.tbl:
            if default is ...:
                raise self.err(full, "missing (required)")
            return default
        v = self.tbl[key]
        types = typ if isinstance(typ, tuple) else (typ,)
        if isinstance(v, bool) and bool not in types:
            raise self.err(full, f"expected {'/'.join(t.__name__ for t in types)}, got a boolean")
        if not isinstance(v, types):
            raise self.err(full, f"expected {'/'.join(t.__name__ for t in types)}, got {type(v).__name__}")
        return v

    def path(self, key: str, must_exist: bool = True, default: Any = ...) -> Path | None:
        raw = self.get(key, str, default)
        if raw is None:
            return None
        p = Path(raw)
        p = p if p.is_absolute() else self.base / p
        if must_exist and not p.is_file():
            raise self.err(f"{self.where}.{key}", f"file {p} does not exist")
        return p


def read_data_config(tbl: dict[str, Any], config_path: Path, err: Err) -> DataConfig | None:
    """The ``[data]`` table (None when absent), every key checked; ``err(key, message)`` makes the error."""
    if not tbl:
        return None
    t = Table(tbl, "data", config_path.parent, err)
    kind = t.get("source", str, None)
    if kind is None:
        if "path" not in tbl:
            raise err(
                "data.source", f"missing: one of {list(SOURCES)} (or data.path to a .csv/.parquet file)"
            )
        suffix = Path(t.get("path", str)).suffix.lower()
        kind = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(suffix)
        if kind is None:
            raise err(
                "data.path", f"unsupported data file type {suffix!r} (use .csv or .parquet, or data.source)"
            )
    if kind not in SOURCES:
        raise err("data.source", f"{kind!r} is not one of {list(SOURCES)}")
    allowed = COMMON_KEYS | KEYS[kind]
    extra = sorted(set(tbl) - allowed)
    if extra:
        raise err(
            f"data.{extra[0]}",
            f"unknown key for data.source = {kind!r} (allowed: {', '.join(sorted(allowed))})",
        )
    model = t.get("model", str, None)
    model_args = t.get("model_args", dict, {})
    if model_args and model is None:
        raise err("data.model_args", "given without data.model")
    max_records = t.get("max_records", int, DEFAULT_MAX_RECORDS)
    if max_records < 1:
        raise err("data.max_records", f"must be >= 1, got {max_records}")
    source: DataSource
    if kind in ("csv", "parquet"):
        path = t.path("path")
        assert path is not None
        source = CsvSource(path) if kind == "csv" else ParquetSource(path)
    elif kind == "sql":
        query, query_key = read_query(t)
        url = t.get("url", str)
        _no_password_in_url(url, err)
        pw_file, pw_env = read_password_keys(t)
        source = SqlSource(url, query, query_key, pw_file, pw_env, read_timeout(t))
    elif kind == "sparql":
        source = read_sparql(t)
    else:  # pragma: no cover - SOURCES and KEYS are checked above
        raise err("data.source", f"{kind!r} is not one of {list(SOURCES)}")
    return DataConfig(source=source, model=model, model_args=dict(model_args), max_records=max_records)


def read_sparql(t: Table) -> SparqlSource:
    query, query_key = read_query(t)
    endpoint = t.get("endpoint", str)
    _no_password_in_url(endpoint, t.err, "data.endpoint")
    if urlsplit(endpoint).scheme.lower() not in ("http", "https"):
        raise t.err("data.endpoint", f"must be an http:// or https:// URL, got {endpoint[:80]!r}")
    graphs: dict[str, tuple[str, ...]] = {}
    for key in ("default_graph", "named_graph"):
        v = t.get(key, list, [])
        if not all(isinstance(g, str) and g for g in v):
            raise t.err(f"data.{key}", "must be a list of graph IRIs (strings)")
        graphs[key] = tuple(v)
    page = t.get("page_size", int, None)
    if page is not None and page < 1:
        raise t.err("data.page_size", f"must be >= 1, got {page}")
    cert, key_ = t.path("tls_cert", default=None), t.path("tls_key", default=None)
    if (cert is None) != (key_ is None):
        raise t.err(
            "data.tls_cert", "give both data.tls_cert and data.tls_key (the client certificate's key)"
        )
    if cert is not None and not endpoint.lower().startswith("https:"):
        raise t.err("data.tls_cert", "a TLS client certificate needs an https:// endpoint")
    username = t.get("username", str, None)
    host = (urlsplit(endpoint).hostname or "").lower()
    if username is not None and endpoint.lower().startswith("http:") and host not in LOOPBACK:
        raise t.err(
            "data.username",
            "basic authentication over plain http would send the password in clear; use https",
        )
    pw_file, pw_env = read_password_keys(t)
    if username is None and (pw_file or pw_env):
        raise t.err("data.password_file" if pw_file else "data.password_env", "given without data.username")
    return SparqlSource(
        endpoint=endpoint,
        query=query,
        query_key=query_key,
        page_size=page,
        default_graphs=graphs["default_graph"],
        named_graphs=graphs["named_graph"],
        timeout_s=read_timeout(t, 60.0),
        tls_cert=cert,
        tls_key=key_,
        tls_ca=t.path("tls_ca", default=None),
        username=username,
        password_file=pw_file,
        password_env=pw_env,
    )


def read_query(t: Table) -> tuple[str, str]:
    """``query`` (inline) or ``query_file`` (a file next to the config), exactly one."""
    if ("query" in t.tbl) == ("query_file" in t.tbl):
        raise t.err("data.query", "give exactly one of data.query and data.query_file")
    if "query" in t.tbl:
        q, key = t.get("query", str), "data.query"
    else:
        path = t.path("query_file")
        assert path is not None
        try:
            q = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise t.err("data.query_file", f"cannot read {path}: {exc}") from exc
        key = "data.query_file"
    if not q.strip():
        raise t.err(key, "the query is empty")
    return q, key


def read_password_keys(t: Table) -> tuple[Path | None, str | None]:
    """``password_file`` or ``password_env`` (at most one): where the secret is, never the secret."""
    if "password_file" in t.tbl and "password_env" in t.tbl:
        raise t.err("data.password_file", "give at most one of data.password_file and data.password_env")
    pw_file = t.path("password_file", default=None)
    pw_env = t.get("password_env", str, None)
    if pw_env is not None and not pw_env.replace("_", "").isalnum():
        raise t.err("data.password_env", f"{pw_env!r} is not an environment variable name")
    return pw_file, pw_env


def read_timeout(t: Table, default: float = 30.0) -> float:
    v = float(t.get("timeout_s", (int, float), default))
    if not 0 < v <= 3600:
        raise t.err("data.timeout_s", f"must be in (0, 3600] seconds, got {v:g}")
    return v


def _no_password_in_url(url: str, err: Err, key: str = "data.url") -> None:
    """A URL with a password is refused (the password would then live in the config file)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise err(key, f"not a URL: {exc}") from exc
    if not parts.scheme:
        raise err(key, "not a URL (expected e.g. postgresql+psycopg://reader@host:5432/registry)")
    if parts.password is not None:
        raise err(
            key,
            "must not contain a password: name a file (data.password_file) or an environment variable "
            "(data.password_env) that holds it",
        )


def snapshot(cfg: DataConfig) -> Snapshot:
    """Read and check the configured records once (the daemon's snapshot); SourceError on any problem."""
    schema = None
    if cfg.model is not None:
        from mechanisms.models.base import load_model

        try:
            schema = load_model(cfg.model, cfg.model_args).schema
        except ValueError as exc:
            raise SourceError("data.model", str(exc)) from exc
    return take_snapshot(cfg.source, cfg.max_records, schema, cfg.model)
