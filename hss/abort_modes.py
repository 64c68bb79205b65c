"""The reveal modes ``sum`` and ``sign`` under security with abort (issue 25), on hss.authenticated.

A session with ``security = "abort"`` runs these machines instead of hss.protocols' for its decisions. Up to
t < m/2 parties may deviate in any message; every honest party then either raises
:class:`hss.authenticated.AbortError` before any output leaves it, or the receiver gets exactly the
decisions of the inputs the parties chose. What the receiver learns is what the semi-honest mode reveals.

sign (12 rounds; the semi-honest inline protocol takes 7):

1. inputs and squares: each party deals the B = term_int_bits + frac_bits + 1 = 38 bits of its encoded term
   x_j + 2^(B-1) (Shamir, degree t); GRR reshares of r s, s^2 and s_{2a} s_{2a+1} for the K mask bits' PRSS
   values s, and of r r_hi (the mask's high part, a PRSS integer);
2. MACs and squares opened: GRR reshares of r b for every dealt bit b, of (r s) s and (r s_{2a}) s_{2a+1};
   the squares u = s^2 and a coin seed opened with error detection; b_i = (1 + s_i / sqrt(u_i)) / 2 and the
   pair products [b_{2a} b_{2a+1}] are then local, as in the semi-honest precompute;
3. the masked input opened and the bitness product: c = S + 2^K + r, with
   S = pub + sum_j (sum_i 2^i b_ji - 2^(B-1)) and r = sum_i 2^i b_i + 2^K r_hi, opened with error
   detection (raw degree-t shares; honest dealers' fresh polynomials make every coefficient but the value
   uniform); one GRR of y = sum_k gamma_k d_k^2 over every
   dealt bit d_k and its MAC, gamma from the coin (fixed after the bits were dealt); verify checks
   y - sum_k gamma_k d_k = 0 (a claim of :meth:`AuthParty.claim_zero`), so a dealt value that is not a bit
   fails the check except with probability 2/p;
4. to 8. the carry tree of u = [c mod 2^K < r mod 2^K] (first level local, ``compare_nodes``, its MACs by
   the same affine map with the key share in place of 1; each further level one duplicated multiplication);
9. to 11. :meth:`AuthParty.verify`; 12. the bit c_hi - r_hi - u to the receiver (raw degree-t shares), who
   checks that all m lie on one polynomial (:func:`hss.authenticated.receive_checked`).

Why the terms are dealt as bits (the range question of docs/SECURITY_ABORT.md): the comparison is [S >= 0]
only while |S| < 2^K. A registry that could bring any field element as its term would make the output an
interval test on the honest sum, or a non-bit; a check on the output would then abort depending on the honest
registries' data, and every retry of the step would let it ask another such question. Dealing each term as
B checked bits makes every effective term lie in [-2^(B-1), 2^(B-1)) whatever a party sends: |S| < 16 2^37 =
2^K as for honest terms, so the output is always the bit [S_h + x_c >= 0] for the coalition's chosen terms
x_c, and an abort depends only on what the deviating parties sent (and on r, the coins and beta), never on
the honest parties' data. The price is the dealt bits and their MACs: (B + B m) field elements per ordered
pair of parties per decision, the largest part of this mode's bytes (docs/BENCHMARKS.md).

sum (1 round, unchanged): each party sends x_j + z_j to the receiver. A deviating party can only change its
own contribution, which is choosing another term (the ideal model allows it); the receiver refuses missing,
malformed or non-canonical messages (:class:`AbortError`) and decides on the signed representative of the
sum. The revealed S is what ``sum`` reveals anyway, so no range check is needed: any function of S is
post-processing of the release the registries are charged for.

Not offered under abort yet (refused by :func:`check_abort_supported`): ``blinded``, ``svt``, the ``pooled``
and ``blocks4`` sign precomputes, the lazy coin and a precompute made ahead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.authenticated import (
    AbortError,
    Auth,
    AuthParty,
    add,
    checked_messages,
    mul_public,
    receive_checked,
    sub,
)
from hss.primitives import P_RHI, carry_advance
from hss.protocols import Decisions, PartyReport, compare_nodes, encode_batch, sum_party
from hss.randomness import SecureRandom
from hss.runtime import Inbox, Machine, PartyGen
from hss.session import PartyContext, SessionParams

__all__ = [
    "SECURITY",
    "abort_rounds",
    "check_abort_supported",
    "check_security",
    "sign_party_abort",
    "sign_receiver_abort",
    "sum_party_abort",
    "sum_receiver_abort",
]

#: The session option: "semi-honest" (hss.protocols, the default) or "abort" (this module).
SECURITY = ("semi-honest", "abort")

#: PRSS purposes of this module (hss.primitives 1..7, hss.svt 101..106, hss.authenticated 201, 202, 1000+k)
P_SIGN_S, P_SIGN_COIN = 301, 302

#: rounds of a batch under abort, per mode
_ROUNDS = {"sum": 1, "sign": 12, "blinded": 7}


def check_security(security: str) -> None:
    if security not in SECURITY:
        raise ValueError(f"security {security!r} is not one of {SECURITY}")


def check_abort_supported(
    mode: str, precompute: str = "inline", lazy: bool = False, ahead: bool = False
) -> None:
    """ValueError naming what is not offered under ``security = "abort"`` yet."""
    if mode not in _ROUNDS:
        raise ValueError(
            f"reveal mode {mode!r} is not offered with security 'abort' yet (offered: {tuple(_ROUNDS)}); "
            "use security 'semi-honest' or another reveal mode"
        )
    if mode == "sign" and (precompute != "inline" or lazy or ahead):
        what = "a lazy coin" if lazy else ("precompute_ahead" if ahead else f"sign_precompute {precompute!r}")
        raise ValueError(
            f"{what} is not offered with security 'abort' yet: the sign protocol under abort makes its own "
            "authenticated mask bits in the step (sign_precompute 'inline', no lazy coin, no "
            "precompute ahead)"
        )


def abort_rounds(mode: str) -> int:
    check_abort_supported(mode)
    return _ROUNDS[mode]


def term_bits(params: SessionParams) -> int:
    """B: the bits a party deals for its encoded term x + 2^(B-1), |x| <= fmt.term_bound < 2^(B-1)."""
    fmt = params.fmt
    return fmt.term_int_bits + fmt.frac_bits + 1


# ---------------------------------------------------------------------------------------------------------
# sum


def sum_party_abort(
    ctx: PartyContext, values: npt.ArrayLike, public: npt.ArrayLike | None, step: int
) -> Machine[PartyReport]:
    """``sum`` under abort: the semi-honest machine (a deviating party can only change its own term)."""
    machine = sum_party(ctx, values, public, step)
    machine.name = "decide[sum, abort]"
    return machine


def sum_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """The receiver's decoding of a ``sum`` batch under abort: all m messages, canonical field elements
    (else :class:`AbortError` naming the step and round 1), S decided on its signed representative."""
    try:
        got = checked_messages(inbox, {j: n for j in range(1, params.m + 1)})
    except ValueError as exc:
        raise AbortError(step, 1, "receiver: sum", str(exc)) from exc
    total = F.lincomb(F.from_ints([1] * params.m), np.stack([got[j] for j in range(1, params.m + 1)]))
    ints = [v - F.P if v > F.P // 2 else v for v in F.to_ints(total)] if n else []
    s = np.array(ints, dtype=object)
    accept = np.array([v >= 0 for v in ints], dtype=bool)
    revealed = np.array([float(v) / 2.0**params.fmt.frac_bits for v in s], dtype=np.float64)
    return Decisions(accept=accept, revealed=revealed)


# ---------------------------------------------------------------------------------------------------------
# sign


def sign_party_abort(
    ctx: PartyContext, values: npt.ArrayLike, public: npt.ArrayLike | None, step: int, rng: SecureRandom
) -> Machine[PartyReport]:
    """``sign`` under abort: the receiver learns only [S >= 0], or every honest party aborts. 12 rounds;
    ``values``, ``public``, ``step``, ``rng`` as for :func:`hss.protocols.sign_party`. Needs 1 <= t < m/2."""
    ctx.params.require_honest_majority("reveal mode 'sign' with security 'abort'")
    x, pub, report = encode_batch(ctx, values, public)
    return Machine(ctx.party, _sign_gen(ctx, x, pub, step, rng, report), "decide[sign, abort]")


def _term_bits(x: npt.NDArray[np.int64], nbits: int) -> F.FieldArray:
    """The bits of x + 2^(nbits-1), shape (nbits, n), as field elements."""
    return int_bits((x + (1 << (nbits - 1))).astype(np.uint64), nbits)


# ---------------------------------------------------------------------------------------------------------
# checked inputs: values dealt as bits (the range by construction), shared by the modes under abort


def int_bits(v: npt.NDArray[np.uint64], nbits: int) -> F.FieldArray:
    """The low ``nbits`` bits of non-negative integers ``v`` (n,), shape (nbits, n), as field elements: what a
    party deals for a value that must lie in [0, 2^nbits)."""
    bits = (v[None, :] >> np.arange(nbits, dtype=np.uint64)[:, None]) & np.uint64(1)
    return F.from_int64(bits.astype(np.int64))


def bits_value(d: Auth, nbits: int) -> Auth:
    """sum_i 2^i d_i over the bit axis of dealt bits ``d`` of shape (..., nbits, n) -> (..., n)."""
    pow2 = F.from_ints([1 << i for i in range(nbits)])
    x, mac = (np.ascontiguousarray(np.moveaxis(a, -3, 0)) for a in (d.x, d.mac))
    return Auth(F.lincomb(pow2, x), F.lincomb(pow2, mac))


def bitness_products(d: Auth, gamma: F.FieldArray) -> list[F.FieldArray]:
    """The degree-2t shares of y = sum_k gamma_k d_k^2 over every dealt bit d_k (flattened) and of its MAC
    sum_k gamma_k (r d_k) d_k: GRR-reshare both in one round, then :func:`claim_bits`. ``gamma``: public
    coins opened after the bits were dealt (one per flattened element)."""
    x, mac = d.x.reshape(-1, 2), d.mac.reshape(-1, 2)
    return [F.lincomb(gamma, F.mul(x, x))[None], F.lincomb(gamma, F.mul(mac, x))[None]]


def claim_bits(auth: AuthParty, d: Auth, gamma: F.FieldArray, y: F.FieldArray, y_mac: F.FieldArray) -> None:
    """Add the reshared (y, r y) of :func:`bitness_products` to the check and claim y - sum_k gamma_k d_k = 0:
    a dealt value that is not a bit fails verify except with probability 2/p (gamma fixed after the bits)."""
    y_auth = Auth(y, y_mac)
    auth.track([y_auth])
    x, mac = d.x.reshape(-1, 2), d.mac.reshape(-1, 2)
    auth.claim_zero(sub(y_auth, Auth(F.lincomb(gamma, x)[None], F.lincomb(gamma, mac)[None])))


def _lincomb_auth(coeffs: F.FieldArray, a: Auth) -> Auth:
    return Auth(F.lincomb(coeffs, a.x), F.lincomb(coeffs, a.mac))


def _rows(a: Auth, sl: slice) -> Auth:
    return Auth(a.x[sl], a.mac[sl])


def _stack(parts: list[Auth]) -> Auth:
    return Auth(np.concatenate([q.x for q in parts]), np.concatenate([q.mac for q in parts]))


def _sign_gen(
    ctx: PartyContext,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
    report: PartyReport,
) -> PartyGen[PartyReport]:
    params, fmt = ctx.params, ctx.params.fmt
    m, n, kbits = params.m, x.shape[0], fmt.compare_bits
    nb, npairs = term_bits(params), kbits // 2
    auth = AuthParty(ctx, rng, step)
    key = auth.key
    lo, hi = slice(0, 2 * npairs, 2), slice(1, 2 * npairs, 2)

    # --- round 1: the terms dealt as bits; the reshares of r s, s^2, s_lo s_hi and r r_hi ---
    s = ctx.prss.random(P_SIGN_S, step, (kbits, n))
    r_hi = ctx.prss.bounded(P_RHI, step, (n,), fmt.kappa + 1)
    shapes = {j: (nb, n) for j in ctx.all}
    grrs = [F.mul(key, s), F.mul(s, s), F.mul(s[lo], s[hi]), F.mul(key, r_hi)]
    dealt, (rs, u_sh, ss, r_hi_mac), _ = yield from auth.round(
        "inputs and squares", deal=_term_bits(x, nb), deal_shapes=shapes, grrs=grrs
    )
    d_x = np.stack([dealt[j] for j in ctx.all])  # (m, B, n): every party's term bits, degree t

    # --- round 2: the dealt bits' MACs, the squares' and pair products' MACs; u and the coin seed opened ---
    seed_share = ctx.prss.random(P_SIGN_COIN, step, (1,))
    grrs = [F.mul(key, d_x), F.mul(rs, s), F.mul(rs[lo], s[hi])]
    _, (d_mac, ru, ss_mac), (u, seed) = yield from auth.round(
        "term MACs and opened squares", grrs=grrs, opens=[u_sh, seed_share]
    )
    d = Auth(d_x, d_mac)
    r_top = Auth(r_hi, r_hi_mac)
    pairs_ss = Auth(ss, ss_mac)
    auth.track([d, r_top, pairs_ss])
    bits = auth.bits_from_squares(Auth(s, rs), Auth(u_sh, ru), u)  # (K, n)
    v = F.inv(F.sqrt(u))  # checked above: u is a nonzero square
    # r_a r_b = (1 + sigma_a + sigma_b + sigma_a sigma_b) / 4 = (2 r_a + 2 r_b - 1 + sigma_a sigma_b) / 4
    sig_prod = mul_public(pairs_ss, F.mul(v[lo], v[hi]))
    twice = mul_public(add(_rows(bits, lo), _rows(bits, hi)), 2)
    rr = mul_public(auth.add_public(add(twice, sig_prod), F.P - 1), _INV4)

    # --- round 3: c = S + 2^K + r opened with error detection; the bitness product of every dealt bit ---
    per_party = bits_value(d, nb)  # (m, n): every party's term + 2^(B-1)
    ones = F.from_ints([1] * m)
    terms = _lincomb_auth(ones, per_party)
    pow_k = F.from_ints([1 << i for i in range(kbits)] + [1 << kbits])
    mask = _lincomb_auth(pow_k, _stack([bits, Auth(r_top.x[None], r_top.mac[None])]))
    offset = F.from_int64(pub - m * (1 << (nb - 1)) + (1 << kbits))
    c_sh = auth.add_public(add(terms, mask), offset)
    gamma = auth.coin(seed, 0, d.x.size // 2)
    grrs = bitness_products(d, gamma)
    _, (y, y_mac), (c,) = yield from auth.round("masked terms opened", grrs=grrs, opens=[c_sh.x])
    claim_bits(auth, d, gamma, y, y_mac)
    c_hi = F.shift_right(c, kbits)
    c_lo = F.low_word(c)
    cb = ((c_lo[None, :] >> np.arange(kbits, dtype=np.uint64)[:, None]) & np.uint64(1)).astype(bool)

    # --- rounds 4..: the carry tree, each level one duplicated multiplication ---
    g_x, p_x = compare_nodes(cb, bits.x, rr.x, kbits)
    g_m, p_m = compare_nodes(cb, bits.mac, rr.mac, kbits, one=key)
    g, p = Auth(g_x, g_m), Auth(p_x, p_m)
    while g.shape[0] > 1:
        half = g.shape[0] // 2
        # the products of hss.primitives.carry_products: P_hi G_lo for every pair, P_hi P_lo but the lowest
        pairs = [(_rows(p, slice(1, 2 * half, 2)), _rows(g, slice(0, 2 * half, 2)))]
        if half > 1:
            pairs.append((_rows(p, slice(3, 2 * half, 2)), _rows(p, slice(2, 2 * half, 2))))
        prods = _stack((yield from auth.multiply(pairs)))
        gx, px = carry_advance(g.x, p.x, prods.x)
        gm, pm = carry_advance(g.mac, p.mac, prods.mac)
        g, p = Auth(gx, gm), Auth(px, pm)
    u_bit = Auth(g.x[0], g.mac[0])

    # --- output: [S >= 0] = floor(c / 2^K) - r_hi - u, after the check ---
    bit = sub(auth.constant(c_hi), add(r_top, u_bit))
    yield from auth.verify()
    yield from auth.open_to_receiver([bit])
    return report


_INV4 = pow(4, F.P - 2, F.P)


def sign_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """The receiver's decoding of a ``sign`` batch under abort: the m raw shares of the bits on one degree-t
    polynomial and every value a bit, else :class:`AbortError` naming the step and the last round."""
    params.require_honest_majority("reveal mode 'sign' with security 'abort'")
    (val,) = receive_checked(params, inbox, [(n,)], step, _ROUNDS["sign"])
    one = F.equal(val, F.const(1))
    if not (one | F.equal(val, F.zeros((n,)))).all():
        raise AbortError(step, _ROUNDS["sign"], "receiver: sign output", "a decision is not a bit")
    return Decisions(accept=np.asarray(one, dtype=bool), revealed=None)


