"""A few thousand malformed, replayed, out-of-order and out-of-session messages at live daemons (in the test's
process); afterwards they still serve a correct session, and every refusal is in the audit log. The
descriptor-driven fuzz (simulations/fuzz.py) against daemon processes is tests/network/test_fuzz.py."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator.api import SessionOptions
from proto import party_pb2, party_pb2_grpc, peer_pb2, peer_pb2_grpc, serde
from proto.records import Kind
from proto.tls import secure_channel
from tests.parties.helpers import coordinator_for, gaussian_terms, inproc_consortium, party_data, tls_for

EXPECTED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ALREADY_EXISTS,
}


def _evaluate_variants(rnd: random.Random, sid: bytes, next_step: int) -> party_pb2.EvaluateRequest:
    good_inputs = serde.inputs_to_proto(
        {"theta": np.zeros(4), "theta_star": np.ones(4), "public": np.zeros(4)}
    )
    kind = rnd.randrange(9)
    req = party_pb2.EvaluateRequest(session_id=sid, step=next_step, batch=4, inputs=good_inputs)
    if kind == 0:
        req.session_id = os.urandom(rnd.choice([0, 3, 16, 40]))  # out of session
    elif kind == 1:
        req.step = rnd.randrange(0, next_step)  # replayed
    elif kind == 2:
        req.step = next_step + rnd.randrange(1, 2**40)  # out of order
    elif kind == 3:
        req.batch = rnd.choice([0, 10**9])  # bad batch
    elif kind == 4:
        req.inputs["theta"].CopyFrom(serde.array_to_proto(np.zeros(3)))  # wrong shape
    elif kind == 5:
        req.inputs["theta"].dtype = "|O"  # forbidden dtype
    elif kind == 6:
        req.inputs["theta"].data = b"\x00" * 7  # truncated
    elif kind == 7:
        del req.inputs["theta_star"]  # missing input
    else:
        req.inputs["theta"].CopyFrom(serde.array_to_proto(np.full(4, np.nan)))  # NaN proposals
    return req


@pytest.mark.slow
def test_fuzzed_messages_are_refused_and_session_survives(tmp_path: Path) -> None:
    m = 3
    data = party_data(m, 20, seed=4)
    rnd = random.Random(12345)
    counts = {"unary": 0, "raw": 0, "peer": 0, "frames": 0}

    async def main() -> None:
        async with (
            inproc_consortium(tmp_path, m, data) as (daemons, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            assert certs is not None
            sess = await coord.open_session(SessionOptions(
                reveal_mode="sum", model="gaussian-mean", model_params={"noise": "none"}
            ))
            th, ts = np.zeros(4), np.ones(4)
            first = await sess.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(4)}, 4)
            ctls = tls_for(certs, "coordinator")
            target = eps[2]
            ch = secure_channel(target.address, ctls, target.identity)
            stub = party_pb2_grpc.PartyStub(ch)

            async def unary(req: party_pb2.EvaluateRequest) -> None:
                try:
                    await stub.Evaluate(req, timeout=5)
                    raise AssertionError("a fuzzed request was accepted")
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() in EXPECTED, (exc.code(), exc.details())
                counts["unary"] += 1

            for _ in range(10):
                await asyncio.gather(
                    *(unary(_evaluate_variants(rnd, sess.session_id, sess.step + 1)) for _ in range(150))
                )

            # raw garbage bytes at every RPC (undecodable or nonsense protobuf)
            methods = [
                "/confar.v1.Party/Evaluate",
                "/confar.v1.Party/OpenSession",
                "/confar.v1.Party/ConnectSession",
                "/confar.v1.Party/CloseSession",
            ]

            async def raw(method: str) -> None:
                call = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
                blob = bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 64)))
                try:
                    await call(blob, timeout=5)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() in EXPECTED, (exc.code(), exc.details())
                counts["raw"] += 1

            for _ in range(5):
                await asyncio.gather(*(raw(rnd.choice(methods)) for _ in range(100)))

            # peer streams from a real party's certificate: bad HELLOs, other sessions, duplicate links
            p1 = tls_for(certs, "party-1")
            pch = secure_channel(target.address, p1, target.identity)

            async def peer() -> None:
                call = peer_pb2_grpc.PeerStub(pch).Exchange()
                k = rnd.randrange(4)
                sid = sess.session_id if k != 0 else os.urandom(16)
                kind = peer_pb2.HELLO if k != 1 else peer_pb2.DATA
                src = 1 if k != 2 else 2
                await call.write(
                    peer_pb2.PeerFrame(session_id=sid, kind=kind, src=src, dst=3, round=1, step=1)
                )
                try:
                    msg = await call.read()
                    raise AssertionError(f"peer stream accepted: {msg}")
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() in EXPECTED, (exc.code(), exc.details())
                counts["peer"] += 1

            for _ in range(4):
                await asyncio.gather(*(peer() for _ in range(100)))

            # malformed / replayed / out-of-order frames on the live session's authenticated link
            d3 = daemons[2]
            live = d3.sessions[sess.session_id]
            before = d3.refused_frames
            for _ in range(1500):
                k = rnd.randrange(8)
                step, rnd_no, src, dst, kind = sess.step + 1, 1, 1, 3, int(Kind.DATA)
                payload = np.zeros(8, dtype=np.uint64).tobytes()
                sid = sess.session_id
                if k == 0:
                    sid = os.urandom(16)
                elif k == 1:
                    step = rnd.randrange(0, sess.step + 1)  # replay of a finished step
                elif k == 2:
                    step = sess.step + 2 + rnd.randrange(100)
                elif k == 3:
                    dst = rnd.choice([0, 1, 2, 4, 99])
                elif k == 4:
                    payload = b"\x01" * rnd.choice([1, 7, 9])
                elif k == 5:
                    kind = rnd.choice([0, int(Kind.HELLO), 9])
                elif k == 6:
                    rnd_no = rnd.choice([0, 10, 10**6])
                else:
                    src = 2  # claims another party on party 1's link
                msg = serde.frame_header_to_proto(sid, step, rnd_no, src, dst, kind, payload)
                await d3.on_frame(live, 1, msg)
                counts["frames"] += 1
            assert d3.refused_frames - before == 1500

            # the daemon still serves the session correctly
            again = await sess.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(4)}, 4)
            exact = sum(gaussian_terms(x, th, ts) for x in data)
            assert again.revealed is not None and first.revealed is not None
            np.testing.assert_allclose(again.revealed, exact, atol=1e-4)
            np.testing.assert_array_equal(again.revealed, first.revealed)
            await sess.close()
            await ch.close()
            await pch.close()
            audit = [json.loads(line) for line in (d3.cfg.state_dir / "audit.log").read_text().splitlines()]
            refused = [a for a in audit if a["outcome"] != "ok"]
            assert len(refused) >= counts["unary"] + counts["peer"] + counts["frames"]
            assert all(a["who"] for a in audit if a["what"] == "Evaluate")

    asyncio.run(main())
    assert sum(counts.values()) >= 3000
