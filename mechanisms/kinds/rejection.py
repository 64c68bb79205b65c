"""Rejection-sampling decisions (kind ``"rejection"``): a registry's term is ℓ_j = log p(X_j | θ*) − log M_j
plus its noise, M_j its own bound (its maximum likelihood, over the capped set A when there is a cap, or
the model's public bound), so that the decision accepts with probability π(θ*) p(X | θ*) / (M q(θ*)).

Its keys of ``model_params``: ``log_bound_margin`` (>= 0, added to log M_j), ``bound`` (``"data"`` or
``"public"``) and ``max_sensitivity`` (a public cap on a proposal's per-record log-likelihood range);
:class:`RejectionSettings`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechanisms.models.base import Model
from mechanisms.privacy import charge
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.samplers.requests import within_cap
from mechanisms.samplers.terms import Terms, party_terms

from .base import BatchRefused, ChargeAsk, DecisionKind, PartyBatch, PlanView, number, require_replace_one

#: rejection sampling's bound M_j: each party's own maximum likelihood, or the model's public bound
BOUNDS = ("data", "public")


@dataclass(frozen=True)
class RejectionSettings:
    """Rejection sampling's public settings (the module docstring)."""

    log_bound_margin: float = 0.0
    bound: str = "data"
    max_sensitivity: float | None = None  # cap on a proposal's record range

    def __post_init__(self) -> None:
        margin = self.log_bound_margin
        if not number(margin) or not 0 <= margin < math.inf:
            raise ValueError(f"log_bound_margin must be a finite number >= 0, got {margin!r}")
        if self.bound not in BOUNDS:
            raise ValueError(f"bound must be one of {BOUNDS}, got {self.bound!r}")
        cap = self.max_sensitivity
        if cap is not None and (not number(cap) or not 0 < cap < math.inf):
            raise ValueError(f"max_sensitivity must be a finite number > 0, got {cap!r}")


class RejectionKind(DecisionKind):
    """Rejection-sampling decisions; settings: :class:`RejectionSettings`."""

    name = "rejection"
    keys = ("log_bound_margin", "bound", "max_sensitivity")
    form = "rejection"
    elsewhere = " (MH caps its steps in penalty.max_sensitivity or lazy.max_sensitivity)"

    def unset(self, key: str) -> Any:
        return {"log_bound_margin": 0, "bound": "data"}.get(key)

    def default_settings(self) -> RejectionSettings:
        return RejectionSettings()

    def read(self, params: Mapping[str, Any]) -> RejectionSettings:
        return RejectionSettings(
            log_bound_margin=params.get("log_bound_margin", 0.0),
            bound=params.get("bound", "data"),
            max_sensitivity=params.get("max_sensitivity"),
        )

    def write(self, settings: RejectionSettings) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if settings.log_bound_margin:
            out["log_bound_margin"] = settings.log_bound_margin
        if settings.bound != "data":
            out["bound"] = settings.bound
        if settings.max_sensitivity is not None:
            out["max_sensitivity"] = settings.max_sensitivity
        return out

    def check(self, plan: PlanView) -> None:
        if not isinstance(plan.settings, RejectionSettings):
            raise ValueError(f"a rejection plan's settings are RejectionSettings, got {plan.settings!r}")
        if plan.penalty is not None:
            raise ValueError("the penalty applies to kind 'mh' only")

    def step_cap(self, plan: PlanView) -> float | None:
        return plan.settings.max_sensitivity  # type: ignore[no-any-return]

    def margin(self, plan: PlanView) -> float:
        return plan.settings.log_bound_margin  # type: ignore[no-any-return]

    def events(self, plan: PlanView, ask: ChargeAsk) -> list[PrivacyEvent]:
        model, mode, view, n, name = ask.model, ask.mode, ask.view, ask.n, ask.name
        require_replace_one(name, ask.neighbours)
        return charge.rejection_events(plan.settings, plan.lazy, model, mode, view, n, name)

    def terms(self, plan: PlanView, batch: PartyBatch) -> Terms:
        model, settings = batch.model, plan.settings
        req = self.batch_request(plan, batch)
        if "log_bound" not in batch.memo:  # computed once a session
            batch.memo["log_bound"] = log_bound_of(batch.name, model, batch.cols, settings)
        log_bound = batch.memo["log_bound"]
        check_batch(batch.name, model, req.theta_star, req.public, settings.max_sensitivity)
        if not model.in_bounds(req.theta_star).all():
            raise BatchRefused(f"{batch.name}: proposals outside the parameter bounds must not be sent")
        return party_terms(
            model,
            batch.cols,
            req,
            batch.m,
            batch.rng,
            batch.mode,
            log_bound=log_bound,
            exp_noise=plan.exp_noise,
        )

    def without_noise(self, plan: PlanView) -> tuple[str, str]:
        lazy = plan.lazy is not None
        what = "lazy rejection" if lazy else "rejection"
        why = (
            "the accept bit is then 1[a >= 0]"
            + (" AND the secret coin" if lazy else "")
            + ", a deterministic function of the data"
            + (" given the coin" if lazy else "")
            + ": an unbounded loss"
        )
        return what, why


def log_bound_of(name: str, model: Model, cols: dict[str, Any], settings: RejectionSettings) -> float:
    """A registry's log M_j (never sent anywhere): ``bound = "data"`` the maximum of its log-likelihood
    (over A = {range(θ) <= max_sensitivity} when capped, so that it moves by at most the cap when one record
    changes), ``"public"`` the model's bound for any dataset of its size; plus the margin."""
    cap = settings.max_sensitivity
    value: float | None
    if settings.bound == "public":
        value = model.public_log_bound(model.n_records(cols))
        what = "public_log_bound"
    elif cap is not None:
        value = model.max_log_likelihood_within(cols, float(cap))
        what = "max_log_likelihood_within"
    else:
        value, what = model.max_log_likelihood(cols), "max_log_likelihood"
    if value is None or not np.isfinite(value):
        raise BatchRefused(f"{name}: model {model.name!r} has no {what} (rejection bound)")
    return float(value + settings.log_bound_margin)


def check_batch(name: str, model: Model, theta_star: Any, public: Any, cap: float | None) -> None:
    """Refuse proposals the accounting does not cover: a public term above 0 (a <= -m margin relies on it)
    or, with a cap, a proposal outside A (the coordinator must reject those itself)."""
    if (public > 1e-9).any():
        raise BatchRefused(
            f"{name}: rejection decisions need public terms <= 0 (log pi - log q - log M_q); got "
            f"up to {float(public.max()):.6g}"
        )
    if cap is None:
        return
    rng_ = model.record_loglik_range(theta_star)
    if rng_ is None:
        raise BatchRefused(f"{name}: model {model.name!r} has no record_loglik_range for the cap")
    over = ~within_cap(np.asarray(rng_), float(cap))
    if over.any():
        raise BatchRefused(
            f"{name}: {int(over.sum())} proposals lie outside the session's max_sensitivity = "
            f"{float(cap):g} (largest per-record log-likelihood range {float(np.max(rng_)):.6g}); the "
            "coordinator must reject those itself"
        )


REJECTION = RejectionKind()
