"""Gaussian linear regression with known noise sd: y_i ~ N(β_0 + Σ_k β_k x_ik, σ²), β ~ N(0, prior_sd² I).

Declared public bounds |x_k| ≤ x_bound and |y| ≤ y_bound give a public per-record log-ratio bound:
with r = y − x̃·β, |r*² − r²| / (2σ²) = |x̃·Δ| |2y − x̃·(β + β*)| / (2σ²)
≤ (Σ_k B_k |Δ_k|)(2 y_bound + Σ_k B_k |β_k + β*_k|) / (2σ²), B_0 = 1, B_k = x_bound; with a public covariate
ellipsoid (records clipped into it) each sup over x̃ is taken over the box ∩ the ellipsoid
(:mod:`mechanisms.models.ellipsoid`).
The party's rejection bound is the log-likelihood at the least-squares fit.

Score bound (the DP warm start's clip, :meth:`LinearRegression.score_norm_bound`): a record's score is
∇_β log p(y | x, β) = (y − x̃·β) x̃ / σ², of norm |y − x̃·β| ‖x̃‖ / σ², at most
(y_bound + sup_x |x̃·β|) · sup_x ‖x̃‖ / σ² — finite at every β, growing with |β|, so it is taken at each
release's public β.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.models.base import F64, Column, Data, as_batch
from mechanisms.models.regression import GaussianPriorRegression


@dataclass(frozen=True)
class LinearRegression(GaussianPriorRegression):
    p: int = 2
    sigma: float = 1.0
    prior_sd: float = 10.0
    x_bound: float = 5.0
    y_bound: float = 50.0
    outcome: str = "y"
    x_center: tuple[float, ...] | None = None
    x_cov: tuple[tuple[float, ...], ...] | None = None
    x_radius: float | None = None

    name = "linear-regression"

    def synthetic_data(self, rng: np.random.Generator, sizes: tuple[int, ...]) -> list[dict[str, F64]]:
        """x ~ N(0, 1) clipped to the bound, y = 1 + x (0.5, -0.5, ...) + N(0, sigma^2) clipped."""
        out: list[dict[str, F64]] = []
        beta = np.array([0.5 * (-1) ** k for k in range(self.p)])
        for n in sizes:
            x = np.clip(rng.normal(0.0, 1.0, (n, self.p)), -self.x_bound, self.x_bound)
            y = np.clip(1.0 + x @ beta + rng.normal(0.0, self.sigma, n), -self.y_bound, self.y_bound)
            cols = {f"x{k + 1}": x[:, k].copy() for k in range(self.p)}
            cols[self.outcome] = y
            out.append(cols)
        return out

    def __post_init__(self) -> None:
        if not (isinstance(self.p, int) and self.p >= 0):
            raise ValueError(f"number of covariates p must be a non-negative integer, got {self.p!r}")
        if not (self.sigma > 0 and self.prior_sd > 0 and self.x_bound > 0 and self.y_bound > 0):
            raise ValueError("sigma, prior_sd, x_bound and y_bound must be positive")
        self._check_region()

    @property
    def schema(self) -> tuple[Column, ...]:
        cols = [Column(c, -self.x_bound, self.x_bound) for c in self.covariates]
        return (*cols, Column(self.outcome, -self.y_bound, self.y_bound))

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        r = data[self.outcome][None, :] - as_batch(theta, self.d) @ self.design(data).T
        return -0.5 * (r / self.sigma) ** 2 - np.log(self.sigma * np.sqrt(2 * np.pi))

    def log_likelihood(self, data: Data, theta: F64) -> F64:
        """From sufficient statistics X'X, X'y, y'y: O(d²) per proposal after one pass over the records."""
        th = as_batch(theta, self.d)
        x, y = self.design(data), data[self.outcome]
        xtx, xty, yty = x.T @ x, x.T @ y, float(y @ y)
        rss = yty - 2 * th @ xty + np.einsum("ki,ij,kj->k", th, xtx, th)
        n = y.shape[0]
        return np.asarray(-0.5 * rss / self.sigma**2 - n * np.log(self.sigma * np.sqrt(2 * np.pi)))

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        th, ts = as_batch(theta, self.d), as_batch(theta_star, self.d)
        diff, tot = ts - th, ts + th
        change = self.eta_change_bound(diff[:, 0], diff[:, 1:])
        level = 2 * self.y_bound + self.eta_change_bound(tot[:, 0], tot[:, 1:])
        return np.asarray(change * level / (2 * self.sigma**2), dtype=np.float64)

    def score_norm_bound(self, theta: F64 | None = None) -> float | None:
        """sup over the records the model allows of ‖∇_β log p(y | x, β)‖₂ at ``theta`` (None without one: it
        depends on β). The score is (y − η) x̃ / σ², η = x̃·β, x̃ = (1, x), so its norm is |y − η| ‖x̃‖ / σ²
        and, over |y| <= y_bound and x in the covariate region,

            sup |y − η| ‖x̃‖ <= sup_y,x |y − η| · sup_x ‖x̃‖ = (y_bound + H) · sup_x ‖x̃‖,

        H = sup_x |η| = |β_0| + x_bound ‖β_{1:}‖₁ over the box (at the corner x = ±x_bound sign β_{1:}), or
        with the ellipsoid the sup over box ∩ ellipsoid (``eta_change_bound``), and
        sup ‖x̃‖ the region's ``design_norm_bound``; sup_y |y − η| = y_bound + |η| at y = −sign(η) y_bound.
        In the box alone the bound is attained: every corner has the largest ‖x̃‖ = √(1 + p x_bound²), so
        the corner that maximises |η|, with y = ∓y_bound, reaches it. With an ellipsoid the two sups may be
        reached at different x (the product is then an upper bound, close when B is near isotropic).
        Public, so a warm start clipping each record's score at it clips none and its released gradient is
        unbiased (before, the scores were clipped at 4: a Huber-type fit, issue 23)."""
        if theta is None:
            return None
        th = np.asarray(theta, dtype=np.float64).reshape(-1)
        eta = float(self.eta_change_bound(th[:1], th[None, 1:])[0])
        return float((self.y_bound + eta) * self.design_norm_bound() / self.sigma**2)

    def max_log_likelihood(self, data: Data) -> float:
        x, y = self.design(data), data[self.outcome]
        beta = np.asarray(np.linalg.lstsq(x, y, rcond=None)[0], dtype=np.float64)
        return float(self.log_likelihood(data, beta[None, :])[0])
