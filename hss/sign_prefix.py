"""The sign protocol's "prefix" precompute: the carry over blocks in one round (issue 39, item 1).

blocks4 (``hss.sign_blocks``) makes the first carry level local: with c public, each block of 4 mask bits
has its node (G_b, P_b) = ([r > c on the block], [r == c on the block]) as a public combination of
precomputed monomials. The tree over the NB = ceil(K/4) nodes (11 for K = 41) then costs
ceil(log2 NB) - 1 GRR rounds before the root is fused with the output. This module replaces the tree by
one round, using the closed form of the carry:

    u = [r mod 2^K > c mod 2^K] = sum_b G_b * Pi_b,    Pi_b = prod_{b' > b} P_b' = [h_b == 0],
    h_b = sum_{b' > b} (1 - P_b')  in [0, D_b],  D_b = NB - 1 - b,

(the terms are mutually exclusive: Pi_b G_b = 1 exactly for the highest block where r and c differ, when
r is the larger there). [h_b == 0] is a polynomial of degree D_b in a_b = 1 + h_b, which is never 0:
f_b(a) = prod_{k = 2..D_b + 1} (a - k) / (1 - k) is 1 at a = 1 and 0 at a = 2..D_b + 1. Its powers come from
one opening each in the manner of Bar-Ilan and Beaver's unbounded fan-in multiplication (Damgaard, Fitzi,
Kiltz, Nielsen, Toft, TCC 2006): with random nonzero R_0..R_D and the precomputed degree-t products
[R_{j-1} R_j^-1] and [R_0^-1 R_k], the opened m_j = R_{j-1} a R_j^-1 (j = 1..D) give
a^k = (m_1 ... m_k) [R_0^-1 R_k] at degree t, locally.

Precompute (2 rounds, input-independent, fused with blocks4's two):

- round A: blocks4's masked openings of s_i^2 and pair reshares; the masked openings of w = R S for PRSS
  R_{b,k}, S_{b,k} (k = 0..D_b for each block b below the top: 65 at K = 41), so that
  [R^-1] = w^-1 [S];
- round B: blocks4's triples and quadruples; GRR reshares of [R_{j-1}][R_j^-1] and [R_0^-1][R_k].

Online (3 rounds after the precompute made ahead; 4 in all in the step, against 7 for inline and blocks4):

1. the fused input and mask opening c = S + 2^K + r (as ``hss.protocols``);
2. the first level over blocks, local (``block_nodes``); a_b = 1 + h_b; the masked openings of
   m_{b,j} = [R_{b,j-1} R_{b,j}^-1][a_b] (degree 2t, j = 1..D);
3. a_b^k locally, Pi_b = f_b(a_b) (degree t), u = G_top + sum_{b < top} G_b Pi_b (degree 2t), and the
   output [S >= 0] = floor(c / 2^K) - r_hi - u sent to the receiver as a masked contribution (as the
   other precomputes fuse their root level).

So with the precompute made ahead (``precompute_ahead``) a decision is a coordinator round trip and 2
exchange rounds: 2 RTT on a WAN whose links all have one RTT (inline / blocks4 ahead: 3). In the step
(:func:`prefix_sign_inline`) c is opened with round B, whose reshares it does not need (c takes only round
A's mask bits and r_hi): 4 rounds in all, a floor of 2.5 RTT (inline and blocks4: 7 rounds, 4 RTT).

Security (honest-but-curious, t < m/2, as the other precomputes): every opening is a masked contribution
(a pairwise zero-sharing added), so a coalition of up to t parties sees the opened values and uniform GRR
rows. The opened values: s_i^2 (as inline), w = R S (uniform nonzero for uniform nonzero R, S), c (as
inline), and for each block b the m_{b,j} = R_{j-1} a_b R_j^-1, j = 1..D: for any fixed a_b != 0 and
independent uniform nonzero R_0..R_D they are independent and uniform on the nonzero elements (R_j^-1
enters m_j alone once R_0..R_{j-1} are fixed), so they say nothing about a_b, and the blocks use
independent R. a_b is 1 + h_b with 0 <= h_b <= D_b < p - 1: never 0, so no opening can be 0 honestly (a
0 is refused as a protocol error: it means a deviating party or probability about 1/p). The output is the
inline protocol's. Exactness: Pi_b, G_b and u are computed exactly in the field (P_b is exactly 0 or 1), so
the decisions are bit for bit those of the other precomputes. Costs: the BB material is
sum_b (D_b + 1) = 65 opened randoms, 110 products and 55 online openings per decision at K = 41, on top of
blocks4's 151 precompute elements per ordered pair of parties; meant for small batches on a WAN, where
rounds, not bytes or CPU, set the pace. Not offered with a lazy coin (refused by ``hss.protocols``) nor
under security "abort" (refused by ``hss.abort_modes.abort_refuses``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.primitives import (
    P_BITS,
    P_RHI,
    P_Z_OUT,
    bits_from_roots,
    exchange,
    field_words,
    flatten,
    grr_combine,
    grr_deal,
    inverse_roots,
    masked_contribution,
    masked_input,
    split_compared,
    sum_contributions,
    unflatten,
)
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, PartyGen, ProtocolError, expect, pack
from hss.session import PartyContext
from hss.sign_blocks import BlockMaterial, block_nodes, blocks, layout, monomial_roots, monomials

__all__ = [
    "PrefixMaterial",
    "prefix_block_count",
    "prefix_precompute",
    "prefix_sign_inline",
    "prefix_sign_online",
]

#: PRSS purposes of this module (hss.primitives 1..8, hss.svt 101..106, hss.authenticated 201-202,
#: hss.abort_* 301-405, 1000 + k): the BB randomness R and S, and the zero-sharings of the openings of
#: w = R S, of the m_{b,k} and of the squares s_i^2. Each opened array has a zero-sharing of its own: a step
#: whose pool was made for another batch size and discarded (parties.ahead) runs round A again with the same
#: step's PRSS values, and every opened position must then carry the same value and the same mask in both
#: runs (with s^2 and w under one zero-sharing, their flat positions shift with n, and the difference of
#: two contributions under the same mask gave away an honest share of s^2: found by an independent review)
P_PREFIX_R, P_PREFIX_S, P_Z_PREFIX_W, P_Z_PREFIX_M, P_Z_PREFIX_SQ = 501, 502, 503, 504, 505


def prefix_block_count(kbits: int) -> int:
    """NB: the first-level nodes over blocks of 4 bits (``hss.sign_blocks.blocks``)."""
    return sum(nb for _start, _w, nb in blocks(kbits))


@dataclass(frozen=True)
class _Pairs:
    """Where the BB values of every (block b, power k), k = 1..D_b, D_b = NB - 1 - b, sit. The randoms R
    are laid out as R_{b,0} for b = 0..NB - 2, then for k = 1..D the R_{b,k} with b = 0..NB - 1 - k
    (k-major, so the blocks of power k are one contiguous run, ``start[k - 1]`` to ``start[k]``); ``prev``
    and ``cur`` index R_{b,k-1} and R_{b,k} for each pair (b, k) in the same k-major order, ``block`` its
    b."""

    randoms: int
    start: tuple[int, ...]
    prev: npt.NDArray[np.intp]
    cur: npt.NDArray[np.intp]
    block: npt.NDArray[np.intp]


@functools.lru_cache(maxsize=8)
def _pairs(nb: int) -> _Pairs:
    at = {(b, 0): b for b in range(nb - 1)}
    for k in range(1, nb):
        for b in range(nb - k):
            at[(b, k)] = len(at)
    order = [(b, k) for k in range(1, nb) for b in range(nb - k)]
    start = [0]
    for k in range(1, nb):
        start.append(start[-1] + nb - k)

    def ix(vals: list[int]) -> npt.NDArray[np.intp]:
        return np.array(vals, dtype=np.intp)

    return _Pairs(
        randoms=len(at),
        start=tuple(start),
        prev=ix([at[(b, k - 1)] for b, k in order]),
        cur=ix([at[(b, k)] for b, k in order]),
        block=ix([b for b, _ in order]),
    )


@dataclass(frozen=True)
class PrefixMaterial:
    """Input-independent material of one batch for the "prefix" precompute (this party's degree-t shares):
    blocks4's ``blocks`` and, for each block b below the top and k = 1..D_b (D_b = NB - 1 - b, k-major:
    ``_pairs``), ``steps`` = [R_{b,k-1} R_{b,k}^-1] and ``unmask`` = [R_{b,0}^-1 R_{b,k}], each of shape
    (sum_b D_b, n): 55 pairs at K = 41. Used by one batch only: reusing it would open two sets of m_{b,k}
    under the same R."""

    blocks: BlockMaterial
    steps: F.FieldArray
    unmask: F.FieldArray

    @property
    def n(self) -> int:
        return self.blocks.n

    @property
    def bits(self) -> F.FieldArray:
        return self.blocks.bits


@functools.lru_cache(maxsize=8)
def _indicator_coefficients(nb: int) -> F.FieldArray:
    """For each block b < nb - 1, the coefficients (degree 0..D, D = nb - 1, zero above D_b = nb - 1 - b)
    of f_b(a) = prod_{k = 2..D_b + 1} (a - k) / (1 - k): 1 at a = 1, 0 at a = 2..D_b + 1.
    Shape (nb - 1, D + 1, 2)."""
    p, d = F.P, nb - 1
    rows = []
    for b in range(nb - 1):
        poly = [1]  # coefficients, lowest degree first
        denom = 1
        for k in range(2, nb - b + 1):  # D_b = nb - 1 - b roots: 2 .. D_b + 1
            poly = [
                ((poly[i - 1] if i > 0 else 0) - k * (poly[i] if i < len(poly) else 0)) % p
                for i in range(len(poly) + 1)
            ]
            denom = denom * (1 - k) % p
        inv = pow(denom, p - 2, p)
        rows.append([c * inv % p for c in poly] + [0] * (d + 1 - len(poly)))
    return F.from_ints([c for row in rows for c in row]).reshape(nb - 1, d + 1, 2)


@dataclass(frozen=True)
class _RoundA:
    """This party's state after precompute round A: the PRSS s and their public inverse roots v, the pairs
    s_a s_b (degree t), R and [R^-1] (degree t), the mask bits and r_hi."""

    s: F.FieldArray
    v: F.FieldArray
    s_pairs: F.FieldArray
    big_r: F.FieldArray
    r_inv: F.FieldArray
    bits: F.FieldArray
    r_top: F.FieldArray


def _round_a(ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> PartyGen[_RoundA]:
    """Round A: s_i^2 and w = R S opened (masked contributions), blocks4's pairs reshared."""
    fmt = ctx.params.fmt
    kbits = fmt.compare_bits
    lay = layout(kbits)
    shape = (_pairs(prefix_block_count(kbits)).randoms, n)  # R_{b,k}, k = 0..D_b, for each block b < NB - 1
    s = ctx.prss.random(P_BITS, step, (kbits, n))
    big_r = ctx.prss.random(P_PREFIX_R, step, shape)
    big_s = ctx.prss.random(P_PREFIX_S, step, shape)
    sq_mine = masked_contribution(ctx, F.mul(s, s), P_Z_PREFIX_SQ, step)
    w_mine = masked_contribution(ctx, F.mul(big_r, big_s), P_Z_PREFIX_W, step)
    rows = grr_deal(ctx, F.mul(s[lay.pa], s[lay.pb]), rng)
    inbox = yield {j: pack(sq_mine, w_mine, rows[j - 1]) for j in ctx.others}
    cut, cut_w = field_words(sq_mine.shape[:-1]), field_words(w_mine.shape[:-1])
    got = expect(inbox, ctx.others, cut + cut_w + field_words(rows.shape[1:-1]), "sign/prefix-A")
    sq = sum_contributions(ctx, sq_mine, {j: v[:cut] for j, v in got.items()})
    w = sum_contributions(ctx, w_mine, {j: v[cut : cut + cut_w] for j, v in got.items()})
    s_pairs = grr_combine(ctx, rows[ctx.party - 1], {j: v[cut + cut_w :] for j, v in got.items()})
    v = inverse_roots(sq)  # (K, n, 2), public; refuses a square that is 0 or not a square
    if np.any(F.equal(w, F.zeros(w.shape[:-1]))):
        raise ProtocolError("sign/prefix-A: an opened R S is 0 (probability about 2/p honestly)")
    r_inv = F.mul(F.inv(w), big_s)  # [R^-1] = w^-1 [S], degree t
    r_top = ctx.prss.bounded(P_RHI, step, (n,), fmt.kappa + 1)
    return _RoundA(s, v, s_pairs, big_r, r_inv, bits_from_roots(s, v), r_top)


def _round_b_products(a: _RoundA, kbits: int) -> list[F.FieldArray]:
    """Round B's degree-2t products: blocks4's triples and quadruples, [R_{b,k-1}][R_{b,k}^-1] and
    [R_{b,0}^-1][R_{b,k}] for every pair (b, k) (``_pairs``)."""
    lay = layout(kbits)
    pr = _pairs(prefix_block_count(kbits))
    highs = [F.mul(a.s_pairs[lay.t_pair], a.s[lay.t_one]), F.mul(a.s_pairs[lay.q_lo], a.s_pairs[lay.q_hi])]
    steps_2t = F.mul(a.big_r[pr.prev], a.r_inv[pr.cur])
    return [*highs, steps_2t, F.mul(a.r_inv[pr.block], a.big_r[pr.cur])]


def _material(a: _RoundA, reshared: list[F.FieldArray], n: int, kbits: int) -> PrefixMaterial:
    trip, quad, steps, unmask = reshared
    sigma = F.mul(np.concatenate([a.s, a.s_pairs, trip, quad]), monomial_roots(a.v, kbits))
    made = BlockMaterial(bits=a.bits, monos=monomials(sigma, n, kbits), r_top=a.r_top)
    return PrefixMaterial(made, steps, unmask)


def prefix_precompute(ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> PartyGen[PrefixMaterial]:
    """The two precompute rounds (module docstring): blocks4's, the BB randomness in the same messages."""
    kbits = ctx.params.fmt.compare_bits
    a = yield from _round_a(ctx, n, step, rng)
    _, _, reshared = yield from exchange(ctx, rng, step, "sign/prefix-B", grrs=_round_b_products(a, kbits))
    return _material(a, reshared, n, kbits)


def prefix_sign_inline(
    ctx: PartyContext,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
) -> PartyGen[None]:
    """The batch with its precompute in the step, 4 rounds: round A; round B's reshares with the fused input
    and mask opening (c needs only round A's mask bits and r_hi); the openings of R a R^-1; the output."""
    n, kbits = x.shape[0], ctx.params.fmt.compare_bits
    a = yield from _round_a(ctx, n, step, rng)
    prods = _round_b_products(a, kbits)
    flat, shapes = flatten(prods)
    rows = grr_deal(ctx, flat, rng)
    contrib = masked_input(ctx, x, a.bits, a.r_top, step)
    inbox = yield {j: pack(contrib, rows[j - 1]) for j in ctx.others}
    got = expect(inbox, ctx.others, 2 * n + field_words((flat.shape[0],)), "sign/prefix-B-open")
    c = sum_contributions(ctx, contrib, {j: v[: 2 * n] for j, v in got.items()})
    reshared = grr_combine(ctx, rows[ctx.party - 1], {j: v[2 * n :] for j, v in got.items()})
    material = _material(a, unflatten(reshared, shapes), n, kbits)
    yield from _decide(ctx, rng, c, pub, step, material)
    return None


def prefix_sign_online(
    ctx: PartyContext,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
    material: PrefixMaterial,
) -> PartyGen[None]:
    """The 3 online rounds (module docstring) of a batch with encoded terms ``x`` and public part ``pub``,
    its material made ahead."""
    n = x.shape[0]
    made = material.blocks
    # --- online round 1: fused input and mask opening: c = S + 2^K + r ---
    contrib = masked_input(ctx, x, made.bits, made.r_top, step)
    inbox = yield {j: pack(contrib) for j in ctx.others}
    c = sum_contributions(ctx, contrib, expect(inbox, ctx.others, 2 * n, "sign/prefix-open"))
    yield from _decide(ctx, rng, c, pub, step, material)
    return None


def _decide(
    ctx: PartyContext,
    rng: SecureRandom,
    c_sum: F.FieldArray,
    pub: npt.NDArray[np.int64],
    step: int,
    material: PrefixMaterial,
) -> PartyGen[None]:
    """From the opened sum of contributions to the output: the openings of R a R^-1, then the bit."""
    kbits = ctx.params.fmt.compare_bits
    n = pub.shape[0]
    nb = prefix_block_count(kbits)
    made = material.blocks
    c_hi, cb = split_compared(F.add(F.add(c_sum, F.from_int64(pub)), F.const(1 << kbits)), kbits)

    # --- the first level over blocks (local), a_b = 1 + #{b' > b: P_b' = 0}; one round opens R a_b R^-1 ---
    big_g, big_p = block_nodes(cb, made, kbits)  # (nb, n, 2) each, lowest block first
    not_eq = F.sub(F.const(1), big_p)  # 1 - P_b
    suffix = [F.zeros((n,))]
    for b in range(nb - 1, 0, -1):  # h_{b-1} = h_b + (1 - P_b)
        suffix.append(F.add(suffix[-1], not_eq[b]))
    h = np.stack(suffix[1:][::-1])  # (nb - 1, n, 2): h_b for b = 0..nb - 2
    a = F.add(h, F.const(1))
    pr = _pairs(nb)
    (opened,), _, _ = yield from exchange(
        ctx, rng, step, "sign/prefix-M", opens=[F.mul(material.steps, a[pr.block])], purpose=P_Z_PREFIX_M
    )
    if np.any(F.equal(opened, F.zeros(opened.shape[:-1]))):
        raise ProtocolError("sign/prefix-M: an opened R a R^-1 is 0 (a deviation: a_b is never 0)")

    # --- a_b^k = (m_1 ... m_k)[R_0^-1 R_k], Pi_b = f_b(a_b), u = G_top + sum_b G_b Pi_b (degree 2t) ---
    coef = _indicator_coefficients(nb)  # (nb - 1, nb, 2): degree 0..D
    pi = np.broadcast_to(coef[:, 0][:, None], (nb - 1, n, 2)).copy()
    prod = np.broadcast_to(F.const(1), (nb - 1, n, 2)).copy()
    for k in range(1, nb):  # the blocks b = 0..NB - 1 - k have a k-th power
        run, top = slice(pr.start[k - 1], pr.start[k]), nb - k
        prod[:top] = F.mul(prod[:top], opened[run])  # m_{b,1} ... m_{b,k}, public
        power = F.mul(prod[:top], material.unmask[run])  # a_b^k, degree t
        pi[:top] = F.add(pi[:top], F.mul(coef[:top, k][:, None], power))
    u = F.add(big_g[nb - 1], F.lincomb(F.from_ints([1] * (nb - 1)), F.mul(big_g[: nb - 1], pi)))

    # --- output: [S >= 0] = floor(c / 2^K) - r_hi - u, a degree-2t masked contribution to the receiver ---
    bit = F.sub(F.sub(c_hi, made.r_top), u)
    yield {RECEIVER: pack(masked_contribution(ctx, bit, P_Z_OUT, step))}
    return None
