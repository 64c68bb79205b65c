"""``confar bench ...``: the benchmarks (records as JSON), a command group ``simulations`` adds to ``confar``
(entry point ``bench`` in the group ``confar.commands``: :mod:`coordinator.plugins`)."""

from __future__ import annotations

from simulations import bench_all, bench_hss, bench_mcmc, bench_mpyc, bench_network, bench_wan

HELP = "benchmarks"
SUBCOMMANDS = [
    ("network", bench_network),
    ("hss", bench_hss),
    ("mcmc", bench_mcmc),
    ("mpyc", bench_mpyc),
    ("wan", bench_wan),
    ("all", bench_all),
]
