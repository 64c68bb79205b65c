"""Mutual TLS: refusals for a client without a certificate, with another CA's certificate, or claiming
another identity; ``confar certs init`` output."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from coordinator import cli as confar_cli
from coordinator.api import SessionOptions
from coordinator.certs import init_consortium
from proto import party_pb2, party_pb2_grpc, peer_pb2, peer_pb2_grpc
from proto.tls import TlsMaterial, certificate_identity, secure_channel
from tests.parties.helpers import coordinator_for, inproc_consortium, tls_for


def test_certs_init_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "c"
    assert confar_cli.main(["certs", "init", "--out", str(out), "--parties", "3"]) == 0
    for name in ("ca", "party-1", "party-2", "party-3", "coordinator"):
        assert (out / f"{name}.pem").exists() and (out / f"{name}.key").stat().st_mode & 0o077 == 0
    assert certificate_identity((out / "party-2.pem").read_bytes()) == "party-2"
    assert (
        confar_cli.main(["certs", "init", "--out", str(out), "--parties", "3"]) == 2
    )  # refuses to overwrite
    assert "exists" in capsys.readouterr().err
    TlsMaterial.load(out / "party-1.pem", out / "party-1.key", out / "ca.pem", "party-1")


async def _status(address: str, creds: grpc.ChannelCredentials | None, target: str) -> grpc.StatusCode:
    opts = [("grpc.ssl_target_name_override", target)]
    ch = (
        grpc.aio.secure_channel(address, creds, options=opts) if creds else grpc.aio.insecure_channel(address)
    )
    try:
        await party_pb2_grpc.PartyStub(ch).Status(party_pb2.StatusRequest(), timeout=3)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await ch.close()


def test_mtls_refusals(tmp_path: Path) -> None:
    other = tmp_path / "other"
    init_consortium(other, 3)

    async def main() -> None:
        async with inproc_consortium(tmp_path, 3) as (_, eps, certs):
            assert certs is not None
            addr = eps[0].address
            ca = (certs / "ca.pem").read_bytes()
            good = tls_for(certs, "coordinator")
            ok = grpc.ssl_channel_credentials(ca, good.key_pem, good.cert_pem)
            assert await _status(addr, ok, "party-1") == grpc.StatusCode.OK
            # no client certificate
            assert (
                await _status(addr, grpc.ssl_channel_credentials(ca), "party-1")
                == grpc.StatusCode.UNAVAILABLE
            )
            # plaintext client
            assert await _status(addr, None, "party-1") == grpc.StatusCode.UNAVAILABLE
            # a certificate from another CA (same name "coordinator")
            o = tls_for(other, "coordinator")
            foreign = grpc.ssl_channel_credentials(ca, o.key_pem, o.cert_pem)
            assert await _status(addr, foreign, "party-1") == grpc.StatusCode.UNAVAILABLE
            # a valid party certificate claiming the coordinator's role
            p2 = tls_for(certs, "party-2")
            as_party = grpc.ssl_channel_credentials(ca, p2.key_pem, p2.cert_pem)
            assert await _status(addr, as_party, "party-1") == grpc.StatusCode.PERMISSION_DENIED
            # the server must be who we pin: party-1's address is not party-2
            assert await _status(addr, ok, "party-2") == grpc.StatusCode.UNAVAILABLE

            # a peer claiming another party's id on the share-exchange stream
            async with coordinator_for(eps, certs) as coord:
                sess = await coord.open_session(SessionOptions(
                    reveal_mode="sum", model="gaussian-mean", model_params={"noise": "none"}
                ))
                for src in (1, 2):  # party-2's certificate claiming party 1, and party 2 redialling
                    ch = secure_channel(eps[2].address, p2, "party-3")
                    call = peer_pb2_grpc.PeerStub(ch).Exchange()
                    await call.write(
                        peer_pb2.PeerFrame(session_id=sess.session_id, kind=peer_pb2.HELLO, src=src, dst=3)
                    )
                    with pytest.raises(grpc.aio.AioRpcError) as ei:
                        await call.read()
                    want = grpc.StatusCode.PERMISSION_DENIED if src == 1 else grpc.StatusCode.ALREADY_EXISTS
                    assert ei.value.code() == want, ei.value.details()
                    await ch.close()
                # the session still works
                d = await sess.evaluate({"theta": [0.0], "theta_star": [0.5], "public": [0.0]}, 1)
                assert d.revealed is not None
                await sess.close()

    asyncio.run(main())
