"""The ``sql`` source against a real PostgreSQL server (a throwaway cluster started by this module, stopped
by PID), and SQLite and DuckDB files through the same code: the snapshot equals the CSV one, the
connection is read-only, and every bad input is refused with its key and a clear message, nothing loaded,
no secret in any message."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from parties.config import ConfigError, load_config
from parties.sources import DataConfig, DataProblems, SourceError, content_hash, snapshot
from parties.sources.sql import SqlSource, check_select
from simulations.launcher import PartyOptions, party_config_text
from simulations.registries import write_sqlite
from simulations.servers import PostgresServer, free_port, postgres_bindir

pytestmark = pytest.mark.skipif(
    postgres_bindir() is None, reason="PostgreSQL server binaries (initdb, postgres) not installed"
)
ARGS = {"p": 2}
PASSWORD = "s3cret-%-pw"  # a '%' and a '-' on purpose
QUERY = "SELECT x1, x2, y FROM cohort ORDER BY record_id"


def records(n: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(8)
    return {
        "x1": np.clip(rng.normal(0, 1, n), -3, 3),
        "x2": np.clip(rng.normal(0, 1, n), -3, 3),
        "y": (rng.random(n) < 0.4).astype(np.float64),
    }


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    with PostgresServer.running() as srv:
        srv.add_registry("registry", "cohort", records(), "reader", PASSWORD)
        with srv.connect("registry") as db:
            db.execute("CREATE TABLE typed (id integer, x1 text, x2 double precision, y boolean, d date)")
            db.execute(
                "INSERT INTO typed VALUES (1, '0.5', 0.25, true, '2020-01-02'), "
                "(2, '0.1', NULL, false, NULL), (3, 'abc', 0.5, NULL, '1970-01-01')"
            )
            db.execute("GRANT SELECT ON typed TO reader")
            db.execute(
                "CREATE FUNCTION purge() RETURNS integer LANGUAGE sql AS 'DELETE FROM cohort; SELECT 1'"
            )
        yield srv


@pytest.fixture
def pwfile(tmp_path: Path) -> Path:
    p = tmp_path / "pw"
    p.write_text(PASSWORD + "\n")
    return p


def source(pg: PostgresServer, pwfile: Path, query: str = QUERY, **kw: object) -> SqlSource:
    return SqlSource(pg.url("registry", "reader"), query, password_file=pwfile, **kw)  # type: ignore[arg-type]


def snap(src: SqlSource, max_records: int = 1000, model: str | None = "bayes-logistic") -> object:
    return snapshot(DataConfig(src, model, ARGS if model else {}, max_records))


def test_postgresql_snapshot_equals_the_records(pg: PostgresServer, pwfile: Path) -> None:
    s = snap(source(pg, pwfile))
    assert s.records == 40 and s.columns == ("x1", "x2", "y")  # type: ignore[attr-defined]
    assert s.sha256 == content_hash(records())  # type: ignore[attr-defined]
    assert s.source == f"sql postgresql+psycopg://reader@127.0.0.1:{pg.port}/registry"  # type: ignore[attr-defined]


def test_password_from_the_environment(pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REG_DB_PW", PASSWORD)
    src = SqlSource(pg.url("registry", "reader"), QUERY, password_env="REG_DB_PW")
    assert snap(src).records == 40  # type: ignore[attr-defined]
    monkeypatch.delenv("REG_DB_PW")
    with pytest.raises(
        SourceError, match=r"^data\.password_env: the environment variable REG_DB_PW is not set"
    ):
        snap(src)


def refused(src: SqlSource, key: str, match: str, **kw: object) -> SourceError:
    with pytest.raises(SourceError) as ei:
        snap(src, **kw)  # type: ignore[arg-type]
    assert ei.value.key == key, str(ei.value)
    assert match in str(ei.value), str(ei.value)
    assert PASSWORD not in str(ei.value)
    return ei.value


def test_connection_errors(pg: PostgresServer, pwfile: Path, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    down = SqlSource(f"postgresql+psycopg://reader@127.0.0.1:{port}/registry", QUERY, password_file=pwfile)
    refused(down, "data.url", f"cannot connect to sql postgresql+psycopg://reader@127.0.0.1:{port}/registry")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    e = refused(source(pg, wrong), "data.password_file", 'password authentication failed for user "reader"')
    assert "not-the-password" not in str(e)
    refused(
        SqlSource(pg.url("nodb", "reader"), QUERY, password_file=pwfile),
        "data.url",
        'database "nodb" does not exist',
    )
    refused(SqlSource("nosuchdb+driver://h/db", QUERY), "data.url", "no driver for 'nosuchdb+driver'")


def test_only_a_read_only_select(pg: PostgresServer, pwfile: Path) -> None:
    for query, match in (
        ("DELETE FROM cohort", "must be a read-only SELECT (or WITH ... SELECT), not DELETE"),
        ("SELECT 1 AS x; DROP TABLE cohort", "must be a single SELECT statement"),
        ("WITH d AS (DELETE FROM cohort RETURNING *) SELECT * FROM d", "a WITH clause here modifies data"),
        ("SELECT * INTO copy FROM cohort", "SELECT ... INTO writes a table"),
        ("  -- comment\n", "must be a read-only SELECT (or WITH ... SELECT), not empty"),
    ):
        refused(source(pg, pwfile, query), "data.query", match)
    # a SELECT that writes through a function: the server refuses it (read-only transaction), even for the
    # table's owner, and nothing is lost
    owner = SqlSource(pg.url("registry", pg.admin), "SELECT purge() AS x1", password_env="PG_ADMIN_PW")
    os.environ["PG_ADMIN_PW"] = pg.admin_password
    try:
        refused(owner, "data.query", "cannot execute DELETE in a read-only transaction", model=None)
    finally:
        del os.environ["PG_ADMIN_PW"]
    assert snap(source(pg, pwfile)).records == 40  # type: ignore[attr-defined]
    # ';' and '--' inside strings and quoted names are not statements or comments
    assert check_select("SELECT 'a;b' AS \"x;--\" -- c\n;", "data.query").startswith("SELECT")
    # a '%' and ':name' reach the database as written (no parameter parsing)
    q = "SELECT x1, x2, y, '%' AS pct, ':name' AS tag FROM cohort ORDER BY record_id"
    assert snap(source(pg, pwfile, q)).ignored == ("pct", "tag")  # type: ignore[attr-defined]
    refused(source(pg, pwfile, "SELECT nope FROM cohort"), "data.query", 'column "nope" does not exist')
    refused(source(pg, pwfile, "SELECT * FROM pg_authid"), "data.query", "permission denied")


def test_records_refused_with_rows_and_no_values(pg: PostgresServer, pwfile: Path) -> None:
    q = "SELECT x1, x2, y, d FROM typed ORDER BY id"
    with pytest.raises(DataProblems) as ei:
        snap(source(pg, pwfile, q))
    msg = str(ei.value)
    assert ei.value.key == "data.query" and ei.value.records == 3
    assert (
        "column 'x1': text values where a number, boolean or date is expected (convert it in the query) "
        "in rows 1, 2, 3" in msg
    )
    assert "column 'x2': missing values (empty, NULL or unbound) in row 2" in msg
    assert "column 'y': missing values (empty, NULL or unbound) in row 3" in msg
    assert "abc" not in msg and "0.25" not in msg
    assert [r for r, _ in ei.value.rows] == [1, 2, 3]
    # cast in the query: numbers; booleans 1/0; dates as days since 1970-01-01 (no model: all columns)
    q = "SELECT x1::double precision AS x1, y, d FROM typed WHERE id = 1"
    s = snap(source(pg, pwfile, q), model=None)
    cols = s.dataset.columns  # type: ignore[attr-defined]
    assert (cols["x1"][0], cols["y"][0], cols["d"][0]) == (0.5, 1.0, 18263.0)
    # wrong column names
    with pytest.raises(DataProblems, match=r"missing columns \['x1', 'x2'\] .*found \['a', 'b', 'y'\]"):
        snap(source(pg, pwfile, "SELECT x1 AS a, x2 AS b, y FROM cohort"))
    with pytest.raises(DataProblems, match="no records"):
        snap(source(pg, pwfile, "SELECT x1, x2, y FROM cohort WHERE false"))


def test_max_records(pg: PostgresServer, pwfile: Path) -> None:
    assert snap(source(pg, pwfile), max_records=40).records == 40  # type: ignore[attr-defined]
    refused(source(pg, pwfile), "data.max_records", "more than 39 records", max_records=39)


def test_config_keeps_secrets_out(pg: PostgresServer, tmp_path: Path, pwfile: Path) -> None:
    def cfg(*lines: str) -> Path:
        p = tmp_path / "party.toml"
        text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(models=("bayes-logistic",)))
        p.write_text(text + '\n[data]\nsource = "sql"\n' + "\n".join(lines) + "\n")
        return p

    url = pg.url("registry", "reader")
    ok = load_config(
        cfg(f'url = "{url}"', f'query = "{QUERY}"', f'password_file = "{pwfile}"'), insecure=True
    )
    assert ok.data is not None and ok.data.kind == "sql"
    bad_url = url.replace("reader@", f"reader:{PASSWORD}@")
    for lines, match in (
        ([f'url = "{bad_url}"', f'query = "{QUERY}"'], "data.url: must not contain a password"),
        ([f'url = "{url}"'], "data.query: give exactly one of data.query and data.query_file"),
        ([f'url = "{url}"', 'query = "  "'], "data.query: the query is empty"),
        (
            [f'url = "{url}"', f'query = "{QUERY}"', 'password_env = "A"', f'password_file = "{pwfile}"'],
            "data.password_file: give at most one",
        ),
        ([f'url = "{url}"', f'query = "{QUERY}"', 'password_env = "A B"'], "data.password_env: 'A B' is not"),
        ([f'url = "{url}"', f'query = "{QUERY}"', "timeout_s = 0"], "data.timeout_s: must be in (0, 3600]"),
        ([f'url = "{url}"', 'query_file = "nope.sql"'], "data.query_file: file"),
    ):
        with pytest.raises(ConfigError) as ei:
            load_config(cfg(*lines), insecure=True)
        assert match in str(ei.value), str(ei.value)
        assert PASSWORD not in str(ei.value)


def test_sqlite_and_duckdb_through_the_same_code(tmp_path: Path) -> None:
    db = tmp_path / "registry.db"
    write_sqlite(db, records())
    s = snap(SqlSource(f"sqlite:///{db}", QUERY))
    assert s.sha256 == content_hash(records())  # type: ignore[attr-defined]
    # opened read-only (mode=ro, PRAGMA query_only): a missing file is refused, not created
    refused(SqlSource(f"sqlite:///{tmp_path / 'none.db'}", QUERY), "data.url", "does not exist")
    assert not (tmp_path / "none.db").exists()
    refused(
        SqlSource(f"sqlite:///{db}", "SELECT x1 FROM cohort", timeout_s=1.0),
        "data.max_records",
        "more than 3",
        max_records=3,
    )
    duckdb = pytest.importorskip("duckdb")
    pytest.importorskip("duckdb_engine")
    ddb = tmp_path / "registry.duckdb"
    con = duckdb.connect(str(ddb))
    cols = records()
    con.execute("CREATE TABLE cohort (record_id INTEGER, x1 DOUBLE, x2 DOUBLE, y BOOLEAN)")
    con.executemany(
        "INSERT INTO cohort VALUES (?, ?, ?, ?)",
        [(i + 1, cols["x1"][i], cols["x2"][i], bool(cols["y"][i])) for i in range(40)],
    )
    con.close()
    s = snap(SqlSource(f"duckdb:///{ddb}", QUERY))
    assert s.sha256 == content_hash(records())  # type: ignore[attr-defined]  # booleans became 1.0 / 0.0


def test_check_config_against_postgresql(
    pg: PostgresServer, pwfile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from parties.cli import main

    p = tmp_path / "party.toml"
    text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(models=("bayes-logistic",)))
    data = f'[data]\nsource = "sql"\nurl = "{pg.url("registry", "reader")}"\nquery = "{QUERY}"\n'
    data += 'model = "bayes-logistic"\nmodel_args = { p = 2 }\n'
    p.write_text(f'{text}\n{data}password_file = "{pwfile}"\n')
    assert main(["check-config", "--config", str(p), "--insecure"]) == 0
    out = capsys.readouterr().out
    assert f"data: sql postgresql+psycopg://reader@127.0.0.1:{pg.port}/registry (model bayes-logistic)" in out
    assert "data: 40 records, columns x1, x2, y" in out and content_hash(records()) in out
    wrong = tmp_path / "wrong"
    wrong.write_text("nope\n")
    p.write_text(f'{text}\n{data}password_file = "{wrong}"\n')
    assert main(["check-config", "--config", str(p), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "data.password_file: cannot connect to sql postgresql+psycopg://reader@" in err
    assert "password authentication failed" in err and "nope" not in err
