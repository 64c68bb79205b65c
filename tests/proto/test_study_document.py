"""The study request document (proto/study.py, issue 37): canonical form and digest, the file form that
refuses an edit, the field checks, and which sessions a study covers (the first field that differs)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from proto.spec import PartyEntry, SessionSpec
from proto.study import Study, StudyError, canonical, digest, file_text, mismatch, read_study_file


def study_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "confar_study": 1,
        "title": "Mean of x",
        "reference": "AC-7",
        "expires": "2030-01-31",
        "coordinator": "coordinator",
        "registries": [{"id": i, "identity": f"party-{i}"} for i in (1, 2, 3)],
        "analysis": "gaussian-mean",
        "model": {"name": "gaussian-mean", "params": {"sigma": 1.0}},
        "decision_plan": {
            "model_args": {"sigma": 1.0, "clip": [-4.0, 6.0]},
            "kind": "mh",
            "penalty": {"tau": 20.0, "n": 1},
        },
        "set_by_run": [],
        "reveal": {"modes": ["sign"], "security": "semi-honest", "threshold": 1},
        "sampler": {"kind": "penalty", "chains": 2, "iterations": 10, "warmup": 5, "warm_start": False},
        "decisions": {"batches": 10, "batch_size": 2, "total": 20},
        "privacy": {
            "epsilon": 3.0,
            "delta": 1e-6,
            "accountant": "pld",
            "neighbours": "replace-one",
            "colluding": "all",
        },
        "threat_model": "a sentence",
    }
    doc.update(over)
    return doc


def spec_for(doc: dict[str, Any], **over: Any) -> SessionSpec:
    kw: dict[str, Any] = {
        "session_id": os.urandom(16),
        "parties": tuple(PartyEntry(i, f"party-{i}") for i in (1, 2, 3)),
        "t": 1,
        "reveal_mode": "sign",
        "model": "gaussian-mean",
        "model_params": json.loads(json.dumps(doc["decision_plan"])),
    }
    kw.update(over)
    return SessionSpec(**kw)


def test_the_digest_is_of_the_canonical_form_whatever_the_key_order() -> None:
    doc = study_doc()
    shuffled = dict(reversed(list(doc.items())))
    assert canonical(doc) == canonical(shuffled) and digest(doc) == digest(shuffled)
    assert digest({**doc, "digest": "anything"}) == digest(doc)  # the digest key is not hashed
    assert digest(study_doc(privacy={**doc["privacy"], "epsilon": 3.5})) != digest(doc)  # more epsilon
    study = Study.from_text(Study.from_doc(doc).text())
    assert study.digest == digest(doc) and study.short == digest(doc)[:16]


def test_the_file_form_is_readable_and_refuses_an_edit(tmp_path: Path) -> None:
    path = tmp_path / "study.json"
    path.write_text(file_text(study_doc()))
    assert '\n  "analysis": "gaussian-mean"' in path.read_text()  # indented for a reader
    assert read_study_file(path).digest == digest(study_doc())
    edited = json.loads(path.read_text())
    edited["privacy"]["epsilon"] = 30.0  # edited after it was made, digest left as it was
    path.write_text(json.dumps(edited))
    with pytest.raises(StudyError, match=r"study\.json was edited after it was made: its digest field says"):
        read_study_file(path)


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"title": ""}, "title"),
        ({"expires": "31/01/2030"}, "expires"),
        ({"registries": []}, "registries"),
        ({"privacy": {"epsilon": -1, "delta": 1e-6}}, "privacy"),
        ({"reveal": {"modes": [], "security": "semi-honest", "threshold": 1}}, r"reveal\.modes"),
        ({"confar_study": 2}, "confar_study"),
    ],
)
def test_a_bad_field_is_named(over: dict[str, Any], field: str) -> None:
    with pytest.raises(StudyError, match=rf"study document: {field}"):
        Study.from_doc(study_doc(**over))


def test_which_sessions_a_study_covers() -> None:
    doc = study_doc()
    study = Study.from_doc(doc)
    assert mismatch(study, spec_for(doc)) is None
    other = json.loads(json.dumps(doc["decision_plan"]))
    other["penalty"]["tau"] = 10.0
    assert mismatch(study, spec_for(doc, model_params=other)) == ("decision_plan.penalty.tau", 20.0, 10.0)
    assert mismatch(study, spec_for(doc, reveal_mode="blinded")) == ("reveal.modes", ["sign"], "blinded")
    assert mismatch(study, spec_for(doc, model="other")) == ("analysis", "gaussian-mean", "other")
    assert mismatch(study, spec_for(doc, coordinator_identity="c2"))[0] == "coordinator"  # type: ignore[index]
    # a warm start's keys are set by the run; its release sessions (sum, kind statistics) keep the model args
    warm = Study.from_doc(
        study_doc(
            set_by_run=["model_args.x_center"],
            reveal={"modes": ["sign", "sum"], "security": "semi-honest", "threshold": 1},
        )
    )
    moved = json.loads(json.dumps(doc["decision_plan"]))
    moved["model_args"]["x_center"] = [0.5]
    assert mismatch(warm, spec_for(doc, model_params=moved)) is None
    release = {"model_args": moved["model_args"], "kind": "statistics", "statistics": {"what": "moments"}}
    assert mismatch(warm, spec_for(doc, model_params=release, reveal_mode="sum")) is None
    release["model_args"] = {**moved["model_args"], "sigma": 2.0}
    found = mismatch(warm, spec_for(doc, model_params=release, reveal_mode="sum"))
    assert found == ("decision_plan.model_args.sigma", 1.0, 2.0)


def test_a_session_carries_its_study_over_the_wire() -> None:
    from proto import serde

    doc = study_doc()
    spec = spec_for(doc, study=Study.from_doc(doc).text())
    back = serde.spec_from_proto(serde.spec_to_proto(spec))
    assert back == spec and Study.from_text(back.study).digest == digest(doc)
    msg = serde.spec_to_proto(spec)
    msg.study = '{"confar_study": 1}'
    with pytest.raises(serde.WireError, match="session spec study: registries: missing"):
        serde.spec_from_proto(msg)
    msg.study = "x" * (64 * 1024 + 1)
    with pytest.raises(serde.WireError, match="at most 65536"):
        serde.spec_from_proto(msg)


def test_a_deeply_nested_text_is_a_study_error_not_a_crash(tmp_path: Path) -> None:
    """A session's study text nested past the JSON parser's stack (the descriptor fuzz found it as an
    INTERNAL RecursionError at PlanPrivacy) is refused as a bad study document, at the wire and on disk."""
    deep = "[" * 30_000 + "]" * 30_000  # within the size limit (64 KiB), past the parser's stack
    with pytest.raises(StudyError, match="nested too deeply"):
        Study.from_text(deep)
    path = tmp_path / "study.json"
    path.write_text(deep, encoding="utf-8")
    with pytest.raises(StudyError, match="nested too deeply"):
        read_study_file(path)
