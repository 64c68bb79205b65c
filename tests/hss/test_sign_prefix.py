"""sign_precompute = "prefix" (hss.sign_prefix, issue 39 item 1): blocks4's local first level, then the carry
over the blocks in one round by Bar-Ilan-Beaver openings of R_{j-1} a_b R_j^-1; 2 precompute rounds and 3
online rounds.

Exactness: every decision equals the plaintext decision of the fixed-point sum, bit for bit, for m = 3, 4,
5, 7, formats with K mod 4 = 0, 1, 2, 3, and edge cases (clamped terms, S = 0). Privacy: the statistical
view-independence test of tests/hss/test_views.py for this option, every round and the opened values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hss import field as F
from hss.lazy_coin import LazyCoin
from hss.modes import reveal_mode
from hss.protocols import plaintext_decisions, precompute_blocks, precompute_prefix, sign_party, sign_receiver
from hss.runtime import run_in_memory
from hss.sign_prefix import _indicator_coefficients, _pairs, prefix_block_count
from tests.hss.test_sign_blocks import block_views, opened, run_blocks, session
from tests.hss.test_views import ALPHA, homogeneous, low_bits


@pytest.mark.parametrize("nb", [2, 3, 11])
def test_the_indicator_polynomials_are_one_at_one_and_zero_above(nb: int) -> None:
    """f_b(a) for block b: 1 at a = 1 (no block above differs), 0 at a = 2..D_b + 1, in the field."""
    coef = _indicator_coefficients(nb)
    for b in range(nb - 1):
        top = nb - 1 - b  # D_b
        for a in range(1, top + 2):
            powers = F.from_ints([pow(a, k, F.P) for k in range(nb)])
            (value,) = F.to_ints(F.lincomb(powers, coef[b][:, None]))
            assert value == (1 if a == 1 else 0), (b, a)


@pytest.mark.parametrize("m", [3, 4, 5, 7])
@pytest.mark.parametrize("kbits", [41, 40, 39, 38])
def test_prefix_equals_plaintext_bit_for_bit_in_four_rounds(m: int, kbits: int) -> None:
    params, ctxs, rngs = session(m, kbits, seed="prefix")
    n = 240
    gen = np.random.default_rng(m * kbits)
    values = [gen.normal(0.0, 2.0, n) * gen.choice([0.001, 1.0, 1000.0], n) for _ in range(m)]
    pub = gen.normal(0.0, 1.0, n)
    bound = params.fmt.term_bound
    values[0][:4] = [10 * bound, -10 * bound, bound * 0.999, -bound * 0.999]  # clamped and extreme
    values[1][4] = -(sum(v[4] for i, v in enumerate(values) if i != 1) + pub[4])  # S = 0 to the resolution
    values[2][5:9] = 0.0
    got, tr = run_blocks(params, ctxs, rngs, values, pub, precompute="prefix")
    want = plaintext_decisions(values, pub, params.fmt)
    np.testing.assert_array_equal(got, want)
    assert 0.2 < want.mean() < 0.8
    assert tr.rounds == params.sign_rounds_in_step("prefix") == 4  # c opened with precompute round B
    assert reveal_mode("sign").rounds(params, "prefix") == 4
    assert reveal_mode("sign").under("semi-honest", "prefix", ahead=True).rounds(params) == 5


@pytest.mark.parametrize("m", [3, 7])
def test_prefix_material_ahead_then_three_rounds(m: int) -> None:
    params, ctxs, rngs = session(m, 41, seed="prefix-ahead")
    n = 50
    gen = np.random.default_rng(7)
    values = [gen.normal(0.0, 5.0, n) for _ in range(m)]
    made, pre = run_in_memory({p: precompute_prefix(c, n, 4, rngs[p]) for p, c in ctxs.items()})
    assert pre.rounds == 2
    machines = {
        p: sign_party(c, values[p - 1], None, 4, rngs[p], made[p], precompute="prefix")
        for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines)
    assert tr.rounds == 3
    got = sign_receiver(params, tr.to_receiver[-1], n).accept
    np.testing.assert_array_equal(got, plaintext_decisions(values, None, params.fmt))


def test_prefix_refuses_a_lazy_coin_other_material_and_security_abort() -> None:
    params, ctxs, rngs = session(3, 41, seed="prefix-refuse")
    with pytest.raises(ValueError, match="lazy coin"):
        sign_party(ctxs[1], [0.0], None, 1, rngs[1], precompute="prefix", lazy=LazyCoin(3, 2))
    blocks, _ = run_in_memory({p: precompute_blocks(c, 1, 1, rngs[p]) for p, c in ctxs.items()})
    with pytest.raises(ValueError, match="'prefix' takes material from precompute_prefix only"):
        sign_party(ctxs[1], [0.0], None, 1, rngs[1], blocks[1], precompute="prefix")
    with pytest.raises(ValueError, match="no version with abort yet"):
        reveal_mode("sign").under("abort", "prefix")
    with pytest.raises(ValueError, match="no version with abort yet"):
        from hss.abort_sign import sign_party_abort

        sign_party_abort(ctxs[1], [0.0], None, 1, rngs[1], "prefix")
    assert prefix_block_count(params.fmt.compare_bits) == 11


@pytest.mark.slow
@pytest.mark.parametrize("coalition", [{1, 2}, {3}])
def test_prefix_views_do_not_depend_on_secrets(coalition: set[int]) -> None:
    """Each party's and each coalition of t = 2 parties' (m = 5) received messages, per round, and the
    receiver's, have the same distribution whatever the other parties' inputs (chi-square, level 1e-3);
    so do the values opened to everyone: c (round 2, with precompute round B's reshares: its low and high
    bits) and the m_{b,j} = R a_b R^-1 (round 3), whose a_b (the count of blocks above b where r and c
    differ, plus 1) depends on the secrets."""
    va, tra = block_views(-4.0, coalition, n=1500, precompute="prefix")
    vb, trb = block_views(+4.0, coalition, n=1500, precompute="prefix")
    assert va.keys() == vb.keys() and len(va) == 4  # rounds 1..3 to parties, and the receiver (-1)
    for rnd in va:
        p = homogeneous(va[rnd], vb[rnd])
        assert p > ALPHA, (rnd, p)
    n = 1500
    cs = [opened(tr, 2, 5)[:n] for tr in (tra, trb)]  # c first in round 2's messages
    assert homogeneous(low_bits(cs[0].reshape(-1)), low_bits(cs[1].reshape(-1))) > ALPHA
    hi = [low_bits(F.shift_right(c, 41).reshape(-1)) for c in cs]
    assert homogeneous(hi[0], hi[1]) > ALPHA
    ms = [opened(tr, 3, 5) for tr in (tra, trb)]
    assert homogeneous(low_bits(ms[0].reshape(-1)), low_bits(ms[1].reshape(-1))) > ALPHA
    assert not np.any(F.equal(ms[0], F.zeros(ms[0].shape[:-1])))  # never 0: a_b >= 1, R != 0


@pytest.mark.parametrize(("n_pool", "n_step"), [(1, 2), (3, 2)])
def test_a_discarded_pool_and_its_step_open_the_same_values_under_the_same_masks(
    n_pool: int, n_step: int
) -> None:
    """A pool made ahead for one batch size and discarded (the next step asks another n: parties.ahead), then
    the step's own 4 rounds with the same step's PRSS values: in round A every party's contribution at a
    flat position the two runs share must be the same (the same opened value, the same zero-sharing), else
    the difference of an honest party's two contributions under one mask gives away its share of s^2 and
    with it the mask bits (an independent review, 2026-11-30, recovered every mask bit of the step at m = 5
    and 7 from the first version, which opened s^2 and w = R S under one zero-sharing)."""
    m, step = 3, 6
    params, ctxs, rngs = session(m, 41, seed="prefix-fallback")
    kbits, nr = params.fmt.compare_bits, _pairs(prefix_block_count(41)).randoms
    _, pool = run_in_memory({p: precompute_prefix(c, n_pool, step, rngs[p]) for p, c in ctxs.items()}, True)
    values = [np.linspace(-3.0, 3.0, n_step) * (p + 1) for p in range(m)]
    machines = {
        p: sign_party(c, values[p - 1], None, step, rngs[p], precompute="prefix") for p, c in ctxs.items()
    }
    _, inline = run_in_memory(machines, keep_log=True)

    def round_a(log: list[Any], n: int) -> dict[tuple[int, int], tuple[F.FieldArray, F.FieldArray]]:
        out = {}
        for r, src, dst, payload in log:
            if r == 1:
                flat = payload.reshape(-1, 2)
                out[(src, dst)] = (flat[: kbits * n], flat[kbits * n : kbits * n + nr * n])
        return out

    a, b = round_a(pool.log, n_pool), round_a(inline.log, n_step)
    common = min(n_pool, n_step)
    assert a.keys() == b.keys() and len(a) == m * (m - 1)
    for key in a:
        for part, size in ((0, kbits), (1, nr)):
            np.testing.assert_array_equal(a[key][part][: size * common], b[key][part][: size * common])
    np.testing.assert_array_equal(
        sign_receiver(params, inline.to_receiver[-1], n_step).accept,
        plaintext_decisions(values, None, params.fmt),
    )
