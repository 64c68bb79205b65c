"""Issue 12 (hardening the registry daemon) against real confar-party processes on loopback with mTLS: no
request freezes a daemon, and SIGTERM stops it within its stated deadline with a request in flight.

The only timing in these tests is a generous deadline for hang checks (a daemon that does not answer or
stop within it is frozen); speed is never asserted."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from coordinator.api import Coordinator, SessionOptions
from parties.daemon import EXIT_STOP_DEADLINE, STOP_DEADLINE_S
from proto import common_pb2, health_pb2, health_pb2_grpc, party_pb2, party_pb2_grpc, peer_pb2_grpc, serde
from proto.spec import PartyEntry, SessionSpec
from proto.tls import TlsMaterial, secure_channel
from simulations.launcher import LocalConsortium, party_config_text, write_csv
from tests.parties.helpers import party_data, tls_for

pytestmark = pytest.mark.slow

HANG_S = 10.0  # a daemon that does not answer within this is frozen
STOP_WITHIN_S = STOP_DEADLINE_S + 5.0  # the stated SIGTERM deadline, plus process exit and scheduling slack


@pytest.fixture(scope="module")
def consortium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalConsortium]:
    root = tmp_path_factory.mktemp("hardening")
    with LocalConsortium.start(3, party_data(3, 20, seed=3), workdir=root, round_timeout_s=60.0) as lc:
        yield lc


def _spec(eps: list[PartyEntry], **kw: Any) -> SessionSpec:
    base: dict[str, Any] = {
        "session_id": np.random.default_rng().bytes(16),
        "parties": tuple(PartyEntry(e.id, e.identity, e.address) for e in eps),
        "t": 1,
        "reveal_mode": "sum",
        "model": "gaussian-mean",
        "model_params": {"noise": "none"},
    }
    return SessionSpec(**{**base, **kw})


def _big_fmt(max_parties: int) -> common_pb2.FixedPointFormat:
    """A format whose only fault is its size: small bit counts, so every cheaper check passes."""
    return common_pb2.FixedPointFormat(
        frac_bits=1,
        term_int_bits=1,
        max_terms=max_parties + 1,
        kappa=40,
        max_parties=max_parties,
        blind_frac_bits=71,
        blind_e_bits=60,
    )


async def _call(tls: TlsMaterial, ep: PartyEntry, method: str, req: Any) -> tuple[grpc.StatusCode, str]:
    async with secure_channel(ep.address, tls, ep.identity) as ch:
        try:
            await getattr(party_pb2_grpc.PartyStub(ch), method)(req, timeout=HANG_S)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def _health(tls: TlsMaterial, ep: PartyEntry) -> int:
    async with secure_channel(ep.address, tls, ep.identity) as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=HANG_S)
        return int(resp.status)


@pytest.mark.parametrize("max_parties", [100_000, 2**32 - 2])
def test_huge_format_is_refused_at_once_and_the_daemon_keeps_serving(
    consortium: LocalConsortium, max_parties: int
) -> None:
    tls = consortium.coordinator_tls()
    assert tls is not None
    eps = consortium.endpoints()
    spec_msg = serde.spec_to_proto(_spec(eps))
    spec_msg.fmt.CopyFrom(_big_fmt(max_parties))

    async def main() -> None:
        open_req = party_pb2.OpenSessionRequest(spec=spec_msg)
        plan_req = party_pb2.PlanPrivacyRequest(spec=spec_msg, batches=10, batch_size=10)
        for method, req in (("OpenSession", open_req), ("PlanPrivacy", plan_req)):
            code, details = await _call(tls, eps[0], method, req)
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, code, details)
            assert "fmt.max_parties" in details and str(max_parties) in details
        assert await _health(tls, eps[0]) == health_pb2.HealthCheckResponse.SERVING

    asyncio.run(main())


def _wait_exit(proc: subprocess.Popen[bytes], within: float) -> int | None:
    try:
        return proc.wait(within)
    except subprocess.TimeoutExpired:
        return None


def test_sigterm_stops_a_daemon_with_a_request_in_flight(tmp_path: Path) -> None:
    """Party 1 is asked for step 1 of a sign session alone: it charges, sends its first-round shares and
    waits (round timeout 60 s) for peers that never evaluate. SIGTERM then ends it, cleanly, within the stated
    deadline."""
    with LocalConsortium.start(3, party_data(3, 20, seed=5), workdir=tmp_path, round_timeout_s=60.0) as lc:
        tls = lc.coordinator_tls()
        assert tls is not None
        eps = lc.endpoints()

        async def main() -> None:
            async with Coordinator(eps, tls, rpc_timeout_s=30.0) as coord:
                sess = await coord.open_session(SessionOptions(
                    reveal_mode="sign", model="gaussian-mean", model_params={"noise": "none"}
                ))
                inputs = serde.inputs_to_proto(
                    {"theta": np.zeros(4), "theta_star": np.ones(4), "public": np.zeros(4)}
                )
                req = party_pb2.EvaluateRequest(session_id=sess.session_id, step=1, batch=4, inputs=inputs)
                async with secure_channel(eps[0].address, tls, eps[0].identity) as ch:
                    call = party_pb2_grpc.PartyStub(ch).Evaluate(req, timeout=120.0)
                    await asyncio.sleep(1.0)  # the step is under way at party 1, waiting for its peers
                    assert not call.done()
                    lc.procs[1].proc.send_signal(signal.SIGTERM)
                    code = await asyncio.get_running_loop().run_in_executor(
                        None, _wait_exit, lc.procs[1].proc, STOP_WITHIN_S
                    )
                    assert code == 0, f"party 1 did not stop within {STOP_WITHIN_S:g} s of SIGTERM ({code})"
                    with pytest.raises(grpc.aio.AioRpcError):
                        await call

        asyncio.run(main())
        lines = (tmp_path / "party-1" / "state" / "audit.log").read_text().splitlines()
        audit = [json.loads(x) for x in lines]
        assert audit[-1]["what"] == "Stop" and audit[-1]["outcome"] == "ok"


HOG = """
import asyncio, sys
from parties.config import load_config
from parties.daemon import PartyDaemon

daemon = PartyDaemon(load_config(sys.argv[1], insecure=True), insecure=True)


def hog() -> None:  # a handler stuck in Python code: the event loop never gets control back
    print("hogging", flush=True)
    while True:
        pass


async def main() -> None:
    asyncio.get_running_loop().call_later(0.2, hog)
    await daemon.serve_forever()


asyncio.run(main())
"""


def test_sigterm_ends_a_daemon_whose_event_loop_is_stuck(tmp_path: Path) -> None:
    """The stop watchdog: a daemon whose loop never returns still ends within the deadline (exit code 3,
    an audit line saying so)."""
    pdir = tmp_path / "party-1"
    pdir.mkdir()
    write_csv(pdir / "data.csv", {"x": np.zeros(3)})
    cfg = pdir / "party.toml"
    cfg.write_text(party_config_text(1, 3, tmp_path, None, pdir / "data.csv"))
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", HOG, str(cfg)], cwd=root, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"hogging"
        proc.send_signal(signal.SIGTERM)
        code = _wait_exit(proc, STOP_WITHIN_S)
        assert code == EXIT_STOP_DEADLINE, f"not stopped within {STOP_WITHIN_S:g} s of SIGTERM ({code})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    last = json.loads((pdir / "state" / "audit.log").read_text().splitlines()[-1])
    assert (last["what"], last["outcome"]) == ("Stop", "DEADLINE")


# ---- item 3: the caller first, bounded audit lines, no long echoes --------------------------------------

MIB = 1 << 20


def _audit_lines(lc: LocalConsortium, pid: int) -> list[str]:
    return (lc.workdir / f"party-{pid}" / "state" / "audit.log").read_text().splitlines()


def test_a_wrong_certificate_cannot_fill_the_audit_log(consortium: LocalConsortium) -> None:
    assert consortium.certs is not None
    other = tls_for(consortium.certs, "party-2")  # a consortium member, but not the coordinator
    coord = consortium.coordinator_tls()
    assert coord is not None
    ep = consortium.endpoints()[0]
    big = b"\x07" * MIB
    before = len(_audit_lines(consortium, 1))

    async def main() -> None:
        requests: list[tuple[str, Any]] = [
            ("OpenSession", party_pb2.OpenSessionRequest(spec=common_pb2.SessionSpec(session_id=big))),
            ("Evaluate", party_pb2.EvaluateRequest(session_id=big, step=1, batch=1)),
            ("CloseSession", party_pb2.CloseSessionRequest(session_id=big, reason="x" * MIB)),
            ("PlanPrivacy", party_pb2.PlanPrivacyRequest(spec=common_pb2.SessionSpec(session_id=big))),
        ]
        for _ in range(10):
            for method, req in requests:
                code, details = await _call(other, ep, method, req)
                assert code == grpc.StatusCode.PERMISSION_DENIED, (method, code)
                assert "not this party's coordinator" in details and len(details) < 500
        async with secure_channel(ep.address, other, ep.identity) as ch:  # undecodable, from the wrong caller
            call = ch.unary_unary("/confar.v1.Party/Evaluate")
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await call(b"\xff" * MIB, timeout=HANG_S)
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
        async with secure_channel(ep.address, coord, ep.identity) as ch:  # a peer stream from a non-member
            stream = peer_pb2_grpc.PeerStub(ch).Exchange()  # refused before its first frame is read
            assert await stream.code() == grpc.StatusCode.PERMISSION_DENIED

    asyncio.run(main())
    new = _audit_lines(consortium, 1)[before:]
    assert len(new) == 42  # every refusal is recorded ...
    assert max(len(line) for line in new) < 2048  # ... in a bounded line (a 1 MiB id was 2 MiB of hex)
    refused = [json.loads(line) for line in new]
    assert {r["outcome"] for r in refused} == {"PERMISSION_DENIED"}
    assert {r["who"] for r in refused} == {"party-2", "coordinator"}


def test_long_inputs_are_not_echoed_back(consortium: LocalConsortium) -> None:
    tls = consortium.coordinator_tls()
    assert tls is not None
    eps = consortium.endpoints()
    long = "q" * 100_000

    async def main() -> None:
        for name, value, want in (
            ("model", long, grpc.StatusCode.INVALID_ARGUMENT),
            ("reveal_mode", long, grpc.StatusCode.INVALID_ARGUMENT),
            ("coordinator_identity", long, grpc.StatusCode.INVALID_ARGUMENT),
        ):
            spec_msg = serde.spec_to_proto(_spec(eps))
            setattr(spec_msg, name, value)
            req = party_pb2.OpenSessionRequest(spec=spec_msg)
            code, details = await _call(tls, eps[0], "OpenSession", req)
            assert code == want, (name, code, details[:200])  # not RESOURCE_EXHAUSTED from an oversized echo
            assert "(100000 chars)" in details and len(details) < 1000, (name, details[:200])
        async with secure_channel(eps[0].address, tls, eps[0].identity) as ch:
            with pytest.raises(grpc.aio.AioRpcError) as ei:
                await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=long))
            assert ei.value.code() == grpc.StatusCode.NOT_FOUND and len(ei.value.details() or "") < 1000

    asyncio.run(main())


# ---- items 4 and 5: bad input at session open is INVALID_ARGUMENT naming the field ----------------------


def _params(json_text: str) -> dict[str, Any]:
    return {"model_params_json": json_text}


NESTED = '{"sigma": ' + "[" * 30_000 + "]" * 30_000 + "}"  # json.loads: RecursionError
DEEP = '{"sigma": 1.0, "a": ' + "[" * 20 + "]" * 20 + "}"  # parsed, but past MAX_PARAMS_DEPTH


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_params(NESTED), "model_params_json nests deeper"),
        (_params(DEEP), "model_params.a" + "[0]" * 15 + " nests deeper"),
        (_params('{"sigma": 1' + "0" * 5000 + "}"), "model_params_json is not valid JSON"),  # digit limit
        (_params('{"sigma": 1' + "0" * 100 + "}"), "model_params.sigma"),
        (_params('{"sigma": Infinity}'), "model_params.sigma = inf"),
        (_params('{"sigma": NaN}'), "model_params.sigma = nan"),
        (_params('{"sigma": 1e999}'), "model_params.sigma = inf"),
        (_params('{"sigma": 1e308}'), "model_params.sigma = 1e+308"),
        (_params('{"clip": [-1e300, 1.0], "sigma": 1.0}'), "model_params.clip[0]"),
        (_params('{"sigma": 1.0, "x": "' + "y" * 70_000 + '"}'), "model_params_json has 70023 characters"),
        ({"first_run_step": 2**64 - 1}, "first_run_step"),
        ({"first_run_step": 2**53 + 1}, "first_run_step"),
        ({"address": "a" * 100_000}, "party 2 address"),
        ({"address": "::::"}, "party 2 address"),
        ({"address": "[::::]:443"}, "party 2 address"),
        ({"relay_address": "\x00" * 16}, "relay_address"),
        ({"relay_address": "127.0.0.1:99999"}, "relay_address"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, str) else None,
)
def test_bad_session_input_is_invalid_argument_naming_the_field(
    consortium: LocalConsortium, change: dict[str, Any], field: str
) -> None:
    tls = consortium.coordinator_tls()
    assert tls is not None
    eps = consortium.endpoints()
    req = serde.open_request_to_proto(_spec(eps, model_params={"sigma": 1.0}))
    for key, value in change.items():
        if key == "first_run_step":
            req.run_id, req.first_run_step = "hardening-run", value
        elif key == "address":
            req.spec.parties[1].address = value
        elif key == "relay_address":
            req.spec.topology, req.spec.relay_address = common_pb2.RELAY, value
        else:
            setattr(req.spec, key, value)
    before = len(_audit_lines(consortium, 1))

    async def main() -> None:
        code, details = await _call(tls, eps[0], "OpenSession", req)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details[:300])
        assert field in details and len(details) < 1000, details[:300]
        assert await _health(tls, eps[0]) == health_pb2.HealthCheckResponse.SERVING

    asyncio.run(main())
    (line,) = [json.loads(x) for x in _audit_lines(consortium, 1)[before:]]
    assert (line["what"], line["outcome"]) == ("OpenSession", "INVALID_ARGUMENT")
