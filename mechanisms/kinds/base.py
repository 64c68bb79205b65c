"""What a decision kind is: everything that varies with what a model session's batches are, in one object.

A model session's batches are accept-reject decisions of one kind (MH, rejection sampling) or releases
(the warm start's statistics, a blocked run's registry effects). Each kind is a :class:`DecisionKind`, one
module of this package (``mh``, ``rejection``, ``statistics``, ``effects``) listed in
:mod:`mechanisms.kinds.registry`; the session's :class:`mechanisms.kinds.plan.DecisionPlan` holds the kind's
name and its settings and asks the kind for everything that depends on it:

* its keys of the session's ``model_params`` and their settings object (:meth:`DecisionKind.read`,
  :meth:`~DecisionKind.write`), and what it allows of the plan (:meth:`~DecisionKind.check`);
* its public step cap and numbers (a registry's ``[allow.bounds]`` ranges);
* what a registry charges for a batch (:meth:`~DecisionKind.events`, built from the cases of
  :mod:`mechanisms.privacy.charge`);
* what the coordinator's batch is (:meth:`~DecisionKind.request`) and a registry's terms of it, after the
  checks a registry makes on it (:meth:`~DecisionKind.terms`: pure, from the records the registry passes in).

A kind whose registries keep state of their own across steps (a blocked run's effects: ``parties``'s local
blocks) says so (:meth:`~DecisionKind.keeps_local`) and its terms are made there. The kinds sit above
``mechanisms.samplers`` and ``mechanisms.privacy`` (they use both) and below ``parties`` and
``coordinator``; a kind refers to the plan only through :class:`PlanView` (the plan module imports the
registry, not the other way round).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from hss.randomness import SecureRandom
from mechanisms.models.base import Model
from mechanisms.privacy.charge import Unaccountable
from mechanisms.privacy.events import PrivacyEvent
from mechanisms.privacy.threat import RevealView
from mechanisms.privacy.worst_record import WorstRecordCharge
from mechanisms.samplers.requests import DecisionRequest, Lazy, Penalty
from mechanisms.samplers.terms import Terms

F64 = npt.NDArray[np.float64]

__all__ = ["BatchRefused", "ChargeAsk", "DecisionKind", "PartyBatch", "PlanView", "number", "part"]


def number(value: Any) -> bool:
    """A JSON number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class PlanView(Protocol):
    """What a kind reads of the session's plan (:class:`mechanisms.kinds.plan.DecisionPlan`)."""

    @property
    def model_args(self) -> Mapping[str, Any]: ...
    @property
    def kind(self) -> str: ...
    @property
    def penalty(self) -> Penalty | None: ...
    @property
    def lazy(self) -> Lazy | None: ...
    @property
    def noise(self) -> str: ...
    @property
    def settings(self) -> Any: ...
    @property
    def exp_noise(self) -> bool: ...


@dataclass(frozen=True)
class ChargeAsk:
    """What a registry's charge of one batch is computed from, besides the plan: the model, the reveal mode
    and what its assumed coalition observes of it (``view``), the batch size ``n``, the analysis ``name``
    (it starts every label and message), the batch's public proposals ``request`` (a fixed-sd penalty is
    priced per decision at their sensitivities; None: a dry run, at the cap), the registry's neighbour
    relation and, for a Rényi budget, its orders (the accept bit's Rényi bound is added)."""

    model: Model
    mode: str
    view: RevealView
    n: int
    name: str
    request: DecisionRequest | None = None
    neighbours: str = "replace-one"
    rdp_orders: tuple[float, ...] | None = None


class BatchRefused(ValueError):
    """A registry refuses the coordinator's batch: the message says why, naming the numbers."""


@dataclass(frozen=True)
class PartyBatch:
    """One registry's side of one batch: what its terms are made from. ``memo`` is the session's (a value a
    kind computes once per session from the records, e.g. rejection sampling's bound M_j)."""

    name: str  # the analysis: starts every refusal
    model: Model
    cols: dict[str, F64]  # this registry's records, checked against the model's schema
    inputs: Mapping[str, npt.NDArray[Any]]  # the coordinator's public arrays
    n: int
    m: int
    mode: str
    rng: SecureRandom  # this registry's CSPRNG (its noise)
    memo: dict[str, Any]


class DecisionKind(ABC):
    """One kind of batch of a model session (module docstring). Subclasses set :attr:`name` and
    :attr:`keys` and implement :meth:`check`, :meth:`events` and :meth:`terms`."""

    #: the kind's name on the wire (``model_params["kind"]``)
    name: ClassVar[str]
    #: the kind's own keys of ``model_params`` (besides the common ones of the plan)
    keys: ClassVar[tuple[str, ...]] = ()
    #: the request and term form of its decisions (``requests.KINDS``), None for a release
    form: ClassVar[str | None] = None
    #: what a refusal of one of its keys in another kind's plan adds (where that kind says the same)
    elsewhere: ClassVar[str] = ""

    def unset(self, key: str) -> Any:
        """The value of its key ``key`` that says nothing (null; a default the wire may carry)."""
        return None

    def given(self, params: Mapping[str, Any]) -> list[str]:
        """Its keys that ``params`` gives a value other than :meth:`unset` (a bool is never unset)."""
        return [
            k
            for k in self.keys
            if k in params
            and params[k] is not None
            and (isinstance(params[k], bool) or params[k] != self.unset(k))
        ]

    def default_settings(self) -> Any:
        """The kind's settings when the plan names none (None: the kind has no defaults)."""
        return None

    def read(self, params: Mapping[str, Any]) -> Any:
        """The kind's settings from its keys of ``model_params`` (ValueError naming the key)."""
        return None

    def write(self, settings: Any) -> dict[str, Any]:
        """The kind's keys of ``model_params`` for ``settings`` (only what differs from the defaults)."""
        return {}

    @abstractmethod
    def check(self, plan: PlanView) -> None:
        """ValueError when the plan combines what this kind does not allow."""

    def step_cap(self, plan: PlanView) -> float | None:
        """The public cap on a decision's per-record sensitivity (steps above it are rejected by the
        coordinator without asking), None without one."""
        return None

    def margin(self, plan: PlanView) -> float:
        """The plan's ``log_bound_margin`` (rejection sampling's; 0 for every other kind)."""
        return 0.0

    def check_model(self, plan: PlanView, model: Model) -> None:
        """ValueError when the session's model cannot serve this plan (checked once, when a registry makes
        the session's analysis); every model serves a kind that says nothing here."""
        return None

    def charge_request(
        self, plan: PlanView, model: Model, batch: Mapping[str, Any] | None, n: int
    ) -> DecisionRequest | None:
        """The batch's public proposals the charge prices decision by decision (ValueError naming the input),
        or None when the plan is charged at its cap whatever the batch (and for a dry run: ``batch`` None)."""
        return None

    def keeps_local(self, plan: PlanView) -> bool:
        """Whether each registry keeps state of its own across the session's steps (made in ``parties``)."""
        return False

    @abstractmethod
    def events(self, plan: PlanView, ask: ChargeAsk) -> list[PrivacyEvent]:
        """The events one batch of ``n`` adds to a registry's ledger (``mechanisms.privacy.charge``'s table);
        :class:`mechanisms.privacy.charge.Unaccountable` when no bound can be backed."""

    def worst_record(
        self,
        plan: PlanView,
        model: Model,
        view: RevealView,
        neighbours: str,
        rdp_orders: tuple[float, ...] | None,
    ) -> WorstRecordCharge | None:
        """The per-run charge at the worst record (``mechanisms.privacy.charge.worst_record_charge``) where
        it applies to this kind's plan, else None (charged per decision)."""
        return None

    def request(self, plan: PlanView, model: Model, inputs: Mapping[str, Any], n: int) -> DecisionRequest:
        """The coordinator's batch back from its arrays (ValueError naming the input)."""
        if self.form is None:
            raise ValueError(f"a batch of kind {self.name!r} is not a batch of decisions")
        return DecisionRequest.from_inputs(inputs, self.form, n, model.d, plan.penalty)

    def batch_request(self, plan: PlanView, batch: PartyBatch) -> DecisionRequest:
        """:meth:`request` of a registry's batch, :class:`BatchRefused` naming the input."""
        try:
            return self.request(plan, batch.model, batch.inputs, batch.n)
        except ValueError as exc:
            raise BatchRefused(f"{batch.name}: {exc}") from exc

    @abstractmethod
    def terms(self, plan: PlanView, batch: PartyBatch) -> Terms:
        """This registry's terms of the batch after its checks on it (:class:`BatchRefused` naming why)."""

    def without_noise(self, plan: PlanView) -> tuple[str, str] | None:
        """(what, why) a decision of this kind is not the sampler's when every registry drops its Gamma(1/m)
        noise share; None when the kind's charge does not count on that noise (a release)."""
        return None

    def unaccountable_without_noise(self, plan: PlanView, name: str) -> Unaccountable:
        what, why = self.without_noise(plan) or ("", "")
        article = "an" if what.startswith("exact") else "a"
        return Unaccountable(
            f"{name}: the plan's noise is 'none' (a setting for tests only): every registry drops its "
            f"Gamma(1/m, 1) noise share, so {article} {what} decision is not the sampler's decision and no "
            f"charge holds for it ({why}); a registry with a budget refuses it: use noise 'exp' (the default)"
        )


def part(params: Mapping[str, Any], key: str, parse: Any) -> Any:
    """``parse`` of the object at ``key`` of ``params`` (None when absent); ValueError naming the key."""
    raw = params.get(key)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{key} must be an object, got {raw!r}")
    try:
        return parse(dict(raw))
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"bad {key} {dict(raw)!r}: {exc}") from exc


def require_random_intercept(model: Model) -> None:
    """ValueError unless ``model`` has a registry random intercept (blocked sampling and its release)."""
    if model.random_intercept() is None:
        raise ValueError(
            "blocked sampling and its effects release need a model with a registry random intercept; "
            f"model {model.name!r} has none"
        )


def require_replace_one(name: str, neighbours: str) -> None:
    """Unaccountable unless ``neighbours`` is replace-one: a plan charged at a fixed per-step bound."""
    if neighbours != "replace-one":
        raise Unaccountable(
            f"{name}: this plan is charged at a fixed per-step bound for replace-one neighbours only; "
            "add-remove accounting needs the penalty with a fixed sd (charged per decision)"
        )
