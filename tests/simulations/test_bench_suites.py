"""Smoke tests of the benchmark suites added for ``confar bench mpyc / wan / all`` (tiny settings).

* MPyC: the MPyC program's revealed bits equal the plaintext [sum >= 0], including sums of exactly 0 and
  -2^-20 (skipped, naming the extra, when mpyc is not installed).
* The WAN delay proxy forwards a byte stream intact in both directions and delays a round trip by at
  least the configured 2 x one-way delay (a lower bound only: no upper timing bound on a shared machine).
* The namespace suite (root only; otherwise skipped with the reason) runs m = 3 and leaves no namespace
  or process behind.
* ``bench all``'s summary turns records into series and PNGs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulations import bench_all, bench_mpyc, bench_wan, wan_net

# ---- MPyC ------------------------------------------------------------------------------------------------


def test_ints_parses_space_and_comma_separated() -> None:
    assert bench_mpyc.ints(["3", "5,7"], [1]) == [3, 5, 7]
    assert bench_mpyc.ints(None, [1, 2]) == [1, 2]
    with pytest.raises(ValueError):
        bench_mpyc.ints(["x"], [])


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
    docs = bench_mpyc.run_parties(m, inputs=terms, timeout_s=120.0)
    expected = [[int(v) for v in (t.sum(axis=0) >= 0)] for t in terms]
    assert expected[0][:3] == [1, 0, 1]
    for d in docs:  # every party sees the same revealed bits, equal to the plaintext comparison
        res = d["results"][0]
        assert res["bits"] == expected
        assert res["mismatches"] == 0


def test_compare_ratios() -> None:
    mp = [{"m": 3, "batch": 10, "decisions_per_s": 50.0}]
    ours = [
        {
            "suite": "network",
            "mode": "sign",
            "topology": "mesh",
            "m": 3,
            "batch": 10,
            "decisions_per_s": 200.0,
        },
        {
            "suite": "network",
            "mode": "sign",
            "topology": "relay",
            "m": 3,
            "batch": 10,
            "decisions_per_s": 1.0,
        },
        {
            "suite": "hss",
            "mode": "sign",
            "precompute": "inline",
            "m": 3,
            "batch": 10,
            "decisions_per_s": 100.0,
        },
    ]
    (row,) = bench_mpyc.compare(mp, ours)
    assert row["ours_network_mesh_over_mpyc"] == 4.0
    assert row["ours_hss_inline_over_mpyc"] == 2.0
    assert row["ours_hss_pooled_over_mpyc"] is None


# ---- the delay proxy -------------------------------------------------------------------------------------


async def _through_proxy(delay_s: float, payload: bytes) -> tuple[float, bytes]:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while data := await r.read(1 << 16):
            w.write(data)
            await w.drain()
        w.write_eof()

    srv = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    proxy = wan_net.DelayProxy([wan_net.Route(("127.0.0.1", 0), ("127.0.0.1", port), delay_s)])
    await proxy.start()
    try:
        host, pport = proxy.bound()[0]
        r, w = await asyncio.open_connection(host, pport)
        t0 = time.monotonic()
        w.write(b"p")
        await w.drain()
        assert await r.readexactly(1) == b"p"
        rtt = time.monotonic() - t0
        w.write(payload)
        await w.drain()
        w.write_eof()
        got = await r.read(-1)
        w.close()
        return rtt, got
    finally:
        await proxy.close()
        srv.close()
        await srv.wait_closed()


def test_delay_proxy_delays_round_trip_and_keeps_bytes() -> None:
    delay = 0.03
    payload = os.urandom(3 << 20) + bytes(range(256))
    rtt, got = asyncio.run(_through_proxy(delay, payload))
    assert rtt >= 2 * delay  # each direction held at least `delay` (lower bound only)
    assert got == payload


def test_route_parse_roundtrip_and_errors() -> None:
    r = wan_net.Route.parse("127.0.0.1:17002=10.77.0.12:7000@12.5")
    assert r == wan_net.Route(("127.0.0.1", 17002), ("10.77.0.12", 7000), 0.0125)
    assert wan_net.Route.parse(r.text()) == r
    with pytest.raises(ValueError, match="bad route"):
        wan_net.Route.parse("127.0.0.1:1=nowhere")


def test_wan_config_listens_on_veth(tmp_path: Path) -> None:
    text = wan_net.wan_party_config(2, 3, tmp_path, tmp_path / "certs", tmp_path / "d.csv")
    assert f'listen = "{wan_net.party_ip(2)}:{wan_net.PARTY_PORT}"' in text
    assert "127.0.0.1:0" not in text
    assert f'address = "127.0.0.1:{wan_net.PROXY_BASE + 3}"' in text


def test_wan_settings_reject_bad_input() -> None:
    ap = argparse.ArgumentParser()
    bench_wan.add_arguments(ap)
    with pytest.raises(ValueError, match="unknown modes"):
        bench_wan.settings_from_args(ap.parse_args(["--modes", "sign,nope"]))
    with pytest.raises(ValueError, match="parties"):
        bench_wan.settings_from_args(ap.parse_args(["--parties", "2"]))
    s = bench_wan.settings_from_args(ap.parse_args(["--batch", "1", "10,100"]))
    assert s.batches == (1, 10, 100) and s.m == 7 and s.c_rtt_ms == 25.0


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


def test_wannet_refuses_foreign_namespace(tmp_path: Path) -> None:
    net = wan_net.WanNet(3)
    with pytest.raises(wan_net.NetnsError, match="not created by this run"):
        net.spawn("some-other-ns", ["true"], tmp_path / "log")


# ---- bench all summary -----------------------------------------------------------------------------------


def _sections() -> dict[str, Any]:
    def rec(suite: str, m: int, b: int, v: float, **kw: Any) -> dict[str, Any]:
        return {"suite": suite, "mode": "sign", "m": m, "batch": b, "decisions_per_s": v, **kw}

    return {
        "machine": bench_all.machine_facts(),
        "hss": {
            "records": [rec("hss", m, b, 10.0 * m * b, precompute="inline") for m in (3, 5) for b in (1, 10)]
        },
        "network": {"records": [rec("network", 3, b, 5.0 * b, topology="mesh") for b in (1, 10)]},
        "mpyc": {"records": [rec("mpyc", 3, b, 2.0 * b) for b in (1, 10)]},
        "wan": {"skipped": "no root"},
    }


def test_sign_series_and_plots(tmp_path: Path) -> None:
    sec = _sections()
    series = bench_all.sign_series(sec)
    assert series["hss (inline, one process)"][(5, 10)] == 500.0
    assert series["MPyC 0.11 (processes, TCP)"][(3, 1)] == 2.0
    paths = bench_all.plot(sec, tmp_path)
    assert [p.name for p in paths] == ["bench-batch.png", "bench-parties.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)
    facts = sec["machine"]
    assert facts["cores"] and facts["date"] and "cpu_model" in facts


def test_wan_mirrors_the_protocol_constants() -> None:
    from hss.modes import TERMS_MODES
    from hss.session import SIGN_PRECOMPUTE

    assert bench_wan.MODES == TERMS_MODES and bench_wan.SIGN_PRECOMPUTE == SIGN_PRECOMPUTE
