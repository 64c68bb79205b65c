"""parties.process_settings: what ``confar-party serve`` sets for its process. Each check runs in a child
process, whose BLAS and allocator the test may change."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any

import pytest

FAULTS = """
import json, resource, sys
from parties.process_settings import keep_freed_memory

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

BLAS = """
import json
import numpy as np
from threadpoolctl import threadpool_info
from parties.process_settings import apply

np.ones((64, 64)) @ np.ones((64, 64))
before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
applied = apply()
after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({"applied": applied["blas_single_thread"], "before": before, "after": after}))
"""


def run_child(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env
    )
    return dict(json.loads(out.stdout))


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="the settings are glibc's"
)
def test_freed_buffers_reuse_the_heap_after_tuning() -> None:
    untuned = run_child(FAULTS, "none")
    tuned = run_child(FAULTS, "tune")
    assert tuned["applied"] == {"mmap_threshold": 32 << 20, "trim_threshold": 256 << 20, "top_pad": 16 << 20}
    # glibc's default serves a 1 MiB block by mmap: ~2 x 256 pages faulted per round (each block written)
    assert untuned["after"] > 100
    assert tuned["after"] < 10  # pages reused from the kept heap


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    return {**env, **extra}


def test_blas_runs_on_one_thread_unless_the_environment_says() -> None:
    got = run_child(BLAS, env=clean_env())
    if not got["before"]:
        pytest.skip("numpy here has no BLAS threadpoolctl can see")
    assert got["applied"] is True and got["after"] == [1] * len(got["before"])
    if (os.cpu_count() or 1) > 1:
        assert max(got["before"]) > 1  # so the limit changed something
    kept = run_child(BLAS, env=clean_env(OPENBLAS_NUM_THREADS="2"))
    assert kept["applied"] is False and kept["after"] == kept["before"]
