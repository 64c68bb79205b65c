"""The registry-scale figure (issue 23, docs/PRIVACY_UTILITY.md): the ε a usable exact posterior costs per
registry, against the number of records, and what the same ε buys other methods.

For each model (``logistic``: Bayesian logistic regression, intercept + 4 covariates; ``weibull``: Weibull
regression with right censoring, 2 covariates, about 60 % censored) and each total n (7 synthetic registries
in the demo's proportions):

1. the DP warm start in memory against the coordinator (add-remove), μ_warm the best of 0.3, 0.6, 1, 2 and
   4 and the proposal's inflation the better of 1.1 and 1.3 for the plan, chosen on a design dataset (the
   same simulated population, other records: the study a statistician runs on simulated data of the public
   size before asking the registries; choosing on the registries' own releases would spend every warm start
   tried, and only the chosen one is charged), then run once on the registries' records: a moments release,
   the covariate ellipsoid, 5
   Fisher-scoring releases (``coordinator.warm_start.warm_start_plan``'s defaults: secant-updated gradient
   steps for logistic, a score release at every step for Weibull, whose gradient block is clipped at the
   model's score bound at each θ; ``mechanisms.warmstart``, each registry's noise from its own keyed
   CSPRNG; the same arithmetic the registries run);
2. the plan (``mechanisms.planning``): ε at δ = 1e-5 that buys ESS >= 200 (a Monte Carlo error of 0.07
   posterior sd) for the independence penalty sampler from the DP Laplace approximation (sd = 2, cap at the
   99.9 % quantile of c), charged per decision against the coordinator (q = 0, add-remove) — and, beside it,
   the same chain accounted as plain Yıldırım–Ermiş penalty MCMC without the confidential accept-reject (each
   registry's noisy log-ratio released: only its own noise protects its records, r = 1);
3. at validation points (``--validate``), the chain itself run in memory with the confidential decision law
   (``mechanisms.samplers.ConfidentialRule``: every registry's term with its noise, the penalty and the
   Exp(1) shares, decided in plaintext — the law the sign protocol realises) from N(θ̂, inflate² Â⁻¹) as the
   coordinator runs it, and its error against a converged plain reference of the same clipped records: max
   over parameters of |mean − ref mean| / ref sd, the largest error of the 5 % and 95 % quantiles in ref
   sds, R-hat and ESS. The warm-up is a pilot: its accept bits (second half) give the proposal's offset
   (``mechanisms.planning.pilot_offset``) and re-plan the rest — ``replanned_eps`` (ε for ESS 200 at that
   offset), ``replanned_ess`` (expected at the length run, at most 3,000 iterations), beside
   ``planned_ess`` (the plan from the DP approximation at that length) and the realised ``mcmc_ess``;
4. at the same ε, the DP Laplace approximation alone (the whole budget spent on the warm start): its errors
   in the same units, the baseline an exact sampler has to beat on a skewed posterior.

With ``--worst-record`` each row also has ``eps_worst_record`` and ``eps_worst_record_renyi``: the same plan
charged per run at its worst record (``[budget] per_run = "worst-record"``; :func:`worst_record_eps`).

Every row has ``eps_floor``, the one-posterior-sample floor for ESS 200 at the DP Laplace approximation
(``mechanisms.floor``: what 200 effective exact draws cost whatever sampler made them), and
``floor_ratio_*``, each planned ε of the row over it (:func:`floor_columns`); the figure draws the floor.

With ``--realised-ess K`` (issue 35 item 7) each row is instead the project's default sampler run in memory
until its *realised* bulk ESS reaches K (:func:`realised_row`): the refitted independence proposal
(``RefitIndependenceMH``), every batch charged per run at its worst record by the ledger's own code, ε the
least budget a registry's Rényi filter at δ = 1e-5 admits the run at, the floor for the realised ESS, the
ratio, R-hat, and the chain's error beside the DP Laplace approximation's alone at the same ε; written to
``realised_essK.csv`` and ``.png``::

    python -m simulations.registry_scale --out docs/privacy_utility --realised-ess 400 \
        --models logistic,rare,weibull,random-intercept --sizes 10000,100000,1000000

Command (about 2.5 minutes on 2 cores with validation at 10⁴ and 10⁵; ``--quick``: two sizes, none)::

    python -m simulations.registry_scale --out docs/privacy_utility --validate 10000,100000

writes ``registry_scale.csv`` and ``registry_scale.png``. The Weibull half (3 min 45 s)::

    python -m simulations.registry_scale --out docs/privacy_utility/weibull --models weibull \
        --validate 10000,100000
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.warm_start import WarmStartSettings, warm_start_plan
from hss.randomness import SecureRandom
from mechanisms import noise
from mechanisms.floor import floor_of
from mechanisms.kinds import DecisionPlan, decision_events, worst_record_charge
from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.planning import (
    ChainSettings,
    StandIn,
    offset_statistics,
    pilot_bits,
    pilot_offset,
    proposal_statistics,
    refit_warmup,
    warmup_of,
)
from mechanisms.privacy import GaussianEvent, PrivacyEvent, RDPBudget
from mechanisms.privacy.charge import accept_bit_table, worst_record_events
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from mechanisms.privacy.ledger import event_rdp
from mechanisms.privacy.renyi import ORDERS, BitRdpTable, budget_order, rdp_eps
from mechanisms.privacy.threat import coalition_view
from mechanisms.privacy.worst_record import RunState, WorstRecordCharge
from mechanisms.samplers import (
    ConfidentialRule,
    Decider,
    DecisionRequest,
    GaussianProposal,
    IndependenceMH,
    LocalParties,
    PublicSeeds,
    RefitIndependenceMH,
    plaintext_decide,
    run_kernel,
)
from mechanisms.samplers.mh import WARM_INFLATE
from mechanisms.samplers.requests import Penalty
from mechanisms.warmstart import (
    WarmStart,
    WarmStartPlan,
    in_memory_release,
    mean_error_cov,
    run_warm_start,
)
from simulations.reference import ReferenceSettings, plain_reference
from simulations.worst_record import run_ratios, stand_in_steps

PROPORTIONS = np.array([21, 7, 13, 5, 27, 10, 17], dtype=float) / 100.0
SIZES = (10_000, 30_000, 100_000, 300_000, 1_000_000)
MODELS = {
    "logistic": ("bayes-logistic", {"p": 4}),
    "rare": ("bayes-logistic", {"p": 4}),  # the same model, a rare outcome (intercept -5: ~1.4 % prevalence)
    "weibull": ("weibull-regression", {"p": 2, "t_max": 3.0}),
}
RARE_BETA = np.r_[-5.0, [0.8 * (-0.6) ** k for k in range(4)]]
SD_TOTAL, DELTA, ESS_TARGET, CHAINS = 2.0, 1e-5, 200.0, 16
MAX_VALIDATE = 3000  # iterations per chain of a validation run, at most
MU_WARMS, INFLATES = (0.3, 0.6, 1.0, 2.0, 4.0), (1.1, 1.3)  # inflate >= 1.1: the tails against a misfit
DESIGN_SEED = 1_000_003  # the design dataset's records: the population's, not the registries' (step 1)
M = len(PROPORTIONS)
VIEW = coalition_view("sign", M, (M - 1) // 2, 0)  # the coordinator alone: every registry's noise unknown


def registries(model: Model, n: int, seed: int, rare: bool = False) -> list[dict[str, F64]]:
    sizes = tuple(round(n * float(p)) for p in PROPORTIONS)
    if rare:
        from mechanisms.models.logistic import BayesLogistic, synthetic_registries

        assert isinstance(model, BayesLogistic)
        return synthetic_registries(np.random.default_rng(seed), model, RARE_BETA, sizes)
    data = model.synthetic_data(np.random.default_rng(seed), sizes)
    assert data is not None
    return data


def warm_plan(model: Model, n: int, mu: float, steps: int = 5) -> WarmStartPlan:
    """The coordinator's schedule (``coordinator.warm_start.warm_start_plan`` with its defaults: 10 % of μ²
    on the moments, 30 % of the rest on the Gram blocks, clip 4, the model's curvature)."""
    return warm_start_plan(WarmStartSettings(mu=mu, steps=steps, n_records=n), model, M)


def _normals(key: SecureRandom) -> Any:
    def draw(size: int) -> F64:
        return noise.normal(key, 1.0, size)

    return draw


def laplace_only(model: Model, data: list[dict[str, F64]], n: int, mu: float, seed: int) -> WarmStart:
    """The DP Laplace approximation with ``mu`` spent on the score releases of ``model`` (its covariate
    region fixed): the warm start as the whole method."""
    full = warm_plan(model, n, mu / math.sqrt(0.9))  # the plan's score scales for mu on the scores
    plan = dataclasses.replace(full, moments=None)
    normals = [_normals(SecureRandom(bytes([(seed + 1) % 256, j]) * 16)) for j in range(M)]
    return run_warm_start(model, plan, in_memory_release(data, normals), n, np.zeros(model.d), M)


def dp_warm_start(model: Model, data: list[dict[str, F64]], n: int, mu: float, seed: int) -> WarmStart:
    normals = [_normals(SecureRandom(bytes([seed % 256, j]) * 16)) for j in range(M)]
    start = np.zeros(model.d)
    return run_warm_start(model, warm_plan(model, n, mu), in_memory_release(data, normals), n, start, M)


def averaged_statistics(
    ws: WarmStart,
    inflate: float,
    offset: F64,
    seed: int,
    repeats: int = 3,
    steps: int = 400,
    rdp_table: BitRdpTable | None = None,
) -> Any:
    """proposal_statistics averaged over ``repeats`` draws of the DP mean's error (one draw is noisy), for
    ``CHAINS`` chains of ``steps`` proposals (ESS per proposal depends on the chains' length)."""
    runs = [
        proposal_statistics(
            StandIn(ws.model, ws.laplace.mean, ws.laplace.cov, inflate, SD_TOTAL),
            np.random.default_rng(seed * 100 + k),
            ChainSettings(chains=CHAINS, steps=steps, offset_cov=offset),
            rdp_table=rdp_table,
        )
        for k in range(repeats)
    ]
    return dataclasses.replace(
        runs[0],
        mean_delta2=float(np.mean([r.mean_delta2 for r in runs])),
        acceptance=float(np.mean([r.acceptance for r in runs])),
        asked=float(np.mean([r.asked for r in runs])),
        ess_per_proposal=float(np.mean([r.ess_per_proposal for r in runs])),
        mean_rho=None if rdp_table is None else float(np.mean([r.mean_rho for r in runs])),
    )


def eps_after_pilot(before: Any, after: Any, pilot: int, mu_warm: float) -> tuple[float, int]:
    """(ε at δ, iterations per chain) that buy ESS_TARGET after a pilot of ``pilot`` iterations planned
    with ``before``, the rest at ``after`` (the statistics at the offset the pilot's acceptance shows)."""
    per0 = before.asked * before.mean_delta2 / SD_TOTAL**2  # against the coordinator: r = m (eps_for_ess)
    per1 = after.asked * after.mean_delta2 / SD_TOTAL**2
    rest = ESS_TARGET / max(after.ess_per_proposal, 1e-9)
    mu = math.sqrt(mu_warm**2 + per0 * CHAINS * pilot + per1 * rest)
    return gdp_eps(mu, DELTA), pilot + math.ceil(rest / CHAINS)


def eps_for_ess(stats: Any, residual: int, ess: float, mu_warm: float) -> tuple[float, int]:
    """(ε at δ, iterations per chain) that buy ``ess`` with the warm start's μ spent first (the warm start's
    μ is against the coordinator; against a coalition of registries it scales like the decisions')."""
    per = stats.asked * stats.mean_delta2 * M / (SD_TOTAL**2 * residual)  # E[μ_t²] per proposal
    warm = CHAINS * math.ceil(5.0 / max(stats.acceptance, 1e-3))  # the warm-up's proposals (warmup_of)
    proposals = ess / stats.ess_per_proposal + warm
    mu = math.sqrt(mu_warm**2 * M / residual + per * proposals)
    return gdp_eps(mu, DELTA), math.ceil(proposals / CHAINS)


def renyi_eps_for_ess(
    ws: WarmStart, inflate: float, offset: F64, seed: int, stats: Any, eps_gdp: float, mu_warm: float
) -> tuple[float, float]:
    """(ε at δ, order) that buy ESS_TARGET against the coordinator under the registries' Rényi filter: the
    same planned proposals (``stats``' ESS per proposal and warm-up), each charged E[ρ_bit(α, Δ)] over the
    same simulated decisions (the seeds of ``stats``' first pass) with the ledger's table, the warm start
    αμ²/2; α the order a registry whose budget is that ε fixes (``budget_order``, iterated from the GDP ε)."""
    alpha = budget_order(eps_gdp, DELTA)
    eps = math.inf
    for _ in range(4):
        table = accept_bit_table(SD_TOTAL / math.sqrt(M), VIEW, float(stats.cap), (alpha,))
        st = averaged_statistics(ws, inflate, offset, seed, rdp_table=table)
        proposals = ESS_TARGET / stats.ess_per_proposal + CHAINS * math.ceil(
            5.0 / max(stats.acceptance, 1e-3)
        )
        eps = rdp_eps(alpha * mu_warm**2 / 2.0 + st.asked * st.mean_rho * proposals, alpha, DELTA)
        nxt = budget_order(eps, DELTA)
        if nxt == alpha:
            break
        alpha = nxt
    return eps, alpha


@dataclass
class Errors:
    mean: float  # max |mean - ref| / ref sd
    quantile: float  # max |q - ref q| / ref sd over the 5 % and 95 % quantiles
    rhat: float = math.nan
    ess: float = math.nan


def errors_of(draws: F64, ref: F64) -> Errors:
    flat = draws.reshape(-1, draws.shape[-1])
    rf = ref.reshape(-1, ref.shape[-1])
    sd = rf.std(axis=0)
    mean = float(np.max(np.abs(flat.mean(axis=0) - rf.mean(axis=0)) / sd))
    q = max(
        float(np.max(np.abs(np.quantile(flat, p, axis=0) - np.quantile(rf, p, axis=0)) / sd))
        for p in (0.05, 0.95)
    )
    return Errors(mean, q)


def laplace_errors(ws: WarmStart, ref: F64, rng: np.random.Generator) -> Errors:
    draws = GaussianProposal(ws.laplace.mean, ws.laplace.cov).sample(rng, 20_000)
    return errors_of(draws[None], ref)


def confidential_chain(
    model: Model,
    data: list[dict[str, F64]],
    ws: WarmStart,
    iterations: int,
    cap: float,
    seed: int,
    inflate: float,
    pilot: int | None = None,
    replan: Any = None,
) -> tuple[F64, int, Any]:
    """The chain with the confidential decision law from N(mean, inflate² cov) of the DP approximation (as
    the coordinator runs it), started at draws of N(mean, cov): (draws after the warm-up, the iterations
    run, the re-plan). With ``pilot`` the first ``pilot`` iterations are the warm-up, and
    ``replan(bits)`` (their accept bits (steps, chains), released) returns (the iterations after them, the
    re-plan) before the chain goes on."""
    checked = [model.check_data(d) for d in data]
    rngs = [SecureRandom(bytes([200 + j, seed % 256]) * 16) for j in range(M)]
    decide = LocalParties(model, checked, ConfidentialRule(plaintext_decide, rngs, "sign"))
    penalty = Penalty(None, sd=SD_TOTAL / math.sqrt(M), max_sensitivity=cap)
    proposal = GaussianProposal(ws.laplace.mean, inflate**2 * ws.laplace.cov)
    kernel = IndependenceMH(model, decide, proposal, penalty=penalty, m=M)
    seeds = PublicSeeds(seed)
    theta0 = GaussianProposal(ws.laplace.mean, ws.laplace.cov).sample(seeds.init_rng(), CHAINS)
    warm = pilot if pilot is not None else max(iterations // 10, math.ceil(5.0 / 0.3))
    state, first = run_kernel(kernel, kernel.init(theta0), warm, seeds)
    rest, again = iterations - warm, None
    if replan is not None:
        rest, again = replan(first.accept)
    _, trace = run_kernel(kernel, state, max(rest, 0), seeds, first_batch=warm)
    return np.ascontiguousarray(trace.draws.transpose(1, 0, 2)), warm + max(rest, 0), again


def worst_record_eps(
    ws: WarmStart,
    inflate: float,
    offset: F64,
    stats: Any,
    iterations: int,
    eps: float,
    order: float,
    mu_warm: float,
    seed: int,
) -> dict[str, float]:
    """The same plan charged per run at its worst record (``[budget] per_run = "worst-record"``,
    ``mechanisms.privacy.worst_record``): the ratio of the whole run's charge to its per-decision charge,
    measured on one simulated run of the planned length (``CHAINS`` chains, the stand-in posterior of
    ``proposal_statistics``, its decisions as a registry is asked them), scales the decisions' part of the
    planned μ² (GDP) and of the planned ρ (the Rényi filter, as :func:`renyi_eps_for_ess` prices it, at the
    order a registry whose budget is the resulting ε fixes: ``budget_order``, iterated from the per-decision
    plan's order); the warm start's part is unchanged."""
    theta, star = stand_in_steps(
        StandIn(ws.model, ws.laplace.mean, ws.laplace.cov, inflate, SD_TOTAL), float(stats.cap),
        np.random.default_rng(seed + 17), chains=CHAINS, steps=iterations, offset_cov=offset,
    )  # fmt: skip
    s_res = SD_TOTAL  # against the coordinator every registry's noise is unknown: √M × SD_TOTAL/√M
    ratio_gdp, _ = run_ratios(ws.model, theta, star, "add-remove", s_res)
    mu_dec2 = max(gdp_mu(eps, DELTA) ** 2 - mu_warm**2, 0.0)
    proposals = ESS_TARGET / stats.ess_per_proposal + CHAINS * math.ceil(5.0 / max(stats.acceptance, 1e-3))
    alpha, eps_r, ratio_rdp = order, math.inf, math.nan
    for _ in range(4):
        table = accept_bit_table(SD_TOTAL / math.sqrt(M), VIEW, float(stats.cap), (alpha,))
        st = averaged_statistics(ws, inflate, offset, seed, rdp_table=table)
        rho_dec = st.asked * st.mean_rho * proposals  # the per-decision plan's ρ at this order
        got = run_ratios(ws.model, theta, star, "add-remove", s_res, table)[1]
        assert got is not None
        ratio_rdp = got
        eps_r = rdp_eps(alpha * mu_warm**2 / 2.0 + ratio_rdp * rho_dec, alpha, DELTA)
        nxt = budget_order(eps_r, DELTA)
        if nxt == alpha:
            break
        alpha = nxt
    return {
        "worst_record_ratio_gdp": ratio_gdp,
        "worst_record_ratio_renyi": ratio_rdp,
        "eps_worst_record": gdp_eps(math.sqrt(mu_warm**2 + ratio_gdp * mu_dec2), DELTA),
        "eps_worst_record_renyi": eps_r,
        "worst_record_renyi_order": alpha,
        "worst_record_decisions": float(len(theta)),
    }


def floor_columns(ws: WarmStart, row: dict[str, Any]) -> dict[str, float]:
    """The one-posterior-sample floor (``mechanisms.floor``) for ``ESS_TARGET`` effective draws at the DP
    Laplace approximation (its covariance, the model with the warm start's covariate region; add-remove, as
    the plans), and each planned ε of the row over it: what the sampler and its accountant lose against the
    best any exact method could do (NaN when the model's region is unbounded)."""
    fl = floor_of(ws.model, ws.laplace.mean, ws.laplace.cov, "add-remove")
    floor = fl.eps(ESS_TARGET, DELTA) if fl is not None else math.nan
    out = {"eps_floor": floor}
    for key in ("eps_confidential", "eps_confidential_renyi", "eps_worst_record", "eps_worst_record_renyi"):
        if key in row:
            out["floor_ratio" + key.removeprefix("eps")] = row[key] / floor if floor > 0 else math.nan
    return out


def design_choice(name: str, base: Model, n: int, seed: int, ess: float) -> tuple[float, float]:
    """(μ_warm, inflate): the design choices of step 1, the pair whose per-decision plan buys ``ess`` for the
    least ε, chosen on the design dataset (the same population, other records): nothing released is used."""
    design = registries(base, n, seed + DESIGN_SEED, rare=name == "rare")
    best: tuple[float, float, float] | None = None
    for mu_warm in MU_WARMS:
        plan = warm_plan(base, n, mu_warm)
        ws_try = dp_warm_start(base, design, n, mu_warm, seed + DESIGN_SEED)
        offset = mean_error_cov(plan, ws_try.model, ws_try.laplace, M)
        for inflate in INFLATES:
            st = averaged_statistics(ws_try, inflate, offset, seed)
            eps_try, _ = eps_for_ess(st, M, ess, mu_warm)
            if best is None or eps_try < best[0]:
                best = (eps_try, mu_warm, inflate)
    assert best is not None
    return best[1], best[2]


def one(name: str, n: int, validate: bool, seed: int, worst_record: bool = False) -> dict[str, Any]:
    ref_name, args = MODELS[name]
    assert isinstance(args, dict)
    base = load_model(ref_name, args)
    data = registries(base, n, seed, rare=name == "rare")
    t0 = time.perf_counter()
    mu_warm, inflate = design_choice(name, base, n, seed, ESS_TARGET)
    ws = dp_warm_start(base, data, n, mu_warm, seed)  # the one warm start the registries release
    model = ws.model
    offset = mean_error_cov(warm_plan(base, n, mu_warm), model, ws.laplace, M)
    stats = averaged_statistics(ws, inflate, offset, seed)
    _, first = eps_for_ess(stats, M, ESS_TARGET, mu_warm)  # then ESS per proposal at the planned length
    warmup = math.ceil(5.0 / max(stats.acceptance, 1e-3))
    offset = mean_error_cov(warm_plan(base, n, mu_warm), ws.model, ws.laplace, M)
    short = averaged_statistics(ws, inflate, offset, seed + 7, steps=max(50, first - warmup))
    stats = dataclasses.replace(stats, ess_per_proposal=short.ess_per_proposal)
    eps, iterations = eps_for_ess(stats, M, ESS_TARGET, mu_warm)
    eps_plain, _ = eps_for_ess(stats, 1, ESS_TARGET, mu_warm)
    eps_renyi, order = renyi_eps_for_ess(ws, inflate, offset, seed, stats, eps, mu_warm)
    row: dict[str, Any] = {
        "model": name,
        "n": n,
        "eps_confidential": eps,
        "eps_confidential_renyi": eps_renyi,
        "renyi_order": order,
        "eps_plain_penalty": eps_plain,
        "iterations": iterations,
        "mu_warm": mu_warm,
        "inflate": inflate,
        "acceptance": stats.acceptance,
        "ess_per_proposal": stats.ess_per_proposal,
        "rms_delta": math.sqrt(stats.mean_delta2),
        "cap": stats.cap,
    }
    if worst_record:
        row |= worst_record_eps(ws, inflate, offset, stats, iterations, eps, order, mu_warm, seed)
    row |= floor_columns(ws, row)
    if validate:
        ref = plain_reference(model, data, seed, ReferenceSettings(min_ess=4000.0, chains=16))
        run_it = min(iterations, MAX_VALIDATE)
        warm = warmup_of(stats, run_it)
        row["planned_ess"] = CHAINS * (run_it - warm) * stats.ess_per_proposal  # at the length run
        replanned: dict[str, Any] = {}

        def replan(bits: Any) -> tuple[int, Any]:
            """The pilot (the warm-up's accept bits) re-plans the rest: ε for ESS 200 at the offset they
            show, and the iterations run (at most MAX_VALIDATE in all)."""
            accepted, proposed, count_from = pilot_bits(bits)
            stand_in = StandIn(model, ws.laplace.mean, ws.laplace.cov, inflate, SD_TOTAL)
            r = pilot_offset(
                stand_in, stats.cap, accepted=accepted, proposed=proposed, steps=warm, chains=CHAINS,
                seed=seed + 11, count_from=count_from,
            )  # fmt: skip
            after = stats
            rest = max(run_it - warm, 50)
            for _ in range(2):  # ESS per proposal at the re-planned length (short chains mix worse per draw)
                after = offset_statistics(
                    stand_in, r, ChainSettings(chains=CHAINS, steps=rest, cap=stats.cap), seed=seed + 13
                )
                eps2, it2 = eps_after_pilot(stats, after, warm, mu_warm)
                rest = max(min(it2, MAX_VALIDATE) - warm, 50)
            replanned.update(
                pilot_acceptance=accepted / proposed,
                pilot_offset_sd=r,
                replanned_eps=eps2,
                replanned_iterations=it2,
                replanned_ess=CHAINS * rest * after.ess_per_proposal,  # at the length run
            )
            return rest, after

        draws, run_it, _ = confidential_chain(
            model, data, ws, run_it, stats.cap, seed, inflate, pilot=warm, replan=replan
        )
        row |= replanned | {"mcmc_iterations": run_it}
        import arviz as az

        ds = az.convert_to_dataset(draws)
        e = errors_of(draws, ref.draws)
        e.rhat = float(np.max(az.rhat(ds).to_array().values))
        e.ess = float(np.min(az.ess(ds, method="bulk").to_array().values))
        # the whole budget on the warm start's score releases, with the same covariate region (the posterior
        # compared is the same clipped records')
        lap = laplace_only(
            model, data, n, math.sqrt(max(gdp_mu(eps, DELTA) ** 2 - mu_warm**2 * 0.1, 0.0)), seed
        )
        le = laplace_errors(lap, ref.draws, np.random.default_rng(seed))
        row |= {
            "mcmc_mean_err": e.mean,
            "mcmc_quantile_err": e.quantile,
            "mcmc_rhat": e.rhat,
            "mcmc_ess": e.ess,
            "laplace_mean_err": le.mean,
            "laplace_quantile_err": le.quantile,
            "reference": ref.label(),
        }
    row["seconds"] = time.perf_counter() - t0
    return row


class ChargedDecisions:
    """A decider that charges every batch it is asked as each registry's ledger charges it, then asks
    ``decide``: with ``charge`` (``[budget] per_run = "worst-record"`` and a model it applies to) per run at
    the worst record, ``charge.worst_record_events`` on the request the registries receive, the run's state
    carried from batch to batch (all of a run's chains and iterations are one run); without it (a model with
    no linear predictor: a registry charging per run keeps the per-decision charge for it) per decision,
    ``mechanisms.kinds.decision_events`` with the accept bit's Rényi bound at every order. The events kept
    in order."""

    def __init__(
        self, decide: Decider, charge: WorstRecordCharge | None, plan: DecisionPlan, model: Model
    ) -> None:
        self.decide, self.charge, self.plan, self.model = decide, charge, plan, model
        self.state: RunState | None = None
        self.events: list[PrivacyEvent] = []
        self.decisions = 0

    def __call__(self, req: DecisionRequest) -> Any:
        n = int(np.atleast_2d(np.asarray(req.theta)).shape[0])
        self.decisions += n
        if self.charge is not None:
            assert self.plan.penalty is not None
            events, self.state = worst_record_events(
                self.charge, self.plan.penalty, self.model, "sign", req, "mh", self.state, "add-remove"
            )
        else:
            events = decision_events(self.plan, self.model, "sign", VIEW, n, "mh", req, "add-remove", ORDERS)
        self.events += events
        return self.decide(req)


def filter_eps(events: list[PrivacyEvent], delta: float) -> tuple[float, float]:
    """(ε, order): the least budget ε found at which a registry's Rényi filter (``RDPBudget`` at the order its
    budget fixes, ``budget_order(ε, δ)``) admits ``events``: ε ≥ the filter's spend at that order. Candidates:
    each order's own spend, and the iteration ε ← spend at budget_order(ε); the smallest admissible one (an
    admissible budget, so never below what the registry charges)."""
    cands = {RDPBudget(1.0, delta, a).spend(events) for a in ORDERS}
    eps = min(cands)
    for _ in range(8):
        eps = RDPBudget(eps, delta).spend(events)
        cands.add(eps)
    ok = [
        (e, RDPBudget(e, delta).alpha)
        for e in sorted(cands)
        if e > 0 and RDPBudget(e, delta).spend(events) <= e * (1.0 + 1e-12)
    ]
    if not ok:
        raise ArithmeticError(f"no admissible Renyi budget among {sorted(cands)}")
    eps, alpha = ok[0]
    assert alpha is not None
    return eps, alpha


def _bulk(draws: F64) -> tuple[float, float]:
    """(min bulk ESS, max R-hat) over the parameters, ArviZ, draws (chains, draws, d)."""
    import arviz as az

    ds = az.convert_to_dataset(draws)
    return (
        float(np.min(az.ess(ds, method="bulk").to_array().values)),
        float(np.max(az.rhat(ds).to_array().values)),
    )


REALISED_RATE = 0.25  # the first block's assumed ESS per proposal after the freeze (the refit's 0.15-0.19
# measured, docs/PRIVACY_UTILITY.md): optimistic, so the first block stops short rather than past the target
REALISED_MARGIN = 1.1  # an extension asks for 10 % more than the measured rate says the target needs
REALISED_ROUNDS = 16  # extensions at most (each adds at most half the kept draws)
MAX_REALISED = 4000  # iterations per chain at most (warm-up included)


# the realised rows' design grid: MU_WARMS and INFLATES narrowed to what won on the first rows (logistic and
# rare at 10^4, the full grid: μ_warm 0.3 and 0.6 and inflate 1.3 never did, 1 and 2 within 2 % for logistic)
# to cut the Weibull model's simulations (its per-record bound per proposal) by 3x
REALISED_MU_WARMS, REALISED_INFLATES = (1.0, 2.0, 4.0), (1.1,)


def realised_warmup(d: int, acceptance: float, max_iterations: int) -> int:
    """The warm-up of a realised row: what the refit needs (``refit_warmup``) and the ~5 acceptances a chain
    started at a draw of the DP approximation needs to forget its start, at most half the run."""
    return min(max(refit_warmup(d, CHAINS), math.ceil(5.0 / max(acceptance, 1e-3))), max_iterations // 2)


def simulated_realised_eps(
    ws: WarmStart, inflate: float, offset: F64, seed: int, ess: float, mu_warm: float, alpha: float
) -> float:
    """ε at δ (the Rényi filter at ``alpha``) of the realised row's run simulated on the Gaussian stand-in
    (``proposal_statistics`` as the planner calls it for a per-run plan: the chains from draws of the
    approximation, the refit, every batch charged per run at the worst record by the ledger's own charge),
    averaged over 2 runs: the warm-up and as many proposals after it as ``ess`` needs at the simulated ESS per
    proposal (of the whole simulated run, warm-up included: a little pessimistic)."""
    model, lap = ws.model, ws.laplace
    stand_in = StandIn(model, lap.mean, lap.cov, inflate, SD_TOTAL)
    first = proposal_statistics(
        stand_in, np.random.default_rng(seed), ChainSettings(chains=CHAINS, steps=100, offset_cov=offset)
    )
    warmup = realised_warmup(model.d, first.acceptance, MAX_REALISED)
    pen = Penalty(None, sd=SD_TOTAL / math.sqrt(M), max_sensitivity=float(first.cap))
    wr = worst_record_charge(DecisionPlan(kind="mh", penalty=pen), model, VIEW, "add-remove", (alpha,))
    table = wr.table if wr is not None else accept_bit_table(pen.sd or 0.0, VIEW, float(first.cap), (alpha,))
    rhos = []
    for k in range(2):
        run = ChainSettings(
            chains=CHAINS, steps=warmup + math.ceil(ess / (0.2 * CHAINS)), cap=first.cap, offset_cov=offset,
            from_proposal=True, refits=(warmup // 2, warmup), warm_inflate=max(WARM_INFLATE, inflate),
        )  # fmt: skip
        sim = proposal_statistics(
            stand_in, np.random.default_rng(seed + 31 + k), run, rdp_table=table, worst_record=wr
        )
        proposals = CHAINS * warmup + ess / max(sim.ess_per_proposal, 1e-6)
        if sim.run_charge is not None:  # charged per run
            rhos.append(sim.run_charge.at(proposals))
        else:  # per decision (no linear predictor): E[ρ_bit] per decision asked
            assert sim.mean_rho is not None
            rhos.append(sim.asked * sim.mean_rho * proposals)
    return rdp_eps(alpha * mu_warm**2 / 2.0 + float(np.mean(rhos)), alpha, DELTA)


def realised_design(
    name: str, base: Model, n: int, seed: int, ess: float, mu_warms: tuple[float, ...] | None = None
) -> tuple[float, float]:
    """(μ_warm, inflate) for a realised row: the pair whose simulated run (:func:`simulated_realised_eps`:
    the refit and the per-run charge, as the planner prices a per-run plan) buys ``ess`` for the least ε,
    on the design dataset (the same population, other records; nothing released is used). Each pair is
    priced at the order a registry with that budget fixes: first at the best pair's so far, then again at
    ``budget_order`` of what that gave when it differs (a pair priced at another budget's order reads the
    Rényi conversion's overhead of that order: μ_warm = 1 at 10⁶ records read 11.3 at order 2, where its own
    order reads about half). ``mu_warms``: the grid (default :data:`REALISED_MU_WARMS`)."""
    design = registries(base, n, seed + DESIGN_SEED, rare=name == "rare")
    best: tuple[float, float, float] | None = None
    alpha = 2.0
    for mu_warm in mu_warms or REALISED_MU_WARMS:
        ws_try = dp_warm_start(base, design, n, mu_warm, seed + DESIGN_SEED)
        offset = mean_error_cov(warm_plan(base, n, mu_warm), ws_try.model, ws_try.laplace, M)
        for inflate in REALISED_INFLATES:
            eps_try = simulated_realised_eps(ws_try, inflate, offset, seed, ess, mu_warm, alpha)
            own = budget_order(eps_try, DELTA)
            if own != alpha:  # priced again at its own budget's order
                eps_try = simulated_realised_eps(ws_try, inflate, offset, seed, ess, mu_warm, own)
            print(f"  design {name} n={n}: mu_warm {mu_warm:g}, inflate {inflate:g}: eps {eps_try:.3g} "
                  f"(order {own:g})", file=sys.stderr)  # fmt: skip
            if best is None or eps_try < best[0]:
                best = (eps_try, mu_warm, inflate)
                alpha = budget_order(eps_try, DELTA)
    assert best is not None
    return best[1], best[2]


def floor_split(row: dict[str, Any]) -> dict[str, float]:
    """Where a realised row's ratio to the floor comes from: the floor read through a Rényi filter
    (``eps_floor_renyi``: its Gaussian μ_floor converted by ``rdp_eps`` at the best order of the grid, the
    least a Rényi filter could state for it) splits ``floor_ratio`` into the conversion's factor
    (``eps_floor_renyi / eps_floor``: a Rényi filter at a fixed order against the exact GDP conversion of
    the floor) and the sampler's (``eps_renyi / eps_floor_renyi``: its warm start, warm-up and the decisions
    per effective draw, charged per run); ``rho_ratio``: the row's ρ over the floor's at the filter's
    order."""
    floor = float(row["eps_floor"])
    if not (math.isfinite(floor) and floor > 0):
        keys = ("eps_floor_renyi", "conversion_factor", "sampler_factor", "rho_ratio")
        return dict.fromkeys(keys, math.nan)
    mu = gdp_mu(floor, DELTA)
    renyi = min(rdp_eps(a * mu**2 / 2.0, a, DELTA) for a in ORDERS)
    alpha = float(row["renyi_order"])
    rho = float(row["rho_warm_start"]) + float(row["rho_run"])
    return {
        "eps_floor_renyi": renyi,
        "conversion_factor": renyi / floor,
        "sampler_factor": float(row["eps_renyi"]) / renyi,
        "rho_ratio": rho / (alpha * mu**2 / 2.0),
    }


def realised_row(
    name: str,
    n: int,
    seed: int,
    ess_target: float,
    max_iterations: int = MAX_REALISED,
    mu_warms: tuple[float, ...] | None = None,
) -> dict[str, Any]:
    """One row of the realised-ESS figure (``--realised-ess``): the project's default sampler run in memory
    until its realised bulk ESS reaches ``ess_target``, charged as its registries charge it.

    The design choices (μ_warm, inflate) on the design dataset for ``ess_target`` (:func:`realised_design`:
    the refitted run charged per run, simulated), the DP warm start on the registries' records, the cap at
    the 99.9 % quantile of c under the approximation (the planner's); then ``RefitIndependenceMH``
    (``[sampler] refit``, the default with ``proposal = "laplace"``: refitted at half the warm-up and at
    its end, ``refit_warmup`` long at least and 5 acceptances of the DP proposal, then frozen) with the
    confidential decision law. The first block after the warm-up is sized for ``ess_target`` at
    :data:`REALISED_RATE`; while the bulk ESS (ArviZ, over the chains, the frozen kernel's draws) is short
    the chain continues by what its own measured rate says is missing (times :data:`REALISED_MARGIN`, at
    most half the draws kept again), at most :data:`REALISED_ROUNDS` times and ``max_iterations`` in all.
    Every batch asked, warm-up included, is charged by the ledger's own per-run code
    (:class:`ChargedDecisions`) against the coordinator (add-remove); ε is the least budget a registry's
    Rényi filter at δ = 1e-5 admits the warm start and the whole run at (:func:`filter_eps`), also at the
    conventional δ = 1/(10 × the largest registry's records) at the same order where that δ is smaller.
    Beside it: the floor (``mechanisms.floor``) for the realised ESS and for ``ess_target``, the ratio, max
    R-hat, the chain's errors against a converged plain reference and the DP Laplace approximation's alone
    at the same ε (the whole budget on its score releases, ε → μ by the exact GDP conversion)."""
    ref_name, args = MODELS[name]
    assert isinstance(args, dict)
    base = load_model(ref_name, args)
    data = registries(base, n, seed, rare=name == "rare")
    t0 = time.perf_counter()
    mu_warm, inflate = realised_design(name, base, n, seed, ess_target, mu_warms)
    ws = dp_warm_start(base, data, n, mu_warm, seed)
    model = ws.model
    offset = mean_error_cov(warm_plan(base, n, mu_warm), model, ws.laplace, M)
    stats = averaged_statistics(ws, inflate, offset, seed)  # the DP proposal: its acceptance and the cap
    warmup = realised_warmup(model.d, stats.acceptance, max_iterations)
    pen = Penalty(None, sd=SD_TOTAL / math.sqrt(M), max_sensitivity=float(stats.cap))
    decisions = DecisionPlan(model_args=dict(args), kind="mh", penalty=pen)
    wr = worst_record_charge(decisions, model, VIEW, "add-remove", ORDERS)  # None: charged per decision
    checked = [model.check_data(d) for d in data]
    rngs = [SecureRandom(bytes([200 + j, seed % 256]) * 16) for j in range(M)]
    decide = ChargedDecisions(
        LocalParties(model, checked, ConfidentialRule(plaintext_decide, rngs, "sign")), wr, decisions, model
    )
    kernel = RefitIndependenceMH(
        model, decide, ws.laplace.mean, ws.laplace.cov, refits=(warmup // 2, warmup),
        warm_inflate=max(WARM_INFLATE, inflate), inflate=inflate, penalty=pen, m=M,
    )  # fmt: skip
    seeds = PublicSeeds(seed)
    theta0 = GaussianProposal(ws.laplace.mean, ws.laplace.cov).sample(seeds.init_rng(), CHAINS)
    state, trace = run_kernel(kernel, kernel.init(theta0), warmup, seeds)
    warm_acc = trace.accept.mean()
    after_warmup = len(decide.events)
    kept: list[F64] = []
    done, step = warmup, math.ceil(ess_target / (REALISED_RATE * CHAINS))
    ess = rhat = math.nan
    for _ in range(REALISED_ROUNDS + 1):
        step = min(step, max_iterations - done)
        if step <= 0:
            break
        state, trace = run_kernel(kernel, state, step, seeds, first_batch=done)
        kept.append(trace.draws)
        done += step
        ess, rhat = _bulk(np.concatenate(kept).transpose(1, 0, 2))
        print(f"  {name} n={n}: {done} iterations, bulk ESS {ess:.0f}, R-hat {rhat:.3f}", file=sys.stderr)
        if ess >= ess_target:
            break
        post = done - warmup
        step = max(10, math.ceil(post * (REALISED_MARGIN * ess_target / max(ess, 1.0) - 1.0)))
        step = min(step, max(10, post // 2))  # at most half again: a short chain's ESS estimate is noisy
    draws = np.ascontiguousarray(np.concatenate(kept).transpose(1, 0, 2))
    accepted = float(np.mean(np.any(draws[:, 1:] != draws[:, :-1], axis=-1)))  # after the freeze
    events: list[PrivacyEvent] = [GaussianEvent(mu_warm, label="warm start"), *decide.events]
    eps, alpha = filter_eps(events, DELTA)
    largest = max(round(n * float(p)) for p in PROPORTIONS)
    d_conv = 1.0 / (10.0 * largest)
    eps_conv = RDPBudget(eps, d_conv, alpha).spend(events) if d_conv < DELTA else math.nan
    mu2_run = math.fsum(e.count * float(e.mu) ** 2 for e in decide.events)  # type: ignore[attr-defined]
    rho_run = math.fsum(e.count * event_rdp(e, alpha) for e in decide.events)
    per_run_ratio = math.nan  # the per-run charge over the same decisions' per-decision charge
    if wr is not None and decide.state is not None:
        layer = 1 + ORDERS.index(alpha)
        per_run_ratio = float(wr.charged(decide.state)[layer] / decide.state.per_decision[layer])
    fl = floor_of(model, ws.laplace.mean, ws.laplace.cov, "add-remove")
    floor = fl.eps(ess, DELTA) if fl is not None else math.nan
    floor_target = fl.eps(ess_target, DELTA) if fl is not None else math.nan
    row: dict[str, Any] = {
        "model": name,
        "n": n,
        "ess_target": ess_target,
        "eps_renyi": eps,
        "renyi_order": alpha,
        "conventional_delta": d_conv,
        "eps_conventional_delta": eps_conv,
        "eps_gdp": gdp_eps(math.sqrt(mu_warm**2 + mu2_run), DELTA),
        "eps_floor": floor,
        "eps_floor_target": floor_target,
        "floor_ratio": eps / floor if floor > 0 else math.nan,
        "mcmc_ess": ess,
        "ess_reached": bool(ess >= ess_target),
        "mcmc_rhat": rhat,
        "iterations": done,
        "warmup": warmup,
        "chains": CHAINS,
        "decisions": decide.decisions,
        "charged_per": "run, worst record" if wr is not None else "decision",
        "worst_record_ratio_renyi": per_run_ratio,
        # where ρ at the filter's order went: the warm start, the warm-up's decisions (the refit's), the run
        "rho_warm_start": alpha * mu_warm**2 / 2.0,
        "rho_warmup": math.fsum(e.count * event_rdp(e, alpha) for e in decide.events[:after_warmup]),
        "rho_run": rho_run,
        "warmup_acceptance": float(warm_acc),
        "acceptance": accepted,
        "mu_warm": mu_warm,
        "inflate": inflate,
        "cap": float(stats.cap),
    }
    row |= floor_split(row)
    ref = plain_reference(model, data, seed, ReferenceSettings(min_ess=4000.0, chains=16))
    e = errors_of(draws, ref.draws)
    lap = laplace_only(model, data, n, math.sqrt(max(gdp_mu(eps, DELTA) ** 2 - mu_warm**2 * 0.1, 0.0)), seed)
    le = laplace_errors(lap, ref.draws, np.random.default_rng(seed))
    exact, approx = max(e.mean, e.quantile), max(le.mean, le.quantile)
    row |= {
        "mcmc_mean_err": e.mean,
        "mcmc_quantile_err": e.quantile,
        "laplace_mean_err": le.mean,
        "laplace_quantile_err": le.quantile,
        "better": "exact chain" if exact < approx else "DP approximation",
        "reference": ref.label(),
        "seconds": time.perf_counter() - t0,
    }
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, marker in (("logistic", "o"), ("rare", "^"), ("weibull", "s")):
        rs = sorted((r for r in rows if r["model"] == name), key=lambda r: r["n"])
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        ax.plot(
            ns,
            [r["eps_confidential"] for r in rs],
            marker=marker,
            label=f"{name}: confidential accept-reject",
        )
        if all("eps_confidential_renyi" in r for r in rs):
            ax.plot(
                ns,
                [r["eps_confidential_renyi"] for r in rs],
                marker=marker,
                ls=":",
                label=f"{name}: the same, registries with a Renyi filter",
            )
        ax.plot(
            ns,
            [r["eps_plain_penalty"] for r in rs],
            marker=marker,
            ls="--",
            alpha=0.7,
            label=f"{name}: plain penalty (own noise only)",
        )
        if all("eps_worst_record_renyi" in r for r in rs):
            ax.plot(
                ns,
                [r["eps_worst_record_renyi"] for r in rs],
                marker=marker,
                ls="-.",
                label=f"{name}: Renyi filter, charged per run at the worst record",
            )
        if all(math.isfinite(r.get("eps_floor", math.nan)) for r in rs):
            ax.plot(
                ns,
                [r["eps_floor"] for r in rs],
                color="black",
                lw=1.0,
                ls=(0, (1, 1)),
                label=f"{name}: the floor (any exact method, {ESS_TARGET:.0f} effective draws)",
            )
    ax.axhline(3.0, color="grey", lw=0.8, ls=":")
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in all registries (n)")
    ax.set_ylabel("ε per registry at δ = 1e-5 (add-remove, vs coordinator)")
    ax.set_title(f"ε per registry for an exact posterior with ESS ≥ {ESS_TARGET:.0f}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


NOT_RUN = {
    "random-intercept": (
        "not run: a registry random intercept is sampled by the blocked sampler (registry-local blocks, "
        "mechanisms.samplers.blocked), whose decisions its registries charge per decision (the per-run "
        "charge does not apply to a blocked run: DecisionPlan.worst_record_charge) and whose plan is "
        "planning_blocked's; this figure's in-memory chain is the independence sampler's"
    ),
}


def plot_realised(rows: list[dict[str, Any]], path: Path) -> None:
    """ε for the realised ESS and the floor against n (left), their ratio (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name, marker in (("logistic", "o"), ("rare", "^"), ("weibull", "s")):
        rs = sorted((r for r in rows if r["model"] == name and "eps_renyi" in r), key=lambda r: r["n"])
        if not rs:
            continue
        ns = [r["n"] for r in rs]
        line = ax.plot(ns, [r["eps_renyi"] for r in rs], marker=marker, label=f"{name}: exact chain")[0]
        ax.plot(
            ns, [r["eps_floor"] for r in rs], marker=marker, ls=":", color=line.get_color(), alpha=0.8,
            label=f"{name}: the floor for its realised ESS",
        )  # fmt: skip
        bx.plot(ns, [r["floor_ratio"] for r in rs], marker=marker, color=line.get_color(), label=name)
    for a in (ax, bx):
        a.set_xscale("log")
        a.set_xlabel("records in all registries (n)")
        a.grid(True, which="both", alpha=0.3)
    ess = rows[0].get("ess_target", 400.0) if rows else 400.0
    ax.set_yscale("log")
    ax.set_ylabel("ε per registry at δ = 1e-5 (Rényi filter)")
    ax.set_title(f"ε charged for a realised bulk ESS ≥ {ess:.0f}")
    if ax.lines:
        ax.legend(fontsize=7)
        bx.legend(fontsize=8)
    bx.axhline(1.0, color="black", lw=0.8)
    bx.axhline(2.0, color="grey", lw=0.8, ls="--")
    bx.set_ylabel("ratio to the floor (goal ≤ 2, never < 1)")
    bx.set_title("ε over the one-posterior-sample floor")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_realised(args: argparse.Namespace, sizes: list[int], models: list[str]) -> int:
    """``--realised-ess K``: :func:`realised_row` for each size and model, written to realised_essK.csv and
    .png after each row (a model in :data:`NOT_RUN` gets a row that says why)."""
    rows: list[dict[str, Any]] = []
    stem = f"realised_ess{args.realised_ess:g}"
    for n in sizes:  # the smaller sizes of every model first; the files are rewritten after each row
        for name in models:
            if name in NOT_RUN:
                row: dict[str, Any] = {"model": name, "n": n, "note": NOT_RUN[name]}
            else:
                grid = tuple(float(x) for x in args.mu_warms.split(",")) if args.mu_warms else None
                row = realised_row(name, n, args.seed, args.realised_ess, args.max_iterations, grid)
            rows.append(row)
            shown = {
                k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items() if k != "reference"
            }
            print(shown, flush=True)
            keys = sorted({k for r in rows for k in r})
            with open(args.out / f"{stem}.csv", "w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=keys)
                w.writeheader()
                w.writerows(rows)
            plot_realised(rows, args.out / f"{stem}.png")
    print(f"wrote {args.out / stem}.csv and .png")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.registry_scale", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="two sizes of the logistic model, no validation")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated n (default: 1e4 .. 1e6)")
    ap.add_argument("--validate", type=str, default="10000,100000,1000000", help="n at which the chains run")
    ap.add_argument("--models", type=str, default="logistic", help="logistic (default), rare, weibull")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument(
        "--worst-record",
        action="store_true",
        help="also the eps of the same plan charged per run at its worst record ([budget] per_run)",
    )
    ap.add_argument(
        "--realised-ess",
        type=float,
        default=None,
        help="run the default sampler (refit, charged per run at the worst record) until its realised bulk "
        "ESS reaches this; writes realised_essK.csv/.png (models: also random-intercept: a row saying why "
        "not)",
    )
    ap.add_argument("--max-iterations", type=int, default=MAX_REALISED, help="with --realised-ess")
    ap.add_argument(
        "--mu-warms", type=str, default=None, help="with --realised-ess: the warm start's mu grid (1,2,4)"
    )
    args = ap.parse_args(argv)
    sizes = (
        [10_000, 100_000]
        if args.quick
        else ([int(float(s)) for s in args.sizes.split(",")] if args.sizes else list(SIZES))
    )
    validate = set() if args.quick else {int(float(s)) for s in args.validate.split(",") if s}
    models = ["logistic"] if args.quick else args.models.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.realised_ess is not None:
        return main_realised(args, sizes, models)
    rows = []
    for name in models:
        for n in sizes:
            row = one(name, n, n in validate, args.seed, args.worst_record)
            rows.append(row)
            shown = {
                k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items() if k != "reference"
            }
            print(shown, flush=True)
    keys = sorted({k for r in rows for k in r})
    with open(args.out / "registry_scale.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    plot(rows, args.out / "registry_scale.png")
    print(f"wrote {args.out / 'registry_scale.csv'} and {args.out / 'registry_scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
