"""Party config validation: every problem names its key; the CLI exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from parties import cli
from parties.config import ConfigError, load_config
from simulations.launcher import party_config_text, write_csv
from tests.parties.helpers import make_certs


@pytest.fixture()
def good(tmp_path: Path) -> Path:
    certs = make_certs(tmp_path, 3)
    write_csv(tmp_path / "d.csv", {"x": [1.0, 2.0]})
    p = tmp_path / "party.toml"
    p.write_text(party_config_text(2, 3, tmp_path, certs, tmp_path / "d.csv"))
    return p


def test_good_config_loads(good: Path) -> None:
    cfg = load_config(good)
    assert cfg.id == 2 and cfg.identity == "party-2" and {p.id for p in cfg.peers} == {1, 3}
    assert cfg.allow_models == ("gaussian-mean",) and cfg.has_tls


@pytest.mark.parametrize(
    "old,new,key",
    [
        ("id = 2\n", 'id = "two"\n', "party.id"),
        ("id = 2\n", "id = 99\n", "party.id"),
        ('listen = "127.0.0.1:0"', 'listen = "nowhere"', "party.listen"),
        ("max_decisions = 10000000", "max_decisions = -1", "budget.max_decisions"),
        ('reveal_modes = ["sum", "blinded", "sign"]', 'reveal_modes = ["everything"]', "allow.reveal_modes"),
        ("round_timeout_s = 30.0", "round_timeout_s = 0", "limits.round_timeout_s"),
        ("[budget]", "[budget]\nbogus = 1", "budget.bogus"),
        ("party-2.pem", "missing.pem", "tls.cert"),
        ("d.csv", "nope.csv", "data.path"),
    ],
)
def test_bad_config_names_the_key(good: Path, old: str, new: str, key: str) -> None:
    text = good.read_text()
    assert old in text
    good.write_text(text.replace(old, new, 1))
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(good)


def test_missing_tables_and_bad_toml(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text("[party]\nid = 1\n")
    with pytest.raises(ConfigError, match=r"party\.listen: missing"):
        load_config(p)
    p.write_text("[party\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)


def test_cli_exit_codes(good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check-config", "--config", str(good)]) == 0
    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace("id = 2\n", "id = 0\n", 1))
    assert cli.main(["serve", "--config", str(bad)]) == 2
    assert "party.id" in capsys.readouterr().err
    assert cli.main(["serve", "--config", str(tmp_path / "absent.toml")]) == 2
