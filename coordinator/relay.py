"""The coordinator's relay: forwards share-exchange frames between parties that accept no inbound connections.

Each party dials ``Relay.Connect`` once per session (mTLS; its identity is its certificate). The relay
answers the party's HELLO only when all m parties of the session have joined, then forwards every frame to
the stream of its ``dst``. It refuses frames whose ``src`` differs from the caller's certificate identity,
frames for another session, and unknown destinations. Payloads are AES-GCM sealed end to end between the
two parties (:mod:`parties.e2e`); the relay never has the keys. An optional ``observer`` sees exactly what
the relay sees (for the test that this view is independent of the secrets).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import NoReturn

import grpc

from parties.exchange import Kind
from parties.spec import SessionSpec
from parties.tls import caller_identity
from proto import peer_pb2, relay_pb2_grpc


@dataclass(frozen=True)
class RelayRecord:
    """One forwarded frame, as the relay sees it."""

    session_id: bytes
    step: int
    round: int
    src: int
    dst: int
    kind: int
    nonce: bytes
    payload: bytes


@dataclass
class _RelaySession:
    spec: SessionSpec
    queues: dict[int, asyncio.Queue[peer_pb2.PeerFrame | None]] = field(default_factory=dict)
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
            for q in rs.queues.values():
                q.put_nowait(None)

    async def Connect(
        self,
        request_iterator: AsyncIterator[peer_pb2.PeerFrame],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[peer_pb2.PeerFrame]:
        who = caller_identity(context, self.insecure)

        async def refuse(code: grpc.StatusCode, msg: str) -> NoReturn:
            self.refused += 1
            await context.abort(code, msg)
            raise AssertionError("unreachable")

        try:
            first = await asyncio.wait_for(request_iterator.__anext__(), self.join_timeout_s)
        except (StopAsyncIteration, TimeoutError):
            await refuse(grpc.StatusCode.INVALID_ARGUMENT, "a relay stream must start with a HELLO frame")
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
        if me in rs.queues:
            await refuse(grpc.StatusCode.ALREADY_EXISTS, f"party {me} already joined this session's relay")
        queue: asyncio.Queue[peer_pb2.PeerFrame | None] = asyncio.Queue()
        rs.queues[me] = queue
        if len(rs.queues) == rs.spec.m:
            rs.joined.set()
        try:
            await asyncio.wait_for(rs.joined.wait(), self.join_timeout_s)
        except TimeoutError:
            rs.queues.pop(me, None)
            missing = sorted(set(range(1, rs.spec.m + 1)) - set(rs.queues))
            await refuse(
                grpc.StatusCode.DEADLINE_EXCEEDED, f"parties {missing} did not join the relay in time"
            )
        sid = rs.spec.session_id

        async def read() -> None:
            try:
                async for msg in request_iterator:
                    dst = int(msg.dst)
                    if (
                        bytes(msg.session_id) != sid
                        or int(msg.src) != me
                        or dst == me
                        or dst not in rs.queues
                    ):
                        self.refused += 1
                        continue
                    if self.observer is not None:
                        self.observer(
                            RelayRecord(
                                sid,
                                int(msg.step),
                                int(msg.round),
                                me,
                                dst,
                                int(msg.kind),
                                bytes(msg.nonce),
                                bytes(msg.payload),
                            )
                        )
                    rs.queues[dst].put_nowait(msg)
            except (grpc.aio.AioRpcError, asyncio.CancelledError):
                pass
            queue.put_nowait(None)  # our party left: end its response stream too

        reader = asyncio.create_task(read())
        try:
            yield peer_pb2.PeerFrame(session_id=sid, kind=Kind.HELLO, src=0, dst=me)  # type: ignore[arg-type]
            while True:
                item = await queue.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if rs.queues.get(me) is queue:
                del rs.queues[me]


def add_relay(server: grpc.aio.Server, hub: RelayHub) -> None:
    relay_pb2_grpc.add_RelayServicer_to_server(hub, server)
