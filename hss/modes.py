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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hss.abort_blinded import BLINDED_ABORT_ROUNDS, blinded_party_abort, blinded_receiver_abort
from hss.abort_modes import (
    SECURITY,
    SUM_ABORT_ROUNDS,
    abort_refuses,
    check_security,
    sum_party_abort,
    sum_receiver_abort,
)
from hss.abort_sign import (
    AbortSignMaterial,
    precompute_sign_abort,
    sign_abort_rounds,
    sign_party_abort,
    sign_receiver_abort,
)
from hss.abort_svt import svt_decide_receiver_abort
from hss.lazy_coin import LazyCoin
from hss.protocols import (
    Decisions,
    PartyReport,
    SignMaterial,
    blinded_party,
    blinded_receiver,
    precompute_blocks,
    precompute_prefix,
    precompute_sign,
    sign_party,
    sign_receiver,
    sum_party,
    sum_receiver,
)
from hss.randomness import SecureRandom
from hss.runtime import Inbox, Machine
from hss.session import PartyContext, SessionParams, check_precompute
from hss.sign_blocks import BlockMaterial
from hss.sign_prefix import PrefixMaterial
from hss.svt import svt_decide_receiver

__all__ = [
    "FEATURES",
    "REVEAL",
    "REVEAL_MODES",
    "TERMS",
    "TERMS_MODES",
    "RevealMode",
    "Security",
    "SessionMode",
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
    material: SignMaterial | BlockMaterial | PrefixMaterial | AbortSignMaterial | None = None
    lazy: LazyCoin | None = None
    security: str = "semi-honest"
    rounds_before: int = 0  # the step's rounds run already by a pool made ahead and discarded (parties.ahead)

    def __post_init__(self) -> None:
        check_precompute(self.precompute)
        check_security(self.security)


PartyFactory = Callable[[PartyContext, TermsBatch], Machine[PartyReport]]
#: a batch's input-independent first rounds, run ahead of its terms: (ctx, n, step, rng, precompute) ->
#: the machine whose result is the batch's ``TermsBatch.material``
AheadFactory = Callable[[PartyContext, int, int, SecureRandom, str], Machine[Any]]
#: the receiver's decoder of a batch's final round: (params, inbox, n, step) -> decisions
Receiver = Callable[[SessionParams, Inbox, int, int], Decisions]


def _offered(precompute: str, lazy: bool, ahead: bool) -> str | None:
    return None


@dataclass(frozen=True)
class Security:
    """How one reveal mode runs under one security (an entry of :attr:`RevealMode.securities`).

    ``party`` builds this party's :class:`hss.runtime.Machine` for one batch from a :class:`TermsBatch`,
    passing the mode's own protocol factory only the fields it takes (None for a mode with other inputs,
    whose analysis starts its protocol itself: svt). ``receiver(params, inbox, n, step)`` decodes the final
    round's messages into :class:`hss.protocols.Decisions` (under "abort" an
    :class:`hss.authenticated.AbortError` names the step and the round). ``rounds(params, precompute,
    lazy, ahead)``: the sequential rounds of a batch (all of them, the ones run ahead included), or None
    when the batch sets them (svt). ``refuses(precompute, lazy, ahead)``: why the session's sign precompute,
    lazy coin or precompute ahead is not offered under this security yet, or None. ``ahead``: the machine
    of a batch's first rounds made before its terms exist (``precompute_ahead``, ``parties.ahead``), None
    where the mode has none."""

    party: PartyFactory | None
    receiver: Receiver
    rounds: Callable[[SessionParams, str, bool, bool], int] | None
    refuses: Callable[[str, bool, bool], str | None] = _offered
    ahead: AheadFactory | None = None


@dataclass(frozen=True)
class RevealMode:
    """One reveal mode, as the protocol layer knows it (public, the same at every party and the receiver).

    ``securities`` maps each security the mode is offered with (``SECURITY``: "semi-honest", hss.protocols;
    "abort", hss.abort_modes, hss.abort_blinded, hss.abort_sign, hss.abort_svt) to how it runs under it
    (:class:`Security`); :meth:`under` resolves a session's (mode, security, sign precompute, lazy coin,
    precompute ahead) once into the :class:`SessionMode` it runs, refusing what is not offered.
    ``honest_majority``: the mode runs only with Shamir threshold 1 <= t < m/2 (so m >= 3,
    ``SessionParams.honest_majority``); otherwise any m >= 2 and 0 <= t <= m - 1. ``inputs``: what a party
    brings (:data:`TERMS` or :data:`FEATURES`). ``blinding``: each party also brings its blinding share W_j.
    ``lazy_coin``: the protocol can AND a secret lazy coin with the bit; ``sign_precompute``: the session's
    ``sign_precompute`` choice applies. ``reproducible``: the same inputs and noise terms reveal exactly the
    same in any session (without a lazy coin). :meth:`machine`, :meth:`decode` and :meth:`rounds` are
    shorthands of :meth:`under` for one batch.
    """

    name: str
    receiver_learns: str
    tolerates: str
    securities: Mapping[str, Security]
    honest_majority: bool
    inputs: str = TERMS
    blinding: bool = False
    lazy_coin: bool = False
    sign_precompute: bool = False
    reproducible: bool = True

    def under(
        self, security: str, precompute: str = "inline", lazy: bool = False, ahead: bool = False
    ) -> SessionMode:
        """The mode as a session with ``security``, sign precompute ``precompute``, a lazy coin or not and
        precompute ahead or not runs it; ``ValueError`` naming what is not offered (an unknown security, a
        security this mode has no protocol for yet, a lazy coin in a mode that takes none, a choice the
        security does not offer)."""
        check_security(security)
        check_precompute(precompute)
        entry = self.securities.get(security)
        if entry is None:
            offered = tuple(k for k, e in REVEAL.items() if security in e.securities)
            raise ValueError(
                f"reveal mode {self.name!r} is not offered with security {security!r} yet (offered: "
                f"{offered}); use security 'semi-honest' or another reveal mode"
            )
        if lazy and not self.lazy_coin:
            raise ValueError(
                f"a lazy coin is ANDed with the accept bit in reveal mode {_lazy_modes()} only, "
                f"not {self.name!r}"
            )
        why = entry.refuses(precompute, lazy, ahead)
        if why is not None:
            raise ValueError(why)
        if ahead and entry.ahead is None:
            raise ValueError(f"precompute_ahead applies to reveal mode 'sign' only, not {self.name!r}")
        return SessionMode(self, security, precompute, lazy, entry, ahead)

    def require_security(
        self, security: str, precompute: str = "inline", lazy: bool = False, ahead: bool = False
    ) -> None:
        """``ValueError`` naming what is not offered (:meth:`under`)."""
        self.under(security, precompute, lazy, ahead)

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
        """Sequential rounds of a batch in a session with ``params``, ``precompute`` and ``security``."""
        return self.under(security, precompute).rounds(params)

    def machine(self, ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
        """This party's machine for one ``batch`` (its security, precompute and lazy coin resolved here)."""
        ahead = batch.material is not None
        mode = self.under(batch.security, batch.precompute, batch.lazy is not None, ahead)
        return mode.machine(ctx, batch)

    def decode(self, params: SessionParams, inbox: Inbox, n: int, step: int, security: str) -> Decisions:
        """The receiver's decisions of batch ``step`` under ``security``."""
        return self.under(security).decode(params, inbox, n, step)


@dataclass(frozen=True)
class SessionMode:
    """A reveal mode resolved for one session (:meth:`RevealMode.under`, once, when the session's spec is
    made: ``proto.spec.SessionSpec.mode``): the party machine, the decoder and the rounds its batches run,
    with nothing left to dispatch on."""

    mode: RevealMode
    security: str
    precompute: str
    lazy: bool
    entry: Security
    ahead: bool = False  # precompute_ahead: each batch's first rounds made before its terms (parties.ahead)

    def machine(self, ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
        """This party's machine for ``batch``, after refusing a batch the session's mode does not take
        (other inputs than decision terms; a lazy coin the session did not resolve, which would otherwise
        be dropped and reveal the plain test where the caller asked for a lazy one)."""
        if self.entry.party is None:
            raise ValueError(
                f"reveal mode {self.mode.name!r} takes {self.mode.inputs}, not decision terms: its analysis "
                "starts its own party machine"
            )
        if batch.lazy is not None and not self.lazy:
            raise ValueError(
                f"a lazy coin is ANDed with the accept bit in reveal mode {_lazy_modes()} only, and only in "
                f"a session that asks for it (model_params.lazy), not in this {self.mode.name!r} session"
            )
        if batch.security != self.security or batch.precompute != self.precompute:
            raise ValueError(
                f"the batch's security / sign precompute {batch.security!r} / {batch.precompute!r} differ "
                f"from the session's {self.security!r} / {self.precompute!r}"
            )
        return self.entry.party(ctx, batch)

    def ahead_machine(self, ctx: PartyContext, n: int, step: int, rng: SecureRandom) -> Machine[Any]:
        """This party's machine of batch ``step``'s first rounds for ``n`` decisions, made before its terms
        (its result is the batch's ``TermsBatch.material``); ``ValueError`` for a session without
        precompute ahead."""
        if not self.ahead or self.entry.ahead is None:
            raise ValueError(f"this {self.mode.name!r} session makes no material ahead (precompute_ahead)")
        return self.entry.ahead(ctx, n, step, rng, self.precompute)

    def decode(self, params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
        """The receiver's decisions from the final round's messages of batch ``step``."""
        return self.entry.receiver(params, inbox, n, step)

    def rounds(self, params: SessionParams) -> int:
        """Sequential rounds of a batch; ValueError when the batch sets them (svt)."""
        if self.entry.rounds is None:
            where = "hss.svt.SvtFormat.rounds" if self.security == "semi-honest" else "hss.abort_svt"
            raise ValueError(
                f"rounds of {self.mode.name!r} under security {self.security!r} are set by the batch, not "
                f"the session: see {where}"
            )
        return self.entry.rounds(params, self.precompute, self.lazy, self.ahead)


def _lazy_modes() -> str:
    """The reveal modes that take a lazy coin, for a refusal's message."""
    return " or ".join(repr(k) for k, e in REVEAL.items() if e.lazy_coin)


def _sum_party(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    return sum_party(ctx, batch.values, batch.public, batch.step)


def _blinded_party(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    if batch.blind is None:
        raise ValueError("blinded mode needs this party's blinding share W_j (TermsBatch.blind)")
    return blinded_party(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.blind, batch.reveal_rng
    )


def _sum_party_abort(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    return sum_party_abort(ctx, batch.values, batch.public, batch.step)


def _blinded_party_abort(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    if batch.blind is None:
        raise ValueError("blinded mode needs this party's blinding share W_j (TermsBatch.blind)")
    return blinded_party_abort(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.blind, batch.reveal_rng
    )


def _sign_party(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    if isinstance(batch.material, AbortSignMaterial):
        raise ValueError("sign material made under security 'abort' given to a semi-honest batch")
    return sign_party(
        ctx, batch.values, batch.public, batch.step, batch.rng, batch.material, batch.precompute, batch.lazy
    )


def _sign_ahead(ctx: PartyContext, n: int, step: int, rng: SecureRandom, precompute: str) -> Machine[Any]:
    """The semi-honest sign precompute of a batch (inline: 1 round; pooled: 3; blocks4 and prefix: 2)."""
    if precompute == "blocks4":
        return precompute_blocks(ctx, n, step, rng)
    if precompute == "prefix":
        return precompute_prefix(ctx, n, step, rng)
    return precompute_sign(ctx, n, step, rng, distributed=precompute == "pooled", ahead=True)


def _sign_party_abort(ctx: PartyContext, batch: TermsBatch) -> Machine[PartyReport]:
    material = batch.material
    if material is not None and not isinstance(material, AbortSignMaterial):
        raise ValueError("semi-honest sign material given to a batch under security 'abort'")
    return sign_party_abort(
        ctx,
        batch.values,
        batch.public,
        batch.step,
        batch.rng,
        batch.precompute,
        batch.lazy,
        material,
        batch.rounds_before,
    )


def _svt_receiver(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """Federated ABCDP: only the SVT output bits reach the receiver (hss.svt)."""
    bits = svt_decide_receiver(params, inbox, n)
    return Decisions(accept=np.asarray(bits, dtype=bool), revealed=None)


def _svt_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """Federated ABCDP under security "abort": the bits after the parties' check (hss.abort_svt)."""
    bits = svt_decide_receiver_abort(params, inbox, n, step)
    return Decisions(accept=np.asarray(bits, dtype=bool), revealed=None)


def _semi_honest(
    party: PartyFactory | None,
    receiver: Callable[[SessionParams, Inbox, int], Decisions],
    rounds: Callable[[SessionParams, str, bool], int] | None,
    ahead: AheadFactory | None = None,
) -> Security:
    """A semi-honest protocol (hss.protocols): its receiver and rounds take no step and no lazy coin."""
    return Security(
        party,
        lambda params, inbox, n, step: receiver(params, inbox, n),
        None if rounds is None else lambda params, precompute, lazy, made: rounds(params, precompute, made),
        ahead=ahead,
    )


def _sign_rounds(params: SessionParams, precompute: str, ahead: bool) -> int:
    """Inline precompute: 1 round in front of the online rounds; pooled: the 3 rounds of precompute_sign;
    blocks4: 2 rounds in front of fewer online rounds (hss.sign_blocks); prefix: 4 in the step, 2 + 3 with
    the material made ahead (hss.sign_prefix)."""
    if not ahead:
        return params.sign_rounds_in_step(precompute)
    pre, online = params.sign_rounds_with(precompute)
    return pre + online


#: The reveal modes, in the order they are listed to users. Adding one: a new entry here and in
#: ``mechanisms.privacy.threat.REVEAL_PRIVACY``, plus its protocol and privacy modules (hss/README.md).
REVEAL: dict[str, RevealMode] = {
    "sum": RevealMode(
        name="sum",
        receiver_learns="S",
        tolerates="parties learn nothing; any m >= 2, 0 <= t <= m - 1",
        securities={
            "semi-honest": _semi_honest(_sum_party, sum_receiver, lambda params, precompute, ahead: 1),
            "abort": Security(
                _sum_party_abort,
                sum_receiver_abort,
                lambda p, pre, lazy, ahead: SUM_ABORT_ROUNDS,
                abort_refuses,
            ),
        },
        honest_majority=False,
    ),
    "blinded": RevealMode(
        name="blinded",
        receiver_learns="(S + 2^-(f+1)) W' + E 2^-(f+1+f_w): the sign of S, its magnitude blurred",
        tolerates="t < m/2 colluding parties (m >= 3)",
        securities={
            "semi-honest": _semi_honest(_blinded_party, blinded_receiver, lambda params, pre, ahead: 2),
            "abort": Security(
                _blinded_party_abort,
                blinded_receiver_abort,
                lambda p, pre, lazy, ahead: BLINDED_ABORT_ROUNDS,
                abort_refuses,
            ),
        },
        honest_majority=True,
        blinding=True,
    ),
    "sign": RevealMode(
        name="sign",
        receiver_learns="only the bit [S >= 0] (AND a secret coin with a lazy coin)",
        tolerates="t < m/2 colluding parties (m >= 3)",
        securities={
            "semi-honest": _semi_honest(_sign_party, sign_receiver, _sign_rounds, _sign_ahead),
            "abort": Security(
                _sign_party_abort,
                sign_receiver_abort,
                lambda p, pre, lazy, ahead: sign_abort_rounds(pre, lazy, ahead),
                abort_refuses,
                precompute_sign_abort,
            ),
        },
        honest_majority=True,
        lazy_coin=True,
        sign_precompute=True,
    ),
    "svt": RevealMode(
        name="svt",
        receiver_learns="only the SVT output bits up to the c-th accept (also opened to every party)",
        tolerates="t < m/2 colluding parties (m >= 3); more reconstruct every party's inputs",
        # the party machine: the ABCDP analysis runs hss.svt.svt_decide_party on the feature sums (under
        # abort hss.abort_svt.svt_decide_party_abort); the batch sets the rounds
        securities={
            "semi-honest": Security(None, _svt_receiver, None),
            "abort": Security(None, _svt_receiver_abort, None, abort_refuses),
        },
        honest_majority=True,
        inputs=FEATURES,
        reproducible=False,
    ),
}
assert all(set(e.securities) <= set(SECURITY) for e in REVEAL.values())
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
