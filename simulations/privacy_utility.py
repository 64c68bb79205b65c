"""Privacy against utility for the demo's model and data: the figure and table of ``docs/PRIVACY_UTILITY.md``.

For the demo (``examples/demo.toml``: Bayesian logistic regression, intercept + 4 covariates, 7 synthetic
registries, 11,300 records, 32 chains, adaptive warm-up then an independence sampler, the demo's public
sensitivity cap 2; ``CAPS`` takes more)
it runs, for a range of penalty scales τ and lazy coins γ, the chain in memory with the decision law of the
confidential run (the penalty MH rule with N(0, mσ²) noise and Exp(1); lazy: the MH test AND a γ-coin —
exactly the laws the sign protocol realises, ``mechanisms.samplers``), and reports per configuration:

* utility: acceptance, max rank-normalised split R-hat and min bulk ESS (ArviZ), the posterior error
  max_k |mean_k − mean_k(ref)| / sd_k(ref) against the plain centralised chain on the pooled records, and
  ESS per second at the decision rate ``--rate`` (default: the rate ``make demo`` measured over real daemons);
* privacy: each registry's ε at δ = 1e-5 for the decisions the run asked, from the same ledger events a
  registry charges (``parties/models_bridge.py``), for the threat models q = 0 (the coordinator) and q = 3
  (the demo's: up to t = 3 colluding registries), in each reveal mode the sampler supports (penalty: sum,
  blinded, sign; lazy: sign), and for the penalty the plain figure beside it (the same noise released as
  each registry's noisy term, μ = 1/τ per decision).

Command (about 5 minutes on 2 cores)::

    python -m simulations.privacy_utility --out docs/privacy_utility

writes ``privacy_utility.csv`` and ``privacy_utility.png``. ``--quick`` runs a small grid (for tests).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hss.randomness import SecureRandom
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from mechanisms.privacy import (
    AmplifiedGaussianEvent,
    GaussianEvent,
    ProfileEvent,
    ThreatModel,
    coalition_view,
    compose_events,
    penalty_gdp_mu,
    penalty_step_profile,
    sign_step_profile,
)
from mechanisms.samplers import (
    AdaptiveMH,
    BernoulliRule,
    ConfidentialRule,
    Lazy,
    LazyPlaintextDecide,
    LocalParties,
    Penalty,
    PublicSeeds,
    run_kernel,
)

F64 = npt.NDArray[np.float64]
SIZES = (2400, 800, 1500, 600, 3000, 1100, 1900)
M, T = 7, 3
CAPS = (2.0,)  # the demo's sensitivity cap (smaller caps reject most steps of this model: see the doc)
DELTA = 1e-5
CHAINS, ITERATIONS, STOP = 32, 1100, 300
DEMO_RATE = 390.0  # decisions/s of make demo over 7 daemons (docs/PRIVACY_UTILITY.md says when measured)
TAUS = (0.5, 0.7, 1.0, 1.4, 2.0)
GAMMAS = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class Outcome:
    sampler: str  # "penalty" | "lazy"
    param: float  # tau or gamma
    cap: float  # the public sensitivity cap
    acceptance: float
    rhat: float
    ess: float
    error: float
    decisions: int


def _kernel(model: BayesLogistic, decide: Any, penalty: Penalty | None, lazy: Lazy | None) -> AdaptiveMH:
    return AdaptiveMH(
        model,
        decide,
        0.05**2,
        start=200,
        every=25,
        stop=STOP,
        history_from=150,
        penalty=penalty,
        m=M if penalty is not None else None,
        lazy=lazy,
        final="independence",
    )


@dataclass(frozen=True)
class Size:
    chains: int = CHAINS
    iterations: int = ITERATIONS


def _run(
    model: BayesLogistic, decide: Any, penalty: Penalty | None, lazy: Lazy | None, seed: int, size: Size
) -> Any:
    kernel = _kernel(model, decide, penalty, lazy)
    seeds = PublicSeeds(seed)
    theta0 = 0.1 * model.sample_prior(seeds.init_rng(), size.chains)
    _, trace = run_kernel(kernel, kernel.init(theta0), size.iterations, seeds)
    return trace


def _diagnostics(draws: F64) -> tuple[float, float]:
    import arviz as az

    idata = az.from_dict(posterior={"theta": draws})
    return float(az.rhat(idata)["theta"].max()), float(az.ess(idata)["theta"].min())


def run_grid(
    taus: Sequence[float], gammas: Sequence[float], caps: Sequence[float], seed: int, size: Size = Size()
) -> tuple[list[Outcome], F64, F64]:
    model = BayesLogistic(p=4, prior_sd=2.5, x_bound=3.0)
    data = synthetic_registries(np.random.default_rng(7), model, sizes=SIZES)
    pooled = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
    central = LocalParties(model, [pooled], BernoulliRule(np.random.default_rng(seed)))
    ref = _run(model, central, None, None, seed, size)
    ref_draws = ref.draws[STOP:].reshape(-1, model.d)
    ref_mean, ref_sd = ref_draws.mean(axis=0), ref_draws.std(axis=0)
    out: list[Outcome] = []
    configs = [("penalty", t, c) for c in caps for t in taus]
    configs += [("lazy", g, c) for c in caps for g in gammas]
    for sampler, par, cap in configs:
        t0 = time.perf_counter()
        if sampler == "penalty":
            pen = Penalty(tau=par, alpha=0.0, n=sum(SIZES), max_sensitivity=cap)
            decide = LocalParties(model, data, BernoulliRule(np.random.default_rng(seed + 1)))
            trace = _run(model, decide, pen, None, seed, size)
        else:
            lazy = Lazy(par, cap)
            rngs = [SecureRandom.from_key(hashlib.sha256(b"pu/%d" % j).digest()) for j in range(M)]
            rule = ConfidentialRule(LazyPlaintextDecide(par, np.random.default_rng(seed + 2)), rngs, "sign")
            trace = _run(model, LocalParties(model, data, rule), None, lazy, seed, size)
        post = trace.draws[STOP:].transpose(1, 0, 2)
        rhat, ess_min = _diagnostics(post)
        err = float(np.max(np.abs(post.reshape(-1, model.d).mean(axis=0) - ref_mean) / ref_sd))
        acc = float(trace.accept[STOP:].mean())
        out.append(Outcome(sampler, par, cap, acc, rhat, ess_min, err, int(trace.asked)))
        print(
            f"{sampler} {par:g} cap {cap:g}: acceptance {acc:.3f}, R-hat {rhat:.4f}, bulk ESS {ess_min:.0f}, "
            "error "
            f"{err:.3f} sd, {trace.asked} decisions ({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return out, ref_mean, ref_sd


def epsilons(o: Outcome) -> dict[str, float]:
    """ε at δ = 1e-5 per registry for the decisions ``o`` asked: per reveal mode and threat model."""
    out: dict[str, float] = {}
    for q in (0, T):
        if o.sampler == "penalty":
            for mode in ("sum", "blinded", "sign"):
                view = coalition_view(mode, M, T, q)
                prof = penalty_step_profile(view.observed, o.cap, o.param * o.cap, view.threat)
                ev = AmplifiedGaussianEvent(
                    mu=penalty_gdp_mu(1.0, o.param, view.threat),
                    profile=prof,
                    plain_mu=1.0 / o.param,
                    count=max(o.decisions, 1),
                )
                out[f"{mode}_q{q}"] = compose_events([ev]).eps_at(DELTA)
            plain = GaussianEvent(1.0 / o.param, count=max(o.decisions, 1))
            out[f"plain_q{q}"] = compose_events([plain]).eps_at(DELTA)
        else:
            res = sign_step_profile(o.cap, ThreatModel(M, q), o.param)
            ev_lazy = ProfileEvent(res.profile, count=max(o.decisions, 1))
            out[f"sign_q{q}"] = compose_events([ev_lazy]).eps_at(DELTA)
    return out


def write_outputs(rows: list[dict[str, Any]], out_dir: Path, rate: float, size: Size) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    first = ("sampler", "param", "cap")
    keys = sorted({k for r in rows for k in r}, key=lambda k: (k not in first, k))
    with open(out_dir / "privacy_utility.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    from matplotlib.figure import Figure

    caps = sorted({r["cap"] for r in rows}, reverse=True)
    fig = Figure(figsize=(11.0, 4.6 * len(caps)))
    for i, cap in enumerate(caps):
        ax1, ax2 = fig.add_subplot(len(caps), 2, 2 * i + 1), fig.add_subplot(len(caps), 2, 2 * i + 2)
        _panel(ax1, ax2, [r for r in rows if r["cap"] == cap], rate)
        ax1.set_title(f"sensitivity cap {cap:g}: posterior error", fontsize=9)
        ax2.set_title(f"sensitivity cap {cap:g}: ESS per second", fontsize=9)
    fig.suptitle(
        "demo model and data: privacy against utility "
        f"(penalty τ, lazy γ; {size.chains} × {size.iterations} iterations)"
    )
    fig.savefig(out_dir / "privacy_utility.png", dpi=110, bbox_inches="tight")


def _panel(ax1: Any, ax2: Any, rows: list[dict[str, Any]], rate: float) -> None:
    series = [
        ("penalty", "sign_q3", "penalty, sign (confidential)", "-", "o"),
        ("penalty", "blinded_q3", "penalty, blinded (confidential)", "-", "s"),
        ("penalty", "sum_q3", "penalty, sum (confidential)", "-", "^"),
        ("penalty", "plain_q3", "penalty, plain release", "--", "x"),
        ("lazy", "sign_q3", "lazy MH, sign", "-", "D"),
    ]
    for sampler, col, label, ls, mk in series:
        mine = [r for r in rows if r["sampler"] == sampler]
        pts = sorted((r[col], r["error_sd"], r["ess_per_s"], r["param"]) for r in mine)
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], ls, marker=mk, label=label)
        ax2.plot(xs, [p[2] for p in pts], ls, marker=mk, label=label)
        for p in pts:
            ax1.annotate(f"{'τ' if sampler == 'penalty' else 'γ'}={p[3]:g}", (p[0], p[1]), fontsize=7)
    from matplotlib.ticker import LogFormatterSciNotation, NullFormatter

    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(LogFormatterSciNotation())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("ε per registry at δ = 1e-5 (q = 3 colluding registries)")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("posterior error: max |mean − centralised| / sd")
    ax2.set_ylabel(f"min bulk ESS per second (at {rate:g} decisions/s)")
    ax1.legend(fontsize=7)


def main(argv: Sequence[str] | None = None) -> int:
    doc = (__doc__ or "").split("\n")[0]
    p = argparse.ArgumentParser(prog="python -m simulations.privacy_utility", description=doc)
    p.add_argument("--out", type=Path, default=Path("docs/privacy_utility"))
    p.add_argument("--seed", type=int, default=2025, help="public seed of the chains")
    p.add_argument("--rate", type=float, default=DEMO_RATE, help="decisions/s for ESS per second")
    p.add_argument("--quick", action="store_true", help="a small grid (tests)")
    args = p.parse_args(argv)
    taus: tuple[float, ...] = TAUS
    gammas: tuple[float, ...] = GAMMAS
    caps: tuple[float, ...] = CAPS
    size = Size()
    if args.quick:
        size, taus, gammas, caps = Size(8, 330), (1.0,), (0.5,), (CAPS[0],)
    outcomes, _, _ = run_grid(taus, gammas, caps, args.seed, size)
    rows = []
    for o in outcomes:
        seconds = o.decisions / args.rate
        row: dict[str, Any] = {
            "sampler": o.sampler,
            "param": o.param,
            "cap": o.cap,
            "acceptance": o.acceptance,
            "rhat_max": o.rhat,
            "ess_bulk_min": o.ess,
            "error_sd": o.error,
            "decisions": o.decisions,
            "ess_per_s": o.ess / seconds if seconds > 0 else math.nan,
        }
        row |= epsilons(o)
        rows.append(row)
    write_outputs(rows, args.out, args.rate, size)
    print(f"wrote {args.out / 'privacy_utility.csv'} and {args.out / 'privacy_utility.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
