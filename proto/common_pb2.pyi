from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Topology(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOPOLOGY_UNSPECIFIED: _ClassVar[Topology]
    MESH: _ClassVar[Topology]
    RELAY: _ClassVar[Topology]
TOPOLOGY_UNSPECIFIED: Topology
MESH: Topology
RELAY: Topology

class Array(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class PartyInfo(_message.Message):
    __slots__ = ("id", "identity", "address")
    ID_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    id: int
    identity: str
    address: str
    def __init__(self, id: _Optional[int] = ..., identity: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class FixedPointFormat(_message.Message):
    __slots__ = ("frac_bits", "term_int_bits", "max_terms", "kappa", "max_parties", "blind_frac_bits", "blind_e_bits")
    FRAC_BITS_FIELD_NUMBER: _ClassVar[int]
    TERM_INT_BITS_FIELD_NUMBER: _ClassVar[int]
    MAX_TERMS_FIELD_NUMBER: _ClassVar[int]
    KAPPA_FIELD_NUMBER: _ClassVar[int]
    MAX_PARTIES_FIELD_NUMBER: _ClassVar[int]
    BLIND_FRAC_BITS_FIELD_NUMBER: _ClassVar[int]
    BLIND_E_BITS_FIELD_NUMBER: _ClassVar[int]
    frac_bits: int
    term_int_bits: int
    max_terms: int
    kappa: int
    max_parties: int
    blind_frac_bits: int
    blind_e_bits: int
    def __init__(self, frac_bits: _Optional[int] = ..., term_int_bits: _Optional[int] = ..., max_terms: _Optional[int] = ..., kappa: _Optional[int] = ..., max_parties: _Optional[int] = ..., blind_frac_bits: _Optional[int] = ..., blind_e_bits: _Optional[int] = ...) -> None: ...

class SessionSpec(_message.Message):
    __slots__ = ("session_id", "parties", "threshold", "fmt", "reveal_mode", "model", "model_params_json", "topology", "relay_address", "coordinator_identity", "sign_precompute", "precompute_ahead", "security", "study")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    FMT_FIELD_NUMBER: _ClassVar[int]
    REVEAL_MODE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    RELAY_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    SIGN_PRECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    PRECOMPUTE_AHEAD_FIELD_NUMBER: _ClassVar[int]
    SECURITY_FIELD_NUMBER: _ClassVar[int]
    STUDY_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    parties: _containers.RepeatedCompositeFieldContainer[PartyInfo]
    threshold: int
    fmt: FixedPointFormat
    reveal_mode: str
    model: str
    model_params_json: str
    topology: Topology
    relay_address: str
    coordinator_identity: str
    sign_precompute: str
    precompute_ahead: bool
    security: str
    study: str
    def __init__(self, session_id: _Optional[bytes] = ..., parties: _Optional[_Iterable[_Union[PartyInfo, _Mapping]]] = ..., threshold: _Optional[int] = ..., fmt: _Optional[_Union[FixedPointFormat, _Mapping]] = ..., reveal_mode: _Optional[str] = ..., model: _Optional[str] = ..., model_params_json: _Optional[str] = ..., topology: _Optional[_Union[Topology, str]] = ..., relay_address: _Optional[str] = ..., coordinator_identity: _Optional[str] = ..., sign_precompute: _Optional[str] = ..., precompute_ahead: _Optional[bool] = ..., security: _Optional[str] = ..., study: _Optional[str] = ...) -> None: ...
