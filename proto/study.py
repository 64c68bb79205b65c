"""The study request: what a coordinator asks a registry's access committee to approve, as one canonical,
human-readable JSON document with a digest (issue 37).

A coordinator makes it from an experiment file (``confar study request EXPERIMENT.toml --out study.json``,
``coordinator.study_request``); a registry's custodian reviews it (``confar-party study show``), approves it
with a cap (``confar-party study approve``, ``parties.approvals``) and, with ``[governance] require_approval
= true``, the daemon admits only sessions that a live approval's study covers (``parties.governance``). The
coordinator sends the document with every session it opens for the study (``SessionSpec.study``: its
canonical text), so the daemon computes the digest itself and can name the study it would need.

The document (version 1; every key required unless marked)::

    {"confar_study": 1,
     "title": "...", "reference": "...",        # the study's name and the committee's reference
     "expires": "YYYY-MM-DD",                   # the end the coordinator asks for (the approval has its own)
     "coordinator": "coordinator",              # the one identity that may open its sessions
     "registries": [{"id": 1, "identity": "party-1"}, ...],
     "analysis": "bayes-logistic",              # the analysis its sessions name
     "model": {...},                            # the model as the experiment gives it (for the reader)
     "decision_plan": {...},                    # the sessions' public model_params (bounds, penalty, ...)
     "set_by_run": ["model_args.x_center", ...],  # keys the run sets from its own DP releases (warm start)
     "reveal": {"modes": ["sign", "sum"], "security": "semi-honest", "threshold": 1},
     "sampler": {...},                          # kind, chains, iterations, warm-up (for the reader)
     "decisions": {"batches": B, "batch_size": n, "total": B n},
     "privacy": {"epsilon": E, "delta": D, "accountant": "pld", "neighbours": "replace-one",
                 "colluding": "all" | q, "per_registry": [{"id": 1, "identity": "party-1", "epsilon": E}]},
     "threat_model": "a sentence"}

**Canonical form and digest.** :func:`canonical` is the document as JSON with sorted keys, no spaces and no
NaN; :func:`digest` is the SHA-256 (hex) of the canonical form of the document without its ``"digest"``
key. The file form (:func:`file_text`) is the same document indented, with ``"digest"`` added, so a reader
sees it and :func:`read_study_file` refuses a file whose content no longer hashes to its digest (edited
after it was made). A changed experiment (another model, bound, reveal mode, more ε) is another digest:
another study.

**Which sessions a study covers** (:func:`mismatch`): the coordinator, the registries (ids and identities),
the analysis, a reveal mode of ``reveal.modes``, the security, the threshold and the session's
``model_params`` equal to ``decision_plan`` except at the paths of ``set_by_run`` (the covariate ellipsoid a
DP warm start sets). A warm start's release sessions (plan kind ``"statistics"``, reveal ``sum``) must have
the same ``model_args``. Anything else names the first field that differs, with both values.

This module is in ``proto/`` because both sides read the document and neither may import the other.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto.spec import SessionSpec, identity_problem, shown

STUDY_VERSION = 1
MAX_STUDY_BYTES = 64 * 1024  # a study's canonical text (it travels with every OpenSession)
SHORT = 16  # hex digits of a digest shown in messages and written on a charge's label
_TEXT_MAX = 500  # title and reference


class StudyError(ValueError):
    """A study document that cannot be read or trusted (the message names the file or field)."""


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The canonical bytes of ``doc`` (without its ``"digest"``): sorted keys, no spaces, no NaN."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    try:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except ValueError as exc:
        raise StudyError(f"study document holds a number JSON cannot carry: {exc}") from exc


def digest(doc: Mapping[str, Any]) -> str:
    """The study's digest: SHA-256 (hex) of :func:`canonical`."""
    return hashlib.sha256(canonical(doc)).hexdigest()


def file_text(doc: Mapping[str, Any]) -> str:
    """The document as a person reads it: indented, keys sorted, with its digest."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    return json.dumps({**body, "digest": digest(body)}, indent=2, sort_keys=True, allow_nan=False) + "\n"


def parse_date(value: object, where: str) -> dt.date:
    """An ISO date ``YYYY-MM-DD``; :class:`StudyError` naming ``where`` otherwise."""
    if not isinstance(value, str):
        raise StudyError(f"{where}: expected a date YYYY-MM-DD, got {shown(value)}")
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise StudyError(f"{where}: expected a date YYYY-MM-DD, got {shown(value)}") from exc


@dataclass(frozen=True)
class Study:
    """A checked study document (:meth:`from_doc`): the fields a registry enforces, typed, and the whole
    document (``doc``, without its digest)."""

    doc: dict[str, Any]
    digest: str
    title: str
    reference: str
    expires: dt.date
    coordinator: str
    registries: tuple[tuple[int, str], ...]
    analysis: str
    decision_plan: dict[str, Any]
    set_by_run: tuple[str, ...]
    reveal_modes: tuple[str, ...]
    security: str
    threshold: int
    epsilon: float
    delta: float

    @property
    def short(self) -> str:
        return self.digest[:SHORT]

    @property
    def name(self) -> str:
        """How messages name it: digest, title and reference."""
        return f"study {self.short} ({self.title!r}, reference {self.reference!r})"

    def text(self) -> str:
        """The canonical text sent with a session (``SessionSpec.study``)."""
        return canonical(self.doc).decode("utf-8")

    @classmethod
    def from_doc(cls, doc: object, where: str = "study document") -> Study:
        """Check ``doc`` field by field; :class:`StudyError` naming ``where`` and the field."""
        if not isinstance(doc, dict):
            raise StudyError(f"{where}: expected a JSON object, got {type(doc).__name__}")
        body = {k: v for k, v in doc.items() if k != "digest"}
        f = _Fields(body, where)
        if body.get("confar_study") != STUDY_VERSION:
            got = shown(body.get("confar_study"))
            raise StudyError(f"{where}: confar_study: expected {STUDY_VERSION}, got {got}")
        regs = f.get("registries", list)
        registries = []
        for i, r in enumerate(regs):
            if not isinstance(r, dict) or type(r.get("id")) is not int or identity_problem(r.get("identity")):
                raise StudyError(f"{where}: registries[{i}]: expected an id and an identity, got {shown(r)}")
            registries.append((int(r["id"]), str(r["identity"])))
        if not registries:
            raise StudyError(f"{where}: registries: the study names no registry")
        reveal = f.get("reveal", dict)
        modes = reveal.get("modes")
        if not isinstance(modes, list) or not modes or not all(isinstance(m, str) for m in modes):
            raise StudyError(f"{where}: reveal.modes: expected a list of reveal modes, got {shown(modes)}")
        if not isinstance(reveal.get("security"), str) or type(reveal.get("threshold")) is not int:
            raise StudyError(f"{where}: reveal: needs security (text) and threshold (integer)")
        privacy = f.get("privacy", dict)
        eps, delta = privacy.get("epsilon"), privacy.get("delta")
        if not _positive(eps) or not _positive(delta) or not delta < 1:
            raise StudyError(
                f"{where}: privacy: needs epsilon > 0 and 0 < delta < 1, got {shown(eps)} and {shown(delta)}"
            )
        coordinator = f.get("coordinator", str)
        if identity_problem(coordinator) is not None:
            raise StudyError(f"{where}: coordinator: {shown(coordinator)} is not a valid identity")
        set_by_run = f.get("set_by_run", list)
        if not all(isinstance(p, str) for p in set_by_run):
            raise StudyError(f"{where}: set_by_run: expected a list of dotted keys")
        title, reference = f.get("title", str), f.get("reference", str)
        for key, value in (("title", title), ("reference", reference)):
            if not value.strip() or len(value) > _TEXT_MAX or not value.isprintable():
                raise StudyError(f"{where}: {key}: 1..{_TEXT_MAX} printable characters, got {shown(value)}")
        for key in ("model", "sampler", "decisions"):
            f.get(key, dict)
        f.get("threat_model", str)
        return cls(
            doc=body,
            digest=digest(body),
            title=title,
            reference=reference,
            expires=parse_date(body.get("expires"), f"{where}: expires"),
            coordinator=coordinator,
            registries=tuple(registries),
            analysis=f.get("analysis", str),
            decision_plan=f.get("decision_plan", dict),
            set_by_run=tuple(set_by_run),
            reveal_modes=tuple(modes),
            security=reveal["security"],
            threshold=int(reveal["threshold"]),
            epsilon=float(eps),
            delta=float(delta),
        )

    @classmethod
    def from_text(cls, text: str, where: str = "study document") -> Study:
        """The study a session carries (its canonical text), checked; at most MAX_STUDY_BYTES."""
        if len(text.encode("utf-8")) > MAX_STUDY_BYTES:
            raise StudyError(f"{where}: {len(text.encode('utf-8'))} bytes; at most {MAX_STUDY_BYTES}")
        try:
            doc = json.loads(text)
        except RecursionError as exc:  # a request's text nested past the parser's stack: never INTERNAL
            raise StudyError(f"{where}: not a study document (JSON nested too deeply)") from exc
        except ValueError as exc:
            raise StudyError(f"{where}: not JSON: {exc}") from exc
        return cls.from_doc(doc, where)


class _Fields:
    def __init__(self, doc: dict[str, Any], where: str) -> None:
        self.doc, self.where = doc, where

    def get(self, key: str, typ: type) -> Any:
        if key not in self.doc:
            raise StudyError(f"{self.where}: {key}: missing (required)")
        value = self.doc[key]
        if not isinstance(value, typ) or isinstance(value, bool):
            raise StudyError(f"{self.where}: {key}: expected {typ.__name__}, got {shown(value)}")
        return value


def _positive(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def read_study_file(path: Path) -> Study:
    """A study file (:func:`file_text`), checked: JSON, every field, and its ``"digest"`` equal to the hash
    of its content (else it was edited after it was made: :class:`StudyError` naming the file and both)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise StudyError(f"study file {path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise StudyError(f"study file {path}: not UTF-8 text") from exc
    try:
        doc = json.loads(raw)
    except RecursionError as exc:
        raise StudyError(f"study file {path}: not a study document (JSON nested too deeply)") from exc
    except ValueError as exc:
        raise StudyError(f"study file {path}: not JSON: {exc}") from exc
    study = Study.from_doc(doc, f"study file {path}")
    stated = doc.get("digest")
    if stated is None:
        raise StudyError(f"study file {path}: digest: missing (make the file with `confar study request`)")
    if stated != study.digest:
        raise StudyError(
            f"study file {path} was edited after it was made: its digest field says {shown(stated)} but its "
            f"content hashes to {study.digest}. A changed study is another study: make the request again "
            "with `confar study request` and have it approved"
        )
    return study


# ---- which sessions a study covers -------------------------------------------------------------------------


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A JSON value as {dotted path: leaf} (lists are leaves)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k in sorted(value):
            out.update(flatten(value[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def first_difference(a: Any, b: Any, skip: tuple[str, ...] = ()) -> tuple[str, Any, Any] | None:
    """The first dotted path where ``a`` and ``b`` differ (paths in ``skip`` and below them ignored), with
    both values (``<absent>`` where one has no such key), or None."""
    fa, fb = flatten(a), flatten(b)

    def skipped(path: str) -> bool:
        return any(path == s or path.startswith(s + ".") for s in skip)

    for path in sorted(set(fa) | set(fb)):
        if skipped(path):
            continue
        va, vb = fa.get(path, _ABSENT), fb.get(path, _ABSENT)
        if (va == vb and type(va) is type(vb)) or _same_number(va, vb):
            continue
        return path, va, vb
    return None


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


def _same_number(a: Any, b: Any) -> bool:
    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)

    return number(a) and number(b) and a == b


def mismatch(study: Study, spec: SessionSpec) -> tuple[str, Any, Any] | None:
    """The first field where session ``spec`` leaves what ``study`` covers: (field, the study's value, the
    session's), or None when the study covers it (module docstring)."""
    parties = tuple((p.id, p.identity) for p in spec.parties)
    checks: list[tuple[str, Any, Any]] = [
        ("coordinator", study.coordinator, spec.coordinator_identity),
        ("registries", [list(r) for r in study.registries], [list(p) for p in parties]),
        ("analysis", study.analysis, spec.model),
        ("reveal.security", study.security, spec.security),
        ("reveal.threshold", study.threshold, spec.t),
    ]
    for field_, want, got in checks:
        if want != got:
            return field_, want, got
    if spec.reveal_mode not in study.reveal_modes:
        return "reveal.modes", list(study.reveal_modes), spec.reveal_mode
    params = spec.model_params
    skip = tuple(p[len("model_args.") :] for p in study.set_by_run if p.startswith("model_args."))
    release = isinstance(params, dict) and params.get("kind") == "statistics"
    if release and "statistics" not in study.decision_plan:  # a warm start's release: the study's model args
        theirs = study.decision_plan.get("model_args", {})
        found = first_difference(theirs, params.get("model_args", {}), skip)
        if found is not None:
            return f"decision_plan.model_args.{found[0]}", found[1], found[2]
        return None
    found = first_difference(study.decision_plan, params, tuple(study.set_by_run))
    if found is not None:
        return f"decision_plan.{found[0]}", found[1], found[2]
    return None
