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

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Model

F64 = npt.NDArray[np.float64]
KINDS = ("mh", "rejection")
C_MODES = ("bound", "clip")


@dataclass(frozen=True)
class Penalty:
    """σ(θ, θ*) = tau · n^alpha · c(θ, θ*), the sd of each party's λ_j ~ N(0, σ²).

    ``c = "bound"``: c = 2 · model.record_ratio_bound(θ, θ*), a public bound valid for every record the
    schema allows (e.g. a Lipschitz bound from bounded covariates). Nothing is changed in the likelihood, so
    the chain is exact.
    ``c = "clip"``: each record's log-ratio is clipped to ±b‖θ* − θ‖₂, so c = 2b‖θ* − θ‖₂ holds by
    construction. The chain is exact only where clipping never binds; where it binds, the accept ratio is
    no longer a ratio of one likelihood and the chain targets a (generally unknown) perturbed distribution.
    Parties count the clipped records (``terms.clipped_records``) so this can be audited.
    ``n`` is the (public) total number of records.
    """

    tau: float
    alpha: float
    n: int
    c: str = "bound"
    b: float | None = None

    def __post_init__(self) -> None:
        if not self.tau > 0:
            raise ValueError(f"penalty tau must be > 0, got {self.tau}")
        if not self.n >= 1:
            raise ValueError(f"penalty n (total records) must be >= 1, got {self.n}")
        if self.c not in C_MODES:
            raise ValueError(f"penalty c must be one of {C_MODES}, got {self.c!r}")
        if self.c == "clip" and not (self.b is not None and self.b > 0):
            raise ValueError("penalty c = 'clip' needs a clip constant b > 0")

    def to_params(self) -> dict[str, Any]:
        return {"tau": self.tau, "alpha": self.alpha, "n": self.n, "c": self.c, "b": self.b}

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> Penalty:
        extra = set(p) - {"tau", "alpha", "n", "c", "b"}
        if extra:
            raise ValueError(f"unknown penalty parameters {sorted(extra)}")
        b = p.get("b")
        return cls(
            tau=float(p["tau"]),
            alpha=float(p.get("alpha", 0.0)),
            n=int(p["n"]),
            c=str(p.get("c", "bound")),
            b=None if b is None else float(b),
        )

    def sigma(self, model: Model, theta: F64, theta_star: F64) -> F64:
        """Per decision; symmetric in (θ, θ*)."""
        if self.c == "bound":
            bound = model.record_ratio_bound(theta, theta_star)
            if bound is None:
                raise ValueError(f"model {model.name} has no record_ratio_bound: use penalty c = 'clip'")
            c = 2.0 * np.asarray(bound, dtype=np.float64)
        else:
            assert self.b is not None
            c = 2.0 * self.b * np.linalg.norm(theta_star - theta, axis=1)
        return np.asarray(self.tau * float(self.n) ** self.alpha * c, dtype=np.float64)


@dataclass(frozen=True)
class DecisionRequest:
    kind: str
    theta_star: F64  # (n, d)
    public: F64  # (n,)
    theta: F64 | None = None  # (n, d), MH only
    penalty: Penalty | None = None

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

    @property
    def n(self) -> int:
        return int(self.theta_star.shape[0])

    def to_inputs(self) -> dict[str, F64]:
        """The arrays a coordinator sends to the parties (public)."""
        out = {"theta_star": self.theta_star, "public": self.public}
        if self.theta is not None:
            out["theta"] = self.theta
        return out
