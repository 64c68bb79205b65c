"""The consortium certificate authority: ``confar certs init --out DIR --parties N``.

Creates, with ``cryptography`` (ECDSA P-256, SHA-256):

* ``ca.pem`` / ``ca.key`` — the consortium CA (self-signed; in a real deployment its key stays offline);
* ``party-<i>.pem`` / ``party-<i>.key`` for i = 1..N — CN and DNS SAN ``party-<i>``;
* ``coordinator.pem`` / ``coordinator.key`` — CN and DNS SAN ``coordinator``.

A party's identity *is* its certificate's CN (also its only SAN): daemons check the CN of every caller and
clients pin the CN they expect of a server (TLS hostname verification against the SAN), so an address is
never trusted on its own. Leaf certificates carry both serverAuth and clientAuth (every daemon is both).
Private keys are written with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

COORDINATOR_IDENTITY = "coordinator"
VALIDITY_DAYS = 365


def party_identity(party: int) -> str:
    return f"party-{party}"


@dataclass(frozen=True)
class Issued:
    identity: str
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)


def _name(cn: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "confar consortium"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )


def make_ca(cn: str = "confar consortium CA") -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_leaf(
    identity: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(identity))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALIDITY_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(identity)]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def write_leaf(
    out: Path, identity: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> Issued:
    key, cert = make_leaf(identity, ca_key, ca_cert)
    cert_path, key_path = out / f"{identity}.pem", out / f"{identity}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return Issued(identity, cert_path, key_path)


def init_consortium(out: Path, parties: int, overwrite: bool = False) -> dict[str, Issued]:
    """Write a CA and certificates for ``party-1..party-N`` and ``coordinator`` into ``out``."""
    if not 1 <= parties <= 64:
        raise ValueError(f"--parties must be between 1 and 64, got {parties}")
    out.mkdir(parents=True, exist_ok=True)
    if (out / "ca.pem").exists() and not overwrite:
        raise FileExistsError(f"{out / 'ca.pem'} exists; choose another --out or pass --force to overwrite")
    ca_key, ca_cert = make_ca()
    (out / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(out / "ca.key", ca_key)
    issued = {"ca": Issued("ca", out / "ca.pem", out / "ca.key")}
    for i in range(1, parties + 1):
        issued[party_identity(i)] = write_leaf(out, party_identity(i), ca_key, ca_cert)
    issued[COORDINATOR_IDENTITY] = write_leaf(out, COORDINATOR_IDENTITY, ca_key, ca_cert)
    return issued
