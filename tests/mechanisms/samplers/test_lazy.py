"""Lazy acceptance with a secret coin made inside the sign protocol: the revealed bit is exactly [S >= 0]
AND a coin of probability gamma (never an accept the plain test rejects; among the plain accepts a binomial
gamma), the rounds are those of the plain sign protocol, and lazy MH / lazy rejection sampling target the
exact posterior (Beta-Bernoulli split over three parties; mean and variance within 4 MCSE, KS). The lazy
rules' accept rate gamma min(1, r) is part of the accept-rule contract, test_decider_contract.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from hss.lazy_coin import LazyCoin
from hss.modes import TERMS_MODES, TermsBatch, reveal_mode
from hss.protocols import sign_party, sign_receiver
from hss.runtime import run_in_memory
from hss.session import SessionParams
from mechanisms.samplers import (
    ConfidentialRule,
    HssDecide,
    Lazy,
    LazyPlaintextDecide,
    LocalParties,
    PublicSeeds,
    RandomWalkMH,
    RejectionSampler,
    run_kernel,
)
from tests.mechanisms.samplers.helpers import (
    KS_ALPHA,
    MODEL,
    beta_bernoulli_data,
    check_draws_match,
    exact_posterior,
    fixed_rng,
    noise_rngs,
)

M = 3


def test_coin_from_gamma() -> None:
    assert LazyCoin.from_gamma(0.5) == LazyCoin(1, 1)
    assert LazyCoin.from_gamma(0.375) == LazyCoin(3, 3)
    assert LazyCoin.from_gamma(40001 / 2**16).gamma == 40001 / 2**16
    for bad in (0.0, 1.0, 0.3, 1 / 2**17, math.nan, True):
        with pytest.raises(ValueError, match="gamma"):
            LazyCoin.from_gamma(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="odd"):
        LazyCoin(2, 3)


@pytest.mark.slow
@pytest.mark.parametrize(("m", "gamma"), [(3, 0.5), (5, 0.8125), (7, 40001 / 2**16)])
def test_lazy_bit_is_the_and_of_the_test_and_a_gamma_coin(m: int, gamma: float) -> None:
    lazy = LazyCoin.from_gamma(gamma)
    dec = HssDecide.setup("sign", m, {p: fixed_rng(f"lazy/{m}/{p}") for p in range(1, m + 1)}, lazy=lazy)
    plain = HssDecide.setup("sign", m, {p: fixed_rng(f"lazy/{m}/{p}") for p in range(1, m + 1)})
    rng = np.random.default_rng(m)
    n = 3000
    terms = [rng.normal(0.0, 1.0, n) for _ in range(m)]
    public = rng.normal(0.0, 0.5, n)
    s = public + np.sum(terms, axis=0)
    bits = dec(terms, public)
    assert not np.any(bits & (s < -1e-9))  # never an accept the plain test rejects
    assert np.array_equal(plain(terms, public), s >= 0) or np.abs(s).min() < 1e-9
    k = int(bits[s >= 0].sum())
    trials = int((s >= 0).sum())
    assert stats.binomtest(k, trials, lazy.gamma).pvalue > 1e-4, (k / trials, lazy.gamma)
    assert dec.rounds == plain.rounds  # the coin costs no extra round for the default format


def test_lazy_refuses_other_modes_and_pooled_precompute() -> None:
    params = SessionParams(m=3, t=1, session_id=b"s" * 16)
    dec = HssDecide.setup("blinded", 3, {p: fixed_rng(f"lz/{p}") for p in range(1, 4)})
    ctx, coin, z = dec.ctxs[1], LazyCoin(1, 1), np.zeros(2)
    for mode in TERMS_MODES:  # the table's lazy_coin flag is what the party machine accepts
        batch = TermsBatch(z, None, 1, fixed_rng("x"), blind=np.ones(2), lazy=coin)
        if reveal_mode(mode).lazy_coin:
            reveal_mode(mode).machine(ctx, batch)
        else:
            with pytest.raises(ValueError, match=f"reveal mode 'sign' only, not '{mode}'"):
                reveal_mode(mode).machine(ctx, batch)
    with pytest.raises(ValueError, match="inline sign precompute"):
        sign_party(ctx, z, None, 1, fixed_rng("x"), precompute="pooled", lazy=coin)
    with pytest.raises(ValueError, match="inline sign precompute only"):  # issue 16: not with blocks4
        sign_party(ctx, z, None, 1, fixed_rng("x"), precompute="blocks4", lazy=coin)
    # a receiver cannot tell a lazy batch from a plain one: the output is a bit per decision
    sign = HssDecide.setup("sign", 3, {p: fixed_rng(f"lz2/{p}") for p in range(1, 4)}, lazy=LazyCoin(3, 2))
    machines = {
        p: sign_party(sign.ctxs[p], np.ones(4), None, 1, sign.rngs[p], lazy=LazyCoin(3, 2))
        for p in range(1, 4)
    }
    _, tr = run_in_memory(machines)
    out = sign_receiver(params, tr.to_receiver[-1], 4)
    assert out.revealed is None and out.accept.dtype == bool


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plaintext", "sign"])
def test_lazy_mh_targets_the_exact_posterior(mode: str) -> None:
    data = beta_bernoulli_data()
    gamma = 0.5
    lazy = Lazy(gamma, max_sensitivity=2.0)
    if mode == "plaintext":
        decide = LazyPlaintextDecide(gamma, np.random.default_rng(5))
    else:
        rngs = {p: fixed_rng(f"lazychain/{p}") for p in range(1, M + 1)}
        decide = HssDecide.setup("sign", M, rngs, lazy=lazy.coin())
    rule = ConfidentialRule(decide, noise_rngs(M, f"lazychain/{mode}"), "sign")
    kernel = RandomWalkMH(MODEL, LocalParties(MODEL, data, rule), cov=0.08**2, lazy=lazy)
    _, trace = run_kernel(kernel, kernel.init(np.full((48, 1), 0.3)), 500, PublicSeeds(41))
    check_draws_match(trace.draws[60:, :, 0], exact_posterior(data), f"lazy MH ({mode})")
    assert 0.1 < trace.acceptance_rate < gamma


@pytest.mark.slow
def test_lazy_rejection_sampling_is_exact() -> None:
    data = beta_bernoulli_data()
    rngs = {p: fixed_rng(f"lazyrs/{p}") for p in range(1, M + 1)}
    decide = HssDecide.setup("sign", M, rngs, lazy=LazyCoin.from_gamma(0.75))
    parties = LocalParties(MODEL, data, ConfidentialRule(decide, noise_rngs(M, "lazyrs"), "sign"))
    res = RejectionSampler(MODEL, parties, batch_size=2000).run(PublicSeeds(43), 400, 200_000)
    assert res.stopped == "accepts"
    p = stats.kstest(res.samples[:, 0], exact_posterior(data).cdf).pvalue
    assert p > KS_ALPHA, p
