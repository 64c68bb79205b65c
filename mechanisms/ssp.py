"""Noise-aware sufficient-statistics perturbation (SSP) for Bayesian linear regression with a known noise sd:
the baseline an exact private sampler is measured against (issue 23, deliverable 7).

G. Bernstein and D. Sheldon, "Differentially private Bayesian linear regression", NeurIPS 32 (2019),
release the model's sufficient statistics with noise and then compute the posterior *given the noisy
release*, integrating over the unknown true statistics ("noise-aware"), instead of plugging the noisy
statistics into the conjugate formulas ("naive" SSP, which under-states the uncertainty when the noise is
not small against the sampling variability). This module is that method for the model of
:class:`mechanisms.models.linear.LinearRegression` (y_i ~ N(x̃_iᵀβ, σ²), x̃_i = (1, z_i), σ known,
β ~ N(0, τ² I)), released by the registries on secret shares.

**Release.** With σ known the posterior depends on the data only through S = Σ x̃_i x̃_iᵀ and u = Σ x̃_i y_i
(yᵀy is not needed). Each registry computes them on its records as the model checks them (clipped into the
public covariate ellipsoid, responses bounded by ``y_bound``), and adds its own share of Gaussian noise from
its CSPRNG (:func:`noisy_share`): N(0, sd_u²/m) on each coordinate of u and N(0, sd_S²/m) on each of vech(S)
(the upper triangle, diagonal included, the count S₀₀ = n among them), so that the revealed total (the
``sum`` reveal) carries N(0, sd_u²) and N(0, sd_S²). One record changes (u, vech S) by a vector whose blocks
have L2 norms at most (‖x̃‖ y_bound, ‖x̃‖²) (add-remove; twice for replace-one), ‖x̃‖ bounded in public by
:func:`record_norm_bound`, so the release is the Gaussian mechanism with
μ = f √((Δ_u/sd_u)² + (Δ_S/sd_S)²) √(m/r) (:func:`ssp_mu`; f = 1 or 2; r of the m registries' shares
unknown to the coalition assumed), charged as a :class:`GaussianEvent` (:func:`ssp_event`).

**Noise-aware posterior** (:func:`noise_aware_posterior`). Bernstein & Sheldon put a population model on the
covariates, approximate the sampling distribution of the statistics by a normal (CLT), and Gibbs-sample
(β, σ², statistics). With σ known a simpler exact route exists, and is what is built here:

* given the design, u | S, β ~ N(Sβ, σ² S) exactly (u = Sβ + Xᵀε), so the released
  z_u = u + e_u has z_u | S, β ~ N(Sβ, C), C = σ² S + sd_u² I: the noise on u is integrated in closed form,
  and β | S, z_u is Gaussian, precision Λ = τ⁻² I + S C⁻¹ S, mean Λ⁻¹ S C⁻¹ z_u;
* S is unknown: it is given a flat prior on the positive-definite cone (no population model for the
  covariates — an assumption, stated: at registry scale the noise sd_S is far below the sampling spread of S,
  ~√n per entry, so a population prior would add next to nothing), so S | Z_S is N(Z_S, sd_S²) per vech
  entry truncated to positive-definite matrices, and z_u carries information on S too, through
  p(z_u | S) = N(z_u; 0, τ² S² + C) (β integrated against its prior);
* the posterior of β is then the mixture Σ_k w_k N(m_k, Λ_k⁻¹) over draws S_k ~ N(Z_S, sd_S²) (rejected until
  positive definite) with importance weights w_k ∝ p(z_u | S_k): exact for the stated model up to Monte Carlo
  error (the weights' ESS is reported). With no noise (sd_u = sd_S = 0) it is the exact conjugate posterior.

The responses' clipping to ±y_bound is ignored by the likelihood (as by the model's own: y_bound is meant to
lie in the far tails). :func:`naive_posterior` is the plug-in for comparison; it is not noise-aware.
Pure: no I/O; the secret noise comes in as a :class:`hss.randomness.SecureRandom`, the posterior's Monte Carlo
(post-processing of public releases) from a numpy generator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from hss.randomness import SecureRandom
from mechanisms import noise
from mechanisms.models.base import F64, Data
from mechanisms.models.linear import LinearRegression
from mechanisms.privacy.events import GaussianEvent

__all__ = [
    "MixturePosterior",
    "SSPPlan",
    "SSPRelease",
    "exact_posterior",
    "local_statistics",
    "naive_posterior",
    "noise_aware_posterior",
    "noisy_share",
    "plan_for_mu",
    "record_norm_bound",
    "release",
    "ssp_event",
    "ssp_mu",
]

NEIGHBOUR_FACTOR = {"add-remove": 1.0, "replace-one": 2.0}


def _vech_index(d: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    iu = np.triu_indices(d)
    return iu[0], iu[1]


def vech(mat: F64) -> F64:
    """The upper triangle (diagonal included) of a symmetric (d, d) matrix, row by row."""
    i, j = _vech_index(mat.shape[-1])
    return np.asarray(mat[..., i, j], dtype=np.float64)


def unvech(v: F64, d: int) -> F64:
    """The symmetric matrices (..., d, d) of upper triangles ``v`` (..., d(d+1)/2)."""
    i, j = _vech_index(d)
    out = np.zeros((*v.shape[:-1], d, d))
    out[..., i, j] = v
    out[..., j, i] = v
    return out


def record_norm_bound(model: LinearRegression) -> float:
    """A public bound on ‖x̃‖₂ = √(1 + ‖z‖²) over the records the model allows: ‖z‖ <= √p x_bound (the box)
    and, with a covariate ellipsoid (μ, B, R) the records are clipped into, ‖z‖ <= ‖μ‖ + R √λ_max(B)."""
    z = math.sqrt(model.p) * model.x_bound
    ell = model.ellipsoid
    if ell is not None and model.p:
        top = float(np.linalg.eigvalsh(ell.matrix).max())
        z = min(z, float(np.linalg.norm(ell.mu)) + ell.radius * math.sqrt(top))
    return math.sqrt(1.0 + z * z)


def sensitivities(model: LinearRegression) -> tuple[float, float]:
    """(Δ_u, Δ_S): the add-remove L2 sensitivities of u = Σ x̃ y and of vech(S), S = Σ x̃ x̃ᵀ
    (‖vech(x̃x̃ᵀ)‖ <= ‖x̃x̃ᵀ‖_F = ‖x̃‖²)."""
    b = record_norm_bound(model)
    return b * model.y_bound, b * b


@dataclass(frozen=True)
class SSPPlan:
    """The public noise of one SSP release: the total sds (all ``m`` registries' shares together) on each
    coordinate of u and of vech(S)."""

    sd_u: float
    sd_s: float
    m: int

    def __post_init__(self) -> None:
        for key in ("sd_u", "sd_s"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"SSP {key} must be a finite number >= 0, got {v!r}")
        if self.m < 1:
            raise ValueError(f"number of registries m must be >= 1, got {self.m}")


def plan_for_mu(model: LinearRegression, mu: float, m: int, share_u: float = 0.5) -> SSPPlan:
    """The noise that makes the release μ-GDP against the coordinator (add-remove, every registry's share
    unknown to it), with a share ``share_u`` of μ² spent on u and the rest on S (½: the two errors they cause
    in β, ≈ sd_u/n and ≈ sd_S ‖β‖/n, are of similar size when ‖β‖ ≈ y_bound/‖x̃‖)."""
    if not (mu > 0 and math.isfinite(mu)):
        raise ValueError(f"SSP mu must be a finite number > 0, got {mu!r}")
    if not 0.0 < share_u < 1.0:
        raise ValueError(f"share_u must lie in (0, 1), got {share_u!r}")
    du, ds = sensitivities(model)
    return SSPPlan(du / (mu * math.sqrt(share_u)), ds / (mu * math.sqrt(1.0 - share_u)), m)


def ssp_mu(
    model: LinearRegression, plan: SSPPlan, residual: int | None = None, neighbours: str = "add-remove"
) -> float:
    """GDP μ of the release for a registry whose assumed coalition leaves ``residual`` of the m registries'
    noise shares unknown (default all m: the coordinator)."""
    r = plan.m if residual is None else residual
    if not 1 <= r <= plan.m:
        raise ValueError(f"residual registries must be in 1..{plan.m}, got {r}")
    factor = NEIGHBOUR_FACTOR.get(neighbours)
    if factor is None:
        raise ValueError(f"neighbours must be 'add-remove' or 'replace-one', got {neighbours!r}")
    if plan.sd_u == 0 or plan.sd_s == 0:
        return math.inf
    du, ds = sensitivities(model)
    return factor * math.hypot(du / plan.sd_u, ds / plan.sd_s) * math.sqrt(plan.m / r)


def ssp_event(
    model: LinearRegression, plan: SSPPlan, residual: int | None = None, neighbours: str = "add-remove"
) -> GaussianEvent:
    """The release as a ledger event."""
    return GaussianEvent(mu=ssp_mu(model, plan, residual, neighbours), label="ssp linear regression")


def local_statistics(model: LinearRegression, data: Data) -> F64:
    """A registry's (u, vech S) of its records as the model checks (and clips) them, without noise."""
    checked = model.check_data(data)
    x = model.design(checked)
    y = checked[model.outcome]
    return np.concatenate([x.T @ y, vech(x.T @ x)])


def noisy_share(model: LinearRegression, data: Data, plan: SSPPlan, rng: SecureRandom) -> F64:
    """A registry's released (u, vech S): its statistics plus its noise share N(0, sd²/m) from its CSPRNG."""
    stats = local_statistics(model, data)
    d = model.d
    sd = np.r_[np.full(d, plan.sd_u), np.full(stats.size - d, plan.sd_s)] / math.sqrt(plan.m)
    return np.asarray(stats + noise.normal(rng, sd, stats.size), dtype=np.float64)


@dataclass(frozen=True)
class SSPRelease:
    """The revealed totals: u = Xᵀy and S = XᵀX with the registries' noise."""

    u: F64
    s: F64

    @classmethod
    def from_total(cls, total: F64, d: int) -> SSPRelease:
        return cls(np.asarray(total[:d], dtype=np.float64), unvech(np.asarray(total[d:]), d))


def release(
    model: LinearRegression, datasets: Sequence[Data], plan: SSPPlan, rngs: Sequence[SecureRandom]
) -> SSPRelease:
    """The ``sum`` reveal of ``len(datasets)`` registries in one process (tests, simulations)."""
    if len(datasets) != plan.m or len(rngs) != plan.m:
        raise ValueError(
            f"the plan is for {plan.m} registries, got {len(datasets)} datasets, {len(rngs)} keys"
        )
    total = np.sum([noisy_share(model, d, plan, g) for d, g in zip(datasets, rngs, strict=True)], axis=0)
    return SSPRelease.from_total(total, model.d)


@dataclass(frozen=True)
class MixturePosterior:
    """Σ_k w_k N(means_k, covs_k): the posterior of β (one component: a Gaussian)."""

    weights: F64
    means: F64
    covs: F64

    def mean(self) -> F64:
        return np.asarray(self.weights @ self.means, dtype=np.float64)

    def cov(self) -> F64:
        c = self.means - self.mean()
        within = np.einsum("k,kij->ij", self.weights, self.covs)
        return np.asarray(within + np.einsum("k,ki,kj->ij", self.weights, c, c), dtype=np.float64)

    def sd(self) -> F64:
        return np.asarray(np.sqrt(np.diag(self.cov())), dtype=np.float64)

    def ess(self) -> float:
        """Kish's effective number of components (the importance weights' ESS)."""
        return float(1.0 / np.sum(self.weights**2))

    def sample(self, rng: np.random.Generator, size: int) -> F64:
        k = rng.choice(self.weights.size, size=size, p=self.weights)
        chol = np.linalg.cholesky(self.covs)
        z = rng.standard_normal((size, self.means.shape[1]))
        return np.asarray(self.means[k] + np.einsum("nij,nj->ni", chol[k], z), dtype=np.float64)

    def interval(self, level: float) -> tuple[F64, F64]:
        """Central credible intervals per coordinate (the mixture's marginal quantiles, by bisection)."""
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must lie in (0, 1), got {level}")
        sds = np.sqrt(np.diagonal(self.covs, axis1=1, axis2=2))  # (K, d)

        def quantile(p: float) -> F64:
            lo = (self.means - 12 * sds).min(axis=0)
            hi = (self.means + 12 * sds).max(axis=0)
            for _ in range(100):
                mid = 0.5 * (lo + hi)
                cdf = self.weights @ special.ndtr((mid - self.means) / sds)
                lo, hi = np.where(cdf < p, mid, lo), np.where(cdf < p, hi, mid)
            return np.asarray(0.5 * (lo + hi), dtype=np.float64)

        a = 0.5 * (1.0 - level)
        return quantile(a), quantile(1.0 - a)


def exact_posterior(model: LinearRegression, u: F64, s: F64) -> MixturePosterior:
    """The conjugate posterior of β from the true statistics: precision Λ = τ⁻² I + S/σ², mean Λ⁻¹ u/σ²."""
    d = model.d
    prec = np.eye(d) / model.prior_sd**2 + s / model.sigma**2
    cov = np.linalg.inv(prec)
    cov = 0.5 * (cov + cov.T)
    return MixturePosterior(np.ones(1), (cov @ u / model.sigma**2)[None], cov[None])


def _nearest_pd(mat: F64, floor: float) -> F64:
    w, v = np.linalg.eigh(0.5 * (mat + mat.T))
    return np.asarray((v * np.maximum(w, floor)) @ v.T, dtype=np.float64)


def naive_posterior(model: LinearRegression, rel: SSPRelease) -> MixturePosterior:
    """Plug-in SSP: the noisy statistics used as if they were the true ones (S's eigenvalues floored at 1 so
    the formula is defined). Not noise-aware: its intervals under-cover when the noise is not small."""
    return exact_posterior(model, rel.u, _nearest_pd(rel.s, 1.0))


def noise_aware_posterior(
    model: LinearRegression,
    rel: SSPRelease,
    plan: SSPPlan,
    rng: np.random.Generator,
    draws: int = 2000,
    max_tries: int = 50,
) -> MixturePosterior:
    """The posterior of β given the noisy release (module docstring): a mixture over ``draws`` values of S
    drawn from N(Z_S, sd_S²) per vech entry, kept when positive definite, weighted by p(z_u | S)."""
    d = model.d
    if plan.sd_u == 0 and plan.sd_s == 0:
        return exact_posterior(model, rel.u, rel.s)
    zs = vech(rel.s)
    if plan.sd_s == 0:
        samples = rel.s[None]
    else:
        kept: list[F64] = []
        count = 0
        for _ in range(max_tries):
            cand = unvech(zs + plan.sd_s * rng.standard_normal((draws, zs.size)), d)
            ok = np.linalg.eigvalsh(cand)[:, 0] > 0
            kept.append(cand[ok])
            count += int(ok.sum())
            if count >= draws:
                break
        if count < draws:
            raise ValueError(
                f"the noisy X'X is too far from positive definite for its noise (sd {plan.sd_s:.3g}): "
                f"{count} of {draws * max_tries} draws were; more records or less noise"
            )
        samples = np.concatenate(kept)[:draws]
    sig2, tau2 = model.sigma**2, model.prior_sd**2
    eye = np.eye(d)
    c = sig2 * samples + plan.sd_u**2 * eye  # (K, d, d)
    c_inv_s = np.linalg.solve(c, samples)  # C⁻¹ S
    prec = eye / tau2 + samples @ c_inv_s  # S C⁻¹ S (S, C commute: both symmetric polynomials of S)
    prec = 0.5 * (prec + np.swapaxes(prec, 1, 2))
    covs = np.linalg.inv(prec)
    covs = 0.5 * (covs + np.swapaxes(covs, 1, 2))
    lin = np.einsum("kij,j->ki", np.swapaxes(c_inv_s, 1, 2), rel.u)  # S C⁻¹ z_u
    means = np.einsum("kij,kj->ki", covs, lin)
    marg = tau2 * samples @ samples + c  # Cov(z_u | S) with β integrated against its prior
    _, logdet = np.linalg.slogdet(marg)
    quad = np.einsum("i,ki->k", rel.u, np.linalg.solve(marg, rel.u[None, :, None])[..., 0])
    logw = -0.5 * (logdet + quad)
    w = np.exp(logw - logw.max())
    return MixturePosterior(w / w.sum(), np.asarray(means), np.asarray(covs))
