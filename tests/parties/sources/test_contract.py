"""One contract, every source: the same records give the same snapshot (records, SHA-256) whether they sit
in a CSV or Parquet file, an SQLite or DuckDB file, a PostgreSQL database or a SPARQL endpoint (real servers,
started here and stopped by PID); a missing value is refused naming its column and row; a result past
``max_records`` is refused with that key. The registries are written by ``simulations.registries`` (NaN in
the columns = a missing value: an empty cell, NULL, a Parquet null, no triple)."""

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

NAMES = ["x1", "x2", "y"]
KINDS = ["csv", "parquet", "sqlite", "duckdb", "postgresql", "sparql"]
_ids = itertools.count(1)


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
    graphs = {"clean": 1, "missing": 2}
    files = []
    for name, pid in graphs.items():
        write_trig(d / f"{name}.trig", pid, records(7 if name == "missing" else None), "y")
        files.append(d / f"{name}.trig")
    with PostgresServer.running() as pg, SparqlServer.running(files) as sp:
        pg.add_registry("clean", "cohort", records(), "reader_clean", "pw-clean")
        pg.add_registry("missing", "cohort", records(7), "reader_missing", "pw-missing")
        yield {"pg": pg, "sparql": sp, "graphs": graphs}


def make_source(servers: dict[str, object], kind: str, which: str, d: Path) -> DataSource:
    cols = records(7 if which == "missing" else None)
    if kind == "csv":
        lines = [",".join(NAMES)]
        lines += [
            ",".join("" if np.isnan(cols[k][i]) else repr(float(cols[k][i])) for k in NAMES)
            for i in range(30)
        ]
        (d / "r.csv").write_text("\n".join(lines) + "\n")
        return CsvSource(d / "r.csv")
    if kind == "parquet":
        write_parquet(d / "r.parquet", cols)
        return ParquetSource(d / "r.parquet")
    if kind == "sqlite":
        write_sqlite(d / "r.db", cols)
        return SqlSource(f"sqlite:///{d / 'r.db'}", sql_query(NAMES))
    if kind == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        pytest.importorskip("duckdb_engine")
        con = duckdb.connect(str(d / "r.duckdb"))
        con.execute("CREATE TABLE cohort (record_id INTEGER, x1 DOUBLE, x2 DOUBLE, y DOUBLE)")
        rows = [
            (i + 1, *(None if np.isnan(cols[k][i]) else float(cols[k][i]) for k in NAMES)) for i in range(30)
        ]
        con.executemany("INSERT INTO cohort VALUES (?, ?, ?, ?)", rows)
        con.close()
        return SqlSource(f"duckdb:///{d / 'r.duckdb'}", sql_query(NAMES))
    if kind == "postgresql":
        pg = servers["pg"]
        assert isinstance(pg, PostgresServer)
        env = f"CONTRACT_PW_{next(_ids)}"
        os.environ[env] = f"pw-{which}"
        return SqlSource(pg.url(which, f"reader_{which}"), sql_query(NAMES), password_env=env)
    sp = servers["sparql"]
    assert isinstance(sp, SparqlServer)
    pid = servers["graphs"][which]  # type: ignore[index]
    return SparqlSource(
        sp.endpoint, sparql_query(NAMES, "y"), page_size=8, default_graphs=(registry_graph(pid),)
    )


def snap(src: DataSource, max_records: int = 100) -> object:
    return snapshot(DataConfig(src, "bayes-logistic", {"p": 2}, max_records))


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
