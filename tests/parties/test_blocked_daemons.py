"""Blocked sampling over real daemons (issue 36): each registry keeps and updates its own random effect in
its run state, the shared block is decided by the sign protocol, and at the end the registries that allow it
release their effect draws (reveal mode sum). The draws match the exact posterior of a conjugate Gaussian
hierarchical model within Monte Carlo error; a run resumed in a new session (its held step replayed)
continues every registry's local chain exactly as an uninterrupted run does; a registry that does not
allow the release, or that has a privacy budget, refuses, naming why."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from coordinator.decider import NetworkDecider
from mechanisms.kinds import DecisionPlan
from mechanisms.models.formula import FormulaModel
from mechanisms.models.hierarchy import SharedModel
from mechanisms.privacy import GaussianEvent
from mechanisms.samplers import PublicSeeds
from mechanisms.samplers.blocked import BlockedDecider, SharedAuto, blocked_kernel
from mechanisms.samplers.diagnostics import ess
from mechanisms.samplers.local import EffectsRelease, LocalSettings
from mechanisms.samplers.mh import prior_proposal_cov
from mechanisms.samplers.requests import Penalty
from tests.mechanisms.samplers.helpers import Z
from tests.mechanisms.samplers.test_blocked import exact_moments, gaussian_model, gaussian_registries
from tests.parties.helpers import inproc_consortium, tls_for

M = 3
SIZES = (4, 40, 300)  # a registry too small to know its effect (non-centred), two that know theirs
CHAINS = 16


def _args(model: Any) -> dict[str, Any]:
    return {k: v for k, v in model.config()["args"].items()}


@contextlib.contextmanager
def consortium(root: Path, data: Any, **config: Any) -> Iterator[tuple[list[Any], list[Any], Any]]:
    """In-process daemons of the registries ``data`` (fixed noise keys) on a background event loop."""
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    config = {"models": ("formula",), "modes": ("sign", "sum"), "release_effects": True, **config}
    keys = {pid: bytes([pid]) * 32 for pid in range(1, M + 1)}
    cm = inproc_consortium(root, M, data, fixed_keys=keys, **config)
    running, eps, certs = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result(60)
    try:
        yield running, eps, tls_for(certs, "coordinator")
    finally:
        asyncio.run_coroutine_threadsafe(cm.__aexit__(None, None, None), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)


@contextlib.contextmanager
def daemons(root: Path, **config: Any) -> Iterator[tuple[list[Any], Any]]:
    """In-process daemons of the Gaussian registries (fixed noise keys) on a background event loop."""
    with consortium(root, gaussian_registries(SIZES), **config) as (_d, eps, tls):
        yield eps, tls


def _plan(model: Any, warmup: int) -> DecisionPlan:
    return DecisionPlan(model_args=_args(model), settings=LocalSettings(steps=2, adapt_until=warmup))


def sample(
    coord: BlockingCoordinator,
    model: Any,
    run_id: str,
    sweeps: range,
    warmup: int,
    state: Any = None,
) -> tuple[list[Any], np.ndarray]:
    """Sweeps ``sweeps`` of a blocked run in one session (the run's steps sweeps.start + 1, ...): the
    shared block's automatic kernel over the network; returns its state after every sweep (what a
    coordinator checkpoints) and the shared draws."""
    sess = coord.open_session(SessionOptions(
        reveal_mode="sign",
        model="formula",
        model_params=_plan(model, warmup).to_params(),
        run_id=run_id,
        first_run_step=sweeps.start + 1,
    ))
    seeds = PublicSeeds(7)

    def make(sm: SharedModel, dec: BlockedDecider) -> SharedAuto:
        cov = prior_proposal_cov(sm)
        return SharedAuto(sm, dec, cov, stop=warmup, start=warmup // 5, every=max(warmup // 20, 1))

    kernel = blocked_kernel(model, NetworkDecider(sess), make, sweep=sweeps.start)
    if state is None:
        state = kernel.init(SharedModel(model).sample_prior(seeds.init_rng(), CHAINS))
    states, draws = [], []
    for t in sweeps:
        state, _ = kernel.step(seeds.rng(t), state)
        states.append(state)
        draws.append(state.theta.copy())
    sess.close("done")
    return states, np.stack(draws)


def release(
    coord: BlockingCoordinator, model: Any, run_id: str, sweeps: int, final: np.ndarray
) -> np.ndarray:
    """Every registry's effect draws (sweeps, chains, m), released in reveal mode sum."""
    effects = EffectsRelease(run_id, 0, sweeps, CHAINS)
    plan = DecisionPlan(model_args=_args(model), kind="effects", settings=effects)
    sess = coord.open_session(
        SessionOptions(reveal_mode="sum", model="formula", model_params=plan.to_params())
    )
    n = M * CHAINS * sweeps
    d = sess.evaluate({"states": final}, n)
    sess.close("done")
    assert d.revealed is not None
    return np.asarray(d.revealed, dtype=np.float64).reshape(M, CHAINS, sweeps).transpose(2, 1, 0)


@pytest.mark.slow
def test_blocked_run_over_daemons_matches_the_exact_posterior(tmp_path: Path) -> None:
    model = gaussian_model(M)
    sweeps, warmup = 800, 200
    with daemons(tmp_path) as (eps, tls), BlockingCoordinator(eps, tls) as coord:
        states, shared = sample(coord, model, "blocked-exact", range(sweeps), warmup)
        final = states[-1].theta
        z = release(coord, model, "blocked-exact", sweeps, final)
        again = release(coord, model, "blocked-exact", sweeps, final)  # the same release, answered again
        with pytest.raises(SessionError, match="neither the chain's state nor its proposal"):
            release(coord, model, "blocked-exact", sweeps, final + 0.5)  # not where the chains can be
        other = states[-2].theta  # where the chains were before the last sweep: possible, but not final
        assert not np.array_equal(other, final)
        with pytest.raises(SessionError, match="released with other final chain states"):
            release(coord, model, "blocked-exact", sweeps, other)
    assert np.array_equal(z, again)
    draws = SharedModel(model).embed(shared.reshape(-1, 2), z.reshape(-1, M)).reshape(sweeps, CHAINS, -1)
    post = draws[warmup:]
    mean, sd = exact_moments(gaussian_registries(SIZES))
    n_eff = ess(post)
    # log σ_u of three registries: a wide posterior with a long tail. Its ESS depends on the machine (the
    # same seeds and code give 94.9 on the 2-vCPU AMD EPYC VM and more than 100 on the Intel Xeon one: float
    # sums differ in their last bits, a decision near its threshold flips and the chain takes another
    # path); the z-tests below divide by the ESS, so they stay calibrated, and 50 keeps them near normal
    assert n_eff.min() > 50, n_eff
    flat = post.reshape(-1, post.shape[-1])
    zs = (flat.mean(axis=0) - mean) / (flat.std(axis=0) / np.sqrt(n_eff))
    assert np.all(np.abs(zs) < Z), dict(zip(model.param_names, np.round(zs, 2), strict=True))
    sq = (post - mean) ** 2
    sq_flat = sq.reshape(-1, post.shape[-1])
    zv = (sq_flat.mean(axis=0) - sd**2) / (sq_flat.std(axis=0) / np.sqrt(ess(sq)))
    assert np.all(np.abs(zv) < Z), dict(zip(model.param_names, np.round(zv, 2), strict=True))


@pytest.mark.slow
def test_a_resumed_run_continues_every_local_chain_exactly(tmp_path: Path) -> None:
    """Run A: 30 sweeps in one session. Run B (the same fixed keys and run id, another consortium): 20
    sweeps, then a new session that asks sweep 19 again (every registry holds it: replayed, its local block
    moved past it) and goes on to 30. The shared draws and the released effect draws are identical: the
    registries' local chains continued exactly where they were."""
    model = gaussian_model(M)
    run = "blocked-resume"
    with daemons(tmp_path / "a") as (eps, tls), BlockingCoordinator(eps, tls) as coord:
        states_a, shared_a = sample(coord, model, run, range(30), 10)
        z_a = release(coord, model, run, 30, states_a[-1].theta)
    with daemons(tmp_path / "b") as (eps, tls), BlockingCoordinator(eps, tls) as coord:
        states_b, first = sample(coord, model, run, range(20), 10)
        # the coordinator "crashed" after sweep 19 was decided, before its checkpoint: it resumes from the
        # checkpoint after sweep 18 and asks sweep 19 again (every registry holds it: replayed)
        later, second = sample(coord, model, run, range(19, 30), 10, state=states_b[18])
        z_b = release(coord, model, run, 30, later[-1].theta)
    assert np.array_equal(np.concatenate([first[:19], second]), shared_a)
    assert np.array_equal(z_b, z_a)


def test_the_release_needs_the_registrys_consent(tmp_path: Path) -> None:
    model = gaussian_model(M)
    with daemons(tmp_path, release_effects=False) as (eps, tls), BlockingCoordinator(eps, tls) as coord:
        states, _ = sample(coord, model, "no-release", range(6), 4)
        with pytest.raises(SessionError, match=r"\[allow\] release_effects = false"):
            release(coord, model, "no-release", 6, states[-1].theta)


def test_a_registry_with_a_budget_refuses_blocked_sampling_it_cannot_charge(tmp_path: Path) -> None:
    """Exact local steps (the default plan): no privacy bound, refused at the session's opening."""
    model = gaussian_model(M)
    with (
        daemons(tmp_path, privacy_budget={"gdp_mu": 1.0}) as (eps, tls),
        BlockingCoordinator(eps, tls) as coord,
        pytest.raises(SessionError, match=r"blocked sampling .* has no privacy bound here: its shared"),
    ):
        sample(coord, model, "budget", range(2), 4)


# ---- the accountable plan under a budget (docs/PRIVACY.md, "Blocked sampling under a budget") -------------

B_SIZES = (30, 120, 400)
B_CHAINS = 4
B_LOCAL = LocalSettings(steps=2, adapt_until=4, parameterisation="centred", sd=1.0, max_step=0.1)
B_PENALTY = Penalty(None, sd=2.0, max_sensitivity=0.5)
B_BUDGET = 1.5  # GDP mu per registry; each sweep's local steps alone cost 4 x 2 x (0.2 / 1.0)^2 = 0.32 in mu²


def bernoulli_model() -> FormulaModel:
    cols = {"y": {"values": [0, 1]}, "x": [-2, 2], "registry": {"values": list(range(1, M + 1))}}
    return FormulaModel("y ~ x + (1 | registry)", "bernoulli", cols)


def bernoulli_registries() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(4)
    out = []
    for j, n in enumerate(B_SIZES):
        x = rng.uniform(-2, 2, n)
        eta = -0.5 + 0.8 * x + rng.normal(0.0, 0.5)
        y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
        out.append({"y": y, "x": x, "registry": np.full(n, j + 1.0)})
    return out


def test_a_blocked_run_under_a_budget_is_charged_in_every_ledger_and_stopped_at_it(tmp_path: Path) -> None:
    """Noisy local steps and the shared block's penalty (bernoulli: a bound at any offset): every registry
    charges each sweep — its shared decisions at their own sensitivity (the held-coordinate bound of the
    public proposals) and its chains x steps local steps at the cap — as two GaussianEvents, and refuses
    the sweep that would pass its budget (RESOURCE_EXHAUSTED), its ledger left within the budget."""
    model = bernoulli_model()
    plan = DecisionPlan(model_args=_args(model), penalty=B_PENALTY, settings=B_LOCAL)
    budget = {"gdp_mu": B_BUDGET}
    with (
        consortium(tmp_path, bernoulli_registries(), privacy_budget=budget) as (running, eps, tls),
        BlockingCoordinator(eps, tls) as coord,
    ):
        sess = coord.open_session(SessionOptions(
            reveal_mode="sign", model="formula", model_params=plan.to_params(), run_id="charged"
        ))
        seeds = PublicSeeds(11)

        def make(sm: SharedModel, dec: BlockedDecider) -> SharedAuto:
            cov = 0.01 * np.eye(sm.d)  # the random walk throughout (the run stops long before its warm-up)
            return SharedAuto(sm, dec, cov, stop=50, start=1, every=1, penalty=B_PENALTY, m=M)

        kernel = blocked_kernel(model, NetworkDecider(sess), make)
        state = kernel.init(0.1 * SharedModel(model).sample_prior(seeds.init_rng(), B_CHAINS))
        done = 0
        with pytest.raises(SessionError, match="would exceed this party's privacy budget") as refused:
            for t in range(50):
                state, _ = kernel.step(seeds.rng(t), state)
                done += 1
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        sess.abort("budget")
        ledgers = [d.service.privacy.ledger for d in running]
        # the end-of-run release of the effect draws: a post-processing of the charged sweeps, stated in the
        # ledger as such (μ = 0, its label saying why), by registries that allow it
        effects = EffectsRelease("charged", 0, done, B_CHAINS)
        rel = DecisionPlan(model_args=_args(model), kind="effects", settings=effects)
        rsess = coord.open_session(
            SessionOptions(reveal_mode="sum", model="formula", model_params=rel.to_params())
        )
        got = rsess.evaluate({"states": state.theta}, M * B_CHAINS * done)
        rsess.close("done")
        assert got.revealed is not None and np.isfinite(got.revealed).all()
        after = [d.service.privacy.ledger for d in running]
    for before, ledger in zip(ledgers, after, strict=True):
        (stated,) = ledger.events[len(before.events) :]
        assert isinstance(stated, GaussianEvent) and stated.mu == 0.0
        assert "effects release of run 'charged'" in stated.label and "post-processing" in stated.label
        assert ledger.spent() == pytest.approx(before.spent(), rel=1e-12)
    d_loc = 2.0 * B_LOCAL.max_step  # type: ignore[operator]  # replace-one, bernoulli: 2 |du|
    local_mu2 = B_CHAINS * B_LOCAL.steps * (d_loc / B_LOCAL.sd) ** 2  # type: ignore[operator]
    assert 1 <= done < B_BUDGET**2 / local_mu2 + 1  # stopped by the budget, not by the loop
    charged = []
    for ledger in ledgers:
        events = ledger.events
        shared = [e for e in events if "shared block" in e.label]
        local = [e for e in events if "own effect" in e.label]
        assert len(shared) == len(local) == done and len(events) == 2 * done  # every sweep, both parts
        assert all(isinstance(e, GaussianEvent) for e in events)
        assert all(e.mu == pytest.approx(math.sqrt(local_mu2), rel=1e-12) for e in local)
        # the shared decisions at their own sensitivity: above 0 (the slope moves), at most the cap's
        cap_mu = math.sqrt(B_CHAINS) * B_PENALTY.max_sensitivity / B_PENALTY.sd  # type: ignore[operator]
        assert all(0.0 <= e.mu <= cap_mu for e in shared) and max(e.mu for e in shared) > 0.0
        assert ledger.spent() <= B_BUDGET
        assert ledger.spent() == pytest.approx(math.sqrt(sum(e.mu**2 for e in events)), rel=1e-9)
        charged.append([e.mu for e in events])
    # the charge is a function of public values only: every registry charged the same
    assert charged[0] == pytest.approx(charged[1]) and charged[0] == pytest.approx(charged[2])


def test_a_registry_with_a_budget_keeps_the_draws_of_a_run_it_did_not_charge(tmp_path: Path) -> None:
    """A run made without a budget (exact local steps), its registries restarted with one: the release of
    its draws would be of a run no ledger paid for, so every registry refuses it, naming the sweeps."""
    model = gaussian_model(M)
    with daemons(tmp_path) as (eps, tls), BlockingCoordinator(eps, tls) as coord:
        states, _ = sample(coord, model, "uncharged", range(3), 4)
    with (
        daemons(tmp_path, privacy_budget={"gdp_mu": 1.0}) as (eps, tls),
        BlockingCoordinator(eps, tls) as coord,
        pytest.raises(SessionError, match=r"ledger charged sweeps 0\.\.-1 of run 'uncharged', not all its 3"),
    ):
        release(coord, model, "uncharged", 3, states[-1].theta)
