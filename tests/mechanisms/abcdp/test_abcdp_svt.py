"""c-sample ABCDP (sparse vector technique): stopping rule, bookkeeping, step/batch equivalence."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from mechanisms.abcdp import noise as noise_lib
from mechanisms.abcdp.events import SVT_GAUSSIAN, SVT_LAPLACE
from mechanisms.abcdp.svt import (
    SVTConfig,
    SVTNoise,
    c_sample_abcdp,
    draw_batch_noise,
    draw_threshold_noise,
    run_svt_on_distances,
    svt_batch,
    svt_decide,
    svt_decide_squared,
    svt_init,
    svt_step,
)

DELTA = 2.0 / 500


def _proposer(rng: np.random.Generator, low: float = 0.0, high: float = 1.0):
    calls: list[int] = []

    def propose(n: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append(n)
        rho = rng.uniform(low, high, size=n)
        return rho[:, None].copy(), rho  # theta = the distance, so accepted thetas are checkable

    return propose, calls


@pytest.mark.parametrize("resample", [False, True])
@pytest.mark.parametrize("eps_total", [0.5, 5.0, math.inf])
@pytest.mark.parametrize("c", [1, 3, 25])
def test_stops_after_exactly_c_accepts(resample: bool, eps_total: float, c: int) -> None:
    config = SVTConfig.laplace(eps_total, DELTA, c, eps_abc=0.3, resample=resample)
    propose, calls = _proposer(np.random.default_rng(1))
    res = c_sample_abcdp(propose, config, np.random.default_rng(2), max_candidates=100_000, batch_size=64)
    assert res.halted
    assert res.n_accepted == c
    assert res.decisions.sum() == c
    assert res.decisions[-1]  # the run ends on the c-th accept: nothing is decided after it
    assert res.thetas.shape == (c, 1)
    assert res.event.params["n_accepted"] == c
    assert res.event.params["n_evaluated"] == res.n_evaluated <= sum(calls)


def test_budget_exhausted_before_c() -> None:
    config = SVTConfig.laplace(math.inf, DELTA, 5, eps_abc=0.01, resample=False)
    propose, _ = _proposer(np.random.default_rng(0), low=0.5, high=1.0)  # nothing is ever within 0.01
    res = c_sample_abcdp(propose, config, np.random.default_rng(0), max_candidates=300, batch_size=128)
    assert not res.halted and res.n_accepted == 0 and res.n_evaluated == 300
    assert np.isnan(res.posterior_mean()).all()


def test_non_private_is_plain_rejection_abc_with_cutoff() -> None:
    rng = np.random.default_rng(3)
    rho = rng.uniform(0, 1, 1000)
    config = SVTConfig.laplace(math.inf, DELTA, 10, eps_abc=0.2, resample=True)
    dec, state = run_svt_on_distances(rho, config, np.random.default_rng(0), batch_size=100)
    expected_idx = np.flatnonzero(rho <= 0.2)[:10]
    assert np.array_equal(np.flatnonzero(dec), expected_idx)
    assert dec.shape[0] == expected_idx[-1] + 1 and state.halted


def test_step_refuses_after_halt() -> None:
    config = SVTConfig.laplace(1.0, DELTA, 1, eps_abc=0.5, resample=False)
    state = svt_init(config, 0.0)
    state, acc = svt_step(config, state, 0.0, 0.0, 0.0)
    assert acc and state.halted
    with pytest.raises(ValueError, match="halted"):
        svt_step(config, state, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="halted"):
        svt_batch(config, state, np.zeros(3), SVTNoise(np.zeros(3), np.zeros(3)))


@pytest.mark.parametrize(("kind", "resample"), [("laplace", False), ("laplace", True), ("gaussian", True)])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_batch_driver_equals_step_function(resample: bool, kind: str, seed: int) -> None:
    """Identical noise draws give identical decisions in the batch driver and the per-candidate step."""
    if kind == "laplace":
        config = SVTConfig.laplace(2.0, 0.05, 12, eps_abc=0.4, resample=resample)
    else:
        config = SVTConfig.gaussian(2.0, 1e-5, 0.05, 12, eps_abc=0.4, max_candidates=2000)
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(100 + seed)
    m0 = draw_threshold_noise(config, noise_rng)
    batches = [rng.uniform(0, 1, size=n) for n in (50, 1, 200, 500, 37)]
    noises = [draw_batch_noise(config, noise_rng, b.shape[0]) for b in batches]

    batch_state = svt_init(config, m0)
    batch_decisions = []
    for dist, nz in zip(batches, noises, strict=True):
        if batch_state.halted:
            break
        batch_state, dec = svt_batch(config, batch_state, dist, nz)
        batch_decisions.append(dec)
    batch_all = np.concatenate(batch_decisions)

    step_state = svt_init(config, m0)
    step_all = []
    for dist, nz in zip(batches, noises, strict=True):
        for t in range(dist.shape[0]):
            if step_state.halted:
                break
            step_state, acc = svt_step(config, step_state, float(dist[t]), float(nz.distance_noise[t]),
                                       float(nz.resample_noise[t]))
            step_all.append(acc)
    assert np.array_equal(batch_all, np.array(step_all, dtype=bool))
    assert batch_state == step_state


def test_run_on_distances_equals_sampler() -> None:
    rho = np.random.default_rng(5).uniform(0, 1, 3000)
    config = SVTConfig.laplace(1.0, 0.01, 20, eps_abc=0.25, resample=True)
    dec, _ = run_svt_on_distances(rho, config, np.random.default_rng(9), batch_size=256)
    pos = [0]

    def propose(n: int) -> tuple[np.ndarray, np.ndarray]:
        out = rho[pos[0]:pos[0] + n]
        pos[0] += n
        return out[:, None], out

    res = c_sample_abcdp(propose, config, np.random.default_rng(9), max_candidates=3000, batch_size=256)
    assert np.array_equal(dec, res.decisions)
    assert np.allclose(res.thetas[:, 0], rho[: dec.shape[0]][dec])


def test_square_root_free_decision_agrees() -> None:
    rng = np.random.default_rng(11)
    rho = rng.uniform(0, 2, 20000)
    nu = rng.laplace(0, 0.3, 20000)
    thr = 0.5 + rng.laplace(0, 0.15, 20000)
    plain = np.array([svt_decide(r, v, h) for r, v, h in zip(rho, nu, thr, strict=True)])
    squared = np.array([svt_decide_squared(r * r, h - v) for r, v, h in zip(rho, nu, thr, strict=True)])
    assert np.array_equal(plain, squared)


@pytest.mark.parametrize("c", [1, 10, 1000])
@pytest.mark.parametrize("eps", [0.01, 0.5, 1.0, 100.0])
def test_eps_total_bookkeeping(c: int, eps: float) -> None:
    no_rs = SVTConfig.laplace(eps, DELTA, c, eps_abc=0.1, resample=False)
    rs = SVTConfig.laplace(eps, DELTA, c, eps_abc=0.1, resample=True)
    assert no_rs.threshold_scale == pytest.approx((c + 1) * DELTA / eps, rel=1e-12)
    assert rs.threshold_scale == pytest.approx(2 * c * DELTA / eps, rel=1e-12)
    for cfg in (no_rs, rs):
        assert cfg.distance_scale == pytest.approx(2 * cfg.threshold_scale, rel=1e-12)
        assert cfg.eps_total() == pytest.approx(eps, rel=1e-12)
        ev = cfg.privacy_event(n_evaluated=7, n_accepted=2)
        assert ev.name == SVT_LAPLACE and ev.eps == pytest.approx(eps) and ev.delta == 0.0
        assert ev.is_private
        json.dumps(ev.to_dict())
    # RESAMPLE costs more noise for the same budget when c > 1
    if c > 1:
        assert rs.threshold_scale > no_rs.threshold_scale


def test_infinite_eps_means_no_noise() -> None:
    cfg = SVTConfig.laplace(math.inf, DELTA, 10, eps_abc=0.1, resample=False)
    assert cfg.threshold_scale == 0.0 and cfg.distance_scale == 0.0 and not cfg.is_private
    ev = cfg.privacy_event()
    assert math.isinf(ev.eps) and not ev.is_private and ev.to_dict()["eps"] == math.inf
    assert draw_threshold_noise(cfg, np.random.default_rng(0)) == 0.0


def test_gaussian_svt_config() -> None:
    cfg = SVTConfig.gaussian(1.0, 1e-6, DELTA, 10, eps_abc=0.1, max_candidates=10_000)
    assert cfg.resample and cfg.noise == "gaussian"
    assert cfg.eps_total() == pytest.approx(1.0, rel=1e-6)
    assert cfg.distance_scale == pytest.approx(2 * cfg.threshold_scale)
    ev = cfg.privacy_event()
    assert ev.name == SVT_GAUSSIAN and ev.delta == 1e-6
    with pytest.raises(ValueError, match="resample"):
        SVTConfig(eps_abc=0.1, c=3, resample=False, sensitivity=DELTA, threshold_scale=1.0,
                  distance_scale=2.0, noise="gaussian", delta=1e-6, max_candidates=10)
    with pytest.raises(ValueError, match="cap"):
        c_sample_abcdp(_proposer(np.random.default_rng(0))[0], cfg, np.random.default_rng(0),
                       max_candidates=20_000)


def test_invalid_configs_fail_clearly() -> None:
    with pytest.raises(ValueError, match="c must"):
        SVTConfig.laplace(1.0, DELTA, 0, eps_abc=0.1, resample=False)
    with pytest.raises(ValueError, match="sensitivity"):
        SVTConfig.laplace(1.0, -1.0, 3, eps_abc=0.1, resample=False)
    cfg = SVTConfig.laplace(1.0, DELTA, 3, eps_abc=0.1, resample=False)
    with pytest.raises(ValueError, match="finite"):
        c_sample_abcdp(lambda n: (np.zeros((n, 1)), np.full(n, np.nan)), cfg, np.random.default_rng(0), 10)


class _Uniforms:
    """A stand-in for hss.randomness.SecureRandom: only ``uniform(shape)``."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def uniform(self, shape: tuple[int, ...] | int) -> np.ndarray:
        return self._rng.uniform(np.nextafter(0.0, 1.0), 1.0, size=shape)


def test_noise_from_any_uniform_source() -> None:
    src = _Uniforms(4)
    assert isinstance(src, noise_lib.UniformSource)
    lap = noise_lib.laplace(src, 0.7, 20000)
    gau = noise_lib.gaussian(src, 1.3, 20000)
    assert stats.kstest(lap, stats.laplace(scale=0.7).cdf).pvalue > 1e-3
    assert stats.kstest(gau, stats.norm(scale=1.3).cdf).pvalue > 1e-3
    cfg = SVTConfig.laplace(1.0, DELTA, 5, eps_abc=0.3, resample=True)
    propose, _ = _proposer(np.random.default_rng(0))
    res = c_sample_abcdp(propose, cfg, src, max_candidates=10_000)
    assert res.n_accepted == 5
