"""Smoke tests of the benchmark suites added for ``confar bench mpyc / wan / all`` (tiny settings), in this
process:

* MPyC: the arguments and the comparison of decision rates.
* The WAN delay proxy forwards a byte stream intact in both directions and delays a round trip by at
  least the configured 2 x one-way delay (a lower bound only: no upper timing bound on a shared machine);
  routes, settings and the party config of the namespace suite; it refuses a namespace it did not create.
* ``bench wan --mpyc``: MPyC's address options and proxy routes put every party-to-party connection, as MPyC
  0.11 makes them (the lower pid dials), through a proxy with rtt/2 each way; the side-by-side rows.
* ``bench all``'s summary turns records into series and PNGs.

The suites' runs over processes (MPyC parties, the namespace suite's daemons) are
tests/network/test_bench_suites.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from simulations import bench_all, bench_mpyc, bench_wan, wan_mpyc, wan_net

# ---- MPyC ------------------------------------------------------------------------------------------------


def test_ints_parses_space_and_comma_separated() -> None:
    assert bench_mpyc.ints(["3", "5,7"], [1]) == [3, 5, 7]
    assert bench_mpyc.ints(None, [1, 2]) == [1, 2]
    with pytest.raises(ValueError):
        bench_mpyc.ints(["x"], [])


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
    assert row["ours_network_mesh_pooled_over_mpyc"] is None
    # the pooled precompute over the daemons (--pooled) has its own column; the inline one is not taken for it
    pooled = {"suite": "network", "mode": "sign", "topology": "mesh", "m": 3, "batch": 10}
    ours = [{**pooled, "precompute": "pooled", "decisions_per_s": 300.0}, *ours]
    (row,) = bench_mpyc.compare(mp, ours)
    assert row["ours_network_mesh_pooled_over_mpyc"] == 6.0
    assert row["ours_network_mesh_over_mpyc"] == 4.0


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


async def _proxy_to_late_target() -> bytes:
    with socket.socket() as probe:  # a free port, nothing listening on it yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proxy = wan_net.DelayProxy([wan_net.Route(("127.0.0.1", 0), ("127.0.0.1", port), 0.0)])
    await proxy.start()

    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(await r.read(100))
        await w.drain()
        w.close()

    try:
        r, w = await asyncio.open_connection(*proxy.bound()[0])  # accepted by the proxy, target not up
        w.write(b"early")
        await w.drain()
        await asyncio.sleep(0.3)
        srv = await asyncio.start_server(echo, "127.0.0.1", port)
        got = await asyncio.wait_for(r.read(100), 10.0)
        w.close()
        srv.close()
        await srv.wait_closed()
        return got
    finally:
        await proxy.close()


def test_delay_proxy_waits_for_a_target_still_starting() -> None:
    # MPyC's dial succeeds at the proxy: a refused target must not turn into a dropped connection
    assert asyncio.run(_proxy_to_late_target()) == b"early"


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


def test_mpyc_record_takes_the_slowest_party() -> None:
    per_party = [
        {"latencies_s": [0.1, 0.3], "bytes_sent": 100, "mismatches": 0},
        {"latencies_s": [0.2, 0.1], "bytes_sent": 300, "mismatches": 1},
    ]
    rec = bench_mpyc.mpyc_record(3, 10, per_party, {"sec_param": 64, "gmpy2": True}, 1.0, "x")
    # batches: max(0.1, 0.2) = 0.2 and max(0.3, 0.1) = 0.3 -> 20 decisions in 0.5 s
    assert rec["decisions_per_s"] == 40.0 and rec["latency_ms_median"] == 250.0
    assert rec["bytes_per_decision"] == 20.0 and rec["mismatches"] == 1 and rec["transport"] == "x"


# ---- MPyC on the WAN -------------------------------------------------------------------------------------


def _mpyc_view(args: list[str]) -> tuple[int, list[tuple[str, int]]]:
    """What MPyC 0.11's runtime makes of a party's options: its pid and every party's (host, port)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("-P", action="append", dest="parties")
    ap.add_argument("-I", type=int, dest="index")
    a = ap.parse_args(args)
    addrs = []
    for text in a.parties:
        host, port = text.rsplit(":", 1)
        assert host, "an empty host would make MPyC take this entry as its own"
        addrs.append((host, int(port)))
    return a.index, addrs


@pytest.mark.parametrize("m", [3, 5, 7])
def test_mpyc_wan_every_connection_goes_through_a_delay_proxy(m: int) -> None:
    rtt_ms = 25.0
    routes = wan_mpyc.mpyc_routes(m, rtt_ms)
    views = [_mpyc_view(wan_mpyc.mpyc_party_args(m, k)) for k in range(m)]
    assert [k for k, _ in views] == list(range(m))
    listens = {k: addrs[k] for k, addrs in views}  # Runtime.start: party k listens on its own entry's port
    assert all(listens[k] == (wan_net.party_ip(k + 1), wan_mpyc.MPYC_PORT) for k in range(m))
    delayed: set[tuple[int, int]] = set()
    for k, addrs in views:
        by_listen = {r.listen: r for r in routes[k]}
        assert len(by_listen) == len(routes[k]) == m - 1 - k  # a route for each party k dials, no more
        for q in range(m):
            if q == k:
                continue
            if q > k:  # Runtime.start: party k dials every party q > k at q's entry in k's own list
                assert addrs[q][0] == "127.0.0.1"  # in k's namespace: the proxy, never q itself
                r = by_listen[addrs[q]]
                assert r.target == listens[q] and r.delay_s == pytest.approx(rtt_ms / 2 / 1e3)
                delayed |= {(k, q), (q, k)}  # one connection, each direction held rtt/2
            else:  # never dialled by k; nothing listens there in k's namespace
                assert addrs[q] not in by_listen and addrs[q][0] == "127.0.0.1"
    assert delayed == {(i, j) for i in range(m) for j in range(m) if i != j}
    ours = {wan_net.PROXY_BASE + q for q in range(1, 16)} | {wan_net.RELAY_PORT, wan_net.PARTY_PORT}
    assert not ours & {r.listen[1] for rs in routes for r in rs} and wan_mpyc.MPYC_PORT not in ours


def test_wan_mpyc_compare_rows() -> None:
    def ours(m: int, b: int, v: float, **kw: Any) -> dict[str, Any]:
        base = {"suite": "wan", "mode": "sign", "topology": "mesh", "m": m, "batch": b, "rtt_ms": 25.0}
        return {**base, "decisions_per_s": v, "latency_ms_median": 1e3 / v, "latency_rtts": 40 / v, **kw}

    mp = [
        {"m": m, "batch": b, "rtt_ms": 25.0, "decisions_per_s": v, "latency_ms_median": 1.0}
        | {"latency_rtts": 0.04, "mismatches": 0}
        for m, b, v in ((3, 1, 4.0), (3, 1000, 500.0), (5, 1, 2.0))
    ]
    recs = [
        ours(3, 1, 5.0, topology="relay"),
        ours(3, 1, 10.0, precompute="inline"),
        ours(3, 1, 6.0, security="abort", rounds=12),
        ours(3, 1, 1.0, security="abort"),  # a second record of the same key: the first is compared
        ours(3, 1000, 250.0),
        ours(5, 1, 9.0, mode="sum"),
        ours(5, 1, 9.0, rtt_ms=10.0),
    ]
    rows = wan_mpyc.compare(mp, recs)
    assert [(r["m"], r["batch"], r["security"], r["ours_over_mpyc"]) for r in rows] == [
        (3, 1, "semi-honest", 2.5),
        (3, 1, "abort", 1.5),  # MPyC is semi-honest only: our abort against its semi-honest
        (3, 1000, "semi-honest", 0.5),
        (5, 1, "semi-honest", None),
    ]
    assert rows[1]["ours_rounds"] == 12
    assert rows[0]["ours_decisions_per_s"] == 10.0 and rows[0]["ours_precompute"] == "inline"
    assert rows[0]["ours_latency_rtts"] == 4.0 and rows[0]["mpyc_latency_rtts"] == 0.04
    assert rows[3]["ours_decisions_per_s"] is None and all(r["suite"] == "wan-compare" for r in rows)


def test_wan_floor_counts_the_rounds_of_the_step() -> None:
    assert bench_wan.step_exchange_rounds(7, 6, 7) == 6  # sign inline / blocks4 in the step
    assert bench_wan.step_exchange_rounds(7, 6, 5) == 4  # blocks4, precompute made ahead of the step
    assert bench_wan.step_exchange_rounds(1, 0, 1) == 0  # sum


def test_wan_settings_parties_and_mpyc() -> None:
    ap = argparse.ArgumentParser()
    bench_wan.add_arguments(ap)
    s = bench_wan.settings_from_args(ap.parse_args(["--parties", "3", "5,7", "--mpyc", "--modes", "sign"]))
    assert s.ms == (3, 5, 7) and s.mpyc and s.m == 3
    assert bench_wan.settings_from_args(ap.parse_args([])).ms == (7,)
    with pytest.raises(ValueError, match="parties"):
        bench_wan.settings_from_args(ap.parse_args(["--parties", "3", "16"]))
    with pytest.raises(ValueError, match="--mpyc"):
        bench_wan.settings_from_args(ap.parse_args(["--mpyc", "--modes", "sum"]))
    both = ["--rtt-ms", "10", "25,50", "--security", "semi-honest,abort"]
    s = bench_wan.settings_from_args(ap.parse_args(both))
    assert s.rtt_list == (10.0, 25.0, 50.0) and s.rtt_ms == 10.0 and s.securities == ("semi-honest", "abort")
    assert bench_wan.settings_from_args(ap.parse_args([])).rtt_list == (25.0,)
    with pytest.raises(ValueError, match="security"):
        bench_wan.settings_from_args(ap.parse_args(["--security", "byzantine"]))
    with pytest.raises(ValueError, match="RTTs must be >= 0"):
        bench_wan.settings_from_args(ap.parse_args(["--rtt-ms", "25", "-1"]))
    args = ["--security", "abort", "--sign-precompute", "blocks4", "--precompute-ahead"]
    ahead = bench_wan.settings_from_args(ap.parse_args(args))  # the mask made ahead under abort too
    assert ahead.precompute_ahead and ahead.securities == ("abort",)


# ---- the namespace suite (root) --------------------------------------------------------------------------


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


def test_engine_share_sets_the_daemons_cpu_against_the_engines() -> None:
    """bench network's per-party CPU against that party's share of the engine alone (issue 26): the engine
    runs the record's own protocol (sign, m = 3, batch 4) in this process; a record without the daemons'
    CPU gets nothing."""
    from simulations.bench_network import engine_share

    rec = {"mode": "sign", "m": 3, "batch": 4, "party_cpu_ms_sum": 30.0}
    got = engine_share(rec, "inline", seconds=0.05)
    assert got["party_cpu_ms_mean"] == 10.0
    assert 0 < got["engine_cpu_ms_per_party"] < 100  # a batch of 4 takes milliseconds, not seconds
    assert got["party_cpu_over_engine"] == pytest.approx(10.0 / got["engine_cpu_ms_per_party"], rel=0.01)
    assert engine_share({"mode": "sign", "m": 3, "batch": 4}, "inline") == {}
