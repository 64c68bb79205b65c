"""A batch of accept-reject decisions as the coordinator asks for it: public data only.

:class:`DecisionRequest` is what travels to the parties (as arrays; see :meth:`to_inputs`): the proposals,
the current states (MH) and the public term of each decision. Each party turns it into its private term
(:mod:`mechanisms.samplers.terms`). Kinds:

* ``"mh"``: ℓ_j = log p(X_j | θ*) − log p(X_j | θ);
  public = log π(θ*) − log π(θ) + log q(θ | θ*) − log q(θ* | θ)
  (+ the penalty correction −Σ_j σ_j²/2 when the penalty is on).
* ``"rejection"``: ℓ_j = log p(X_j | θ*) − log M_j ≤ 0, M_j the party's own bound; public = log π(θ*) −
  log q(θ*) − log M_q (0 for proposals from the prior).

:class:`Penalty` configures the Yıldırım–Ermiş penalty (see :mod:`mechanisms.samplers.penalty`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from hss.lazy_coin import LazyCoin
from mechanisms.models.base import Model

F64 = npt.NDArray[np.float64]
KINDS = ("mh", "rejection")
C_MODES = ("bound", "clip")


@dataclass(frozen=True)
class Penalty:
    """σ(θ, θ*) = tau · n^alpha · c(θ, θ*), the sd of each party's λ_j ~ N(0, σ²) — or, with ``sd``, the same
    σ = sd for every step (each party adds N(0, sd²), the total noise on the log-ratio is √m · sd).

    The two forms differ in what a decision costs: with σ ∝ c every decision is 1/(τ n^α)-GDP whatever its
    step (the noise grows with the step), while with a fixed ``sd`` a decision whose per-record sensitivity
    is Δ is Δ/(sd √r)-GDP (``mechanisms.privacy.charge``: charged per decision at its own Δ under a GDP
    filter), so small, posterior-scale steps cost little and acceptance does not fall with the step size.

    ``c = "bound"``: c = 2 · model.record_ratio_bound(θ, θ*), a public bound valid for every record the
    schema allows (e.g. a Lipschitz bound from bounded covariates), or the model's tighter
    ``record_ratio_range`` when it has one. Nothing is changed in the likelihood, so the chain is exact.
    ``c = "clip"``: each record's log-ratio is clipped to ±b‖θ* − θ‖₂, so c = 2b‖θ* − θ‖₂ holds by
    construction. The chain is exact only where clipping never binds; where it binds, the accept ratio is
    no longer a ratio of one likelihood and the chain targets a (generally unknown) perturbed distribution.
    Parties count the clipped records (``terms.clipped_records``) so this can be audited: the party daemon
    writes the count of each batch on the batch's audit line (``clipped_records``); it never leaves the party.
    ``n`` is the (public) total number of records.

    ``max_sensitivity`` (optional, public): the largest c(θ, θ*) a decision may have. Kernels reject
    proposals with a larger c publicly, without asking the parties (:func:`within_cap`); this restricts the
    proposal symmetrically, so the chain stays exact for the same posterior. Parties refuse a batch that
    breaks the cap. With it a step's privacy can be charged at its confidential amplification (the Gamma
    term of the accept-reject does not scale with σ, so the amplification needs a bound on c); without it
    only the Gaussian (GDP) bound is charged.
    """

    tau: float | None
    alpha: float = 0.0
    n: int = 1
    c: str = "bound"
    b: float | None = None
    max_sensitivity: float | None = None
    sd: float | None = None

    def __post_init__(self) -> None:
        if (self.tau is None) == (self.sd is None):
            raise ValueError("penalty needs exactly one of tau (sigma = tau n^alpha c) and sd (fixed sigma)")
        if self.tau is not None and not (self.tau > 0 and math.isfinite(self.tau)):
            raise ValueError(f"penalty tau must be > 0, got {self.tau}")
        if self.sd is not None and not (self.sd > 0 and math.isfinite(self.sd)):
            raise ValueError(f"penalty sd must be a finite number > 0, got {self.sd}")
        if not self.n >= 1:
            raise ValueError(f"penalty n (total records) must be >= 1, got {self.n}")
        if self.c not in C_MODES:
            raise ValueError(f"penalty c must be one of {C_MODES}, got {self.c!r}")
        if self.c == "clip" and not (self.b is not None and self.b > 0):
            raise ValueError("penalty c = 'clip' needs a clip constant b > 0")
        cap = self.max_sensitivity
        if cap is not None and not (cap > 0 and math.isfinite(cap)):
            raise ValueError(f"penalty max_sensitivity must be a finite number > 0, got {cap}")
        if not math.isfinite(self.alpha):
            raise ValueError(f"penalty alpha must be finite, got {self.alpha}")

    def to_params(self) -> dict[str, Any]:
        if self.sd is not None:
            out: dict[str, Any] = {"sd": self.sd, "c": self.c, "b": self.b}
        else:
            out = {"tau": self.tau, "alpha": self.alpha, "n": self.n, "c": self.c, "b": self.b}
        if self.max_sensitivity is not None:
            out["max_sensitivity"] = self.max_sensitivity
        return out

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> Penalty:
        extra = set(p) - {"tau", "alpha", "n", "c", "b", "max_sensitivity", "sd"}
        if extra:
            raise ValueError(f"unknown penalty parameters {sorted(extra)}")
        b, cap, tau, sd = p.get("b"), p.get("max_sensitivity"), p.get("tau"), p.get("sd")
        if sd is not None and ({"tau", "alpha", "n"} & set(p)):
            raise ValueError("penalty sd (a fixed sigma) takes no tau, alpha or n")
        return cls(
            tau=None if tau is None else float(tau),
            alpha=float(p.get("alpha", 0.0)),
            n=int(p["n"]) if sd is None else 1,
            c=str(p.get("c", "bound")),
            b=None if b is None else float(b),
            max_sensitivity=None if cap is None else float(cap),
            sd=None if sd is None else float(sd),
        )

    @property
    def fixed(self) -> bool:
        """Whether σ is the same for every step (``sd``) rather than proportional to c(θ, θ*)."""
        return self.sd is not None

    @property
    def sigma_per_c(self) -> float:
        """σ / c = τ n^α (public; the per-step GDP μ is its inverse). Only for the tau form."""
        if self.tau is None:
            raise ValueError("a penalty with a fixed sd has no sigma per unit of c")
        return self.tau * float(self.n) ** self.alpha

    def sigma_of(self, c: npt.ArrayLike) -> F64:
        """σ per decision given its c(θ, θ*): sd, or τ n^α c."""
        c = np.asarray(c, dtype=np.float64)
        if self.sd is not None:
            return np.full(c.shape, self.sd)
        return np.asarray(self.sigma_per_c * c, dtype=np.float64)

    def sensitivity(self, model: Model, theta: F64, theta_star: F64) -> F64:
        """c(θ, θ*): the bound on the change of a party's log-ratio when one record is replaced."""
        return record_sensitivity(model, theta, theta_star, self.c, self.b)

    def sigma(self, model: Model, theta: F64, theta_star: F64) -> F64:
        """Per decision; symmetric in (θ, θ*)."""
        return self.sigma_of(self.sensitivity(model, theta, theta_star))


@dataclass(frozen=True)
class Lazy:
    """Lazy acceptance (sign reveal only): accept iff the MH / rejection test passes AND a secret coin with
    P(1) = ``gamma`` comes up, the coin made inside the sign protocol (``hss.lazy_coin.LazyCoin``) so only
    the AND is revealed. Lazy MH, γ·P_MH + (1 − γ)·I, is reversible with respect to the posterior (mixing
    slowed by 1/γ); lazy rejection sampling is rejection sampling with bound M/γ. ``gamma`` must be k/2^L
    with L <= 16. ``max_sensitivity`` (MH): a public cap on c(θ, θ*) = 2 × the model's per-record bound,
    larger steps rejected by the kernel without asking the parties (a symmetric restriction: the posterior
    is unchanged); each decision is then charged at c = the cap.
    """

    gamma: float
    max_sensitivity: float | None = None

    def __post_init__(self) -> None:
        self.coin()  # validates gamma
        cap = self.max_sensitivity
        if cap is not None and not (cap > 0 and math.isfinite(cap)):
            raise ValueError(f"lazy max_sensitivity must be a finite number > 0, got {cap}")

    def coin(self) -> LazyCoin:
        return LazyCoin.from_gamma(self.gamma)

    def to_params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gamma": self.gamma}
        if self.max_sensitivity is not None:
            out["max_sensitivity"] = self.max_sensitivity
        return out

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> Lazy:
        extra = set(p) - {"gamma", "max_sensitivity"}
        if extra:
            raise ValueError(f"unknown lazy parameters {sorted(extra)}")
        cap = p.get("max_sensitivity")
        gamma = p.get("gamma")
        if not isinstance(gamma, int | float) or isinstance(gamma, bool):
            raise ValueError(f"lazy gamma must be a number, got {gamma!r}")
        if cap is not None and (not isinstance(cap, int | float) or isinstance(cap, bool)):
            raise ValueError(f"lazy max_sensitivity must be a number, got {cap!r}")
        return cls(float(gamma), None if cap is None else float(cap))


def record_sensitivity(
    model: Model, theta: F64, theta_star: F64, c: str = "bound", b: float | None = None
) -> F64:
    """c(θ, θ*) per decision (replace-one, symmetric in θ, θ*): with ``c = "bound"`` the model's public
    ``record_ratio_range`` when it has one, else 2 × its public per-record bound; or 2b‖θ* − θ‖₂ when each
    record's log-ratio is clipped to ±b‖θ* − θ‖₂."""
    if c == "bound":
        spread = model.record_ratio_range(theta, theta_star)
        if spread is not None:
            return np.asarray(spread, dtype=np.float64)
        bound = model.record_ratio_bound(theta, theta_star)
        if bound is None:
            raise ValueError(f"model {model.name} has no record_ratio_bound: use penalty c = 'clip'")
        return np.asarray(2.0 * np.asarray(bound, dtype=np.float64), dtype=np.float64)
    if b is None:
        raise ValueError("c = 'clip' needs a clip constant b > 0")
    return np.asarray(2.0 * b * np.linalg.norm(theta_star - theta, axis=1), dtype=np.float64)


#: the neighbouring datasets a registry protects: one record added or removed, or one record replaced
NEIGHBOURS = ("add-remove", "replace-one")


def step_sensitivity(
    model: Model,
    theta: F64,
    theta_star: F64,
    neighbours: str,
    c: str = "bound",
    b: float | None = None,
) -> F64:
    """Δ(θ, θ*) per decision: the most one record can move a registry's log-ratio ℓ_j under the registry's
    neighbour relation. ``"replace-one"``: c(θ, θ*) of :func:`record_sensitivity`, or the model's certified
    ``record_replace_range`` when it has one and it is smaller (a charge only: c and its cap are the
    sampler's and stay as they are). ``"add-remove"``: the
    model's public bound on |r(x)| itself (a record added or removed moves ℓ_j by r(x)), or b‖θ* − θ‖₂ with
    clipped log-ratios. It is c/2 when c is twice the bound (the regression models), but it can exceed c/2
    where c is the model's tighter range of r (e.g. gaussian-mean), so it is computed, not derived from c."""
    if neighbours == "replace-one":
        spread = record_sensitivity(model, theta, theta_star, c, b)
        tight = model.record_replace_range(theta, theta_star) if c == "bound" else None
        return spread if tight is None else np.asarray(np.minimum(spread, tight), dtype=np.float64)
    if neighbours != "add-remove":
        raise ValueError(f"neighbours must be one of {NEIGHBOURS}, got {neighbours!r}")
    if c == "bound":
        bound = model.record_ratio_bound(theta, theta_star)
        if bound is None:
            raise ValueError(f"model {model.name} has no record_ratio_bound: use penalty c = 'clip'")
        return np.asarray(bound, dtype=np.float64)
    if b is None:
        raise ValueError("c = 'clip' needs a clip constant b > 0")
    return np.asarray(b * np.linalg.norm(theta_star - theta, axis=1), dtype=np.float64)


def sensitivities(
    model: Model, theta: F64, theta_star: F64, neighbours: str, c: str = "bound", b: float | None = None
) -> tuple[F64, F64]:
    """(:func:`record_sensitivity`, :func:`step_sensitivity`) of the same pairs, the model's bound evaluated
    once where c is twice it and Δ the bound itself (add-remove, no ``record_ratio_range``): the planner's
    simulations ask both for every proposal, and a tight bound is not free (Weibull: ~1 ms a batch)."""
    if c == "bound" and neighbours == "add-remove" and model.record_ratio_range(theta, theta_star) is None:
        bound = model.record_ratio_bound(theta, theta_star)
        if bound is None:
            raise ValueError(f"model {model.name} has no record_ratio_bound: use penalty c = 'clip'")
        delta = np.asarray(bound, dtype=np.float64)
        return np.asarray(2.0 * delta, dtype=np.float64), delta
    return record_sensitivity(model, theta, theta_star, c, b), step_sensitivity(
        model, theta, theta_star, neighbours, c, b
    )


def within_cap(sensitivity: F64, cap: float | None) -> npt.NDArray[np.bool_]:
    """Which decisions respect a public sensitivity cap (all of them without one); a relative slack of 1e-12
    keeps the coordinator's and the parties' float evaluations of the same c in agreement."""
    if cap is None:
        return np.ones(sensitivity.shape, dtype=bool)
    return np.asarray(sensitivity <= cap * (1.0 + 1e-12))


@dataclass(frozen=True)
class DecisionRequest:
    """A batch of decisions. A blocked sampler's batch (``mechanisms.samplers.blocked``) also carries, for the
    registries' local updates: ``chain``, the chain each decision moves; ``states``, every chain's shared
    state at the start of the sweep (each decision's ``theta`` is its chain's row); and ``sweep``, the
    sweep's number (0, 1, ...). All three are public (the chain states are released anyway)."""

    kind: str
    theta_star: F64  # (n, d)
    public: F64  # (n,)
    theta: F64 | None = None  # (n, d), MH only
    penalty: Penalty | None = None
    chain: npt.NDArray[np.int64] | None = None  # (n,): each decision's chain (set by mh_decide)
    states: F64 | None = None  # (chains, d): blocked sampling only
    sweep: int | None = None  # blocked sampling only

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"decision kind must be one of {KINDS}, got {self.kind!r}")
        if self.theta_star.ndim != 2 or self.public.shape != (self.theta_star.shape[0],):
            raise ValueError(
                f"theta_star must be (n, d) and public (n,), got {self.theta_star.shape}, {self.public.shape}"
            )
        if self.kind == "mh" and (self.theta is None or self.theta.shape != self.theta_star.shape):
            raise ValueError("an MH request needs theta with the shape of theta_star")
        if self.penalty is not None and self.kind != "mh":
            raise ValueError("the penalty applies to MH requests only")
        if (self.states is None) != (self.sweep is None):
            raise ValueError("a blocked request has both states and sweep, any other request neither")
        if self.states is not None:
            self._check_blocked()

    @property
    def rejection(self) -> bool:
        """A batch of rejection-sampling decisions (each party's term is relative to its own bound)."""
        return self.kind == "rejection"

    def _check_blocked(self) -> None:
        """A blocked request's chains, states and sweep agree with its decisions (ValueError naming them)."""
        assert self.states is not None and self.sweep is not None
        pen = self.penalty
        if self.kind != "mh" or (pen is not None and (not pen.fixed or pen.c != "bound")):
            raise ValueError(
                "blocked sampling decides MH moves of the shared block, with the penalty only of a fixed sd "
                "and c = 'bound'"
            )
        st, chain = self.states, self.chain
        if st.ndim != 2 or st.shape[1] != self.theta_star.shape[1] or st.shape[0] < 1:
            raise ValueError(f"states must be (chains, {self.theta_star.shape[1]}), got {st.shape}")
        if chain is None or chain.shape != (self.n,):
            raise ValueError(f"a blocked request needs the chain of each of its {self.n} decisions")
        if self.n < 1 or (chain < 0).any() or (chain >= st.shape[0]).any():
            raise ValueError(f"chain indices must lie in 0..{st.shape[0] - 1}, got {chain.tolist()}")
        if np.unique(chain).size != chain.size:
            raise ValueError("a chain is moved by at most one decision of a sweep")
        assert self.theta is not None
        if not np.array_equal(self.theta, st[chain]):
            raise ValueError("each decision's theta must be its chain's state at the start of the sweep")
        if not (isinstance(self.sweep, int) and 0 <= self.sweep < 2**53):
            raise ValueError(f"sweep must be an integer in 0..2^53, got {self.sweep!r}")

    @property
    def blocked(self) -> bool:
        return self.states is not None

    @property
    def n(self) -> int:
        return int(self.theta_star.shape[0])

    def to_inputs(self) -> dict[str, F64]:
        """The arrays a coordinator sends to the parties (public); :meth:`from_inputs` is the inverse."""
        out = {"theta_star": self.theta_star, "public": self.public}
        if self.theta is not None:
            out["theta"] = self.theta
        if self.states is not None:
            assert self.chain is not None and self.sweep is not None
            out["chain"] = self.chain.astype(np.float64)
            out["states"] = self.states
            out["sweep"] = np.array([float(self.sweep)])
        return out

    @classmethod
    def from_inputs(
        cls,
        inputs: Mapping[str, npt.ArrayLike],
        kind: str,
        n: int,
        d: int,
        penalty: Penalty | None = None,
        blocked: bool = False,
    ) -> DecisionRequest:
        """The request back from the arrays of :meth:`to_inputs` (a party's side), for a batch of ``n``
        decisions of a d-parameter model; ``kind`` and ``penalty`` are the session's (they do not travel
        with the arrays). Every array must be present (``theta`` for MH only), finite and of shape (n, d)
        (also (n,) when d = 1) or (n,) for ``public``; ValueError naming the input otherwise. Other inputs
        are ignored here (a party checks the coordinator's ``sigma`` itself)."""
        if kind not in KINDS:
            raise ValueError(f"decision kind must be one of {KINDS}, got {kind!r}")
        theta = _input_array(inputs, "theta", (n, d)) if kind == "mh" else None
        chain, states, sweep = None, None, None
        if blocked:  # a blocked sampler's batch: the chains, every chain's state and the sweep (public)
            chain_f = _input_array(inputs, "chain", (n,))
            if (chain_f != np.round(chain_f)).any():
                raise ValueError("input 'chain' must hold integers")
            chain = chain_f.astype(np.int64)
            raw = np.asarray(inputs.get("states", np.zeros((0, d))), dtype=np.float64)
            chains = raw.shape[0] if raw.ndim >= 1 else 0
            states = _input_array(inputs, "states", (chains, d))
            sweep_f = _input_array(inputs, "sweep", (1,))[0]
            if sweep_f != round(sweep_f) or not 0 <= sweep_f < 2**53:
                raise ValueError(f"input 'sweep' must be an integer >= 0, got {sweep_f!r}")
            sweep = int(sweep_f)
        return cls(
            kind=kind,
            theta_star=_input_array(inputs, "theta_star", (n, d)),
            public=_input_array(inputs, "public", (n,)),
            theta=theta,
            penalty=penalty,
            chain=chain,
            states=states,
            sweep=sweep,
        )


def _input_array(inputs: Mapping[str, npt.ArrayLike], name: str, shape: tuple[int, ...]) -> F64:
    if name not in inputs:
        raise ValueError(f"input {name!r} is required (float array of shape {shape})")
    try:
        a = np.asarray(inputs[name], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"input {name!r} must be a float array of shape {shape}: {exc}") from exc
    if a.shape != shape and not (len(shape) == 2 and shape[1] == 1 and a.shape == shape[:1]):
        raise ValueError(f"input {name!r} must have shape {shape}, got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"input {name!r} has NaN or infinite entries")
    return a.reshape(shape)
