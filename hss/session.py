"""The session: what the parties agree on, the key setup, and each party's context.

:class:`SessionParams` is public and the same at every party and the receiver: m parties, threshold t,
a session id, the fixed-point format, and whether it has the honest majority (1 <= t < m/2) that the Shamir
protocols with products need. Which reveal modes a session supports is the reveal-mode table's answer
(:meth:`hss.modes.RevealMode.supported_by`): this module sits below the protocols and the table, and imports
neither. :func:`key_setup` is one round: the lowest party outside
each set A of t parties deals the PRSS key r_A to the other parties outside A, and party min(i, j) deals
the pairwise key k_ij, which gives every party the keys of :class:`hss.prss.PartyKeys`
(honest-but-curious parties; keys are drawn from the dealer's ``SecureRandom``). :class:`PartyContext` is
one party's state for the session (PRSS generators bound to the session id, Lagrange coefficients at 0)
on which every protocol of hss.primitives, hss.protocols and hss.svt runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hss import field as F
from hss.fixedpoint import FixedPoint, max_threshold
from hss.prss import PartyKeys, Prss, dealer_of, subsets
from hss.randomness import SecureRandom
from hss.runtime import Machine, Outbox, PartyGen, ProtocolError
from hss.sharing import lagrange_field

#: How the sign protocol makes its random bits' public square roots when no material is given:
#: "inline" — 1 round, every party computes every root (7 rounds in all); "pooled" — the distributed
#: precompute of :func:`hss.protocols.precompute_sign` run in front of the online rounds (3 rounds, each
#: root computed once, by one party; 9 rounds in all): fewer CPU-seconds per decision, two more rounds;
#: "blocks4" — 2 rounds that precompute every monomial of each block of 4 mask bits (hss.sign_blocks), so
#: the first carry level over blocks is local: 5 online rounds instead of 6 (7 in all), more bytes and CPU;
#: "prefix" — blocks4's 2 rounds with the randomness of a one-round carry over the blocks (hss.sign_prefix):
#: 4 rounds in the step, 3 online when made ahead, several times the bytes: for small batches on a WAN
#: (semi-honest only).
SIGN_PRECOMPUTE = ("inline", "pooled", "blocks4", "prefix")


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

    @property
    def honest_majority(self) -> bool:
        """Whether the Shamir protocols with products (GRR multiplication, random bits, the comparison) run
        in this session: threshold 1 <= t < m/2, so m >= 3."""
        return self.t >= 1 and 2 * self.t < self.m

    def require_honest_majority(self, what: str, hint: str = "") -> None:
        """``ValueError`` naming ``what`` (and adding ``hint``) unless :attr:`honest_majority` holds."""
        if not self.honest_majority:
            raise ValueError(
                f"{what} needs an honest majority with t >= 1 (m >= 3); this session has "
                f"m = {self.m}, t = {self.t}." + (f" {hint}" if hint else "")
            )

    @property
    def sign_rounds(self) -> tuple[int, int]:
        """(precompute, online) rounds of the sign protocol with the inline precompute."""
        nodes = math.ceil(self.fmt.compare_bits / 2)
        levels = math.ceil(math.log2(nodes)) if nodes > 1 else 0
        return 1, 1 + max(levels, 1)

    def sign_rounds_in_step(self, precompute: str) -> int:
        """All the rounds of a sign batch that makes its own precompute: the precompute's and the online
        rounds of :meth:`sign_rounds_with`, but for "prefix", which opens c with its second precompute round
        (c needs only the first round's mask bits): 4, against 5 with the material made ahead."""
        pre, online = self.sign_rounds_with(precompute)
        return pre + online - (1 if precompute == "prefix" else 0)

    def sign_rounds_with(self, precompute: str) -> tuple[int, int]:
        """(precompute, online) rounds of the sign protocol run with ``precompute`` (SIGN_PRECOMPUTE)."""
        check_precompute(precompute)
        if precompute == "prefix":  # made ahead: blocks4's 2 rounds, then c, R a R^-1 and the output
            return 2, 3
        if precompute != "blocks4":
            return (1 if precompute == "inline" else 3), self.sign_rounds[1]
        nodes = math.ceil(self.fmt.compare_bits / 4)
        levels = math.ceil(math.log2(nodes)) if nodes > 1 else 0
        return 2, 1 + max(levels, 1)


def check_precompute(precompute: str) -> None:
    if precompute not in SIGN_PRECOMPUTE:
        raise ValueError(f"sign precompute {precompute!r} is not one of {SIGN_PRECOMPUTE}")


def key_setup(params: SessionParams, party: int, rng: SecureRandom) -> Machine[PartyKeys]:
    """One round: the lowest party outside A deals PRSS key r_A; party min(i, j) deals pairwise key k_ij."""
    return Machine(party, key_setup_rounds(params, party, rng), "key_setup")


def key_setup_rounds(params: SessionParams, me: int, rng: SecureRandom) -> PartyGen[PartyKeys]:
    """The round of :func:`key_setup` as a generator, for a machine that runs more rounds after it."""
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
