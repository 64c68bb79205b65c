"""The registry-effects study of issue 36: death in five simulated registries whose baselines differ.

A study as a newcomer would set it up (``examples/registry-effects.toml``): record i of registry j has an
age (years, 18-100), a sex (0/1), a biomarker (0-10) and whether the patient died (0/1), with

    died_i ~ Bernoulli(logit⁻¹(β_0 + β_age age_i + β_sex sex_i + β_bio biomarker_i + u_j)),

u_j registry j's effect (case mix, coding, follow-up), ``(1 | registry)`` in the formula. Five registries of
40,000, 15,000, 12,000, 8,000 and 2,000 records (77,000 in all), whose ages and biomarker levels differ. The
truth: β = (−5.0, 0.04, 0.3, 0.25), u = (0.5, −0.3, 0.1, −0.6, 0.3) (σ_u of the five: 0.44).

    python -m simulations.registry_effects_study --out examples/registry-effects

Public synthetic data (fixed seed): nothing here is a registry's record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

SIZES = (40_000, 15_000, 12_000, 8_000, 2_000)
BETA = (-5.0, 0.04, 0.3, 0.25)  # Intercept, age, sex[1], biomarker
U = (0.5, -0.3, 0.1, -0.6, 0.3)  # each registry's true effect
MEAN_AGE = (66.0, 58.0, 71.0, 62.0, 54.0)  # case mix: the registries' mean ages ...
MEAN_BIO = (3.0, 4.0, 2.5, 3.5, 5.0)  # ... and biomarker levels
COLUMNS = {  # the public bounds every registry declares (the experiment's [model] columns say the same)
    "age": (18.0, 100.0),
    "sex": (0.0, 1.0),
    "biomarker": (0.0, 10.0),
}
NAMES = ("Intercept", "age", "sex[1]", "biomarker")


def registries(seed: int = 36, sizes: tuple[int, ...] = SIZES) -> list[dict[str, F64]]:
    """One dict of columns per registry (age, sex, biomarker, died, registry)."""
    if len(sizes) != len(U):
        raise ValueError(f"{len(sizes)} sizes for {len(U)} registries")
    rng = np.random.default_rng(seed)
    out = []
    for j, n in enumerate(sizes):
        age = np.clip(rng.normal(MEAN_AGE[j], 12.0, n), *COLUMNS["age"]).round(1)
        sex = (rng.random(n) < 0.5).astype(np.float64)
        bio = np.clip(rng.gamma(4.0, MEAN_BIO[j] / 4.0, n), *COLUMNS["biomarker"]).round(2)
        eta = BETA[0] + BETA[1] * age + BETA[2] * sex + BETA[3] * bio + U[j]
        died = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float64)
        out.append({"age": age, "sex": sex, "biomarker": bio, "died": died, "registry": np.full(n, j + 1.0)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.registry_effects_study", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for registry-1.csv ... registry-5.csv")
    ap.add_argument("--seed", type=int, default=36)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for j, cols in enumerate(registries(args.seed), start=1):
        arr = np.column_stack(list(cols.values()))
        np.savetxt(
            args.out / f"registry-{j}.csv", arr, delimiter=",", header=",".join(cols), comments="", fmt="%.6g"
        )
        print(f"registry-{j}.csv: {len(cols['age'])} records, {int(cols['died'].sum())} deaths")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
