"""The per-run plan against the registries' ledgers (issue 35 item 2): a planned run charged per run at the
worst record, replayed in memory and charged as its registries charge it, beside the plan's simulated runs.

Given the output directory of a planned ``--simulate`` run (its ``warm_start.json``; the experiment file
beside it or given) it rebuilds the plan from the same DP approximation and prints:

- the DP approximation's realised error (the exact Laplace approximation of the clipped records against its
  mean, in the approximation's sds) against what its DP noise explains (``mean_error_cov``), and the real
  posterior's sds in the approximation's metric;
- ``--runs`` replays of the run: the driver's own kernel (``MHDriver.kernel``: the refit as the run does
  it) on the real records with the sign protocol's decision law in plaintext (every registry's term with its
  penalty noise from a seeded CSPRNG), each iteration's batch charged with the ledger's own increment
  (``WorstRecordCharge``, floored at 0), so a replay's charge is what the registries would have charged that
  run (checked against a daemon run's ledger: the same charge per decision);
- the plan's simulated runs (``mechanisms.planning.proposal_statistics`` as the planner calls it) with the
  stand-in centred at a draw of the DP noise (the plan), at the real posterior's mode and covariance, and at
  the real mode with the approximation's covariance.

Command (after, e.g., the per-run daemon test with ``--basetemp``)::

    python -m simulations.per_run_check OUT_DIR --experiment exp.toml --runs 6 [--no-refit]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from coordinator import planner
from coordinator import warm_start as warm
from coordinator.drivers import MHDriver
from coordinator.experiment import Experiment, load_experiment
from hss.randomness import SecureRandom
from mechanisms.planning import ChainSettings, StandIn, proposal_statistics
from mechanisms.privacy.events import GaussianEvent, RenyiEvent
from mechanisms.privacy.worst_record import RunState, WorstRecordCharge
from mechanisms.samplers import ConfidentialRule, LocalParties, PublicSeeds, plaintext_decide
from mechanisms.samplers.mh import WARM_INFLATE
from mechanisms.samplers.requests import sensitivities
from mechanisms.warmstart import exact_laplace, mean_error_cov
from simulations.run_local import synthetic_data


def replay(
    exp: Experiment, wr: WorstRecordCharge, data: list[dict[str, Any]], seed: int
) -> tuple[float, int, int]:
    """One run of ``exp`` (planned) on ``data``: its registries' per-run charge (μ², the GDP reading of the
    ledger's events), the decisions asked and the proposals accepted."""
    model = exp.model()
    rngs = [SecureRandom(bytes([100 + j, seed % 256]) * 16) for j in range(exp.m)]
    decide = LocalParties(model, data, ConfidentialRule(plaintext_decide, rngs, "sign"))
    driver = MHDriver(exp, PublicSeeds(exp.seed))
    driver.initial()
    kernel = driver.kernel(decide)
    state: Any = driver.mh
    assert exp.budget_target is not None
    run, charged, mu2, asked, accepted = wr.empty(), np.zeros(wr.layers), 0.0, 0, 0
    for k in range(exp.sampler.iterations):
        before = state.theta.copy()
        state, info = kernel.step(driver.seeds.rng(k), state)
        accepted += int(np.sum(info.accept))
        ok = np.isfinite(info.public)  # the decisions asked (the others refused publicly, uncharged)
        if not ok.any():
            continue
        _, delta = sensitivities(model, before[ok], info.theta_star[ok], exp.budget_target.neighbours)
        g = run.grams + wr.grams(before[ok], info.theta_star[ok], delta)
        run = RunState((g + g.transpose(0, 2, 1)) / 2.0, run.per_decision + wr.per_decision(delta),
                       run.decisions + int(ok.sum()))  # fmt: skip
        now = wr.charged(run)
        (event,) = wr.events(np.maximum(now - charged, 0.0), "replay")
        assert isinstance(event, (GaussianEvent, RenyiEvent))  # what a per-run ledger records
        charged, mu2, asked = now, mu2 + float(event.mu) ** 2, asked + int(ok.sum())
    return mu2, asked, accepted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.per_run_check", description=__doc__.split("\n")[0]
    )
    ap.add_argument("out", type=Path, help="the planned run's output directory (its warm_start.json)")
    ap.add_argument("--experiment", type=Path, help="the experiment file (default: OUT/experiment.toml)")
    ap.add_argument("--runs", type=int, default=6, help="replays of the run (secret-noise seeds)")
    ap.add_argument("--no-refit", action="store_true", help="the DP proposal throughout (refit = false)")
    args = ap.parse_args(argv)
    exp = load_experiment(args.experiment or args.out / "experiment.toml")
    result = warm.load_result(args.out)
    if result is None:
        raise SystemExit(f"{args.out}: no warm_start.json (run the planned experiment first)")
    ran = warm.after_warm_start(exp, result)
    model, lap, ws, target = ran.model(), ran.sampler.laplace, ran.warm_start, ran.budget_target
    assert lap is not None and ws is not None and target is not None and ran.sampler.penalty is not None
    p = planner.plan(ran, model, lap)
    planned = planner.planned_experiment(ran, p)
    if args.no_refit:
        planned = dataclasses.replace(planned, sampler=dataclasses.replace(planned.sampler, refit=False))
    length, chains = planned.sampler.iterations, planned.sampler.chains
    cap = planned.sampler.penalty.max_sensitivity if planned.sampler.penalty is not None else None
    wr = planner.worst_record(planned, model, cap)
    if wr is None:
        raise SystemExit("the registries of this experiment charge per decision ([privacy] per_run)")
    data = [model.clip_records(model.check_data(x))[0] for x in synthetic_data(exp)]
    pooled = {k: np.concatenate([x[k] for x in data]) for k in data[0]}
    mode, cov = exact_laplace(model, pooled)
    chol = np.linalg.cholesky(lap.cov)
    offset = mean_error_cov(warm.warm_start_plan(ws, model, ran.m), model, lap, ran.m)
    err = float(np.linalg.norm(np.linalg.solve(chol, mode - lap.mean)))
    noise = float(np.sqrt(np.trace(np.linalg.solve(chol, np.linalg.solve(chol, offset).T))))
    white = np.linalg.solve(chol, np.linalg.solve(chol, cov).T)
    sds = np.sqrt(np.linalg.eigvalsh(0.5 * (white + white.T)))
    predicted = p.decisions_charge(length)
    print(f"plan: {chains} chains x {length} iterations, the decisions' charge mu^2 {predicted:.3f}")
    print(f"the DP approximation's error {err:.2f} of its sds (its DP noise explains {noise:.2f}); the "
          f"posterior's sds {sds.min():.2f}-{sds.max():.2f}x its")  # fmt: skip
    charges = []
    for r in range(args.runs):
        mu2, asked, accepted = replay(planned, wr, data, r)
        charges.append(mu2)
        print(f"  replay {r}: {asked} decisions ({accepted} accepted), charged mu^2 {mu2:.3f} "
              f"({mu2 / predicted:.2f}x the plan)")  # fmt: skip
    c = np.array(charges)
    if c.size > 1:
        lo, hi = c.min() / predicted, c.max() / predicted
        print(f"replays: {c.mean():.3f} +- {c.std(ddof=1):.3f}, {lo:.2f}-{hi:.2f}x the plan")
    refits = MHDriver(planned, PublicSeeds(planned.seed)).refits or ()  # the run's own refits
    warm_inflate = max(WARM_INFLATE, ws.inflate)
    sd_total = ran.sampler.penalty.sd * np.sqrt(ran.m) if ran.sampler.penalty.sd is not None else 0.0
    stand_in = StandIn(model, lap.mean, lap.cov, ws.inflate, sd_total, target.neighbours)
    run = ChainSettings(
        chains=chains, steps=length, cap=cap, from_proposal=True, refits=refits, warm_inflate=warm_inflate
    )
    stand_ins: list[tuple[str, ChainSettings]] = [
        ("the plan's (the DP noise drawn)", dataclasses.replace(run, offset_cov=offset)),
        ("the real mode and covariance", dataclasses.replace(run, target=(mode, cov))),
        ("the real mode, the DP covariance", dataclasses.replace(run, target=(mode, lap.cov))),
    ]
    for label, settings in stand_ins:
        sims = [
            proposal_statistics(
                stand_in, np.random.default_rng(ran.seed + 10 + s), settings, worst_record=wr
            ).run_charge
            for s in range(1, 7)
        ]
        v = np.array([rc.at(chains * length) for rc in sims if rc is not None])
        print(f"  simulated runs, stand-in at {label:<34} {v.mean():.3f} +- {v.std(ddof=1):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
