"""A registry killed mid-step, at each phase of the step, then the run resumed: every run step is charged
once at every registry (issue 12, item 2).

Real daemon processes (``simulations.launcher.LocalConsortium``, mutual TLS on loopback). The victim stops
itself (SIGSTOP, ``[testing] freeze_at``) at an exact point of run step s: before its charge (the request
checked, nothing charged), after its charge (charged and persisted, no share sent) or during the exchange
(its first round sent to every peer). The test then SIGKILLs it by PID, restarts it on its state, and
resumes the run at run step s (the coordinator's checkpoint is at s - 1) in a new session. Each phase, the
victims rotating so that every registry dies and restarts, in sign mode (several exchange rounds: the other
registries fail mid-step too) and in blinded mode (one exchange round: killed during the exchange, the others
finish the step, so not every registry holds it). Afterwards every registry's privacy ledger (and decision
count) shows each run step charged exactly once, the ledger loads, and the run's decisions equal those of the
same run never interrupted, in a second consortium with the same data and the testing-only fixed noise keys
(the run key is then derived from the run id, so the uninterrupted run draws the same noise)."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from coordinator.api import BlockingCoordinator, BlockingSession, SessionError, SessionOptions
from parties.config import FREEZE_PHASES, load_config
from parties.privacy_budget import LEDGER_FILE, PrivacyBudgetStore, run_step_counts
from proto.records import RunCharge
from simulations.launcher import LocalConsortium, PartyOptions, party_config_text
from tests.parties.helpers import gm_inputs, gm_params, party_data

M, N, STEPS = 3, 16, 4  # each run: run steps base + 1 .. base + STEPS, killed at run step base + 2
PARAMS: dict[str, Any] = gm_params(1.0, (-4.0, 6.0), tau=10.0)
BUDGET = {"gdp_mu": 50.0}
KEYS = {pid: bytes([16 + pid]) * 32 for pid in range(1, M + 1)}
PHASES = FREEZE_PHASES[:3]  # before-charge, after-charge, mid-exchange (before-answer: test_resume_abcdp.py)
# (reveal mode, victim, phase): every phase in each mode, and every registry a victim in each mode (the
# victims rotate: the phases' code does not depend on which registry dies, each registry's restart does)
SCENARIOS: list[tuple[str, int, str]] = [
    *[("sign", i % M + 1, phase) for i, phase in enumerate(PHASES)],
    *[("blinded", (i + 1) % M + 1, phase) for i, phase in enumerate(PHASES)],
]


def _base(j: int) -> int:
    return 10 * j  # scenario j's run steps: 10 j + 1 .. 10 j + STEPS (a freeze point names a run step)


def _run_id(j: int) -> str:
    mode, victim, phase = SCENARIOS[j]
    return f"kill-{j}-{mode}-{victim}-{phase}"


def _inputs(run_step: int) -> dict[str, npt.NDArray[np.float64]]:
    rng = np.random.default_rng(7000 + run_step)
    th = rng.normal(1.0, 0.05, N)
    return gm_inputs(th, th + rng.normal(0.0, 0.05, N), PARAMS, M)


def _open(coord: BlockingCoordinator, j: int, first: int) -> BlockingSession:
    return coord.open_session(SessionOptions(
        reveal_mode=SCENARIOS[j][0],
        model="gaussian-mean",
        model_params=PARAMS,
        run_id=_run_id(j),
        first_run_step=first,
    ))


def _freeze_points(pid: int, done: set[int]) -> list[str]:
    return [
        f"{phase}@{_base(j) + 2}"
        for j, (_, victim, phase) in enumerate(SCENARIOS)
        if victim == pid and j not in done
    ]


def _write_config(lc: LocalConsortium, pid: int, done: set[int]) -> None:
    pdir = lc.workdir / f"party-{pid}"
    text = party_config_text(
        pid,
        M,
        lc.workdir,
        lc.certs,
        pdir / "data.csv",
        PartyOptions(
            fixed_rng_key=KEYS[pid],
            privacy_budget=BUDGET,
            round_timeout_s=20.0,
            freeze_at=_freeze_points(pid, done),
        ),
    )
    (pdir / "party.toml").write_text(text)


def _decisions(sess: BlockingSession, run_steps: range) -> dict[int, npt.NDArray[np.bool_]]:
    return {s: sess.evaluate(_inputs(s), N).accept for s in run_steps}


def test_registry_killed_at_each_phase_charges_each_run_step_once(tmp_path: Path) -> None:
    data = party_data(M, 30, seed=11)
    steps = {j: range(_base(j) + 1, _base(j) + STEPS + 1) for j in range(len(SCENARIOS))}

    # the same runs never interrupted (same data, same fixed keys, same run ids): the reference decisions
    reference: dict[int, dict[int, npt.NDArray[np.bool_]]] = {}
    with LocalConsortium.start(
        M, data, workdir=tmp_path / "reference", fixed_rng_keys=KEYS, privacy_budget=BUDGET
    ) as ref:
        with BlockingCoordinator(ref.endpoints(), ref.coordinator_tls(), rpc_timeout_s=30.0) as coord:
            for j in range(len(SCENARIOS)):
                s = _open(coord, j, _base(j) + 1)
                reference[j] = _decisions(s, steps[j])
                s.close()

    done: set[int] = set()
    work = tmp_path / "killed"
    with LocalConsortium.start(
        M, data, workdir=work, fixed_rng_keys=KEYS, privacy_budget=BUDGET, round_timeout_s=20.0
    ) as lc:
        for pid in range(1, M + 1):  # every registry gets the freeze points of the scenarios it is victim of
            _write_config(lc, pid, done)
            lc.kill(pid)
            lc.restart(pid)
        pool = concurrent.futures.ThreadPoolExecutor(1)
        for j, (mode, victim, phase) in enumerate(SCENARIOS):
            killed_at = _base(j) + 2
            got: dict[int, npt.NDArray[np.bool_]] = {}
            with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as c1:
                s1 = _open(c1, j, _base(j) + 1)
                got.update(_decisions(s1, range(_base(j) + 1, killed_at)))  # checkpointed: run step base + 1
                step = pool.submit(s1.evaluate, _inputs(killed_at), N)
                lc.wait_stopped(victim)  # it stopped itself exactly at the phase
                lc.kill(victim)  # SIGKILL by PID
                with pytest.raises(SessionError) as ei:
                    step.result(timeout=60)
                assert ei.value.party is not None, str(ei.value)
                s1.abort("a registry died")
            done.add(j)
            _write_config(lc, victim, done)
            lc.restart(victim)
            freeze_lines = [
                x
                for x in _audit(work, victim)
                if x["what"] == "TestFreeze" and x.get("detail") == f"{phase} of run step {killed_at}"
            ]
            assert len(freeze_lines) == 1, (mode, victim, phase)
            with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as c2:
                s2 = _open(c2, j, killed_at)  # resume from the checkpoint at run step base + 1
                assert set(s2.resume.values()) <= {killed_at - 1, killed_at}, s2.resume
                got.update(_decisions(s2, range(killed_at, _base(j) + STEPS + 1)))
                s2.close()
            for s in steps[j]:
                assert np.array_equal(got[s], reference[j][s]), (mode, victim, phase, s)
            for pid in range(1, M + 1):
                counts = _charges(work, pid, _run_id(j))
                assert counts == dict.fromkeys(steps[j], 1), (mode, victim, phase, pid, counts)
        pool.shutdown()

    total = len(SCENARIOS) * STEPS * N
    for pid in range(1, M + 1):
        state = work / f"party-{pid}" / "state"
        store = PrivacyBudgetStore.load(load_config(work / f"party-{pid}" / "party.toml"))  # the ledger loads
        assert store.ledger is not None and sum(e.count for e in store.ledger.events) == total
        assert json.loads((state / "ledger.json").read_text())["decisions_used"] == total
        assert not list(state.rglob("*.tmp"))
        recharged = [x for x in _audit(work, pid) if x.get("recharged")]
        assert recharged == []


def _charges(work: Path, pid: int, run_id: str) -> dict[int, int]:
    doc = json.loads((work / f"party-{pid}" / "state" / LEDGER_FILE).read_text())
    return run_step_counts([RunCharge.from_dict(c) for c in doc.get("run_charges", [])], run_id)


def _audit(work: Path, pid: int) -> list[dict[str, Any]]:
    text = (work / f"party-{pid}" / "state" / "audit.log").read_text()
    return [json.loads(line) for line in text.splitlines()]
