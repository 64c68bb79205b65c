"""End-to-end authenticated encryption between parties, for share exchange relayed by the coordinator.

Per session each party draws a fresh X25519 key and signs its public half with its certificate key
(ECDSA P-256 / SHA-256) over ``confar/kex/v1 | session_id | party | public``. Peers verify the signature,
that the certificate was issued by the consortium CA, and that its CN is the identity the session assigns
to that party id, so a relaying coordinator cannot substitute keys. The pairwise key is
HKDF-SHA256(X25519(a, B), salt = session_id, info = "confar/relay/v1" | min(i,j) | max(i,j)), used with
AES-256-GCM, a fresh random 96-bit nonce per frame, and associated data binding session, step, round,
src, dst and frame kind: a frame cannot be replayed into another session/step/round, redirected, or
re-labelled (DATA/EMPTY/DONE) without failing authentication. What the relay still sees: frame sizes,
kinds, timing and the (public) communication pattern — all fixed by the protocol, not by the secrets.
"""

from __future__ import annotations

import os
import struct

from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID

NONCE_BYTES = 12


class KeyExchangeError(ValueError):
    """A peer's key bundle failed verification (wrong CA, wrong identity, bad signature)."""


def bundle_context(session_id: bytes, party: int, public: bytes) -> bytes:
    return (
        b"confar/kex/v1" + struct.pack(">H", len(session_id)) + session_id + struct.pack(">I", party) + public
    )


def new_private() -> X25519PrivateKey:
    return X25519PrivateKey.generate()


def public_bytes(priv: X25519PrivateKey) -> bytes:
    return priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign_bundle(key_pem: bytes, session_id: bytes, party: int, public: bytes) -> bytes:
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise KeyExchangeError("the party's certificate key must be an EC key")
    return key.sign(bundle_context(session_id, party, public), ec.ECDSA(hashes.SHA256()))


def verify_bundle(
    ca_pem: bytes,
    cert_pem: bytes,
    identity: str,
    session_id: bytes,
    party: int,
    public: bytes,
    signature: bytes,
) -> None:
    """Raise :class:`KeyExchangeError` unless party ``party`` signed this key under the consortium CA."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError as exc:
        raise KeyExchangeError(f"party {party}: unreadable certificate: {exc}") from exc
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise KeyExchangeError(f"party {party}: certificate not issued by the consortium CA") from exc
    cns = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cns != [identity]:
        raise KeyExchangeError(f"party {party}: certificate is for {cns}, the session says {identity!r}")
    pub = cert.public_key()
    if not isinstance(pub, ec.EllipticCurvePublicKey):
        raise KeyExchangeError(f"party {party}: certificate key is not an EC key")
    if len(public) != 32:
        raise KeyExchangeError(f"party {party}: X25519 public key must be 32 bytes, got {len(public)}")
    try:
        pub.verify(signature, bundle_context(session_id, party, public), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature as exc:
        raise KeyExchangeError(f"party {party}: bad signature on its session key") from exc


def pair_key(priv: X25519PrivateKey, peer_public: bytes, session_id: bytes, a: int, b: int) -> bytes:
    lo, hi = min(a, b), max(a, b)
    shared = priv.exchange(X25519PublicKey.from_public_bytes(peer_public))
    return HKDF(
        algorithm=hashes.SHA256(),
        length=32,
        salt=session_id,
        info=b"confar/relay/v1" + struct.pack(">II", lo, hi),
    ).derive(shared)


def associated_data(session_id: bytes, step: int, rnd: int, src: int, dst: int, kind: int) -> bytes:
    return b"confar/frame/v1" + session_id + struct.pack(">QIIIB", step, rnd, src, dst, kind)


class PairCipher:
    """AES-256-GCM between this party and one peer."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, ad: bytes) -> tuple[bytes, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        return nonce, self._aead.encrypt(nonce, plaintext, ad)

    def open(self, nonce: bytes, ciphertext: bytes, ad: bytes) -> bytes:
        if len(nonce) != NONCE_BYTES:
            raise KeyExchangeError(f"nonce must be {NONCE_BYTES} bytes")
        try:
            return self._aead.decrypt(nonce, ciphertext, ad)
        except InvalidTag as exc:
            raise KeyExchangeError("frame failed authentication (wrong key, tampered, or misrouted)") from exc
