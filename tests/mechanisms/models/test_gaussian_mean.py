"""gaussian-mean as a model of mechanisms.models: its public bounds hold (and are attained), and the daemon's
``gaussian-mean`` analysis serves it through the common model path in both parameter forms, with the
penalty correction in the public term and the same privacy events as the analysis it replaced."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from mechanisms.models import load_model
from mechanisms.models.gaussian_mean import GaussianMean
from mechanisms.privacy import GaussianEvent, coalition_view, penalty_gdp_mu
from mechanisms.samplers import DecisionRequest, Penalty, party_terms
from mechanisms.samplers.requests import record_sensitivity
from parties.analyses import AnalysisError, Dataset, Unaccountable
from parties.registry import get_analysis
from tests.mechanisms.samplers.helpers import fixed_rng

CLIP = (-4.0, 6.0)
MODEL = GaussianMean(sigma=1.5, clip=CLIP)


def _proposals(rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(1.0, 3.0, (k, 1)), rng.normal(1.0, 3.0, (k, 1))  # mid-points inside and outside clip


def test_bounds_hold_and_are_attained() -> None:
    rng = np.random.default_rng(3)
    x = {"x": np.r_[CLIP[0] - 5.0, rng.uniform(*CLIP, 200), CLIP[1] + 5.0]}  # records beyond clip: clipped
    th, ts = _proposals(rng, 40)
    rec = MODEL.record_log_likelihood(x, th)
    np.testing.assert_allclose(MODEL.log_likelihood(x, th), rec.sum(axis=1), rtol=1e-12)
    per = MODEL.record_log_likelihood(x, ts) - rec
    bound, spread = MODEL.record_ratio_bound(th, ts), MODEL.record_ratio_range(th, ts)
    assert bound is not None and spread is not None
    assert (np.abs(per) <= bound[:, None] * (1 + 1e-12)).all()
    np.testing.assert_allclose(np.abs(per).max(axis=1), bound, rtol=1e-9)  # attained at lo or hi
    np.testing.assert_allclose(per.max(axis=1) - per.min(axis=1), spread, rtol=1e-9)  # attained: lo vs hi
    assert (spread <= 2 * bound * (1 + 1e-12)).all()
    np.testing.assert_allclose(spread, np.abs(ts - th)[:, 0] * 10.0 / 1.5**2)
    np.testing.assert_allclose(spread, MODEL.record_ratio_range(ts, th))  # symmetric
    rr = MODEL.record_loglik_range(th)
    assert rr is not None
    assert (rec.max(axis=1) - rec.min(axis=1) <= rr * (1 + 1e-12)).all()
    ends = {"x": np.array([CLIP[0], 0.7, CLIP[1]])}  # attained: at mu = 0.7 (inside clip) and 8.0 (outside)
    mus = np.array([[0.7], [8.0]])
    at = MODEL.record_log_likelihood(ends, mus)
    np.testing.assert_allclose(at.max(axis=1) - at.min(axis=1), MODEL.record_loglik_range(mus), rtol=1e-12)
    assert MODEL.max_log_likelihood(x) >= MODEL.log_likelihood(x, th).max()
    bound_all = MODEL.public_log_bound(202)
    assert bound_all is not None and bound_all >= MODEL.max_log_likelihood(x)
    plain = GaussianMean()
    assert plain.record_ratio_bound(th, ts) is None and plain.record_ratio_range(th, ts) is None


def test_sensitivity_is_the_range_where_a_model_gives_one() -> None:
    rng = np.random.default_rng(5)
    th, ts = _proposals(rng, 10)
    np.testing.assert_array_equal(record_sensitivity(MODEL, th, ts), MODEL.record_ratio_range(th, ts))
    from mechanisms.models.beta_bernoulli import BetaBernoulli

    bb = BetaBernoulli()
    p, q = np.full((3, 1), 0.3), np.full((3, 1), 0.4)
    np.testing.assert_array_equal(record_sensitivity(bb, p, q), 2 * bb.record_ratio_bound(p, q))


def test_loaded_by_name_and_arguments_checked() -> None:
    m = load_model("gaussian-mean", {"sigma": 2.0, "clip": [0, 1], "column": "y"})
    assert isinstance(m, GaussianMean) and m.clip == (0.0, 1.0) and m.schema[0].name == "y"
    assert m == load_model("gaussian-mean", {"sigma": 2.0, "clip": (0.0, 1.0), "column": "y"})
    for args, msg in [
        ({"sigma": 0}, "sigma must be"),
        ({"sigma": "1"}, "sigma must be"),
        ({"clip": [2.0, 1.0]}, "clip must be"),
        ({"clip": [0.0, math.inf]}, "clip must be"),
        ({"column": ""}, "column must be"),
    ]:
        with pytest.raises(ValueError, match=msg):
            load_model("gaussian-mean", args)


COMMON: dict[str, Any] = {"model_args": {"sigma": 1.5, "clip": list(CLIP)}, "penalty": {"tau": 2.0, "n": 1}}


@pytest.mark.parametrize("mode", ["sum", "sign", "blinded"])
def test_terms_are_party_terms_with_the_correction_in_the_public_term(mode: str) -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(1.0, 2.0, 50)
    n, m = 12, 4
    th, ts = rng.normal(1.0, 0.1, n), rng.normal(1.0, 0.1, n)
    pen = Penalty(tau=2.0, alpha=0.0, n=1)
    sigma = 2.0 * np.abs(ts - th) * 10.0 / 1.5**2
    public = rng.normal(0.0, 0.1, n) - m * sigma**2 / 2  # the coordinator's kernel adds the correction
    got = get_analysis("gaussian-mean", COMMON).terms(
        Dataset({"x": x}), {"theta": th, "theta_star": ts, "public": public}, n, m, mode,
        fixed_rng("g"),
    )
    req = DecisionRequest("mh", ts[:, None], public, th[:, None], pen)
    want = party_terms(MODEL, {"x": x}, req, m, fixed_rng("g"), mode)
    assert got.public is not None
    np.testing.assert_array_equal(got.public, public)
    np.testing.assert_array_equal(got.values, want.values)
    assert (got.blind is None) == (mode != "blinded")
    assert got.clipped_records is None  # c = "bound": nothing is clipped per record


def test_noise_free_terms_are_the_exact_log_ratio_of_the_clipped_records() -> None:
    x = np.array([-10.0, 0.5, 2.0, 9.0])
    xc = np.clip(x, *CLIP)
    th, ts = np.linspace(-1, 2, 7), np.linspace(2, -1, 7)
    t = get_analysis("gaussian-mean", {"model_args": {"clip": list(CLIP)}, "noise": "none"}).terms(
        Dataset({"x": x}), {"theta": th, "theta_star": ts, "public": np.zeros(7)}, 7, 3, "sum", fixed_rng("e")
    )
    exact = (ts - th) * xc.sum() - 0.5 * xc.size * (ts**2 - th**2)
    np.testing.assert_allclose(t.values, exact, rtol=0, atol=1e-12)
    assert t.values[3] == 0.0 and t.public is not None and not t.public.any()  # theta* = theta: exactly 0


def test_privacy_events_are_the_penalty_gdp_bound() -> None:
    a = get_analysis("gaussian-mean", COMMON)
    for mode, m, t, q in [("sign", 3, 1, 2), ("blinded", 5, 1, 3), ("sum", 4, 1, 0)]:
        view = coalition_view(mode, m, t, q)
        (ev,) = a.privacy_events(mode, view, 9)
        assert isinstance(ev, GaussianEvent) and ev.count == 9
        assert ev.mu == pytest.approx(penalty_gdp_mu(1.0, 2.0, view.threat), rel=1e-15)
    for mode in ("sign", "sum"):
        with pytest.raises(Unaccountable, match="without the penalty"):
            no_penalty = get_analysis("gaussian-mean", {"model_args": {"sigma": 1.0}})
            no_penalty.privacy_events(mode, coalition_view(mode, 3, 1, 2), 1)


def test_parameters_refused() -> None:
    get_analysis("gaussian-mean", COMMON)
    for params, msg in [
        ({"model_args": {"clip": [2.0, 1.0]}}, "clip must be"),
        ({"model_args": {"sigma": -1.0}}, "sigma must be"),
        ({"penalty": {"tau": -1.0, "n": 1}}, "tau must be"),
        ({"noise": "loud"}, "noise must be"),
        ({"sigma": 1.0}, "unknown parameters"),
        ({"foo": 1}, "unknown parameters"),
    ]:
        with pytest.raises(AnalysisError, match=msg):
            get_analysis("gaussian-mean", params)


def test_per_record_clipping_is_counted_for_the_audit() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(1.0, 2.0, 30)
    n = 5
    params = {"model_args": {"sigma": 1.0}, "penalty": {"tau": 1.0, "n": 30, "c": "clip", "b": 0.5}}
    inputs = {"theta": np.zeros(n), "theta_star": np.full(n, 0.5), "public": np.zeros(n)}
    t = get_analysis("gaussian-mean", params).terms(Dataset({"x": x}), inputs, n, 3, "sign", fixed_rng("c"))
    per = np.abs(0.5 * (x - 0.25))  # |r(x)| at theta = 0, theta* = 0.5, sigma = 1; the limit is b * 0.5
    assert t.clipped_records == n * int(np.count_nonzero(per > 0.25)) > 0
