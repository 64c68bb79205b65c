"""Additive and Shamir secret sharing over F_p, vectorised over a batch.

Parties are numbered 1..m and party i's Shamir share is the sharing polynomial evaluated at x = i.
Pure functions with the field fixed (p = 2^127 - 1) and randomness passed in (after MPyC's thresha).

* :func:`split_additive` / :func:`recombine_additive`: m random shares summing to the secret; any m-1
  shares are uniformly distributed and independent of the secret.
* :func:`split` / :func:`recombine`: Shamir degree-t sharing; any t+1 shares determine the secret, any t
  are independent of it. :func:`recombine` refuses too few shares and, given more than t+1, checks that
  they lie on one polynomial of degree t (inconsistent shares are an error, never a wrong number).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

from hss import field as F
from hss.randomness import SecureRandom


class ShareError(ValueError):
    """Shares that cannot be recombined: too few, duplicated points, or inconsistent."""


def _inv(x: int) -> int:
    return pow(x % F.P, F.P - 2, F.P)


@lru_cache(maxsize=512)
def lagrange_at(points: tuple[int, ...], x: int = 0) -> tuple[int, ...]:
    """Lagrange coefficients l_j with f(x) = sum_j l_j f(points[j]) for deg f < len(points)."""
    if len(set(points)) != len(points):
        raise ShareError(f"duplicate evaluation points {points}")
    out = []
    for j, xj in enumerate(points):
        num, den = 1, 1
        for k, xk in enumerate(points):
            if k != j:
                num = num * (x - xk) % F.P
                den = den * (xj - xk) % F.P
        out.append(num * _inv(den) % F.P)
    return tuple(out)


@lru_cache(maxsize=128)
def lagrange_field(points: tuple[int, ...], x: int = 0) -> F.FieldArray:
    arr = F.from_ints(lagrange_at(points, x))
    arr.setflags(write=False)
    return arr


@lru_cache(maxsize=128)
def vandermonde(m: int, t: int) -> F.FieldArray:
    """(m, t+1) matrix V[i-1, l] = i^l: shares = V @ [secret, a_1, ..., a_t]."""
    arr = F.from_ints([pow(i, j, F.P) for i in range(1, m + 1) for j in range(t + 1)]).reshape(m, t + 1, 2)
    arr.setflags(write=False)
    return arr


def split_additive(secret: F.FieldArray, m: int, rng: SecureRandom) -> F.FieldArray:
    """(m, ...) additive shares of ``secret`` (shape (..., 2))."""
    if m < 2:
        raise ValueError(f"additive sharing needs m >= 2 parties, got {m}")
    shape = secret.shape[:-1]
    rest = rng.field((m - 1, *shape))
    last = F.sub(secret, F.lincomb(F.from_ints([1] * (m - 1)), rest)) if m > 1 else secret
    return np.concatenate([rest, last[None]], axis=0)


def recombine_additive(shares: F.FieldArray) -> F.FieldArray:
    m = shares.shape[0]
    return F.lincomb(F.from_ints([1] * m), shares)


def split(secret: F.FieldArray, t: int, m: int, rng: SecureRandom) -> F.FieldArray:
    """(m, ...) Shamir shares of degree t; share i-1 belongs to party i."""
    if not 0 <= t < m:
        raise ValueError(f"threshold t must satisfy 0 <= t < m, got t={t}, m={m}")
    shape = secret.shape[:-1]
    coeffs = np.concatenate([secret[None], rng.field((t, *shape))], axis=0) if t else secret[None]
    return F.matmul(vandermonde(m, t), coeffs)


def recombine(
    shares: Mapping[int, F.FieldArray] | Sequence[tuple[int, F.FieldArray]], t: int
) -> F.FieldArray:
    """The secret from shares {party: share} of a degree-t sharing; checks consistency of extra shares."""
    items = sorted(dict(shares).items())
    if len(items) < t + 1:
        raise ShareError(f"need at least t+1 = {t + 1} shares to recombine, got {len(items)}")
    pts = tuple(p for p, _ in items)
    if any(p < 1 for p in pts):
        raise ShareError(f"evaluation points must be party ids >= 1, got {pts}")
    stack = np.stack([s for _, s in items])
    base = pts[: t + 1]
    secret = F.lincomb(lagrange_field(base, 0), stack[: t + 1])
    for idx in range(t + 1, len(items)):
        pred = F.lincomb(lagrange_field(base, pts[idx]), stack[: t + 1])
        if not F.equal(pred, stack[idx]).all():
            raise ShareError(
                f"inconsistent shares: party {pts[idx]}'s share does not lie on the degree-{t} polynomial "
                f"through parties {base}"
            )
    return secret
