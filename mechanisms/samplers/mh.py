"""Metropolis–Hastings kernels over many chains at once: one batch of decisions per round.

BlackJAX shape (STYLE.md): ``kernel.init(theta0) -> State``, ``kernel.step(rng, state) -> (State, Info)``.
State carries only what the next step needs; Info holds diagnostics. The kernel computes the public term of
the log acceptance ratio (prior ratio, proposal ratio, penalty correction) and asks its *decider*
(:mod:`mechanisms.samplers.decision`) for the accept bits; how the bits are made (plaintext, confidential
sum / blinded / sign, in memory or over the network) is not its business. ``rng`` is a public generator
(:mod:`mechanisms.samplers.seeds`); proposals are public.

* :class:`RandomWalkMH`: θ* = θ + L z, z ~ N(0, I), L Lᵀ = ``cov``.
* :class:`IndependenceMH`: θ* ~ q (:class:`GaussianProposal` or any object with ``logpdf``/``sample``).
* :class:`AdaptiveMH`: Haario, Saksman & Tamminen (2001) adaptive Metropolis from the public chain history.
  Schedule: iterations t < ``start`` use ``init_cov``; history = every chain's state after each iteration
  ``history_from`` ≤ t < ``stop`` (default history_from = start // 2; pooled over chains, running mean
  and covariance); at iterations t = start,
  start + every, ... < ``stop`` the proposal covariance is reset to (2.38²/d)(Ĉ + eps I); from ``stop`` on
  it is frozen. Draws after ``stop`` come from a fixed MH kernel with the exact posterior as its invariant
  law, so use only those (finite adaptation: no diminishing-adaptation argument needed). With
  ``final = "independence"`` the fixed kernel from ``stop`` on is an independence sampler instead, with
  proposal N(μ̄, κ² Ĉ): μ̄ the mean of the chains' history means, Ĉ the pooled within-chain covariance,
  κ = ``independence_scale`` (both frozen at ``stop``, from public chain states only). Near-Gaussian
  posteriors then give nearly independent draws per decision — what a privacy budget charged per
  decision wants.
* Penalty MH: any kernel built with ``penalty=`` (and the number of parties ``m``) adds the public
  correction −mσ²/2; each party adds λ_j ~ N(0, σ²) (:mod:`mechanisms.samplers.penalty`).

Proposals outside the model's support (log prior = −inf), and with a penalty's ``max_sensitivity`` the
proposals whose per-record sensitivity c(θ, θ*) exceeds it, are rejected without asking the parties (both
are symmetric restrictions of the proposal, so the posterior is unchanged); what is asked is decided by
public data only, so in-memory and networked runs ask identical batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Model, as_batch
from mechanisms.samplers.decision import Decider
from mechanisms.samplers.penalty import penalty_correction
from mechanisms.samplers.requests import DecisionRequest, Lazy, Penalty, record_sensitivity, within_cap
from mechanisms.samplers.seeds import PublicSeeds

F64 = npt.NDArray[np.float64]
Bits = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class MHState:
    theta: F64  # (chains, d)
    log_prior: F64  # (chains,)


@dataclass(frozen=True)
class MHInfo:
    accept: Bits  # (chains,)
    theta_star: F64  # (chains, d)
    public: F64  # (chains,) public term of every decision (−inf: rejected without asking)
    sigma: F64 | None  # penalty sd per chain (None without penalty)
    asked: int  # decisions sent to the decider


class Proposal(Protocol):
    def logpdf(self, theta: F64) -> F64: ...

    def sample(self, rng: np.random.Generator, n: int) -> F64: ...


@dataclass(frozen=True)
class GaussianProposal:
    mean: F64
    cov: F64

    def logpdf(self, theta: F64) -> F64:
        d = self.mean.shape[0]
        x = as_batch(theta, d) - self.mean
        chol = np.linalg.cholesky(self.cov)
        z = np.linalg.solve(chol, x.T).T
        return np.asarray(
            -0.5 * np.sum(z**2, axis=1) - np.log(np.diag(chol)).sum() - 0.5 * d * np.log(2 * np.pi)
        )

    def sample(self, rng: np.random.Generator, n: int) -> F64:
        chol = np.linalg.cholesky(self.cov)
        return np.asarray(self.mean + rng.standard_normal((n, self.mean.shape[0])) @ chol.T, dtype=np.float64)


def _chol(cov: npt.ArrayLike, d: int) -> F64:
    c = np.atleast_2d(np.asarray(cov, dtype=np.float64))
    if c.shape == (1, 1) and d > 1:
        c = c[0, 0] * np.eye(d)
    if c.shape != (d, d):
        raise ValueError(f"proposal covariance must be ({d}, {d}), got {c.shape}")
    return np.asarray(np.linalg.cholesky(c), dtype=np.float64)


def mh_decide(
    model: Model,
    decide: Decider,
    state: MHState,
    theta_star: F64,
    log_q_ratio: F64,
    penalty: Penalty | None,
    m: int | None,
    lazy: Lazy | None = None,
) -> tuple[MHState, MHInfo]:
    """Shared step: public term, ask only proposals inside the support, move accepted chains."""
    lp_star = model.log_prior(theta_star)
    public = lp_star - state.log_prior + log_q_ratio
    ok = np.isfinite(public)
    if lazy is not None and lazy.max_sensitivity is not None:  # lazy MH's public sensitivity cap
        c = np.full(theta_star.shape[0], np.inf)
        c[ok] = record_sensitivity(model, state.theta[ok], theta_star[ok])
        ok = ok & within_cap(c, lazy.max_sensitivity)
        public = np.where(ok, public, -np.inf)
    idx = np.flatnonzero(ok)
    sigma = None
    if penalty is not None:
        if m is None:
            raise ValueError("penalty MH needs the number of parties m for the public correction")
        c = np.full(theta_star.shape[0], np.inf)
        c[idx] = penalty.sensitivity(model, state.theta[idx], theta_star[idx])
        # a public cap on c: larger steps are rejected without asking (a symmetric restriction of the
        # proposal, so the chain keeps the same posterior)
        ok = ok & within_cap(c, penalty.max_sensitivity)
        idx = np.flatnonzero(ok)
        sigma = np.where(ok, penalty.sigma_of(np.where(ok, c, 0.0)), np.nan)
        public = np.where(ok, public + penalty_correction(sigma, m), -np.inf)
    accept = np.zeros(theta_star.shape[0], dtype=bool)
    if idx.size:
        req = DecisionRequest(
            kind="mh",
            theta=state.theta[idx],
            theta_star=theta_star[idx],
            public=public[idx],
            penalty=penalty,
        )
        accept[idx] = decide(req)
    theta = np.where(accept[:, None], theta_star, state.theta)
    lp = np.where(accept, lp_star, state.log_prior)
    info = MHInfo(accept, theta_star, np.where(ok, public, -np.inf), sigma, int(idx.size))
    return MHState(theta, lp), info


@dataclass
class RandomWalkMH:
    model: Model
    decide: Decider
    cov: npt.ArrayLike
    penalty: Penalty | None = None
    m: int | None = None
    lazy: Lazy | None = None

    def init(self, theta0: npt.ArrayLike) -> MHState:
        th = as_batch(theta0, self.model.d)
        lp = self.model.log_prior(th)
        if not np.isfinite(lp).all():
            raise ValueError("every chain must start inside the prior's support")
        return MHState(th.copy(), lp)

    def step(self, rng: np.random.Generator, state: MHState) -> tuple[MHState, MHInfo]:
        chol = _chol(self.cov, self.model.d)
        ts = state.theta + rng.standard_normal(state.theta.shape) @ chol.T
        zero = np.zeros(ts.shape[0])
        return mh_decide(self.model, self.decide, state, ts, zero, self.penalty, self.m, self.lazy)


@dataclass
class IndependenceMH:
    model: Model
    decide: Decider
    proposal: Proposal
    penalty: Penalty | None = None
    m: int | None = None
    lazy: Lazy | None = None

    def init(self, theta0: npt.ArrayLike) -> MHState:
        return RandomWalkMH.init(self, theta0)  # type: ignore[arg-type]

    def step(self, rng: np.random.Generator, state: MHState) -> tuple[MHState, MHInfo]:
        ts = self.proposal.sample(rng, state.theta.shape[0])
        q_ratio = self.proposal.logpdf(state.theta) - self.proposal.logpdf(ts)
        return mh_decide(self.model, self.decide, state, ts, q_ratio, self.penalty, self.m, self.lazy)


@dataclass(frozen=True)
class AdaptiveState:
    theta: F64
    log_prior: F64
    t: int  # iterations done
    count: int  # history size (states pooled over chains)
    mean: F64  # (chains, d) running mean of each chain's history
    m2: F64  # (d, d) sum over chains of within-chain outer products of deviations (Welford)
    cov: F64  # the current proposal covariance


@dataclass
class AdaptiveMH:
    model: Model
    decide: Decider
    init_cov: npt.ArrayLike
    start: int = 200
    every: int = 50
    stop: int = 1000
    history_from: int | None = None  # default: start // 2
    eps: float = 1e-8
    penalty: Penalty | None = None
    m: int | None = None
    lazy: Lazy | None = None
    final: str = "random-walk"  # the kernel from ``stop`` on: "random-walk" | "independence"
    independence_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.final not in ("random-walk", "independence"):
            raise ValueError(f"final must be 'random-walk' or 'independence', got {self.final!r}")
        if not self.independence_scale > 0:
            raise ValueError(f"independence_scale must be > 0, got {self.independence_scale}")

    def independence_proposal(self, state: AdaptiveState) -> GaussianProposal:
        """N(μ̄, κ² Ĉ) from the (frozen) history: μ̄ the mean of the chain means, Ĉ pooled within-chain."""
        d = self.model.d
        dof = state.mean.shape[0] * (state.count - 1)
        if state.count < 2 or dof <= d:
            raise ValueError("the independence proposal needs a history of at least 2 iterations per chain")
        emp = state.m2 / dof + self.eps * np.eye(d)
        return GaussianProposal(state.mean.mean(axis=0), self.independence_scale**2 * emp)

    def init(self, theta0: npt.ArrayLike) -> AdaptiveState:
        base = RandomWalkMH.init(self, theta0)  # type: ignore[arg-type]
        d = self.model.d
        c0 = _chol(self.init_cov, d)
        mean = np.zeros_like(base.theta)
        return AdaptiveState(base.theta, base.log_prior, 0, 0, mean, np.zeros((d, d)), c0 @ c0.T)

    def adapted_cov(self, state: AdaptiveState) -> F64:
        """Haario et al.'s 2.38²/d times the pooled *within-chain* covariance of the history.

        Pooling within-chain deviations (each chain about its own mean) keeps the spread *between* chains
        that have not yet met out of the estimate, which otherwise inflates the proposal by orders of
        magnitude when chains start dispersed.
        """
        d = self.model.d
        dof = state.mean.shape[0] * (state.count - 1)
        if state.count < 2 or dof <= d:
            return state.cov
        emp = state.m2 / dof
        return np.asarray((2.38**2 / d) * (emp + self.eps * np.eye(d)))

    def step(self, rng: np.random.Generator, state: AdaptiveState) -> tuple[AdaptiveState, MHInfo]:
        t = state.t
        cov = state.cov
        if self.start <= t < self.stop and (t - self.start) % self.every == 0:
            cov = self.adapted_cov(state)
        if self.final == "independence" and t >= self.stop:
            prop = self.independence_proposal(state)
            ts = prop.sample(rng, state.theta.shape[0])
            q_ratio = prop.logpdf(state.theta) - prop.logpdf(ts)
        else:
            chol = np.linalg.cholesky(cov)
            ts = state.theta + rng.standard_normal(state.theta.shape) @ chol.T
            q_ratio = np.zeros(ts.shape[0])
        inner, info = mh_decide(
            self.model,
            self.decide,
            MHState(state.theta, state.log_prior),
            ts,
            q_ratio,
            self.penalty,
            self.m,
            self.lazy,
        )
        count, mean, m2 = state.count, state.mean, state.m2
        hist_from = self.start // 2 if self.history_from is None else self.history_from
        if hist_from <= t < self.stop:  # one Welford step per chain, deviations pooled over chains
            x = inner.theta
            count += 1
            delta = x - mean
            mean = mean + delta / count
            m2 = m2 + delta.T @ (x - mean)
        return AdaptiveState(inner.theta, inner.log_prior, t + 1, count, mean, m2, cov), info


class Kernel(Protocol):
    def step(self, rng: np.random.Generator, state: Any) -> tuple[Any, MHInfo]: ...


@dataclass(frozen=True)
class Trace:
    draws: F64  # (steps, chains, d)
    accept: Bits  # (steps, chains)
    asked: int  # decisions sent to the decider

    @property
    def acceptance_rate(self) -> float:
        return float(self.accept.mean()) if self.accept.size else float("nan")


def run_kernel(
    kernel: Kernel,
    state: Any,
    n_steps: int,
    seeds: PublicSeeds,
    first_batch: int = 0,
    on_step: Callable[[int, MHInfo], None] | None = None,
) -> tuple[Any, Trace]:
    """Advance every chain ``n_steps`` times; step k uses the public stream of batch first_batch + k."""
    draws, accepts, asked = [], [], 0
    for k in range(n_steps):
        state, info = kernel.step(seeds.rng(first_batch + k), state)
        draws.append(np.asarray(state.theta).copy())
        accepts.append(info.accept)
        asked += info.asked
        if on_step is not None:
            on_step(k, info)
    d = np.asarray(state.theta).shape
    if not draws:
        return state, Trace(np.zeros((0, *d)), np.zeros((0, d[0]), dtype=bool), 0)
    return state, Trace(np.stack(draws), np.stack(accepts), asked)
