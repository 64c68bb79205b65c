"""``abcdp_repro tb``: the tuberculosis birth-death model, posterior error with n private records and a
non-private posterior for the San Francisco data."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mechanisms.abcdp import (
    ClippedAveragedDistance,
    SVTConfig,
    c_sample_abcdp,
    clip_bound_from_simulations,
)
from mechanisms.simulators import (
    TuberculosisModel,
    observed_summary,
    tb_distance,
)
from mechanisms.simulators.tuberculosis import PARAM_NAMES
from simulations.abcdp_repro.common import (
    FloatArray,
    Row,
    generators,
    load_shared_json,
    pyplot,
    save_outputs,
    standard_error,
)

#: Reference parameters (R1, t1, R2, β) of the ABCDP TB experiment (the ABCDP reference code's values,
#: attributed there to Table 2 of Lintusaari et al. 2019).
TB_REFERENCE_THETA = np.array([5.88, 6.74, 0.09, 192.0])


@dataclass(frozen=True)
class TBPerRecord:
    """Per-record clipped distance for the TB records: mean over the K pseudo data sets of min(d, C).

    Record i's column uses record i's summaries only, so the averaged distance has sensitivity C/N.
    """

    clip: float

    def __call__(self, records: FloatArray, simulated: FloatArray) -> FloatArray:
        sims = np.asarray(simulated, dtype=np.float64)  # (B, K, 8)
        b, k, s = sims.shape
        d = tb_distance(sims.reshape(b * k, s), records).reshape(b, k, records.shape[0])
        return np.asarray(np.minimum(d, self.clip).mean(axis=1))


def tb_public_pilot(
    model: TuberculosisModel, rng: np.random.Generator, n_pilot: int = 200, clip_quantile: float = 0.5
) -> tuple[float, float]:
    """Clipping bound C and tolerance ε_abc from simulated data only.

    C: the ``clip_quantile`` quantile of distances between data sets simulated at independent prior draws.
    ε_abc: the median over prior draws θ₀ of min(d, C) between two data sets simulated at the same θ₀
    (the distance floor a perfect parameter reaches).
    """
    a = model.simulate(model.sample_prior(rng, n_pilot), rng)
    b = model.simulate(model.sample_prior(rng, n_pilot), rng)
    clip = clip_bound_from_simulations(tb_distance(a, b), clip_quantile)
    th = model.sample_prior(rng, n_pilot)
    same = tb_distance(model.simulate(th, rng), model.simulate(th, rng)).diagonal()
    return clip, float(np.median(np.minimum(same, clip)))


@dataclass(frozen=True)
class TbSettings:
    """The tuberculosis case study's settings (ABCDP paper section 6.4): records, candidates, pseudo-data sets
    per candidate, accepts c, eps_total, resampling, eps_abc, the clip, repeats, the public seed, whether the
    noise is secure, the data's folder."""

    records: Sequence[int] = (100, 1000)
    n_candidates: int = 1000
    n_pseudo: int = 5
    c: int = 10
    eps_total: float = 1.0
    resample: bool = False
    eps_abc: float | None = None
    clip: float | None = None
    sf_accept_fraction: float = 0.02
    repeats: int = 1
    seed: int = 0
    secure_noise: bool = False
    data_dir: Path | None = None


def tb_repro(out_dir: Path, settings: TbSettings | None = None) -> list[Row]:
    """TB posterior error with n private records at ε_total (and ∞), plus a non-private SF-data posterior.

    Each (n, ε) setting is run ``repeats`` times on the same private records with fresh candidates and
    noise; the table reports the mean (and standard error) of the MAE over the repeats and the pooled
    posterior means; the figure shows the pooled accepted samples.
    """
    _s = settings if settings is not None else TbSettings()
    records, n_candidates, n_pseudo = _s.records, _s.n_candidates, _s.n_pseudo
    c, eps_total, resample = _s.c, _s.eps_total, _s.resample
    eps_abc, clip, sf_accept_fraction = _s.eps_abc, _s.clip, _s.sf_accept_fraction
    repeats, seed, secure_noise = _s.repeats, _s.seed, _s.secure_noise
    data_dir = _s.data_dir
    sf = load_shared_json("tb_sf_1994.json", data_dir)
    sf_summary = observed_summary(
        sf["cluster_size_counts"],
        sf["largest_cluster_observation_months"],
        int(sf.get("observation_years", 2)),
    )
    model = TuberculosisModel()
    public, noise = generators(seed, secure_noise)
    pilot_clip, pilot_eps = tb_public_pilot(model, public)
    clip = pilot_clip if clip is None else clip
    eps_abc = pilot_eps if eps_abc is None else eps_abc
    rows: list[Row] = []
    posteriors: list[tuple[str, FloatArray]] = []
    for n in records:
        obs = model.simulate(np.repeat(TB_REFERENCE_THETA[None], n, axis=0), public)  # the private records
        dist = ClippedAveragedDistance(obs, TBPerRecord(clip), clip, n)

        def propose(m: int, dist: ClippedAveragedDistance = dist) -> tuple[FloatArray, FloatArray]:
            th = model.sample_prior(public, m)
            sims = model.simulate(np.repeat(th, n_pseudo, axis=0), public).reshape(m, n_pseudo, -1)
            return th, dist(sims)

        for eps in (eps_total, math.inf):
            config = SVTConfig.laplace(eps, dist.sensitivity, c, eps_abc, resample)
            maes, pooled, evaluated = _tb_repeats(propose, config, noise, n_candidates, repeats)
            mean = pooled.mean(axis=0) if pooled.shape[0] else np.full(4, math.nan)
            row: Row = {
                "data": f"{n} simulated records",
                "eps_total": eps,
                "c": c,
                "eps_abc": eps_abc,
                "clip_C": clip,
                "sensitivity": dist.sensitivity,
                "b": config.threshold_scale,
                "repeats": repeats,
                "mean_evaluated": float(np.mean(evaluated)),
                "mean_accepted": pooled.shape[0] / repeats,
                "mae": float(np.mean(maes)) if maes else math.nan,
                "mae_se": standard_error(maes),
            }
            for i, name in enumerate(PARAM_NAMES):
                row[f"{name}_mean"] = float(mean[i])
            rows.append(row)
            posteriors.append((f"n={n}, ε={eps:g}", pooled))
    # non-private rejection ABC on the (public) San Francisco data: keep the closest fraction
    sf_row, sf_samples = _tb_sf_posterior(model, public, sf_summary, n_candidates, sf_accept_fraction)
    rows.append(sf_row)
    posteriors.append(("SF data (non-private)", sf_samples))
    prior = model.sample_prior(public, 4000)
    fig = _plot_tb(posteriors, prior)
    fig.suptitle(
        f"ABCDP tuberculosis model: c = {c}, ε_abc = {eps_abc:.3g}, C = {clip:.3g}, "
        f"{n_candidates} candidates × {n_pseudo} pseudo data sets (black: reference θ)"
    )
    save_outputs(fig, rows, out_dir, "tb", "Tuberculosis model: ABCDP posterior means and errors", dpi=100)
    return rows


def _tb_repeats(
    propose: Callable[[int], tuple[FloatArray, FloatArray]],
    config: SVTConfig,
    noise: np.random.Generator,
    n_candidates: int,
    repeats: int,
) -> tuple[list[float], FloatArray, list[int]]:
    """``repeats`` ABCDP runs of one setting: MAEs, the pooled accepted θ's and the candidates evaluated."""
    maes: list[float] = []
    accepted: list[FloatArray] = []
    evaluated: list[int] = []
    for _ in range(repeats):
        res = c_sample_abcdp(propose, config, noise, n_candidates, batch_size=100)
        evaluated.append(res.n_evaluated)
        if res.n_accepted:
            accepted.append(res.thetas)
            maes.append(float(np.mean(np.abs(res.posterior_mean() - TB_REFERENCE_THETA))))
    pooled = np.concatenate(accepted) if accepted else np.zeros((0, 4))
    return maes, pooled, evaluated


def _tb_sf_posterior(
    model: TuberculosisModel,
    public: np.random.Generator,
    sf_summary: FloatArray,
    n_candidates: int,
    sf_accept_fraction: float,
) -> tuple[Row, FloatArray]:
    """Rejection ABC on the San Francisco data: its table row and the accepted θ's (the closest fraction)."""
    th = model.sample_prior(public, n_candidates)
    d = tb_distance(model.simulate(th, public), sf_summary)
    keep = np.argsort(d)[: max(1, round(sf_accept_fraction * n_candidates))]
    sf_mean = th[keep].mean(axis=0)
    sf_row: Row = {
        "data": "San Francisco 1991-92",
        "eps_total": math.inf,
        "c": int(keep.size),
        "eps_abc": float(d[keep].max()),
        "clip_C": math.nan,
        "sensitivity": math.nan,
        "b": 0.0,
        "repeats": 1,
        "mean_evaluated": float(n_candidates),
        "mean_accepted": float(keep.size),
        "mae": math.nan,
        "mae_se": math.nan,
    }
    for i, name in enumerate(PARAM_NAMES):
        sf_row[f"{name}_mean"] = float(sf_mean[i])
    return sf_row, th[keep]


def _plot_tb(posteriors: Sequence[tuple[str, FloatArray]], prior: FloatArray) -> Any:
    """Prior and pooled posterior histograms, a row per setting, a column per parameter."""
    plt = pyplot()
    plt = pyplot()
    fig, axes = plt.subplots(len(posteriors), 4, figsize=(14, 2.3 * len(posteriors)), squeeze=False)
    for i, (label, samples) in enumerate(posteriors):
        for j, name in enumerate(PARAM_NAMES):
            ax = axes[i, j]
            rng_ = (prior[:, j].min(), prior[:, j].max())
            ax.hist(prior[:, j], bins=30, range=rng_, density=True, color="lightgrey", label="prior")
            if samples.shape[0]:
                ax.hist(
                    samples[:, j], bins=15, range=rng_, density=True, alpha=0.7, color="C0", label="posterior"
                )
            ax.axvline(TB_REFERENCE_THETA[j], color="k", lw=1)
            if i == 0:
                ax.set_title(name)
            if j == 0:
                ax.set_ylabel(label, fontsize=8)
    axes[0, 0].legend(fontsize=7)
    return fig
