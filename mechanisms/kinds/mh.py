"""Metropolis–Hastings decisions (kind ``"mh"``): a registry's term is ℓ_j = log p(X_j | θ*) − log p(X_j | θ)
plus its noise; with the Yıldırım–Ermiş penalty, lazy acceptance, or (its one key, ``blocked``) blocked
sampling of a model with a registry random intercept, whose registry-local effects the parties keep
(``parties.local_blocks``: their terms are made there)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Model
from mechanisms.models.hierarchy import SharedModel
from mechanisms.privacy import charge
from mechanisms.privacy.charge import Unaccountable
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.privacy.threat import RevealView
from mechanisms.privacy.worst_record import WorstRecordCharge
from mechanisms.samplers.local import LocalSettings
from mechanisms.samplers.requests import DecisionRequest, record_sensitivity, within_cap
from mechanisms.samplers.terms import Terms, party_terms

from .base import (
    BatchRefused,
    ChargeAsk,
    DecisionKind,
    PartyBatch,
    PlanView,
    part,
    require_random_intercept,
    require_replace_one,
)


class MhKind(DecisionKind):
    """MH decisions; settings: the blocked sampler's :class:`LocalSettings` (None: not blocked)."""

    name = "mh"
    keys = ("blocked",)
    form = "mh"

    def read(self, params: Mapping[str, Any]) -> LocalSettings | None:
        return part(params, "blocked", LocalSettings.from_params)  # type: ignore[no-any-return]

    def write(self, settings: LocalSettings | None) -> dict[str, Any]:
        return {} if settings is None else {"blocked": settings.to_params()}

    def check(self, plan: PlanView) -> None:
        blocked = plan.settings
        if blocked is None:
            return
        if not isinstance(blocked, LocalSettings):
            raise ValueError(
                f"an MH plan's settings are its blocked sampling's LocalSettings, got {blocked!r}"
            )
        if plan.lazy is not None:
            raise ValueError("blocked sampling decides MH moves of the shared block (kind 'mh'), not lazy")
        pen = plan.penalty
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

    def step_cap(self, plan: PlanView) -> float | None:
        if plan.penalty is not None:
            return plan.penalty.max_sensitivity
        return plan.lazy.max_sensitivity if plan.lazy is not None else None

    def keeps_local(self, plan: PlanView) -> bool:
        return plan.settings is not None

    def check_model(self, plan: PlanView, model: Model) -> None:
        if plan.settings is not None:
            require_random_intercept(model)

    def charge_request(
        self, plan: PlanView, model: Model, batch: Mapping[str, Any] | None, n: int
    ) -> DecisionRequest | None:
        """A fixed-sd penalty is charged at each decision's own sensitivity: the batch's proposals (a
        blocked run's: its shared block's); every other MH plan at its cap."""
        pen = plan.penalty
        if batch is None or pen is None or not pen.fixed:
            return None
        if plan.settings is not None:  # the shared block's batch
            return DecisionRequest.from_inputs(batch, "mh", n, SharedModel(model).d, pen, blocked=True)
        return self.request(plan, model, batch, n)

    def events(self, plan: PlanView, ask: ChargeAsk) -> list[PrivacyEvent]:
        model, mode, view, n, name = ask.model, ask.mode, ask.view, ask.n, ask.name
        request, neighbours, rdp_orders = ask.request, ask.neighbours, ask.rdp_orders
        pen = plan.penalty
        if plan.settings is not None:
            return charge.blocked_events(pen, plan.settings, model, mode, view, n, name, request, neighbours)
        if pen is not None and pen.fixed:
            return charge.per_decision_events(
                pen, model, mode, view, n, name, request, neighbours, rdp_orders
            )
        require_replace_one(name, neighbours)
        if plan.lazy is not None:
            return charge.lazy_events(plan.lazy, mode, view, n, name)
        if pen is None:
            raise Unaccountable(
                f"{name}: kind {self.name!r} without the penalty has unbounded or unknown per-step privacy "
                f"loss in reveal mode {mode!r} (exact MH accepts with probability 1 whenever r >= 1); use "
                "the penalty (model_params.penalty)"
            )
        return charge.penalty_events(pen, mode, view, n, name)

    def worst_record(
        self,
        plan: PlanView,
        model: Model,
        view: RevealView,
        neighbours: str,
        rdp_orders: tuple[float, ...] | None,
    ) -> WorstRecordCharge | None:
        pen = plan.penalty
        if pen is None or plan.settings is not None:  # a blocked run's terms sit at the registries' effects
            return None
        return charge.worst_record_charge(pen, model, view, neighbours, rdp_orders)

    def terms(self, plan: PlanView, batch: PartyBatch) -> Terms:
        model = batch.model
        req = self.batch_request(plan, batch)
        check_batch(batch.name, model, req, self.step_cap(plan), batch.inputs.get("sigma"))
        assert req.theta is not None
        if not (model.in_bounds(req.theta_star).all() and model.in_bounds(req.theta).all()):
            raise BatchRefused(f"{batch.name}: proposals outside the parameter bounds must not be sent")
        return party_terms(model, batch.cols, req, batch.m, batch.rng, batch.mode, exp_noise=plan.exp_noise)

    def without_noise(self, plan: PlanView) -> tuple[str, str]:
        if plan.lazy is not None:
            return "lazy MH", "the accept bit is then deterministic given the secret coin: an unbounded loss"
        if plan.penalty is not None:
            return "penalty MH (sd " + ("fixed" if plan.penalty.fixed else "tau") + ")", (
                "the decision is then 1[l + N(0, m sigma^2) - m sigma^2/2 >= 0], not the penalty's "
                "Metropolis-Hastings decision, and its charges (the confidential amplification, the accept "
                "bit's Renyi bound) count on the Gamma noise"
            )
        return "exact MH", "the accept bit is then deterministic given the data: an unbounded loss"


def check_batch(
    name: str, model: Model, req: DecisionRequest, cap: float | None, sigma: npt.ArrayLike | None
) -> None:
    """Refuse MH proposals the accounting does not cover (a per-record sensitivity above the session's
    ``cap``) and a coordinator's penalty ``sigma`` (optional input) that differs from this registry's own;
    :class:`BatchRefused` naming the numbers. (The blocked sampler's shared moves are checked here too.)"""
    assert req.theta is not None
    penalty = req.penalty
    if cap is not None:
        c = (
            penalty.sensitivity(model, req.theta, req.theta_star)
            if penalty is not None
            else record_sensitivity(model, req.theta, req.theta_star)
        )
        over = ~within_cap(c, cap)
        if over.any():
            raise BatchRefused(
                f"{name}: {int(over.sum())} proposals have per-record sensitivity above the session's "
                f"max_sensitivity = {cap:g} (largest {float(c.max()):.6g}); this party charges every step at "
                "that cap, so the coordinator must reject such proposals itself"
            )
    if penalty is not None and sigma is not None:
        mine = penalty.sigma(model, req.theta, req.theta_star)
        theirs = np.asarray(sigma, dtype=np.float64)
        if theirs.shape != (req.n,) or not np.allclose(theirs, mine, rtol=1e-9, atol=0.0):
            raise BatchRefused(f"{name}: the coordinator's penalty sigma differs from this party's")


MH = MhKind()
