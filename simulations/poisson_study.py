"""The Poisson rate study of issue 24: deaths over person-years in four simulated registries.

A first study as a registry statistician would set it up (examples/poisson-rate.toml as a formula,
examples/poisson-rate-plugin.toml as a hand-written plug-in, examples/poisson-rate.ipynb from a notebook):
record i of registry j has an age (years, 20-90), a sex (0/1), a serum creatinine (mg/dL, 0.4-10), a
follow-up of t_i person-years (0.2-10) and a count of deaths d_i (0-8, a public cap; a cohort of
kidney-disease patients with repeated hospital deaths is not the point, the count model is), with

    d_i ~ Poisson(t_i exp(β_0 + β_age age_i + β_sex sex_i + β_creat creatinine_i + u_j)),

u_j a registry effect (case mix) that the pooled fixed-effects model does not know about, unless written
``(1 | registry)``. The truth here: β = (−7.0, 0.05, 0.3, 0.15), u_j ~ N(0, 0.25²) (public seed).

    python -m simulations.poisson_study --out examples/poisson    # writes registry-1.csv ... registry-4.csv

Public synthetic data: nothing here is a registry's record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

SIZES = (1500, 900, 1200, 700)
BETA = (-7.0, 0.05, 0.3, 0.15)
U_SD = 0.25
DEATHS_MAX = 8
COLUMNS = {  # the public bounds every registry declares (the experiment's [model] columns say the same)
    "age": (20.0, 90.0),
    "sex": (0.0, 1.0),
    "creatinine": (0.4, 10.0),
    "person_years": (0.2, 10.0),
    "deaths": (0.0, float(DEATHS_MAX)),
}


def registries(seed: int = 2024, sizes: tuple[int, ...] = SIZES) -> list[dict[str, F64]]:
    """One dict of columns per registry (ages and kidney function differ by registry, as case mixes do)."""
    rng = np.random.default_rng(seed)
    out = []
    for j, n in enumerate(sizes, start=1):
        age = np.clip(rng.normal(60.0 + rng.normal(0.0, 4.0), 12.0, n), *COLUMNS["age"]).round(1)
        sex = (rng.random(n) < 0.45).astype(np.float64)
        creat = np.clip(rng.lognormal(np.log(1.4) + rng.normal(0.0, 0.15), 0.5, n), *COLUMNS["creatinine"])
        years = np.clip(rng.uniform(0.2, 10.0, n), *COLUMNS["person_years"]).round(2)
        u = rng.normal(0.0, U_SD)
        rate = np.exp(BETA[0] + BETA[1] * age + BETA[2] * sex + BETA[3] * creat + u)
        deaths = np.minimum(rng.poisson(years * rate), DEATHS_MAX).astype(np.float64)
        out.append(
            {
                "age": age,
                "sex": sex,
                "creatinine": creat.round(2),
                "person_years": years,
                "deaths": deaths,
                "registry": np.full(n, float(j)),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.poisson_study", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for registry-1.csv ... registry-4.csv")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for j, cols in enumerate(registries(args.seed), start=1):
        arr = np.column_stack(list(cols.values()))
        np.savetxt(
            args.out / f"registry-{j}.csv", arr, delimiter=",", header=",".join(cols), comments="", fmt="%.6g"
        )
        print(
            f"registry-{j}.csv: {len(cols['age'])} records, {int(cols['deaths'].sum())} deaths"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
