"""Resumable federated ABCDP runs (reveal mode ``svt``; issue 12), party side, over real ``confar-party``
processes (m = 3, mutual TLS on loopback, ``simulations.launcher.LocalConsortium``) driven by hand through the
coordinator API, with the testing-only fixed noise keys so that runs can be compared.

* a session of a run resumed at the run step every party completed last replays it (same bits, nothing
  charged) and continues; the same step asked with other candidates is refused naming the step; a session
  starting past a party's last completed step + 1 is refused naming both steps;
* a step not every party completed is evaluated again from the SVT state before it (the run noise key gives
  the same threshold and query noise) and reveals the same bits; the run's epsilon stays charged once;
* records changed after a restart, and a damaged run record, are refused naming the hashes, resp. the file.

The run record's SVT part and the whole-run charge are tested without daemons in
tests/parties/test_resume_abcdp.py, the coordinator's run state in tests/coordinator/test_resume_abcdp.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest

from coordinator.abcdp import session_params
from coordinator.api import BlockingCoordinator, BlockingSession, SessionError, SessionOptions
from mechanisms.abcdp.candidates import CandidateQueue
from mechanisms.abcdp.federated import (
    FederatedSvtPlan,
    candidate_embeddings,
    distances_from_sum,
    party_feature_sum,
)
from mechanisms.simulators.toy import ToyMixtureModel
from parties.abcdp import tolerated_colluders
from parties.privacy_budget import LEDGER_FILE, run_step_counts
from parties.replay import ReplayStore
from proto.records import RunCharge
from simulations.launcher import LocalConsortium

M, PER_PARTY, N_SIM, D, BATCH = 3, 200, 100, 16, 8
N = M * PER_PARTY
THETA_TRUE = np.array([0.25, 0.04, 0.33, 0.04, 0.34])
MODEL = ToyMixtureModel()
KEYS = {pid: bytes([0x60 + pid]) * 32 for pid in range(1, M + 1)}
EPS_RUN = 2.0
F64 = npt.NDArray[np.float64]


def observed() -> list[F64]:
    y = MODEL.simulate(THETA_TRUE, N, np.random.default_rng(11))[0]
    return list(np.array_split(y, M))


def make_plan(c: int = 6, resample: bool = True, seed: int = 3, quantile: float = 0.15) -> FederatedSvtPlan:
    """A plan whose eps_abc is a quantile of the first candidates' distances (a public choice)."""
    base = FederatedSvtPlan(
        eps_abc=0.0,
        eps_total=EPS_RUN,
        c=c,
        resample=resample,
        n_records=N,
        n_features=D,
        bandwidth=0.6,
        dim=1,
        map_seed=5,
    )
    total = sum(party_feature_sum(base, y[:, None]) for y in observed())
    rng = np.random.default_rng(seed)
    th = MODEL.sample_prior(rng, 64)
    rho = distances_from_sum(base, total, candidate_embeddings(base, MODEL.simulate(th, N_SIM, rng)))
    return dataclasses.replace(base, eps_abc=float(np.quantile(rho, quantile)))


def budget(plan: FederatedSvtPlan) -> dict[str, Any]:
    """Room for 15 runs of EPS_RUN; the colluders the plan's epsilon is backed against (parties.abcdp)."""
    return {"epsilon": 15 * EPS_RUN, "delta": 1e-6, "colluding": tolerated_colluders(plan, M, (M - 1) // 2)}


def consortium(root: Path, plan: FederatedSvtPlan, **kw: Any) -> Any:
    return LocalConsortium.start(
        M,
        [{"y": y} for y in observed()],
        workdir=root,
        models=("abcdp-rff",),
        modes=("svt",),
        privacy_budget=budget(plan),
        fixed_rng_keys=KEYS,
        startup_timeout_s=120.0,
        round_timeout_s=20.0,
        **kw,
    )


@dataclasses.dataclass
class Driver:
    """The coordinator's public state of a run driven by hand: candidate queue and public generator."""

    plan: FederatedSvtPlan
    queue: CandidateQueue
    rng: np.random.Generator

    @classmethod
    def new(cls, plan: FederatedSvtPlan, seed: int = 9) -> Driver:
        return cls(plan, CandidateQueue(plan), np.random.default_rng(seed))

    def copy(self) -> Driver:
        rng = np.random.default_rng()
        rng.bit_generator.state = self.rng.bit_generator.state
        return Driver(self.plan, CandidateQueue.restore(self.plan, self.queue.export()), rng)

    def batch(self) -> F64:
        if self.queue.pending < BATCH:
            th = MODEL.sample_prior(self.rng, BATCH)
            self.queue.push(th, candidate_embeddings(self.plan, MODEL.simulate(th, N_SIM, self.rng)))
        return self.queue.next_batch(BATCH)[1]

    def step(self, sess: BlockingSession) -> npt.NDArray[np.bool_]:
        ph = self.batch()
        bits = sess.evaluate({"phibar": ph}, ph.shape[0]).accept
        self.queue.settle(bits)
        return bits


def open_run(coord: BlockingCoordinator, plan: FederatedSvtPlan, run: str, first: int = 1) -> BlockingSession:
    return coord.open_session(SessionOptions(
        reveal_mode="svt",
        model="abcdp-rff",
        model_params=session_params(plan, ["y"]),
        run_id=run,
        first_run_step=first,
    ))


def ledger(lc: LocalConsortium, pid: int) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((lc.workdir / f"party-{pid}" / "state" / LEDGER_FILE).read_text())
    return doc


def run_charges(lc: LocalConsortium, pid: int, run: str) -> dict[int, int]:
    return run_step_counts([RunCharge.from_dict(c) for c in ledger(lc, pid).get("run_charges", [])], run)


def run_events(lc: LocalConsortium, pid: int, run: str) -> list[dict[str, Any]]:
    return [e for e in ledger(lc, pid)["ledger"]["events"] if f"run {run}" in e["label"]]


def audit(lc: LocalConsortium, pid: int) -> list[dict[str, Any]]:
    text = (lc.workdir / f"party-{pid}" / "state" / "audit.log").read_text()
    return [json.loads(line) for line in text.splitlines()]


def store(lc: LocalConsortium, pid: int) -> ReplayStore:
    return ReplayStore(lc.workdir / f"party-{pid}" / "state", f"party-{pid}")


# ---- real daemons ------------------------------------------------------------------------------------------


def test_resumed_abcdp_run_replays_reevaluates_and_refuses_other_candidates(tmp_path: Path) -> None:
    plan = make_plan()
    run = "abcdp-resume-1"
    with consortium(tmp_path, plan) as lc, BlockingCoordinator(
        lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0
    ) as coord:
        drv = Driver.new(plan)
        s1 = open_run(coord, plan, run)
        assert s1.resume == {1: 0, 2: 0, 3: 0}
        bits = [drv.step(s1) for _ in range(2)]
        at2 = drv.copy()  # the coordinator's checkpoint after run step 2
        bits.append(drv.step(s1))  # run step 3: completed by every party, never checkpointed
        rec3 = store(lc, 2).path_for(run).read_bytes()
        s1.abort("coordinator crashed")

        # resumed at run step 3, which every party completed in one session: other candidates are refused
        s2 = open_run(coord, plan, run, 3)
        assert s2.resume == {1: 3, 2: 3, 3: 3} and s2.session.replay_step == 3 and s2.warnings == []
        other = Driver.new(plan, seed=99)
        with pytest.raises(SessionError) as ei:
            s2.evaluate({"phibar": other.batch()}, BATCH)
        assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert f"run step 3 of run '{run}' was completed here with other inputs" in str(ei.value)
        s2.abort("refused")
        # ... the same candidates are replayed (same bits, nothing computed), then the run goes on
        s3 = open_run(coord, plan, run, 3)
        drv = at2.copy()
        np.testing.assert_array_equal(drv.step(s3), bits[2])
        tr = s3.session.last_transcript
        assert tr is not None and tr.replayed and tr.run_step == 3
        at3 = drv.copy()
        bits.append(drv.step(s3))  # run step 4, from the state after the replayed run step 3
        s3.abort("coordinator crashed again")

        # party 2 lost its record of run step 4 (it died after the others kept theirs): run step 4 is
        # evaluated again, from the SVT state before it (parties 1 and 3) and after run step 3 (party 2),
        # with the same noise from each party's run key: the same bits, nothing charged again
        store(lc, 2).path_for(run).write_bytes(rec3)
        s4 = open_run(coord, plan, run, 4)
        assert s4.resume == {1: 4, 2: 3, 3: 4} and s4.session.replay_step == 0
        assert "run step 4 was completed by parties [1, 3] but not by every party" in s4.warnings[0]
        drv = at3.copy()
        np.testing.assert_array_equal(drv.step(s4), bits[3])
        tr = s4.session.last_transcript
        assert tr is not None and not tr.replayed and tr.run_step == 4
        bits.append(drv.step(s4))  # run step 5
        s4.close()

        # a session must start at a party's last completed run step or the next one
        with pytest.raises(SessionError) as ei:
            open_run(coord, plan, run, 7)
        assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
        msg = str(ei.value)
        assert f"run step of ABCDP run '{run}' is 5, but the session starts at run step 7" in msg
        # ... and with the run's plan
        with pytest.raises(SessionError) as ei:
            open_run(coord, dataclasses.replace(plan, eps_abc=plan.eps_abc + 0.01), run, 6)
        assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert f"ABCDP run '{run}' ran here with other session parameters (plan digest" in str(ei.value)

    assert sum(int(b.sum()) for b in bits) == drv.queue.count
    for pid in range(1, M + 1):
        assert run_charges(lc, pid, run) == {0: 1}  # the whole run's epsilon, once
        (event,) = run_events(lc, pid, run)
        assert event["count"] == 1 and event["eps"] == pytest.approx(EPS_RUN)
        lines = [x for x in audit(lc, pid) if x.get("what") == "Evaluate" and x.get("run_id") == run]
        assert sum("charged" in x for x in lines) == 1
        assert sum("charged_in" in x for x in lines) == 2  # the first computed step of s3 and s4
        assert [x["run_step"] for x in lines if x.get("replayed")] == [3]
        decisions = json.loads((lc.workdir / f"party-{pid}" / "state" / "ledger.json").read_text())
        # a step computed again is counted again by a party whose record of it was lost (conservative)
        assert decisions["decisions_used"] == 5 * BATCH + (BATCH if pid == 2 else 0)


def test_changed_records_and_damaged_records_refuse_the_run(tmp_path: Path) -> None:
    plan = make_plan()
    run = "abcdp-resume-2"
    with consortium(tmp_path, plan) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            drv = Driver.new(plan)
            s1 = open_run(coord, plan, run)
            for _ in range(2):
                drv.step(s1)
            s1.close()
            path = store(lc, 3).path_for(run)
            good = path.read_bytes()
            doc = json.loads(good)
            assert doc["svt"]["before"]["n_decided"] >= 0 and doc["svt"]["plan_digest"]
            # a damaged run record (its SVT part altered, or garbage): refused naming the file
            doc["svt"]["before"]["n_decided"] += 1
            for bad, what in ((json.dumps(doc), "checksum mismatch"), ("{garbage", "not JSON")):
                path.write_text(bad)
                with pytest.raises(SessionError) as ei:
                    open_run(coord, plan, run, 3)
                assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION and ei.value.party == 3
                assert str(path) in str(ei.value) and "corrupt" in str(ei.value) and what in str(ei.value)
            # moved away: the party has no SVT state of the run and refuses to continue it
            path.unlink()
            with pytest.raises(SessionError) as ei:
                open_run(coord, plan, run, 3)
            assert ei.value.party == 3
            assert "holds no completed run step of ABCDP run" in str(ei.value)
            assert "starts at run step 3" in str(ei.value)
            path.write_bytes(good)
            # its run noise key moved away: refused naming it (a new key would draw other threshold noise)
            key = store(lc, 3).key_path_for(run)
            key.rename(key.with_suffix(".moved"))
            with pytest.raises(SessionError) as ei:
                open_run(coord, plan, run, 3)
            assert ei.value.party == 3
            assert f"run noise key {key} of ABCDP run '{run}' is missing" in str(ei.value)
            assert not key.exists()  # nothing created by the refused session
            key.with_suffix(".moved").rename(key)
            s2 = open_run(coord, plan, run, 3)  # restored: the run goes on
            drv.step(s2)
            s2.close()
        held = store(lc, 2).load(run)
        assert held is not None and held.svt is not None and held.data_sha256
        # registry 2 restarts on changed records: refused naming both snapshot hashes
        lc.kill(2)
        csv = lc.workdir / "party-2" / "data.csv"
        lines = csv.read_text().splitlines()
        lines[3] = "0.5"
        csv.write_text("\n".join(lines) + "\n")
        lc.restart(2)
        now = [x for x in audit(lc, 2) if x.get("what") == "DataSnapshot"][-1]["sha256"]
        assert now != held.data_sha256
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            with pytest.raises(SessionError) as ei:
                open_run(coord, plan, run, 4)
            assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION and ei.value.party == 2
            msg = str(ei.value)
            assert f"records changed since run step 3 of run '{run}'" in msg
            assert f"{held.data_sha256[:16]}… then, {now[:16]}… now" in msg
            s2 = open_run(coord, plan, run + "-new")  # a new run on the new records is fine
            Driver.new(plan).step(s2)
            s2.close()
    for pid in range(1, M + 1):
        assert run_charges(lc, pid, run) == {0: 1} and run_charges(lc, pid, run + "-new") == {0: 1}


# ---- confar run --resume -----------------------------------------------------------------------------------

RUN_TOML = """
[experiment]
name = "abcdp-resume"
output_dir = "out"
seed = 2031

[sampler]
kind = "abcdp"
simulator = "toy"
eps_abc = 0.2
eps_total = 2.0
c = 4
resample = true
n_features = 16
bandwidth = 0.6
n_records = 300
batch_size = 16
max_proposals = 4000

[reveal]
mode = "svt"

[output]
formats = []

[simulate]
parties = 3
records = 100
fixed_noise_keys = true
"""


def _checkpoint(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "checkpoint" / "state.json").read_text())
    return doc


def _accepted(out: Path) -> tuple[F64, npt.NDArray[np.bool_]]:
    from coordinator.abcdp import AbcdpState
    from coordinator.experiment import load_experiment
    from mechanisms.abcdp.federated import FederatedSvtPlan

    plan = FederatedSvtPlan.from_params(load_experiment(out / "experiment.toml").sampler.abcdp)
    st = AbcdpState.from_json(plan, _checkpoint(out)["abcdp"])
    return st.queue.accepted_thetas, st.queue.decisions


@pytest.mark.slow
def test_confar_run_abcdp_stopped_and_resumed_equals_uninterrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`confar run --simulate` of an ABCDP run (real daemon processes), stopped as if the coordinator
    crashed after 2 steps (before their checkpoint), resumed with `confar run --resume` (the daemons restart
    on their state): the run finishes, every registry's ledger holds the run's epsilon once, and with
    [simulate] fixed_noise_keys and the same run id it accepts exactly the thetas of the run never
    interrupted, bit for bit."""
    import coordinator.checkpoint
    from coordinator.cli import main

    # the same run id twice
    monkeypatch.setattr(coordinator.checkpoint.secrets, "token_hex", lambda n: "cd" * n)
    cfg = tmp_path / "abcdp.toml"
    cfg.write_text(RUN_TOML)
    full, out = tmp_path / "full", tmp_path / "out"
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--out", str(full)]) == 0
    stop = ["--stop-after-batches", "2"]
    assert main(["run", str(cfg), "--simulate", "--no-progress", "--out", str(out), *stop]) == 130
    assert _checkpoint(out)["run_step"] == 1 and not _checkpoint(out)["done"]
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    st = _checkpoint(out)
    assert st["done"] and st["run_step"] == _checkpoint(full)["run_step"] >= 4
    thetas, decisions = _accepted(out)
    ref_thetas, ref_decisions = _accepted(full)
    assert thetas.shape[0] == 4 and thetas.tobytes() == ref_thetas.tobytes()
    np.testing.assert_array_equal(decisions, ref_decisions)
    meta = json.loads((out / "run.json").read_text())
    assert meta["run_id"] == json.loads((full / "run.json").read_text())["run_id"]
    assert [x["first_run_step"] for x in meta["sessions"]] == [1, 2]
    sim = out / "simulation"
    for pid in range(1, M + 1):
        doc = json.loads((sim / f"party-{pid}" / "state" / LEDGER_FILE).read_text())
        charges = [RunCharge.from_dict(c) for c in doc["run_charges"]]
        assert run_step_counts(charges, meta["run_id"]) == {0: 1}
        events = [e for e in doc["ledger"]["events"] if f"run {meta['run_id']}" in e["label"]]
        assert len(events) == 1 and events[0]["count"] == 1 and events[0]["eps"] == pytest.approx(2.0)
        log = (sim / f"party-{pid}" / "state" / "audit.log").read_text()
        assert "replayed run step 2" in log


# ---- a registry killed at each phase of a step -------------------------------------------------------------

KILLS: list[tuple[str, int]] = [  # (phase, run step): testing.freeze_at points of the victim
    ("before-charge", 1),  # the first step asked, nothing charged (its peers charge and wait for it)
    ("after-charge", 1),  # the run's epsilon charged and persisted, no share sent, no record of the step
    ("mid-exchange", 2),  # its first round of run step 2 sent to every peer
    ("before-answer", 2),  # run step 2 settled and recorded, the answer not sent
]
# each phase once, the victims rotating so that every registry is killed and restarts (the phases' code does
# not depend on which registry dies)
SCENARIOS = [(i % M + 1, phase, step) for i, (phase, step) in enumerate(KILLS)]


def _scenario_run(j: int) -> str:
    victim, phase, step = SCENARIOS[j]
    return f"abcdp-kill-{j}-{victim}-{phase}-{step}"


def _write_config(lc: LocalConsortium, plan: FederatedSvtPlan, pid: int, freeze: list[str]) -> None:
    from simulations.launcher import PartyOptions, party_config_text

    pdir = lc.workdir / f"party-{pid}"
    text = party_config_text(
        pid,
        M,
        lc.workdir,
        lc.certs,
        pdir / "data.csv",
        PartyOptions(
            models=("abcdp-rff",),
            modes=("svt",),
            privacy_budget=budget(plan),
            fixed_rng_key=KEYS[pid],
            round_timeout_s=20.0,
            freeze_at=freeze,
        ),
    )
    (pdir / "party.toml").write_text(text)
    lc.kill(pid)
    lc.restart(pid, timeout_s=60.0)


def _drive(
    lc: LocalConsortium, plan: FederatedSvtPlan, run: str, start: Any = None, on_step: Any = None
) -> Any:
    from coordinator.abcdp import FederatedRunOptions, run_federated_abcdp

    def prior(g: np.random.Generator, k: int) -> F64:
        return MODEL.sample_prior(g, k)

    def sim(th: F64, g: np.random.Generator) -> F64:
        return MODEL.simulate(th, N_SIM, g)

    with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
        return run_federated_abcdp(
            coord,
            plan,
            prior,
            sim,
            BATCH,
            17,
            FederatedRunOptions(
                columns=["y"],
                run_id=run,
                start=start,
                on_step=on_step,
            ),
        )


def _keep(saved: list[dict[str, Any]], st: Any) -> None:
    saved.append(st.to_json())  # the coordinator's checkpoint after each settled step


@pytest.mark.slow
def test_registry_killed_at_each_phase_resumes_charged_once_as_uninterrupted(tmp_path: Path) -> None:
    """A registry stops itself (SIGSTOP, [testing] freeze_at) at each phase of a step of an ABCDP run (the
    victims rotating: every registry once or more) and is SIGKILLed there by PID; the coordinator's step fails
    naming a party; the registry restarts on its state and the run is resumed from the coordinator's last
    checkpoint (the state after the last step it settled) in a new session. Every run finishes with the
    accepted thetas of the same run never interrupted (a second consortium, same data and fixed noise keys),
    and every registry's ledger holds the run's epsilon once."""
    import concurrent.futures

    from coordinator.abcdp import AbcdpState

    plan = make_plan(c=3)
    reference = {}
    with consortium(tmp_path / "reference", plan) as ref:
        for j in range(len(SCENARIOS)):
            reference[j] = _drive(ref, plan, _scenario_run(j))
            assert reference[j].done and reference[j].steps >= 3  # RESAMPLE: at most one accept per step

    pool = concurrent.futures.ThreadPoolExecutor(1)
    with consortium(tmp_path / "killed", plan) as lc:
        for j, (victim, phase, step) in enumerate(SCENARIOS):
            run = _scenario_run(j)
            _write_config(lc, plan, victim, [f"{phase}@{step}"])
            saved: list[dict[str, Any]] = []
            fut = pool.submit(_drive, lc, plan, run, None, functools.partial(_keep, saved))
            lc.wait_stopped(victim)  # it stopped itself exactly at the phase
            lc.kill(victim)  # SIGKILL by PID
            with pytest.raises(SessionError) as ei:
                fut.result(timeout=120)
            assert ei.value.party is not None, str(ei.value)
            assert len(saved) == step - 1, (victim, phase, step)  # the checkpoint: the last settled step
            _write_config(lc, plan, victim, [])  # restarted on its state, without the freeze point
            lines = [x for x in audit(lc, victim) if x.get("what") == "TestFreeze"]
            assert lines[-1]["detail"] == f"{phase} of run step {step}"
            start = AbcdpState.from_json(plan, saved[-1]) if saved else None
            res = _drive(lc, plan, run, start)
            want = reference[j]
            assert res.done and res.steps == want.steps, (victim, phase, step)
            assert res.thetas.tobytes() == want.thetas.tobytes(), (victim, phase, step)
            np.testing.assert_array_equal(res.decisions, want.decisions)
            for pid in range(1, M + 1):
                assert run_charges(lc, pid, run) == {0: 1}, (victim, phase, step, pid)
                (event,) = run_events(lc, pid, run)
                assert event["count"] == 1 and event["eps"] == pytest.approx(EPS_RUN)
            mine = [x for x in audit(lc, victim) if x.get("what") == "Evaluate" and x.get("run_id") == run]
            ok = [x for x in mine if x.get("outcome", "ok") == "ok"]
            if phase == "after-charge":  # charged before it died: the resumed session recognises the charge
                assert "charged_in" in ok[0] and "charged" not in ok[0]
            if phase == "before-answer":  # it kept run step 2: replayed, or evaluated again from before it
                again = [x for x in ok if x["run_step"] == step]
                assert again[-1].get("replayed") or "evaluated again" in again[-1].get("detail", "")
    pool.shutdown()
    for pid in range(1, M + 1):
        state = lc.workdir / f"party-{pid}" / "state"
        assert not list(state.rglob("*.tmp"))
        doc = json.loads((state / LEDGER_FILE).read_text())
        assert len(doc["ledger"]["events"]) == len(SCENARIOS)  # one event per run, none twice
