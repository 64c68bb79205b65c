"""The building blocks shared by the decision protocols (hss.protocols) and the SVT test (hss.svt).

One party's local computation around a round, and the one-round protocols made of it, over a whole batch:

- Masked openings: party i contributes lambda_i [x]_i + z_i, with lambda the Lagrange coefficients at 0 and
  z a pairwise zero-sharing from the session's PRSS keys, so the m contributions sum to x and each is
  uniform given x (opening the raw shares of a product polynomial would leak its factors):
  :func:`masked_contribution`, :func:`sum_contributions`, :func:`open_to_all`, :func:`open_to_receiver`,
  :func:`receive_opened`.
- GRR multiplication (Gennaro, Rabin, Rabin 1998): the local product of two degree-t shares is a share of
  degree 2t < m; each party reshares it at degree t and the parties recombine the rows they receive with
  the Lagrange coefficients: :func:`grr_deal`, :func:`grr_combine`, :func:`multiply`.
- Random bits by squaring (Damgard, Fitzi, Kiltz, Nielsen, Toft 2006): PRSS gives a random [s]; the parties
  open s^2 (masked) and r = (1 + s / sqrt(s^2)) / 2 is a uniform secret bit, with sqrt(x) = x^(2^125) for
  p = 2^127 - 1: :func:`inverse_roots`, :func:`bits_from_roots`, :func:`random_bits`.
- One all-to-all round carrying openings, Shamir-shared inputs and GRR reshares at once: :func:`exchange`.
- The carry tree of a comparison (Catrina and de Hoogh 2010): generate/propagate nodes (G, P) over spans of
  bits, combined level by level, one GRR round per level: :func:`carry_products`, :func:`carry_advance`,
  :class:`CarryTree`. How the first level is made (radix 2 in hss.protocols, radix 4 in hss.svt) and how
  the root is fused with the output stay with each protocol.

Security: honest-but-curious parties. Openings hide everything but the opened value for shares of any
degree < m; GRR multiplication and random bits need an honest majority, t < m/2 (degree-2t products are
reshared among all m parties). Share polynomials and GRR coefficients come from the party's
``SecureRandom``; PRSS streams are separated by (purpose, step), with the purposes below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Inbox, Machine, PartyGen, ProtocolError, expect, pack
from hss.session import PartyContext, SessionParams
from hss.sharing import split, vandermonde

#: PRSS / PRF purposes of hss.primitives and hss.protocols: distinct streams per use within one step
#: (hss.svt uses its own, 101..106). P_Z_PRE_AHEAD: the zero-sharing of a precompute made ahead of its step
#: (parties.ahead): a pool discarded for another batch size is followed by the step's own precompute, and
#: the pooled precompute deals fresh s there, so the two must not share a zero-sharing (an honest party's
#: two contributions under one mask would differ by lambda (s_i^2 - s'_i^2) of its own shares)
P_BITS, P_RHI, P_Z_PRE, P_Z_OPEN, P_Z_OUT, P_Z_ALL, P_COIN, P_Z_PRE_AHEAD = 1, 2, 3, 4, 5, 6, 7, 8

_INV2 = pow(2, F.P - 2, F.P)


# ---------------------------------------------------------------------------------------------------------
# masked openings and GRR multiplication: one party's local computation around a round


def masked_contribution(ctx: PartyContext, share: F.FieldArray, purpose: int, step: int) -> F.FieldArray:
    """lambda_i * share + z_i: this party's additive contribution to opening the shared value."""
    z = ctx.prss.zero_additive(purpose, step, share.shape[:-1])
    return F.add(F.mul_scalar(share, ctx.lam_me), z)


def sum_contributions(
    ctx: PartyContext, own: F.FieldArray, msgs: dict[int, npt.NDArray[np.uint64]]
) -> F.FieldArray:
    """The opened value: the sum of this party's contribution ``own`` and those received from the others."""
    stack = np.stack([own if j == ctx.party else msgs[j].reshape(own.shape) for j in ctx.all])
    return F.lincomb(F.from_ints([1] * ctx.params.m), stack)


def grr_deal(ctx: PartyContext, vals: F.FieldArray, rng: SecureRandom) -> F.FieldArray:
    """Degree-t sharings of this party's degree-2t product shares: row j-1 goes to party j."""
    t = ctx.params.t
    coeffs = np.concatenate([vals[None], rng.field((t, *vals.shape[:-1]))], axis=0)
    return F.matmul(vandermonde(ctx.params.m, t), coeffs)


def grr_combine(
    ctx: PartyContext, own_row: F.FieldArray, msgs: dict[int, npt.NDArray[np.uint64]]
) -> F.FieldArray:
    """Degree-t shares of the product: the rows dealt to this party (its own and the others') combined with
    the Lagrange coefficients at 0."""
    stack = np.stack([own_row if j == ctx.party else msgs[j].reshape(own_row.shape) for j in ctx.all])
    return F.lincomb(ctx.lam, stack)


def field_words(shape: tuple[int, ...]) -> int:
    """Length in uint64 words of a packed field array of this shape (two words per element)."""
    return 2 * int(np.prod(shape))


# ---------------------------------------------------------------------------------------------------------
# one-round protocols


def open_to_all(ctx: PartyContext, share: F.FieldArray, step: int) -> Machine[F.FieldArray]:
    """Open a shared value (any degree < m) to every party: one round, masked contributions."""

    def gen() -> PartyGen[F.FieldArray]:
        mine = masked_contribution(ctx, share, P_Z_ALL, step)
        inbox = yield {j: pack(mine) for j in ctx.others}
        msgs = expect(inbox, ctx.others, field_words(share.shape[:-1]), "open_to_all")
        return sum_contributions(ctx, mine, msgs)

    return Machine(ctx.party, gen(), "open_to_all")


def open_to_receiver(ctx: PartyContext, share: F.FieldArray, step: int) -> Machine[None]:
    """Open a shared value (any degree < m) to the receiver only: one round."""

    def gen() -> PartyGen[None]:
        yield {RECEIVER: pack(masked_contribution(ctx, share, P_Z_OUT, step))}
        return None

    return Machine(ctx.party, gen(), "open_to_receiver")


def receive_opened(params: SessionParams, inbox: Inbox, shape: tuple[int, ...]) -> F.FieldArray:
    """The receiver's side of an opening: the sum of all m masked contributions."""
    msgs = expect(inbox, list(range(1, params.m + 1)), field_words(shape), "receiver")
    stack = np.stack([msgs[j].reshape(*shape, 2) for j in range(1, params.m + 1)])
    return F.lincomb(F.from_ints([1] * params.m), stack)


def multiply(ctx: PartyContext, x: F.FieldArray, y: F.FieldArray, rng: SecureRandom) -> Machine[F.FieldArray]:
    """[x y] of degree t from degree-t [x], [y]: local product then GRR resharing, one round."""
    ctx.params.require_honest_majority("multiply")

    def gen() -> PartyGen[F.FieldArray]:
        rows = grr_deal(ctx, F.mul(x, y), rng)
        inbox = yield {j: pack(rows[j - 1]) for j in ctx.others}
        msgs = expect(inbox, ctx.others, field_words(x.shape[:-1]), "multiply")
        return grr_combine(ctx, rows[ctx.party - 1], msgs)

    return Machine(ctx.party, gen(), "multiply")


def random_bits(ctx: PartyContext, n: int, step: int) -> Machine[F.FieldArray]:
    """Degree-t shares of n uniform secret bits: PRSS [s], open s^2 (masked), r = (1 + s/sqrt(s^2))/2."""
    ctx.params.require_honest_majority("random_bits")

    def gen() -> PartyGen[F.FieldArray]:
        s = ctx.prss.random(P_BITS, step, (n,))
        mine = masked_contribution(ctx, F.mul(s, s), P_Z_PRE, step)
        inbox = yield {j: pack(mine) for j in ctx.others}
        msgs = expect(inbox, ctx.others, field_words((n,)), "random_bits")
        sq = sum_contributions(ctx, mine, msgs)
        return bits_from_roots(s, inverse_roots(sq))

    return Machine(ctx.party, gen(), "random_bits")


def inverse_roots(sq: F.FieldArray) -> F.FieldArray:
    """1 / sqrt(s^2) for opened squares of random values (the public part of a random bit)."""
    try:
        return F.inv(F.sqrt(sq))
    except ZeroDivisionError as exc:  # s = 0 has probability about C(m,t) / 2^127
        raise ProtocolError("a random value was zero; rerun the batch with a new step") from exc


def comparison_mask(bits: F.FieldArray, r_top: F.FieldArray) -> F.FieldArray:
    """The sign protocols' mask r = sum_i 2^i r_i + 2^K r_hi from the K mask bits and the high part (shares
    of any degree, or MACs: the map is linear)."""
    kbits = bits.shape[0]
    pow2 = F.from_ints([1 << i for i in range(kbits)] + [1 << kbits])
    return F.lincomb(pow2, np.concatenate([bits, r_top[None]], axis=0))


def masked_input(
    ctx: PartyContext, x: npt.NDArray[np.int64], bits: F.FieldArray, r_top: F.FieldArray, step: int
) -> F.FieldArray:
    """This party's part of the fused input and mask opening c = S + r: its encoded term x_j plus its masked
    contribution to r (the sum over the parties, with the public part and 2^K added, is c)."""
    return F.add(F.from_int64(x), masked_contribution(ctx, comparison_mask(bits, r_top), P_Z_OPEN, step))


def split_compared(c: F.FieldArray, kbits: int) -> tuple[F.FieldArray, npt.NDArray[np.bool_]]:
    """The opened c = S + 2^K + r as floor(c / 2^K) and the bits of c mod 2^K, shape (K, n), lowest first."""
    c_lo = F.low_word(c)
    cb = ((c_lo[None, :] >> np.arange(kbits, dtype=np.uint64)[:, None]) & np.uint64(1)).astype(bool)
    return F.shift_right(c, kbits), cb


def bits_from_roots(s: F.FieldArray, v: F.FieldArray) -> F.FieldArray:
    """[r] = (1 + [s] v) / 2 with v = 1 / sqrt(s^2): a uniform secret bit."""
    return F.mul_scalar(F.add(F.mul(s, v), F.const(1)), _INV2)


# ---------------------------------------------------------------------------------------------------------
# one round of messages carrying several kinds of payload


def flatten(arrs: Sequence[F.FieldArray]) -> tuple[F.FieldArray, list[tuple[int, ...]]]:
    """Field arrays of any shapes as one flat (n, 2) array and their shapes (``unflatten`` inverts it)."""
    shapes = [tuple(a.shape[:-1]) for a in arrs]
    if not arrs:
        return F.zeros((0,)), shapes
    return np.concatenate([np.ascontiguousarray(a).reshape(-1, 2) for a in arrs]), shapes


def unflatten(flat: F.FieldArray, shapes: list[tuple[int, ...]]) -> list[F.FieldArray]:
    out, pos = [], 0
    for shp in shapes:
        size = math.prod(shp)
        out.append(np.ascontiguousarray(flat[pos : pos + size]).reshape(*shp, 2))
        pos += size
    return out


def exchange(
    ctx: PartyContext,
    rng: SecureRandom,
    step: int,
    what: str,
    opens: Sequence[F.FieldArray] = (),
    purpose: int = 0,
    deals: Sequence[F.FieldArray] = (),
    grrs: Sequence[F.FieldArray] = (),
) -> PartyGen[tuple[list[F.FieldArray], list[F.FieldArray], list[F.FieldArray]]]:
    """One all-to-all round carrying three kinds of payload, returned in the order given.

    ``opens``: shares (degree < m) opened to every party (masked contributions, zero-sharing ``purpose``);
    ``deals``: this party's private values, Shamir-shared; the result is the degree-t sharing of the sum
    over all parties; ``grrs``: degree-2t shares reshared to degree t (Gennaro-Rabin-Rabin).
    """
    m, t = ctx.params.m, ctx.params.t
    o_flat, o_shapes = flatten(opens)
    d_flat, d_shapes = flatten(deals)
    g_flat, g_shapes = flatten(grrs)
    no, nd, ng = o_flat.shape[0], d_flat.shape[0], g_flat.shape[0]
    mine = masked_contribution(ctx, o_flat, purpose, step) if no else o_flat
    d_rows = split(d_flat, t, m, rng) if nd else np.zeros((m, 0, 2), dtype=np.uint64)
    g_rows = grr_deal(ctx, g_flat, rng) if ng else np.zeros((m, 0, 2), dtype=np.uint64)
    inbox = yield {j: pack(mine, d_rows[j - 1], g_rows[j - 1]) for j in ctx.others}
    msgs = expect(inbox, ctx.others, 2 * (no + nd + ng), what)
    got = {j: msgs[j].reshape(-1, 2) for j in ctx.others}
    me = ctx.party
    ones = F.from_ints([1] * m)
    opened = deal_sum = reshared = F.zeros((0,))
    if no:
        opened = F.lincomb(ones, np.stack([mine if j == me else got[j][:no] for j in ctx.all]))
    if nd:
        rows = [d_rows[me - 1] if j == me else got[j][no : no + nd] for j in ctx.all]
        deal_sum = F.lincomb(ones, np.stack(rows))
    if ng:
        reshared = grr_combine(ctx, g_rows[me - 1], {j: got[j][no + nd :] for j in ctx.others})
    return unflatten(opened, o_shapes), unflatten(deal_sum, d_shapes), unflatten(reshared, g_shapes)


# ---------------------------------------------------------------------------------------------------------
# the carry tree


def carry_products(g: F.FieldArray, p: F.FieldArray) -> F.FieldArray:
    """The degree-2t products of one carry-tree level over nodes (G, P), lowest node first: P_hi G_lo for
    every pair (hi, lo), then P_hi P_lo for every pair but the lowest (whose P is never needed)."""
    half = g.shape[0] // 2
    g_lo, p_hi = g[0 : 2 * half : 2], p[1 : 2 * half : 2]
    p_lo = p[0 : 2 * half : 2]
    return np.concatenate([F.mul(p_hi, g_lo), F.mul(p_hi[1:], p_lo[1:])])


def carry_advance(
    g: F.FieldArray, p: F.FieldArray, prods_t: F.FieldArray
) -> tuple[F.FieldArray, F.FieldArray]:
    """The next level's nodes from :func:`carry_products` taken back to degree t: a pair (hi, lo) becomes
    (G_hi + P_hi G_lo, P_hi P_lo), an odd top node passes through; the lowest new P is 0 (never used)."""
    half, odd = g.shape[0] // 2, g.shape[0] % 2
    new_g = F.add(g[1 : 2 * half : 2], prods_t[:half])
    new_p = np.concatenate([np.broadcast_to(F.zeros(()), (1, *g.shape[1:])), prods_t[half:]])
    if odd:
        new_g = np.concatenate([new_g, g[-1:]])
        new_p = np.concatenate([new_p, p[-1:]])
    return new_g, new_p


class CarryTree:
    """Generate/propagate nodes (G, P) of a comparison over a batch, combined level by level: a node pair
    (hi, lo) becomes (G_hi + P_hi G_lo, P_hi P_lo) (the lowest node's P is never needed). One GRR round per
    level; :meth:`products` are this level's degree-2t products, :meth:`advance` takes them back at degree t.
    hss.protocols runs the lazy coin [u < k] on it; comparisons that fuse their root level with the output
    call :func:`carry_products` and :func:`carry_advance` directly."""

    def __init__(self, g: F.FieldArray, p: F.FieldArray) -> None:
        self.g, self.p = g, p

    @property
    def nodes(self) -> int:
        return int(self.g.shape[0])

    @property
    def done(self) -> bool:
        return self.nodes == 1

    def products(self) -> F.FieldArray:
        return carry_products(self.g, self.p)

    def advance(self, prods_t: F.FieldArray) -> None:
        self.g, self.p = carry_advance(self.g, self.p, prods_t)
