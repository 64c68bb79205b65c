"""Study approvals enforced by real daemons (parties/governance.py, issue 37; in-process gRPC servers with
mTLS): a registry with ``[governance] require_approval`` refuses a session naming no study or an unapproved
one (saying what to approve), admits it once approved, refuses one that leaves the study (naming the
field), charges the study's cap besides its budget, and stops at the next step once the approval is
revoked or has expired; a refused step changes neither ledger nor approvals."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from coordinator.api import SessionError, SessionOptions
from parties.approvals import APPROVALS_FILE
from parties.cli import main
from parties.governance import study_events
from proto.study import Study, file_text
from tests.parties.helpers import coordinator_for, gm_inputs, inproc_consortium
from tests.proto.test_study_document import study_doc

M = 3
FUTURE = (dt.date.today() + dt.timedelta(days=30)).isoformat()
BUDGET = {"epsilon": 50.0, "delta": 1e-6}


def approve(root: Path, pid: int, study: Path, cap: float = 20.0, expires: str = FUTURE) -> None:
    cfg = root / f"party-{pid}" / "party.toml"
    args = [
        "study",
        "approve",
        str(study),
        "--config",
        str(cfg),
        "--max-epsilon",
        str(cap),
        "--expires",
        expires,
    ]
    assert main([*args, "--by", "committee"]) == 0


def ledger_events(root: Path, pid: int) -> list[Any]:
    from mechanisms.privacy import event_from_dict

    path = root / f"party-{pid}" / "state" / "privacy_ledger.json"
    if not path.exists():
        return []
    return [event_from_dict(e) for e in json.loads(path.read_text())["ledger"]["events"]]


async def _steps(sess: Any, study: Study, n: int, k: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(k):
        theta = rng.normal(1.0, 0.1, n)
        await sess.evaluate(gm_inputs(theta, theta + rng.normal(0, 0.1, n), study.decision_plan, M), n)


async def _sessions_need_a_live_approval(tmp_path: Path) -> None:
    doc = study_doc()
    study = Study.from_doc(doc)
    path = tmp_path / "study.json"
    path.write_text(file_text(doc))
    kw: dict[str, Any] = {"models": ("gaussian-mean",), "modes": ("sign",), "privacy_budget": BUDGET}
    async with inproc_consortium(tmp_path, M, require_approval=True, **kw) as (daemons, eps, certs):
        async with coordinator_for(eps, certs) as coord:
            open_ = {
                "reveal_mode": "sign",
                "model": "gaussian-mean",
                "model_params": study.decision_plan,
                "t": 1,
            }
            with pytest.raises(SessionError, match=r"admits only sessions of a study it approved") as e:
                await coord.open_session(SessionOptions(**open_))
            assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
            with pytest.raises(
                SessionError, match=rf"study {study.short} \('Mean of x', reference 'AC-7'\) is not "
            ):
                await coord.open_session(SessionOptions(**open_, study=study.text()))
            approve(tmp_path, 1, path)
            approve(tmp_path, 2, path)
            with pytest.raises(SessionError, match=r"is not approved at this registry \(party-3\)") as e:
                await coord.open_session(SessionOptions(**open_, study=study.text()))
            approve(tmp_path, 3, path)
            other = json.loads(json.dumps(study.decision_plan))
            other["penalty"]["tau"] = 10.0
            with pytest.raises(
                SessionError, match=r"decision_plan\.penalty\.tau is 10\.0 in the session but 20\.0 in"
            ):
                await coord.open_session(
                    SessionOptions(**{**open_, "model_params": other}, study=study.text())
                )
            # a changed experiment is another study: named with the field it differs in
            changed = Study.from_doc(study_doc(decision_plan=other))
            with pytest.raises(
                SessionError,
                match=rf"differs from the study approved here as {study.short}.* in "
                r"decision_plan\.penalty\.tau: approved 20\.0, asked 10\.0",
            ):
                await coord.open_session(
                    SessionOptions(**{**open_, "model_params": other}, study=changed.text())
                )
            assert all(not ledger_events(tmp_path, pid) for pid in (1, 2, 3))  # nothing charged so far

            sess = await coord.open_session(SessionOptions(**open_, study=study.text()))
            await _steps(sess, study, 4, 2)
            for d in daemons:  # the study's charges are labelled with it, and its spend is the ledger's
                gov, ledger = d.service.store.governance, d.service.privacy.ledger
                assert (
                    ledger is not None
                    and len(study_events(ledger.events, study.digest)) == len(ledger.events) > 0
                )
                a = gov.admit(sess.spec)
                assert a is not None and 0 < gov.spent(a) == pytest.approx(ledger.spent(), rel=1e-9)
            # revoked at party 2: the next step is refused there, nothing more charged anywhere
            before = {
                pid: (tmp_path / f"party-{pid}" / "state" / APPROVALS_FILE).read_bytes() for pid in (1, 3)
            }
            spent = [d.service.privacy.ledger.spent() for d in daemons]
            cfg2 = tmp_path / "party-2" / "party.toml"
            assert (
                main(["study", "revoke", study.digest[:12], "--config", str(cfg2), "--reason", "consent"])
                == 0
            )
            with pytest.raises(SessionError, match=r"was revoked at .* by .*: consent") as e:
                await _steps(sess, study, 4, 1, seed=1)
            assert e.value.party == 2
            await sess.abort("revoked")
            assert spent[1] == daemons[1].service.privacy.ledger.spent()
            with pytest.raises(SessionError, match=r"was revoked"):
                await coord.open_session(SessionOptions(**open_, study=study.text()))
            assert before == {
                pid: (tmp_path / f"party-{pid}" / "state" / APPROVALS_FILE).read_bytes() for pid in (1, 3)
            }


async def _the_cap_and_the_expiry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = study_doc()
    study = Study.from_doc(doc)
    path = tmp_path / "study.json"
    path.write_text(file_text(doc))
    kw: dict[str, Any] = {"models": ("gaussian-mean",), "modes": ("sign",), "privacy_budget": BUDGET}
    async with inproc_consortium(tmp_path, M, require_approval=True, **kw) as (daemons, eps, certs):
        async with coordinator_for(eps, certs) as coord:
            open_ = {
                "reveal_mode": "sign",
                "model": "gaussian-mean",
                "model_params": study.decision_plan,
                "t": 1,
            }
            for pid in (1, 2, 3):
                approve(tmp_path, pid, path, cap=100.0)
            sess = await coord.open_session(SessionOptions(**open_, study=study.text()))
            await _steps(sess, study, 4, 1)
            await sess.close()
            one_step = daemons[0].service.privacy.ledger.spent()
            # the approval ends at midnight UTC after its expiry date
            later = dt.datetime.combine(
                dt.date.fromisoformat(FUTURE) + dt.timedelta(days=1), dt.time(), dt.UTC
            )
            monkeypatch.setattr("parties.approvals.utc_now", lambda: later)
            with pytest.raises(SessionError, match=rf"expired at the end of {FUTURE} \(UTC\)"):
                await coord.open_session(SessionOptions(**open_, study=study.text()))
            monkeypatch.undo()
            # an approvals file that cannot be trusted refuses the study's sessions, naming it
            log = tmp_path / "party-3" / "state" / APPROVALS_FILE
            good = log.read_bytes()
            log.write_bytes(good.replace(b'"by":"committee"', b'"by":"someone"', 1))
            with pytest.raises(
                SessionError, match=rf"cannot trust its approvals: approval file {log} line 2"
            ) as e:
                await coord.open_session(SessionOptions(**open_, study=study.text()))
            assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
            log.write_bytes(good)
            for pid in (1, 2, 3):  # a later approval replaces the cap: now about one more step's worth
                approve(tmp_path, pid, path, cap=1.5 * one_step)
            sess = await coord.open_session(SessionOptions(**open_, study=study.text()))
            with pytest.raises(
                SessionError,
                match=rf"would exceed the privacy budget this registry approved for "
                rf"study {study.short}",
            ) as e:
                await _steps(sess, study, 4, 3, seed=2)
            assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            await sess.abort("cap")
            gov = daemons[0].service.store.governance
            a = gov.admit(sess.spec)
            assert a is not None and gov.spent(a) <= 1.5 * one_step * (1 + 1e-9)  # never past the cap


def test_sessions_need_a_live_approval_that_covers_them(tmp_path: Path) -> None:
    asyncio.run(_sessions_need_a_live_approval(tmp_path))


def test_the_cap_and_the_expiry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(_the_cap_and_the_expiry(tmp_path, monkeypatch))


def test_require_approval_needs_a_privacy_budget(tmp_path: Path) -> None:
    from parties.config import ConfigError, load_config
    from simulations.launcher import PartyOptions, party_config_text

    cfg = tmp_path / "party.toml"
    cfg.write_text(party_config_text(1, 3, tmp_path, None, None, PartyOptions(require_approval=True)))
    with pytest.raises(
        ConfigError, match=r"governance\.require_approval: needs a privacy budget in \[budget\]"
    ):
        load_config(cfg, insecure=True)
    cfg.write_text(
        party_config_text(
            1,
            3,
            tmp_path,
            None,
            None,
            PartyOptions(
                require_approval=True,
                privacy_budget=BUDGET,
            ),
        )
    )
    assert load_config(cfg, insecure=True).require_approval
    cfg.write_text(cfg.read_text().replace("require_approval = true", "require_approval = 1"))
    with pytest.raises(ConfigError, match=r"governance\.require_approval: expected bool"):
        load_config(cfg, insecure=True)


def test_the_cap_is_charged_by_the_registrys_own_accountant() -> None:
    """An eps-at-delta registry's cap is PLD at the cap's delta; a Renyi registry's keeps its own order (a
    filter at an order fixed in advance); a GDP registry's is the mu whose curve passes through (cap, delta),
    so a study at exactly that mu reads as the cap."""
    from mechanisms.privacy import EpsDeltaBudget, GaussianEvent, GDPBudget, RDPBudget, gdp_eps
    from parties.approvals import Approval
    from parties.governance import cap_budget

    a = Approval(Study.from_doc(study_doc()), 1, "t", "c", max_epsilon=2.0, delta=1e-5, expires=dt.date.max)
    pld = cap_budget(EpsDeltaBudget(10.0, 1e-6), a)
    assert isinstance(pld, EpsDeltaBudget) and (pld.eps_max, pld.delta) == (2.0, 1e-5)
    registry = RDPBudget(10.0, 1e-6)
    renyi = cap_budget(registry, a)
    assert isinstance(renyi, RDPBudget) and renyi.alpha == registry.alpha and renyi.eps_max == 2.0
    gdp = cap_budget(GDPBudget(3.0), a)
    assert isinstance(gdp, GDPBudget) and gdp_eps(gdp.mu_max, 1e-5) == pytest.approx(2.0, rel=1e-9)
    assert gdp.spend([GaussianEvent(gdp.mu_max)]) == pytest.approx(gdp.limit)
