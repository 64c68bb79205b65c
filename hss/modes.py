"""The reveal-mode table: one entry per reveal mode, with everything the protocol layer knows about it.

A reveal mode says what the receiver (the coordinator) learns of a batch of confidential decisions
(DESIGN.md §1). :data:`REVEAL` maps each mode's name to a frozen :class:`RevealMode`: the party machine
factory, the receiver's decoder, the rounds, the thresholds it tolerates, what the receiver learns, and
the few facts the layers above dispatch on (which inputs a party brings, whether it takes a lazy coin or
the sign precompute, whether a rerun reveals the same). Parties, the coordinator, ``proto.spec`` and
``mechanisms`` look modes up here instead of comparing strings; :func:`reveal_mode` is the one lookup, and
its error names the mode and lists the known ones.

This is the one place a mode's name is turned into code: each entry registers its mode's own protocol
functions (``hss.protocols.sum_party`` / ``blinded_party`` / ``sign_party``, each taking only what its mode
needs, and ``sum_receiver`` / ``blinded_receiver`` / ``sign_receiver``). A caller that holds a mode's name
hands one :class:`TermsBatch` to :meth:`RevealMode.machine`; the entry's factory reads the fields its mode
takes, and no protocol branches on the name again.

The privacy side of each mode (what a coalition of q registries observes, how it is charged) is the
matching table ``mechanisms.privacy.threat.REVEAL_PRIVACY``, keyed by the same names (a test checks that
the two tables have the same keys): ``mechanisms`` may import ``hss``, not the other way round.

This module sits above the protocols it names (``hss.protocols``, ``hss.svt``) and above ``hss.session``;
nothing in ``hss`` imports it, not even inside a function (``tests/test_layers.py`` counts those too), so
the protocols check what they need of a session themselves (``SessionParams.require_honest_majority``).
Security assumptions are those of each protocol's module: honest-but-curious parties, a receiver that does
not collude with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hss.abort_blinded import blinded_party_abort, blinded_receiver_abort
from hss.abort_modes import (
    abort_rounds,
    check_abort_supported,
    check_security,
    sum_party_abort,
    sum_receiver_abort,
)
from hss.abort_sign import sign_party_abort, sign_receiver_abort
from hss.abort_svt import svt_decide_receiver_abort
from hss.lazy_coin import LazyCoin
from hss.protocols import (
    Decisions,
    PartyReport,
    SignMaterial,
    blinded_party,
    blinded_receiver,
    sign_party,
    sign_receiver,
    sum_party,
    sum_receiver,
)
from hss.randomness import SecureRandom
from hss.runtime import Inbox, Machine
from hss.session import PartyContext, SessionParams, check_precompute
from hss.sign_blocks import BlockMaterial
from hss.svt import svt_decide_receiver

__all__ = [
    "FEATURES",
    "REVEAL",
    "REVEAL_MODES",
    "TERMS",
    "TERMS_MODES",
    "RevealMode",
    "TermsBatch",
    "reveal_mode",
]

#: what a party brings to a batch: its decision terms x_j = l_j + its noise share (:class:`TermsBatch`) ...
TERMS = "terms"
#: ... or federated ABCDP's feature sum S_j and SVT noise shares tau_j (``hss.svt.svt_decide_party``)
FEATURES = "features"


@dataclass(frozen=True)
class TermsBatch:
    """One party's side of one batch in a mode that takes decision terms (``inputs == TERMS``), with the
    session's choices for it: what a caller that holds a mode's name (the party daemon, the in-memory decider)
    hands to :meth:`RevealMode.machine`.

    Every mode reads ``values`` (this party's terms, its noise share added), ``public`` (the same at every
    party, or None) and ``step`` (the per-session batch counter). The others are read only by the modes whose
    entry says so: ``rng`` (this party's CSPRNG) by the Shamir modes, ``blind`` (W_j) and ``reveal_rng``
    by a mode with ``blinding``, ``precompute`` (one of ``SIGN_PRECOMPUTE``) and ``material`` (made ahead)
    by a mode with ``sign_precompute``, ``lazy`` by a mode with ``lazy_coin``. ``security`` (one of
    ``SECURITY``, the session's): "abort" runs the mode's machine of hss.abort_modes (hss.abort_blinded for
    ``blinded``), where it has one.
    """

    values: npt.ArrayLike
    public: npt.ArrayLike | None
    step: int
    rng: SecureRandom
    blind: npt.ArrayLike | None = None
    reveal_rng: SecureRandom | None = None
    precompute: str = "inline"
    material: SignMaterial | BlockMaterial | None = None
    lazy: LazyCoin | None = None
    security: str = "semi-honest"

    def __post_init__(self) -> None:
        check_precompute(self.precompute)
        check_security(self.security)


@dataclass(frozen=True)
class RevealMode:
    """One reveal mode, as the protocol layer knows it (public, the same at every party and the receiver).

    ``party`` builds this party's :class:`hss.runtime.Machine` for one batch of a mode with
    ``inputs == TERMS`` from a :class:`TermsBatch`, passing the mode's own protocol factory
    (``hss.protocols.sum_party`` / ``blinded_party`` / ``sign_party``) only the fields it takes; callers
    start it with :meth:`machine`. It is None for a mode with other inputs, whose analysis calls its
    protocol itself (svt: ``hss.svt.svt_decide_party`` with the feature sums). ``receiver(params, inbox, n)``
    decodes the final round's messages into :class:`hss.protocols.Decisions`.
    ``batch_rounds(params, precompute)`` is the number of sequential rounds of a batch (read it with
    :meth:`rounds`), or None when the batch sets it (svt: ``SvtFormat.rounds``). ``honest_majority``: the
    mode runs only with Shamir threshold 1 <= t < m/2 (so m >= 3, ``SessionParams.honest_majority``);
    otherwise any m >= 2 and 0 <= t <= m - 1. ``blinding``: each party also brings its blinding
    share W_j. ``lazy_coin``: the protocol can AND a secret lazy coin with the bit; ``sign_precompute``: the
    session's ``sign_precompute`` choice applies. ``reproducible``: the same inputs and noise terms reveal
    exactly the same in any session (without a lazy coin). ``abort_party`` / ``abort_receiver``: the mode's
    machine and decoder under ``security = "abort"`` (hss.abort_modes, hss.abort_blinded), None where the
    mode is not offered with it yet; :meth:`machine`, :meth:`decode` and :meth:`rounds` choose by the
    batch's / session's security.
    """

    name: str
    receiver_learns: str
    tolerates: str
    party: Callable[[PartyContext, TermsBatch], Machine[PartyReport]] | None
    receiver: Callable[[SessionParams, Inbox, int], Decisions]
    batch_rounds: Callable[[SessionParams, str], int] | None
    honest_majority: bool
    inputs: str = TERMS
    blinding: bool = False
    lazy_coin: bool = False
    sign_precompute: bool = False
    reproducible: bool = True
    abort_party: Callable[[PartyContext, TermsBatch], Machine[PartyReport]] | None = None
    abort_receiver: Callable[[SessionParams, Inbox, int, int], Decisions] | None = None

    def require_security(
        self, security: str, precompute: str = "inline", lazy: bool = False, ahead: bool = False
    ) -> None:
        """``ValueError`` naming what is not offered: an unknown security, or a mode / sign precompute / lazy
        coin / precompute ahead that has no machine under security "abort" yet."""
        check_security(security)
        if security == "abort":
            check_abort_supported(self.name, precompute, lazy, ahead)

    def supported_by(self, params: SessionParams) -> bool:
        """Whether a session with ``params`` (m, t) can run this mode."""
        return not self.honest_majority or params.honest_majority

    def check_supported(self, params: SessionParams) -> None:
        """``ValueError`` naming the mode, the session's m and t and the modes it can run, unless
        :meth:`supported_by`."""
        if not self.supported_by(params):
            without = " or ".join(repr(k) for k, e in REVEAL.items() if not e.honest_majority)
            params.require_honest_majority(
                f"reveal mode {self.name!r}", hint=f"With m = 2 only {without} is available."
            )

    def rounds(self, params: SessionParams, precompute: str = "inline", security: str = "semi-honest") -> int:
        """Sequential rounds of a batch in this mode in a session with ``params``, its sign precompute being
        ``precompute`` (one of ``SIGN_PRECOMPUTE``) and its security ``security``; ValueError when the batch
        sets them (svt)."""
        if security != "semi-honest":
            self.require_security(security, precompute)
            return abort_rounds(self.name, precompute)
        if self.batch_rounds is None:
            raise ValueError(
                f"rounds of {self.name!r} are not fixed by the session: see hss.svt.SvtFormat.rounds"
            )
        check_precompute(precompute)
        return self.batch_rounds(params, precompute)

    def machine(self, ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
        """This party's machine for ``batch``: :attr:`party`, after refusing what the entry says the mode
        does not take (other inputs than decision terms; a lazy coin, which would otherwise be dropped and
        reveal the plain test where the caller asked for a lazy one)."""
        if self.party is None:
            raise ValueError(
                f"reveal mode {self.name!r} takes {self.inputs}, not decision terms: its analysis starts its "
                "own party machine"
            )
        if batch.lazy is not None and not self.lazy_coin:
            lazy = " or ".join(repr(k) for k, e in REVEAL.items() if e.lazy_coin)
            raise ValueError(
                f"a lazy coin is ANDed with the accept bit in reveal mode {lazy} only, not {self.name!r}"
            )
        if batch.security == "abort":
            ahead = batch.material is not None
            self.require_security("abort", batch.precompute, batch.lazy is not None, ahead)
            assert self.abort_party is not None  # check_abort_supported names the modes that have one
            return self.abort_party(ctx, batch)
        return self.party(ctx, batch)

    def decode(self, params: SessionParams, inbox: Inbox, n: int, step: int, security: str) -> Decisions:
        """The receiver's decisions from the final round's messages of batch ``step`` (its security's
        decoder; under "abort" an :class:`hss.authenticated.AbortError` names the step and the round)."""
        if security == "abort":
            self.require_security(security)
            assert self.abort_receiver is not None
            return self.abort_receiver(params, inbox, n, step)
        return self.receiver(params, inbox, n)


def _sum_party(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    return sum_party(ctx, batch.values, batch.public, batch.step)


def _blinded_party(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    if batch.blind is None:
        raise ValueError("blinded mode needs this party's blinding share W_j (TermsBatch.blind)")
    return blinded_party(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.blind, batch.reveal_rng
    )


def _sign_party(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    return sign_party(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.material, batch.precompute, batch.lazy
    )


def _sum_party_abort(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    return sum_party_abort(ctx, batch.values, batch.public, batch.step)


def _blinded_party_abort(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    if batch.blind is None:
        raise ValueError("blinded mode needs this party's blinding share W_j (TermsBatch.blind)")
    return blinded_party_abort(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.blind, batch.reveal_rng
    )


def _sign_party_abort(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    return sign_party_abort(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.precompute, batch.lazy
    )


def _svt_receiver(params: SessionParams, inbox: Inbox, n: int) -> Decisions:
    """Federated ABCDP: only the SVT output bits reach the receiver (hss.svt)."""
    bits = svt_decide_receiver(params, inbox, n)
    return Decisions(accept=np.asarray(bits, dtype=bool), revealed=None)


def _svt_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """Federated ABCDP under security "abort": the bits after the parties' check (hss.abort_svt)."""
    bits = svt_decide_receiver_abort(params, inbox, n, step)
    return Decisions(accept=np.asarray(bits, dtype=bool), revealed=None)


def _sign_rounds(params: SessionParams, precompute: str) -> int:
    """Inline precompute: 1 round in front of the online rounds; pooled: the 3 rounds of precompute_sign;
    blocks4: 2 rounds in front of fewer online rounds (hss.sign_blocks)."""
    pre, online = params.sign_rounds_with(precompute)
    return pre + online


#: The reveal modes, in the order they are listed to users. Adding one: a new entry here and in
#: ``mechanisms.privacy.threat.REVEAL_PRIVACY``, plus its protocol and privacy modules (hss/README.md).
REVEAL: dict[str, RevealMode] = {
    "sum": RevealMode(
        name="sum",
        receiver_learns="S",
        tolerates="parties learn nothing; any m >= 2, 0 <= t <= m - 1",
        party=_sum_party,
        receiver=sum_receiver,
        batch_rounds=lambda params, precompute: 1,
        honest_majority=False,
        abort_party=_sum_party_abort,
        abort_receiver=sum_receiver_abort,
    ),
    "blinded": RevealMode(
        name="blinded",
        receiver_learns="(S + 2^-(f+1)) W' + E 2^-(f+1+f_w): the sign of S, its magnitude blurred",
        tolerates="t < m/2 colluding parties (m >= 3)",
        party=_blinded_party,
        receiver=blinded_receiver,
        batch_rounds=lambda params, precompute: 2,
        honest_majority=True,
        blinding=True,
        abort_party=_blinded_party_abort,
        abort_receiver=blinded_receiver_abort,
    ),
    "sign": RevealMode(
        name="sign",
        receiver_learns="only the bit [S >= 0] (AND a secret coin with a lazy coin)",
        tolerates="t < m/2 colluding parties (m >= 3)",
        party=_sign_party,
        receiver=sign_receiver,
        batch_rounds=_sign_rounds,
        honest_majority=True,
        lazy_coin=True,
        sign_precompute=True,
        abort_party=_sign_party_abort,
        abort_receiver=sign_receiver_abort,
    ),
    "svt": RevealMode(
        name="svt",
        receiver_learns="only the SVT output bits up to the c-th accept (also opened to every party)",
        tolerates="t < m/2 colluding parties (m >= 3); more reconstruct every party's inputs",
        party=None,  # the ABCDP analysis runs hss.svt.svt_decide_party on the feature sums
        receiver=_svt_receiver,
        batch_rounds=None,
        honest_majority=True,
        inputs=FEATURES,
        reproducible=False,
        abort_receiver=_svt_receiver_abort,  # the party machine: hss.abort_svt.svt_decide_party_abort
    ),
}
#: the names of :data:`REVEAL`, in order
REVEAL_MODES: tuple[str, ...] = tuple(REVEAL)
#: the modes whose parties bring decision terms (``inputs == TERMS``: a :class:`TermsBatch`), in order
TERMS_MODES: tuple[str, ...] = tuple(k for k, e in REVEAL.items() if e.inputs == TERMS)


def reveal_mode(name: str) -> RevealMode:
    """The entry of reveal mode ``name``; ``ValueError`` naming it and the known modes if there is none."""
    entry = REVEAL.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(f"unknown reveal mode {name!r}; expected one of {REVEAL_MODES}")
    return entry
