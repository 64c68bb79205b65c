"""The experiment's ``[study]`` table and the study request it makes (issue 37): the document a registry's
access committee approves (``proto.study``), made from the experiment file alone.

EXPERIMENT.toml::

    [study]                         # optional: the run belongs to a study the registries approve
    title = "Mortality after ANCA vasculitis, 2010-2020"
    reference = "AC-2026-017"       # the access committee's reference (or the protocol's)
    expires = "2027-06-30"          # the end the coordinator asks for (each approval has its own)

With ``[study]``, ``confar study request EXPERIMENT.toml --out study.json`` writes the document (canonical,
human-readable, with its digest), and ``confar run`` sends the same document with every session it opens
(the warm start's too), so a registry with ``[governance] require_approval = true`` admits the run only
once its custodian approved that digest (``confar-party study approve``). The document is made once from
the file as written (:func:`study_document`): a warm start's covariate ellipsoid and a planned run's
length, set while the run goes, do not change it (``set_by_run`` names the keys the run sets).

What the document states about privacy is the coordinator's request, and says so: the ε (at δ) each
registry is asked to allow over the whole study, with the accountant, the neighbour relation and the
threat model it is stated under; it needs ``[privacy] epsilon`` and ``delta`` or ``target_epsilon`` (the
run is refused before anything is released when its dry run does not fit them,
``coordinator.run_privacy``). Each registry charges the study with its own accountant against the cap its
custodian approved (``parties.governance``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator.tables import Reader
from mechanisms.kinds import RELEASE_MODE
from mechanisms.privacy.threat import plain_threat_sentence
from proto.spec import default_identity
from proto.study import STUDY_VERSION, Study, StudyError, parse_date

if TYPE_CHECKING:
    from coordinator.experiment import Experiment

KEYS = ("title", "reference", "expires")
#: the model arguments a DP warm start sets while the run goes (coordinator.warm_start.model_params_of)
WARM_START_KEYS = ("model_args.x_center", "model_args.x_cov", "model_args.x_radius")


@dataclass(frozen=True)
class StudySettings:
    """``[study]``, and the document's canonical text once the experiment is read (``text``)."""

    title: str
    reference: str
    expires: dt.date
    text: str = ""

    def study(self) -> Study:
        return Study.from_text(self.text)


def read_study(r: Reader, tbl: dict[str, Any]) -> StudySettings:
    """``[study]``: title, reference and expires, checked (each error names the key)."""
    r.only(tbl, "study", KEYS)
    title = r.get(tbl, "study", "title", str)
    reference = r.get(tbl, "study", "reference", str)
    for key, value in (("title", title), ("reference", reference)):
        if not value.strip() or len(value) > 500 or not value.isprintable():
            raise r.err(f"study.{key}", f"1..500 printable characters, got {value!r}")
    try:
        expires = parse_date(r.get(tbl, "study", "expires", str), "study.expires")
    except StudyError as exc:
        raise r.err("study.expires", str(exc).split(": ", 1)[1]) from exc
    return StudySettings(title, reference, expires)


def _privacy(exp: Experiment, r: Reader) -> dict[str, Any]:
    """What the study asks each registry to allow: ε at δ and what it is stated under."""
    sim = exp.simulate
    eps: float | None
    delta: float | None
    colluding: int | None
    if exp.budget_target is not None:
        bt = exp.budget_target
        eps, delta = bt.epsilon, bt.delta
        accountant, neighbours, colluding = bt.accountant, bt.neighbours, bt.colluding
    elif exp.privacy is not None and exp.privacy.epsilon is not None:
        eps, delta = exp.privacy.epsilon, exp.privacy.delta
        accountant = (sim.party_accountant if sim is not None else None) or "pld"
        neighbours = (sim.party_neighbours if sim is not None else None) or "replace-one"
        colluding = sim.party_colluding if sim is not None else None
    else:
        raise r.err(
            "study",
            "a study request states the epsilon (at delta) each registry is asked to allow: give [privacy] "
            "epsilon and delta, or target_epsilon and delta",
        )
    assert delta is not None
    per = [{"id": pid, "identity": ident, "epsilon": eps} for pid, ident in _registries(exp)]
    return {
        "epsilon": eps,
        "delta": delta,
        "accountant": accountant,
        "neighbours": neighbours,
        "colluding": "all" if colluding is None else colluding,
        "per_registry": per,
        "what": (
            "the epsilon at delta each registry is asked to allow over the whole study (every session of "
            "it), computed by the registry's own accountant; the registry charges it against the cap its "
            "custodian approves"
        ),
    }


def _registries(exp: Experiment) -> list[tuple[int, str]]:
    if exp.parties:
        return [(p.id, p.identity) for p in sorted(exp.parties, key=lambda p: p.id)]
    return [(pid, default_identity(pid)) for pid in range(1, exp.m + 1)]


def study_document(exp: Experiment, settings: StudySettings, r: Reader) -> dict[str, Any]:
    """The study request of ``exp`` (``proto.study``'s schema), from the file as written."""
    s = exp.sampler
    if s.simulator_run:
        raise r.err(
            "study",
            "federated ABCDP (sampler.kind = 'abcdp') does not send a study yet: its sessions' parameters "
            "are made from the registries' columns at run time; remove [study]",
        )
    warm = exp.warm_start is not None
    modes = [exp.reveal_mode] + ([RELEASE_MODE] if warm and exp.reveal_mode != RELEASE_MODE else [])
    model = {"name": exp.model_name, "params": dict(exp.model_params)}
    sampler: dict[str, Any] = {
        "kind": s.kind,
        "warm_start": warm,
        "chains": s.chains,
        "iterations": s.iterations,
        "warmup": s.warmup,
    }
    privacy = _privacy(exp, r)
    colluding = privacy["colluding"]
    doc: dict[str, Any] = {
        "confar_study": STUDY_VERSION,
        "title": settings.title,
        "reference": settings.reference,
        "expires": settings.expires.isoformat(),
        "coordinator": exp.coordinator.identity,
        "registries": [{"id": pid, "identity": ident} for pid, ident in _registries(exp)],
        "analysis": exp.analysis(),
        "model": model,
        "decision_plan": exp.session_params(),
        "set_by_run": list(WARM_START_KEYS) if warm else [],
        "reveal": {"modes": modes, "security": exp.security, "threshold": exp.t},
        "sampler": sampler,
        "decisions": {
            "batches": s.batches,
            "batch_size": s.decisions_per_batch,
            "total": s.batches * s.decisions_per_batch,
        },
        "privacy": privacy,
        "threat_model": plain_threat_sentence(
            neighbours=privacy["neighbours"],
            colluding=None if colluding == "all" else int(colluding),
            m=exp.m,
            t=exp.t,
            security=exp.security,
        ),
    }
    try:
        Study.from_doc(doc)  # the coordinator never sends a document a registry would refuse
    except StudyError as exc:
        raise r.err("study", str(exc)) from exc
    return doc
