"""The clipped-record count that a penalty with per-record clipping promises for audit
(``mechanisms.samplers.requests.Penalty``) is on each party's Evaluate audit line, and only there."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.api import SessionOptions
from tests.parties.helpers import coordinator_for, gm_params, inproc_consortium, party_data


def _evaluate_lines(root: Path, pid: int) -> list[dict[str, Any]]:
    lines = (root / f"party-{pid}" / "state" / "audit.log").read_text().splitlines()
    return [rec for rec in map(json.loads, lines) if rec.get("what") == "Evaluate"]


def test_clipped_records_on_the_audit_line(tmp_path: Path) -> None:
    m, n = 3, 6
    data = party_data(m, 30, seed=4)
    theta, theta_star = np.zeros(n), np.full(n, 0.5)
    clip = {"model_args": {"sigma": 1.0}, "penalty": {"tau": 1.0, "n": 90, "c": "clip", "b": 0.5}}

    async def main() -> None:
        async with (
            inproc_consortium(tmp_path, m, data) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            for params in (clip, gm_params(1.0, (-4.0, 6.0), tau=2.0)):
                sess = await coord.open_session(SessionOptions(
                    reveal_mode="sign", model="gaussian-mean", model_params=params
                ))
                public = np.zeros(n)  # the coordinator's public term; not checked here
                await sess.evaluate({"theta": theta, "theta_star": theta_star, "public": public}, n)
                await sess.close()

    asyncio.run(main())
    for pid in range(1, m + 1):
        clipped_session, bound_session = _evaluate_lines(tmp_path, pid)
        per = np.abs(0.5 * (data[pid - 1] - 0.25))  # |r(x)| at theta = 0, theta* = 0.5; the limit is b * 0.5
        assert clipped_session["clipped_records"] == n * int(np.count_nonzero(per > 0.25)) > 0
        assert "clipped_records" not in bound_session  # c = "bound" clips no log-ratio
