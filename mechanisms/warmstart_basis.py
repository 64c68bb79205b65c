"""The DP warm start in a public basis (:mod:`mechanisms.warmstart`, ``Statistics.basis``): a record's score
released as Bᵀ ∇_θ log p(x | θ), the score in the coordinates γ of θ = Bγ, and the coordinator's steps made in
those coordinates.

Why: a release adds noise of one size to every coordinate of the summed scores, clipped (or bounded) in L2.
When the parameters have very different posterior scales — a formula's ``age`` in years beside a 0/1
indicator and the intercept, ‖∇‖ dominated by the age column (up to 100) — the noise that the largest
coordinate's bound sets swamps the small ones (measured on a logistic formula study of 77,000 records, 0.7 %
prevalence: the DP Laplace approximation 20–40 posterior sd off at μ = 1 with the exact bound, ~1 sd in the
pilot's basis). In a basis B with B Bᵀ ≈ the posterior covariance every coordinate has a posterior sd of
about 1 and the noise is of one size in posterior sds, as the demo's covariate ellipsoid achieves for the
built-in logistic model. B is public (a planned run takes it from the pilot's Laplace covariance:
``coordinator.planner``), so the release's privacy is its clip's, whatever B is.

:func:`score_bound` is the model's public bound on ‖Bᵀs‖ (exact for formula models, whose
``score_norm_bound`` takes the basis; ‖B‖₂ times the bound otherwise); :class:`InBasis` is the model in γ
(the coordinator's steps: prior, jump and bound in γ, the likelihood the registries' basis release sums the
scores of). Pure: no I/O, no randomness.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from mechanisms.models.base import F64, Column, Data, Model, as_batch

__all__ = ["InBasis", "has_score_bound", "score_bound"]


def _takes_basis(fn: Any) -> bool:
    try:
        return "basis" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def score_bound(model: Model, theta: F64 | None, basis: F64 | None = None) -> float | None:
    """The model's public bound on a record's score norm ‖Bᵀ ∇_θ log p(x | θ)‖₂ at ``theta`` (None: the
    bound at every θ, or None when it depends on θ), B = ``basis`` (None: the identity). A model whose
    ``score_norm_bound`` takes ``basis`` gives it; for another the spectral norm of B times its bound (valid:
    ‖Bᵀs‖ ≤ ‖B‖₂ ‖s‖). None when the model has no ``score_norm_bound``."""
    fn = getattr(model, "score_norm_bound", None)
    if fn is None:
        return None
    if basis is None:
        return fn(theta)  # type: ignore[no-any-return]
    if _takes_basis(fn):
        return fn(theta, basis=basis)  # type: ignore[no-any-return]
    plain = fn(theta)
    return None if plain is None else float(plain) * float(np.linalg.norm(basis, 2))


def has_score_bound(model: Model) -> bool:
    """Whether the model bounds a record's score norm at all (at every θ, or at each θ: probed at 0)."""
    if getattr(model, "score_norm_bound", None) is None:
        return False
    return score_bound(model, None) is not None or score_bound(model, np.zeros(model.d)) is not None


class InBasis(Model):
    """``base`` in the coordinates γ of θ = Bγ (B = ``basis``, public, invertible): log p(x | Bγ), the prior
    of θ at Bγ (the Jacobian is a constant), the score bound and the public jump of ``base`` carried over.
    The coordinator's view of a basis release; the registries evaluate ``base`` at θ and multiply the scores
    by Bᵀ (:func:`mechanisms.warmstart.record_vectors`), the same numbers."""

    name = "in-basis"

    def __init__(self, base: Model, basis: F64) -> None:
        self.base = base
        self.basis = np.asarray(basis, dtype=np.float64)
        self.inverse = np.linalg.inv(self.basis)
        curvature = getattr(base, "warm_start_curvature", None)
        if curvature is not None:
            self.warm_start_curvature = curvature

    @property
    def param_names(self) -> tuple[str, ...]:
        return self.base.param_names

    @property
    def schema(self) -> tuple[Column, ...]:
        return self.base.schema

    def theta(self, gamma: F64) -> F64:
        """θ = Bγ (proposals, d)."""
        return np.asarray(as_batch(gamma, self.d) @ self.basis.T, dtype=np.float64)

    def gamma(self, theta: F64) -> F64:
        """γ = B⁻¹θ (proposals, d)."""
        return np.asarray(as_batch(theta, self.d) @ self.inverse.T, dtype=np.float64)

    def in_bounds(self, theta: F64) -> Any:
        return self.base.in_bounds(self.theta(theta))

    def log_prior(self, theta: F64) -> F64:
        return self.base.log_prior(self.theta(theta))

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return self.gamma(self.base.sample_prior(rng, n))

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        return self.base.record_log_likelihood(data, self.theta(theta))

    def n_records(self, data: Data) -> int:
        return self.base.n_records(data)

    def score_norm_bound(self, theta: F64 | None = None) -> float | None:
        """sup over records of ‖∇_γ log p(x | Bγ)‖ = ‖Bᵀ ∇_θ log p‖ at θ = Bγ (:func:`score_bound`)."""
        at = None if theta is None else self.theta(theta)[0]
        return score_bound(self.base, at, self.basis)

    def warm_start_jump(self, theta: F64, grad: F64, fisher: F64, n: int) -> tuple[F64, F64] | None:
        """``base``'s jump, its inputs and result carried between the coordinates (g = B⁻ᵀg̃, F = B⁻ᵀF̃B⁻¹;
        γ' = B⁻¹θ', F̃' = BᵀF'B)."""
        jump = getattr(self.base, "warm_start_jump", None)
        if jump is None:
            return None
        inv = self.inverse
        out = jump(self.theta(theta)[0], inv.T @ grad, inv.T @ fisher @ inv, n)
        if out is None:
            return None
        to, curv = out
        return np.asarray(inv @ to, dtype=np.float64), np.asarray(self.basis.T @ curv @ self.basis)
