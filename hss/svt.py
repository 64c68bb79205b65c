"""The sparse-vector test of federated ABCDP on Shamir shares, with the exact c-accept stop.

Party j holds its feature sum S_j = sum_i phi(y_i) over its records (a D-vector, ||phi|| = 1, so
||S_j|| <= N_j) and its noise share tau_j[i] = m_j - nu_{j,i} for each of the n candidates; N (all records),
the candidates' simulated mean embeddings phibar_i and eps_abc are public. Candidate i is accepted iff

    t_i >= 0  and  rho_i^2 <= t_i^2,   t_i = eps_abc + sum_j tau_j[i],   rho_i = ||S/N - phibar_i||,

which is rho_i + nu_i <= eps_abc + m without a square root. Only the accept bits up to and including the
``remaining``-th accept of the batch are revealed (later ones open as 0, "suppressed"); the revealed bits
are opened to every party and to the receiver (the coordinator).

Encoding (:class:`SvtFormat`): every quantity is put on the scale of a mean, with f fraction bits:
s_j = round(2^f S_j / N), phi_i = round(2^f phibar_i), tau_j = round(2^f tau_j) clamped to
|tau_j| < 2^(t_int_bits + f) (mask reported to the party), e = round(2^f eps_abc) (refused out of range).
With S = sum_j s_j, T_i = e + sum_j tau_j[i] and U_i = S - phi_i (integers), the protocol decides exactly

    accept_i  <=>  T_i >= 0  and  b_i = T_i^2 - ||S||^2 + 2 <S, phi_i> - ||phi_i||^2 >= 0.

Dividing S_j by N before rounding keeps b independent of N: |b| < ((m+1) 2^(t_int_bits+f))^2, so the bit
budget does not grow with the number of records (the form N^2 t^2 - ||S - N phibar||^2 would need 2 log2 N
more bits, 34 at N = 10^5, which does not fit next to a 64-bit statistical mask). The price is the rounding
of each S_j/N: |rho_enc - rho| <= (m+1) sqrt(D) 2^-(f+1) and |t_enc - t| <= (m+1) 2^-(f+1) (no clamping), so
the decision equals the real-valued one whenever |rho - t| > :meth:`SvtFormat.margin` =
(m+1)(sqrt(D)+1) 2^-(f+1) (plus float slack). :func:`svt_plaintext` decides the same integers in the clear.

Protocol (honest majority t < m/2, m >= 3; all openings additively masked with a pairwise zero-sharing):

  round 1   each party Shamir-shares (degree t) s_j and tau_j; input-independent LTZ precompute in the
            same messages: PRSS [s_k] for every mask bit, opened s_k^2 (bits r_k = (1 + s_k/sqrt(s_k^2))/2,
            as in hss.primitives), and GRR products s_a s_b of every pair inside each group of 4 mask bits.
  local     [T] = e + sum [tau_j]; ||S||^2 (D local products) and T^2 are degree 2t < m; <S, phi_i> linear.
  round 2   masked openings c = x + 2^K + r of both comparisons (x = T, degree t; x = b, degree 2t), plus
            the GRR of the triple and quadruple products inside each group of 4 mask bits.
  local     first carry-tree level in radix 4: a node (G, P) = ([r > c], [r == c]) over 4 bits is a linear
            combination of the 16 monomials of the 4 bits, with public coefficients set by c's 4 bits.
  rounds    both carry trees in parallel, one GRR round per level; the AND [T >= 0][b >= 0] is fused into
            the last level (x (k - G2 - P2 G1 - P2 P1 G0) = x(k - G2) - (x P2)(G1 + P1 G0): one GRR round of
            pair products, then a local product of degree 2t).
  gate      (only when n > remaining) P_i = sum_{l<i} acc_l (local); one round opens P masked (against
            remaining - 1, K = bitlen(n-1) bits) and reshares acc to degree t; out_i = acc_i [P_i <= r-1]
            by the same fused AND.
  output    the out bits (degree 2t) opened to all parties and the receiver in one round.

Rounds per batch (:meth:`SvtFormat.rounds`, equal to the count measured in memory, tested): for the default
format and every :meth:`SvtFormat.for_plan` format with m <= 10 (K_T = 26..29, K_b = 51..58 compared bits),
7 without the gate (n <= remaining), with the gate 8 for n <= 16, 9 for n <= 4096, 10 for n <= 2^24. Inputs
are shared in round 1, so 6 of the 7 come after the inputs exist. Radix 4 costs 2.5 field elements per mask
bit in round 1 and 1.25 in round 2 (radix 2: 1.5 in round 1) and saves one round. Measured at D = 64,
n = 200: m = 3, 30 kB per candidate; m = 7, 211 kB (all messages of the batch, 7 rounds).

What each side learns: parties: the opened bits (the public SVT output) and their own clamp mask; the
opened masked values s^2 (uniform squares), x + 2^K + r and P + 2^K + r hide x with statistical distance
2^-kappa per value; every other message is a fresh degree-t sharing or a masked contribution. The receiver
gets only the m masked contributions of the final opening, uniform given the bits.

Threat model: honest-but-curious parties, t < m/2, receiver not colluding with parties; malicious
deviation and timing are out of scope (the output is checked to be bits, which catches some corruption).
A coalition of more than t parties (in particular K-1 = m-1 parties) reconstructs the honest parties'
Shamir-shared s_j and tau_j and learns everything. And even under a different protocol that revealed only
t_i to such a coalition, the honest party's noise share alone is a difference of Gamma(1/h, 1) variables,
not a Laplace: its density diverges at 0 for h >= 3, so it gives no epsilon-DP guarantee by itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.fixedpoint import SIGNED_LIMIT_BITS
from hss.primitives import (
    bits_from_roots,
    carry_advance,
    carry_products,
    exchange,
    inverse_roots,
    masked_contribution,
    receive_opened,
)
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Inbox, Machine, PartyGen, ProtocolError, expect, pack
from hss.session import PartyContext, SessionParams
from hss.svt_format import GROUP, I64, BoolArray, SvtFormat, prss_bits

# PRSS / zero-sharing purposes of this protocol (hss.primitives and hss.protocols use 1..7)
_P_S, _P_RHI, _P_Z_SQ, _P_Z_OPEN, _P_Z_GATE, _P_Z_OUT = 101, 102, 103, 104, 105, 106


@dataclass(frozen=True)
class SvtPartyResult:
    """A party's output: the opened (public) bits and which of its own tau_j were clamped."""

    revealed: BoolArray
    clamped: BoolArray


# ---------------------------------------------------------------------------------------------------------
# plaintext reference


def svt_plaintext(
    feature_sums: Sequence[npt.ArrayLike],
    phibar: npt.ArrayLike,
    taus: Sequence[npt.ArrayLike],
    eps_abc: float,
    remaining: int,
    fmt: SvtFormat,
) -> BoolArray:
    """The revealed bits computed in the clear on the same encoding (exact integers), for reference."""
    if len(feature_sums) != len(taus) or not feature_sums:
        raise ValueError(
            f"need one feature sum and one tau per party, got {len(feature_sums)} and {len(taus)}"
        )
    _check_remaining(remaining)
    phi = fmt.encode_phibar(phibar)
    n = phi.shape[0]
    s: I64 = np.stack([fmt.encode_feature_sum(x) for x in feature_sums]).sum(axis=0)
    t: I64 = fmt.encode_eps(eps_abc) + np.stack([fmt.encode_tau(x, n)[0] for x in taus]).sum(axis=0)
    u = (s[None, :] - phi).astype(object)
    u2 = (u * u).sum(axis=1)
    t_obj = t.astype(object)
    acc = np.array([ti >= 0 and ti * ti >= ui for ti, ui in zip(t_obj, u2, strict=True)], dtype=bool)
    if n <= remaining:
        return acc
    before = np.cumsum(acc) - acc
    return acc & (before <= remaining - 1)


def _check_remaining(remaining: int) -> None:
    if isinstance(remaining, bool) or not isinstance(remaining, int | np.integer) or remaining < 1:
        raise ValueError(
            f"remaining must be an integer >= 1 (accepts that may still be revealed), got {remaining!r}"
        )


# ---------------------------------------------------------------------------------------------------------
# the protocol


def svt_decide_party(
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
    """This party's machine for one batch of n candidates (see the module docstring).

    ``feature_sum``: S_j (D,); ``phibar``: public (n, D); ``tau``: this party's tau_j (n,); ``eps_abc`` and
    ``remaining`` public (same at every party); ``step``: a per-session unique batch counter (PRSS nonce);
    ``rng``: this party's CSPRNG.
    """
    what = "reveal mode 'svt'"
    inputs = encode_svt_inputs(ctx, fmt, feature_sum, phibar, tau, eps_abc, remaining, step, what)
    return Machine(ctx.party, _svt_gen(ctx, fmt, inputs, rng), "svt")


@dataclass(frozen=True)
class SvtInputs:
    """A batch's checked and encoded inputs at one party: its feature sum ``s_int``, the public candidates
    ``phi`` (n, D), its threshold shares ``tau_int`` and which of them were ``clamped``, the public ε and
    ``remaining`` accepts, and the batch's ``step`` (the PRSS nonce)."""

    s_int: I64
    phi: I64
    tau_int: I64
    e_int: int
    remaining: int
    step: int
    clamped: BoolArray


def encode_svt_inputs(
    ctx: PartyContext,
    fmt: SvtFormat,
    feature_sum: npt.ArrayLike,
    phibar: npt.ArrayLike,
    tau: npt.ArrayLike,
    eps_abc: float,
    remaining: int,
    step: int,
    what: str,
) -> SvtInputs:
    """The checked and encoded inputs of a batch, or ValueError naming what is wrong (``what``: the
    machine's name in the honest-majority refusal)."""
    params = ctx.params
    params.require_honest_majority(what)
    if params.m > fmt.max_parties:
        raise ValueError(f"m = {params.m} exceeds the SvtFormat's max_parties = {fmt.max_parties}")
    _check_remaining(remaining)
    if isinstance(step, bool) or not isinstance(step, int | np.integer) or not 0 <= step < 2**64:
        raise ValueError(f"step must be an integer in [0, 2^64), got {step!r}")
    s_int = fmt.encode_feature_sum(feature_sum)
    phi = fmt.encode_phibar(phibar)
    tau_int, clamped = fmt.encode_tau(tau, phi.shape[0])
    return SvtInputs(s_int, phi, tau_int, fmt.encode_eps(eps_abc), int(remaining), int(step), clamped)


def svt_decide_receiver(params: SessionParams, inbox: Inbox, n: int) -> BoolArray:
    """The receiver's decoding of the final round (one masked contribution from each party): the bits."""
    params.require_honest_majority("reveal mode 'svt'")
    bits = _to_bits(receive_opened(params, inbox, (n,)))
    if bits is None:
        raise ProtocolError("svt output is not a bit: a party deviated or messages were corrupted")
    return bits


def _to_bits(val: F.FieldArray) -> BoolArray | None:
    """The opened values as booleans, or None if any is not 0 or 1."""
    ok = ((val[..., 1] == 0) & (val[..., 0] <= 1)).all()
    return (val[..., 0] == 1) if ok else None


# -- carry trees and the fused AND ----------------------------------------------------------------------


class _Tree:
    """One comparison: bit = k - u with u = [r_lo > c_lo] from carry nodes (G, P) (degree t), or the bit."""

    def __init__(self, k: F.FieldArray | None, g: F.FieldArray | None, p: F.FieldArray | None,
                 bit: F.FieldArray | None = None) -> None:
        self.k, self.g, self.p, self.bit = k, g, p, bit

    @property
    def size(self) -> int:
        if self.bit is not None:
            return 0
        assert self.g is not None
        return int(self.g.shape[0])

    def normalize(self) -> None:
        if self.bit is None and self.size == 1:
            assert self.k is not None and self.g is not None
            self.bit = F.sub(self.k, self.g[0])

    def parts(self) -> tuple[F.FieldArray, F.FieldArray, F.FieldArray]:
        assert self.k is not None and self.g is not None and self.p is not None
        return self.k, self.g, self.p

    def level_products(self) -> list[F.FieldArray]:
        k, g, p = self.parts()
        nodes = g.shape[0]
        if nodes == 2:  # the root, k - (G1 + P1 G0): reshared, it becomes the bit
            return [F.sub(F.sub(k, g[1]), F.mul(p[1], g[0]))]
        return [carry_products(g, p)]

    def level_apply(self, res: list[F.FieldArray]) -> None:
        _, g, p = self.parts()
        nodes = g.shape[0]
        if nodes == 2:
            self.bit = res[0]
            return
        self.g, self.p = carry_advance(g, p, res[0])


def _and_gen(
    ctx: PartyContext, rng: SecureRandom, step: int, x: _Tree, y: _Tree, what: str
) -> PartyGen[F.FieldArray]:
    """Degree-2t shares of x_bit * y_bit, running both carry trees in parallel and fusing the AND."""
    while True:
        x.normalize()
        y.normalize()
        if x.bit is None and y.bit is not None:
            x, y = y, x
        if x.bit is not None and y.bit is not None:
            return F.mul(x.bit, y.bit)
        if x.bit is not None and y.size <= 3:
            k, g, p = y.parts()
            if y.size == 2:  # x (k - G1 - P1 G0) = x (k - G1) - (x P1) G0
                _, _, (a, b) = yield from exchange(
                    ctx, rng, step, what, grrs=[F.mul(x.bit, F.sub(k, g[1])), F.mul(x.bit, p[1])]
                )
                return F.sub(a, F.mul(b, g[0]))
            # x (k - G2 - P2 G1 - P2 P1 G0) = x (k - G2) - (x P2)(G1 + P1 G0)
            _, _, (a, b, c) = yield from exchange(
                ctx, rng, step, what,
                grrs=[F.mul(x.bit, F.sub(k, g[2])), F.mul(x.bit, p[2]), F.add(g[1], F.mul(p[1], g[0]))],
            )
            return F.sub(a, F.mul(b, c))
        if x.size == 2 and y.size == 2:  # both roots are quadratic: reshare both, multiply
            _, _, (qx, qy) = yield from exchange(
                ctx, rng, step, what, grrs=x.level_products() + y.level_products()
            )
            return F.mul(qx, qy)
        px = x.level_products() if x.bit is None else []
        py = y.level_products() if y.bit is None else []
        _, _, res = yield from exchange(ctx, rng, step, what, grrs=px + py)
        if px:
            x.level_apply(res[: len(px)])
        if py:
            y.level_apply(res[len(px) :])


# -- radix-4 first level ----------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _coef_tables(g: int) -> tuple[I64, I64]:
    """Integer tables A[c, mask] with 2^g [r > c] = sum_mask A_G[c, mask] sigma^mask (and [r == c] for A_P).

    sigma_k = 2 r_k - 1 in {-1, 1}; [r == v] = 2^-g prod_k (1 + (2 v_k - 1) sigma_k) =
    2^-g sum_mask (-1)^popcount(mask & ~v) sigma^mask.
    """
    size = 1 << g
    e = np.array(
        [[(-1) ** bin(mask & ~v & (size - 1)).count("1") for mask in range(size)] for v in range(size)],
        dtype=np.int64,
    )
    above = np.cumsum(e[::-1], axis=0)[::-1]  # above[c] = sum_{v >= c} E_v
    a_g = np.concatenate([above[1:], np.zeros((1, size), dtype=np.int64)])  # sum_{v > c}
    return a_g, e


@dataclass
class _Block:
    """Groups of g consecutive mask bits of one comparison: bits off + i*g + k, i < ng, k < g."""

    cmp: int
    g: int
    off: int  # offset in the global bit array
    ng: int
    local_off: int  # offset within the comparison


def _layout(kbits: Sequence[int]) -> tuple[list[_Block], list[int]]:
    blocks: list[_Block] = []
    bases: list[int] = []
    base = 0
    for c, kb in enumerate(kbits):
        bases.append(base)
        full, rem = divmod(kb, GROUP)
        if full:
            blocks.append(_Block(c, GROUP, base, full, 0))
        if rem:
            blocks.append(_Block(c, rem, base + GROUP * full, 1, GROUP * full))
        base += kb
    return blocks, bases


def _block_view(arr: F.FieldArray, b: _Block) -> F.FieldArray:
    """(g, ng, n, 2) view of the block's bits of a (K_total, n, 2) array."""
    sub = arr[b.off : b.off + b.g * b.ng]
    return np.ascontiguousarray(np.moveaxis(sub.reshape(b.ng, b.g, *sub.shape[1:]), 1, 0))


def _pairs(g: int) -> list[tuple[int, int]]:
    return list(itertools.combinations(range(g), 2))


def _highs(g: int) -> list[tuple[int, ...]]:
    return list(itertools.combinations(range(g), 3)) + list(itertools.combinations(range(g), 4))


def _first_level(
    c: F.FieldArray, kbits: int, r_hi: F.FieldArray, blocks: list[_Block], sigma: dict[int, F.FieldArray]
) -> _Tree:
    """Carry nodes of one comparison from its opened c and the sigma monomials of its mask bits."""
    n = c.shape[0]
    k = F.sub(F.shift_right(c, kbits), r_hi)
    cbits = ((F.low_word(c)[None, :] >> np.arange(kbits, dtype=np.uint64)[:, None]) & np.uint64(1)).astype(
        np.int64
    )
    gs: list[F.FieldArray] = []
    ps: list[F.FieldArray] = []
    for b in blocks:
        sub = cbits[b.local_off : b.local_off + b.g * b.ng].reshape(b.ng, b.g, n)
        cval = (sub << np.arange(b.g, dtype=np.int64)[None, :, None]).sum(axis=1)  # (ng, n)
        a_g, a_p = _coef_tables(b.g)
        w = sigma[id(b)]  # (2^g, ng, n, 2)
        ones = F.from_ints([1] * (1 << b.g))
        inv = pow(1 << b.g, F.P - 2, F.P)
        for table, out in ((a_g, gs), (a_p, ps)):
            coef = F.from_int64(np.moveaxis(table[cval], -1, 0))  # (2^g, ng, n, 2)
            out.append(F.mul_scalar(F.lincomb(ones, F.mul(coef, w)), inv))
    return _Tree(k, np.concatenate(gs), np.concatenate(ps))


_PairProducts = dict[int, dict[tuple[int, int], F.FieldArray]]  # block id -> (a, b) -> [s_a s_b]


def _pair_map(blocks: list[_Block], pairs_t: list[F.FieldArray]) -> _PairProducts:
    """The reshared pair products s_a s_b of each block of g >= 2 bits, by block and pair (a, b)."""
    pair_of: _PairProducts = {}
    it = iter(pairs_t)
    for b in blocks:
        if b.g >= 2:
            arr = next(it)
            pair_of[id(b)] = {pq: arr[i] for i, pq in enumerate(_pairs(b.g))}
    return pair_of


def _high_products(
    blocks: list[_Block], sb: dict[int, F.FieldArray], pair_of: _PairProducts
) -> list[F.FieldArray]:
    """Degree-2t triple and quadruple products of each block of g >= 3 bits, from the reshared pairs."""
    high_prods = []
    for b in blocks:
        if b.g >= 3:
            pr, sv = pair_of[id(b)], sb[id(b)]
            high = [F.mul(pr[(a[0], a[1])], sv[a[2]]) if len(a) == 3 else F.mul(pr[(0, 1)], pr[(2, 3)])
                    for a in _highs(b.g)]
            high_prods.append(np.stack(high))
    return high_prods


def _sigma_monomials(
    blocks: list[_Block],
    sb: dict[int, F.FieldArray],
    v: F.FieldArray,
    pair_of: _PairProducts,
    highs_t: list[F.FieldArray],
) -> dict[int, F.FieldArray]:
    """Per block, the 2^g monomials sigma^mask = s^mask * prod_{k in mask} v_k (sigma_k = 2 r_k - 1)."""
    sigma: dict[int, F.FieldArray] = {}
    it = iter(highs_t)
    for b in blocks:
        sv, vv = sb[id(b)], _block_view(v, b)
        mono: dict[int, F.FieldArray] = {0: np.broadcast_to(F.const(1), sv.shape[1:])}
        for i in range(b.g):
            mono[1 << i] = sv[i]
        for (i, j), arr in pair_of.get(id(b), {}).items():
            mono[(1 << i) | (1 << j)] = arr
        if b.g >= 3:
            arr = next(it)
            for idx, a in enumerate(_highs(b.g)):
                mono[sum(1 << i for i in a)] = arr[idx]
        vprod: dict[int, F.FieldArray] = {0: np.broadcast_to(F.const(1), sv.shape[1:])}
        for msk in range(1, 1 << b.g):
            low = msk & -msk
            vprod[msk] = vv[low.bit_length() - 1] if msk == low else F.mul(vprod[msk ^ low], vprod[low])
        sigma[id(b)] = np.stack([F.mul(mono[msk], vprod[msk]) for msk in range(1 << b.g)])
    return sigma


# -- the party's generator ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GateMask:
    """The gate comparison's mask: its value ``mask`` (the low ``kbits`` bits and the high part ``r_hi``),
    the blocks of its bits and the sigma monomials the first carry level is made of."""

    mask: F.FieldArray
    kbits: int
    r_hi: F.FieldArray
    blocks: list[_Block]
    sigma: dict[int, F.FieldArray]


def _gate_gen(
    ctx: PartyContext, rng: SecureRandom, step: int, out: F.FieldArray, remaining: int, g: _GateMask
) -> PartyGen[F.FieldArray]:
    """The c-accept gate on the accept bits ``out`` (degree 2t): P_i = sum_{l<i} acc_l (local); one round
    opens remaining - 1 - P_i masked (``g.mask``) and reshares acc; then acc_i [P_i <= remaining - 1] by
    the fused AND."""
    gate_mask, kbits, r_hi, blocks, sigma = g.mask, g.kbits, g.r_hi, g.blocks, g.sigma
    n = out.shape[0]
    incl = out.copy()
    shift = 1
    while shift < n:
        incl[shift:] = F.add(incl[shift:], incl[:-shift].copy())
        shift *= 2
    before = F.sub(incl, out)  # P_i = sum_{l < i} acc_l
    val = F.sub(np.broadcast_to(F.const(remaining - 1), before.shape), before)
    (o_g,), _, (acc,) = yield from exchange(
        ctx, rng, step, "svt/gate", opens=[F.add(val, gate_mask)], purpose=_P_Z_GATE, grrs=[out]
    )
    c_g = F.add(o_g, F.const(1 << kbits))
    tree_g = _first_level(c_g, kbits, r_hi, blocks, sigma)
    return (yield from _and_gen(ctx, rng, step, _Tree(None, None, None, acc), tree_g, "svt/gate-and"))


def _output_gen(ctx: PartyContext, out: F.FieldArray, step: int) -> PartyGen[BoolArray]:
    """Output: the bits ``out`` (degree 2t) opened to every party and to the receiver in one round."""
    n = out.shape[0]
    mine = masked_contribution(ctx, out, _P_Z_OUT, step)
    inbox = yield {**{j: pack(mine) for j in ctx.others}, RECEIVER: pack(mine)}
    msgs = expect(inbox, ctx.others, 2 * n, "svt/output")
    total = F.lincomb(F.from_ints([1] * ctx.params.m),
                      np.stack([mine if j == ctx.party else msgs[j].reshape(n, 2) for j in ctx.all]))
    bits = _to_bits(total)
    if bits is None:
        raise ProtocolError("svt output is not a bit: a party deviated or messages were corrupted")
    return bits


def _svt_gen(
    ctx: PartyContext, fmt: SvtFormat, inputs: SvtInputs, rng: SecureRandom
) -> PartyGen[SvtPartyResult]:
    s_int, phi, tau_int, e_int = inputs.s_int, inputs.phi, inputs.tau_int, inputs.e_int
    remaining, step, clamped = inputs.remaining, inputs.step, inputs.clamped
    n = phi.shape[0]
    gate = n > remaining
    kbits = [fmt.t_bits, fmt.b_bits] + ([fmt.gate_bits(n)] if gate else [])
    for kb in kbits:
        if kb + fmt.kappa + 1 + prss_bits(ctx.params.m) > SIGNED_LIMIT_BITS:
            raise ValueError(
                f"a comparison of {kb} bits does not fit the bit budget (is the batch of n = {n} too large?)"
            )
    blocks, bases = _layout(kbits)
    ktot = sum(kbits)
    s = ctx.prss.random(_P_S, step, (ktot, n))
    r_hi = ctx.prss.bounded(_P_RHI, step, (len(kbits), n), fmt.kappa + 1)
    sb = {id(b): _block_view(s, b) for b in blocks}
    pair_prods = [
        np.stack([F.mul(sb[id(b)][i], sb[id(b)][j]) for i, j in _pairs(b.g)]) for b in blocks if b.g >= 2
    ]

    # --- round 1: inputs, opened squares, pair products ---
    (sq,), (s_sh, tau_sh), pairs_t = yield from exchange(
        ctx, rng, step, "svt/input", opens=[F.mul(s, s)], purpose=_P_Z_SQ,
        deals=[F.from_int64(s_int), F.from_int64(tau_int)], grrs=pair_prods,
    )
    v = inverse_roots(sq)
    r = bits_from_roots(s, v)
    pair_of = _pair_map(blocks, pairs_t)
    high_prods = _high_products(blocks, sb, pair_of)

    t_sh = F.add(tau_sh, F.const(e_int))
    d = s_sh.shape[0]
    s2 = F.lincomb(F.from_ints([1] * d), F.mul(s_sh, s_sh))
    dot = F.matmul(F.from_int64(phi), s_sh)  # (n, 2)
    b_sh = F.add(F.sub(F.mul(t_sh, t_sh), s2[None, :]), F.mul_scalar(dot, 2))

    def mask(ci: int) -> F.FieldArray:
        kb = kbits[ci]
        pow2 = F.from_ints([1 << i for i in range(kb)] + [1 << kb])
        return F.lincomb(pow2, np.concatenate([r[bases[ci] : bases[ci] + kb], r_hi[ci][None]], axis=0))

    # --- round 2: masked openings of T and b, triple and quadruple products ---
    (o_t, o_b), _, highs_t = yield from exchange(
        ctx, rng, step, "svt/open", opens=[F.add(t_sh, mask(0)), F.add(b_sh, mask(1))], purpose=_P_Z_OPEN,
        grrs=high_prods,
    )
    sigma = _sigma_monomials(blocks, sb, v, pair_of, highs_t)

    phi_f = F.from_int64(phi)
    phi2 = F.lincomb(F.from_ints([1] * d), np.ascontiguousarray(np.moveaxis(F.mul(phi_f, phi_f), 1, 0)))
    c_t = F.add(o_t, F.const(1 << kbits[0]))
    c_b = F.add(F.sub(o_b, phi2), F.const(1 << kbits[1]))
    tree_t = _first_level(c_t, kbits[0], r_hi[0], [b for b in blocks if b.cmp == 0], sigma)
    tree_b = _first_level(c_b, kbits[1], r_hi[1], [b for b in blocks if b.cmp == 1], sigma)
    out = yield from _and_gen(ctx, rng, step, tree_t, tree_b, "svt/and")  # degree 2t

    if gate:
        g = _GateMask(mask(2), kbits[2], r_hi[2], [b for b in blocks if b.cmp == 2], sigma)
        out = yield from _gate_gen(ctx, rng, step, out, remaining, g)

    bits = yield from _output_gen(ctx, out, step)
    return SvtPartyResult(revealed=bits, clamped=clamped)
