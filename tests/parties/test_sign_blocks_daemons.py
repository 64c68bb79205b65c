"""sign_precompute = "blocks4" (issue 16) through real gRPC daemons, mesh and relay: the same accept bits,
and the same messages to the receiver, as the in-memory runner with the same randomness (the contract of
tests/parties/test_transport_contract.py, whose ``reference`` this reuses), in 7 rounds of which 5 are
online."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import SessionOptions
from hss.protocols import sign_receiver
from tests.parties.helpers import coordinator_for, inproc_consortium, party_data
from tests.parties.test_transport_contract import SID, reference


@pytest.mark.parametrize("topology", ["mesh", "relay"])
def test_blocks4_over_grpc_matches_in_memory(tmp_path: Path, topology: str) -> None:
    m, t, n = 3, 1, 16
    data = party_data(m, 30, seed=5)
    keys = {j: bytes([j]) * 32 for j in range(1, m + 1)}
    params: dict[str, object] = {"model_args": {"sigma": 1.0}}
    rng = np.random.default_rng(16)
    batches = []
    for _ in range(2):
        th = rng.normal(1, 0.3, n)
        batches.append(
            {"theta": th, "theta_star": th + rng.normal(0, 0.2, n), "public": rng.normal(0, 0.1, n)}
        )
    ref = reference("sign", m, t, data, keys, batches, params, "blocks4")

    async def main() -> list[tuple[object, dict[int, np.ndarray], int]]:
        async with (
            inproc_consortium(tmp_path, m, data, fixed_keys=keys) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(SessionOptions(
                reveal_mode="sign",
                model="gaussian-mean",
                model_params=params,
                t=t,
                topology=topology,
                session_id=SID,
                sign_precompute="blocks4",
            ))
            assert sess.spec.params().sign_rounds_with("blocks4") == (2, 5)
            got = []
            for b in batches:
                tr = await sess.evaluate_transcript(b, n)
                inbox = {j: msgs[-1][1] for j, msgs in tr.messages.items()}
                rounds = max(msgs[-1][0] for msgs in tr.messages.values())
                got.append((sign_receiver(sess.spec.params(), inbox, n), inbox, rounds))
            await sess.close()
            return got

    got = asyncio.run(main())
    for (d_ref, inbox_ref), (d_got, inbox_got, rounds) in zip(ref, got, strict=True):
        assert rounds == 7  # the receiver's message comes in round 2 + 5
        np.testing.assert_array_equal(d_ref.accept, d_got.accept)  # type: ignore[attr-defined]
        for j in inbox_ref:  # type: ignore[union-attr]
            np.testing.assert_array_equal(inbox_ref[j], inbox_got[j])  # type: ignore[index]
