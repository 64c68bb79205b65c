"""The ``[sampler]`` table of an experiment file: which sampler, with which public settings, checked.

:class:`SamplerSettings` holds what every kind needs (MH, adaptive MH and penalty: chains, iterations,
warm-up, proposal, start, adaptation, the penalty; rejection: proposals, batches, bound, cap; lazy
acceptance; federated ABCDP: the public run parameters of its ``FederatedSvtPlan``). :func:`read_sampler`
reads it for a given kind (``SAMPLER_KEYS`` lists the keys each kind takes) with errors naming
``sampler.<key>``; the key reference is the docstring of :mod:`coordinator.experiment`.

Automatic proposal (kinds mh, adaptive-mh, penalty with the random-walk proposal, when neither
``proposal_scale`` nor ``proposal_cov`` is given): the run is adaptive MH with Robbins–Monro scaling
(:class:`mechanisms.samplers.AdaptiveMH` with ``scale_adapt``; the adapt_* keys and their defaults, and
``target_accept``), from the public initial covariance Σ₀ = (2.38²/d) diag(0.1 ŝ_k)², ŝ_k the prior's
spread in coordinate k (:func:`prior_proposal_cov`). The proposal then adapts to the released accept bits
and public chain states until adapt_stop and is frozen after it; warmup >= adapt_stop keeps only draws of
the frozen kernel. The kind stays what the file says: the privacy charge is per decision on the public
(θ, θ*) and does not depend on how θ* was proposed.

Blocked sampling (``blocked``, kinds mh and adaptive-mh; the default for a model with a registry random
intercept, ``(1 | registry)`` or ``logistic-random-intercept``, under the automatic proposal): each
registry updates its own effect z_j where its records are, the shared block by the confidential decision
(:mod:`mechanisms.samplers.blocked`, docs/MODELS.md "Blocked sampling"); the shared block's kernel is
:class:`mechanisms.samplers.blocked.SharedAuto` with the adapt_* keys' warm-up, and every registry's local
scales and coordinate adapt until adapt_stop too. Not with lazy acceptance, a Laplace proposal or a given
proposal_scale / proposal_cov. With kind penalty (sd, max_sensitivity) and ``local_sd``, ``local_max_step``
(``local_steps``, default 3): the accountable plan a registry's budget can charge — every registry's local
steps penalty MH with its own noise and capped moves, each effect held in the public coordinate β_0 + u_j
(docs/PRIVACY.md, "Blocked sampling under a budget"); blocked is then the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.tables import Reader
from mechanisms.kinds import DecisionPlan, RejectionSettings
from mechanisms.models.base import Model
from mechanisms.models.hierarchy import SharedModel
from mechanisms.samplers.local import LocalSettings
from mechanisms.samplers.mh import prior_proposal_cov
from mechanisms.samplers.requests import Lazy, Penalty
from mechanisms.warmstart import LaplaceApproximation

F64 = npt.NDArray[np.float64]

KINDS = ("mh", "adaptive-mh", "penalty", "rejection", "abcdp")
MH_KINDS = ("mh", "adaptive-mh", "penalty")
SIMULATORS = ("toy",)  # federated ABCDP simulators wired to `confar run`
SIMULATOR_DIMS = {"toy": 1}  # dimension of one record of Y*
MAX_CHAINS = 4096
MAX_BATCH = 2**20
MH_KEYS = {
    "kind",
    "chains",
    "iterations",
    "warmup",
    "burn_in",
    "proposal_scale",
    "proposal_cov",
    "init",
    "init_scale",
    "target_accept",
    "blocked",
}
LAZY_KEYS = {"lazy", "max_sensitivity"}
ADAPT_KEYS = {"adapt_start", "adapt_every", "adapt_stop", "history_from", "final", "independence_scale"}
SAMPLER_KEYS: dict[str, set[str]] = {
    "mh": MH_KEYS | LAZY_KEYS | ADAPT_KEYS,  # adapt_* and target_accept: with the automatic proposal only
    "adaptive-mh": MH_KEYS | LAZY_KEYS | ADAPT_KEYS,
    "penalty": MH_KEYS
    | ADAPT_KEYS
    | {"tau", "alpha", "n_records", "c", "b", "max_sensitivity", "sd", "proposal", "refit"}
    | {"local_sd", "local_max_step", "local_steps"},
    "rejection": {
        "kind",
        "n_accept",
        "max_proposals",
        "batch_size",
        "log_bound_margin",
        "bound",
        "max_sensitivity",
        "lazy",
    },
    "abcdp": {
        "kind",
        "simulator",
        "eps_abc",
        "eps_total",
        "c",
        "resample",
        "n_features",
        "bandwidth",
        "n_records",
        "batch_size",
        "max_proposals",
    },
}


@dataclass(frozen=True)
class SamplerSettings:
    kind: str
    # MH kinds
    chains: int = 1
    iterations: int = 0
    warmup: int = 0
    proposal_cov: F64 | None = None
    init: str | F64 = "prior"  # "prior" or (chains, d)
    init_scale: float = 1.0  # init = "prior": chains start at init_scale x a prior draw
    adapt_start: int = 0
    adapt_every: int = 1
    adapt_stop: int = 0
    final: str = "random-walk"  # adaptive: the fixed kernel after adapt_stop (random-walk | independence)
    independence_scale: float = 1.0
    history_from: int = 0
    scale_adapt: bool = False  # adaptive: Robbins-Monro scaling to target_accept until adapt_stop
    target_accept: float | None = None  # scale_adapt: the target (None: the default for the dimension)
    penalty: Penalty | None = None
    penalty_total_sd: float | None = None  # penalty sd: the total noise sd on the log-ratio (sqrt(m) x each)
    proposal: str = "random-walk"  # "random-walk" | "laplace" (independence sampler from the warm start)
    laplace: LaplaceApproximation | None = None  # set once the warm start has run
    refit: bool = False  # proposal "laplace": refitted to the chains' states in the warm-up, then frozen
    lazy: Lazy | None = None  # lazy acceptance (sign reveal): a secret coin of probability gamma
    blocked: bool = False  # registry-local random effects (mechanisms.samplers.blocked)
    # blocked with the penalty (the accountable plan): each registry's noisy local steps
    local_sd: float | None = None  # its own N(0, local_sd^2) on a local log ratio
    local_max_step: float | None = None  # a local proposal moves u_j by at most this
    local_steps: int = 3  # local steps per sweep
    chosen: tuple[str, ...] = ()  # a planned blocked run: the keys left to the plan (provisional values)
    # rejection
    n_accept: int = 0
    max_proposals: int = 0
    batch_size: int = 0
    log_bound_margin: float = 0.0
    rejection_bound: str = "data"  # "data" (each party's maximum likelihood) | "public" (the model's)
    max_sensitivity: float | None = None  # rejection: public cap on a proposal's per-record range
    # abcdp: the public run parameters (FederatedSvtPlan keys; see coordinator/abcdp.py)
    abcdp: dict[str, Any] = field(default_factory=dict)
    simulator: str = ""

    @property
    def adaptive(self) -> bool:
        """Adaptive MH (kind adaptive-mh, penalty with the adapt_* keys, or the automatic proposal)."""
        return self.adapt_stop > 0

    # ---- what varies with the kind (the one place the coordinator's run asks which kind it is) -----------

    @property
    def markov(self) -> bool:
        """An MH kind (mh, adaptive-mh, penalty): chains of dependent draws with a warm-up, one decision per
        chain per batch, convergence diagnostics; otherwise independent draws (rejection, ABCDP)."""
        return self.kind in MH_KINDS

    @property
    def simulator_run(self) -> bool:
        """Federated ABCDP: one whole run of a simulator (``coordinator.abcdp``) rather than batches of
        model decisions; the registries charge it once per run at its start (it cannot stop partway), its
        draws are named by the coordinator, its simulator has its own prior, it sends no study yet."""
        return self.kind == "abcdp"

    @property
    def rejection(self) -> bool:
        """Rejection sampling: each batch proposes from the prior and the decision compares with a bound."""
        return self.kind == "rejection"

    @property
    def kept_warmup(self) -> int:
        """The draws of each chain discarded as warm-up (MH kinds; none otherwise)."""
        return self.warmup if self.markov else 0

    @property
    def batches(self) -> int:
        """Upper bound on the Evaluate steps of the whole run (the privacy plan's batch count)."""
        if self.markov:
            return self.iterations
        return -(-self.max_proposals // self.batch_size)

    @property
    def charged_batches(self) -> int:
        """The batches a registry's per-batch charge is multiplied by for the whole run: ABCDP's run is one
        event (charged once, whatever its batches)."""
        return 1 if self.simulator_run else self.batches

    @property
    def decisions_per_batch(self) -> int:
        return self.chains if self.markov else self.batch_size

    def decision_plan(self, model_args: Mapping[str, Any]) -> DecisionPlan:
        """The public meaning of this sampler's decisions (MH and rejection kinds), sent as the session's
        ``model_params`` with the model's public arguments ``model_args``: what a new decision kind's keys
        mean on the wire is written here, beside the keys."""
        settings: RejectionSettings | LocalSettings | None = None
        assert not (self.rejection and self.blocked), "blocked sampling decides MH moves (the file's parser)"
        if self.rejection:
            settings = RejectionSettings(self.log_bound_margin, self.rejection_bound, self.max_sensitivity)
        elif self.blocked:
            settings = self.local_settings()
        return DecisionPlan(
            model_args=dict(model_args),
            kind="rejection" if self.rejection else "mh",
            penalty=self.penalty,
            lazy=self.lazy,
            settings=settings,
        )

    def local_settings(self) -> LocalSettings:
        """A blocked run's local settings: exact local steps (adapting until adapt_stop), or with the penalty
        the noisy ones of ``local_sd`` / ``local_max_step`` in the public centred coordinate."""
        if self.local_sd is None:
            return LocalSettings(adapt_until=self.adapt_stop)
        return LocalSettings(
            steps=self.local_steps, adapt_until=self.adapt_stop, parameterisation="centred", sd=self.local_sd,
            max_step=self.local_max_step,
        )  # fmt: skip


def _init(r: Reader, s: dict[str, Any], chains: int, model: Model) -> str | F64:
    v = s.get("init", "prior")
    if v == "prior":
        return "prior"
    if not isinstance(v, list) or not v:
        raise r.err("sampler.init", f"must be 'prior', [theta] or [[theta], ...], got {v!r}")
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise r.err("sampler.init", f"must be numbers: {exc}") from exc
    d = model.d
    if arr.ndim == 1 and arr.shape == (d,):
        arr = np.tile(arr, (chains, 1))
    if arr.shape != (chains, d):
        raise r.err("sampler.init", f"must be {d} numbers or {chains} lists of {d}, got shape {arr.shape}")
    lp = model.log_prior(arr)
    bad = np.flatnonzero(~np.isfinite(lp))
    if bad.size:
        raise r.err(
            "sampler.init", f"chain {int(bad[0])} starts outside the prior's support: {arr[bad[0]].tolist()}"
        )
    return arr


def _init_scale(r: Reader, s: dict[str, Any], model: Model) -> float:
    scale = float(r.number(s, "sampler", "init_scale", 1.0, gt=0.0))
    if "init_scale" in s and s.get("init", "prior") != "prior":
        raise r.err("sampler.init_scale", "applies to init = 'prior' only")
    th = scale * model.sample_prior(np.random.default_rng(0), 64)
    if scale != 1.0 and not np.isfinite(model.log_prior(th)).all():
        raise r.err("sampler.init_scale", f"scaled prior draws leave the support of {model.name!r}")
    return scale


def _proposal(r: Reader, s: dict[str, Any], d: int) -> F64:
    if "proposal_scale" in s and "proposal_cov" in s:
        raise r.err("sampler.proposal_cov", "give proposal_scale or proposal_cov, not both")
    if "proposal_cov" in s:
        raw = r.get(s, "sampler", "proposal_cov", list)
        try:
            cov = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise r.err("sampler.proposal_cov", f"must be a {d} x {d} array of numbers: {exc}") from exc
        if cov.shape != (d, d):
            raise r.err("sampler.proposal_cov", f"must be {d} x {d}, got shape {cov.shape}")
        if not np.isfinite(cov).all() or not np.allclose(cov, cov.T):
            raise r.err("sampler.proposal_cov", "must be finite and symmetric")
        try:
            np.linalg.cholesky(cov)
        except np.linalg.LinAlgError as exc:
            raise r.err("sampler.proposal_cov", "must be positive definite") from exc
        return cov
    scale = r.number(s, "sampler", "proposal_scale", gt=0.0)
    return np.asarray(scale**2 * np.eye(d), dtype=np.float64)


def _start_cov(r: Reader, s: dict[str, Any], model: Model, auto: bool) -> F64:
    """The file's proposal covariance, or the automatic proposal's start from the prior."""
    if not auto:
        return _proposal(r, s, model.d)
    try:
        return prior_proposal_cov(model)
    except ValueError as exc:
        raise r.err("sampler.proposal_scale", f"missing, and no automatic proposal: {exc}") from exc


def read_sampler(
    r: Reader, s: dict[str, Any], kind: str, model: Model | None, seed: int, planned: bool = False
) -> SamplerSettings:
    """The ``[sampler]`` table of ``kind`` (its keys were checked against ``SAMPLER_KEYS[kind]``);
    ``planned``: the file has ``[privacy] target_epsilon`` (a planned blocked run may leave sd, local_sd
    and local_max_step to the plan)."""
    if kind in MH_KINDS:
        assert model is not None
        return _mh(r, s, kind, model, planned)
    if kind == "rejection":
        return _rejection(r, s, model)
    return _abcdp(r, s, seed)


#: a planned blocked run's provisional values of the keys it leaves to the plan (coordinator.planner replaces
#: them before anything is released; they are never a run's)
PROVISIONAL = {"sd": 1.0, "local_sd": 2.4, "local_max_step": 0.05}


def _planned_blocked(s: dict[str, Any], kind: str, model: Model, planned: bool) -> bool:
    """A planned run (``[privacy] target_epsilon``) of kind penalty on a model with a registry random
    intercept under the automatic proposal: sampled in blocks, its settings chosen by the plan
    (``coordinator.planner``, :mod:`mechanisms.planning_blocked`) where the file leaves them out."""
    given = {"proposal_scale", "proposal_cov"} & set(s)
    auto = s.get("proposal", "random-walk") == "random-walk" and not given
    blocked = s.get("blocked", True) is True
    return planned and kind == "penalty" and model.random_intercept() is not None and auto and blocked


def _mh(r: Reader, s: dict[str, Any], kind: str, model: Model, planned: bool = False) -> SamplerSettings:
    chains = r.integer(s, "sampler", "chains", lo=1, hi=MAX_CHAINS)
    iterations = r.integer(s, "sampler", "iterations", lo=1, hi=10**8)
    if "warmup" in s and "burn_in" in s:
        raise r.err("sampler.burn_in", "give warmup or burn_in (the same thing), not both")
    wkey = "burn_in" if "burn_in" in s else "warmup"
    proposal = r.choice(s, "sampler", "proposal", ("random-walk", "laplace"), "random-walk")
    given = "proposal_scale" in s or "proposal_cov" in s
    auto = proposal == "random-walk" and not given  # the automatic proposal (module docstring)
    tuning = sorted((ADAPT_KEYS | {"target_accept"}) & set(s))
    if kind == "mh" and given and tuning:
        raise r.err(
            f"sampler.{tuning[0]}",
            "tunes the automatic proposal of kind 'mh' (no proposal_scale / proposal_cov): remove it, "
            "remove proposal_scale / proposal_cov, or use kind = 'adaptive-mh'",
        )
    adapt: dict[str, Any] = {}
    if auto or kind == "adaptive-mh" or (kind == "penalty" and ADAPT_KEYS & set(s)):
        adapt = _adapt(r, s, iterations)
    if "target_accept" in s and not adapt:
        raise r.err(
            "sampler.target_accept",
            "steers an adaptive proposal: only without proposal_scale / proposal_cov, with kind "
            "'adaptive-mh', or with the adapt_* keys",
        )
    if adapt:
        adapt["scale_adapt"] = auto or "target_accept" in s
        adapt["target_accept"] = r.number(s, "sampler", "target_accept", None, gt=0.0, lt=1.0)
    default_warmup = adapt["adapt_stop"] if adapt else iterations // 2
    warmup = r.integer(s, "sampler", wkey, default_warmup, lo=0, hi=iterations - 1)
    if adapt and warmup < adapt["adapt_stop"]:
        raise r.err(
            f"sampler.{wkey}",
            f"must be >= adapt_stop = {adapt['adapt_stop']}: draws made while the proposal still adapts "
            "are not draws of a fixed posterior-invariant kernel",
        )
    plan_blocked = _planned_blocked(s, kind, model, planned)
    chosen = tuple(k for k in ("sd", "local_sd", "local_max_step") if plan_blocked and k not in s)
    if plan_blocked and "tau" in s:
        raise r.err(
            "sampler.tau",
            "a planned blocked run takes the penalty with a fixed sd (or none: the plan chooses it), not tau",
        )
    provisional = {k: PROVISIONAL[k] for k in chosen}  # the plan replaces them
    penalty, total_sd = _penalty(r, provisional | s, model) if kind == "penalty" else (None, None)
    lazy = _lazy(r, s, model)
    if proposal == "laplace" and adapt:
        raise r.err("sampler.proposal", "the Laplace proposal is fixed: no adapt_* keys with it")
    if proposal == "laplace" and ("proposal_scale" in s or "proposal_cov" in s):
        raise r.err("sampler.proposal", "'laplace' comes from the warm start: no proposal_scale or _cov")
    refit = bool(r.get(s, "sampler", "refit", bool, proposal == "laplace"))
    if refit and proposal != "laplace":
        raise r.err("sampler.refit", "refits the independence proposal of proposal = 'laplace' only")
    blocked = _blocked(r, provisional | s, kind, model, auto, lazy)
    local = _local(r, provisional | s, blocked, penalty)
    init = _init(r, s, chains, model)
    cov = None if proposal == "laplace" else _start_cov(r, s, model, auto)
    if blocked:  # the shared block's start (its prior's spread) and the chains' shared coordinates
        shared = SharedModel(model)
        cov = prior_proposal_cov(shared)
        if not isinstance(init, str):
            init = np.ascontiguousarray(init[:, list(shared.index)])
    return SamplerSettings(
        kind=kind,
        chains=chains,
        iterations=iterations,
        warmup=warmup,
        proposal_cov=cov,
        init=init,
        init_scale=_init_scale(r, s, model),
        penalty=penalty,
        penalty_total_sd=total_sd,
        proposal=proposal,
        refit=refit,
        lazy=lazy,
        blocked=blocked,
        chosen=chosen,
        **local,
        **adapt,
    )


def _local(r: Reader, s: dict[str, Any], blocked: bool, penalty: Penalty | None) -> dict[str, Any]:
    """The noisy local steps of a blocked run under the penalty (``local_sd``, ``local_max_step``,
    ``local_steps``): required together with kind penalty and blocked, refused elsewhere (naming the key)."""
    keys = sorted({"local_sd", "local_max_step", "local_steps"} & set(s))
    if not blocked or penalty is None:
        if keys:
            raise r.err(
                f"sampler.{keys[0]}",
                "sets the noisy local steps of a blocked run under the penalty (kind 'penalty' with sd, a "
                "model with a registry random intercept, blocked = true)",
            )
        return {}
    if not penalty.fixed or penalty.c != "bound":
        raise r.err(
            "sampler.tau",
            "blocked sampling takes the penalty with a fixed sd (and c = 'bound'): each decision is "
            "charged at its own sensitivity with every effect held at its public coordinate",
        )
    for key in ("local_sd", "local_max_step"):
        if key not in s:
            raise r.err(
                f"sampler.{key}",
                "missing: blocked sampling under the penalty makes every registry's local steps penalty MH "
                "with its own noise (local_sd) and a cap on their move of u_j (local_max_step), so that "
                "its ledger can charge them (docs/PRIVACY.md, 'Blocked sampling under a budget')",
            )
    return {
        "local_sd": r.number(s, "sampler", "local_sd", gt=0.0),
        "local_max_step": r.number(s, "sampler", "local_max_step", gt=0.0),
        "local_steps": r.integer(s, "sampler", "local_steps", 3, lo=1, hi=64),
    }


def _blocked(r: Reader, s: dict[str, Any], kind: str, model: Model, auto: bool, lazy: Lazy | None) -> bool:
    """``sampler.blocked``: default true for a model with a registry random intercept under the automatic
    proposal of kinds mh and adaptive-mh, and of kind penalty when its noisy local steps are given
    (``local_sd``; module docstring); true elsewhere is an error naming why."""
    has = model.random_intercept() is not None
    penalty_ok = kind == "penalty" and s.get("proposal", "random-walk") == "random-walk"
    able = (kind in ("mh", "adaptive-mh") or penalty_ok) and auto and lazy is None
    if kind == "penalty" and "blocked" not in s:
        able = able and "local_sd" in s  # a penalty run is blocked when it says how its local steps are
    blocked = bool(r.get(s, "sampler", "blocked", bool, has and able))
    if not blocked:
        return False
    if not has:
        raise r.err(
            "sampler.blocked", f"model {model.name!r} has no registry random intercept to sample in blocks"
        )
    if not able:
        why = (
            f"kind {kind!r}" if kind not in ("mh", "adaptive-mh", "penalty")
            else "lazy acceptance" if lazy is not None
            else "a fixed proposal (proposal_scale / proposal_cov / proposal)"
        )  # fmt: skip
        raise r.err(
            "sampler.blocked",
            f"blocked sampling tunes the shared block's proposal itself (kinds mh, adaptive-mh and penalty "
            f"with sd, the automatic proposal, no lazy acceptance), not with {why}: remove it or set "
            "blocked = false",
        )
    return True


def _adapt(r: Reader, s: dict[str, Any], iterations: int) -> dict[str, Any]:
    """The adaptive-MH keys (adapt_start, adapt_every, adapt_stop, history_from, final,
    independence_scale) with their defaults from ``iterations``."""
    adapt = {
        "adapt_start": r.integer(s, "sampler", "adapt_start", max(iterations // 10, 1), lo=1),
        "adapt_every": r.integer(s, "sampler", "adapt_every", max(iterations // 40, 1), lo=1),
        "adapt_stop": r.integer(s, "sampler", "adapt_stop", max(iterations // 2, 2), lo=1),
        "history_from": r.integer(s, "sampler", "history_from", iterations // 20, lo=0),
    }
    if not adapt["adapt_start"] < adapt["adapt_stop"] <= iterations:
        raise r.err(
            "sampler.adapt_stop",
            f"need adapt_start < adapt_stop <= iterations, got {adapt['adapt_start']}, "
            f"{adapt['adapt_stop']}, {iterations}",
        )
    if adapt["history_from"] > adapt["adapt_start"]:
        raise r.err("sampler.history_from", "must be <= adapt_start (the history feeds the first adaptation)")
    adapt["final"] = r.choice(s, "sampler", "final", ("random-walk", "independence"), "random-walk")
    adapt["independence_scale"] = r.number(s, "sampler", "independence_scale", 1.0, gt=0.0)
    if "independence_scale" in s and adapt["final"] != "independence":
        raise r.err("sampler.independence_scale", "applies to final = 'independence' only")
    return adapt


def _penalty(r: Reader, s: dict[str, Any], model: Model) -> tuple[Penalty, float | None]:
    """The penalty method's keys: tau, alpha, n_records (sigma = tau n^alpha c), or sd (a fixed total noise
    sd, charged per decision at its own sensitivity; needs max_sensitivity, or a planned run's plan chooses
    it), and c, b, max_sensitivity.
    With sd the Penalty is made once m is known (:func:`with_parties`)."""
    if ("tau" in s) == ("sd" in s):
        raise r.err(
            "sampler.tau",
            ("missing" if "tau" not in s else "given with sd")
            + ": the penalty method needs one noise scale, tau > 0 (sigma = tau n^alpha c(theta, theta*)) or "
            "sd (a fixed total noise sd on the log acceptance ratio, charged per decision at its own "
            "sensitivity)",
        )
    if "sd" in s:
        for key in ("alpha", "n_records"):
            if key in s:
                raise r.err(f"sampler.{key}", "belongs to the tau form of the penalty, not to sd")
        # a cap is needed (coordinator.experiment refuses its absence) unless a planned run's plan chooses it
        cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
        total = r.number(s, "sampler", "sd", gt=0.0)
        # each registry's sd is total / sqrt(m): set by coordinator.experiment once m is known
        return Penalty(tau=None, sd=total, max_sensitivity=cap), total
    tau = r.number(s, "sampler", "tau", gt=0.0)
    alpha = r.number(s, "sampler", "alpha", 0.0, ge=0.0)
    n_records = r.integer(s, "sampler", "n_records", lo=1)
    c = r.choice(s, "sampler", "c", ("bound", "clip"), "bound")
    b = r.number(s, "sampler", "b", None, gt=0.0)
    if c == "clip" and b is None:
        raise r.err("sampler.b", "c = 'clip' needs the clip constant b > 0")
    if c == "bound" and b is not None:
        raise r.err("sampler.b", "b is the clip constant: only with c = 'clip'")
    th = model.sample_prior(np.random.default_rng(0), 2)
    if c == "bound" and model.record_ratio_bound(th[:1], th[1:]) is None:
        raise r.err("sampler.c", f"model {model.name!r} has no public per-record bound: use c = 'clip'")
    cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
    return Penalty(tau=tau, alpha=alpha, n=n_records, c=c, b=b, max_sensitivity=cap), None


def _rejection(r: Reader, s: dict[str, Any], model: Model | None) -> SamplerSettings:
    n_accept = r.integer(s, "sampler", "n_accept", lo=1, hi=10**8)
    max_proposals = r.integer(s, "sampler", "max_proposals", lo=1, hi=10**12)
    if max_proposals < n_accept:
        raise r.err("sampler.max_proposals", f"must be >= n_accept = {n_accept}, got {max_proposals}")
    batch_size = r.integer(s, "sampler", "batch_size", min(1000, max_proposals), lo=1, hi=MAX_BATCH)
    margin = r.number(s, "sampler", "log_bound_margin", 0.0, ge=0.0)
    bound = r.choice(s, "sampler", "bound", ("data", "public"), "data")
    cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
    assert model is not None
    probe = model.sample_prior(np.random.default_rng(0), 1)
    if cap is not None and model.record_loglik_range(probe) is None:
        raise r.err("sampler.max_sensitivity", f"model {model.name!r} declares no record_loglik_range")
    lazy = None
    if "lazy" in s:
        try:
            lazy = Lazy(r.number(s, "sampler", "lazy", gt=0.0, lt=1.0))
        except ValueError as exc:
            raise r.err("sampler.lazy", str(exc)) from exc
    return SamplerSettings(
        kind="rejection",
        n_accept=n_accept,
        max_proposals=max_proposals,
        batch_size=batch_size,
        log_bound_margin=margin,
        rejection_bound=bound,
        max_sensitivity=cap,
        lazy=lazy,
    )


def _abcdp(r: Reader, s: dict[str, Any], seed: int) -> SamplerSettings:
    """The public run parameters become a FederatedSvtPlan (its own checks name the key)."""
    from mechanisms.abcdp.federated import FederatedSvtPlan

    simulator = r.choice(s, "sampler", "simulator", SIMULATORS)
    vals: dict[str, Any] = {
        "eps_abc": r.number(s, "sampler", "eps_abc", gt=0.0),
        "eps_total": r.number(s, "sampler", "eps_total", gt=0.0, allow_inf=True),
        "c": r.integer(s, "sampler", "c", lo=1, hi=10**6),
        "resample": r.get(s, "sampler", "resample", bool, True),
        "n_records": r.integer(s, "sampler", "n_records", lo=1),
        "n_features": r.integer(s, "sampler", "n_features", lo=2, hi=100_000),
        "bandwidth": r.number(s, "sampler", "bandwidth", gt=0.0),
    }
    if vals["n_features"] % 2:
        raise r.err("sampler.n_features", f"must be even (cos/sin pairs), got {vals['n_features']}")
    try:
        plan = FederatedSvtPlan(dim=SIMULATOR_DIMS[simulator], map_seed=seed % 2**63, **vals)
    except ValueError as exc:
        key = next((k for k in vals if str(exc).startswith(k)), "")
        raise r.err(f"sampler.{key}" if key else "sampler", str(exc)) from exc
    batch_size = r.integer(s, "sampler", "batch_size", 100, lo=1, hi=MAX_BATCH)
    max_proposals = r.integer(s, "sampler", "max_proposals", lo=1, hi=10**12)
    if max_proposals < vals["c"]:
        raise r.err("sampler.max_proposals", f"must be >= c = {vals['c']}, got {max_proposals}")
    return SamplerSettings(
        kind="abcdp",
        batch_size=batch_size,
        max_proposals=max_proposals,
        abcdp=plan.to_params(),
        simulator=simulator,
    )


def _lazy(r: Reader, s: dict[str, Any], model: Model) -> Lazy | None:
    """sampler.lazy (gamma = k / 2^L, L <= 16) with sampler.max_sensitivity (MH: required with lazy)."""
    if "lazy" not in s:
        if "max_sensitivity" in s and s.get("kind") != "penalty":
            raise r.err("sampler.max_sensitivity", "caps the step of lazy MH: only with sampler.lazy")
        return None
    gamma = r.number(s, "sampler", "lazy", gt=0.0, lt=1.0)
    cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
    if cap is None:
        raise r.err(
            "sampler.max_sensitivity",
            "missing: lazy MH charges every step at a public cap on the per-record sensitivity c(theta, "
            "theta*) = 2 x the model's per-record bound (larger steps are rejected without asking)",
        )
    th = model.sample_prior(np.random.default_rng(0), 2)
    if model.record_ratio_bound(th[:1], th[1:]) is None:
        raise r.err("sampler.lazy", f"model {model.name!r} has no public per-record bound for the cap")
    try:
        return Lazy(gamma, cap)
    except ValueError as exc:
        raise r.err("sampler.lazy", str(exc)) from exc
