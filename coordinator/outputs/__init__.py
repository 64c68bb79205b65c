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

A run that stopped before any draw after its warm-up (``RunResult.stopped``, e.g. a registry's privacy
budget ran out in the warm-up) has no posterior: instead of the posterior's files it gets ``warmup.nc``
(``warmup_posterior`` / ``warmup_sample_stats`` only; no ``posterior`` group) and ``warmup_draws.csv`` when
the warm-up made draws, and a ``summary.txt`` that says there is no posterior and why; the privacy documents
and ``provenance.json`` as always. A stopped run with draws after its warm-up gets the usual layout, its
``summary.txt`` opening with why it stopped. Writing one layout removes the other's files.

The modules, in dependency order: ``result`` (:class:`RunResult`, :class:`ReferencePosterior`),
``privacy_docs`` (the per-party documents and plots), ``provenance`` (``provenance.json`` and the JSON
encoding), ``summary`` (InferenceData, ``arviz.summary``, :func:`format_summary`), ``plots`` (trace and
marginals); this module writes them all. ArviZ is the source of the summary diagnostics;
``mechanisms.samplers.diagnostics`` (non-rank-normalised Geyer ESS and split R-hat) stays as the pure,
dependency-free cross-check (``tests/coordinator/test_outputs.py`` compares them). Every file is written to a
temporary name in the same folder and renamed into place, so an interrupted run never leaves a half-written
file under a final name; an existing non-empty output folder is refused unless ``overwrite=True``.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from coordinator.outputs.plots import posterior_png, trace_png
from coordinator.outputs.privacy_docs import privacy_document, write_privacy_plots
from coordinator.outputs.provenance import build_provenance, json_bytes
from coordinator.outputs.result import ReferencePosterior, RunResult
from coordinator.outputs.summary import (
    format_summary,
    stopped_summary,
    summarize,
    to_inference_data,
    warmup_inference_data,
)
from coordinator.privacy import Spend
from proto.files import fsync_dir, staged, write_durable

__all__ = ["ReferencePosterior", "RunResult", "draws_csv", "warmup_draws_csv", "write_outputs"]


def _write_bytes(final: Path, data: bytes) -> None:
    write_durable(final, data, private=False)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: the files of a run with a posterior, and those of a run that stopped before its first draw after warm-up
POSTERIOR_FILES = ("posterior.nc", "draws.csv", "summary.csv", "trace.png", "posterior.png")
WARMUP_FILES = ("warmup.nc", "warmup_draws.csv")


def draws_csv(result: RunResult) -> bytes:
    """``chain,draw,<params>``, one row per post-warm-up draw, values as ``%.17g`` (round-trips exactly)."""
    return _csv(result.param_names, result.draws)


def warmup_draws_csv(result: RunResult) -> bytes:
    """``chain,draw,<params>`` of the warm-up's draws (``warmup_draws.csv`` of a run that stopped in it)."""
    assert result.warmup_draws is not None
    return _csv(result.param_names, result.warmup_draws)


def _csv(names: list[str], x: npt.NDArray[np.float64]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["chain", "draw", *names])
    for c in range(x.shape[0]):
        for t in range(x.shape[1]):
            w.writerow([c, t, *(f"{v:.17g}" for v in x[c, t])])
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
    ``privacy/party-*.json|png`` of parties not in this run, and the files of the other layout (a run with a
    posterior, or one stopped before it had one) are removed; other files are left alone.
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

    other: tuple[str, ...] = WARMUP_FILES if result.n_draws else POSTERIOR_FILES  # an earlier write's layout
    for name in other:
        with contextlib.suppress(FileNotFoundError):
            (out / name).unlink()
    if result.n_draws:
        _posterior_files(out, result, written, put)
    else:  # stopped before any draw after warm-up: the warm-up's draws, labelled, and no posterior
        if result.warmup_draws is not None and result.warmup_draws.shape[1]:
            with staged(out / "warmup.nc") as tmp:
                warmup_inference_data(result).to_netcdf(str(tmp), engine="h5netcdf")
            written["warmup.nc"] = out / "warmup.nc"
            put("warmup_draws.csv", warmup_draws_csv(result))
        put("summary.txt", (stopped_summary(result) + "\n").encode())

    keep: set[str] = set()
    spends: dict[int, Spend] = {}
    for pid, rep in sorted(result.privacy_reports.items()):
        doc, sp = privacy_document(pid, rep, result)
        put(f"privacy/party-{pid}.json", json_bytes(doc))
        keep.add(f"party-{pid}.json")
        if sp is not None:
            spends[pid] = sp
    if spends:
        write_privacy_plots(out / "privacy", result, spends, put)
        keep.update(f"party-{pid}.png" for pid in spends)
    for stale in (out / "privacy").glob("party-*"):
        if re.fullmatch(r"party-\d+\.(json|png)", stale.name) and stale.name not in keep:
            stale.unlink()

    hashes = {name: _sha256(path) for name, path in sorted(written.items())}
    put("provenance.json", json_bytes(build_provenance(result, hashes)))
    fsync_dir(out)
    fsync_dir(out / "privacy")
    return written


def _posterior_files(
    out: Path, result: RunResult, written: dict[str, Path], put: Callable[[str, bytes], None]
) -> None:
    """posterior.nc, draws.csv, summary.csv / .txt and the plots of a run with draws after its warm-up."""
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
