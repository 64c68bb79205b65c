"""Privacy events reported by the ABCDP mechanisms.

Owns :class:`AbcdpPrivacyEvent`, the record every ABCDP run hands to the privacy ledger (which lives in
``mechanisms/privacy`` and is built by someone else): a plain frozen dataclass with the (ε, δ) guarantee,
the mechanism's name and the parameters that produced it, so that a ledger or an audit log can store it
as data (``to_dict``) without importing anything from here.

Privacy assumptions: the (ε, δ) in an event is a statement about the released outputs of one run (the
accept bits of the candidates that were evaluated, or the noisy weights of soft ABCDP) under the
replace-one neighbouring relation on the private data set, against an observer who sees all of those
outputs. ``eps = inf`` marks a non-private run (no noise).

Paper: M. Park, M. Vinaroz, W. Jitkrittum, "ABCDP: Approximate Bayesian Computation with Differential
Privacy", Entropy 23 (2021) 961, and its arXiv predecessor (rejection and soft ABCDP).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mechanisms.privacy import EpsDeltaEvent

#: Mechanism names used in events (one name per mechanism, never two names for one thing).
SVT_LAPLACE = "abcdp_svt_laplace"
SVT_GAUSSIAN = "abcdp_svt_gaussian"
REJECTION_GAUSSIAN = "abcdp_rejection_gaussian"
SOFT_GAUSSIAN = "abcdp_soft_gaussian"

NEIGHBOURING_RELATION = "replace_one"


@dataclass(frozen=True)
class AbcdpPrivacyEvent:
    """The privacy cost of one ABCDP run.

    Attributes:
        name: mechanism name (one of the module constants ``SVT_LAPLACE``, ``SVT_GAUSSIAN``,
            ``REJECTION_GAUSSIAN``, ``SOFT_GAUSSIAN``).
        eps: ε of the (ε, δ) guarantee for the whole run; ``math.inf`` for a non-private run.
        delta: δ of the guarantee (0.0 for the pure-DP Laplace SVT).
        params: the parameters that determine the guarantee (sensitivity, c, noise scales, numbers of
            candidates, ...). Plain JSON-able scalars only; treat as read-only.
    """

    name: str
    eps: float
    delta: float
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a privacy event needs a mechanism name")
        if math.isnan(self.eps) or self.eps < 0:
            raise ValueError(f"eps must be >= 0 (or inf for a non-private run), got {self.eps}")
        if not 0.0 <= self.delta <= 1.0:
            raise ValueError(f"delta must be in [0, 1], got {self.delta}")

    @property
    def is_private(self) -> bool:
        """False for a run without noise (eps = inf)."""
        return math.isfinite(self.eps)

    def to_ledger_event(self) -> EpsDeltaEvent:
        """This run as an event of a party's privacy ledger (:mod:`mechanisms.privacy`).

        Refuses a non-private run (eps = inf): it has no finite cost to record, and a party with a budget
        must refuse to run it instead.
        """
        if not self.is_private:
            raise ValueError(
                f"{self.name}: a non-private run (eps = inf) has no finite privacy cost; a party with a "
                "privacy budget must refuse it rather than record it"
            )
        return EpsDeltaEvent(eps=self.eps, delta=self.delta, label=f"{self.name} {self.params}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able copy: name, eps, delta, neighbouring relation and params."""
        return {
            "name": self.name,
            "eps": self.eps,
            "delta": self.delta,
            "neighbouring_relation": NEIGHBOURING_RELATION,
            "params": dict(self.params),
        }
