"""Model plug-ins (``mechanisms.models``) as analyses of the party daemon: a thin adapter.

Analyses: every built-in model (``mechanisms.models.base.BUILTIN``: ``beta-bernoulli``, ``gaussian-mean``,
``bayes-logistic``, ...) and any ``"package.module:ClassName"`` naming a :class:`mechanisms.models.Model`
subclass — the name must be in the party's ``allow.models`` (the daemon checks the allowlist before it
resolves the name, so a coordinator cannot make a party import anything it did not allow).

The session's ``model_params`` are a :class:`mechanisms.samplers.plan.DecisionPlan` (its docstring lists the
keys), parsed once per session by :meth:`ModelAnalysis.plan`. What a batch is charged is
:func:`mechanisms.privacy.charge.decision_events` of the plan; the terms are
:func:`mechanisms.samplers.terms.party_terms` (the same function the in-memory simulations use) after the
checks a registry makes on the coordinator's batch (sensitivity cap, bounds, the penalty's σ). With
rejection sampling the party's term is ℓ_j(θ*) − log M_j with its own bound log M_j (computed here and never
sent anywhere); with the penalty's per-record clipping (``c = "clip"``) the number of clipped record
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

from hss.randomness import SecureRandom
from mechanisms import noise, warmstart
from mechanisms.models.base import Model, SchemaError, load_model
from mechanisms.samplers.plan import DecisionPlan
from mechanisms.samplers.requests import DecisionRequest, record_sensitivity, within_cap
from mechanisms.samplers.terms import Terms, party_terms
from mechanisms.warmstart import Statistics
from parties.analyses import AnalysisError, Dataset, Unaccountable

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
    _plan: tuple[dict[str, Any], DecisionPlan] | None = field(default=None, repr=False)
    _model: Model | None = field(default=None, repr=False)
    _checked: dict[int, dict[str, F64]] = field(default_factory=dict, repr=False)
    _moved: int | None = field(default=None, repr=False)  # records clipped at the check, not yet audited
    _log_bound: float | None = field(default=None, repr=False)

    def plan(self, params: dict[str, Any]) -> DecisionPlan:
        """The session's :class:`DecisionPlan` (parsed once per session); AnalysisError naming the key."""
        if self._plan is None or self._plan[0] is not params:
            try:
                self._plan = (params, DecisionPlan.from_params(params))
            except ValueError as exc:
                raise AnalysisError(f"{self.name}: {exc}") from exc
        return self._plan[1]

    def model(self, params: dict[str, Any]) -> Model:
        if self._model is None:
            args = self.plan(params).model_args
            try:
                self._model = load_model(self.model_ref, dict(args))
            except ValueError as exc:
                raise AnalysisError(f"{self.name}: {exc}") from exc
        return self._model

    def check_params(self, params: dict[str, Any]) -> None:
        self.plan(params)
        self.model(params)

    def lazy_coin(self, params: dict[str, Any]) -> LazyCoin | None:
        """The session's secret lazy coin (the same at every party), or None."""
        lazy = self.plan(params).lazy
        return None if lazy is None else lazy.coin()

    def public_numbers(self, params: dict[str, Any]) -> dict[str, float]:
        return self.plan(params).numbers()

    def rejection_bound(self, model: Model, cols: dict[str, F64], plan: DecisionPlan) -> float:
        """This party's log M_j (computed once, never sent anywhere): ``bound = "data"`` the maximum of its
        log-likelihood (over A = {range(θ) <= max_sensitivity} when capped, so that it moves by at most the
        cap when one record changes), ``"public"`` the model's bound for any dataset of its size; plus the
        margin."""
        if self._log_bound is None:
            cap = plan.max_sensitivity
            n_j = model.n_records(cols)
            value: float | None
            if plan.bound == "public":
                value = model.public_log_bound(n_j)
                what = "public_log_bound"
            elif cap is not None:
                value = model.max_log_likelihood_within(cols, float(cap))
                what = "max_log_likelihood_within"
            else:
                value, what = model.max_log_likelihood(cols), "max_log_likelihood"
            if value is None or not np.isfinite(value):
                raise AnalysisError(f"{self.name}: model {model.name!r} has no {what} (rejection bound)")
            self._log_bound = value + plan.log_bound_margin
        return self._log_bound

    def check_rejection_batch(self, model: Model, theta_star: F64, public: F64, plan: DecisionPlan) -> None:
        """Refuse proposals the accounting does not cover: a public term above 0 (a <= -m margin relies on it)
        or, with a cap, a proposal outside A (the coordinator must reject those itself)."""
        if (public > 1e-9).any():
            raise AnalysisError(
                f"{self.name}: rejection decisions need public terms <= 0 (log pi - log q - log M_q); got "
                f"up to {float(public.max()):.6g}"
            )
        cap = plan.max_sensitivity
        if cap is None:
            return
        rng_ = model.record_loglik_range(theta_star)
        if rng_ is None:
            raise AnalysisError(f"{self.name}: model {model.name!r} has no record_loglik_range for the cap")
        over = ~within_cap(np.asarray(rng_), float(cap))
        if over.any():
            raise AnalysisError(
                f"{self.name}: {int(over.sum())} proposals lie outside the session's max_sensitivity = "
                f"{float(cap):g} (largest per-record log-likelihood range {float(np.max(rng_)):.6g}); the "
                "coordinator must reject those itself"
            )

    def privacy_events(
        self,
        params: dict[str, Any],
        mode: str,
        view: RevealView,
        n: int,
        batch: dict[str, npt.NDArray[Any]] | None = None,
        neighbours: str = "replace-one",
        rdp_orders: tuple[float, ...] | None = None,
    ) -> list[PrivacyEvent]:
        """Per-decision privacy of this analysis, from public values only (the plan, and the batch's public
        proposals when a decision is charged at its own sensitivity; ``rdp_orders``: a Rényi budget's order):
        :func:`mechanisms.privacy.charge.decision_events` (its docstring has the table of cases)."""
        from mechanisms.privacy import charge

        plan, model = self.plan(params), self.model(params)
        per_decision = plan.penalty is not None and plan.penalty.fixed
        request = self.request(model, plan, batch, n) if per_decision and batch is not None else None
        try:
            return charge.decision_events(
                plan, model, mode, view, n, self.name, request, neighbours, rdp_orders
            )
        except charge.Unaccountable as exc:
            raise Unaccountable(str(exc)) from exc

    def worst_record_events(
        self,
        params: dict[str, Any],
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
        from mechanisms.privacy import charge
        from mechanisms.privacy.worst_record import RunState

        plan, model = self.plan(params), self.model(params)
        wr = charge.worst_record_charge(plan, model, view, neighbours, rdp_orders)
        if wr is None:
            return None
        request = self.request(model, plan, batch, n)
        stored = state_of(wr.fingerprint)
        try:
            before = None if stored is None else RunState.from_dict(stored, wr.layers, wr.d)
        except ValueError as exc:
            why = f"the run's stored worst-record state ({wr.fingerprint}) is unusable: {exc}"
            raise Unaccountable(why) from exc
        events, after = charge.worst_record_events(
            wr, plan, model, mode, request, self.name, before, neighbours
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
            return DecisionRequest.from_inputs(inputs, plan.kind, n, model.d, plan.penalty)
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc

    def check_mh_batch(
        self, model: Model, req: DecisionRequest, plan: DecisionPlan, sigma: npt.ArrayLike | None
    ) -> None:
        """Refuse MH proposals the accounting does not cover (a sensitivity above the session's cap) and a
        coordinator's penalty ``sigma`` (optional input) that differs from this party's own."""
        assert req.theta is not None
        penalty, cap = req.penalty, plan.step_cap
        if cap is not None:
            c = (
                penalty.sensitivity(model, req.theta, req.theta_star)
                if penalty is not None
                else record_sensitivity(model, req.theta, req.theta_star)
            )
            over = ~within_cap(c, cap)
            if over.any():
                raise AnalysisError(
                    f"{self.name}: {int(over.sum())} proposals have per-record sensitivity above the "
                    f"session's max_sensitivity = {cap:g} "
                    f"(largest {float(c.max()):.6g}); "
                    "this party charges every step at that cap, so the coordinator must reject such "
                    "proposals itself"
                )
        if penalty is not None and sigma is not None:
            mine = penalty.sigma(model, req.theta, req.theta_star)
            theirs = np.asarray(sigma, dtype=np.float64)
            if theirs.shape != (req.n,) or not np.allclose(theirs, mine, rtol=1e-9, atol=0.0):
                raise AnalysisError(f"{self.name}: the coordinator's penalty sigma differs from this party's")

    def terms(
        self,
        data: Dataset,
        params: dict[str, Any],
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        """This party's terms of one batch, after the checks a party makes on the coordinator's batch; the
        clipped-record count (penalty c = "clip") goes with them, for the batch's audit line."""
        plan, model = self.plan(params), self.model(params)
        cols = self.records(model, data)
        if plan.statistics is not None:
            out = self.release_terms(model, cols, plan.statistics, inputs, n, mode, rng)
        else:
            out = self.decision_terms(model, cols, plan, inputs, n, m, mode, rng)
        moved, self._moved = self._moved, None  # audited once, on the batch that checked the records
        return out if moved is None else dataclasses.replace(out, clipped_covariates=moved)

    def release_terms(
        self,
        model: Model,
        cols: dict[str, F64],
        stats: Statistics,
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        """A warm-start release (:mod:`mechanisms.warmstart`): this registry's sums of the per-record vectors
        plus its own Gaussian noise (CSPRNG), scaled; revealed only as the total (reveal mode ``sum``)."""
        if mode != "sum":
            raise AnalysisError(f"{self.name}: a statistics release runs in reveal mode 'sum', not {mode!r}")
        want = warmstart.dimension(stats.what, model)
        if n != want:
            raise AnalysisError(f"{self.name}: a {stats.what} release has {want} values, got a batch of {n}")
        theta = None
        if stats.what != "moments":  # score and gradient releases are evaluated at a public theta
            raw = np.asarray(inputs.get("theta", np.zeros(0)), dtype=np.float64).reshape(-1)
            if raw.shape != (model.d,) or not np.isfinite(raw).all():
                need = f"input 'theta' ({model.d} finite numbers)"
                raise AnalysisError(f"{self.name}: a score release needs {need}")
            theta = raw
            if not model.in_bounds(theta[None, :]).all():
                raise AnalysisError(f"{self.name}: the release's theta lies outside the parameter bounds")
        if stats.basis is not None and (stats.what == "moments" or len(stats.basis) != model.d):
            raise AnalysisError(f"{self.name}: a release's basis must be {model.d} x {model.d} (a score's)")
        try:  # the clip at theta when the release has model_bound (the model's public bound there)
            stats = stats.at(model, theta)
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc
        total = warmstart.record_vectors(stats, model, cols, theta)
        k = warmstart.block_size(stats.what, model)
        values = warmstart.noisy_release(stats, total, k, lambda j: noise.normal(rng, 1.0, j))
        return Terms(values, None, public=np.zeros(n))

    def decision_terms(
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
        """This party's terms of a batch of accept-reject decisions, after the checks it makes on it."""
        req = self.request(model, plan, inputs, n)
        log_bound = None
        if req.kind == "rejection":
            log_bound = self.rejection_bound(model, cols, plan)
            self.check_rejection_batch(model, req.theta_star, req.public, plan)
        else:
            self.check_mh_batch(model, req, plan, inputs.get("sigma"))
        if not model.in_bounds(req.theta_star).all() or (
            req.theta is not None and not model.in_bounds(req.theta).all()
        ):
            raise AnalysisError(f"{self.name}: proposals outside the parameter bounds must not be sent")
        return party_terms(model, cols, req, m, rng, mode, log_bound=log_bound, exp_noise=plan.exp_noise)
