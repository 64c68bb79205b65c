"""``confar run`` over real party daemons (in-process gRPC servers with mTLS on loopback): a penalty-MH run,
a run stopped after k batches (as if the coordinator crashed before its k-th checkpoint) and resumed, the
parties' ledgers charging each run step once, and the privacy dry run refusing before any session opens.
``confar run --simulate`` over daemon processes, stopped and resumed, is tests/network/test_run.py."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.checkpoint import RunError, StopRequested
from coordinator.experiment import Experiment, load_experiment
from coordinator.run import run_experiment
from tests.coordinator.experiment_text import head
from tests.parties.helpers import inproc_consortium, tls_for

M = 3
ITER, CHAINS, STOP = 12, 4, 5

EXPERIMENT = head("resume-test", 99) + """
[model]
name = "beta-bernoulli"
[model.params]
column = "x"

[sampler]
kind = "penalty"
chains = {chains}
iterations = {iterations}
warmup = 4
proposal_scale = 0.05
init = [0.3]
tau = 20.0
n_records = 180

[reveal]
mode = "sign"

[privacy]
gdp_mu = {target}

[output]
formats = []
"""


def experiment(tmp_path: Path, target: float = 5.0, auto: bool = False) -> Experiment:
    p = tmp_path / "exp.toml"
    text = EXPERIMENT.format(chains=CHAINS, iterations=ITER, target=target)
    if auto:  # the automatic proposal (issue 24 item 9): no proposal_scale; the warm-up covers adapt_stop = 6
        text = text.replace("warmup = 4\nproposal_scale = 0.05\n", "warmup = 6\n")
    p.write_text(text)
    return load_experiment(p)


def fixed_key(pid: int) -> bytes:
    return hashlib.sha256(b"test-run/%d" % pid).digest()


def party_data() -> list[np.ndarray]:
    """Each party's records (column ``x``): 60 Bernoulli(0.3) draws."""
    rng = np.random.default_rng(5)
    return [(rng.random(60) < 0.3).astype(np.float64) for _ in range(M)]


@contextlib.contextmanager
def parties(root: Path, gdp_mu: float = 10.0) -> Iterator[tuple[list[Any], Any]]:
    """In-process daemons (budget mu_max = ``gdp_mu``, fixed noise keys) served from a background event
    loop."""
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    data = party_data()
    cm = inproc_consortium(
        root,
        M,
        data,
        fixed_keys={pid: fixed_key(pid) for pid in range(1, M + 1)},
        models=("beta-bernoulli",),
        modes=("sign",),
        privacy_budget={"gdp_mu": gdp_mu},
    )
    _daemons, eps, certs = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result(60)
    try:
        yield eps, tls_for(certs, "coordinator")
    finally:
        asyncio.run_coroutine_threadsafe(cm.__aexit__(None, None, None), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)


def ledger_counts(root: Path) -> dict[int, int]:
    """Decisions each party's persisted ledger accounted (sum of event counts)."""
    out = {}
    for pid in range(1, M + 1):
        doc = json.loads((root / f"party-{pid}" / "state" / "privacy_ledger.json").read_text())
        out[pid] = sum(int(e.get("count", 1)) for e in doc["ledger"]["events"])
    return out


def charged_steps(root: Path, pid: int) -> list[int]:
    """The run steps a party's ledger charged, one entry per charge (its ``run_charges``)."""
    doc = json.loads((root / f"party-{pid}" / "state" / "privacy_ledger.json").read_text())
    return sorted(s for c in doc["run_charges"] for s in range(int(c["from_step"]), int(c["to_step"]) + 1))


def quiet(_: str) -> None:
    pass


def test_run_stop_resume_charges_each_step_once(tmp_path: Path) -> None:
    exp = experiment(tmp_path)
    with parties(tmp_path / "a") as (eps, tls):
        full = run_experiment(exp, eps, tls, tmp_path / "out-a", log=quiet)
    assert full.draws.shape == (CHAINS, ITER, 1) and full.run_steps == ITER
    assert np.isfinite(full.draws).all() and ((full.draws > 0) & (full.draws < 1)).all()
    asked_a = json.loads((tmp_path / "out-a" / "checkpoint" / "state.json").read_text())["asked"]
    assert ledger_counts(tmp_path / "a") == dict.fromkeys(range(1, M + 1), asked_a)

    out_b = tmp_path / "out-b"
    seen: list[int] = []
    with parties(tmp_path / "b") as (eps, tls):
        with pytest.raises(StopRequested):
            run_experiment(
                exp, eps, tls, out_b, progress=lambda p: seen.append(p.done), stop_after_batches=STOP
            )
        st = json.loads((out_b / "checkpoint" / "state.json").read_text())
        assert (
            st["batch"] == STOP - 1 and st["run_step"] == STOP - 1
        )  # the STOP-th batch was never checkpointed
        assert seen == list(range(1, STOP))
        resumed = run_experiment(exp, eps, tls, out_b, resume=True, log=quiet)
    meta = json.loads((out_b / "run.json").read_text())
    assert len(meta["sessions"]) == 2 and meta["sessions"][1]["first_run_step"] == STOP
    assert resumed.run_id == meta["run_id"] and resumed.run_steps == ITER
    assert resumed.draws.shape == full.draws.shape
    # the checkpointed batches are kept as they were (runs a and b had different session ids, hence noise)
    assert np.isfinite(resumed.draws).all() and ((resumed.draws > 0) & (resumed.draws < 1)).all()
    for pid in range(1, M + 1):  # batch STOP (done by the parties, never checkpointed) was replayed
        audit = (tmp_path / "b" / f"party-{pid}" / "state" / "audit.log").read_text()
        assert f"replayed run step {STOP}" in audit or f"replayed run step {STOP}" in audit.replace('"', "")
    # every run step charged once at every party (the replayed step STOP was not charged again)
    asked_b = json.loads((out_b / "checkpoint" / "state.json").read_text())["asked"]
    assert ledger_counts(tmp_path / "b") == dict.fromkeys(range(1, M + 1), asked_b)
    for pid in range(1, M + 1):
        assert charged_steps(tmp_path / "b", pid) == list(range(1, ITER + 1))
    # every party held step STOP from one session: a replay, no re-charge (the run is short: its
    # convergence warnings are expected and not about the resume)
    assert not [w for w in resumed.warnings if "run step" in w or "budget" in w], resumed.warnings


@pytest.mark.parametrize("auto", [False, True], ids=["proposal_scale", "automatic-proposal"])
def test_resumed_run_equals_uninterrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, auto: bool
) -> None:
    """With fixed noise keys the parties key their noise by (run id, run step), so a run stopped after k
    batches and resumed in a new session draws exactly what a run never interrupted draws. Both runs get
    the same run id (fresh random otherwise) so that their noise can be the same. With the automatic
    proposal the run stops while the chains' scales still adapt (STOP < adapt_stop): the checkpoint carries
    them."""
    import coordinator.checkpoint

    monkeypatch.setattr(coordinator.checkpoint.secrets, "token_hex", lambda n: "ab" * n)
    exp = experiment(tmp_path, auto=auto)
    assert exp.sampler.scale_adapt == auto and STOP < (exp.sampler.adapt_stop if auto else ITER)
    with parties(tmp_path / "a") as (eps, tls):
        full = run_experiment(exp, eps, tls, tmp_path / "out-a", log=quiet)
    with parties(tmp_path / "b") as (eps, tls):
        with pytest.raises(StopRequested):
            run_experiment(exp, eps, tls, tmp_path / "out-b", stop_after_batches=STOP, log=quiet)
        resumed = run_experiment(exp, eps, tls, tmp_path / "out-b", resume=True, log=quiet)
    np.testing.assert_array_equal(resumed.draws, full.draws)


def test_privacy_target_and_budget_refusals_before_any_session(tmp_path: Path) -> None:
    with parties(tmp_path / "p") as (eps, tls):
        # 12 batches x 4 decisions at mu = 0.05 each: sqrt(48) * 0.05 = 0.35 > target 0.1
        with pytest.raises(RunError, match=r"(?s)does not fit the privacy target.*party 1 .*mu = 0\.346"):
            run_experiment(experiment(tmp_path, target=0.1), eps, tls, tmp_path / "out-1", log=quiet)
        big = experiment(tmp_path)
        from dataclasses import replace

        over = replace(big, sampler=replace(big.sampler, iterations=20000, warmup=4))
        with pytest.raises(RunError, match=r"(?s)privacy dry run failed.*WOULD REFUSE"):
            run_experiment(over, eps, tls, tmp_path / "out-2", log=quiet)
        # nothing was charged: no session was opened
        for pid in range(1, M + 1):
            assert not (tmp_path / "p" / f"party-{pid}" / "state" / "privacy_ledger.json").exists()


# ---- a run past the registries' budgets (issue 40) --------------------------------------------------------


def _variant(tmp_path: Path, name: str, old: str, new: str, stop: bool) -> Experiment:
    p = tmp_path / f"{name}.toml"
    text = EXPERIMENT.format(chains=CHAINS, iterations=ITER, target=5.0).replace(old, new)
    text = text.replace("[output]\nformats = []\n", "")
    if stop:
        text = text.replace("[privacy]\n", "[privacy]\nstop_at_budget = true\n")
    p.write_text(text)
    return load_experiment(p)


def test_a_run_past_a_budget_is_refused_unless_it_may_stop(tmp_path: Path) -> None:
    """Exact charges (penalty with tau: mu = 0.05 a decision, 4 a batch): budgets of mu = 0.15 fit 2 of the
    12 batches. Refused before any session, naming the fix; with ``stop_at_budget`` told it will stop at
    batch 3 and stopped there, in its warm-up (4 iterations), with the warm-up's draws written."""
    with parties(tmp_path / "p", gdp_mu=0.15) as (eps, tls):
        exp = _variant(tmp_path, "exact", "", "", stop=False)
        refused = r"(?s)privacy dry run failed.*WOULD REFUSE.*stop_at_budget = true"
        with pytest.raises(RunError, match=refused):
            run_experiment(exp, eps, tls, tmp_path / "out-1", log=quiet)
        for pid in range(1, M + 1):  # nothing charged: no session was opened
            assert not (tmp_path / "p" / f"party-{pid}" / "state" / "privacy_ledger.json").exists()
        said: list[str] = []
        stop = _variant(tmp_path, "exact-stop", "", "", stop=True)
        out = run_experiment(stop, eps, tls, tmp_path / "out-2", log=said.append)
    assert any("privacy dry run: this run will stop at batch 3 of 12" in s for s in said), said
    assert out.stopped.startswith("a registry's privacy budget ran out at batch 3 of 12, in the warm-up")
    assert not out.finished and out.draws.shape == (CHAINS, 2, 1) and out.posterior_draws == 0
    assert set(out.written) >= {"warmup.nc", "warmup_draws.csv", "summary.txt", "provenance.json"}
    assert "posterior.nc" not in out.written
    assert ledger_counts(tmp_path / "p") == dict.fromkeys(range(1, M + 1), out.counts["decisions_asked"])


def test_a_run_charged_per_decision_past_a_budget_at_the_cap_is_refused(tmp_path: Path) -> None:
    """Issue 40: a penalty with sd (each decision charged at its own sensitivity, at most the cap), no
    target_epsilon, whose dry run at the cap passes the budgets: it used to be accepted (the cap's figure
    being an upper bound) and to stop wherever a registry refused a batch. Now refused before any session,
    naming each registry's figures and the fixes; with ``stop_at_budget`` it runs, told where it may stop."""
    pen = ("tau = 20.0\nn_records = 180", "sd = 1.0\nmax_sensitivity = 0.5")
    with parties(tmp_path / "p", gdp_mu=2.0) as (eps, tls):
        exp = _variant(tmp_path, "sd", *pen, stop=False)
        assert exp.sampler.penalty is not None and exp.sampler.penalty.fixed
        with pytest.raises(RunError) as ei:
            run_experiment(exp, eps, tls, tmp_path / "out-1", log=quiet)
        msg = str(ei.value)
        assert "does not fit the registries' privacy budgets" in msg and "max_sensitivity = 0.5" in msg
        for pid in range(1, M + 1):  # 12 x 4 decisions at mu = 0.5 / (1 / sqrt(3)) each: sqrt(48) * 0.866 = 6
            assert f"party {pid} (party-{pid}): mu: spent 0 of 2; the whole run would reach 6; 1 of 12" in msg
        assert "target_epsilon" in msg and "at most 1 fit at the cap" in msg
        assert "stop_at_budget = true" in msg
        assert "run may stop at batch 2 of 12 or later (in the warm-up, without a posterior)" in msg
        for pid in range(1, M + 1):
            assert not (tmp_path / "p" / f"party-{pid}" / "state" / "privacy_ledger.json").exists()
        said: list[str] = []
        stop = _variant(tmp_path, "sd-stop", *pen, stop=True)
        out = run_experiment(stop, eps, tls, tmp_path / "out-2", log=said.append)
    assert any("this run may stop at batch ~2 of 12 when a registry's budget runs out" in s for s in said)
    for r in out.privacy_reports.values():  # each registry kept to its budget whatever the run did
        assert not isinstance(r, str) and r.budget.spent <= 2.0 * (1 + 1e-9)
