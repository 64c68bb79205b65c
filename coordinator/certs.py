"""The consortium certificate authority: ``confar certs init --out DIR --parties N``.

Creates, with ``cryptography`` (ECDSA P-256, SHA-256):

* ``ca.pem`` / ``ca.key`` — the consortium CA (self-signed; in a real deployment its key stays offline);
* ``party-<i>.pem`` / ``party-<i>.key`` for i = 1..N — CN and DNS SAN ``party-<i>``;
* ``coordinator.pem`` / ``coordinator.key`` — CN and DNS SAN ``coordinator``.

A party's identity *is* its certificate's CN (also its only SAN): daemons check the CN of every caller and
clients pin the CN they expect of a server (TLS hostname verification against the SAN), so an address is
never trusted on its own. Leaf certificates carry both serverAuth and clientAuth (every daemon is both).
Private keys are written with mode 0600.

For a real deployment, where no private key should leave the host it was made on, the same certificates
come from three steps instead of ``init``:

* ``confar certs ca --out CA_DIR`` — the consortium CA (run once, by whoever the consortium trusts to sign;
  keep ``ca.key`` offline);
* ``confar certs request --identity party-3 --out DIR`` — on the registry's own host: a fresh key
  (``party-3.key``, mode 0600, never sent anywhere) and a certificate signing request ``party-3.csr``;
* ``confar certs sign --ca CA_DIR --csr party-3.csr --out party-3.pem`` — the CA checks the request (valid
  signature, a well-formed identity in the CN, only that CN requested) and issues the same kind of leaf
  certificate as ``init`` (CN and DNS SAN = identity, serverAuth + clientAuth, 365 days).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from proto.files import write_durable
from proto.spec import default_identity, identity_problem

COORDINATOR_IDENTITY = "coordinator"
VALIDITY_DAYS = 365


def party_identity(party: int) -> str:
    return default_identity(party)


@dataclass(frozen=True)
class Issued:
    identity: str
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_durable(path, pem)  # 0600 even when it replaces a looser file


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
    return key, _issue(identity, key.public_key(), ca_key, ca_cert)


def _issue(
    identity: str,
    public_key: ec.EllipticCurvePublicKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(identity))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
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


def write_leaf(
    out: Path, identity: str, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> Issued:
    key, cert = make_leaf(identity, ca_key, ca_cert)
    cert_path, key_path = out / f"{identity}.pem", out / f"{identity}.key"
    write_durable(cert_path, cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write_key(key_path, key)
    return Issued(identity, cert_path, key_path)


def init_ca(out: Path, overwrite: bool = False) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """Write ``ca.pem`` and ``ca.key`` (0600) into ``out``; refuse to replace an existing CA."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / "ca.pem").exists() and not overwrite:
        raise FileExistsError(f"{out / 'ca.pem'} exists; choose another --out or pass --force to overwrite")
    ca_key, ca_cert = make_ca()
    write_durable(out / "ca.pem", ca_cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write_key(out / "ca.key", ca_key)
    return ca_key, ca_cert


def load_ca(ca_dir: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """The CA written by :func:`init_ca` (``ca.pem`` and ``ca.key`` in ``ca_dir``)."""
    try:
        cert = x509.load_pem_x509_certificate((ca_dir / "ca.pem").read_bytes())
        key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise ValueError(
            f"no CA in {ca_dir}: {exc.filename} is missing (make one with `confar certs ca`)"
        ) from exc
    except ValueError as exc:
        raise ValueError(f"the CA in {ca_dir} is unreadable: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{ca_dir / 'ca.key'} is not an EC private key")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        raise ValueError(f"{ca_dir / 'ca.key'} does not belong to {ca_dir / 'ca.pem'}")
    return key, cert


def check_identity(identity: str) -> str:
    why = identity_problem(identity)
    if why is not None:
        raise ValueError(f"identity {identity!r} {why}")
    return identity


def write_request(out: Path, identity: str, overwrite: bool = False) -> tuple[Path, Path]:
    """A fresh key (0600) and a CSR for ``identity`` in ``out``; the key never needs to leave this host."""
    check_identity(identity)
    out.mkdir(parents=True, exist_ok=True)
    key_path, csr_path = out / f"{identity}.key", out / f"{identity}.csr"
    if key_path.exists() and not overwrite:
        raise FileExistsError(
            f"{key_path} exists; pass --force to replace it (its certificate stops working)"
        )
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(identity))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(identity)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    write_durable(csr_path, csr.public_bytes(serialization.Encoding.PEM), private=False)
    return key_path, csr_path


def sign_request(
    csr_pem: bytes, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> tuple[str, x509.Certificate]:
    """Check a CSR and issue the leaf certificate for the identity in its CN (CN = the only SAN)."""
    try:
        csr = x509.load_pem_x509_csr(csr_pem)
    except ValueError as exc:
        raise ValueError(f"not a PEM certificate signing request: {exc}") from exc
    if not csr.is_signature_valid:
        raise ValueError("the request's signature does not verify: it was altered or not made with its key")
    cns = csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(cns) != 1:
        raise ValueError(f"the request must name exactly one CN, it names {len(cns)}")
    identity = check_identity(str(cns[0].value))
    try:
        san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.DNSName)
        if names != [identity] or len(list(san)) != 1:
            raise ValueError(
                f"the request asks for alternative names {list(san)}; only DNS:{identity} is issued"
            )
    except x509.ExtensionNotFound:
        pass
    public_key = csr.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey):
        raise ValueError("the request's key is not an EC key (confar issues P-256 certificates)")
    return identity, _issue(identity, public_key, ca_key, ca_cert)


def init_consortium(out: Path, parties: int, overwrite: bool = False) -> dict[str, Issued]:
    """Write a CA and certificates for ``party-1..party-N`` and ``coordinator`` into ``out``."""
    if not 1 <= parties <= 64:
        raise ValueError(f"--parties must be between 1 and 64, got {parties}")
    ca_key, ca_cert = init_ca(out, overwrite)
    issued = {"ca": Issued("ca", out / "ca.pem", out / "ca.key")}
    for i in range(1, parties + 1):
        issued[party_identity(i)] = write_leaf(out, party_identity(i), ca_key, ca_cert)
    issued[COORDINATOR_IDENTITY] = write_leaf(out, COORDINATOR_IDENTITY, ca_key, ca_cert)
    return issued
