"""The prime field F_p, p = 2^127 - 1, as numpy arrays.

An array of field elements is a C-contiguous ``uint64`` array whose last axis has length 2 (low word,
high word), always canonical (0 <= x < p). The arithmetic runs in a small C library (``_field.c``)
called once per array, so a batch of decisions costs one call per operation, not one per element.

Signed integers are encoded as ``x mod p`` and decoded from the symmetric range (-p/2, p/2).
Everything here is pure: no I/O, no hidden randomness (random elements are made from bytes the
caller supplies).
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

P = (1 << 127) - 1
BITS = 127
SQRT_EXPONENT_LOG2 = 125  # (P + 1) / 4 == 2^125: sqrt(x) = x^(2^125) for quadratic residues

U64 = np.uint64
FieldArray = npt.NDArray[np.uint64]

# Arrays are passed as raw addresses (c_void_p): far cheaper per call than ndarray.ctypes.data_as().
_u64p = _i64p = _f64p = ctypes.c_void_p
_size = ctypes.c_size_t


def _load() -> ctypes.CDLL:
    spec = importlib.util.find_spec("hss._field")
    if spec is None or spec.origin is None:
        raise ImportError(
            "the compiled field library hss/_field*.so is missing: install the project with "
            "'pip install -e .' (make test / make demo do this) so that setup.py compiles hss/_field.c"
        )
    lib = ctypes.CDLL(spec.origin)
    sigs: dict[str, tuple[list[object], object]] = {
        "f_add": ([_u64p, _u64p, _u64p, _size], None),
        "f_sub": ([_u64p, _u64p, _u64p, _size], None),
        "f_mul": ([_u64p, _u64p, _u64p, _size], None),
        "f_mul_scalar": ([_u64p, _u64p, _u64p, _size], None),
        "f_pow2k": ([_u64p, _u64p, _size, ctypes.c_int], None),
        "f_pow2k_path": ([_u64p, _u64p, _size, ctypes.c_int, ctypes.c_int], None),
        "f_pow2k_vectorised": ([], ctypes.c_int),
        "f_inv_batch": ([_u64p, _u64p, _u64p, _size], _size),
        "f_matmul": ([_u64p, _u64p, _u64p, _size, _size, _size], None),
        "f_from_int64": ([_i64p, _u64p, _size], None),
        "f_to_int64": ([_u64p, _i64p, _size], _size),
        "f_to_double": ([_u64p, _f64p, _size, ctypes.c_int], None),
        "f_from_random": ([_u64p, _u64p, _size], None),
        "f_bounded_from_random": ([_u64p, _u64p, _size, ctypes.c_int], None),
        "f_combine_random": ([_u64p, _u64p, _u64p, _size, _size, ctypes.c_int], None),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    return lib


_lib = _load()


def _ptr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _n(a: FieldArray) -> int:
    return a.size // 2


def _check(a: np.ndarray) -> FieldArray:
    if a.dtype != U64 or a.ndim == 0 or a.shape[-1] != 2:
        raise TypeError(
            f"expected a uint64 field array with last axis 2, got dtype {a.dtype}, shape {a.shape}"
        )
    return a if a.flags.c_contiguous and type(a) is np.ndarray else np.ascontiguousarray(a)


def _binary(fn: ctypes._CFuncPtr, a: FieldArray, b: FieldArray) -> FieldArray:  # type: ignore[name-defined]
    a, b = _check(a), _check(b)
    if a.shape != b.shape:
        a, b = (np.ascontiguousarray(x) for x in np.broadcast_arrays(a, b))
    out = np.empty(a.shape, dtype=U64)
    # the addresses read inline (a batch-1 step makes hundreds of these calls: each Python call counts)
    fn(
        a.__array_interface__["data"][0],
        b.__array_interface__["data"][0],
        out.__array_interface__["data"][0],
        out.size // 2,
    )
    return out


def zeros(shape: int | Sequence[int]) -> FieldArray:
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    return np.zeros((*shp, 2), dtype=U64)


def add(a: FieldArray, b: FieldArray) -> FieldArray:
    return _binary(_lib.f_add, a, b)


def sub(a: FieldArray, b: FieldArray) -> FieldArray:
    return _binary(_lib.f_sub, a, b)


def neg(a: FieldArray) -> FieldArray:
    return sub(zeros(a.shape[:-1]), a)


def mul(a: FieldArray, b: FieldArray) -> FieldArray:
    return _binary(_lib.f_mul, a, b)


def mul_scalar(a: FieldArray, s: int) -> FieldArray:
    a = _check(a)
    sv = const(s)
    out = np.empty_like(a)
    _lib.f_mul_scalar(_ptr(a), _ptr(sv), _ptr(out), _n(a))
    return out


def pow2k(a: FieldArray, k: int, vectorised: bool = True) -> FieldArray:
    """a^(2^k), elementwise. ``vectorised=False`` forces the general-purpose kernel (for tests; the default
    takes the AVX2 kernel where the CPU has it, see :data:`POW2K_VECTORISED`)."""
    a = _check(a)
    out = np.empty_like(a)
    _lib.f_pow2k_path(_ptr(a), _ptr(out), _n(a), k, int(vectorised))
    return out


POW2K_VECTORISED = bool(_lib.f_pow2k_vectorised())  # the square roots' squarings run 8 at a time (AVX2)


def sqrt(a: FieldArray) -> FieldArray:
    """A square root of each element, which must be a quadratic residue (unchecked: the caller squares)."""
    return pow2k(a, SQRT_EXPONENT_LOG2)


def inv(a: FieldArray) -> FieldArray:
    """Elementwise inverse (batch inversion); raises ZeroDivisionError on a zero element."""
    a = _check(a)
    out = np.empty_like(a)
    scratch = np.empty_like(a)
    bad = _lib.f_inv_batch(_ptr(a), _ptr(out), _ptr(scratch), _n(a))
    if bad:
        raise ZeroDivisionError(f"field element at flat index {bad - 1} is zero and has no inverse")
    return out


def matmul(m: FieldArray, x: FieldArray) -> FieldArray:
    """(r x c) field matrix times (c x ...) field array -> (r x ...)."""
    m, x = _check(m), _check(x)
    if m.ndim != 3:
        raise ValueError(f"matrix must have shape (r, c, 2), got {m.shape}")
    r, c = m.shape[0], m.shape[1]
    if x.shape[0] != c:
        raise ValueError(f"matrix has {c} columns but the array has {x.shape[0]} rows")
    tail = x.shape[1:-1]
    n = math.prod(tail)
    out = np.empty((r, *tail, 2), dtype=U64)
    _lib.f_matmul(_ptr(m), _ptr(x), _ptr(out), r, c, n)
    return out


def lincomb(coeffs: FieldArray, xs: FieldArray) -> FieldArray:
    """sum_j coeffs[j] * xs[j] for a vector of field coefficients and a stack of arrays."""
    return matmul(coeffs.reshape(1, -1, 2), xs)[0]


def from_int64(x: npt.ArrayLike) -> FieldArray:
    xi = np.ascontiguousarray(x, dtype=np.int64)
    out = np.empty((*xi.shape, 2), dtype=U64)
    _lib.f_from_int64(_ptr(xi), _ptr(out), xi.size)
    return out


def to_int64(a: FieldArray) -> npt.NDArray[np.int64]:
    """Signed decoding into int64; OverflowError if a value lies outside the int64 range."""
    a = _check(a)
    out = np.empty(a.shape[:-1], dtype=np.int64)
    bad = _lib.f_to_int64(_ptr(a), _ptr(out), _n(a))
    if bad:
        raise OverflowError(f"field element at flat index {bad - 1} is outside the signed 64-bit range")
    return out


def to_double(a: FieldArray, scale_bits: int = 0) -> npt.NDArray[np.float64]:
    """Signed decoding as float64, scaled by 2^-scale_bits (rounded to double precision)."""
    a = _check(a)
    out = np.empty(a.shape[:-1], dtype=np.float64)
    _lib.f_to_double(_ptr(a), _ptr(out), _n(a), scale_bits)
    return out


def from_random_bytes(raw: bytes, shape: int | Sequence[int]) -> FieldArray:
    """Uniform field elements from 16 random bytes each (statistical distance 2^-127)."""
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    r = np.frombuffer(raw, dtype=U64).reshape(*shp, 2)
    out = np.empty_like(r)
    _lib.f_from_random(_ptr(np.ascontiguousarray(r)), _ptr(out), out.size // 2)
    return out


def bounded_from_random_bytes(raw: bytes, shape: int | Sequence[int], bits: int) -> FieldArray:
    """Uniform integers in [0, 2^bits) from 16 random bytes each."""
    if not 0 < bits <= 126:
        raise ValueError(f"bits must be in 1..126, got {bits}")
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    r = np.frombuffer(raw, dtype=U64).reshape(*shp, 2)
    out = np.empty_like(r)
    _lib.f_bounded_from_random(_ptr(np.ascontiguousarray(r)), _ptr(out), out.size // 2, bits)
    return out


def combine_random(raw: npt.NDArray[np.uint64], coeffs: FieldArray, bits: int = BITS) -> FieldArray:
    """sum_j coeffs[j] * x_j with x_j made from raw random words ``raw[j]`` (shape (nkeys, ..., 2)).

    bits = 127: x_j uniform field elements; bits < 127: uniform integers in [0, 2^bits).
    """
    raw = np.ascontiguousarray(raw, dtype=U64)
    coeffs = _check(coeffs)
    nkeys = raw.shape[0]
    if coeffs.shape != (nkeys, 2) or raw.shape[-1] != 2:
        raise ValueError(f"{nkeys} random streams need {nkeys} coefficients, got shape {coeffs.shape}")
    if not 0 < bits <= BITS:
        raise ValueError(f"bits must be in 1..127, got {bits}")
    out = np.empty(raw.shape[1:], dtype=U64)
    _lib.f_combine_random(_ptr(raw), _ptr(coeffs), _ptr(out), nkeys, out.size // 2, bits)
    return out


def const(v: int) -> FieldArray:
    """One field element from a Python int (reduced mod p)."""
    v %= P
    return np.array([v & 0xFFFFFFFFFFFFFFFF, v >> 64], dtype=U64)


def from_ints(vals: Iterable[int]) -> FieldArray:
    """Field array from Python ints (reduced mod p); for constants and tests, not hot paths."""
    lst = [v % P for v in vals]
    return np.array([[v & 0xFFFFFFFFFFFFFFFF, v >> 64] for v in lst], dtype=U64).reshape(len(lst), 2)


def to_ints(a: FieldArray) -> list[int]:
    """Canonical Python ints of a flat view; for tests and public constants."""
    flat = _check(a).reshape(-1, 2)
    return [int(lo) | (int(hi) << 64) for lo, hi in flat]


def low_word(a: FieldArray) -> npt.NDArray[np.uint64]:
    """The low 64 bits of each element (for bit extraction of opened public values)."""
    return _check(a)[..., 0]


def shift_right(a: FieldArray, s: int) -> FieldArray:
    """Integer division of canonical representatives by 2^s (0 < s < 64), for opened public values."""
    a = _check(a)
    if not 0 < s < 64:
        raise ValueError(f"shift must be in 1..63, got {s}")
    out = np.empty_like(a)
    out[..., 0] = (a[..., 0] >> U64(s)) | (a[..., 1] << U64(64 - s))
    out[..., 1] = a[..., 1] >> U64(s)
    return out


def equal(a: FieldArray, b: FieldArray) -> npt.NDArray[np.bool_]:
    return np.all(_check(a) == _check(b), axis=-1)
