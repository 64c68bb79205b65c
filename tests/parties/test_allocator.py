"""parties.allocator: a daemon keeps freed memory, so a step's large buffers reuse pages instead of faulting
fresh ones in (glibc only). Measured in a child process, whose allocator the test may change."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from typing import Any

import pytest

CHILD = """
import json, resource, sys
from parties.allocator import keep_freed_memory

def faults_per_buffer() -> float:
    data = b"x" * (1 << 20)
    for _ in range(3):  # warm up
        bytes(bytearray(data))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        bytes(bytearray(data))  # two 1 MiB blocks, each written in full, then freed
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50

default = faults_per_buffer()
applied = keep_freed_memory() if sys.argv[1] == "tune" else {}
print(json.dumps({"applied": applied, "default": default, "after": faults_per_buffer()}))
"""


def run_child(mode: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the settings are glibc's"
)
def test_freed_buffers_reuse_the_heap_after_tuning() -> None:
    untuned = run_child("none")
    tuned = run_child("tune")
    assert tuned["applied"] == {"mmap_threshold": 32 << 20, "trim_threshold": 256 << 20, "top_pad": 16 << 20}
    # glibc's default serves a 1 MiB block by mmap: ~2 x 256 pages faulted per round (each block written)
    assert untuned["after"] > 100
    assert tuned["after"] < 10  # pages reused from the kept heap
