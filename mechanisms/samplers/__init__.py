"""Confidential accept-reject samplers (see README.md for the modules in dependency order)."""

from mechanisms.samplers.decision import (
    BernoulliRule,
    ConfidentialRule,
    Decider,
    HssDecide,
    LazyPlaintextDecide,
    LocalParties,
    plaintext_decide,
)
from mechanisms.samplers.diagnostics import ess, ess_batch_means, mcse_mean, split_rhat
from mechanisms.samplers.mh import (
    AdaptiveMH,
    AdaptiveState,
    GaussianProposal,
    IndependenceMH,
    MHInfo,
    MHState,
    RandomWalkMH,
    RefitIndependenceMH,
    RefitState,
    Trace,
    run_kernel,
)
from mechanisms.samplers.penalty import penalty_acceptance, penalty_correction
from mechanisms.samplers.rejection import RejectionResult, RejectionSampler
from mechanisms.samplers.requests import DecisionRequest, Lazy, Penalty
from mechanisms.samplers.seeds import PublicSeeds, public_rng
from mechanisms.samplers.terms import Terms, log_ratio, party_noise, party_terms

__all__ = [
    "AdaptiveMH",
    "AdaptiveState",
    "BernoulliRule",
    "ConfidentialRule",
    "Decider",
    "DecisionRequest",
    "GaussianProposal",
    "HssDecide",
    "IndependenceMH",
    "Lazy",
    "LazyPlaintextDecide",
    "LocalParties",
    "MHInfo",
    "MHState",
    "Penalty",
    "PublicSeeds",
    "RandomWalkMH",
    "RefitIndependenceMH",
    "RefitState",
    "RejectionResult",
    "RejectionSampler",
    "Terms",
    "Trace",
    "ess",
    "ess_batch_means",
    "log_ratio",
    "mcse_mean",
    "party_noise",
    "party_terms",
    "penalty_acceptance",
    "penalty_correction",
    "plaintext_decide",
    "public_rng",
    "run_kernel",
    "split_rhat",
]
