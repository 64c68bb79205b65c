"""The decision plan: what every accept-reject decision of a session means, typed, in one place.

A session of a model analysis fixes, for all its batches, the decision kind (MH or rejection sampling), the
Yıldırım–Ermiş penalty, lazy acceptance, the rejection bound and its margin, the public sensitivity caps and
the confidential noise. :class:`DecisionPlan` holds exactly that, frozen and checked; it travels as the
session's public ``model_params`` JSON object (the wire format), written by :meth:`DecisionPlan.to_params`
and read back by :meth:`DecisionPlan.from_params` — the one parser: the coordinator builds the plan from the
experiment's ``[sampler]``, a registry parses the session's parameters into the same plan, and nothing else
reads the dict.

Keys of ``model_params`` (every key optional but ``model_args`` defaults to ``{}``):

* ``model_args``: the model's public arguments (an object);
* ``kind``: ``"mh"`` (default), ``"rejection"`` or ``"statistics"`` (:data:`PLAN_KINDS`);
* ``penalty``: ``{"tau", "alpha", "n", "c", "b", "max_sensitivity"}`` (:class:`Penalty`, MH only);
* ``lazy``: ``{"gamma", "max_sensitivity"}`` (:class:`Lazy`; not with the penalty);
* ``noise``: ``"exp"`` (default: V_j ~ Gamma(1/m, 1), the confidential identity) or ``"none"`` (tests; a
  registry with a budget refuses a decision plan without the noise: ``mechanisms.privacy.charge``);
* rejection sampling only: ``log_bound_margin`` (>= 0), ``bound`` (``"data"`` or ``"public"``),
  ``max_sensitivity`` (a public cap on a proposal's per-record log-likelihood range);
* ``statistics`` (kind ``"statistics"`` only): a release of the differentially private warm start
  (:class:`mechanisms.warmstart.Statistics`: ``what``, ``sd``, ``sd2``, ``scale``, ``clip``) — not an
  accept-reject decision: each registry's terms are its noisy per-record sums, revealed as their total in
  reveal mode ``sum``;
* ``blocked`` (kind ``"mh"`` only): blocked sampling of a model with a registry random intercept
  (``mechanisms.samplers.blocked``): each registry keeps and updates its own effect with these local
  settings (:class:`mechanisms.samplers.local.LocalSettings`: ``steps``, ``adapt_until``,
  ``target_accept``, ``parameterisation``, ``choose_every``, and for noisy local steps ``sd`` and
  ``max_step``), the batches carry the chains, their states and the sweep; no lazy acceptance, and the
  penalty only with a fixed sd, a cap and noisy local steps (the plan a budget can charge);
* ``effects`` (kind ``"effects"`` only): the end of a blocked run, each registry's effect draws released
  (:class:`mechanisms.samplers.local.EffectsRelease`: ``run``, ``first``, ``sweeps``, ``chains``) as one
  sum-revealed batch, by the registries that allow it.

:meth:`to_params` writes only what differs from the defaults (``kind`` always), so a plan and its JSON are
one-to-one. Errors are ``ValueError`` naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mechanisms.samplers.local import EffectsRelease, LocalSettings
from mechanisms.samplers.requests import KINDS, Lazy, Penalty
from mechanisms.warmstart import Statistics

__all__ = ["BOUNDS", "NOISES", "PARAMS", "PLAN_KINDS", "DecisionPlan"]

#: the keys of a model session's ``model_params``
PARAMS = (
    "model_args",
    "kind",
    "penalty",
    "lazy",
    "noise",
    "log_bound_margin",
    "bound",
    "max_sensitivity",
    "statistics",
    "blocked",
    "effects",
)
#: what a model session's batches are: accept-reject decisions (MH, rejection), warm-start releases or the
#: release of a blocked run's registry effects
PLAN_KINDS = (*KINDS, "statistics", "effects")
#: the reveal mode a release (kind "statistics" or "effects") runs in: its noisy total is what it opens
RELEASE_MODE = "sum"
#: rejection sampling's bound M_j: each party's own maximum likelihood, or the model's public bound
BOUNDS = ("data", "public")
#: the confidential noise each party adds: Gamma(1/m, 1) shares of Exp(1), or none (tests only)
NOISES = ("exp", "none")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class DecisionPlan:
    """The public meaning of a session's decisions (see the module docstring for the keys)."""

    model_args: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "mh"
    penalty: Penalty | None = None
    lazy: Lazy | None = None
    noise: str = "exp"
    log_bound_margin: float = 0.0
    bound: str = "data"
    max_sensitivity: float | None = None  # rejection sampling: cap on a proposal's record range
    statistics: Statistics | None = None  # kind "statistics": the warm-start release
    blocked: LocalSettings | None = None  # kind "mh": registry-local blocks (blocked sampling)
    effects: EffectsRelease | None = None  # kind "effects": a blocked run's effect draws released

    def __post_init__(self) -> None:
        if not isinstance(self.model_args, Mapping):
            raise ValueError(f"model_args must be an object, got {self.model_args!r}")
        if self.kind not in PLAN_KINDS:
            raise ValueError(f"kind must be one of {PLAN_KINDS}, got {self.kind!r}")
        if (self.kind == "statistics") != (self.statistics is not None):
            raise ValueError("kind 'statistics' and the statistics release go together")
        if self.statistics is not None and (self.penalty is not None or self.lazy is not None):
            raise ValueError("a statistics release takes no penalty or lazy acceptance")
        if self.noise not in NOISES:
            raise ValueError(f"noise must be 'exp' or 'none', got {self.noise!r}")
        margin = self.log_bound_margin
        if not _number(margin) or not 0 <= margin < math.inf:
            raise ValueError(f"log_bound_margin must be a finite number >= 0, got {margin!r}")
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {BOUNDS}, got {self.bound!r}")
        cap = self.max_sensitivity
        if cap is not None and (not _number(cap) or not 0 < cap < math.inf):
            raise ValueError(f"max_sensitivity must be a finite number > 0, got {cap!r}")
        if self.kind != "rejection" and (self.bound != "data" or cap is not None):
            raise ValueError(
                "bound and max_sensitivity are rejection-sampling parameters (MH caps its steps in "
                "penalty.max_sensitivity or lazy.max_sensitivity)"
            )
        if self.penalty is not None and self.kind != "mh":
            raise ValueError("the penalty applies to kind 'mh' only")
        if self.lazy is not None and self.penalty is not None:
            raise ValueError("lazy acceptance and the penalty are not combined; choose one")
        if (self.kind == "effects") != (self.effects is not None):
            raise ValueError("kind 'effects' and the effects release go together")
        if self.effects is not None and (self.penalty is not None or self.lazy is not None):
            raise ValueError("an effects release takes no penalty or lazy acceptance")
        if self.blocked is not None:
            self._check_blocked(self.blocked)

    def _check_blocked(self, blocked: LocalSettings) -> None:
        if self.kind != "mh" or self.lazy is not None:
            raise ValueError("blocked sampling decides MH moves of the shared block (kind 'mh'), not lazy")
        pen = self.penalty
        if pen is None:
            return
        if not pen.fixed or pen.c != "bound" or pen.max_sensitivity is None:
            raise ValueError(
                "blocked sampling takes the penalty with a fixed sd, c = 'bound' and max_sensitivity only (a "
                "shared move's sensitivity is the model's bound with every effect held at its public "
                "intercept-centred coordinate: SharedModel.record_ratio_bound)"
            )
        if not blocked.noisy:
            raise ValueError(
                "blocked sampling with the penalty needs noisy local steps (blocked.sd and "
                "blocked.max_step): the shared move's sensitivity holds for effects held in the public "
                "intercept-centred coordinate, and exact local steps have no privacy bound"
            )

    # ---- the wire form ------------------------------------------------------------------------------------

    def to_params(self) -> dict[str, Any]:
        """The session's ``model_params`` (JSON); :meth:`from_params` is the inverse."""
        out: dict[str, Any] = {"model_args": dict(self.model_args), "kind": self.kind}
        if self.penalty is not None:
            out["penalty"] = self.penalty.to_params()
        if self.lazy is not None:
            out["lazy"] = self.lazy.to_params()
        if self.noise != "exp":
            out["noise"] = self.noise
        if self.log_bound_margin:
            out["log_bound_margin"] = self.log_bound_margin
        if self.bound != "data":
            out["bound"] = self.bound
        if self.max_sensitivity is not None:
            out["max_sensitivity"] = self.max_sensitivity
        if self.statistics is not None:
            out["statistics"] = self.statistics.to_params()
        if self.blocked is not None:
            out["blocked"] = self.blocked.to_params()
        if self.effects is not None:
            out["effects"] = self.effects.to_params()
        return out

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> DecisionPlan:
        """The plan of a session's ``model_params``; ``ValueError`` naming the key when it is not one."""
        if not isinstance(params, Mapping):
            raise ValueError(f"model_params must be an object, got {params!r}")
        extra = set(params) - set(PARAMS)
        if extra:
            raise ValueError(f"unknown parameters {sorted(extra)} (allowed: {sorted(PARAMS)})")
        return cls(
            model_args=params.get("model_args", {}),
            kind=params.get("kind", "mh"),
            penalty=_part(params, "penalty", Penalty.from_params),
            lazy=_part(params, "lazy", Lazy.from_params),
            noise=params.get("noise", "exp"),
            log_bound_margin=params.get("log_bound_margin", 0.0),
            bound=params.get("bound", "data"),
            max_sensitivity=params.get("max_sensitivity"),
            statistics=_part(params, "statistics", Statistics.from_params),
            blocked=_part(params, "blocked", LocalSettings.from_params),
            effects=_part(params, "effects", EffectsRelease.from_params),
        )

    # ---- what the plan implies ----------------------------------------------------------------------------

    @property
    def rejection(self) -> bool:
        """Rejection-sampling decisions (the bound, margin and cap are theirs; charged as a proposal's)."""
        return self.kind == "rejection"

    @property
    def exp_noise(self) -> bool:
        """Whether each party adds its Gamma(1/m, 1) share of Exp(1) (the confidential identity)."""
        return self.noise == "exp"

    @property
    def step_cap(self) -> float | None:
        """The public cap on a decision's per-record sensitivity (steps above it are rejected by the
        coordinator without asking): the penalty's or lazy MH's cap on c(θ, θ*), rejection sampling's cap on
        a proposal's per-record range; None without one."""
        if self.kind == "rejection":
            return self.max_sensitivity
        if self.penalty is not None:
            return self.penalty.max_sensitivity
        return self.lazy.max_sensitivity if self.lazy is not None else None

    def numbers(self) -> dict[str, float]:
        """The plan's public numbers by name, for a registry's ``[allow.bounds.<model>]`` ranges: the numeric
        ``model_args``, then ``tau``, ``alpha``, ``n`` or ``sd``, ``b`` (penalty), ``gamma`` (lazy),
        ``max_sensitivity`` (the step cap) and ``log_bound_margin``."""
        out = {k: float(v) for k, v in self.model_args.items() if _number(v)}
        if self.penalty is not None:
            p = self.penalty
            if p.tau is not None:
                out.update(tau=p.tau, alpha=p.alpha, n=float(p.n))
            if p.sd is not None:
                out["sd"] = p.sd
            if p.b is not None:
                out["b"] = p.b
        if self.lazy is not None:
            out["gamma"] = self.lazy.gamma
        if self.step_cap is not None:
            out["max_sensitivity"] = self.step_cap
        out["log_bound_margin"] = self.log_bound_margin
        return out


def _part(params: Mapping[str, Any], key: str, parse: Any) -> Any:
    raw = params.get(key)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{key} must be an object, got {raw!r}")
    try:
        return parse(dict(raw))
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"bad {key} {dict(raw)!r}: {exc}") from exc
