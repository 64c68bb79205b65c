"""Distances: RFF norms, MMD sensitivity on neighbouring data sets, clipping, hyperparameter helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.abcdp.distances import (
    RFFMMD,
    ClippedAveragedDistance,
    DeclaredDistance,
    GaussianKernelMMD,
    PrivateDistance,
    RandomFourierFeatures,
    clip_bound_from_simulations,
    gaussian_kernel,
    median_heuristic_bandwidth,
)


@pytest.mark.parametrize("dim", [1, 2, 7])
def test_rff_feature_norms_are_one(dim: int) -> None:
    rng = np.random.default_rng(dim)
    f = RandomFourierFeatures.draw(rng, dim, 64, bandwidth=0.8)
    x = rng.normal(scale=10.0, size=(1000, dim))
    assert np.allclose(np.linalg.norm(f.features(x), axis=-1), 1.0, atol=1e-12)
    assert f.n_features == 64 and f.dim == dim


def test_rff_approximates_gaussian_kernel() -> None:
    rng = np.random.default_rng(0)
    f = RandomFourierFeatures.draw(rng, 2, 20000, bandwidth=1.3)
    x, y = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    approx = f.features(x) @ f.features(y).T
    assert np.max(np.abs(approx - gaussian_kernel(x, y, 1.3))) < 0.05


def test_exact_mmd_matches_naive_formula_and_bounds() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 3)), rng.normal(loc=0.5, size=(25, 3))
    h = 1.1
    naive = np.sqrt(gaussian_kernel(x, x, h).mean() + gaussian_kernel(y, y, h).mean()
                    - 2 * gaussian_kernel(x, y, h).mean())
    mmd = GaussianKernelMMD(x, h, block=7)
    assert mmd(y)[0] == pytest.approx(naive, rel=1e-10)
    assert mmd(x[None])[0] == pytest.approx(0.0, abs=1e-6)
    assert mmd.sensitivity == pytest.approx(2 / 40) and mmd.upper_bound == 2.0
    assert isinstance(mmd, PrivateDistance)
    assert "array" not in repr(mmd)  # the private data stay out of logs


def test_rff_mmd_approximates_exact_mmd() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(300, 1)), rng.normal(loc=1.0, size=(2, 300, 1))
    f = RandomFourierFeatures.draw(rng, 1, 20000, bandwidth=0.7)
    exact = GaussianKernelMMD(x, 0.7)(y)
    approx = RFFMMD.from_observed(f, x)(y)
    assert np.allclose(exact, approx, atol=0.03)


def _neighbour(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Replace one record by an adversarial one (far away) or a random one."""
    x2 = x.copy()
    i = rng.integers(x.shape[0])
    far = rng.choice([1e3, -1e3]) * np.ones(x.shape[1])
    x2[i] = far if rng.random() < 0.5 else rng.normal(size=x.shape[1])
    return x2


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), dim=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_mmd_sensitivity_bound_on_neighbouring_datasets(n: int, dim: int, seed: int) -> None:
    """|ρ(X, Y) − ρ(X', Y)| ≤ 2/N for X, X' differing in one record (exact MMD and RFF-MMD)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim))
    x2 = _neighbour(x, rng)
    ys = rng.normal(loc=rng.normal(), size=(3, 17, dim))
    h = float(rng.uniform(0.2, 3.0))
    d1, d2 = GaussianKernelMMD(x, h)(ys), GaussianKernelMMD(x2, h)(ys)
    assert np.all(np.abs(d1 - d2) <= 2.0 / n + 1e-9)
    f = RandomFourierFeatures.draw(rng, dim, 50, h)
    r1, r2 = RFFMMD.from_observed(f, x), RFFMMD.from_observed(f, x2)
    assert np.all(np.abs(r1(ys) - r2(ys)) <= r1.sensitivity + 1e-12)
    assert np.all(r1(ys) <= 2.0)


def test_rff_from_feature_sums_equals_from_observed() -> None:
    rng = np.random.default_rng(4)
    f = RandomFourierFeatures.draw(rng, 2, 40, 1.0)
    shards = [rng.normal(size=(k, 2)) for k in (5, 11, 3)]
    total = sum(f.features(s).sum(axis=0) for s in shards)
    a = RFFMMD.from_feature_sums(f, total, 19)
    b = RFFMMD.from_observed(f, np.concatenate(shards))
    y = rng.normal(size=(4, 10, 2))
    assert np.allclose(a(y), b(y), atol=1e-12)


def test_rff_single_precision_for_simulated_side() -> None:
    rng = np.random.default_rng(5)
    f = RandomFourierFeatures.draw(rng, 1, 100, 0.6)
    x = rng.uniform(0, 5, 500)
    y = rng.uniform(0, 5, (8, 500))
    d64 = RFFMMD.from_observed(f, x)(y)
    d32 = RFFMMD.from_observed(f, x, simulated_dtype=np.float32)(y)
    assert np.allclose(d64, d32, atol=1e-5)


def _per_record(records: np.ndarray, simulated: np.ndarray) -> np.ndarray:
    return np.abs(simulated[:, None] - records[None, :])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), clip=st.floats(0.1, 10.0), seed=st.integers(0, 2**32 - 1))
def test_clipped_averaged_distance_sensitivity(n: int, clip: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rec = rng.normal(size=n)
    rec2 = rec.copy()
    rec2[rng.integers(n)] = rng.choice([1e6, -1e6, np.nan])
    sims = rng.normal(size=20)
    d1 = ClippedAveragedDistance(rec, _per_record, clip, n)
    d2 = ClippedAveragedDistance(rec2, _per_record, clip, n)
    assert d1.sensitivity == pytest.approx(clip / n)
    assert np.all(np.abs(d1(sims) - d2(sims)) <= clip / n + 1e-12)
    assert np.all((d2(sims) >= 0) & (d2(sims) <= clip))


def test_declared_distance_clips() -> None:
    d = DeclaredDistance(lambda sims: np.array([0.5, 7.0, np.nan, -1.0]), declared_sensitivity=0.1, clip=2.0)
    assert np.array_equal(d(None), [0.5, 2.0, 2.0, 0.0])
    assert d.sensitivity == 0.1 and d.upper_bound == 2.0
    with pytest.raises(ValueError, match="declared sensitivity"):
        DeclaredDistance(lambda s: s, declared_sensitivity=0.0, clip=1.0)


def test_median_heuristic_uses_simulations_only() -> None:
    rng = np.random.default_rng(6)
    sims = rng.normal(size=(5, 40, 2))
    pts = sims.reshape(-1, 2)
    d = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    expected = np.median(d[np.triu_indices(pts.shape[0], 1)])
    assert median_heuristic_bandwidth(sims, rng) == pytest.approx(expected)
    with pytest.raises(ValueError, match="degenerate"):
        median_heuristic_bandwidth(np.zeros((3, 4, 1)), rng)


def test_clip_bound_from_simulations() -> None:
    d = np.arange(101.0)
    assert clip_bound_from_simulations(d, 0.9) == pytest.approx(90.0)
    with pytest.raises(ValueError, match="quantile"):
        clip_bound_from_simulations(d, 1.5)
