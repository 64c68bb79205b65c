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
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hss.randomness import SecureRandom
from mechanisms import noise
from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
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


@dataclass(frozen=True)
class ReleaseAudit:
    what: str
    mu_claimed: float
    result: AuditResult

    def line(self) -> str:
        return f"{self.what}: claimed mu = {self.mu_claimed:.4g}; {self.result.verdict}"


def canary(model: Model, stats: Statistics, theta: F64 | None) -> dict[str, F64]:
    """The allowed record with the longest per-record vector for ``stats`` (box corners x outcomes)."""
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
