"""``confar privacy ...``: the parties' privacy budgets (dry run of a planned session; report of spend)."""

from __future__ import annotations

HELP = (
    "privacy budgets: plan (dry run of a session at every party), report (what each party spent) and audit "
    "(membership inference against a stated guarantee)"
)
SUBCOMMANDS: list[tuple[str, str]] = [
    ("plan", "coordinator.cmd_privacy_plan"),
    ("report", "coordinator.cmd_privacy_report"),
    ("audit", "coordinator.cmd_privacy_audit"),
]
