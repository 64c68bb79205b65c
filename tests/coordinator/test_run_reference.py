"""A run compared with a plain reference fit of its pooled records (issue 40; ``coordinator.run`` with
``simulations.run_local.PooledReference``, over daemons in the test's process): a reference that does not
converge is a warning of the run, with its R-hat and ESS, in the summary and the provenance; a run with too
few draws after warm-up to compare is not compared, and says so; a blocked run (issue 36) is compared with
the same plain reference, cut to the shared parameters when the registries kept their effects.
``--no-reference`` over daemon processes is tests/network/test_run.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from coordinator.experiment import Experiment, load_experiment
from coordinator.run import run_experiment
from mechanisms.models.hierarchy import SharedModel
from simulations.run_local import PooledReference
from tests.coordinator import test_blocked_driver
from tests.coordinator.test_run import CHAINS, EXPERIMENT, ITER, parties, party_data


def experiment(tmp_path: Path, warmup: int = 4) -> Experiment:
    text = EXPERIMENT.format(chains=CHAINS, iterations=ITER, target=5.0)
    text = text.replace("formats = []", 'formats = ["summary", "provenance"]')
    p = tmp_path / "exp.toml"
    p.write_text(text.replace("warmup = 4", f"warmup = {warmup}"))
    return load_experiment(p)


def test_a_reference_that_does_not_converge_is_a_warning(tmp_path: Path) -> None:
    exp = experiment(tmp_path)
    said: list[str] = []
    records = [{"x": x} for x in party_data()]  # what the daemons hold
    ref = PooledReference(records, 1, None, said.append, min_ess=1e9, max_iterations=60)  # out of reach
    with parties(tmp_path / "p") as (eps, tls):
        out = run_experiment(exp, eps, tls, tmp_path / "out", reference=ref, log=said.append)
    mine = [w for w in out.warnings if w.startswith("the reference posterior")]
    assert len(mine) == 1, out.warnings
    w = mine[0]
    assert "did not converge: max R-hat" in w and "min bulk ESS" in w and "(target 1000000000)" in w
    assert "after 60 iterations x 16 chains" in w and "not to be trusted" in w
    assert f"WARNING: {w}" in said
    assert any(
        s.startswith("reference posterior: a plain (not private) fit of the 180 pooled records") for s in said
    )
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "NOT converged" in summary and w in summary.split("warnings:")[1]
    prov = json.loads((tmp_path / "out" / "provenance.json").read_text())
    assert w in prov["warnings"] and "NOT converged" in prov["outputs"]["reference"]


def test_too_few_draws_to_compare_skip_the_reference(tmp_path: Path) -> None:
    exp = experiment(tmp_path, warmup=ITER - 2)  # 2 draws per chain after warm-up: no ESS, no z-score
    said: list[str] = []
    ref = PooledReference([{"x": x} for x in party_data()], 1, 120.0, said.append)
    with parties(tmp_path / "p") as (eps, tls):
        run_experiment(exp, eps, tls, tmp_path / "out", reference=ref, log=said.append)
    assert any(
        s.startswith("no reference posterior: the run has 2 draws per chain after warm-up") for s in said
    ), said
    assert not any(s.startswith("reference posterior") for s in said)  # never started
    assert "reference:" not in (tmp_path / "out" / "summary.txt").read_text()
    assert json.loads((tmp_path / "out" / "provenance.json").read_text())["outputs"]["reference"] is None


def test_a_blocked_run_is_compared_with_the_plain_reference(tmp_path: Path) -> None:
    """The reference of a blocked run is the plain fit of the pooled records (an exact sampler of its own,
    whose surrogate walk moves the effects u_j = σ_u z_j), under PooledReference's limits and warning; its
    draws hold every parameter when the run's do (the effects released) and the shared ones only when the
    run's outputs do (the effects kept)."""
    exp = test_blocked_driver.experiment(tmp_path)
    assert exp.sampler.blocked
    rng = np.random.default_rng(7)
    records = []
    for j, n in enumerate((60, 40, 30), start=1):
        x = rng.uniform(-2, 2, n)
        y = (rng.random(n) < 1 / (1 + np.exp(-(0.3 * j - 0.5 + x)))).astype(np.float64)
        records.append({"y": y, "x": x, "registry": np.full(n, float(j))})
    model = exp.model()
    shared = list(SharedModel(model).index)
    assert 0 < len(shared) < model.d
    outs = []
    for d in (model.d, len(shared)):
        said: list[str] = []
        warned: list[str] = []
        ref = PooledReference(records, 1, 120.0, said.append, min_ess=1e9, max_iterations=100)
        out = ref(exp, np.zeros((4, 30, d)), warned.append)
        assert out is not None and out.draws.shape == (16, 75, d)  # 100 iterations, 25 of them its warm-up
        assert out.label.startswith("plain MH on the pooled records") and "NOT converged" in out.label
        assert said[0].startswith("reference posterior: a plain (not private) fit of the 130 pooled records")
        assert len(warned) == 1 and "did not converge" in warned[0]
        assert "after 100 iterations x 16 chains" in warned[0]
        outs.append(out.draws)
    assert np.array_equal(outs[1], outs[0][..., shared])  # the same chains (public seeds), cut
