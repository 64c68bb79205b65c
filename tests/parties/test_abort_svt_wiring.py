"""``svt`` under security with abort, wired (no daemon): the spec and the mode table accept it, the abcdp-rff
analysis runs hss.abort_svt's machine in an abort session and refuses at open a plan whose [b >= 0] does not
fit the bit budget under abort, and the receiver's decoder is the abort one. Over daemon processes:
tests/network/test_abort_svt_daemons.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hss.authenticated import AbortError
from hss.modes import reveal_mode
from hss.randomness import SecureRandom
from hss.runtime import run_in_memory
from parties.abcdp import AbcdpPlan, AbcdpRff, SvtRun, check_session
from parties.analyses import AnalysisError, Dataset
from proto.spec import PartyEntry, SessionSpec
from tests.hss.conftest import make_session
from tests.network.test_federated_abcdp import M, _observed, _plan, _stream


def _spec(params: dict[str, Any], security: str = "abort") -> SessionSpec:
    return SessionSpec(
        session_id=b"a" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, M + 1)),
        t=1,
        reveal_mode="svt",
        model="abcdp-rff",
        model_params=params,
        security=security,
    )


def test_the_spec_and_the_mode_table_offer_svt_under_abort() -> None:
    plan = _plan(2.0, 3, False, 31, 0.1)
    assert _spec(plan.to_params()).security == "abort"
    reveal_mode("svt").require_security("abort")
    with pytest.raises(ValueError, match=r"set by the batch, not the session: see hss\.abort_svt"):
        reveal_mode("svt").rounds(_spec(plan.to_params()).params(), "inline", "abort")


def test_check_session_refuses_a_plan_that_does_not_fit_under_abort() -> None:
    data = Dataset({"y": np.zeros(3)})
    plan = _plan(2.0, 3, False, 31, 0.1)

    def check(params: dict[str, Any], *security: str) -> None:
        spec = _spec(params, *security)
        check_session(spec, data, AbcdpRff(spec.model_params))

    check({**plan.to_params(), "columns": ["y"]})
    wide = dataclasses.replace(plan, n_features=4096)  # K_b grows with log2 D under abort
    check({**wide.to_params(), "columns": ["y"]}, "semi-honest")
    with pytest.raises(AnalysisError, match="abcdp-rff with security 'abort': bit budget exceeded"):
        check({**wide.to_params(), "columns": ["y"]})


def test_an_abort_session_runs_the_abort_machine_and_decodes_with_the_abort_receiver() -> None:
    plan = _plan(2.0, 3, False, 31, 0.1)
    params, ctxs, rngs = make_session(M, seed="wiring")
    phibar = _stream(plan, 31, 2)[1]  # 32 candidates, eps_abc near their 10% quantile: the gate runs (c = 3)
    n = phibar.shape[0]
    out = {}
    for security in ("semi-honest", "abort"):
        runs = {}
        for p in ctxs:
            data = Dataset({"y": _observed()[p - 1]})
            noise = SecureRandom.from_key(bytes([p]) * 32)  # the same noise at both securities
            run = SvtRun.start(AbcdpPlan(plan, ("y",)), data, M, noise)
            run.security = security
            runs[p] = run
        machines = {p: runs[p].machine(ctxs[p], phibar, 4, rngs[p]) for p in ctxs}
        assert all(mc.name == ("svt[abort]" if security == "abort" else "svt") for mc in machines.values())
        _, tr = run_in_memory(machines)
        out[security] = reveal_mode("svt").decode(params, tr.to_receiver[-1], n, 4, security).accept
        if security == "abort":
            bad = dict(tr.to_receiver[-1])
            bad[2] = bad[2].copy()
            bad[2][0] ^= np.uint64(1)
            with pytest.raises(AbortError, match="receiver: outputs"):
                reveal_mode("svt").decode(params, bad, n, 4, security)
    assert np.array_equal(out["semi-honest"], out["abort"])
    assert 0 < out["abort"].sum() <= 3


def test_an_abcdp_experiment_may_ask_for_security_abort(tmp_path: Path) -> None:
    from tests.coordinator.test_experiment import ABCDP, load

    text = ABCDP.replace('mode = "sign"', 'mode = "svt"\nsecurity = "abort"')
    assert load(tmp_path, text).security == "abort"  # type: ignore[attr-defined]
