"""Security with abort for the Shamir engine: authenticated values, duplicated multiplication, one check.

Construction: Chida, Genkin, Hamada, Ikarashi, Kikuchi, Lindell, Nof, "Fast large-scale honest-majority
MPC for malicious adversaries" (CRYPTO 2018), over the engine's GRR multiplication, which is secure up to
an additive attack against t < m/2 corrupt parties. Every value is carried as a pair :class:`Auth` of
degree-t sharings ([x], [r x]) under one secret MAC key [r] from PRSS; linear operations act on both
halves; a multiplication is done twice in the same round, on x y and on (r x) y (both reshares in the same
messages); and :meth:`AuthParty.verify` checks every pair made in the step at once, before any output:

1. open (error-detecting) a PRSS coin seed and the key r: both are fixed only now, after every value;
2. T = sum_k a_k ([r z_k] - r [z_k]) with a_k = PRF(seed); GRR-reshare [T] [beta], beta a fresh PRSS value;
3. open (error-detecting) v = T beta: the step goes on only if v = 0 (CheckZero).

Error-detecting opening (:meth:`AuthParty.round` ``opens``): every party sends its raw degree-t share to
every other; each checks that all m shares lie on one polynomial of degree t (``hss.sharing.recombine``).
The t + 1 (m odd) or t + 2 (m even) honest shares fix that polynomial, so a corrupt share either agrees
with it or makes the receiving party abort: a rushing adversary cannot shift an opened value. Raw shares
of a degree-t sharing reveal only its value to a coalition of t (the polynomial is fixed by the value and
the coalition's t shares). Random bits (:meth:`AuthParty.random_bits`) square a PRSS value s, with the
square's MAC (r s) s, and open the square u this way; u = 0 or a non-square is refused (abort).

Soundness (the check passes although some value is wrong: probability at most 3/p < 2^-125). Take the
sharings as the honest parties' shares define them. GRR with corrupt dealers gives z = x y + d1 and
[r z] = [r x] y + d2, where (d1, d2) depend only on the adversary's view, which is independent of r (it
sees t shares of r, fresh reshares, and the opened squares u, which do not involve r) until step 1. Write
e_k = mac_k - r z_k. If some value is wrong, take the first multiplication with d1 != 0 (or a pair with
d1 = 0, d2 != 0, or an input whose MAC product was shifted): either an earlier e_j != 0, or
e_k = d2 - r d1, which is 0 only if r = d2 / d1: probability 1/p. Given e != 0, sum_k a_k e_k = 0 with
probability 1/p over the seed, opened after every e_k is fixed (a_k from AES-CTR under the seed: a PRF).
Given T != 0, v = T beta + d3 = 0 with probability 1/p over beta, which the adversary never sees. For
even m (m = 2t + 2) the honest shares of a sharing dealt or reshared by a corrupt party need not lie on a
degree-t polynomial; step 2 then also opens sum_k a'_k c_k + rho over every sharing c_k of the step
(values and MACs, rho a PRSS mask): if any c_k is inconsistent the combination is too, except with
probability 1/p, and its error-detecting opening aborts at every honest party. For m = 2t + 1 the t + 1
honest shares always lie on one polynomial and this test is skipped.

What a coalition learns under deviation: the same as semi-honest, provided the protocol opens nothing
masked by values this check has not yet covered. The squares u reveal s^2 + d1, so a deviating party knows
each s up to its sign, and a bit made from a shifted square is one of two values it can compute: a masked
value opened over unchecked bits gives away bits of what it masks (hss.abort_sign and hss.abort_svt opened
theirs before verify until 2026-11-30, docs/SECURITY_ABORT.md). So a protocol that opens masked values
before verify first runs :meth:`check_upto` (the same CheckZero with r kept secret, over a pad and every
pair made so far) and opens them only after it passed; r and verify's seed are opened only after every
value exists. Outputs are opened only after :meth:`verify` passed (:meth:`open`, :meth:`open_to_receiver`).
Not covered: fairness, guaranteed output delivery,
identifiable abort (the error names the step, the round and what was checked, not a party); abort is
selective when outputs are opened to all parties (a corrupt party can make one honest party abort and not
another); opened to the receiver, which needs all m consistent shares, it is unanimous. One
:class:`AuthParty` serves one step: after :meth:`verify` the key r is public and the party refuses new
values (a new step takes a new key).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hss import field as F
from hss.primitives import flatten, grr_combine, grr_deal, unflatten
from hss.prss import PartyKeys, subsets
from hss.randomness import Prf, SecureRandom, derive_key
from hss.runtime import RECEIVER, Inbox, Machine, Outbox, PartyGen, Payload, ProtocolError, pack
from hss.session import PartyContext, SessionParams, key_setup_rounds
from hss.sharing import ShareError, recombine, split

#: PRSS purposes of this module (hss.primitives uses 1..7, hss.svt 101..106): the MAC key; verify's draws
#: (the coin seed, CheckZero's beta, the even-m degree test's mask); the k-th random draw of a step uses
#: P_DRAW + k.
P_MAC_KEY, P_VERIFY, P_DRAW = 201, 202, 1000

_INV2 = pow(2, F.P - 2, F.P)
# p itself, the one non-canonical value below 2^127 (a canonical field element is < p)
_LO_P, _HI_P = np.uint64(F.P & (2**64 - 1)), np.uint64(F.P >> 64)


class AbortError(ProtocolError):
    """The honest party stops the step: a check failed or a message was missing or malformed.

    Names the step, the round (counted from the :class:`AuthParty`'s first message; 0 for the receiver's
    check of the outputs, whose round depends on the variant) and what was being
    received or checked, never the party that deviated (non-identifiable abort)."""

    def __init__(self, step: int, rnd: int, what: str, reason: str) -> None:
        self.step, self.round, self.what, self.reason = step, rnd, what, reason
        where = f"round {rnd}" if rnd > 0 else "the output round"
        super().__init__(f"abort at step {step}, {where} ({what}): {reason}")


@dataclass(frozen=True)
class Auth:
    """One party's shares of authenticated values: ``x`` = [x], ``mac`` = [r x], both degree t."""

    x: F.FieldArray
    mac: F.FieldArray

    def __post_init__(self) -> None:
        if self.x.shape != self.mac.shape:
            raise ValueError(f"value shape {self.x.shape} and MAC shape {self.mac.shape} differ")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[:-1])


def add(a: Auth, b: Auth) -> Auth:
    return Auth(F.add(a.x, b.x), F.add(a.mac, b.mac))


def sub(a: Auth, b: Auth) -> Auth:
    return Auth(F.sub(a.x, b.x), F.sub(a.mac, b.mac))


def mul_public(a: Auth, c: int | F.FieldArray) -> Auth:
    """c * a for a public integer or a public field array (broadcast against ``a``)."""
    if isinstance(c, int):
        return Auth(F.mul_scalar(a.x, c), F.mul_scalar(a.mac, c))
    return Auth(F.mul(a.x, c), F.mul(a.mac, c))


def checked_messages(inbox: Inbox, elements: dict[int, int]) -> dict[int, Payload]:
    """Each expected sender's payload as an (n, 2) array of canonical field elements; ValueError otherwise."""
    if set(inbox) != set(elements):
        missing, extra = sorted(set(elements) - set(inbox)), sorted(set(inbox) - set(elements))
        raise ValueError(f"{len(missing)} message(s) missing, {len(extra)} unexpected")
    got: dict[int, Payload] = {}
    for j, n in elements.items():
        msg = inbox[j]
        if msg.dtype != np.uint64 or msg.ndim != 1 or msg.size != 2 * n:
            raise ValueError(f"a message of {msg.size} words where {2 * n} were expected")
        arr = msg.reshape(-1, 2)
        hi, lo = arr[:, 1], arr[:, 0]
        if np.any((hi >> np.uint64(63)) | ((hi == _HI_P) & (lo == _LO_P))):
            raise ValueError("a message carries a non-canonical field element")
        got[j] = np.ascontiguousarray(arr)
    return got


@dataclass
class Extra:
    """Payloads of one :meth:`AuthParty.round` besides deals, reshares and openings to all: ``to_one`` maps
    each party j to this party's degree-t shares of the values opened to j only (flat (k_j, 2), the same
    k_j at every party); ``public`` is this party's public values broadcast to all (``public_sizes``: what
    each party broadcasts, in elements). After the round, ``opened_here`` holds the values opened to this
    party (all m shares on one polynomial, else abort) and ``publics`` each party's broadcast values."""

    to_one: dict[int, F.FieldArray]
    public: F.FieldArray
    public_sizes: dict[int, int]
    opened_here: F.FieldArray | None = None
    publics: dict[int, F.FieldArray] | None = None

    def outgoing(self, me: int, others: Sequence[int]) -> dict[int, F.FieldArray]:
        return {j: np.concatenate([self.to_one[j], self.public]) for j in others}

    def incoming(self, me: int, others: Sequence[int]) -> dict[int, int]:
        return {j: self.to_one[me].shape[0] + self.public_sizes[j] for j in others}

    def receive(self, me: int, rest: dict[int, F.FieldArray], t: int) -> None:
        k = self.to_one[me].shape[0]
        shares = {j: v[:k] for j, v in rest.items()} | {me: self.to_one[me]}
        self.opened_here = recombine(shares, t) if k else F.zeros((0,))
        self.publics = {j: np.ascontiguousarray(v[k:]) for j, v in rest.items()} | {me: self.public}


@dataclass(frozen=True)
class KeptKeyCheck:
    """One party's PRSS draws for a check that keeps the MAC key secret (:meth:`AuthParty.check_upto`):
    the coin seed's share (opened), beta, the even-m degree test's mask, and the pad rho."""

    seed_share: F.FieldArray
    beta: F.FieldArray
    mask: F.FieldArray
    pad: F.FieldArray

    def reshares(self, key: F.FieldArray) -> list[F.FieldArray]:
        """The products r beta and r rho, to be GRR-reshared in a round before any value the check counts."""
        return [F.mul(key, self.beta), F.mul(key, self.pad)]


@dataclass(frozen=True)
class ArmedCheck:
    """A :class:`KeptKeyCheck` with its reshared [r beta]; ``pad_at`` is the index of the pad pair among
    the party's tracked arrays (a checkpoint must come after it)."""

    check: KeptKeyCheck
    r_beta: F.FieldArray
    pad_at: int


class AuthParty:
    """One party's authenticated computation over one step: the MAC key share, the pairs to be checked,
    and the rounds (generators to drive with ``yield from`` inside a :class:`hss.runtime.Machine`).

    ``ctx`` is the party's session context (PRSS keys), ``rng`` its CSPRNG for share polynomials and GRR
    coefficients, ``step`` the batch's fresh step (it separates every PRSS stream of the step)."""

    def __init__(self, ctx: PartyContext, rng: SecureRandom, step: int) -> None:
        ctx.params.require_honest_majority("authenticated computation (security with abort)")
        self.ctx, self.rng, self.step = ctx, rng, step
        self.key = ctx.prss.random(P_MAC_KEY, step, (1,))  # [r], shape (1, 2): broadcasts over a batch
        self.rounds = 0
        self.verified = False
        self._closed = False  # after verify() starts (r is opened) or after an abort
        self._draws = 0
        self._values: list[F.FieldArray] = []
        self._macs: list[F.FieldArray] = []
        self._zeros: list[F.FieldArray] = []

    # -- local operations ------------------------------------------------------------------------------

    def add_public(self, a: Auth, c: int | F.FieldArray) -> Auth:
        """a + c for a public c: every party adds c to its share of x and c [r] to its share of r x."""
        cf = F.const(c) if isinstance(c, int) else c
        return Auth(F.add(a.x, cf), F.add(a.mac, F.mul(self.key, cf)))

    def constant(self, c: F.FieldArray) -> Auth:
        """The public values c as an authenticated sharing (degree 0, MAC c [r])."""
        return Auth(np.ascontiguousarray(c), F.mul(self.key, c))

    def draw(self, shape: tuple[int, ...]) -> F.FieldArray:
        """This party's share of fresh PRSS random values (not yet authenticated: see random_bits)."""
        self._open_for("draw")
        self._draws += 1
        return self.ctx.prss.random(P_DRAW + self._draws, self.step, shape)

    @property
    def pending(self) -> int:
        """How many authenticated field elements the next verify() checks."""
        return sum(v.size // 2 for v in self._values)

    def track(self, pairs: Sequence[Auth]) -> None:
        """Add pairs made outside :meth:`multiply` / :meth:`share_inputs` / :meth:`random_bits` (from
        :meth:`round`'s reshares) to the check of :meth:`verify`."""
        self._open_for("track")
        self._values.extend(p.x for p in pairs)
        self._macs.extend(p.mac for p in pairs)

    def claim_zero(self, value: Auth) -> None:
        """Values that must all be 0 (a linear function of checked pairs): :meth:`verify` folds them into
        CheckZero with fresh coins, so a nonzero one fails the check except with probability 1/p."""
        self._open_for("claim_zero")
        self._zeros.append(np.ascontiguousarray(value.x).reshape(-1, 2))

    def _open_for(self, what: str) -> None:
        if self._closed:
            raise ValueError(
                f"{what}: this AuthParty is closed (verified or aborted): its MAC key is public or the step "
                "failed; authenticate new values under a new AuthParty with a fresh step"
            )

    def _abort(self, rnd: int, what: str, reason: str) -> AbortError:
        self._closed = True
        return AbortError(self.step, rnd, what, reason)

    # -- one round -------------------------------------------------------------------------------------

    def round(
        self,
        what: str,
        deal: F.FieldArray | None = None,
        deal_shapes: Mapping[int, tuple[int, ...]] | None = None,
        grrs: Sequence[F.FieldArray] = (),
        opens: Sequence[F.FieldArray] = (),
        extra: Extra | None = None,
    ) -> PartyGen[tuple[dict[int, F.FieldArray], list[F.FieldArray], list[F.FieldArray]]]:
        """One all-to-all round carrying three kinds of payload; returns them in the order given.

        ``deal``: this party's own values, Shamir-shared at degree t; ``deal_shapes`` (public, the same at
        every party) says which parties deal what shape; the result maps each dealer to this party's
        share. ``grrs``: degree-2t local products reshared to degree t (GRR). ``opens``: degree-t shares
        opened to all with error detection. A missing, extra or malformed message, or opened shares not
        on one degree-t polynomial, raise :class:`AbortError`. Raw shares of a degree-t sharing reveal its
        value: open before verify() only what may be revealed even if the adversary shifted it.
        ``extra`` (:class:`Extra`): values opened to one party only (error detection at that party) and
        public values every party broadcasts; its results are left in it."""
        if deal_shapes or grrs:
            self._open_for(what)  # after verify only openings: r is public, new values would be unchecked
        return (yield from self._round(what, deal, deal_shapes, grrs, opens, extra))

    def _round(
        self,
        what: str,
        deal: F.FieldArray | None = None,
        deal_shapes: Mapping[int, tuple[int, ...]] | None = None,
        grrs: Sequence[F.FieldArray] = (),
        opens: Sequence[F.FieldArray] = (),
        extra: Extra | None = None,
    ) -> PartyGen[tuple[dict[int, F.FieldArray], list[F.FieldArray], list[F.FieldArray]]]:
        ctx, me = self.ctx, self.ctx.party
        m, t = ctx.params.m, ctx.params.t
        shapes = dict(deal_shapes or {})
        sizes = {j: math.prod(shapes[j]) if j in shapes else 0 for j in ctx.all}
        if sizes[me] and (deal is None or tuple(deal.shape[:-1]) != shapes[me]):
            raise ValueError(f"{what}: party {me} must deal values of shape {shapes[me]}")
        g_flat, g_shapes = flatten(grrs)
        o_flat, o_shapes = flatten(opens)
        ng, no = g_flat.shape[0], o_flat.shape[0]
        empty = np.zeros((m, 0, 2), dtype=np.uint64)
        assert deal is not None or not sizes[me]
        d_rows = split(np.ascontiguousarray(deal).reshape(-1, 2), t, m, self.rng) if sizes[me] else empty
        g_rows = grr_deal(ctx, g_flat, self.rng) if ng else empty
        tail = extra.outgoing(me, ctx.others) if extra is not None else {j: F.zeros((0,)) for j in ctx.others}
        outbox: Outbox = {j: pack(d_rows[j - 1], g_rows[j - 1], o_flat, tail[j]) for j in ctx.others}
        self.rounds += 1
        rnd = self.rounds
        inbox = yield outbox
        more = extra.incoming(me, ctx.others) if extra is not None else {j: 0 for j in ctx.others}
        got = self._receive(inbox, {j: sizes[j] + ng + no + more[j] for j in ctx.others}, rnd, what)
        dealt = {
            j: (d_rows[me - 1] if j == me else got[j][: sizes[j]]).reshape(*shapes[j], 2)
            for j in ctx.all
            if sizes[j]
        }
        reshared = F.zeros((0,))
        if ng:
            rows = {j: got[j][sizes[j] : sizes[j] + ng] for j in ctx.others}
            reshared = grr_combine(ctx, g_rows[me - 1], rows)
        opened = F.zeros((0,))
        if no:
            shares = {j: (o_flat if j == me else got[j][sizes[j] + ng : sizes[j] + ng + no]) for j in ctx.all}
            try:
                opened = recombine(shares, t)
            except ShareError as exc:
                reason = "opened shares do not lie on one polynomial of degree t"
                raise self._abort(rnd, what, reason) from exc
        if extra is not None:
            rest = {j: got[j][sizes[j] + ng + no :] for j in ctx.others}
            try:
                extra.receive(me, rest, t)
            except ShareError as exc:
                reason = "shares opened to this party do not lie on one polynomial of degree t"
                raise self._abort(rnd, what, reason) from exc
        return dealt, unflatten(reshared, g_shapes), unflatten(opened, o_shapes)

    def _receive(self, inbox: Inbox, elements: dict[int, int], rnd: int, what: str) -> dict[int, Payload]:
        try:
            return checked_messages(inbox, elements)
        except ValueError as exc:
            raise self._abort(rnd, what, str(exc)) from exc

    # -- the protocols ---------------------------------------------------------------------------------

    def share_inputs(
        self, values: F.FieldArray | None, shapes: Mapping[int, tuple[int, ...]]
    ) -> PartyGen[dict[int, Auth]]:
        """Each party j in ``shapes`` Shamir-shares its values (shape ``shapes[j]``, public), then one GRR
        round makes [r x_j]: 2 rounds. A dealer may choose its values (the ideal model allows it); the value
        is the one the honest shares define (and, for even m, verify() checks they define one)."""
        self._open_for("share_inputs")
        if values is not None and self.ctx.party not in shapes:
            raise ValueError(f"share_inputs: party {self.ctx.party} has values but no shape in {shapes}")
        dealt, _, _ = yield from self._round("input sharing", deal=values, deal_shapes=shapes)
        order = sorted(dealt)
        _, macs, _ = yield from self._round("input MACs", grrs=[F.mul(self.key, dealt[j]) for j in order])
        out = {j: Auth(dealt[j], mac) for j, mac in zip(order, macs, strict=True)}
        self.track(list(out.values()))
        return out

    def multiply(self, pairs: Sequence[tuple[Auth, Auth]]) -> PartyGen[list[Auth]]:
        """[a b] for each pair, in one round: x_a x_b and (r x_a) x_b reshared in the same messages."""
        out, _ = yield from self.multiply_opening(pairs, ())
        return out

    def multiply_opening(
        self, pairs: Sequence[tuple[Auth, Auth]], opens: Sequence[F.FieldArray], what: str = "multiply"
    ) -> PartyGen[tuple[list[Auth], list[F.FieldArray]]]:
        """:meth:`multiply`, with degree-t shares ``opens`` opened to all with error detection in the same
        round (as :meth:`round`'s ``opens``); ``what`` names the round in an :class:`AbortError`."""
        self._open_for("multiply")
        grrs: list[F.FieldArray] = []
        for a, b in pairs:
            if a.shape != b.shape:
                raise ValueError(f"multiply: shapes {a.shape} and {b.shape} differ")
            grrs += [F.mul(a.x, b.x), F.mul(a.mac, b.x)]
        _, res, opened = yield from self._round(what, grrs=grrs, opens=opens)
        out = [Auth(res[2 * i], res[2 * i + 1]) for i in range(len(pairs))]
        self.track(out)
        return out, opened

    def random_bits(self, n: int) -> PartyGen[Auth]:
        """n authenticated uniform secret bits, 2 rounds: PRSS [s]; round 1 reshares r s and u = s^2;
        round 2 reshares (r s) s (the MAC of u) and opens u with error detection; b = (1 + s / sqrt(u)) / 2.
        An opened u that is 0 (probability about C(m,t)/p honestly) or not a square is refused (abort):
        both (s, r s) and (u, r u) join the check, which catches a shifted square."""
        s = self.draw((n,))
        squares = [F.mul(self.key, s), F.mul(s, s)]
        _, (rs, u_sh), _ = yield from self._round("random bits: squares", grrs=squares)
        what = "random bits: opened squares"
        _, (ru,), (u,) = yield from self._round(what, grrs=[F.mul(rs, s)], opens=[u_sh])
        return self.bits_from_squares(Auth(s, rs), Auth(u_sh, ru), u)

    def checkpoint(self) -> tuple[int, int]:
        """How many tracked pair arrays and zero claims exist now: :meth:`check_upto` checks exactly those."""
        return len(self._values), len(self._zeros)

    def kept_key_check(self, purpose: int) -> KeptKeyCheck:
        """The PRSS draws of a check that keeps the key secret (:meth:`check_upto`) under ``purpose``: its
        coin seed's share, beta, the even-m mask and the pad rho (one PRSS call). Reshare
        :meth:`KeptKeyCheck.reshares` in a round before the check's seed is opened, then :meth:`arm`."""
        seed_share, beta, mask, pad = self.ctx.prss.random(purpose, self.step, (4, 1))
        return KeptKeyCheck(seed_share, beta, mask, pad)

    def arm(self, check: KeptKeyCheck, r_beta: F.FieldArray, r_pad: F.FieldArray) -> ArmedCheck:
        """The check with its reshared [r beta] and [r rho]: tracks the pad pair (rho, r rho) now, so every
        :meth:`checkpoint` taken from here on covers it (:meth:`check_upto` refuses one that does not)."""
        at = len(self._values)
        self.track([Auth(check.pad, r_pad)])
        return ArmedCheck(check, r_beta, at)

    def check_keeping_key(self, armed: ArmedCheck, what: str = "check before the gate") -> PartyGen[None]:
        """3 rounds: a coin seed opened, then :meth:`check_upto` of every pair and claim so far."""
        upto = self.checkpoint()
        _, _, (seed,) = yield from self.round(f"{what}: coin", opens=[armed.check.seed_share])
        yield from self.check_upto(armed, seed, upto, what)
        return None

    def check_upto(
        self, armed: ArmedCheck, seed: F.FieldArray, upto: tuple[int, int], what: str
    ) -> PartyGen[None]:
        """2 rounds: the CheckZero of :meth:`verify` over the pairs and claims tracked before ``upto``
        (:meth:`checkpoint`, taken before ``seed`` was opened), with r kept secret: v = beta T with
        T = u - r w computed as beta u - (r beta) w, where [r beta] (``armed.r_beta``) was reshared before
        any checked value existed; GRR of v, then v opened; for even m the degree test over those sharings
        (the check's mask, a PRSS value). Every error counted was fixed before the seed, and the only later
        one (v's reshare) is added to beta T, beta secret: the check passes only if nothing was altered
        (probability about 3/p otherwise), never depending on a secret. An error e in [r beta] opens
        beta T - e w, w the coin combination of every checked value: the pad, a pair (rho, r rho) of a fresh
        PRSS rho tracked by :meth:`arm`, is among them, so w is uniform and the failing opening shows nothing
        (without it w could be matched against guesses of the honest inputs: found by an independent
        review). A checkpoint taken before the pad was tracked is refused (``ValueError``: a caller's bug)."""
        if armed.pad_at >= upto[0]:
            raise ValueError(f"{what}: the checkpoint {upto} was taken before the check's pad was tracked")
        check = armed.check
        z, _ = flatten(self._values[: upto[0]])
        mac, _ = flatten(self._macs[: upto[0]])
        n = z.shape[0]
        alpha = self.coin(seed, 0, n)
        u, w = F.lincomb(alpha, mac)[None], F.lincomb(alpha, z)[None]
        v2t = F.sub(F.mul(u, check.beta), F.mul(w, armed.r_beta))
        if upto[1]:
            zeros = np.concatenate(self._zeros[: upto[1]])
            v2t = F.add(v2t, F.mul(F.lincomb(self.coin(seed, 2, zeros.shape[0]), zeros)[None], check.beta))
        opens = []
        if self.ctx.params.m > 2 * self.ctx.params.t + 1:  # even m: the degree test over every sharing
            opens = [F.add(F.lincomb(self.coin(seed, 1, 2 * n), np.concatenate([z, mac]))[None], check.mask)]
        _, (v_share,), _ = yield from self.round(f"{what}: product", grrs=[v2t], opens=opens)
        _, _, (v,) = yield from self.round(f"{what}: opening", opens=[v_share])
        if not F.equal(v, F.zeros((1,))).all():
            raise self._abort(self.rounds, what, "the MAC check failed: a value was altered")
        return None

    def bits_from_squares(self, s: Auth, u_pair: Auth, u: F.FieldArray) -> Auth:
        """The authenticated bits b = (1 + s / sqrt(u)) / 2 from the pair (s, r s), the pair (u, r u) of its
        square (both tracked here) and the square u opened with error detection; :class:`AbortError` if an
        opened u is 0 or not a square (only a shifted one can be: a deviation)."""
        return self.bits_with_roots(s, u_pair, u)[0]

    def bits_with_roots(self, s: Auth, u_pair: Auth, u: F.FieldArray) -> tuple[Auth, F.FieldArray]:
        """:meth:`bits_from_squares` and the public 1 / sqrt(u) it used (the square roots are the costly
        part: a caller that needs them too takes them from here)."""
        self.track([s, u_pair])
        v = self.inverse_roots(u)
        return self.bits_from_roots(s, v), v

    def bits_from_roots(self, s: Auth, v: F.FieldArray) -> Auth:
        """The authenticated b = (1 + s v) / 2 for public inverse roots v = 1 / sqrt(u) (a bit once u = s s
        is checked)."""
        return mul_public(self.add_public(mul_public(s, v), 1), _INV2)

    def inverse_roots(self, u: F.FieldArray) -> F.FieldArray:
        """1 / sqrt(u) for squares u opened with error detection; :class:`AbortError` if one is 0 or not a
        square (only a shifted one can be: a deviation)."""
        root = F.sqrt(u)
        if np.any(F.equal(u, F.zeros(u.shape[:-1]))):
            raise self._abort(self.rounds, "random bits", "an opened square is 0 (refused)")
        if not np.all(F.equal(F.mul(root, root), u)):
            raise self._abort(self.rounds, "random bits", "an opened square is not a square")
        return F.inv(root)

    def verify(self) -> PartyGen[None]:
        """The batch check of every pair made so far in this step (3 rounds, see the module docstring).
        Raises :class:`AbortError` if it fails; afterwards the key r is public and only :meth:`open` runs."""
        self._open_for("verify")
        ctx, t = self.ctx, self.ctx.params.t
        z, _ = flatten(self._values)
        mac, _ = flatten(self._macs)
        # one PRSS call for the three values verify draws: the coin seed (opened), beta and the even-m mask
        seed_share, beta, mask = ctx.prss.random(P_VERIFY, self.step, (3, 1))
        self._closed = True  # r is opened next: no new values under this key
        _, _, (seed, r) = yield from self._round("verify: coin and key", opens=[seed_share, self.key])
        n = z.shape[0]
        u = w = F.zeros((1,))
        if n:
            alpha = self.coin(seed, 0, n)
            u, w = F.lincomb(alpha, mac)[None], F.lincomb(alpha, z)[None]
        big_t = F.sub(u, F.mul(r, w))
        if self._zeros:  # values that must be 0, with their own coins (fixed, like the others, only now)
            zeros = np.concatenate(self._zeros)
            big_t = F.add(big_t, F.lincomb(self.coin(seed, 2, zeros.shape[0]), zeros)[None])
        opens = []
        if ctx.params.m > 2 * t + 1 and n:  # even m: the degree test over every sharing of the step
            every = np.concatenate([z, mac])
            opens = [F.add(F.lincomb(self.coin(seed, 1, 2 * n), every)[None], mask)]
        _, (v_share,), _ = yield from self._round(
            "verify: CheckZero product", grrs=[F.mul(big_t, beta)], opens=opens
        )
        _, _, (v,) = yield from self._round("verify: CheckZero opening", opens=[v_share])
        if not F.equal(v, F.zeros((1,))).all():
            raise self._abort(
                self.rounds, "verify", "the MAC check failed: a product, a square or an input MAC was altered"
            )
        self.verified = True
        return None

    def coin(self, seed: F.FieldArray, label: int, n: int) -> F.FieldArray:
        """n public coins from an opened seed (AES-CTR under a key derived from it); verify uses labels
        0..2 of its own seed."""
        key = derive_key(np.ascontiguousarray(seed).tobytes(), self.ctx.params.session_id, b"auth-coin")
        return Prf(key).field(label, self.step, (n,))

    def open(self, values: Sequence[Auth]) -> PartyGen[list[F.FieldArray]]:
        """Open authenticated values to every party with error detection (1 round), after verify()."""
        if not self.verified:
            raise ValueError("open: authenticated values are opened only after verify() has passed")
        _, _, opened = yield from self._round("open outputs", opens=[a.x for a in values])
        return opened

    def open_to_receiver(self, values: Sequence[Auth]) -> PartyGen[None]:
        """Send this party's raw degree-t shares of ``values`` to the receiver (1 round), after verify();
        the receiver decodes with :func:`receive_checked`. The receiver (not colluding with any party) learns
        the output polynomials: the values and fresh resharing randomness, nothing else."""
        if not self.verified:
            raise ValueError("open_to_receiver: outputs are opened only after verify() has passed")
        flat, _ = flatten([a.x for a in values])
        self.rounds += 1
        yield {RECEIVER: pack(flat)}
        return None


def receive_checked(
    params: SessionParams, inbox: Inbox, shapes: Sequence[tuple[int, ...]], step: int, rnd: int
) -> list[F.FieldArray]:
    """The receiver's error-detecting opening of :meth:`AuthParty.open_to_receiver`: the m raw shares of
    each value must all be there and lie on one polynomial of degree t, else :class:`AbortError` (so an
    abort by any honest party, which then sends nothing, is an abort for the receiver too)."""
    what = "receiver: outputs"
    sizes = [math.prod(s) for s in shapes]
    try:
        got = checked_messages(inbox, {j: sum(sizes) for j in range(1, params.m + 1)})
        opened = recombine(got, params.t)
    except ShareError as exc:
        raise AbortError(step, rnd, what, "shares do not lie on one polynomial of degree t") from exc
    except ValueError as exc:
        raise AbortError(step, rnd, what, str(exc)) from exc
    return unflatten(opened, list(shapes))


def key_setup_checked(params: SessionParams, party: int, rng: SecureRandom) -> Machine[PartyKeys]:
    """The session's key setup (:func:`hss.session.key_setup`) followed by one round in which every two
    parties compare, for each PRSS key they both hold, a hash of it: a deviating dealer that gave different
    keys to different holders makes every honest holder that compares with another abort
    (:class:`AbortError`, step 0, round 2). 2 rounds; for sessions with security "abort"."""
    return Machine(party, _checked_setup(params, party, rng), "key_setup[abort]")


def _key_digest(params: SessionParams, a: tuple[int, ...], key: bytes) -> bytes:
    head = b"confar/prss-key-check/v1" + params.session_id + bytes(a)
    return hashlib.sha256(len(head).to_bytes(2, "little") + head + key).digest()


def _checked_setup(params: SessionParams, me: int, rng: SecureRandom) -> PartyGen[PartyKeys]:
    keys = yield from key_setup_rounds(params, me, rng)
    others = [j for j in range(1, params.m + 1) if j != me]
    sets = subsets(params.m, params.t)
    common = {j: [a for a in sets if me not in a and j not in a] for j in others}

    def digests(j: int) -> bytes:
        return b"".join(_key_digest(params, a, keys.prss[a]) for a in common[j])

    inbox = yield {j: np.frombuffer(digests(j), dtype=np.uint64).copy() for j in others}
    what = "key setup check"
    if set(inbox) != set(others):
        raise AbortError(0, 2, what, "a message is missing or unexpected")
    for j in others:
        msg = inbox[j]
        if msg.dtype != np.uint64 or msg.ndim != 1 or msg.tobytes() != digests(j):
            raise AbortError(0, 2, what, "the PRSS keys held in common with another party differ")
    return keys
