"""DecisionRequest.to_inputs / from_inputs: the coordinator's request and the party's reading of the wire
arrays are inverses, and from_inputs refuses what it cannot read, naming the input."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.samplers.requests import DecisionRequest, Penalty


def _same(a: DecisionRequest, b: DecisionRequest) -> None:
    assert (a.kind, a.penalty, a.n) == (b.kind, b.penalty, b.n)
    np.testing.assert_array_equal(a.theta_star, b.theta_star)
    np.testing.assert_array_equal(a.public, b.public)
    if a.theta is None:
        assert b.theta is None
    else:
        assert b.theta is not None
        np.testing.assert_array_equal(a.theta, b.theta)


@pytest.mark.parametrize("d", [1, 3])
@pytest.mark.parametrize("kind", ["mh", "penalty", "rejection"])
def test_from_inputs_inverts_to_inputs(kind: str, d: int) -> None:
    rng = np.random.default_rng(4)
    n = 6
    pen = None
    if kind == "penalty":
        pen = Penalty(tau=0.5, alpha=0.25, n=100, c="clip", b=2.0, max_sensitivity=3.0)
    req = DecisionRequest(
        kind="rejection" if kind == "rejection" else "mh",
        theta_star=rng.normal(size=(n, d)),
        public=-np.abs(rng.normal(size=n)),
        theta=None if kind == "rejection" else rng.normal(size=(n, d)),
        penalty=pen,
    )
    back = DecisionRequest.from_inputs(req.to_inputs(), req.kind, n, d, pen)
    _same(req, back)
    _same(req, DecisionRequest.from_inputs(back.to_inputs(), back.kind, n, d, pen))
    if d == 1:  # a one-parameter model's arrays may travel flat, shape (n,)
        flat = {k: v.reshape(-1) for k, v in req.to_inputs().items()}
        _same(req, DecisionRequest.from_inputs(flat, req.kind, n, d, pen))


def test_from_inputs_refuses_naming_the_input() -> None:
    n, d = 4, 2
    good = {"theta": np.zeros((n, d)), "theta_star": np.ones((n, d)), "public": np.zeros(n)}
    with pytest.raises(ValueError, match=r"input 'theta' is required"):
        DecisionRequest.from_inputs({k: v for k, v in good.items() if k != "theta"}, "mh", n, d)
    with pytest.raises(ValueError, match=r"input 'public' must have shape \(4,\), got \(3,\)"):
        DecisionRequest.from_inputs({**good, "public": np.zeros(3)}, "mh", n, d)
    with pytest.raises(ValueError, match=r"input 'theta_star' has NaN"):
        DecisionRequest.from_inputs({**good, "theta_star": np.full((n, d), np.nan)}, "mh", n, d)
    with pytest.raises(ValueError, match=r"input 'theta_star' must be a float array"):
        DecisionRequest.from_inputs({**good, "theta_star": "abc"}, "mh", n, d)
    with pytest.raises(ValueError, match="decision kind"):
        DecisionRequest.from_inputs(good, "gibbs", n, d)
    with pytest.raises(ValueError, match="penalty applies to MH"):
        DecisionRequest.from_inputs(good, "rejection", n, d, Penalty(tau=1.0, alpha=0.0, n=1))
    rej = DecisionRequest.from_inputs(good, "rejection", n, d)  # theta is not read for rejection sampling
    assert rej.theta is None and "theta" not in rej.to_inputs()
