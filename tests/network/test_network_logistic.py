"""Logistic regression on real party daemons (simulations.launcher, mTLS on loopback, sign reveal) matches
plain centralized MH on the pooled records: posterior means within 4 combined MCSE (from ESS) per parameter.
Also: the first batch of proposals is the same as the in-memory run's for the same public seed, and
``confar bench mcmc`` runs end to end at a tiny scale."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator import cli as confar_cli
from coordinator.api import BlockingCoordinator, SessionOptions
from coordinator.decider import NetworkDecider
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from mechanisms.samplers import (
    AdaptiveMH,
    BernoulliRule,
    DecisionRequest,
    LocalParties,
    PublicSeeds,
    mcse_mean,
    run_kernel,
)
from simulations.launcher import LocalConsortium
from tests.mechanisms.samplers.helpers import Z

pytestmark = pytest.mark.slow

MODEL = BayesLogistic(p=2, x_bound=3.0)
STEPS, ADAPT_STOP = 520, 160


def kernel(decide):  # type: ignore[no-untyped-def]
    return AdaptiveMH(MODEL, decide, init_cov=0.05**2 * np.eye(3), start=40, every=20, stop=ADAPT_STOP)


def test_logistic_on_daemons_matches_centralized_mh() -> None:
    seeds = PublicSeeds(44)
    data = synthetic_registries(seeds.rng(0, party=1), MODEL, sizes=(400, 250, 150))
    pooled = {k: np.concatenate([d[k] for d in data]) for k in data[0]}
    theta0 = 0.1 * MODEL.sample_prior(seeds.init_rng(), 16)

    plain = kernel(LocalParties(MODEL, [pooled], BernoulliRule(np.random.default_rng(9))))
    _, tr_plain = run_kernel(plain, plain.init(np.tile(theta0, (4, 1))), 1500, seeds)
    ref = tr_plain.draws[ADAPT_STOP:]

    first: list[DecisionRequest] = []
    with LocalConsortium.start(
        3, data, models=("bayes-logistic",), data_model="bayes-logistic", data_model_args={"p": 2}
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
            sess = coord.open_session(SessionOptions(
                reveal_mode="sign", model="bayes-logistic", model_params={"model_args": {"p": 2}}
            ))
            net = NetworkDecider(sess)

            def decide(req: DecisionRequest) -> np.ndarray:
                if not first:
                    first.append(req)
                return net(req)

            conf = kernel(decide)
            _, tr_conf = run_kernel(conf, conf.init(theta0), STEPS, seeds)
            sess.close()
    assert net.rounds / net.calls == 7  # sign: 1 precompute + 6 online rounds per batch

    # identical public proposals: the in-memory run with the same seed asks the same first batch
    mem: list[DecisionRequest] = []
    k_mem = kernel(lambda r: (mem.append(r), np.zeros(r.n, dtype=bool))[1])
    run_kernel(k_mem, k_mem.init(theta0), 1, seeds)
    np.testing.assert_array_equal(first[0].theta_star, mem[0].theta_star)

    draws = tr_conf.draws[ADAPT_STOP:]
    diff = np.abs(draws.reshape(-1, 3).mean(0) - ref.reshape(-1, 3).mean(0))
    tol = Z * np.hypot(mcse_mean(draws), mcse_mean(ref))
    assert (diff <= tol).all(), (diff, tol)
    assert 0.1 < tr_conf.acceptance_rate < 0.6


def test_bench_mcmc_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mcmc.json"
    rc = confar_cli.main(
        [
            "bench",
            "mcmc",
            "--parties",
            "3",
            "--records",
            "100",
            "--chains",
            "4",
            "--iterations",
            "40",
            "--covariates",
            "2",
            "--json",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    rec = json.loads(out.read_text())
    assert rec["suite"] == "mcmc" and rec["mtls"] and rec["mode"] == "sign"
    for side in ("confidential", "plain"):
        assert rec[side]["wall_s"] > 0 and rec[side]["ess_min_per_s"] >= 0
