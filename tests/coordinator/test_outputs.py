"""Run outputs (coordinator/outputs/): files, round trips, diagnostics vs our own, privacy, provenance."""

from __future__ import annotations

import csv
import importlib.metadata
import json
import math
import struct
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import optimize, stats

from coordinator import privacy_statement
from coordinator.outputs import ReferencePosterior, RunResult, write_outputs
from coordinator.outputs.privacy_docs import privacy_document
from coordinator.outputs.provenance import git_commit
from coordinator.outputs.result import QUANTILES, privacy_report_dict
from coordinator.outputs.summary import format_summary, summarize
from mechanisms.privacy import EpsDeltaEvent, GaussianEvent
from mechanisms.samplers.diagnostics import ess, split_rhat
from proto import party_pb2

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import arviz as az

SESSION_ID = bytes(range(16))


def ar1(rng: np.random.Generator, chains: int, n: int, phi: float, dims: int = 1) -> np.ndarray:
    """Stationary AR(1) chains x_t = phi x_{t-1} + sqrt(1 - phi^2) e_t, marginally N(0, 1)."""
    x = np.empty((chains, n, dims))
    x[:, 0] = rng.normal(size=(chains, dims))
    e = rng.normal(size=(chains, n, dims)) * math.sqrt(1 - phi * phi)
    for t in range(1, n):
        x[:, t] = phi * x[:, t - 1] + e[:, t]
    return x


def gdp_report(pid: int, mu: float, count: int, spent: float) -> dict[str, Any]:
    events = [GaussianEvent(mu, count=count, label=f"gaussian-mean penalty; session {SESSION_ID.hex()[:16]}")]
    return {
        "party": pid,
        "identity": f"registry-{pid}",
        "budget": {
            "configured": True,
            "budget_json": json.dumps({"type": "gdp", "mu_max": 2.0}),
            "unit": "mu",
            "limit": 2.0,
            "spent": spent,
        },
        "events_json": json.dumps([e.to_dict() for e in events]),
        "decisions_used": count,
    }


def make_result(
    chains: int = 4, n: int = 200, seed: int = 1, reports: dict[int, Any] | None = None, **kw: Any
) -> RunResult:
    rng = np.random.default_rng(seed)
    draws = ar1(rng, chains, n, 0.3, 2) + np.array([0.5, -1.0])
    base: dict[str, Any] = {
        "draws": draws,
        "param_names": ["theta", "log_sigma"],
        "sample_stats": {
            "accepted": rng.random((chains, n)) < 0.4,
            "step_size": np.full((chains, n), 0.25),
        },
        "warmup": 20,
        "warmup_draws": ar1(rng, chains, 20, 0.3, 2),
        "warmup_sample_stats": {"accepted": rng.random((chains, 20)) < 0.5},
        "privacy_reports": reports if reports is not None else {1: gdp_report(1, 0.01, 800, 0.2828)},
        "provenance": {
            "run_id": "run-7",
            "session_id": SESSION_ID,
            "seeds": {"public": 2026},
            "config_text": "[session]\nanalysis = 'gaussian-mean'\n",
            "parties": {1: "registry-1", 2: "registry-2"},
            "started_at": "2026-11-22T00:00:00+00:00",
        },
    }
    base.update(kw)
    return RunResult(**base)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, dict[str, Path]]:
    """One default run written once (rendering PNGs dominates the cost), shared by the read-only tests."""
    res = make_result()
    return res, write_outputs(tmp_path_factory.mktemp("outputs") / "run", res)


# ---- files and round trips -------------------------------------------------------------------------------


def test_write_outputs_layout_and_netcdf_round_trip(written: tuple[RunResult, dict[str, Path]]) -> None:
    res, files = written
    expected = {
        "posterior.nc",
        "draws.csv",
        "summary.csv",
        "summary.txt",
        "trace.png",
        "posterior.png",
        "privacy/party-1.json",
        "privacy/party-1.png",
        "provenance.json",
    }
    assert set(files) == expected
    assert all(p.is_file() and p.stat().st_size > 0 for p in files.values())
    leftovers = [p.name for p in files["draws.csv"].parent.rglob("*") if p.name.startswith(".")]
    assert leftovers == []

    idata = az.from_netcdf(files["posterior.nc"])
    assert set(idata.groups()) >= {"posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats"}
    for k, nm in enumerate(res.param_names):
        np.testing.assert_array_equal(idata.posterior[nm].values, res.draws[:, :, k])
        assert res.warmup_draws is not None
        np.testing.assert_array_equal(idata.warmup_posterior[nm].values, res.warmup_draws[:, :, k])
    assert idata.sample_stats["accepted"].dtype == bool
    np.testing.assert_array_equal(idata.sample_stats["accepted"].values, res.sample_stats["accepted"])
    np.testing.assert_array_equal(idata.sample_stats["step_size"].values, res.sample_stats["step_size"])
    assert res.warmup_sample_stats is not None
    np.testing.assert_array_equal(
        idata.warmup_sample_stats["accepted"].values, res.warmup_sample_stats["accepted"]
    )
    assert idata.posterior.sizes["chain"] == 4 and idata.posterior.sizes["draw"] == 200
    assert idata.attrs["run_id"] == "run-7" and idata.attrs["session_id"] == SESSION_ID.hex()
    assert int(idata.attrs["warmup_per_chain"]) == 20


def test_csv_files_parse_back_equal(tmp_path: Path) -> None:
    import pandas as pd

    res = make_result(
        reference=ReferencePosterior.from_distributions(
            "exact", [stats.norm(0.5, 1.0), stats.norm(-1.0, 1.0)]
        )
    )
    files = write_outputs(tmp_path / "run", res)
    with open(files["draws.csv"], newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["chain", "draw", "theta", "log_sigma"]
    body = rows[1:]
    assert len(body) == res.chains * res.n_draws
    back = np.zeros_like(res.draws)
    for r in body:
        back[int(r[0]), int(r[1])] = [float(v) for v in r[2:]]
    np.testing.assert_array_equal(back, res.draws)  # %.17g: exact round trip

    summ = pd.read_csv(files["summary.csv"], index_col="param")
    ref = summarize(res)
    assert list(summ.index) == ["theta", "log_sigma"]
    assert list(summ.columns) == list(ref.columns)
    np.testing.assert_array_equal(summ.to_numpy(dtype=float), ref.to_numpy(dtype=float))
    for col in (
        "mean",
        "sd",
        "hdi_5%",
        "hdi_95%",
        "mcse_mean",
        "ess_bulk",
        "ess_tail",
        "r_hat",
        "q5%",
        "q50%",
        "q95%",
        "ref_mean",
        "z",
    ):
        assert col in summ.columns
    np.testing.assert_allclose(summ["mean"], res.draws.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(summ["q95%"], np.quantile(res.draws.reshape(-1, 2), 0.95, axis=0), rtol=1e-12)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    w, h = struct.unpack(">II", data[16:24])
    return w, h


def test_plots_are_valid_pngs(written: tuple[RunResult, dict[str, Path]]) -> None:
    import matplotlib.image

    _, files = written
    for name in ("trace.png", "posterior.png", "privacy/party-1.png"):
        w, h = _png_size(files[name])
        assert w > 100 and h > 100
        img = matplotlib.image.imread(files[name])  # decodes every chunk
        assert img.shape[:2] == (h, w)
        assert float(np.ptp(img[..., :3])) > 0  # something is drawn


# ---- diagnostics against mechanisms.samplers.diagnostics ---------------------------------------------------


@pytest.mark.parametrize("phi", [0.5, 0.9])
def test_summary_ess_rhat_agree_with_our_diagnostics_on_ar1(phi: float) -> None:
    """AR(1) with coefficient phi has integrated autocorrelation time (1 + phi)/(1 - phi), so the ESS of the
    mean of chains*n draws is chains*n*(1 - phi)/(1 + phi).

    Tolerances (measured over 150 replications of 4 chains x 2000 at phi = 0.5: ESS/true has relative sd
    0.06, and ArviZ's bulk ESS / our Geyer ESS has relative sd 0.005, max deviation 0.026; |R-hat difference|
    at most 0.0012): with 4 x 4000 draws the estimators' relative sd is about 0.04 at phi = 0.5 and 0.09 at
    phi = 0.9, so 0.35 relative error against the truth is about 4 sd at phi = 0.9; the two implementations
    differ by rank normalisation and chain splitting only, allowed 5 % (~10 sd); R-hat within 0.005 of ours
    and both below 1.01 for stationary chains."""
    chains, n = 4, 4000
    x = ar1(np.random.default_rng(20261122), chains, n, phi, dims=2)
    res = RunResult(x, ["a", "b"])
    df = summarize(res)
    ours_ess = ess(x.transpose(1, 0, 2))
    ours_rhat = split_rhat(x.transpose(1, 0, 2))
    true = chains * n * (1 - phi) / (1 + phi)
    bulk = df["ess_bulk"].to_numpy()
    np.testing.assert_allclose(bulk, ours_ess, rtol=0.05)
    np.testing.assert_allclose(bulk, true, rtol=0.35)
    np.testing.assert_allclose(ours_ess, true, rtol=0.35)
    np.testing.assert_allclose(df["r_hat"].to_numpy(), ours_rhat, atol=0.005)
    assert (df["r_hat"] < 1.01).all()
    # MCSE of the mean is sd / sqrt(ESS) in both
    np.testing.assert_allclose(
        df["mcse_mean"], x.reshape(-1, 2).std(axis=0, ddof=1) / np.sqrt(ours_ess), rtol=0.05
    )


def test_rhat_flags_a_stuck_chain_in_both() -> None:
    x = ar1(np.random.default_rng(5), 4, 2000, 0.5, dims=1)
    x[0] += 1.5  # one chain in the wrong place: between-chain variance dominates
    df = summarize(RunResult(x, ["a"]))
    ours = float(split_rhat(x.transpose(1, 0, 2))[0])
    theirs = float(df["r_hat"].iloc[0])
    assert ours > 1.1 and theirs > 1.1
    assert abs(theirs - ours) / ours < 0.05  # rank normalisation of near-Gaussian draws changes little


# ---- summary table ---------------------------------------------------------------------------------------


def test_format_summary_shows_stats_reference_and_acceptance() -> None:
    res = make_result(
        chain_groups={"mesh": [0, 1], "relay": [2, 3]},
        reference=ReferencePosterior.from_distributions(
            "exact conjugate", [stats.norm(0.5, 1), stats.norm(-1, 1)]
        ),
    )
    text = format_summary(res)
    assert "4 chain(s) x 200 draw(s) after 20 warm-up" in text
    assert "reference: exact conjugate" in text
    header = next(line for line in text.splitlines() if line.startswith("param"))
    for h in ("mean", "sd", "q5%", "q50%", "q95%", "r_hat", "ess_bulk", "ess_tail", "ref mean", "z"):
        assert h in header
    df = summarize(res)
    theta = next(line for line in text.splitlines() if line.startswith("theta"))
    assert f"{df.loc['theta', 'mean']:.4f}" in theta and f"{df.loc['theta', 'ess_bulk']:.0f}" in theta
    acc = res.sample_stats["accepted"].mean(axis=1)
    assert f"mesh: {acc[:2].mean():.3f} over 2 chain(s)" in text
    assert f"relay: {acc[2:].mean():.3f} over 2 chain(s)" in text
    # z is (mean - ref mean) / mcse: the draws really are from the reference, so |z| is modest
    assert (df["z"].abs() < 4).all()


def test_reference_from_draws_matches_moments() -> None:
    rng = np.random.default_rng(3)
    d = rng.normal([1.0, 2.0], [0.5, 3.0], size=(20000, 2))
    ref = ReferencePosterior.from_draws("centralized", d)
    assert (np.abs(ref.mean - [1.0, 2.0]) < 5 * np.array([0.5, 3.0]) / math.sqrt(20000)).all()  # 5 MCSE
    np.testing.assert_allclose(ref.mcse, d.std(axis=0, ddof=1) / math.sqrt(20000))
    np.testing.assert_allclose(ref.quantiles[QUANTILES.index(0.5)], np.median(d, axis=0))
    mc = ReferencePosterior.from_draws("centralized MCMC", ar1(rng, 4, 1000, 0.5, 2))
    assert mc.mcse.shape == (2,) and (mc.mcse > 0).all()


# ---- privacy reports -------------------------------------------------------------------------------------


def _gdp_eps(mu: float, delta: float) -> float:
    """Independent GDP -> (eps, delta): delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""

    def f(e: float) -> float:
        return (
            float(stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)) - delta
        )

    return float(optimize.brentq(f, 0.0, 50.0, xtol=1e-12))


def test_privacy_json_keeps_what_the_party_reported_and_recomputes_apart(tmp_path: Path) -> None:
    rep1 = gdp_report(1, 0.01, 800, 0.2828)
    eps_events = [EpsDeltaEvent(0.5, 0.0, count=2, label="abcdp svt")]
    rep2 = {
        "party": 2,
        "identity": "registry-2",
        "budget": {
            "configured": True,
            "budget_json": json.dumps(
                {"type": "eps_delta", "eps_max": 3.0, "delta": 1e-6, "discretization": 1e-3}
            ),
            "unit": "eps at delta=1e-06",
            "limit": 3.0,
            "spent": 1.0,
        },
        "events_json": json.dumps([e.to_dict() for e in eps_events]),
        "decisions_used": 2,
    }
    res = make_result(
        reports={1: rep1, 2: rep2, 3: "UNAVAILABLE: connection refused"},
        privacy_delta=1e-5,
        provenance={"parties": {1: "registry-1", 2: "registry-2", 3: "registry-3"}},
    )
    files = write_outputs(tmp_path / "run", res)
    assert "privacy/party-3.png" not in files

    d1 = json.loads(files["privacy/party-1.json"].read_text())
    assert d1["identity"] == "registry-1" and d1["party"] == 1
    assert d1.get("threat_model")
    got = d1["reported_by_party"]
    assert got["budget"] == {"type": "gdp", "mu_max": 2.0}
    assert (got["unit"], got["limit"], got["spent"], got["decisions_used"]) == ("mu", 2.0, 0.2828, 800)
    assert got["events"] == json.loads(rep1["events_json"])
    rc = d1["recomputed_here"]
    mu = math.sqrt(800) * 0.01
    assert rc["gdp_mu"] == pytest.approx(mu, rel=1e-12)
    assert rc["delta"] == 1e-5 and "privacy_delta" in rc["delta_source"]
    assert rc["eps_at_delta"] == pytest.approx(_gdp_eps(mu, 1e-5), rel=1e-6)
    assert rc["spent_in_budget_unit"] == pytest.approx(mu)
    assert rc["spent_difference_vs_reported"] == pytest.approx(mu - 0.2828)
    assert rc["remaining_from_reported"] == pytest.approx(2.0 - 0.2828)

    d2 = json.loads(files["privacy/party-2.json"].read_text())
    rc2 = d2["recomputed_here"]
    assert rc2["delta"] == 1e-6 and "budget" in rc2["delta_source"]
    assert rc2["decisions_accounted"] == 2
    # two pure 0.5-DP steps: eps at any delta is at most 1.0 (basic composition), and the PLD is pessimistic
    assert 0.9 < rc2["eps_at_delta"] <= 1.0 + 2e-3
    assert d2["reported_by_party"]["spent"] == 1.0

    d3 = json.loads(files["privacy/party-3.json"].read_text())
    assert d3["identity"] == "registry-3" and "connection refused" in d3["error"]
    assert "reported_by_party" not in d3


def test_privacy_report_dict_from_proto() -> None:
    rep = gdp_report(4, 0.02, 10, 0.06)
    resp = party_pb2.PrivacyReportResponse(
        party=4,
        identity="registry-4",
        budget=party_pb2.PrivacyBudgetState(**rep["budget"]),
        events_json=rep["events_json"],
        decisions_used=10,
    )
    d = privacy_report_dict(resp)
    assert {k: d[k] for k in rep} == rep
    res = make_result(reports={4: resp})
    assert res.privacy_reports[4]["identity"] == "registry-4"


# ---- provenance ------------------------------------------------------------------------------------------


def test_provenance_has_versions_identities_and_hashes(written: tuple[RunResult, dict[str, Path]]) -> None:
    import hashlib

    _, files = written
    prov = json.loads(files["provenance.json"].read_text())
    assert prov["run_id"] == "run-7"
    assert prov["session_id"] == SESSION_ID.hex()
    assert prov["seeds"] == {"public": 2026}
    assert prov["config_text"].startswith("[session]")
    assert prov["parties"] == {"1": "registry-1", "2": "registry-2"}
    sw = prov["software"]
    assert sw["python"] == sys.version
    for pkg in ("numpy", "arviz", "h5netcdf", "confidential-ar"):
        assert sw["packages"][pkg] == importlib.metadata.version(pkg)
    git = git_commit()
    assert sw["git"] == git
    if git is not None:
        assert len(git["commit"]) == 40 and int(git["commit"], 16) >= 0
    out = prov["outputs"]
    assert (
        out["chains"] == 4 and out["warmup_per_chain"] == 20 and out["param_names"] == ["theta", "log_sigma"]
    )
    for name, digest in out["files_sha256"].items():
        assert hashlib.sha256(files[name].read_bytes()).hexdigest() == digest
    assert "provenance.json" not in out["files_sha256"]


def test_provenance_parties_default_to_report_identities(tmp_path: Path) -> None:
    res = make_result(provenance={"run_id": "r"})
    prov = json.loads(write_outputs(tmp_path / "o", res)["provenance.json"].read_text())
    assert prov["parties"] == {"1": "registry-1"}


# ---- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (
            {"draws": np.zeros((4, 200))},
            r"draws: must have shape \(chains, draws, dims\), got shape \(4, 200\)",
        ),
        ({"param_names": ["theta"]}, r"param_names: 1 name\(s\) \['theta'\] for 2 parameter"),
        ({"param_names": ["a", "a"]}, r"param_names: repeated name\(s\) \['a'\]"),
        ({"param_names": ["a", "chain"]}, r"param_names: 'chain' is not a usable name"),
        (
            {"sample_stats": {"accepted": np.zeros((4, 199), bool)}},
            r"sample_stats\['accepted'\]: leading shape",
        ),
        ({"sample_stats": {"accepted": np.full((4, 200), 0.5)}}, r"accepted'\]: must be boolean"),
        ({"sample_stats": {"note": np.full((4, 200), "x")}}, r"sample_stats\['note'\]: must be a numeric"),
        (
            {"warmup_draws": np.zeros((4, 19, 2))},
            r"warmup_draws: expected shape .*\(4, 20, 2\), got \(4, 19, 2\)",
        ),
        (
            {"warmup": -1, "warmup_draws": None, "warmup_sample_stats": None},
            r"warmup: must be an integer >= 0",
        ),
        (
            {"reference": ReferencePosterior("r", np.zeros(3), np.ones(3), np.zeros((3, 3)), np.zeros(3))},
            r"reference: has 3 parameter\(s\), draws have 2",
        ),
        ({"chain_groups": {"g": [0, 4]}}, r"chain_groups\['g'\]: chain indices must be in 0..3"),
        ({"privacy_delta": 0.0}, r"privacy_delta: must lie in \(0, 1\)"),
    ],
)
def test_bad_input_raises_naming_the_problem(change: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_result(**change)


def test_nan_draws_name_chain_draw_and_parameter() -> None:
    x = np.zeros((3, 10, 2))
    x[2, 7, 1] = np.nan
    x[2, 8, 0] = np.inf
    with pytest.raises(
        ValueError, match=r"draws: 2 non-finite value\(s\); first at chain 2, draw 7, parameter 'b'"
    ):
        RunResult(x, ["a", "b"])


def test_bad_privacy_reports() -> None:
    rep = gdp_report(1, 0.01, 1, 0.01)
    with pytest.raises(ValueError, match=r"privacy_reports\[2\]: the report says party 1, filed under 2"):
        make_result(reports={2: rep})
    with pytest.raises(ValueError, match=r"privacy_reports\[1\]: missing key\(s\) \['events_json'\]"):
        make_result(reports={1: {k: v for k, v in rep.items() if k != "events_json"}})
    with pytest.raises(ValueError, match=r"privacy_reports\[1\]: events_json / budget_json do not parse"):
        make_result(reports={1: {**rep, "events_json": '[{"type": "martian"}]'}})
    with pytest.raises(ValueError, match=r"privacy_reports: party ids must be integers >= 1"):
        make_result(reports={0: rep})


def test_reference_validation() -> None:
    with pytest.raises(ValueError, match=r"reference draws contain NaN"):
        ReferencePosterior.from_draws("r", np.array([[0.0], [np.nan], [1.0]]))
    with pytest.raises(ValueError, match=r"quantiles must have shape \(3, 2\)"):
        ReferencePosterior("r", np.zeros(2), np.ones(2), np.zeros((2, 2)), np.zeros(2))


# ---- not clobbering, atomicity ---------------------------------------------------------------------------


def test_existing_output_dir_is_not_clobbered(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_outputs(
        out, make_result(reports={1: gdp_report(1, 0.01, 800, 0.28), 2: gdp_report(2, 0.01, 8, 0.03)})
    )
    before = (out / "draws.csv").read_bytes()
    with pytest.raises(FileExistsError, match="not empty; pass overwrite=True"):
        write_outputs(out, make_result(seed=2))
    assert (out / "draws.csv").read_bytes() == before
    write_outputs(out, make_result(seed=2), overwrite=True)
    assert (out / "draws.csv").read_bytes() != before
    assert not (out / "privacy" / "party-2.json").exists()  # stale party of the earlier run removed
    assert not (out / "privacy" / "party-2.png").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a folder"):
        write_outputs(tmp_path / "file", make_result(), overwrite=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_outputs(empty, make_result())  # an existing empty folder is fine


def test_interrupted_write_leaves_no_half_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    write_outputs(out, make_result())
    old_nc = (out / "posterior.nc").read_bytes()

    def half_then_fail(self: Any, filename: str, *args: Any, **kwargs: Any) -> None:
        Path(filename).write_bytes(old_nc[: len(old_nc) // 2])  # the disk fills up half way
        raise OSError("No space left on device")

    monkeypatch.setattr(az.InferenceData, "to_netcdf", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        write_outputs(out, make_result(seed=9), overwrite=True)
    assert (out / "posterior.nc").read_bytes() == old_nc  # the earlier complete file, not half a new one
    assert not (out / "provenance.json").exists()  # no provenance: the folder is not a complete run
    assert [p.name for p in out.rglob(".*")] == []  # no temp files left behind

    fresh = tmp_path / "fresh"
    with pytest.raises(OSError, match="No space left"):
        write_outputs(fresh, make_result())
    assert [p.name for p in fresh.rglob("*") if p.is_file()] == []  # nothing under a final name


def test_a_report_that_cannot_be_recomposed_is_labelled_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_a: Any, **_k: Any) -> Any:
        raise ValueError("PLD exploded")

    monkeypatch.setattr(privacy_statement, "recompose", fail)
    files = write_outputs(tmp_path / "run", make_result())
    doc = json.loads(files["privacy/party-1.json"].read_text())
    assert (
        doc["recomputed_here"]["error"] == "could not recompose the reported events: ValueError: PLD exploded"
    )
    assert "eps_at_delta" not in doc["recomputed_here"]
    assert doc["reported_by_party"]["spent"] == 0.2828  # what the party said is still there
    assert "privacy/party-1.png" not in files and "provenance.json" in files


def test_party_without_budget_gets_no_privacy_number(tmp_path: Path) -> None:
    """No budget -> the party records no events: the report must say "not accounted", never epsilon = 0."""
    rep = {
        "party": 1,
        "identity": "registry-1",
        "budget": {"configured": False, "budget_json": "", "unit": "", "limit": 0.0, "spent": 0.0},
        "events_json": "[]",
        "decisions_used": 6400,
    }
    files = write_outputs(tmp_path / "run", make_result(reports={1: rep, 2: gdp_report(2, 0.01, 800, 0.28)}))
    d1 = json.loads(files["privacy/party-1.json"].read_text())
    rc = d1["recomputed_here"]
    assert rc["eps_at_delta"] is None and rc["gdp_mu"] is None
    assert "6400 decisions" in rc["not_accounted"]
    assert d1["statement"].startswith("no privacy budget configured: no epsilon is stated")
    assert "privacy/party-1.png" not in files  # no "nothing spent" curve for an unaccounted party
    assert "privacy/party-2.png" in files
    d2 = json.loads(files["privacy/party-2.json"].read_text())
    assert f"by its GDP filter (mu = {math.sqrt(800) * 0.01:.4g})" in d2["statement"]
    assert "budget: 0.28 of 2 spent (mu)" in d2["statement"]


def test_rejection_runs_report_their_acceptance() -> None:
    """A rejection run has no per-draw 'accepted' statistic; its counts give the acceptance line (it said
    'acceptance: not recorded')."""
    draws = np.random.default_rng(0).normal(size=(1, 50, 1))
    res = RunResult(
        draws=draws,
        param_names=["theta"],
        provenance={"counts": {"decisions_asked": 900, "accepted": 50, "proposed": 1000}},
    )
    text = format_summary(res)
    assert "acceptance: 50 of 1000 proposals accepted (rate 0.05); 900 decisions asked" in text
    assert "not recorded" not in text
    bare = RunResult(draws=draws, param_names=["theta"])
    assert "acceptance: not recorded" in format_summary(bare)


def test_statement_counts_this_run_apart_from_all_runs() -> None:
    """The per-registry line counted every run's decisions as if they were this run's."""
    res = make_result(reports={1: gdp_report(1, 0.1, 900, 3.0)})
    res.provenance["counts"] = {"decisions_asked": 400, "accepted": 120}
    doc, _ = privacy_document(1, res.privacy_reports[1], res)
    assert "(900 decisions made with its data in all)" in doc["statement"]
    assert doc["other_readings"][0] == "this run: 400 of the decisions made with its data"  # beside it
    res.provenance.pop("counts")
    again, _ = privacy_document(1, res.privacy_reports[1], res)
    assert again["statement"] == doc["statement"] and not again["other_readings"]


# ---- a run that stopped early (issue 40) -----------------------------------------------------------------

STOPPED = "a registry's privacy budget ran out at batch 8 of 200, in the warm-up (test)"


def _stopped_in_warmup(w: int = 7, **kw: Any) -> RunResult:
    """A run a budget stopped after ``w`` of its warm-up iterations: no draw after the warm-up."""
    rng = np.random.default_rng(3)
    return make_result(
        draws=np.zeros((4, 0, 2)),
        sample_stats={"accepted": np.zeros((4, 0), bool)},
        warmup=w,
        warmup_draws=ar1(rng, 4, w, 0.3, 2),
        warmup_sample_stats={"accepted": rng.random((4, w)) < 0.5},
        stopped=STOPPED,
        **kw,
    )


def test_no_draw_after_warm_up_only_for_a_run_that_stopped() -> None:
    with pytest.raises(ValueError, match=r"shape \(4, 0, 2\) \(no draw after warm-up only for a run that"):
        make_result(draws=np.zeros((4, 0, 2)), sample_stats={}, warmup=0, warmup_draws=None,
                    warmup_sample_stats=None)  # fmt: skip
    with pytest.raises(ValueError, match="stopped: must be a string"):
        make_result(stopped=True)
    assert _stopped_in_warmup().n_draws == 0


def test_a_run_stopped_in_its_warm_up_writes_its_warm_up_labelled_and_no_posterior(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_outputs(out, make_result())  # an earlier attempt's posterior files, replaced by the stopped layout
    res = _stopped_in_warmup()
    files = write_outputs(out, res, overwrite=True)
    assert set(files) == {
        "warmup.nc",
        "warmup_draws.csv",
        "summary.txt",
        "privacy/party-1.json",
        "privacy/party-1.png",
        "provenance.json",
    }
    for stale in ("posterior.nc", "draws.csv", "summary.csv", "trace.png", "posterior.png"):
        assert not (out / stale).exists(), stale
    idata = az.from_netcdf(files["warmup.nc"])
    assert "posterior" not in idata.groups()
    assert {"warmup_posterior", "warmup_sample_stats"} <= set(idata.groups())
    assert res.warmup_draws is not None and res.warmup_sample_stats is not None
    for k, nm in enumerate(res.param_names):
        np.testing.assert_array_equal(idata.warmup_posterior[nm].values, res.warmup_draws[:, :, k])
    np.testing.assert_array_equal(
        idata.warmup_sample_stats["accepted"].values, res.warmup_sample_stats["accepted"]
    )
    assert idata.attrs["stopped"] == STOPPED and "not posterior draws" in idata.attrs["no_posterior"]
    with open(files["warmup_draws.csv"], newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["chain", "draw", "theta", "log_sigma"] and len(rows) == 1 + 4 * 7
    back = np.array([[float(v) for v in r[2:]] for r in rows[1:]]).reshape(4, 7, 2)
    np.testing.assert_array_equal(back, res.warmup_draws)
    text = files["summary.txt"].read_text()
    assert text.startswith(f"NO POSTERIOR: the run stopped early ({STOPPED})")
    assert "it stopped after 7 warm-up iteration(s) per chain" in text and "NOT posterior draws" in text
    acc = float(np.mean(res.warmup_sample_stats["accepted"]))
    assert f"acceptance rate in the warm-up: {acc:.3f}" in text
    prov = json.loads(files["provenance.json"].read_text())
    assert prov["outputs"]["draws_per_chain"] == 0
    assert set(prov["outputs"]["files_sha256"]) == set(files) - {"provenance.json"}
    assert json.loads(files["privacy/party-1.json"].read_text())["statement"]
    # then the run completes (resumed with more budget): the posterior's layout replaces the warm-up's files
    full = write_outputs(out, make_result(), overwrite=True)
    assert "posterior.nc" in full and not (out / "warmup.nc").exists()
    assert not (out / "warmup_draws.csv").exists()


def test_a_run_stopped_before_any_draw_says_so(tmp_path: Path) -> None:
    res = make_result(
        draws=np.zeros((4, 0, 2)), sample_stats={}, warmup=0, warmup_draws=None, warmup_sample_stats=None,
        stopped=STOPPED,
    )  # fmt: skip
    files = write_outputs(tmp_path / "run", res)
    assert set(files) == {"summary.txt", "privacy/party-1.json", "privacy/party-1.png", "provenance.json"}
    text = files["summary.txt"].read_text()
    assert "there are no draws after the warm-up: the run made no draw at all" in text


def test_a_run_stopped_after_its_warm_up_says_so_first() -> None:
    res = make_result(stopped=STOPPED)
    assert format_summary(res).startswith(f"STOPPED EARLY: {STOPPED}\nposterior: 4 chain(s) x 200 draw(s)")


def test_a_long_reference_label_keeps_the_posterior_figure_laid_out() -> None:
    """A sampled reference's label (method and diagnostics, ~250 characters) is summary.txt's, not the
    legend's: in the legend it overflowed the figure and matplotlib dropped the figure's layout (its
    warning "constrained_layout not applied"); now the legend names the reference briefly."""
    from coordinator.outputs.plots import posterior_png

    long = "plain MH on the pooled records (" + "x" * 200 + "), 625 iterations x 16 chains (converged)"
    flat = make_result().draws.reshape(-1, 2)
    res = make_result(reference=ReferencePosterior.from_draws(long, flat))
    summary = summarize(res)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the layout's warning is a UserWarning
        png = posterior_png(res, summary)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
