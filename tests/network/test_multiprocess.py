"""Real confar-party processes (simulations.launcher): a session over mTLS in both topologies, a party
dying mid-session, graceful SIGTERM, and `confar simulate`."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest

from coordinator import cli as confar_cli
from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from simulations.launcher import LocalConsortium
from tests.parties.helpers import gaussian_terms, party_data

pytestmark = pytest.mark.slow


def test_sessions_and_party_death(tmp_path: Path) -> None:
    m, n = 3, 10
    data = party_data(m, 30, seed=1)
    th, ts = np.zeros(n), np.linspace(-1, 2, n)
    exact = sum(gaussian_terms(x, th, ts) for x in data)
    with LocalConsortium.start(m, data, workdir=tmp_path, round_timeout_s=3.0) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=5.0) as coord:
            for topology in ("mesh", "relay"):
                s = coord.open_session(SessionOptions(
                    reveal_mode="sum",
                    model="gaussian-mean",
                    model_params={"noise": "none"},
                    topology=topology,
                ))
                d = s.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(n)}, n)
                assert d.revealed is not None
                np.testing.assert_allclose(d.revealed, exact, atol=1e-4)
                s.close()
            s = coord.open_session(
                SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params={"noise": "none"})
            )
            d = s.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(n)}, n)
            np.testing.assert_array_equal(d.accept, exact >= 0)
            lc.kill(2)
            with pytest.raises(SessionError) as ei:
                s.evaluate({"theta": th, "theta_star": ts, "public": np.zeros(n)}, n)
            msg = str(ei.value)
            assert "step 2" in msg and "party" in msg
            assert ei.value.step == 2
            errors = s.abort("party 2 died")
            assert any("party 2" in e for e in errors)
        codes = lc.stop()
    assert codes[1] == 0 and codes[3] == 0  # SIGTERM: graceful exit
    assert codes[2] == -signal.SIGKILL
    audit = (tmp_path / "party-1" / "state" / "audit.log").read_text()
    assert '"what": "Evaluate"' in audit and '"what": "Stop"' in audit


def test_confar_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    rc = confar_cli.main(
        ["simulate", "--parties", "3", "--steps", "20", "--chains", "16", "--topology", "relay"]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "posterior mean" in out
