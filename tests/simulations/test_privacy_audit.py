"""``confar privacy audit`` at a small size: every reveal mode of the penalty is consistent with the
registry's own claim, a deliberately broken mechanism (noise scaled by 1/4, claim unchanged) is flagged
VIOLATED with exit code 1, exact MH's sign reveal has no finite claim and its empirical lower bound grows
with the runs, colluders' and multi-step audits run, and a bad file is refused naming the key. Every audit
here runs ``--no-daemons``; the confirmation over daemon processes is tests/network/test_privacy_audit.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coordinator.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "audit"


Capsys = pytest.CaptureFixture[str]


def _audit(tmp_path: Path, example: str, capsys: Capsys, **overrides: object) -> tuple[int, dict]:
    text = (EXAMPLES / f"{example}.toml").read_text()
    for key, value in overrides.items():
        pattern = rf"(?m)^{key}\s*=.*$"
        line = f"{key} = {value}"
        if re.search(pattern, text):
            text = re.sub(pattern, line, text)
        else:
            text = text.replace("[audit]\n", f"[audit]\n{line}\n")
    cfg = tmp_path / f"{example}.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    rc = main(["privacy", "audit", str(cfg), "--out", str(out), "--no-daemons"])
    printed = capsys.readouterr().out
    name = re.search(r'(?m)^name = "([^"]+)"', text)
    assert name is not None
    doc = json.loads((out / f"{name.group(1)}.json").read_text())
    assert doc["verdict"] in printed and (out / f"{name.group(1)}.png").is_file()
    return rc, doc


@pytest.mark.parametrize(
    "example", ["penalty-sum", "penalty-blinded", "penalty-sign", "lazy-sign", "penalty-sd-sign"]
)
def test_real_mechanisms_are_consistent(tmp_path: Path, capsys: Capsys, example: str) -> None:
    rc, doc = _audit(tmp_path, example, capsys, runs=3000)
    assert rc == 0 and doc["verdict"].startswith("in memory: consistent")
    res = doc["in_memory"]
    assert res["runs_per_dataset"] == 3000 and res["violated_by"] is None
    assert res["empirical_eps_lower"] <= doc["claim"]["eps_at_delta"]
    assert doc["audit_sampling"]["noise"].startswith("OS CSPRNG") and doc["audit_sampling"]["seed"] > 0
    assert doc["neighbours"]["log_r_D"] < doc["neighbours"]["log_r_D_prime"]


@pytest.mark.parametrize("example", ["penalty-sum", "penalty-sd-sign"])
def test_broken_noise_is_violated(tmp_path: Path, capsys: pytest.CaptureFixture[str], example: str) -> None:
    """A quarter of the noise, the claim unchanged: the sum reveal's test finds it (the per-decision charge
    of a fixed-sd penalty included: its claim is the step's own sensitivity, examples/audit/broken-*)."""
    rc, doc = _audit(tmp_path, example, capsys, runs=20000, noise_scale=0.25, reveal='"sum"')
    assert rc == 1 and "VIOLATED" in doc["verdict"]
    assert doc["in_memory"]["violated_by"].startswith("sum")
    assert doc["in_memory"]["empirical_eps_lower"] > doc["claim"]["eps_at_delta"]


@pytest.mark.slow
def test_exact_mh_sign_has_no_claim_and_a_growing_lower_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lows = []
    for runs in (500, 50000):
        rc, doc = _audit(tmp_path, "mh-sign", capsys, runs=runs)
        assert rc == 0 and "NO FINITE CLAIM" in doc["verdict"] and doc["claim"]["eps_at_delta"] is None
        lows.append(doc["in_memory"]["empirical_eps_lower"])
    assert lows[1] > lows[0] + 2.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "example", ["penalty-sign-colluder", "penalty-sum-colluder", "penalty-sign-20-steps"]
)
def test_colluders_and_transcripts(tmp_path: Path, capsys: Capsys, example: str) -> None:
    rc, doc = _audit(tmp_path, example, capsys, runs=2000)
    assert rc == 0 and doc["verdict"].startswith("in memory: consistent")
    if "colluder" in example:
        assert "1 colluding parties" in doc["threat"]


def test_bad_file_is_refused_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.toml"
    base = (EXAMPLES / "penalty-sign.toml").read_text()
    cfg.write_text(base.replace("[threat]", "[threat]\ncolluders = 1"))
    assert main(["privacy", "audit", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "threat.colluders: unknown key" in capsys.readouterr().err
    cfg.write_text((EXAMPLES / "penalty-sign.toml").read_text().replace("runs = 50000", "runs = 5"))
    assert main(["privacy", "audit", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "audit.runs: must be in 100..10000000" in capsys.readouterr().err


@pytest.mark.slow
def test_abcdp_svt_audit(tmp_path: Path, capsys: Capsys) -> None:
    """Federated ABCDP per run: consistent with eps_total; with the Laplace noise scaled by 1/8 (the claim
    unchanged) the audit says VIOLATED."""
    rc, doc = _audit(tmp_path, "abcdp-svt", capsys, runs=4000, protocol_runs=60)
    assert rc == 0 and "specification: consistent" in doc["verdict"]
    assert "SVT protocol: consistent" in doc["verdict"]
    assert doc["neighbours"]["distance_shift"] <= doc["neighbours"]["sensitivity_bound"] + 1e-12
    rc, doc = _audit(tmp_path, "abcdp-svt", capsys, runs=4000, protocol_runs=0, noise_scale=0.125)
    assert rc == 1 and "VIOLATED" in doc["verdict"]
