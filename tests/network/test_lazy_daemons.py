"""Lazy MH through real daemons (separate processes, mutual TLS) with eps-at-delta budgets: the charge per
decision is the lazy accept-bit bound, a budget too small is refused before the first step, a budget that
runs out refuses mid-run with every charged decision on the ledger once, and the ledger survives a restart.
A coalition larger than the session threshold is refused, naming both numbers."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from coordinator import privacy as cprivacy
from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from mechanisms.privacy import (
    EpsDeltaBudget,
    PrivacyLedger,
    ProfileEvent,
    ThreatModel,
    compose_events,
    sign_step_profile,
)
from proto.spec import SpecError
from simulations.launcher import LocalConsortium

M, N = 3, 16
GAMMA, CAP = 0.5, 0.6
PARAMS: dict[str, Any] = {"kind": "mh", "lazy": {"gamma": GAMMA, "max_sensitivity": CAP}}


def _data() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [{"y": (rng.random(40) < 0.3).astype(float)} for _ in range(M)]


def _batch(rng: np.random.Generator) -> dict[str, np.ndarray]:
    theta = rng.uniform(0.25, 0.35, (N, 1))
    theta_star = np.clip(theta + rng.normal(0.0, 0.01, (N, 1)), 0.05, 0.95)
    return {"theta": theta, "theta_star": theta_star, "public": np.zeros(N)}


def _eps_of(count: int) -> float:
    # the session's threshold is t = 1 and each party assumes q = 1 colluder: the sign view, residual 2/3
    profile = sign_step_profile(CAP, ThreatModel(M, 1), GAMMA).profile
    return compose_events([ProfileEvent(profile, count=count)]).eps_at(1e-5)


@pytest.mark.slow
def test_lazy_mh_budgets_through_daemons(tmp_path: Path) -> None:
    budget_eps = _eps_of(3 * N) * 1.0001  # exactly three batches fit
    budget = {"epsilon": budget_eps, "delta": 1e-5, "colluding": 1}
    rng = np.random.default_rng(9)
    with LocalConsortium.start(
        M,
        _data(),
        workdir=tmp_path,
        models=("beta-bernoulli",),
        modes=("sign",),
        data_model="beta-bernoulli",
        privacy_budget=budget,
        startup_timeout_s=60.0,
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            # the coin is made in the inline sign precompute: refused before any party is contacted
            with pytest.raises(SpecError, match=r"lazy .* sign_precompute 'inline'"):
                coord.open_session(SessionOptions(
                    reveal_mode="sign", model="beta-bernoulli", model_params=PARAMS, sign_precompute="pooled"
                ))
            # without a sensitivity cap nothing bounds a step: refused before the first step
            with pytest.raises(SessionError) as ei:
                no_cap = {"kind": "mh", "lazy": {"gamma": 0.5}}
                coord.open_session(
                    SessionOptions(reveal_mode="sign", model="beta-bernoulli", model_params=no_cap)
                )
            assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert "max_sensitivity" in str(ei.value)
            s = coord.open_session(
                SessionOptions(reveal_mode="sign", model="beta-bernoulli", model_params=PARAMS)
            )
            over = _batch(rng)
            over["theta_star"][0, 0] = 0.9  # c far above the cap: the coordinator must reject it itself
            with pytest.raises(SessionError) as ei:
                s.evaluate(over, N)
            assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and "max_sensitivity" in str(ei.value)
            s.abort("bad batch")
            s = coord.open_session(
                SessionOptions(reveal_mode="sign", model="beta-bernoulli", model_params=PARAMS)
            )
            for _ in range(3):
                out = s.evaluate(_batch(rng), N)
                assert out.accept.shape == (N,) and out.revealed is None
            with pytest.raises(SessionError) as ei:
                s.evaluate(_batch(rng), N)
            assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            s.abort("budget")

        def spent() -> list[tuple[float, int]]:
            pf = cprivacy.load_plan(_plan(tmp_path, lc), need_session=False)
            out = []
            for r in cprivacy.report(pf).values():
                assert not isinstance(r, str), r
                events = cprivacy.parse_events(r.events_json)
                out.append((r.budget.spent, sum(e.count for e in events)))
            return out

        before = spent()
        assert all(count == 3 * N for _, count in before)  # every answered decision charged once
        ref = PrivacyLedger(EpsDeltaBudget(budget_eps, 1e-5), ()).budget.spend(
            [ProfileEvent(sign_step_profile(CAP, ThreatModel(M, 1), GAMMA).profile, count=3 * N)]
        )
        assert all(abs(v - ref) <= 1e-9 * ref for v, _ in before)
        pp = lc.procs[1]  # a restart keeps the ledger and still refuses
        pp.proc.send_signal(signal.SIGTERM)
        assert pp.proc.wait(10) == 0
        lc.spawn(1, pp.config, insecure=False)
        lc.wait_ready(30.0)
        assert spent() == before
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=60.0) as coord:
            with pytest.raises(SessionError) as ei:  # not even one decision fits: refused at open
                coord.open_session(
                    SessionOptions(reveal_mode="sign", model="beta-bernoulli", model_params=PARAMS)
                )
            assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "a single decision would exceed this party's privacy budget" in str(ei.value)
        assert spent() == before


def _plan(tmp_path: Path, lc: LocalConsortium) -> Path:
    path = tmp_path / "report.toml"
    lines = [
        "[coordinator]",
        f'cert = "{lc.certs / "coordinator.pem"}"',
        f'key = "{lc.certs / "coordinator.key"}"',
        f'ca = "{lc.certs / "ca.pem"}"',
    ]
    for ep in lc.endpoints():
        lines += ["[[parties]]", f"id = {ep.id}", f'identity = "{ep.identity}"', f'address = "{ep.address}"']
    path.write_text("\n".join(lines) + "\n")
    return path
