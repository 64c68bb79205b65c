"""Conversion of the session calls of the party service (``OpenSession``'s answer, ``ConnectSession``,
``Evaluate``, ``ProbeLinks``, ``CloseSession``, ``Status``) and of the relay's bundles between plain Python
values (:mod:`proto.records`) and protobuf: ``x_to_proto`` / ``x_from_proto`` pairs, split from
:mod:`proto.serde` (arrays, the session spec and its OpenSession request, run-step references, receiver
messages and peer frames, which these build on) to keep each module short.

The party builds its answers here (``parties.service``, ``parties.steps``), the coordinator its requests
(``coordinator.api``, ``coordinator.relay``) and reads the answers back. What a ``from`` function reads
from the wire it validates (:class:`proto.serde.WireError`). Each pair has a round-trip test in
``tests/proto/test_serde.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy.typing as npt

from proto import party_pb2, peer_pb2, relay_pb2
from proto.records import EvaluateAnswer, KeyBundle, PartyStatus, RunStepRef, SessionState
from proto.serde import (
    MAX_ARRAY_BYTES,
    inputs_to_proto,
    receiver_messages_from_proto,
    receiver_messages_to_proto,
    run_ref_from_proto,
    run_ref_to_proto,
)

# ---- OpenSession and ConnectSession ---------------------------------------------------------------------


def key_bundle_to_proto(b: KeyBundle) -> party_pb2.KeyBundle:
    return party_pb2.KeyBundle(
        party=b.party,
        x25519_public=b.x25519_public,
        signature=b.signature,
        certificate_pem=b.certificate_pem,
    )


def key_bundle_from_proto(msg: party_pb2.KeyBundle) -> KeyBundle:
    """A party's key bundle as sent (its key and signature are checked by ``parties.peering``)."""
    pub, sig, cert = bytes(msg.x25519_public), bytes(msg.signature), bytes(msg.certificate_pem)
    return KeyBundle(int(msg.party), pub, sig, cert)


@dataclass(frozen=True)
class OpenAnswer:
    """A party's answer to OpenSession: its key bundle and, for a run, what it holds of the run (the party
    as it reports itself, and the run step)."""

    bundle: KeyBundle
    resume: tuple[int, RunStepRef] | None = None


def open_response_to_proto(a: OpenAnswer) -> party_pb2.OpenSessionResponse:
    resp = party_pb2.OpenSessionResponse(bundle=key_bundle_to_proto(a.bundle))
    if a.resume is not None:
        resp.resume.CopyFrom(run_ref_to_proto(*a.resume))
    return resp


def open_response_from_proto(msg: party_pb2.OpenSessionResponse, run: bool) -> OpenAnswer:
    """The answer to an OpenSession that named a run (``run``: its resume report is read and checked,
    :func:`proto.serde.run_ref_from_proto`) or not (the resume report is not looked at)."""
    return OpenAnswer(key_bundle_from_proto(msg.bundle), run_ref_from_proto(msg.resume) if run else None)


def connect_request_to_proto(
    session_id: bytes, bundles: Iterable[KeyBundle], resume: Iterable[tuple[int, RunStepRef]] = ()
) -> party_pb2.ConnectSessionRequest:
    """ConnectSession: every party's key bundle and, for a run, every party's resume report, forwarded."""
    return party_pb2.ConnectSessionRequest(
        session_id=session_id,
        bundles=[key_bundle_to_proto(b) for b in bundles],
        resume=[run_ref_to_proto(party, ref) for party, ref in resume],
    )


def connect_bundles_from_proto(msg: party_pb2.ConnectSessionRequest) -> list[KeyBundle]:
    """The key bundles of a ConnectSession (its resume reports are read, after the session's own checks, by
    ``parties.session.agreed_replay`` through :func:`proto.serde.run_ref_from_proto`)."""
    return [key_bundle_from_proto(b) for b in msg.bundles]


def connect_response_to_proto(session_id: bytes, setup_rounds: int) -> party_pb2.ConnectSessionResponse:
    return party_pb2.ConnectSessionResponse(session_id=session_id, setup_rounds=setup_rounds)


def connect_response_from_proto(msg: party_pb2.ConnectSessionResponse) -> tuple[bytes, int]:
    return bytes(msg.session_id), int(msg.setup_rounds)


# ---- Evaluate and ProbeLinks -------------------------------------------------------------------------------


def evaluate_request_to_proto(
    session_id: bytes, step: int, batch: int, inputs: Mapping[str, npt.ArrayLike]
) -> party_pb2.EvaluateRequest:
    """One batch of ``batch`` decisions at session step ``step`` (the party reads its inputs with
    :func:`proto.serde.inputs_from_proto`, under its own size limit, where each path needs them)."""
    return party_pb2.EvaluateRequest(
        session_id=session_id, step=step, batch=batch, inputs=inputs_to_proto(dict(inputs))
    )


def evaluate_response_to_proto(a: EvaluateAnswer) -> party_pb2.EvaluateResponse:
    return party_pb2.EvaluateResponse(
        session_id=a.session_id,
        step=a.step,
        to_receiver=receiver_messages_to_proto(list(a.to_receiver)),
        rounds=a.rounds,
        clamped=a.clamped,
        run_step=a.run_step,
        replayed=a.replayed,
    )


def evaluate_response_from_proto(
    msg: party_pb2.EvaluateResponse, max_bytes: int = MAX_ARRAY_BYTES
) -> EvaluateAnswer:
    """A party's answer to one step; its receiver messages must be 1-D uint64 arrays (WireError)."""
    return EvaluateAnswer(
        session_id=bytes(msg.session_id),
        step=int(msg.step),
        to_receiver=tuple(receiver_messages_from_proto(msg.to_receiver, max_bytes)),
        rounds=int(msg.rounds),
        clamped=int(msg.clamped),
        run_step=int(msg.run_step),
        replayed=bool(msg.replayed),
    )


@dataclass(frozen=True)
class ProbeCall:
    """A link probe at session step ``step``: ``rounds`` all-to-all rounds of ``words`` zero words."""

    session_id: bytes
    step: int
    rounds: int
    words: int


def probe_request_to_proto(c: ProbeCall) -> party_pb2.ProbeLinksRequest:
    return party_pb2.ProbeLinksRequest(session_id=c.session_id, step=c.step, rounds=c.rounds, words=c.words)


def probe_request_from_proto(msg: party_pb2.ProbeLinksRequest) -> ProbeCall:
    """The probe as asked (its limits are the party's: ``parties.service``)."""
    return ProbeCall(bytes(msg.session_id), int(msg.step), int(msg.rounds), int(msg.words))


def probe_response_to_proto(
    session_id: bytes, step: int, round_done: list[float]
) -> party_pb2.ProbeLinksResponse:
    return party_pb2.ProbeLinksResponse(session_id=session_id, step=step, round_done=round_done)


def probe_response_from_proto(msg: party_pb2.ProbeLinksResponse) -> list[float]:
    """When each round's frames were all in at the party (its time.monotonic())."""
    return [float(t) for t in msg.round_done]


# ---- CloseSession and Status ------------------------------------------------------------------------------


def close_request_to_proto(session_id: bytes, reason: str) -> party_pb2.CloseSessionRequest:
    return party_pb2.CloseSessionRequest(session_id=session_id, reason=reason)


def close_request_from_proto(msg: party_pb2.CloseSessionRequest) -> tuple[bytes, str]:
    return bytes(msg.session_id), msg.reason


def close_response_to_proto(session_id: bytes, last_step: int) -> party_pb2.CloseSessionResponse:
    return party_pb2.CloseSessionResponse(session_id=session_id, last_step=last_step)


def close_response_from_proto(msg: party_pb2.CloseSessionResponse) -> tuple[bytes, int]:
    return bytes(msg.session_id), int(msg.last_step)


def status_to_proto(s: PartyStatus) -> party_pb2.StatusResponse:
    return party_pb2.StatusResponse(
        party=s.party,
        identity=s.identity,
        sessions=[
            party_pb2.SessionStatus(
                session_id=x.session_id,
                last_step=x.last_step,
                state=x.state,
                reveal_mode=x.reveal_mode,
                model=x.model,
            )
            for x in s.sessions
        ],
        decisions_used=s.decisions_used,
        decisions_budget=s.decisions_budget,
        refused_messages=s.refused_messages,
    )


def status_from_proto(msg: party_pb2.StatusResponse) -> PartyStatus:
    return PartyStatus(
        party=int(msg.party),
        identity=msg.identity,
        sessions=tuple(
            SessionState(bytes(x.session_id), int(x.last_step), x.state, x.reveal_mode, x.model)
            for x in msg.sessions
        ),
        decisions_used=int(msg.decisions_used),
        decisions_budget=int(msg.decisions_budget),
        refused_messages=int(msg.refused_messages),
    )


# ---- relay bundles ----------------------------------------------------------------------------------------


def bundle_to_proto(frames: Iterable[peer_pb2.PeerFrame]) -> relay_pb2.PeerBundle:
    """Peer frames (built by :func:`proto.serde.frame_to_proto` / ``frame_header_to_proto``) as one relay
    bundle: what a relay-topology party and the coordinator's relay send each other."""
    return relay_pb2.PeerBundle(frames=list(frames))


def bundle_from_proto(msg: relay_pb2.PeerBundle) -> list[peer_pb2.PeerFrame]:
    return list(msg.frames)
