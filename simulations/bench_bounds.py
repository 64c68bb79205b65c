"""Time a model's per-record bound on a batch of decisions (the per-decision charge's own work, issue 23):
``python -m simulations.bench_bounds [--batch 16] [--repeats 200]``. Prints milliseconds per batch (the
least of 5 rounds of ``--repeats`` calls) for the Weibull model (box; box and ellipsoid: the joint bound of
``mechanisms.models.weibull_bound``) and for logistic regression beside it."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from mechanisms.models import load_model

CASES: dict[str, tuple[str, dict[str, Any], list[float]]] = {
    "weibull, box": ("weibull-regression", {"p": 2, "t_max": 3.0}, [0.34, 1.49, 0.39, -0.30]),
    "weibull, box and ellipsoid": (
        "weibull-regression",
        {"p": 2, "t_max": 3.0, "x_center": [0.1, -0.2], "x_cov": [[1.0, 0.3], [0.3, 1.2]], "x_radius": 3.0},
        [0.34, 1.49, 0.39, -0.30],
    ),
    "logistic, box": ("bayes-logistic", {"p": 4}, [-1.0, 0.8, -0.4, 0.3, -0.2]),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.bench_bounds", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    for name, (model_name, params, mode) in CASES.items():
        model = load_model(model_name, params)
        a = np.asarray(mode) + 0.02 * rng.standard_normal((args.batch, len(mode)))
        b = a + 0.02 * rng.standard_normal(a.shape)
        model.record_ratio_bound(a, b)  # warm caches
        best = np.inf
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(args.repeats):
                model.record_ratio_bound(a, b)
            best = min(best, (time.perf_counter() - t0) / args.repeats)
        print(f"{name}: {best * 1e3:.3f} ms per batch of {args.batch} decisions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
