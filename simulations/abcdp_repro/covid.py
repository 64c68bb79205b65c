"""``abcdp_repro covid``: the cubic growth model's ABCDP posterior on the Dutch COVID-19 counts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mechanisms.abcdp import (
    RFFMMD,
    RandomFourierFeatures,
    SVTConfig,
    c_sample_abcdp,
    median_heuristic_bandwidth,
)
from mechanisms.simulators import (
    CovidCubicModel,
)
from simulations.abcdp_repro.common import (
    FloatArray,
    Row,
    generators,
    load_shared_json,
    pyplot,
    save_outputs,
)


@dataclass(frozen=True)
class CovidSettings:
    """The COVID-19 case study's settings (ABCDP paper section 6.3): candidates, accepts c, eps_abc and the
    eps_total grid, resampling, features, the public seed, whether the noise is secure, the data's folder."""

    n_candidates: int = 50000
    c: int = 10
    eps_abc: float = 0.02
    eps_totals: Sequence[float] = (math.inf, 100.0, 10.0)
    resample: bool = False
    n_features: int = 500
    seed: int = 0
    secure_noise: bool = False
    data_dir: Path | None = None


def covid_repro(out_dir: Path, settings: CovidSettings | None = None) -> list[Row]:
    """ABCDP posterior of the cubic growth model on the Dutch counts (RFF-MMD on per-day records)."""
    _s = settings if settings is not None else CovidSettings()
    n_candidates, c, eps_abc = _s.n_candidates, _s.c, _s.eps_abc
    eps_totals, resample, n_features = _s.eps_totals, _s.resample, _s.n_features
    seed, secure_noise, data_dir = _s.seed, _s.secure_noise, _s.data_dir
    data = load_shared_json("covid_nl_2020.json", data_dir)
    counts = np.asarray(data["counts"], dtype=np.float64)
    model = CovidCubicModel(n_days=counts.shape[0])
    public, noise = generators(seed, secure_noise)
    scale = model.prior_predictive_scale(public)
    pilot = model.records(model.simulate(model.sample_prior(public, 200), public), scale)
    bandwidth = median_heuristic_bandwidth(pilot, public)
    features = RandomFourierFeatures.draw(public, 2, n_features, bandwidth)
    dist = RFFMMD.from_observed(features, model.records(counts, scale), simulated_dtype=np.float32)

    def propose(n: int) -> tuple[FloatArray, FloatArray]:
        th = model.sample_prior(public, n)
        return th, dist(model.records(model.simulate(th, public), scale))

    rows: list[Row] = []
    results = []
    for eps in eps_totals:
        config = SVTConfig.laplace(eps, dist.sensitivity, c, eps_abc, resample)
        res = c_sample_abcdp(propose, config, noise, n_candidates, batch_size=5000)
        results.append((eps, res))
        mean = res.posterior_mean()
        sd = res.thetas.std(axis=0) if res.n_accepted > 1 else np.full(4, math.nan)
        row: Row = {
            "eps_total": eps,
            "c": c,
            "eps_abc": eps_abc,
            "b": config.threshold_scale,
            "n_evaluated": res.n_evaluated,
            "n_accepted": res.n_accepted,
        }
        for i, name in enumerate(("a0", "a1", "a2", "a3")):
            row[f"{name}_mean"], row[f"{name}_sd"] = float(mean[i]), float(sd[i])
        rows.append(row)
    plt = pyplot()
    fig, axes = plt.subplots(2, len(results), figsize=(4.5 * len(results), 7), squeeze=False)
    t = model.times
    for j, (eps, res) in enumerate(results):
        ax = axes[0, j]
        if res.n_accepted:
            ax.plot(t, model.trajectories(res.thetas).T, color="grey", alpha=0.5, lw=0.8)
            ax.plot(t, model.trajectories(res.posterior_mean())[0], "b-", lw=2, label="posterior mean curve")
        ax.plot(t, counts, "ro", label="observed")
        ax.set_ylim(-500, 3000)
        ax.set_title(f"ε_total = {eps:g}: {res.n_accepted} accepted / {res.n_evaluated}")
        ax.set_xlabel("day since 27 Feb 2020")
        ax.legend(fontsize=7)
        ax = axes[1, j]
        if res.n_accepted:
            ax.boxplot([res.thetas[:, i] for i in range(4)], showfliers=True)
        ax.set_xticks([1, 2, 3, 4], ["a0 (t³)", "a1 (t²)", "a2 (t)", "a3"])
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title("accepted coefficients (prior N(0, 1))")
    fig.suptitle(
        f"ABCDP COVID-19 cubic model, c = {c}, ε_abc = {eps_abc}, Δ = 2/18, RFF bandwidth "
        f"{bandwidth:.3g} (prior predictive), count scale {scale:.0f}"
    )
    save_outputs(fig, rows, out_dir, "covid", "COVID-19 cubic growth model: ABCDP posterior summaries")
    return rows
