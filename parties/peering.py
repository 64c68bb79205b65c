"""A session's peer wiring at this party: the peers' key bundles checked, the links opened (direct mesh or
the coordinator relay, ``parties.links``), frames sent and taken in, and one step's protocol machine driven
over them (``parties.exchange``; large batches on a worker thread, off the event loop).

Mesh: party i dials every party q > i and accepts a stream from every q < i (the Peer service,
``parties.service``). Relay: every payload is end-to-end authenticated-encrypted between the two parties
(``parties.e2e``), so the relaying coordinator learns nothing from what it forwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

from hss.runtime import ProtocolError
from parties import e2e
from parties.audit import AuditSubject
from parties.deviate import tamper_frame
from parties.exchange import LinkLost, Refused, RunOutcome, Wire, drive
from parties.links import LinkError, MeshAcceptLink, MeshDialLink, OnFrame, RelayLink
from parties.refusal import Reason, Refusal
from parties.session import LIVE, Party, Session
from proto import peer_pb2, serde
from proto.records import Frame, KeyBundle, Kind
from proto.spec import shown

OFFLOAD_MIN_BATCH = 64  # machine steps on batches at least this big run in a worker thread

Refuse = Callable[
    ..., Awaitable[NoReturn]
]  # (parties.refusal.Reason, message, session id=None): counted, audited, answered by the service


async def verify_bundles(party: Party, sess: Session, bundles: list[KeyBundle]) -> None:
    spec, tls = sess.spec, party.tls
    assert sess.keys is not None
    by_party = {int(b.party): b for b in bundles}
    if sorted(by_party) != list(range(1, spec.m + 1)) or len(bundles) != spec.m:
        raise Refusal(
            Reason.INVALID_ARGUMENT,
            f"need exactly one key bundle per party 1..{spec.m}, got parties {sorted(by_party)}",
        )
    ciphers: dict[int, e2e.PairCipher] = {}
    for q in sess.peers:
        b = by_party[q]
        if tls is not None:
            try:
                e2e.verify_bundle(
                    tls.ca_pem,
                    b.certificate_pem,
                    spec.party(q).identity,
                    spec.session_id,
                    q,
                    b.x25519_public,
                    b.signature,
                )
            except e2e.KeyExchangeError as exc:
                raise Refusal(Reason.PERMISSION_DENIED, str(exc)) from exc
        try:
            key = e2e.pair_key(sess.keys.x25519, b.x25519_public, spec.session_id, sess.me, q)
        except ValueError as exc:
            raise Refusal(Reason.INVALID_ARGUMENT, f"party {q}: bad X25519 key: {exc}") from exc
        ciphers[q] = e2e.PairCipher(key)
    if spec.topology == "relay":
        sess.wiring.relay = RelayLink(spec.session_id, sess.me, ciphers)


async def open_links(party: Party, sess: Session, on_frame: OnFrame) -> None:
    """Open the session's links: the relay, or mesh streams (dial peers above, wait for those below)."""
    spec, me, wiring = sess.spec, sess.me, sess.wiring
    to = party.cfg.round_timeout_s
    my_ident = party.cfg.identity

    async def on_lost(q: int, why: str) -> None:
        await sess.mailbox.lose(q, why)

    if spec.topology == "relay":
        assert wiring.relay is not None
        await wiring.relay.open(
            spec.relay_address,
            spec.coordinator_identity,
            party.tls,
            my_ident,
            on_frame,
            on_lost,
            sess.peers,
            to,
        )
        return
    cfg_addr = {p.id: p.address for p in party.cfg.peers}
    for q in sess.peers:
        if q < me and q not in wiring.accept_waiters:
            wiring.accept_waiters[q] = asyncio.get_running_loop().create_future()
    dials = []
    for q in sess.peers:
        if q > me:
            addr = cfg_addr.get(q) or spec.party(q).address
            if not addr:
                raise Refusal(Reason.INVALID_ARGUMENT, f"no address for party {q} (mesh topology)")
            link = MeshDialLink(spec.session_id, me, q)
            wiring.links[q] = link
            dials.append(link.open(addr, spec.party(q).identity, party.tls, my_ident, on_frame, on_lost, to))
    await asyncio.gather(*dials)
    for q, fut in wiring.accept_waiters.items():
        try:
            wiring.links[q] = await asyncio.wait_for(asyncio.shield(fut), to)
        except TimeoutError as exc:
            raise LinkError(f"party {q} did not open its mesh link to this party within {to:g} s") from exc


def sender(party: Party, sess: Session) -> Callable[[Any], Awaitable[None]]:
    sid = sess.spec.session_id
    send: Callable[[Any], Awaitable[None]]
    if sess.wiring.relay is not None:
        relay = sess.wiring.relay

        async def send_relay(f: Any) -> None:
            await relay.send(relay.seal(f))

        send = send_relay
    else:

        async def send_mesh(f: Any) -> None:
            link = sess.wiring.links.get(f.dst)
            if link is None:
                raise LinkLost(f"no link to party {f.dst}")
            await link.send(serde.frame_to_wire(sid, f))

        send = send_mesh
    if party.cfg.deviate:  # testing: this daemon deviates on purpose (parties/deviate.py)
        send = _deviating(send, party.cfg.deviate, min(sess.peers))
    if not any(phase == "mid-exchange" for phase, _ in party.cfg.freeze_at):
        return send
    last_peer = max(sess.peers)

    async def send_then_freeze(f: Any) -> None:  # testing: freeze once round 1 went to every peer
        await send(f)
        if f.step >= 1 and f.round == 1 and f.dst == last_peer:
            # best effort: let the links' writers hand the frames to the network before the process
            # stops (a test's assertions must hold either way: the peers then fail or finish the step)
            await asyncio.sleep(0.2)
            party.store.freeze_point("mid-exchange", sess.spec.run_step(f.step))

    return send_then_freeze


def _deviating(
    send: Callable[[Any], Awaitable[None]], deviations: frozenset[tuple[str, int]], first_peer: int
) -> Callable[[Any], Awaitable[None]]:
    async def send_deviating(f: Any) -> None:
        altered = tamper_frame(deviations, f, first_peer)
        if altered is not None:
            await send(altered)

    return send_deviating


def unwrap_frame(party: Party, sess: Session, src: int, msg: peer_pb2.PeerFrame) -> Frame:
    """A frame from peer ``src``, authenticated by TLS (mesh) or by its AEAD key (relay); Refused if it is
    not one of this session's."""
    if bytes(msg.session_id) != sess.spec.session_id:
        raise Refused("frame for another session on this session's link")
    if int(msg.src) != src:
        raise Refused(f"frame claims src {msg.src} but the link belongs to party {src}")
    # "open": a peer that got its ConnectSession first may send its key-setup frames before this
    # party got its own; the mailbox keeps them (step 0, bounded) for the key setup to collect
    if sess.state not in ("open", "connecting", "ready"):
        raise Refused(f"session is {sess.state}")
    plain = None
    if sess.wiring.relay is not None:
        try:
            plain = sess.wiring.relay.unseal(msg)
        except e2e.KeyExchangeError as exc:
            raise Refused(str(exc)) from exc
    try:
        return serde.frame_from_proto(msg, plain, party.cfg.max_message_bytes)
    except serde.WireError as exc:
        raise Refused(str(exc)) from exc


async def drive_step(
    party: Party,
    sess: Session,
    machine: Any,
    step: int,
    n: int,
    timeout: Callable[[], float],
    round_base: int = 0,
) -> RunOutcome:
    """Run this party's protocol machine for one step over the session's peer links (large batches on
    a worker thread); a lost link or a protocol error fails the session and is refused (UNAVAILABLE,
    FAILED_PRECONDITION).
    ``round_base``: the step's first rounds already run ahead (``parties.ahead``)."""
    sess.busy = True
    offload = offload_to_thread if n >= OFFLOAD_MIN_BATCH else None
    try:
        wire = Wire(sess.me, sess.peers, sender(party, sess), sess.mailbox, timeout(), offload)
        return await drive(machine, wire, step=step, symmetric=True, round_base=round_base)
    except LinkLost as exc:
        sess.fail(f"step {step}: {exc}")
        raise Refusal(Reason.UNAVAILABLE, str(exc)) from exc
    except ProtocolError as exc:
        sess.fail(f"step {step}: {exc}")
        raise Refusal(Reason.FAILED_PRECONDITION, f"step {step}: protocol error: {exc}") from exc
    finally:
        sess.busy = False


async def accept_stream(
    party: Party,
    sessions: dict[bytes, Session],
    who: str | None,
    request_iterator: AsyncIterator[peer_pb2.PeerFrame],
    refuse: Refuse,
    on_frame: Callable[[Session, int, peer_pb2.PeerFrame], Awaitable[None]],
) -> AsyncGenerator[peer_pb2.PeerFrame | bytes, None]:
    """The accepting side of a mesh link: the caller ``who`` (from its certificate) is checked before any
    frame is read, then its HELLO (session, party, direction); the link is handed to the session's
    :func:`open_links`, frames read are filed by ``on_frame``, frames to send are yielded. The service hands
    in the stream's frames (``request_iterator``, raising :class:`LinkLost` naming the status when the stream
    breaks) and the ``refuse`` that answers a refusal."""
    if who not in {p.identity for p in party.cfg.peers}:  # the caller first, before any frame is read
        msg = f"caller {shown(who)} is not a consortium member of this party"
        await refuse(Reason.PERMISSION_DENIED, msg)

    try:
        first = await asyncio.wait_for(request_iterator.__anext__(), party.cfg.round_timeout_s)
    except (StopAsyncIteration, TimeoutError):
        await refuse(Reason.INVALID_ARGUMENT, "a peer stream must start with a HELLO frame")
    sess, q, sid = await _check_hello(party, sessions, who, first, refuse)
    waiters = sess.wiring.accept_waiters
    fut = waiters.get(q)
    if fut is None:
        fut = asyncio.get_running_loop().create_future()
        waiters[q] = fut
    if fut.done():
        await refuse(Reason.ALREADY_EXISTS, f"party {q} already has a link in this session", sid)
    link = MeshAcceptLink(q)
    fut.set_result(link)
    party.store.audit.record(
        who=who,
        what="PeerExchange",
        about=AuditSubject(session=sid, analysis=sess.spec.model, reveal_mode=sess.spec.reveal_mode),
    )

    async def read() -> None:
        why = "peer closed its stream"
        try:
            async for msg in request_iterator:
                await on_frame(sess, q, msg)
        except LinkLost as exc:  # the stream broke (the service names its status)
            why = str(exc)
        except asyncio.CancelledError:
            why = "stream cancelled"
        await sess.mailbox.lose(q, why)
        link.queue.put_nowait(None)

    reader = asyncio.create_task(read())
    try:
        yield serde.frame_header_to_proto(sid, 0, 0, party.cfg.id, q, Kind.HELLO)
        while True:
            item = await link.queue.get()
            if item is None:
                break
            yield item
    finally:
        reader.cancel()


async def _check_hello(
    party: Party, sessions: dict[bytes, Session], who: str | None, first: peer_pb2.PeerFrame, refuse: Refuse
) -> tuple[Session, int, bytes]:
    """A mesh stream's first frame: a HELLO for a live mesh session of which the caller is a party, from
    the party its certificate names, which dials this party in that session."""
    sid = bytes(first.session_id)
    if first.kind != Kind.HELLO:
        await refuse(Reason.INVALID_ARGUMENT, "a peer stream must start with a HELLO frame", sid[:64])
    sess = sessions.get(sid)
    if sess is None or sess.state not in LIVE:
        await refuse(Reason.FAILED_PRECONDITION, "unknown or closed session", sid[:64])
    q = sess.spec.id_of(who) if who else None
    if q is None or q == party.cfg.id:
        await refuse(Reason.PERMISSION_DENIED, f"caller {shown(who)} is not a party of this session", sid)
    if int(first.src) != q:
        await refuse(
            Reason.PERMISSION_DENIED,
            f"caller is {shown(who)} (party {q}) but claims to be party {first.src}",
            sid,
        )
    if q > party.cfg.id or sess.spec.topology != "mesh":
        await refuse(
            Reason.FAILED_PRECONDITION,
            f"party {q} must not dial party {party.cfg.id} in this session",
            sid,
        )
    return sess, q, sid


async def offload_to_thread(fn: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn)
