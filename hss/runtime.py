"""Round-based protocol machines and the in-memory runner.

A protocol run is, for each party, a state machine over a whole batch: ``start()`` returns the first
outbox, and each ``step(inbox)`` consumes every message addressed to this party in the previous round
and returns the next outbox. A message is one flat ``uint64`` array per destination per round (field
elements are two words each), so a transport ships exactly one packed payload per peer per round.

Destinations are party ids ``1..m`` and :data:`RECEIVER` (``0``), the designated receiver (the
coordinator), which never sends protocol messages and combines what it gets with a receiver-side
decoder. The same machines run over :func:`run_in_memory` (tests, benchmarks) and over gRPC streams
(``parties/``): nothing here knows about transport.

Party machines are written as generators (``inbox = yield outbox``) wrapped by :class:`Machine`; this
keeps each protocol's rounds readable top to bottom while exposing the explicit ``start``/``step``
interface the transports drive.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

RECEIVER = 0

Payload = npt.NDArray[np.uint64]
Outbox = dict[int, Payload]
Inbox = dict[int, Payload]
T = TypeVar("T")
PartyGen = Generator[Outbox, Inbox, T]


class ProtocolError(RuntimeError):
    """A protocol received something it cannot use (missing sender, wrong size, wrong round)."""


class Machine(Generic[T]):
    """One party's side of one protocol run: ``start() -> outbox``, ``step(inbox) -> outbox``."""

    def __init__(self, party: int, gen: PartyGen[T], name: str = "protocol") -> None:
        self.party = party
        self.name = name
        self._gen = gen
        self._started = False
        self.done = False
        self.rounds = 0
        self._result: T | None = None

    def _advance(self, inbox: Inbox | None) -> Outbox:
        try:
            out = next(self._gen) if inbox is None else self._gen.send(inbox)
        except StopIteration as stop:
            self.done = True
            self._result = stop.value
            return {}
        self.rounds += 1
        return out

    def start(self) -> Outbox:
        if self._started:
            raise ProtocolError(f"{self.name}: party {self.party} already started")
        self._started = True
        return self._advance(None)

    def step(self, inbox: Inbox) -> Outbox:
        if not self._started:
            raise ProtocolError(f"{self.name}: party {self.party} stepped before start()")
        if self.done:
            raise ProtocolError(f"{self.name}: party {self.party} received messages after finishing")
        return self._advance(inbox)

    @property
    def result(self) -> T:
        if not self.done:
            raise ProtocolError(f"{self.name}: party {self.party} has not finished")
        return self._result  # type: ignore[return-value]


def expect(inbox: Inbox, senders: range | list[int], words: int, what: str) -> dict[int, Payload]:
    """Check that every expected sender sent exactly ``words`` uint64 words; return the payloads."""
    got: dict[int, Payload] = {}
    for s in senders:
        if s not in inbox:
            raise ProtocolError(f"{what}: no message from party {s}")
        msg = inbox[s]
        if msg.dtype != np.uint64 or msg.ndim != 1 or msg.size != words:
            raise ProtocolError(
                f"{what}: party {s} sent {msg.size} words of {msg.dtype}, expected {words} uint64 words"
            )
        got[s] = msg
    extra = set(inbox) - set(senders)
    if extra:
        raise ProtocolError(f"{what}: unexpected messages from {sorted(extra)}")
    return got


def pack(*arrays: npt.NDArray[np.uint64]) -> Payload:
    """Concatenate field arrays (or raw uint64 arrays) into one flat payload."""
    return np.concatenate([np.ascontiguousarray(a, dtype=np.uint64).reshape(-1) for a in arrays])


@dataclass
class Transcript:
    """What an in-memory run observed: rounds, messages, bytes, and (optionally) every payload."""

    rounds: int = 0
    messages: int = 0
    bytes: int = 0
    to_receiver: list[Inbox] = field(default_factory=list)
    log: list[tuple[int, int, int, Payload]] = field(default_factory=list)  # (round, src, dst, payload)


def run_in_memory(
    machines: dict[int, Machine[Any]],
    keep_log: bool = False,
    tamper: Callable[[int, int, int, Payload], Payload] | None = None,
) -> tuple[dict[int, Any], Transcript]:
    """Run m party machines to completion, delivering each round's messages synchronously.

    Returns each party's result and a transcript. A round is one exchange: every party sends its
    outbox, then every party steps on what it received. Messages to :data:`RECEIVER` are collected
    per round in ``transcript.to_receiver``; the run ends when every machine is done.
    """
    tr = Transcript()
    outboxes = {p: m.start() for p, m in machines.items()}
    rnd = 0
    while True:
        if not any(outboxes.values()) and all(m.done for m in machines.values()):
            break
        rnd += 1
        inboxes: dict[int, Inbox] = {p: {} for p in machines}
        recv: Inbox = {}
        for src, box in outboxes.items():
            for dst, payload in box.items():
                if tamper is not None:
                    payload = tamper(rnd, src, dst, payload)
                tr.messages += 1
                tr.bytes += payload.nbytes
                if keep_log:
                    tr.log.append((rnd, src, dst, payload))
                if dst == RECEIVER:
                    recv[src] = payload
                elif dst in inboxes:
                    inboxes[dst][src] = payload
                else:
                    raise ProtocolError(f"party {src} addressed unknown destination {dst}")
        if any(outboxes.values()):
            tr.rounds += 1
        if recv:
            tr.to_receiver.append(recv)
        outboxes = {}
        for p, m in machines.items():
            if m.done:
                if inboxes[p]:
                    raise ProtocolError(f"party {p} got messages after it finished")
                outboxes[p] = {}
                continue
            outboxes[p] = m.step(inboxes[p])
        if rnd > 10_000:
            raise ProtocolError("protocol did not terminate within 10000 rounds")
    return {p: m.result for p, m in machines.items()}, tr
