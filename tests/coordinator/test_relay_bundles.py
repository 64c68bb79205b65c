"""The relay's bundles (one PeerBundle per party per round each way): the bundle structure the relaying
coordinator sees is independent of the parties' secrets, every party sends and receives one bundle per
round, and frames outside the symmetric pattern are never held back."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import numpy as np

from coordinator.api import SessionOptions
from coordinator.relay import RelayHub, RelayRecord, _Dest
from proto import peer_pb2, relay_pb2
from proto.records import Kind
from proto.spec import PartyEntry, SessionSpec
from tests.parties.helpers import coordinator_for, inproc_consortium

SID = b"\x07" * 16


def relay_view(root: Path, data: list[np.ndarray], mode: str, m: int) -> list[RelayRecord]:
    seen: list[RelayRecord] = []
    n = 8
    th = np.linspace(0.5, 1.5, n)

    async def main() -> None:
        async with (
            inproc_consortium(root, m, data) as (_, eps, certs),
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


def bundle_shape(view: list[RelayRecord]) -> list[tuple[int, ...]]:
    return sorted(
        (r.step, r.round, r.src, r.dst, r.kind, len(r.payload), len(r.nonce), r.bundle_in, r.bundle_out)
        for r in view
    )


def test_bundles_are_independent_of_the_secrets_and_one_per_party_per_round(tmp_path: Path) -> None:
    m = 4
    rng = np.random.default_rng(1)
    low = [rng.normal(-5, 1, 30) for _ in range(m)]
    high = [rng.normal(40, 10, 30) for _ in range(m)]
    for mode in ("blinded", "sign"):
        v1 = relay_view(tmp_path / f"a-{mode}", low, mode, m)
        v2 = relay_view(tmp_path / f"b-{mode}", high, mode, m)
        assert v1 and bundle_shape(v1) == bundle_shape(v2)
        for view in (v1, v2):
            rounds_up: dict[tuple[int, int], set[int]] = defaultdict(set)
            rounds_down: dict[tuple[int, int], set[int]] = defaultdict(set)
            bundles_up: dict[tuple[int, int], set[int]] = defaultdict(set)
            bundles_down: dict[tuple[int, int], set[int]] = defaultdict(set)
            for r in view:
                rounds_up[(r.src, r.step)].add(r.round)
                rounds_down[(r.dst, r.step)].add(r.round)
                bundles_up[(r.src, r.step)].add(r.bundle_in)
                bundles_down[(r.dst, r.step)].add(r.bundle_out)
            for key, rounds in rounds_up.items():
                assert len(bundles_up[key]) == len(rounds), f"upstream bundles of party/step {key}"
            for key, rounds in rounds_down.items():
                assert len(bundles_down[key]) == len(rounds), f"downstream bundles of party/step {key}"
            per_bundle: dict[tuple[int, int], int] = defaultdict(int)
            for r in view:
                per_bundle[(r.dst, r.bundle_out)] += 1
            assert set(per_bundle.values()) == {m - 1}  # every bundle carries a frame from each peer


def _hub(m: int) -> tuple[RelayHub, list[RelayRecord]]:
    seen: list[RelayRecord] = []
    hub = RelayHub(insecure=True, observer=seen.append)
    spec = SessionSpec(
        session_id=SID,
        parties=tuple(PartyEntry(p, f"party-{p}", "") for p in range(1, m + 1)),
        t=1,
        reveal_mode="sign",
        model="gaussian-mean",
        model_params={},
        topology="relay",
        relay_address="127.0.0.1:1",
    )
    hub.register(spec)
    for p in range(1, m + 1):
        hub.sessions[SID].dests[p] = _Dest(asyncio.Queue())
    return hub, seen


def _bundle(src: int, step: int, rnd: int, dsts: list[int]) -> relay_pb2.PeerBundle:
    frames = [
        peer_pb2.PeerFrame(session_id=SID, step=step, round=rnd, src=src, dst=d, kind=Kind.DATA, payload=b"x")
        for d in dsts
    ]
    return relay_pb2.PeerBundle(frames=frames)


def _out(hub: RelayHub, p: int) -> list[list[tuple[int, int, int]]]:
    q = hub.sessions[SID].dests[p].queue
    got = []
    while not q.empty():
        b = q.get_nowait()
        assert b is not None
        got.append([(int(f.step), int(f.round), int(f.src)) for f in b.frames])
    return got


def test_a_party_gets_its_round_once_every_peer_it_addressed_has_sent() -> None:
    hub, _ = _hub(3)
    rs = hub.sessions[SID]
    hub._route(rs, 2, 1, _bundle(2, 1, 1, [1, 3]))
    hub._route(rs, 3, 1, _bundle(3, 1, 1, [1, 2]))
    assert _out(hub, 1) == []  # party 1 has not sent its round yet: it cannot be waiting
    assert _out(hub, 2) == []  # party 1's frame for party 2 is missing
    hub._route(rs, 1, 1, _bundle(1, 1, 1, [2, 3]))
    assert _out(hub, 1) == [[(1, 1, 2), (1, 1, 3)]]
    assert _out(hub, 2) == [[(1, 1, 3), (1, 1, 1)]]
    assert _out(hub, 3) == [[(1, 1, 2), (1, 1, 1)]]


def test_frames_outside_the_symmetric_pattern_are_not_held() -> None:
    hub, _ = _hub(3)
    rs = hub.sessions[SID]
    hub._route(rs, 1, 1, _bundle(1, 1, 1, [2]))  # party 1 addresses only party 2
    hub._route(rs, 3, 1, _bundle(3, 1, 1, [1, 2]))  # ... but party 3 addresses party 1
    assert _out(hub, 1) == [[(1, 1, 3)]]  # a stray frame goes out at once: party 1 reports it


def test_held_frames_go_out_when_their_party_moves_on() -> None:
    hub, _ = _hub(3)
    rs = hub.sessions[SID]
    hub._route(rs, 3, 1, _bundle(3, 1, 1, [1, 2]))  # party 3 waits for frames from 1 and 2
    hub._route(rs, 2, 1, _bundle(2, 1, 1, [3]))
    assert _out(hub, 3) == []  # party 1's frame is missing: held
    hub._route(rs, 3, 2, _bundle(3, 1, 2, [2]))  # party 3 is at round 2: round 1 is over for it
    assert _out(hub, 3) == [[(1, 1, 2)]]


def test_refused_frames_are_counted_and_not_forwarded() -> None:
    hub, seen = _hub(3)
    rs = hub.sessions[SID]
    forged = peer_pb2.PeerFrame(session_id=SID, step=1, round=1, src=2, dst=3, kind=Kind.DATA, payload=b"x")
    other = peer_pb2.PeerFrame(session_id=b"\x08" * 16, step=1, round=1, src=1, dst=3, kind=Kind.DATA)
    to_self = peer_pb2.PeerFrame(session_id=SID, step=1, round=1, src=1, dst=1, kind=Kind.DATA)
    hub._route(rs, 1, 1, relay_pb2.PeerBundle(frames=[forged, other, to_self]))
    assert hub.refused == 3 and not seen
    assert all(_out(hub, p) == [] for p in (1, 2, 3))
