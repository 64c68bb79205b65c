"""The party's state files (``state_dir``): private (0600) and durable.

One helper for every file the daemon keeps (decision ledger, privacy ledger, run replay records), so each is
written the same way: a temporary file next to the target created 0600 (a stale one from an interrupted write
is removed first, so its mode cannot carry over), written, flushed and fsynced, renamed atomically onto the
target, and the directory fsynced so the rename itself survives a crash. A reader therefore sees either the
old file or the new one, never a torn one, and nobody but the daemon's user can read either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_MODE = 0o600


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably (temp file 0600, fsync, atomic rename, fsync of the folder)."""
    tmp = tmp_path_of(path)
    tmp.unlink(missing_ok=True)  # an interrupted write's leftover: never reuse its mode or contents
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    try:
        os.fchmod(fd, PRIVATE_MODE)  # independent of the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def tmp_path_of(path: Path) -> Path:
    """Where :func:`write_private` stages ``path`` (``<name>.tmp`` in the same folder)."""
    return path.with_name(path.name + ".tmp")


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private(path: Path) -> None:
    """Tighten an existing state file to 0600 (files written by older versions may be 0644)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode != PRIVATE_MODE:
        os.chmod(path, PRIVATE_MODE)
