"""A finished run's public results as the outputs take them: :class:`RunResult` (draws, sample statistics,
warm-up, reference, the parties' privacy reports, provenance), validated on construction (``ValueError``
naming the field), and :class:`ReferencePosterior`, the posterior shown beside the run's."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

with warnings.catch_warnings():  # arviz 0.x announces its 1.0 refactor on import
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

from coordinator.privacy import parse_events
from proto import party_pb2, serde_privacy
from proto.records import LedgerReport

F64 = npt.NDArray[np.float64]

QUANTILES: tuple[float, ...] = (0.05, 0.5, 0.95)
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-\[\]]*$")
_RESERVED = {"chain", "draw", "param"}
#: a name the outputs can hold (a posterior.nc variable, a draws.csv and summary.csv column)
NAME_RULE = f"letters, digits, _ . - [ ], not starting with a digit, not one of {sorted(_RESERVED)}"


def name_problem(name: object) -> str | None:
    """None if ``name`` is usable as a parameter or statistic name in the outputs, else why not (the rule);
    ``confar run --check`` asks it of every name a run will write (``coordinator.run_check``)."""
    if isinstance(name, str) and _NAME_RE.match(name) and name not in _RESERVED:
        return None
    return f"{name!r} is not a usable name ({NAME_RULE})"


def qcol(p: float) -> str:
    return f"q{100 * p:g}%"


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


def privacy_report_dict(resp: party_pb2.PrivacyReportResponse | LedgerReport) -> dict[str, Any]:
    """A party's ``PrivacyReport`` answer as the plain dict :class:`RunResult` keeps (the proto's fields)."""
    rep = resp if isinstance(resp, LedgerReport) else serde_privacy.report_from_proto(resp)
    return asdict(rep)


def _check_report(pid: int, rep: Any) -> dict[str, Any] | str:
    where = f"privacy_reports[{pid}]"
    if isinstance(rep, party_pb2.PrivacyReportResponse | LedgerReport):
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
    ``privacy_delta``: δ for ε at δ when a party's budget is not itself an ε-at-δ budget; ``prior_draws``
    and ``constant_data``: InferenceData's ``prior`` and ``constant_data`` groups (public); ``chain_groups``:
    named sets of chain indices for the acceptance table (default: all chains); ``provenance``: what the
    caller knows about the run (config text, seeds, party identities, session id, run id, timestamps;
    :func:`write_outputs` adds versions and platform); ``privacy_readings``: per party id, other readings of
    its privacy the caller computed (each "what: value", e.g. a planned run's figures for other coalitions),
    shown beside its statement; ``stopped``: why the run ended before its planned end (e.g. a registry's
    privacy budget ran out), "" when it ran to its end. ``draws`` may hold no draw only when the run stopped
    (in its warm-up, or before any draw): the outputs then hold the warm-up's draws, labelled as such, and
    say there is no posterior. Validated on construction (``ValueError`` naming the field).
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
    prior_draws: F64 | None = None  # (chains, draws, dims) from the model's prior (public)
    constant_data: dict[str, npt.NDArray[Any]] = field(default_factory=dict)  # public: registry sizes, ...
    privacy_readings: dict[int, list[str]] = field(default_factory=dict)  # per party: its other readings
    stopped: str = ""  # why the run ended early ("" when it ran to its end)

    def __post_init__(self) -> None:
        x = _as_array("draws", self.draws)
        if x.ndim != 3:
            raise ValueError(f"draws: must have shape (chains, draws, dims), got shape {x.shape}")
        chains, n, d = x.shape
        if not isinstance(self.stopped, str):
            raise ValueError(f"stopped: must be a string (why the run ended early), got {self.stopped!r}")
        if chains < 1 or d < 1 or (n < 1 and not self.stopped):
            raise ValueError(
                f"draws: every axis of (chains, draws, dims) must be >= 1, got shape {x.shape} (no draw "
                "after warm-up only for a run that stopped early: give stopped = the reason)"
            )
        names = list(self.param_names)
        if len(names) != d:
            raise ValueError(f"param_names: {len(names)} name(s) {names} for {d} parameter(s) in draws")
        for nm in names:
            why = name_problem(nm)
            if why is not None:
                raise ValueError(f"param_names: {why}")
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
        for pid, readings in self.privacy_readings.items():
            if pid not in reports or not all(isinstance(r, str) and r for r in readings):
                raise ValueError(
                    f"privacy_readings[{pid!r}]: must be non-empty strings for a party in privacy_reports "
                    f"(parties {sorted(reports)}), got {readings!r}"
                )
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
        for key in self.constant_data:  # posterior.nc variables, as the parameters
            why = name_problem(key)
            if why is not None:
                raise ValueError(f"constant_data: {why}")

    @staticmethod
    def _check_stats(
        field_name: str, stats: Mapping[str, Any], lead: tuple[int, int], names: Sequence[str]
    ) -> dict[str, npt.NDArray[Any]]:
        out: dict[str, npt.NDArray[Any]] = {}
        for key, value in stats.items():
            why = name_problem(key)
            if why is not None:
                raise ValueError(f"{field_name}: {why}")
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
