"""Party-enforced privacy budgets (issue 5): config keys, gaussian-mean's per-decision events, the persisted
ledger (refusal, restart, corrupt file), the PlanPrivacy dry run and the PrivacyReport, with the daemons in
the test's process. The same over daemon processes (``confar privacy plan`` / ``report``) is
tests/network/test_privacy_budget.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from coordinator import privacy as cprivacy
from coordinator.api import SessionError, SessionOptions
from hss.randomness import SecureRandom
from mechanisms.privacy import GaussianEvent, coalition_view, gdp_eps
from parties import cli as party_cli
from parties.analyses import AnalysisError, Dataset, Unaccountable
from parties.config import ConfigError, PartyConfig, load_config
from parties.privacy_budget import LEDGER_FILE, LedgerFileError, PrivacyBudgetStore, PrivacyRefusal
from parties.refusal import Reason
from parties.registry import get_analysis
from proto import serde_privacy
from proto.spec import PartyEntry, SessionSpec
from simulations.launcher import PartyOptions, party_config_text
from tests.parties.helpers import coordinator_for, gm_inputs, gm_params, inproc_consortium

TAU = 10.0  # per-decision mu = 1/tau with colluding = "all"
PARAMS: dict[str, Any] = gm_params(1.0, (-4.0, 6.0), tau=TAU)
BUDGET = {"gdp_mu": 1.0}  # 100 decisions of mu = 0.1


def _cfg(tmp_path: Path, budget: dict[str, Any] | None = None, pid: int = 1, m: int = 3) -> PartyConfig:
    path = tmp_path / f"party-{pid}.toml"
    path.write_text(party_config_text(pid, m, tmp_path, None, None, PartyOptions(privacy_budget=budget)))
    return load_config(path, insecure=True)


def _spec(params: dict[str, Any], mode: str = "sign", m: int = 3) -> SessionSpec:
    return SessionSpec(
        session_id=b"s" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}") for i in range(1, m + 1)),
        t=1,
        reveal_mode=mode,
        model="gaussian-mean",
        model_params=params,
    )


# ---- config ------------------------------------------------------------------------------------------------


def test_budget_config_keys(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, {"gdp_mu": 2.0})
    assert cfg.gdp_mu == 2.0 and cfg.epsilon is None and cfg.colluding is None
    cfg = _cfg(tmp_path, {"epsilon": 3, "delta": 1e-6, "colluding": 1})
    assert (cfg.epsilon, cfg.delta, cfg.colluding) == (3.0, 1e-6, 1)
    assert _cfg(tmp_path).gdp_mu is None  # max_decisions alone still works
    bad = [
        ({"epsilon": 3.0}, "budget.epsilon: an eps-at-delta budget needs budget.delta"),
        ({"delta": 1e-6}, "budget.delta"),
        ({"epsilon": 3.0, "delta": 1.5}, "budget.delta: must lie strictly between 0 and 1"),
        ({"gdp_mu": -1.0}, "budget.gdp_mu: must be a finite number > 0"),
        ({"gdp_mu": 1.0, "epsilon": 1.0, "delta": 1e-6}, "budget.gdp_mu: configure either"),
        ({"gdp_mu": 1.0, "colluding": "some"}, "budget.colluding"),
        ({"colluding": 1}, "budget.colluding: only used with a privacy budget"),
        ({"gdp_mu": True}, "budget.gdp_mu"),
    ]
    for budget, msg in bad:
        with pytest.raises(ConfigError, match=re.escape(msg)):
            _cfg(tmp_path, budget)


# ---- gaussian-mean's privacy -------------------------------------------------------------------------------


def test_gaussian_mean_privacy_events() -> None:
    def gm(params: dict[str, Any]) -> Any:
        return get_analysis("gaussian-mean", params)

    with pytest.raises(Unaccountable, match="without the penalty"):  # exact MH sign: unbounded
        gm(gm_params(1.0)).privacy_events("sign", coalition_view("sign", 3, 1, 2), 10)
    with pytest.raises(Unaccountable, match="without the penalty"):  # no noise: unbounded
        gm(gm_params(1.0, (0, 1))).privacy_events("sum", coalition_view("sum", 3, 1, 2), 10)
    (ev,) = gm(PARAMS).privacy_events("sign", coalition_view("sign", 3, 1, 2), 10)
    assert isinstance(ev, GaussianEvent) and ev.count == 10 and ev.mu == pytest.approx(1 / TAU)
    (ev,) = gm(PARAMS).privacy_events("blinded", coalition_view("blinded", 3, 1, 0), 4)
    assert ev.mu == pytest.approx(1 / (TAU * math.sqrt(3)))
    with pytest.raises(AnalysisError, match="tau must be"):
        gm(gm_params(1.0, tau=-5.0))
    with pytest.raises(AnalysisError, match="clip must be"):
        gm(gm_params(1.0, (2.0, 1.0)))


@pytest.mark.parametrize(
    ("mode", "m", "t", "q", "residual"),
    [
        # blinded: each party's term is Shamir-shared with degree t; q > t parties rebuild it, so only the
        # party's own noise protects it (residual 1). These under-charged before (residual m - q).
        ("blinded", 5, 2, 3, 1),
        ("blinded", 5, 1, 2, 1),
        ("blinded", 7, 1, 2, 1),
        ("blinded", 7, 3, 4, 1),
        # blinded within the threshold, sum always, sign always: the other m - q parties' noise
        ("blinded", 5, 2, 2, 3),
        ("blinded", 7, 3, 0, 7),
        ("sum", 5, 2, 3, 2),
        ("sign", 5, 2, 2, 3),
        ("sign", 5, 2, 3, 2),  # q > t learn S (not each term): still m - q parties' noise
        ("sign", 7, 1, 5, 2),
    ],
)
def test_penalty_charge_follows_what_the_coalition_can_rebuild(
    tmp_path: Path, mode: str, m: int, t: int, q: int, residual: int
) -> None:
    """A registry assuming q colluders is charged for what the session's threshold t lets them see."""
    cfg = dataclasses.replace(_cfg(tmp_path, BUDGET), colluding=q)
    spec = SessionSpec(
        session_id=b"s" * 16,
        parties=tuple(PartyEntry(i, f"party-{i}", f"127.0.0.1:{50050 + i}") for i in range(1, m + 1)),
        t=t,
        reveal_mode=mode,
        model="gaussian-mean",
        model_params=PARAMS,
    )
    store = PrivacyBudgetStore.load(cfg)
    (ev,) = store.events_for(cfg, get_analysis("gaussian-mean", PARAMS), spec, 7)
    assert isinstance(ev, GaussianEvent) and ev.count == 7
    assert ev.mu == pytest.approx(1 / (TAU * math.sqrt(residual)), rel=1e-12)
    assert f"assumes q = {q} colluding, session t = {t}, reveal {mode}" in ev.label


def test_gaussian_mean_penalty_noise_is_exactly_corrected() -> None:
    """Each party adds N(0, s^2), s = tau |theta* - theta| (hi - lo) / sigma^2, on clipped data, and the
    public term carries the correction -m s^2/2 (as for every model): public + sum_j term_j is corrected."""
    x = np.array([-10.0, 0.5, 2.0, 9.0])
    xc = np.clip(x, -4.0, 6.0)
    n, m = 40_000, 3
    th, ts = np.zeros(n), np.full(n, 0.01)
    params = {**PARAMS, "noise": "none"}
    t = get_analysis("gaussian-mean", params).terms(
        Dataset({"x": x}), gm_inputs(th, ts, params, m), n, m, "sign", SecureRandom(b"k" * 32)
    )
    exact = (ts - th) * xc.sum() - 0.5 * xc.size * (ts**2 - th**2)
    s = TAU * 0.01 * 10.0
    assert t.public is not None
    np.testing.assert_allclose(t.public, -m * s**2 / 2, rtol=1e-12)
    resid = t.values - exact
    assert abs(resid.mean()) < 4 * s / math.sqrt(n)
    assert resid.std() == pytest.approx(s, rel=0.03)


# ---- the persisted ledger ----------------------------------------------------------------------------------


# Both budgets a registry can configure, each admitting exactly 100 decisions of mu = 0.1 (gaussian-mean
# with the penalty, TAU = 10): the store's contract (dry run, durable commit, refusal past the limit, reload
# after a restart) is the same under both; the eps-at-delta budget takes the store's capacity fast path.
EPS_AT_MU_1 = gdp_eps(1.0, 1e-6)
STORE_BUDGETS: dict[str, tuple[dict[str, Any], Callable[[float], float], str]] = {
    "gdp": (BUDGET, lambda mu: mu, "GDP mu_max = 1"),
    "eps_delta": (
        {"epsilon": EPS_AT_MU_1, "delta": 1e-6},
        lambda mu: gdp_eps(mu, 1e-6),
        f"eps_max = {EPS_AT_MU_1:g} at delta = 1e-06",
    ),
}


@pytest.mark.parametrize("budget", list(STORE_BUDGETS))
def test_ledger_refuses_persists_and_reloads(tmp_path: Path, budget: str) -> None:
    config, spend_at, named = STORE_BUDGETS[budget]
    cfg = _cfg(tmp_path, config)
    store = PrivacyBudgetStore.load(cfg)
    spec, gm = _spec(PARAMS), get_analysis("gaussian-mean", PARAMS)
    for _ in range(3):
        ev = store.events_for(cfg, gm, spec, 30)
        store.check(ev)
        store.commit(ev)
    assert store.ledger is not None and store.ledger.spent() == pytest.approx(spend_at(math.sqrt(90) / TAU))
    doc = json.loads((cfg.state_dir / LEDGER_FILE).read_text())
    assert doc["party"] == "party-1" and len(doc["ledger"]["events"]) == 1  # one session: merged
    assert doc["ledger"]["events"][0]["count"] == 90
    with pytest.raises(PrivacyRefusal) as ei:
        store.check(store.events_for(cfg, gm, spec, 30))
    assert ei.value.reason is Reason.RESOURCE_EXHAUSTED
    assert "privacy budget" in ei.value.message and named in ei.value.message
    again = PrivacyBudgetStore.load(cfg)  # a restart keeps the spend
    assert again.ledger is not None and again.ledger.spent() == pytest.approx(spend_at(math.sqrt(90) / TAU))
    with pytest.raises(PrivacyRefusal):
        again.check(again.events_for(cfg, gm, spec, 30))
    # unbounded analyses are refused under a budget, with the reason
    with pytest.raises(PrivacyRefusal) as ei:
        store.events_for(cfg, get_analysis("gaussian-mean", gm_params(1.0)), _spec(gm_params(1.0)), 1)
    assert ei.value.reason is Reason.FAILED_PRECONDITION
    assert "without the penalty has unbounded or unknown per-step privacy loss" in ei.value.message
    assert "session threshold t = " in ei.value.message


def test_the_report_carries_what_the_ledger_accounts_under(tmp_path: Path) -> None:
    """PrivacyReport says the [budget] colluding and neighbours its ledger accounts under (the coordinator's
    statement names them); without a budget there is nothing accounted, so nothing to say."""
    cfg = _cfg(tmp_path, {"gdp_mu": 1.0, "colluding": 1, "neighbours": "add-remove"})
    rep = PrivacyBudgetStore.load(cfg).report(cfg, 0)
    assert (rep.colluding, rep.neighbours) == ("1", "add-remove")
    plain = _cfg(tmp_path, None, pid=2)
    rep = PrivacyBudgetStore.load(plain).report(plain, 5)
    assert not rep.budget.configured and (rep.colluding, rep.neighbours) == ("", "")


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        '{"version": 1, "party": "party-1"}',
        '{"version": 1, "party": "party-9",'
        ' "ledger": {"version": 1, "budget": {"type": "gdp", "mu_max": 1}, "events": []}}',
        "\xff\xfe",
    ],
)
def test_corrupt_ledger_is_a_startup_error_naming_the_file(tmp_path: Path, content: str) -> None:
    cfg = _cfg(tmp_path, BUDGET)
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.state_dir / LEDGER_FILE
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(LedgerFileError, match=re.escape(str(path))):
        PrivacyBudgetStore.load(cfg)
    assert path.read_bytes() == content.encode("latin-1")  # never reset


def test_corrupt_ledger_stops_the_daemon(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _cfg(tmp_path, BUDGET)
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / LEDGER_FILE).write_text("garbage")
    rc = party_cli.main(["serve", "--config", str(cfg.source), "--insecure"])
    err = capsys.readouterr().err
    assert rc == 1
    assert str(cfg.state_dir / LEDGER_FILE) in err and "corrupt" in err


# ---- in-process daemons: refusal over gRPC, plan, report ---------------------------------------------------


def _plan_file(
    tmp_path: Path, eps: list[PartyEntry], certs: Path | None, session: bool = True, batches: int = 4
) -> Path:
    lines = ["[coordinator]"]
    if certs is None:
        lines.append("insecure = true")
    else:
        lines += [
            f'cert = "{certs}/coordinator.pem"',
            f'key = "{certs}/coordinator.key"',
            f'ca = "{certs}/ca.pem"',
        ]
    lines.append("rpc_timeout_s = 10.0")
    for e in eps:
        lines += ["", "[[parties]]", f"id = {e.id}", f'identity = "{e.identity}"', f'address = "{e.address}"']
    if session:
        lines += [
            "",
            "[session]",
            'analysis = "gaussian-mean"',
            'reveal_mode = "sign"',
            f"batches = {batches}",
            "batch_size = 30",
            "[session.params.model_args]",
            "sigma = 1.0",
            "clip = [-4.0, 6.0]",
            "[session.params.penalty]",
            f"tau = {TAU}",
            "n = 1",
        ]
    path = tmp_path / "plan.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_inprocess_refusal_plan_and_report(tmp_path: Path) -> None:
    m, n = 3, 30
    th, ts = np.zeros(n), np.linspace(-0.05, 0.05, n)

    async def main() -> None:
        async with inproc_consortium(tmp_path, m, insecure=True, privacy_budget=BUDGET) as (daemons, eps, _):
            pf = cprivacy.load_plan(_plan_file(tmp_path, eps, None))
            ans = await cprivacy.ask_all(pf, "PlanPrivacy", _plan_request(pf))
            for r in ans.values():
                assert not isinstance(r, str) and r.would_refuse and r.batches_allowed == 3
                assert r.projected == pytest.approx(math.sqrt(120) / TAU) and r.budget.spent == 0
            for d in daemons:  # the dry run touched no ledger
                assert not (d.cfg.state_dir / LEDGER_FILE).exists()
            async with coordinator_for(eps, None, rpc_timeout_s=10.0) as coord:
                with pytest.raises(SessionError) as ei:
                    await coord.open_session(SessionOptions(
                        reveal_mode="sign", model="gaussian-mean", model_params=gm_params(1.0)
                    ))
                assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
                assert "unbounded or unknown per-step privacy loss" in str(ei.value)
                s = await coord.open_session(
                    SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params=PARAMS)
                )
                for _ in range(3):
                    await s.evaluate(gm_inputs(th, ts, PARAMS, m), n)
                with pytest.raises(SessionError) as ei:
                    await s.evaluate(gm_inputs(th, ts, PARAMS, m), n)
                assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "would exceed this party's privacy budget" in str(ei.value)
                await s.abort("budget")
            rep = await cprivacy.ask_all(pf, "PrivacyReport", serde_privacy.report_request_to_proto())
            for r in rep.values():
                assert not isinstance(r, str)
                assert r.budget.spent == pytest.approx(math.sqrt(90) / TAU)
                # what the ledger accounts under travels with it (the config's defaults: all, replace-one)
                assert (r.colluding, r.neighbours) == ("all", "replace-one")
                (e,) = cprivacy.parse_events(r.events_json)
                assert e.count == 90

    asyncio.run(main())


def _plan_request(pf: cprivacy.PlanFile) -> Any:
    assert pf.session is not None
    call = serde_privacy.PlanCall(cprivacy.planned_spec(pf), pf.session.batches, pf.session.batch_size)
    return serde_privacy.plan_request_to_proto(call)



# ---- a plan without the confidential noise (issue 35) ------------------------------------------------------

M_NOISE = 3
CAP_MH, CAP_REJ = 0.5, 15.0  # gaussian-mean on [-4, 6]: c(theta, theta*) = 10 |step| <= 0.5; range <= 12.5
#: every decision kind, as a gaussian-mean session's model_params (rejection: the model's public bound)
NOISE_KINDS: dict[str, dict[str, Any]] = {
    "penalty-sd": gm_params(1.0, (-4.0, 6.0), penalty={"sd": 0.7, "max_sensitivity": CAP_MH}),
    "penalty-tau": gm_params(1.0, (-4.0, 6.0), penalty={"tau": 40.0, "n": 1, "max_sensitivity": CAP_MH}),
    "lazy-mh": gm_params(1.0, (-4.0, 6.0), lazy={"gamma": 0.5, "max_sensitivity": CAP_MH}),
    "rejection": gm_params(
        1.0, (-4.0, 6.0), kind="rejection", bound="public", max_sensitivity=CAP_REJ, log_bound_margin=0.2
    ),
    "lazy-rejection": gm_params(
        1.0, (-4.0, 6.0), kind="rejection", bound="public", max_sensitivity=CAP_REJ, lazy={"gamma": 0.5}
    ),
}


def _noise_batch(params: dict[str, Any], n: int) -> dict[str, Any]:
    th = np.linspace(0.8, 1.2, n)
    if params.get("kind") == "rejection":  # public = log prior - log q = 0 (flat), proposals inside the cap
        return {"theta_star": th[:, None], "public": np.zeros(n)}
    return gm_inputs(th, th + 0.01, params, M_NOISE)


@pytest.mark.parametrize("kind", list(NOISE_KINDS))
def test_a_budget_refuses_a_session_without_the_noise(tmp_path: Path, kind: str) -> None:
    """A registry with an eps-at-delta budget (q = 1 colluding) refuses a session whose plan drops the
    Gamma(1/m) noise, naming why, for every decision kind (it used to charge it exactly like the noise's
    plan: lazy MH gamma = 0.5, cap 0.5 at eps 8.01 both ways); the same plan with the noise is accepted.
    Without a budget the tests-only noise "none" still runs its batches."""
    params = {**NOISE_KINDS[kind], "noise": "none"}
    n = 8
    budget = {"epsilon": 20.0, "delta": 1e-5, "colluding": 1}

    async def main() -> None:
        async with inproc_consortium(tmp_path / "budget", M_NOISE, insecure=True, privacy_budget=budget) as (
            _,
            eps,
            _,
        ):
            async with coordinator_for(eps, None, rpc_timeout_s=30.0) as coord:
                with pytest.raises(SessionError) as ei:
                    await coord.open_session(
                        SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params=params)
                    )
                assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION
                msg = str(ei.value)
                assert "noise is 'none'" in msg and "Gamma(1/m, 1) noise share" in msg
                assert "use noise 'exp'" in msg
                s = await coord.open_session(SessionOptions(
                    reveal_mode="sign", model="gaussian-mean", model_params=NOISE_KINDS[kind]
                ))
                await s.abort("the plan with the noise opens")
        async with inproc_consortium(tmp_path / "free", M_NOISE, insecure=True) as (_, eps, _):
            async with coordinator_for(eps, None, rpc_timeout_s=30.0) as coord:
                s = await coord.open_session(
                    SessionOptions(reveal_mode="sign", model="gaussian-mean", model_params=params)
                )
                out = await s.evaluate(_noise_batch(params, n), n)
                assert out.accept.shape == (n,)
                if params.get("kind") == "rejection":  # without the noise a <= -m margin < 0 never passes
                    assert not out.accept.any()
                await s.close()

    asyncio.run(main())
