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

blinded: each party Shamir-shares (x_j, W_j, e_j) (round 1); the parties compute
  Z = (2S + 1)(W + w0) + E, E = sum_j e_j < 2^e_bits <= w0 (all in integer units) and send it masked to
  the receiver (round 2). Z >= 0 exactly when S >= 0; 2S + 1 is never zero, so S = 0 does not open as 0;
  E, uniform on a range 2^16 times wider than |2S+1|, makes Z mod d close to uniform for every candidate
  divisor d, so the divisors of Z do not pin S down. W's lower bound w0 = 2^(e_bits - f_w) (default 2^-11)
  must be part of any privacy analysis of this mode.

sum: party j sends x_j (+ pub for party 1) + z_j to the receiver.

m = 2 supports only ``sum``: Shamir protocols need 2t < m with t >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.fixedpoint import FixedPoint, max_threshold
from hss.prss import PartyKeys, Prss, dealer_of, subsets
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Inbox, Machine, Outbox, PartyGen, ProtocolError, expect, pack
from hss.sharing import lagrange_field, split, vandermonde

MODES = ("sum", "blinded", "sign")
#: How the sign protocol makes its random bits' public square roots when no material is given:
#: "inline" — 1 round, every party computes every root (7 rounds in all); "pooled" — the distributed
#: precompute of :func:`precompute_sign` run in front of the online rounds (3 rounds, each root computed
#: once, by one party; 9 rounds in all): fewer CPU-seconds per decision, two more rounds.
SIGN_PRECOMPUTE = ("inline", "pooled")

# PRSS / PRF purposes: distinct streams per use within one step.
_P_BITS, _P_RHI, _P_Z_PRE, _P_Z_OPEN, _P_Z_OUT, _P_Z_ALL = 1, 2, 3, 4, 5, 6

_INV2 = pow(2, F.P - 2, F.P)
_INV4 = pow(4, F.P - 2, F.P)


@dataclass(frozen=True)
class SessionParams:
    """What every party and the receiver agree on for a session (public)."""

    m: int
    t: int
    session_id: bytes
    fmt: FixedPoint = field(default_factory=FixedPoint)

    def __post_init__(self) -> None:
        if not isinstance(self.m, int) or self.m < 2:
            raise ValueError(f"a session needs m >= 2 parties, got {self.m!r}")
        if self.m > self.fmt.max_parties:
            raise ValueError(
                f"m = {self.m} exceeds the format's max_parties = {self.fmt.max_parties}; "
                "build a FixedPoint with a larger max_parties"
            )
        if not isinstance(self.t, int) or not 0 <= self.t <= max_threshold(self.m):
            raise ValueError(
                f"threshold t = {self.t!r} must satisfy 0 <= t < m/2 "
                f"(at most {max_threshold(self.m)} for m = {self.m})"
            )
        if not 8 <= len(self.session_id) <= 64:
            raise ValueError(f"session_id must be 8..64 bytes, got {len(self.session_id)}")

    def supports(self, mode: str) -> bool:
        """Whether this session can run ``mode``: one of MODES, or "svt" (hss.svt, same needs as sign)."""
        if mode not in MODES and mode != "svt":
            raise ValueError(f"unknown reveal mode {mode!r}; expected one of {(*MODES, 'svt')}")
        return mode == "sum" or (self.t >= 1 and 2 * self.t < self.m)

    def check_mode(self, mode: str) -> None:
        if not self.supports(mode):
            raise ValueError(
                f"reveal mode {mode!r} needs an honest majority with t >= 1 (m >= 3); this session has "
                f"m = {self.m}, t = {self.t}. With m = 2 only 'sum' is available."
            )

    @property
    def sign_rounds(self) -> tuple[int, int]:
        """(precompute, online) rounds of the sign protocol with the inline precompute."""
        nodes = math.ceil(self.fmt.compare_bits / 2)
        levels = math.ceil(math.log2(nodes)) if nodes > 1 else 0
        return 1, 1 + max(levels, 1)

    def rounds(self, mode: str, precompute: str = "inline") -> int:
        if mode not in MODES:
            raise ValueError(f"rounds of {mode!r} are not fixed by the session: see hss.svt.SvtFormat.rounds")
        check_precompute(precompute)
        pre, online = self.sign_rounds
        sign = online + (pre if precompute == "inline" else 3)
        return {"sum": 1, "blinded": 2, "sign": sign}[mode]


def check_precompute(precompute: str) -> None:
    if precompute not in SIGN_PRECOMPUTE:
        raise ValueError(f"sign precompute {precompute!r} is not one of {SIGN_PRECOMPUTE}")


def key_setup(params: SessionParams, party: int, rng: SecureRandom) -> Machine[PartyKeys]:
    """One round: the lowest party outside A deals PRSS key r_A; party min(i, j) deals pairwise key k_ij."""
    return Machine(party, _key_setup(params, party, rng), "key_setup")


def _key_setup(params: SessionParams, me: int, rng: SecureRandom) -> PartyGen[PartyKeys]:
    m, t = params.m, params.t
    sets = subsets(m, t)
    prss: dict[tuple[int, ...], bytes] = {}
    pairwise: dict[int, bytes] = {}
    outgoing: dict[int, list[bytes]] = {j: [] for j in range(me + 1, m + 1)}
    for a in sets:
        if me not in a and dealer_of(a, m) == me:
            key = rng.key()
            prss[a] = key
            for j in range(1, m + 1):
                if j != me and j not in a:
                    outgoing[j].append(key)
    for j in range(me + 1, m + 1):
        key = rng.key()
        pairwise[j] = key
        outgoing[j].append(key)
    outbox: Outbox = {
        j: np.frombuffer(b"".join(keys), dtype=np.uint64).copy() for j, keys in outgoing.items()
    }
    inbox = yield outbox
    senders = list(range(1, me))
    expected = {i: [a for a in sets if dealer_of(a, m) == i and me not in a and i not in a] for i in senders}
    if set(inbox) != set(senders):
        raise ProtocolError(f"key_setup: party {me} expected keys from {senders}, got {sorted(inbox)}")
    for i in senders:
        raw = inbox[i].tobytes()
        want = 32 * (len(expected[i]) + 1)
        if len(raw) != want:
            raise ProtocolError(f"key_setup: party {i} sent {len(raw)} bytes of keys, expected {want}")
        for idx, a in enumerate(expected[i]):
            prss[a] = raw[32 * idx : 32 * idx + 32]
        pairwise[i] = raw[-32:]
    for a in sets:
        if me not in a and a not in prss:
            raise ProtocolError(f"key_setup: party {me} is missing the PRSS key of set {a}")
    return PartyKeys(party=me, m=m, t=t, prss=prss, pairwise=pairwise)


class PartyContext:
    """Per-session state of one party: parameters, PRSS generators, Lagrange coefficients."""

    def __init__(self, params: SessionParams, keys: PartyKeys) -> None:
        if keys.m != params.m or keys.t != params.t:
            raise ValueError(
                f"keys are for m={keys.m}, t={keys.t} but the session has m={params.m}, t={params.t}"
            )
        self.params = params
        self.party = keys.party
        self.prss = Prss(keys, params.session_id)
        self.all = tuple(range(1, params.m + 1))
        self.others = [j for j in self.all if j != self.party]
        self.lam = lagrange_field(self.all, 0)
        self.lam_me = int(F.to_ints(self.lam[self.party - 1])[0])


# ---------------------------------------------------------------------------------------------------------
# building blocks (one party's local computation around a round)


def _masked(ctx: PartyContext, share: F.FieldArray, purpose: int, step: int) -> F.FieldArray:
    """lambda_i * share + z_i: this party's additive contribution to opening the shared value."""
    z = ctx.prss.zero_additive(purpose, step, share.shape[:-1])
    return F.add(F.mul_scalar(share, ctx.lam_me), z)


def _sum_contributions(
    ctx: PartyContext, own: F.FieldArray, msgs: dict[int, npt.NDArray[np.uint64]]
) -> F.FieldArray:
    stack = np.stack([own if j == ctx.party else msgs[j].reshape(own.shape) for j in ctx.all])
    return F.lincomb(F.from_ints([1] * ctx.params.m), stack)


def _grr_deal(ctx: PartyContext, vals: F.FieldArray, rng: SecureRandom) -> F.FieldArray:
    """Degree-t sharings of this party's degree-2t product shares: row j-1 goes to party j."""
    t = ctx.params.t
    coeffs = np.concatenate([vals[None], rng.field((t, *vals.shape[:-1]))], axis=0)
    return F.matmul(vandermonde(ctx.params.m, t), coeffs)


def _grr_combine(
    ctx: PartyContext, own_row: F.FieldArray, msgs: dict[int, npt.NDArray[np.uint64]]
) -> F.FieldArray:
    stack = np.stack([own_row if j == ctx.party else msgs[j].reshape(own_row.shape) for j in ctx.all])
    return F.lincomb(ctx.lam, stack)


def _words(shape: tuple[int, ...]) -> int:
    return 2 * int(np.prod(shape))


def _select(cond: npt.NDArray[np.bool_], a: F.FieldArray, b: F.FieldArray) -> F.FieldArray:
    a2, b2 = np.broadcast_arrays(a, b)
    return np.where(cond[..., None], a2, b2)


# ---------------------------------------------------------------------------------------------------------
# standalone protocols


def open_to_all(ctx: PartyContext, share: F.FieldArray, step: int) -> Machine[F.FieldArray]:
    """Open a shared value (any degree < m) to every party: one round, masked contributions."""

    def gen() -> PartyGen[F.FieldArray]:
        mine = _masked(ctx, share, _P_Z_ALL, step)
        inbox = yield {j: pack(mine) for j in ctx.others}
        msgs = expect(inbox, ctx.others, _words(share.shape[:-1]), "open_to_all")
        return _sum_contributions(ctx, mine, msgs)

    return Machine(ctx.party, gen(), "open_to_all")


def open_to_receiver(ctx: PartyContext, share: F.FieldArray, step: int) -> Machine[None]:
    """Open a shared value (any degree < m) to the receiver only: one round."""

    def gen() -> PartyGen[None]:
        yield {RECEIVER: pack(_masked(ctx, share, _P_Z_OUT, step))}
        return None

    return Machine(ctx.party, gen(), "open_to_receiver")


def receive_opened(params: SessionParams, inbox: Inbox, shape: tuple[int, ...]) -> F.FieldArray:
    """The receiver's side of an opening: the sum of all m masked contributions."""
    msgs = expect(inbox, list(range(1, params.m + 1)), _words(shape), "receiver")
    stack = np.stack([msgs[j].reshape(*shape, 2) for j in range(1, params.m + 1)])
    return F.lincomb(F.from_ints([1] * params.m), stack)


def multiply(ctx: PartyContext, x: F.FieldArray, y: F.FieldArray, rng: SecureRandom) -> Machine[F.FieldArray]:
    """[x y] of degree t from degree-t [x], [y]: local product then GRR resharing, one round."""
    ctx.params.check_mode("sign")

    def gen() -> PartyGen[F.FieldArray]:
        rows = _grr_deal(ctx, F.mul(x, y), rng)
        inbox = yield {j: pack(rows[j - 1]) for j in ctx.others}
        msgs = expect(inbox, ctx.others, _words(x.shape[:-1]), "multiply")
        return _grr_combine(ctx, rows[ctx.party - 1], msgs)

    return Machine(ctx.party, gen(), "multiply")


def random_bits(ctx: PartyContext, n: int, step: int) -> Machine[F.FieldArray]:
    """Degree-t shares of n uniform secret bits: PRSS [s], open s^2 (masked), r = (1 + s/sqrt(s^2))/2."""
    ctx.params.check_mode("sign")

    def gen() -> PartyGen[F.FieldArray]:
        s = ctx.prss.random(_P_BITS, step, (n,))
        mine = _masked(ctx, F.mul(s, s), _P_Z_PRE, step)
        inbox = yield {j: pack(mine) for j in ctx.others}
        msgs = expect(inbox, ctx.others, _words((n,)), "random_bits")
        sq = _sum_contributions(ctx, mine, msgs)
        return _bits_from_roots(s, _inverse_roots(sq))

    return Machine(ctx.party, gen(), "random_bits")


def _inverse_roots(sq: F.FieldArray) -> F.FieldArray:
    """1 / sqrt(s^2) for opened squares of random values (the public part of a random bit)."""
    try:
        return F.inv(F.sqrt(sq))
    except ZeroDivisionError as exc:  # s = 0 has probability about C(m,t) / 2^127
        raise ProtocolError("a random value was zero; rerun the batch with a new step") from exc


def _bits_from_roots(s: F.FieldArray, v: F.FieldArray) -> F.FieldArray:
    """[r] = (1 + [s] v) / 2 with v = 1 / sqrt(s^2): a uniform secret bit."""
    return F.mul_scalar(F.add(F.mul(s, v), F.const(1)), _INV2)


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


def decide_party(
    mode: str,
    ctx: PartyContext,
    values: npt.ArrayLike,
    public: npt.ArrayLike | None,
    step: int,
    rng: SecureRandom,
    blind: npt.ArrayLike | None = None,
    material: SignMaterial | None = None,
    precompute: str = "inline",
) -> Machine[PartyReport]:
    """This party's machine for a batch of decisions S = public + sum_j values_j >= 0.

    ``values`` are this party's terms (its noise share already added), ``public`` the public terms (the
    same array at every party, or None for zero), ``step`` a per-session unique batch counter (the PRSS
    nonce), ``rng`` this party's CSPRNG. Blinded mode also needs ``blind``, this party's W_j >= 0. Sign
    mode takes optional ``material`` from :func:`precompute_sign`; then only the online rounds run. Without
    it, ``precompute`` (one of SIGN_PRECOMPUTE, the same at every party) says how the batch makes its own.
    """
    check_precompute(precompute)
    if mode not in MODES:
        raise ValueError(f"unknown reveal mode {mode!r} for decide_party; expected one of {MODES}"
                         + (" (svt runs with hss.svt.svt_decide_party)" if mode == "svt" else ""))
    ctx.params.check_mode(mode)
    fmt = ctx.params.fmt
    x, clamped = fmt.encode(values)
    if x.ndim != 1:
        raise ValueError(f"values must be a 1-D batch, got shape {x.shape}")
    n = x.shape[0]
    if public is None:
        pub = np.zeros(n, dtype=np.int64)
    else:
        pub, pub_clamped = fmt.encode(public)
        if pub.shape != x.shape:
            raise ValueError(f"public terms have shape {pub.shape}, values {x.shape}")
        if pub_clamped.any():
            raise ValueError(
                f"{int(pub_clamped.sum())} public terms exceed the format's range of "
                f"+-2^{fmt.term_int_bits}: refuse rather than change the decision"
            )
    report = PartyReport(clamped=clamped)
    if mode == "sum":
        gen = _sum_gen(ctx, x, pub, step, report)
    elif mode == "blinded":
        if blind is None:
            raise ValueError("blinded mode needs this party's blinding share W_j (blind=...)")
        w, _ = fmt.encode_blind(blind)
        if w.shape[:-1] != x.shape:
            raise ValueError(f"blinding shares have shape {w.shape[:-1]}, values {x.shape}")
        gen = _blinded_gen(ctx, x, pub, w, step, rng, report)
    else:
        if material is not None and (material.n != n or material.bits.shape[0] != fmt.compare_bits):
            raise ValueError(
                f"sign material is for {material.n} decisions of {material.bits.shape[0]} bits, "
                f"this batch has {n} of {fmt.compare_bits}"
            )
        gen = _sign_gen(ctx, x, pub, step, rng, report, material, precompute == "pooled")
    return Machine(ctx.party, gen, f"decide[{mode}]")


def decide_receiver(mode: str, params: SessionParams, inbox: Inbox, n: int) -> Decisions:
    """The receiver's decoding of the final round's messages (one from each party)."""
    if mode not in MODES:
        raise ValueError(f"unknown reveal mode {mode!r} for decide_receiver; expected one of {MODES}")
    params.check_mode(mode)
    val = receive_opened(params, inbox, (n,))
    fmt = params.fmt
    if mode == "sum":
        s = F.to_int64(val)
        return Decisions(accept=s >= 0, revealed=fmt.decode(s))
    if mode == "blinded":
        z = F.to_double(val, fmt.frac_bits + 1 + fmt.blind_frac_bits)
        return Decisions(accept=z > 0, revealed=z)
    bits = F.to_int64(val) if n else np.zeros(0, dtype=np.int64)
    if ((bits != 0) & (bits != 1)).any():
        raise ProtocolError("sign output is not a bit: a party deviated or messages were corrupted")
    return Decisions(accept=bits == 1, revealed=None)


def _sum_gen(
    ctx: PartyContext, x: npt.NDArray[np.int64], pub: npt.NDArray[np.int64], step: int, report: PartyReport
) -> PartyGen[PartyReport]:
    val = F.from_int64(x + pub) if ctx.party == 1 else F.from_int64(x)
    z = ctx.prss.zero_additive(_P_Z_OUT, step, x.shape)
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
) -> PartyGen[PartyReport]:
    params, fmt = ctx.params, ctx.params.fmt
    n = x.shape[0]
    e_bits_each = fmt.blind_e_bits - math.ceil(math.log2(params.m))
    own = np.stack(
        [F.from_int64(x + pub) if ctx.party == 1 else F.from_int64(x), w, rng.bounded((n,), e_bits_each)]
    )
    shares = split(own, params.t, params.m, rng)  # (m, 3, n, 2)
    inbox = yield {j: pack(shares[j - 1]) for j in ctx.others}
    msgs = expect(inbox, ctx.others, _words((3, n)), "blinded/input")
    total = _sum_contributions(ctx, shares[ctx.party - 1], msgs)  # [S], [W], [E]
    s2 = F.add(F.mul_scalar(total[0], 2), F.const(1))
    w_shift = F.add(total[1], F.const(1 << fmt.blind_e_bits))
    z = F.add(F.mul(s2, w_shift), total[2])
    yield {RECEIVER: pack(_masked(ctx, z, _P_Z_OUT, step))}
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

    @property
    def n(self) -> int:
        return int(self.bits.shape[1])


def precompute_sign(
    ctx: PartyContext, n: int, step: int, rng: SecureRandom, distributed: bool = True
) -> Machine[SignMaterial]:
    """Material for n sign decisions, made before the inputs exist.

    ``distributed=True`` (3 rounds, all before the inputs exist): the random s_i are dealt by the parties
    (cheaper than PRSS for large m), each s_i^2 is opened to one party only, the parties take turns in
    computing the public square roots (each computes about K n / m of them instead of all K n), and each
    broadcasts its share of the roots. ``distributed=False`` (1 round): every party opens every s_i^2 and
    computes every root itself; this is what the 7-round sign protocol runs inline.
    """
    ctx.params.check_mode("sign")
    return Machine(ctx.party, _sign_precompute(ctx, n, step, rng, distributed), "precompute_sign")


def _chunks(total: int, m: int) -> list[tuple[int, int]]:
    """Party p (1..m) computes the roots of flat positions [lo, hi) of chunk p - 1."""
    edges = [total * i // m for i in range(m + 1)]
    return [(edges[i], edges[i + 1]) for i in range(m)]


def _sign_precompute(
    ctx: PartyContext, n: int, step: int, rng: SecureRandom, distributed: bool
) -> PartyGen[SignMaterial]:
    fmt = ctx.params.fmt
    kbits = fmt.compare_bits
    npairs = kbits // 2
    if distributed:
        # offline, an extra round is free: each party deals a random degree-t sharing (t AES blocks and
        # m(t+1) small multiplications per value, against C(m-1,t) PRF streams and full multiplications
        # for PRSS); the sum of the m dealt values is uniform to any coalition of t parties.
        dealt = split(rng.field((kbits, n)), ctx.params.t, ctx.params.m, rng)  # (m, K, n)
        inbox = yield {j: pack(dealt[j - 1]) for j in ctx.others}
        got = expect(inbox, ctx.others, _words((kbits, n)), "sign/precompute-deal")
        s = _sum_contributions(ctx, dealt[ctx.party - 1], got)
    else:
        s = ctx.prss.random(_P_BITS, step, (kbits, n))
    sq_mine = _masked(ctx, F.mul(s, s), _P_Z_PRE, step).reshape(kbits * n, 2)
    rows = _grr_deal(ctx, F.mul(s[0 : 2 * npairs : 2], s[1 : 2 * npairs : 2]), rng)  # (m, npairs, n)
    pair_words = _words((npairs, n))
    if not distributed:
        inbox = yield {j: pack(sq_mine, rows[j - 1]) for j in ctx.others}
        cut = _words((kbits * n,))
        msgs = expect(inbox, ctx.others, cut + pair_words, "sign/precompute")
        sq = _sum_contributions(ctx, sq_mine, {j: v_[:cut] for j, v_ in msgs.items()})
        v = _inverse_roots(sq)
    else:
        chunks = _chunks(kbits * n, ctx.params.m)
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
        sq_chunk = _sum_contributions(ctx, sq_mine[lo:hi], {j: v_[:cut] for j, v_ in msgs.items()})
        v_chunk = _inverse_roots(sq_chunk)
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
    v = v.reshape(kbits, n, 2)
    one = F.const(1)
    r = _bits_from_roots(s, v)
    pair_ss = _grr_combine(ctx, rows[ctx.party - 1], {j: v_[cut:] for j, v_ in msgs.items()})
    sig_prod = F.mul(pair_ss, F.mul(v[0 : 2 * npairs : 2], v[1 : 2 * npairs : 2]))
    # r_a r_b = (1 + sigma_a + sigma_b + sigma_a sigma_b) / 4 with sigma = 2r - 1
    sig_lo = F.sub(F.mul_scalar(r[0 : 2 * npairs : 2], 2), one)
    sig_hi = F.sub(F.mul_scalar(r[1 : 2 * npairs : 2], 2), one)
    rr = F.mul_scalar(F.add(F.add(F.add(sig_lo, sig_hi), sig_prod), one), _INV4)
    r_top = ctx.prss.bounded(_P_RHI, step, (n,), fmt.kappa + 1)
    return SignMaterial(bits=r, pairs=rr, r_top=r_top)


def _sign_gen(
    ctx: PartyContext,
    x: npt.NDArray[np.int64],
    pub: npt.NDArray[np.int64],
    step: int,
    rng: SecureRandom,
    report: PartyReport,
    material: SignMaterial | None,
    pooled: bool = False,
) -> PartyGen[PartyReport]:
    fmt = ctx.params.fmt
    n, kbits = x.shape[0], fmt.compare_bits
    npairs = kbits // 2
    if material is None:  # inline: 1 round, every party computes every root; pooled: 3, each root once
        material = yield from _sign_precompute(ctx, n, step, rng, distributed=pooled)
    r, rr, r_top = material.bits, material.pairs, material.r_top
    r_lo_pair, r_hi_pair = r[0 : 2 * npairs : 2], r[1 : 2 * npairs : 2]

    # --- online round 1: fused input and mask opening: c = S + 2^K + r ---
    pow2 = F.from_ints([1 << i for i in range(kbits)] + [1 << kbits])
    mask = F.lincomb(pow2, np.concatenate([r, r_top[None]], axis=0))
    contrib = F.add(F.from_int64(x), _masked(ctx, mask, _P_Z_OPEN, step))
    inbox = yield {j: pack(contrib) for j in ctx.others}
    msgs = expect(inbox, ctx.others, _words((n,)), "sign/open")
    c = _sum_contributions(ctx, contrib, msgs)
    c = F.add(F.add(c, F.from_int64(pub)), F.const(1 << kbits))
    c_hi = F.shift_right(c, kbits)
    c_lo = F.low_word(c)
    cb = ((c_lo[None, :] >> np.arange(kbits, dtype=np.uint64)[:, None]) & np.uint64(1)).astype(bool)  # (K, n)

    # --- carry tree for u = [c mod 2^K < r mod 2^K]: node (G, P) = (r > c on its span, r == c on it) ---
    one = F.const(1)
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

    nodes = big_g.shape[0]
    while nodes > 1:
        half = nodes // 2
        g_lo, g_hi = big_g[0 : 2 * half : 2], big_g[1 : 2 * half : 2]
        p_lo, p_hi = big_p[0 : 2 * half : 2], big_p[1 : 2 * half : 2]
        pg = F.mul(p_hi, g_lo)
        if half + nodes % 2 == 1:  # this level makes the root: fuse it with the output
            root = F.add(g_hi, pg)[0]
            break
        pp = F.mul(p_hi[1:], p_lo[1:])  # the lowest node's P is never used
        prods = np.concatenate([pg, pp])
        rows = _grr_deal(ctx, prods, rng)
        inbox = yield {j: pack(rows[j - 1]) for j in ctx.others}
        msgs = expect(inbox, ctx.others, _words(prods.shape[:-1]), "sign/carry")
        prods_t = _grr_combine(ctx, rows[ctx.party - 1], msgs)
        new_g = F.add(g_hi, prods_t[:half])
        new_p = np.concatenate([np.broadcast_to(zero, (1, n, 2)), prods_t[half:]])
        if nodes % 2:
            new_g = np.concatenate([new_g, big_g[-1:]])
            new_p = np.concatenate([new_p, big_p[-1:]])
        big_g, big_p, nodes = new_g, new_p, new_g.shape[0]
    else:
        root = big_g[0]

    # --- output: [S >= 0] = floor(c / 2^K) - r_hi - u, to the receiver only ---
    bit = F.sub(F.sub(c_hi, r_top), root)
    yield {RECEIVER: pack(_masked(ctx, bit, _P_Z_OUT, step))}
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
