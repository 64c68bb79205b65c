"""The MH driver's checkpoint with the automatic proposal (issue 24 item 9): each chain's Robbins-Monro log
scale is saved and restored, so a run resumed from any batch draws what the uninterrupted run draws; a
checkpoint written before the scale adaptation existed (no ``log_scale``) restores with every scale 0; the
step size of each draw is the one the chain used."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.drivers import MHDriver
from coordinator.experiment import Experiment, load_experiment
from mechanisms.samplers import AdaptiveState, BernoulliRule, LocalParties, PublicSeeds
from tests.coordinator.experiment_text import head

EXPERIMENT = head("auto-proposal", 7) + """
[model]
name = "beta-bernoulli"

[sampler]
kind = "mh"
chains = 8
iterations = 80
{extra}
[reveal]
mode = "sign"
"""
BATCHES, STOP_AT = 60, 25  # adapt_stop = 40: the checkpoint is taken while the scale still adapts


def experiment(tmp_path: Path, extra: str = "") -> Experiment:
    p = tmp_path / "exp.toml"
    p.write_text(EXPERIMENT.format(extra=extra))
    return load_experiment(p)


def decider(exp: Experiment) -> LocalParties:
    model = exp.model()
    rng = np.random.default_rng(3)
    data = [{"y": (rng.random(300) < 0.3).astype(np.float64)} for _ in range(exp.m)]
    return LocalParties(model, data, BernoulliRule(np.random.default_rng(11)))


def started(exp: Experiment) -> MHDriver:
    """A driver of ``exp`` from its public seed, chains initialised."""
    driver = MHDriver(exp, PublicSeeds(exp.seed))
    driver.initial()
    return driver


def uninterrupted(exp: Experiment) -> np.ndarray:
    """The rows of ``exp`` run for BATCHES batches without a checkpoint."""
    return rows(started(exp), decider(exp), BATCHES)


def rows(driver: MHDriver, decide: Any, n: int) -> np.ndarray:
    return np.vstack([driver.step(decide) for _ in range(n)])


def test_the_log_scales_survive_a_checkpoint(tmp_path: Path) -> None:
    exp = experiment(tmp_path)
    assert exp.sampler.scale_adapt and exp.sampler.adapt_stop == 40
    want = uninterrupted(exp)

    first = started(exp)
    decide = decider(exp)
    got = [rows(first, decide, STOP_AT)]
    ckpt = json.loads(json.dumps(first.checkpoint("run", STOP_AT, STOP_AT)))  # as state.json holds it
    scales = np.asarray(ckpt["sampler"]["log_scale"])
    assert scales.shape == (8,) and np.all(scales != 0.0)  # the chains' own scales, adapted
    resumed = MHDriver(exp, PublicSeeds(exp.seed))
    resumed.resume(ckpt)
    assert isinstance(resumed.mh, AdaptiveState)
    np.testing.assert_array_equal(resumed.mh.log_scale, scales)
    got.append(rows(resumed, decide, BATCHES - STOP_AT))
    np.testing.assert_array_equal(np.vstack(got), want)

    # without the scales (as if lost) the resumed run goes elsewhere: what the round trip guards
    lost = MHDriver(exp, PublicSeeds(exp.seed))
    del ckpt["sampler"]["log_scale"]
    lost.resume(ckpt)
    assert not np.array_equal(rows(lost, decider(exp), 5), want[STOP_AT : STOP_AT + 5])


def test_a_checkpoint_from_before_the_scale_adaptation_restores_with_scale_zero(tmp_path: Path) -> None:
    """An adaptive-mh run with a given proposal_scale (the only adaptive runs there were) checkpointed by an
    older version: no ``log_scale`` key; it resumes with every s_j = 0, which is what it ran with."""
    text = EXPERIMENT.format(extra="proposal_scale = 0.1\n").replace('kind = "mh"', 'kind = "adaptive-mh"')
    p = tmp_path / "old.toml"
    p.write_text(text)
    exp = load_experiment(p)
    assert exp.sampler.adaptive and not exp.sampler.scale_adapt
    want = uninterrupted(exp)

    first = started(exp)
    decide = decider(exp)
    head = rows(first, decide, STOP_AT)
    ckpt = json.loads(json.dumps(first.checkpoint("run", STOP_AT, STOP_AT)))
    assert ckpt["sampler"].pop("log_scale") == [0.0] * 8
    resumed = MHDriver(exp, PublicSeeds(exp.seed))
    resumed.resume(ckpt)
    assert isinstance(resumed.mh, AdaptiveState)
    np.testing.assert_array_equal(resumed.mh.log_scale, np.zeros(8))
    tail = rows(resumed, decide, BATCHES - STOP_AT)
    np.testing.assert_array_equal(np.vstack([head, tail]), want)


@pytest.mark.parametrize("extra", ["", "proposal_scale = 0.1\n"])
def test_each_draw_records_the_step_size_its_chain_used(tmp_path: Path, extra: str) -> None:
    exp = experiment(tmp_path, extra)
    driver = MHDriver(exp, PublicSeeds(exp.seed))
    driver.initial()
    decide = decider(exp)
    sizes = []
    for _ in range(BATCHES):
        before = driver.mh
        assert before is not None
        row = driver.step(decide)
        _, stats = driver.draws(row)
        if isinstance(before, AdaptiveState):  # the scale of the step: e^{s_j} sqrt(tr B / d), B the base
            after = driver.mh
            assert isinstance(after, AdaptiveState) and before.log_scale is not None
            expect = np.exp(before.log_scale) * math.sqrt(float(np.trace(after.cov)))
            if before.t == exp.sampler.adapt_start:  # the first Haario update starts every s_j at 0
                expect = np.full(8, math.sqrt(float(np.trace(after.cov))))
        else:
            expect = np.full(8, 0.1)
        np.testing.assert_allclose(stats["step_size"][:, 0], expect, rtol=1e-12)
        sizes.append(stats["step_size"][:, 0])
    spread = np.ptp(np.log(np.stack(sizes)), axis=0)
    assert (spread.max() > 0.5) == (extra == "")  # tuned: the sizes move; given: one fixed size


def test_a_refitted_laplace_proposal_survives_a_checkpoint(tmp_path: Path) -> None:
    """The refitting independence sampler (issue 35 item 4): a run checkpointed between its two refits (the
    pooled moments of the stage in the checkpoint) and resumed draws what the uninterrupted run draws, and
    the proposal after the warm-up is the refitted one, not the DP approximation's."""
    import dataclasses

    from mechanisms.samplers import RefitState
    from mechanisms.warmstart import LaplaceApproximation

    base = experiment(tmp_path, "proposal_scale = 0.1\n")
    lap = LaplaceApproximation(np.array([0.6]), np.array([[0.01]]))  # off: the posterior sits near 0.3
    s = dataclasses.replace(base.sampler, proposal="laplace", refit=True, laplace=lap, warmup=20)
    exp = dataclasses.replace(base, sampler=s)
    want = uninterrupted(exp)

    first = started(exp)
    assert first.refits == (10, 20)
    decide = decider(exp)
    stop = 16  # inside the second stage's pooled half
    got = [rows(first, decide, stop)]
    ckpt = json.loads(json.dumps(first.checkpoint("run", stop, stop)))
    assert ckpt["sampler"]["count"] > 0 and "pool_m2" in ckpt["sampler"]
    resumed = MHDriver(exp, PublicSeeds(exp.seed))
    resumed.resume(ckpt)
    assert isinstance(resumed.mh, RefitState)
    got.append(rows(resumed, decide, BATCHES - stop))
    np.testing.assert_array_equal(np.vstack(got), want)
    assert isinstance(resumed.mh, RefitState) and abs(resumed.mh.mean[0] - 0.3) < 0.1
