"""The party side: model analyses registered in the daemon, data refused at load time with the column and
rows named, and the daemon's terms equal to the in-memory simulation's for the same noise stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from mechanisms.samplers import DecisionRequest, Penalty, party_terms
from parties.analyses import AnalysisError, Dataset
from parties.config import ConfigError, load_config
from parties.daemon import PartyDaemon
from parties.models_bridge import DataSchemaError
from parties.registry import get_analysis, known_analyses
from parties.sources import DataConfig, Snapshot, snapshot
from parties.sources.files import CsvSource, ParquetSource
from simulations.launcher import PartyOptions, party_config_text, write_csv
from tests.mechanisms.samplers.helpers import fixed_rng

MODEL = BayesLogistic(p=2)


def test_registered_and_resolved() -> None:
    assert {"beta-bernoulli", "bayes-logistic", "linear-regression", "gaussian-mean"} <= set(known_analyses())
    get_analysis("mechanisms.models.linear:LinearRegression", {"model_args": {"p": 1}})
    with pytest.raises(AnalysisError, match="unknown parameters"):
        get_analysis("bayes-logistic", {"sigma": 1})
    with pytest.raises(AnalysisError, match="kind"):
        get_analysis("bayes-logistic", {"kind": "gibbs"})
    with pytest.raises(AnalysisError, match="penalty"):
        get_analysis("bayes-logistic", {"penalty": {"tau": -1, "n": 10}})
    with pytest.raises(AnalysisError, match="unknown analysis 'gibbs-sampler'"):
        get_analysis("gibbs-sampler", {})


@pytest.mark.parametrize("kind", ["mh", "penalty", "rejection"])
@pytest.mark.parametrize("mode", ["sign", "blinded"])
def test_daemon_terms_equal_simulation_terms(kind: str, mode: str) -> None:
    data = synthetic_registries(np.random.default_rng(1), MODEL, sizes=(120,))[0]
    rng = np.random.default_rng(2)
    n = 9
    th, ts = rng.normal(0, 0.5, (n, 3)), rng.normal(0, 0.5, (n, 3))
    pub = rng.normal(size=n)
    if kind == "rejection":  # log pi - log q - log M_q <= 0 by construction (a party refuses more)
        pub = -np.abs(pub)
    params: dict = {"model_args": {"p": 2}, "kind": "rejection" if kind == "rejection" else "mh"}
    pen = None
    if kind == "penalty":
        pen = Penalty(tau=0.1, alpha=0.5, n=1000)
        params["penalty"] = pen.to_params()
    a = get_analysis("bayes-logistic", params)
    inputs = {"theta_star": ts, "public": pub} | ({} if kind == "rejection" else {"theta": th})
    got = a.terms(Dataset(data), inputs, n, 3, mode, fixed_rng("t"))
    req = DecisionRequest(
        kind=params["kind"], theta_star=ts, public=pub, theta=None if kind == "rejection" else th, penalty=pen
    )
    bound = MODEL.max_log_likelihood(data) if kind == "rejection" else None
    want = party_terms(MODEL, data, req, 3, fixed_rng("t"), mode, log_bound=bound)
    np.testing.assert_array_equal(got.values, want.values)
    assert (got.blind is None) == (mode != "blinded")
    if kind == "rejection":
        quiet = get_analysis("bayes-logistic", {**params, "noise": "none"})
        plain = quiet.terms(Dataset(data), inputs, n, 3, "sign", fixed_rng("t"))
        assert (plain.values <= 1e-9).all()  # l_j(θ*) − log M_j ≤ 0: the party's own bound holds


@pytest.mark.parametrize("c", ["clip", "bound"])
def test_clipped_record_count_goes_with_the_terms(c: str) -> None:
    """Penalty with per-record clipping: the party's terms carry party_terms' count of clipped log-ratios
    (for the daemon's audit line); with c = "bound" nothing is clipped and there is no count."""
    data = synthetic_registries(np.random.default_rng(1), MODEL, sizes=(80,))[0]
    rng = np.random.default_rng(6)
    n = 7
    th, ts = rng.normal(0, 0.5, (n, 3)), rng.normal(0, 0.5, (n, 3))
    pen = Penalty(tau=0.1, alpha=0.5, n=1000, c=c, b=0.2 if c == "clip" else None)
    params = {"model_args": {"p": 2}, "penalty": pen.to_params()}
    inputs = {"theta": th, "theta_star": ts, "public": np.zeros(n)}
    got = get_analysis("bayes-logistic", params).terms(Dataset(data), inputs, n, 3, "sign", fixed_rng("c"))
    req = DecisionRequest.from_inputs(inputs, "mh", n, 3, pen)
    want = party_terms(MODEL, data, req, 3, fixed_rng("c"), "sign")
    np.testing.assert_array_equal(got.values, want.values)
    if c == "clip":
        assert got.clipped_records == want.clipped_records > 0
    else:
        assert got.clipped_records is None


def test_terms_refuse_bad_data_and_inputs() -> None:
    a = get_analysis("bayes-logistic", {"model_args": {"p": 2}})
    bad = Dataset({"x1": np.array([0.0, 9.0]), "x2": np.array([0.0, 0.0]), "y": np.array([1.0, 0.0])})
    with pytest.raises(DataSchemaError, match=r"column 'x1'.*bounds \[-3, 3\] in row 2"):
        a.terms(bad, {}, 1, 3, "sign", fixed_rng("x"))
    good = Dataset({"x1": np.zeros(2), "x2": np.zeros(2), "y": np.array([1.0, 0.0])})
    with pytest.raises(AnalysisError, match="theta_star"):
        a.terms(good, {"theta": np.zeros((1, 3))}, 1, 3, "sign", fixed_rng("x"))


def load_checked(path: Path, model: str, args: dict[str, int]) -> Snapshot:
    source = ParquetSource(path) if path.suffix == ".parquet" else CsvSource(path)
    return snapshot(DataConfig(source, model, args))


def refusal(path: Path) -> str:
    with pytest.raises(DataSchemaError) as ei:
        load_checked(path, "bayes-logistic", {"p": 2})
    return str(ei.value)


def test_csv_refused_at_load_time(tmp_path: Path) -> None:
    p = tmp_path / "reg.csv"
    p.write_text("x1,x2,y\n0.1,0.2,1\n0.3,abc,0\n0.5,nan,1\n4.0,0,1\n0,0,2\n")
    with pytest.raises(DataSchemaError) as ei:
        load_checked(p, "bayes-logistic", {"p": 2})
    msg = str(ei.value)
    assert "column 'x2': non-numeric values in row 2" in msg
    p.write_text("x1,x2,y\n0.1,0.2,1\n0.5,nan,1\n4.0,0,1\n0,0,2\n")
    msg = refusal(p)
    assert "column 'x2': NaN or infinite values in row 2" in msg
    assert "column 'x1': values outside the declared public bounds [-3, 3] in row 3" in msg
    assert "column 'y': values outside the allowed set [0.0, 1.0] in row 4" in msg
    p.write_text("x1,y\n0.1,1\n")
    assert "missing column ['x2']" in refusal(p)
    pq = tmp_path / "reg.parquet"
    pq.write_bytes(b"PAR1")
    try:
        import pyarrow  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        with pytest.raises(AnalysisError, match="needs pyarrow"):
            load_checked(pq, "bayes-logistic", {"p": 2})


def test_daemon_refuses_bad_data_at_startup(tmp_path: Path) -> None:
    pdir = tmp_path / "party-1"
    pdir.mkdir()
    write_csv(pdir / "data.csv", {"x1": [0.0, 7.5], "x2": [0.0, 0.0], "y": [1.0, 0.0]})
    cfg = pdir / "party.toml"
    cfg.write_text(
        party_config_text(
            1,
            3,
            tmp_path,
            None,
            pdir / "data.csv",
            PartyOptions(
                models=("bayes-logistic",),
                data_model="bayes-logistic",
                data_model_args={"p": 2},
            ),
        )
    )
    conf = load_config(cfg, insecure=True)
    assert conf.data is not None
    assert conf.data.model == "bayes-logistic" and conf.data.model_args == {"p": 2}
    with pytest.raises(DataSchemaError, match=r"column 'x1'.*row 2"):
        PartyDaemon(conf, insecure=True)
    cfg.write_text(cfg.read_text().replace('path = "', 'nopath = "'))
    with pytest.raises(ConfigError):
        load_config(cfg, insecure=True)


@pytest.mark.parametrize(("m", "t"), [(7, 3), (7, 6), (3, 1)])
def test_penalty_analyses_report_gdp_events_and_unbounded_ones_refuse(m: int, t: int) -> None:
    """mu = 1 / (tau n^alpha sqrt(m - t)) per decision against t colluders in sign mode (t > the session
    threshold learn S, still masked by m - t parties' noise), checked against the GDP delta(eps)."""
    from mechanisms.privacy import coalition_view, compose_events, gdp_delta
    from parties.analyses import Unaccountable

    penalty = {"tau": 0.5, "alpha": 0.25, "n": 10_000, "c": "bound"}
    params = {"model_args": {"p": 4}, "kind": "mh", "penalty": penalty}
    analysis = get_analysis("bayes-logistic", params)
    view = coalition_view("sign", m, (m - 1) // 2, t)
    events = analysis.privacy_events("sign", view, 16)  # type: ignore[attr-defined]
    assert len(events) == 1
    mu = 1.0 / (0.5 * 10_000**0.25 * np.sqrt(m - t))
    composed = compose_events(events)
    # 16 decisions compose to sqrt(16) mu in GDP; compare delta at eps = 1 with the closed form
    assert composed.delta_at(1.0) == pytest.approx(gdp_delta(4 * mu, 1.0), rel=1e-6, abs=1e-12)
    no_penalty = {"model_args": {"p": 4}, "kind": "mh"}
    with pytest.raises(Unaccountable, match="without the penalty"):
        get_analysis("bayes-logistic", no_penalty).privacy_events("sign", view, 16)  # type: ignore[attr-defined]
    rejection = {"model_args": {"p": 4}, "kind": "rejection"}
    with pytest.raises(Unaccountable):
        get_analysis("bayes-logistic", rejection).privacy_events("sign", view, 16)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_penalty_cap_events_and_refusal() -> None:
    """With max_sensitivity a party charges the amplified event (GDP mu and the profile at the cap) and
    refuses a batch holding a proposal above the cap."""
    from hss.randomness import SecureRandom
    from mechanisms.privacy import AmplifiedGaussianEvent, coalition_view
    from parties.analyses import AnalysisError, Dataset

    penalty = {"tau": 1.5, "alpha": 0.0, "n": 100, "c": "bound", "max_sensitivity": 0.3}
    params = {"kind": "mh", "penalty": penalty}
    analysis = get_analysis("beta-bernoulli", params)
    view = coalition_view("sign", 5, 2, 1)
    (ev,) = analysis.privacy_events("sign", view, 12)  # type: ignore[attr-defined]
    assert isinstance(ev, AmplifiedGaussianEvent) and ev.count == 12
    assert ev.mu == pytest.approx(1 / (1.5 * 2.0)) and ev.plain_mu == pytest.approx(1 / 1.5)
    assert "c <= 0.3" in ev.label and "Delta=0.3" in ev.profile.description
    data = Dataset({"y": np.array([0.0, 1.0, 1.0, 0.0])})
    theta = np.array([[0.3], [0.3]])
    inputs = {"theta": theta, "theta_star": np.array([[0.31], [0.6]]), "public": np.zeros(2)}
    with pytest.raises(AnalysisError, match="1 proposals have per-record sensitivity above"):
        analysis.terms(data, inputs, 2, 5, "sign", SecureRandom(b"k" * 32))
    inputs["theta_star"] = np.array([[0.31], [0.32]])
    out = analysis.terms(data, inputs, 2, 5, "sign", SecureRandom(b"k" * 32))
    assert out.values.shape == (2,)


def test_lazy_events_and_refusals() -> None:
    """Lazy MH: charged at the lazy accept-bit bound for the coalition's view; refused without a cap, beyond
    the session threshold (the coalition knows the coin) and outside the sign reveal."""
    from mechanisms.privacy import ProfileEvent, ThreatModel, coalition_view, sign_step_profile
    from parties.analyses import Unaccountable

    params = {"kind": "mh", "lazy": {"gamma": 0.25, "max_sensitivity": 0.5}}
    analysis = get_analysis("beta-bernoulli", params)
    (ev,) = analysis.privacy_events("sign", coalition_view("sign", 5, 2, 0), 9)  # type: ignore[attr-defined]
    assert isinstance(ev, ProfileEvent) and ev.count == 9
    assert ev.profile == sign_step_profile(0.5, ThreatModel(5, 0), 0.25).profile
    assert ev.profile.pure_eps == pytest.approx(0.5)  # max(Delta, log((1 - g e^-D)/(1 - g))) = Delta here
    (ev2,) = analysis.privacy_events("sign", coalition_view("sign", 5, 2, 2), 9)  # type: ignore[attr-defined]
    assert ev2.profile == sign_step_profile(0.5, ThreatModel(5, 2), 0.25).profile
    with pytest.raises(Unaccountable, match="exceed the session threshold t = 2"):
        analysis.privacy_events("sign", coalition_view("sign", 5, 2, 3), 9)  # type: ignore[attr-defined]
    with pytest.raises(Unaccountable, match="only in reveal mode 'sign'"):
        analysis.privacy_events("sum", coalition_view("sum", 5, 2, 0), 9)  # type: ignore[attr-defined]
    no_cap = {"kind": "mh", "lazy": {"gamma": 0.25}}
    with pytest.raises(Unaccountable, match="max_sensitivity"):
        get_analysis("beta-bernoulli", no_cap).privacy_events(  # type: ignore[attr-defined]
            "sign", coalition_view("sign", 5, 2, 0), 9
        )
    for bad in ({"gamma": 0.3}, {"gamma": 0.5, "extra": 1}, "half"):
        with pytest.raises(AnalysisError):
            get_analysis("beta-bernoulli", {"kind": "mh", "lazy": bad})
    with pytest.raises(AnalysisError, match="not combined"):
        get_analysis("beta-bernoulli", {**params, "penalty": {"tau": 1.0, "n": 10}})


def test_a_release_at_the_model_s_bound_is_made_at_the_public_theta() -> None:
    """A Weibull score release with model_bound: the registry clips its gradient block at the model's bound
    at the session's θ and scales its noise with it (Statistics.at), equal to the in-memory release for the
    same noise stream; the θ comes from the inputs, nothing from the coordinator sets the clip."""
    from mechanisms import noise, warmstart
    from mechanisms.kinds import DecisionPlan
    from mechanisms.models import load_model

    model = load_model("weibull-regression", {"p": 2, "t_max": 3.0})
    data = model.synthetic_data(np.random.default_rng(4), (300,))[0]  # type: ignore[attr-defined]
    stats = warmstart.Statistics("score", 2.0, 8.0, 300.0, clip=4.0, clip2=4.0, model_bound=True)
    params = DecisionPlan(model_args={"p": 2, "t_max": 3.0}, kind="statistics", settings=stats).to_params()
    theta = np.array([0.2, 1.2, 0.3, -0.2])
    n = warmstart.dimension("score", model)
    a = get_analysis("weibull-regression", params)
    got = a.terms(Dataset(data), {"theta": theta}, n, 3, "sum", fixed_rng("w"))
    made = stats.at(model, theta)
    assert made.clip == model.score_norm_bound(theta) > 4.0  # type: ignore[attr-defined]
    total = warmstart.record_vectors(made, model, model.check_data(data), theta)
    rng = fixed_rng("w")
    want = warmstart.noisy_release(made, total, model.d, lambda j: noise.normal(rng, 1.0, j))
    np.testing.assert_array_equal(got.values, want)
