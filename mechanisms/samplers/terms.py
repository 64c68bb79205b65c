"""One party's private term of a batch of decisions: ℓ_j from its own records, plus its own secret noise.

This is the only code that touches a party's records; the party daemon (``parties/models_bridge.py``) and the
in-memory simulation (:class:`mechanisms.samplers.decision.LocalParties`) both call :func:`party_terms`, so a
networked run and an in-memory run compute the same terms.

Noise, all from the party's CSPRNG (``hss.randomness.SecureRandom``), drawn in this order per batch:
λ_j ~ N(0, σ²) (penalty MH only), V_j ~ Gamma(1/m, 1) (so that Σ_j V_j ~ Exp(1) = −log U: the accept event
of MH / rejection sampling is exactly S ≥ 0), and W_j ~ Gamma(1/m, 1) (blinded reveal only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hss.modes import REVEAL
from hss.randomness import SecureRandom
from mechanisms import noise
from mechanisms.models.base import Data, Model
from mechanisms.samplers.requests import DecisionRequest

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Terms:
    """One party's terms of a batch: what it brings to the decision protocol (the one type for the daemon's
    analyses and the in-memory parties)."""

    values: F64  # ℓ_j + noise, one per decision
    blind: F64 | None  # W_j (blinded reveal)
    public: F64 | None = None  # the public term (the same at every party), when the party sends it
    clipped_records: int | None = None  # penalty with c = "clip": log-ratios clipped (None: no clipping)
    clipped_covariates: int | None = None  # records moved into the model's public covariate region (once)


def log_ratio(
    model: Model, data: Data, request: DecisionRequest, log_bound: float | None = None
) -> tuple[F64, int]:
    """ℓ_j for every decision (no noise) and the number of clipped record log-ratios.

    MH: log p(X_j | θ*) − log p(X_j | θ), with per-record clipping when the penalty uses c = "clip".
    Rejection: log p(X_j | θ*) − log M_j with ``log_bound`` = log M_j (required), ≤ 0 when M_j is a bound.
    """
    if request.rejection:
        if log_bound is None:
            raise ValueError("a rejection term needs this party's bound log M_j")
        return model.log_likelihood(data, request.theta_star) - log_bound, 0
    assert request.theta is not None
    pen = request.penalty
    if pen is not None and pen.c == "clip":
        assert pen.b is not None
        per = model.record_log_likelihood(data, request.theta_star) - model.record_log_likelihood(
            data, request.theta
        )
        lim = (pen.b * np.linalg.norm(request.theta_star - request.theta, axis=1))[:, None]
        clipped = int(np.count_nonzero(np.abs(per) > lim))
        return np.asarray(np.clip(per, -lim, lim).sum(axis=1), dtype=np.float64), clipped
    return model.log_likelihood(data, request.theta_star) - model.log_likelihood(data, request.theta), 0


def party_noise(
    rng: SecureRandom, m: int, n: int, sigma: F64 | None, blinded: bool, exp_noise: bool = True
) -> tuple[F64, F64 | None]:
    """(λ_j + V_j, W_j or None) in the documented draw order."""
    total = np.zeros(n)
    if sigma is not None:
        total = total + noise.normal(rng, sigma, n)
    if exp_noise:
        total = total + noise.decision_gamma_shares(rng, m, n)
    blind = noise.decision_gamma_shares(rng, m, n) if blinded else None
    return total, blind


def party_terms(
    model: Model,
    data: Data,
    request: DecisionRequest,
    m: int,
    rng: SecureRandom,
    mode: str,
    log_bound: float | None = None,
    exp_noise: bool = True,
) -> Terms:
    """This party's terms x_j = ℓ_j + λ_j + V_j (and W_j for the blinded reveal)."""
    ell, clipped = log_ratio(model, data, request, log_bound)
    sigma = None
    if request.penalty is not None:
        assert request.theta is not None
        sigma = request.penalty.sigma(model, request.theta, request.theta_star)
    nz, blind = party_noise(rng, m, request.n, sigma, mode in REVEAL and REVEAL[mode].blinding, exp_noise)
    values = ell + nz
    if not np.isfinite(values).all():
        raise ValueError("a party term is not finite (a proposal outside the model's support?)")
    clipping = request.penalty is not None and request.penalty.c == "clip"
    return Terms(values, blind, public=request.public, clipped_records=clipped if clipping else None)
