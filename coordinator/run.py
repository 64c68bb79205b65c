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

The run loop and the command live here; the run folder and its checkpoint in :mod:`coordinator.checkpoint`,
the sampler drivers (and federated ABCDP's) in :mod:`coordinator.drivers`, the privacy dry run in
:mod:`coordinator.run_privacy`, progress and the outcome in :mod:`coordinator.outcome`.

Exit codes: 0 done; 1 the run failed or a party refused (reasons printed); 2 bad file or command line;
3 stopped early: a registry's privacy budget ran out partway (it refused a batch); the outputs are written
for what was drawn: the posterior of the draws after the warm-up, or, when it stopped in the warm-up, no
posterior but the warm-up's draws labelled as such (``warmup.nc``, ``warmup_draws.csv``), and in every case
each registry's privacy report, the provenance and a summary saying why; 130 interrupted (the checkpoint is
kept: resume with ``--resume DIR``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from coordinator import planner
from coordinator import warm_start as warm
from coordinator.api import BlockingCoordinator, BlockingSession, SessionError, SessionOptions
from coordinator.checkpoint import (
    DrawLog,
    RunError,
    RunFolder,
    StopRequested,
    check_resume,
    clear_run_folder,
    load_resumed,
    now,
)
from coordinator.convergence import convergence_warnings
from coordinator.decider import NetworkDecider
from coordinator.drivers import BlockedDriver, MHDriver, RejectionDriver, make_driver, run_abcdp
from coordinator.experiment import Experiment, load_experiment
from coordinator.outcome import (
    LabelledDraws,
    Outcome,
    ProgressBar,
    ProgressInfo,
    summary_text,
    write_run_outputs,
)
from coordinator.plugins import service
from coordinator.run_check import check, in_file_keys, output_name_problems
from coordinator.run_privacy import PrivacyPlan, check_privacy, plan_file, privacy_reports
from coordinator.tables import ExperimentError
from mechanisms.samplers import RefitState
from proto.spec import PartyEntry
from proto.tls import TlsMaterial

F64 = npt.NDArray[np.float64]

HELP = "run an experiment file: privacy dry run, confidential sampling with checkpoints, outputs"
EXIT_STOPPED = 3  # the run stopped early at a registry's privacy budget; its outputs hold what it drew


# ---- the run ---------------------------------------------------------------------------------------------


#: a reference computed after the run: given the experiment the sampler ran, the run's draws after warm-up
#: and ``warn`` (a warning for the run's list: printed ``WARNING: ...``, kept in the summary and provenance)
ReferenceOf = Callable[[Experiment, F64, Callable[[str], None]], F64 | LabelledDraws | None]
MIN_DRAWS_TO_COMPARE = 4  # per chain after warm-up: fewer have no ESS, so no z-score against a reference


def run_experiment(
    exp: Experiment,
    endpoints: list[PartyEntry],
    tls: TlsMaterial | None,
    out_dir: Path,
    progress: Callable[[ProgressInfo], None] | None = None,
    *,
    resume: bool = False,
    stop_after_batches: int | None = None,
    reference: F64 | LabelledDraws | ReferenceOf | None = None,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """Run (or, with ``resume``, continue) ``exp`` against ``endpoints``; write outputs into ``out_dir``.

    ``progress`` is called after every batch (a :class:`ProgressBar`, or a test hook: an exception raised
    there stops the run after that batch's checkpoint). ``stop_after_batches`` = K stops the run as if it
    crashed after K batches of this invocation were decided but before the K-th checkpoint was written
    (raises :class:`StopRequested`); resuming then asks that batch again and the parties replay it.
    ``reference`` (chains, draws, d), e.g. a centralised run of a simulation, goes to the outputs; a
    callable (:data:`ReferenceOf`) is given the experiment the sampler ran (after a warm start: with its
    covariate region), the run's draws after warm-up (chains, draws, d), e.g. to size the reference's ESS by
    the run's, and a function adding a warning to the run's; it is not called when the run has fewer than 4
    draws per chain after warm-up (nothing to compare: no ESS, no z-score), which is said."""
    if callable(reference):
        ref_of: ReferenceOf | None = reference
        reference = None
    else:
        ref_of = None
    say = log or (lambda msg: print(f"confar run: {msg}", file=sys.stderr))
    unusable = output_name_problems(exp)  # refused before anything is released or charged
    if unusable:
        raise ExperimentError(f"{exp.source}: " + "; ".join(unusable))
    if exp.sampler.simulator_run:
        return run_abcdp(
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
    mcmc_plan: planner.AnyPlan | None = None  # the plan the run's length came from (planned runs)
    try:  # a formula's warm start in the pilot's basis; the pilot (public records) for the plan
        exp, pilot = planner.with_pilot(exp, exp.model())
    except planner.PlanRefused as exc:
        raise RunError(str(exc)) from exc
    if exp.budget_target is not None:  # budget first: refused before anything is released if unusable
        assert pilot is not None
        pilot_exp, p = _plan(exp, pilot.model, pilot.laplace, say, f"plan from the pilot ({pilot.text})")
        if exp.sampler.blocked:  # no warm start: the pilot's plan is the run's (its settings and sweeps)
            exp, mcmc_plan = pilot_exp, p
    meta, ckpt = rf.open(exp, resume)
    warm_steps = 0
    if exp.warm_start is not None and exp.budget_target is None and _releases_warm_start(rf):
        # the sampling's dry run before the warm start releases anything: a budget it passes stops the run
        batches = exp.sampler.batches
        check_privacy(exp, plan_file(exp, endpoints, tls, batches), batches, before_release=True)
    if exp.warm_start is not None:  # the DP warm start: released once, kept in the run folder
        exp, warm_steps = _warm_start(exp, rf, meta, endpoints, tls, say)
        if exp.budget_target is not None:  # the run's length from the DP Laplace approximation
            what = "plan from the DP Laplace approximation"
            exp, mcmc_plan = _plan(exp, exp.model(), exp.sampler.laplace, say, what)
    driver, dlog, run_step = _start(exp, rf, meta, ckpt, warm_steps, say)
    run_id: str = meta["run_id"]
    remaining = max(driver.total - driver.batch, 0)
    plan = None
    if not driver.finished:
        pf = plan_file(exp, endpoints, tls, remaining)
        plan = check_privacy(exp, pf, remaining)
        if plan.may_stop:
            say(f"privacy dry run: {plan.may_stop}\n{plan.text}")
        else:
            say(f"privacy dry run: every party would accept {remaining} batches\n{plan.text}")

    warnings: list[str] = list(meta.get("warnings", []))
    session_ids = [str(s["session_id"]) for s in meta.get("sessions", [])]
    warmup = exp.sampler.kept_warmup
    stopped = ""
    t_start = time.perf_counter()
    with BlockingCoordinator(
        endpoints, tls, identity=exp.coordinator.identity, rpc_timeout_s=exp.coordinator.rpc_timeout_s
    ) as coord:
        if not driver.finished:
            sess = _open_session(coord, exp, rf, meta, run_step, warnings, say)
            session_ids.append(sess.spec.session_id.hex())
            report = _Reporter(plan, progress, t_start)
            run_step, ran_out = _sample(sess, driver, dlog, rf, run_id, run_step, report, stop_after_batches)
            if ran_out:
                stopped = _stopped_text(driver, warmup, ran_out)
                say(f"WARNING: {stopped}")
                warnings.append(stopped)
        if isinstance(driver, BlockedDriver) and driver.batch > 0:  # the registries' effect draws, if allowed
            driver.release_effects(coord, run_id, say)
            if driver.kept_by:
                withheld = (
                    "the registries' effect draws were not released, so the outputs hold the shared "
                    f"parameters only: {driver.kept_by}"
                )
                say(f"WARNING: {withheld}")
                warnings.append(withheld)
        reports = privacy_reports(exp, endpoints, tls)
    draws, stats = driver.draws(dlog.read())
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
        notes=laplace_lines(exp, driver.model.param_names, draws[:, min(warmup, draws.shape[1]) :]),
        privacy_readings=planner.other_readings(exp, driver.model, reports, run_id)
        if exp.budget_target
        else {},
        finished=not stopped,
        stopped=stopped,
    )
    if isinstance(driver, RejectionDriver) and driver.kept < exp.sampler.n_accept:
        w = f"rejection sampling stopped at max_proposals = {exp.sampler.max_proposals}: {driver.kept} draws"
        say(f"WARNING: {w}")
        outcome.warnings.append(w)
    if exp.sampler.markov and (outcome.posterior_draws or not stopped):  # coordinator.convergence
        w0 = min(warmup, draws.shape[1])
        proposed = driver.batch * exp.sampler.chains
        planned = exp.budget_target is not None
        tuned = exp.sampler.scale_adapt
        more = budget_advice(exp, mcmc_plan, reports)
        for w in convergence_warnings(
            draws[:, w0:], outcome.param_names, driver.accepted, proposed, driver.asked, planned, tuned, more
        ):
            say(f"WARNING: {w}")
            outcome.warnings.append(w)
    exact = exactness_line(exp, driver.model, draws[:, min(warmup, draws.shape[1]) :], mcmc_plan)
    if exact:
        say(exact)
        outcome.notes.append(exact)
    refit = refit_line(exp, driver)
    planned = exp.budget_target is not None and exp.sampler.laplace is not None
    if refit:
        outcome.notes.append(refit)
    elif planned and "accepted" in stats and outcome.posterior_draws:  # a whole warm-up: the pilot
        for w in _pilot_check(exp, driver.model, stats["accepted"], warmup, outcome.notes):
            say(f"WARNING: {w}")
            outcome.warnings.append(w)
    if ref_of is not None:
        kept = draws[:, min(warmup, draws.shape[1]) :]
        if kept.shape[1] < MIN_DRAWS_TO_COMPARE:
            say(
                f"no reference posterior: the run has {kept.shape[1]} draws per chain after warm-up (fewer "
                f"than {MIN_DRAWS_TO_COMPARE}: no ESS, so nothing to compare with a reference)"
            )
        else:

            def warn(w: str) -> None:
                say(f"WARNING: {w}")
                outcome.warnings.append(w)

            reference = ref_of(exp, kept, warn)
    outcome.written = write_run_outputs(exp, outcome, endpoints, reference, plan)
    summary = outcome.written.get("summary.txt")
    if summary is not None and outcome.warnings:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write("\nwarnings:\n" + "".join(f"  {w}\n" for w in outcome.warnings))
    return outcome


def _releases_warm_start(rf: RunFolder) -> bool:
    """Whether this invocation releases the warm start (no earlier one finished it: warm_start.json)."""
    try:
        return warm.load_result(rf.out_dir) is None
    except ValueError:  # an unreadable result: _warm_start names it
        return False


def _stopped_text(driver: MHDriver | RejectionDriver, warmup: int, why: str) -> str:
    """Why a run ended early (a registry refused a batch: its privacy budget ran out), in plain words: where,
    what the run has, and what to change."""
    where = f"a registry's privacy budget ran out at batch {driver.batch + 1} of {driver.total}"
    if warmup and driver.batch <= warmup:
        when = f"in the warm-up ({warmup} iterations)" if driver.batch < warmup else "right after the warm-up"
        has = (
            f", {when}: there are no draws after the warm-up, only the warm-up's {driver.batch} "
            "iteration(s) per chain, written as warm-up draws, not as a posterior"
        )
    else:
        has = f": the run ends with the {driver.n_draws} draws made before it"
    return (
        f"{where}{has}. Give the registries more budget, plan a run that fits ([privacy] target_epsilon), "
        f"or ask for fewer iterations. The refusal: {why}"
    )


def laplace_lines(exp: Experiment, names: Any, draws: F64) -> list[str]:
    """The warm start's DP Laplace approximation beside the MCMC posterior (the baseline it has to beat;
    public: computed from the released sums), in posterior sds of the MCMC draws."""
    lap = exp.sampler.laplace
    if lap is None or draws.size == 0:
        return []
    flat = draws.reshape(-1, draws.shape[-1])
    mean, sd = flat.mean(axis=0), flat.std(axis=0)
    lines = ["the warm start's DP Laplace approximation (the baseline): mean, sd, (mean - MCMC mean)/MCMC sd"]
    for k, name in enumerate(names):
        z = (lap.mean[k] - mean[k]) / sd[k] if sd[k] > 0 else float("nan")
        lines.append(f"  {name:<12} {lap.mean[k]:10.4f} {lap.sd()[k]:9.4f} {z:+7.2f}")
    return lines


def exactness_line(exp: Experiment, model: Any, draws: F64, mcmc_plan: planner.AnyPlan | None) -> str:
    """Does exactness pay for its ε here? (issue 35: a user should never buy it blind.) The exact chain's
    error is its Monte Carlo error, 1/√ESS posterior sd in a mean (the largest over the parameters). The DP
    Laplace approximation alone, with the same budget spent on the warm start, errs by its DP noise (this
    warm start's, ``mean_error_cov``, scaled by μ_warm/μ_total: the noise sd of a Gaussian release falls
    like 1/μ) and by the approximation's own error beyond its noise, estimated here from its distance to
    this run's posterior (√max(z² − 4(noise² + 1/ESS), 0) per parameter: z holds the DP noise and the
    chain's own Monte Carlo error as well, and a distance within about two of their sds is not told apart
    from none). Public: post-processing of released values
    and the plan. "" for a run that is not planned or has too few draws."""
    import arviz as az

    from coordinator.warm_start import warm_start_plan
    from mechanisms.warmstart import mean_error_cov

    lap, ws = exp.sampler.laplace, exp.warm_start
    if mcmc_plan is None or lap is None or ws is None or draws.ndim != 3 or draws.shape[1] < 4:
        return ""
    flat = draws.reshape(-1, draws.shape[-1])
    mean, sd = flat.mean(axis=0), flat.std(axis=0)
    if not np.all(sd > 0):
        return ""
    ess = np.asarray(az.ess(az.convert_to_dataset(draws), method="bulk").to_array().values, dtype=float)
    chain = float(np.max(1.0 / np.sqrt(np.maximum(ess, 1.0))))
    noise = np.sqrt(np.diag(mean_error_cov(warm_start_plan(ws, model, exp.m), model, lap, exp.m))) / sd
    z = np.abs(lap.mean - mean) / sd
    # z holds the DP noise and the chain's Monte Carlo error too: only what they do not explain at about two
    # of their sds is counted as the approximation's own error (a smaller z is indistinguishable from none)
    explained = 4.0 * (noise**2 + 1.0 / np.maximum(ess, 1.0))
    bias = np.sqrt(np.maximum(z**2 - explained, 0.0))
    scale = mcmc_plan.mu_warm / max(mcmc_plan.mu_total, 1e-300)
    alone = float(np.max(np.sqrt(bias**2 + (noise * scale) ** 2)))
    both = (
        f"the exact chain's Monte Carlo error {chain:.2f} posterior sd (bulk ESS {float(np.min(ess)):.0f}), "
        f"the DP Laplace approximation alone with the whole budget on the warm start about {alone:.2f} (its "
        f"noise at mu = {mcmc_plan.mu_total:.3g} and its distance from this posterior beyond its noise)"
    )
    if chain < alone:
        return f"exactness pays here: {both}"
    return (
        f"exactness does NOT pay here: {both}; at this epsilon the DP approximation alone is as accurate "
        "(a posterior this close to Gaussian needs no exact chain at this budget)"
    )


def refit_line(exp: Experiment, driver: Any) -> str:
    """What the warm-up's refit did to the independence proposal (public: post-processing of the chain
    states), in the DP Laplace approximation's sds; "" without a refit or before its last refit."""
    st, lap = getattr(driver, "mh", None), exp.sampler.laplace
    refits = getattr(driver, "refits", None)
    if not isinstance(st, RefitState) or lap is None or refits is None or st.t < refits[-1]:
        return ""
    chol = np.linalg.cholesky(lap.cov)
    moved = float(np.linalg.norm(np.linalg.solve(chol, st.mean - lap.mean)))
    ratio = np.sqrt(np.diag(st.cov) / np.diag(lap.cov))
    return (
        f"the independence proposal was refitted to the chains' states in the warm-up (iterations "
        f"{refits[0]} and {refits[1]}) and frozen for the draws: its centre moved {moved:.2g} "
        f"DP-approximation sd from the DP Laplace approximation's, its sds are "
        f"{ratio.min():.2f}-{ratio.max():.2f}x the DP approximation's (no privacy cost: the chain states are "
        "released anyway)"
    )


def _pilot_check(exp: Experiment, model: Any, accepted: Any, warmup: int, notes: list[str]) -> list[str]:
    """The plan against the run (issue 23): the warm-up's accept bits (released, charged) re-plan the ESS
    at the offset of the proposal they show (``planner.pilot_replan``); a note, and a warning when that is
    below ``min_ess`` (the warm start is further off than its DP noise)."""
    target, laplace = exp.budget_target, exp.sampler.laplace
    bits = np.asarray(accepted)[:, :warmup].T
    if target is None or laplace is None or bits.shape[0] < 4 or exp.sampler.iterations <= warmup:
        return []
    p, re, r = planner.pilot_replan(exp, model, laplace, bits)
    after_pilot = exp.sampler.chains * (exp.sampler.iterations - warmup)
    planned, expected = after_pilot * p.stats.ess_per_proposal, after_pilot * re.stats.ess_per_proposal
    half = bits[bits.shape[0] // 2 :]
    notes.append(
        f"the plan against the run: the pilot (the warm-up's accept bits; {int(half.sum())} of {half.size} "
        f"accepted in its second half, {re.stats.acceptance:.3f} expected after it) puts the proposal "
        f"{r:.2g} approximation sd off the posterior; expected ESS at this length {expected:.0f} (the plan "
        f"from the DP approximation said {planned:.0f})"
    )
    if expected >= target.min_ess:
        return []
    return [
        f"the pilot (the warm-up's accept bits) re-plans this run's ESS to {expected:.0f}, below min_ess = "
        f"{target.min_ess:g} (the plan said {planned:.0f}): the DP warm start is about {r:.2g} sd off the "
        "posterior, further than its noise explains; change: more [warm_start] steps (or a larger mu)"
    ]


def budget_advice(
    exp: Experiment, mcmc_plan: planner.AnyPlan | None, reports: dict[int, Any]
) -> Callable[[float], str] | None:
    """What more effective draws would cost when the registries charge every decision (the convergence
    warnings' advice; "more iterations" alone would hide that it spends more ε): given the factor of
    effective draws wanted, the target a planned run would need at its plan's price per decision, or, for a
    run against registries with budgets, the factor of decisions and what this run's ledgers show; None
    when no registry keeps a budget (more iterations cost no ε then)."""
    same = "or fewer, longer chains (the same decisions, less warm-up: no more epsilon)"
    if mcmc_plan is not None and exp.budget_target is not None:
        p, target = mcmc_plan, exp.budget_target

        def planned(factor: float) -> str:
            return (
                f"about {factor:.1f}x this run's decisions, i.e. [privacy] target_epsilon >= "
                f"{p.eps_scaled(factor):.3g} at delta = {target.delta:g} at the plan's price per decision "
                f"(this run: {target.epsilon:g}); {same}"
            )

        return planned
    spent = [
        float(r.budget.spent)
        for r in reports.values()
        if not isinstance(r, str) and getattr(r, "budget", None) is not None and r.budget.spent > 0
    ]
    if not spent:
        return None

    def budgeted(factor: float) -> str:
        return (
            f"about {factor:.1f}x this run's decisions, which every registry charges (their ledgers stand "
            f"at up to {max(spent):.3g} after this run; `confar privacy plan` prices a run); {same}"
        )

    return budgeted


def _plan(
    exp: Experiment, model: Any, laplace: Any, say: Callable[[str], None], what: str
) -> tuple[Experiment, planner.AnyPlan]:
    """The planned run (``coordinator.planner``) from ``laplace``: the pilot's before the warm start (with the
    pilot's model, ``planner.Pilot.model``), the DP Laplace approximation after it (``what`` says which);
    RunError when the budget buys too little."""
    try:
        p = planner.any_plan(exp, model, laplace)
        planner.check_usable(exp, p, what)
    except planner.PlanRefused as exc:
        raise RunError(str(exc)) from exc
    assert exp.budget_target is not None
    say(f"{what}, for {exp.budget_target.text()}: {p.text()}\n{p.floor_line()}")
    advice = planner.cap_advice(exp, model, laplace, p)
    if advice is not None:
        say(f"WARNING: {advice}")
    return planner.planned_experiment(exp, p), p


def _warm_start(
    exp: Experiment,
    rf: RunFolder,
    meta: dict[str, Any],
    endpoints: list[PartyEntry],
    tls: TlsMaterial | None,
    say: Callable[[str], None],
) -> tuple[Experiment, int]:
    """The experiment after the warm start (``coordinator.warm_start``) and the run steps it took: read from
    ``warm_start.json`` when an earlier invocation finished it, else released now (a release the registries
    answered before is replayed from their records, not charged again) and saved."""
    try:
        result = warm.load_result(rf.out_dir)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    if result is None:

        def record(session_id: str, first: int) -> None:
            meta.setdefault("sessions", []).append(
                {"session_id": session_id, "first_run_step": first, "opened": now(), "warm_start": True}
            )
            rf.save_meta(meta)

        with BlockingCoordinator(
            endpoints, tls, identity=exp.coordinator.identity, rpc_timeout_s=exp.coordinator.rpc_timeout_s
        ) as coord:
            result = warm.network_warm_start(coord, exp, meta["run_id"], say, record)
        warm.save_result(rf.out_dir, result)
        mean = np.round(result.laplace.mean, 4)
        say(f"warm start done: {result.run_steps} releases; DP Laplace mean {mean}")
        after = warm.after_warm_start(exp, result)
        w = warm.unconverged(after, result)
        if w is not None:  # kept in run.json: a resumed run reports it too
            say(f"WARNING: {w}")
            meta.setdefault("warnings", []).append(w)
            rf.save_meta(meta)
    return warm.after_warm_start(exp, result), result.run_steps


def _start(
    exp: Experiment,
    rf: RunFolder,
    meta: dict[str, Any],
    ckpt: dict[str, Any] | None,
    first_step: int,
    say: Callable[[str], None],
) -> tuple[MHDriver | RejectionDriver, DrawLog, int]:
    """The driver and draw log at the last checkpoint (a new run's: at the start, after ``first_step`` run
    steps of the warm start) and the checkpoint's run step."""
    run_id: str = meta["run_id"]
    driver = make_driver(exp)
    dlog = DrawLog(rf.ckpt / "draws.bin", driver.width)
    run_step = first_step
    if ckpt is None:  # a new run, or a resumed one stopped before its first checkpoint
        driver.initial()
        dlog.path.unlink(missing_ok=True)
    else:
        rf.check_run_id(ckpt, run_id)
        driver.resume(ckpt)
        run_step = int(ckpt["run_step"])
        dlog.open(int(ckpt["rows"]))
    if ckpt is not None and ckpt.get("done"):
        say(f"run {run_id} already finished its sampling; writing the outputs again")
    return driver, dlog, run_step


def _open_session(
    coord: BlockingCoordinator,
    exp: Experiment,
    rf: RunFolder,
    meta: dict[str, Any],
    run_step: int,
    warnings: list[str],
    say: Callable[[str], None],
) -> BlockingSession:
    """The run's next session, at run step ``run_step + 1``, checked against the checkpoint and recorded in
    ``run.json`` (with its warnings, which also go to ``warnings``)."""
    sess = coord.open_session(SessionOptions(
        reveal_mode=exp.reveal_mode,
        model=exp.analysis(),
        model_params=exp.session_params(),
        t=exp.threshold,
        topology=exp.topology,
        run_id=meta["run_id"],
        first_run_step=run_step + 1,
        sign_precompute=exp.sign_precompute,
        precompute_ahead=exp.precompute_ahead,
        security=exp.security,
        study=exp.study_text,
    ))
    check_resume(sess, run_step)
    for w in sess.warnings:
        say(f"WARNING: {w}")
        warnings.append(w)
    meta.setdefault("sessions", []).append(
        {"session_id": sess.spec.session_id.hex(), "first_run_step": run_step + 1, "opened": now()}
    )
    meta["warnings"] = warnings
    rf.save_meta(meta)
    return sess


@dataclass(frozen=True)
class _Reporter:
    """What the progress line after each batch needs: the privacy plan (its spend so far), the callback and
    the time decisions/s count from."""

    plan: PrivacyPlan | None
    progress: Callable[[ProgressInfo], None] | None
    t_start: float


def _sample(
    sess: BlockingSession,
    driver: MHDriver | RejectionDriver,
    dlog: DrawLog,
    rf: RunFolder,
    run_id: str,
    run_step: int,
    report: _Reporter,
    stop_after_batches: int | None,
) -> tuple[int, str]:
    """Drive the sampler to its end in ``sess``, one ``Evaluate`` step per batch, appending to the draw log
    and writing a checkpoint after each; the session is aborted on any exception, else closed. Returns the
    last run step and, when a registry refused a batch because its privacy budget ran out, its reason (the
    sampling ends there; the draws so far are kept)."""
    plan, progress, t_start = report.plan, report.progress, report.t_start
    decisions0 = 0
    decide = NetworkDecider(sess)
    base_step = run_step
    done_here = 0
    try:
        while not driver.finished:
            try:
                rows = driver.step(decide)
            except SessionError as exc:
                if exc.code != grpc.StatusCode.RESOURCE_EXHAUSTED or "privacy budget" not in str(exc):
                    raise
                sess.abort("a registry's privacy budget ran out")
                return run_step, str(exc)
            run_step = base_step + decide.calls
            done_here += 1
            if stop_after_batches is not None and done_here >= stop_after_batches:
                raise StopRequested(f"stopped after {done_here} batches (before checkpoint {driver.batch})")
            dlog.append(rows)
            rf.save_state(driver.checkpoint(run_id, run_step, dlog.rows))
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
    return run_step, ""


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
        "--no-reference",
        action="store_true",
        help="--simulate: skip the plain reference fit of the pooled records the run is compared with",
    )
    p.add_argument(
        "--stop-after-batches",
        type=int,
        metavar="K",
        help="testing: stop as if crashed after K batches, before the K-th checkpoint (then --resume)",
    )


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
    if args.resume is not None:  # as --out: a relative folder is the caller's, whatever the run's cwd later
        args.resume = args.resume.expanduser().absolute()
    try:
        exp = load_resumed(args.resume) if args.resume is not None else load_experiment(args.config)
        simulate = args.simulate or (args.resume is not None and _was_simulated(exp))
        exp = _with_simulation(exp, simulate)
        if args.out is not None:
            from dataclasses import replace

            exp = replace(exp, output_dir=args.out.expanduser().absolute())
    except ExperimentError as exc:
        print(f"confar run: {exc}", file=sys.stderr)
        return 2
    if args.check:
        return check(exp, simulate)
    bar: Callable[[ProgressInfo], None] | None = ProgressBar(tty=False if args.no_progress else None)
    out_dir = exp.output_dir
    try:
        outcome = execute(
            exp,
            simulate=simulate,
            resume=args.resume is not None,
            overwrite=args.overwrite,
            progress=bar,
            stop_after_batches=args.stop_after_batches,
            reference=not args.no_reference,
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
        print(f"confar run: {in_file_keys(str(exc))}", file=sys.stderr)
        return 1
    print(summary_text(outcome))
    if outcome.stopped:
        written = ", ".join(sorted(outcome.written)) or "nothing ([output] formats = [])"
        print(
            f"confar run: STOPPED EARLY (exit code {EXIT_STOPPED}): {outcome.stopped}. Outputs in "
            f"{outcome.out_dir}: {written}",
            file=sys.stderr,
        )
        return EXIT_STOPPED
    return 0


def _with_simulation(exp: Experiment, simulate: bool) -> Experiment:
    """A simulated run of a file without [simulate]: three registries of 500 records (or one per
    [[parties]] entry)."""
    if not simulate or exp.simulate is not None:
        return exp
    from dataclasses import replace

    from coordinator.experiment import SimulateSettings

    m = len(exp.parties) or 3
    return replace(exp, simulate=SimulateSettings(m, (500,) * m, exp.seed))


def execute(
    exp: Experiment,
    *,
    simulate: bool,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[ProgressInfo], None] | None = None,
    stop_after_batches: int | None = None,
    reference: bool = True,
) -> Outcome:
    """Run ``exp`` into its output_dir, against its [[parties]] or (``simulate``) a local consortium of
    daemons: what ``confar run`` and ``coordinator.study.fit`` both do. ``reference`` False: a simulated
    run is not compared with a plain fit of its pooled records (``--no-reference``)."""
    exp = _with_simulation(exp, simulate)
    if overwrite:
        clear_run_folder(exp.output_dir)
    if simulate:
        mod = service("local-consortium")
        outcome: Outcome = mod.simulate_experiment(
            exp,
            exp.output_dir,
            progress=progress,
            resume=resume,
            stop_after_batches=stop_after_batches,
            reference=reference,
        )
        return outcome
    tls = exp.coordinator.tls(source=str(exp.source))
    return run_experiment(
        exp,
        exp.parties,
        tls,
        exp.output_dir,
        progress=progress,
        resume=resume,
        stop_after_batches=stop_after_batches,
    )


def _was_simulated(exp: Experiment) -> bool:
    return (exp.output_dir / "simulation").is_dir()
