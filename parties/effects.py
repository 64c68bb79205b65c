"""This registry's draws of its own random effect in blocked runs, kept until the run's end (issue 36).

In a blocked run (``mechanisms.samplers.blocked``) the registry updates its effect z_j itself and never sends
it during the run. Each sweep it learns every chain's shared state after the previous sweep (the batch's
``states``), and so the previous sweep's draw z_j = u_j / σ_u of every chain, which it appends here: one line
per sweep, ``{"sweep": t, "z": [...], "checksum": ...}``, fdatasynced before the step's messages leave the
registry (a crash can leave a torn last line, ignored; a sweep evaluated again appends the same line: the
last line of a sweep counts). At the run's end the coordinator asks for them (``effects``): the registry
answers only if its ``[allow] release_effects`` says so, and only once per run with one final set of chain
states (recorded here as ``release`` lines; a second request with other final states is refused: the draws
of the last sweep are a function of those states, and different ones would tell the coordinator more than
the draws).

Storage: ``<state_dir>/runs/<sha256(run_id)[:32]>.effects``, next to the run's record
(``parties.replay``). Nothing here ever leaves the registry except through the release.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from proto.files import make_private
from proto.spec import check_run_id

F64 = npt.NDArray[np.float64]
FORMAT_VERSION = 1


class EffectsFileError(RuntimeError):
    """A registry's effects file that cannot be read or trusted (the message names the file)."""


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class EffectsStore:
    """The effect draws of this registry's blocked runs, one append-only file per run."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "runs"

    def path_for(self, run_id: str) -> Path:
        check_run_id(run_id)
        return self.root / f"{hashlib.sha256(run_id.encode()).hexdigest()[:32]}.effects"

    def _append(self, run_id: str, body: dict[str, Any]) -> None:
        line = (json.dumps({**body, "checksum": _checksum(body)}) + "\n").encode("utf-8")
        path = self.path_for(run_id)
        self.root.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line from a crash: end it first
                os.write(fd, b"\n")
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        finally:
            os.close(fd)
        if created:  # the new file's directory entry made durable once
            make_private(path)
            dfd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def append(self, run_id: str, sweep: int, z: F64) -> None:
        """Every chain's z_j after ``sweep``, durably before this returns."""
        z = np.asarray(z, dtype=np.float64)
        if z.ndim != 1 or not np.isfinite(z).all():
            raise ValueError("effect draws must be a finite 1-D array (one per chain)")
        self._append(run_id, {"version": FORMAT_VERSION, "sweep": int(sweep), "z": [float(x) for x in z]})

    def _lines(self, run_id: str) -> list[dict[str, Any]]:
        path = self.path_for(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise EffectsFileError(f"effects file {path} cannot be read ({exc.strerror})") from exc
        out = []
        for k, raw in enumerate(data.split(b"\n")):
            if not raw.strip():
                continue
            try:
                doc = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue  # a line torn by a crash (a prefix of a JSON object): its save never returned
            body = {key: v for key, v in doc.items() if key != "checksum"} if isinstance(doc, dict) else None
            if (
                body is None
                or doc.get("checksum") != _checksum(body)
                or body.get("version") != FORMAT_VERSION
            ):
                raise EffectsFileError(
                    f"effects file {path} is corrupt at line {k + 1} (checksum or version); move it away "
                    "only if the run's effects are not to be released"
                )
            out.append(body)
        return out

    def draws(self, run_id: str) -> dict[int, F64]:
        """The kept draws by sweep (the last line of a sweep counts)."""
        out: dict[int, F64] = {}
        for body in self._lines(run_id):
            if "sweep" in body:
                out[int(body["sweep"])] = np.asarray(body["z"], dtype=np.float64)
        return out

    def released(self, run_id: str) -> F64 | None:
        """The final chain states the run's effects were released with (None: not released yet)."""
        for body in self._lines(run_id):
            if "release" in body:
                return np.asarray(body["release"], dtype=np.float64)
        return None

    def mark_released(self, run_id: str, final_states: F64) -> None:
        """Record the final chain states of the run's (first) release, durably."""
        states = np.asarray(final_states, dtype=np.float64)
        self._append(run_id, {"version": FORMAT_VERSION, "release": states.tolist()})


__all__ = ["EffectsFileError", "EffectsStore"]
