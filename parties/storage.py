"""What one party keeps in its state directory, opened once at start-up: the decision ledger
(``ledger.json``: how many decisions this party has answered, checked against ``[budget] max_decisions``),
the privacy ledger (``parties.privacy_budget``), the ledger journal of both (``parties.journal``), the run
resume records and run noise keys (``parties.replay``) and the append-only audit log (``parties.audit``).

A step's charge (its privacy events, the run step they pay for, its decisions) is one ledger journal record,
appended and fdatasynced before any share of the step leaves (:meth:`PartyStorage.charge`); the two ledger
files are snapshots, each with the last journal record it includes (``journal_seq``), written durably (0600,
fsync, atomic rename: ``proto.files.write_durable``) by :meth:`PartyStorage.compact`: at start-up (when the
journal holds records), every ``COMPACT_EVERY`` records, when a session closes and when the daemon stops; so
the snapshots are current whenever no session is open. A corrupt ledger or journal stops start-up naming the
file (and the journal's line) rather than starting without it. Also here: the testing-only fault
injection ``[testing] freeze_at`` (an audit line, then SIGSTOP), which the resume tests use to kill a party
at a chosen point of a run step.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from parties.approvals import ApprovalError, approval_store
from parties.audit import AuditLog
from parties.config import PartyConfig
from parties.effects import EffectsStore
from parties.governance import Governance
from parties.journal import JOURNAL_FILE, Journal, JournalContents, missing_journal, read_journal
from parties.privacy_budget import PrivacyBudgetStore
from parties.replay import ReplayStore
from parties.sources import Snapshot
from proto.files import make_private, write_durable

if TYPE_CHECKING:
    from mechanisms.privacy import PrivacyEvent
    from proto.records import RunCharge

COMPACT_EVERY = 1000  # journal records between snapshots (a session's close and the daemon's stop compact)


class PartyStorage:
    """The state directory of one party: audit log, decision ledger, privacy ledger, run resume store, the
    effect draws of blocked runs."""

    def __init__(self, cfg: PartyConfig, snapshot: Snapshot | None) -> None:
        self.cfg = cfg
        cfg.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # its files are 0600 (proto.files)
        self.audit = AuditLog(cfg.state_dir / "audit.log")
        if snapshot is not None:
            self.audit.record(who=cfg.identity, what="DataSnapshot", **snapshot.audit())
        self.ledger_path = cfg.state_dir / "ledger.json"
        journal_path = cfg.state_dir / JOURNAL_FILE
        found = read_journal(journal_path, cfg.identity)  # JournalError (names file and line) stops start-up
        self.decisions_used = self.load_ledger(found)
        self.privacy = PrivacyBudgetStore.load(cfg, found)  # LedgerFileError (names the file) stops start-up
        self.journal = Journal.open(journal_path, cfg.identity, found)
        if found is not None and found.torn:
            self.audit.record(
                who=cfg.identity,
                what="LedgerJournal",
                detail=f"dropped a torn last line of {journal_path} (a charge whose write never completed)",
            )
        self.replays = ReplayStore(cfg.state_dir, cfg.identity)  # run resume records (parties.replay)
        approvals = approval_store(cfg)
        try:  # an approvals file that cannot be trusted stops start-up, naming the file and line
            approvals.book()
        except ApprovalError as exc:
            raise RuntimeError(str(exc)) from exc
        self.governance = Governance(cfg, self.privacy, approvals)  # study approvals (issue 37)
        self.effects = EffectsStore(cfg.state_dir)  # blocked runs' effect draws (parties.effects)
        self.compact()  # records left by a crash (a clean stop leaves none): into the snapshots now

    # ---- decision ledger ---------------------------------------------------------------------------------

    def load_ledger(self, found: JournalContents | None = None) -> int:
        """The decisions used: ``ledger.json`` plus the journal's later records (``found``, else read)."""
        if found is None:
            found = read_journal(self.cfg.state_dir / JOURNAL_FILE, self.cfg.identity)
        used, seq = 0, found.after if found is not None else 0
        if self.ledger_path.exists():
            make_private(self.ledger_path)  # older versions wrote it 0644
            try:
                doc = json.loads(self.ledger_path.read_text())
                used, seq = int(doc["decisions_used"]), doc.get("journal_seq", 0)
                if type(seq) is not int or seq < 0:
                    raise ValueError(f"journal_seq must be an integer >= 0, got {seq!r}")
            except (ValueError, KeyError, TypeError) as exc:
                raise RuntimeError(
                    f"{self.ledger_path} is corrupt ({exc}); refusing to start without a ledger"
                ) from exc
            if found is None and seq:
                raise missing_journal(seq, self.ledger_path, self.cfg.state_dir / JOURNAL_FILE)
        elif seq:  # every compaction writes it: records up to `seq` were counted there
            raise RuntimeError(
                f"{self.ledger_path} is missing but ledger journal {self.cfg.state_dir / JOURNAL_FILE} "
                f"starts after record {seq}, whose decisions only it held; refusing to start without a ledger"
            )
        later = found.records_after(seq, self.ledger_path) if found is not None else ()
        return used + sum(int(r.get("decisions", 0)) for r in later)

    def save_ledger(self) -> None:
        """Write ``ledger.json`` durably as it is now, with the journal records it includes."""
        doc: dict[str, Any] = {"party": self.cfg.identity, "decisions_used": self.decisions_used}
        if self.journal.last_seq:
            doc["journal_seq"] = self.journal.last_seq
        write_durable(self.ledger_path, json.dumps(doc).encode())  # 0600, fsync, atomic rename

    # ---- charges -----------------------------------------------------------------------------------------

    def charge(
        self,
        events: Sequence[PrivacyEvent] = (),
        run: RunCharge | None = None,
        decisions: int = 0,
        run_state: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """Charge ``events`` (and the run step they pay for, and the run's worst-record state after them,
        ``(key, state)``) and count ``decisions``: checked against the privacy budget (RESOURCE_EXHAUSTED
        past it), then one journal record, durable (fdatasync) before this returns and before anything
        changes in memory; call it before any share of the step leaves."""
        staged = self.privacy.stage(events, run)
        if staged is None and not decisions:
            return
        record: dict[str, Any] = {"decisions": decisions}
        if staged is not None:
            record["events"] = [e.to_dict() for e in events]
            if run is not None:
                record["run"] = run.to_dict()
            if run_state is not None:
                record["worst_record"] = {"key": run_state[0], "state": run_state[1]}
        seq = self.journal.append(record)
        if staged is not None:
            self.privacy.install(staged, seq)
            if run_state is not None:
                self.privacy.keep_run_state(run_state)
        else:
            self.privacy.journal_seq = seq
        self.decisions_used += decisions
        if self.journal.records >= COMPACT_EVERY:
            self.compact()

    def count_decisions(self, n: int) -> None:
        """Count ``n`` more answered decisions, persisted before any share of them leaves this party."""
        self.charge(decisions=n)

    def compact(self) -> None:
        """Fold the journal into the snapshots: each written durably with the last record it includes, then
        a fresh journal after that record (a crash in between counts nothing twice: ``parties.journal``);
        and each run record file appended to since it was last written whole, as its record alone."""
        self.replays.compact()
        if not self.journal.records:
            return
        p = self.privacy
        if p.ledger is not None and (p.path.exists() or p.ledger.events or p.run_charges or p.run_states):
            p.write_snapshot()  # (no file yet and nothing charged: none is made, as before)
        self.save_ledger()
        self.journal.replace()

    def close(self) -> None:
        """Compact and close the journal (the daemon stops)."""
        if self.journal.closed:
            return
        self.compact()
        self.journal.close()

    # ---- testing -----------------------------------------------------------------------------------------

    def freeze_point(self, phase: str, run_step: int) -> None:
        """Fault injection for tests (``[testing] freeze_at``): stop this process (SIGSTOP) at ``phase`` of
        ``run_step``, after an audit line, for the test to SIGKILL it there. A no-op otherwise."""
        if (phase, run_step) not in self.cfg.freeze_at:
            return
        self.audit.record(who=self.cfg.identity, what="TestFreeze", detail=f"{phase} of run step {run_step}")
        os.kill(os.getpid(), signal.SIGSTOP)
