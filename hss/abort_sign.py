"""The reveal mode ``sign`` under security with abort (issue 25), every sign precompute, the lazy coin.

Up to t < m/2 parties may deviate in any message; every honest party then raises
:class:`hss.authenticated.AbortError` before any output leaves it, or the receiver gets exactly [S >= 0] for
the terms the parties chose (AND the lazy coin). Rounds: inline 15 (semi-honest 7), pooled 15 (9), blocks4
14 (7), inline with a lazy coin 16 (7).

Inline (the rounds, 1 to 15):

1. inputs and squares: each party deals (Shamir, degree t) the B = term_int_bits + frac_bits + 1 = 38 bits
   of its encoded term x_j + 2^(B-1) with its proof that they are bits (hss.abort_modes.bits_proof: the
   values at 0 (a fresh secret mask) and 1..B of f, and the B + 1 values of q with
   prod_{k=1..B} (X - k) q = f (f - 1)); GRR reshares of r s, s^2 and s_{2a} s_{2a+1} for the K mask bits'
   PRSS values s (and the lazy coin's L bits), of r r_hi (the mask's high part, a PRSS integer) and of
   r beta (for the check before c);
2. MACs and squares opened: GRR reshares of the squares' MACs (r s) s and the pairs' (r s_{2a}) s_{2a+1};
   the squares u = s^2 and a coin seed opened with error detection (a u that is 0 or not a square aborts);
3. the check's own coin seed and every dealer's (f(x), q(x)) at the first seed's point x opened with error
   detection: a dealt value that is not a bit fails its proof (probability at most 2B/p that it holds) and
   every honest party aborts here;
4. and 5. the check before the masked term (:meth:`AuthParty.check_upto`, the CheckZero of verify with r
   kept secret) over every pair made in rounds 1 and 2: (s, r s), (u, (r s) s), the pairs, r_hi. Every error
   it counts was fixed before its seed, and the only later one (its own reshare) is multiplied by a secret
   beta, so it passes only if nothing was altered, never depending on a secret. Only now are
   b_i = (1 + s_i / sqrt(u_i)) / 2 used: a square shifted by a deviating party's reshare would make b_i one of
   two field elements that party can compute (it knows s_i^2 = u_i - its shift), and the masked input opened
   over it would show bits of S. The first version opened c in round 3 and checked everything at verify; a
   first fix opened one value y = sum_i a_i (r s_i) s_i - r sum_i a_i u_i, which the coalition could steer
   with y's own reshare error and a guessed sign of s_i (a selective failure). Both found by independent
   reviews, 2026-11-30 (docs/SECURITY_ABORT.md, "Known limits");
6. the masked input opened: c = S + 2^K + r, with S = pub + sum_j (sum_i 2^i d_ji - 2^(B-1)) and
   r = sum_i 2^i b_i + 2^K r_hi, with error detection (raw degree-t shares; honest dealers' fresh
   polynomials make every coefficient but the value uniform); the terms need no MACs (they enter only c,
   opened with error detection, never a product);
7. to 11. the carry tree of u = [c mod 2^K < r mod 2^K] (first level local, ``compare_nodes``, its MACs by
   the same affine map with the key share in place of 1; each further level one duplicated multiplication);
12. to 14. :meth:`AuthParty.verify`; 15. the bit c_hi - r_hi - u to the receiver (raw degree-t shares), who
   checks that all m lie on one polynomial (:func:`hss.authenticated.receive_checked`).

pooled (15): as the semi-honest pooled precompute, each public root is computed by one party, the roots of
its chunk, broadcast in round 3 in one canonical form (the one of v, -v below 2^126); under abort u is opened
to every party (round 2), so every party checks every broadcast root on arrival (u v^2 = 1 and the form: a
wrong root, or -v sent to one party only, aborts in round 3). Its gain over inline is CPU (each party takes
1/m of the square roots); the first version opened each chunk of u to its root's holder only and claimed
u v^2 = 1 at verify. blocks4 (14): the block monomials of hss.sign_blocks with MACs: round 1 reshares the
block pairs s_a s_b, round 2 the triples s_c (s_a s_b) with MACs (r s_c)(s_a s_b) and the quadruples
(s_a s_b)(s_c s_d), round 3 the quadruples' MACs (r s_a s_b)(s_c s_d) (a MAC may come later than its value:
only verify uses it, and r stays secret until then; the monomials enter only the tree, never c); the first
level over blocks is local, so the tree has 4 product rounds instead of 5. Lazy coin (inline, 16): the
coin's L bits come with the mask bits (the check covers them), its tree [u < k] advances in the comparison's
product rounds, and one more duplicated multiplication ANDs the coin with the bit before verify.

The mask made ahead (``precompute_ahead``; 16 rounds inline and pooled, 15 blocks4, 5 of them before the terms
exist): :func:`precompute_sign_abort` runs rounds 1 to 5 above without the terms (no dealing in round 1, no
seed in round 2, no proofs in round 3; the check's coins under a PRSS purpose of their own), and its
:class:`AbortSignMaterial` carries the step's :class:`AuthParty` (r still secret, every pair tracked) into
:func:`sign_party_abort`, which runs: 6. the terms dealt as bits with their proof; 7. c opened with the
proofs' seed (c masks any term, so a term that is not bits only changes c); 8. the tree's first product with
the proofs opened at the seed's point, checked there (every honest party aborts on a failing one, long before
the output); the rest of the tree, verify and the output as above: 11 online rounds (blocks4 10) against 15
in-step (14).

Why the terms are dealt as bits (the range question of docs/SECURITY_ABORT.md): the comparison is [S >= 0]
only while |S| < 2^K. A registry that could bring any field element as its term would make the output an
interval test on the honest sum, or a non-bit; a check on the output would then abort depending on the honest
registries' data, and every retry of the step would let it ask another such question. Dealing each term as
B checked bits makes every effective term lie in [-2^(B-1), 2^(B-1)) whatever a party sends: |S| < 16 2^37 =
2^K as for honest terms, so the output is always the bit [S_h + x_c >= 0] for the coalition's chosen terms
x_c, and an abort depends only on what the deviating parties sent (and on r, the coins and beta), never on
the honest parties' data. The price is the dealt values: 2B + 2 field elements per ordered pair of parties
per decision (the first version gave every dealt bit a MAC, (1 + m) B elements: 4.4x the semi-honest bytes at
m = 3 and 6.0x at m = 7, now 3.7x and 3.8x; docs/BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.abort_modes import (
    SIGN_ROUNDS,
    abort_refuses,
    bits_proof,
    int_bits,
    proof_holds,
    proof_openings,
    term_bits,
)
from hss.authenticated import AbortError, Auth, AuthParty, Extra, add, mul_public, receive_checked, sub
from hss.lazy_coin import LazyCoin, coin_carry_tree
from hss.primitives import P_RHI, carry_advance, comparison_mask, split_compared
from hss.protocols import Decisions, PartyReport, compare_nodes, encode_batch, root_chunks
from hss.randomness import SecureRandom
from hss.runtime import Inbox, Machine, PartyGen
from hss.session import PartyContext, SessionParams
from hss.sign_blocks import BlockMaterial, block_nodes, layout, monomial_roots, monomials

__all__ = [
    "AbortSignMaterial",
    "precompute_sign_abort",
    "sign_abort_rounds",
    "sign_party_abort",
    "sign_receiver_abort",
]

#: PRSS purposes of this module (hss.primitives 1..7, hss.svt 101..106, hss.authenticated 201, 202, 1000+k).
#: The check before the masked term draws its coin seed, beta and pad under P_SIGN_PRE in the inline schedule
#: and under P_SIGN_PRE_AHEAD in a mask made ahead: a step whose pool was made and then discarded (another
#: batch size, a link probe) runs the inline schedule with the same step's PRSS values, and its check must
#: not reuse coins the pool already opened (an error fixed after its coins are known could be cancelled)
P_SIGN_S, P_SIGN_COIN, P_SIGN_PRE, P_SIGN_PRE_AHEAD = 301, 302, 303, 304

_INV2 = pow(2, F.P - 2, F.P)
_INV4 = pow(4, F.P - 2, F.P)


def sign_abort_rounds(precompute: str = "inline", lazy: bool = False, ahead: bool = False) -> int:
    """Rounds of a sign batch under abort with the sign precompute ``precompute`` (and a lazy coin), all of
    them; ``ahead``: its mask made ahead (:func:`precompute_sign_abort`), the first
    :data:`hss.abort_modes.SIGN_MASK_ROUNDS` of them run before the terms exist and one round more in all
    (the terms dealt in a round of their own)."""
    _check_offered(precompute)
    if ahead and lazy:
        raise ValueError("a lazy coin is made in the step: no sign material made ahead")
    return SIGN_ROUNDS[precompute] + (1 if lazy or ahead else 0)


def sign_party_abort(
    ctx: PartyContext,
    values: npt.ArrayLike,
    public: npt.ArrayLike | None,
    step: int,
    rng: SecureRandom,
    precompute: str = "inline",
    lazy: LazyCoin | None = None,
    material: AbortSignMaterial | None = None,
    rounds_before: int = 0,
) -> Machine[PartyReport]:
    """``sign`` under abort: the receiver learns only [S >= 0] (AND the lazy coin), or every honest party
    aborts. ``values``, ``public``, ``step``, ``rng``, ``precompute``, ``lazy`` as for
    :func:`hss.protocols.sign_party`; ``material``: this step's mask made ahead
    (:func:`precompute_sign_abort`, the step's first rounds), so that only the online rounds run (not with a
    lazy coin; taken here, once, ``ValueError`` if it is not this batch's). ``rounds_before``: rounds of the
    step already run by a pool made ahead and discarded (read only without ``material``, which counts its
    own), so that an :class:`AbortError` names the step's round. Needs 1 <= t < m/2."""
    _check_offered(precompute)
    ctx.params.require_honest_majority("reveal mode 'sign' with security 'abort'")
    if lazy is not None and precompute != "inline":
        raise ValueError(
            "a lazy decision makes its coin with the inline sign precompute only "
            f"(sign_precompute {precompute!r} with a lazy coin is not offered)"
        )
    if lazy is not None and material is not None:
        raise ValueError("a lazy decision makes its coin in the step: no sign material made ahead")
    if material is not None and material.auth.ctx is not ctx:
        raise ValueError("the sign material under abort was made by another party context")
    x, pub, report = encode_batch(ctx, values, public)
    if material is None:
        auth, mask = AuthParty(ctx, rng, step), None
        auth.rounds = rounds_before
    else:  # the mask made ahead: bound to its step, batch size and precompute, taken once
        auth, mask = material.auth, material.take(step, x.shape[0], precompute)
    gen = _sign_gen(auth, x, pub, rng, report, precompute, lazy, mask)
    return Machine(ctx.party, gen, "decide[sign, abort]")


def _check_offered(precompute: str) -> None:
    """``ValueError`` for a sign precompute with no version under abort (hss.abort_modes.abort_refuses)."""
    why = abort_refuses(precompute)
    if why is not None:
        raise ValueError(why)


def _canonical(v: F.FieldArray) -> F.FieldArray:
    """Of the two roots v and -v, the one below 2^126 (bit 126 clear; p = 2^127 - 1, so exactly one is):
    pooled's broadcast roots take this form, so a holder cannot send -v to one party and v to another (the
    receiving party's bits of that chunk would be complemented, and its share of the masked term with them:
    a rushing holder could make that opening pass and read the chunk's mask from it)."""
    flip = ((v[..., 1] >> np.uint64(62)) & np.uint64(1)).astype(bool)
    return np.where(flip[..., None], F.neg(v), v)


def _is_canonical(v: F.FieldArray) -> bool:
    return not bool(((v[..., 1] >> np.uint64(62)) & np.uint64(1)).any())


def _term_bits(x: npt.NDArray[np.int64], nbits: int) -> F.FieldArray:
    """The bits of x + 2^(nbits-1), shape (nbits, n), as field elements."""
    return int_bits((x + (1 << (nbits - 1))).astype(np.uint64), nbits)


def _rows(a: Auth, sl: int | slice | npt.NDArray[np.intp]) -> Auth:
    return Auth(a.x[sl], a.mac[sl])


def _stack(parts: list[Auth]) -> Auth:
    return Auth(np.concatenate([q.x for q in parts]), np.concatenate([q.mac for q in parts]))


@dataclass
class _Mask:
    """One step's authenticated mask bits and what the carry tree needs of them, after the check before the
    masked term passed (this party's shares)."""

    s_auth: Auth  # (s, r s): the PRSS values whose signs are the bits
    pairs_ss: Auth  # (s_a s_b, its MAC): inline / pooled the pairs, blocks4 the block pairs
    r_top: Auth  # (r_hi, r r_hi): the mask's high part
    bits: Auth  # b_i = (1 + s_i v_i) / 2, K mask bits then the lazy coin's L bits
    v: F.FieldArray  # the public inverse roots 1 / sqrt(s_i^2)
    high: Auth | None  # blocks4: the triples and quadruples with their MACs (tracked)


@dataclass
class AbortSignMaterial:
    """One step's mask for ``sign`` under abort, made and checked before the step's terms exist
    (:func:`precompute_sign_abort`, the step's rounds 1 to 5): the party's :class:`AuthParty` of the step
    (its key r still secret, every pair so far tracked) and its mask bits. Taken by exactly one batch of its
    step (:meth:`take`): a mask used twice would open two masked terms under one r."""

    auth: AuthParty
    n: int
    precompute: str
    mask: _Mask
    used: bool = False

    def take(self, step: int, n: int, precompute: str) -> _Mask:
        """The mask for batch ``step`` of ``n`` decisions with ``precompute``, once; ``ValueError`` for a
        material of another step, size or precompute, or one already taken."""
        if self.used:
            raise ValueError(
                "this sign material under abort was taken by a batch already (a mask is used once)"
            )
        if (self.auth.step, self.n, self.precompute) != (step, n, precompute):
            raise ValueError(
                f"sign material under abort made for step {self.auth.step}, {self.n} decisions, precompute "
                f"{self.precompute!r}; the batch is step {step}, {n} decisions, {precompute!r}"
            )
        self.used = True
        return self.mask


def precompute_sign_abort(
    ctx: PartyContext, n: int, step: int, rng: SecureRandom, precompute: str = "inline"
) -> Machine[AbortSignMaterial]:
    """Step ``step``'s mask under abort for ``n`` decisions, made before its terms exist (the step's rounds
    1 to 5, :data:`hss.abort_modes.SIGN_MASK_ROUNDS`): the squares, their MACs and the pairs (blocks4: the
    monomials), u opened, the check before the masked term with r kept secret. ``sign_party_abort(...,
    material=...)`` then runs the online rounds: the terms dealt, c opened, the tree, verify, the output."""
    _check_offered(precompute)
    ctx.params.require_honest_majority("reveal mode 'sign' with security 'abort'")
    auth = AuthParty(ctx, rng, step)

    def gen() -> PartyGen[AbortSignMaterial]:
        mask, _ = yield from _mask_gen(auth, n, precompute, None, None, P_SIGN_PRE_AHEAD)
        return AbortSignMaterial(auth, n, precompute, mask)

    return Machine(ctx.party, gen(), "precompute_sign[abort]")


Index = npt.NDArray[np.intp]


def _layout(kbits: int, coin_bits: int, precompute: str) -> tuple[Any, Index, Index]:
    lay = layout(kbits) if precompute == "blocks4" else None
    if lay is not None:
        return lay, lay.pa, lay.pb
    npairs = kbits // 2  # the mask bits' pairs, then the coin's
    pa = np.r_[np.arange(0, 2 * npairs, 2), kbits + np.arange(0, 2 * (coin_bits // 2), 2)].astype(np.intp)
    return None, pa, pa + 1


def _mask_gen(
    auth: AuthParty,
    n: int,
    precompute: str,
    lazy: LazyCoin | None,
    own: F.FieldArray | None,
    check_purpose: int = P_SIGN_PRE,
) -> PartyGen[tuple[_Mask, F.FieldArray | None]]:
    """Rounds 1 to 5: the mask bits made, then checked with the key kept secret. ``own`` (this party's
    dealt term bits with their proof, inline schedule) rides in round 1, the proofs' seed in round 2 and the
    proofs at its point in round 3; returns the mask and the dealt values (m, 2B + 2, n), or None when
    ``own`` is None (the mask made ahead: the online rounds deal the terms)."""
    ctx, step = auth.ctx, auth.step
    params, fmt = ctx.params, ctx.params.fmt
    kbits, nb = fmt.compare_bits, term_bits(params)
    coin_bits = lazy.bits if lazy is not None else 0
    nrows = kbits + coin_bits
    key = auth.key
    lay, pa, pb = _layout(kbits, coin_bits, precompute)

    # --- round 1: (the terms dealt as bits with their proof;) the reshares of r s, s^2, the pairs, r r_hi ---
    s = ctx.prss.random(P_SIGN_S, step, (nrows, n))
    r_hi = ctx.prss.bounded(P_RHI, step, (n,), fmt.kappa + 1)
    shapes = {j: (2 * nb + 2, n) for j in ctx.all} if own is not None else None
    pre = auth.kept_key_check(check_purpose)  # the check before c
    grrs = [F.mul(key, s), F.mul(s, s), F.mul(s[pa], s[pb]), F.mul(key, r_hi), *pre.reshares(key)]
    what = "inputs and squares" if own is not None else "squares"
    dealt, (rs, u_sh, ss, r_hi_mac, r_beta, r_pad), _ = yield from auth.round(
        what, deal=own, deal_shapes=shapes, grrs=grrs
    )
    d_x = None
    if shapes is not None:
        d_x = np.stack([dealt.get(j, F.zeros(shapes[j])) for j in ctx.all])  # (m, 2B + 2, n), degree t

    # --- round 2: MACs of the squares and pair products (blocks4: triples, quadruples); u (and a seed) ---
    grrs = [F.mul(rs, s), F.mul(rs[pa], s[pb])]
    if lay is not None:  # triples s_c (s_a s_b) with MACs (r s_c)(s_a s_b); quadruples (s_a s_b)(s_c s_d)
        trip = F.mul(s[lay.t_one], ss[lay.t_pair])
        grrs += [trip, F.mul(rs[lay.t_one], ss[lay.t_pair]), F.mul(ss[lay.q_lo], ss[lay.q_hi])]
    opens = [u_sh] if d_x is None else [u_sh, ctx.prss.random(P_SIGN_COIN, step, (1,))]
    _, res, opened = yield from auth.round("MACs and opened squares", grrs=grrs, opens=opens)
    u = opened[0]
    s_auth, u_auth = Auth(s, rs), Auth(u_sh, res[0])
    pairs_ss, r_top = Auth(ss, res[1]), Auth(r_hi, r_hi_mac)
    auth.track([s_auth, u_auth, pairs_ss, r_top])
    armed = auth.arm(pre, r_beta, r_pad)  # tracks the pad (AuthParty.check_upto)
    upto = auth.checkpoint()  # the check before c covers these, all reshared before its seed is opened

    # --- round 3: the check's seed (and the bit proofs at a point) opened; pooled: the roots broadcast ---
    point = 0
    if d_x is not None:
        point = _proof_point(auth, opened[1], nb)
    grrs = [F.mul(res[1][lay.q_lo], ss[lay.q_hi])] if lay is not None else []  # (r s_a s_b)(s_c s_d)
    roots = None
    if precompute == "pooled":  # each party takes the roots of its chunk of u; every party checks them all
        chunks = dict(enumerate(root_chunks(nrows * n, params.m), start=1))
        lo, hi = chunks[ctx.party]
        mine = _canonical(auth.inverse_roots(u.reshape(-1, 2)[lo:hi]))
        sizes = {j: b - a for j, (a, b) in chunks.items()}
        roots = Extra({j: F.zeros((0,)) for j in ctx.all}, mine, sizes)
    else:
        v = auth.inverse_roots(u)  # abort on a u that is 0 or not a square
    opens = [pre.seed_share] if d_x is None else [pre.seed_share, proof_openings(d_x, point)]
    what = "check's coin" if d_x is None else "check's coin and bit proofs"
    _, res3, opened3 = yield from auth.round(what, grrs=grrs, opens=opens, extra=roots)
    if d_x is not None:
        _check_proofs(auth, opened3[1], point, nb)
    if roots is not None:
        assert roots.publics is not None
        v = np.concatenate([roots.publics[j] for j in ctx.all]).reshape(nrows, n, 2)
        if not np.all(F.equal(F.mul(F.mul(v, v), u), F.const(1))):
            raise AbortError(step, auth.rounds, "roots broadcast", "a broadcast root v has u v^2 != 1")
        if not _is_canonical(v):  # -v passes u v^2 = 1 too: sent to one party, it would flip its bits
            why = "a broadcast root is not the canonical one"
            raise AbortError(step, auth.rounds, "roots broadcast", why)

    # --- rounds 4, 5: the check before c, r kept secret: every mask bit is a bit, its MAC right ---
    yield from auth.check_upto(armed, opened3[0], upto, "check before the masked terms")
    bits = auth.bits_from_roots(s_auth, v)
    high = None
    if lay is not None:  # the triples and quadruples enter only the tree (verify checks them), never c
        high = Auth(np.concatenate([res[2], res[4]]), np.concatenate([res[3], res3[0]]))
        auth.track([high])
    return _Mask(s_auth, pairs_ss, r_top, bits, v, high), d_x


def _proof_point(auth: AuthParty, seed: F.FieldArray, nb: int) -> int:
    """The public point at which every dealer's bit proof is opened, from a seed opened after the dealing."""
    (point,) = F.to_ints(auth.coin(seed, 0, 1))
    if point <= 2 * nb + 1:  # probability (2B + 2) / p honestly
        why = "the proof's point is an interpolation point"
        raise AbortError(auth.step, auth.rounds, "term bit proofs", why)
    return point


def _check_proofs(auth: AuthParty, proofs: F.FieldArray, point: int, nb: int) -> None:
    if not proof_holds(proofs, point, nb).all():
        raise AbortError(auth.step, auth.rounds, "term bit proofs", "a party's dealt term is not all bits")


def _own_terms(x: npt.NDArray[np.int64], nb: int, rng: SecureRandom) -> F.FieldArray:
    """This party's term dealt as B bits with its proof that they are bits: (2B + 2, n)."""
    own_bits, f0 = _term_bits(x, nb), rng.field((x.shape[0],))
    return np.concatenate([f0[None], own_bits, bits_proof(own_bits, f0)])


def _sign_gen(
    auth: AuthParty,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    rng: SecureRandom,
    report: PartyReport,
    precompute: str,
    lazy: LazyCoin | None,
    made: _Mask | None,
) -> PartyGen[PartyReport]:
    ctx, step = auth.ctx, auth.step
    n, nb = x.shape[0], term_bits(ctx.params)
    if made is None:  # inline schedule: the terms ride in the mask's rounds (15 rounds)
        mask, d_x = yield from _mask_gen(auth, n, precompute, lazy, _own_terms(x, nb, rng))
        assert d_x is not None
        pending = None
    else:  # the mask made ahead (rounds 1 to 5): the terms dealt now, their proofs opened with the tree
        mask = made
        shapes = {j: (2 * nb + 2, n) for j in ctx.all}
        dealt, _, _ = yield from auth.round("terms dealt", deal=_own_terms(x, nb, rng), deal_shapes=shapes)
        d_x = np.stack([dealt[j] for j in ctx.all])
        pending = ctx.prss.random(P_SIGN_COIN, step, (1,))
    yield from _online_gen(auth, mask, d_x, pub, precompute, lazy, pending)
    return report


def _online_gen(
    auth: AuthParty,
    mask: _Mask,
    d_x: F.FieldArray,
    pub: npt.NDArray[np.int64],
    precompute: str,
    lazy: LazyCoin | None,
    proof_seed: F.FieldArray | None,
) -> PartyGen[None]:
    """From the masked term's opening to the output. ``proof_seed`` (the mask made ahead): the bit proofs'
    seed share, opened with c; the proofs are opened with the tree's first product and checked there, before
    anything leaves for the receiver (c masks any term; a term that is not bits only changes c)."""
    ctx, key = auth.ctx, auth.key
    params, fmt = ctx.params, ctx.params.fmt
    m, n, kbits = params.m, pub.shape[0], fmt.compare_bits
    nb, npairs = term_bits(params), kbits // 2
    coin_bits = lazy.bits if lazy is not None else 0
    nrows = kbits + coin_bits
    lay, pa, pb = _layout(kbits, coin_bits, precompute)
    bits, r_top, v = mask.bits, mask.r_top, mask.v

    # --- the masked terms opened with error detection (the mask made ahead: with the proofs' seed) ---
    pow_b = F.from_ints([1 << i for i in range(nb)])
    per_party = F.lincomb(pow_b, np.ascontiguousarray(np.moveaxis(d_x[:, 1 : 1 + nb], 1, 0)))  # (m, n)
    terms = F.lincomb(F.from_ints([1] * m), per_party)  # sum_j (x_j + 2^(B-1))
    c_mask = comparison_mask(bits.x[:kbits], r_top.x)
    offset = F.from_int64(pub - m * (1 << (nb - 1)) + (1 << kbits))
    c_x = F.add(F.add(terms, c_mask), offset)
    opens = [c_x] if proof_seed is None else [c_x, proof_seed]
    _, _, opened = yield from auth.round("masked terms opened", opens=opens)
    c = opened[0]
    proofs = None
    if proof_seed is not None:
        point = _proof_point(auth, opened[1], nb)
        proofs = proof_openings(d_x, point)
    c_hi, cb = split_compared(c, kbits)

    # --- the first carry level, local (its MACs by the same affine map with the key share for 1) ---
    if lay is not None:
        assert mask.high is not None
        roots_t = monomial_roots(v, kbits)
        sig = mul_public(_stack([mask.s_auth, mask.pairs_ss, mask.high]), roots_t)
        mono_x, mono_m = monomials(sig.x, n, kbits), monomials(sig.mac, n, kbits, one=key)
        g_x, p_x = block_nodes(cb, BlockMaterial(bits.x, mono_x, r_top.x), kbits)
        g_m, p_m = block_nodes(cb, BlockMaterial(bits.mac, mono_m, r_top.mac), kbits, one=key)
    else:
        # r_a r_b = (1 + sigma_a + sigma_b + sigma_a sigma_b) / 4 = (2 r_a + 2 r_b - 1 + sigma_a sigma_b) / 4
        sig_prod = mul_public(mask.pairs_ss, F.mul(v[pa], v[pb]))
        twice = mul_public(add(_rows(bits, pa), _rows(bits, pb)), 2)
        rr = mul_public(auth.add_public(add(twice, sig_prod), F.P - 1), _INV4)
        g_x, p_x = compare_nodes(cb, bits.x[:kbits], rr.x[:npairs], kbits)
        g_m, p_m = compare_nodes(cb, bits.mac[:kbits], rr.mac[:npairs], kbits, one=key)
    trees = [(Auth(g_x, g_m), Auth(p_x, p_m))]
    if lazy is not None:
        cu, cuu = _rows(bits, slice(kbits, nrows)), _rows(rr, slice(npairs, None))
        cx = coin_carry_tree(lazy, cu.x, cuu.x)
        cm = coin_carry_tree(lazy, cu.mac, cuu.mac, one=key)
        trees.append((Auth(cx.g, cm.g), Auth(cx.p, cm.p)))

    # --- the carry trees, one duplicated multiplication per level (the coin's tree in the same rounds) ---
    while any(g.shape[0] > 1 for g, _ in trees):
        pairs: list[tuple[Auth, Auth]] = []
        cuts: list[tuple[int, int]] = []
        for g, p in trees:
            half = g.shape[0] // 2
            if not half:
                cuts.append((0, 0))
                continue
            # hss.primitives.carry_products: P_hi G_lo for every pair, P_hi P_lo for all but the lowest
            pairs.append((_rows(p, slice(1, 2 * half, 2)), _rows(g, slice(0, 2 * half, 2))))
            if half > 1:
                pairs.append((_rows(p, slice(3, 2 * half, 2)), _rows(p, slice(2, 2 * half, 2))))
            cuts.append((half, 2 * half - 1))
        if proofs is None:
            prods_list = yield from auth.multiply(pairs)
        else:  # the mask made ahead: the bit proofs opened with the first product
            what = "tree product and term bit proofs"
            prods_list, (got,) = yield from auth.multiply_opening(pairs, [proofs], what)
            _check_proofs(auth, got, point, nb)
            proofs = None
        prods = _stack(prods_list)
        at, advanced = 0, []
        for (g, p), (half, size) in zip(trees, cuts, strict=True):
            if not half:
                advanced.append((g, p))
                continue
            part = _rows(prods, slice(at, at + size))
            at += size
            gx, px = carry_advance(g.x, p.x, part.x)
            gm, pm = carry_advance(g.mac, p.mac, part.mac)
            advanced.append((Auth(gx, gm), Auth(px, pm)))
        trees = advanced
    if proofs is not None:  # no product round (a tree of one node): the proofs in a round of their own
        _, _, (got,) = yield from auth.round("term bit proofs", opens=[proofs])
        _check_proofs(auth, got, point, nb)
    u_bit = _rows(trees[0][0], 0)

    # --- output: [S >= 0] = floor(c / 2^K) - r_hi - u (lazy: AND the coin), after the check ---
    bit = sub(auth.constant(c_hi), add(r_top, u_bit))
    if lazy is not None:
        (bit,) = yield from auth.multiply([(_rows(trees[1][0], 0), bit)])
    yield from auth.verify()
    yield from auth.open_to_receiver([bit])
    return None


def sign_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """The receiver's decoding of a ``sign`` batch under abort: the m raw shares of the bits on one degree-t
    polynomial and every value a bit, else :class:`AbortError` naming the step (the round: the last)."""
    params.require_honest_majority("reveal mode 'sign' with security 'abort'")
    (val,) = receive_checked(params, inbox, [(n,)], step, 0)
    one = F.equal(val, F.const(1))
    if not (one | F.equal(val, F.zeros((n,)))).all():
        raise AbortError(step, 0, "receiver: sign output", "a decision is not a bit")
    return Decisions(accept=np.asarray(one, dtype=bool), revealed=None)
