"""The custodian's report in a real browser (issue 37): ``confar run --simulate`` of a study whose run stops
at the registries' privacy budgets (one Evaluate refused, the session then aborted by the coordinator),
``confar-party report`` for each registry, and the page opened in headless Chromium (Debian's ``chromium``,
installed by ``.ci/run``; driven by Playwright from PyPI with that executable, never a downloaded browser):
the run rows, the budget chart and the refusal table are checked against the registry's ledger, and a
screenshot is saved under the test's temporary folder. Without a browser or Playwright the test is skipped
with the reason, never passed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: the flags that work in CI and on a shared machine: no sandbox (root), no GPU, no network side channels
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

EXPERIMENT = """
[experiment]
name = "custodian-report"
output_dir = "out"
seed = 11

[model]
name = "bayes-logistic"
[model.params]
p = 2

[warm_start]
mu = 0.5
inflate = 1.1

[sampler]
kind = "penalty"
chains = 4
iterations = 60
warmup = 30
proposal = "laplace"
sd = 2.0
max_sensitivity = 1.0

[reveal]
mode = "sign"

[privacy]
epsilon = 400.0
delta = 1e-6
stop_at_budget = true

[output]
formats = ["summary", "privacy"]

[simulate]
parties = 3
records = [600, 400, 500]
party_epsilon = 17.0  # a full run charges ~28.5 since the replace-one range (59.5 before): 17 stops it midway
party_delta = 1e-6

[study]
title = "Mortality after diagnosis (demo)"
reference = "AC-2026-017"
expires = "2027-06-30"
"""


def _browser() -> str:
    """The system Chromium, or skip saying why (the reason is printed in pytest's summary)."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("no Chromium on this machine (Debian package 'chromium'; .ci/run installs it as root)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed (pip install -e '.[test]')")
    return exe


def test_the_report_in_a_browser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exe = _browser()
    from playwright.sync_api import sync_playwright

    from coordinator.cli import main as confar
    from parties.cli import main as confar_party
    from parties.config import load_config
    from parties.journal import JOURNAL_FILE, read_journal
    from parties.privacy_budget import PrivacyBudgetStore
    from parties.report import num

    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    assert confar(["run", str(exp), "--simulate", "--no-progress"]) == 3  # stopped at the budgets
    assert "STOPPED EARLY" in capsys.readouterr().err
    sim = tmp_path / "out" / "simulation"
    pages = {}
    for pid in (1, 2, 3):  # the page of each registry
        cfg = sim / f"party-{pid}" / "party.toml"
        out = tmp_path / f"report-{pid}.html"
        assert confar_party(["report", "--config", str(cfg), "--out", str(out), "--json"]) == 0
        pages[pid] = out
    # the registry whose budget refused the step (equal budgets, but once one refuses the coordinator aborts
    # the session, so another may never be asked: the full suite once saw party 2 without a refusal)
    docs = {pid: json.loads(pages[pid].with_suffix(".json").read_text()) for pid in pages}
    exhausted = {p for p, d in docs.items() for r in d["refusals"] if r["outcome"] == "RESOURCE_EXHAUSTED"}
    refusing = sorted(exhausted)
    assert refusing, "no registry's report shows the refusal"
    pid = refusing[0]
    doc = docs[pid]
    cfg = load_config(sim / f"party-{pid}" / "party.toml")
    store = PrivacyBudgetStore.load(cfg, read_journal(cfg.state_dir / JOURNAL_FILE, cfg.identity))
    assert store.ledger is not None
    spent = store.ledger.spent()
    assert doc["budget"]["spent"] == spent and doc["chart"][-1]["spent"] == spent
    assert len(doc["aborts"]) == 1 and len(doc["runs"]) == 1
    assert [x["what"] for x in doc["refusals"] if x["outcome"] == "RESOURCE_EXHAUSTED"] == ["Evaluate"]

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(pages[pid].resolve().as_uri())
            assert page.title() == f"party-{pid}: registry report"
            # the run rows
            rows = page.locator("#runs tbody tr")
            assert rows.count() == 1
            cells = rows.nth(0).locator("td")
            assert cells.nth(0).locator("span").get_attribute("title") == doc["runs"][0]["run"]
            assert cells.nth(7).inner_text() == num(doc["runs"][0]["epsilon"])
            assert "accept bits (reveal sign)" in cells.nth(9).inner_text()
            # the budget chart: one point per session, the last at the ledger's spend, the limit drawn
            chart = page.locator("#budget-chart")
            box = chart.bounding_box()
            assert box is not None and box["width"] > 400 and box["height"] > 200
            points = chart.locator("circle.point")
            assert points.count() == len(doc["chart"]) >= 2
            assert points.last.get_attribute("data-spent") == num(spent)
            assert chart.locator("#budget-limit").get_attribute("data-limit") == num(cfg.epsilon)
            assert page.locator("#card-spent b").inner_text() == num(spent)
            # the refusal and the abort, with their reasons
            refused = page.locator("#refusals tbody tr")
            assert refused.count() == len(doc["refusals"])
            evaluate = page.locator("#refusals tbody tr", has_text="RESOURCE_EXHAUSTED")
            assert evaluate.count() == 1  # the step its budget refused
            assert "would exceed this party's privacy budget" in evaluate.nth(0).inner_text()
            assert (
                "a registry's privacy budget ran out" in page.locator("#aborts tbody tr").nth(0).inner_text()
            )
            assert page.locator("#threat-model").inner_text().startswith("What leaves this registry")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")
