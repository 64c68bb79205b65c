"""Analyses whose decision steps keep a registry-local block: the seam of blocked sampling (issue 36).

A decision analysis is stateless between steps, except one serving a blocked run
(``mechanisms.samplers.blocked``): it keeps this registry's own random effect across the steps of a session
and of a run, updates it at each step before computing its terms, and never sends it. Such an analysis
implements :class:`LocalBlockAnalysis`; the daemon's decision path (``parties.steps``) calls it in this
order and knows nothing else of it:

    bind (before each decision step's terms: the party, the run, this party's held run step, its stores)
    -> the terms (the analysis's own, with its local update) -> step (what the run record keeps) and the
    effect draw the step made known (appended to ``parties.effects`` with the record, before the answer)
    | replayed (a replayed step: the block moves past it)

The state lives in the session's analysis instance (``parties.registry.get_analysis`` makes one per
session); a session of a run starts it from this party's last completed run step (``parties.replay``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from parties.effects import EffectsStore
    from parties.replay import LocalStep, ReplayStore


@dataclass(frozen=True)
class LocalContext:
    """What a local block needs of its party for a step: who it is, the run (``""``: none), its last
    completed run step's block, its stores, and whether it may release its effect draws."""

    me: int
    run_id: str
    held: LocalStep | None
    held_run_step: int
    replays: ReplayStore
    effects: EffectsStore
    release_effects: bool
    #: with a privacy budget: how many run steps 1..k of a run this registry's ledger charged (its
    #: ``PrivacyBudgetStore.charged_steps``); None without a budget
    charged_steps: Callable[[str], int] | None = None


@runtime_checkable
class LocalBlockAnalysis(Protocol):
    """The local-block hooks of an analysis (see the module docstring)."""

    def keeps_local(self) -> bool:
        """Whether this session's decisions keep a registry-local block (or release one)."""
        ...

    def bind_local(self, ctx: LocalContext) -> None:
        """Before a decision step's terms: where the block stands (AnalysisError: INVALID_ARGUMENT)."""
        ...

    def local_step(self) -> tuple[LocalStep | None, tuple[int, npt.NDArray[np.float64]] | None]:
        """After the step's terms: what the run record keeps of the block, and the (sweep, z per chain) of the
        draw the step made known (None, None: nothing new)."""
        ...

    def local_replayed(self, held: LocalStep | None) -> None:
        """The session's step was replayed from the run record: the block moves past it."""
        ...


_KEEPS_LOCAL: dict[type, bool] = {}


def local_blocks_of(analysis: object) -> LocalBlockAnalysis | None:
    """``analysis`` if its session keeps a registry-local block, else None."""
    cls = type(analysis)
    has = _KEEPS_LOCAL.get(cls)
    if has is None:
        has = _KEEPS_LOCAL[cls] = isinstance(analysis, LocalBlockAnalysis)
    if not has:
        return None
    blocks = cast("LocalBlockAnalysis", analysis)
    return blocks if blocks.keeps_local() else None
