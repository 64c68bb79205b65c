"""The transport-agnostic runner (parties.exchange.drive) against hss.runtime.run_in_memory, and the
mailbox's refusals."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from hss.modes import TermsBatch, reveal_mode
from hss.randomness import SecureRandom
from hss.runtime import RECEIVER, Machine, PartyGen, run_in_memory
from hss.session import PartyContext, SessionParams, key_setup
from parties.exchange import LinkLost, Mailbox, Refused, run_local
from proto.records import Frame, Kind


def toy_machine(me: int, m: int, secret: np.ndarray, rng: np.random.Generator) -> Machine[None]:
    """Round 1: additively share ``secret`` mod 2^64 among all parties; round 2: send the sum to RECEIVER."""

    def gen() -> PartyGen[None]:
        shares = rng.integers(0, 2**64, size=(m - 1, secret.size), dtype=np.uint64)
        mine = secret - shares.sum(axis=0, dtype=np.uint64)
        others = [j for j in range(1, m + 1) if j != me]
        inbox = yield {j: shares[i] for i, j in enumerate(others)}
        total = mine + sum((inbox[j] for j in others), start=np.zeros_like(secret))
        yield {RECEIVER: total}
        return None

    return Machine(me, gen(), "toy-sum")


@pytest.mark.parametrize("symmetric", [False, True])
def test_toy_protocol_matches_in_memory(symmetric: bool) -> None:
    m = 4
    secrets = {j: np.arange(5, dtype=np.uint64) * np.uint64(j) for j in range(1, m + 1)}
    _, tr = run_in_memory({j: toy_machine(j, m, secrets[j], np.random.default_rng(j)) for j in secrets})
    _, rec = asyncio.run(
        run_local(
            {j: toy_machine(j, m, secrets[j], np.random.default_rng(j)) for j in secrets}, symmetric=symmetric
        )
    )
    assert len(rec) == len(tr.to_receiver) == 1
    for j in secrets:
        np.testing.assert_array_equal(rec[0][j], tr.to_receiver[0][j])
    total = sum(rec[0].values(), start=np.zeros(5, dtype=np.uint64))
    np.testing.assert_array_equal(total, sum(secrets.values(), start=np.zeros(5, dtype=np.uint64)))


def _keys(params: SessionParams, m: int, seed: bytes) -> dict[int, SecureRandom]:
    return {j: SecureRandom.from_key(bytes([j]) * 16 + seed[:16]) for j in range(1, m + 1)}


@pytest.mark.parametrize("mode", ["sum", "blinded", "sign"])
def test_hss_protocols_identical_over_run_local(mode: str) -> None:
    m, n = 5, 20
    params = SessionParams(m=m, t=2, session_id=b"c" * 16)
    vals = {j: np.random.default_rng(j).normal(0, 3, n) for j in range(1, m + 1)}
    blind = {j: np.random.default_rng(100 + j).gamma(1 / m, size=n) for j in range(1, m + 1)}

    def machines(rngs: dict[int, SecureRandom], keys: dict[int, object]) -> dict[int, Machine[object]]:
        return {
            j: reveal_mode(mode).machine(
                PartyContext(params, keys[j]),  # type: ignore[arg-type]
                TermsBatch(vals[j], None, 3, rngs[j], blind=blind[j]),
            )
            for j in rngs
        }

    r1 = _keys(params, m, b"x" * 16)
    keys1, _ = run_in_memory({j: key_setup(params, j, r1[j]) for j in r1})
    _, tr = run_in_memory(machines(r1, keys1))
    r2 = _keys(params, m, b"x" * 16)
    keys2, _ = asyncio.run(run_local({j: key_setup(params, j, r2[j]) for j in r2}, step=0))
    _, rec = asyncio.run(run_local(machines(r2, keys2), step=3, symmetric=True))
    assert len(rec) == len(tr.to_receiver)
    for j in range(1, m + 1):
        np.testing.assert_array_equal(rec[-1][j], tr.to_receiver[-1][j])
    d1 = reveal_mode(mode).decode(params, tr.to_receiver[-1], n, 1, "semi-honest")
    d2 = reveal_mode(mode).decode(params, rec[-1], n, 1, "semi-honest")
    np.testing.assert_array_equal(d1.accept, d2.accept)


def test_asymmetric_protocol_in_symmetric_mode_fails_loudly() -> None:
    m = 3
    params = SessionParams(m=m, t=1, session_id=b"k" * 16)
    with pytest.raises(Exception, match=r"expected keys|no message|not symmetric"):
        asyncio.run(
            run_local(
                {j: key_setup(params, j, SecureRandom.from_os()) for j in range(1, m + 1)},
                step=0,
                symmetric=True,
                timeout_s=0.5,
            )
        )


def _deliver(box: Mailbox, f: Frame) -> str:
    try:
        asyncio.run(box.deliver(f))
        return ""
    except Refused as exc:
        return exc.reason


def test_mailbox_refusals() -> None:
    p = np.zeros(2, dtype=np.uint64)
    box = Mailbox(me=2, m=3, max_payload_bytes=64, first_step=1)
    assert _deliver(box, Frame(1, 1, 2, 2, Kind.DATA, p)).startswith("frame from party 2")  # from self
    assert "not a peer" in _deliver(box, Frame(1, 1, 4, 2, Kind.DATA, p))
    assert "addressed to party 3" in _deliver(box, Frame(1, 1, 1, 3, Kind.DATA, p))
    assert "finished step 0" in _deliver(box, Frame(0, 1, 1, 2, Kind.DATA, p))
    assert "out of order" in _deliver(box, Frame(5, 1, 1, 2, Kind.DATA, p))
    assert "out of range" in _deliver(box, Frame(1, 0, 1, 2, Kind.DATA, p))
    assert "too far ahead" in _deliver(box, Frame(1, 9, 1, 2, Kind.DATA, p))
    assert "exceeds" in _deliver(box, Frame(1, 1, 1, 2, Kind.DATA, np.zeros(100, dtype=np.uint64)))
    assert "not valid" in _deliver(box, Frame(1, 1, 1, 2, Kind.HELLO))
    assert _deliver(box, Frame(1, 1, 1, 2, Kind.DATA, p)) == ""
    assert "duplicate" in _deliver(box, Frame(1, 1, 1, 2, Kind.DATA, p))

    async def collect() -> dict[int, Frame]:
        await box.deliver(Frame(1, 1, 3, 2, Kind.EMPTY))
        return await box.collect(1, 1, {1, 3}, time.monotonic() + 1)

    got = asyncio.run(collect())
    assert set(got) == {1, 3}
    assert "replayed" in _deliver(box, Frame(1, 1, 1, 2, Kind.DATA, p))
    asyncio.run(box.finish(1))
    assert "finished step 1" in _deliver(box, Frame(1, 2, 1, 2, Kind.DATA, p))
    assert _deliver(box, Frame(1, 2, 1, 2, Kind.DONE)) == ""  # silent: expected end-of-run notice
    assert box.refused == 0  # counting is the daemon's job


def test_mailbox_deadline_and_lost_link_name_the_party() -> None:
    box = Mailbox(me=1, m=3, first_step=1)

    async def wait() -> None:
        await box.collect(1, 1, {2, 3}, time.monotonic() + 0.1)

    with pytest.raises(LinkLost, match="step 1 round 1: no message from parties 2, 3"):
        asyncio.run(wait())

    async def lost() -> None:
        await box.lose(3, "connection reset")
        await box.collect(1, 1, {2, 3}, time.monotonic() + 5)

    with pytest.raises(LinkLost, match="party 3 lost"):
        asyncio.run(lost())


def test_mailbox_wakes_the_collector_on_the_round_s_last_frame_or_a_missing_link_lost() -> None:
    """A waiting collect returns once every sender's frame of its round is in (frames of other rounds and
    steps, and a lost link whose frame already arrived, do not end it early); a lost link whose frame is
    missing ends it at once, naming the party."""
    p = np.zeros(1, dtype=np.uint64)

    async def scenario() -> dict[int, Frame]:
        box = Mailbox(me=1, m=4, first_step=1)
        waiting = asyncio.ensure_future(box.collect(1, 1, {2, 3, 4}, time.monotonic() + 5))
        await asyncio.sleep(0)
        await box.deliver(Frame(1, 1, 2, 1, Kind.DATA, p))
        await box.deliver(Frame(1, 2, 3, 1, Kind.DATA, p))  # next round: not this one
        await box.lose(2, "reset after its frame")  # its frame is in: the round can still complete
        await box.deliver(Frame(1, 1, 3, 1, Kind.DATA, p))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await box.deliver(Frame(1, 1, 4, 1, Kind.DATA, p))
        return await waiting

    got = asyncio.run(scenario())
    assert sorted(got) == [2, 3, 4] and all(f.round == 1 for f in got.values())

    async def lost_while_waiting() -> None:
        box = Mailbox(me=1, m=4, first_step=1)
        waiting = asyncio.ensure_future(box.collect(1, 1, {2, 3, 4}, time.monotonic() + 30))
        await asyncio.sleep(0)
        await box.deliver(Frame(1, 1, 2, 1, Kind.DATA, p))
        await box.lose(4, "connection reset")
        await asyncio.wait_for(waiting, 5)  # woken by the loss, not by the 30 s deadline

    with pytest.raises(LinkLost, match="link to party 4 lost \\(connection reset\\)"):
        asyncio.run(lost_while_waiting())


def test_link_channel_is_fifo_and_wakes_its_one_reader() -> None:
    """parties.links.Channel, what a link's writer reads its frames from: items in order, a waiting get
    woken by the next put, get_nowait IndexError when empty, a second concurrent reader refused."""
    from parties.links import Channel

    async def scenario() -> list[object]:
        ch: Channel[object] = Channel()
        assert ch.empty()
        with pytest.raises(IndexError):
            ch.get_nowait()
        reader = asyncio.ensure_future(ch.get())
        await asyncio.sleep(0)
        assert not reader.done()
        with pytest.raises(RuntimeError, match="another reader"):
            await ch.get()
        ch.put_nowait("a")
        ch.put_nowait("b")
        ch.put_nowait(None)
        first = await asyncio.wait_for(reader, 1)
        rest = [ch.get_nowait()]
        rest.append(await ch.get())
        assert ch.empty()
        cancelled = asyncio.ensure_future(ch.get())
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        ch.put_nowait("c")  # no reader left waiting: kept for the next get
        return [first, *rest, await ch.get()]

    assert asyncio.run(scenario()) == ["a", "b", None, "c"]
