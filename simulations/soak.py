"""Soak: a long run of sign decisions through real ``confar-party`` daemons, with each daemon's resident
memory and open file descriptors sampled as it goes (issue 12).

m daemons (``LocalConsortium``: mutual TLS on loopback) serve one sign-mode ``gaussian-mean`` session;
the coordinator sends ``--decisions`` MH decisions in batches of ``--batch`` (random walk proposals
around the data mean). Every ``--sample-every`` batches it reads ``VmRSS`` from ``/proc/PID/status`` and
counts ``/proc/PID/fd`` for every daemon (and itself).

Pass criteria (the issue's): after the warm-up (the first ``--warmup`` fraction of the batches), each
daemon's RSS at the end is less than 10 % above its RSS just after the warm-up (medians of the first and of
the last up to 5 samples, as one sample swings by a few per cent), and each daemon's open descriptor count
is the same in every sample after the warm-up. The report also gives each daemon's least-squares RSS trend
(KiB per 100,000 decisions), which tells a slow leak from allocator noise over longer runs.

The decisions stay checked as well: for each tenth of the run, the number of accepts is compared with its
expectation sum_k min(1, e^{r_k}) (r_k the exact log-ratio recomputed from the pooled data in the clear):
z = (A - sum p) / sqrt(sum p(1-p)) must stay within +-``--z-max`` (default 5; ten windows, a false failure
probability below 1e-5 per run).

    .venv/bin/python -m simulations.soak --parties 7 --decisions 1000000 --batch 1000 --json soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import Coordinator, SessionOptions
from simulations.launcher import LocalConsortium

RSS_GROWTH_MAX = 0.10


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (``VmRSS``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Sample:
    batch: int  # batches done when sampled
    seconds: float
    rss_kib: dict[int, int]  # party id -> RSS (0: the coordinator process)
    fds: dict[int, int]


@dataclass
class SoakReport:
    m: int
    batch: int
    batches: int
    warmup_batches: int
    seconds: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    windows: list[dict[str, float]] = field(default_factory=list)  # accept checks per tenth of the run
    failures: list[str] = field(default_factory=list)

    @property
    def decisions(self) -> int:
        return self.batch * self.batches

    def evaluate(self, z_max: float) -> None:
        """Fill ``failures`` from the samples and the accept windows."""
        after = [s for s in self.samples if s.batch >= self.warmup_batches]
        if len(after) < 2:
            self.failures.append(
                f"only {len(after)} samples after the warm-up: run longer or sample more often"
            )
            return
        for pid in sorted(p for p in after[0].rss_kib if p > 0):
            first, last, growth = self.rss_growth(after, pid)
            if growth >= RSS_GROWTH_MAX:
                self.failures.append(
                    f"party {pid}: RSS grew {growth:.1%} after the warm-up ({first:.0f} -> {last:.0f} KiB, "
                    f"medians of the first and last samples), limit {RSS_GROWTH_MAX:.0%}"
                )
            counts = sorted({s.fds[pid] for s in after})
            if len(counts) > 1:
                self.failures.append(f"party {pid}: open descriptors varied after the warm-up: {counts}")
        for w in self.windows:
            if abs(w["z"]) > z_max:
                self.failures.append(
                    f"batches {int(w['first'])}-{int(w['last'])}: {int(w['accepts'])} accepts, expected "
                    f"{w['expected']:.1f} (z = {w['z']:.2f}, limit {z_max})"
                )

    @property
    def passed(self) -> bool:
        return not self.failures

    @staticmethod
    def rss_growth(after: list[Sample], pid: int) -> tuple[float, float, float]:
        """RSS of ``pid`` early and late after the warm-up (medians of the first and last k samples, k up
        to 5: one sample swings by a few per cent with the allocator) and the relative growth between."""
        k = max(1, min(5, len(after) // 4))
        first = float(np.median([s.rss_kib[pid] for s in after[:k]]))
        last = float(np.median([s.rss_kib[pid] for s in after[-k:]]))
        return first, last, last / first - 1.0

    @staticmethod
    def rss_slope(after: list[Sample], pid: int, batch: int) -> float | None:
        """Least-squares RSS trend after the warm-up, in KiB per 100,000 decisions."""
        if len(after) < 3:
            return None
        x = np.array([s.batch * batch for s in after], dtype=np.float64)
        y = np.array([s.rss_kib[pid] for s in after], dtype=np.float64)
        return float(np.polyfit(x, y, 1)[0] * 1e5)

    def summary(self) -> dict[str, Any]:
        after = [s for s in self.samples if s.batch >= self.warmup_batches]
        parties = sorted(p for p in self.samples[0].rss_kib if p > 0) if self.samples else []
        per_party = {}
        for pid in parties:
            grown = self.rss_growth(after, pid) if len(after) > 1 else None
            slope = self.rss_slope(after, pid, self.batch)
            per_party[str(pid)] = {
                "rss_kib_start": self.samples[0].rss_kib[pid],
                "rss_kib_after_warmup": round(grown[0]) if grown else None,
                "rss_kib_end": round(grown[1]) if grown else None,
                "rss_growth_after_warmup": round(grown[2], 4) if grown else None,
                "rss_kib_per_100k_decisions": round(slope, 1) if slope is not None else None,
                "fds": sorted({s.fds[pid] for s in after}),
            }
        return {
            "m": self.m,
            "batch": self.batch,
            "batches": self.batches,
            "decisions": self.decisions,
            "warmup_batches": self.warmup_batches,
            "seconds": round(self.seconds, 1),
            "decisions_per_s": round(self.decisions / self.seconds, 1) if self.seconds > 0 else None,
            "parties": per_party,
            "coordinator_rss_kib": [self.samples[0].rss_kib[0], self.samples[-1].rss_kib[0]]
            if self.samples
            else [],
            "windows": self.windows,
            "failures": self.failures,
            "passed": not self.failures,
        }


def _sample(lc: LocalConsortium, done: int, t0: float) -> Sample:
    pids = {pid: proc.proc.pid for pid, proc in lc.procs.items()}
    pids[0] = os.getpid()
    return Sample(
        done,
        time.perf_counter() - t0,
        {k: rss_kib(v) for k, v in pids.items()},
        {k: open_fds(v) for k, v in pids.items()},
    )


def _log_ratio(
    x_sum: float, n: int, sigma: float, theta: npt.NDArray[np.float64], prop: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]:
    """The exact (noise-free) MH log-ratio of gaussian-mean summed over all records, in the clear."""
    return ((prop - theta) * x_sum - 0.5 * n * (prop**2 - theta**2)) / sigma**2


async def soak(
    lc: LocalConsortium,
    data: list[npt.NDArray[np.float64]],
    *,
    batch: int,
    batches: int,
    warmup: float,
    sample_every: int,
    seed: int,
    precompute: str,
    progress: bool = False,
) -> SoakReport:
    x = np.concatenate(data)
    x_sum, n, sigma = float(x.sum()), x.size, 1.0
    # proposals of scale ~ the posterior's, so that about half are accepted (the accept check has power)
    step = 2.4 * sigma / math.sqrt(n)
    g = np.random.default_rng(seed)  # public: the proposals only
    rep = SoakReport(lc.m, batch, batches, max(1, round(warmup * batches)))
    n_windows = min(10, batches)
    bounds = np.linspace(0, batches, n_windows + 1).astype(int)
    acc = exp_sum = var_sum = 0.0
    async with Coordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=300.0) as coord:
        sess = await coord.open_session(SessionOptions(
            reveal_mode="sign",
            model="gaussian-mean",
            model_params={"model_args": {"sigma": sigma}},
            sign_precompute=precompute,
        ))
        try:
            t0 = time.perf_counter()
            rep.samples.append(_sample(lc, 0, t0))
            w = 1
            for k in range(batches):
                theta = float(x.mean()) + (sigma / math.sqrt(n)) * g.normal(size=batch)
                prop = theta + step * g.normal(size=batch)
                inputs: dict[str, npt.ArrayLike] = {"theta": theta, "theta_star": prop}
                inputs["public"] = np.zeros(batch)
                d = await sess.evaluate(inputs, batch)
                p = np.minimum(1.0, np.exp(np.minimum(0.0, _log_ratio(x_sum, n, sigma, theta, prop))))
                acc += float(np.count_nonzero(d.accept))
                exp_sum += float(p.sum())
                var_sum += float((p * (1 - p)).sum())
                done = k + 1
                if done == bounds[w]:
                    z = (acc - exp_sum) / math.sqrt(var_sum) if var_sum > 0 else 0.0
                    rep.windows.append(
                        {
                            "first": float(bounds[w - 1] + 1),
                            "last": float(done),
                            "accepts": acc,
                            "expected": round(exp_sum, 2),
                            "z": round(z, 3),
                        }
                    )
                    acc = exp_sum = var_sum = 0.0
                    w += 1
                if done % sample_every == 0 or done == batches or done == rep.warmup_batches:
                    rep.samples.append(_sample(lc, done, t0))
                    if progress:
                        s = rep.samples[-1]
                        rss = ", ".join(f"{s.rss_kib[p] // 1024}" for p in sorted(s.rss_kib) if p > 0)
                        print(
                            f"{done * batch:>9} decisions {s.seconds:7.1f} s  RSS MiB [{rss}]  "
                            f"fds {sorted(set(v for p, v in s.fds.items() if p > 0))}",
                            file=sys.stderr,
                            flush=True,
                        )
            rep.seconds = time.perf_counter() - t0
        finally:
            await sess.close()
    return rep


@dataclass(frozen=True)
class SoakSettings:
    """How a soak run is made: the warm-up share of its decisions, how many latency samples, the public seed,
    the sign precompute, the z bound the decisions are checked at, records per registry, the work folder and
    whether to print progress."""

    warmup: float = 0.1
    samples: int = 50
    seed: int = 1
    precompute: str = "pooled"
    z_max: float = 5.0
    records: int = 200
    workdir: Path | None = None
    progress: bool = False


def run_soak(m: int, decisions: int, batch: int, settings: SoakSettings | None = None) -> SoakReport:
    _s = settings if settings is not None else SoakSettings()
    warmup, samples, seed = _s.warmup, _s.samples, _s.seed
    precompute, z_max, records = _s.precompute, _s.z_max, _s.records
    workdir, progress = _s.workdir, _s.progress
    if m < 3 or batch < 1 or decisions < batch:
        raise ValueError(
            f"need m >= 3, batch >= 1, decisions >= batch; got m={m}, batch={batch}, {decisions}"
        )
    batches = decisions // batch
    g = np.random.default_rng(seed + 1)
    data = [g.normal(1.0, 1.0, records) for _ in range(m)]
    with LocalConsortium.start(m, data, workdir=workdir, round_timeout_s=300.0) as lc:
        rep = asyncio.run(
            soak(
                lc,
                data,
                batch=batch,
                batches=batches,
                warmup=warmup,
                sample_every=max(1, batches // samples),
                seed=seed,
                precompute=precompute,
                progress=progress,
            )
        )
        dead = [pid for pid, proc in lc.procs.items() if proc.proc.poll() is not None]
        if dead:
            rep.failures.append(f"daemons exited during the soak: {dead}")
    rep.evaluate(z_max)
    return rep


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m simulations.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--parties", type=int, default=7, help="daemons (default 7)")
    p.add_argument("--decisions", type=int, default=1_000_000, help="sign decisions in all (default 10^6)")
    p.add_argument("--batch", type=int, default=1000, help="decisions per batch (default 1000)")
    p.add_argument(
        "--warmup", type=float, default=0.1, help="fraction of the batches counted as warm-up (0.1)"
    )
    p.add_argument("--samples", type=int, default=50, help="about this many RSS/fd samples (default 50)")
    p.add_argument("--sign-precompute", choices=("inline", "pooled", "blocks4"), default="pooled")
    p.add_argument("--seed", type=int, default=1, help="public seed of the data and proposals (default 1)")
    p.add_argument("--z-max", type=float, default=5.0, help="limit of the accept-count check (default 5)")
    p.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="confar-soak-") as tmp:
        rep = run_soak(
            args.parties,
            args.decisions,
            args.batch,
            SoakSettings(
                warmup=args.warmup,
                samples=args.samples,
                seed=args.seed,
                precompute=args.sign_precompute,
                z_max=args.z_max,
                workdir=Path(tmp),
                progress=True,
            ),
        )
    out = rep.summary()
    out["date"] = datetime.now(UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    out["machine"] = f"{os.cpu_count()} CPU {platform.machine()}, CPython {platform.python_version()}"
    out["samples"] = [
        {"batch": s.batch, "seconds": round(s.seconds, 2), "rss_kib": s.rss_kib, "fds": s.fds}
        for s in rep.samples
    ]
    text = json.dumps(out, indent=1)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "samples"}, indent=1))
    for f in rep.failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 0 if rep.passed else 1


if __name__ == "__main__":
    sys.exit(main())
