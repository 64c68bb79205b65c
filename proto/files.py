"""Durable files: the one way every file confar keeps is written, on both sides of the wire.

A registry's state (decision ledger, privacy ledger, run records and noise keys), the coordinator's run
folder (checkpoint, run.json), its outputs and the consortium's keys and certificates are all replaced the
same way: a temporary file next to the target, written, flushed and fsynced, renamed atomically onto the
target, and the folder fsynced so the rename itself survives a crash. A reader (or a process restarted
after a kill at any instant) therefore finds either the old file or the new one, never a torn one
(``tests/proto/test_files.py`` kills a writer mid-write again and again and checks exactly that).

Modes: ``private=True`` (state files, private keys) creates the temporary file 0600 before a byte is
written, whatever the umask, so the target is 0600 even when it replaces a looser file; otherwise the
usual ``0666 & ~umask``. :func:`write_durable` stages at ``<name>.tmp`` (one writer per file: a leftover of
an interrupted write is removed first, so its mode and bytes never carry over); :func:`staged` gives a
unique temporary path for writers that need a path rather than bytes (NetCDF, plots).

This module sits in ``proto/`` because both parties/ and coordinator/ use it and neither may import the
other (``tests/test_layers.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

PRIVATE_MODE = 0o600


def public_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file under the current umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def tmp_path_of(path: Path) -> Path:
    """Where :func:`write_durable` stages ``path`` (``<name>.tmp`` in the same folder)."""
    return path.with_name(path.name + ".tmp")


def write_durable(path: Path, data: bytes, *, private: bool = True) -> None:
    """Replace ``path`` with ``data`` durably: temp file (0600 if private), fsync, rename, fsync folder."""
    path = Path(path)
    mode = PRIVATE_MODE if private else public_mode()
    tmp = tmp_path_of(path)
    tmp.unlink(missing_ok=True)  # an interrupted write's leftover: never reuse its mode or contents
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # independent of the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def staged(final: Path, *, private: bool = False) -> Iterator[Path]:
    """A unique temporary path next to ``final``; when the block completes, the file there is fsynced,
    renamed onto ``final`` and the folder fsynced. If the block raises, ``final`` is untouched."""
    final = Path(final)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, PRIVATE_MODE if private else public_mode())  # mkstemp makes 0600
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        fsync_dir(final.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def fsync_dir(folder: Path) -> None:
    """fsync a folder, so that a rename or a new entry in it survives a crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private(path: Path) -> None:
    """Tighten an existing file to 0600 (state files written by older versions may be 0644)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode != PRIVATE_MODE:
        os.chmod(path, PRIVATE_MODE)
