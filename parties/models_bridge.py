"""Model plug-ins (``mechanisms.models``) as analyses of the party daemon.

Analyses: every built-in model (``mechanisms.models.base.BUILTIN``: ``beta-bernoulli``, ``gaussian-mean``,
``bayes-logistic``, ...) and any ``"package.module:ClassName"`` naming a :class:`mechanisms.models.Model`
subclass — the name must be in the party's ``allow.models`` (the daemon checks the allowlist before it
resolves the name, so a coordinator cannot make a party import anything it did not allow).

Session ``model_params`` (public, JSON):

* ``model_args``: the model's public arguments (e.g. ``{"p": 4, "x_bound": 3.0}``);
* ``kind``: ``"mh"`` (default; inputs ``theta``, ``theta_star`` of shape (n, d), ``public`` (n,)) or
  ``"rejection"`` (inputs ``theta_star``, ``public``; the party's term is ℓ_j(θ*) − log M_j with its own bound
  log M_j = sup_θ log p(X_j | θ) + ``log_bound_margin``, computed here and never sent anywhere);
* ``penalty``: optional ``{"tau", "alpha", "n", "c": "bound" | "clip", "b"}`` (Yıldırım–Ermiş; the party
  computes σ(θ, θ*) itself from these, so the coordinator cannot lower its noise; an input ``sigma`` sent by
  the coordinator, if any, must agree);
* ``noise``: ``"exp"`` (default: V_j ~ Gamma(1/m, 1), the confidential identity) or ``"none"`` (tests).

The inputs are read back into the coordinator's request with ``DecisionRequest.from_inputs`` (the inverse of
its ``to_inputs``), and the terms are computed by :func:`mechanisms.samplers.terms.party_terms`, the same
function the in-memory simulations use; with the penalty's per-record clipping (``c = "clip"``) the number of
clipped record log-ratios goes with the terms (``Terms.clipped_records``) to the batch's audit line. Records
are checked against the model's schema (missing columns, NaN/inf, values outside the declared public bounds
-> refused, naming the column and rows) when the session first uses them, and at daemon start-up when the
config names the model under ``[data] model`` (``parties.sources``, which reads the records from a file, a
database or a SPARQL endpoint).

``gaussian-mean`` (:class:`GaussianMeanAnalysis`) also takes the flat parameters of earlier versions
(``sigma``, ``column``, ``clip``, ``tau``, ``noise``), translated to the common form.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hss.modes import reveal_mode
from hss.randomness import SecureRandom
from mechanisms.models.base import Model, SchemaError, load_model
from mechanisms.samplers.penalty import penalty_correction
from mechanisms.samplers.requests import KINDS, DecisionRequest, Lazy, Penalty, record_sensitivity, within_cap
from mechanisms.samplers.terms import party_terms
from parties.analyses import (
    AnalysisError,
    Dataset,
    Terms,
    Unaccountable,
    lazy_coin,
)

if TYPE_CHECKING:
    from mechanisms.privacy import RevealView

F64 = npt.NDArray[np.float64]
PARAMS = {"model_args", "kind", "penalty", "noise", "log_bound_margin", "lazy", "bound", "max_sensitivity"}
BOUNDS = ("data", "public")


class DataSchemaError(AnalysisError):
    """A party's records do not match the model's schema (names the columns and the rows)."""


@dataclass
class ModelAnalysis:
    """A model plug-in as an :class:`parties.analyses.Analysis` (one instance per session)."""

    name: str
    model_ref: str
    _model: Model | None = field(default=None, repr=False)
    _checked: dict[int, dict[str, F64]] = field(default_factory=dict, repr=False)
    _log_bound: float | None = field(default=None, repr=False)

    def model(self, params: dict[str, Any]) -> Model:
        if self._model is None:
            args = params.get("model_args", {})
            if not isinstance(args, dict):
                raise AnalysisError(f"{self.name}: model_args must be an object, got {args!r}")
            try:
                self._model = load_model(self.model_ref, args)
            except ValueError as exc:
                raise AnalysisError(f"{self.name}: {exc}") from exc
        return self._model

    def check_params(self, params: dict[str, Any]) -> None:
        extra = set(params) - PARAMS
        if extra:
            raise AnalysisError(
                f"{self.name}: unknown parameters {sorted(extra)} (allowed: {sorted(PARAMS)})"
            )
        kind = params.get("kind", "mh")
        if kind not in KINDS:
            raise AnalysisError(f"{self.name}: kind must be one of {KINDS}, got {kind!r}")
        if params.get("noise", "exp") not in ("exp", "none"):
            raise AnalysisError(f"{self.name}: noise must be 'exp' or 'none', got {params.get('noise')!r}")
        margin = params.get("log_bound_margin", 0.0)
        if not isinstance(margin, int | float) or isinstance(margin, bool) or not 0 <= margin < math.inf:
            raise AnalysisError(f"{self.name}: log_bound_margin must be a finite number >= 0, got {margin!r}")
        if kind != "rejection" and ("bound" in params or "max_sensitivity" in params):
            raise AnalysisError(
                f"{self.name}: bound and max_sensitivity are rejection-sampling parameters (MH caps its "
                "steps in penalty.max_sensitivity or lazy.max_sensitivity)"
            )
        if params.get("bound", "data") not in BOUNDS:
            raise AnalysisError(f"{self.name}: bound must be one of {BOUNDS}, got {params.get('bound')!r}")
        cap = params.get("max_sensitivity")
        if cap is not None and (
            not isinstance(cap, int | float) or isinstance(cap, bool) or not 0 < cap < math.inf
        ):
            raise AnalysisError(f"{self.name}: max_sensitivity must be a finite number > 0, got {cap!r}")
        self.model(params)
        self.penalty(params)
        lazy = self.lazy(params)
        if lazy is not None and self.penalty(params) is not None:
            raise AnalysisError(f"{self.name}: lazy acceptance and the penalty are not combined; choose one")

    def penalty(self, params: dict[str, Any]) -> Penalty | None:
        raw = params.get("penalty")
        if raw is None:
            return None
        if params.get("kind", "mh") != "mh":
            raise AnalysisError(f"{self.name}: the penalty applies to kind 'mh' only")
        if not isinstance(raw, dict):
            raise AnalysisError(f"{self.name}: penalty must be an object, got {raw!r}")
        try:
            return Penalty.from_params(raw)
        except (KeyError, ValueError, TypeError) as exc:
            raise AnalysisError(f"{self.name}: bad penalty {raw!r}: {exc}") from exc

    def lazy(self, params: dict[str, Any]) -> Lazy | None:
        raw = params.get("lazy")
        if raw is None:
            return None
        lazy_coin(params)  # the coin the protocol will make (validates gamma)
        try:
            return Lazy.from_params(raw)
        except (ValueError, TypeError) as exc:
            raise AnalysisError(f"{self.name}: bad lazy {raw!r}: {exc}") from exc

    def rejection_bound(self, model: Model, cols: dict[str, F64], params: dict[str, Any]) -> float:
        """This party's log M_j (computed once, never sent anywhere): ``bound = "data"`` the maximum of its
        log-likelihood (over A = {range(θ) <= max_sensitivity} when capped, so that it moves by at most the
        cap when one record changes), ``"public"`` the model's bound for any dataset of its size; plus the
        margin."""
        if self._log_bound is None:
            cap = params.get("max_sensitivity")
            margin = float(params.get("log_bound_margin", 0.0))
            n_j = model.n_records(cols)
            value: float | None
            if params.get("bound", "data") == "public":
                value = model.public_log_bound(n_j)
                what = "public_log_bound"
            elif cap is not None:
                value = model.max_log_likelihood_within(cols, float(cap))
                what = "max_log_likelihood_within"
            else:
                value, what = model.max_log_likelihood(cols), "max_log_likelihood"
            if value is None or not math.isfinite(value):
                raise AnalysisError(f"{self.name}: model {model.name!r} has no {what} (rejection bound)")
            self._log_bound = value + margin
        return self._log_bound

    def check_rejection_batch(
        self, model: Model, theta_star: F64, public: F64, params: dict[str, Any]
    ) -> None:
        """Refuse proposals the accounting does not cover: a public term above 0 (a <= -m margin relies on it)
        or, with a cap, a proposal outside A (the coordinator must reject those itself)."""
        if (public > 1e-9).any():
            raise AnalysisError(
                f"{self.name}: rejection decisions need public terms <= 0 (log pi - log q - log M_q); got "
                f"up to {float(public.max()):.6g}"
            )
        cap = params.get("max_sensitivity")
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

    def _rejection_events(
        self, params: dict[str, Any], mode: str, view: RevealView, n: int, lazy: Lazy | None
    ) -> list[Any]:
        """Rejection sampling: a = log r <= -m margin, and one replaced record moves it by at most
        Delta = max_sensitivity (its own term l_j(theta*), on A) plus, with the data bound, max_sensitivity
        again (log M_j = sup over A moves by at most sup over A of the record range). Charged per decision:
        ``sign`` the Bernoulli cover of P(a + Gamma((m - q)/m) >= 0) (lazy: times gamma) for a <= -m margin;
        ``sum`` and ``blinded`` the exact sum-reveal curve delta(eps) = F_k(Delta) for every eps (blinded is
        a post-processing of the sum; its v2 curve is a numerical estimate without a certificate, so it is
        not charged)."""
        from mechanisms.privacy import ProfileEvent, sign_step_profile, sum_reveal_profile

        model = self.model(params)
        cap = params.get("max_sensitivity")
        if cap is None:
            raise Unaccountable(
                f"{self.name}: rejection sampling needs max_sensitivity, a public cap on the per-record "
                "log-likelihood range of a proposal (proposals beyond it are rejected publicly): the charge "
                "of a decision grows with it"
            )
        probe = np.atleast_2d(model.sample_prior(np.random.default_rng(0), 1))
        if model.record_loglik_range(probe) is None:
            raise Unaccountable(f"{self.name}: model {model.name!r} declares no record_loglik_range")
        bound = params.get("bound", "data")
        if bound == "public":
            if model.public_log_bound(1) is None:
                raise Unaccountable(f"{self.name}: model {model.name!r} declares no public_log_bound")
            delta = float(cap)
        else:
            if type(model).max_log_likelihood_within is Model.max_log_likelihood_within:
                raise Unaccountable(
                    f"{self.name}: model {model.name!r} declares no max_log_likelihood_within, so its "
                    "data-dependent bound has no bounded sensitivity; use bound = 'public'"
                )
            delta = 2.0 * float(cap)
        m = view.threat.m
        a_max = -m * float(params.get("log_bound_margin", 0.0))
        what = f"{self.name} rejection ({bound} bound, range <= {float(cap):g}, Delta = {delta:g})"
        if lazy is not None and (not reveal_mode(mode).lazy_coin or view.observed != "sign"):
            raise Unaccountable(f"{self.name}: lazy rejection sampling: {view.note}; the coin is not secret")
        if view.observed == "sign":
            res = sign_step_profile(delta, view.threat, lazy.gamma if lazy else None, a_max)
            if not res.bounded:
                raise Unaccountable(
                    f"{self.name}: {res.message} (rejection sampling: set log_bound_margin > 0 so a < 0, "
                    "or use lazy acceptance)"
                )
            label = f"{what}, sign, a <= {a_max:g}" + (f", lazy gamma={lazy.gamma:g}" if lazy else "")
            return [ProfileEvent(res.profile, count=n, label=label)]
        if view.observed in ("sum", "blinded"):
            return [ProfileEvent(sum_reveal_profile(delta, view.threat), count=n, label=f"{what}, {mode}")]
        raise Unaccountable(f"{self.name}: {view.note}")

    def _lazy_events(
        self, params: dict[str, Any], mode: str, view: RevealView, n: int, lazy: Lazy
    ) -> list[Any]:
        """Lazy MH: each decision is the accept bit of the Metropolis rule AND a secret coin of probability
        gamma, seen by the coalition with the residual Gamma((m - q)/m) noise; Delta = the session's public
        cap on c(theta, theta*) (steps above it are rejected publicly). Charged at the rigorous Bernoulli
        cover of ``mechanisms.privacy.sign_step_profile`` (pure epsilon for the outside observer)."""
        from mechanisms.privacy import ProfileEvent, sign_step_profile

        if not reveal_mode(mode).lazy_coin:
            raise Unaccountable(f"{self.name}: lazy acceptance is revealed only in reveal mode 'sign'")
        if view.observed != "sign":
            raise Unaccountable(
                f"{self.name}: lazy acceptance: {view.note}; a coalition that large also knows the secret "
                "coin and the sum, so nothing bounds the exact accept-reject"
            )
        if lazy.max_sensitivity is None:
            raise Unaccountable(
                f"{self.name}: lazy MH needs lazy.max_sensitivity, a public cap on the per-record "
                "sensitivity c(theta, theta*): the charge of a step grows with c"
            )
        res = sign_step_profile(lazy.max_sensitivity, view.threat, lazy.gamma)
        if not res.bounded:
            raise Unaccountable(f"{self.name}: {res.message}")
        label = (
            f"{self.name} lazy MH gamma={lazy.gamma:g}, c <= {lazy.max_sensitivity:g}, sign "
            f"(pure eps {res.pure_eps:.4g})"
            if res.pure_eps is not None
            else f"{self.name} lazy MH gamma={lazy.gamma:g}, c <= {lazy.max_sensitivity:g}, sign"
        )
        return [ProfileEvent(res.profile, count=n, label=label)]

    def privacy_events(self, params: dict[str, Any], mode: str, view: RevealView, n: int) -> list[Any]:
        """Per-decision privacy of this analysis, from public parameters only.

        With the Yildirim-Ermis penalty (kind 'mh'), sigma = tau n^alpha c(theta, theta*) where c bounds the
        change of this party's log-ratio when one record is replaced (c = 2 x the model's per-record bound,
        valid for records that pass the schema check, or 2 b ||theta* - theta|| with clipping). What the
        coalition in ``view`` sees is a post-processing of log r + N(0, r sigma^2), r the number of parties
        whose noise it does not know (``view.threat.residual_parties``), so each decision is
        mu = c / (sigma sqrt(r)) = 1 / (tau n^alpha sqrt(r))-GDP (``mechanisms.privacy.penalty_gdp_mu``),
        whatever theta and theta* are. With ``penalty.max_sensitivity`` (a public cap on c, enforced on every
        batch) the step is also charged at its confidential amplification: the profile of what the coalition
        observes (``view.observed``: the sum, the blinded product or the bit) of log r + N(0, r sigma^2) +
        Gamma(r/m, 1) at c = the cap (``mechanisms.privacy.penalty_step_profile``), carried with the GDP
        bound in one ``AmplifiedGaussianEvent`` (GDP budgets use mu, eps-at-delta budgets the profile).
        Without the penalty (and for rejection sampling) the per-step loss is unbounded or unknown:
        :class:`Unaccountable`, so a party with a privacy budget refuses the session.
        """
        lazy = self.lazy(params)
        if params.get("kind", "mh") == "rejection":
            return self._rejection_events(params, mode, view, n, lazy)
        if lazy is not None:
            return self._lazy_events(params, mode, view, n, lazy)
        pen = self.penalty(params)
        if pen is None or params.get("kind", "mh") != "mh":
            kind = params.get("kind", "mh")
            raise Unaccountable(
                f"{self.name}: kind {kind!r} without the penalty has unbounded or unknown per-step privacy "
                f"loss in reveal mode {mode!r} (exact MH accepts with probability 1 whenever r >= 1); use "
                "the penalty (model_params.penalty)"
            )
        from mechanisms.privacy import AmplifiedGaussianEvent, GaussianEvent, penalty_gdp_mu

        mu = penalty_gdp_mu(1.0, pen.sigma_per_c, view.threat)
        label = f"{self.name} penalty tau={pen.tau:g} {mode}"
        if pen.max_sensitivity is None:
            return [GaussianEvent(mu, count=n, label=f"{label} (no sensitivity cap: Gaussian bound only)")]
        cap = pen.max_sensitivity
        profile = penalty_step_profile_cached(view.observed, cap, pen.sigma_per_c, view.threat)
        return [
            AmplifiedGaussianEvent(
                mu=mu,
                profile=profile,
                plain_mu=1.0 / pen.sigma_per_c,
                count=n,
                label=f"{label}, c <= {pen.max_sensitivity:g}: confidential amplification ({view.observed})",
            )
        ]

    def records(self, model: Model, data: Dataset) -> dict[str, F64]:
        key = id(data)
        if key not in self._checked:
            try:
                self._checked = {key: model.check_data(data.columns, where="this party's data")}
            except SchemaError as exc:
                raise DataSchemaError(str(exc)) from exc
        return self._checked[key]

    def request(
        self, model: Model, params: dict[str, Any], inputs: dict[str, npt.NDArray[Any]], n: int
    ) -> DecisionRequest:
        """The coordinator's :class:`DecisionRequest` back from the wire arrays (its ``to_inputs``), with the
        session's kind and penalty."""
        try:
            return DecisionRequest.from_inputs(
                inputs, params.get("kind", "mh"), n, model.d, self.penalty(params)
            )
        except ValueError as exc:
            raise AnalysisError(f"{self.name}: {exc}") from exc

    def check_mh_batch(
        self, model: Model, req: DecisionRequest, params: dict[str, Any], sigma: npt.ArrayLike | None
    ) -> None:
        """Refuse MH proposals the accounting does not cover (a sensitivity above the session's cap) and a
        coordinator's penalty ``sigma`` (optional input) that differs from this party's own."""
        assert req.theta is not None
        penalty, lazy = req.penalty, self.lazy(params)
        cap = penalty.max_sensitivity if penalty is not None else (lazy.max_sensitivity if lazy else None)
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

    def request_terms(
        self,
        model: Model,
        cols: dict[str, F64],
        params: dict[str, Any],
        req: DecisionRequest,
        m: int,
        mode: str,
        rng: SecureRandom,
        sigma: npt.ArrayLike | None = None,
    ) -> Terms:
        """This party's terms of one request, after the checks a party makes on the coordinator's batch; the
        clipped-record count (penalty c = "clip") goes with them, for the batch's audit line."""
        log_bound = None
        if req.kind == "rejection":
            log_bound = self.rejection_bound(model, cols, params)
            self.check_rejection_batch(model, req.theta_star, req.public, params)
        else:
            self.check_mh_batch(model, req, params, sigma)
        if not model.in_bounds(req.theta_star).all() or (
            req.theta is not None and not model.in_bounds(req.theta).all()
        ):
            raise AnalysisError(f"{self.name}: proposals outside the parameter bounds must not be sent")
        out = party_terms(
            model, cols, req, m, rng, mode, log_bound=log_bound, exp_noise=params.get("noise", "exp") == "exp"
        )
        clipped = out.clipped_records if req.penalty is not None and req.penalty.c == "clip" else None
        return Terms(values=out.values, public=req.public, blind=out.blind, clipped_records=clipped)

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
        model = self.model(params)
        cols = self.records(model, data)
        req = self.request(model, params, inputs, n)
        return self.request_terms(model, cols, params, req, m, mode, rng, inputs.get("sigma"))


def penalty_step_profile_cached(observed: str, cap: float, sigma_per_c: float, threat: Any) -> Any:
    """``mechanisms.privacy.penalty_step_profile`` at c = cap (cached there: one computation per session)."""
    from mechanisms.privacy import penalty_step_profile

    return penalty_step_profile(observed, cap, sigma_per_c * cap, threat)


# ---- gaussian-mean: the model GaussianMean, also under the flat parameters of earlier versions ------------

FLAT = ("sigma", "column", "clip", "tau", "noise")


def flat_form(params: dict[str, Any]) -> bool:
    """Whether gaussian-mean parameters are in the flat form (only keys of FLAT; ``{}`` and ``{"noise": ...}``
    mean the same in both forms)."""
    return set(params) <= set(FLAT)


def common_params(params: dict[str, Any]) -> dict[str, Any]:
    """The common ``model_params`` of a gaussian-mean session given in either form: flat ``sigma``, ``column``
    and ``clip`` become ``model_args``, ``tau`` the penalty σ = tau · c(θ, θ*) (alpha = 0); the common form is
    returned as it is."""
    if not flat_form(params):
        mixed = sorted(set(params) & set(FLAT) - {"noise"})
        if mixed:
            raise AnalysisError(
                f"gaussian-mean: {mixed} are flat parameters: give only flat ones {list(FLAT)}, or give "
                "sigma, column and clip in model_args and the penalty in penalty"
            )
        return params
    tau = params.get("tau")
    if tau is not None:
        if not isinstance(tau, int | float) or isinstance(tau, bool) or not 0 < tau < math.inf:
            raise AnalysisError(f"gaussian-mean: tau must be a finite number > 0, got {tau!r}")
        if params.get("clip") is None:
            raise AnalysisError(
                "gaussian-mean: tau (penalty noise) needs clip = [lo, hi]: without clipped records the "
                "sensitivity of the log-ratio to one record is unbounded"
            )
    out: dict[str, Any] = {"model_args": {k: params[k] for k in ("sigma", "column", "clip") if k in params}}
    if "noise" in params:
        out["noise"] = params["noise"]
    if tau is not None:
        out["penalty"] = {"tau": float(tau), "n": 1}
    return out


def _unbounded_reason(mode: str) -> str:
    if mode in ("sign", "blinded"):
        return (
            f"the {mode} reveal of exact MH has unbounded privacy loss (a reject is impossible on one "
            "dataset whenever r >= 1 on it); use penalty noise (gaussian-mean: tau with clip)"
        )
    return (
        "the revealed sum has no noise calibrated to a bounded per-record sensitivity; use penalty noise "
        "(gaussian-mean: tau with clip)"
    )


@dataclass
class GaussianMeanAnalysis(ModelAnalysis):
    """``gaussian-mean``: the model ``mechanisms.models.gaussian_mean.GaussianMean`` (x_i ~ N(θ, σ²), σ known)
    on the common model path, with its parameters in either form:

    * the common form of every model (``model_args``, ``kind``, ``penalty``, ``lazy``, ...): as any
      :class:`ModelAnalysis`;
    * the flat form ``{sigma, column, clip, tau, noise}`` (:func:`common_params`), inputs ``theta`` and
      ``theta_star`` of shape (n,) and an optional ``public`` (default 0). With ``clip = [lo, hi]`` records
      are clipped before use; ``tau`` (needs ``clip``) is the Yıldırım–Ermiş penalty with
      σ_pen = tau · c(θ, θ*), c = |θ* − θ|(hi − lo)/σ² the most one replaced record moves ℓ_j. As the
      coordinator's kernel does for every model, the correction −m σ_pen²/2 goes into the public term (here
      each party adds it, from public values only, so the public term is the same at every party); the
      party's own term is ℓ_j + λ_j + V_j from ``party_terms``.

    Privacy (unchanged from the analysis this replaces, which put −σ_pen²/2 into each party's term): S is
    the same random variable, and a party's term differs from before by a public constant, so anything a
    coalition sees is the same up to a public shift. Each decision is 1/(tau √r)-GDP, r the parties whose
    noise the coalition does not know; without ``tau`` the per-step loss is unbounded
    (:class:`Unaccountable`).
    """

    name: str = "gaussian-mean"
    model_ref: str = "gaussian-mean"

    def model(self, params: dict[str, Any]) -> Model:
        return super().model(common_params(params))

    def check_params(self, params: dict[str, Any]) -> None:
        super().check_params(common_params(params))

    def privacy_events(self, params: dict[str, Any], mode: str, view: RevealView, n: int) -> list[Any]:
        if flat_form(params) and params.get("tau") is None:
            raise Unaccountable(_unbounded_reason(mode))
        return super().privacy_events(common_params(params), mode, view, n)

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
        if not flat_form(params):
            return super().terms(data, params, inputs, n, m, mode, rng)
        common = common_params(params)
        model = self.model(common)
        cols = self.records(model, data)
        req = self.request(model, common, {"public": np.zeros(n), **inputs}, n)
        if req.penalty is not None:
            assert req.theta is not None
            sigma = req.penalty.sigma(model, req.theta, req.theta_star)
            req = dataclasses.replace(req, public=req.public + penalty_correction(sigma, m))
        return self.request_terms(model, cols, common, req, m, mode, rng, inputs.get("sigma"))
