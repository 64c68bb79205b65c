"""``confar privacy audit AUDIT.toml``: membership-inference auditing of a registry's stated guarantee, on the
real decision protocol.

For one analysis (model, sampler kind, reveal mode, parameters) and one threat model (the coordinator, or q
colluding registries that know their own noise), the audit builds two neighbouring datasets for registry 1 —
one record replaced by a worst-case canary the model's schema allows (the record that moves registry 1's
log-ratio most at the audited proposal) — and runs the mechanism ``runs`` times on each: every registry
computes its term with fresh noise from the OS CSPRNG (``SecureRandom.from_os``, as in production) and the
decision runs through the secret-sharing engine in memory (``mechanisms.samplers.HssDecide``: the same
protocol code the daemons run). With ``daemon_runs`` a smaller confirmation run goes through real party
daemons (local consortium, mutual TLS) for the outside observer. It records what the observer sees (the
accept bits, the sum, the blinded product; with colluders, also the sum of their noise), turns it into
membership-inference tests (the log-likelihood-ratio test where the two laws are known — bits, K-step bit
transcripts, the colluders' view of the bit — and threshold tests on the observation otherwise),
Clopper–Pearson-bounds their errors (``mechanisms.privacy.audit``) and compares them with the claim: the
trade-off curve of the events the registry would charge for ``steps`` decisions (``parties/models_bridge.py``
with ``coalition_view``; none for an analysis it refuses, e.g. exact MH with the sign reveal).

AUDIT.toml::

    [audit]
    name = "penalty-sign"     # used in file names
    runs = 20000              # mechanism runs per dataset, in memory
    daemon_runs = 0           # confirmation runs per dataset over real daemons (outside observer only)
    steps = 1                 # K decisions per run (a K-step transcript at the same public proposal)
    confidence = 0.95         # joint confidence of all Clopper-Pearson bounds (Bonferroni)
    delta = 1e-5              # the delta of the stated and the empirical epsilon
    seed = 11                 # the audit's own public sampling (data, canary); recorded in the output

    [model]                   # beta-bernoulli or bayes-logistic (synthetic registries, public seed)
    name = "beta-bernoulli"
    [model.params]

    [data]
    parties = 3
    records = 40              # per registry
    data_seed = 7

    [mechanism]
    kind = "mh"               # mh | rejection
    reveal = "sign"           # sum | blinded | sign
    # threshold = 1           # the session's Shamir threshold (default (m - 1) // 2)
    # theta = [0.3]           # the current state (mh); default: a pair placed around a = 0 (worst for sign)
    # theta_star = [0.33]
    [mechanism.params]        # the session's model_params as a registry sees them (penalty, lazy, caps, ...)

    [threat]
    colluding = 0             # q: 0 = the coordinator; q >= 1 colluders who know their own noise

Exit codes: 0 consistent (or no finite claim, reported as such), 1 VIOLATED, 2 bad file or arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hss.protocols import LazyCoin
from hss.randomness import SecureRandom
from mechanisms.models.base import Model, load_model
from mechanisms.privacy import (
    EnvelopeTradeOff,
    GaussianTradeOff,
    MetropolisAcceptance,
    PenaltyAcceptance,
    PrivacyEvent,
    ThreatModel,
    TradeOff,
    coalition_view,
    compose_events,
)
from mechanisms.privacy.audit import AuditPoint, AuditResult, audit, statistic_points, threshold_points
from mechanisms.privacy.residual import ResidualPenaltyAcceptance
from mechanisms.samplers import HssDecide
from mechanisms.samplers.penalty import penalty_correction
from mechanisms.samplers.requests import DecisionRequest, Lazy, Penalty
from mechanisms.samplers.terms import log_ratio, party_terms

F64 = npt.NDArray[np.float64]
HELP = "membership-inference audit of a registry's stated privacy guarantee on the real decision protocol"
MODELS = ("beta-bernoulli", "bayes-logistic")


class AuditConfigError(ValueError):
    """A problem in AUDIT.toml, naming the file and the key."""


@dataclass(frozen=True)
class AuditConfig:
    source: Path
    name: str
    runs: int
    daemon_runs: int
    steps: int
    confidence: float
    delta: float
    seed: int
    model_name: str
    model_args: dict[str, Any]
    parties: int
    records: int
    data_seed: int
    kind: str
    reveal: str
    threshold: int
    theta: F64 | None
    theta_star: F64 | None
    params: dict[str, Any]
    colluding: int
    noise_scale: float = 1.0  # TESTING ONLY: each registry's noise multiplied by this (a broken mechanism)
    protocol_runs: int = 0  # abcdp: runs through the SVT protocol in memory (the bulk uses its specification)

    @property
    def m(self) -> int:
        return self.parties


def load_audit(path: str | Path) -> AuditConfig:
    """Read and check AUDIT.toml (schema in the module docstring); errors name the file and the key."""
    path = Path(path)

    def err(key: str, msg: str) -> AuditConfigError:
        return AuditConfigError(f"{path}: {key}: {msg}")

    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AuditConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AuditConfigError(f"{path}: not valid TOML: {exc}") from exc
    allowed = {"audit", "model", "data", "mechanism", "threat"}
    for k in doc:
        if k not in allowed:
            raise err(k, f"unknown table (allowed: {', '.join(sorted(allowed))})")

    def table(name: str) -> dict[str, Any]:
        t = doc.get(name, {})
        if not isinstance(t, dict):
            raise err(name, "must be a table")
        return t

    def get(t: dict[str, Any], where: str, key: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in t:
            if default is ...:
                raise err(f"{where}.{key}", "missing (required)")
            return default
        v = t[key]
        if isinstance(v, bool) and typ is not bool:
            raise err(f"{where}.{key}", f"must be {typ}, got {v!r}")
        if typ is float and isinstance(v, int):
            v = float(v)
        if not isinstance(v, typ):
            raise err(f"{where}.{key}", f"wrong type: got {type(v).__name__}")
        return v

    def colluding_raw(t: dict[str, Any]) -> bool:
        return bool(t.get("colluding", 0))

    def only(t: dict[str, Any], where: str, keys: set[str]) -> None:
        extra = sorted(set(t) - keys)
        if extra:
            raise err(f"{where}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(keys))})")

    a, mo, da, me, th = table("audit"), table("model"), table("data"), table("mechanism"), table("threat")
    only(
        a,
        "audit",
        {"name", "runs", "daemon_runs", "protocol_runs", "steps", "confidence", "delta", "seed"}
        | {"noise_scale"},
    )
    only(mo, "model", {"name", "params"})
    only(da, "data", {"parties", "records", "data_seed"})
    only(me, "mechanism", {"kind", "reveal", "threshold", "theta", "theta_star", "params"})
    only(th, "threat", {"colluding"})
    runs = get(a, "audit", "runs", int, 20_000)
    if not 100 <= runs <= 10_000_000:
        raise err("audit.runs", f"must be in 100..10000000, got {runs}")
    daemon_runs = get(a, "audit", "daemon_runs", int, 0)
    if not 0 <= daemon_runs <= 1_000_000:
        raise err("audit.daemon_runs", f"must be in 0..1000000, got {daemon_runs}")
    steps = get(a, "audit", "steps", int, 1)
    if not 1 <= steps <= 1000:
        raise err("audit.steps", f"must be in 1..1000, got {steps}")
    confidence = get(a, "audit", "confidence", float, 0.95)
    if not 0.5 <= confidence < 1:
        raise err("audit.confidence", f"must lie in [0.5, 1), got {confidence}")
    delta = get(a, "audit", "delta", float, 1e-5)
    if not 0 < delta < 1:
        raise err("audit.delta", f"must lie in (0, 1), got {delta}")
    noise_scale = get(a, "audit", "noise_scale", float, 1.0)
    if not 0 < noise_scale <= 10:
        raise err("audit.noise_scale", f"must lie in (0, 10], got {noise_scale}")
    kind = get(me, "mechanism", "kind", str, "mh")
    if kind not in ("mh", "rejection", "abcdp"):
        raise err("mechanism.kind", f"must be 'mh', 'rejection' or 'abcdp', got {kind!r}")
    if kind == "abcdp" and mo:
        raise err("model", "kind 'abcdp' audits federated ABCDP on 1-d records: remove [model]")
    model_name = get(mo, "model", "name", str, "beta-bernoulli" if kind == "abcdp" else ...)
    if model_name not in MODELS:
        raise err("model.name", f"the audit builds synthetic registries for {MODELS}, got {model_name!r}")
    model_args = dict(get(mo, "model", "params", dict, {}))
    parties = get(da, "data", "parties", int, 3)
    if not 2 <= parties <= 15:
        raise err("data.parties", f"must be in 2..15, got {parties}")
    records = get(da, "data", "records", int, 40)
    if not 2 <= records <= 100_000:
        raise err("data.records", f"must be in 2..100000, got {records}")
    reveal = get(me, "mechanism", "reveal", str, "svt" if kind == "abcdp" else "sign")
    if reveal not in (("svt",) if kind == "abcdp" else ("sum", "blinded", "sign")):
        want = "svt" if kind == "abcdp" else "sum, blinded or sign"
        raise err("mechanism.reveal", f"must be {want}, got {reveal!r}")
    protocol_runs = get(a, "audit", "protocol_runs", int, 0)
    if not 0 <= protocol_runs <= 1_000_000 or (protocol_runs and kind != "abcdp"):
        raise err("audit.protocol_runs", "abcdp only: runs through the SVT protocol in memory, 0..1000000")
    threshold = get(me, "mechanism", "threshold", int, (parties - 1) // 2)
    if kind == "abcdp" and colluding_raw(th):
        raise err("threat.colluding", "the ABCDP audit observes the SVT bits of the coordinator only")
    if reveal != "sum" and not 1 <= threshold <= (parties - 1) // 2:
        raise err("mechanism.threshold", f"{reveal!r} needs 1 <= t < m/2, got {threshold}")
    colluding = get(th, "threat", "colluding", int, 0)
    if not 0 <= colluding <= parties - 1:
        raise err("threat.colluding", f"must be in 0..{parties - 1}, got {colluding}")
    if colluding and reveal == "blinded":
        raise err("threat.colluding", "the audit observes colluders' noise for sum and sign only")
    if steps > 1 and reveal == "blinded":
        raise err("audit.steps", "multi-step audits take sum or sign (their per-step laws are known)")
    theta = me.get("theta")
    theta_star = me.get("theta_star")
    arrs: list[F64 | None] = []
    for key, v in (("theta", theta), ("theta_star", theta_star)):
        if v is None:
            arrs.append(None)
            continue
        if not (isinstance(v, list) and v and all(isinstance(x, int | float) for x in v)):
            raise err(f"mechanism.{key}", "must be a list of numbers")
        arrs.append(np.asarray(v, dtype=np.float64))
    params = dict(get(me, "mechanism", "params", dict, {}))
    return AuditConfig(
        source=path,
        name=get(a, "audit", "name", str, path.stem),
        runs=runs,
        daemon_runs=daemon_runs,
        steps=steps,
        confidence=confidence,
        delta=delta,
        seed=get(a, "audit", "seed", int, 11),
        model_name=model_name,
        model_args=model_args,
        parties=parties,
        records=records,
        data_seed=get(da, "data", "data_seed", int, 7),
        kind=kind,
        reveal=reveal,
        threshold=threshold,
        theta=arrs[0],
        theta_star=arrs[1],
        params=params,
        colluding=colluding,
        noise_scale=noise_scale,
        protocol_runs=protocol_runs,
    )


# ---- the audited decision -------------------------------------------------------------------------------


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


def _synthetic(cfg: AuditConfig, model: Model) -> list[dict[str, F64]]:
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
    data = _synthetic(cfg, model)
    params = {"model_args": cfg.model_args, "kind": cfg.kind, **cfg.params}
    from parties.analyses import AnalysisError
    from parties.registry import get_analysis

    try:
        get_analysis(cfg.model_name).check_params(params)
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
        from parties.models_bridge import ModelAnalysis

        def bounds(ds: list[dict[str, F64]]) -> list[float]:  # each registry's own bound, as its daemon has
            params = setup.session_params
            return [
                ModelAnalysis(cfg.model_name, cfg.model_name).rejection_bound(model, x, params) for x in ds
            ]

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


# ---- running the mechanism --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Observed:
    value: F64  # (runs, K): the bit (0/1) or the revealed value per step
    colluders: F64 | None  # (runs, K): Σ of the colluders' noise (q >= 1)


def run_in_memory(setup: Setup, data: list[dict[str, F64]], bounds: list[float], runs: int) -> Observed:
    """``runs`` × K decisions through the secret-sharing engine in memory, noise from the OS CSPRNG."""
    cfg, m, k = setup.cfg, setup.cfg.m, setup.cfg.steps
    n = runs * k
    req = setup.request(n)
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    decide = HssDecide.setup(cfg.reveal, m, rngs, lazy=setup.lazy)
    terms, blinds, noise = [], [], []
    for j, d in enumerate(data):
        bound = bounds[j] if bounds else None
        out = party_terms(setup.model, d, req, m, SecureRandom.from_os(), cfg.reveal, log_bound=bound)
        ell = log_ratio(setup.model, d, req, bound)[0]
        nz = (out.values - ell) * cfg.noise_scale  # this registry's own noise (scaled only to audit a bug)
        terms.append(ell + nz)
        noise.append(nz)
        if out.blind is not None:
            blinds.append(out.blind)
    chunk = 20_000
    bits = np.zeros(n, dtype=bool)
    values = np.zeros(n)
    for s0 in range(0, n, chunk):
        sl = slice(s0, min(n, s0 + chunk))
        b = [x[sl] for x in blinds] if blinds else None
        bits[sl] = decide([t[sl] for t in terms], req.public[sl], b)
        if decide.last_revealed is not None:
            values[sl] = decide.last_revealed
    obs = bits.astype(np.float64) if cfg.reveal == "sign" else values
    coll = None
    if cfg.colluding:
        coll = np.sum(np.stack(noise[1 : 1 + cfg.colluding]), axis=0).reshape(runs, k)  # registries 2..q+1
    return Observed(obs.reshape(runs, k), coll)


def accept_model(setup: Setup, threat: ThreatModel) -> Any:
    """p(a) of the accept bit as the observer of ``threat`` sees it (its known noise folded into a)."""
    cfg = setup.cfg
    if setup.penalty is not None:
        assert setup.theta is not None
        sigma = float(setup.penalty.sigma(setup.model, setup.theta, setup.theta_star)[0])
        s = sigma * math.sqrt(threat.residual_parties) * cfg.noise_scale
        k = threat.residual_shape
        model: Any = PenaltyAcceptance(s) if k == 1.0 else ResidualPenaltyAcceptance(s, k)
    else:
        model = MetropolisAcceptance.for_threat(threat)
    return model


def statistic(setup: Setup, obs: Observed, a0: float, a1: float) -> F64 | None:
    """Per-run log-likelihood ratio log p_{D'}(obs) − log p_D(obs) where the laws are known, else None."""
    cfg = setup.cfg
    if cfg.reveal != "sign":
        return None
    threat = ThreatModel(cfg.m, cfg.colluding)
    pm = accept_model(setup, threat)
    gamma = setup.lazy.gamma if setup.lazy is not None else 1.0
    shift = obs.colluders if obs.colluders is not None else np.zeros_like(obs.value)
    if cfg.noise_scale != 1.0 and setup.penalty is None:
        return None  # the bug changes the law: fall back to threshold tests on the bits
    flat = shift.ravel()
    p0 = np.clip(gamma * pm.accept_prob(a0 + flat), 1e-300, 1.0)
    p1 = np.clip(gamma * pm.accept_prob(a1 + flat), 1e-300, 1.0)
    bits = obs.value.ravel() > 0.5
    with np.errstate(divide="ignore"):
        llr = np.where(bits, np.log(p1) - np.log(p0), np.log1p(-np.minimum(p1, 1 - 1e-16)) - np.log1p(-p0))
    return np.asarray(llr.reshape(obs.value.shape).sum(axis=1), dtype=np.float64)


def test_points(setup: Setup, o0: Observed, o1: Observed, a0: float, a1: float) -> list[AuditPoint]:
    cfg = setup.cfg
    s0, s1 = statistic(setup, o0, a0, a1), statistic(setup, o1, a0, a1)
    if s0 is not None and s1 is not None:
        return statistic_points(s0, s1, name="LLR")
    if cfg.steps == 1 and cfg.reveal == "sign" and cfg.colluding == 0:
        return threshold_points(o0.value[:, 0], o1.value[:, 0], name="bit")
    v0, v1 = o0.value.sum(axis=1), o1.value.sum(axis=1)
    if o0.colluders is not None and o1.colluders is not None:  # the colluders subtract their own noise
        v0, v1 = v0 - o0.colluders.sum(axis=1), v1 - o1.colluders.sum(axis=1)
    name = f"{cfg.reveal} (summed over {cfg.steps} steps)" if cfg.steps > 1 else cfg.reveal
    return threshold_points(v0, v1, name=name)


# ---- the claim ---------------------------------------------------------------------------------------------


def claim_of(setup: Setup) -> tuple[TradeOff | None, float | None, str, list[PrivacyEvent]]:
    """What registry 1 would charge for K decisions of this session, as a trade-off curve and ε(δ)."""
    from parties.analyses import Unaccountable
    from parties.registry import get_analysis

    cfg = setup.cfg
    view = coalition_view(cfg.reveal, cfg.m, cfg.threshold, cfg.colluding)
    try:
        events = get_analysis(cfg.model_name).privacy_events(  # type: ignore[attr-defined]
            setup.session_params, cfg.reveal, view, cfg.steps
        )
    except Unaccountable as exc:
        return None, None, f"no finite claim: {exc}", []
    comp = compose_events(events)
    eps = comp.eps_at(cfg.delta)
    if comp.mu is not None:
        return GaussianTradeOff(comp.mu), eps, f"{comp.mu:.6g}-GDP (the ledger's events)", events
    top = min(700.0, max(30.0, 1.5 * eps))
    grid = np.linspace(0.0, top, 1201)
    curve = EnvelopeTradeOff(tuple(grid), tuple(np.clip(comp.delta_at_many(grid), 0, 1)), name="claimed")
    return curve, eps, "the ledger's events (PLD)", events


# ---- federated ABCDP: the sparse-vector test of a whole run ------------------------------------------------


def run_svt_audit(cfg: AuditConfig, out_dir: Path) -> dict[str, Any]:
    """One c = 1 federated ABCDP run per sample: K public candidates whose distances sit at the threshold
    under D and move by the largest shift one record allows under D' (registry 1's record replaced by the
    1-d canary farthest from it in the feature map); the observation is the index of the first accept.
    The bulk runs use the SVT's specification with the parties' own noise shares
    (``federated.reference_decisions``: the protocol's decisions equal it, tested in
    ``tests/network/test_federated_abcdp.py``); ``protocol_runs`` go through the SVT protocol itself."""
    from mechanisms.abcdp.federated import FederatedSvtPlan, party_feature_sum
    from mechanisms.abcdp.federated_run import run_federated_abcdp
    from mechanisms.privacy import EpsDeltaTradeOff

    t0 = time.perf_counter()
    p = cfg.params
    m, per = cfg.m, cfg.records
    n_cand = int(p.get("candidates", 10))
    plan = FederatedSvtPlan(
        eps_abc=float(p.get("eps_abc", 0.1)),
        eps_total=float(p["eps_total"]),
        c=1,
        resample=False,
        n_records=m * per,
        n_features=int(p.get("n_features", 8)),
        bandwidth=float(p.get("bandwidth", 1.0)),
        dim=1,
        map_seed=cfg.seed,
        noise_shares=str(p.get("noise_shares", "robust")),
    )
    rng = np.random.default_rng(cfg.data_seed)
    shards = [rng.normal(0.0, 1.0, (per, 1)) for _ in range(m)]
    grid = np.linspace(-8.0, 8.0, 1601)[:, None]
    feats = plan.rff().features(grid)
    phi0 = np.asarray(plan.rff().features(shards[0][:1]), dtype=np.float64)[0]
    canary = float(grid[int(np.argmax(np.linalg.norm(feats - phi0, axis=1))), 0])
    shards1 = [s.copy() for s in shards]
    shards1[0][0, 0] = canary
    mu0: F64 = np.sum([party_feature_sum(plan, s) for s in shards], axis=0) / plan.n_records
    mu1: F64 = np.sum([party_feature_sum(plan, s) for s in shards1], axis=0) / plan.n_records
    u = (mu1 - mu0) / np.linalg.norm(mu1 - mu0)
    phibar = np.repeat((mu0 - plan.eps_abc * u)[None, :], n_cand, axis=0)  # rho(D) = eps_abc; D' larger

    def propose(k: int) -> tuple[F64, F64]:
        return np.zeros((k, 1)), phibar[:k]

    # TESTING ONLY (noise_scale != 1): the registries' Laplace scale multiplied, the claim unchanged
    import dataclasses

    run_plan = dataclasses.replace(plan, eps_total=plan.eps_total / cfg.noise_scale)

    def first_accepts(data: list[F64], runs: int, backend: str) -> F64:
        out = np.empty(runs)
        for i in range(runs):
            rngs = {j: SecureRandom.from_os() for j in range(1, m + 1)}
            res = run_federated_abcdp(
                run_plan,
                data,
                propose,
                m,
                n_cand,
                np.random.default_rng(i),
                rngs,
                max_candidates=n_cand,
                backend=backend,  # type: ignore[arg-type]
                adaptive_batch=False,
            )
            hits = np.flatnonzero(res.decisions)
            out[i] = -(hits[0] if hits.size else n_cand)  # large = an early accept = D
        return out

    eps = plan.eps_total
    claim = EpsDeltaTradeOff(eps, 0.0)
    s0, s1 = first_accepts(shards, cfg.runs, "plaintext"), first_accepts(shards1, cfg.runs, "plaintext")
    # a late first accept suggests D' (its distances are larger): the statistic "large = D'" is the index
    name = "index of the first accept"
    res = audit(statistic_points(-s0, -s1, name=name), claim, eps, cfg.delta, cfg.confidence)
    results = [("specification", res)]
    doc: dict[str, Any] = {
        "audit": cfg.name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": str(cfg.source),
        "mechanism": {
            "kind": "abcdp",
            "reveal": "svt",
            "plan": plan.to_params(),
            "m": m,
            "candidates": n_cand,
        },
        "threat": "outside observer (the coordinator): it sees the SVT output bits",
        "neighbours": {
            "registry": 1,
            "record_in_D": float(shards[0][0, 0]),
            "record_in_D_prime": canary,
            "distance_shift": float(np.linalg.norm(mu1 - mu0)),
            "sensitivity_bound": plan.sensitivity,
        },
        "audit_sampling": {"seed": cfg.seed, "data_seed": cfg.data_seed, "noise": "OS CSPRNG (SecureRandom)"},
        "claim": {
            "text": f"eps_total = {eps:g} for the whole run (pure DP)",
            "eps_at_delta": eps,
            "delta": cfg.delta,
        },
        "in_memory": _result_doc(res, cfg.runs),
    }
    if cfg.protocol_runs:
        p0 = first_accepts(shards, cfg.protocol_runs, "mpc")
        p1 = first_accepts(shards1, cfg.protocol_runs, "mpc")
        pres = audit(statistic_points(-p0, -p1, name=name), claim, eps, cfg.delta, cfg.confidence)
        doc["protocol"] = _result_doc(pres, cfg.protocol_runs)
        results.append(("SVT protocol", pres))
    doc["verdict"] = "; ".join(f"{where}: {r.verdict}" for where, r in results)
    doc["violated"] = any(r.violated is not None for _, r in results)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{cfg.name}.json").write_text(json.dumps(doc, indent=1, default=float) + "\n")
    plot(results, claim, out_dir / f"{cfg.name}.png", cfg)
    return doc


# ---- the whole audit ---------------------------------------------------------------------------------------


def run_audit(cfg: AuditConfig, out_dir: Path, daemons: bool = True) -> dict[str, Any]:
    if cfg.kind == "abcdp":
        return run_svt_audit(cfg, out_dir)
    t0 = time.perf_counter()
    setup = build(cfg)
    b0, b1 = setup.log_bounds
    a0, a1 = setup.log_r(setup.data_d, b0), setup.log_r(setup.data_d1, b1)
    claim, claimed_eps, claim_text, _ = claim_of(setup)
    o0 = run_in_memory(setup, setup.data_d, b0, cfg.runs)
    o1 = run_in_memory(setup, setup.data_d1, b1, cfg.runs)
    res = audit(test_points(setup, o0, o1, a0, a1), claim, claimed_eps, cfg.delta, cfg.confidence)
    doc: dict[str, Any] = {
        "audit": cfg.name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": str(cfg.source),
        "mechanism": {
            "model": cfg.model_name,
            "kind": cfg.kind,
            "reveal": cfg.reveal,
            "params": cfg.params,
            "m": cfg.m,
            "threshold": cfg.threshold,
            "steps": cfg.steps,
            "noise_scale": cfg.noise_scale,
        },
        "threat": coalition_view(cfg.reveal, cfg.m, cfg.threshold, cfg.colluding).note,
        "neighbours": {
            "registry": 1,
            "record_in_D": setup.replaced,
            "record_in_D_prime": setup.canary,
            "theta": None if setup.theta is None else setup.theta[0].tolist(),
            "theta_star": setup.theta_star[0].tolist(),
            "log_r_D": a0,
            "log_r_D_prime": a1,
        },
        "audit_sampling": {"seed": cfg.seed, "data_seed": cfg.data_seed, "noise": "OS CSPRNG (SecureRandom)"},
        "claim": {"text": claim_text, "eps_at_delta": claimed_eps, "delta": cfg.delta},
        "in_memory": _result_doc(res, cfg.runs),
    }
    results = [("in memory", res)]
    if daemons and cfg.daemon_runs and cfg.colluding == 0:
        d0 = run_on_daemons(setup, setup.data_d, cfg.daemon_runs)
        d1 = run_on_daemons(setup, setup.data_d1, cfg.daemon_runs)
        dres = audit(test_points(setup, d0, d1, a0, a1), claim, claimed_eps, cfg.delta, cfg.confidence)
        doc["daemons"] = _result_doc(dres, cfg.daemon_runs)
        results.append(("daemons", dres))
    doc["verdict"] = "; ".join(f"{where}: {r.verdict}" for where, r in results)
    doc["violated"] = any(r.violated is not None for _, r in results)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{cfg.name}.json").write_text(json.dumps(doc, indent=1, default=float) + "\n")
    plot(results, claim, out_dir / f"{cfg.name}.png", cfg)
    return doc


def _result_doc(res: AuditResult, runs: int) -> dict[str, Any]:
    return {
        "runs_per_dataset": runs,
        "confidence": res.confidence,
        "tests": len(res.points),
        "empirical_mu_lower": res.mu_lower,
        "empirical_eps_lower": res.eps_lower,
        "violated_by": None if res.violated is None else res.violated.test,
        "margin": res.margin if math.isfinite(res.margin) else None,
        "verdict": res.verdict,
    }


def run_on_daemons(setup: Setup, data: list[dict[str, F64]], runs: int) -> Observed:
    """The same decision ``runs`` × K times through real party daemons (a local consortium with mutual TLS
    in a temporary folder, removed afterwards with its certificates and keys)."""
    from coordinator.api import BlockingCoordinator
    from simulations.launcher import LocalConsortium

    cfg = setup.cfg
    n = runs * cfg.steps
    modes = (cfg.reveal,)
    bits: list[F64] = []
    with LocalConsortium.start(
        cfg.m,
        data,
        models=(cfg.model_name,),
        modes=modes,
        data_model=cfg.model_name,
        data_model_args=cfg.model_args or None,
        startup_timeout_s=60.0,
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=120.0) as coord:
            s = coord.open_session(
                reveal_mode=cfg.reveal,
                model=cfg.model_name,
                model_params=setup.session_params,
                t=cfg.threshold,
            )
            for s0 in range(0, n, 1000):
                k = min(1000, n - s0)
                req = setup.request(k)
                out = s.evaluate(dict(req.to_inputs()), k)
                val = out.accept.astype(np.float64) if cfg.reveal == "sign" else np.asarray(out.revealed)
                bits.append(val)
            s.close("audit done")
    return Observed(np.concatenate(bits).reshape(runs, cfg.steps), None)


def plot(
    results: list[tuple[str, AuditResult]], claim: TradeOff | None, path: Path, cfg: AuditConfig
) -> None:
    from matplotlib.figure import Figure

    from mechanisms.privacy import plot_tradeoffs

    fig = Figure(figsize=(5.4 * len(results), 5.2))
    for i, (where, res) in enumerate(results):
        ax = fig.add_subplot(1, len(results), i + 1)
        curves: dict[str, TradeOff] = {"empirical (hull of upper bounds)": res.empirical_curve()}
        if claim is not None:
            curves["claimed (ledger)"] = claim
        plot_tradeoffs(curves, ax=ax, title=f"{cfg.name}: {where}, {res.points[0].n0} runs per dataset")
        a = np.array([p.alpha for p in res.points])
        b = np.array([p.beta for p in res.points])
        ax.errorbar(
            a,
            b,
            xerr=[np.zeros_like(a), np.array(res.alpha_hi) - a],
            yerr=[np.zeros_like(b), np.array(res.beta_hi) - b],
            fmt="o",
            ms=2.5,
            lw=0.6,
            color="black",
            label=f"tests, with {res.confidence:g} upper bounds",
        )
        ax.legend(fontsize="x-small", frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_audit(args.audit)
        doc = run_audit(cfg, args.out, daemons=not args.no_daemons)
    except AuditConfigError as exc:
        print(f"confar privacy audit: {exc}", file=sys.stderr)
        return 2
    print(doc["verdict"])
    print(f"details: {args.out / (cfg.name + '.json')}, plot: {args.out / (cfg.name + '.png')}")
    return 1 if doc["violated"] else 0
