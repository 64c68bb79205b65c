"""A plan for registries that charge per run at the worst record (issue 35, ``[budget] per_run =
"worst-record"``): the simulated chains are charged as the registries charge them (one batch per iteration,
the ledger's own increments and events), so on the same proposals the plan's figure is the registries' charge,
never below it; the plan reads the charge of K decisions off that curve (not K times a charge per decision),
never past the simulated run, and never states a spend above its target."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mechanisms.models import load_model
from mechanisms.planning import (
    Accounting,
    ChainSettings,
    PlanBudget,
    ProposalStatistics,
    RunCharge,
    StandIn,
    plan_mcmc,
    proposal_statistics,
    replan_after_pilot,
)
from mechanisms.privacy import GaussianEvent, PenaltyAcceptance, bit_rdp_table
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from mechanisms.privacy.ledger import RDPBudget
from mechanisms.privacy.renyi import rdp_eps
from mechanisms.privacy.worst_record import WorstRecordCharge, linear_structure
from mechanisms.samplers.requests import step_sensitivity
from simulations.worst_record import ARGS

MODEL = load_model("bayes-logistic", ARGS)  # intercept + 2 covariates, box and covariate ellipsoid
MEAN = np.array([-0.5, 0.8, -0.3])
COV = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]]) * 1e-3
S, CHAINS, CAP, INFLATE = 1.0, 8, 1.0, 1.1
STRUCTURE = linear_structure(MODEL)
assert STRUCTURE is not None
ALPHA = 4.0


def _curve(
    steps: int, seed: int, wr: WorstRecordCharge, table: object = None, record: list | None = None
) -> ProposalStatistics:
    run = ChainSettings(chains=CHAINS, steps=steps, cap=CAP)
    return proposal_statistics(
        StandIn(MODEL, MEAN, COV, INFLATE, S), np.random.default_rng(seed), run, worst_record=wr,
        rdp_table=table, record=record,  # type: ignore[arg-type]
    )  # fmt: skip


def _ledger(wr: WorstRecordCharge, record: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The registries' charge of the recorded proposals, after each iteration: one batch per iteration (as
    the driver asks them), each batch's Δ_t by ``step_sensitivity`` (``charge.worst_record_events``'s) and its
    events from ``WorstRecordCharge.increment``, read by the registry's accountant (a GDP filter: Σ μ²; a
    Rényi filter: ``RDPBudget.rho`` at its order)."""
    state, out, total = wr.empty(), [], 0.0
    for th, ts in record:
        if th.shape[0]:
            deltas = step_sensitivity(MODEL, th, ts, "add-remove")
            events, state = wr.increment(state, th, ts, deltas, "ledger")
            if wr.table is None:
                total += sum(e.mu**2 for e in events)  # type: ignore[attr-defined]
            else:
                total += RDPBudget(100.0, 1e-5, ALPHA).rho(events)
        out.append(total)
    return np.array(out)


@pytest.mark.parametrize("renyi", [False, True])
def test_the_plan_s_charge_of_its_proposals_is_the_registries_charge(renyi: bool) -> None:
    """The same proposals charged by the plan's simulation and replayed through the registry's ledger
    (``increment`` per iteration, its accountant reading the events): equal at every iteration (to 1e-9),
    never below; the per-decision charge the decisions' own Σ Δ²/s² (or Σ ρ_table); the per-run charge
    below it (0.3-0.8 of it for these chains)."""
    table = bit_rdp_table(PenaltyAcceptance(S), CAP, (ALPHA,)) if renyi else None
    wr = WorstRecordCharge.of(STRUCTURE, "add-remove", S, table)
    record: list[tuple[np.ndarray, np.ndarray]] = []
    r = _curve(300, 5, wr, table, record)
    rc = r.run_charge
    assert rc is not None and len(record) == 300
    ledger = _ledger(wr, record)
    np.testing.assert_allclose(rc.total, ledger, rtol=1e-9, atol=1e-15)
    assert np.all(rc.total >= ledger * (1 - 1e-12))
    np.testing.assert_allclose(rc.proposals, CHAINS * np.arange(1, 301))
    assert np.all(np.diff(rc.total) >= 0) and np.all(rc.total <= rc.per_decision * (1 + 1e-12))
    per = r.mean_rho if renyi else r.mean_delta2 / S**2
    assert per is not None
    assert rc.per_decision[-1] == pytest.approx(r.asked * CHAINS * 300 * per, rel=1e-9)
    assert 0.3 < rc.ratio < 0.8
    if not renyi:
        np.testing.assert_allclose(rc.mu2, rc.total, rtol=1e-12)  # GDP: one reading
    else:
        assert np.all(np.diff(rc.mu2) >= 0) and rc.mu2[-1] >= 2 * rc.total[-1] / ALPHA * (1 - 1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("renyi", [False, True])
def test_a_plan_never_states_less_than_the_registries_charge_of_its_runs(renyi: bool) -> None:
    """A plan priced on 6 runs (their envelope, mean + 2 sd) for ε = 30 (50-60 iterations here): each run's
    proposals replayed through the registry's ledger and accountant, warm start included, up to the planned
    iterations, spend at most the plan's ε, which is within the target; the plan buys no iteration past the
    runs."""
    table = bit_rdp_table(PenaltyAcceptance(S), CAP, (ALPHA,)) if renyi else None
    wr = WorstRecordCharge.of(STRUCTURE, "add-remove", S, table)
    records: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(6)]
    runs = [_curve(400, 20 + k, wr, table, records[k]) for k in range(6)]
    curve = RunCharge.envelope([r.run_charge for r in runs if r.run_charge is not None], 2.0)
    stats = runs[0]
    if renyi:
        assert stats.mean_rho is not None
    p = plan_mcmc(
        ProposalStatistics(
            stats.mean_delta2, stats.acceptance, stats.asked, CAP, 0.999, stats.ess_per_proposal,
            stats.mean_rho, curve,
        ),
        PlanBudget(eps=30.0, delta=1e-5, mu_warm=0.5, alpha=ALPHA if renyi else None),
        sd_total=S, m=1, residual=1, chains=CHAINS,
    )  # fmt: skip
    assert 40 < p.iterations <= 400 and p.eps <= 30.0
    warm = GaussianEvent(0.5)
    for rec in records:
        charged = _ledger(wr, rec[: p.iterations])[-1]
        assert charged <= p.decisions_charge(p.iterations) * (1 + 1e-12)
        if renyi:  # the Rényi filter's ε of the warm start's event and the run's ρ
            spent = rdp_eps(RDPBudget(30.0, 1e-5, ALPHA).rho([warm]) + charged, ALPHA, 1e-5)
        else:
            spent = gdp_eps(math.sqrt(0.25 + charged), 1e-5)
        assert spent <= p.eps * (1 + 1e-12), (spent, p.eps)
    # a budget that would buy more than the runs simulated buys the runs simulated, and says so
    big = plan_mcmc(
        p.stats, PlanBudget(eps=1000.0, delta=1e-5, mu_warm=0.5, alpha=ALPHA if renyi else None),
        sd_total=S, m=1, residual=1, chains=CHAINS,
    )  # fmt: skip
    assert big.iterations == 400 and big.affordable() > 400 and big.eps < 1000.0


@pytest.mark.slow
def test_the_charge_past_the_simulated_run_is_extrapolated_at_its_last_rate() -> None:
    """A curve of 100 steps read at 400: its last rate times the proposals, within 10 % of runs simulated at
    400 steps (measured: 2 % above; the rate falls with the length, S being subadditive); inside the run,
    the value at the first iteration reaching the proposals (never below the charge there)."""
    wr = WorstRecordCharge.of(STRUCTURE, "add-remove", S)
    short = [_curve(100, k, wr).run_charge for k in range(6)]
    for c in short:
        assert c is not None
        assert c.at(4 * c.end) == pytest.approx(4 * float(c.total[-1]), rel=1e-12)
        assert c.at(CHAINS * 50.0) == c.total[49] and c.at(CHAINS * 49.5) == c.total[49]
        assert c.at(0.0) == 0.0 and c.at(1.0) == c.total[0]
    longer = np.mean([_curve(400, 50 + k, wr).run_charge.total[-1] for k in range(6)])  # type: ignore[union-attr]
    assert np.mean([c.at(400 * CHAINS) for c in short if c]) == pytest.approx(longer, rel=0.10)


def test_a_renyi_plan_s_curve_must_be_at_the_ledger_s_order() -> None:
    """A per-run charge at another order than the plan's table, or without one, is refused."""
    table = bit_rdp_table(PenaltyAcceptance(S), CAP, (4.0,))
    other = bit_rdp_table(PenaltyAcceptance(S), CAP, (8.0,))
    with pytest.raises(ValueError, match="same order"):
        _curve(20, 3, WorstRecordCharge.of(STRUCTURE, "add-remove", S, table), other)
    with pytest.raises(ValueError, match="same order"):
        _curve(20, 3, WorstRecordCharge.of(STRUCTURE, "add-remove", S), table)


def _stats(curve: RunCharge | None) -> ProposalStatistics:
    return ProposalStatistics(
        mean_delta2=0.01, acceptance=0.3, asked=0.9, cap=0.5, c_quantile=0.999, ess_per_proposal=0.17,
        run_charge=curve,
    )  # fmt: skip


def _concave(rate: float, extra: float, last: int = 400) -> RunCharge:
    """A curve of 16 chains whose average rate falls with the proposals: rate P + extra √P after each of
    ``last`` iterations (per decision 3 times it)."""
    p = 16.0 * np.arange(1.0, last + 1.0)
    total = rate * p + extra * np.sqrt(p)
    return RunCharge(p, total, total, 3 * total)


def test_plan_buys_the_iterations_whose_run_charge_fits() -> None:
    """Independent arithmetic: the largest iterations whose charge on the curve fits 0.85 of what the warm
    start leaves, found by scanning; μ and ε from the same curve; the same budget per decision (at the
    curve's per-decision cost) buys far fewer; a budget that fits more than the simulated run buys that run
    (its ``affordable`` read past it at the last rate), and none fits when the warm start spends it all."""
    curve = _concave(0.0002, 0.01, last=3000)
    per = plan_mcmc(
        _stats(None), PlanBudget(eps=10.0, delta=1e-5, mu_warm=0.3), sd_total=2.0, m=7, residual=7, chains=16
    )
    p = plan_mcmc(
        _stats(curve), PlanBudget(eps=10.0, delta=1e-5, mu_warm=0.3),
        sd_total=2.0, m=7, residual=7, chains=16,
    )  # fmt: skip
    left = 0.85 * (gdp_mu(10.0, 1e-5) ** 2 - 0.09)

    def charge(it: int) -> float:
        return 0.0 if it == 0 else float(curve.total[it - 1])

    want = max(it for it in range(0, 3001) if charge(it) <= left)
    assert 400 < want < 3000
    assert p.iterations == want and p.affordable() == want and p.per_run and not per.per_run
    assert p.decisions_charge(want) == pytest.approx(charge(want), rel=1e-12)
    assert p.mu_total == pytest.approx(math.sqrt(0.09 + charge(want)), rel=1e-12)
    assert p.eps == pytest.approx(Accounting(1e-5).eps(0.09 + charge(want)), rel=1e-12) and p.eps < 10.0
    assert p.per_proposal == pytest.approx(charge(want) / (16 * want), rel=1e-12)
    assert "charged per run at the worst record" in p.text() and "0.33 of the per-decision" in p.text()
    assert p.iterations > 2.5 * per.iterations  # at 1/3 of the per-decision charge
    # what an ESS needs is priced on the same curve
    it = p.iterations_for_ess(300.0)
    assert p.total_for_ess(300.0) == pytest.approx(0.09 + charge(it) / 0.85, rel=1e-12)
    # the same budget on a run simulated for 400 iterations: those 400, never an extrapolated 401st
    short = _concave(0.0002, 0.01, last=400)
    q = plan_mcmc(
        _stats(short), PlanBudget(eps=10.0, delta=1e-5, mu_warm=0.3),
        sd_total=2.0, m=7, residual=7, chains=16,
    )  # fmt: skip
    assert q.iterations == 400 and q.affordable() > 400 and q.eps < p.eps
    assert q.decisions_charge(400) == pytest.approx(float(short.total[-1]), rel=1e-12)
    # a run too short for the warm start's target: no decision fits, none is bought
    none = plan_mcmc(
        _stats(curve), PlanBudget(eps=4.4, delta=1e-5, mu_warm=1.0), sd_total=2.0, m=7, residual=7, chains=16
    )
    assert none.iterations == 0 and none.eps <= 4.4


def test_replan_after_the_pilot_adds_the_two_runs_charges() -> None:
    """The pilot's charge on the plan's curve plus the rest's on the re-planned curve (S(G + G') <= S(G) +
    S(G')), the rest the most that fits what the plan left."""
    old, new = _concave(0.001, 0.01), _concave(0.002, 0.01)
    p = plan_mcmc(
        _stats(old), PlanBudget(eps=10.0, delta=1e-5, mu_warm=0.3), sd_total=2.0, m=7, residual=7, chains=16
    )
    re = replan_after_pilot(p, _stats(new), 40, sd_total=2.0, m=7, residual=7)
    spent = old.at(16 * 40.0)
    left = old.at(16.0 * p.iterations) - spent
    rest = re.iterations - 40
    assert new.at(16.0 * rest) <= left < new.at(16.0 * (rest + 1))
    assert re.mu_total == pytest.approx(math.sqrt(0.09 + spent + new.at(16.0 * rest)), rel=1e-12)
    assert re.eps <= p.eps * (1 + 1e-12) and 0 < rest < p.iterations - 40


def test_the_envelope_prices_runs_at_their_largest_and_their_mean_plus_sds() -> None:
    """RunCharge.envelope: the charges at the larger of the runs' largest and their mean plus k sds
    pointwise (sample sd), made non-decreasing, so never below any run; the per-decision charge at the
    mean; runs on other grids, or a spread over one run, refused."""
    grid = np.array([8.0, 16.0, 32.0])
    runs = [
        RunCharge(grid, np.array([1.0, 2.0, 4.0]), np.array([2.0, 3.0, 5.0]), np.array([3.0, 6.0, 12.0])),
        RunCharge(grid, np.array([1.0, 3.0, 5.0]), np.array([2.0, 4.0, 7.0]), np.array([3.0, 7.0, 14.0])),
        RunCharge(grid, np.array([4.0, 1.0, 6.0]), np.array([2.0, 5.0, 6.0]), np.array([6.0, 5.0, 13.0])),
    ]
    v = np.array([[1.0, 2.0, 4.0], [1.0, 3.0, 5.0], [4.0, 1.0, 6.0]])
    up = RunCharge.envelope(runs, 2.0)
    want = np.maximum.accumulate(np.maximum(v.max(axis=0), v.mean(axis=0) + 2.0 * v.std(axis=0, ddof=1)))
    np.testing.assert_allclose(up.total, want, rtol=1e-12)
    assert up.total[1] == up.total[0]  # the bound fell there: kept non-decreasing
    np.testing.assert_allclose(up.mu2, [2.0, 4.0 + 2.0, 6.0 + 2.0], rtol=1e-12)
    np.testing.assert_allclose(up.per_decision, [4.0, 6.0, 13.0], rtol=1e-12)
    # no spread: the largest run, pointwise
    np.testing.assert_allclose(RunCharge.envelope(runs).total, [4.0, 4.0, 6.0], rtol=1e-12)
    one = RunCharge.envelope(runs[1:2])
    np.testing.assert_allclose(one.total, runs[1].total, rtol=1e-12)
    for r in runs:
        assert np.all(up.total >= r.total) and np.all(up.mu2 >= r.mu2)
    with pytest.raises(ValueError, match="at least 2"):
        RunCharge.envelope(runs[:1], 2.0)
    with pytest.raises(ValueError, match="same proposals"):
        RunCharge.envelope([runs[0], RunCharge(grid * 2, grid, grid, grid)])


def test_a_refitted_proposal_is_simulated_as_the_kernel_refits_it() -> None:
    """``refits``: the base refitted to the pooled states as RefitIndependenceMH does (``refit_base`` on the
    pool's mean and sum of squared deviations, Welford's in the kernel), so a proposal twice too wide is
    narrowed in the warm-up: after it the chains accept more, and each decision costs less, than with the
    approximation's proposal throughout."""
    from mechanisms.planning import _refit
    from mechanisms.samplers.mh import RefitState, refit_base

    rng = np.random.default_rng(4)
    pool = [rng.normal(size=(8, 3)) * [1.0, 2.0, 0.5] for _ in range(10)]
    count, mean, m2 = 0, np.zeros(3), np.zeros((3, 3))
    for x in np.vstack(pool):  # the kernel's Welford pooling, written out
        count += 1
        delta = x - mean
        mean = mean + delta / count
        m2 = m2 + np.outer(delta, x - mean)
    base = (np.zeros(3), np.eye(3))
    kernel = refit_base(RefitState(np.zeros((1, 3)), np.zeros(1), 0, *base, count, mean, m2), 3, 0.5)
    got = _refit(*base, pool, 0.5)
    np.testing.assert_allclose(got[0], kernel[0], atol=1e-12)
    np.testing.assert_allclose(got[1], kernel[1], atol=1e-12)
    assert _refit(*base, [pool[0][:7]], 0.5)[1] is base[1]  # 7 states < 2 (d + 1): kept

    stand_in = StandIn(MODEL, MEAN, 4.0 * COV, INFLATE, S)
    sim = ChainSettings(chains=32, steps=120, cap=5.0, target=(MEAN, COV), from_proposal=True, count_from=60)

    def run(refits: tuple[int, ...]) -> ProposalStatistics:
        rng = np.random.default_rng(9)
        return proposal_statistics(stand_in, rng, dataclasses.replace(sim, refits=refits))

    plain, refitted = run(()), run((20, 40))
    assert refitted.acceptance > plain.acceptance + 0.1, (refitted.acceptance, plain.acceptance)
    assert refitted.mean_delta2 < plain.mean_delta2


def test_a_plan_whose_cap_refuses_every_proposal_buys_nothing() -> None:
    """Every proposal above the cap (asked = 0: the decisions' mean charge is undefined, inf): the plan asks
    nothing and charges nothing for decisions, and no budget buys an effective draw (inf, not the warm
    start's ε alone and not a NaN: the offline plan's advice over μ raised 'rho must be >= 0, got nan')."""
    none_asked = ProposalStatistics(
        mean_delta2=math.inf, acceptance=0.0, asked=0.0, cap=0.5, c_quantile=0.999, ess_per_proposal=0.0,
        mean_rho=math.inf,
    )  # fmt: skip
    for alpha in (None, 4.0):
        p = plan_mcmc(
            none_asked, PlanBudget(eps=10.0, delta=1e-5, mu_warm=0.3, alpha=alpha),
            sd_total=2.0, m=7, residual=7, chains=16,
        )  # fmt: skip
        assert p.iterations == 0 and p.ess == 0.0 and math.isfinite(p.eps)
        assert p.eps_for_ess(1.0) == math.inf
