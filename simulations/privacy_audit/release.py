"""Membership-inference audit of the warm start's releases (issue 23: the warm start's noisy sums, as the
registries compute them): does a registry's stated μ for one moments, score or gradient release hold?

Registry 1 holds D or D' = D plus a canary, the record the schema allows whose per-record vector is longest
(a corner of the covariate box; for a score, the corner and outcome with the largest clipped score). Each
run, every registry releases its sum with its own noise exactly as a daemon does
(``mechanisms.warmstart.record_vectors`` and ``noisy_release``, noise from a fresh OS-seeded CSPRNG), and
the observer sees the total (the ``sum`` reveal: the coordinator, q = 0; q colluding registries subtract
their own noise, which leaves m - q shares). The test is the Neyman-Pearson one for the two Gaussian laws
(the log-likelihood ratio, a whitened projection on the canary's vector), Clopper-Pearson-bounded
(``mechanisms.privacy.audit``), against the claim G_μ with μ = ``release_mu`` (add-remove: the canary in
or out). A release whose noise is scaled down (``under_noise``) while claiming the nominal μ must be flagged.

    python -m simulations.privacy_audit.release    # the moments and score releases, and an under-noised one

As ``confar privacy audit`` kind ``warm-start`` (:func:`run_release_audit`; AUDIT.toml in
:mod:`simulations.privacy_audit.config`, examples in ``examples/audit/warm-start-*.toml``), the release's
noise is what ``confar run`` sets for the file's ``[warm_start]`` table (``coordinator.warm_start``).
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.warm_start import warm_start_plan
from hss.randomness import SecureRandom
from mechanisms import noise
from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from mechanisms.privacy import coalition_view
from mechanisms.privacy.audit import AuditResult, audit, statistic_points
from mechanisms.privacy.conversions import gdp_eps
from mechanisms.privacy.tradeoff import GaussianTradeOff
from mechanisms.warmstart import (
    Statistics,
    block_size,
    noisy_release,
    record_vectors,
    release_mu,
)
from simulations.privacy_audit.config import AuditConfig, AuditConfigError
from simulations.privacy_audit.report import finish, header, result_doc, sampling
from simulations.privacy_audit.setup import synthetic


@dataclass(frozen=True)
class ReleaseAudit:
    what: str
    mu_claimed: float
    result: AuditResult

    def line(self) -> str:
        return f"{self.what}: claimed mu = {self.mu_claimed:.4g}; {self.result.verdict}"


def canary(model: Model, stats: Statistics, theta: F64 | None) -> dict[str, F64]:
    """The allowed record with the longest per-record vector for ``stats`` (box corners x outcomes)."""
    stats = stats.at(model, theta)
    covs = list(model.covariates)  # type: ignore[attr-defined]
    bound = float(model.x_bound)  # type: ignore[attr-defined]
    best: tuple[float, dict[str, F64]] | None = None
    for corner in itertools.product((-bound, bound), repeat=len(covs)):
        for y in (0.0, 1.0):
            rec = {c: np.array([v]) for c, v in zip(covs, corner, strict=True)}
            rec[model.outcome] = np.array([y])  # type: ignore[attr-defined]
            rec = model.check_data(rec)
            size = float(np.linalg.norm(record_vectors(stats, model, rec, theta)))
            if best is None or size > best[0]:
                best = (size, rec)
    assert best is not None
    return best[1]


def audit_release(
    model: Model,
    stats: Statistics,
    data: list[dict[str, F64]],
    theta: F64 | None,
    *,
    runs: int = 20000,
    colluding: int = 0,
    under_noise: float = 1.0,
    confidence: float = 0.95,
    delta: float = 1e-5,
) -> ReleaseAudit:
    """Audit one release of ``len(data)`` registries against its claimed μ (add-remove, ``colluding``
    registries knowing their own noise); ``under_noise`` < 1 scales every registry's noise down while the
    claim stays at the nominal μ (a broken registry)."""
    m = len(data)
    r = m - colluding
    mu = release_mu(stats, model, r, "add-remove")
    stats = stats.at(model, theta)  # as the registries make it at θ (the clip at the model's bound there)
    k = block_size(stats.what, model)
    sums = [record_vectors(stats, model, model.check_data(d), theta) for d in data]
    extra = record_vectors(stats, model, canary(model, stats, theta), theta)
    noisy = Statistics(stats.what, stats.sd * under_noise, stats.sd2 * under_noise, stats.scale, stats.clip)
    keys = [SecureRandom.from_os() for _ in range(m)]

    def draw(j: int) -> Callable[[int], F64]:
        return lambda size: noise.normal(keys[j], 1.0, size)

    normals = [draw(j) for j in range(m)]
    scales = np.r_[np.full(k, stats.sd), np.full(extra.size - k, stats.sd2)]  # the claimed noise per share
    weight = extra / (r * scales**2)  # the LLR's direction for the residual noise r x scales^2
    weight[scales == 0] = 0.0
    stat = {0: np.empty(runs), 1: np.empty(runs)}
    for world in (0, 1):
        base = sums[0] + (extra if world else 0.0)
        for i in range(runs):
            released = noisy_release(noisy, base, k, normals[0]) * stats.scale
            for j in range(1, m):  # registries 2..q+1 collude: their noise is known and taken out
                known = j <= colluding
                released = released + (
                    sums[j] if known else noisy_release(noisy, sums[j], k, normals[j]) * stats.scale
                )
            stat[world][i] = float(weight @ (released - sum(sums)))
    points = statistic_points(stat[0], stat[1], name=f"{stats.what} LLR")
    result = audit(points, GaussianTradeOff(mu), gdp_eps(mu, delta), delta, confidence)
    return ReleaseAudit(stats.what, mu, result)


def release_of(cfg: AuditConfig, model: Model) -> tuple[Statistics, F64 | None]:
    """The audited release as ``confar run`` would make it for ``cfg.warm_start`` on ``cfg.m`` registries
    (``warm_start_plan``, clipped for the model), and the public θ it is evaluated at (None for moments)."""
    assert cfg.warm_start is not None and cfg.release is not None
    plan = warm_start_plan(cfg.warm_start, model, cfg.m).clipped_for(model)
    stats = {"moments": plan.moments, "score": plan.score, "gradient": plan.gradient}[cfg.release]
    assert stats is not None  # the config checked ellipsoid and steps
    if cfg.release == "moments":
        return stats, None
    theta = np.zeros(model.d) if cfg.theta is None else cfg.theta
    if theta.shape != (model.d,):
        raise AuditConfigError(f"{cfg.source}: mechanism.theta: needs {model.d} numbers, got {theta.size}")
    return stats, theta


def run_release_audit(cfg: AuditConfig, out_dir: Path) -> dict[str, Any]:
    """Kind ``warm-start``: :func:`audit_release` of the configured release, reported as every audit is
    (``NAME.json``, ``NAME.png``, the verdict)."""
    t0 = time.perf_counter()
    try:
        model = load_model(cfg.model_name, cfg.model_args)
    except (TypeError, ValueError) as exc:
        raise AuditConfigError(f"{cfg.source}: model.params: {exc}") from exc
    stats, theta = release_of(cfg, model)
    data = synthetic(cfg, model)
    a = audit_release(
        model,
        stats,
        data,
        theta,
        runs=cfg.runs,
        colluding=cfg.colluding,
        under_noise=cfg.noise_scale,
        confidence=cfg.confidence,
        delta=cfg.delta,
    )
    assert cfg.warm_start is not None
    eps = gdp_eps(a.mu_claimed, cfg.delta)
    view = coalition_view(cfg.reveal, cfg.m, cfg.threshold, cfg.colluding)
    doc: dict[str, Any] = {
        **header(cfg),
        "mechanism": {
            "model": cfg.model_name,
            "kind": cfg.kind,
            "reveal": cfg.reveal,
            "release": cfg.release,
            "statistics": stats.to_params(),
            "warm_start": {k: v for k, v in vars(cfg.warm_start).items() if v is not None},
            "m": cfg.m,
            "noise_scale": cfg.noise_scale,
        },
        "threat": view.note,
        "neighbours": {
            "registry": 1,
            "relation": "add-remove: D' is D with the canary added to registry 1",
            "record_in_D_prime": {k: float(v[0]) for k, v in canary(model, stats, theta).items()},
            "theta": None if theta is None else theta.tolist(),
        },
        "audit_sampling": sampling(cfg),
        "claim": {
            "text": f"{a.mu_claimed:.6g}-GDP (release_mu: this release as registry 1 charges it)",
            "eps_at_delta": eps,
            "delta": cfg.delta,
        },
        "in_memory": result_doc(a.result, cfg.runs),
    }
    return finish(doc, [("in memory", a.result)], GaussianTradeOff(a.mu_claimed), cfg, out_dir, t0)


def main(argv: list[str] | None = None) -> int:
    del argv
    model = load_model("bayes-logistic", {"p": 2, "x_bound": 3.0})
    assert isinstance(model, BayesLogistic)
    data = synthetic_registries(np.random.default_rng(7), model, sizes=(40, 30, 50))
    theta = np.array([-0.5, 0.3, -0.2])
    clip = float(model.score_norm_bound())  # type: ignore[attr-defined]
    moments = Statistics("moments", 8.0, 30.0, 1.0)
    score = Statistics("score", 2.0 * clip, 2.0 * clip**2, 1.0, clip=clip)
    bad = 0
    for name, stats, th, under in (
        ("moments", moments, None, 1.0),
        ("score", score, theta, 1.0),
        ("score, noise / 4 (broken)", score, theta, 0.25),
    ):
        a = audit_release(model, stats, data, th, runs=20000, under_noise=under)
        print(f"{name}: {a.line()}")
        bad += a.result.violated is not None
    return 1 if bad != 1 else 0  # exactly the broken one flagged


if __name__ == "__main__":
    sys.exit(main())
