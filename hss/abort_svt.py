"""The sparse-vector test of federated ABCDP (hss.svt) under security with abort (issue 25).

Up to t < m/2 parties may deviate in any message; every honest party then either raises
:class:`hss.authenticated.AbortError` before any output bit is opened, or every party and the receiver get
exactly the bits of :func:`hss.svt.svt_plaintext` on the inputs the parties chose. The decision is the one
of hss.svt (accept_i iff T_i >= 0 and b_i = T_i^2 - ||S - phi_i||^2 >= 0, then the c-accept gate when
n > remaining); what is revealed is what the semi-honest protocol reveals.

Inputs dealt as proven bits (the range question of docs/SECURITY_ABORT.md): each party deals the f + 2
bits of every component of s_j + 2^(f+1) and the t_int + f + 1 bits of every tau_j + 2^(t_int+f), each
column (a component of s_j, a candidate's tau_j) with the dealer's own proof that they are bits
(:func:`hss.abort_modes.bits_proof`: f through (0, a fresh mask) and (k, d_k), q's N + 1 values; its
soundness and privacy argument is in hss.abort_blinded), checked at a coin point x opened in round 2, in
round 3 (AbortError "input bit proofs"). Whatever a party sends, once the proofs hold its s_j lies in
[-2^(f+1), 2^(f+1))^D and its tau_j in [-2^(t_int+f), 2^(t_int+f)), so |T| and |b| stay below 2^K_T and
2^K_b for the compared bits of :func:`abort_bits` (K_b may exceed the format's: a per-component range
cannot enforce the norm bound ||S_j|| <= N, so K_b covers D (m+1)^2 2^(2f+2); the bit budget is checked).
The comparisons are then always the bits [T >= 0] and [b >= 0] of some in-range inputs: the output is a bit
and an abort depends only on what the deviating parties sent, never on the honest parties' data. Without
this a party could bring a field element whose comparison "bit" is floor(b / 2^K) or a non-bit: more than
the ideal functionality. No dealt bit has a MAC: T and S enter products (q = T^2 - ||S||^2, with q's MAC
from (r T) T - sum_k (r S_k) S_k), so they get MACs of their values, one GRR of r T (n) and of r S (D) in
round 2, tracked for verify.

What is opened before the check, and why c_b waits for it: round 2 opens u = s^2 (PRSS randomness) and the
coin seed; round 3 opens every dealer's (f(x), q(x)), uniform for an honest dealer (hss.abort_blinded), and
the seed of the check before the masks (rounds 4 and 5, :meth:`AuthParty.check_upto`: a CheckZero with r
kept secret over every pair of rounds 1 and 2, so every mask bit is a bit before anything is masked by it;
a square shifted by a deviating party's reshare would make a mask bit one of two field elements that party
can compute, and the masked comparison opened over it would show that position of T or b: found in sign by
independent reviews, 2026-11-30, docs/SECURITY_ABORT.md). The masked comparisons are opened in round 6,
after both checks. c_T alone could be opened in round 3: T is linear
in the dealt values, so whatever a deviating party dealt, c_T minus what it knows is T_h + r_T + const,
masked as in the semi-honest protocol. c_b cannot: b = T^2 - ||S - phi||^2 is not linear, and a dealt
"bit" worth 2^100 (say) puts 2 T_h T_c and 2 S_h . S_c, products of the honest data with huge known values,
far above the K_b + kappa + 1 bits of the mask r_b: the opening would show the honest T_h and S_h even
though every honest party aborts right after it. (The first version of this module, a MAC per dealt bit and
the bitness folded into verify, opened c_b in round 3, before any check of the bits: that leak.) Hence one
round more than that version: the check needs x, which can be opened only after the dealing (in round 2: a
rushing party sees the honest seed shares of the round it deals in), so it ends with round 3, and the b tree
(the longer one) starts after c_b in round 4. Fusing the AND into the b tree's last two levels (c_T opened
in round 3; x P_top in the b tree's third level, (x P_top) G_rest in its fourth) would win the round back
only for b trees of at most 12 first-level nodes, K_b <= 48 (m = 3 at f = 16; at m = 7, K_b = 50): a
product of round k + 4 has degree 16 in the nodes local after round k, and the T tree's last carry term
takes 3.5 of them (its nodes exist a round earlier). Not done.

Rounds (:func:`abort_svt_rounds`): 15 without the gate, 20..22 with it (hss.svt: 7; 8..9) for the formats
of hss.svt's docstring (the first version: 12 and 17..19; 13 and 18..20 before the check before the masks).
Bytes (all messages of a batch at D = 64,
n = 200, f = 16, max_parties = m, in memory): m = 3, 78 kB per candidate without the gate, 86 kB with it
(hss.svt: 29 and 32 kB, 2.7x); m = 7, 568 kB and 623 kB (207 and 230 kB, 2.7x). The first version: 82 and
90 kB at m = 3, 669 and 724 kB at m = 7 (the inputs with a MAC per bit, (1 + m) N field elements per ordered
pair, against 2 N + 2 per column for the proof). Most of the rest is the mask bits' authenticated monomials
(rounds 1 and 2: 70 of the 78 kB at m = 3).

1. the input bits with their proofs dealt; GRR of r s, s^2 and the pair products s_a s_b inside each group of
   4 mask bits (the mask bits' PRSS values s), of r r_hi (each comparison's high mask) and, with the gate, of
   r beta';
2. GRR of r T and r S, of (r s) s and (r s_a) s_b; the triple products s_a (s_b s_c) with their MACs
   (r s_a)(s_b s_c); the quadruple (s_0 s_1)(s_2 s_3); q = T^2 - ||S||^2 (so b is reshared to degree t: in
   hss.svt it is degree 2t); the squares u and a coin seed opened with error detection; the mask bits
   b_k = (1 + s_k / sqrt(u_k)) / 2; the proofs' point x from the seed;
3. GRR of the quadruple's MAC (r s_0 s_1)(s_2 s_3) and of q's MAC (r T) T - sum_k (r S_k) S_k; the check's
   seed and every dealer's (f(x), q(x)) for each column opened with error detection, the proofs checked (a
   non-bit, or a dealing not on one degree-t polynomial, aborts here);
4. and 5. the check before the masks (GRR of its product, then its opening; abort unless 0);
6. c_T = T + 2^K_T + r_T and c_b = b + 2^K_b + r_b opened with error detection (raw degree-t shares: a
   rushing party cannot shift them);
7. ... the radix-4 first level of both carry trees is local (a node is a linear map of the 16 monomials of
   its 4 bits; the MACs by the same map, the constant monomial's MAC being the key share); each level of
   both trees in parallel is one duplicated multiplication (:meth:`AuthParty.multiply`), then the AND is
   one more (the semi-honest fusion ends in a degree-2t product, which cannot be opened with detection);
   with the gate (n > remaining): P_i = sum_{l<i} acc_l is local; a check of everything so far that keeps
   the MAC key secret (3 rounds, :meth:`AuthParty.check_keeping_key`) precedes the masked opening of
   remaining - 1 - P_i (1 round): without it an additive error in the trees, multiplied by a secret carry
   bit, would make the opened value reveal that bit. Then the gate's tree and its AND with acc;
8. :meth:`AuthParty.verify` (3 rounds); the output bits opened with error detection to every party and,
   in the same round, their raw shares to the receiver, who checks that all m lie on one polynomial of
   degree t (:func:`svt_decide_receiver_abort`).

Soundness of the products whose MAC is made a round after their value (the quadruple, q): z = x y + d1 in
round k, [r z] = [r x] y + d2 in round k + 1; both d1 and d2 are fixed without knowledge of the MAC key r
(which only verify opens), so d2 - r d1 = 0 only with probability 1/p, as for :meth:`AuthParty.multiply`.
An additive error e in the reshared r T (or r S_k) puts e into the pair (T, r T) and e T into q's MAC, both
fixed before r is opened: verify's random combination fails except with probability about 2/p. A masked
value opened before verify (c_T, c_b) is T or b, of in-range inputs (the proofs passed), plus an additive
error the adversary knows (T is linear in the inputs, q's error is additive), hidden by a mask of bits that
are bits (the check before the masks passed), as in the semi-honest protocol.

Not covered (as for every mode under abort): fairness, identifiable abort, selective abort of the openings
to the parties (a corrupt party can make one honest party abort and not another, also at the check before
the gate; the receiver, which needs all m shares, aborts whenever an honest party does). A session whose
step aborted cannot continue its SVT state (parties.abcdp: the noise of the batch was drawn); the run is
retried in a new session.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.abort_modes import bits_proof, int_bits, proof_holds, proof_openings
from hss.authenticated import AbortError, Auth, AuthParty, add, mul_public, receive_checked, sub
from hss.fixedpoint import SIGNED_LIMIT_BITS
from hss.primitives import carry_advance
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Inbox, Machine, PartyGen
from hss.session import PartyContext, SessionParams
from hss.svt import (
    SvtInputs,
    SvtPartyResult,
    _Block,
    _block_view,
    _first_level,
    _highs,
    _layout,
    _pairs,
    encode_svt_inputs,
)
from hss.svt_format import I64, BoolArray, SvtFormat, prss_bits

__all__ = ["abort_bits", "abort_svt_rounds", "svt_decide_party_abort", "svt_decide_receiver_abort"]

#: PRSS purposes (hss.primitives 1..7, hss.svt 101..106, hss.authenticated 201, 202, 1000+k,
#: hss.abort_sign 301..303, hss.abort_blinded 321)
P_SVT_S, P_SVT_RHI, P_SVT_COIN, P_SVT_MID, P_SVT_PRE = 401, 402, 403, 404, 405


# ---------------------------------------------------------------------------------------------------------
# the format under abort: input bits, compared bits, rounds


def abort_bits(fmt: SvtFormat, m: int) -> tuple[int, int, int, int]:
    """(s_bits, tau_bits, K_T, K_b): the bits dealt per component of s_j and per tau_j, and the compared
    bits of [T >= 0] and [b >= 0] for inputs anywhere in the dealt ranges (module docstring). ValueError
    if a comparison does not fit the bit budget K + kappa + 1 + ceil(log2 C(m, t)) <= 126."""
    f, a = fmt.frac_bits, fmt.t_int_bits + fmt.frac_bits
    t_max = fmt.tau_bound + m * (1 << a)  # |T| <= |e| + m 2^a
    u_max = (m + 1) << (f + 1)  # |S_k - phi_ik| <= m 2^(f+1) + 2^(f+1)
    k_t = max(fmt.t_bits, t_max.bit_length())
    k_b = max(fmt.b_bits, (t_max * t_max).bit_length(), (fmt.dim * u_max * u_max).bit_length())
    need = k_b + fmt.kappa + 1 + prss_bits(m)
    if need > SIGNED_LIMIT_BITS:
        raise ValueError(
            f"bit budget exceeded under security 'abort': [b >= 0] needs K_b = {k_b} compared bits for "
            f"inputs dealt as bits (D = {fmt.dim}, m = {m}, f = {fmt.frac_bits}, "
            f"t_int_bits = {fmt.t_int_bits}); "
            f"{need} > {SIGNED_LIMIT_BITS} with kappa = {fmt.kappa}: lower frac_bits or kappa"
        )
    return f + 2, a + 1, k_t, k_b


def _levels(nodes: int) -> int:
    """Rounds of a carry tree from ``nodes`` first-level nodes to its bit (one node: local)."""
    return max(0, (nodes - 1).bit_length())


def _nodes(kbits: int) -> int:
    return -(-kbits // 4)


def abort_svt_rounds(fmt: SvtFormat, m: int, n: int, remaining: int) -> int:
    """Rounds of :func:`svt_decide_party_abort` for a batch of n with ``remaining`` accepts left."""
    _, _, k_t, k_b = abort_bits(fmt, m)
    total = 6 + max(_levels(_nodes(k_t)), _levels(_nodes(k_b))) + 1
    if n > remaining:
        total += 3 + 1 + _levels(_nodes(fmt.gate_bits(n))) + 1
    return total + 3 + 1


# ---------------------------------------------------------------------------------------------------------
# the machines


def svt_decide_party_abort(
    ctx: PartyContext,
    fmt: SvtFormat,
    feature_sum: npt.ArrayLike,
    phibar: npt.ArrayLike,
    tau: npt.ArrayLike,
    eps_abc: float,
    remaining: int,
    step: int,
    rng: SecureRandom,
) -> Machine[SvtPartyResult]:
    """``svt`` under abort: the arguments of :func:`hss.svt.svt_decide_party`; the same opened bits, or
    every honest party raises AbortError before any bit is opened. Needs 1 <= t < m/2."""
    what = "reveal mode 'svt' with security 'abort'"
    inputs = encode_svt_inputs(ctx, fmt, feature_sum, phibar, tau, eps_abc, remaining, step, what)
    return Machine(ctx.party, _svt_gen(ctx, fmt, inputs, rng), "svt[abort]")


def svt_decide_receiver_abort(
    params: SessionParams, inbox: Inbox, n: int, step: int, rounds: int = 0
) -> BoolArray:
    """The receiver's decoding of the last round: the m raw shares of the bits on one polynomial of degree t
    and every value a bit, else :class:`AbortError` naming the step and ``rounds`` (the last round, from
    :func:`abort_svt_rounds`; 0 if not given)."""
    params.require_honest_majority("reveal mode 'svt' with security 'abort'")
    (val,) = receive_checked(params, inbox, [(n,)], step, rounds)
    bits = _to_bits(val)
    if bits is None:
        raise AbortError(step, rounds, "receiver: svt output", "a decision is not a bit")
    return bits


def _to_bits(val: F.FieldArray) -> BoolArray | None:
    one = F.equal(val, F.const(1))
    return np.asarray(one, dtype=bool) if (one | F.equal(val, F.zeros(val.shape[:-1]))).all() else None


def _with_proofs(
    bits: F.FieldArray, rng: SecureRandom, s_bits: int, dim: int, tau_bits: int, n: int
) -> F.FieldArray:
    """What a party deals: for s_j (columns: the D components) and tau_j (columns: the n candidates) the
    rows (mask, bits, q's values) of :func:`hss.abort_modes.bits_proof`, flattened: a fresh random mask
    per column (f's value at 0), the bits at 1..N, q at N+1..2N+1."""
    out = []
    for rows, nb, cols in ((bits[: s_bits * dim], s_bits, dim), (bits[s_bits * dim :], tau_bits, n)):
        b = rows.reshape(nb, cols, 2)
        mask = rng.field((cols,))
        out.append(np.concatenate([mask[None], b, bits_proof(b, mask)]).reshape(-1, 2))
    return np.concatenate(out)


def _input_bits(s_int: I64, tau_int: I64, s_bits: int, tau_bits: int) -> F.FieldArray:
    """What a party deals: the bits of s_j + 2^(s_bits-1) (s_bits, D) and of tau_j + 2^(tau_bits-1)
    (tau_bits, n), flattened into one (s_bits D + tau_bits n,) array."""
    parts = []
    for v, nb in ((s_int, s_bits), (tau_int, tau_bits)):
        shifted = v + (1 << (nb - 1))
        if (shifted < 0).any() or (shifted >= 1 << nb).any():
            raise ValueError(f"an input is outside the dealt range [-2^{nb - 1}, 2^{nb - 1})")
        parts.append(int_bits(shifted.astype(np.uint64), nb).reshape(-1, 2))
    return np.concatenate(parts)


# ---------------------------------------------------------------------------------------------------------
# authenticated pieces


def _rows(a: Auth, sl: slice | int) -> Auth:
    return Auth(a.x[sl], a.mac[sl])


def _stack(parts: list[Auth]) -> Auth:
    return Auth(np.concatenate([q.x for q in parts]), np.concatenate([q.mac for q in parts]))


def _lincomb(coeffs: F.FieldArray, a: Auth) -> Auth:
    return Auth(F.lincomb(coeffs, a.x), F.lincomb(coeffs, a.mac))


def _prefix_before(a: F.FieldArray) -> F.FieldArray:
    """sum_{l < i} a_l along axis 0 (Hillis-Steele doubling, then the exclusive shift)."""
    incl = a.copy()
    shift = 1
    while shift < a.shape[0]:
        incl[shift:] = F.add(incl[shift:], incl[:-shift].copy())
        shift *= 2
    return F.sub(incl, a)


class _Tree:
    """One comparison's carry tree on authenticated nodes: bit = k - G_root once one node is left."""

    def __init__(self, k: Auth, g: Auth, p: Auth) -> None:
        self.k, self.g, self.p = k, g, p
        self.bit: Auth | None = None
        self._settle()

    def _settle(self) -> None:
        if self.g.shape[0] == 1:
            self.bit = sub(self.k, _rows(self.g, 0))

    def pairs(self) -> list[tuple[Auth, Auth]]:
        """This level's products (hss.primitives.carry_products): P_hi G_lo, and P_hi P_lo but the lowest."""
        half = self.g.shape[0] // 2
        out = [(_rows(self.p, slice(1, 2 * half, 2)), _rows(self.g, slice(0, 2 * half, 2)))]
        if half > 1:
            out.append((_rows(self.p, slice(3, 2 * half, 2)), _rows(self.p, slice(2, 2 * half, 2))))
        return out

    def apply(self, prods: list[Auth]) -> None:
        st = _stack(prods)
        gx, px = carry_advance(self.g.x, self.p.x, st.x)
        gm, pm = carry_advance(self.g.mac, self.p.mac, st.mac)
        self.g, self.p = Auth(gx, gm), Auth(px, pm)
        self._settle()


def _and_gen(auth: AuthParty, trees: list[_Tree]) -> PartyGen[Auth]:
    """Every tree one level per round (all in the same duplicated multiplication), then the product of
    their bits (one more round per extra tree)."""
    while any(tr.bit is None for tr in trees):
        todo = [(tr, tr.pairs()) for tr in trees if tr.bit is None]
        prods = yield from auth.multiply([pq for _, pairs in todo for pq in pairs])
        pos = 0
        for tr, pairs in todo:
            tr.apply(prods[pos : pos + len(pairs)])
            pos += len(pairs)
    out = trees[0].bit
    assert out is not None
    for tr in trees[1:]:
        assert tr.bit is not None
        (out,) = yield from auth.multiply([(out, tr.bit)])
    return out


def _sigma(
    auth: AuthParty, b: _Block, s: Auth, v: F.FieldArray, pairs: Auth | None, highs: Auth | None
) -> Auth:
    """The block's 2^g authenticated monomials sigma^mask = s^mask prod_{k in mask} v_k (sigma = 2 r - 1),
    stacked (2^g, ng, n); the empty monomial is the constant 1 (MAC: the key share)."""
    sv = Auth(_block_view(s.x, b), _block_view(s.mac, b))
    vv = _block_view(v, b)
    shape = sv.x.shape[1:]
    mono: dict[int, Auth] = {0: Auth(np.broadcast_to(F.const(1), shape), np.broadcast_to(auth.key, shape))}
    for i in range(b.g):
        mono[1 << i] = _rows(sv, i)
    for idx, (i, j) in enumerate(_pairs(b.g)):
        assert pairs is not None
        mono[(1 << i) | (1 << j)] = _rows(pairs, idx)
    for idx, combo in enumerate(_highs(b.g)):
        assert highs is not None
        mono[sum(1 << i for i in combo)] = _rows(highs, idx)
    vprod: dict[int, F.FieldArray] = {0: np.broadcast_to(F.const(1), shape)}
    for msk in range(1, 1 << b.g):
        low = msk & -msk
        vprod[msk] = vv[low.bit_length() - 1] if msk == low else F.mul(vprod[msk ^ low], vprod[low])
    terms = [mul_public(mono[msk], vprod[msk]) for msk in range(1 << b.g)]
    return Auth(np.stack([q.x for q in terms]), np.stack([q.mac for q in terms]))


def _tree(
    auth: AuthParty, c: F.FieldArray, kbits: int, r_top: Auth, blocks: list[_Block], sigma: dict[int, Auth]
) -> _Tree:
    """The comparison's first level (hss.svt._first_level on the values and, by the same map, the MACs)."""
    sig_x = {key: a.x for key, a in sigma.items()}
    sig_m = {key: a.mac for key, a in sigma.items()}
    tx = _first_level(c, kbits, r_top.x, blocks, sig_x)
    tm = _first_level(c, kbits, r_top.mac, blocks, sig_m)
    assert tx.g is not None and tx.p is not None and tm.g is not None and tm.p is not None
    k = sub(auth.constant(F.shift_right(c, kbits)), r_top)
    return _Tree(k, Auth(tx.g, tm.g), Auth(tx.p, tm.p))


# ---------------------------------------------------------------------------------------------------------
# the party's generator


def _svt_gen(
    ctx: PartyContext, fmt: SvtFormat, inputs: SvtInputs, rng: SecureRandom
) -> PartyGen[SvtPartyResult]:
    s_int, phi, tau_int, e_int = inputs.s_int, inputs.phi, inputs.tau_int, inputs.e_int
    remaining, step, clamped = inputs.remaining, inputs.step, inputs.clamped
    params = ctx.params
    m, n, dim = params.m, phi.shape[0], fmt.dim
    s_bits, tau_bits, k_t, k_b = abort_bits(fmt, m)
    gate = n > remaining
    kbits = [k_t, k_b] + ([fmt.gate_bits(n)] if gate else [])
    blocks, bases = _layout(kbits)
    ktot = sum(kbits)
    auth = AuthParty(ctx, rng, step)
    key = auth.key

    # --- round 1: the inputs as bits; GRR of r s, s^2, the pair products, r r_hi (and r beta') ---
    s = ctx.prss.random(P_SVT_S, step, (ktot, n))
    r_hi = ctx.prss.bounded(P_SVT_RHI, step, (len(kbits), n), fmt.kappa + 1)
    mid = auth.kept_key_check(P_SVT_MID)  # the check before the gate
    pre = auth.kept_key_check(P_SVT_PRE)  # the check before c_T, c_b
    sb = {id(b): _block_view(s, b) for b in blocks}
    pair_x = [
        np.stack([F.mul(sb[id(b)][i], sb[id(b)][j]) for i, j in _pairs(b.g)]) for b in blocks if b.g >= 2
    ]
    own = _with_proofs(_input_bits(s_int, tau_int, s_bits, tau_bits), rng, s_bits, dim, tau_bits, n)
    length = own.shape[0]
    grrs = [F.mul(key, s), F.mul(s, s), F.mul(key, r_hi), *pre.reshares(key), *pair_x]
    grrs += mid.reshares(key) if gate else []
    dealt, res, _ = yield from auth.round(
        "inputs and squares", deal=own, deal_shapes={j: (length,) for j in ctx.all}, grrs=grrs
    )
    rs, u_sh, r_hi_mac, r_pre_beta, r_pre_pad = res[:5]
    pairs_t = res[5 : 5 + len(pair_x)]
    mid_reshares = res[-2:] if gate else []  # r beta', r rho' of the check before the gate
    d_all = np.stack([dealt[j] for j in ctx.all])  # (m, length): every party's rows, degree t
    cut = (2 * s_bits + 2) * dim
    d_s = d_all[:, :cut].reshape(m, 2 * s_bits + 2, dim, 2)  # (mask, bits, proof) per component of s_j
    d_t = d_all[:, cut:].reshape(m, 2 * tau_bits + 2, n, 2)  # the same per tau_j

    # T and S, linear in the dealt bits (their MACs: one GRR each of r T and r S_k in round 2)
    ones_m, ones_d = F.from_ints([1] * m), F.from_ints([1] * dim)

    def value(rows: F.FieldArray, nb: int) -> F.FieldArray:  # sum_j sum_i 2^i d_ji - m 2^(nb-1)
        pow2 = F.from_ints([1 << i for i in range(nb)])
        per = F.lincomb(pow2, np.ascontiguousarray(np.moveaxis(rows[:, 1 : 1 + nb], 1, 0)))
        return F.add(F.lincomb(ones_m, per), F.const((-m * (1 << (nb - 1))) % F.P))

    big_s = value(d_s, s_bits)  # sum_j s_j (D,)
    big_t = F.add(value(d_t, tau_bits), F.const(e_int % F.P))  # sum_j tau_j + e (n,)
    q_x = F.sub(F.mul(big_t, big_t), F.lincomb(ones_d, F.mul(big_s, big_s))[None])

    # --- round 2: MACs of T, S, the squares and pairs; triples, quadruples, q; u and a seed opened ---
    rsb = {id(b): _block_view(rs, b) for b in blocks}
    paired = [b for b in blocks if b.g >= 2]
    pair_of = {id(b): x for b, x in zip(paired, pairs_t, strict=True)}
    pair_mac_x = [np.stack([F.mul(rsb[id(b)][i], sb[id(b)][j]) for i, j in _pairs(b.g)]) for b in paired]
    high_x, high_m, quad_x = [], [], []
    for b in blocks:
        if b.g < 3:
            continue
        pr = {pq: pair_of[id(b)][i] for i, pq in enumerate(_pairs(b.g))}
        triples = [c for c in _highs(b.g) if len(c) == 3]
        high_x.append(np.stack([F.mul(sb[id(b)][c[0]], pr[(c[1], c[2])]) for c in triples]))
        high_m.append(np.stack([F.mul(rsb[id(b)][c[0]], pr[(c[1], c[2])]) for c in triples]))
        if b.g == 4:
            quad_x.append(F.mul(pr[(0, 1)], pr[(2, 3)])[None])
    seed_share = ctx.prss.random(P_SVT_COIN, step, (1,))
    grrs = [F.mul(key, big_t), F.mul(key, big_s), F.mul(rs, s), q_x, *pair_mac_x, *high_x, *high_m, *quad_x]
    _, res, (u, seed) = yield from auth.round(
        "input MACs and opened squares", grrs=grrs, opens=[u_sh, seed_share]
    )
    t_mac, s_mac, ru, q_t = res[:4]
    np_, nh = len(paired), len(high_x)
    pair_macs, res = res[4 : 4 + np_], res[4 + np_ :]
    highs_t, highs_mt, quads_t = res[:nh], res[nh : 2 * nh], res[2 * nh :]
    big_t_auth, big_s_auth = Auth(big_t, t_mac), Auth(big_s, s_mac)
    r_top = Auth(r_hi, r_hi_mac)
    pair_auth = {id(b): Auth(x, mc) for b, x, mc in zip(paired, pairs_t, pair_macs, strict=True)}
    tripled = [b for b in blocks if b.g >= 3]
    high_auth = {id(b): Auth(x, mc) for b, x, mc in zip(tripled, highs_t, highs_mt, strict=True)}
    auth.track([big_t_auth, big_s_auth, r_top, *pair_auth.values(), *high_auth.values()])
    armed = auth.arm(pre, r_pre_beta, r_pre_pad)  # the pads are tracked here (AuthParty.check_upto)
    armed_mid = auth.arm(mid, *mid_reshares) if gate else None
    bits, v = auth.bits_with_roots(Auth(s, rs), Auth(u_sh, ru), u)  # (K_total, n); tracks both pairs
    upto = auth.checkpoint()  # the check before c_T, c_b covers these, all reshared before its seed

    (point,) = F.to_ints(auth.coin(seed, 0, 1))
    if point <= 2 * max(s_bits, tau_bits) + 1:  # probability (2N + 2) / p honestly
        raise AbortError(step, auth.rounds, "input bit proofs", "the proof's point is an interpolation point")

    def mask(ci: int) -> Auth:
        kb = kbits[ci]
        pow2 = F.from_ints([1 << i for i in range(kb)] + [1 << kb])
        rows = _stack([_rows(bits, slice(bases[ci], bases[ci] + kb)), _rows(r_top, slice(ci, ci + 1))])
        return _lincomb(pow2, rows)

    # --- round 3: MACs of the quadruples and of q; every dealer's bit proofs opened at the point, checked ---
    quads = [b for b in blocks if b.g == 4]
    quad_mac_x = [F.mul(pair_auth[id(b)].mac[0], pair_of[id(b)][5])[None] for b in quads]  # (0,1), (2,3)
    q_mac_x = F.sub(F.mul(t_mac, big_t), F.lincomb(ones_d, F.mul(s_mac, big_s))[None])
    opens = [pre.seed_share, proof_openings(d_s, point), proof_openings(d_t, point)]
    _, res, (check_seed, proof_s, proof_t) = yield from auth.round(
        "input bit proofs", grrs=[q_mac_x, *quad_mac_x], opens=opens
    )
    if not (proof_holds(proof_s, point, s_bits).all() and proof_holds(proof_t, point, tau_bits).all()):
        raise AbortError(step, auth.rounds, "input bit proofs", "a party's dealt inputs are not all bits")
    q_mac, quad_macs = res[0], res[1:]
    quad_auth = {id(b): Auth(x, mc) for b, x, mc in zip(quads, quads_t, quad_macs, strict=True)}

    # --- rounds 4, 5: the check before the masked comparisons (every mask bit a bit, r kept secret) ---
    yield from auth.check_upto(armed, check_seed, upto, "check before the masks")
    auth.track([Auth(q_t, q_mac), *quad_auth.values()])

    # --- round 6: c_T and c_b opened (only now: b is not linear in the inputs, module docstring) ---
    c_t = auth.add_public(add(big_t_auth, mask(0)), 1 << kbits[0])
    # b = q + 2 <S, phi_i> - ||phi_i||^2 at degree t (q reshared in round 2), opened masked
    phi_f = F.from_int64(phi)
    phi2 = F.lincomb(ones_d, np.ascontiguousarray(np.moveaxis(F.mul(phi_f, phi_f), 1, 0)))
    dot2 = F.mul_scalar(F.matmul(phi_f, big_s), 2)
    c_b_x = F.add(F.add(q_t, dot2), F.add(F.sub(F.const(1 << kbits[1]), phi2), mask(1).x))
    _, _, (c_t_open, c_b_open) = yield from auth.round("masked comparisons opened", opens=[c_t.x, c_b_x])

    # the authenticated monomials of every block, then both first levels
    sigma: dict[int, Auth] = {}
    for b in blocks:
        highs = high_auth.get(id(b))
        if highs is not None and b.g == 4:
            highs = _stack([highs, quad_auth[id(b)]])
        sigma[id(b)] = _sigma(auth, b, Auth(s, rs), v, pair_auth.get(id(b)), highs)
    tree_t = _tree(auth, c_t_open, kbits[0], _rows(r_top, 0), [b for b in blocks if b.cmp == 0], sigma)
    tree_b = _tree(auth, c_b_open, kbits[1], _rows(r_top, 1), [b for b in blocks if b.cmp == 1], sigma)
    out = yield from _and_gen(auth, [tree_t, tree_b])

    if gate:  # the c-accept gate: out_i [P_i <= remaining - 1], opened only after a check of acc
        val = auth.add_public(
            mul_public(Auth(_prefix_before(out.x), _prefix_before(out.mac)), F.P - 1), remaining - 1
        )
        assert armed_mid is not None
        yield from auth.check_keeping_key(armed_mid)
        c_g = auth.add_public(add(val, mask(2)), 1 << kbits[2])
        _, _, (c_g_open,) = yield from auth.round("gate: masked count opened", opens=[c_g.x])
        tree_g = _tree(auth, c_g_open, kbits[2], _rows(r_top, 2), [b for b in blocks if b.cmp == 2], sigma)
        out = yield from _gate_and(auth, out, tree_g)

    yield from auth.verify()
    opened = yield from _open_all(auth, out)
    bits_out = _to_bits(opened)
    if bits_out is None:
        raise AbortError(step, auth.rounds, "output", "an opened decision is not a bit")
    return SvtPartyResult(revealed=bits_out, clamped=clamped)


def _gate_and(auth: AuthParty, acc: Auth, tree: _Tree) -> PartyGen[Auth]:
    while tree.bit is None:
        prods = yield from auth.multiply(tree.pairs())
        tree.apply(prods)
    (out,) = yield from auth.multiply([(acc, tree.bit)])
    return out


def _open_all(auth: AuthParty, out: Auth) -> PartyGen[F.FieldArray]:
    """:meth:`AuthParty.open` to every party with, in the same round, the same raw shares to the receiver."""
    gen = auth.open([out])
    outbox = next(gen)
    first = next(iter(outbox.values()))
    inbox = yield {**outbox, RECEIVER: first.copy()}
    try:
        gen.send(inbox)
    except StopIteration as stop:
        return stop.value[0]
    raise AssertionError("AuthParty.open takes one round")
