"""The accept bit by its privacy-loss distribution against the Rényi filter (issue 35 item 5): a measurement.

Two routes a registry could take instead of the Rényi filter, both computed here from public numbers:

- **PLD at the cap**: every decision charged as the accept bit at the session's public cap Δ̄ (a pair fixed
  in advance, so PLD composition stays valid under adaptive steps, and a run stopped early is a
  post-processing of the full-length one). The bit 1[ℓ + Z ≥ 0], Z = N(0, s²) + Exp(1) (the coordinator's
  view), over every level ℓ of the other records' log-ratio is the family of threshold tests of the shift
  pair (Z, Z + Δ̄); Z is log-concave, so those tests are the Neyman-Pearson tests of the pair and the
  family's tightest dominating pair is the shift pair itself (``additive.ExGaussianNoise``, both
  directions). :func:`at_cap_eps` composes T of them with the warm start's Gaussian by PLD
  (``composition.composed_eps``) and gives the Gaussian at the cap beside it (an upper bound: Z adds Exp(1)
  to the Gaussian).
- the accept bit's Rényi bound over the Gaussian's at a few Δ ≤ the cap and orders (what the PLD route
  cannot see);
- **the optimal conversion of the filter's one Rényi point**: the filter guarantees (α, B)-RDP at its one
  order; the smallest δ at ε any pair with D_α ≤ B can have is attained by a pair of Bernoullis (the
  Neyman-Pearson set of any pair is a binary post-processing with the same hockey-stick divergence and no
  larger D_α), :func:`optimal_delta`, against ``renyi.rdp_eps`` (Balle et al. 2020).

Command (the demo's plan at ε = 7: 3,000 decisions, add-remove cap 0.3 = max_sensitivity / 2, s = 2,
warm start μ = 0.5)::

    python -m simulations.accountant_check --decisions 3000 --cap 0.3 --sd 2 --warm-mu 0.5 \
        --delta 1e-5,3.7e-6 --eps 7
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy.optimize import brentq, minimize_scalar

from mechanisms.privacy.additive import ExGaussianNoise, additive_noise_delta
from mechanisms.privacy.composition import composed_eps
from mechanisms.privacy.conversions import gdp_eps
from mechanisms.privacy.events import GaussianEvent, ProfileEvent
from mechanisms.privacy.profile import PrivacyProfile
from mechanisms.privacy.renyi import bit_rdp_table, budget_order, rdp_eps
from mechanisms.privacy.reveal_sign import PenaltyAcceptance


def at_cap_eps(decisions: int, cap: float, s: float, warm_mu: float, delta: float) -> tuple[float, float]:
    """(ε at ``delta`` of ``decisions`` accept bits at the cap composed by PLD with the warm start's
    μ-GDP release, ε of the Gaussian at the cap composed the same way)."""
    noise = ExGaussianNoise(s)
    prof = PrivacyProfile.from_delta_function(
        lambda e: additive_noise_delta(e, cap, noise), 12.0 * cap / s + 1.0, 0.001, description="bit at cap"
    )
    events = [ProfileEvent(prof, count=decisions, label="bit at cap"), GaussianEvent(warm_mu, count=1)]
    mu = math.sqrt(decisions * (cap / s) ** 2 + warm_mu**2)
    return composed_eps(events, delta), gdp_eps(mu, delta)


def _d_alpha(p: float, q: float, alpha: float) -> float:
    """D_α(Bern(p) ‖ Bern(q)) in log space."""
    a = alpha * math.log(p) + (1.0 - alpha) * math.log(q) if p > 0 else -math.inf
    b = alpha * math.log1p(-p) + (1.0 - alpha) * math.log1p(-q) if p < 1 else -math.inf
    top = max(a, b)
    return (top + math.log(math.exp(a - top) + math.exp(b - top))) / (alpha - 1.0)


def optimal_delta(eps: float, alpha: float, rho: float) -> float:
    """sup of p − e^ε q over Bernoulli pairs with D_α(Bern(p) ‖ Bern(q)) ≤ ρ: the smallest δ at ε that an
    (α, ρ)-RDP guarantee alone implies (for each q the largest admissible p, then a search over log q)."""

    def best_p(q: float) -> float:
        f = lambda p: _d_alpha(p, q, alpha) - rho  # noqa: E731
        if f(1.0 - 1e-15) <= 0.0:
            return 1.0
        return float(brentq(f, q, 1.0 - 1e-15, xtol=1e-300, rtol=1e-14))

    def gain(lq: float) -> float:
        q = math.exp(lq)
        return best_p(q) - math.exp(eps + lq)

    grid = [-60.0 + 60.0 * i / 600 for i in range(600)]
    top = max(gain(x) for x in grid)
    at = max(grid, key=gain)
    res = minimize_scalar(lambda x: -gain(x), bounds=(at - 0.2, min(at + 0.2, -1e-12)), method="bounded")
    return max(0.0, top, -float(res.fun))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decisions", type=int, required=True)
    ap.add_argument("--cap", type=float, required=True, help="the cap on a decision's sensitivity (its view)")
    ap.add_argument("--sd", type=float, required=True, help="the noise sd the observer does not know")
    ap.add_argument("--warm-mu", type=float, default=0.0)
    ap.add_argument("--delta", default="1e-5")
    ap.add_argument("--eps", type=float, help="a Renyi filter's epsilon: also its point's optimal conversion")
    ap.add_argument("--alpha", type=float, help="the filter's order (default: the one its budget fixes)")
    args = ap.parse_args(argv)
    orders = (2.0, 3.0, 4.0, 6.0, 8.0)
    table = bit_rdp_table(PenaltyAcceptance(args.sd), args.cap, orders)
    for d in (args.cap / 4, args.cap / 2, args.cap):
        ratio = table.rho(np.array([d]))[0] / (np.asarray(orders) * d**2 / (2.0 * args.sd**2))
        print(
            f"the accept bit's Renyi bound at Delta = {d:.3g} over the Gaussian's, orders "
            f"{', '.join(f'{a:g}' for a in orders)}: {', '.join(f'{x:.3f}' for x in ratio)}"
        )
    for delta in (float(x) for x in args.delta.split(",")):
        pld, gauss = at_cap_eps(args.decisions, args.cap, args.sd, args.warm_mu, delta)
        print(
            f"delta = {delta:.3g}: {args.decisions} accept bits at the cap {args.cap:g} (s = {args.sd:g}) "
            f"and the warm start (mu = {args.warm_mu:g}) by PLD: eps = {pld:.4g} (the Gaussian at the cap: "
            f"{gauss:.4g})"
        )
        if args.eps is not None:
            a = args.alpha if args.alpha is not None else budget_order(args.eps, delta)
            level = args.eps - math.log((a - 1.0) / a) + (math.log(delta) + math.log(a)) / (a - 1.0)
            assert math.isclose(rdp_eps(level, a, delta), args.eps, rel_tol=1e-12)
            print(
                f"  the Renyi filter's point (alpha = {a:g}, rho = {level:.4f}) converts to "
                f"eps = {args.eps:g} at delta = {delta:.3g}; its optimal conversion reaches delta = "
                f"{optimal_delta(args.eps, a, level):.5g} there"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
