"""proto.files: a writer killed (SIGKILL) at any instant of a durable write leaves the old file or the new
one, never a torn one; the temporary file is private from its first byte; a failed staged write leaves the
target untouched."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from proto.files import PRIVATE_MODE, staged, tmp_path_of, write_durable

ROOT = Path(__file__).resolve().parents[2]
SIZE = 4 << 20  # 4 MiB per version: a write takes long enough to be interrupted in the middle

WRITER = """
import sys
from pathlib import Path
from proto.files import write_durable
target, size = Path(sys.argv[1]), int(sys.argv[2])
versions = [bytes([65 + k]) * size for k in range(4)]
print("ready", flush=True)
k = 0
while True:
    write_durable(target, versions[k % 4], private={private})
    k += 1
"""


@pytest.mark.slow
@pytest.mark.parametrize("private", [True, False])
def test_a_writer_killed_mid_write_leaves_a_whole_file(tmp_path: Path, private: bool) -> None:
    target = tmp_path / "state.json"
    write_durable(target, b"A" * SIZE, private=private)
    versions = {bytes([65 + k]) * SIZE for k in range(4)}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    torn_candidates = 0
    for kill in range(25):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER.format(private=private), str(target), str(SIZE)],
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
            time.sleep(0.002 + 0.0037 * kill)  # kill at a different instant of the write cycle each time
            if tmp_path_of(target).exists():
                torn_candidates += 1  # a write was in flight (the temp file existed) when we killed it
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(10)
        data = target.read_bytes()
        assert data in versions, f"kill {kill}: torn file of {len(data)} bytes"
        mode = stat.S_IMODE(target.stat().st_mode)
        assert (mode == PRIVATE_MODE) if private else (mode & 0o044), oct(mode)
        leftover = tmp_path_of(target)
        if leftover.exists() and private:
            assert stat.S_IMODE(leftover.stat().st_mode) == PRIVATE_MODE  # never readable by others
    assert torn_candidates > 0  # the kills did land during writes, so the check above had teeth
    write_durable(target, b"after", private=private)  # a later write replaces a leftover temp file
    assert target.read_bytes() == b"after" and not tmp_path_of(target).exists()


def test_private_write_tightens_a_looser_file(tmp_path: Path) -> None:
    key = tmp_path / "party.key"
    key.write_bytes(b"old")
    os.chmod(key, 0o644)
    write_durable(key, b"new")
    assert key.read_bytes() == b"new" and stat.S_IMODE(key.stat().st_mode) == PRIVATE_MODE


def test_a_failed_staged_write_leaves_the_target(tmp_path: Path) -> None:
    final = tmp_path / "posterior.nc"
    final.write_bytes(b"complete")
    with pytest.raises(RuntimeError), staged(final) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer failed")
    assert final.read_bytes() == b"complete"
    assert [p.name for p in tmp_path.iterdir()] == ["posterior.nc"]
    with staged(final) as tmp:
        tmp.write_bytes(b"new")
    assert final.read_bytes() == b"new"
