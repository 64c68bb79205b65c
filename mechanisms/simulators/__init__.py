"""ABC simulators used by the ABCDP reproductions: public models, priors and summaries (no private data).

Plugins shared by parties and simulations; pure (numpy only, no I/O), randomness from the caller's
generator. Module map in README.md.
"""

from mechanisms.simulators.covid import CovidCubicModel
from mechanisms.simulators.toy import ToyMixtureModel
from mechanisms.simulators.tuberculosis import (
    DISTANCE_WEIGHTS,
    PARAM_NAMES,
    SUMMARY_NAMES,
    TuberculosisModel,
    observed_summary,
    tb_distance,
)

__all__ = [
    "DISTANCE_WEIGHTS",
    "PARAM_NAMES",
    "SUMMARY_NAMES",
    "CovidCubicModel",
    "ToyMixtureModel",
    "TuberculosisModel",
    "observed_summary",
    "tb_distance",
]
