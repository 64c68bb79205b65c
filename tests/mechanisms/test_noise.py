"""The decision noise: Gamma(1/m, 1) shares by Marsaglia-Tsang rejection, against the law and against the
inverse-CDF draws (mechanisms.noise). Fixed keys; each test's false-failure rate is stated."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from hss.randomness import SecureRandom
from mechanisms.noise import decision_gamma_shares, gamma_shares

ALPHA = 1e-3  # per test: the probability a correct sampler fails it


def rng(label: str) -> SecureRandom:
    return SecureRandom.from_key(label.encode().ljust(32, b"\0"))


@pytest.mark.parametrize("m", [1, 2, 3, 7, 10])
def test_decision_shares_follow_gamma_one_over_m(m: int) -> None:
    x = decision_gamma_shares(rng(f"law-{m}"), m, 20_000)
    assert x.shape == (20_000,) and (x > 0).all() and np.isfinite(x).all()
    assert stats.kstest(x, stats.gamma(1.0 / m).cdf).pvalue > ALPHA


@pytest.mark.parametrize("m", [3, 7])
def test_decision_shares_tails(m: int) -> None:
    """KS is blunt in the tails: the counts below the 0.001 quantile and above the 0.999 quantile are
    binomial(n, 0.001); two-sided exact tests, Bonferroni over the two."""
    n = 200_000
    x = decision_gamma_shares(rng(f"tail-{m}"), m, n)
    law = stats.gamma(1.0 / m)
    for count in (np.count_nonzero(x < law.ppf(1e-3)), np.count_nonzero(x > law.ppf(1 - 1e-3))):
        assert stats.binomtest(int(count), n, 1e-3).pvalue > ALPHA / 2


@pytest.mark.parametrize("m", [3, 5])
def test_m_parties_shares_sum_to_exp1(m: int) -> None:
    """The point of the shares: m independent parties' draws sum to Exp(1), making the decision exact."""
    total = sum(decision_gamma_shares(rng(f"sum-{m}-{j}"), m, 20_000) for j in range(m))
    assert stats.kstest(total, stats.expon().cdf).pvalue > ALPHA


def test_same_law_as_the_inverse_cdf_draws() -> None:
    a = decision_gamma_shares(rng("two-a"), 4, 20_000)
    b = gamma_shares(rng("two-b"), 4, 20_000)
    assert stats.ks_2samp(a, b).pvalue > ALPHA


def test_repeatable_from_the_key_and_sized() -> None:
    a = decision_gamma_shares(rng("rep"), 3, 1_000)
    assert np.array_equal(a, decision_gamma_shares(rng("rep"), 3, 1_000))
    assert not np.array_equal(a, decision_gamma_shares(rng("other"), 3, 1_000))
    assert decision_gamma_shares(rng("rep"), 3, 0).shape == (0,)
    assert decision_gamma_shares(rng("rep"), 7, 1).shape == (1,)


@pytest.mark.parametrize(("m", "n", "what"), [(0, 5, "m must be >= 1"), (3, -1, "must be >= 0")])
def test_bad_arguments(m: int, n: int, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        decision_gamma_shares(rng("bad"), m, n)
