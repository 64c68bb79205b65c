"""Effective sample size and Monte Carlo standard error (arviz is not a dependency; these are standard).

* :func:`ess` — Geyer's initial monotone sequence estimator (Geyer 1992), multi-chain as in Stan / Vehtari
  et al. (2021) without rank normalisation: per-chain autocovariances by FFT, combined as
  ρ_t = 1 − (W − mean_c γ_{c,t}) / var⁺, with var⁺ = (n−1)/n W + B/n; sums of adjacent pairs
  Γ_k = ρ_{2k} + ρ_{2k+1} truncated at the first negative pair and made monotone non-increasing;
  τ = −1 + 2 Σ_k Γ_k, ESS = chains · n / τ (capped at chains · n · log10(chains · n) as Stan does).
* :func:`ess_batch_means` — batch means with ⌊√n⌋ batches per chain (a cross-check).
* :func:`mcse_mean` — sd / √ESS. :func:`split_rhat` — split-R̂ (Gelman et al. 2013).

Draws have shape (steps, chains) for one parameter or (steps, chains, d) for d parameters (the result has
shape (d,)).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def _autocov(x: F64) -> F64:
    """Autocovariances of each column of x (n, chains), lags 0..n-1 (biased, divided by n)."""
    n = x.shape[0]
    xc = x - x.mean(axis=0)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(xc, n=size, axis=0)
    ac = np.fft.irfft(f * np.conjugate(f), n=size, axis=0)[:n]
    return np.asarray(ac / n, dtype=np.float64)


def _ess_1d(x: F64) -> float:
    n, c = x.shape
    if n < 4:
        return float("nan")
    acov = _autocov(x)
    chain_mean = x.mean(axis=0)
    chain_var = acov[0] * n / (n - 1)
    w = chain_var.mean()
    b = n * chain_mean.var(ddof=1) if c > 1 else 0.0
    var_plus = (n - 1) / n * w + b / n
    if not var_plus > 0:
        return float("nan")
    rho = 1.0 - (w - acov.mean(axis=1)) / var_plus
    rho[0] = 1.0
    npairs = n // 2
    gam = rho[0 : 2 * npairs : 2] + rho[1 : 2 * npairs : 2]
    neg = np.flatnonzero(gam < 0)
    k = neg[0] if neg.size else npairs
    gam = np.minimum.accumulate(gam[:k]) if k else gam[:1]
    tau = -1.0 + 2.0 * float(gam.sum())
    total = n * c
    tau = max(tau, 1.0 / np.log10(total)) if total > 10 else max(tau, 1e-3)
    return float(total / tau)


def _per_param(draws: npt.ArrayLike) -> tuple[F64, bool]:
    x = np.asarray(draws, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim == 2:
        return x[:, :, None], True
    if x.ndim != 3:
        raise ValueError(f"draws must be (steps, chains[, d]), got shape {x.shape}")
    return x, False


def ess(draws: npt.ArrayLike) -> F64:
    x, _ = _per_param(draws)
    return np.array([_ess_1d(x[:, :, k]) for k in range(x.shape[2])])


def ess_batch_means(draws: npt.ArrayLike, batches: int | None = None) -> F64:
    x, _ = _per_param(draws)
    n, c, d = x.shape
    nb = batches or max(2, int(np.sqrt(n)))
    size = n // nb
    if size < 1:
        return np.full(d, np.nan)
    means = x[: nb * size].reshape(nb, size, c, d).mean(axis=1)  # (nb, c, d)
    var_bm = size * means.var(axis=0, ddof=1).mean(axis=0)  # asymptotic variance estimate
    var = x.reshape(n * c, d).var(axis=0, ddof=1)
    return np.asarray(n * c * var / np.maximum(var_bm, 1e-300), dtype=np.float64)


def mcse_mean(draws: npt.ArrayLike) -> F64:
    x, _ = _per_param(draws)
    sd = x.reshape(-1, x.shape[2]).std(axis=0, ddof=1)
    return np.asarray(sd / np.sqrt(ess(x)), dtype=np.float64)


def split_rhat(draws: npt.ArrayLike) -> F64:
    x, _ = _per_param(draws)
    n = x.shape[0] // 2
    halves = np.concatenate([x[:n], x[n : 2 * n]], axis=1)  # (n, 2c, d)
    w = halves.var(axis=0, ddof=1).mean(axis=0)
    b = n * halves.mean(axis=0).var(axis=0, ddof=1)
    return np.asarray(np.sqrt(((n - 1) / n * w + b / n) / w), dtype=np.float64)
