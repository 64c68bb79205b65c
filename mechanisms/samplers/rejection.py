"""Confidential rejection sampling: proposals in batches, each party with its own private bound.

Target π(θ) Π_j p(X_j | θ). Proposals θ* ~ q (the prior by default); accept with probability

    [π(θ*) / (M_q q(θ*))] · Π_j [p(X_j | θ*) / M_j],

where M_q ≥ sup π/q is public (``log_bound_q``; 1 for the prior) and M_j ≥ sup_θ p(X_j | θ) is party j's own
bound (its maximum likelihood): its term ℓ_j = log p(X_j | θ*) − log M_j ≤ 0, and M_j never leaves the party.
With the confidential identity, accept ⟺ public + Σ_j (ℓ_j + V_j) ≥ 0 (DESIGN.md §1). Accepted θ* are
exact, independent posterior draws. The overall acceptance rate is Z / (M_q Π_j M_j), Z the evidence.

Runs batches of ``batch_size`` proposals until ``n_accept`` draws are accepted (keeping the first
``n_accept`` in proposal order) or ``max_proposals`` proposals have been made. One batch is
:meth:`RejectionSampler.step`: :meth:`RejectionSampler.run` loops over it in memory, and ``confar run``'s
``coordinator.drivers.RejectionDriver`` calls it once per checkpointed batch, so both make the same requests
from the same public seed.

``max_sensitivity`` (optional, public): proposals whose per-record log-likelihood range
``model.record_loglik_range(θ*)`` exceeds it are rejected without asking the parties. The accepted draws are
then exact draws from the posterior under the prior restricted to A = {θ : range(θ) ≤ max_sensitivity}
(a public truncation of the prior, which the registries' privacy accounting needs: see
``parties/models_bridge.py``); choose it so A holds essentially all the posterior mass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mechanisms.models.base import Model
from mechanisms.samplers.decision import Decider
from mechanisms.samplers.mh import Proposal
from mechanisms.samplers.requests import DecisionRequest, within_cap
from mechanisms.samplers.seeds import PublicSeeds

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RejectionResult:
    samples: F64  # (accepted kept, d)
    proposed: int
    accepted: int  # accepts among all proposals made (may exceed len(samples) in the last batch)
    batches: int
    stopped: str  # "accepts" or "budget"

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")


@dataclass(frozen=True)
class RejectionStep:
    """One batch of proposals, decided."""

    kept: F64  # the accepted θ* in proposal order, at most the ``want`` asked for: (≤ want, d)
    proposed: int
    asked: int  # proposals the parties decided (the rest were rejected publicly: outside the support or A)
    accepted: int  # accepts in the batch (may exceed len(kept))


@dataclass
class RejectionSampler:
    model: Model
    decide: Decider
    batch_size: int = 1000
    proposal: Proposal | None = None
    log_bound_q: float = 0.0
    max_sensitivity: float | None = None

    def capped(self, ts: F64, public: F64) -> F64:
        """The public terms with proposals outside A = {range(θ) <= max_sensitivity} set to −inf."""
        if self.max_sensitivity is None:
            return public
        rng_ = self.model.record_loglik_range(ts)
        if rng_ is None:
            raise ValueError(f"model {self.model.name} has no record_loglik_range for max_sensitivity")
        return np.where(within_cap(np.asarray(rng_), self.max_sensitivity), public, -np.inf)

    def propose(self, rng: np.random.Generator, n: int) -> tuple[F64, F64]:
        """(θ*, public term) for a batch."""
        if self.proposal is None:
            ts = self.model.sample_prior(rng, n)
            public = np.where(np.isfinite(self.model.log_prior(ts)), 0.0, -np.inf)
            return ts, public
        ts = self.proposal.sample(rng, n)
        public = self.model.log_prior(ts) - self.proposal.logpdf(ts) - self.log_bound_q
        if (public > 1e-9).any():
            raise ValueError(
                f"log π(θ*) − log q(θ*) exceeds log_bound_q = {self.log_bound_q} by up to "
                f"{float(public.max()):.3g}: the public bound M_q is wrong"
            )
        return ts, public

    def step(self, rng: np.random.Generator, n: int, want: int) -> RejectionStep:
        """Propose ``n`` θ* from ``rng``, reject those outside the support or A publicly, ask ``decide``
        about the rest; keep the first ``want`` accepted."""
        ts, public = self.propose(rng, n)
        public = self.capped(ts, public)  # outside A = {range <= max_sensitivity}: rejected publicly
        acc = np.zeros(n, dtype=bool)
        ok = np.flatnonzero(np.isfinite(public))
        if ok.size:
            acc[ok] = self.decide(DecisionRequest(kind="rejection", theta_star=ts[ok], public=public[ok]))
        return RejectionStep(ts[acc][:want], n, int(ok.size), int(acc.sum()))

    def run(self, seeds: PublicSeeds, n_accept: int, max_proposals: int) -> RejectionResult:
        kept: list[F64] = []
        n_kept = proposed = accepted = batches = 0
        while n_kept < n_accept and proposed < max_proposals:
            n = min(self.batch_size, max_proposals - proposed)
            st = self.step(seeds.rng(batches), n, n_accept - n_kept)
            proposed += st.proposed
            batches += 1
            accepted += st.accepted
            kept.append(st.kept)
            n_kept += st.kept.shape[0]
        samples = np.concatenate(kept) if kept else np.zeros((0, self.model.d))
        return RejectionResult(
            samples, proposed, accepted, batches, "accepts" if n_kept >= n_accept else "budget"
        )
