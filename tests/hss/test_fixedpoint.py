from __future__ import annotations

import numpy as np
import pytest

from hss.fixedpoint import FixedPoint


def test_default_budget_and_ranges() -> None:
    fmt = FixedPoint()
    assert fmt.k == 17 + 20 + 4 + 1
    assert fmt.compare_bits == fmt.k - 1
    x, clamped = fmt.encode([-1e4, 1e3, 0.0, 2**-21, 3 * 2**-21, -(2.0**17) - 5])
    assert x.tolist()[:5] == [-10_000 * 2**20, 1000 * 2**20, 0, 0, 2]  # round half to even
    assert clamped.tolist() == [False] * 5 + [True]
    assert x[5] == -fmt.term_bound


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kappa": 39}, "kappa must be >= 40"),
        ({"frac_bits": 40, "term_int_bits": 30}, "exceed 64"),
        ({"kappa": 90}, "bit budget exceeded"),
        ({"frac_bits": 0}, "positive integer"),
        ({"max_terms": 4, "max_parties": 7}, "max_terms"),
        ({"blind_e_bits": 30}, "hides the divisors"),
        ({"blind_frac_bits": 90, "blind_e_bits": 70}, "blinded product needs"),
    ],
)
def test_budget_violations_are_refused_with_numbers(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FixedPoint(**kwargs)


def test_nan_and_inf_refused() -> None:
    fmt = FixedPoint()
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match="NaN or infinity"):
            fmt.encode(np.array([0.0, bad]))


def test_blind_encoding_exact() -> None:
    fmt = FixedPoint()
    w = np.array([0.0, 1.0, 2**-30, 63.5, 100.0])
    enc, clamped = fmt.encode_blind(w)
    vals = [int(lo) | (int(hi) << 64) for lo, hi in enc]
    assert vals[:4] == [
        0,
        1 << fmt.blind_frac_bits,
        1 << (fmt.blind_frac_bits - 30),
        127 << (fmt.blind_frac_bits - 1),
    ]
    assert clamped.tolist() == [False, False, False, False, True]
    with pytest.raises(ValueError):
        fmt.encode_blind(np.array([-1.0]))
