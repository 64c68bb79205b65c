"""Threat models for the revealed value of a confidential accept-reject step (DESIGN.md §1–2).

Owns ``ThreatModel``: who looks at the revealed value and which noise shares they already know.
In a step every party j adds V_j ~ Gamma(1/m, 1) (so Σ_j V_j ~ Exp(1)) and, for the penalty method,
λ_j ~ N(0, σ²). An observer who knows t parties' shares can subtract them, so the noise still
protecting an honest party's record is Gamma((m − t)/m, 1) (plus N(0, (m − t)σ²)):

* ``colluding = 0``: the outside observer (the coordinator; it never colludes with parties);
* ``colluding = 1``: one party that knows its own noise;
* ``colluding = t``: t colluding parties pooling their noise.

Assumptions: the MPC reveals nothing but the stated value (sum / blinded product / sign), which
needs at most t < m/2 corrupted parties for Shamir-based protocols and t ≤ m − 1 for additive
secure aggregation — that is the secret-sharing layer's statement, not this module's. A party's
own records need no protection from itself, so the record at risk belongs to an honest party.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ThreatModel"]


@dataclass(frozen=True)
class ThreatModel:
    """``m`` parties, of which ``colluding`` pool their noise shares (0 = outside observer)."""

    m: int
    colluding: int = 0

    def __post_init__(self) -> None:
        if self.m < 1:
            raise ValueError(f"need at least one party, got m={self.m}")
        if not 0 <= self.colluding <= self.m - 1:
            raise ValueError(
                f"colluding must be in [0, m-1] = [0, {self.m - 1}] (at least one honest party holds "
                f"the record), got {self.colluding}"
            )

    @classmethod
    def outside_observer(cls, m: int) -> ThreatModel:
        """The coordinator: sees only the revealed value."""
        return cls(m, 0)

    @classmethod
    def single_party(cls, m: int) -> ThreatModel:
        """One party that knows its own noise shares V_j (and λ_j, W_j)."""
        return cls(m, 1)

    @property
    def residual_parties(self) -> int:
        """Number of parties whose noise the observer does not know."""
        return self.m - self.colluding

    @property
    def residual_shape(self) -> float:
        """Shape k of the unknown part of Σ_j V_j: Gamma(k, 1) with k = (m − t)/m."""
        return self.residual_parties / self.m

    @property
    def name(self) -> str:
        if self.colluding == 0:
            return f"outside observer (coordinator), m={self.m}"
        if self.colluding == 1:
            return f"one party knowing its own noise, m={self.m}"
        return f"{self.colluding} colluding parties, m={self.m}"
