"""The numerical steps of the DP warm start (:mod:`mechanisms.warmstart`) on public values only: the prior's
gradient and precision, the secant (BFGS) update of a curvature, a positive-definite repair of a noisy
matrix, and the converged Laplace approximation of pooled records (a simulation's reference, or a planning
pilot on public synthetic records). Pure: no I/O, no randomness."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize

from mechanisms.models.base import F64, Data, Model

__all__ = ["exact_laplace", "nearest_pd", "prior_precision", "secant_update"]


def nearest_pd(mat: F64, floor: float) -> F64:
    """The symmetric matrix with eigenvalues raised to ``floor`` (a noisy Gram matrix can be indefinite)."""
    sym = 0.5 * (mat + mat.T)
    w, v = np.linalg.eigh(sym)
    return np.asarray((v * np.maximum(w, floor)) @ v.T, dtype=np.float64)


def prior_precision(model: Model, theta: F64, rel_step: float = 1e-4) -> tuple[F64, F64]:
    """(∇ log π(θ), −∇² log π(θ)) by central differences (the prior is public)."""
    th = np.asarray(theta, dtype=np.float64).reshape(-1)
    d = th.size
    h = rel_step * np.maximum(1.0, np.abs(th))

    def lp(x: F64) -> F64:
        return np.asarray(model.log_prior(np.atleast_2d(x)), dtype=np.float64)

    eye = np.diag(h)
    grad = (lp(th + eye) - lp(th - eye)) / (2 * h)
    hess = np.zeros((d, d))
    for i in range(d):
        for j in range(i, d):
            pp = lp(th + eye[i] + eye[j])[0]
            pm = lp(th + eye[i] - eye[j])[0]
            mp = lp(th - eye[i] + eye[j])[0]
            mm = lp(th - eye[i] - eye[j])[0]
            hess[i, j] = hess[j, i] = (pp - pm - mp + mm) / (4 * h[i] * h[j])
    return np.asarray(grad, dtype=np.float64), nearest_pd(-hess, 1e-12)


def secant_update(info: F64, s: F64, y: F64, noise_sd: float = 0.0) -> F64:
    """The BFGS update of a curvature (negative Hessian) ``info`` from a step ``s`` and the fall of the
    gradient along it ``y`` (≈ H s): the gradient-only steps would otherwise keep the curvature of the
    first score release, whose empirical Fisher away from the mode is too large, so that every step leaves
    about half the distance (measured: four steps left the mean 0.7 posterior sd off at 100,000 logistic
    records; five secant steps reach it within 0.002 sd without noise). Skipped when yᵀs <= 0 (no positive
    curvature seen), so the result stays positive definite, and when y is not at least ten times its noise
    (``noise_sd`` per coordinate, the two gradient releases' DP noise): near the mode the steps are as
    small as the noise and their secant would be noise."""
    if float(np.linalg.norm(y)) < 10.0 * noise_sd * math.sqrt(y.size):
        return info
    ys = float(y @ s)
    bs = info @ s
    sbs = float(s @ bs)
    if not (ys > 0.0 and sbs > 0.0):
        return info
    out = info - np.outer(bs, bs) / sbs + np.outer(y, y) / ys
    return np.asarray(0.5 * (out + out.T), dtype=np.float64)


def _hessian(f: object, x: F64, h: F64) -> F64:
    d = x.size
    eye = np.diag(h)
    out = np.zeros((d, d))
    fx = f(x)  # type: ignore[operator]
    for i in range(d):
        for j in range(i, d):
            if i == j:
                v = (f(x + eye[i]) - 2 * fx + f(x - eye[i])) / h[i] ** 2  # type: ignore[operator]
            else:
                v = (
                    f(x + eye[i] + eye[j]) - f(x + eye[i] - eye[j]) - f(x - eye[i] + eye[j])  # type: ignore[operator]
                    + f(x - eye[i] - eye[j])  # type: ignore[operator]
                ) / (4 * h[i] * h[j])
            out[i, j] = out[j, i] = v
    return out


def exact_laplace(
    model: Model, pooled: Data, callback: Callable[[F64], None] | None = None
) -> tuple[F64, F64]:
    """(mode, inverse Hessian) of the log posterior of ``pooled`` (records in one place: a simulation's
    reference, or a planning pilot on public synthetic records; never a registry's private data).
    ``callback`` is called with the optimiser's point after each of its iterations (an exception raised
    there stops the fit and propagates: a caller's time limit)."""

    def neg(th: F64) -> float:
        t = np.atleast_2d(th)
        return -float(model.log_prior(t)[0] + model.log_likelihood(pooled, t)[0])

    lo, hi = np.asarray(model.lower, dtype=np.float64), np.asarray(model.upper, dtype=np.float64)
    start = np.clip(np.zeros(model.d), lo + 1e-6, hi - 1e-6)
    if np.isfinite(lo).any() or np.isfinite(hi).any():  # a bounded parameter (a probability): stay inside
        inner = [
            (a + 1e-9 if np.isfinite(a) else None, b - 1e-9 if np.isfinite(b) else None)
            for a, b in zip(lo, hi, strict=True)
        ]
        res = optimize.minimize(
            neg, start, method="L-BFGS-B", bounds=inner, options={"maxiter": 2000}, callback=callback
        )
    else:
        res = optimize.minimize(
            neg, start, method="BFGS", options={"gtol": 1e-8, "maxiter": 2000}, callback=callback
        )
    mode = np.asarray(res.x, dtype=np.float64)
    h = 1e-4 * np.maximum(1.0, np.abs(mode))
    hess = _hessian(neg, mode, h)
    hess = 0.5 * (hess + hess.T)
    w, v = np.linalg.eigh(hess)
    cov = (v / np.maximum(w, 1e-12)) @ v.T
    return mode, np.asarray(cov, dtype=np.float64)
