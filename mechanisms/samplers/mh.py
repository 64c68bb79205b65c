"""Metropolis–Hastings kernels over many chains at once: one batch of decisions per round.

BlackJAX shape (STYLE.md): ``kernel.init(theta0) -> State``, ``kernel.step(rng, state) -> (State, Info)``.
State carries only what the next step needs; Info holds diagnostics. The kernel computes the public term of
the log acceptance ratio (prior ratio, proposal ratio, penalty correction) and asks its *decider*
(:mod:`mechanisms.samplers.decision`) for the accept bits; how the bits are made (plaintext, confidential
sum / blinded / sign, in memory or over the network) is not its business. ``rng`` is a public generator
(:mod:`mechanisms.samplers.seeds`); proposals are public.

* :class:`RandomWalkMH`: θ* = θ + L z, z ~ N(0, I), L Lᵀ = ``cov``.
* :class:`IndependenceMH`: θ* ~ q (:class:`GaussianProposal` or any object with ``logpdf``/``sample``).
* :class:`RefitIndependenceMH`: an independence sampler from a Gaussian refitted during the warm-up to the
  chains' own pooled states, then frozen (a DP Laplace approximation a few sds off the posterior is
  corrected by the warm-up's accepted states; exact after the freeze).
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
  With ``scale_adapt`` it also tunes each chain's scale (Andrieu & Thoms 2008, Algorithm 4): chain j's
  proposal covariance at iteration t is exp(2 s_jt) B_t, B_t = ``init_cov`` before the first Haario
  update and the Haario covariance after it, and for t < ``stop``
  s_j,t+1 = s_jt + γ_t (a_jt − α*), γ_t = (1 + t/10)^−0.6, a_jt chain j's accept bit of iteration t and α*
  the target acceptance (:func:`default_target_accept`, lowered for a lazy coin and a fixed-sd penalty:
  :func:`accept_target`); every s_j is reset to 0 at the first Haario update (the Haario covariance
  carries its own optimal scale 2.38²/d) and keeps adapting after it. One scale per chain, not one for
  all: a chain started in the prior's tail, thousands of posterior sds away, accepts about half its
  proposals while it travels and so grows its own steps, where a scale steered by the chains already in
  the posterior leaves it crawling through the whole warm-up (measured on the 2-parameter regression of
  tests/mechanisms/samplers/test_auto_tuning.py, posterior ~1,000x narrower than the prior, 64 chains:
  with one pooled scale 2 seeds of 3 kept a chain's mean 10 or more posterior sds off after 1,000 warm-up
  iterations; with a scale per chain none did). Only released accept bits and public chain states are
  used (post-processing: no privacy cost). From ``stop`` on each s_j and B are frozen, so the draws of
  every chain from there on are again those of a fixed posterior-invariant kernel.
* Penalty MH: any kernel built with ``penalty=`` (and the number of parties ``m``) adds the public
  correction −mσ²/2; each party adds λ_j ~ N(0, σ²) (:mod:`mechanisms.samplers.penalty`).

Proposals outside the model's support (log prior = −inf), and with a penalty's ``max_sensitivity`` the
proposals whose per-record sensitivity c(θ, θ*) exceeds it, are rejected without asking the parties (both
are symmetric restrictions of the proposal, so the posterior is unchanged); what is asked is decided by
public data only, so in-memory and networked runs ask identical batches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
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
PUBLIC_CAP = 2.0**16  # half the default fixed-point range of a term (hss.fixedpoint: 17 integer bits)


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
    step_size: F64 | None = None  # (chains,) √(tr Σ / d) of each chain's proposal covariance Σ this step


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
    # a public term past the decision format's range is refused by the parties; those proposals (a heavy-
    # tailed independence proposal's far draws) are rejected without asking: |public| <= cap is symmetric in
    # (θ, θ*) because this part of the public term is h(θ*) - h(θ), a restriction that keeps the posterior
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(public) & (np.abs(public) <= PUBLIC_CAP)
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
            chain=idx.astype(np.int64),
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
        out, info = mh_decide(self.model, self.decide, state, ts, zero, self.penalty, self.m, self.lazy)
        size = math.sqrt(float(np.sum(chol**2)) / self.model.d)  # tr(L Lᵀ) = Σ L²
        return out, dataclasses.replace(info, step_size=np.full(ts.shape[0], size))


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
        out, info = mh_decide(self.model, self.decide, state, ts, q_ratio, self.penalty, self.m, self.lazy)
        cov = getattr(self.proposal, "cov", None)  # a Gaussian proposal's covariance (for the step size)
        if cov is None:
            return out, info
        size = math.sqrt(float(np.trace(np.atleast_2d(cov))) / self.model.d)
        return out, dataclasses.replace(info, step_size=np.full(ts.shape[0], size))


@dataclass(frozen=True)
class RefitState:
    """The refitting independence sampler's state: the chains, the proposal's current base (mean, cov,
    before inflation), and the running moments of the states pooled over the chains since ``pool_from``."""

    theta: F64
    log_prior: F64
    t: int  # iterations done
    mean: F64  # (d,) the proposal's centre
    cov: F64  # (d, d) the proposal's base covariance (the proposal is N(mean, κ² cov))
    count: int = 0  # states pooled (chains × iterations)
    pool_mean: F64 | None = None  # (d,) their running mean
    pool_m2: F64 | None = None  # (d, d) their running sum of outer products of deviations (Welford)
    run_len: F64 | None = None  # (chains,) how long each chain has held its current state in the pool
    sum_h2: float = 0.0  # the sum of the squared holding times of the pool's earlier (left) states

    def pooled_ess(self) -> float:
        """The pool's effective number of states (Kish): each distinct state held h iterations is one draw
        of weight h, so (Σh)² / Σh²; ``count`` when the holding times are not tracked."""
        if self.run_len is None:
            return float(self.count)
        h2 = self.sum_h2 + float(np.sum(np.asarray(self.run_len) ** 2))
        return float(self.count) ** 2 / h2 if h2 > 0 else 0.0


def refit_base(state: RefitState, d: int, min_sd_ratio: float) -> tuple[F64, F64]:
    """A refitted proposal's base after a stage: the pooled states' mean and covariance shrunk toward the
    previous base (``state.mean``, ``state.cov``) by what the pool's evidence supports, no narrower than
    ``min_sd_ratio`` of the previous base in any direction; the previous base when the pool is too small
    (fewer than 2(d + 1) states). Also what a plan simulates (``mechanisms.planning``).

    The shrinkage is James–Stein's (positive part) in the previous base's whitened coordinates, with the
    pool's effective number of states k (:meth:`RefitState.pooled_ess`: a chain that accepts little holds few
    distinct states, and its pool of chains × iterations states estimates no better than those):

    * the covariance's log eigenvalues l (whitened: the previous base is 0) are scaled by
      max(0, 1 − d(d + 1) / (k Σ l²)): were the previous base right, the sample covariance of k draws would
      scatter around it with E Σ (w − 1)² = d(d + 1)/k (Wishart), and a spread no larger than that is noise;
      and an eigenvalue w < 1 narrows the proposal only by what lies below the Marchenko–Pastur lower edge
      (1 − √(d/k))², where the smallest of k draws of the previous base would put it: an independence
      proposal narrower than the posterior loses its tails (the importance weights are unbounded), one
      wider only costs acceptance, so the narrowing is the direction that must be shown, not estimated;
    * the mean moves by max(0, 1 − d / T) of the pooled mean's offset, T = k zᵀ W⁻¹ z its Hotelling
      statistic (z the whitened offset, W the shrunk covariance), whose expectation is d were the previous
      base's centre right.

    A proposal several sds off (a DP approximation 2–3.6 sds off, issue 35) gives T ≫ d and is refitted
    almost fully; a good proposal and a pool of a few dozen distinct states leave it almost unchanged (the
    planned Weibull run's refit on about 30 distinct states moved it 0.81 sd and cost it two thirds of its
    ESS before this shrinkage)."""
    if state.count < 2 * (d + 1) or state.pool_mean is None or state.pool_m2 is None:
        return state.mean, state.cov
    k = state.pooled_ess()
    emp = state.pool_m2 / (state.count - 1)
    chol = np.linalg.cholesky(state.cov)
    white = np.linalg.solve(chol, np.linalg.solve(chol, emp).T)  # L⁻¹ C L⁻ᵀ
    w, v = np.linalg.eigh(0.5 * (white + white.T))
    logw = np.log(np.maximum(w, 1e-12))
    spread = float(k * np.sum(logw**2))
    keep = max(0.0, 1.0 - d * (d + 1) / spread) if spread > 0 else 0.0
    shrunk = keep * logw
    # narrowing only beyond the Marchenko-Pastur lower edge (1 - sqrt(d/k))^2: the smallest eigenvalue k
    # draws of the previous base itself would show (k = 30, d = 4: 0.40, an sd ratio of 0.63)
    edge = (1.0 - math.sqrt(d / k)) ** 2 if k > d else 0.0
    beyond = np.log(np.minimum(1.0, np.maximum(w, 1e-12) / edge)) if edge > 0 else np.zeros(d)
    shrunk = np.where(logw < 0, np.maximum(shrunk, beyond), shrunk)
    w = np.maximum(np.exp(shrunk), min_sd_ratio**2)
    cov = chol @ (v * w) @ v.T @ chol.T
    z = np.linalg.solve(chol, np.asarray(state.pool_mean) - state.mean)
    zv = v.T @ z  # in the shrunk covariance's eigenbasis
    hotelling = float(k * np.sum(zv**2 / w))
    move = max(0.0, 1.0 - d / hotelling) if hotelling > 0 else 0.0
    mean = state.mean + move * (np.asarray(state.pool_mean) - state.mean)
    return np.asarray(mean, dtype=np.float64), np.asarray(0.5 * (cov + cov.T))


WARM_INFLATE = 1.5  # a refitted proposal's inflation during the warm-up (heavier than the frozen one's)


@dataclass
class RefitIndependenceMH:
    """An independence sampler whose Gaussian proposal is refitted, during the warm-up, to the chains' own
    states (issue 35 item 4: proposals that survive a poor approximation), then frozen.

    Iterations t < ``refits[-1]`` are the warm-up: the proposal is N(mean, ``warm_inflate``² cov), starting
    from (``mean0``, ``cov0``) (e.g. the DP Laplace approximation); at each t in ``refits`` the base becomes
    the mean and covariance of every chain's states pooled over the second half of the stage that ends there
    (an approximation of the posterior's that needs no Laplace step: the states are what the chains
    accepted), shrunk toward the previous base by what the pool's distinct states can show
    (:func:`refit_base`). From ``refits[-1]`` on the proposal N(mean, ``inflate``² cov) is frozen, so the
    draws from there on are those of a fixed posterior-invariant kernel (finite adaptation: exact). Everything
    used is public (proposals from the public seed, the released accept bits, hence the chain states): no
    privacy cost beyond the decisions themselves.

    A refit never narrows the proposal below ``min_sd_ratio`` of the previous one in any direction (in the
    previous covariance's whitened coordinates, eigenvalues are raised to ``min_sd_ratio``²): chains that
    accepted little during a stage leave few distinct states, whose spread understates the posterior's,
    and a proposal narrower than the posterior mixes badly in its tails (the chain stays exact either way).
    A stage in which the pooled states are too few to estimate a covariance keeps the previous proposal."""

    model: Model
    decide: Decider
    mean0: F64
    cov0: F64
    refits: tuple[int, ...]
    warm_inflate: float = WARM_INFLATE
    inflate: float = 1.1
    min_sd_ratio: float = 0.5
    penalty: Penalty | None = None
    m: int | None = None
    lazy: Lazy | None = None

    def __post_init__(self) -> None:
        r = tuple(int(x) for x in self.refits)
        if not r or any(b <= a for a, b in zip((0, *r), r, strict=False)):
            raise ValueError(f"refits must be increasing iterations > 0, got {self.refits}")
        if not (self.warm_inflate >= 1.0 and self.inflate >= 1.0):
            raise ValueError(f"inflations must be >= 1, got {self.warm_inflate}, {self.inflate}")
        if not 0.0 < self.min_sd_ratio <= 1.0:
            raise ValueError(f"min_sd_ratio must be in (0, 1], got {self.min_sd_ratio}")
        self.refits = r

    @property
    def frozen_from(self) -> int:
        """The first iteration of the fixed kernel (draws from here on are exact)."""
        return self.refits[-1]

    def init(self, theta0: npt.ArrayLike) -> RefitState:
        base = RandomWalkMH.init(self, theta0)  # type: ignore[arg-type]
        mean = np.asarray(self.mean0, dtype=np.float64).reshape(self.model.d)
        cov = np.asarray(self.cov0, dtype=np.float64).reshape(self.model.d, self.model.d)
        return RefitState(base.theta, base.log_prior, 0, mean.copy(), cov.copy())

    def proposal(self, state: RefitState) -> GaussianProposal:
        kappa = self.inflate if state.t >= self.frozen_from else self.warm_inflate
        return GaussianProposal(state.mean, kappa**2 * state.cov)

    def _stage(self, t: int) -> tuple[int, int]:
        """(start, end) of the warm-up stage holding iteration t (t < frozen_from)."""
        start = 0
        for end in self.refits:
            if t < end:
                return start, end
            start = end
        raise ValueError(f"iteration {t} is past the warm-up")

    def refit(self, state: RefitState) -> tuple[F64, F64]:
        """The base after a stage (:func:`refit_base`)."""
        return refit_base(state, self.model.d, self.min_sd_ratio)

    def step(self, rng: np.random.Generator, state: RefitState) -> tuple[RefitState, MHInfo]:
        t = state.t
        mean, cov = state.mean, state.cov
        count, pmean, pm2 = state.count, state.pool_mean, state.pool_m2
        run_len, sum_h2 = state.run_len, state.sum_h2
        if t in self.refits:
            mean, cov = self.refit(state)
            count, pmean, pm2, run_len, sum_h2 = 0, None, None, None, 0.0
        state = RefitState(state.theta, state.log_prior, t, mean, cov, count, pmean, pm2, run_len, sum_h2)
        prop = self.proposal(state)
        ts = prop.sample(rng, state.theta.shape[0])
        q_ratio = prop.logpdf(state.theta) - prop.logpdf(ts)
        inner, info = mh_decide(
            self.model, self.decide, MHState(state.theta, state.log_prior), ts, q_ratio, self.penalty, self.m,
            self.lazy,
        )  # fmt: skip
        if t < self.frozen_from:
            start, end = self._stage(t)
            if t >= (start + end) // 2:  # pool the second half of the stage (Welford, every chain's state)
                d = self.model.d
                moved = np.any(inner.theta != state.theta, axis=1)
                if run_len is None:  # the stage's first pooled iteration: every chain's state starts a run
                    run_len = np.ones(inner.theta.shape[0])
                else:  # a chain that moved leaves its held state (its holding time is final) for a new one
                    sum_h2 += float(np.sum(run_len[moved] ** 2))
                    run_len = np.where(moved, 1.0, run_len + 1.0)
                pmean = np.zeros(d) if pmean is None else pmean
                pm2 = np.zeros((d, d)) if pm2 is None else pm2
                for x in inner.theta:
                    count += 1
                    delta = x - pmean
                    pmean = pmean + delta / count
                    pm2 = pm2 + np.outer(delta, x - pmean)
        out = RefitState(inner.theta, inner.log_prior, t + 1, mean, cov, count, pmean, pm2, run_len, sum_h2)
        size = math.sqrt(float(np.trace(prop.cov)) / self.model.d)
        return out, dataclasses.replace(info, step_size=np.full(ts.shape[0], size))


LOG_SCALE_MAX = 25.0  # numerical guard on |s|: the scale factor e^s stays within [1.4e-11, 7.2e10]


def default_target_accept(d: int) -> float:
    """The target acceptance of a random-walk Metropolis kernel in dimension d: 0.44 for d = 1 (Gelman,
    Roberts & Gilks 1996), 0.234 for d >= 5 (the d → ∞ optimum of Roberts, Gelman & Gilks 1997, already
    close for d ≈ 5), 0.35 for d = 2..4 (between the two). The efficiency is flat near its optimum — the
    d → ∞ efficiency ℓ² · 2Φ(−ℓ/2) of proposal scale ℓ/√d (Roberts, Gelman & Gilks 1997) is 94 % of the
    best at acceptance 0.15 and 86 % at 0.4 — so the exact value matters little."""
    if d < 1:
        raise ValueError(f"dimension must be >= 1, got {d}")
    return 0.44 if d == 1 else 0.35 if d <= 4 else 0.234


def accept_target(
    d: int,
    target_accept: float | None = None,
    penalty: Penalty | None = None,
    m: int | None = None,
    lazy: Lazy | None = None,
) -> float:
    """α*, the rate the released accept bits of a scale-adapting kernel are steered to.

    Starting from α₀ = ``target_accept`` (default :func:`default_target_accept`): with a fixed-sd penalty
    the log acceptance ratio carries extra noise N(−mσ²/2, mσ²) whatever the step, so the noise-free
    kernel's log-ratio spread q = −2Φ⁻¹(α₀/2) (the d → ∞ relation α = 2Φ(−q/2)) is added to it in
    quadrature: α = 2Φ(−√(q² + mσ²)/2) — the acceptance of the noise-free optimum's step under the noise,
    within 3 % of the best efficiency ℓ² · 2Φ(−√(ℓ² + mσ²)/2) for √m σ ≤ 5 (a target above the noise's own
    ceiling 2Φ(−√m σ/2) would shrink the steps without end) — and a lazy coin with P(1) = γ multiplies the
    rate by γ (lazy MH is γ P + (1 − γ) I: P keeps its own optimal scale). The τ-form penalty's noise
    shrinks with the step, so it keeps α₀.
    """
    a = target_accept if target_accept is not None else default_target_accept(d)
    if penalty is not None and penalty.sd is not None:
        if m is None:
            raise ValueError("penalty MH needs the number of parties m for the public correction")
        std = NormalDist()
        q = -2.0 * std.inv_cdf(a / 2.0)
        a = 2.0 * std.cdf(-math.sqrt(q * q + m * penalty.sd**2) / 2.0)
    if lazy is not None:
        a *= lazy.gamma
    return float(a)


def robbins_monro_gain(t: int) -> float:
    """γ_t = (1 + t/10)^−0.6: Σγ_t = ∞ and Σγ_t² < ∞ (Andrieu & Thoms 2008), large for the first tens of
    iterations (a far-off initial scale is corrected in a few dozen steps)."""
    return float((1.0 + t / 10.0) ** -0.6)


def prior_proposal_cov(model: Model, draws: int = 2000) -> F64:
    """Σ₀ = (2.38²/d) diag(0.1 ŝ_k)²: the automatic proposal's public starting covariance.

    ŝ_k is the prior's spread in coordinate k from ``draws`` prior draws at seed 0 (public), measured as
    the interquartile range / 1.349 — the sd for a normal prior, and finite for heavy-tailed ones (a Cauchy
    prior's sample sd does not settle); the sd where the quartiles coincide. A posterior is narrower than
    its prior, so a tenth of the prior's spread errs large, which the Robbins–Monro scaling corrects fast:
    while nothing is accepted each iteration lowers s by γ_t α* (γ_0 = 1), so a scale 10x too large is
    corrected within the first 6 (α* = 0.44) to 13 (α* = 0.234) iterations.
    """
    d = model.d
    th = np.asarray(model.sample_prior(np.random.default_rng(0), draws), dtype=np.float64).reshape(draws, d)
    q75, q25 = np.percentile(th, [75.0, 25.0], axis=0)
    spread = np.where(q75 > q25, (q75 - q25) / 1.349, th.std(axis=0))
    if not (np.isfinite(spread).all() and (spread > 0).all()):
        raise ValueError(f"the prior of {model.name!r} has no usable spread for an automatic proposal")
    return np.asarray(np.diag((2.38**2 / d) * (0.1 * spread) ** 2), dtype=np.float64)


@dataclass(frozen=True)
class AdaptiveState:
    """The adaptive kernel's state: the chains, the public history's running moments, the proposal's base
    covariance and each chain's log scale (``log_scale`` None: every s_j = 0)."""

    theta: F64
    log_prior: F64
    t: int  # iterations done
    count: int  # history size (states pooled over chains)
    mean: F64  # (chains, d) running mean of each chain's history
    m2: F64  # (d, d) sum over chains of within-chain outer products of deviations (Welford)
    cov: F64  # the base covariance B of the last step (init_cov or the last Haario covariance)
    log_scale: F64 | None = None  # (chains,) s_j of the next step: chain j proposes N(θ_j, e^{2 s_j} B)


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
    scale_adapt: bool = False  # Robbins–Monro scaling of the proposal towards target_accept before stop
    target_accept: float | None = None  # the noise-free kernel's target (None: default_target_accept(d))

    def __post_init__(self) -> None:
        if self.final not in ("random-walk", "independence"):
            raise ValueError(f"final must be 'random-walk' or 'independence', got {self.final!r}")
        if not self.independence_scale > 0:
            raise ValueError(f"independence_scale must be > 0, got {self.independence_scale}")
        if self.target_accept is not None and not 0.0 < self.target_accept < 1.0:
            raise ValueError(f"target_accept must be in (0, 1), got {self.target_accept}")

    def accept_target(self) -> float:
        """α*, the rate this kernel's released accept bits are steered to (:func:`accept_target`)."""
        return accept_target(self.model.d, self.target_accept, self.penalty, self.m, self.lazy)

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
        zero = np.zeros(base.theta.shape[0])
        return AdaptiveState(base.theta, base.log_prior, 0, 0, mean, np.zeros((d, d)), c0 @ c0.T, zero)

    def _history_from(self) -> int:
        return self.start // 2 if self.history_from is None else self.history_from

    def window_starts(self) -> frozenset[int]:
        """With ``scale_adapt``: the iterations where the history restarts, 2s, 4s, ... (s = start: the first
        Haario update uses the whole history from history_from) while the window that starts there fits before
        ``stop`` at least once (the last one runs to ``stop``), as Stan's doubling slow windows: the
        covariance a chain ends the warm-up with is estimated from the later states only, not from its way in
        from a start far out in the prior."""
        out, r = set(), 2 * max(self.start, 1)  # after the first Haario update: its history is kept for it
        while 2 * r <= self.stop:
            out.add(r)
            r *= 2
        return frozenset(out)

    def _enough_history(self, count: int, chains: int) -> bool:
        return count >= 2 and chains * (count - 1) > self.model.d

    def adapted_cov(self, state: AdaptiveState) -> F64:
        """Haario et al.'s 2.38²/d times the pooled *within-chain* covariance of the history.

        Pooling within-chain deviations (each chain about its own mean) keeps the spread *between* chains
        that have not yet met out of the estimate, which otherwise inflates the proposal by orders of
        magnitude when chains start dispersed.
        """
        d = self.model.d
        if not self._enough_history(state.count, state.mean.shape[0]):
            return state.cov
        emp = state.m2 / (state.mean.shape[0] * (state.count - 1))
        return np.asarray((2.38**2 / d) * (emp + self.eps * np.eye(d)))

    def _first_haario(self, t: int, chains: int) -> bool:
        """Is t the first scheduled update with enough history (the history size at t is public: one state
        per iteration from history_from on)?"""
        if not self._enough_history(t - self._history_from(), chains):
            return False
        prev = t - self.every
        return t == self.start or not self._enough_history(prev - self._history_from(), chains)

    def step(self, rng: np.random.Generator, state: AdaptiveState) -> tuple[AdaptiveState, MHInfo]:
        t = state.t
        chains = state.theta.shape[0]
        cov = state.cov
        log_scale = np.zeros(chains) if state.log_scale is None else np.asarray(state.log_scale, np.float64)
        if self.start <= t < self.stop and (t - self.start) % self.every == 0:
            cov = self.adapted_cov(state)
            if self.scale_adapt and self._first_haario(t, chains):
                log_scale = np.zeros(chains)  # the Haario covariance carries its own scale 2.38²/d
        if self.final == "independence" and t >= self.stop:
            prop = self.independence_proposal(state)
            ts = prop.sample(rng, chains)
            q_ratio = prop.logpdf(state.theta) - prop.logpdf(ts)
            step_size = np.full(chains, math.sqrt(float(np.trace(prop.cov)) / self.model.d))
        else:
            chol = np.linalg.cholesky(cov)
            scale = np.exp(log_scale)
            ts = state.theta + scale[:, None] * (rng.standard_normal(state.theta.shape) @ chol.T)
            q_ratio = np.zeros(ts.shape[0])
            step_size = scale * math.sqrt(float(np.trace(cov)) / self.model.d)
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
        if self.scale_adapt and t < self.stop:  # Robbins–Monro on the released accept bits of this step
            step = robbins_monro_gain(t) * (info.accept.astype(np.float64) - self.accept_target())
            log_scale = np.clip(log_scale + step, -LOG_SCALE_MAX, LOG_SCALE_MAX)
        count, mean, m2 = state.count, state.mean, state.m2
        if self.scale_adapt and t in self.window_starts():  # the history restarts (doubling windows)
            count, mean, m2 = 0, np.zeros_like(mean), np.zeros_like(m2)
        if self._history_from() <= t < self.stop:  # one Welford step per chain, deviations pooled over chains
            x = inner.theta
            count += 1
            delta = x - mean
            mean = mean + delta / count
            m2 = m2 + delta.T @ (x - mean)
        out = AdaptiveState(inner.theta, inner.log_prior, t + 1, count, mean, m2, cov, log_scale)
        return out, dataclasses.replace(info, step_size=step_size)


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
