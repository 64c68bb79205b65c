"""Privacy dry runs and reports, coordinator side (``confar privacy plan`` / ``confar privacy report``).

Every number here is computed by the parties (DESIGN.md §2: each party decides its own budget): the
coordinator sends the planned session (``PlanPrivacy``) or asks for the ledger (``PrivacyReport``) and
prints what each party answers. ``report`` also recomposes each party's reported events with
``mechanisms.privacy`` (GDP μ when every event has one, ε at δ by PLD / closed form, the Rényi filter's
reading) as a cross-check, printed under each party's privacy statement
(``coordinator.privacy_statement.format_report``: the sentence ``confar run`` prints), and ``--plot DIR``
draws each party's trade-off curve against its budget. Neither command opens a session or touches data;
neither changes a ledger.

PLAN.toml (relative paths are resolved against the file's folder; the ``[session]`` table is needed by
``plan`` only, so ``report`` can use the same file or one without it)::

    [coordinator]
    identity = "coordinator"          # optional, default "coordinator"
    cert = "certs/coordinator.pem"    # cert / key / ca: required unless insecure = true
    key = "certs/coordinator.key"
    ca = "certs/ca.pem"
    insecure = false                  # optional: plaintext gRPC (local experiments only)
    rpc_timeout_s = 30.0              # optional

    [[parties]]                       # one per party, ids 1..m without gaps
    id = 1
    identity = "party-1"              # optional, default "party-<id>" (must match its certificate)
    address = "127.0.0.1:50051"

    [session]
    analysis = "gaussian-mean"        # an analysis in the parties' allowlists
    reveal_mode = "sign"              # sum | blinded | sign
    topology = "mesh"                 # optional: mesh | relay
    threshold = 1                     # optional, default (m - 1) // 2 as when the session is opened
    batches = 100                     # number of batches (MCMC steps, proposal rounds, ...)
    batch_size = 64                   # decisions per batch
    [session.params]                  # the analysis' public parameters, as sent at session open (a model's
    [session.params.model_args]       # decision plan: mechanisms/kinds/plan.py lists the keys)
    sigma = 1.0
    clip = [-4.0, 6.0]
    [session.params.penalty]
    tau = 20.0
    n = 1

Exit codes: 0 done (``plan``: every party would accept the planned session); 1 a party could not be asked
(or, for ``plan``, at least one party would refuse: the reason is printed); 2 bad file or command line.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.api import Coordinator
from coordinator.tables import Reader
from hss.fixedpoint import FixedPoint, max_threshold
from mechanisms.privacy import (
    AmplifiedGaussianEvent,
    Composition,
    EnvelopeTradeOff,
    EpsDeltaTradeOff,
    GaussianEvent,
    GaussianTradeOff,
    PrivacyEvent,
    RDPBudget,
    TradeOff,
    compose_events,
    compose_gdp,
    event_from_dict,
    plot_tradeoffs,
    reveal_privacy,
)
from proto import serde_privacy
from proto.records import LedgerReport, PlanAnswer
from proto.spec import PartyEntry, SessionSpec, SpecError, default_identity
from proto.tls import TlsError, TlsMaterial

RELAY_PLACEHOLDER = "plan.invalid:1"  # a relay session's spec needs an address; a plan never connects


class PlanFileError(ValueError):
    """A problem in PLAN.toml, naming the file and the key."""


@dataclass(frozen=True)
class PlannedSession:
    analysis: str
    reveal_mode: str
    params: dict[str, Any]
    topology: str
    threshold: int | None
    batches: int
    batch_size: int
    security: str = "semi-honest"  # the session's security, as it would be opened
    study: str = ""  # the study document's canonical text (proto.study; issue 37), "" for none


@dataclass(frozen=True)
class PlanFile:
    source: Path
    identity: str
    tls: TlsMaterial | None
    rpc_timeout_s: float
    parties: list[PartyEntry]
    session: PlannedSession | None


def load_plan(path: str | Path, need_session: bool = True) -> PlanFile:
    """Read and validate PLAN.toml (schema in the module docstring)."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanFileError(f"{path}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PlanFileError(f"{path}: not valid TOML: {exc}") from exc
    plan = _PlanReader(path)
    extra = sorted(set(doc) - {"coordinator", "parties", "session"})
    if extra:
        raise plan.err(extra[0], "unknown table (allowed: coordinator, parties, session)")
    identity, tls, timeout = plan.coordinator(doc.get("coordinator", {}))
    parties = plan.parties(doc.get("parties"))
    session = None
    sess = doc.get("session")
    if sess is None and need_session:
        raise plan.err("[session]", "missing table (what the planned session would run)")
    if sess is not None:
        session = plan.session(sess)
    return PlanFile(path, identity, tls, timeout, sorted(parties, key=lambda p: p.id), session)


class _PlanReader(Reader):
    """Typed reads of one PLAN.toml's tables (``coordinator.tables.Reader``); every error is a
    :class:`PlanFileError` naming the file and the key."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, path.parent, PlanFileError)

    def coordinator(self, coord: Any) -> tuple[str, TlsMaterial | None, float]:
        """[coordinator]: identity, TLS material (None under insecure) and the RPC timeout."""
        if not isinstance(coord, dict):
            raise self.err("coordinator", "must be a table")
        extra = sorted(set(coord) - {"identity", "cert", "key", "ca", "insecure", "rpc_timeout_s"})
        if extra:
            raise self.err(f"coordinator.{extra[0]}", "unknown key")
        identity = self.get(coord, "coordinator", "identity", str, "coordinator")
        insecure = self.get(coord, "coordinator", "insecure", bool, False)
        timeout = float(self.get(coord, "coordinator", "rpc_timeout_s", (int, float), 30.0))
        if not timeout > 0:
            raise self.err("coordinator.rpc_timeout_s", f"must be > 0, got {timeout}")
        if insecure:
            return identity, None, timeout
        paths = []
        for k in ("cert", "key", "ca"):
            p = Path(self.get(coord, "coordinator", k, str))
            paths.append(p if p.is_absolute() else self.source.parent / p)
        for k, p in zip(("cert", "key", "ca"), paths, strict=True):
            if not p.is_file():
                raise self.err(f"coordinator.{k}", f"file {p} does not exist")
        try:
            return identity, TlsMaterial.load(paths[0], paths[1], paths[2], expect_identity=identity), timeout
        except TlsError as exc:
            raise self.err("coordinator", str(exc)) from exc

    def parties(self, raw: Any) -> list[PartyEntry]:
        """[[parties]]: ids 1..m, each with its identity and address."""
        if not isinstance(raw, list) or not raw:
            raise self.err("parties", "needs at least one [[parties]] table")
        parties: list[PartyEntry] = []
        for i, pt in enumerate(raw):
            where = f"parties[{i}]"
            if not isinstance(pt, dict):
                raise self.err(where, "must be a table")
            extra = sorted(set(pt) - {"id", "identity", "address"})
            if extra:
                raise self.err(f"{where}.{extra[0]}", "unknown key")
            pid = self.get(pt, where, "id", int)
            ident = self.get(pt, where, "identity", str, default_identity(pid))
            parties.append(PartyEntry(pid, ident, self.get(pt, where, "address", str)))
        ids = sorted(p.id for p in parties)
        if ids != list(range(1, len(ids) + 1)):
            raise self.err("parties", f"ids must be 1..m without gaps or repeats, got {ids}")
        return parties

    def session(self, sess: Any) -> PlannedSession:
        """[session]: the planned session."""
        if not isinstance(sess, dict):
            raise self.err("session", "must be a table")
        allowed = {"analysis", "reveal_mode", "topology", "threshold", "batches", "batch_size", "params"}
        extra = sorted(set(sess) - allowed)
        if extra:
            raise self.err(f"session.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        batches = self.get(sess, "session", "batches", int)
        batch_size = self.get(sess, "session", "batch_size", int)
        if batches < 1:
            raise self.err("session.batches", f"must be >= 1, got {batches}")
        if not 1 <= batch_size < 2**32:
            raise self.err("session.batch_size", f"must be in 1..2^32-1, got {batch_size}")
        threshold = self.get(sess, "session", "threshold", int, None)
        return PlannedSession(
            analysis=self.get(sess, "session", "analysis", str),
            reveal_mode=self.get(sess, "session", "reveal_mode", str),
            params=dict(self.get(sess, "session", "params", dict, {})),
            topology=self.get(sess, "session", "topology", str, "mesh"),
            threshold=threshold,
            batches=batches,
            batch_size=batch_size,
        )


def planned_spec(pf: PlanFile) -> SessionSpec:
    """The SessionSpec the planned session would be opened with (fresh id; never opened)."""
    s = pf.session
    assert s is not None
    m = len(pf.parties)
    try:
        return SessionSpec(
            session_id=os.urandom(16),
            parties=tuple(pf.parties),
            t=max_threshold(m) if s.threshold is None else s.threshold,
            reveal_mode=s.reveal_mode,
            model=s.analysis,
            model_params=s.params,
            fmt=FixedPoint(),
            topology=s.topology,
            relay_address=RELAY_PLACEHOLDER if s.topology == "relay" else "",
            coordinator_identity=pf.identity,
            security=s.security,
            study=s.study,
        )
    except (SpecError, ValueError) as exc:
        raise PlanFileError(f"{pf.source}: [session]: {exc}") from exc


async def ask_all(pf: PlanFile, method: str, request: Any) -> dict[int, Any]:
    """One unary call per party of ``pf``, in parallel (:meth:`coordinator.api.Coordinator.call_all`); a
    party's entry is its response, or why it could not be asked (``"CODE: details"``; a timeout names the
    setting that bounds it)."""
    async with Coordinator(pf.parties, pf.tls, identity=pf.identity, rpc_timeout_s=pf.rpc_timeout_s) as coord:
        out = await coord.call_all(method, lambda _: request, method, failures="collect")
    hint = (
        f" (no answer within [coordinator] rpc_timeout_s = {pf.rpc_timeout_s:g} s: a registry's privacy "
        "accounting can take longer on a loaded machine; raise rpc_timeout_s)"
    )
    late = {pid for pid, r in out.items() if isinstance(r, str) and r.startswith("DEADLINE_EXCEEDED")}
    return {pid: r + hint if pid in late else r for pid, r in out.items()}


def run_sync(coro: Any) -> Any:
    """``asyncio.run(coro)``, also from inside a running event loop (a notebook cell): then in a thread of
    its own, with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def plan(pf: PlanFile) -> dict[int, PlanAnswer | str]:
    """Ask every party what the planned session would spend (PlanPrivacy)."""
    assert pf.session is not None
    call = serde_privacy.PlanCall(planned_spec(pf), pf.session.batches, pf.session.batch_size)
    answers = run_sync(ask_all(pf, "PlanPrivacy", serde_privacy.plan_request_to_proto(call)))
    read = serde_privacy.plan_answer_from_proto
    return {pid: r if isinstance(r, str) else read(r) for pid, r in answers.items()}


def report(pf: PlanFile) -> dict[int, LedgerReport | str]:
    """Ask every party for its privacy ledger (PrivacyReport)."""
    answers = run_sync(ask_all(pf, "PrivacyReport", serde_privacy.report_request_to_proto()))
    read = serde_privacy.report_from_proto
    return {pid: r if isinstance(r, str) else read(r) for pid, r in answers.items()}


# ---- spend recomputation ---------------------------------------------------------------------------------


@dataclass
class Spend:
    """A party's reported events, recomposed here."""

    events: list[PrivacyEvent]
    gdp_mu: float | None  # sqrt(sum count * mu^2) when every event has a GDP bound
    delta: float
    eps: float  # eps at delta of the composition (0 with no events)
    budget: dict[str, Any] = field(default_factory=dict)
    # eps at delta had the penalty steps been plain Gaussian releases (each party's noisy term, no
    # confidential accept-reject): set when some event carries a confidential amplification
    plain_eps: float | None = None
    composition: Composition | None = field(default=None, repr=False, compare=False)  # of ``events``
    # eps at delta by the party's Renyi filter (its budget's order), recomputed here: set for a Renyi budget
    renyi_eps: float | None = None

    @property
    def decisions(self) -> int:
        return sum(e.count for e in self.events)


def parse_events(events_json: str) -> list[PrivacyEvent]:
    return [event_from_dict(d) for d in json.loads(events_json or "[]")]


def recompose(events: list[PrivacyEvent], delta: float, budget_json: str = "") -> Spend:
    mus = [e.gdp_mu() for e in events]
    gdp = (
        None
        if any(mu is None for mu in mus)
        else math.sqrt(sum(e.count * mu * mu for e, mu in zip(events, mus, strict=True) if mu is not None))
    )
    comp = compose_events(events) if events else None
    eps = comp.eps_at(delta) if comp is not None else 0.0
    budget = json.loads(budget_json) if budget_json else {}
    plain = plain_events(events)
    plain_eps = compose_events(plain).eps_at(delta) if plain is not None else None
    renyi = None
    if budget.get("type") == "renyi":  # what the party's filter reads: sum of rho at its order, converted
        rdp = RDPBudget(float(budget["eps_max"]), float(budget["delta"]), float(budget["alpha"]))
        renyi = rdp.spend(events)
    return Spend(events, gdp, delta, eps, budget, plain_eps, comp, renyi)


def plain_events(events: list[PrivacyEvent]) -> list[PrivacyEvent] | None:
    """The events with every confidentially amplified penalty step replaced by its plain Gaussian release;
    None when no event is amplified (nothing to compare)."""
    if not any(isinstance(e, AmplifiedGaussianEvent) for e in events):
        return None
    return [e.plain() if isinstance(e, AmplifiedGaussianEvent) else e for e in events]


def report_delta(budget: dict[str, Any], default: float) -> float:
    """The δ to report ε at: the party's own budget δ if it has an eps-at-delta (or Rényi) budget, else
    ``default``."""
    return float(budget["delta"]) if budget.get("type") in ("eps_delta", "renyi") else default


def budget_text(budget: dict[str, Any]) -> str:
    if budget.get("type") == "gdp":
        return f"GDP filter mu_max = {budget['mu_max']:g}"
    if budget.get("type") == "eps_delta":
        return f"eps_max = {budget['eps_max']:g} at delta = {budget['delta']:g}"
    if budget.get("type") == "renyi":
        return (
            f"eps_max = {budget['eps_max']:g} at delta = {budget['delta']:g} "
            f"(Renyi filter, alpha = {budget['alpha']:g})"
        )
    return "no privacy budget configured"


def format_plan(pf: PlanFile, answers: dict[int, Any]) -> tuple[str, int]:
    """Printable plan and the number of parties that would refuse (or could not be asked)."""
    s = pf.session
    assert s is not None
    lines = [
        f"privacy plan: analysis {s.analysis} ({json.dumps(s.params, sort_keys=True)}), "
        f"reveal {s.reveal_mode}, {s.batches} batches x {s.batch_size} decisions = "
        f"{s.batches * s.batch_size} decisions per party",
    ]
    bad = 0
    for pid, r in sorted(answers.items()):
        who = f"party {pid} ({pf.parties[pid - 1].identity})"
        if isinstance(r, str):
            bad += 1
            lines.append(f"{who}: could not be asked: {r}")
            continue
        verdict = "WOULD REFUSE" if r.would_refuse else "would accept"
        bad += int(r.would_refuse)
        b = r.budget
        if b.configured:
            budget = json.loads(b.budget_json)
            left_now, left_after = max(0.0, b.limit - b.spent), max(0.0, b.limit - r.projected)
            spend = (
                f"{budget_text(budget)}; {b.unit}: spent {b.spent:.6g}, projected {r.projected:.6g} "
                f"(remaining {left_now:.6g} now, {left_after:.6g} after)"
            )
        else:
            spend = "no privacy budget configured"
        lines.append(f"{who}: {verdict}: {spend}")
        per_run = reveal_privacy(s.reveal_mode).charged_per_run  # federated ABCDP: once per run, not batch
        if per_run:
            fits = "fits" if r.batches_allowed >= 1 else "does not fit"
            lines.append(
                f"    the ABCDP run is charged once, whatever its batches: it {fits}; decisions used "
                f"{r.decisions_used} of {r.decisions_budget}"
            )
        else:
            lines.append(
                f"    batches that fit: {r.batches_allowed} of {s.batches}; decisions used "
                f"{r.decisions_used} of {r.decisions_budget}"
            )
        if r.events_json:
            per = ", ".join(event_text(e) for e in parse_events(r.events_json))
            lines.append(f"    {'for the whole run' if per_run else 'per batch'}: {per}")
        lines.append(f"    {r.message}")
    return "\n".join(lines), bad


def event_text(e: PrivacyEvent) -> str:
    d = e.to_dict()
    params = ", ".join(f"{k}={v:.6g}" for k, v in d.items() if isinstance(v, float))
    return f"{e.kind}({params}) x {e.count}" + (f" [{e.label}]" if e.label else "")


def spend_tradeoff(sp: Spend) -> TradeOff:
    """The spent privacy as a trade-off curve: G_mu for GDP ledgers, else the envelope of delta(eps)."""
    if sp.gdp_mu is not None and all(e.kind == "gaussian" for e in sp.events):
        return GaussianTradeOff(sp.gdp_mu)
    comp = sp.composition if sp.composition is not None else compose_events(sp.events)
    # reach past the spent epsilon, up to where e^eps still fits a double
    top = min(700.0, max(30.0, 1.5 * sp.eps)) if math.isfinite(sp.eps) else 30.0
    grid = np.linspace(0.0, top, 241)
    return EnvelopeTradeOff(tuple(grid), tuple(np.clip(comp.delta_at_many(grid), 0.0, 1.0)), name="spent")


def budget_tradeoff(budget: dict[str, Any]) -> TradeOff | None:
    if budget.get("type") == "gdp":
        return GaussianTradeOff(float(budget["mu_max"]))
    if budget.get("type") in ("eps_delta", "renyi"):
        return EpsDeltaTradeOff(float(budget["eps_max"]), float(budget["delta"]))
    return None


def plot_spends(pf: PlanFile, spends: dict[int, Spend], out_dir: Path) -> list[Path]:
    """One PNG per party: its spent trade-off curve and its budget's curve."""
    from matplotlib.figure import Figure  # only when plotting

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for pid, sp in sorted(spends.items()):
        ident = pf.parties[pid - 1].identity
        curves: dict[str, TradeOff] = {}
        if sp.events:
            spent = spend_tradeoff(sp)
            label = f"spent: mu = {sp.gdp_mu:.3g}" if isinstance(spent, GaussianTradeOff) else "spent (PLD)"
            if sp.plain_eps is not None:
                label = f"spent, confidential: eps = {sp.eps:.3g} at delta = {sp.delta:.3g}"
            curves[label] = spent
            plain = plain_events(sp.events)
            if plain is not None:
                mu = compose_gdp(math.sqrt(e.count) * (e.gdp_mu() or 0.0) for e in plain)
                if all(isinstance(e, GaussianEvent) for e in plain):
                    curves[f"same noise, plain penalty: eps = {sp.plain_eps:.3g}"] = GaussianTradeOff(mu)
        else:
            curves["spent: nothing"] = GaussianTradeOff(0.0)
        limit = budget_tradeoff(sp.budget)
        if limit is not None:
            curves[f"budget: {budget_text(sp.budget)}"] = limit
        fig = Figure(figsize=(5.0, 5.0))
        plot_tradeoffs(curves, ax=fig.add_subplot(), title=f"{ident}: privacy spent")
        path = out_dir / f"{ident}-tradeoff.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        written.append(path)
    return written
