"""One contract, every source: the same records give the same snapshot (records, SHA-256) whether they sit
in a CSV or Parquet file, an SQLite or DuckDB file, a PostgreSQL database or a SPARQL endpoint (real servers,
started here and stopped by PID); a missing value is refused naming its column and row; a result past
``max_records`` is refused with that key; a categorical column stored as text labels (issue 40) becomes the
same codes from every source, and an undeclared label is refused naming its row, never its value. The
registries are written by ``simulations.registries`` (NaN in the columns = a missing value: an empty cell,
NULL, a Parquet null, no triple; a text column: CSV text, SQL text, a Parquet string, an ``xsd:string``)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parties.sources import DataConfig, DataProblems, DataSource, SourceError, content_hash, snapshot
from parties.sources.files import CsvSource, ParquetSource
from parties.sources.sparql import SparqlSource
from parties.sources.sql import SqlSource
from simulations.registries import (
    registry_graph,
    sparql_query,
    sql_query,
    write_parquet,
    write_sqlite,
    write_trig,
)
from simulations.servers import PostgresServer, SparqlServer, oxigraph_binary, postgres_bindir

KINDS = ["csv", "parquet", "sqlite", "duckdb", "postgresql", "sparql"]
_ids = itertools.count(1)


LABELS = ["a", "b-1", "c.2"]
LABELLED = {  # a formula whose schema declares grp's text labels (codes 0, 1, 2)
    "formula": "y ~ x1 + C(grp)",
    "family": "bernoulli",
    "columns": {"x1": [-3, 3], "grp": {"values": LABELS}, "y": {"values": [0, 1]}},
}


def labelled(bad_row: int | None = None) -> dict[str, np.ndarray]:
    """x1, grp (text labels), y; with ``bad_row``, that record's label is one the schema does not declare."""
    cols = records()
    grp = np.array([LABELS[i % 3] for i in range(30)], dtype=object)
    if bad_row is not None:
        grp[bad_row - 1] = "zz-secret"
    return {"x1": cols["x1"], "grp": grp, "y": cols["y"]}


def codes() -> dict[str, np.ndarray]:
    """What a snapshot of labelled() holds, in the schema's (sorted) order."""
    cols = records()
    return {"grp": np.arange(30) % 3.0, "x1": cols["x1"], "y": cols["y"]}


def data(which: str) -> dict[str, np.ndarray]:
    return {
        "clean": records,
        "missing": lambda: records(7),
        "labels": labelled,
        "badlabel": lambda: labelled(9),
    }[which]()


def records(missing_row: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(12)
    cols = {
        "x1": np.clip(rng.normal(0, 1, 30), -3, 3),
        "x2": np.clip(rng.normal(0, 1, 30), -3, 3),
        "y": (rng.random(30) < 0.4).astype(np.float64),
    }
    if missing_row is not None:
        cols["x2"][missing_row - 1] = np.nan
    return cols


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """One PostgreSQL cluster and one SPARQL server holding the registries every test here asks for."""
    if postgres_bindir() is None or oxigraph_binary() is None:
        pytest.skip("PostgreSQL server binaries or oxigraph not installed")
    d = tmp_path_factory.mktemp("rdf")
    graphs = {"clean": 1, "missing": 2, "labels": 3, "badlabel": 4}
    files = []
    for name, pid in graphs.items():
        write_trig(d / f"{name}.trig", pid, data(name), "y")
        files.append(d / f"{name}.trig")
    with PostgresServer.running() as pg, SparqlServer.running(files) as sp:
        for name in graphs:
            pg.add_registry(name, "cohort", data(name), f"reader_{name}", f"pw-{name}")
        yield {"pg": pg, "sparql": sp, "graphs": graphs}


def _value(v: object) -> str | float | None:
    """A record's value as a database row holds it: text as it is, NaN as NULL."""
    if isinstance(v, str):
        return v
    x = float(v)  # type: ignore[arg-type]
    return None if np.isnan(x) else x


def _cell(v: object) -> str:
    x = _value(v)
    return "" if x is None else x if isinstance(x, str) else repr(x)


def make_source(servers: dict[str, object], kind: str, which: str, d: Path) -> DataSource:
    cols = data(which)
    names = list(cols)
    if kind == "csv":
        lines = [",".join(names)]
        lines += [",".join(_cell(cols[k][i]) for k in names) for i in range(30)]
        (d / "r.csv").write_text("\n".join(lines) + "\n")
        return CsvSource(d / "r.csv")
    if kind == "parquet":
        write_parquet(d / "r.parquet", cols)
        return ParquetSource(d / "r.parquet")
    if kind == "sqlite":
        write_sqlite(d / "r.db", cols)
        return SqlSource(f"sqlite:///{d / 'r.db'}", sql_query(names))
    if kind == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        pytest.importorskip("duckdb_engine")
        con = duckdb.connect(str(d / "r.duckdb"))
        types = ", ".join(f"{k} {'VARCHAR' if cols[k].dtype == object else 'DOUBLE'}" for k in names)
        con.execute(f"CREATE TABLE cohort (record_id INTEGER, {types})")
        rows = [(i + 1, *(_value(cols[k][i]) for k in names)) for i in range(30)]
        con.executemany("INSERT INTO cohort VALUES (?, ?, ?, ?)", rows)
        con.close()
        return SqlSource(f"duckdb:///{d / 'r.duckdb'}", sql_query(names))
    if kind == "postgresql":
        pg = servers["pg"]
        assert isinstance(pg, PostgresServer)
        env = f"CONTRACT_PW_{next(_ids)}"
        os.environ[env] = f"pw-{which}"
        return SqlSource(pg.url(which, f"reader_{which}"), sql_query(names), password_env=env)
    sp = servers["sparql"]
    assert isinstance(sp, SparqlServer)
    pid = servers["graphs"][which]  # type: ignore[index]
    return SparqlSource(
        sp.endpoint, sparql_query(names, "y"), page_size=8, default_graphs=(registry_graph(pid),)
    )


def snap(src: DataSource, max_records: int = 100) -> object:
    return snapshot(DataConfig(src, "bayes-logistic", {"p": 2}, max_records))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_same_records_same_snapshot(servers: dict[str, object], kind: str, tmp_path: Path) -> None:
    s = snap(make_source(servers, kind, "clean", tmp_path))
    assert s.records == 30 and s.columns == ("x1", "x2", "y")  # type: ignore[attr-defined]
    assert s.sha256 == content_hash(records())  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
def test_missing_value_refused_with_its_row(servers: dict[str, object], kind: str, tmp_path: Path) -> None:
    with pytest.raises(DataProblems) as ei:
        snap(make_source(servers, kind, "missing", tmp_path))
    assert "column 'x2': missing values (empty, NULL or unbound) in row 7" in str(ei.value)
    assert ei.value.rows == [(7, ["column 'x2': missing values (empty, NULL or unbound)"])]


@pytest.mark.parametrize("kind", KINDS)
def test_max_records(servers: dict[str, object], kind: str, tmp_path: Path) -> None:
    src = make_source(servers, kind, "clean", tmp_path)
    assert snap(src, max_records=30).records == 30  # type: ignore[attr-defined]
    with pytest.raises(SourceError) as ei:
        snap(src, max_records=29)
    assert ei.value.key == "data.max_records" and "more than 29 records" in str(ei.value)


@pytest.mark.parametrize("kind", KINDS)
def test_text_labels_same_codes(servers: dict[str, object], kind: str, tmp_path: Path) -> None:
    s = snapshot(DataConfig(make_source(servers, kind, "labels", tmp_path), "formula", LABELLED, 100))
    assert s.records == 30 and s.columns == ("grp", "x1", "y")
    assert s.sha256 == content_hash(codes())


@pytest.mark.parametrize("kind", KINDS)
def test_undeclared_label_refused_with_its_row(servers: dict[str, object], kind: str, tmp_path: Path) -> None:
    with pytest.raises(DataProblems) as ei:
        snapshot(DataConfig(make_source(servers, kind, "badlabel", tmp_path), "formula", LABELLED, 100))
    what = "column 'grp': labels outside the declared labels ['a', 'b-1', 'c.2']"
    assert f"{what} in row 9" in str(ei.value)
    assert ei.value.rows == [(9, [what])]
    assert "zz-secret" not in str(ei.value) and "zz-secret" not in repr(ei.value.rows)


def test_an_integer_too_large_for_a_float_is_a_problem_of_its_rows() -> None:
    """A source's integer of 400 digits (an SQL NUMERIC, a SPARQL xsd:integer) is refused as a problem of its
    column and row, like any other value that is not a number, not an OverflowError out of the daemon."""
    from parties.sources.base import RawTable, check_records

    raw = RawTable(("x",), {"x": [1, 10**400, 3]}, 3)
    with pytest.raises(DataProblems) as info:
        check_records(raw, None, "data.query", "party-1")
    assert "column 'x': numbers too large for a float64 (beyond 1.8e308) in row 2" in str(info.value)
