"""Analyses that keep their own secret state across the steps of a session and of a run: the run-state seam.

A decision analysis is stateless between steps: each Evaluate computes its terms and the reveal mode's party
machine (``hss.modes``) decides. An analysis in a reveal mode charged once per run
(``mechanisms.privacy.reveal_privacy(mode).charged_per_run``; today federated ABCDP's ``svt``, analysis
``abcdp-rff`` in ``parties.abcdp``) instead keeps secret state: made from the records at the session's first
step (after the run's one charge), advanced with each step's revealed output, rebuilt at open for a session
of a run from this party's last completed run step (``parties.replay``). Such an analysis implements
:class:`RunStateAnalysis`; the daemon calls it at open (``parties.session.run_state_at_open``) and at each
step (``parties.steps``), in this order, and knows nothing else of it:

    open_run (a session of a run, at OpenSession) ... then per Evaluate:
    replayed (a replayed step) | finished -> step_input -> [the run charged, start] -> machine -> repeats
    -> the step driven over the links -> settle -> audit

The instance is the session's own (``parties.registry.get_analysis`` makes one per session), so the state
lives in the session's analysis, never in the generic ``parties.session.Session``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    import numpy.typing as npt

    from hss.randomness import SecureRandom
    from hss.runtime import Machine
    from hss.session import PartyContext
    from parties.analyses import Dataset
    from parties.replay import RunRecord, SvtStep
    from proto.spec import SessionSpec


class ResumeError(RuntimeError):
    """A session of a run cannot start where it asks to (refused at open: FAILED_PRECONDITION; the message
    names the run and the steps)."""


class RunStateError(RuntimeError):
    """The state cannot continue (a batch pending after a failure, revealed output inconsistent with the
    state, a step evaluated again revealing something else): the session fails, nothing is answered."""


@runtime_checkable
class RunStateAnalysis(Protocol):
    """The run-state hooks of an analysis (see the module docstring). ``whole_run`` names the run in the
    messages and audit lines of its one charge ("the ABCDP run")."""

    whole_run: str

    def open_run(self, spec: SessionSpec, held: RunRecord | None, key_path: Path) -> dict[str, Any]:
        """OpenSession of a session of a run: where the state starts, given this party's last completed run
        step ``held`` and the path of the run noise key (the state is drawn from it); audit fields.
        :class:`ResumeError` when it cannot start there."""
        ...

    def replayed(self) -> dict[str, Any]:
        """The session's step was replayed (answered from the run record, not evaluated): the state moves
        past it; audit fields."""
        ...

    def finished(self, spec: SessionSpec) -> str | None:
        """Why this session decides no further step (refused: FAILED_PRECONDITION), or None."""
        ...

    def step_input(self, spec: SessionSpec, inputs: dict[str, npt.NDArray[Any]], n: int) -> Any:
        """The step's public inputs checked, before anything is charged (AnalysisError, ValueError:
        INVALID_ARGUMENT)."""
        ...

    @property
    def started(self) -> bool:
        """Whether the state was made (by :meth:`start`, at the session's first evaluated step)."""
        ...

    def start(self, spec: SessionSpec, data: Dataset, noise_key: bytes) -> None:
        """Make the state from the records, after the run's charge (AnalysisError, ValueError: the session
        fails, it was charged). ``noise_key``: the run noise key, or the session's without a run."""
        ...

    def machine(
        self, ctx: PartyContext, public: Any, step: int, rng: SecureRandom, query_rng: SecureRandom | None
    ) -> Machine[Any]:
        """This step's party machine (bad inputs: ValueError before any noise is drawn; afterwards
        :class:`RunStateError`). ``rng``: the protocol's own; ``query_rng``: a run step's noise stream."""
        ...

    def repeats(self, run_step: int) -> bool:
        """Whether run step ``run_step`` is the one completed here last, evaluated again (it was counted
        in the decision budget then)."""
        ...

    def settle(
        self, spec: SessionSpec, run_step: int, revealed: npt.NDArray[np.bool_]
    ) -> tuple[int, SvtStep | None]:
        """Advance the state with the step's revealed output: the number of accepts and, for a run step,
        the public state the run record keeps (``parties.replay``). :class:`RunStateError` when the output
        does not fit the state, or a step evaluated again revealed other output than the first time."""
        ...

    def audit(self) -> dict[str, Any]:
        """The state's public counters for the step's audit line (never noise or record values)."""
        ...


_KEEPS_RUN_STATE: dict[type, bool] = {}  # by class: 3.11 rebuilds a protocol's member list per isinstance


def run_state_of(analysis: object) -> RunStateAnalysis | None:
    """``analysis`` if it keeps run state, else None (a decision analysis). Decided once per class of
    analysis (the hooks are methods and class attributes), since a session asks at every step."""
    cls = type(analysis)
    keeps = _KEEPS_RUN_STATE.get(cls)
    if keeps is None:
        keeps = _KEEPS_RUN_STATE[cls] = isinstance(analysis, RunStateAnalysis)
    return cast("RunStateAnalysis", analysis) if keeps else None
