"""The reveal mode ``blinded`` under security with abort (issue 25), on hss.authenticated.

The receiver learns Z = (2S + 1)(W + w0) + E, as in the semi-honest mode (hss.protocols, ``blinded``):
S = pub + sum_j x_j the decision sum, W = sum_j W_j the parties' blinding shares (each W_j >= 0, its
``FixedPoint.encode_blind`` integer), w0 = 2^blind_e_bits and E = sum_j e_j with e_j < 2^(blind_e_bits -
ceil(log2 m)) drawn from the party's ``reveal_rng``. Z > 0 exactly when S >= 0, and the revealed value is
bit for bit the semi-honest mode's for the same terms, blinding shares and E draws. Up to t < m/2 parties
may deviate in any message: every honest party then raises :class:`hss.authenticated.AbortError` before any
output leaves it, or the receiver gets Z (and the decisions) of the inputs the parties chose, each input in
its range.

Rounds (7; the semi-honest mode takes 2):

1. inputs as bits: each party deals (Shamir, degree t) the bits of its term x_j + 2^(B-1) (B =
   term_int_bits + frac_bits + 1 = 38), of W_j (ceil(log2 W_CLAMP) + blind_frac_bits = 77 bits) and of e_j
   (blind_e_bits - ceil(log2 m) bits), nothing else;
2. MACs and coin: GRR reshares of r d for every dealt bit d; a PRSS coin seed opened with error detection
   (the coins gamma of the bitness check, fixed only after the bits were dealt);
3. product and bitness: with a = 2S + 1 and b = W + w0 (linear in the dealt bits, MACs included), one GRR
   round carries a b and (r a) b (the duplicated multiplication of :meth:`AuthParty.multiply`) and
   y = sum_k gamma_k d_k^2 with its MAC (:func:`hss.abort_modes.bitness_products`; verify checks
   y - sum_k gamma_k d_k = 0, :func:`hss.abort_modes.claim_bits`); Z = a b + E is then linear;
4. to 6. :meth:`AuthParty.verify`; 7. Z's raw degree-t shares to the receiver
   (:meth:`AuthParty.open_to_receiver`), who checks that all m lie on one polynomial of degree t
   (:func:`hss.authenticated.receive_checked`) and decodes like ``hss.protocols.blinded_receiver``.

Why every input is dealt as checked bits. A deviating party that could bring any field element for W_j could
make W + w0 negative (the revealed sign flips: the decision is wrong), one for e_j could make E exceed
W + w0 (the sign is masked), and a term out of range makes Z wrap mod p (the sign becomes an interval test
on the honest sum, docs/SECURITY_ABORT.md, "The input range question"). With bits every effective input lies
in its range whatever a party sends: 0 <= W_j < 2^77, 0 <= e_j < 2^(e_bits - ceil(log2 m)) so E < w0,
|S| < 2^41; then (2S + 1)(W + w0) has the sign of S and magnitude at least w0 > E, and |Z| < 2^125 < p/2
(``FixedPoint`` checks the budget for max_parties), so accept = [Z > 0] = [S >= 0] for every choice of the
coalition's inputs. Nothing is checked on Z itself, so an abort depends only on what deviating parties sent
(and on r, the coins and beta), never on the honest parties' data: a retried step tells the coalition nothing
new. The cost is the bits and their MACs: B_total (1 + m) field elements per ordered pair of parties per
decision with B_total = 38 + 77 + e_bits_each (about 173), far more than the semi-honest 3 + 1.

Why not cheaper or shorter, as tried while designing:

* sharing x_j, W_j, e_j as three values (``AuthParty.share_inputs``) with a range check with slack (open
  v + rho with rho a secret of kappa more bits): it proves |v| < 2^(bits + kappa) only, not W_j >= 0, so the
  sign could still be flipped;
* the bitness check without MACs (GRR of d_k^2 before the coins, compared with d_k after): the dealer knows
  its own d_k and can shift each reshared square to d_k exactly; only the MAC key, unknown to the coalition
  until verify, makes a shifted square detectable;
* the product before the MACs (round 2): the duplicated multiplication needs [r a], which exists only after
  round 2's reshares;
* Z sent to the receiver with the last verify round (6 rounds, the receiver checking CheckZero itself):
  the receiver would then see Z of a step that aborts; a deviating party could deal W_c + delta (not
  bits) in one attempt and W_c in the retry (same honest W_h and E: the run step's noise), and the two
  openings differ by (2S + 1) delta: the divisibility trap DESIGN.md warns about, or S itself for a
  receiver that learns delta. Z leaves an honest party only after verify has passed.

The coalition's view before verify is dealt shares, reshares and error-detecting openings of the coin seed
(public randomness): independent of the honest inputs; r, the verify seed and the CheckZero value are opened
only after every value exists. Needs 1 <= t < m/2.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.abort_modes import abort_rounds, bitness_products, bits_value, claim_bits, term_bits
from hss.authenticated import Auth, AuthParty, add, mul_public, receive_checked
from hss.fixedpoint import W_CLAMP
from hss.protocols import Decisions, PartyReport, encode_batch
from hss.randomness import SecureRandom
from hss.runtime import Inbox, Machine, PartyGen
from hss.session import PartyContext, SessionParams

__all__ = ["blinded_bit_widths", "blinded_party_abort", "blinded_receiver_abort"]

#: PRSS purpose of this module's coin seed (hss.primitives 1..7, hss.svt 101..106, hss.authenticated 201,
#: 202, 1000+k, hss.abort_modes 301..)
P_BLINDED_COIN = 321


def blinded_bit_widths(params: SessionParams) -> tuple[int, int, int]:
    """The bits a party deals for (its term + 2^(B-1), W_j, e_j): (B, ceil(log2 W_CLAMP) + blind_frac_bits,
    blind_e_bits - ceil(log2 m))."""
    fmt = params.fmt
    return (
        term_bits(params),
        math.ceil(math.log2(W_CLAMP)) + fmt.blind_frac_bits,
        fmt.blind_e_bits - math.ceil(math.log2(params.m)),
    )


def blinded_party_abort(
    ctx: PartyContext,
    values: npt.ArrayLike,
    public: npt.ArrayLike | None,
    step: int,
    rng: SecureRandom,
    blind: npt.ArrayLike,
    reveal_rng: SecureRandom | None = None,
) -> Machine[PartyReport]:
    """``blinded`` under abort: the receiver learns the semi-honest mode's Z (the same value for the same
    terms, ``blind`` and ``reveal_rng`` draws), or every honest party aborts. 7 rounds; the arguments as for
    :func:`hss.protocols.blinded_party` (``reveal_rng`` draws e_j, default ``rng``). Needs 1 <= t < m/2."""
    ctx.params.require_honest_majority("reveal mode 'blinded' with security 'abort'")
    x, pub, report = encode_batch(ctx, values, public)
    w, _ = ctx.params.fmt.encode_blind(blind)
    if w.shape[:-1] != x.shape:
        raise ValueError(f"blinding shares have shape {w.shape[:-1]}, values {x.shape}")
    _, _, e_bits = blinded_bit_widths(ctx.params)
    e_own = (rng if reveal_rng is None else reveal_rng).bounded((x.shape[0],), e_bits)  # as hss.protocols
    gen = _blinded_gen(ctx, dealt_bits(ctx.params, x, w, e_own), pub, step, rng, report)
    return Machine(ctx.party, gen, "decide[blinded, abort]")


def field_bits(v: F.FieldArray, nbits: int) -> F.FieldArray:
    """The low ``nbits`` (<= 127) bits of canonical field elements ``v`` (n, 2), shape (nbits, n)."""
    i = np.arange(nbits, dtype=np.uint64)
    lo = (v[None, :, 0] >> np.minimum(i, 63)[:, None]) & np.uint64(1)
    hi = (v[None, :, 1] >> (np.maximum(i, 64) - 64)[:, None]) & np.uint64(1)
    bits = np.where((i < 64)[:, None], lo, hi)
    return F.from_int64(bits.astype(np.int64))


def dealt_bits(
    params: SessionParams, x: npt.NDArray[np.int64], w: F.FieldArray, e: F.FieldArray
) -> F.FieldArray:
    """What a party deals in round 1, shape (B + B_w + B_e, n): the bits of x + 2^(B-1), of W_j, of e_j."""
    nb, nw, ne = blinded_bit_widths(params)
    term = F.from_int64(x + (1 << (nb - 1)))
    return np.concatenate([field_bits(term, nb), field_bits(w, nw), field_bits(e, ne)])


def _blinded_gen(
    ctx: PartyContext,
    own: F.FieldArray,
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
    report: PartyReport,
) -> PartyGen[PartyReport]:
    params, fmt = ctx.params, ctx.params.fmt
    m, n = params.m, pub.shape[0]
    nb, nw, ne = blinded_bit_widths(params)
    auth = AuthParty(ctx, rng, step)

    # --- round 1: every party's term, W_j and e_j as bits, nothing else ---
    shapes = {j: (nb + nw + ne, n) for j in ctx.all}
    dealt, _, _ = yield from auth.round("inputs as bits", deal=own, deal_shapes=shapes)
    d_x = np.stack([dealt[j] for j in ctx.all])  # (m, B_total, n)

    # --- round 2: the dealt bits' MACs; the bitness check's coin seed opened ---
    seed_share = ctx.prss.random(P_BLINDED_COIN, step, (1,))
    _, (d_mac,), (seed,) = yield from auth.round(
        "input MACs and coin", grrs=[F.mul(auth.key, d_x)], opens=[seed_share]
    )
    d = Auth(d_x, d_mac)
    auth.track([d])
    ones = F.from_ints([1] * m)

    def summed(lo: int, hi: int) -> Auth:  # sum over parties of sum_i 2^i d_i over bit rows lo..hi
        part = bits_value(Auth(d.x[:, lo:hi], d.mac[:, lo:hi]), hi - lo)  # (m, n)
        return Auth(F.lincomb(ones, part.x), F.lincomb(ones, part.mac))

    terms, w_sum, e_sum = summed(0, nb), summed(nb, nb + nw), summed(nb + nw, nb + nw + ne)
    # a = 2S + 1 with S = pub + terms - m 2^(B-1); b = W + w0
    a = auth.add_public(mul_public(terms, 2), F.from_int64(2 * (pub - m * (1 << (nb - 1))) + 1))
    b = auth.add_public(w_sum, 1 << fmt.blind_e_bits)

    # --- round 3: the duplicated product a b and the bitness product, in one round ---
    gamma = auth.coin(seed, 0, d.x.size // 2)
    grrs = [F.mul(a.x, b.x), F.mul(a.mac, b.x), *bitness_products(d, gamma)]
    _, (ab, ab_mac, y, y_mac), _ = yield from auth.round("product and bitness", grrs=grrs)
    product = Auth(ab, ab_mac)
    auth.track([product])
    claim_bits(auth, d, gamma, y, y_mac)
    z = add(product, e_sum)

    # --- rounds 4..6: the check; 7: Z to the receiver ---
    yield from auth.verify()
    yield from auth.open_to_receiver([z])
    assert auth.rounds == abort_rounds("blinded")
    return report


def blinded_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """The receiver's decoding of a ``blinded`` batch under abort: the m raw shares of Z on one degree-t
    polynomial (else :class:`AbortError` naming the step and the last round), decoded like
    ``hss.protocols.blinded_receiver``: revealed = Z 2^-(f+1+f_w), accept = Z > 0."""
    params.require_honest_majority("reveal mode 'blinded' with security 'abort'")
    fmt = params.fmt
    (val,) = receive_checked(params, inbox, [(n,)], step, abort_rounds("blinded"))
    z = F.to_double(val, fmt.frac_bits + 1 + fmt.blind_frac_bits)
    return Decisions(accept=z > 0, revealed=z)
