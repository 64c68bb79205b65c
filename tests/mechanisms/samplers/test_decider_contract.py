"""The confidential chain equals the plaintext chain when both use the same noise draws.

Each party's noise comes from an identically keyed CSPRNG in both runs; the plaintext run decides
public + Σ_j x_j ≥ 0 in floating point, the confidential run through the secret-sharing engine (in memory) in
every reveal mode. Accept bits must be identical, except ties within the fixed-point resolution
(|S| < 16 · 2^-21, hss/README.md). Also checks that the same public seed gives the same proposals whatever
decider is used.
"""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.samplers import (
    ConfidentialRule,
    DecisionRequest,
    LocalParties,
    Penalty,
    PublicSeeds,
    RandomWalkMH,
    RejectionSampler,
    run_kernel,
)
from tests.mechanisms.samplers.helpers import (
    MODEL,
    RecordingDecide,
    beta_bernoulli_data,
    hss_decide,
    noise_rngs,
)

TIE = 16 * 2.0**-21
M = 3


def _bits_agree(a: np.ndarray, b: np.ndarray, sums: np.ndarray) -> None:
    differ = a != b
    assert (np.abs(sums[differ]) < TIE).all(), (
        f"{int(differ.sum())} decisions differ outside fixed-point ties"
    )


@pytest.mark.parametrize("mode", ["sum", "blinded", "sign"])
@pytest.mark.parametrize("penalty", [False, True], ids=["mh", "penalty-mh"])
def test_confidential_mh_chain_equals_plaintext_chain(mode: str, penalty: bool) -> None:
    data = beta_bernoulli_data()
    pen = Penalty(tau=0.05, alpha=0.5, n=70) if penalty else None
    seeds = PublicSeeds(11)
    theta0 = MODEL.sample_prior(seeds.init_rng(), 32)
    runs = []
    rec = RecordingDecide()
    asked: list[np.ndarray] = []
    for decide in (rec, hss_decide(mode, M)):
        rule = ConfidentialRule(decide, noise_rngs(M), mode)
        kernel = RandomWalkMH(MODEL, LocalParties(MODEL, data, rule), cov=0.1**2, penalty=pen, m=M)
        _, trace = run_kernel(
            kernel,
            kernel.init(theta0),
            25,
            seeds,
            on_step=lambda _k, info: asked.append(np.isfinite(info.public)),
        )
        runs.append(trace)
    plain, conf = runs
    mask = np.stack(asked[:25])  # the plaintext run's asked proposals (the first 25 steps)
    sums = np.full(mask.shape, np.inf)
    batches = iter(rec.sums)
    for k in range(25):
        if mask[k].any():
            sums[k, mask[k]] = next(batches)
    _bits_agree(plain.accept.ravel(), conf.accept.ravel(), sums.ravel())
    if (plain.accept == conf.accept).all():
        np.testing.assert_array_equal(plain.draws, conf.draws)


def test_confidential_rejection_equals_plaintext() -> None:
    data = beta_bernoulli_data((8, 12, 5))
    out = []
    rec = RecordingDecide()
    for decide in (rec, hss_decide("sign", M)):
        lp = LocalParties(MODEL, data, ConfidentialRule(decide, noise_rngs(M), "sign"))
        out.append(RejectionSampler(MODEL, lp, batch_size=300).run(PublicSeeds(4), 10**6, 600))
    plain, conf = out
    assert plain.accepted == conf.accepted
    np.testing.assert_array_equal(plain.samples, conf.samples)


def test_same_seed_same_proposals_whatever_the_decider() -> None:
    seen: list[list[np.ndarray]] = [[], []]

    def recorder(k: int):  # type: ignore[no-untyped-def]
        def decide(req: DecisionRequest) -> np.ndarray:
            seen[k].append(req.theta_star.copy())
            return np.zeros(
                req.n, dtype=bool
            )  # always reject: the chain stays, proposals depend on seed only

        return decide

    seeds = PublicSeeds(5)
    for k in (0, 1):
        kernel = RandomWalkMH(MODEL, recorder(k), cov=0.01)
        run_kernel(kernel, kernel.init(np.full((4, 1), 0.5)), 3, seeds)
    for a, b in zip(*seen, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(seeds.rng(0).random(3), seeds.rng(0, party=1).random(3))
