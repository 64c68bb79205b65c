"""Convergence warnings (issue 24 item 3): each can fire and names the parameter, the cause and the key."""

from __future__ import annotations

import numpy as np

from coordinator.convergence import convergence_warnings


def test_independent_draws_raise_no_warning() -> None:
    rng = np.random.default_rng(0)
    assert convergence_warnings(rng.normal(size=(4, 1000, 2)), ("a", "b"), 400, 1000, 1000) == []


def test_chains_that_disagree_and_too_few_draws_are_named() -> None:
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(4, 60, 2))
    draws[0, :, 1] += 3.0  # one chain elsewhere in b
    out = convergence_warnings(draws, ("a", "b"), 30, 240, 240, planned=True)
    assert any(w.startswith("not converged: R-hat of b") and "target_epsilon" in w for w in out)
    assert any("ESS of b" in w for w in out)


def test_acceptance_and_the_cap_are_reported_with_the_key_to_change() -> None:
    rng = np.random.default_rng(2)
    out = convergence_warnings(rng.normal(size=(4, 500, 1)), ("a",), 2, 2000, 400)
    assert any("acceptance 0.005 is below" in w and "proposal_scale smaller" in w for w in out)
    assert any("1600 of 2000 proposals (80%) were refused by the public sensitivity cap" in w for w in out)
    assert any(
        "above" in w for w in convergence_warnings(rng.normal(size=(4, 500, 1)), ("a",), 990, 1000, 1000)
    )
