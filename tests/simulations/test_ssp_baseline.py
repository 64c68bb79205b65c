"""simulations.ssp_baseline (docs/PRIVACY_UTILITY.md, the linear-regression baseline) at one small size
without the chain: it writes its table, charges SSP the ε it is compared at, and the noise-aware posterior
is no less honest about its error than the naive plug-in (its sds are at least the naive's)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from simulations import ssp_baseline


@pytest.mark.slow
def test_one_size_writes_a_consistent_table(tmp_path: Path) -> None:
    argv = ["--out", str(tmp_path), "--sizes", "10000", "--validate", "", "--repeats", "2", "--ssp-eps", "3"]
    assert ssp_baseline.main(argv) == 0
    with open(tmp_path / "ssp_baseline.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    assert math.isfinite(float(row["eps"])) and float(row["eps"]) > 0
    assert float(row["ssp_eps3_check"]) == pytest.approx(3.0, rel=1e-6)  # SSP alone is charged ε = 3
    for prefix in ("ssp", "ssp_eps3"):
        aware, naive = (float(row[f"{prefix}_{k}_sd_ratio_min"]) for k in ("aware", "naive"))
        assert aware >= naive * 0.999
    # at confar's ε the SSP noise is small at this size: both SSP posteriors are near the exact one
    assert float(row["ssp_aware_mean_err"]) < 0.2 and float(row["ssp_aware_sd_ratio_max"]) < 1.05
