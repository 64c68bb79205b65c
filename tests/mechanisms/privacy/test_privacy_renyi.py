"""The Rényi accounting of the penalty accept bit (issue 23 item 4), checked against independent computations:
the bit's ρ(α, Δ) against an mpmath brute force over L, the RDP → (ε, δ) conversion against dp_accounting's
RDP accountant, the Rényi filter's admission rule and persistence, and the sign-reveal charge."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import integrate, special

from mechanisms.kinds import DecisionPlan, decision_events
from mechanisms.privacy import (
    ORDERS,
    BudgetExceededError,
    EpsDeltaBudget,
    EpsDeltaEvent,
    GaussianEvent,
    GDPBudget,
    LaplaceEvent,
    PrivacyLedger,
    RDPBudget,
    RenyiEvent,
    UnsupportedEventError,
    bit_rdp,
    bit_rdp_table,
    budget_order,
    coalition_view,
    event_from_dict,
    rdp_eps,
    renyi,
)
from mechanisms.privacy._numeric import log1mexp
from mechanisms.privacy.residual import ExGammaNoise, ResidualPenaltyAcceptance
from mechanisms.privacy.reveal_sign import PenaltyAcceptance
from mechanisms.samplers.requests import Penalty


def _d(a: mp.mpf, ra: mp.mpf, b: mp.mpf, rb: mp.mpf, al: float) -> mp.mpf:
    alpha = mp.mpf(al)
    return mp.log(a**alpha * b ** (1 - alpha) + ra**alpha * rb ** (1 - alpha)) / (alpha - 1)


def _exg(L: float, s: float) -> tuple[mp.mpf, mp.mpf]:
    """(P(L + X ≥ 0), P(L + X < 0)), X = N(0, s²) + Exp(1), from the closed form in high precision."""
    x, s_ = -mp.mpf(L), mp.mpf(s)
    tail = mp.exp(s_ * s_ / 2 - x) * mp.ncdf(x / s_ - s_)
    return mp.ncdf(-x / s_) + tail, mp.ncdf(x / s_) - tail


@functools.lru_cache(maxsize=4096)
def _exgamma(L: float, s: float, k: float) -> tuple[mp.mpf, mp.mpf]:
    """The same for X = N(0, s²) + Gamma(k, 1) by mpmath quadrature over u = G^k (the Gamma law becomes
    e^{-u^{1/k}} du / Γ(k + 1): no singularity at 0), break points around the Gaussian bump."""
    s_, k_, L_ = mp.mpf(s), mp.mpf(k), mp.mpf(L)
    c = 1 / mp.gamma(k_ + 1)
    bump = {-L_ + d * s_ for d in (-8, -3, 0, 3, 8) if -L + d * s > 0}
    gs = {mp.mpf(g) for g in (0, 1e-6, 1, 5, 20, 80)} | bump
    us = sorted(g**k_ for g in gs)

    def quad(sign: int) -> mp.mpf:
        return mp.quad(lambda u: mp.ncdf(sign * (L_ + u ** (1 / k_)) / s_) * mp.exp(-(u ** (1 / k_))) * c, us)

    tail = mp.gammainc(k_, 80, mp.inf, regularized=True)  # G beyond 80: accepted
    return quad(1) + tail, quad(-1)


@functools.lru_cache(maxsize=4096)
def _exgamma_quad(L: float, s: float, k: float) -> tuple[mp.mpf, mp.mpf]:
    """``_exgamma`` by scipy's adaptive quadrature of the same integrals (both probabilities as integrals of
    positive functions, so each keeps its relative accuracy): 1e-14 of the mpmath one (tested below) at a
    thousandth of its time, for the brute force's hundreds of L."""
    c = 1.0 / math.gamma(k + 1)
    bump = {-L + d * s for d in (-8, -3, 0, 3, 8) if -L + d * s > 0}
    us = sorted(g**k for g in {0.0, 1e-6, 1.0, 5.0, 20.0, 80.0} | bump)

    def quad(sign: int) -> float:
        def f(u: float) -> float:
            return float(special.ndtr(sign * (L + u ** (1 / k)) / s)) * math.exp(-(u ** (1 / k))) * c

        pieces = itertools.pairwise(us)
        return sum(integrate.quad(f, a, b, epsabs=0.0, epsrel=1e-13, limit=200)[0] for a, b in pieces)

    return mp.mpf(quad(1) + float(special.gammaincc(k, 80.0))), mp.mpf(quad(-1))


@pytest.mark.parametrize(("s", "k"), [(1.5, 0.6), (2.0, 1 / 7), (4.0, 6 / 7)])
def test_the_fast_probabilities_agree_with_mpmath(s: float, k: float) -> None:
    mp.mp.dps = 20
    for L in (-4.0 * s, -1.3, 0.0, 0.7, 3.0 * s):
        fast, slow = _exgamma_quad(L, s, k), _exgamma(L, s, k)
        for a, b in zip(fast, slow, strict=True):
            assert float(a) == pytest.approx(float(b), rel=1e-12)


def _brute(probs, delta: float, alpha: float, grid: np.ndarray) -> float:
    best = mp.mpf(0)
    for L in grid:
        a, ra = probs(float(L))
        b, rb = probs(float(L) + delta)
        best = max(best, _d(a, ra, b, rb, alpha), _d(b, rb, a, ra, alpha))
    return float(best)


@pytest.mark.parametrize(
    ("s", "delta", "alpha", "hi"),
    [(2.0, 0.1, 2.0, 12.0), (1.0, 0.1, 32.0, 12.0), (3.0, 0.05, 8.0, 15.0), (2.0, 0.6, 4.0, 15.0)],
)
def test_bit_rdp_bounds_the_mpmath_brute_force_at_k1(s: float, delta: float, alpha: float, hi: float) -> None:
    mp.mp.dps = 60
    bound = float(bit_rdp((alpha,), delta, PenaltyAcceptance(s))[0])
    brute = _brute(lambda L: _exg(L, s), delta, alpha, np.arange(-12.0, hi, 0.05))
    gauss = alpha * delta**2 / (2 * s * s)
    assert brute <= bound <= 1.10 * brute  # rigorous, and within 10 % (the cells' shift Δ(1 + 1/32))
    assert bound < 0.75 * gauss  # the accept bit's amplification is real at these settings


@pytest.mark.parametrize(
    ("s", "k", "delta", "alpha", "step"),
    [(1.5, 0.6, 0.2, 2.0, 0.1), (2.0, 1 / 7, 0.4, 8.0, 0.2), (4.0, 6 / 7, 0.5, 4.0, 0.25)],
)
@pytest.mark.slow
def test_bit_rdp_bounds_the_quadrature_brute_force_at_k_below_1(
    s: float, k: float, delta: float, alpha: float, step: float
) -> None:
    """Δ a multiple of the step: each L's probabilities (cached) serve as L + Δ's of another."""
    mp.mp.dps = 20
    bound = float(bit_rdp((alpha,), delta, ResidualPenaltyAcceptance(s, k))[0])
    grid = step * np.arange(round(-4.0 * s / step), round(3.0 * s / step))
    brute = _brute(lambda L: _exgamma_quad(round(L, 9), s, k), delta, alpha, grid)
    assert brute <= bound <= 1.12 * brute


def _quadrature_log_probs(s: float, k: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The previous path of ``renyi._log_probs`` for k < 1: ``ExGammaNoise``'s two direct quadratures."""
    noise = ExGammaNoise(s, k)
    with np.errstate(divide="ignore"):
        sf, cdf = noise._logsf_direct(-x), noise._logcdf_direct(-x)
    half = math.log(0.5)
    lp = np.where(sf < half, sf, log1mexp(np.minimum(cdf, 0.0)))
    lr = np.where(cdf < half, cdf, log1mexp(np.minimum(sf, 0.0)))
    return lp, lr


@pytest.mark.parametrize(
    ("s", "k", "delta", "alphas"),
    [(1.5, 0.6, 0.2, (2.0, 8.0)), (2.0, 1 / 7, 0.1, (2.0, 32.0)), (4.9, 6 / 7, 0.6, (1.5, 4.0))],
)
@pytest.mark.slow
def test_mixture_path_equals_the_quadrature_path(
    monkeypatch: pytest.MonkeyPatch, s: float, k: float, delta: float, alphas: tuple[float, ...]
) -> None:
    """The Beta-mixture evaluation of p (``exgamma_log_tails``) gives the bound of the previous quadrature
    path to the latter's accuracy (about 5e-7 on log p near k = 1, hence ~1e-6 on ρ; 1e-4 asserted)."""
    fast = renyi._build(s, k, delta, alphas, 1.03, 1.0).bounds[-1]
    monkeypatch.setattr(renyi, "_log_probs", _quadrature_log_probs)
    slow = renyi._build(s, k, delta, alphas, 1.03, 1.0).bounds[-1]
    np.testing.assert_allclose(fast, slow, rtol=1e-4)


def test_branch_and_bound_is_the_maximum_over_every_cell() -> None:
    """``_core_max`` (nested blocks, all orders at once, linear-space sums) returns the maximum of the
    log-space cell bound ``_pair_matrix`` over every cell, at each order."""
    al = np.asarray(ORDERS)
    for s, k, stride, n in [(2.0, 1.0, 1, 40), (1.0, 3 / 7, 3, 99), (4.9, 6 / 7, 2, 64)]:
        x = np.arange(-12.0 * s, 12.0 * s, 0.01)
        lp, lr = renyi._log_probs(s, k, x)
        first, last = 5, x.size - 300
        got = renyi._core_max(al, lp, lr, first, last, n, stride, 1e-9)
        idx = np.arange(first, last + 1, stride)
        every = renyi._pair_matrix(al, lp[idx], lr[idx], lp[idx + stride + n], lr[idx + stride + n], 1e-9)
        np.testing.assert_allclose(got, every.max(axis=0), rtol=1e-9)


def test_rdp_eps_is_dp_accountings_conversion() -> None:
    """For a composition of Gaussians at one order both convert ρ = T αμ²/2 alike (dp_accounting's
    ``compute_epsilon``, the improved bound of Balle et al. 2020 / Canonne, Kamath, Steinke 2020)."""
    for mu, count, alpha, delta in [(0.1, 1000, 2.0, 1e-5), (0.05, 400, 8.0, 1e-6), (0.3, 50, 3.0, 1e-3)]:
        acc = rdp_lib.RdpAccountant(orders=[alpha])
        acc.compose(dp_event.GaussianDpEvent(1.0 / mu), count)
        theirs = acc.get_epsilon(delta)
        ours = rdp_eps(count * alpha * mu * mu / 2, alpha, delta)
        assert ours == pytest.approx(theirs, rel=1e-9)


def test_budget_order_is_the_best_order_of_the_gaussian_curve_on_the_budget() -> None:
    for eps_max, delta in [(25.0, 1e-5), (5.0, 1e-5), (1.0, 1e-6)]:
        alpha = budget_order(eps_max, delta)
        assert alpha in ORDERS
        acc = rdp_lib.RdpAccountant(orders=list(ORDERS))
        # the μ whose Gaussian curve lands on eps_max: dp_accounting picks the same order
        lo, hi = 0.0, 50.0
        for _ in range(80):
            mid = (lo + hi) / 2
            e = min(rdp_eps(a * mid * mid / 2, a, delta) for a in ORDERS)
            lo, hi = (mid, hi) if e < eps_max else (lo, mid)
        acc.compose(dp_event.GaussianDpEvent(1.0 / hi))
        eps, order = acc.get_epsilon_and_optimal_order(delta)
        assert eps == pytest.approx(eps_max, rel=1e-6) and order == alpha


def test_table_is_monotone_and_charges_at_the_next_grid_delta() -> None:
    table = bit_rdp_table(PenaltyAcceptance(2.0), 0.6, (2.0, 8.0))
    ratios = table.deltas[1:] / table.deltas[:-1]
    assert table.deltas[0] == pytest.approx(0.6 / 64, rel=0.05) and table.deltas[-1] >= 0.6
    assert np.all(ratios > 1) and np.max(ratios) <= 1.03 * (1 + 1 / 16)
    assert np.all(np.diff(table.bounds, axis=0) >= -1e-15)  # ρ non-decreasing in Δ
    d = np.array([0.001, 0.05, 0.6, 0.9])
    rho = table.rho(d)
    gauss = np.array([2.0, 8.0])[None, :] * (d[:, None] / 2.0) ** 2 / 2
    assert np.all(rho <= gauss * (1 + 1e-12))
    np.testing.assert_allclose(rho[0], gauss[0])  # below the grid: the Gaussian
    np.testing.assert_allclose(rho[3], gauss[3])  # above the cap: the Gaussian
    j = int(np.searchsorted(table.deltas, 0.05))
    np.testing.assert_allclose(rho[1], table.bounds[j])
    # a single Δ's bound agrees with the table at a grid point (same method)
    one = bit_rdp((2.0, 8.0), float(table.deltas[j]), PenaltyAcceptance(2.0))
    assert np.all(table.bounds[j] <= one * 1.08) and np.all(one <= table.bounds[j] * 1.08)


def test_rdp_budget_filter_admits_while_the_sum_fits_and_round_trips() -> None:
    budget = RDPBudget(5.0, 1e-5)
    assert budget.alpha == budget_order(5.0, 1e-5)
    alpha = budget.alpha
    room = 5.0 - rdp_eps(1e-300, alpha, 1e-5)  # the RDP level B that converts to eps_max, minus the floor
    ev = RenyiEvent(1.0, (alpha,), (room / 10.0,), label="bit")  # rho below the Gaussian alpha/2
    led = PrivacyLedger(budget)
    assert led.spent() == 0.0
    assert led.capacity(ev, 100) == 10
    for _ in range(10):
        led = led.commit([ev])
    assert led.spent() == pytest.approx(5.0, rel=1e-9)
    with pytest.raises(BudgetExceededError):
        led.commit([ev])
    assert led.would_exceed([GaussianEvent(0.01)])
    back = PrivacyLedger.from_dict(led.to_dict())
    assert back == led and back.budget.alpha == alpha
    assert isinstance(back.events[0], RenyiEvent) and back.events[0].rho == (room / 10.0,)
    # an order the event does not carry: its Gaussian αμ²/2; pure ε: min(αε²/2, ε); (ε, δ > 0): refused
    other = RDPBudget(5.0, 1e-5, 4.0)
    assert other.rho([ev]) == pytest.approx(4.0 / 2)
    assert other.rho([LaplaceEvent(0.5)]) == pytest.approx(min(4.0 * 0.25 / 2, 0.5))
    with pytest.raises(UnsupportedEventError):
        other.spend([EpsDeltaEvent(1.0, 1e-6)])


def test_renyi_event_is_charged_exactly_as_its_gaussian_by_gdp_and_eps_delta_budgets() -> None:
    ev = RenyiEvent(0.2, (2.0, 8.0), (0.02, 0.1), count=3, label="x")
    plain = GaussianEvent(0.2, count=3, label="x")
    assert event_from_dict(ev.to_dict()) == ev
    for budget in (GDPBudget(1.0), EpsDeltaBudget(3.0, 1e-5)):
        assert (
            PrivacyLedger(budget).check([ev]).spent_after == PrivacyLedger(budget).check([plain]).spent_after
        )
    with pytest.raises(ValueError):
        RenyiEvent(0.2, (2.0,), (0.1, 0.2))


def test_sign_charge_with_a_renyi_order_carries_the_bits_bound() -> None:
    from tests.mechanisms.privacy.test_privacy_per_decision import ARGS, MODEL, _batch

    rng = np.random.default_rng(3)
    req = _batch(rng, 16, 0.02)
    pen = Penalty(None, sd=0.9, max_sensitivity=0.6)
    req = dataclasses.replace(req, penalty=pen)
    plan = DecisionPlan(model_args=ARGS, penalty=pen)
    view = coalition_view("sign", 5, 2, 0)
    (plain,) = decision_events(plan, MODEL, "sign", view, req.n, "t", req, "add-remove")
    (ren,) = decision_events(plan, MODEL, "sign", view, req.n, "t", req, "add-remove", rdp_orders=(2.0,))
    assert type(plain) is GaussianEvent and isinstance(ren, RenyiEvent)
    assert ren.mu == plain.mu and ren.orders == (2.0,)
    assert 0 < ren.rho[0] <= 2.0 * plain.mu**2 / 2
    # the sum reveal (a coalition beyond the threshold sees S) keeps the Gaussian
    (beyond,) = decision_events(
        plan, MODEL, "sign", coalition_view("sign", 5, 2, 3), req.n, "t", req, "add-remove", rdp_orders=(2.0,)
    )
    assert type(beyond) is GaussianEvent
    assert math.isfinite(ren.rdp(2.0))


def test_a_partys_merge_of_per_decision_events_adds_the_renyi_rho() -> None:
    """The party store merges a session's per-decision Gaussian charges by μ²; Rényi charges must add ρ too
    (keeping the first batch's ρ would under-charge a Rényi filter), and never merge with a plain Gaussian."""
    from parties.charges import merge_events as _merge

    a = RenyiEvent(0.3, (2.0, 8.0), (0.05, 0.25), label="x per decision")
    b = RenyiEvent(0.4, (2.0, 8.0), (0.09, 0.4), label="x per decision")
    (m,) = _merge([a, b])
    assert isinstance(m, RenyiEvent) and m.mu == pytest.approx(0.5)
    assert m.rho == pytest.approx((0.14, 0.65))
    budget = RDPBudget(5.0, 1e-5, 2.0)
    assert budget.rho([m]) == pytest.approx(budget.rho([a, b]))
    assert len(_merge([a, GaussianEvent(0.3, label="x per decision")])) == 2
    assert len(_merge([a, RenyiEvent(0.3, (2.0,), (0.05,), label="x per decision")])) == 2


@pytest.mark.parametrize("q", [1, 3])
def test_table_ratio_bounds_the_ratio_of_two_views_at_every_delta(q: int) -> None:
    """The largest ratio of a coalition's bound to the one charged (q = 0), over every Δ up to the cap:
    never below the ratio at any Δ of a dense grid (and at the cells' ends), at least the Gaussians' ratio
    (s_0/s_q)², and within 1e-6 of the grid's largest (the sup is at a cell's end)."""
    from mechanisms.privacy import coalition_view
    from mechanisms.privacy.charge import accept_bit_table
    from mechanisms.privacy.renyi import table_ratio

    sd, cap, m = 2.0 / math.sqrt(7), 0.6, 7
    base = accept_bit_table(sd, coalition_view("sign", m, 3, 0), cap, (2.0, 2.5))
    to = accept_bit_table(sd, coalition_view("sign", m, 3, q), cap, (2.0, 2.5))
    got = table_ratio(to, base, cap)
    d = np.concatenate([np.linspace(1e-7, cap, 400_000), base.deltas, to.deltas])
    d = d[d <= cap]
    seen = (to.rho(d) / base.rho(d)).max(axis=0)
    assert (got >= seen).all() and (got <= seen * (1 + 1e-6)).all()
    assert (got >= (base.s / to.s) ** 2).all()
