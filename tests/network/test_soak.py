"""The soak of issue 12 at a small size (the documented command runs 10^6 decisions through 7 daemons):
three daemons, 60 batches of 200 sign decisions; descriptors constant and RSS bounded after the warm-up, and
the accept counts per tenth of the run consistent with the exact MH probabilities."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.soak import RSS_GROWTH_MAX, Sample, SoakReport, run_soak


@pytest.mark.slow
def test_small_soak_passes(tmp_path: Path) -> None:
    rep = run_soak(3, 12_000, 200, samples=20, seed=3, workdir=tmp_path)
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


def test_criteria_catch_growth_fd_leaks_and_wrong_accepts() -> None:
    """The pass rule itself: a daemon that grows past the limit, one that leaks a descriptor, and a window
    with too many accepts each fail, named."""

    def sample(batch: int, rss: int, fds: int) -> Sample:
        return Sample(batch, float(batch), {0: 1000, 1: 100_000, 2: rss}, {0: 5, 1: 17, 2: fds})

    rep = SoakReport(m=3, batch=10, batches=100, warmup_batches=10)
    grow = int(100_000 * (1 + RSS_GROWTH_MAX) + 2000)
    rep.samples = [sample(b, 100_000 if b < 60 else grow, 17 if b < 90 else 18) for b in range(0, 101, 5)]
    rep.windows = [{"first": 1.0, "last": 10.0, "accepts": 80.0, "expected": 50.0, "z": 6.0}]
    rep.evaluate(z_max=5.0)
    text = "\n".join(rep.failures)
    assert "party 2: RSS grew" in text and "party 1" not in text
    assert "party 2: open descriptors varied after the warm-up: [17, 18]" in text
    assert "80 accepts, expected 50.0 (z = 6.00, limit 5.0)" in text
    assert not rep.passed
