"""``trace.png`` and ``posterior.png`` of a run's outputs (matplotlib ``Figure``, Agg, no pyplot,
no display)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from coordinator.outputs.result import QUANTILES, RunResult, qcol


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


MAX_PLOTTED = 16
LEGEND_CHARS = 60  # at the legend's 7 points, what fits in the narrowest panel (one parameter: 4 inches)


def _legend_label(label: str) -> str:
    """The reference's entry in the legend: its label when it fits; a longer one (a sampled reference's, with
    its method and diagnostics: ~250 characters, which overflowed the figure and collapsed its layout) says
    only whether it converged, the whole label being in summary.txt."""
    text = f"reference: {label}"
    if len(text) <= LEGEND_CHARS:
        return text
    if "NOT converged" in label:
        return "reference, NOT converged (summary.txt)"
    if "converged" in label:
        return "converged reference (summary.txt)"
    return "reference (summary.txt)"


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
            height, edges = np.histogram(result.draws[c, :, k], bins=30, density=True)
            axd.stairs(height, edges, color=line[0].get_color(), alpha=alpha)
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
    # at least 6.5 inches wide: the title is one line of ~50 characters, wider than one 4-inch panel
    fig = Figure(figsize=(max(4.0 * ncol, 6.5), 3.0 * nrow + 0.4), layout="constrained")
    axes = fig.subplots(nrow, ncol, squeeze=False)
    qlo, qhi = qcol(QUANTILES[0]), qcol(QUANTILES[-1])
    for k, nm in enumerate(names):
        ax = axes[k // ncol][k % ncol]
        height, edges = np.histogram(result.draws[:, :, k].ravel(), bins=50, density=True)
        ax.stairs(height, edges, fill=True, color="C0", alpha=0.5, label="run")  # one patch, not 50 bars
        row = summary.loc[nm]
        ax.axvline(float(row["mean"]), color="C0", lw=1.5)
        for q in (qlo, qhi):
            ax.axvline(float(row[q]), color="C0", lw=0.8, ls="--")
        if result.reference is not None:
            ref = result.reference
            ax.axvline(float(ref.mean[k]), color="C3", lw=1.5, label=_legend_label(ref.label))
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
