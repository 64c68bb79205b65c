"""The accept bit under a Rényi filter (issue 23 item 4, docs/PRIVACY_UTILITY.md): the ε at δ = 1e-5 of one
sequence of fixed-sd penalty decisions charged by the GDP filter (μ_t = Δ_t/s, today's charge) and by the
Rényi filter at the budget's fixed order (``mechanisms.privacy.renyi``: the bit's rigorous ρ(α, Δ_t) from the
session's table), the table's build time and a batch's charge time.

The demo's scale (examples/demo.toml): total penalty sd 2 against the coordinator (s = 2, k = 1: the
residual noise is N(0, 4) + Exp(1)), cap 0.6, batches of 16 decisions (1,008 and 10,000 decisions),
Δ_t = 0.09·|Z| (rms 0.09, capped at 0.6).
For each length T the Rényi filter's order is the one a registry fixes from its budget before the run:
``budget_order(ε_GDP, δ)`` with ε_GDP the GDP filter's ε of the same sequence (the budget that just admits
it under GDP); the best order after the fact is printed beside it (not a valid filter choice).

Command (about 10 s on 2 cores)::

    python -m simulations.renyi_bit
"""

from __future__ import annotations

import math
import time

import numpy as np

from mechanisms.privacy import ORDERS, PenaltyAcceptance, bit_rdp_table, budget_order, rdp_eps
from mechanisms.privacy.conversions import gdp_eps
from mechanisms.privacy.residual import ResidualPenaltyAcceptance

S, CAP, RMS, BATCH, DELTA = 2.0, 0.6, 0.09, 16, 1e-5


def main() -> None:
    rng = np.random.default_rng(23)
    t0 = time.perf_counter()
    table = bit_rdp_table(PenaltyAcceptance(S), CAP, ORDERS)
    build = time.perf_counter() - t0
    print(f"table (k = 1, {len(ORDERS)} orders, {table.deltas.size} Delta points): {build:.2f} s")
    t0 = time.perf_counter()
    bit_rdp_table(PenaltyAcceptance(S), CAP, (2.0,))
    print(f"table (k = 1, one order): {time.perf_counter() - t0:.2f} s")
    k = 6 / 7  # one of 7 registries colluding with the coordinator's view
    t0 = time.perf_counter()
    bit_rdp_table(ResidualPenaltyAcceptance(S * math.sqrt(k), k), CAP, (2.0,))
    print(f"table (k = {k:.3g}, one order): {time.perf_counter() - t0:.2f} s")
    for total in (1_008, 10_000):
        deltas = np.minimum(RMS * np.abs(rng.normal(size=total)), CAP)
        batches = deltas.reshape(-1, BATCH)
        t0 = time.perf_counter()
        rho = np.sum([table.batch_rho(b) for b in batches], axis=0)
        per_batch = (time.perf_counter() - t0) / len(batches)
        mu = math.sqrt(float(np.sum((deltas / S) ** 2)))
        eps_gdp = gdp_eps(mu, DELTA)
        alpha = budget_order(eps_gdp, DELTA)
        i = ORDERS.index(alpha)
        eps_renyi = rdp_eps(float(rho[i]), alpha, DELTA)
        eps_gauss_rdp = rdp_eps(alpha * mu * mu / 2, alpha, DELTA)
        best = min(rdp_eps(float(r), a, DELTA) for r, a in zip(rho, ORDERS, strict=True))
        print(
            f"T = {total}: rms Delta {math.sqrt(float(np.mean(deltas**2))):.4f}, GDP mu {mu:.3f}, "
            f"eps GDP filter {eps_gdp:.3f}; Renyi filter at alpha = {alpha:g}: eps {eps_renyi:.3f} "
            f"(rho/gaussian {float(rho[i]) / (alpha * mu * mu / 2):.3f}; the Gaussian's own RDP there "
            f"{eps_gauss_rdp:.3f}); best order after the fact {best:.3f}; "
            f"batch charge {per_batch * 1e3:.3f} ms"
        )


if __name__ == "__main__":
    main()
