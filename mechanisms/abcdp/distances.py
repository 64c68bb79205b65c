"""Distances ρ(Y*, Y) between the private data and simulated data, each with a declared sensitivity.

Owns the distances ABCDP may feed to the sparse vector technique, and the helpers that choose their
hyperparameters from simulated data only:

* :class:`GaussianKernelMMD`: exact (quadratic-time) MMD with the Gaussian kernel
  k(x, y) = exp(−‖x − y‖² / (2 h²)). We use the *biased* V-statistic: ρ = ‖μ̂_{Y*} − μ̂_Y‖ in the RKHS,
  the distance between the two empirical mean embeddings (its square is the V-statistic MMD²). Being a
  norm of a difference, it obeys the triangle inequality, so replacing one of the N private records moves
  μ̂_{Y*} by ‖φ(y) − φ(y')‖/N ≤ 2√B_k/N: sensitivity Δ_ρ = 2√B_k/N = 2/N (B_k = sup k(x, x) = 1), and
  ρ ≤ 2√B_k = 2. (The unbiased U-statistic has neither property cleanly, so it is not offered here.)
* :class:`RFFMMD`: the same with random Fourier features φ(x) = √(2/D)[cos(Wx), sin(Wx)], W ~ N(0, I/h²):
  ‖φ(x)‖ = 1 exactly for every x, so Δ_ρ = 2/N and ρ ≤ 2 hold without approximation. The frequencies W are
  public (drawn from the public generator). The private side enters only through the mean embedding
  μ* = (1/N) Σ_i φ(y_i) = (1/N) Σ_k S_k, which is what the federated version sums on secret shares.
* :class:`ClippedAveragedDistance`: ρ = (1/N) Σ_i min(d(y_i, Y), C) for a per-record distance d that
  depends on record i alone: Δ_ρ = C/N, ρ ≤ C.
* :class:`DeclaredDistance`: any user distance, clipped to a declared bound C, with a declared sensitivity
  (the user's responsibility; we only clip).

Privacy assumptions: the kernel bandwidth h and the clipping bound C are public and must not be tuned on
the private data (the ABCDP reference code's COVID script takes h from the observed data, which leaks
unaccounted information). :func:`median_heuristic_bandwidth` takes prior-predictive simulations and
:func:`clip_bound_from_simulations` takes distances between simulated data sets; neither sees Y*.
Distance objects hold private data: their reprs omit it.

Paper: Park, Vinaroz, Jitkrittum, Entropy 23 (2021) 961 (Δ_ρ for MMD and RFF); Rahimi & Recht (2007).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@runtime_checkable
class PrivateDistance(Protocol):
    """A distance to the private data with public ``sensitivity`` (replace-one) and ``upper_bound``."""

    @property
    def sensitivity(self) -> float: ...

    @property
    def upper_bound(self) -> float: ...

    def __call__(self, simulated: Any) -> FloatArray: ...


def _as_points(x: npt.ArrayLike) -> FloatArray:
    """One data set as (n, d)."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"a data set must have shape (n,) or (n, d) with n >= 1, got {a.shape}")
    return a


def _as_batch(x: npt.ArrayLike, dim: int) -> npt.NDArray[np.floating[Any]]:
    """Simulated data sets as (B, M, d); a 2-d (B, M) means d = 1 if ``dim`` == 1, else one (M, d) set."""
    a = np.asarray(x)
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    if a.ndim == 2:
        a = a[:, :, None] if dim == 1 else a[None, :, :]
    if a.ndim != 3 or a.shape[2] != dim:
        raise ValueError(f"simulated data must be (B, M, {dim}) (or (B, M) for 1-d data), got {np.shape(x)}")
    return a


def _sq_dists(x: npt.NDArray[np.floating[Any]], y: npt.NDArray[np.floating[Any]]) -> FloatArray:
    """Pairwise squared Euclidean distances, (..., n, d) x (..., m, d) -> (..., n, m)."""
    xx = np.sum(x * x, axis=-1)[..., :, None]
    yy = np.sum(y * y, axis=-1)[..., None, :]
    return np.maximum(xx + yy - 2.0 * (x @ np.swapaxes(y, -1, -2)), 0.0).astype(np.float64)


def _check_bandwidth(bandwidth: float) -> None:
    if not (bandwidth > 0.0) or not math.isfinite(bandwidth):
        raise ValueError(f"kernel bandwidth must be finite and > 0, got {bandwidth}")


def gaussian_kernel(x: npt.ArrayLike, y: npt.ArrayLike, bandwidth: float) -> FloatArray:
    """k(x, y) = exp(−‖x − y‖²/(2h²)) for all pairs: (n, d) x (m, d) -> (n, m)."""
    _check_bandwidth(bandwidth)
    return np.exp(-_sq_dists(_as_points(x), _as_points(y)) / (2.0 * bandwidth**2))


def _mean_kernel(x: FloatArray, y: npt.NDArray[np.floating[Any]], bandwidth: float, block: int) -> FloatArray:
    """Mean of k(x_i, y_bj) over i, j for each batch member b: x (n, d), y (B, m, d) -> (B,)."""
    total = np.zeros(y.shape[0])
    for i in range(0, x.shape[0], block):
        xi = x[i:i + block]
        for j in range(0, y.shape[1], block):
            yj = y[:, j:j + block, :].astype(np.float64)
            total += np.exp(-_sq_dists(xi[None], yj) / (2.0 * bandwidth**2)).sum(axis=(1, 2))
    return total / (x.shape[0] * y.shape[1])


@dataclass(frozen=True)
class GaussianKernelMMD:
    """Exact biased (V-statistic) MMD ρ = ‖μ̂_{Y*} − μ̂_Y‖ with a Gaussian kernel of public bandwidth.

    Cost O((N + M)² d) per simulated data set, computed in blocks of ``block`` points.
    """

    observed: FloatArray = field(repr=False)
    bandwidth: float
    block: int = 1024
    _kxx: float = field(init=False, repr=False, default=0.0)

    def __post_init__(self) -> None:
        _check_bandwidth(self.bandwidth)
        obs = _as_points(self.observed)
        object.__setattr__(self, "observed", obs)
        object.__setattr__(self, "_kxx", float(_mean_kernel(obs, obs[None], self.bandwidth, self.block)[0]))

    @property
    def n_observed(self) -> int:
        return int(self.observed.shape[0])

    @property
    def sensitivity(self) -> float:
        """Δ_ρ = 2√B_k/N with B_k = 1."""
        return 2.0 / self.n_observed

    @property
    def upper_bound(self) -> float:
        return 2.0

    def __call__(self, simulated: npt.ArrayLike) -> FloatArray:
        y = _as_batch(simulated, self.observed.shape[1])
        kyy = np.array(
            [_mean_kernel(yb.astype(np.float64), yb[None], self.bandwidth, self.block)[0] for yb in y]
        )
        kxy = _mean_kernel(self.observed, y, self.bandwidth, self.block)
        return np.sqrt(np.maximum(self._kxx + kyy - 2.0 * kxy, 0.0))


@dataclass(frozen=True)
class RandomFourierFeatures:
    """φ(x) = √(2/D) [cos(W x), sin(W x)] for the Gaussian kernel of bandwidth h; ‖φ(x)‖ = 1 exactly.

    ``frequencies`` W has shape (D/2, d) with rows ~ N(0, I/h²). Public: draw it from the public generator.
    """

    frequencies: FloatArray

    def __post_init__(self) -> None:
        w = np.asarray(self.frequencies, dtype=np.float64)
        if w.ndim != 2 or w.shape[0] < 1:
            raise ValueError(f"frequencies must have shape (D/2, d), got {w.shape}")
        object.__setattr__(self, "frequencies", w)

    @classmethod
    def draw(
        cls, rng: np.random.Generator, dim: int, n_features: int, bandwidth: float
    ) -> RandomFourierFeatures:
        """n_features (even) features for d-dimensional data, frequencies ~ N(0, I/h²) from a public rng."""
        _check_bandwidth(bandwidth)
        if n_features < 2 or n_features % 2:
            raise ValueError(f"n_features must be an even number >= 2, got {n_features}")
        return cls(rng.normal(0.0, 1.0 / bandwidth, size=(n_features // 2, dim)))

    @property
    def n_features(self) -> int:
        return 2 * int(self.frequencies.shape[0])

    @property
    def dim(self) -> int:
        return int(self.frequencies.shape[1])

    def features(self, x: npt.ArrayLike) -> FloatArray:
        """φ for points of shape (..., d) -> (..., D)."""
        a = np.asarray(x, dtype=np.float64)
        phase = a @ self.frequencies.T
        scale = math.sqrt(2.0 / self.n_features)
        return np.concatenate([np.cos(phase), np.sin(phase)], axis=-1) * scale

    def mean_embedding(
        self, batch: npt.ArrayLike, dtype: type[np.floating[Any]] = np.float64, block: int = 256
    ) -> FloatArray:
        """Mean feature of each simulated data set: (B, M, d), or (B, M) for 1-d data -> (B, D).

        ``dtype=np.float32`` computes the phases in single precision (several times faster); use it only
        for simulated data, whose embedding is not part of the sensitivity argument.
        """
        data = _as_batch(batch, self.dim)
        w = self.frequencies.T.astype(dtype)
        half = self.frequencies.shape[0]
        out = np.empty((data.shape[0], self.n_features))
        for i in range(0, data.shape[0], block):
            phase = data[i:i + block].astype(dtype) @ w
            out[i:i + block, :half] = np.cos(phase).mean(axis=1, dtype=np.float64)
            out[i:i + block, half:] = np.sin(phase).mean(axis=1, dtype=np.float64)
        out *= math.sqrt(2.0 / self.n_features)
        return out

    def mean_embedding_one(self, points: npt.ArrayLike) -> FloatArray:
        """Mean feature (D,) of one data set (M, d) or (M,), in double precision."""
        return np.asarray(self.features(_as_points(points)).mean(axis=0), dtype=np.float64)


@dataclass(frozen=True)
class RFFMMD:
    """ρ = ‖μ* − μ̂_Y‖₂ with random Fourier features; Δ_ρ = 2/N, ρ ≤ 2."""

    features: RandomFourierFeatures
    observed_embedding: FloatArray = field(repr=False)
    n_observed: int
    simulated_dtype: type[np.floating[Any]] = np.float64

    @classmethod
    def from_observed(
        cls, features: RandomFourierFeatures, observed: npt.ArrayLike,
        simulated_dtype: type[np.floating[Any]] = np.float64,
    ) -> RFFMMD:
        obs = _as_points(observed)
        if obs.shape[1] != features.dim:
            raise ValueError(f"observed data has dimension {obs.shape[1]}, features expect {features.dim}")
        return cls(features, features.mean_embedding_one(obs), int(obs.shape[0]), simulated_dtype)

    @classmethod
    def from_feature_sums(
        cls, features: RandomFourierFeatures, feature_sum: npt.ArrayLike, n_observed: int
    ) -> RFFMMD:
        """From Σ_i φ(y_i) (e.g. the sum of the parties' S_k) and N."""
        s = np.asarray(feature_sum, dtype=np.float64)
        if s.shape != (features.n_features,) or n_observed < 1:
            raise ValueError("feature_sum must have shape (D,) and n_observed must be >= 1")
        return cls(features, s / n_observed, int(n_observed))

    @property
    def sensitivity(self) -> float:
        return 2.0 / self.n_observed

    @property
    def upper_bound(self) -> float:
        return 2.0

    def from_embeddings(self, embeddings: npt.ArrayLike) -> FloatArray:
        """Distances to precomputed simulated mean embeddings (B, D) -> (B,)."""
        e = np.atleast_2d(np.asarray(embeddings, dtype=np.float64))
        return np.minimum(np.linalg.norm(e - self.observed_embedding, axis=1), 2.0)

    def __call__(self, simulated: npt.ArrayLike) -> FloatArray:
        batch = _as_batch(simulated, self.features.dim)
        return self.from_embeddings(self.features.mean_embedding(batch, dtype=self.simulated_dtype))


def _clip(values: npt.ArrayLike, bound: float) -> FloatArray:
    v = np.asarray(values, dtype=np.float64)
    v = np.where(np.isnan(v), bound, v)
    return np.clip(v, 0.0, bound)


@dataclass(frozen=True)
class ClippedAveragedDistance:
    """ρ(Y*, Y) = (1/N) Σ_i min(d(y_i, Y), C); Δ_ρ = C/N, ρ ≤ C.

    ``per_record(records, simulated) -> (B, N)`` must compute record i's column from record i alone (and
    public or simulated inputs): that is what makes the sensitivity C/N. NaN and negative values are
    mapped to C and 0.
    """

    records: Any = field(repr=False)
    per_record: Callable[[Any, Any], FloatArray]
    clip: float
    n_records: int

    def __post_init__(self) -> None:
        if not (self.clip > 0.0) or not math.isfinite(self.clip):
            raise ValueError(f"clip bound C must be finite and > 0, got {self.clip}")
        if self.n_records < 1:
            raise ValueError(f"n_records must be >= 1, got {self.n_records}")

    @property
    def sensitivity(self) -> float:
        return self.clip / self.n_records

    @property
    def upper_bound(self) -> float:
        return self.clip

    def __call__(self, simulated: Any) -> FloatArray:
        d = np.atleast_2d(np.asarray(self.per_record(self.records, simulated), dtype=np.float64))
        if d.shape[1] != self.n_records:
            raise ValueError(f"per_record returned shape {d.shape}; expected (B, {self.n_records})")
        return np.minimum(_clip(d, self.clip).mean(axis=1), self.clip)  # the mean can round above C


@dataclass(frozen=True)
class DeclaredDistance:
    """A user distance ``fn(simulated) -> (B,)`` clipped to ``clip`` with a declared sensitivity.

    The declared sensitivity must hold for the clipped distance under replace-one; it is not checked.
    """

    fn: Callable[[Any], FloatArray] = field(repr=False)
    declared_sensitivity: float
    clip: float

    def __post_init__(self) -> None:
        if not (self.declared_sensitivity > 0.0) or not math.isfinite(self.declared_sensitivity):
            raise ValueError(f"declared sensitivity must be finite and > 0, got {self.declared_sensitivity}")
        if not (self.clip > 0.0) or not math.isfinite(self.clip):
            raise ValueError(f"clip bound must be finite and > 0, got {self.clip}")

    @property
    def sensitivity(self) -> float:
        return min(self.declared_sensitivity, self.clip)

    @property
    def upper_bound(self) -> float:
        return self.clip

    def __call__(self, simulated: Any) -> FloatArray:
        return np.atleast_1d(_clip(self.fn(simulated), self.clip))


# -- hyperparameters from simulated data only ----------------------------------------------------


def median_heuristic_bandwidth(
    prior_predictive: npt.ArrayLike, rng: np.random.Generator, max_points: int = 2000
) -> float:
    """Median pairwise Euclidean distance among pooled prior-predictive points (never the observed data).

    ``prior_predictive``: simulated data sets (B, M, d), or already pooled points (n, d) or (n,) for 1-d
    data. A random subset of at most ``max_points`` points (chosen with the public ``rng``) is used.
    """
    a = np.asarray(prior_predictive, dtype=np.float64)
    pts = a.reshape(-1, a.shape[-1]) if a.ndim == 3 else _as_points(a)
    if pts.shape[0] > max_points:
        pts = pts[rng.choice(pts.shape[0], size=max_points, replace=False)]
    d2 = _sq_dists(pts, pts)
    iu = np.triu_indices(pts.shape[0], k=1)
    med = float(np.sqrt(np.median(d2[iu])))
    if not med > 0.0:
        raise ValueError("median pairwise distance is 0: the simulated data are degenerate")
    return med


def clip_bound_from_simulations(simulated_distances: npt.ArrayLike, quantile: float = 0.95) -> float:
    """A clipping bound C as a quantile of distances computed between simulated data sets only."""
    d = np.asarray(simulated_distances, dtype=np.float64).ravel()
    d = d[np.isfinite(d)]
    if d.size == 0:
        raise ValueError("no finite simulated distances to choose a clipping bound from")
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    c = float(np.quantile(d, quantile))
    if not c > 0.0:
        raise ValueError("the chosen clipping bound is 0; use a higher quantile")
    return c
