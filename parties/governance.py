"""Study approvals enforced (issue 37): which sessions this registry admits, and each study's cap charged
besides the registry's budget.

**Admission** (:meth:`Governance.admit`, at OpenSession, at every Evaluate and in the PlanPrivacy dry run):
a session carries its study's document (``SessionSpec.study``, ``proto.study``). With ``[governance]
require_approval = true`` a session is refused (PERMISSION_DENIED) unless a live approval of this registry
(``parties.approvals``, the custodian's ``confar-party study approve``) covers it, and the refusal says what
to do: a session naming no study is told how a study is requested and approved; an unapproved study is
named (digest, title, reference), with the first field in which it differs from an approved study of the
same reference or title (a changed experiment is another study); a revoked approval names who revoked it
and why; an expired one the day it ended; a session that leaves what its approved study covers names the
field with both values (``proto.study.mismatch``). A study that has an approval here is held to it
whether or not approval is required; without ``require_approval`` a study never approved here runs under
the registry's budget alone. Revocation and expiry take effect at the next step, not only the next
session. An approvals file that cannot be trusted refuses every study's session (FAILED_PRECONDITION,
naming the file and line) and stops start-up.

**The cap** (:meth:`Governance.check`): every charge of a study's session is labelled ``study <digest
prefix>`` (``parties.privacy_budget.batch_events``), so the study's spend is the registry's own accountant
over the ledger's events with that label, durable with them (one ledger journal record per charge); no
second ledger is kept. Before a batch is charged its events are checked against the approval's cap with
the registry's accountant: an eps-at-delta budget's PLD composition at the cap's δ, a Rényi filter at the
registry's own order α (valid for any order fixed in advance), a GDP filter at the μ whose curve passes
through (cap, δ). Past the cap: RESOURCE_EXHAUSTED "would exceed the privacy budget this registry approved
for study …", before anything is charged or any share leaves (a run stops there like at a budget); the dry
run (PlanPrivacy) reports the tighter of the registry's budget and the study's cap, so ``confar run``
refuses a run that would pass the cap before anything is released.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from parties.approvals import Approval, ApprovalError, ApprovalStore
from parties.config import PartyConfig
from parties.privacy_budget import PrivacyBudgetStore
from parties.refusal import Reason, Refusal
from proto.spec import SessionSpec, shown
from proto.study import SHORT, Study, first_difference, mismatch

if TYPE_CHECKING:
    from mechanisms.privacy import PrivacyEvent
    from parties.privacy_budget import Budget

HOW_TO_APPROVE = (
    "its custodian reviews the study file with `confar-party study show study.json` and approves it with "
    "`confar-party study approve study.json --config party.toml --max-epsilon E --expires YYYY-MM-DD`"
)


@functools.lru_cache(maxsize=64)
def study_of(text: str) -> Study:
    """The study a session carries, parsed once per text (admission runs at every step)."""
    return Study.from_text(text)


def cap_budget(registry: Budget, a: Approval) -> Budget:
    """The study's cap as a budget of the registry's own accountant (module docstring)."""
    from mechanisms.privacy import EpsDeltaBudget, GDPBudget, RDPBudget, gdp_mu

    if isinstance(registry, RDPBudget):
        return RDPBudget(a.max_epsilon, a.delta, registry.alpha)
    if isinstance(registry, GDPBudget):
        return GDPBudget(gdp_mu(a.max_epsilon, a.delta))
    return EpsDeltaBudget(a.max_epsilon, a.delta, registry.discretization)


def study_events(events: Sequence[PrivacyEvent], digest: str) -> list[PrivacyEvent]:
    """The charges of the study ``digest`` among ``events`` (their label's ``study <prefix>`` segment)."""
    tag = f"study {digest[:SHORT]}; "
    return [e for e in events if tag in (e.label or "")]


class Governance:
    """The registry's approvals applied to its sessions and charges (module docstring)."""

    def __init__(self, cfg: PartyConfig, privacy: PrivacyBudgetStore, approvals: ApprovalStore) -> None:
        self.cfg, self.privacy, self.approvals = cfg, privacy, approvals
        self._caps: dict[tuple[str, int], PrivacyBudgetStore] = {}  # (digest, approval seq): cap ledger

    # ---- admission -----------------------------------------------------------------------------------

    def admit(self, spec: SessionSpec) -> Approval | None:
        """The live approval covering ``spec`` (None: no study, or one never approved here and approval is
        not required); a :class:`Refusal` naming what to do otherwise."""
        me = f"this registry ({self.cfg.identity})"
        if not spec.study:
            if not self.cfg.require_approval:
                return None
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"{me} admits only sessions of a study it approved ([governance] require_approval) and this "
                "session names none: the coordinator gives its experiment a [study] table, writes the study "
                "request with `confar study request EXPERIMENT.toml --out study.json` and sends it here; "
                + HOW_TO_APPROVE,
            )
        study = study_of(spec.study)  # checked at the wire
        try:
            book = self.approvals.book()
        except ApprovalError as exc:
            raise Refusal(Reason.FAILED_PRECONDITION, f"{me} cannot trust its approvals: {exc}") from exc
        a = book.get(study.digest)
        if a is None:
            if not self.cfg.require_approval:
                return None
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"{study.name} is not approved at {me}: {HOW_TO_APPROVE}"
                + self._near(study, book.approvals.values()),
            )
        if a.revoked is not None:
            at, by, reason = a.revoked
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"the approval of {study.name} at {me} was revoked at {at} by {by}: {reason}",
            )
        if a.expired():
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"the approval of {study.name} at {me} expired at the end of {a.expires.isoformat()} (UTC); "
                "its custodian may approve it again with a later --expires",
            )
        found = mismatch(study, spec)
        if found is not None:
            field_, want, got = found
            raise Refusal(
                Reason.PERMISSION_DENIED,
                f"the session is not what {study.name} approved at {me}: {field_} is {shown(got)} in the "
                f"session but {shown(want)} in the study (a changed experiment is another study: request it "
                "and have it approved)",
            )
        return a

    @staticmethod
    def _near(study: Study, approved: Any) -> str:
        """Where ``study`` differs from an approved study of the same reference or title ("" if none)."""
        same = [a for a in approved if a.study.reference == study.reference or a.study.title == study.title]
        if not same:
            return ""
        other = same[-1].study
        found = first_difference(other.doc, study.doc)
        if found is None:  # pragma: no cover (equal documents have equal digests)
            return ""
        field_, theirs, ours = found
        return (
            f". It differs from the study approved here as {other.short} ({other.title!r}, reference "
            f"{other.reference!r}) in {field_}: approved {shown(theirs)}, asked {shown(ours)} (a changed "
            "experiment is another study)"
        )

    # ---- the cap ---------------------------------------------------------------------------------------

    def cap_store(self, a: Approval) -> PrivacyBudgetStore:
        """The study's charges under its cap (a ledger view kept per approval for its capacity cache)."""
        from mechanisms.privacy import PrivacyLedger

        ledger, budget = self.privacy.ledger, self.privacy.budget
        if ledger is None or budget is None:
            raise Refusal(
                Reason.FAILED_PRECONDITION,
                f"{a.study.name} has a cap at this registry, but it keeps no privacy budget to charge it by",
            )
        key = (a.study.digest, a.seq)
        store = self._caps.get(key)
        cap = cap_budget(budget, a)
        owner = f"the privacy budget this registry approved for {a.study.name}"
        if store is None or store.budget != cap:
            store = PrivacyBudgetStore(self.privacy.path, self.cfg.identity, cap, None, owner=owner)
            self._caps = {k: v for k, v in self._caps.items() if k[0] != a.study.digest}
            self._caps[key] = store
        store.ledger = PrivacyLedger(cap, tuple(study_events(ledger.events, a.study.digest)))
        return store

    def check(self, a: Approval | None, events: Sequence[PrivacyEvent], what: str) -> None:
        """RESOURCE_EXHAUSTED when ``events`` would take the study past its cap (nothing without one)."""
        if a is not None and events:
            self.cap_store(a).check(events, what)

    def spent(self, a: Approval) -> float:
        """The study's spend here, in its cap's unit (ε at the cap's δ; μ for a GDP registry)."""
        store = self.cap_store(a)
        assert store.ledger is not None
        return store.ledger.spent()
