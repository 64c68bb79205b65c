"""ESS estimators against processes with a known integrated autocorrelation time."""

from __future__ import annotations

import numpy as np

from mechanisms.samplers import ess, ess_batch_means, mcse_mean, split_rhat


def ar1(phi: float, n: int, chains: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros((n, chains))
    x[0] = rng.normal(size=chains) / np.sqrt(1 - phi**2)
    e = rng.normal(size=(n, chains))
    for t in range(1, n):
        x[t] = phi * x[t - 1] + e[t]
    return x


def test_iid_ess_is_close_to_n() -> None:
    x = np.random.default_rng(1).normal(size=(2000, 8))
    e = ess(x)[0]
    assert 0.85 * 16000 < e < 1.15 * 16000


def test_ar1_ess_matches_known_tau() -> None:
    phi, n, c = 0.8, 5000, 8
    x = ar1(phi, n, c, seed=2)
    want = n * c * (1 - phi) / (1 + phi)  # tau = (1 + phi) / (1 - phi) = 9
    assert 0.8 * want < ess(x)[0] < 1.2 * want
    assert 0.7 * want < ess_batch_means(x)[0] < 1.3 * want
    assert mcse_mean(x)[0] > 0
    assert abs(split_rhat(x)[0] - 1) < 0.02


def test_shapes() -> None:
    x = np.random.default_rng(3).normal(size=(100, 4, 3))
    assert ess(x).shape == (3,) and mcse_mean(x).shape == (3,) and split_rhat(x).shape == (3,)
