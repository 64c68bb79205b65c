"""How a party's charges merge in its privacy ledger (``parties.privacy_budget``): consecutive events of one
session into one event, consecutive run steps of one session into one range; and how many times a run step
was charged. The same merging serves a commit and the replay of the ledger journal (``parties.journal``), so
a ledger rebuilt from a snapshot and its journal equals the ledger the commits made."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from proto.records import RunCharge

if TYPE_CHECKING:
    from mechanisms.privacy import PrivacyEvent


def merge_events(events: Sequence[PrivacyEvent]) -> tuple[PrivacyEvent, ...]:
    """Merge consecutive events of the same mechanism and label (counts add), and consecutive Gaussian events
    of the same label into one with μ² summed (the per-decision charges of a session, and the increments of a
    run charged at its worst record: GDP composition is exactly that; Rényi events of the same orders also add
    their ρ, and a Rényi event is never merged with a plain Gaussian one); composition is unchanged either
    way, and the ledger grows with sessions, not batches."""
    from mechanisms.privacy import GaussianEvent, RenyiEvent

    out: list[PrivacyEvent] = []
    for e in events:
        last = out[-1] if out else None
        if last is not None and last.label == e.label and last.mechanism_key() == e.mechanism_key():
            out[-1] = dataclasses.replace(last, count=last.count + e.count)
        elif (
            isinstance(last, GaussianEvent)
            and isinstance(e, GaussianEvent)
            and last.label == e.label
            and ("per decision" in (e.label or "") or "worst record over the run" in (e.label or ""))
            and type(last) is type(e)
            and (not isinstance(e, RenyiEvent) or (isinstance(last, RenyiEvent) and last.orders == e.orders))
        ):
            mu2 = last.count * last.mu**2 + e.count * e.mu**2
            if isinstance(last, RenyiEvent) and isinstance(e, RenyiEvent):
                rho = tuple(last.count * a + e.count * b for a, b in zip(last.rho, e.rho, strict=True))
                out[-1] = dataclasses.replace(last, mu=mu2**0.5, rho=rho, count=1)
            else:
                out[-1] = dataclasses.replace(last, mu=mu2**0.5, count=1)
        else:
            out.append(e)
    return tuple(out)


def merge_run_charge(charges: Sequence[RunCharge], new: RunCharge) -> list[RunCharge]:
    """``charges`` plus ``new``, merged into the last range when it continues it (same run, session and noise
    key); the merged range keeps the digest of its new last step."""
    out = list(charges)
    last = out[-1] if out else None
    if (
        last is not None
        and not last.is_whole_run
        and not new.is_whole_run
        and (last.run_id, last.session, last.noise_key) == (new.run_id, new.session, new.noise_key)
        and new.from_step == last.to_step + 1
    ):
        out[-1] = dataclasses.replace(
            last, to_step=new.to_step, decisions=last.decisions + new.decisions, digest=new.digest
        )
    else:
        out.append(new)
    return out


def run_step_counts(charges: Sequence[RunCharge], run_id: str) -> dict[int, int]:
    """How many times each run step of ``run_id`` was charged (0: the whole-run charge, see
    :attr:`RunCharge.is_whole_run`)."""
    counts: dict[int, int] = {}
    for c in charges:
        if c.run_id == run_id:
            for s in range(c.from_step, c.to_step + 1):
                counts[s] = counts.get(s, 0) + 1
    return counts
