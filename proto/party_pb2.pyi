from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KeyBundle(_message.Message):
    __slots__ = ("party", "x25519_public", "signature", "certificate_pem")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    X25519_PUBLIC_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    party: int
    x25519_public: bytes
    signature: bytes
    certificate_pem: bytes
    def __init__(self, party: _Optional[int] = ..., x25519_public: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., certificate_pem: _Optional[bytes] = ...) -> None: ...

class OpenSessionRequest(_message.Message):
    __slots__ = ("spec", "run_id", "first_run_step")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_RUN_STEP_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.SessionSpec
    run_id: str
    first_run_step: int
    def __init__(self, spec: _Optional[_Union[_common_pb2.SessionSpec, _Mapping]] = ..., run_id: _Optional[str] = ..., first_run_step: _Optional[int] = ...) -> None: ...

class RunResume(_message.Message):
    __slots__ = ("party", "run_id", "run_step", "digest", "execution")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_STEP_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    party: int
    run_id: str
    run_step: int
    digest: bytes
    execution: bytes
    def __init__(self, party: _Optional[int] = ..., run_id: _Optional[str] = ..., run_step: _Optional[int] = ..., digest: _Optional[bytes] = ..., execution: _Optional[bytes] = ...) -> None: ...

class OpenSessionResponse(_message.Message):
    __slots__ = ("bundle", "resume")
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    bundle: KeyBundle
    resume: RunResume
    def __init__(self, bundle: _Optional[_Union[KeyBundle, _Mapping]] = ..., resume: _Optional[_Union[RunResume, _Mapping]] = ...) -> None: ...

class ConnectSessionRequest(_message.Message):
    __slots__ = ("session_id", "bundles", "resume")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BUNDLES_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    bundles: _containers.RepeatedCompositeFieldContainer[KeyBundle]
    resume: _containers.RepeatedCompositeFieldContainer[RunResume]
    def __init__(self, session_id: _Optional[bytes] = ..., bundles: _Optional[_Iterable[_Union[KeyBundle, _Mapping]]] = ..., resume: _Optional[_Iterable[_Union[RunResume, _Mapping]]] = ...) -> None: ...

class ConnectSessionResponse(_message.Message):
    __slots__ = ("session_id", "setup_rounds")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SETUP_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    setup_rounds: int
    def __init__(self, session_id: _Optional[bytes] = ..., setup_rounds: _Optional[int] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("session_id", "step", "batch", "inputs")
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.Array
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.Array, _Mapping]] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    step: int
    batch: int
    inputs: _containers.MessageMap[str, _common_pb2.Array]
    def __init__(self, session_id: _Optional[bytes] = ..., step: _Optional[int] = ..., batch: _Optional[int] = ..., inputs: _Optional[_Mapping[str, _common_pb2.Array]] = ...) -> None: ...

class ReceiverMessage(_message.Message):
    __slots__ = ("round", "payload")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    round: int
    payload: _common_pb2.Array
    def __init__(self, round: _Optional[int] = ..., payload: _Optional[_Union[_common_pb2.Array, _Mapping]] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("session_id", "step", "to_receiver", "rounds", "clamped", "run_step", "replayed")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TO_RECEIVER_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    CLAMPED_FIELD_NUMBER: _ClassVar[int]
    RUN_STEP_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    step: int
    to_receiver: _containers.RepeatedCompositeFieldContainer[ReceiverMessage]
    rounds: int
    clamped: int
    run_step: int
    replayed: bool
    def __init__(self, session_id: _Optional[bytes] = ..., step: _Optional[int] = ..., to_receiver: _Optional[_Iterable[_Union[ReceiverMessage, _Mapping]]] = ..., rounds: _Optional[int] = ..., clamped: _Optional[int] = ..., run_step: _Optional[int] = ..., replayed: _Optional[bool] = ...) -> None: ...

class ProbeLinksRequest(_message.Message):
    __slots__ = ("session_id", "step", "rounds", "words")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    step: int
    rounds: int
    words: int
    def __init__(self, session_id: _Optional[bytes] = ..., step: _Optional[int] = ..., rounds: _Optional[int] = ..., words: _Optional[int] = ...) -> None: ...

class ProbeLinksResponse(_message.Message):
    __slots__ = ("session_id", "step", "round_done")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ROUND_DONE_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    step: int
    round_done: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, session_id: _Optional[bytes] = ..., step: _Optional[int] = ..., round_done: _Optional[_Iterable[float]] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    reason: str
    def __init__(self, session_id: _Optional[bytes] = ..., reason: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session_id", "last_step")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    last_step: int
    def __init__(self, session_id: _Optional[bytes] = ..., last_step: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionStatus(_message.Message):
    __slots__ = ("session_id", "last_step", "state", "reveal_mode", "model")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REVEAL_MODE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    session_id: bytes
    last_step: int
    state: str
    reveal_mode: str
    model: str
    def __init__(self, session_id: _Optional[bytes] = ..., last_step: _Optional[int] = ..., state: _Optional[str] = ..., reveal_mode: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("party", "identity", "sessions", "decisions_used", "decisions_budget", "refused_messages")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_USED_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_BUDGET_FIELD_NUMBER: _ClassVar[int]
    REFUSED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    party: int
    identity: str
    sessions: _containers.RepeatedCompositeFieldContainer[SessionStatus]
    decisions_used: int
    decisions_budget: int
    refused_messages: int
    def __init__(self, party: _Optional[int] = ..., identity: _Optional[str] = ..., sessions: _Optional[_Iterable[_Union[SessionStatus, _Mapping]]] = ..., decisions_used: _Optional[int] = ..., decisions_budget: _Optional[int] = ..., refused_messages: _Optional[int] = ...) -> None: ...

class PrivacyBudgetState(_message.Message):
    __slots__ = ("configured", "budget_json", "unit", "limit", "spent")
    CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_JSON_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SPENT_FIELD_NUMBER: _ClassVar[int]
    configured: bool
    budget_json: str
    unit: str
    limit: float
    spent: float
    def __init__(self, configured: _Optional[bool] = ..., budget_json: _Optional[str] = ..., unit: _Optional[str] = ..., limit: _Optional[float] = ..., spent: _Optional[float] = ...) -> None: ...

class PlanPrivacyRequest(_message.Message):
    __slots__ = ("spec", "batches", "batch_size")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.SessionSpec
    batches: int
    batch_size: int
    def __init__(self, spec: _Optional[_Union[_common_pb2.SessionSpec, _Mapping]] = ..., batches: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class PlanPrivacyResponse(_message.Message):
    __slots__ = ("party", "identity", "budget", "projected", "would_refuse", "message", "events_json", "batches_allowed", "decisions_used", "decisions_budget")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    PROJECTED_FIELD_NUMBER: _ClassVar[int]
    WOULD_REFUSE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    BATCHES_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_USED_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_BUDGET_FIELD_NUMBER: _ClassVar[int]
    party: int
    identity: str
    budget: PrivacyBudgetState
    projected: float
    would_refuse: bool
    message: str
    events_json: str
    batches_allowed: int
    decisions_used: int
    decisions_budget: int
    def __init__(self, party: _Optional[int] = ..., identity: _Optional[str] = ..., budget: _Optional[_Union[PrivacyBudgetState, _Mapping]] = ..., projected: _Optional[float] = ..., would_refuse: _Optional[bool] = ..., message: _Optional[str] = ..., events_json: _Optional[str] = ..., batches_allowed: _Optional[int] = ..., decisions_used: _Optional[int] = ..., decisions_budget: _Optional[int] = ...) -> None: ...

class PrivacyReportRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PrivacyReportResponse(_message.Message):
    __slots__ = ("party", "identity", "budget", "events_json", "decisions_used", "run_charges_json", "colluding", "neighbours")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    EVENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_USED_FIELD_NUMBER: _ClassVar[int]
    RUN_CHARGES_JSON_FIELD_NUMBER: _ClassVar[int]
    COLLUDING_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_FIELD_NUMBER: _ClassVar[int]
    party: int
    identity: str
    budget: PrivacyBudgetState
    events_json: str
    decisions_used: int
    run_charges_json: str
    colluding: str
    neighbours: str
    def __init__(self, party: _Optional[int] = ..., identity: _Optional[str] = ..., budget: _Optional[_Union[PrivacyBudgetState, _Mapping]] = ..., events_json: _Optional[str] = ..., decisions_used: _Optional[int] = ..., run_charges_json: _Optional[str] = ..., colluding: _Optional[str] = ..., neighbours: _Optional[str] = ...) -> None: ...
