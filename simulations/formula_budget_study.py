"""The budgeted formula study of issue 40 (item 2) and issue 35 (item 0): a registry statistician's logistic
regression ``died ~ age + C(sex) + biomarker`` over five registries, as a planned run.

Record i of registry j has an age (whole years, declared 18-100), a sex ("F" / "M") and a biomarker (declared
0-10; log-normal around 2, so skewed towards the low end of its bounds), and died with probability

    logit P(died) = β_0 + β_age age + β_M [sex = M] + β_bio biomarker,   β = (−9.0, 0.045, 0.4, 0.35),

about 0.7 % (some 550 deaths in 77,000 records). The registries differ in size (40,000 to 2,000) and a little
in case mix (their age and biomarker centres); the pooled model is the true one.

    python -m simulations.formula_budget_study --out /tmp/study --epsilon 350 --chains 4 --min-ess 400
    confar privacy plan /tmp/study/study.toml --epsilon 40 --epsilon 100
    confar run /tmp/study/study.toml --simulate --out /tmp/study/run

writes ``registry-1.csv`` ... ``registry-5.csv`` (the labels as text, as a registry holds them) and
``study.toml`` (the planned run at ``--epsilon``: the warm start, the independence penalty sampler with the
cap left to the plan, ``[design]`` the public guesses of the prevalence and of the age and biomarker
columns). Measured in docs/PRIVACY_UTILITY.md, "Formula models at registry scale". Public synthetic data:
nothing here is a registry's record.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import numpy.typing as npt

from simulations.launcher import write_csv

SIZES = (40_000, 20_000, 9_000, 6_000, 2_000)
BETA = {"Intercept": -9.0, "age": 0.045, "sex[M]": 0.4, "biomarker": 0.35}

STUDY = """\
# {m} registries, {n} records: python -m simulations.formula_budget_study (truth: {truth})
[experiment]
name = "formula-budget-study"
output_dir = "out"
seed = 11

[model]
formula = "died ~ age + C(sex) + biomarker"
family = "bernoulli"
[model.columns]
died = {{ values = [0, 1] }}
age = {{ lower = 18, upper = 100, integer = true }}
sex = {{ values = ["F", "M"] }}
biomarker = [0, 10]

[design]                   # public guesses of the pilot's design dataset (e.g. a published cohort profile)
rate = 0.007               # the expected prevalence
columns = {{ age = {{ mean = 62, sd = 14 }}, biomarker = {{ mean = 2.2, sd = 1.2 }} }}

[warm_start]
mu = {mu:g}
inflate = 1.2

[sampler]
kind = "penalty"
chains = {chains}
iterations = 5000          # at most: the plan sets the length
proposal = "laplace"
sd = 2.0                   # max_sensitivity left out: the plan chooses the cap

[privacy]
target_epsilon = {eps:g}
delta = 1e-5
min_ess = {min_ess:g}

[reveal]
mode = "sign"
sign_precompute = "pooled"

[simulate]
parties = {m}
data = [{files}]
party_epsilon = {eps:g}
party_delta = 1e-5
party_neighbours = "add-remove"
party_colluding = 0
"""


def registries(seed: int = 40) -> list[dict[str, npt.ArrayLike]]:
    """One dict of columns per registry (sex as the labels "F" / "M")."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, npt.ArrayLike]] = []
    for n in SIZES:
        age = np.clip(np.round(rng.normal(62.0 + rng.normal(0.0, 4.0), 14.0, n)), 18, 100)
        male = rng.random(n) < 0.48
        bio = np.clip(np.round(rng.lognormal(np.log(2.0) + rng.normal(0.0, 0.1), 0.5, n), 2), 0.0, 10.0)
        eta = BETA["Intercept"] + BETA["age"] * age + BETA["sex[M]"] * male + BETA["biomarker"] * bio
        died = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
        out.append({"died": died, "age": age, "sex": np.where(male, "M", "F"), "biomarker": bio})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulations.formula_budget_study", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True, help="folder for the CSV files and study.toml")
    ap.add_argument("--epsilon", type=float, default=350.0, help="the run's target_epsilon (and budgets)")
    ap.add_argument("--mu", type=float, default=4.0, help="the warm start's mu")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--min-ess", type=float, default=400.0)
    ap.add_argument("--seed", type=int, default=40)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    data = registries(args.seed)
    for j, cols in enumerate(data, start=1):
        write_csv(args.out / f"registry-{j}.csv", cols)
    files = ", ".join(f'"registry-{j}.csv"' for j in range(1, len(data) + 1))
    truth = ", ".join(f"{k} = {v:g}" for k, v in BETA.items())
    n = sum(np.size(c["died"]) for c in data)
    text = STUDY.format(
        m=len(data), n=n, truth=truth, mu=args.mu, chains=args.chains, eps=args.epsilon,
        min_ess=args.min_ess, files=files,
    )  # fmt: skip
    (args.out / "study.toml").write_text(text)
    deaths = sum(int(np.sum(c["died"])) for c in data)
    print(f"wrote {len(data)} registries ({n} records, {deaths} deaths, {deaths / n:.2%}) and study.toml")
    print(f"truth: {truth}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
