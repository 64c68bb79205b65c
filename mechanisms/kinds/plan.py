"""The decision plan: what every batch of a model session means, typed, in one place.

A session of a model analysis fixes, for all its batches, the decision kind (MH, rejection sampling, or a
release), the Yıldırım–Ermiş penalty, lazy acceptance, the confidential noise and the kind's own settings.
:class:`DecisionPlan` holds exactly that, frozen and checked; it travels as the session's public
``model_params`` JSON object (the wire format), written by :meth:`DecisionPlan.to_params` and read back by
:meth:`DecisionPlan.from_params` — the one parser: the coordinator builds the plan from the experiment's
``[sampler]``, a registry parses the session's parameters into the same plan, and nothing else reads the
dict. What varies with the kind is the kind's (:mod:`mechanisms.kinds.base`): the plan asks it.

Keys of ``model_params`` common to every kind (every key optional but ``model_args`` defaults to ``{}``):

* ``model_args``: the model's public arguments (an object);
* ``kind``: one of :data:`PLAN_KINDS` (default ``"mh"``);
* ``penalty``: ``{"tau", "alpha", "n", "c", "b", "max_sensitivity"}`` (:class:`Penalty`, MH only);
* ``lazy``: ``{"gamma", "max_sensitivity"}`` (:class:`Lazy`; not with the penalty);
* ``noise``: ``"exp"`` (default: V_j ~ Gamma(1/m, 1), the confidential identity) or ``"none"`` (tests; a
  registry with a budget refuses a decision plan without the noise: the kind's charge).

Each kind's own keys (its module's docstring): ``mh``: ``blocked`` (:mod:`mechanisms.kinds.mh`);
``rejection``: ``log_bound_margin``, ``bound``, ``max_sensitivity`` (:mod:`mechanisms.kinds.rejection`);
``statistics``: ``statistics`` (:mod:`mechanisms.kinds.statistics`); ``effects``: ``effects``
(:mod:`mechanisms.kinds.effects`). A key of another kind is refused, naming its kind.

:meth:`to_params` writes only what differs from the defaults (``kind`` always), so a plan and its JSON are
one-to-one. Errors are ``ValueError`` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mechanisms.models.base import Model
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.privacy.threat import RevealView
from mechanisms.privacy.worst_record import WorstRecordCharge
from mechanisms.samplers.local import EffectsRelease, LocalSettings
from mechanisms.samplers.requests import Lazy, Penalty
from mechanisms.warmstart import Statistics

from .base import ChargeAsk, DecisionKind, number, part
from .registry import KINDS
from .rejection import RejectionSettings

__all__ = ["COMMON", "NOISES", "PARAMS", "PLAN_KINDS", "DecisionPlan"]

#: the keys of ``model_params`` every kind has
COMMON = ("model_args", "kind", "penalty", "lazy", "noise")
#: every kind's name
PLAN_KINDS = tuple(KINDS)
#: the keys of a model session's ``model_params``: the common ones, then each kind's own
PARAMS = COMMON + tuple(key for k in KINDS.values() for key in k.keys)
#: the confidential noise each party adds: Gamma(1/m, 1) shares of Exp(1), or none (tests only)
NOISES = ("exp", "none")


@dataclass(frozen=True)
class DecisionPlan:
    """The public meaning of a session's batches (see the module docstring for the keys); ``settings`` is
    the kind's own (its module's: None where it has none)."""

    model_args: Mapping[str, Any] = field(default_factory=dict)
    kind: str = "mh"
    penalty: Penalty | None = None
    lazy: Lazy | None = None
    noise: str = "exp"
    settings: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_args, Mapping):
            raise ValueError(f"model_args must be an object, got {self.model_args!r}")
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ValueError(f"kind must be one of {tuple(KINDS)}, got {self.kind!r}")
        if self.settings is None:  # the kind's defaults (rejection sampling has them; others have none)
            object.__setattr__(self, "settings", self.decision_kind.default_settings())
        self.decision_kind.check(self)
        if self.noise not in NOISES:
            raise ValueError(f"noise must be 'exp' or 'none', got {self.noise!r}")
        if self.lazy is not None and self.penalty is not None:
            raise ValueError("lazy acceptance and the penalty are not combined; choose one")

    @property
    def decision_kind(self) -> DecisionKind:
        """The kind's object: everything that varies with the kind."""
        return KINDS[self.kind]

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
        if self.settings is not None:
            out.update(self.decision_kind.write(self.settings))
        return out

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> DecisionPlan:
        """The plan of a session's ``model_params``; ``ValueError`` naming the key when it is not one."""
        if not isinstance(params, Mapping):
            raise ValueError(f"model_params must be an object, got {params!r}")
        allowed = set(COMMON).union(*(k.keys for k in KINDS.values()))
        extra = set(params) - allowed
        if extra:
            raise ValueError(f"unknown parameters {sorted(extra)} (allowed: {sorted(allowed)})")
        kind_name = params.get("kind", "mh")
        kind = KINDS.get(kind_name) if isinstance(kind_name, str) else None
        if kind is None:
            raise ValueError(f"kind must be one of {tuple(KINDS)}, got {kind_name!r}")
        # another kind's key is refused when it says something: absent, null or its kind's default is nothing
        foreign = {
            key: other
            for other in KINDS.values()
            if other is not kind
            for key in other.given(params)
            if key not in kind.keys
        }
        if foreign:
            owners = sorted({other.name for other in foreign.values()})
            raise ValueError(
                f"{sorted(foreign)} are parameters of kind {' / '.join(map(repr, owners))}, not of kind "
                f"{kind.name!r}" + "".join(foreign[k].elsewhere for k in sorted(foreign))[:1000]
            )
        return cls(
            model_args=params.get("model_args", {}),
            kind=kind.name,
            penalty=part(params, "penalty", Penalty.from_params),
            lazy=part(params, "lazy", Lazy.from_params),
            noise=params.get("noise", "exp"),
            settings=kind.read(params),
        )

    # ---- what the plan implies (each the kind's) ----------------------------------------------------------

    @property
    def rejection(self) -> RejectionSettings | None:
        """Rejection sampling's settings (its bound, margin and cap), else None."""
        return self.settings if isinstance(self.settings, RejectionSettings) else None

    @property
    def statistics(self) -> Statistics | None:
        """A warm-start release's statistics (kind ``"statistics"``), else None."""
        return self.settings if isinstance(self.settings, Statistics) else None

    @property
    def effects(self) -> EffectsRelease | None:
        """A blocked run's effects release (kind ``"effects"``), else None."""
        return self.settings if isinstance(self.settings, EffectsRelease) else None

    @property
    def blocked(self) -> LocalSettings | None:
        """Blocked sampling's local settings (kind ``"mh"`` with registry-local blocks), else None."""
        return self.settings if isinstance(self.settings, LocalSettings) else None

    @property
    def exp_noise(self) -> bool:
        """Whether each party adds its Gamma(1/m, 1) share of Exp(1) (the confidential identity)."""
        return self.noise == "exp"

    @property
    def keeps_local(self) -> bool:
        """Whether each registry keeps state of its own across the session's steps (blocked sampling and its
        effects release: ``parties.local_blocks``)."""
        return self.decision_kind.keeps_local(self)

    @property
    def step_cap(self) -> float | None:
        """The public cap on a decision's per-record sensitivity (steps above it are rejected by the
        coordinator without asking): the penalty's or lazy MH's cap on c(θ, θ*), rejection sampling's cap on
        a proposal's per-record range; None without one."""
        return self.decision_kind.step_cap(self)

    def numbers(self) -> dict[str, float]:
        """The plan's public numbers by name, for a registry's ``[allow.bounds.<model>]`` ranges: the numeric
        ``model_args``, then ``tau``, ``alpha``, ``n`` or ``sd``, ``b`` (penalty), ``gamma`` (lazy),
        ``max_sensitivity`` (the step cap) and ``log_bound_margin``."""
        out = {k: float(v) for k, v in self.model_args.items() if number(v)}
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
        out["log_bound_margin"] = self.decision_kind.margin(self)  # as given (an int stays an int)
        return out

    def events(self, ask: ChargeAsk) -> list[PrivacyEvent]:
        """The events one batch adds to a registry's ledger (``ask``: the model, what the coalition the
        registry assumes observes in the reveal mode, the batch and its size, the registry's neighbour
        relation and Rényi orders): the kind's case of ``mechanisms.privacy.charge``'s table. Raises
        :class:`mechanisms.privacy.charge.Unaccountable`, for every kind whose decisions count on the
        Gamma(1/m, 1) noise when the plan drops it (``noise = "none"``, tests only), before its kind is
        asked: no kind can forget it."""
        kind = self.decision_kind
        if not self.exp_noise and kind.without_noise(self) is not None:
            raise kind.unaccountable_without_noise(self, ask.name)
        return kind.events(self, ask)

    def worst_record_charge(
        self,
        model: Model,
        view: RevealView,
        neighbours: str = "replace-one",
        rdp_orders: tuple[float, ...] | None = None,
    ) -> WorstRecordCharge | None:
        """The per-run charge at the worst record of a plan charged per decision (MH with a fixed-sd penalty
        and a cap, not blocked) whose model has the linear structure; None when it does not apply
        (``mechanisms.privacy.charge.worst_record_charge``)."""
        return self.decision_kind.worst_record(self, model, view, neighbours, rdp_orders)
