"""Budget first for a blocked run (a registry random intercept, ``mechanisms.samplers.blocked``): what a
privacy budget buys the accountable blocked plan (docs/PRIVACY.md, "Blocked sampling under a budget"), and
which of its settings buys the most.

**What is priced, exactly.** Each sweep, every registry's ledger charges two GaussianEvents
(``mechanisms.privacy.charge.blocked_events``): the shared decisions, μ_sh² = Σ_t (Δ_t √m / (sd √r))² over
the sweep's chains, and its own local steps, μ_loc² = chains · steps · (Δ_loc / sd_loc)², Δ_loc the model's
bound for a move of at most h (bernoulli: h add-remove, 2h replace-one). The plan prices every sweep as the
registries' own dry run does (every shared decision at the cap: Δ_t ≤ cap for each decision asked, none for
a proposal above the cap, which is rejected without asking), by calling that charge (the caller passes it
in, :data:`SweepCharge`), so μ² after K sweeps is at most K · μ²_sweep and the spend ε = the GDP conversion
of √(K μ²_sweep). The registries' ε-at-δ ledgers charge the smaller of their PLD and GDP compositions, a GDP
budget its μ: neither above the plan's figure. So the plan never states a spend below what the ledgers will
charge, and the run (whose length is the plan's) cannot overrun its target: the ε side is a bound, not an
estimate. The end-of-run release of the effect draws is charged μ = 0 (a post-processing).

**What is predicted: the ESS.** The effective draws a run of K sweeps buys are measured on a simulated
run on a **Gaussian stand-in** for the posterior: the exact Laplace approximation of the model on its public
design dataset (the pilot, ``coordinator.planner``), mapped to the coordinates the blocked sampler moves,
(s, v) with v_j = β_0 + σ_u z_j (linearised at the approximation's mode; given s the v_j are independent
there, as in the model). The run is made as the real one is:

* the shared block by the run's own kernel, ``blocked.SharedAuto`` (its adaptive random walk for the
  warm-up, then the frozen independence proposal fitted to the warm-up's second half, mixed with the walk),
  with the adaptation schedule of a run of K sweeps (warm-up K/2), the penalty's noise and the cap (a
  proposal above it rejected without asking), the chains started at prior draws (public seed) as a run's
  are; the stand-in's log ratio of (s*, v) over (s, v) takes the place of the registries' terms;
* each registry's ``steps`` local steps per sweep on the stand-in's conditional of v_j: the increment
  clip(e^λ ε, ±h), accepted iff log U < L + W − sd_loc²/2, W ~ N(0, sd_loc²), the scale e^λ adapted by the
  registries' Robbins–Monro rule in the warm-up (from λ = log h, to 0.44 × 2Φ(−sd_loc/2)) and frozen after
  it (``local.RegistryBlock.sweep``); the effects start at σ_u z, z ~ N(0, 1), as a registry's do.

The ESS is the smallest bulk ESS (ArviZ) over s and the effects u_j = v_j − β_0 of the draws after the
warm-up, chains as the run's, counted only when the simulated chains mixed (largest split R-hat at most
:data:`RHAT_MAX`; else 0). It is a prediction and a **mean** (one simulated run per setting, public seed),
not a bound: the stand-in is Gaussian (a real posterior of σ_u with few registries is skewed), the design
dataset is a guess, and the largest of several noisy ESS estimates is chosen (a selection that favours an
estimate above its mean). The registries still charge what each sweep really is, and the run's outputs say
what ESS it reached (the 600-record test study at ε = 900: planned 112, reached 20: optimistic).

**Which settings.** The budget's μ_max² buys K = μ_max² / μ²_sweep sweeps (at most the file's iterations).
A local step moves v_j by about h with acceptance a(sd_loc) ≈ 2Φ(−sd_loc/2) when h is small against v_j's
conditional sd, so its diffusion per unit of its charge is a(sd_loc) h² / (h / sd_loc)² ∝ 2Φ(−s/2) s²,
largest at s ≈ 2.4 (:data:`LOCAL_SD`): the default local noise. The shared sd, the cap on c and the step
cap h trade sweeps against the mixing of each: the plan compares a small grid (:data:`SD_GRID` ×
:data:`CAP_QUANTILES` × :data:`STEP_GRID`; any setting the file gives held; the caps at quantiles of c under
the frozen kernel on the stand-in: a lower cap is cheaper, since every decision is charged at it, and
refuses more proposals). Each candidate is screened on a short run (:data:`SCREEN_SWEEPS`), the
:data:`FINALISTS` best projections are simulated at the length they buy, and the largest ESS is kept. A
budget that buys less than ``min_ess`` is refused with the cheapest target found whose simulated run
reaches it (:func:`_need`: planning at that target, as printed, buys that run).
Pure: the generator comes in as an argument (public seed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from mechanisms.floor import Floor, plan_floor_line
from mechanisms.models.base import F64
from mechanisms.models.hierarchy import SharedModel
from mechanisms.privacy.conversions import gdp_eps, gdp_mu
from mechanisms.samplers.blocked import BROAD_INFLATE, WALK_SHARE
from mechanisms.samplers.blocked import BROAD_WEIGHT as BROAD
from mechanisms.samplers.blocked import INDEPENDENCE_INFLATE as INFLATE
from mechanisms.samplers.requests import DecisionRequest, record_sensitivity

__all__ = [
    "LOCAL_SD",
    "BlockedPlan",
    "BlockedSettings",
    "StandIn",
    "plan_blocked",
    "shared_cap",
    "simulate_blocked",
]

LOCAL_SD = 2.4  # argmax of 2Φ(−s/2) s²: a local step's diffusion per unit of its charge (module docstring)
SD_GRID = (1.0, 2.0, 3.0)  # the shared penalty's total sd the plan compares
STEP_GRID = (0.1, 0.5)  # the local step cap h the plan compares
RHAT_MAX = 1.05  # a simulated run whose chains disagree more buys no usable draw (the run warns past 1.01)
MIN_SWEEPS = 20  # a shorter run has no warm-up worth the name (SharedAuto needs >= 4 of adaptation)
CAP_QUANTILES = (0.9, 0.999)  # the caps the plan compares when the file leaves it: each is charged in full

#: μ² one sweep of every chain adds to a registry's ledger under the given settings (the caller prices it
#: with the registries' own charge, ``DecisionPlan.events`` of the session's plan at the cap)
SweepCharge = Callable[["BlockedSettings"], float]


@dataclass(frozen=True)
class BlockedSettings:
    """The public settings of the accountable blocked plan a planned run chooses."""

    sd_total: float  # the shared decisions' total penalty sd (each registry's: sd_total / √m)
    cap: float  # the cap on c(s, s*) of a shared move
    local_sd: float  # each registry's own noise sd on a local log ratio
    local_max_step: float  # a local step moves u_j by at most this (h)
    local_steps: int  # local steps per sweep

    def text(self) -> str:
        return (
            f"shared penalty sd = {self.sd_total:g} (cap c <= {self.cap:.3g}), local steps "
            f"{self.local_steps} per sweep with local_sd = {self.local_sd:g}, local_max_step = "
            f"{self.local_max_step:g}"
        )


@dataclass(frozen=True)
class StandIn:
    """The Gaussian stand-in in the blocked sampler's coordinates x = (s, v): s the shared block, v_j =
    β_0 + σ_u z_j each registry's effect in its public centred coordinate."""

    mean: F64
    cov: F64
    ds: int  # the shared block's dimension
    intercept: int | None  # β_0's position in s (None: v_j = u_j)

    @staticmethod
    def from_laplace(shared: SharedModel, mean: F64, cov: F64) -> StandIn:
        """The stand-in from the full model's Laplace approximation N(``mean``, ``cov``) in θ = (s, log σ_u,
        z), mapped to (s, v) linearly at the mode."""
        h = shared.hierarchy
        idx, z, ls = list(shared.index), list(h.z), h.log_sd
        m, ds = len(z), len(idx)
        sigma = math.exp(float(mean[ls]))
        icept = None if h.intercept is None else shared.position(h.intercept)
        b0 = 0.0 if h.intercept is None else float(mean[h.intercept])
        mu = np.concatenate([mean[idx], b0 + sigma * mean[z]])
        jac = np.zeros((ds + m, mean.shape[0]))
        jac[np.arange(ds), idx] = 1.0
        for j, k in enumerate(z):
            if h.intercept is not None:
                jac[ds + j, h.intercept] = 1.0
            jac[ds + j, ls] = sigma * float(mean[k])
            jac[ds + j, k] = sigma
        c = jac @ cov @ jac.T
        return StandIn(np.asarray(mu, dtype=np.float64), np.asarray((c + c.T) / 2.0), ds, icept)

    @property
    def m(self) -> int:
        return self.mean.shape[0] - self.ds


@dataclass(frozen=True)
class Simulated:
    """A simulated run's summaries. ``ess`` counts only a run whose chains mixed: the smallest bulk ESS
    over s and u after the warm-up when the largest rank-normalised split R-hat is at most :data:`RHAT_MAX`,
    else 0 (chains that disagree buy no usable draw, however ArviZ counts their draws)."""

    ess: float
    shared_acceptance: float
    local_acceptance: float
    asked: float  # the share of shared proposals inside the cap
    rhat: float = 1.0  # the largest R-hat over s and u
    raw_ess: float = 0.0  # the smallest bulk ESS whatever the R-hat


def _quad(z: F64, prec: F64) -> F64:
    return np.asarray(np.einsum("ij,jk,ik->i", z, prec, z), dtype=np.float64)


def _shared_proposal(stand: StandIn) -> tuple[F64, F64, list[F64], F64]:
    """(m_s, Σ_s, the independence parts' Cholesky factors, the walk's Cholesky factor)."""
    ds = stand.ds
    ms, cs = stand.mean[:ds], stand.cov[:ds, :ds]
    chol = np.asarray(np.linalg.cholesky(cs), dtype=np.float64)
    parts: list[F64] = [INFLATE * chol, BROAD_INFLATE * chol]
    walk: F64 = (2.38 / math.sqrt(ds)) * chol
    return ms, cs, parts, walk


def shared_cap(
    shared: SharedModel, stand: StandIn, rng: np.random.Generator, quantile: float = 0.999, n: int = 20_000
) -> float:
    """The ``quantile`` of c(s, s*) for s a draw of the stand-in's marginal and s* the
    frozen kernel's proposal from it (the independence mixture or the walk, in their shares): a cap that
    refuses about 1 − ``quantile`` of the proposals publicly (:data:`CAP_QUANTILES`)."""
    ms, _, parts, walk = _shared_proposal(stand)
    s = ms + rng.standard_normal((n, stand.ds)) @ parts[0].T / INFLATE
    pick = rng.random(n)
    ind = np.where(
        (pick < BROAD)[:, None],
        ms + rng.standard_normal((n, stand.ds)) @ parts[1].T,
        ms + rng.standard_normal((n, stand.ds)) @ parts[0].T,
    )
    walked = s + rng.standard_normal((n, stand.ds)) @ walk.T
    star = np.where((rng.random(n) < WALK_SHARE)[:, None], walked, ind)
    return float(np.quantile(record_sensitivity(shared, s, star), quantile))


@dataclass
class _StandInRegistries:
    """The registries of a simulated blocked run on the stand-in: every decision call is one sweep, in which
    each registry first makes its local steps (all chains, given the sweep's shared states) and then answers
    the asked decisions with its term; their sum with the public term is the stand-in's log ratio of (s*, v)
    over (s, v) plus the proposal ratio and the penalty's correction (the public term carries the shared
    prior's ratio, which the stand-in already holds: it is taken out of the terms), plus the registries'
    N(0, sd²) noise, decided by the plain rule (as ``blocked.LocalBlockParties``)."""

    shared: SharedModel
    stand: StandIn
    settings: BlockedSettings
    warmup: int
    rng: np.random.Generator
    v: F64  # (chains, m)
    log_scale: F64 = field(init=False)
    prec: F64 = field(init=False)
    target: float = field(init=False)  # the local Robbins-Monro target (local.RegistryBlock.sweep's)
    local_accepted: int = 0
    local_steps: int = 0

    def __post_init__(self) -> None:
        self.log_scale = np.full(self.v.shape, math.log(self.settings.local_max_step))
        self.prec = np.asarray(np.linalg.inv(self.stand.cov), dtype=np.float64)
        self.target = 0.44 * 2.0 * float(sps.norm.cdf(-self.settings.local_sd / 2.0))

    def _local(self, s: F64, sweep: int) -> None:
        st, ds, rng = self.settings, self.stand.ds, self.rng
        chains, m = self.v.shape
        h, sd_loc = st.local_max_step, st.local_sd
        target, diag = self.target, np.diag(self.prec)[ds:]
        for step in range(st.local_steps):  # every registry at once: v is conditionally independent
            # across registries given s (the stand-in's v-v precision block is diagonal)
            inc = np.clip(np.exp(self.log_scale) * rng.standard_normal((chains, m)), -h, h)
            dev = np.column_stack([s, self.v]) - self.stand.mean
            ratio = -inc * (dev @ self.prec[:, ds:]) - 0.5 * diag * inc**2  # v_j's conditional log ratio
            noisy = ratio + sd_loc * rng.standard_normal((chains, m)) - 0.5 * sd_loc**2
            acc = np.log(rng.random((chains, m))) < noisy
            self.v = np.where(acc, self.v + inc, self.v)
            self.local_accepted += int(acc.sum())
            self.local_steps += acc.size
            if sweep < self.warmup:  # the registries' Robbins-Monro rule, frozen after the warm-up
                gain = (1.0 + (sweep * st.local_steps + step) / 10.0) ** -0.6
                self.log_scale = np.clip(self.log_scale + gain * (acc - target), -25.0, 25.0)

    def __call__(self, request: DecisionRequest) -> npt.NDArray[np.bool_]:
        assert request.states is not None and request.sweep is not None
        assert request.theta is not None and request.chain is not None
        self._local(request.states, request.sweep)
        v = self.v[request.chain]
        x, xs = np.column_stack([request.theta, v]), np.column_stack([request.theta_star, v])
        mean = self.stand.mean
        full = -0.5 * (_quad(xs - mean, self.prec) - _quad(x - mean, self.prec))
        terms = full - (self.shared.log_prior(request.theta_star) - self.shared.log_prior(request.theta))
        noise = self.settings.sd_total * self.rng.standard_normal(request.n)
        return np.asarray(np.log(self.rng.random(request.n)) < request.public + terms + noise)


def simulate_blocked(
    shared: SharedModel,
    stand: StandIn,
    settings: BlockedSettings,
    *,
    chains: int,
    sweeps: int,
    warmup: int,
    rng: np.random.Generator,
    target_accept: float | None = None,
) -> Simulated:
    """A blocked run of ``settings`` on the stand-in, ``sweeps`` sweeps of ``chains`` chains as the run
    makes them (the module docstring): the shared block by the run's own kernel (``blocked.SharedAuto``
    with the adaptation of a run this long, its warm-up ``warmup``, from prior draws), the local steps on
    the stand-in's conditionals; the ESS of the draws after ``warmup``."""
    import arviz as az

    from mechanisms.samplers.blocked import BlockedDecider, SharedAuto, blocked_kernel
    from mechanisms.samplers.mh import prior_proposal_cov
    from mechanisms.samplers.requests import Penalty

    ds, m = stand.ds, stand.m
    pen = Penalty(tau=None, sd=settings.sd_total / math.sqrt(m), max_sensitivity=settings.cap)
    s0 = shared.sample_prior(rng, chains)
    h = shared.hierarchy
    b0 = s0[:, stand.intercept] if stand.intercept is not None else np.zeros(chains)
    v0 = b0[:, None] + np.exp(s0[:, [shared.position(h.log_sd)]]) * rng.standard_normal((chains, m))
    parties = _StandInRegistries(shared, stand, settings, warmup, rng, np.asarray(v0, dtype=np.float64))

    def make(sm: SharedModel, dec: BlockedDecider) -> SharedAuto:
        return SharedAuto(
            sm, dec, prior_proposal_cov(sm), stop=max(warmup, 4), start=max(sweeps // 10, 1),
            every=max(sweeps // 40, 1), history_from=sweeps // 20, target_accept=target_accept, penalty=pen,
            m=m,
        )  # fmt: skip

    kernel = blocked_kernel(shared.full, parties, make)
    state = kernel.init(s0)
    trace = np.empty((sweeps - warmup, chains, ds + m))
    accepted = asked = 0
    for t in range(sweeps):
        state, info = kernel.step(rng, state)
        if t >= warmup:
            out = np.column_stack([state.theta, parties.v])
            if stand.intercept is not None:
                out[:, ds:] -= out[:, [stand.intercept]]
            trace[t - warmup] = out
            accepted += int(info.accept.sum())
            asked += int(info.asked)
    kept = sweeps - warmup
    data = az.convert_to_dataset(trace.transpose(1, 0, 2))
    ess = float(np.min(az.ess(data, method="bulk").to_array().values))
    rhat = float(np.max(az.rhat(data).to_array().values))
    return Simulated(
        ess=ess if rhat <= RHAT_MAX else 0.0,
        rhat=rhat,
        raw_ess=ess,
        shared_acceptance=accepted / max(chains * kept, 1),
        local_acceptance=parties.local_accepted / max(parties.local_steps, 1),
        asked=asked / max(chains * kept, 1),
    )


@dataclass(frozen=True)
class BlockedPlan:
    """What a budget buys a blocked run (per registry, for its view): the settings, the sweeps per chain,
    the μ and ε they spend (a bound on every registry's ledger: the module docstring), the expected ESS (a
    mean over the stand-in), and what ``min_ess`` would need."""

    settings: BlockedSettings
    iterations: int
    warmup: int
    chains: int
    mu_sweep2: float  # μ² of one sweep of every chain, as the registries' dry run charges it
    eps: float
    delta: float
    ess: float
    sim: Simulated | None
    budget_mu: float  # the target's μ (the GDP curve through (ε, δ))
    need_iterations: int  # the sweeps min_ess needs at these settings (10**9: out of reach)
    need_eps: float  # ε at δ those sweeps spend
    most: int  # the file's iterations (the run never goes past them)
    need_settings: BlockedSettings | None = None  # the settings of need_eps
    need_simulated: bool = True  # False: need_eps is an extrapolation past the longest run simulated
    floor: Floor | None = None
    mu_warm: float = 0.0  # a blocked run has no warm start
    warm_alone: bool = False

    @property
    def mu_total(self) -> float:
        return math.sqrt(self.iterations * self.mu_sweep2)

    @property
    def mcse_sd(self) -> float:
        return 1.0 / math.sqrt(self.ess) if self.ess > 0 else math.inf

    def eps_for_ess(self, ess: float) -> float:
        """ε at δ a run at these settings needs for ``ess`` (the ESS per sweep after the warm-up this plan
        measured; the warm-up half of the run, as planned)."""
        return gdp_eps(math.sqrt(self.iterations_for_ess(ess) * self.mu_sweep2), self.delta)

    def iterations_for_ess(self, ess: float) -> int:
        kept = self.iterations - self.warmup
        if self.ess <= 0 or kept <= 0:
            return 10**9
        rate = self.ess / kept  # effective draws per sweep after the warm-up
        return max(MIN_SWEEPS, 2 * math.ceil(ess / rate))

    def eps_scaled(self, factor: float) -> float:
        return gdp_eps(math.sqrt(factor * self.iterations * self.mu_sweep2), self.delta)

    def floor_line(self, ess: float | None = None) -> str:
        k = self.ess if ess is None else ess
        spend = (lambda: self.eps) if ess is None else (lambda: self.eps_for_ess(k))
        return plan_floor_line(self.floor, k, self.delta, spend)

    def text(self) -> str:
        sim = self.sim
        head = (
            f"blocked: {self.chains} chains x {self.iterations} sweeps (warm-up {self.warmup}); "
            f"{self.settings.text()}; "
        )
        if sim is not None:
            head += (
                f"acceptance {sim.shared_acceptance:.2f} shared ({sim.asked:.1%} inside the cap), "
                f"{sim.local_acceptance:.2f} local; R-hat {sim.rhat:.3g}; expected ESS {self.ess:.0f} (Monte "
                "Carlo error "
                f"{self.mcse_sd:.2f} posterior sd; a mean over a Gaussian stand-in); "
            )
        return head + (
            f"spends mu = {self.mu_total:.3f} (every decision charged at the cap, as the registries' dry "
            f"run), eps = {self.eps:.3g} at delta = {self.delta:g}"
        )


def _iterations(budget_mu: float, mu_sweep2: float, most: int) -> int:
    """The most sweeps (at most ``most``) whose μ² fits the budget's μ²."""
    return min(int(budget_mu**2 / mu_sweep2), most) if mu_sweep2 > 0 else most


def _run(
    shared: SharedModel,
    stand: StandIn,
    st: BlockedSettings,
    chains: int,
    sweeps: int,
    seed: int,
    target_accept: float | None = None,
) -> Simulated:
    """A run of ``sweeps`` sweeps, its warm-up the first half (a blocked run's ``warmup = adapt_stop``);
    deterministic in its public inputs, so made once (plans for several targets share their runs)."""
    key = (id(shared), stand.mean.tobytes(), stand.cov.tobytes(), st, chains, sweeps, seed, target_accept)
    if key in _RUNS:
        return _RUNS[key]
    rng = np.random.default_rng(seed)
    half = sweeps // 2
    sim = simulate_blocked(
        shared, stand, st, chains=chains, sweeps=sweeps, warmup=half, rng=rng, target_accept=target_accept
    )
    if len(_RUNS) > 512:
        _RUNS.clear()
    _RUNS[key] = sim
    return sim


_RUNS: dict[tuple[object, ...], Simulated] = {}


SCREEN_SWEEPS = 200  # every candidate is first simulated this long (or the run it buys, if shorter) ...
FINALISTS = 2  # ... and the candidates with the largest projected ESS at the run they buy, that long
EXTRA_FINALISTS = 4  # ... and, while none of them reaches min_ess, up to this many more in that order


@dataclass(frozen=True)
class BlockedTarget:
    """What a blocked plan must reach and within what: the budget eps at delta, the ESS it must buy, the
    chains, the most sweeps, the public seed of its simulations, the floor to state beside it and the target
    acceptance of the local steps."""

    eps: float
    delta: float
    min_ess: float
    chains: int
    most: int
    seed: int
    floor: Floor | None = None
    target_accept: float | None = None


def plan_blocked(
    shared: SharedModel,
    stand: StandIn,
    charge: SweepCharge,
    candidates: list[BlockedSettings],
    target: BlockedTarget,
) -> BlockedPlan:
    """The candidate with the largest expected ESS within ε at δ (ties: the smaller spend): each is
    screened on a run of :data:`SCREEN_SWEEPS` sweeps (its ESS per sweep after the warm-up projects the ESS
    of the run it buys), and the :data:`FINALISTS` best projections are simulated at the sweeps they buy (at
    most ``most``, the file's iterations; none below :data:`MIN_SWEEPS`), then up to
    :data:`EXTRA_FINALISTS` more while none reaches ``min_ess``; with what ``min_ess`` needs (:func:`_need`)
    when the best buys less."""
    _s = target
    eps, delta, min_ess = _s.eps, _s.delta, _s.min_ess
    chains, most, seed = _s.chains, _s.most, _s.seed
    floor, target_accept = _s.floor, _s.target_accept
    budget_mu = gdp_mu(eps, delta)
    plans: list[BlockedPlan] = []
    screens: list[tuple[int, float]] = []  # (sweeps, ESS) of each candidate's screening run
    for k, st in enumerate(candidates):
        mu2 = charge(st)
        it = bought_sweeps(eps, delta, mu2, most)
        it = it if it >= MIN_SWEEPS else 0
        screen = min(it, SCREEN_SWEEPS) if it else SCREEN_SWEEPS
        sim = _run(shared, stand, st, chains, screen, seed + k, target_accept)
        screens.append((screen, sim.raw_ess))  # its ESS per sweep projects longer runs (R-hat aside)
        plans.append(
            BlockedPlan(
                settings=st, iterations=it, warmup=it // 2, chains=chains, mu_sweep2=mu2,
                eps=gdp_eps(math.sqrt(it * mu2), delta) if it else 0.0, delta=delta,
                ess=sim.ess if it and screen == it else 0.0, sim=sim if it and screen == it else None,
                budget_mu=budget_mu, need_iterations=10**9, need_eps=math.inf, most=most, floor=floor,
            )
        )

    def projected(k: int) -> float:
        p, (screen, ess) = plans[k], screens[k]
        return 0.0 if not p.iterations else ess * (p.iterations - p.iterations // 2) / (screen - screen // 2)

    order = sorted(range(len(plans)), key=projected, reverse=True)
    for rank, k in enumerate(order[: FINALISTS + EXTRA_FINALISTS]):
        if rank >= FINALISTS and max(p.ess for p in plans) >= min_ess:
            break  # past the finalists only while no run simulated reaches min_ess
        p = plans[k]
        if p.iterations and p.sim is None:
            sim = _run(shared, stand, p.settings, chains, p.iterations, seed + k, target_accept)
            plans[k] = dataclasses.replace(p, sim=sim, ess=sim.ess)
    best = max(plans, key=lambda p: (p.ess, p.sim.raw_ess if p.sim is not None else -1.0, -p.eps))
    if best.ess >= min_ess:
        return best
    need = _need(
        shared, stand, plans, screens, min_ess=min_ess, chains=chains, seed=seed, target_accept=target_accept
    )
    return dataclasses.replace(
        best,
        need_eps=need.eps,
        need_iterations=need.sweeps,
        need_settings=need.settings,
        need_simulated=need.simulated,
    )


NEED_CANDIDATES = 2  # the candidates with the cheapest projected need searched by simulation
NEED_ROUNDS = 8  # lengthenings of a run towards min_ess: by the ESS per sweep it showed, or twice if unmixed
MAX_NEED_SWEEPS = 10_000  # the longest run the search simulates


@dataclass(frozen=True)
class Need:
    """What ``min_ess`` needs: ε at δ, the sweeps, the settings; ``simulated`` False when no run simulated
    reached it (then an extrapolation from the longest run's ESS per sweep, at :data:`MAX_NEED_SWEEPS` and
    beyond)."""

    eps: float
    sweeps: int
    settings: BlockedSettings | None
    simulated: bool = True


def _need(
    shared: SharedModel,
    stand: StandIn,
    plans: list[BlockedPlan],
    screens: list[tuple[int, float]],
    *,
    min_ess: float,
    chains: int,
    seed: int,
    target_accept: float | None = None,
) -> Need:
    """The cheapest run found whose simulated ESS reaches ``min_ess``. Each candidate's ESS per sweep after
    the warm-up on its screening run projects the sweeps it needs; for the :data:`NEED_CANDIDATES` cheapest
    projections a run that long is simulated (the plan's own runs: the same seed), lengthened by the ESS per
    sweep it shows, or doubled while its chains have not mixed (at most :data:`NEED_ROUNDS` times, to
    :data:`MAX_NEED_SWEEPS`) until it reaches it, then
    shortened by bisection (down to half of it, to 5 %); the target advised is that run's charge at the cap,
    rounded up to 3 digits and checked: the run that target buys reaches it too. None reached: the longest
    mixed run's ESS per sweep extrapolated (``simulated`` False, said as such), or nothing (a run that never
    mixed)."""
    projected = []
    for k, (p, (it, ess)) in enumerate(zip(plans, screens, strict=True)):
        rate = max(ess, 1e-3) / max(it - it // 2, 1)
        sweeps = max(MIN_SWEEPS, 2 * math.ceil(min_ess / rate))
        projected.append((sweeps * p.mu_sweep2, sweeps, k))
    best = Need(math.inf, 10**9, None)
    fallback = Need(math.inf, 10**9, None, simulated=False)
    for _, sweeps, k in sorted(projected)[:NEED_CANDIDATES]:
        p = plans[k]

        def sim_of(it: int, k: int = k, p: BlockedPlan = p) -> Simulated:
            return _run(shared, stand, p.settings, chains, it, seed + k, target_accept)

        def ess_of(it: int) -> float:
            return sim_of(it).ess

        hi, lo = min(sweeps, MAX_NEED_SWEEPS), MIN_SWEEPS - 1
        for _ in range(NEED_ROUNDS):
            sim = sim_of(hi)
            if sim.ess >= min_ess or hi >= MAX_NEED_SWEEPS:
                break
            lo, rate = hi, max(sim.raw_ess, 1e-3) / (hi - hi // 2)
            # not mixed: twice as long; mixed: as long as its rate says
            longer = 2 * hi if sim.rhat > RHAT_MAX else 2 * math.ceil(1.1 * min_ess / rate)
            hi = min(MAX_NEED_SWEEPS, max(math.ceil(1.25 * hi), longer))
        if sim.ess < min_ess:
            if sim.rhat > RHAT_MAX:
                continue  # its chains never mixed in the simulation's reach: nothing to extrapolate
            rate = max(sim.raw_ess, 1e-3) / (hi - hi // 2)  # mixed, too few draws: the rate extrapolated
            far = 2 * math.ceil(min_ess / rate)
            e = round_up(gdp_eps(math.sqrt(far * p.mu_sweep2), p.delta))
            if e < fallback.eps:
                fallback = Need(e, far, p.settings, simulated=False)
            continue
        lo = max(lo, hi // 2 - 1)
        while hi - lo > max(1, hi // 20):  # the shortest run that reaches it (from half of it), to 5 %
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ess_of(mid) >= min_ess else (mid, hi)
        for _ in range(4):  # the target as advised (3 digits, rounded up) buys its own run: check that one
            e = round_up(gdp_eps(math.sqrt(hi * p.mu_sweep2), p.delta))
            bought = bought_sweeps(e, p.delta, p.mu_sweep2, MAX_NEED_SWEEPS)
            if ess_of(bought) >= min_ess:
                if e < best.eps:
                    best = Need(e, bought, p.settings)
                break
            hi = math.ceil(1.05 * bought)
    return best if best.settings is not None else fallback


def round_up(x: float, digits: int = 3) -> float:
    """The smallest number of ``digits`` significant digits >= ``x`` (an advised target, as printed)."""
    if not (x > 0 and math.isfinite(x)):
        return x
    scale = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.{digits}g}")


def bought_sweeps(eps: float, delta: float, mu_sweep2: float, most: int) -> int:
    """The most sweeps (at most ``most``) of μ² ``mu_sweep2`` each whose ε at δ stays within ``eps``."""
    it = _iterations(gdp_mu(eps, delta), mu_sweep2, most)
    while it > 0 and gdp_eps(math.sqrt(it * mu_sweep2), delta) > eps:  # never a spend above the target
        it -= 1
    return it
