"""The audited decision: two neighbouring datasets for registry 1 (one record replaced by the worst-case
canary the model's schema allows) and the public proposal at which the observer watches the decision."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hss.lazy_coin import LazyCoin
from mechanisms.models.base import Model, load_model
from mechanisms.samplers.penalty import penalty_correction
from mechanisms.samplers.requests import DecisionRequest, Lazy, Penalty
from mechanisms.samplers.terms import log_ratio
from simulations.privacy_audit.config import F64, AuditConfig, AuditConfigError


@dataclass
class Setup:
    cfg: AuditConfig
    model: Model
    data_d: list[dict[str, F64]]  # D
    data_d1: list[dict[str, F64]]  # D': registry 1's record replaced by the canary
    canary: dict[str, float]
    replaced: dict[str, float]
    theta: F64 | None  # (1, d)
    theta_star: F64  # (1, d)
    public: float
    penalty: Penalty | None
    lazy: LazyCoin | None
    log_bounds: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))

    @property
    def session_params(self) -> dict[str, Any]:
        return {"model_args": self.cfg.model_args, "kind": self.cfg.kind, **self.cfg.params}

    def request(self, n: int) -> DecisionRequest:
        ts = np.repeat(self.theta_star, n, axis=0)
        th = None if self.theta is None else np.repeat(self.theta, n, axis=0)
        return DecisionRequest(
            kind=self.cfg.kind, theta_star=ts, public=np.full(n, self.public), theta=th, penalty=self.penalty
        )

    def log_r(self, data: list[dict[str, F64]], bounds: list[float]) -> float:
        """a = public + Σ_j ℓ_j (the audited decision's log acceptance ratio, penalty correction included)."""
        req = self.request(1)
        ells = [
            log_ratio(self.model, d, req, bounds[j] if bounds else None)[0][0] for j, d in enumerate(data)
        ]
        return float(self.public + sum(ells))


def synthetic(cfg: AuditConfig, model: Model) -> list[dict[str, F64]]:
    """The registries' synthetic records (``parties`` x ``records``) from the public ``data_seed``."""
    rng = np.random.default_rng(cfg.data_seed)
    if cfg.model_name == "bayes-logistic":
        from mechanisms.models.logistic import BayesLogistic, synthetic_registries

        assert isinstance(model, BayesLogistic)
        return synthetic_registries(rng, model, sizes=tuple([cfg.records] * cfg.parties))
    return [{"y": (rng.random(cfg.records) < 0.3).astype(np.float64)} for _ in range(cfg.parties)]


def _candidates(model: Model) -> list[dict[str, float]]:
    """Every extreme record the schema allows (corners of the box, every allowed value)."""
    rows: list[dict[str, float]] = [{}]
    for col in model.schema:
        vals = list(col.values) if col.values is not None else [col.lower, col.upper]
        if not all(math.isfinite(v) for v in vals):
            raise AuditConfigError(f"column {col.name!r} has no finite public bounds: no worst-case canary")
        rows = [{**r, col.name: float(v)} for r in rows for v in vals]
    return rows


def _record_ratio(
    model: Model, rec: dict[str, float], theta: F64 | None, theta_star: F64, kind: str
) -> float:
    one = {k: np.array([v]) for k, v in rec.items()}
    if kind == "mh":
        assert theta is not None
        return float(model.log_likelihood(one, theta_star)[0] - model.log_likelihood(one, theta)[0])
    return float(model.log_likelihood(one, theta_star)[0])


def build(cfg: AuditConfig) -> Setup:
    """The two neighbouring datasets and the audited public proposal (see the module docstring)."""
    model = load_model(cfg.model_name, cfg.model_args)
    data = synthetic(cfg, model)
    params = {"model_args": cfg.model_args, "kind": cfg.kind, **cfg.params}
    from parties.analyses import AnalysisError
    from parties.registry import get_analysis

    try:
        get_analysis(cfg.model_name, params)
    except AnalysisError as exc:
        raise AuditConfigError(f"{cfg.source}: mechanism.params: {exc}") from exc
    penalty = Penalty.from_params(cfg.params["penalty"]) if "penalty" in cfg.params else None
    lazy = Lazy.from_params(cfg.params["lazy"]).coin() if "lazy" in cfg.params else None
    cands = _candidates(model)
    d = model.d
    for key, v in (("theta", cfg.theta), ("theta_star", cfg.theta_star)):
        if v is not None and v.shape != (d,):
            raise AuditConfigError(f"{cfg.source}: mechanism.{key}: needs {d} numbers, got {v.size}")
    # defaults: a public point near the pooled data (Beta-Bernoulli: its frequency; logistic: 0) and, for
    # MH, a step from it that _centre slides until a(D) + a(D') = 0 (the worst case for the accept bit)
    pooled = {k: np.concatenate([x[k] for x in data]) for k in data[0]}
    base = np.zeros((1, d))
    if cfg.model_name == "beta-bernoulli":
        base = np.full((1, d), float(np.mean(pooled["y"])))
    theta: F64 | None = None
    if cfg.kind == "mh":
        theta = cfg.theta.reshape(1, d) if cfg.theta is not None else base
    theta_star = cfg.theta_star.reshape(1, d) if cfg.theta_star is not None else base + 0.02
    if cfg.kind == "rejection" and cfg.theta_star is None:
        theta_star = base
    setup = _with_canary(cfg, model, data, cands, theta, theta_star, penalty, lazy)
    if cfg.kind == "mh" and cfg.theta_star is None:
        setup = _centre(cfg, model, data, cands, setup, penalty, lazy)
    return setup


def _with_canary(
    cfg: AuditConfig,
    model: Model,
    data: list[dict[str, F64]],
    cands: list[dict[str, float]],
    theta: F64 | None,
    theta_star: F64,
    penalty: Penalty | None,
    lazy: LazyCoin | None,
) -> Setup:
    ratios = [_record_ratio(model, c, theta, theta_star, cfg.kind) for c in cands]
    lo, hi = cands[int(np.argmin(ratios))], cands[int(np.argmax(ratios))]
    d0 = [dict(x) for x in data]
    d1 = [dict(x) for x in data]
    for k in d0[0]:
        d0[0] = {**d0[0], k: d0[0][k].copy()}
        d1[0] = {**d1[0], k: d1[0][k].copy()}
    for k, v in lo.items():  # D holds the record that lowers registry 1's term most, D' the one raising it
        d0[0][k][0] = v
    for k, v in hi.items():
        d1[0][k][0] = v
    public = 0.0
    if cfg.kind == "mh":
        assert theta is not None
        public = float(model.log_prior(theta_star)[0] - model.log_prior(theta)[0])
        if penalty is not None:
            sigma = penalty.sigma(model, theta, theta_star)
            public += float(penalty_correction(sigma, cfg.m)[0])
    setup = Setup(cfg, model, d0, d1, hi, lo, theta, theta_star, public, penalty, lazy)
    if cfg.kind == "rejection":
        from mechanisms.kinds import DecisionPlan
        from mechanisms.kinds.rejection import log_bound_of

        plan = DecisionPlan.from_params(setup.session_params)

        def bounds(ds: list[dict[str, F64]]) -> list[float]:  # each registry's own bound, as its daemon has
            return [log_bound_of(cfg.model_name, model, x, plan.settings) for x in ds]

        setup.log_bounds = (bounds(d0), bounds(d1))
    return setup


def _audit_cap(cfg: AuditConfig) -> float:
    """The per-record sensitivity of the audited step: the session's cap (the claim's worst case), else 1."""
    for key in ("penalty", "lazy"):
        table = cfg.params.get(key)
        cap = table.get("max_sensitivity") if isinstance(table, dict) else None
        if cap is not None:
            return float(cap)
    return 1.0


def _centre(
    cfg: AuditConfig,
    model: Model,
    data: list[dict[str, F64]],
    cands: list[dict[str, float]],
    setup: Setup,
    penalty: Penalty | None,
    lazy: LazyCoin | None,
) -> Setup:
    """The audited MH pair: a step whose per-record sensitivity is the session's cap (the claim's worst
    case; 1 without a cap), slid along its direction until a(D) + a(D') = 0 — where the accept bit of
    exact MH leaks most, and near the worst case for the penalty and lazy rules."""
    from mechanisms.samplers.requests import record_sensitivity

    assert setup.theta is not None
    start: F64 = setup.theta
    direction = setup.theta_star - start
    direction = direction / np.linalg.norm(direction)
    cap = _audit_cap(cfg) * (1 - 1e-6)

    def pair(shift: float) -> tuple[F64, F64] | None:
        th = start + shift * direction
        if not model.in_bounds(th).all():
            return None
        lo, hi = 0.0, 10.0
        for _ in range(60):  # the step length with c(θ, θ*) = cap
            h = 0.5 * (lo + hi)
            ts = th + h * direction
            if not model.in_bounds(ts).all() or record_sensitivity(model, th, ts)[0] > cap:
                hi = h
            else:
                lo = h
        ts = th + lo * direction
        return (th, ts) if lo > 0 else None

    def total(shift: float) -> tuple[float, Setup] | None:
        pr = pair(shift)
        if pr is None:
            return None
        s = _with_canary(cfg, model, data, cands, pr[0], pr[1], penalty, lazy)
        return s.log_r(s.data_d, []) + s.log_r(s.data_d1, []), s

    lo, hi = -5.0, 5.0
    best = setup
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        got = total(mid)
        if got is None:  # outside the support: shrink towards the start
            lo, hi = (mid, hi) if mid < 0 else (lo, mid)
            continue
        value, best = got
        if value > 0:
            lo = mid
        else:
            hi = mid
    return best
