"""The per-party privacy documents of a run's outputs (``privacy/party-<id>.json`` / ``.png``): the registry's
privacy statement and the other readings beside it (built once, by :mod:`coordinator.privacy_statement`, and
printed the same by ``confar run``, ``confar privacy report`` and the Python API), what the party *reported*
(its ``PrivacyReport`` answer, verbatim) kept apart from what was *recomputed here* from its reported events
with ``mechanisms.privacy`` (:func:`coordinator.privacy.recompose`: GDP μ where every event has one, ε at δ,
the Rényi filter's reading), and the ``confar privacy report --plot`` figure
(:func:`coordinator.privacy.plot_spends`)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coordinator.outputs.result import RunResult
from coordinator.privacy import PlanFile, Spend, plot_spends
from coordinator.privacy_statement import registry_privacy
from proto.spec import PartyEntry


def party_identity(pid: int, rep: dict[str, Any] | str, result: RunResult) -> str:
    if isinstance(rep, dict):
        return str(rep["identity"])
    parties = result.provenance.get("parties")
    if isinstance(parties, Mapping) and pid in parties:
        return str(parties[pid])
    return f"party-{pid}"


def _run_decisions(result: RunResult) -> int | None:
    counts = result.provenance.get("counts") if isinstance(result.provenance, Mapping) else None
    if isinstance(counts, Mapping) and "decisions_asked" in counts:
        return int(counts["decisions_asked"])
    return None


def _consortium_size(result: RunResult) -> int | None:
    """m, the run's registries (its provenance's parties), to read "colluding = all" as q = m - 1."""
    parties = result.provenance.get("parties")
    if isinstance(parties, Mapping | list) and parties:
        return len(parties)
    return max(result.privacy_reports) if result.privacy_reports else None


def _largest_registry(result: RunResult) -> int | None:
    """The records of the largest registry, when the run's constant data holds the registries' sizes (a
    simulation's public sizes)."""
    sizes = result.constant_data.get("registry_records")
    return int(max(sizes.tolist())) if sizes is not None and sizes.size else None


def privacy_document(
    pid: int, rep: dict[str, Any] | str, result: RunResult
) -> tuple[dict[str, Any], Spend | None]:
    """The JSON document for one party: its statement (:func:`coordinator.privacy_statement.registry_privacy`,
    the sentence every printer prints) and the other readings beside it, the threat model in the sentence's
    words, what it reported, kept apart from what was recomputed here."""
    ident = party_identity(pid, rep, result)
    if isinstance(rep, str):
        return {"party": pid, "identity": ident, "error": f"could not be asked: {rep}"}, None
    it = registry_privacy(
        rep,
        _consortium_size(result),
        result.privacy_delta,
        _run_decisions(result),
        result.privacy_readings.get(pid, ()),
        _largest_registry(result),
    )
    doc = {
        "party": pid,
        "identity": ident,
        "statement": it.statement,
        "other_readings": list(it.readings),
        "threat_model": it.threat_model,
        "reported_by_party": it.reported,
        "recomputed_here": it.recomputed,
    }
    return doc, it.spend


def write_privacy_plots(
    folder: Path, result: RunResult, spends: Mapping[int, Spend], put: Callable[[str, bytes], None]
) -> None:
    """``coordinator.privacy.plot_spends`` (the ``confar privacy report --plot`` figure) into a scratch dir,
    then each PNG renamed to ``privacy/party-<id>.png``."""
    top = max(max(spends), max(result.privacy_reports))
    endpoints = [
        PartyEntry(i, party_identity(i, result.privacy_reports.get(i, ""), result), "")
        for i in range(1, top + 1)
    ]
    pf = PlanFile(Path("run outputs"), "coordinator", None, 0.0, endpoints, None)
    scratch = Path(tempfile.mkdtemp(prefix=".privacy-plots.", dir=folder))
    try:
        made = plot_spends(pf, dict(spends), scratch)
        for pid, path in zip(sorted(spends), made, strict=True):
            put(f"privacy/party-{pid}.png", path.read_bytes())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
