"""The session option ``security`` (issue 25) from the experiment file to the registry: validation with the
reason named, the wire, the registry's own allowlist, the run record, the testing-only deviation knob."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hss.modes import reveal_mode
from parties import deviate
from parties.config import ConfigError, load_config
from parties.policy import check_policy
from parties.refusal import Reason, Refusal
from parties.replay import ReplayStore, RunRecord
from proto import serde
from proto.records import Frame, Kind, RunStepRef
from proto.spec import SpecError
from simulations.launcher import PartyOptions, party_config_text, write_csv
from tests.parties.helpers import make_certs
from tests.parties.test_resume import _spec


def test_spec_accepts_abort_for_every_mode_and_names_what_is_not_offered() -> None:
    assert _spec(security="abort").security == "abort"
    assert _spec(reveal_mode="sum", security="abort").security == "abort"
    assert _spec(reveal_mode="blinded", security="abort").security == "abort"
    assert _spec().security == "semi-honest"
    with pytest.raises(SpecError, match="security 'malicious' is not one of"):
        _spec(security="malicious")
    for pre in ("pooled", "blocks4"):
        assert _spec(security="abort", sign_precompute=pre).sign_precompute == pre
    for mode in ("blinded", "svt"):
        assert _spec(reveal_mode=mode, security="abort").security == "abort"
    for pre in ("inline", "pooled", "blocks4"):  # the mask made ahead (hss.abort_sign.precompute_sign_abort)
        assert _spec(security="abort", sign_precompute=pre, precompute_ahead=True).protocol.ahead


def test_security_crosses_the_wire() -> None:
    for security in ("semi-honest", "abort"):
        spec = _spec(security=security)
        assert serde.spec_from_proto(serde.spec_to_proto(spec)).security == security
    msg = serde.spec_to_proto(_spec())
    assert msg.security == ""  # the default is not written: an older coordinator's spec means semi-honest
    msg.security = "bogus"
    with pytest.raises(serde.WireError, match="security 'bogus' is not one of"):
        serde.spec_from_proto(msg)


def test_the_mode_table_gives_the_rounds_under_abort() -> None:
    params = _spec().params()
    assert reveal_mode("sign").rounds(params, "inline", "abort") == 15
    assert reveal_mode("sign").rounds(params, "pooled", "abort") == 15
    assert reveal_mode("sign").rounds(params, "blocks4", "abort") == 14
    for pre, rounds in (("inline", 16), ("pooled", 16), ("blocks4", 15)):  # 5 of them ahead of the terms
        assert reveal_mode("sign").under("abort", pre, ahead=True).rounds(params) == rounds
    assert reveal_mode("sign").under("semi-honest", "blocks4", ahead=True).rounds(params) == 7
    assert reveal_mode("sign").rounds(params, "inline") == 7
    assert reveal_mode("sum").rounds(params, "inline", "abort") == 1
    with pytest.raises(ValueError, match="rounds of 'svt' under security 'abort' are set by the batch"):
        reveal_mode("svt").rounds(params, "inline", "abort")
    assert reveal_mode("blinded").rounds(params, "inline", "abort") == 7
    assert reveal_mode("blinded").rounds(params, "inline") == 2


def _config(tmp_path: Path, extra: str = "") -> Path:
    certs = make_certs(tmp_path, 3)
    write_csv(tmp_path / "d.csv", {"x": [1.0, 2.0]})
    text = party_config_text(1, 3, tmp_path, certs, tmp_path / "d.csv", PartyOptions(modes=("sum", "sign")))
    p = tmp_path / "party.toml"
    p.write_text(text.replace("[budget]", extra + "\n[budget]", 1) if extra else text)
    return p


def test_a_registry_that_allows_only_abort_refuses_a_semi_honest_session(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, 'security = ["abort"]'))
    assert cfg.allow_security == ("abort",)
    check_policy(cfg, _spec(security="abort"), 0)
    with pytest.raises(Refusal) as ei:
        check_policy(cfg, _spec(), 0)
    assert ei.value.reason == Reason.PERMISSION_DENIED
    assert "security 'semi-honest' is not allowed (allow.security = ['abort'])" in ei.value.message


def test_config_names_a_bad_security_or_deviation(tmp_path: Path) -> None:
    assert load_config(_config(tmp_path)).allow_security == ("semi-honest", "abort")
    with pytest.raises(ConfigError, match=r"allow\.security.*'paranoid' is not one of"):
        load_config(_config(tmp_path / "a", 'security = ["paranoid"]'))
    p = _config(tmp_path / "b")
    p.write_text(p.read_text() + '\n[testing]\ndeviate = ["additive@3", "drop@out"]\n')
    assert load_config(p).deviate == {("additive", 3), ("drop", 0)}
    p.write_text(p.read_text().replace('"drop@out"', '"sabotage@2"'))
    with pytest.raises(ConfigError, match=r"testing\.deviate.*'sabotage@2'"):
        load_config(p)


def test_the_run_record_keeps_the_security_its_messages_decode_under(tmp_path: Path) -> None:
    store = ReplayStore(tmp_path, "party-1")
    ref = RunStepRef("run-a", 3, b"d" * 32, b"e" * 16)
    msgs = ((12, np.arange(4, dtype=np.uint64)),)
    for security in ("abort", "semi-honest"):
        store.save(RunRecord(ref, 2, 12, msgs, security=security))
        back = store.load("run-a")
        assert back is not None and back.security == security and back.ref == ref
    store.compact()  # (a session's close compacts the appended records to one document)
    assert "security" not in store.path_for("run-a").read_text()  # semi-honest: the older file format


def test_deviations_alter_only_decision_steps_and_the_named_round() -> None:
    dev = deviate.parse(["additive@2", "inconsistent@3", "drop@4"])
    payload = np.arange(6, dtype=np.uint64)
    key_setup = Frame(0, 2, 1, 2, Kind.DATA, payload)
    assert deviate.tamper_frame(dev, key_setup, 2) is key_setup
    f2 = deviate.tamper_frame(dev, Frame(1, 2, 1, 2, Kind.DATA, payload), 2)  # type: ignore[arg-type]
    assert f2.payload[0] == 1 and np.array_equal(f2.payload[1:], payload[1:])
    other_peer = Frame(1, 2, 1, 3, Kind.DATA, payload)
    assert deviate.tamper_frame(dev, other_peer, 2) is other_peer
    f3 = deviate.tamper_frame(dev, replace(other_peer, round=3), 2)
    assert f3.payload[4] == 4 + 3 and np.array_equal(f3.payload[:4], payload[:4])
    assert deviate.tamper_frame(dev, Frame(1, 4, 1, 2, Kind.DATA, payload), 2) is None  # type: ignore[arg-type]
    out = deviate.tamper_outputs(deviate.parse(["noncanonical@out"]), ((12, payload),))
    assert out[0][1][0] == out[0][1][1] == np.uint64(2**64 - 1)
