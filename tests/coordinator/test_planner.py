"""Budget first (issue 23): the experiment keys of a planned run, the plan's arithmetic, and the offline
answer to "what does ε buy?"."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli import main as confar
from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError
from mechanisms.planning import ProposalStatistics, plan_mcmc
from mechanisms.privacy.conversions import gdp_eps, gdp_mu

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.toml"


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = DEMO.read_text()
    assert old in text
    p = tmp_path / "exp.toml"
    p.write_text(text.replace(old, new, 1).replace('"certs/', f'"{DEMO.parent}/certs/'))
    return p


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("\nmu = 1.0", "\n#", "warm_start.mu"),
        ("max_sensitivity = 0.6", "#", "sampler.max_sensitivity"),
        ("target_epsilon = 25.0", "target_epsilon = 25.0\nfoo = 1", "privacy"),
        ('proposal = "laplace"', 'proposal = "random-walk"\nproposal_scale = 0.01', "privacy.target_epsilon"),
        ('proposal = "laplace"', 'proposal = "random-walk"', "privacy.target_epsilon"),  # automatic proposal
        ("sd = 2.0", "sd = 2.0\ntau = 1.0", "sampler.tau"),
        ('neighbours = "add-remove"', 'neighbours = "swap"', "privacy.neighbours"),
        ("\nmu = 1.0", '\nmu = 1.0\ncurvature = "newton"', "warm_start.curvature"),
    ],
)
def test_a_planned_run_s_keys_are_checked(tmp_path: Path, old: str, new: str, key: str) -> None:
    with pytest.raises(ExperimentError, match=key.replace(".", r"\.")):
        load_experiment(_variant(tmp_path, old, new))


def test_warm_start_curvature_is_read_and_sets_the_schedule(tmp_path: Path) -> None:
    """Unset: the model's preference (logistic: secant steps); "fisher": a score release at every step."""
    from coordinator.warm_start import warm_start_plan

    for text, whats in (("", ["score", "gradient"]), ('\ncurvature = "fisher"', ["score"])):
        exp = load_experiment(_variant(tmp_path, "\nmu = 1.0", "\nmu = 1.0" + text))
        assert exp.warm_start is not None
        plan = warm_start_plan(exp.warm_start, exp.model(), exp.m)
        assert sorted({s.what for s in plan.schedule()}, reverse=True) == whats


def test_the_demo_is_a_planned_run() -> None:
    exp = load_experiment(DEMO)
    assert exp.budget_target is not None and exp.warm_start is not None
    assert exp.sampler.penalty is not None and exp.sampler.penalty.sd == pytest.approx(2.0 / math.sqrt(7))
    assert exp.warm_start.n_records == 100_000


def test_plan_spends_its_share_of_the_budget_and_counts_the_ess() -> None:
    stats = ProposalStatistics(
        mean_delta2=0.01, acceptance=0.3, asked=0.9, cap=0.5, c_quantile=0.999, ess_per_proposal=0.17
    )
    p = plan_mcmc(
        stats, sd_total=2.0, m=7, residual=7, chains=16, eps=10.0, delta=1e-5, mu_warm=0.3, margin=0.85
    )
    per = 0.9 * 0.01 * 7 / (4.0 * 7)  # E[μ_t²] per proposal
    want_k = int(0.85 * (gdp_mu(10.0, 1e-5) ** 2 - 0.09) / (16 * per))
    assert p.iterations == want_k
    assert p.mu_total == pytest.approx(math.sqrt(0.09 + 16 * want_k * per))
    assert p.eps == pytest.approx(gdp_eps(p.mu_total, 1e-5)) and p.eps < 10.0
    warm = max(want_k // 10, math.ceil(5.0 / 0.3))  # a tenth, at least ~5 acceptances: the chains' warm-up
    assert p.ess == pytest.approx(16 * (want_k - warm) * 0.17)
    # against a coalition, fewer registries' noise: the same budget buys fewer decisions
    q3 = plan_mcmc(stats, sd_total=2.0, m=7, residual=4, chains=16, eps=10.0, delta=1e-5, mu_warm=0.3)
    assert q3.iterations < p.iterations / 0.85 * 4 / 7 + 1


@pytest.mark.slow
def test_offline_plan_says_what_a_budget_buys(capsys: pytest.CaptureFixture[str]) -> None:
    rc = confar(["privacy", "plan", str(DEMO), "--epsilon", "3"])
    out = capsys.readouterr().out
    assert rc == 0, out  # the demo's own target buys min_ess
    lines = [line for line in out.splitlines() if line.strip().startswith("eps = ")]
    assert len(lines) == 2 and "usable" in lines[0] and "REFUSED" in lines[1]
    need = [
        float(line.split("needs eps = ")[1].split()[0]) for line in out.splitlines() if "needs eps" in line
    ]
    assert len(need) == 2 and need[0] < need[1] <= 25.0
    assert np.isfinite(need).all()


@pytest.mark.slow
def test_check_refuses_what_the_planned_run_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 item 5: --check makes the run's pilot plan (before, it passed a budget the run refused)."""
    assert confar(["run", str(_variant(tmp_path, "min_ess = 400", "min_ess = 5000")), "--check"]) == 2
    assert "below min_ess = 5000" in capsys.readouterr().err
    over = _variant(tmp_path, "party_epsilon = 25.0", "party_epsilon = 20.0")
    assert confar(["run", str(over), "--check", "--simulate"]) == 2
    assert "above the simulated registries' budget" in capsys.readouterr().err
    assert confar(["run", str(DEMO), "--check"]) == 0
    assert "plan from the pilot" in capsys.readouterr().out
