"""A run whose registries read their records from PostgreSQL (a throwaway cluster started here), from a SPARQL
endpoint (an Oxigraph server started here, FAIRVASC-like RDF in one named graph per registry, read in pages)
or from SQLite and Parquet files draws exactly the posterior of the same run from CSV files: same public
seed, fixed noise keys, same run id. Each daemon's audit log shows the same snapshot (records and SHA-256)
as its CSV twin, so equal draws are not an accident of insensitive decisions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.experiment import load_experiment
from simulations.run_local import simulate_experiment
from simulations.servers import oxigraph_binary, postgres_bindir

EXPERIMENT = """
[experiment]
name = "sources"
output_dir = "out"
seed = 11

[model]
name = "bayes-logistic"
[model.params]
p = 2

[sampler]
kind = "mh"
chains = 4
iterations = 14
warmup = 4
proposal_scale = 0.2
init_scale = 0.1

[reveal]
mode = "sign"

[output]
formats = []

[simulate]
parties = 3
records = [70, 45, 60]
fixed_noise_keys = true
sources = {sources}
"""

needs_pg = pytest.mark.skipif(
    postgres_bindir() is None, reason="PostgreSQL server binaries (initdb) not installed"
)
needs_oxigraph = pytest.mark.skipif(
    oxigraph_binary() is None, reason="oxigraph (pip install oxigraph) not installed"
)


def quiet(_: str) -> None:
    pass


def run(
    tmp_path: Path, name: str, sources: list[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[np.ndarray, list]:
    import coordinator.checkpoint

    # one run id: same noise
    monkeypatch.setattr(coordinator.checkpoint.secrets, "token_hex", lambda n: "cd" * n)
    p = tmp_path / f"{name}.toml"
    p.write_text(EXPERIMENT.format(sources=json.dumps(sources)))
    out = simulate_experiment(load_experiment(p), tmp_path / name, log=quiet)
    snaps = []
    for pid in (1, 2, 3):
        audit = tmp_path / name / "simulation" / f"party-{pid}" / "state" / "audit.log"
        lines = [json.loads(s) for s in audit.read_text().splitlines()]
        (snap,) = [x for x in lines if x["what"] == "DataSnapshot"]
        opened = [x for x in lines if x["what"] == "OpenSession" and x["outcome"] == "ok"]
        assert opened and all(x["data_sha256"] == snap["sha256"] for x in opened)
        snaps.append(snap)
    return out.draws, snaps


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, list]:
    mp = pytest.MonkeyPatch()
    try:
        return run(tmp_path_factory.mktemp("csv"), "csv", ["csv"] * 3, mp)
    finally:
        mp.undo()


def check_same(csv_run: tuple[np.ndarray, list], other: tuple[np.ndarray, list], kinds: list[str]) -> None:
    draws, snaps = other
    for pid, (a, b) in enumerate(zip(csv_run[1], snaps, strict=True), start=1):
        assert b["source"] == kinds[pid - 1]
        assert (a["records"], a["sha256"], a["columns"]) == (b["records"], b["sha256"], b["columns"]), pid
    assert draws.shape == csv_run[0].shape
    np.testing.assert_array_equal(draws, csv_run[0])  # bit for bit


@pytest.mark.slow
@needs_pg
def test_postgresql_run_equals_csv_run(
    csv_run: tuple[np.ndarray, list], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = run(tmp_path, "pg", ["postgresql"] * 3, monkeypatch)
    check_same(csv_run, got, ["sql"] * 3)
    assert all(s["where"].startswith("sql postgresql+psycopg://reader") for s in got[1])
    # the role's password is in a file the config names, never in the config or the audit log
    for pid in (1, 2, 3):
        pdir = tmp_path / "pg" / "simulation" / f"party-{pid}"
        secret = (pdir / "db-password").read_text().strip()
        assert (pdir / "db-password").stat().st_mode & 0o077 == 0
        assert secret not in (pdir / "party.toml").read_text()
        assert secret not in (pdir / "state" / "audit.log").read_text()


@pytest.mark.slow
@needs_oxigraph
def test_sparql_run_equals_csv_run(
    csv_run: tuple[np.ndarray, list], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = run(tmp_path, "sparql", ["sparql"] * 3, monkeypatch)
    check_same(csv_run, got, ["sparql"] * 3)
    assert "(graphs urn:confar:registry:party-2)" in got[1][1]["where"]


@pytest.mark.slow
@needs_pg
@needs_oxigraph
def test_mixed_consortium_equals_csv_run(
    csv_run: tuple[np.ndarray, list], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite and Parquet files (the other sources), next to PostgreSQL and SPARQL in one consortium."""
    got = run(tmp_path, "mixed", ["sqlite", "parquet", "postgresql"], monkeypatch)
    check_same(csv_run, got, ["sql", "parquet", "sql"])
