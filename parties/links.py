"""Peer links of one party in one session: the direct mesh and the coordinator relay.

Both present the same face to :func:`parties.exchange.drive`: ``send(frame)``, and frames arriving from the
network handed to ``on_frame(src_authenticated, PeerFrame)`` (the daemon validates and files them in the
session's :class:`~parties.exchange.Mailbox`).

* Mesh: one long-lived bidirectional ``Peer.Exchange`` stream per pair of parties, dialled by the lower id
  to the higher id over mTLS (the dialler pins the peer's certificate identity; the peer checks the
  dialler's). The first frame each way is a HELLO naming the session.
* Relay: one ``Relay.Connect`` stream per party to the coordinator. Payloads are sealed end to end with the
  pairwise AES-GCM keys of :mod:`parties.e2e`; the relay sees only headers, sizes and ciphertext. Frames
  queued together (a round's frames to every peer) go up in one ``PeerBundle``; the relay sends each party
  its frames of a round in one bundle too (:mod:`coordinator.relay`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc

from parties import e2e
from proto import peer_pb2, relay_pb2_grpc, serde, serde_session
from proto.records import Frame, Kind
from proto.tls import TlsMaterial, call_metadata, secure_channel

_EXCHANGE = "/confar.v1.Peer/Exchange"  # proto/peer.proto's Peer.Exchange
_read_frame = peer_pb2.PeerFrame.FromString
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # end-of-stream sentinel, missing from the stubs

OnFrame = Callable[[int, peer_pb2.PeerFrame], Awaitable[None]]
OnLost = Callable[[int, str], Awaitable[None]]


class LinkError(RuntimeError):
    """A link could not be established (names the peer and why)."""


T = TypeVar("T")


class Channel(Generic[T]):
    """A link's frames waiting to be written: first in, first out, one consumer, unbounded (a session's
    frames are bounded by its rounds). What an ``asyncio.Queue`` does here without its task accounting and
    waiter lists: a put appends and wakes the one waiting reader; a get returns at once when an item is in.
    All methods run in the event loop's thread."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def empty(self) -> bool:
        return not self._items

    def get_nowait(self) -> T:
        """The oldest item (IndexError when empty)."""
        return self._items.popleft()

    async def get(self) -> T:
        while not self._items:
            if self._waiter is not None:
                raise RuntimeError("Channel.get: another reader is already waiting")
            fut = asyncio.get_running_loop().create_future()
            self._waiter = fut
            try:
                await fut
            finally:
                if self._waiter is fut:
                    self._waiter = None
        return self._items.popleft()


class _DialledStream:
    """A client stream this party opened (to a peer or to the relay): shared state, the writer and shutdown.

    :meth:`send` only queues: one writer task per stream hands the frames to gRPC in order, so a party's
    frames of one round go out to all its peers at once instead of one gRPC write completion after the
    other (each completion is a hop through gRPC's completion-queue thread back to the event loop)."""

    channel: grpc.aio.Channel | None
    call: Any
    reader: asyncio.Task[None] | None
    writer: asyncio.Task[None] | None = None
    outq: Channel[Any] | None = None

    def start_writer(self, on_lost: OnLost, lost_peers: list[int]) -> None:
        self.outq = Channel()
        self.writer = asyncio.create_task(self._write_loop(self.outq, on_lost, lost_peers))

    def wire(self, frames: list[peer_pb2.PeerFrame]) -> list[Any]:
        """The stream messages that carry ``frames`` (queued together, in order): here one per frame."""
        return list(frames)

    async def _write_loop(self, outq: Channel[Any], on_lost: OnLost, lost_peers: list[int]) -> None:
        try:
            stop = False
            while not stop:
                batch = [await outq.get()]
                while not outq.empty():  # everything queued meanwhile: a round's frames are queued together
                    batch.append(outq.get_nowait())
                if None in batch:
                    stop = True
                    batch = batch[: batch.index(None)]
                for msg in self.wire(batch) if batch else []:
                    await self.call.write(msg)
        except asyncio.CancelledError:
            return
        except grpc.aio.AioRpcError as exc:  # the stream broke
            await self._lost(on_lost, lost_peers, f"{exc.code().name}: {exc.details()}")
        except Exception as exc:  # e.g. written after the stream was closed under us
            await self._lost(on_lost, lost_peers, repr(exc))

    @staticmethod
    async def _lost(on_lost: OnLost, lost_peers: list[int], why: str) -> None:
        for q in lost_peers:
            await on_lost(q, f"write failed: {why}")

    async def send(self, msg: peer_pb2.PeerFrame) -> None:
        if self.outq is None:
            raise LinkError("the link is not open")
        self.outq.put_nowait(msg)

    async def close(self) -> None:
        if self.writer is not None and self.outq is not None:
            self.outq.put_nowait(None)  # frames already queued are written first
            _, pending = await asyncio.wait({self.writer}, timeout=1.0)
            for task in pending:
                task.cancel()
        if self.call is not None:
            try:
                await self.call.done_writing()
            except Exception:
                pass
        if self.reader is not None:
            self.reader.cancel()
        if self.channel is not None:
            await self.channel.close(grace=None)


class MeshDialLink(_DialledStream):
    """The dialling side of a mesh stream to a higher-numbered peer."""

    def __init__(self, session_id: bytes, me: int, peer: int) -> None:
        self.session_id, self.me, self.peer = session_id, me, peer
        self.channel: grpc.aio.Channel | None = None
        self.call: Any = None
        self.reader: asyncio.Task[None] | None = None

    async def open(
        self,
        address: str,
        identity: str,
        tls: TlsMaterial | None,
        my_identity: str,
        on_frame: OnFrame,
        on_lost: OnLost,
        timeout_s: float,
    ) -> None:
        self.channel = secure_channel(address, tls, identity)
        exchange: Any = self.channel.stream_stream(  # the generated stub's call, frames pre-serialized
            _EXCHANGE, request_serializer=serde.wire_message, response_deserializer=_read_frame
        )
        self.call = exchange(metadata=call_metadata(tls, my_identity))
        hello = serde.frame_header_to_proto(self.session_id, 0, 0, self.me, self.peer, Kind.HELLO)
        try:
            await asyncio.wait_for(self.call.write(hello), timeout_s)
            resp = await asyncio.wait_for(self.call.read(), timeout_s)
        except (TimeoutError, grpc.aio.AioRpcError) as exc:
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else "timed out"
            raise LinkError(f"cannot open the mesh link to party {self.peer} at {address}: {detail}") from exc
        if resp is _EOF or resp.kind != Kind.HELLO or resp.session_id != self.session_id:
            raise LinkError(f"party {self.peer} at {address} did not accept the session link")

        async def read() -> None:
            why = "stream closed"
            try:
                while True:
                    msg = await self.call.read()
                    if msg is _EOF:
                        break
                    await on_frame(self.peer, msg)
            except grpc.aio.AioRpcError as exc:
                why = f"{exc.code().name}: {exc.details()}"
            except asyncio.CancelledError:
                return
            await on_lost(self.peer, why)

        self.reader = asyncio.create_task(read())
        self.start_writer(on_lost, [self.peer])


class MeshAcceptLink:
    """The accepting side: the server handler drains ``queue`` into the response stream."""

    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.queue: Channel[peer_pb2.PeerFrame | bytes | None] = Channel()

    async def send(self, msg: peer_pb2.PeerFrame | bytes) -> None:
        self.queue.put_nowait(msg)

    async def close(self) -> None:
        self.queue.put_nowait(None)


class RelayLink(_DialledStream):
    """This party's single stream to the coordinator's relay, sealing every payload end to end."""

    def __init__(self, session_id: bytes, me: int, ciphers: dict[int, e2e.PairCipher]) -> None:
        self.session_id, self.me, self.ciphers = session_id, me, ciphers
        self.channel: grpc.aio.Channel | None = None
        self.call: Any = None
        self.reader: asyncio.Task[None] | None = None

    async def open(
        self,
        address: str,
        identity: str,
        tls: TlsMaterial | None,
        my_identity: str,
        on_frame: OnFrame,
        on_lost: OnLost,
        peers: list[int],
        timeout_s: float,
    ) -> None:
        self.channel = secure_channel(address, tls, identity)
        self.call = relay_pb2_grpc.RelayStub(self.channel).Connect(metadata=call_metadata(tls, my_identity))
        hello = serde.frame_header_to_proto(self.session_id, 0, 0, self.me, 0, Kind.HELLO)
        try:
            await asyncio.wait_for(self.call.write(serde_session.bundle_to_proto([hello])), timeout_s)
            resp = await asyncio.wait_for(self.call.read(), timeout_s)  # the relay answers once all m joined
        except (TimeoutError, grpc.aio.AioRpcError) as exc:
            detail = (
                exc.details()
                if isinstance(exc, grpc.aio.AioRpcError)
                else "timed out waiting for all parties"
            )
            raise LinkError(f"cannot join the relay at {address}: {detail}") from exc
        if (
            resp is _EOF
            or len(resp.frames) != 1
            or resp.frames[0].kind != Kind.HELLO
            or resp.frames[0].session_id != self.session_id
        ):
            raise LinkError(f"the relay at {address} did not accept the session")

        async def read() -> None:
            why = "relay stream closed"
            try:
                while True:
                    bundle = await self.call.read()
                    if bundle is _EOF:
                        break
                    for msg in bundle.frames:
                        await on_frame(int(msg.src), msg)
            except grpc.aio.AioRpcError as exc:
                why = f"relay: {exc.code().name}: {exc.details()}"
            except asyncio.CancelledError:
                return
            for q in peers:
                await on_lost(q, why)

        self.reader = asyncio.create_task(read())
        self.start_writer(on_lost, peers)

    def wire(self, frames: list[peer_pb2.PeerFrame]) -> list[Any]:
        """One bundle for everything queued together: a round's frames to all peers in one message."""
        return [serde_session.bundle_to_proto(frames)]

    def seal(self, f: Frame) -> peer_pb2.PeerFrame:
        plain = serde.payload_to_bytes(f.payload) if f.payload is not None else b""
        ad = e2e.associated_data(self.session_id, f.step, f.round, f.src, f.dst, int(f.kind))
        nonce, ct = self.ciphers[f.dst].seal(plain, ad)
        return serde.frame_header_to_proto(
            self.session_id, f.step, f.round, f.src, f.dst, int(f.kind), ct, nonce
        )

    def unseal(self, msg: peer_pb2.PeerFrame) -> bytes:
        src = int(msg.src)
        if src not in self.ciphers:
            raise e2e.KeyExchangeError(f"no pairwise key with party {src}")
        ad = e2e.associated_data(
            self.session_id, int(msg.step), int(msg.round), src, int(msg.dst), int(msg.kind)
        )
        return self.ciphers[src].open(bytes(msg.nonce), bytes(msg.payload), ad)

