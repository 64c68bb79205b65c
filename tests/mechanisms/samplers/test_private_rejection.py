"""Rejection sampling a registry with a privacy budget can run: the public cap on a proposal's per-record
log-likelihood range, the data bound over the capped set (it moves by at most the cap when one record is
replaced: checked exhaustively), exactness for the prior restricted to that set, and the per-decision charge
for each reveal mode against closed forms."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from coordinator.drivers import RejectionDriver, make_driver
from coordinator.experiment import load_experiment
from mechanisms.models.beta_bernoulli import BetaBernoulli
from mechanisms.models.logistic import BayesLogistic
from mechanisms.privacy import ProfileEvent, ThreatModel, coalition_view, sum_reveal_delta
from mechanisms.samplers import (
    BernoulliRule,
    ConfidentialRule,
    HssDecide,
    LocalParties,
    PublicSeeds,
    RejectionSampler,
)
from parties.analyses import AnalysisError, Dataset, Unaccountable
from parties.registry import get_analysis
from tests.mechanisms.samplers.helpers import KS_ALPHA, MODEL, beta_bernoulli_data, fixed_rng, noise_rngs

M = 3


def test_beta_bernoulli_range_and_bound_within_the_cap() -> None:
    model = BetaBernoulli()
    th = np.linspace(0.01, 0.99, 99)[:, None]
    rng_ = model.record_loglik_range(th)
    assert rng_ is not None
    ll = np.stack([model.record_log_likelihood({"y": np.array([y])}, th)[:, 0] for y in (0.0, 1.0)])
    np.testing.assert_allclose(rng_, np.abs(ll[1] - ll[0]), rtol=1e-12)
    cap, n = 1.5, 12
    grid = np.linspace(special.expit(-cap), special.expit(cap), 20001)[:, None]
    for k in range(n + 1):
        y = np.r_[np.ones(k), np.zeros(n - k)]
        ours = model.max_log_likelihood_within({"y": y}, cap)
        brute = float(model.log_likelihood({"y": y}, grid).max())
        assert ours is not None and brute <= ours + 1e-12 and ours - brute < 1e-6
    # replace-one (k -> k +- 1) moves the capped bound by at most the cap: every neighbouring pair
    ys = [np.r_[np.ones(k), np.zeros(n - k)] for k in range(n + 1)]
    vals = [model.max_log_likelihood_within({"y": y}, cap) for y in ys]
    steps = np.abs(np.diff(np.asarray(vals, dtype=float)))
    assert steps.max() <= cap + 1e-12
    assert model.public_log_bound(n) == 0.0


def test_logistic_range_is_attained_and_bounds_every_record() -> None:
    model = BayesLogistic(p=2, x_bound=3.0)
    rng = np.random.default_rng(4)
    beta = rng.normal(0.0, 0.5, (5, 3))
    h = model.record_loglik_range(beta)
    assert h is not None
    x = rng.uniform(-3.0, 3.0, (4000, 2))
    corners = np.array([[sx * 3.0, sy * 3.0] for sx in (-1, 1) for sy in (-1, 1)])
    x = np.vstack([x, corners])
    for y in (0.0, 1.0):
        data = {"x1": x[:, 0], "x2": x[:, 1], "y": np.full(x.shape[0], y)}
        ll = model.record_log_likelihood(data, beta)
        assert np.all(ll.max(axis=1) - ll.min(axis=1) <= h + 1e-12)
    ones, zeros = np.ones(len(x)), np.zeros(len(x))
    both = {"x1": np.r_[x[:, 0], x[:, 0]], "x2": np.r_[x[:, 1], x[:, 1]], "y": np.r_[ones, zeros]}
    ll = model.record_log_likelihood(both, beta)
    np.testing.assert_allclose(ll.max(axis=1) - ll.min(axis=1), h, rtol=1e-9)  # attained at a corner


@pytest.mark.slow
def test_capped_rejection_is_exact_for_the_restricted_prior() -> None:
    """Proposals with |logit θ| > cap are rejected publicly and each party's bound is over that set: the
    accepted draws follow the posterior restricted to it (KS)."""
    data = beta_bernoulli_data(sizes=(8, 6, 7), p=0.15, seed=3)
    cap = 1.2  # binds: the posterior puts visible mass below sigma(-1.2) = 0.23
    rngs = {p: fixed_rng(f"prs/{p}") for p in range(1, M + 1)}
    rule = ConfidentialRule(HssDecide.setup("sign", M, rngs), noise_rngs(M, "prs"), "sign")
    parties = LocalParties(MODEL, data, rule, max_range=cap)
    sampler = RejectionSampler(MODEL, parties, batch_size=2000, max_sensitivity=cap)
    res = sampler.run(PublicSeeds(44), 400, 400_000)
    assert res.stopped == "accepts"
    k = float(sum(d["y"].sum() for d in data))
    n = float(sum(d["y"].size for d in data))
    post = MODEL.posterior(k, n)
    lo, hi = special.expit(-cap), special.expit(cap)
    mass = post.cdf(hi) - post.cdf(lo)
    assert mass < 0.95  # the restriction matters here

    def restricted_cdf(x: np.ndarray) -> np.ndarray:
        return np.clip((post.cdf(np.clip(x, lo, hi)) - post.cdf(lo)) / mass, 0.0, 1.0)

    assert res.samples.min() >= lo and res.samples.max() <= hi
    assert stats.kstest(res.samples[:, 0], restricted_cdf).pvalue > KS_ALPHA


def _events(params: dict, mode: str, m: int, t: int, q: int) -> list:
    return get_analysis("beta-bernoulli", params).privacy_events(mode, coalition_view(mode, m, t, q), 10)  # type: ignore[attr-defined]


def test_rejection_charges_per_reveal_mode() -> None:
    cap, margin, m = 1.0, 0.4, 3
    base = {"kind": "rejection", "max_sensitivity": cap, "log_bound_margin": margin}
    delta = 2 * cap  # its own term and its data bound each move by at most the cap
    a_max = -m * margin
    (ev,) = _events(base, "sign", m, 1, 0)
    assert isinstance(ev, ProfileEvent) and ev.count == 10
    closed = max(delta, math.log((1 - math.exp(a_max - delta)) / (1 - math.exp(a_max))))
    assert ev.profile.pure_eps == pytest.approx(closed)
    # the public bound: only the proposal's own term moves
    (pub,) = _events({**base, "bound": "public"}, "sign", m, 1, 0)
    closed_pub = max(cap, math.log((1 - math.exp(a_max - cap)) / (1 - math.exp(a_max))))
    assert pub.profile.pure_eps == pytest.approx(closed_pub)
    # lazy: bounded even without a margin (p <= gamma)
    lazy = {**base, "log_bound_margin": 0.0, "lazy": {"gamma": 0.5}}
    (lz,) = _events(lazy, "sign", m, 1, 0)
    assert lz.profile.pure_eps == pytest.approx(max(delta, math.log((1 - 0.5 * math.exp(-delta)) / 0.5)))
    # sum (and blinded, a post-processing of it): the exact flat curve delta(eps) = F_k(Delta)
    for mode, q in (("sum", 0), ("sum", 2), ("blinded", 1)):
        (s,) = _events(base, mode, m, 1, q)
        want = float(sum_reveal_delta(np.array([0.7]), delta, ThreatModel(m, q))[0])
        assert float(s.profile.delta_at(0.7)) == pytest.approx(want, rel=1e-9)
    with pytest.raises(Unaccountable, match="log_bound_margin > 0"):
        _events({**base, "log_bound_margin": 0.0}, "sign", m, 1, 0)
    with pytest.raises(Unaccountable, match="max_sensitivity"):
        _events({"kind": "rejection"}, "sign", m, 1, 0)
    view = coalition_view("sign", m, 1, 0)
    with pytest.raises(Unaccountable, match="max_log_likelihood_within"):
        get_analysis("bayes-logistic", {"model_args": {"p": 2}, **base}).privacy_events("sign", view, 5)  # type: ignore[attr-defined]
    public = get_analysis("bayes-logistic", {"model_args": {"p": 2}, **base, "bound": "public"})
    (lg,) = public.privacy_events("sign", view, 5)  # type: ignore[attr-defined]
    assert lg.profile.pure_eps is not None


def test_rejection_batches_outside_the_accounting_are_refused() -> None:
    params = {"kind": "rejection", "max_sensitivity": 1.0, "log_bound_margin": 0.2}
    a = get_analysis("beta-bernoulli", params)
    data = Dataset({"y": np.array([1.0, 0.0, 0.0, 1.0])})
    ok = {"theta_star": np.array([[0.4], [0.6]]), "public": np.zeros(2)}
    out = a.terms(data, ok, 2, 3, "sign", fixed_rng("r"))
    assert (out.values - 0 < 50).all()
    outside = {"theta_star": np.array([[0.4], [0.95]]), "public": np.zeros(2)}
    with pytest.raises(AnalysisError, match="outside the session's max_sensitivity"):
        a.terms(data, outside, 2, 3, "sign", fixed_rng("r"))
    positive = {"theta_star": np.array([[0.4], [0.6]]), "public": np.array([0.0, 0.3])}
    with pytest.raises(AnalysisError, match="public terms <= 0"):
        a.terms(data, positive, 2, 3, "sign", fixed_rng("r"))
    for bad in ({"bound": "tight"}, {"max_sensitivity": -1.0}, {"max_sensitivity": math.inf}):
        with pytest.raises(AnalysisError):
            get_analysis("beta-bernoulli", {**params, **bad})
    with pytest.raises(AnalysisError, match="are parameters of kind 'rejection'"):
        get_analysis("beta-bernoulli", {"kind": "mh", "max_sensitivity": 1.0})


def test_confar_run_driver_and_in_memory_run_make_the_same_draws() -> None:
    """``confar run``'s rejection driver (one checkpointed batch per step) and ``RejectionSampler.run`` share
    one batch loop: from the same public seed they ask the same questions and keep the same draws."""
    exp = load_experiment(Path(__file__).resolve().parents[3] / "examples" / "private-rejection.toml")
    s, model = exp.sampler, exp.model()
    data = beta_bernoulli_data(sizes=(30, 30, 30), p=0.3, seed=5)

    def parties() -> LocalParties:
        return LocalParties(model, data, BernoulliRule(np.random.default_rng(9)), max_range=s.max_sensitivity)

    driver = make_driver(exp)
    assert isinstance(driver, RejectionDriver)
    rows = []
    decide = parties()
    while not driver.finished:
        rows.append(driver.step(decide))  # type: ignore[arg-type]
    sampler = RejectionSampler(model, parties(), batch_size=s.batch_size, max_sensitivity=s.max_sensitivity)
    res = sampler.run(PublicSeeds(exp.seed), s.n_accept, s.max_proposals)
    draws, stats = driver.draws(np.concatenate(rows))
    assert res.samples.shape[0] == s.n_accept
    np.testing.assert_array_equal(draws[0], res.samples)
    assert (driver.proposed, driver.accepted, driver.batch) == (res.proposed, res.accepted, res.batches)
    assert stats["batch"][0, -1] == res.batches - 1
