"""The vasculitis consortium's own case (issue 35, item 6): time to kidney failure in seven ANCA-associated
vasculitis registries, as synthetic public data for ``examples/vasculitis.toml``.

A rare disease (annual incidence about 2 × 10⁻⁵): seven national registries of unequal size hold about
10,000 patients in all. Patient i of registry j has, at diagnosis, an age (whole years, declared 18-90), a
sex ("F" / "M"), a serum creatinine (µmol/L, declared 40-500: the registries record it at diagnosis and
cap it at the declared bounds, as a registry's data steward would before joining) and an ANCA type ("MPO" or
"PR3"), and is followed from diagnosis until kidney failure (end-stage kidney disease: ``event = 1``) or
censoring (``event = 0``: death, loss to follow-up or the end of follow-up, at most 10 years). The time to
kidney failure is a Weibull accelerated-failure-time model,

    log(scale) = β_0 + β_age age + β_M [sex = M] + β_cr creatinine + β_PR3 [anca = PR3],   shape k,

with β = (3.8, −0.012, −0.10, −0.0042, 0.35) and k = 1.15 (log_shape 0.14): older, male, a higher creatinine
and MPO-ANCA shorten the time to kidney failure. Follow-up is uniform over 1-10 years with a competing
censoring (death, emigration) at rate 0.04 per year, which leaves about 60 % of the patients censored
(the printed line says how many). The registries differ in size and a little in case mix (their age and
creatinine centres, their share of PR3-ANCA: north-south gradient of PR3 vs MPO in Europe).

    python -m simulations.vasculitis_study --out examples/vasculitis

writes ``registry-1.csv`` ... ``registry-7.csv`` (the labels as text, as a registry holds them). Public
synthetic data: nothing here is a patient's record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt

from simulations.launcher import write_csv

SIZES = (3_100, 2_200, 1_500, 1_200, 900, 650, 450)  # 10,000 patients
PR3_SHARE = (0.62, 0.55, 0.50, 0.45, 0.40, 0.35, 0.30)
BETA = {"Intercept": 3.8, "age": -0.012, "sex[M]": -0.10, "creatinine": -0.0042, "anca[PR3]": 0.35}
LOG_SHAPE = 0.14
AGE = (18, 90)
CREATININE = (40.0, 500.0)
FOLLOW_UP = (1.0, 10.0)  # years, administrative
COMPETING_RATE = 0.04  # per year: death, emigration
TIME = (0.01, 10.0)  # the declared bounds of the time column


def registries(seed: int = 35) -> list[dict[str, npt.ArrayLike]]:
    """One dict of columns per registry: time (years), event (1 = kidney failure), age, sex ("F" / "M"),
    creatinine (µmol/L) and anca ("MPO" / "PR3")."""
    rng = np.random.default_rng(seed)
    k = float(np.exp(LOG_SHAPE))
    out: list[dict[str, npt.ArrayLike]] = []
    for n, pr3_share in zip(SIZES, PR3_SHARE, strict=True):
        age = np.clip(np.round(rng.normal(60.0 + rng.normal(0.0, 3.0), 14.0, n)), *AGE)
        male = rng.random(n) < 0.53
        pr3 = rng.random(n) < pr3_share
        # creatinine at diagnosis: log-normal around 180 µmol/L, higher in MPO-ANCA
        creat = rng.lognormal(np.log(180.0) + 0.25 * ~pr3 + rng.normal(0.0, 0.08), 0.75, n)
        creat = np.clip(np.round(creat), *CREATININE)
        eta = (
            BETA["Intercept"] + BETA["age"] * age + BETA["sex[M]"] * male + BETA["creatinine"] * creat
            + BETA["anca[PR3]"] * pr3
        )  # fmt: skip
        failure = np.exp(eta) * rng.weibull(k, n)
        admin = rng.uniform(*FOLLOW_UP, n)
        competing = rng.exponential(1.0 / COMPETING_RATE, n)
        censor = np.minimum(admin, competing)
        event = (failure <= censor).astype(np.int64)
        time = np.clip(np.round(np.minimum(failure, censor), 3), *TIME)
        out.append(
            {
                "time": time,
                "event": event,
                "age": age.astype(np.int64),
                "sex": np.where(male, "M", "F"),
                "creatinine": creat,
                "anca": np.where(pr3, "PR3", "MPO"),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.vasculitis_study", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for registry-1.csv ... registry-7.csv")
    ap.add_argument("--seed", type=int, default=35)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data = registries(args.seed)
    for j, cols in enumerate(data, start=1):
        write_csv(args.out / f"registry-{j}.csv", cols)
    n = sum(np.size(c["event"]) for c in data)
    events = sum(int(np.sum(c["event"])) for c in data)
    truth = ", ".join(f"{k} = {v:g}" for k, v in BETA.items()) + f", log_shape = {LOG_SHAPE:g}"
    censored = 1 - events / n
    print(f"wrote {len(data)} registries ({n} patients, {events} kidney failures, {censored:.1%} censored)")
    print(f"truth: {truth}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
