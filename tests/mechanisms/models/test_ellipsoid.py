"""The public covariate ellipsoid: clipping, the exact support function, and the per-record bounds of every
built-in model that uses it, checked by brute force over records on the ellipsoid's boundary and the box's
corners (the worst cases)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.models.ellipsoid import Ellipsoid, ellipsoid_from_args

P = 3
CENTER = [0.2, -0.1, 0.3]
COV = [[1.0, 0.4, 0.0], [0.4, 2.0, -0.3], [0.0, -0.3, 0.5]]
RADIUS = 2.5
ARGS = {"x_center": CENTER, "x_cov": COV, "x_radius": RADIUS}


def _ell() -> Ellipsoid:
    ell = ellipsoid_from_args(P, CENTER, COV, RADIUS)
    assert ell is not None
    return ell


def test_clip_moves_outside_records_onto_the_boundary_along_the_ray() -> None:
    ell = _ell()
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 2.5, (2000, P))
    out, moved = ell.clip(z)
    binv = np.linalg.inv(ell.matrix)
    q_in = np.einsum("ij,jk,ik->i", z - ell.mu, binv, z - ell.mu)
    q_out = np.einsum("ij,jk,ik->i", out - ell.mu, binv, out - ell.mu)
    assert moved == int(np.count_nonzero(q_in > RADIUS**2)) > 0
    assert (q_out <= RADIUS**2 * (1 + 1e-12)).all()
    inside = q_in <= RADIUS**2
    np.testing.assert_array_equal(out[inside], z[inside])  # records inside are untouched
    np.testing.assert_allclose(q_out[~inside], RADIUS**2, rtol=1e-12)  # the others land on the boundary
    dev_in, dev_out = (z - ell.mu)[~inside], (out - ell.mu)[~inside]
    norms = np.linalg.norm(dev_in, axis=1) * np.linalg.norm(dev_out, axis=1)
    cos = np.einsum("ij,ij->i", dev_in, dev_out) / norms
    np.testing.assert_allclose(cos, 1.0, rtol=1e-12)  # same direction from the centre


def test_support_is_the_maximum_over_the_boundary() -> None:
    """sup over E of |a + zᵀv| = |a + μᵀv| + R‖v‖_B, reached on the boundary (dense sample of it)."""
    ell = _ell()
    rng = np.random.default_rng(2)
    u = rng.normal(size=(200_000, P))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    boundary = ell.mu + RADIUS * u @ np.linalg.cholesky(ell.matrix).T
    for _ in range(20):
        a, v = rng.normal(), rng.normal(size=P)
        brute = float(np.max(np.abs(a + boundary @ v)))
        exact = float(ell.support(a, v[None, :])[0])
        assert brute <= exact * (1 + 1e-12) and brute >= exact * (1 - 1e-3)
        lo, hi = ell.extent(a, v[None, :])
        values = a + boundary @ v
        assert lo[0] <= float(np.min(values)) + 1e-12 and float(np.max(values)) <= hi[0] + 1e-12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"x_center": CENTER}, "give x_radius"),
        ({"x_radius": -1.0}, "x_radius must be"),
        ({"x_radius": 1.0, "x_cov": [[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]}, "symmetric"),
        ({"x_radius": 1.0, "x_cov": [[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, 1.0]]}, "definite"),
        ({"x_radius": 1.0, "x_center": [0.0, 0.0]}, r"x_center must be finite numbers of shape \(3,\)"),
        ({"x_radius": 1.0, "x_center": [9.0, 0.0, 0.0]}, "must lie in the schema's box"),
    ],
)
def test_bad_ellipsoid_arguments_are_refused(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_model("bayes-logistic", {"p": P, **args})


def test_model_with_list_arguments_equals_one_with_tuples() -> None:
    a = load_model("bayes-logistic", {"p": P, **ARGS})
    tuples = {"x_center": tuple(CENTER), "x_cov": tuple(map(tuple, COV)), "x_radius": RADIUS}
    b = load_model("bayes-logistic", {"p": P, **tuples})
    assert a == b and hash(a) == hash(b)
    assert a != load_model("bayes-logistic", {"p": P})


def _worst_records(model: Model, rng: np.random.Generator, n: int) -> dict[str, F64]:
    """Records the model allows at their worst: covariates on the box's corners and on the ellipsoid's
    boundary (then clipped, as a registry's are), every outcome value, extreme times."""
    ell = _ell()
    u = rng.normal(size=(n, P))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    z = ell.mu + RADIUS * u @ np.linalg.cholesky(ell.matrix).T
    corners = np.array(list(itertools.product(*[[-model.x_bound, model.x_bound]] * P)))  # type: ignore[attr-defined]
    z = np.clip(np.vstack([z, corners]), -model.x_bound, model.x_bound)  # type: ignore[attr-defined]
    k = z.shape[0]
    cols: dict[str, F64] = {f"x{j + 1}": z[:, j] for j in range(P)}
    for c in model.schema:
        if c.name in cols:
            continue
        if c.values is not None:
            cols[c.name] = rng.choice(np.asarray(c.values, dtype=float), k)
        else:
            cols[c.name] = rng.choice([c.lower, c.upper, 0.5 * (c.lower + c.upper)], k)
    checked, _ = model.check_records(cols)
    return checked


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("bayes-logistic", {"x_bound": 3.0}),
        ("linear-regression", {"x_bound": 3.0, "y_bound": 8.0}),
        ("weibull-regression", {"x_bound": 3.0, "t_min": 0.5, "t_max": 5.0}),
        ("logistic-random-intercept", {"x_bound": 3.0, "registries": 3}),
    ],
)
def test_every_model_s_bound_holds_and_is_tighter_with_the_ellipsoid(
    name: str, extra: dict[str, Any]
) -> None:
    boxed = load_model(name, {"p": P, **extra})
    model = load_model(name, {"p": P, **extra, **ARGS})
    rng = np.random.default_rng(3)
    data = _worst_records(model, rng, 3000)
    th = 0.3 * boxed.sample_prior(rng, 40)
    ts = th + 0.05 * rng.normal(size=th.shape)
    per = np.abs(model.record_log_likelihood(data, ts) - model.record_log_likelihood(data, th))
    bound = model.record_ratio_bound(th, ts)
    box_bound = boxed.record_ratio_bound(th, ts)
    assert bound is not None and box_bound is not None
    assert (per.max(axis=1) <= bound * (1 + 1e-9) + 1e-12).all()
    assert (bound <= box_bound * (1 + 1e-12)).all() and (bound < box_bound).any()
    np.testing.assert_allclose(bound, model.record_ratio_bound(ts, th), rtol=1e-12)  # symmetric


def test_clipped_records_are_counted_and_the_rest_unchanged() -> None:
    model = load_model("bayes-logistic", {"p": P, **ARGS})
    rng = np.random.default_rng(4)
    z = np.clip(rng.normal(0.0, 1.5, (500, P)), -3.0, 3.0)
    cols = {f"x{j + 1}": z[:, j] for j in range(P)} | {"y": rng.integers(0, 2, 500).astype(float)}
    out, moved = model.check_records(cols)
    q = np.einsum("ij,jk,ik->i", z - np.array(CENTER), np.linalg.inv(np.array(COV)), z - np.array(CENTER))
    assert moved == int(np.count_nonzero(q > RADIUS**2)) > 0
    np.testing.assert_array_equal(out["y"], cols["y"])
    np.testing.assert_array_equal(model.check_data(cols)["x1"], out["x1"])
    plain, none = load_model("bayes-logistic", {"p": P}).check_records(cols)
    assert none == 0 and np.array_equal(plain["x2"], z[:, 1])


def test_logistic_score_norm_bound_holds_for_every_allowed_record() -> None:
    """The warm start clips scores at this bound, so it must hold (then nothing is clipped: unbiased), at
    every θ (σ(sup|η|) ‖(1, x)‖ there, at most the θ-free bound); at θ = 0 it is half the θ-free bound and
    reached by a corner of the box."""
    from mechanisms.warmstart import clipped_scores

    model = load_model("bayes-logistic", {"p": P, **ARGS})
    boxed = load_model("bayes-logistic", {"p": P})
    assert model.score_norm_bound() < boxed.score_norm_bound()  # type: ignore[attr-defined]
    rng = np.random.default_rng(9)
    data = _worst_records(model, rng, 3000)
    for theta in [np.zeros(model.d), 0.1 * rng.normal(size=model.d), *rng.normal(0.0, 2.0, (5, model.d))]:
        s = clipped_scores(model, data, theta, clip=1e9)
        worst = np.linalg.norm(s, axis=1).max()
        at = model.score_norm_bound(theta)  # type: ignore[attr-defined]
        assert worst <= at * (1 + 1e-6) and at <= model.score_norm_bound() * (1 + 1e-12)  # type: ignore[attr-defined]
    box_data = _worst_records(boxed, rng, 10)  # the box's corners reach sup ‖(1, x)‖ = √(1 + p x_bound²)
    at_zero = np.linalg.norm(clipped_scores(boxed, box_data, np.zeros(boxed.d), clip=1e9), axis=1).max()
    assert at_zero == pytest.approx(boxed.score_norm_bound(np.zeros(boxed.d)), rel=1e-8)  # type: ignore[attr-defined]
    assert boxed.score_norm_bound(np.zeros(boxed.d)) == pytest.approx(0.5 * boxed.score_norm_bound())  # type: ignore[attr-defined]


def test_weibull_score_norm_bound_holds_for_every_allowed_record() -> None:
    """The warm start clips the gradient block at this bound at each release's θ: it must hold for every
    record the model allows (box corners, the ellipsoid's boundary, times across [t_min, t_max] so that the
    interior peaks of the shape score, at z = 0 and z = −1, are met) at every θ; it depends on θ."""
    from mechanisms.warmstart import clipped_scores

    model = load_model("weibull-regression", {"p": P, "t_max": 3.0, **ARGS})
    rng = np.random.default_rng(10)
    data = _worst_records(model, rng, 3000)
    times = np.geomspace(model.t_min, model.t_max, 80)  # type: ignore[attr-defined]
    data["time"] = rng.choice(times, data["time"].size)
    assert model.score_norm_bound() is None  # type: ignore[attr-defined]
    near_mode = [np.log(1.4), 1.5, 0.4, -0.3, 0.2]
    thetas = np.vstack([np.zeros(model.d), near_mode, 0.5 * rng.normal(size=(6, model.d))])
    bounds = []
    for theta in thetas:
        s = clipped_scores(model, data, theta, clip=1e300)
        bounds.append(model.score_norm_bound(theta))  # type: ignore[attr-defined]
        assert np.linalg.norm(s, axis=1).max() <= bounds[-1] * (1 + 1e-6)
    assert max(bounds) > 2.0 * min(bounds)


def test_linear_score_norm_bound_holds_for_every_allowed_record_and_is_attained_in_the_box() -> None:
    """The warm start clips the gradient block at (y_bound + sup|η|) sup‖x̃‖ / σ² at each release's θ: it
    must hold for every record the model allows (box corners, the ellipsoid's boundary, y at ±y_bound and
    0) at every θ. Without an ellipsoid it is attained (a corner maximises both |η| and ‖x̃‖, y = ∓y_bound);
    with one it is an upper bound within 30 % of the worst record here (the two sups at different x)."""
    from mechanisms.warmstart import record_scores

    args = {"p": P, "x_bound": 3.0, "y_bound": 5.0, "sigma": 0.7}
    rng = np.random.default_rng(12)
    thetas = np.vstack([np.zeros(P + 1), [1.0, 0.5, -0.5, 0.5], rng.normal(0.0, 2.0, (6, P + 1))])
    for extra, lowest in (({}, 1.0 - 1e-6), (ARGS, 0.7)):
        model = load_model("linear-regression", {**args, **extra})
        assert model.score_norm_bound() is None  # type: ignore[attr-defined]
        data = _worst_records(model, rng, 3000)
        data = {k: np.concatenate([v, v]) for k, v in data.items()}
        data["y"] = np.repeat([-5.0, 5.0], data["y"].size // 2)  # every record with either extreme y
        bounds = []
        for theta in thetas:
            worst = float(np.linalg.norm(record_scores(model, data, theta), axis=1).max())
            bounds.append(model.score_norm_bound(theta))  # type: ignore[attr-defined]
            assert lowest * bounds[-1] <= worst <= bounds[-1] * (1 + 1e-6), (extra, theta, worst, bounds[-1])
        assert max(bounds) > 2.0 * min(bounds)  # it depends on θ


def _brute_max(v: F64, mu: F64, cov: F64, radius: float, bound: float) -> float:
    """max over z in box ∩ E of zᵀv by SLSQP from two starts, the answer moved exactly into box ∩ E (towards
    μ, which lies in both): a feasible value, so a lower bound of the true maximum."""
    from scipy.optimize import minimize

    prec = np.linalg.inv(cov)
    best = -np.inf
    for x0 in (mu, np.clip(mu + 0.5 * radius * np.sqrt(np.diag(cov)) * np.sign(v), -bound, bound)):
        res = minimize(
            lambda z: -float(z @ v),
            x0,
            jac=lambda z: -v,
            bounds=[(-bound, bound)] * mu.size,
            constraints=[{"type": "ineq", "fun": lambda z: radius**2 - (z - mu) @ prec @ (z - mu)}],
            method="SLSQP",
            options={"ftol": 1e-15, "maxiter": 1000},
        )
        d = res.x - mu
        q = float(d @ prec @ d)
        t = min(1.0, radius / np.sqrt(q)) if q > 0 else 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            to_box = np.where(d > 0, (bound - mu) / d, np.where(d < 0, (-bound - mu) / d, np.inf))
        z = mu + min(t, float(to_box.min())) * (1.0 - 1e-15) * d
        best = max(best, float(z @ v))
    return best


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8])
def test_intersection_support_is_the_maximum_over_box_and_ellipsoid(p: int) -> None:
    """sup over box ∩ E of zᵀv: never below a feasible point's value (SLSQP's, and a dense sample of box ∩ E)
    and within 1e-6 of SLSQP's maximum (faces enumerated up to p = 6, the dual descent past it), on random
    ellipsoids that both bind (condition numbers up to ~10³)."""
    from mechanisms.models.ellipsoid import intersection_support

    rng = np.random.default_rng(100 + p)
    bound = 3.0
    for _ in range(4 if p <= 6 else 2):
        a = rng.normal(size=(p, p)) * rng.uniform(0.2, 2.0, p)
        cov = a @ a.T / p + rng.uniform(0.001, 0.1) * np.eye(p)
        mu = np.clip(rng.uniform(-1.0, 1.0, p) * rng.uniform(0.0, 3.5), -bound, bound)
        radius = float(rng.uniform(0.5, 5.0))
        ell = Ellipsoid(tuple(mu), tuple(map(tuple, cov)), radius)
        v = rng.normal(size=(12, p)) * rng.uniform(0.1, 2.0, p)
        got = intersection_support(ell, bound, v)
        scale = bound * np.abs(v).sum(axis=1)
        brute = np.array([_brute_max(row, mu, cov, radius, bound) for row in v])
        assert (got >= brute - 1e-12 * scale).all()
        assert (got <= brute + 1e-6 * scale).all(), (got - brute) / scale
        old = np.minimum(scale, v @ mu + radius * ell.norm_b(v))
        assert (got <= old + 1e-8 * scale).all()
        u = rng.normal(size=(20_000, p))  # a dense sample of box ∩ E: E's points scaled inside, then cut
        z = mu + (u / np.linalg.norm(u, axis=1, keepdims=True)) @ np.linalg.cholesky(cov).T * radius
        z = z[(np.abs(z) <= bound).all(axis=1)]
        if z.size:
            assert (got >= (z @ v.T).max(axis=0) - 1e-12 * scale).all()


def test_intersection_bound_is_tighter_than_the_smaller_of_the_two_where_both_bind() -> None:
    """Where the box and a correlated ellipsoid both bind (p = 4, x_bound = 3, equicorrelation 0.97 at
    variance 2, R = 4.5), the smaller of their two bounds — the bound before — is slack against the brute
    force by at least the independent check's factors (1.12× on the sum over steps, 1.56× on one step) on
    the sensitivities |Δη| of random steps, while the bound over the intersection is within 1e-6 of it."""
    p, bound, radius = 4, 3.0, 4.5
    cov = 2.0 * (np.full((p, p), 0.97) + 0.03 * np.eye(p))
    args = {"x_bound": bound, "x_center": [0.0] * p, "x_cov": cov.tolist(), "x_radius": radius}
    model = load_model("bayes-logistic", {"p": p, **args})
    ell = model.ellipsoid  # type: ignore[attr-defined]
    rng = np.random.default_rng(11)
    th = rng.normal(size=(60, p + 1))
    ts = th + rng.normal(size=th.shape) * np.r_[0.0, np.ones(p)]  # slopes only: |Δη| = |zᵀΔβ|
    new = model.record_ratio_bound(th, ts)
    assert new is not None
    v = (ts - th)[:, 1:]
    zero = np.zeros(p)
    brute = np.array([max(_brute_max(s * row, zero, cov, radius, bound) for s in (1, -1)) for row in v])
    old = np.minimum(bound * np.abs(v).sum(axis=1), ell.support(0.0, v))
    assert (new >= brute * (1 - 1e-12)).all() and (new <= brute * (1 + 1e-6)).all()
    assert old.sum() / brute.sum() >= 1.12 and (old / brute).max() >= 1.56
