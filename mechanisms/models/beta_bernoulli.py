"""Beta–Bernoulli: y_i ~ Bernoulli(θ), θ ~ Beta(a, b). The conjugate test bed of the samplers.

Posterior Beta(a + k, b + n − k) with k = Σ y_i over every party's records. Per-record log-ratio
|log p(y | θ*) − log p(y | θ)| ≤ max(|log θ*/θ|, |log (1 − θ*)/(1 − θ)|) for y ∈ {0, 1}: a public,
data-independent bound, so the penalty method needs no clipping (exact). The rejection bound of a party with
k_j ones in n_j records is log M_j = k_j log(k_j/n_j) + (n_j − k_j) log(1 − k_j/n_j) (the MLE; 0 log 0 = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from mechanisms.models.base import F64, Column, Data, Model, as_batch


@dataclass(frozen=True)
class BetaBernoulli(Model):
    a: float = 1.0
    b: float = 1.0
    column: str = "y"

    name = "beta-bernoulli"

    def synthetic_data(self, rng: np.random.Generator, sizes: tuple[int, ...]) -> list[dict[str, F64]]:
        """Bernoulli(0.3) records."""
        return [{self.column: (rng.random(n) < 0.3).astype(np.float64)} for n in sizes]

    def __post_init__(self) -> None:
        if not (self.a > 0 and self.b > 0):
            raise ValueError(f"Beta prior needs a > 0 and b > 0, got a = {self.a}, b = {self.b}")

    @property
    def param_names(self) -> tuple[str, ...]:
        return ("theta",)

    @property
    def lower(self) -> F64:
        return np.zeros(1)

    @property
    def upper(self) -> F64:
        return np.ones(1)

    @property
    def schema(self) -> tuple[Column, ...]:
        return (Column(self.column, 0.0, 1.0, integer=True, values=(0.0, 1.0)),)

    def log_prior(self, theta: F64) -> F64:
        th = as_batch(theta, 1)[:, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = stats.beta.logpdf(th, self.a, self.b)
        return np.where((th > 0) & (th < 1), lp, -np.inf)

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return rng.beta(self.a, self.b, size=(n, 1))

    def _stats(self, data: Data) -> tuple[float, float]:
        y = data[self.column]
        return float(y.sum()), float(y.shape[0])

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        th = as_batch(theta, 1)
        y = data[self.column][None, :]
        return np.asarray(special.xlogy(y, th) + special.xlog1py(1 - y, -th), dtype=np.float64)

    def log_likelihood(self, data: Data, theta: F64) -> F64:
        th = as_batch(theta, 1)[:, 0]
        k, n = self._stats(data)
        return np.asarray(special.xlogy(k, th) + special.xlog1py(n - k, -th), dtype=np.float64)

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        th, ts = as_batch(theta, 1)[:, 0], as_batch(theta_star, 1)[:, 0]
        return np.maximum(np.abs(np.log(ts) - np.log(th)), np.abs(np.log1p(-ts) - np.log1p(-th)))

    def record_loglik_range(self, theta: F64) -> F64 | None:
        """|log θ − log(1 − θ)|: the two records y = 1 and y = 0."""
        th = as_batch(theta, 1)[:, 0]
        return np.asarray(np.abs(np.log(th) - np.log1p(-th)), dtype=np.float64)

    def public_log_bound(self, n_records: int) -> float | None:
        """0: every record's likelihood is at most 1."""
        return 0.0

    def max_log_likelihood_within(self, data: Data, max_range: float) -> float | None:
        """|logit θ| <= max_range is the interval [σ(−r), σ(r)]; the log-likelihood is concave in θ, so the
        maximum is at the MLE k/n clipped to it."""
        k, n = self._stats(data)
        if n == 0:
            return 0.0
        lo, hi = special.expit(-max_range), special.expit(max_range)
        p = float(np.clip(k / n, lo, hi))
        return float(special.xlogy(k, p) + special.xlog1py(n - k, -p))

    def max_log_likelihood(self, data: Data) -> float:
        k, n = self._stats(data)
        if n == 0:
            return 0.0
        p = k / n
        return float(special.xlogy(k, p) + special.xlog1py(n - k, -p))

    # ---- exact answers (tests) -----------------------------------------------------------------------

    def posterior(self, k: float, n: float) -> stats.rv_continuous:
        return stats.beta(self.a + k, self.b + n - k)  # type: ignore[no-any-return]

    def log_evidence(self, k: float, n: float) -> float:
        """log ∫ p(y | θ) π(θ) dθ for data with k ones in n records."""
        return float(special.betaln(self.a + k, self.b + n - k) - special.betaln(self.a, self.b))
