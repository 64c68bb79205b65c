"""Run resume on the party side (parties/replay.py): a coordinator that crashes after the parties completed
a run step, and resumes with a new session of the same run, gets the same decisions without a second
privacy charge; a different input for a completed step is refused; a step not held by every party is
evaluated afresh (with a warning) with the same noise, from each party's run noise key, and not charged
again; a fresh run behaves exactly like a session without a run. Unit tests for the record file, the run
key file, the step digest, the spec binding and the ledger's run charges, then real daemons (m = 3) over
gRPC with mutual TLS, with fixed_rng_keys and with keys from the OS CSPRNG. The daemons run in the test's
process; tests/network/test_resume.py resumes a run over daemon processes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest

from coordinator.api import Coordinator, CoordinatorSession, SessionError, SessionOptions, StepTranscript
from coordinator.certs import party_identity
from mechanisms.privacy import GaussianEvent
from parties.config import load_config
from parties.daemon import PartyDaemon, reproducible
from parties.privacy_budget import (
    LEDGER_FILE,
    LedgerFileError,
    PrivacyBudgetStore,
    merge_run_charge,
    run_step_counts,
)
from parties.registry import get_analysis
from parties.replay import (
    ReplayFileError,
    ReplayStore,
    RunRecord,
    agreed_record,
    key_id,
    run_step_keys,
    step_digest,
)
from proto import serde
from proto.records import RunCharge, RunStepRef
from proto.spec import PartyEntry, SessionSpec, SpecError
from simulations.launcher import PartyOptions, party_config_text, write_csv
from tests.parties.helpers import gm_inputs, gm_params, make_certs, party_data, tls_for

M, N = 3, 16
PARAMS: dict[str, Any] = gm_params(1.0, (-4.0, 6.0), tau=10.0)  # bounded: 0.1-GDP per decision
BUDGET = {"gdp_mu": 50.0}
KEYS = {pid: bytes([pid]) * 32 for pid in range(1, M + 1)}


def _spec(run_id: str = "", first: int = 1, **kw: Any) -> SessionSpec:
    base: dict[str, Any] = {
        "session_id": b"s" * 16,
        "parties": tuple(PartyEntry(i, f"party-{i}") for i in range(1, M + 1)),
        "t": 1,
        "reveal_mode": "sign",
        "model": "gaussian-mean",
        "model_params": PARAMS,
        "run_id": run_id,
        "first_run_step": first,
    }
    return SessionSpec(**{**base, **kw})


def _inputs(k: int, n: int = N) -> dict[str, Any]:
    """The proposals of run step k: the same for a given k (the coordinator's checkpointed state)."""
    rng = np.random.default_rng(1000 + k)
    th = rng.normal(1.0, 0.05, n)
    return gm_inputs(th, th + rng.normal(0.0, 0.05, n), PARAMS, M)


# ---- the record file and the digest ------------------------------------------------------------------------


def _record(run_id: str = "run-1", step: int = 3) -> RunRecord:
    msgs = ((5, np.arange(N, dtype=np.uint64) * np.uint64(2**61 + 7)),)
    return RunRecord(RunStepRef(run_id, step, b"d" * 32, b"e" * 16), N, 5, msgs)


def test_replay_store_round_trip_and_bounded(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, "party-1")
    assert store.load("run-1") is None
    rec = _record()
    store.save(rec)
    got = store.load("run-1")
    assert got is not None and got.ref == rec.ref and (got.batch, got.rounds) == (N, 5)
    assert [r for r, _ in got.messages] == [5] and np.array_equal(got.messages[0][1], rec.messages[0][1])
    store.save(_record(step=4))  # only the last completed run step is kept, one file per run
    got = store.load("run-1")
    assert got is not None and got.run_step == 4
    assert len(list(store.root.iterdir())) == 1
    store.save(_record("run-2", 1))
    assert len(list(store.root.iterdir())) == 2 and not list(store.root.glob("*.tmp"))
    with pytest.raises(SpecError, match="run_id"):
        store.load("../etc/passwd")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p.write_text("{not json"), "not JSON"),
        (lambda p: p.write_bytes(b"\xff\xfe"), "not JSON"),
        (
            lambda p: p.write_text(p.read_text().replace('"run_step": 3', '"run_step": 2')),
            "checksum mismatch",
        ),
        (lambda p: p.write_text(p.read_text().replace('"version": 1', '"version": 9')), "version 1"),
        (lambda p: p.write_text("[]"), "version 1"),
    ],
)
def test_corrupt_record_is_refused_naming_the_file(tmp_path: Path, change: Any, message: str) -> None:
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record())
    path = store.path_for("run-1")
    change(path)
    before = path.read_bytes()
    with pytest.raises(ReplayFileError, match=re.escape(str(path)) + ".*" + re.escape(message)):
        store.load("run-1")
    assert path.read_bytes() == before  # never deleted or rewritten


def test_foreign_or_misplaced_record_is_refused(tmp_path: Path) -> None:
    ReplayStore(tmp_path, "party-2").save(_record())
    with pytest.raises(ReplayFileError, match="belongs to party 'party-2'"):
        ReplayStore(tmp_path, "party-1").load("run-1")
    store = ReplayStore(tmp_path, "party-1")
    store.save(_record("run-2"))
    shutil.copy(store.path_for("run-2"), store.path_for("run-1"))
    with pytest.raises(ReplayFileError, match="record of run 'run-2', not of 'run-1'"):
        store.load("run-1")


def test_step_digest_binds_inputs_batch_step_and_session_parameters() -> None:
    spec = _spec("run-1")
    inp = _inputs(1)
    d = step_digest(spec, 1, N, inp)
    assert d == step_digest(dataclasses.replace(spec, session_id=b"x" * 16, first_run_step=5), 1, N, inp)
    assert d == step_digest(spec, 1, N, {k: inp[k].astype(">f8") for k in inp})  # byte order is normalised
    other = {**inp, "theta": inp["theta"].copy()}
    other["theta"][3] += 1e-12
    changed = [
        step_digest(spec, 2, N, inp),
        step_digest(spec, 1, N - 1, inp),
        step_digest(spec, 1, N, other),
        step_digest(spec, 1, N, {**inp, "extra": np.zeros(1)}),
        step_digest(spec, 1, N, {k: v.astype("<f4") for k, v in inp.items()}),
        step_digest(dataclasses.replace(spec, run_id="run-2"), 1, N, inp),
        step_digest(dataclasses.replace(spec, model_params=gm_params(1.0, (-4.0, 6.0), tau=11.0)), 1, N, inp),
        step_digest(dataclasses.replace(spec, reveal_mode="blinded"), 1, N, inp),
        step_digest(dataclasses.replace(spec, model="other"), 1, N, inp),
    ]
    assert len({d, *changed}) == len(changed) + 1


def test_agreed_record_needs_every_party_on_the_same_step_and_session() -> None:
    own = _record()
    assert agreed_record(own, [own.ref] * M) is own
    assert agreed_record(None, [own.ref] * M) is None
    assert agreed_record(own, [own.ref, own.ref, RunStepRef("run-1", 2, b"d" * 32, b"e" * 16)]) is None
    other_session = dataclasses.replace(own.ref, execution=b"f" * 16)  # same step, other execution
    assert agreed_record(own, [own.ref, other_session, own.ref]) is None


def test_spec_binds_run_id_and_first_run_step() -> None:
    spec = _spec("run-1", 4)
    assert [spec.run_step(k) for k in (1, 2, 3)] == [4, 5, 6] and _spec().run_step(2) == 0
    req = serde.open_request_to_proto(spec)
    assert (req.run_id, req.first_run_step) == ("run-1", 4)
    assert serde.spec_from_open_request(req) == spec
    assert serde.spec_from_open_request(serde.open_request_to_proto(_spec())) == _spec()
    with pytest.raises(SpecError, match="first_run_step = 3 needs a run_id"):
        _spec("", 3)
    with pytest.raises(SpecError, match="first_run_step must be an integer >= 1"):
        _spec("run-1", 0)
    with pytest.raises(SpecError, match="run_id"):
        _spec("bad id with spaces")
    req.first_run_step = 0
    with pytest.raises(serde.WireError, match="needs first_run_step >= 1"):
        serde.spec_from_open_request(req)
    req.run_id, req.first_run_step = "", 7
    with pytest.raises(serde.WireError, match="needs a run_id"):
        serde.spec_from_open_request(req)


# ---- the ledger's run charges ------------------------------------------------------------------------------


def test_run_charges_merge_count_and_persist(tmp_path: Path) -> None:
    cs: list[RunCharge] = []
    for s in (1, 2, 3):
        cs = merge_run_charge(cs, RunCharge("r", "aa", s, s, N))
    assert cs == [RunCharge("r", "aa", 1, 3, 3 * N)]
    cs = merge_run_charge(cs, RunCharge("r", "bb", 3, 3, N))  # run step 3 charged again (new session)
    cs = merge_run_charge(cs, RunCharge("q", "bb", 1, 1, N))
    assert run_step_counts(cs, "r") == {1: 1, 2: 1, 3: 2} and run_step_counts(cs, "q") == {1: 1}

    path = tmp_path / "party-1.toml"
    path.write_text(party_config_text(1, M, tmp_path, None, None, PartyOptions(privacy_budget=BUDGET)))
    cfg = load_config(path, insecure=True)
    store = PrivacyBudgetStore.load(cfg)
    spec = _spec("run-1")
    for s in (1, 2):
        ev = store.events_for(cfg, get_analysis("gaussian-mean", spec.model_params), spec, N)
        assert "run run-1" in ev[0].label
        store.commit(ev, RunCharge("run-1", spec.session_id.hex()[:16], s, s, N))
    again = PrivacyBudgetStore.load(cfg)
    assert again.run_charges == [RunCharge("run-1", spec.session_id.hex()[:16], 1, 2, 2 * N)]
    rep = json.loads(again.report(cfg, 0).run_charges_json)
    assert rep == [
        {"run_id": "run-1", "session": "7373737373737373", "from_step": 1, "to_step": 2, "decisions": 2 * N}
    ]
    doc = json.loads((cfg.state_dir / LEDGER_FILE).read_text())
    doc["run_charges"][0]["to_step"] = 0
    (cfg.state_dir / LEDGER_FILE).write_text(json.dumps(doc))
    with pytest.raises(LedgerFileError, match="empty step range"):
        PrivacyBudgetStore.load(cfg)


def test_run_key_is_created_once_private_and_refused_when_damaged(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, "party-1")
    key, created = store.run_key("run-1")
    path = store.key_path_for("run-1")
    assert created and len(key) == 32 and path.stat().st_mode & 0o777 == 0o600
    assert store.run_key("run-1") == (key, False)  # read back, never replaced
    assert ReplayStore(tmp_path, "party-1").run_key("run-2")[0] != key  # one key per run, from os.urandom
    assert ReplayStore(tmp_path / "other", "party-1").run_key("run-1")[0] != key
    fixed = bytes([1]) * 32  # testing only: derived from the fixed key and the run id, in any state dir
    a = ReplayStore(tmp_path / "a", "party-1").run_key("run-1", fixed)[0]
    assert a == ReplayStore(tmp_path / "b", "party-1").run_key("run-1", fixed)[0] and a != key
    assert key_id(key) != key_id(a) and len(key_id(key)) == 32 and key.hex() not in key_id(key)
    noise, reveal = run_step_keys(key, 3, b"d" * 32)
    assert noise != reveal and (noise, reveal) == run_step_keys(key, 3, b"d" * 32)
    assert run_step_keys(key, 3, b"e" * 32)[0] != noise and run_step_keys(key, 4, b"d" * 32)[0] != noise
    assert store.path_for("run-1") != path and not store.path_for("run-1").exists()  # apart from the record

    before = path.read_bytes()
    for change, message in [
        (lambda t: t.replace(key.hex(), "00" * 32), "checksum mismatch"),
        (lambda t: "{garbage", "not JSON"),
        (lambda t: t.replace('"party-1"', '"party-2"'), "checksum mismatch"),
    ]:
        path.write_text(change(before.decode()))
        with pytest.raises(ReplayFileError, match=re.escape(str(path)) + ".*" + re.escape(message)):
            store.run_key("run-1")
        assert path.read_text() == change(before.decode())  # never replaced
    theirs = ReplayStore(tmp_path / "p2", "party-2")
    theirs.run_key("run-1")
    shutil.copy(theirs.key_path_for("run-1"), path)  # another party's key file
    with pytest.raises(ReplayFileError, match="belongs to party 'party-2'"):
        store.run_key("run-1")
    shutil.copy(store.key_path_for("run-2"), path)
    with pytest.raises(ReplayFileError, match="key of run 'run-2', not of 'run-1'"):
        store.run_key("run-1")


def test_run_charge_records_digest_and_key_and_old_ledgers_still_load(tmp_path: Path) -> None:
    d1, d2, k = "a" * 64, "b" * 64, "c" * 32
    cs = merge_run_charge([], RunCharge("r", "aa", 1, 1, N, d1, k))
    cs = merge_run_charge(cs, RunCharge("r", "aa", 2, 2, N, d2, k))
    assert cs == [RunCharge("r", "aa", 1, 2, 2 * N, d2, k)]  # the range keeps its last step's digest
    cs = merge_run_charge(cs, RunCharge("r", "aa", 3, 3, N, d1, "e" * 32))  # another key: a new range
    assert len(cs) == 2
    assert RunCharge.from_dict(cs[0].to_dict()) == cs[0]
    old = {"run_id": "r", "session": "aa", "from_step": 1, "to_step": 2, "decisions": 2 * N}
    assert RunCharge.from_dict(old) == RunCharge("r", "aa", 1, 2, 2 * N)
    assert RunCharge.from_dict(old).to_dict() == old
    bads = [{"digest": "xyz"}, {"noise_key": "c" * 31}, {"digest": 5}, {"digest": "A" * 64}, {"x": 1}]
    for bad in ({**old, **b} for b in bads):
        with pytest.raises(ValueError):
            RunCharge.from_dict(bad)

    # a ledger written before charges recorded their digest still loads; its charges match nothing
    path = tmp_path / "party-1.toml"
    path.write_text(party_config_text(1, M, tmp_path, None, None, PartyOptions(privacy_budget=BUDGET)))
    cfg = load_config(path, insecure=True)
    store = PrivacyBudgetStore.load(cfg)
    spec = _spec("run-1")
    ev = store.events_for(cfg, get_analysis("gaussian-mean", spec.model_params), spec, N)
    store.commit(ev, RunCharge("run-1", "s16", 1, 1, N, d1, k))
    doc = json.loads((cfg.state_dir / LEDGER_FILE).read_text())
    assert doc["version"] == 1 and doc["run_charges"] == [RunCharge("run-1", "s16", 1, 1, N, d1, k).to_dict()]
    assert doc["run_charges"][0]["digest"] == d1 and doc["run_charges"][0]["noise_key"] == k
    again = PrivacyBudgetStore.load(cfg)
    paid = again.charged_run_step("run-1", 1, bytes.fromhex(d1), k)
    assert paid == RunCharge("run-1", "s16", 1, 1, N, d1, k)
    assert again.charged_run_step("run-1", 1, bytes.fromhex(d2), k) is None  # other inputs
    assert again.charged_run_step("run-1", 1, bytes.fromhex(d1), "e" * 32) is None  # another run key
    assert again.charged_run_step("run-1", 2, bytes.fromhex(d1), k) is None
    assert again.charged_run_step("run-2", 1, bytes.fromhex(d1), k) is None
    for c in doc["run_charges"]:
        del c["digest"], c["noise_key"]
    (cfg.state_dir / LEDGER_FILE).write_text(json.dumps(doc))
    legacy = PrivacyBudgetStore.load(cfg)
    assert legacy.run_charges == [RunCharge("run-1", "s16", 1, 1, N)]
    assert legacy.charged_run_step("run-1", 1, bytes.fromhex(d1), k) is None  # charged again: conservative
    assert legacy.charged_run_step("run-1", 1, bytes.fromhex(d1), "") is None


def test_reproducible_reveal_modes() -> None:
    assert reproducible(_spec("r", reveal_mode="sum")) and reproducible(_spec("r", reveal_mode="blinded"))
    assert reproducible(_spec("r"))
    assert not reproducible(_spec("r", model_params={**PARAMS, "lazy": {"gamma": 0.5}}))


# ---- real daemons ------------------------------------------------------------------------------------------


class Consortium:
    """m in-process PartyDaemons (real gRPC servers, mutual TLS) that can be restarted on their state.
    ``fixed``: the testing-only fixed_rng_keys (KEYS); False: every key from the OS CSPRNG."""

    def __init__(
        self, root: Path, fixed: bool = True, modes: tuple[str, ...] = ("sum", "blinded", "sign")
    ) -> None:
        self.root = root
        self.certs = make_certs(root, M)
        self.daemons: list[PartyDaemon] = []
        self.configs: list[Path] = []
        data = party_data(M, 30, seed=7)
        for pid in range(1, M + 1):
            pdir = root / f"party-{pid}"
            pdir.mkdir(parents=True, exist_ok=True)
            write_csv(pdir / "data.csv", {"x": data[pid - 1]})
            cfg = pdir / "party.toml"
            cfg.write_text(
                party_config_text(
                    pid,
                    M,
                    root,
                    self.certs,
                    pdir / "data.csv",
                    PartyOptions(
                        modes=modes,
                        fixed_rng_key=KEYS[pid] if fixed else None,
                        privacy_budget=BUDGET,
                        round_timeout_s=10.0,
                    ),
                )
            )
            self.configs.append(cfg)

    async def start(self) -> None:
        self.daemons = [PartyDaemon(load_config(c)) for c in self.configs]
        for d in self.daemons:
            await d.start()

    async def stop(self) -> None:
        for d in self.daemons:
            await d.stop(grace=0.5)
        self.daemons = []

    def endpoints(self) -> list[PartyEntry]:
        return [
            PartyEntry(d.cfg.id, party_identity(d.cfg.id), f"127.0.0.1:{d.port}") for d in self.daemons
        ]

    @asynccontextmanager
    async def coordinator(self) -> AsyncIterator[Coordinator]:
        async with Coordinator(self.endpoints(), tls_for(self.certs, "coordinator"), rpc_timeout_s=20.0) as c:
            yield c

    def state(self, pid: int) -> Path:
        return self.root / f"party-{pid}" / "state"

    def ledger(self, pid: int) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((self.state(pid) / LEDGER_FILE).read_text())
        return doc

    def charges(self, pid: int, run_id: str) -> dict[int, int]:
        raw = self.ledger(pid).get("run_charges", [])
        return run_step_counts([RunCharge.from_dict(c) for c in raw], run_id)

    def charged_decisions(self, pid: int) -> int:
        """Decisions in the privacy ledger's events (each a 0.1-GDP Gaussian event per decision)."""
        events = self.ledger(pid)["ledger"]["events"]
        assert all(e["type"] == GaussianEvent.kind for e in events)
        return sum(int(e["count"]) for e in events)

    def audit(self, pid: int) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (self.state(pid) / "audit.log").read_text().splitlines()]


async def _open(c: Coordinator, run: str | None, first: int = 1, **kw: Any) -> CoordinatorSession:
    return await c.open_session(SessionOptions(
        reveal_mode="sign", model="gaussian-mean", model_params=PARAMS, run_id=run, first_run_step=first, **kw
    ))


async def _steps(sess: CoordinatorSession, run_steps: range) -> list[npt.NDArray[np.bool_]]:
    out = []
    for k in run_steps:
        out.append((await sess.evaluate(_inputs(k), N)).accept)
    return out


def test_resume_after_coordinator_crash_replays_without_a_second_charge(tmp_path: Path) -> None:
    k, run = 3, "chain-A"

    async def main() -> None:
        lc = Consortium(tmp_path)
        await lc.start()
        try:
            # a run of k steps; the coordinator crashes after the parties completed step k: its decisions
            # are kept here only to compare (the crashed coordinator never used them)
            async with lc.coordinator() as c1:
                s1 = await _open(c1, run)
                assert s1.resume == {1: 0, 2: 0, 3: 0} and s1.warnings == [] and s1.replay_step == 0
                first = await _steps(s1, range(1, k + 1))
                dropped = first[-1]
            # the parties restart too (their records and ledgers are on disk)
            await lc.stop()
            await lc.start()
            async with lc.coordinator() as c2:
                s2 = await _open(c2, run, k)
                assert s2.resume == {1: k, 2: k, 3: k} and s2.replay_step == k and s2.warnings == []
                tr = await s2.evaluate_transcript(_inputs(k), N)
                assert tr.replayed and tr.run_step == k and tr.step == 1
                assert np.array_equal(_decode(s2, tr), dropped)  # the decisions the crash dropped
                nxt = (await s2.evaluate(_inputs(k + 1), N)).accept  # run step k + 1: computed afresh
                assert s2.last_transcript is not None and not s2.last_transcript.replayed
                assert s2.last_transcript.run_step == k + 1
                assert nxt.shape == (N,)
                await s2.close()
            for pid in range(1, M + 1):
                assert lc.charges(pid, run) == {s: 1 for s in range(1, k + 2)}  # each run step once
                assert lc.charged_decisions(pid) == (k + 1) * N  # ledger total = distinct run steps
                assert lc.daemons[pid - 1].decisions_used == (k + 1) * N
                lines = lc.audit(pid)
                rep = [x for x in lines if x.get("detail") == f"replayed run step {k}"]
                assert len(rep) == 1 and rep[0]["what"] == "Evaluate" and rep[0]["outcome"] == "ok"
                assert rep[0]["run_id"] == run and rep[0]["run_step"] == k and rep[0]["decisions"] == 0
                opened = [x for x in lines if x["what"] == "OpenSession" and x.get("run_id") == run]
                assert [x["first_run_step"] for x in opened] == [1, k]
                assert [x["held_run_step"] for x in opened] == [0, k]

            # a different input for the completed run step k + 1 is refused, naming the step
            async with lc.coordinator() as c3:
                s3 = await _open(c3, run, k + 1)
                assert s3.replay_step == k + 1
                with pytest.raises(SessionError) as ei:
                    await s3.evaluate(_inputs(99), N)
                assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
                msg = str(ei.value)
                assert f"run step {k + 1} of run '{run}' was completed here with other inputs" in msg
                await s3.abort("refused")
                # ... and so is the same proposals with another batch size
                s3b = await _open(c3, run, k + 1)
                with pytest.raises(SessionError, match=f"run step {k + 1} .* other inputs"):
                    await s3b.evaluate(_inputs(k + 1, N - 1), N - 1)
                await s3b.abort("refused")
            for pid in range(1, M + 1):
                assert lc.charged_decisions(pid) == (k + 1) * N  # refusals charge nothing
        finally:
            await lc.stop()

    asyncio.run(main())


def _decode(sess: CoordinatorSession, tr: StepTranscript) -> npt.NDArray[np.bool_]:
    inbox = {pid: msgs[-1][1] for pid, msgs in tr.messages.items()}
    return sess.spec.protocol.decode(sess.spec.params(), inbox, N, tr.step).accept


def test_step_not_held_by_every_party_is_evaluated_afresh_and_charged_once(tmp_path: Path) -> None:
    run = "chain-B"

    async def main() -> None:
        lc = Consortium(tmp_path)
        await lc.start()
        try:
            async with lc.coordinator() as c1:
                s1 = await _open(c1, run)
                await _steps(s1, range(1, 2))
                path2 = lc.daemons[1].replays.path_for(run)
                older = path2.read_bytes()  # party 2's record of run step 1
                (first_2,) = await _steps(s1, range(2, 3))
            path2.write_bytes(older)  # party 2 "crashed" after its charge, before it kept run step 2
            async with lc.coordinator() as c2:
                s2 = await _open(c2, run, 2)
                assert s2.resume == {1: 2, 2: 1, 3: 2} and s2.replay_step == 0
                for d in lc.daemons:  # the crashed coordinator's session of the run is superseded
                    old = d.sessions[s1.session_id]
                    assert old.state == "closed" and old.failure.startswith("superseded by session")
                assert len(s2.warnings) == 1
                assert "run step 2 was completed by parties [1, 3] but not by every party" in s2.warnings[0]
                assert "evaluated afresh" in s2.warnings[0]
                again = (await s2.evaluate(_inputs(2), N)).accept
                assert s2.last_transcript is not None and not s2.last_transcript.replayed
                assert np.array_equal(again, first_2)  # the same noise, hence the same decisions
                await s2.close()
            for pid in range(1, M + 1):
                assert lc.charges(pid, run) == {1: 1, 2: 1}  # each run step once: the same release
                assert lc.charged_decisions(pid) == 2 * N
                assert lc.daemons[pid - 1].decisions_used == 2 * N
                afresh = [x for x in lc.audit(pid) if x.get("charged_in")]
                assert len(afresh) == 1 and afresh[0]["run_step"] == 2 and afresh[0]["decisions_charged"] == 0
                assert afresh[0]["charged_in"] == s1.session_id.hex()[:16]
                assert "not charged again" in afresh[0]["detail"]
                assert not any(x.get("recharged") for x in lc.audit(pid))
            # now every party holds run step 2 of the same session again: a further resume replays it
            async with lc.coordinator() as c3:
                s3 = await _open(c3, run, 2)
                assert s3.resume == {1: 2, 2: 2, 3: 2} and s3.replay_step == 2
                await s3.evaluate(_inputs(2), N)
                assert s3.last_transcript is not None and s3.last_transcript.replayed
                await s3.close()
            assert all(lc.charged_decisions(pid) == 2 * N for pid in range(1, M + 1))

            # a corrupt record refuses the run's sessions with a clear error naming the file
            lc.daemons[2].replays.path_for(run).write_text("{garbage")
            async with lc.coordinator() as c4:
                with pytest.raises(SessionError) as ei:
                    await _open(c4, run, 3)
                assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION and ei.value.party == 3
                msg = str(ei.value)
                assert str(lc.daemons[2].replays.path_for(run)) in msg and "corrupt" in msg
        finally:
            await lc.stop()

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["sum", "blinded", "sign"])
def test_reevaluated_step_reveals_the_same_with_os_keys_across_restarts(tmp_path: Path, mode: str) -> None:
    """Keys from the OS CSPRNG (no fixed_rng_key): every party keeps its run noise key in its state dir, so a
    run step evaluated afresh in a new session, after the daemons restarted, reveals bit for bit what it
    revealed the first time (sum: S; blinded: S W + E, whose E term comes from the run key too; sign: the
    bits) and no party charges it again."""
    run = f"chain-os-{mode}"

    async def open_(c: Coordinator, first: int) -> CoordinatorSession:
        return await c.open_session(SessionOptions(
            reveal_mode=mode, model="gaussian-mean", model_params=PARAMS, run_id=run, first_run_step=first
        ))

    async def main() -> None:
        lc = Consortium(tmp_path, fixed=False)
        await lc.start()
        try:
            async with lc.coordinator() as c1:
                s1 = await open_(c1, 1)
                await s1.evaluate(_inputs(1), N)
                path2 = lc.daemons[1].replays.path_for(run)
                older = path2.read_bytes()
                first = await s1.evaluate(_inputs(2), N)
            keys = {d.cfg.id: d.replays.key_path_for(run).read_bytes() for d in lc.daemons}
            await lc.stop()
            path2.write_bytes(older)  # party 2 lost run step 2's record: the step cannot be replayed
            await lc.start()  # new processes' memory: the run keys come from the state dirs
            async with lc.coordinator() as c2:
                s2 = await open_(c2, 2)
                assert s2.replay_step == 0 and s2.resume == {1: 2, 2: 1, 3: 2}
                again = await s2.evaluate(_inputs(2), N)
                assert s2.last_transcript is not None and not s2.last_transcript.replayed
                assert np.array_equal(again.accept, first.accept)
                if mode != "sign":
                    assert first.revealed is not None and again.revealed is not None
                    assert np.array_equal(again.revealed, first.revealed)  # exactly the same release
                await s2.evaluate(_inputs(3), N)
                await s2.close()
            for pid in range(1, M + 1):
                assert lc.charges(pid, run) == {1: 1, 2: 1, 3: 1}
                assert lc.daemons[pid - 1].decisions_used == 3 * N
                key_file = lc.daemons[pid - 1].replays.key_path_for(run)
                assert key_file.read_bytes() == keys[pid] and key_file.stat().st_mode & 0o777 == 0o600
                key_hex = json.loads(keys[pid])["key"]
                assert key_hex not in (lc.state(pid) / "audit.log").read_text()  # the key never leaves
                opened = [x for x in lc.audit(pid) if x["what"] == "OpenSession" and x.get("run_id") == run]
                assert [x["run_key"] for x in opened] == ["created", "read"]
            assert len({json.loads(k)["key"] for k in keys.values()}) == M  # each party its own key
        finally:
            await lc.stop()

    asyncio.run(main())


def test_fresh_run_behaves_as_a_session_without_run(tmp_path: Path) -> None:
    """Same session id and fixed keys: a session of a new run runs the same protocol as a session without a
    run (same rounds and message sizes; the values differ because a run's noise is keyed by its run id and
    run step, see tests/coordinator/test_run.py::test_resumed_run_equals_uninterrupted) and is charged the
    same; only the run charges differ."""
    sid = bytes(range(16))

    async def run_once(root: Path, run_id: str | None) -> list[Any]:
        lc = Consortium(root)
        await lc.start()
        try:
            async with lc.coordinator() as c:
                s = await _open(c, run_id, session_id=sid)
                assert s.warnings == [] and s.replay_step == 0
                assert s.resume == ({1: 0, 2: 0, 3: 0} if run_id else {})
                out = []
                for k in (1, 2):
                    tr = await s.evaluate_transcript(_inputs(k), N)
                    assert not tr.replayed and tr.run_step == (k if run_id else 0)
                    out.append({p: [(r, a.shape) for r, a in msgs] for p, msgs in tr.messages.items()})
                await s.close()
            for pid in range(1, M + 1):
                assert lc.charged_decisions(pid) == 2 * N
                assert lc.charges(pid, run_id or "") == ({1: 1, 2: 1} if run_id else {})
            return out
        finally:
            await lc.stop()

    async def main() -> None:
        plain = await run_once(tmp_path / "plain", None)
        fresh = await run_once(tmp_path / "fresh", "chain-C")
        assert plain == fresh

    asyncio.run(main())


def test_changed_records_refuse_to_continue_a_run(tmp_path: Path) -> None:
    """A daemon restarted on other records (its snapshot hash differs from the one its run step ran on)
    refuses to continue the run, naming both hashes; on the same records the run continues."""
    run = "chain-data"

    async def main() -> None:
        lc = Consortium(tmp_path)
        await lc.start()
        try:
            async with lc.coordinator() as c1:
                s1 = await _open(c1, run)
                await _steps(s1, range(1, 3))
                await s1.close()
            before = lc.daemons[1].snapshot
            assert before is not None
            held = ReplayStore(lc.state(2), "party-2").load(run)
            assert held is not None and held.data_sha256 == before.sha256
            await lc.stop()
            # same records after a restart: the run goes on
            await lc.start()
            async with lc.coordinator() as c2:
                s2 = await _open(c2, run, 3)
                await _steps(s2, range(3, 4))
                await s2.close()
            await lc.stop()
            # registry 2's records change (one value): the run is refused there
            csv = tmp_path / "party-2" / "data.csv"
            lines = csv.read_text().splitlines()
            lines[5] = "0.5"
            csv.write_text("\n".join(lines) + "\n")
            await lc.start()
            after = lc.daemons[1].snapshot
            assert after is not None and after.sha256 != before.sha256
            async with lc.coordinator() as c3:
                with pytest.raises(SessionError) as ei:
                    await _open(c3, run, 4)
                assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION and ei.value.party == 2
                msg = str(ei.value)
                assert f"records changed since run step 3 of run '{run}'" in msg
                assert f"{before.sha256[:16]}… then, {after.sha256[:16]}… now" in msg
                s4 = await _open(c3, "a-new-run")  # a new run on the new records is fine
                await _steps(s4, range(1, 2))
                await s4.close()
        finally:
            await lc.stop()

    asyncio.run(main())
