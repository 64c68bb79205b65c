"""Run outputs: what a finished inference run leaves on disk, and the table printed at its end.

A run's public results (the posterior draws the coordinator reconstructed, per-draw public sample statistics
such as the accept bits, the parties' privacy reports, provenance) go into a :class:`RunResult`;
:func:`write_outputs` writes them to a folder:

* ``posterior.nc`` — an ArviZ ``InferenceData`` (``posterior``, ``sample_stats``, and ``warmup_posterior`` /
  ``warmup_sample_stats`` when warm-up draws are given), readable with ``arviz.from_netcdf``;
* ``draws.csv`` — one row per (chain, draw) after warm-up, every parameter at full precision (``%.17g``);
* ``summary.csv`` / ``summary.txt`` — ``arviz.summary`` (mean, sd, HDI, quantiles, MCSE, R-hat
  (rank-normalised split R-hat), bulk and tail ESS), the reference posterior's columns beside them when
  one is given; ``summary.txt`` starts with :func:`format_summary`;
* ``trace.png`` / ``posterior.png`` — trace and marginal plots (matplotlib ``Figure``, Agg, no display);
* ``privacy/party-<id>.json`` / ``.png`` — per party: what the party *reported* (its ``PrivacyReport`` answer,
  verbatim) kept apart from what was *recomputed here* from its reported events with ``mechanisms.privacy``
  (:func:`coordinator.privacy.recompose`: GDP μ where every event has one, ε at δ); the plot is the one
  ``confar privacy report --plot`` draws (:func:`coordinator.privacy.plot_spends`);
* ``provenance.json`` — what is needed to trace the run: the caller's provenance (config text, seeds, party
  identities, session and run ids, timestamps) plus package versions, Python, platform, the git commit when
  the package sits in a git checkout, and the SHA-256 of every file written.

ArviZ is the source of the summary diagnostics; ``mechanisms.samplers.diagnostics`` (non-rank-normalised
Geyer ESS and split R-hat) stays as the pure, dependency-free cross-check (``tests/test_outputs.py`` compares
them). Every file is written to a temporary name in the same folder and renamed into place, so an interrupted
run never leaves a half-written file under a final name; an existing non-empty output folder is refused unless
``overwrite=True``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime as _dt
import hashlib
import importlib.metadata
import io
import json
import math
import platform
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

with warnings.catch_warnings():  # arviz 0.x announces its 1.0 refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

import pandas as pd

from coordinator.api import PartyEndpoint
from coordinator.privacy import PlanFile, Spend, parse_events, plot_spends, recompose, report_delta
from proto import party_pb2
from proto.files import fsync_dir, staged, write_durable

F64 = npt.NDArray[np.float64]

__all__ = [
    "QUANTILES",
    "ReferencePosterior",
    "RunResult",
    "format_summary",
    "package_versions",
    "privacy_report_dict",
    "summarize",
    "to_inference_data",
    "write_outputs",
]

QUANTILES: tuple[float, ...] = (0.05, 0.5, 0.95)
HDI_PROB = 0.9
VERSIONED_PACKAGES = (
    "confidential-ar",
    "numpy",
    "scipy",
    "arviz",
    "xarray",
    "pandas",
    "h5netcdf",
    "h5py",
    "matplotlib",
    "dp-accounting",
    "grpcio",
    "protobuf",
    "cryptography",
)
THREAT_MODEL_NOTE = (
    "not carried in the PrivacyReport answer: the party's ledger accounts under its own [budget] "
    "'colluding' setting (default: all m - 1 other parties pool their noise, so only the party's own "
    "noise is relied on)"
)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-\[\]]*$")
_RESERVED = {"chain", "draw", "param"}


def _qcol(p: float) -> str:
    return f"q{100 * p:g}%"


# ---- inputs ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ReferencePosterior:
    """A reference posterior shown beside the run's (e.g. the centralised fit on pooled data, or an exact
    conjugate posterior), as per-parameter mean, sd and quantiles at :data:`QUANTILES`; ``mcse`` is the Monte
    Carlo standard error of ``mean`` (0 for an exact reference)."""

    label: str
    mean: F64
    sd: F64
    quantiles: F64  # shape (len(QUANTILES), dims)
    mcse: F64

    @classmethod
    def from_draws(cls, label: str, draws: npt.ArrayLike) -> ReferencePosterior:
        """From reference draws, shape (n, dims) of independent draws or (chains, draws, dims) of MCMC draws
        (MCSE from ArviZ's bulk ESS in that case, sd/√n for independent draws)."""
        x = np.asarray(draws, dtype=np.float64)
        if x.ndim == 2:
            flat, n_eff = x, np.full(x.shape[1], float(x.shape[0]))
        elif x.ndim == 3:
            flat = x.reshape(-1, x.shape[2])
            ds = az.convert_to_dataset({"x": x}, coords={"x_dim_0": np.arange(x.shape[2])})
            n_eff = np.asarray(az.ess(ds, method="bulk")["x"].values, dtype=np.float64)
        else:
            raise ValueError(
                f"reference draws must have shape (n, dims) or (chains, draws, dims), got {x.shape}"
            )
        if flat.shape[0] < 2:
            raise ValueError(f"reference draws: need at least 2 draws, got {flat.shape[0]}")
        if not np.all(np.isfinite(flat)):
            raise ValueError("reference draws contain NaN or infinite values")
        sd = flat.std(axis=0, ddof=1)
        return cls(
            label,
            flat.mean(axis=0),
            sd,
            np.quantile(flat, QUANTILES, axis=0),
            sd / np.sqrt(n_eff),
        )

    @classmethod
    def from_distributions(cls, label: str, dists: Sequence[Any]) -> ReferencePosterior:
        """From one frozen ``scipy.stats`` distribution per parameter (exact: mcse 0)."""
        if not dists:
            raise ValueError("reference distributions: need one per parameter, got none")
        return cls(
            label,
            np.array([float(d.mean()) for d in dists]),
            np.array([float(d.std()) for d in dists]),
            np.array([[float(d.ppf(q)) for d in dists] for q in QUANTILES]),
            np.zeros(len(dists)),
        )

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError("reference posterior: label must be a non-empty string")
        for name in ("mean", "sd", "mcse"):
            object.__setattr__(self, name, np.atleast_1d(np.asarray(getattr(self, name), dtype=np.float64)))
        object.__setattr__(self, "quantiles", np.asarray(self.quantiles, dtype=np.float64))
        d = self.mean.shape[0]
        for name in ("sd", "mcse"):
            if getattr(self, name).shape != (d,):
                raise ValueError(
                    f"reference posterior: {name} has shape {getattr(self, name).shape}, mean has ({d},)"
                )
        if self.quantiles.shape != (len(QUANTILES), d):
            raise ValueError(
                f"reference posterior: quantiles must have shape ({len(QUANTILES)}, {d}), "
                f"got {self.quantiles.shape}"
            )

    @property
    def dims(self) -> int:
        return int(self.mean.shape[0])


def privacy_report_dict(resp: party_pb2.PrivacyReportResponse) -> dict[str, Any]:
    """A party's ``PrivacyReport`` answer as the plain dict :class:`RunResult` keeps (the proto's fields)."""
    b = resp.budget
    return {
        "party": int(resp.party),
        "identity": resp.identity,
        "budget": {
            "configured": bool(b.configured),
            "budget_json": b.budget_json,
            "unit": b.unit,
            "limit": float(b.limit),
            "spent": float(b.spent),
        },
        "events_json": resp.events_json,
        "decisions_used": int(resp.decisions_used),
        **({"run_charges_json": resp.run_charges_json} if hasattr(resp, "run_charges_json") else {}),
    }


def _check_report(pid: int, rep: Any) -> dict[str, Any] | str:
    where = f"privacy_reports[{pid}]"
    if isinstance(rep, party_pb2.PrivacyReportResponse):
        rep = privacy_report_dict(rep)
    if isinstance(rep, str):  # the party could not be asked (coordinator.privacy.ask_all's error string)
        return rep
    if not isinstance(rep, Mapping):
        raise ValueError(
            f"{where}: expected a report dict, a PrivacyReportResponse or an error string, got "
            f"{type(rep).__name__}"
        )
    missing = [k for k in ("identity", "budget", "events_json") if k not in rep]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")
    if "party" in rep and int(rep["party"]) != pid:
        raise ValueError(f"{where}: the report says party {rep['party']}, filed under {pid}")
    budget = rep["budget"]
    if not isinstance(budget, Mapping) or "configured" not in budget:
        raise ValueError(f"{where}.budget: expected a dict with 'configured' (PrivacyBudgetState fields)")
    try:
        parse_events(str(rep["events_json"]))
        if budget.get("configured"):
            json.loads(str(budget.get("budget_json", "")))
        if rep.get("run_charges_json"):
            json.loads(str(rep["run_charges_json"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{where}: events_json / budget_json do not parse: {exc}") from exc
    out = dict(rep)
    out["budget"] = dict(budget)
    out["decisions_used"] = int(rep.get("decisions_used", 0))
    return out


def _as_array(name: str, value: Any) -> npt.NDArray[Any]:
    arr = np.asarray(value)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise ValueError(f"{name}: must be a numeric or boolean array, got dtype {arr.dtype}")
    return arr


def _check_finite(name: str, x: F64, param_names: Sequence[str]) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        c, t, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"{name}: {int(bad.sum())} non-finite value(s); first at chain {c}, draw {t}, "
            f"parameter {param_names[k]!r} ({x[c, t, k]})"
        )


@dataclass(eq=False)
class RunResult:
    """A finished run's public results. Arrays follow ArviZ: (chains, draws, ...).

    ``draws``: posterior draws after warm-up, shape (chains, draws, dims); ``param_names``: one per dim;
    ``sample_stats``: public per-draw arrays of shape (chains, draws[, ...]) (e.g. ``accepted`` (bool),
    ``step_size``); ``warmup``: warm-up iterations per chain (discarded before ``draws``), their draws and
    stats optionally in ``warmup_draws`` (chains, warmup, dims) / ``warmup_sample_stats``; ``reference``: an
    optional reference posterior for comparison; ``privacy_reports``: per party id, its ``PrivacyReport``
    answer (proto, :func:`privacy_report_dict` dict, or the error string when the party could not be asked);
    ``privacy_delta``: δ for ε at δ when a party's budget is not itself an ε-at-δ budget; ``chain_groups``:
    named sets of chain indices for the acceptance table (default: all chains); ``provenance``: what the
    caller knows about the run (config text, seeds, party identities, session id, run id, timestamps;
    :func:`write_outputs` adds versions and platform). Validated on construction (``ValueError`` naming the
    field).
    """

    draws: F64
    param_names: list[str]
    sample_stats: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    warmup: int = 0
    warmup_draws: F64 | None = None
    warmup_sample_stats: dict[str, npt.NDArray[Any]] | None = None
    reference: ReferencePosterior | None = None
    privacy_reports: dict[int, Any] = field(default_factory=dict)
    privacy_delta: float = 1e-5
    chain_groups: dict[str, list[int]] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        x = _as_array("draws", self.draws)
        if x.ndim != 3:
            raise ValueError(f"draws: must have shape (chains, draws, dims), got shape {x.shape}")
        chains, n, d = x.shape
        if chains < 1 or n < 1 or d < 1:
            raise ValueError(f"draws: every axis of (chains, draws, dims) must be >= 1, got shape {x.shape}")
        names = list(self.param_names)
        if len(names) != d:
            raise ValueError(f"param_names: {len(names)} name(s) {names} for {d} parameter(s) in draws")
        for nm in names:
            if not isinstance(nm, str) or not _NAME_RE.match(nm) or nm in _RESERVED:
                raise ValueError(
                    f"param_names: {nm!r} is not a usable name (letters, digits, _ . - [ ], not starting "
                    f"with a digit, not one of {sorted(_RESERVED)})"
                )
        dup = sorted({nm for nm in names if names.count(nm) > 1})
        if dup:
            raise ValueError(f"param_names: repeated name(s) {dup}")
        xf = x.astype(np.float64)
        _check_finite("draws", xf, names)
        self.draws, self.param_names = xf, names

        self.sample_stats = self._check_stats("sample_stats", self.sample_stats, (chains, n), names)
        if not isinstance(self.warmup, int) or isinstance(self.warmup, bool) or self.warmup < 0:
            raise ValueError(f"warmup: must be an integer >= 0, got {self.warmup!r}")
        if self.warmup_draws is not None:
            w = _as_array("warmup_draws", self.warmup_draws)
            if w.shape != (chains, self.warmup, d):
                raise ValueError(
                    f"warmup_draws: expected shape (chains, warmup, dims) = {(chains, self.warmup, d)}, "
                    f"got {w.shape}"
                )
            wf = w.astype(np.float64)
            _check_finite("warmup_draws", wf, names)
            self.warmup_draws = wf
        if self.warmup_sample_stats is not None:
            if self.warmup_draws is None:
                raise ValueError("warmup_sample_stats: given without warmup_draws")
            self.warmup_sample_stats = self._check_stats(
                "warmup_sample_stats", self.warmup_sample_stats, (chains, self.warmup), names
            )
        if self.reference is not None:
            if not isinstance(self.reference, ReferencePosterior):
                raise ValueError(
                    f"reference: expected a ReferencePosterior, got {type(self.reference).__name__}"
                )
            if self.reference.dims != d:
                raise ValueError(f"reference: has {self.reference.dims} parameter(s), draws have {d}")
        if not 0.0 < self.privacy_delta < 1.0:
            raise ValueError(f"privacy_delta: must lie in (0, 1), got {self.privacy_delta}")
        reports: dict[int, Any] = {}
        for pid, rep in self.privacy_reports.items():
            if not isinstance(pid, int) or isinstance(pid, bool) or pid < 1:
                raise ValueError(f"privacy_reports: party ids must be integers >= 1, got {pid!r}")
            reports[pid] = _check_report(pid, rep)
        self.privacy_reports = reports
        if self.chain_groups is not None:
            if not self.chain_groups:
                raise ValueError("chain_groups: empty (leave it None for one group of all chains)")
            for g, idx in self.chain_groups.items():
                bad = [i for i in idx if not isinstance(i, int | np.integer) or not 0 <= int(i) < chains]
                if bad or not idx:
                    raise ValueError(
                        f"chain_groups[{g!r}]: chain indices must be in 0..{chains - 1}, got {list(idx)}"
                    )
        if not isinstance(self.provenance, dict):
            raise ValueError(f"provenance: must be a dict, got {type(self.provenance).__name__}")

    @staticmethod
    def _check_stats(
        field_name: str, stats: Mapping[str, Any], lead: tuple[int, int], names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        out: dict[str, npt.NDArray[Any]] = {}
        for key, value in stats.items():
            if not isinstance(key, str) or not _NAME_RE.match(key) or key in _RESERVED:
                raise ValueError(f"{field_name}: {key!r} is not a usable statistic name")
            arr = _as_array(f"{field_name}[{key!r}]", value)
            if arr.shape[:2] != lead:
                raise ValueError(
                    f"{field_name}[{key!r}]: leading shape must be (chains, draws) = {lead}, got {arr.shape}"
                )
            out[key] = arr
        if "accepted" in out and not np.isin(out["accepted"], (0, 1)).all():
            raise ValueError(f"{field_name}['accepted']: must be boolean (or 0/1)")
        if "accepted" in out:
            out["accepted"] = out["accepted"].astype(bool)
        return out

    @property
    def chains(self) -> int:
        return int(self.draws.shape[0])

    @property
    def n_draws(self) -> int:
        return int(self.draws.shape[1])

    def groups(self) -> dict[str, list[int]]:
        if self.chain_groups is None:
            return {"all chains": list(range(self.chains))}
        return {g: [int(i) for i in idx] for g, idx in self.chain_groups.items()}


# ---- InferenceData and summary ---------------------------------------------------------------------------


def to_inference_data(result: RunResult) -> az.InferenceData:
    """The run as an ArviZ InferenceData (posterior, sample_stats, warm-up groups when given)."""
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
    attrs = {"producer": "confar", "warmup_per_chain": result.warmup}
    for key in ("run_id", "session_id"):
        if key in result.provenance:
            attrs[key] = str(_jsonable(result.provenance[key]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return az.from_dict(**kwargs, attrs=attrs)


def _quantile_func(p: float) -> Callable[[npt.NDArray[Any]], float]:
    def q(x: npt.NDArray[Any]) -> float:
        return float(np.quantile(x, p))

    return q


def summarize(result: RunResult, idata: az.InferenceData | None = None) -> pd.DataFrame:
    """``arviz.summary`` of the posterior (unrounded): mean, sd, HDI at :data:`HDI_PROB`, MCSE, bulk/tail ESS,
    R-hat, quantiles at :data:`QUANTILES`; with ``ref_*`` columns and ``z`` = (mean − ref_mean) / √(mcse² +
    ref_mcse²) when a reference is given. Diagnostics of chains with fewer than 4 draws are NaN."""
    idata = to_inference_data(result) if idata is None else idata
    funcs = {_qcol(p): _quantile_func(p) for p in QUANTILES}
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
            df[f"ref_{_qcol(p)}"] = ref.quantiles[i]
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
    qcols = [_qcol(p) for p in QUANTILES]
    cols = ["mean", "sd", *qcols, "mcse_mean", "r_hat", "ess_bulk", "ess_tail"]
    heads = ["mean", "sd", *qcols, "mcse", "r_hat", "ess_bulk", "ess_tail"]
    ref = result.reference
    if ref is not None:
        cols += ["ref_mean", "ref_sd", *(f"ref_{q}" for q in qcols), "z"]
        heads += ["ref mean", "ref sd", *(f"ref {q}" for q in qcols), "z"]
    w0 = max(5, *(len(n) for n in result.param_names))
    lines = [
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


# ---- plots -----------------------------------------------------------------------------------------------


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


MAX_PLOTTED = 16


def trace_png(result: RunResult) -> bytes:
    """Trace plot per parameter (every chain; warm-up shaded when its draws are given) and chain densities."""
    from matplotlib.figure import Figure  # Agg canvas, no pyplot, no display

    names = result.param_names[:MAX_PLOTTED]
    fig = Figure(figsize=(10.0, 2.2 * len(names) + 0.4), layout="constrained")
    axes = fig.subplots(len(names), 2, squeeze=False, gridspec_kw={"width_ratios": [3, 1]})
    w = result.warmup if result.warmup_draws is not None else 0
    alpha = max(0.15, min(0.8, 4.0 / result.chains))
    for k, nm in enumerate(names):
        ax, axd = axes[k]
        for c in range(result.chains):
            if w:
                assert result.warmup_draws is not None
                ax.plot(np.arange(w), result.warmup_draws[c, :, k], lw=0.5, alpha=alpha, color="0.6")
            line = ax.plot(np.arange(w, w + result.n_draws), result.draws[c, :, k], lw=0.5, alpha=alpha)
            axd.hist(
                result.draws[c, :, k],
                bins=30,
                density=True,
                histtype="step",
                color=line[0].get_color(),
                alpha=alpha,
            )
        if w:
            ax.axvspan(0, w, color="0.9", zorder=0)
        ax.set_ylabel(nm)
        axd.set_yticks([])
    axes[-1][0].set_xlabel("iteration" + (" (warm-up shaded)" if w else " after warm-up"))
    more = len(result.param_names) - len(names)
    fig.suptitle("trace" + (f" (first {len(names)} of {len(result.param_names)} parameters)" if more else ""))
    return _png(fig)


def posterior_png(result: RunResult, summary: pd.DataFrame) -> bytes:
    """Pooled marginal histogram per parameter with its mean and 5%-95% quantiles, the reference beside it."""
    from matplotlib.figure import Figure

    names = result.param_names[:MAX_PLOTTED]
    ncol = min(3, len(names))
    nrow = -(-len(names) // ncol)
    fig = Figure(figsize=(4.0 * ncol, 3.0 * nrow + 0.4), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False)
    qlo, qhi = _qcol(QUANTILES[0]), _qcol(QUANTILES[-1])
    for k, nm in enumerate(names):
        ax = axes[k // ncol][k % ncol]
        ax.hist(result.draws[:, :, k].ravel(), bins=50, density=True, color="C0", alpha=0.5, label="run")
        row = summary.loc[nm]
        ax.axvline(float(row["mean"]), color="C0", lw=1.5)
        for q in (qlo, qhi):
            ax.axvline(float(row[q]), color="C0", lw=0.8, ls="--")
        if result.reference is not None:
            ref = result.reference
            ax.axvline(float(ref.mean[k]), color="C3", lw=1.5, label=f"reference: {ref.label}")
            for i in (0, len(QUANTILES) - 1):
                ax.axvline(float(ref.quantiles[i, k]), color="C3", lw=0.8, ls=":")
        ax.set_title(nm)
        ax.set_yticks([])
        if k == 0:
            ax.legend(fontsize=7, loc="upper right")
    for k in range(len(names), nrow * ncol):
        axes[k // ncol][k % ncol].set_visible(False)
    fig.suptitle(f"posterior marginals: mean (solid), {qlo}-{qhi} (dashed)")
    return _png(fig)


# ---- privacy ---------------------------------------------------------------------------------------------


def _party_identity(pid: int, rep: dict[str, Any] | str, result: RunResult) -> str:
    if isinstance(rep, dict):
        return str(rep["identity"])
    parties = result.provenance.get("parties")
    if isinstance(parties, Mapping) and pid in parties:
        return str(parties[pid])
    return f"party-{pid}"


def _decisions_text(reported: Mapping[str, Any], this_run: int | None) -> str:
    """How many decisions used the registry's data: in this run (the coordinator's count: every decision of a
    run involves every registry) and in all (the registry's own count, every run and session)."""
    used = reported.get("decisions_used")
    if this_run is None:
        return f"{used} decisions made with its data in all"
    return f"{this_run} decisions of this run; {used} made with its data in all"


def privacy_statement(
    reported: Mapping[str, Any], recomputed: Mapping[str, Any], this_run: int | None = None
) -> str:
    """One line in plain words: what this party's data has spent, or why no number is stated."""
    used = _decisions_text(reported, this_run)
    if "not_accounted" in recomputed:
        return f"no privacy budget configured: no epsilon is stated ({used})"
    if "error" in recomputed:
        return f"reported events could not be recomposed: {recomputed['error']}"
    parts = []
    mu = recomputed.get("gdp_mu")
    if mu is not None:
        parts.append(f"GDP mu = {mu:.4g}")
    eps = recomputed.get("eps_at_delta")
    if eps is not None:
        parts.append(f"epsilon = {eps:.4g} at delta = {recomputed['delta']:.3g}")
    plain = recomputed.get("plain_penalty_eps_at_delta")
    if plain is not None and eps:
        parts.append(
            f"(the same noise as a plain penalty release: epsilon = {plain:.4g}, {plain / eps:.3g}x; the "
            "confidential accept-reject amplifies it)"
        )
    spent = "spent " + ", ".join(parts) if parts else "spent nothing it accounts"
    if reported.get("budget_configured"):
        spent += (
            f"; its ledger: {reported['spent']:.4g} of {reported['limit']:.4g} ({reported['unit']}), "
            f"{recomputed.get('remaining_from_reported', 0.0):.4g} left"
        )
    scopes = sorted(
        {
            str(e.get("label", "")).split("; session")[0]
            for e in reported.get("events", [])
            if "holds against" in str(e.get("label", ""))
        }
    )
    return f"{spent} ({used})" + "".join(f"; {x}" for x in scopes)


def _run_decisions(result: RunResult) -> int | None:
    counts = result.provenance.get("counts") if isinstance(result.provenance, Mapping) else None
    if isinstance(counts, Mapping) and "decisions_asked" in counts:
        return int(counts["decisions_asked"])
    return None


def privacy_document(
    pid: int, rep: dict[str, Any] | str, result: RunResult
) -> tuple[dict[str, Any], Spend | None]:
    """The JSON document for one party: what it reported, kept apart from what was recomputed here."""
    ident = _party_identity(pid, rep, result)
    if isinstance(rep, str):
        return {"party": pid, "identity": ident, "error": f"could not be asked: {rep}"}, None
    b = rep["budget"]
    budget = json.loads(b["budget_json"]) if b.get("configured") and b.get("budget_json") else {}
    events = parse_events(str(rep["events_json"]))
    delta = report_delta(budget, result.privacy_delta)
    recompose_error = ""
    try:
        sp: Spend | None = recompose(events, delta, b.get("budget_json", "") if b.get("configured") else "")
    except (
        ValueError,
        ArithmeticError,
    ) as exc:  # a report we cannot recompose must not sink the run's outputs
        sp = None
        recompose_error = f"{type(exc).__name__}: {exc}"
    reported: dict[str, Any] = {
        "budget_configured": bool(b.get("configured")),
        "budget": budget or None,
        "unit": b.get("unit", "") or None,
        "limit": float(b["limit"]) if b.get("configured") else None,
        "spent": float(b["spent"]) if b.get("configured") else None,
        "events": [e.to_dict() for e in events],
        "decisions_used": rep.get("decisions_used"),
    }
    if rep.get("run_charges_json"):
        reported["run_charges"] = json.loads(str(rep["run_charges_json"]))
    how = (
        "mechanisms.privacy composition of the events the party reported (coordinator.privacy.recompose): "
        "GDP mu = sqrt(sum count * mu^2) when every event has a GDP bound; eps at delta by the GDP closed "
        "form (all Gaussian) or pessimistic PLD"
    )
    recomputed: dict[str, Any] = {
        "how": how,
        "delta": delta,
        "delta_source": "the party's eps-at-delta budget"
        if budget.get("type") == "eps_delta"
        else "the run's privacy_delta (the party's budget is not an eps-at-delta budget)",
    }
    if not b.get("configured") and not events:
        # Without a budget a party records no events (parties/privacy_budget.py): "no events" then means
        # "not accounted", never "nothing spent". No number is stated.
        recomputed["eps_at_delta"] = None
        recomputed["gdp_mu"] = None
        recomputed["not_accounted"] = (
            "this party has no privacy budget configured, so it records no privacy events: no epsilon or "
            f"mu can be stated for its data ({rep.get('decisions_used')} decisions made with its data)"
        )
        sp = None  # and no trade-off plot: a "nothing spent" curve would be a claim we cannot back
    elif sp is None:
        recomputed["error"] = f"could not recompose the reported events: {recompose_error}"
    else:
        recomputed["eps_at_delta"] = sp.eps
        recomputed["gdp_mu"] = sp.gdp_mu
        recomputed["gdp_mu_note"] = (
            None if sp.gdp_mu is not None or not events else "no GDP bound: some reported event has none"
        )
        recomputed["decisions_accounted"] = sp.decisions
        if sp.plain_eps is not None:
            recomputed["plain_penalty_eps_at_delta"] = sp.plain_eps
            recomputed["plain_penalty_note"] = (
                "epsilon at the same delta had every penalty step been a plain Gaussian release of each "
                "registry's noisy term (Yildirim-Ermis without the confidential accept-reject): mu = "
                "1/(tau n^alpha) per step; eps_at_delta above is what the confidential reveal backs"
            )
    if b.get("configured"):
        same = None
        if sp is not None and budget.get("type") in ("gdp", "eps_delta"):
            same = sp.gdp_mu if budget["type"] == "gdp" else sp.eps
        recomputed["unit"] = str(b.get("unit", ""))
        recomputed["spent_in_budget_unit"] = same
        recomputed["spent_difference_vs_reported"] = None if same is None else same - float(b["spent"])
        recomputed["remaining_from_reported"] = max(0.0, float(b["limit"]) - float(b["spent"]))
    doc = {
        "party": pid,
        "identity": ident,
        "statement": privacy_statement(reported, recomputed, _run_decisions(result)),
        "threat_model": rep.get("threat_model", THREAT_MODEL_NOTE),
        "reported_by_party": reported,
        "recomputed_here": recomputed,
    }
    return doc, sp


# ---- provenance ------------------------------------------------------------------------------------------


def package_versions(names: Sequence[str] = VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Installed versions (``importlib.metadata``); ``None`` for a package that is not installed."""
    out: dict[str, str | None] = {}
    for nm in names:
        try:
            out[nm] = importlib.metadata.version(nm)
        except importlib.metadata.PackageNotFoundError:
            out[nm] = None
    return out


def git_commit(start: Path | None = None) -> dict[str, str] | None:
    """The commit of the git checkout holding this package, read from ``.git`` (no git command is run)."""
    here = (start or Path(__file__)).resolve()
    for root in [here, *here.parents]:
        dotgit = root / ".git"
        if dotgit.is_file():  # worktree / submodule: "gitdir: <path>"
            text = dotgit.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            gitdir = (root / text.split(":", 1)[1].strip()).resolve()
        elif dotgit.is_dir():
            gitdir = dotgit
        else:
            continue
        try:
            head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
            if not head.startswith("ref:"):
                return {"commit": head, "ref": "(detached)", "root": str(root)}
            ref = head.split(":", 1)[1].strip()
            common = gitdir
            if (gitdir / "commondir").is_file():
                common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
            for base in (gitdir, common):
                if (base / ref).is_file():
                    return {
                        "commit": (base / ref).read_text(encoding="utf-8").strip(),
                        "ref": ref,
                        "root": str(root),
                    }
            packed = common / "packed-refs"
            if packed.is_file():
                for line in packed.read_text(encoding="utf-8").splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return {"commit": parts[0], "ref": ref, "root": str(root)}
        except OSError:
            return None
        return None
    return None


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, _dt.datetime | _dt.date):
        return v.isoformat()
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return _jsonable(v.item())
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [_jsonable(x) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return _jsonable(dataclasses.asdict(v))
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return str(v)


def _json_bytes(doc: Any) -> bytes:
    return (json.dumps(_jsonable(doc), indent=1, allow_nan=False, sort_keys=False) + "\n").encode("utf-8")


def build_provenance(result: RunResult, files: Mapping[str, str]) -> dict[str, Any]:
    """The caller's provenance plus what this process can tell: versions, Python, platform, git, time."""
    prov: dict[str, Any] = dict(result.provenance)
    if "parties" not in prov and result.privacy_reports:
        prov["parties"] = {
            pid: _party_identity(pid, rep, result) for pid, rep in result.privacy_reports.items()
        }
    prov["outputs"] = {
        "written_at": _dt.datetime.now(_dt.UTC).isoformat(),
        "chains": result.chains,
        "draws_per_chain": result.n_draws,
        "warmup_per_chain": result.warmup,
        "param_names": result.param_names,
        "sample_stats": sorted(result.sample_stats),
        "reference": None if result.reference is None else result.reference.label,
        "files_sha256": dict(files),
    }
    prov["software"] = {
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": package_versions(),
        "git": git_commit(),
    }
    return prov


# ---- writing ---------------------------------------------------------------------------------------------


def _write_bytes(final: Path, data: bytes) -> None:
    write_durable(final, data, private=False)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def draws_csv(result: RunResult) -> bytes:
    """``chain,draw,<params>``, one row per post-warm-up draw, values as ``%.17g`` (round-trips exactly)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["chain", "draw", *result.param_names])
    for c in range(result.chains):
        for t in range(result.n_draws):
            w.writerow([c, t, *(f"{v:.17g}" for v in result.draws[c, t])])
    return buf.getvalue().encode("utf-8")


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise FileExistsError(f"{out_dir}: exists and is not a folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out_dir}: folder exists and is not empty; pass overwrite=True to replace its run outputs"
        )


def write_outputs(out_dir: str | Path, result: RunResult, overwrite: bool = False) -> dict[str, Path]:
    """Write the run's outputs (see the module docstring) and return them by relative name.

    Raises ``FileExistsError`` if ``out_dir`` exists and is not empty, unless ``overwrite`` is true; then the
    files of this function's layout are replaced one by one (each atomically) and stale
    ``privacy/party-*.json|png`` of parties not in this run are removed; other files are left alone.
    ``provenance.json`` is removed first and written last, so its presence marks a complete set of outputs
    (its SHA-256 list says which files belong to the run).
    """
    out = Path(out_dir)
    _check_out_dir(out, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # written last: present only when every file is complete
        (out / "provenance.json").unlink()
    (out / "privacy").mkdir(exist_ok=True)
    written: dict[str, Path] = {}

    def put(name: str, data: bytes) -> None:
        path = out / name
        _write_bytes(path, data)
        written[name] = path

    idata = to_inference_data(result)
    with staged(out / "posterior.nc") as tmp:
        idata.to_netcdf(str(tmp), engine="h5netcdf")
    written["posterior.nc"] = out / "posterior.nc"
    put("draws.csv", draws_csv(result))
    summary = summarize(result, idata)
    put("summary.csv", summary.to_csv(float_format="%.17g").encode("utf-8"))
    text = format_summary(result, summary)
    with pd.option_context("display.max_columns", None, "display.width", 200, "display.precision", 6):
        full = summary.to_string()
    put("summary.txt", (text + "\n\narviz.summary (full precision in summary.csv):\n" + full + "\n").encode())
    put("trace.png", trace_png(result))
    put("posterior.png", posterior_png(result, summary))

    keep: set[str] = set()
    spends: dict[int, Spend] = {}
    for pid, rep in sorted(result.privacy_reports.items()):
        doc, sp = privacy_document(pid, rep, result)
        put(f"privacy/party-{pid}.json", _json_bytes(doc))
        keep.add(f"party-{pid}.json")
        if sp is not None:
            spends[pid] = sp
    if spends:
        _write_privacy_plots(out / "privacy", result, spends, put)
        keep.update(f"party-{pid}.png" for pid in spends)
    for stale in (out / "privacy").glob("party-*"):
        if re.fullmatch(r"party-\d+\.(json|png)", stale.name) and stale.name not in keep:
            stale.unlink()

    hashes = {name: _sha256(path) for name, path in sorted(written.items())}
    put("provenance.json", _json_bytes(build_provenance(result, hashes)))
    fsync_dir(out)
    fsync_dir(out / "privacy")
    return written


def _write_privacy_plots(
    folder: Path, result: RunResult, spends: Mapping[int, Spend], put: Callable[[str, bytes], None]
) -> None:
    """``coordinator.privacy.plot_spends`` (the ``confar privacy report --plot`` figure) into a scratch dir,
    then each PNG renamed to ``privacy/party-<id>.png``."""
    top = max(max(spends), max(result.privacy_reports))
    endpoints = [
        PartyEndpoint(i, _party_identity(i, result.privacy_reports.get(i, ""), result), "")
        for i in range(1, top + 1)
    ]
    pf = PlanFile(Path("run outputs"), "coordinator", None, 0.0, endpoints, None)
    scratch = Path(tempfile.mkdtemp(prefix=".privacy-plots.", dir=folder))
    try:
        made = plot_spends(pf, dict(spends), scratch)
        for pid, path in zip(sorted(spends), made, strict=True):
            put(f"privacy/party-{pid}.png", path.read_bytes())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
