"""Synthetic registries in the shapes real ones keep their data in (a NaN in the given columns is written
as a missing value: NULL, a Parquet null, no triple): a PostgreSQL table, an SQLite file, a
Parquet file, or RDF in a FAIRVASC-like shape served by a SPARQL endpoint; and the ``[data]`` table with
the query that reads each one back. Used by ``confar run --simulate`` (``[simulate] sources``) and the tests.

The RDF shape (one named graph per registry, ``urn:confar:registry:party-<id>``): a ``fv:Patient`` with a
``fv:recordNumber`` (the record's position, for ORDER BY), a birth year (``xsd:gYear``) and an
``fv:hasDiagnosis`` node (a diagnosis code IRI, an ``xsd:date``, and the model's covariates as
``xsd:double``), and an ``fv:hasOutcome`` node holding the outcome (``xsd:boolean`` when it is 0/1,
``xsd:double`` otherwise). The query reads every value in an OPTIONAL, so a patient with a missing value is
reported by the schema check instead of dropped.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Column

FV = "https://example.org/fairvasc-like#"
XSD = "http://www.w3.org/2001/XMLSchema#"
GPA = "http://www.orpha.net/ORDO/Orphanet_900"  # granulomatosis with polyangiitis
SOURCE_KINDS = ("csv", "parquet", "sqlite", "postgresql", "sparql")
TABLE = "cohort"
ID_COLUMN = "record_id"


def with_labels(
    schema: Sequence[Column], columns: Mapping[str, npt.ArrayLike]
) -> dict[str, npt.NDArray[Any]]:
    """The records as a registry would store them: a column the schema declares with text labels
    (``Column.labels``) back from its codes to the labels (an array of str), the others as they are."""
    labels = {c.name: c.labels for c in schema if c.labels is not None}
    out: dict[str, npt.NDArray[Any]] = {}
    for k, v in columns.items():
        arr = np.asarray(v)
        if k in labels and arr.dtype.kind in "fiu":
            out[k] = np.array([labels[k][int(c)] for c in arr.tolist()], dtype=object)
        else:
            out[k] = arr
    return out


def _is_text(values: npt.ArrayLike) -> bool:
    return np.asarray(values).dtype.kind in "USO"


def registry_graph(pid: int) -> str:
    return f"urn:confar:registry:party-{pid}"


def _double(v: float) -> str:
    return f'"{float(v)!r}"^^<{XSD}double>'


def _literal(v: Any) -> str:
    """A value as a Turtle literal: text (a label, no quotes or backslashes in it) as ``xsd:string``."""
    if isinstance(v, str):
        return f'"{v}"^^<{XSD}string>'
    return _double(v)


def write_trig(
    path: Path, pid: int, columns: Mapping[str, npt.ArrayLike], outcome: str | None, seed: int = 0
) -> None:
    """The registry's records as TriG in the FAIRVASC-like shape (module docstring); exact float64 values,
    text columns (labels) as ``xsd:string`` literals."""
    cols = {k: np.asarray(v, dtype=object if _is_text(v) else np.float64) for k, v in columns.items()}
    num = {k for k, v in cols.items() if v.dtype != object}
    n = len(next(iter(cols.values())))
    rng = np.random.default_rng(seed)
    g = registry_graph(pid)
    base = f"urn:confar:registry:party-{pid}/"
    lines = [f"@prefix fv: <{FV}> .", f"@prefix xsd: <{XSD}> .", "", f"<{g}> {{"]
    binary = {k for k in num if np.isin(cols[k][~np.isnan(cols[k])], (0.0, 1.0)).all()}

    def absent(k: str, i: int) -> bool:
        return cols[k][i] is None if k not in num else bool(np.isnan(cols[k][i]))

    for i in range(n):
        p, d, o = f"<{base}patient/{i + 1}>", f"<{base}diagnosis/{i + 1}>", f"<{base}outcome/{i + 1}>"
        year = int(rng.integers(1930, 2000))
        day = dt.date(2010, 1, 1) + dt.timedelta(days=int(rng.integers(0, 4000)))
        lines.append(
            f'  {p} a fv:Patient ; fv:recordNumber {i + 1} ; fv:birthYear "{year}"^^xsd:gYear ; '
            f"fv:hasDiagnosis {d} ; fv:hasOutcome {o} ."
        )
        cov = " ; ".join(  # a NaN is no triple: the variable stays unbound
            f"fv:{k} {_literal(v[i])}" for k, v in cols.items() if k != outcome and not absent(k, i)
        )
        lines.append(
            f'  {d} a fv:Diagnosis ; fv:code <{GPA}> ; fv:diagnosisDate "{day.isoformat()}"^^xsd:date'
            + (f" ; {cov}" if cov else "")
            + " ."
        )
        if outcome is not None and not absent(outcome, i):
            v = cols[outcome][i]
            lit = ("true" if v == 1.0 else "false") if outcome in binary else _literal(v)
            lines.append(f"  {o} a fv:Outcome ; fv:{outcome} {lit} .")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def sparql_query(names: Sequence[str], outcome: str | None) -> str:
    """SELECT the registry's columns (in ``names`` order) from the FAIRVASC-like shape, ordered by record."""
    opts = []
    for k in names:
        if k == outcome:
            opts.append(f"  OPTIONAL {{ ?patient fv:hasOutcome ?out . ?out fv:{k} ?{k} }}")
        else:
            opts.append(f"  OPTIONAL {{ ?patient fv:hasDiagnosis ?dx . ?dx fv:{k} ?{k} }}")
    return "\n".join(
        [
            f"PREFIX fv: <{FV}>",
            f"SELECT {' '.join('?' + k for k in names)}",
            "WHERE {",
            "  ?patient a fv:Patient ; fv:recordNumber ?record .",
            *opts,
            "}",
            "ORDER BY ?record",
        ]
    )


def sql_query(names: Sequence[str]) -> str:
    cols = ", ".join(f'"{k}"' for k in names)
    return f"SELECT {cols} FROM {TABLE} ORDER BY {ID_COLUMN}"


def write_sqlite(path: Path, columns: Mapping[str, npt.ArrayLike]) -> None:
    import sqlite3

    names = list(columns)
    data = [np.asarray(columns[k], dtype=object if _is_text(columns[k]) else np.float64) for k in names]
    with sqlite3.connect(path) as db:
        types = ["TEXT" if a.dtype == object else "REAL" for a in data]
        cols = ", ".join(f'"{k}" {t}' for k, t in zip(names, types, strict=True))
        db.execute(f"CREATE TABLE {TABLE} ({ID_COLUMN} INTEGER PRIMARY KEY, {cols})")
        marks = ", ".join("?" * (len(names) + 1))
        records = zip(*(a.tolist() for a in data), strict=True)
        rows = [(i + 1, *(None if v != v else v for v in r)) for i, r in enumerate(records)]  # NaN: NULL
        db.executemany(f"INSERT INTO {TABLE} VALUES ({marks})", rows)
    db.close()


def write_parquet(path: Path, columns: Mapping[str, npt.ArrayLike]) -> None:
    import pyarrow as pa  # type: ignore[import-not-found]
    import pyarrow.parquet as pq  # type: ignore[import-not-found]

    arrays = {}
    for k, v in columns.items():
        if _is_text(v):  # labels: a string column (None: null)
            arrays[k] = pa.array(list(np.asarray(v, dtype=object)), type=pa.string())
        else:
            x = np.asarray(v, dtype=np.float64)
            arrays[k] = pa.array(x, mask=np.isnan(x))  # NaN: null
    pq.write_table(pa.table(arrays), path)


def new_password() -> str:
    return secrets.token_urlsafe(18)


def data_table(kind: str, **kw: Any) -> dict[str, Any]:
    """The ``[data]`` entries (without model) for one registry kind; see ``simulations.run_local``. A query
    is written next to the config (``query_dir``: ``cohort.sql`` / ``cohort.rq``) and named by ``query_file``,
    as a registry would keep it."""
    if kind in ("csv", "parquet"):
        return {"source": kind, "path": str(kw["path"])}

    def query_file(name: str, text: str) -> str:
        path = Path(kw["query_dir"]) / name
        path.write_text(text + "\n", encoding="utf-8")
        return str(path)

    if kind == "sqlite":
        q = query_file("cohort.sql", sql_query(kw["names"]))
        return {"source": "sql", "url": f"sqlite:///{kw['path']}", "query_file": q}
    if kind == "postgresql":
        return {
            "source": "sql",
            "url": kw["url"],
            "password_file": str(kw["password_file"]),
            "query_file": query_file("cohort.sql", sql_query(kw["names"])),
        }
    if kind == "sparql":
        return {
            "source": "sparql",
            "endpoint": kw["endpoint"],
            "default_graph": [registry_graph(kw["pid"])],
            "page_size": int(kw.get("page_size", 1000)),
            "query_file": query_file("cohort.rq", sparql_query(kw["names"], kw.get("outcome"))),
        }
    raise ValueError(f"unknown registry kind {kind!r}; known: {list(SOURCE_KINDS)}")
