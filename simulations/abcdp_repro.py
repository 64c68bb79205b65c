"""Reproductions of the ABCDP paper's experiments (single-owner ABCDP), each writing a figure and a table.

Usage (from the repository root)::

    python -m simulations.abcdp_repro flip  --out DIR [--n-rho 100 --mc-draws 20000]
    python -m simulations.abcdp_repro toy   --out DIR [--runs 60 --candidates 10000 --n-obs 5000]
    python -m simulations.abcdp_repro covid --out DIR [--candidates 50000 --c 10]
    python -m simulations.abcdp_repro tb    --out DIR [--records 100 1000 --candidates 1000 --pseudo 5]
    python -m simulations.abcdp_repro federated --out DIR [--parties 7 --reps 10 --full-grid]

Each command writes ``<name>.png``, ``<name>.csv`` and ``<name>.md`` into DIR and prints the table. The
defaults are the paper's sizes where we know them (toy: 60 runs × 10,000 candidates of 5,000 points takes
roughly half an hour on one core); pass smaller sizes while developing.

What is reproduced (Park, Vinaroz, Jitkrittum, "ABCDP", Entropy 23 (2021) 961):

* ``flip``: the flip probability G_b(a) for ρ ~ U[0, 1], ε_abc = 0.2, N ∈ {10, 100, 1000},
  c ∈ {10, 100, 1000}, ε_total from 0.01 to 100, with Δ = 2/N (the paper's value; the reference script
  uses 1/N) and b = 2cΔ/ε_total (RESAMPLE, as in the reference figure; ``--no-resample`` for (c+1)Δ/ε),
  next to a Monte Carlo estimate of the same probability from Laplace draws.
* ``toy``: MAE of the posterior mean vs ε_abc for c ∈ {10, 100, 1000}, ε_total ∈ {0.5, 1, 10, ∞}, with and
  without RESAMPLE, RFF-MMD (100 features) on the mixture-of-uniforms model. The kernel bandwidth is the
  paper's public constant 0.6 (not derived from any data) or, with ``--bandwidth median``, the median
  heuristic on prior-predictive simulations. One set of simulations per run serves the whole grid.
  The cells in ``abcdp_toy_reference.json`` (the published code run over independent candidate pools) are
  compared with ours: both figures, their standard errors and z = (ours − ref) / √(se_ours² + se_ref²),
  in ``toy.csv``, in ``toy_reference.csv`` and in the figure's last panel.
* ``covid``: posterior of the cubic growth model for the Dutch counts, non-private and private.
* ``federated``: the toy grid (N = 5000) run by the single-owner sampler and by federated ABCDP over m
  parties (the in-memory secret-shared protocol of ``hss.svt``), on the same public candidates with
  independent noise; MAE distributions compared with a two-sample KS test per setting. Default grid
  c = 10, ε_abc ∈ {0.1, 0.2}, ε_total ∈ {1, ∞}, both RESAMPLE modes, 10 reps; ``--full-grid`` takes the
  paper's grid from ``abcdp_toy.json`` (long).
* ``tb``: the tuberculosis model: the posterior error (MAE over (R1, t1, R2, β)) with n = 100 vs 1000
  private records at ε_total = 1 (each record a data set simulated at the reference parameters, as in
  the paper), and a non-private rejection-ABC posterior for the San Francisco data.

Randomness: a public generator (simulations, candidates, random features) spawned from ``--seed``, and a
separate noise generator for the privacy noise, seeded from the OS CSPRNG by default (DP noise never comes
from the public seed); ``--seeded-noise`` spawns it from ``--seed`` too, for an exactly repeatable
simulation that gives no privacy. The library functions take ``secure_noise`` explicitly.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import secrets
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp import (
    RFFMMD,
    ClippedAveragedDistance,
    RandomFourierFeatures,
    SVTConfig,
    c_sample_abcdp,
    clip_bound_from_simulations,
    flip_probability,
    median_heuristic_bandwidth,
    run_svt_on_distances,
)
from mechanisms.simulators import (
    CovidCubicModel,
    ToyMixtureModel,
    TuberculosisModel,
    observed_summary,
    tb_distance,
)
from mechanisms.simulators.tuberculosis import PARAM_NAMES

FloatArray = npt.NDArray[np.float64]
Row = dict[str, Any]

#: Reference parameters (R1, t1, R2, β) of the ABCDP TB experiment (the ABCDP reference code's values,
#: attributed there to Table 2 of Lintusaari et al. 2019).
TB_REFERENCE_THETA = np.array([5.88, 6.74, 0.09, 192.0])


# -- data and output -----------------------------------------------------------------------------


def default_data_dir() -> Path:
    """``simulations/data`` (the copies shipped with the repository), else ``<repo>/../shared/data``."""
    shipped = Path(__file__).resolve().parent / "data"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def load_shared_json(name: str, data_dir: Path | str | None = None) -> dict[str, Any]:
    """Load ``name`` from the shared data directory; a clear error if it is missing."""
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    path = (base / name).resolve()
    if not path.is_file():
        raise FileNotFoundError(
            f"shared data file {path} not found: the ABCDP reproductions read simulations/data (shipped "
            f"with the repository) or ../shared/data; pass --data-dir DIR, the folder holding {name}"
        )
    with path.open() as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def _generators(seed: int, secure_noise: bool) -> tuple[np.random.Generator, np.random.Generator]:
    """(public, noise) generators; the noise one from the OS CSPRNG when ``secure_noise``."""
    public_ss, noise_ss = np.random.SeedSequence(seed).spawn(2)
    noise = np.random.default_rng(secrets.randbits(128)) if secure_noise else np.random.default_rng(noise_ss)
    return np.random.default_rng(public_ss), noise


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf"
        return f"{v:.4g}"
    return str(v)


def write_table(rows: Sequence[Row], out_dir: Path, name: str, title: str) -> Path:
    """Write ``name.csv`` and ``name.md`` (a markdown table); returns the markdown path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not rows:
        raise ValueError("no rows to write")
    cols = list(rows[0].keys())
    with (out_dir / f"{name}.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(r[k]) if isinstance(r[k], float) else r[k] for k in cols})
    lines = [f"# {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r[k]) for k in cols) + " |" for r in rows]
    md = out_dir / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def _se(values: Sequence[float]) -> float:
    """Standard error of the mean (NaN for fewer than two values)."""
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_outputs(fig: Any, rows: Sequence[Row], out_dir: Path, name: str, title: str, dpi: int = 110) -> None:
    """Write ``name.png`` from ``fig`` (then close it) and the table ``name.csv`` / ``name.md``."""
    plt = _pyplot()
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / f"{name}.png", dpi=dpi)
    plt.close(fig)
    write_table(rows, out_dir, name, title)


# -- flip probability ----------------------------------------------------------------------------


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
    plt = _pyplot()
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


# -- toy -----------------------------------------------------------------------------------------


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
                eps_total=_eps(str(cell["eps_total"])),
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


def toy_repro(
    out_dir: Path,
    runs: int = 60,
    n_candidates: int = 10000,
    n_obs: int | None = None,
    cs: Sequence[int] | None = None,
    eps_abcs: Sequence[float] | None = None,
    eps_totals: Sequence[float] | None = None,
    resamples: Sequence[bool] = (False, True),
    bandwidth: float | str = 0.6,
    n_features: int = 100,
    seed: int = 0,
    secure_noise: bool = False,
    data_dir: Path | None = None,
) -> list[Row]:
    """MAE of the ABCDP posterior mean on the toy model over the paper's grid, beside the reference code's.

    Each row holds the mean MAE over the runs and its standard error (sample s.d. over the runs with at
    least one accept / √their number); rows of a cell in ``abcdp_toy_reference.json`` also hold the
    reference code's figure, its standard error and the z-score of the difference (NaN elsewhere). The
    comparison alone is written to ``toy_reference.csv`` / ``.md`` and drawn in the figure's last panel.
    """
    cfg = load_shared_json("abcdp_toy.json", data_dir)
    reference = load_toy_reference(data_dir)  # read before the long run, so a missing file fails at once
    theta_true = np.asarray(cfg["theta_true"], dtype=np.float64)
    grid = cfg["grid"]
    n_obs = int(cfg["n_observed"]) if n_obs is None else n_obs
    cs = list(grid["c"]) if cs is None else list(cs)
    eps_abcs = [float(e) for e in grid["eps_abc"]] if eps_abcs is None else list(eps_abcs)
    eps_totals = [float(e) for e in grid["eps_total"]] if eps_totals is None else list(eps_totals)
    keys = [(c, ea, et, rs) for c in cs for ea in eps_abcs for et in eps_totals for rs in resamples]
    errors: dict[tuple[int, float, float, bool], list[float]] = {k: [] for k in keys}
    accepted: dict[tuple[int, float, float, bool], list[int]] = {k: [] for k in keys}
    prior_mae = ToyMixtureModel.mean_absolute_error(ToyMixtureModel(theta_true.size).prior_mean, theta_true)
    t0 = time.time()
    for r in range(runs):
        public, noise = _generators(seed * 100003 + r, secure_noise)
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
                "mae_se": _se(list(e)),
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
    plt = _pyplot()
    n_panels = len(cs) + (1 if comparison else 0)
    fig, axes = plt.subplots(1, n_panels, figsize=(4.5 * n_panels, 3.8), squeeze=False)
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
    if comparison:
        _plot_toy_comparison(axes[0, -1], comparison, reference, runs)
    fig.suptitle(f"ABCDP toy: {runs} runs, {n_candidates} candidates, N = {n_obs}{caveat}", fontsize=10)
    title = f"Toy grid: MAE of posterior mean ({runs} runs, {n_candidates} candidates){caveat}"
    save_outputs(fig, rows, out_dir, "toy", title)
    return rows


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


# -- COVID ---------------------------------------------------------------------------------------


def covid_repro(
    out_dir: Path,
    n_candidates: int = 50000,
    c: int = 10,
    eps_abc: float = 0.02,
    eps_totals: Sequence[float] = (math.inf, 100.0, 10.0),
    resample: bool = False,
    n_features: int = 500,
    seed: int = 0,
    secure_noise: bool = False,
    data_dir: Path | None = None,
) -> list[Row]:
    """ABCDP posterior of the cubic growth model on the Dutch counts (RFF-MMD on per-day records)."""
    data = load_shared_json("covid_nl_2020.json", data_dir)
    counts = np.asarray(data["counts"], dtype=np.float64)
    model = CovidCubicModel(n_days=counts.shape[0])
    public, noise = _generators(seed, secure_noise)
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
    plt = _pyplot()
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


# -- tuberculosis --------------------------------------------------------------------------------


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


def tb_repro(
    out_dir: Path,
    records: Sequence[int] = (100, 1000),
    n_candidates: int = 1000,
    n_pseudo: int = 5,
    c: int = 10,
    eps_total: float = 1.0,
    resample: bool = False,
    eps_abc: float | None = None,
    clip: float | None = None,
    sf_accept_fraction: float = 0.02,
    repeats: int = 1,
    seed: int = 0,
    secure_noise: bool = False,
    data_dir: Path | None = None,
) -> list[Row]:
    """TB posterior error with n private records at ε_total (and ∞), plus a non-private SF-data posterior.

    Each (n, ε) setting is run ``repeats`` times on the same private records with fresh candidates and
    noise; the table reports the mean (and standard error) of the MAE over the repeats and the pooled
    posterior means; the figure shows the pooled accepted samples.
    """
    sf = load_shared_json("tb_sf_1994.json", data_dir)
    sf_summary = observed_summary(
        sf["cluster_size_counts"],
        sf["largest_cluster_observation_months"],
        int(sf.get("observation_years", 2)),
    )
    model = TuberculosisModel()
    public, noise = _generators(seed, secure_noise)
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
                "mae_se": _se(maes),
            }
            for i, name in enumerate(PARAM_NAMES):
                row[f"{name}_mean"] = float(mean[i])
            rows.append(row)
            posteriors.append((f"n={n}, ε={eps:g}", pooled))
    # non-private rejection ABC on the (public) San Francisco data: keep the closest fraction
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
    rows.append(sf_row)
    posteriors.append(("SF data (non-private)", th[keep]))
    prior = model.sample_prior(public, 4000)
    plt = _pyplot()
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
    fig.suptitle(
        f"ABCDP tuberculosis model: c = {c}, ε_abc = {eps_abc:.3g}, C = {clip:.3g}, "
        f"{n_candidates} candidates × {n_pseudo} pseudo data sets (black: reference θ)"
    )
    save_outputs(fig, rows, out_dir, "tb", "Tuberculosis model: ABCDP posterior means and errors", dpi=100)
    return rows


# -- federated toy grid --------------------------------------------------------------------------


class ToyCandidateCache:
    """One rep's public candidates (θ from the prior, φ̄ of an N-point simulated data set), made lazily.

    Every setting of the grid, single-owner and federated alike, reads the same stream from its start, so
    the two samplers see identical candidates and differ only in their (independent) noise.
    """

    def __init__(
        self, model: ToyMixtureModel, features: RandomFourierFeatures, n_sim: int, rng: np.random.Generator,
        chunk: int = 250,
    ) -> None:
        self.model, self.features, self.n_sim, self.rng, self.chunk = model, features, n_sim, rng, chunk
        self.thetas = np.zeros((0, model.n_components))
        self.phibars = np.zeros((0, features.n_features))

    def ensure(self, n: int) -> None:
        while self.thetas.shape[0] < n:
            th = self.model.sample_prior(self.rng, self.chunk)
            sims = self.model.simulate(th, self.n_sim, self.rng)
            ph = self.features.mean_embedding(sims, dtype=np.float32)  # public data: single precision is fine
            self.thetas = np.concatenate([self.thetas, th])
            self.phibars = np.concatenate([self.phibars, ph])

    def cursor(self) -> Any:
        """A ``propose(n)`` that hands out the stream from its start: (θ, φ̄)."""
        pos = 0

        def propose(n: int) -> tuple[FloatArray, FloatArray]:
            nonlocal pos
            self.ensure(pos + n)
            out = self.thetas[pos:pos + n], self.phibars[pos:pos + n]
            pos += n
            return out

        return propose


def federated_repro(
    out_dir: Path,
    parties: int = 7,
    reps: int = 10,
    cs: Sequence[int] = (10,),
    eps_abcs: Sequence[float] = (0.1, 0.2),
    eps_totals: Sequence[float] = (1.0, math.inf),
    resamples: Sequence[bool] = (False, True),
    n_obs: int | None = None,
    n_features: int = 100,
    bandwidth: float = 0.6,
    batch_size: int = 128,
    max_candidates: int = 20000,
    noise_shares: str = "exact",
    backend: str = "mpc",
    seed: int = 0,
    secure_noise: bool = True,
    data_dir: Path | None = None,
) -> list[Row]:
    """Toy grid, single-owner vs federated ABCDP (m parties, in-memory protocol): MAE distributions and KS.

    Per rep: one private data set of N points (split over the parties), one public feature map and one
    public candidate stream; every setting runs the single-owner sampler (``c_sample_abcdp`` on the
    RFF-MMD distances) and the federated one (``run_federated_abcdp``) on the same candidates with
    independent noise. Per setting, a two-sample KS test compares the MAE of the posterior means over
    the reps (with ``noise_shares="exact"`` both have the same law, so small p-values would flag a bug;
    with ``"robust"`` the federated noise is √(m/h) times larger by design). With ε_total = ∞ the two
    are deterministic given the candidates and must accept the same θ's (``identical`` column; a
    difference can only come from a fixed-point tie inside the encoding margin).
    """
    from scipy import stats

    from hss.randomness import SecureRandom
    from mechanisms.abcdp.federated import FederatedSvtPlan, distances_from_sum, party_feature_sum
    from mechanisms.abcdp.federated_run import run_federated_abcdp

    cfg = load_shared_json("abcdp_toy.json", data_dir)
    theta_true = np.asarray(cfg["theta_true"], dtype=np.float64)
    n_obs = int(cfg["n_observed"]) if n_obs is None else n_obs
    model = ToyMixtureModel(n_components=theta_true.shape[0])
    keys = [(c, ea, et, rs) for c in cs for ea in eps_abcs for et in eps_totals for rs in resamples]
    mae: dict[tuple[Any, ...], dict[str, list[float]]] = {k: {"single": [], "fed": []} for k in keys}
    cnt: dict[tuple[Any, ...], dict[str, list[float]]] = {
        k: {"single": [], "fed": [], "supp": [], "same": [], "secs": [], "bytes": [], "clamped": []}
        for k in keys
    }
    t0 = time.time()
    for r in range(reps):
        public, noise = _generators(seed * 100003 + r, secure_noise)
        observed = model.simulate(theta_true, n_obs, public)[0]
        shards = np.array_split(observed[public.permutation(n_obs)], parties)
        map_seed = int(public.integers(0, 2**62))
        base = FederatedSvtPlan(
            eps_abc=eps_abcs[0], eps_total=eps_totals[0], c=cs[0], resample=resamples[0], n_records=n_obs,
            n_features=n_features, bandwidth=bandwidth, dim=1, map_seed=map_seed, noise_shares=noise_shares,
        )
        cache = ToyCandidateCache(model, base.rff(), n_obs, public)
        s_total = party_feature_sum(base, observed)
        for c, ea, et, rs in keys:
            plan = FederatedSvtPlan(
                eps_abc=ea, eps_total=et, c=c, resample=rs, n_records=n_obs, n_features=n_features,
                bandwidth=bandwidth, dim=1, map_seed=map_seed, noise_shares=noise_shares,
            )
            fed_propose = cache.cursor()
            single_stream = cache.cursor()

            def single_propose(
                n: int, stream: Any = single_stream, plan: Any = plan, s: FloatArray = s_total
            ) -> tuple[Any, Any]:
                th, ph = stream(n)
                return th, distances_from_sum(plan, s, ph)

            res_s = c_sample_abcdp(single_propose, plan.svt_config(), noise, max_candidates, batch_size)
            ts = time.time()
            secret = {
                p: SecureRandom.from_os() if secure_noise
                else SecureRandom.from_key(np.random.default_rng([seed, r, p]).bytes(32))
                for p in range(1, parties + 1)
            }
            res_f = run_federated_abcdp(
                plan, shards, fed_propose, parties, batch_size, public, secret,
                max_candidates=max_candidates, backend=backend,  # type: ignore[arg-type]
            )
            k = (c, ea, et, rs)
            cnt[k]["secs"].append(time.time() - ts)
            for name, res in (("single", res_s), ("fed", res_f)):
                cnt[k][name].append(res.n_evaluated)
                if res.n_accepted:
                    mae[k][name].append(model.mean_absolute_error(res.posterior_mean(), theta_true))
            cnt[k]["supp"].append(res_f.n_suppressed)
            cnt[k]["bytes"].append(res_f.bytes_sent / max(1, res_f.n_evaluated + res_f.n_suppressed))
            cnt[k]["clamped"].append(res_f.n_clamped)
            same = res_s.thetas.shape == res_f.thetas.shape and np.array_equal(res_s.thetas, res_f.thetas)
            cnt[k]["same"].append(float(same))
        print(f"federated: rep {r + 1}/{reps} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    rows: list[Row] = []
    for k in keys:
        c, ea, et, rs = k
        ms, mf = mae[k]["single"], mae[k]["fed"]
        ks = stats.ks_2samp(ms, mf) if len(ms) > 1 and len(mf) > 1 else None
        rows.append(
            {
                "c": c, "eps_abc": ea, "eps_total": et, "resample": rs, "reps": reps,
                "mae_single": float(np.mean(ms)) if ms else math.nan, "mae_single_se": _se(ms),
                "mae_fed": float(np.mean(mf)) if mf else math.nan, "mae_fed_se": _se(mf),
                "ks_stat": float(ks.statistic) if ks else math.nan,
                "ks_p": float(ks.pvalue) if ks else math.nan,
                "evaluated_single": float(np.mean(cnt[k]["single"])),
                "evaluated_fed": float(np.mean(cnt[k]["fed"])),
                "suppressed_fed": float(np.mean(cnt[k]["supp"])),
                "identical": (f"{int(sum(cnt[k]['same']))}/{reps}" if math.isinf(et) else "-"),
                "bytes_per_eval": float(np.mean(cnt[k]["bytes"])),
                "clamped": int(sum(cnt[k]["clamped"])),
                "fed_seconds": float(np.mean(cnt[k]["secs"])),
            }
        )
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(keys)), 4.2))
    pos = np.arange(len(keys)) * 3.0
    b1 = ax.boxplot([mae[k]["single"] or [math.nan] for k in keys], positions=pos - 0.55, widths=0.9,
                    patch_artist=True, showfliers=True)
    b2 = ax.boxplot([mae[k]["fed"] or [math.nan] for k in keys], positions=pos + 0.55, widths=0.9,
                    patch_artist=True, showfliers=True)
    for patch in b1["boxes"]:
        patch.set_facecolor("#9ecae1")
    for patch in b2["boxes"]:
        patch.set_facecolor("#fdae6b")
    labels = [f"c={c}\nε_abc={ea:g}\nε={et:g}\n{'RS' if rs else 'no RS'}" for c, ea, et, rs in keys]
    ax.set_xticks(pos, labels, fontsize=7)
    ax.set_ylabel("MAE of posterior mean")
    ax.legend([b1["boxes"][0], b2["boxes"][0]], ["single owner", f"federated, m = {parties}"], fontsize=8)
    ax.set_title(
        f"ABCDP toy, single owner vs federated ({backend}, {noise_shares} noise shares): {reps} reps, "
        f"N = {n_obs}", fontsize=9,
    )
    title = (f"Toy grid: single-owner vs federated ABCDP, m = {parties}, {reps} reps "
             f"(KS two-sample test on the MAE per setting)")
    save_outputs(fig, rows, out_dir, "federated", title)
    return rows


# -- command line --------------------------------------------------------------------------------


def _eps(s: str) -> float:
    return math.inf if s.lower() in ("inf", "infinity") else float(s)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulations.abcdp_repro", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--out", type=Path, required=True, help="output directory")
        sp.add_argument("--seed", type=int, default=0)
        sp.add_argument("--data-dir", type=Path, default=None, help="data folder (default simulations/data)")

    f = sub.add_parser("flip", help="flip probability figure with Monte Carlo check")
    common(f)
    f.add_argument("--n-rho", type=int, default=100)
    f.add_argument("--mc-draws", type=int, default=20000)
    f.add_argument("--no-resample", action="store_true", help="b = (c+1)Δ/ε_total instead of 2cΔ/ε_total")

    t = sub.add_parser("toy", help="toy mixture grid: MAE vs ε_abc")
    common(t)
    t.add_argument("--runs", type=int, default=60)
    t.add_argument("--candidates", type=int, default=10000)
    t.add_argument("--n-obs", type=int, default=None)
    t.add_argument("--c", type=int, nargs="+", default=None)
    t.add_argument("--eps-abc", type=float, nargs="+", default=None)
    t.add_argument("--eps-total", type=_eps, nargs="+", default=None)
    t.add_argument("--bandwidth", default="0.6", help="RFF bandwidth (number) or 'median' (prior predictive)")
    t.add_argument("--features", type=int, default=100)
    t.add_argument(
        "--seeded-noise",
        dest="secure_noise",
        action="store_false",
        help="draw the DP noise from --seed (repeatable simulation only; gives no privacy)",
    )

    c = sub.add_parser("covid", help="COVID-19 cubic growth model")
    common(c)
    c.add_argument("--candidates", type=int, default=50000)
    c.add_argument("--c", type=int, default=10)
    c.add_argument("--eps-abc", type=float, default=0.02)
    c.add_argument("--eps-total", type=_eps, nargs="+", default=[math.inf, 100.0, 10.0])
    c.add_argument("--resample", action="store_true")
    c.add_argument("--features", type=int, default=500)
    c.add_argument(
        "--seeded-noise",
        dest="secure_noise",
        action="store_false",
        help="draw the DP noise from --seed (repeatable simulation only; gives no privacy)",
    )

    b = sub.add_parser("tb", help="tuberculosis birth-death model")
    common(b)
    b.add_argument("--records", type=int, nargs="+", default=[100, 1000])
    b.add_argument("--candidates", type=int, default=1000)
    b.add_argument("--pseudo", type=int, default=5, help="simulated data sets per candidate")
    b.add_argument("--c", type=int, default=10)
    b.add_argument("--eps-total", type=_eps, default=1.0)
    b.add_argument("--eps-abc", type=float, default=None, help="default: from a public simulation pilot")
    b.add_argument("--clip", type=float, default=None, help="default: from a public simulation pilot")
    b.add_argument("--resample", action="store_true")
    b.add_argument("--repeats", type=int, default=1, help="independent ABCDP runs per setting")
    b.add_argument(
        "--seeded-noise",
        dest="secure_noise",
        action="store_false",
        help="draw the DP noise from --seed (repeatable simulation only; gives no privacy)",
    )
    fd = sub.add_parser("federated", help="toy grid: single-owner vs federated ABCDP (in-memory protocol)")
    common(fd)
    fd.add_argument("--parties", type=int, default=7)
    fd.add_argument("--reps", type=int, default=10)
    fd.add_argument("--c", type=int, nargs="+", default=[10])
    fd.add_argument("--eps-abc", type=float, nargs="+", default=[0.1, 0.2])
    fd.add_argument("--eps-total", type=_eps, nargs="+", default=[1.0, math.inf])
    fd.add_argument("--resample", choices=["both", "yes", "no"], default="both")
    fd.add_argument("--full-grid", action="store_true", help="the paper's grid from abcdp_toy.json (long)")
    fd.add_argument("--n-obs", type=int, default=None, help="N (default 5000, from abcdp_toy.json)")
    fd.add_argument("--features", type=int, default=100)
    fd.add_argument("--bandwidth", type=float, default=0.6)
    fd.add_argument("--batch-size", type=int, default=128)
    fd.add_argument("--max-candidates", type=int, default=20000)
    fd.add_argument("--noise-shares", choices=["exact", "robust"], default="exact",
                    help="exact: shares sum to Lap(b) (same law as single owner; ε vs the coordinator only); "
                    "robust: Lap(b) survives any coalition < m/2 (more noise)")
    fd.add_argument("--backend", choices=["mpc", "plaintext"], default="mpc",
                    help="mpc: the secret-shared protocol in memory; plaintext: its float reference (checks)")
    fd.add_argument(
        "--seeded-noise",
        dest="secure_noise",
        action="store_false",
        help="draw the DP noise and party randomness from --seed (repeatable simulation only; no privacy)",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows: list[Row]
    try:
        if args.command == "flip":
            rows = flip_repro(
                args.out,
                n_rho=args.n_rho,
                mc_draws=args.mc_draws,
                resample=not args.no_resample,
                seed=args.seed,
            )
        elif args.command == "toy":
            bw: float | str = "median" if args.bandwidth == "median" else float(args.bandwidth)
            rows = toy_repro(
                args.out,
                runs=args.runs,
                n_candidates=args.candidates,
                n_obs=args.n_obs,
                cs=args.c,
                eps_abcs=args.eps_abc,
                eps_totals=args.eps_total,
                bandwidth=bw,
                n_features=args.features,
                seed=args.seed,
                secure_noise=args.secure_noise,
                data_dir=args.data_dir,
            )
        elif args.command == "covid":
            rows = covid_repro(
                args.out,
                n_candidates=args.candidates,
                c=args.c,
                eps_abc=args.eps_abc,
                eps_totals=args.eps_total,
                resample=args.resample,
                n_features=args.features,
                seed=args.seed,
                secure_noise=args.secure_noise,
                data_dir=args.data_dir,
            )
        elif args.command == "federated":
            cs, eas, ets = args.c, args.eps_abc, args.eps_total
            rss = {"both": (False, True), "yes": (True,), "no": (False,)}[args.resample]
            if args.full_grid:
                grid = load_shared_json("abcdp_toy.json", args.data_dir)["grid"]
                cs, eas = list(grid["c"]), [float(e) for e in grid["eps_abc"]]
                ets, rss = [_eps(str(e)) for e in grid["eps_total"]], (False, True)
            rows = federated_repro(
                args.out,
                parties=args.parties,
                reps=args.reps,
                cs=cs,
                eps_abcs=eas,
                eps_totals=ets,
                resamples=rss,
                n_obs=args.n_obs,
                n_features=args.features,
                bandwidth=args.bandwidth,
                batch_size=args.batch_size,
                max_candidates=args.max_candidates,
                noise_shares=args.noise_shares,
                backend=args.backend,
                seed=args.seed,
                secure_noise=args.secure_noise,
                data_dir=args.data_dir,
            )
        else:
            rows = tb_repro(
                args.out,
                records=args.records,
                n_candidates=args.candidates,
                n_pseudo=args.pseudo,
                c=args.c,
                eps_total=args.eps_total,
                resample=args.resample,
                eps_abc=args.eps_abc,
                clip=args.clip,
                repeats=args.repeats,
                seed=args.seed,
                secure_noise=args.secure_noise,
                data_dir=args.data_dir,
            )
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print((args.out / f"{args.command}.md").read_text())
    if args.command == "toy" and (args.out / "toy_reference.md").is_file():
        print((args.out / "toy_reference.md").read_text())
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
