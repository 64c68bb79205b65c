"""``[budget] per_run = "worst-record"`` (issue 35 item 2): a registry charges a fixed-sd penalty run of a
logistic model at its worst record over the run. The run's state is kept with the charge (the snapshot and
the ledger journal), restored on reload and replay, and each run step is charged once across a coordinator
crash and a resume; the run costs less than per decision on the same steps and never less than the brute
force over the records the model allows. Real daemons (m = 3, mutual TLS) in the test's process."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.api import Coordinator, SessionOptions
from coordinator.certs import party_identity
from mechanisms.kinds import DecisionPlan, worst_record_charge
from mechanisms.privacy import RDPBudget
from mechanisms.privacy.ledger import event_rdp
from mechanisms.privacy.worst_record import WorstRecordCharge
from mechanisms.samplers.requests import step_sensitivity
from parties.config import ConfigError, PartyConfig, load_config
from parties.daemon import PartyDaemon
from parties.journal import JOURNAL_FILE
from parties.privacy_budget import (
    LEDGER_FILE,
    LedgerFileError,
    PrivacyBudgetStore,
    configured_budget,
    session_view,
)
from parties.registry import get_analysis
from proto.spec import PartyEntry, SessionSpec
from simulations.launcher import PartyOptions, party_config_text, write_csv
from simulations.worst_record import ARGS, independence_run, record_losses
from tests.parties.helpers import make_certs, tls_for

M, N, SD = 3, 16, 0.8
RUN = independence_run(seed=5, steps=90)
PARAMS: dict[str, Any] = {
    "model_args": ARGS,
    "kind": "mh",
    "penalty": {"sd": SD, "max_sensitivity": RUN.cap},
}
# one colluding registry (<= t): the coalition sees only the accept bit, so the Rényi bound of the bit counts
BUDGET: dict[str, Any] = {
    "epsilon": 500.0,
    "delta": 1e-5,
    "accountant": "renyi",
    "neighbours": "add-remove",
    "colluding": 1,
}
KEYS = {pid: bytes([pid]) * 32 for pid in range(1, M + 1)}


def _inputs(k: int) -> dict[str, Any]:
    """Run step k's batch: decisions (k - 1) N .. k N - 1 of the independence sampler's run."""
    sl = slice((k - 1) * N, k * N)
    return {"theta": RUN.theta[sl], "theta_star": RUN.theta_star[sl], "public": np.zeros(N)}


def _cfg(
    tmp_path: Path, per_run: str | None, name: str = "p", budget: dict[str, Any] = BUDGET
) -> PartyConfig:
    budget = budget | ({} if per_run is None else {"per_run": per_run})
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    path = root / "party-1.toml"
    options = PartyOptions(models=("bayes-logistic",), privacy_budget=budget)
    path.write_text(party_config_text(1, M, root, None, None, options))
    return load_config(path, insecure=True)


def _spec(run_id: str = "run-W") -> SessionSpec:
    return SessionSpec(
        session_id=b"w" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, M + 1)),
        t=1,
        reveal_mode="sign",
        model="bayes-logistic",
        model_params=PARAMS,
        run_id=run_id,
        first_run_step=1,
    )


def _rho(store: PrivacyBudgetStore) -> float:
    assert store.ledger is not None and isinstance(store.budget, RDPBudget) and store.budget.alpha is not None
    return sum(event_rdp(e, store.budget.alpha) * e.count for e in store.ledger.events)


def _pure(cfg: PartyConfig) -> WorstRecordCharge:
    """The per-run charge as the party computes it (its view of the session, its order)."""
    budget = configured_budget(cfg)
    assert isinstance(budget, RDPBudget) and budget.alpha is not None
    wr = worst_record_charge(
        DecisionPlan.from_params(PARAMS), RUN.model, session_view(cfg, _spec()), "add-remove", (budget.alpha,)
    )
    assert wr is not None and wr.table is not None
    return wr


def _truth(steps: int, cfg: PartyConfig) -> float:
    """sup over a dense set of allowed records of Σ_t ρ_table(|Δℓ_t(x)|), the real log-likelihood."""
    losses = record_losses(RUN.model, RUN.theta[:steps], RUN.theta_star[:steps], "add-remove", 31)
    table = _pure(cfg).table
    assert table is not None
    return float(np.max(table.rho(losses.ravel()).reshape(losses.shape).sum(axis=1)))


def test_per_run_config(tmp_path: Path) -> None:
    assert _cfg(tmp_path, None).per_run == "per-decision"
    assert _cfg(tmp_path, "worst-record").per_run == "worst-record"
    with pytest.raises(ConfigError, match=re.escape("budget.per_run: must be one of")):
        _cfg(tmp_path, "worst")
    path = tmp_path / "q.toml"
    path.write_text(party_config_text(
        1,
        M,
        tmp_path,
        None,
        None,
        PartyOptions(
            privacy_budget={"per_run": "worst-record"},
        ),
    ))
    with pytest.raises(ConfigError, match=re.escape("budget.per_run: only used with a privacy budget")):
        load_config(path, insecure=True)


def test_store_charges_the_run_at_its_worst_record_and_reloads_its_state(tmp_path: Path) -> None:
    a = get_analysis("bayes-logistic", PARAMS)
    worst, plain = (PrivacyBudgetStore.load(_cfg(tmp_path, p, p)) for p in ("worst-record", "per-decision"))
    cfg_w, cfg_p = _cfg(tmp_path, "worst-record", "worst-record"), _cfg(tmp_path, None, "per-decision")
    k = 4
    for step in range(1, k + 1):
        ev, rs = worst.run_events_for(cfg_w, a, _spec(), N, _inputs(step))
        assert rs is not None and rs[0].startswith("run-W/") and "worst record" in ev[0].label
        worst.check(ev)
        worst.commit(ev, None, rs)
        ev_p, none = plain.run_events_for(cfg_p, a, _spec(), N, _inputs(step))
        assert none is None  # per decision: no run state
        plain.commit(ev_p)
    assert worst.budget is not None and isinstance(worst.budget, RDPBudget) and worst.budget.alpha
    truth = _truth(k * N, cfg_w)
    assert truth <= _rho(worst) < _rho(plain)
    (key,) = worst.run_states
    assert worst.run_states[key]["decisions"] == k * N
    assert worst.ledger is not None and len(worst.ledger.events) == 1  # the run's increments merge: μ², ρ add
    # reloaded from the file: the same state, and the next batch charged the same as without the reload
    again = PrivacyBudgetStore.load(cfg_w)
    assert again.run_states == json.loads(json.dumps(worst.run_states))
    assert _rho(again) == pytest.approx(_rho(worst), rel=1e-12)
    nxt = worst.run_events_for(cfg_w, a, _spec(), N, _inputs(k + 1))
    nxt2 = again.run_events_for(cfg_w, a, _spec(), N, _inputs(k + 1))
    assert nxt[0][0].to_dict()["rho"] == pytest.approx(nxt2[0][0].to_dict()["rho"], rel=1e-12)
    # another run starts from zero: its first batch costs what this run's first batch did
    first = worst.run_events_for(cfg_w, a, _spec("run-V"), N, _inputs(1))[0][0]
    fresh = PrivacyBudgetStore.load(_cfg(tmp_path, "worst-record", "fresh"))
    fresh_first = fresh.run_events_for(cfg_w, a, _spec(), N, _inputs(1))[0][0]
    assert first.to_dict()["rho"] == fresh_first.to_dict()["rho"]
    # a damaged state is refused at start-up, naming the file
    doc = json.loads((cfg_w.state_dir / LEDGER_FILE).read_text())
    doc["worst_record"][key] = {"grams": []}
    (cfg_w.state_dir / LEDGER_FILE).write_text(json.dumps(doc))
    where = re.escape(str(cfg_w.state_dir / LEDGER_FILE))
    with pytest.raises(LedgerFileError, match=rf"{where}.*worst-record"):
        PrivacyBudgetStore.load(cfg_w)


def test_a_model_without_the_structure_keeps_the_per_decision_charge(tmp_path: Path) -> None:
    from tests.parties.helpers import gm_inputs, gm_params

    params = gm_params(1.0, (-4.0, 6.0), penalty={"sd": 0.5, "max_sensitivity": 2.0})
    spec = SessionSpec(
        session_id=b"g" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, M + 1)),
        t=1,
        reveal_mode="sign",
        model="gaussian-mean",
        model_params=params,
    )
    cfg = _cfg(tmp_path, "worst-record")
    store = PrivacyBudgetStore.load(cfg)
    th = np.full(4, 1.0)
    inputs = gm_inputs(th, th + 0.01, params, M)
    ev, rs = store.run_events_for(cfg, get_analysis("gaussian-mean", params), spec, 4, inputs)
    assert rs is None and "per decision" in ev[0].label


class Consortium:
    """m in-process PartyDaemons (real gRPC servers, mutual TLS) charging per run, restartable on their
    state; each holds logistic records (x1, x2, y)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.certs = make_certs(root, M)
        self.daemons: list[PartyDaemon] = []
        self.configs: list[Path] = []
        data = RUN.model.synthetic_data(np.random.default_rng(3), (40,) * M)
        assert data is not None
        for pid in range(1, M + 1):
            pdir = root / f"party-{pid}"
            pdir.mkdir(parents=True, exist_ok=True)
            write_csv(pdir / "data.csv", data[pid - 1])
            cfg = pdir / "party.toml"
            cfg.write_text(
                party_config_text(
                    pid,
                    M,
                    root,
                    self.certs,
                    pdir / "data.csv",
                    PartyOptions(
                        models=("bayes-logistic",),
                        modes=("sign",),
                        fixed_rng_key=KEYS[pid],
                        privacy_budget=BUDGET | {"per_run": "worst-record"},
                        round_timeout_s=10.0,
                    ),
                )
            )  # fmt: skip
            self.configs.append(cfg)

    async def start(self) -> None:
        self.daemons = [PartyDaemon(load_config(c)) for c in self.configs]
        for d in self.daemons:
            await d.start()

    async def stop(self) -> None:
        for d in self.daemons:
            await d.stop(grace=0.5)
        self.daemons = []

    def coordinator(self) -> Coordinator:
        eps = [PartyEntry(d.cfg.id, party_identity(d.cfg.id), f"127.0.0.1:{d.port}") for d in self.daemons]
        return Coordinator(eps, tls_for(self.certs, "coordinator"), rpc_timeout_s=20.0)

    def state(self, pid: int) -> Path:
        return self.root / f"party-{pid}" / "state"


def test_run_charged_once_per_step_across_a_crash_and_a_resume(tmp_path: Path) -> None:
    """k run steps; the state directory as a crash would leave it (the journal not yet compacted) restores
    the run's state; the parties restart, the coordinator resumes at step k (replayed: not charged) and
    runs step k + 1: each party's ledger is then exactly the pure per-run charge of steps 1 .. k + 1."""
    k, run = 3, "chain-W"
    lc = Consortium(tmp_path)

    async def open_(c: Coordinator, first: int) -> Any:
        return await c.open_session(SessionOptions(
            reveal_mode="sign", model="bayes-logistic", model_params=PARAMS, run_id=run, first_run_step=first
        ))

    async def main() -> None:
        await lc.start()
        try:
            async with lc.coordinator() as c1:
                s1 = await open_(c1, 1)
                for step in range(1, k + 1):
                    await s1.evaluate(_inputs(step), N)
                # a crash now: the files as they are (the charges in the journal, not the snapshot)
                crashed = tmp_path / "crashed"
                shutil.copytree(lc.state(1), crashed)
                assert (crashed / JOURNAL_FILE).exists()
            await lc.stop()
            cfg = load_config(lc.configs[0])
            restored = PrivacyBudgetStore.load(cfg)  # the daemon's snapshot (compacted at its stop)
            from_crash = PrivacyBudgetStore.load(dataclasses.replace(cfg, state_dir=crashed))
            assert from_crash.run_states == restored.run_states
            snap = crashed / LEDGER_FILE  # the crash's snapshot alone does not hold the run's state:
            held = json.loads(snap.read_text()).get("worst_record", {}) if snap.exists() else {}
            assert held != from_crash.run_states  # the journal's records restored it
            assert _rho(from_crash) == pytest.approx(_rho(restored), rel=1e-12)
            await lc.start()
            async with lc.coordinator() as c2:
                s2 = await open_(c2, k)
                tr = await s2.evaluate_transcript(_inputs(k), N)
                assert tr.replayed
                await s2.evaluate(_inputs(k + 1), N)
                assert s2.last_transcript is not None and not s2.last_transcript.replayed
                await s2.close()
        finally:
            await lc.stop()

    asyncio.run(main())
    steps = (k + 1) * N
    for pid in range(1, M + 1):
        cfg = load_config(lc.configs[pid - 1])
        store = PrivacyBudgetStore.load(cfg)
        (key,) = store.run_states
        assert key.startswith(f"{run}/") and store.run_states[key]["decisions"] == steps  # each step once
        assert isinstance(store.budget, RDPBudget) and store.budget.alpha is not None
        alpha = store.budget.alpha
        wr = _pure(cfg)  # the pure charge of the distinct steps, batch by batch
        state, rho = wr.empty(), 0.0
        for step in range(1, k + 2):
            inp = _inputs(step)
            delta = step_sensitivity(RUN.model, inp["theta"], inp["theta_star"], "add-remove")
            (ev,), state = wr.increment(state, inp["theta"], inp["theta_star"], delta, "pure")
            rho += ev.rdp(alpha)  # type: ignore[attr-defined]
        assert _rho(store) == pytest.approx(rho, rel=1e-9)
        deltas = step_sensitivity(RUN.model, RUN.theta[:steps], RUN.theta_star[:steps], "add-remove")
        assert _truth(steps, cfg) <= _rho(store) < float(wr.per_decision(deltas)[1])


def test_a_replace_one_registry_charges_each_decision_its_range(tmp_path: Path) -> None:
    """A registry protecting replace-one neighbours (the default) with a GDP budget charges a logistic batch
    per decision at the log-ratio's own range (issue 35 item 3.4), what its store hands the daemon: below the
    old twice-the-bound charge, and never below the brute force over pairs of allowed records (both
    outcomes) at any step or summed over the batch."""
    cfg = _cfg(tmp_path, None, "ro", budget={"gdp_mu": 50.0, "colluding": 1})
    assert cfg.neighbours == "replace-one"
    store = PrivacyBudgetStore.load(cfg)
    a = get_analysis("bayes-logistic", _spec().model_params)
    ev, state = store.run_events_for(cfg, a, _spec(), N, _inputs(1))
    assert state is None and len(ev) == 1 and "replace-one" in (ev[0].label or "")
    s_res = SD * session_view(cfg, _spec()).threat.residual_parties ** 0.5
    theta, star = RUN.theta[:N], RUN.theta_star[:N]
    delta = step_sensitivity(RUN.model, theta, star, "replace-one")
    mu = ev[0].gdp_mu()
    assert mu == pytest.approx(float(np.sqrt(np.sum((delta / s_res) ** 2))), rel=1e-12)
    old = 2.0 * np.asarray(RUN.model.record_ratio_bound(theta, star))
    assert mu < float(np.sqrt(np.sum((old / s_res) ** 2))) / 1.1
    losses = record_losses(RUN.model, theta, star, "replace-one", 9)  # (pairs, steps)
    assert np.all(losses.max(axis=0) <= delta * (1 + 1e-9))
    assert float(np.sqrt(np.max(np.sum(losses**2, axis=1)))) / s_res <= mu
