"""The sign protocol's "blocks4" precompute: a local first carry level over blocks of 4 bits (issue 16).

With c = S + 2^K + r public, each mask bit's generate/propagate pair is affine in the secret bit r_i:
g_i = (1 - c_i) r_i, p_i = (1 - c_i) + (2 c_i - 1) r_i. A block of w <= 4 bits therefore has

    G = g_{w-1} + p_{w-1} g_{w-2} + ... + p_{w-1} ... p_1 g_0,    P = p_{w-1} ... p_0,

multilinear polynomials in its w bits whose coefficients are public (products of -1, 0, 1 given c): linear
combinations of the secret monomials r_T, T a subset of the block. The coefficient of r_T in P is
prod_{i in T} (2 c_i - 1) prod_{i not in T} (1 - c_i); in G it is (1 - c_{min T}) times the same product
restricted to the bits above min T. With every monomial of every block precomputed (degree-t shares), the
first carry level over ceil(K/4) blocks costs no round.

Precompute (2 rounds, before the inputs; PRSS [s_i] for i < K as in the inline precompute):

- round A: the masked openings of s_i^2 (as inline), and GRR reshares of the 6 pair products s_a s_b of
  each block (inline reshares only 1 pair per 2 bits);
- round B: GRR reshares of the 4 triples s_a s_b s_c = (s_a s_b) s_c and the quadruple (s_0 s_1)(s_2 s_3)
  of each block, products of round A's degree-t pairs with degree-t singles or pairs.

Then sigma_i = s_i / sqrt(s_i^2) = 2 r_i - 1 and sigma_T = s_T prod_{i in T} v_i with the public inverse
roots v_i, and r_T = 2^-|T| sum_{U subset of T} sigma_U (a subset-sum transform per block). A block of w bits
needs 2^w - 1 - w monomials beyond its bits: 11 for w = 4. The last block is shorter when 4 does not divide
K (K = 41: 10 blocks of 4 and one of 1 bit; 11 first-level nodes, so the tree runs 11 -> 6 -> 3 -> 2 and
the last level is fused with the output: 1 + 3 + 1 = 5 online rounds, 2 + 5 = 7 in all).

Security: the same as the inline precompute (honest-but-curious, t < m/2): openings of s_i^2 are masked
contributions; each GRR reshare is a fresh degree-t sharing with coefficients from the dealer's
``SecureRandom``, so any t parties' rows are uniform and independent of everything else; the openings of
round A show s_i^2 only, which is independent of r_i. No field is opened that the inline protocol does not
open; only more GRR reshares are sent. The lazy coin is not offered with this precompute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.primitives import (
    P_BITS,
    P_RHI,
    P_Z_PRE,
    bits_from_roots,
    field_words,
    grr_combine,
    grr_deal,
    inverse_roots,
    masked_contribution,
    sum_contributions,
)
from hss.randomness import SecureRandom
from hss.runtime import PartyGen, expect, pack
from hss.session import PartyContext

BLOCK = 4


def blocks(kbits: int) -> list[tuple[int, int, int]]:
    """The blocks as groups (first bit, width w, number of blocks): the full blocks of 4, then the short
    last block of K mod 4 bits if any; blocks lowest first."""
    groups = [(0, BLOCK, kbits // BLOCK)] if kbits >= BLOCK else []
    if kbits % BLOCK:
        groups.append((BLOCK * (kbits // BLOCK), kbits % BLOCK, 1))
    return groups


def monomials_per_block(w: int) -> int:
    """Secret monomials of size >= 2 precomputed for a block of w bits."""
    return (1 << w) - 1 - w


@dataclass(frozen=True)
class BlockMaterial:
    """One batch's blocks4 material (this party's degree-t shares): ``bits`` [r_i], shape (K, n); ``monos``
    per group of :func:`blocks`, [r_T] for every nonempty subset T of the block (T as a bit mask, row
    T - 1), shape (2^w - 1, blocks, n, 2); ``r_top`` [r_hi], (n,). Consumed by exactly one batch."""

    bits: F.FieldArray
    monos: tuple[F.FieldArray, ...]
    r_top: F.FieldArray


def _subsets(w: int, size: int) -> list[tuple[int, ...]]:
    masks = [mask for mask in range(1 << w) if bin(mask).count("1") == size]
    return [tuple(i for i in range(w) if mask >> i & 1) for mask in masks]


def block_precompute(ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> PartyGen[BlockMaterial]:
    """The two precompute rounds of blocks4 (module docstring)."""
    fmt = ctx.params.fmt
    kbits = fmt.compare_bits
    groups = blocks(kbits)
    # global bit tuples of every block's monomials of size 2, 3, 4
    pairs: list[tuple[int, ...]] = []
    triples: list[tuple[int, ...]] = []
    quads: list[tuple[int, ...]] = []
    for start, w, nb in groups:
        for b in range(nb):
            base = start + b * w
            for size, out in ((2, pairs), (3, triples), (4, quads)):
                out.extend(tuple(base + i for i in sub) for sub in _subsets(w, size))
    pair_row = {pr: i for i, pr in enumerate(pairs)}

    s = ctx.prss.random(P_BITS, step, (kbits, n))
    sq_mine = masked_contribution(ctx, F.mul(s, s), P_Z_PRE, step)
    pa = np.array([p[0] for p in pairs], dtype=np.intp)
    pb = np.array([p[1] for p in pairs], dtype=np.intp)
    rows_a = grr_deal(ctx, F.mul(s[pa], s[pb]), rng)  # (m, pairs, n, 2)
    inbox = yield {j: pack(sq_mine, rows_a[j - 1]) for j in ctx.others}
    cut = field_words((kbits, n))
    msgs = expect(inbox, ctx.others, cut + field_words((len(pairs), n)), "sign/blocks4-A")
    sq = sum_contributions(ctx, sq_mine, {j: v[:cut] for j, v in msgs.items()})
    v = inverse_roots(sq)  # (K, n, 2), public
    s_pairs = grr_combine(ctx, rows_a[ctx.party - 1], {j: x[cut:] for j, x in msgs.items()})

    # round B: triples (a b) c and quadruples (a b)(c d), from round A's degree-t pairs
    t_pair = np.array([pair_row[tr[:2]] for tr in triples], dtype=np.intp)
    t_one = np.array([tr[2] for tr in triples], dtype=np.intp)
    q_lo = np.array([pair_row[q[:2]] for q in quads], dtype=np.intp)
    q_hi = np.array([pair_row[q[2:]] for q in quads], dtype=np.intp)
    prods = np.concatenate([F.mul(s_pairs[t_pair], s[t_one]), F.mul(s_pairs[q_lo], s_pairs[q_hi])])
    rows_b = grr_deal(ctx, prods, rng)
    inbox = yield {j: pack(rows_b[j - 1]) for j in ctx.others}
    msgs = expect(inbox, ctx.others, field_words(prods.shape[:-1]), "sign/blocks4-B")
    s_high = grr_combine(ctx, rows_b[ctx.party - 1], msgs)

    # sigma_T = s_T * prod_{i in T} v_i (degree t), for every monomial, in one table
    order = [(i,) for i in range(kbits)] + pairs + triples + quads
    row_of = {mono: i for i, mono in enumerate(order)}
    v_pairs = F.mul(v[pa], v[pb])
    v_all = np.concatenate(
        [v, v_pairs, F.mul(v_pairs[t_pair], v[t_one]), F.mul(v_pairs[q_lo], v_pairs[q_hi])]
    )
    sigma = F.mul(np.concatenate([s, s_pairs, s_high]), v_all)
    monos = []
    for start, w, nb in groups:
        # acc[T] = sum_{U subset of T} sigma_U (sigma_empty = 1), then r_T = acc[T] / 2^|T|
        acc = [np.broadcast_to(F.const(1), (nb, n, 2))]
        for mask in range(1, 1 << w):
            bits = [i for i in range(w) if mask >> i & 1]
            idx = [row_of[tuple(start + b * w + i for i in bits)] for b in range(nb)]
            acc.append(sigma[np.array(idx, dtype=np.intp)])
        for i in range(w):
            for mask in range(1 << w):
                if mask >> i & 1:
                    acc[mask] = F.add(acc[mask], acc[mask ^ (1 << i)])
        inv = [pow(1 << bin(mask).count("1"), F.P - 2, F.P) for mask in range(1 << w)]
        monos.append(np.stack([F.mul_scalar(acc[mask], inv[mask]) for mask in range(1, 1 << w)]))
    r_top = ctx.prss.bounded(P_RHI, step, (n,), fmt.kappa + 1)
    return BlockMaterial(bits=bits_from_roots(s, v), monos=tuple(monos), r_top=r_top)


def block_coefficients(cb: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Public coefficients of one group's (G, P) in the monomials r_T, from c's bits ``cb`` (w, ...) of the
    group (bit 0 lowest): arrays (2^w, ...) indexed by the mask T (T = 0 the constant term)."""
    w = cb.shape[0]
    c = cb.astype(np.int64)
    alpha, beta = 1 - c, 2 * c - 1  # p_i = alpha_i + beta_i r_i
    coef_g = np.zeros((1 << w, *cb.shape[1:]), dtype=np.int64)
    coef_p = np.zeros_like(coef_g)
    for mask in range(1 << w):
        prod = np.ones(cb.shape[1:], dtype=np.int64)
        for i in range(w):
            prod = prod * (beta[i] if mask >> i & 1 else alpha[i])
        coef_p[mask] = prod
        if mask:
            low = (mask & -mask).bit_length() - 1  # min T: the generating bit
            prod_g = 1 - c[low]
            for j in range(low + 1, w):
                prod_g = prod_g * (beta[j] if mask >> j & 1 else alpha[j])
            coef_g[mask] = prod_g
    return coef_g, coef_p


def _combine(coef: npt.NDArray[np.int64], monos: F.FieldArray) -> F.FieldArray:
    """sum_T coef[T] [r_T] + coef[0], coefficients in {-1, 0, 1}, without field multiplications."""
    zero = F.zeros(())
    out = _pick(coef[0], np.broadcast_to(F.const(1), monos.shape[1:]), zero)
    for mask in range(1, coef.shape[0]):
        out = F.add(out, _pick(coef[mask], monos[mask - 1], zero))
    return out


def _pick(coef: npt.NDArray[np.int64], x: F.FieldArray, zero: F.FieldArray) -> F.FieldArray:
    pos, neg = (coef == 1)[..., None], (coef == -1)[..., None]
    return np.where(pos, x, np.where(neg, F.neg(np.ascontiguousarray(x)), zero))


def block_nodes(
    cb: npt.NDArray[np.bool_], material: BlockMaterial, kbits: int
) -> tuple[F.FieldArray, F.FieldArray]:
    """The first carry level, local: one node (G, P) per block, lowest first, shape (ceil(K/4), n, 2)."""
    gs, ps = [], []
    for (start, w, nb), monos in zip(blocks(kbits), material.monos, strict=True):
        cbg = cb[start : start + w * nb].reshape(nb, w, -1).transpose(1, 0, 2)  # (w, nb, n)
        coef_g, coef_p = block_coefficients(cbg)
        gs.append(_combine(coef_g, monos))
        ps.append(_combine(coef_p, monos))
    return np.concatenate(gs), np.concatenate(ps)
