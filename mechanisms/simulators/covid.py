"""The ABCDP COVID-19 example: a cubic growth curve for the cumulative Dutch case counts.

Owns the model, prior and distance representation of the polynomial experiment of Park, Vinaroz,
Jitkrittum, "ABCDP", Entropy 23 (2021) 961, Section 6.2:

    y(t) = a3 + a2 t + a1 t² + a0 t³,   t = 0, 1, ..., 17 (27 February .. 17 March 2020),
    θ = (a0, a1, a2, a3) ~ N(0, I₄),

fitted to the 18 cumulative counts in ``shared/data/covid_nl_2020.json`` (read by the caller).

Choices (and why):

* Scale. We keep the model and the prior on the raw scale (cases, days), exactly as stated: a N(0, I₄)
  prior only means something on a fixed scale, and normalising the counts would silently change it (the
  reference pipeline works on a normalised version). Normalisation happens only inside the distance: each
  day becomes a record x_t = (t / 17, y_t / s) and ρ is the RFF-MMD between the observed and simulated
  record sets. The count scale s is public and comes from the prior predictive
  (:func:`prior_predictive_scale`: the median over prior draws of max_t |y(t)|), never from the observed
  counts; likewise the kernel bandwidth (median heuristic on prior-predictive records). Pairing the count
  with its day keeps the time order in the distance, which an MMD on the counts alone would ignore.
* Observation noise. The model as stated is deterministic; ABC's tolerance ε_abc plays the role of the
  noise kernel, so by default we add none. ``noise_sd`` > 0 adds N(0, noise_sd²) to each count.
* Privacy unit. Following the paper, a record is one day's (t, y_t); Δ_ρ = 2/18 for the RFF-MMD. This is
  not person-level privacy (one case contributes to every cumulative count from its day on); say so
  whenever the example is quoted as "private".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class CovidCubicModel:
    """y(t) = a3 + a2 t + a1 t² + a0 t³ on days t = 0..n_days−1, θ = (a0, a1, a2, a3) ~ N(0, prior_std² I)."""

    n_days: int = 18
    prior_std: float = 1.0
    noise_sd: float = 0.0

    def __post_init__(self) -> None:
        if self.n_days < 2 or self.prior_std <= 0 or self.noise_sd < 0:
            raise ValueError("need n_days >= 2, prior_std > 0 and noise_sd >= 0")

    @property
    def times(self) -> FloatArray:
        return np.arange(self.n_days, dtype=np.float64)

    def sample_prior(self, rng: np.random.Generator, n: int) -> FloatArray:
        """n draws of θ = (a0, a1, a2, a3): shape (n, 4)."""
        return rng.normal(0.0, self.prior_std, size=(n, 4))

    def trajectories(self, theta: npt.ArrayLike) -> FloatArray:
        """Noise-free curves: (B, 4) -> (B, n_days)."""
        th = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        if th.shape[1] != 4:
            raise ValueError(f"theta must have 4 coefficients (a0, a1, a2, a3), got shape {th.shape}")
        powers = self.times[None, :] ** np.arange(3, -1, -1)[:, None]  # rows t^3, t^2, t, 1
        return th @ powers

    def simulate(self, theta: npt.ArrayLike, rng: np.random.Generator) -> FloatArray:
        """Simulated counts (B, n_days): the curve plus optional N(0, noise_sd²) observation noise."""
        y = self.trajectories(theta)
        if self.noise_sd > 0:
            y = y + rng.normal(0.0, self.noise_sd, size=y.shape)
        return y

    def prior_predictive_scale(self, rng: np.random.Generator, n: int = 4000) -> float:
        """Public count scale s: median over prior draws of max_t |y(t)| (no observed data involved)."""
        return float(np.median(np.abs(self.simulate(self.sample_prior(rng, n), rng)).max(axis=1)))

    def records(self, counts: npt.ArrayLike, count_scale: float) -> FloatArray:
        """Per-day records (t/(n_days−1), y_t/s): (n_days,) -> (n_days, 2), (B, n_days) -> (B, n_days, 2)."""
        if not count_scale > 0:
            raise ValueError(f"count_scale must be > 0, got {count_scale}")
        y = np.asarray(counts, dtype=np.float64)
        if y.shape[-1] != self.n_days:
            raise ValueError(f"expected {self.n_days} counts per series, got shape {y.shape}")
        t = np.broadcast_to(self.times / (self.n_days - 1), y.shape)
        return np.stack([t, y / count_scale], axis=-1)
