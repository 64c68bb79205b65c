"""The plan against the realised chain (issue 23): why the budget-first plan's ESS was optimistic, split into
its causes on one registry_scale case.

For a model and n (the same data, DP warm start, μ_warm / inflate choice and plan as
``simulations.registry_scale``), it prints:

- the DP approximation's offset from the measured posterior (the converged plain reference) in the
  approximation's metric, against the offset the plan assumes (its DP noise: ``mean_error_cov``), and the
  same for the exact Laplace approximation of the clipped records (mode against posterior mean: skew);
- the plan's acceptance and ESS per proposal (the Gaussian stand-in with a drawn DP offset), and the same
  simulation with the measured posterior's moments as the stand-in (the realised offset, Gaussian);
- the realised chain (the confidential decision law, in memory) from the DP approximation with the planned
  inflate, from the exact Laplace approximation, and without penalty noise: acceptance, ESS per proposal
  after the warm-up, R-hat.

Command::

    python -m simulations.plan_check --model rare --n 100000
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from typing import Any

import numpy as np

from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.planning import ChainSettings, StandIn, proposal_statistics, warmup_of
from mechanisms.samplers import (
    ConfidentialRule,
    GaussianProposal,
    IndependenceMH,
    LocalParties,
    PublicSeeds,
    plaintext_decide,
    run_kernel,
)
from mechanisms.samplers.requests import Penalty
from mechanisms.warmstart import LaplaceApproximation, exact_laplace, mean_error_cov
from simulations import registry_scale as rs
from simulations.reference import ReferenceSettings, plain_reference


def realised(
    model: Model,
    data: list[dict[str, F64]],
    lap: LaplaceApproximation,
    inflate: float,
    iterations: int,
    cap: float,
    seed: int,
    sd_total: float = rs.SD_TOTAL,
    warmup: int | None = None,
) -> dict[str, float]:
    """The chain with the confidential decision law: acceptance, bulk ESS after ``warmup``, R-hat."""
    import arviz as az

    checked = [model.check_data(d) for d in data]
    from hss.randomness import SecureRandom

    rngs = [SecureRandom(bytes([200 + j, seed % 256]) * 16) for j in range(rs.M)]
    decide = LocalParties(model, checked, ConfidentialRule(plaintext_decide, rngs, "sign"))
    penalty = Penalty(None, sd=sd_total / math.sqrt(rs.M), max_sensitivity=cap)
    prop = GaussianProposal(lap.mean, inflate**2 * lap.cov)
    kernel = IndependenceMH(model, decide, prop, penalty=penalty, m=rs.M)
    seeds = PublicSeeds(seed)
    theta0 = GaussianProposal(lap.mean, lap.cov).sample(seeds.init_rng(), rs.CHAINS)
    _, trace = run_kernel(kernel, kernel.init(theta0), iterations, seeds)
    w = warmup if warmup is not None else max(iterations // 10, 17)
    draws = np.ascontiguousarray(trace.draws[w:].transpose(1, 0, 2))
    ds = az.convert_to_dataset(draws)
    ess = float(np.min(az.ess(ds, method="bulk").to_array().values))
    return {
        "acceptance": float(trace.accept[w:].mean()),
        "ess": ess,
        "ess_per_proposal": ess / (rs.CHAINS * (iterations - w)),
        "rhat": float(np.max(az.rhat(ds).to_array().values)),
    }


def offset_sd(lap: LaplaceApproximation, at: F64) -> float:
    z = np.linalg.solve(np.linalg.cholesky(lap.cov), at - lap.mean)
    return float(np.sqrt(z @ z))


def check(name: str, n: int, seed: int, iterations: int | None) -> dict[str, Any]:
    ref_name, args = rs.MODELS[name]
    assert isinstance(args, dict)
    base = load_model(ref_name, args)
    data = rs.registries(base, n, seed, rare=name == "rare")
    best: Any = None
    for mu_warm in rs.MU_WARMS:  # registry_scale's choice, from public numbers
        ws_try = rs.dp_warm_start(base, data, n, mu_warm, seed)
        offset = mean_error_cov(rs.warm_plan(base, n, mu_warm), ws_try.model, ws_try.laplace, rs.M)
        for inflate in rs.INFLATES:
            st = rs.averaged_statistics(ws_try, inflate, offset, seed)
            eps_try, _ = rs.eps_for_ess(st, rs.M, rs.ESS_TARGET, mu_warm)
            if best is None or eps_try < best[0]:
                best = (eps_try, ws_try, st, mu_warm, inflate, offset)
    _, ws, stats, mu_warm, inflate, offset = best
    model = ws.model
    _, first = rs.eps_for_ess(stats, rs.M, rs.ESS_TARGET, mu_warm)
    steps = max(50, first - math.ceil(5.0 / max(stats.acceptance, 1e-3)))
    short = rs.averaged_statistics(ws, inflate, offset, seed + 7, steps=steps)
    stats = dataclasses.replace(stats, ess_per_proposal=short.ess_per_proposal)
    _, planned_it = rs.eps_for_ess(stats, rs.M, rs.ESS_TARGET, mu_warm)
    it = iterations or min(planned_it, 3000)
    ref = plain_reference(model, data, seed, ReferenceSettings(min_ess=4000.0, chains=16))
    flat = ref.draws.reshape(-1, model.d)
    post = (flat.mean(axis=0), np.cov(flat.T))
    checked = [model.check_data(d) for d in data]
    pooled = {k: np.concatenate([d[k] for d in checked]) for k in checked[0]}
    exact = LaplaceApproximation(*exact_laplace(model, pooled))
    noise_sd = float(np.sqrt(np.trace(offset @ np.linalg.inv(ws.laplace.cov))))
    out: dict[str, Any] = {
        "model": name,
        "n": n,
        "mu_warm": mu_warm,
        "inflate": inflate,
        "iterations": it,
        "planned_iterations": planned_it,
        "dp_offset_sd (from posterior mean)": offset_sd(ws.laplace, post[0]),
        "dp_offset_sd predicted (rms, DP noise)": noise_sd,
        "dp_offset_sd from exact Laplace mode": offset_sd(ws.laplace, exact.mean),
        "exact mode offset_sd from posterior mean": offset_sd(exact, post[0]),
        "sd ratio posterior/dp (min,max)": (
            float(np.min(np.sqrt(np.diag(post[1]) / np.diag(ws.laplace.cov)))),
            float(np.max(np.sqrt(np.diag(post[1]) / np.diag(ws.laplace.cov)))),
        ),
        "plan: acceptance, ess/proposal": (stats.acceptance, stats.ess_per_proposal),
        "plan ESS at these iterations": rs.CHAINS * (it - warmup_of(stats, it)) * stats.ess_per_proposal,
    }

    def stand_in(target: tuple[F64, F64]) -> tuple[float, float]:
        runs = [
            proposal_statistics(
                StandIn(model, ws.laplace.mean, ws.laplace.cov, inflate, rs.SD_TOTAL),
                np.random.default_rng(seed * 100 + k),
                ChainSettings(chains=rs.CHAINS, steps=steps, cap=stats.cap, target=target),
            )
            for k in range(3)
        ]
        return float(np.mean([r.acceptance for r in runs])), float(
            np.mean([r.ess_per_proposal for r in runs])
        )

    out["sim, stand-in = posterior moments: acceptance, ess/proposal"] = stand_in(post)
    out["sim, stand-in = exact Laplace: acceptance, ess/proposal"] = stand_in((exact.mean, exact.cov))
    cap = stats.cap
    out["chain as registry_scale ran it (inflate 1)"] = realised(model, data, ws.laplace, 1.0, it, cap, seed)
    out["chain, DP proposal, planned inflate"] = realised(model, data, ws.laplace, inflate, it, cap, seed)
    out["chain, exact Laplace proposal"] = realised(model, data, exact, inflate, it, cap, seed)
    out["chain, DP proposal, no penalty noise"] = realised(
        model, data, ws.laplace, inflate, it, cap, seed, sd_total=1e-6
    )
    out["chain, DP proposal, 4x planned length"] = realised(
        model, data, ws.laplace, inflate, 4 * it, cap, seed
    )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.plan_check")
    ap.add_argument("--model", default="rare")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    for k, v in check(args.model, args.n, args.seed, args.iterations).items():
        if isinstance(v, dict):
            v = ", ".join(f"{a} {b:.4g}" for a, b in v.items())
        elif isinstance(v, tuple):
            v = ", ".join(f"{b:.4g}" for b in v)
        elif isinstance(v, float):
            v = f"{v:.4g}"
        print(f"{k}: {v}", flush=True)
    print(f"seconds: {time.perf_counter() - t0:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
