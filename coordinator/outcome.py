"""What a run reports while it runs and what it produced: progress, the outcome, its outputs and summary.

:class:`ProgressInfo` after every batch (shown by :class:`ProgressBar`: a one-line bar on a terminal, log
lines otherwise); :class:`Outcome`, a finished (or stopped) run's draws, counts, sessions and the parties'
privacy reports; :func:`write_run_outputs` hands it with its provenance to
``coordinator.outputs.write_outputs``; :func:`summary_text` is what ``confar run`` prints at the end.
"""

from __future__ import annotations

import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from coordinator.checkpoint import now
from coordinator.experiment import Experiment
from coordinator.privacy_statement import statement_lines
from coordinator.run_privacy import PrivacyPlan
from proto.spec import PartyEntry

F64 = npt.NDArray[np.float64]

REFERENCE_LABEL = "centralised (pooled data, plain MH, same seed)"


@dataclass(frozen=True)
class LabelledDraws:
    """A reference posterior's draws (chains, draws, d) with what they are (shown with the comparison)."""

    label: str
    draws: F64


@dataclass(frozen=True)
class ProgressInfo:
    done: int  # batches done (MH: iterations; rejection / abcdp: proposal batches)
    total: int
    draws: int  # draws kept so far (all chains)
    accept_rate: float
    decisions: int  # decisions asked of the parties in this invocation
    decisions_per_s: float
    run_step: int
    privacy: str  # spent so far, from the parties' planned per-batch events ("" when unknown)


class ProgressBar:
    """A one-line bar on a terminal (carriage return), a log line every ``every_s`` seconds otherwise."""

    def __init__(self, stream: IO[str] | None = None, tty: bool | None = None, every_s: float = 10.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = every_s
        self._last = -math.inf

    def __call__(self, p: ProgressInfo) -> None:
        frac = p.done / p.total if p.total else 1.0
        text = (
            f"{p.done}/{p.total} batches, {p.draws} draws, acceptance {p.accept_rate:.3f}, "
            f"{p.decisions_per_s:.0f} decisions/s" + (f", {p.privacy}" if p.privacy else "")
        )
        now = time.monotonic()
        if self.tty:
            width = 24
            bar = "#" * int(frac * width) + "." * (width - int(frac * width))
            self.stream.write(f"\r[{bar}] {100 * frac:5.1f}% {text}\x1b[K")
            if p.done >= p.total:
                self.stream.write("\n")
            self.stream.flush()
        elif now - self._last >= self.every_s or p.done >= p.total:
            self._last = now
            self.stream.write(f"confar run: {text}\n")
            self.stream.flush()


@dataclass
class Outcome:
    """What a finished (or stopped) run produced; ``draws`` is (chains, draws, d)."""

    run_id: str
    out_dir: Path
    draws: F64
    param_names: tuple[str, ...]
    sample_stats: dict[str, npt.NDArray[Any]]
    warmup: int
    run_steps: int
    session_ids: list[str]
    privacy_reports: dict[int, Any] = field(default_factory=dict)  # PrivacyReport answers (or errors)
    written: dict[str, Path] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    finished: bool = True  # False when the run stopped early (``stopped`` says why)
    counts: dict[str, int] = field(default_factory=dict)  # decisions asked, accepted, proposals made
    notes: list[str] = field(default_factory=list)  # e.g. the plan against the run (planned runs)
    # per party: other readings of its privacy, beside its statement (a planned run's other coalitions)
    privacy_readings: dict[int, list[str]] = field(default_factory=dict)
    stopped: str = ""  # why the run ended before its planned end (a registry's budget ran out); "" if not

    @property
    def posterior_draws(self) -> int:
        """Draws per chain after the warm-up (0: the run stopped in its warm-up, or before any draw)."""
        return max(int(self.draws.shape[1]) - self.warmup, 0)


def provenance(exp: Experiment, outcome: Outcome, endpoints: list[PartyEntry]) -> dict[str, Any]:
    return {
        "experiment": exp.name,
        "config_text": exp.text,
        "config_source": str(exp.source),
        "public_seed": exp.seed,
        "secret_noise": "each party's own CSPRNG (never the public seed)",
        "run_id": outcome.run_id,
        "session_ids": outcome.session_ids,
        "run_steps": outcome.run_steps,
        "sampler": exp.sampler.kind,
        "model": exp.model_name,
        "model_params": exp.model_params,
        "session_params": exp.session_params(),
        "reveal_mode": exp.reveal_mode,
        "topology": exp.topology,
        "threshold": exp.t,
        "parties": [{"id": p.id, "identity": p.identity, "address": p.address} for p in endpoints],
        "coordinator_identity": exp.coordinator.identity,
        "privacy_target": None if exp.privacy is None else exp.privacy.text(),
        "counts": outcome.counts,
        "stopped": outcome.stopped or None,
        "warnings": outcome.warnings,
        "python": platform.python_version(),
        "finished": now(),
    }


def write_run_outputs(
    exp: Experiment,
    outcome: Outcome,
    endpoints: list[PartyEntry],
    reference: F64 | LabelledDraws | None,
    plan: PrivacyPlan | None,
) -> dict[str, Path]:
    """Hand the run to ``coordinator.outputs.write_outputs`` (skipped with ``[output] formats = []``)."""
    if not exp.formats:
        return {}
    from coordinator import outputs

    w = min(outcome.warmup, outcome.draws.shape[1])
    stats = outcome.sample_stats
    result = outputs.RunResult(
        draws=outcome.draws[:, w:],
        param_names=list(outcome.param_names),
        sample_stats={k: v[:, w:] for k, v in stats.items()},
        warmup=w,
        warmup_draws=outcome.draws[:, :w] if w else None,
        warmup_sample_stats={k: v[:, :w] for k, v in stats.items()} if w else None,
        reference=None
        if reference is None
        else outputs.ReferencePosterior.from_draws(reference.label, reference.draws)
        if isinstance(reference, LabelledDraws)
        else outputs.ReferencePosterior.from_draws(REFERENCE_LABEL, reference),
        privacy_reports=outcome.privacy_reports,
        privacy_readings={p: r for p, r in outcome.privacy_readings.items() if p in outcome.privacy_reports},
        privacy_delta=exp.privacy.delta if exp.privacy is not None and exp.privacy.delta else 1e-5,
        provenance=provenance(exp, outcome, endpoints),
        prior_draws=_prior_draws(exp, outcome.draws.shape[0], outcome.draws.shape[1] - w),
        constant_data=constant_data(exp, len(endpoints)),
        stopped=outcome.stopped,
    )
    # the folder is this run's own (run.json, checkpoint/): replace the outputs of an earlier attempt
    return dict(outputs.write_outputs(outcome.out_dir, result, overwrite=True))


def _prior_draws(exp: Experiment, chains: int, draws: int) -> F64 | None:
    """As many draws from the model's prior as the posterior has (public seed: the prior is public)."""
    if draws < 1 or exp.sampler.simulator_run:  # ABCDP's simulator models have their own priors
        return None
    model = exp.model()
    rng = np.random.default_rng([exp.seed, 0x9E10])
    x = np.asarray(model.sample_prior(rng, chains * draws), dtype=np.float64)
    return x.reshape(chains, draws, -1) if x.size == chains * draws * model.d else None


def constant_data(exp: Experiment, m: int) -> dict[str, npt.NDArray[Any]]:
    """Public constants: the number of registries and, where public (a simulation, or the warm start's
    n_records), their record counts."""
    out: dict[str, npt.NDArray[Any]] = {"registries": np.array([m])}
    if exp.simulate is not None and exp.simulate.records:
        out["registry_records"] = np.asarray(exp.simulate.records, dtype=np.int64)
    elif exp.warm_start is not None and exp.warm_start.n_records:
        out["total_records"] = np.array([exp.warm_start.n_records], dtype=np.int64)
    return out


def privacy_lines(outcome: Outcome) -> list[str]:
    """Each registry's privacy statement and the other readings beside it, from the privacy documents
    written with the outputs, laid out by ``coordinator.privacy_statement.statement_lines`` (as ``Fit``
    shows them)."""
    docs = sorted(
        (k, v) for k, v in outcome.written.items() if k.startswith("privacy/") and k.endswith(".json")
    )
    entries: list[tuple[str, str, list[str]]] = []
    for _, path in docs:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            entries.append((path.name, f"unreadable: {exc}", []))
            continue
        what = doc.get("statement") or doc.get("error") or "no statement"
        entries.append((str(doc.get("identity", path.stem)), what, list(doc.get("other_readings", []))))
    return statement_lines(entries) if entries else []


def summary_text(outcome: Outcome) -> str:
    lines = [
        f"run {outcome.run_id}: {outcome.draws.shape[0]} chain(s) x {outcome.draws.shape[1]} draws of "
        f"{', '.join(outcome.param_names)}; {outcome.run_steps} run steps in "
        f"{len(outcome.session_ids)} session(s)"
        + (f" ({outcome.posterior_draws} per chain after the warm-up)" if outcome.stopped else "")
    ]
    summary = outcome.written.get("summary.txt")
    if summary is not None and summary.is_file():
        lines.append(summary.read_text(encoding="utf-8").rstrip())
    lines += privacy_lines(outcome)
    lines += outcome.notes
    lines.append(f"outputs in {outcome.out_dir}: " + ", ".join(sorted(outcome.written)))
    lines += [f"WARNING: {w}" for w in outcome.warnings]
    return "\n".join(lines)
