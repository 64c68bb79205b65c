"""Blocked sampling of a model with a registry random intercept: each registry's effect sampled where it
lives, the shared parameters decided confidentially (issue 36).

θ = (s, z_1..z_m): s the shared block (fixed effects, log σ_u, a Weibull shape), z_j registry j's effect,
which only registry j's records depend on (``mechanisms.models.hierarchy``). One **sweep** of every chain:

(a) every registry j updates its own effect by exact MH on its own term (its records' log-likelihood and
    the prior of its effect given s), ``steps`` times, in its own coordinate (``mechanisms.samplers.local``:
    centred or non-centred as its data decide) — a decision of one registry, never revealed;
(b) the coordinator proposes s* (any kernel of ``mechanisms.samplers.mh`` on :class:`SharedModel`: public
    term log π(s*) − log π(s) + the proposal ratio) and the registries decide s → s* by the confidential
    accept-reject (``mh_decide``), registry j's term ℓ_j = T_j(s*, v_j) − T_j(s, v_j) at its current effect.

**Exactness.** Write the target in the registries' coordinates, π(s, v) ∝ π(s) Π_j p_j(v_j | s) L_j(s, v_j)
(``local``'s T_j; its image under v ↦ z is the posterior). Step (a) of registry j is a Metropolis–Hastings
kernel on v_j with s and the other v's fixed, whose acceptance ratio exp(T_j(s, v*) − T_j(s, v)) is the ratio
of the conditional π(v_j | s, v_−j) ∝ p_j(v_j | s) L_j(s, v_j): it leaves the conditional, hence the joint,
invariant. Step (b) is a Metropolis–Hastings kernel on s with v fixed whose acceptance ratio is
π(s*)/π(s) · Π_j exp(T_j(s*, v_j) − T_j(s, v_j)) · q(s | s*)/q(s* | s) = π(s*, v)/π(s, v) · q-ratio: it
leaves π(s | v), hence π, invariant. A composition of kernels each leaving π invariant leaves π invariant, so
the sweep does (a Gibbs sweep of exact MH kernels, "Metropolis-within-Gibbs"; e.g. Tierney 1994, section
2.4), and the chain converges to π wherever it starts, given irreducibility (the random walks have positive
density everywhere). Each registry's coin of its coordinate follows the chain's σ_u; its ratio at σ_u* over
σ_u is part of ℓ_j, which keeps the sweep exact on an extended target (``local``'s docstring). The
information, centring rows and scales measured during the warm-up are frozen from the warm-up's end on with
the coordinator's adaptation, so the draws after it are those of one fixed kernel (finite adaptation, as
``AdaptiveMH``). Whether a decision of (b) was asked does not depend on v (the public
term and the support are functions of s and s*), and every sweep does (a): when no chain's proposal is asked
(all outside the support) the coordinator sends one null decision (a chain's own state as its proposal,
public term 0: the same state whatever the bit) so that the registries still make the sweep's local updates.

**What the coordinator learns.** Each decision's accept bit, as for any MH run; nothing else of the z_j: they
stay in the registries (with a daemon, in its run state), and a registry's local decisions are never sent.
The bits of (b) do depend on the z_j (ℓ_j is evaluated at them), so the z_j are not hidden *from* the bits.
A privacy budget charges only the accountable plan (``mechanisms.privacy.charge``; docs/PRIVACY.md "Blocked
sampling under a budget"): noisy local steps (``local``) and the shared decisions with a fixed-sd penalty
and its cap on ``SharedModel.record_ratio_bound`` (each registry adds its N(0, sd²), the public term carries
−m sd²/2; exact as any penalty MH); the default exact plan is refused. The z_j draws leave a registry only at
the end of a run, and only if it allows it (``parties``, ``[allow] release_effects``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hss.modes import REVEAL
from hss.randomness import SecureRandom, derive_key
from mechanisms.models.base import F64, Data, Model
from mechanisms.models.hierarchy import SharedModel
from mechanisms.samplers.decision import DecideFn, Decider
from mechanisms.samplers.local import LocalSettings, LocalState, RegistryBlock
from mechanisms.samplers.mh import AdaptiveMH, Kernel, MHInfo, MHState, mh_decide
from mechanisms.samplers.requests import DecisionRequest, Penalty
from mechanisms.samplers.seeds import PublicSeeds
from mechanisms.samplers.terms import party_noise

Bits = npt.NDArray[np.bool_]

#: a registry's term of a shared move that leaves the model's support (an overflow: −inf) is this instead: a
#: number the decision protocols encode exactly (the fixed-point terms reach ±2^17), far below anything a sum
#: of noise terms and the other registries' log-likelihood ratios reaches at a chain's scale
TERM_FLOOR = -65536.0


def null_request(states: F64, sweep: int, penalty: Penalty | None = None) -> DecisionRequest:
    """A sweep's null decision (chain 0 proposes its own state, public term 0): asked only when no chain's
    proposal is, so that the registries still make the sweep's local updates; its bit changes nothing. It
    carries the session's ``penalty`` (its sensitivity is 0: the state does not move)."""
    return DecisionRequest(
        kind="mh",
        theta_star=states[:1].copy(),
        public=np.zeros(1),
        theta=states[:1].copy(),
        penalty=penalty,
        chain=np.zeros(1, dtype=np.int64),
        states=states,
        sweep=sweep,
    )


@dataclass
class BlockedDecider:
    """The coordinator's side of the sweep's requests: each request of the shared kernel gets the sweep's
    number and every chain's state at its start (what the registries' local updates need)."""

    inner: Decider
    sweep: int = 0
    states: F64 | None = None
    called: bool = False

    def __call__(self, request: DecisionRequest) -> Bits:
        if self.states is None:
            raise ValueError("a blocked request outside a sweep (BlockedMH.step sets the chain states)")
        self.called = True
        return self.inner(dataclasses.replace(request, states=self.states, sweep=self.sweep))


@dataclass
class BlockedMH:
    """A sweep of the blocked sampler as the coordinator runs it: ``shared`` is any MH kernel of
    ``mechanisms.samplers.mh`` built on :class:`SharedModel` with a :class:`BlockedDecider` as its decider
    (:func:`blocked_kernel` builds the pair); ``sweep`` is the number of the next sweep (a resumed run's
    driver sets it to the sweeps done)."""

    shared: Any  # a Kernel whose decide is a BlockedDecider
    sweep: int = 0

    def __post_init__(self) -> None:
        if not isinstance(getattr(self.shared, "decide", None), BlockedDecider):
            raise ValueError("the shared kernel's decider must be a BlockedDecider")
        pen = getattr(self.shared, "penalty", None)
        if getattr(self.shared, "lazy", None) is not None:
            raise ValueError("blocked sampling decides MH moves of the shared block: no lazy acceptance")
        if pen is not None and (not pen.fixed or pen.c != "bound"):
            raise ValueError(
                "blocked sampling takes the penalty with a fixed sd and c = 'bound' only (a shared move's "
                "sensitivity is SharedModel.record_ratio_bound, every effect held at its public "
                "intercept-centred coordinate)"
            )

    @property
    def decider(self) -> BlockedDecider:
        dec = self.shared.decide
        assert isinstance(dec, BlockedDecider)
        return dec

    def init(self, theta0: npt.ArrayLike) -> Any:
        return self.shared.init(theta0)

    def step(self, rng: np.random.Generator, state: Any) -> tuple[Any, MHInfo]:
        dec = self.decider
        dec.sweep, dec.states, dec.called = (
            self.sweep,
            np.asarray(state.theta, dtype=np.float64).copy(),
            False,
        )
        out, info = self.shared.step(rng, state)
        if not dec.called:  # no proposal inside the support: the null decision carries the local updates
            dec.inner(null_request(dec.states, self.sweep, getattr(self.shared, "penalty", None)))
            info = dataclasses.replace(info, asked=info.asked + 1)
        dec.states = None
        self.sweep += 1
        return out, info


def blocked_kernel(
    model: Model, decide: Decider, make: Callable[[SharedModel, BlockedDecider], Kernel], sweep: int = 0
) -> BlockedMH:
    """The blocked sampler of ``model`` whose shared block is stepped by ``make(shared_model, decider)``
    (e.g. ``lambda sm, dec: AdaptiveMH(sm, dec, init_cov=...)``) and whose decisions go to ``decide``."""
    shared = SharedModel(model)
    return BlockedMH(make(shared, BlockedDecider(decide)), sweep)


# ---- registries in this process (simulations, tests) -------------------------------------------------------


@dataclass
class LocalBlockParties:
    """m registries' records and local states in this process: the blocked sampler's decider for simulations
    and tests. Registry j (0-based) holds level j; its local randomness comes from its own CSPRNG (keyed by
    ``keys[j]`` and the sweep). Decisions by the plain rule (``rng``: accept iff log U < public + Σ_j ℓ_j;
    not private, the reference) or confidentially (``decide``: each registry's x_j = ℓ_j + V_j with V_j ~
    Gamma(1/m, 1) from ``noise_rngs[j]``, decided by ``decide`` as ``ConfidentialRule`` does)."""

    model: Model
    datasets: Sequence[Data]
    settings: LocalSettings
    keys: Sequence[bytes]
    rng: np.random.Generator | None = None
    decide: DecideFn | None = None
    noise_rngs: Sequence[SecureRandom] | None = None
    mode: str = "sign"
    blocks: list[RegistryBlock] = field(init=False)
    states: list[LocalState | None] = field(init=False)
    calls: int = 0

    def __post_init__(self) -> None:
        if (self.rng is None) == (self.decide is None):
            raise ValueError("give exactly one of rng (the plain rule) and decide (the confidential rule)")
        if self.decide is not None and (
            self.noise_rngs is None or len(self.noise_rngs) != len(self.datasets)
        ):
            raise ValueError("the confidential rule needs one noise generator per registry")
        if len(self.keys) != len(self.datasets):
            raise ValueError(f"one local key per registry: {len(self.keys)} for {len(self.datasets)}")
        checked = [self.model.check_data(d, where=f"registry {j + 1}") for j, d in enumerate(self.datasets)]
        self.blocks = [RegistryBlock(self.model, d, self.settings, level=j) for j, d in enumerate(checked)]
        self.states = [None] * len(self.blocks)

    @property
    def m(self) -> int:
        return len(self.blocks)

    def local_rng(self, j: int, sweep: int) -> SecureRandom:
        return SecureRandom(derive_key(self.keys[j], b"", b"local/%d" % sweep))

    def _sweep(self, request: DecisionRequest) -> list[F64]:
        assert request.states is not None and request.sweep is not None
        current = []
        for j, block in enumerate(self.blocks):
            rng = self.local_rng(j, request.sweep)
            st = self.states[j]
            if st is None:
                if request.sweep != 0:
                    raise ValueError(
                        f"registry {j + 1} has no local state and is asked sweep {request.sweep}"
                    )
                st = block.initial(request.states.shape[0], rng)
            if st.t != request.sweep or st.chains != request.states.shape[0]:
                raise ValueError(
                    f"registry {j + 1} is at sweep {st.t} of {st.chains} chains, asked {request.sweep}"
                )
            st, cur = block.sweep(st, request.states, rng)
            self.states[j] = st
            current.append(cur)
        return current

    def __call__(self, request: DecisionRequest) -> Bits:
        if not request.blocked:
            raise ValueError("LocalBlockParties decides blocked requests only (chains, states and sweep)")
        self.calls += 1
        current = self._sweep(request)
        assert request.theta is not None and request.chain is not None
        terms = [
            np.maximum(b.shared_terms(st, cur, request.chain, request.theta, request.theta_star), TERM_FLOOR)
            for b, st, cur in zip(self.blocks, self.states, current, strict=True)
            if st is not None
        ]
        pen = request.penalty
        sigma = None if pen is None else pen.sigma_of(np.zeros(request.n))  # a fixed sd (BlockedMH checks)
        if self.rng is not None:
            total = request.public + np.sum(terms, axis=0)
            if sigma is not None:  # the registries' N(0, sd²) each; the correction is in the public term
                total = total + self.rng.normal(0.0, 1.0, request.n) * sigma * math.sqrt(self.m)
            return np.asarray(np.log(self.rng.random(request.n)) < total)
        assert self.decide is not None and self.noise_rngs is not None
        blinded = self.mode in REVEAL and REVEAL[self.mode].blinding
        values, blinds = [], []
        for ell, nrng in zip(terms, self.noise_rngs, strict=True):
            nz, blind = party_noise(nrng, self.m, request.n, sigma, blinded)
            values.append(ell + nz)
            if blind is not None:
                blinds.append(blind)
        return self.decide(values, request.public, blinds if blinded else None)

    def z(self, states: F64) -> F64:
        """Every chain's z_1..z_m (chains, m) at the shared states after the last sweep (the registries'
        current effects; released only at the end of a networked run)."""
        out = []
        for block, st in zip(self.blocks, self.states, strict=True):
            if st is None:
                raise ValueError("no sweep made yet")
            out.append(block.z_of(states, st))
        return np.column_stack(out)


@dataclass(frozen=True)
class BlockedTrace:
    draws: F64  # (steps, chains, d): the full θ after every sweep (shared and every registry's z)
    accept: Bits  # (steps, chains): the shared block's accept bits
    asked: int


def run_blocked(
    kernel: BlockedMH,
    parties: LocalBlockParties,
    state: Any,
    n_steps: int,
    seeds: PublicSeeds,
    first_batch: int = 0,
) -> tuple[Any, BlockedTrace]:
    """``n_steps`` sweeps of every chain in memory; step k uses the public stream of batch first_batch + k.
    The draws are the full θ (the shared block and the registries' z_j after each sweep)."""
    shared = SharedModel(parties.model)
    draws, accepts, asked = [], [], 0
    for k in range(n_steps):
        state, info = kernel.step(seeds.rng(first_batch + k), state)
        draws.append(shared.embed(state.theta, parties.z(state.theta)))
        accepts.append(info.accept)
        asked += info.asked
    if not draws:
        return state, BlockedTrace(np.zeros((0, 0, parties.model.d)), np.zeros((0, 0), dtype=bool), 0)
    return state, BlockedTrace(np.stack(draws), np.stack(accepts), asked)


# ---- the shared block's automatic kernel -------------------------------------------------------------------


@dataclass(frozen=True)
class ScaledInterceptGaussian:
    """A Gaussian independence proposal for the shared block, optionally in the coordinates where the fixed
    intercept β_0 is measured from ``centre`` in units of σ_u: φ = θ with φ_0 = (β_0 − centre) / σ_u
    (``scaled``). Registries whose data know their effects well (centred coordinates) tie β_0 to their
    effects with sd σ_u / √m given σ_u, a funnel in (β_0, log σ_u) that no Gaussian in θ fits and one in φ
    does. The density in θ is N(φ(θ); mean, cov) / σ_u (the Jacobian |∂φ/∂θ| = 1/σ_u)."""

    mean: F64  # (d,) in φ
    cov: F64  # (d, d) in φ: the scale matrix (the covariance without df)
    intercept: int | None  # the intercept's position in the shared block (None: plain, φ = θ)
    log_sd: int
    centre: float = 0.0
    df: float | None = None  # a multivariate t with df degrees of freedom in φ (None: a Gaussian)

    @property
    def scaled(self) -> bool:
        return self.intercept is not None

    def phi(self, theta: F64) -> F64:
        out = np.array(np.atleast_2d(theta), dtype=np.float64)
        if self.intercept is not None:
            out[:, self.intercept] = (out[:, self.intercept] - self.centre) / np.exp(out[:, self.log_sd])
        return out

    def theta_of(self, phi: F64) -> F64:
        out = np.array(phi, dtype=np.float64)
        if self.intercept is not None:
            out[:, self.intercept] = self.centre + np.exp(out[:, self.log_sd]) * out[:, self.intercept]
        return out

    def logpdf(self, theta: F64) -> F64:
        th = np.atleast_2d(theta)
        chol = np.linalg.cholesky(self.cov)
        z = np.linalg.solve(chol, (self.phi(th) - self.mean).T).T
        d = self.mean.size
        q = np.sum(z**2, axis=1)
        if self.df is None:
            lp = -0.5 * q - 0.5 * d * math.log(2 * math.pi)
        else:
            nu = self.df
            lp = (
                math.lgamma((nu + d) / 2) - math.lgamma(nu / 2) - 0.5 * d * math.log(nu * math.pi)
                - 0.5 * (nu + d) * np.log1p(q / nu)
            )  # fmt: skip
        lp = lp - np.log(np.diag(chol)).sum()
        return np.asarray(lp - th[:, self.log_sd] if self.scaled else lp, dtype=np.float64)

    def sample(self, rng: np.random.Generator, n: int) -> F64:
        chol = np.linalg.cholesky(self.cov)
        x = rng.standard_normal((n, self.mean.size)) @ chol.T
        if self.df is not None:  # a Gaussian scaled by sqrt(df / chi2_df): multivariate t
            x = x * np.sqrt(self.df / rng.chisquare(self.df, n))[:, None]
        return self.theta_of(self.mean + x)


@dataclass(frozen=True)
class MixtureProposal:
    """An independence proposal mixing ``parts`` (each with ``logpdf`` and ``sample`` in θ) with
    ``weights``: a broad part keeps the density ratio target / proposal bounded where a fitted part's tails
    are too light (an independence sampler otherwise sticks there)."""

    parts: tuple[Any, ...]
    weights: tuple[float, ...]

    def logpdf(self, theta: F64) -> F64:
        pairs = zip(self.parts, self.weights, strict=True)
        logs = np.stack([math.log(w) + p.logpdf(theta) for p, w in pairs])
        top = logs.max(axis=0)
        return np.asarray(top + np.log(np.exp(logs - top).sum(axis=0)), dtype=np.float64)

    def sample(self, rng: np.random.Generator, n: int) -> F64:
        pick = rng.choice(len(self.parts), size=n, p=np.asarray(self.weights) / sum(self.weights))
        out = np.stack([p.sample(rng, n) for p in self.parts])  # every part draws n: the stream is fixed
        return np.asarray(out[pick, np.arange(n)], dtype=np.float64)

    @property
    def cov(self) -> F64:  # the step size reported: the first (fitted) part's
        return np.asarray(self.parts[0].cov, dtype=np.float64)


@dataclass(frozen=True)
class SharedState:
    """The shared block's automatic kernel state: the random walk's (``AdaptiveState``: chains, history,
    scales, iterations done) and the running moments, per chain pooled within chains (Welford), of
    ψ = (θ, β_0 / σ_u, 1 / σ_u) over the pool window, from which the independence proposal is fitted (the
    moments of φ for any centre follow from ψ's: φ_0 = β_0/σ_u − centre · 1/σ_u is linear in ψ)."""

    inner: Any  # AdaptiveState
    count: int = 0
    mean: F64 | None = None  # (chains, d + 2)
    m2: F64 | None = None  # (d + 2, d + 2)

    @property
    def theta(self) -> F64:
        return np.asarray(self.inner.theta, dtype=np.float64)

    @property
    def log_prior(self) -> F64:
        return np.asarray(self.inner.log_prior, dtype=np.float64)

    @property
    def t(self) -> int:
        return int(self.inner.t)


INDEPENDENCE_INFLATE = 1.25  # the frozen independence proposal's sds, relative to the fitted ones
INDEPENDENCE_DF = 5.0  # its tails: a multivariate t (heavier than any Gaussian fit's, so no tail is missed)
BROAD_WEIGHT = 0.2  # the weight of its broad part ...
BROAD_INFLATE = 2.0  # ... the plain fit with sds this many times the fitted ones
WALK_SHARE = 0.1  # the share of the frozen random walk's steps after the warm-up (a mixture of kernels)


@dataclass
class SharedAuto:
    """The automatic kernel of a blocked run's shared block (``[sampler]`` automatic tuning with a random
    intercept): adaptive random-walk MH with per-chain Robbins–Monro scaling (``AdaptiveMH``) for iterations
    t < ``stop`` (the warm-up), then, frozen, an independence sampler from a Gaussian fitted to every chain's
    states of the warm-up's second half (``pool_from`` ≤ t < ``stop``), inflated by ``inflate``, in the
    coordinates (θ, or φ of :class:`ScaledInterceptGaussian`) whose Gaussian fits those states better (the
    larger Gaussian log-likelihood of the pooled states, measured in θ: φ's with its Jacobian).

    Measured on the registry-effects study (5 registries, 16 chains x 1,500 iterations, a fifth of its
    records, docs/MODELS.md): the random walk kept to the end gave min bulk ESS 144 (max R-hat 1.08); the
    independence sampler fitted in θ, ESS 1,169 (acceptance 0.27, R-hat 1.017); fitted in φ, ESS 4,369
    (acceptance 0.56, R-hat 1.004). The frozen random walk's share after the warm-up, ``walk_share``: 0.1
    (on the whole study in memory, 8 chains x 250 sweeps after the warm-up, the same seed: min bulk / tail
    ESS 317 / 281 with 0.25, 457 / 369 with 0.1; the walk accepted 0.25-0.29 of its proposals, the
    independence sampler 0.45-0.49). Everything used is public (the chain states); from ``stop`` on the
    kernel is fixed (finite adaptation: the draws are exact)."""

    model: SharedModel
    decide: Any  # a BlockedDecider
    init_cov: F64
    stop: int
    start: int = 0
    every: int = 1
    history_from: int | None = None
    pool_from: int | None = None  # default stop // 2
    inflate: float = INDEPENDENCE_INFLATE
    df: float | None = INDEPENDENCE_DF
    broad: float = BROAD_WEIGHT  # the weight of a broad part (the plain fit, sds x BROAD_INFLATE)
    walk_share: float = WALK_SHARE  # after the warm-up, each chain's step is the frozen random walk's with
    # this probability (from the public seed, whatever the state), else the independence sampler's
    target_accept: float | None = None
    penalty: Penalty | None = None  # a fixed sd only (BlockedMH checks): the plan a budget can charge
    m: int | None = None  # the number of registries (the penalty's public correction)
    lazy: None = None

    def __post_init__(self) -> None:
        if self.stop < 4:
            raise ValueError(f"the shared block's warm-up must be >= 4 iterations, got {self.stop}")
        if self.every < 1 or self.start < 0:
            raise ValueError(f"adaptation every must be >= 1 and start >= 0, got {self.every}, {self.start}")
        if not self.inflate >= 1.0:
            raise ValueError(f"inflate must be >= 1, got {self.inflate}")

    @property
    def walk(self) -> AdaptiveMH:
        return AdaptiveMH(
            self.model, self.decide, init_cov=self.init_cov, start=self.start, every=self.every,
            stop=self.stop, history_from=self.history_from, scale_adapt=True,
            target_accept=self.target_accept, penalty=self.penalty, m=self.m,
        )  # fmt: skip

    @property
    def pool_start(self) -> int:
        return self.stop // 2 if self.pool_from is None else self.pool_from

    def init(self, theta0: npt.ArrayLike) -> SharedState:
        return SharedState(self.walk.init(theta0))

    def _positions(self) -> tuple[int | None, int]:
        ri = self.model.hierarchy
        icept = None if ri.intercept is None else self.model.position(ri.intercept)
        return icept, self.model.position(ri.log_sd)

    def _psi(self, theta: F64) -> F64:
        icept, ls = self._positions()
        inv = np.exp(-theta[:, ls])
        b0 = theta[:, icept] if icept is not None else np.zeros(theta.shape[0])
        return np.column_stack([theta, b0 * inv, inv])

    def proposal(self, state: SharedState) -> ScaledInterceptGaussian | MixtureProposal:
        fit = self.fitted(state)
        if not self.broad:
            return fit
        d = self.model.d
        mu, cov = self._pool(state)
        wide = ScaledInterceptGaussian(mu[:d], BROAD_INFLATE**2 * cov[:d, :d], None, fit.log_sd, df=self.df)
        return MixtureProposal((fit, wide), (1.0 - self.broad, self.broad))

    def _pool(self, state: SharedState) -> tuple[F64, F64]:
        d = self.model.d
        chains = state.theta.shape[0]
        dof = chains * (state.count - 1)
        if state.mean is None or state.m2 is None or dof <= d + 2:
            raise ValueError(
                f"the shared block's independence proposal needs a pool of states: {state.count} iterations "
                f"x {chains} chains pooled (warm-up {self.stop}, pooled from {self.pool_start})"
            )
        ridge = np.zeros((d + 2, d + 2))
        ridge[:d, :d] = 1e-10 * np.eye(d)
        return state.mean.mean(axis=0), state.m2 / dof + ridge

    def fitted(self, state: SharedState) -> ScaledInterceptGaussian:
        """The frozen independence proposal fitted to the pool (module docstring of the class)."""
        d = self.model.d
        icept, ls = self._positions()
        mu_psi, cov_psi = self._pool(state)
        ridge = 1e-10 * np.eye(d)
        plain = (mu_psi[:d], cov_psi[:d, :d])
        best = ScaledInterceptGaussian(plain[0], self.inflate**2 * plain[1], None, ls, df=self.df)
        if icept is None:
            return best
        centre = float(mu_psi[icept])
        a = np.zeros((d, d + 2))
        a[:, :d] = np.eye(d)
        a[icept] = 0.0
        a[icept, d], a[icept, d + 1] = 1.0, -centre  # φ_0 = β_0/σ − centre/σ
        mu_phi, cov_phi = a @ mu_psi, a @ cov_psi @ a.T + ridge
        fit_plain = -0.5 * np.linalg.slogdet(plain[1])[1]
        fit_scaled = -0.5 * np.linalg.slogdet(cov_phi)[1] - float(mu_psi[ls])  # E[log |∂φ/∂θ|] = −E[log σ]
        if fit_scaled > fit_plain:
            return ScaledInterceptGaussian(mu_phi, self.inflate**2 * cov_phi, icept, ls, centre, df=self.df)
        return best

    def step(self, rng: np.random.Generator, state: SharedState) -> tuple[SharedState, MHInfo]:
        t = state.t
        if t < self.stop:
            inner, info = self.walk.step(rng, state.inner)
            count, mean, m2 = state.count, state.mean, state.m2
            if t >= self.pool_start:  # one Welford step per chain, deviations pooled over chains
                psi = self._psi(inner.theta)
                mean = np.zeros_like(psi) if mean is None else mean
                m2 = np.zeros((psi.shape[1], psi.shape[1])) if m2 is None else m2
                count += 1
                delta = psi - mean
                mean = mean + delta / count
                m2 = m2 + delta.T @ (psi - mean)
            return SharedState(inner, count, mean, m2), info
        prop = self.proposal(state)
        chains = state.theta.shape[0]
        # the kernel of each chain's step: from the public stream, whatever the state
        walk = np.asarray(rng.random(chains) < self.walk_share)
        ts = prop.sample(rng, chains)
        q_ratio = prop.logpdf(state.theta) - prop.logpdf(ts)
        inner_st = state.inner
        scale = np.exp(np.asarray(inner_st.log_scale if inner_st.log_scale is not None else np.zeros(chains)))
        chol = np.linalg.cholesky(inner_st.cov)
        steps = scale[:, None] * (rng.standard_normal(state.theta.shape) @ chol.T)
        ts = np.where(walk[:, None], state.theta + steps, ts)
        q_ratio = np.where(walk, 0.0, q_ratio)
        out, info = mh_decide(
            self.model, self.decide, MHState(state.theta, state.log_prior), ts, q_ratio, self.penalty, self.m
        )
        inner = dataclasses.replace(state.inner, theta=out.theta, log_prior=out.log_prior, t=t + 1)
        d = self.model.d
        size = np.where(
            walk,
            scale * math.sqrt(float(np.trace(inner_st.cov)) / d),
            math.sqrt(float(np.trace(prop.cov)) / d),
        )
        return dataclasses.replace(state, inner=inner), dataclasses.replace(info, step_size=size)


__all__ = [
    "INDEPENDENCE_INFLATE",
    "TERM_FLOOR",
    "BlockedDecider",
    "BlockedMH",
    "BlockedTrace",
    "LocalBlockParties",
    "ScaledInterceptGaussian",
    "SharedAuto",
    "SharedState",
    "blocked_kernel",
    "null_request",
    "run_blocked",
]
