"""``confar run --simulate``: an experiment file run against a local consortium of real daemons.

Starts m ``confar-party`` processes (mutual TLS on loopback, certificates from a fresh consortium CA) with
synthetic registry data for the experiment's model, then calls :func:`coordinator.run.run_experiment` (the
same code path as a run against remote registries). The consortium's folder is ``<output_dir>/simulation``
and is kept: the parties' ledgers and run records (``state_dir``) survive a crash, so ``confar run --resume``
restarts the daemons on the same state and continues the run without charging a run step twice.

Registry data: the files of ``[simulate] data`` (one CSV or Parquet file per party), else the model's own
``synthetic_data(rng, sizes)`` from the public seed ``[simulate] data_seed`` (built-in models: registries of
different sizes and case mixes for ``bayes-logistic``, Bernoulli(0.3) records for ``beta-bernoulli``, ...;
a plug-in may define it, docs/MODELS.md); for ``abcdp`` the toy mixture at θ* = (0.25, 0.05, 0.2, 0.15,
0.35) split across parties. Either way the records are checked against the model's schema first. A plug-in
model's folders (``[model] path``) go into every simulated registry's ``[allow] model_path``.

Where each registry keeps its records is ``[simulate] sources`` (one per party, default ``csv``): a CSV or
Parquet file, an SQLite file, a database of one throwaway PostgreSQL cluster, or a named graph of one Oxigraph
SPARQL server (FAIRVASC-like RDF, read in pages), each written from the same synthetic columns and read back
by the daemon through its ``[data]`` table (``simulations.registries``); the servers are started before the
daemons and stopped by PID after them (``simulations.servers``). The records are bit-for-bit the same
whatever the source, so is the run (``tests/network/test_consortium_sources.py``).

For MH samplers a reference posterior is computed too (:class:`PooledReference`): a converged plain fit of
the pooled records (:func:`simulations.reference.plain_reference`: an exact sampler run until its bulk and
tail ESS are at least 4x the confidential run's and 2,000 and its R-hat <= 1.01, shown in its label), what a
centralised analysis would get; the z-scores of the outputs are computed against it. It reports its
progress on stderr, stops at ``[reference] max_seconds`` (default 120 s) with what it has, and a reference
that did not converge is a warning of the run; ``--no-reference`` skips it, and so does a run with fewer
than 4 draws per chain after warm-up (nothing to compare). A blocked run (a registry random intercept,
``[sampler] blocked``) is compared with the same plain fit (whose surrogate walk moves the registries'
effects u_j = σ_u z_j, not z_j: ``reference.EffectCoordinates``), an exact sampler independent of the
run's scheme; when the registries kept their effects, with its shared parameters only.

For ABCDP the simulated parties assume the protocols' honest-majority threat model (``[budget] colluding
= (m - 1) // 2``: the SVT ε is backed against that many colluders, see ``parties/abcdp.py``) and, unless
``party_gdp_mu`` is given, hold a budget of twice the run's ε at δ = 1e-6; for the MH samplers they keep
the daemon's conservative default (m - 1 colluders).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.certs import COORDINATOR_IDENTITY, init_consortium
from coordinator.checkpoint import RunFolder
from coordinator.experiment import Experiment
from coordinator.outcome import LabelledDraws, Outcome, ProgressInfo
from coordinator.run import run_experiment
from hss.fixedpoint import max_threshold
from mechanisms.models.base import Model, SchemaError
from parties.sources import DEFAULT_MAX_RECORDS, CsvSource, ParquetSource, SourceError, take_snapshot
from simulations import registries
from simulations.launcher import LocalConsortium, PartyOptions, party_config_text, write_csv
from simulations.reference import (
    REFERENCE_ESS_RATIO,
    REFERENCE_MIN_ESS,
    STAGES,
    ReferenceProgress,
    ReferenceSettings,
    plain_reference,
    run_ess,
)
from simulations.servers import PostgresServer, SparqlServer

F64 = npt.NDArray[np.float64]
TOY_THETA = (0.25, 0.05, 0.2, 0.15, 0.35)


def synthetic_data(exp: Experiment) -> list[dict[str, F64]]:
    """One dict of schema columns per party: ``[simulate] data`` files when given, else the model's own
    ``synthetic_data`` (public data seed); either way checked against the model's schema."""
    sim = exp.simulate
    assert sim is not None
    rng = np.random.default_rng(sim.data_seed)
    if exp.sampler.simulator_run:
        from mechanisms.simulators.toy import ToyMixtureModel

        total = int(exp.sampler.abcdp["n_records"])
        y = ToyMixtureModel().simulate(np.asarray(TOY_THETA), total, rng)[0]
        parts = np.array_split(y, sim.parties)
        return [{"x": p} for p in parts]
    model = exp.model()
    if sim.data:
        return [registry_file(model, exp.model_name, path, i) for i, path in enumerate(sim.data, start=1)]
    out = model.synthetic_data(rng, sim.records)
    if out is None:
        raise ValueError(
            f"--simulate has no data for model {exp.model_name!r}: it defines no synthetic_data(rng, sizes); "
            "give [simulate] data = [one CSV or Parquet file per registry], or define the method "
            "(docs/MODELS.md)"
        )
    if len(out) != sim.parties:
        raise ValueError(
            f"model {exp.model_name!r}: synthetic_data returned {len(out)} registries for {sim.parties} sizes"
        )
    checked = []
    for i, cols in enumerate(out, start=1):
        try:
            where = f"synthetic_data of model {exp.model_name!r}, registry {i}"
            checked.append(model.check_data(cols, where=where))
        except SchemaError as exc:
            raise ValueError(str(exc)) from exc
    return checked


def registry_file(model: Model, name: str, path: Path, pid: int) -> dict[str, F64]:
    """A ``[simulate] data`` file read as its daemon would read it (parties.sources), schema-checked."""
    source = ParquetSource(path) if path.suffix.lower() == ".parquet" else CsvSource(path)
    try:
        snap = take_snapshot(source, DEFAULT_MAX_RECORDS, model.schema, name)
    except SourceError as exc:
        raise ValueError(f"simulate.data[{pid - 1}] ({path}): {exc}") from exc
    return {c.name: snap.dataset.columns[c.name] for c in model.schema}


def noise_key(pid: int) -> bytes:
    """TESTING ONLY ([simulate] fixed_noise_keys): a party's repeatable noise key."""
    return hashlib.sha256(b"confar/simulate/fixed-noise/%d" % pid).digest()


@contextlib.contextmanager
def consortium(exp: Experiment, workdir: Path, data: list[dict[str, F64]]) -> Iterator[LocalConsortium]:
    """m daemons under ``workdir`` (kept); certificates made once, state dirs reused on resume."""
    sim = exp.simulate
    assert sim is not None
    m = sim.parties
    certs = workdir / "certs"
    if not (certs / "ca.pem").exists():
        init_consortium(certs, m)
    lc = LocalConsortium(m, workdir, certs)
    budget: dict[str, Any] = sim.budget()
    if exp.sampler.simulator_run:  # the SVT epsilon is backed against up to (m - 1) // 2 colluders only
        if "gdp_mu" not in budget and "epsilon" not in budget:
            eps_run = float(exp.sampler.abcdp["eps_total"])
            budget.update(epsilon=2.0 * eps_run if math.isfinite(eps_run) else 1.0, delta=1e-6)
        budget.setdefault("colluding", max_threshold(m))
    kinds = [sim.source(pid) for pid in range(1, m + 1)]
    blocked = exp.sampler.markov and exp.sampler.blocked  # effects released at the run's end
    with contextlib.ExitStack() as servers:  # stopped after the daemons (lc.stop() runs first)
        tables = registry_tables(exp, workdir, data, kinds, servers)
        try:
            for pid in range(1, m + 1):
                pdir = workdir / f"party-{pid}"
                cfg = pdir / "party.toml"
                options = PartyOptions(
                    data_table=tables[pid - 1],
                    models=(exp.analysis(),),
                    model_path=exp.model_path,
                    modes=(exp.reveal_mode, "sum") if exp.warm_start or blocked else (exp.reveal_mode,),
                    data_model=None if exp.sampler.simulator_run else exp.model_name,
                    data_model_args=None if exp.sampler.simulator_run else exp.model_params,
                    fixed_rng_key=noise_key(pid) if sim.fixed_noise_keys else None,
                    privacy_budget=budget or None,
                    require_approval=sim.party_require_approval,
                    release_effects=blocked,  # the simulation's own registries release their z_j draws
                )
                cfg.write_text(party_config_text(pid, m, workdir, certs, None, options))
                lc.spawn(pid, cfg, insecure=False)
            lc.wait_ready(60.0)
            yield lc
        finally:
            lc.stop()


def registry_tables(
    exp: Experiment,
    workdir: Path,
    data: list[dict[str, F64]],
    kinds: list[str],
    servers: contextlib.ExitStack,
) -> list[dict[str, Any]]:
    """Each party's records where ``[simulate] sources`` puts them, and its ``[data]`` entries: files in its
    folder, a database in one throwaway PostgreSQL cluster (a table and a SELECT-only role per registry,
    the role's password in a 0600 file), or a named graph of one Oxigraph SPARQL server (FAIRVASC-like). A
    column of text labels is stored as its labels (``registries.with_labels``), as a registry holds it."""
    names = list(data[0])
    schema = () if exp.sampler.simulator_run else exp.model().schema
    outcome = None if exp.sampler.simulator_run else names[-1]  # the schemas list the outcome last
    pg = PostgresServer.running() if "postgresql" in kinds else None
    server = servers.enter_context(pg) if pg is not None else None
    tables: list[dict[str, Any]] = []
    trig: list[Path] = []
    for pid, kind in enumerate(kinds, start=1):
        pdir = workdir / f"party-{pid}"
        pdir.mkdir(parents=True, exist_ok=True)
        cols = registries.with_labels(schema, data[pid - 1])
        if kind == "csv":
            write_csv(pdir / "data.csv", cols)  # type: ignore[arg-type]
            tables.append(registries.data_table("csv", path=pdir / "data.csv"))
        elif kind == "parquet":
            registries.write_parquet(pdir / "data.parquet", cols)
            tables.append(registries.data_table("parquet", path=pdir / "data.parquet"))
        elif kind == "sqlite":
            (pdir / "registry.db").unlink(missing_ok=True)
            registries.write_sqlite(pdir / "registry.db", cols)
            tables.append(
                registries.data_table("sqlite", path=pdir / "registry.db", names=names, query_dir=pdir)
            )
        elif kind == "postgresql":
            assert server is not None
            password = registries.new_password()
            server.add_registry(f"registry{pid}", registries.TABLE, cols, f"reader{pid}", password)
            pw = pdir / "db-password"
            pw.unlink(missing_ok=True)
            pw.touch(mode=0o600)
            pw.write_text(password + "\n")
            url = server.url(f"registry{pid}", f"reader{pid}")
            tables.append(
                registries.data_table("postgresql", url=url, password_file=pw, names=names, query_dir=pdir)
            )
        elif kind == "sparql":
            registries.write_trig(pdir / "registry.trig", pid, cols, outcome, seed=pid)
            trig.append(pdir / "registry.trig")
            tables.append({"pid": pid, "names": names, "outcome": outcome, "query_dir": pdir})  # see below
        else:
            raise ValueError(f"unknown [simulate] source {kind!r}")
    if trig:
        sparql = servers.enter_context(SparqlServer.running(trig))
        for i, kind in enumerate(kinds):
            if kind == "sparql":
                page = max(100, exp.simulate.records[i] // 3 + 1) if exp.simulate else 1000
                tables[i] = registries.data_table(
                    "sparql", endpoint=sparql.endpoint, page_size=page, **tables[i]
                )
    return tables


class ReferenceLog:
    """The reference's progress as ``confar run:`` lines: when its stage changes and every ``every_s``
    seconds (what it is doing, iterations, ESS and R-hat so far against the targets, elapsed)."""

    def __init__(self, say: Callable[[str], None], every_s: float = 10.0) -> None:
        self.say, self.every_s = say, every_s
        self.stage, self.last = "", -math.inf

    def __call__(self, p: ReferenceProgress) -> None:
        if p.stage == self.stage and p.elapsed - self.last < self.every_s:
            return
        self.stage, self.last = p.stage, p.elapsed
        cap = f" (at most {p.max_seconds:g} s)" if p.max_seconds is not None else ""
        text = f"reference posterior: {STAGES[p.stage]}"
        if p.stage == "sampling" and p.iterations:
            text += f", {p.iterations} iterations x {p.chains} chains"
            if math.isfinite(p.ess):
                text += f", min ESS {p.ess:.0f} of {p.min_ess:.0f}, max R-hat {p.rhat:.3f} (target 1.01)"
        self.say(f"{text}, {p.elapsed:.0f} s{cap}")


@dataclasses.dataclass(frozen=True)
class PooledReference:
    """The reference of a simulated MH run (:data:`coordinator.run.ReferenceOf`): the converged plain
    posterior of the pooled records as the sampler saw them, at least 2,000 and 4x the run's ESS (``min_ess``
    fixes another target), stopped after ``max_seconds`` (or ``max_iterations``); progress and outcome told
    through ``say``. A blocked run's is the same fit (not the run's scheme: an exact sampler of its own),
    cut to the shared parameters when the run's outputs hold only those (the effects were not released)."""

    data: list[dict[str, F64]]
    seed: int
    max_seconds: float | None
    say: Callable[[str], None]
    min_ess: float | None = None
    max_iterations: int | None = None

    def __call__(self, ran: Experiment, draws: F64, warn: Callable[[str], None]) -> LabelledDraws | None:
        min_ess = self.min_ess or max(REFERENCE_MIN_ESS, REFERENCE_ESS_RATIO * run_ess(draws))
        n = sum(len(next(iter(d.values()))) for d in self.data)
        cap = f"at most {self.max_seconds:g} s ([reference] max_seconds); " if self.max_seconds else ""
        blocked = bool(ran.sampler.blocked)
        self.say(
            f"reference posterior: a plain (not private) fit of the {n:,} pooled records to compare the run "
            f"with (target: min ESS {min_ess:.0f}, R-hat <= 1.01); {cap}--no-reference skips it"
        )
        try:
            ref = plain_reference(
                ran.model(),
                self.data,
                self.seed,
                ReferenceSettings(
                    min_ess=min_ess,
                    max_iterations=self.max_iterations,
                    max_seconds=self.max_seconds,
                    progress=ReferenceLog(self.say),
                ),
            )
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:  # the run stands without it
            warn(f"no reference posterior (the pooled records' fit failed: {exc})")
            return None
        w = ref.warning()
        if w is not None:
            warn(w)
        else:
            self.say(
                f"reference posterior: converged in {ref.elapsed:.0f} s ({ref.cpu:.0f} s of CPU; "
                f"{ref.iterations} iterations x {ref.draws.shape[0]} chains, min ESS "
                f"{min(ref.ess_bulk, ref.ess_tail):.0f}, max R-hat {ref.rhat:.3f})"
            )
        if ref.draws.shape[1] == 0:
            return None
        ref_draws = ref.draws
        if blocked and draws.shape[-1] < ref_draws.shape[-1]:  # the registries kept their effects
            from mechanisms.models.hierarchy import SharedModel

            ref_draws = np.ascontiguousarray(ref_draws[..., list(SharedModel(ran.model()).index)])
        return LabelledDraws(("converged reference: " if ref.converged else "") + ref.label(), ref_draws)


def simulate_experiment(
    exp: Experiment,
    out_dir: Path,
    progress: Callable[[ProgressInfo], None] | None = None,
    *,
    resume: bool = False,
    stop_after_batches: int | None = None,
    log: Callable[[str], None] | None = None,
    reference: bool = True,
    **kwargs: Any,
) -> Outcome:
    """Start (or restart, on resume) the simulated consortium and run the experiment against it; for MH
    samplers compare it with a plain reference fit of the pooled records unless ``reference`` is False."""
    out_dir = Path(out_dir)
    if not resume:  # refused as the run would refuse it, before any daemon or server is started
        RunFolder(out_dir).refuse_a_held_run()
    out_dir.mkdir(parents=True, exist_ok=True)
    data = synthetic_data(exp)
    if exp.simulate is not None and exp.simulate.fixed_noise_keys and log is None:
        print("confar run: WARNING: [simulate] fixed_noise_keys: party noise is REPEATABLE (testing only)")
    say = log or (lambda msg: print(f"confar run: {msg}", file=sys.stderr))
    ref_of: PooledReference | None = None
    if exp.sampler.markov and reference:  # the plain posterior of the records the sampler saw
        ref_of = PooledReference(data, exp.seed, exp.reference.max_seconds, say)
    elif exp.sampler.markov:
        say("no reference posterior (--no-reference): the run is not compared with a plain fit")

    with consortium(exp, out_dir / "simulation", data) as lc:
        eps = lc.endpoints()
        coord = dataclasses.replace(exp.coordinator, identity=COORDINATOR_IDENTITY, insecure=False)
        return run_experiment(
            dataclasses.replace(exp.with_parties(eps), coordinator=coord),
            eps,
            lc.coordinator_tls(),
            out_dir,
            progress,
            resume=resume,
            stop_after_batches=stop_after_batches,
            reference=ref_of,
            log=log,
            **kwargs,
        )
