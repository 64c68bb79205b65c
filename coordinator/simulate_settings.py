"""The experiment file's ``[simulate]`` table: a local consortium of registry daemons (``confar run
--simulate``): how many, their records (synthetic, or files), each one's privacy budget and data source."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.tables import M_MAX, M_MIN, Reader
from mechanisms.samplers.requests import NEIGHBOURS

SIMULATE_SOURCES = ("csv", "parquet", "sqlite", "postgresql", "sparql")  # simulations/registries.py


@dataclass(frozen=True)
class SimulateSettings:
    parties: int
    records: tuple[int, ...]
    data_seed: int
    fixed_noise_keys: bool = False
    party_gdp_mu: float | None = None
    party_epsilon: float | None = None
    party_delta: float | None = None
    party_colluding: int | None = None  # None: the daemon's default ("all": m - 1)
    party_neighbours: str | None = None  # None: the daemon's default ("replace-one")
    party_accountant: str | None = None  # None: the daemon's default ("pld"); "renyi": a Renyi filter
    party_per_run: str | None = None  # None: the daemon's default ("per-decision"); "worst-record"
    sources: tuple[str, ...] = ()  # per party (SIMULATE_SOURCES); empty: every party reads a CSV file
    data: tuple[Path, ...] = ()  # per party: its records (CSV or Parquet), not the model's synthetic data
    party_require_approval: bool = False  # [governance] require_approval of every party (issue 37)

    def source(self, pid: int) -> str:
        return self.sources[pid - 1] if self.sources else "csv"

    def budget(self) -> dict[str, Any]:
        """Each simulated party's ``[budget]`` table entries (empty: no budget)."""
        out: dict[str, Any] = {}
        if self.party_gdp_mu is not None:
            out["gdp_mu"] = self.party_gdp_mu
        if self.party_epsilon is not None:
            out.update(epsilon=self.party_epsilon, delta=self.party_delta)
        if self.party_colluding is not None:
            out["colluding"] = self.party_colluding
        if self.party_neighbours is not None:
            out["neighbours"] = self.party_neighbours
        if self.party_accountant is not None:
            out["accountant"] = self.party_accountant
        if self.party_per_run is not None:
            out["per_run"] = self.party_per_run
        return out


def read_simulate(r: Reader, tbl: dict[str, Any], doc: dict[str, Any], seed: int) -> SimulateSettings:
    """The [simulate] table (its keys in coordinator/experiment.py's schema), checked, naming the key."""
    r.only(
        tbl,
        "simulate",
        (
            "parties",
            "records",
            "data_seed",
            "fixed_noise_keys",
            "party_gdp_mu",
            "party_epsilon",
            "party_delta",
            "party_colluding",
            "party_neighbours",
            "party_accountant",
            "party_per_run",
            "sources",
            "data",
            "party_require_approval",
        ),
    )
    raw_parties = doc.get("parties")
    default_m = len(raw_parties) if isinstance(raw_parties, list) and raw_parties else 3
    m = r.integer(tbl, "simulate", "parties", default_m, lo=M_MIN, hi=M_MAX)
    rec = r.get(tbl, "simulate", "records", (int, list), 500)
    records = [rec] * m if isinstance(rec, int) else rec
    if len(records) != m:
        raise r.err("simulate.records", f"needs one count per party ({m}), got {len(records)}")
    for i, n in enumerate(records):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000_000:
            raise r.err(
                f"simulate.records[{i}]" if isinstance(rec, list) else "simulate.records",
                f"must be an integer in 1..10000000, got {n!r}",
            )
    gdp_mu = r.number(tbl, "simulate", "party_gdp_mu", None, gt=0.0)
    eps = r.number(tbl, "simulate", "party_epsilon", None, gt=0.0)
    delta = r.number(tbl, "simulate", "party_delta", None, gt=0.0, lt=1.0)
    if gdp_mu is not None and (eps is not None or delta is not None):
        raise r.err("simulate.party_gdp_mu", "give party_gdp_mu, or party_epsilon and party_delta, not both")
    if (eps is None) != (delta is None):
        missing = "party_delta" if delta is None else "party_epsilon"
        raise r.err(
            f"simulate.{missing}", "missing: an eps-at-delta budget needs party_epsilon and party_delta"
        )
    colluding = r.integer(tbl, "simulate", "party_colluding", None, lo=0, hi=m - 1)
    accountant = (
        r.choice(tbl, "simulate", "party_accountant", ("pld", "renyi"), None)
        if "party_accountant" in tbl
        else None
    )
    if accountant is not None and eps is None:
        raise r.err(
            "simulate.party_accountant", "only with an eps-at-delta budget (party_epsilon, party_delta)"
        )
    per_run = (
        r.choice(tbl, "simulate", "party_per_run", ("per-decision", "worst-record"), None)
        if "party_per_run" in tbl
        else None
    )
    if per_run is not None and eps is None and gdp_mu is None:
        raise r.err("simulate.party_per_run", "only with a privacy budget (party_gdp_mu or party_epsilon)")
    raw_src = r.get(tbl, "simulate", "sources", (str, list), "csv")
    srcs = [raw_src] * m if isinstance(raw_src, str) else raw_src
    if len(srcs) != m:
        raise r.err("simulate.sources", f"needs one source per party ({m}), got {len(srcs)}")
    for i, src in enumerate(srcs):
        if src not in SIMULATE_SOURCES:
            where = f"simulate.sources[{i}]" if isinstance(raw_src, list) else "simulate.sources"
            raise r.err(where, f"{src!r} is not one of {list(SIMULATE_SOURCES)}")
    files: tuple[Path, ...] = ()
    if "data" in tbl:
        raw_files = r.get(tbl, "simulate", "data", list)
        if len(raw_files) != m:
            raise r.err("simulate.data", f"needs one file per party ({m}), got {len(raw_files)}")
        for i, f in enumerate(raw_files):
            if not isinstance(f, str) or not f:
                raise r.err(f"simulate.data[{i}]", f"must be a file path, got {f!r}")
            path = r.path(f)
            if not path.is_file():
                raise r.err(f"simulate.data[{i}]", f"no such file: {path}")
            if path.suffix.lower() not in (".csv", ".parquet"):
                raise r.err(f"simulate.data[{i}]", f"must be a .csv or .parquet file, got {path.name!r}")
            files += (path,)
        if "records" in tbl:
            raise r.err("simulate.records", "not with simulate.data (the files hold the records)")
        records = [_file_records(r, f"simulate.data[{i}]", path) for i, path in enumerate(files)]
    require_approval = bool(r.get(tbl, "simulate", "party_require_approval", bool, False))
    if require_approval and gdp_mu is None and eps is None:
        raise r.err(
            "simulate.party_require_approval",
            "a study's cap is charged by the registry's privacy budget: give party_gdp_mu, or party_epsilon "
            "and party_delta",
        )
    return SimulateSettings(
        parties=m,
        records=tuple(int(n) for n in records),
        data_seed=r.integer(tbl, "simulate", "data_seed", seed, lo=0, hi=2**63 - 1),
        fixed_noise_keys=r.get(tbl, "simulate", "fixed_noise_keys", bool, False),
        party_gdp_mu=gdp_mu,
        party_epsilon=eps,
        party_delta=delta,
        party_colluding=colluding,
        party_neighbours=r.choice(tbl, "simulate", "party_neighbours", NEIGHBOURS, None)
        if "party_neighbours" in tbl
        else None,
        party_accountant=accountant,
        party_per_run=per_run,
        sources=tuple(srcs),
        data=files,
        party_require_approval=require_approval,
    )


def _file_records(r: Reader, key: str, path: Path) -> int:
    """The number of records in a registry's file (a CSV's rows after the header; a Parquet file's rows):
    the public size of a simulated registry (the warm start's n_records, a planned run's pilot)."""
    if path.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]

            return int(pq.ParquetFile(path).metadata.num_rows)
        except ImportError as exc:
            raise r.err(key, f"{path.name}: reading Parquet needs pyarrow (or convert it to CSV)") from exc
        except OSError as exc:
            raise r.err(key, f"{path.name}: not a readable Parquet file: {exc}") from exc
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = sum(1 for row in csv.reader(fh) if row)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise r.err(key, f"{path.name}: not a readable CSV file: {exc}") from exc
    if rows < 2:
        raise r.err(key, f"{path.name}: no records (a header row, then one record per line)")
    return rows - 1
