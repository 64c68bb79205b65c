"""The warm start's releases audited by membership inference (issue 23, "Held to"): each release as the
registries compute it is consistent with its stated μ, for the coordinator and for a colluding registry,
and a registry that adds a quarter of the noise while claiming the same μ is flagged."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.models import load_model
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from mechanisms.warmstart import Statistics
from simulations.privacy_audit.release import audit_release

pytestmark = pytest.mark.slow

MODEL = load_model("bayes-logistic", {"p": 2, "x_bound": 3.0})
assert isinstance(MODEL, BayesLogistic)
DATA = synthetic_registries(np.random.default_rng(7), MODEL, sizes=(40, 30, 50))
THETA = np.array([-0.5, 0.3, -0.2])
CLIP = float(MODEL.score_norm_bound())
MOMENTS = Statistics("moments", 8.0, 30.0, 1.0)
SCORE = Statistics("score", 2.0 * CLIP, 2.0 * CLIP**2, 1.0, clip=CLIP)


@pytest.mark.parametrize(
    ("stats", "theta", "colluding"), [(MOMENTS, None, 0), (SCORE, THETA, 0), (SCORE, THETA, 1)]
)
def test_a_release_is_consistent_with_its_stated_mu(stats: Statistics, theta: object, colluding: int) -> None:
    a = audit_release(MODEL, stats, DATA, theta, runs=6000, colluding=colluding)  # type: ignore[arg-type]
    assert a.result.violated is None, a.line()
    assert 0 < a.result.mu_lower <= a.mu_claimed


def test_an_under_noised_release_is_flagged() -> None:
    a = audit_release(MODEL, SCORE, DATA, THETA, runs=6000, under_noise=0.25)
    assert a.result.violated is not None and a.result.mu_lower > a.mu_claimed, a.line()
