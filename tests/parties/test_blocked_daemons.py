"""Blocked sampling over real daemons (issue 36): each registry keeps and updates its own random effect in
its run state, the shared block is decided by the sign protocol, and at the end the registries that allow it
release their effect draws (reveal mode sum). The draws match the exact posterior of a conjugate Gaussian
hierarchical model within Monte Carlo error; a run resumed in a new session (its held step replayed)
continues every registry's local chain exactly as an uninterrupted run does; a registry that does not
allow the release, or that has a privacy budget, refuses, naming why."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.api import BlockingCoordinator, SessionError
from coordinator.decider import NetworkDecider
from mechanisms.models.hierarchy import SharedModel
from mechanisms.samplers import PublicSeeds
from mechanisms.samplers.blocked import BlockedDecider, SharedAuto, blocked_kernel
from mechanisms.samplers.diagnostics import ess
from mechanisms.samplers.local import EffectsRelease, LocalSettings
from mechanisms.samplers.mh import prior_proposal_cov
from mechanisms.samplers.plan import DecisionPlan
from tests.mechanisms.samplers.helpers import Z
from tests.mechanisms.samplers.test_blocked import exact_moments, gaussian_model, gaussian_registries
from tests.parties.helpers import inproc_consortium, tls_for

M = 3
SIZES = (4, 40, 300)  # a registry too small to know its effect (non-centred), two that know theirs
CHAINS = 16


def _args(model: Any) -> dict[str, Any]:
    return {k: v for k, v in model.config()["args"].items()}


@contextlib.contextmanager
def daemons(root: Path, **config: Any) -> Iterator[tuple[list[Any], Any]]:
    """In-process daemons of the Gaussian registries (fixed noise keys) on a background event loop."""
    loop = asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    data = gaussian_registries(SIZES)
    config = {"models": ("formula",), "modes": ("sign", "sum"), "release_effects": True, **config}
    keys = {pid: bytes([pid]) * 32 for pid in range(1, M + 1)}
    cm = inproc_consortium(root, M, data, fixed_keys=keys, **config)
    _d, eps, certs = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result(60)
    try:
        yield eps, tls_for(certs, "coordinator")
    finally:
        asyncio.run_coroutine_threadsafe(cm.__aexit__(None, None, None), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)


def _plan(model: Any, warmup: int) -> DecisionPlan:
    return DecisionPlan(model_args=_args(model), blocked=LocalSettings(steps=2, adapt_until=warmup))


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
    sess = coord.open_session(
        reveal_mode="sign",
        model="formula",
        model_params=_plan(model, warmup).to_params(),
        run_id=run_id,
        first_run_step=sweeps.start + 1,
    )
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
    plan = DecisionPlan(model_args=_args(model), kind="effects", effects=effects)
    sess = coord.open_session(reveal_mode="sum", model="formula", model_params=plan.to_params())
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
    assert n_eff.min() > 100, n_eff  # log σ_u of three registries: a wide posterior with a long tail
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


def test_a_registry_with_a_budget_refuses_blocked_sampling(tmp_path: Path) -> None:
    model = gaussian_model(M)
    with (
        daemons(tmp_path, privacy_budget={"gdp_mu": 1.0}) as (eps, tls),
        BlockingCoordinator(eps, tls) as coord,
        pytest.raises(SessionError, match=r"blocked sampling .* has no per-decision privacy bound"),
    ):
        sample(coord, model, "budget", range(2), 4)
