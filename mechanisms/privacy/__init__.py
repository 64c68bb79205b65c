"""Privacy accounting for confar: f-DP toolkit, per-reveal-mode analysis, composition, party ledger.

Pure and network-free (no grpc, proto, parties, coordinator or simulations imports; no I/O; no
global randomness). Modules, in dependency order, are listed in README.md.
"""

from . import penalty, reveal_sum
from .additive import ExGaussianNoise, GaussianNoise, LaplaceNoise, additive_noise_delta
from .composition import Composition, compose_events, compose_gdp, composed_delta, composed_eps
from .conversions import (
    delta_from_tradeoff,
    est_epsdelta,
    est_gdp,
    gdp_delta,
    gdp_eps,
    gdp_mu,
    pure_dp_to_gdp,
)
from .events import (
    AmplifiedGaussianEvent,
    EpsDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    ProfileEvent,
    RenyiEvent,
    event_from_dict,
    register_event_type,
    scaled,
)
from .ledger import (
    BudgetExceededError,
    EpsDeltaBudget,
    GDPBudget,
    PrivacyLedger,
    RDPBudget,
    SpendReport,
    UnsupportedEventError,
)
from .penalty import *  # noqa: F403  (its __all__, added to this one below)
from .plotting import plot_tradeoffs
from .profile import PrivacyProfile
from .renyi import ORDERS, BitRdpTable, bit_rdp, bit_rdp_table, budget_order, rdp_eps
from .reveal_blinded import blinded_k1_survival, blinded_pair_delta, blinded_reveal_profile
from .reveal_sign import (
    AcceptanceModel,
    LazyAcceptance,
    MetropolisAcceptance,
    PenaltyAcceptance,
    SignPrivacy,
    bernoulli_delta,
    sign_reveal_privacy,
    sign_step_profile,
)
from .reveal_sum import *  # noqa: F403  (likewise)
from .threat import (
    REVEAL_PRIVACY,
    SHAMIR_MODES,
    RevealPrivacy,
    RevealView,
    ThreatModel,
    coalition_view,
    reveal_privacy,
)
from .tradeoff import (
    CurveTradeOff,
    EnvelopeTradeOff,
    EpsDeltaTradeOff,
    GaussianTradeOff,
    LaplaceTradeOff,
    PointCloudTradeOff,
    TradeOff,
    lower_convex_hull,
    validate_tradeoff,
)

__all__ = [
    "ORDERS",
    "REVEAL_PRIVACY",
    "SHAMIR_MODES",
    "AcceptanceModel",
    "AmplifiedGaussianEvent",
    "BitRdpTable",
    "BudgetExceededError",
    "Composition",
    "CurveTradeOff",
    "EnvelopeTradeOff",
    "EpsDeltaBudget",
    "EpsDeltaEvent",
    "EpsDeltaTradeOff",
    "ExGaussianNoise",
    "GDPBudget",
    "GaussianEvent",
    "GaussianNoise",
    "GaussianTradeOff",
    "LaplaceEvent",
    "LaplaceNoise",
    "LaplaceTradeOff",
    "LazyAcceptance",
    "MetropolisAcceptance",
    "PenaltyAcceptance",
    "PointCloudTradeOff",
    "PrivacyEvent",
    "PrivacyLedger",
    "PrivacyProfile",
    "ProfileEvent",
    "RDPBudget",
    "RenyiEvent",
    "RevealPrivacy",
    "RevealView",
    "SignPrivacy",
    "SpendReport",
    "ThreatModel",
    "TradeOff",
    "UnsupportedEventError",
    "additive_noise_delta",
    "bernoulli_delta",
    "bit_rdp",
    "bit_rdp_table",
    "blinded_k1_survival",
    "blinded_pair_delta",
    "blinded_reveal_profile",
    "budget_order",
    "coalition_view",
    "compose_events",
    "compose_gdp",
    "composed_delta",
    "composed_eps",
    "delta_from_tradeoff",
    "est_epsdelta",
    "est_gdp",
    "event_from_dict",
    "gdp_delta",
    "gdp_eps",
    "gdp_mu",
    "lower_convex_hull",
    "plot_tradeoffs",
    "pure_dp_to_gdp",
    "rdp_eps",
    "register_event_type",
    "reveal_privacy",
    "scaled",
    "sign_reveal_privacy",
    "sign_step_profile",
    "validate_tradeoff",
]
__all__ += penalty.__all__  # the penalty_* analyses, listed once in their module
__all__ += reveal_sum.__all__  # the sum_reveal_* analyses, likewise
