"""The coordinator's relay: forwards share-exchange frames between parties that accept no inbound connections.

Each party dials ``Relay.Connect`` once per session (mTLS; its identity is its certificate). The relay
answers the party's HELLO only when all m parties of the session have joined, then forwards every frame to
the party named by its ``dst``. It refuses frames whose ``src`` differs from the caller's certificate
identity, frames for another session, and unknown destinations. Payloads are AES-GCM sealed end to end
between the two parties (:mod:`parties.e2e`); the relay never has the keys.

Frames travel in bundles (``PeerBundle``), one message per party per round each way. Upstream a party
sends all its frames of a round together. Downstream the relay holds the frames addressed to party j for
(step, round) until j's own bundle of that round has arrived, naming the peers j addressed, and a frame
from each of them is in: the exchange is symmetric (a party addresses q in a round exactly when q addresses
it, :mod:`parties.exchange`), so that is the moment j can use them, and j gets them in one message. A frame
outside that pattern is never held back: one from a peer j did not address goes out at once (j then reports
the stray frame, as over the mesh), and frames of earlier rounds go out when j moves on to a later round.
What is bundled with what follows from the headers alone, which the relay sees anyway.

An optional ``observer`` sees exactly what the relay sees of each forwarded frame, with the ordinal of the
upstream bundle it came in and of the downstream bundle it left in (for the test that this view is
independent of the secrets).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc

from proto import peer_pb2, relay_pb2, relay_pb2_grpc, serde, serde_session
from proto.records import Kind
from proto.spec import SessionSpec
from proto.tls import caller_identity

Key = tuple[int, int]  # (step, round)


async def drain(queue: asyncio.Queue[Any]) -> AsyncIterator[Any]:
    """A response stream's items from its queue, until the ``None`` that ends the stream."""
    while (item := await queue.get()) is not None:
        yield item


@dataclass(frozen=True)
class RelayRecord:
    """One forwarded frame, as the relay sees it; ``bundle_in`` / ``bundle_out`` are the ordinals (from 1,
    per party) of the upstream bundle from ``src`` that carried it and the downstream bundle to ``dst``."""

    session_id: bytes
    step: int
    round: int
    src: int
    dst: int
    kind: int
    nonce: bytes
    payload: bytes
    bundle_in: int = 0
    bundle_out: int = 0


@dataclass
class _Dest:
    """What the relay holds for one destination party."""

    queue: asyncio.Queue[relay_pb2.PeerBundle | None]
    held: dict[Key, list[tuple[int, peer_pb2.PeerFrame]]] = field(default_factory=dict)  # (bundle_in, frame)
    expect: dict[Key, set[int]] = field(default_factory=dict)  # the peers it addressed in that round
    sent: int = 0  # downstream bundles so far


@dataclass
class _RelaySession:
    spec: SessionSpec
    dests: dict[int, _Dest] = field(default_factory=dict)
    joined: asyncio.Event = field(default_factory=asyncio.Event)


class RelayHub(relay_pb2_grpc.RelayServicer):
    def __init__(
        self,
        insecure: bool,
        join_timeout_s: float = 30.0,
        observer: Callable[[RelayRecord], None] | None = None,
    ) -> None:
        self.insecure = insecure
        self.join_timeout_s = join_timeout_s
        self.observer = observer
        self.sessions: dict[bytes, _RelaySession] = {}
        self.refused = 0

    def register(self, spec: SessionSpec) -> None:
        self.sessions[spec.session_id] = _RelaySession(spec)

    def unregister(self, session_id: bytes) -> None:
        rs = self.sessions.pop(session_id, None)
        if rs is not None:
            for d in rs.dests.values():
                d.queue.put_nowait(None)

    def _flush(self, rs: _RelaySession, dst: int, keys: list[Key]) -> None:
        """Send ``dst`` the frames held for ``keys`` in one bundle."""
        d = rs.dests[dst]
        frames = [item for k in keys for item in d.held.pop(k, [])]
        for k in keys:
            d.expect.pop(k, None)
        if not frames:
            return
        d.sent += 1
        if self.observer is not None:
            sid = rs.spec.session_id
            for up, f in frames:
                self.observer(
                    RelayRecord(
                        sid,
                        int(f.step),
                        int(f.round),
                        int(f.src),
                        dst,
                        int(f.kind),
                        bytes(f.nonce),
                        bytes(f.payload),
                        bundle_in=up,
                        bundle_out=d.sent,
                    )
                )
        d.queue.put_nowait(serde_session.bundle_to_proto(f for _, f in frames))

    def _settle(self, rs: _RelaySession, dst: int, key: Key) -> None:
        """Flush what ``dst`` can use now at ``key``: all of it once every peer it addressed has sent."""
        d = rs.dests.get(dst)
        if d is None or key not in d.held:
            return
        want = d.expect.get(key)
        if want is None:
            return  # dst has not sent its own frames of this round yet: it cannot be waiting for these
        have = {int(f.src) for _, f in d.held[key]}
        if want <= have or not have <= want:
            self._flush(rs, dst, [key])

    def _route(self, rs: _RelaySession, me: int, up: int, bundle: relay_pb2.PeerBundle) -> None:
        sid = rs.spec.session_id
        addressed: dict[Key, set[int]] = {}
        touched: set[tuple[int, Key]] = set()
        for f in bundle.frames:
            dst = int(f.dst)
            if bytes(f.session_id) != sid or int(f.src) != me or dst == me or dst not in rs.dests:
                self.refused += 1
                continue
            key = (int(f.step), int(f.round))
            addressed.setdefault(key, set()).add(dst)
            rs.dests[dst].held.setdefault(key, []).append((up, f))
            touched.add((dst, key))
        own = rs.dests[me]
        for key, peers in addressed.items():
            own.expect[key] = own.expect.get(key, set()) | peers
            older = [k for k in own.held if k < key]  # me moved on: it will not wait for these any more
            if older:
                self._flush(rs, me, older)
            touched.add((me, key))
        for dst, key in sorted(touched):
            self._settle(rs, dst, key)

    async def Connect(
        self,
        request_iterator: AsyncIterator[relay_pb2.PeerBundle],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[relay_pb2.PeerBundle]:
        who = caller_identity(context, self.insecure)

        async def refuse(code: grpc.StatusCode, msg: str) -> NoReturn:
            self.refused += 1
            await context.abort(code, msg)
            raise AssertionError("unreachable")

        try:
            first_bundle = await asyncio.wait_for(request_iterator.__anext__(), self.join_timeout_s)
        except (StopAsyncIteration, TimeoutError):
            await refuse(grpc.StatusCode.INVALID_ARGUMENT, "a relay stream must start with a HELLO frame")
        if len(first_bundle.frames) != 1:
            await refuse(grpc.StatusCode.INVALID_ARGUMENT, "a relay stream must start with one HELLO frame")
        first = first_bundle.frames[0]
        rs = self.sessions.get(bytes(first.session_id))
        if first.kind != Kind.HELLO or rs is None:
            await refuse(grpc.StatusCode.FAILED_PRECONDITION, "HELLO for an unknown session")
        me = rs.spec.id_of(who) if who else None
        if me is None:
            await refuse(grpc.StatusCode.PERMISSION_DENIED, f"caller {who!r} is not a party of this session")
        if int(first.src) != me:
            await refuse(
                grpc.StatusCode.PERMISSION_DENIED, f"caller is {who!r} (party {me}) but claims {first.src}"
            )
        if me in rs.dests:
            await refuse(grpc.StatusCode.ALREADY_EXISTS, f"party {me} already joined this session's relay")
        dest = _Dest(asyncio.Queue())
        rs.dests[me] = dest
        if len(rs.dests) == rs.spec.m:
            rs.joined.set()
        try:
            await asyncio.wait_for(rs.joined.wait(), self.join_timeout_s)
        except TimeoutError:
            rs.dests.pop(me, None)
            missing = sorted(set(range(1, rs.spec.m + 1)) - set(rs.dests))
            await refuse(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"parties {missing} did not join the relay in time"
            )
        sid = rs.spec.session_id
        queue = dest.queue

        async def read() -> None:
            up = 0
            try:
                async for bundle in request_iterator:
                    up += 1
                    self._route(rs, me, up, bundle)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            queue.put_nowait(None)  # our party left: end its response stream too

        reader = asyncio.create_task(read())
        hello = serde.frame_header_to_proto(sid, 0, 0, 0, me, Kind.HELLO)
        try:
            yield serde_session.bundle_to_proto([hello])
            async for item in drain(queue):
                yield item
        finally:
            reader.cancel()
            if rs.dests.get(me) is dest:
                del rs.dests[me]


def add_relay(server: grpc.aio.Server, hub: RelayHub) -> None:
    relay_pb2_grpc.add_RelayServicer_to_server(hub, server)
