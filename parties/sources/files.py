"""File sources: ``csv`` (a header row, then one record per line) and ``parquet`` (needs the optional
``pyarrow``: ``pip install 'confidential-ar[parquet]'``)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parties.sources.base import DataProblems, RawTable, SourceError, too_many


@dataclass(frozen=True)
class CsvSource:
    path: Path
    kind: str = "csv"

    @property
    def key(self) -> str:
        return "data.path"

    def describe(self) -> str:
        return f"csv {self.path}"

    def fetch(self, max_records: int) -> RawTable:
        try:
            with open(self.path, newline="") as fh:
                rows = []
                for row in csv.reader(fh):
                    rows.append(row)
                    if len(rows) > max_records + 1:
                        raise too_many(max_records)
        except OSError as exc:
            raise SourceError(self.key, f"cannot read {self.path}: {exc.strerror}") from exc
        except (csv.Error, UnicodeDecodeError) as exc:
            raise SourceError(self.key, f"{self.path}: not a readable CSV file: {exc}") from exc
        if not rows:
            raise SourceError(self.key, f"{self.path}: empty CSV (a header row is required)")
        header, body = tuple(h.strip() for h in rows[0]), rows[1:]
        bad = [i + 1 for i, r in enumerate(body) if len(r) != len(header)]
        if bad:
            raise DataProblems(
                self.key,
                f"{self.path}: refused: rows {bad[:10]} do not have {len(header)} values "
                "(one per header column)",
                [(i, [f"{len(body[i - 1])} values, not {len(header)}"]) for i in bad[:10]],
                len(body),
            )
        cols = {name: [r[k] for r in body] for k, name in enumerate(header)}
        return RawTable(header, cols, len(body), text_is_number=True)


@dataclass(frozen=True)
class ParquetSource:
    path: Path
    kind: str = "parquet"

    @property
    def key(self) -> str:
        return "data.path"

    def describe(self) -> str:
        return f"parquet {self.path}"

    def fetch(self, max_records: int) -> RawTable:
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError as exc:
            raise SourceError(
                self.key,
                f"{self.path}: reading Parquet needs pyarrow, which is not installed "
                "(pip install 'confidential-ar[parquet]', or convert the file to CSV)",
            ) from exc
        try:
            meta = pq.ParquetFile(self.path).metadata
            if meta.num_rows > max_records:
                raise too_many(max_records)
            table = pq.read_table(self.path)
        except OSError as exc:
            raise SourceError(self.key, f"{self.path}: not a readable Parquet file: {exc}") from exc
        names = tuple(str(n) for n in table.column_names)
        cols: dict[str, list[Any]] = {n: table.column(i).to_pylist() for i, n in enumerate(names)}
        return RawTable(names, cols, table.num_rows)
