"""``confar certs ...``: the consortium's certificates."""

from __future__ import annotations

HELP = "consortium certificates (CA, parties, coordinator)"
SUBCOMMANDS: list[tuple[str, str]] = [("init", "coordinator.cmd_certs_init")]
