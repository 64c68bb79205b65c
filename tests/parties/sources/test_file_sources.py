"""The data-source seam with its file sources: CSV and Parquet give the same snapshot (records, content hash)
for the same records, every problem is refused with the key and the rows named and no value echoed, a
result past ``max_records`` is refused, and the daemon writes its snapshot to the audit log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from parties.config import ConfigError, load_config
from parties.daemon import PartyDaemon
from parties.sources import DataConfig, DataProblems, SourceError, content_hash, snapshot
from parties.sources.files import CsvSource, ParquetSource
from simulations.launcher import PartyOptions, party_config_text, write_csv

ARGS = {"p": 2}


def records(n: int = 50, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x1": np.clip(rng.normal(0, 1, n), -3, 3),
        "x2": np.clip(rng.normal(0, 1, n), -3, 3),
        "y": (rng.random(n) < 0.4).astype(np.float64),
    }


def csv_config(path: Path, **kw: object) -> DataConfig:
    return DataConfig(CsvSource(path), "bayes-logistic", ARGS, **kw)  # type: ignore[arg-type]


def test_csv_and_parquet_snapshots_are_equal(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    cols = records()
    write_csv(tmp_path / "r.csv", cols)
    # Parquet with native types: an integer outcome and a boolean column the schema does not use
    table = pa.table(
        {
            "x1": cols["x1"],
            "x2": cols["x2"],
            "y": cols["y"].astype(np.int64),
            "flag": cols["y"] > 0,
        }
    )
    pq.write_table(table, tmp_path / "r.parquet")
    a = snapshot(csv_config(tmp_path / "r.csv"))
    b = snapshot(DataConfig(ParquetSource(tmp_path / "r.parquet"), "bayes-logistic", ARGS))
    assert a.records == b.records == 50
    assert a.columns == b.columns == ("x1", "x2", "y")
    assert a.sha256 == b.sha256 == content_hash({k: cols[k] for k in ("x1", "x2", "y")})
    assert b.ignored == ("flag",)
    for k in a.columns:
        np.testing.assert_array_equal(a.dataset.columns[k], cols[k])
        assert not a.dataset.columns[k].flags.writeable  # the snapshot cannot change under a session
    assert a.audit()["bytes"] == 50 * 3 * 8
    # the hash depends on every value and on the order of the records
    moved = dict(cols, x1=cols["x1"][::-1].copy())
    assert content_hash(moved) != a.sha256


def test_parquet_without_pyarrow_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "r.parquet"
    p.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(SourceError, match=r"data\.path: .*needs pyarrow.*confidential-ar\[parquet\]"):
        snapshot(DataConfig(ParquetSource(p)))


def test_problems_name_rows_but_no_values(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_text("x1,x2,y\n0.1,0.2,1\n0.3,secret-text,0\n0.5,,1\n4.0,0,1\n0,0,2\n0.25,0.5,1\n")
    with pytest.raises(DataProblems) as ei:
        snapshot(csv_config(p))
    e = ei.value
    assert e.key == "data.path" and e.records == 6
    msg = str(e)
    assert "column 'x2': non-numeric values in row 2" in msg
    assert "column 'x2': missing values (empty, NULL or unbound) in row 3" in msg
    assert "column 'x1': values outside the declared public bounds [-3, 3] in row 4" in msg
    assert "column 'y': values outside the allowed set [0.0, 1.0] in row 5" in msg
    assert "secret-text" not in msg and "4.0" not in msg
    assert [r for r, _ in e.rows] == [2, 3, 4, 5]
    assert e.rows[0][1] == ["column 'x2': non-numeric values"]
    assert "secret-text" not in repr(e.rows)
    # wrong column names: what the schema needs and what was found
    p.write_text("age,x2,y\n0.1,0.2,1\n")
    with pytest.raises(
        DataProblems, match=r"missing column \['x1'\] \(the model's schema needs \['x1', 'x2', 'y'\]\)"
    ):
        snapshot(csv_config(p))
    p.write_text("x1,x2,y\n")
    with pytest.raises(DataProblems, match="no records"):
        snapshot(csv_config(p))
    p.write_text("x1,x2,y\n1,2\n")
    with pytest.raises(DataProblems, match=r"rows \[1\] do not have 3 values"):
        snapshot(csv_config(p))


def test_without_a_model_every_column_must_be_a_number(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_text("x,z\n1.5,2\n2.5,NaN\n")
    snap = snapshot(DataConfig(CsvSource(p)))
    assert snap.columns == ("x", "z") and snap.records == 2  # no schema: NaN is not refused
    p.write_text("x,z\n1.5,2\n2.5,\n")
    with pytest.raises(DataProblems, match="column 'z': missing values"):
        snapshot(DataConfig(CsvSource(p)))


LABELLED = {
    "formula": "died ~ age + C(sex)",
    "family": "bernoulli",
    "columns": {"died": {"values": [0, 1]}, "age": [20, 90], "sex": {"values": ["F", "M"]}},
}


def test_text_labels_become_codes(tmp_path: Path) -> None:
    """Issue 40 item 2: a registry's categories stored as text ('F', 'M'). A column the schema declares with
    labels becomes the labels' codes (F = 0, M = 1: the declared order); any other text, a number, or an
    empty cell is refused with its rows and never its value; the other columns are as before."""
    p = tmp_path / "r.csv"
    p.write_text("age,sex,died\n30,F,0\n41.5, M ,1\n55,M,1\n")
    snap = snapshot(DataConfig(CsvSource(p), "formula", LABELLED))
    np.testing.assert_array_equal(snap.dataset.columns["sex"], [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(snap.dataset.columns["age"], [30.0, 41.5, 55.0])
    codes = {"age": [30.0, 41.5, 55.0], "died": [0.0, 1.0, 1.0], "sex": [0.0, 1.0, 1.0]}
    assert snap.sha256 == content_hash({k: np.array(v) for k, v in codes.items()})
    pa = pytest.importorskip("pyarrow")  # Parquet text (and a dictionary-encoded column): the same records
    import pyarrow.parquet as pq

    sex = pa.array(["F", "M", "M"]).dictionary_encode()
    pq.write_table(pa.table({"age": codes["age"], "sex": sex, "died": [0, 1, 1]}), tmp_path / "r.parquet")
    parquet = DataConfig(ParquetSource(tmp_path / "r.parquet"), "formula", LABELLED)
    assert snapshot(parquet).sha256 == snap.sha256
    p.write_text("age,sex,died\n30,F,0\n41,female,1\n55,,1\n60,1,0\n70,m,0\n")
    with pytest.raises(DataProblems) as ei:
        snapshot(DataConfig(CsvSource(p), "formula", LABELLED))
    msg = str(ei.value)
    assert "column 'sex': labels outside the declared labels ['F', 'M'] in rows 2, 4, 5" in msg, msg
    assert "column 'sex': missing values (empty, NULL or unbound) in row 3" in msg
    assert "female" not in msg and "'m'" not in msg and "female" not in repr(ei.value.rows)
    assert [r for r, _ in ei.value.rows] == [2, 3, 4, 5]


def test_max_records(tmp_path: Path) -> None:
    write_csv(tmp_path / "r.csv", records(20))
    assert snapshot(csv_config(tmp_path / "r.csv", max_records=20)).records == 20
    with pytest.raises(SourceError, match=r"data\.max_records: the source holds more than 19 records"):
        snapshot(csv_config(tmp_path / "r.csv", max_records=19))


def write_party(tmp_path: Path, data_lines: list[str]) -> Path:
    pdir = tmp_path / "party-1"
    pdir.mkdir(exist_ok=True)
    write_csv(pdir / "data.csv", records(30))
    cfg = pdir / "party.toml"
    text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(models=("bayes-logistic",)))
    cfg.write_text(text + "\n[data]\n" + "\n".join(data_lines) + "\n")
    return cfg


def test_config_keys(tmp_path: Path) -> None:
    ok = write_party(tmp_path, ['path = "data.csv"', 'model = "bayes-logistic"', "model_args = { p = 2 }"])
    conf = load_config(ok, insecure=True)
    assert conf.data is not None and conf.data.kind == "csv" and conf.data.max_records == 10_000_000
    for lines, key in (
        (['path = "data.txt"'], "data.path: unsupported data file type '.txt'"),
        (['source = "csv"'], "data.path: missing"),
        (['source = "excel"', 'path = "data.csv"'], "data.source: 'excel' is not one of"),
        (['path = "data.csv"', 'url = "sqlite://"'], "data.url: unknown key for data.source = 'csv'"),
        (['path = "data.csv"', "max_records = 0"], "data.max_records: must be >= 1"),
        (['path = "nope.csv"'], "data.path: file .*nope.csv does not exist"),
        (['path = "data.csv"', "model_args = { p = 2 }"], "data.model_args: given without data.model"),
    ):
        cfg = write_party(tmp_path, lines)
        with pytest.raises(ConfigError, match=key):
            load_config(cfg, insecure=True)


def test_daemon_audits_its_snapshot(tmp_path: Path) -> None:
    cfg = write_party(tmp_path, ['path = "data.csv"', 'model = "bayes-logistic"', "model_args = { p = 2 }"])
    d = PartyDaemon(load_config(cfg, insecure=True), insecure=True)
    assert d.snapshot is not None and d.data is d.snapshot.dataset
    d.audit.close()
    lines = [json.loads(s) for s in (tmp_path / "party-1" / "state" / "audit.log").read_text().splitlines()]
    snap = [x for x in lines if x["what"] == "DataSnapshot"]
    assert len(snap) == 1
    assert snap[0]["records"] == 30 and snap[0]["sha256"] == d.snapshot.sha256 and snap[0]["source"] == "csv"
    assert snap[0]["bytes"] == 30 * 3 * 8 and snap[0]["columns"] == ["x1", "x2", "y"]
    assert d.data_audit() == {"records": 30, "data_sha256": d.snapshot.sha256}


def test_check_config_reads_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from parties.cli import main

    cfg = write_party(tmp_path, ['path = "data.csv"', 'model = "bayes-logistic"', "model_args = { p = 2 }"])
    assert main(["check-config", "--config", str(cfg), "--insecure"]) == 0
    out = capsys.readouterr().out
    snap = snapshot(csv_config(tmp_path / "party-1" / "data.csv"))
    assert "data: 30 records, columns x1, x2, y (720 bytes)" in out
    assert f"data: snapshot sha256 {snap.sha256}" in out
    # problems: exit 2, the key, the first problem rows, no values
    rows = ["x1,x2,y"] + [f"0.{i},0.5,1" for i in range(20)]
    rows[3] = "0.3,,1"
    rows[5] = "7.25,0.5,1"
    rows[15] = "0.1,0.2,private"
    (tmp_path / "party-1" / "data.csv").write_text("\n".join(rows) + "\n")
    assert main(["check-config", "--config", str(cfg), "--insecure"]) == 2
    err = capsys.readouterr().err
    assert "data.path: refused (20 records, the first 3 problem rows):" in err
    assert "  row 3: column 'x2': missing values (empty, NULL or unbound)" in err
    assert "  row 5: column 'x1': values outside the declared public bounds [-3, 3]" in err
    assert "  row 15: column 'y': non-numeric values" in err
    assert "7.25" not in err and "private" not in err
    # the daemon refuses to start on the same data (exit 2, the key named), nothing served
    assert main(["serve", "--config", str(cfg), "--insecure"]) == 2
    assert "data error: " in capsys.readouterr().err
