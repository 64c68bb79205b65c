"""Gaussian mean with known sd: x_i ~ N(μ, σ²), μ ~ N(prior_mean, prior_sd²).

With ``clip = (lo, hi)`` every record is clipped to [lo, hi] before use, so the chain targets the posterior
of the *clipped* records exactly (records outside [lo, hi] are clipped, not refused). The per-record
log-ratio r(x) = log N(x; μ*, σ) − log N(x; μ, σ) = (μ* − μ)(x − (μ + μ*)/2)/σ² is linear in x, so over
x ∈ [lo, hi] (replace-one, n_j public and fixed):

* ``record_ratio_range`` = |μ* − μ|(hi − lo)/σ²: the most one replaced record moves ℓ_j, the penalty's
  c(μ, μ*) (symmetric in μ, μ*; at most 2 × ``record_ratio_bound``, equal when (μ + μ*)/2 is mid-clip);
* ``record_ratio_bound`` = |μ* − μ| max(|lo − c|, |hi − c|)/σ², c = (μ + μ*)/2;
* ``record_loglik_range(μ)`` = [max − min over x ∈ [lo, hi] of (x − μ)²]/(2σ²).

Without ``clip`` none of these bounds exists (None): the sensitivity of ℓ_j to one record is unbounded.
The log-likelihood is computed from the sufficient statistics (n, Σx, Σx²) of the clipped column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mechanisms.models.base import F64, Column, Data, Model, as_batch

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _positive(name: str, v: object) -> None:
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


@dataclass(frozen=True)
class GaussianMean(Model):
    sigma: float = 1.0
    column: str = "x"
    clip: tuple[float, float] | None = None
    prior_mean: float = 0.0
    prior_sd: float = 10.0

    name = "gaussian-mean"

    def __post_init__(self) -> None:
        _positive("sigma", self.sigma)
        _positive("prior_sd", self.prior_sd)
        if not isinstance(self.prior_mean, int | float) or not math.isfinite(self.prior_mean):
            raise ValueError(f"prior_mean must be a finite number, got {self.prior_mean!r}")
        if not isinstance(self.column, str) or not self.column:
            raise ValueError(f"column must be a column name, got {self.column!r}")
        clip = self.clip
        if clip is not None:
            ok = (
                isinstance(clip, list | tuple)
                and len(clip) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in clip)
                and all(math.isfinite(v) for v in clip)
            )
            if not ok or not clip[0] < clip[1]:
                raise ValueError(f"clip must be [lo, hi] with finite lo < hi, got {clip!r}")
            object.__setattr__(self, "clip", (float(clip[0]), float(clip[1])))  # a JSON list -> a tuple

    @property
    def param_names(self) -> tuple[str, ...]:
        return ("mean",)

    @property
    def schema(self) -> tuple[Column, ...]:
        return (Column(self.column),)

    def values(self, data: Data) -> F64:
        """The column, clipped to [lo, hi] when ``clip`` is set."""
        x = np.asarray(data[self.column], dtype=np.float64)
        return np.clip(x, self.clip[0], self.clip[1]) if self.clip is not None else x

    def log_prior(self, theta: F64) -> F64:
        mu = as_batch(theta, 1)[:, 0]
        z = (mu - self.prior_mean) / self.prior_sd
        return np.asarray(-0.5 * z**2 - math.log(self.prior_sd) - LOG_SQRT_2PI, dtype=np.float64)

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return rng.normal(self.prior_mean, self.prior_sd, size=(n, 1))

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        z = (self.values(data)[None, :] - as_batch(theta, 1)) / self.sigma
        return np.asarray(-0.5 * z**2 - math.log(self.sigma) - LOG_SQRT_2PI, dtype=np.float64)

    def log_likelihood(self, data: Data, theta: F64) -> F64:
        """From (n, Σx, Σx²) of the clipped records."""
        x = self.values(data)
        n, sx, sxx = x.shape[0], float(x.sum()), float(x @ x)
        mu = as_batch(theta, 1)[:, 0]
        rss = sxx - 2.0 * mu * sx + n * mu**2
        return np.asarray(-0.5 * rss / self.sigma**2 - n * (math.log(self.sigma) + LOG_SQRT_2PI))

    def record_ratio_range(self, theta: F64, theta_star: F64) -> F64 | None:
        if self.clip is None:
            return None
        step = np.abs(as_batch(theta_star, 1) - as_batch(theta, 1))[:, 0]
        return np.asarray(step * (self.clip[1] - self.clip[0]) / self.sigma**2, dtype=np.float64)

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        if self.clip is None:
            return None
        th, ts = as_batch(theta, 1)[:, 0], as_batch(theta_star, 1)[:, 0]
        mid = 0.5 * (th + ts)
        far = np.maximum(np.abs(self.clip[0] - mid), np.abs(self.clip[1] - mid))
        return np.asarray(np.abs(ts - th) * far / self.sigma**2, dtype=np.float64)

    def record_loglik_range(self, theta: F64) -> F64 | None:
        if self.clip is None:
            return None
        mu = as_batch(theta, 1)[:, 0]
        lo, hi = self.clip[0] - mu, self.clip[1] - mu
        most = np.maximum(lo**2, hi**2)
        least = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(lo**2, hi**2))
        return np.asarray((most - least) / (2.0 * self.sigma**2), dtype=np.float64)

    def public_log_bound(self, n_records: int) -> float | None:
        """sup_μ log p(X | μ) <= −n log(σ √(2π)) for every dataset (the squares are >= 0)."""
        return -n_records * (math.log(self.sigma) + LOG_SQRT_2PI)

    def max_log_likelihood(self, data: Data) -> float:
        x = self.values(data)
        mean = float(x.mean()) if x.size else self.prior_mean
        return float(self.log_likelihood(data, np.array([[mean]]))[0])

    def synthetic_data(self, rng: np.random.Generator, sizes: tuple[int, ...]) -> list[dict[str, F64]]:
        """x ~ N(1, sigma^2) per registry (unclipped: the model clips)."""
        return [{self.column: rng.normal(1.0, self.sigma, n)} for n in sizes]
