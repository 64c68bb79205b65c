"""What the observer sees: the audited decision run many times (in memory through the secret-sharing engine,
or through real party daemons) and the membership-inference tests on those observations (the claim they are
held against is :mod:`simulations.privacy_audit.claim`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hss.randomness import SecureRandom
from mechanisms.privacy import MetropolisAcceptance, PenaltyAcceptance, ThreatModel
from mechanisms.privacy.audit import AuditPoint, statistic_points, threshold_points
from mechanisms.privacy.residual import ResidualPenaltyAcceptance
from mechanisms.samplers import HssDecide
from mechanisms.samplers.terms import log_ratio, party_terms
from simulations.privacy_audit.config import F64
from simulations.privacy_audit.setup import Setup


@dataclass(frozen=True)
class Observed:
    value: F64  # (runs, K): the bit (0/1) or the revealed value per step
    colluders: F64 | None  # (runs, K): Σ of the colluders' noise (q >= 1)


def run_in_memory(setup: Setup, data: list[dict[str, F64]], bounds: list[float], runs: int) -> Observed:
    """``runs`` × K decisions through the secret-sharing engine in memory, noise from the OS CSPRNG."""
    cfg, m, k = setup.cfg, setup.cfg.m, setup.cfg.steps
    n = runs * k
    req = setup.request(n)
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    decide = HssDecide.setup(cfg.reveal, m, rngs, lazy=setup.lazy)
    terms, blinds, noise = [], [], []
    for j, d in enumerate(data):
        bound = bounds[j] if bounds else None
        out = party_terms(setup.model, d, req, m, SecureRandom.from_os(), cfg.reveal, log_bound=bound)
        ell = log_ratio(setup.model, d, req, bound)[0]
        nz = (out.values - ell) * cfg.noise_scale  # this registry's own noise (scaled only to audit a bug)
        terms.append(ell + nz)
        noise.append(nz)
        if out.blind is not None:
            blinds.append(out.blind)
    chunk = 20_000
    bits = np.zeros(n, dtype=bool)
    values = np.zeros(n)
    for s0 in range(0, n, chunk):
        sl = slice(s0, min(n, s0 + chunk))
        b = [x[sl] for x in blinds] if blinds else None
        bits[sl] = decide([t[sl] for t in terms], req.public[sl], b)
        if decide.last_revealed is not None:
            values[sl] = decide.last_revealed
    obs = bits.astype(np.float64) if cfg.reveal == "sign" else values
    coll = None
    if cfg.colluding:
        coll = np.sum(np.stack(noise[1 : 1 + cfg.colluding]), axis=0).reshape(runs, k)  # registries 2..q+1
    return Observed(obs.reshape(runs, k), coll)


def run_on_daemons(setup: Setup, data: list[dict[str, F64]], runs: int) -> Observed:
    """The same decision ``runs`` × K times through real party daemons (a local consortium with mutual TLS
    in a temporary folder, removed afterwards with its certificates and keys)."""
    from coordinator.api import BlockingCoordinator, SessionOptions
    from simulations.launcher import LocalConsortium

    cfg = setup.cfg
    n = runs * cfg.steps
    modes = (cfg.reveal,)
    bits: list[F64] = []
    with LocalConsortium.start(
        cfg.m,
        data,
        models=(cfg.model_name,),
        modes=modes,
        data_model=cfg.model_name,
        data_model_args=cfg.model_args or None,
        startup_timeout_s=60.0,
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls(), rpc_timeout_s=120.0) as coord:
            s = coord.open_session(SessionOptions(
                reveal_mode=cfg.reveal,
                model=cfg.model_name,
                model_params=setup.session_params,
                t=cfg.threshold,
            ))
            for s0 in range(0, n, 1000):
                k = min(1000, n - s0)
                req = setup.request(k)
                out = s.evaluate(dict(req.to_inputs()), k)
                val = out.accept.astype(np.float64) if cfg.reveal == "sign" else np.asarray(out.revealed)
                bits.append(val)
            s.close("audit done")
    return Observed(np.concatenate(bits).reshape(runs, cfg.steps), None)


def accept_model(setup: Setup, threat: ThreatModel) -> Any:
    """p(a) of the accept bit as the observer of ``threat`` sees it (its known noise folded into a)."""
    cfg = setup.cfg
    if setup.penalty is not None:
        assert setup.theta is not None
        sigma = float(setup.penalty.sigma(setup.model, setup.theta, setup.theta_star)[0])
        s = sigma * math.sqrt(threat.residual_parties) * cfg.noise_scale
        k = threat.residual_shape
        model: Any = PenaltyAcceptance(s) if k == 1.0 else ResidualPenaltyAcceptance(s, k)
    else:
        model = MetropolisAcceptance.for_threat(threat)
    return model


def statistic(setup: Setup, obs: Observed, a0: float, a1: float) -> F64 | None:
    """Per-run log-likelihood ratio log p_{D'}(obs) − log p_D(obs) where the laws are known, else None."""
    cfg = setup.cfg
    if cfg.reveal != "sign":
        return None
    threat = ThreatModel(cfg.m, cfg.colluding)
    pm = accept_model(setup, threat)
    gamma = setup.lazy.gamma if setup.lazy is not None else 1.0
    shift = obs.colluders if obs.colluders is not None else np.zeros_like(obs.value)
    if cfg.noise_scale != 1.0 and setup.penalty is None:
        return None  # the bug changes the law: fall back to threshold tests on the bits
    flat = shift.ravel()
    p0 = np.clip(gamma * pm.accept_prob(a0 + flat), 1e-300, 1.0)
    p1 = np.clip(gamma * pm.accept_prob(a1 + flat), 1e-300, 1.0)
    bits = obs.value.ravel() > 0.5
    with np.errstate(divide="ignore"):
        llr = np.where(bits, np.log(p1) - np.log(p0), np.log1p(-np.minimum(p1, 1 - 1e-16)) - np.log1p(-p0))
    return np.asarray(llr.reshape(obs.value.shape).sum(axis=1), dtype=np.float64)


def test_points(setup: Setup, o0: Observed, o1: Observed, a0: float, a1: float) -> list[AuditPoint]:
    cfg = setup.cfg
    s0, s1 = statistic(setup, o0, a0, a1), statistic(setup, o1, a0, a1)
    if s0 is not None and s1 is not None:
        return statistic_points(s0, s1, name="LLR")
    if cfg.steps == 1 and cfg.reveal == "sign" and cfg.colluding == 0:
        return threshold_points(o0.value[:, 0], o1.value[:, 0], name="bit")
    v0, v1 = o0.value.sum(axis=1), o1.value.sum(axis=1)
    if o0.colluders is not None and o1.colluders is not None:  # the colluders subtract their own noise
        v0, v1 = v0 - o0.colluders.sum(axis=1), v1 - o1.colluders.sum(axis=1)
    name = f"{cfg.reveal} (summed over {cfg.steps} steps)" if cfg.steps > 1 else cfg.reveal
    return threshold_points(v0, v1, name=name)
