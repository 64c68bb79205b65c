"""Exact privacy profiles of additive-noise mechanisms with log-concave noise.

Owns the hockey-stick divergence of a shift family ``P = law(X)``, ``Q = law(X + Δ)`` for a
log-concave noise X, and the three noises used in this package: Gaussian, Laplace, and the
ex-Gaussian ``N(0, s²) + Exp(1)`` that the Yıldırım–Ermiş penalty noise plus the confidential
accept-reject Exp(1) term produce (DESIGN.md §1).

Mathematics: for log-concave density p, the privacy loss ``L(x) = log p(x) − log p(x − Δ)`` is
non-increasing, so ``H_{e^ε}(P ‖ Q) = F(x_ε) − e^ε F(x_ε − Δ)`` with ``L(x_ε) = ε`` (the Neyman–
Pearson region is a half line). ``x_ε`` is found by bisection to machine precision; everything is
evaluated in log space. Where ``x_ε`` falls outside the bracket (tail mass < 1e-30) the tail mass is
added, so the result is an upper bound there. Both orderings of the pair are covered (the reverse
ordering is the reflected noise −X), so ``additive_noise_delta`` is the worst case over the shift
direction; a shift smaller than Δ gives a smaller divergence for log-concave noise (monotone
likelihood ratio), so Δ is the worst case for |a − a'| ≤ Δ too.

Threat model: whoever sees ``a + X`` and does not know X; a is the data-dependent quantity with
sensitivity Δ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy import special

from ._numeric import FloatArray, as_float_array, bisect_decreasing, log1mexp

__all__ = [
    "ExGaussianNoise",
    "GaussianNoise",
    "LaplaceNoise",
    "LogConcaveNoise",
    "Reflected",
    "additive_noise_delta",
    "one_way_delta",
]

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class LogConcaveNoise(Protocol):
    """A log-concave noise distribution on the real line, evaluated in log space."""

    def logpdf(self, x: FloatArray) -> FloatArray: ...
    def logcdf(self, x: FloatArray) -> FloatArray: ...
    def logsf(self, x: FloatArray) -> FloatArray: ...
    def bracket(self) -> tuple[float, float]:
        """An interval outside of which each tail has probability below 1e-30."""
        ...


@dataclass(frozen=True)
class GaussianNoise:
    """N(0, s²)."""

    s: float

    def logpdf(self, x: FloatArray) -> FloatArray:
        return np.asarray(-0.5 * (x / self.s) ** 2 - math.log(self.s) - _LOG_SQRT_2PI, dtype=np.float64)

    def logcdf(self, x: FloatArray) -> FloatArray:
        return np.asarray(special.log_ndtr(x / self.s), dtype=np.float64)

    def logsf(self, x: FloatArray) -> FloatArray:
        return np.asarray(special.log_ndtr(-x / self.s), dtype=np.float64)

    def bracket(self) -> tuple[float, float]:
        return (-12.0 * self.s, 12.0 * self.s)


@dataclass(frozen=True)
class LaplaceNoise:
    """Laplace(0, b)."""

    b: float

    def logpdf(self, x: FloatArray) -> FloatArray:
        return np.asarray(-np.abs(x) / self.b - math.log(2.0 * self.b), dtype=np.float64)

    def logcdf(self, x: FloatArray) -> FloatArray:
        neg = math.log(0.5) + np.minimum(x, 0.0) / self.b
        pos = np.log1p(-0.5 * np.exp(-np.maximum(x, 0.0) / self.b))
        return np.asarray(np.where(x < 0, neg, pos), dtype=np.float64)

    def logsf(self, x: FloatArray) -> FloatArray:
        return self.logcdf(-x)

    def bracket(self) -> tuple[float, float]:
        return (-70.0 * self.b, 70.0 * self.b)


@dataclass(frozen=True)
class ExGaussianNoise:
    """``N(0, s²) + Exp(1)``: density ``e^{s²/2 − x} Φ(x/s − s)``."""

    s: float

    def __post_init__(self) -> None:
        if not self.s > 0:
            raise ValueError(f"s must be positive, got {self.s}")

    def _log_tail_term(self, x: FloatArray) -> FloatArray:
        # log(e^{s²/2 − x} Φ(x/s − s)); also the log density.
        return np.asarray(-x + 0.5 * self.s**2 + special.log_ndtr(x / self.s - self.s), dtype=np.float64)

    def logpdf(self, x: FloatArray) -> FloatArray:
        return self._log_tail_term(x)

    def logcdf(self, x: FloatArray) -> FloatArray:
        # F(x) = Φ(x/s) − e^{s²/2 − x} Φ(x/s − s)
        lead = special.log_ndtr(x / self.s)
        return np.asarray(lead + log1mexp(np.minimum(self._log_tail_term(x) - lead, 0.0)), dtype=np.float64)

    def logsf(self, x: FloatArray) -> FloatArray:
        return np.asarray(
            np.logaddexp(special.log_ndtr(-x / self.s), self._log_tail_term(x)), dtype=np.float64
        )

    def bracket(self) -> tuple[float, float]:
        return (-12.0 * self.s, 12.0 * self.s + 70.0)


@dataclass(frozen=True)
class Reflected:
    """The law of −X for a noise X (used for the reverse ordering of a shift pair)."""

    noise: LogConcaveNoise

    def logpdf(self, x: FloatArray) -> FloatArray:
        return self.noise.logpdf(-x)

    def logcdf(self, x: FloatArray) -> FloatArray:
        return self.noise.logsf(-x)

    def logsf(self, x: FloatArray) -> FloatArray:
        return self.noise.logcdf(-x)

    def bracket(self) -> tuple[float, float]:
        lo, hi = self.noise.bracket()
        return (-hi, -lo)


def one_way_delta(eps: npt.ArrayLike, sensitivity: float, noise: LogConcaveNoise) -> FloatArray:
    """``H_{e^ε}(law(X) ‖ law(X + Δ))`` for log-concave X (exact up to floating point)."""
    if not sensitivity > 0:
        raise ValueError(f"sensitivity must be positive, got {sensitivity}")
    e = np.atleast_1d(as_float_array(eps)).astype(np.float64)
    lo0, hi0 = noise.bracket()
    lo, hi = lo0 - sensitivity, hi0 + sensitivity

    def loss(x: FloatArray) -> FloatArray:
        return noise.logpdf(x) - noise.logpdf(x - sensitivity)

    x = bisect_decreasing(loss, e, lo, hi, iterations=200)
    log_f = noise.logcdf(x)
    with np.errstate(invalid="ignore"):
        inner = np.minimum(e + noise.logcdf(x - sensitivity) - log_f, 0.0)
        value = np.exp(log_f) * -np.expm1(inner)
    value = np.where(np.isfinite(value), value, 0.0)
    # Conservative tail corrections when the root is outside the bracket.
    below = loss(np.full_like(e, lo)) <= e
    above = loss(np.full_like(e, hi)) > e
    value = np.where(below, np.maximum(value, float(np.exp(noise.logcdf(np.array([lo]))[0]))), value)
    value = np.where(above, value + float(np.exp(noise.logsf(np.array([hi]))[0])), value)
    out = np.clip(value, 0.0, 1.0)
    return out.reshape(np.shape(eps))


def additive_noise_delta(eps: npt.ArrayLike, sensitivity: float, noise: LogConcaveNoise) -> FloatArray:
    """Worst case over the shift direction: ``max(H(X ‖ X + Δ), H(X + Δ ‖ X))``."""
    return np.maximum(
        one_way_delta(eps, sensitivity, noise), one_way_delta(eps, sensitivity, Reflected(noise))
    )
