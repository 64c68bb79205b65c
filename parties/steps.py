"""One Evaluate at this party, once the service has admitted it (caller, session, step order, batch size):
run resume (replay a step every party holds; do not charge again a step whose charge is on record), the
budgets checked and charged before any share leaves this party, the terms and the protocol machine, the
step driven over the peer links, the run record kept durably before the answer leaves.

Two paths: a decision step (reveal modes sum / blinded / sign: ``hss.protocols.decide_party`` on the
analysis's terms) and a federated ABCDP step (reveal mode svt, ``parties.abcdp``: the run's epsilon charged
once, the SVT state advanced with the revealed bits). The mathematics and the protocols are not here: this
module orders their calls and says what is charged, kept and audited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hss.modes import FEATURES, reveal_mode
from hss.randomness import SecureRandom, derive_key
from parties import abcdp, ahead
from parties.analyses import AnalysisError, lazy_coin
from parties.exchange import RunOutcome
from parties.peering import drive_step
from parties.policy import check_decision_budget, paid_run_step, recharge_reason
from parties.refusal import Reason, Refusal
from parties.replay import RunRecord, SvtStep, step_digest
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


async def evaluate(party: Party, sess: Session, step: Step) -> tuple[Any, dict[str, Any]]:
    """The answer to one admitted Evaluate and its audit fields."""
    cfg, store = party.cfg, party.store
    run_step = sess.spec.run_step(step.number)  # 0: no run_id
    if run_step > MAX_RUN_STEP:  # refused before anything runs: run steps live in JSON files
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"step {step.number} would be run step {run_step} of run {sess.spec.run_id!r}, past 2^53",
        )
    digest, run_audit, replayed = run_step_check(party, sess, step, run_step)
    step = replace(step, run_step=run_step, digest=digest)
    if replayed is not None:  # run resume: stored messages, nothing computed or charged
        if sess.ahead is not None:  # (a replayed step is a session's step 1, which has no pool)
            pooled, sess.ahead = sess.ahead, None
            await pooled.cancel()
        await sess.mailbox.finish(step.number)  # no frames were exchanged for it; the next step is step + 1
        resumed = sess.run.svt_resume
        if resumed is not None and resumed.after_redo is not None:  # ABCDP: the state after the step
            sess.run = replace(sess.run, svt_resume=abcdp.SvtResume(resumed.after_redo))
            run_audit["abcdp_count"] = resumed.after_redo["count"]
        return replayed, run_audit
    assert sess.keys is not None  # a ready session has its keys
    # charged before: same inputs, same noise
    paid = paid_run_step(store.privacy, sess.spec, sess.keys.run_key_id, run_step, digest)
    recharge = recharge_reason(store.privacy, sess.spec, run_step) if paid is None else ""
    if paid is None:
        check_decision_budget(cfg, store.decisions_used, step.n)
    if reveal_mode(sess.spec.reveal_mode).inputs == FEATURES:  # federated ABCDP: own charging and protocol
        return await evaluate_svt(party, sess, step, run_audit)
    return await _evaluate_decisions(party, sess, step, paid, recharge, run_audit)


async def _evaluate_decisions(
    party: Party, sess: Session, step: Step, paid: RunCharge | None, recharge: str, run_audit: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    cfg, store, spec, n = party.cfg, party.store, sess.spec, step.n
    # step k's precompute made after step k - 1 (parties.ahead): finished first, before anything is charged
    material, round_base, pool_audit = await ahead.take(sess, step.number, n)
    privacy_events: list[Any] = []
    if paid is None:  # privacy budget: this party's own events for the batch, dry-run before touching data
        privacy_events = store.privacy.events_for(cfg, sess.analysis, spec, n)
        store.privacy.check(privacy_events, f"step {step.number} (batch of {n})")
    t_terms = time.perf_counter()
    machine, clipped = _decision_machine(party, sess, step, material)
    prepare_s = time.perf_counter() - t_terms
    store.freeze_point("before-charge", step.run_step)
    if paid is None:
        _charge_decisions(party, sess, step, privacy_events)
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
    _keep(party, sess, step, out)
    sess.last_step = step.number
    ahead.start(party, sess, step.number + 1, n)  # the next step's precompute, if the session asks for it
    clamped = int(np.count_nonzero(out.result.clamped)) if hasattr(out.result, "clamped") else 0
    # timings (this party's own clocks, read by `confar bench network`): compute = inputs, terms,
    # machine set-up and steps (wall); charge = the budget check and the ledger's durable write before
    # any share leaves; send = handing frames to the links; wait = until each round's frames were all
    # in; handler_ms is the whole handler; cpu_ms is the CPU time of the whole daemon process (all
    # threads: compute, gRPC, TLS) meanwhile
    return _answer(sess, step, out, clamped), {
        **run_audit,
        **pool_audit,
        "decisions": n,
        "rounds": out.rounds,
        "clamped": clamped,
        **({} if clipped is None else {"clipped_records": clipped}),
        "compute_ms": round((prepare_s + out.stepped_s) * 1e3, 3),
        "charge_ms": round((t_drive - t_terms - prepare_s) * 1e3, 3),
        "send_ms": round(out.sent_s * 1e3, 3),
        "wait_ms": round(out.waited_s * 1e3, 3),
        "handler_ms": round((time.perf_counter() - step.t_begin) * 1e3, 3),
        "cpu_ms": round((time.process_time() - step.cpu_begin) * 1e3, 3),
    }


def _decision_machine(
    party: Party, sess: Session, step: Step, material: Any = None
) -> tuple[Any, int | None]:
    """The analysis's terms for the batch and this party's decision machine (sign mode: with ``material``
    made ahead, only the online rounds), with the batch's count of clipped log-ratios (None: the penalty
    does not clip; the count goes to this party's audit line only); INVALID_ARGUMENT on bad inputs."""
    spec = sess.spec
    keys = sess.keys
    assert keys is not None
    try:
        inputs = serde.inputs_from_proto(step.inputs, party.cfg.max_message_bytes)
        terms = sess.analysis.terms(
            party.data,
            spec.model_params,
            inputs,
            step.n,
            spec.m,
            spec.reveal_mode,
            noise_rng(keys, spec, step.number, step.digest),
        )
        assert sess.ctx is not None
        machine = reveal_mode(spec.reveal_mode).party(  # hss.protocols.decide_party bound to the mode
            sess.ctx,
            terms.values,
            terms.public,
            step.number,
            keys.proto_rng,
            blind=terms.blind,
            precompute=spec.sign_precompute,
            **({} if material is None else {"material": material}),
            lazy=lazy_coin(spec.model_params),
            reveal_rng=reveal_rng(keys, spec, step.number, step.digest),
        )
        return machine, terms.clipped_records
    except (serde.WireError, AnalysisError, ValueError) as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc


def _charge_decisions(party: Party, sess: Session, step: Step, privacy_events: list[Any]) -> None:
    """The budget is charged before any share leaves this party (a failed run still counts): persisted
    (fsync, atomic rename) with the run step, then the decision count."""
    store, spec = party.store, sess.spec
    assert sess.keys is not None
    sid16 = spec.session_id.hex()[:16]
    charge = None
    if step.run_step:
        rs = step.run_step
        charge = RunCharge(spec.run_id, sid16, rs, rs, step.n, step.digest.hex(), sess.keys.run_key_id)
    store.privacy.commit(privacy_events, charge)
    store.count_decisions(step.n)
    store.freeze_point("after-charge", step.run_step)


def _keep(party: Party, sess: Session, step: Step, out: RunOutcome, svt: SvtStep | None = None) -> None:
    """A completed run step, kept durably before the messages leave (unless the session was superseded)."""
    if step.run_step and sess.state == "ready":
        ref = RunStepRef(sess.spec.run_id, step.run_step, step.digest, sess.spec.session_id)
        held = RunRecord(
            ref, step.n, out.rounds, tuple(out.to_receiver), data_sha256=party.data_sha256, svt=svt
        )
        sess.run = replace(sess.run, held=held)
        party.store.replays.save(held)
        party.store.freeze_point("before-answer", step.run_step)


def _answer(sess: Session, step: Step, out: RunOutcome, clamped: int) -> party_pb2.EvaluateResponse:
    answer = EvaluateAnswer(
        sess.spec.session_id, step.number, tuple(out.to_receiver), out.rounds, clamped, step.run_step
    )
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
    sess.last_step = step.number
    resp = serde_session.evaluate_response_to_proto(
        EvaluateAnswer(spec.session_id, step.number, tuple(held.messages), held.rounds, 0, run_step, True)
    )
    audit.update(decisions=0, replayed=True, detail=f"replayed run step {run_step}", rounds=held.rounds)
    return digest, audit, resp


async def evaluate_svt(
    party: Party, sess: Session, step: Step, run_audit: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """One batch of federated ABCDP candidates (reveal mode svt, ``parties.abcdp``).

    The run's whole-run epsilon is charged once, at the session's first step, checked and persisted
    before any record is read; the feature sum and the SVT noise state live in the session. Once c
    accepts have been revealed the session refuses further steps.

    A session of a run (``run_id``) is resumable: the run's epsilon is charged once per run (recorded as
    run step 0 of the run and recognised by every later session under the same run noise key); the
    threshold share of each epoch and the query noise of each run step come from the run noise key (the
    latter keyed by the step digest); the SVT state starts where :func:`parties.abcdp.resume_at_open`
    put it; and each completed step is kept (its record with the SVT counters before it and its bits,
    ``parties.replay``) before its answer leaves. A re-evaluated run step (same inputs, from the state
    before it) reveals the bits it revealed the first time, which is checked."""
    spec, store, n, number, run_step = sess.spec, party.store, step.n, step.number, step.run_step
    extra: dict[str, Any] = dict(run_audit)
    t_terms = time.perf_counter()
    start = sess.run.svt_resume
    now = sess.svt.state.counters.to_dict() if sess.svt is not None else start.counters if start else {}
    if now.get("done"):
        count = now["count"]
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"step {number}: the ABCDP run is finished: c accepts reached ({count} of "
            f"c = {abcdp.plan_of(spec.model_params).c}); no further candidate is decided in this session "
            "(close it)",
        )
    try:  # the public inputs first: a malformed request is refused before anything is charged
        inputs = serde.inputs_from_proto(step.inputs, party.cfg.max_message_bytes)
        phibar = abcdp.phibar_input(spec, inputs, n)
    except (serde.WireError, AnalysisError, ValueError) as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {number}: {exc}") from exc
    store.freeze_point("before-charge", run_step)
    run = sess.svt if sess.svt is not None else _svt_start(party, sess, step, extra)
    before = run.state.counters.to_dict()
    redo = start.redo if start is not None and start.redo is not None else None
    if redo is not None and redo.run_step != run_step:
        redo = None  # only the session's first step re-evaluates the step completed here last
    keys = sess.keys
    try:
        assert sess.ctx is not None and keys is not None
        query = noise_rng(keys, spec, number, step.digest) if spec.run_id else None
        machine = run.machine(sess.ctx, phibar, number, keys.proto_rng, query)
    except abcdp.SvtRunError as exc:
        sess.fail(f"step {number}: {exc}")
        raise Refusal(Reason.FAILED_PRECONDITION, f"step {number}: {exc}") from exc
    except (serde.WireError, AnalysisError, ValueError) as exc:
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {number}: {exc}") from exc
    prepare_s = time.perf_counter() - t_terms
    if redo is None:  # a step completed here before was counted then
        store.count_decisions(n)
    else:
        extra.update(decisions_charged=0, detail=f"run step {run_step} evaluated again (same inputs)")
    store.freeze_point("after-charge", run_step)
    out = await drive_step(party, sess, machine, number, n, step.timeout)
    sess.last_step = number
    accepts = _settle_svt(sess, run, step, out, redo)
    bits = np.asarray(out.result.revealed, dtype=bool)
    _keep(party, sess, step, out, SvtStep(abcdp.plan_digest(spec), before, bits) if run_step else None)
    clamped = int(np.count_nonzero(out.result.clamped))
    return _answer(sess, step, out, clamped), {
        **extra,
        "decisions": n,
        "rounds": out.rounds,
        "clamped": clamped,
        "accepts": accepts,
        **run.audit(),
        "compute_ms": round((prepare_s + out.stepped_s) * 1e3, 3),
        "handler_ms": round((time.perf_counter() - step.t_begin) * 1e3, 3),
        "cpu_ms": round((time.process_time() - step.cpu_begin) * 1e3, 3),
    }


def _settle_svt(sess: Session, run: abcdp.SvtRun, step: Step, out: RunOutcome, redo: RunRecord | None) -> int:
    """Advance the SVT state with the revealed bits; a re-evaluated run step must reveal the bits it revealed
    the first time. Either failing fails the session (a deviation or corruption): no answer."""
    try:
        accepts = run.settle(out.result.revealed)
        first = redo.svt.revealed if redo is not None and redo.svt is not None else None
        if first is not None and not np.array_equal(out.result.revealed, first):
            raise abcdp.SvtRunError(
                f"run step {step.run_step} of run {sess.spec.run_id!r}, evaluated again with the same inputs "
                "from the same state, revealed other bits than the first time; not answering"
            )
    except abcdp.SvtRunError as exc:  # more accepts revealed than allowed: a deviation or corruption
        sess.fail(f"step {step.number}: {exc}")
        raise Refusal(Reason.FAILED_PRECONDITION, f"step {step.number}: {exc}") from exc
    return accepts


def _svt_start(party: Party, sess: Session, step: Step, extra: dict[str, Any]) -> abcdp.SvtRun:
    """The session's first ABCDP step: the run's privacy event charged (once per run; per session without a
    run) before any record is touched, then the feature sum and the SVT state made."""
    cfg, privacy, spec = party.cfg, party.store.privacy, sess.spec
    keys, start = sess.keys, sess.run.svt_resume
    assert keys is not None
    # the run's privacy event, before any record is touched: once per run (per session without)
    events = privacy.events_for(cfg, sess.analysis, spec, 1)
    plan = abcdp.plan_digest(spec) if spec.run_id else b""
    paid = None
    if spec.run_id:
        paid = privacy.charged_run_step(spec.run_id, 0, plan, keys.run_key_id)
    if paid is None:
        privacy.check(events, "the ABCDP run (charged once)")
        charge = None
        if spec.run_id:
            sid16 = spec.session_id.hex()[:16]
            charge = RunCharge(spec.run_id, sid16, 0, 0, 0, plan.hex(), keys.run_key_id)
        privacy.commit(events, charge)
        extra["charged"] = [e.to_dict() for e in events]
    else:
        extra.update(
            charged_in=paid.session,
            detail=f"the ABCDP run's epsilon was charged in session {paid.session} (same plan, "
            "same run key): not charged again",
        )
    try:
        if spec.run_id:
            assert start is not None
            sess.svt = abcdp.SvtRun.start(
                spec.model_params,
                party.data,
                spec.m,
                None,
                threshold_rng=abcdp.threshold_source(keys.noise_key, plan),
                counters=start.counters,
            )
        else:
            key = derive_key(keys.noise_key, spec.session_id, b"svt-state")
            sess.svt = abcdp.SvtRun.start(spec.model_params, party.data, spec.m, SecureRandom(key))
    except (AnalysisError, ValueError) as exc:
        sess.fail(f"step {step.number}: {exc}")  # charged: never charge it again
        raise Refusal(Reason.INVALID_ARGUMENT, f"step {step.number}: {exc}") from exc
    return sess.svt
