"""Secret noise for confidential decisions, drawn from a cryptographically secure source.

Every secret draw here takes a :class:`hss.randomness.SecureRandom` (AES-256-CTR over an OS-random key):
never numpy's seeded generators and never the experiment's public seed. Continuous draws use the inverse
CDF on 53-bit uniforms in (0, 1) (Mironov 2012 warns about naive floating-point noise for DP; the
Gamma(1/m, 1) shares here make an accept-reject decision exact rather than providing DP on their own).

* :func:`gamma_shares`: V_j ~ Gamma(1/m, 1). The sum of the m parties' shares is Exp(1) = -log U, which
  turns "accept iff r >= U" into "accept iff log r + sum_j V_j >= 0" (Aslett et al. 2025). Inverse CDF
  (``scipy.special.gammainccinv``, about 3 µs a draw); federated ABCDP's Laplace noise is made of these.
* :func:`decision_gamma_shares`: the same law by Marsaglia and Tsang's exact rejection sampler (about 20x
  faster), for the decision noise of every accept/reject step, where the batch is large.
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


def decision_gamma_shares(rng: SecureRandom, m: int, n: int) -> npt.NDArray[np.float64]:
    """One party's n Gamma(1/m, 1) decision-noise shares, exact in law, from CSPRNG uniforms.

    G ~ Gamma(1 + 1/m) by Marsaglia and Tsang (2000): with d = 1/m + 2/3, c = 1/sqrt(9d), x ~ N(0, 1) (inverse
    normal CDF) and v = (1 + c x)^3, accept d v when v > 0 and log u < x^2/2 + d - d v + d log v (probability
    about 0.96 to 0.98 for shapes in (1, 2]); then G U^m ~ Gamma(1/m) (Stuart 1962: Gamma(a + 1) U^(1/a) is
    Gamma(a), U uniform and independent). Candidates are drawn in blocks and the first n accepted kept in
    order, so the output depends only on the stream (a party's step is repeatable from its key); the number
    of uniforms consumed varies with the rejections, which depend on the noise only, never on data.
    """
    if m < 1:
        raise ValueError(f"number of parties m must be >= 1, got {m}")
    if n < 0:
        raise ValueError(f"number of draws must be >= 0, got {n}")
    d = 1.0 / m + 2.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    kept: list[npt.NDArray[np.float64]] = []
    need = n
    while need > 0:
        k = need + need // 16 + 8  # ~ 2-4 % are rejected: one block almost always suffices
        x = special.ndtri(rng.uniform(k))
        u = rng.uniform(k)
        v = (1.0 + c * x) ** 3
        ok = v > 0
        with np.errstate(invalid="ignore", divide="ignore"):
            ok &= np.log(u) < 0.5 * x * x + d - d * v + d * np.log(np.where(ok, v, 1.0))
        got = (d * v[ok])[:need]
        kept.append(got)
        need -= got.size
    g = np.concatenate(kept) if kept else np.zeros(0)
    return np.asarray(g * rng.uniform(n) ** m, dtype=np.float64)


def normal(rng: SecureRandom, sigma: npt.ArrayLike, shape: int | tuple[int, ...]) -> npt.NDArray[np.float64]:
    """N(0, sigma^2) draws (sigma broadcast against ``shape``): inverse normal CDF of CSPRNG uniforms."""
    sd = np.asarray(sigma, dtype=np.float64)
    if (sd < 0).any() or not np.isfinite(sd).all():
        raise ValueError("normal noise needs finite sigma >= 0")
    return np.asarray(sd * special.ndtri(rng.uniform(shape)), dtype=np.float64)
