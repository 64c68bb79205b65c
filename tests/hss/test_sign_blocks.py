"""sign_precompute = "blocks4" (hss.sign_blocks, issue 16): the first carry level over blocks of 4 bits made
local by precomputed monomials of each block; 2 precompute rounds, 5 online rounds.

Exactness: every decision equals the plaintext decision of the fixed-point sum, bit for bit, for m = 3, 5, 7
at the largest threshold, formats with K mod 4 = 0, 1, 2, 3, and edge cases. Privacy: the statistical
view-independence tests of tests/hss/test_views.py, for this option, with the rounds it adds.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import defaultdict

import numpy as np
import numpy.typing as npt
import pytest

from hss import field as F
from hss.fixedpoint import FixedPoint
from hss.lazy_coin import LazyCoin
from hss.modes import reveal_mode
from hss.protocols import plaintext_decisions, precompute_blocks, sign_party, sign_receiver
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Transcript, run_in_memory
from hss.session import PartyContext, SessionParams, key_setup
from hss.sign_blocks import block_coefficients, blocks, monomials_per_block
from tests.hss.conftest import fixed_rng
from tests.hss.test_views import ALPHA, homogeneous, low_bits

# (term_int_bits, frac_bits) -> K = term_int_bits + frac_bits + 4: 41 (default), 40, 39, 38 and a small 28
FORMATS = {41: (17, 20), 40: (16, 20), 39: (16, 19), 38: (16, 18), 28: (12, 12)}


def session(
    m: int, kbits: int = 41, seed: str = "blocks"
) -> tuple[SessionParams, dict[int, PartyContext], dict[int, SecureRandom]]:
    ti, fb = FORMATS[kbits]
    fmt = FixedPoint(term_int_bits=ti, frac_bits=fb)
    assert fmt.compare_bits == kbits
    sid = hashlib.sha256(f"{seed}/{m}/{kbits}".encode()).digest()[:16]
    params = SessionParams(m=m, t=(m - 1) // 2, session_id=sid, fmt=fmt)
    rngs = {p: fixed_rng(f"{seed}/{m}/{kbits}/party{p}") for p in range(1, m + 1)}
    keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    return params, {p: PartyContext(params, keys[p]) for p in rngs}, rngs


def run_blocks(
    params: SessionParams,
    ctxs: dict[int, PartyContext],
    rngs: dict[int, SecureRandom],
    values: list[npt.NDArray[np.float64]],
    public: npt.NDArray[np.float64] | None,
    step: int = 1,
    keep_log: bool = False,
    precompute: str = "blocks4",
) -> tuple[npt.NDArray[np.bool_], Transcript]:
    machines = {
        p: sign_party(c, values[p - 1], public, step, rngs[p], precompute=precompute) for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines, keep_log=keep_log)
    return sign_receiver(params, tr.to_receiver[-1], len(values[0])).accept, tr


@pytest.mark.parametrize("w", [1, 2, 3, 4])
def test_block_polynomials_are_the_block_comparison(w: int) -> None:
    """Exhaustively over c, r in {0,1}^w: sum_T coef_T r_T is (r > c on the block, r == c on it)."""
    combos = np.array(list(itertools.product((0, 1), repeat=w)), dtype=np.int64)  # (2^w, w), bit 0 first
    c_all = np.repeat(combos, len(combos), axis=0)
    r_all = np.tile(combos, (len(combos), 1))
    coef_g, coef_p = block_coefficients(c_all.T.astype(bool))
    masks = np.arange(1 << w)
    r_mono = np.stack([np.prod(np.where((mask >> np.arange(w)) & 1, r_all, 1), axis=1) for mask in masks])
    g = (coef_g * r_mono).sum(axis=0)
    p = (coef_p * r_mono).sum(axis=0)
    weights = 1 << np.arange(w)
    rv, cv = r_all @ weights, c_all @ weights
    np.testing.assert_array_equal(g, (rv > cv).astype(np.int64))
    np.testing.assert_array_equal(p, (rv == cv).astype(np.int64))
    assert set(np.unique(coef_g)) <= {-1, 0, 1} and set(np.unique(coef_p)) <= {-1, 0, 1}


def test_block_layout() -> None:
    assert blocks(41) == [(0, 4, 10), (40, 1, 1)]
    assert blocks(40) == [(0, 4, 10)]
    assert blocks(39) == [(0, 4, 9), (36, 3, 1)]
    assert [monomials_per_block(w) for w in (1, 2, 3, 4)] == [0, 1, 4, 11]


@pytest.mark.parametrize("m", [3, 5, 7])
@pytest.mark.parametrize("kbits", [41, 40, 39, 38])
def test_blocks4_equals_plaintext_bit_for_bit(m: int, kbits: int) -> None:
    params, ctxs, rngs = session(m, kbits)
    fmt = params.fmt
    res, big = fmt.resolution, fmt.term_bound * fmt.resolution
    edge = np.array([0.0, res, -res, 2 * res, -2 * res, big, -big, 1e9, -1e9, 0.4 * res, -0.6 * res])
    gen = np.random.default_rng(100 * m + kbits)
    n_rand = 300
    first = np.concatenate([edge, gen.normal(0, 2, n_rand) * gen.choice([1e-5, 1.0, 1e3], n_rand)])
    values = [first] + [np.concatenate([np.zeros(edge.size), gen.normal(0, 2, n_rand)]) for _ in range(m - 1)]
    public = np.concatenate([np.zeros(edge.size), gen.normal(0, 1, n_rand)])
    want = plaintext_decisions(values, public, fmt)
    assert want[:5].tolist() == [True, True, False, True, False]
    got, tr = run_blocks(params, ctxs, rngs, values, public)
    np.testing.assert_array_equal(got, want)
    rounds = reveal_mode("sign").rounds(params, "blocks4")
    assert tr.rounds == rounds == sum(params.sign_rounds_with("blocks4"))
    # every party at an extreme: the sum spans the whole range without wrapping
    for sign in (1.0, -1.0):
        ext = [np.full(4, sign * big) for _ in range(m)]
        got, _ = run_blocks(params, ctxs, rngs, ext, np.full(4, sign * big), step=2)
        assert (got == (sign > 0)).all()


@pytest.mark.parametrize("m", [3, 7])
def test_five_online_rounds_after_two_input_independent_rounds(m: int) -> None:
    """Default format (K = 41): 11 block nodes -> 6 -> 3 -> 2 -> fused with the output. The first two rounds
    are the precompute: with the same randomness, different inputs give byte-identical messages there."""
    params, ctxs, rngs = session(m, 41, seed="rounds")
    assert params.sign_rounds_with("blocks4") == (2, 5)
    assert params.sign_rounds_with("inline") == params.sign_rounds == (1, 6)
    assert reveal_mode("sign").rounds(params, "blocks4") == reveal_mode("sign").rounds(params) == 7
    n = 20
    logs = []
    for mean in (-3.0, 3.0):
        _, ctxs, rngs = session(m, 41, seed="rounds")
        vals = [np.random.default_rng(7).normal(mean, 1, n) for _ in range(m)]
        _, tr = run_blocks(params, ctxs, rngs, vals, None, keep_log=True)
        assert tr.rounds == 7
        logs.append(tr.log)
    pre = [[(r, s, d, pl.tobytes()) for r, s, d, pl in log if r <= 2] for log in logs]
    assert pre[0] == pre[1] and pre[0]
    online = [[(r, s, d, pl.tobytes()) for r, s, d, pl in log if r == 3] for log in logs]
    assert online[0] != online[1]  # round 3 carries the inputs: the first online round
    small, _, _ = session(3, 28)
    assert small.sign_rounds_with("blocks4") == (2, 4)  # 7 block nodes -> 4 -> 2 -> fused


def test_blocks4_refuses_lazy_coins_and_pair_material() -> None:
    from hss.protocols import precompute_sign

    _, ctxs, rngs = session(3)
    vals = np.zeros(4)
    with pytest.raises(ValueError, match=r"inline sign precompute only.*'blocks4'"):
        sign_party(ctxs[1], vals, None, 1, rngs[1], precompute="blocks4", lazy=LazyCoin(1, 1))
    mats, _ = run_in_memory({p: precompute_sign(c, 4, 9, rngs[p]) for p, c in ctxs.items()})
    with pytest.raises(ValueError, match=r"blocks4.*pair-only"):
        sign_party(ctxs[1], vals, None, 1, rngs[1], material=mats[1], precompute="blocks4")
    blk, _ = run_in_memory({p: precompute_blocks(c, 4, 10, rngs[p]) for p, c in ctxs.items()})
    with pytest.raises(ValueError, match=r"needs precompute 'blocks4'"):
        sign_party(ctxs[1], vals, None, 1, rngs[1], material=blk[1])
    with pytest.raises(ValueError, match="material is for 4"):
        sign_party(ctxs[1], np.zeros(5), None, 1, rngs[1], material=blk[1], precompute="blocks4")


@pytest.mark.parametrize("m", [3, 7])
def test_blocks4_material_ahead_then_five_rounds(m: int) -> None:
    """precompute_blocks runs the 2 precompute rounds before the inputs exist; the batch then takes 5."""
    params, ctxs, rngs = session(m, 39, seed="ahead")
    n = 200
    gen = np.random.default_rng(m)
    values = [gen.normal(0, 2, n) for _ in range(m)]
    values[0][:3] = [0.0, params.fmt.resolution, -params.fmt.resolution]
    for v in values[1:]:
        v[:3] = 0.0
    mats, tr_pre = run_in_memory({p: precompute_blocks(c, n, 50, rngs[p]) for p, c in ctxs.items()})
    assert tr_pre.rounds == 2
    machines = {
        p: sign_party(c, values[p - 1], None, 51, rngs[p], material=mats[p], precompute="blocks4")
        for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines)
    assert tr.rounds == params.sign_rounds_with("blocks4")[1] == 5
    got = sign_receiver(params, tr.to_receiver[-1], n).accept
    np.testing.assert_array_equal(got, plaintext_decisions(values, None, params.fmt))
    assert got[:3].tolist() == [True, True, False]


def block_views(
    secrets: float, coalition: set[int], m: int = 5, n: int = 3000, precompute: str = "blocks4"
) -> tuple[dict[int, npt.NDArray[np.int64]], Transcript]:
    """As tests/hss/test_views.py's ``views``, with ``precompute`` (blocks4, or prefix: hss.sign_prefix)."""
    params, ctxs, rngs = session(m, 41, seed=f"views-{precompute}-{secrets}")
    gen = np.random.default_rng(11)
    values = [(np.full(n, -0.75) if p in coalition else gen.normal(secrets, 3.0, n)) for p in ctxs]
    _, tr = run_blocks(params, ctxs, rngs, values, None, keep_log=True, precompute=precompute)
    seen: dict[int, list[npt.NDArray[np.int64]]] = defaultdict(list)
    first = min(coalition)
    for rnd, src, dst, payload in tr.log:
        if dst == first and src not in coalition:
            seen[rnd].append(low_bits(payload))
        if dst == RECEIVER:
            seen[-1].append(low_bits(payload))
    return {r: np.concatenate(v) for r, v in seen.items()}, tr


def opened(tr: Transcript, rnd: int, m: int) -> F.FieldArray:
    """The values opened in round ``rnd`` (every party's masked contribution, summed; in a round that also
    carries GRR rows, its first elements only mean something)."""
    contrib = [pl for r, src, dst, pl in tr.log if r == rnd and dst == (1 if src != 1 else 2)]
    return F.lincomb(F.from_ints([1] * m), np.stack([x.reshape(-1, 2) for x in contrib]))


@pytest.mark.slow
@pytest.mark.parametrize("coalition", [{1, 2}, {4, 5}, {3}])
def test_blocks4_views_do_not_depend_on_secrets(coalition: set[int]) -> None:
    """Each party's and each coalition of t = 2 parties' (m = 5) received messages, per round, and the
    receiver's, have the same distribution whatever the other parties' inputs (chi-square, level 1e-3)."""
    va, tra = block_views(-4.0, coalition)
    vb, trb = block_views(+4.0, coalition)
    assert va.keys() == vb.keys() and len(va) == 7  # rounds 1..6 to parties, and the receiver (-1)
    for rnd in va:
        p = homogeneous(va[rnd], vb[rnd])
        assert p > ALPHA, (rnd, p)
    # the masked value c = S + 2^K + r opened to everyone in round 3 (the first online round)
    cs = [opened(tr, 3, 5) for tr in (tra, trb)]
    assert homogeneous(low_bits(cs[0].reshape(-1)), low_bits(cs[1].reshape(-1))) > ALPHA
    hi = [low_bits(F.shift_right(c, 41).reshape(-1)) for c in cs]
    assert homogeneous(hi[0], hi[1]) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize(("m", "n"), [(3, 20_000), (7, 5_000)])
def test_blocks4_on_many_random_decisions_with_gamma_noise(m: int, n: int) -> None:
    from mechanisms.noise import gamma_shares

    params, ctxs, rngs = session(m, 41, seed="bulk")
    gen = np.random.default_rng(m)  # public test data; the noise comes from a CSPRNG
    noise_rng = fixed_rng("noise-blocks4")
    loglik = [gen.normal(0, 1, n) * gen.choice([0.01, 1.0, 100.0], n) - 1.0 / m for _ in range(m)]
    values = [loglik[j] + gamma_shares(noise_rng, m, n) for j in range(m)]
    pub = gen.normal(0, 0.5, n)
    got, _ = run_blocks(params, ctxs, rngs, values, pub)
    np.testing.assert_array_equal(got, plaintext_decisions(values, pub, params.fmt))
