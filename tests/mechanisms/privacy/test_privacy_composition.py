"""Composition: T Gaussian steps equal G_{μ√T}; PLD routes vs closed forms; profile conservativeness."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.privacy import (
    EpsDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    LaplaceTradeOff,
    PrivacyProfile,
    ProfileEvent,
    compose_events,
    compose_gdp,
    composed_delta,
    composed_eps,
    gdp_delta,
    gdp_eps,
)


@pytest.mark.parametrize(("mu", "steps"), [(0.1, 100), (0.3, 25), (1.0, 4)])
def test_pld_composition_of_gaussian_steps_equals_closed_form(mu: float, steps: int) -> None:
    total = mu * math.sqrt(steps)
    events = [GaussianEvent(mu, count=steps)]
    closed = compose_events(events)
    assert closed.method == "gdp closed form" and closed.mu == pytest.approx(total)
    pld = compose_events(events, discretization=1e-3, method="pld")
    for delta in [1e-3, 1e-6, 1e-9]:
        exact = gdp_eps(total, delta)
        got = pld.eps_at(delta)
        assert exact - 1e-9 <= got <= exact * 1.01 + 1e-3  # pessimistic and close
    for eps in [0.5, 2.0]:
        exact_d = gdp_delta(total, eps)
        got_d = pld.delta_at(eps)
        assert exact_d - 1e-12 <= got_d <= exact_d * 1.05 + 1e-9


def test_profile_route_composes_like_gdp() -> None:
    # Independent of dp_accounting's Gaussian: tabulated exact profile -> connect-the-dots PLD.
    mu, steps = 0.2, 50
    prof = PrivacyProfile.from_gdp(mu)
    comp = compose_events([ProfileEvent(prof, count=steps)])
    for delta in [1e-4, 1e-8]:
        exact = gdp_eps(mu * math.sqrt(steps), delta)
        assert exact - 1e-9 <= comp.eps_at(delta) <= exact * 1.02 + 2e-3


def test_heterogeneous_gaussian_steps_closed_form() -> None:
    mus = [0.1, 0.2, 0.05, 0.3]
    events = [GaussianEvent(m) for m in mus]
    assert (
        compose_events(events).mu
        == pytest.approx(compose_gdp(mus))
        == pytest.approx(math.sqrt(sum(m * m for m in mus)))
    )
    assert composed_eps(events, 1e-5) == pytest.approx(gdp_eps(compose_gdp(mus), 1e-5))
    pld_eps = compose_events(events, method="pld").eps_at(1e-5)
    assert pld_eps == pytest.approx(gdp_eps(compose_gdp(mus), 1e-5), rel=1e-2)


def test_single_laplace_event_matches_closed_form() -> None:
    eps = 0.8
    grid = [0.0, 0.2, 0.5, 0.79]
    exact = LaplaceTradeOff(eps).delta_at(np.array(grid))
    for e, d in zip(grid, exact, strict=True):
        got = composed_delta([LaplaceEvent(eps)], e, discretization=1e-4)
        assert d - 1e-12 <= got <= d + 2e-3


def test_pure_eps_events_compose_below_basic_composition() -> None:
    # k-fold pure ε-DP composes to at most kε (basic composition); PLD must respect that at δ = 0+.
    events = [EpsDeltaEvent(0.1, 0.0, count=20)]
    assert composed_eps(events, 1e-12) <= 2.0 + 1e-9
    assert composed_eps(events, 1e-6) < 2.0  # and is better at moderate δ (advanced composition)
    assert compose_events([]).eps_at(1e-6) == 0.0


def test_method_validation() -> None:
    with pytest.raises(ValueError):
        compose_events([LaplaceEvent(1.0)], method="gdp")
    with pytest.raises(ValueError):
        compose_events([], method="fft")


def test_profile_interpolation_is_conservative() -> None:
    mu = 0.9
    prof = PrivacyProfile.from_gdp(mu, step=0.05)
    off = np.linspace(0.0, prof.eps_max - 0.01, 997)
    assert np.all(prof.delta_at(off) >= gdp_delta(mu, off) - 1e-15)
    for delta in [0.1, 1e-3, 1e-6]:
        e = prof.eps_at(delta)
        assert gdp_delta(mu, e) <= delta
        assert e <= gdp_eps(mu, delta) + 0.05
    assert prof.eps_at(0.0) == math.inf or prof.delta_floor == 0.0


def test_profile_pld_dominates_profile() -> None:
    prof = PrivacyProfile.from_gdp(0.7, step=0.02)
    pld = prof.to_pld(1e-3)
    grid = np.linspace(0, 4, 81)
    assert np.all(np.asarray(pld.get_delta_for_epsilon(grid)) >= prof.delta_at(grid) - 1e-12)
    np.testing.assert_allclose(np.asarray(pld.get_delta_for_epsilon(grid)), gdp_delta(0.7, grid), atol=2e-3)


def test_profile_validation() -> None:
    with pytest.raises(ValueError, match="non-increasing"):
        PrivacyProfile((0.0, 1.0), (0.1, 0.5))
    with pytest.raises(ValueError, match="start at 0"):
        PrivacyProfile((0.5, 1.0), (0.1, 0.05))
    with pytest.raises(ValueError):
        PrivacyProfile((0.0, 1.0), (0.1, 0.05), method="guess")
    p = PrivacyProfile((0.0, 1.0), (0.2, 0.05), "x", "numerical bound", None)
    assert PrivacyProfile.from_dict(p.to_dict()) == p


@pytest.mark.slow
def test_vectorised_deltas_equal_dp_accounting() -> None:
    """pld_deltas (the fast path of reports and plots) equals dp_accounting's own get_delta_for_epsilon."""
    from mechanisms.privacy import LaplaceEvent, ProfileEvent, sign_step_profile
    from mechanisms.privacy.composition import pld_deltas
    from mechanisms.privacy.threat import ThreatModel

    grid = np.linspace(0.0, 40.0, 161)
    for events in (
        [LaplaceEvent(0.3, count=50), EpsDeltaEvent(0.2, 1e-6, count=3)],
        [ProfileEvent(sign_step_profile(0.5, ThreatModel(5, 1), 0.5).profile, count=400)],
    ):
        comp = compose_events(events)
        assert comp.pld is not None
        want = np.asarray(comp.pld.get_delta_for_epsilon(list(grid)))
        np.testing.assert_allclose(pld_deltas(comp.pld, grid), want, rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(comp.delta_at_many(grid), want, rtol=1e-9, atol=1e-15)


# --- ε at δ of a PLD, vectorised (composition.pld_eps) against dp_accounting's own loop ---------------------


def _pld_cases() -> list[object]:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    disc = {"value_discretization_interval": 1e-3}
    return [
        pld_lib.from_gaussian_mechanism(1.0, **disc),
        pld_lib.from_laplace_mechanism(0.5, **disc).self_compose(30),
        pld_lib.from_gaussian_mechanism(3.0, **disc).compose(pld_lib.from_laplace_mechanism(2.0, **disc)),
        pld_lib.from_randomized_response(0.1, 2, **disc).self_compose(50),  # mass at large losses
        pld_lib.from_gaussian_mechanism(0.8, sampling_prob=0.3, **disc),  # not symmetric: both directions
    ]


@pytest.mark.parametrize("delta", [0.5, 1e-2, 1e-5, 1e-9])
def test_pld_eps_equals_dp_accounting(delta: float) -> None:
    from mechanisms.privacy.composition import pld_eps

    for pld in _pld_cases():
        ours, theirs = pld_eps(pld, delta), float(pld.get_epsilon_for_delta(delta))  # type: ignore[attr-defined]
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-9), (pld, delta)


def test_pld_eps_past_the_double_range_is_exact_where_dp_accounting_rounds_up() -> None:
    """Losses past exp's range (a long composition of large steps): dp_accounting's L = Σ p e^{−loss}
    underflows to 0 and it answers with the loss itself; ours keeps L in logs. Ours is never above theirs
    and its δ, summed independently with mpmath (50 digits) over the PMF's bins, is at most δ."""
    import mpmath
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from mechanisms.privacy.composition import pld_eps

    pld = pld_lib.from_laplace_mechanism(1 / 50, value_discretization_interval=1e-2).self_compose(20)
    delta = 1e-5
    ours, theirs = pld_eps(pld, delta), float(pld.get_epsilon_for_delta(delta))
    assert ours <= theirs + 1e-9
    d = pld._pmf_remove.to_dense_pmf()  # type: ignore[attr-defined]
    mpmath.mp.dps = 50
    eps = mpmath.mpf(ours)
    total = mpmath.mpf(d._infinity_mass)
    for i, p in enumerate(d._probs):
        loss = mpmath.mpf((i + d._lower_loss) * d._discretization)
        if p > 0 and loss > eps:
            total += mpmath.mpf(float(p)) * (1 - mpmath.exp(eps - loss))
    assert float(total) <= delta * (1 + 1e-9)
