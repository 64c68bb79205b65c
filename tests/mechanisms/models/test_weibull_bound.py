"""The Weibull model's joint per-record bound (mechanisms/models/weibull_bound.py): never below the largest
change a record in the model's region makes (a brute force over a fine grid of records, box corners and the
ellipsoid's boundary included), and tight where the term-by-term bound was 2-13x above it."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.models import load_model
from mechanisms.models.weibull_bound import joint_record_bound

BOX = {"p": 2, "t_max": 3.0}
ELL = BOX | {"x_center": [0.1, -0.2], "x_cov": [[1.0, 0.3], [0.3, 1.2]], "x_radius": 2.5}
MODE = np.array([0.34, 1.49, 0.39, -0.30])  # the synthetic registries' posterior mode (log k, b0, b1, b2)


def _records(model, inside_ellipsoid: bool) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """A grid over log t (its ends included) times covariate points: the box grid with its corners, and for an
    ellipsoid model the grid points inside it plus its boundary points inside the box."""
    t = np.exp(np.linspace(np.log(model.t_min), np.log(model.t_max), 241))
    g = np.linspace(-model.x_bound, model.x_bound, 41)
    x = np.array(np.meshgrid(g, g, indexing="ij")).reshape(2, -1).T
    if inside_ellipsoid:
        ell = model.ellipsoid
        inv = np.linalg.inv(ell.matrix)
        d = x - ell.mu
        x = x[np.einsum("ij,jk,ik->i", d, inv, d) <= ell.radius**2]
        phi = np.linspace(0, 2 * np.pi, 721)
        edge = (
            ell.mu
            + ell.radius * np.column_stack([np.cos(phi), np.sin(phi)]) @ np.linalg.cholesky(ell.matrix).T
        )
        x = np.vstack([x, edge[np.all(np.abs(edge) <= model.x_bound, axis=1)]])
    tt, xi = np.meshgrid(t, np.arange(len(x)), indexing="ij")
    return {"time": tt.ravel(), "x1": x[xi.ravel(), 0], "x2": x[xi.ravel(), 1]}


def _brute(model, records, a, b) -> float:  # type: ignore[no-untyped-def]
    best = 0.0
    for event in (0.0, 1.0):
        d = records | {"event": np.full(records["time"].size, event)}
        diff = model.record_log_likelihood(d, b[None]) - model.record_log_likelihood(d, a[None])
        best = max(best, float(np.max(np.abs(diff))))
    return best


@pytest.mark.parametrize("args", [BOX, ELL], ids=["box", "ellipsoid"])
def test_the_bound_is_never_below_a_brute_force_over_the_records(args: dict[str, object]) -> None:
    model = load_model("weibull-regression", args)
    records = _records(model, "x_radius" in args)
    rng = np.random.default_rng(11)
    ratios = []
    for scale in (0.02, 0.02, 0.02, 0.02, 0.1, 0.1, 0.3, 1.0):  # MCMC-sized steps, then far apart
        a = MODE + scale * rng.standard_normal(4)
        b = a + scale * rng.standard_normal(4)
        bound = float(model.record_ratio_bound(a[None], b[None])[0])
        brute = _brute(model, records, a, b)
        assert bound >= brute * (1 - 1e-12), (scale, bound, brute)
        ratios.append(bound / brute)
    if "x_radius" not in args:  # the box's zonotope is exactly the records' (z, z*) set: tight
        assert max(ratios) < 1.03, ratios


def test_the_box_bound_is_tight_where_the_term_by_term_bound_was_not() -> None:
    """Posterior-scale steps at the mode: the term-by-term bound was 1.8-13x (median 3.8x) the brute force;
    the joint one within 3 % (fails with the term-by-term bound alone)."""
    model = load_model("weibull-regression", BOX)
    records = _records(model, False)
    rng = np.random.default_rng(5)
    for _ in range(6):
        a = MODE + 0.02 * rng.standard_normal(4)
        b = a + 0.02 * rng.standard_normal(4)
        assert float(model.record_ratio_bound(a[None], b[None])[0]) < 1.03 * _brute(model, records, a, b)


def test_joint_bound_of_no_step_is_nearly_zero_and_batches_row_by_row() -> None:
    k = np.exp(np.array([0.34, 0.2]))
    beta = np.array([[1.49, 0.39, -0.30], [1.0, 0.1, 0.2]])
    zero = joint_record_bound(k, beta, k, beta, (np.log(0.01), np.log(3.0)), 3.0)
    assert np.all(zero >= 0) and np.all(zero < 0.01)  # the certified margin alone (g is 0 everywhere)
    beta2 = beta + 0.01
    both = joint_record_bound(k, beta, k * 1.01, beta2, (np.log(0.01), np.log(3.0)), 3.0)
    one = [joint_record_bound(k[i : i + 1], beta[i : i + 1], k[i : i + 1] * 1.01, beta2[i : i + 1],
                              (np.log(0.01), np.log(3.0)), 3.0)[0] for i in range(2)]  # fmt: skip
    assert both == pytest.approx(one, rel=1e-12)


@pytest.mark.parametrize("neighbours", ["add-remove", "replace-one"])
@pytest.mark.parametrize(
    ("name", "args"), [("weibull-regression", BOX), ("weibull-regression", ELL), ("bayes-logistic", {"p": 2})]
)
def test_sensitivities_evaluate_the_bound_once_with_the_same_values(
    name: str, args: dict[str, object], neighbours: str
) -> None:
    """The planner's one evaluation of a step's cap and charge equals the two functions it replaces."""
    from mechanisms.samplers.requests import record_sensitivity, sensitivities, step_sensitivity

    model = load_model(name, args)
    rng = np.random.default_rng(2)
    a = np.zeros((8, model.d)) + 0.05 * rng.standard_normal((8, model.d))
    b = a + 0.05 * rng.standard_normal(a.shape)
    c, d = sensitivities(model, a, b, neighbours)
    np.testing.assert_array_equal(c, record_sensitivity(model, a, b))
    np.testing.assert_array_equal(d, step_sensitivity(model, a, b, neighbours))
