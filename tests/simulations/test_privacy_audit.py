"""``confar privacy audit`` at a small size: every reveal mode of the penalty is consistent with the
registry's own claim, a deliberately broken mechanism (noise scaled by 1/4, claim unchanged) is flagged
VIOLATED with exit code 1, exact MH's sign reveal has no finite claim and its empirical lower bound grows
with the runs, colluders' and multi-step audits run, the warm start's releases (kind ``warm-start``) are
consistent and an under-noised one is VIOLATED, and a bad file is refused naming the key. Every audit
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


@pytest.mark.slow
@pytest.mark.parametrize("example", ["warm-start-moments", "warm-start-score"])
def test_warm_start_releases_are_consistent(tmp_path: Path, capsys: Capsys, example: str) -> None:
    """The warm start's moments release (coordinator) and score release (one colluder) at the noise
    ``confar run`` sets for their [warm_start]: no test beats the release's μ as registry 1 charges it."""
    rc, doc = _audit(tmp_path, example, capsys, runs=6000)
    assert rc == 0 and doc["verdict"].startswith("in memory: consistent")
    assert doc["mechanism"]["kind"] == "warm-start" and doc["mechanism"]["release"] in example
    res = doc["in_memory"]
    assert res["violated_by"] is None and 0 < res["empirical_eps_lower"] <= doc["claim"]["eps_at_delta"]
    assert ("1 colluding parties" in doc["threat"]) == example.endswith("score")


@pytest.mark.slow
def test_under_noised_warm_start_is_violated(tmp_path: Path, capsys: Capsys) -> None:
    rc, doc = _audit(tmp_path, "broken-warm-start", capsys, runs=6000)
    assert rc == 1 and "VIOLATED" in doc["verdict"] and doc["mechanism"]["noise_scale"] == 0.25
    assert doc["in_memory"]["violated_by"].startswith("score LLR")
    assert doc["in_memory"]["empirical_eps_lower"] > doc["claim"]["eps_at_delta"]


BAD_WARM_START = [  # (edits of broken-warm-start.toml, the message)
    ({'release = "score"': 'release = "hessian"'}, "mechanism.release: must be one of moments"),
    ({"mu = 1.0": "mu = -1.0"}, "warm_start.mu: must be > 0"),
    ({'release = "score"': 'release = "gradient"', "steps = 5": "steps = 2"}, "mechanism.release: only a"),
    ({"steps = 5": "step = 5"}, "warm_start.step: unknown key"),
    ({'name = "bayes-logistic"': 'name = "beta-bernoulli"'}, "model.name: kind 'warm-start' audits"),
    ({"theta = [-0.5, 0.3, -0.2]": "theta = [0.1]"}, "mechanism.theta: needs 3 numbers"),
    ({'reveal = "sum"': 'reveal = "sign"'}, "mechanism.reveal: must be sum"),
    ({"runs = 20000": "runs = 20000\nsteps = 4"}, "audit.steps: a warm-start audit observes one release"),
    ({"[warm_start]\nmu = 1.0\nsteps = 5": ""}, "warm_start: missing table"),
]


@pytest.mark.parametrize(("edits", "message"), BAD_WARM_START)
def test_bad_warm_start_file_is_refused_naming_the_key(
    tmp_path: Path, capsys: Capsys, edits: dict[str, str], message: str
) -> None:
    text = (EXAMPLES / "broken-warm-start.toml").read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new, 1)
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    assert main(["privacy", "audit", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
