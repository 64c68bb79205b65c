from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hss import field as F
from hss.prss import subsets
from hss.sharing import ShareError, recombine, recombine_additive, split, split_additive
from tests.hss.conftest import fixed_rng, make_session


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.lists(st.integers(0, F.P - 1), min_size=1, max_size=8), st.integers(0, 2**32))
def test_shamir_any_t_plus_1_reconstruct(m: int, secrets: list[int], seed: int) -> None:
    rng = fixed_rng(f"shamir{seed}")
    t = (m - 1) // 2
    x = F.from_ints(secrets)
    shares = split(x, t, m, rng)
    for subset in itertools.combinations(range(1, m + 1), t + 1):
        assert F.to_ints(recombine({p: shares[p - 1] for p in subset}, t)) == secrets
    assert F.to_ints(recombine({p: shares[p - 1] for p in range(1, m + 1)}, t)) == secrets


def test_homomorphism_and_additive() -> None:
    rng = fixed_rng("hom")
    a, b = F.from_ints([5, F.P - 3, 10**30]), F.from_ints([7, 11, 2**120])
    sa, sb = split(a, 2, 5, rng), split(b, 2, 5, rng)
    total = recombine({p: F.add(sa[p - 1], sb[p - 1]) for p in (1, 3, 5)}, 2)
    assert F.to_ints(total) == F.to_ints(F.add(a, b))
    prod = recombine({p: F.mul(sa[p - 1], sb[p - 1]) for p in range(1, 6)}, 4)  # degree 2t
    assert F.to_ints(prod) == F.to_ints(F.mul(a, b))
    add_shares = split_additive(a, 4, rng)
    assert F.to_ints(recombine_additive(add_shares)) == F.to_ints(a)


def test_too_few_and_inconsistent_shares_are_errors() -> None:
    rng = fixed_rng("err")
    shares = split(F.from_ints([42, 43]), 2, 5, rng)
    with pytest.raises(ShareError, match="at least t\\+1 = 3"):
        recombine({1: shares[0], 2: shares[1]}, 2)
    bad = {p: shares[p - 1].copy() for p in range(1, 6)}
    bad[4][1, 0] ^= np.uint64(1)
    with pytest.raises(ShareError, match="party 4's share"):
        recombine(bad, 2)
    with pytest.raises(ValueError, match="threshold"):
        split(F.from_ints([1]), 3, 3, rng)


def test_prss_gives_consistent_degree_t_sharings_and_zero_sharings() -> None:
    for m in (3, 4, 5, 7):
        params, ctxs, _ = make_session(m, seed=f"prss{m}")
        t = params.t
        rand = {p: c.prss.random(9, 3, (50,)) for p, c in ctxs.items()}
        secret = recombine(rand, t)  # consistency of all m shares is checked inside
        assert len(set(F.to_ints(secret))) == 50
        bounded = {p: c.prss.bounded(9, 4, (200,), 20) for p, c in ctxs.items()}
        vals = F.to_ints(recombine(bounded, t))
        assert max(vals) < len(subsets(m, t)) * 2**20
        zeros = np.stack([c.prss.zero_additive(9, 5, (30,)) for c in ctxs.values()])
        assert F.to_ints(recombine_additive(zeros)) == [0] * 30
        assert len(set(F.to_ints(zeros[0]))) == 30  # individual values are not zero
