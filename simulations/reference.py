"""A converged plain posterior on the pooled records: the reference a confidential run is compared with.

Not the same kernel with the same seed (which inherits the confidential run's tuning and burn-in), but an
exact sampler of its own, fitted to the pooled (and, with a public covariate region, clipped) records: the
surrogate transition method (Liu 2001, *Monte Carlo Strategies in Scientific Computing*, §9.4.3; delayed
acceptance, Christen & Fox 2005):

1. the posterior mode and curvature by numerical optimisation (:func:`mechanisms.warmstart.exact_laplace`);
2. a concave quadratic ℓ̃ of the pooled log-likelihood in the model's likelihood coordinates ψ
   (``Model.likelihood_coordinates``: the effects u = σ z of a non-centred random intercept, not σ and z;
   θ for most models), from finite differences at the mode in one batched evaluation. The log-likelihood of
   many records is close to quadratic in ψ; the hierarchy (the funnel of σ and z) is in the prior, which
   the surrogate posterior π̃ ∝ prior × e^ℓ̃ keeps exactly;
3. a random-walk Metropolis kernel P for π̃ (no records: cheap), its covariance and scale tuned on π̃ alone
   and then frozen;
4. each iteration, every chain runs K steps of P from its θ to a proposal θ*, accepted with probability
   min(1, e^{r(θ*) − r(θ)}), r = ℓ − ℓ̃: the only evaluation of the records (the current state's is kept).
   P^K is reversible with respect to π̃, so this is a Metropolis–Hastings step for the exact posterior
   whatever the surrogate's quality: a poor surrogate costs acceptance, never correctness;
5. every third iteration does the same with the tempered surrogate τ ℓ̃ (τ = 0.3; its own kernel P_τ,
   r = ℓ − τ ℓ̃): where the log-likelihood's tail is heavier than the quadratic's (a rare outcome's
   log-rate, a probability near 0), a chain out there has a high r and the untempered step rarely leaves;
   the tempered one does. A cycle of kernels that each keep the posterior keeps it too. On a Beta(2, 12)
   posterior from 12 records the tail ESS of 1,000 iterations went from 279 to 4,926; on the 77,000-record
   random-intercept model it is neutral.

Why not the Laplace approximation as an independence proposal (the sampler before issue 40): on a
hierarchical posterior the joint mode of (σ, z) is far from their mass, and on a random-intercept model of
77,000 records that chain accepted 6% of its proposals and stopped, not converged, at ESS 58 / R-hat 1.19
after an hour; each of its steps also evaluated the records twice and rebuilt the formula's design.

Run in blocks until its bulk and tail ESS reach ``min_ess`` and split R-hat <= 1.01, or ``max_iterations``,
or ``max_seconds`` (a time cap: it stops with what it has, labelled NOT converged); ``progress`` hears where
it is. Public seeds only (no secret noise: it is plain MH on data the simulation holds in one place). Its
diagnostics go with it, so a reference that did not converge is labelled as such.

A model with a registry random intercept (``Model.random_intercept``; a blocked run's) walks its surrogate
in the effects' coordinates (:class:`EffectCoordinates`: u_j = σ_u z_j instead of z_j, the density's
Jacobian included): in (log σ_u, z) the records pin each u_j = σ_u z_j, a curved ridge the Gaussian walk
crossed slowly (examples/registry-effects.toml, 77,000 records: min ESS 63 and R-hat 1.21 after 250
iterations x 16 chains); in u it is close to Gaussian (the same study: converged, min ESS 6,671 and R-hat
1.003 after 725 iterations, acceptance 0.70). :func:`blocked_reference` (the run's blocked scheme in plain
arithmetic, the blocked run's reference before; it reached neither target within 240 s on that study) is
kept for comparisons.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import arviz as az
import numpy as np

from mechanisms.models.base import F64, Data, Model
from mechanisms.samplers import GaussianProposal, PublicSeeds
from mechanisms.samplers.mh import default_target_accept
from mechanisms.warmstart import exact_laplace

RHAT_TARGET = 1.01
STAGES = {
    "mode": "finding the posterior mode",
    "surrogate": "fitting its surrogate",
    "warm-up": "in its warm-up (blocked sweeps)",
    "sampling": "sampling",
}


@dataclass(frozen=True)
class ReferenceProgress:
    """Where a reference is: ``stage`` (a key of :data:`STAGES`), iterations per chain so far, the min bulk
    and tail ESS and max R-hat of the last check (NaN before it), seconds since it started."""

    stage: str
    iterations: int
    chains: int
    ess: float
    rhat: float
    min_ess: float
    elapsed: float
    max_seconds: float | None


@dataclass(frozen=True)
class Reference:
    draws: F64  # (chains, draws, d) after warm-up; no draws when stopped before sampling
    mode: F64
    cov: F64  # the inverse Hessian at the mode
    ess_bulk: float  # min over parameters
    ess_tail: float
    rhat: float  # max over parameters
    iterations: int  # per chain, warm-up included
    min_ess: float = 0.0  # the ESS it was run to
    stopped: str = ""  # "" (the targets met), "time" (max_seconds), "iterations" (max_iterations)
    max_seconds: float | None = None
    stage: str = "sampling"  # where it was when it stopped (a time cap can stop it before sampling)
    acceptance: float = math.nan  # of the exact step
    inner_steps: int = 0  # K surrogate steps per proposal
    elapsed: float = 0.0  # seconds
    cpu: float = 0.0  # seconds of this process's CPU (below elapsed on a busy machine)
    method: str = ""  # what sampled it, when not plain_reference's surrogate transitions (blocked_reference)

    @property
    def converged(self) -> bool:
        """R-hat <= 1.01 and the bulk and tail ESS it was asked for."""
        return self.rhat <= RHAT_TARGET and min(self.ess_bulk, self.ess_tail) >= self.min_ess

    def why_stopped(self) -> str:
        """Why it stopped short of its targets ("" when it did not)."""
        if self.stopped == "time":
            return (
                f"stopped at the time cap of {self.max_seconds:g} s while {STAGES[self.stage]} (it had "
                f"{self.cpu:.0f} s of CPU)"
            )
        if self.stopped == "iterations":
            return f"stopped at its limit of {self.iterations} iterations"
        return ""

    def warning(self) -> str | None:
        """What a run compared with it should be warned of: None when it converged, else what it missed
        (R-hat, ESS) and why it stopped, with the key to change (``confar run``'s ``[reference]``)."""
        if self.converged:
            return None
        change = "; change: a larger [reference] max_seconds" if self.stopped == "time" else ""
        if self.draws.shape[1] == 0:
            return f"no reference posterior: it {self.why_stopped()}, before its first draws{change}"
        return (
            f"the reference posterior (a plain fit of the pooled records) did not converge: max R-hat "
            f"{self.rhat:.3f} (target <= {RHAT_TARGET}), min bulk ESS {self.ess_bulk:.0f} and min tail ESS "
            f"{self.ess_tail:.0f} (target {self.min_ess:.0f}) after {self.iterations} iterations x "
            f"{self.draws.shape[0]} chains"
            + (f"; {self.why_stopped()}" if self.stopped else "")
            + f". The run's z-scores against it are not to be trusted{change}"
        )

    def label(self) -> str:
        why = self.why_stopped()
        state = (
            "converged"
            if self.converged
            else f"NOT converged: target ESS {self.min_ess:.0f}, R-hat {RHAT_TARGET}"
            + (f"; {why}" if why else "")
        )
        method = self.method or (
            "plain MH on the pooled records (surrogate transitions: "
            f"{self.inner_steps} random-walk steps on a quadratic fit of the log-likelihood, some tempered, "
            f"then the exact test; acceptance {self.acceptance:.2f})"
        )
        return (
            f"{method}, {self.iterations} iterations x {self.draws.shape[0]} chains, min bulk ESS "
            f"{self.ess_bulk:.0f}, min tail ESS {self.ess_tail:.0f}, max R-hat {self.rhat:.4f} ({state})"
        )


def _diagnostics(draws: F64) -> tuple[float, float, float]:
    if draws.shape[1] < 4:
        return math.nan, math.nan, math.nan
    ds = az.convert_to_dataset(draws)
    bulk = float(np.min(az.ess(ds, method="bulk").to_array().values))
    tail = float(np.min(az.ess(ds, method="tail").to_array().values))
    rhat = float(np.max(az.rhat(ds).to_array().values))
    return bulk, tail, rhat


REFERENCE_MIN_ESS = 2000.0  # the reference's min bulk and tail ESS, at least ...
REFERENCE_ESS_RATIO = 4.0  # ... this many times the confidential run's


def run_ess(draws: F64) -> float:
    """The smallest bulk ESS over the parameters of draws (chains, draws, d); 0 when too short to say."""
    if draws.ndim != 3 or draws.shape[1] < 4:
        return 0.0
    ess = float(np.min(az.ess(az.convert_to_dataset(draws), method="bulk").to_array().values))
    return ess if np.isfinite(ess) else 0.0


@dataclass
class _State:
    """Where :func:`plain_reference` (or :func:`blocked_reference`) is (what its progress reports)."""

    stage: str = "mode"
    it: int = 0
    ess: float = math.nan
    rhat: float = math.nan


class _OutOfTime(Exception):
    """The time cap passed (raised inside the mode's optimiser and the surrogate's evaluations)."""


CHUNK = 16  # parameter values per evaluation of the pooled records (memory: CHUNK x records floats)


def pooled_log_likelihood(
    model: Model, pooled: Data, theta: F64, tick: Callable[[], None] | None = None
) -> F64:
    """log p(pooled | θ) per row of ``theta``, evaluated ``CHUNK`` rows at a time (``tick`` between chunks);
    -inf where it is not finite."""
    out = np.empty(theta.shape[0])
    for a in range(0, theta.shape[0], CHUNK):
        if tick is not None:
            tick()
        with np.errstate(all="ignore"):
            out[a : a + CHUNK] = model.log_likelihood(pooled, theta[a : a + CHUNK])
    return np.where(np.isfinite(out), out, -np.inf)


@dataclass(frozen=True)
class QuadraticSurrogate:
    """ℓ̃(θ) = g·x − ½ xᵀAx with x = ψ(θ) − ψ₀, A positive semi-definite: a concave quadratic of the
    log-likelihood in the model's likelihood coordinates ψ (up to a constant)."""

    model: Model
    psi0: F64
    grad: F64
    neg_hess: F64

    def __call__(self, theta: F64) -> F64:
        x = self.model.likelihood_coordinates(theta) - self.psi0
        return np.asarray(
            x @ self.grad - 0.5 * np.einsum("ni,ij,nj->n", x, self.neg_hess, x), dtype=np.float64
        )

    @classmethod
    def fit(
        cls, model: Model, pooled: Data, psi0: F64, spread: F64, tick: Callable[[], None] | None = None
    ) -> QuadraticSurrogate:
        """Central differences of the pooled log-likelihood at ψ₀ (1 + 2k + 2k(k − 1) values for k
        coordinates, evaluated together) with steps of 1% of ψ's ``spread``; the Hessian's positive
        eigenvalues clamped to 0 (a direction the records do not inform, e.g. an intercept against the
        registries' effects, is left to the prior)."""
        k = psi0.size
        fallback = 1e-3 * np.maximum(1.0, np.abs(psi0))
        h = 1e-2 * np.where(np.isfinite(spread) & (spread > 0), spread, fallback)
        for _ in range(4):
            at = model.from_likelihood_coordinates(_stencil(psi0, h))
            ll = pooled_log_likelihood(model, pooled, at, tick)
            if np.isfinite(ll).all():
                break
            h = h / 10.0  # a step left the likelihood's support (a probability near 0 or 1): closer in
        else:
            raise ValueError(f"the pooled records' log-likelihood is not finite around {psi0.tolist()}")
        f0, grad, hess = ll[0], np.empty(k), np.empty((k, k))
        pairs = ll[1 : 1 + 2 * k].reshape(k, 2)
        grad[:] = (pairs[:, 0] - pairs[:, 1]) / (2.0 * h)
        hess[np.diag_indices(k)] = (pairs[:, 0] - 2.0 * f0 + pairs[:, 1]) / h**2
        cross = ll[1 + 2 * k :].reshape(-1, 4)
        for n, (i, j) in enumerate(itertools.combinations(range(k), 2)):
            pp, pm, mp, mm = cross[n]
            hess[i, j] = hess[j, i] = (pp - pm - mp + mm) / (4.0 * h[i] * h[j])
        w, v = np.linalg.eigh(-0.5 * (hess + hess.T))
        return cls(model, psi0, grad, np.asarray((v * np.maximum(w, 0.0)) @ v.T, dtype=np.float64))


def _stencil(x0: F64, h: F64) -> F64:
    """x0, then x0 ± h_i e_i per i, then x0 ± h_i e_i ± h_j e_j per i < j (order ++, +-, -+, --)."""
    k = x0.size
    rows = [x0]
    for i in range(k):
        for s in (1.0, -1.0):
            e = x0.copy()
            e[i] += s * h[i]
            rows.append(e)
    for i, j in itertools.combinations(range(k), 2):  # the order of np.triu_indices(k, 1)
        for si, sj in ((1.0, 1.0), (1.0, -1.0), (-1.0, 1.0), (-1.0, -1.0)):
            e = x0.copy()
            e[i] += si * h[i]
            e[j] += sj * h[j]
            rows.append(e)
    return np.asarray(rows, dtype=np.float64)


@dataclass(frozen=True)
class EffectCoordinates:
    """The coordinates ω of the surrogate's random walk for a model with a registry random intercept
    (``Model.random_intercept``): θ with each z_j replaced by the effect u_j = σ_u z_j (β, log σ_u, u). The
    records pin each u_j (the likelihood sees u, not σ_u and z apart), so in (log σ_u, z) the posterior is a
    curved ridge z_j ≈ u_j / σ_u that a Gaussian random walk crosses slowly (measured on
    examples/registry-effects.toml: min ESS 63, R-hat 1.21 after 250 iterations x 16 chains), while in ω it is
    close to Gaussian in (β, u) with log σ_u given u a one-dimensional law. The density of the same measure
    in ω is the one in θ times |∂θ/∂ω| = σ_u^(−m) (z_j = u_j / σ_u)."""

    log_sd: int
    z: tuple[int, ...]

    def omega(self, theta: F64) -> F64:
        out = np.array(theta, dtype=np.float64)
        out[:, list(self.z)] = theta[:, list(self.z)] * np.exp(theta[:, [self.log_sd]])
        return out

    def theta(self, omega: F64) -> F64:
        out = np.array(omega, dtype=np.float64)
        out[:, list(self.z)] = omega[:, list(self.z)] * np.exp(-omega[:, [self.log_sd]])
        return out

    def log_jacobian(self, omega: F64) -> F64:
        """log |∂θ/∂ω| per row: −m log σ_u."""
        return np.asarray(-len(self.z) * omega[:, self.log_sd], dtype=np.float64)

    @classmethod
    def of(cls, model: Model) -> EffectCoordinates | None:
        ri = model.random_intercept()
        return None if ri is None else cls(ri.log_sd, tuple(ri.z))


@dataclass(frozen=True)
class SurrogateKernel:
    """The frozen random-walk Metropolis kernel P for π̃ ∝ prior × e^ℓ̃: proposals θ + L ε, ε ~ N(0, I); with
    ``coords`` (a random intercept: :class:`EffectCoordinates`) the walk is ω + L ε in those coordinates,
    for the density of π̃ there (its Jacobian included): a kernel reversible for the same measure π̃, so
    the exact test of the module docstring is unchanged (π/π̃ = e^{ℓ − ℓ̃} whatever the coordinates)."""

    model: Model
    surrogate: QuadraticSurrogate
    chol: F64  # L
    temper: float = 1.0  # τ: π̃ ∝ prior × e^{τ ℓ̃}
    coords: EffectCoordinates | None = None

    def log_density(self, theta: F64) -> F64:
        with np.errstate(all="ignore"):
            lp = self.model.log_prior(theta)
            ok = np.isfinite(lp) & self.model.in_bounds(theta)
            out = np.where(ok, lp + self.temper * self.surrogate(theta), -np.inf)
        return np.asarray(np.where(np.isfinite(out), out, -np.inf), dtype=np.float64)

    def to_walk(self, theta: F64) -> F64:
        """θ in the walk's coordinates (ω with ``coords``, else θ)."""
        return theta.copy() if self.coords is None else self.coords.omega(theta)

    def from_walk(self, x: F64) -> F64:
        return x.copy() if self.coords is None else self.coords.theta(x)

    def walk_log_density(self, x: F64) -> F64:
        """log π̃ in the walk's coordinates (with ``coords``: the density in θ plus log |∂θ/∂ω|)."""
        if self.coords is None:
            return self.log_density(x)
        with np.errstate(all="ignore"):
            out = self.log_density(self.coords.theta(x)) + self.coords.log_jacobian(x)
        return np.asarray(np.where(np.isfinite(out), out, -np.inf), dtype=np.float64)

    def run(self, rng: np.random.Generator, theta: F64, log_density: F64, steps: int) -> tuple[F64, F64, int]:
        """``steps`` steps of P from every row of ``theta``: the states, their log π̃ (in θ), and the moves
        made. ``log_density`` is log π̃ at ``theta`` (:meth:`log_density`)."""
        x, moved = self.to_walk(theta), 0
        lx = log_density.copy() if self.coords is None else self.walk_log_density(x)
        for _ in range(steps):
            y = x + rng.standard_normal(x.shape) @ self.chol.T
            ly = self.walk_log_density(y)
            a = np.log(rng.random(x.shape[0])) < ly - lx
            x[a], lx[a] = y[a], ly[a]
            moved += int(a.sum())
        out = self.from_walk(x)
        return out, self.log_density(out), moved


def tune_kernel(
    model: Model,
    surrogate: QuadraticSurrogate,
    start: F64,
    cov: F64,
    rng: np.random.Generator,
    steps: int | None = None,
    temper: float = 1.0,
) -> tuple[SurrogateKernel, F64]:
    """P's covariance and scale from an adaptive random walk on π̃ alone (no records): ``start``'s walkers,
    the scale steered to the random walk's target acceptance (Robbins–Monro), the covariance of the
    walkers' states re-estimated in doubling windows; then frozen. Returns P and the walkers' last states
    (draws of π̃: the exact chains start there). ``steps`` default: 500 + 200 d."""
    d = model.d
    steps = steps if steps is not None else 500 + 200 * d
    target = default_target_accept(d)
    coords = EffectCoordinates.of(model)
    if coords is not None:  # the walk is in ω: its first covariance, the walkers' there (a ridge keeps it PD)
        w = coords.omega(start)
        est = np.atleast_2d(np.cov(w.T)) if w.shape[0] > d else np.diag(np.diag(cov))
        if np.isfinite(est).all():
            cov = est + 1e-6 * max(float(np.trace(est)) / d, 1e-12) * np.eye(d)
    kernel = SurrogateKernel(
        model, surrogate, np.asarray(np.linalg.cholesky(cov), dtype=np.float64), temper, coords
    )
    x = kernel.to_walk(start)
    lx = kernel.walk_log_density(x)
    log_scale, c = math.log(2.38 / math.sqrt(d)), cov
    history: list[F64] = []
    window = 250
    root = np.linalg.cholesky(c)
    for step in range(steps):
        y = x + rng.standard_normal(x.shape) @ (math.exp(log_scale) * root.T)
        ly = kernel.walk_log_density(y)
        a = np.log(rng.random(x.shape[0])) < ly - lx
        x[a], lx[a] = y[a], ly[a]
        log_scale += (float(a.mean()) - target) / math.sqrt(1.0 + step / 10.0)
        history.append(x.copy())
        if step + 1 == window:  # the covariance of the window's second half, with a small ridge
            flat = np.concatenate(history[len(history) // 2 :])
            est = np.cov(flat.T).reshape(d, d)
            if np.isfinite(est).all() and np.all(np.linalg.eigvalsh(est) > 0):
                c = est + 1e-10 * np.trace(est) / d * np.eye(d)
                root = np.linalg.cholesky(c)
            history, window = [], window * 2
    chol = math.exp(log_scale) * root
    frozen = SurrogateKernel(model, surrogate, np.asarray(chol, dtype=np.float64), temper, coords)
    return frozen, kernel.from_walk(x)


@dataclass(frozen=True)
class ReferenceSettings:
    """When the plain reference stops and how it samples: the ESS it aims for, chains, iterations per block,
    warm-up blocks, the iteration and time caps, the surrogate's inner steps, the tempering and how often it
    tempers, and the progress callback."""

    min_ess: float = 2000.0
    chains: int = 16
    block: int = 50
    warmup: int = 25
    max_iterations: int | None = None
    max_seconds: float | None = None
    inner_steps: int | None = None
    temper: float = 0.3
    temper_every: int = 3
    progress: Callable[[ReferenceProgress], None] | None = None


def plain_reference(
    model: Model,
    datasets: Sequence[Data],
    seed: int,
    settings: ReferenceSettings | None = None,
) -> Reference:
    """The converged plain posterior of the pooled records (checked and clipped as a registry would): the
    module docstring's sampler, ``chains`` chains of ``inner_steps`` (default 30 d) surrogate steps per
    exact test, every ``temper_every``-th iteration (0: never) on the surrogate tempered by ``temper``,
    checked every ``block`` iterations after ``warmup``; ``max_iterations`` (default: enough for min_ess at
    0.1 effective draws per draw, at least 20,000) and ``max_seconds`` (wall time, the mode's search
    included) stop a reference that does not get there, which its label then says."""
    _s = settings if settings is not None else ReferenceSettings()
    min_ess, chains, block = _s.min_ess, _s.chains, _s.block
    warmup, max_iterations, max_seconds = _s.warmup, _s.max_iterations, _s.max_seconds
    inner_steps, temper, temper_every = _s.inner_steps, _s.temper, _s.temper_every
    progress = _s.progress
    t0, c0 = time.monotonic(), time.process_time()
    if max_iterations is None:
        max_iterations = max(20_000, math.ceil(10.0 * min_ess / chains))
    k_steps = inner_steps if inner_steps is not None else max(20, 30 * model.d)
    checked = [model.check_data(d) for d in datasets]
    pooled = {k: np.concatenate([d[k] for d in checked]) for k in checked[0]}
    for col in pooled.values():
        col.setflags(write=False)  # the records do not change: a model may cache what it derives from them
    state = _State()

    def report() -> None:
        if progress is not None:
            st, elapsed = state, time.monotonic() - t0
            at = ReferenceProgress(st.stage, st.it, chains, st.ess, st.rhat, min_ess, elapsed, max_seconds)
            progress(at)

    def tick(*_: object) -> None:
        report()
        if max_seconds is not None and time.monotonic() - t0 > max_seconds:
            raise _OutOfTime

    d = model.d
    nothing = np.full(d, math.nan)

    def stopped_early(mode: F64, cov: F64) -> Reference:
        """Stopped by the time cap before sampling: no draws."""
        nan, stage, elapsed, cpu = math.nan, state.stage, time.monotonic() - t0, time.process_time() - c0
        empty = np.empty((chains, 0, d))
        return Reference(
            empty,
            mode,
            cov,
            nan,
            nan,
            nan,
            0,
            min_ess,
            "time",
            max_seconds,
            stage,
            nan,
            k_steps,
            elapsed,
            cpu,
        )

    try:
        tick()
        mode, cov = exact_laplace(model, pooled, callback=tick)
    except _OutOfTime:
        return stopped_early(nothing, np.full((d, d), math.nan))
    if not np.isfinite(model.log_prior(mode[None, :])[0]):
        raise ValueError(f"the pooled records' posterior mode {mode.tolist()} is outside the prior's support")
    seeds = PublicSeeds(seed)
    state.stage = "surrogate"
    try:
        tick()
        walkers = GaussianProposal(mode, cov).sample(seeds.init_rng(), max(64, 4 * chains))
        with np.errstate(all="ignore"):  # ψ's spread under the Laplace approximation: the steps' scale
            spread = np.std(model.likelihood_coordinates(walkers), axis=0)
        psi0 = model.likelihood_coordinates(mode[None, :])[0]
        surrogate = QuadraticSurrogate.fit(model, pooled, psi0, spread, tick)
        walkers[~np.isfinite(model.log_prior(walkers)) | ~model.in_bounds(walkers)] = mode  # start inside
        kernel, walkers = tune_kernel(model, surrogate, walkers, cov, seeds.rng(1, party=97))
        kernels = [kernel]
        if temper_every:  # the tempered kernel: its π̃ wider than the posterior where the records inform it
            rng = seeds.rng(2, party=97)
            kernels.append(tune_kernel(model, surrogate, walkers.copy(), cov, rng, temper=temper)[0])
    except _OutOfTime:
        return stopped_early(mode, cov)
    theta = walkers[:chains].copy()
    state.stage = "sampling"
    ll, ls = pooled_log_likelihood(model, pooled, theta), surrogate(theta)  # ℓ and ℓ̃ at the chains' states
    out: list[F64] = []
    accepted, stopped = 0, ""
    bulk = tail = rhat = math.nan
    while True:
        rng = seeds.rng(10_000 + len(out), party=98)
        kern = kernels[1] if temper_every and len(out) % temper_every == temper_every - 1 else kernels[0]
        prop, _, _ = kern.run(rng, theta, kern.log_density(theta), k_steps)
        ll_prop, ls_prop = pooled_log_likelihood(model, pooled, prop), surrogate(prop)
        with np.errstate(invalid="ignore"):
            gain = (ll_prop - kern.temper * ls_prop) - (ll - kern.temper * ls)
            a = np.isfinite(ll_prop) & (np.log(rng.random(chains)) < gain)
        theta[a], ll[a], ls[a] = prop[a], ll_prop[a], ls_prop[a]
        accepted += int(a.sum())
        out.append(theta.copy())
        it = len(out)
        state.it = it
        if it >= warmup + 4 and (it - warmup) % block == 0:
            bulk, tail, rhat = _diagnostics(np.stack(out[warmup:], axis=1))
            state.ess, state.rhat = min(bulk, tail), rhat
            if min(bulk, tail) >= min_ess and rhat <= RHAT_TARGET:
                break
        if it >= max_iterations:
            stopped = "iterations"
            break
        try:
            tick()
        except _OutOfTime:
            stopped = "time"
            break
    keep = out[warmup:] if len(out) >= warmup + 4 else out  # too short for a warm-up: all it has
    draws = np.ascontiguousarray(np.stack(keep, axis=1))
    if stopped:
        bulk, tail, rhat = _diagnostics(draws)
    report()
    return Reference(
        draws,
        mode,
        cov,
        bulk,
        tail,
        rhat,
        it,
        min_ess,
        stopped,
        max_seconds,
        "sampling",
        accepted / (it * chains),
        k_steps,
        time.monotonic() - t0,
        time.process_time() - c0,
    )


@dataclass(frozen=True)
class BlockedReferenceSettings:
    """When a blocked reference stops and how it samples: the ESS it aims for, chains, warm-up, iterations per
    block, the iteration and time caps, and the progress callback."""

    min_ess: float = 2000.0
    chains: int = 8
    warmup: int = 750
    block: int = 100
    max_iterations: int | None = None
    max_seconds: float | None = None
    progress: Callable[[ReferenceProgress], None] | None = None


def blocked_reference(
    model: Model,
    datasets: Sequence[Data],
    seed: int,
    settings: BlockedReferenceSettings | None = None,
) -> Reference:
    """The plain posterior of a model with a registry random intercept by the blocked sampler itself in
    plain arithmetic (``mechanisms.samplers.blocked``: each registry's effect by exact local MH, the shared
    block by the plain Metropolis rule on the sum of the registries' terms; no noise, public seeds): the
    reference of a blocked run, the scheme whose draws it checks. Warm-up ``warmup`` sweeps (the adaptation
    schedule of a run whose adapt_stop is ``warmup``: shorter warm-ups freeze a proposal fitted to chains not
    yet converged; measured on examples/registry-effects.toml, 250 and 500 sweeps left R-hat 4.5 and 1.9),
    then checked every ``block`` sweeps until the bulk and tail ESS reach ``min_ess`` with R-hat <= 1.01, or
    ``max_iterations`` sweeps (warm-up included; default 20,000), or ``max_seconds`` of wall time (checked
    after every sweep, as :func:`plain_reference` does): a reference stopped by a bound says so in its label
    and :meth:`Reference.warning`, and one stopped in its warm-up has no draws. ``progress`` hears where it
    is (stages ``warm-up`` and ``sampling``). Its mode and cov are the draws' mean and covariance."""
    _s = settings if settings is not None else BlockedReferenceSettings()
    min_ess, chains, warmup = _s.min_ess, _s.chains, _s.warmup
    block, max_iterations, max_seconds = _s.block, _s.max_iterations, _s.max_seconds
    progress = _s.progress
    from mechanisms.models.hierarchy import SharedModel
    from mechanisms.samplers.blocked import BlockedDecider, LocalBlockParties, SharedAuto, blocked_kernel
    from mechanisms.samplers.local import LocalSettings
    from mechanisms.samplers.mh import prior_proposal_cov

    t0, c0 = time.monotonic(), time.process_time()
    if max_iterations is None:
        max_iterations = 20_000
    seeds = PublicSeeds(seed)
    keys = [hashlib.sha256(b"confar/reference/%d/%d" % (seed, j)).digest() for j in range(len(datasets))]
    parties = LocalBlockParties(
        model, datasets, LocalSettings(adapt_until=warmup), keys, rng=seeds.rng(0, party=98)
    )
    shared = SharedModel(model)
    state = _State(stage="warm-up")

    def report() -> None:
        if progress is not None:
            st, elapsed = state, time.monotonic() - t0
            at = ReferenceProgress(st.stage, st.it, chains, st.ess, st.rhat, min_ess, elapsed, max_seconds)
            progress(at)

    def out_of_time() -> bool:
        report()
        return max_seconds is not None and time.monotonic() - t0 > max_seconds

    def make(sm: SharedModel, dec: BlockedDecider) -> SharedAuto:
        cov = prior_proposal_cov(sm)
        return SharedAuto(
            sm, dec, cov, stop=warmup, start=max(warmup // 5, 1), every=max(warmup // 20, 1),
            history_from=warmup // 10,
        )  # fmt: skip

    method = (
        f"plain blocked MH (each registry's effect by local MH, the shared block by the plain rule; warm-up "
        f"{warmup} sweeps"
    )
    nan = math.nan
    kernel = blocked_kernel(model, parties, make)
    chain = kernel.init(shared.sample_prior(seeds.init_rng(), chains))
    report()
    for it in range(warmup):
        chain, _ = kernel.step(seeds.rng(10_000 + it), chain)
        state.it = it + 1
        if out_of_time():
            return Reference(
                draws=np.empty((chains, 0, model.d)),
                mode=np.full(model.d, nan),
                cov=np.full((model.d, model.d), nan),
                ess_bulk=nan,
                ess_tail=nan,
                rhat=nan,
                iterations=state.it,
                min_ess=min_ess,
                stopped="time",
                max_seconds=max_seconds,
                stage="warm-up",
                elapsed=time.monotonic() - t0,
                cpu=time.process_time() - c0,
                method=method + ")",
            )
    state.stage = "sampling"
    out: list[F64] = []
    accepted, stopped = 0, ""
    bulk = tail = rhat = nan
    while True:
        chain, info = kernel.step(seeds.rng(10_000 + warmup + len(out)), chain)
        accepted += int(np.count_nonzero(info.accept))
        out.append(shared.embed(chain.theta, parties.z(chain.theta)))
        state.it = warmup + len(out)
        if len(out) % block == 0:
            bulk, tail, rhat = _diagnostics(np.stack(out, axis=1))
            state.ess, state.rhat = min(bulk, tail), rhat
            if min(bulk, tail) >= min_ess and rhat <= RHAT_TARGET:
                break
        if state.it >= max_iterations:
            stopped = "iterations"
            break
        if out_of_time():
            stopped = "time"
            break
    draws = np.ascontiguousarray(np.stack(out, axis=1))
    if stopped:
        bulk, tail, rhat = _diagnostics(draws)
    report()
    flat = draws.reshape(-1, model.d)
    acceptance = accepted / (len(out) * chains)
    return Reference(
        draws=draws,
        mode=flat.mean(axis=0),
        cov=np.atleast_2d(np.cov(flat, rowvar=False)),
        ess_bulk=bulk,
        ess_tail=tail,
        rhat=rhat,
        iterations=state.it,
        min_ess=min_ess,
        stopped=stopped,
        max_seconds=max_seconds,
        acceptance=acceptance,
        elapsed=time.monotonic() - t0,
        cpu=time.process_time() - c0,
        method=method + f"; acceptance {acceptance:.2f} after it)",
    )
