"""The run record file (parties.replay.ReplayStore): one line appended and fdatasynced per run step, the
last whole line is the record, a torn last line is ignored, an older single-document file still reads, the
file is rewritten whole when it is new, torn, of the older format or large, and a failed append leaves the
file as it was (issue 26: the run step's durable write without a rename and two fsyncs)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from parties import replay
from parties.replay import ReplayFileError, ReplayStore, RunRecord
from proto.records import RunStepRef

N = 4


def _record(step: int, run_id: str = "run-1") -> RunRecord:
    msgs = ((6, np.arange(N, dtype=np.uint64) + np.uint64(step)),)
    return RunRecord(RunStepRef(run_id, step, bytes([step]) * 32, b"e" * 16), N, 6, msgs)


def _count(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> dict[str, int]:
    counts = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(os, name)

        def wrapped(*a: Any, _name: str = name, _real: Any = real) -> Any:
            counts[_name] += 1
            return _real(*a)

        monkeypatch.setattr(os, name, wrapped)
    return counts


def _held(store: ReplayStore) -> int:
    got = store.load("run-1")
    assert got is not None
    return got.run_step


def test_each_run_step_is_one_appended_line_synced_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record(1))  # the run's first record: the file made whole (write_durable)
    counts = _count(monkeypatch, ("fsync", "fdatasync", "replace"))
    for step in (2, 3, 4):
        store.save(_record(step))
        assert _held(store) == step
    assert counts == {"fsync": 0, "fdatasync": 3, "replace": 0}  # one sync per run step, no rename
    path = store.path_for("run-1")
    lines = path.read_bytes().split(b"\n")
    assert len(lines) == 5 and lines[-1] == b""  # four records, each a whole line
    assert [json.loads(x)["run_step"] for x in lines[:-1]] == [1, 2, 3, 4]
    assert os.stat(path).st_mode & 0o777 == 0o600
    got = store.load("run-1")
    assert got is not None and got.ref == _record(4).ref
    assert np.array_equal(got.messages[0][1], _record(4).messages[0][1])


def test_torn_last_line_is_ignored_and_the_next_save_rewrites(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record(1))
    store.save(_record(2))
    path = store.path_for("run-1")
    whole = path.read_bytes()
    third = json.dumps({"version": 1, "run_step": 3}).encode()
    for torn in (third[:17], b"\0" * 40):  # a prefix of the append, or blocks that never reached the disk
        path.write_bytes(whole + torn)
        assert _held(store) == 2  # the torn save never returned: its step's messages never left
    store.save(_record(3))
    assert path.read_bytes().count(b"\n") == 1 and _held(store) == 3  # rewritten: the record alone


def test_older_single_document_file_reads_and_is_replaced(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record(5))
    path = store.path_for("run-1")
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # as older versions wrote it: one document, no newline
    assert _held(store) == 5
    store.save(_record(6))
    assert path.read_bytes().count(b"\n") == 1 and _held(store) == 6


def test_large_file_is_rewritten_with_its_last_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record(1))
    size = store.path_for("run-1").stat().st_size
    monkeypatch.setattr(replay, "REWRITE_BYTES", 3 * size)
    for step in range(2, 12):
        store.save(_record(step))
        assert store.path_for("run-1").stat().st_size <= 3 * size + size
        assert _held(store) == step
    assert not list(store.root.glob("*.tmp")) and len(list(store.root.iterdir())) == 1


def test_corrupt_last_whole_line_is_refused_naming_the_file(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record(1))
    store.save(_record(2))
    path = store.path_for("run-1")
    first, second, _ = path.read_bytes().split(b"\n")
    path.write_bytes(first + b"\n" + second.replace(b'"run_step": 2', b'"run_step": 1') + b"\n")
    with pytest.raises(ReplayFileError, match=re.escape(str(path)) + ".*checksum mismatch"):
        store.load("run-1")  # a whole line may have been relied upon: never skipped for the one before
    path.write_bytes(first + b"\n{garbage\n")
    with pytest.raises(ReplayFileError, match=re.escape(str(path)) + ".*not JSON"):
        store.load("run-1")


def test_failed_append_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record(1))
    path = store.path_for("run-1")
    before = path.read_bytes()

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full_disk)
    with pytest.raises(OSError, match="No space"):
        store.save(_record(2))
    assert path.read_bytes() == before and _held(store) == 1


def test_compact_leaves_each_appended_file_one_json_document(tmp_path: Path) -> None:
    """At a session's close (PartyStorage.compact): a run file appended to is rewritten as its record alone,
    read the same before and after; a torn last line goes, a file written whole is left as it is."""
    store = ReplayStore(tmp_path, "party-1")
    for step in (1, 2, 3):
        store.save(_record(step))
    store.save(_record(1, "run-2"))  # written whole: nothing to compact
    path, other = store.path_for("run-1"), store.path_for("run-2")
    path.write_bytes(path.read_bytes() + b'{"version": 1, "run_st')  # a torn append
    other_before = other.stat().st_ino
    store.compact()
    doc = json.loads(path.read_bytes())  # one document (and its newline)
    assert doc["run_step"] == 3 and _held(store) == 3
    assert other.stat().st_ino == other_before
    store.save(_record(4))  # appends again after the compacted record
    assert path.read_bytes().count(b"\n") == 2 and _held(store) == 4
    path.unlink()  # moved away by the operator meanwhile: compact skips it
    store.compact()
    assert not path.exists()
