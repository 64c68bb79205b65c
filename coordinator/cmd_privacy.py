"""``confar privacy ...``: the parties' privacy budgets (dry run of a planned session; report of spend)."""

from __future__ import annotations

HELP = "privacy budgets: plan (dry run of a session at every party) and report (what each party spent)"
SUBCOMMANDS: list[tuple[str, str]] = [
    ("plan", "coordinator.cmd_privacy_plan"),
    ("report", "coordinator.cmd_privacy_report"),
]
