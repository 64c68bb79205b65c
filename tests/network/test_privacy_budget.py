"""Party-enforced privacy budgets over daemon processes (``simulations.launcher.LocalConsortium``, mutual TLS
on loopback): the refusal survives a restart of the process, and ``confar privacy plan`` / ``report`` print
what the parties' ledgers hold. The budget store and in-process daemons are tested in
tests/parties/test_privacy_budget.py."""

from __future__ import annotations

import math
import re
import signal
from pathlib import Path

import grpc
import numpy as np
import pytest

from coordinator import cli as confar_cli
from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from mechanisms.privacy import GaussianEvent, compose_events, gdp_eps
from parties.privacy_budget import LEDGER_FILE
from simulations.launcher import LocalConsortium
from tests.parties.helpers import gm_inputs, party_data
from tests.parties.test_privacy_budget import BUDGET, PARAMS, TAU, _plan_file


@pytest.mark.slow
def test_multiprocess_budget_restart_plan_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m, n = 3, 30
    data = party_data(m, 30, seed=3)
    th, ts = np.zeros(n), np.linspace(-0.05, 0.05, n)
    work = tmp_path / "consortium"
    with LocalConsortium.start(m, data, workdir=work, round_timeout_s=5.0, privacy_budget=BUDGET) as lc:
        plan_path = _plan_file(tmp_path, lc.endpoints(), lc.certs)
        ledgers = [work / f"party-{p}" / "state" / LEDGER_FILE for p in range(1, m + 1)]

        # dry run: projected spend printed per party, nothing touched
        rc = confar_cli.main(["privacy", "plan", str(plan_path)])
        out = capsys.readouterr().out
        assert rc == 1  # 4 batches of 30 exceed mu_max = 1 (100 decisions of mu = 0.1)
        assert out.count("WOULD REFUSE") == m and "batches that fit: 3 of 4" in out
        assert f"projected {math.sqrt(120) / TAU:.6g}" in out
        assert not any(p.exists() for p in ledgers)
        audit = (work / "party-1" / "state" / "audit.log").read_text()
        assert '"what": "PlanPrivacy"' in audit and '"what": "Evaluate"' not in audit

        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=10.0) as coord:
            s = coord.open_session(
                SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params=PARAMS)
            )
            for _ in range(3):
                s.evaluate(gm_inputs(th, ts, PARAMS, m), n)
            with pytest.raises(SessionError) as ei:
                s.evaluate(gm_inputs(th, ts, PARAMS, m), n)
            assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "privacy budget" in str(ei.value)
            s.abort("budget exhausted")

        # restart party 1 (SIGTERM to the process we started): it loads its ledger and still refuses
        pp = lc.procs[1]
        pp.proc.send_signal(signal.SIGTERM)
        assert pp.proc.wait(10) == 0
        lc.spawn(1, pp.config, insecure=False)
        lc.wait_ready(30.0)
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=10.0) as coord:
            s = coord.open_session(
                SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params=PARAMS)
            )
            with pytest.raises(SessionError) as ei:
                s.evaluate(gm_inputs(th, ts, PARAMS, m), n)
            assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            s.abort("budget exhausted")

        # report: the spend equals an independent composition of the same mechanism
        report_path = _plan_file(tmp_path, lc.endpoints(), lc.certs, session=False)
        rc = confar_cli.main(["privacy", "report", str(report_path), "--plot", str(tmp_path / "plots")])
        out = capsys.readouterr().out
        assert rc == 0, out
    ref = compose_events([GaussianEvent(1 / TAU, count=90)])
    assert ref.mu is not None and ref.mu == pytest.approx(math.sqrt(90) / TAU)
    eps_ref = ref.eps_at(1e-5)
    assert eps_ref == pytest.approx(gdp_eps(math.sqrt(90) / TAU, 1e-5))
    spent = [float(x) for x in re.findall(r"spent mu = ([0-9.e+-]+) of 1", out)]
    assert len(spent) == m and all(v == pytest.approx(ref.mu, rel=1e-5) for v in spent)
    mus = [float(x) for x in re.findall(r"GDP mu = ([0-9.e+-]+);", out)]
    epss = [float(x) for x in re.findall(r"eps = ([0-9.e+-]+) at delta = 1e-05", out)]
    assert len(mus) == len(epss) == m
    assert all(v == pytest.approx(ref.mu, rel=1e-5) for v in mus)
    assert all(v == pytest.approx(eps_ref, rel=1e-5) for v in epss)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        f"party-{i}-tradeoff.png" for i in (1, 2, 3)
    ]
