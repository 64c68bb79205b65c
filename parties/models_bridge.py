"""Model plug-ins (``mechanisms.models``) as analyses of the party daemon: a thin adapter.

Analyses: every built-in model (``mechanisms.models.base.BUILTIN``: ``beta-bernoulli``, ``gaussian-mean``,
``bayes-logistic``, ...) and any ``"package.module:ClassName"`` naming a :class:`mechanisms.models.Model`
subclass — the name must be in the party's ``allow.models`` (the daemon checks the allowlist before it
resolves the name, so a coordinator cannot make a party import anything it did not allow).

The session's ``model_params`` are a :class:`mechanisms.kinds.DecisionPlan` (its docstring lists the
keys), parsed once per session by :meth:`ModelAnalysis.of` into its ``plan``. What varies with the plan's
kind is the kind's (``mechanisms.kinds``): what a batch is charged (``DecisionPlan.events``) and the terms,
after the checks a registry makes on the coordinator's batch (sensitivity cap, bounds, the penalty's σ;
``DecisionKind.terms``, with :func:`mechanisms.samplers.terms.party_terms`, the same function the in-memory
simulations use). With rejection sampling the party's term is ℓ_j(θ*) − log M_j with its own bound log M_j
(computed once a session and never sent anywhere). Only what a registry keeps of its own across steps is
here: a blocked run's local effect and its release (``plan.keeps_local``). With the penalty's per-record
clipping (``c = "clip"``) the number of clipped record
log-ratios goes with the terms (``Terms.clipped_records``) to the batch's audit line. Records are checked
against the model's schema (missing columns, NaN/inf, values outside the declared public bounds -> refused,
naming the column and rows) when the session first uses them, and at daemon start-up when the config names
the model under ``[data] model`` (``parties.sources``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hss.modes import REVEAL
from hss.randomness import SecureRandom
from mechanisms.kinds import RELEASE_MODE, BatchRefused, ChargeAsk, DecisionPlan, PartyBatch, mh
from mechanisms.models.base import Model, SchemaError, load_model
from mechanisms.privacy import charge
from mechanisms.samplers.blocked import TERM_FLOOR
from mechanisms.samplers.local import EffectsRelease, LocalState, RegistryBlock
from mechanisms.samplers.requests import DecisionRequest
from mechanisms.samplers.terms import Terms, party_noise
from parties.analyses import AnalysisError, Dataset, Unaccountable
from parties.effects import EffectsFileError
from parties.local_blocks import LocalContext
from parties.replay import LocalStep, ReplayFileError

if TYPE_CHECKING:
    from hss.lazy_coin import LazyCoin
    from mechanisms.privacy import PrivacyEvent, RevealView

F64 = npt.NDArray[np.float64]


class DataSchemaError(AnalysisError):
    """A party's records do not match the model's schema (names the columns and the rows)."""


@dataclass
class ModelAnalysis:
    """A model plug-in as an :class:`parties.analyses.Analysis` (one instance per session)."""

    name: str
    model_ref: str
    plan: DecisionPlan  # the session's, parsed once (:meth:`of`)
    _model: Model | None = field(default=None, repr=False)
    _checked: dict[int, dict[str, F64]] = field(default_factory=dict, repr=False)
    _moved: int | None = field(default=None, repr=False)  # records clipped at the check, not yet audited
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)  # the kind's per-session values
    # a blocked run (parties.local_blocks): this registry's own effect, kept across the session's steps
    _ctx: LocalContext | None = field(default=None, repr=False)
    _block: RegistryBlock | None = field(default=None, repr=False)
    _local: LocalState | None = field(default=None, repr=False)
    _request: dict[str, Any] | None = field(default=None, repr=False)  # the last sweep's request (public)
    _pending: tuple[LocalStep | None, tuple[int, F64] | None] = field(default=(None, None), repr=False)

    @classmethod
    def of(cls, name: str, model_ref: str, params: dict[str, Any]) -> ModelAnalysis:
        """The analysis of one session: its ``model_params`` parsed into the :class:`DecisionPlan` (the one
        time they are read) and its model built; AnalysisError naming the key or the model's argument."""
        try:
            plan = DecisionPlan.from_params(params)
        except ValueError as exc:
            raise AnalysisError(f"{name}: {exc}") from exc
        analysis = cls(name, model_ref, plan)
        try:
            plan.decision_kind.check_model(plan, analysis.model())
        except ValueError as exc:
            raise AnalysisError(f"{name}: {exc}") from exc
        return analysis

    def model(self) -> Model:
        if self._model is None:
            try:
                self._model = load_model(self.model_ref, dict(self.plan.model_args))
            except ValueError as exc:
                raise AnalysisError(f"{self.name}: {exc}") from exc
        return self._model

    def lazy_coin(self) -> LazyCoin | None:
        """The session's secret lazy coin (the same at every party), or None."""
        lazy = self.plan.lazy
        return None if lazy is None else lazy.coin()

    def public_numbers(self) -> dict[str, float]:
        return self.plan.numbers()

    def privacy_events(
        self,
        mode: str,
        view: RevealView,
        n: int,
        batch: dict[str, npt.NDArray[Any]] | None = None,
        neighbours: str = "replace-one",
        rdp_orders: tuple[float, ...] | None = None,
    ) -> list[PrivacyEvent]:
        """Per-decision privacy of this analysis, from public values only (the plan, and the batch's public
        proposals when a decision is charged at its own sensitivity; ``rdp_orders``: a Rényi budget's order):
        :meth:`mechanisms.kinds.DecisionPlan.events` (its kind's case of ``mechanisms.privacy.charge``)."""
        plan, model = self.plan, self.model()
        try:  # the proposals the kind prices one by one, or None (charged at its cap)
            request = plan.decision_kind.charge_request(plan, model, batch, n)
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc
        try:
            return plan.events(ChargeAsk(model, mode, view, n, self.name, request, neighbours, rdp_orders))
        except charge.Unaccountable as exc:
            raise Unaccountable(str(exc)) from exc

    def worst_record_events(
        self,
        mode: str,
        view: RevealView,
        n: int,
        batch: dict[str, npt.NDArray[Any]],
        neighbours: str,
        rdp_orders: tuple[float, ...] | None,
        state_of: Callable[[str], Any],
    ) -> tuple[list[PrivacyEvent], str, dict[str, Any]] | None:
        """The batch charged per run at its worst record (``mechanisms.privacy.worst_record``), given the
        run's stored state under the charge's fingerprint (``state_of(fingerprint)``, None for the run's first
        batch): (events, fingerprint, the state after the batch), or None when the per-run charge does not
        apply to the session (the per-decision charge is kept)."""
        from mechanisms.privacy.worst_record import RunState

        plan, model = self.plan, self.model()
        wr = plan.worst_record_charge(model, view, neighbours, rdp_orders)
        if wr is None or plan.penalty is None:
            return None
        request = self.request(model, plan, batch, n)
        stored = state_of(wr.fingerprint)
        try:
            before = None if stored is None else RunState.from_dict(stored, wr.layers, wr.d)
        except ValueError as exc:
            why = f"the run's stored worst-record state ({wr.fingerprint}) is unusable: {exc}"
            raise Unaccountable(why) from exc
        events, after = charge.worst_record_events(
            wr, plan.penalty, model, mode, request, self.name, before, neighbours
        )
        return events, wr.fingerprint, after.to_dict()

    def records(self, model: Model, data: Dataset) -> dict[str, F64]:
        key = id(data)
        if key not in self._checked:
            try:
                cols, moved = model.check_records(data.columns, where="this party's data")
                self._checked, self._moved = {key: cols}, moved
            except SchemaError as exc:
                raise DataSchemaError(str(exc)) from exc
        return self._checked[key]

    def request(
        self, model: Model, plan: DecisionPlan, inputs: dict[str, npt.NDArray[Any]], n: int
    ) -> DecisionRequest:
        """The coordinator's :class:`DecisionRequest` back from the wire arrays (its ``to_inputs``), with the
        session's kind and penalty."""
        try:
            return plan.decision_kind.request(plan, model, inputs, n)
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc

    def terms(
        self,
        data: Dataset,
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        """This party's terms of one batch, after the checks a party makes on the coordinator's batch; the
        clipped-record count (penalty c = "clip") goes with them, for the batch's audit line."""
        plan, model = self.plan, self.model()
        cols = self.records(model, data)
        if plan.effects is not None:
            out = self.effects_terms(model, cols, plan, plan.effects, inputs, n, mode)
        elif plan.blocked is not None:
            out = self.blocked_terms(model, cols, plan, inputs, n, m, mode, rng)
        else:  # the kind's own terms, from the records this registry passes in
            batch = PartyBatch(self.name, model, cols, inputs, n, m, mode, rng, self._memo)
            try:
                out = plan.decision_kind.terms(plan, batch)
            except BatchRefused as exc:
                raise AnalysisError(str(exc)) from exc
        moved, self._moved = self._moved, None  # audited once, on the batch that checked the records
        return out if moved is None else dataclasses.replace(out, clipped_covariates=moved)

    # ---- a blocked run: this registry's own effect (parties.local_blocks) ---------------------------------

    def keeps_local(self) -> bool:
        return self.plan.keeps_local

    def bind_local(self, ctx: LocalContext) -> None:
        self._ctx = ctx

    def local_step(self) -> tuple[LocalStep | None, tuple[int, F64] | None]:
        out, self._pending = self._pending, (None, None)
        return out

    def local_replayed(self, held: LocalStep | None) -> None:
        if held is not None:
            self._local, self._request = LocalState.from_json(held.after), held.request

    def registry_block(self, model: Model, cols: dict[str, F64], plan: DecisionPlan) -> RegistryBlock:
        """This registry's side of the blocked sampler (built once per session): its records must all carry
        its own level, the k-th declared one for party k."""
        if self._block is None:
            if self._ctx is None:
                raise AnalysisError(f"{self.name}: a blocked step outside the daemon's decision path")
            settings = plan.blocked
            if settings is None:  # an effects release: the local settings do not matter
                from mechanisms.samplers.local import LocalSettings

                settings = LocalSettings()
            try:
                self._block = RegistryBlock(model, cols, settings, level=self._ctx.me - 1)
            except (ValueError, IndexError) as exc:
                raise AnalysisError(f"{self.name}: {exc}") from exc
        return self._block

    def _start_of(self, sweep: int) -> tuple[LocalState | None, dict[str, Any] | None]:
        """This registry's effect at the start of ``sweep`` and the request of the sweep before: the
        session's own (it made the previous sweep), or the held run step's ``after`` (the next sweep) or
        ``before`` (the held sweep evaluated afresh), or none at sweep 0; AnalysisError otherwise."""
        if self._local is not None and self._local.t == sweep:
            return self._local, self._request
        held = self._ctx.held if self._ctx is not None else None
        if held is not None:
            after, before = LocalState.from_json(held.after), LocalState.from_json(held.before)
            if after.t == sweep:
                return after, held.request
            if before.t == sweep:
                return before, held.previous
        if sweep == 0 and self._local is None and held is None:
            return None, None
        at = self._local.t if self._local is not None else (LocalState.from_json(held.after).t if held else 0)
        raise AnalysisError(
            f"{self.name}: this registry's own effect is at sweep {at}, the batch asks sweep {sweep} (a "
            "blocked run continues from the sweep after its last completed step, or evaluates that step "
            "again)"
        )

    @staticmethod
    def _check_follows(states: F64, previous: dict[str, Any] | None) -> None:
        """Each chain's state at this sweep is its state or its proposal of the previous sweep."""
        if previous is None:
            return
        old = np.asarray(previous["states"], dtype=np.float64)
        if old.shape != states.shape:
            raise AnalysisError(
                f"the chains' states have shape {states.shape}, the previous sweep's {old.shape}"
            )
        ok = np.all(states == old, axis=1)
        chain = np.asarray(previous["chain"], dtype=np.int64)
        star = np.asarray(previous["theta_star"], dtype=np.float64).reshape(chain.size, -1)
        ok[chain] |= np.all(states[chain] == star, axis=1)
        if not ok.all():
            bad = np.flatnonzero(~ok)[:10].tolist()
            raise AnalysisError(
                f"chains {bad}: the state is neither the chain's state nor its proposal of the previous sweep"
            )

    def blocked_terms(
        self,
        model: Model,
        cols: dict[str, F64],
        plan: DecisionPlan,
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        """A sweep of a blocked run (``mechanisms.samplers.blocked``): this registry's local updates of its
        own effect for every chain (randomness: a key drawn first from the step's noise stream, so a step
        evaluated again draws the same), then its terms of the shared decisions at its updated effect plus
        its Gamma(1/m, 1) shares (and W_j for the blinded reveal). Nothing of the effect leaves here."""
        block = self.registry_block(model, cols, plan)
        try:
            req = DecisionRequest.from_inputs(inputs, "mh", n, block.shared.d, plan.penalty, blocked=True)
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc
        assert req.states is not None and req.sweep is not None and req.chain is not None
        assert req.theta is not None
        sm = block.shared
        if not (sm.in_bounds(req.theta_star).all() and sm.in_bounds(req.states).all()):
            raise AnalysisError(f"{self.name}: proposals outside the parameter bounds must not be sent")
        if plan.penalty is not None:  # the shared moves' cap and sigma, at the held-coordinate bound
            try:
                mh.check_batch(self.name, sm, req, plan.step_cap, inputs.get("sigma"))
            except BatchRefused as exc:
                raise AnalysisError(str(exc)) from exc
        state, previous = self._start_of(req.sweep)
        self._check_follows(req.states, previous)
        local_rng = SecureRandom(rng.key())
        chains = req.states.shape[0]
        if state is None:
            state = block.initial(chains, local_rng)
        if state.chains != chains:
            raise AnalysisError(
                f"{self.name}: this registry keeps {state.chains} chains, the batch has {chains}"
            )
        try:
            drawn = (req.sweep - 1, block.z_of(req.states, state)) if req.sweep > 0 else None
            after, current = block.sweep(state, req.states, local_rng)
            ell = block.shared_terms(after, current, req.chain, req.theta, req.theta_star)
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc
        ell = np.maximum(ell, TERM_FLOOR)
        blinded = mode in REVEAL and REVEAL[mode].blinding
        sigma = None if plan.penalty is None else plan.penalty.sigma_of(np.zeros(n))  # a fixed sd
        nz, blind = party_noise(rng, m, n, sigma, blinded, plan.exp_noise)
        request = {
            "states": req.states.tolist(),
            "chain": req.chain.tolist(),
            "theta_star": req.theta_star.tolist(),
        }
        self._local, self._request = after, request
        step = LocalStep(req.sweep, state.to_json(), after.to_json(), request, previous)
        self._pending = (step, drawn)
        return Terms(ell + nz, blind, public=req.public)

    def effects_terms(
        self,
        model: Model,
        cols: dict[str, F64],
        plan: DecisionPlan,
        release: EffectsRelease,
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        mode: str,
    ) -> Terms:
        """The release of this registry's effect draws of a blocked run (``plan.effects``): its own slot of
        the batch (the k-th level's), zeros elsewhere, revealed as the total (reveal mode ``sum``). Only with
        ``[allow] release_effects``; once per run with one set of final chain states (``parties.effects``)."""
        ctx = self._ctx
        if ctx is None:
            raise AnalysisError(f"{self.name}: an effects release outside the daemon's decision path")
        if not ctx.release_effects:
            raise AnalysisError(
                f"{self.name}: this registry does not release its random effect's draws ([allow] "
                "release_effects = false, the default): they stay here"
            )
        if mode != RELEASE_MODE:
            raise AnalysisError(
                f"{self.name}: an effects release runs in reveal mode {RELEASE_MODE!r}, not {mode!r}"
            )
        block = self.registry_block(model, cols, plan)
        levels, chains = block.hierarchy.m, release.chains
        if n != release.size(levels):
            raise AnalysisError(
                f"{self.name}: the release holds {release.size(levels)} values, got a batch of {n}"
            )
        try:
            held = ctx.replays.load(release.run)
            kept = ctx.effects.draws(release.run)
            before = ctx.effects.released(release.run)
        except (ReplayFileError, EffectsFileError) as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc
        if held is None or held.local is None:
            raise AnalysisError(f"{self.name}: this registry holds no blocked run {release.run!r}")
        after = LocalState.from_json(held.local.after)
        if ctx.charged_steps is not None and ctx.charged_steps(release.run) < after.t:
            raise AnalysisError(
                f"{self.name}: this registry has a privacy budget and its ledger charged sweeps 0.."
                f"{ctx.charged_steps(release.run) - 1} of run {release.run!r}, not all its {after.t} sweeps: "
                "effect draws of a run it did not charge (made before the budget, or without noisy local "
                "steps) have no privacy bound, so they stay here"
            )
        raw = np.asarray(inputs.get("states", np.zeros(0)), dtype=np.float64)
        if raw.shape != (chains, block.shared.d) or not np.isfinite(raw).all():
            raise AnalysisError(
                f"{self.name}: input 'states' must be the ({chains}, {block.shared.d}) final chain states"
            )
        self._check_follows(raw, held.local.request)
        if before is not None and not np.array_equal(before, raw):
            raise AnalysisError(
                f"{self.name}: the effects of run {release.run!r} were released with other final chain "
                "states; a release is answered once per run (the same final states give the same values "
                "again)"
            )
        last = after.t - 1  # the held sweep: its draw needs the final states
        want = range(release.first, release.first + release.sweeps)
        if want.stop - 1 > last or after.chains != chains:
            raise AnalysisError(
                f"{self.name}: run {release.run!r} holds sweeps 0..{last} of {after.chains} chains here, the "
                f"release asks {want.start}..{want.stop - 1} of {chains}"
            )
        missing = [t for t in want if t < last and t not in kept]
        if missing:
            raise AnalysisError(f"{self.name}: no kept draws of sweeps {missing[:5]} of run {release.run!r}")
        assert block.level is not None
        z = np.empty((chains, release.sweeps))
        for i, t in enumerate(want):
            z[:, i] = block.z_of(raw, after) if t == last else kept[t]
        values = np.zeros((levels, chains, release.sweeps))
        values[block.level] = z
        if before is None:
            ctx.effects.mark_released(release.run, raw)
        return Terms(values.reshape(-1), None, public=np.zeros(n))
