"""The design dataset of a formula model: public records a planned run's pilot is made on (issue 40).

A built-in model has ``synthetic_data`` (registries of a known population); a formula model
(:mod:`mechanisms.models.formula`) has only its declared columns. The pilot of ``coordinator.planner`` needs
records whose posterior has the shape the registries' will have, so this draws them from **public
quantities only**: the registries' public sizes, the declared columns and a public design parameter — never
a registry's record.

* A numeric column with bounds [lo, hi]: a normal centred in the bounds with sd = (hi − lo) / 6, truncated
  to them (the bounds at ±3 sd), rounded for an integer column. Why not uniform: declared bounds are
  generous (age 18–100 for a cohort near 60) and a registry's column is unimodal; a uniform column puts a
  third of the records in the outer sixths of the box, which makes the slopes' posterior narrower than a
  registry's and the plan cheaper than the run (the cost of a decision grows with how far the box's
  corners lie from the records, in posterior sds). The normal is the more conservative of the two; a
  column known to be skewed or off centre is stated with ``columns.<name> = {mean, sd}``.
* A column with declared values (a category, a label, a 0/1 term): equal shares of its values, or the
  stated ``shares``.
* The random intercept's column (``(1 | registry)``): registry j's records hold the j-th declared value
  when there are as many values as registries, else equal shares.
* The outcome (and Weibull's event column), drawn from the model at the **design parameter**: the prior's
  centre (every coefficient 0) unless stated: ``coefficients`` by parameter name, and ``rate`` — the
  outcome's expected level, which sets the intercept (bernoulli: the prevalence; poisson: the events per
  unit of exposure, per record without an offset; gaussian: the outcome's mean; weibull: the share of
  records with an event, censored at the time column's upper bound). For a rare outcome the prior's centre
  (prevalence ½) is a poor guess: the posterior of 0.7 % prevalence is some 15x wider, and so is the plan's
  error; :attr:`Design.text` says which parameter the records were drawn at, and the plan states it.

Deterministic from the generator passed in (the experiment's public seed). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, special

from mechanisms.models.base import F64
from mechanisms.models.formula import FormulaModel

__all__ = ["Design", "DesignGuess", "design_dataset"]

SD_FRACTION = 6.0  # a numeric column's design sd is its range over this (the bounds at ±3 sd)


@dataclass(frozen=True)
class DesignGuess:
    """Public guesses the design dataset is drawn at (each optional): the outcome's ``rate``, design values
    of ``coefficients`` (by parameter name), a numeric column's ``(mean, sd)`` and a valued column's
    ``shares`` (one per declared value, in declared order)."""

    rate: float | None = None
    coefficients: dict[str, float] = field(default_factory=dict)
    columns: dict[str, tuple[float, float]] = field(default_factory=dict)
    shares: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def problems(self, model: FormulaModel) -> list[tuple[str, str]]:
        """(key, what is wrong) for each guess the model cannot take; keys relative to the design table."""
        out: list[tuple[str, str]] = []
        names = model.param_names
        for name in self.coefficients:
            if name not in names:
                out.append((f"coefficients.{name}", f"no such parameter (the model's: {', '.join(names)})"))
        fam, outcome = model.family, model.parsed.outcome
        cols = {c.name: c for c in model.schema}
        if self.rate is not None:
            r = self.rate
            if "Intercept" not in names:
                out.append(("rate", "sets the intercept: the formula has none (give coefficients instead)"))
            elif "Intercept" in self.coefficients:
                out.append(("rate", "sets the intercept: not with coefficients.Intercept (give one of them)"))
            if not math.isfinite(r):
                out.append(("rate", f"must be a finite number, got {r!r}"))
            elif fam in ("bernoulli", "weibull") and not 0.0 < r < 1.0:
                what = "the prevalence" if fam == "bernoulli" else "the share of records with an event"
                out.append(("rate", f"is {what}: a number in (0, 1), got {r:g}"))
            elif fam == "poisson" and not r > 0.0:
                out.append(("rate", f"is the events per unit of exposure: a number > 0, got {r:g}"))
            elif fam == "gaussian" and not cols[outcome].lower <= r <= cols[outcome].upper:
                lo, hi = cols[outcome].lower, cols[outcome].upper
                out.append(("rate", f"is the outcome's mean: within its bounds [{lo:g}, {hi:g}], got {r:g}"))
        drawn = _covariates(model)
        for name, (mean, sd) in self.columns.items():
            c = cols.get(name)
            if c is None or name not in drawn or c.values is not None:
                numeric = [n for n in drawn if cols[n].values is None]
                out.append((f"columns.{name}", f"not a numeric column of the design (those: {numeric})"))
            elif not (math.isfinite(mean) and math.isfinite(sd) and sd > 0 and c.lower <= mean <= c.upper):
                out.append(
                    (f"columns.{name}", f"needs mean within [{c.lower:g}, {c.upper:g}] and sd > 0, got "
                     f"mean = {mean!r}, sd = {sd!r}")
                )  # fmt: skip
        for name, shares in self.shares.items():
            c = cols.get(name)
            if c is None or name not in drawn or c.values is None:
                valued = [n for n in drawn if cols[n].values is not None]
                out.append((f"columns.{name}", f"shares are for a column with values (those: {valued})"))
                continue
            shown = list(c.labels) if c.labels is not None else [float(v) for v in c.values]
            if len(shares) != len(c.values):
                out.append((f"columns.{name}.shares", f"one share per value {shown}, got {len(shares)}"))
            elif not all(math.isfinite(s) and s >= 0 for s in shares) or not math.isclose(sum(shares), 1.0):
                out.append((f"columns.{name}.shares", f"shares >= 0 summing to 1, got {list(shares)}"))
        return out


@dataclass(frozen=True)
class Design:
    """The design dataset (one dict of schema columns per registry), the parameter its outcome was drawn at,
    and what was assumed, in words (stated with the plan)."""

    records: list[dict[str, F64]]
    theta: F64
    text: str


def _covariates(model: FormulaModel) -> list[str]:
    """The columns drawn before the outcome: every schema column but the outcome and Weibull's event."""
    p = model.parsed
    skip = {p.outcome, model.event}
    return [c.name for c in model.schema if c.name not in skip]


def _column(c: Any, n: int, rng: np.random.Generator, guess: DesignGuess, j: int, m: int, group: bool) -> F64:
    if c.values is not None:
        values = np.asarray(c.values, dtype=np.float64)
        if group and values.size == m:
            return np.full(n, values[j])
        shares = guess.shares.get(c.name)
        p = None if shares is None else np.asarray(shares, dtype=np.float64) / sum(shares)
        return np.asarray(rng.choice(values, size=n, p=p), dtype=np.float64)
    lo, hi = float(c.lower), float(c.upper)
    if c.integer:
        lo, hi = float(math.ceil(lo)), float(math.floor(hi))
    if hi <= lo:
        return np.full(n, lo)
    from scipy import stats

    mean, sd = guess.columns.get(c.name, (0.5 * (lo + hi), (hi - lo) / SD_FRACTION))
    a, b = (lo - mean) / sd, (hi - mean) / sd
    x = stats.truncnorm.rvs(a, b, loc=mean, scale=sd, size=n, random_state=rng)
    x = np.asarray(x, dtype=np.float64)
    return np.clip(np.round(x), lo, hi) if c.integer else np.clip(x, lo, hi)


def _mean_outcome(model: FormulaModel, eta: F64, pooled: dict[str, F64], theta: F64) -> float:
    """The outcome's expected level at linear predictors ``eta`` (what ``rate`` states)."""
    fam = model.family
    if fam == "bernoulli":
        return float(np.mean(special.expit(eta)))
    if fam == "poisson":
        t = pooled[model.offset] if model.offset is not None else np.ones_like(eta)
        return float(np.sum(t * np.exp(np.minimum(eta, 700.0))) / np.sum(t))
    if fam == "gaussian":
        return float(np.mean(eta))
    k = math.exp(float(theta[0]))
    t_hi = next(c.upper for c in model.schema if c.name == model.parsed.outcome)
    z = k * (math.log(t_hi) - eta)
    return float(np.mean(-np.expm1(-np.exp(np.minimum(z, 700.0)))))  # P(T <= t_hi)


def _outcome(
    model: FormulaModel, eta: F64, cols: dict[str, F64], theta: F64, rng: np.random.Generator
) -> None:
    """Draw the outcome (and Weibull's event) into ``cols`` at linear predictors ``eta``."""
    schema = {c.name: c for c in model.schema}
    y = schema[model.parsed.outcome]
    fam, n = model.family, eta.size
    if fam == "bernoulli":
        cols[y.name] = (rng.random(n) < special.expit(eta)).astype(np.float64)
    elif fam == "poisson":
        t = cols[model.offset] if model.offset is not None else 1.0
        lam = np.minimum(t * np.exp(np.minimum(eta, 50.0)), 1e9)
        cols[y.name] = np.clip(rng.poisson(lam).astype(np.float64), math.ceil(y.lower), math.floor(y.upper))
    elif fam == "gaussian":
        draw = rng.normal(eta, float(model.sigma))  # type: ignore[arg-type]
        cols[y.name] = np.clip(np.round(draw) if y.integer else draw, y.lower, y.upper)
    else:
        assert model.event is not None
        k = math.exp(float(theta[0]))
        t = np.exp(np.minimum(eta, 700.0)) * rng.exponential(1.0, n) ** (1.0 / k)
        cols[model.event] = (t <= y.upper).astype(np.float64)
        cols[y.name] = np.clip(t, y.lower, y.upper)


def design_dataset(
    model: FormulaModel, rng: np.random.Generator, sizes: tuple[int, ...], guess: DesignGuess | None = None
) -> Design:
    """The design dataset of ``model`` at the public ``sizes`` (one dict of schema columns per registry),
    drawn from ``rng`` (the public seed) at the design parameter (module docstring). ValueError naming the
    guess's key when the model cannot take it."""
    guess = guess or DesignGuess()
    bad = guess.problems(model)
    if bad:
        raise ValueError("; ".join(f"{k}: {why}" for k, why in bad))
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"a design dataset needs one size >= 1 per registry, got {sizes}")
    schema = {c.name: c for c in model.schema}
    group = model.parsed.group
    records: list[dict[str, F64]] = []
    for j, n in enumerate(sizes):
        cols = {
            name: _column(schema[name], n, rng, guess, j, len(sizes), name == group)
            for name in _covariates(model)
        }
        cols[model.parsed.outcome] = np.zeros(n)  # the design reads no outcome; drawn below
        if model.event is not None:
            cols[model.event] = np.zeros(n)
        records.append(cols)
    names = model.param_names
    theta = np.zeros(model.d)
    for name, value in guess.coefficients.items():
        theta[names.index(name)] = float(value)
    pooled = {k: np.concatenate([r[k] for r in records]) for k in records[0]}
    eta = model.eta(pooled, theta)[0]
    said = [f"{k} = {v:g}" for k, v in guess.coefficients.items()]
    if guess.rate is not None:
        i = names.index("Intercept")

        def gap(a: float) -> float:
            return _mean_outcome(model, eta + a, pooled, theta) - float(guess.rate)  # type: ignore[arg-type]

        if model.family == "gaussian":
            a = float(guess.rate) - float(np.mean(eta))
        elif gap(-60.0) * gap(60.0) < 0:
            a = float(optimize.brentq(gap, -60.0, 60.0, xtol=1e-10))
        else:
            raise ValueError(f"rate: no intercept in [-60, 60] gives rate = {guess.rate:g} for these columns")
        theta[i] = a
        eta = eta + a
        said.insert(0, f"Intercept = {a:.4g} from rate = {guess.rate:g}")
    k = 0
    for r in records:
        n = len(r[model.parsed.outcome])
        _outcome(model, eta[k : k + n], r, theta, rng)
        k += n
    outcome = model.parsed.outcome
    level = float(np.mean(np.concatenate([r[outcome] for r in records])))
    what = {"bernoulli": "prevalence", "weibull": "mean follow-up"}.get(model.family, "mean outcome")
    if model.family == "weibull":
        what = f"event share {float(np.mean(np.concatenate([r[model.event] for r in records]))):.3g}, {what}"  # type: ignore[index]
    stated = "; ".join(said) if said else "none stated"
    rest = "the other parameters 0, the prior's centre" if said else "every parameter 0, the prior's centre"
    columns = ", ".join(f"{k} ~ N({m:g}, {s:g}) truncated" for k, (m, s) in guess.columns.items())
    text = (
        f"a design dataset of {sum(sizes)} public records in {len(sizes)} registries drawn from the declared "
        f"columns only (numeric: a normal centred in its bounds, sd = range/{SD_FRACTION:g}, truncated"
        + (f"; {columns}" if columns else "")
        + f"; categories: {'the stated shares or ' if guess.shares else ''}equal shares), the outcome drawn "
        f"at the design parameter ({stated}; {rest}): {what} {level:.3g}"
    )
    if guess.rate is None and "Intercept" in names and "Intercept" not in guess.coefficients:
        text += " — an assumption, not the registries' figure: state [design] rate if it is far off"
    return Design(records, np.asarray(theta, dtype=np.float64), text)
