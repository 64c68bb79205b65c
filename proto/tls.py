"""Mutual TLS for every confar channel, and the identity of a caller.

Servers require a client certificate signed by the consortium CA; clients verify the server against the
same CA and pin the identity (certificate CN/SAN) they expect, via ``grpc.ssl_target_name_override``, so
an address is never trusted on its own. :func:`caller_identity` returns the verified CN of the peer of a
server call. Plaintext channels exist only when a daemon or coordinator is started with ``--insecure``
(local experiments): then a caller's claimed identity travels in the ``x-confar-identity`` metadata and is
*not* authenticated, which :func:`warn_insecure` says loudly.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID

IDENTITY_METADATA = "x-confar-identity"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.so_reuseport", 0),
]


class TlsError(ValueError):
    """Certificate files missing, unreadable, or not what they claim to be."""


@dataclass(frozen=True)
class TlsMaterial:
    """PEM bytes of one endpoint's certificate and key and of the consortium CA; ``None`` means insecure."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    identity: str

    @classmethod
    def load(cls, cert: Path, key: Path, ca: Path, expect_identity: str | None = None) -> TlsMaterial:
        blobs = []
        for what, path in (("certificate", cert), ("private key", key), ("CA certificate", ca)):
            try:
                blobs.append(Path(path).read_bytes())
            except OSError as exc:
                raise TlsError(f"cannot read the {what} {path}: {exc.strerror}") from exc
        cert_pem, key_pem, ca_pem = blobs
        ident = certificate_identity(cert_pem)
        ca_cert = _parse(ca_pem, str(ca))
        try:
            _parse(cert_pem, str(cert)).verify_directly_issued_by(ca_cert)
        except (ValueError, TypeError, Exception) as exc:
            raise TlsError(f"certificate {cert} is not issued by the CA in {ca}: {exc}") from exc
        if expect_identity is not None and ident != expect_identity:
            raise TlsError(f"certificate {cert} is for {ident!r}, but this endpoint is {expect_identity!r}")
        return cls(cert_pem, key_pem, ca_pem, ident)


def _parse(pem: bytes, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise TlsError(f"{what} is not a PEM certificate: {exc}") from exc


def certificate_identity(pem: bytes) -> str:
    cert = _parse(pem, "certificate")
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(cns) != 1:
        raise TlsError("certificate must have exactly one common name")
    return str(cns[0].value)


def server_credentials(tls: TlsMaterial) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem, require_client_auth=True
    )


def secure_channel(address: str, tls: TlsMaterial | None, target_identity: str) -> grpc.aio.Channel:
    """An aio channel to ``address`` accepting only a server whose certificate names ``target_identity``."""
    if tls is None:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
    creds = grpc.ssl_channel_credentials(
        root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
    )
    opts = [*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", target_identity)]
    return grpc.aio.secure_channel(address, creds, options=opts)


def call_metadata(tls: TlsMaterial | None, identity: str) -> Sequence[tuple[str, str]] | None:
    """Metadata for outgoing calls: the claimed identity on insecure channels only."""
    return None if tls is not None else ((IDENTITY_METADATA, identity),)


def caller_identity(context: grpc.aio.ServicerContext, insecure: bool) -> str | None:
    """The verified CN of the caller (or, with --insecure only, its unauthenticated claim)."""
    if insecure:
        for key, value in context.invocation_metadata() or ():
            if key == IDENTITY_METADATA:
                return str(value)
        return None
    auth = context.auth_context()
    cns = list(auth.get("x509_common_name") or [])
    sans = list(auth.get("x509_subject_alternative_name") or [])
    if len(cns) != 1:
        return None
    cn = cns[0].decode() if isinstance(cns[0], bytes) else str(cns[0])
    san = {s.decode() if isinstance(s, bytes) else str(s) for s in sans}
    if san and cn not in san:
        return None
    return cn


def warn_insecure(who: str) -> None:
    print(
        f"WARNING: {who} is running with --insecure: plaintext gRPC, identities NOT authenticated. "
        "Use only for local experiments on loopback.",
        file=sys.stderr,
        flush=True,
    )
