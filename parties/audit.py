"""The party's append-only audit log: one JSON line per request.

Each line records when, who (the caller's certificate identity), what (RPC or refused peer frame), the
session and step, the analysis (model) and reveal mode, the number of decisions, and the outcome (``ok``
or the gRPC status code and the reason). The file is opened with O_APPEND and each line is written with a
single ``write`` and flushed, so concurrent writers cannot interleave within a line and earlier lines are
never rewritten.

Every line is bounded whatever a request carried, so no caller can fill the party's disk through it: the
session id is cut to its first 64 bytes (a valid one has at most 64), strings to 500 characters, lists to 64
items, and a line still longer than MAX_LINE_BYTES keeps only its fixed fields (``"cut": true``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto.files import PRIVATE_MODE, make_private

MAX_SESSION_BYTES = 64
MAX_TEXT = 500
MAX_ITEMS = 64
MAX_LINE_BYTES = 16 * 1024
_FIXED = ("time", "who", "what", "session", "step", "analysis", "reveal_mode", "decisions", "outcome")


_SCALARS = (int, float, bool, type(None))  # most of a line's values: kept as they are, no further tests


def _bounded(v: Any) -> Any:
    if type(v) in _SCALARS:
        return v
    if isinstance(v, str):
        return v if len(v) <= MAX_TEXT else f"{v[:MAX_TEXT]}… ({len(v)} chars)"
    if isinstance(v, bytes):
        return _bounded(v.hex())
    if isinstance(v, list | tuple):
        items = [_bounded(x) for x in v[:MAX_ITEMS]]
        return [*items, f"… ({len(v)} items)"] if len(v) > MAX_ITEMS else items
    if isinstance(v, dict):
        return {str(k)[:MAX_TEXT]: _bounded(x) for k, x in list(v.items())[:MAX_ITEMS]}
    return v


@dataclass(frozen=True)
class AuditSubject:
    """What an audit line is about: the session (its id), the step, the analysis and reveal mode it runs, and
    how many decisions a step made."""

    session: bytes | None = None
    step: int | None = None
    analysis: str | None = None
    reveal_mode: str | None = None
    decisions: int | None = None


NOTHING = AuditSubject()
SUBJECT_KEYS = frozenset({"session", "step", "analysis", "reveal_mode", "decisions"})


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
        about: AuditSubject = NOTHING,
        detail: str | None = None,
        **extra: Any,
    ) -> None:
        misplaced = sorted(set(extra) & SUBJECT_KEYS)
        if misplaced:  # they belong in ``about``: as extra keys they would replace the columns' own values
            raise TypeError(f"audit line {what!r}: {misplaced} go in about=AuditSubject(...)")
        now = time.time()  # one clock reading: microseconds, so lines written close together keep their order
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now * 1e6) % 1_000_000:06d}Z",
            "who": who,
            "what": what,
            "session": _session_text(about.session),
            "step": about.step,
            "analysis": about.analysis,
            "reveal_mode": about.reveal_mode,
            "decisions": about.decisions,
            "outcome": outcome,
        }
        if detail:
            entry["detail"] = detail
        entry.update(extra)
        entry = {k: _bounded(v) for k, v in entry.items()}
        line = (json.dumps(entry, sort_keys=False) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:
            entry = {k: entry[k] for k in _FIXED} | {"cut": True}
            line = (json.dumps(entry, sort_keys=False) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def _session_text(session: bytes | None) -> str | None:
    """A session id as hex, at most its first MAX_SESSION_BYTES bytes (longer ones are no valid session)."""
    if not session:
        return None
    head = bytes(session[:MAX_SESSION_BYTES]).hex()
    return head if len(session) <= MAX_SESSION_BYTES else f"{head}… ({len(session)} bytes)"
