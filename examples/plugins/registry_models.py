"""A model written outside confar, as a registry consortium would: Poisson regression of yearly event counts.

Named ``"registry_models:PoissonRegression"`` in an experiment and in every registry's ``[allow] models``; the
module must be importable by the coordinator (the experiment's ``[model] path``) and by every daemon (each
registry's ``[allow] model_path``; ``confar run --simulate`` writes the experiment's folder there). See
docs/MODELS.md for what each method is for; ``synthetic_data`` is what ``--simulate`` runs on.

Record: covariates x in [−x_bound, x_bound], a count y in {0, ..., y_max} (public bounds). y ~ Poisson(e^η),
η = β·x̃. Per-record bound (replace-one, for the penalty and the MH caps): for the record that changes most,
|Δ log p| = |y Δη − (e^{η*} − e^{η})| ≤ (y_max + e^{max(η_hi, η*_hi)}) |Δη|_max with |Δη| ≤ |Δβ_0| +
x_bound Σ|Δβ_k| (mean value theorem on e^η), η_hi the largest η over the covariate box.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from mechanisms.models import Column, Data, Model, as_batch

F64 = np.ndarray


@dataclass(frozen=True)
class PoissonRegression(Model):
    p: int = 2
    prior_sd: float = 1.0
    x_bound: float = 2.0
    y_max: int = 50
    outcome: str = "events"

    name = "poisson-regression"

    @property
    def covariates(self) -> tuple[str, ...]:
        return tuple(f"x{k}" for k in range(1, self.p + 1))

    @property
    def param_names(self) -> tuple[str, ...]:
        return ("intercept", *(f"b{k}" for k in range(1, self.p + 1)))

    @property
    def schema(self) -> tuple[Column, ...]:
        cols = [Column(c, -self.x_bound, self.x_bound) for c in self.covariates]
        return (*cols, Column(self.outcome, 0.0, float(self.y_max), integer=True))

    def log_prior(self, theta: F64) -> F64:
        th = as_batch(theta, self.d)
        norm = self.d * np.log(self.prior_sd * np.sqrt(2 * np.pi))
        return np.asarray(-0.5 * np.sum(th**2, axis=1) / self.prior_sd**2 - norm, dtype=np.float64)

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return rng.normal(0.0, self.prior_sd, size=(n, self.d))

    def _design(self, data: Data) -> F64:
        n = len(data[self.outcome])
        return np.column_stack([np.ones(n), *(data[c] for c in self.covariates)])

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        eta = as_batch(theta, self.d) @ self._design(data).T
        y = data[self.outcome][None, :]
        return np.asarray(y * eta - np.exp(eta) - special.gammaln(y + 1.0), dtype=np.float64)

    def _eta_hi(self, theta: F64) -> F64:
        w = np.r_[0.0, np.full(self.p, self.x_bound)]
        return theta[:, 0] + np.abs(theta) @ w

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        a, b = as_batch(theta, self.d), as_batch(theta_star, self.d)
        w = np.r_[1.0, np.full(self.p, self.x_bound)]
        d_eta = np.abs(b - a) @ w
        return np.asarray((self.y_max + np.exp(np.maximum(self._eta_hi(a), self._eta_hi(b)))) * d_eta)

    def max_log_likelihood(self, data: Data) -> float:
        def nll(th: F64) -> float:
            return -float(self.log_likelihood(data, th[None, :])[0])

        return float(-optimize.minimize(nll, np.zeros(self.d), method="BFGS").fun)

    def synthetic_data(self, rng: np.random.Generator, sizes: tuple[int, ...]) -> list[dict[str, F64]]:
        beta = np.r_[0.5, [0.3 * (-1) ** k for k in range(self.p)]]
        out = []
        for n in sizes:
            mu = rng.normal(0.0, 0.3, self.p)
            x = np.clip(rng.normal(mu, 1.0, size=(n, self.p)), -self.x_bound, self.x_bound)
            y = np.minimum(rng.poisson(np.exp(beta[0] + x @ beta[1:])), self.y_max).astype(np.float64)
            out.append({**{c: x[:, k].copy() for k, c in enumerate(self.covariates)}, self.outcome: y})
        return out
