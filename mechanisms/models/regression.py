"""What the regression models share: an intercept and covariates x1..xp, β ~ N(0, prior_sd² I).

Pure (no I/O). :class:`GaussianPriorRegression` is a base of ``linear.py`` and ``logistic.py``; each adds its
own likelihood, schema and bounds as a frozen dataclass with the fields named here, and the covariate region
of :class:`mechanisms.models.ellipsoid.CovariateRegion` (the schema's box, optionally a public ellipsoid the
records are clipped into: model arguments ``x_center``, ``x_cov``, ``x_radius``).
"""

from __future__ import annotations

import numpy as np

from mechanisms.models.base import F64, Data, Model, as_batch
from mechanisms.models.ellipsoid import CovariateRegion


class GaussianPriorRegression(CovariateRegion, Model):
    """Parameters (intercept, b1..bp) of a linear predictor on covariates x1..xp, with an independent
    N(0, prior_sd²) prior on each; subclasses are frozen dataclasses with these fields."""

    p: int
    prior_sd: float
    outcome: str

    @property
    def param_names(self) -> tuple[str, ...]:
        return ("intercept", *(f"b{k}" for k in range(1, self.p + 1)))

    def design(self, data: Data) -> F64:
        n = len(data[self.outcome])
        return np.column_stack([np.ones(n), *(data[c] for c in self.covariates)])

    def log_prior(self, theta: F64) -> F64:
        th = as_batch(theta, self.d)
        return -0.5 * np.sum(th**2, axis=1) / self.prior_sd**2 - self.d * np.log(
            self.prior_sd * np.sqrt(2 * np.pi)
        )

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return rng.normal(0.0, self.prior_sd, size=(n, self.d))
