"""The sampler drivers of ``confar run``: one batch at a time over the network, a checkpoint after each.

:class:`MHDriver` (``mh``, ``adaptive-mh``, ``penalty``: one iteration of every chain per batch) and
:class:`RejectionDriver` (one block of prior proposals per batch) step a :mod:`mechanisms.samplers` kernel
with a :class:`~coordinator.decider.NetworkDecider`; proposals come from the public seed per batch, so a
resumed run makes the same requests. Each driver says what its checkpoint holds (:meth:`Driver.checkpoint`,
:meth:`Driver.resume`) and turns the draw log's rows into draws and sample statistics. Federated ABCDP
(``sampler.kind = "abcdp"``) is a whole run of :func:`coordinator.abcdp.run_federated_abcdp` instead:
:func:`run_abcdp` wires it to the run folder, the privacy dry run and the outputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from coordinator.checkpoint import STATE_VERSION, RunError, RunFolder, StopRequested, now
from coordinator.decider import NetworkDecider
from coordinator.experiment import Experiment
from coordinator.outcome import Outcome, ProgressInfo, write_run_outputs
from coordinator.run_privacy import (
    PrivacyPlan,
    check_privacy,
    parties_charged_for_run,
    plan_file,
    privacy_reports,
)
from coordinator.sampler_settings import SamplerSettings
from mechanisms.kinds import RELEASE_MODE, DecisionPlan
from mechanisms.models.hierarchy import SharedModel
from mechanisms.samplers import (
    AdaptiveMH,
    AdaptiveState,
    GaussianProposal,
    IndependenceMH,
    MHState,
    PublicSeeds,
    RandomWalkMH,
    RefitIndependenceMH,
    RefitState,
)
from mechanisms.samplers.blocked import BlockedDecider, BlockedMH, SharedAuto, SharedState, blocked_kernel
from mechanisms.samplers.local import EffectsRelease
from mechanisms.samplers.mh import WARM_INFLATE
from mechanisms.samplers.rejection import RejectionSampler
from proto.spec import PartyEntry
from proto.tls import TlsMaterial

if TYPE_CHECKING:
    from mechanisms.abcdp.federated import FederatedSvtPlan

F64 = npt.NDArray[np.float64]


#: the per-draw sample statistics each kind of run writes (``confar run --check`` checks their names)
MH_STATS = ("accepted", "step_size")
REJECTION_STATS = ("batch",)
ABCDP_STATS = ("proposal_index",)


def stat_names(sampler: SamplerSettings) -> tuple[str, ...]:
    """The sample statistics a run of ``sampler`` writes with its draws."""
    return MH_STATS if sampler.markov else ABCDP_STATS if sampler.simulator_run else REJECTION_STATS


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

    def checkpoint(self, run_id: str, run_step: int, rows: int) -> dict[str, Any]:
        """``state.json`` after a batch: ``rows`` rows of the draw log are this checkpoint's."""
        return {
            "version": STATE_VERSION,
            "run_id": run_id,
            "run_step": run_step,  # the last run step whose decisions this checkpoint includes
            "batch": self.batch,  # batches done = the public-seed stream of the next batch
            "public_seed": self.seeds.root,
            "rows": rows,
            "accepted": self.accepted,
            "asked": self.asked,
            "sampler": self.state(),
            "done": self.finished,
            "written": now(),
        }

    def resume(self, ckpt: dict[str, Any]) -> None:
        """Continue from a checkpoint written by :meth:`checkpoint`."""
        self.restore(ckpt["sampler"])
        self.batch = int(ckpt["batch"])
        self.accepted, self.asked = int(ckpt["accepted"]), int(ckpt["asked"])


def _arr(x: Any) -> F64:
    return np.asarray(x, dtype=np.float64)


class MHDriver(Driver):
    def __init__(self, exp: Experiment, seeds: PublicSeeds) -> None:
        super().__init__(exp, seeds)
        s = exp.sampler
        self.model = exp.model()
        self.d, self.chains = self.model.d, s.chains
        self.width = self.chains * (self.d + 2)  # theta, accepted, step size per chain
        self.mh: MHState | AdaptiveState | RefitState | None = None

    @property
    def total(self) -> int:
        return self.exp.sampler.iterations

    @property
    def n_draws(self) -> int:
        return self.batch * self.chains

    @property
    def refits(self) -> tuple[int, int] | None:
        """The iterations at which a refitted Laplace proposal is refitted (half the warm-up and its end),
        or None (no refit, or a warm-up too short to hold two stages)."""
        s = self.exp.sampler
        if s.proposal != "laplace" or not s.refit or s.warmup < 4:
            return None
        return (s.warmup // 2, s.warmup)

    def kernel(self, decide: Any) -> RandomWalkMH | AdaptiveMH | IndependenceMH | RefitIndependenceMH:
        s, m = self.exp.sampler, self.exp.m
        if s.proposal == "laplace":  # the warm start's DP Laplace approximation (coordinator.warm_start)
            if s.laplace is None:
                raise RunError("sampler.proposal = 'laplace' before the warm start has run")
            inflate = self.exp.warm_start.inflate if self.exp.warm_start is not None else 1.0
            if self.refits is not None:  # refitted to the chains' states in the warm-up, then frozen
                return RefitIndependenceMH(
                    self.model, decide, s.laplace.mean, s.laplace.cov, refits=self.refits,
                    warm_inflate=max(WARM_INFLATE, inflate), inflate=inflate, penalty=s.penalty, m=m,
                    lazy=s.lazy,
                )  # fmt: skip
            proposal = GaussianProposal(s.laplace.mean, inflate**2 * s.laplace.cov)
            return IndependenceMH(self.model, decide, proposal, penalty=s.penalty, m=m, lazy=s.lazy)
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
                scale_adapt=s.scale_adapt,
                target_accept=s.target_accept,
            )
        return RandomWalkMH(self.model, decide, s.proposal_cov, penalty=s.penalty, m=m, lazy=s.lazy)

    def initial(self) -> None:
        s = self.exp.sampler
        if s.proposal == "laplace" and s.laplace is not None and isinstance(s.init, str):
            lap = GaussianProposal(s.laplace.mean, s.laplace.cov)  # chains start at draws of it (public seed)
            theta0 = lap.sample(self.seeds.init_rng(), self.chains)
        elif isinstance(s.init, str):
            theta0 = s.init_scale * self.model.sample_prior(self.seeds.init_rng(), self.chains)
        else:
            theta0 = s.init
        self.mh = self.kernel(None).init(theta0)

    def state(self) -> dict[str, Any]:
        st = self.mh
        assert st is not None
        out: dict[str, Any] = {"theta": st.theta.tolist(), "log_prior": st.log_prior.tolist()}
        if isinstance(st, RefitState):  # the proposal's base and the warm-up's pooled moments
            out |= {"t": st.t, "mean": st.mean.tolist(), "cov": st.cov.tolist(), "count": st.count}
            if st.pool_mean is not None and st.pool_m2 is not None:
                out |= {"pool_mean": st.pool_mean.tolist(), "pool_m2": st.pool_m2.tolist()}
            if st.run_len is not None:  # the pool's holding times (its effective number of states)
                out |= {"run_len": st.run_len.tolist(), "sum_h2": st.sum_h2}
        if isinstance(st, AdaptiveState):
            out |= {"t": st.t, "count": st.count, "mean": st.mean.tolist(), "m2": st.m2.tolist()}
            out["cov"] = st.cov.tolist()
            scales = np.zeros(self.chains) if st.log_scale is None else st.log_scale
            out["log_scale"] = scales.tolist()  # each chain's Robbins-Monro log scale
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
                # each chain's log scale (checkpoints from before the scale adaptation have none: 0)
                _arr(st.get("log_scale", np.zeros(self.chains))).reshape(self.chains),
            )
        elif self.refits is not None:
            d = self.d
            pool = "pool_mean" in st
            self.mh = RefitState(
                theta, lp, int(st["t"]), _arr(st["mean"]).reshape(d), _arr(st["cov"]).reshape(d, d),
                int(st["count"]), _arr(st["pool_mean"]).reshape(d) if pool else None,
                _arr(st["pool_m2"]).reshape(d, d) if pool else None,
                _arr(st["run_len"]).reshape(self.chains) if "run_len" in st else None,
                float(st.get("sum_h2", 0.0)),
            )  # fmt: skip
        else:
            self.mh = MHState(theta, lp)

    def step(self, decide: NetworkDecider) -> F64:
        assert self.mh is not None
        kernel = self.kernel(decide)
        state, info = kernel.step(self.seeds.rng(self.batch), self.mh)  # type: ignore[arg-type]
        self.mh = state
        assert info.step_size is not None  # every kernel here proposes from a Gaussian: √(tr Σ / d) per chain
        self.batch += 1
        self.accepted += int(info.accept.sum())
        self.asked += info.asked
        row = np.column_stack([state.theta, info.accept.astype(np.float64), info.step_size])
        return np.asarray(row.reshape(1, -1), dtype=np.float64)

    def draws(self, rows: F64) -> tuple[F64, dict[str, npt.NDArray[Any]]]:
        r = rows.reshape(rows.shape[0], self.chains, self.d + 2).transpose(1, 0, 2)  # chains, draws, ...
        stats = dict(zip(MH_STATS, (r[:, :, self.d] > 0.5, r[:, :, self.d + 1].copy()), strict=True))
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
        st = sampler.step(self.seeds.rng(self.batch), n, s.n_accept - self.kept)
        rows = np.column_stack([st.kept, np.full(st.kept.shape[0], float(self.batch))])
        self.asked += st.asked
        self.proposed += st.proposed
        self.accepted += st.accepted
        self.kept += st.kept.shape[0]
        self.batch += 1
        return np.asarray(rows, dtype=np.float64)

    def draws(self, rows: F64) -> tuple[F64, dict[str, npt.NDArray[Any]]]:
        return rows[None, :, : self.d].copy(), {REJECTION_STATS[0]: rows[None, :, self.d].astype(np.int64)}


class BlockedDriver(MHDriver):
    """Blocked sampling of a model with a registry random intercept (``[sampler] blocked``,
    :mod:`mechanisms.samplers.blocked`): one sweep per batch. The coordinator holds the shared block only
    (its draw log: the shared parameters, the accept bit and the step size per chain); every registry keeps
    its own effect z_j in its run state and updates it in the sweep's step. At the end
    (:meth:`release_effects`) the registries that allow it release their z_j draws in one session of reveal
    mode sum; the draws are then the full θ, else the shared block alone (with a warning naming who kept
    theirs)."""

    def __init__(self, exp: Experiment, seeds: PublicSeeds) -> None:
        super().__init__(exp, seeds)
        self.full = self.model
        self.shared = SharedModel(self.full)
        self.model = self.shared  # the draws' model: the full one once the effects are released
        self.d = self.shared.d
        self.width = self.chains * (self.d + 2)
        self.effects: F64 | None = None  # (sweeps, chains, m) once released
        self.kept_by = ""  # why the effects were not released (the registries' reasons)
        self.st: SharedState | None = None

    def auto(self, decide: Any) -> BlockedMH:
        s = self.exp.sampler
        cov = s.proposal_cov
        assert cov is not None

        def make(sm: SharedModel, dec: BlockedDecider) -> SharedAuto:
            return SharedAuto(
                sm, dec, cov, stop=s.adapt_stop, start=s.adapt_start, every=s.adapt_every,
                history_from=s.history_from, target_accept=s.target_accept, penalty=s.penalty, m=self.exp.m,
            )  # fmt: skip

        return blocked_kernel(self.full, decide, make, sweep=self.batch)

    def initial(self) -> None:
        s = self.exp.sampler
        if isinstance(s.init, str):
            theta0 = s.init_scale * self.shared.sample_prior(self.seeds.init_rng(), self.chains)
        else:
            theta0 = s.init
        self.st = self.auto(None).init(theta0)

    def state(self) -> dict[str, Any]:
        st = self.st
        assert st is not None
        inner = st.inner
        scales = np.zeros(self.chains) if inner.log_scale is None else inner.log_scale
        out: dict[str, Any] = {
            "theta": inner.theta.tolist(), "log_prior": inner.log_prior.tolist(), "t": inner.t,
            "count": inner.count, "mean": inner.mean.tolist(), "m2": inner.m2.tolist(),
            "cov": inner.cov.tolist(), "log_scale": scales.tolist(), "pool_count": st.count,
        }  # fmt: skip
        if st.mean is not None and st.m2 is not None:
            out |= {"pool_mean": st.mean.tolist(), "pool_m2": st.m2.tolist()}
        return out

    def restore(self, st: dict[str, Any]) -> None:
        c, d = self.chains, self.d
        inner = AdaptiveState(
            _arr(st["theta"]).reshape(c, d), _arr(st["log_prior"]), int(st["t"]), int(st["count"]),
            _arr(st["mean"]).reshape(c, d), _arr(st["m2"]).reshape(d, d), _arr(st["cov"]).reshape(d, d),
            _arr(st["log_scale"]).reshape(c),
        )  # fmt: skip
        pool = "pool_mean" in st
        self.st = SharedState(
            inner,
            int(st["pool_count"]),
            _arr(st["pool_mean"]).reshape(c, d + 2) if pool else None,
            _arr(st["pool_m2"]).reshape(d + 2, d + 2) if pool else None,
        )

    def step(self, decide: NetworkDecider) -> F64:
        assert self.st is not None
        state, info = self.auto(decide).step(self.seeds.rng(self.batch), self.st)
        self.st = state
        assert info.step_size is not None
        self.batch += 1
        self.accepted += int(info.accept.sum())
        self.asked += info.asked
        size = np.broadcast_to(np.asarray(info.step_size, dtype=np.float64), (self.chains,))
        row = np.column_stack([state.theta, info.accept.astype(np.float64), size])
        return np.asarray(row.reshape(1, -1), dtype=np.float64)

    def release_effects(self, coord: BlockingCoordinator, run_id: str, say: Callable[[str], None]) -> None:
        """Every registry's z_j draws of the run's sweeps, released by the registries that allow it (one
        session of reveal mode sum, in blocks of sweeps; each registry checks the final chain states against
        its record of the last sweep). A registry that refuses keeps its draws: the outputs then hold the
        shared block only, and the reason is kept for the warning."""
        assert self.st is not None
        sweeps, chains, m = self.batch, self.chains, self.shared.hierarchy.m
        per = max(1, EFFECTS_BATCH // (m * chains))
        exp = self.exp
        out = np.empty((sweeps, chains, m))
        for first in range(0, sweeps, per):
            k = min(per, sweeps - first)
            plan = DecisionPlan(
                model_args=dict(exp.model_params),
                kind="effects",
                settings=EffectsRelease(run_id, first, k, chains),
            )
            try:
                sess = coord.open_session(SessionOptions(
                    reveal_mode=RELEASE_MODE, model=exp.analysis(), model_params=plan.to_params(),
                    t=exp.threshold, topology=exp.topology, security=exp.security, study=exp.study_text,
                ))  # fmt: skip
            except SessionError as exc:
                self.kept_by = str(exc)
                return
            try:
                res = sess.evaluate({"states": self.st.theta}, m * chains * k)
            except SessionError as exc:
                sess.abort("an effects release refused")
                self.kept_by = str(exc)
                return
            sess.close("done")
            assert res.revealed is not None
            vals = np.asarray(res.revealed, dtype=np.float64).reshape(m, chains, k)
            out[first : first + k] = vals.transpose(2, 1, 0)
        self.effects = out
        self.model = self.full
        say(f"every registry released its effect draws ({sweeps} sweeps x {chains} chains)")

    def draws(self, rows: F64) -> tuple[F64, dict[str, npt.NDArray[Any]]]:
        shared, stats = super().draws(rows)
        if self.effects is None:
            return shared, stats
        n = shared.shape[1]
        z = self.effects[:n].transpose(1, 0, 2)  # chains, draws, m
        full = self.shared.embed(shared.reshape(-1, self.d), z.reshape(-1, z.shape[2]))
        return np.ascontiguousarray(full.reshape(self.chains, n, -1)), stats


EFFECTS_BATCH = 20_000  # values per Evaluate of a blocked run's effects release


def make_driver(exp: Experiment) -> MHDriver | RejectionDriver:
    seeds = PublicSeeds(exp.seed)
    if exp.sampler.markov and exp.sampler.blocked:
        return BlockedDriver(exp, seeds)
    return MHDriver(exp, seeds) if exp.sampler.markov else RejectionDriver(exp, seeds)


# ---- federated ABCDP -------------------------------------------------------------------------------------


def run_abcdp(
    exp: Experiment,
    endpoints: list[PartyEntry],
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

    s = exp.sampler
    plan = FederatedSvtPlan.from_params(s.abcdp)
    out_dir = Path(out_dir)
    rf = RunFolder(out_dir)
    meta, ckpt = rf.open(exp, resume)
    run_id: str = meta["run_id"]
    start = None
    if ckpt is not None:
        rf.check_run_id(ckpt, run_id)
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
        paid = parties_charged_for_run(pf, run_id) if resume else set()
        pp = check_privacy(exp, pf, s.batches, already_charged=paid)
        say(f"privacy dry run: every party would accept the run\n{pp.text}")
        if resume:
            say(f"resuming ABCDP run {run_id} at run step {steps0 + 1}")
    hooks = _AbcdpHooks(exp, rf, meta, steps0, plan, progress, stop_after_batches, say)
    with BlockingCoordinator(
        endpoints, tls, identity=exp.coordinator.identity, rpc_timeout_s=exp.coordinator.rpc_timeout_s
    ) as coord:
        res = cabcdp.run_federated_abcdp(
            coord,
            plan,
            hooks.prior_sample,
            hooks.simulate,
            s.batch_size,
            exp.seed,
            cabcdp.FederatedRunOptions(
                topology=exp.topology,
                security=exp.security,
                max_proposals=s.max_proposals,
                progress=hooks.on_progress,
                run_id=run_id,
                start=start,
                on_open=hooks.on_open,
                on_step=hooks.on_step,
            ),
        )
        reports = privacy_reports(exp, endpoints, tls)
    return _abcdp_outcome(exp, endpoints, out_dir, meta, res, plan.c, reports, pp, say)


class _AbcdpHooks:
    """What :func:`run_abcdp` gives ``run_federated_abcdp``: the toy model's prior and simulator, and the
    callbacks that record sessions in ``run.json``, checkpoint every step and report progress."""

    def __init__(
        self,
        exp: Experiment,
        rf: RunFolder,
        meta: dict[str, Any],
        steps0: int,
        plan: FederatedSvtPlan,
        progress: Callable[[ProgressInfo], None] | None,
        stop_after_batches: int | None,
        say: Callable[[str], None],
    ) -> None:
        from mechanisms.simulators.toy import ToyMixtureModel

        self.exp, self.rf, self.meta, self.steps0, self.plan = exp, rf, meta, steps0, plan
        self.progress, self.stop_after_batches, self.say = progress, stop_after_batches, say
        self.toy = ToyMixtureModel()
        self.n_sim = plan.n_records  # each candidate's simulated data set has the size of the observed one
        self.t0 = time.perf_counter()
        self.done_here = 0

    def prior_sample(self, rng: np.random.Generator, k: int) -> F64:
        return self.toy.sample_prior(rng, k)

    def simulate(self, th: F64, rng: np.random.Generator) -> F64:
        return self.toy.simulate(th, self.n_sim, rng)

    def on_open(self, sess: Any) -> None:
        self.meta.setdefault("sessions", []).append(
            {"session_id": sess.session_id.hex(), "first_run_step": self.steps0 + 1, "opened": now()}
        )
        self.rf.save_meta(self.meta)
        for w in sess.warnings:
            self.say(f"WARNING: {w}")

    def on_step(self, st: Any) -> None:
        self.done_here += 1
        if self.stop_after_batches is not None and self.done_here >= self.stop_after_batches:
            raise StopRequested(f"stopped after {self.done_here} batches (before checkpoint {st.steps})")
        self.rf.save_state(
            {
                "version": STATE_VERSION,
                "kind": "abcdp",
                "run_id": self.meta["run_id"],
                "run_step": st.steps,  # the last run step whose decisions this checkpoint includes
                "public_seed": self.exp.seed,
                "abcdp": st.to_json(),
                "done": st.finished(self.exp.sampler.max_proposals),
                "written": now(),
            }
        )

    def on_progress(self, p: Any) -> None:
        if self.progress is not None:
            self.progress(
                ProgressInfo(
                    done=p.accepted,
                    total=p.c,
                    draws=p.accepted,
                    accept_rate=p.accepted / max(p.evaluated, 1),
                    decisions=p.evaluated,
                    decisions_per_s=p.evaluated / max(time.perf_counter() - self.t0, 1e-9),
                    run_step=p.step,
                    privacy=f"eps {self.plan.eps_total:g} charged once per run by each party",
                )
            )


def _abcdp_outcome(
    exp: Experiment,
    endpoints: list[PartyEntry],
    out_dir: Path,
    meta: dict[str, Any],
    res: Any,
    c: int,
    reports: dict[int, Any],
    pp: PrivacyPlan | None,
    say: Callable[[str], None],
) -> Outcome:
    """The accepted θ's as one chain, the run's counts; outputs written when there is a draw."""
    s = exp.sampler
    thetas = np.asarray(res.thetas, dtype=np.float64).reshape(res.n_accepted, -1)
    outcome = Outcome(
        run_id=meta["run_id"],
        out_dir=out_dir,
        draws=thetas[None],
        param_names=tuple(f"w{k}" for k in range(1, thetas.shape[1] + 1)),
        sample_stats={ABCDP_STATS[0]: np.asarray(res.accepted_ids, dtype=np.int64)[None]},
        warmup=0,
        run_steps=res.steps,
        session_ids=[str(x["session_id"]) for x in meta.get("sessions", [])],
        privacy_reports=reports,
        counts={"decisions_revealed": res.n_evaluated, "accepted": res.n_accepted, "proposed": res.n_proposed}
        | {"sent": res.n_sent},
    )
    if not res.done:
        w = f"ABCDP stopped at max_proposals = {s.max_proposals} with {res.n_accepted} of {c} accepts"
        say(f"WARNING: {w}")
        outcome.warnings.append(w)
    if outcome.draws.shape[1] > 0:
        outcome.written = write_run_outputs(exp, outcome, endpoints, None, pp)
    return outcome
