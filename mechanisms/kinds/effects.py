"""The end of a blocked run (kind ``"effects"``): each registry that allows it releases its registry effect's
draws as one sum-revealed batch. Its one key, ``effects``, is the release
(:class:`mechanisms.samplers.local.EffectsRelease`). The draws are the registry's own state, kept across
the run's sessions, so its terms are made in ``parties`` (:meth:`EffectsKind.keeps_local`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mechanisms.models.base import Model
from mechanisms.privacy import charge
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.samplers.local import EffectsRelease
from mechanisms.samplers.terms import Terms

from .base import ChargeAsk, DecisionKind, PartyBatch, PlanView, part, require_random_intercept


class EffectsKind(DecisionKind):
    """A blocked run's effects release; settings: the :class:`EffectsRelease`."""

    name = "effects"
    keys = ("effects",)

    def read(self, params: Mapping[str, Any]) -> EffectsRelease | None:
        return part(params, "effects", EffectsRelease.from_params)  # type: ignore[no-any-return]

    def write(self, settings: EffectsRelease) -> dict[str, Any]:
        return {"effects": settings.to_params()}

    def check(self, plan: PlanView) -> None:
        if not isinstance(plan.settings, EffectsRelease):
            raise ValueError("kind 'effects' and the effects release go together")
        if plan.penalty is not None or plan.lazy is not None:
            raise ValueError("an effects release takes no penalty or lazy acceptance")

    def keeps_local(self, plan: PlanView) -> bool:
        return True

    def check_model(self, plan: PlanView, model: Model) -> None:
        require_random_intercept(model)

    def events(self, plan: PlanView, ask: ChargeAsk) -> list[PrivacyEvent]:
        return charge.effects_events(plan.settings, ask.name)

    def terms(self, plan: PlanView, batch: PartyBatch) -> Terms:
        raise NotImplementedError("an effects release's terms are the registry's own (parties.models_bridge)")


EFFECTS = EffectsKind()
