"""``confar bench ...``: benchmarks (records as JSON)."""

from __future__ import annotations

HELP = "benchmarks"
SUBCOMMANDS: list[tuple[str, str]] = [
    ("network", "simulations.bench_network"),
    ("hss", "coordinator.bench_hss"),
    ("mcmc", "simulations.bench_mcmc"),
    ("mpyc", "simulations.bench_mpyc"),
    ("wan", "simulations.bench_wan"),
    ("all", "simulations.bench_all"),
]
