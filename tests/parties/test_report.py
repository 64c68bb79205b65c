"""``confar-party report`` (parties/report.py, issue 37) over the state folder of real daemons (in-process
gRPC servers with mTLS): the numbers on the page and in its JSON equal the ledger's (the registry's spend,
each run's and the study's by its accountant, the chart's last point), the approved study, the refused and
the aborted sessions with their reasons, a request's text escaped, nothing fetched from a network; and a
state folder with a torn journal line refused naming the file, with nothing written."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from coordinator.api import SessionError, SessionOptions
from parties.cli import main
from parties.config import load_config
from parties.governance import study_events
from parties.journal import JOURNAL_FILE, read_journal
from parties.privacy_budget import PrivacyBudgetStore
from parties.report import num
from proto.study import Study, file_text
from tests.parties.helpers import coordinator_for, inproc_consortium
from tests.parties.test_governance import BUDGET, M, _steps, approve
from tests.proto.test_study_document import study_doc


async def _history(root: Path) -> Study:
    """An approved study's two sessions (the second aborted), a refused session naming a study that is not
    approved, and a refused model whose name is markup."""
    doc = study_doc()
    study = Study.from_doc(doc)
    path = root / "study.json"
    path.write_text(file_text(doc))
    kw: dict[str, Any] = {"models": ("gaussian-mean",), "modes": ("sign",), "privacy_budget": BUDGET}
    async with inproc_consortium(root, M, require_approval=True, **kw) as (_daemons, eps, certs):
        async with coordinator_for(eps, certs) as coord:
            open_ = {
                "reveal_mode": "sign",
                "model": "gaussian-mean",
                "model_params": study.decision_plan,
                "t": 1,
            }
            for pid in (1, 2, 3):
                approve(root, pid, path, cap=40.0)
            sess = await coord.open_session(SessionOptions(**open_, study=study.text(), run_id="run-a"))
            await _steps(sess, study, 4, 2)
            await sess.close()
            sess = await coord.open_session(SessionOptions(**open_, study=study.text(), run_id="run-b"))
            await _steps(sess, study, 4, 1, seed=3)
            await sess.abort("operator stopped the run")
            other = Study.from_doc(study_doc(title="Another study"))
            with pytest.raises(SessionError, match="is not approved"):
                await coord.open_session(SessionOptions(**open_, study=other.text()))
            with pytest.raises(SessionError, match="is not allowed"):
                await coord.open_session(
                    SessionOptions(**{**open_, "model": "<b>evil</b>"}, study=study.text())
                )
    return study


def test_the_report_equals_the_ledger(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = asyncio.run(_history(tmp_path))
    cfg_path = tmp_path / "party-1" / "party.toml"
    out = tmp_path / "report.html"
    assert main(["report", "--config", str(cfg_path), "--out", str(out), "--json"]) == 0
    assert "2 runs, 1 studies, 2 refusals, 1 aborted sessions" in capsys.readouterr().out
    doc = json.loads(out.with_suffix(".json").read_text())
    page = out.read_text()

    cfg = load_config(cfg_path)
    store = PrivacyBudgetStore.load(cfg, read_journal(cfg.state_dir / JOURNAL_FILE, cfg.identity))
    assert store.ledger is not None and store.budget is not None
    spent = store.ledger.spent()
    assert doc["budget"]["spent"] == spent and doc["budget"]["limit"] == 50.0
    assert doc["chart"][-1]["spent"] == spent and len(doc["chart"]) == 2
    assert doc["chart"][0]["spent"] < spent
    runs = {r["run"]: r for r in doc["runs"]}
    for run_id, steps in (("run-a", 2), ("run-b", 1)):
        mine = [e for e in store.ledger.events if e.label.endswith(f"; run {run_id}")]
        assert runs[run_id]["epsilon"] == store.budget.spend(mine) and runs[run_id]["decisions"] == 4 * steps
        assert (
            runs[run_id]["study"] == study.digest
            and runs[run_id]["released"] == f"{4 * steps} accept bits (reveal sign)"
        )
    assert runs["run-b"]["last_close"] == "operator stopped the run"
    (s,) = doc["studies"]
    assert s["study"] == study.digest and s["max_epsilon"] == 40.0 and s["live"]
    assert s["spent_epsilon"] == store.budget.spend(study_events(store.ledger.events, study.digest)) == spent
    assert {r["outcome"] for r in doc["refusals"]} == {"PERMISSION_DENIED"} and len(doc["refusals"]) == 2
    assert doc["aborts"][0]["reason"] == "operator stopped the run"
    assert doc["snapshots"][0]["records"] == 40 and len(doc["snapshots"][0]["sha256"]) == 64

    # the page shows the same figures
    assert re.search(rf'id="card-spent".*?<b>{re.escape(num(spent))}</b>', page)
    assert page.count('class="point"') == 2 and f'data-spent="{num(spent)}"' in page
    assert len(re.findall(r"<tr>", page.split('id="runs"')[1].split("</table>")[0])) == 1 + 2
    assert num(runs["run-a"]["epsilon"]) in page and "operator stopped the run" in page
    assert "&lt;b&gt;evil&lt;/b&gt;" in page and "<b>evil" not in page  # a request's text is escaped
    assert not re.search(r"<script|<link|\bsrc=|@import|url\(|https?://", page)  # opens without a network


def test_a_torn_journal_line_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_history(tmp_path))
    cfg_path = tmp_path / "party-2" / "party.toml"
    state = load_config(cfg_path).state_dir
    with (state / JOURNAL_FILE).open("ab") as f:
        f.write(b'{"decisions":4,"seq":')  # a charge whose write never completed
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    out = tmp_path / "r.html"
    assert main(["report", "--config", str(cfg_path), "--out", str(out), "--json"]) == 1
    err = capsys.readouterr().err
    assert f"ledger journal {state / JOURNAL_FILE} ends in a torn line" in err and "nothing written" in err
    assert not out.exists() and not out.with_suffix(".json").exists()
    assert before == {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
