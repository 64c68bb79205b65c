"""The worst record over a run (issue 35 item 2): a fixed-sd penalty run charged at sup_x Σ_t ρ(|Δℓ_t(x)|),
not at Σ_t sup_x ρ(|Δℓ_t(x)|).

Owns the pure side of the per-run charge: the quadratic majorant of the accept bit's Rényi table
(:func:`quadratic_rdp_bound`), the sup of a quadratic form over the records a model allows
(:class:`QuadraticRegion`: the box's corners, the covariate ellipsoid, their intersection), the models it
applies to (:func:`linear_structure`) and :class:`WorstRecordCharge`, which turns a run's Gram matrix before
a batch and the batch's steps into the events of the increment.

**Why.** The per-decision charge (``charge``) prices decision t at Δ_t = sup_x |Δℓ_t(x)|, the most one
record x moves the registry's log-ratio at the step (θ_t, θ*_t), and adds: Σ_t ρ(Δ_t). But the privacy of
one neighbouring pair D, D ∪ {x} is Σ_t ρ(|Δℓ_t(x)|) for *that* x (the decisions compose adaptively, each
a post-processing of ℓ_j + noise at a step chosen from the outputs before it), and an independence
sampler's steps point in different directions, so no single record is the worst at every step.

**Construction.** Let the per-record log-likelihood be L-Lipschitz in a linear predictor η = z(x)ᵀφ, with
φ(θ) the predictor's coefficients (logistic: z = (1, x), φ = θ, L = 1; a formula with the bernoulli family:
z = the design row and the registry's indicator, φ = (β, u), L = 1; log σ is 1-Lipschitz). Then with
v_t = φ(θ*_t) − φ(θ_t):

    |Δℓ_t(x)| ≤ L |z(x)ᵀ v_t|,        Σ_t Δℓ_t(x)² ≤ L² z(x)ᵀ G z(x),        G = Σ_t v_t v_tᵀ.

Replace-one neighbours (x replaced by x'): |Δℓ_t(x') − Δℓ_t(x)| ≤ L(|z(x')ᵀv_t| + |z(x)ᵀv_t|), and by
Minkowski Σ_t (|a_t| + |b_t|)² ≤ (√(z'ᵀGz') + √(zᵀGz))² ≤ 4 S, so the factor f is 4 L² (add-remove: L²),
with S = sup over the region of z(x)ᵀ G z(x). The GDP reading of a run is then μ² = f S / s² (s the
residual noise sd: each decision of a pair is the Gaussian mechanism at its own shift, and μ² composes
additively).

The Rényi reading needs a quadratic majorant of ρ. ρ_bit(d)/d² grows with d (towards the Gaussian's
g = α/(2s²)), so one κ for the whole [0, cap] would be the ratio at the cap and lose the bit's gain; but
every record's |Δℓ_t(x)| is at most the step's own Δ_t (the per-decision sensitivity, public), so a κ per
step is enough: :func:`quadratic_rdp_bound` certifies ρ_table(d) ≤ κ(D) d² + c for every d ≤ D ≤ cap (the
session's ``BitRdpTable`` charges the next grid Δ above, so on (Δ_{i−1}, Δ_i] it charges min(b_i, g d²) ≤
κ_i d², κ_i = min(g, b_i/Δ_{i−1}²); κ(D) = max of κ_i over the cells up to D's; the constant c pays for the
first cell (0, Δ_0 = cap/64], where the table is the Gaussian: c ≤ b_0(1 − κ_1/g), about a thousandth of a
decision's charge at cap/4). ρ_bit is non-decreasing in Δ, so with κ_t = κ(Δ_t) and the weighted Gram
matrix G_κ = Σ_t κ_t v_t v_tᵀ, for every pair (Minkowski again, with the weights)

    Σ_t ρ(Δ_t(x)) ≤ Σ_t (κ_t min(Δ_t, L(|a_t| + |b_t|))² + c) ≤ f S_κ + c T,    S_κ = sup zᵀ G_κ z.

A run's state is therefore a small stack of d × d matrices: G (the GDP reading) and G_κ per Rényi order.

**Filter.** S is a sup over the *public* region (the schema's box, the declared covariate ellipsoid), not
over the records present: it is a function of the public steps alone. Charging each batch the increment
f (S(G_after) − S(G_before)) (+ c n for ρ; floored at 0) makes the charges of a run telescope to at
least f S(G_final) + c T, an upper bound of every pair's Σ_t ρ_t(x); a registry admits a batch only while
"spent + increment ≤ budget". That is Feldman & Zrnic's (2021) individual filter applied to every
hypothetical record of the public region at once: for each fixed pair the per-step losses are predictable
and their sum never passes the budget, so the run is (α, B)-RDP (and μ-GDP for the GDP reading, Smith &
Thakurta 2022 / Koskela et al. 2023) under fully adaptive steps. Nothing is dropped (the chain stays exact)
and no refusal depends on the records present. κ(·), c, f and s must be the same over all the batches whose
increments are added (a state is kept per run *and* per :attr:`WorstRecordCharge.fingerprint`; a fresh
state under another fingerprint charges its own sup from zero, which only adds).

Each reading charges the smaller of the worst record's bound and the per-decision one (Σ_t Δ_t²/s²,
Σ_t ρ_table(Δ_t)) of the same decisions, both kept for the run: the minimum of two non-decreasing bounds
valid for every pair is one, and its increments telescope to it; so a run never costs more than it does
per decision (the grid's slack, κ(Δ_t)Δ_t² up to (1.03)² ρ_table(Δ_t), and c T could otherwise exceed it
when every step points the same way).

The per-batch Gaussian min (``RenyiEvent.rdp``'s min(ρ, αμ²/2)) is not applied to increments: a sum of
per-batch minima of two running bounds does not bound either sum. The event's μ is therefore raised to
√(2 max_α ρ_α/α) when the constant c would otherwise be clipped (μ only grows, so the GDP reading stays
valid).

**The sup.** Over the box, z(x)ᵀGz(x) is convex in each numeric column (z is affine in it), so its max is at
a corner (enumerated; exact). Over the ellipsoid {μ + R L u : ‖u‖ ≤ 1} it is the trust-region problem
max c₀ + 2bᵀu + uᵀHu; for any λ > λ_max(H) weak duality gives the certified bound
U(λ) = c₀ + λ + bᵀ(λI − H)⁻¹b (whatever λ is used: numerics cannot make it invalid), minimised at the root
of the secular equation ‖(λI − H)⁻¹b‖ = 1 (bracketed). Over box ∩ ellipsoid: the smaller of the two.
A relative padding of 1e-9 covers the floating point of the evaluation. Pure: no I/O, no randomness.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Model, as_batch

from ._numeric import FloatArray
from .events import GaussianEvent, PrivacyEvent, RenyiEvent
from .renyi import BitRdpTable

__all__ = [
    "LinearStructure",
    "QuadraticBound",
    "QuadraticRegion",
    "RunState",
    "WorstRecordCharge",
    "linear_structure",
    "quadratic_rdp_bound",
]

_PAD = 1e-9  # relative padding of every computed sup (floating point of sums of d² products)
MAX_BOX_CORNERS = 1 << 16  # a box of more corners is bounded through its enclosing ball instead


# -- ρ(d) ≤ κ(D) d² + c for d ≤ D ------------------------------------------------------------------------
@dataclass(frozen=True)
class QuadraticBound:
    """ρ(α, d) ≤ κ(D)[i] d² + ``const[i]`` at order ``orders[i]`` for every d in [0, D] and D in
    [0, ``reach``] (:meth:`kappa`; past ``reach`` κ is the Gaussian's α/(2s²) and c is not needed)."""

    orders: tuple[float, ...]
    gauss: tuple[float, ...]  # α/(2s²) per order
    const: tuple[float, ...]
    deltas: FloatArray = field(repr=False)  # the table's Δ grid
    prefix: FloatArray = field(repr=False)  # (cells, orders): max over cells 1..i of the cell's κ

    @property
    def reach(self) -> float:
        return float(self.deltas[-1])

    def kappa(self, delta: npt.ArrayLike) -> FloatArray:
        """κ(D) per value of D (rows) and order (columns)."""
        d = np.atleast_1d(np.asarray(delta, dtype=np.float64))
        idx = np.searchsorted(self.deltas, d * (1.0 - 1e-12), side="left")
        inside = idx < self.deltas.size
        out = np.tile(np.asarray(self.gauss, dtype=np.float64), (d.size, 1))
        out[inside] = self.prefix[idx[inside]]
        return np.asarray(out, dtype=np.float64)

    def majorant(self, d: npt.ArrayLike, delta: npt.ArrayLike) -> FloatArray:
        """κ(D) d² + c per pair (d, D) (rows) and order (columns)."""
        dd = np.atleast_1d(np.asarray(d, dtype=np.float64))
        return np.asarray(
            self.kappa(delta) * dd[:, None] ** 2 + np.asarray(self.const)[None, :], dtype=np.float64
        )


def quadratic_rdp_bound(table: BitRdpTable) -> QuadraticBound:
    """κ(D) and c with ``table.rho(d) ≤ κ(D) d² + c`` for every d ≤ D ≤ the table's last grid Δ (module
    docstring): on the cell (Δ_{i−1}, Δ_i] the table charges min(b_i, g d²) ≤ κ_i d², κ_i =
    min(g, b_i/Δ_{i−1}²) (i ≥ 1), and κ(D) is the largest κ_i over the cells 1 .. D's (at least cell 1). On
    the first cell (0, Δ_0] the table is min(b_0, g d²), whose excess over κ_1 d² (κ_1 ≤ every κ(D)) peaks at
    d = √(b_0/g) clipped to the cell: that excess is c."""
    al = np.asarray(table.orders, dtype=np.float64)
    g = al / (2.0 * table.s**2)
    deltas = np.asarray(table.deltas, dtype=np.float64)
    b = np.minimum(np.asarray(table.bounds, dtype=np.float64), g[None, :] * deltas[:, None] ** 2)
    cells = np.empty_like(b)
    if deltas.size > 1:
        cells[1:] = np.minimum(g[None, :], b[1:] / deltas[:-1, None] ** 2)
        cells[0] = cells[1]
    else:
        cells[0] = g
    prefix = np.maximum.accumulate(cells, axis=0)
    k1 = cells[0]
    peak = np.clip(np.sqrt(b[0] / g), 0.0, deltas[0])
    cand = np.stack([peak, np.full_like(peak, deltas[0])])
    excess = np.minimum(b[0][None, :], g[None, :] * cand**2) - k1[None, :] * cand**2
    const = np.maximum(excess.max(axis=0), 0.0)
    # the table's own comparison moves a grid point by a relative 1e-12; the padding covers it
    return QuadraticBound(
        tuple(float(a) for a in al),
        tuple(float(x) for x in g),
        tuple(float(c) * (1.0 + _PAD) for c in const),
        deltas,
        np.asarray(np.minimum(prefix * (1.0 + _PAD), g[None, :]), dtype=np.float64),
    )


#: the elements a chunk of :meth:`QuadraticRegion.sups` may hold per intermediate array (8 MiB of float64)
_CHUNK_ELEMENTS = 1 << 20


# -- sup of zᵀGz over a region ----------------------------------------------------------------------------
def _sup_corners(grams: FloatArray, corners: FloatArray) -> FloatArray:
    """max over the corners of zᵀGz, for each of the stacked Gram matrices ``grams`` (n, d, d)."""
    if not corners.shape[0]:
        return np.zeros(grams.shape[0])
    q = np.einsum("ij,njk,ik->ni", corners, grams, corners)
    return np.asarray(np.max(q, axis=1), dtype=np.float64)


def _sup_ellipsoid(grams: FloatArray, z0: FloatArray, m: FloatArray) -> FloatArray:
    """For each stacked G (``grams``: n, d, d), a certified upper bound of max over ‖u‖ ≤ 1 of
    (z0 + M u)ᵀ G (z0 + M u): min over λ of the dual bound U(λ) = c + λ + bᵀ(λI − H)⁻¹b, λ > λ_max(H),
    H = MᵀGM, b = MᵀGz0, c = z0ᵀGz0. Every λ evaluated gives a valid bound; the bracket of the secular
    equation's root shrinks 32-fold per round, each matrix on its own (vectorised over the stack: the
    planner asks thousands of these)."""
    # each c by its own dot product: the stacked matrix-vector product rounds differently, and the bound
    # of one matrix is then not the bound the same matrix got alone
    c = np.array([row @ z0 for row in z0 @ grams], dtype=np.float64).reshape(-1)
    h = m.T @ grams @ m
    h = (h + h.transpose(0, 2, 1)) / 2.0
    bvec = (m.T @ grams) @ z0
    lam, q = np.linalg.eigh(h)
    bq2 = (q.transpose(0, 2, 1) @ bvec[:, :, None])[:, :, 0] ** 2
    top = lam[:, -1]
    nb = np.sqrt(bq2.sum(axis=1))
    scale = np.abs(c) + np.abs(lam).max(axis=1, initial=0.0) + nb + 1e-300
    tiny = 1e-13 * scale

    def gaps(t: FloatArray, rows: npt.NDArray[np.intp]) -> FloatArray:  # (rows, points, d)
        return np.asarray(top[rows, None, None] + t[:, :, None] - lam[rows, None, :], dtype=np.float64)

    def dual(t: FloatArray, rows: npt.NDArray[np.intp]) -> FloatArray:
        tail = np.sum(bq2[rows, None, :] / gaps(t, rows), axis=2)
        return np.asarray(c[rows, None] + top[rows, None] + t + tail, dtype=np.float64)

    def secular(t: FloatArray, rows: npt.NDArray[np.intp]) -> FloatArray:
        return np.asarray(np.sum(bq2[rows, None, :] / gaps(t, rows) ** 2, axis=2) - 1.0, dtype=np.float64)

    lo, hi = tiny.copy(), np.maximum(nb, tiny) + tiny
    every = np.arange(grams.shape[0])
    ends = np.stack([lo, hi], axis=1)
    best = np.min(dual(ends, every), axis=1)
    rows = every[secular(ends, every)[:, 0] > 0.0]  # the root lies in (lo, hi]; else the "hard case"
    for _ in range(6):
        if not rows.size:
            break
        ts = np.linspace(lo[rows], hi[rows], 33, axis=1)
        best[rows] = np.minimum(best[rows], np.min(dual(ts, rows), axis=1))
        below = secular(ts, rows) <= 0.0
        first = np.argmax(below, axis=1)
        go = below.any(axis=1) & (first > 0)
        k, rows = first[go], rows[go]
        lo[rows], hi[rows] = ts[go, k - 1], ts[go, k]
    return np.asarray(best + _PAD * scale, dtype=np.float64)


@dataclass(frozen=True)
class QuadraticRegion:
    """The records a model allows, as the set of their predictor rows z: the finite set ``corners`` (k, d)
    whose hull holds the maximiser of any zᵀGz with G ⪰ 0 (a box's corners), and/or the ellipsoid
    {z0 + M u : ‖u‖ ≤ 1} containing them. :meth:`sup` is an upper bound of sup_z zᵀGz (exact at corners)."""

    d: int
    corners: FloatArray | None = field(default=None, repr=False)
    z0: FloatArray | None = field(default=None, repr=False)
    m: FloatArray | None = field(default=None, repr=False)
    what: str = ""

    def __post_init__(self) -> None:
        if self.corners is None and self.z0 is None:
            raise ValueError("a region needs corners or an ellipsoid")
        if self.corners is not None and self.corners.shape[1] != self.d:
            raise ValueError(f"corners must have {self.d} columns, got {self.corners.shape}")

    def sup(self, gram: npt.ArrayLike) -> float:
        g = np.asarray(gram, dtype=np.float64)
        if g.shape != (self.d, self.d):
            raise ValueError(f"Gram matrix must be {self.d} x {self.d}, got {g.shape}")
        return float(self.sups(g[None])[0])

    def sups(self, grams: npt.ArrayLike) -> FloatArray:
        """:meth:`sup` of each stacked Gram matrix (n, d, d), vectorised over chunks of the stack (a chunk's
        intermediate arrays kept near 2^20 elements however many corners the region has; each row's result
        does not depend on the others). A part whose bound is not finite (a Gram matrix past float range)
        bounds nothing: +inf, so the region's other part, or the per-decision charge that
        :meth:`WorstRecordCharge.charged` takes when it is smaller, is what counts."""
        g = np.asarray(grams, dtype=np.float64)
        if g.ndim != 3 or g.shape[1:] != (self.d, self.d):
            raise ValueError(f"Gram matrices must be n x {self.d} x {self.d}, got {g.shape}")
        out = np.zeros(g.shape[0])
        live = np.flatnonzero(np.any(g, axis=(1, 2)))  # G = 0: nothing charged
        width = max(0 if self.corners is None else self.corners.shape[0], 33 * self.d)
        chunk = max(1, _CHUNK_ELEMENTS // width)
        for lo in range(0, live.size, chunk):
            rows = live[lo : lo + chunk]
            vals = []
            with np.errstate(over="ignore", invalid="ignore"):  # past float range: +inf below, no bound
                if self.corners is not None:
                    s = _sup_corners(g[rows], self.corners)
                    vals.append(s + _PAD * np.abs(s))
                if self.z0 is not None:
                    assert self.m is not None
                    vals.append(_sup_ellipsoid(g[rows], self.z0, self.m))
            bounds = [np.where(np.isfinite(v), v, np.inf) for v in vals]
            out[rows] = np.maximum(0.0, np.min(bounds, axis=0))
        return out

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for a in (self.corners, self.z0, self.m):
            h.update(b"-" if a is None else np.ascontiguousarray(a, dtype=np.float64).tobytes())
        return h.hexdigest()[:16]


def box_region(p: int, bound: float) -> QuadraticRegion:
    """z = (1, x), |x_k| ≤ bound: the 2^p corners, or (past ``MAX_BOX_CORNERS``) the ball of radius
    bound √p around 0 that holds the box."""
    if 2**p <= MAX_BOX_CORNERS:
        grid = np.array(list(itertools.product((-bound, bound), repeat=p)), dtype=np.float64).reshape(-1, p)
        return QuadraticRegion(p + 1, corners=np.hstack([np.ones((grid.shape[0], 1)), grid]), what="box")
    m = np.vstack([np.zeros((1, p)), bound * math.sqrt(p) * np.eye(p)])
    return QuadraticRegion(p + 1, z0=np.r_[1.0, np.zeros(p)], m=m, what="ball around the box")


# -- the models it applies to -----------------------------------------------------------------------------
@dataclass(frozen=True)
class LinearStructure:
    """A model whose per-record log-likelihood is ``lipschitz``-Lipschitz in a linear predictor zᵀφ(θ) over
    the records in ``region``; ``coefficients`` maps θ (n, d) to φ (n, region.d)."""

    region: QuadraticRegion
    lipschitz: float
    name: str
    model: Model = field(repr=False)

    def coefficients(self, theta: npt.ArrayLike) -> FloatArray:
        from mechanisms.models.formula import FormulaModel

        th = as_batch(np.asarray(theta, dtype=np.float64), self.model.d)
        if isinstance(self.model, FormulaModel):
            _, beta, u = self.model._split(th)
            return np.asarray(beta if u is None else np.hstack([beta, u]), dtype=np.float64)
        return np.asarray(th, dtype=np.float64)

    def directions(self, theta: npt.ArrayLike, theta_star: npt.ArrayLike) -> FloatArray:
        """v_t = φ(θ*_t) − φ(θ_t) per step (rows)."""
        return np.asarray(self.coefficients(theta_star) - self.coefficients(theta), dtype=np.float64)


def linear_structure(model: Model) -> LinearStructure | None:
    """The structure of ``model`` when it has one (None: the per-run charge does not apply, keep the
    per-decision one): the built-in logistic regression (box, and the covariate ellipsoid when declared:
    records are clipped into it, so into both) and a formula model of the bernoulli family (the design
    at every corner of the declared box, with the registry's indicator when the formula has a random
    intercept)."""
    from mechanisms.models.formula import FormulaModel
    from mechanisms.models.logistic import BayesLogistic

    # exact types: a subclass (a plug-in) may change the likelihood, and then the structure is not known
    if type(model) is BayesLogistic:
        box = box_region(model.p, model.x_bound)
        ell = model.ellipsoid
        if ell is None or not model.p:
            return LinearStructure(box, 1.0, model.name, model)
        chol = np.linalg.cholesky(ell.matrix)
        m = np.vstack([np.zeros((1, model.p)), ell.radius * chol])
        z0 = np.r_[1.0, ell.mu]
        if box.corners is not None:  # records are clipped into the ellipsoid, so lie in both
            region = QuadraticRegion(model.p + 1, corners=box.corners, z0=z0, m=m, what="box and ellipsoid")
        else:  # the box's enclosing ball and the ellipsoid: the ellipsoid alone (it bounds the records)
            region = QuadraticRegion(model.p + 1, z0=z0, m=m, what="ellipsoid")
        return LinearStructure(region, 1.0, model.name, model)
    if type(model) is FormulaModel and model.family == "bernoulli":
        corners = np.asarray(model.parsed.corners, dtype=np.float64)
        if model.parsed.group is not None:
            g = model.m_groups
            rows = np.repeat(corners, g, axis=0)
            ind = np.tile(np.eye(g), (corners.shape[0], 1))
            corners = np.hstack([rows, ind])
        return LinearStructure(QuadraticRegion(corners.shape[1], corners=corners, what="corners"), 1.0,
                               model.name, model)  # fmt: skip
    return None


# -- the charge -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunState:
    """What a registry keeps of a run for its worst-record charge: ``grams`` (layers × d × d: layer 0
    Σ_t v_t v_tᵀ, layer 1 + i Σ_t κ_i(Δ_t) v_t v_tᵀ), ``per_decision`` (the per-decision charge of the same
    decisions: μ² then ρ per order) and ``decisions`` (T). Persisted by :meth:`to_dict` /
    :meth:`from_dict`."""

    grams: FloatArray = field(repr=False)
    per_decision: FloatArray
    decisions: int = 0

    def to_dict(self) -> dict[str, object]:
        return {
            "grams": self.grams.tolist(),
            "per_decision": self.per_decision.tolist(),
            "decisions": self.decisions,
        }

    @classmethod
    def from_dict(cls, data: object, layers: int, d: int) -> RunState:
        """ValueError naming what is wrong when ``data`` is not a state of ``layers`` × d × d."""
        if not isinstance(data, dict) or set(data) != {"grams", "per_decision", "decisions"}:
            raise ValueError(
                "a run's worst-record state must be an object of grams, per_decision, decisions; "
                f"got {str(data)[:60]!r}"
            )
        try:
            g = np.asarray(data["grams"], dtype=np.float64)
            pd = np.asarray(data["per_decision"], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"a run's worst-record state must be numbers, got {str(data)[:60]!r}") from exc
        if g.shape != (layers, d, d) or pd.shape != (layers,):
            raise ValueError(
                f"a run's worst-record state must be {layers} x {d} x {d} and {layers} per-decision totals, "
                f"got shapes {g.shape} and {pd.shape}"
            )
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(pd)) and np.all(pd >= 0)):
            raise ValueError("a run's worst-record state must be finite (and its totals >= 0)")
        if not np.allclose(g, g.transpose(0, 2, 1), rtol=1e-12, atol=0.0):
            raise ValueError("a run's worst-record Gram matrices must be symmetric")
        n = data["decisions"]
        if type(n) is not int or n < 0:
            raise ValueError(f"a run's worst-record decisions must be an integer >= 0, got {n!r}")
        return cls(g, pd, n)


@dataclass(frozen=True)
class WorstRecordCharge:
    """A run's charge at its worst record: ``structure`` (the model's predictor and region), the neighbour
    relation's ``factor`` f (1 add-remove, 4 replace-one, times L²), the residual noise sd ``s`` and, for a
    Rényi filter, the session's accept-bit ``table`` and its majorant ``bound`` κ(D) d² + c (None: the GDP
    reading alone).

    Each reading charges the smaller of two running bounds, both valid for every pair: the worst record's
    (f S + c T) and the per-decision one (Σ_t Δ_t²/s², Σ_t ρ_table(Δ_t)). A minimum of two non-decreasing
    valid bounds is a valid bound, and its increments telescope to it, so the run never costs more than
    per decision and the filter stays "spent + increment ≤ budget"."""

    structure: LinearStructure
    factor: float
    s: float
    table: BitRdpTable | None = field(default=None, repr=False)
    bound: QuadraticBound | None = None

    @classmethod
    def of(
        cls, structure: LinearStructure, neighbours: str, s: float, table: BitRdpTable | None = None
    ) -> WorstRecordCharge:
        if neighbours not in ("add-remove", "replace-one"):
            raise ValueError(f"neighbours must be 'add-remove' or 'replace-one', got {neighbours!r}")
        if not (s > 0 and math.isfinite(s)):
            raise ValueError(f"the residual noise sd must be finite and > 0, got {s}")
        f = (4.0 if neighbours == "replace-one" else 1.0) * structure.lipschitz**2
        return cls(structure, f, float(s), table, None if table is None else quadratic_rdp_bound(table))

    @property
    def d(self) -> int:
        return self.structure.region.d

    @property
    def layers(self) -> int:
        return 1 + (0 if self.bound is None else len(self.bound.orders))

    def empty(self) -> RunState:
        """A run's state before its first batch."""
        return RunState(np.zeros((self.layers, self.d, self.d)), np.zeros(self.layers), 0)

    @property
    def fingerprint(self) -> str:
        """What the increments of one state must share (the module docstring: κ, c, f, s, region)."""
        doc = {
            "model": self.structure.name,
            "region": self.structure.region.fingerprint(),
            "factor": self.factor,
            "s": self.s,
        }
        if self.bound is not None and self.table is not None:
            h = hashlib.sha256(np.ascontiguousarray(self.bound.prefix).tobytes())
            h.update(np.ascontiguousarray(self.table.deltas).tobytes())
            h.update(np.ascontiguousarray(self.table.bounds).tobytes())
            doc["bound"] = [self.bound.orders, self.bound.const, h.hexdigest()[:16]]
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def grams(self, theta: npt.ArrayLike, theta_star: npt.ArrayLike, deltas: npt.ArrayLike) -> FloatArray:
        """A batch's layers: Σ_t v_t v_tᵀ and Σ_t κ_i(Δ_t) v_t v_tᵀ, ``deltas`` the steps' Δ_t (the
        per-decision sensitivity under the registry's neighbour relation: it bounds every record's |Δℓ_t|)."""
        v = self.structure.directions(theta, theta_star)
        dl = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
        if dl.shape != (v.shape[0],):
            raise ValueError(f"{v.shape[0]} steps but {dl.size} sensitivities")
        out = np.empty((self.layers, self.d, self.d))
        out[0] = v.T @ v
        if self.bound is not None:
            k = self.bound.kappa(dl)  # (steps, orders)
            for i in range(k.shape[1]):
                out[1 + i] = (v * k[:, i : i + 1]).T @ v
        return out

    def per_decision(self, deltas: npt.ArrayLike) -> FloatArray:
        """The per-decision charge of the steps (``charge``'s): Σ_t Δ_t²/s², then Σ_t ρ_table(Δ_t) per
        order."""
        dl = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
        mu2 = float(np.sum((dl / self.s) ** 2))
        if self.table is None:
            return np.array([mu2])
        return np.r_[mu2, self.table.batch_rho(dl)]

    def worst(self, state: RunState) -> FloatArray:
        """The worst record's bound of ``state``: f S / s², then f S_κ + c T per order."""
        return np.asarray(self.worst_along([state])[0], dtype=np.float64)

    def worst_along(self, states: Sequence[RunState]) -> FloatArray:
        """:meth:`worst` of each state (rows), in one vectorised pass over every Gram matrix (the planner's
        simulated run asks one per iteration; each row's value does not depend on the others)."""
        if not states:
            return np.zeros((0, self.layers))
        grams = np.stack([st.grams for st in states])  # (k, layers, d, d)
        sups = self.structure.region.sups(grams.reshape(-1, self.d, self.d)).reshape(len(states), -1)
        out = self.factor * sups
        out[:, 0] /= self.s**2
        if self.bound is not None:
            const = np.asarray(self.bound.const)
            out[:, 1:] += const[None, :] * np.array([st.decisions for st in states])[:, None]
        return np.asarray(out, dtype=np.float64)

    def charged(self, state: RunState) -> FloatArray:
        """What the run's charges add up to (μ², then ρ per order): the smaller of the two bounds."""
        return np.asarray(self.charged_along([state])[0], dtype=np.float64)

    def charged_along(self, states: Sequence[RunState]) -> FloatArray:
        """:meth:`charged` of each state (rows): the smaller of :meth:`worst_along` and its per-decision
        charge."""
        if not states:
            return np.zeros((0, self.layers))
        per_decision = np.stack([st.per_decision for st in states])
        return np.asarray(np.minimum(self.worst_along(states), per_decision), dtype=np.float64)

    def increment(
        self,
        before: RunState,
        theta: npt.ArrayLike,
        theta_star: npt.ArrayLike,
        deltas: npt.ArrayLike,
        label: str,
    ) -> tuple[list[PrivacyEvent], RunState]:
        """The events of one batch (steps θ → θ*, rows; ``deltas`` their Δ_t) given the run's state
        ``before`` (:meth:`empty` for a run's first batch), and the state after it."""
        if before.grams.shape != (self.layers, self.d, self.d):
            raise ValueError(
                f"a run's state must be {self.layers} x {self.d} x {self.d}, got {before.grams.shape}"
            )
        n = int(np.atleast_2d(np.asarray(theta)).shape[0])
        g1 = before.grams + self.grams(theta, theta_star, deltas)
        pd = before.per_decision + self.per_decision(deltas)
        after = RunState((g1 + g1.transpose(0, 2, 1)) / 2.0, pd, before.decisions + n)
        return self.events(np.maximum(self.charged(after) - self.charged(before), 0.0), label), after

    def events(self, gain: npt.ArrayLike, label: str) -> list[PrivacyEvent]:
        """The events charging one batch whose increase of :meth:`charged` is ``gain`` (μ², then ρ per order;
        floored at 0 by the caller): what :meth:`increment` returns, also what a plan simulating a run
        charges (``mechanisms.planning``, which keeps :meth:`charged` of the state it has)."""
        gain = np.asarray(gain, dtype=np.float64)
        mu2 = float(gain[0])
        what = f"{label}, worst record over the run"
        if self.bound is None:
            return [GaussianEvent(math.sqrt(mu2), count=1, label=what)]
        rho = tuple(float(r) for r in gain[1:])
        # μ raised so that the event's min(ρ, αμ²/2) never clips ρ (module docstring)
        top = max(2.0 * r / a for r, a in zip(rho, self.bound.orders, strict=True)) * (1.0 + 1e-12)
        return [RenyiEvent(math.sqrt(max(mu2, top)), self.bound.orders, rho, count=1, label=what)]
