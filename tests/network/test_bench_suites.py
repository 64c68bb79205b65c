"""The benchmark suites of ``confar bench mpyc / wan`` over processes (tiny settings):

* MPyC: the MPyC program's revealed bits, computed by m party processes over TCP, equal the plaintext
  [sum >= 0], including sums of exactly 0 and -2^-20 (skipped, naming the extra, when mpyc is not installed).
* The namespace suite (root only; otherwise skipped with the reason) runs m = 3 daemons in network
  namespaces and leaves no namespace or process behind, also when stopped by SIGTERM; MPyC's program in the
  same namespaces and delay proxies (``bench wan --mpyc``) reveals the plaintext bits and cleans up too.

The suites' parts that run in this process are tests/simulations/test_bench_suites.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from simulations import bench_mpyc, bench_wan, wan_mpyc

# ---- MPyC ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(bench_mpyc.mpyc_version() is None, reason=f"mpyc not installed; {bench_mpyc.EXTRA_HINT}")
def test_mpyc_comparison_matches_plaintext() -> None:
    m = 3
    g = np.random.default_rng(7)
    terms = g.integers(-(2**22), 2**22, size=(2, m, 6))  # units of 2^-20
    # edge cases in the first run: sum exactly 0 (-> 1), sum -1 unit = -2^-20 (-> 0), sum +1 unit (-> 1)
    terms[0, :, 0] = [5, -2, -3]
    terms[0, :, 1] = [0, 0, -1]
    terms[0, :, 2] = [1, 0, 0]
    docs = bench_mpyc.run_parties(m, bench_mpyc.MpycRun(inputs=terms, timeout_s=120.0))
    expected = [[int(v) for v in (t.sum(axis=0) >= 0)] for t in terms]
    assert expected[0][:3] == [1, 0, 1]
    for d in docs:  # every party sees the same revealed bits, equal to the plaintext comparison
        res = d["results"][0]
        assert res["bits"] == expected
        assert res["mismatches"] == 0


# ---- the namespace suite (root) --------------------------------------------------------------------------


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.slow
@pytest.mark.skipif(bench_wan.wan_unavailable() is not None, reason=str(bench_wan.wan_unavailable()))
def test_wan_suite_runs_and_cleans_up() -> None:
    before = _netns()
    s = bench_wan.WanSettings(m=3, rtt_ms=10.0, batches=(1,), modes=("sum", "sign"), repeats=1, warmup=1)
    records = bench_wan.run_wan(s)
    assert [r["mode"] for r in records] == ["sum", "sign"]
    for r in records:
        assert r["suite"] == "wan" and r["rtt_ms"] == 10.0
        # the emulated RTT is a lower bound of every batch: request + reply cross the coordinator links
        assert r["latency_ms_median"] >= r["latency_floor_ms"] >= 10.0
    assert {r["mode"]: r["rounds"] for r in records} == {"sum": 1, "sign": 7}
    assert _netns() == before  # every namespace this run created is gone


@pytest.mark.slow
@pytest.mark.skipif(bench_wan.wan_unavailable() is not None, reason=str(bench_wan.wan_unavailable()))
@pytest.mark.skipif(bench_mpyc.mpyc_version() is None, reason=f"mpyc not installed; {bench_mpyc.EXTRA_HINT}")
def test_mpyc_on_the_wan_runs_and_cleans_up() -> None:
    before = _netns()
    (rec,) = wan_mpyc.run_mpyc_wan(3, 20.0, [4], repeats=1, warmup=1, timeout_s=120.0)
    assert rec["suite"] == "wan-mpyc" and rec["mismatches"] == 0 and rec["batches_timed"] == 1
    # inputs to every party and the output back each cross a link one way (rtt/2): at least one RTT
    assert rec["latency_ms_median"] >= 20.0 and rec["latency_rtts"] >= 1.0
    assert _netns() == before


@pytest.mark.slow
@pytest.mark.skipif(bench_wan.wan_unavailable() is not None, reason=str(bench_wan.wan_unavailable()))
def test_wan_sigterm_removes_namespaces_and_processes(tmp_path: Path) -> None:
    before = _netns()
    log = open(tmp_path / "wan.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "bench", "wan", "--quick"], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 120
        while len(ours := {n for n in _netns() - before if n.startswith("cw")}) < 4:  # coordinator + 3
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "wan.log").read_text()
            time.sleep(0.1)
        time.sleep(3.0)  # proxies and daemons starting
        inside = {
            int(pid)
            for ns in ours
            for pid in subprocess.run(
                ["ip", "netns", "pids", ns], capture_output=True, text=True
            ).stdout.split()
        }
        assert inside, "no process started in the suite's namespaces"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130  # confar's "interrupted", after its cleanup
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert _netns() == before
    time.sleep(0.5)
    assert not [pid for pid in inside if Path(f"/proc/{pid}").exists()]  # stopped (and reaped)
