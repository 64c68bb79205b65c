"""Round trips of every serde pair, and refusal of malformed wire data."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from coordinator.certs import check_identity
from hss.fixedpoint import FixedPoint
from proto import common_pb2, peer_pb2, serde, serde_privacy, serde_session
from proto.records import (
    BudgetState,
    EvaluateAnswer,
    Frame,
    KeyBundle,
    Kind,
    LedgerReport,
    PartyStatus,
    PlanAnswer,
    RunCharge,
    RunStepRef,
    SessionState,
)
from proto.spec import PartyEntry, SessionSpec, SpecError, identity_problem


def spec(**kw: object) -> SessionSpec:
    base: dict[str, object] = dict(
        session_id=b"\x01" * 16,
        parties=(
            PartyEntry(1, "party-1", "127.0.0.1:1"),
            PartyEntry(2, "party-2"),
            PartyEntry(3, "party-3", "127.0.0.1:3"),
        ),
        t=1,
        reveal_mode="sign",
        model="gaussian-mean",
        model_params={"sigma": 2.0, "column": "x"},
        fmt=FixedPoint(frac_bits=18),
        topology="relay",
        relay_address="127.0.0.1:9",
    )
    base.update(kw)
    return SessionSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(12, dtype=np.float64).reshape(3, 4),
        np.array([], dtype=np.uint64),
        np.array([2**64 - 1, 0, 7], dtype=np.uint64),
        np.array([True, False]),
        np.arange(5, dtype=np.int64) - 2,
    ],
)
def test_array_round_trip(arr: np.ndarray) -> None:
    back = serde.array_from_proto(serde.array_to_proto(arr))
    assert back.dtype == arr.dtype.newbyteorder("<") or back.dtype == arr.dtype
    np.testing.assert_array_equal(back, arr)


def test_array_refusals() -> None:
    with pytest.raises(serde.WireError, match="dtype"):
        serde.array_from_proto(common_pb2.Array(dtype="|O", shape=[1], data=b"x" * 8))
    with pytest.raises(serde.WireError, match="needs 16 bytes"):
        serde.array_from_proto(common_pb2.Array(dtype="<f8", shape=[2], data=b"x" * 8))
    with pytest.raises(serde.WireError, match="exceeds"):
        serde.array_from_proto(common_pb2.Array(dtype="<f8", shape=[2**40, 2**40], data=b""))
    with pytest.raises(serde.WireError, match="dimensions"):
        serde.array_from_proto(common_pb2.Array(dtype="<f8", shape=[1] * 9, data=b"x" * 8))
    with pytest.raises(serde.WireError):
        serde.array_to_proto(np.array(["a"]))


def test_payload_round_trip_and_refusal() -> None:
    p = np.array([1, 2**63, 5], dtype=np.uint64)
    np.testing.assert_array_equal(serde.payload_from_bytes(serde.payload_to_bytes(p)), p)
    with pytest.raises(serde.WireError, match="whole number"):
        serde.payload_from_bytes(b"123")
    with pytest.raises(serde.WireError):
        serde.payload_to_bytes(np.zeros((2, 2), dtype=np.uint64))
    with pytest.raises(serde.WireError):
        serde.payload_to_bytes(np.zeros(2, dtype=np.int64))
    # the wire format is little-endian words packed in order, whatever the array's strides
    words = np.arange(8, dtype=np.uint64) * np.uint64(0x0102030405060708)
    strided = words[::3]
    assert serde.payload_to_bytes(strided) == b"".join(int(w).to_bytes(8, "little") for w in strided)
    back = serde.payload_from_bytes(serde.payload_to_bytes(strided))
    assert back.dtype == np.uint64 and back.tolist() == strided.tolist()


def test_spec_round_trip() -> None:
    for s in (
        spec(),
        spec(topology="mesh", relay_address="", reveal_mode="sum", t=0),
        spec(sign_precompute="pooled"),
        spec(sign_precompute="blocks4"),
    ):
        assert serde.spec_from_proto(serde.spec_to_proto(s)) == s
    assert serde.spec_to_proto(spec()).sign_precompute == ""  # inline is the wire default


def test_blocks4_spec_refuses_a_lazy_coin() -> None:
    """issue 16: the lazy coin is made in the inline precompute only; blocks4 with a coin is refused."""
    from proto.spec import SpecError

    with pytest.raises(SpecError, match=r"lazy .* sign_precompute 'inline', got 'sign' / 'blocks4'"):
        spec(sign_precompute="blocks4", model_params={"sigma": 2.0, "column": "x", "lazy": 0.5})


def test_spec_refusals() -> None:
    msg = serde.spec_to_proto(spec())
    msg.model_params_json = "[1]"
    with pytest.raises(serde.WireError, match="JSON object"):
        serde.spec_from_proto(msg)
    msg = serde.spec_to_proto(spec())
    msg.parties[1].id = 5
    with pytest.raises(serde.WireError, match=r"1\.\.m"):
        serde.spec_from_proto(msg)
    msg = serde.spec_to_proto(spec())
    msg.threshold = 2
    with pytest.raises(serde.WireError, match="threshold"):
        serde.spec_from_proto(msg)
    msg = serde.spec_to_proto(spec())
    msg.fmt.kappa = 3
    with pytest.raises(serde.WireError, match="kappa"):
        serde.spec_from_proto(msg)
    msg = serde.spec_to_proto(spec())
    msg.sign_precompute = "eager"
    with pytest.raises(serde.WireError, match="sign_precompute 'eager'"):
        serde.spec_from_proto(msg)
    with pytest.raises(SpecError, match="session_id"):
        spec(session_id=b"short")


def test_fmt_round_trip() -> None:
    f = FixedPoint(frac_bits=16, term_int_bits=12)
    assert serde.fmt_from_proto(serde.fmt_to_proto(f)) == f


def test_the_format_check_is_the_partys_own_limit() -> None:
    ok = serde.fmt_to_proto(FixedPoint(max_parties=15))
    assert serde.fmt_from_proto(ok) == FixedPoint(max_parties=15)
    for field, value in (("max_parties", 65), ("max_terms", 66), ("frac_bits", 127), ("kappa", 2**32 - 1)):
        msg = serde.fmt_to_proto(FixedPoint())
        setattr(msg, field, value)
        with pytest.raises(serde.WireError, match=f"fmt.{field} = {value} exceeds this party's limit"):
            serde.fmt_from_proto(msg)
    with pytest.raises(ValueError, match="max_parties = 4294967294 exceeds 128"):
        FixedPoint(frac_bits=1, term_int_bits=1, kappa=40, max_parties=2**32 - 2, max_terms=2**32 - 1)


def test_frame_to_wire_is_the_serialized_peer_frame() -> None:
    """The mesh's pre-serialized frames (payload copied once) are byte for byte what protobuf serializes:
    payloads on both sides of the small-message threshold (2,047 and 2,048 words), with lengths of one to
    four varint bytes (up to 262,144 words, 2 MiB), a strided payload, large header numbers, every frame kind;
    and they parse back to the frame."""
    words = np.arange(1 << 19, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    sizes = (1, 15, 16, 2047, 2048, 20_000, 1 << 18)
    frames = [Frame(3, 2, 1, 2, Kind.DATA, words[:n].copy()) for n in sizes]
    frames += [
        Frame(2**40, 7, 64, 63, Kind.DATA, words[: 1 << 16 : 2]),  # strided: packed in C order like tobytes
        Frame(0, 1, 2, 1, Kind.EMPTY),
        Frame(9, 4, 3, 1, Kind.DONE),
        Frame(1, 1, 1, 2, Kind.DATA, np.zeros(0, dtype=np.uint64)),
    ]
    for f in frames:
        wire = serde.frame_to_wire(b"s" * 16, f)
        assert wire == serde.frame_to_proto(b"s" * 16, f).SerializeToString()
        assert serde.wire_message(wire) is wire
        back = serde.frame_from_proto(peer_pb2.PeerFrame.FromString(wire))
        head = (back.step, back.round, back.src, back.dst, back.kind)
        assert head == (f.step, f.round, f.src, f.dst, f.kind)
        if f.payload is not None and f.payload.size:
            np.testing.assert_array_equal(back.payload, f.payload)
    hello = serde.frame_header_to_proto(b"s" * 16, 0, 0, 1, 2, int(Kind.HELLO))
    assert serde.wire_message(hello) == hello.SerializeToString()
    for bad in (np.zeros(3, dtype=np.int64), np.zeros(4096, dtype=np.int64), np.zeros((2, 4096), np.uint64)):
        with pytest.raises(serde.WireError, match="1-D uint64"):
            serde.frame_to_wire(b"s" * 16, Frame(1, 1, 1, 2, Kind.DATA, bad))


def test_frame_round_trip() -> None:
    for f in (
        Frame(3, 2, 1, 2, Kind.DATA, np.arange(6, dtype=np.uint64)),
        Frame(0, 1, 2, 1, Kind.EMPTY),
        Frame(9, 4, 3, 1, Kind.DONE),
    ):
        back = serde.frame_from_proto(serde.frame_to_proto(b"s" * 16, f))
        assert (back.step, back.round, back.src, back.dst, back.kind) == (
            f.step,
            f.round,
            f.src,
            f.dst,
            f.kind,
        )
        if f.payload is not None:
            np.testing.assert_array_equal(back.payload, f.payload)
    bad = serde.frame_header_to_proto(b"s" * 16, 1, 1, 1, 2, int(Kind.EMPTY), b"12345678")
    with pytest.raises(serde.WireError, match="must not carry"):
        serde.frame_from_proto(bad)
    bad = serde.frame_header_to_proto(b"s" * 16, 1, 1, 1, 2, 77)
    with pytest.raises(serde.WireError, match="kind"):
        serde.frame_from_proto(bad)


def test_receiver_messages_round_trip() -> None:
    msgs = [(1, np.arange(4, dtype=np.uint64)), (7, np.array([9], dtype=np.uint64))]
    back = serde.receiver_messages_from_proto(serde.receiver_messages_to_proto(msgs))
    assert [r for r, _ in back] == [1, 7]
    for (_, a), (_, b) in zip(back, msgs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_inputs_round_trip() -> None:
    inputs = {"theta": np.linspace(0, 1, 5), "public": np.zeros(5)}
    back = serde.inputs_from_proto(serde.inputs_to_proto(inputs))
    assert set(back) == set(inputs)
    np.testing.assert_array_equal(back["theta"], inputs["theta"])


def test_open_request_round_trip() -> None:
    for s in (spec(), spec(run_id="run-7"), spec(run_id="run-7", first_run_step=41)):
        assert serde.spec_from_open_request(serde.open_request_to_proto(s)) == s
    req = serde.open_request_to_proto(spec(run_id="run-7"))
    req.first_run_step = 0
    with pytest.raises(serde.WireError, match="first_run_step >= 1"):
        serde.spec_from_open_request(req)
    req = serde.open_request_to_proto(spec())
    req.first_run_step = 5  # a first run step without a run
    with pytest.raises(serde.WireError, match="needs a run_id"):
        serde.spec_from_open_request(req)


def test_run_ref_round_trip() -> None:
    for party, ref in (
        (2, RunStepRef("run-7", 3, b"d" * 32, b"s" * 16)),
        (1, RunStepRef("run-7", 0)),  # holds no run step of the run
    ):
        assert serde.run_ref_from_proto(serde.run_ref_to_proto(party, ref)) == (party, ref)
    with pytest.raises(serde.WireError, match="malformed digest"):
        serde.run_ref_from_proto(serde.run_ref_to_proto(1, RunStepRef("run-7", 3, b"d" * 31, b"s" * 16)))
    with pytest.raises(serde.WireError, match="holds no run step"):
        serde.run_ref_from_proto(serde.run_ref_to_proto(1, RunStepRef("run-7", 0, b"d" * 32)))


def test_run_charge_round_trip() -> None:
    """Run charges travel as JSON (PrivacyReport.run_charges_json) and sit in the ledger file as such."""
    for c in (
        RunCharge("run-7", "ab" * 8, 1, 4, 400),
        RunCharge("run-7", "ab" * 8, 5, 5, 100, "c" * 64, "e" * 32),
        RunCharge("run-7", "ab" * 8, 0, 0, 0, "c" * 64, "e" * 32),  # the whole-run charge (ABCDP)
    ):
        assert RunCharge.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert "digest" not in RunCharge("r", "aa", 1, 1, 1).to_dict()  # as older ledgers wrote it
    with pytest.raises(ValueError, match="empty step range"):
        RunCharge.from_dict({"run_id": "r", "session": "aa", "from_step": 3, "to_step": 2, "decisions": 1})
    with pytest.raises(ValueError, match="exactly run_id"):
        RunCharge.from_dict({"run_id": "r", "session": "aa", "from_step": 1, "to_step": 1})


def test_params_json_round_trip() -> None:
    params = {"sigma": 2.5, "column": "x", "nested": {"p": [1, 2, {"q": None}]}, "flag": True}
    assert serde.params_from_json(json.dumps(params)) == params
    assert serde.params_from_json("") == {}


@pytest.mark.parametrize("name", ["party-1", "coordinator", "a" * 63, "a" * 64, "-x", "x\n", "a b", "", "é"])
def test_one_identity_rule(name: str) -> None:
    """The party config, the session spec, the experiment file and the certificate tools all apply
    proto.spec.identity_problem (once, issue 13)."""
    ok = identity_problem(name) is None
    assert ok == (name in ("party-1", "coordinator", "a" * 63))
    try:
        parties = (PartyEntry(1, name), PartyEntry(2, "party-2"), PartyEntry(3, "party-3"))
        spec(parties=parties, coordinator_identity="the-coordinator")
    except SpecError as exc:
        assert not ok and "certificate name" in str(exc)
    else:
        assert ok
    try:
        check_identity(name)
    except ValueError:
        assert not ok
    else:
        assert ok


# ---- privacy calls (proto.serde_privacy) -------------------------------------------------------------------

GDP_BUDGET = BudgetState(True, '{"kind": "gdp", "mu_max": 1.0}', "mu", 1.0, 0.25)


def test_budget_round_trip() -> None:
    for b in (BudgetState(), GDP_BUDGET):
        assert serde_privacy.budget_from_proto(serde_privacy.budget_to_proto(b)) == b
    assert serde_privacy.budget_to_proto(BudgetState()).SerializeToString() == b""  # only configured=False


def test_plan_request_round_trip_and_refusals() -> None:
    call = serde_privacy.PlanCall(spec(), 7, 30)
    assert serde_privacy.plan_request_from_proto(serde_privacy.plan_request_to_proto(call)) == call
    for bad in (serde_privacy.PlanCall(spec(), 0, 30), serde_privacy.PlanCall(spec(), 7, 0)):
        with pytest.raises(serde.WireError, match="batches >= 1 and batch_size >= 1"):
            serde_privacy.plan_request_from_proto(serde_privacy.plan_request_to_proto(bad))
    no_spec = serde_privacy.plan_request_to_proto(call)
    no_spec.ClearField("spec")
    with pytest.raises(serde.WireError, match="needs a spec"):
        serde_privacy.plan_request_from_proto(no_spec)
    bad_spec = serde_privacy.plan_request_to_proto(call)
    bad_spec.spec.topology = 9
    with pytest.raises(serde.WireError, match="unknown topology"):
        serde_privacy.plan_request_from_proto(bad_spec)
    assert serde_privacy.report_request_to_proto().SerializeToString() == b""


def test_plan_answer_round_trip() -> None:
    for a in (
        PlanAnswer(2, "party-2", BudgetState(), message="no privacy budget configured"),
        PlanAnswer(3, "party-3", GDP_BUDGET, 0.75, True, "would exceed", '[{"kind": "gdp"}]', 2, 10, 100),
    ):
        assert serde_privacy.plan_answer_from_proto(serde_privacy.plan_answer_to_proto(a)) == a
    assert serde_privacy.plan_answer_to_proto(PlanAnswer(1, "p", BudgetState())).HasField("budget")


def test_ledger_report_round_trip() -> None:
    charges = json.dumps([RunCharge("run-7", "ab" * 8, 1, 3, 90).to_dict()])
    for r in (
        LedgerReport(1, "party-1", BudgetState(), "[]", 0),
        LedgerReport(4, "registry-4", GDP_BUDGET, '[{"kind": "gdp"}]', 90, charges),
        LedgerReport(5, "registry-5", GDP_BUDGET, "[]", 0, "", "all", "replace-one"),
        LedgerReport(6, "registry-6", GDP_BUDGET, "[]", 0, "", "0", "add-remove"),
    ):
        assert serde_privacy.report_from_proto(serde_privacy.report_to_proto(r)) == r
    # an answer from a party that predates colluding / neighbours reads as "not carried" (empty), not an error
    old = serde_privacy.report_from_proto(serde_privacy.report_to_proto(LedgerReport(7, "r-7", GDP_BUDGET)))
    assert (old.colluding, old.neighbours) == ("", "")


# ---- session calls and relay bundles (proto.serde_session) -------------------------------------------------

BUNDLE = KeyBundle(2, b"k" * 32, b"sig", b"-----BEGIN CERTIFICATE-----\n")
REF = RunStepRef("run-7", 3, b"d" * 32, b"s" * 16)


def test_key_bundle_and_open_answer_round_trip() -> None:
    for b in (BUNDLE, KeyBundle(1, b"k" * 32)):  # unsigned under --insecure
        assert serde_session.key_bundle_from_proto(serde_session.key_bundle_to_proto(b)) == b
    plain = serde_session.OpenAnswer(BUNDLE)
    run = serde_session.OpenAnswer(BUNDLE, (2, REF))
    assert serde_session.open_response_from_proto(serde_session.open_response_to_proto(plain), False) == plain
    assert serde_session.open_response_from_proto(serde_session.open_response_to_proto(run), True) == run
    assert not serde_session.open_response_to_proto(plain).HasField("resume")
    bad = serde_session.open_response_to_proto(run)
    bad.resume.digest = b"d" * 31
    with pytest.raises(serde.WireError, match="malformed digest"):
        serde_session.open_response_from_proto(bad, True)
    assert serde_session.open_response_from_proto(bad, False).resume is None  # not asked: not read


def test_connect_round_trip() -> None:
    req = serde_session.connect_request_to_proto(b"s" * 16, [BUNDLE, KeyBundle(1, b"j" * 32)], [(2, REF)])
    assert bytes(req.session_id) == b"s" * 16
    assert serde_session.connect_bundles_from_proto(req) == [BUNDLE, KeyBundle(1, b"j" * 32)]
    assert [serde.run_ref_from_proto(r) for r in req.resume] == [(2, REF)]
    assert not serde_session.connect_request_to_proto(b"s" * 16, [BUNDLE]).resume
    resp = serde_session.connect_response_to_proto(b"s" * 16, 3)
    assert serde_session.connect_response_from_proto(resp) == (b"s" * 16, 3)


def test_evaluate_round_trip() -> None:
    msgs = ((1, np.arange(4, dtype=np.uint64)), (7, np.array([2**64 - 1], dtype=np.uint64)))
    for a in (
        EvaluateAnswer(b"s" * 16, 3, msgs, 7, 2, 0),
        EvaluateAnswer(b"s" * 16, 1, msgs[:1], 7, 0, 41, True),  # a replayed run step
        EvaluateAnswer(b"s" * 16, 2),
    ):
        back = serde_session.evaluate_response_from_proto(serde_session.evaluate_response_to_proto(a))
        assert dataclasses.replace(back, to_receiver=()) == dataclasses.replace(a, to_receiver=())
        assert [r for r, _ in back.to_receiver] == [r for r, _ in a.to_receiver]
        for (_, x), (_, y) in zip(back.to_receiver, a.to_receiver, strict=True):
            np.testing.assert_array_equal(x, y)
    bad = serde_session.evaluate_response_to_proto(EvaluateAnswer(b"s" * 16, 3, msgs, 7))
    bad.to_receiver[0].payload.CopyFrom(serde.array_to_proto(np.zeros(2)))
    with pytest.raises(serde.WireError, match="receiver payload must be 1-D uint64"):
        serde_session.evaluate_response_from_proto(bad)
    req = serde_session.evaluate_request_to_proto(b"s" * 16, 4, 30, {"theta": np.linspace(0, 1, 3)})
    assert (bytes(req.session_id), req.step, req.batch) == (b"s" * 16, 4, 30)
    np.testing.assert_array_equal(serde.inputs_from_proto(req.inputs)["theta"], np.linspace(0, 1, 3))


def test_probe_close_and_status_round_trip() -> None:
    call = serde_session.ProbeCall(b"s" * 16, 5, 3, 64)
    assert serde_session.probe_request_from_proto(serde_session.probe_request_to_proto(call)) == call
    resp = serde_session.probe_response_to_proto(b"s" * 16, 5, [1.5, 2.25, 3.0])
    assert serde_session.probe_response_from_proto(resp) == [1.5, 2.25, 3.0]
    close = serde_session.close_request_to_proto(b"s" * 16, "done")
    assert serde_session.close_request_from_proto(close) == (b"s" * 16, "done")
    closed = serde_session.close_response_to_proto(b"s" * 16, 9)
    assert serde_session.close_response_from_proto(closed) == (b"s" * 16, 9)
    sessions = (SessionState(b"s" * 16, 9, "ready", "sign", "gaussian-mean"),)
    for st in (PartyStatus(1, "party-1"), PartyStatus(3, "party-3", sessions, 90, 1000, 2)):
        assert serde_session.status_from_proto(serde_session.status_to_proto(st)) == st


def test_relay_bundle_round_trip() -> None:
    frames = [
        serde.frame_header_to_proto(b"s" * 16, 0, 0, 0, 2, Kind.HELLO),
        serde.frame_to_proto(b"s" * 16, Frame(1, 2, 1, 3, Kind.DATA, np.arange(3, dtype=np.uint64))),
    ]
    assert serde_session.bundle_from_proto(serde_session.bundle_to_proto(frames)) == frames
