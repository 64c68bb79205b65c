"""A converged plain posterior on the pooled records: the reference a confidential run is compared with.

Not the same kernel with the same seed (which inherits the confidential run's tuning and burn-in), but a
tuned exact sampler of its own: the posterior mode and curvature of the pooled (and, with a public
covariate region, clipped) records by numerical optimisation, then an independence Metropolis–Hastings
chain from N(mode, inflate² H⁻¹) with the plain Metropolis rule, run in blocks until its bulk and tail ESS
reach ``min_ess`` (and split R-hat <= 1.01), or ``max_iterations``. Public seeds only (no secret noise: it
is plain MH on data the simulation holds in one place). Its diagnostics go with it, so a reference that did
not converge is labelled as such.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import arviz as az
import numpy as np
import numpy.typing as npt

from mechanisms.models.base import F64, Data, Model
from mechanisms.samplers import BernoulliRule, GaussianProposal, IndependenceMH, LocalParties, PublicSeeds
from mechanisms.warmstart import exact_laplace


@dataclass(frozen=True)
class Reference:
    draws: F64  # (chains, draws, d)
    mode: F64
    cov: F64  # the inverse Hessian at the mode
    ess_bulk: float  # min over parameters
    ess_tail: float
    rhat: float  # max over parameters
    iterations: int
    min_ess: float = 0.0  # the ESS it was run to
    method: str = "plain independence MH on the pooled records from their Laplace approximation"
    stopped: str = ""  # why it ended before min_ess (a bound on its iterations or its time), if it did

    @property
    def converged(self) -> bool:
        """R-hat <= 1.01 and the bulk and tail ESS it was asked for."""
        return self.rhat <= 1.01 and min(self.ess_bulk, self.ess_tail) >= self.min_ess

    def label(self) -> str:
        state = "converged" if self.converged else f"NOT converged: target ESS {self.min_ess:.0f}, R-hat 1.01"
        return (
            f"{self.method}, {self.iterations} iterations x {self.draws.shape[0]} chains, min bulk ESS "
            f"{self.ess_bulk:.0f}, min tail ESS {self.ess_tail:.0f}, max R-hat {self.rhat:.4f} ({state}"
            + (f"; {self.stopped}" if self.stopped and not self.converged else "")
            + ")"
        )


def _diagnostics(draws: F64) -> tuple[float, float, float]:
    ds = az.convert_to_dataset(draws)
    bulk = float(np.min(az.ess(ds, method="bulk").to_array().values))
    tail = float(np.min(az.ess(ds, method="tail").to_array().values))
    rhat = float(np.max(az.rhat(ds).to_array().values))
    return bulk, tail, rhat


REFERENCE_MIN_ESS = 2000.0  # the reference's min bulk and tail ESS, at least ...
REFERENCE_ESS_RATIO = 4.0  # ... this many times the confidential run's


def run_ess(draws: F64) -> float:
    """The smallest bulk ESS over the parameters of draws (chains, draws, d); 0 when too short to say."""
    if draws.ndim != 3 or draws.shape[1] < 4:
        return 0.0
    ess = float(np.min(az.ess(az.convert_to_dataset(draws), method="bulk").to_array().values))
    return ess if np.isfinite(ess) else 0.0


def plain_reference(
    model: Model,
    datasets: Sequence[Data],
    seed: int,
    *,
    min_ess: float = 2000.0,
    chains: int = 16,
    block: int = 250,
    max_iterations: int | None = None,
    inflate: float = 1.3,
) -> Reference:
    """The converged plain posterior of the pooled records (checked and clipped as a registry would);
    ``max_iterations`` (default: enough for min_ess at 0.1 effective draws per draw, at least 20,000) stops
    a reference that does not get there, which its label then says."""
    if max_iterations is None:
        max_iterations = max(20_000, math.ceil(10.0 * min_ess / chains))
    checked = [model.check_data(d) for d in datasets]
    pooled = {k: np.concatenate([d[k] for d in checked]) for k in checked[0]}
    mode, cov = exact_laplace(model, pooled)
    seeds = PublicSeeds(seed)
    decide = LocalParties(model, [pooled], BernoulliRule(seeds.rng(0, party=98)))
    kernel = IndependenceMH(model, decide, GaussianProposal(mode, inflate**2 * cov))
    if not np.isfinite(model.log_prior(mode[None, :])[0]):
        raise ValueError(f"the pooled records' posterior mode {mode.tolist()} is outside the prior's support")
    start = GaussianProposal(mode, cov).sample(seeds.init_rng(), chains)
    start[~np.isfinite(model.log_prior(start))] = mode  # a bounded parameter (a probability): start inside
    state = kernel.init(start)
    blocks: list[npt.NDArray[np.float64]] = []
    it = 0
    while True:
        out = np.empty((block, chains, model.d))
        for k in range(block):
            state, _ = kernel.step(seeds.rng(10_000 + it), state)
            out[k] = state.theta
            it += 1
        blocks.append(out)
        draws = np.concatenate(blocks).transpose(1, 0, 2)
        bulk, tail, rhat = _diagnostics(draws)
        if (min(bulk, tail) >= min_ess and rhat <= 1.01) or it >= max_iterations:
            return Reference(np.ascontiguousarray(draws), mode, cov, bulk, tail, rhat, it, min_ess)


def blocked_reference(
    model: Model,
    datasets: Sequence[Data],
    seed: int,
    *,
    min_ess: float = 2000.0,
    chains: int = 8,
    warmup: int = 750,
    block: int = 100,
    max_iterations: int = 20_000,
    max_seconds: float = 240.0,
) -> Reference:
    """The plain posterior of a model with a registry random intercept by the blocked sampler itself in
    plain arithmetic (``mechanisms.samplers.blocked``: each registry's effect by exact local MH, the shared
    block by the plain Metropolis rule on the sum of the registries' terms; no noise, public seeds): the
    joint random walk a pooled fit would use is a funnel, and the Laplace approximation of the pooled
    records is a poor proposal for it. Warm-up ``warmup`` sweeps (the adaptation schedule of a run whose
    adapt_stop is ``warmup``: shorter warm-ups freeze a proposal fitted to chains not yet converged; measured
    on examples/registry-effects.toml, 250 and 500 sweeps left R-hat 4.5 and 1.9), then blocks of ``block``
    until the bulk and tail ESS reach ``min_ess`` with R-hat <= 1.01, or ``max_iterations`` sweeps, or
    ``max_seconds`` of sampling (warm-up included; checked after every block): a reference stopped by a bound
    says so in its label, and one stopped in its warm-up is refused (ValueError: the run then has no
    reference)."""
    import time

    from mechanisms.models.hierarchy import SharedModel
    from mechanisms.samplers.blocked import BlockedDecider, LocalBlockParties, SharedAuto, blocked_kernel
    from mechanisms.samplers.local import LocalSettings
    from mechanisms.samplers.mh import prior_proposal_cov

    seeds = PublicSeeds(seed)
    keys = [hashlib.sha256(b"confar/reference/%d/%d" % (seed, j)).digest() for j in range(len(datasets))]
    parties = LocalBlockParties(
        model, datasets, LocalSettings(adapt_until=warmup), keys, rng=seeds.rng(0, party=98)
    )
    shared = SharedModel(model)

    def make(sm: SharedModel, dec: BlockedDecider) -> SharedAuto:
        cov = prior_proposal_cov(sm)
        return SharedAuto(
            sm, dec, cov, stop=warmup, start=max(warmup // 5, 1), every=max(warmup // 20, 1),
            history_from=warmup // 10,
        )  # fmt: skip

    kernel = blocked_kernel(model, parties, make)
    state = kernel.init(shared.sample_prior(seeds.init_rng(), chains))
    t0 = time.perf_counter()
    for it in range(warmup):
        state, _ = kernel.step(seeds.rng(10_000 + it), state)
        if time.perf_counter() - t0 > max_seconds:
            n = sum(len(next(iter(d.values()))) for d in datasets)
            raise ValueError(
                f"the blocked reference did not finish its warm-up of {warmup} sweeps within "
                f"{max_seconds:g} s ({it + 1} sweeps of {chains} chains over {n} records)"
            )
    blocks: list[npt.NDArray[np.float64]] = []
    it, stopped = 0, ""
    while True:
        out = np.empty((block, chains, model.d))
        for k in range(block):
            state, _ = kernel.step(seeds.rng(10_000 + warmup + it), state)
            out[k] = shared.embed(state.theta, parties.z(state.theta))
            it += 1
        blocks.append(out)
        draws = np.concatenate(blocks).transpose(1, 0, 2)
        bulk, tail, rhat = _diagnostics(draws)
        if min(bulk, tail) >= min_ess and rhat <= 1.01:
            break
        if it >= max_iterations:
            stopped = f"stopped at {max_iterations} sweeps"
            break
        if time.perf_counter() - t0 > max_seconds:
            stopped = f"stopped after {max_seconds:g} s of sampling"
            break
    mean = draws.reshape(-1, model.d).mean(axis=0)
    cov = np.cov(draws.reshape(-1, model.d), rowvar=False)
    method = (
        f"plain blocked MH (each registry's effect by local MH, the shared block by the plain rule; warm-up "
        f"{warmup} sweeps)"
    )
    return Reference(np.ascontiguousarray(draws), mean, cov, bulk, tail, rhat, it, min_ess, method, stopped)
