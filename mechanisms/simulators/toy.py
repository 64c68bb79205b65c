"""The ABCDP toy model: a mixture of uniforms with a flat Dirichlet prior on the weights.

Owns the prior, the simulator and the posterior-accuracy metric of the toy experiment of Park, Vinaroz,
Jitkrittum, "ABCDP", Entropy 23 (2021) 961, Section 6.1 (after K2-ABC, Park, Jitkrittum, Sejdinovic,
AISTATS 2016):

    θ ~ Dirichlet(1, ..., 1) on K = 5 components,    y_i | θ ~ Σ_k θ_k Uniform[k − 1, k],   i = 1..N,

with N = 5000 observations and the true weights θ* = (0.25, 0.04, 0.33, 0.04, 0.34) (given to the
functions here by the caller, who reads them from ``shared/data/abcdp_toy.json``: no file I/O here).

Simulated data sets come out grouped by component (component counts ~ Multinomial(N, θ), then uniforms
within each component): the data are exchangeable, and every distance we use (MMD, RFF-MMD) is invariant
to the order of the points, so no shuffle is spent. All randomness comes from the caller's generator
(simulations are public: use the public experiment generator, not the secret noise generator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ToyMixtureModel:
    """Mixture of Uniform[k−1, k], k = 1..n_components, with a Dirichlet(1, ..., 1) prior on the weights."""

    n_components: int = 5

    def __post_init__(self) -> None:
        if self.n_components < 2:
            raise ValueError(f"need at least 2 components, got {self.n_components}")

    @property
    def prior_mean(self) -> FloatArray:
        return np.full(self.n_components, 1.0 / self.n_components)

    def sample_prior(self, rng: np.random.Generator, n: int) -> FloatArray:
        """n draws of θ from Dirichlet(1, ..., 1): shape (n, K)."""
        return np.asarray(rng.dirichlet(np.ones(self.n_components), size=n), dtype=np.float64)

    def check_theta(self, theta: npt.ArrayLike) -> FloatArray:
        t = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        if t.shape[1] != self.n_components:
            raise ValueError(f"theta must have {self.n_components} weights per row, got shape {t.shape}")
        if np.any(t < -1e-12) or np.any(np.abs(t.sum(axis=1) - 1.0) > 1e-8):
            raise ValueError("mixture weights must be >= 0 and sum to 1")
        return np.clip(t, 0.0, None) / np.clip(t, 0.0, None).sum(axis=1, keepdims=True)

    def simulate(self, theta: npt.ArrayLike, n: int, rng: np.random.Generator) -> FloatArray:
        """One data set of n points per row of θ: (B, K) -> (B, n) (a single θ of shape (K,) gives (1, n))."""
        t = self.check_theta(theta)
        if n < 1:
            raise ValueError(f"data set size n must be >= 1, got {n}")
        counts = rng.multinomial(n, t)  # (B, K)
        ends = np.cumsum(counts, axis=1)  # component k occupies positions [ends[k-1], ends[k])
        positions = np.arange(n)
        component = (positions[None, None, :] >= ends[:, :, None]).sum(axis=1)  # (B, n) in 0..K-1
        return component + rng.random((t.shape[0], n))

    @staticmethod
    def mean_absolute_error(theta_hat: npt.ArrayLike, theta_true: npt.ArrayLike) -> float:
        """MAE between a posterior mean and the true weights (the paper's accuracy metric)."""
        return float(np.mean(np.abs(np.asarray(theta_hat, dtype=np.float64) - np.asarray(theta_true))))
