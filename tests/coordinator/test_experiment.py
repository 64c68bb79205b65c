"""The experiment file of ``confar run`` (coordinator/experiment.py): every example loads, every refusal names
its key, and nothing is contacted while validating."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from coordinator.cli import main
from coordinator.experiment import load_experiment
from coordinator.tables import ExperimentError
from tests.coordinator.experiment_text import head

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))

BASE = head("t", 1) + """
[model]
name = "beta-bernoulli"

[sampler]
kind = "mh"
chains = 4
iterations = 10
proposal_scale = 0.1

[reveal]
mode = "sign"
"""


def load(tmp_path: Path, text: str) -> object:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return load_experiment(p)


def test_examples_exist_and_validate() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"mh", "adaptive-mh", "penalty", "rejection", "abcdp", "demo"} <= names
    for p in EXAMPLES:
        exp = load_experiment(p)
        assert exp.output_dir.is_relative_to(p.parent), p  # relative paths resolve against the file's folder
        assert exp.coordinator.cert == (p.parent / "certs" / "coordinator.pem"), p
        assert 2 <= exp.m <= 15
        if exp.sampler.kind != "abcdp":
            model = exp.model()
            assert exp.session_params()["model_args"] == exp.model_params
            assert model.d >= 1
    demo = load_experiment(ROOT / "examples" / "demo.toml")
    assert demo.m == 7 and demo.model_name == "bayes-logistic" and demo.reveal_mode == "sign"


def test_valid_base_and_derived_values(tmp_path: Path) -> None:
    exp = load(tmp_path, BASE)
    assert exp.m == 3 and exp.t == 1  # type: ignore[attr-defined]
    assert exp.sampler.warmup == 5  # type: ignore[attr-defined]
    np.testing.assert_allclose(exp.sampler.proposal_cov, [[0.01]])  # type: ignore[attr-defined]
    assert exp.session_params() == {"model_args": {}, "kind": "mh"}  # type: ignore[attr-defined]


def _edit(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new)


REFUSALS = [
    # (edit, key named in the error, words in the message)
    (('mode = "sign"', 'mode = "sign"\nsign_precompute = "eager"'), "reveal.sign_precompute", "one of"),
    (('mode = "sign"', 'mode = "blinded"\nsign_precompute = "pooled"'), "reveal.sign_precompute", "'sign'"),
    (('mode = "sign"', 'mode = "blinded"\nprecompute_ahead = true'), "reveal.precompute_ahead", "'sign'"),
    (('mode = "sign"', 'mode = "sign"\nprecompute_ahead = 1'), "reveal.precompute_ahead", "wrong type"),
    (('mode = "sign"', 'mode = "sign"\nsecurity = "strong"'), "reveal.security", "one of"),
    (("[reveal]", "[reveals]\n[reveal]"), "reveals", "unknown table"),
    (('name = "t"', 'name = "t"\ncolour = 1'), "experiment.colour", "unknown key"),
    (("seed = 1", 'seed = "1"'), "experiment.seed", "wrong type"),
    (("seed = 1", "seed = -1"), "experiment.seed", "must be in"),
    (("chains = 4", "chains = 0"), "sampler.chains", "must be in"),
    (("chains = 4", "chains = 4.5"), "sampler.chains", "wrong type"),
    (("proposal_scale = 0.1", "proposal_scale = -0.1"), "sampler.proposal_scale", "must be > 0"),
    (
        ("proposal_scale = 0.1", "proposal_scale = 0.1\nproposal_cov = [[1.0]]"),
        "sampler.proposal_cov",
        "not both",
    ),
    (("proposal_scale = 0.1", "proposal_cov = [[1.0, 0.0], [0.0, 1.0]]"), "sampler.proposal_cov", "1 x 1"),
    (("proposal_scale = 0.1", "proposal_cov = [[-1.0]]"), "sampler.proposal_cov", "positive definite"),
    (("iterations = 10", "iterations = 10\nwarmup = 10"), "sampler.warmup", "must be in"),
    (("iterations = 10", "iterations = 10\ntau = 1.0"), "sampler.tau", "unknown key"),
    (("iterations = 10", "iterations = 10\ninit = [1.5]"), "sampler.init", "outside the prior"),
    (("iterations = 10", "iterations = 10\ninit = [[0.5], [0.5]]"), "sampler.init", "4 lists"),
    (('kind = "mh"', 'kind = "gibbs"'), "sampler.kind", "must be one of"),
    (('kind = "mh"', 'kind = "penalty"\nn_records = 10'), "sampler.tau", "noise scale"),
    (('kind = "mh"', 'kind = "penalty"\ntau = 1.0'), "sampler.n_records", "missing"),
    (('kind = "mh"', 'kind = "penalty"\ntau = 1.0\nn_records = 9\nc = "clip"'), "sampler.b", "clip constant"),
    (
        ('kind = "mh"', 'kind = "adaptive-mh"\nadapt_stop = 20'),
        "sampler.adapt_stop",
        "adapt_start < adapt_stop",
    ),
    (('kind = "mh"', 'kind = "adaptive-mh"\nwarmup = 2'), "sampler.warmup", "adapt_stop"),
    # the automatic proposal (no proposal_scale / proposal_cov): target_accept in (0, 1), its keys only there
    (("proposal_scale = 0.1", "target_accept = 1.5"), "sampler.target_accept", "must be < 1"),
    (("proposal_scale = 0.1", "target_accept = 0.0"), "sampler.target_accept", "must be > 0"),
    (("proposal_scale = 0.1", "warmup = 2"), "sampler.warmup", "adapt_stop"),
    (
        ("proposal_scale = 0.1", "proposal_scale = 0.1\ntarget_accept = 0.3"),
        "sampler.target_accept",
        "automatic proposal of kind 'mh'",
    ),
    (
        ("proposal_scale = 0.1", "proposal_scale = 0.1\nadapt_stop = 5"),
        "sampler.adapt_stop",
        "kind = 'adaptive-mh'",
    ),
    (
        ('kind = "mh"', 'kind = "penalty"\ntau = 1.0\nn_records = 9\ntarget_accept = 0.3'),
        "sampler.target_accept",
        "adaptive proposal",
    ),
    (('mode = "sign"', 'mode = "loud"'), "reveal.mode", "must be one of"),
    (('mode = "sign"', 'mode = "svt"'), "reveal.mode", "federated ABCDP"),
    (('mode = "sign"', 'mode = "sign"\nthreshold = 2'), "reveal.threshold", "1 <= t < m/2"),
    (('mode = "sign"', 'mode = "sign"\ntopology = "star"'), "reveal.topology", "must be one of"),
    (('name = "beta-bernoulli"', 'name = "no-such-model"'), "model.name", "unknown model"),
    (('name = "beta-bernoulli"', 'name = "beta-bernoulli"\nparams = { a = -1.0 }'), "model.params", "a > 0"),
    (
        ('name = "beta-bernoulli"', 'name = "beta-bernoulli"\nparams = { q = 1 }'),
        "model.params",
        "bad arguments",
    ),
    (("[[parties]]\nid = 3", "[[parties]]\nid = 2"), "parties", "duplicate party id 2"),
    (("[[parties]]\nid = 3", "[[parties]]\nid = 4"), "parties", "without gaps"),
    (('address = "127.0.0.1:3"', 'address = "nowhere"'), "parties[2].address", "host:port"),
    (("insecure = true", "insecure = false"), "coordinator.cert", "required unless insecure"),
    (("[reveal]", "[privacy]\ngdp_mu = 1.0\n[reveal]"), "privacy", "no privacy bound"),
    (("[reveal]", "[output]\nformats = ['pdf']\n[reveal]"), "output.formats[0]", "unknown format"),
    # [reference] max_seconds: the simulated run's plain reference fit, capped (issue 40)
    (("[reveal]", "[reference]\nmax_seconds = 0\n[reveal]"), "reference.max_seconds", "must be > 0"),
    (("[reveal]", "[reference]\nmax_seconds = -5.0\n[reveal]"), "reference.max_seconds", "must be > 0"),
    (("[reveal]", "[reference]\nmax_seconds = '2 min'\n[reveal]"), "reference.max_seconds", "wrong type"),
    (("[reveal]", "[reference]\nmax_seconds = nan\n[reveal]"), "reference.max_seconds", "finite number"),
    (("[reveal]", "[reference]\nmax_seconds = inf\n[reveal]"), "reference.max_seconds", "finite number"),
    (("[reveal]", "[reference]\nmax_seconds = true\n[reveal]"), "reference.max_seconds", "wrong type"),
    (("[reveal]", "[reference]\nmin_ess = 100\n[reveal]"), "reference.min_ess", "unknown key"),
]


@pytest.mark.parametrize(("edit", "key", "words"), REFUSALS, ids=[r[1] + ":" + r[2] for r in REFUSALS])
def test_refusals_name_the_key(tmp_path: Path, edit: tuple[str, str], key: str, words: str) -> None:
    with pytest.raises(ExperimentError) as ei:
        load(tmp_path, _edit(*edit))
    msg = str(ei.value)
    assert msg.startswith(f"{tmp_path / 'exp.toml'}: {key}:"), msg
    assert words in msg, msg


def test_without_proposal_scale_the_proposal_is_tuned_automatically(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 item 9: no proposal_scale / proposal_cov: adaptive MH with Robbins-Monro scaling from the
    prior's spread, the adapt_* defaults from iterations, the kind as written; given a scale, as before."""
    from mechanisms.samplers.mh import prior_proposal_cov

    auto = load(
        tmp_path, _edit("proposal_scale = 0.1\n", "iterations = 400\n").replace("iterations = 10\n", "")
    )
    s = auto.sampler  # type: ignore[attr-defined]
    assert s.kind == "mh" and s.adaptive and s.scale_adapt and s.target_accept is None
    assert (s.adapt_start, s.adapt_every, s.adapt_stop, s.history_from) == (40, 10, 200, 20)
    assert s.warmup == s.adapt_stop  # only the frozen kernel's draws are kept
    np.testing.assert_array_equal(s.proposal_cov, prior_proposal_cov(auto.model()))  # type: ignore[attr-defined]
    assert auto.session_params() == {"model_args": {}, "kind": "mh"}  # type: ignore[attr-defined]
    assert main(["run", str(tmp_path / "exp.toml"), "--check"]) == 0  # says what it will do
    assert "tuned automatically: each chain's scale steered to acceptance 0.44" in capsys.readouterr().out

    given = load(tmp_path, BASE).sampler  # type: ignore[attr-defined]
    assert not given.adaptive and not given.scale_adapt  # exactly as before: plain random-walk MH

    tuned = load(tmp_path, _edit("proposal_scale = 0.1", "target_accept = 0.3\nadapt_stop = 6")).sampler  # type: ignore[attr-defined]
    assert tuned.scale_adapt and tuned.target_accept == 0.3 and tuned.adapt_stop == 6
    # adaptive-mh: Haario alone with a given scale; scaled too without one, or with target_accept
    amh = _edit('kind = "mh"', 'kind = "adaptive-mh"')
    assert not load(tmp_path, amh).sampler.scale_adapt  # type: ignore[attr-defined]
    assert load(tmp_path, amh.replace("proposal_scale = 0.1", "")).sampler.scale_adapt  # type: ignore[attr-defined]
    with_target = amh.replace("proposal_scale = 0.1", "proposal_scale = 0.1\ntarget_accept = 0.25")
    assert load(tmp_path, with_target).sampler.scale_adapt  # type: ignore[attr-defined]
    # penalty stays penalty (its charge is per decision on the public theta, theta*)
    pen = load(
        tmp_path,
        _edit('kind = "mh"', 'kind = "penalty"\ntau = 1.0\nn_records = 9').replace(
            "proposal_scale = 0.1\n", ""
        ),
    )
    assert pen.sampler.kind == "penalty" and pen.sampler.scale_adapt  # type: ignore[attr-defined]
    assert pen.session_params()["penalty"]["tau"] == 1.0  # type: ignore[attr-defined]


def _two_parties(mode: str) -> str:
    text = _edit('[[parties]]\nid = 3\naddress = "127.0.0.1:3"\n', "")
    return text.replace('mode = "sign"', f'mode = "{mode}"')


@pytest.mark.parametrize("mode", ["sign", "blinded"])
def test_honest_majority_modes_need_three_parties(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ExperimentError, match=r"reveal\.mode: .* m >= 3"):
        load(tmp_path, _two_parties(mode))
    assert load(tmp_path, _two_parties("sum")).m == 2  # type: ignore[attr-defined]


def test_party_count_bounds(tmp_path: Path) -> None:
    many = BASE.replace('mode = "sign"', 'mode = "sum"')
    extra = "".join(f'[[parties]]\nid = {i}\naddress = "127.0.0.1:{i}"\n' for i in range(4, 17))
    with pytest.raises(ExperimentError, match=r"parties: m = 16 parties: must be in 2\.\.15"):
        load(tmp_path, many.replace("[model]", extra + "[model]"))
    one = re.sub(r"\[\[parties\]\]\nid = [23]\naddress = \"[^\"]+\"\n", "", many)
    with pytest.raises(ExperimentError, match=r"m = 1 parties"):
        load(tmp_path, one)


ABCDP = BASE.replace('[model]\nname = "beta-bernoulli"\n', "").replace(
    '[sampler]\nkind = "mh"\nchains = 4\niterations = 10\nproposal_scale = 0.1\n',
    '[sampler]\nkind = "abcdp"\nsimulator = "toy"\neps_abc = 0.2\neps_total = 1.0\nc = 5\n'
    "n_features = 16\nbandwidth = 0.5\nn_records = 100\nmax_proposals = 1000\n",
)


def test_abcdp_needs_svt_and_a_plan(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match=r"reveal\.mode: sampler\.kind = 'abcdp' requires reveal 'svt'"):
        load(tmp_path, ABCDP)
    exp = load(tmp_path, ABCDP.replace('mode = "sign"', 'mode = "svt"'))
    params = exp.session_params()  # type: ignore[attr-defined]
    assert params["c"] == 5 and params["dim"] == 1 and params["eps_total"] == 1.0
    with pytest.raises(ExperimentError, match=r"sampler\.n_features: must be even"):
        load(tmp_path, ABCDP.replace("n_features = 16", "n_features = 15").replace('"sign"', '"svt"'))
    with pytest.raises(ExperimentError, match=r"model: sampler\.kind = 'abcdp' takes its model"):
        load(tmp_path, ABCDP.replace('"sign"', '"svt"') + '[model]\nname = "beta-bernoulli"\n')


def test_privacy_target_forms(tmp_path: Path) -> None:
    pen = BASE.replace('kind = "mh"', 'kind = "penalty"\ntau = 5.0\nn_records = 100')
    exp = load(tmp_path, pen + "[privacy]\nepsilon = 2.0\ndelta = 1e-6\n")
    assert exp.privacy.epsilon == 2.0 and exp.privacy.delta == 1e-6  # type: ignore[attr-defined]
    assert exp.session_params()["penalty"]["tau"] == 5.0  # type: ignore[attr-defined]
    with pytest.raises(ExperimentError, match=r"privacy\.delta: missing"):
        load(tmp_path, pen + "[privacy]\nepsilon = 2.0\n")
    with pytest.raises(ExperimentError, match=r"privacy\.delta: must be < 1"):
        load(tmp_path, pen + "[privacy]\nepsilon = 2.0\ndelta = 1.0\n")
    with pytest.raises(
        ExperimentError, match=r"privacy\.gdp_mu: give gdp_mu, or epsilon and delta, not both"
    ):
        load(tmp_path, pen + "[privacy]\ngdp_mu = 1.0\nepsilon = 2.0\n")


def test_stop_at_budget_key(tmp_path: Path) -> None:
    """Issue 40: ``[privacy] stop_at_budget`` alone, or beside a target; a boolean; not for a planned run nor
    for ABCDP (charged once per run, at its start)."""
    pen = BASE.replace('kind = "mh"', 'kind = "penalty"\ntau = 5.0\nn_records = 100')
    assert load(tmp_path, pen).stop_at_budget is False  # type: ignore[attr-defined]
    alone = load(tmp_path, pen + "[privacy]\nstop_at_budget = true\n")
    assert alone.stop_at_budget and alone.privacy is None  # type: ignore[attr-defined]
    both = load(tmp_path, pen + "[privacy]\ngdp_mu = 1.0\nstop_at_budget = true\n")
    assert both.stop_at_budget and both.privacy.gdp_mu == 1.0  # type: ignore[attr-defined]
    with pytest.raises(ExperimentError, match=r"privacy\.stop_at_budget: has the wrong type: 1"):
        load(tmp_path, pen + "[privacy]\nstop_at_budget = 1\n")
    with pytest.raises(ExperimentError, match=r"privacy\.stop_at_budget: federated ABCDP is charged"):
        load(tmp_path, ABCDP.replace('"sign"', '"svt"') + "[privacy]\nstop_at_budget = true\n")
    planned = (Path(__file__).resolve().parents[2] / "examples" / "demo.toml").read_text()
    with pytest.raises(ExperimentError, match=r"privacy\.stop_at_budget: a planned run \(target_epsilon\)"):
        load(tmp_path, planned.replace("[privacy]", "[privacy]\nstop_at_budget = true", 1))


def test_simulate_table_replaces_parties(tmp_path: Path) -> None:
    text = BASE.split("[coordinator]")[0] + BASE.split("[model]")[1].join(["[model]", ""])
    exp = load(tmp_path, text + "[simulate]\nparties = 5\nrecords = 40\n")
    assert exp.m == 5 and exp.parties == [] and exp.simulate.records == (40,) * 5  # type: ignore[attr-defined]
    with pytest.raises(ExperimentError, match=r"simulate\.records: needs one count per party"):
        load(tmp_path, text + "[simulate]\nparties = 3\nrecords = [1, 2]\n")
    with pytest.raises(ExperimentError, match=r"parties: needs at least one \[\[parties\]\] table"):
        load(tmp_path, text + "[coordinator]\ninsecure = true\n")
    # where each simulated registry keeps its records
    exp = load(tmp_path, text + '[simulate]\nparties = 3\nsources = ["csv", "postgresql", "sparql"]\n')
    assert exp.simulate.sources == ("csv", "postgresql", "sparql")  # type: ignore[attr-defined]
    assert exp.simulate.source(3) == "sparql"  # type: ignore[attr-defined]
    assert load(tmp_path, text + "[simulate]\nparties = 3\n").simulate.source(2) == "csv"  # type: ignore[attr-defined]
    with pytest.raises(ExperimentError, match=r"simulate\.sources: needs one source per party \(3\), got 2"):
        load(tmp_path, text + '[simulate]\nparties = 3\nsources = ["csv", "sparql"]\n')
    with pytest.raises(ExperimentError, match=r"simulate\.sources\[1\]: 'oracle' is not one of"):
        load(tmp_path, text + '[simulate]\nparties = 3\nsources = ["csv", "oracle", "csv"]\n')


def test_cli_exit_code_2_names_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(_edit("chains = 4", "chains = -4"))
    assert main(["run", str(p)]) == 2
    assert "sampler.chains: must be in" in capsys.readouterr().err
    p.write_text(BASE)
    assert main(["run", str(p), "--check"]) == 0
    assert main(["run"]) == 2
    assert main(["run", "--resume", str(tmp_path / "nothing")]) == 2


def test_reference_time_cap_default_and_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load(tmp_path, BASE).reference.max_seconds == 120.0  # type: ignore[attr-defined]
    given = _edit("[reveal]", "[reference]\nmax_seconds = 5\n[reveal]")
    assert load(tmp_path, given).reference.max_seconds == 5.0  # type: ignore[attr-defined]
    p = tmp_path / "bad.toml"
    p.write_text(_edit("[reveal]", "[reference]\nmax_seconds = -1\n[reveal]"))
    assert main(["run", str(p), "--check"]) == 2
    assert "reference.max_seconds: must be > 0, got -1" in capsys.readouterr().err
    rejection = BASE.replace('kind = "mh"', 'kind = "rejection"\nn_accept = 5\nmax_proposals = 50')
    for key in ("chains = 4\n", "iterations = 10\n", "proposal_scale = 0.1\n"):
        rejection = rejection.replace(key, "")
    load(tmp_path, rejection)  # no [reference]: fine
    with pytest.raises(ExperimentError, match=r": reference: a reference posterior is fitted for simulated"):
        load(tmp_path, rejection + "\n[reference]\nmax_seconds = 5\n")


def test_security_default_and_abort(tmp_path: Path) -> None:
    assert load(tmp_path, BASE).security == "semi-honest"  # type: ignore[attr-defined]
    abort = load(tmp_path, _edit('mode = "sign"', 'mode = "sign"\nsecurity = "abort"'))
    assert abort.security == "abort"  # type: ignore[attr-defined]  # issue 25


def test_sign_precompute_default_and_pooled(tmp_path: Path) -> None:
    assert load(tmp_path, BASE).sign_precompute == "inline"  # type: ignore[attr-defined]
    pooled = load(tmp_path, _edit('mode = "sign"', 'mode = "sign"\nsign_precompute = "pooled"'))
    assert pooled.sign_precompute == "pooled"  # type: ignore[attr-defined]
    blocks = load(tmp_path, _edit('mode = "sign"', 'mode = "sign"\nsign_precompute = "blocks4"'))
    assert blocks.sign_precompute == "blocks4"  # type: ignore[attr-defined]  # issue 16: 5 online rounds
    assert not blocks.precompute_ahead  # type: ignore[attr-defined]
    ahead_text = _edit('mode = "sign"', 'mode = "sign"\nsign_precompute = "blocks4"\nprecompute_ahead = true')
    ahead = load(tmp_path, ahead_text)
    assert ahead.precompute_ahead  # type: ignore[attr-defined]  # issue 16: the precompute made ahead
    lazy_blocks = _edit('mode = "sign"', 'mode = "sign"\nsign_precompute = "blocks4"').replace(
        "proposal_scale = 0.1", "proposal_scale = 0.1\nlazy = 0.5\nmax_sensitivity = 1.0"
    )
    with pytest.raises(ValueError, match=r"sampler.lazy.*sign_precompute 'inline', got 'sign' / 'blocks4'"):
        load(tmp_path, lazy_blocks)


def test_check_simulate_refuses_what_budgeted_registries_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24 item 5: exact MH against registries with budgets passed --check --simulate and was then
    refused by every registry, naming the wire key model_params.penalty; --check now refuses it, in the
    experiment file's keys."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    text = (examples / "mh.toml").read_text().replace('"certs/', f'"{examples}/certs/')
    p = tmp_path / "mh.toml"
    p.write_text(text.replace("[simulate]", "[simulate]\nparty_epsilon = 50.0\nparty_delta = 1e-5", 1))
    assert main(["run", str(p), "--check", "--simulate"]) == 2
    err = capsys.readouterr().err
    assert 'would refuse this run' in err and '[sampler] kind = "penalty"' in err
    assert "model_params" not in err
    p.write_text(text)  # no budgets: the same run is fine
    assert main(["run", str(p), "--check", "--simulate"]) == 0


def test_check_simulate_refuses_a_run_over_the_registries_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The whole run's projected spend, composed as each registry's ledger composes it: 600 batches of the
    penalty example spend eps = 344.9 at delta = 1e-5 (the daemons' own dry run says 344.884), over a budget
    of 300; the example's own budget (1000) fits."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    text = (examples / "penalty.toml").read_text().replace('"certs/', f'"{examples}/certs/')
    p = tmp_path / "penalty.toml"
    p.write_text(text.replace("party_epsilon = 1000.0", "party_epsilon = 300.0"))
    assert main(["run", str(p), "--check", "--simulate"]) == 2
    err = capsys.readouterr().err
    assert "party_epsilon = 300" in err and "spend eps = 344.9" in err
    p.write_text(text)
    assert main(["run", str(p), "--check", "--simulate"]) == 0
