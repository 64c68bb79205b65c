"""The linear-regression baseline of issue 23 (deliverable 7): at the ε confar's exact sampler needs, what the
noise-aware sufficient-statistics posterior (Bernstein & Sheldon, NeurIPS 2019; :mod:`mechanisms.ssp`) gives.

For Bayesian linear regression with known noise sd (``linear-regression``: intercept + 4 covariates,
σ = 1, N(0, 10²) prior, public bounds |x_k| <= 4, |y| <= 6) and each total n (7 synthetic registries in the
demo's proportions, :func:`simulations.registry_scale.registries`):

1. confar's plan exactly as :func:`simulations.registry_scale.one` computes it for the logistic model (its
   own function, with this model added to its table for the call): the DP warm start (μ_warm among 0.3,
   0.6, 1; moments → covariate ellipsoid, Fisher-scoring releases), the ε at δ = 1e-5 per registry against
   the coordinator (add-remove, GDP) that buys a planned bulk ESS of 200 for the independence penalty
   sampler inside the confidential accept-reject;
2. the exact posterior: conjugate, in closed form, of the records clipped into that ellipsoid (no Monte Carlo
   reference needed for this model);
3. at that ε, for the same clipped records: (a) SSP: the moments release shared with confar (its μ_warm √0.1
   part of μ, the ellipsoid), the rest of μ on one noisy release of (Xᵀy, vech XᵀX); the noise-aware
   posterior and, separately, the naive plug-in; over ``--repeats`` independent noise draws too (their RMS);
   (b) confar's chain run at the planned length (``--validate``; registry_scale's
   :func:`~simulations.registry_scale.confidential_chain`: the sign protocol's decision law in plaintext);
   (c) the DP Laplace approximation alone (registry_scale's
   :func:`~simulations.registry_scale.laplace_only`);
4. SSP alone at smaller ε (``--ssp-eps``): no moments release, the schema's box |x_k| <= 4 as the public
   bound on ‖x̃‖ (looser than the ellipsoid), the whole μ on the release, compared with the exact posterior
   of the records as the box admits them (none clipped into an ellipsoid).

Each is compared with the exact posterior in its sds: mean error = max over parameters of
|mean − exact mean| / exact sd, and the range of sd / exact sd.

Command (about 2 minutes on 2 cores)::

    python -m simulations.ssp_baseline --out docs/privacy_utility/linear --sizes 10000,100000

writes ``ssp_baseline.csv`` and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from hss.randomness import SecureRandom
from mechanisms import ssp
from mechanisms.models import load_model
from mechanisms.models.base import F64
from mechanisms.models.linear import LinearRegression
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from simulations import registry_scale as rs

ARGS: dict[str, Any] = {"p": 4, "sigma": 1.0, "prior_sd": 10.0, "x_bound": 4.0, "y_bound": 6.0}
NAME = "linear"


def errors(mean: F64, sd: F64, exact: ssp.MixturePosterior) -> dict[str, float]:
    """Mean error (max over parameters, in exact sds; ``_own``: in the method's own sds, its calibration) and
    the range of sd / exact sd."""
    esd = exact.sd()
    ratio = np.asarray(sd) / esd
    gap = np.abs(np.asarray(mean) - exact.mean())
    return {
        "mean_err": float(np.max(gap / esd)),
        "mean_err_own": float(np.max(gap / np.asarray(sd))),
        "sd_ratio_min": float(ratio.min()),
        "sd_ratio_max": float(ratio.max()),
    }


def pooled_exact(model: LinearRegression, data: list[dict[str, F64]]) -> ssp.MixturePosterior:
    """The exact posterior of the records as ``model`` checks (clips) them."""
    total = np.sum([ssp.local_statistics(model, d) for d in data], axis=0)
    rel = ssp.SSPRelease.from_total(total, model.d)
    return ssp.exact_posterior(model, rel.u, rel.s)


def ssp_fit(
    model: LinearRegression, data: list[dict[str, F64]], mu: float, key: int, seed: int
) -> tuple[ssp.MixturePosterior, ssp.MixturePosterior]:
    """(noise-aware, naive) posteriors from one release at μ. The registries' noise keys are fixed here so
    that the figures repeat (a simulation; a registry draws its key from the OS)."""
    plan = ssp.plan_for_mu(model, mu, rs.M)
    keys = [SecureRandom.from_key(bytes([key % 256, key // 256 % 256, 77, j]) * 8) for j in range(rs.M)]
    rel = ssp.release(model, data, plan, keys)
    aware = ssp.noise_aware_posterior(model, rel, plan, np.random.default_rng(seed), draws=4000)
    return aware, ssp.naive_posterior(model, rel)


def ssp_columns(
    model: LinearRegression,
    data: list[dict[str, F64]],
    exact: ssp.MixturePosterior,
    mu: float,
    seed: int,
    repeats: int,
    prefix: str,
) -> dict[str, float]:
    row: dict[str, float] = {}
    runs = [ssp_fit(model, data, mu, seed * 1000 + k, seed + k) for k in range(max(repeats, 1))]
    for kind, idx in (("aware", 0), ("naive", 1)):
        es = [errors(r[idx].mean(), r[idx].sd(), exact) for r in runs]
        row |= {f"{prefix}_{kind}_{k}": v for k, v in es[0].items()}
        row[f"{prefix}_{kind}_mean_err_rms"] = float(np.sqrt(np.mean([e["mean_err"] ** 2 for e in es])))
    row[f"{prefix}_aware_weights_ess"] = runs[0][0].ess()
    return row


def one(n: int, validate: bool, seed: int, repeats: int, extra_eps: list[float]) -> dict[str, Any]:
    t0 = time.perf_counter()
    with mock.patch.dict(rs.MODELS, {NAME: ("linear-regression", ARGS)}):
        plan_row = rs.one(NAME, n, False, seed)  # registry_scale's plan for this model, unchanged
    eps, mu_warm, inflate = plan_row["eps_confidential"], plan_row["mu_warm"], plan_row["inflate"]
    base = load_model("linear-regression", ARGS)
    data = rs.registries(base, n, seed)
    ws = rs.dp_warm_start(base, data, n, mu_warm, seed)  # the same warm start (same keys) as the plan's
    model = ws.model
    assert isinstance(model, LinearRegression)
    exact = pooled_exact(model, data)
    mu_total = gdp_mu(eps, rs.DELTA)
    mu_rest = math.sqrt(max(mu_total**2 - 0.1 * mu_warm**2, 0.0))  # the moments release is shared
    row: dict[str, Any] = {
        "n": n,
        "eps": eps,
        "eps_plain_penalty": plan_row["eps_plain_penalty"],
        "mu_total": mu_total,
        "mu_warm": mu_warm,
        "iterations": plan_row["iterations"],
        "rms_delta": plan_row["rms_delta"],
        "ess_per_proposal": plan_row["ess_per_proposal"],
        "acceptance": plan_row["acceptance"],
        "ssp_record_norm": ssp.record_norm_bound(model),
    }
    row |= ssp_columns(model, data, exact, mu_rest, seed, repeats, "ssp")
    if extra_eps:  # SSP alone: the schema's box as the public bound, the whole μ on the one release
        assert isinstance(base, LinearRegression)
        exact_box = pooled_exact(base, data)
        for e in extra_eps:
            mu_e = gdp_mu(e, rs.DELTA)
            row[f"ssp_eps{e:g}_check"] = gdp_eps(
                ssp.ssp_mu(base, ssp.plan_for_mu(base, mu_e, rs.M)), rs.DELTA
            )
            row |= ssp_columns(base, data, exact_box, mu_e, seed, repeats, f"ssp_eps{e:g}")
    lap = rs.laplace_only(model, data, n, mu_rest, seed)
    row |= {f"laplace_{k}": v for k, v in errors(lap.laplace.mean, lap.laplace.sd(), exact).items()}
    if validate:
        import arviz as az

        draws, _, _ = rs.confidential_chain(
            model, data, ws, min(int(plan_row["iterations"]), 3000), plan_row["cap"], seed, inflate
        )
        flat = draws.reshape(-1, draws.shape[-1])
        ds = az.convert_to_dataset(draws)
        row |= {f"mcmc_{k}": v for k, v in errors(flat.mean(axis=0), flat.std(axis=0), exact).items()}
        row["mcmc_rhat"] = float(np.max(az.rhat(ds).to_array().values))
        row["mcmc_ess"] = float(np.min(az.ess(ds, method="bulk").to_array().values))
    row["seconds"] = time.perf_counter() - t0
    return row


def table(rows: list[dict[str, Any]], extra_eps: list[float]) -> str:
    def cell(r: dict[str, Any], p: str) -> str:
        if f"{p}_mean_err" not in r:
            return "—"
        return f"{r[p + '_mean_err']:.3f} / {r[p + '_sd_ratio_min']:.3f}–{r[p + '_sd_ratio_max']:.3f}"

    head = ["n", "ε (confar, ESS 200)", "confar chain", "SSP noise-aware", "SSP naive", "DP Laplace alone"]
    head += [f"SSP noise-aware at ε = {e:g}" for e in extra_eps]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [
            f"{r['n']:,}",
            f"{r['eps']:.3g}",
            cell(r, "mcmc"),
            cell(r, "ssp_aware"),
            cell(r, "ssp_naive"),
        ]
        cells += [cell(r, "laplace")] + [cell(r, f"ssp_eps{e:g}_aware") for e in extra_eps]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.ssp_baseline", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", type=str, default="10000,100000,1000000", help="comma-separated total n")
    ap.add_argument("--validate", type=str, default="10000,100000", help="n at which confar's chain runs")
    ap.add_argument("--ssp-eps", type=str, default="1,3", help="extra ε for SSP alone (comma-separated)")
    ap.add_argument("--repeats", type=int, default=20, help="independent SSP noise draws (RMS column)")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    validate = {int(float(s)) for s in args.validate.split(",") if s}
    extra = [float(s) for s in args.ssp_eps.split(",") if s]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in sizes:
        row = one(n, n in validate, args.seed, args.repeats, extra)
        rows.append(row)
        print({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    keys = sorted({k for r in rows for k in r})
    path = args.out / "ssp_baseline.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    print("cells: max |mean - exact| / exact sd / range of sd / exact sd")
    print(table(rows, extra))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
