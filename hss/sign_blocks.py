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

import functools
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

    @property
    def n(self) -> int:
        return int(self.bits.shape[1])


def _subsets(w: int, size: int) -> list[tuple[int, ...]]:
    masks = [mask for mask in range(1 << w) if bin(mask).count("1") == size]
    return [tuple(i for i in range(w) if mask >> i & 1) for mask in masks]


@dataclass(frozen=True)
class _Layout:
    """Index arrays of one K (public, computed once): the products of rounds A and B, where each block's
    monomials sit in the table of sigma_T, and the public subset-sum matrices sigma -> r."""

    pa: npt.NDArray[np.intp]  # round A: pairs s_pa s_pb
    pb: npt.NDArray[np.intp]
    t_pair: npt.NDArray[np.intp]  # round B: triples (pair t_pair) * s_t_one
    t_one: npt.NDArray[np.intp]
    q_lo: npt.NDArray[np.intp]  # round B: quadruples (pair q_lo) * (pair q_hi)
    q_hi: npt.NDArray[np.intp]
    gather: tuple[npt.NDArray[np.intp], ...]  # per group: (2^w - 1, blocks) rows of sigma_T, T = 1..2^w - 1
    to_r: tuple[F.FieldArray, ...]  # per group: (2^w - 1, 2^w) matrix, r_T = sum_U M[T-1, U] sigma_U


@functools.lru_cache(maxsize=8)
def layout(kbits: int) -> _Layout:
    groups = blocks(kbits)
    pairs: list[tuple[int, ...]] = []
    triples: list[tuple[int, ...]] = []
    quads: list[tuple[int, ...]] = []
    for start, w, nb in groups:
        for b in range(nb):
            base = start + b * w
            for size, out in ((2, pairs), (3, triples), (4, quads)):
                out.extend(tuple(base + i for i in sub) for sub in _subsets(w, size))
    pair_row = {pr: i for i, pr in enumerate(pairs)}
    row_of = {mono: i for i, mono in enumerate([(i,) for i in range(kbits)] + pairs + triples + quads)}
    gather, to_r = [], []
    for start, w, nb in groups:
        idx = [
            [row_of[tuple(start + b * w + i for i in range(w) if mask >> i & 1)] for b in range(nb)]
            for mask in range(1, 1 << w)
        ]
        gather.append(np.array(idx, dtype=np.intp))
        # r_T = prod_{i in T} (1 + sigma_i) / 2 = 2^-|T| sum_{U subset of T} sigma_U, sigma_empty = 1
        to_r.append(
            F.from_ints(
                pow(1 << bin(t).count("1"), F.P - 2, F.P) if u & ~t == 0 else 0
                for t in range(1, 1 << w)
                for u in range(1 << w)
            ).reshape((1 << w) - 1, 1 << w, 2)
        )

    def ix(vals: list[int]) -> npt.NDArray[np.intp]:
        return np.array(vals, dtype=np.intp)

    return _Layout(
        pa=ix([p[0] for p in pairs]),
        pb=ix([p[1] for p in pairs]),
        t_pair=ix([pair_row[tr[:2]] for tr in triples]),
        t_one=ix([tr[2] for tr in triples]),
        q_lo=ix([pair_row[q[:2]] for q in quads]),
        q_hi=ix([pair_row[q[2:]] for q in quads]),
        gather=tuple(gather),
        to_r=tuple(to_r),
    )


def block_precompute(ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> PartyGen[BlockMaterial]:
    """The two precompute rounds of blocks4 (module docstring)."""
    fmt = ctx.params.fmt
    kbits = fmt.compare_bits
    lay = layout(kbits)
    npairs = lay.pa.size

    # round A: the masked openings of s_i^2 and GRR reshares of every block's pairs s_a s_b
    s = ctx.prss.random(P_BITS, step, (kbits, n))
    sq_mine = masked_contribution(ctx, F.mul(s, s), P_Z_PRE, step)
    rows_a = grr_deal(ctx, F.mul(s[lay.pa], s[lay.pb]), rng)  # (m, pairs, n, 2)
    inbox = yield {j: pack(sq_mine, rows_a[j - 1]) for j in ctx.others}
    cut = field_words((kbits, n))
    msgs = expect(inbox, ctx.others, cut + field_words((npairs, n)), "sign/blocks4-A")
    sq = sum_contributions(ctx, sq_mine, {j: v[:cut] for j, v in msgs.items()})
    v = inverse_roots(sq)  # (K, n, 2), public
    s_pairs = grr_combine(ctx, rows_a[ctx.party - 1], {j: x[cut:] for j, x in msgs.items()})

    # round B: triples (s_a s_b) s_c and quadruples (s_a s_b)(s_c s_d), from round A's degree-t pairs
    prods = np.concatenate(
        [F.mul(s_pairs[lay.t_pair], s[lay.t_one]), F.mul(s_pairs[lay.q_lo], s_pairs[lay.q_hi])]
    )
    rows_b = grr_deal(ctx, prods, rng)
    inbox = yield {j: pack(rows_b[j - 1]) for j in ctx.others}
    msgs = expect(inbox, ctx.others, field_words(prods.shape[:-1]), "sign/blocks4-B")
    s_high = grr_combine(ctx, rows_b[ctx.party - 1], msgs)

    # sigma_T = s_T * prod_{i in T} v_i (degree t) for every monomial, then r_T by the public subset sums
    sigma = F.mul(np.concatenate([s, s_pairs, s_high]), monomial_roots(v, kbits))
    r_top = ctx.prss.bounded(P_RHI, step, (n,), fmt.kappa + 1)
    return BlockMaterial(bits=bits_from_roots(s, v), monos=monomials(sigma, n, kbits), r_top=r_top)


def monomial_roots(v: F.FieldArray, kbits: int) -> F.FieldArray:
    """prod_{i in T} v_i for every monomial T of the layout (bits, pairs, triples, quadruples), public."""
    lay = layout(kbits)
    v_pairs = F.mul(v[lay.pa], v[lay.pb])
    return np.concatenate(
        [v, v_pairs, F.mul(v_pairs[lay.t_pair], v[lay.t_one]), F.mul(v_pairs[lay.q_lo], v_pairs[lay.q_hi])]
    )


def monomials(
    sigma: F.FieldArray, n: int, kbits: int, one: F.FieldArray | None = None
) -> tuple[F.FieldArray, ...]:
    """Each group's [r_T] from [sigma_T] (every monomial, in the layout's order) by the public subset sums.
    Affine: ``one`` is what the constant sigma_empty = 1 contributes (the MAC key's share for MACs)."""
    lay = layout(kbits)
    one = F.const(1) if one is None else one
    monos = []
    for gather, to_r in zip(lay.gather, lay.to_r, strict=True):
        ones = np.broadcast_to(one, (1, *gather.shape[1:], n, 2))
        monos.append(F.matmul(to_r, np.concatenate([ones, sigma[gather]])))
    return tuple(monos)


@functools.lru_cache(maxsize=4)
def _categories(w: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """For each mask T and bit i, which factor of the coefficient of r_T bit i contributes, as an index into
    (1, 1 - c_i, 2 c_i - 1, 1 - c_i, 0): P takes beta_i = 2 c_i - 1 for i in T and alpha_i = 1 - c_i
    otherwise; G takes 1 below min T, 1 - c_i at min T, beta above it in T, alpha above it not in T, and
    is 0 for T empty."""
    cat_p = np.array([[2 if t >> i & 1 else 3 for i in range(w)] for t in range(1 << w)], dtype=np.intp)
    cat_g = np.zeros_like(cat_p)
    cat_g[0, 0] = 4
    for t in range(1, 1 << w):
        low = (t & -t).bit_length() - 1
        cat_g[t, low] = 1
        cat_g[t, low + 1 :] = cat_p[t, low + 1 :]
    return cat_p, cat_g


def block_coefficients(cb: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Public coefficients of one group's (G, P) in the monomials r_T, from c's bits ``cb`` (w, ...) of the
    group (bit 0 lowest): arrays (2^w, ...) indexed by the mask T (T = 0 the constant term), in {-1, 0, 1}."""
    w = cb.shape[0]
    c = cb.astype(np.int64)
    opts = np.stack([np.ones_like(c), 1 - c, 2 * c - 1, 1 - c, np.zeros_like(c)])  # (5, w, ...)
    cat_p, cat_g = _categories(w)
    wi = np.arange(w)
    return np.prod(opts[cat_g, wi], axis=1), np.prod(opts[cat_p, wi], axis=1)


def block_nodes(
    cb: npt.NDArray[np.bool_], material: BlockMaterial, kbits: int, one: F.FieldArray | None = None
) -> tuple[F.FieldArray, F.FieldArray]:
    """The first carry level, local: one node (G, P) per block, lowest first, shape (ceil(K/4), n, 2).
    Affine in the monomials: ``one`` is what the constant 1 contributes (the MAC key's share for MACs)."""
    gs, ps = [], []
    for (start, w, nb), monos in zip(blocks(kbits), material.monos, strict=True):
        cbg = cb[start : start + w * nb].reshape(nb, w, -1).transpose(1, 0, 2)  # (w, nb, n)
        coef_g, coef_p = block_coefficients(cbg)
        coefs = F.from_int64(np.stack([coef_g[1:], coef_p[1:]], axis=1))  # (2^w - 1, 2, nb, n, 2)
        terms = F.mul(coefs, np.broadcast_to(monos[:, None], coefs.shape))
        gp = F.lincomb(F.from_ints([1] * terms.shape[0]), terms)  # sum over T: (2, nb, n, 2)
        gs.append(gp[0])  # G has no constant term
        const = F.from_int64(coef_p[0])
        ps.append(F.add(gp[1], const if one is None else F.mul(const, one)))
    return np.concatenate(gs), np.concatenate(ps)
