"""What every ABCDP reproduction shares: the data folder, the (public, noise) generators, tables and figures
written as ``<name>.png`` / ``.csv`` / ``.md``."""

from __future__ import annotations

import csv
import json
import math
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Row = dict[str, Any]



def default_data_dir() -> Path:
    """``simulations/data`` (the copies shipped with the repository), else ``<repo>/../shared/data``."""
    shipped = Path(__file__).resolve().parents[1] / "data"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


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


def generators(seed: int, secure_noise: bool) -> tuple[np.random.Generator, np.random.Generator]:
    """(public, noise) generators; the noise one from the OS CSPRNG when ``secure_noise``."""
    public_ss, noise_ss = np.random.SeedSequence(seed).spawn(2)
    noise = np.random.default_rng(secrets.randbits(128)) if secure_noise else np.random.default_rng(noise_ss)
    return np.random.default_rng(public_ss), noise


def format_cell(v: Any) -> str:
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
            w.writerow({k: format_cell(r[k]) if isinstance(r[k], float) else r[k] for k in cols})
    lines = [f"# {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(format_cell(r[k]) for k in cols) + " |" for r in rows]
    md = out_dir / f"{name}.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean (NaN for fewer than two values)."""
    return float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_outputs(fig: Any, rows: Sequence[Row], out_dir: Path, name: str, title: str, dpi: int = 110) -> None:
    """Write ``name.png`` from ``fig`` (then close it) and the table ``name.csv`` / ``name.md``."""
    plt = pyplot()
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_dir / f"{name}.png", dpi=dpi)
    plt.close(fig)
    write_table(rows, out_dir, name, title)


def parse_eps(s: str) -> float:
    return math.inf if s.lower() in ("inf", "infinity") else float(s)

