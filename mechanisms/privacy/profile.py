"""Privacy profiles: a mechanism's δ(ε) curve on a grid, and its conversion to a PLD and an f-DP curve.

Owns ``PrivacyProfile``, the common currency of the per-mechanism analyses in this package: a
non-increasing curve ``δ(ε)``, ε ≥ 0, that upper-bounds the hockey-stick divergence
``sup_{D ~ D'} H_{e^ε}(M(D) ‖ M(D'))`` over *both* orderings of every neighbouring pair (so the
corresponding trade-off function is symmetric). Guarantees it relies on:

* Between grid points the curve is interpolated linearly in γ = e^ε. The hockey-stick divergence
  ``γ ↦ ∫ (p − γ q)_+`` is convex in γ, so this chord is an upper bound whenever the grid values
  are; beyond the last grid point δ is held at its last value (δ is non-increasing). Hence
  ``delta_at`` and ``eps_at`` are conservative.
* ``to_pld`` builds a dp_accounting ``PrivacyLossDistribution`` with the pessimistic
  connect-the-dots construction (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, PETS 2022), using
  ``δ(ε) = 1 − e^ε + e^ε δ(−ε)`` for ε < 0 (symmetry). Its hockey-stick curve dominates the
  profile, so compositions of these PLDs are pessimistic (f-DP composition is monotone).
* ``tradeoff`` is the dual envelope ``sup_ε f_{ε, δ(ε)}`` (Dong–Roth–Su Prop. 2.12), a valid claim.

``method`` says how the grid values were obtained: ``"exact"`` (closed form), ``"numerical bound"``
(numerics whose every approximation is in the conservative direction) or ``"numerical estimate"``
(accurate numerics without a certificate, e.g. quadrature whose error is controlled but not
bounded). Pure and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._numeric import FloatArray, as_float_array
from .conversions import gdp_delta
from .tradeoff import EnvelopeTradeOff

if TYPE_CHECKING:  # imported where used: dp_accounting brings scipy.signal and .stats (~0.7 s of CPU per
    # process), which a daemon whose charges compose in closed form never needs
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = ["METHODS", "PrivacyProfile"]

METHODS = ("exact", "numerical bound", "numerical estimate")


@dataclass(frozen=True)
class PrivacyProfile:
    """A symmetric privacy profile ``δ(ε)`` on an increasing ε grid starting at 0.

    Attributes:
        eps: grid, strictly increasing, ``eps[0] == 0``.
        deltas: δ at each grid point (non-increasing; tiny numerical increases are removed by
            raising earlier values, which is conservative).
        description: what mechanism, threat model and sensitivity this is for.
        method: one of ``METHODS``.
        pure_eps: a pure-DP bound (max privacy loss) when one is known, else ``None``.
    """

    eps: tuple[float, ...]
    deltas: tuple[float, ...]
    description: str = ""
    method: str = "exact"
    pure_eps: float | None = None

    def __post_init__(self) -> None:
        e = as_float_array(self.eps).ravel()
        d = as_float_array(self.deltas).ravel()
        if e.size == 0 or e.shape != d.shape:
            raise ValueError(
                f"eps and deltas must be non-empty and of equal length, got {e.size} and {d.size}"
            )
        if e[0] != 0.0 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
            raise ValueError("the eps grid must be finite, strictly increasing and start at 0")
        if np.any(np.isnan(d)) or np.any(d < -1e-15) or np.any(d > 1 + 1e-15):
            raise ValueError("deltas must lie in [0, 1]")
        if np.any(np.diff(d) > 1e-9):
            i = int(np.argmax(np.diff(d) > 1e-9))
            raise ValueError(
                f"deltas must be non-increasing in eps; delta rises from {d[i]:.3g} to {d[i + 1]:.3g} at "
                f"eps={e[i + 1]:.4g}"
            )
        d = np.clip(np.maximum.accumulate(d[::-1])[::-1], 0.0, 1.0)
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.pure_eps is not None and not 0 <= self.pure_eps < math.inf:
            raise ValueError(
                f"pure_eps must be finite and >= 0, or None when unknown/unbounded; got {self.pure_eps}"
            )
        object.__setattr__(self, "eps", tuple(float(x) for x in e))
        object.__setattr__(self, "deltas", tuple(float(x) for x in d))

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_delta_function(
        cls,
        delta_fn: Callable[[FloatArray], FloatArray],
        eps_max: float,
        step: float = 0.01,
        description: str = "",
        method: str = "exact",
        pure_eps: float | None = None,
    ) -> PrivacyProfile:
        """Tabulate a vectorised δ(ε) on ``0, step, ..., ≥ eps_max``."""
        if not (eps_max > 0 and step > 0):
            raise ValueError("eps_max and step must be positive")
        n = math.ceil(eps_max / step)
        grid = np.arange(n + 1, dtype=np.float64) * step
        return cls(
            tuple(grid), tuple(np.asarray(delta_fn(grid), dtype=np.float64)), description, method, pure_eps
        )

    @classmethod
    def from_gdp(
        cls, mu: float, eps_max: float | None = None, step: float = 0.01, description: str = ""
    ) -> PrivacyProfile:
        """The exact profile of μ-GDP, tabulated up to where δ < 1e-18 (or ``eps_max``)."""
        if eps_max is None:
            eps_max = 1.0
            while gdp_delta(mu, eps_max) > 1e-18 and eps_max < 200:
                eps_max *= 1.5
        return cls.from_delta_function(
            lambda e: np.asarray(gdp_delta(mu, e)), eps_max, step, description or f"{mu:.6g}-GDP", "exact"
        )

    # ----------------------------------------------------------------- queries
    @property
    def eps_max(self) -> float:
        return self.eps[-1]

    @property
    def delta_floor(self) -> float:
        """δ at the last grid point, used for every larger ε: the mass the profile never resolves."""
        return self.deltas[-1]

    def _delta_nonneg(self, eps: FloatArray) -> FloatArray:
        e = np.asarray(self.eps)
        d = np.asarray(self.deltas)
        x = np.clip(eps, 0.0, e[-1])
        out = np.interp(np.exp(x), np.exp(e), d)
        return np.where(eps >= e[-1], d[-1], out)

    def delta_at(self, eps: npt.ArrayLike) -> FloatArray:
        """Conservative δ(ε) for ε ≥ 0 (chord in e^ε between grid points; last value beyond)."""
        arr = as_float_array(eps)
        if np.any(arr < 0) or np.any(np.isnan(arr)):
            raise ValueError("eps must be >= 0")
        return self._delta_nonneg(np.atleast_1d(arr)).reshape(arr.shape)

    def eps_at(self, delta: float) -> float:
        """Smallest ε whose conservative δ is ≤ ``delta``; ``inf`` if below the profile's floor."""
        if not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta must lie in [0, 1], got {delta}")
        d = np.asarray(self.deltas)
        if delta >= d[0]:
            return 0.0
        if delta < d[-1]:
            return math.inf
        i = int(np.argmax(d <= delta))
        g0, g1 = math.exp(self.eps[i - 1]), math.exp(self.eps[i])
        d0, d1 = d[i - 1], d[i]
        gamma = g1 if d0 == d1 else g0 + (d0 - delta) * (g1 - g0) / (d0 - d1)
        eps = min(math.log(gamma), self.eps[i])
        while self._delta_nonneg(np.array([eps]))[0] > delta and eps < self.eps[i]:
            eps = math.nextafter(eps, math.inf)
        return eps

    def tradeoff(self) -> EnvelopeTradeOff:
        """The f-DP curve implied by this profile (dual envelope; a valid, conservative claim)."""
        return EnvelopeTradeOff(self.eps, self.deltas, name=self.description or "profile")

    def to_pld(self, discretization: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
        """Pessimistic connect-the-dots PLD whose hockey-stick curve dominates this profile."""
        from dp_accounting.pld import pld_pmf
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        if not discretization > 0:
            raise ValueError("discretization must be positive")
        d = np.asarray(self.deltas)
        floor = d[-1]
        reach = np.nonzero(d <= floor)[0][0]  # first grid index at the floor
        top = math.ceil(self.eps[int(reach)] / discretization)
        ks = np.arange(-top, top + 1)
        eps_k = ks * discretization
        pos = self._delta_nonneg(np.abs(eps_k))
        deltas = np.where(ks >= 0, pos, 1.0 - np.exp(eps_k) * (1.0 - pos))
        deltas = np.clip(deltas, 0.0, 1.0)
        pmf = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap(discretization, -top, top, deltas)
        return pld_lib.PrivacyLossDistribution(pmf)

    # ----------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "eps": list(self.eps),
            "deltas": list(self.deltas),
            "description": self.description,
            "method": self.method,
            "pure_eps": self.pure_eps,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyProfile:
        pure = data.get("pure_eps")
        return cls(
            tuple(float(x) for x in data["eps"]),
            tuple(float(x) for x in data["deltas"]),
            str(data.get("description", "")),
            str(data.get("method", "exact")),
            None if pure is None else float(pure),
        )
