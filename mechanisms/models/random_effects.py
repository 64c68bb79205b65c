"""Logistic regression with a random intercept per registry (non-centred), and synthetic registries for it.

y_i ~ Bernoulli(σ(β_0 + Σ_k β_k x_ik + u_j)) for a record of registry j, u_j = σ_u z_j, z_j ~ N(0, 1),
σ_u ~ HalfNormal(``sigma_u_scale``) (sampled as log σ_u, Jacobian included), β ~ N(0, prior_sd² I). Pooling
registries with different case mixes without u_j biases the fixed effects towards the mixture; with it, the
fixed effects are the within-registry effects. θ = (intercept, b1..bp, log_sigma_u, z1..zm), d = p + 2 + m.

Each record carries its registry's number in the column ``registry`` (an integer 1..m, the same in every
record of a registry, declared in the schema), so a registry's daemon evaluates only its own u_j.

Per-record bound (penalty, replace-one): |log p(y | x, θ*) − log p(y | x, θ)| ≤ |Δη| ≤ |Δβ_0| + x_bound Σ_k
|Δβ_k| + max_j |Δu_j| (log σ is 1-Lipschitz in η; the maximum over j because the replaced record may belong to
any registry the schema allows; with a public covariate ellipsoid — ``x_center``, ``x_cov``, ``x_radius``,
records clipped into it — the x part is the sup over the box ∩ the ellipsoid). Rejection: the record
range at θ is |β_0| + x_bound Σ|β_k| + max_j |u_j| (or over box ∩ ellipsoid); the public bound is 0.

What the posterior of u_j reveals: u_j is registry j's baseline log-odds relative to the others — an
aggregate of its whole case mix, published with the posterior by design. The privacy accounting protects
individual records (one record moves u_j's likelihood by at most the bound above, and that is what is
charged); it does not hide registry-level aggregates. A registry whose case mix is itself confidential
should not allow this model, or the coordinator should not publish the u_j draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.models.base import F64, Column, Data, Model, as_batch, softplus
from mechanisms.models.ellipsoid import CovariateRegion
from mechanisms.models.hierarchy import RandomIntercept
from mechanisms.models.logistic import BayesLogistic


@dataclass(frozen=True)
class LogisticRandomIntercept(CovariateRegion, Model):
    p: int = 2
    registries: int = 3
    prior_sd: float = 2.5
    sigma_u_scale: float = 1.0
    x_bound: float = 3.0
    outcome: str = "y"
    registry: str = "registry"
    x_center: tuple[float, ...] | None = None
    x_cov: tuple[tuple[float, ...], ...] | None = None
    x_radius: float | None = None

    name = "logistic-random-intercept"

    def __post_init__(self) -> None:
        if not (isinstance(self.p, int) and self.p >= 0):
            raise ValueError(f"number of covariates p must be a non-negative integer, got {self.p!r}")
        if not (isinstance(self.registries, int) and self.registries >= 1):
            raise ValueError(f"registries must be a positive integer, got {self.registries!r}")
        if not (self.prior_sd > 0 and self.sigma_u_scale > 0 and self.x_bound > 0):
            raise ValueError("prior_sd, sigma_u_scale and x_bound must be positive")
        self._check_region()

    @property
    def param_names(self) -> tuple[str, ...]:
        z = tuple(f"z{j}" for j in range(1, self.registries + 1))
        return ("intercept", *(f"b{k}" for k in range(1, self.p + 1)), "log_sigma_u", *z)

    @property
    def schema(self) -> tuple[Column, ...]:
        cols = [Column(c, -self.x_bound, self.x_bound) for c in self.covariates]
        regs = tuple(float(j) for j in range(1, self.registries + 1))
        return (
            *cols,
            Column(self.outcome, 0.0, 1.0, integer=True, values=(0.0, 1.0)),
            Column(self.registry, 1.0, float(self.registries), integer=True, values=regs),
        )

    # ---- parameters --------------------------------------------------------------------------------------

    def _split(self, theta: F64) -> tuple[F64, F64, F64]:
        """(β (n, p + 1), σ_u (n,), u (n, m))."""
        th = as_batch(theta, self.d)
        beta = th[:, : self.p + 1]
        sigma = np.exp(th[:, self.p + 1])
        z = th[:, self.p + 2 :]
        return beta, sigma, sigma[:, None] * z

    def random_intercept(self) -> RandomIntercept:
        zs = tuple(range(self.p + 2, self.p + 2 + self.registries))
        levels = tuple(float(j) for j in range(1, self.registries + 1))
        return RandomIntercept(self.registry, levels, self.p + 1, zs, tuple(range(self.p + 1)), 0)

    def offset_uniform_bound(self) -> bool:
        """The bound is sup |Δη| and log σ(±η) is 1-Lipschitz in η: it holds at any level of u_j."""
        return True

    def covariate_means(self, data: Data, weights: F64 | None = None) -> F64:
        """(1, the mean of each covariate) over ``data``'s records, or per row of ``weights`` the weighted
        means (rows, p + 1)."""
        n = len(data[self.outcome])
        x = np.column_stack([np.ones(n), *(data[c] for c in self.covariates)])
        if weights is None:
            return np.asarray(x.mean(axis=0), dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray((w @ x) / w.sum(axis=1, keepdims=True), dtype=np.float64)

    def record_log_likelihood_eta(self, data: Data, theta: F64, eta: F64) -> F64:
        s = 2.0 * data[self.outcome][None, :] - 1.0
        return np.asarray(-np.logaddexp(0.0, -s * eta), dtype=np.float64)

    def log_prior(self, theta: F64) -> F64:
        th = as_batch(theta, self.d)
        beta, sigma, _ = self._split(th)
        lp_beta = -0.5 * np.sum(beta**2, axis=1) / self.prior_sd**2 - (self.p + 1) * np.log(
            self.prior_sd * np.sqrt(2 * np.pi)
        )
        s = self.sigma_u_scale
        log_sigma = th[:, self.p + 1]
        # half-normal density of σ_u, times dσ/d(log σ) = σ
        lp_sigma = np.log(2.0) - 0.5 * (sigma / s) ** 2 - np.log(s * np.sqrt(2 * np.pi)) + log_sigma
        z = th[:, self.p + 2 :]
        lp_z = -0.5 * np.sum(z**2, axis=1) - self.registries * 0.5 * np.log(2 * np.pi)
        return np.asarray(lp_beta + lp_sigma + lp_z, dtype=np.float64)

    def likelihood_coordinates(self, theta: F64) -> F64:
        """(β, u = σ_u z): the likelihood sees only the product of σ_u and z."""
        beta, _, u = self._split(theta)
        return np.asarray(np.hstack([beta, u]), dtype=np.float64)

    def from_likelihood_coordinates(self, psi: F64) -> F64:
        """(β, log σ_u = 0, z = u)."""
        ps = as_batch(psi, self.d - 1)
        k = self.p + 1
        return np.asarray(np.hstack([ps[:, :k], np.zeros((ps.shape[0], 1)), ps[:, k:]]), dtype=np.float64)

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        beta = rng.normal(0.0, self.prior_sd, size=(n, self.p + 1))
        sigma = np.abs(rng.normal(0.0, self.sigma_u_scale, size=(n, 1)))
        z = rng.normal(0.0, 1.0, size=(n, self.registries))
        return np.asarray(np.hstack([beta, np.log(sigma), z]), dtype=np.float64)

    # ---- likelihood ---------------------------------------------------------------------------------------

    def _eta(self, data: Data, theta: F64) -> F64:
        beta, _, u = self._split(theta)
        n = len(data[self.outcome])
        x = np.column_stack([np.ones(n), *(data[c] for c in self.covariates)])
        reg = np.asarray(data[self.registry]).astype(np.int64) - 1
        return np.asarray(beta @ x.T + u[:, reg], dtype=np.float64)

    def linear_predictor(self, data: Data, theta: F64) -> F64:
        beta, _, _ = self._split(theta)
        n = len(data[self.outcome])
        x = np.column_stack([np.ones(n), *(data[c] for c in self.covariates)])
        return np.asarray(beta @ x.T, dtype=np.float64)

    def log_likelihood_eta(self, data: Data, theta: F64, eta: F64) -> F64:
        y = np.asarray(data[self.outcome], dtype=np.float64)
        return np.asarray(eta @ y - softplus(eta).sum(axis=1), dtype=np.float64)

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        eta = self._eta(data, theta)
        s = 2.0 * data[self.outcome][None, :] - 1.0
        return np.asarray(-np.logaddexp(0.0, -s * eta), dtype=np.float64)

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        b0, _, u0 = self._split(theta)
        b1, _, u1 = self._split(theta_star)
        db = b1 - b0
        return np.asarray(self.eta_change_bound(db[:, 0], db[:, 1:]) + np.max(np.abs(u1 - u0), axis=1))

    def record_loglik_range(self, theta: F64) -> F64 | None:
        beta, _, u = self._split(theta)
        return np.asarray(self.eta_change_bound(beta[:, 0], beta[:, 1:]) + np.max(np.abs(u), axis=1))

    def public_log_bound(self, n_records: int) -> float | None:
        return 0.0

    def max_log_likelihood(self, data: Data) -> float:
        """u_j and the intercept are not separately identified within one registry: its maximum is the plain
        logistic regression's (Newton), ≤ 0."""
        plain = BayesLogistic(p=self.p, prior_sd=self.prior_sd, x_bound=self.x_bound, outcome=self.outcome)
        return plain.max_log_likelihood({k: v for k, v in data.items() if k != self.registry})

    # ---- synthetic registries (``confar run --simulate``) --------------------------------------------------

    def synthetic_data(self, rng: np.random.Generator, sizes: tuple[int, ...]) -> list[dict[str, F64]]:
        """``len(sizes) == registries`` registries: covariates shifted per registry, u_j ~ N(0, 0.7²)."""
        if len(sizes) != self.registries:
            raise ValueError(f"{len(sizes)} registry sizes for a model of {self.registries} registries")
        beta = np.r_[-0.8, [0.7 * (-0.6) ** k for k in range(self.p)]]
        out = []
        for j, n in enumerate(sizes, start=1):
            mu = rng.normal(0.0, 0.4, self.p)
            x = np.clip(rng.normal(mu, 1.0, size=(n, self.p)), -self.x_bound, self.x_bound)
            eta = beta[0] + rng.normal(0.0, 0.7) + x @ beta[1:]
            y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.float64)
            cols = {c: x[:, k].copy() for k, c in enumerate(self.covariates)}
            cols[self.outcome] = y
            cols[self.registry] = np.full(n, float(j))
            out.append(cols)
        return out
