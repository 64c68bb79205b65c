"""``confar bench all``: every benchmark suite in sequence into one JSON file, a summary table and plots.

Sections, in order: ``hss`` (:mod:`simulations.bench_hss`), ``network`` (:mod:`simulations.bench_network`),
``mcmc`` (:mod:`simulations.bench_mcmc`), ``mpyc`` (:mod:`simulations.bench_mpyc`, compared with this run's
network and hss records) and ``wan`` (:mod:`simulations.bench_wan`), each run by its own code with its own
options, plus ``machine`` (CPU model, cores, RAM, Python, date, git commit). A suite that cannot run here
(mpyc not installed, no root for namespaces) is recorded as ``{"skipped": reason}``; one that fails is
recorded as ``{"error": message}`` and the others still run (exit code 1 at the end).

Plots (PNG, next to the JSON: ``bench-batch.png``, ``bench-parties.png``): sign decisions/s against the
batch size, one panel per m, and against m at the largest batch, one line per suite (hss inline and
pooled, network mesh, MPyC, WAN); and Markdown tables for docs/BENCHMARKS.md (the JSON's name with
``.md``). ``--replot`` redoes table, Markdown and plots from an existing JSON. ``--quick`` is a smoke run
(tiny settings, about two minutes on a busy 2-core machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HELP = "run the hss, network, mcmc, mpyc and wan benchmarks into one JSON, with a table and plots"
SUITES = ("hss", "network", "mcmc", "mpyc", "wan")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, required=True, help="write all sections to this JSON file")
    p.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated subset of {','.join(SUITES)}")
    p.add_argument("--quick", action="store_true", help="smoke run with tiny settings (for tests)")
    p.add_argument("--rtt-ms", type=float, default=25.0, help="WAN suite round-trip time (default 25)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--replot", action="store_true", help="run nothing: redo the table, Markdown and plots from --json"
    )


# ---- machine facts --------------------------------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    """CPU model, cores, RAM, Python, kernel, date, git commit (and whether the tree had changes)."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gib = round(int(line.split()[1]) / 2**20, 1)
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            res = subprocess.run(
                ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return res.stdout.strip() if res.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "ram_gib": ram_gib,
        "machine": platform.machine(),
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "load_average_1min_at_start": round(os.getloadavg()[0], 2),
    }


# ---- suites ---------------------------------------------------------------------------------------------


def _run_module(module: Any, argv: list[str]) -> Any:
    """Run a ``confar bench X`` module with ``argv`` plus ``--json tmp``; returns what it wrote."""
    ap = argparse.ArgumentParser()
    module.add_arguments(ap)
    with tempfile.TemporaryDirectory(prefix="confar-bench-all-") as tmp:
        out = Path(tmp, "out.json")
        code = module.run(ap.parse_args([*argv, "--json", str(out)]))
        if code != 0:
            raise RuntimeError(f"exited with code {code}")
        return json.loads(out.read_text())


def suite_settings(quick: bool, rtt_ms: float) -> dict[str, list[str]]:
    """The command-line options each suite runs with (recorded in the JSON)."""
    if quick:
        return {
            "hss": ["--parties", "3", "--batches", "1,10", "--seconds", "0.05"],
            "network": [
                "--quick",
                "--batches",
                "1,10",
                "--topologies",
                "mesh",
                "--repeats",
                "2",
                "--warmup",
                "1",
                "--floor-repeats",
                "5",
            ],
            "mcmc": [
                "--parties",
                "3",
                "--records",
                "50",
                "--covariates",
                "1",
                "--chains",
                "2",
                "--iterations",
                "20",
            ],
            "mpyc": ["--parties", "3", "--batch", "1", "10", "--repeats", "2", "--warmup", "1"],
            "wan": [
                "--parties",
                "3",
                "--rtt-ms",
                f"{rtt_ms:g}",
                "--batch",
                "1",
                "--repeats",
                "2",
                "--warmup",
                "1",
            ],
        }
    return {
        "hss": ["--seconds", "1.5"],
        "network": ["--repeats", "10", "--warmup", "2", "--floor-repeats", "50"],
        "mcmc": [],
        "mpyc": [
            "--parties",
            "3",
            "5",
            "7",
            "--batch",
            "1",
            "100",
            "1000",
            "--repeats",
            "10",
            "--warmup",
            "2",
        ],
        "wan": ["--parties", "7", "--rtt-ms", f"{rtt_ms:g}", "--batch", "1", "100", "1000"],
    }


def _mpyc_section(argv: list[str], sections: dict[str, Any]) -> dict[str, Any]:
    from simulations import bench_mpyc

    ap = argparse.ArgumentParser()
    bench_mpyc.add_arguments(ap)
    a = ap.parse_args(argv)
    ours = [r for k in ("hss", "network") for r in sections.get(k, {}).get("records", [])]
    sec = bench_mpyc.suite(
        bench_mpyc.ints(a.parties, [3, 5, 7]),
        bench_mpyc.ints(a.batch, [1, 100, 1000]),
        a.repeats,
        a.warmup,
        bench_mpyc.MpycSuiteOptions(
            sec_param=a.sec_param,
            seed=a.seed,
            ours=ours,
        ),
    )
    if any(r["mismatches"] for r in sec.get("records", [])):
        raise RuntimeError("MPyC revealed bits differ from the plaintext")
    return sec


def _wan_section(argv: list[str]) -> dict[str, Any]:
    from simulations import bench_wan

    ap = argparse.ArgumentParser()
    bench_wan.add_arguments(ap)
    with bench_wan.sigterm_as_interrupt():
        return bench_wan.suite(bench_wan.settings_from_args(ap.parse_args(argv)))


def run_suites(names: list[str], quick: bool, rtt_ms: float) -> dict[str, Any]:
    from simulations import bench_hss, bench_mcmc, bench_network

    settings = suite_settings(quick, rtt_ms)
    sections: dict[str, Any] = {"machine": machine_facts()}
    runners: dict[str, Callable[[list[str]], dict[str, Any]]] = {
        "hss": lambda a: {"records": _run_module(bench_hss, a)},
        "network": lambda a: {"records": _run_module(bench_network, a)},
        "mcmc": lambda a: {"record": _run_module(bench_mcmc, a)},
        "mpyc": lambda a: _mpyc_section(a, sections),
        "wan": _wan_section,
    }
    for name in names:
        argv = settings[name]
        print(f"\n=== {name}: confar bench {name} {' '.join(argv)}", flush=True)
        t0 = time.perf_counter()
        try:
            sec = runners[name](argv)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # one failed suite must not lose the others' figures
            traceback.print_exc()
            sec = {"error": f"{type(exc).__name__}: {exc}"}
        sec["argv"] = argv
        sec["wall_s"] = round(time.perf_counter() - t0, 1)
        if "skipped" in sec:
            print(f"{name}: skipped: {sec['skipped']}", flush=True)
        sections[name] = sec
    sections["machine"]["load_average_1min_at_end"] = round(os.getloadavg()[0], 2)
    return sections


# ---- summary: table and plots -----------------------------------------------------------------------------


def sign_series(sections: dict[str, Any]) -> dict[str, dict[tuple[int, int], float]]:
    """Sign decisions/s by (m, batch), one series per suite/variant."""
    series: dict[str, dict[tuple[int, int], float]] = {}

    def add(label: str, r: dict[str, Any]) -> None:
        if r.get("mode") == "sign" and r.get("decisions_per_s"):
            series.setdefault(label, {})[(int(r["m"]), int(r["batch"]))] = float(r["decisions_per_s"])

    for r in sections.get("hss", {}).get("records", []):
        add(f"hss ({r.get('precompute')}, one process)", r)
    for r in sections.get("network", {}).get("records", []):
        if r.get("suite") == "network":
            add(f"daemons on loopback ({r.get('topology')}, mTLS)", r)
    for r in sections.get("mpyc", {}).get("records", []):
        add("MPyC 0.11 (processes, TCP)", r)
    for r in sections.get("wan", {}).get("records", []):
        add(f"WAN {r.get('rtt_ms'):g} ms RTT ({r.get('topology')})", r)
    return series


def print_table(sections: dict[str, Any]) -> None:
    series = sign_series(sections)
    keys = sorted({k for s in series.values() for k in s})
    print("\nsign: decisions/s")
    labels = list(series)
    print(f"{'m':>3} {'batch':>6}  " + "  ".join(f"{lab[:26]:>26}" for lab in labels))
    for m, b in keys:
        cells = [
            f"{series[lab][(m, b)]:>26,.1f}" if (m, b) in series[lab] else f"{'-':>26}" for lab in labels
        ]
        print(f"{m:>3} {b:>6}  " + "  ".join(cells))
    for name in SUITES:
        sec = sections.get(name)
        if isinstance(sec, dict) and ("skipped" in sec or "error" in sec):
            print(f"{name}: {sec.get('skipped') or sec.get('error')}")
    mc = sections.get("mcmc", {}).get("record")
    if isinstance(mc, dict):
        print(
            f"mcmc: wall ratio confidential/plain {mc['wall_ratio']}x, ESS/s ratio {mc['ess_per_s_ratio']}x, "
            f"max |mean diff| {mc['max_mean_diff_in_mcse']} MCSE"
        )


def plot(sections: dict[str, Any], out_dir: Path) -> list[Path]:
    """bench-batch.png (decisions/s vs batch, a panel per m) and bench-parties.png (vs m, largest batch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = sign_series(sections)
    if not series:
        return []
    ms = sorted({m for s in series.values() for m, _ in s})
    batches = sorted({b for s in series.values() for _, b in s})
    paths = []
    fig, axes = plt.subplots(1, len(ms), figsize=(4.2 * len(ms), 3.8), squeeze=False, sharey=True)
    for ax, m in zip(axes[0], ms, strict=True):
        for label, s in series.items():
            pts = sorted((b, v) for (mm, b), v in s.items() if mm == m)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"sign, m = {m}")
        ax.set_xlabel("batch size (decisions per protocol run)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("decisions / s")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    paths.append(out_dir / "bench-batch.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    big = max(batches)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, s in series.items():
        pts = sorted((m, v) for (m, b), v in s.items() if b == big)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_yscale("log")
    ax.set_xticks(ms)
    ax.set_xlabel("parties m")
    ax.set_ylabel("decisions / s")
    ax.set_title(f"sign, batch {big}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    paths.append(out_dir / "bench-parties.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def _cell(v: Any, digits: int = 1) -> str:
    if isinstance(v, bool) or v is None:
        return "—" if v is None else str(v)
    if isinstance(v, int | float):
        return f"{v:,.{digits}f}"
    return str(v)


def markdown(sections: dict[str, Any]) -> str:
    """Markdown tables of a run (for docs/BENCHMARKS.md): machine, sign series, MPyC side by side, WAN."""
    mf = sections.get("machine", {})
    dirty = " (with local changes)" if mf.get("git_dirty") else ""
    lines = [
        f"Machine: {mf.get('cpu_model')}, {mf.get('cores')} cores, {mf.get('ram_gib')} GiB, "
        f"{mf.get('python')}, kernel {mf.get('kernel')}; {mf.get('date')}; "
        f"commit {str(mf.get('git_commit'))[:12]}{dirty}; load average "
        f"{mf.get('load_average_1min_at_start')} at the start, "
        f"{mf.get('load_average_1min_at_end')} at the end.",
        "",
    ]
    series = sign_series(sections)
    if series:
        labels = list(series)
        lines += ["| m | batch | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
        for m, b in sorted({k for v in series.values() for k in v}):
            lines.append(
                f"| {m} | {b} | " + " | ".join(_cell(series[lab].get((m, b))) for lab in labels) + " |"
            )
        lines.append("")
    rows = sections.get("mpyc", {}).get("comparison", [])
    if rows:
        lines += [
            "| m | batch | MPyC /s | ours, daemons mesh /s | ratio | ours, hss inline /s | ratio "
            "| ours, hss pooled /s | ratio |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            cells = [r["m"], r["batch"], _cell(r["mpyc_decisions_per_s"])]
            for key in ("ours_network_mesh", "ours_hss_inline", "ours_hss_pooled"):
                cells += [_cell(r[f"{key}_decisions_per_s"]), _cell(r[f"{key}_over_mpyc"], 2)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
    wan = sections.get("wan", {}).get("records", [])
    if wan:
        lines += [
            "| mode | topology | m | RTT ms | batch | decisions/s | median ms | p90 ms | rounds "
            "| propagation floor ms | median in RTTs |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in wan:
            cells = [r["mode"], r["topology"], r["m"], f"{r['rtt_ms']:g}", r["batch"]]
            cells += [_cell(r[k]) for k in ("decisions_per_s", "latency_ms_median", "latency_ms_p90")]
            cells += [r["rounds"], _cell(r["latency_floor_ms"]), _cell(r["latency_rtts"], 2)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _summarise(sections: dict[str, Any], json_path: Path, plots: bool) -> None:
    print_table(sections)
    md = json_path.with_suffix(".md")
    md.write_text(markdown(sections))
    print(f"wrote {md}")
    if plots:
        for path in plot(sections, json_path.parent):
            print(f"wrote {path}")


def run(args: argparse.Namespace) -> int:
    if args.replot:
        try:
            sections = json.loads(args.json.read_text())
        except (OSError, ValueError) as exc:
            print(f"confar bench all: cannot read {args.json}: {exc}", file=sys.stderr)
            return 2
        _summarise(sections, args.json, not args.no_plots)
        return 0
    names = [s for s in args.suites.split(",") if s]
    bad = [s for s in names if s not in SUITES]
    if bad or not names:
        print(f"confar bench all: unknown suites {bad}; expected some of {SUITES}", file=sys.stderr)
        return 2
    if args.rtt_ms < 0:
        print("confar bench all: --rtt-ms must be >= 0", file=sys.stderr)
        return 2
    sections = run_suites(names, args.quick, args.rtt_ms)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(sections, indent=1) + "\n")
    print(f"\nwrote {args.json}")
    _summarise(sections, args.json, not args.no_plots)
    failed = [n for n in names if "error" in sections.get(n, {})]
    if failed:
        print(f"confar bench all: suites failed: {failed}", file=sys.stderr)
        return 1
    return 0
