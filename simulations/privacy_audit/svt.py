"""The federated ABCDP audit (kind ``abcdp``): the sparse-vector test of a whole c = 1 run, observed by the
coordinator through its output bits, against the run's pure-DP claim ε_total."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hss.randomness import SecureRandom
from mechanisms.abcdp.federated import FederatedSvtPlan, party_feature_sum
from mechanisms.privacy import EpsDeltaTradeOff
from mechanisms.privacy.audit import AuditResult, audit, statistic_points
from simulations.privacy_audit.config import F64, AuditConfig
from simulations.privacy_audit.report import finish, header, result_doc, sampling

STATISTIC = "index of the first accept"


def svt_plan(cfg: AuditConfig) -> tuple[FederatedSvtPlan, int]:
    """The audited run's plan (c = 1, no resampling, 1-d records) and its number of candidates."""
    p = cfg.params
    plan = FederatedSvtPlan(
        eps_abc=float(p.get("eps_abc", 0.1)),
        eps_total=float(p["eps_total"]),
        c=1,
        resample=False,
        n_records=cfg.m * cfg.records,
        n_features=int(p.get("n_features", 8)),
        bandwidth=float(p.get("bandwidth", 1.0)),
        dim=1,
        map_seed=cfg.seed,
        noise_shares=str(p.get("noise_shares", "robust")),
    )
    return plan, int(p.get("candidates", 10))


@dataclass(frozen=True)
class SvtNeighbours:
    """D (``shards``) and D' (``shards1``: registry 1's first record replaced by ``canary``), with their
    mean feature vectors."""

    shards: list[F64]
    shards1: list[F64]
    canary: float
    mu0: F64
    mu1: F64


def svt_neighbours(cfg: AuditConfig, plan: FederatedSvtPlan) -> SvtNeighbours:
    """Standard-normal shards from ``data_seed``; the canary is the point of [-8, 8] farthest from registry
    1's first record in the feature map."""
    rng = np.random.default_rng(cfg.data_seed)
    shards = [rng.normal(0.0, 1.0, (cfg.records, 1)) for _ in range(cfg.m)]
    grid = np.linspace(-8.0, 8.0, 1601)[:, None]
    feats = plan.rff().features(grid)
    phi0 = np.asarray(plan.rff().features(shards[0][:1]), dtype=np.float64)[0]
    canary = float(grid[int(np.argmax(np.linalg.norm(feats - phi0, axis=1))), 0])
    shards1 = [s.copy() for s in shards]
    shards1[0][0, 0] = canary
    mu0: F64 = np.sum([party_feature_sum(plan, s) for s in shards], axis=0) / plan.n_records
    mu1: F64 = np.sum([party_feature_sum(plan, s) for s in shards1], axis=0) / plan.n_records
    return SvtNeighbours(shards, shards1, canary, mu0, mu1)


@dataclass(frozen=True)
class FixedCandidates:
    """The proposal of every run: the same public candidates, whose distance under D is exactly eps_abc."""

    phibar: F64

    def __call__(self, k: int) -> tuple[F64, F64]:
        return np.zeros((k, 1)), self.phibar[:k]


def first_accepts(
    plan: FederatedSvtPlan,
    data: list[F64],
    propose: FixedCandidates,
    n_cand: int,
    runs: int,
    backend: str,
) -> F64:
    """Minus the index of the first accept of each of ``runs`` runs (``n_cand`` where none accepts): large
    means an early accept, which suggests D."""
    from mechanisms.abcdp.federated_run import InMemoryOptions, run_abcdp_in_memory

    m = len(data)
    out = np.empty(runs)
    for i in range(runs):
        rngs = {j: SecureRandom.from_os() for j in range(1, m + 1)}
        res = run_abcdp_in_memory(
            plan,
            data,
            propose,
            m,
            n_cand,
            np.random.default_rng(i),
            rngs,
            InMemoryOptions(
                max_candidates=n_cand,
                backend=backend,  # type: ignore[arg-type]
                adaptive_batch=False,
            ),
        )
        hits = np.flatnonzero(res.decisions)
        out[i] = -(hits[0] if hits.size else n_cand)  # large = an early accept = D
    return out


def svt_doc(
    cfg: AuditConfig, plan: FederatedSvtPlan, n_cand: int, nb: SvtNeighbours, res: AuditResult
) -> dict[str, Any]:
    """The JSON document of the SVT audit before its verdict."""
    eps = plan.eps_total
    return {
        **header(cfg),
        "mechanism": {
            "kind": "abcdp",
            "reveal": "svt",
            "plan": plan.to_params(),
            "m": cfg.m,
            "candidates": n_cand,
        },
        "threat": "outside observer (the coordinator): it sees the SVT output bits",
        "neighbours": {
            "registry": 1,
            "record_in_D": float(nb.shards[0][0, 0]),
            "record_in_D_prime": nb.canary,
            "distance_shift": float(np.linalg.norm(nb.mu1 - nb.mu0)),
            "sensitivity_bound": plan.sensitivity,
        },
        "audit_sampling": sampling(cfg),
        "claim": {
            "text": f"eps_total = {eps:g} for the whole run (pure DP)",
            "eps_at_delta": eps,
            "delta": cfg.delta,
        },
        "in_memory": result_doc(res, cfg.runs),
    }


def run_svt_audit(cfg: AuditConfig, out_dir: Path) -> dict[str, Any]:
    """One c = 1 federated ABCDP run per sample: K public candidates whose distances sit at the threshold
    under D and move by the largest shift one record allows under D' (registry 1's record replaced by the
    1-d canary farthest from it in the feature map); the observation is the index of the first accept.
    The bulk runs use the SVT's specification with the parties' own noise shares
    (``candidates.reference_decisions``: the protocol's decisions equal it, tested in
    ``tests/network/test_federated_abcdp.py``); ``protocol_runs`` go through the SVT protocol itself."""
    t0 = time.perf_counter()
    plan, n_cand = svt_plan(cfg)
    nb = svt_neighbours(cfg, plan)
    u = (nb.mu1 - nb.mu0) / np.linalg.norm(nb.mu1 - nb.mu0)
    # rho(D) = eps_abc; D' larger
    propose = FixedCandidates(np.repeat((nb.mu0 - plan.eps_abc * u)[None, :], n_cand, axis=0))
    # TESTING ONLY (noise_scale != 1): the registries' Laplace scale multiplied, the claim unchanged
    run_plan = dataclasses.replace(plan, eps_total=plan.eps_total / cfg.noise_scale)
    eps = plan.eps_total
    claim = EpsDeltaTradeOff(eps, 0.0)
    s0 = first_accepts(run_plan, nb.shards, propose, n_cand, cfg.runs, "plaintext")
    s1 = first_accepts(run_plan, nb.shards1, propose, n_cand, cfg.runs, "plaintext")
    # a late first accept suggests D' (its distances are larger): the statistic "large = D'" is the index
    res = audit(statistic_points(-s0, -s1, name=STATISTIC), claim, eps, cfg.delta, cfg.confidence)
    results = [("specification", res)]
    doc = svt_doc(cfg, plan, n_cand, nb, res)
    if cfg.protocol_runs:
        p0 = first_accepts(run_plan, nb.shards, propose, n_cand, cfg.protocol_runs, "mpc")
        p1 = first_accepts(run_plan, nb.shards1, propose, n_cand, cfg.protocol_runs, "mpc")
        pres = audit(statistic_points(-p0, -p1, name=STATISTIC), claim, eps, cfg.delta, cfg.confidence)
        doc["protocol"] = result_doc(pres, cfg.protocol_runs)
        results.append(("SVT protocol", pres))
    return finish(doc, results, claim, cfg, out_dir, t0)
