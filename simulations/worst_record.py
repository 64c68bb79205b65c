"""The worst record over a run against the per-decision charge (issue 35 item 2): an independence sampler
around a logistic posterior, its decisions charged both ways, and the brute force both are checked against.

``independence_run`` simulates the steps (θ_t, θ*_t) a registry is asked about: a Bayesian logistic
regression (intercept + 2 covariates, box |x_k| <= 3 and a covariate ellipsoid), 1,500 records, the
proposal N(θ̂, 1.2² Â⁻¹) of its Laplace approximation, an MH chain on the exact posterior, proposals whose
c(θ, θ*) passes the cap (the 99.9 % quantile of c under the proposal) rejected publicly and not asked.
``record_losses`` is the brute force: |Δℓ_t(x)| with the real log-likelihood for every record of a dense set
of allowed records (both outcomes; pairs of them for replace-one). ``main`` prints, for both neighbour
relations, the per-decision charge Σ_t ρ(Δ_t), the worst-record charge (``mechanisms.privacy.worst_record``)
and the brute-force truth, in the GDP reading (μ²) and the Rényi one (ρ at α = 8, the session's table)::

    python -m simulations.worst_record --steps 2000
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechanisms.models import load_model
from mechanisms.models.base import F64, Model
from mechanisms.planning import StandIn
from mechanisms.privacy import PenaltyAcceptance, bit_rdp_table
from mechanisms.privacy.worst_record import WorstRecordCharge, linear_structure
from mechanisms.samplers.requests import record_sensitivity, step_sensitivity

ARGS = {"p": 2, "x_bound": 3.0, "x_center": [0.3, -0.2], "x_cov": [[1.0, 0.4], [0.4, 1.3]], "x_radius": 2.8}
S_RES = 0.8  # the residual noise sd of the decisions (the test's and the figure's)


@dataclass(frozen=True)
class Run:
    model: Model
    theta: F64  # (T, d): the states of the decisions asked
    theta_star: F64  # (T, d): their proposals
    cap: float


def _laplace(model: Model, data: dict[str, F64]) -> tuple[F64, F64]:
    x = model.design(data)  # type: ignore[attr-defined]
    y = data["y"]
    beta = np.zeros(model.d)
    prec0 = np.eye(model.d) / model.prior_sd**2  # type: ignore[attr-defined]
    for _ in range(50):
        pr = 1.0 / (1.0 + np.exp(-x @ beta))
        grad = x.T @ (y - pr) - prec0 @ beta
        hess = (x * (pr * (1 - pr))[:, None]).T @ x + prec0
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return beta, np.linalg.inv(hess)


def independence_steps(
    model: Model, data: dict[str, F64], steps: int, rng: np.random.Generator, inflate: float = 1.2,
    cap: float | None = None,
) -> Run:  # fmt: skip
    """The decisions (θ_t, θ*_t) of an independence sampler's run on ``data`` (module docstring); ``cap``
    None: twice the 99.9 % quantile of c(θ̂, θ*) under the proposal."""
    mean, cov = _laplace(model, data)
    chol = np.linalg.cholesky(cov) * inflate
    star = mean + rng.normal(size=(steps + 2000, model.d)) @ chol.T
    if cap is None:
        c = record_sensitivity(model, np.repeat(mean[None, :], len(star), axis=0), star)
        cap = float(np.quantile(c, 0.999)) * 2.0  # c(θ, θ*) between two proposals: up to twice that from θ̂

    def log_target(th: F64) -> float:
        return float(model.log_likelihood(data, th[None, :])[0] + model.log_prior(th[None, :])[0])

    def log_q(th: F64) -> float:
        w = np.linalg.solve(chol, th - mean)
        return -0.5 * float(w @ w)

    cur = mean.copy()
    lp = log_target(cur)
    thetas, stars = [], []
    for prop in star[:steps]:
        if record_sensitivity(model, cur[None, :], prop[None, :])[0] > cap:
            continue  # rejected publicly, not asked
        thetas.append(cur.copy())
        stars.append(prop)
        lp_new = log_target(prop)
        if math.log(rng.random()) < lp_new - lp + log_q(cur) - log_q(prop):
            cur, lp = prop, lp_new
    return Run(model, np.asarray(thetas), np.asarray(stars), cap)


def independence_run(seed: int, steps: int, n: int = 1500, inflate: float = 1.2) -> Run:
    """The decisions of an independence sampler's run on ``n`` synthetic records of the module's model."""
    model = load_model("bayes-logistic", ARGS)
    rng = np.random.default_rng(seed)
    made = model.synthetic_data(rng, (n,))
    assert made is not None
    return independence_steps(model, model.check_data(made[0]), steps, rng, inflate)


def allowed_records(model: Model, k: int) -> F64:
    """Predictor rows z = (1, x) of a dense set of the records ``model`` allows (p = 2): a k × k grid of the
    box and its corners moved into the ellipsoid as the model clips them, and 4k points of the ellipsoid's
    boundary that lie in the box."""
    bound = model.x_bound  # type: ignore[attr-defined]
    axis = np.linspace(-bound, bound, k)
    x = np.array(np.meshgrid(axis, axis)).reshape(2, -1).T
    ell = model.ellipsoid  # type: ignore[attr-defined]
    if ell is not None:
        x, _ = ell.clip(x)
        ang = np.linspace(0.0, 2 * math.pi, 4 * k, endpoint=False)
        circle = np.column_stack([np.cos(ang), np.sin(ang)])
        ring = ell.mu + ell.radius * circle @ np.linalg.cholesky(ell.matrix).T
        x = np.vstack([x, ring[np.all(np.abs(ring) <= bound, axis=1)]])
    x = np.unique(x, axis=0)
    return np.hstack([np.ones((len(x), 1)), x])


def record_losses(model: Model, theta: F64, theta_star: F64, neighbours: str, k: int) -> F64:
    """|Δℓ_t| per allowed record (add-remove) or pair of allowed records (replace-one), rows, and step,
    columns: the real log-likelihood's change at each decision."""
    z = allowed_records(model, k)
    cols = {"x1": z[:, 1], "x2": z[:, 2]}
    dl = []
    for y in (0.0, 1.0):
        rec = cols | {"y": np.full(len(z), y)}
        dl.append(model.record_log_likelihood(rec, theta_star) - model.record_log_likelihood(rec, theta))
    d = np.hstack(dl).T  # (records, steps)
    if neighbours == "add-remove":
        return np.asarray(np.abs(d), dtype=np.float64)
    i, j = np.triu_indices(len(d), 1)
    return np.asarray(np.abs(d[i] - d[j]), dtype=np.float64)


def charges(run: Run, neighbours: str, alpha: float, k: int, batches: int = 10) -> dict[str, float]:
    """Per-decision, worst-record and brute-force, GDP (μ²) and Rényi (ρ at ``alpha``)."""
    table = bit_rdp_table(PenaltyAcceptance(S_RES), run.cap, (alpha,))
    st = linear_structure(run.model)
    assert st is not None
    deltas = step_sensitivity(run.model, run.theta, run.theta_star, neighbours)
    losses = record_losses(run.model, run.theta, run.theta_star, neighbours, k)
    out: dict[str, float] = {"decisions": float(len(run.theta))}
    for tab in (None, table):
        wr = WorstRecordCharge.of(st, neighbours, S_RES, tab)
        state = wr.empty()
        total = 0.0
        for part in np.array_split(np.arange(len(run.theta)), batches):
            events, state = wr.increment(state, run.theta[part], run.theta_star[part], deltas[part], "figure")
            total += events[0].mu ** 2 if tab is None else events[0].rdp(alpha)  # type: ignore[attr-defined]
        out[f"{'gdp' if tab is None else 'rdp'}_worst_record_bound"] = float(wr.worst(state)[-1])
        if tab is None:
            out |= {
                "gdp_per_decision": float(np.sum(deltas**2)) / S_RES**2,
                "gdp_worst_record": total,
                "gdp_brute_force": float(np.max(np.sum(losses**2, axis=1))) / S_RES**2,
            }
        else:
            rho = table.rho(losses.ravel()).reshape(losses.shape).sum(axis=1)
            out |= {
                "rdp_per_decision": float(table.batch_rho(deltas)[0]),
                "rdp_worst_record": total,
                "rdp_brute_force": float(np.max(rho)),
            }
    return out


def stand_in_steps(
    stand_in: StandIn,
    cap: float,
    rng: np.random.Generator,
    *,
    chains: int,
    steps: int,
    offset_cov: F64 | None = None,
) -> tuple[F64, F64]:
    """The decisions (θ_t, θ*_t) a registry is asked about in ``mechanisms.planning.proposal_statistics``'
    run: the independence sampler N(mean, inflate² cov) on the Gaussian stand-in (centred at a draw of the DP
    mean's error, N(0, ``offset_cov``)), the penalty's decision law, proposals above the cap or out of bounds
    rejected publicly; ``chains`` chains of ``steps`` proposals."""
    model, mean, cov = stand_in.model, stand_in.mean, stand_in.cov
    inflate, sd_total = stand_in.inflate, stand_in.sd_total
    d = mean.shape[0]
    chol = np.linalg.cholesky(cov)
    prec = np.linalg.inv(cov)
    centre = mean if offset_cov is None else mean + np.linalg.cholesky(offset_cov) @ rng.standard_normal(d)

    def quad(x: F64, at: F64) -> F64:
        z = x - at
        return np.asarray(np.einsum("ij,jk,ik->i", z, prec, z), dtype=np.float64)

    theta = centre + rng.standard_normal((chains, d)) @ chol.T
    thetas, stars = [], []
    for _ in range(steps):
        star = mean + inflate * rng.standard_normal((chains, d)) @ chol.T
        ok = model.in_bounds(star) & (record_sensitivity(model, theta, star) <= cap)
        a = -0.5 * (quad(star, centre) - quad(theta, centre))
        a += 0.5 * (quad(star, mean) - quad(theta, mean)) / inflate**2
        noise = rng.normal(-0.5 * sd_total**2, sd_total, chains) + rng.exponential(1.0, chains)
        thetas.append(theta[ok])
        stars.append(star[ok])
        move = ok & (a + noise >= 0.0)
        theta = np.where(move[:, None], star, theta)
    return np.vstack(thetas), np.vstack(stars)


def run_ratios(
    model: Model, theta: F64, theta_star: F64, neighbours: str, s: float, table: Any = None
) -> tuple[float, float | None]:
    """(worst record / per decision) of a whole run's charge in the GDP reading and, with ``table``, the
    Rényi one: what the run's charges telescope to (``WorstRecordCharge.charged``) over its per-decision
    charge."""
    st = linear_structure(model)
    assert st is not None
    wr = WorstRecordCharge.of(st, neighbours, s, table)
    deltas = step_sensitivity(model, theta, theta_star, neighbours)
    state = wr.empty()
    _, state = wr.increment(state, theta, theta_star, deltas, "ratio")
    charged = wr.charged(state)
    ratio = charged / state.per_decision
    return float(ratio[0]), (float(ratio[1]) if table is not None else None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="proposals of the run (add-remove)")
    ap.add_argument("--pair-steps", type=int, default=400, help="proposals of the replace-one run (pairs)")
    ap.add_argument("--alpha", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args(argv)
    for neighbours, steps, k in (("add-remove", args.steps, 61), ("replace-one", args.pair_steps, 9)):
        run = independence_run(args.seed, steps)
        c = charges(run, neighbours, args.alpha, k)
        print(f"{neighbours}: {int(c['decisions'])} decisions, cap {run.cap:.4g}, s = {S_RES:g}")
        for what in ("gdp", "rdp"):
            pd, wr, bf = c[f"{what}_per_decision"], c[f"{what}_worst_record"], c[f"{what}_brute_force"]
            unit = "mu^2" if what == "gdp" else f"rho(alpha={args.alpha:g})"
            print(
                f"  {unit:>16}: per decision {pd:.5g}, worst record {wr:.5g} (gain {pd / wr:.2f}x), "
                f"brute force {bf:.5g} (charge / truth {wr / bf:.3f}); the worst record's own bound "
                f"{c[f'{what}_worst_record_bound']:.5g}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
