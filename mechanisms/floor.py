"""The one-posterior-sample floor: the privacy that k effective exact posterior draws cost whatever sampler
made them (DESIGN.md §1 "The floor"; issue 35), computed from public quantities only.

**Derivation.** Let the posterior of the records D be near-Gaussian, N(θ̂_D, Σ), Σ the inverse of the
negative log posterior's Hessian at its mode. Adding one record x moves the mode by one Newton step,
θ̂_{D∪{x}} = θ̂_D + Σ g(x) + O(1/n), g(x) = ∇_θ log p(x | θ̂) the record's score, and changes Σ by a relative
O(1/n). Releasing k independent draws of N(θ̂, Σ) releases their mean N(θ̂, Σ/k) (a sufficient statistic
for the location), and telling D from D ∪ {x} from it is the Gaussian location test with

    μ(x) = ‖(Σ/k)^{-1/2} Σ g(x)‖ = √k · √(g(x)ᵀ Σ g(x)).

Any release from which the posterior mean is estimated with variance Σ/k (the meaning of "k effective
draws") contains that test: a mechanism that is μ'-GDP with μ' < μ(x) would give a test more powerful
than its own trade-off curve allows (the most powerful test of a Gaussian location shift is the one on the
estimate; Dong, Roth & Su 2022, Neyman–Pearson). So, over the records the public bounds allow,

    μ_floor(k) = √k · c,   c = sup_x √(g(x)ᵀ Σ g(x))            (add-remove),
    c = sup_{x, x'} √((g(x) − g(x'))ᵀ Σ (g(x) − g(x')))            (replace-one, at most twice the former),

and ε_floor(δ) is the exact GDP conversion of μ_floor. With Σ = (n F)^{-1}, c = sup_x ‖F^{-1/2} g(x)‖ / √n:
the floor falls like √(k/n). The change of Σ adds a term of relative size O(√(d/n)) to μ, ignored here
(the floor is a reference, not a charge). What the floor does not count: the warm start's releases and the
sampler's own overheads (warm-up, correlation, the decisions' extra leakage); the ratio of a plan's ε to
ε_floor is what a sampler and its accountant lose against the best any exact method could do.

**Computed as a lower bound of the sup.** c is the maximum over a finite set of records inside the public
region: the corners of the schema's box (every declared value of a discrete column), random points of the
box, and random points on its faces, each moved into the model's public region by the model's own
``clip_records`` (e.g. the covariate ellipsoid). A maximum over allowed records can only be below the sup,
so the floor computed here is never above the true one, and a ratio below 1 means a charge below the
floor: a defect of the charge, never an artefact of this search. Scores by central differences of
``record_log_likelihood`` (as the warm start's score releases).

Pure: the generator comes in as an argument (public).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mechanisms.models.base import F64, Model
from mechanisms.privacy.conversions import gdp_eps

__all__ = ["Floor", "candidate_records", "floor_of"]

MAX_CORNERS = 4096  # corners beyond this are sampled
RANDOM_POINTS = 4000  # random points of the box, and as many on its faces


def candidate_records(model: Model, rng: np.random.Generator) -> dict[str, F64] | None:
    """Records inside the model's public region (see the module docstring), or None when a column of the
    schema has no finite bounds (the region is then unbounded: no floor)."""
    schema = model.schema
    if not schema:
        return None
    axes: list[list[float]] = []
    for col in schema:
        if col.values is not None:
            axes.append(sorted(float(v) for v in col.values))
        elif math.isfinite(col.lower) and math.isfinite(col.upper):
            axes.append([float(col.lower), float(col.upper)])
        else:
            return None
    count = math.prod(len(a) for a in axes)
    if count <= MAX_CORNERS:
        corners = np.array(list(itertools.product(*axes)), dtype=np.float64)
    else:
        corners = np.column_stack([rng.choice(np.asarray(a), MAX_CORNERS) for a in axes])
    inner = np.empty((2 * RANDOM_POINTS, len(schema)))
    for j, (col, a) in enumerate(zip(schema, axes, strict=True)):
        if col.values is not None:
            inner[:, j] = rng.choice(np.asarray(a), 2 * RANDOM_POINTS)
        else:
            u = rng.uniform(col.lower, col.upper, 2 * RANDOM_POINTS)
            inner[:, j] = np.round(u) if col.integer else u
    # the second half on the box's faces: each point has about half its continuous columns at a bound
    face = rng.random((RANDOM_POINTS, len(schema))) < 0.5
    ends = np.where(rng.random((RANDOM_POINTS, len(schema))) < 0.5, 0, 1)
    for j, a in enumerate(axes):
        if schema[j].values is None:
            tail = inner[RANDOM_POINTS:, j]
            inner[RANDOM_POINTS:, j] = np.where(face[:, j], np.asarray(a)[ends[:, j]], tail)
    grid = np.vstack([corners, inner])
    records = {col.name: np.ascontiguousarray(grid[:, j]) for j, col in enumerate(schema)}
    clipped, _ = model.clip_records(records)
    return {k: np.asarray(v, dtype=np.float64) for k, v in clipped.items()}


def _scores(model: Model, records: dict[str, F64], theta: F64) -> F64:
    from mechanisms.warmstart import record_scores

    return record_scores(model, records, theta)


@dataclass(frozen=True)
class Floor:
    """The floor of a model at a (DP or exact) Laplace approximation: ``c`` the GDP μ of one effective
    draw for the relation ``neighbours``, over ``candidates`` allowed records."""

    c: float
    neighbours: str
    candidates: int

    def mu(self, k: float) -> float:
        """μ_floor of ``k`` effective draws."""
        return math.sqrt(max(k, 0.0)) * self.c

    def eps(self, k: float, delta: float) -> float:
        """ε_floor at δ of ``k`` effective draws (the exact GDP conversion)."""
        return gdp_eps(self.mu(k), delta)

    def line(self, k: float, delta: float, plan_eps: float | None) -> str:
        """``floor: eps_floor = X at delta = D for K effective draws (this plan: Y, ratio R)``."""
        x = self.eps(k, delta)
        head = f"floor: eps_floor = {x:.3g} at delta = {delta:g} for {k:.0f} effective draws"
        if plan_eps is None:
            return head
        ratio = plan_eps / x if x > 0 else math.inf
        return head + f" (this plan: {plan_eps:.3g}, ratio {ratio:.3g})"


def plan_floor_line(
    floor: Floor | None, ess: float, delta: float, spend: Callable[[], float]
) -> str:
    """A plan's floor line for ``ess`` effective draws (``spend()``: what the plan spends for them), or why
    there is none: the one wording of every kind of plan (``mechanisms.planning``, ``.planning_blocked``)."""
    if floor is None:
        return "floor: not computed (the model's public region is unbounded)"
    if ess < 1:
        return "floor: this plan buys no effective draw (nothing to compare)"
    return floor.line(ess, delta, spend())


def floor_of(
    model: Model, mean: F64, cov: F64, neighbours: str, rng: np.random.Generator | None = None
) -> Floor | None:
    """The floor at the Laplace approximation N(``mean``, ``cov``) of the posterior (public: the DP
    approximation, or a pilot's), or None when the model's public region is unbounded."""
    rng = np.random.default_rng(0) if rng is None else rng
    records = candidate_records(model, rng)
    if records is None:
        return None
    g = _scores(model, records, np.asarray(mean, dtype=np.float64))
    ok = np.isfinite(g).all(axis=1)
    g = g[ok]
    if g.shape[0] == 0:
        return None
    sigma = np.asarray(cov, dtype=np.float64)
    if neighbours == "add-remove":
        c = float(np.sqrt(np.max(np.einsum("ij,jk,ik->i", g, sigma, g))))
    else:
        c = _diameter(g, sigma)
    return Floor(c, neighbours, int(g.shape[0]))


def _diameter(g: F64, sigma: F64, rounds: int = 4) -> float:
    """A lower bound of the largest Σ-distance between two rows of ``g`` (farthest-point iterations from
    the row farthest from the mean: exact for the two-point sets that extreme scores form, and a maximum
    over actual pairs in any case)."""
    chol = np.linalg.cholesky(sigma)
    z = g @ chol  # ‖z_i − z_j‖ = Σ-distance
    i = int(np.argmax(np.linalg.norm(z - z.mean(axis=0), axis=1)))
    best = 0.0
    for _ in range(rounds):
        dist = np.linalg.norm(z - z[i], axis=1)
        j = int(np.argmax(dist))
        best = max(best, float(dist[j]))
        i = j
    return best
