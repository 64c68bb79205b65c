"""This party's privacy budget: a persisted ledger the daemon checks before it answers a batch.

DESIGN.md §2: each party decides its own privacy budget and refuses queries past it; the coordinator cannot
override it. The pure accounting (events, composition, ``PrivacyLedger`` with its GDP filter or eps-at-delta
budget) lives in ``mechanisms.privacy``; this module owns what is specific to the daemon:

* **Budget** from the party's TOML ``[budget]`` table (``parties.config``): ``gdp_mu`` (a GDP filter,
  valid under fully adaptive composition) or ``epsilon`` + ``delta`` (eps at delta of the PLD composition),
  and ``colluding``, the threat model the party accounts for (default "all": m - 1 other parties may pool
  their noise, so only this party's own noise is relied on).
* **Events** of a batch are computed by the party itself, from its own config and the session's analysis,
  public parameters, reveal mode and size (``Analysis.privacy_events``); nothing the coordinator sends is
  taken as a privacy number. They are computed for what the coalition the party assumes (``colluding``)
  observes given the session's Shamir threshold t (``mechanisms.privacy.coalition_view``: e.g. in blinded
  mode a coalition larger than t rebuilds each party's own term, so only that party's own noise counts). An
  analysis without ``privacy_events``, or raising ``Unaccountable`` (unbounded or unknown per-step loss),
  is refused with FAILED_PRECONDITION and the analysis' reason when a budget is configured. Each event's
  label says what it was computed for: "<neighbours> neighbours, assumes q = <q> colluding, session t = <t>,
  reveal <mode>" (the coordinator's privacy statement, ``coordinator.privacy_statement``, reads it).
* **Check before compute, commit before send**: ``check`` dry-runs the batch against the budget
  (RESOURCE_EXHAUSTED past it); the daemon charges a batch with ``parties.storage.PartyStorage.charge``:
  :meth:`PrivacyBudgetStore.stage` computes the new ledger, one record of the ledger journal
  (``parties.journal``: appended, fdatasynced) makes it durable, and only then is it swapped in
  (:meth:`~PrivacyBudgetStore.install`), so a share never leaves the party for a batch that is not on disk.
  A crash between charge and send over-counts, never under-counts. :meth:`~PrivacyBudgetStore.commit` (a
  store without a journal) writes the whole file durably instead.
* **Persistence** in ``<state_dir>/privacy_ledger.json`` (the snapshot) and the ledger journal (the charges
  since): ``{"version": 1, "party": identity, "ledger": PrivacyLedger.to_dict(), "journal_seq": k}``, where
  ``k`` (absent: 0) is the last journal record the snapshot includes; :meth:`PrivacyBudgetStore.load` applies
  the journal's later records as the commits made them (``parties.charges``). Consecutive events of the same
  mechanism and label (one session) are merged into one event with the summed count, so the file grows with
  sessions, not batches. At start-up a corrupt,
  unreadable or foreign (another party's) ledger file is an error naming the file (:class:`LedgerFileError`);
  it is never reset silently. The limit always comes from the current config; the events from the file.
  Without a configured budget nothing is enforced or recorded (an existing ledger file is still validated
  and reported).
* **Run steps** (run resume, :mod:`parties.replay`): a charge for a session with a ``run_id`` also records the
  run step in the file's ``run_charges`` list as ranges ``{"run_id", "session", "from_step", "to_step",
  "decisions", "digest", "noise_key"}`` (consecutive run steps of one session merge into one range; ``digest``
  is the step digest of ``to_step``, ``noise_key`` the id of the run noise key; both absent in ledgers written
  by earlier versions, which still load). The record is in the same durable write (one journal record) as the
  events it pays for. A run step evaluated again with the same digest under the same key (a resumed run step a
  registry charged before it, or another registry, died) reproduces the charged release and is not charged
  again (:meth:`PrivacyBudgetStore.charged_run_step`); so each run step appears once, unless the party could
  not recognise it (a lazy-coin session, a lost run key, a step not at the end of a range). A replayed run
  step is not charged and not recorded. A run whose privacy event covers the whole run (federated ABCDP,
  ``parties.abcdp``) is recorded once as run step 0 (``from_step = to_step = 0``, ``decisions = 0``,
  ``digest`` = the step digest of run step 0: the run's plan) and recognised by every later session of the run
  under the same run noise key, which then charges nothing.
* **Per run** (``[budget] per_run = "worst-record"``, :meth:`PrivacyBudgetStore.run_events_for`): a
  fixed-sd penalty session of a model linear in a predictor is charged per run at its worst record
  (``mechanisms.privacy.worst_record``): each batch the increase of the run's bound, computed from the run's
  state (a few d × d Gram matrices, the per-decision totals and the decision count), kept per run (its
  ``run_id``, or the session id) and charge fingerprint in ``run_states``. The state after a batch is written
  in the same journal record as the batch's events (``"worst_record": {"key", "state"}``) and in the snapshot
  (``"worst_record": {key: state}``), so a crash before the record charges neither and one after both; a
  replayed or already paid run step computes nothing and changes no state.
* **Dry run and report** for ``confar privacy plan`` / ``confar privacy report`` (``PlanPrivacy`` and
  ``PrivacyReport`` RPCs): the answers (``proto.records.PlanAnswer`` / ``LedgerReport``, put on the wire by
  ``proto.serde_privacy``) are computed here; neither touches data or the ledger. The report carries what
  the ledger accounts under: ``[budget] colluding`` ("all" or q) and ``neighbours``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from parties.analyses import Analysis, PrivacyAccounted, RunAccounted, Unaccountable
from parties.charges import merge_events, merge_run_charge, run_step_counts
from parties.config import PartyConfig
from parties.journal import JOURNAL_FILE, JournalContents, missing_journal, read_journal
from parties.refusal import Reason, Refusal
from proto.files import write_durable
from proto.records import BudgetState, LedgerReport, PlanAnswer, RunCharge
from proto.spec import SessionSpec
from proto.study import Study

if TYPE_CHECKING:  # mechanisms.privacy (dp_accounting, scipy) is imported only by daemons that account
    from mechanisms.privacy import (
        EpsDeltaBudget,
        GDPBudget,
        PrivacyEvent,
        PrivacyLedger,
        RDPBudget,
        RevealView,
        SpendReport,
    )

    Budget = GDPBudget | EpsDeltaBudget | RDPBudget

LEDGER_FILE = "privacy_ledger.json"
OWNER = "this party's privacy budget"  # how a refusal names the registry's budget (a study's cap: its own)
__all__ = ["LEDGER_FILE", "LedgerFileError", "PrivacyBudgetStore", "merge_run_charge", "run_step_counts"]


class LedgerFileError(RuntimeError):
    """The ledger file cannot be read or trusted; the daemon must not start (the message names the file)."""


class PrivacyRefusal(Refusal):
    """A batch or session this party refuses on privacy grounds: RESOURCE_EXHAUSTED past the budget,
    FAILED_PRECONDITION for what the ledger cannot account for."""


def configured_budget(cfg: PartyConfig) -> Budget | None:
    """The privacy budget of ``cfg`` (``[budget] gdp_mu`` or ``epsilon`` + ``delta``), or None."""
    from mechanisms.privacy import EpsDeltaBudget, GDPBudget, RDPBudget

    if cfg.gdp_mu is not None:
        return GDPBudget(cfg.gdp_mu)
    if cfg.epsilon is not None and cfg.delta is not None:
        if cfg.accountant == "renyi":
            return RDPBudget(cfg.epsilon, cfg.delta)
        return EpsDeltaBudget(cfg.epsilon, cfg.delta)
    return None


def assumed_colluding(cfg: PartyConfig, m: int) -> int:
    """How many parties the accounting assumes pool their noise: ``[budget] colluding``, at most m - 1."""
    return m - 1 if cfg.colluding is None else min(cfg.colluding, m - 1)


@functools.lru_cache(maxsize=64)
def study_tag(text: str) -> str:
    """The label segment of a charge made for the study whose canonical text is ``text``: ``study <digest
    prefix>`` (``proto.study.SHORT`` hex digits; the text was checked at the wire)."""
    return f"study {Study.from_text(text).short}"


def events_to_json(events: Sequence[PrivacyEvent]) -> str:
    return json.dumps([e.to_dict() for e in events])


def charged_per_run(spec: SessionSpec) -> bool:
    """Whether the session's reveal mode is charged once for the whole run, not once per batch (its entry
    in ``mechanisms.privacy.REVEAL_PRIVACY``: federated ABCDP's svt)."""
    from mechanisms.privacy import reveal_privacy

    return reveal_privacy(spec.reveal_mode).charged_per_run


def session_view(cfg: PartyConfig, spec: SessionSpec) -> RevealView:
    """What the coalition this party's accounting assumes observes in ``spec`` (its mode and threshold)."""
    from mechanisms.privacy import coalition_view

    return coalition_view(spec.reveal_mode, spec.m, spec.t, assumed_colluding(cfg, spec.m))


def _refusal_message(spec: SessionSpec, reason: str) -> str:
    params = json.dumps(spec.model_params, sort_keys=True)
    if len(params) > 300:
        params = params[:300] + "…"
    return (
        f"analysis {spec.model!r} with parameters {params} in reveal mode {spec.reveal_mode!r} "
        f"(m = {spec.m}, session threshold t = {spec.t}) has no per-step privacy bound this party can back: "
        f"{reason}. This party has a privacy budget and refuses it"
    )


class PrivacyBudgetStore:
    """The daemon's privacy ledger: loaded at start-up, checked and committed per batch, persisted."""

    def __init__(
        self,
        path: Path,
        identity: str,
        budget: Budget | None,
        ledger: PrivacyLedger | None,
        run_charges: Sequence[RunCharge] = (),
        run_states: dict[str, dict[str, Any]] | None = None,
        owner: str = OWNER,
    ) -> None:
        self.path, self.identity, self.budget, self.ledger = path, identity, budget, ledger
        self.owner = owner  # how a refusal names the budget (a study's cap: parties.governance)
        self.run_charges: list[RunCharge] = list(run_charges)
        # per run and charge fingerprint ("<run>/<fingerprint>"): the worst-record state (RunState.to_dict)
        self.run_states: dict[str, dict[str, Any]] = dict(run_states or {})
        self.journal_seq = 0  # the last ledger journal record applied (parties.journal)
        # eps-at-delta budgets: per mechanism, (the rest of the ledger, its count then, capacity then)
        self._capacity: dict[PrivacyEvent, tuple[tuple[tuple[PrivacyEvent, int], ...], int, int]] = {}

    # ---- start-up ----------------------------------------------------------------------------------------

    @classmethod
    def load(
        cls, cfg: PartyConfig, journal: JournalContents | None = None, read_only: bool = False
    ) -> PrivacyBudgetStore:
        """Read ``<state_dir>/privacy_ledger.json`` (if any) and the ledger journal's later records
        (``journal`` as the daemon read it, else read here) under the configured budget.

        Raises :class:`LedgerFileError` naming the file when it is unreadable, corrupt, another party's, or
        holds events the configured budget cannot account for; ``parties.journal.JournalError`` naming the
        journal's file and line when the journal cannot complete it. ``read_only`` (the custodian's report,
        beside a running daemon): no folder is made and no interrupted write's leftover removed."""
        path = cfg.state_dir / LEDGER_FILE
        budget = configured_budget(cfg)
        if journal is None:
            journal = read_journal(cfg.state_dir / JOURNAL_FILE, cfg.identity)
        if budget is None and not path.exists():
            if journal is not None and any("events" in r or "run" in r for r in journal.records):
                raise LedgerFileError(
                    f"ledger journal {journal.path} holds privacy charges not yet in {path}, but no privacy "
                    "budget is configured; configure it again to start"
                )
            return cls(path, cfg.identity, None, None)
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        from mechanisms.privacy import PrivacyLedger, UnsupportedEventError

        tmp = path.with_name(path.name + ".tmp")
        # a write interrupted before its rename: the old file (if any) is still intact
        if tmp.exists() and not read_only:
            tmp.unlink()
        if not path.exists():
            assert budget is not None
            fresh = cls(path, cfg.identity, budget, PrivacyLedger(budget))
            if journal is not None:
                fresh.journal_seq = journal.after
                fresh.replay(journal.records)
            return fresh
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise LedgerFileError(
                f"privacy ledger {path} cannot be read ({exc.strerror}); refusing to start without it"
            ) from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise LedgerFileError(
                f"privacy ledger {path} is corrupt (not JSON: {exc}); refusing to start. Restore it from a "
                "backup; deleting it would reset this party's privacy spend"
            ) from exc
        try:
            if not isinstance(doc, dict) or doc.get("version") != 1:
                raise ValueError(f"expected a version 1 ledger object, got {str(doc)[:80]!r}")
            if doc.get("party") != cfg.identity:
                raise ValueError(f"it belongs to party {doc.get('party')!r}, not to {cfg.identity!r}")
            stored = PrivacyLedger.from_dict(doc["ledger"])
            raw_charges = doc.get("run_charges", [])
            if not isinstance(raw_charges, list):
                raise ValueError("run_charges must be a list")
            charges = [RunCharge.from_dict(c) for c in raw_charges]
            states = doc.get("worst_record", {})
            if not isinstance(states, dict):
                raise ValueError("worst_record must be an object of run states")
            for key, state in states.items():
                _check_run_state(key, state)
            seq = doc.get("journal_seq", 0)
            if type(seq) is not int or seq < 0:
                raise ValueError(f"journal_seq must be an integer >= 0, got {seq!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise LedgerFileError(
                f"privacy ledger {path} is corrupt ({type(exc).__name__}: {exc}); refusing to start. "
                "Restore it from a backup; deleting it would reset this party's privacy spend"
            ) from exc
        if journal is None and seq:
            raise missing_journal(seq, path, cfg.state_dir / JOURNAL_FILE)
        later = journal.records_after(seq, path) if journal is not None else ()
        if budget is None:
            store = cls(path, cfg.identity, None, stored, charges, states)
        else:
            store = cls(path, cfg.identity, budget, PrivacyLedger(budget, stored.events), charges, states)
        store.journal_seq = seq
        store.replay(later)
        if budget is not None:
            assert store.ledger is not None
            try:
                store.ledger.spent()
            except UnsupportedEventError as exc:
                raise LedgerFileError(
                    f"privacy ledger {path} holds events the configured budget cannot account for: {exc}"
                ) from exc
        return store

    def replay(self, records: Sequence[dict[str, Any]]) -> None:
        """Apply ledger journal records: their events and run charges merged as :meth:`commit` merged them
        (no budget check: they were charged); records without a charge only advance ``journal_seq``."""
        from mechanisms.privacy import PrivacyLedger, event_from_dict

        for rec in records:
            if "events" in rec or "run" in rec:
                try:
                    if self.ledger is None:
                        raise ValueError("a privacy charge, but this party keeps no privacy ledger")
                    events = [event_from_dict(e) for e in rec.get("events", [])]
                    run = RunCharge.from_dict(rec["run"]) if "run" in rec else None
                    state = rec.get("worst_record")
                    if state is not None:
                        if not isinstance(state, dict) or set(state) != {"key", "state"}:
                            raise ValueError("worst_record must be an object of key and state")
                        _check_run_state(state["key"], state["state"])
                except (ValueError, KeyError, TypeError) as exc:
                    raise LedgerFileError(
                        f"ledger journal record {rec.get('seq')} for {self.path} is corrupt "
                        f"({type(exc).__name__}: {exc}); refusing to start"
                    ) from exc
                self.ledger = PrivacyLedger(self.ledger.budget, merge_events((*self.ledger.events, *events)))
                if run is not None:
                    self.run_charges = merge_run_charge(self.run_charges, run)
                if state is not None:
                    self.run_states[state["key"]] = state["state"]
            self.journal_seq = int(rec["seq"])

    @property
    def enforced(self) -> bool:
        return self.budget is not None

    def charged_steps(self, run_id: str) -> int:
        """k: this ledger holds charges for run steps 1..k of ``run_id`` without a gap (0: none). A blocked
        run's effects release is a post-processing of what its charged sweeps paid for, so a registry with a
        budget releases the draws of charged sweeps only (``parties.models_bridge``)."""
        ranges = sorted((c.from_step, c.to_step) for c in self.run_charges if c.run_id == run_id)
        k = 0
        for lo, hi in ranges:
            if lo > k + 1:
                break
            k = max(k, hi)
        return k

    def charged_run_step(
        self, run_id: str, run_step: int, digest: bytes, noise_key: str
    ) -> RunCharge | None:
        """The charge of run step ``run_step`` of ``run_id`` made with this ``digest`` under the run noise key
        ``noise_key`` (a charge whose range ends at that step), or None. Only a charge that records both can
        match."""
        want = (run_id, run_step, digest.hex(), noise_key)
        for c in reversed(self.run_charges):
            if noise_key and (c.run_id, c.to_step, c.digest, c.noise_key) == want:
                return c
        return None

    # ---- per batch ---------------------------------------------------------------------------------------

    def batch_events(
        self,
        cfg: PartyConfig,
        analysis: Analysis,
        spec: SessionSpec,
        n: int,
        batch: dict[str, npt.NDArray[Any]] | None = None,
    ) -> list[PrivacyEvent]:
        """The events one batch of ``n`` decisions adds, computed by this party for the coalition its
        ``[budget] colluding`` assumes and the session's threshold (:func:`session_view`) and for its
        ``[budget] neighbours``; ``batch`` (the batch's public inputs) prices decisions charged at their
        own sensitivity (None: a dry run at the worst case). Raises :class:`Unaccountable` with the reason
        when the analysis cannot back a per-step bound."""
        if not isinstance(analysis, PrivacyAccounted):
            raise Unaccountable(f"analysis {spec.model!r} states no privacy accounting")
        from mechanisms.privacy import RDPBudget

        view = session_view(cfg, spec)
        args = (spec.reveal_mode, view, n, batch, cfg.neighbours)
        if isinstance(self.budget, RDPBudget):  # the accept bit's Renyi bound at the filter's fixed order
            assert self.budget.alpha is not None
            events = analysis.privacy_events(*args, rdp_orders=(self.budget.alpha,))
        else:
            events = analysis.privacy_events(*args)
        return _labelled(cfg, spec, view, events)

    def rdp_orders(self) -> tuple[float, ...] | None:
        """The Rényi filter's fixed order, when the budget is one (what each event carries its ρ at)."""
        from mechanisms.privacy import RDPBudget

        if isinstance(self.budget, RDPBudget):
            assert self.budget.alpha is not None
            return (self.budget.alpha,)
        return None

    def run_events_for(
        self,
        cfg: PartyConfig,
        analysis: Analysis,
        spec: SessionSpec,
        n: int,
        batch: dict[str, npt.NDArray[Any]],
    ) -> tuple[list[PrivacyEvent], tuple[str, dict[str, Any]] | None]:
        """The events to charge for a batch the daemon is about to answer, and the run state to keep with
        them (``(key, state)``; None when the batch is charged per decision): per run at its worst record
        when this party asks for it (``[budget] per_run = "worst-record"``) and the session's analysis and
        plan allow it, else :meth:`events_for`. FAILED_PRECONDITION (with the reason) when it cannot be
        accounted."""
        if not self.enforced or cfg.per_run != "worst-record" or not isinstance(analysis, RunAccounted):
            return self.events_for(cfg, analysis, spec, n, batch), None
        run = spec.run_id or f"session {spec.session_id.hex()}"
        view = session_view(cfg, spec)
        try:
            got = analysis.worst_record_events(
                spec.reveal_mode,
                view,
                n,
                batch,
                cfg.neighbours,
                self.rdp_orders(),
                lambda fingerprint: self.run_states.get(f"{run}/{fingerprint}"),
            )
        except Unaccountable as exc:
            raise PrivacyRefusal(Reason.FAILED_PRECONDITION, _refusal_message(spec, str(exc))) from exc
        if got is None:
            return self.events_for(cfg, analysis, spec, n, batch), None
        events, fingerprint, state = got
        return _labelled(cfg, spec, view, events), (f"{run}/{fingerprint}", state)

    def keep_run_state(self, run_state: tuple[str, dict[str, Any]]) -> None:
        """Install a run's state once the journal record holding it is durable."""
        key, state = run_state
        self.run_states[key] = state


    def events_for(
        self,
        cfg: PartyConfig,
        analysis: Analysis,
        spec: SessionSpec,
        n: int,
        batch: dict[str, npt.NDArray[Any]] | None = None,
    ) -> list[PrivacyEvent]:
        """Events to charge for a batch (its public inputs ``batch``, or None for the worst case); raises
        FAILED_PRECONDITION (with the reason) if the analysis cannot be accounted under a budget."""
        if not self.enforced:
            return []
        try:
            return self.batch_events(cfg, analysis, spec, n, batch)
        except Unaccountable as exc:
            reason = _refusal_message(spec, str(exc))
            raise PrivacyRefusal(Reason.FAILED_PRECONDITION, reason) from exc

    def _fits_by_capacity(self, events: Sequence[PrivacyEvent]) -> bool:
        """Fast path for eps-at-delta budgets (a PLD composition costs 0.1-2 s, too slow per batch): when the
        batch is n occurrences of one mechanism, compare the count since the cache was made with a count
        known to fit there, k_ok. When a batch would pass k_ok, one composition checks max(2 k_ok, needed)
        (doubling: about log2 of the run's decisions compositions in all, spread over the run) and k_ok
        grows if it fits. Sound because the true eps(delta) of a composition does not decrease with more
        mechanisms and the PLD value at k_ok bounds it. The cache is per state of the *other* mechanisms in
        the ledger. False means "ask the exact check"."""
        from mechanisms.privacy import EpsDeltaBudget

        if self.ledger is None or not isinstance(self.budget, EpsDeltaBudget) or not events:
            return False
        keys = {e.mechanism_key() for e in events}
        if len(keys) != 1:
            return False
        (key,) = keys
        n = sum(e.count for e in events)
        counts: dict[PrivacyEvent, int] = {}
        for e in self.ledger.events:
            k = e.mechanism_key()
            counts[k] = counts.get(k, 0) + e.count
        mine = counts.pop(key, 0)
        rest = tuple(sorted(counts.items(), key=lambda kv: repr(kv[0].to_dict())))
        cached = self._capacity.get(key)
        if cached is None or cached[0] != rest or mine < cached[1]:
            cached = (rest, mine, 0)
        need = mine - cached[1] + n
        if need > cached[2]:
            ledger = self.ledger
            base = cached[1]
            extra = mine - base  # already committed since the cache's base state

            def fits(k: int) -> bool:  # k occurrences beyond the base state
                if k <= extra:
                    return True
                return not ledger.would_exceed([dataclasses.replace(key, count=k - extra)])

            grown = max(2 * cached[2], need)
            if fits(grown):
                cached = (rest, base, grown)
            elif fits(need):
                cached = (rest, base, need)
            else:
                self._capacity[key] = cached
                return False
        self._capacity[key] = cached
        return need <= cached[2]

    def warm(self, events: Sequence[PrivacyEvent]) -> None:
        """Prime the fast path's cache (call off the event loop: a composition may take seconds)."""
        self._fits_by_capacity(events)

    def check(self, events: Sequence[PrivacyEvent], what: str = "this batch") -> SpendReport | None:
        """Dry run (no state change); raises RESOURCE_EXHAUSTED past the budget. Returns None when the batch
        fits by the mechanism's cached capacity (no composition computed)."""
        if self.ledger is None or not self.enforced:
            return None
        if self._fits_by_capacity(events):
            return None
        from mechanisms.privacy import UnsupportedEventError

        try:
            report = self.ledger.check(events)
        except UnsupportedEventError as exc:
            raise PrivacyRefusal(Reason.FAILED_PRECONDITION, str(exc)) from exc
        if not report.allowed:
            raise PrivacyRefusal(
                Reason.RESOURCE_EXHAUSTED,
                f"{what} would exceed {self.owner} ({_budget_text(self.ledger.budget)}): "
                f"{report.unit} spent {report.spent_before:.6g}, would be {report.spent_after:.6g}",
            )
        return report

    def stage(
        self, events: Sequence[PrivacyEvent], run: RunCharge | None = None
    ) -> tuple[PrivacyLedger, list[RunCharge]] | None:
        """The ledger and run charges with ``events`` (and the run step they pay for) appended, checked
        against the budget (RESOURCE_EXHAUSTED past it) and merged; nothing is written or changed. None when
        nothing is charged (no budget, no events)."""
        if self.ledger is None or not self.enforced or not events:
            return None
        from mechanisms.privacy import BudgetExceededError, PrivacyLedger

        try:
            if self._fits_by_capacity(events):
                grown = self.ledger.append_unchecked(events)
            else:
                grown = self.ledger.commit(events)
        except BudgetExceededError as exc:
            raise PrivacyRefusal(Reason.RESOURCE_EXHAUSTED, str(exc)) from exc
        merged = PrivacyLedger(grown.budget, merge_events(grown.events))
        return merged, self.run_charges if run is None else merge_run_charge(self.run_charges, run)

    def install(self, staged: tuple[PrivacyLedger, list[RunCharge]], journal_seq: int | None = None) -> None:
        """Swap in what :meth:`stage` made, once it is durable (as ledger journal record ``journal_seq``)."""
        self.ledger, self.run_charges = staged
        if journal_seq is not None:
            self.journal_seq = journal_seq

    def commit(
        self,
        events: Sequence[PrivacyEvent],
        run: RunCharge | None = None,
        run_state: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """Append ``events`` (and the run step they pay for, and the run's worst-record state after them, if
        any) durably by rewriting the whole file (fsync + atomic rename) and only then in memory: a store
        without a ledger journal."""
        staged = self.stage(events, run)
        if staged is not None:
            states = self.run_states if run_state is None else {**self.run_states, run_state[0]: run_state[1]}
            self._write(*staged, states)
            self.install(staged)
            if run_state is not None:
                self.keep_run_state(run_state)

    def write_snapshot(self) -> None:
        """Write the ledger durably as it is now, with the journal records it includes (compaction)."""
        if self.ledger is not None:
            self._write(self.ledger, self.run_charges, self.run_states)

    def _write(
        self,
        ledger: PrivacyLedger,
        charges: Sequence[RunCharge] = (),
        states: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        doc: dict[str, object] = {"version": 1, "party": self.identity, "ledger": ledger.to_dict()}
        if charges:
            doc["run_charges"] = [c.to_dict() for c in charges]
        if states:
            doc["worst_record"] = states
        if self.journal_seq:
            doc["journal_seq"] = self.journal_seq
        write_durable(self.path, json.dumps(doc, indent=1).encode("utf-8"))  # 0600, fsync, atomic rename

    # ---- dry run and report ------------------------------------------------------------------------------

    def state(self) -> BudgetState:
        if self.ledger is None or self.budget is None:
            return BudgetState(configured=False)
        return BudgetState(
            configured=True,
            budget_json=json.dumps(self.budget.to_dict()),
            unit=self.budget.unit,
            limit=self.budget.limit,
            spent=self.ledger.spent(),
        )

    def report(self, cfg: PartyConfig, decisions_used: int) -> LedgerReport:
        """This party's ledger as ``PrivacyReport`` answers it (``proto.serde_privacy.report_to_proto``), with
        what its budget accounts under (``[budget] colluding`` and ``neighbours``; "" without a budget)."""
        events = self.ledger.events if self.ledger is not None else ()
        budget = self.state()
        return LedgerReport(
            party=cfg.id,
            identity=cfg.identity,
            budget=budget,
            events_json=events_to_json(events),
            decisions_used=decisions_used,
            run_charges_json=json.dumps([c.to_dict() for c in self.run_charges]),
            colluding=("all" if cfg.colluding is None else str(cfg.colluding)) if budget.configured else "",
            neighbours=cfg.neighbours if budget.configured else "",
        )

    def plan(
        self,
        cfg: PartyConfig,
        analysis: Analysis | None,
        spec: SessionSpec,
        batches: int,
        batch_size: int,
        policy_refusal: str,
        decisions_used: int,
    ) -> PlanAnswer:
        """What the planned session would spend here. Reads only the config and the ledger (no data)."""
        budget = self.state()
        answer = PlanAnswer(
            party=cfg.id,
            identity=cfg.identity,
            budget=budget,
            projected=budget.spent,
            decisions_used=decisions_used,
            decisions_budget=cfg.max_decisions,
        )
        if policy_refusal or analysis is None:
            return dataclasses.replace(
                answer, would_refuse=True, message=policy_refusal or "analysis refused"
            )
        reasons: list[str] = []
        allowed = batches
        if batch_size > cfg.max_batch:
            reasons.append(f"batch size {batch_size} exceeds limits.max_batch = {cfg.max_batch}")
            allowed = 0
        left = max(0, cfg.max_decisions - decisions_used)
        if batches * batch_size > left:
            allowed = min(allowed, left // batch_size)
            reasons.append(
                f"{batches * batch_size} decisions exceed the decision budget ({decisions_used} of "
                f"{cfg.max_decisions} used)"
            )
        from mechanisms.privacy import UnsupportedEventError, scaled

        per_batch: list[PrivacyEvent] | None
        events_json, projected, message = "", answer.projected, ""
        try:
            per_batch = self.batch_events(cfg, analysis, spec, batch_size)
            events_json = events_to_json(per_batch)
        except Unaccountable as exc:
            per_batch, unaccountable = None, str(exc)
        # the accounting's work is bounded by this party's decision budget, not by the request's batch count:
        # batches past it never run here, so the projection covers at most the batches it leaves room for
        counted = min(batches, max(1, left // batch_size))
        budget_name = "the privacy budget" if self.owner == OWNER else self.owner
        if self.enforced and self.ledger is not None:
            if per_batch is None:
                reasons.append(_refusal_message(spec, unaccountable))
                allowed = 0
            else:
                try:
                    report = self.ledger.check(scaled(per_batch, counted))
                    projected = report.spent_after
                    if not report.allowed:
                        fit = self._batches_that_fit(per_batch, counted)
                        allowed = min(allowed, fit)
                        over = f" over the {counted} batches the decision budget allows" * (counted < batches)
                        reasons.append(
                            f"would exceed {budget_name} ({_budget_text(self.ledger.budget)}) after "
                            f"{fit} of {batches} batches: {report.unit} {report.spent_before:.6g} -> "
                            f"{report.spent_after:.6g}{over}"
                        )
                except UnsupportedEventError as exc:
                    reasons.append(str(exc))
                    allowed = 0
        else:
            message = "no privacy budget configured at this party (only max_decisions is enforced)"
        if reasons:
            message = "; ".join(reasons)
        return dataclasses.replace(
            answer,
            projected=projected,
            would_refuse=bool(reasons),
            message=message or "within budget",
            events_json=events_json,
            batches_allowed=allowed,
        )

    def _batches_that_fit(self, per_batch: Sequence[PrivacyEvent], batches: int) -> int:
        from mechanisms.privacy import scaled

        assert self.ledger is not None
        lo, hi = 0, batches  # fits(lo) holds (or lo = 0), fits(hi) fails
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.ledger.would_exceed(scaled(per_batch, mid)):
                hi = mid
            else:
                lo = mid
        return lo


def _budget_text(budget: Budget) -> str:
    from mechanisms.privacy import GDPBudget, RDPBudget

    if isinstance(budget, GDPBudget):
        return f"GDP mu_max = {budget.mu_max:g}"
    if isinstance(budget, RDPBudget):
        return f"eps_max = {budget.eps_max:g} at delta = {budget.delta:g} (Renyi, alpha {budget.alpha:g})"
    return f"eps_max = {budget.eps_max:g} at delta = {budget.delta:g}"


def _labelled(
    cfg: PartyConfig, spec: SessionSpec, view: RevealView, events: Sequence[PrivacyEvent]
) -> list[PrivacyEvent]:
    """The events with what the charge assumed (neighbours, colluding parties, threshold) and where."""
    where = f"session {spec.session_id.hex()[:16]}" + (f"; run {spec.run_id}" if spec.run_id else "")
    if spec.study:  # the study the charge counts against (parties.governance reads this segment)
        where = f"{study_tag(spec.study)}; {where}"
    threat = (
        f"{cfg.neighbours} neighbours, assumes q = {assumed_colluding(cfg, spec.m)} colluding, "
        f"session t = {spec.t}, reveal {spec.reveal_mode}"
    )
    if view.threat.residual_parties == 1 and spec.m > 1:
        threat += " (only this party's own noise counts)"
    return [dataclasses.replace(e, label=f"{e.label or spec.model}; {threat}; {where}") for e in events]


def _check_run_state(key: object, state: object) -> None:
    """A stored run state's outer shape (its numbers are checked where the run's charge reads them)."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a worst-record run key must be a non-empty string, got {key!r}")
    if not isinstance(state, dict) or set(state) != {"grams", "per_decision", "decisions"}:
        raise ValueError(
            f"worst-record run state {key!r} must be an object of grams, per_decision and decisions"
        )
