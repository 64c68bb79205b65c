"""The analyses a party can run, by name: one table, built here, with no import side effects.

``get_analysis(name)`` is called only for names the party's ``[allow] models`` lists (the daemon checks the
allowlist first). A name is either a key of :data:`ANALYSES` — ``abcdp-rff`` (federated ABCDP,
``parties.abcdp``) and every built-in model of ``mechanisms.models`` (``parties.models_bridge``) — or a
model plug-in
``"package.module:ClassName"``, imported when a session first uses it. Adding an analysis is one entry here
plus its module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from mechanisms.models.base import BUILTIN
from parties.abcdp import ANALYSIS as ABCDP_ANALYSIS
from parties.abcdp import AbcdpRff
from parties.analyses import Analysis, AnalysisError
from parties.models_bridge import ModelAnalysis

ANALYSES: dict[str, Callable[[], Analysis]] = {
    ABCDP_ANALYSIS: AbcdpRff,
    **{name: functools.partial(ModelAnalysis, name, ref) for name, ref in BUILTIN.items()},
}


def get_analysis(name: str) -> Analysis:
    """A fresh instance (one per session) of the analysis ``name``; AnalysisError if there is none."""
    if name in ANALYSES:
        return ANALYSES[name]()
    if ":" in name:  # a model plug-in "package.module:ClassName" (its import is checked when first used)
        return ModelAnalysis(name, name)
    raise AnalysisError(
        f"unknown analysis {name!r}; known: {sorted(ANALYSES)} or a model plug-in 'package.module:ClassName'"
    )


def known_analyses() -> list[str]:
    return sorted(ANALYSES)
