"""One Evaluate at this party, once the service has admitted it (caller, session, step order, batch size):
run resume (replay a step every party holds; do not charge again a step whose charge is on record), the
budgets checked and charged before any share leaves this party, the terms and the protocol machine, the
step driven over the peer links, the run record kept durably before the answer leaves.

Two paths, chosen by the session's analysis: a decision step (reveal modes sum / blinded / sign: the reveal
mode's party machine on the analysis's terms, charged per batch) and a step of an analysis with its own run
state (``parties.run_state``; federated ABCDP, ``parties.abcdp``: the run's epsilon charged once, the state
advanced with the revealed output). The mathematics and the protocols are not here: this module orders their
calls and says what is charged, kept and audited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hss.modes import TermsBatch
from parties import ahead
from parties.analyses import AnalysisError
from parties.deviate import tamper_outputs
from parties.exchange import RunOutcome
from parties.local_blocks import LocalContext, local_blocks_of
from parties.peering import drive_step
from parties.policy import check_decision_budget, paid_run_step, recharge_reason
from parties.refusal import Reason, Refusal
from parties.replay import LocalStep, RunRecord, SvtStep, plan_digest, step_digest
from parties.run_state import RunStateAnalysis, RunStateError, run_state_of
from parties.session import Party, Session, noise_rng, reveal_rng
from proto import party_pb2, serde, serde_session
from proto.records import EvaluateAnswer, RunCharge, RunStepRef
from proto.spec import MAX_RUN_STEP


@dataclass(frozen=True)
class Step:
    """One admitted Evaluate: session step ``number`` (run step ``run_step``, 0 without a run), batch ``n``,
    the request's inputs (parsed where each path needs them), the step's time left and its start clocks."""

    number: int
    n: int
    inputs: Any  # party_pb2 inputs of the request
    timeout: Callable[[], float]  # seconds left for the exchange, read when it starts
    t_begin: float  # time.perf_counter() at the start of the handler
    cpu_begin: float  # time.process_time() at the start of the handler
    run_step: int = 0
    digest: bytes = b""  # the run step's digest (parties.replay.step_digest); b"" without a run
    approval: Any = None  # the live approval of the session's study (parties.governance), if any


async def evaluate(party: Party, sess: Session, step: Step) -> tuple[Any, dict[str, Any]]:
    """The answer to one admitted Evaluate and its audit fields."""
    cfg, store = party.cfg, party.store
    approval = store.governance.admit(sess.spec)  # a revoked or expired approval stops the next step
    run_step = sess.spec.run_step(step.number)  # 0: no run_id
    if run_step > MAX_RUN_STEP:  # refused before anything runs: run steps live in JSON files
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"step {step.number} would be run step {run_step} of run {sess.spec.run_id!r}, past 2^53",
        )
    digest, run_audit, replayed = run_step_check(party, sess, step, run_step)
    step = replace(step, run_step=run_step, digest=digest, approval=approval)
    state = run_state_of(sess.analysis)
    if replayed is not None:  # run resume: stored messages, nothing computed or charged
        if sess.ahead is not None:  # (a replayed step is a session's step 1, which has no pool)
            pooled, sess.ahead = sess.ahead, None
            await pooled.cancel()
        await sess.mailbox.finish(step.number)  # no frames were exchanged for it; the next step is step + 1
        if state is not None:  # the analysis's run state moves past the step
            run_audit.update(state.replayed())
        blocks = local_blocks_of(sess.analysis)
        if blocks is not None and sess.run.held is not None:  # a blocked run's own effect moves past it
            blocks.local_replayed(sess.run.held.local)
        return replayed, run_audit
    assert sess.keys is not None  # a ready session has its keys
    # charged before: same inputs, same noise
    paid = paid_run_step(store.privacy, sess.spec, sess.keys.run_key_id, run_step, digest)
    recharge = recharge_reason(store.privacy, sess.spec, run_step) if paid is None else ""
    if paid is None:
        check_decision_budget(cfg, store.decisions_used, step.n)
    if state is not None:  # an analysis with its own run state: charged once per run, its own protocol
        return await _evaluate_run_state(party, sess, step, run_audit, state)
    return await _evaluate_decisions(party, sess, step, paid, recharge, run_audit)


async def _evaluate_decisions(
    party: Party, sess: Session, step: Step, paid: RunCharge | None, recharge: str, run_audit: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    cfg, store, spec, n = party.cfg, party.store, sess.spec, step.n
    # step k's precompute made after step k - 1 (parties.ahead): finished first, before anything is charged
    material, round_base, pool_audit = await ahead.take(sess, step.number, n)
    privacy_events: list[Any] = []
    run_state = None  # a run charged at its worst record: its state after the batch, kept with the charge
    inputs = _inputs(party, step)  # public: the batch's proposals, read before any record is touched
    if paid is None:  # privacy budget: this party's own events for the batch, dry-run before touching data
        try:
            privacy_events, run_state = store.privacy.run_events_for(cfg, sess.analysis, spec, n, inputs)
        except AnalysisError as exc:  # a batch that cannot even be priced (bad inputs)
            raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc
        store.privacy.check(privacy_events, f"step {step.number} (batch of {n})")
        store.governance.check(step.approval, privacy_events, f"step {step.number} (batch of {n})")
    t_terms = time.perf_counter()
    # the counts are for the audit only
    machine, clipped = _decision_machine(party, sess, step, inputs, material, round_base)
    prepare_s = time.perf_counter() - t_terms
    store.freeze_point("before-charge", step.run_step)
    if paid is None:
        _charge_decisions(party, sess, step, privacy_events, run_state)
        if recharge:
            why = f"run step {step.run_step} charged again: {recharge}"
            run_audit.update(recharged=True, detail=why)
    else:
        run_audit.update(
            decisions_charged=0,
            charged_in=paid.session,
            detail=f"run step {step.run_step} evaluated afresh with the noise of its charge in session "
            f"{paid.session} (same inputs, same run key): not charged again",
        )
    t_drive = time.perf_counter()
    out = await drive_step(party, sess, machine, step.number, n, step.timeout, round_base)
    blocks = local_blocks_of(sess.analysis)
    local, drawn = blocks.local_step() if blocks is not None else (None, None)
    _keep(party, sess, step, out, local=local, drawn=drawn)
    sess.last_step = step.number
    ahead.start(party, sess, step.number + 1, n)  # the next step's precompute, if the session asks for it
    clamped = int(np.count_nonzero(out.result.clamped)) if hasattr(out.result, "clamped") else 0
    # timings (this party's own clocks, read by `confar bench network`): compute = inputs, terms,
    # machine set-up and steps (wall); charge = the budget check and the ledger's durable write before
    # any share leaves; send = handing frames to the links; wait = until each round's frames were all
    # in; handler_ms is the whole handler; cpu_ms is the CPU time of the whole daemon process (all
    # threads: compute, gRPC, TLS) meanwhile
    return _answer(sess, step, out, clamped, party.cfg.deviate), {
        **run_audit,
        **pool_audit,
        "decisions": n,
        "rounds": out.rounds,
        "clamped": clamped,
        **clipped,
        "compute_ms": round((prepare_s + out.stepped_s) * 1e3, 3),
        "charge_ms": round((t_drive - t_terms - prepare_s) * 1e3, 3),
        "send_ms": round(out.sent_s * 1e3, 3),
        "wait_ms": round(out.waited_s * 1e3, 3),
        "handler_ms": round((time.perf_counter() - step.t_begin) * 1e3, 3),
        "cpu_ms": round((time.process_time() - step.cpu_begin) * 1e3, 3),
    }


def _inputs(party: Party, step: Step) -> dict[str, Any]:
    """The batch's public input arrays (INVALID_ARGUMENT when they do not decode)."""
    try:
        return serde.inputs_from_proto(step.inputs, party.cfg.max_message_bytes)
    except serde.WireError as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc


def _decision_machine(
    party: Party, sess: Session, step: Step, inputs: dict[str, Any], material: Any = None, round_base: int = 0
) -> tuple[Any, dict[str, int]]:
    """The analysis's terms for the batch and this party's decision machine (sign mode: with ``material``
    made ahead, only the online rounds; ``round_base``: the step's rounds a pool ran), with the batch's
    counts for this party's audit line only: clipped log-ratios (a penalty with c = "clip") and, on the
    session's first batch, records moved into the model's public covariate region; INVALID_ARGUMENT on bad
    inputs."""
    spec = sess.spec
    keys = sess.keys
    assert keys is not None
    blocks = local_blocks_of(sess.analysis)
    if blocks is not None:  # a blocked run: where this registry's own effect stands (parties.local_blocks)
        held = sess.run.held
        blocks.bind_local(
            LocalContext(
                sess.me,
                spec.run_id,
                held.local if held is not None else None,
                held.run_step if held is not None else 0,
                party.store.replays,
                party.store.effects,
                party.cfg.release_effects,
                party.store.privacy.charged_steps if party.store.privacy.enforced else None,
            )
        )
    try:
        terms = sess.analysis.terms(
            party.data,
            inputs,
            step.n,
            spec.m,
            spec.reveal_mode,
            noise_rng(keys, spec, step.number, step.digest),
        )
        assert sess.ctx is not None
        batch = TermsBatch(
            terms.values,
            terms.public,
            step.number,
            keys.proto_rng,
            blind=terms.blind,
            precompute=spec.sign_precompute,
            material=material,
            lazy=sess.analysis.lazy_coin(),
            reveal_rng=reveal_rng(keys, spec, step.number, step.digest),
            security=spec.security,
            rounds_before=round_base,
        )
        machine = spec.protocol.machine(sess.ctx, batch)  # the session's mode under its security
        counts = {"clipped_records": terms.clipped_records, "clipped_covariates": terms.clipped_covariates}
        return machine, {k: v for k, v in counts.items() if v is not None}
    except (serde.WireError, AnalysisError, ValueError) as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc


def _charge_decisions(
    party: Party, sess: Session, step: Step, privacy_events: list[Any], run_state: Any = None
) -> None:
    """The budget is charged before any share leaves this party (a failed run still counts): the privacy
    events, the run step they pay for, the run's worst-record state after them (``run_state``, when it is
    charged per run) and the decision count in one ledger journal record (fdatasync)."""
    store, spec = party.store, sess.spec
    assert sess.keys is not None
    sid16 = spec.session_id.hex()[:16]
    charge = None
    if step.run_step:
        rs = step.run_step
        charge = RunCharge(spec.run_id, sid16, rs, rs, step.n, step.digest.hex(), sess.keys.run_key_id)
    store.charge(privacy_events, charge, step.n, run_state)
    store.freeze_point("after-charge", step.run_step)


def _keep(
    party: Party,
    sess: Session,
    step: Step,
    out: RunOutcome,
    state: SvtStep | None = None,
    *,
    local: LocalStep | None = None,
    drawn: tuple[int, Any] | None = None,
) -> None:
    """A completed run step, kept durably before the messages leave (unless the session was superseded);
    ``state``: the public run state an analysis with run state keeps with it; ``local``: a blocked run's own
    block (secret, this registry's) and ``drawn`` the effect draw the step made known (``parties.effects``,
    appended first: a sweep kept twice keeps the same draw)."""
    if step.run_step and sess.state == "ready":
        if drawn is not None:
            party.store.effects.append(sess.spec.run_id, drawn[0], drawn[1])
        ref = RunStepRef(sess.spec.run_id, step.run_step, step.digest, sess.spec.session_id)
        held = RunRecord(
            ref,
            step.n,
            out.rounds,
            tuple(out.to_receiver),
            data_sha256=party.data_sha256,
            svt=state,
            security=sess.spec.security,
            local=local,
        )
        sess.run = replace(sess.run, held=held)
        party.store.replays.save(held)
        party.store.freeze_point("before-answer", step.run_step)


def _answer(
    sess: Session,
    step: Step,
    out: RunOutcome,
    clamped: int,
    party_deviations: frozenset[tuple[str, int]] = frozenset(),
) -> party_pb2.EvaluateResponse:
    messages = tuple(out.to_receiver)
    if party_deviations:  # testing: this daemon alters its output shares on purpose (parties/deviate.py)
        messages = tamper_outputs(party_deviations, messages)
    answer = EvaluateAnswer(sess.spec.session_id, step.number, messages, out.rounds, clamped, step.run_step)
    return serde_session.evaluate_response_to_proto(answer)


def run_step_check(
    party: Party, sess: Session, step: Step, run_step: int
) -> tuple[bytes, dict[str, Any], party_pb2.EvaluateResponse | None]:
    """Run resume (parties.replay) for session step ``step`` = run step ``run_step`` (0: no run).

    Returns the step's digest, audit fields and, when every party holds this run step from one session
    with the same digest, the stored answer (replay: no computation, no charge). A different digest for
    the run step this party holds is refused; the same digest without every party holding it is
    evaluated afresh (charged again only when :func:`parties.policy.paid_run_step` cannot vouch for it)."""
    if not run_step:
        return b"", {}, None
    spec, n = sess.spec, step.n
    try:
        inputs = serde.inputs_from_proto(step.inputs, party.cfg.max_message_bytes)
    except serde.WireError as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc
    digest = step_digest(spec, run_step, n, inputs)
    audit: dict[str, Any] = {"run_id": spec.run_id, "run_step": run_step}
    held = sess.run.held
    if held is None or held.run_step != run_step:
        return digest, audit, None
    if held.ref.digest != digest:
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"run step {run_step} of run {spec.run_id!r} was completed here with other inputs "
            f"(digest {held.ref.digest.hex()[:16]}…, now {digest.hex()[:16]}…; batch {held.batch}, "
            f"now {n}); refusing to evaluate a completed run step with different inputs",
        )
    if sess.run.replay is None or sess.run.replay.ref != held.ref:
        audit["detail"] = f"run step {run_step} evaluated afresh: not every party holds it"
        return digest, audit, None
    if held.security != spec.security:  # its messages decode only under the security that made them
        audit["detail"] = (
            f"run step {run_step} evaluated afresh: held from a session with security {held.security!r}, "
            f"this one is {spec.security!r} (the same noise: the same release)"
        )
        return digest, audit, None
    sess.last_step = step.number
    resp = serde_session.evaluate_response_to_proto(
        EvaluateAnswer(spec.session_id, step.number, tuple(held.messages), held.rounds, 0, run_step, True)
    )
    audit.update(decisions=0, replayed=True, detail=f"replayed run step {run_step}", rounds=held.rounds)
    return digest, audit, resp


async def _evaluate_run_state(
    party: Party, sess: Session, step: Step, run_audit: dict[str, Any], state: RunStateAnalysis
) -> tuple[Any, dict[str, Any]]:
    """One step of an analysis with its own run state (``parties.run_state``; federated ABCDP's batch of
    candidates, ``parties.abcdp``).

    The run's whole privacy event is charged once, at the session's first step, checked and persisted
    before any record is read; the analysis then makes its state from the records and advances it with each
    step's revealed output. A finished state refuses further steps.

    A session of a run (``run_id``) is resumable: the run is charged once per run (recorded as run step 0 of
    the run and recognised by every later session under the same run noise key); a run step's noise comes
    from the run noise key (keyed by the step digest); the state starts where the analysis put it at open
    (``parties.session.run_state_at_open``); and each completed step is kept (its record with the public
    state, ``parties.replay``) before its answer leaves. A re-evaluated run step (same inputs, from the state
    before it) must reveal what it revealed the first time, which the analysis checks."""
    spec, store, n, number, run_step = sess.spec, party.store, step.n, step.number, step.run_step
    extra: dict[str, Any] = dict(run_audit)
    t_terms = time.perf_counter()
    finished = state.finished(spec)
    if finished is not None:
        raise Refusal(Reason.FAILED_PRECONDITION, f"step {number}: {finished}")
    try:  # the public inputs first: a malformed request is refused before anything is charged
        inputs = serde.inputs_from_proto(step.inputs, party.cfg.max_message_bytes)
        public = state.step_input(spec, inputs, n)
    except (serde.WireError, AnalysisError, ValueError) as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {number}: {exc}") from exc
    store.freeze_point("before-charge", run_step)
    if not state.started:
        _charge_whole_run(party, sess, state, extra)
        _start_run_state(party, sess, state, step)
    keys = sess.keys
    try:
        assert sess.ctx is not None and keys is not None
        query = noise_rng(keys, spec, number, step.digest) if spec.run_id else None
        machine = state.machine(sess.ctx, public, number, keys.proto_rng, query)
    except RunStateError as exc:
        sess.fail(f"step {number}: {exc}")
        raise Refusal(Reason.FAILED_PRECONDITION, f"step {number}: {exc}") from exc
    except (serde.WireError, AnalysisError, ValueError) as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {number}: {exc}") from exc
    prepare_s = time.perf_counter() - t_terms
    if not state.repeats(run_step):  # a step completed here before was counted then
        store.count_decisions(n)
    else:
        extra.update(decisions_charged=0, detail=f"run step {run_step} evaluated again (same inputs)")
    store.freeze_point("after-charge", run_step)
    out = await drive_step(party, sess, machine, number, n, step.timeout)
    sess.last_step = number
    try:
        accepts, kept = state.settle(spec, run_step, out.result.revealed)
    except RunStateError as exc:  # more accepts revealed than allowed, other bits: a deviation or corruption
        sess.fail(f"step {number}: {exc}")
        raise Refusal(Reason.FAILED_PRECONDITION, f"step {number}: {exc}") from exc
    _keep(party, sess, step, out, kept)
    clamped = int(np.count_nonzero(out.result.clamped))
    return _answer(sess, step, out, clamped), {
        **extra,
        "decisions": n,
        "rounds": out.rounds,
        "clamped": clamped,
        "accepts": accepts,
        **state.audit(),
        "compute_ms": round((prepare_s + out.stepped_s) * 1e3, 3),
        "handler_ms": round((time.perf_counter() - step.t_begin) * 1e3, 3),
        "cpu_ms": round((time.process_time() - step.cpu_begin) * 1e3, 3),
    }


def _charge_whole_run(party: Party, sess: Session, state: RunStateAnalysis, extra: dict[str, Any]) -> None:
    """The run's privacy event, before any record is touched: once per run (per session without a run;
    a run's charge is run step 0 under the run's plan digest and noise key, found by its later sessions)."""
    cfg, privacy, spec, keys = party.cfg, party.store.privacy, sess.spec, sess.keys
    assert keys is not None
    events = privacy.events_for(cfg, sess.analysis, spec, 1)
    plan = plan_digest(spec) if spec.run_id else b""
    paid = None
    if spec.run_id:
        paid = privacy.charged_run_step(spec.run_id, 0, plan, keys.run_key_id)
    if paid is None:
        privacy.check(events, f"{state.whole_run} (charged once)")
        party.store.governance.check(party.store.governance.admit(spec), events, state.whole_run)
        charge = None
        if spec.run_id:
            sid16 = spec.session_id.hex()[:16]
            charge = RunCharge(spec.run_id, sid16, 0, 0, 0, plan.hex(), keys.run_key_id)
        party.store.charge(events, charge)
        extra["charged"] = [e.to_dict() for e in events]
    else:
        extra.update(
            charged_in=paid.session,
            detail=f"{state.whole_run}'s epsilon was charged in session {paid.session} (same plan, "
            "same run key): not charged again",
        )


def _start_run_state(party: Party, sess: Session, state: RunStateAnalysis, step: Step) -> None:
    """The analysis's state made from the records (after the charge: a failure fails the session, which is
    never charged again)."""
    assert sess.keys is not None
    try:
        state.start(sess.spec, party.data, sess.keys.noise_key)
    except (AnalysisError, ValueError) as exc:
        sess.fail(f"step {step.number}: {exc}")  # charged: never charge it again
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc
