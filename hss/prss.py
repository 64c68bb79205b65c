"""Pseudorandom secret sharing (Cramer, Damgård, Ishai, TCC 2005) and pairwise zero-sharing.

Setup: for every set A of t parties there is a key r_A, known to the m - t parties outside A; for every
pair {i, j} a key k_ij. Keys are dealt once per session by :func:`hss.session.key_setup` (one round:
the lowest-numbered holder draws each key and sends it to the other holders over the authenticated
channel) and bound to the session id with HKDF. After that, with no messages:

* ``random(step)``: party i's share sum_{A not containing i} PRF(r_A) * f_A(i) is a degree-t Shamir
  sharing of sum_A PRF(r_A), where f_A has degree t, f_A(0) = 1 and f_A(j) = 0 for j in A. A coalition of
  at most t parties misses the key of A = itself, so the secret is uniform to it.
* ``bounded(step, bits)``: the same with each PRF(r_A) an integer in [0, 2^bits): a sharing of an integer
  below C(m,t) * 2^bits (used for statistical masks).
* ``zero_additive(step)``: z_i = sum_{j != i} +-PRF(k_ij), signs chosen so that sum_i z_i = 0. For any
  coalition the honest parties' z values are uniform subject to their known sum: used to mask each
  party's contribution when a sum is opened, to all or to the designated receiver only.

The number of keys, C(m, t), grows quickly (m = 7, t = 3: 35 sets, 20 per party); fine for m <= 15.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from hss import field as F
from hss.randomness import Prf, derive_key


@lru_cache(maxsize=64)
def subsets(m: int, t: int) -> tuple[tuple[int, ...], ...]:
    """All t-subsets A of parties 1..m, in lexicographic order."""
    return tuple(itertools.combinations(range(1, m + 1), t))


def dealer_of(a: tuple[int, ...], m: int) -> int:
    """The lowest-numbered party outside A deals r_A."""
    return min(set(range(1, m + 1)) - set(a))


@lru_cache(maxsize=4096)
def f_a(a: tuple[int, ...], i: int) -> int:
    """f_A(i) = prod_{j in A} (j - i) / j: degree t, f_A(0) = 1, zero on A."""
    num, den = 1, 1
    for j in a:
        num = num * (j - i) % F.P
        den = den * j % F.P
    return num * pow(den, F.P - 2, F.P) % F.P


@dataclass(frozen=True)
class PartyKeys:
    """The PRSS and pairwise keys one party holds for one session (raw 32-byte keys, before HKDF)."""

    party: int
    m: int
    t: int
    prss: dict[tuple[int, ...], bytes]  # A -> r_A for every t-set A not containing party
    pairwise: dict[int, bytes]  # j -> k_{party, j}


class Prss:
    """Party-local PRSS/PRZS generator over the session's keys."""

    def __init__(self, keys: PartyKeys, session_id: bytes) -> None:
        self.party, self.m, self.t = keys.party, keys.m, keys.t
        sets = sorted(keys.prss)
        self._prf = [Prf(derive_key(keys.prss[a], session_id, b"prss")) for a in sets]
        coeffs = F.from_ints([f_a(a, self.party) for a in sets])
        self._coeffs = coeffs
        self._pair = [
            (1 if self.party < j else -1, Prf(derive_key(keys.pairwise[j], session_id, b"pairwise")))
            for j in sorted(keys.pairwise)
        ]
        self._pair_signs = F.from_ints([1 if sign > 0 else F.P - 1 for sign, _ in self._pair])

    def _raw(self, purpose: int, step: int, shape: tuple[int, ...]) -> np.ndarray:
        raw = np.empty((len(self._prf), *shape, 2), dtype=np.uint64)
        for j, prf in enumerate(self._prf):
            prf.words(purpose, step, raw[j])
        return raw

    def random(self, purpose: int, step: int, shape: tuple[int, ...]) -> F.FieldArray:
        """This party's degree-t share of a pseudorandom field element per position."""
        return F.combine_random(self._raw(purpose, step, shape), self._coeffs)

    def bounded(self, purpose: int, step: int, shape: tuple[int, ...], bits: int) -> F.FieldArray:
        """Degree-t share of an integer in [0, C(m,t) 2^bits), uniform in its unknown part."""
        return F.combine_random(self._raw(purpose, step, shape), self._coeffs, bits)

    def zero_additive(self, purpose: int, step: int, shape: tuple[int, ...]) -> F.FieldArray:
        """Additive share of zero: the m parties' values sum to 0."""
        raw = np.empty((len(self._pair), *shape, 2), dtype=np.uint64)
        for j, (_, prf) in enumerate(self._pair):
            prf.words(purpose, step, raw[j])
        return F.combine_random(raw, self._pair_signs)
