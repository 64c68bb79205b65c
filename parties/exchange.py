"""Running an hss :class:`~hss.runtime.Machine` over a message transport, one party's side.

:func:`drive` is the transport-agnostic runner every party uses, over gRPC (mesh or relay, see
:mod:`parties.links`) and over in-process queues (:func:`run_local`, used by the contract tests). It
reproduces the semantics of :func:`hss.runtime.run_in_memory` exactly: each round a party sends its outbox,
waits for the messages addressed to it this round, then steps.

How a party knows a round is complete:

* ``symmetric=False`` (general, e.g. key setup where party i sends only to j > i): every round a party
  sends every still-running peer one frame — DATA or EMPTY — and waits for one frame from each; when its
  machine finishes it sends DONE (fire-and-forget) so peers stop expecting it. Correct for any protocol.
* ``symmetric=True`` (the decision protocols): a party addresses q in a round exactly when q addresses it,
  so it waits only for the peers it addressed and sends no EMPTY/DONE frames. This saves one message per
  peer per round and the final barrier. A protocol that breaks the promise shows up as a stray frame
  (ProtocolError) or a missing one (deadline), never as a silently wrong result.

:class:`Mailbox` is where frames from the network land, per session. It refuses (and reports, for the
audit log) malformed, replayed, out-of-order and out-of-session frames without disturbing the run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hss.runtime import RECEIVER, Inbox, Machine, PartyGen, Payload, ProtocolError, expect
from proto.records import Frame, Kind

MAX_ROUNDS = 256
PROBE_MAX_ROUNDS = 128  # a link probe's rounds (parties.daemon ProbeLinks)
ROUND_WINDOW = 2  # a peer can be at most one round ahead; allow one more for slack


class Refused(Exception):
    """A frame the mailbox will not accept; ``reason`` is logged, the run carries on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class LinkLost(ProtocolError):
    """A peer's link closed or the peer did not answer within the deadline."""


@dataclass
class _StepState:
    step: int
    round: int = 0  # the round currently being collected (frames below it are stale)
    frames: dict[tuple[int, int], Frame] = field(default_factory=dict)  # (round, src) -> frame
    seen: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class _Waiter:
    """The round :meth:`Mailbox.collect` waits for and the senders whose frame of it is still missing."""

    step: int
    round: int
    missing: set[int]
    fut: asyncio.Future[None]


_RUN_KINDS = frozenset((Kind.DATA, Kind.EMPTY, Kind.DONE))


class Mailbox:
    """Per-session inbound frames of one party, keyed by (step, round, src).

    Filing a frame costs a few dict operations and wakes no one until the round being collected is complete
    (or a link it waits on is lost): one wake-up per round, not one per frame. All methods run in the event
    loop's thread; none of them awaits, so each is atomic with respect to the others."""

    def __init__(
        self,
        me: int,
        m: int,
        max_payload_bytes: int = 64 * 1024 * 1024,
        first_step: int = 0,
        lookahead: bool = False,
    ) -> None:
        self.me, self.m = me, m
        self.max_payload_bytes = max_payload_bytes
        self.completed_step = first_step - 1  # steps <= this are finished; key setup is step 0
        # lookahead (a session with precompute_ahead, parties.ahead): a peer that finished step k may start
        # step k + 1's precompute while this party still collects step k, so frames of the step after the
        # next are kept too; at most two steps' frames are held, each bounded by the round window
        self.lookahead = 1 if lookahead else 0
        self._states: dict[int, _StepState] = {}
        self._lost: dict[int, str] = {}
        self._waiter: _Waiter | None = None
        self.refused = 0

    def _state_for(self, step: int) -> _StepState:
        st = self._states.get(step)
        if st is None:
            st = self._states[step] = _StepState(step)
        return st

    def check(self, f: Frame) -> _StepState:
        """Raise :class:`Refused` unless ``f`` is acceptable now (src is already authenticated); return the
        state of its step."""
        src, step, rnd, kind = f.src, f.step, f.round, f.kind
        if not 1 <= src <= self.m or src == self.me:
            raise Refused(f"frame from party {src}, which is not a peer in this session")
        if f.dst != self.me:
            raise Refused(f"frame addressed to party {f.dst}, not to this party ({self.me})")
        if kind not in _RUN_KINDS:
            raise Refused(f"frame kind {int(kind)} is not valid inside a protocol run")
        if step <= self.completed_step:
            if kind == Kind.DONE:
                raise Refused("")  # a peer's end-of-run notice after we finished too: expected, silent
            raise Refused(
                f"replayed or late frame for finished step {step} (completed {self.completed_step})"
            )
        if step > self.completed_step + 1 + self.lookahead:
            raise Refused(
                f"frame for step {step} but the next step is {self.completed_step + 1}: out of order"
            )
        if not 1 <= rnd <= MAX_ROUNDS:
            raise Refused(f"round {rnd} out of range 1..{MAX_ROUNDS}")
        st = self._state_for(step)
        key = (rnd, src)
        if rnd < st.round or key in st.seen:
            raise Refused(f"replayed frame step {step} round {rnd} from party {src}")
        if rnd > (st.round if st.round > 1 else 1) + ROUND_WINDOW:
            raise Refused(f"frame for round {rnd} is too far ahead of round {st.round}")
        if key in st.frames:
            raise Refused(f"duplicate frame step {step} round {rnd} from party {src}")
        if kind == Kind.DATA:
            if f.payload is None:
                raise Refused("DATA frame without payload")
            if f.payload.nbytes > self.max_payload_bytes:
                raise Refused(f"payload of {f.payload.nbytes} bytes exceeds {self.max_payload_bytes}")
        return st

    async def deliver(self, f: Frame) -> None:
        """Accept a frame or raise :class:`Refused`. Wakes the collector only when the frame completes the
        round it waits for (the senders it still misses are counted down, no scan per frame)."""
        self.check(f).frames[(f.round, f.src)] = f
        w = self._waiter
        if w is not None and w.step == f.step and w.round == f.round:
            w.missing.discard(f.src)
            if not w.missing and not w.fut.done():
                w.fut.set_result(None)

    async def lose(self, peer: int, why: str) -> None:
        self._lost.setdefault(peer, why)
        w = self._waiter
        if w is not None and peer in w.missing and not w.fut.done():
            w.fut.set_result(None)

    async def collect(self, step: int, rnd: int, senders: set[int], deadline: float) -> dict[int, Frame]:
        """Wait for one frame of (step, rnd) from every party in ``senders``; deadline is time.monotonic()."""
        if self._waiter is not None:
            raise RuntimeError("Mailbox.collect: another collect is already waiting on this mailbox")
        st = self._state_for(step)
        st.round = rnd
        frames = st.frames
        for key in [k for k in frames if k[0] < rnd]:  # cannot happen with honest peers; drop
            del frames[key]
        missing = {s for s in senders if (rnd, s) not in frames}
        if missing and self._lost.keys().isdisjoint(missing):
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._waiter = _Waiter(step, rnd, missing, fut)
            timer = loop.call_at(
                loop.time() + max(0.0, deadline - time.monotonic()),
                lambda: None if fut.done() else fut.set_result(None),
            )
            try:
                await fut
            finally:
                timer.cancel()
                self._waiter = None
            st = self._state_for(step)
            frames = st.frames
            if missing and self._lost.keys().isdisjoint(missing):
                raise LinkLost(
                    f"step {step} round {rnd}: no message from part{'ies' if len(missing) > 1 else 'y'} "
                    f"{', '.join(map(str, sorted(missing)))} before the deadline"
                )
        if missing:
            lost = sorted(self._lost.keys() & missing)
            raise LinkLost(f"step {step} round {rnd}: link to party {lost[0]} lost ({self._lost[lost[0]]})")
        got = {s: frames.pop((rnd, s)) for s in senders}
        st.seen.update([(rnd, s) for s in senders])
        return got

    async def finish(self, step: int) -> list[Frame]:
        """Mark ``step`` complete; return frames left over for it (stray messages)."""
        self.completed_step = max(self.completed_step, step)
        left = []
        for s in [s for s in self._states if s <= self.completed_step]:
            st = self._states.pop(s)
            if s == step:
                left = [f for f in st.frames.values() if f.kind != Kind.DONE]
        return left


SendFn = Callable[[Frame], Awaitable[None]]


@dataclass
class RunOutcome:
    """A finished run and this party's own timings of it (wall seconds, ``time.perf_counter``): ``stepped_s``
    in the machine's steps (compute), ``sent_s`` in handing frames to the links (serialization, sealing,
    the links' writes), ``waited_s`` in the mailbox until a round's frames were all in (peers' compute,
    the network, and this process's event loop serving other work meanwhile)."""

    result: Any
    to_receiver: list[tuple[int, Payload]]  # (round, payload) in order
    rounds: int
    stepped_s: float = 0.0
    sent_s: float = 0.0
    waited_s: float = 0.0


def _check_addressees(outbox: dict[int, Any], active: set[int], peers: list[int], me: int, rnd: int) -> None:
    """Refuse a message to a party that has finished or is not in the session."""
    for dst in outbox:
        if dst != RECEIVER and dst not in active:
            why = "has finished" if dst in peers else "is not in this session"
            raise ProtocolError(f"party {me} addressed party {dst}, which {why} (round {rnd})")


def _inbox(frames: dict[int, Frame], active: set[int], symmetric: bool, rnd: int) -> Inbox:
    """The round's payloads by sender; a DONE frame removes its sender from ``active`` (asymmetric runs)."""
    inbox: Inbox = {}
    for q, f in frames.items():
        if f.kind == Kind.DONE:
            if symmetric:
                raise ProtocolError(f"party {q} sent DONE in a symmetric run (round {rnd})")
            active.discard(q)
        elif f.kind == Kind.DATA:
            assert f.payload is not None
            inbox[q] = f.payload
    return inbox


@dataclass(frozen=True)
class Wire:
    """How party ``me`` exchanges a step's frames: with ``peers``, through ``send`` and ``mailbox``, every
    round within ``timeout_s`` of the run's start; ``offload`` runs a machine step elsewhere (e.g. a thread)
    so the event loop keeps serving the links."""

    me: int
    peers: list[int]
    send: SendFn
    mailbox: Mailbox
    timeout_s: float
    offload: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None


async def drive(
    machine: Machine[Any], wire: Wire, *, step: int, symmetric: bool, round_base: int = 0, finish: bool = True
) -> RunOutcome:
    """Run ``machine`` (party ``wire.me``) to completion over ``wire``; see the module docstring.

    ``round_base``: the step's rounds 1..round_base were run already (a precompute run ahead of the step,
    ``parties.ahead``), so this run's frames are rounds round_base + 1, ...; ``finish=False`` leaves the
    step open in the mailbox (the precompute run itself). ``rounds`` of the outcome are this run's own.
    """
    me, peers, send, mailbox, offload = wire.me, wire.peers, wire.send, wire.mailbox, wire.offload
    deadline = time.monotonic() + wire.timeout_s
    active = set(peers)
    to_receiver: list[tuple[int, Payload]] = []
    stepped = sent = waited = 0.0

    async def advance(fn: Callable[[], Any]) -> Any:
        nonlocal stepped
        t0 = time.perf_counter()
        out = await offload(fn) if offload is not None else fn()
        stepped += time.perf_counter() - t0
        return out

    try:
        outbox = await advance(machine.start)
        rnd = 0
        while True:
            rnd += 1
            if round_base + rnd > MAX_ROUNDS:
                raise ProtocolError(f"protocol did not finish within {MAX_ROUNDS} rounds")
            if machine.done:
                if not symmetric:
                    for q in sorted(active):
                        await send(Frame(step, round_base + rnd, me, q, Kind.DONE))
                break
            _check_addressees(outbox, active, peers, me, rnd)
            if RECEIVER in outbox:
                to_receiver.append((round_base + rnd, outbox[RECEIVER]))
            t0 = time.perf_counter()
            if symmetric:
                expected = {d for d in outbox if d != RECEIVER}
                for q in sorted(expected):
                    await send(Frame(step, round_base + rnd, me, q, Kind.DATA, outbox[q]))
            else:
                expected = set(active)
                for q in sorted(active):
                    if q in outbox:
                        await send(Frame(step, round_base + rnd, me, q, Kind.DATA, outbox[q]))
                    else:
                        await send(Frame(step, round_base + rnd, me, q, Kind.EMPTY))
            t1 = time.perf_counter()
            frames = await mailbox.collect(step, round_base + rnd, expected, deadline) if expected else {}
            t2 = time.perf_counter()
            sent, waited = sent + t1 - t0, waited + t2 - t1
            inbox = _inbox(frames, active, symmetric, rnd)
            if machine.done:
                if inbox:
                    raise ProtocolError(f"party {me} got messages after it finished")
                continue
            outbox = await advance(lambda inbox=inbox: machine.step(inbox))  # type: ignore[misc]
    finally:
        stray = await mailbox.finish(step) if finish else []
    if stray:
        f = stray[0]
        raise ProtocolError(
            f"stray frame from party {f.src} at step {step} round {f.round}: the protocol is not symmetric "
            "(run it with symmetric=False)"
        )
    return RunOutcome(machine.result, to_receiver, machine.rounds, stepped, sent, waited)


def probe_machine(
    me: int, peers: list[int], rounds: int, words: int, clock: Callable[[], float] = time.monotonic
) -> Machine[list[float]]:
    """A transport probe: ``rounds`` all-to-all rounds of ``words`` zero words to every peer, nothing to the
    receiver. The result is ``clock()`` when each round's frames were all in (the machine steps right after
    :meth:`Mailbox.collect` returns). Its messages are constants: they carry nothing of the party."""
    if not 1 <= rounds <= PROBE_MAX_ROUNDS:
        raise ValueError(f"a link probe runs 1..{PROBE_MAX_ROUNDS} rounds, not {rounds}")
    if words < 0:
        raise ValueError(f"a link probe sends >= 0 words per peer per round, not {words}")

    def gen() -> PartyGen[list[float]]:
        zeros = np.zeros(words, dtype=np.uint64)
        done: list[float] = []
        for _ in range(rounds):
            inbox = yield {q: zeros for q in peers}
            done.append(clock())
            expect(inbox, peers, words, "probe")
        return done

    return Machine(me, gen(), "probe_links")


async def run_local(
    machines: dict[int, Machine[Any]], step: int = 1, symmetric: bool = False, timeout_s: float = 60.0
) -> tuple[dict[int, Any], list[dict[int, Payload]]]:
    """All parties in one event loop over in-process queues, through :func:`drive` and :class:`Mailbox`.

    Returns results and, per round, the messages addressed to the receiver — the same shape as
    ``run_in_memory``'s ``(results, transcript.to_receiver)``.
    """
    m = len(machines)
    boxes = {p: Mailbox(p, m, first_step=step) for p in machines}

    async def send(f: Frame) -> None:
        payload = None if f.payload is None else np.frombuffer(f.payload.tobytes(), dtype=np.uint64)
        try:
            await boxes[f.dst].deliver(Frame(f.step, f.round, f.src, f.dst, f.kind, payload))
        except Refused as exc:
            if exc.reason:
                raise ProtocolError(exc.reason) from exc

    peers = {p: [q for q in machines if q != p] for p in machines}
    outs = await asyncio.gather(
        *(
            drive(mc, Wire(p, peers[p], send, boxes[p], timeout_s), step=step, symmetric=symmetric)
            for p, mc in machines.items()
        )
    )
    results = {p: o.result for p, o in zip(machines, outs, strict=True)}
    by_round: dict[int, dict[int, Payload]] = {}
    for p, o in zip(machines, outs, strict=True):
        for rnd, payload in o.to_receiver:
            by_round.setdefault(rnd, {})[p] = payload
    return results, [by_round[r] for r in sorted(by_round)]
