"""The party's append-only audit log: one JSON line per request.

Each line records when, who (the caller's certificate identity), what (RPC or refused peer frame), the
session and step, the analysis (model) and reveal mode, the number of decisions, and the outcome (``ok``
or the gRPC status code and the reason). The file is opened with O_APPEND and each line is written with a
single ``write`` and flushed, so concurrent writers cannot interleave within a line and earlier lines are
never rewritten.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from parties.files import PRIVATE_MODE, make_private


class AuditLog:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_MODE)
        make_private(path)  # the mode above applies only when the file is created
        self._lock = threading.Lock()

    def record(
        self,
        *,
        who: str | None,
        what: str,
        outcome: str = "ok",
        session: bytes | None = None,
        step: int | None = None,
        analysis: str | None = None,
        reveal_mode: str | None = None,
        decisions: int | None = None,
        detail: str | None = None,
        **extra: Any,
    ) -> None:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            + f".{int(time.time() * 1000) % 1000:03d}Z",
            "who": who,
            "what": what,
            "session": session.hex() if session else None,
            "step": step,
            "analysis": analysis,
            "reveal_mode": reveal_mode,
            "decisions": decisions,
            "outcome": outcome,
        }
        if detail:
            entry["detail"] = detail[:500]
        entry.update(extra)
        line = (json.dumps(entry, sort_keys=False) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
