"""A planned run over real registry daemons (processes, mTLS): the DP warm start, the budget-first plan, the
independence penalty MH charged per decision, and a resume that neither releases nor charges again.

Checks: each registry's ledger holds the warm start's releases once and its spend stays within its budget and
near the plan; the posterior means agree with a converged plain reference of the clipped pooled records
(z-scores from the MCSEs); a run stopped mid-way and resumed spends exactly what an uninterrupted one would
(the warm start is read from warm_start.json; the stopped batch is replayed by the registries)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coordinator.checkpoint import StopRequested
from coordinator.experiment import load_experiment
from parties.privacy_budget import run_step_counts
from proto.records import RunCharge
from simulations.run_local import simulate_experiment

pytestmark = pytest.mark.slow

EXPERIMENT = """
[experiment]
name = "planned"
output_dir = "out"
seed = 5

[model]
name = "bayes-logistic"
[model.params]
p = 2

[warm_start]
mu = 0.5
inflate = 1.1

[sampler]
kind = "penalty"
chains = 8
iterations = 400
proposal = "laplace"
sd = 2.0
max_sensitivity = 1.0

[privacy]
target_epsilon = 25.0
delta = 1e-5
min_ess = 60

[reveal]
mode = "sign"

[output]
formats = ["summary", "privacy", "provenance"]

[simulate]
parties = 3
records = [5000, 3000, 4000]
fixed_noise_keys = true
party_epsilon = 25.0
party_delta = 1e-5
party_neighbours = "add-remove"
party_colluding = 0
"""


def _ledger_events(out: Path, pid: int) -> list[dict[str, object]]:
    doc = json.loads((out / "simulation" / f"party-{pid}" / "state" / "privacy_ledger.json").read_text())
    return list(doc["ledger"]["events"])


def test_planned_run_spends_within_budget_matches_the_reference_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "exp.toml"
    path.write_text(EXPERIMENT)
    exp = load_experiment(path)
    logs: list[str] = []
    with pytest.raises(StopRequested):
        simulate_experiment(exp, tmp_path / "a", stop_after_batches=7, log=logs.append)
    # charged per decision: the dry run's projection at the cap is an upper bound, not a refusal
    dry = logs[next(i for i, line in enumerate(logs) if line.startswith("privacy dry run")) :]
    assert "accept the session" in "\n".join(dry[:2]) and not any("WOULD REFUSE" in line for line in logs)
    warm = json.loads((tmp_path / "a" / "warm_start.json").read_text())
    assert warm["run_steps"] == 6  # moments, score, 3 x gradient, score
    out = simulate_experiment(exp, tmp_path / "a", resume=True, log=logs.append)
    assert not any(
        "warm start: run step" in line
        for line in logs[logs.index(next(line for line in logs if line.startswith("plan from the DP"))) + 1 :]
    ), "the resumed run must not release the warm start again"
    # every run step (warm-start releases and MCMC batches) charged exactly once, the stopped one included
    for pid in (1, 2, 3):
        doc = json.loads(
            (tmp_path / "a" / "simulation" / f"party-{pid}" / "state" / "privacy_ledger.json").read_text()
        )
        charges = [RunCharge.from_dict(c) for c in doc["run_charges"]]
        counts = run_step_counts(charges, out.run_id)
        assert sorted(counts) == list(range(1, out.run_steps + 1)) and set(counts.values()) == {1}
        events = _ledger_events(tmp_path / "a", pid)
        assert sum(int(e.get("count", 1)) for e in events if "warm start" in str(e.get("label"))) == 6
    for r in out.privacy_reports.values():
        assert not isinstance(r, str)
        assert r.budget.spent <= 25.0 * (1 + 1e-9)
    summary = (tmp_path / "a" / "summary.txt").read_text()
    assert "converged reference" in summary
    rows = [line.split() for line in summary.splitlines() if line.startswith(("intercept ", "b1 ", "b2 "))][
        :3
    ]
    assert [r[0] for r in rows] == ["intercept", "b1", "b2"]
    z = [abs(float(r[-1])) for r in rows]
    assert max(z) < 4.0, summary  # 3 parameters, |z| < 4: a false failure about 2e-4 of the time
    assert out.draws.shape[0] == 8
    # the proposal was refitted to the warm-up's states (the default with proposal = "laplace") and frozen
    assert any(n.startswith("the independence proposal was refitted") for n in out.notes), out.notes
    # and whether exactness paid for its epsilon, with both errors (issue 35)
    assert any(n.startswith(("exactness pays here: ", "exactness does NOT pay here: ")) for n in out.notes)
    assert not any("re-plans this run's ESS" in w for w in out.warnings), out.warnings


WEIBULL = (
    EXPERIMENT.replace('name = "planned"', 'name = "planned-weibull"')
    .replace(
        'name = "bayes-logistic"\n[model.params]\np = 2',
        'name = "weibull-regression"\n[model.params]\np = 2\nt_max = 3.0',
    )
    .replace("mu = 0.5", "mu = 4.0")
    # the proposal refitted in the warm-up (the default): 50 iterations of 8 chains, about 30 distinct states
    # in the last refit's pool, which the refit's shrinkage weighs (bulk ESS 483-558 measured; 152-173 when
    # the refit took the pool's mean and covariance as they were, 492-611 unrefitted)
    .replace("max_sensitivity = 1.0", "max_sensitivity = 12.0")
    .replace("target_epsilon = 25.0", "target_epsilon = 3000.0")
    .replace("party_epsilon = 25.0", "party_epsilon = 3000.0")
)


def test_planned_weibull_run_over_daemons_clips_scores_at_the_model_bound(tmp_path: Path) -> None:
    """Weibull regression with censoring over real daemons: each registry clips the warm start's scores at the
    model's public score-norm bound at the release's theta (WeibullRegression.score_norm_bound), with a fresh
    Fisher at every step (its default curvature), and the run lands on the converged reference."""
    assert "weibull-regression" in WEIBULL and "mu = 4.0" in WEIBULL
    path = tmp_path / "exp.toml"
    path.write_text(WEIBULL)
    exp = load_experiment(path)
    logs: list[str] = []
    out = simulate_experiment(exp, tmp_path / "w", log=logs.append)
    warm = json.loads((tmp_path / "w" / "warm_start.json").read_text())
    assert warm["run_steps"] == 6  # moments and five score releases (curvature "fisher": no gradient steps)
    assert sum("score release" in line for line in logs) == 5, logs
    for pid in (1, 2, 3):
        events = _ledger_events(tmp_path / "w", pid)
        assert sum(int(e.get("count", 1)) for e in events if "warm start" in str(e.get("label"))) == 6
    for r in out.privacy_reports.values():
        assert not isinstance(r, str)
        assert r.budget.spent <= 3000.0 * (1 + 1e-9)
    # no warning but the convergence diagnostics' (an ESS below 100 in a run of this length is a matter of
    # the chains, not of this test's subject; the z-scores below carry the chains' own Monte Carlo error)
    assert all(w.startswith(("bulk ESS", "tail ESS")) for w in out.warnings), out.warnings
    summary = (tmp_path / "w" / "summary.txt").read_text()
    names = ("log_shape ", "intercept ", "b1 ", "b2 ")
    rows = [line.split() for line in summary.splitlines() if line.startswith(names)][:4]
    assert [r[0] for r in rows] == ["log_shape", "intercept", "b1", "b2"], summary
    z = [abs(float(r[-1])) for r in rows]
    assert max(z) < 4.0, summary  # 4 parameters, |z| < 4: a false failure about 2.5e-4 of the time


RENYI = (
    EXPERIMENT.replace('name = "planned"', 'name = "planned-renyi"')
    .replace("min_ess = 60", 'min_ess = 60\naccountant = "renyi"')
    .replace("party_colluding = 0", 'party_colluding = 0\nparty_accountant = "renyi"')
    .replace('proposal = "laplace"', 'proposal = "laplace"\nrefit = false')  # the DP proposal throughout
)


def _renyi_eps_by_hand(events: list[dict[str, object]], alpha: float, delta: float) -> float:
    """Sum of rho at ``alpha`` over the ledger's events (a Renyi event's carried rho, capped by the Gaussian;
    alpha mu^2 / 2 for the warm start's Gaussian releases), converted as rdp_eps does: written out here."""
    total = 0.0
    for e in events:
        mu, count = float(e["mu"]), int(e.get("count", 1))  # type: ignore[arg-type]
        rho = alpha * mu * mu / 2
        if e["type"] == "renyi":
            k = [abs(float(a) - alpha) < 1e-12 for a in e["orders"]].index(True)  # type: ignore[union-attr]
            rho = min(float(e["rho"][k]), rho)  # type: ignore[index]
        total += count * rho
    return total + math.log((alpha - 1) / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1)


def test_planned_run_under_the_registries_renyi_filter(tmp_path: Path) -> None:
    """[privacy] accountant = "renyi" with registries whose [budget] accountant is "renyi": the plan prices
    each accept bit at the registries' order, every registry's ledger charges the bits Renyi events, its
    reported spend equals the filter's reading recomputed by hand from its ledger (and stays within the
    budget, below the GDP reading of the same events), and the run lands on the converged reference."""
    path = tmp_path / "exp.toml"
    path.write_text(RENYI)
    exp = load_experiment(path)
    logs: list[str] = []
    out = simulate_experiment(exp, tmp_path / "r", log=logs.append)
    plan = next(line for line in logs if line.startswith("plan from the DP"))
    assert "Renyi order" in plan and "Renyi filter" in plan, plan
    for pid in (1, 2, 3):
        report = out.privacy_reports[pid]
        assert not isinstance(report, str)
        budget = json.loads(report.budget.budget_json)
        assert budget["type"] == "renyi"
        events = json.loads(report.events_json)  # the registry's ledger, as it reports it
        assert any(e["type"] == "renyi" for e in events)
        by_hand = _renyi_eps_by_hand(events, float(budget["alpha"]), float(budget["delta"]))
        assert report.budget.spent == pytest.approx(by_hand, rel=1e-9)
        assert report.budget.spent <= 25.0 * (1 + 1e-9)
        doc = json.loads((tmp_path / "r" / "privacy" / f"party-{pid}.json").read_text())
        statement, eps = doc["statement"], report.budget.spent
        assert statement.startswith(f"epsilon = {eps:.4g} at delta = 1e-05 by its Renyi filter"), statement
        view = ", add-remove neighbours, against the coordinator (q = 0: no registry assumed to collude); "
        assert view in statement, statement
        # beside it, labelled: the GDP reading of the same charges, and the run's in the other views
        readings = doc["other_readings"]
        assert readings[0] == f"this run: {out.counts['decisions_asked']} of the decisions made with its data"
        assert readings[1].startswith("GDP reading of the same charges: epsilon = "), readings
        assert any("the coordinator and q = 1 colluding registries: epsilon = " in r for r in readings)
        assert any("for replace-one neighbours: epsilon = " in r for r in readings)
        here = json.loads((tmp_path / "r" / "privacy" / f"party-{pid}.json").read_text())["recomputed_here"]
        assert here["renyi_eps_at_delta"] == pytest.approx(
            by_hand, rel=1e-9
        )  # the coordinator's recomposition
        gdp_eps = here["eps_at_delta"]
        assert report.budget.spent < gdp_eps  # the bits' Renyi bound pays for the looser conversion here
    summary = (tmp_path / "r" / "summary.txt").read_text()
    rows = [line.split() for line in summary.splitlines() if line.startswith(("intercept ", "b1 ", "b2 "))][
        :3
    ]
    z = [abs(float(r[-1])) for r in rows]
    assert len(z) == 3 and max(z) < 4.0, summary
    # refit = false: the DP proposal throughout, and the warm-up's accept bits re-plan the ESS (the pilot)
    assert any(n.startswith("the plan against the run") for n in out.notes), out.notes
    assert not any(n.startswith("the independence proposal was refitted") for n in out.notes), out.notes


PER_RUN = (
    EXPERIMENT.replace('name = "planned"', 'name = "planned-per-run"')
    .replace("iterations = 400", "iterations = 3000")  # at most: the plan sets the length
    .replace("target_epsilon = 25.0", "target_epsilon = 16.0")
    .replace("party_epsilon = 25.0", "party_epsilon = 16.0")
    # min_ess 50: the pilot buys an expected ESS of 59 at this target since the refit narrows only beyond its
    # pool's noise (the simulated runs keep the proposal's width and are charged a little more)
    .replace("min_ess = 60", 'min_ess = 50\nper_run = "worst-record"')
    .replace("party_colluding = 0", 'party_colluding = 0\nparty_per_run = "worst-record"')
)


def test_planned_run_charged_per_run_spends_what_the_plan_predicts(tmp_path: Path) -> None:
    """Registries charging per run at the worst record ([budget] per_run = "worst-record") and a plan priced
    the same way ([privacy] per_run): the plan buys more decisions than the per-decision plan of the same
    target from the same DP approximation, the run is not stopped, every registry's ledger charges the
    decisions per run and stays within its budget, and that charge is at most 25 % above the plan's prediction
    at the run's length and at least half of it. The prediction is the registries' own charge of runs
    simulated on the DP approximation, priced at their largest and mean + 2 sd; the real run's posterior sits
    at the approximation's realised error (here 1.3 of its sds, where the DP noise explains 0.8) with its own
    covariance, so the plan is a prediction of about the real run's mean, not a bound on it: this run replayed
    in memory over 6 secret-noise seeds charged 0.95-1.06 of the plan (mu^2 6.86 +- 0.27 against 6.93), the
    plan's simulated runs at the real posterior's mode and covariance 6.89 +- 0.27 (issue 35 item 2;
    docs/PRIVACY_UTILITY.md, "Why the per-run plan and the ledgers differ"). The whole test over the daemons,
    12 runs on 2026-11-30, charged 0.60-0.97 of the plan, mean 0.84: below the replays, so the plan now
    over-predicts the real run (a utility question, noted on issue 38; the comment at the bound says why the
    bound is asymmetric)."""
    import dataclasses

    from coordinator import planner
    from coordinator import warm_start as warm

    path = tmp_path / "exp.toml"
    path.write_text(PER_RUN)
    exp = load_experiment(path)
    assert exp.budget_target is not None and exp.budget_target.per_run == "worst-record"
    logs: list[str] = []
    out = simulate_experiment(exp, tmp_path / "w", log=logs.append)
    plan_line = next(line for line in logs if line.startswith("plan from the DP"))
    assert "charged per run at the worst record" in plan_line, plan_line
    dry = "\n".join(logs[next(i for i, line in enumerate(logs) if line.startswith("privacy dry run")) :][:2])
    assert "charge each batch the increase of the run's worst-record bound" in dry, dry
    # the plan as the run made it (public seeds, fixed noise keys: the same warm start and simulations)
    ran = warm.after_warm_start(exp, warm.load_result(tmp_path / "w"))
    p = planner.plan(ran, ran.model(), ran.sampler.laplace)
    per_decision = dataclasses.replace(
        ran, budget_target=dataclasses.replace(ran.budget_target, per_run="per-decision")
    )
    q = planner.plan(per_decision, per_decision.model(), ran.sampler.laplace)
    assert q.stats.run_charge is None and q.eps <= 16.0
    assert p.iterations > 1.3 * q.iterations and p.eps <= 16.0  # measured 150 vs 99
    length = planner.planned_experiment(ran, p).sampler.iterations
    assert length == p.iterations and out.finished and not out.stopped, out.stopped
    assert 0 < out.counts["decisions_asked"] <= 8 * length, out.counts
    predicted = p.decisions_charge(length)
    for pid in (1, 2, 3):
        report = out.privacy_reports[pid]
        assert not isinstance(report, str)
        assert report.budget.spent <= 16.0 * (1 + 1e-9)
        events = json.loads(report.events_json)
        runs = [e for e in events if "worst record over the run" in str(e.get("label"))]
        assert runs and all(e["type"] == "gaussian" for e in runs), events
        charged = sum(int(e.get("count", 1)) * float(e["mu"]) ** 2 for e in runs)
        # at most 25 % above the plan (the side the registries' budgets depend on: a plan that under-predicts
        # buys a run its ledgers stop) and not below half of it. Measured 2026-11-30 over 12 runs of this
        # test (each with its own secret DP noise in the warm start): charged / predicted 0.60-0.97, mean
        # 0.84 (sd 0.10; without the 0.60: 0.77-0.97, mean 0.86, sd 0.06). The 0.60 (4.17 against 6.94) is
        # the narrow frozen proposal the unshrunk refit once gave (4.76): the shrunk refit makes it rarer,
        # not impossible. The earlier lower bound of 0.75 failed that run; 0.5 is a guess below it, not a
        # quantile (the noise is secret, so a failure rate cannot be pinned down from 12 runs).
        assert 0.5 * predicted <= charged <= 1.25 * predicted, (charged, predicted)


def test_planned_formula_run_over_daemons(tmp_path: Path) -> None:
    """A formula study (``died ~ age + C(sex) + biomarker``, sex as text labels, age in years) planned from
    its design dataset over three registry daemons reading CSV files: the warm start's score releases are
    made in the pilot's basis at the model's exact bound (a score release at every step), the plan chooses
    the cap, every registry's spend is finite and within the target, and the posterior lands on the
    converged reference (issue 40 item 2; before, the plan refused: no synthetic_data)."""
    from tests.coordinator.test_formula_budget import write_study

    exp = load_experiment(write_study(tmp_path))
    logs: list[str] = []
    out = simulate_experiment(exp, tmp_path / "f", log=logs.append)
    assert any(line.startswith("plan from the pilot (a design dataset") for line in logs), logs
    warm = json.loads((tmp_path / "f" / "warm_start.json").read_text())
    assert warm["run_steps"] == 5 and sum("score release" in line for line in logs) == 5, logs
    for pid in (1, 2, 3):
        events = _ledger_events(tmp_path / "f", pid)
        assert sum(int(e.get("count", 1)) for e in events if "warm start" in str(e.get("label"))) == 5
        r = out.privacy_reports[pid]
        assert not isinstance(r, str)
        assert 0.0 < r.budget.spent <= 60.0 * (1 + 1e-9)
    names = ("Intercept ", "age ", "sex[M] ", "biomarker ")
    summary = (tmp_path / "f" / "summary.txt").read_text()
    rows = [line.split() for line in summary.splitlines() if line.startswith(names)][:4]
    assert [r[0] for r in rows] == [n.strip() for n in names], summary
    z = [abs(float(r[-1])) for r in rows]
    assert max(z) < 4.0, summary  # 4 parameters, |z| < 4: a false failure about 2.5e-4 of the time
    assert (tmp_path / "f" / "provenance.json").is_file() and out.draws.shape[0] == 4
