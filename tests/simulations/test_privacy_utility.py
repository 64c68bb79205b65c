"""simulations.privacy_utility (docs/PRIVACY_UTILITY.md) at a small size: it writes its table and figure,
every epsilon is finite and backed by the ledger's own events, the confidential figure is never above the
plain release of the same noise, and a weaker threat model never costs more."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from simulations import privacy_utility


@pytest.mark.slow
def test_quick_grid_writes_a_consistent_table(tmp_path: Path) -> None:
    assert privacy_utility.main(["--quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "privacy_utility.png").stat().st_size > 10_000
    with open(tmp_path / "privacy_utility.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["sampler"] for r in rows} == {"penalty", "lazy"}
    for r in rows:
        assert int(r["decisions"]) > 0 and 0.0 < float(r["acceptance"]) < 1.0
        for q in (0, 3):
            eps = float(r[f"sign_q{q}"])
            assert math.isfinite(eps) and eps > 0
        assert float(r["sign_q0"]) <= float(r["sign_q3"]) * (1 + 1e-9)
        if r["sampler"] == "penalty":
            for mode in ("sum", "blinded", "sign"):
                assert float(r[f"{mode}_q3"]) <= float(r["plain_q3"]) * (1 + 1e-9)
            assert float(r["sign_q3"]) <= float(r["sum_q3"]) * (1 + 1e-9)  # the bit is a post-processing
