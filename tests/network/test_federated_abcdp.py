"""Federated ABCDP over the party network (reveal mode ``svt``, analysis ``abcdp-rff``): real confar-party
processes (m = 3, mesh; one run over the relay; mutual TLS, ephemeral loopback ports via LocalConsortium)
driven by ``coordinator.abcdp``, and ``confar simulate --sampler abcdp``.

* without noise (eps_total = inf) the federated run makes exactly the decisions of single-owner rejection ABC
  (``mechanisms.abcdp.svt`` with infinite epsilon) on the same candidate stream: same revealed bits, same
  accepted candidates, with and without RESAMPLE (suppressed candidates re-evaluated);
* with noise: exactly c accepts; the bits equal the float reference rebuilt from every party's own noise
  (``fixed_rng_keys``); each party's ledger holds the run's epsilon once; a further Evaluate is refused
  ("c accepts reached"); the coordinator's transcript holds one masked message per party that opens to bits;
  a run past the budget is refused at open, and at the first step when another run took the budget meanwhile,
  before any record is read; bad model_params are refused naming the key.
The analysis' checks and the plan's collusion reason, which need no daemon, are
tests/parties/test_federated_abcdp.py."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest

from coordinator.abcdp import FederatedRunOptions, charged_epsilons, run_federated_abcdp, session_params
from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from hss import field as F
from hss.primitives import receive_opened
from hss.randomness import SecureRandom, derive_key
from mechanisms.abcdp.candidates import CandidateQueue, reference_decisions
from mechanisms.abcdp.federated import (
    FederatedSvtPlan,
    candidate_embeddings,
    distances_from_sum,
    party_feature_sum,
)
from mechanisms.abcdp.svt import run_svt_on_distances
from mechanisms.abcdp.svt_state import PartySvtState
from mechanisms.privacy import EpsDeltaBudget, EpsDeltaEvent
from mechanisms.simulators.toy import ToyMixtureModel
from parties.abcdp import tolerated_colluders
from simulations.launcher import LocalConsortium

M, PER_PARTY, N_SIM, D, BATCH = 3, 200, 200, 20, 16
N = M * PER_PARTY
THETA_TRUE = np.array([0.25, 0.04, 0.33, 0.04, 0.34])
MODEL = ToyMixtureModel()
KEYS = {pid: bytes([0x40 + pid]) * 32 for pid in range(1, M + 1)}
BUDGET_EPS, BUDGET_DELTA = 10.0, 1e-6


def _observed() -> list[npt.NDArray[np.float64]]:
    y = MODEL.simulate(THETA_TRUE, N, np.random.default_rng(11))[0]
    return list(np.array_split(y, M))


def _prior(g: np.random.Generator, k: int) -> npt.NDArray[np.float64]:
    return MODEL.sample_prior(g, k)


def _simulate(thetas: npt.NDArray[np.float64], g: np.random.Generator) -> npt.NDArray[np.float64]:
    return MODEL.simulate(thetas, N_SIM, g)


def _stream(
    plan: FederatedSvtPlan, seed: int, blocks: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The driver's candidate stream: blocks of BATCH from the public generator (coordinator.abcdp)."""
    rng = np.random.default_rng(seed)
    th, ph = [], []
    for _ in range(blocks):
        t = _prior(rng, BATCH)
        th.append(t)
        ph.append(candidate_embeddings(plan, _simulate(t, rng)))
    return np.concatenate(th), np.concatenate(ph)


def _plan(eps_total: float, c: int, resample: bool, seed: int, quantile: float) -> FederatedSvtPlan:
    """A plan whose eps_abc is the given quantile of the first candidates' distances (public choice)."""
    base = FederatedSvtPlan(
        eps_abc=0.0,
        eps_total=eps_total,
        c=c,
        resample=resample,
        n_records=N,
        n_features=D,
        bandwidth=0.6,
        dim=1,
        map_seed=5,
    )
    total = sum(party_feature_sum(base, y[:, None]) for y in _observed())
    rho = distances_from_sum(base, total, _stream(base, seed, 4)[1])
    return dataclasses.replace(base, eps_abc=float(np.quantile(rho, quantile)))


def _events(coord: BlockingCoordinator) -> dict[int, list[dict[str, Any]]]:
    from proto import party_pb2

    answers = coord._run(
        coord.coord.call_all("report", lambda _: party_pb2.PrivacyReportRequest(), "PrivacyReport")
    )
    return {pid: json.loads(r.events_json or "[]") for pid, r in answers.items()}


def test_no_noise_equals_single_owner_rejection_abc(tmp_path: Path) -> None:
    """eps_total = inf: the revealed bits are those of plain rejection ABC stopped at c accepts (mesh without
    RESAMPLE; the relay topology with RESAMPLE, where suppressed candidates are sent again)."""
    data = [{"y": y} for y in _observed()]
    total = sum(party_feature_sum(_plan(math.inf, 1, False, 1, 0.1), y[:, None]) for y in _observed())
    with LocalConsortium.start(
        M, data, workdir=tmp_path, models=("abcdp-rff",), modes=("svt",), startup_timeout_s=120.0
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            for resample, seed, topology in ((False, 21, "mesh"), (True, 22, "relay")):
                plan = _plan(math.inf, 4, resample, seed, 0.12)
                res = run_federated_abcdp(
                    coord,
                    plan,
                    _prior,
                    _simulate,
                    BATCH,
                    seed,
                    FederatedRunOptions(
                        columns=["y"],
                        topology=topology,
                    ),
                )
                assert res.done and res.n_accepted == plan.c
                thetas, phibar = _stream(plan, seed, res.n_proposed // BATCH)
                rho = distances_from_sum(plan, total, phibar)
                ref, _ = run_svt_on_distances(rho, plan.svt_config(), np.random.default_rng(0))
                # fixed-point decisions equal the real-valued ones away from ties: check the margin
                assert np.min(np.abs(rho[: ref.shape[0]] - plan.eps_abc)) > plan.svt_format(M).margin(M)
                np.testing.assert_array_equal(res.decisions, ref)
                np.testing.assert_array_equal(res.decided_ids, np.arange(ref.shape[0]))
                np.testing.assert_array_equal(res.accepted_ids, np.flatnonzero(ref))
                np.testing.assert_array_equal(res.thetas, thetas[np.flatnonzero(ref)])
                if resample:  # with RESAMPLE a batch reveals up to its first accept: the rest go again
                    assert res.n_sent > res.n_evaluated


def test_noisy_run_budget_and_refusals(tmp_path: Path) -> None:
    seed, c = 31, 3
    plan = _plan(2.0, c, False, seed, 0.1)
    colluding = tolerated_colluders(plan, M, (M - 1) // 2)
    data = [{"y": y} for y in _observed()]
    budget = {"epsilon": BUDGET_EPS, "delta": BUDGET_DELTA, "colluding": colluding}
    with LocalConsortium.start(
        M,
        data,
        workdir=tmp_path,
        models=("abcdp-rff",),
        modes=("svt",),
        privacy_budget=budget,
        startup_timeout_s=120.0,
        fixed_rng_keys=KEYS,
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            # 1. a run through the driver: exactly c accepts, bits = the float reference of the parties' noise
            sid = b"abcdp-run-0001" + bytes(2)
            seen: list[int] = []
            res = run_federated_abcdp(
                coord,
                plan,
                _prior,
                _simulate,
                BATCH,
                seed,
                FederatedRunOptions(
                    columns=["y"],
                    session_id=sid,
                    progress=lambda p: seen.append(p.accepted),
                ),
            )
            assert res.done and res.n_accepted == c and int(res.decisions.sum()) == c
            assert seen and seen[-1] == c and seen == sorted(seen)
            _check_against_reference(plan, sid, seed, res.decisions, res.decided_ids)
            charged = charged_epsilons(coord, sid)
            assert charged == {pid: pytest.approx(plan.privacy_event().eps) for pid in (1, 2, 3)}
            for pid, evs in _events(coord).items():
                mine = [e for e in evs if sid.hex()[:16] in e["label"]]
                assert len(mine) == 1 and mine[0]["count"] == 1, (pid, evs)  # once, although res.steps > 1
            assert res.steps > 1

            # 2. a session driven by hand: the transcript opens to bits; after c accepts Evaluate is refused
            plan2 = dataclasses.replace(plan, c=1)
            s = coord.open_session(SessionOptions(
                reveal_mode="svt", model="abcdp-rff", model_params=session_params(plan2, ["y"])
            ))
            q = CandidateQueue(plan2)
            th, ph = _stream(plan2, seed + 1, 8)
            q.push(th, ph)
            while not q.done:
                _, batch = q.next_batch(BATCH)
                d = s.evaluate({"phibar": batch}, batch.shape[0])
                tr = s.session.last_transcript
                assert tr is not None and sorted(tr.messages) == [1, 2, 3]
                # one message per party, one field element (2 words) per candidate: nothing but the bits
                assert all(
                    len(msgs) == 1 and msgs[0][1].size == 2 * batch.shape[0] for msgs in tr.messages.values()
                )
                inbox = {pid: msgs[0][1] for pid, msgs in tr.messages.items()}
                opened = F.to_int64(receive_opened(s.spec.params(), inbox, (batch.shape[0],)))
                assert set(np.unique(opened).tolist()) <= {0, 1}
                np.testing.assert_array_equal(opened == 1, d.accept)
                q.settle(d.accept)
            with pytest.raises(SessionError) as ei:
                s.evaluate({"phibar": ph[:BATCH]}, BATCH)
            assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert "c accepts reached" in str(ei.value)
            s.close()

            # 3. bad model_params: refused at open, naming the key
            for bad, key in (({"c": "three"}, "'c'"), ({"noise_level": 1}, "noise_level")):
                with pytest.raises(SessionError) as ei:
                    coord.open_session(SessionOptions(
                        reveal_mode="svt", model="abcdp-rff", model_params={**plan.to_params(), **bad}
                    ))
                assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and key in str(ei.value)
            #    and a malformed first step is refused before the run is charged
            s = coord.open_session(SessionOptions(
                reveal_mode="svt", model="abcdp-rff", model_params=session_params(plan, ["y"])
            ))
            for bad_in in (
                {"phibar": ph[:4, :-1]},
                {"phibar": 2.0 * ph[:4] / np.linalg.norm(ph[:4], axis=1)[:, None]},
            ):
                with pytest.raises(SessionError) as ei:
                    s.evaluate(bad_in, 4)
                assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and "phibar" in str(ei.value)
                s.session.state = (
                    "ready"  # the coordinator marks a session failed on any error; the parties did not
                )
            s.abort("bad inputs")
            assert all(s.session.session_id.hex()[:16] not in json.dumps(e) for e in _events(coord).values())

            # 4. budget: a run that does not fit is refused at open; one that fitted at open but not at its
            #    first step (another run took the budget meanwhile) is refused there, before reading records
            before = _events(coord)
            spent = [EpsDeltaEvent(e["eps"], e["delta"], count=e["count"]) for e in before[1]]
            bud = EpsDeltaBudget(BUDGET_EPS, BUDGET_DELTA)
            big = dataclasses.replace(plan, eps_total=20.0)
            assert bud.spend([*spent, EpsDeltaEvent(20.0)]) > BUDGET_EPS
            with pytest.raises(SessionError) as ei:
                coord.open_session(SessionOptions(
                    reveal_mode="svt", model="abcdp-rff", model_params=session_params(big, ["y"])
                ))
            assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, str(ei.value)
            assert "ABCDP run" in str(ei.value)
            mid = dataclasses.replace(plan, eps_total=4.0)
            assert bud.spend([*spent, EpsDeltaEvent(4.0)]) <= BUDGET_EPS
            assert bud.spend([*spent, EpsDeltaEvent(4.0), EpsDeltaEvent(4.0)]) > BUDGET_EPS
            a = coord.open_session(SessionOptions(
                reveal_mode="svt", model="abcdp-rff", model_params=session_params(mid, ["y"])
            ))
            b = coord.open_session(SessionOptions(
                reveal_mode="svt", model="abcdp-rff", model_params=session_params(mid, ["y"])
            ))
            a.evaluate({"phibar": ph[:4]}, 4)
            with pytest.raises(SessionError) as ei:
                b.evaluate({"phibar": ph[:4]}, 4)
            assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and ei.value.step == 1
            b.abort("refused")
            a.close()
            after = _events(coord)
            for pid in (1, 2, 3):  # exactly one new event (run a), none for the refused ones
                assert len(after[pid]) == len(before[pid]) + 1
                assert after[pid][-1]["eps"] == pytest.approx(4.0)
                assert b.session.session_id.hex()[:16] not in json.dumps(after[pid])
    b_sid = b.session.session_id.hex()
    refused = 0
    for pid in (1, 2, 3):  # session b never computed a step anywhere; every party logged the ABCDP steps
        audit = [
            json.loads(x)
            for x in (tmp_path / f"party-{pid}" / "state" / "audit.log").read_text().splitlines()
        ]
        evals = [r for r in audit if r.get("what") == "Evaluate"]
        assert not [r for r in evals if r.get("session") == b_sid and r.get("outcome", "ok") == "ok"]
        refused += sum(r.get("session") == b_sid and r.get("outcome") == "RESOURCE_EXHAUSTED" for r in evals)
        steps = [r for r in evals if "abcdp_count" in r]
        assert len(steps) >= res.steps + 2 and all(r["reveal_mode"] == "svt" for r in steps)
        assert sum("charged" in r for r in steps) == 3  # the driver's run, the hand-driven one, run a
    assert refused >= 1  # the first refusal cancels the coordinator's calls to the others


def _check_against_reference(
    plan: FederatedSvtPlan,
    sid: bytes,
    seed: int,
    decisions: npt.NDArray[np.bool_],
    decided_ids: npt.NDArray[np.int64],
) -> None:
    """Replay the run in the clear: each party's noise from its fixed key (as the daemon derives it), the
    same candidate stream and queue; the revealed bits must be the float reference's."""
    sums = np.stack([party_feature_sum(plan, y[:, None]) for y in _observed()])
    states = [
        PartySvtState(
            plan, M, SecureRandom(derive_key(derive_key(KEYS[pid], sid, b"noise"), sid, b"svt-state"))
        )
        for pid in range(1, M + 1)
    ]
    q = CandidateQueue(plan)
    rng = np.random.default_rng(seed)
    margin = math.inf
    while not q.done:
        if q.pending < BATCH:
            t = _prior(rng, BATCH)
            q.push(t, candidate_embeddings(plan, _simulate(t, rng)))
        _, ph = q.next_batch(BATCH)
        taus = np.stack([s.noise_for_batch(ph.shape[0]) for s in states])
        remaining = states[0].remaining
        bits = reference_decisions(plan, sums, ph, taus, remaining)
        rho = distances_from_sum(plan, sums.sum(axis=0), ph)
        tt = plan.eps_abc + taus.sum(axis=0)
        margin = min(
            margin, float(np.min(np.abs(tt))), float(np.min(np.abs(tt - rho), initial=np.inf, where=tt > 0))
        )
        for s in states:
            s.update(bits)
        q.settle(bits)
    assert margin > plan.svt_format(M).margin(M)  # no decision within the fixed-point margin of a tie
    np.testing.assert_array_equal(decisions, q.decisions)
    np.testing.assert_array_equal(decided_ids, q.decided_ids)


def test_confar_simulate_abcdp(capsys: pytest.CaptureFixture[str]) -> None:
    """`confar simulate --sampler abcdp`: real daemons, c accepts, every party's charge printed."""
    from coordinator import cli as confar_cli

    argv = ["simulate", "--sampler", "abcdp", "--parties", "3", "--n-obs", "600", "--n-sim", "200"]
    argv += ["--features", "20", "--c", "3", "--eps-abc", "0.2", "--eps-total", "2", "--batch", "32"]
    rc = confar_cli.main(argv)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "accepted 3 of c = 3" in out and "posterior mean" in out and "decisions/s" in out
    assert "party 1: 2, party 2: 2, party 3: 2" in out
