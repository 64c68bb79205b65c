"""The data-source seam: what every source returns, how its values become the party's records, and the
snapshot a daemon runs on.

A source (``parties.sources.files``, ``.sql``, ``.sparql``) turns its configuration into a
:class:`RawTable`: named columns of Python values as the source delivered them (``None`` where a value is
missing: an empty CSV cell, an SQL NULL, an unbound SPARQL variable; :class:`Bad` where the source already
knows the value cannot be a number, e.g. an IRI). :func:`take_snapshot` then does the same for every source:

1. **convert** each value the session needs to a float64 (:func:`to_float`): numbers as they are (SQL
   ``NUMERIC`` / ``xsd:decimal`` through ``float``), booleans 1.0 / 0.0, dates and date-times as days since
   1970-01-01 (UTC for date-times with a time zone; fractional for date-times), text only where the source
   is text (CSV cells are parsed with ``float``; a text value from SQL, Parquet or SPARQL is a wrong type).
   A column the schema declares with text labels (``Column.labels``, e.g. ``sex = {values = ["F", "M"]}``)
   takes text instead (:func:`to_codes`): each declared label becomes its code (0, 1, ... in declared order),
   any other text is refused with its rows, never its value, and so is a number there (CSV cells, SQL and
   Parquet text, SPARQL plain and ``xsd:string`` literals; CSV cells with surrounding spaces stripped);
2. **check** the result against the model's schema (``mechanisms.models.base.schema_problems``: missing
   columns, NaN / infinity, non-integers, values outside the declared public bounds or value set). A
   missing value is refused: every schema column is required (the schema's rule; a registry that wants
   complete cases only says so in its query, e.g. ``WHERE age IS NOT NULL`` or ``FILTER(BOUND(?age))``);
3. **fix** the records as an immutable :class:`Snapshot` with its record count, size in bytes and a SHA-256
   content hash (:func:`content_hash`, over the column names and the float64 values in order), which the
   daemon writes to its audit log.

Nothing is loaded unless everything passes (no partial load): any problem raises :class:`SourceError`
naming the configuration key (``data.url``, ``data.query``, ...). Problems of the records are a
:class:`DataProblems`, which also lists the first problem rows (row numbers and what is wrong, never a value)
for ``confar-party check-config``. Messages never carry credentials (sources scrub them) and never a
record's value.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Column, Problem, schema_problems
from parties.analyses import AnalysisError, Dataset
from parties.models_bridge import DataSchemaError

F64 = npt.NDArray[np.float64]
EPOCH = dt.date(1970, 1, 1)
ROWS_SHOWN = 10  # check-config lists at most this many problem rows
HASH_DOMAIN = b"confar/data-snapshot/v1\0"


class SourceError(AnalysisError):
    """A data source that cannot be read, or records that are refused; ``key`` is the configuration key to
    fix (``data.url``, ``data.query``, ``data.max_records``, ...)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


class DataProblems(SourceError, DataSchemaError):
    """Records that do not match the model's schema (or are not numbers): the message lists every problem
    by column and rows; ``rows`` holds the first problem rows as (row number from 1, what is wrong)."""

    def __init__(self, key: str, message: str, rows: list[tuple[int, list[str]]], records: int) -> None:
        super().__init__(key, message)
        self.rows, self.records = rows, records


@dataclass(frozen=True)
class Bad:
    """A value the source already knows cannot be a number; ``what`` says why, without the value. ``text``:
    the value when it is text a labelled column may take (a SPARQL plain or ``xsd:string`` literal)."""

    what: str
    text: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RawTable:
    """A source's result: ``names`` in result order, ``columns[name]`` one value per record."""

    names: tuple[str, ...]
    columns: dict[str, list[Any]]
    n: int
    text_is_number: bool = False  # CSV: every value is text, parsed as a number


class DataSource(Protocol):
    """One registry's records where they live. ``fetch`` reads them once (read-only); ``describe`` says
    where from, without credentials (for the audit log and messages); ``key`` is the configuration key of
    the records' shape (``data.path`` for files, ``data.query`` for queries)."""

    @property
    def kind(self) -> str: ...

    @property
    def key(self) -> str: ...

    def describe(self) -> str: ...

    def fetch(self, max_records: int) -> RawTable: ...


def too_many(max_records: int) -> SourceError:
    return SourceError(
        "data.max_records",
        f"the source holds more than {max_records} records (data.max_records = {max_records}); nothing was "
        "loaded: raise the limit or narrow the query",
    )


def _convert(value: Any, text_is_number: bool) -> float | str:
    """A float, or the reason (no value in it) this value is not one."""
    if value is None:
        return "missing values (empty, NULL or unbound)"
    if isinstance(value, Bad):
        return value.what
    if isinstance(value, bool | np.bool_):
        return 1.0 if value else 0.0
    if isinstance(value, int | float | Decimal | np.integer | np.floating):
        try:
            return float(value)
        except OverflowError:  # an integer of 309 digits or more (SQL NUMERIC, a SPARQL xsd:integer)
            return "numbers too large for a float64 (beyond 1.8e308)"
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return (value - dt.datetime(1970, 1, 1)).total_seconds() / 86400.0
    if isinstance(value, dt.date):
        return float((value - EPOCH).days)
    if isinstance(value, str):
        if text_is_number:
            text = value.strip()
            if not text:
                return "missing values (empty, NULL or unbound)"
            try:
                return float(text)
            except ValueError:
                return "non-numeric values"
        return "text values where a number, boolean or date is expected (convert it in the query)"
    return f"values of type {type(value).__name__} where a number, boolean or date is expected"


def _all_floats(values: Sequence[Any], text_is_number: bool) -> F64 | None:
    """The column as float64 when ``float`` converts every value as :func:`_convert` would (text where the
    source is text, Python ints and floats anywhere), else None (then each value is looked at on its own).
    A CSV column of 10,000 cells: one C loop instead of 10,000 calls of ``_convert``."""
    if not {type(v) for v in values} <= ({str, float, int} if text_is_number else {float, int}):
        return None  # a text value from SQL, Parquet or SPARQL is a wrong type, never parsed
    try:
        return np.fromiter(map(float, values), dtype=np.float64, count=len(values))
    except (TypeError, ValueError, OverflowError):  # None, Bad, a date, empty or non-numeric text, ...
        return None


def to_float(name: str, values: Sequence[Any], text_is_number: bool) -> tuple[F64, list[Problem]]:
    """One column as float64 and the problems of its values (grouped by reason, each with its rows)."""
    fast = _all_floats(values, text_is_number)
    if fast is not None:
        return fast, []
    out = np.empty(len(values), dtype=np.float64)
    bad: dict[str, npt.NDArray[np.bool_]] = {}
    for i, v in enumerate(values):
        got = _convert(v, text_is_number)
        if isinstance(got, str):
            mask = bad.setdefault(got, np.zeros(len(values), dtype=bool))
            mask[i] = True
            out[i] = np.nan
        else:
            out[i] = got
    return out, [Problem(name, what, mask) for what, mask in bad.items()]


def _code(value: Any, code: dict[str, float], text_is_number: bool) -> float | str:
    """A labelled column's value as its label's code, or the reason (no value in it) it is not one."""
    if isinstance(value, Bad):
        if value.text is None:
            return value.what
        value = value.text
    if value is None:
        return "missing values (empty, NULL or unbound)"
    if not isinstance(value, str):
        return f"values of type {type(value).__name__} where a text label {list(code)} is expected"
    text = value.strip() if text_is_number else value
    if text_is_number and not text:
        return "missing values (empty, NULL or unbound)"
    got = code.get(text)
    return f"labels outside the declared labels {list(code)}" if got is None else got


def to_codes(
    name: str, values: Sequence[Any], labels: Sequence[str], text_is_number: bool
) -> tuple[F64, list[Problem]]:
    """A labelled column (``Column.labels``) as the codes of its labels (0, 1, ... in declared order) and the
    problems of its values (grouped by reason, each with its rows; never a value)."""
    code = {label: float(k) for k, label in enumerate(labels)}
    out = np.empty(len(values), dtype=np.float64)
    bad: dict[str, npt.NDArray[np.bool_]] = {}
    for i, v in enumerate(values):
        got = _code(v, code, text_is_number)
        if isinstance(got, str):
            mask = bad.setdefault(got, np.zeros(len(values), dtype=bool))
            mask[i] = True
            out[i] = np.nan
        else:
            out[i] = got
    return out, [Problem(name, what, mask) for what, mask in bad.items()]


def check_records(raw: RawTable, schema: Sequence[Column] | None, key: str, where: str) -> dict[str, F64]:
    """The records as float64 columns (the schema's columns, or every column without a schema), or
    :class:`DataProblems` listing every problem."""
    problems: list[Problem] = []
    if raw.n == 0:
        raise DataProblems(key, f"{where}: refused: no records", [], 0)
    dup = sorted({n for n in raw.names if raw.names.count(n) > 1})
    if dup:
        problems.append(Problem(None, f"duplicate column names {dup}"))
    wanted = [c.name for c in schema] if schema is not None else list(raw.names)
    labels = {c.name: c.labels for c in schema or () if c.labels is not None}
    converted: dict[str, F64] = {}
    for name in wanted:
        if name in raw.columns:
            if name in labels:
                col, probs = to_codes(name, raw.columns[name], labels[name], raw.text_is_number)
            else:
                col, probs = to_float(name, raw.columns[name], raw.text_is_number)
            problems += probs
            if not probs:
                converted[name] = col
    if schema is not None:
        unconverted = {n for n in wanted if n in raw.columns and n not in converted}
        checked, more = schema_problems(converted, [c for c in schema if c.name not in unconverted])
        missing = [n for n in wanted if n not in raw.columns]
        more = [p for p in more if not p.what.startswith("missing column")]
        if missing:
            more.insert(
                0,
                Problem(
                    None,
                    f"missing column{'s' if len(missing) > 1 else ''} {missing} (the model's schema needs "
                    f"{wanted}); found {list(raw.names)}",
                ),
            )
        problems += more
        converted = {n: checked[n] for n in wanted if n in checked}
    if problems:
        raise DataProblems(
            key,
            f"{where}: refused: " + "; ".join(p.text() for p in problems),
            problem_rows(problems, raw.n),
            raw.n,
        )
    return converted


def problem_rows(problems: Sequence[Problem], n: int, limit: int = ROWS_SHOWN) -> list[tuple[int, list[str]]]:
    """The first ``limit`` rows with a problem: (row number from 1, [what is wrong in which column])."""
    any_row = np.zeros(n, dtype=bool)
    for p in problems:
        if p.rows is not None:
            any_row |= p.rows
    out = []
    for i in np.flatnonzero(any_row)[:limit]:
        out.append(
            (
                int(i) + 1,
                [f"column {p.column!r}: {p.what}" for p in problems if p.rows is not None and p.rows[i]],
            )
        )
    return out


def content_hash(columns: dict[str, F64]) -> str:
    """SHA-256 over the record count, then each column's name and its float64 values (little-endian) in
    order: equal for equal records whatever the source."""
    n = len(next(iter(columns.values()))) if columns else 0
    h = hashlib.sha256(HASH_DOMAIN)
    h.update(n.to_bytes(8, "little"))
    for name, col in columns.items():
        h.update(name.encode() + b"\0")
        h.update(np.ascontiguousarray(col, dtype="<f8").tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class Snapshot:
    """The records one daemon runs on, fixed when it starts (every session and decision uses these)."""

    dataset: Dataset
    kind: str
    source: str  # where from, without credentials
    records: int
    columns: tuple[str, ...]
    nbytes: int
    sha256: str
    model: str | None = None
    ignored: tuple[str, ...] = field(default=())  # result columns the schema does not use

    def audit(self) -> dict[str, Any]:
        return {
            "source": self.kind,
            "where": self.source,
            "records": self.records,
            "columns": list(self.columns),
            "bytes": self.nbytes,
            "sha256": self.sha256,
            "schema": self.model or "",
        }


def take_snapshot(
    source: DataSource, max_records: int, schema: Sequence[Column] | None, model: str | None = None
) -> Snapshot:
    """Read the source once and check it (see the module docstring); raise SourceError on any problem."""
    raw = source.fetch(max_records)
    if raw.n > max_records:
        raise too_many(max_records)
    where = source.describe()
    cols = check_records(raw, schema, source.key, where)
    for name, col in cols.items():
        col.setflags(write=False)
        cols[name] = col
    nbytes = sum(int(c.nbytes) for c in cols.values())
    used = set(cols)
    return Snapshot(
        dataset=Dataset(cols),
        kind=source.kind,
        source=where,
        records=raw.n,
        columns=tuple(cols),
        nbytes=nbytes,
        sha256=content_hash(cols),
        model=model,
        ignored=tuple(n for n in raw.names if n not in used),
    )
