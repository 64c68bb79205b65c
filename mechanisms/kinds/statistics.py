"""The differentially private warm start's release (kind ``"statistics"``): not an accept-reject decision.
Each registry's terms are its noisy per-record sums (``mechanisms.warmstart``: its own Gaussian noise, from
its CSPRNG), revealed as their total in reveal mode ``sum`` (:data:`RELEASE_MODE`). Its one key,
``statistics``, is the release (:class:`mechanisms.warmstart.Statistics`: ``what``, ``sd``, ``sd2``,
``scale``, ``clip``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mechanisms import noise, warmstart
from mechanisms.privacy import charge
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.samplers.terms import Terms
from mechanisms.warmstart import Statistics

from .base import BatchRefused, ChargeAsk, DecisionKind, PartyBatch, PlanView, part

#: the reveal mode a release (kind "statistics" or "effects") runs in: its noisy total is what it opens
RELEASE_MODE = "sum"


class StatisticsKind(DecisionKind):
    """A warm-start release; settings: the :class:`Statistics` released."""

    name = "statistics"
    keys = ("statistics",)

    def read(self, params: Mapping[str, Any]) -> Statistics | None:
        return part(params, "statistics", Statistics.from_params)  # type: ignore[no-any-return]

    def write(self, settings: Statistics) -> dict[str, Any]:
        return {"statistics": settings.to_params()}

    def check(self, plan: PlanView) -> None:
        if not isinstance(plan.settings, Statistics):
            raise ValueError("kind 'statistics' and the statistics release go together")
        if plan.penalty is not None or plan.lazy is not None:
            raise ValueError("a statistics release takes no penalty or lazy acceptance")

    def events(self, plan: PlanView, ask: ChargeAsk) -> list[PrivacyEvent]:
        model, view, name, neighbours = ask.model, ask.view, ask.name, ask.neighbours
        # its Gaussian noise is the mechanism: charged the same whatever the plan's (Gamma) noise
        return charge.release_events(plan.settings, model, view, name, neighbours)

    def terms(self, plan: PlanView, batch: PartyBatch) -> Terms:
        """This registry's sums of the per-record vectors plus its own Gaussian noise, scaled; revealed only
        as the total (reveal mode ``sum``)."""
        model, mode, n, name = batch.model, batch.mode, batch.n, batch.name
        stats: Statistics = plan.settings
        if mode != RELEASE_MODE:
            raise BatchRefused(
                f"{name}: a statistics release runs in reveal mode {RELEASE_MODE!r}, not {mode!r}"
            )
        want = warmstart.dimension(stats.what, model)
        if n != want:
            raise BatchRefused(f"{name}: a {stats.what} release has {want} values, got a batch of {n}")
        theta = None
        if stats.what != "moments":  # score and gradient releases are evaluated at a public theta
            raw = np.asarray(batch.inputs.get("theta", np.zeros(0)), dtype=np.float64).reshape(-1)
            if raw.shape != (model.d,) or not np.isfinite(raw).all():
                need = f"input 'theta' ({model.d} finite numbers)"
                raise BatchRefused(f"{name}: a score release needs {need}")
            theta = raw
            if not model.in_bounds(theta[None, :]).all():
                raise BatchRefused(f"{name}: the release's theta lies outside the parameter bounds")
        if stats.basis is not None and (stats.what == "moments" or len(stats.basis) != model.d):
            raise BatchRefused(f"{name}: a release's basis must be {model.d} x {model.d} (a score's)")
        try:  # the clip at theta when the release has model_bound (the model's public bound there)
            stats = stats.at(model, theta)
        except ValueError as exc:
            raise BatchRefused(f"{name}: {exc}") from exc
        total = warmstart.record_vectors(stats, model, batch.cols, theta)
        k = warmstart.block_size(stats.what, model)
        rng = batch.rng
        values = warmstart.noisy_release(stats, total, k, lambda j: noise.normal(rng, 1.0, j))
        return Terms(values, None, public=np.zeros(n))


STATISTICS = StatisticsKind()
