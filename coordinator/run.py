"""``confar run EXPERIMENT.toml``: one experiment from its file to its outputs, resumable after a crash.

1. Load and validate the file (:mod:`coordinator.experiment`; exit 2 naming the key). Nothing is contacted.
2. Privacy dry run: every party's ``PlanPrivacy`` for the planned session (no data read, nothing charged).
   A party that would refuse aborts the run with its reason; with a ``[privacy]`` target, each party's
   per-batch events for the whole run are composed here (GDP μ, or ε at δ by PLD) and must fit it.
3. Open the session as run step ``first_run_step`` of run ``run_id`` (a fresh random id, saved in the output
   folder), drive the sampler one ``Evaluate`` step per batch through :class:`NetworkDecider` (or federated
   ABCDP's driver), and after every batch write a checkpoint (sampler state, public-seed position, draws
   so far, run id, run step; durable: temp file, fsync, rename). A progress bar on a terminal, log lines
   otherwise.
4. Close the session, ask every party for its ``PrivacyReport`` and write the outputs
   (``coordinator.outputs.write_outputs``: ArviZ NetCDF, CSV, summary, plots, privacy reports, provenance).

``confar run --resume DIR`` re-reads the experiment saved in DIR and opens a new session of the same run at
the checkpoint's run step + 1. Parties that already completed that run step (the coordinator crashed after
they answered, before its checkpoint) return their stored messages without a new charge (parties/replay.py);
a run step a registry's crash interrupted is evaluated again, and each party that charged it already draws
the same noise from its run key and does not charge it again; so every run step is charged once. Proposals
come from the public seed per batch, so the resumed run makes the same requests and, with the same party
noise, the same draws as a run never interrupted. Federated ABCDP (``sampler.kind = "abcdp"``) checkpoints
its candidate queue and the public generator's state after every step instead (``coordinator/abcdp.py``)
and resumes the same way; each registry charges the run's whole-run epsilon once per run and rebuilds its
sparse-vector state from its record of the run's last completed step (``parties/abcdp.py``).

Output folder: ``run.json`` (run id, sessions), ``experiment.toml`` (the config as run), ``checkpoint/``
(``state.json`` and the append-only ``draws.bin``), then the outputs.

Exit codes: 0 done; 1 the run failed or a party refused (reasons printed); 2 bad file or command line;
130 interrupted (the checkpoint is kept: resume with ``--resume DIR``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from coordinator import privacy as cprivacy
from coordinator.api import BlockingCoordinator, BlockingSession, PartyEndpoint
from coordinator.decider import NetworkDecider
from coordinator.experiment import MH_KINDS, Experiment, ExperimentError, check_model, load_experiment
from mechanisms.privacy import scaled
from mechanisms.samplers import AdaptiveMH, AdaptiveState, MHState, PublicSeeds, RandomWalkMH
from mechanisms.samplers.rejection import RejectionSampler
from mechanisms.samplers.requests import DecisionRequest
from proto.files import write_durable
from proto.tls import TlsMaterial

F64 = npt.NDArray[np.float64]

HELP = "run an experiment file: privacy dry run, confidential sampling with checkpoints, outputs"
STATE_VERSION = 1
REFERENCE_LABEL = "centralised (pooled data, plain MH, same seed)"
SIMULATE_MODULE = "simulations.run_local"  # loaded by name: coordinator never imports simulations


class RunError(RuntimeError):
    """The run could not go on (a party refused, an inconsistent checkpoint, ...); the message says why."""


class StopRequested(Exception):
    """Raised by ``stop_after_batches`` (tests of resume): the run stops as if it had crashed."""


# ---- durable files ---------------------------------------------------------------------------------------


def atomic_write(path: Path, data: bytes) -> None:
    """The run folder's files (checkpoint, run.json, the experiment copy): durable, usual permissions."""
    write_durable(path, data, private=False)


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, allow_nan=False) + "\n").encode()


class DrawLog:
    """Append-only float64 records of a fixed width; the checkpoint says how many rows are valid."""

    def __init__(self, path: Path, width: int) -> None:
        self.path, self.width = path, width
        self.rows = 0

    def open(self, rows: int) -> None:
        """Keep the first ``rows`` rows (what the checkpoint covers) and drop anything written after it."""
        size = self.path.stat().st_size if self.path.exists() else 0
        need = rows * self.width * 8
        if size < need:
            raise RunError(f"{self.path}: holds {size // (8 * self.width)} rows, the checkpoint needs {rows}")
        with open(self.path, "ab") as fh:
            fh.truncate(need)
        self.rows = rows

    def append(self, block: F64) -> None:
        a = np.ascontiguousarray(block, dtype="<f8").reshape(-1, self.width)
        with open(self.path, "ab") as fh:
            fh.write(a.tobytes())
            fh.flush()
            os.fsync(fh.fileno())
        self.rows += a.shape[0]

    def read(self) -> F64:
        raw = np.fromfile(self.path, dtype="<f8", count=self.rows * self.width) if self.rows else np.zeros(0)
        return np.asarray(raw, dtype=np.float64).reshape(self.rows, self.width)


# ---- progress --------------------------------------------------------------------------------------------


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


# ---- privacy dry run -------------------------------------------------------------------------------------


def plan_file(exp: Experiment, endpoints: list[PartyEndpoint], tls: TlsMaterial | None, batches: int) -> Any:
    s = exp.sampler
    return cprivacy.PlanFile(
        source=exp.source,
        identity=exp.coordinator.identity,
        tls=tls,
        rpc_timeout_s=exp.coordinator.rpc_timeout_s,
        parties=endpoints,
        session=cprivacy.PlannedSession(
            analysis=exp.analysis(),
            reveal_mode=exp.reveal_mode,
            params=exp.session_params(),
            topology=exp.topology,
            threshold=exp.threshold,
            batches=max(batches, 1),
            batch_size=s.decisions_per_batch,
        ),
    )


@dataclass
class PrivacyPlan:
    per_batch: dict[int, list[Any]]  # party -> events of one batch (what the party reported)
    text: str
    composed: dict[int, cprivacy.Spend] = field(default_factory=dict)

    def spent_text(self, run_steps: int) -> str:
        """Largest GDP μ over parties after ``run_steps`` batches, when every event has a GDP bound."""
        mus = []
        if any(not events for events in self.per_batch.values()):
            return "privacy: not accounted (a party keeps no budget: no number is stated)"
        for events in self.per_batch.values():
            per = [e.gdp_mu() for e in events]
            if any(mu is None for mu in per):
                return ""
            mus.append(
                math.sqrt(run_steps * sum(e.count * mu * mu for e, mu in zip(events, per, strict=True)))
            )
        return f"privacy spent <= mu {max(mus):.3g} (GDP, planned per-batch events)" if mus else ""


def check_privacy(
    exp: Experiment, pf: Any, remaining: int, already_charged: set[int] | frozenset[int] = frozenset()
) -> PrivacyPlan:
    """Every party's PlanPrivacy; raise RunError with each refusing party's reason or a missed target.

    ``already_charged``: parties that charged this (resumed ABCDP) run's whole-run epsilon already; their
    refusal does not stop the run (they charge nothing more, and refuse at open if they cannot go on)."""
    answers = cprivacy.plan(pf)
    text, _ = cprivacy.format_plan(pf, answers)
    refusing = {pid for pid, r in answers.items() if isinstance(r, str) or r.would_refuse}
    moot = {pid for pid in refusing if pid in already_charged and not isinstance(answers[pid], str)}
    if refusing - moot:
        raise RunError(f"the privacy dry run failed ({len(refusing - moot)} party/parties refused):\n{text}")
    if moot:
        text += (
            f"\nparties {sorted(moot)} already charged this run's epsilon (once per run): their dry-run "
            "refusal does not apply to it"
        )
    per_batch = {pid: cprivacy.parse_events(r.events_json) for pid, r in answers.items()}
    plan = PrivacyPlan(per_batch, text)
    target = exp.privacy
    if target is None:
        return plan
    total = exp.sampler.batches if exp.sampler.kind != "abcdp" else 1
    misses = []
    for pid, events in sorted(per_batch.items()):
        who = f"party {pid} ({pf.parties[pid - 1].identity})"
        if not events:
            misses.append(
                f"{who}: reports no privacy accounting for this session, so the target cannot be shown"
            )
            continue
        whole = events if exp.sampler.kind == "abcdp" else scaled(events, total)
        sp = cprivacy.recompose(whole, target.delta if target.delta is not None else 1e-6)
        plan.composed[pid] = sp
        if target.gdp_mu is not None:
            if sp.gdp_mu is None:
                misses.append(f"{who}: its events have no GDP bound; give the target as epsilon and delta")
            elif sp.gdp_mu > target.gdp_mu * (1 + 1e-12):
                misses.append(f"{who}: the whole run is mu = {sp.gdp_mu:.6g} GDP > target {target.gdp_mu:g}")
        elif target.epsilon is not None and sp.eps > target.epsilon * (1 + 1e-12):
            misses.append(
                f"{who}: the whole run is eps = {sp.eps:.6g} at delta = {sp.delta:g} > target "
                f"{target.epsilon:g}"
            )
    if misses:
        raise RunError(
            f"the run does not fit the privacy target [privacy] {target.text()} ({total} batches of "
            f"{exp.sampler.decisions_per_batch} decisions):\n  " + "\n  ".join(misses)
        )
    return plan


# ---- the run folder --------------------------------------------------------------------------------------


@dataclass
class RunFolder:
    out_dir: Path

    @property
    def ckpt(self) -> Path:
        return self.out_dir / "checkpoint"

    @property
    def state_path(self) -> Path:
        return self.ckpt / "state.json"

    @property
    def meta_path(self) -> Path:
        return self.out_dir / "run.json"

    def create(self, exp: Experiment) -> dict[str, Any]:
        if self.meta_path.exists() or self.ckpt.exists():
            raise ExperimentError(
                f"{self.out_dir} already holds a run: continue it with `confar run --resume {self.out_dir}` "
                "or choose another experiment.output_dir"
            )
        self.ckpt.mkdir(parents=True, exist_ok=True)
        meta = {
            "run_id": f"run-{secrets.token_hex(16)}",
            "experiment": exp.name,
            "source": str(exp.source),
            "base_dir": str(exp.base_dir),
            "created": _now(),
            "sessions": [],
        }
        atomic_write(self.out_dir / "experiment.toml", exp.text.encode())
        atomic_write(self.meta_path, _json_bytes(meta))
        return meta

    def load_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError) as exc:
            raise ExperimentError(f"{self.meta_path}: not a run folder's run.json: {exc}") from exc
        if not isinstance(meta, dict) or not isinstance(meta.get("run_id"), str):
            raise ExperimentError(f"{self.meta_path}: no run_id")
        return meta

    def save_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self.meta_path, _json_bytes(meta))

    def load_state(self) -> dict[str, Any] | None:
        if not self.state_path.exists():
            return None
        try:
            st = json.loads(self.state_path.read_text())
        except (OSError, ValueError) as exc:
            raise RunError(f"{self.state_path}: unreadable checkpoint: {exc}") from exc
        if not isinstance(st, dict) or st.get("version") != STATE_VERSION:
            raise RunError(f"{self.state_path}: not a version-{STATE_VERSION} checkpoint")
        return st

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_write(self.state_path, _json_bytes(state))


def load_resumed(out_dir: Path) -> Experiment:
    """The experiment saved in a run folder (relative paths resolve against the original file's folder)."""
    rf = RunFolder(out_dir)
    meta = rf.load_meta()
    saved = out_dir / "experiment.toml"
    try:
        text = saved.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExperimentError(f"{saved}: cannot read the saved experiment: {exc.strerror}") from exc
    exp = load_experiment(saved, base_dir=Path(meta.get("base_dir", out_dir)), text=text)
    from dataclasses import replace

    return replace(exp, output_dir=out_dir)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ---- drivers ---------------------------------------------------------------------------------------------


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
    finished: bool = True
    counts: dict[str, int] = field(default_factory=dict)  # decisions asked, accepted, proposals made


class Driver:
    """One sampler kind driven batch by batch with a checkpoint after each batch."""

    width: int

    def __init__(self, exp: Experiment, seeds: PublicSeeds) -> None:
        self.exp, self.seeds = exp, seeds
        self.batch = 0  # batches done
        self.accepted = 0
        self.asked = 0

    @property
    def total(self) -> int:
        raise NotImplementedError

    @property
    def finished(self) -> bool:
        return self.batch >= self.total

    def state(self) -> dict[str, Any]:
        raise NotImplementedError

    def restore(self, st: dict[str, Any]) -> None:
        raise NotImplementedError

    def step(self, decide: NetworkDecider) -> F64:
        """Run one batch; return the rows to append to the draw log."""
        raise NotImplementedError

    def draws(self, rows: F64) -> tuple[F64, dict[str, npt.NDArray[Any]]]:
        raise NotImplementedError

    @property
    def n_draws(self) -> int:
        raise NotImplementedError


def _arr(x: Any) -> F64:
    return np.asarray(x, dtype=np.float64)


class MHDriver(Driver):
    def __init__(self, exp: Experiment, seeds: PublicSeeds) -> None:
        super().__init__(exp, seeds)
        s = exp.sampler
        self.model = exp.model()
        self.d, self.chains = self.model.d, s.chains
        self.width = self.chains * (self.d + 2)  # theta, accepted, step size per chain
        self.mh: MHState | AdaptiveState | None = None

    @property
    def total(self) -> int:
        return self.exp.sampler.iterations

    @property
    def n_draws(self) -> int:
        return self.batch * self.chains

    def kernel(self, decide: Any) -> RandomWalkMH | AdaptiveMH:
        s, m = self.exp.sampler, self.exp.m
        assert s.proposal_cov is not None
        if s.adaptive:
            return AdaptiveMH(
                self.model,
                decide,
                init_cov=s.proposal_cov,
                start=s.adapt_start,
                every=s.adapt_every,
                stop=s.adapt_stop,
                history_from=s.history_from,
                penalty=s.penalty,
                m=m,
                lazy=s.lazy,
                final=s.final,
                independence_scale=s.independence_scale,
            )
        return RandomWalkMH(self.model, decide, s.proposal_cov, penalty=s.penalty, m=m, lazy=s.lazy)

    def initial(self) -> None:
        s = self.exp.sampler
        if isinstance(s.init, str):
            theta0 = s.init_scale * self.model.sample_prior(self.seeds.init_rng(), self.chains)
        else:
            theta0 = s.init
        self.mh = self.kernel(None).init(theta0)

    def state(self) -> dict[str, Any]:
        st = self.mh
        assert st is not None
        out: dict[str, Any] = {"theta": st.theta.tolist(), "log_prior": st.log_prior.tolist()}
        if isinstance(st, AdaptiveState):
            out |= {"t": st.t, "count": st.count, "mean": st.mean.tolist(), "m2": st.m2.tolist()}
            out["cov"] = st.cov.tolist()
        return out

    def restore(self, st: dict[str, Any]) -> None:
        theta, lp = _arr(st["theta"]).reshape(self.chains, self.d), _arr(st["log_prior"])
        if self.exp.sampler.adaptive:
            self.mh = AdaptiveState(
                theta,
                lp,
                int(st["t"]),
                int(st["count"]),
                _arr(st["mean"]).reshape(self.chains, self.d),
                _arr(st["m2"]).reshape(self.d, self.d),
                _arr(st["cov"]).reshape(self.d, self.d),
            )
        else:
            self.mh = MHState(theta, lp)

    def step(self, decide: NetworkDecider) -> F64:
        assert self.mh is not None
        kernel = self.kernel(decide)
        state, info = kernel.step(self.seeds.rng(self.batch), self.mh)  # type: ignore[arg-type]
        self.mh = state
        if isinstance(state, AdaptiveState):
            cov = state.cov  # the covariance this step used
        else:
            assert isinstance(kernel, RandomWalkMH)
            cov = np.asarray(kernel.cov, dtype=np.float64)
        step_size = math.sqrt(float(np.trace(np.atleast_2d(cov))) / self.d)
        self.batch += 1
        self.accepted += int(info.accept.sum())
        self.asked += info.asked
        row = np.column_stack([state.theta, info.accept.astype(np.float64), np.full(self.chains, step_size)])
        return np.asarray(row.reshape(1, -1), dtype=np.float64)

    def draws(self, rows: F64) -> tuple[F64, dict[str, npt.NDArray[Any]]]:
        r = rows.reshape(rows.shape[0], self.chains, self.d + 2).transpose(1, 0, 2)  # chains, draws, ...
        stats = {"accepted": r[:, :, self.d] > 0.5, "step_size": r[:, :, self.d + 1].copy()}
        return np.ascontiguousarray(r[:, :, : self.d]), stats


class RejectionDriver(Driver):
    def __init__(self, exp: Experiment, seeds: PublicSeeds) -> None:
        super().__init__(exp, seeds)
        self.model = exp.model()
        self.d = self.model.d
        self.width = self.d + 1  # theta, the batch it was accepted in
        self.proposed = 0
        self.kept = 0

    @property
    def total(self) -> int:
        return self.exp.sampler.batches

    @property
    def n_draws(self) -> int:
        return self.kept

    @property
    def finished(self) -> bool:
        s = self.exp.sampler
        return self.kept >= s.n_accept or self.proposed >= s.max_proposals

    def initial(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {"proposed": self.proposed, "kept": self.kept}

    def restore(self, st: dict[str, Any]) -> None:
        self.proposed, self.kept = int(st["proposed"]), int(st["kept"])

    def step(self, decide: NetworkDecider) -> F64:
        s = self.exp.sampler
        sampler = RejectionSampler(
            self.model, decide, batch_size=s.batch_size, max_sensitivity=s.max_sensitivity
        )
        n = min(s.batch_size, s.max_proposals - self.proposed)
        ts, public = sampler.propose(self.seeds.rng(self.batch), n)
        public = sampler.capped(ts, public)  # outside A = {range <= max_sensitivity}: rejected publicly
        acc = np.zeros(n, dtype=bool)
        ok = np.flatnonzero(np.isfinite(public))
        if ok.size:
            acc[ok] = decide(DecisionRequest(kind="rejection", theta_star=ts[ok], public=public[ok]))
            self.asked += int(ok.size)
        take = ts[acc][: s.n_accept - self.kept]
        rows = np.column_stack([take, np.full(take.shape[0], float(self.batch))])
        self.proposed += n
        self.accepted += int(acc.sum())
        self.kept += take.shape[0]
        self.batch += 1
        return np.asarray(rows, dtype=np.float64)

    def draws(self, rows: F64) -> tuple[F64, dict[str, npt.NDArray[Any]]]:
        return rows[None, :, : self.d].copy(), {"batch": rows[None, :, self.d].astype(np.int64)}


# ---- the run ---------------------------------------------------------------------------------------------


def run_experiment(
    exp: Experiment,
    endpoints: list[PartyEndpoint],
    tls: TlsMaterial | None,
    out_dir: Path,
    progress: Callable[[ProgressInfo], None] | None = None,
    *,
    resume: bool = False,
    stop_after_batches: int | None = None,
    reference: F64 | None = None,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """Run (or, with ``resume``, continue) ``exp`` against ``endpoints``; write outputs into ``out_dir``.

    ``progress`` is called after every batch (a :class:`ProgressBar`, or a test hook: an exception raised
    there stops the run after that batch's checkpoint). ``stop_after_batches`` = K stops the run as if it
    crashed after K batches of this invocation were decided but before the K-th checkpoint was written
    (raises :class:`StopRequested`); resuming then asks that batch again and the parties replay it.
    ``reference`` (chains, draws, d), e.g. a centralised run of a simulation, goes to the outputs.
    """
    say = log or (lambda msg: print(f"confar run: {msg}", file=sys.stderr))
    if exp.sampler.kind == "abcdp":
        return _run_abcdp(
            exp,
            endpoints,
            tls,
            out_dir,
            progress,
            resume=resume,
            stop_after_batches=stop_after_batches,
            say=say,
        )
    out_dir = Path(out_dir)
    rf = RunFolder(out_dir)
    if resume:
        meta = rf.load_meta()
        ckpt = rf.load_state()
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        meta = rf.create(exp)
        ckpt = None
    run_id: str = meta["run_id"]
    seeds = PublicSeeds(exp.seed)
    driver: MHDriver | RejectionDriver = (
        MHDriver(exp, seeds) if exp.sampler.kind in MH_KINDS else (RejectionDriver(exp, seeds))
    )
    dlog = DrawLog(rf.ckpt / "draws.bin", driver.width)
    run_step = 0
    if ckpt is None:  # a new run, or a resumed one stopped before its first checkpoint
        driver.initial()
        dlog.path.unlink(missing_ok=True)
    else:
        if ckpt.get("run_id") != run_id:
            raise RunError(f"{rf.state_path}: checkpoint of run {ckpt.get('run_id')!r}, not {run_id!r}")
        driver.restore(ckpt["sampler"])
        driver.batch = int(ckpt["batch"])
        driver.accepted, driver.asked = int(ckpt["accepted"]), int(ckpt["asked"])
        run_step = int(ckpt["run_step"])
        dlog.open(int(ckpt["rows"]))
    if ckpt is not None and ckpt.get("done"):
        say(f"run {run_id} already finished its sampling; writing the outputs again")

    remaining = max(driver.total - driver.batch, 0)
    plan = None
    if not driver.finished:
        pf = plan_file(exp, endpoints, tls, remaining)
        plan = check_privacy(exp, pf, remaining)
        say(f"privacy dry run: every party would accept {remaining} batches\n{plan.text}")

    warnings: list[str] = list(meta.get("warnings", []))
    session_ids = [str(s["session_id"]) for s in meta.get("sessions", [])]
    t_start = time.perf_counter()
    decisions0 = 0
    with BlockingCoordinator(
        endpoints, tls, identity=exp.coordinator.identity, rpc_timeout_s=exp.coordinator.rpc_timeout_s
    ) as coord:
        if not driver.finished:
            sess = coord.open_session(
                reveal_mode=exp.reveal_mode,
                model=exp.analysis(),
                model_params=exp.session_params(),
                t=exp.threshold,
                topology=exp.topology,
                run_id=run_id,
                first_run_step=run_step + 1,
                sign_precompute=exp.sign_precompute,
            )
            _check_resume(sess, run_step)
            for w in sess.warnings:
                say(f"WARNING: {w}")
                warnings.append(w)
            session_ids.append(sess.spec.session_id.hex())
            meta.setdefault("sessions", []).append(
                {"session_id": sess.spec.session_id.hex(), "first_run_step": run_step + 1, "opened": _now()}
            )
            meta["warnings"] = warnings
            rf.save_meta(meta)
            decide = NetworkDecider(sess)
            base_step = run_step
            done_here = 0
            try:
                while not driver.finished:
                    rows = driver.step(decide)
                    run_step = base_step + decide.calls
                    done_here += 1
                    if stop_after_batches is not None and done_here >= stop_after_batches:
                        raise StopRequested(
                            f"stopped after {done_here} batches (before checkpoint {driver.batch})"
                        )
                    dlog.append(rows)
                    rf.save_state(_state(run_id, driver, run_step, dlog.rows, done=driver.finished))
                    if progress is not None:
                        dt = max(time.perf_counter() - t_start, 1e-9)
                        progress(
                            ProgressInfo(
                                done=driver.batch,
                                total=driver.total,
                                draws=driver.n_draws,
                                accept_rate=driver.accepted / max(driver.asked, 1),
                                decisions=decide.decisions - decisions0,
                                decisions_per_s=decide.decisions / dt,
                                run_step=run_step,
                                privacy=plan.spent_text(run_step) if plan is not None else "",
                            )
                        )
            except BaseException:
                sess.abort("coordinator stopped")
                raise
            sess.close("done")
        reports = _privacy_reports(exp, endpoints, tls)
    rows = dlog.read()
    draws, stats = driver.draws(rows)
    warmup = exp.sampler.warmup if exp.sampler.kind in MH_KINDS else 0
    outcome = Outcome(
        run_id=run_id,
        out_dir=out_dir,
        draws=draws,
        param_names=tuple(driver.model.param_names),
        sample_stats=stats,
        warmup=warmup,
        run_steps=run_step,
        session_ids=session_ids,
        privacy_reports=reports,
        warnings=warnings,
        counts={"decisions_asked": driver.asked, "accepted": driver.accepted}
        | ({"proposed": driver.proposed} if isinstance(driver, RejectionDriver) else {}),
    )
    if isinstance(driver, RejectionDriver) and driver.kept < exp.sampler.n_accept:
        w = f"rejection sampling stopped at max_proposals = {exp.sampler.max_proposals}: {driver.kept} draws"
        say(f"WARNING: {w}")
        outcome.warnings.append(w)
    outcome.written = write_run_outputs(exp, outcome, endpoints, reference, plan)
    return outcome


def _state(run_id: str, driver: Driver, run_step: int, rows: int, done: bool) -> dict[str, Any]:
    return {
        "version": STATE_VERSION,
        "run_id": run_id,
        "run_step": run_step,  # the last run step whose decisions this checkpoint includes
        "batch": driver.batch,  # batches done = the public-seed stream of the next batch
        "public_seed": driver.seeds.root,
        "rows": rows,
        "accepted": driver.accepted,
        "asked": driver.asked,
        "sampler": driver.state(),
        "done": done,
        "written": _now(),
    }


def _check_resume(sess: BlockingSession, run_step: int) -> None:
    """Checkpoint at run step c: every party must hold c or c + 1 (a step done after the last checkpoint)."""
    bad = {pid: s for pid, s in sess.resume.items() if s not in (run_step, run_step + 1)}
    if bad:
        sess.abort("inconsistent checkpoint")
        raise RunError(
            f"the checkpoint is at run step {run_step} but parties report their last completed run step as "
            f"{bad} (expected {run_step} or {run_step + 1}): this folder's checkpoint does not belong with "
            "these parties' records; not continuing"
        )


def _privacy_reports(
    exp: Experiment, endpoints: list[PartyEndpoint], tls: TlsMaterial | None
) -> dict[int, Any]:
    """Each party's PrivacyReport answer (its ledger), or the error string when it could not be asked."""
    return dict(cprivacy.report(plan_file(exp, endpoints, tls, 1)))


def provenance(exp: Experiment, outcome: Outcome, endpoints: list[PartyEndpoint]) -> dict[str, Any]:
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
        "warnings": outcome.warnings,
        "python": platform.python_version(),
        "finished": _now(),
    }


def write_run_outputs(
    exp: Experiment,
    outcome: Outcome,
    endpoints: list[PartyEndpoint],
    reference: F64 | None,
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
        else outputs.ReferencePosterior.from_draws(REFERENCE_LABEL, reference),
        privacy_reports=outcome.privacy_reports,
        privacy_delta=exp.privacy.delta if exp.privacy is not None and exp.privacy.delta else 1e-5,
        provenance=provenance(exp, outcome, endpoints),
    )
    # the folder is this run's own (run.json, checkpoint/): replace the outputs of an earlier attempt
    return dict(outputs.write_outputs(outcome.out_dir, result, overwrite=True))


def _run_abcdp(
    exp: Experiment,
    endpoints: list[PartyEndpoint],
    tls: TlsMaterial | None,
    out_dir: Path,
    progress: Callable[[ProgressInfo], None] | None,
    *,
    resume: bool,
    stop_after_batches: int | None,
    say: Callable[[str], None],
) -> Outcome:
    """Federated ABCDP (coordinator/abcdp.py): sessions of the run ``run_id`` to c accepts, a checkpoint
    after every step (``state.json``: the candidate queue bit for bit, the public generator's state, steps
    and candidates sent; durable), resumable from it like the samplers. Each party charges the run's epsilon
    once per run and keeps its sparse-vector state per completed run step (``parties.abcdp``)."""
    from coordinator import abcdp as cabcdp
    from mechanisms.abcdp.federated import FederatedSvtPlan
    from mechanisms.simulators.toy import ToyMixtureModel

    s = exp.sampler
    plan = FederatedSvtPlan.from_params(s.abcdp)
    out_dir = Path(out_dir)
    rf = RunFolder(out_dir)
    if resume:
        meta = rf.load_meta()
        ckpt = rf.load_state()
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        meta = rf.create(exp)
        ckpt = None
    run_id: str = meta["run_id"]
    start = None
    if ckpt is not None:
        if ckpt.get("run_id") != run_id:
            raise RunError(f"{rf.state_path}: checkpoint of run {ckpt.get('run_id')!r}, not {run_id!r}")
        try:
            start = cabcdp.AbcdpState.from_json(plan, ckpt["abcdp"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RunError(f"{rf.state_path}: not a usable checkpoint of this ABCDP run: {exc}") from exc
    steps0 = start.steps if start is not None else 0
    finished = start is not None and start.finished(s.max_proposals)
    pp = None
    if finished:
        say(f"run {run_id} already finished its sampling; writing the outputs again")
    else:
        pf = plan_file(exp, endpoints, tls, s.batches)
        paid = _parties_charged_for_run(pf, run_id) if resume else set()
        pp = check_privacy(exp, pf, s.batches, already_charged=paid)
        say(f"privacy dry run: every party would accept the run\n{pp.text}")
        if resume:
            say(f"resuming ABCDP run {run_id} at run step {steps0 + 1}")
    toy = ToyMixtureModel()
    n_sim = plan.n_records  # each candidate's simulated data set has the size of the observed one

    def prior_sample(rng: np.random.Generator, k: int) -> F64:
        return toy.sample_prior(rng, k)

    def simulate(th: F64, rng: np.random.Generator) -> F64:
        return toy.simulate(th, n_sim, rng)

    t0 = time.perf_counter()
    done_here = 0

    def on_open(sess: Any) -> None:
        meta.setdefault("sessions", []).append(
            {"session_id": sess.session_id.hex(), "first_run_step": steps0 + 1, "opened": _now()}
        )
        rf.save_meta(meta)
        for w in sess.warnings:
            say(f"WARNING: {w}")

    def on_step(st: Any) -> None:
        nonlocal done_here
        done_here += 1
        if stop_after_batches is not None and done_here >= stop_after_batches:
            raise StopRequested(f"stopped after {done_here} batches (before checkpoint {st.steps})")
        rf.save_state(
            {
                "version": STATE_VERSION,
                "kind": "abcdp",
                "run_id": run_id,
                "run_step": st.steps,  # the last run step whose decisions this checkpoint includes
                "public_seed": exp.seed,
                "abcdp": st.to_json(),
                "done": st.finished(s.max_proposals),
                "written": _now(),
            }
        )

    def on_progress(p: Any) -> None:
        if progress is not None:
            progress(
                ProgressInfo(
                    done=p.accepted,
                    total=p.c,
                    draws=p.accepted,
                    accept_rate=p.accepted / max(p.evaluated, 1),
                    decisions=p.evaluated,
                    decisions_per_s=p.evaluated / max(time.perf_counter() - t0, 1e-9),
                    run_step=p.step,
                    privacy=f"eps {plan.eps_total:g} charged once per run by each party",
                )
            )

    with BlockingCoordinator(
        endpoints, tls, identity=exp.coordinator.identity, rpc_timeout_s=exp.coordinator.rpc_timeout_s
    ) as coord:
        res = cabcdp.run_federated_abcdp(
            coord,
            plan,
            prior_sample,
            simulate,
            s.batch_size,
            exp.seed,
            topology=exp.topology,
            max_proposals=s.max_proposals,
            progress=on_progress,
            run_id=run_id,
            start=start,
            on_open=on_open,
            on_step=on_step,
        )
        reports = _privacy_reports(exp, endpoints, tls)
    thetas = np.asarray(res.thetas, dtype=np.float64).reshape(res.n_accepted, -1)
    outcome = Outcome(
        run_id=run_id,
        out_dir=out_dir,
        draws=thetas[None],
        param_names=tuple(f"w{k}" for k in range(1, thetas.shape[1] + 1)),
        sample_stats={"proposal_index": np.asarray(res.accepted_ids, dtype=np.int64)[None]},
        warmup=0,
        run_steps=res.steps,
        session_ids=[str(x["session_id"]) for x in meta.get("sessions", [])],
        privacy_reports=reports,
        counts={"decisions_revealed": res.n_evaluated, "accepted": res.n_accepted, "proposed": res.n_proposed}
        | {"sent": res.n_sent},
    )
    if not res.done:
        w = f"ABCDP stopped at max_proposals = {s.max_proposals} with {res.n_accepted} of {plan.c} accepts"
        say(f"WARNING: {w}")
        outcome.warnings.append(w)
    if outcome.draws.shape[1] > 0:
        outcome.written = write_run_outputs(exp, outcome, endpoints, None, pp)
    return outcome


def _parties_charged_for_run(pf: Any, run_id: str) -> set[int]:
    """The parties whose ledger already holds the whole-run charge of ``run_id`` (PrivacyReport): their
    dry-run refusal (e.g. a budget that fits the run only once) is moot, they charge nothing again and refuse
    at open themselves if they cannot continue."""
    from proto.records import RunCharge

    out = set()
    for pid, r in cprivacy.report(pf).items():
        if isinstance(r, str):
            continue
        try:
            charges = [RunCharge.from_dict(c) for c in json.loads(r.run_charges_json or "[]")]
        except (ValueError, TypeError):
            continue
        if any(c.run_id == run_id and c.is_whole_run for c in charges):
            out.add(pid)
    return out


# ---- the command -----------------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", type=Path, help="the experiment file (see coordinator/experiment.py)")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run whose output folder is DIR")
    p.add_argument(
        "--simulate",
        action="store_true",
        help="start the [simulate] consortium locally (real daemons, mTLS, synthetic data), run against it",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output folder (default: the file's experiment.output_dir, relative to the file's folder)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run's output folder (only a folder holding a run.json; nothing else)",
    )
    p.add_argument("--check", action="store_true", help="only validate the file (no party is contacted)")
    p.add_argument("--no-progress", action="store_true", help="log lines instead of a progress bar")
    p.add_argument(
        "--stop-after-batches",
        type=int,
        metavar="K",
        help="testing: stop as if crashed after K batches, before the K-th checkpoint (then --resume)",
    )


def check(exp: Experiment, simulate: bool) -> int:
    """``confar run --check``: the file, the model's public side and, with --simulate, each simulated
    registry's data against the model (schema and log-likelihood); no party is contacted. Exit 0 or 2."""
    from mechanisms.models.base import likelihood_problem

    problems = check_model(exp)
    if simulate and not problems and exp.simulate is not None:
        mod = importlib.import_module(SIMULATE_MODULE)
        try:
            data = mod.synthetic_data(exp)
        except ValueError as exc:
            problems.append(f"simulate: {exc}")
        else:
            if exp.sampler.kind != "abcdp":
                model = exp.model()
                for pid, cols in enumerate(data, start=1):
                    what = likelihood_problem(model, cols)
                    if what is not None:
                        problems.append(f"simulate: registry {pid}'s records: {what}")
    for p in problems:
        print(f"confar run: {exp.source}: {p}", file=sys.stderr)
    if problems:
        return 2
    print(f"{exp.source}: valid ({exp.sampler.kind}, {exp.m} parties, reveal {exp.reveal_mode})")
    if exp.sampler.kind != "abcdp":
        print(f"model: {exp.model_name}: prior draws in bounds with a finite log prior")
        if simulate:
            print(f"simulate: {exp.m} registries' records fit the model, log-likelihood finite")
    return 0


def run(args: argparse.Namespace) -> int:
    if (args.config is None) == (args.resume is None):
        print("confar run: give an experiment file, or --resume DIR (not both)", file=sys.stderr)
        return 2
    if args.stop_after_batches is not None and args.stop_after_batches < 1:
        print("confar run: --stop-after-batches must be >= 1", file=sys.stderr)
        return 2
    if args.resume is not None and (args.out is not None or args.overwrite):
        print("confar run: --out and --overwrite do not go with --resume DIR", file=sys.stderr)
        return 2
    try:
        exp = load_resumed(args.resume) if args.resume is not None else load_experiment(args.config)
        simulate = args.simulate or (args.resume is not None and _was_simulated(exp))
        if simulate and exp.simulate is None:
            from dataclasses import replace

            from coordinator.experiment import SimulateSettings

            m = len(exp.parties) or 3
            exp = replace(exp, simulate=SimulateSettings(m, (500,) * m, exp.seed))
        tls = None if simulate else exp.coordinator.tls(source=str(exp.source))
        if args.out is not None:
            from dataclasses import replace

            exp = replace(exp, output_dir=args.out.expanduser().absolute())
        if args.overwrite and not args.check:
            clear_run_folder(exp.output_dir)
    except ExperimentError as exc:
        print(f"confar run: {exc}", file=sys.stderr)
        return 2
    if args.check:
        return check(exp, simulate)
    bar: Callable[[ProgressInfo], None] | None = ProgressBar(tty=False if args.no_progress else None)
    out_dir = args.resume if args.resume is not None else exp.output_dir
    try:
        if simulate:
            mod = importlib.import_module(SIMULATE_MODULE)
            outcome = mod.simulate_experiment(
                exp,
                out_dir,
                progress=bar,
                resume=args.resume is not None,
                stop_after_batches=args.stop_after_batches,
            )
        else:
            outcome = run_experiment(
                exp,
                exp.parties,
                tls,
                out_dir,
                progress=bar,
                resume=args.resume is not None,
                stop_after_batches=args.stop_after_batches,
            )
    except ExperimentError as exc:
        print(f"confar run: {exc}", file=sys.stderr)
        return 2
    except StopRequested as exc:
        print(f"confar run: {exc}; continue with `confar run --resume {out_dir}`", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print(f"confar run: interrupted; continue with `confar run --resume {out_dir}`", file=sys.stderr)
        return 130
    except (RuntimeError, OSError, ValueError) as exc:  # RunError, SessionError, a daemon that did not start
        print(f"confar run: {exc}", file=sys.stderr)
        return 1
    print(summary_text(outcome))
    return 0


def clear_run_folder(out_dir: Path) -> None:
    """``--overwrite``: remove an earlier run's output folder; refuse any folder that is not one."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ExperimentError(f"--overwrite: {out_dir} is not a folder; not touched")
    if not (out_dir / "run.json").is_file() and any(out_dir.iterdir()):
        raise ExperimentError(
            f"--overwrite: {out_dir} is not empty and holds no run.json (not a run folder); not touched"
        )
    shutil.rmtree(out_dir)


def _was_simulated(exp: Experiment) -> bool:
    return (exp.output_dir / "simulation").is_dir()


def privacy_lines(outcome: Outcome) -> list[str]:
    """Each registry's privacy statement, from the privacy documents written with the outputs."""
    docs = sorted(
        (k, v) for k, v in outcome.written.items() if k.startswith("privacy/") and k.endswith(".json")
    )
    head = "privacy spent by each registry (its own ledger, recomposed here; details in privacy/):"
    lines = [head] if docs else []
    for _, path in docs:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            lines.append(f"  {path.name}: unreadable: {exc}")
            continue
        what = doc.get("statement") or doc.get("error") or "no statement"
        lines.append(f"  {doc.get('identity', path.stem)}: {what}")
    return lines


def summary_text(outcome: Outcome) -> str:
    lines = [
        f"run {outcome.run_id}: {outcome.draws.shape[0]} chain(s) x {outcome.draws.shape[1]} draws of "
        f"{', '.join(outcome.param_names)}; {outcome.run_steps} run steps in "
        f"{len(outcome.session_ids)} session(s)"
    ]
    summary = outcome.written.get("summary.txt")
    if summary is not None and summary.is_file():
        lines.append(summary.read_text(encoding="utf-8").rstrip())
    lines += privacy_lines(outcome)
    lines.append(f"outputs in {outcome.out_dir}: " + ", ".join(sorted(outcome.written)))
    lines += [f"WARNING: {w}" for w in outcome.warnings]
    return "\n".join(lines)
