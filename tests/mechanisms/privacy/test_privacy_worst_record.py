"""The worst-record charge of a run (issue 35 item 2), against brute force: the quadratic majorant of the
Rényi table on a dense grid of Δ, the sup of a quadratic form over the box, the ellipsoid and their
intersection against dense samples of the region, and a run's charge against sup_x Σ_t ρ_table(|Δℓ_t(x)|)
computed with the real log-likelihood over a dense set of allowed records (never below it), with the gain
over the per-decision charge measured."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.models import load_model
from mechanisms.privacy import PenaltyAcceptance, bit_rdp_table
from mechanisms.privacy.worst_record import (
    QuadraticRegion,
    RunState,
    WorstRecordCharge,
    box_region,
    linear_structure,
    quadratic_rdp_bound,
)
from mechanisms.samplers.requests import step_sensitivity
from simulations.worst_record import allowed_records, independence_run, record_losses

S, CAP = 0.8, 1.2


def _psd(rng: np.random.Generator, d: int, rank: int) -> np.ndarray:
    v = rng.normal(size=(rank, d))
    return np.asarray(v.T @ v)


def test_quadratic_bound_majorises_the_table_on_a_dense_grid() -> None:
    """ρ_table(d) ≤ κ(D) d² + c for every d ≤ D, at grid points, just above and below them, and between."""
    table = bit_rdp_table(PenaltyAcceptance(S), CAP, (2.0, 8.0))
    bound = quadratic_rdp_bound(table)
    grid = np.concatenate(
        [
            np.linspace(0.0, CAP, 4001),
            np.geomspace(1e-9, CAP, 400),
            table.deltas,
            table.deltas * (1 + 1e-9),
            table.deltas * (1 - 1e-9),
            table.deltas * (1 + 1e-13),
        ]
    )
    grid = np.sort(grid[grid <= table.deltas[-1]])
    rho = table.rho(grid)
    for top in np.concatenate([np.geomspace(CAP / 500, CAP, 60), table.deltas[::7]]):
        d = grid[grid <= top]
        assert np.all(rho[: d.size] <= bound.majorant(d, np.full(d.size, top)))
    g = np.asarray(table.orders) / (2 * S**2)
    k = bound.kappa(np.array([CAP / 8, CAP / 2, CAP, 2 * CAP]))
    assert np.all(np.diff(k, axis=0) >= 0) and np.all(k <= g * (1 + 1e-8))
    assert np.all(k[-1] == g)  # past the table: the Gaussian
    assert np.all(k[0] < 0.8 * g)  # at an eighth of the cap the bit's gain over the Gaussian survives
    # the constant pays only for the first cell (0, cap/64]: at most the Gaussian there
    assert np.all(np.asarray(bound.const) <= g * table.deltas[0] ** 2)
    assert np.all(np.asarray(bound.const) > 0.0)


def test_sup_over_the_box_is_the_max_over_its_corners() -> None:
    rng = np.random.default_rng(3)
    region = box_region(3, 2.0)
    axis = np.linspace(-2.0, 2.0, 41)
    x = np.array(np.meshgrid(axis, axis, axis)).reshape(3, -1).T
    z = np.hstack([np.ones((len(x), 1)), x])
    for rank in (1, 2, 6):
        g = _psd(rng, 4, rank)
        dense = float(np.max(np.einsum("ij,jk,ik->i", z, g, z)))
        got = region.sup(g)
        assert dense <= got <= dense * (1 + 1e-8)  # the grid holds the corners: exact


@pytest.mark.parametrize("p", [1, 2, 3])
def test_sup_over_the_ellipsoid_is_certified_and_tight(p: int) -> None:
    rng = np.random.default_rng(p)
    a = rng.normal(size=(p, p))
    cov = a @ a.T + 0.3 * np.eye(p)
    mu, radius = rng.normal(0.0, 0.5, p), 1.7
    m = np.vstack([np.zeros((1, p)), radius * np.linalg.cholesky(cov)])
    region = QuadraticRegion(p + 1, z0=np.r_[1.0, mu], m=m)
    u = rng.normal(size=(200_000, p))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    u = np.vstack([u, u * rng.random((len(u), 1))])  # the boundary and the interior
    z = np.r_[1.0, mu] + u @ m.T
    for rank in (1, 2, p + 1):
        g = _psd(rng, p + 1, rank)
        dense = float(np.max(np.einsum("ij,jk,ik->i", z, g, z)))
        got = region.sup(g)
        assert got >= dense
        assert got <= dense * (1 + (1e-6 if p == 1 else 2e-3))  # how tight: sampling's gap on the sphere


def test_sup_over_the_ellipsoid_hard_case() -> None:
    """b orthogonal to H's top eigenvector: the secular equation has no root above λ_max."""
    p, radius = 2, 1.5
    m = np.vstack([np.zeros((1, p)), radius * np.eye(p)])
    region = QuadraticRegion(p + 1, z0=np.r_[1.0, 0.0, 0.0], m=m)
    g = np.diag([0.7, 1.0, 2.0])
    exact = 0.7 + radius**2 * 2.0
    assert exact <= region.sup(g) <= exact * (1 + 1e-8)


def test_sup_over_box_and_ellipsoid_bounds_their_intersection() -> None:
    model = load_model(
        "bayes-logistic",
        {"p": 2, "x_bound": 2.0, "x_center": [0.5, -0.3], "x_cov": [[1.0, 0.6], [0.6, 1.2]], "x_radius": 2.2},
    )
    st = linear_structure(model)
    assert st is not None and st.region.corners is not None and st.region.z0 is not None
    z = allowed_records(model, 301)
    rng = np.random.default_rng(9)
    box_only = box_region(2, 2.0)
    ell_only = QuadraticRegion(3, z0=st.region.z0, m=st.region.m)
    for rank in (1, 3):
        g = _psd(rng, 3, rank)
        dense = float(np.max(np.einsum("ij,jk,ik->i", z, g, z)))
        got = st.region.sup(g)
        assert dense <= got <= min(box_only.sup(g), ell_only.sup(g)) * (1 + 1e-12)


def test_a_stack_of_grams_gets_the_bounds_each_gets_alone_bit_for_bit() -> None:
    """``QuadraticRegion.sups`` (one vectorised pass, what the planner asks) equals ``sup`` of each matrix
    alone exactly, for the box, the ellipsoid (secular roots, the hard case, rank one, a zero matrix) and
    their intersection; ``WorstRecordCharge.charged_along`` equals ``charged`` of each state exactly: a ledger
    and a plan read the same numbers whichever path computed them."""
    rng = np.random.default_rng(11)
    p = 3
    m = np.vstack([rng.normal(size=(1, p)), 1.3 * np.eye(p) + 0.2 * rng.normal(size=(p, p))])
    for region in (
        box_region(p, 1.5),
        QuadraticRegion(p + 1, z0=np.r_[1.0, 0.4, -0.2, 0.1], m=m),
        QuadraticRegion(p + 1, corners=box_region(p, 1.5).corners, z0=np.r_[1.0, 0.0, 0.0, 0.0], m=m),
    ):
        grams = np.stack([_psd(rng, p + 1, r) * scale for r in (1, 2, 4) for scale in (1e-3, 1.0, 50.0)])
        grams = np.concatenate([grams, np.zeros((1, p + 1, p + 1)), np.diag([0.7, 1.0, 2.0, 0.5])[None]])
        one_by_one = np.array([region.sup(g) for g in grams])
        assert np.array_equal(region.sups(grams), one_by_one)
        assert one_by_one[-2] == 0.0 and np.all(one_by_one[:-2] > 0.0)
    run = independence_run(seed=5, steps=60)
    st = linear_structure(run.model)
    assert st is not None
    deltas = step_sensitivity(run.model, run.theta, run.theta_star, "add-remove")
    for tab in (bit_rdp_table(PenaltyAcceptance(S), run.cap, (2.0, 8.0)), None):
        wr = WorstRecordCharge.of(st, "add-remove", S, tab)
        states, state = [], wr.empty()
        for part in np.array_split(np.arange(len(run.theta)), 6):
            _, state = wr.increment(state, run.theta[part], run.theta_star[part], deltas[part], "test")
            states.append(state)
        assert np.array_equal(wr.charged_along(states), np.stack([wr.charged(s) for s in states]))


def test_a_stack_is_bounded_chunk_by_chunk_and_a_bound_past_float_range_is_no_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Chunks of the stack (forced to 7 matrices here) give the same bits as one pass, so a region with many
    corners never holds stack x corners at once (an independent review measured 53 MB for 400 matrices
    of 16,384 corners before the chunking). A Gram matrix whose ellipsoid bound overflows (G ~ 1e160) gets
    +inf from the ellipsoid, never 0 (the one-matrix code returned max(0, nan) = 0 there: an under-charge),
    and the box's finite bound where the region has one."""
    import mechanisms.privacy.worst_record as wr_module

    rng = np.random.default_rng(4)
    region = box_region(3, 1.5)
    grams = np.stack([_psd(rng, 4, 1 + i % 4) for i in range(40)])
    whole = region.sups(grams)
    monkeypatch.setattr(wr_module, "_CHUNK_ELEMENTS", 7 * 33 * 4)
    assert np.array_equal(region.sups(grams), whole)
    huge = 1e160 * (np.eye(3) + 0.1)
    m = np.vstack([np.zeros((1, 2)), 2.0 * np.eye(2)])
    ellipsoid = QuadraticRegion(3, z0=np.r_[1.0, 0.3, 0.0], m=m)
    assert ellipsoid.sup(huge) == np.inf
    both = QuadraticRegion(3, corners=box_region(2, 1.0).corners, z0=np.r_[1.0, 0.3, 0.0], m=m)
    assert both.sup(huge) == box_region(2, 1.0).sup(huge) and np.isfinite(both.sup(huge))


def test_formula_bernoulli_region_holds_every_record() -> None:
    args = {
        "formula": "y ~ age + C(sex) + age:creat + (1 | registry)",
        "family": "bernoulli",
        "columns": {
            "age": [20, 90],
            "creat": [0.3, 4.0],
            "sex": {"values": [0, 1]},
            "registry": {"values": [1, 2, 3]},
            "y": {"values": [0, 1]},
        },
    }
    model = load_model("formula", args)
    st = linear_structure(model)
    assert st is not None
    rng = np.random.default_rng(4)
    n = 5000
    recs = {
        "age": rng.uniform(20, 90, n),
        "creat": rng.uniform(0.3, 4.0, n),
        "sex": rng.integers(0, 2, n).astype(float),
        "registry": rng.integers(1, 4, n).astype(float),
        "y": rng.integers(0, 2, n).astype(float),
    }
    theta = model.sample_prior(rng, 40)
    star = model.sample_prior(rng, 40)
    dl = model.record_log_likelihood(recs, star) - model.record_log_likelihood(recs, theta)  # (steps, recs)
    v = st.directions(theta, star)
    g = v.T @ v
    assert float(np.max(np.sum(dl**2, axis=0))) <= st.region.sup(g)
    # per step, the Lipschitz bound |Δℓ_t(x)| <= |z(x)' v_t| is what the per-decision charge uses
    assert np.all(np.abs(dl).max(axis=1) <= model.record_ratio_bound(theta, star))


def test_no_structure_keeps_the_per_decision_charge() -> None:
    from dataclasses import dataclass

    from mechanisms.models.logistic import BayesLogistic

    @dataclass(frozen=True)
    class Plugin(BayesLogistic):  # a plug-in may change the likelihood: its structure is not known
        name = "plugin-logistic"

    assert linear_structure(load_model("gaussian-mean", {})) is None
    assert linear_structure(Plugin(p=2)) is None
    assert linear_structure(BayesLogistic(p=2)) is not None


def test_stored_state_is_checked() -> None:
    good = {"grams": [[[1.0, 0.5], [0.5, 1.0]]], "per_decision": [2.0], "decisions": 3}
    st = RunState.from_dict(good, 1, 2)
    assert RunState.from_dict(st.to_dict(), 1, 2).to_dict() == good
    with pytest.raises(ValueError, match="1 x 3 x 3"):
        RunState.from_dict(good, 1, 3)
    with pytest.raises(ValueError, match="symmetric"):
        RunState.from_dict(good | {"grams": [[[1.0, 2.0], [0.0, 1.0]]]}, 1, 2)
    with pytest.raises(ValueError, match="numbers"):
        RunState.from_dict(good | {"grams": [["a"]]}, 1, 1)
    with pytest.raises(ValueError, match="decisions"):
        RunState.from_dict(good | {"decisions": -1}, 1, 2)


@pytest.mark.parametrize("neighbours", ["add-remove", "replace-one"])
def test_run_charge_is_never_below_the_brute_force_worst_record(neighbours: str) -> None:
    """An independence sampler's run around a logistic posterior: the per-run charge (3 batches, the
    increments summed) against sup over allowed records (pairs for replace-one) of Σ_t ρ_table(|Δℓ_t|)
    with the real log-likelihood, and against the per-decision charge Σ_t ρ_table(Δ_t). Replace-one: the
    per-decision Δ_t is the log-ratio's own range (``record_replace_range``), here below the worst record's
    4 S (the run charges the smaller)."""
    run = independence_run(seed=5, steps=240 if neighbours == "add-remove" else 120)
    model, theta, star = run.model, run.theta, run.theta_star
    table = bit_rdp_table(PenaltyAcceptance(S), run.cap, (8.0,))
    st = linear_structure(model)
    assert st is not None
    deltas = step_sensitivity(model, theta, star, neighbours)
    losses = record_losses(model, theta, star, neighbours, 31 if neighbours == "add-remove" else 9)
    assert np.all(np.max(losses, axis=0) <= deltas * (1 + 1e-9))
    for tab in (table, None):
        wr = WorstRecordCharge.of(st, neighbours, S, tab)
        state = wr.empty()
        rho = mu2 = 0.0
        for part in np.array_split(np.arange(len(theta)), 3):
            events, state = wr.increment(state, theta[part], star[part], deltas[part], "test")
            (e,) = events
            mu2 += e.mu**2
            rho += e.rdp(8.0) if tab is not None else 0.0
        if tab is None:  # the GDP reading: μ² against sup Σ_t Δℓ_t(x)² / s²
            truth = float(np.max(np.sum(losses**2, axis=1))) / S**2
            per_decision = float(np.sum(deltas**2)) / S**2
            if neighbours == "add-remove":
                assert truth <= mu2 < per_decision
                assert mu2 == pytest.approx(wr.worst(state)[0], rel=1e-9)
            else:
                assert truth <= mu2 and mu2 == pytest.approx(per_decision, rel=1e-9)
                assert per_decision < wr.worst(state)[0]
        else:
            truth = float(np.max(table.rho(losses.ravel()).reshape(losses.shape).sum(axis=1)))
            per_decision = float(table.batch_rho(deltas)[0])
            assert rho == pytest.approx(wr.charged(state)[1], rel=1e-9)  # the increments telescope
            if neighbours == "add-remove":
                assert truth <= rho < per_decision
                assert wr.worst(state)[1] < per_decision  # the worst record's own bound, not the minimum
            else:
                assert truth <= rho and rho == pytest.approx(per_decision, rel=1e-9)
                assert per_decision < wr.worst(state)[1]


def test_stand_in_run_ratio_is_below_one_and_matches_the_charge() -> None:
    """``simulations.worst_record.run_ratios`` (the registry-scale figure's ratio) on the planner's stand-in
    chain: the run's charge over its per-decision charge, at most 1 (the charge takes the smaller), and
    equal to the increments' sum over the per-decision totals when charged batch by batch."""
    from mechanisms.planning import StandIn
    from simulations.worst_record import run_ratios, stand_in_steps

    model = load_model("bayes-logistic", {"p": 3, "x_bound": 3.0})
    mean, cov = np.array([-1.0, 0.5, -0.3, 0.2]), np.diag([0.01, 0.004, 0.004, 0.004])
    theta, star = stand_in_steps(
        StandIn(model, mean, cov, 1.1, 2.0), 5.0, np.random.default_rng(2), chains=8, steps=40
    )
    assert theta.shape == star.shape and theta.shape[0] > 100
    table = bit_rdp_table(PenaltyAcceptance(2.0), 5.0, (4.0,))
    g, r = run_ratios(model, theta, star, "add-remove", 2.0, table)
    assert r is not None and 0 < g < 0.8 and 0 < r < 0.8  # 4 parameters, 8 chains: well below per decision
    st = linear_structure(model)
    assert st is not None
    wr = WorstRecordCharge.of(st, "add-remove", 2.0, table)
    deltas = step_sensitivity(model, theta, star, "add-remove")
    state, mu2 = wr.empty(), 0.0
    for part in np.array_split(np.arange(len(theta)), 5):
        (e,), state = wr.increment(state, theta[part], star[part], deltas[part], "t")
        mu2 += e.mu**2
    assert mu2 == pytest.approx(g * state.per_decision[0], rel=1e-9)
