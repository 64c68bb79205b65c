"""Per-step cost of the daemons in one process: m ``PartyDaemon``s (mutual TLS on loopback) and the
coordinator in one event loop, ``--steps`` sign steps timed after ``--warmup``; prints per step the wall time,
the Python function calls (cProfile, with ``--profile``) and the durable-write system calls of all parties
together (``os.fsync``, ``os.fdatasync``, ``os.replace``, counted by wrapping them), and the state files'
bytes.

A diagnostic for issue 26 (the ledger's durable write per step), not a timed test: run it in two trees to
compare, e.g. ``PYTHONPATH=<tree> python simulations/profile_steps.py --parties 7 --steps 100`` (the script
uses only the daemon's and the coordinator's public entry points, so it runs against older trees too).
``--budget`` gives every party a GDP budget (its privacy ledger is then charged each step too).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.api import Coordinator, SessionOptions
from coordinator.certs import init_consortium, party_identity
from parties.config import load_config
from parties.daemon import PartyDaemon
from proto.spec import PartyEntry
from proto.tls import TlsMaterial
from simulations.launcher import PartyOptions, party_config_text, write_csv

# gaussian-mean with clipped records and the penalty (bounded: a privacy event per decision)
PARAMS: dict[str, Any] = {"model_args": {"sigma": 1.0, "clip": [-4.0, 6.0]}, "penalty": {"tau": 10.0, "n": 1}}


def _count_syscalls(counts: Counter[str]) -> Callable[[], None]:
    originals: dict[str, Any] = {}
    for name in ("fsync", "fdatasync", "replace"):
        real = getattr(os, name)
        originals[name] = real

        def wrapped(*a: Any, _name: str = name, _real: Any = real) -> Any:
            counts[_name] += 1
            return _real(*a)

        setattr(os, name, wrapped)

    def undo() -> None:
        for name, real in originals.items():
            setattr(os, name, real)

    return undo


def _inputs(m: int, n: int, rng: np.random.Generator) -> dict[str, Any]:
    """A batch of proposals: public term = the penalty's correction (flat prior, symmetric proposal)."""
    from mechanisms.kinds import DecisionPlan
    from mechanisms.models.base import load_model
    from mechanisms.samplers.penalty import penalty_correction

    th = rng.normal(1.0, 0.05, n)
    ts = th + rng.normal(0.0, 0.05, n)
    plan = DecisionPlan.from_params(PARAMS)
    assert plan.penalty is not None
    model = load_model("gaussian-mean", dict(plan.model_args))
    public = penalty_correction(plan.penalty.sigma(model, th[:, None], ts[:, None]), m)
    return {"theta": th, "theta_star": ts, "public": np.asarray(public, dtype=np.float64).reshape(-1)}


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="confar-profile-"))
    certs = root / "certs"
    init_consortium(certs, args.parties)
    rng = np.random.default_rng(0)
    daemons: list[PartyDaemon] = []
    budget = {"gdp_mu": 1e6} if args.budget else None
    try:
        for pid in range(1, args.parties + 1):
            pdir = root / f"party-{pid}"
            pdir.mkdir(parents=True)
            write_csv(pdir / "data.csv", {"x": rng.normal(1.0, 1.0, 40)})
            (pdir / "party.toml").write_text(
                party_config_text(
                    pid, args.parties, root, certs, pdir / "data.csv", PartyOptions(privacy_budget=budget)
                )
            )
            d = PartyDaemon(load_config(pdir / "party.toml"))
            await d.start()
            daemons.append(d)
        eps = [PartyEntry(d.cfg.id, party_identity(d.cfg.id), f"127.0.0.1:{d.port}") for d in daemons]
        tls = TlsMaterial.load(
            certs / "coordinator.pem", certs / "coordinator.key", certs / "ca.pem", "coordinator"
        )
        async with Coordinator(eps, tls) as coord:
            sess = await coord.open_session(SessionOptions(
                reveal_mode="sign", model="gaussian-mean", model_params=PARAMS, run_id=args.run_id or None
            ))
            for _ in range(args.warmup):
                await sess.evaluate(_inputs(args.parties, args.batch, rng), args.batch)
            counts: Counter[str] = Counter()
            undo = _count_syscalls(counts)
            prof = cProfile.Profile() if args.profile else None
            t0 = time.perf_counter()
            if prof is not None:
                prof.enable()
            for _ in range(args.steps):
                await sess.evaluate(_inputs(args.parties, args.batch, rng), args.batch)
            if prof is not None:
                prof.disable()
            wall = time.perf_counter() - t0
            undo()
            await sess.close()
        state_bytes = sum(p.stat().st_size for p in root.glob("party-*/state/*") if p.is_file())
        out: dict[str, Any] = {
            "parties": args.parties,
            "batch": args.batch,
            "steps": args.steps,
            "budget": bool(args.budget),
            "run": bool(args.run_id),
            "ms_per_step": round(wall / args.steps * 1e3, 2),
            **{f"{k}_per_step": round(counts[k] / args.steps, 2) for k in ("fsync", "fdatasync", "replace")},
            "state_bytes_after": state_bytes,
        }
        if prof is not None:
            stats = pstats.Stats(prof)
            out["calls_per_step"] = round(stats.total_calls / args.steps)  # type: ignore[attr-defined]
        return out
    finally:
        for d in daemons:
            await d.stop(grace=0.5)
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parties", type=int, default=7)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--budget", action="store_true", help="a GDP budget at every party (its ledger charged)")
    p.add_argument("--run-id", default="", help="a run id: each step is also a run step (run record kept)")
    p.add_argument("--profile", action="store_true", help="count Python calls with cProfile (slower)")
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(_main(args))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
