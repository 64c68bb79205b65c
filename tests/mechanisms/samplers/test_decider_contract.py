"""One contract, every accept rule of mechanisms/samplers/decision.py: the plaintext reference
(``BernoulliRule``) and the confidential rule (``ConfidentialRule``) deciding the parties' noisy sum in the
clear (``plaintext_decide``, ``LazyPlaintextDecide``) or on secret shares (``HssDecide``) in each reveal mode
that takes decision terms (with a lazy coin: sign only). Every test runs over every rule it applies to.

* The same bits for the same noise: each party's noise comes from an identically keyed CSPRNG in both runs;
  the plaintext run decides public + Σ_j x_j ≥ 0 in floating point, the confidential run through the
  secret-sharing engine (in memory) in every reveal mode. Accept bits must be identical, except ties within
  the fixed-point resolution (|S| < 16 · 2^-21, hss/README.md), for MH, penalty MH and rejection sampling.
* The same public seed gives the same proposals whatever decider is used.
* The same decision law: at fixed (θ, θ*) pairs each rule accepts with probability min(1, r), a lazy one
  γ min(1, r), and with the Yıldırım–Ermiş penalty Φ(λ/s − s/2) + e^λ Φ(−λ/s − s/2) (binomial tests at level
  1e-3, Bonferroni over the pairs).

Exactness of the chains each rule drives is tested in test_beta_bernoulli.py (every rule), test_penalty.py
and test_lazy.py.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from scipy import stats

from hss.lazy_coin import LazyCoin
from hss.modes import TERMS_MODES
from mechanisms.samplers import (
    ConfidentialRule,
    DecisionRequest,
    HssDecide,
    LazyPlaintextDecide,
    LocalParties,
    Penalty,
    PublicSeeds,
    RandomWalkMH,
    RejectionSampler,
    penalty_acceptance,
    penalty_correction,
    run_kernel,
)
from mechanisms.samplers.decision import DecisionRule
from mechanisms.samplers.terms import log_ratio
from tests.mechanisms.samplers.helpers import (
    KS_ALPHA,
    MODEL,
    RULES,
    RecordingDecide,
    beta_bernoulli_data,
    fixed_rng,
    hss_decide,
    noise_rngs,
    rule_for,
)

TIE = 16 * 2.0**-21
M = 3


def _bits_agree(a: np.ndarray, b: np.ndarray, sums: np.ndarray) -> None:
    differ = a != b
    assert (np.abs(sums[differ]) < TIE).all(), (
        f"{int(differ.sum())} decisions differ outside fixed-point ties"
    )


# ---- the same bits for the same noise ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", TERMS_MODES)
@pytest.mark.parametrize("penalty", [False, True], ids=["mh", "penalty-mh"])
def test_confidential_mh_chain_equals_plaintext_chain(mode: str, penalty: bool) -> None:
    data = beta_bernoulli_data()
    pen = Penalty(tau=0.05, alpha=0.5, n=70) if penalty else None
    seeds = PublicSeeds(11)
    theta0 = MODEL.sample_prior(seeds.init_rng(), 32)
    runs = []
    rec = RecordingDecide()
    asked: list[np.ndarray] = []
    for decide in (rec, hss_decide(mode, M)):
        rule = ConfidentialRule(decide, noise_rngs(M), mode)
        kernel = RandomWalkMH(MODEL, LocalParties(MODEL, data, rule), cov=0.1**2, penalty=pen, m=M)
        _, trace = run_kernel(
            kernel,
            kernel.init(theta0),
            25,
            seeds,
            on_step=lambda _k, info: asked.append(np.isfinite(info.public)),
        )
        runs.append(trace)
    plain, conf = runs
    mask = np.stack(asked[:25])  # the plaintext run's asked proposals (the first 25 steps)
    sums = np.full(mask.shape, np.inf)
    batches = iter(rec.sums)
    for k in range(25):
        if mask[k].any():
            sums[k, mask[k]] = next(batches)
    _bits_agree(plain.accept.ravel(), conf.accept.ravel(), sums.ravel())
    if (plain.accept == conf.accept).all():
        np.testing.assert_array_equal(plain.draws, conf.draws)


@pytest.mark.parametrize("mode", TERMS_MODES)
def test_confidential_rejection_equals_plaintext(mode: str) -> None:
    data = beta_bernoulli_data((8, 12, 5))
    out = []
    rec = RecordingDecide()
    for decide in (rec, hss_decide(mode, M)):
        lp = LocalParties(MODEL, data, ConfidentialRule(decide, noise_rngs(M), mode))
        out.append(RejectionSampler(MODEL, lp, batch_size=300).run(PublicSeeds(4), 10**6, 600))
    plain, conf = out
    assert plain.accepted == conf.accepted
    np.testing.assert_array_equal(plain.samples, conf.samples)


def test_same_seed_same_proposals_whatever_the_decider() -> None:
    seen: list[list[np.ndarray]] = [[], []]

    def recorder(k: int):  # type: ignore[no-untyped-def]
        def decide(req: DecisionRequest) -> np.ndarray:
            seen[k].append(req.theta_star.copy())
            return np.zeros(
                req.n, dtype=bool
            )  # always reject: the chain stays, proposals depend on seed only

        return decide

    seeds = PublicSeeds(5)
    for k in (0, 1):
        kernel = RandomWalkMH(MODEL, recorder(k), cov=0.01)
        run_kernel(kernel, kernel.init(np.full((4, 1), 0.5)), 3, seeds)
    for a, b in zip(*seen, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(seeds.rng(0).random(3), seeds.rng(0, party=1).random(3))


# ---- the same decision law ---------------------------------------------------------------------------------

LAZY_GAMMA = 0.625
LAW_RULES = [*RULES, "lazy-plaintext-shares", "lazy-sign"]


def _law_rule(rule: str) -> tuple[DecisionRule, float]:
    """The accept rule ``rule`` (one of LAW_RULES) and the probability of its lazy coin (1: none)."""
    if rule == "lazy-sign":
        rngs = {p: fixed_rng(f"lazyrate/{p}") for p in range(1, M + 1)}
        decide = HssDecide.setup("sign", M, rngs, lazy=LazyCoin.from_gamma(LAZY_GAMMA))
        return ConfidentialRule(decide, noise_rngs(M, "lazyrate"), "sign"), LAZY_GAMMA
    if rule == "lazy-plaintext-shares":
        coin = LazyPlaintextDecide(LAZY_GAMMA, np.random.default_rng(zlib.crc32(b"lazyrate/plaintext")))
        return ConfidentialRule(coin, noise_rngs(M, "lazyrate/plaintext"), "sign"), LAZY_GAMMA
    return rule_for(rule, f"law/{rule}", M), 1.0


@pytest.mark.parametrize("rule", LAW_RULES)
def test_mh_acceptance_rate_is_gamma_min_1_r(rule: str) -> None:
    """At fixed (θ, θ*) pairs the accept rate is min(1, r), γ min(1, r) for a lazy rule (binomial test,
    Bonferroni)."""
    data = beta_bernoulli_data()
    pairs = np.array([[0.30, 0.34], [0.30, 0.22], [0.33, 0.30], [0.28, 0.45]])
    reps = 1500
    theta = np.repeat(pairs[:, :1], reps, axis=0)
    theta_star = np.repeat(pairs[:, 1:], reps, axis=0)
    public = MODEL.log_prior(theta_star) - MODEL.log_prior(theta)
    req = DecisionRequest("mh", theta_star=theta_star, public=public, theta=theta)
    decide, gamma = _law_rule(rule)
    parties = LocalParties(MODEL, data, decide)
    acc = parties(req).reshape(len(pairs), reps)
    lam = (sum(log_ratio(MODEL, d, req)[0] for d in data) + public).reshape(len(pairs), reps)[:, 0]
    want = gamma * np.minimum(1.0, np.exp(lam))
    for k in range(len(pairs)):
        p = stats.binomtest(int(acc[k].sum()), reps, want[k]).pvalue
        assert p > 1e-3 / len(pairs), (k, acc[k].mean(), want[k])


@pytest.mark.parametrize("mode", RULES)
def test_penalty_acceptance_rate_matches_formula(mode: str) -> None:
    data = beta_bernoulli_data()
    pairs = np.array([[0.30, 0.34], [0.30, 0.25], [0.33, 0.38], [0.28, 0.30]])
    reps = 1500 if mode in TERMS_MODES else 6000
    theta = np.repeat(pairs[:, :1], reps, axis=0)
    theta_star = np.repeat(pairs[:, 1:], reps, axis=0)
    pen = Penalty(tau=0.2, alpha=0.5, n=70)
    sigma = pen.sigma(MODEL, theta, theta_star)
    public = MODEL.log_prior(theta_star) - MODEL.log_prior(theta) + penalty_correction(sigma, M)
    req = DecisionRequest("mh", theta_star=theta_star, public=public, theta=theta, penalty=pen)
    # the noise streams this test used when it ran over plaintext_decide and sign only
    rule = rule_for(mode, "pen/plaintext" if mode == "plaintext-shares" else f"pen/{mode}", M)
    parties = LocalParties(MODEL, data, rule)
    acc = parties(req).reshape(len(pairs), reps)
    lam = (
        sum(log_ratio(MODEL, d, req)[0] for d in data) + MODEL.log_prior(theta_star) - MODEL.log_prior(theta)
    ).reshape(len(pairs), reps)[:, 0]
    s = (np.sqrt(M) * sigma).reshape(len(pairs), reps)[:, 0]
    assert (s > 0.3).all() and (s < 3).all(), s  # the penalty matters
    want = penalty_acceptance(lam, s)
    assert not np.allclose(want, np.minimum(1, np.exp(lam)), atol=0.05)
    for k in range(len(pairs)):
        p = stats.binomtest(int(acc[k].sum()), reps, want[k]).pvalue
        assert p > KS_ALPHA / len(pairs), (k, acc[k].mean(), want[k])
