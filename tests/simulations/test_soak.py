"""The soak's pass rule (simulations/soak.py) on made-up samples; the soak itself runs over daemon processes
in tests/network/test_soak.py."""

from __future__ import annotations

from simulations.soak import RSS_GROWTH_MAX, Sample, SoakReport


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
