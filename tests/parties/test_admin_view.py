"""The operator's live view (parties/admin.py, issue 37): ``[admin] listen`` serves the report read-only on a
loopback port of a real daemon, refreshed as sessions proceed, GET only; a non-loopback address, a name or
the consortium's own port refused in the config; off by default."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from coordinator.api import SessionOptions
from parties.config import ConfigError, load_config
from parties.report import num
from proto.study import Study
from simulations.launcher import PartyOptions, party_config_text
from tests.parties.helpers import coordinator_for, inproc_consortium
from tests.parties.test_governance import BUDGET, M, _steps
from tests.proto.test_study_document import study_doc


def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def _live(root: Path) -> None:
    study = Study.from_doc(study_doc())
    kw: dict[str, Any] = {"models": ("gaussian-mean",), "modes": ("sign",), "privacy_budget": BUDGET}
    async with inproc_consortium(root, M, admin_listen="127.0.0.1:0", **kw) as (daemons, eps, certs):
        base = f"http://{daemons[0].admin_address}"
        assert daemons[0].admin_address is not None and daemons[0].admin_address.startswith("127.0.0.1:")
        status, headers, body = await asyncio.to_thread(_get, base + "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert b'http-equiv="refresh"' in body and b"Nothing charged yet." in body
        async with coordinator_for(eps, certs) as coord:
            open_ = {
                "reveal_mode": "sign",
                "model": "gaussian-mean",
                "model_params": study.decision_plan,
                "t": 1,
            }
            sess = await coord.open_session(SessionOptions(**open_, study=study.text()))
            await _steps(sess, study, 4, 1)
            await sess.close()
        status, _, raw = await asyncio.to_thread(_get, base + "/report.json")
        doc = json.loads(raw)
        spent = daemons[0].service.privacy.ledger.spent()
        assert status == 200 and doc["budget"]["spent"] == spent > 0 and len(doc["runs"]) == 1
        _, _, page = await asyncio.to_thread(_get, base + "/")
        assert f'data-spent="{num(spent)}"'.encode() in page  # the page followed the session
        assert (await asyncio.to_thread(_get, base + "/", "POST"))[0] == 405
        assert (await asyncio.to_thread(_get, base + "/../state/audit.log"))[0] == 404
        assert (await asyncio.to_thread(_get, base + "/", "HEAD"))[0] == 200
        assert daemons[1].admin_address is not None and daemons[1].admin is not None


def test_the_live_view_serves_the_report(tmp_path: Path) -> None:
    asyncio.run(_live(tmp_path))


@pytest.mark.parametrize(
    ("listen", "why"),
    [
        ("0.0.0.0:8470", "0.0.0.0 is not a loopback address"),
        ("10.1.2.3:8470", "10.1.2.3 is not a loopback address"),
        ("registry.example.org:8470", "is a name, not a loopback address"),
        ("127.0.0.1:5005", "port 5005 is party.listen's, the port the consortium reaches"),
    ],
)
def test_the_admin_address_is_loopback_only(tmp_path: Path, listen: str, why: str) -> None:
    cfg = tmp_path / "party.toml"
    text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(admin_listen=listen))
    cfg.write_text(text.replace('listen = "127.0.0.1:0"', 'listen = "127.0.0.1:5005"', 1))
    with pytest.raises(ConfigError, match=rf"admin\.listen: .*{why}"):
        load_config(cfg, insecure=True)


def test_the_admin_view_is_off_by_default(tmp_path: Path) -> None:
    cfg = tmp_path / "party.toml"
    cfg.write_text(party_config_text(1, 3, tmp_path, None, None))
    assert load_config(cfg, insecure=True).admin_listen is None
    cfg.write_text(party_config_text(1, 3, tmp_path, None, None, PartyOptions(admin_listen="[::1]:0")))
    assert load_config(cfg, insecure=True).admin_listen == "[::1]:0"
