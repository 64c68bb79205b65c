"""What one party keeps in its state directory, opened once at start-up: the decision ledger
(``ledger.json``: how many decisions this party has answered, checked against ``[budget] max_decisions``),
the privacy ledger (``parties.privacy_budget``), the run resume records and run noise keys
(``parties.replay``) and the append-only audit log (``parties.audit``).

Every file is written durably (0600, fsync, atomic rename: ``proto.files.write_durable``); a corrupt ledger
stops start-up naming the file rather than starting without one. Also here: the testing-only fault
injection ``[testing] freeze_at`` (an audit line, then SIGSTOP), which the resume tests use to kill a party
at a chosen point of a run step.
"""

from __future__ import annotations

import json
import os
import signal

from parties.audit import AuditLog
from parties.config import PartyConfig
from parties.privacy_budget import PrivacyBudgetStore
from parties.replay import ReplayStore
from parties.sources import Snapshot
from proto.files import make_private, write_durable


class PartyStorage:
    """The state directory of one party: audit log, decision ledger, privacy ledger, run resume store."""

    def __init__(self, cfg: PartyConfig, snapshot: Snapshot | None) -> None:
        self.cfg = cfg
        cfg.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # its files are 0600 (proto.files)
        self.audit = AuditLog(cfg.state_dir / "audit.log")
        if snapshot is not None:
            self.audit.record(who=cfg.identity, what="DataSnapshot", **snapshot.audit())
        self.ledger_path = cfg.state_dir / "ledger.json"
        self.decisions_used = self.load_ledger()
        self.privacy = PrivacyBudgetStore.load(cfg)  # LedgerFileError (names the file) stops start-up
        self.replays = ReplayStore(cfg.state_dir, cfg.identity)  # run resume records (parties.replay)

    # ---- decision ledger ---------------------------------------------------------------------------------

    def load_ledger(self) -> int:
        if not self.ledger_path.exists():
            return 0
        make_private(self.ledger_path)  # older versions wrote it 0644
        try:
            return int(json.loads(self.ledger_path.read_text())["decisions_used"])
        except (ValueError, KeyError, TypeError) as exc:
            raise RuntimeError(
                f"{self.ledger_path} is corrupt ({exc}); refusing to start without a ledger"
            ) from exc

    def save_ledger(self) -> None:
        doc = {"party": self.cfg.identity, "decisions_used": self.decisions_used}
        write_durable(self.ledger_path, json.dumps(doc).encode())  # 0600, fsync, atomic rename

    def count_decisions(self, n: int) -> None:
        """Count ``n`` more answered decisions, persisted before any share of them leaves this party."""
        self.decisions_used += n
        self.save_ledger()

    # ---- testing -----------------------------------------------------------------------------------------

    def freeze_point(self, phase: str, run_step: int) -> None:
        """Fault injection for tests (``[testing] freeze_at``): stop this process (SIGSTOP) at ``phase`` of
        ``run_step``, after an audit line, for the test to SIGKILL it there. A no-op otherwise."""
        if (phase, run_step) not in self.cfg.freeze_at:
            return
        self.audit.record(who=self.cfg.identity, what="TestFreeze", detail=f"{phase} of run step {run_step}")
        os.kill(os.getpid(), signal.SIGSTOP)
