"""c-sample ABCDP: rejection ABC privatised with the sparse vector technique (SVT).

Implements Algorithm 1 of Park, Vinaroz, Jitkrittum, "ABCDP: Approximate Bayesian Computation with
Differential Privacy", Entropy 23 (2021) 961. A candidate θ_t (drawn from the prior, public) with
distance ρ_t = ρ(Y*, Y_t) to the private data Y* is accepted iff

    ρ_t + ν_t ≤ ε_abc + m,      ν_t ~ Lap(2b),  m ~ Lap(b)

and the run halts after exactly c accepts (no decision is ever made, let alone revealed, after the c-th
accept). With RESAMPLE the threshold noise m is redrawn after every accept. b comes from the target
ε_total (``accounting.svt_laplace_scale``); ε_total = inf means no noise (plain rejection ABC with a stop
after c accepts). A Gaussian-noise variant (N(0, σ₁²) threshold, N(0, σ₂²) distances, RESAMPLE only) is
an option.

Structure (for reuse by the federated implementation, which draws its noise as secret shares):

* :func:`svt_step` is the pure per-candidate step: (config, state, ρ_t, ν_t, fresh threshold noise) ->
  (new state, accept bit). It never draws noise and refuses to run after the halt.
* :func:`svt_batch` is the vectorised batch driver with the same semantics; given the same noise draws it
  makes the same decisions as a loop of :func:`svt_step` (tested).
* :func:`svt_decide` is the comparison itself; :func:`svt_decide_squared` is the square-root-free form
  t = ε_abc + m − ν ≥ 0 ∧ ρ² ≤ t² used on secret shares.
* :func:`c_sample_abcdp` runs the whole sampler: it asks a caller-supplied ``propose(n)`` for batches of
  (θ, ρ) and draws the noise from a caller-supplied generator.

Privacy assumptions: ρ must have replace-one sensitivity ``config.sensitivity`` (see ``distances``), the
candidates must not depend on the private data, and the noise generator must be secret (see ``noise``:
for real runs a generator seeded from a CSPRNG, never the public experiment seed; the proposal's
generator is a different, public one). Only the accept bits of evaluated candidates (equivalently the
accepted θ's and how many candidates were looked at) are released; noisy distances and thresholds are
not. The guarantee is reported as an :class:`~mechanisms.abcdp.events.AbcdpPrivacyEvent`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp import accounting, events
from mechanisms.abcdp import noise as noise_lib

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
NoiseKind = Literal["laplace", "gaussian"]

#: ``propose(n) -> (thetas of shape (n, d), distances of shape (n,))``; candidates must be data-independent.
Proposer = Callable[[int], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]


@dataclass(frozen=True)
class SVTConfig:
    """Public parameters of one c-sample ABCDP run.

    Attributes:
        eps_abc: ABC threshold ε_abc.
        c: number of accepts after which the run halts.
        resample: redraw the threshold noise after every accept (RESAMPLE).
        sensitivity: Δ_ρ, replace-one sensitivity of the distance.
        threshold_scale: b (Laplace) or σ₁ (Gaussian); 0 means no noise.
        distance_scale: 2b (Laplace) or σ₂ (Gaussian); 0 means no noise.
        noise: "laplace" or "gaussian".
        delta: δ of the guarantee (0 for Laplace).
        max_candidates: the public cap on candidates (needed by the Gaussian accounting; optional otherwise).
    """

    eps_abc: float
    c: int
    resample: bool
    sensitivity: float
    threshold_scale: float
    distance_scale: float
    noise: NoiseKind = "laplace"
    delta: float = 0.0
    max_candidates: int | None = None

    def __post_init__(self) -> None:
        if int(self.c) != self.c or self.c < 1:
            raise ValueError(f"c must be a positive integer, got {self.c}")
        if not math.isfinite(self.eps_abc):
            raise ValueError(f"eps_abc must be finite, got {self.eps_abc}")
        if not (self.sensitivity > 0):
            raise ValueError(f"sensitivity must be > 0, got {self.sensitivity}")
        if self.threshold_scale < 0 or self.distance_scale < 0:
            raise ValueError("noise scales must be >= 0")
        if (self.threshold_scale == 0.0) != (self.distance_scale == 0.0):
            raise ValueError("either both noise scales are 0 (non-private) or neither is")
        if self.noise not in ("laplace", "gaussian"):
            raise ValueError(f"noise must be 'laplace' or 'gaussian', got {self.noise!r}")
        if self.noise == "gaussian" and self.is_private:
            if not self.resample:
                raise ValueError(
                    "Gaussian SVT is accounted only with resample=True (c composed Gaussian AboveThreshold "
                    "runs, Zhu & Wang 2020 Thm 8); use Laplace noise for a single threshold draw"
                )
            if self.max_candidates is None or self.max_candidates < 1:
                raise ValueError("Gaussian SVT accounting needs max_candidates (the public candidate cap)")
            if not 0.0 < self.delta < 1.0:
                raise ValueError(f"Gaussian SVT needs delta in (0, 1), got {self.delta}")

    @classmethod
    def laplace(
        cls, eps_total: float, sensitivity: float, c: int, eps_abc: float, resample: bool,
        max_candidates: int | None = None,
    ) -> SVTConfig:
        """Algorithm 1 with b from ε_total: b = (c+1)Δ/ε_total, or 2cΔ/ε_total with RESAMPLE."""
        b = accounting.svt_laplace_scale(eps_total, sensitivity, c, resample)
        return cls(eps_abc=eps_abc, c=c, resample=resample, sensitivity=sensitivity, threshold_scale=b,
                   distance_scale=2.0 * b, noise="laplace", max_candidates=max_candidates)

    @classmethod
    def gaussian(
        cls, eps_total: float, delta: float, sensitivity: float, c: int, eps_abc: float, max_candidates: int,
        distance_ratio: float = 2.0,
    ) -> SVTConfig:
        """Gaussian SVT with RESAMPLE; σ₁ by bisection so that the run is (ε_total, δ)-DP, σ₂ = ratio·σ₁."""
        s = accounting.svt_gaussian_scale(eps_total, delta, sensitivity, c, max_candidates, distance_ratio)
        return cls(eps_abc=eps_abc, c=c, resample=True, sensitivity=sensitivity, threshold_scale=s,
                   distance_scale=distance_ratio * s, noise="gaussian", delta=delta,
                   max_candidates=max_candidates)

    @property
    def is_private(self) -> bool:
        return self.threshold_scale > 0.0

    def eps_total(self) -> float:
        """ε of a whole run (worst case over the data; independent of how many accepts happened)."""
        if not self.is_private:
            return math.inf
        if self.noise == "laplace":
            if not math.isclose(self.distance_scale, 2.0 * self.threshold_scale, rel_tol=1e-12):
                raise ValueError("the Laplace SVT bound needs distance_scale == 2 * threshold_scale")
            return accounting.svt_laplace_eps(self.threshold_scale, self.sensitivity, self.c, self.resample)
        assert self.max_candidates is not None
        return accounting.svt_gaussian_eps(
            self.threshold_scale, self.distance_scale, self.sensitivity, self.c, self.max_candidates,
            self.delta,
        )

    def privacy_event(self, n_evaluated: int = 0, n_accepted: int = 0) -> events.AbcdpPrivacyEvent:
        """The run's :class:`AbcdpPrivacyEvent` (ε is the worst case; the counts are for the audit log)."""
        name = events.SVT_LAPLACE if self.noise == "laplace" else events.SVT_GAUSSIAN
        return events.AbcdpPrivacyEvent(
            name=name,
            eps=self.eps_total(),
            delta=self.delta if self.is_private else 0.0,
            params={
                "c": self.c, "resample": self.resample, "eps_abc": self.eps_abc,
                "sensitivity": self.sensitivity, "threshold_scale": self.threshold_scale,
                "distance_scale": self.distance_scale, "max_candidates": self.max_candidates,
                "n_evaluated": n_evaluated, "n_accepted": n_accepted,
            },
        )


@dataclass(frozen=True, repr=False)
class SVTState:
    """What carries from one candidate to the next: the noisy threshold and the public counters.

    ``noisy_threshold`` is secret (it contains the threshold noise): never release or log a state; only
    the counters and the decisions are public.
    """

    noisy_threshold: float
    n_accepted: int = 0
    n_evaluated: int = 0
    halted: bool = False

    def __repr__(self) -> str:
        return f"SVTState(n_accepted={self.n_accepted}, n_evaluated={self.n_evaluated}, halted={self.halted})"


@dataclass(frozen=True)
class SVTNoise:
    """Noise for a batch of n candidates: ν_t, and the threshold noise used if candidate t is accepted
    under RESAMPLE (drawn for every candidate so that batch and step consume identical draws)."""

    distance_noise: FloatArray = field(repr=False)  # secret: kept out of reprs and logs
    resample_noise: FloatArray = field(repr=False)

    def __post_init__(self) -> None:
        if self.distance_noise.shape != self.resample_noise.shape or self.distance_noise.ndim != 1:
            raise ValueError("distance_noise and resample_noise must be 1-d arrays of equal length")


# -- noise (the only place the generator is touched) ---------------------------------------------


def draw_threshold_noise(config: SVTConfig, rng: noise_lib.NoiseRng) -> float:
    """One draw of m (Lap(b) or N(0, σ₁²))."""
    return float(noise_lib.draw(rng, config.noise, config.threshold_scale, 1)[0])


def draw_batch_noise(config: SVTConfig, rng: noise_lib.NoiseRng, n: int) -> SVTNoise:
    """ν for n candidates, then (only with RESAMPLE) n candidate threshold redraws."""
    nu = noise_lib.draw(rng, config.noise, config.distance_scale, n)
    m = noise_lib.draw(rng, config.noise, config.threshold_scale, n) if config.resample else np.zeros(n)
    return SVTNoise(distance_noise=nu, resample_noise=m)


# -- the step function and the batch driver ------------------------------------------------------


def svt_init(config: SVTConfig, threshold_noise: float) -> SVTState:
    """Initial state: noisy threshold ε_abc + m."""
    return SVTState(noisy_threshold=config.eps_abc + threshold_noise)


def svt_decide(distance: float, distance_noise: float, noisy_threshold: float) -> bool:
    """The SVT comparison ρ + ν ≤ ε_abc + m."""
    return bool(distance + distance_noise <= noisy_threshold)


def svt_decide_squared(distance_squared: float, t: float) -> bool:
    """Square-root-free form for ρ ≥ 0: with t = ε_abc + m − ν, accept iff t ≥ 0 and ρ² ≤ t².

    Equal to :func:`svt_decide` in exact arithmetic (floating-point rounding may differ at ties).
    """
    return bool(t >= 0.0 and distance_squared <= t * t)


def svt_step(
    config: SVTConfig, state: SVTState, distance: float, distance_noise: float, resample_noise: float
) -> tuple[SVTState, bool]:
    """One candidate: decide, update counters, redraw threshold (RESAMPLE) from ``resample_noise`` on accept.

    Raises ValueError if the run has already halted (c accepts reached): no decision is made after that.
    """
    if state.halted:
        raise ValueError(f"SVT halted after {state.n_accepted} accepts; no further candidate may be decided")
    accept = svt_decide(distance, distance_noise, state.noisy_threshold)
    n_accepted = state.n_accepted + int(accept)
    threshold = state.noisy_threshold
    if accept and config.resample:
        threshold = config.eps_abc + resample_noise
    new_state = SVTState(
        noisy_threshold=threshold, n_accepted=n_accepted, n_evaluated=state.n_evaluated + 1,
        halted=n_accepted >= config.c,
    )
    return new_state, accept


def svt_batch(
    config: SVTConfig, state: SVTState, distances: FloatArray, batch_noise: SVTNoise
) -> tuple[SVTState, BoolArray]:
    """Vectorised :func:`svt_step` over a batch; stops at the c-th accept.

    Returns the new state and the decisions for the candidates actually evaluated (a prefix of the batch:
    shorter than the batch iff the run halted inside it).
    """
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or d.shape != batch_noise.distance_noise.shape:
        raise ValueError(
            f"distances must be 1-d and match the noise: {d.shape} vs {batch_noise.distance_noise.shape}"
        )
    if state.halted:
        raise ValueError(f"SVT halted after {state.n_accepted} accepts; no further candidate may be decided")
    noisy = d + batch_noise.distance_noise
    n = d.shape[0]
    decisions = np.zeros(n, dtype=bool)
    remaining = config.c - state.n_accepted
    threshold = state.noisy_threshold
    if not config.resample:
        accept = noisy <= threshold
        hits = np.flatnonzero(accept)
        if hits.size >= remaining:
            stop = int(hits[remaining - 1]) + 1
            accept = accept[:stop]
        decisions = accept
        n_acc = int(decisions.sum())
    else:
        pos = 0
        n_acc = 0
        stop = n
        while pos < n and n_acc < remaining:
            hit = np.flatnonzero(noisy[pos:] <= threshold)
            if hit.size == 0:
                break
            j = pos + int(hit[0])
            decisions[j] = True
            n_acc += 1
            threshold = config.eps_abc + float(batch_noise.resample_noise[j])
            pos = j + 1
            if n_acc == remaining:
                stop = pos
        decisions = decisions[:stop]
    new_state = SVTState(
        noisy_threshold=threshold,
        n_accepted=state.n_accepted + n_acc,
        n_evaluated=state.n_evaluated + int(decisions.shape[0]),
        halted=state.n_accepted + n_acc >= config.c,
    )
    return new_state, decisions


# -- the sampler ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ABCDPResult:
    """Outcome of one ABCDP run.

    Attributes:
        thetas: accepted parameters, shape (n_accepted, d) (weights are uniform).
        accepted_index: indices of the accepted candidates among those evaluated.
        decisions: the released accept bits, one per evaluated candidate.
        halted: True iff c accepts were reached (else the candidate budget ran out).
        event: the privacy cost of the run.
    """

    thetas: FloatArray
    accepted_index: npt.NDArray[np.int64]
    decisions: BoolArray
    halted: bool
    event: events.AbcdpPrivacyEvent

    @property
    def n_evaluated(self) -> int:
        return int(self.decisions.shape[0])

    @property
    def n_accepted(self) -> int:
        return int(self.accepted_index.shape[0])

    def posterior_mean(self) -> FloatArray:
        """Mean of the accepted θ's (NaNs if nothing was accepted)."""
        if self.n_accepted == 0:
            return np.full(self.thetas.shape[1], np.nan)
        return np.asarray(self.thetas.mean(axis=0), dtype=np.float64)


def _check_distances(distances: npt.NDArray[np.float64], n: int) -> FloatArray:
    d = np.asarray(distances, dtype=np.float64)
    if d.shape != (n,):
        raise ValueError(f"propose({n}) returned distances of shape {d.shape}; expected ({n},)")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError("distances must be finite and >= 0 (clip unbounded distances to a public bound)")
    return d


def run_svt_on_distances(
    distances: FloatArray, config: SVTConfig, noise_rng: noise_lib.NoiseRng, batch_size: int = 4096
) -> tuple[BoolArray, SVTState]:
    """SVT over a precomputed sequence of distances (in order), halting at c accepts.

    Useful when one set of simulations serves many privacy settings (the toy grid). Noise is drawn batch by
    batch exactly as :func:`c_sample_abcdp` would, so both give the same decisions for the same generator
    state and the same batch size.
    """
    d = np.asarray(distances, dtype=np.float64)
    _check_distances(d, d.shape[0] if d.ndim == 1 else -1)
    state = svt_init(config, draw_threshold_noise(config, noise_rng))
    out: list[BoolArray] = []
    pos = 0
    while pos < d.shape[0] and not state.halted:
        chunk = d[pos:pos + batch_size]
        state, dec = svt_batch(config, state, chunk, draw_batch_noise(config, noise_rng, chunk.shape[0]))
        out.append(dec)
        pos += chunk.shape[0]
    decisions = np.concatenate(out) if out else np.zeros(0, dtype=bool)
    return decisions, state


def c_sample_abcdp(
    propose: Proposer,
    config: SVTConfig,
    noise_rng: noise_lib.NoiseRng,
    max_candidates: int,
    batch_size: int = 1024,
) -> ABCDPResult:
    """Run c-sample ABCDP (Algorithm 1) until c accepts or ``max_candidates`` candidates.

    ``propose(n)`` returns n fresh candidates and their distances to the private data; it is called with
    batches of at most ``batch_size``. Candidates evaluated in a batch after the c-th accept are discarded
    unseen (their decisions are never made). ``noise_rng`` is the secret noise generator.
    """
    if max_candidates < 1 or batch_size < 1:
        raise ValueError("max_candidates and batch_size must be >= 1")
    if config.max_candidates is not None and max_candidates > config.max_candidates:
        raise ValueError(
            f"max_candidates={max_candidates} exceeds the cap {config.max_candidates} used in the accounting"
        )
    state = svt_init(config, draw_threshold_noise(config, noise_rng))
    accepted: list[FloatArray] = []
    decisions: list[BoolArray] = []
    while state.n_evaluated < max_candidates and not state.halted:
        n = min(batch_size, max_candidates - state.n_evaluated)
        thetas, raw = propose(n)
        thetas = np.asarray(thetas, dtype=np.float64)
        if thetas.ndim == 1:
            thetas = thetas[:, None]
        if thetas.shape[0] != n:
            raise ValueError(f"propose({n}) returned {thetas.shape[0]} candidates")
        dist = _check_distances(raw, n)
        state, dec = svt_batch(config, state, dist, draw_batch_noise(config, noise_rng, n))
        decisions.append(dec)
        accepted.append(thetas[: dec.shape[0]][dec])
    all_dec = np.concatenate(decisions) if decisions else np.zeros(0, dtype=bool)
    dim = accepted[0].shape[1] if accepted else 0
    thetas_acc = np.concatenate(accepted, axis=0) if accepted else np.zeros((0, dim))
    return ABCDPResult(
        thetas=thetas_acc,
        accepted_index=np.flatnonzero(all_dec).astype(np.int64),
        decisions=all_dec,
        halted=state.halted,
        event=config.privacy_event(n_evaluated=int(all_dec.shape[0]), n_accepted=int(all_dec.sum())),
    )
