"""``abcdp_repro toy``: MAE of the posterior mean on the mixture-of-uniforms model over the paper's grid,
beside the reference code's results (``abcdp_toy_reference.json``)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mechanisms.abcdp import (
    RFFMMD,
    RandomFourierFeatures,
    SVTConfig,
    median_heuristic_bandwidth,
    run_svt_on_distances,
)
from mechanisms.simulators import (
    ToyMixtureModel,
)
from simulations.abcdp_repro.common import (
    FloatArray,
    Row,
    generators,
    load_shared_json,
    parse_eps,
    pyplot,
    save_outputs,
    standard_error,
    write_table,
)


@dataclass(frozen=True)
class ToyRun:
    """One run's public simulations: candidates, their distances, and the distance's sensitivity."""

    thetas: FloatArray
    distances: FloatArray
    sensitivity: float
    bandwidth: float


def toy_simulate_run(
    rng: np.random.Generator,
    theta_true: FloatArray,
    n_obs: int,
    n_candidates: int,
    n_features: int = 100,
    bandwidth: float | str = 0.6,
    batch: int = 250,
) -> ToyRun:
    """Observed data (the private data of this run), RFF features, candidates and their RFF-MMD distances."""
    model = ToyMixtureModel(n_components=theta_true.shape[0])
    observed = model.simulate(theta_true, n_obs, rng)[0]
    if bandwidth == "median":
        h = median_heuristic_bandwidth(model.simulate(model.sample_prior(rng, 20), 500, rng)[..., None], rng)
    else:
        h = float(bandwidth)
    features = RandomFourierFeatures.draw(rng, 1, n_features, h)
    dist = RFFMMD.from_observed(features, observed, simulated_dtype=np.float32)
    thetas = model.sample_prior(rng, n_candidates)
    rho = np.empty(n_candidates)
    for s in range(0, n_candidates, batch):
        rho[s : s + batch] = dist(model.simulate(thetas[s : s + batch], n_obs, rng))
    return ToyRun(thetas, rho, dist.sensitivity, h)


#: A cell of the toy grid: (c, ε_abc, ε_total, RESAMPLE).
ToyCell = tuple[int, float, float, bool]

#: The reference code's toy results (ParkLabML/ABCDP, independent runs), in the data folder.
TOY_REFERENCE_FILE = "abcdp_toy_reference.json"


@dataclass(frozen=True)
class ToyReferenceCell:
    """One cell of the reference code's toy results: MAE mean and its standard error over the runs.

    ``resample`` is None where RESAMPLE makes no difference (ε_total = ∞: no noise at all).
    """

    eps_total: float
    resample: bool | None
    mae: float
    se: float


@dataclass(frozen=True)
class ToyReference:
    """The reference code's toy results at one (c, ε_abc), with the settings they were run at."""

    c: int
    eps_abc: float
    runs: int
    settings: dict[str, Any]
    cells: tuple[ToyReferenceCell, ...]

    def setting_differences(
        self, n_obs: int, n_candidates: int, n_features: int, bandwidth: float | str
    ) -> list[str]:
        """How a toy run's sizes differ from the reference's ("name ours vs reference"); empty if none do."""
        s = self.settings
        ref_bw = math.sqrt(float(s["rff_bandwidth_sq"]))
        pairs: list[tuple[str, Any, Any, bool]] = [
            ("N", n_obs, int(s["n_observed"]), n_obs == int(s["n_observed"])),
            ("candidates", n_candidates, int(s["max_candidates"]), n_candidates == int(s["max_candidates"])),
            ("RFF features", n_features, int(s["rff_features"]), n_features == int(s["rff_features"])),
            (
                "bandwidth",
                bandwidth,
                f"{ref_bw:g}",
                not isinstance(bandwidth, str) and math.isclose(float(bandwidth), ref_bw, rel_tol=1e-9),
            ),
        ]
        return [f"{name} {ours} vs {ref}" for name, ours, ref, same in pairs if not same]


def load_toy_reference(data_dir: Path | str | None = None) -> ToyReference:
    """Read ``abcdp_toy_reference.json`` (see the data folder's README); fails clearly on a malformed file."""
    data = load_shared_json(TOY_REFERENCE_FILE, data_dir)
    try:
        settings = dict(data["settings"])
        cells = tuple(
            ToyReferenceCell(
                eps_total=parse_eps(str(cell["eps_total"])),
                resample=None if cell["resample"] is None else bool(cell["resample"]),
                mae=float(cell["mae"]),
                se=float(cell["se"]),
            )
            for cell in data["cells"]
        )
        return ToyReference(
            c=int(settings["c"]),
            eps_abc=float(settings["eps_abc"]),
            runs=int(settings["runs"]),
            settings=settings,
            cells=cells,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{TOY_REFERENCE_FILE}: expected 'settings' (c, eps_abc, runs, n_observed, max_candidates, "
            f"rff_features, rff_bandwidth_sq) and 'cells' (eps_total, resample, mae, se): {exc!r}"
        ) from exc


def z_score(ours: float, se_ours: float, reference: float, se_reference: float) -> float:
    """(ours − reference) / √(se_ours² + se_reference²): the difference in units of its standard error."""
    return (ours - reference) / math.sqrt(se_ours**2 + se_reference**2)


def _matches(row: Row, reference: ToyReference, cell: ToyReferenceCell) -> bool:
    return (
        row["c"] == reference.c
        and math.isclose(row["eps_abc"], reference.eps_abc, rel_tol=1e-9)
        and math.isclose(row["eps_total"], cell.eps_total, rel_tol=1e-9)  # also true for ∞ == ∞
        and (cell.resample is None or row["resample"] == cell.resample)
    )


def compare_toy_to_reference(rows: Sequence[Row], reference: ToyReference) -> list[Row]:
    """One row per reference cell that ``rows`` (toy_repro's table) covers: both figures and the z-score.

    ``rows`` must carry ``mae_mean`` and ``mae_se`` (the standard error of the mean over the runs). A
    reference cell with ``resample`` None (ε_total = ∞) is compared with our run without RESAMPLE (with no
    noise the two modes accept the same candidates). Cells outside the run's grid are left out.
    """
    out: list[Row] = []
    for cell in reference.cells:
        ours = [r for r in rows if _matches(r, reference, cell)]
        if not ours:
            continue
        row = min(ours, key=lambda r: bool(r["resample"]))  # no-RESAMPLE first where both match
        out.append(
            {
                "c": reference.c,
                "eps_abc": reference.eps_abc,
                "eps_total": cell.eps_total,
                "resample": "any" if cell.resample is None else cell.resample,
                "ref_mae": cell.mae,
                "ref_se": cell.se,
                "ref_runs": reference.runs,
                "mae_mean": row["mae_mean"],
                "mae_se": row["mae_se"],
                "runs": row["runs_with_accepts"],
                "diff": row["mae_mean"] - cell.mae,
                "z": z_score(row["mae_mean"], row["mae_se"], cell.mae, cell.se),
            }
        )
    return out


@dataclass(frozen=True)
class ToyGrid:
    """The toy grid's settings (ABCDP paper section 6.1): repetitions, candidates, observations, the grid of
    c, eps_abc and eps_total, the kernel's bandwidth and features, the public seed, whether the noise is
    secure, the reference data's folder."""

    runs: int = 60
    n_candidates: int = 10000
    n_obs: int | None = None
    cs: Sequence[int] | None = None
    eps_abcs: Sequence[float] | None = None
    eps_totals: Sequence[float] | None = None
    resamples: Sequence[bool] = (False, True)
    bandwidth: float | str = 0.6
    n_features: int = 100
    seed: int = 0
    secure_noise: bool = False
    data_dir: Path | None = None


def toy_repro(out_dir: Path, settings: ToyGrid | None = None) -> list[Row]:
    """MAE of the ABCDP posterior mean on the toy model over the paper's grid, beside the reference code's.

    Each row holds the mean MAE over the runs and its standard error (sample s.d. over the runs with at
    least one accept / √their number); rows of a cell in ``abcdp_toy_reference.json`` also hold the
    reference code's figure, its standard error and the z-score of the difference (NaN elsewhere). The
    comparison alone is written to ``toy_reference.csv`` / ``.md`` and drawn in the figure's last panel.
    """
    _s = settings if settings is not None else ToyGrid()
    runs, n_candidates, n_obs = _s.runs, _s.n_candidates, _s.n_obs
    cs, eps_abcs, eps_totals = _s.cs, _s.eps_abcs, _s.eps_totals
    resamples, bandwidth, n_features = _s.resamples, _s.bandwidth, _s.n_features
    seed, secure_noise, data_dir = _s.seed, _s.secure_noise, _s.data_dir
    cfg = load_shared_json("abcdp_toy.json", data_dir)
    reference = load_toy_reference(data_dir)  # read before the long run, so a missing file fails at once
    theta_true = np.asarray(cfg["theta_true"], dtype=np.float64)
    grid = cfg["grid"]
    n_obs = int(cfg["n_observed"]) if n_obs is None else n_obs
    cs = list(grid["c"]) if cs is None else list(cs)
    eps_abcs = [float(e) for e in grid["eps_abc"]] if eps_abcs is None else list(eps_abcs)
    eps_totals = [float(e) for e in grid["eps_total"]] if eps_totals is None else list(eps_totals)
    keys = [(c, ea, et, rs) for c in cs for ea in eps_abcs for et in eps_totals for rs in resamples]
    errors, accepted = _toy_errors(
        keys, runs, seed, secure_noise, theta_true, n_obs, n_candidates, n_features, bandwidth
    )
    prior_mae = ToyMixtureModel.mean_absolute_error(ToyMixtureModel(theta_true.size).prior_mean, theta_true)
    rows: list[Row] = []
    for c, ea, et, rs in keys:
        e = np.asarray(errors[(c, ea, et, rs)])
        rows.append(
            {
                "c": c,
                "eps_abc": ea,
                "eps_total": et,
                "resample": rs,
                "mae_mean": float(e.mean()) if e.size else math.nan,
                "mae_se": standard_error(list(e)),
                "runs_with_accepts": int(e.size),
                "mean_accepted": float(np.mean(accepted[(c, ea, et, rs)])),
            }
        )
    comparison = compare_toy_to_reference(rows, reference)
    for row in rows:
        row.update(ref_mae=math.nan, ref_se=math.nan, z=math.nan)
        for cell in reference.cells:
            if _matches(row, reference, cell):
                row.update(ref_mae=cell.mae, ref_se=cell.se,
                           z=z_score(row["mae_mean"], row["mae_se"], cell.mae, cell.se))
    differences = reference.setting_differences(n_obs, n_candidates, n_features, bandwidth)
    caveat = f" (settings differ from the reference's: {', '.join(differences)})" if differences else ""
    if comparison:
        write_table(
            comparison, out_dir, "toy_reference",
            f"Toy grid vs the reference code ({reference.runs} independent runs), c = {reference.c}, "
            f"ε_abc = {reference.eps_abc:g}: ours {runs} runs{caveat}",
        )
        if differences:
            print(f"toy: the comparison with the reference is not like for like: {caveat.strip(' ()')}",
                  file=sys.stderr)
    plt = pyplot()
    n_panels = len(cs) + (1 if comparison else 0)
    fig, axes = plt.subplots(1, n_panels, figsize=(4.5 * n_panels, 3.8), squeeze=False)
    _plot_toy_grid(axes, rows, cs, eps_abcs, eps_totals, resamples, prior_mae)
    if comparison:
        _plot_toy_comparison(axes[0, -1], comparison, reference, runs)
    fig.suptitle(f"ABCDP toy: {runs} runs, {n_candidates} candidates, N = {n_obs}{caveat}", fontsize=10)
    title = f"Toy grid: MAE of posterior mean ({runs} runs, {n_candidates} candidates){caveat}"
    save_outputs(fig, rows, out_dir, "toy", title)
    return rows


def _toy_errors(
    keys: Sequence[ToyCell],
    runs: int,
    seed: int,
    secure_noise: bool,
    theta_true: FloatArray,
    n_obs: int,
    n_candidates: int,
    n_features: int,
    bandwidth: float | str,
) -> tuple[dict[ToyCell, list[float]], dict[ToyCell, list[int]]]:
    """Per grid cell: the MAE of each run with at least one accept, and every run's number of accepts."""
    errors: dict[ToyCell, list[float]] = {k: [] for k in keys}
    accepted: dict[ToyCell, list[int]] = {k: [] for k in keys}
    t0 = time.time()
    for r in range(runs):
        public, noise = generators(seed * 100003 + r, secure_noise)
        run = toy_simulate_run(public, theta_true, n_obs, n_candidates, n_features, bandwidth)
        for c, ea, et, rs in keys:
            config = SVTConfig.laplace(et, run.sensitivity, c, ea, rs)
            dec, _ = run_svt_on_distances(run.distances, config, noise)
            acc = run.thetas[: dec.shape[0]][dec]
            accepted[(c, ea, et, rs)].append(int(acc.shape[0]))
            if acc.shape[0]:
                mae = ToyMixtureModel.mean_absolute_error(acc.mean(axis=0), theta_true)
                errors[(c, ea, et, rs)].append(mae)
        print(f"toy: run {r + 1}/{runs} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    return errors, accepted


def _plot_toy_grid(
    axes: Any,
    rows: Sequence[Row],
    cs: Sequence[int],
    eps_abcs: Sequence[float],
    eps_totals: Sequence[float],
    resamples: Sequence[bool],
    prior_mae: float,
) -> None:
    """One panel per c: MAE against ε_abc, a line per (ε_total, RESAMPLE), the prior mean's MAE dotted."""
    for j, c in enumerate(cs):
        ax = axes[0, j]
        for k, et in enumerate(eps_totals):
            for rs in resamples:
                ys = [
                    next(
                        r["mae_mean"]
                        for r in rows
                        if r["c"] == c and r["eps_abc"] == ea and r["eps_total"] == et and r["resample"] == rs
                    )
                    for ea in eps_abcs
                ]
                ax.plot(
                    eps_abcs,
                    ys,
                    "-o" if rs else "--s",
                    color=f"C{k}",
                    ms=4,
                    label=f"ε_total={et:g}{' RESAMPLE' if rs else ''}",
                )
        ax.axhline(prior_mae, color="grey", lw=0.8, ls=":", label="prior mean")
        ax.set_xscale("log")
        ax.set_xticks(eps_abcs, [f"{e:g}" for e in eps_abcs])
        ax.minorticks_off()
        ax.set_xlabel("ε_abc (solid: RESAMPLE, dashed: no RESAMPLE)")
        ax.set_title(f"c = {c}")
        if j == 0:
            ax.set_ylabel("MAE of posterior mean")
        if j > 0:
            ax.sharey(axes[0, 0])
    axes[0, len(cs) - 1].legend(fontsize=6)


def _plot_toy_comparison(ax: Any, comparison: Sequence[Row], reference: ToyReference, runs: int) -> None:
    """Ours vs the reference code per compared cell (mean ± 1 s.e.), the z-score written above each pair."""
    pos = np.arange(len(comparison), dtype=np.float64)
    ours = np.array([r["mae_mean"] for r in comparison])
    ours_se = np.array([r["mae_se"] for r in comparison])
    ref = np.array([r["ref_mae"] for r in comparison])
    ref_se = np.array([r["ref_se"] for r in comparison])
    ax.errorbar(pos - 0.12, ours, yerr=ours_se, fmt="o", color="C0", capsize=3, label=f"ours, {runs} runs")
    ax.errorbar(pos + 0.12, ref, yerr=ref_se, fmt="s", color="k", capsize=3,
                label=f"reference code, {reference.runs} runs")
    top = np.maximum(ours + ours_se, ref + ref_se)
    for x, y, r in zip(pos, top, comparison, strict=True):
        ax.annotate(f"z = {r['z']:+.2f}", (x, y), textcoords="offset points", xytext=(0, 4), ha="center",
                    fontsize=7)
    labels = [
        f"ε={r['eps_total']:g}\n{'' if r['resample'] == 'any' else ('RS' if r['resample'] else 'no RS')}"
        for r in comparison
    ]
    ax.set_xticks(pos, labels, fontsize=7)
    ax.set_xlim(-0.6, len(comparison) - 0.4)
    ax.set_ylim(0.0, 1.25 * float(np.nanmax(top)))
    ax.set_title(f"vs reference code: c = {reference.c}, ε_abc = {reference.eps_abc:g}", fontsize=9)
    ax.set_ylabel("MAE of posterior mean (± 1 s.e.)")
    ax.legend(fontsize=6, loc="lower right")
