"""``confar bench mcmc``: confidential MH on real party daemons vs plain centralized MH on the pooled data.

Default (issue 4): 7 registries, Bayesian logistic regression with d = 5 (intercept + 4 covariates),
10,000 records each, 16 chains × 2,000 iterations, sign reveal, ``confar-party`` processes on loopback with
mutual TLS (mesh). In the same run, the same kernel (adaptive random-walk MH, same schedule, same public
seed) runs in plain numpy on the pooled records with the Bernoulli rule. Reported for both: wall time,
acceptance rate, ESS (Geyer initial monotone sequence, multi-chain: ``mechanisms.samplers.diagnostics``)
over the draws after adaptation stops, ESS per second; the wall-time ratio; and the difference of the two
posterior means in units of their combined MCSE. Daemon start-up and session set-up are timed separately
and excluded from the confidential wall time.

Adaptation schedule (``AdaptiveMH``): start = iterations/10, every = iterations/40, stop = iterations/2,
history from iterations/20; ESS counts the last half only. Run it small while developing, e.g.
``confar bench mcmc --iterations 200 --chains 8 --records 1000 --json /tmp/mcmc.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from mechanisms.samplers import (
    AdaptiveMH,
    BernoulliRule,
    LocalParties,
    PublicSeeds,
    Trace,
    ess,
    mcse_mean,
    run_kernel,
)
from mechanisms.samplers.decision import Decider
from simulations.bench_records import run_meta

HELP = "confidential MH (logistic regression) on local party daemons vs plain centralized MH"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, help="write the record to this JSON file")
    p.add_argument("--parties", type=int, default=7, help="registries m (default 7)")
    p.add_argument("--records", type=int, default=10_000, help="records per registry (default 10000)")
    p.add_argument("--covariates", type=int, default=4, help="covariates p, d = p + 1 (default 4)")
    p.add_argument("--chains", type=int, default=16, help="chains = decisions per round (default 16)")
    p.add_argument("--iterations", type=int, default=2000, help="MH iterations per chain (default 2000)")
    p.add_argument("--mode", choices=("sum", "blinded", "sign"), default="sign", help="reveal (default sign)")
    p.add_argument("--topology", choices=("mesh", "relay"), default="mesh")
    p.add_argument("--seed", type=int, default=2025, help="public root seed (data, starts, proposals)")
    p.add_argument("--insecure", action="store_true", help="plaintext gRPC (not the benchmark's setting)")


def make_kernel(model: BayesLogistic, decide: Decider, iterations: int) -> AdaptiveMH:
    return AdaptiveMH(
        model,
        decide,
        init_cov=(0.1**2) * np.eye(model.d),
        start=max(iterations // 10, 1),
        every=max(iterations // 40, 1),
        stop=max(iterations // 2, 2),
        history_from=iterations // 20,
    )


def summarise(trace: Trace, wall_s: float, keep_from: int) -> dict[str, Any]:
    draws = trace.draws[keep_from:]
    e = ess(draws)
    return {
        "wall_s": round(wall_s, 3),
        "acceptance": round(trace.acceptance_rate, 4),
        "ess_min": round(float(e.min()), 1),
        "ess_mean": round(float(e.mean()), 1),
        "ess_min_per_s": round(float(e.min()) / wall_s, 2),
        "posterior_mean": [round(float(v), 5) for v in draws.reshape(-1, draws.shape[2]).mean(axis=0)],
        "mcse": [round(float(v), 5) for v in mcse_mean(draws)],
    }


def run(args: argparse.Namespace) -> int:
    from coordinator.api import SessionError
    from simulations.launcher import LaunchError

    m = args.parties
    if not 3 <= m <= 15 and args.mode != "sum":
        print("confar bench mcmc: --parties must be in 3..15 (2 works with --mode sum only)", file=sys.stderr)
        return 2
    if args.iterations < 20 or args.chains < 2 or args.records < 10:
        print("confar bench mcmc: need --iterations >= 20, --chains >= 2, --records >= 10", file=sys.stderr)
        return 2
    model = BayesLogistic(p=args.covariates)
    seeds = PublicSeeds(args.seed)
    data = synthetic_registries(seeds.rng(0, party=1), model, sizes=(args.records,) * m)
    pooled = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
    theta0 = 0.1 * model.sample_prior(seeds.init_rng(), args.chains)
    keep_from = max(args.iterations // 2, 2)

    # plain centralized MH on the pooled records (the same kernel and public seed)
    plain = LocalParties(model, [pooled], BernoulliRule(seeds.rng(0, party=99)))
    k_plain = make_kernel(model, plain, args.iterations)
    t0 = time.perf_counter()
    _, tr_plain = run_kernel(k_plain, k_plain.init(theta0), args.iterations, seeds)
    plain_s = time.perf_counter() - t0
    rec_plain = summarise(tr_plain, plain_s, keep_from)
    print(
        f"plain   {plain_s:8.2f} s  acceptance {rec_plain['acceptance']:.3f}  "
        f"ESS/s {rec_plain['ess_min_per_s']}"
    )

    try:
        conf = _run_confidential(args, model, data, theta0, seeds)
    except (SessionError, LaunchError) as exc:
        print(f"confar bench mcmc: {exc}", file=sys.stderr)
        return 1
    rec_conf = summarise(conf.trace, conf.wall_s, keep_from)
    rec_conf["rounds_per_step"] = round(conf.decider.rounds / max(conf.decider.calls, 1), 2)
    rec_conf["decisions_per_s"] = round(conf.decider.decisions / conf.wall_s, 1)
    print(
        f"confid. {conf.wall_s:8.2f} s  acceptance {rec_conf['acceptance']:.3f}  "
        f"ESS/s {rec_conf['ess_min_per_s']}"
    )
    record = _record(args, model, keep_from, conf, rec_conf, rec_plain, plain_s)
    print(
        f"wall ratio {record['wall_ratio']}x, plain/confidential ESS/s {record['ess_per_s_ratio']}x, "
        f"max |mean diff| = {record['max_mean_diff_in_mcse']} MCSE"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


@dataclass(frozen=True)
class _Confidential:
    """The confidential run's trace and timings, and the decider that counted its rounds and decisions."""

    trace: Trace
    wall_s: float
    startup_s: float
    session_s: float
    decider: Any  # coordinator.decider.NetworkDecider (imported lazily)


def _run_confidential(
    args: argparse.Namespace, model: BayesLogistic, data: list[Any], theta0: Any, seeds: PublicSeeds
) -> _Confidential:
    """The same kernel and seed with the decisions made by m daemons on loopback."""
    from coordinator.api import BlockingCoordinator, SessionOptions
    from coordinator.decider import NetworkDecider
    from simulations.launcher import LocalConsortium

    margs = {"p": args.covariates}
    t0 = time.perf_counter()
    with LocalConsortium.start(
        args.parties,
        data,
        insecure=args.insecure,
        models=("bayes-logistic",),
        modes=(args.mode,),
        data_model="bayes-logistic",
        data_model_args=margs,
    ) as lc:
        startup_s = time.perf_counter() - t0
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            t0 = time.perf_counter()
            sess = coord.open_session(SessionOptions(
                reveal_mode=args.mode,
                model="bayes-logistic",
                model_params={"model_args": margs, "kind": "mh"},
                topology=args.topology,
            ))
            session_s = time.perf_counter() - t0
            dec = NetworkDecider(sess)
            k_conf = make_kernel(model, dec, args.iterations)
            t0 = time.perf_counter()
            _, tr_conf = run_kernel(k_conf, k_conf.init(theta0), args.iterations, seeds)
            conf_s = time.perf_counter() - t0
            sess.close()
    return _Confidential(tr_conf, conf_s, startup_s, session_s, dec)


def _record(
    args: argparse.Namespace,
    model: BayesLogistic,
    keep_from: int,
    conf: _Confidential,
    rec_conf: dict[str, Any],
    rec_plain: dict[str, Any],
    plain_s: float,
) -> dict[str, Any]:
    """The suite's JSON record: settings, both runs' summaries and how they compare."""
    diff = np.abs(np.subtract(rec_conf["posterior_mean"], rec_plain["posterior_mean"]))
    combined = np.hypot(rec_conf["mcse"], rec_plain["mcse"])
    return {
        "suite": "mcmc",
        "model": "bayes-logistic",
        "parties": args.parties,
        "records_per_party": args.records,
        "d": model.d,
        "chains": args.chains,
        "iterations": args.iterations,
        "ess_from_iteration": keep_from,
        "mode": args.mode,
        "topology": args.topology,
        "mtls": not args.insecure,
        "startup_s": round(conf.startup_s, 2),
        "session_setup_s": round(conf.session_s, 3),
        "confidential": rec_conf,
        "plain": rec_plain,
        "wall_ratio": round(conf.wall_s / plain_s, 2),
        "ess_per_s_ratio": round(rec_plain["ess_min_per_s"] / max(rec_conf["ess_min_per_s"], 1e-12), 2),
        "max_mean_diff_in_mcse": round(float((diff / combined).max()), 2),
        **run_meta(),
    }
