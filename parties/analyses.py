"""Analyses a party can allow: each turns the party's own records and a batch of public proposals into
its private terms of the decisions, S = public + sum_j (l_j + V_j).

An :class:`Analysis` is registered by name (``register``); a party's config allowlists names and bounds
their numeric parameters. ``terms`` is vectorised over records and proposals and gets this party's
secret noise generator (never the experiment's public seed). Built in:

* ``gaussian-mean`` — x_i ~ N(theta, sigma^2) with sigma known; for MH proposals theta -> theta_star,
  l_j = sum_{i in party j} [log N(x_i; theta*, sigma) - log N(x_i; theta, sigma)], computed from the
  party's sufficient statistics. Noise ``"exp"`` (default) adds V_j ~ Gamma(1/m, 1), so that summed over
  the parties V ~ Exp(1) = -log U and ``S >= 0`` is exactly the MH accept event (confidential
  accept-reject identity); ``"none"`` adds nothing (sum-mode tests, where S itself is revealed). Blinded
  mode also draws W_j ~ Gamma(1/m, 1).

Statistical models proper (and the vetted noise samplers of ``mechanisms/``) are expected to be added
here by registration; this module only fixes the seam.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from hss.randomness import SecureRandom
from mechanisms import noise

F64 = npt.NDArray[np.float64]


class AnalysisError(ValueError):
    """Parameters or inputs an analysis refuses (says which and why)."""


@dataclass(frozen=True)
class Dataset:
    """A party's records: named float64 columns of equal length."""

    columns: dict[str, F64]

    @property
    def n(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def column(self, name: str) -> F64:
        if name not in self.columns:
            raise AnalysisError(f"data has no column {name!r}; columns: {sorted(self.columns)}")
        return self.columns[name]


def load_dataset(path: Path | None) -> Dataset:
    if path is None:
        return Dataset({})
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError as exc:
            raise AnalysisError(f"{path}: reading Parquet needs pyarrow, which is not installed") from exc
        table = pq.read_table(path)
        return Dataset({n: np.asarray(table[n], dtype=np.float64) for n in table.column_names})
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise AnalysisError(f"{path}: empty CSV (a header row is required)")
    header, body = rows[0], rows[1:]
    try:
        arr = np.array([[float(v) for v in row] for row in body], dtype=np.float64).reshape(
            len(body), len(header)
        )
    except ValueError as exc:
        raise AnalysisError(f"{path}: every value must be numeric with one per header column: {exc}") from exc
    return Dataset({name: arr[:, i].copy() for i, name in enumerate(header)})


@dataclass(frozen=True)
class Terms:
    values: F64  # this party's l_j + V_j, one per decision
    public: F64 | None  # the public term (the same at every party) or None
    blind: F64 | None  # W_j for blinded mode


class Analysis(Protocol):
    name: str

    def check_params(self, params: dict[str, Any]) -> None: ...

    def terms(
        self,
        data: Dataset,
        params: dict[str, Any],
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms: ...


_REGISTRY: dict[str, Callable[[], Analysis]] = {}


def register(name: str, factory: Callable[[], Analysis]) -> None:
    _REGISTRY[name] = factory


def get_analysis(name: str) -> Analysis:
    if name not in _REGISTRY:
        raise AnalysisError(f"unknown analysis {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]()


def known_analyses() -> list[str]:
    return sorted(_REGISTRY)


def gamma_shares(rng: SecureRandom, m: int, n: int) -> F64:
    """n draws of Gamma(1/m, 1): one party's share of an Exp(1) variable, from the party's CSPRNG."""
    return noise.gamma_shares(rng, m, n)


def batch_input(inputs: dict[str, npt.NDArray[Any]], name: str, n: int, required: bool = True) -> F64 | None:
    if name not in inputs:
        if required:
            raise AnalysisError(f"input {name!r} is required (a float array of length {n})")
        return None
    a = np.asarray(inputs[name], dtype=np.float64)
    if a.shape != (n,):
        raise AnalysisError(f"input {name!r} must have shape ({n},), got {a.shape}")
    if not np.isfinite(a).all():
        raise AnalysisError(f"input {name!r} has NaN or infinite entries")
    return a


class GaussianMean:
    name = "gaussian-mean"

    def check_params(self, params: dict[str, Any]) -> None:
        extra = set(params) - {"sigma", "column", "noise"}
        if extra:
            raise AnalysisError(f"gaussian-mean: unknown parameters {sorted(extra)}")
        sigma = params.get("sigma", 1.0)
        if not isinstance(sigma, int | float) or isinstance(sigma, bool) or not sigma > 0:
            raise AnalysisError(f"gaussian-mean: sigma must be a positive number, got {sigma!r}")
        if params.get("noise", "exp") not in ("exp", "none"):
            raise AnalysisError(f"gaussian-mean: noise must be 'exp' or 'none', got {params.get('noise')!r}")

    def terms(
        self,
        data: Dataset,
        params: dict[str, Any],
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        sigma = float(params.get("sigma", 1.0))
        x = data.column(str(params.get("column", "x")))
        theta = batch_input(inputs, "theta", n)
        theta_star = batch_input(inputs, "theta_star", n)
        assert theta is not None and theta_star is not None
        public = batch_input(inputs, "public", n, required=False)
        sx, nj = float(x.sum()), x.shape[0]
        ell = ((theta_star - theta) * sx - 0.5 * nj * (theta_star**2 - theta**2)) / sigma**2
        if params.get("noise", "exp") == "exp":
            ell = ell + gamma_shares(rng, m, n)
        blind = gamma_shares(rng, m, n) if mode == "blinded" else None
        return Terms(values=ell, public=public, blind=blind)


register("gaussian-mean", GaussianMean)
