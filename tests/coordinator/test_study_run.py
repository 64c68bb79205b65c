"""``confar run`` of an experiment with a ``[study]`` against registries that require approval (issue 37; the
run's own code path, over in-process daemons with mTLS): refused before anything is released while a
registry has not approved the study (naming the study and how to approve it), run once every registry
approved it, a second run that would pass the study's cap refused by the dry run, and a revoked approval
stopping the next run; nothing is charged by a refused run."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.checkpoint import RunError
from coordinator.experiment import load_experiment
from coordinator.run import run_experiment
from parties.cli import main as party_main
from proto.files import write_durable
from proto.study import file_text
from tests.coordinator.experiment_text import head
from tests.parties.helpers import inproc_consortium, tls_for

M = 3
FUTURE = (dt.date.today() + dt.timedelta(days=60)).isoformat()
EXPERIMENT = (
    head("study-run", 7)
    + """
[model]
name = "beta-bernoulli"
[model.params]
column = "x"

[sampler]
kind = "penalty"
chains = 4
iterations = 10
warmup = 4
proposal_scale = 0.05
init = [0.3]
tau = 20.0
n_records = 180

[reveal]
mode = "sign"

[privacy]
epsilon = 20.0
delta = 1e-6

[output]
formats = []

[study]
title = "Prevalence of x"
reference = "AC-2026-017"
expires = "2027-12-31"
"""
)


@contextlib.contextmanager
def registries(root: Path) -> Iterator[tuple[list[Any], list[Any], Any]]:
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    rng = np.random.default_rng(5)
    data = [(rng.random(60) < 0.3).astype(np.float64) for _ in range(M)]
    cm = inproc_consortium(
        root,
        M,
        data,
        models=("beta-bernoulli",),
        modes=("sign",),
        privacy_budget={"epsilon": 50.0, "delta": 1e-6},
        require_approval=True,
    )
    daemons, eps, certs = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result(60)
    try:
        yield daemons, eps, tls_for(certs, "coordinator")
    finally:
        asyncio.run_coroutine_threadsafe(cm.__aexit__(None, None, None), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)


def ledger(root: Path, pid: int) -> bytes:
    path = root / f"party-{pid}" / "state" / "privacy_ledger.json"
    return path.read_bytes() if path.exists() else b""


def quiet(_: str) -> None:
    pass


def test_a_study_runs_once_approved_within_its_cap_until_revoked(tmp_path: Path) -> None:
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(EXPERIMENT)
    exp = load_experiment(exp_file)
    assert exp.study is not None
    study = exp.study.study()
    study_file = tmp_path / "study.json"
    write_durable(study_file, file_text(study.doc).encode())
    root = tmp_path / "consortium"

    def approve(pid: int, cap: float) -> None:
        cfg = str(root / f"party-{pid}" / "party.toml")
        args = ["study", "approve", str(study_file), "--config", cfg, "--max-epsilon", f"{cap!r}"]
        assert party_main([*args, "--expires", FUTURE]) == 0

    with registries(root) as (daemons, eps, tls):
        with pytest.raises(
            RunError,
            match=rf"study {study.short} \('Prevalence of x', reference 'AC-2026-017'\) "
            r"is not approved at this registry \(party-1\): its custodian reviews",
        ):
            run_experiment(exp, eps, tls, tmp_path / "out-0", log=quiet)
        assert all(ledger(root, pid) == b"" for pid in (1, 2, 3))  # refused before anything was released
        for pid in (1, 2, 3):
            approve(pid, 100.0)
        run_experiment(exp, eps, tls, tmp_path / "out-1", log=quiet)
        spent = []
        for d in daemons:
            gov = d.service.store.governance
            a = gov.approvals.book().get(study.digest)
            spent.append(gov.spent(a))
            assert spent[-1] > 0 and spent[-1] == pytest.approx(d.service.privacy.ledger.spent(), rel=1e-9)
        # a cap that holds one run but not two: the second run is refused by its dry run, nothing charged
        for pid in (1, 2, 3):
            approve(pid, 1.1 * spent[pid - 1])
        before = [ledger(root, pid) for pid in (1, 2, 3)]
        with pytest.raises(
            RunError,
            match=rf"would exceed the privacy budget this registry approved for study "
            rf"{study.short}",
        ):
            run_experiment(exp, eps, tls, tmp_path / "out-2", log=quiet)
        assert before == [ledger(root, pid) for pid in (1, 2, 3)]
        # a larger cap again, then revoked at one registry: the next run stops before its first session
        for pid in (1, 2, 3):
            approve(pid, 100.0)
        cfg2 = str(root / "party-2" / "party.toml")
        assert (
            party_main(["study", "revoke", str(study_file), "--config", cfg2, "--reason", "protocol lapsed"])
            == 0
        )
        with pytest.raises(RunError, match=r"party-2.*was revoked at .*: protocol lapsed"):
            run_experiment(exp, eps, tls, tmp_path / "out-3", log=quiet)
        assert before == [ledger(root, pid) for pid in (1, 2, 3)]
        opened = [json.loads(x) for x in (root / "party-1" / "state" / "audit.log").read_text().splitlines()]
        assert {x["study"] for x in opened if x["what"] == "OpenSession" and x["outcome"] == "ok"} == {
            study.digest
        }
