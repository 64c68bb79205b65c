"""What the replace-one range buys an experiment's decisions (issue 35 item 3.4): the charge before (twice the
add-remove bound, the sampler's c) and after (``requests.step_sensitivity``: the log-ratio's own range).

For the experiment's model on its ``[simulate]`` registries (box alone, then box and the covariate ellipsoid
that the exact moments would give at the warm start's quantile), pairs as an independence sampler makes
them: the chain's state θ from N(mode, cov) of the exact Laplace approximation of the clipped records, the
proposal θ* from N(mode, inflate² cov); the decisions inside the cap are compared one by one and as a GDP μ
(the root of the sum of squares). Prints the ratios old/new.

Command::

    python -m simulations.replace_one_check examples/demo.toml --pairs 4000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from coordinator.experiment import load_experiment
from mechanisms.samplers.requests import record_sensitivity, step_sensitivity
from mechanisms.warmstart import covariate_moments, exact_laplace, with_ellipsoid
from simulations.run_local import synthetic_data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("experiment", type=Path)
    ap.add_argument("--pairs", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    exp = load_experiment(args.experiment)
    ws = exp.warm_start
    if exp.simulate is None or ws is None or exp.sampler.penalty is None:
        raise SystemExit(f"{args.experiment}: needs [simulate], [warm_start] and the penalty sampler")
    data = synthetic_data(exp)
    box = exp.model()
    n = sum(box.n_records(d) for d in data)
    models = [("box", box)]
    if ws.ellipsoid is not None:
        total = np.sum([covariate_moments(box, d) for d in data], axis=0)
        models.append(("box and ellipsoid", with_ellipsoid(box, total, n, ws.ellipsoid)))
    cap = exp.sampler.penalty.max_sensitivity
    rng = np.random.default_rng(args.seed)
    for name, model in models:
        pooled = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
        clipped, _ = model.clip_records(pooled)  # type: ignore[attr-defined]
        mode, cov = exact_laplace(model, clipped)
        chol = np.linalg.cholesky(cov)
        theta = mode + rng.standard_normal((args.pairs, model.d)) @ chol.T
        star = mode + ws.inflate * rng.standard_normal((args.pairs, model.d)) @ chol.T
        old = record_sensitivity(model, theta, star)
        ok = old <= (np.inf if cap is None else cap)
        new = step_sensitivity(model, theta[ok], star[ok], "replace-one")
        r = old[ok] / new
        mu = float(np.sqrt(np.sum(old[ok] ** 2) / np.sum(new**2)))
        print(
            f"{name}: {int(ok.sum())} of {args.pairs} pairs inside the cap; per decision old/new median "
            f"{np.median(r):.3f} (5-95 % {np.percentile(r, 5):.3f}-{np.percentile(r, 95):.3f}, "
            f"min {r.min():.3f}, max {r.max():.3f}); GDP mu old/new {mu:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
