"""Trade-off plots in the usual α–β style (Dong, Roth, Su 2022, Fig. 1): several curves overlaid.

Owns ``plot_tradeoffs``. Pure: it draws on a matplotlib ``Axes`` it is given, or on a new
``Figure`` (no pyplot, no global state, no file output); the caller saves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .tradeoff import TradeOff

if TYPE_CHECKING:  # matplotlib is imported lazily: ledgers and daemons never pay for it
    from matplotlib.axes import Axes

__all__ = ["plot_tradeoffs"]


def plot_tradeoffs(
    curves: Sequence[TradeOff] | Mapping[str, TradeOff],
    ax: Axes | None = None,
    points: Mapping[str, tuple[npt.ArrayLike, npt.ArrayLike]] | None = None,
    n: int = 501,
    title: str | None = None,
) -> Axes:
    """Draw trade-off curves on the unit square with the no-privacy diagonal β = 1 − α.

    Args:
        curves: trade-off functions; a mapping gives them legend labels, a sequence uses ``label``.
        ax: axes to draw on; a new ``Figure`` is created when omitted (reach it as ``ax.figure``).
        points: optional named (α, β) point sets (e.g. empirical attack results) drawn as markers.
        n: points per curve.
        title: optional title.
    """
    if ax is None:
        from matplotlib.figure import Figure

        ax = Figure(figsize=(4.5, 4.5)).add_subplot()
    items = list(curves.items()) if isinstance(curves, Mapping) else [(f.label, f) for f in curves]
    alpha = np.concatenate([[0.0], np.logspace(-6, -2, 60), np.linspace(0.01, 1.0, n)])
    ax.plot([0, 1], [1, 0], color="0.6", lw=0.8, ls="--", label="perfect privacy (β = 1 − α)")
    for name, f in items:
        ax.plot(alpha, f(alpha), lw=1.6, label=name)
    for name, (pa, pb) in (points or {}).items():
        ax.scatter(np.asarray(pa, dtype=float), np.asarray(pb, dtype=float), s=12, label=name, zorder=3)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("Type I error α")
    ax.set_ylabel("Type II error β")
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small", frameon=False)
    return ax
