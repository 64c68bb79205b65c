"""The reveal-mode table: one entry per reveal mode, with everything the protocol layer knows about it.

A reveal mode says what the receiver (the coordinator) learns of a batch of confidential decisions
(DESIGN.md §1). :data:`REVEAL` maps each mode's name to a frozen :class:`RevealMode`: the party machine
factory, the receiver's decoder, the rounds, the thresholds it tolerates, what the receiver learns, and
the few facts the layers above dispatch on (which inputs a party brings, whether it takes a lazy coin or
the sign precompute, whether a rerun reveals the same). Parties, the coordinator, ``proto.spec`` and
``mechanisms`` look modes up here instead of comparing strings; :func:`reveal_mode` is the one lookup, and
its error names the mode and lists the known ones.

The privacy side of each mode (what a coalition of q registries observes, how it is charged) is the
matching table ``mechanisms.privacy.threat.REVEAL_PRIVACY``, keyed by the same names (a test checks that
the two tables have the same keys): ``mechanisms`` may import ``hss``, not the other way round.

This module sits above the protocols it names (``hss.protocols``, ``hss.svt``); ``hss.session`` reads it
inside its methods only, so there is no import cycle. Security assumptions are those of each protocol's
module: honest-but-curious parties, a receiver that does not collude with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from hss.protocols import Decisions, decide_party, decide_receiver
from hss.runtime import Inbox, Machine
from hss.session import SessionParams
from hss.svt import svt_decide_party, svt_decide_receiver

__all__ = ["FEATURES", "REVEAL", "REVEAL_MODES", "TERMS", "RevealMode", "reveal_mode"]

#: what a party brings to a batch: its decision terms x_j = l_j + its noise share (``decide_party``) ...
TERMS = "terms"
#: ... or federated ABCDP's feature sum S_j and SVT noise shares tau_j (``svt_decide_party``)
FEATURES = "features"


@dataclass(frozen=True)
class RevealMode:
    """One reveal mode, as the protocol layer knows it (public, the same at every party and the receiver).

    ``party`` builds this party's :class:`hss.runtime.Machine` for one batch: for ``inputs == TERMS`` it
    takes ``decide_party``'s arguments after ``mode`` (ctx, values, public, step, rng, ...), for
    ``FEATURES`` those of ``svt_decide_party``. ``receiver(params, inbox, n)`` decodes the final round's
    messages into :class:`hss.protocols.Decisions`. ``rounds(params, precompute)`` is the number of
    sequential rounds of a batch, or None when the batch sets it (svt: ``SvtFormat.rounds``).
    ``honest_majority``: the mode runs only with Shamir threshold 1 <= t < m/2 (so m >= 3); otherwise any
    m >= 2 and 0 <= t <= m - 1. ``blinding``: each party also brings its blinding share W_j.
    ``lazy_coin``: the protocol can AND a secret lazy coin with the bit; ``sign_precompute``: the session's
    ``sign_precompute`` choice applies. ``reproducible``: the same inputs and noise terms reveal exactly
    the same in any session (without a lazy coin).
    """

    name: str
    receiver_learns: str
    tolerates: str
    party: Callable[..., Machine[Any]]
    receiver: Callable[[SessionParams, Inbox, int], Decisions]
    rounds: Callable[[SessionParams, str], int] | None
    honest_majority: bool
    inputs: str = TERMS
    blinding: bool = False
    lazy_coin: bool = False
    sign_precompute: bool = False
    reproducible: bool = True

    def supported_by(self, params: SessionParams) -> bool:
        """Whether a session with ``params`` (m, t) can run this mode."""
        return not self.honest_majority or (params.t >= 1 and 2 * params.t < params.m)


def _decoder(mode: str) -> Callable[[SessionParams, Inbox, int], Decisions]:
    return partial(decide_receiver, mode)


def _svt_receiver(params: SessionParams, inbox: Inbox, n: int) -> Decisions:
    """Federated ABCDP: only the SVT output bits reach the receiver (hss.svt)."""
    bits = svt_decide_receiver(params, inbox, n)
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
        party=partial(decide_party, "sum"),
        receiver=_decoder("sum"),
        rounds=lambda params, precompute: 1,
        honest_majority=False,
    ),
    "blinded": RevealMode(
        name="blinded",
        receiver_learns="(S + 2^-(f+1)) W' + E 2^-(f+1+f_w): the sign of S, its magnitude blurred",
        tolerates="t < m/2 colluding parties (m >= 3)",
        party=partial(decide_party, "blinded"),
        receiver=_decoder("blinded"),
        rounds=lambda params, precompute: 2,
        honest_majority=True,
        blinding=True,
    ),
    "sign": RevealMode(
        name="sign",
        receiver_learns="only the bit [S >= 0] (AND a secret coin with a lazy coin)",
        tolerates="t < m/2 colluding parties (m >= 3)",
        party=partial(decide_party, "sign"),
        receiver=_decoder("sign"),
        rounds=_sign_rounds,
        honest_majority=True,
        lazy_coin=True,
        sign_precompute=True,
    ),
    "svt": RevealMode(
        name="svt",
        receiver_learns="only the SVT output bits up to the c-th accept (also opened to every party)",
        tolerates="t < m/2 colluding parties (m >= 3); more reconstruct every party's inputs",
        party=svt_decide_party,
        receiver=_svt_receiver,
        rounds=None,
        honest_majority=True,
        inputs=FEATURES,
        reproducible=False,
    ),
}
#: the names of :data:`REVEAL`, in order
REVEAL_MODES: tuple[str, ...] = tuple(REVEAL)


def reveal_mode(name: str) -> RevealMode:
    """The entry of reveal mode ``name``; ``ValueError`` naming it and the known modes if there is none."""
    entry = REVEAL.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(f"unknown reveal mode {name!r}; expected one of {REVEAL_MODES}")
    return entry
