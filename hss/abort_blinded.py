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

1. inputs as bits: each party deals (Shamir, degree t) the N bits of its term x_j + 2^(B-1) (B =
   term_int_bits + frac_bits + 1 = 38), of W_j (ceil(log2 W_CLAMP) + blind_frac_bits = 77 bits) and of e_j
   (blind_e_bits - ceil(log2 m) bits), with its proof that they are bits (below): N + 1 + (N + 1) values
   per decision, nothing else;
2. MACs and coin: GRR reshares of r a and r E, a = 2S + 1 (linear in the dealt bits); the proof's point x
   opened (a PRSS coin seed, error-detecting opening: fixed after the dealing, unbiased);
3. product and bit proofs: the duplicated multiplication a b, (r a) b with b = W + w0 (one GRR round, as
   :meth:`AuthParty.multiply`); every dealer's (f_j(x), q_j(x)) opened with error detection and checked;
4. to 6. :meth:`AuthParty.verify` over (a, r a), (E, r E), (a b, r a b); 7. Z = a b + E, its raw degree-t
   shares to the receiver (:meth:`AuthParty.open_to_receiver`), who checks that all m lie on one
   polynomial of degree t (:func:`hss.authenticated.receive_checked`) and decodes like
   ``hss.protocols.blinded_receiver``.

Why every input is dealt as bits. A deviating party that could bring any field element for W_j could make
W + w0 negative (the revealed sign flips: the decision is wrong), one for e_j could make E exceed W + w0
(the sign is masked), and a term out of range makes Z wrap mod p (the sign becomes an interval test on the
honest sum, docs/SECURITY_ABORT.md, "The input range question"). With bits every effective input lies in
its range whatever a party sends: 0 <= W_j < 2^77, 0 <= e_j < 2^(e_bits - ceil(log2 m)) so E < w0,
|S| < 2^41; then (2S + 1)(W + w0) has the sign of S and magnitude at least w0 > E, and |Z| < 2^125 < p/2
(``FixedPoint`` checks the budget for max_parties), so accept = [Z > 0] = [S >= 0] for every choice of the
coalition's inputs. Nothing is checked on Z itself, so an abort depends only on what deviating parties sent
(and on r, the coins and beta), never on the honest parties' data: a retried step tells the coalition
nothing new.

The dealer's proof that its values are bits (instead of a MAC per dealt bit). The dealer knows its bits
d_1..d_N, so it can prove them itself, with no multiplication: f is the polynomial of degree N through
(0, mask) (mask a fresh secret random value) and (k, d_k); every d_k is a bit exactly when
V(X) = prod_{k=1..N} (X - k) divides f(X)(f(X) - 1), i.e. when there is q of degree N with
V q = f (f - 1). The dealer deals q's values at N+1..2N+1 beside f's. After the point x is opened the
parties open f(x) and q(x) (linear in the dealt shares) with error detection and check
V(x) q(x) = f(x)(f(x) - 1). Soundness: if some d_k is not a bit, V q - f (f - 1) is a nonzero polynomial of
degree <= 2N for every q the dealer can deal, zero at the random x with probability <= 2N/p; the honest
shares define f and q (raw-share openings cannot be shifted), and x is fixed only after the dealing. For
any m (also even m, or fewer than t corrupt) a corrupt dealer's sharings that are not on one degree-t
polynomial make the random combination f(x) inconsistent except with probability <= N/p (the Lagrange
weights at x are independent polynomials in x), and its error-detecting opening aborts. Privacy: f(x) =
l_0(x) mask + ..., with l_0(x) != 0 and mask uniform, is uniform; q(x) follows from f(x); the raw shares
of both carry the honest dealer's fresh share randomness. An honest dealer's proof always passes.
The first version of this module gave every dealt bit a MAC (a GRR of r d) and folded the bitness into
verify (one duplicated dot product of the bits, as sign first did): (1 + m) N field elements per
ordered pair of parties per decision; the proof costs 2 N + 2, the same rounds, and the product needs MACs
only of a and E (all rounds counted, measured in memory: 358 against 694 at m = 3, 364 against 1,378 at
m = 7; the semi-honest mode sends 3). The dealer's work is O(N^2) per decision (q's values by a fixed
(N+1) x (N+1) extension matrix: about 0.25 ms per decision).

Why not shorter or otherwise cheaper, as tried while designing:

* sharing x_j, W_j, e_j as three values with a range check with slack (open v + rho with rho a secret of
  kappa more bits): it proves |v| < 2^(bits + kappa) only, not W_j >= 0, and the margin w0 - E can be as
  small as m (m a power of two), so the sign could still be flipped;
* a bitness check by GRR of d_k^2 without MACs: the dealer knows its own d_k and can shift each reshared
  square to d_k exactly (GRR is secure only up to an additive attack);
* the product in round 2: the duplicated multiplication needs [r a], which exists only after round 2;
* Z sent to the receiver with the last verify round (6 rounds, the receiver checking CheckZero itself):
  the receiver would then see Z of a step that aborts; a deviating party could deal W_c + delta in one
  attempt and W_c in the retry (same honest W_h and E: the run step's noise), and the two openings differ
  by (2S + 1) delta: the divisibility trap DESIGN.md warns about, or S itself for a receiver that learns
  delta. Z leaves an honest party only after verify has passed.

The coalition's view before verify is dealt shares, reshares, the opened point x (public randomness) and
f_j(x), q_j(x) (uniform, above): independent of the honest inputs; r, the verify seed and the CheckZero
value are opened only after every value exists. Needs 1 <= t < m/2.

Not covered here (for the privacy accounting and the daemons): a deviating coalition may choose its own
W_c and e_c anywhere in range (W_c = 0, say): the receiver's blur is then the honest parties' W_h, the same
as when q colluders know their shares, which is what the accounting for q colluders must assume. And one
corrupt party can make the output round itself abort (a wrong or missing share to the receiver) after the
m - t >= t + 1 honest shares of the correct Z reached the receiver; if the receiver kept them, and the
step were retried with the same honest W_h and E while the party changed its in-range W_c by delta, the
two values would differ by (2S + 1) delta. The receiver's decoder returns nothing from an aborted output
round; a receiver that keeps such shares must be treated as having seen two releases of that run step.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.abort_modes import bits_proof, proof_holds, proof_openings, term_bits
from hss.authenticated import AbortError, Auth, AuthParty, add, receive_checked
from hss.fixedpoint import W_CLAMP
from hss.protocols import Decisions, PartyReport, encode_blinded_batch
from hss.randomness import SecureRandom
from hss.runtime import Inbox, Machine, PartyGen
from hss.session import PartyContext, SessionParams

__all__ = ["BLINDED_ABORT_ROUNDS", "blinded_bit_widths", "blinded_party_abort", "blinded_receiver_abort"]

#: rounds of a blinded batch under abort (1..3 the protocol, 4..6 the check, 7 Z to the receiver)
BLINDED_ABORT_ROUNDS = 7

#: PRSS purpose of this module's coin seed (hss.primitives 1..7, hss.svt 101..106, hss.authenticated 201,
#: 202, 1000+k, hss.abort_sign 301..303, hss.abort_svt 401..405)
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
    x, pub, w, report = encode_blinded_batch(ctx, values, public, blind)
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
    """The bits a party deals in round 1, shape (N, n), N = B + B_w + B_e: those of x + 2^(B-1), W_j, e_j."""
    nb, nw, ne = blinded_bit_widths(params)
    term = F.from_int64(x + (1 << (nb - 1)))
    return np.concatenate([field_bits(term, nb), field_bits(w, nw), field_bits(e, ne)])


def _blinded_gen(
    ctx: PartyContext,
    bits: F.FieldArray,
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
    report: PartyReport,
) -> PartyGen[PartyReport]:
    params, fmt = ctx.params, ctx.params.fmt
    m, n = params.m, pub.shape[0]
    nb, nw, ne = blinded_bit_widths(params)
    n_bits = nb + nw + ne
    auth = AuthParty(ctx, rng, step)

    # --- round 1: every party's mask, bits and proof values, nothing else ---
    mask = rng.field((n,))
    own = np.concatenate([mask[None], bits, bits_proof(bits, mask)])  # (2N + 2, n)
    shapes = {j: (2 * n_bits + 2, n) for j in ctx.all}
    dealt, _, _ = yield from auth.round("inputs as bits", deal=own, deal_shapes=shapes)
    d = np.stack([dealt.get(j, F.zeros(shapes[j])) for j in ctx.all])  # (m, 2N + 2, n); none when n = 0
    ones = F.from_ints([1] * m)

    def summed(lo: int, hi: int) -> F.FieldArray:  # sum over parties of sum_i 2^i d_i over bit rows lo..hi
        pow2 = F.from_ints([1 << i for i in range(hi - lo)])
        rows = np.ascontiguousarray(np.moveaxis(d[:, 1 + lo : 1 + hi], 1, 0))  # (bits, m, n)
        return F.lincomb(ones, F.lincomb(pow2, rows))

    terms, w_sum, e_sum = summed(0, nb), summed(nb, nb + nw), summed(nb + nw, n_bits)
    # a = 2S + 1 with S = pub + terms - m 2^(B-1); b = W + w0
    a_x = F.add(F.mul_scalar(terms, 2), F.from_int64(2 * (pub - m * (1 << (nb - 1))) + 1))
    b_x = F.add(w_sum, F.const(1 << fmt.blind_e_bits))

    # --- round 2: the MACs of a and E; the proof's point opened ---
    seed_share = ctx.prss.random(P_BLINDED_COIN, step, (1,))
    _, (a_mac, e_mac), (seed,) = yield from auth.round(
        "MACs and coin", grrs=[F.mul(auth.key, a_x), F.mul(auth.key, e_sum)], opens=[seed_share]
    )
    a, e = Auth(a_x, a_mac), Auth(e_sum, e_mac)
    auth.track([a, e])
    (x,) = F.to_ints(auth.coin(seed, 0, 1))
    if x <= 2 * n_bits + 1:  # probability (2N + 2) / p honestly
        raise AbortError(step, auth.rounds, "MACs and coin", "the proof's point is an interpolation point")

    # --- round 3: the duplicated product a b; every dealer's proof opened at x ---
    grrs = [F.mul(a.x, b_x), F.mul(a.mac, b_x)]
    _, (ab, ab_mac), (opened,) = yield from auth.round(
        "product and bit proofs", grrs=grrs, opens=[proof_openings(d, x)]
    )
    check_proofs(opened, x, n_bits, step, auth.rounds)
    product = Auth(ab, ab_mac)
    auth.track([product])
    z = add(product, e)

    # --- rounds 4..6: the check; 7: Z to the receiver ---
    yield from auth.verify()
    yield from auth.open_to_receiver([z])
    assert auth.rounds == BLINDED_ABORT_ROUNDS
    return report


def check_proofs(opened: F.FieldArray, x: int, n_bits: int, step: int, rnd: int) -> None:
    """:class:`AbortError` unless every dealer's proof holds at x (a dealt value is not a bit: probability
    at most 2N/p that it holds)."""
    if not proof_holds(opened, x, n_bits).all():
        raise AbortError(step, rnd, "product and bit proofs", "a party's dealt values are not all bits")


def blinded_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """The receiver's decoding of a ``blinded`` batch under abort: the m raw shares of Z on one degree-t
    polynomial (else :class:`AbortError` naming the step and the last round), decoded like
    ``hss.protocols.blinded_receiver``: revealed = Z 2^-(f+1+f_w), accept = Z > 0."""
    params.require_honest_majority("reveal mode 'blinded' with security 'abort'")
    fmt = params.fmt
    (val,) = receive_checked(params, inbox, [(n,)], step, BLINDED_ABORT_ROUNDS)
    z = F.to_double(val, fmt.frac_bits + 1 + fmt.blind_frac_bits)
    return Decisions(accept=z > 0, revealed=z)
