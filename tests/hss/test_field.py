from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hss import field as F

elems = st.integers(min_value=0, max_value=F.P - 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(elems, elems), min_size=1, max_size=20))
def test_arithmetic_matches_python_ints(pairs: list[tuple[int, int]]) -> None:
    xs, ys = [a for a, _ in pairs], [b for _, b in pairs]
    a, b = F.from_ints(xs), F.from_ints(ys)
    assert F.to_ints(F.add(a, b)) == [(x + y) % F.P for x, y in pairs]
    assert F.to_ints(F.sub(a, b)) == [(x - y) % F.P for x, y in pairs]
    assert F.to_ints(F.mul(a, b)) == [(x * y) % F.P for x, y in pairs]
    assert F.to_ints(F.neg(a)) == [(-x) % F.P for x in xs]
    assert F.to_ints(F.mul_scalar(a, ys[0])) == [(x * ys[0]) % F.P for x in xs]


def test_edge_values() -> None:
    edge = [0, 1, 2, F.P - 1, F.P - 2, 1 << 64, (1 << 64) - 1, 1 << 126, (1 << 126) + 12345]
    a = F.from_ints(edge)
    for op, ref in ((F.mul, lambda x, y: x * y), (F.add, lambda x, y: x + y), (F.sub, lambda x, y: x - y)):
        for y in edge:
            b = F.from_ints([y] * len(edge))
            assert F.to_ints(op(a, b)) == [ref(x, y) % F.P for x in edge]


def test_sqrt_inverse_and_powers() -> None:
    rng = np.random.default_rng(0)
    xs = [int.from_bytes(rng.bytes(16), "little") % F.P for _ in range(257)]
    a = F.from_ints(xs)
    roots = F.to_ints(F.sqrt(F.mul(a, a)))
    assert all(r in (x, F.P - x) for r, x in zip(roots, xs, strict=True))
    assert F.to_ints(F.pow2k(a, 5)) == [pow(x, 32, F.P) for x in xs]
    nz = F.from_ints([x or 1 for x in xs])
    assert F.to_ints(F.mul(nz, F.inv(nz))) == [1] * len(xs)
    with pytest.raises(ZeroDivisionError, match="flat index 2"):
        F.inv(F.from_ints([3, 4, 0, 5]))


@pytest.mark.parametrize("k", [0, 1, 5, 125])
def test_pow2k_vectorised_equals_scalar_and_pow(k: int) -> None:
    """The AVX2 squaring chains (radix 2^26, 8 at a time) give exactly pow(x, 2^k, p), as the scalar path
    does: random elements, the edge values (limbs all ones, p - 1, powers of two near the radix and the
    folds) and a length that leaves a scalar tail (8 * 33 + 5)."""
    rng = np.random.default_rng(k)
    edge = [0, 1, 2, F.P - 1, F.P - 2, (1 << 26) - 1, 1 << 26, (1 << 104) - 1, 1 << 104, (1 << 127) - 2]
    edge += [(1 << 126) + 12345, (1 << 64) - 1, 1 << 64, int("10" * 63 + "1", 2), int("01" * 63 + "1", 2)]
    xs = edge + [int.from_bytes(rng.bytes(16), "little") % F.P for _ in range(8 * 33 + 5 - len(edge))]
    a = F.from_ints(xs)
    want = [pow(x, 1 << k, F.P) for x in xs]
    assert F.to_ints(F.pow2k(a, k, vectorised=False)) == want
    got = F.pow2k(a, k)
    assert F.to_ints(got) == want
    assert (got[..., 1] >> np.uint64(63) == 0).all()  # canonical words


def test_pow2k_takes_the_vectorised_path_on_avx2() -> None:
    """On an x86-64 CPU with AVX2 (this project's CI machines) the square roots run on the AVX2 kernel."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if platform.machine() != "x86_64" or " avx2" not in flags:
        pytest.skip("no AVX2 on this CPU: the general-purpose kernel is used")
    assert F.POW2K_VECTORISED


def test_matmul_and_lincomb() -> None:
    rng = np.random.default_rng(1)
    m = [[int(v) for v in rng.integers(0, 2**62, 3)] for _ in range(4)]
    x = [[int.from_bytes(rng.bytes(16), "little") % F.P for _ in range(5)] for _ in range(3)]
    out = F.matmul(
        F.from_ints([v for row in m for v in row]).reshape(4, 3, 2),
        F.from_ints([v for r in x for v in r]).reshape(3, 5, 2),
    )
    want = [sum(m[i][j] * x[j][k] for j in range(3)) % F.P for i in range(4) for k in range(5)]
    assert F.to_ints(out) == want
    with pytest.raises(ValueError, match="3 columns"):
        F.matmul(F.zeros((2, 3)), F.zeros((4, 5)))


def test_signed_conversions() -> None:
    vals = np.array([0, 1, -1, 2**63 - 1, -(2**63), 123456789, -987654321], dtype=np.int64)
    assert (F.to_int64(F.from_int64(vals)) == vals).all()
    assert F.to_ints(F.from_int64(np.array([-1]))) == [F.P - 1]
    with pytest.raises(OverflowError):
        F.to_int64(F.from_ints([1 << 64]))
    d = F.to_double(F.from_ints([3 << 100, F.P - (5 << 90)]), 90)
    assert d.tolist() == [3.0 * 2**10, -5.0]
    assert F.to_ints(F.shift_right(F.from_ints([(7 << 70) + 5]), 3)) == [((7 << 70) + 5) >> 3]


def test_random_elements_are_canonical_and_bounded() -> None:
    raw = bytes([0xFF]) * 32
    assert F.to_ints(F.from_random_bytes(raw, 2)) == [0, 0]  # 2^127 - 1 == p maps to 0
    b = F.bounded_from_random_bytes(np.random.default_rng(2).bytes(16 * 1000), 1000, 40)
    assert max(F.to_ints(b)) < 2**40
    with pytest.raises(TypeError, match="last axis 2"):
        F.add(np.zeros(3, dtype=np.uint64), np.zeros(3, dtype=np.uint64))


def test_strided_broadcast_and_fortran_inputs_match_contiguous_ones() -> None:
    """The kernels read raw addresses: a strided view, a Fortran-ordered copy or a broadcast operand must be
    made contiguous first (and a contiguous one passed as it is), with the same results as Python ints."""
    rng = np.random.default_rng(2)
    xs = [int.from_bytes(rng.bytes(16), "little") % F.P for _ in range(12)]
    ys = [int.from_bytes(rng.bytes(16), "little") % F.P for _ in range(12)]
    a, b = F.from_ints(xs), F.from_ints(ys)
    for op, ref in ((F.add, lambda x, y: x + y), (F.sub, lambda x, y: x - y), (F.mul, lambda x, y: x * y)):
        assert F.to_ints(op(a[::2], b[1::2])) == [
            ref(x, y) % F.P for x, y in zip(xs[::2], ys[1::2], strict=True)
        ]
        fa, fb = np.asfortranarray(a.reshape(3, 4, 2)), np.asfortranarray(b.reshape(3, 4, 2))
        assert not fa.flags.c_contiguous
        assert F.to_ints(op(fa, fb)) == [ref(x, y) % F.P for x, y in zip(xs, ys, strict=True)]
        one = b[3]  # a single element broadcast against the batch
        assert F.to_ints(op(a, one)) == [ref(x, ys[3]) % F.P for x in xs]
    m = F.from_ints([1, 2, 3, 4, 5, 6]).reshape(2, 3, 2)
    x = a.reshape(3, 4, 2)[:, ::2]  # strided rows
    want = [
        sum(r * xs[4 * j + 2 * k] for j, r in enumerate(row)) % F.P
        for row in ([1, 2, 3], [4, 5, 6])
        for k in range(2)
    ]
    assert F.to_ints(F.matmul(m, x)) == want
