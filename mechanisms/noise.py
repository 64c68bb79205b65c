"""Secret noise for confidential decisions, drawn from a cryptographically secure source.

Every secret draw here takes a :class:`hss.randomness.SecureRandom` (AES-256-CTR over an OS-random key):
never numpy's seeded generators and never the experiment's public seed. Continuous draws use the inverse
CDF on 53-bit uniforms in (0, 1) (Mironov 2012 warns about naive floating-point noise for DP; the
Gamma(1/m, 1) shares here make an accept-reject decision exact rather than providing DP on their own).

* :func:`gamma_shares`: V_j ~ Gamma(1/m, 1). The sum of the m parties' shares is Exp(1) = -log U, which
  turns "accept iff r >= U" into "accept iff log r + sum_j V_j >= 0" (Aslett et al. 2025).
* :func:`normal`: λ ~ N(0, σ²) (a party's Yıldırım–Ermiş penalty noise), inverse CDF of CSPRNG uniforms.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import special

from hss.randomness import SecureRandom


def gamma_shares(rng: SecureRandom, m: int, shape: int | tuple[int, ...]) -> npt.NDArray[np.float64]:
    """One party's Gamma(1/m, 1) noise shares (inverse CDF of CSPRNG uniforms)."""
    if m < 1:
        raise ValueError(f"number of parties m must be >= 1, got {m}")
    u = rng.uniform(shape)
    return np.asarray(special.gammainccinv(1.0 / m, u), dtype=np.float64)


def normal(rng: SecureRandom, sigma: npt.ArrayLike, shape: int | tuple[int, ...]) -> npt.NDArray[np.float64]:
    """N(0, sigma^2) draws (sigma broadcast against ``shape``): inverse normal CDF of CSPRNG uniforms."""
    sd = np.asarray(sigma, dtype=np.float64)
    if (sd < 0).any() or not np.isfinite(sd).all():
        raise ValueError("normal noise needs finite sigma >= 0")
    return np.asarray(sd * special.ndtri(rng.uniform(shape)), dtype=np.float64)
