"""The audit as a whole: build the neighbours, run the decision on each, test and report; the entry point of
``confar privacy audit`` (exit codes in the package docstring)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from mechanisms.privacy import coalition_view
from mechanisms.privacy.audit import audit
from simulations.privacy_audit.claim import claim_of
from simulations.privacy_audit.config import AuditConfig, AuditConfigError, load_audit
from simulations.privacy_audit.observe import run_in_memory, run_on_daemons, test_points
from simulations.privacy_audit.report import finish, header, result_doc, sampling
from simulations.privacy_audit.setup import build
from simulations.privacy_audit.svt import run_svt_audit

HELP = "membership-inference audit of a registry's stated privacy guarantee on the real decision protocol"


def run_audit(cfg: AuditConfig, out_dir: Path, daemons: bool = True) -> dict[str, Any]:
    """The audit of ``cfg`` (the SVT audit for kind ``abcdp``, the release audit for ``warm-start``); writes
    ``NAME.json`` and ``NAME.png``."""
    if cfg.kind == "abcdp":
        return run_svt_audit(cfg, out_dir)
    if cfg.kind == "warm-start":
        # imported here: ``python -m simulations.privacy_audit.release`` runs that module as __main__
        from simulations.privacy_audit.release import run_release_audit

        return run_release_audit(cfg, out_dir)
    if cfg.kind == "worst-record":
        from simulations.privacy_audit.worst import run_worst_record_audit

        return run_worst_record_audit(cfg, out_dir)
    t0 = time.perf_counter()
    setup = build(cfg)
    b0, b1 = setup.log_bounds
    a0, a1 = setup.log_r(setup.data_d, b0), setup.log_r(setup.data_d1, b1)
    c = claim_of(setup)
    claim, claimed_eps = c.curve, c.eps
    o0 = run_in_memory(setup, setup.data_d, b0, cfg.runs)
    o1 = run_in_memory(setup, setup.data_d1, b1, cfg.runs)
    res = audit(test_points(setup, o0, o1, a0, a1), claim, claimed_eps, cfg.delta, cfg.confidence)
    doc: dict[str, Any] = {
        **header(cfg),
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
        "audit_sampling": sampling(cfg),
        "claim": c.doc(cfg.delta),
        "in_memory": result_doc(res, cfg.runs),
    }
    results = [("in memory", res)]
    if daemons and cfg.daemon_runs and cfg.colluding == 0:
        d0 = run_on_daemons(setup, setup.data_d, cfg.daemon_runs)
        d1 = run_on_daemons(setup, setup.data_d1, cfg.daemon_runs)
        dres = audit(test_points(setup, d0, d1, a0, a1), claim, claimed_eps, cfg.delta, cfg.confidence)
        doc["daemons"] = result_doc(dres, cfg.daemon_runs)
        results.append(("daemons", dres))
    return finish(doc, results, claim, cfg, out_dir, t0)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_audit(args.audit)
        doc = run_audit(cfg, args.out, daemons=not args.no_daemons)
    except AuditConfigError as exc:
        print(f"confar privacy audit: {exc}", file=sys.stderr)
        return 2
    print(f"claim: {doc['claim']['text']}")
    print(doc["verdict"])
    print(f"details: {args.out / (cfg.name + '.json')}, plot: {args.out / (cfg.name + '.png')}")
    return 1 if doc["violated"] else 0
