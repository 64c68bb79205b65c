"""A throwaway CA and two leaves in ./certs, made by the project's own certificate code (coordinator.certs:
ECDSA P-256, the leaves the daemons use): server.pem/.key for the identity ``localhost``, client.pem/.key
for ``bench-client``. The clients name ``localhost`` as the server they expect (bench.py), as daemons name
their peers."""

from pathlib import Path

from cryptography.hazmat.primitives import serialization

from coordinator.certs import make_ca, make_leaf

OUT = Path(__file__).resolve().parent / "certs"
OUT.mkdir(exist_ok=True)
ca_key, ca_cert = make_ca("bench CA")
(OUT / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
for role, identity in (("server", "localhost"), ("client", "bench-client")):
    key, cert = make_leaf(identity, ca_key, ca_cert)
    (OUT / f"{role}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (OUT / f"{role}.key").write_bytes(pem)
print("certs written to", OUT)
