"""The party's state files (issue 12, items 3 and 6): every file in state_dir is 0600, every save is durable
(the bytes and the rename are fsynced) through the one helper proto.files.write_durable, and every audit
line is bounded."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import SessionOptions
from parties.audit import MAX_LINE_BYTES, AuditLog, AuditSubject
from proto import files
from tests.parties.helpers import coordinator_for, gm_inputs, gm_params, inproc_consortium

BUDGET = {"gdp_mu": 5.0}
PARAMS = gm_params(1.0, (-4.0, 6.0), tau=2.0)


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*") if p.is_file()}


def test_every_state_file_is_0600_after_a_charged_run_step(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, under which a plain open() makes 0644 files
    try:

        async def main() -> None:
            async with (
                inproc_consortium(tmp_path, 3, insecure=True, privacy_budget=BUDGET) as (daemons, eps, _),
                coordinator_for(eps, None) as coord,
            ):
                s = await coord.open_session(SessionOptions(
                    reveal_mode="sum", model="gaussian-mean", model_params=PARAMS, run_id="run-a"
                ))
                await s.evaluate(gm_inputs(np.zeros(4), np.ones(4), PARAMS, 3), 4)
                await s.close()
            for d in daemons:
                modes = _modes(d.cfg.state_dir)
                assert {"ledger.json", "privacy_ledger.json", "audit.log"} <= set(modes), modes
                assert any(k.startswith("runs/") for k in modes), modes
                assert {k: v for k, v in modes.items() if v != 0o600} == {}

        asyncio.run(main())
    finally:
        os.umask(old)


def _fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the path of every descriptor os.fsync is called on (the real fsync still runs)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name the fsynced files")
def test_decision_ledger_save_is_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> list[str]:
        async with inproc_consortium(tmp_path, 3, insecure=True) as (daemons, _eps, _):
            d = daemons[0]
            seen = _fsynced_paths(monkeypatch)
            d.decisions_used = 17
            d._save_ledger()
            monkeypatch.undo()
            assert d._load_ledger() == 17
            state = str(d.cfg.state_dir.resolve())
            return [p.replace(state, "<state>") for p in seen]

    seen = asyncio.run(main())
    assert seen == ["<state>/ledger.json.tmp", "<state>"]  # the bytes, then the rename


def test_write_durable_replaces_a_stale_world_readable_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "ledger.json"
    stale = files.tmp_path_of(target)
    stale.write_text("left over by a crash")
    os.chmod(stale, 0o644)
    target.write_text("old")
    os.chmod(target, 0o644)
    files.write_durable(target, b'{"new": 1}')
    assert target.read_bytes() == b'{"new": 1}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not stale.exists()


def test_an_old_world_readable_ledger_is_tightened_at_start(tmp_path: Path) -> None:
    async def main() -> None:
        async with inproc_consortium(tmp_path, 3, insecure=True):
            pass
        ledger = tmp_path / "party-1" / "state" / "ledger.json"
        ledger.write_text('{"party": "party-1", "decisions_used": 5}')
        os.chmod(ledger, 0o644)
        async with inproc_consortium(tmp_path, 3, insecure=True) as (daemons, _eps, _):
            assert daemons[0].decisions_used == 5
            assert stat.S_IMODE(ledger.stat().st_mode) == 0o600

    asyncio.run(main())


def test_audit_lines_are_bounded_whatever_they_are_given(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log")
    big = "z" * (1 << 20)
    huge = AuditSubject(session=b"\x01" * (1 << 20))
    log.record(who=big, what="Evaluate", about=huge, detail=big, reason=big)
    log.record(who="coordinator", what="Status", listed=["x"] * 100_000)
    log.record(who="coordinator", what="Status", **{f"k{i}": "v" * 400 for i in range(200)})
    log.close()
    lines = (tmp_path / "audit.log").read_text().splitlines()
    assert len(lines) == 3 and max(len(x.encode()) for x in lines) <= MAX_LINE_BYTES
    first, second, third = (json.loads(x) for x in lines)
    assert first["session"].startswith("01" * 64) and first["session"].endswith("(1048576 bytes)")
    assert first["detail"].endswith("(1048576 chars)") and first["who"].endswith("(1048576 chars)")
    assert len(second["listed"]) == 65 and second["listed"][-1] == "… (100000 items)"
    assert third["cut"] is True and "k0" not in third and third["what"] == "Status"


def test_audit_line_scalars_kept_and_nested_values_bounded(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.log")
    nested = {"a": ["y" * 1000, 7, None, 2.5, True], "b": b"\x02" * 3}
    subject = AuditSubject(step=3, decisions=16)
    log.record(who="c", what="Evaluate", about=subject, handler_ms=1.5, replayed=False, nested=nested)
    log.close()
    (line,) = (json.loads(x) for x in (tmp_path / "audit.log").read_text().splitlines())
    assert (line["step"], line["decisions"], line["handler_ms"], line["replayed"]) == (3, 16, 1.5, False)
    assert line["analysis"] is None and line["nested"]["b"] == "020202"
    assert line["nested"]["a"][0].endswith("(1000 chars)") and line["nested"]["a"][1:] == [7, None, 2.5, True]


def test_audit_lines_have_microseconds_from_one_clock_reading(tmp_path: Path) -> None:
    """Lines written within the same second kept their order only to the millisecond, and the fraction came
    from a second clock reading (so 12:00:00.999 could be followed by 12:00:00.001)."""
    log = AuditLog(tmp_path / "audit.log")
    for i in range(50):
        log.record(who="coordinator", what="Test", about=AuditSubject(step=i))
    times = [json.loads(line)["time"] for line in (tmp_path / "audit.log").read_text().splitlines()]
    assert all(len(t) == len("2026-01-01T00:00:00.000000Z") for t in times)
    assert times == sorted(times)


def test_a_subject_field_given_as_an_extra_key_is_refused(tmp_path: Path) -> None:
    """session/step/analysis/reveal_mode/decisions belong in ``about``: as extra keys they would overwrite the
    line's own columns (the session id as raw bytes, not its bounded hex), so they are refused by name."""
    log = AuditLog(tmp_path / "audit.log")
    with pytest.raises(TypeError, match=r"\['session', 'step'\] go in about=AuditSubject"):
        log.record(who="c", what="Evaluate", session=b"\x01", step=3)
    assert (tmp_path / "audit.log").read_text() == ""
