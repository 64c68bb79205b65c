"""`confar bench network` at its smallest scale: real daemons and floor workers, the JSON records' schema,
and the transport floors below the protocol latencies they bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator import cli as confar_cli

pytestmark = pytest.mark.slow

COMMON = {
    "suite",
    "mode",
    "topology",
    "m",
    "batch",
    "decisions_per_s",
    "rounds",
    "messages",
    "bytes_per_decision",
    "latency_ms_median",
    "latency_ms_p90",
}


def test_bench_network_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    argv = ["bench", "network", "--quick", "--batches", "1", "--modes", "sum,sign"]
    rc = confar_cli.main([*argv, "--repeats", "3", "--floor-repeats", "10", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "sign at m = 3" in printed
    records = json.loads(out.read_text())
    for r in records:
        assert COMMON <= set(r), sorted(COMMON - set(r))
        assert r["latency_ms_median"] > 0 and r["latency_ms_p90"] >= r["latency_ms_median"]
    net = [r for r in records if r["suite"] == "network"]
    floor = [r for r in records if r["suite"] == "floor"]
    assert {(r["mode"], r["topology"]) for r in net} == {
        (mo, t) for mo in ("sum", "sign") for t in ("mesh", "relay")
    }
    assert all(r["m"] == 3 and r["batch"] == 1 for r in records)
    fan = {r["mode"]: r for r in floor if r["floor"] == "fanout"}
    ex = {(r["mode"], r["topology"]): r for r in floor if r["floor"] == "exchange"}
    assert set(fan) == {"sum", "sign"}
    assert set(ex) == {("sign", t) for t in ("mesh", "relay", "relay-packed")}  # sum has no peer rounds
    for r in net:
        assert r["rounds"] == {"sum": 1, "sign": 7}[r["mode"]]
        assert r["exchange_rounds"] == {"sum": 0, "sign": 6}[r["mode"]]
        assert r["party_handler_ms"] > 0 and r["cpu_bound_ms"] > 0
        assert fan[r["mode"]]["latency_ms_median"] < r["latency_ms_median"]
        if r["mode"] == "sign":
            assert ex[("sign", r["topology"])]["latency_ms_median"] < r["latency_ms_median"]
            assert r["floor_ms"] < r["latency_ms_median"] and r["floor_ratio"] > 1
