"""Contract: the same decisions over the in-memory runner and over real gRPC daemons (mesh and relay),
with identical noise draws, give identical results — down to every message the receiver gets.

Parties run with ``[testing] fixed_rng_key`` so the test can rebuild each party's randomness exactly as
the daemon derives it (parties/daemon.py: noise per step, protocol stream per session)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import SessionOptions
from hss.modes import TermsBatch, reveal_mode
from hss.randomness import SecureRandom, derive_key
from hss.runtime import run_in_memory
from hss.session import PartyContext, SessionParams, key_setup
from parties.analyses import Dataset
from parties.registry import get_analysis
from tests.parties.helpers import coordinator_for, gaussian_terms, inproc_consortium, party_data

SID = bytes(range(16))


def reference(
    mode: str,
    m: int,
    t: int,
    data: list[np.ndarray],
    keys: dict[int, bytes],
    batches: list[dict[str, np.ndarray]],
    params: dict[str, object],
    precompute: str = "inline",
) -> list[tuple[object, list]]:
    sp = SessionParams(m=m, t=t, session_id=SID)
    proto = {j: SecureRandom(derive_key(keys[j], SID, b"protocol")) for j in keys}
    pkeys, _ = run_in_memory({j: key_setup(sp, j, proto[j]) for j in keys})
    ctx = {j: PartyContext(sp, pkeys[j]) for j in keys}
    out = []
    for step, inputs in enumerate(batches, start=1):
        n = len(inputs["theta"])
        machines = {}
        for j in keys:
            noise_key = derive_key(keys[j], SID, b"noise")
            rng = SecureRandom(derive_key(noise_key, SID, b"step/%d" % step))
            analysis = get_analysis("gaussian-mean", params)  # the analysis the daemons serve by that name
            terms = analysis.terms(Dataset({"x": data[j - 1]}), inputs, n, m, mode, rng)
            batch = TermsBatch(
                terms.values, terms.public, step, proto[j], blind=terms.blind, precompute=precompute
            )
            machines[j] = reveal_mode(mode).machine(ctx[j], batch)
        _, tr = run_in_memory(machines)
        last = tr.to_receiver[-1]
        last = tr.to_receiver[-1]
        out.append((reveal_mode(mode).decode(sp, last, n, step, "semi-honest"), last))
    return out


@pytest.mark.parametrize("topology", ["mesh", "relay"])
@pytest.mark.parametrize("mode", ["sum", "blinded", "sign", "sign-pooled"])
def test_grpc_matches_in_memory(tmp_path: Path, mode: str, topology: str) -> None:
    mode, precompute = ("sign", "pooled") if mode == "sign-pooled" else (mode, "inline")
    m, t, n = 3, 1, 16
    data = party_data(m, 30, seed=5)
    keys = {j: bytes([j]) * 32 for j in range(1, m + 1)}
    params: dict[str, object] = {"model_args": {"sigma": 1.0}}
    rng = np.random.default_rng(1)
    batches = []
    for _ in range(2):
        th = rng.normal(1, 0.3, n)
        batches.append(
            {"theta": th, "theta_star": th + rng.normal(0, 0.2, n), "public": rng.normal(0, 0.1, n)}
        )
    ref = reference(mode, m, t, data, keys, batches, params, precompute)

    async def main() -> list[tuple[object, object]]:
        async with (
            inproc_consortium(tmp_path, m, data, fixed_keys=keys) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(SessionOptions(
                reveal_mode=mode,
                model="gaussian-mean",
                model_params=params,
                t=t,
                topology=topology,
                session_id=SID,
                sign_precompute=precompute,
            ))
            got = []
            for b in batches:
                tr = await sess.evaluate_transcript(b, n)
                inbox = {j: msgs[-1][1] for j, msgs in tr.messages.items()}
                got.append((sess.spec.protocol.decode(sess.spec.params(), inbox, n, tr.step), inbox))
            await sess.close()
            return got

    got = asyncio.run(main())
    for (d_ref, inbox_ref), (d_got, inbox_got) in zip(ref, got, strict=True):
        np.testing.assert_array_equal(d_ref.accept, d_got.accept)  # type: ignore[attr-defined]
        if d_ref.revealed is not None:  # type: ignore[attr-defined]
            np.testing.assert_array_equal(d_ref.revealed, d_got.revealed)  # type: ignore[attr-defined]
        for j in inbox_ref:  # type: ignore[union-attr]
            np.testing.assert_array_equal(inbox_ref[j], inbox_got[j])  # type: ignore[index]


def test_sum_without_noise_reveals_the_pooled_log_ratio(tmp_path: Path) -> None:
    m, n = 4, 8
    data = party_data(m, 25, seed=9)
    th, ts = np.zeros(n), np.linspace(-1, 2, n)

    async def main() -> np.ndarray:
        async with (
            inproc_consortium(tmp_path, m, data) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(SessionOptions(
                reveal_mode="sum", model="gaussian-mean", model_params={"noise": "none"}
            ))
            d = await sess.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(n)}, n)
            await sess.close()
            assert d.revealed is not None
            return d.revealed

    revealed = asyncio.run(main())
    exact = sum(gaussian_terms(x, th, ts) for x in data)
    np.testing.assert_allclose(revealed, exact, atol=m * 2.0**-20)


def test_sign_receiver_sees_only_masked_bit_shares(tmp_path: Path) -> None:
    """In sign mode each party sends the receiver exactly one message, in the last round, of one field
    element per decision; each alone looks uniform (masked), and their sum is the accept bit."""
    m, n = 3, 64
    data = party_data(m, 20, seed=2)
    rng = np.random.default_rng(3)
    th = rng.normal(1, 0.2, n)

    async def main() -> object:
        async with (
            inproc_consortium(tmp_path, m, data) as (_, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(
                SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params={})
            )
            tr = await sess.evaluate_transcript(
                {"theta": th, "theta_star": th + rng.normal(0, 0.2, n), "public": np.zeros(n)}, n
            )
            await sess.close()
            return tr

    tr = asyncio.run(main())
    rounds = {msgs[0][0] for msgs in tr.messages.values()}  # type: ignore[attr-defined]
    assert all(len(msgs) == 1 for msgs in tr.messages.values())  # type: ignore[attr-defined]
    assert rounds == {tr.rounds}  # type: ignore[attr-defined]
    for msgs in tr.messages.values():  # type: ignore[attr-defined]
        payload = msgs[0][1]
        assert payload.size == 2 * n
        hi = payload[1::2]
        # a masked share of a bit is a uniform field element: its high word is almost never 0
        assert np.count_nonzero(hi) >= n - 2
