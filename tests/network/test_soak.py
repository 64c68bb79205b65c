"""The soak of issue 12 at a small size (the documented command runs 10^6 decisions through 7 daemons):
three daemons, 60 batches of 200 sign decisions; descriptors constant and RSS bounded after the warm-up, and
the accept counts per tenth of the run consistent with the exact MH probabilities. The pass rule itself is
tested on made-up samples in tests/simulations/test_soak.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.soak import SoakSettings, run_soak


@pytest.mark.slow
def test_small_soak_passes(tmp_path: Path) -> None:
    rep = run_soak(3, 12_000, 200, SoakSettings(samples=20, seed=3, workdir=tmp_path))
    assert rep.failures == []
    assert rep.decisions == 12_000 and len(rep.windows) == 10
    assert sum(w["accepts"] for w in rep.windows) > 0
    after = [s for s in rep.samples if s.batch >= rep.warmup_batches]
    assert len(after) >= 10
    for pid in (1, 2, 3):
        assert len({s.fds[pid] for s in after}) == 1
        assert all(s.rss_kib[pid] > 10_000 for s in after)  # a real process was sampled
    out = rep.summary()
    assert out["passed"] and set(out["parties"]) == {"1", "2", "3"}
