"""Sign material made ahead (issue 16): a session with ``precompute_ahead`` starts, right after answering
step k, the input-independent precompute rounds of step k + 1 with its peers, so that step k + 1's Evaluate
runs only the online rounds.

- **Bound to its step.** The material is made with step k + 1's PRSS nonce (``hss.protocols`` purposes keyed
  by the step, as in the step itself) and its frames are step k + 1's rounds 1..R (R precompute rounds);
  the step's online rounds follow as rounds R + 1, ... (``parties.exchange.drive``'s ``round_base``). It is
  taken by step k + 1 only, once, and never by another step.
- **Bounded.** At most one step's material is held per session (``Session.ahead``); the mailbox keeps frames
  of at most the next two steps (``Mailbox(lookahead=True)``).
- **Batch size.** The pool is made for step k's batch size n. If step k + 1 asks another n (or the step is a
  link probe), the material is discarded and the step runs its own precompute after round R (the audit line
  says so): every party sees the same request, so all parties decide alike.
- **Cancelled cleanly.** Session close, a superseding session of the same run and the daemon stopping tear the
  session down, which cancels the pool (:meth:`Ahead.cancel`); a lost link or a protocol error in the pool
  fails the session with a named error (audited), which the next Evaluate returns. A replayed step (run
  resume) can only be a session's step 1, which has no pool.
- **Secrecy unchanged.** Semi-honest: the parties exchange exactly the precompute messages the step would
  have exchanged in its first R rounds (input-independent: PRSS openings of s_i^2 and GRR reshares), only
  earlier. Under security "abort" the pool is the step's first 5 rounds (``hss.abort_sign.
  precompute_sign_abort``: the authenticated mask bits and the check before the masked term, r kept secret),
  and the step deals its terms in a round of its own after them (one round more in all, 5 fewer online);
  its check draws its coins under a PRSS purpose of its own, so a step that falls back to its in-step
  rounds after a discarded pool never reuses a coin the pool opened. The pool's own randomness (share
  polynomials) is a fresh stream seeded from the session's protocol CSPRNG. Material discarded for a
  batch-size change was never used to mask anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from hss.randomness import SecureRandom
from hss.runtime import ProtocolError
from parties.audit import AuditSubject
from parties.exchange import RunOutcome, Wire, drive
from parties.peering import offload_to_thread, sender
from parties.refusal import Reason, Refusal
from parties.session import Party, Session


@dataclass
class Ahead:
    """Step ``step``'s sign material being made (or made) for a batch of ``n``."""

    step: int
    n: int
    task: asyncio.Task[RunOutcome | None] | None = None
    error: str = ""
    used: bool = False  # taken by its step (the material is then dropped here; ``base`` stays)
    base: int = 0  # the step's rounds run by the pool
    started: float = field(default_factory=time.perf_counter)
    done_s: float = 0.0  # seconds from start to the material being complete

    async def cancel(self) -> None:
        """Stop the precompute (if running) and wait for it to end; the material is dropped."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


def start(party: Party, sess: Session, step: int, n: int) -> None:
    """Right after answering step ``step`` - 1 (a decision step of ``n`` decisions): start step ``step``'s
    precompute with the peers if the session asks for it. Every party of the session does the same."""
    spec, ctx, keys = sess.spec, sess.ctx, sess.keys
    if not spec.precompute_ahead or sess.state != "ready" or ctx is None or keys is None or n < 1:
        return
    if sess.ahead is not None and not sess.ahead.used:  # at most one step's material (steps are in order)
        return
    rng = SecureRandom(keys.proto_rng.random_bytes(32))  # the pool's own stream: it runs in a worker thread
    machine = spec.protocol.ahead_machine(ctx, n, step, rng)  # the session's mode, security and precompute
    ahead = Ahead(step, n)
    ahead.task = asyncio.get_running_loop().create_task(
        _run(party, sess, ahead, machine), name=f"precompute-ahead-step-{step}"
    )
    sess.ahead = ahead


async def _run(party: Party, sess: Session, ahead: Ahead, machine: Any) -> RunOutcome | None:
    try:
        # offload always: the event loop stays free to send step k's answer
        send = sender(party, sess)
        wire = Wire(sess.me, sess.peers, send, sess.mailbox, party.cfg.round_timeout_s, offload_to_thread)
        out = await drive(machine, wire, step=ahead.step, symmetric=True, finish=False)
    except ProtocolError as exc:  # a lost link (LinkLost) or a deviation: the session fails, named
        ahead.error = f"step {ahead.step}: precompute ahead: {exc}"
    except Exception as exc:  # anything else also ends the session, never silently
        ahead.error = f"step {ahead.step}: precompute ahead failed: {type(exc).__name__}: {exc}"
    else:
        ahead.done_s = time.perf_counter() - ahead.started
        return out
    if sess.state == "ready":
        sess.fail(ahead.error)
        party.store.audit.record(
            who=party.cfg.identity,
            what="PrecomputeAhead",
            about=AuditSubject(sess.spec.session_id, ahead.step, sess.spec.model, sess.spec.reveal_mode),
            outcome="UNAVAILABLE",
            detail=ahead.error,
        )
    return None


async def take(sess: Session, step: int, n: int) -> tuple[Any, int, dict[str, Any]]:
    """For session step ``step`` of batch ``n`` (n = 0: a link probe): the pooled material (None if there is
    none or it does not fit), the rounds of the step already run by the pool (the step's own rounds follow
    them) and audit fields. The pool is finished first (its frames are the step's first rounds); a pool
    that failed fails the step with its error (UNAVAILABLE)."""
    ahead = sess.ahead
    if ahead is None or ahead.step != step:
        return None, 0, {}
    if ahead.used or ahead.task is None:  # an earlier attempt of this step took it and failed before its run
        what = "taken by an earlier attempt of this step"
        return None, ahead.base, {"precompute": f"pool {what}: its precompute ran in the step"}
    sess.busy = True
    try:
        waited = time.perf_counter()
        out = await asyncio.shield(ahead.task)
        waited = time.perf_counter() - waited
    except asyncio.CancelledError:
        if ahead.task.cancelled():  # the session was torn down meanwhile (teardown cancels the pool)
            raise Refusal(Reason.FAILED_PRECONDITION, f"step {step}: session {sess.state}") from None
        raise
    finally:
        sess.busy = False
    if out is None:
        raise Refusal(Reason.UNAVAILABLE, ahead.error or f"step {step}: precompute ahead failed")
    # used once: the material leaves the pool now, the rounds it took stay (a retry of the step after an
    # early refusal runs its own precompute after them, never this material again)
    ahead.used, ahead.base, ahead.task = True, out.rounds, None
    base = out.rounds
    if n != ahead.n:
        what = "a link probe" if n == 0 else f"a batch of {n}"
        return None, base, {
            "precompute": f"pool discarded: made for a batch of {ahead.n}, step {step} is {what}; "
            f"its precompute ran in the step after the pool's {base} rounds",
        }
    return out.result, base, {
        "precompute": "pool",
        "precompute_rounds": base,
        "precompute_ms": round(ahead.done_s * 1e3, 3),
        "precompute_wait_ms": round(waited * 1e3, 3),
    }
