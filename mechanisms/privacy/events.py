"""Privacy events: frozen, JSON-serialisable records of mechanisms a party's data took part in.

Owns the event types the ledger (``ledger``) and composition (``composition``) consume, in the
style of dp_accounting's ``dp_event``: each event's docstring states its mathematical mechanism,
``count`` repeats it, ``label`` says what produced it (for the audit log), and each event knows
its per-occurrence dp_accounting PLD and, when it has one, its GDP μ:

* ``GaussianEvent(mu)`` — a μ-GDP mechanism (Gaussian noise, Yıldırım–Ermiş noisy ratio);
* ``LaplaceEvent(eps)`` — the Laplace mechanism with ε = Δ/b;
* ``EpsDeltaEvent(eps, delta)`` — any (ε, δ)-DP mechanism, e.g. one ABCDP sparse-vector run
  (ε = (c + 1)Δ_ρ/b without RESAMPLE, 2cΔ_ρ/b with it, δ = 0);
* ``ProfileEvent(profile)`` — a numerically analysed mechanism (sum / blinded / sign reveal step)
  carried as its ``PrivacyProfile``;
* ``AmplifiedGaussianEvent(mu, profile, plain_mu)`` — a penalty step that is μ-GDP (for GDP budgets:
  valid under fully adaptive composition) and also satisfies the tighter ``profile`` of the confidential
  accept-reject (for ε-at-δ budgets, by PLD); ``plain_mu`` is the figure of the same Gaussian noise
  released without the confidential accept-reject, kept for side-by-side reports;
* ``RenyiEvent(mu, orders, rho)`` — a μ-GDP mechanism (a ``GaussianEvent``: GDP and ε-at-δ budgets charge
  it exactly as one) that is also (α, ρ_α)-RDP at each of ``orders`` with ρ below the Gaussian's αμ²/2
  (the fixed-sd penalty's accept bit, ``renyi``), for Rényi filters (``ledger.RDPBudget``).

New mechanisms (e.g. ABCDP's Gaussian-noise variants) plug in by subclassing ``PrivacyEvent`` and
decorating with ``register_event_type``. Pure: no I/O; persistence is the party daemon's job.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .conversions import pure_dp_to_gdp
from .profile import PrivacyProfile

if TYPE_CHECKING:  # imported where used: dp_accounting brings scipy.signal and .stats (~0.7 s of CPU per
    # process), which a daemon whose charges compose in closed form never needs
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "AmplifiedGaussianEvent",
    "EpsDeltaEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "PrivacyEvent",
    "ProfileEvent",
    "RenyiEvent",
    "event_from_dict",
    "register_event_type",
    "scaled",
]

_EVENT_TYPES: dict[str, type[PrivacyEvent]] = {}
E = TypeVar("E", bound="type[PrivacyEvent]")


def register_event_type(cls: E) -> E:
    """Class decorator: make an event type known to ``event_from_dict`` under ``cls.kind``."""
    kind = cls.kind
    if kind in _EVENT_TYPES and _EVENT_TYPES[kind] is not cls:
        raise ValueError(f"event kind {kind!r} is already registered by {_EVENT_TYPES[kind].__name__}")
    _EVENT_TYPES[kind] = cls
    return cls


@functools.lru_cache(maxsize=256)
def _pure_to_gdp(eps: float) -> float:
    return pure_dp_to_gdp(eps)


@dataclass(frozen=True, kw_only=True)
class PrivacyEvent(abc.ABC):
    """Base class: ``count`` independent occurrences of one mechanism; ``label`` is free text."""

    kind: ClassVar[str] = ""
    count: int = 1
    label: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or isinstance(self.count, bool) or self.count < 1:
            raise ValueError(f"count must be a positive integer, got {self.count!r}")

    @abc.abstractmethod
    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        """Pessimistic PLD of *one* occurrence."""

    def gdp_mu(self) -> float | None:
        """μ such that one occurrence is μ-GDP, or ``None`` if the event has no GDP guarantee."""
        return None

    @classmethod
    def from_params(cls, kwargs: dict[str, Any]) -> PrivacyEvent:
        """Build from decoded dict fields (override to decode nested objects)."""
        return cls(**kwargs)

    def mechanism_key(self) -> PrivacyEvent:
        """The event with count 1 and no label: equal keys mean the same mechanism."""
        return dataclasses.replace(self, count=1, label="")

    def _params(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("count", "label")
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``event_from_dict`` inverts it)."""
        out: dict[str, Any] = {"type": self.kind, "count": self.count, "label": self.label}
        for name, value in self._params().items():
            out[name] = value.to_dict() if isinstance(value, PrivacyProfile) else value
        return out


def event_from_dict(data: Mapping[str, Any]) -> PrivacyEvent:
    """Inverse of ``PrivacyEvent.to_dict``; raises ``ValueError`` for unknown event types."""
    kind = data.get("type")
    if kind not in _EVENT_TYPES:
        raise ValueError(f"unknown privacy event type {kind!r}; known: {sorted(_EVENT_TYPES)}")
    cls = _EVENT_TYPES[str(kind)]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = data[f.name]
    return cls.from_params(kwargs)


def scaled(events: Sequence[PrivacyEvent], k: int) -> list[PrivacyEvent]:
    """The events of ``k`` repetitions of a batch."""
    return [dataclasses.replace(e, count=e.count * k) for e in events]


@register_event_type
@dataclass(frozen=True)
class GaussianEvent(PrivacyEvent):
    """A μ-GDP mechanism: e.g. the Gaussian mechanism N(f(D), σ²) with sensitivity Δ has μ = Δ/σ;
    the Yıldırım–Ermiş noisy log-ratio has μ = 1/(τ n^α). Exact PLD via dp_accounting."""

    kind: ClassVar[str] = "gaussian"
    mu: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.mu >= 0 and math.isfinite(self.mu)):
            raise ValueError(f"GDP mu must be finite and >= 0, got {self.mu}")

    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        if self.mu == 0:
            return pld_lib.identity(discretization)
        return pld_lib.from_gaussian_mechanism(
            1.0 / self.mu, sensitivity=1.0, value_discretization_interval=discretization
        )

    def gdp_mu(self) -> float | None:
        return self.mu


@register_event_type
@dataclass(frozen=True)
class LaplaceEvent(PrivacyEvent):
    """The Laplace mechanism f(D) + Lap(b) with sensitivity Δ, ε = Δ/b (pure ε-DP; exact PLD).
    Its GDP μ is the pure-DP conversion (``pure_dp_to_gdp``), valid but not tight."""

    kind: ClassVar[str] = "laplace"
    eps: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.eps >= 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps must be finite and >= 0, got {self.eps}")

    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        if self.eps == 0:
            return pld_lib.identity(discretization)
        return pld_lib.from_laplace_mechanism(
            1.0 / self.eps, sensitivity=1.0, value_discretization_interval=discretization
        )

    def gdp_mu(self) -> float | None:
        return _pure_to_gdp(self.eps)


@register_event_type
@dataclass(frozen=True)
class EpsDeltaEvent(PrivacyEvent):
    """Any (ε, δ)-DP mechanism, accounted through its worst-case PLD (dp_accounting
    ``from_privacy_parameters``). ABCDP's sparse-vector run is pure: EpsDeltaEvent(ε_total, 0).
    GDP μ only when δ = 0 (pure DP → GDP); (ε, δ > 0)-DP implies no GDP guarantee."""

    kind: ClassVar[str] = "eps_delta"
    eps: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.eps >= 0 and math.isfinite(self.eps)):
            raise ValueError(f"eps must be finite and >= 0, got {self.eps}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must lie in [0, 1], got {self.delta}")

    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        from dp_accounting.pld import common as pld_common
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        return pld_lib.from_privacy_parameters(
            pld_common.DifferentialPrivacyParameters(self.eps, self.delta), discretization
        )

    def gdp_mu(self) -> float | None:
        return _pure_to_gdp(self.eps) if self.delta == 0.0 else None


@register_event_type
@dataclass(frozen=True)
class ProfileEvent(PrivacyEvent):
    """A mechanism analysed numerically and carried as its symmetric privacy profile δ(ε)
    (e.g. one sign / sum / blinded reveal step from ``reveal_*``); PLD by pessimistic
    connect-the-dots. GDP μ only if the profile carries a pure-ε bound."""

    kind: ClassVar[str] = "profile"
    profile: PrivacyProfile

    @classmethod
    def from_params(cls, kwargs: dict[str, Any]) -> ProfileEvent:
        prof = kwargs["profile"]
        kwargs = dict(kwargs)
        kwargs["profile"] = prof if isinstance(prof, PrivacyProfile) else PrivacyProfile.from_dict(prof)
        return cls(**kwargs)

    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        return self.profile.to_pld(discretization)

    def gdp_mu(self) -> float | None:
        return None if self.profile.pure_eps is None else _pure_to_gdp(self.profile.pure_eps)


@register_event_type
@dataclass(frozen=True)
class AmplifiedGaussianEvent(PrivacyEvent):
    """One step of a mechanism with two valid descriptions: it is ``mu``-GDP (the Gaussian penalty noise
    alone, post-processed: ``penalty.penalty_gdp_mu``) and its δ(ε) is at most ``profile``'s (the same noise
    plus the confidential accept-reject's Gamma term and reveal mode: ``penalty.penalty_step_profile``,
    already intersected with the GDP curve). ``gdp_mu`` serves GDP filters; ``pld`` is the profile's.
    ``plain_mu`` = 1/(τ n^α) is what the same noise gives when each party's noisy term is released
    (Yıldırım–Ermiş without the confidential accept-reject), kept so reports can show both."""

    kind: ClassVar[str] = "amplified_gaussian"
    mu: float
    profile: PrivacyProfile
    plain_mu: float

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, v in (("mu", self.mu), ("plain_mu", self.plain_mu)):
            if not (v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be finite and > 0, got {v}")

    @classmethod
    def from_params(cls, kwargs: dict[str, Any]) -> AmplifiedGaussianEvent:
        prof = kwargs["profile"]
        kwargs = dict(kwargs)
        kwargs["profile"] = prof if isinstance(prof, PrivacyProfile) else PrivacyProfile.from_dict(prof)
        return cls(**kwargs)

    def pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        return self.profile.to_pld(discretization)

    def gdp_mu(self) -> float | None:
        return self.mu

    def plain(self) -> GaussianEvent:
        """The same steps charged as plain Gaussian releases (for comparison, never for the ledger)."""
        return GaussianEvent(self.plain_mu, count=self.count, label=self.label)


@register_event_type
@dataclass(frozen=True)
class RenyiEvent(GaussianEvent):
    """A ``mu``-GDP mechanism that is also (α, ``rho[i]``)-RDP at each order α = ``orders[i]`` (per
    occurrence; ρ ≤ αμ²/2, e.g. a batch of accept bits of the fixed-sd penalty charged by ``renyi``). As a
    ``GaussianEvent`` every GDP and ε-at-δ budget charges it exactly as the plain μ; a Rényi filter
    (``ledger.RDPBudget``) reads ρ at its order (the Gaussian αμ²/2 at an order not carried)."""

    kind: ClassVar[str] = "renyi"
    orders: tuple[float, ...] = ()
    rho: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "orders", tuple(float(a) for a in self.orders))
        object.__setattr__(self, "rho", tuple(float(r) for r in self.rho))
        if len(self.orders) != len(self.rho):
            raise ValueError(
                f"orders and rho must have the same length, got {len(self.orders)} and {len(self.rho)}"
            )
        for a, r in zip(self.orders, self.rho, strict=True):
            if not (a > 1 and math.isfinite(a)):
                raise ValueError(f"Renyi orders must be finite and > 1, got {a}")
            if not (r >= 0 and math.isfinite(r)):
                raise ValueError(f"Renyi rho must be finite and >= 0, got {r}")

    def rdp(self, alpha: float) -> float:
        """ρ at order ``alpha`` per occurrence: the carried value (never above the Gaussian αμ²/2), or the
        Gaussian's when ``alpha`` is not among ``orders``."""
        gauss = alpha * self.mu * self.mu / 2.0
        for a, r in zip(self.orders, self.rho, strict=True):
            if math.isclose(a, alpha, rel_tol=1e-12):
                return min(r, gauss)
        return gauss

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["orders"], out["rho"] = list(self.orders), list(self.rho)
        return out
