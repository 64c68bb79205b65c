"""What an analysis a party can allow is: it turns the party's own records and a batch of public proposals
into its private terms of the decisions, S = public + sum_j (l_j + V_j).

An :class:`Analysis` is named in the one table of ``parties.registry``; a party's config allowlists names and
bounds their numeric parameters. ``terms`` is vectorised over records and proposals and gets this party's
secret noise generator (never the experiment's public seed). The analyses themselves live elsewhere: the
statistical models of ``mechanisms.models`` through ``parties.models_bridge``,
federated ABCDP in ``parties.abcdp``; this module only fixes the seam.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hss.lazy_coin import LazyCoin
from hss.randomness import SecureRandom
from mechanisms.samplers.terms import Terms

if TYPE_CHECKING:
    from mechanisms.privacy import PrivacyEvent, RevealView

F64 = npt.NDArray[np.float64]


class AnalysisError(ValueError):
    """Parameters or inputs an analysis refuses (says which and why)."""


@dataclass(frozen=True)
class Dataset:
    """A party's records: named float64 columns of equal length."""

    columns: dict[str, F64]

    @property
    def n(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def column(self, name: str) -> F64:
        if name not in self.columns:
            raise AnalysisError(f"data has no column {name!r}; columns: {sorted(self.columns)}")
        return self.columns[name]


class Unaccountable(AnalysisError):
    """The analysis cannot back a per-step privacy bound for this session (``reason`` says why, in words
    that name the numbers); a party with a privacy budget refuses the session with that reason."""


class Analysis(Protocol):
    """An analysis a party can run, for one session: made by ``parties.registry.get_analysis`` from the
    session's public ``model_params``, which it parses exactly once into its typed ``plan`` (a model's
    :class:`mechanisms.kinds.DecisionPlan`, ABCDP's :class:`parties.abcdp.AbcdpPlan`), refusing
    them with an :class:`AnalysisError` naming the key; nothing after that reads the dict. Besides these
    methods an analysis may define the optional

        privacy_events(mode, view, n) -> list[PrivacyEvent]

    (see :class:`PrivacyAccounted`): the privacy events (``mechanisms.privacy``) that answering one batch of
    ``n`` decisions in reveal ``mode`` adds to this party's ledger, computed from the public parameters only,
    for ``view`` (``mechanisms.privacy.RevealView``: what the coalition this party assumes observes given the
    session threshold, and the noise left protecting a record). It raises :class:`Unaccountable` (with the
    reason) when the per-step privacy loss is unbounded or unknown; an analysis without the method is
    unaccountable too. A party with a privacy budget then refuses the session (``parties.privacy_budget``)."""

    name: str

    def lazy_coin(self) -> LazyCoin | None:
        """The session's secret lazy coin ANDed with the accept bit inside the sign protocol, or None."""
        ...

    def public_numbers(self) -> dict[str, float]:
        """The session's public numeric parameters by name (a registry's ``[allow.bounds]`` ranges)."""
        ...

    def terms(
        self,
        data: Dataset,
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms: ...


@runtime_checkable
class RunAccounted(Protocol):
    """The optional per-run charge of an :class:`Analysis` (``[budget] per_run = "worst-record"``, checked
    with ``isinstance``): ``parties.models_bridge.ModelAnalysis.worst_record_events``."""

    def worst_record_events(
        self,
        mode: str,
        view: RevealView,
        n: int,
        batch: dict[str, npt.NDArray[Any]],
        neighbours: str,
        rdp_orders: tuple[float, ...] | None,
        state_of: Callable[[str], Any],
    ) -> tuple[list[PrivacyEvent], str, dict[str, Any]] | None: ...


@runtime_checkable
class PrivacyAccounted(Protocol):
    """The optional privacy method of an :class:`Analysis` (checked with ``isinstance``)."""

    def privacy_events(
        self,
        mode: str,
        view: RevealView,
        n: int,
        batch: dict[str, npt.NDArray[Any]] | None = None,
        neighbours: str = "replace-one",
        rdp_orders: tuple[float, ...] | None = None,
    ) -> list[PrivacyEvent]: ...
