"""A party's privacy ledger: the events its data took part in, a budget, and a dry-run check.

Owns the pure accounting a party daemon enforces before answering a batch (DESIGN.md §2: each
party decides its own budget and refuses queries past it; the coordinator cannot override it).
``PrivacyLedger`` is an immutable value: ``check(events)`` / ``would_exceed(events)`` dry-run a batch
without changing anything, ``commit(events)`` returns a *new* ledger (or raises
``BudgetExceededError``), so a daemon can persist the new state (``to_dict``, fsync) before it
answers and swap it in only afterwards. Persistence and the RESOURCE_EXHAUSTED status are the
daemon's job.

Budgets:

* ``GDPBudget(mu_max)`` — a GDP privacy *filter*: accept while ``Σ_t μ_t² ≤ μ_max²``. Valid under
  fully adaptive composition, i.e. even when each step's μ_t is chosen from earlier outputs
  (Smith & Thakurta, "Fully adaptive composition for Gaussian differential privacy", 2022;
  Koskela, Tobaben, Honkela, AISTATS 2023): the whole interaction is μ_max-GDP. Events without a
  GDP guarantee (``EpsDeltaEvent`` with δ > 0, profiles without a pure-ε bound) cannot be admitted
  and raise ``UnsupportedEventError``. Pure ε-DP events are admitted at their (conservative)
  pure-DP → GDP conversion.
* ``EpsDeltaBudget(eps_max, delta)`` — accept while the PLD composition of all events has
  ``ε(δ) ≤ ε_max``. Tight, but PLD composition is proven for a sequence of mechanisms fixed in
  advance; with privacy parameters chosen adaptively from outputs it is not a proven filter
  (Whitehouse, Ramdas, Rogers, Wu, 2023, give filters for that case). Use it with fixed per-step
  worst-case events (the same profile every step), or use the GDP filter.
  When every event also has a GDP bound the spend is the smaller of the PLD and the GDP composition
  (``composition.compose_events``): never above the GDP bound of the same events.
* ``RDPBudget(eps_max, delta, alpha)`` — a Rényi filter at ONE order α fixed before the run (by default
  ``renyi.budget_order(eps_max, delta)``, a function of the public budget alone): accept while
  ``rdp_eps(Σ_t ρ_t(α), α, δ) ≤ ε_max``, i.e. while Σ_t ρ_t(α) ≤ B with B the RDP level that converts to
  ε_max. Valid under fully adaptive choice of the steps (Feldman & Zrnic, "Individual privacy accounting
  via a Rényi filter", NeurIPS 2021): the interaction is (α, B)-RDP, hence (ε_max, δ)-DP. Choosing α
  after the fact is not. ρ per event (``event_rdp``): a ``RenyiEvent``'s own ρ at α, a GDP event's αμ²/2,
  a pure ε event's min(αε²/2, ε) (Bun & Steinke 2016); anything else raises ``UnsupportedEventError``.

The limit rule: a batch is admitted when the spend after it is ``≤ limit · (1 + LIMIT_RTOL)``, with
``LIMIT_RTOL = 1e-9``. Spends are floating-point sums (and square roots) of per-batch numbers, so a plan
whose last batch lands exactly on the limit (say 100 batches of μ = 0.1 under μ_max = 1) computes to
1.0000000000000002 and would be refused by a bare ``≤``. The tolerance admits it; it can never admit a
spend more than a relative 1e-9 above the limit, far below the precision of the accounting itself (PLD
discretisation 1e-3, conversions).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .composition import compose_events
from .events import (
    AmplifiedGaussianEvent,
    EpsDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    ProfileEvent,
    RenyiEvent,
    event_from_dict,
)
from .renyi import budget_order, rdp_eps

__all__ = [
    "LIMIT_RTOL",
    "Budget",
    "BudgetExceededError",
    "EpsDeltaBudget",
    "GDPBudget",
    "PrivacyLedger",
    "RDPBudget",
    "SpendReport",
    "UnsupportedEventError",
    "event_rdp",
    "within_limit",
]


#: relative tolerance of the limit (see the module docstring): admitted iff spend <= limit * (1 + LIMIT_RTOL)
LIMIT_RTOL = 1e-9


def within_limit(spend: float, limit: float) -> bool:
    """The limit rule: ``spend <= limit * (1 + LIMIT_RTOL)`` (NaN is never within)."""
    return spend <= limit * (1.0 + LIMIT_RTOL)


class BudgetExceededError(RuntimeError):
    """The batch would take the party past its privacy budget; nothing was committed."""


class UnsupportedEventError(ValueError):
    """The budget cannot account for this kind of event (e.g. (ε, δ > 0) under a GDP filter)."""


@dataclass(frozen=True)
class GDPBudget:
    """GDP filter: total μ = sqrt(Σ μ_t²) must stay ≤ ``mu_max``."""

    mu_max: float

    def __post_init__(self) -> None:
        if not (self.mu_max >= 0 and math.isfinite(self.mu_max)):
            raise ValueError(f"mu_max must be finite and >= 0, got {self.mu_max}")

    def spend(self, events: Sequence[PrivacyEvent]) -> float:
        total = 0.0
        for e in events:
            mu = e.gdp_mu()
            if mu is None:
                raise UnsupportedEventError(
                    f"{type(e).__name__} ({e.label or 'no label'}) has no GDP guarantee, so a GDP budget "
                    "cannot account for it; configure an EpsDeltaBudget or describe the mechanism by a "
                    "GDP/pure-DP bound"
                )
            total += e.count * mu * mu
        return math.sqrt(total)

    @property
    def limit(self) -> float:
        return self.mu_max

    @property
    def unit(self) -> str:
        return "mu"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "gdp", "mu_max": self.mu_max}


@dataclass(frozen=True)
class EpsDeltaBudget:
    """PLD budget: ε at ``delta`` of the composition must stay ≤ ``eps_max``."""

    eps_max: float
    delta: float
    discretization: float = 1e-3

    def __post_init__(self) -> None:
        if not (self.eps_max >= 0 and math.isfinite(self.eps_max)):
            raise ValueError(f"eps_max must be finite and >= 0, got {self.eps_max}")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta}")
        if not self.discretization > 0:
            raise ValueError("discretization must be positive")

    def spend(self, events: Sequence[PrivacyEvent]) -> float:
        if not events:
            return 0.0
        return compose_events(events, self.discretization).eps_at(self.delta)

    @property
    def limit(self) -> float:
        return self.eps_max

    @property
    def unit(self) -> str:
        return f"eps at delta={self.delta:.3g}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "eps_delta",
            "eps_max": self.eps_max,
            "delta": self.delta,
            "discretization": self.discretization,
        }


def event_rdp(event: PrivacyEvent, alpha: float) -> float:
    """ρ(α) of ONE occurrence of ``event`` (see the module docstring); ``UnsupportedEventError`` when the
    event has no Rényi bound."""
    if isinstance(event, RenyiEvent):
        return event.rdp(alpha)
    if isinstance(event, (GaussianEvent, AmplifiedGaussianEvent)):
        return alpha * event.mu * event.mu / 2.0
    pure: float | None = None
    if isinstance(event, LaplaceEvent):
        pure = event.eps
    elif isinstance(event, EpsDeltaEvent) and event.delta == 0.0:
        pure = event.eps
    elif isinstance(event, ProfileEvent):
        pure = event.profile.pure_eps
    if pure is None:
        raise UnsupportedEventError(
            f"{type(event).__name__} ({event.label or 'no label'}) has no Renyi-DP bound, so a Renyi budget "
            "cannot account for it; configure an EpsDeltaBudget or describe the mechanism by a GDP or "
            "pure-DP bound"
        )
    return min(alpha * pure * pure / 2.0, pure)


@dataclass(frozen=True)
class RDPBudget:
    """Rényi filter at the fixed order ``alpha``: ε at ``delta`` of Σ ρ(α) must stay ≤ ``eps_max``
    (``alpha=None``: ``renyi.budget_order(eps_max, delta)``)."""

    eps_max: float
    delta: float
    alpha: float | None = None

    def __post_init__(self) -> None:
        if not (self.eps_max >= 0 and math.isfinite(self.eps_max)):
            raise ValueError(f"eps_max must be finite and >= 0, got {self.eps_max}")
        if not 0.0 < self.delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {self.delta}")
        if self.alpha is None:
            object.__setattr__(self, "alpha", budget_order(float(self.eps_max), float(self.delta)))
        assert self.alpha is not None
        if not (self.alpha > 1 and math.isfinite(self.alpha)):
            raise ValueError(f"the Renyi order alpha must be finite and > 1, got {self.alpha}")

    def rho(self, events: Sequence[PrivacyEvent]) -> float:
        """Σ over events of count · ρ(alpha)."""
        assert self.alpha is not None
        return math.fsum(e.count * event_rdp(e, self.alpha) for e in events)

    def spend(self, events: Sequence[PrivacyEvent]) -> float:
        """rdp_eps(Σ ρ(α), α, δ); 0 when nothing was charged."""
        assert self.alpha is not None
        total = self.rho(events)
        return 0.0 if total == 0.0 else rdp_eps(total, self.alpha, self.delta)

    @property
    def limit(self) -> float:
        return self.eps_max

    @property
    def unit(self) -> str:
        return f"eps at delta={self.delta:.3g} (Renyi filter, alpha={self.alpha:g})"

    def to_dict(self) -> dict[str, Any]:
        return {"type": "renyi", "eps_max": self.eps_max, "delta": self.delta, "alpha": self.alpha}


Budget = GDPBudget | EpsDeltaBudget | RDPBudget


def _budget_from_dict(data: Mapping[str, Any]) -> Budget:
    kind = data.get("type")
    if kind == "renyi":
        return RDPBudget(float(data["eps_max"]), float(data["delta"]), float(data["alpha"]))
    if kind == "gdp":
        return GDPBudget(float(data["mu_max"]))
    if kind == "eps_delta":
        return EpsDeltaBudget(
            float(data["eps_max"]), float(data["delta"]), float(data.get("discretization", 1e-3))
        )
    raise ValueError(f"unknown budget type {kind!r}; expected 'gdp', 'eps_delta' or 'renyi'")


@dataclass(frozen=True)
class SpendReport:
    """Outcome of a dry run: spend before and after the batch, in the budget's unit."""

    allowed: bool
    spent_before: float
    spent_after: float
    limit: float
    unit: str

    @property
    def message(self) -> str:
        verdict = "within budget" if self.allowed else "REFUSED: would exceed budget"
        spend = f"{self.spent_before:.6g} -> {self.spent_after:.6g}"
        return f"{verdict}: {self.unit} {spend} (limit {self.limit:.6g})"


@dataclass(frozen=True)
class PrivacyLedger:
    """Immutable ledger of one party: its budget and the events committed so far."""

    budget: Budget
    events: tuple[PrivacyEvent, ...] = ()

    def spent(self) -> float:
        """Current spend in the budget's unit."""
        return self.budget.spend(self.events)

    def check(self, events: Sequence[PrivacyEvent]) -> SpendReport:
        """Dry run: what committing ``events`` would spend. Raises ``UnsupportedEventError``."""
        before = self.spent()
        after = self.budget.spend((*self.events, *events))
        allowed = within_limit(after, self.budget.limit)
        return SpendReport(allowed, before, after, self.budget.limit, self.budget.unit)

    def would_exceed(self, events: Sequence[PrivacyEvent]) -> bool:
        """True if committing ``events`` would exceed the budget (no state changes)."""
        return not self.check(events).allowed

    def commit(self, events: Sequence[PrivacyEvent]) -> PrivacyLedger:
        """Return the ledger with ``events`` appended, or raise ``BudgetExceededError`` (self unchanged)."""
        report = self.check(events)
        if not report.allowed:
            raise BudgetExceededError(report.message)
        return PrivacyLedger(self.budget, (*self.events, *events))

    def capacity(self, event: PrivacyEvent, max_count: int, rel_tol: float = 0.01) -> int:
        """A number k ≤ ``max_count`` of further occurrences of ``event`` (count 1 each) that keeps this
        ledger within budget; 0 if not even one fits.

        Exact for a GDP budget (closed form). For an ε-at-δ budget it is found by doubling and bisection on
        the PLD composition, stopping when the bracket is within ``rel_tol`` and returning its *lower* end,
        so k is never above the true capacity: every k' ≤ k fits too, because the true ε(δ) of a composition
        does not decrease with more mechanisms and the PLD value at k is an upper bound on it. About
        2 log2(k) compositions: a daemon computes it once per mechanism and ledger state.
        """
        if max_count < 1:
            return 0
        one = dataclasses.replace(event, count=1)
        if isinstance(self.budget, GDPBudget):
            mu = one.gdp_mu()
            if mu is None:
                raise UnsupportedEventError(f"{type(one).__name__} has no GDP guarantee")
            if mu == 0:
                return max_count

        def fits(k: int) -> bool:
            return not self.would_exceed([dataclasses.replace(one, count=k)])

        if isinstance(self.budget, GDPBudget):  # closed form, then settled by the check itself (rounding)
            assert mu is not None
            k = max(0, min(max_count, math.floor((self.budget.mu_max**2 - self.spent() ** 2) / (mu * mu))))
            while k < max_count and fits(k + 1):
                k += 1
            while k > 0 and not fits(k):
                k -= 1
            return k

        if isinstance(self.budget, RDPBudget):  # closed form on sum rho, settled by the check itself
            assert self.budget.alpha is not None
            r1 = event_rdp(one, self.budget.alpha)
            if r1 == 0:
                return max_count
            base = rdp_eps(0.0, self.budget.alpha, self.budget.delta)
            room = self.budget.eps_max - base - self.budget.rho(self.events) + 0.0
            k = max(0, min(max_count, math.floor(room / r1) if room > 0 else 0))
            while k < max_count and fits(k + 1):
                k += 1
            while k > 0 and not fits(k):
                k -= 1
            return k

        if not fits(1):
            return 0
        lo, hi = 1, 2
        while hi <= max_count and fits(hi):
            lo, hi = hi, hi * 2
        if hi > max_count:
            if fits(max_count):
                return max_count
            hi = max_count
        while hi - lo > max(1, int(rel_tol * lo)):  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def append_unchecked(self, events: Sequence[PrivacyEvent]) -> PrivacyLedger:
        """The ledger with ``events`` appended, without a check: for callers that established the fit with
        :meth:`capacity` (every count up to it fits)."""
        return PrivacyLedger(self.budget, (*self.events, *events))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``from_dict`` inverts it."""
        return {"version": 1, "budget": self.budget.to_dict(), "events": [e.to_dict() for e in self.events]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyLedger:
        if data.get("version") != 1:
            raise ValueError(f"unsupported ledger version {data.get('version')!r}; expected 1")
        return cls(_budget_from_dict(data["budget"]), tuple(event_from_dict(e) for e in data["events"]))
