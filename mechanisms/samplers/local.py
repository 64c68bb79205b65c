"""One registry's own block of a blocked sampler: its random effect, updated where its records are.

In a model with a registry random intercept (``mechanisms.models.hierarchy``) registry j's records depend on
the shared parameters s (fixed effects, log σ_u, a Weibull shape) and on its own effect u_j only. A blocked
sweep (``mechanisms.samplers.blocked``) is, per chain: (a) every registry updates its own effect by exact
Metropolis–Hastings on its own term, given the chain's current s — a decision of this registry alone, made
here, never revealed; (b) the coordinator proposes s* and the registries decide s → s* by the confidential
accept-reject, each registry's term computed at its own current effect. This module is (a) and the registry's
term of (b); the daemon (``parties.models_bridge``) and the in-memory parties (``blocked.LocalBlockParties``)
both use it, so a networked and an in-memory run compute the same.

**The registry's coordinate of its effect** (per chain), with σ = σ_u, β the coefficients and x̄ a centring
row of the registry's own (the information-weighted mean design row of its records, :class:`RegistryBlock`;
private: it never leaves the registry):

* centred: v = u_j + x̄·β (the linear predictor at the registry's weighted mean record), whose conditional
  prior given s is N(v − x̄·β; 0, σ²) (density in v; the Jacobian of v ↦ u is 1);
* non-centred: v = z_j = u_j / σ, prior N(0, 1) whatever s.

The joint target in (s, v_1..v_m) is π(s) Π_j p_j(v_j | s) L_j(s, u_j(s, v_j)), which has the posterior of
(s, u) as its image, so a chain on (s, v) reports exact draws of z_j = u_j / σ. The registry's term of a
shared move s → s* at fixed v is ℓ_j = T_j(s*, v) − T_j(s, v), with
T_j(s, v) = log p_j(v | s) + log L_j(s, u_j(s, v)), and its local update is MH on T_j(s, ·) with s fixed.
Which coordinate mixes depends on the data: with its data's information I_j about u_j (the curvature of
log L_j in u_j), the two-block Gibbs sampler of the normal hierarchical model converges at rate
1/(1 + I_j σ²) centred and I_j σ² / (1 + I_j σ²) non-centred (Papaspiliopoulos, Roberts & Sköld 2007), so
with ``parameterisation = "auto"`` each sweep of a chain holds the centred coordinate with probability
p_j(σ) = I_j σ² / (1 + I_j σ²) kept in [P_MIN, 1 − P_MIN] (:func:`centred_probability`), at the chain's
current σ = σ_u: a registry whose data say more about its effect than the spread of effects is centred, one
that says less non-centred, and the choice follows σ_u as the chain moves. I_j and x̄ are measured every
``choose_every`` sweeps during the warm-up and frozen after it. The centring makes v, to first order,
uncorrelated with the slopes in the registry's likelihood, so the shared move is not held back by a
registry's large, well-determined intercept.

**Why a coin that follows σ_u keeps the chain exact.** Take the coordinate label c_j (centred or not) as
part of the state, with the extended target π(s, u) Π_j w_j(c_j | σ), w_j(centred | σ) = p_j(σ) and
w_j(non-centred | σ) = 1 − p_j(σ); its marginal in (s, u) is the posterior (Σ_c w_j(c | σ) = 1). A sweep
is three kernels, each invariant for it: the coin draws c_j from w_j(· | σ), its exact conditional (a Gibbs
step); the local steps move v_j at fixed s and c_j, where w_j does not depend on v_j (its ratio is 1); the
shared move s → s* at fixed (v, c) is MH for π(s, v) Π_j w_j(c_j | σ), so registry j's term gains
log w_j(c_j | σ*) − log w_j(c_j | σ) (:meth:`RegistryBlock.shared_terms`). That term is computed inside the
registry (I_j and c_j never leave it) and enters the confidential sum with the rest of ℓ_j, so the
coordinator learns what it learnt before: the accept bit. With a coin whose probability stayed frozen at a
warm-up state, a chain that moved to a small σ_u kept centring a registry too small to know its effect
(docs/BENCHMARKS.md, "The registry-effects study: the coordinate floor"), and the floor P_MIN had to stay at
0.05 (a quarter of the study's shared moves wasted on a large registry's non-centred coordinate).

**The local kernel**: ``steps`` random-walk MH steps per sweep on v with each chain's own scale, Robbins–Monro
adapted to ``target_accept`` (1-D optimum 0.44) during the warm-up (sweeps < ``adapt_until``) and frozen after
it; the uniforms and normals from the registry's CSPRNG. Everything is fixed from ``adapt_until`` on, so the
sweeps after it are a fixed kernel (finite adaptation). What is public: the settings (they travel in the
session's plan). What is not: v, its coordinate, its scale, the local accept bits and x̄_j.

**Noisy local steps** (``LocalSettings.sd`` and ``max_step``: the plan a privacy budget can charge,
docs/PRIVACY.md "Blocked sampling under a budget"): every local step is penalty MH — accept iff log U <
T_j(s, v') − T_j(s, v) + W − sd²/2, W ~ N(0, sd²) from the registry's CSPRNG (exact: the penalty's acceptance
α(λ) = e^λ α(−λ)) — with the increment clipped to ±``max_step`` (a symmetric law clipped symmetrically: a
symmetric proposal), and nothing is computed from the records but the local log ratios: the coordinate is
the public intercept-centred one (v = β_0 + u_j: :attr:`RegistryBlock.public_centre`, parameterisation
"centred"), the initial scale ``max_step``, the Robbins–Monro target lowered by the penalty's acceptance at
λ = 0. The scale still adapts in the warm-up, from the noisy accept bits (charged: a post-processing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from scipy import special

from hss.randomness import SecureRandom
from mechanisms.models.base import F64, Data, Model
from mechanisms.models.hierarchy import RandomIntercept, SharedModel
from mechanisms.samplers.penalty import penalty_acceptance
from mechanisms.samplers.requests import record_sensitivity, step_sensitivity

PARAMETERISATIONS = ("auto", "centred", "non-centred")
LOG_2PI = math.log(2.0 * math.pi)
CURVATURE_STEP = 1e-2  # the finite-difference step (in u) of the information I_j
MAX_LOCAL_STEPS = 64
P_MIN = 0.005  # "auto": each coordinate is held in at least this share of a chain's shared moves


@dataclass(frozen=True)
class LocalSettings:
    """The public settings of every registry's local updates (they travel in the session's plan)."""

    steps: int = 3  # random-walk MH steps on v per sweep
    adapt_until: int = 0  # sweeps < adapt_until: scales adapt and the coordinate may change; frozen after
    target_accept: float = 0.44
    parameterisation: str = "auto"
    choose_every: int = 10
    sd: float | None = None  # noisy local steps: the registry's own N(0, sd²) on its local log ratio
    max_step: float | None = None  # noisy local steps: a local proposal moves u_j by at most this

    def __post_init__(self) -> None:
        if not (isinstance(self.steps, int) and 1 <= self.steps <= MAX_LOCAL_STEPS):
            raise ValueError(f"local steps must be an integer in 1..{MAX_LOCAL_STEPS}, got {self.steps!r}")
        if not (isinstance(self.adapt_until, int) and self.adapt_until >= 0):
            raise ValueError(f"local adapt_until must be an integer >= 0, got {self.adapt_until!r}")
        if not 0.0 < self.target_accept < 1.0:
            raise ValueError(f"local target_accept must be in (0, 1), got {self.target_accept!r}")
        if self.parameterisation not in PARAMETERISATIONS:
            raise ValueError(
                f"local parameterisation must be one of {PARAMETERISATIONS}, got {self.parameterisation!r}"
            )
        if not (isinstance(self.choose_every, int) and self.choose_every >= 1):
            raise ValueError(f"local choose_every must be an integer >= 1, got {self.choose_every!r}")
        if (self.sd is None) != (self.max_step is None):
            raise ValueError(
                "noisy local steps need both local sd (the penalty's noise on a local log ratio) and "
                f"local max_step (the cap on a local proposal's move of u_j), got sd={self.sd!r}, "
                f"max_step={self.max_step!r}"
            )
        for key in ("sd", "max_step"):
            v = getattr(self, key)
            number = isinstance(v, int | float) and not isinstance(v, bool)
            if v is not None and (not number or not 0 < v < math.inf):
                raise ValueError(f"local {key} must be a finite number > 0, got {v!r}")
        if self.noisy and self.parameterisation != "centred":
            raise ValueError(
                "noisy local steps hold every effect in the public intercept-centred coordinate "
                "v_j = beta_0 + u_j: local parameterisation must be 'centred', got "
                f"{self.parameterisation!r} (the data-driven choice and centring of 'auto' would be releases "
                "of their own)"
            )

    @property
    def noisy(self) -> bool:
        """Whether the local steps are penalty MH with the registry's own noise (accountable) rather than
        exact MH (``RegistryBlock.sweep``)."""
        return self.sd is not None

    def to_params(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "adapt_until": self.adapt_until,
            "target_accept": self.target_accept,
            "parameterisation": self.parameterisation,
            "choose_every": self.choose_every,
        } | ({} if self.sd is None else {"sd": self.sd, "max_step": self.max_step})

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> LocalSettings:
        extra = set(p) - {
            "steps", "adapt_until", "target_accept", "parameterisation", "choose_every", "sd", "max_step",
        }  # fmt: skip
        if extra:
            raise ValueError(f"unknown local parameters {sorted(extra)}")
        for key in ("steps", "adapt_until", "choose_every"):
            if key in p and (not isinstance(p[key], int) or isinstance(p[key], bool)):
                raise ValueError(f"local {key} must be an integer, got {p[key]!r}")
        target = p.get("target_accept", 0.44)
        if not isinstance(target, int | float) or isinstance(target, bool):
            raise ValueError(f"local target_accept must be a number, got {target!r}")
        return cls(
            steps=p.get("steps", 3),
            adapt_until=p.get("adapt_until", 0),
            target_accept=float(target),
            parameterisation=str(p.get("parameterisation", "auto")),
            choose_every=p.get("choose_every", 10),
            sd=p.get("sd"),
            max_step=p.get("max_step"),
        )


@dataclass(frozen=True)
class LocalState:
    """One registry's local state after ``t`` sweeps, per chain: its coordinate v, whether v is the centred
    one, the centring row x̄ of the centred coordinate (v = u + x̄·β), the random walk's log scale (in v's
    units), and its local step and accept counts (the Robbins–Monro gain's index; its own audit)."""

    t: int
    v: F64  # (chains,)
    centred: npt.NDArray[np.bool_]  # (chains,): the coordinate of v (that of the last sweep's shared move)
    centre: F64  # (chains, k): the centring row of each chain's centred coordinate
    log_scale: F64  # (chains,): the local random walk's log scale, in u's units
    p_centred: F64  # (chains,): the probability that the last sweep held the centred coordinate in its shared
    # move (with ``info``: the one at that sweep's σ_u, :func:`centred_probability`)
    local_steps: int = 0
    accepted: int = 0
    info: F64 | None = None  # (chains,): "auto"'s I_j, measured in the warm-up and frozen after it (None: the
    # coordinate's probability is p_centred whatever σ_u: a fixed parameterisation, or before the first sweep)

    KEYS: ClassVar[tuple[str, ...]] = (
        "t", "v", "centred", "centre", "log_scale", "p_centred", "local_steps", "accepted", "info",
    )  # fmt: skip

    @property
    def chains(self) -> int:
        return int(self.v.shape[0])

    def to_json(self) -> dict[str, Any]:
        """Exactly this state as JSON (floats as their shortest repr round-trip exactly)."""
        return {
            "t": self.t,
            "v": [float(x) for x in self.v],
            "centred": [bool(x) for x in self.centred],
            "centre": [[float(x) for x in row] for row in self.centre],
            "log_scale": [float(x) for x in self.log_scale],
            "p_centred": [float(x) for x in self.p_centred],
            "local_steps": self.local_steps,
            "accepted": self.accepted,
            "info": None if self.info is None else [float(x) for x in self.info],
        }

    @classmethod
    def from_json(cls, doc: Any) -> LocalState:
        if not isinstance(doc, dict) or set(doc) != set(cls.KEYS):
            raise ValueError(f"a local state holds exactly {', '.join(cls.KEYS)}")
        v = np.asarray(doc["v"], dtype=np.float64)
        centred = np.asarray(doc["centred"], dtype=bool)
        centre = np.asarray(doc["centre"], dtype=np.float64)
        scale = np.asarray(doc["log_scale"], dtype=np.float64)
        p_c = np.asarray(doc["p_centred"], dtype=np.float64)
        same = centred.shape == v.shape and scale.shape == v.shape and p_c.shape == v.shape
        if v.ndim != 1 or not same or not np.isfinite(v).all() or not ((p_c >= 0) & (p_c <= 1)).all():
            raise ValueError(
                "a local state's v, centred, log_scale and p_centred (in [0, 1]) must be finite and of one "
                "length"
            )
        if centre.ndim != 2 or centre.shape[0] != v.shape[0] or not np.isfinite(centre).all():
            raise ValueError("a local state's centre must be finite, one row per chain")
        ints = (doc["t"], doc["local_steps"], doc["accepted"])
        if not all(type(x) is int and x >= 0 for x in ints):
            raise ValueError("a local state's t, local_steps and accepted must be integers >= 0")
        info = None if doc["info"] is None else np.asarray(doc["info"], dtype=np.float64)
        if info is not None and (info.shape != v.shape or not np.isfinite(info).all() or (info < 0).any()):
            raise ValueError("a local state's info must be null or finite numbers >= 0, one per chain")
        return cls(doc["t"], v, centred, centre, scale, p_c, doc["local_steps"], doc["accepted"], info)


def centred_probability(info: F64, sigma: F64) -> F64:
    """"auto"'s probability of the centred coordinate: I σ_u² / (1 + I σ_u²) kept in [P_MIN, 1 − P_MIN]."""
    ratio = info * sigma**2
    return np.asarray(np.clip(ratio / (1.0 + ratio), P_MIN, 1.0 - P_MIN), dtype=np.float64)


@dataclass(frozen=True)
class _At:
    """What the registry's terms at shared states s reuse, one row per chain asked about."""

    s: F64  # (n, d_s) shared states
    sigma: F64  # (n,) σ_u
    lin: F64  # (n,) x̄·β with each row's centring row
    full: F64  # (n, d) the full θ with z = 0
    eta0: F64 | None  # (n, records) the linear predictor without u (the model's fast path), or None


def _normal(rng: SecureRandom, n: int) -> F64:
    return np.asarray(special.ndtri(rng.uniform(n)), dtype=np.float64)


@dataclass
class RegistryBlock:
    """Registry j's side of a blocked sampler: its checked records, which level (effect) is its own, and the
    local update and shared term of the module docstring. The centring row of a chain's centred coordinate
    is the information-weighted mean design row of the registry's records at that chain's state (weights
    w_i = −∂² log p(y_i | η_i)/∂η_i², re-chosen with the coordinate during the warm-up): then v is, to first
    order, uncorrelated with the slopes in the registry's likelihood (its Fisher information's cross terms
    Σ_i w_i (x_i − x̄) vanish), so a shared move of the slopes at fixed v is not held back by the registry's
    well-determined intercept. It is private (a weighted mean of the registry's covariates) and never
    leaves the registry."""

    model: Model
    data: Data
    settings: LocalSettings
    level: int | None = None  # the level the records must carry (None: whichever one they carry)
    _shared: SharedModel = field(init=False, repr=False)
    _mean_row: F64 = field(init=False, repr=False)  # the unweighted mean design row (the first centring)
    _ls: int = field(init=False, repr=False)  # log σ_u's index in the shared block
    _beta: list[int] = field(init=False, repr=False)  # the coefficients' indices in the shared block

    def __post_init__(self) -> None:
        self._shared = SharedModel(self.model)
        ri = self.hierarchy
        where = {full: k for k, full in enumerate(self._shared.index)}
        self._ls, self._beta = where[ri.log_sd], [where[i] for i in ri.beta]
        own = ri.level_of(self.data)
        if self.level is not None and own != self.level:
            raise ValueError(
                f"this registry's records carry {ri.column} = {ri.levels[own]:g}, but its own effect in "
                f"this session is level {ri.levels[self.level]:g} (party k holds the k-th declared level)"
            )
        self.level = own
        row = np.asarray(self.model.covariate_means(self.data), dtype=np.float64)
        if row.shape != (len(ri.beta),) or not np.isfinite(row).all():
            raise ValueError(
                f"covariate_means must give {len(ri.beta)} finite numbers, got shape {row.shape}"
            )
        self._mean_row = row

    @property
    def hierarchy(self) -> RandomIntercept:
        return self._shared.hierarchy

    @property
    def shared(self) -> SharedModel:
        return self._shared

    # ---- the coordinate and the target -------------------------------------------------------------------

    def at(self, s: F64, centre: F64) -> _At:
        """σ_u, x̄·β, the full θ (z = 0) and, with the model's fast path, the linear predictor without u
        (rows, records) at shared states s (rows, d_s) with centring rows ``centre`` (rows, k)."""
        sigma = np.exp(s[:, self._ls])
        lin = np.einsum("ij,ij->i", s[:, self._beta], centre)
        full = self._shared.embed(s)
        eta0 = self.model.linear_predictor(self.data, full)
        return _At(s, sigma, lin, full, None if eta0 is None else np.asarray(eta0, dtype=np.float64))

    @staticmethod
    def u_of(at: _At, v: F64, centred: npt.NDArray[np.bool_]) -> F64:
        return np.asarray(np.where(centred, v - at.lin, at.sigma * v), dtype=np.float64)

    @staticmethod
    def v_of(at: _At, u: F64, centred: npt.NDArray[np.bool_]) -> F64:
        return np.asarray(np.where(centred, u + at.lin, u / at.sigma), dtype=np.float64)

    def z_of(self, s: F64, state: LocalState) -> F64:
        """z_j = u_j / σ_u of every chain, at shared states s (chains, d_s) and this registry's state."""
        sigma = np.exp(s[:, self._ls])
        lin = np.einsum("ij,ij->i", s[:, self._beta], state.centre)
        u = np.where(state.centred, state.v - lin, sigma * state.v)
        return np.asarray(u / sigma, dtype=np.float64)

    def log_lik(self, at: _At, u: F64) -> F64:
        """log L_j(s, u) per row: the registry's log-likelihood with its own effect u (z = u / σ_u)."""
        if at.eta0 is not None:
            return np.asarray(self.model.log_likelihood_eta(self.data, at.full, at.eta0 + u[:, None]))
        return np.asarray(self.model.log_likelihood(self.data, self._full(at, u)), dtype=np.float64)

    def _full(self, at: _At, u: F64) -> F64:
        full = at.full.copy()
        assert self.level is not None
        full[:, self.hierarchy.z[self.level]] = u / at.sigma
        return full

    def _record_lik(self, at: _At, u: F64) -> F64:
        if at.eta0 is not None:
            return np.asarray(self.model.record_log_likelihood_eta(self.data, at.full, at.eta0 + u[:, None]))
        return np.asarray(self.model.record_log_likelihood(self.data, self._full(at, u)), dtype=np.float64)

    def target(self, at: _At, v: F64, centred: npt.NDArray[np.bool_]) -> F64:
        """T_j(s, v) = log p_j(v | s) + log L_j(s, u_j(s, v)) per row (module docstring)."""
        sigma = at.sigma
        u = self.u_of(at, v, centred)
        prior = np.where(centred, -0.5 * (u / sigma) ** 2 - np.log(sigma), -0.5 * v**2) - 0.5 * LOG_2PI
        with np.errstate(over="ignore", invalid="ignore"):
            out = prior + self.log_lik(at, u)
        return np.asarray(np.where(np.isnan(out), -np.inf, out), dtype=np.float64)

    def weights(self, at: _At, u: F64) -> F64:
        """w_i = −∂² log p(y_i | η_i)/∂η_i² of every record at each row's (s, u), by central differences in
        u (rows, records); I_j = Σ_i w_i is the data's information about u_j."""
        h = CURVATURE_STEP
        lo, mid, hi = self._record_lik(at, u - h), self._record_lik(at, u), self._record_lik(at, u + h)
        with np.errstate(invalid="ignore"):
            w = -(hi - 2.0 * mid + lo) / h**2
        return np.asarray(np.where(np.isfinite(w), np.maximum(w, 0.0), 0.0), dtype=np.float64)

    # ---- the local update ------------------------------------------------------------------------------

    @property
    def public_centre(self) -> F64:
        """The centring row of the noisy mode's coordinate v = β_0 + u_j: 1 at the intercept, 0 elsewhere
        (all 0 without an intercept: v = u_j). Public: it depends on no record."""
        ri = self.hierarchy
        row = np.zeros(len(ri.beta))
        if ri.intercept is not None:
            row[ri.beta.index(ri.intercept)] = 1.0
        return row

    def initial(self, chains: int, rng: SecureRandom) -> LocalState:
        """Sweep 0's state: z_j from its prior N(0, 1) per chain (non-centred; the first sweep chooses). With
        noisy local steps everything but z_j is public: the centring row :attr:`public_centre`, the centred
        coordinate always, the local scale ``max_step`` (nothing computed from the records)."""
        v = _normal(rng, chains)
        if self.settings.noisy:
            assert self.settings.max_step is not None
            centre = np.tile(self.public_centre, (chains, 1))
            scale = np.full(chains, math.log(self.settings.max_step))
            return LocalState(0, v, np.zeros(chains, dtype=bool), centre, scale, np.ones(chains))
        centre = np.tile(self._mean_row, (chains, 1))
        return LocalState(0, v, np.zeros(chains, dtype=bool), centre, np.zeros(chains), np.zeros(chains))

    def _choose(self, s: F64, state: LocalState) -> LocalState:
        """Each chain's probability of the centred coordinate (``parameterisation``: "auto" the measured
        I_j σ² / (1 + I_j σ²) within [P_MIN, 1 − P_MIN]) and centring row at its state, v carried over to
        the new centring (the same u); at the first sweep the local scale from the same information."""
        p = self.settings.parameterisation
        old = self.at(s, state.centre)
        u = self.u_of(old, state.v, state.centred)
        w = self.weights(old, u)
        info = w.sum(axis=1)
        sigma = old.sigma
        if p == "auto":
            p_centred = centred_probability(info, sigma)
        else:
            p_centred = np.full(state.chains, 1.0 if p == "centred" else 0.0)
        weighted = np.asarray(self.model.covariate_means(self.data, w), dtype=np.float64)
        centre = np.where((info > 0)[:, None] & np.isfinite(weighted), weighted, state.centre)
        v = self.v_of(self.at(s, centre), u, state.centred)
        log_scale = state.log_scale
        if state.t == 0 and state.local_steps == 0:  # 2.4 conditional sds of u (the 1-D optimum)
            log_scale = np.log(2.4 / np.sqrt(info + 1.0 / sigma**2))
        return replace(
            state, v=v, centre=centre, log_scale=np.asarray(log_scale, dtype=np.float64), p_centred=p_centred,
            info=np.asarray(info, dtype=np.float64) if p == "auto" else None,
        )  # fmt: skip

    def sweep(self, state: LocalState, s: F64, rng: SecureRandom) -> tuple[LocalState, F64]:
        """Sweep ``state.t``: the local updates of every chain given the chains' shared states s (chains,
        d_s), in the coordinate this sweep's shared move holds (centred with each chain's p_centred: a coin
        of the registry's own, whatever the state); returns the state after it and T_j(s, v) per chain (the
        current half of the shared term)."""
        cfg = self.settings
        if s.shape != (state.chains, self._shared.d):
            raise ValueError(f"shared states must be ({state.chains}, {self._shared.d}), got {s.shape}")
        t = state.t
        adapting = t < cfg.adapt_until
        choose = (adapting and t % cfg.choose_every == 0) or (t == 0 and state.local_steps == 0)
        if choose and not cfg.noisy:  # noisy: the public coordinate, nothing chosen from the records
            state = self._choose(s, state)
        at = self.at(s, state.centre)
        p_centred = state.p_centred if state.info is None else centred_probability(state.info, at.sigma)
        centred = rng.uniform(state.chains) < p_centred
        v = self.v_of(at, self.u_of(at, state.v, state.centred), centred)
        log_scale = state.log_scale.copy()
        step_v = np.where(centred, 0.0, -np.log(at.sigma))  # a scale in u's units, in v's
        cur = self.target(at, v, centred)
        steps, accepted = state.local_steps, state.accepted
        target_accept = cfg.target_accept
        if cfg.noisy:  # the penalty lowers acceptance at λ = 0 to 2Φ(−sd/2): aim at the same share of it
            assert cfg.sd is not None
            target_accept *= float(penalty_acceptance(np.zeros(1), np.full(1, cfg.sd))[0])
        for _ in range(cfg.steps):
            step = np.exp(log_scale + step_v) * _normal(rng, state.chains)
            if cfg.max_step is not None:  # a symmetric increment law clipped symmetrically: symmetric
                step = np.clip(step, -cfg.max_step, cfg.max_step)
            prop = v + step
            new = self.target(at, prop, centred)
            log_u = np.log(rng.uniform(state.chains))
            with np.errstate(invalid="ignore"):
                ratio = new - cur
                if cfg.noisy:  # penalty MH: the registry's own N(0, sd²) and the correction −sd²/2
                    assert cfg.sd is not None
                    ratio = ratio + cfg.sd * _normal(rng, state.chains) - 0.5 * cfg.sd**2
                acc = log_u < ratio
            v, cur = np.where(acc, prop, v), np.where(acc, new, cur)
            accepted += int(acc.sum())
            if adapting:
                gain = (1.0 + steps / 10.0) ** -0.6
                log_scale = np.clip(log_scale + gain * (acc - target_accept), -25.0, 25.0)
            steps += 1
        if not np.isfinite(cur).all():
            raise ValueError("a registry's local target is not finite at its current state")
        out = LocalState(t + 1, v, centred, state.centre, log_scale, p_centred, steps, accepted, state.info)
        return out, np.asarray(cur, dtype=np.float64)

    def shared_terms(
        self, state: LocalState, current: F64, chain: npt.NDArray[np.int64], s: F64, s_star: F64
    ) -> F64:
        """ℓ_j = T_j(s*, v) − T_j(s, v) for the asked decisions (chain indices ``chain``), ``current`` the
        T_j(s, v) of every chain after this sweep's local updates (:meth:`sweep`)."""
        v, centred = state.v[chain], state.centred[chain]
        new = self.target(self.at(s_star, state.centre[chain]), v, centred)
        out = new - current[chain]
        if state.info is not None:  # the coin's probability at σ_u* over the one at σ_u (module docstring)
            info = state.info[chain]
            p_new = centred_probability(info, np.exp(s_star[:, self._ls]))
            p_old = centred_probability(info, np.exp(s[:, self._ls]))
            with np.errstate(divide="ignore", invalid="ignore"):
                out = out + np.where(centred, np.log(p_new / p_old), np.log((1.0 - p_new) / (1.0 - p_old)))
        return np.asarray(np.where(np.isnan(out), -np.inf, out), dtype=np.float64)


def local_step_sensitivity(model: Model, max_step: float, neighbours: str = "replace-one") -> float:
    """Δ of one noisy local step: the most one record moves a registry's local log ratio T_j(s, v') −
    T_j(s, v) (the prior part depends on no record) when its effect moves by at most ``max_step``, under
    ``neighbours`` (``requests.step_sensitivity``): the model's bound between a probe state and the same
    state with the effects moved by ``max_step`` (σ_u = 1 there, so u_j moves by ``max_step``). A bound on
    every local step only for a model whose bound holds at any offset and grows with |Δu| alone
    (``Model.offset_uniform_bound``: sup |Δη| = |Δu| for bernoulli), which the privacy charge checks."""
    shared = SharedModel(model)
    theta = shared.held_coordinates(np.zeros((1, shared.d)))
    star = theta.copy()
    star[:, list(shared.hierarchy.z)] = max_step
    if neighbours == "replace-one":  # c, not the model's replace-one range: that one holds at the probe's
        # level of η only, and the registry's effect is an offset it does not see
        return float(record_sensitivity(model, theta, star)[0])
    return float(step_sensitivity(model, theta, star, neighbours)[0])


@dataclass(frozen=True)
class EffectsRelease:
    """The end of a blocked run: every registry that allows it releases its effect draws z_j of the run
    ``run`` for sweeps ``first`` .. ``first + sweeps - 1`` of its ``chains`` chains, as one sum-revealed
    batch (reveal mode ``sum``) in which registry k (the k-th level) fills its own slot and leaves the others
    zero: value ``(k * chains + c) * sweeps + (t - first)`` is z_k of chain c after sweep t."""

    run: str
    first: int
    sweeps: int
    chains: int

    def __post_init__(self) -> None:
        if not isinstance(self.run, str) or not self.run:
            raise ValueError(f"effects.run must name the blocked run, got {self.run!r}")
        for key in ("first", "sweeps", "chains"):
            v = getattr(self, key)
            low = 0 if key == "first" else 1
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= low):
                raise ValueError(f"effects.{key} must be an integer >= {low}, got {v!r}")

    def size(self, levels: int) -> int:
        """The batch: one value per level, chain and sweep."""
        return levels * self.chains * self.sweeps

    def to_params(self) -> dict[str, Any]:
        return {"run": self.run, "first": self.first, "sweeps": self.sweeps, "chains": self.chains}

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> EffectsRelease:
        if set(p) != {"run", "first", "sweeps", "chains"}:
            raise ValueError(f"effects needs exactly run, first, sweeps, chains, got {sorted(p)}")
        return cls(p["run"], p["first"], p["sweeps"], p["chains"])


__all__ = [
    "PARAMETERISATIONS",
    "EffectsRelease",
    "LocalSettings",
    "LocalState",
    "RegistryBlock",
    "local_step_sensitivity",
]
