"""simulations.accountant_check: the accept bit at the cap by PLD, and the optimal conversion of one Rényi
point, against what bounds them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.privacy.renyi import rdp_eps
from simulations.accountant_check import _d_alpha, at_cap_eps, main, optimal_delta


def test_at_cap_pld_is_below_the_gaussian_at_the_cap() -> None:
    """The ex-Gaussian shift is a post-processing of the Gaussian one (Exp(1) added), so its composition is
    never above the Gaussian's; and not far below it at s = 2 (Exp(1) is small beside it)."""
    pld, gauss = at_cap_eps(300, 0.3, 2.0, 0.5, 1e-5)
    assert pld <= gauss
    assert pld >= 0.8 * gauss


@pytest.mark.parametrize(("alpha", "eps", "delta"), [(4.0, 7.0, 1e-5), (8.0, 3.0, 1e-5), (2.5, 16.5, 1e-6)])
def test_optimal_conversion_is_never_above_the_filter_s_and_is_reached(
    alpha: float, eps: float, delta: float
) -> None:
    """At the filter's level ρ (rdp_eps(ρ) = ε), the optimal δ at ε is at most δ (rdp_eps is a valid
    conversion) and, measured, within 0.1 % of it; a brute force over a grid of Bernoulli pairs with
    D_α ≤ ρ never exceeds it."""
    rho = eps - math.log((alpha - 1) / alpha) + (math.log(delta) + math.log(alpha)) / (alpha - 1)
    assert rdp_eps(rho, alpha, delta) == pytest.approx(eps)
    got = optimal_delta(eps, alpha, rho)
    assert got <= delta * (1 + 1e-9)
    assert got >= 0.999 * delta
    q = np.exp(np.linspace(-40, -1e-6, 300))
    best = 0.0
    for qi in q:
        for p in np.linspace(qi, 1.0, 200)[1:]:
            if p < 1.0 and _d_alpha(float(p), float(qi), alpha) <= rho:
                best = max(best, float(p) - math.exp(eps) * float(qi))
    assert best <= got * (1 + 1e-9)


def test_command_prints_both_routes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--decisions", "100", "--cap", "0.3", "--sd", "2", "--warm-mu", "0.5", "--eps", "7"]) == 0
    out = capsys.readouterr().out
    assert "100 accept bits at the cap 0.3" in out and "optimal conversion reaches delta" in out
