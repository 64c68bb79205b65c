"""Yıldırım–Ermiş penalty MH (Statistics and Computing 2019; Ceperley & Dewing 1999), the public side.

Each party j adds λ_j ~ N(0, σ²) from its CSPRNG to its log-ratio ℓ_j; the public term gets −mσ²/2. With
λ = Σ_j ℓ_j + public (the true log acceptance ratio) and s² = mσ², accepting when λ + N(0, s²) − s²/2 + E ≥ 0
(E ~ Exp(1), the confidential identity) has probability

    α(λ, s) = Φ(λ/s − s/2) + e^λ Φ(−λ/s − s/2),

which satisfies detailed balance (α(λ)/α(−λ) = e^λ), so the chain targets the exact posterior. σ(θ, θ*) =
τ n^α c(θ, θ*) (:class:`~mechanisms.samplers.requests.Penalty`), symmetric in (θ, θ*) as the method requires.
Privacy of the released noisy ratio: (1/(τ n^α))-GDP per step (``mechanisms.privacy.penalty``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import special

F64 = npt.NDArray[np.float64]


def penalty_acceptance(log_ratio: npt.ArrayLike, s: npt.ArrayLike) -> F64:
    """α(λ, s) = Φ(λ/s − s/2) + e^λ Φ(−λ/s − s/2); s = 0 gives min(1, e^λ)."""
    lam = np.asarray(log_ratio, dtype=np.float64)
    sd = np.asarray(s, dtype=np.float64)
    lam, sd = np.broadcast_arrays(lam, sd)
    out = np.minimum(1.0, np.exp(np.minimum(lam, 0.0)))
    pos = sd > 0
    sp, lp = sd[pos], lam[pos]
    out = out.astype(np.float64)
    out[pos] = special.ndtr(lp / sp - sp / 2) + np.exp(lp + special.log_ndtr(-lp / sp - sp / 2))
    return np.asarray(np.minimum(out, 1.0), dtype=np.float64)


def penalty_correction(sigma: F64, m: int) -> F64:
    """The public term −Σ_j σ_j²/2 = −mσ²/2."""
    return np.asarray(-0.5 * m * sigma**2, dtype=np.float64)
