"""Resumable federated ABCDP runs, the party's records without a daemon: the run record keeps the SVT part of
a step and refuses a damaged one naming the file; the whole-run charge is run step 0 and never merged with
the run's steps. The runs over daemon processes are tests/network/test_resume_abcdp.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from parties.privacy_budget import merge_run_charge, run_step_counts
from parties.replay import ReplayFileError, ReplayStore, RunRecord, SvtStep, _checksum
from proto.records import RunCharge, RunStepRef


def test_run_record_keeps_the_svt_part_and_refuses_a_damaged_one(tmp_path: Path) -> None:
    bits = np.array([False, True] + [False] * 9)
    before: dict[str, int | bool] = {"count": 2, "epoch": 2, "n_decided": 17, "done": False}
    rec = RunRecord(
        RunStepRef("r-1", 4, b"d" * 32, b"e" * 16),
        bits.shape[0],
        7,
        ((7, np.arange(22, dtype=np.uint64)),),
        data_sha256="ab" * 32,
        svt=SvtStep(b"p" * 32, before, bits),
    )
    st = ReplayStore(tmp_path, "party-1")
    st.save(rec)
    got = st.load("r-1")
    assert got is not None and got.svt is not None and got.ref == rec.ref
    assert got.svt.plan_digest == b"p" * 32 and got.svt.before == before
    np.testing.assert_array_equal(got.svt.revealed, bits)
    assert st.path_for("r-1").stat().st_mode & 0o777 == 0o600
    doc = json.loads(st.path_for("r-1").read_text())
    for change, what in [
        (lambda d: d["svt"].pop("revealed"), "exactly plan_digest, before, revealed"),
        (lambda d: d["svt"]["before"].update(count=-1), "integers >= 0"),
        (lambda d: d["svt"]["before"].update(done=1), "done a bool"),
        (lambda d: d["svt"].update(revealed="AAAA"), "not the 2 of 11 bits"),
        (lambda d: d["svt"].update(revealed="AAg="), "bits past the batch"),
        (lambda d: d["svt"].update(plan_digest="ab"), "32 bytes"),
    ]:
        bad = json.loads(json.dumps(doc))
        change(bad)
        bad["checksum"] = _checksum({k: v for k, v in bad.items() if k != "checksum"})  # well-formed file
        st.path_for("r-1").write_text(json.dumps(bad))
        with pytest.raises(ReplayFileError, match=re.escape(str(st.path_for("r-1"))) + ".*" + what):
            st.load("r-1")


def test_whole_run_charge_is_run_step_zero_and_never_merged() -> None:
    whole = RunCharge("r", "aa", 0, 0, 0, "a" * 64, "b" * 32)
    assert whole.is_whole_run and RunCharge.from_dict(whole.to_dict()) == whole
    cs = merge_run_charge([whole], RunCharge("r", "aa", 1, 1, 4, "c" * 64, "b" * 32))
    assert len(cs) == 2 and run_step_counts(cs, "r") == {0: 1, 1: 1}
    assert merge_run_charge([RunCharge("r", "aa", 1, 1, 4)], RunCharge("r", "aa", 0, 0, 0))[-1].is_whole_run
    for bad in ({"to_step": 1}, {"decisions": 3}):
        with pytest.raises(ValueError, match="whole-run charge"):
            RunCharge.from_dict({**whole.to_dict(), **bad})
