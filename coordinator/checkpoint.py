"""A run's durable folder: ``run.json``, the saved experiment, the checkpoint and the draw log.

Layout (``confar run``'s output folder): ``run.json`` (run id, sessions, warnings), ``experiment.toml`` (the
config as run), ``checkpoint/state.json`` (the last checkpoint, version :data:`STATE_VERSION`: sampler state,
public-seed position, rows of the draw log it covers, run id, run step) and ``checkpoint/draws.bin`` (the
append-only draw log). Every file but the draw log is written durably (temp file, fsync, rename: a crash
leaves the old or the new file, never a torn one); the draw log is fsynced after each append and cut back to
what the checkpoint covers on resume. Also here: loading a run folder's experiment for ``--resume``, the
check that the parties' run steps match the checkpoint, and ``--overwrite``'s removal of an earlier run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import BlockingSession
from coordinator.experiment import Experiment, load_experiment
from coordinator.tables import ExperimentError
from proto.files import write_durable

F64 = npt.NDArray[np.float64]

STATE_VERSION = 1


class RunError(RuntimeError):
    """The run could not go on (a party refused, an inconsistent checkpoint, ...); the message says why."""


class StopRequested(Exception):
    """Raised by ``stop_after_batches`` (tests of resume): the run stops as if it had crashed."""


def atomic_write(path: Path, data: bytes) -> None:
    """The run folder's files (checkpoint, run.json, the experiment copy): durable, usual permissions."""
    write_durable(path, data, private=False)


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, allow_nan=False) + "\n").encode()


class DrawLog:
    """Append-only float64 records of a fixed width; the checkpoint says how many rows are valid."""

    def __init__(self, path: Path, width: int) -> None:
        self.path, self.width = path, width
        self.rows = 0

    def open(self, rows: int) -> None:
        """Keep the first ``rows`` rows (what the checkpoint covers) and drop anything written after it."""
        size = self.path.stat().st_size if self.path.exists() else 0
        need = rows * self.width * 8
        if size < need:
            raise RunError(f"{self.path}: holds {size // (8 * self.width)} rows, the checkpoint needs {rows}")
        with open(self.path, "ab") as fh:
            fh.truncate(need)
        self.rows = rows

    def append(self, block: F64) -> None:
        a = np.ascontiguousarray(block, dtype="<f8").reshape(-1, self.width)
        with open(self.path, "ab") as fh:
            fh.write(a.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        self.rows += a.shape[0]

    def read(self) -> F64:
        raw = np.fromfile(self.path, dtype="<f8", count=self.rows * self.width) if self.rows else np.zeros(0)
        return np.asarray(raw, dtype=np.float64).reshape(self.rows, self.width)


@dataclass
class RunFolder:
    out_dir: Path

    @property
    def ckpt(self) -> Path:
        return self.out_dir / "checkpoint"

    @property
    def state_path(self) -> Path:
        return self.ckpt / "state.json"

    @property
    def meta_path(self) -> Path:
        return self.out_dir / "run.json"

    def refuse_a_held_run(self) -> None:
        """A new run's folder must not hold a run already (refused, naming how to continue that run)."""
        if self.meta_path.exists() or self.ckpt.exists():
            raise ExperimentError(
                f"{self.out_dir} already holds a run: continue it with `confar run --resume {self.out_dir}` "
                "or choose another experiment.output_dir"
            )

    def create(self, exp: Experiment) -> dict[str, Any]:
        self.refuse_a_held_run()
        self.ckpt.mkdir(parents=True, exist_ok=True)
        meta = {
            "run_id": f"run-{secrets.token_hex(16)}",
            "experiment": exp.name,
            "source": str(exp.source),
            "base_dir": str(exp.base_dir),
            "created": now(),
            "sessions": [],
        }
        atomic_write(self.out_dir / "experiment.toml", exp.text.encode())
        atomic_write(self.meta_path, _json_bytes(meta))
        return meta

    def load_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise ExperimentError(f"{self.meta_path}: not a run folder's run.json: {exc}") from exc
        if not isinstance(meta, dict) or not isinstance(meta.get("run_id"), str):
            raise ExperimentError(f"{self.meta_path}: no run_id")
        return meta

    def save_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self.meta_path, _json_bytes(meta))

    def load_state(self) -> dict[str, Any] | None:
        if not self.state_path.exists():
            return None
        try:
            st = json.loads(self.state_path.read_text())
        except (OSError, ValueError) as exc:
            raise RunError(f"{self.state_path}: unreadable checkpoint: {exc}") from exc
        if not isinstance(st, dict) or st.get("version") != STATE_VERSION:
            raise RunError(f"{self.state_path}: not a version-{STATE_VERSION} checkpoint")
        return st

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.state_path, _json_bytes(state))

    def open(self, exp: Experiment, resume: bool) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """``run.json`` and the last checkpoint (None before the first) of a resumed run; a new run's folder
        created (refused when it holds a run already) and no checkpoint."""
        if resume:
            return self.load_meta(), self.load_state()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        return self.create(exp), None

    def check_run_id(self, ckpt: dict[str, Any], run_id: str) -> None:
        if ckpt.get("run_id") != run_id:
            raise RunError(f"{self.state_path}: checkpoint of run {ckpt.get('run_id')!r}, not {run_id!r}")


def load_resumed(out_dir: Path) -> Experiment:
    """The experiment saved in a run folder (relative paths resolve against the original file's folder)."""
    rf = RunFolder(out_dir)
    meta = rf.load_meta()
    saved = out_dir / "experiment.toml"
    try:
        text = saved.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExperimentError(f"{saved}: cannot read the saved experiment: {exc.strerror}") from exc
    exp = load_experiment(saved, base_dir=Path(meta.get("base_dir", out_dir)), text=text)
    return replace(exp, output_dir=out_dir)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_resume(sess: BlockingSession, run_step: int) -> None:
    """Checkpoint at run step c: every party must hold c or c + 1 (a step done after the last checkpoint)."""
    bad = {pid: s for pid, s in sess.resume.items() if s not in (run_step, run_step + 1)}
    if bad:
        sess.abort("inconsistent checkpoint")
        raise RunError(
            f"the checkpoint is at run step {run_step} but parties report their last completed run step as "
            f"{bad} (expected {run_step} or {run_step + 1}): this folder's checkpoint does not belong with "
            "these parties' records; not continuing"
        )


def clear_run_folder(out_dir: Path) -> None:
    """``--overwrite``: remove an earlier run's output folder; refuse any folder that is not one."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ExperimentError(f"--overwrite: {out_dir} is not a folder; not touched")
    # a run refused before its first step leaves only the simulated consortium's folder (simulation/)
    own = {"simulation"}
    if not (out_dir / "run.json").is_file() and any(p.name not in own for p in out_dir.iterdir()):
        raise ExperimentError(
            f"--overwrite: {out_dir} is not empty and holds no run.json (not a run folder); not touched"
        )
    shutil.rmtree(out_dir)
