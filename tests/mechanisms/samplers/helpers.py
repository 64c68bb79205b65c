"""Shared set-up for the sampler tests: Beta–Bernoulli split across parties, repeatable CSPRNG streams,
and statistical checks with principled tolerances (MCSE from ESS, KS on thinned draws)."""

from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from scipy import stats

from hss.modes import TERMS_MODES
from hss.randomness import SecureRandom
from mechanisms.models.beta_bernoulli import BetaBernoulli
from mechanisms.samplers import BernoulliRule, ConfidentialRule, HssDecide, ess, plaintext_decide
from mechanisms.samplers.decision import DecisionRule

F64 = npt.NDArray[np.float64]
Z = 4.0  # two-sided normal quantile: false-failure rate 6e-5 per check
KS_ALPHA = 1e-3


def fixed_rng(label: str) -> SecureRandom:
    """Repeatable CSPRNG streams for tests only (a real party uses SecureRandom.from_os())."""
    return SecureRandom.from_key(hashlib.sha256(label.encode()).digest())


def noise_rngs(m: int, label: str = "noise") -> list[SecureRandom]:
    return [fixed_rng(f"{label}/{j}") for j in range(1, m + 1)]


def hss_decide(mode: str, m: int, label: str = "proto") -> HssDecide:
    return HssDecide.setup(mode, m, {p: fixed_rng(f"{label}/{p}") for p in range(1, m + 1)})


#: every accept rule: the plaintext reference (BernoulliRule), the confidential rule deciding the noisy sum in
#: the clear (plaintext_decide) and through the secret-sharing engine in each reveal mode that takes terms
RULES = ["bernoulli", "plaintext-shares", *TERMS_MODES]


def rule_for(mode: str, label: str, m: int = 3) -> DecisionRule:
    """The accept rule ``mode`` (one of RULES) for m parties, its randomness keyed by ``label``."""
    if mode == "bernoulli":
        return BernoulliRule(np.random.default_rng(zlib.crc32(label.encode())))  # hash() varies per process
    if mode == "plaintext-shares":
        return ConfidentialRule(plaintext_decide, noise_rngs(m, label), "sign")
    return ConfidentialRule(hss_decide(mode, m, label), noise_rngs(m, label), mode)


MODEL = BetaBernoulli(a=2.0, b=3.0)


def beta_bernoulli_data(
    sizes: tuple[int, ...] = (20, 35, 15), p: float = 0.3, seed: int = 0
) -> list[dict[str, F64]]:
    rng = np.random.default_rng(seed)
    return [{"y": (rng.random(n) < p).astype(np.float64)} for n in sizes]


def exact_posterior(data: list[dict[str, F64]]) -> stats.rv_continuous:
    k = float(sum(d["y"].sum() for d in data))
    n = float(sum(d["y"].size for d in data))
    return MODEL.posterior(k, n)


@dataclass
class RecordingDecide:
    """plaintext_decide that also keeps every S (to allow fixed-point ties when comparing bits)."""

    sums: list[F64] = field(default_factory=list)

    def __call__(
        self, terms: list[F64], public: F64, blind: list[F64] | None = None
    ) -> npt.NDArray[np.bool_]:
        s = public + np.sum(np.stack(terms), axis=0)
        self.sums.append(s)
        return np.asarray(s >= 0.0)


def check_draws_match(draws: F64, dist: stats.rv_continuous, what: str) -> None:
    """Mean and variance within Z MCSE (from ESS), and KS on draws thinned to about ESS, pooled over chains.

    ``draws``: (steps, chains) of one parameter, after burn-in.
    """
    n, c = draws.shape
    mu, var = float(dist.mean()), float(dist.var())
    mean = float(draws.mean())
    mcse = float(draws.std(ddof=1) / math.sqrt(float(ess(draws)[0])))
    assert abs(mean - mu) <= Z * mcse, f"{what}: mean {mean:.5f} vs exact {mu:.5f} (MCSE {mcse:.5f})"
    sq = (draws - mu) ** 2
    mcse_var = float(sq.std(ddof=1) / math.sqrt(float(ess(sq)[0])))
    assert abs(float(sq.mean()) - var) <= Z * mcse_var, (
        f"{what}: variance {float(sq.mean()):.3g} vs exact {var:.3g} (MCSE {mcse_var:.3g})"
    )
    thin = max(1, math.ceil(2 * n * c / float(ess(draws)[0])))
    sample = draws[::thin].ravel()
    p = stats.kstest(sample, dist.cdf).pvalue
    assert p > KS_ALPHA, f"{what}: KS p = {p:.2g} on {sample.size} draws thinned by {thin}"
