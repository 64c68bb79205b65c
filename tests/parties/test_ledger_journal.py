"""The ledger journal (issue 26, parties/journal.py): a step's charge is one checksummed line appended and
fdatasynced, the ledger files are snapshots that name the last journal record they include.

A torn last line (a write that never completed: no share of its step left) is dropped; any other damage is
refused naming the file and the line; a crash between the snapshots' write and the journal's replacement
counts nothing twice; snapshot + journal equals the ledger the old whole-file commits wrote; every file is
0600; a charge costs one fdatasync and no fsync or rename."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parties.config import PartyConfig, load_config
from parties.journal import JOURNAL_FILE, JournalError, encode_line, read_journal
from parties.privacy_budget import LEDGER_FILE, PrivacyBudgetStore, run_step_counts
from parties.registry import get_analysis
from parties.storage import PartyStorage
from proto.records import RunCharge
from proto.spec import PartyEntry, SessionSpec
from simulations.launcher import PartyOptions, party_config_text
from tests.parties.helpers import gm_params

M, N = 3, 16
PARAMS: dict[str, Any] = gm_params(1.0, (-4.0, 6.0), tau=10.0)  # bounded: 0.1-GDP per decision
BUDGET = {"gdp_mu": 50.0}
RUN = "run-j"


def _cfg(root: Path, budget: dict[str, Any] | None = BUDGET) -> PartyConfig:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "party-1.toml"
    path.write_text(party_config_text(1, M, root, None, None, PartyOptions(privacy_budget=budget)))
    return load_config(path, insecure=True)


def _spec(session: bytes = b"s" * 16, run_id: str = RUN) -> SessionSpec:
    return SessionSpec(
        session_id=session,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, M + 1)),
        t=1,
        reveal_mode="sign",
        model="gaussian-mean",
        model_params=PARAMS,
        run_id=run_id,
    )


def _steps() -> Iterator[tuple[SessionSpec, int, int]]:
    """(session, run step, batch) of a run over two sessions, with one run step charged again."""
    a, b = _spec(b"a" * 16), _spec(b"b" * 16)
    yield from [(a, 1, N), (a, 2, N), (a, 3, 5), (b, 3, 5), (b, 4, N), (b, 5, 1)]


def _run_charge(spec: SessionSpec, step: int, n: int) -> RunCharge:
    return RunCharge(spec.run_id, spec.session_id.hex()[:16], step, step, n, f"{step:064x}", "c" * 32)


def _charge_all(storage: PartyStorage, cfg: PartyConfig) -> None:
    for spec, step, n in _steps():
        events = storage.privacy.events_for(cfg, get_analysis("gaussian-mean", spec.model_params), spec, n)
        storage.charge(events, _run_charge(spec, step, n), n)


def _total() -> int:
    return sum(n for _, _, n in _steps())


def _crash(storage: PartyStorage) -> None:
    """What SIGKILL leaves: the journal's descriptor gone, nothing compacted."""
    storage.journal.close()
    storage.audit.close()


def _lines(cfg: PartyConfig) -> list[bytes]:
    return (cfg.state_dir / JOURNAL_FILE).read_bytes().splitlines(keepends=True)


def _counts(store: PrivacyBudgetStore) -> dict[int, int]:
    return run_step_counts(store.run_charges, RUN)


def test_charges_survive_a_crash_and_are_compacted_at_the_next_start(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    assert len(_lines(cfg)) == 1 + len(list(_steps()))  # the header and one record a charge
    assert not (cfg.state_dir / LEDGER_FILE).exists()  # nothing compacted yet
    _crash(s1)
    s2 = PartyStorage(cfg, None)
    assert s2.decisions_used == _total()
    assert s2.privacy.ledger is not None and s2.privacy.ledger == s1.privacy.ledger
    assert _counts(s2.privacy) == {1: 1, 2: 1, 3: 2, 4: 1, 5: 1}
    assert len(_lines(cfg)) == 1  # compacted at start-up: a fresh journal after the last record
    assert json.loads((cfg.state_dir / "ledger.json").read_text())["journal_seq"] == 6
    assert json.loads((cfg.state_dir / LEDGER_FILE).read_text())["journal_seq"] == 6
    s2.close()
    s3 = PartyStorage(cfg, None)
    assert s3.decisions_used == _total() and s3.privacy.ledger == s1.privacy.ledger
    s3.close()


def test_a_torn_last_line_is_dropped_and_cut_off(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    last = _lines(cfg)[-1]
    _crash(s1)
    path = cfg.state_dir / JOURNAL_FILE
    with path.open("r+b") as fh:  # the last append never completed: a prefix of its line, no newline
        fh.truncate(path.stat().st_size - len(last) // 2)
    found = read_journal(path, "party-1")
    assert found is not None and found.torn and found.last_seq == 5
    s2 = PartyStorage(cfg, None)
    assert s2.decisions_used == _total() - 1  # run step 5 (batch 1) was never charged: its shares never left
    assert _counts(s2.privacy) == {1: 1, 2: 1, 3: 2, 4: 1}
    audit = (cfg.state_dir / "audit.log").read_text()
    assert "dropped a torn last line" in audit
    s2.charge(decisions=7)  # the next record is a whole line after the cut, not glued to the torn one
    _crash(s2)
    s3 = PartyStorage(cfg, None)
    assert s3.decisions_used == _total() - 1 + 7
    s3.close()


def test_a_zero_filled_tail_is_a_torn_line(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    _crash(s1)
    with (cfg.state_dir / JOURNAL_FILE).open("ab") as fh:  # blocks allocated, data never written
        fh.write(b"\0" * 300)
    s2 = PartyStorage(cfg, None)
    assert s2.decisions_used == _total()
    s2.close()


@pytest.mark.parametrize(
    ("damage", "line", "message"),
    [
        (lambda ls: ls.__setitem__(2, ls[2].replace(b'"decisions":16', b'"decisions":1')), 3, "checksum"),
        (lambda ls: ls.__setitem__(3, b"{garbage\n"), 4, "not JSON"),
        (lambda ls: ls.pop(2), 3, "record 3 where record 2 belongs"),
        (lambda ls: ls.__setitem__(-1, ls[-1].replace(b'"decisions":1', b'"decisions":0')), 7, "checksum"),
        (lambda ls: ls.__setitem__(0, ls[0].replace(b'"after":0', b'"after":1')), 1, "checksum"),
    ],
)
def test_a_damaged_journal_is_refused_naming_file_and_line(
    tmp_path: Path, damage: Any, line: int, message: str
) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    _crash(s1)
    lines = _lines(cfg)
    damage(lines)
    path = cfg.state_dir / JOURNAL_FILE
    path.write_bytes(b"".join(lines))
    before = path.read_bytes()
    with pytest.raises(JournalError, match=re.escape(f"{path} line {line}") + ".*" + re.escape(message)):
        PartyStorage(cfg, None)
    with pytest.raises(JournalError, match=re.escape(str(path))):
        PrivacyBudgetStore.load(cfg)  # the privacy commands' reader refuses it too
    assert path.read_bytes() == before  # never repaired or reset


def test_another_partys_or_a_missing_journal_is_refused(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    s1.close()  # snapshots include record 6; a fresh journal after it
    path = cfg.state_dir / JOURNAL_FILE
    theirs = path.read_bytes().replace(b"party-1", b"party-2")
    path.unlink()
    with pytest.raises(JournalError, match=re.escape(str(path)) + ".* is missing"):
        PartyStorage(cfg, None)
    with pytest.raises(JournalError, match="is missing"):
        PrivacyBudgetStore.load(cfg)
    path.write_bytes(theirs)
    with pytest.raises(JournalError, match="checksum"):
        PartyStorage(cfg, None)
    path.write_bytes(encode_line({"confar_journal": 1, "party": "party-2", "after": 6}))
    with pytest.raises(JournalError, match="belongs to party 'party-2', not to 'party-1'"):
        PartyStorage(cfg, None)


def test_a_snapshot_older_than_the_journal_is_refused(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    s1.compact()
    older = (cfg.state_dir / "ledger.json").read_bytes()
    _charge_all(s1, cfg)
    s1.close()  # the journal now starts after record 12; the old ledger.json includes only 6
    (cfg.state_dir / "ledger.json").write_bytes(older)
    with pytest.raises(JournalError, match=r"records 7\.\.12 are missing"):
        PartyStorage(cfg, None)
    (cfg.state_dir / "ledger.json").unlink()  # deleted: the decisions it held are not reset silently
    with pytest.raises(RuntimeError, match=r"ledger\.json is missing but ledger journal .* after record 12"):
        PartyStorage(cfg, None)


@pytest.mark.parametrize("written", ["privacy", "both"])
def test_a_crash_between_the_snapshots_and_the_new_journal_charges_once(tmp_path: Path, written: str) -> None:
    cfg = _cfg(tmp_path)
    s1 = PartyStorage(cfg, None)
    _charge_all(s1, cfg)
    want = s1.privacy.ledger
    s1.privacy.write_snapshot()  # compaction's first piece
    if written == "both":
        s1.save_ledger()  # its second; the crash comes before the journal is replaced
    _crash(s1)
    assert len(_lines(cfg)) == 7  # the old journal, whole: its records are also in the snapshot(s)
    again = PrivacyBudgetStore.load(cfg)
    assert again.ledger == want and _counts(again) == {1: 1, 2: 1, 3: 2, 4: 1, 5: 1}
    s2 = PartyStorage(cfg, None)
    assert s2.decisions_used == _total()
    assert s2.privacy.ledger == want and _counts(s2.privacy) == {1: 1, 2: 1, 3: 2, 4: 1, 5: 1}
    s2.close()


@pytest.mark.parametrize("budget", [BUDGET, {"epsilon": 40.0, "delta": 1e-6}])
def test_snapshot_and_journal_equal_the_whole_file_ledger(tmp_path: Path, budget: dict[str, Any]) -> None:
    old_cfg, new_cfg = _cfg(tmp_path / "old", budget), _cfg(tmp_path / "new", budget)
    old = PrivacyBudgetStore.load(old_cfg)  # the old way: every commit rewrites the whole file
    for spec, step, n in _steps():
        events = old.events_for(old_cfg, get_analysis("gaussian-mean", spec.model_params), spec, n)
        old.commit(events, _run_charge(spec, step, n))
    storage = PartyStorage(new_cfg, None)
    _charge_all(storage, new_cfg)
    _crash(storage)
    replayed = PrivacyBudgetStore.load(new_cfg)  # snapshot (none yet) + journal, read-only
    assert replayed.ledger == old.ledger and replayed.run_charges == old.run_charges
    assert replayed.ledger is not None and old.ledger is not None
    assert replayed.ledger.spent() == old.ledger.spent()
    PartyStorage(new_cfg, None).close()  # compacted
    old_doc = json.loads((old_cfg.state_dir / LEDGER_FILE).read_text())
    new_doc = json.loads((new_cfg.state_dir / LEDGER_FILE).read_text())
    assert new_doc.pop("journal_seq") == len(list(_steps()))
    assert new_doc == old_doc


def test_state_files_are_private_and_a_charge_is_one_fdatasync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = os.umask(0o022)
    try:
        cfg = _cfg(tmp_path)
        storage = PartyStorage(cfg, None)
        path = cfg.state_dir / JOURNAL_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        calls: list[str] = []
        for name in ("fsync", "fdatasync", "replace", "rename"):
            real = getattr(os, name)

            def spy(*a: Any, _name: str = name, _real: Any = real) -> Any:
                calls.append(_name)
                return _real(*a)

            monkeypatch.setattr(os, name, spy)
        spec = _spec()
        events = storage.privacy.events_for(cfg, get_analysis("gaussian-mean", spec.model_params), spec, N)
        storage.charge(events, _run_charge(spec, 1, N), N)
        assert calls == ["fdatasync"]  # no temporary file, rename or directory fsync per step
        storage.charge(decisions=3)
        assert calls == ["fdatasync"] * 2
        monkeypatch.undo()
        storage.close()
        for name in (JOURNAL_FILE, LEDGER_FILE, "ledger.json", "audit.log"):
            assert stat.S_IMODE((cfg.state_dir / name).stat().st_mode) == 0o600, name
        os.chmod(path, 0o644)  # loosened by hand: tightened again at start
        PartyStorage(cfg, None).close()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_without_a_budget_only_decisions_are_journalled(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, None)
    s1 = PartyStorage(cfg, None)
    s1.charge(decisions=4)
    s1.count_decisions(5)
    _crash(s1)
    s2 = PartyStorage(cfg, None)
    assert s2.decisions_used == 9 and s2.privacy.ledger is None
    s2.close()
    assert not (cfg.state_dir / LEDGER_FILE).exists()
    assert json.loads((cfg.state_dir / "ledger.json").read_text())["decisions_used"] == 9


def test_a_failed_append_leaves_no_partial_line_and_charges_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path)
    storage = PartyStorage(cfg, None)
    storage.charge(decisions=2)
    before = (cfg.state_dir / JOURNAL_FILE).read_bytes()

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full)
    spec = _spec()
    events = storage.privacy.events_for(cfg, get_analysis("gaussian-mean", spec.model_params), spec, N)
    with pytest.raises(OSError, match="No space"):
        storage.charge(events, _run_charge(spec, 1, N), N)
    monkeypatch.undo()
    assert (cfg.state_dir / JOURNAL_FILE).read_bytes() == before  # the line was cut off again
    assert storage.decisions_used == 2 and storage.privacy.ledger is not None
    assert storage.privacy.ledger.events == () and storage.privacy.run_charges == []  # nothing in memory
    storage.charge(events, _run_charge(spec, 1, N), N)  # the step asked again: charged once
    _crash(storage)
    again = PartyStorage(cfg, None)
    assert again.decisions_used == 2 + N and _counts(again.privacy) == {1: 1}
    again.close()
