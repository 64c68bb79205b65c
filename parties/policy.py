"""This party's own rules for what runs on its records, checked before any work: the allowlist (models,
reveal modes, topologies, parameter bounds, consortium members and coordinator), the decision budget, the
privacy budget at open, the session limit, and when a run step is already paid for (run resume: the same
inputs under the same run noise key reveal exactly what was charged, ``parties.replay``).

A refusal is a :class:`parties.refusal.Refusal` with its reason: INVALID_ARGUMENT for a session that does
not fit this daemon, PERMISSION_DENIED for what the allowlist does not allow, RESOURCE_EXHAUSTED for budgets
and limits (answered with the status code of that name). The coordinator cannot override any of it
(DESIGN.md section 2).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hss.modes import FEATURES, reveal_mode
from parties import abcdp
from parties.analyses import Analysis, AnalysisError, Dataset
from parties.config import PartyConfig
from parties.privacy_budget import PrivacyBudgetStore, charged_per_run
from parties.refusal import Reason, Refusal
from parties.registry import get_analysis
from parties.replay import ReplayFileError, ReplayStore, key_id, plan_digest
from proto.records import RunCharge
from proto.spec import SessionSpec, shown


def check_policy(cfg: PartyConfig, spec: SessionSpec, decisions_used: int) -> None:
    """The session's parties, coordinator, model, reveal mode, topology and bounded parameters are all
    allowed here, and at least one decision of the decision budget is left."""
    try:
        mine = spec.party(cfg.id)
    except ValueError as exc:
        raise Refusal(
            Reason.INVALID_ARGUMENT, f"this daemon is party {cfg.id}, absent from the session"
        ) from exc
    if mine.identity != cfg.identity:
        raise Refusal(
            Reason.INVALID_ARGUMENT,
            f"the session calls party {cfg.id} {shown(mine.identity)}, but this daemon is {cfg.identity!r}",
        )
    known = {p.id: p.identity for p in cfg.peers}
    for p in spec.parties:
        if p.id != cfg.id and known.get(p.id) != p.identity:
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"party {p.id} ({shown(p.identity)}) is not a consortium member in this party's config",
            )
    if spec.coordinator_identity != cfg.coordinator_identity:
        raise Refusal(
            Reason.PERMISSION_DENIED,
            f"coordinator {shown(spec.coordinator_identity)} is not this party's "
            f"({cfg.coordinator_identity!r})",
        )
    _check_allowlist(cfg, spec)
    if decisions_used >= cfg.max_decisions:
        raise Refusal(
            Reason.RESOURCE_EXHAUSTED,
            f"decision budget exhausted ({decisions_used} of {cfg.max_decisions} used)",
        )


def _check_allowlist(cfg: PartyConfig, spec: SessionSpec) -> None:
    if spec.model not in cfg.allow_models:
        raise Refusal(
            Reason.PERMISSION_DENIED,
            f"model {shown(spec.model)} is not allowed by this party "
            f"(allow.models = {list(cfg.allow_models)})",
        )
    if spec.reveal_mode not in cfg.allow_modes:
        raise Refusal(
            Reason.PERMISSION_DENIED,
            f"reveal mode {shown(spec.reveal_mode)} is not allowed "
            f"(allow.reveal_modes = {list(cfg.allow_modes)})",
        )
    if spec.security not in cfg.allow_security:
        raise Refusal(
            Reason.PERMISSION_DENIED,
            f"security {shown(spec.security)} is not allowed (allow.security = {list(cfg.allow_security)})",
        )
    if spec.topology not in cfg.allow_topologies:
        raise Refusal(
            Reason.PERMISSION_DENIED,
            f"topology {shown(spec.topology)} is not allowed "
            f"(allow.topologies = {list(cfg.allow_topologies)})",
        )


def check_session_limit(cfg: PartyConfig, live: int) -> None:
    if live >= cfg.max_sessions:
        raise Refusal(
            Reason.RESOURCE_EXHAUSTED,
            f"{live} sessions open, limits.max_sessions = {cfg.max_sessions}",
        )


def check_analysis(cfg: PartyConfig, spec: SessionSpec, data: Dataset) -> Analysis:
    """The session's analysis, its parameters checked (and, for ABCDP, its column names against the data's:
    no record is read); INVALID_ARGUMENT naming what is wrong."""
    try:
        analysis = get_analysis(spec.model, spec.model_params)  # the plan, parsed once for the session
        _check_bounds(cfg, spec, analysis.public_numbers())
        check_data_model(cfg, spec, analysis)
        if reveal_mode(spec.reveal_mode).inputs == FEATURES or spec.model == abcdp.ANALYSIS:
            abcdp.check_session(spec, data, analysis)  # column names only: no record is read
    except AnalysisError as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, str(exc)) from exc
    return analysis


def _check_bounds(cfg: PartyConfig, spec: SessionSpec, numbers: dict[str, float]) -> None:
    """``[allow.bounds.<model>]``: each bounded parameter is among the session's public numbers (the
    analysis's ``public_numbers``) and inside its range."""
    for key, (lo, hi) in cfg.bounds.get(spec.model, {}).items():
        v = numbers.get(key)
        if v is None or not lo <= v <= hi:
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"model parameter {key} = {shown(v)} is outside this party's bounds [{lo}, {hi}]",
            )


def check_data_model(cfg: PartyConfig, spec: SessionSpec, analysis: Analysis) -> None:
    """A model's public arguments have one place, the experiment's ``[model.params]`` (the session's
    ``model_args``); when the session's model is this registry's ``[data] model``, they must build a model
    with the same schema as its ``[data.model_args]`` (the columns and public bounds its records were
    checked against at start-up), else the session is refused naming both. Arguments that do not change the
    schema may differ: the prior, or the covariate ellipsoid a warm start sets (records are clipped into it
    when the session uses them)."""
    from mechanisms.models.base import BUILTIN, load_model
    from parties.models_bridge import ModelAnalysis

    d = cfg.data
    if d is None or d.model is None or not isinstance(analysis, ModelAnalysis):
        return
    if BUILTIN.get(d.model, d.model) != BUILTIN.get(analysis.model_ref, analysis.model_ref):
        return
    if analysis.model().schema != load_model(d.model, d.model_args).schema:
        theirs = shown(dict(analysis.plan.model_args))
        raise AnalysisError(
            f"{spec.model}: the session's model_args {theirs} differ from this registry's "
            f"[data.model_args] {shown(d.model_args)}, the schema its records "
            "were checked against: the experiment's [model.params] must equal every registry's "
            "[data.model_args]"
        )


async def check_privacy_at_open(
    privacy: PrivacyBudgetStore,
    cfg: PartyConfig,
    analysis: Analysis,
    spec: SessionSpec,
    paid: Callable[[], bool],
    cap: Callable[[list[Any]], None] | None = None,
) -> None:
    """Unbounded analyses, or not even one decision (an ABCDP run: its whole-run epsilon) left in the
    privacy budget, are refused at open; an ABCDP run already ``paid()`` here has nothing to fit (asked
    last, after the events are known)."""
    svt = charged_per_run(spec)
    what = "the ABCDP run (charged once)" if svt else "a single decision"
    # numerical profiles and PLD capacities can take seconds: off the event loop, once per session
    one = await asyncio.to_thread(privacy.events_for, cfg, analysis, spec, 1)
    await asyncio.to_thread(privacy.warm, one)
    if not paid():
        privacy.check(one, what)
        if cap is not None:  # the session's study's cap (parties.governance)
            cap(one)


def check_batch(cfg: PartyConfig, n: int) -> None:
    if not 1 <= n <= cfg.max_batch:
        raise Refusal(Reason.INVALID_ARGUMENT, f"batch {n} must be in 1..{cfg.max_batch} (limits.max_batch)")


def check_decision_budget(cfg: PartyConfig, decisions_used: int, n: int) -> None:
    if decisions_used + n > cfg.max_decisions:
        raise Refusal(
            Reason.RESOURCE_EXHAUSTED,
            f"batch of {n} would exceed this party's decision budget "
            f"({decisions_used} of {cfg.max_decisions} used)",
        )


def reproducible(spec: SessionSpec) -> bool:
    """Whether evaluating a run step again with the same inputs and noise terms reveals exactly the same:
    sum and blinded (their E term is drawn from the run noise key too), and sign without a lazy coin (the
    accept bit is [S >= 0]); not sign with a lazy coin, made from the session's PRSS keys."""
    mode = reveal_mode(spec.reveal_mode)
    return mode.reproducible and not spec.lazy_coin


def paid_run_step(
    privacy: PrivacyBudgetStore, spec: SessionSpec, run_key_id: str, run_step: int, digest: bytes
) -> RunCharge | None:
    """This party's earlier charge of run step ``run_step`` when evaluating it again reveals exactly what
    that charge paid for, else None (charge it). That needs: the ledger records the charge with the same
    step digest under the same run noise key (so the noise terms are the same), and a reveal mode whose
    revealed result depends only on the inputs and those terms (:func:`reproducible`)."""
    if not run_step or not reproducible(spec):
        return None
    return privacy.charged_run_step(spec.run_id, run_step, digest, run_key_id)


def recharge_reason(privacy: PrivacyBudgetStore, spec: SessionSpec, run_step: int) -> str:
    """Why a run step this party charged before is charged again ("" if it was never charged here)."""
    rid = spec.run_id
    if not run_step or not any(
        c.run_id == rid and c.from_step <= run_step <= c.to_step for c in privacy.run_charges
    ):
        return ""
    if not reproducible(spec):
        return "the session's lazy coin is drawn afresh in every session, so this is a new release"
    return (
        "no charge of it with the same inputs under this run's noise key is on record (other inputs, a "
        "new run key, or a step inside an earlier charged range), so this is a new release"
    )


def run_paid(
    privacy: PrivacyBudgetStore, replays: ReplayStore, cfg: PartyConfig, spec: SessionSpec
) -> RunCharge | None:
    """The charge of run ``spec.run_id`` in this party's ledger when its reveal mode is charged once per run
    (federated ABCDP: its whole-run event, recorded as run step 0 with the run's plan digest and run noise key
    id), or None. Reads the run key only if it exists (a run never charged here has none, and nothing is
    created by asking)."""
    if not replays.key_path_for(spec.run_id).exists():
        return None
    try:
        key, _ = replays.run_key(spec.run_id, cfg.fixed_rng_key)
    except ReplayFileError as exc:
        raise Refusal(Reason.FAILED_PRECONDITION, str(exc)) from exc
    return privacy.charged_run_step(spec.run_id, 0, plan_digest(spec), key_id(key))
