"""The conversion between Python objects and the protobuf wire format (``proto/``): this module's base
pieces, built on by :mod:`proto.serde_session` (the party service's session calls) and
:mod:`proto.serde_privacy` (its privacy calls). Protobuf messages are built and read only in ``proto/``.

``x_to_proto`` / ``x_from_proto`` pairs, each with a round-trip test (tests/proto/test_serde.py).
Everything read from the wire is validated here: arrays must have an allowed dtype, a shape whose size
matches the byte count, and at most ``max_bytes``; a malformed message raises :class:`WireError`, which
the services turn into INVALID_ARGUMENT. Payloads are packed with numpy (``tobytes`` / ``frombuffer``):
one ``bytes`` per peer per round for the whole batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from hss.fixedpoint import FixedPoint
from proto import common_pb2, party_pb2, peer_pb2
from proto.records import Frame, Kind, RunStepRef
from proto.spec import PartyEntry, SessionSpec, SpecError, shown
from proto.study import Study, StudyError

ALLOWED_DTYPES = ("<f8", "<u8", "<i8", "|b1", "<f4", "<i4")
MAX_ARRAY_BYTES = 64 * 1024 * 1024
MAX_DIMS = 4

_TOPOLOGY_TO = {"mesh": common_pb2.MESH, "relay": common_pb2.RELAY}
_TOPOLOGY_FROM = {v: k for k, v in _TOPOLOGY_TO.items()}


class WireError(ValueError):
    """A message that is well-formed protobuf but not a valid confar message."""


# ---- arrays and payloads ------------------------------------------------------------------------------


def array_to_proto(a: npt.ArrayLike) -> common_pb2.Array:
    arr = np.ascontiguousarray(a)
    dt = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    arr = arr.astype(dt, copy=False)
    if dt.str not in ALLOWED_DTYPES:
        raise WireError(f"dtype {dt.str} cannot be sent; allowed: {ALLOWED_DTYPES}")
    return common_pb2.Array(dtype=dt.str, shape=list(arr.shape), data=arr.tobytes())


def array_from_proto(msg: common_pb2.Array, max_bytes: int = MAX_ARRAY_BYTES) -> npt.NDArray[Any]:
    if msg.dtype not in ALLOWED_DTYPES:
        raise WireError(f"array dtype {msg.dtype!r} is not allowed; expected one of {ALLOWED_DTYPES}")
    if len(msg.shape) > MAX_DIMS:
        raise WireError(f"array has {len(msg.shape)} dimensions, at most {MAX_DIMS} allowed")
    dt = np.dtype(msg.dtype)
    size = 1
    for s in msg.shape:
        size *= int(s)
        if size * dt.itemsize > max_bytes:
            raise WireError(f"array of shape {tuple(msg.shape)} exceeds the limit of {max_bytes} bytes")
    if len(msg.data) != size * dt.itemsize:
        raise WireError(
            f"array of shape {tuple(msg.shape)} and dtype {msg.dtype} needs {size * dt.itemsize} bytes, "
            f"got {len(msg.data)}"
        )
    return np.frombuffer(msg.data, dtype=dt).reshape(tuple(int(s) for s in msg.shape))


_WORD = np.dtype("<u8")  # a payload word on the wire
_NATIVE_WORDS = _WORD == np.dtype(np.uint64)  # little-endian host: the wire's words are numpy's uint64


def payload_to_bytes(payload: npt.NDArray[np.uint64]) -> bytes:
    """A protocol message (flat uint64 words) as one packed little-endian buffer."""
    if payload.dtype != np.uint64 or payload.ndim != 1:
        raise WireError(
            f"protocol payloads are 1-D uint64 arrays, got {payload.dtype} of shape {payload.shape}"
        )
    if _NATIVE_WORDS:  # tobytes packs in C order whatever the strides
        return payload.tobytes()
    return np.ascontiguousarray(payload, dtype=_WORD).tobytes()


def payload_from_bytes(data: bytes, max_bytes: int = MAX_ARRAY_BYTES) -> npt.NDArray[np.uint64]:
    n = len(data)
    if n % 8:
        raise WireError(f"payload of {n} bytes is not a whole number of uint64 words")
    if n > max_bytes:
        raise WireError(f"payload of {n} bytes exceeds the limit of {max_bytes} bytes")
    words = np.frombuffer(data, dtype=_WORD)
    return words if _NATIVE_WORDS else words.astype(np.uint64)


def inputs_to_proto(inputs: dict[str, npt.ArrayLike]) -> dict[str, common_pb2.Array]:
    return {k: array_to_proto(v) for k, v in inputs.items()}


def inputs_from_proto(msg: Any, max_bytes: int = MAX_ARRAY_BYTES) -> dict[str, npt.NDArray[Any]]:
    out = {}
    total = 0
    for k, v in msg.items():
        arr = array_from_proto(v, max_bytes)
        total += arr.nbytes
        if total > max_bytes:
            raise WireError(f"inputs exceed the limit of {max_bytes} bytes")
        out[str(k)] = arr
    return out


# ---- session --------------------------------------------------------------------------------------------

_FMT_FIELDS = (
    "frac_bits",
    "term_int_bits",
    "max_terms",
    "kappa",
    "max_parties",
    "blind_frac_bits",
    "blind_e_bits",
)


def fmt_to_proto(fmt: FixedPoint) -> common_pb2.FixedPointFormat:
    return common_pb2.FixedPointFormat(**{f: getattr(fmt, f) for f in _FMT_FIELDS})


#: A party's own limits on a session's fixed-point format, checked before the format is built (so no work
#: depends on the request's numbers): at most MAX_PARTIES parties (party ids are 1..64, parties.config), at
#: most MAX_PARTIES + 1 terms (each party's and the public one), bit counts within the 127-bit field.
MAX_PARTIES = 64
FMT_LIMITS = {
    "max_parties": MAX_PARTIES,
    "max_terms": MAX_PARTIES + 1,
    "frac_bits": 126,
    "term_int_bits": 126,
    "kappa": 126,
    "blind_frac_bits": 126,
    "blind_e_bits": 126,
}


def fmt_from_proto(msg: common_pb2.FixedPointFormat) -> FixedPoint:
    for f, hi in FMT_LIMITS.items():
        v = int(getattr(msg, f))
        if v > hi:
            raise WireError(f"fixed-point format refused: fmt.{f} = {v} exceeds this party's limit of {hi}")
    try:
        return FixedPoint(**{f: int(getattr(msg, f)) for f in _FMT_FIELDS})
    except (ValueError, TypeError) as exc:
        raise WireError(f"fixed-point format refused: {exc}") from exc


#: Limits on a session's model parameters (public JSON), whatever the analysis, checked at the wire: the
#: text's length, its nesting, and every number (finite; floats of magnitude at most 1e12, integers below
#: 2^63: seeds fit, nothing a model needs is larger). An analysis checks its own parameters further.
MAX_PARAMS_JSON_CHARS = 64 * 1024
MAX_PARAMS_DEPTH = 16
MAX_PARAM_FLOAT = 1e12
MAX_PARAM_INT = 2**63 - 1


def params_from_json(text: str) -> dict[str, Any]:
    """``model_params_json`` as a dict, or WireError naming what is wrong (and where, for a value)."""
    if len(text) > MAX_PARAMS_JSON_CHARS:
        raise WireError(f"model_params_json has {len(text)} characters; at most {MAX_PARAMS_JSON_CHARS}")
    try:
        params = json.loads(text) if text else {}
    except RecursionError as exc:
        raise WireError(f"model_params_json nests deeper than {MAX_PARAMS_DEPTH} levels") from exc
    except ValueError as exc:  # JSONDecodeError, and integers past Python's digit limit
        raise WireError(f"model_params_json is not valid JSON: {shown(str(exc), 200)}") from exc
    if not isinstance(params, dict):
        raise WireError("model_params_json must be a JSON object")
    stack: list[tuple[str, Any, int]] = [("model_params", params, 1)]
    while stack:  # iterative: no recursion on the request's nesting
        where, v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > MAX_PARAMS_DEPTH:
                raise WireError(f"{where} nests deeper than {MAX_PARAMS_DEPTH} levels (model_params_json)")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                sub = f"{where}.{shown(k, 40)[1:-1]}" if isinstance(v, dict) else f"{where}[{k}]"
                stack.append((sub, x, depth + 1))
        elif isinstance(v, bool) or v is None or isinstance(v, str):
            continue
        elif isinstance(v, int):
            if abs(v) > MAX_PARAM_INT:
                raise WireError(f"{where} = {shown(v, 40)}: integers must lie within +-(2^63 - 1)")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise WireError(f"{where} = {v}: numbers must be finite")
            if abs(v) > MAX_PARAM_FLOAT:
                raise WireError(f"{where} = {v:g}: numbers must lie within +-{MAX_PARAM_FLOAT:g}")
    return params


def spec_to_proto(spec: SessionSpec) -> common_pb2.SessionSpec:
    return common_pb2.SessionSpec(
        session_id=spec.session_id,
        parties=[common_pb2.PartyInfo(id=p.id, identity=p.identity, address=p.address) for p in spec.parties],
        threshold=spec.t,
        fmt=fmt_to_proto(spec.fmt),
        reveal_mode=spec.reveal_mode,
        model=spec.model,
        model_params_json=json.dumps(spec.model_params, sort_keys=True),
        topology=_TOPOLOGY_TO[spec.topology],
        relay_address=spec.relay_address,
        coordinator_identity=spec.coordinator_identity,
        sign_precompute="" if spec.sign_precompute == "inline" else spec.sign_precompute,
        precompute_ahead=spec.precompute_ahead,
        security="" if spec.security == "semi-honest" else spec.security,
        study=spec.study,
    )


def spec_from_proto(msg: common_pb2.SessionSpec) -> SessionSpec:
    if msg.topology not in _TOPOLOGY_FROM:
        raise WireError(f"unknown topology {msg.topology}")
    if not msg.HasField("fmt"):
        raise WireError("session spec has no fixed-point format")
    if len(msg.parties) > MAX_PARTIES:
        raise WireError(f"{len(msg.parties)} parties; at most {MAX_PARTIES} supported")
    params = params_from_json(msg.model_params_json)
    if msg.study:
        try:
            Study.from_text(msg.study, "session spec study")
        except StudyError as exc:
            raise WireError(str(exc)) from exc
    try:
        return SessionSpec(
            session_id=bytes(msg.session_id),
            parties=tuple(PartyEntry(int(p.id), p.identity, p.address) for p in msg.parties),
            t=int(msg.threshold),
            reveal_mode=msg.reveal_mode,
            model=msg.model,
            model_params=params,
            fmt=fmt_from_proto(msg.fmt),
            topology=_TOPOLOGY_FROM[msg.topology],
            relay_address=msg.relay_address,
            coordinator_identity=msg.coordinator_identity or "coordinator",
            sign_precompute=msg.sign_precompute or "inline",
            precompute_ahead=bool(msg.precompute_ahead),
            security=msg.security or "semi-honest",
            study=msg.study,
        )
    except SpecError as exc:
        raise WireError(f"session spec refused: {exc}") from exc


def open_request_to_proto(spec: SessionSpec) -> party_pb2.OpenSessionRequest:
    """OpenSession for ``spec``, with its run binding (run_id, first_run_step) when it has one."""
    req = party_pb2.OpenSessionRequest(spec=spec_to_proto(spec))
    if spec.run_id:
        req.run_id, req.first_run_step = spec.run_id, spec.first_run_step
    return req


def spec_from_open_request(req: party_pb2.OpenSessionRequest) -> SessionSpec:
    """The session an OpenSession asks for, run binding included (0 for first_run_step means unset: 1)."""
    spec = spec_from_proto(req.spec)
    if not req.run_id and req.first_run_step in (0, 1):
        return spec
    first = int(req.first_run_step)
    if req.run_id and first == 0:
        raise WireError(f"OpenSessionRequest for run {req.run_id[:40]!r} needs first_run_step >= 1")
    try:
        return dataclasses.replace(spec, run_id=req.run_id, first_run_step=first)
    except SpecError as exc:
        raise WireError(f"session spec refused: {exc}") from exc


def run_ref_to_proto(party: int, ref: RunStepRef) -> party_pb2.RunResume:
    return party_pb2.RunResume(
        party=party, run_id=ref.run_id, run_step=ref.run_step, digest=ref.digest, execution=ref.execution
    )


def run_ref_from_proto(msg: party_pb2.RunResume) -> tuple[int, RunStepRef]:
    """(party, what it holds); a held step needs a 32-byte digest and a 16..64-byte session id."""
    step = int(msg.run_step)
    if step and (len(msg.digest) != 32 or not 16 <= len(msg.execution) <= 64):
        raise WireError(
            f"party {msg.party}'s resume report for run step {step} has a malformed digest or session id"
        )
    if not step and (msg.digest or msg.execution):
        raise WireError(f"party {msg.party}'s resume report holds no run step but names a digest/session")
    return int(msg.party), RunStepRef(msg.run_id, step, bytes(msg.digest), bytes(msg.execution))


# ---- receiver messages ------------------------------------------------------------------------------------


def receiver_messages_to_proto(
    msgs: list[tuple[int, npt.NDArray[np.uint64]]],
) -> list[party_pb2.ReceiverMessage]:
    return [party_pb2.ReceiverMessage(round=r, payload=array_to_proto(p)) for r, p in msgs]


def receiver_messages_from_proto(
    msgs: Any, max_bytes: int = MAX_ARRAY_BYTES
) -> list[tuple[int, npt.NDArray[np.uint64]]]:
    out = []
    for msg in msgs:
        arr = array_from_proto(msg.payload, max_bytes)
        if arr.dtype != np.dtype("<u8") or arr.ndim != 1:
            raise WireError(f"receiver payload must be 1-D uint64, got {arr.dtype} {arr.shape}")
        out.append((int(msg.round), arr.astype(np.uint64, copy=False)))
    return out


# ---- peer frames ----------------------------------------------------------------------------------------


def frame_header_to_proto(
    session_id: bytes,
    step: int,
    rnd: int,
    src: int,
    dst: int,
    kind: int,
    payload: bytes = b"",
    nonce: bytes = b"",
) -> peer_pb2.PeerFrame:
    return peer_pb2.PeerFrame(
        session_id=session_id,
        step=step,
        round=rnd,
        src=src,
        dst=dst,
        kind=cast(Any, kind),
        payload=payload,
        nonce=nonce,
    )


def frame_to_proto(session_id: bytes, f: Frame) -> peer_pb2.PeerFrame:
    """A :class:`proto.records.Frame` (plaintext payload) as a PeerFrame."""
    data = payload_to_bytes(f.payload) if f.payload is not None else b""
    return frame_header_to_proto(session_id, f.step, f.round, f.src, f.dst, int(f.kind), data)


_PAYLOAD_TAG = bytes([(7 << 3) | 2])  # PeerFrame.payload: field 7, length-delimited
_SMALL_PAYLOAD = 16_384  # bytes; above it protobuf's own copies cost ~1 ms per 256 kB on this machine kind


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def frame_to_wire(session_id: bytes, f: Frame) -> bytes:
    """A frame as a serialized PeerFrame, the same bytes as ``frame_to_proto(...).SerializeToString()``, with
    a large payload copied once: building the message and serializing it copy it twice more, which costs
    about 1 ms per 256 kB on this machine kind (about 40 ms per party and step at m = 7, batch 1,000). Fields
    1-6 are serialized by protobuf, then field 7 (the payload: last in field order, since field 8, the
    relay's nonce, is empty in the mesh) is appended."""
    if f.payload is None or f.payload.nbytes < _SMALL_PAYLOAD:  # protobuf is faster for small messages
        return frame_to_proto(session_id, f).SerializeToString()
    if f.payload.dtype != np.uint64 or f.payload.ndim != 1:
        raise WireError(
            f"protocol payloads are 1-D uint64 arrays, got {f.payload.dtype} of shape {f.payload.shape}"
        )
    words = np.ascontiguousarray(f.payload, dtype=_WORD)  # no copy for a contiguous array on this host
    head = frame_header_to_proto(session_id, f.step, f.round, f.src, f.dst, int(f.kind)).SerializeToString()
    return b"".join((head, _PAYLOAD_TAG, _varint(words.nbytes), words.data.cast("B")))


def wire_message(msg: peer_pb2.PeerFrame | bytes) -> bytes:
    """The serializer of the mesh's Exchange stream: a PeerFrame, or one already serialized by
    :func:`frame_to_wire`."""
    return msg if isinstance(msg, bytes) else msg.SerializeToString()


_KINDS = {int(k): k for k in Kind}


def frame_from_proto(
    msg: peer_pb2.PeerFrame, payload: bytes | None = None, max_bytes: int = MAX_ARRAY_BYTES
) -> Frame:
    """A PeerFrame as a :class:`proto.records.Frame`; ``payload`` overrides msg.payload (decrypted)."""
    kind = _KINDS.get(msg.kind)
    if kind is None:
        raise WireError(f"unknown frame kind {msg.kind}")
    raw = msg.payload if payload is None else payload
    arr = payload_from_bytes(raw, max_bytes) if kind == Kind.DATA else None
    if kind != Kind.DATA and raw:
        raise WireError(f"{kind.name} frame must not carry a payload")
    return Frame(int(msg.step), int(msg.round), int(msg.src), int(msg.dst), kind, arr)
