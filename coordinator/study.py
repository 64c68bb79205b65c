"""The Python API for notebooks and scripts: load an experiment, change settings with the file's own
validation, run it against registry daemons or a local simulated consortium, and get ArviZ
``InferenceData`` plus each registry's privacy statement.

    from coordinator import study

    exp = study.load("examples/demo.toml", {"sampler.chains": 8, "privacy.target_epsilon": 30.0})
    fit = study.fit(exp, simulate=True, out="out/notebook", overwrite=True)
    fit.idata            # arviz.InferenceData: posterior, sample_stats, prior, constant_data
    fit.summary          # arviz.summary of the posterior (with the reference's columns when there is one)
    fit.privacy          # {"party-1": {"epsilon": ..., "delta": ..., "statement": "...", ...}, ...}
    fit.warnings         # convergence and budget warnings, as the terminal prints them
    fit                  # its repr: the fit, then each registry's statement as `confar run` prints it
    fit.stopped          # why the run stopped early (a registry's privacy budget ran out), "" if it did not

**Each registry's privacy** is the statement ``confar run`` and ``confar privacy report`` print and the run's
``privacy/party-<id>.json`` holds, byte for byte (``coordinator.privacy_statement``): ε at δ by the registry's
own accountant (``fit.privacy[name]["epsilon"]``, the one its ledger enforces: ``"accountant"``), the
neighbour relation, the threat model, what was released and its budget; the other readings of the same
charges (``"readings"``: the GDP or PLD composition, other coalitions) are beside it, each labelled.

A run that a registry's budget stops before any draw after its warm-up has no posterior: ``fit`` raises
:class:`RunStopped` (a ``RuntimeError``) saying so and why; it carries the warm-up's draws (``.warmup``, an
``InferenceData`` with ``warmup_posterior``: not posterior draws), each registry's privacy statement
(``.privacy``) and the run folder, which holds them (``warmup.nc``, ``privacy/``, ``summary.txt``).

**What ran is what is recorded.** A change of settings edits the experiment's TOML text (``tomlkit``:
comments and layout kept) and reads it again with ``coordinator.experiment``'s validation, so a bad key or
value is the same ``ExperimentError`` naming the key that ``confar run`` gives, and the run folder's
``experiment.toml`` and ``provenance.json`` hold the text that ran (``dataclasses.replace`` on the settings
would have run one thing and recorded another). The output folder is a setting too (``out``).

**Inside a running event loop** (every Jupyter cell) the run goes to a worker thread and the call blocks
until it ends: ``fit`` is a plain function wherever it is called.

The private groups of ``InferenceData`` are absent by design: ``log_likelihood``, ``observed_data`` and
``posterior_predictive`` would hold per-record values, which never leave a registry (``az.loo`` and
``az.waic`` need them); ``fit.idata.attrs["private_groups"]`` says so. A registry-level model check without
the records is future work (a per-registry posterior predictive statistic released under the budget).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.experiment import Experiment, load_experiment
from coordinator.outcome import Outcome, ProgressBar, ProgressInfo
from coordinator.privacy_statement import statement_lines
from coordinator.tables import ExperimentError

Setting = str | int | float | bool | list[Any]


def load(path: str | Path, settings: Mapping[str, Setting] | None = None) -> Experiment:
    """The experiment file at ``path``, with ``settings`` changed (:func:`change`)."""
    exp = load_experiment(path)
    return change(exp, settings) if settings else exp


def change(exp: Experiment, settings: Mapping[str, Setting]) -> Experiment:
    """``exp`` with each ``"table.key"`` (``"model.params.p"`` for nested tables) set to its value, read
    again with the experiment file's validation; ExperimentError naming the key on a bad key or value."""
    import tomlkit

    doc = tomlkit.parse(exp.text)
    for dotted, value in settings.items():
        parts = dotted.split(".")
        if len(parts) < 2 or not all(parts):
            raise ExperimentError(f"{dotted!r}: a setting is named table.key (e.g. 'sampler.iterations')")
        tbl: Any = doc
        for name in parts[:-1]:
            if name not in tbl:
                tbl[name] = tomlkit.table()
            tbl = tbl[name]
            if not isinstance(tbl, Mapping):
                raise ExperimentError(f"{dotted!r}: {name!r} is a value, not a table")
        tbl[parts[-1]] = value
    text = tomlkit.dumps(doc)
    return load_experiment(exp.source, base_dir=_base_dir(exp), text=text)


def _base_dir(exp: Experiment) -> Path:
    return Path(exp.source).resolve().parent


class RunStopped(RuntimeError):
    """The run stopped early (a registry refused a batch: its privacy budget ran out) before any draw after
    its warm-up: there is no posterior. ``out_dir`` holds what there is; ``warmup`` is the warm-up's
    ``InferenceData`` (group ``warmup_posterior``; None when it made no draw), ``privacy`` each registry's
    statement (as :attr:`Fit.privacy`), ``outcome`` the run's :class:`Outcome`."""

    def __init__(
        self, message: str, out_dir: Path, warmup: Any, privacy: dict[str, dict[str, Any]], outcome: Outcome
    ) -> None:
        super().__init__(message)
        self.out_dir, self.warmup, self.privacy, self.outcome = out_dir, warmup, privacy, outcome


@dataclass
class Fit:
    """A finished run, as a notebook uses it (see the module docstring)."""

    idata: Any  # arviz.InferenceData
    summary: Any  # pandas.DataFrame
    privacy: dict[str, dict[str, Any]]
    warnings: list[str]
    out_dir: Path
    experiment: Experiment
    outcome: Outcome = field(repr=False)
    stopped: str = ""  # why the run stopped early ("" when it ran to its end)

    def __repr__(self) -> str:
        """One line for the fit, then each registry's privacy statement as ``confar run`` prints it."""
        post = self.idata.posterior
        entries = [(who, p["statement"], p["readings"]) for who, p in self.privacy.items()]
        return "\n".join(
            [
                f"Fit({post.sizes['chain']} chains x {post.sizes['draw']} draws of "
                f"{', '.join(map(str, post.data_vars))}; {len(self.warnings)} warning(s); {self.out_dir})",
                *statement_lines(entries),
            ]
        )


def fit(
    exp: Experiment,
    *,
    simulate: bool = False,
    out: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool | Callable[[ProgressInfo], None] = False,
    reference: bool = True,
) -> Fit:
    """Run ``exp`` (against its ``[[parties]]``, or a local consortium of daemons with ``simulate``; the
    simulation needs the file's ``[simulate]`` table) into ``out`` (default: the file's output_dir), and
    return the :class:`Fit`. ``overwrite`` clears an earlier run's folder, ``resume`` continues it.
    ``reference=False`` skips the plain fit of the pooled records a simulated MH run is compared with
    (``confar run --no-reference``; ``[reference] max_seconds`` caps it otherwise). Works inside a running
    event loop (the run goes to a worker thread)."""
    if out is not None:
        exp = change(exp, {"experiment.output_dir": str(Path(out).expanduser().absolute())})
    if simulate and exp.simulate is None:
        raise ExperimentError(
            f"{exp.source}: simulate=True needs a [simulate] table (parties, records), e.g. "
            "study.change(exp, {'simulate.parties': 3, 'simulate.records': [2000, 2000, 2000]})"
        )
    if overwrite and resume:
        raise ValueError("overwrite and resume do not go together")
    bar: Callable[[ProgressInfo], None] | None
    bar = ProgressBar(tty=False) if progress is True else progress if callable(progress) else None

    def work() -> Outcome:
        from coordinator.run import execute

        return execute(
            exp, simulate=simulate, resume=resume, overwrite=overwrite, progress=bar, reference=reference
        )

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        outcome = work()
    else:  # a notebook cell: asyncio.run and friends cannot nest in its loop
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="confar-fit") as pool:
            outcome = pool.submit(work).result()
    return _fit_of(exp, outcome)


def _fit_of(exp: Experiment, outcome: Outcome) -> Fit:
    import arviz as az
    import pandas as pd

    out = outcome.out_dir
    if outcome.stopped and not outcome.posterior_draws:
        warm = None
        if (out / "warmup.nc").exists():
            warm = az.from_netcdf(out / "warmup.nc")
            warm.load()
        written = ", ".join(sorted(outcome.written)) or "nothing ([output] formats = [])"
        raise RunStopped(
            "the run stopped before any draw after its warm-up, so there is no posterior: "
            f"{outcome.stopped}. Written to {out}: {written}. This exception's .warmup holds the warm-up's "
            "draws (not posterior draws), .privacy what each registry's data spent",
            out,
            warm,
            _privacy_of(out),
            outcome,
        )
    nc = out / "posterior.nc"
    if not nc.exists():
        raise ExperimentError(
            f"{exp.source}: the run wrote no posterior.nc ([output] formats): fit() reads the written outputs"
        )
    idata = az.from_netcdf(nc)
    idata.load()  # the file may be replaced by a later run into the same folder
    summary_csv = out / "summary.csv"
    summary = pd.read_csv(summary_csv, index_col=0) if summary_csv.exists() else az.summary(idata)
    privacy = _privacy_of(out)
    return Fit(idata, summary, privacy, list(outcome.warnings), out, exp, outcome, outcome.stopped)


def _privacy_of(out: Path) -> dict[str, dict[str, Any]]:
    """Each registry's privacy statement, from the run folder's privacy/party-N.json."""
    privacy: dict[str, dict[str, Any]] = {}
    for path in sorted((out / "privacy").glob("party-*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        here = doc.get("recomputed_here") or {}
        privacy[str(doc.get("identity", path.stem))] = {
            "epsilon": here.get("epsilon_by_accountant"),  # by its own accountant (None: no number backed)
            "delta": here.get("delta"),
            "accountant": here.get("accountant"),  # "renyi" | "pld" | "gdp" | None
            "gdp_mu": here.get("gdp_mu"),
            "statement": doc.get("statement") or doc.get("error") or "no statement",
            "readings": list(doc.get("other_readings", [])),  # beside the statement, each labelled
            "document": doc,  # privacy/party-N.json: the party's report and its recomputation
        }
    return privacy
