"""What a registry charges for a batch of decisions: pure functions of (the plan's parts, model, coalition
view, n), one per case of the table below.

Each case is computed from public values only (the session's plan, the model's public bounds, what the
coalition the registry assumes observes — :func:`threat.coalition_view` — and the batch size). Nothing the
coordinator sends is taken as a privacy number. A case raises :class:`Unaccountable`, with the reason in
words that name the numbers, when the per-step loss is unbounded or unknown; a registry with a budget then
refuses the session. Which case a plan is, is its decision kind's (``mechanisms.kinds``: each kind's
``events``; ``mechanisms.kinds.decision_events`` for a plan).

===================== ============ ========================================================================
plan                  observed     charged per decision
===================== ============ ========================================================================
MH + penalty sd,      any          per decision at its own sensitivity: one GaussianEvent per batch with
cap c̄                              μ² = Σ_t (Δ_t / (sd √r))², Δ_t = the most one record moves ℓ_j at the
                                   step (θ_t, θ*_t) under the registry's neighbour relation
                                   (``requests.step_sensitivity``). Valid under fully adaptive choice of
                                   the steps as a GDP filter (Smith & Thakurta 2022, Koskela, Tobaben &
                                   Honkela 2023): the ledger admits a batch only while the composed μ stays
                                   within the budget. Without the batch (a dry run) every decision is
                                   charged at Δ = the cap. With ``rdp_orders`` (a Rényi budget) and the
                                   coalition observing ``sign``: a RenyiEvent, the same μ plus the accept
                                   bit's ρ(α) summed over the batch (``renyi.bit_rdp_table``: each decision
                                   at the session table's next grid Δ above its own).
statistics (warm       sum          one GaussianEvent per release: μ = √((Δ₁/sd)² + (Δ₂/sd2)²)/√r
start release)                     (``mechanisms.warmstart.release_mu``: the Gaussian mechanism on the
                                   per-record vector's two blocks, twice Δ for replace-one)
MH + penalty, no cap  any          GaussianEvent μ = 1/(τ n^α √r), r the parties whose noise the coalition
                                   does not know (``penalty_gdp_mu``): every reveal mode is a
                                   post-processing of log r + N(0, rσ²)
MH + penalty, cap c̄   sum/blinded/ AmplifiedGaussianEvent: the same μ (GDP budgets) with the profile of
                      sign         log r + N(0, rσ²) + Gamma(r/m, 1) revealed at c = c̄ (blinded and sign
                                   by post-processing; ``penalty_step_profile``; ε-at-δ budgets, where the
                                   composition also keeps the GDP reading and charges the smaller)
lazy MH γ, cap c̄      sign         ProfileEvent: the Bernoulli cover of γ·P(a + Gamma(r/m) ≥ 0) at Δ = c̄
                                   (``sign_step_profile``; pure ε for the outside observer)
MH + penalty sd, cap  any          per run, at its worst record, when the registry asks for it
c̄, a model linear in               (``[budget] per_run = "worst-record"``; ``worst_record``): each batch is
a predictor (logistic,             charged the increase of min(worst record's bound, per-decision charge)
formula bernoulli)                 of the run so far, the run's Gram matrices kept by the registry
                                   (``worst_record_events``); the same event types as per decision
rejection, cap c̄      sign         ProfileEvent: the Bernoulli cover of P(a + Gamma(r/m) ≥ 0) (lazy: × γ)
                                   for a ≤ −m·margin, Δ = c̄ (public bound) or 2c̄ (data bound)
rejection, cap c̄      sum/blinded  ProfileEvent: the exact sum-reveal curve δ(ε) = F_k(Δ)
blocked: shared      any          per sweep, two GaussianEvents (``blocked_events``; docs/PRIVACY.md,
penalty sd, cap c̄,                 "Blocked sampling under a budget"): the joint release of the transcript
noisy local steps                  and this registry's own effect path is charged, the transcript being a
(sd_loc, max_step h),              post-processing of it. The shared decisions as the fixed-sd penalty's,
a model whose bound                μ² = Σ_t (Δ_t / (sd √r))², Δ_t the model's bound with every effect held
holds at any offset                at v_j = β_0 + u_j (``SharedModel.record_ratio_bound``: a record's term
(bernoulli)                        moves by at most it at any v_j); the sweep's chains × steps local steps,
                                   each penalty MH with the registry's own N(0, sd_loc²), at the cap
                                   Δ_loc = the model's bound for |Δu_j| ≤ h (2h replace-one, h add-remove
                                   for bernoulli): μ² = chains · steps · (Δ_loc / sd_loc)². A GDP filter
                                   over both (adaptive composition of the joint release)
blocked, anything     —            Unaccountable: shared decisions without the fixed-sd penalty (exact MH),
else                               exact local steps (no noise: an unbounded loss that every later bit is
                                   conditioned on), or a model whose bound grows with the level of η
                                   (poisson, gaussian, weibull: the registry's effect is an offset the
                                   bound does not see)
effects release       —            a GaussianEvent of μ = 0 whose label states it: the z_j draws are a
                                   function of the joint release the run's sweeps were charged for
                                   (post-processing); the registry also checks that its ledger charged every
                                   sweep of the run (``parties.models_bridge``) and releases only with its
                                   own [allow] release_effects = true
noise "none" (tests)  —            Unaccountable, every decision kind: the parties drop their Gamma(1/m)
                                   shares of Exp(1), so a decision is not the sampler's and nothing above
                                   holds (lazy MH: the bit is deterministic given the coin). A statistics
                                   release adds no Gamma noise (its Gaussian noise is the mechanism), so
                                   it is charged the same whatever the plan's noise
anything else         —            Unaccountable (exact MH without noise: a reject is impossible whenever
                                   r ≥ 1; a lazy coin outside sign; no cap; a coalition past the
                                   threshold that sees everything)
===================== ============ ========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
from numpy.random import default_rng  # a fixed public probe point, not secret randomness

from hss.modes import reveal_mode
from mechanisms.models.base import Model
from mechanisms.models.hierarchy import SharedModel
from mechanisms.samplers.local import EffectsRelease, LocalSettings, local_step_sensitivity
from mechanisms.samplers.requests import DecisionRequest, Lazy, Penalty, step_sensitivity
from mechanisms.warmstart import Statistics, release_mu

from .events import AmplifiedGaussianEvent, GaussianEvent, PrivacyEvent, ProfileEvent, RenyiEvent
from .penalty import penalty_gdp_mu, penalty_step_profile
from .renyi import BitRdpTable, bit_rdp_table, table_ratio
from .residual import ResidualPenaltyAcceptance
from .reveal_sign import AcceptanceModel, PenaltyAcceptance, sign_step_profile
from .reveal_sum import sum_reveal_profile
from .threat import RevealView, coalition_view
from .worst_record import RunState, WorstRecordCharge, linear_structure

__all__ = [
    "RejectionBound",
    "Unaccountable",
    "accept_bit_table",
    "blocked_events",
    "coalition_rdp",
    "effects_events",
    "lazy_events",
    "penalty_events",
    "per_decision_events",
    "rejection_events",
    "release_events",
    "worst_record_charge",
    "worst_record_events",
]


class RejectionBound(Protocol):
    """Rejection sampling's public settings (``mechanisms.kinds.rejection.RejectionSettings``): its bound
    M_j (``"data"`` or ``"public"``), the margin added to log M_j and the cap on a proposal's record range."""

    @property
    def bound(self) -> str: ...
    @property
    def log_bound_margin(self) -> float: ...
    @property
    def max_sensitivity(self) -> float | None: ...


class Unaccountable(ValueError):
    """No per-step privacy bound can be backed for this plan (the message says why, naming the numbers)."""


def blocked_events(
    pen: Penalty | None,
    local: LocalSettings,
    model: Model,
    mode: str,
    view: RevealView,
    n: int,
    name: str,
    request: DecisionRequest | None,
    neighbours: str,
) -> list[PrivacyEvent]:
    """A sweep of a blocked run (docs/PRIVACY.md, "Blocked sampling under a budget"): the joint release of
    the public transcript and this registry's own effect path is charged, the transcript being a
    post-processing of it. Given the joint history, (a) each shared decision's term ℓ_j is evaluated at a
    known v_j = β_0 + u_j (the public intercept-centred coordinate), so one record moves it by at most the
    model's bound at fixed offset (``SharedModel.record_ratio_bound``; a bound at every offset only when
    ``model.offset_uniform_bound()``): Δ_t/(sd √r)-GDP as any fixed-sd penalty decision; (b) each of the
    sweep's chains × steps local steps is penalty MH with the registry's own N(0, sd_loc²) on a log ratio
    one record moves by at most Δ_loc (``local_step_sensitivity``, |Δu| ≤ max_step): Δ_loc/sd_loc-GDP,
    charged at that cap whatever the step (it is fixed before the sweep). Both are GaussianEvents, composed
    adaptively under the ledger's GDP filter. A dry run (no ``request``) charges ``n`` decisions at the cap
    and the local steps of ``n`` chains."""
    why = None
    if pen is None or not pen.fixed or pen.max_sensitivity is None:
        why = (
            "its shared decisions are exact Metropolis-Hastings (a reject is impossible whenever r >= 1): "
            "they need the penalty with a fixed sd and max_sensitivity"
        )
    elif not local.noisy:
        why = (
            "its local steps are exact Metropolis-Hastings without noise (an unbounded loss), and the shared "
            "decisions depend on the records through the effect they draw: the local steps need the "
            "registry's own noise (blocked.sd) and a cap on their move (blocked.max_step)"
        )
    elif not model.offset_uniform_bound():
        why = (
            f"model {model.name!r} bounds a record's log-likelihood ratio only at a given level of the "
            "linear predictor (its bound grows with the level, e.g. e^eta, a residual or a survival "
            "term), and each registry's terms are evaluated at its own effect, an offset the bound does "
            "not see; only a model whose bound holds at any offset (family bernoulli, "
            "logistic-random-intercept) is charged"
        )
    if why is not None:
        raise Unaccountable(
            f"{name}: blocked sampling (registry-local random effects) has no privacy bound here: {why} "
            "(docs/PRIVACY.md, 'Blocked sampling under a budget'); run it without a privacy budget"
        )
    assert pen is not None and pen.sd is not None and pen.max_sensitivity is not None
    assert local.sd is not None and local.max_step is not None
    cap = float(pen.max_sensitivity)
    sd_res = pen.sd * (view.threat.residual_parties**0.5)
    shared = SharedModel(model)
    where = f"{name} blocked, shared block: penalty sd={pen.sd:g} {mode}, {neighbours}, per decision"
    if request is None:
        delta = np.full(n, cap)
        chains = n
        where += f" at the cap c <= {cap:g} (dry run)"
    else:
        assert request.theta is not None
        delta = step_sensitivity(shared, request.theta, request.theta_star, neighbours, pen.c, pen.b)
        chains = n if request.states is None else int(request.states.shape[0])
    mu_shared = float(np.sqrt(np.sum((delta / sd_res) ** 2)))
    d_loc = local_step_sensitivity(model, local.max_step, neighbours)
    count = chains * local.steps
    mu_local = math.sqrt(count) * d_loc / local.sd
    what = (
        f"{name} blocked, own effect: {chains} chains x {local.steps} noisy local MH steps, |du| <= "
        f"{local.max_step:g} (Delta {d_loc:g}, {neighbours}), own noise sd={local.sd:g}, kept in this "
        "registry (charged as released: the joint release the transcript post-processes)"
    )
    return [GaussianEvent(mu_shared, count=1, label=where), GaussianEvent(mu_local, count=1, label=what)]


def accept_bit_table(sd: float, view: RevealView, cap: float, orders: Sequence[float]) -> BitRdpTable:
    """The session's table of the fixed-sd penalty's accept-bit Rényi bound for a coalition of ``view``
    (each registry's sd ``sd``): the bit 1[ℓ + N(0, r sd²) + Gamma(r/m) ≥ 0], r the registries whose noise
    it does not know. What a registry's ledger charges each decision with, and what a plan prices it at."""
    sd_res = sd * (view.threat.residual_parties**0.5)
    k = view.threat.residual_shape
    bit: AcceptanceModel = PenaltyAcceptance(sd_res) if k == 1.0 else ResidualPenaltyAcceptance(sd_res, k)
    return bit_rdp_table(bit, float(cap), tuple(float(a) for a in orders))


def coalition_rdp(
    events: Sequence[PrivacyEvent],
    sd: float,
    cap: float,
    mode: str,
    m: int,
    t: int,
    charged_for: int,
    colluding: int,
    alpha: float,
) -> tuple[float, float] | None:
    """(ρ at order ``alpha``, the ratio used) of a run's ``events`` for a coalition of ``colluding``
    registries, from the charges a registry made for ``charged_for`` (its [budget] colluding): the warm
    start's releases (GaussianEvent, μ = Δ/(sd √r)) and the fixed-sd penalty's accept bits charged per
    decision with their Rényi bound (RenyiEvent, ρ = Σ_t base.rho(Δ_t) over the batch,
    :func:`per_decision_events` — the caller passes only such charges). The coalition leaves r' registries'
    noise unknown: each Gaussian's μ² grows by r/r', and each decision's bit is
    1[ℓ + N(0, r' sd²) + Gamma(r'/m) ≥ 0], whose bound at the same Δ is at most ``table_ratio(to, base)``
    times the one charged, whatever Δ was; so a batch costs at most min(ratio · ρ, α μ'²/2) for the coalition
    (the Gaussian it post-processes). None when either view sees more than the bit in ``mode`` (or an event
    is not of these kinds, or carries no ρ at ``alpha``)."""
    base_view = coalition_view(mode, m, t, charged_for)
    view = coalition_view(mode, m, t, colluding)
    if not (base_view.observation.only_bit and view.observation.only_bit):
        return None
    base = accept_bit_table(sd, base_view, cap, (alpha,))
    ratio = float(table_ratio(accept_bit_table(sd, view, cap, (alpha,)), base, cap)[0])
    grow = base_view.threat.residual_parties / view.threat.residual_parties  # μ'² / μ²
    total = 0.0
    for e in events:
        if not isinstance(e, GaussianEvent):
            return None
        gauss = alpha * e.mu * e.mu * grow / 2.0
        if isinstance(e, RenyiEvent):
            at = [r for a, r in zip(e.orders, e.rho, strict=True) if math.isclose(a, alpha, rel_tol=1e-12)]
            if not at:
                return None
            total += e.count * min(ratio * at[0], gauss)
        else:
            total += e.count * gauss
    return total, ratio


def per_decision_events(
    pen: Penalty,
    model: Model,
    mode: str,
    view: RevealView,
    n: int,
    name: str,
    request: DecisionRequest | None,
    neighbours: str,
    rdp_orders: tuple[float, ...] | None = None,
) -> list[PrivacyEvent]:
    """A fixed-sd penalty step is a post-processing of ℓ_j + N(0, r sd²) for the coalition (r parties'
    noise unknown to it), so a step of sensitivity Δ is Δ/(sd √r)-GDP; a batch composes to
    μ = √(Σ_t μ_t²) (exact for Gaussians). With ``rdp_orders`` and the coalition seeing only the bit
    1[ℓ + N(0, r sd²) + Gamma(r/m) ≥ 0]: also its Rényi bound per decision, summed (``renyi``)."""
    cap = pen.max_sensitivity
    if cap is None:
        raise Unaccountable(
            f"{name}: a penalty with a fixed sd needs max_sensitivity, a public cap on c(theta, theta*) "
            "(the worst case a dry run charges; larger steps are rejected publicly)"
        )
    assert pen.sd is not None
    sd_res = pen.sd * (view.threat.residual_parties**0.5)
    where = f"{name} penalty sd={pen.sd:g} {mode}, {neighbours}, per decision"
    if request is None:
        delta = np.full(n, float(cap))
        what = f"{where} at the cap c <= {cap:g} (dry run)"
    else:
        assert request.theta is not None
        delta = step_sensitivity(model, request.theta, request.theta_star, neighbours, pen.c, pen.b)
        what = where
    mu = float(np.sqrt(np.sum((delta / sd_res) ** 2)))
    if rdp_orders is None or not view.observation.only_bit:
        return [GaussianEvent(mu, count=1, label=what)]
    table = accept_bit_table(pen.sd, view, float(cap), rdp_orders)
    rho = tuple(float(r) for r in table.batch_rho(delta))
    return [RenyiEvent(mu, table.orders, rho, count=1, label=f"{what}, Renyi bound of the accept bit")]


def rejection_events(
    rejection: RejectionBound,
    lazy: Lazy | None,
    model: Model,
    mode: str,
    view: RevealView,
    n: int,
    name: str,
) -> list[PrivacyEvent]:
    """Rejection sampling: a = log r <= -m margin, and one replaced record moves it by at most
    Delta = max_sensitivity (its own term l_j(theta*), on A) plus, with the data bound, max_sensitivity
    again (log M_j = sup over A moves by at most sup over A of the record range). Charged per decision:
    ``sign`` the Bernoulli cover of P(a + Gamma((m - q)/m) >= 0) (lazy: times gamma) for a <= -m margin;
    ``sum`` and ``blinded`` the exact sum-reveal curve delta(eps) = F_k(Delta) for every eps (blinded is
    a post-processing of the sum; its v2 curve is a numerical estimate without a certificate, so it is
    not charged)."""
    cap = rejection.max_sensitivity
    if cap is None:
        raise Unaccountable(
            f"{name}: rejection sampling needs max_sensitivity, a public cap on the per-record "
            "log-likelihood range of a proposal (proposals beyond it are rejected publicly): the charge "
            "of a decision grows with it"
        )
    probe = np.atleast_2d(model.sample_prior(default_rng(0), 1))
    if model.record_loglik_range(probe) is None:
        raise Unaccountable(f"{name}: model {model.name!r} declares no record_loglik_range")
    if rejection.bound == "public":
        if model.public_log_bound(1) is None:
            raise Unaccountable(f"{name}: model {model.name!r} declares no public_log_bound")
        delta = float(cap)
    else:
        if type(model).max_log_likelihood_within is Model.max_log_likelihood_within:
            raise Unaccountable(
                f"{name}: model {model.name!r} declares no max_log_likelihood_within, so its "
                "data-dependent bound has no bounded sensitivity; use bound = 'public'"
            )
        delta = 2.0 * float(cap)
    a_max = -view.threat.m * rejection.log_bound_margin
    what = f"{name} rejection ({rejection.bound} bound, range <= {float(cap):g}, Delta = {delta:g})"
    if lazy is not None and (not reveal_mode(mode).lazy_coin or not view.observation.only_bit):
        raise Unaccountable(f"{name}: lazy rejection sampling: {view.note}; the coin is not secret")
    if view.observation.only_bit:
        res = sign_step_profile(delta, view.threat, lazy.gamma if lazy else None, a_max)
        if not res.bounded:
            raise Unaccountable(
                f"{name}: {res.message} (rejection sampling: set log_bound_margin > 0 so a < 0, "
                "or use lazy acceptance)"
            )
        label = f"{what}, sign, a <= {a_max:g}" + (f", lazy gamma={lazy.gamma:g}" if lazy else "")
        return [ProfileEvent(res.profile, count=n, label=label)]
    if view.observation.of_sum:
        return [ProfileEvent(sum_reveal_profile(delta, view.threat), count=n, label=f"{what}, {mode}")]
    raise Unaccountable(f"{name}: {view.note}")


def penalty_events(pen: Penalty, mode: str, view: RevealView, n: int, name: str) -> list[PrivacyEvent]:
    """The Yıldırım–Ermiş penalty with σ = τ n^α c: μ = 1/(τ n^α √r) per decision whatever its step, with
    the confidential amplification's profile at the cap when there is one (the module's table)."""
    mu = penalty_gdp_mu(1.0, pen.sigma_per_c, view.threat)
    label = f"{name} penalty tau={pen.tau:g} {mode}"
    cap = pen.max_sensitivity
    if cap is None:
        return [GaussianEvent(mu, count=n, label=f"{label} (no sensitivity cap: Gaussian bound only)")]
    # one profile per session: penalty_step_profile caches the numerical curve by its arguments
    profile = penalty_step_profile(view.observation, cap, pen.sigma_per_c * cap, view.threat)
    return [
        AmplifiedGaussianEvent(
            mu=mu,
            profile=profile,
            plain_mu=1.0 / pen.sigma_per_c,
            count=n,
            label=f"{label}, c <= {cap:g}: confidential amplification ({view.observed})",
        )
    ]


def release_events(
    stats: Statistics, model: Model, view: RevealView, name: str, neighbours: str
) -> list[PrivacyEvent]:
    """A warm-start release: the Gaussian mechanism on the per-record vector's two blocks, accounted only
    when the coalition sees the noisy sum (the module's table)."""
    if not view.observation.noisy_sum:
        raise Unaccountable(
            f"{name}: a warm-start release is accounted only when the coalition sees the noisy sum "
            f"(reveal mode 'sum'), not {view.observed!r}: {view.note}"
        )
    mu = release_mu(stats, model, view.threat.residual_parties, neighbours)
    label = f"{name} warm start: {stats.what} release, {neighbours}, sd={stats.sd:g}/{stats.sd2:g}"
    return [GaussianEvent(mu, count=1, label=label)]


def effects_events(rel: EffectsRelease, name: str) -> list[PrivacyEvent]:
    """A blocked run's effects release: a post-processing of the joint release its sweeps were charged for
    (a GaussianEvent of μ = 0 whose label says so)."""
    label = (
        f"{name} effects release of run {rel.run!r}, sweeps {rel.first}..{rel.first + rel.sweeps - 1} of "
        "this registry's z_j draws: a post-processing of the run's joint release, charged with its "
        "sweeps in this ledger (nothing more; released only with [allow] release_effects = true)"
    )
    return [GaussianEvent(0.0, count=1, label=label)]


def lazy_events(lazy: Lazy, mode: str, view: RevealView, n: int, name: str) -> list[PrivacyEvent]:
    """Lazy MH: each decision is the accept bit of the Metropolis rule AND a secret coin of probability
    gamma, seen by the coalition with the residual Gamma((m - q)/m) noise; Delta = the session's public
    cap on c(theta, theta*) (steps above it are rejected publicly). Charged at the rigorous Bernoulli
    cover of ``sign_step_profile`` (pure epsilon for the outside observer)."""
    if not reveal_mode(mode).lazy_coin:
        raise Unaccountable(f"{name}: lazy acceptance is revealed only in reveal mode 'sign'")
    if not view.observation.only_bit:
        raise Unaccountable(
            f"{name}: lazy acceptance: {view.note}; a coalition that large also knows the secret "
            "coin and the sum, so nothing bounds the exact accept-reject"
        )
    if lazy.max_sensitivity is None:
        raise Unaccountable(
            f"{name}: lazy MH needs lazy.max_sensitivity, a public cap on the per-record "
            "sensitivity c(theta, theta*): the charge of a step grows with c"
        )
    res = sign_step_profile(lazy.max_sensitivity, view.threat, lazy.gamma)
    if not res.bounded:
        raise Unaccountable(f"{name}: {res.message}")
    label = f"{name} lazy MH gamma={lazy.gamma:g}, c <= {lazy.max_sensitivity:g}, sign"
    if res.pure_eps is not None:
        label += f" (pure eps {res.pure_eps:.4g})"
    return [ProfileEvent(res.profile, count=n, label=label)]


def worst_record_charge(
    pen: Penalty,
    model: Model,
    view: RevealView,
    neighbours: str = "replace-one",
    rdp_orders: tuple[float, ...] | None = None,
) -> WorstRecordCharge | None:
    """The per-run charge of a session charged per decision (a fixed-sd penalty with a cap) whose model has
    the linear structure (``worst_record.linear_structure``), for the same readings as
    :func:`per_decision_events` (the Rényi one with ``rdp_orders`` when the coalition sees only the sign);
    None when the per-run charge does not apply (the per-decision one is kept): a penalty without a fixed
    sd and a cap, or a model without the structure. It holds only for the penalty of a plain MH plan (not
    a blocked run's, whose terms sit at the registries' own effects, nor a release's): callers go through
    the plan (``DecisionPlan.worst_record_charge``, which is None for every other plan)."""
    if not pen.fixed or pen.max_sensitivity is None:
        return None
    structure = linear_structure(model)
    if structure is None:
        return None
    assert pen.sd is not None
    sd_res = pen.sd * (view.threat.residual_parties**0.5)
    table = None
    if rdp_orders is not None and view.observation.only_bit:
        table = accept_bit_table(pen.sd, view, float(pen.max_sensitivity), rdp_orders)
    return WorstRecordCharge.of(structure, neighbours, sd_res, table)


def worst_record_events(
    charge: WorstRecordCharge,
    pen: Penalty,
    model: Model,
    mode: str,
    request: DecisionRequest,
    name: str,
    before: RunState | None,
    neighbours: str = "replace-one",
) -> tuple[list[PrivacyEvent], RunState]:
    """The events of one batch (``request``'s steps) charged per run (:func:`worst_record_charge`'s
    ``charge``) after the run's state ``before`` (None: the run's first batch), and the state after it."""
    assert pen.sd is not None and request.theta is not None
    delta = step_sensitivity(model, request.theta, request.theta_star, neighbours, pen.c, pen.b)
    label = f"{name} penalty sd={pen.sd:g} {mode}, {neighbours}"
    if charge.table is not None:
        label += ", Renyi bound of the accept bit"
    start = charge.empty() if before is None else before
    return charge.increment(start, request.theta, request.theta_star, delta, label)
