"""A run as ArviZ ``InferenceData`` (``posterior.nc``), its ``arviz.summary`` (``summary.csv``) and the table
printed at the end of a run (:func:`format_summary`, the head of ``summary.txt``). ArviZ is the source of
the summary diagnostics; ``mechanisms.samplers.diagnostics`` (non-rank-normalised Geyer ESS and split R-hat)
stays as the pure, dependency-free cross-check (``tests/coordinator/test_outputs.py`` compares them)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

with warnings.catch_warnings():  # arviz 0.x announces its 1.0 refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

import pandas as pd

from coordinator.outputs.provenance import jsonable
from coordinator.outputs.result import QUANTILES, RunResult, qcol

HDI_PROB = 0.9
PRIVATE_GROUPS = (
    "log_likelihood, observed_data and posterior_predictive are absent by design: they hold per-record "
    "values, and the records never leave their registry (az.loo and az.waic need them); the prior and the "
    "public constants (registry sizes) are here"
)


def to_inference_data(result: RunResult) -> az.InferenceData:
    """The run as an ArviZ InferenceData (posterior, sample_stats, prior, constant_data, warm-up groups when
    given; ``attrs["private_groups"]`` says why the per-record groups are absent)."""
    post = {nm: result.draws[:, :, k] for k, nm in enumerate(result.param_names)}
    kwargs: dict[str, Any] = {"posterior": post}
    if result.sample_stats:
        kwargs["sample_stats"] = dict(result.sample_stats)
    if result.warmup_draws is not None:
        kwargs["warmup_posterior"] = {
            nm: result.warmup_draws[:, :, k] for k, nm in enumerate(result.param_names)
        }
        if result.warmup_sample_stats:
            kwargs["warmup_sample_stats"] = dict(result.warmup_sample_stats)
        kwargs["save_warmup"] = True
    if result.prior_draws is not None:
        kwargs["prior"] = {nm: result.prior_draws[:, :, k] for k, nm in enumerate(result.param_names)}
    if result.constant_data:
        kwargs["constant_data"] = dict(result.constant_data)
    attrs = {"producer": "confar", "warmup_per_chain": result.warmup, "private_groups": PRIVATE_GROUPS}
    for key in ("run_id", "session_id"):
        if key in result.provenance:
            attrs[key] = str(jsonable(result.provenance[key]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)  # "more chains than draws": a short (or stopped) run
        return az.from_dict(**kwargs, attrs=attrs)


def warmup_inference_data(result: RunResult) -> az.InferenceData:
    """The warm-up of a run that stopped before any draw after it (``warmup.nc``): the ``warmup_posterior``
    and ``warmup_sample_stats`` groups, ``constant_data``, and no ``posterior`` group (there is none);
    ``attrs["stopped"]`` says why."""
    assert result.warmup_draws is not None
    kwargs: dict[str, Any] = {
        "warmup_posterior": {nm: result.warmup_draws[:, :, k] for k, nm in enumerate(result.param_names)},
        "save_warmup": True,
    }
    if result.warmup_sample_stats:
        kwargs["warmup_sample_stats"] = dict(result.warmup_sample_stats)
    if result.constant_data:
        kwargs["constant_data"] = dict(result.constant_data)
    attrs = {
        "producer": "confar",
        "warmup_per_chain": result.warmup,
        "stopped": result.stopped,
        "no_posterior": "the run stopped in its warm-up: these are warm-up draws, not posterior draws",
        "private_groups": PRIVATE_GROUPS,
    }
    for key in ("run_id", "session_id"):
        if key in result.provenance:
            attrs[key] = str(jsonable(result.provenance[key]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)  # "more chains than draws": a warm-up cut short
        return az.from_dict(**kwargs, attrs=attrs)


def stopped_summary(result: RunResult) -> str:
    """``summary.txt`` of a run that stopped before any draw after its warm-up: that there is no posterior,
    why, and what the folder holds instead."""
    w = 0 if result.warmup_draws is None else int(result.warmup_draws.shape[1])
    lines = [
        f"NO POSTERIOR: the run stopped early ({result.stopped})",
        "there are no draws after the warm-up: "
        + (f"it stopped after {w} warm-up iteration(s) per chain" if w else "the run made no draw at all"),
    ]
    if w:
        lines.append(
            f"the warm-up's draws ({result.chains} chain(s) x {w}) are in warmup.nc (groups "
            "warmup_posterior, warmup_sample_stats; no posterior group) and warmup_draws.csv: they are NOT "
            "posterior draws (the chains were still burning in and the proposal adapting): use them only to "
            "see where the chains were heading"
        )
        acc = (result.warmup_sample_stats or {}).get("accepted")
        if acc is not None and acc.size:
            lines.append(f"acceptance rate in the warm-up: {float(np.mean(acc)):.3f}")
    lines.append(
        "what each registry's data spent on this run: privacy/ (one document per registry); the run's "
        "provenance: provenance.json"
    )
    return "\n".join(lines)


def _quantile_func(p: float) -> Callable[[npt.NDArray[Any]], float]:
    def q(x: npt.NDArray[Any]) -> float:
        return float(np.quantile(x, p))

    return q


def summarize(result: RunResult, idata: az.InferenceData | None = None) -> pd.DataFrame:
    """``arviz.summary`` of the posterior (unrounded): mean, sd, HDI at :data:`HDI_PROB`, MCSE, bulk/tail ESS,
    R-hat, quantiles at :data:`QUANTILES`; with ``ref_*`` columns and ``z`` = (mean − ref_mean) / √(mcse² +
    ref_mcse²) when a reference is given. Diagnostics of chains with fewer than 4 draws are NaN."""
    idata = to_inference_data(result) if idata is None else idata
    funcs = {qcol(p): _quantile_func(p) for p in QUANTILES}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "shape validation failed" for short / few chains
        warnings.simplefilter("ignore", RuntimeWarning)
        df = az.summary(
            idata,
            var_names=result.param_names,
            stat_funcs=funcs,
            extend=True,
            round_to="none",
            hdi_prob=HDI_PROB,
        )
    assert isinstance(df, pd.DataFrame)
    df = df.loc[result.param_names]
    df.index.name = "param"
    ref = result.reference
    if ref is not None:
        df["ref_mean"] = ref.mean
        df["ref_sd"] = ref.sd
        for i, p in enumerate(QUANTILES):
            df[f"ref_{qcol(p)}"] = ref.quantiles[i]
        df["ref_mcse"] = ref.mcse
        with np.errstate(divide="ignore", invalid="ignore"):
            df["z"] = (df["mean"] - ref.mean) / np.sqrt(df["mcse_mean"] ** 2 + ref.mcse**2)
    return df


def _acceptance_lines(result: RunResult) -> list[str]:
    acc = result.sample_stats.get("accepted")
    counts = result.provenance.get("counts") if isinstance(result.provenance, Mapping) else None
    if acc is None and isinstance(counts, Mapping) and counts.get("proposed"):
        prop, took = int(counts["proposed"]), int(counts.get("accepted", 0))
        asked = int(counts.get("decisions_asked", prop))
        return [
            f"acceptance: {took} of {prop} proposals accepted (rate {took / prop:.4g}); {asked} decisions "
            "asked (the rest rejected publicly)"
        ]
    if acc is None:
        return ["acceptance: not recorded (no 'accepted' sample statistic)"]
    per_chain = acc.reshape(result.chains, result.n_draws, -1).mean(axis=(1, 2))
    lines = ["acceptance rate (after warm-up):"]
    for g, idx in result.groups().items():
        sub = per_chain[idx]
        lines.append(
            f"  {g}: {sub.mean():.3f} over {len(idx)} chain(s) (per chain min {sub.min():.3f}, "
            f"max {sub.max():.3f})"
        )
    return lines


def _fmt(v: float, width: int = 9) -> str:
    if not math.isfinite(v):
        return f"{'nan' if math.isnan(v) else ('inf' if v > 0 else '-inf'):>{width}}"
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:>{width}.3g}"
    return f"{v:>{width}.4f}"


def format_summary(result: RunResult, summary: pd.DataFrame | None = None) -> str:
    """The table printed at the end of a run: per parameter mean, sd, quantiles, R-hat, bulk/tail ESS and
    MCSE, the reference posterior side by side when given, then the acceptance rate per chain group."""
    df = summarize(result) if summary is None else summary
    qcols = [qcol(p) for p in QUANTILES]
    cols = ["mean", "sd", *qcols, "mcse_mean", "r_hat", "ess_bulk", "ess_tail"]
    heads = ["mean", "sd", *qcols, "mcse", "r_hat", "ess_bulk", "ess_tail"]
    ref = result.reference
    if ref is not None:
        cols += ["ref_mean", "ref_sd", *(f"ref_{q}" for q in qcols), "z"]
        heads += ["ref mean", "ref sd", *(f"ref {q}" for q in qcols), "z"]
    w0 = max(5, *(len(n) for n in result.param_names))
    lines = [f"STOPPED EARLY: {result.stopped}"] if result.stopped else []
    lines += [
        f"posterior: {result.chains} chain(s) x {result.n_draws} draw(s) after {result.warmup} warm-up "
        f"iteration(s), {len(result.param_names)} parameter(s); HDI {HDI_PROB:g} and R-hat / ESS by ArviZ "
        "(rank-normalised split R-hat, bulk and tail ESS)",
    ]
    if ref is not None:
        lines.append(
            f"reference: {ref.label}; z = (mean - ref mean) / sqrt(mcse^2 + ref mcse^2); |z| > 3 is suspect"
        )
    lines.append(f"{'param':<{w0}} " + " ".join(f"{h:>9}" for h in heads))
    for nm in result.param_names:
        row = df.loc[nm]
        cells = []
        for c in cols:
            v = float(row[c])
            cells.append(f"{v:>9.0f}" if c.startswith("ess") and math.isfinite(v) else _fmt(v))
        lines.append(f"{nm:<{w0}} " + " ".join(cells))
    lines.extend(_acceptance_lines(result))
    return "\n".join(lines)
