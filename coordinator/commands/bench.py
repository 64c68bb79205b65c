"""``confar bench ...``: benchmarks (records as JSON); every one lives in ``simulations/``."""

from __future__ import annotations

from coordinator.commands import Target

HELP = "benchmarks"
SUBCOMMANDS: list[tuple[str, Target]] = [
    ("network", "simulations.bench_network"),
    ("hss", "simulations.bench_hss"),
    ("mcmc", "simulations.bench_mcmc"),
    ("mpyc", "simulations.bench_mpyc"),
    ("wan", "simulations.bench_wan"),
    ("all", "simulations.bench_all"),
]
