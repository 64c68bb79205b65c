from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FrameKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FRAME_KIND_UNSPECIFIED: _ClassVar[FrameKind]
    HELLO: _ClassVar[FrameKind]
    DATA: _ClassVar[FrameKind]
    EMPTY: _ClassVar[FrameKind]
    DONE: _ClassVar[FrameKind]
FRAME_KIND_UNSPECIFIED: FrameKind
HELLO: FrameKind
DATA: FrameKind
EMPTY: FrameKind
DONE: FrameKind

class PeerFrame(_message.Message):
    __slots__ = ("session_id", "step", "round", "src", "dst", "kind", "payload", "nonce")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    step: int
    round: int
    src: int
    dst: int
    kind: FrameKind
    payload: bytes
    nonce: bytes
    def __init__(self, session_id: _Optional[bytes] = ..., step: _Optional[int] = ..., round: _Optional[int] = ..., src: _Optional[int] = ..., dst: _Optional[int] = ..., kind: _Optional[_Union[FrameKind, str]] = ..., payload: _Optional[bytes] = ..., nonce: _Optional[bytes] = ...) -> None: ...
