"""``abcdp_repro flip``: the flip probability G_b(a) against a Monte Carlo estimate from Laplace draws."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mechanisms.abcdp import (
    flip_probability,
)
from simulations.abcdp_repro.common import (
    Row,
    pyplot,
    save_outputs,
)

FLIP_EPS_TOTALS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 50.0, 100.0)


def flip_repro(
    out_dir: Path,
    n_rho: int = 100,
    mc_draws: int = 20000,
    eps_abc: float = 0.2,
    data_sizes: Sequence[int] = (10, 100, 1000),
    cs: Sequence[int] = (10, 100, 1000),
    eps_totals: Sequence[float] = FLIP_EPS_TOTALS,
    resample: bool = True,
    seed: int = 0,
) -> list[Row]:
    """Flip probability G_b vs ε_total with a Monte Carlo check (Δ = 2/N)."""
    rng = np.random.default_rng(seed)
    rho = rng.uniform(0.0, 1.0, size=n_rho)
    a = np.abs(rho - eps_abc)
    abc = rho <= eps_abc
    rows: list[Row] = []
    formula = np.zeros((len(data_sizes), len(cs), len(eps_totals), n_rho))
    mc = np.zeros_like(formula)
    for i, n in enumerate(data_sizes):
        delta = 2.0 / n
        for j, c in enumerate(cs):
            for k, eps in enumerate(eps_totals):
                b = (2 * c if resample else c + 1) * delta / eps
                g = flip_probability(a, b)
                nu = rng.laplace(0.0, 2.0 * b, size=(mc_draws, n_rho))
                m = rng.laplace(0.0, b, size=(mc_draws, n_rho))
                flips = ((rho + nu <= eps_abc + m) != abc).mean(axis=0)
                formula[i, j, k], mc[i, j, k] = g, flips
                se = np.sqrt(np.maximum(g * (1 - g), 1e-12) / mc_draws)
                rows.append(
                    {
                        "N": n,
                        "c": c,
                        "eps_total": eps,
                        "b": b,
                        "G_mean": float(g.mean()),
                        "MC_mean": float(flips.mean()),
                        "max_abs_diff": float(np.max(np.abs(flips - g))),
                        "max_z": float(np.max(np.abs(flips - g) / se)),
                    }
                )
    plt = pyplot()
    fig, axes = plt.subplots(
        len(data_sizes), len(cs), figsize=(4.2 * len(cs), 3.2 * len(data_sizes)), sharey=True, squeeze=False
    )
    pos = np.arange(len(eps_totals))
    for i, n in enumerate(data_sizes):
        for j, c in enumerate(cs):
            ax = axes[i, j]
            ax.boxplot(
                [formula[i, j, k] for k in range(len(eps_totals))],
                positions=pos,
                widths=0.5,
                showfliers=False,
            )
            ax.plot(pos, formula[i, j].mean(axis=1), "-", color="C0", label="G_b (formula), mean over ρ")
            ax.plot(pos, mc[i, j].mean(axis=1), "x", color="C3", ms=8, label="Monte Carlo, mean over ρ")
            ax.set_xticks(pos, [f"{e:g}" for e in eps_totals], fontsize=7)
            ax.set_title(f"N={n}, c={c}", fontsize=9)
            if i == len(data_sizes) - 1:
                ax.set_xlabel("ε_total")
            if j == 0:
                ax.set_ylabel("flip probability")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(
        f"ABCDP flip probability, ρ ~ U[0,1], ε_abc = {eps_abc}, Δ = 2/N, "
        f"b = {'2c' if resample else '(c+1)'}Δ/ε_total"
    )
    save_outputs(fig, rows, out_dir, "flip", "Flip probability: formula G_b vs Monte Carlo")
    return rows
