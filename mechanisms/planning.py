"""Budget first: what a privacy budget buys an independence sampler from a (DP) Laplace approximation.

The law (issue 23; DESIGN.md §1 "Making ε useful"), made exact for the accountant the registries use: a
fixed-sd penalty decision whose per-record sensitivity is Δ_t is μ_t = Δ_t √m / (s √r)-GDP for a registry
whose assumed coalition leaves r of the m registries' noise unknown (s the total penalty sd on the log
acceptance ratio; twice Δ for replace-one), the whole run composes to μ² = μ_warm² + Σ_t μ_t² (a GDP filter:
valid under the adaptive choice of steps), and ε(δ) is the GDP conversion of μ. So a budget μ_max buys

    K = (μ_max² − μ_warm²) / E[μ_t²]  decisions,

and the effective draws per proposal are measured on simulated chains. E[Δ_t²], the acceptance and the ESS
per proposal are computed here by simulation from public quantities only: the sampler run on the Laplace
approximation (a Gaussian standing in for the posterior) with the penalty's exact decision law and the
public cap, Δ from the model's public per-record bound. The plan is a prediction (the posterior is
not exactly Gaussian), labelled as such; the registries charge what each decision really is, and the run's
outputs state what was spent. Pure: the generator comes in as an argument (public seed).

**Registries charging per run** (``[budget] per_run = "worst-record"``, ``mechanisms.privacy.worst_record``)
charge a run min(f S(G_K) + c K, Σ_t ρ(Δ_t)) after K decisions, G_K = Σ_t v_t v_tᵀ, S(G) the sup of zᵀGz
over the public region: not a sum of per-decision charges, so no price per decision. The plan simulates the
run's proposals from the approximation (public quantities only) and charges them exactly as the registries
would (:class:`RunCharge`): one batch per iteration of every chain, the batch charged the ledger's own
increment (``WorstRecordCharge.charged`` after less before, floored at 0, its events read by the registry's
accountant); the d × d state accumulated as a registry accumulates it, its sup read at every iteration. So on
the simulated proposals the plan's figure *is* the registries' charge, not an estimate of it; over several
simulated runs it is priced at the largest of them and their mean plus two sds (:meth:`RunCharge.envelope`),
and the plan never buys iterations past the simulated run (:func:`_most_iterations`: the planner simulates
again, longer, when the budget would buy more). What remains a prediction is that the real run's proposals
are like the simulated ones (the posterior is not exactly the Gaussian stand-in): the plan spends
``margin`` of the budget for that, and each registry still charges what the run really is. Past the
simulated run (what a larger ESS would cost: :meth:`McmcPlan.eps_for_ess`) the curve is extrapolated at its
last average rate: S is positively homogeneous and subadditive (S(G + G') ≤ S(G) + S(G')), so for steps of
a stationary chain E[S(G_{nK})] ≤ n E[S(G_K)] and the rate falls with K (towards S(E[v vᵀ]) per decision):
the extrapolation over-predicts in expectation.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mechanisms.floor import Floor, plan_floor_line
from mechanisms.models.base import F64, Model
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from mechanisms.privacy.events import GaussianEvent, RenyiEvent
from mechanisms.privacy.ledger import event_rdp
from mechanisms.privacy.renyi import BitRdpTable, rdp_eps
from mechanisms.privacy.worst_record import RunState, WorstRecordCharge
from mechanisms.samplers.requests import record_sensitivity, sensitivities

__all__ = [
    "Accounting",
    "ChainSettings",
    "McmcPlan",
    "PlanBudget",
    "RunCharge",
    "StandIn",
    "pilot_bits",
    "pilot_offset",
    "plan_mcmc",
    "proposal_statistics",
    "quantile_cap",
    "replan_after_pilot",
]


@dataclass(frozen=True)
class RunCharge:
    """What a registry charging per run at its worst record (``[budget] per_run = "worst-record"``) is
    charged along a simulated run, after each of its iterations (``proposals``: the run's proposals so far,
    every chain's, those above the cap included): the sum of its ledger's increments, one batch per iteration
    as the driver asks them (``WorstRecordCharge.charged`` of the state after the batch less that before it,
    floored at 0: the events ``WorstRecordCharge.events`` makes), read as the registry's accountant reads the
    events: ``total`` in the plan's unit (μ², or ρ at the Rényi filter's order), ``mu2`` their GDP reading;
    ``per_decision`` the per-decision charge of the same decisions (plan's unit). Non-decreasing."""

    proposals: F64
    total: F64
    mu2: F64
    per_decision: F64

    @property
    def end(self) -> float:
        """The proposals of the whole simulated run."""
        return float(self.proposals[-1])

    def at(self, proposals: float, which: str = "total") -> float:
        """The charge after ``proposals`` proposals: on the simulated run, its value at the first iteration
        that reaches them (the curve is non-decreasing, so never below the value at ``proposals``); past its
        end, at its last average rate (a prediction that over-predicts in expectation: the module docstring;
        a plan never buys a run past the simulated one, ``_most_iterations``)."""
        curve = np.asarray(getattr(self, which), dtype=np.float64)
        if proposals <= 0:
            return 0.0
        if proposals <= self.end:
            return float(curve[int(np.searchsorted(self.proposals, proposals * (1.0 - 1e-12), "left"))])
        return float(curve[-1]) * proposals / self.end

    @property
    def ratio(self) -> float:
        """The whole simulated run's charge over its per-decision charge (plan's unit)."""
        pd = float(self.per_decision[-1])
        return float(self.total[-1]) / pd if pd > 0 else 1.0

    @staticmethod
    def envelope(curves: list[RunCharge], spread: float = 0.0) -> RunCharge:
        """Runs simulated at the same ``proposals`` priced together: the charges (``total``, ``mu2``) at the
        largest of the runs' own and their average plus ``spread`` standard deviations over the runs
        (pointwise, sample sd, made non-decreasing): never below any of the runs, and a prediction that
        another run's charge exceeds rarely (a run's own chains, and the refit its proposal gets from them,
        move its charge by about 10 %); ``per_decision`` at the runs' average."""
        grid = curves[0].proposals
        if any(c.proposals.shape != grid.shape or np.any(c.proposals != grid) for c in curves):
            raise ValueError("run charges are priced together over runs of the same proposals")
        if spread > 0 and len(curves) < 2:
            raise ValueError("a spread over runs needs at least 2 runs")

        def upper(key: str) -> F64:
            v = np.array([getattr(c, key) for c in curves])
            out = v.max(axis=0)
            if spread > 0:
                out = np.maximum(out, v.mean(axis=0) + spread * v.std(axis=0, ddof=1))
            return np.asarray(np.maximum.accumulate(out), dtype=np.float64)

        pd = np.mean([c.per_decision for c in curves], axis=0)
        return RunCharge(grid, upper("total"), upper("mu2"), np.asarray(pd, dtype=np.float64))


@dataclass(frozen=True)
class ProposalStatistics:
    """Monte Carlo summaries of one decision under the plan's assumptions."""

    mean_delta2: float  # E[Δ_t²] over the decisions asked (inside the cap), for the neighbour relation
    acceptance: float  # E[accept], rejections above the cap included
    asked: float  # share of proposals inside the cap (the others are rejected publicly, uncharged)
    cap: float  # the cap on c(θ, θ*) it used
    c_quantile: float  # the quantile of c the cap sits at (when chosen from it)
    ess_per_proposal: float  # bulk ESS per proposal of the simulated chains (smallest over parameters)
    mean_rho: float | None = None  # E[ρ_bit(α, Δ_t)] over the decisions asked, at one order (a Rényi plan)
    run_charge: RunCharge | None = None  # registries charging per run: the simulated run's charge


@dataclass(frozen=True)
class StandIn:
    """The Gaussian stand-in a plan simulates the sampler on, all public: the model (its bounds and its
    per-record bound, which give c(θ, θ*) and Δ), the (DP) Laplace approximation N(``mean``, ``cov``) standing
    in for the posterior, the independence proposal N(mean, ``inflate``² cov) made from it, the penalty's
    total sd s on the log acceptance ratio (``sd_total``: the decision law a + N(−s²/2, s²) + Exp(1) >= 0),
    and the neighbour relation Δ is computed for."""

    model: Model
    # the approximation the proposal is made from (the stand-in posterior too, unless ChainSettings moves it)
    mean: F64
    cov: F64
    inflate: float  # the proposal's inflation of the approximation's sds
    sd_total: float  # the penalty's total sd s on the log acceptance ratio (all registries' noise)
    neighbours: str = "add-remove"  # the relation Δ_t is charged for ("add-remove" or "replace-one")


@dataclass(frozen=True)
class ChainSettings:
    """How a plan's chains are simulated on a :class:`StandIn` (:func:`proposal_statistics`): how many and
    how long, the public cap, where the stand-in posterior sits against the approximation, where the chains
    start and which steps' acceptance counts, and the proposal's refits. ``dataclasses.replace`` makes a
    variant (a pilot's, a run's warm-up)."""

    # the chains: how many, of how many proposals each
    chains: int = 32
    steps: int = 400
    # the cap on c(θ, θ*) (proposals above it rejected publicly, not asked); None: the ``cap_quantile``
    # quantile of c under the proposal (:func:`quantile_cap`)
    cap: float | None = None
    cap_quantile: float = 0.999
    # the stand-in posterior: N(mean + a draw of N(0, ``offset_cov``), cov) (the DP approximation's error in
    # its mean, public from the warm start's noise scales), or an explicit (mean, cov) ``target``
    # (diagnostics); neither: N(mean, cov) itself
    offset_cov: F64 | None = None
    target: tuple[F64, F64] | None = None
    # the chains start at draws of N(mean, cov) as a run's do (``from_proposal``), else at draws of the
    # stand-in; the acceptance counts the steps from ``count_from`` on (a pilot's second half)
    from_proposal: bool = False
    count_from: int = 0
    # the proposal refitted as RefitIndependenceMH refits it: at each of ``refits`` (empty: never), with
    # ``warm_inflate`` in the warm-up and ``min_sd_ratio`` (its refit_base's)
    refits: tuple[int, ...] = ()
    warm_inflate: float = 1.5
    min_sd_ratio: float = 0.5


def _charge_run(
    worst_record: WorstRecordCharge,
    states: Sequence[RunState],
    at: Sequence[int],
    alpha: float | None,
    run: F64,
) -> None:
    """Fill ``run``'s first two columns (per iteration, the ledger's running total in the plan's unit and
    its GDP reading μ²) from the run's state after each charged iteration ``at``: each iteration's increment
    is the ledger's (``WorstRecordCharge.charged`` after less before, floored at 0, read through its
    events), the states' charges computed in one vectorised pass."""
    nows = worst_record.charged_along(states)
    before = np.zeros(worst_record.layers)
    incs = np.zeros((run.shape[0], 2))
    for k, now in zip(at, nows, strict=True):
        (event,) = worst_record.events(np.maximum(now - before, 0.0), "plan")
        before = now
        assert isinstance(event, (GaussianEvent, RenyiEvent))
        mu2 = event.mu**2  # the event's GDP reading
        incs[k] = (mu2 if alpha is None else event_rdp(event, alpha)), mu2
    run[:, :2] = np.cumsum(incs, axis=0)  # running totals, summed in iteration order


def proposal_statistics(
    stand_in: StandIn,
    rng: np.random.Generator,
    settings: ChainSettings | None = None,
    *,
    rdp_table: BitRdpTable | None = None,
    worst_record: WorstRecordCharge | None = None,
    record: list[tuple[F64, F64]] | None = None,
) -> ProposalStatistics:
    """The independence sampler N(mean, inflate² cov) run on the Gaussian stand-in N(mean, cov) for the
    posterior (:class:`StandIn`) with the penalty's exact decision law (accept iff a + N(−s²/2, s²) + Exp(1)
    >= 0; proposals with c(θ, θ*) above the cap rejected without asking): E[Δ²] over the decisions asked,
    the acceptance, and ESS per proposal measured on the simulated chains (ArviZ bulk ESS, the smallest over
    the parameters). ``settings`` (:class:`ChainSettings`, default its defaults): the chains, the cap (None:
    the ``cap_quantile`` quantile of c(θ, θ*) under the proposal), the stand-in's offset (``offset_cov``:
    the stand-in posterior centred at ``mean`` plus a draw of the DP approximation's error, the proposal
    staying at ``mean``: an approximation a little off centre costs acceptance and ESS) or explicit
    ``target``, the chains' start (``from_proposal``: at draws of N(mean, cov) as a run's, a pilot's
    acceptance) and the steps counted (``count_from``: a pilot's second half), and the refits: the
    proposal refitted as ``RefitIndependenceMH`` refits it (its ``refit_base``, ``warm_inflate`` and
    ``min_sd_ratio``): N(base, ``warm_inflate``² base cov) in the warm-up, starting from (mean, cov), the
    base refitted at each of ``refits`` to the simulated chains' states pooled over the second half of the
    stage, frozen at ``inflate`` from ``refits[-1]`` on: a whole run's decisions, warm-up included, as its
    registries are asked them (the refit's estimation noise included). How the decisions are priced:
    ``rdp_table``: a one-order table of the accept bit's Rényi bound for the registry's view (what its
    ledger charges each decision under a Rényi filter, ``mechanisms.privacy.charge``): also E[ρ_bit].
    ``worst_record``: the per-run charge of a registry charging per run
    (``DecisionPlan.worst_record_charge``, the ledger's own; its Rényi table the same as ``rdp_table``, or
    neither): the simulated run charged as that registry charges it, every chain's decisions in one run
    (:class:`RunCharge`). ``record``: each
    iteration's decisions asked (θ, θ*, rows) are appended to it (a check of the charge against the
    registries')."""
    _s = settings if settings is not None else ChainSettings()
    model, mean, cov, inflate = stand_in.model, stand_in.mean, stand_in.cov, stand_in.inflate
    sd_total, neighbours = stand_in.sd_total, stand_in.neighbours
    cap, cap_quantile, chains, steps = _s.cap, _s.cap_quantile, _s.chains, _s.steps
    offset_cov, target, from_proposal, count_from = _s.offset_cov, _s.target, _s.from_proposal, _s.count_from
    refits, warm_inflate, min_sd_ratio = _s.refits, _s.warm_inflate, _s.min_sd_ratio
    import arviz as az

    d = mean.shape[0]
    chol = np.linalg.cholesky(cov)
    prec: F64 = np.asarray(np.linalg.inv(cov), dtype=np.float64)
    centre = mean if offset_cov is None else mean + np.linalg.cholesky(offset_cov) @ rng.standard_normal(d)
    t_chol, t_prec = chol, prec
    if target is not None:
        centre, t_chol = target[0], np.linalg.cholesky(target[1])
        t_prec = np.asarray(np.linalg.inv(target[1]), dtype=np.float64)

    def quad(x: F64, at: F64 = mean, p: F64 = prec) -> F64:
        z = x - at
        return np.asarray(np.einsum("ij,jk,ik->i", z, p, z), dtype=np.float64)

    if cap is None:
        cap = quantile_cap(model, mean, cov, inflate, rng, cap_quantile)
    start, s_chol = (mean, chol) if from_proposal else (centre, t_chol)
    theta = start + rng.standard_normal((chains, d)) @ s_chol.T
    trace = np.empty((steps, chains, d))
    delta2: list[F64] = []
    rho: list[F64] = []
    if rdp_table is not None and len(rdp_table.orders) != 1:
        raise ValueError(f"a plan's Renyi table has one order (the budget's), got {rdp_table.orders}")
    if worst_record is not None:
        orders = None if worst_record.table is None else worst_record.table.orders
        if orders != (None if rdp_table is None else rdp_table.orders):
            raise ValueError(
                f"a per-run plan prices the Renyi filter's order {rdp_table and rdp_table.orders} with the "
                f"ledger's per-run charge at the same order, got {orders}"
            )
    state = worst_record.empty() if worst_record is not None else None
    states: list[RunState] = []  # the run's state after each charged iteration (charged_at)
    charged_at: list[int] = []
    alpha = None if rdp_table is None else rdp_table.orders[0]
    run = np.zeros((steps, 3))  # per iteration: the ledger's total (plan's unit), μ², per-decision
    asked = accepted = 0
    count_from = min(count_from, steps - 1)
    q_mean, q_cov, q_chol, q_prec = mean, cov, chol, prec  # the proposal's base (RefitIndependenceMH's)
    frozen = refits[-1] if refits else 0
    pool: list[F64] = []
    for k in range(steps):
        if k in refits:
            q_mean, q_cov = _refit(q_mean, q_cov, pool, min_sd_ratio)
            q_chol, q_prec = np.linalg.cholesky(q_cov), np.asarray(np.linalg.inv(q_cov), dtype=np.float64)
            pool = []
        kappa = warm_inflate if k < frozen else inflate
        star = q_mean + kappa * rng.standard_normal((chains, d)) @ q_chol.T
        c_all, d_all = sensitivities(model, theta, star, neighbours)
        ok = model.in_bounds(star) & (c_all <= cap)
        # log π̂(θ*) − log π̂(θ) + log q(θ) − log q(θ*), π̂ = N(centre, cov), q = N(q_mean, κ² q_cov)
        a = -0.5 * (quad(star, centre, t_prec) - quad(theta, centre, t_prec))
        a += 0.5 * (quad(star, q_mean, q_prec) - quad(theta, q_mean, q_prec)) / kappa**2
        noise = rng.normal(-0.5 * sd_total**2, sd_total, chains) + rng.exponential(1.0, chains)
        move = ok & (a + noise >= 0.0)
        if record is not None:
            record.append((theta[ok].copy(), star[ok].copy()))
        if ok.any():
            delta2.append(d_all[ok] ** 2)
            if rdp_table is not None:
                rho.append(rdp_table.rho(np.sqrt(delta2[-1]))[:, 0])
        if state is not None and worst_record is not None:
            if ok.any():  # the batch of this iteration, charged after the loop as the ledger charges it
                g = state.grams + worst_record.grams(theta[ok], star[ok], d_all[ok])
                state = RunState(
                    (g + g.transpose(0, 2, 1)) / 2.0,
                    state.per_decision + worst_record.per_decision(d_all[ok]),
                    state.decisions + int(ok.sum()),
                )
                charged_at.append(k)
                states.append(state)
            run[k, 2] = state.per_decision[-1]
        asked += int(ok.sum())
        accepted += int(move.sum()) if k >= count_from else 0
        theta = np.where(move[:, None], star, theta)
        trace[k] = theta
        if k < frozen:  # RefitIndependenceMH pools every chain's state over the second half of each stage
            begin = max((r for r in (0, *refits) if r <= k), default=0)
            end = min(r for r in refits if r > k)
            if k >= (begin + end) // 2:
                pool.append(theta.copy())
    if worst_record is not None:  # each charged iteration's increment, as the ledger's increment events
        _charge_run(worst_record, states, charged_at, alpha, run)
    ess = float(
        np.min(az.ess(az.convert_to_dataset(trace.transpose(1, 0, 2)), method="bulk").to_array().values)
    )
    if asked == 0:  # every proposal above the cap: the chains never moved (ArviZ's ESS of a constant is > 0)
        ess = 0.0
    n = chains * steps
    return ProposalStatistics(
        mean_delta2=float(np.mean(np.concatenate(delta2))) if delta2 else math.inf,
        acceptance=accepted / (chains * (steps - count_from)),
        asked=asked / n,
        cap=cap,
        c_quantile=cap_quantile,
        ess_per_proposal=ess / n,
        mean_rho=(float(np.mean(np.concatenate(rho))) if rho else math.inf)
        if rdp_table is not None
        else None,
        run_charge=None
        if worst_record is None
        else RunCharge(chains * np.arange(1.0, steps + 1.0), run[:, 0], run[:, 1], run[:, 2]),
    )


def _refit(mean: F64, cov: F64, pool: list[F64], min_sd_ratio: float) -> tuple[F64, F64]:
    """``RefitIndependenceMH``'s refit (``refit_base``) of the base (``mean``, ``cov``) to ``pool`` (each
    iteration's (chains, d) states, in order: the holding times are read from it as the kernel counts
    them)."""
    from mechanisms.samplers.mh import RefitState, refit_base

    x = np.vstack(pool) if pool else np.empty((0, mean.shape[0]))
    n = x.shape[0]
    m2 = (x - x.mean(axis=0)).T @ (x - x.mean(axis=0)) if n else None
    run_len, sum_h2 = None, 0.0
    for k, states in enumerate(pool):
        if k == 0:
            run_len = np.ones(states.shape[0])
            continue
        assert run_len is not None
        moved = np.any(states != pool[k - 1], axis=1)
        sum_h2 += float(np.sum(run_len[moved] ** 2))
        run_len = np.where(moved, 1.0, run_len + 1.0)
    state = RefitState(x, np.zeros(n), 0, mean, cov, n, x.mean(axis=0) if n else None, m2, run_len, sum_h2)
    return refit_base(state, mean.shape[0], min_sd_ratio)


def quantile_cap(
    model: Model, mean: F64, cov: F64, inflate: float, rng: np.random.Generator, quantile: float = 0.999
) -> float:
    """The ``quantile`` of c(θ, θ*) (``requests.record_sensitivity``) for θ ~ N(mean, cov), the chain's
    state under the Gaussian stand-in, and θ* ~ N(mean, inflate² cov), the independence proposal: a cap
    that refuses about 1 − ``quantile`` of the proposals publicly (a planned run's ``max_sensitivity`` when
    the file leaves it to the plan). Public: the approximation and the model's bound."""
    d = mean.shape[0]
    chol = np.linalg.cholesky(cov)
    t0 = mean + rng.standard_normal((20_000, d)) @ chol.T
    t1 = mean + inflate * rng.standard_normal((20_000, d)) @ chol.T
    return float(np.quantile(record_sensitivity(model, t0, t1), quantile))


@dataclass(frozen=True)
class McmcPlan:
    """What a budget buys (per registry, for its view): the iterations per chain, the μ and ε it spends, the
    expected effective sample size and the Monte Carlo error in posterior sds. ``alpha`` None: planned for a
    GDP composition (``eps`` is the GDP conversion of ``mu_total``); else for a Rényi filter at that order
    (``eps`` is ``rdp_eps`` of ``rho_total``; ``mu_total`` is the GDP reading of the same run, beside it)."""

    iterations: int
    chains: int
    mu_total: float
    mu_warm: float
    eps: float
    delta: float
    ess: float
    mcse_sd: float
    stats: ProposalStatistics
    margin: float = 1.0  # the share of the budget left after the warm start that the plan spends
    alpha: float | None = None
    rho_total: float = 0.0
    rho_warm: float = 0.0
    per_proposal: float = 0.0  # the expected charge of one proposal, in the accounting's unit (μ² or ρ;
    # charged per run: the average over the planned run, the plan's curve is stats.run_charge)
    budget_total: float = math.inf  # what the target allows in that unit (Accounting.budget)
    floor: Floor | None = None  # the one-posterior-sample floor at the plan's approximation (public)
    min_warmup: int = 0  # the warm-up a refitted proposal needs (refit_warmup), 0 without a refit

    @property
    def usable(self) -> bool:
        return self.ess >= 100.0

    @property
    def accounting(self) -> Accounting:
        return Accounting(self.delta, self.alpha)

    @property
    def warm_alone(self) -> bool:
        """The warm start alone spends the whole target: no decision fits."""
        return self.accounting.warm(self.mu_warm) >= self.budget_total

    def iterations_for_ess(self, ess: float) -> int:
        """The iterations per chain whose draws after the warm-up (:func:`warmup_of`) give ``ess`` effective
        draws at this plan's ESS per proposal (the smallest such; ``10**9`` if none is in reach)."""
        rate = self.chains * self.stats.ess_per_proposal
        if rate <= 0 or not math.isfinite(rate):
            return 10**9

        def enough(it: int) -> bool:  # the ESS after the warm-up does not fall as the run grows
            return rate * max(it - warmup_of(self.stats, it, self.min_warmup), 0) >= ess

        lo, hi = 1, max(math.ceil(ess / rate), 2)
        while not enough(hi):
            lo, hi = hi, 2 * hi
            if hi > 10**9:
                return 10**9
        while hi - lo > 1:  # the smallest it that is enough lies in (lo, hi]
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if enough(mid) else (mid, hi)
        return hi

    @property
    def per_run(self) -> bool:
        """Priced for registries charging per run at the worst record (``stats.run_charge``)."""
        return self.stats.run_charge is not None

    def affordable(self) -> int:
        """The iterations the budget (with the margin) would buy were the simulated per-run charge read past
        the simulated run at its last rate (:meth:`RunCharge.at`); per decision, :attr:`iterations`. The
        planner simulates a run this long when it is longer than the one simulated."""
        if self.stats.run_charge is None:
            return self.iterations
        acc = self.accounting
        left = self.margin * max(self.budget_total - acc.warm(self.mu_warm), 0.0)
        return _most_iterations(self.stats, self.chains, self.per_proposal, left, extrapolate=True)

    def decisions_charge(self, iterations: int) -> float:
        """The expected charge (μ² or ρ) of ``iterations`` per chain, warm start excluded: this plan's cost
        per proposal times the proposals, or, charged per run, its simulated run's (:class:`RunCharge`)."""
        return _decisions_charge(self.stats, self.chains, iterations, self.per_proposal)

    def total_for_ess(self, ess: float) -> float:
        """The charge (μ² or ρ, warm start included) a planned run (with its margin) needs for ``ess``
        effective draws at this plan's cost per proposal and ESS per proposal."""
        warm = self.accounting.warm(self.mu_warm)
        it = self.iterations_for_ess(ess)
        if it >= 10**9:  # out of reach (no proposal moves the chain, e.g. every one above the cap)
            return math.inf
        return warm + self.decisions_charge(it) / self.margin

    def eps_scaled(self, factor: float) -> float:
        """ε at δ of this plan's run with ``factor`` times its decisions (the warm start once), at the
        plan's price per decision."""
        acc = self.accounting
        warm = acc.warm(self.mu_warm)
        total = self.rho_total if self.alpha is not None else self.mu_total**2
        return acc.eps(warm + max(total - warm, 0.0) * factor)

    def eps_for_ess(self, ess: float) -> float:
        """ε at δ a planned run (with its margin) needs for ``ess`` effective draws at this plan's cost per
        proposal and ESS per proposal (for a Rényi plan: at this plan's order, an estimate since the order
        follows ε). Valid whatever this plan bought, also when it bought no decision."""
        return self.accounting.eps(self.total_for_ess(ess))

    def floor_line(self, ess: float | None = None) -> str:
        """The floor for ``ess`` effective draws (default: this plan's expected ESS) beside what this plan
        (or, for another ESS, a planned run) spends for them: ``floor: eps_floor = X at delta = D for K
        effective draws (this plan: Y, ratio R)``."""
        k = self.ess if ess is None else ess
        spend = (lambda: self.eps) if ess is None else (lambda: self.eps_for_ess(k))
        return plan_floor_line(self.floor, k, self.delta, spend)

    def text(self) -> str:
        s = self.stats
        proposals = self.chains * self.iterations
        head = (
            f"{self.chains} chains x {self.iterations} iterations ({proposals} proposals, {s.asked:.1%} "
            f"inside the cap c <= {s.cap:.3g}); acceptance {s.acceptance:.2f}; expected ESS {self.ess:.0f} "
            f"(Monte Carlo error {self.mcse_sd:.2f} posterior sd); "
        )
        if s.run_charge is not None:
            head += (
                "charged per run at the worst record (the registries' own charge of simulated runs: "
                f"{s.run_charge.ratio:.2f} of the per-decision charge of the same decisions); "
            )
        if self.alpha is None:
            return head + (
                f"spends mu = {self.mu_total:.3f} (warm start {self.mu_warm:.3f}), eps = {self.eps:.3g} at "
                f"delta = {self.delta:g}"
            )
        return head + (
            f"spends rho = {self.rho_total:.4g} at Renyi order {self.alpha:g} (warm start "
            f"{self.rho_warm:.4g}), eps = {self.eps:.3g} at delta = {self.delta:g} by the Renyi filter (the "
            f"GDP reading of the same run: mu = {self.mu_total:.3f}, eps = "
            f"{gdp_eps(self.mu_total, self.delta):.3g})"
        )


@dataclass(frozen=True)
class Accounting:
    """How the registries compose a run, in the unit that adds up over its releases: ``alpha`` None, μ² (a
    GDP filter; an ε-at-δ ledger of Gaussian events answers the same); else ρ at the fixed order ``alpha``
    of a Rényi filter (``ledger.RDPBudget``: Feldman & Zrnic 2021, valid under adaptive steps)."""

    delta: float
    alpha: float | None = None

    def budget(self, eps: float) -> float:
        """The total a budget of ε at δ allows: μ_max² (GDP), or the largest ρ with rdp_eps(ρ) ≤ ε."""
        if self.alpha is None:
            return gdp_mu(eps, self.delta) ** 2
        a = self.alpha
        return max(eps - math.log((a - 1.0) / a) + (math.log(self.delta) + math.log(a)) / (a - 1.0), 0.0)

    def warm(self, mu_warm: float) -> float:
        """The warm start's Gaussian releases (μ_warm-GDP in all): μ² or αμ²/2."""
        return mu_warm**2 if self.alpha is None else self.alpha * mu_warm**2 / 2.0

    def per_proposal(self, stats: ProposalStatistics, sd_total: float, m: int, residual: int) -> float:
        """E[cost] per proposal (those above the cap are not asked, hence not charged)."""
        if self.alpha is None:
            return _mu_per_decision(stats, sd_total, m, residual)
        if stats.mean_rho is None:
            raise ValueError("a Renyi plan needs the decisions' Renyi bound (proposal_statistics rdp_table)")
        if stats.asked == 0:  # every proposal above the cap: none asked, none charged (mean_rho is inf)
            return 0.0
        return stats.asked * stats.mean_rho

    def eps(self, total: float) -> float:
        if total <= 0:
            return 0.0
        return (
            gdp_eps(math.sqrt(total), self.delta)
            if self.alpha is None
            else rdp_eps(total, self.alpha, self.delta)
        )


def _mu_per_decision(stats: ProposalStatistics, sd_total: float, m: int, residual: int) -> float:
    """E[μ_t²] per proposal (proposals above the cap are not asked, hence not charged)."""
    if stats.asked == 0:  # none asked: mean_delta2 is inf, the charge 0
        return 0.0
    return stats.asked * stats.mean_delta2 * m / (sd_total**2 * residual)


def _decisions_charge(stats: ProposalStatistics, chains: int, iterations: int, per: float) -> float:
    """The decisions' expected charge in the plan's unit: ``per`` a proposal, or the per-run curve."""
    if stats.run_charge is not None:
        return stats.run_charge.at(chains * iterations)
    return chains * iterations * per


def _decisions_mu2(
    stats: ProposalStatistics, chains: int, iterations: int, sd_total: float, m: int, residual: int
) -> float:
    """The decisions' expected μ² (the GDP reading)."""
    if stats.run_charge is not None:
        return stats.run_charge.at(chains * iterations, "mu2")
    return chains * iterations * _mu_per_decision(stats, sd_total, m, residual)


def _most_iterations(
    stats: ProposalStatistics, chains: int, per: float, left: float, extrapolate: bool = False
) -> int:
    """The most iterations per chain whose decisions' expected charge stays within ``left``; charged per run,
    at most the simulated run's (``extrapolate``: read past it at its last rate, what the planner uses to
    choose the length it simulates next)."""
    if stats.run_charge is None:
        return int(left / (chains * per)) if per > 0 else 0
    most = 10**9 if extrapolate else int(stats.run_charge.end // chains)

    def fits(it: int) -> bool:
        return _decisions_charge(stats, chains, it, per) <= left

    if most < 1 or not fits(1):
        return 0
    if fits(most):
        return most
    lo, hi = 1, 2
    while hi < most and fits(hi):  # the charge is non-decreasing (linear past the simulated run)
        lo, hi = hi, 2 * hi
    hi = min(hi, most)
    while hi - lo > 1:  # the largest it that fits lies in [lo, hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def warmup_of(stats: ProposalStatistics, iterations: int, min_warmup: int = 0) -> int:
    """Warm-up iterations of a planned run: a tenth of it, and at least the ~5 acceptances a chain started at
    a draw of the approximation (off the posterior by the approximation's error) needs to forget its start,
    and at least ``min_warmup`` (what a proposal refitted in the warm-up needs: :func:`refit_warmup`)."""
    lo = max(iterations // 10, math.ceil(5.0 / max(stats.acceptance, 1e-3)), min_warmup)
    return min(lo, max(iterations - 1, 0))


def refit_warmup(d: int, chains: int) -> int:
    """The shortest warm-up whose refits (``RefitIndependenceMH`` at half the warm-up and at its end, each
    from the second half of its stage) pool at least 20·(d + 1) chain states in the last stage: enough for
    a d × d covariance to within about ±30 % per sd (the frozen proposal's inflation absorbs that)."""
    return max(8, math.ceil(4 * 20 * (d + 1) / max(chains, 1)))


@dataclass(frozen=True)
class PlanBudget:
    """What a plan may spend, per registry for its view: the target ε at δ (warm start included), the warm
    start's μ (GDP, already spent when the plan is made), the share of what is left after the warm start
    that the plan spends, and how the registries compose (``alpha``: the order of their Rényi filter; None,
    a GDP composition: :class:`Accounting`)."""

    # the target: ε at δ for the whole run
    eps: float
    delta: float
    mu_warm: float  # the warm start's releases, μ_warm-GDP in all
    # the share of the budget left after the warm start that is planned (the prediction rests on the
    # Gaussian stand-in: the real steps cost somewhat more, 8 % in the demo)
    margin: float = 0.85
    alpha: float | None = None  # the registries' Rényi filter order (None: GDP)


def plan_mcmc(
    stats: ProposalStatistics,
    budget: PlanBudget,
    *,
    sd_total: float,
    m: int,
    residual: int,
    chains: int,
    min_warmup: int = 0,
) -> McmcPlan:
    """The iterations that spend the budget ε(δ) (``budget``: :class:`PlanBudget`, for a registry whose view
    leaves ``residual`` of the ``m`` registries' noise unknown, ``sd_total`` the penalty's total sd), and what
    they buy after the warm-up (:func:`warmup_of`); ``budget.margin`` of the budget left after the warm start
    is planned. ``budget.alpha``: the registries' Rényi filter order (``stats`` then carries E[ρ_bit] at that
    order); ``min_warmup``: the warm-up a refitted proposal needs. ``stats.run_charge`` (registries charging
    per run): the iterations whose simulated per-run charge (:class:`RunCharge`, in the same unit) fits, not
    a cost per decision times the decisions. The ESS counts the draws after the warm-up at ``stats``' ESS
    per proposal: with a refitted proposal that is the DP approximation's (offset by its noise), a
    conservative stand-in for the refit's."""
    eps, delta, mu_warm, margin, alpha = budget.eps, budget.delta, budget.mu_warm, budget.margin, budget.alpha
    acc = Accounting(delta, alpha)
    warm = acc.warm(mu_warm)
    left = margin * max(acc.budget(eps) - warm, 0.0)
    per = acc.per_proposal(stats, sd_total, m, residual)
    iterations = _most_iterations(stats, chains, per, left)
    total = warm + _decisions_charge(stats, chains, iterations, per)
    mu_total = math.sqrt(mu_warm**2 + _decisions_mu2(stats, chains, iterations, sd_total, m, residual))
    if stats.run_charge is not None:  # the average charge of a proposal over the planned run
        rc = stats.run_charge
        per = (total - warm) / (chains * iterations) if iterations else float(rc.total[-1] / rc.proposals[-1])
    ess = chains * max(iterations - warmup_of(stats, iterations, min_warmup), 0) * stats.ess_per_proposal
    return McmcPlan(
        iterations=iterations,
        chains=chains,
        mu_total=mu_total,
        mu_warm=mu_warm,
        eps=acc.eps(total),  # under GDP total is mu_total² itself
        delta=delta,
        ess=ess,
        mcse_sd=1.0 / math.sqrt(ess) if ess > 0 else math.inf,
        stats=stats,
        margin=margin,
        alpha=alpha,
        rho_total=total if alpha is not None else 0.0,
        rho_warm=warm if alpha is not None else 0.0,
        per_proposal=per,
        budget_total=acc.budget(eps),
        min_warmup=min_warmup,
    )


# The pilot (issue 23, "the plan against the realised chain"): the offset the plan assumes is the DP noise of
# the warm start's last release; a warm start that has not converged (or a clip's bias) puts the proposal
# further off, and the acceptance and ESS per proposal of an independence sampler fall steeply with the
# offset (Weibull at 10^4: planned acceptance 0.13 at the noise's offset, realised 0.010 at 3.6 sd). The
# warm-up's accept bits are released (and charged) anyway: their acceptance says how far off the proposal
# is, and the rest of the run is re-planned from that (post-processing of released bits).

PILOT_DIRECTIONS = 6


def _directions(d: int, seed: int, k: int = PILOT_DIRECTIONS) -> F64:
    z = np.random.default_rng(seed).standard_normal((k, d))
    return np.asarray(z / np.linalg.norm(z, axis=1, keepdims=True), dtype=np.float64)


def offset_statistics(
    stand_in: StandIn,
    offset: float,
    settings: ChainSettings,
    *,
    seed: int,
    rdp_table: BitRdpTable | None = None,
    worst_record: WorstRecordCharge | None = None,
) -> ProposalStatistics:
    """:func:`proposal_statistics` with the Gaussian stand-in's centre ``offset`` approximation sds from
    ``mean`` (in :data:`PILOT_DIRECTIONS` random directions of the whitened space, averaged): what the
    sampler does when its proposal is that far off. ``settings``: the chains simulated in each direction,
    its ``cap`` given (the one the plan fixed); the stand-in's centre is each direction's (its ``target``,
    ``offset_cov`` none)."""
    cap = settings.cap
    if cap is None:
        raise ValueError("offset_statistics simulates at the plan's cap: ChainSettings.cap is None")
    mean, cov = stand_in.mean, stand_in.cov
    chol = np.linalg.cholesky(cov)
    runs = [
        proposal_statistics(
            stand_in,
            np.random.default_rng(seed + 1 + k),
            dataclasses.replace(settings, offset_cov=None, target=(mean + chol @ (offset * u), cov)),
            rdp_table=rdp_table,
            worst_record=worst_record,
        )
        for k, u in enumerate(_directions(mean.shape[0], seed))
    ]
    d2 = [r.mean_delta2 for r in runs if math.isfinite(r.mean_delta2)]
    rho = [r.mean_rho for r in runs if r.mean_rho is not None and math.isfinite(r.mean_rho)]
    curves = [r.run_charge for r in runs if r.run_charge is not None]
    return ProposalStatistics(
        mean_delta2=float(np.mean(d2)) if d2 else math.inf,
        acceptance=float(np.mean([r.acceptance for r in runs])),
        asked=float(np.mean([r.asked for r in runs])),
        cap=cap,
        c_quantile=runs[0].c_quantile,
        ess_per_proposal=float(np.mean([r.ess_per_proposal for r in runs])),
        mean_rho=None if rdp_table is None else (float(np.mean(rho)) if rho else math.inf),
        run_charge=None if not curves else RunCharge.envelope(curves),  # the largest over the offsets
    )


def pilot_offset(
    stand_in: StandIn,
    cap: float,
    *,
    accepted: int,
    proposed: int,
    steps: int,
    chains: int,
    seed: int,
    count_from: int = 0,
    r_max: float = 8.0,
) -> float:
    """The offset r (in approximation sds) of a Gaussian stand-in whose simulated pilot (``chains`` chains
    started at draws of the approximation, ``steps`` proposals each, the penalty's decision law and the
    cap) accepts the share the run's pilot accepted (``accepted`` of ``proposed``: released bits). Bisection
    on common random numbers (the acceptance falls with r); 0 when the pilot accepted at least what a
    proposal centred on the posterior would, ``r_max`` when less than at ``r_max``. ``count_from``: the bits
    counted are those of the pilot's steps from that one on (the first steps, from the chains' starts at
    draws of the approximation, accept almost regardless of the offset: :func:`pilot_bits`). Only Δ depends
    on ``stand_in.neighbours``, not the acceptance: the pilot is simulated at add-remove."""
    rate = accepted / max(proposed, 1)
    pilot = dataclasses.replace(stand_in, neighbours="add-remove")
    run = ChainSettings(
        chains=max(chains, 32), steps=max(steps, 2), cap=cap, from_proposal=True, count_from=count_from
    )

    def simulated(r: float) -> float:
        return offset_statistics(pilot, r, run, seed=seed).acceptance

    if simulated(0.0) <= rate:
        return 0.0
    if simulated(r_max) >= rate:
        return r_max
    lo, hi = 0.0, r_max
    for _ in range(9):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if simulated(mid) > rate else (lo, mid)
    return 0.5 * (lo + hi)


def pilot_bits(accept: npt.NDArray[np.bool_]) -> tuple[int, int, int]:
    """(accepted, proposed, count_from) of a pilot's accept bits (steps, chains): its second half."""
    half = accept.shape[0] // 2
    return int(accept[half:].sum()), int(accept[half:].size), half


def replan_after_pilot(
    p: McmcPlan, after: ProposalStatistics, pilot: int, *, sd_total: float, m: int, residual: int
) -> McmcPlan:
    """The plan ``p`` re-made after its first ``pilot`` iterations (its warm-up) from ``after``, the decision
    statistics at the offset the pilot's acceptance shows (:func:`pilot_offset`, :func:`offset_statistics`):
    the budget the plan left after the pilot (its expected charge) buys the rest at ``after``'s cost per
    decision, and the ESS is that of the draws after the pilot."""
    acc, k = p.accounting, p.chains
    per_old = acc.per_proposal(p.stats, sd_total, m, residual)
    per_new = acc.per_proposal(after, sd_total, m, residual)
    spent = _decisions_charge(p.stats, k, pilot, per_old)
    left = max(_decisions_charge(p.stats, k, p.iterations, per_old) - spent, 0.0)
    rest = _most_iterations(after, k, per_new, left)
    # charged per run, the pilot's and the rest's Gram matrices add: S(G + G') <= S(G) + S(G') and the c T
    # terms add, so the two curves' sum bounds the worst-record reading of the whole run (each curve is at
    # most its run's worst-record reading; at the per-decision reading, their sum is that of the whole run)
    total = acc.warm(p.mu_warm) + spent + _decisions_charge(after, k, rest, per_new)
    mu2 = _decisions_mu2(p.stats, k, pilot, sd_total, m, residual)
    mu_total = math.sqrt(p.mu_warm**2 + mu2 + _decisions_mu2(after, k, rest, sd_total, m, residual))
    ess = p.chains * rest * after.ess_per_proposal
    return dataclasses.replace(
        p,
        iterations=pilot + rest,
        mu_total=mu_total,
        eps=acc.eps(total),
        ess=ess,
        mcse_sd=1.0 / math.sqrt(ess) if ess > 0 else math.inf,
        stats=after,
        rho_total=total if p.alpha is not None else 0.0,
        per_proposal=per_new if after.run_charge is None else p.per_proposal,
    )
