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

import math
from dataclasses import dataclass

import numpy as np

from mechanisms.models.base import F64, Model
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from mechanisms.samplers.requests import record_sensitivity, step_sensitivity

__all__ = ["McmcPlan", "plan_mcmc", "proposal_statistics"]


@dataclass(frozen=True)
class ProposalStatistics:
    """Monte Carlo summaries of one decision under the plan's assumptions."""

    mean_delta2: float  # E[Δ_t²] over the decisions asked (inside the cap), for the neighbour relation
    acceptance: float  # E[accept], rejections above the cap included
    asked: float  # share of proposals inside the cap (the others are rejected publicly, uncharged)
    cap: float  # the cap on c(θ, θ*) it used
    c_quantile: float  # the quantile of c the cap sits at (when chosen from it)
    ess_per_proposal: float  # bulk ESS per proposal of the simulated chains (smallest over parameters)


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
) -> ProposalStatistics:
    """The independence sampler N(mean, inflate² cov) run on the Gaussian stand-in N(mean, cov) for the
    posterior with the penalty's exact decision law (accept iff a + N(−s²/2, s²) + Exp(1) >= 0; proposals
    with c(θ, θ*) above the cap rejected without asking): E[Δ²] over the decisions asked, the acceptance, and
    ESS per proposal measured on the simulated chains (ArviZ bulk ESS, the smallest over the parameters).
    ``cap`` None: the ``cap_quantile`` quantile of c(θ, θ*) under the proposal. ``offset_cov``: the
    covariance of the DP approximation's error in its mean (public: from the warm start's noise scales): the
    stand-in posterior is then centred at ``mean`` plus a draw of that error, the proposal stays at ``mean``
    (an approximation a little off centre costs acceptance and ESS)."""
    import arviz as az

    d = mean.shape[0]
    chol = np.linalg.cholesky(cov)
    prec = np.linalg.inv(cov)
    centre = mean if offset_cov is None else mean + np.linalg.cholesky(offset_cov) @ rng.standard_normal(d)

    def quad(x: F64, at: F64 = mean) -> F64:
        z = x - at
        return np.asarray(np.einsum("ij,jk,ik->i", z, prec, z), dtype=np.float64)

    if cap is None:
        t0 = mean + rng.standard_normal((20_000, d)) @ chol.T
        t1 = mean + inflate * rng.standard_normal((20_000, d)) @ chol.T
        cap = float(np.quantile(record_sensitivity(model, t0, t1), cap_quantile))
    theta = centre + rng.standard_normal((chains, d)) @ chol.T
    trace = np.empty((steps, chains, d))
    delta2: list[F64] = []
    asked = accepted = 0
    for k in range(steps):
        star = mean + inflate * rng.standard_normal((chains, d)) @ chol.T
        ok = model.in_bounds(star) & (record_sensitivity(model, theta, star) <= cap)
        # log π̂(θ*) − log π̂(θ) + log q(θ) − log q(θ*), π̂ = N(centre, cov), q = N(mean, inflate² cov)
        a = -0.5 * (quad(star, centre) - quad(theta, centre)) + 0.5 * (quad(star) - quad(theta)) / inflate**2
        noise = rng.normal(-0.5 * sd_total**2, sd_total, chains) + rng.exponential(1.0, chains)
        move = ok & (a + noise >= 0.0)
        if ok.any():
            delta2.append(step_sensitivity(model, theta[ok], star[ok], neighbours) ** 2)
        asked += int(ok.sum())
        accepted += int(move.sum())
        theta = np.where(move[:, None], star, theta)
        trace[k] = theta
    ess = float(
        np.min(az.ess(az.convert_to_dataset(trace.transpose(1, 0, 2)), method="bulk").to_array().values)
    )
    n = chains * steps
    return ProposalStatistics(
        mean_delta2=float(np.mean(np.concatenate(delta2))) if delta2 else math.inf,
        acceptance=accepted / n,
        asked=asked / n,
        cap=cap,
        c_quantile=cap_quantile,
        ess_per_proposal=ess / n,
    )


@dataclass(frozen=True)
class McmcPlan:
    """What a budget buys (per registry, for its view): the iterations per chain, the μ and ε it spends, the
    expected effective sample size and the Monte Carlo error in posterior sds."""

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

    @property
    def usable(self) -> bool:
        return self.ess >= 100.0

    def text(self) -> str:
        s = self.stats
        proposals = self.chains * self.iterations
        return (
            f"{self.chains} chains x {self.iterations} iterations ({proposals} proposals, {s.asked:.1%} "
            f"inside the cap c <= {s.cap:.3g}); acceptance {s.acceptance:.2f}; expected ESS {self.ess:.0f} "
            f"(Monte Carlo error {self.mcse_sd:.2f} posterior sd); spends mu = {self.mu_total:.3f} "
            f"(warm start {self.mu_warm:.3f}), eps = {self.eps:.3g} at delta = {self.delta:g}"
        )


def _mu_per_decision(stats: ProposalStatistics, sd_total: float, m: int, residual: int) -> float:
    """E[μ_t²] per proposal (proposals above the cap are not asked, hence not charged)."""
    return stats.asked * stats.mean_delta2 * m / (sd_total**2 * residual)


def warmup_of(stats: ProposalStatistics, iterations: int) -> int:
    """Warm-up iterations of a planned run: a tenth of it, and at least the ~5 acceptances a chain started at
    a draw of the approximation (off the posterior by the approximation's error) needs to forget its start."""
    return min(max(iterations // 10, math.ceil(5.0 / max(stats.acceptance, 1e-3))), max(iterations - 1, 0))


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
) -> McmcPlan:
    """The iterations that spend the budget ε(δ) (for a registry whose view leaves ``residual`` registries'
    noise unknown), and what they buy after the warm-up (:func:`warmup_of`); ``margin`` of the μ² left after
    the warm start is planned (the prediction rests on the Gaussian stand-in: the real steps cost somewhat
    more, 8 % in the demo)."""
    mu_max = gdp_mu(eps, delta)
    left = margin * max(mu_max**2 - mu_warm**2, 0.0)
    per = _mu_per_decision(stats, sd_total, m, residual)
    iterations = int(left / (chains * per)) if per > 0 else 0
    mu_total = math.sqrt(mu_warm**2 + chains * iterations * per)
    ess = chains * max(iterations - warmup_of(stats, iterations), 0) * stats.ess_per_proposal
    return McmcPlan(
        iterations=iterations,
        chains=chains,
        mu_total=mu_total,
        mu_warm=mu_warm,
        eps=gdp_eps(mu_total, delta) if mu_total > 0 else 0.0,
        delta=delta,
        ess=ess,
        mcse_sd=1.0 / math.sqrt(ess) if ess > 0 else math.inf,
        stats=stats,
        margin=margin,
    )


def spend_of(
    stats: ProposalStatistics,
    *,
    sd_total: float,
    m: int,
    residual: int,
    chains: int,
    iterations: int,
    mu_warm: float,
    delta: float,
) -> tuple[float, float]:
    """(μ, ε at δ) that ``iterations`` per chain spend (the inverse question)."""
    mu = math.sqrt(mu_warm**2 + chains * iterations * _mu_per_decision(stats, sd_total, m, residual))
    return mu, gdp_eps(mu, delta)
