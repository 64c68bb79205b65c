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
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mechanisms.floor import Floor
from mechanisms.models.base import F64, Model
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from mechanisms.privacy.renyi import BitRdpTable, rdp_eps
from mechanisms.samplers.requests import record_sensitivity, sensitivities

__all__ = [
    "Accounting",
    "McmcPlan",
    "pilot_bits",
    "pilot_offset",
    "plan_mcmc",
    "proposal_statistics",
    "quantile_cap",
    "replan_after_pilot",
]


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


def proposal_statistics(
    model: Model,
    mean: F64,
    cov: F64,
    inflate: float,
    sd_total: float,
    neighbours: str,
    rng: np.random.Generator,
    cap: float | None = None,
    cap_quantile: float = 0.999,
    chains: int = 32,
    steps: int = 400,
    offset_cov: F64 | None = None,
    target: tuple[F64, F64] | None = None,
    from_proposal: bool = False,
    count_from: int = 0,
    rdp_table: BitRdpTable | None = None,
) -> ProposalStatistics:
    """The independence sampler N(mean, inflate² cov) run on the Gaussian stand-in N(mean, cov) for the
    posterior with the penalty's exact decision law (accept iff a + N(−s²/2, s²) + Exp(1) >= 0; proposals
    with c(θ, θ*) above the cap rejected without asking): E[Δ²] over the decisions asked, the acceptance, and
    ESS per proposal measured on the simulated chains (ArviZ bulk ESS, the smallest over the parameters).
    ``cap`` None: the ``cap_quantile`` quantile of c(θ, θ*) under the proposal. ``offset_cov``: the
    covariance of the DP approximation's error in its mean (public: from the warm start's noise scales): the
    stand-in posterior is then centred at ``mean`` plus a draw of that error, the proposal stays at ``mean``
    (an approximation a little off centre costs acceptance and ESS). ``target``: an explicit (mean, cov) of
    the Gaussian stand-in (diagnostics: the measured posterior's moments in place of a drawn offset).
    ``from_proposal``: the chains start at draws of N(mean, cov) as a run's do (a pilot's acceptance), not at
    draws of the stand-in; ``count_from``: the acceptance of the steps from that one on (a pilot's second
    half). ``rdp_table``: a one-order table of the accept bit's Rényi bound for the registry's view (what its
    ledger charges each decision under a Rényi filter, ``mechanisms.privacy.charge``): also E[ρ_bit]."""
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
    asked = accepted = 0
    count_from = min(count_from, steps - 1)
    for k in range(steps):
        star = mean + inflate * rng.standard_normal((chains, d)) @ chol.T
        c_all, d_all = sensitivities(model, theta, star, neighbours)
        ok = model.in_bounds(star) & (c_all <= cap)
        # log π̂(θ*) − log π̂(θ) + log q(θ) − log q(θ*), π̂ = N(centre, cov), q = N(mean, inflate² cov)
        a = -0.5 * (quad(star, centre, t_prec) - quad(theta, centre, t_prec))
        a += 0.5 * (quad(star) - quad(theta)) / inflate**2
        noise = rng.normal(-0.5 * sd_total**2, sd_total, chains) + rng.exponential(1.0, chains)
        move = ok & (a + noise >= 0.0)
        if ok.any():
            delta2.append(d_all[ok] ** 2)
            if rdp_table is not None:
                rho.append(rdp_table.rho(np.sqrt(delta2[-1]))[:, 0])
        asked += int(ok.sum())
        accepted += int(move.sum()) if k >= count_from else 0
        theta = np.where(move[:, None], star, theta)
        trace[k] = theta
    ess = float(
        np.min(az.ess(az.convert_to_dataset(trace.transpose(1, 0, 2)), method="bulk").to_array().values)
    )
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
    )


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
    per_proposal: float = 0.0  # the expected charge of one proposal, in the accounting's unit (μ² or ρ)
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

    def total_for_ess(self, ess: float) -> float:
        """The charge (μ² or ρ, warm start included) a planned run (with its margin) needs for ``ess``
        effective draws at this plan's cost per proposal and ESS per proposal."""
        warm = self.accounting.warm(self.mu_warm)
        it = self.iterations_for_ess(ess)
        return warm + self.chains * it * self.per_proposal / self.margin

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
        if self.floor is None:
            return "floor: not computed (the model's public region is unbounded)"
        k = self.ess if ess is None else ess
        if k < 1:
            return "floor: this plan buys no effective draw (nothing to compare)"
        spend = self.eps if ess is None else self.eps_for_ess(ess)
        return self.floor.line(k, self.delta, spend)

    def text(self) -> str:
        s = self.stats
        proposals = self.chains * self.iterations
        head = (
            f"{self.chains} chains x {self.iterations} iterations ({proposals} proposals, {s.asked:.1%} "
            f"inside the cap c <= {s.cap:.3g}); acceptance {s.acceptance:.2f}; expected ESS {self.ess:.0f} "
            f"(Monte Carlo error {self.mcse_sd:.2f} posterior sd); "
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
    return stats.asked * stats.mean_delta2 * m / (sd_total**2 * residual)


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


def plan_mcmc(
    stats: ProposalStatistics,
    *,
    sd_total: float,
    m: int,
    residual: int,
    chains: int,
    eps: float,
    delta: float,
    mu_warm: float,
    margin: float = 0.85,
    alpha: float | None = None,
    min_warmup: int = 0,
) -> McmcPlan:
    """The iterations that spend the budget ε(δ) (for a registry whose view leaves ``residual`` registries'
    noise unknown), and what they buy after the warm-up (:func:`warmup_of`); ``margin`` of the budget left
    after the warm start is planned (the prediction rests on the Gaussian stand-in: the real steps cost
    somewhat more, 8 % in the demo). ``alpha``: the registries' Rényi filter order (:class:`Accounting`;
    ``stats`` then carries E[ρ_bit] at that order); ``min_warmup``: the warm-up a refitted proposal needs.
    The ESS counts the draws after the warm-up at ``stats``' ESS per proposal: with a refitted proposal
    that is the DP approximation's (offset by its noise), a conservative stand-in for the refit's."""
    acc = Accounting(delta, alpha)
    warm = acc.warm(mu_warm)
    left = margin * max(acc.budget(eps) - warm, 0.0)
    per = acc.per_proposal(stats, sd_total, m, residual)
    iterations = int(left / (chains * per)) if per > 0 else 0
    total = warm + chains * iterations * per
    mu_total = math.sqrt(mu_warm**2 + chains * iterations * _mu_per_decision(stats, sd_total, m, residual))
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
    model: Model,
    mean: F64,
    cov: F64,
    inflate: float,
    sd_total: float,
    neighbours: str,
    cap: float,
    offset: float,
    *,
    chains: int,
    steps: int,
    seed: int,
    from_proposal: bool = False,
    count_from: int = 0,
    rdp_table: BitRdpTable | None = None,
) -> ProposalStatistics:
    """:func:`proposal_statistics` with the Gaussian stand-in's centre ``offset`` approximation sds from
    ``mean`` (in :data:`PILOT_DIRECTIONS` random directions of the whitened space, averaged): what the
    sampler does when its proposal is that far off."""
    chol = np.linalg.cholesky(cov)
    runs = [
        proposal_statistics(
            model,
            mean,
            cov,
            inflate,
            sd_total,
            neighbours,
            np.random.default_rng(seed + 1 + k),
            cap=cap,
            chains=chains,
            steps=steps,
            target=(mean + chol @ (offset * u), cov),
            from_proposal=from_proposal,
            count_from=count_from,
            rdp_table=rdp_table,
        )
        for k, u in enumerate(_directions(mean.shape[0], seed))
    ]
    d2 = [r.mean_delta2 for r in runs if math.isfinite(r.mean_delta2)]
    rho = [r.mean_rho for r in runs if r.mean_rho is not None and math.isfinite(r.mean_rho)]
    return ProposalStatistics(
        mean_delta2=float(np.mean(d2)) if d2 else math.inf,
        acceptance=float(np.mean([r.acceptance for r in runs])),
        asked=float(np.mean([r.asked for r in runs])),
        cap=cap,
        c_quantile=runs[0].c_quantile,
        ess_per_proposal=float(np.mean([r.ess_per_proposal for r in runs])),
        mean_rho=None if rdp_table is None else (float(np.mean(rho)) if rho else math.inf),
    )


def pilot_offset(
    model: Model,
    mean: F64,
    cov: F64,
    inflate: float,
    sd_total: float,
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
    draws of the approximation, accept almost regardless of the offset: :func:`pilot_bits`)."""
    rate = accepted / max(proposed, 1)

    def simulated(r: float) -> float:
        return offset_statistics(
            model, mean, cov, inflate, sd_total, "add-remove", cap, r,
            chains=max(chains, 32), steps=max(steps, 2), seed=seed, from_proposal=True, count_from=count_from,
        ).acceptance  # fmt: skip

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
    acc = p.accounting
    per_old = acc.per_proposal(p.stats, sd_total, m, residual)
    per_new = acc.per_proposal(after, sd_total, m, residual)
    left = p.chains * max(p.iterations - pilot, 0) * per_old
    rest = int(left / (p.chains * per_new)) if per_new > 0 else 0
    total = acc.warm(p.mu_warm) + p.chains * pilot * per_old + p.chains * rest * per_new
    mu2_old, mu2_new = (_mu_per_decision(x, sd_total, m, residual) for x in (p.stats, after))
    mu_total = math.sqrt(p.mu_warm**2 + p.chains * pilot * mu2_old + p.chains * rest * mu2_new)
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
        per_proposal=per_new,
    )
