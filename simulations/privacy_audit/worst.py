"""Membership-inference audit of a run charged at its worst record (issue 35 item 2: ``[budget] per_run =
"worst-record"``, ``mechanisms.privacy.worst_record``): does the run's stated μ hold for the record the run
moves most?

The run: ``steps`` decisions of an independence sampler on the pooled synthetic records (the proposal
N(θ̂, 1.2² Â⁻¹) of the Laplace approximation, an exact MH chain; public and fixed before any output, as a
coordinator's proposals are), at the session's fixed-sd penalty, in the ``sum`` reveal: the observer sees
each decision's Σ_j ℓ_j + Σ_j N(0, sd²) (the coordinator, q = 0; q colluders subtract their own noise).
Registry 1 holds D or D' = D plus the canary: the allowed record (a dense grid of the covariate box, clipped
into the ellipsoid as the model clips records, its boundary, both outcomes) whose log-likelihood changes
Σ_t Δℓ_t(x)² most over the run, with the real log-likelihood. Each run draws every registry's noise from a
fresh OS-seeded CSPRNG; the test is the Neyman-Pearson one for the two Gaussian laws (the log-likelihood
ratio Σ_t Δℓ_t(canary) (y_t − E_D y_t)), Clopper-Pearson-bounded (``mechanisms.privacy.audit``).

The claim: the events registry 1's ledger charges for the run as one batch of a fresh run state
(``ModelAnalysis.worst_record_events``, the daemon's code path; add-remove, the coalition's view), a
μ-GDP event. ``[mechanism] charge = "average-record"`` (TESTING ONLY) claims instead
μ² = mean over the same records of z(x)ᵀ G z(x)/s²: the average record's charge, which the canary beats.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from hss.randomness import SecureRandom
from mechanisms import noise
from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.privacy import GaussianEvent, coalition_view
from mechanisms.privacy.audit import audit, statistic_points
from mechanisms.privacy.conversions import gdp_eps
from mechanisms.privacy.tradeoff import GaussianTradeOff
from mechanisms.privacy.worst_record import linear_structure
from mechanisms.samplers.requests import step_sensitivity
from simulations.privacy_audit.config import AuditConfig, AuditConfigError
from simulations.privacy_audit.report import finish, header, result_doc, sampling
from simulations.privacy_audit.setup import synthetic
from simulations.worst_record import Run, allowed_records, independence_steps


def _records(model: Model) -> dict[str, F64]:
    """The dense set of allowed records (``allowed_records``), both outcomes."""
    z = allowed_records(model, 61)
    cols = {c: np.concatenate([z[:, k + 1]] * 2) for k, c in enumerate(model.covariates)}  # type: ignore[attr-defined]
    cols[model.outcome] = np.r_[np.zeros(len(z)), np.ones(len(z))]  # type: ignore[attr-defined]
    return cols


def canary_of(model: Model, run: Run) -> tuple[dict[str, float], F64]:
    """The allowed record whose log-likelihood the run's steps move most (Σ_t Δℓ_t² largest), and its
    Δℓ_t per step."""
    recs = _records(model)
    dl = model.record_log_likelihood(recs, run.theta_star) - model.record_log_likelihood(recs, run.theta)
    i = int(np.argmax(np.sum(dl**2, axis=0)))
    return {k: float(v[i]) for k, v in recs.items()}, np.asarray(dl[:, i], dtype=np.float64)


def claimed_mu(cfg: AuditConfig, model: Model, run: Run) -> tuple[float, str]:
    """Registry 1's claim for the run (module docstring): its ledger's event, or the average record's."""
    from parties.registry import get_analysis

    view = coalition_view(cfg.reveal, cfg.m, cfg.threshold, cfg.colluding)
    params = {"model_args": cfg.model_args, "kind": "mh", **cfg.params}
    analysis: Any = get_analysis(cfg.model_name, params)
    n = len(run.theta)
    batch = {"theta": run.theta, "theta_star": run.theta_star, "public": np.zeros(n)}
    got = analysis.worst_record_events(
        cfg.reveal, view, n, batch, "add-remove", None, lambda fingerprint: None
    )
    if got is None:
        raise AuditConfigError(f"{cfg.source}: the session is not charged per run (no worst-record charge)")
    (event,), _, _ = got
    assert isinstance(event, GaussianEvent)
    if cfg.charge == "worst-record":
        return event.mu, f"{event.mu:.6g}-GDP (the ledger's per-run event: worst record over the run)"
    st = linear_structure(model)
    assert st is not None
    z = allowed_records(model, 61)
    v = st.directions(run.theta, run.theta_star)
    sd = float(cfg.params["penalty"]["sd"])
    s2 = sd**2 * view.threat.residual_parties
    mu = float(np.sqrt(np.mean(np.sum((z @ v.T) ** 2, axis=1)) / s2))
    return mu, f"{mu:.6g}-GDP (TESTING ONLY: the AVERAGE record's charge, a broken accountant)"


def run_worst_record_audit(cfg: AuditConfig, out_dir: Path) -> dict[str, Any]:
    """Kind ``worst-record``: the audit of the module docstring, reported as every audit is."""
    t0 = time.perf_counter()
    try:
        model = load_model(cfg.model_name, cfg.model_args)
    except (TypeError, ValueError) as exc:
        raise AuditConfigError(f"{cfg.source}: model.params: {exc}") from exc
    from parties.analyses import AnalysisError
    from parties.registry import get_analysis

    params = {"model_args": cfg.model_args, "kind": "mh", **cfg.params}
    try:
        get_analysis(cfg.model_name, params)
    except AnalysisError as exc:
        raise AuditConfigError(f"{cfg.source}: mechanism.params: {exc}") from exc
    data = [model.check_data(d) for d in synthetic(cfg, model)]
    pooled = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
    cap = float(cfg.params["penalty"]["max_sensitivity"])
    run = independence_steps(model, pooled, cfg.steps, np.random.default_rng(cfg.seed), cap=cap)
    if len(run.theta) < 2:
        raise AuditConfigError(f"{cfg.source}: max_sensitivity = {cap:g} leaves fewer than 2 decisions asked")
    mu_claim, text = claimed_mu(cfg, model, run)
    canary, shift = canary_of(model, run)
    sd = float(cfg.params["penalty"]["sd"]) * cfg.noise_scale
    r = cfg.m - cfg.colluding  # the registries whose noise the observer does not know
    keys = [SecureRandom.from_os() for _ in range(r)]
    k = len(shift)
    stat = {}
    for world in (0, 1):
        total = np.zeros((cfg.runs, k))
        for key in keys:  # each registry's own noise on each decision's term
            total += sd * noise.normal(key, 1.0, cfg.runs * k).reshape(cfg.runs, k)
        observed = total + (shift if world else 0.0)  # minus the known Σ_j ℓ_j(D): what the canary adds
        stat[world] = observed @ shift
    points = statistic_points(stat[0], stat[1], name="run LLR")
    res = audit(points, GaussianTradeOff(mu_claim), gdp_eps(mu_claim, cfg.delta), cfg.delta, cfg.confidence)
    mu_canary = float(np.linalg.norm(shift)) / (sd * np.sqrt(r))
    s_res = float(cfg.params["penalty"]["sd"]) * float(np.sqrt(r))  # the claim's noise (noise_scale apart)
    per_decision = float(np.linalg.norm(step_sensitivity(model, run.theta, run.theta_star, "add-remove")))
    view = coalition_view(cfg.reveal, cfg.m, cfg.threshold, cfg.colluding)
    doc: dict[str, Any] = {
        **header(cfg),
        "mechanism": {
            "model": cfg.model_name,
            "kind": cfg.kind,
            "reveal": cfg.reveal,
            "params": cfg.params,
            "m": cfg.m,
            "decisions": k,
            "cap": cap,
            "charge": cfg.charge,
            "noise_scale": cfg.noise_scale,
        },
        "threat": view.note,
        "neighbours": {
            "registry": 1,
            "relation": "add-remove: D' is D with the canary added to registry 1",
            "record_in_D_prime": canary,
            "canary_mu": mu_canary,
        },
        "audit_sampling": sampling(cfg),
        "claim": {
            "text": text,
            "mu": mu_claim,
            "per_decision_mu": per_decision / s_res,  # the same decisions charged per decision
            "eps_at_delta": gdp_eps(mu_claim, cfg.delta),
            "delta": cfg.delta,
        },
        "in_memory": result_doc(res, cfg.runs),
    }
    return finish(doc, [("in memory", res)], GaussianTradeOff(mu_claim), cfg, out_dir, t0)
