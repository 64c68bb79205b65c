"""``confar run`` with a registry random intercept (issue 36): ``(1 | registry)`` is sampled in blocks by
default, ``[sampler] blocked`` switches it and is refused where it cannot apply (naming the key and why),
and the blocked driver's checkpoint (the shared block's adaptive state and its pooled moments) resumes to
the draws of the uninterrupted run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.drivers import BlockedDriver, MHDriver, make_driver
from coordinator.experiment import Experiment, load_experiment
from coordinator.tables import ExperimentError
from mechanisms.samplers import PublicSeeds
from mechanisms.samplers.blocked import LocalBlockParties
from mechanisms.samplers.local import LocalSettings
from tests.coordinator.experiment_text import head

ROOT = Path(__file__).resolve().parents[2]

TEXT = head("blocked", 3) + """
[model]
formula = "y ~ x + (1 | registry)"
family = "bernoulli"
columns = {{ y = {{ values = [0, 1] }}, x = [-2, 2], registry = {{ values = [1, 2, 3] }} }}

[sampler]
kind = "mh"
chains = 4
iterations = 60
{extra}
[reveal]
mode = "sign"
"""


def experiment(tmp_path: Path, extra: str = "") -> Experiment:
    p = tmp_path / "exp.toml"
    p.write_text(TEXT.format(extra=extra))
    return load_experiment(p)


def test_a_random_intercept_is_sampled_in_blocks_by_default(tmp_path: Path) -> None:
    exp = experiment(tmp_path)
    assert exp.sampler.blocked and isinstance(make_driver(exp), BlockedDriver)
    plan = exp.session_params()
    assert plan["blocked"]["adapt_until"] == exp.sampler.adapt_stop == 30
    assert np.asarray(exp.sampler.proposal_cov).shape == (3, 3)  # the shared block: Intercept, x, log sd
    off = experiment(tmp_path, "blocked = false\n")
    assert not off.sampler.blocked and type(make_driver(off)) is MHDriver
    assert "blocked" not in off.session_params()
    fixed = experiment(tmp_path, "proposal_scale = 0.1\n")  # a fixed random walk: not blocked unless asked
    assert not fixed.sampler.blocked
    example = load_experiment(ROOT / "examples" / "registry-effects.toml")
    assert example.sampler.blocked and example.model().random_intercept() is not None


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("proposal_scale = 0.1\nblocked = true\n", "not with a fixed proposal"),
        ("lazy = 0.5\nmax_sensitivity = 1.0\nblocked = true\n", "not with lazy acceptance"),
        ('blocked = "yes"\n', "sampler.blocked"),
    ],
)
def test_blocked_is_refused_where_it_cannot_apply(tmp_path: Path, extra: str, words: str) -> None:
    with pytest.raises(ExperimentError, match=words):
        experiment(tmp_path, extra)


def test_a_model_without_a_random_intercept_refuses_blocked(tmp_path: Path) -> None:
    text = TEXT.replace(" + (1 | registry)", "").replace(", registry = {{ values = [1, 2, 3] }}", "")
    p = tmp_path / "exp.toml"
    p.write_text(text.format(extra="blocked = true\n"))
    with pytest.raises(ExperimentError, match=r"sampler\.blocked.*has no registry random intercept"):
        load_experiment(p)


def parties(exp: Experiment) -> LocalBlockParties:
    rng = np.random.default_rng(4)
    data = []
    for j in range(exp.m):
        x = rng.uniform(-2, 2, 200)
        y = (rng.random(200) < 1 / (1 + np.exp(-(0.3 * j - 0.5 + x)))).astype(np.float64)
        data.append({"y": y, "x": x, "registry": np.full(200, j + 1.0)})
    keys = [bytes([j + 1]) * 32 for j in range(exp.m)]
    settings = LocalSettings(adapt_until=exp.sampler.adapt_stop)
    return LocalBlockParties(exp.model(), data, settings, keys, rng=np.random.default_rng(9))


def test_the_blocked_driver_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """A checkpoint inside the pooled half of the warm-up (its moments in the checkpoint) resumes to the
    rows of the uninterrupted run, the registries' local chains continuing where they are."""
    exp = experiment(tmp_path)
    total, stop = 50, 20  # adapt_stop = 30: pooled from 15
    whole = BlockedDriver(exp, PublicSeeds(exp.seed))
    whole.initial()
    decide = parties(exp)
    want = np.vstack([whole.step(decide) for _ in range(total)])  # type: ignore[arg-type]

    first = BlockedDriver(exp, PublicSeeds(exp.seed))
    first.initial()
    decide = parties(exp)
    got = [first.step(decide) for _ in range(stop)]  # type: ignore[arg-type]
    ckpt = json.loads(json.dumps(first.checkpoint("run", stop, stop)))
    assert ckpt["sampler"]["pool_count"] > 0 and "pool_m2" in ckpt["sampler"]
    resumed = BlockedDriver(exp, PublicSeeds(exp.seed))
    resumed.resume(ckpt)
    got += [resumed.step(decide) for _ in range(total - stop)]  # type: ignore[arg-type]
    np.testing.assert_array_equal(np.vstack(got), want)
    draws, stats = resumed.draws(np.vstack(got))
    assert draws.shape == (4, total, 3) and stats["accepted"].shape == (4, total)
    assert resumed.model.param_names == ("Intercept", "x", "registry_log_sd")  # no effects released here
