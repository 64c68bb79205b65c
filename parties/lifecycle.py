"""The moves of a session's life that the Party service runs, without gRPC: finding a session in the state an
RPC needs, opening one (the registry's checks in their order, then the session made, and the answer with
this party's signed key), connecting it (the peers' key bundles, the links, the key setup), a link probe,
the privacy dry run of a planned session and the party's status.

``parties.service`` decodes each request (``proto.serde*``), calls one of these and encodes the answer with
its audit line; what they raise is a :class:`parties.refusal.Refusal` naming the reason, which the service
answers with its status code. The session's own state machine (what needs no network) is
``parties.session``; the links and frames ``parties.peering``; a step ``parties.steps``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from hss.authenticated import key_setup_checked
from hss.runtime import ProtocolError
from hss.session import PartyContext, key_setup
from parties import ahead, e2e
from parties.analyses import Analysis, AnalysisError
from parties.exchange import PROBE_MAX_ROUNDS, LinkLost, Wire, drive, probe_machine
from parties.links import LinkError
from parties.peering import drive_step, open_links, sender, verify_bundles
from parties.policy import (
    check_analysis,
    check_data_model,
    check_policy,
    check_privacy_at_open,
    check_session_limit,
    run_paid,
)
from parties.privacy_budget import charged_per_run
from parties.refusal import Reason, Refusal
from parties.registry import get_analysis
from parties.session import (
    LIVE,
    Party,
    RunPosition,
    Session,
    agreed_replay,
    check_next_step,
    new_session,
    run_resume_at_open,
    run_state_at_open,
    teardown,
)
from proto import peer_pb2
from proto.records import KeyBundle, PartyStatus, PlanAnswer, RunStepRef, SessionState
from proto.serde_privacy import PlanCall
from proto.serde_session import OpenAnswer, ProbeCall
from proto.spec import SessionSpec
from proto.study import Study


def session_in(sessions: dict[bytes, Session], sid: bytes, want: tuple[str, ...] = ("ready",)) -> Session:
    """The session ``sid`` of ``sessions`` in one of the states ``want``; FAILED_PRECONDITION naming what it
    is (unknown, or in another state and why) otherwise."""
    sess = sessions.get(bytes(sid))
    if sess is None:
        raise Refusal(Reason.FAILED_PRECONDITION, f"unknown session {bytes(sid).hex()[:16]}…: open it first")
    if sess.state not in want:
        extra = f" ({sess.failure})" if sess.failure else ""
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"session {sess.spec.session_id.hex()[:16]}… is {sess.state}{extra}; expected {'/'.join(want)}",
        )
    return sess


@dataclass(frozen=True)
class Opened:
    """A session this registry admitted: the session (kept in the service's table), the sessions of its run
    it superseded (closed), and the audit fields of its run key and run state."""

    session: Session
    superseded: list[bytes]
    audit: dict[str, Any]


async def open_session(party: Party, sessions: dict[bytes, Session], spec: SessionSpec) -> Opened:
    """Admit the session ``spec`` and make it (its keys; for a run, where the run resumes), in this order:
    the policy (caller-independent limits, allowlists, bounds), the study's approval, the session id, the run
    it resumes, the session limit, the analysis and its plan, the analysis's run state, and the privacy
    budget at open (a run charged once that was charged here has nothing left to fit). The run's earlier
    session at this party is closed (its coordinator is gone) and the new one entered in ``sessions``."""
    cfg, store = party.cfg, party.store
    check_policy(cfg, spec, store.decisions_used)
    approval = store.governance.admit(spec)  # the study approved here (issue 37), or refused
    if spec.session_id in sessions:
        raise Refusal(Reason.ALREADY_EXISTS, f"session {spec.session_id.hex()[:16]}… already exists")
    held, superseded = run_resume_at_open(party, sessions, spec)
    live = sum(s.state in LIVE for k, s in sessions.items() if k not in superseded)
    check_session_limit(cfg, live)
    analysis = check_analysis(cfg, spec, party.data)
    state_audit = run_state_at_open(party, spec, analysis, held)
    per_run = charged_per_run(spec)

    def charged_already() -> bool:
        return bool(per_run and spec.run_id and run_paid(store.privacy, store.replays, cfg, spec) is not None)

    await check_privacy_at_open(
        store.privacy,
        cfg,
        analysis,
        spec,
        charged_already,
        lambda one: store.governance.check(approval, one, "a single decision of the study"),
    )
    sess, run_key_audit = new_session(party, spec, analysis, RunPosition(held, None))
    for old in superseded:  # the run's earlier session: its coordinator is gone
        await teardown(sessions[old], "closed")
        sessions[old].failure = f"superseded by session {spec.session_id.hex()[:16]}…"
    sessions[spec.session_id] = sess
    return Opened(sess, superseded, {**run_key_audit, **state_audit})


def open_answer(party: Party, opened: Opened) -> tuple[OpenAnswer, dict[str, Any]]:
    """OpenSession's answer (this party's X25519 key, signed with its TLS key, and what it holds of the
    session's run) and its audit fields: the analysis, mode, topology, security, the study, the snapshot the
    session runs on and, for a run, the run key's and run state's (``opened.audit``)."""
    sess, cfg, tls = opened.session, party.cfg, party.tls
    spec, keys = sess.spec, sess.keys
    assert keys is not None
    pub = e2e.public_bytes(keys.x25519)
    sig, cert = b"", b""
    if tls is not None:
        sig = e2e.sign_bundle(tls.key_pem, spec.session_id, cfg.id, pub)
        cert = tls.cert_pem
    answer = OpenAnswer(KeyBundle(cfg.id, pub, sig, cert))
    run_audit: dict[str, Any] = {}
    if spec.run_id:
        ref = held_ref(sess)
        answer = replace(answer, resume=(cfg.id, ref))
        run_audit = {
            "run_id": spec.run_id,
            "first_run_step": spec.first_run_step,
            "held_run_step": ref.run_step,
            "superseded": [k.hex()[:16] for k in opened.superseded],
            **opened.audit,
        }
    return answer, {
        "analysis": spec.model,
        "reveal_mode": spec.reveal_mode,
        "topology": spec.topology,
        "m": spec.m,
        "security": spec.security,
        **study_audit(spec),
        **data_audit(party),
        **run_audit,
    }


def study_audit(spec: SessionSpec) -> dict[str, Any]:
    """An audit line's study (issue 37): its digest, title and reference (nothing without a study)."""
    if not spec.study:
        return {}
    study = Study.from_text(spec.study)
    return {"study": study.digest, "study_title": study.title, "study_reference": study.reference}


def data_audit(party: Party) -> dict[str, Any]:
    """The snapshot a session runs on (its records and content hash), for the session's audit line."""
    snap = party.snapshot
    return {} if snap is None else {"records": snap.records, "data_sha256": snap.sha256}


async def connect_session(
    party: Party,
    sess: Session,
    resume: list[Any],
    bundles: list[KeyBundle],
    on_frame: Callable[[int, peer_pb2.PeerFrame], Awaitable[None]],
    timeout_s: float,
) -> int:
    """Connect the open session ``sess``: agree on the run step every party replays (``resume``, the
    parties' last completed run steps), check the peers' key ``bundles``, open the links (frames go to
    ``on_frame``) and run the key setup (checked under security "abort"); the session is then ready. Returns
    the setup's rounds. A failure fails the session and is refused: UNAVAILABLE for a lost link,
    FAILED_PRECONDITION for a failed key setup."""
    cfg = party.cfg
    sess.run = replace(sess.run, replay=agreed_replay(cfg.id, sess, resume))
    sess.state = "connecting"
    try:
        await verify_bundles(party, sess, bundles)
        await open_links(party, sess, on_frame)
        keys = sess.keys
        assert keys is not None
        setup = key_setup_checked if sess.spec.security == "abort" else key_setup  # + key hash check
        machine = setup(sess.spec.params(), cfg.id, keys.proto_rng)
        wire = Wire(cfg.id, sess.peers, sender(party, sess), sess.mailbox, timeout_s)
        out = await drive(machine, wire, step=0, symmetric=False)
        sess.ctx = PartyContext(sess.spec.params(), out.result)
    except Refusal:
        sess.fail("connect failed")
        raise
    except (LinkError, LinkLost) as exc:
        sess.fail(str(exc))
        raise Refusal(Reason.UNAVAILABLE, f"session setup: {exc}") from exc
    except ProtocolError as exc:
        sess.fail(str(exc))
        raise Refusal(Reason.FAILED_PRECONDITION, f"session key setup failed: {exc}") from exc
    sess.state = "ready"
    return out.rounds


async def probe_links(
    party: Party, sess: Session, call: ProbeCall, timeout_s: Callable[[], float]
) -> tuple[list[float], dict[str, Any]]:
    """A transport probe at the session's next step: the exchange-round floor of this deployment, measured
    with the links and exchange code decisions use (all-zero payloads: no data, noise, randomness or
    charge). Refused in a session of a run (the probe would use up a step and shift the run's steps) and
    outside its limits. Returns each round's completion time and the probe's audit fields."""
    cfg, step = party.cfg, call.step
    check_next_step(sess, step)
    if sess.spec.run_id:
        raise Refusal(
            Reason.FAILED_PRECONDITION,
            f"a link probe uses up a session step, which would shift the run steps of run "
            f"{sess.spec.run_id!r}: probe in a session without run_id",
        )
    rounds, words = call.rounds, call.words
    if not 1 <= rounds <= PROBE_MAX_ROUNDS or not 0 <= 8 * words <= cfg.max_message_bytes:
        raise Refusal(
            Reason.INVALID_ARGUMENT,
            f"a link probe needs rounds in 1..{PROBE_MAX_ROUNDS} and words in "
            f"0..{cfg.max_message_bytes // 8} (limits.max_message_bytes), got {rounds} and {words}",
        )
    machine = probe_machine(cfg.id, sess.peers, rounds, words)
    _, base, pool_audit = await ahead.take(sess, step, 0)  # a probe: pooled material discarded
    out = await drive_step(party, sess, machine, step, 1, timeout_s, base)
    sess.last_step = step
    audit = {
        "rounds": rounds,
        "words": words,
        "send_ms": round(out.sent_s * 1e3, 3),
        "wait_ms": round(out.waited_s * 1e3, 3),
        **pool_audit,
    }
    return out.result, audit


def status(party: Party, sessions: dict[bytes, Session], refused_frames: int) -> PartyStatus:
    """What the Status RPC reports: the party, its sessions' states, its decisions used of its limit and
    the peer frames it refused."""
    cfg = party.cfg
    states = tuple(
        SessionState(s.spec.session_id, s.last_step, s.state, s.spec.reveal_mode, s.spec.model)
        for s in sessions.values()
    )
    return PartyStatus(
        cfg.id, cfg.identity, states, party.store.decisions_used, cfg.max_decisions, refused_frames
    )


async def plan_privacy(party: Party, call: PlanCall) -> PlanAnswer:
    """The dry run of a planned session (``parties.privacy_budget``): no data, no session, no ledger change.
    A session the policy, the study or the analysis would refuse is answered as refused (with the reason),
    not raised; a study's cap tighter than the registry's budget is the answer the run is told of."""
    cfg, store = party.cfg, party.store
    spec = call.spec
    analysis: Analysis | None = None
    refusal = ""
    approval = None
    try:
        check_policy(cfg, spec, store.decisions_used)
        approval = store.governance.admit(spec)
        analysis = get_analysis(spec.model, spec.model_params)
        check_data_model(cfg, spec, analysis)
    except Refusal as exc:
        refusal = f"{exc.reason.name}: {exc.message}"
    except AnalysisError as exc:
        refusal = f"INVALID_ARGUMENT: {exc}"
    batches = 1 if charged_per_run(spec) else call.batches  # federated ABCDP: one event per run, not batch
    answer = await asyncio.to_thread(  # PLD compositions can take seconds: off the event loop
        store.privacy.plan, cfg, analysis, spec, batches, call.batch_size, refusal, store.decisions_used
    )
    if approval is not None and analysis is not None and not refusal:  # the study's cap (issue 37)
        capped = await asyncio.to_thread(
            store.governance.cap_store(approval).plan,
            cfg,
            analysis,
            spec,
            batches,
            call.batch_size,
            "",
            store.decisions_used,
        )
        tighter = not answer.would_refuse or capped.batches_allowed < answer.batches_allowed
        if capped.would_refuse and tighter:
            answer = capped  # the tighter: the run is told of (and refused for) the study's cap
    return answer


def held_ref(sess: Session) -> RunStepRef:
    """The run step this party holds of the session's run (run step 0: none), for OpenSession's answer."""
    held = sess.run.held
    return held.ref if held is not None else RunStepRef(sess.spec.run_id, 0)
