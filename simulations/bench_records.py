"""What every benchmark suite stamps on the records it writes (date, machine), and the writing itself."""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def run_meta() -> dict[str, Any]:
    """The date (UTC, seconds) and a one-line machine description (architecture, cores, Python)."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, "
        f"{platform.python_implementation()} {platform.python_version()}",
    }


def write_records(path: Path, records: list[dict[str, Any]]) -> None:
    """The records, each stamped with :func:`run_meta`, as a JSON list at ``path`` (its folder made)."""
    meta = run_meta()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{**r, **meta} for r in records], indent=1) + "\n")
    print(f"wrote {len(records)} records to {path}")


def cell(v: Any, w: int, d: int = 1) -> str:
    """A number right-aligned in a table column of width ``w`` with ``d`` decimals; "-" for a missing one."""
    return f"{v:>{w}.{d}f}" if isinstance(v, int | float) else f"{'-':>{w}}"
