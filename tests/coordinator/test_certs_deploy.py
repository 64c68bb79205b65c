"""The deployment path for certificates: CA, then each host's own key and CSR, then the CA signs.

A certificate made this way must work exactly like one from ``confar certs init`` (a live mTLS call), and
bad requests are refused with a message saying what was wrong."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from coordinator import cli as confar_cli
from coordinator.api import Coordinator, SessionOptions
from coordinator.certs import load_ca, sign_request
from proto.tls import TlsMaterial, certificate_identity
from tests.parties.helpers import inproc_consortium


def _csr(cn: str, sans: list[str] | None = None, key: object = None) -> bytes:
    k = key if key is not None else ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    )
    if sans is not None:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), critical=False)
    return b.sign(k, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)  # type: ignore[arg-type]


def test_request_and_sign_give_a_working_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def main() -> None:
        async with inproc_consortium(tmp_path, 3) as (_, eps, certs):
            assert certs is not None
            host = tmp_path / "coordinator-host"
            ca_dir = tmp_path / "ca-only"
            ca_dir.mkdir()
            for f in ("ca.pem", "ca.key"):  # the consortium's CA, as the signer holds it
                shutil.copy(certs / f, ca_dir / f)
            assert confar_cli.main(["certs", "request", "--identity", "coordinator", "--out", str(host)]) == 0
            key = host / "coordinator.key"
            assert key.stat().st_mode & 0o077 == 0
            assert "BEGIN CERTIFICATE REQUEST" in (host / "coordinator.csr").read_text()
            args = ["certs", "sign", "--ca", str(ca_dir), "--csr", str(host / "coordinator.csr")]
            assert confar_cli.main([*args, "--out", str(host / "coordinator.pem")]) == 0
            assert certificate_identity((host / "coordinator.pem").read_bytes()) == "coordinator"
            # refuses to overwrite the issued certificate without --force
            assert confar_cli.main([*args, "--out", str(host / "coordinator.pem")]) == 2
            assert "exists" in capsys.readouterr().err
            tls = TlsMaterial.load(host / "coordinator.pem", key, certs / "ca.pem", "coordinator")
            async with Coordinator(eps, tls) as coord:
                sess = await coord.open_session(SessionOptions(
                    reveal_mode="sum", model="gaussian-mean", model_params={"noise": "none"}
                ))
                await sess.close()

    asyncio.run(main())


def test_ca_command_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca_dir = tmp_path / "ca"
    assert confar_cli.main(["certs", "ca", "--out", str(ca_dir)]) == 0
    assert (ca_dir / "ca.key").stat().st_mode & 0o077 == 0
    assert confar_cli.main(["certs", "ca", "--out", str(ca_dir)]) == 2  # never replaces a CA silently
    assert "exists" in capsys.readouterr().err
    ca_key, ca_cert = load_ca(ca_dir)

    ident, cert = sign_request(_csr("party-4", ["party-4"]), ca_key, ca_cert)
    assert ident == "party-4" and cert.issuer == ca_cert.subject

    with pytest.raises(ValueError, match="identity 'bad name'"):
        sign_request(_csr("bad name"), ca_key, ca_cert)
    with pytest.raises(ValueError, match="only DNS:party-4"):
        sign_request(_csr("party-4", ["party-4", "coordinator"]), ca_key, ca_cert)
    with pytest.raises(ValueError, match="not an EC key"):
        sign_request(_csr("party-4", key=rsa.generate_private_key(65537, 2048)), ca_key, ca_cert)
    with pytest.raises(ValueError, match="not a PEM certificate signing request"):
        sign_request(b"garbage", ca_key, ca_cert)
    good = _csr("party-4").decode()
    lines = good.splitlines()
    body = lines[1]
    tampered = body[:20] + ("A" if body[20] != "A" else "B") + body[21:]  # flip the CN region's bytes
    bad = "\n".join([lines[0], tampered, *lines[2:]]).encode()
    with pytest.raises(ValueError):
        sign_request(bad, ca_key, ca_cert)
    with pytest.raises(ValueError, match="no CA in"):
        load_ca(tmp_path / "nowhere")
    other = tmp_path / "other"
    assert confar_cli.main(["certs", "ca", "--out", str(other)]) == 0
    shutil.copy(other / "ca.key", ca_dir / "ca.key")
    with pytest.raises(ValueError, match="does not belong"):
        load_ca(ca_dir)
    assert confar_cli.main(["certs", "request", "--identity", "x y", "--out", str(tmp_path / "h")]) == 2
    assert "identity 'x y'" in capsys.readouterr().err
