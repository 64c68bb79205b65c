"""The ledger journal: an append-only file of checksummed JSON lines, one per charge, fsynced before the
charge counts (issue 26: a step's durable write no longer rewrites the whole ledger).

A party's charges (its privacy events, the run step they pay for, its decision count) live in two kinds of
file in its state directory: the **snapshots** (``privacy_ledger.json`` of ``parties.privacy_budget`` and
``ledger.json`` of ``parties.storage``: whole documents, written durably with ``proto.files.write_durable``)
and this **journal** (``ledger.journal``), which holds the charges made since the snapshots were last written.
A step's charge is one line appended with ``os.write`` to a descriptor kept open and ``os.fdatasync``: no
temporary file, no rename, no directory fsync (the directory is fsynced only when the journal file is made,
itself with ``write_durable``). The charge counts, and any share of its step may leave the party, only once
``fdatasync`` has returned.

Format (version 1), one JSON object a line, keys sorted, each with ``"sha256"``: the SHA-256 (hex) of the
line's object without that key, serialised with sorted keys and no spaces (``_digest``):

* line 1, the header: ``{"confar_journal": 1, "party": <identity>, "after": k}``: the records of this file
  are numbered k + 1, k + 2, ... (k: the last record the snapshots covered when the file was started);
* each further line, one record: ``{"seq": k + i, ...}`` with the charge's fields (``parties.storage``).

Each snapshot stores ``journal_seq``, the last record it includes; a reader applies the records after it.
**Compaction** (``parties.storage.PartyStorage.compact``) writes the snapshots durably with ``journal_seq``
= the last record, then replaces the journal with a fresh one ``after`` that record (``write_durable``:
atomic). A crash between the two leaves snapshots that already include records the old journal still holds;
the reader skips them by their sequence numbers, so nothing is counted twice, and nothing is lost: the
journal is only replaced once every snapshot covers it.

**Damage** (:func:`read_journal`): a line that is not an intact record (bad JSON, checksum mismatch, a
sequence number out of order, another party's header) is refused with :class:`JournalError` naming the file
and the line, never skipped: skipping a charge would under-charge. The one exception is a **torn last
line**: the last piece of the file when it does not end in a newline. A record is written by one
``os.write`` of the whole line, newline last, and counts only after the ``fdatasync`` that follows; a
crash (or SIGKILL, or a full disk) before that returned can leave a prefix of the line, or a line whose
blocks never reached the disk (zeros, no newline). Such a record never counted: the daemon sends no share
of a step before its charge is durable, so no share of that step left the party, and dropping the record
charges nothing that was released. It is dropped (the file is truncated to its last whole line before the
next append, so it never becomes a middle line) and reported (``JournalContents.torn``). A whole line (with
its newline) that fails its checksum was written in full and may have counted: refused, even if last.
An append that fails (a full disk) truncates the file back to where the line began and the step is refused;
if even that fails, the journal refuses every further append.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto.files import make_private, write_durable

JOURNAL_FILE = "ledger.journal"
JOURNAL_VERSION = 1
_ADVICE = (
    "; refusing to start. Restore the state directory from a backup; moving the journal away would drop "
    "charges this party made"
)


class JournalError(RuntimeError):
    """The journal cannot be read or trusted, or can no longer be written (the message names the file)."""


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _digest(obj: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(obj)).hexdigest()


def encode_line(obj: dict[str, Any]) -> bytes:
    """``obj`` as one journal line: its fields, its ``sha256``, the newline."""
    return _canonical({**obj, "sha256": _digest(obj)}) + b"\n"


def _header(party: str, after: int) -> dict[str, Any]:
    return {"confar_journal": JOURNAL_VERSION, "party": party, "after": after}


@dataclass(frozen=True)
class JournalContents:
    """What :func:`read_journal` found: the header's ``after``, the intact records (with their ``seq``), the
    length of the file up to the last intact line and whether a torn last line was dropped."""

    path: Path
    after: int
    records: tuple[dict[str, Any], ...]
    good_bytes: int
    torn: bool = False

    @property
    def last_seq(self) -> int:
        return int(self.records[-1]["seq"]) if self.records else self.after

    def records_after(self, seq: int, snapshot: Path) -> tuple[dict[str, Any], ...]:
        """The records a snapshot that includes records up to ``seq`` lacks; :class:`JournalError` when the
        journal cannot complete it (it starts after ``seq``: records were lost; or it ends before ``seq``:
        the journal is older than the snapshot)."""
        if seq < self.after:
            raise JournalError(
                f"ledger journal {self.path} starts after record {self.after} but snapshot {snapshot} "
                f"includes records only up to {seq}: records {seq + 1}..{self.after} are missing{_ADVICE}"
            )
        if seq > self.last_seq:
            raise JournalError(
                f"snapshot {snapshot} includes journal records up to {seq} but ledger journal {self.path} "
                f"ends at record {self.last_seq}: the journal is older than the snapshot{_ADVICE}"
            )
        return self.records[seq - self.after :]


def missing_journal(seq: int, snapshot: Path, journal: Path) -> JournalError:
    return JournalError(
        f"snapshot {snapshot} includes journal records up to {seq} but ledger journal {journal} is "
        f"missing: charges made after it may be lost{_ADVICE}"
    )


def _parse(line: bytes, path: Path, number: int) -> dict[str, Any]:
    where = f"ledger journal {path} line {number}"
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise JournalError(f"{where} is corrupt (not JSON: {exc}){_ADVICE}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("sha256"), str):
        raise JournalError(f"{where} is corrupt (not a checksummed record){_ADVICE}")
    digest = obj.pop("sha256")
    if digest != _digest(obj):
        raise JournalError(f"{where} is corrupt (checksum mismatch: altered or damaged){_ADVICE}")
    return obj


def read_journal(path: Path, party: str) -> JournalContents | None:
    """The journal at ``path`` (None if there is none). Raises :class:`JournalError` naming the file and line
    for anything but a torn last line (see the module docstring)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise JournalError(f"ledger journal {path} cannot be read ({exc.strerror}){_ADVICE}") from exc
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends in a newline; else the torn last line
    if not lines:
        raise JournalError(f"ledger journal {path} is corrupt (no header line){_ADVICE}")
    header = _parse(lines[0], path, 1)
    if header.get("confar_journal") != JOURNAL_VERSION or type(header.get("after")) is not int:
        raise JournalError(f"ledger journal {path} line 1 is not a version {JOURNAL_VERSION} header{_ADVICE}")
    if header.get("party") != party:
        raise JournalError(
            f"ledger journal {path} belongs to party {header.get('party')!r}, not to {party!r}{_ADVICE}"
        )
    after = header["after"]
    records: list[dict[str, Any]] = []
    for i, line in enumerate(lines[1:], start=2):
        rec = _parse(line, path, i)
        if rec.get("seq") != after + len(records) + 1:
            raise JournalError(
                f"ledger journal {path} line {i} is corrupt (record {rec.get('seq')!r} where record "
                f"{after + len(records) + 1} belongs: a record is missing or out of order){_ADVICE}"
            )
        records.append(rec)
    return JournalContents(path, after, tuple(records), len(data) - len(tail), bool(tail))


class Journal:
    """The journal open for appending (one writer: the daemon's event loop)."""

    def __init__(self, path: Path, party: str, fd: int, size: int, after: int, last_seq: int) -> None:
        self.path, self.party = path, party
        self._fd, self._size, self.after, self.last_seq = fd, size, after, last_seq
        self._broken: str | None = None

    @property
    def records(self) -> int:
        """How many records the file holds (the snapshots include every record up to ``after``)."""
        return self.last_seq - self.after

    @classmethod
    def open(cls, path: Path, party: str, found: JournalContents | None, after: int = 0) -> Journal:
        """Open the journal ``found`` for appending (a torn last line cut off first), or make a new one whose
        records start after ``after`` (``write_durable``: 0600, fsynced with its directory)."""
        if found is None:
            write_durable(path, encode_line(_header(party, after)))
            size, last = path.stat().st_size, after
        else:
            make_private(path)
            size, after, last = found.good_bytes, found.after, found.last_seq
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            if found is not None and found.torn:
                os.ftruncate(fd, size)
                os.fdatasync(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, party, fd, size, after, last)

    def append(self, fields: dict[str, Any]) -> int:
        """Append one record durably (write + fdatasync) and return its sequence number."""
        if self._fd < 0:
            raise JournalError(f"ledger journal {self.path} is closed (the daemon is stopping)")
        if self._broken is not None:
            raise JournalError(f"ledger journal {self.path} cannot be written: {self._broken}")
        seq = self.last_seq + 1
        line = encode_line({**fields, "seq": seq})
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fdatasync(self._fd)
        except OSError as exc:
            try:  # never leave a partial line that a later record would turn into a corrupt middle line
                os.ftruncate(self._fd, self._size)
            except OSError as again:
                self._broken = f"an append failed ({exc}) and could not be undone ({again})"
            raise
        self._size += len(line)
        self.last_seq = seq
        return seq

    def replace(self) -> None:
        """Start a new, empty journal after the last record (atomically: the old file stays whole until
        the rename). Call only once every snapshot includes that record."""
        write_durable(self.path, encode_line(_header(self.party, self.last_seq)))
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        os.close(self._fd)
        self._fd, self._size, self.after, self._broken = fd, os.fstat(fd).st_size, self.last_seq, None

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

