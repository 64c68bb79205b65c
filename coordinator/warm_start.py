"""The differentially private warm start of ``confar run`` (``[warm_start]``): releases over sessions in
reveal mode ``sum``, the DP Laplace approximation, and what the MCMC then starts from.

``[warm_start]`` keys (all public)::

    [warm_start]
    mu = 0.3              # its GDP budget against the coordinator for add-remove neighbours (each registry
                          # charges its own view: more for a coalition it assumes, <= twice for replace-one)
    steps = 5             # Fisher-scoring steps: a score release first and last, gradients between
    clip = 4.0            # L2 bound on each record's score (a modelling choice of the warm start only)
    ellipsoid = 0.99      # first a moments release, then the covariates' public ellipsoid keeps this share
                          # of Gaussian covariates unclipped (P(chi2_p <= R^2)); false: no moments release
    inflate = 1.2         # the independence proposal's covariance is inflate^2 x the Laplace covariance
    n_records = 100000    # the public total number of records (default: the [simulate] sizes' sum)
    moments_share = 0.1   # the share of mu^2 spent on the moments release
    gram_share = 0.3      # the share of the steps' mu^2 spent on the Gram blocks (first and last step, or
                          # every step with curvature = "fisher")
    curvature = "secant"  # "secant": gradient releases between the first and last score release, their
                          # curvature secant-updated; "fisher": a score release (fresh Fisher) every step
                          # (default: the model's warm_start_curvature, else "secant")

The coordinator turns these into each release's noise scales for m registries
(:func:`warm_start_plan`): each registry then adds N(0, sd²) / N(0, sd2²) per coordinate of its own sums,
and charges its own ledger (``mechanisms.privacy.charge``). The releases are run steps 1..R of the run
(the moments release a session of its own, the score releases another), so a resumed run replays them
from the registries' records without a second charge; the results go to ``warm_start.json`` in the run
folder, and a resumed run that finds it releases nothing again. With ``[sampler] proposal = "laplace"`` the
MCMC is an independence sampler from N(θ̂, inflate² Â⁻¹), its chains started at draws of it (public seed).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from coordinator.tables import Reader
from mechanisms.kinds import RELEASE_MODE, DecisionPlan
from mechanisms.models.base import F64, Model
from mechanisms.warmstart import (
    CURVATURES,
    LaplaceApproximation,
    Statistics,
    WarmStartPlan,
    block_bounds,
    dimension,
    run_warm_start,
)
from mechanisms.warmstart import unconverged as warmstart_unconverged
from proto.files import write_durable

if TYPE_CHECKING:
    from coordinator.api import BlockingCoordinator
    from coordinator.experiment import Experiment

WARM_FILE = "warm_start.json"
KEYS = (
    "mu",
    "steps",
    "clip",
    "ellipsoid",
    "inflate",
    "n_records",
    "moments_share",
    "gram_share",
    "curvature",
)


@dataclass(frozen=True)
class WarmStartSettings:
    mu: float
    steps: int = 5
    clip: float = 4.0
    ellipsoid: float | None = 0.99
    inflate: float = 1.2
    n_records: int | None = None
    moments_share: float = 0.1
    gram_share: float = 0.3
    curvature: str | None = None  # None: the model's warm_start_curvature, else "secant"
    # not file keys: a formula model's releases in the pilot's basis (coordinator.planner.with_pilot), the
    # score's clip there (its bound, at the pilot's mean when it depends on theta), and the public start of
    # the steps (the pilot's mean where the model has no public jump from 0; None: 0)
    basis: tuple[tuple[float, ...], ...] | None = None
    basis_clip: float | None = None
    start: tuple[float, ...] | None = None


def read_warm_start(r: Reader, tbl: dict[str, Any], n_default: int | None) -> WarmStartSettings:
    """``[warm_start]``, checked with errors naming the key."""
    r.only(tbl, "warm_start", KEYS)
    if "mu" not in tbl:
        raise r.err("warm_start.mu", "missing: the warm start's GDP budget (against the coordinator)")
    raw_e = tbl.get("ellipsoid", 0.99)
    ellipsoid: float | None
    if raw_e is False:
        ellipsoid = None
    else:
        ellipsoid = r.number(tbl, "warm_start", "ellipsoid", 0.99, ge=0.5, lt=1.0)
    n = r.integer(tbl, "warm_start", "n_records", n_default, lo=1) if "n_records" in tbl else n_default
    if n is None:
        raise r.err("warm_start.n_records", "missing: the public total number of records")
    return WarmStartSettings(
        mu=r.number(tbl, "warm_start", "mu", gt=0.0),
        steps=r.integer(tbl, "warm_start", "steps", 5, lo=1, hi=50),
        clip=r.number(tbl, "warm_start", "clip", 4.0, gt=0.0),
        ellipsoid=ellipsoid,
        inflate=r.number(tbl, "warm_start", "inflate", 1.2, ge=1.0),
        n_records=n,
        moments_share=r.number(tbl, "warm_start", "moments_share", 0.1, gt=0.0, lt=1.0),
        gram_share=r.number(tbl, "warm_start", "gram_share", 0.3, gt=0.0, lt=1.0),
        curvature=_curvature(r, tbl),
    )


def _curvature(r: Reader, tbl: dict[str, Any]) -> str | None:
    value = tbl.get("curvature")
    if value is not None and value not in CURVATURES:
        raise r.err("warm_start.curvature", f"must be one of {list(CURVATURES)}, got {value!r}")
    return None if value is None else str(value)


def curvature_of(ws: WarmStartSettings, model: Model) -> str:
    """The steps' curvature: the setting, else the model's preference, else "secant"."""
    return ws.curvature or str(getattr(model, "warm_start_curvature", "secant"))


def _scales(bounds: tuple[float, float], mu: float, gram_share: float, m: int) -> tuple[float, float]:
    """(sd, sd2) with which a release of block bounds ``bounds`` is ``mu``-GDP against the coordinator
    (all m registries' noise unknown to it), ``gram_share`` of μ² on the Gram block."""
    d1, d2 = bounds
    return (
        d1 / (mu * math.sqrt((1.0 - gram_share) * m)),
        d2 / (mu * math.sqrt(gram_share * m)),
    )


def warm_start_plan(ws: WarmStartSettings, model: Model, m: int) -> WarmStartPlan:
    """The releases and their noise scales: μ² = μ_moments² + steps · μ_score² = ``ws.mu``² against the
    coordinator for add-remove neighbours (tested against ``mechanisms.warmstart.release_mu``)."""
    assert ws.n_records is not None
    scale = float(ws.n_records)
    moments = None
    mu_left = ws.mu
    if ws.ellipsoid is not None:
        mu_m = ws.mu * math.sqrt(ws.moments_share)
        mu_left = ws.mu * math.sqrt(1.0 - ws.moments_share)
        probe = Statistics("moments", 1.0, 1.0, scale)
        moments = Statistics("moments", *_scales(block_bounds(probe, model), mu_m, 0.5, m), scale=scale)
    # mu_left^2 = full releases (first and last step) + gradient releases between them; the Gram blocks of
    # the two full releases share gram_share of it
    curvature = curvature_of(ws, model)
    full = ws.steps if curvature == "fisher" else min(ws.steps, 2)
    mu_gram = mu_left * math.sqrt(ws.gram_share / full)
    mu_grad = mu_left * math.sqrt((1.0 - ws.gram_share) / ws.steps)
    c = ws.clip if ws.basis is None or ws.basis_clip is None else ws.basis_clip
    b = ws.basis
    score = Statistics(
        "score", c / (mu_grad * math.sqrt(m)), c**2 / (mu_gram * math.sqrt(m)), scale, clip=c, basis=b
    )
    gradient = None
    if ws.steps >= 3 and curvature == "secant":
        gradient = Statistics("gradient", c / (mu_grad * math.sqrt(m)), 1.0, scale, clip=c, basis=b)
    return WarmStartPlan(
        score=score,
        steps=ws.steps,
        moments=moments,
        gradient=gradient,
        ellipsoid_quantile=ws.ellipsoid,
        inflate=ws.inflate,
        curvature=curvature,
    )


def session_plan(model_params: dict[str, Any], stats: Statistics) -> dict[str, Any]:
    """A release session's ``model_params`` (a :class:`DecisionPlan` of kind ``statistics``)."""
    return DecisionPlan(model_args=model_params, kind="statistics", settings=stats).to_params()


def model_params_of(model: Model, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` plus the covariate ellipsoid the warm start set on ``model`` (JSON-ready lists)."""
    out = dict(base)
    for key in ("x_center", "x_cov", "x_radius"):
        value = getattr(model, key, None)
        if value is not None:
            out[key] = json.loads(json.dumps(value))
    return out


@dataclass(frozen=True)
class WarmResult:
    """What ``warm_start.json`` holds: the model arguments with the ellipsoid, the Laplace approximation,
    the path of θ and how many run steps the releases took."""

    model_params: dict[str, Any]
    laplace: LaplaceApproximation
    path: tuple[F64, ...]
    run_steps: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "model_params": self.model_params,
            "laplace": {"mean": self.laplace.mean.tolist(), "cov": self.laplace.cov.tolist()},
            "path": [p.tolist() for p in self.path],
            "run_steps": self.run_steps,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> WarmResult:
        lap = doc["laplace"]
        return cls(
            model_params=dict(doc["model_params"]),
            laplace=LaplaceApproximation(np.asarray(lap["mean"], float), np.asarray(lap["cov"], float)),
            path=tuple(np.asarray(p, float) for p in doc["path"]),
            run_steps=int(doc["run_steps"]),
        )


def load_result(out_dir: Path) -> WarmResult | None:
    """The saved warm start of the run in ``out_dir``, None before it ran; ValueError if unreadable."""
    path = out_dir / WARM_FILE
    if not path.exists():
        return None
    try:
        return WarmResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # the run turns it into a RunError
        raise ValueError(f"{path}: cannot read the warm start ({exc}); remove it to release again") from exc


def network_warm_start(
    coord: BlockingCoordinator,
    exp: Experiment,
    run_id: str,
    say: Callable[[str], None],
    record_session: Callable[[str, int], None],
) -> WarmResult:
    """The releases over the registries, run steps 1..R of the run: one session in reveal mode ``sum`` per
    release kind (the moments release, then the score releases with the ellipsoid in the model arguments);
    returns the result (the caller saves it)."""
    assert exp.warm_start is not None and exp.warm_start.n_records is not None
    model = exp.model()
    plan = warm_start_plan(exp.warm_start, model, exp.m)
    sessions: dict[str, Any] = {}
    done = [0]

    from coordinator.api import SessionOptions  # at run time only: the API pulls in grpc

    def release(stats: Statistics, theta: F64 | None, current: Model) -> F64:
        if stats.what not in sessions:
            for other in list(sessions):  # one session of a run at a time: the earlier one is closed first
                sessions.pop(other).close("done")
            sess = coord.open_session(SessionOptions(
                reveal_mode=RELEASE_MODE,
                model=exp.analysis(),
                model_params=session_plan(model_params_of(current, exp.model_params), stats),
                t=exp.threshold,
                topology=exp.topology,
                run_id=run_id,
                first_run_step=done[0] + 1,
                security=exp.security,  # sum under abort: the same release, the receiver's checks
                study=exp.study_text,
            ))
            record_session(sess.spec.session_id.hex(), done[0] + 1)
            sessions[stats.what] = sess
        n = dimension(stats.what, current)
        inputs = {"theta": np.asarray(theta, dtype=np.float64)} if theta is not None else {}
        d = sessions[stats.what].evaluate(inputs, n)
        done[0] += 1
        assert d.revealed is not None
        say(f"warm start: run step {done[0]}, {stats.what} release ({n} values)")
        return np.asarray(d.revealed, dtype=np.float64) * stats.scale

    try:
        start = np.zeros(model.d) if exp.warm_start.start is None else np.asarray(exp.warm_start.start)
        ws = run_warm_start(model, plan, release, exp.warm_start.n_records, start, exp.m)
    except BaseException:
        for s in sessions.values():
            s.abort("warm start stopped")
        raise
    for s in sessions.values():
        s.close("done")
    return WarmResult(model_params_of(ws.model, exp.model_params), ws.laplace, ws.path, done[0])


def save_result(out_dir: Path, result: WarmResult) -> None:
    write_durable(out_dir / WARM_FILE, json.dumps(result.to_dict(), indent=1).encode("utf-8"))


def unconverged(after: Experiment, result: WarmResult) -> str | None:
    """The warning of :func:`mechanisms.warmstart.unconverged` for the experiment after the warm start."""
    assert after.warm_start is not None
    model = after.model()
    plan = warm_start_plan(after.warm_start, model, after.m)
    return warmstart_unconverged(plan, model, result.path, result.laplace, after.m)


def after_warm_start(exp: Experiment, result: WarmResult) -> Experiment:
    """The experiment the MCMC runs: the model with the warm start's ellipsoid; the Laplace approximation as
    the independence proposal (``[sampler] proposal = "laplace"``)."""
    s = dataclasses.replace(exp.sampler, laplace=result.laplace)
    return dataclasses.replace(exp, model_params=result.model_params, sampler=s)
