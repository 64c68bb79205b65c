"""Reporting an audit: the result of one audited observer as JSON, the shared head of the JSON document,
and the finish every audit shares (verdict, the JSON file and the trade-off plot in the output folder)."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from mechanisms.privacy import TradeOff
from mechanisms.privacy.audit import AuditResult
from simulations.privacy_audit.config import AuditConfig


def header(cfg: AuditConfig) -> dict[str, Any]:
    """The document's first keys: the audit's name, the date and the configuration file."""
    return {
        "audit": cfg.name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "config": str(cfg.source),
    }


def sampling(cfg: AuditConfig) -> dict[str, Any]:
    """Where the audit's own randomness came from (recorded in the output)."""
    return {"seed": cfg.seed, "data_seed": cfg.data_seed, "noise": "OS CSPRNG (SecureRandom)"}


def finish(
    doc: dict[str, Any],
    results: list[tuple[str, AuditResult]],
    claim: TradeOff | None,
    cfg: AuditConfig,
    out_dir: Path,
    t0: float,
) -> dict[str, Any]:
    """The verdict over every audited observer, then ``NAME.json`` and ``NAME.png`` in ``out_dir``."""
    doc["verdict"] = "; ".join(f"{where}: {r.verdict}" for where, r in results)
    doc["violated"] = any(r.violated is not None for _, r in results)
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{cfg.name}.json").write_text(json.dumps(doc, indent=1, default=float) + "\n")
    plot(results, claim, out_dir / f"{cfg.name}.png", cfg)
    return doc


def result_doc(res: AuditResult, runs: int) -> dict[str, Any]:
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
            who = "ledger, Renyi accountant" if cfg.accountant == "renyi" else "ledger"
            curves[f"claimed ({who})"] = claim
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
