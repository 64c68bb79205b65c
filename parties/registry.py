"""The analyses a party can run, by name: one table, built here, with no import side effects.

``get_analysis(name, params)`` is called only for names the party's ``[allow] models`` lists (the daemon
checks the allowlist first); it makes the session's instance, which parses the session's ``model_params``
once into its typed plan. A name is either a key of :data:`ANALYSES` — ``abcdp-rff`` (federated ABCDP,
``parties.abcdp``) and every built-in model of ``mechanisms.models`` (``parties.models_bridge``) — or a
model plug-in
``"package.module:ClassName"``, imported when a session first uses it. Adding an analysis is one entry here
plus its module.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mechanisms.models.base import BUILTIN
from parties.abcdp import ANALYSIS as ABCDP_ANALYSIS
from parties.abcdp import AbcdpRff
from parties.analyses import Analysis, AnalysisError
from parties.models_bridge import ModelAnalysis

ANALYSES: dict[str, Callable[[dict[str, Any]], Analysis]] = {
    ABCDP_ANALYSIS: AbcdpRff,
    **{name: functools.partial(ModelAnalysis.of, name, ref) for name, ref in BUILTIN.items()},
}


def model_ref(name: str) -> str | None:
    """The model the analysis ``name`` runs (a built-in's name or a plug-in's ``package.module:ClassName``;
    None for an analysis that is not a model's); AnalysisError if there is no such analysis."""
    if name in BUILTIN:
        return BUILTIN[name]
    if name in ANALYSES:
        return None
    if ":" in name:
        return name
    raise AnalysisError(
        f"unknown analysis {name!r}; known: {sorted(ANALYSES)} or a model plug-in 'package.module:ClassName'"
    )


def get_analysis(name: str, params: dict[str, Any]) -> Analysis:
    """A fresh instance (one per session) of the analysis ``name`` with the session's ``model_params``
    parsed into its plan; AnalysisError if there is no such analysis or the parameters are refused."""
    ref = model_ref(name)
    if name in ANALYSES:
        return ANALYSES[name](params)
    assert ref is not None  # a model plug-in "package.module:ClassName" (its import is checked here)
    return ModelAnalysis.of(name, ref, params)


def known_analyses() -> list[str]:
    return sorted(ANALYSES)
