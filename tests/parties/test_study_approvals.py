"""The custodian's study approvals (parties/approvals.py, parties/custodian.py; issue 37): approve, list,
revoke through ``confar-party study``; the approvals file's checks (a tampered line, another registry's
file or key, an edited study document) each refused naming the file and what is wrong, with nothing
written; a torn last line dropped."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from parties.approvals import APPROVALS_FILE, Signer, append_record, read_approvals, signer_of
from parties.cli import main
from parties.config import load_config
from proto.study import digest, file_text
from simulations.launcher import PartyOptions, party_config_text
from tests.parties.helpers import make_certs
from tests.proto.test_study_document import study_doc

FUTURE = (dt.date.today() + dt.timedelta(days=30)).isoformat()


def configs(root: Path, m: int = 3) -> list[Path]:
    certs = make_certs(root, m)
    out = []
    for pid in range(1, m + 1):
        (root / f"party-{pid}").mkdir(parents=True, exist_ok=True)
        cfg = root / f"party-{pid}" / "party.toml"
        cfg.write_text(
            party_config_text(
                pid,
                m,
                root,
                certs,
                None,
                PartyOptions(
                    privacy_budget={"epsilon": 10.0, "delta": 1e-6},
                ),
            )
        )
        out.append(cfg)
    return out


def approve(cfg: Path, study: Path, *extra: str) -> int:
    args = ["study", "approve", str(study), "--config", str(cfg), "--max-epsilon", "2.5", "--expires", FUTURE]
    return main([*args, "--by", "committee", *extra])


def test_approve_list_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = configs(tmp_path)[0]
    study = tmp_path / "study.json"
    study.write_text(file_text(study_doc()))
    assert main(["study", "show", str(study), "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert (
        "penalty.tau = 20.0" in out
        and "privacy asked epsilon 3 at delta 1e-06" in out
        and "not approved" in out
    )
    assert approve(cfg, study, "--note", "AC minute 12") == 0
    assert "at most epsilon 2.5 at delta 1e-06" in capsys.readouterr().out
    c = load_config(cfg)
    book = read_approvals(c.state_dir / APPROVALS_FILE, signer_of(c))
    a = book.approvals[digest(study_doc())]
    assert (a.max_epsilon, a.delta, a.by, a.note, a.live()) == (2.5, 1e-6, "committee", "AC minute 12", True)
    assert not a.live(a.ends) and a.live(a.ends - dt.timedelta(seconds=1))  # the end of its expiry date, UTC
    audit = [json.loads(x) for x in (c.state_dir / "audit.log").read_text().splitlines()]
    assert audit[-1]["what"] == "StudyApprove" and audit[-1]["study"] == digest(study_doc())
    assert (
        main(["study", "revoke", digest(study_doc())[:10], "--config", str(cfg), "--reason", "withdrawn"])
        == 0
    )
    assert main(["study", "list", "--config", str(cfg)]) == 0
    listed = capsys.readouterr().out
    assert "revoked" in listed and "withdrawn" in listed
    again = read_approvals(c.state_dir / APPROVALS_FILE, signer_of(c)).approvals[digest(study_doc())]
    assert again.revoked is not None and again.revoked[2] == "withdrawn" and not again.live()
    assert approve(cfg, study) == 0  # approved again after the revocation: live again
    assert read_approvals(c.state_dir / APPROVALS_FILE, signer_of(c)).approvals[digest(study_doc())].live()


def _snapshot(state: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(state.iterdir())}


def test_bad_approvals_are_refused_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfgs = configs(tmp_path)
    study = tmp_path / "study.json"
    study.write_text(file_text(study_doc()))
    assert approve(cfgs[0], study) == 0 and approve(cfgs[1], study) == 0
    c1, c2 = load_config(cfgs[0]), load_config(cfgs[1])
    log1 = c1.state_dir / APPROVALS_FILE
    good = log1.read_bytes()
    capsys.readouterr()

    # tampered: the cap raised in place (checksum no longer matches)
    log1.write_bytes(good.replace(b'"max_epsilon":2.5', b'"max_epsilon":9.5'))
    before = _snapshot(c1.state_dir)
    assert main(["study", "list", "--config", str(cfgs[0])]) == 1
    err = capsys.readouterr().err
    assert f"approval file {log1} line 2 was altered or damaged (checksum mismatch)" in err
    assert approve(cfgs[0], study) == 1 and _snapshot(c1.state_dir) == before  # nothing appended

    # tampered with its checksum recomputed: the signature under this registry's certificate fails
    lines = good.split(b"\n")
    rec = json.loads(lines[1])
    rec.pop("sha256")
    rec["max_epsilon"] = 9.5
    from parties.journal import encode_line

    log1.write_bytes(lines[0] + b"\n" + encode_line(rec))
    assert main(["study", "list", "--config", str(cfgs[0])]) == 1
    assert "its signature does not verify under this registry's certificate" in capsys.readouterr().err

    # another registry's approvals file put in this registry's state folder
    log1.write_bytes((c2.state_dir / APPROVALS_FILE).read_bytes())
    assert main(["study", "list", "--config", str(cfgs[0])]) == 1
    assert "belongs to registry 'party-2', not to this registry 'party-1'" in capsys.readouterr().err

    # a record naming this registry but signed with party-2's key
    log1.unlink()
    s2 = signer_of(c2)
    forged = Signer("party-1", s2.cert_pem, s2.key_pem)
    append_record(
        log1,
        forged,
        {
            "action": "approve",
            "study": digest(study_doc()),
            "doc": study_doc(),
            "at": "x",
            "by": "x",
            "max_epsilon": 99.0,
            "delta": 1e-6,
            "expires": FUTURE,
        },
    )
    assert main(["study", "list", "--config", str(cfgs[0])]) == 1
    assert "line 2: it was signed with the key of certificate" in capsys.readouterr().err

    # a torn last line (an approve that never finished) is dropped, and cut off by the next record
    log1.write_bytes(good + b'{"action":"appr')
    assert main(["study", "list", "--config", str(cfgs[0])]) == 0
    assert approve(cfgs[0], study) == 0
    assert read_approvals(log1, signer_of(c1)).records == 2 and log1.read_bytes().endswith(b"}\n")


def test_an_edited_or_foreign_study_is_not_approved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = configs(tmp_path)[0]
    state = load_config(cfg).state_dir
    study = tmp_path / "study.json"
    doc = json.loads(file_text(study_doc()))
    doc["privacy"]["epsilon"] = 30.0  # edited after the request was made
    study.write_text(json.dumps(doc))
    assert approve(cfg, study) == 2
    assert "was edited after it was made" in capsys.readouterr().err and not state.exists()
    study.write_text(file_text(study_doc(registries=[{"id": 2, "identity": "party-2"}])))
    assert approve(cfg, study) == 2
    assert "does not name this registry (party 1, party-1)" in capsys.readouterr().err and not state.exists()
    study.write_text(file_text(study_doc()))
    assert (
        main(
            [
                "study",
                "approve",
                str(study),
                "--config",
                str(cfg),
                "--max-epsilon",
                "1",
                "--expires",
                "2001-01-01",
            ]
        )
        == 2
    )
    assert "is in the past" in capsys.readouterr().err and not state.exists()
