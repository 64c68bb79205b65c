"""Proposals that survive a poor approximation (issue 35 item 4), measured: ESS per proposal of the
independence sampler from the exact Laplace approximation, from the DP warm start's approximation, and from
the proposal refitted to the chains' own states in the warm-up (``mechanisms.samplers.RefitIndependenceMH``),
each with the confidential decision law (every registry's term with its noise, the penalty and the Exp(1)
shares, decided in plaintext: the law the sign protocol realises), on the registry-scale figure's models and
registries (``simulations.registry_scale``)::

    python -m simulations.refit_check rare 100000 --mu-warm 1
    python -m simulations.refit_check weibull 10000 --mu-warm 2

prints the DP warm start's offset from the exact mode (in posterior sds) and, per proposal, the acceptance,
bulk ESS and ESS per proposal of ``--chains`` chains (16) x ``--steps`` iterations after the warm-up, and max
R-hat.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from hss.randomness import SecureRandom
from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.samplers import (
    ConfidentialRule,
    GaussianProposal,
    IndependenceMH,
    LocalParties,
    PublicSeeds,
    RefitIndependenceMH,
    plaintext_decide,
    run_kernel,
)
from mechanisms.samplers.requests import Penalty, record_sensitivity
from mechanisms.warmstart import exact_laplace
from simulations import registry_scale as rs

CHAINS = 16


def _cap(model: Model, mean: F64, cov: F64, inflate: float) -> float:
    rng = np.random.default_rng(0)
    chol = np.linalg.cholesky(cov)
    t0 = mean + rng.standard_normal((5000, model.d)) @ chol.T
    t1 = mean + inflate * rng.standard_normal((5000, model.d)) @ chol.T
    return float(np.quantile(record_sensitivity(model, t0, t1), 0.999))


def _ess(draws: F64) -> tuple[float, float]:
    import arviz as az

    ds = az.convert_to_dataset(draws.transpose(1, 0, 2))
    return (
        float(np.min(az.ess(ds, method="bulk").to_array().values)),
        float(np.max(az.rhat(ds).to_array().values)),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulations.refit_check", description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=sorted(rs.MODELS))
    ap.add_argument("n", type=int, help="records in all (7 registries in the demo's proportions)")
    ap.add_argument("--mu-warm", type=float, default=1.0, help="the DP warm start's GDP mu")
    ap.add_argument("--steps", type=int, default=300, help="iterations after the warm-up")
    ap.add_argument("--warmup", type=int, default=60, help="warm-up iterations of the refitted proposal")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--chains", type=int, default=CHAINS)
    ap.add_argument("--refit-only", action="store_true", help="only the refitted proposal's chains")
    args = ap.parse_args(argv)
    ref_name, model_args = rs.MODELS[args.model]
    assert isinstance(model_args, dict)
    base = load_model(str(ref_name), model_args)
    data = rs.registries(base, args.n, args.seed, rare=args.model == "rare")
    ws = rs.dp_warm_start(base, data, args.n, args.mu_warm, args.seed)
    model = ws.model
    checked = [model.check_data(d) for d in data]
    pooled, _ = model.clip_records({k: np.concatenate([d[k] for d in checked]) for k in checked[0]})
    mode, cov = exact_laplace(model, pooled)
    chol = np.linalg.cholesky(cov)
    off = float(np.linalg.norm(np.linalg.solve(chol, ws.laplace.mean - mode)))
    print(
        f"{args.model}, n = {args.n}, mu_warm = {args.mu_warm:g}: the DP mean is {off:.2f} posterior sd "
        "from the exact mode"
    )
    m, sd_total = rs.M, rs.SD_TOTAL

    def run(label: str, kernel_of: object, warm: int) -> None:
        rngs = [SecureRandom(bytes([200 + j, args.seed % 256]) * 16) for j in range(m)]
        decide = LocalParties(model, checked, ConfidentialRule(plaintext_decide, rngs, "sign"))
        kernel = kernel_of(decide)  # type: ignore[operator]
        seeds = PublicSeeds(args.seed)
        start = GaussianProposal(ws.laplace.mean, ws.laplace.cov).sample(seeds.init_rng(), args.chains)
        t0 = time.perf_counter()
        state, trace = run_kernel(kernel, kernel.init(start), warm + args.steps, seeds)
        draws = trace.draws[warm:]
        ess, rhat = _ess(draws)
        acc = float(trace.accept[warm:].mean())
        per = ess / (args.steps * args.chains)
        took = time.perf_counter() - t0
        print(f"  {label:<44} acceptance {acc:.3f}, ESS {ess:5.0f} ({per:.3f} per proposal), R-hat {rhat:.3f}"
              f" [{took:.0f} s]")  # fmt: skip
        if hasattr(state, "mean"):  # the refitted proposal: where its frozen centre sits
            to_mode = np.linalg.norm(np.linalg.solve(chol, state.mean - mode))
            moved = np.linalg.norm(np.linalg.solve(chol, state.mean - ws.laplace.mean))
            print(f"  its frozen centre moved {moved:.2f} posterior sd, {to_mode:.2f} sd off the exact mode")

    def indep(mean: F64, c: F64) -> object:
        pen = Penalty(None, sd=sd_total / math.sqrt(m), max_sensitivity=_cap(model, mean, c, 1.1))
        return lambda decide: IndependenceMH(
            model, decide, GaussianProposal(mean, 1.1**2 * c), penalty=pen, m=m
        )

    if not args.refit_only:
        run("exact Laplace, inflate 1.1", indep(mode, cov), 30)
        run("DP Laplace, inflate 1.1", indep(ws.laplace.mean, ws.laplace.cov), 30)
    pen = Penalty(
        None, sd=sd_total / math.sqrt(m), max_sensitivity=_cap(model, ws.laplace.mean, ws.laplace.cov, 1.5)
    )
    w = args.warmup
    run(
        f"refitted at {w // 2} and {w}, then frozen",
        lambda decide: RefitIndependenceMH(
            model, decide, ws.laplace.mean, ws.laplace.cov, refits=(w // 2, w), penalty=pen, m=m
        ),
        w,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
