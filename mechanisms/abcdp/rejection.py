"""Rejection ABCDP with Gaussian noise and soft ABCDP (the arXiv version of ABCDP).

Owns the two per-candidate-release variants that predate the SVT version (M. Park, W. Jitkrittum et al.,
arXiv version of "ABCDP"; the published Entropy 2021 paper keeps only the SVT):

* Rejection ABCDP: for each of T candidates, release the bit 1[min(ρ_t, B) + n_t ≤ ε_abc] with
  n_t ~ N(0, σ²). Each bit is ε₀-DP with ε₀ ≤ h(σ) (``accounting.rejection_gaussian_h``); σ comes from
  the target ε_total by bisection, with the T bits composed (``accounting.compose_pure_dp``).
* Soft ABCDP (K2-ABC-style weights): release s_t = ρ_t/ε_abc + σ_soft·n_t and weight candidate t by
  exp(−max(s_t, 0)), normalised. The weights are post-processing of a Gaussian mechanism with sensitivity
  Δ/ε_abc, RDP-accounted over T candidates with dp_accounting.

Unlike the SVT every candidate costs privacy, so ε_total grows with T. Privacy assumptions as in ``svt``:
ρ has replace-one sensitivity Δ and is bounded by B (clip first), candidates are data-independent, and the
noise generator is secret (CSPRNG-seeded for real runs; see ``noise``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp import accounting, events
from mechanisms.abcdp import noise as noise_lib

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _distances(distances: npt.ArrayLike) -> FloatArray:
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError("distances must be a 1-d array of finite values >= 0")
    return d


@dataclass(frozen=True)
class RejectionGaussianConfig:
    """Rejection ABCDP with Gaussian noise of std ``sigma`` on the clipped distance min(ρ, rho_bound).

    ``n_candidates`` is the public number of candidates (bits released); ``bound`` selects the paper's
    h(σ) ("paper") or the tight per-candidate value ("exact") for the reported ε.
    """

    eps_abc: float
    sensitivity: float
    rho_bound: float
    sigma: float
    n_candidates: int
    delta: float = 0.0
    bound: str = "paper"

    def __post_init__(self) -> None:
        if self.bound not in ("paper", "exact"):
            raise ValueError(f"bound must be 'paper' or 'exact', got {self.bound!r}")
        if self.sigma < 0 or self.n_candidates < 1:
            raise ValueError("sigma must be >= 0 and n_candidates >= 1")

    @classmethod
    def from_eps_total(
        cls, eps_total: float, n_candidates: int, sensitivity: float, eps_abc: float, rho_bound: float,
        delta: float = 0.0, bound: str = "paper",
    ) -> RejectionGaussianConfig:
        sigma = accounting.rejection_gaussian_sigma(eps_total, n_candidates, sensitivity, eps_abc, rho_bound,
                                                    delta, bound)
        return cls(eps_abc, sensitivity, rho_bound, sigma, n_candidates, delta, bound)

    def eps_per_candidate(self) -> float:
        if self.sigma == 0.0:
            return math.inf
        if self.bound == "paper":
            f = accounting.rejection_gaussian_h
        else:
            f = accounting.rejection_gaussian_exact_eps
        return f(self.sigma, self.sensitivity, self.eps_abc, self.rho_bound)

    def privacy_event(self, n_released: int | None = None) -> events.AbcdpPrivacyEvent:
        n = self.n_candidates if n_released is None else n_released
        eps = accounting.compose_pure_dp(self.eps_per_candidate(), n, self.delta)
        return events.AbcdpPrivacyEvent(
            name=events.REJECTION_GAUSSIAN, eps=eps, delta=self.delta if math.isfinite(eps) else 0.0,
            params={"eps_abc": self.eps_abc, "sensitivity": self.sensitivity, "rho_bound": self.rho_bound,
                    "sigma": self.sigma, "n_released": n, "bound": self.bound,
                    "eps_per_candidate": self.eps_per_candidate()},
        )


def rejection_abcdp_gaussian(
    distances: npt.ArrayLike, config: RejectionGaussianConfig, noise_rng: noise_lib.NoiseRng
) -> tuple[BoolArray, events.AbcdpPrivacyEvent]:
    """Accept bits 1[min(ρ_t, B) + N(0, σ²) ≤ ε_abc] for all candidates, and the privacy event."""
    d = _distances(distances)
    if d.shape[0] > config.n_candidates:
        raise ValueError(f"{d.shape[0]} candidates exceed the accounted n_candidates={config.n_candidates}")
    noisy = np.minimum(d, config.rho_bound) + noise_lib.gaussian(noise_rng, config.sigma, d.shape[0])
    return noisy <= config.eps_abc, config.privacy_event(int(d.shape[0]))


@dataclass(frozen=True)
class SoftABCDPConfig:
    """Soft ABCDP: noise std ``sigma_soft`` on ρ/ε_abc, over ``n_candidates`` releases, reported at δ."""

    eps_abc: float
    sensitivity: float
    sigma_soft: float
    n_candidates: int
    delta: float

    @classmethod
    def from_eps_total(
        cls, eps_total: float, delta: float, sensitivity: float, eps_abc: float, n_candidates: int
    ) -> SoftABCDPConfig:
        sigma = accounting.soft_abcdp_sigma(eps_total, delta, sensitivity, eps_abc, n_candidates)
        return cls(eps_abc, sensitivity, sigma, n_candidates, delta)

    def privacy_event(self, n_released: int | None = None) -> events.AbcdpPrivacyEvent:
        n = self.n_candidates if n_released is None else n_released
        eps = (math.inf if self.sigma_soft == 0.0
               else accounting.soft_abcdp_eps(self.sigma_soft, self.sensitivity, self.eps_abc, n, self.delta))
        return events.AbcdpPrivacyEvent(
            name=events.SOFT_GAUSSIAN, eps=eps, delta=self.delta if math.isfinite(eps) else 0.0,
            params={"eps_abc": self.eps_abc, "sensitivity": self.sensitivity, "sigma_soft": self.sigma_soft,
                    "n_released": n},
        )


def soft_abcdp_weights(
    distances: npt.ArrayLike, config: SoftABCDPConfig, noise_rng: noise_lib.NoiseRng
) -> tuple[FloatArray, FloatArray, events.AbcdpPrivacyEvent]:
    """Normalised weights exp(−max(ρ_t/ε_abc + σ n_t, 0)), the released noisy values, and the event."""
    d = _distances(distances)
    if d.shape[0] > config.n_candidates:
        raise ValueError(f"{d.shape[0]} candidates exceed the accounted n_candidates={config.n_candidates}")
    released = d / config.eps_abc + noise_lib.gaussian(noise_rng, config.sigma_soft, d.shape[0])
    log_w = -np.maximum(released, 0.0)
    w = np.exp(log_w - log_w.max()) if d.shape[0] else log_w
    return w / w.sum() if d.shape[0] else w, released, config.privacy_event(int(d.shape[0]))
