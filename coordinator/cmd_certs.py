"""``confar certs ...``: the consortium's certificates."""

from __future__ import annotations

HELP = "consortium certificates (CA, parties, coordinator)"
SUBCOMMANDS: list[tuple[str, str]] = [
    ("init", "coordinator.cmd_certs_init"),  # everything in one place: local experiments and tests
    ("ca", "coordinator.cmd_certs_ca"),  # a deployment: the CA, then each host's own key and request
    ("request", "coordinator.cmd_certs_request"),
    ("sign", "coordinator.cmd_certs_sign"),
]
