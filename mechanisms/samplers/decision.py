"""Deciding a batch: the seam between the kernels and the way decisions are made.

A kernel builds a :class:`~mechanisms.samplers.requests.DecisionRequest` (public) and hands it to a
*decider*, any callable ``decider(request) -> accept bits``. The kernel never knows how the bits were made:

* :class:`LocalParties` keeps m parties' records in this process (simulations, tests) and applies a
  *decision rule*:

  - :class:`BernoulliRule` — the plaintext reference: accept iff log U < public + Σ_j ℓ_j (+ the penalty
    noise N(0, Σ_j σ_j²)), U from a numpy generator. Not private: it sees every term.
  - :class:`ConfidentialRule` — the confidential accept-reject (Aslett et al. 2025): every party computes
    x_j = ℓ_j (+ λ_j) + V_j with its own CSPRNG (:func:`~mechanisms.samplers.terms.party_terms`), and a
    supplied ``decide(terms_per_party, public, blind) -> accept bits`` decides S = public + Σ_j x_j ≥ 0.
    ``decide`` is :func:`plaintext_decide` (float sum in the clear: the same chain, for reference) or
    :class:`HssDecide` (the secret-sharing engine in memory, reveal mode sum / blinded / sign).

* a networked decider (``simulations/``) sends the request to the party daemons, which run the same
  :func:`~mechanisms.samplers.terms.party_terms` and the same protocols over gRPC.

Every rule gives the same chain law: with Σ_j V_j ~ Exp(1) = −log U, S ≥ 0 ⟺ U ≤ r.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hss.lazy_coin import LazyCoin
from hss.modes import REVEAL, SessionMode, TermsBatch, reveal_mode
from hss.randomness import SecureRandom
from hss.runtime import run_in_memory
from hss.session import PartyContext, SessionParams, key_setup
from mechanisms.models.base import Data, Model
from mechanisms.samplers.requests import DecisionRequest
from mechanisms.samplers.terms import log_ratio, party_terms

F64 = npt.NDArray[np.float64]
Bits = npt.NDArray[np.bool_]
Decider = Callable[[DecisionRequest], Bits]


class DecideFn(Protocol):
    """Decide S = public + Σ_j terms_j ≥ 0 for a batch, without the caller knowing how."""

    def __call__(self, terms: Sequence[F64], public: F64, blind: Sequence[F64] | None = None) -> Bits: ...


def plaintext_decide(terms: Sequence[F64], public: F64, blind: Sequence[F64] | None = None) -> Bits:
    """The sum in the clear (reference; identical bits to the secret-shared sum up to fixed-point ties)."""
    return np.asarray(public + np.sum(np.stack(terms), axis=0) >= 0.0)


@dataclass
class LazyPlaintextDecide:
    """The sum in the clear AND a coin with P(1) = ``gamma`` from a numpy generator: the reference for lazy
    acceptance (not private; the confidential coin is made inside the sign protocol)."""

    gamma: float
    rng: np.random.Generator

    def __call__(self, terms: Sequence[F64], public: F64, blind: Sequence[F64] | None = None) -> Bits:
        return plaintext_decide(terms, public) & (self.rng.random(public.shape[0]) < self.gamma)


@dataclass
class HssDecide:
    """The secret-sharing engine run in memory: one protocol run per batch, counting rounds and bytes.
    With ``lazy`` (sign mode) the revealed bit is [S >= 0] AND the protocol's secret coin."""

    mode: str
    params: SessionParams
    ctxs: dict[int, PartyContext]
    rngs: dict[int, SecureRandom]  # each party's protocol CSPRNG (share polynomials, blinding terms)
    lazy: LazyCoin | None = None
    step: int = 0
    rounds: int = 0
    messages: int = 0
    nbytes: int = 0
    last_revealed: F64 | None = None
    protocol: SessionMode = field(init=False, repr=False)  # the mode, resolved once (semi-honest)

    def __post_init__(self) -> None:
        self.protocol = reveal_mode(self.mode).under("semi-honest", lazy=self.lazy is not None)

    @classmethod
    def setup(
        cls,
        mode: str,
        m: int,
        rngs: dict[int, SecureRandom],
        session_id: bytes | None = None,
        lazy: LazyCoin | None = None,
    ) -> HssDecide:
        sid = session_id or hashlib.sha256(b"confar/in-memory-session").digest()[:16]
        params = SessionParams(m=m, t=(m - 1) // 2, session_id=sid)
        reveal_mode(mode).check_supported(params)
        keys, _ = run_in_memory({p: key_setup(params, p, rngs[p]) for p in range(1, m + 1)})
        return cls(mode, params, {p: PartyContext(params, keys[p]) for p in keys}, rngs, lazy)

    def __call__(self, terms: Sequence[F64], public: F64, blind: Sequence[F64] | None = None) -> Bits:
        m = self.params.m
        if len(terms) != m:
            raise ValueError(f"expected terms from {m} parties, got {len(terms)}")
        self.step += 1
        machines = {
            p: self.protocol.machine(
                self.ctxs[p],
                TermsBatch(
                    terms[p - 1],
                    public,
                    self.step,
                    self.rngs[p],
                    blind=None if blind is None else blind[p - 1],
                    lazy=self.lazy,
                ),
            )
            for p in range(1, m + 1)
        }
        _, tr = run_in_memory(machines)
        self.rounds += tr.rounds
        self.messages += tr.messages
        self.nbytes += tr.bytes
        out = self.protocol.decode(self.params, tr.to_receiver[-1], len(public), self.step)
        self.last_revealed = out.revealed
        return out.accept


class DecisionRule(Protocol):
    def __call__(self, parties: LocalParties, request: DecisionRequest) -> Bits: ...


@dataclass
class LocalParties:
    """m parties' records in this process: a decider for simulations and tests."""

    model: Model
    datasets: Sequence[Data]
    rule: DecisionRule
    _log_bounds: list[float] | None = field(default=None, repr=False)
    calls: int = 0
    max_range: float | None = None  # rejection: each party's bound over {θ : range(θ) <= max_range} only

    @property
    def m(self) -> int:
        return len(self.datasets)

    def log_bounds(self) -> list[float]:
        """Each party's private rejection bound log M_j (computed by that party from its own records)."""
        if self._log_bounds is None:
            if self.max_range is None:
                plain = [self.model.max_log_likelihood(d) for d in self.datasets]
                if any(b is None for b in plain):
                    raise ValueError(f"model {self.model.name} has no max_log_likelihood (rejection bound)")
                self._log_bounds = [float(b) for b in plain if b is not None]
            else:
                within = [self.model.max_log_likelihood_within(d, self.max_range) for d in self.datasets]
                if any(b is None for b in within):
                    raise ValueError(f"model {self.model.name} has no max_log_likelihood_within")
                self._log_bounds = [float(b) for b in within if b is not None]
        return self._log_bounds

    def log_bound(self, j: int, request: DecisionRequest) -> float | None:
        return self.log_bounds()[j] if request.rejection else None

    def __call__(self, request: DecisionRequest) -> Bits:
        self.calls += 1
        return self.rule(self, request)


@dataclass
class BernoulliRule:
    """Plaintext reference: accept iff log U < public + Σ_j ℓ_j + N(0, m σ²) (penalty)."""

    rng: np.random.Generator

    def __call__(self, parties: LocalParties, request: DecisionRequest) -> Bits:
        total = request.public.copy()
        for j, data in enumerate(parties.datasets):
            total = total + log_ratio(parties.model, data, request, parties.log_bound(j, request))[0]
        if request.penalty is not None:
            assert request.theta is not None
            sigma = request.penalty.sigma(parties.model, request.theta, request.theta_star)
            total = total + np.sqrt(parties.m) * sigma * self.rng.standard_normal(request.n)
        return np.asarray(np.log(self.rng.random(request.n)) < total)


@dataclass
class ConfidentialRule:
    """Each party adds its own secret noise to its own term; ``decide`` sees only the noisy terms."""

    decide: DecideFn
    noise_rngs: Sequence[SecureRandom]  # party j's noise CSPRNG (never a public seed)
    mode: str = "sign"
    clipped_records: int = 0

    def __call__(self, parties: LocalParties, request: DecisionRequest) -> Bits:
        if len(self.noise_rngs) != parties.m:
            raise ValueError(f"need one noise generator per party ({parties.m}), got {len(self.noise_rngs)}")
        terms = [
            party_terms(
                parties.model,
                data,
                request,
                parties.m,
                self.noise_rngs[j],
                self.mode,
                parties.log_bound(j, request),
            )
            for j, data in enumerate(parties.datasets)
        ]
        self.clipped_records += sum(t.clipped_records or 0 for t in terms)
        blinding = self.mode in REVEAL and REVEAL[self.mode].blinding
        blind = [t.blind for t in terms if t.blind is not None] if blinding else None
        return self.decide([t.values for t in terms], request.public, blind)
