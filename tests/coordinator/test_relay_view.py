"""A relaying coordinator learns nothing from what it forwards: with the public inputs fixed, its view
(headers, sizes, ciphertexts) has the same shape whatever the parties' secret data, ciphertexts look
uniform, and no plaintext share appears in it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from coordinator.api import SessionOptions
from coordinator.relay import RelayRecord
from tests.parties.helpers import coordinator_for, inproc_consortium


def relay_view(root: Path, data: list[np.ndarray], mode: str) -> list[RelayRecord]:
    seen: list[RelayRecord] = []
    n = 32
    th = np.linspace(0.5, 1.5, n)

    async def main() -> None:
        async with (
            inproc_consortium(root, 3, data) as (_, eps, certs),
            coordinator_for(eps, certs, relay_observer=seen.append) as coord,
        ):
            sess = await coord.open_session(SessionOptions(
                reveal_mode=mode, model="gaussian-mean", model_params={}, topology="relay"
            ))
            for _ in range(2):
                await sess.evaluate({"theta": th, "theta_star": th + 0.1, "public": np.zeros(n)}, n)
            await sess.close()

    asyncio.run(main())
    return seen


def shape(view: list[RelayRecord]) -> list[tuple[int, int, int, int, int, int, int]]:
    return sorted((r.step, r.round, r.src, r.dst, r.kind, len(r.payload), len(r.nonce)) for r in view)


def test_relay_view_is_independent_of_the_secrets(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    low = [rng.normal(-5, 1, 30) for _ in range(3)]
    high = [rng.normal(40, 10, 30) for _ in range(3)]
    for mode in ("blinded", "sign"):
        v1 = relay_view(tmp_path / f"a-{mode}", low, mode)
        v2 = relay_view(tmp_path / f"b-{mode}", high, mode)
        assert v1 and shape(v1) == shape(v2)
        blob = b"".join(r.payload for r in v1 + v2)
        counts = np.bincount(np.frombuffer(blob, dtype=np.uint8), minlength=256)
        expected = len(blob) / 256
        chi2 = float(((counts - expected) ** 2 / expected).sum())
        assert chi2 < 400, f"ciphertext bytes are far from uniform (chi2 = {chi2:.0f}, 255 dof)"
        assert len({r.nonce for r in v1 + v2}) == len(v1 + v2)  # nonces never repeat
