"""The Poisson rate study's model written by hand, as docs/MODELS.md teaches (the same model as the formula
``deaths ~ age + sex + creatinine`` with ``family = "poisson"``, ``offset = "person_years"``: see
examples/poisson-rate.toml; tests/mechanisms/models/test_formula.py checks the two agree).

Record: age in [20, 90], sex in {0, 1}, creatinine in [0.4, 10], person-years t in [0.2, 10], deaths
d in {0, ..., 8} (public bounds). d ~ Poisson(t e^η), η = β_0 + β_1 age + β_2 sex + β_3 creatinine,
β_0 ~ N(0, prior_sd²) and β_k ~ N(0, (prior_sd / h_k)²), h_k the half-range of covariate k (rstanarm's
autoscaling with the public bounds, as the formula model does by default). Per-record bound (replace-one):
Δ log p = d Δη − t (e^{η*} − e^{η}); the two terms have the same sign, so
|Δ log p| ≤ max(d_max |Δη|, t_max e^{max(η, η*)} |Δη|) (mean value theorem), with
|Δη| ≤ |Δβ_0 + Σ Δβ_k c_k| + Σ |Δβ_k| h_k over the box (c_k, h_k its centre and half-width).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from mechanisms.models import Column, Data, Model, as_batch

F64 = np.ndarray
COVARIATES = (("age", 20.0, 90.0), ("sex", 0.0, 1.0), ("creatinine", 0.4, 10.0))


@dataclass(frozen=True)
class PoissonRate(Model):
    prior_sd: float = 2.5
    deaths_max: int = 8
    years_max: float = 10.0

    name = "poisson-rate"

    @property
    def param_names(self) -> tuple[str, ...]:
        return ("Intercept", "age", "sex", "creatinine")

    @property
    def schema(self) -> tuple[Column, ...]:
        cols = [Column(c, lo, hi) for c, lo, hi in COVARIATES if c != "sex"]
        return (
            *cols,
            Column("sex", 0.0, 1.0, values=(0.0, 1.0)),
            Column("person_years", 0.2, self.years_max),
            Column("deaths", 0.0, float(self.deaths_max), integer=True),
        )

    @property
    def coefficient_sd(self) -> F64:
        half = np.array([(hi - lo) / 2 for _, lo, hi in COVARIATES])
        return np.r_[self.prior_sd, self.prior_sd / half]

    def log_prior(self, theta: F64) -> F64:
        th, sd = as_batch(theta, self.d), self.coefficient_sd
        return -0.5 * np.sum((th / sd) ** 2, axis=1) - np.sum(np.log(sd * np.sqrt(2 * np.pi)))

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return rng.normal(0.0, 1.0, size=(n, self.d)) * self.coefficient_sd

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        n = len(data["deaths"])
        x = np.column_stack([np.ones(n), *(data[c] for c, _, _ in COVARIATES)])
        log_mu = as_batch(theta, self.d) @ x.T + np.log(data["person_years"])[None, :]
        d = data["deaths"][None, :]
        return np.asarray(d * log_mu - np.exp(log_mu) - special.gammaln(d + 1.0), dtype=np.float64)

    def _extent(self, beta: F64) -> tuple[F64, F64]:
        centre = np.array([(lo + hi) / 2 for _, lo, hi in COVARIATES])
        half = np.array([(hi - lo) / 2 for _, lo, hi in COVARIATES])
        mid = beta[:, 0] + beta[:, 1:] @ centre
        reach = np.abs(beta[:, 1:]) @ half
        return mid - reach, mid + reach

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        a, b = as_batch(theta, self.d), as_batch(theta_star, self.d)
        lo, hi = self._extent(b - a)
        d_eta = np.maximum(hi, -lo)
        top = np.maximum(self._extent(a)[1], self._extent(b)[1])
        return np.maximum(self.deaths_max * d_eta, self.years_max * np.exp(np.minimum(top, 700.0)) * d_eta)
