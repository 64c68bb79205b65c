"""A differentially private warm start: the covariates' moments and a Laplace approximation of the posterior
from noisy sums that the registries release on secret shares (issue 23, DESIGN.md §1 "Making ε useful").

Every release is the sum over all registries' records of a per-record vector v_i whose L2 norm is bounded
in public, plus Gaussian noise that the registries add themselves (each its own share, from its CSPRNG), and
only the noisy total is revealed (the ``sum`` reveal: the coordinator sees Σ_j (S_j + N_j), no registry's
S_j). Two kinds (:data:`STATISTICS`):

* ``"moments"``: v_i = (z_i, vech(z_i z_iᵀ)) for the covariates z_i of a regression model, bounded by the
  schema's box |z_k| <= x_bound: ‖z‖ <= √p·x_bound and ‖vech(z zᵀ)‖ <= x_bound²·√(p(p + 1)/2), both reached
  at the box's corners (:func:`block_bounds`). From the totals the
  coordinator gets a public centre μ and covariance B for the covariate ellipsoid
  (:mod:`mechanisms.models.ellipsoid`).
* ``"score"`` at a public θ: v_i = (s_i, vech(s_i s_iᵀ)) with s_i = ∇_θ log p(x_i | θ) clipped to the L2
  ball of radius ``clip`` (‖v_i‖₂ <= √(C² + C⁴)). The totals are the gradient of the log-likelihood and its
  empirical Fisher information; a few Fisher-scoring steps from a public start give θ̂ and
  Â = F(θ̂) + the prior's precision, and N(θ̂, Â⁻¹) is the DP Laplace approximation. Clipping the scores
  only makes the approximation worse, never the chain inexact: the approximation is a proposal.
* ``"gradient"`` at a public θ: v_i = s_i alone (‖v_i‖₂ <= C). The Gram block needs little relative
  precision but costs C² of sensitivity, so the schedule releases it twice only — at the start (the Newton
  steps' curvature) and at the last step (the Laplace covariance) — and the steps between release the
  gradient alone, their curvature the first Fisher information secant-updated (BFGS) with each step's
  change of the gradient: a fixed curvature converges linearly, too slowly — the empirical Fisher away from
  the mode is too large (measured in :func:`secant_update`). A later score release renews the covariance.
  With ``curvature = "fisher"`` (:data:`CURVATURES`; Weibull's choice) every step is a score release and a
  Fisher-scoring step with its fresh empirical Fisher instead.

When the model has a public bound on a record's score norm the gradient block is clipped at it, so no
record's score is clipped (:meth:`WarmStartPlan.clipped_for`); the bound is taken at each release's public
θ by the registries themselves (``model_bound``, :meth:`Statistics.at`), the noise scaled with it so that
the release's μ is fixed in advance: for a bound that holds at every θ (logistic) both blocks scale with the
bound at θ (half of it at θ = 0); for one that exists only at a θ (Weibull, linear) the Gram block keeps its
own clip ``clip2``.

Privacy (per registry, for its neighbour relation and the coalition it assumes): each registry adds
N(0, sd²) to each coordinate of the first block (Σ v or Σ s) of its own sum and N(0, sd2²) to each of the
second (the vech of the Gram matrix), so a coalition that knows q registries' noise still faces (m − q)
times those variances, and the release is the Gaussian mechanism with μ = √((Δ₁/sd)² + (Δ₂/sd2)²) / √(m − q),
Δ₁, Δ₂ the blocks' L2 sensitivities (max ‖z‖ and ‖vech(z zᵀ)‖, or C and C², for add-remove; for replace-one
twice the first and at most √2 times the Gram block's, a difference of two rank-one positive semi-definite
matrices: :func:`replace_one_blocks`) — :func:`release_mu`. Two noise scales let the Gram block, which needs
little relative precision, carry much more noise than the gradient. Releases compose with each
other and with the MCMC's per-decision charges in the same GDP ledger (exact for Gaussians, valid under
adaptive choice as a GDP filter).

The released values are scaled by 1/``scale`` (a public number, the total record count) so that they fit
the fixed-point terms of the sum protocol; the coordinator multiplies back. Pure: no I/O; the secret noise
generator comes in as an argument.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechanisms.models.base import F64, Data, Model
from mechanisms.models.ellipsoid import CovariateRegion
from mechanisms.warmstart_basis import InBasis, has_score_bound, score_bound
from mechanisms.warmstart_steps import exact_laplace, nearest_pd, prior_precision, secant_update

__all__ = [
    "CURVATURES",
    "STATISTICS",
    "LaplaceApproximation",
    "Statistics",
    "WarmStart",
    "WarmStartPlan",
    "block_bounds",
    "clipped_scores",
    "covariate_moments",
    "exact_laplace",
    "fisher_step",
    "in_memory_release",
    "moments_from_totals",
    "pack",
    "prior_precision",
    "record_vectors",
    "release_mu",
    "replace_one_blocks",
    "run_warm_start",
    "secant_update",
    "unpack",
    "with_ellipsoid",
]

#: what a release sums per record
STATISTICS = ("moments", "score", "gradient")
#: the steps' curvature: the first Fisher secant-updated with gradient releases between two score releases,
#: or a fresh empirical Fisher from a score release at every step
CURVATURES = ("secant", "fisher")


@dataclass(frozen=True)
class Statistics:
    """One release: ``what`` (:data:`STATISTICS`), the score's L2 ``clip`` (score only), each registry's
    noise ``sd`` on the first block and ``sd2`` on the Gram block of its unscaled sum, and the public
    ``scale`` the released values are divided by.

    ``clip2`` (score only) clips the scores of the Gram block at its own bound (default: ``clip``); with
    ``model_bound`` the first block's clip is the model's public bound on a record's score norm at the
    release's θ (``model.score_norm_bound(θ)``), ``clip`` and ``sd`` then the reference pair: the release at
    θ has clip C(θ) and noise sd·C(θ)/clip (and sd2·(C(θ)/clip)² without ``clip2``), so its μ is the
    reference's at every θ (:meth:`at`, what the registries compute themselves from the public θ).

    ``basis`` (score and gradient only): a public invertible d x d matrix B; a record's score is released in
    the coordinates γ of θ = Bγ, i.e. Bᵀ ∇_θ log p(x | θ), clipped after the change (the privacy of the
    release is its clip's, whatever B is; the model's bound is then that of ‖Bᵀs‖: :func:`score_bound`).
    A formula model's warm start takes B from its pilot's covariance (``coordinator.planner``), so that
    the scores of columns on very different scales (age in years beside a 0/1 indicator) are released with
    noise of one size in posterior sds (:func:`run_warm_start` runs its steps in γ)."""

    what: str
    sd: float
    sd2: float
    scale: float
    clip: float | None = None
    clip2: float | None = None
    model_bound: bool = False
    basis: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.what not in STATISTICS:
            raise ValueError(f"statistics must be one of {STATISTICS}, got {self.what!r}")
        for key in ("sd", "sd2"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"statistics {key} must be a finite number > 0, got {v!r}")
        if not (math.isfinite(self.scale) and self.scale >= 1):
            raise ValueError(f"statistics scale must be a finite number >= 1, got {self.scale!r}")
        clip_ok = self.clip is not None and math.isfinite(self.clip) and self.clip > 0
        if self.what in ("score", "gradient") and not clip_ok:
            raise ValueError("a score release needs clip, a finite L2 bound > 0 on each record's score")
        if self.what == "moments" and (self.clip is not None or self.model_bound):
            raise ValueError("a moments release is bounded by the schema's box: it takes no clip")
        if self.clip2 is not None and not (
            self.what == "score" and math.isfinite(self.clip2) and self.clip2 > 0
        ):
            raise ValueError("clip2 bounds a score release's Gram block: a finite number > 0, score only")
        if self.basis is not None:
            if self.what == "moments":
                raise ValueError("a basis is of the scores' coordinates: score and gradient releases only")
            try:
                b = np.asarray(self.basis, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"statistics basis must be a matrix of numbers, got {self.basis!r}") from exc
            if b.ndim != 2 or b.shape[0] != b.shape[1] or b.size == 0 or not np.isfinite(b).all():
                raise ValueError(f"statistics basis must be a finite square matrix, got shape {b.shape}")
            if np.linalg.cond(b) > 1e12:
                raise ValueError("statistics basis must be invertible (its condition number is above 1e12)")
            object.__setattr__(self, "basis", tuple(tuple(float(v) for v in row) for row in b))

    def to_params(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "what": self.what,
            "sd": self.sd,
            "sd2": self.sd2,
            "scale": self.scale,
        }
        if self.clip is not None:
            out["clip"] = self.clip
        if self.clip2 is not None:
            out["clip2"] = self.clip2
        if self.model_bound:
            out["model_bound"] = True
        if self.basis is not None:
            out["basis"] = [list(row) for row in self.basis]  # type: ignore[assignment]
        return out

    @classmethod
    def from_params(cls, p: dict[str, object]) -> Statistics:
        extra = set(p) - {"what", "sd", "sd2", "scale", "clip", "clip2", "model_bound", "basis"}
        if extra:
            raise ValueError(f"unknown statistics parameters {sorted(extra)}")
        clip, clip2, bound = p.get("clip"), p.get("clip2"), p.get("model_bound", False)
        if not isinstance(bound, bool):
            raise ValueError(f"statistics model_bound must be true or false, got {bound!r}")
        basis = p.get("basis")
        if basis is not None and not (
            isinstance(basis, list | tuple) and all(isinstance(row, list | tuple) for row in basis)
        ):
            raise ValueError(f"statistics basis must be a list of rows, got {basis!r}")
        return cls(
            what=str(p.get("what")),
            sd=_num(p, "sd"),
            sd2=_num(p, "sd2"),
            scale=_num(p, "scale"),
            clip=None if clip is None else _num(p, "clip"),
            clip2=None if clip2 is None else _num(p, "clip2"),
            model_bound=bound,
            basis=None if basis is None else tuple(tuple(row) for row in basis),  # type: ignore[union-attr]
        )

    @property
    def basis_matrix(self) -> F64 | None:
        return None if self.basis is None else np.asarray(self.basis, dtype=np.float64)

    def at(self, model: Model, theta: F64 | None) -> Statistics:
        """The release as made at ``theta``: with ``model_bound``, clip C = the model's score-norm bound
        there and the noise scaled with it (μ unchanged); otherwise itself. ValueError when the model has no
        finite bound at ``theta``."""
        if not self.model_bound:
            return self
        assert self.clip is not None
        bound = score_bound(model, theta, self.basis_matrix) if theta is not None else None
        if bound is None or not (math.isfinite(bound) and bound > 0):
            raise ValueError(f"model {model.name!r} has no finite score-norm bound at theta = {theta}")
        k = float(bound) / self.clip
        sd2 = self.sd2 if self.clip2 is not None else self.sd2 * k * k
        return dataclasses.replace(self, clip=float(bound), sd=self.sd * k, sd2=sd2, model_bound=False)


def _num(p: dict[str, object], key: str) -> float:
    v = p.get(key)
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise ValueError(f"statistics {key} must be a number, got {v!r}")
    return float(v)


def _vech(outer: F64) -> F64:
    """The upper triangles (diagonal included) of a stack of square matrices (n, k, k) -> (n, k(k+1)/2)."""
    k = outer.shape[-1]
    iu = np.triu_indices(k)
    return np.asarray(outer[:, iu[0], iu[1]], dtype=np.float64)


def pack(first: F64, second: F64) -> F64:
    """(Σ v, vech(Σ v vᵀ)) as one vector (the release's coordinates)."""
    return np.concatenate([first, second])


def unpack(total: F64, k: int) -> tuple[F64, F64]:
    """The inverse of :func:`pack`: (k,) and the symmetric (k, k) matrix."""
    first = np.asarray(total[:k], dtype=np.float64)
    mat = np.zeros((k, k))
    iu = np.triu_indices(k)
    mat[iu] = total[k:]
    mat = mat + np.triu(mat, 1).T
    return first, mat


def dimension(what: str, model: Model) -> int:
    """The number of coordinates of a release (k + k(k + 1)/2, k = p covariates or d parameters; k for a
    gradient release)."""
    k = _covariate_model(model).p if what == "moments" else model.d
    return k if what == "gradient" else k + k * (k + 1) // 2


def _covariate_model(model: Model) -> CovariateRegion:
    if not isinstance(model, CovariateRegion):
        raise ValueError(f"model {model.name!r} has no covariates in a public box (moments need them)")
    return model


def block_bounds(stats: Statistics, model: Model) -> tuple[float, float]:
    """max over allowed records of the L2 norms of v_i's two blocks: (‖s‖, ‖vech(s sᵀ)‖) <= (C, C2²) for
    scores (C2 = clip2, default C); for moments exactly (√p b, b² √(p(p + 1)/2)), b = x_bound: ‖z‖ and
    ‖vech(z zᵀ)‖² = Σ_{k <= l} z_k² z_l² grow with every |z_k|, so both are largest at the box's corners,
    where the latter is b⁴ times the p(p + 1)/2 entries of the upper triangle (the add-remove sensitivities;
    the Gram block was charged ‖z‖² = ‖z zᵀ‖_F before, which counts each off-diagonal entry twice: √810 =
    28.5 against 36 at p = 4, b = 3). With ``model_bound`` these are the reference clip's: the release at θ
    has clip C(θ) and noise scaled by C(θ)/clip, the same ratios (:meth:`Statistics.at`)."""
    if stats.what in ("score", "gradient"):
        assert stats.clip is not None
        c2 = stats.clip if stats.clip2 is None else stats.clip2
        return stats.clip, (c2**2 if stats.what == "score" else 0.0)
    reg = _covariate_model(model)
    b2 = reg.x_bound**2
    return math.sqrt(reg.p * b2), b2 * math.sqrt(reg.p * (reg.p + 1) / 2.0)


def replace_one_blocks(stats: Statistics, model: Model) -> tuple[float, float]:
    """The blocks' replace-one L2 sensitivities (issue 35 item 3.4): the first block twice its add-remove
    bound Δ₁ (reached: a record and its mirror image); the Gram block vech(s sᵀ) of a rank-one positive
    semi-definite matrix √2 Δ₂, not 2Δ₂: for A = s sᵀ, B = s' s'ᵀ, vech A · vech B = (⟨A, B⟩_F + Σ_k A_kk
    B_kk)/2 ≥ 0, so ‖vech A − vech B‖² ≤ ‖vech A‖² + ‖vech B‖² ≤ 2Δ₂². For the moments' Gram block over the
    box |z_k| ≤ b also entry by entry: a diagonal z_k² moves by at most b², an off-diagonal z_k z_l by 2b², so
    ‖Δ vech‖ ≤ b² √(p + 2p(p − 1)) (the smaller for p ≤ 2); the smaller of the two. The sup of the two
    blocks' sum is at most the sum of their sups, so μ stays valid."""
    d1, d2 = block_bounds(stats, model)
    r2 = math.sqrt(2.0) * d2
    if stats.what == "moments":
        reg = _covariate_model(model)
        r2 = min(r2, reg.x_bound**2 * math.sqrt(reg.p + 2.0 * reg.p * (reg.p - 1)))
    return 2.0 * d1, r2


def release_mu(stats: Statistics, model: Model, residual_parties: int, neighbours: str) -> float:
    """GDP μ of one release for a registry whose assumed coalition leaves ``residual_parties`` registries'
    noise unknown: √((Δ₁/sd)² + (Δ₂/sd2)²)/√r, Δ the block bounds (add-remove) or their replace-one
    sensitivities (:func:`replace_one_blocks`: 2Δ₁ and at most √2 Δ₂)."""
    if residual_parties < 1:
        raise ValueError("at least one registry's noise must be unknown to the coalition")
    if neighbours == "add-remove":
        d1, d2 = block_bounds(stats, model)
    elif neighbours == "replace-one":
        d1, d2 = replace_one_blocks(stats, model)
    else:
        raise ValueError(f"neighbours must be 'add-remove' or 'replace-one', got {neighbours!r}")
    # a gradient release has no Gram block (d2 = 0)
    return math.hypot(d1 / stats.sd, d2 / stats.sd2) / math.sqrt(residual_parties)


def covariate_moments(model: Model, data: Data) -> F64:
    """Σ_i (z_i, vech(z_i z_iᵀ)) over a registry's records (unscaled, no noise)."""
    reg = _covariate_model(model)
    cols = [np.asarray(data[c], dtype=np.float64) for c in reg.covariates]
    z = np.column_stack(cols) if cols else np.zeros((model.n_records(data), 0))
    return pack(z.sum(axis=0), _vech(z[:, :, None] * z[:, None, :]).sum(axis=0))


def clipped_scores(model: Model, data: Data, theta: F64, clip: float, rel_step: float = 1e-6) -> F64:
    """Per-record scores ∇_θ log p(x_i | θ) (central differences of ``record_log_likelihood``), each clipped
    to the L2 ball of radius ``clip``: shape (records, d)."""
    return _clip_rows(record_scores(model, data, theta, rel_step), clip)


def record_scores(model: Model, data: Data, theta: F64, rel_step: float = 1e-6) -> F64:
    """Per-record scores ∇_θ log p(x_i | θ) by central differences, unclipped: (records, d)."""
    th = np.asarray(theta, dtype=np.float64).reshape(-1)
    d = th.size
    h = rel_step * np.maximum(1.0, np.abs(th))
    steps = np.vstack([th + np.diag(h), th - np.diag(h)])  # (2d, d)
    rec = np.asarray(model.record_log_likelihood(data, steps), dtype=np.float64)  # (2d, records)
    return np.asarray(((rec[:d] - rec[d:]) / (2.0 * h[:, None])).T, dtype=np.float64)


def _clip_rows(score: F64, clip: float) -> F64:
    norm = np.linalg.norm(score, axis=1)
    return np.asarray(score * np.minimum(1.0, clip / np.maximum(norm, 1e-300))[:, None], dtype=np.float64)


def record_vectors(stats: Statistics, model: Model, data: Data, theta: F64 | None) -> F64:
    """A registry's unscaled, noise-free sum of the release's per-record vectors (``stats`` as made at
    ``theta``: :meth:`Statistics.at`)."""
    if stats.what == "moments":
        return covariate_moments(model, data)
    if theta is None:
        raise ValueError("a score release needs the public theta it is evaluated at")
    if stats.model_bound:
        raise ValueError("a release with model_bound is made with its clip at theta: Statistics.at first")
    assert stats.clip is not None
    raw = record_scores(model, data, theta)
    basis = stats.basis_matrix
    if basis is not None:
        if basis.shape != (model.d, model.d):
            raise ValueError(f"the release's basis has shape {basis.shape}, the model d = {model.d}")
        raw = raw @ basis  # each row: (Bᵀ s_i)ᵀ
    s = _clip_rows(raw, stats.clip)
    if stats.what == "gradient":
        return np.asarray(s.sum(axis=0), dtype=np.float64)
    s2 = s if stats.clip2 is None else _clip_rows(raw, stats.clip2)
    return pack(s.sum(axis=0), _vech(s2[:, :, None] * s2[:, None, :]).sum(axis=0))


def noisy_release(stats: Statistics, total: F64, k: int, normal: Callable[[int], F64]) -> F64:
    """A registry's released values: (its sum + N(0, sd²) on the first ``k`` coordinates, N(0, sd2²) on the
    Gram block) / scale; ``normal(j)`` draws j standard normals from the registry's CSPRNG."""
    scales = np.r_[np.full(k, stats.sd), np.full(total.size - k, stats.sd2)]
    return np.asarray((total + scales * normal(total.size)) / stats.scale, dtype=np.float64)


def block_size(what: str, model: Model) -> int:
    """k: the first block's length (p covariates or d parameters)."""
    return _covariate_model(model).p if what == "moments" else model.d


def moments_from_totals(total: F64, p: int, n: int) -> tuple[F64, F64]:
    """(centre μ, covariance B) of the covariates from a moments release's unscaled noisy total and the
    public record count n; B is made positive definite (eigenvalues at least 1e-6 of its largest)."""
    first, second = unpack(total, p)
    mu = first / n
    cov = second / n - np.outer(mu, mu)
    top = float(np.max(np.abs(np.linalg.eigvalsh(0.5 * (cov + cov.T))), initial=1.0))
    return np.asarray(mu, dtype=np.float64), nearest_pd(cov, 1e-6 * max(top, 1e-12))


@dataclass(frozen=True)
class LaplaceApproximation:
    """N(mean, cov): the DP Laplace approximation of the posterior (public: computed from released sums)."""

    mean: F64
    cov: F64

    def sd(self) -> F64:
        return np.asarray(np.sqrt(np.diag(self.cov)), dtype=np.float64)


def floored_fisher(model: Model, total: F64, gram_noise: float) -> tuple[F64, F64]:
    """(the likelihood's gradient, its empirical Fisher with eigenvalues raised to 3 x ``gram_noise``)
    from a score release's unscaled total."""
    grad, fisher = unpack(total, model.d)
    floor = max(3.0 * gram_noise, 1e-9 * max(1.0, float(np.trace(fisher)) / model.d))
    return grad, nearest_pd(fisher, floor)


def fisher_step(
    model: Model, theta: F64, total: F64, max_step: float | None = None, gram_noise: float = 0.0
) -> tuple[F64, F64]:
    """One Fisher-scoring step on the posterior from a score release's unscaled noisy total at ``theta``:
    θ' = θ + (F + P)⁻¹ (g + ∇ log π), F the empirical Fisher with its eigenvalues raised to 3 x the noise
    of each entry (``gram_noise``; to first order an eigenvalue moves by vᵀEv, of that size), so the noise
    cannot make a direction look flat; P the prior's
    precision; the step is shrunk to ``max_step`` in the (F + P) metric when given. Returns (θ', F + P at
    θ)."""
    grad, fisher = floored_fisher(model, total, gram_noise)
    lp_grad, prec = prior_precision(model, theta)
    info = fisher + prec
    step = np.linalg.solve(info, grad + lp_grad)
    if max_step is not None:
        length = float(np.sqrt(step @ info @ step))
        if length > max_step:
            step = step * (max_step / length)
    return np.asarray(np.asarray(theta, dtype=np.float64).reshape(-1) + step, dtype=np.float64), info


def laplace_from(theta: F64, info: F64, inflate: float = 1.0) -> LaplaceApproximation:
    """N(θ̂, inflate² (F + P)⁻¹)."""
    cov = np.linalg.inv(info) * inflate**2
    return LaplaceApproximation(np.asarray(theta, dtype=np.float64), np.asarray(0.5 * (cov + cov.T)))


def release_totals(parts: Sequence[F64], stats: Statistics) -> F64:
    """The coordinator's unscaled total from the registries' released (scaled) values."""
    return np.asarray(np.sum(np.asarray(parts), axis=0) * stats.scale, dtype=np.float64)


#: a release function: (statistics, public θ or None, the model the registries evaluate it with — the
#: covariate ellipsoid of a score release included, which clips their records) -> the unscaled noisy total
Release = Callable[[Statistics, "F64 | None", Model], F64]


@dataclass(frozen=True)
class WarmStartPlan:
    """The coordinator's public warm-start schedule: one moments release (when the model has covariates and
    ``ellipsoid_quantile`` is set) then ``steps`` Fisher-scoring steps from ``start``: a full ``score``
    release at the first and the last step, ``gradient`` releases between them (:meth:`schedule`); the
    noise scales of each release, and ``inflate``, the factor on the Laplace sds for a proposal drawn from
    it (:meth:`proposal_cov`; the approximation itself is not inflated)."""

    score: Statistics
    steps: int
    moments: Statistics | None = None
    gradient: Statistics | None = None
    ellipsoid_quantile: float | None = 0.99
    inflate: float = 1.0
    max_step: float | None = None
    curvature: str = "secant"

    def __post_init__(self) -> None:
        if self.score.what != "score" or (self.moments is not None and self.moments.what != "moments"):
            raise ValueError("a warm start is one moments release (optional) and score releases")
        if not 1 <= self.steps <= 50:
            raise ValueError(f"warm start steps must be in 1..50, got {self.steps}")
        bases = {s.basis for s in (self.score, self.gradient) if s is not None}
        if len(bases) != 1:
            raise ValueError("the score and gradient releases of a warm start share one basis")
        if self.basis is not None and self.moments is not None:
            raise ValueError("a warm start in a basis has no moments release (a covariate ellipsoid's model)")
        if self.curvature not in CURVATURES:
            raise ValueError(f"warm start curvature must be one of {CURVATURES}, got {self.curvature!r}")
        secant = self.curvature == "secant" and self.steps >= 3
        if (self.gradient is not None) != secant or (
            self.gradient is not None and self.gradient.what != "gradient"
        ):
            raise ValueError(
                "with secant curvature the steps between the first and the last release the gradient alone; "
                "with fisher curvature every step is a score release"
            )
        q = self.ellipsoid_quantile
        if q is not None and not 0.5 <= q < 1.0:
            raise ValueError(f"ellipsoid_quantile must be in [0.5, 1), got {q}")
        if not (math.isfinite(self.inflate) and self.inflate >= 1.0):
            raise ValueError(f"inflate must be a finite number >= 1, got {self.inflate}")

    def clipped_for(self, model: Model) -> WarmStartPlan:
        """The plan as released for ``model`` (its ellipsoid set): when the model has a public bound on a
        record's score norm, that is the clip, so that no record's score is clipped and the releases are
        unbiased, with the noise scaled to keep each release's μ. A bound that depends on θ (Weibull: the
        survival term e^z grows with the time scale's misfit) is taken at each release's θ
        (``model_bound``, :meth:`Statistics.at`) for the gradient block; the Gram block keeps the plan's clip
        (``clip2``): clipping it only shrinks the curvature a little (longer steps, a wider Laplace
        covariance), while a clipped gradient moves its root, the warm start's mean, by a bias that grows
        like √n in posterior sds (measured at 10,000 Weibull records with clip 4: 2.8 % of the scores
        clipped at the mode).

        A bound that holds at every θ (logistic: ‖(1, x)‖) is the reference clip of both blocks, and the
        release at θ is still made at the model's bound there, which may be smaller (logistic: σ(sup|η|)
        times it, half at θ = 0, where every record's |y − σ(η)| is ½): both blocks' clips and noise scale
        with it (``model_bound`` without ``clip2``), so the release's μ is the reference's and, where the
        bound at θ is smaller, its noise too (issue 35 item 3.2: the first release at θ = 0 was charged
        2.6x its sensitivity at the demo's shares)."""
        if not has_score_bound(model):
            return self
        bound = score_bound(model, None, self.score.basis_matrix)
        if bound is None:  # depends on θ
            return dataclasses.replace(
                self,
                score=dataclasses.replace(self.score, model_bound=True, clip2=self.score.clip),
                gradient=None
                if self.gradient is None
                else dataclasses.replace(self.gradient, model_bound=True),
            )
        return dataclasses.replace(
            self,
            score=dataclasses.replace(_reclip(self.score, bound), model_bound=True),
            gradient=None
            if self.gradient is None
            else dataclasses.replace(_reclip(self.gradient, bound), model_bound=True),
        )

    @property
    def basis(self) -> tuple[tuple[float, ...], ...] | None:
        """The releases' basis (``Statistics.basis``), None: the parameters' own coordinates."""
        return self.score.basis

    def without_basis(self) -> WarmStartPlan:
        """The plan as the coordinator's steps in the basis see it (the model there is :class:`InBasis`)."""
        return dataclasses.replace(
            self,
            score=dataclasses.replace(self.score, basis=None),
            gradient=None if self.gradient is None else dataclasses.replace(self.gradient, basis=None),
        )

    def proposal_cov(self, laplace: LaplaceApproximation) -> F64:
        return np.asarray(self.inflate**2 * laplace.cov, dtype=np.float64)

    def schedule(self) -> list[Statistics]:
        """The Fisher-scoring steps' releases: score, gradient x (steps - 2), score (secant curvature), or
        score x steps (fisher curvature)."""
        if self.steps == 1 or self.curvature == "fisher":
            return [self.score] * self.steps
        assert self.steps == 2 or self.gradient is not None
        middle = [self.gradient] * (self.steps - 2) if self.gradient is not None else []
        return [self.score, *middle, self.score]

    def releases(self) -> list[Statistics]:
        """Every release, in order (what a registry's ledger will hold)."""
        return ([self.moments] if self.moments is not None else []) + self.schedule()


@dataclass(frozen=True)
class WarmStart:
    """The warm start's public results: the model with its covariate ellipsoid (if released), the DP Laplace
    approximation, and the path of θ (public)."""

    model: Model
    laplace: LaplaceApproximation
    path: tuple[F64, ...]


def ellipsoid_radius(p: int, quantile: float) -> float:
    """R with P(χ²_p <= R²) = quantile: the radius that keeps that share of Gaussian covariates unclipped."""
    from scipy.stats import chi2

    return float(math.sqrt(chi2.ppf(quantile, max(p, 1))))


def with_ellipsoid(model: Model, total: F64, n_total: int, quantile: float | None) -> Model:
    """``model`` with the covariate ellipsoid a moments release's ``total`` sets (centre clipped into the
    schema's box, radius keeping ``quantile`` of Gaussian covariates); ``model`` itself when ``quantile`` is
    None."""
    reg = _covariate_model(model)
    mu, cov = moments_from_totals(total, reg.p, n_total)
    if quantile is None:
        return model
    mu = np.clip(mu, -reg.x_bound, reg.x_bound)  # the centre must lie in the schema's box
    return dataclasses.replace(  # type: ignore[type-var]
        model,
        x_center=tuple(float(v) for v in mu),
        x_cov=tuple(tuple(float(v) for v in row) for row in cov),
        x_radius=ellipsoid_radius(reg.p, quantile),
    )


def run_warm_start(
    model: Model, plan: WarmStartPlan, release: Release, n_total: int, start: F64, m: int
) -> WarmStart:
    """The coordinator's side of the warm start, over any transport (``release``), for ``m`` registries
    (each adds its noise share: the total's noise sd is √m times a registry's). With a basis B
    (``plan.basis``) the steps run in the coordinates γ of θ = Bγ (:class:`InBasis`), the releases are asked
    at θ = Bγ with the basis, and the result is carried back: N(Bγ̂, B Σ_γ Bᵀ), the path in θ."""
    if plan.basis is not None:
        b = np.asarray(plan.basis, dtype=np.float64)
        inner = InBasis(model, b)

        def in_basis(stats: Statistics, gamma: F64 | None, current: Model) -> F64:
            wire = dataclasses.replace(stats, basis=plan.basis)
            return release(wire, None if gamma is None else inner.theta(gamma)[0], model)

        start_g = inner.gamma(np.asarray(start, dtype=np.float64).reshape(-1))[0]
        ws = run_warm_start(inner, plan.without_basis(), in_basis, n_total, start_g, m)
        lap = ws.laplace
        cov = b @ lap.cov @ b.T
        back = LaplaceApproximation(inner.theta(lap.mean)[0], np.asarray(0.5 * (cov + cov.T)))
        return WarmStart(model, back, tuple(inner.theta(p)[0] for p in ws.path))

    if plan.moments is not None:
        model = with_ellipsoid(model, release(plan.moments, None, model), n_total, plan.ellipsoid_quantile)
    plan = plan.clipped_for(model)
    theta = np.asarray(start, dtype=np.float64).reshape(-1)
    path = [theta]
    info: F64 | None = None
    curvature: F64 | None = None  # the gradient steps' curvature: the last Fisher, secant-updated
    # (θ, ∇ log posterior at θ, its noise sd, whether the step from it was a jump) of the last release
    previous: tuple[F64, F64, float, bool] | None = None
    for stats in plan.schedule():
        total = release(stats, theta, model)
        stats = stats.at(model, theta)  # its noise scales as made at theta (the clip at the model's bound)
        lp_grad, _ = prior_precision(model, theta)
        grad = (unpack(total, model.d)[0] if stats.what == "score" else total) + lp_grad
        jumped = False
        if previous is None:  # the first step: Fisher scoring, or the model's public jump
            gram_noise = stats.sd2 * math.sqrt(m)
            new_theta, info = fisher_step(model, theta, total, plan.max_step, gram_noise)
            jump = getattr(model, "warm_start_jump", None)
            to = jump(theta, *floored_fisher(model, total, gram_noise), n_total) if jump else None
            if to is not None:  # e.g. logistic: the intercept at the released prevalence's logit
                new_theta, curv = to
                info = curv + prior_precision(model, new_theta)[1]
                jumped = True
            curvature = info
        elif plan.curvature == "fisher":  # every step: Fisher scoring with the fresh empirical Fisher
            new_theta, info = fisher_step(model, theta, total, plan.max_step, stats.sd2 * math.sqrt(m))
        else:  # later steps: the secant-updated curvature; a score release renews the covariance only
            assert curvature is not None
            if stats.what == "score":
                info = fisher_step(model, theta, total, None, stats.sd2 * math.sqrt(m))[1]
            if previous[3] is False:  # no secant across a jump: its path is long and curved
                noise = math.sqrt(m) * math.hypot(previous[2], stats.sd)  # the sd of y's noise
                curvature = secant_update(curvature, theta - previous[0], previous[1] - grad, noise)
            new_theta = np.asarray(theta + np.linalg.solve(curvature, grad), dtype=np.float64)
        previous = (theta, grad, stats.sd, jumped)
        theta = new_theta
        path.append(theta)
    assert info is not None
    return WarmStart(model, laplace_from(theta, info), tuple(path))


def _reclip(stats: Statistics, clip: float) -> Statistics:
    """``stats`` with the clip ``clip`` and its noise scaled so that μ is unchanged (Δ₁ = C, Δ₂ = C²)."""
    assert stats.clip is not None
    k = clip / stats.clip
    return dataclasses.replace(stats, clip=clip, sd=stats.sd * k, sd2=stats.sd2 * k * k)


def in_memory_release(datasets: Sequence[Data], normals: Sequence[Callable[[int], F64]]) -> Release:
    """The release of ``len(datasets)`` registries in one process (tests, simulations): each checks (and
    clips) its records with the release's model, adds its own noise from its ``normals[j]``, and the totals
    are summed as the ``sum`` reveal would."""

    def release(stats: Statistics, theta: F64 | None, model: Model) -> F64:
        k = block_size(stats.what, model)
        stats = stats.at(model, theta)
        parts = [
            noisy_release(stats, record_vectors(stats, model, model.check_data(data), theta), k, draw)
            for data, draw in zip(datasets, normals, strict=True)
        ]
        return release_totals(parts, stats)

    return release


def mean_error_cov(plan: WarmStartPlan, model: Model, laplace: LaplaceApproximation, m: int) -> F64:
    """The covariance of the DP Laplace mean's error from the last release's gradient noise: the final step
    is θ̂ = θ + Â⁻¹(g + e), e ~ N(0, m sd² I) (every registry's share), so the error is about Â⁻¹ e with
    covariance m sd² Â⁻²  (Â⁻¹ = the approximation's covariance). Public: the noise scales are the plan's
    as released for ``model`` (the model after the moments release: :meth:`WarmStartPlan.clipped_for`), at
    the approximation's mean when the clip is the model's bound at θ (the last release was one step before
    it). With a basis B the noise is of one size in its coordinates γ: the same there, carried back
    (B cov_γ Bᵀ)."""
    if plan.basis is not None:
        b = np.asarray(plan.basis, dtype=np.float64)
        inner = InBasis(model, b)
        cov_g = inner.inverse @ laplace.cov @ inner.inverse.T
        lap_g = LaplaceApproximation(inner.gamma(laplace.mean)[0], cov_g)
        err = mean_error_cov(plan.without_basis(), inner, lap_g, m)
        return np.asarray(b @ err @ b.T, dtype=np.float64)
    cov = laplace.cov
    sd = plan.clipped_for(model).score.at(model, laplace.mean).sd
    return np.asarray(m * sd**2 * cov @ cov, dtype=np.float64)


def last_move(path: Sequence[F64], laplace: LaplaceApproximation) -> float:
    """The warm start's last step in posterior sds (the approximation's metric): about the DP noise's
    error once the steps have converged, larger while they have not."""
    d = np.asarray(path[-1]) - np.asarray(path[-2])
    return float(np.sqrt(d @ np.linalg.solve(laplace.cov, d)))


def unconverged(
    plan: WarmStartPlan, model: Model, path: Sequence[F64], laplace: LaplaceApproximation, m: int
) -> str | None:
    """A warning when the warm start's last step moved the mean by more than 1.5 posterior sd and by more
    than twice what its DP noise explains (measured at 12,000 logistic records, μ = 0.5: three steps
    ended with moves of 2.4-4.1 sd against a noise of 0.66; five with 0.3-1.2 against 0.87), else None."""
    if len(path) < 2:
        return None
    move = last_move(path, laplace)
    noise = float(np.sqrt(np.trace(mean_error_cov(plan, model, laplace, m) @ np.linalg.inv(laplace.cov))))
    if move <= max(1.5, 2.0 * noise):
        return None
    return (
        f"the warm start had not converged: its last step moved the mean by {move:.2g} posterior sd (its "
        f"DP noise explains about {noise:.2g}); the independence proposal is off, so the chains mix slowly "
        "and the plan's ESS is optimistic; change: more [warm_start] steps (or a larger mu)"
    )
