"""Coordinator library API: open a session with all parties, send batches of public proposals, collect the
parties' output shares and reconstruct what the reveal mode allows.

    async with Coordinator(parties, tls) as coord:
        opts = SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params={...})
        sess = await coord.open_session(opts)
        d = await sess.evaluate({"theta": th, "theta_star": th2}, n=len(th))   # hss.protocols.Decisions
        await sess.close()

Reveal mode ``svt`` (federated ABCDP, analysis ``abcdp-rff``; driven by :mod:`coordinator.abcdp`) decodes
with ``hss.svt.svt_decide_receiver``: ``Decisions.accept`` holds the revealed SVT bits, ``revealed`` is None.

:class:`BlockingCoordinator` offers the same calls synchronously (its event loop runs in a background
thread), for samplers written as plain loops.

Failures: every call has a deadline. If a party is unreachable, refuses, or dies mid-step, the call raises
:class:`SessionError` naming the party, the step and the reason; nothing is returned for that step (no
half-written result), the session is marked failed, and :meth:`CoordinatorSession.abort` closes it at every
party that still answers. Resuming means opening a new session (fresh keys); the step counter of the old
one is never reused.

Run resume (parties/replay.py): ``SessionOptions(..., run_id=R, first_run_step=s)`` makes session step k run
step s + k - 1 of run R. ``session.resume`` then maps each party to its last completed run step of R (0:
none), so a coordinator restarting from its checkpoint c can check the parties are at c or c + 1. If every
party holds run step s from one session with the same inputs, step 1 is replayed: the parties return their
stored messages (no recomputation, no new privacy charge; ``StepTranscript.replayed``) and the decisions are
those of the first time. If only some hold it, it is evaluated afresh (``session.warnings`` says so before
the step runs); each party that charged it before with the same inputs draws the same noise from its run
key and does not charge it again, so the step is charged once (a lazy-coin session is charged again: its
coin is fresh in every session).

The coordinator is honest-but-curious: it sees only its own RECEIVER messages (masked output shares) and,
in the relay topology, sealed frames. It never holds a party's data or keys.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import grpc
import numpy as np
import numpy.typing as npt

from coordinator.relay import RelayHub, RelayRecord, add_relay
from hss.authenticated import AbortError
from hss.fixedpoint import FixedPoint, max_threshold
from hss.protocols import Decisions
from hss.runtime import Payload
from proto import party_pb2_grpc, serde, serde_session
from proto.records import EvaluateAnswer, RunStepRef
from proto.spec import PartyEntry, SessionSpec
from proto.tls import SERVER_OPTIONS, TlsMaterial, call_metadata, secure_channel, server_credentials

T = TypeVar("T")


@dataclass(frozen=True)
class SessionOptions:
    """What a session is opened with, besides the parties and the coordinator's identity (which
    :meth:`Coordinator.open_session` adds): the fields of its :class:`proto.spec.SessionSpec`, checked there.

    ``reveal_mode`` and ``model`` (the analysis a registry runs) with its public ``model_params`` (a model's
    :class:`mechanisms.kinds.DecisionPlan`, ``to_params``); ``t``: the Shamir threshold (default the
    largest the reveal mode allows); ``fmt``: the fixed-point format; ``topology``: "mesh" or "relay";
    ``session_id``: random unless given. With ``run_id``, session step k is run step first_run_step + k - 1
    of that run. ``sign_precompute`` (sign mode): "inline" (7 rounds), "pooled" (9 rounds, less CPU per
    decision), "blocks4" (2 precompute + 5 online rounds, more precompute bytes) or "prefix" (4 rounds, 3
    online after 2 made ahead, several times the bytes; semi-honest, small batches on a WAN, hss.sign_prefix).
    ``precompute_ahead`` (sign mode, issue 16): each party makes step k + 1's precompute right after
    answering step k (parties.ahead). ``security``: "semi-honest" (honest-but-curious registries) or
    "abort" (issue 25, sum, blinded, sign and svt: up to t deviating registries make every honest one abort
    the step before any output, hss.abort_modes, hss.abort_svt). ``study``: the canonical text of the study
    document the session belongs to (``proto.study``, issue 37), checked by registries that require
    approval."""

    reveal_mode: str
    model: str
    model_params: dict[str, Any] | None = None
    t: int | None = None
    fmt: FixedPoint | None = None
    topology: str = "mesh"
    session_id: bytes | None = None
    run_id: str | None = None
    first_run_step: int = 1
    sign_precompute: str = "inline"
    precompute_ahead: bool = False
    security: str = "semi-honest"
    study: str = ""


class SessionError(RuntimeError):
    """A session call failed; ``party`` and ``step`` say where (None when not specific to one)."""

    def __init__(
        self,
        message: str,
        party: int | None = None,
        step: int | None = None,
        code: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message)
        self.party, self.step, self.code = party, step, code


@dataclass
class StepTranscript:
    """What the coordinator received for one step: per party, (round, payload) messages."""

    step: int
    messages: dict[int, list[tuple[int, Payload]]] = field(default_factory=dict)
    rounds: int = 0
    clamped: int = 0
    run_step: int = 0  # the run step (0: the session has no run_id)
    replayed: bool = False  # every party returned its stored messages of a completed run step


class Coordinator:
    def __init__(
        self,
        parties: list[PartyEntry],
        tls: TlsMaterial | None,
        *,
        identity: str = "coordinator",
        rpc_timeout_s: float = 30.0,
        relay_listen: str = "127.0.0.1:0",
        relay_observer: Callable[[RelayRecord], None] | None = None,
    ) -> None:
        if sorted(p.id for p in parties) != list(range(1, len(parties) + 1)):
            raise ValueError(f"parties must be numbered 1..m, got {sorted(p.id for p in parties)}")
        self.parties = sorted(parties, key=lambda p: p.id)
        self.tls = tls
        self.identity = identity
        self.rpc_timeout_s = rpc_timeout_s
        self.relay_listen = relay_listen
        self.hub = RelayHub(insecure=tls is None, join_timeout_s=rpc_timeout_s, observer=relay_observer)
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, party_pb2_grpc.PartyStub] = {}
        self._relay_server: grpc.aio.Server | None = None
        self.relay_address = ""

    @property
    def m(self) -> int:
        return len(self.parties)

    async def __aenter__(self) -> Coordinator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        for p in self.parties:
            ch = secure_channel(p.address, self.tls, p.identity)
            self._channels[p.id] = ch
            self._stubs[p.id] = party_pb2_grpc.PartyStub(ch)

    async def _ensure_relay(self) -> str:
        if self._relay_server is None:
            server = grpc.aio.server(options=SERVER_OPTIONS)
            add_relay(server, self.hub)
            if self.tls is None:
                port = server.add_insecure_port(self.relay_listen)
            else:
                port = server.add_secure_port(self.relay_listen, server_credentials(self.tls))
            await server.start()
            self._relay_server = server
            self.relay_address = f"{self.relay_listen.rsplit(':', 1)[0]}:{port}"
        return self.relay_address

    async def stop(self) -> None:
        if self._relay_server is not None:
            await self._relay_server.stop(1.0)
            self._relay_server = None
        for ch in self._channels.values():
            await ch.close(grace=None)
        self._channels.clear()
        self._stubs.clear()

    def _md(self) -> Any:
        return call_metadata(self.tls, self.identity)

    async def call_all(
        self,
        what: str,
        make: Callable[[int], Any],
        method: str,
        step: int | None = None,
        timeout_s: float | None = None,
        *,
        failures: Literal["raise", "collect"] = "raise",
    ) -> dict[int, Any]:
        """One unary RPC to every party in parallel. ``failures="raise"``: the first failure cancels the rest
        and raises :class:`SessionError`. ``"collect"`` (``confar privacy plan`` / ``report``, which print
        what each party answers): a failed party's entry is the reason as text (``"CODE: details"``) and
        the others still answer."""
        to = timeout_s or self.rpc_timeout_s

        async def one(pid: int) -> Any:
            try:
                return await getattr(self._stubs[pid], method)(make(pid), timeout=to, metadata=self._md())
            except grpc.aio.AioRpcError as exc:
                if failures == "collect":
                    return f"{exc.code().name}: {exc.details()}"
                where = f" at step {step}" if step is not None else ""
                raise SessionError(
                    f"{what}{where}: party {pid} ({self.parties[pid - 1].identity}) failed: "
                    f"{exc.code().name}: {exc.details()}",
                    party=pid,
                    step=step,
                    code=exc.code(),
                ) from exc

        tasks = {p.id: asyncio.ensure_future(one(p.id)) for p in self.parties}
        try:
            await asyncio.gather(*tasks.values())
        except SessionError:
            for t in tasks.values():
                t.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
            raise
        return {pid: t.result() for pid, t in tasks.items()}

    async def open_session(self, options: SessionOptions) -> CoordinatorSession:
        """Open a session with ``options`` at every party (the coordinator adds its parties and identity and,
        for the relay topology, its relay's address). With a run, the session's ``resume`` / ``warnings``
        report what the parties hold of it."""
        o = options
        relay_address = await self._ensure_relay() if o.topology == "relay" else ""
        spec = SessionSpec(
            session_id=o.session_id or os.urandom(16),
            parties=tuple(self.parties),
            t=max_threshold(self.m) if o.t is None else o.t,
            reveal_mode=o.reveal_mode,
            model=o.model,
            model_params=dict(o.model_params or {}),
            fmt=o.fmt or FixedPoint(),
            topology=o.topology,
            relay_address=relay_address,
            coordinator_identity=self.identity,
            run_id=o.run_id or "",
            first_run_step=o.first_run_step,
            sign_precompute=o.sign_precompute,
            precompute_ahead=o.precompute_ahead,
            security=o.security,
            study=o.study,
        )
        sess = CoordinatorSession(self, spec)
        if o.topology == "relay":
            self.hub.register(spec)
        open_req = serde.open_request_to_proto(spec)
        try:
            opened = await self.call_all("open session", lambda _: open_req, "OpenSession")
            answers = []
            for p in self.parties:
                try:
                    answers.append(serde_session.open_response_from_proto(opened[p.id], bool(o.run_id)))
                except serde.WireError as exc:
                    raise SessionError(f"open session: {exc}", party=p.id) from exc
            resume = [a.resume for a in answers if a.resume is not None]
            if o.run_id:
                sess.set_resume(resume)
            connect = serde_session.connect_request_to_proto(
                spec.session_id, [a.bundle for a in answers], resume
            )
            await self.call_all("connect session", lambda _: connect, "ConnectSession", step=0)
        except SessionError:
            await sess.abort("open failed")
            raise
        sess.state = "ready"
        return sess


class CoordinatorSession:
    def __init__(self, coord: Coordinator, spec: SessionSpec) -> None:
        self.coord, self.spec = coord, spec
        self.step = 0
        self.state = "opening"
        self.last_transcript: StepTranscript | None = None
        self.resume: dict[int, int] = {}  # run resume: party -> its last completed run step (0: none)
        self.resume_refs: dict[int, RunStepRef] = {}
        self.replay_step = 0  # the run step every party holds from one session (replayed as step 1), or 0
        self.warnings: list[str] = []

    def set_resume(self, reports: list[tuple[int, RunStepRef]]) -> None:
        """Read the parties' resume reports (OpenSession answers, each the party as it reports itself and the
        run step it holds); say what will be replayed or re-charged."""
        spec = self.spec
        for pid, ref in reports:
            if ref.run_id != spec.run_id:
                raise SessionError(
                    f"open session: party {pid} reported run {ref.run_id!r}, not {spec.run_id!r}", party=pid
                )
            self.resume_refs[pid] = ref
        if sorted(self.resume_refs) != [p.id for p in self.coord.parties]:
            raise SessionError(f"open session: resume reports from parties {sorted(self.resume_refs)}")
        self.resume = {pid: ref.run_step for pid, ref in self.resume_refs.items()}
        first = spec.first_run_step
        refs = list(self.resume_refs.values())
        if refs[0].run_step == first and all(r == refs[0] for r in refs):
            self.replay_step = first
            return
        holders = sorted(pid for pid, ref in self.resume_refs.items() if ref.run_step == first)
        if holders:
            self.warnings.append(
                f"run {spec.run_id!r}: run step {first} was completed by parties {holders} but not by every "
                "party in one session; it is evaluated afresh (a party that charged it already reproduces "
                "its noise and does not charge it again, unless the session has a lazy coin)"
            )
        ahead = {pid: ref.run_step for pid, ref in self.resume_refs.items() if ref.run_step > first}
        if ahead:
            self.warnings.append(
                f"run {spec.run_id!r}: parties already completed run steps after {first} (party: step "
                f"{ahead}); those are evaluated afresh, and charged again where a party cannot match them "
                "to its earlier charge"
            )

    @property
    def session_id(self) -> bytes:
        return self.spec.session_id

    async def evaluate_transcript(
        self, inputs: dict[str, npt.ArrayLike], n: int, timeout_s: float | None = None
    ) -> StepTranscript:
        """Run one batch at the next step; return what every party sent to the receiver."""
        if self.state != "ready":
            raise SessionError(f"session is {self.state}; open a new session", step=self.step + 1)
        step = self.step + 1
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        req = serde_session.evaluate_request_to_proto(self.session_id, step, n, arrays)
        try:
            resps = await self.coord.call_all(
                "evaluate", lambda _: req, "Evaluate", step=step, timeout_s=timeout_s
            )
        except SessionError as exc:
            self.state = "failed"
            if self.spec.security == "abort":  # every registry logs the abort (its CloseSession reason),
                await self.abort(f"step {step} aborted: {exc}")  # also those cancelled before their check
            raise
        self.step = step
        tr = StepTranscript(step)
        answers: dict[int, EvaluateAnswer] = {}
        for pid, r in resps.items():
            a = answers[pid] = serde_session.evaluate_response_from_proto(r)
            if a.step != step or a.session_id != self.session_id:
                self.state = "failed"
                raise SessionError(f"party {pid} answered for another step/session", party=pid, step=step)
            tr.messages[pid] = list(a.to_receiver)
            tr.rounds = max(tr.rounds, a.rounds)
            tr.clamped += a.clamped
        tr.run_step = self.spec.run_step(step)
        replayed = {pid for pid, a in answers.items() if a.replayed}
        if replayed not in (set(), set(answers)) or any(a.run_step != tr.run_step for a in answers.values()):
            self.state = "failed"
            raise SessionError(
                f"parties disagree on run step {tr.run_step}: replayed by {sorted(replayed)} only, or "
                "another run step reported; the shares do not combine",
                step=step,
            )
        tr.replayed = bool(replayed)
        self.last_transcript = tr
        return tr

    async def evaluate(
        self, inputs: dict[str, npt.ArrayLike], n: int, timeout_s: float | None = None
    ) -> Decisions:
        tr = await self.evaluate_transcript(inputs, n, timeout_s)
        inbox: dict[int, Payload] = {}
        for pid, msgs in tr.messages.items():
            if not msgs:
                raise SessionError(f"party {pid} sent no output share", party=pid, step=tr.step)
            inbox[pid] = msgs[-1][1]
        try:
            return self.spec.protocol.decode(self.spec.params(), inbox, n, tr.step)
        except AbortError as exc:  # security "abort": the output shares are inconsistent or not bits
            self.state = "failed"
            await self.abort(f"step {tr.step} aborted: the parties' outputs were refused: {exc}")
            raise SessionError(f"the parties' outputs were refused: {exc}", step=tr.step) from exc

    async def probe_links(self, rounds: int, words: int, timeout_s: float | None = None) -> list[float]:
        """A transport probe at the next step: ``rounds`` all-to-all rounds of ``words`` zero words per peer
        over the session's own links (the parties' ProbeLinks). Returns the duration in seconds of rounds
        2..rounds: round r lasts from the moment the last party had round r - 1 complete to the moment the
        last party had round r complete (time.monotonic(), one clock for processes on one Linux host: the
        durations mean something only when all parties run on the same host as each other)."""
        if self.state != "ready":
            raise SessionError(f"session is {self.state}; open a new session", step=self.step + 1)
        step = self.step + 1
        call = serde_session.ProbeCall(self.session_id, step, rounds, words)
        req = serde_session.probe_request_to_proto(call)
        try:
            resps = await self.coord.call_all(
                "probe links", lambda _: req, "ProbeLinks", step=step, timeout_s=timeout_s
            )
        except SessionError:
            self.state = "failed"
            raise
        self.step = step
        done = [serde_session.probe_response_from_proto(r) for r in resps.values()]
        if any(len(d) != rounds for d in done):
            raise SessionError(f"a party reported other than {rounds} probe rounds", step=step)
        ends = [max(d[r] for d in done) for r in range(rounds)]
        return [b - a for a, b in itertools.pairwise(ends)]

    async def close(self, reason: str = "done") -> None:
        if self.state in ("aborted", "closed"):  # closed at every party already (an abort closes it)
            return
        try:
            await self.coord.call_all(
                "close session",
                lambda _: serde_session.close_request_to_proto(self.session_id, reason),
                "CloseSession",
            )
        finally:
            self.state = "closed"
            self.coord.hub.unregister(self.session_id)

    async def abort(self, reason: str) -> list[str]:
        """Close at every party that answers; returns the parties' errors (best effort, never raises)."""
        errors = []

        async def one(p: PartyEntry) -> None:
            try:
                await self.coord._stubs[p.id].CloseSession(
                    serde_session.close_request_to_proto(self.session_id, reason),
                    timeout=min(5.0, self.coord.rpc_timeout_s),
                    metadata=self.coord._md(),
                )
            except grpc.aio.AioRpcError as exc:
                errors.append(f"party {p.id}: {exc.code().name}: {exc.details()}")

        await asyncio.gather(*(one(p) for p in self.coord.parties))
        self.state = "aborted"
        self.coord.hub.unregister(self.session_id)
        return errors


class BlockingCoordinator:
    """Synchronous facade: the coordinator's event loop runs in a daemon thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="confar-coordinator", daemon=True)
        self._thread.start()
        self.coord = self._run(self._make(args, kwargs))

    async def _make(self, args: Any, kwargs: Any) -> Coordinator:
        c = Coordinator(*args, **kwargs)
        await c.start()
        return c

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def open_session(self, options: SessionOptions) -> BlockingSession:
        return BlockingSession(self, self._run(self.coord.open_session(options)))

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self.coord.stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self) -> BlockingCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingSession:
    def __init__(self, owner: BlockingCoordinator, sess: CoordinatorSession) -> None:
        self._owner, self.session = owner, sess

    @property
    def spec(self) -> SessionSpec:
        return self.session.spec

    @property
    def resume(self) -> dict[int, int]:
        return self.session.resume

    @property
    def warnings(self) -> list[str]:
        return self.session.warnings

    def evaluate(self, inputs: dict[str, npt.ArrayLike], n: int) -> Decisions:
        return self._owner._run(self.session.evaluate(inputs, n))

    def evaluate_transcript(self, inputs: dict[str, npt.ArrayLike], n: int) -> StepTranscript:
        return self._owner._run(self.session.evaluate_transcript(inputs, n))

    def close(self, reason: str = "done") -> None:
        self._owner._run(self.session.close(reason))

    def abort(self, reason: str) -> list[str]:
        return self._owner._run(self.session.abort(reason))
