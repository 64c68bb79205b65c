"""The daemon process's settings, applied once at ``confar-party serve`` (:func:`apply`).

**BLAS on one thread** (:func:`single_threaded_blas`). numpy's OpenBLAS starts a thread per core, and its
threads spin waiting for work after every call. A registry's terms call BLAS once per step (a model's
``(proposals, d) @ (d, records)``), so on a host the daemon shares (with its peers in a simulation, or with
anything else) those spinning threads take the cores gRPC and the other parties need: measured with 7 daemons
and 10,000 records each on 2 cores (``confar bench mcmc``'s logistic model, batch 16), 65-70 ms of CPU per
daemon and step and 232-257 ms per MH iteration, against 23 ms and 86 ms with one BLAS thread
(docs/BENCHMARKS.md, issue 26). An operator who sets ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or
``MKL_NUM_THREADS`` keeps that choice. Done with threadpoolctl (the library scikit-learn uses for the same).

**Freed memory kept in the heap (glibc)** (:func:`keep_freed_memory`), so that a step's large buffers do not
fault in fresh pages. At batch 1,000 a step moves megabytes: each peer frame is a bytes object of up to a few
hundred kB, and the engine's arrays are as large. glibc serves such blocks with a fresh ``mmap`` (or trims its
heap as soon as they are freed), so every step pays a page fault per 4 kB page touched again: measured on this
project's 2-vCPU VMs, a daemon at m = 3, batch 1,000 spent 41-43 ms of CPU per step with glibc's defaults and
36 ms with the settings below (docs/BENCHMARKS.md, issue 26). They are what the environment variables
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_TOP_PAD_`` would set: blocks under 32 MiB
come from the heap, and up to 256 MiB of free memory at its top is kept. The price is that a daemon's resident
memory stays near its largest step's instead of shrinking between steps. Elsewhere than glibc nothing is
changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

from threadpoolctl import threadpool_limits

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

# glibc's <malloc.h>
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = {M_MMAP_THRESHOLD: 32 << 20, M_TRIM_THRESHOLD: 256 << 20, M_TOP_PAD: 16 << 20}
NAMES = {M_MMAP_THRESHOLD: "mmap_threshold", M_TRIM_THRESHOLD: "trim_threshold", M_TOP_PAD: "top_pad"}


def keep_freed_memory() -> dict[str, int]:
    """Apply :data:`SETTINGS` with ``mallopt``; returns the settings applied (empty if not glibc)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return {}
    name = ctypes.util.find_library("c")
    if name is None:
        return {}
    mallopt = ctypes.CDLL(name).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return {NAMES[k]: v for k, v in SETTINGS.items() if mallopt(k, v) == 1}


def single_threaded_blas() -> bool:
    """Limit BLAS to one thread unless the environment names a thread count; True if limited here."""
    if any(os.environ.get(v) for v in BLAS_THREAD_VARIABLES):
        return False
    threadpool_limits(limits=1, user_api="blas")
    return True


def apply() -> dict[str, object]:
    """Both settings; what was applied (for the start-up line)."""
    return {"blas_single_thread": single_threaded_blas(), "malloc": keep_freed_memory()}
