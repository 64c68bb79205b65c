"""The confidential decision protocols, as round-based machines over a whole batch.

Each party j holds a private term x_j (its log-ratio term plus its own noise share); the public term
``pub`` is known to all. The parties decide S = pub + sum_j x_j >= 0 for every entry of the batch, and the
designated receiver (the coordinator) learns only what the reveal mode allows:

======== ==================================== ========================== =================================
mode     receiver learns                      rounds (precompute+online) tolerates
======== ==================================== ========================== =================================
sum      S                                    0 + 1                      parties learn nothing; any m >= 2
blinded  (S + 2^-(f+1)) * W' + E 2^-(f+1+f_w)  0 + 2                      t < m/2 colluding parties
sign     only the bit [S >= 0]                1 + (1 + L)                t < m/2 colluding parties
======== ==================================== ========================== =================================

with L = ceil(log2 ceil((k-1)/2)) carry-tree levels; for the default format (k = 42) L = 5, so sign
takes 7 sequential rounds, 6 of them after the inputs exist. All parties are honest-but-curious; the
receiver does not collude with parties. Every opening is *additively masked*: party i sends
lambda_i * share_i + z_i with z a pairwise zero-sharing, so each message is uniform given the opened sum
(opening raw shares of a product polynomial would leak its factors).

sign: Catrina & de Hoogh's LTZ with the input fused into the mask opening.
  precompute (1 round): PRSS gives [s_i] for i < K = k-1; the parties open s_i^2 (masked) and
    GRR-reshare [s_{2a} s_{2a+1}] (Gennaro, Rabin, Rabin 1998); then r_i = (1 + s_i / sqrt(s_i^2)) / 2
    is a uniform secret bit and [r_{2a} r_{2a+1}] its pair product, with sqrt(x) = x^(2^125).
  online round 1: party j sends x_j + lambda_j [r]_j + z_j to all, where r = 2^K r_hi + sum_i 2^i r_i
    and r_hi is a PRSS integer of kappa + 1 bits per key; everyone gets c = S + 2^K + r (no wrap mod p,
    statistically hiding S with distance 2^-kappa).
  carry tree: u = [c mod 2^K < r mod 2^K] by generate/propagate pairs; the first level (bit pairs) is
    local thanks to the precomputed pair products; each further level is one GRR round; the root level is
    fused with the output.
  output: [S >= 0] = floor(c / 2^K) - r_hi - u, a degree-2t sharing, sent masked to the receiver.
  sign_precompute "blocks4" (hss.sign_blocks, issue 16): 2 precompute rounds make [r_T] for every subset T
    of each block of 4 mask bits (GRR of 6 pairs with the s_i^2 openings, then of 4 triples and 1
    quadruple per block); with c public a block's (G, P) is a public linear combination of them, so the
    first carry level over ceil(K/4) blocks is local: 11 -> 6 -> 3 -> 2 -> fused output, 1 + 3 + 1 = 5
    online rounds (2 + 5 = 7 in all) instead of 6. Cost (K = 41): 110 GRR products per decision instead of
    20, 151 field elements per ordered pair of parties in the precompute instead of 61 (2.5x; 1.7x all
    rounds included, the online rounds being lighter). :func:`precompute_blocks` runs the 2 rounds ahead of
    the inputs. No lazy coin with it; ``pooled`` stays pair-only.

blinded: each party Shamir-shares (x_j, W_j, e_j) (round 1); the parties compute
  Z = (2S + 1)(W + w0) + E, E = sum_j e_j < 2^e_bits <= w0 (all in integer units) and send it masked to
  the receiver (round 2). Z >= 0 exactly when S >= 0; 2S + 1 is never zero, so S = 0 does not open as 0;
  E, uniform on a range 2^16 times wider than |2S+1|, makes Z mod d close to uniform for every candidate
  divisor d, so the divisors of Z do not pin S down. W's lower bound w0 = 2^(e_bits - f_w) (default 2^-11)
  must be part of any privacy analysis of this mode.

sum: party j sends x_j (+ pub for party 1) + z_j to the receiver.

m = 2 supports only ``sum``: Shamir protocols need 2t < m with t >= 1.

Each mode has its own party machine factory, taking only what the mode needs (:func:`sum_party`,
:func:`blinded_party` with the blinding share, :func:`sign_party` with the precompute and the lazy coin), and
its own receiver decoder (:func:`sum_receiver`, :func:`blinded_receiver`, :func:`sign_receiver`). Nothing here
dispatches on a mode's name: the reveal-mode table ``hss.modes.REVEAL`` registers them, and callers that hold
a mode's name look it up there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.fixedpoint import FixedPoint
from hss.lazy_coin import LazyCoin, coin_advance, coin_carry_tree, coin_rows
from hss.primitives import (
    P_BITS,
    P_COIN,
    P_RHI,
    P_Z_OUT,
    P_Z_PRE,
    P_Z_PRE_AHEAD,
    CarryTree,
    bits_from_roots,
    carry_advance,
    carry_products,
    field_words,
    grr_combine,
    grr_deal,
    inverse_roots,
    masked_contribution,
    masked_input,
    receive_opened,
    split_compared,
    sum_contributions,
)
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Inbox, Machine, PartyGen, ProtocolError, expect, pack
from hss.session import PartyContext, SessionParams, check_precompute
from hss.sharing import split
from hss.sign_blocks import BlockMaterial, block_nodes, block_precompute
from hss.sign_prefix import (
    PrefixMaterial,
    prefix_block_count,
    prefix_precompute,
    prefix_sign_inline,
    prefix_sign_online,
)

#: The decision protocols' public names. The session setup (hss.session), the lazy coin (hss.lazy_coin) and
#: the one-round protocols (hss.primitives) are imported from their own modules: one import path per object.
__all__ = [
    "Decisions",
    "PartyReport",
    "SignMaterial",
    "blinded_party",
    "blinded_receiver",
    "plaintext_decisions",
    "precompute_blocks",
    "precompute_prefix",
    "precompute_sign",
    "sign_party",
    "sign_receiver",
    "sum_party",
    "sum_receiver",
]

_INV4 = pow(4, F.P - 2, F.P)


def _select(cond: npt.NDArray[np.bool_], a: F.FieldArray, b: F.FieldArray) -> F.FieldArray:
    a2, b2 = np.broadcast_arrays(a, b)
    return np.where(cond[..., None], a2, b2)


# ---------------------------------------------------------------------------------------------------------
# the decision protocols


@dataclass(frozen=True)
class PartyReport:
    """What a party learns from its own side of a decision batch: which of its terms were clamped."""

    clamped: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Decisions:
    """The receiver's output: accept bits and, for sum/blinded, the revealed value per decision."""

    accept: npt.NDArray[np.bool_]
    revealed: npt.NDArray[np.float64] | None


def sum_party(
    ctx: PartyContext, values: npt.ArrayLike, public: npt.ArrayLike | None, step: int
) -> Machine[PartyReport]:
    """This party's machine for a batch in reveal mode ``sum``: the receiver learns S = public + sum_j x_j.

    ``values`` are this party's terms (its noise share already added), ``public`` the public terms (the same
    array at every party, or None for zero), ``step`` a per-session unique batch counter (the PRSS nonce of
    the zero-sharing that masks each party's message). No share polynomial, so no CSPRNG. The revealed S
    depends on the terms only: the same in any session. Any m >= 2.
    """
    x, pub, report = encode_batch(ctx, values, public)
    return Machine(ctx.party, _sum_gen(ctx, x, pub, step, report), "decide[sum]")


def blinded_party(
    ctx: PartyContext,
    values: npt.ArrayLike,
    public: npt.ArrayLike | None,
    step: int,
    rng: SecureRandom,
    blind: npt.ArrayLike,
    reveal_rng: SecureRandom | None = None,
) -> Machine[PartyReport]:
    """This party's machine for a batch in reveal mode ``blinded``: the receiver learns
    (S + 2^-(f+1)) W' + E 2^-(f+1+f_w), whose sign is that of S.

    ``values``, ``public``, ``step`` as for :func:`sum_party`; ``rng`` this party's CSPRNG (share
    polynomials); ``blind`` this party's blinding share W_j >= 0; ``reveal_rng`` (default ``rng``) draws its
    E_j, the part of the revealed value that is not a share. With ``values``, ``blind`` and ``reveal_rng``
    the same at every party, the revealed value is the same in any session. Needs 1 <= t < m/2.
    """
    ctx.params.require_honest_majority("reveal mode 'blinded'")
    x, pub, w, report = encode_blinded_batch(ctx, values, public, blind)
    gen = _blinded_gen(ctx, x, pub, w, step, rng, report, rng if reveal_rng is None else reveal_rng)
    return Machine(ctx.party, gen, "decide[blinded]")


def sign_party(
    ctx: PartyContext,
    values: npt.ArrayLike,
    public: npt.ArrayLike | None,
    step: int,
    rng: SecureRandom,
    material: SignMaterial | BlockMaterial | PrefixMaterial | None = None,
    precompute: str = "inline",
    lazy: LazyCoin | None = None,
) -> Machine[PartyReport]:
    """This party's machine for a batch in reveal mode ``sign``: the receiver learns only [S >= 0].

    ``values``, ``public``, ``step`` as for :func:`sum_party`; ``rng`` this party's CSPRNG (share
    polynomials, GRR coefficients). ``material`` from :func:`precompute_sign` (or, with
    ``precompute="blocks4"``, from :func:`precompute_blocks`) made ahead: then only the online rounds run.
    Without it, ``precompute`` (one of SIGN_PRECOMPUTE, the same at every party) says how the batch makes
    its own. ``lazy`` (inline precompute only, the same at every party): the receiver learns [S >= 0] AND a
    secret coin of probability ``lazy.gamma``, made inside the protocol from the session's PRSS keys (fresh
    in every session); without it the accept bit is the same in any session. Needs 1 <= t < m/2.
    """
    check_precompute(precompute)
    ctx.params.require_honest_majority("reveal mode 'sign'")
    x, pub, report = encode_batch(ctx, values, public)
    n, fmt = x.shape[0], ctx.params.fmt
    if material is not None and (material.n != n or material.bits.shape[0] != fmt.compare_bits):
        raise ValueError(
            f"sign material is for {material.n} decisions of {material.bits.shape[0]} bits, "
            f"this batch has {n} of {fmt.compare_bits}"
        )
    if lazy is not None and (precompute != "inline" or material is not None):
        raise ValueError(
            "a lazy decision makes its coin with the inline sign precompute only "
            f"(sign_precompute {precompute!r} with a lazy coin is not offered)"
        )
    if material is not None and (precompute == "prefix") != isinstance(material, PrefixMaterial):
        raise ValueError("sign precompute 'prefix' takes material from precompute_prefix only, and back")
    if material is not None and (precompute == "blocks4") != isinstance(material, BlockMaterial):
        raise ValueError(
            "sign precompute 'blocks4' takes material from precompute_blocks only (precompute_sign's is "
            "pair-only), and precompute_blocks' material needs precompute 'blocks4'"
        )
    if precompute == "prefix" and prefix_block_count(fmt.compare_bits) < 2:
        raise ValueError(f"sign precompute 'prefix' needs more than 4 compared bits, not {fmt.compare_bits}")
    gen = _sign_gen(ctx, x, pub, step, rng, report, material, precompute, lazy)
    return Machine(ctx.party, gen, "decide[sign]")


def encode_batch(
    ctx: PartyContext, values: npt.ArrayLike, public: npt.ArrayLike | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], PartyReport]:
    """This party's terms and the public terms in the session's fixed point, and the party's report (which
    of its terms were clamped); ValueError for a batch that is not 1-D, mismatched shapes, or public terms
    out of range (refused rather than clamped: clamping them would change the decision)."""
    fmt = ctx.params.fmt
    x, clamped = fmt.encode(values)
    if x.ndim != 1:
        raise ValueError(f"values must be a 1-D batch, got shape {x.shape}")
    if public is None:
        return x, np.zeros(x.shape[0], dtype=np.int64), PartyReport(clamped=clamped)
    pub, pub_clamped = fmt.encode(public)
    if pub.shape != x.shape:
        raise ValueError(f"public terms have shape {pub.shape}, values {x.shape}")
    if pub_clamped.any():
        raise ValueError(
            f"{int(pub_clamped.sum())} public terms exceed the format's range of "
            f"+-2^{fmt.term_int_bits}: refuse rather than change the decision"
        )
    return x, pub, PartyReport(clamped=clamped)


def encode_blinded_batch(
    ctx: PartyContext, values: npt.ArrayLike, public: npt.ArrayLike | None, blind: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], F.FieldArray, PartyReport]:
    """:func:`encode_batch` and this party's blinding shares W_j in the session's blind format (two words
    each), one per term (ValueError otherwise): the inputs of ``blinded`` under either security."""
    x, pub, report = encode_batch(ctx, values, public)
    w, _ = ctx.params.fmt.encode_blind(blind)
    if w.shape[:-1] != x.shape:
        raise ValueError(f"blinding shares have shape {w.shape[:-1]}, values {x.shape}")
    return x, pub, w, report


def sum_receiver(params: SessionParams, inbox: Inbox, n: int) -> Decisions:
    """The receiver's decoding of a ``sum`` batch's final round (one message from each party): S."""
    s = F.to_int64(receive_opened(params, inbox, (n,)))
    return Decisions(accept=s >= 0, revealed=params.fmt.decode(s))


def blinded_receiver(params: SessionParams, inbox: Inbox, n: int) -> Decisions:
    """The receiver's decoding of a ``blinded`` batch's final round: the blinded product, accept = Z > 0."""
    params.require_honest_majority("reveal mode 'blinded'")
    fmt = params.fmt
    z = F.to_double(receive_opened(params, inbox, (n,)), fmt.frac_bits + 1 + fmt.blind_frac_bits)
    return Decisions(accept=z > 0, revealed=z)


def sign_receiver(params: SessionParams, inbox: Inbox, n: int) -> Decisions:
    """The receiver's decoding of a ``sign`` batch's final round: the bits (ProtocolError for a non-bit)."""
    params.require_honest_majority("reveal mode 'sign'")
    val = receive_opened(params, inbox, (n,))
    bits = F.to_int64(val) if n else np.zeros(0, dtype=np.int64)
    if ((bits != 0) & (bits != 1)).any():
        raise ProtocolError("sign output is not a bit: a party deviated or messages were corrupted")
    return Decisions(accept=bits == 1, revealed=None)


def _sum_gen(
    ctx: PartyContext, x: npt.NDArray[np.int64], pub: npt.NDArray[np.int64], step: int, report: PartyReport
) -> PartyGen[PartyReport]:
    val = F.from_int64(x + pub) if ctx.party == 1 else F.from_int64(x)
    z = ctx.prss.zero_additive(P_Z_OUT, step, x.shape)
    yield {RECEIVER: pack(F.add(val, z))}
    return report


def _blinded_gen(
    ctx: PartyContext,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    w: F.FieldArray,
    step: int,
    rng: SecureRandom,
    report: PartyReport,
    reveal_rng: SecureRandom,
) -> PartyGen[PartyReport]:
    params, fmt = ctx.params, ctx.params.fmt
    n = x.shape[0]
    e_bits_each = fmt.blind_e_bits - math.ceil(math.log2(params.m))
    e_own = reveal_rng.bounded((n,), e_bits_each)  # E_j: part of the revealed value S W + E
    own = np.stack([F.from_int64(x + pub) if ctx.party == 1 else F.from_int64(x), w, e_own])
    shares = split(own, params.t, params.m, rng)  # (m, 3, n, 2)
    inbox = yield {j: pack(shares[j - 1]) for j in ctx.others}
    msgs = expect(inbox, ctx.others, field_words((3, n)), "blinded/input")
    total = sum_contributions(ctx, shares[ctx.party - 1], msgs)  # [S], [W], [E]
    s2 = F.add(F.mul_scalar(total[0], 2), F.const(1))
    w_shift = F.add(total[1], F.const(1 << fmt.blind_e_bits))
    z = F.add(F.mul(s2, w_shift), total[2])
    yield {RECEIVER: pack(masked_contribution(ctx, z, P_Z_OUT, step))}
    return report


@dataclass(frozen=True)
class SignMaterial:
    """Input-independent material for one batch of sign decisions (this party's degree-t shares).

    ``bits``: [r_i], shape (K, n); ``pairs``: [r_{2a} r_{2a+1}], shape (K // 2, n); ``r_top``: [r_hi], (n,).
    Made by :func:`precompute_sign` ahead of the inputs, or inline as the first round of the sign protocol.
    Each material must be consumed by exactly one batch: reusing a mask would reveal differences of inputs.
    """

    bits: F.FieldArray
    pairs: F.FieldArray
    r_top: F.FieldArray
    coin_bits: F.FieldArray | None = None  # lazy: [u_i], shape (L, n)
    coin_pairs: F.FieldArray | None = None  # lazy: [u_{2a} u_{2a+1}], shape (L // 2, n)

    @property
    def n(self) -> int:
        return int(self.bits.shape[1])


def precompute_sign(
    ctx: PartyContext, n: int, step: int, rng: SecureRandom, distributed: bool = True, ahead: bool = False
) -> Machine[SignMaterial]:
    """Material for n sign decisions, made before the inputs exist.

    ``distributed=True`` (3 rounds, all before the inputs exist): the random s_i are dealt by the parties
    (cheaper than PRSS for large m), each s_i^2 is opened to one party only, the parties take turns in
    computing the public square roots (each computes about K n / m of them instead of all K n), and each
    broadcasts its share of the roots. ``distributed=False`` (1 round): every party opens every s_i^2 and
    computes every root itself; this is what the 7-round sign protocol runs inline. ``ahead``: made ahead of
    its step (parties.ahead), its openings under a zero-sharing of their own (``P_Z_PRE_AHEAD``), so that the
    step's own precompute after a discarded pool never reuses one (the pooled s are dealt afresh each time).
    """
    ctx.params.require_honest_majority("reveal mode 'sign'")
    gen = _sign_precompute(ctx, n, step, rng, distributed, zero=P_Z_PRE_AHEAD if ahead else P_Z_PRE)
    return Machine(ctx.party, gen, "precompute_sign")


def precompute_blocks(ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> Machine[BlockMaterial]:
    """blocks4 material for n sign decisions, made before the inputs exist (2 rounds, hss.sign_blocks);
    ``sign_party(..., material=..., precompute="blocks4")`` then runs only the 5 online rounds."""
    ctx.params.require_honest_majority("reveal mode 'sign'")
    return Machine(ctx.party, block_precompute(ctx, n, step, rng), "precompute_blocks")


def precompute_prefix(ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> Machine[PrefixMaterial]:
    """prefix material for n sign decisions, made before the inputs exist (2 rounds, hss.sign_prefix);
    ``sign_party(..., material=..., precompute="prefix")`` then runs only the 3 online rounds."""
    ctx.params.require_honest_majority("reveal mode 'sign'")
    return Machine(ctx.party, prefix_precompute(ctx, n, step, rng), "precompute_prefix")


def root_chunks(total: int, m: int) -> list[tuple[int, int]]:
    """Party p (1..m) computes the roots of flat positions [lo, hi) of chunk p - 1."""
    edges = [total * i // m for i in range(m + 1)]
    return [(edges[i], edges[i + 1]) for i in range(m)]


def _sign_precompute(
    ctx: PartyContext,
    n: int,
    step: int,
    rng: SecureRandom,
    distributed: bool,
    coin_bits: int = 0,
    zero: int = P_Z_PRE,
) -> PartyGen[SignMaterial]:
    fmt = ctx.params.fmt
    kbits = fmt.compare_bits
    npairs = kbits // 2
    if coin_bits and distributed:
        raise ValueError("a lazy coin is made with the inline sign precompute only (sign_precompute inline)")
    # random bits: the K mask bits, then (lazy) the coin's L bits; pairs within each group
    lo_idx = np.r_[np.arange(0, 2 * npairs, 2), kbits + np.arange(0, 2 * (coin_bits // 2), 2)]
    hi_idx = lo_idx + 1
    nrows, nprs = kbits + coin_bits, lo_idx.size
    if distributed:
        # offline, an extra round is free: each party deals a random degree-t sharing (t AES blocks and
        # m(t+1) small multiplications per value, against C(m-1,t) PRF streams and full multiplications
        # for PRSS); the sum of the m dealt values is uniform to any coalition of t parties.
        dealt = split(rng.field((kbits, n)), ctx.params.t, ctx.params.m, rng)  # (m, K, n)
        inbox = yield {j: pack(dealt[j - 1]) for j in ctx.others}
        got = expect(inbox, ctx.others, field_words((kbits, n)), "sign/precompute-deal")
        s = sum_contributions(ctx, dealt[ctx.party - 1], got)
    else:
        s = ctx.prss.random(P_BITS, step, (kbits, n))
        if coin_bits:
            s = np.concatenate([s, ctx.prss.random(P_COIN, step, (coin_bits, n))])
    sq_mine = masked_contribution(ctx, F.mul(s, s), zero, step).reshape(nrows * n, 2)
    rows = grr_deal(ctx, F.mul(s[lo_idx], s[hi_idx]), rng)  # (m, pairs, n)
    pair_words = field_words((nprs, n))
    if not distributed:
        inbox = yield {j: pack(sq_mine, rows[j - 1]) for j in ctx.others}
        cut = field_words((nrows * n,))
        msgs = expect(inbox, ctx.others, cut + pair_words, "sign/precompute")
        sq = sum_contributions(ctx, sq_mine, {j: v_[:cut] for j, v_ in msgs.items()})
        v = inverse_roots(sq)
    else:
        chunks = root_chunks(kbits * n, ctx.params.m)
        lo, hi = chunks[ctx.party - 1]
        inbox = yield {j: pack(sq_mine[chunks[j - 1][0] : chunks[j - 1][1]], rows[j - 1]) for j in ctx.others}
        msgs = {}
        for j in ctx.others:
            if j not in inbox or inbox[j].size != 2 * (hi - lo) + pair_words:
                raise ProtocolError(f"sign/precompute: bad or missing message from party {j}")
            msgs[j] = inbox[j]
        if set(inbox) != set(ctx.others):
            raise ProtocolError(f"sign/precompute: unexpected senders {sorted(set(inbox) - set(ctx.others))}")
        cut = 2 * (hi - lo)
        sq_chunk = sum_contributions(ctx, sq_mine[lo:hi], {j: v_[:cut] for j, v_ in msgs.items()})
        v_chunk = inverse_roots(sq_chunk)
        inbox2 = yield {j: pack(v_chunk) for j in ctx.others}
        parts = []
        for j in ctx.all:
            if j == ctx.party:
                parts.append(v_chunk)
                continue
            want = 2 * (chunks[j - 1][1] - chunks[j - 1][0])
            if j not in inbox2 or inbox2[j].size != want:
                raise ProtocolError(f"sign/precompute: party {j} did not send its {want // 2} roots")
            parts.append(inbox2[j].reshape(-1, 2))
        v = np.concatenate(parts)
    v = v.reshape(nrows, n, 2)
    one = F.const(1)
    r = bits_from_roots(s, v)
    pair_ss = grr_combine(ctx, rows[ctx.party - 1], {j: v_[cut:] for j, v_ in msgs.items()})
    sig_prod = F.mul(pair_ss, F.mul(v[lo_idx], v[hi_idx]))
    # r_a r_b = (1 + sigma_a + sigma_b + sigma_a sigma_b) / 4 with sigma = 2r - 1
    sig_lo = F.sub(F.mul_scalar(r[lo_idx], 2), one)
    sig_hi = F.sub(F.mul_scalar(r[hi_idx], 2), one)
    rr = F.mul_scalar(F.add(F.add(F.add(sig_lo, sig_hi), sig_prod), one), _INV4)
    r_top = ctx.prss.bounded(P_RHI, step, (n,), fmt.kappa + 1)
    if not coin_bits:
        return SignMaterial(bits=r, pairs=rr, r_top=r_top)
    return SignMaterial(
        bits=r[:kbits], pairs=rr[:npairs], r_top=r_top, coin_bits=r[kbits:], coin_pairs=rr[npairs:]
    )


Msgs = dict[int, npt.NDArray[np.uint64]]


def _split_msgs(msgs: Msgs, first: int) -> tuple[Msgs, Msgs]:
    """Each message cut in two: its first ``first`` words and the rest."""
    return {j: v[:first] for j, v in msgs.items()}, {j: v[first:] for j, v in msgs.items()}


def compare_nodes(
    cb: npt.NDArray[np.bool_], r: F.FieldArray, rr: F.FieldArray, kbits: int, one: F.FieldArray | None = None
) -> tuple[F.FieldArray, F.FieldArray]:
    """First level (local) of the carry tree for u = [c mod 2^K < r mod 2^K] from c's bits ``cb`` (K, n),
    the mask bits [r] and their pair products [rr]: node (G, P) = (r > c on its span, r == c on it).
    Affine in (r, rr) with public coefficients: ``one`` is what the constant 1 contributes (default 1; the
    MAC key's share when the call computes the MACs of the nodes, hss.abort_modes)."""
    npairs = kbits // 2
    r_lo_pair, r_hi_pair = r[0 : 2 * npairs : 2], r[1 : 2 * npairs : 2]
    one = F.const(1) if one is None else one
    zero = F.zeros(())
    c_l, c_h = cb[0 : 2 * npairs : 2], cb[1 : 2 * npairs : 2]
    g_h = _select(~c_h, r_hi_pair, zero)
    eg = _select(c_l, zero, _select(c_h, rr, F.sub(r_lo_pair, rr)))  # e_h * g_l
    big_g = F.add(g_h, eg)
    p11, p10 = rr, F.sub(r_hi_pair, rr)
    p01 = F.sub(r_lo_pair, rr)
    p00 = F.add(F.sub(F.sub(np.broadcast_to(one, rr.shape), r_hi_pair), r_lo_pair), rr)
    big_p = _select(c_h, _select(c_l, p11, p10), _select(c_l, p01, p00))
    if kbits % 2:
        rt, ct = r[kbits - 1 : kbits], cb[kbits - 1 : kbits]
        big_g = np.concatenate([big_g, _select(~ct, rt, zero)])
        big_p = np.concatenate([big_p, _select(ct, rt, F.sub(np.broadcast_to(one, rt.shape), rt))])
    return big_g, big_p


def _carry_rounds(
    ctx: PartyContext,
    rng: SecureRandom,
    big_g: F.FieldArray,
    big_p: F.FieldArray,
    coin_tree: CarryTree | None,
    inserted: bool,
) -> PartyGen[F.FieldArray]:
    """The carry tree's GRR rounds from the first level (G, P) to the root's degree-2t share, which the
    caller fuses with the output; a lazy coin's tree advances in the same rounds. ``inserted``: no coin is
    waiting to be placed on top (always true without a lazy coin)."""
    n = big_g.shape[1]
    zero = F.zeros(())
    # lazy: once the coin is ready (degree t) it becomes a virtual top node (G, P) = (0, coin), so the
    # tree's root is coin * u and the AND costs no round unless the coin is late for the root level
    nodes = big_g.shape[0]
    while True:
        if not inserted and coin_tree is not None and coin_tree.done:
            big_g = np.concatenate([big_g, np.broadcast_to(zero, (1, n, 2))])
            big_p = np.concatenate([big_p, coin_tree.g[:1]])
            nodes, inserted = nodes + 1, True
        if nodes == 1 and inserted:
            return big_g[0]
        half = nodes // 2
        if nodes > 1 and half + nodes % 2 == 1 and inserted:  # this level makes the root: fuse with output
            return F.add(big_g[1], F.mul(big_p[1], big_g[0]))
        prods = carry_products(big_g, big_p) if nodes > 1 else None
        crow = coin_rows(ctx, coin_tree, rng)
        if prods is None and crow is None:
            raise ProtocolError("sign: the carry tree cannot advance (internal)")
        rows = None if prods is None else grr_deal(ctx, prods, rng)
        main_words = 0 if prods is None else field_words(prods.shape[:-1])
        coin_words = 0 if crow is None else field_words(crow.shape[1:-1])

        def payload(
            j: int, rows: F.FieldArray | None = rows, crow: F.FieldArray | None = crow
        ) -> npt.NDArray[np.uint64]:
            parts = [a[j - 1] for a in (rows, crow) if a is not None]
            return pack(*parts)

        inbox = yield {j: payload(j) for j in ctx.others}
        got = expect(inbox, ctx.others, main_words + coin_words, "sign/carry")
        msgs, cmsgs = _split_msgs(got, main_words)
        coin_advance(ctx, coin_tree, crow, cmsgs)
        if rows is not None:
            big_g, big_p = carry_advance(big_g, big_p, grr_combine(ctx, rows[ctx.party - 1], msgs))
            nodes = big_g.shape[0]


def _sign_gen(
    ctx: PartyContext,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
    report: PartyReport,
    material: SignMaterial | BlockMaterial | PrefixMaterial | None,
    precompute: str = "inline",
    lazy: LazyCoin | None = None,
) -> PartyGen[PartyReport]:
    fmt = ctx.params.fmt
    n, kbits = x.shape[0], fmt.compare_bits
    if precompute == "prefix":  # the carry over the blocks in one round (hss.sign_prefix): 4 rounds, 3 ahead
        if isinstance(material, PrefixMaterial):
            yield from prefix_sign_online(ctx, x, pub, step, rng, material)
        else:
            yield from prefix_sign_inline(ctx, x, pub, step, rng)
        return report
    assert not isinstance(material, PrefixMaterial)
    blocks: BlockMaterial | None = None
    if precompute == "blocks4":  # 2 rounds: every monomial of each block of 4 bits (hss.sign_blocks)
        if isinstance(material, BlockMaterial):
            blocks = material
        else:
            blocks = yield from block_precompute(ctx, n, step, rng)
        r, r_top = blocks.bits, blocks.r_top
    else:
        assert not isinstance(material, BlockMaterial)
        if material is None:  # inline: 1 round, every party computes every root; pooled: 3, each root once
            coin_bits = lazy.bits if lazy is not None else 0
            pooled = precompute == "pooled"
            material = yield from _sign_precompute(ctx, n, step, rng, distributed=pooled, coin_bits=coin_bits)
        r, rr, r_top = material.bits, material.pairs, material.r_top
    coin_tree: CarryTree | None = None
    if lazy is not None:
        assert isinstance(material, SignMaterial)
        if material.coin_bits is None or material.coin_pairs is None:
            raise ValueError("a lazy decision needs sign material with the coin's random bits")
        coin_tree = coin_carry_tree(lazy, material.coin_bits, material.coin_pairs)

    # --- online round 1: fused input and mask opening: c = S + 2^K + r (and a coin-tree level) ---
    contrib = masked_input(ctx, x, r, r_top, step)
    crow = coin_rows(ctx, coin_tree, rng)
    extra = 0 if crow is None else field_words(crow.shape[1:-1])
    if crow is None:
        inbox = yield {j: pack(contrib) for j in ctx.others}
    else:
        inbox = yield {j: pack(contrib, crow[j - 1]) for j in ctx.others}
    words = field_words((n,))
    msgs, cmsgs = _split_msgs(expect(inbox, ctx.others, words + extra, "sign/open"), words)
    coin_advance(ctx, coin_tree, crow, cmsgs)
    c = sum_contributions(ctx, contrib, msgs)
    c_hi, cb = split_compared(F.add(F.add(c, F.from_int64(pub)), F.const(1 << kbits)), kbits)

    # --- carry tree for u = [c mod 2^K < r mod 2^K]: node (G, P) = (r > c on its span, r == c on it) ---
    if blocks is None:
        big_g, big_p = compare_nodes(cb, r, rr, kbits)
    else:  # blocks4: the first level over blocks of 4 bits, local thanks to the block monomials
        big_g, big_p = block_nodes(cb, blocks, kbits)
    root = yield from _carry_rounds(ctx, rng, big_g, big_p, coin_tree, inserted=lazy is None)

    # --- output: [S >= 0] = floor(c / 2^K) - r_hi - u (lazy: coin * that, the root being coin * u) ---
    if lazy is None:
        bit = F.sub(F.sub(c_hi, r_top), root)
    else:
        assert coin_tree is not None
        coin = coin_tree.g[0]
        bit = F.sub(F.sub(F.mul(coin, c_hi), F.mul(coin, r_top)), root)
    yield {RECEIVER: pack(masked_contribution(ctx, bit, P_Z_OUT, step))}
    return report


def plaintext_decisions(
    values: Sequence[npt.ArrayLike], public: npt.ArrayLike | None, fmt: FixedPoint
) -> npt.NDArray[np.bool_]:
    """The reference: the same fixed-point encoding and clamping, decided in the clear."""
    total = np.zeros(np.asarray(values[0]).shape, dtype=np.int64)
    for v in values:
        total = total + fmt.encode(v)[0]
    if public is not None:
        total = total + fmt.encode(public)[0]
    return total >= 0
