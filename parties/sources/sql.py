"""The ``sql`` source: a read-only SELECT on a database named by a SQLAlchemy URL (needs the optional extra:
``pip install 'confidential-ar[sql]'``: SQLAlchemy and psycopg for PostgreSQL; SQLite is built in; DuckDB
needs ``duckdb-engine``).

    [data]
    source = "sql"
    url = "postgresql+psycopg://registry_reader@db.registry.example:5432/registry"   # no password in it
    password_file = "/run/secrets/registry-db"   # or password_env = "REGISTRY_DB_PASSWORD" (or neither)
    query = "SELECT age_std AS x1, crea_std AS x2, died AS y FROM cohort ORDER BY patient_id"
    # query_file = "cohort.sql"                  # instead of query
    timeout_s = 30                               # connecting and running the query

The result's column names must be the model's schema columns (rename with ``AS``); other columns are
ignored. Values are converted by ``parties.sources.base`` (numbers, booleans, dates; NULL is refused). Order
the rows (``ORDER BY``) so that every snapshot of the same records is the same (same content hash, and the
same floating-point sums).

**Credentials** are never written in the config: a URL with a password is refused; the password comes from
the file or the environment variable the config names, and is scrubbed from every message.

**Read-only, where the database allows it**: the query must be one SELECT (or WITH ... SELECT) statement;
PostgreSQL runs it in a ``READ ONLY`` transaction at ``REPEATABLE READ`` (one consistent snapshot;
``default_transaction_read_only`` is set for the connection too, so a data-modifying CTE is refused by the
server); SQLite opens the file with ``mode=ro`` and ``PRAGMA query_only``; DuckDB opens it ``read_only``.
Other databases get the statement check and a transaction that is rolled back: give the daemon a database
role that can only SELECT (which is the right thing everywhere).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from parties.sources.base import RawTable, SourceError, too_many

FETCH_CHUNK = 10_000


def strip_sql(query: str) -> str:
    """The query without comments and without the text of its string literals and quoted names (so that
    what is left shows its statements and keywords); raises ValueError on an unterminated one."""
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if query.startswith("--", i):
            j = query.find("\n", i)
            i = n if j < 0 else j
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            if j < 0:
                raise ValueError("unterminated /* comment")
            i = j + 2
            out.append(" ")
        elif c in "'\"`":
            j = i + 1
            while True:
                j = query.find(c, j)
                if j < 0:
                    raise ValueError(f"unterminated {c} quote")
                if query.startswith(c * 2, j):  # doubled quote inside
                    j += 2
                    continue
                break
            out.append(f"{c}{c}")
            i = j + 1
        elif c == "$":  # PostgreSQL dollar quoting: $$ ... $$ or $tag$ ... $tag$
            m = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", query[i:])
            if m is None:
                out.append(c)
                i += 1
                continue
            tag = m.group(0)
            j = query.find(tag, i + len(tag))
            if j < 0:
                raise ValueError(f"unterminated {tag} quote")
            out.append("''")
            i = j + len(tag)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_select(query: str, key: str) -> str:
    """The query if it is one SELECT statement (``WITH ... SELECT`` allowed), else SourceError on ``key``."""
    try:
        bare = strip_sql(query).strip()
    except ValueError as exc:
        raise SourceError(key, f"cannot read the query: {exc}") from exc
    bare = bare.rstrip(";").strip()
    if ";" in bare:
        raise SourceError(key, "must be a single SELECT statement (found ';' between statements)")
    first = re.match(r"[A-Za-z]+", bare)
    word = first.group(0).upper() if first else ""
    if word not in ("SELECT", "WITH"):
        raise SourceError(key, f"must be a read-only SELECT (or WITH ... SELECT), not {word or 'empty'}")
    if word == "WITH" and re.search(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", bare, re.IGNORECASE):
        raise SourceError(key, "must be a read-only SELECT: a WITH clause here modifies data")
    if re.search(r"\bINTO\b", bare, re.IGNORECASE):
        raise SourceError(key, "must be a read-only SELECT: SELECT ... INTO writes a table")
    return query.strip().rstrip(";")


def read_password(password_file: Path | None, password_env: str | None) -> tuple[str | None, str]:
    """The password and the key it came from (``data.password_file`` / ``data.password_env``)."""
    if password_file is not None:
        try:
            text = password_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SourceError("data.password_file", f"cannot read {password_file}: {exc}") from exc
        pw = text.rstrip("\r\n")
        if not pw:
            raise SourceError("data.password_file", f"{password_file} is empty")
        return pw, "data.password_file"
    if password_env is not None:
        env = os.environ.get(password_env)
        if not env:
            raise SourceError(
                "data.password_env", f"the environment variable {password_env} is not set (or empty)"
            )
        return env, "data.password_env"
    return None, "data.url"


def _first_line(exc: BaseException, secret: str | None) -> str:
    """The driver's own message (not SQLAlchemy's SQL echo), without the password, on one line."""
    orig = getattr(exc, "orig", None) or exc
    text = " ".join(str(orig).split())
    text = re.sub(r"\(Background on this error at: [^)]*\)", "", text).strip()
    text = text.split("[SQL:")[0].strip()
    if secret:
        text = text.replace(secret, "***")
    return text[:400]


_AUTH = re.compile(
    r"password authentication failed|authentication failed|access denied|no password supplied", re.I
)


@dataclass(frozen=True)
class SqlSource:
    url: str  # a SQLAlchemy URL without a password
    query: str
    query_key: str = "data.query"  # or data.query_file
    password_file: Path | None = None
    password_env: str | None = None
    timeout_s: float = 30.0
    kind: str = "sql"

    @property
    def key(self) -> str:
        return self.query_key

    def describe(self) -> str:
        try:
            from sqlalchemy.engine import make_url

            return f"sql {make_url(self.url).render_as_string(hide_password=True)}"
        except Exception:
            return "sql (unparsable url)"

    def fetch(self, max_records: int) -> RawTable:
        try:
            import sqlalchemy as sa
        except ImportError as exc:
            raise SourceError(
                "data.source", "source 'sql' needs SQLAlchemy: pip install 'confidential-ar[sql]'"
            ) from exc
        query = check_select(self.query, self.query_key)
        password, pw_key = read_password(self.password_file, self.password_env)
        url = _database_url(self.url, password)
        backend = url.get_backend_name()
        kwargs = _engine_kwargs(url, backend, self.timeout_s)
        where = self.describe()
        try:
            engine = sa.create_engine(url, **kwargs)
        except (sa.exc.NoSuchModuleError, ImportError) as exc:
            raise SourceError(
                "data.url",
                f"no driver for {url.drivername!r} ({_first_line(exc, password)}): install it, e.g. "
                "pip install 'confidential-ar[sql]' for postgresql+psycopg",
            ) from exc
        dbapi_error: type[BaseException] = engine.dialect.loaded_dbapi.Error
        try:
            try:
                conn = engine.connect()
            except sa.exc.SQLAlchemyError as exc:
                msg = _first_line(exc, password)
                key = pw_key if _AUTH.search(msg) else "data.url"
                raise SourceError(key, f"cannot connect to {where}: {msg}") from exc
            with conn:
                try:
                    if backend == "postgresql":
                        conn = conn.execution_options(
                            isolation_level="REPEATABLE READ", postgresql_readonly=True
                        )
                    trans = conn.begin()
                except sa.exc.SQLAlchemyError as exc:
                    raise SourceError(
                        "data.url",
                        f"cannot start a read-only transaction ({where}): {_first_line(exc, password)}",
                    ) from exc
                try:
                    # the driver's own cursor: the query goes to the database as written (SQLAlchemy would
                    # read ':name' and '%' in it as parameters)
                    cur = conn.connection.cursor()
                    if backend == "sqlite":
                        cur.execute("PRAGMA query_only = ON")
                    names, rows = _select_rows(cur, query, self.query_key, max_records)
                except dbapi_error as exc:
                    raise SourceError(
                        self.query_key,
                        f"the database refused the query ({where}): {_first_line(exc, password)}",
                    ) from exc
                finally:
                    with contextlib.suppress(Exception):
                        trans.rollback()  # read-only: nothing to keep, whatever the database
        finally:
            engine.dispose()
        cols = {name: [r[k] for r in rows] for k, name in enumerate(names)}
        return RawTable(names, cols, len(rows))


def _database_url(raw: str, password: str | None) -> Any:
    """data.url parsed (a sqlalchemy URL), refused if it holds a password; the password read apart set."""
    import sqlalchemy as sa

    try:
        url = sa.engine.make_url(raw)
    except sa.exc.ArgumentError as exc:
        raise SourceError("data.url", f"not a SQLAlchemy database URL: {exc}") from exc
    if url.password is not None:
        raise SourceError(
            "data.url", "must not contain a password: use data.password_file or data.password_env"
        )
    if password is not None:
        url = url.set(password=password)
    return url


def _engine_kwargs(url: Any, backend: str, timeout_s: float) -> dict[str, Any]:
    """create_engine arguments that make each known backend read-only, with a timeout."""
    from sqlalchemy.pool import NullPool

    kwargs: dict[str, Any] = {"poolclass": NullPool}
    timeout = max(1, round(timeout_s))
    if backend == "postgresql":
        opts = f"-c default_transaction_read_only=on -c statement_timeout={timeout * 1000}"
        kwargs["connect_args"] = {"connect_timeout": timeout, "options": opts}
    elif backend == "sqlite":
        db = url.database
        if not db or db == ":memory:":
            raise SourceError(
                "data.url", "an SQLite source needs a database file (sqlite:////path/registry.db)"
            )
        if not Path(db).is_file():
            raise SourceError("data.url", f"the SQLite database file {db} does not exist")
        import sqlite3

        uri = f"file:{quote(str(Path(db).resolve()))}?mode=ro"
        kwargs["creator"] = lambda: sqlite3.connect(uri, uri=True, timeout=timeout_s)
    elif backend == "duckdb":
        kwargs["connect_args"] = {"read_only": True}
    return kwargs


def _select_rows(cur: Any, query: str, query_key: str, max_records: int) -> tuple[tuple[str, ...], list[Any]]:
    """Run the SELECT on a DB-API cursor: column names and rows, in chunks, refused past max_records."""
    cur.execute(query)
    if cur.description is None:
        raise SourceError(query_key, "the statement returned no rows (not a SELECT)")
    names = tuple(str(d[0]) for d in cur.description)
    rows: list[Any] = []
    while True:
        chunk = cur.fetchmany(FETCH_CHUNK)
        if not chunk:
            break
        rows.extend(chunk)
        if len(rows) > max_records:
            raise too_many(max_records)
    cur.close()
    return names, rows
