"""Drawing the ABCDP privacy noise from a caller-supplied random source.

Owns the two noise laws ABCDP uses (Laplace for the sparse vector technique, Gaussian for the Gaussian
SVT, rejection and soft ABCDP) and the one seam through which randomness enters: every function takes the
generator as its first argument. Nothing here creates a generator.

Which generator to pass (privacy assumption):

* Real private runs: a source whose state no one else can reconstruct. Either a
  ``numpy.random.Generator`` seeded from the operating system's CSPRNG, e.g.
  ``np.random.default_rng(secrets.randbits(128))`` (never from the experiment's public seed), or any object
  with a ``uniform(shape) -> float array in (0, 1)`` method such as ``hss.randomness.SecureRandom``
  (AES-256-CTR keystream), in which case the noise is drawn by inverse CDF from those uniforms.
* Experiments and tests may pass seeded generators so that runs repeat.

Known limitation (Mironov, CCS 2012): noise drawn in floating point does not give the textbook guarantee
exactly (the set of reachable doubles leaks low-order bits). The accept bit of SVT reveals far less than a
noisy value does, but the bound reported in an event is the real-number bound; say so where it matters.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from scipy import special

FloatArray = npt.NDArray[np.float64]


@runtime_checkable
class UniformSource(Protocol):
    """Any source of uniforms in the open interval (0, 1), e.g. ``hss.randomness.SecureRandom``."""

    def uniform(self, shape: tuple[int, ...] | int) -> FloatArray: ...


NoiseRng = np.random.Generator | UniformSource


def _shape(size: int | tuple[int, ...]) -> tuple[int, ...]:
    return (size,) if isinstance(size, int) else tuple(size)


def _check_scale(scale: float) -> None:
    if not (scale >= 0.0) or not np.isfinite(scale):
        raise ValueError(f"noise scale must be finite and >= 0, got {scale}")


def laplace(rng: NoiseRng, scale: float, size: int | tuple[int, ...]) -> FloatArray:
    """Lap(0, scale) draws (density exp(-|x|/scale) / (2 scale)); zeros when scale == 0."""
    _check_scale(scale)
    shape = _shape(size)
    if scale == 0.0:
        return np.zeros(shape)
    if isinstance(rng, np.random.Generator):
        return np.asarray(rng.laplace(0.0, scale, size=shape), dtype=np.float64)
    u = np.asarray(rng.uniform(shape), dtype=np.float64) - 0.5
    return -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))


def gaussian(rng: NoiseRng, scale: float, size: int | tuple[int, ...]) -> FloatArray:
    """N(0, scale^2) draws; zeros when scale == 0."""
    _check_scale(scale)
    shape = _shape(size)
    if scale == 0.0:
        return np.zeros(shape)
    if isinstance(rng, np.random.Generator):
        return np.asarray(rng.normal(0.0, scale, size=shape), dtype=np.float64)
    u = np.asarray(rng.uniform(shape), dtype=np.float64)
    return scale * special.ndtri(u)


def draw(rng: NoiseRng, kind: str, scale: float, size: int | tuple[int, ...]) -> FloatArray:
    """Dispatch on ``kind`` ("laplace" or "gaussian")."""
    if kind == "laplace":
        return laplace(rng, scale, size)
    if kind == "gaussian":
        return gaussian(rng, scale, size)
    raise ValueError(f"unknown noise kind {kind!r}: use 'laplace' or 'gaussian'")
