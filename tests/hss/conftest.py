from __future__ import annotations

import hashlib
from collections.abc import Callable

import pytest

from hss.randomness import SecureRandom
from hss.runtime import run_in_memory
from hss.session import PartyContext, SessionParams, key_setup


def fixed_rng(label: str) -> SecureRandom:
    """Repeatable CSPRNG streams for tests (a real run uses SecureRandom.from_os())."""
    return SecureRandom.from_key(hashlib.sha256(label.encode()).digest())


Session = tuple[SessionParams, dict[int, PartyContext], dict[int, SecureRandom]]


def make_session(m: int, t: int | None = None, seed: str = "s") -> Session:
    params = SessionParams(
        m=m, t=(m - 1) // 2 if t is None else t, session_id=hashlib.sha256(seed.encode()).digest()[:16]
    )
    rngs = {p: fixed_rng(f"{seed}/party{p}") for p in range(1, m + 1)}
    keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    return params, {p: PartyContext(params, keys[p]) for p in rngs}, rngs


@pytest.fixture
def session() -> Callable[..., Session]:
    return make_session
