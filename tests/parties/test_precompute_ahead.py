"""precompute_ahead (issue 16, ``parties.ahead``) through real gRPC daemons, mesh and relay: each party makes
step k + 1's sign precompute right after answering step k, so step k + 1's Evaluate runs only the online
rounds. The decisions are exactly the plaintext decisions (and those of the same session without the option),
a changed batch size falls back to the in-step precompute, a link probe discards the material, session close
with a pool pending leaves no task behind, and a peer lost mid-precompute ends the session with a named
error."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.api import SessionError, SessionOptions
from hss.abort_modes import SIGN_MASK_ROUNDS
from hss.modes import reveal_mode
from hss.protocols import plaintext_decisions
from hss.randomness import SecureRandom, derive_key
from parties import ahead
from parties.analyses import Dataset
from parties.registry import get_analysis
from proto.spec import FixedPoint, SessionSpec, SpecError
from tests.parties.helpers import coordinator_for, inproc_consortium, party_data
from tests.parties.test_transport_contract import SID

PARAMS: dict[str, object] = {"model_args": {"sigma": 1.0}}


def _batches(sizes: list[int], seed: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        th = rng.normal(1, 0.3, n)
        out.append({"theta": th, "theta_star": th + rng.normal(0, 0.2, n), "public": rng.normal(0, 0.1, n)})
    return out


def _plaintext(m: int, data: list[np.ndarray], keys: dict[int, bytes], batches: list[Any]) -> list[Any]:
    """The decisions in the clear, with each party's noise drawn as the daemons draw it (fixed keys)."""
    out = []
    for step, inputs in enumerate(batches, start=1):
        n = len(inputs["theta"])
        values, public = [], None
        for j in keys:
            noise_key = derive_key(keys[j], SID, b"noise")
            rng = SecureRandom(derive_key(noise_key, SID, b"step/%d" % step))
            terms = get_analysis("gaussian-mean", PARAMS).terms(
                Dataset({"x": data[j - 1]}), inputs, n, m, "sign", rng
            )
            values.append(terms.values)
            public = terms.public
        out.append(plaintext_decisions(values, public, FixedPoint()))
    return out


def _evaluate_lines(root: Path, pid: int) -> list[dict[str, Any]]:
    lines = (root / f"party-{pid}" / "state" / "audit.log").read_text().splitlines()
    return [rec for rec in map(json.loads, lines) if rec.get("what") == "Evaluate"]


def _pool_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("precompute-ahead") and not t.done()]


@pytest.mark.parametrize(
    ("topology", "precompute", "security"),
    [
        ("mesh", "blocks4", "semi-honest"),
        ("mesh", "inline", "semi-honest"),
        ("relay", "blocks4", "semi-honest"),
        ("relay", "inline", "semi-honest"),
        ("mesh", "prefix", "semi-honest"),  # the carry over blocks in one round: 3 online rounds
        ("mesh", "inline", "abort"),  # the mask made ahead and checked (hss.abort_sign.precompute_sign_abort)
    ],
)
def test_ahead_gives_the_plaintext_decisions(
    tmp_path: Path, topology: str, precompute: str, security: str
) -> None:
    m, t = 3, 1
    data = party_data(m, 30, seed=5)
    keys = {j: bytes([j]) * 32 for j in range(1, m + 1)}
    sizes = [16, 16, 16, 9, 9]  # step 4 asks another batch size: the pool (made for 16) is discarded
    batches = _batches(sizes)
    want = _plaintext(m, data, keys, batches)

    async def main() -> tuple[list[Any], list[Any], list[int]]:
        async with (
            inproc_consortium(tmp_path, m, data, fixed_keys=keys) as (daemons, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(
                SessionOptions(
                    reveal_mode="sign",
                    model="gaussian-mean",
                    model_params=PARAMS,
                    t=t,
                    topology=topology,
                    session_id=SID,
                    sign_precompute=precompute,
                    precompute_ahead=True,
                    security=security,
                )
            )
            assert sess.spec.precompute_ahead
            # made ahead: the pool's rounds, then the online ones (abort: the terms dealt in a round of their
            # own; prefix: c opened in a round of its own); in the step: the mode's rounds without ahead
            params = sess.spec.params()
            total = sess.spec.protocol.rounds(params)
            pre = SIGN_MASK_ROUNDS if security == "abort" else params.sign_rounds_with(precompute)[0]
            rounds_of = (pre, total - pre)
            in_step = reveal_mode("sign").under(security, precompute).rounds(params)
            got, receiver_rounds = [], []
            for step, (b, n) in enumerate(zip(batches, sizes, strict=True), start=1):
                tr = await sess.evaluate_transcript(b, n)
                receiver_rounds.append(max(msgs[-1][0] for msgs in tr.messages.values()))
                got.append(await_decisions(sess, tr, n, step))
            await sess.close()
            for d in daemons:  # closed: no pool task left, no material held
                assert d.sessions[SID].ahead is None
            assert not _pool_tasks()
            return got, [rounds_of, in_step], receiver_rounds

    got, (rounds_of, whole), receiver_rounds = asyncio.run(main())
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w, g)
    pre, online = rounds_of  # whole: the in-step schedule
    # the receiver's message still comes in round pre + online of the step (the pool ran rounds 1..pre);
    # the fallback step runs its own precompute after the discarded pool's rounds
    assert receiver_rounds == [whole, pre + online, pre + online, pre + whole, pre + online]
    for pid in range(1, m + 1):
        lines = _evaluate_lines(tmp_path, pid)
        assert [rec["outcome"] for rec in lines] == ["ok"] * len(sizes)
        assert "precompute" not in lines[0] and lines[0]["rounds"] == whole  # step 1: no pool
        for rec in (lines[1], lines[2], lines[4]):  # taken from the pool: the step ran its online rounds only
            assert rec["precompute"] == "pool" and rec["rounds"] == online, rec
            assert rec["precompute_rounds"] == pre
        assert "discarded" in lines[3]["precompute"] and "batch of 16" in lines[3]["precompute"]
        assert lines[3]["rounds"] == whole  # fell back to the in-step precompute


def await_decisions(sess: Any, tr: Any, n: int, step: int = 1) -> Any:
    inbox = {j: msgs[-1][1] for j, msgs in tr.messages.items()}
    return sess.spec.protocol.decode(sess.spec.params(), inbox, n, step).accept


def test_probe_discards_the_pool_and_close_cancels_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = 3
    data = party_data(m, 30, seed=6)
    batches = _batches([8, 8])

    async def main() -> None:
        async with (
            inproc_consortium(tmp_path, m, data) as (daemons, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(
                SessionOptions(
                    reveal_mode="sign",
                    model="gaussian-mean",
                    model_params=PARAMS,
                    sign_precompute="blocks4",
                    precompute_ahead=True,
                )
            )
            sid = sess.spec.session_id
            await sess.evaluate(batches[0], 8)
            await sess.probe_links(3, 4)  # step 2 is a probe: the pool is awaited, then discarded
            await sess.evaluate(batches[1], 8)  # step 3: no pool (a probe does not start one)
            # a pool pending at close: party 3 holds back its pool, so the others' pools wait on it
            real_start = ahead.start

            def start_but_3(party: Any, s: Any, step: int, n: int) -> None:
                if s.me != 3:
                    real_start(party, s, step, n)

            monkeypatch.setattr(ahead, "start", start_but_3)
            await sess.evaluate(batches[1], 8)  # step 4: pools for step 5 start at parties 1 and 2 only
            await asyncio.sleep(0.2)
            pending = [d.sessions[sid].ahead for d in daemons[:2]]
            assert all(a is not None and a.task is not None and not a.task.done() for a in pending)
            await sess.close()
            assert all(d.sessions[sid].ahead is None for d in daemons)
            assert not _pool_tasks()
            # each pool ended: cancelled by its own close, or ended on the link a peer's close dropped first
            assert all(a.task is not None and a.task.done() for a in pending)

    asyncio.run(main())
    for pid in range(1, m + 1):
        lines = _evaluate_lines(tmp_path, pid)
        assert [rec["outcome"] for rec in lines] == ["ok"] * 3
        assert "precompute" not in lines[1]  # step 3 follows the probe: no pool was made for it
        assert lines[2]["precompute"] == "pool"  # step 4's pool, made after step 3


def test_peer_lost_mid_precompute_ends_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = 3
    data = party_data(m, 30, seed=7)
    batches = _batches([8, 8])
    real_start = ahead.start

    def start_but_3(party: Any, s: Any, step: int, n: int) -> None:  # party 3 never sends its pool frames
        if s.me != 3:
            real_start(party, s, step, n)

    monkeypatch.setattr(ahead, "start", start_but_3)

    async def main() -> str:
        async with (
            inproc_consortium(tmp_path, m, data) as (daemons, eps, certs),
            coordinator_for(eps, certs) as coord,
        ):
            sess = await coord.open_session(
                SessionOptions(
                    reveal_mode="sign",
                    model="gaussian-mean",
                    model_params=PARAMS,
                    sign_precompute="blocks4",
                    precompute_ahead=True,
                )
            )
            sid = sess.spec.session_id
            await sess.evaluate(batches[0], 8)
            await asyncio.sleep(0.1)
            killed = daemons.pop()  # party 3 killed while 1 and 2 wait on its precompute frames
            await killed.stop(grace=0.1)
            for _ in range(100):
                if all(d.sessions[sid].state == "failed" for d in daemons[:2]):
                    break
                await asyncio.sleep(0.05)
            assert all(d.sessions[sid].state == "failed" for d in daemons[:2])
            with pytest.raises(SessionError) as exc:
                await sess.evaluate(batches[1], 8)
            assert not _pool_tasks()
            return str(exc.value)

    msg = asyncio.run(main())
    assert msg
    for pid in (1, 2):
        lines = (tmp_path / f"party-{pid}" / "state" / "audit.log").read_text().splitlines()
        recs = [r for r in map(json.loads, lines) if r.get("what") == "PrecomputeAhead"]
        assert len(recs) == 1 and recs[0]["outcome"] == "UNAVAILABLE" and recs[0]["step"] == 2
        assert "precompute ahead" in recs[0]["detail"] and "party 3" in recs[0]["detail"], recs[0]


def test_spec_carries_and_checks_the_option() -> None:
    from proto import serde
    from proto.spec import PartyEntry

    parties = tuple(PartyEntry(j, f"party-{j}", "") for j in (1, 2, 3))
    spec = SessionSpec(
        SID, parties, 1, "sign", "gaussian-mean", sign_precompute="blocks4", precompute_ahead=True
    )
    assert serde.spec_from_proto(serde.spec_to_proto(spec)) == spec
    off = SessionSpec(SID, parties, 1, "sign", "gaussian-mean")
    assert not serde.spec_from_proto(serde.spec_to_proto(off)).precompute_ahead
    with pytest.raises(SpecError, match="precompute_ahead"):
        SessionSpec(SID, parties, 1, "sum", "gaussian-mean", precompute_ahead=True)
    with pytest.raises(SpecError, match="precompute_ahead"):
        SessionSpec(
            SID, parties, 1, "sign", "gaussian-mean", model_params={"lazy": 0.5}, precompute_ahead=True
        )


def test_run_resume_supersedes_a_pending_pool_and_replays(tmp_path: Path) -> None:
    """A run with precompute_ahead: the coordinator "crashes" after run step 3 with step 4's pool pending;
    the next session of the run supersedes the old one (its pool cancelled), replays run step 3 (no pool:
    a replayed step is step 1), computes run step 4 with its own precompute and run step 5 from the pool.
    Every run step is charged once."""
    from tests.parties.test_resume import Consortium, M, N, _decode, _inputs, _open, _steps

    run = "ahead-run"

    async def main() -> None:
        lc = Consortium(tmp_path)
        await lc.start()
        try:
            async with lc.coordinator() as c1:
                s1 = await _open(c1, run, sign_precompute="blocks4", precompute_ahead=True)
                first = await _steps(s1, range(1, 4))
                old = s1.spec.session_id
                await asyncio.sleep(0.1)
                assert all(d.sessions[old].ahead is not None for d in lc.daemons)  # step 4's pool
            async with lc.coordinator() as c2:  # s1 was never closed: superseded at open
                s2 = await _open(c2, run, 3, sign_precompute="blocks4", precompute_ahead=True)
                assert all(d.sessions[old].state == "closed" for d in lc.daemons)
                assert all(d.sessions[old].ahead is None for d in lc.daemons)
                assert not _pool_tasks()
                tr = await s2.evaluate_transcript(_inputs(3), N)
                assert tr.replayed and np.array_equal(_decode(s2, tr), first[-1])
                await _steps(s2, range(4, 6))
                await s2.close()
            for pid in range(1, M + 1):
                assert lc.charges(pid, run) == {s: 1 for s in range(1, 6)}
                ev = [x for x in lc.audit(pid) if x["what"] == "Evaluate"]
                assert [x.get("precompute") for x in ev] == [None, "pool", "pool", None, None, "pool"]
                assert ev[3]["replayed"]
        finally:
            await lc.stop()

    asyncio.run(main())


def test_mailbox_lookahead_keeps_the_next_steps_frames() -> None:
    """A peer that answered step k sends step k + 1's precompute while this party still collects step k: with
    lookahead the mailbox keeps those frames (and no later step's); without it they are out of order."""
    from parties.exchange import Mailbox, Refused
    from proto.records import Frame, Kind

    def data(step: int, rnd: int, src: int = 2) -> Frame:
        return Frame(step, rnd, src, 1, Kind.DATA, np.zeros(2, dtype=np.uint64))

    async def main() -> None:
        plain = Mailbox(me=1, m=3, first_step=1)
        with pytest.raises(Refused, match="out of order"):
            plain.check(data(2, 1))
        box = Mailbox(me=1, m=3, first_step=1, lookahead=True)
        await box.deliver(data(2, 1))  # step 2's precompute, while step 1 is being collected
        with pytest.raises(Refused, match="out of order"):
            box.check(data(3, 1))  # never more than the step after the next
        await box.deliver(data(1, 1))
        await box.deliver(data(1, 1, 3))
        got = await box.collect(1, 1, {2, 3}, time.monotonic() + 1)
        assert sorted(got) == [2, 3]
        assert await box.finish(1) == []  # step 2's frame is not a stray of step 1: it stays
        await box.deliver(data(2, 1, 3))
        got = await box.collect(2, 1, {2, 3}, time.monotonic() + 1)
        assert sorted(got) == [2, 3]
        await box.deliver(data(3, 1))  # now step 3 is the step after the next
        with pytest.raises(Refused, match="replayed"):
            box.check(data(2, 1))

    asyncio.run(main())
