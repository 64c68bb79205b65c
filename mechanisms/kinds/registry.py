"""The decision kinds a model session's batches can be, by their name on the wire (``model_params["kind"]``).
A new kind is a module of this package (a :class:`mechanisms.kinds.base.DecisionKind`) and its line here."""

from __future__ import annotations

from .base import DecisionKind
from .effects import EFFECTS
from .mh import MH
from .rejection import REJECTION
from .statistics import STATISTICS

KINDS: dict[str, DecisionKind] = {k.name: k for k in (MH, REJECTION, STATISTICS, EFFECTS)}
