"""Cryptographically secure randomness for shares and noise, and the keyed PRF behind PRSS.

:class:`SecureRandom` is an AES-256-CTR keystream. Its key must come from the operating system's CSPRNG
(``SecureRandom.from_os()``) for anything secret: share polynomials, masks, DP and Gamma noise. It is
never derived from an experiment's public seed. Tests may pass a fixed key to make a run repeatable; that
is the only use of :meth:`SecureRandom.from_key`.

:class:`Prf` is AES-256-CTR keyed by a shared key, with the counter block made from (purpose, step):
parties holding the same key derive the same pseudorandom stream for the same batch without talking.
Keys are bound to the session with HKDF-SHA256 before use.
"""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from hss import field as F


def derive_key(key: bytes, session_id: bytes, label: bytes) -> bytes:
    """HKDF-SHA256(key, salt=session_id, info=label) -> 32 bytes."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=session_id, info=b"confar/" + label).derive(key)


def _keystream(key: bytes, iv: bytes, nbytes: int) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.CTR(iv)).encryptor()
    return enc.update(bytes(nbytes)) + enc.finalize()


class Prf:
    """Shared-key PRF: ``stream(purpose, step, nbytes)``, identical for every holder of the key.

    AES-256 in counter mode with counter blocks (purpose: 32 bits, step: 64 bits, block index: 32 bits),
    computed as ECB encryption of the counter blocks so that one cipher context serves every call.
    """

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError(f"PRF key must be 32 bytes, got {len(key)}")
        self._key = key
        self._ecb = Cipher(algorithms.AES(key), modes.ECB()).encryptor()

    def stream(self, purpose: int, step: int, nbytes: int) -> bytes:
        if not (0 <= purpose < 2**32 and 0 <= step < 2**64):
            raise ValueError(f"purpose {purpose} / step {step} out of range")
        nblocks = -(-nbytes // 16)
        if nblocks >= 2**32:
            raise ValueError(f"PRF stream of {nbytes} bytes is too long for one (purpose, step)")
        if nblocks > 64:  # a fresh CTR context is cheaper than building counter blocks for long streams
            return _keystream(self._key, struct.pack(">IQI", purpose, step, 0), nbytes)
        blocks = np.empty((nblocks, 2), dtype=">u8")
        blocks[:, 0] = (purpose << 32) | (step >> 32)
        blocks[:, 1] = ((step & 0xFFFFFFFF) << 32) + np.arange(nblocks, dtype=np.uint64)
        return self._ecb.update(blocks.tobytes())[:nbytes]

    def words(self, purpose: int, step: int, out: npt.NDArray[np.uint64]) -> None:
        """Fill a uint64 array with the stream (16 bytes per field element)."""
        out.reshape(-1)[:] = np.frombuffer(self.stream(purpose, step, out.nbytes), dtype=np.uint64)

    def field(self, purpose: int, step: int, shape: tuple[int, ...]) -> F.FieldArray:
        n = math.prod(shape)
        return F.from_random_bytes(self.stream(purpose, step, 16 * n), shape)

    def bounded(self, purpose: int, step: int, shape: tuple[int, ...], bits: int) -> F.FieldArray:
        n = math.prod(shape)
        return F.bounded_from_random_bytes(self.stream(purpose, step, 16 * n), shape, bits)


class SecureRandom:
    """A party's private CSPRNG (AES-256-CTR keystream over a key from os.urandom)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError(f"SecureRandom key must be 32 bytes, got {len(key)}")
        self._enc = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()

    @classmethod
    def from_os(cls) -> SecureRandom:
        return cls(os.urandom(32))

    @classmethod
    def from_key(cls, key: bytes) -> SecureRandom:
        """Repeatable stream for tests only; never for a real run."""
        return cls(key)

    def random_bytes(self, n: int) -> bytes:
        return self._enc.update(bytes(n))

    def field(self, shape: tuple[int, ...]) -> F.FieldArray:
        n = int(np.prod(shape))
        return F.from_random_bytes(self.random_bytes(16 * n), shape)

    def bounded(self, shape: tuple[int, ...], bits: int) -> F.FieldArray:
        n = int(np.prod(shape))
        return F.bounded_from_random_bytes(self.random_bytes(16 * n), shape, bits)

    def uniform(self, shape: tuple[int, ...] | int) -> npt.NDArray[np.float64]:
        """Uniform doubles in (0, 1): 53 random bits plus half an ulp, never 0 or 1."""
        shp = (shape,) if isinstance(shape, int) else shape
        n = int(np.prod(shp))
        u = np.frombuffer(self.random_bytes(8 * n), dtype=np.uint64) >> np.uint64(11)
        return ((u.astype(np.float64) + 0.5) * 2.0**-53).reshape(shp)

    def key(self) -> bytes:
        """32 fresh random bytes (for keys this party deals)."""
        return self.random_bytes(32)
