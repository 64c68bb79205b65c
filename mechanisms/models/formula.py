"""A model written as a formula: ``y ~ age + C(sex) + age:creat + (1 | registry)`` and a family.

The formula is parsed by ``formulaic`` (Wilkinson formulas, as in R, brms, bambi); confar adds what a
confidential run needs and a formula does not say: every column's *public* bounds (model argument
``columns``), from which the schema, the design and the per-record bound of the log acceptance ratio are
derived, so no per-model hand derivation is needed.

Arguments (all public; the model is a frozen dataclass and compares by value, so the coordinator's and every
registry's copy are the same model exactly when their arguments are):

* ``formula``: ``outcome ~ terms``; terms are columns (numeric), ``C(column)`` (categorical, reference-coded;
  the column must declare its ``values``), interactions ``a:b`` / ``a*b``, ``- 1`` / ``0 +`` (no intercept),
  and at most one registry random intercept ``(1 | column)``, the column holding the registry's number (its
  declared values are the registries). Other transforms (``np.log(x)``, ``I(x**2)``) are refused: make the
  transformed column in the registry's data source and declare its bounds, or write a plug-in.
* ``family``: ``bernoulli`` (logit link; the outcome's values are {0, 1}), ``poisson`` (log link; a count
  in [0, upper]; ``offset`` names an exposure column t > 0, e.g. person-years: log t is added to η),
  ``gaussian`` (identity link, known noise sd ``sigma``), ``weibull`` (accelerated failure time: log of the
  scale = η; the outcome is the follow-up time, ``event`` names the censoring column: 1 = event, 0 = censored;
  one more parameter, ``log_shape``).
* ``columns``: ``{name = [lower, upper]}`` or ``{name = {lower, upper, integer, values}}`` for every
  column the formula, ``offset`` and ``event`` use. A registry's records outside them are refused when it
  loads them. A categorical column's ``values`` may be text labels (``sex = {values = ["F", "M"]}``: letters,
  digits, ``_ . -``; the declared order is the levels' order, the first the reference): the records hold the
  labels, a registry's data source turns them into their codes 0, 1, ... (``Column.labels``) and refuses any
  other text, and the parameters are named by the labels (``sex[M]``); only ``C(column)`` and ``(1 | column)``
  take labels. The canonical form of a column (``config()``, the session's wire) is the 5-tuple
  ``(name, lower, upper, integer, values)``, a labelled column's ``(name, 0, len - 1, true, labels)``.
* ``prior_sd``, ``autoscale``: β_k ~ N(0, (prior_sd / s_k)²) with s_k the half-range of design column k over
  the declared box (rstanarm's autoscaling, with the public bounds in place of the data's sd: a coefficient's
  prior then says how much the column can move η across its range, whatever its unit; s_k = 1 for a
  constant column, the intercept); ``autoscale = false``: s_k = 1. ``log_shape`` ~ N(0, 1); the random
  intercept u_j = σ_u z_j, z_j ~ N(0, 1), σ_u ~ HalfNormal(``sigma_u_scale``) (sampled as log σ_u,
  Jacobian included).

Per-record bound (replace-one; used by the penalty, the sensitivity cap and the privacy charge). Each design
column is a product of numeric columns and category indicators, so the linear predictor is multilinear in the
numeric columns and its extremes over the box of declared bounds are attained at the box's corners: with K the
design at every corner (numeric columns at their bounds, categorical columns at each value), the extent of
a·z over every allowed record is exactly [min K a, max K a], and with the random intercept the extent of
a·z + v_j is that plus [min_j v_j, max_j v_j]. ``D`` = sup |Δη| over records (exact). Per family, for any
record the schema allows (proofs in the methods):

* bernoulli: |Δ log p| ≤ D (log σ is 1-Lipschitz in η);
* poisson: |y Δη − t (e^{η*} − e^{η})| ≤ max(y_max D, t_max e^{H} D), H the largest η or η* over records
  (the two terms have the same sign; mean value theorem);
* gaussian: |Δη| |2y − η − η*| / (2σ²) ≤ D · max(2 y_max − min(η + η*), max(η + η*) − 2 y_min) / (2σ²);
* weibull: |Δ log k| + D_z + min(e^Z, e^Z D_z), z = k (log t − η), D_z = sup |Δz| ≤ |k* − k| max|log t| +
  sup |k*η* − kη|, e^Z = max over θ' ∈ {θ, θ*} of (t_max e^{−η'_min})^{k'} (the survival term by the mean
  value theorem, as :mod:`mechanisms.models.weibull`).

The DP warm start's score releases (``mechanisms.warmstart``) use a bound of the same kind: a record's score
is r(x, θ) v(x, θ), r = ∂ log p/∂η and v = ∂η/∂θ (the design row; with the random intercept also σ_u z_g
and σ_u for the registry's z_g), v affine in each numeric column, so ‖Bᵀv‖ (B a public basis, default the
identity) is largest at a corner, and the bound is sup |r| times that maximum
(:meth:`FormulaModel.score_norm_bound`: |r| ≤ 1 for bernoulli, max(y_max, t_max e^H) for poisson,
max(y_max − η_min, η_max − y_min)/σ² for gaussian; weibull adds its log_shape's score). Bernoulli
with an intercept has the logistic model's public jump to the released prevalence's logit. A formula has no
synthetic registries: a planned run's pilot is its design dataset (:mod:`mechanisms.models.formula_design`).

Pure: no I/O, no randomness except through the generators passed in.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import math
import re
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from mechanisms.models.base import F64, Column, Data, Model, as_batch, label_problem, softplus
from mechanisms.models.hierarchy import RandomIntercept

FAMILIES = ("bernoulli", "poisson", "gaussian", "weibull")
MAX_CORNERS = 1 << 16  # the design is evaluated at every corner of the declared box
_RANDOM = re.compile(r"\(\s*1\s*\|\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")
_CATEGORICAL = re.compile(r"^C\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEVEL = re.compile(r"^C\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\[(?:T\.)?(.*)\]$")  # formulaic's C(x)[T.1.0]

ColumnSpec = tuple[str, float, float, bool, tuple[float, ...] | tuple[str, ...] | None]


def _values(c: ColumnSpec) -> tuple[float, ...] | None:
    """A column's numeric values: its declared numbers, or its labels' codes 0, 1, ... (None: a range)."""
    if c[4] is not None and _is_labels(c[4]):
        return tuple(float(k) for k in range(len(c[4])))
    return c[4]  # type: ignore[return-value]


def _labels(c: ColumnSpec) -> tuple[str, ...] | None:
    """A categorical column's text labels, in declared order (None: numbers)."""
    return c[4] if c[4] is not None and _is_labels(c[4]) else None  # type: ignore[return-value]


def _is_labels(values: tuple[Any, ...]) -> bool:
    return bool(values) and all(isinstance(v, str) for v in values)


def _declared_values(where: str, values: Any) -> tuple[float, ...] | tuple[str, ...]:
    """``values``: numbers (sorted, each once) or text labels (in the declared order: the first is the
    reference level; each once, letters, digits, _ . - only)."""
    wrong = f"{where}.values must be a list of numbers or of text labels, got {values!r}"
    if isinstance(values, str) or not isinstance(values, list | tuple):
        raise ValueError(wrong)
    texts = [v for v in values if isinstance(v, str)]
    if texts and len(texts) != len(values):
        raise ValueError(f"{where}.values: give numbers or text labels, not both, got {list(values)!r}")
    if texts:
        for v in texts:
            why = label_problem(v)
            if why is not None:
                raise ValueError(f"{where}.values: {why}")
        twice = sorted({v for v in texts if texts.count(v) > 1})
        if twice:
            raise ValueError(f"{where}.values: labels {twice} given more than once")
        return tuple(texts)
    try:
        return tuple(sorted({float(v) for v in values}))
    except (TypeError, ValueError) as exc:
        raise ValueError(wrong) from exc


def _column_spec(name: str, raw: Any) -> ColumnSpec:
    """One entry of ``columns`` as (name, lower, upper, integer, values), checked; a labelled column's
    (name, 0, len - 1, true, labels): the labels are held as their codes."""
    where = f"columns.{name}"
    if not _NAME.match(name):
        raise ValueError(f"{where}: a column name is letters, digits and _, not starting with a digit")
    vals: tuple[float, ...] | tuple[str, ...] | None
    if isinstance(raw, Mapping):
        extra = set(raw) - {"lower", "upper", "integer", "values"}
        if extra:
            raise ValueError(f"{where}: unknown keys {sorted(extra)} (lower, upper, integer, values)")
        values = raw.get("values")
        vals = None if values is None else _declared_values(where, values)
        if vals is not None and _is_labels(vals):
            given = sorted(set(raw) & {"lower", "upper", "integer"})
            if given:
                raise ValueError(f"{where}: text labels take no {given} (their codes are 0, 1, ...)")
            return (name, 0.0, float(len(vals) - 1), True, vals)
        lower = raw.get("lower", min(vals) if vals else None)
        upper = raw.get("upper", max(vals) if vals else None)
        integer = raw.get("integer", False)
    elif isinstance(raw, list | tuple) and len(raw) == 2:
        lower, upper, integer, vals = raw[0], raw[1], False, None
    elif isinstance(raw, list | tuple) and len(raw) == 5:  # the canonical form (a round trip of config())
        if raw[0] != name:
            raise ValueError(f"{where}: the canonical form names another column, got {raw!r}")
        lower, upper, integer = raw[1], raw[2], raw[3]
        vals = None if raw[4] is None else _declared_values(where, raw[4])
        if vals is not None and _is_labels(vals):
            spec: ColumnSpec = (name, 0.0, float(len(vals) - 1), True, vals)
            if (lower, upper, integer) != spec[1:4]:
                raise ValueError(f"{where}: the canonical form of labels {list(vals)} is {list(spec)}")
            return spec
    else:
        raise ValueError(f"{where}: give [lower, upper] or {{lower, upper, integer, values}}, got {raw!r}")
    if not isinstance(integer, bool):
        raise ValueError(f"{where}.integer must be true or false, got {integer!r}")
    try:
        lo, hi = float(lower), float(upper)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: lower and upper must be numbers, got {lower!r}, {upper!r}") from exc
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"{where}: need finite public bounds lower <= upper, got [{lo:g}, {hi:g}]")
    if vals is not None:
        nums = tuple(float(v) for v in vals)
        if not nums or not all(math.isfinite(v) and lo <= v <= hi for v in nums):
            raise ValueError(f"{where}.values must be finite numbers within [{lo:g}, {hi:g}]")
        if integer and any(v != round(v) for v in nums):
            raise ValueError(f"{where}.values must be integers (integer = true)")
    return (name, lo, hi, integer, vals)


def _columns(raw: Any) -> tuple[ColumnSpec, ...]:
    if isinstance(raw, Mapping):
        items = [_column_spec(str(k), v) for k, v in raw.items()]
    elif isinstance(raw, list | tuple):
        items = [_column_spec(str(c[0]), c) for c in raw if isinstance(c, list | tuple) and c]
        if len(items) != len(raw):
            raise ValueError("columns: give a table {name = [lower, upper], ...}")
    else:
        raise ValueError(f"columns: give a table {{name = [lower, upper], ...}}, got {raw!r}")
    names = [c[0] for c in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"columns: {twice} declared more than once")
    return tuple(sorted(items))


@dataclass(frozen=True)
class _Parsed:
    """What the formula means, derived once per model: the outcome, the design's recipe and its corners."""

    outcome: str
    variables: tuple[str, ...]  # the columns the design reads
    categorical: tuple[str, ...]  # those read as C(column)
    spec: Any  # formulaic ModelSpec (levels fixed by the declared values)
    names: tuple[str, ...]  # design column names
    corners: F64  # the design at every corner of the declared box
    group: str | None  # the random intercept's column
    levels: tuple[float, ...]  # its values (the registries; a labelled column's codes)
    level_names: tuple[str, ...]  # their parameters' suffixes: z1, z2, ... (labels: z[DK], z[SE], ...)


def _undeclared(name: str, declared: Mapping[str, Any]) -> str:
    """A column the formula uses and ``columns`` does not declare, with the declared one it resembles (a
    typo, e.g. ``agee`` for ``age``)."""
    guess = difflib.get_close_matches(name, declared, n=1)
    if guess:
        return f"column {name!r} has no declared bounds: did you mean {guess[0]!r}? (or add columns.{name})"
    return f"column {name!r} has no declared bounds: add columns.{name}"


def _parse(model: FormulaModel) -> _Parsed:
    import pandas as pd
    from formulaic import Formula, model_matrix

    text = model.formula
    if not isinstance(text, str) or text.count("~") != 1:
        raise ValueError(f"formula must be 'outcome ~ terms', got {text!r}")
    lhs, rhs = (s.strip() for s in text.split("~"))
    if not _NAME.match(lhs):
        raise ValueError(f"formula: the outcome must be one column name, got {lhs!r}")
    groups = _RANDOM.findall(rhs)
    if len(groups) > 1:
        raise ValueError(f"formula: at most one random intercept (1 | registry), got {len(groups)}")
    if groups:  # the random intercept is confar's; formulaic parses the fixed part
        rhs = _RANDOM.sub("", rhs)
        while re.search(r"\+\s*\+", rhs):
            rhs = re.sub(r"\+\s*\+", "+", rhs)
        rhs = rhs.strip().strip("+").strip() or "1"
    if "|" in rhs:
        raise ValueError(
            "formula: only a random intercept '(1 | column)' is supported (no random slopes or other '|')"
        )
    declared = {c[0]: c for c in model.columns}
    try:
        parsed = Formula(rhs)
    except Exception as exc:  # formulaic's own parse error, with its position marker (terminal colours gone)
        why = _ANSI.sub("", str(exc))
        raise ValueError(f"formula {text!r}: {why}") from exc
    variables: list[str] = []
    categorical: set[str] = set()
    for term in parsed:
        for factor in term.factors:
            expr = str(factor.expr).strip()
            method = str(getattr(factor.eval_method, "value", factor.eval_method))
            if method == "literal":
                continue
            cat = _CATEGORICAL.match(expr)
            name = cat.group(1) if cat else expr
            if method == "python" and not cat:
                raise ValueError(
                    f"formula: the term {expr!r} is a transform confar cannot bound; make the transformed "
                    "column in the registry's data source and declare its bounds in columns, or write a "
                    "plug-in (docs/MODELS.md)"
                )
            if name not in declared:
                raise ValueError(f"formula: {_undeclared(name, declared)}")
            if cat:
                if declared[name][4] is None:
                    raise ValueError(
                        f"formula: C({name}) needs the column's values declared: columns.{name} = "
                        "{values = [...]}"
                    )
                categorical.add(name)
            elif _labels(declared[name]) is not None:
                raise ValueError(
                    f"formula: column {name!r} holds text labels {list(_labels(declared[name]) or ())}: "
                    f"write C({name}) (a number term needs numbers)"
                )
            if name not in variables:
                variables.append(name)
    for need, why in ((lhs, "the outcome"), (model.offset, "offset"), (model.event, "event")):
        if need is not None and need not in declared:
            raise ValueError(f"{why}: {_undeclared(need, declared)}")
        if need is not None and _labels(declared[need]) is not None:
            raise ValueError(
                f"{why}: column {need!r} holds text labels {list(_labels(declared[need]) or ())}; {why} is a "
                "number (declare its values as numbers)"
            )
    group = groups[0] if groups else None
    levels: tuple[float, ...] = ()
    level_names: tuple[str, ...] = ()
    if group is not None:
        if group not in declared:
            guess = difflib.get_close_matches(group, declared, n=1)
            hint = f"did you mean {guess[0]!r}? (or add columns.{group})" if guess else f"add columns.{group}"
            raise ValueError(f"formula: (1 | {group}): {hint} (the registries' numbers)")
        g = declared[group]
        levels = _values(g) or ()
        if not levels:
            if not (g[3] and g[1] == round(g[1]) and g[2] == round(g[2])):
                raise ValueError(
                    f"columns.{group}: declare values, or integer = true with integer bounds, for "
                    f"(1 | {group})"
                )
            levels = tuple(float(v) for v in range(int(g[1]), int(g[2]) + 1))
        if group in variables:
            raise ValueError(f"formula: {group} is both a fixed term and the random intercept's grouping")
        labels = _labels(g)  # registry_z1, ... or, for labels, registry_z[DK], ...
        level_names = tuple(f"z[{t}]" for t in labels or ()) or tuple(f"z{level_text(v)}" for v in levels)
    axes = []
    for v in variables:
        c = declared[v]
        axes.append(list(_values(c) or (c[1], c[2])))  # declared values: only those can occur
    count = math.prod(len(a) for a in axes)
    if count > MAX_CORNERS:
        raise ValueError(f"formula: {count} corners of the declared box (at most {MAX_CORNERS}); fewer terms")
    frame = pd.DataFrame(list(itertools.product(*axes)) or [()], columns=variables, dtype=np.float64)
    if not variables:
        frame = pd.DataFrame(index=range(1))
    mm = model_matrix(rhs, frame, na_action="raise")
    names = tuple(design_name(str(c), declared) for c in mm.columns)
    if not names:
        raise ValueError(f"formula {text!r} has no terms (a fixed intercept at least)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"formula {text!r}: design columns named twice: {twice} (rename the column)")
    corners = np.asarray(mm, dtype=np.float64)
    cats = tuple(v for v in variables if v in categorical)
    return _Parsed(lhs, tuple(variables), cats, mm.model_spec, names, corners, group, levels, level_names)


def level_text(value: float) -> str:
    """A numeric level as it appears in a parameter name: an integer without ``.0`` (``1``), any other value
    by its shortest exact form (``0.5``, ``1e-05``); letters, digits, ``. -`` only."""
    v = float(value)
    return str(int(v)) if v == round(v) and abs(v) < 1e15 else repr(v)


def design_name(raw: str, declared: Mapping[str, ColumnSpec]) -> str:
    """formulaic's name of a design column as confar's parameter name: ``C(sex)[T.1.0]`` (and ``C(sex)[1.0]``
    without an intercept: either way the indicator of that level) is ``sex[1]`` (``sex[M]`` where the column's
    values are text labels: formulaic sees their codes), an interaction ``a:b`` is
    ``a.b`` (so ``age:C(sex)[T.1.0]`` is ``age.sex[1]``); ``Intercept`` and numeric columns as they are. The
    brackets delimit a level, so it never runs into a column's name (``sex1`` could be a column), and ``.``
    never occurs in a column's name, so ``a.b`` is only ever the product of a and b; both pass the output
    writer's rule (``coordinator.outputs.result``: letters, digits, ``_ . - [ ]``)."""
    parts = []
    for piece in raw.split(":"):
        level = _LEVEL.match(piece)
        if level is None:
            if piece != "Intercept" and piece not in declared:
                raise ValueError(f"formula: cannot name the design column {raw!r} (its part {piece!r})")
            parts.append(piece)
            continue
        col, text = level.group(1), level.group(2)
        labels = _labels(declared[col]) if col in declared else None
        try:
            value = float(text)
            parts.append(f"{col}[{labels[int(value)] if labels else level_text(value)}]")
        except (ValueError, IndexError) as exc:
            raise ValueError(f"formula: cannot name the design column {raw!r} (level {text!r})") from exc
    return ".".join(parts)


class _DesignCache:
    """The design of a registry's records, computed once per (model, records) (formulaic takes milliseconds;
    a step evaluates the likelihood many times on the same records). Only read-only arrays are cached (a
    registry's checked records are: :meth:`FormulaModel.clip_records`), so an entry cannot go stale by an
    in-place change; entries are found by the model and the identity of the arrays, held by weak references
    (an entry goes with its records: no record outlives them here), and the table is locked (the daemon
    evaluates on worker threads)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.entries: dict[tuple[Any, ...], tuple[tuple[weakref.ref[Any], ...], F64]] = {}

    def get(self, model: Any, arrays: tuple[Any, ...], make: Any) -> F64:
        with self.lock:
            for k in [k for k, (refs, _) in self.entries.items() if any(r() is None for r in refs)]:
                del self.entries[k]  # records gone: their design goes too
        if any(not isinstance(a, np.ndarray) or a.flags.writeable for a in arrays):
            return np.asarray(make(), dtype=np.float64)
        key = (model, *(id(a) for a in arrays))
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None and all(r() is a for r, a in zip(hit[0], arrays, strict=True)):
                return hit[1]
        value = np.asarray(make(), dtype=np.float64)
        value.setflags(write=False)
        with self.lock:
            if len(self.entries) >= self.size:
                self.entries.pop(next(iter(self.entries)), None)
            self.entries[key] = (tuple(weakref.ref(a) for a in arrays), value)
        return value


_CACHE = _DesignCache()


@dataclass(frozen=True)
class FormulaModel(Model):
    formula: str
    family: str
    columns: Any
    prior_sd: float = 2.5
    autoscale: bool = True
    sigma: float | None = None
    offset: str | None = None
    event: str | None = None
    sigma_u_scale: float = 1.0

    name = "formula"
    # the DP warm start's steps: a score release (fresh empirical Fisher) at every step. In the pilot's basis
    # (coordinator.planner.with_pilot) the Gram block is cheap, and the secant-updated curvature converged
    # less well: the 77,000-record study of simulations.formula_budget_study, mu = 4, five steps, four noise
    # draws: DP mean 0.23-0.62 posterior sd from the exact mode with "fisher", 0.46-0.99 with "secant"
    warm_start_curvature = "fisher"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {list(FAMILIES)}, got {self.family!r}")
        object.__setattr__(self, "columns", _columns(self.columns))
        if not (isinstance(self.prior_sd, int | float) and self.prior_sd > 0):
            raise ValueError(f"prior_sd must be a number > 0, got {self.prior_sd!r}")
        if not isinstance(self.autoscale, bool):
            raise ValueError(f"autoscale must be true or false, got {self.autoscale!r}")
        if not (isinstance(self.sigma_u_scale, int | float) and self.sigma_u_scale > 0):
            raise ValueError(f"sigma_u_scale must be a number > 0, got {self.sigma_u_scale!r}")
        fam = self.family
        if (self.sigma is not None) != (fam == "gaussian"):
            raise ValueError("sigma (the known noise sd) is given for family 'gaussian' and only for it")
        if self.sigma is not None and not (isinstance(self.sigma, int | float) and self.sigma > 0):
            raise ValueError(f"sigma must be a number > 0, got {self.sigma!r}")
        if self.offset is not None and fam != "poisson":
            raise ValueError("offset (an exposure column) is for family 'poisson' only")
        if (self.event is not None) != (fam == "weibull"):
            raise ValueError(
                "event (the censoring column: 1 = event, 0 = censored) is for family 'weibull' only"
            )
        parsed = self.parsed  # parsed now: a bad formula is refused at construction
        names = self.param_names
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"parameters named twice: {twice} (a column named as a parameter: rename it)")
        cols = {c[0]: c for c in self.columns}
        y = cols[parsed.outcome]
        if fam == "bernoulli" and not set(_values(y) or (y[1], y[2])) <= {0.0, 1.0}:
            raise ValueError(f"columns.{y[0]}: a bernoulli outcome takes the values 0 and 1")
        y_values = _values(y)
        counts = y[3] or (y_values is not None and all(v == round(v) for v in y_values))
        if fam == "poisson" and not (y[1] >= 0 and counts):
            raise ValueError(f"columns.{y[0]}: a poisson outcome is a count: integer = true, lower >= 0")
        if fam == "weibull" and not y[1] > 0:
            raise ValueError(f"columns.{y[0]}: a weibull outcome is a time: lower > 0")
        if self.offset is not None and not cols[self.offset][1] > 0:
            raise ValueError(f"columns.{self.offset}: an exposure (offset) needs lower > 0")
        if self.event is not None and not set(
            _values(cols[self.event]) or (cols[self.event][1], cols[self.event][2])
        ) <= {0.0, 1.0}:
            raise ValueError(f"columns.{self.event}: the event column takes the values 0 and 1")

    @functools.cached_property
    def parsed(self) -> _Parsed:
        """The formula's meaning (not a field: the model compares and hashes by its arguments)."""
        return _parse(self)

    # ---- public description ------------------------------------------------------------------------------

    @property
    def k(self) -> int:
        """The number of design columns (fixed effects)."""
        return len(self.parsed.names)

    @functools.cached_property
    def coefficient_sd(self) -> F64:
        """The prior sd of each design coefficient: prior_sd / s_k (``autoscale``) or prior_sd."""
        corners = self.parsed.corners
        half = (corners.max(axis=0) - corners.min(axis=0)) / 2.0
        scale = np.where(half > 0, half, 1.0) if self.autoscale else np.ones(self.k)
        return np.asarray(self.prior_sd / scale, dtype=np.float64)

    @property
    def m_groups(self) -> int:
        return len(self.parsed.levels)

    @functools.cached_property
    def param_names(self) -> tuple[str, ...]:
        """Computed once (``d`` reads it at every evaluation), like :attr:`parsed`."""
        p = self.parsed
        head = ("log_shape",) if self.family == "weibull" else ()
        tail: tuple[str, ...] = ()
        if p.group is not None:
            tail = (f"{p.group}_log_sd", *(f"{p.group}_{z}" for z in p.level_names))
        return (*head, *p.names, *tail)

    @property
    def schema(self) -> tuple[Column, ...]:
        p = self.parsed
        used = {p.outcome, *p.variables} | {c for c in (self.offset, self.event, p.group) if c is not None}
        out = []
        for c in self.columns:
            name, lo, hi, integer = c[:4]
            if name not in used:
                continue
            vals = _values(c)
            if (self.family == "bernoulli" and name == p.outcome) or name == self.event:
                vals, integer = (0.0, 1.0), True
            if name == p.group and vals is None:
                vals, integer = p.levels, True
            out.append(Column(name, lo, hi, integer=integer, values=vals, labels=_labels(c)))
        return tuple(out)

    def n_records(self, data: Data) -> int:
        return len(data[self.parsed.outcome])

    def clip_records(self, data: Data) -> tuple[dict[str, F64], int]:
        """The checked records as read-only arrays (nothing clipped): a registry's records do not change
        during a session, and read-only is what lets their design be computed once (``_DesignCache``)."""
        out = {}
        for name, col in data.items():
            view = np.asarray(col, dtype=np.float64).view()
            view.setflags(write=False)
            out[name] = view
        return out, 0

    def random_intercept(self) -> RandomIntercept | None:
        """The ``(1 | column)`` term's parameters (None without one): log σ_u and z_1.. after the
        coefficients (and ``log_shape`` before them for weibull)."""
        p = self.parsed
        if p.group is None:
            return None
        i = 1 if self.family == "weibull" else 0
        zs = tuple(range(i + self.k + 1, i + self.k + 1 + len(p.levels)))
        icept = i + p.names.index("Intercept") if "Intercept" in p.names else None
        return RandomIntercept(p.group, p.levels, i + self.k, zs, tuple(range(i, i + self.k)), icept)

    def offset_uniform_bound(self) -> bool:
        """bernoulli only: its bound is sup |Δη| and the log-likelihood is 1-Lipschitz in η, at any level of
        η; the poisson, gaussian and weibull bounds grow with the level (e^η, the residual, the survival
        term), which a registry's effect moves."""
        return self.family == "bernoulli"

    def covariate_means(self, data: Data, weights: F64 | None = None) -> F64:
        """The mean design row of ``data`` (the intercept column's mean is 1), or per row of ``weights``
        (rows, records) the weighted mean (rows, k)."""
        x = self.design(data)
        if weights is None:
            return np.asarray(x.mean(axis=0), dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray((w @ x) / w.sum(axis=1, keepdims=True), dtype=np.float64)

    # ---- parameters ----------------------------------------------------------------------------------------

    def _split(self, theta: F64) -> tuple[F64 | None, F64, F64 | None]:
        """(log shape (n,) or None, β (n, k), u (n, groups) or None)."""
        th = as_batch(theta, self.d)
        i = 1 if self.family == "weibull" else 0
        beta = th[:, i : i + self.k]
        u = None
        if self.parsed.group is not None:
            u = np.exp(th[:, i + self.k])[:, None] * th[:, i + self.k + 1 :]
        return (th[:, 0] if i else None), beta, u

    def likelihood_coordinates(self, theta: F64) -> F64:
        """(log shape, β, u = σ z): the random intercept's effects, not σ and z apart (the likelihood sees
        only their product)."""
        th = as_batch(theta, self.d)
        if self.parsed.group is None:
            return th
        i = (1 if self.family == "weibull" else 0) + self.k
        return np.asarray(np.hstack([th[:, :i], np.exp(th[:, i : i + 1]) * th[:, i + 1 :]]), dtype=np.float64)

    def from_likelihood_coordinates(self, psi: F64) -> F64:
        """(log shape, β, log σ = 0, z = u)."""
        if self.parsed.group is None:
            return as_batch(psi, self.d)
        ps = as_batch(psi, self.d - 1)
        i = (1 if self.family == "weibull" else 0) + self.k
        return np.asarray(np.hstack([ps[:, :i], np.zeros((ps.shape[0], 1)), ps[:, i:]]), dtype=np.float64)

    def log_prior(self, theta: F64) -> F64:
        th = as_batch(theta, self.d)
        i = 1 if self.family == "weibull" else 0
        beta = th[:, i : i + self.k]
        sd = self.coefficient_sd
        lp = -0.5 * np.sum((beta / sd) ** 2, axis=1) - float(np.sum(np.log(sd * math.sqrt(2 * math.pi))))
        if i:
            lp = lp - 0.5 * th[:, 0] ** 2 - 0.5 * math.log(2 * math.pi)
        if self.parsed.group is not None:
            log_s = th[:, i + self.k]
            s, scale = np.exp(log_s), self.sigma_u_scale
            lp = (
                lp + math.log(2.0) - 0.5 * (s / scale) ** 2 - math.log(scale * math.sqrt(2 * math.pi)) + log_s
            )
            z = th[:, i + self.k + 1 :]
            lp = lp - 0.5 * np.sum(z**2, axis=1) - self.m_groups * 0.5 * math.log(2 * math.pi)
        return np.asarray(lp, dtype=np.float64)

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        parts = []
        if self.family == "weibull":
            parts.append(rng.normal(0.0, 1.0, (n, 1)))
        parts.append(rng.normal(0.0, 1.0, (n, self.k)) * self.coefficient_sd)
        if self.parsed.group is not None:
            parts.append(np.log(np.abs(rng.normal(0.0, self.sigma_u_scale, (n, 1)))))
            parts.append(rng.normal(0.0, 1.0, (n, self.m_groups)))
        return np.asarray(np.hstack(parts), dtype=np.float64)

    # ---- likelihood ----------------------------------------------------------------------------------------

    def design(self, data: Data) -> F64:
        """The design (records, k), by formulaic with the levels the declared values fix."""
        p = self.parsed
        arrays = tuple(data[v] for v in p.variables) or (data[p.outcome],)

        def make() -> F64:
            import pandas as pd

            for v in p.categorical:  # formulaic would code an undeclared level as the reference, silently
                known = np.asarray(next(_values(c) for c in self.columns if c[0] == v))
                if not np.isin(np.asarray(data[v], dtype=np.float64), known).all():
                    raise ValueError(f"column {v!r}: values outside the declared values {known.tolist()}")
            n = len(data[p.outcome])
            frame = pd.DataFrame(
                {v: np.asarray(data[v], dtype=np.float64) for v in p.variables}, index=range(n)
            )
            return np.asarray(p.spec.get_model_matrix(frame, na_action="raise"), dtype=np.float64)

        return _CACHE.get(self, (*arrays, data[p.outcome]), make)

    def eta(self, data: Data, theta: F64) -> F64:
        """The linear predictor (proposals, records), without the offset."""
        _, beta, u = self._split(theta)
        out = beta @ self.design(data).T
        group = self.parsed.group
        if u is not None and group is not None:
            levels, g = np.asarray(self.parsed.levels), np.asarray(data[group], dtype=np.float64)
            idx = np.minimum(np.searchsorted(levels, g), levels.size - 1)
            if not np.array_equal(levels[idx], g):
                raise ValueError(f"column {group!r}: values outside the declared registries {list(levels)}")
            out = out + u[:, idx]
        return np.asarray(out, dtype=np.float64)

    def linear_predictor(self, data: Data, theta: F64) -> F64:
        """β·x of every record (proposals, records): η without the random intercept and the offset."""
        _, beta, _ = self._split(theta)
        return np.asarray(beta @ self.design(data).T, dtype=np.float64)

    def log_likelihood_eta(self, data: Data, theta: F64, eta: F64) -> F64:
        """Σ_i log p(y_i | η_i, θ) (proposals,) at the given linear predictor (θ gives the Weibull shape)."""
        y = np.asarray(data[self.parsed.outcome], dtype=np.float64)
        if self.family == "bernoulli":  # Σ y η − log(1 + e^η)
            return np.asarray(eta @ y - softplus(eta).sum(axis=1), dtype=np.float64)
        return np.asarray(self._record_ll(data, theta, eta).sum(axis=1), dtype=np.float64)

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        return self._record_ll(data, theta, self.eta(data, theta))

    def record_log_likelihood_eta(self, data: Data, theta: F64, eta: F64) -> F64:
        return self._record_ll(data, theta, eta)

    def _record_ll(self, data: Data, theta: F64, eta: F64) -> F64:
        y = np.asarray(data[self.parsed.outcome], dtype=np.float64)[None, :]
        fam = self.family
        if fam == "bernoulli":
            return np.asarray(-np.logaddexp(0.0, -(2.0 * y - 1.0) * eta), dtype=np.float64)
        if fam == "poisson":
            log_t = np.log(data[self.offset])[None, :] if self.offset is not None else 0.0
            mu_log = eta + log_t
            return np.asarray(y * mu_log - np.exp(mu_log) - special.gammaln(y + 1.0), dtype=np.float64)
        if fam == "gaussian":
            s = float(self.sigma)  # type: ignore[arg-type]
            return np.asarray(-0.5 * ((y - eta) / s) ** 2 - math.log(s * math.sqrt(2 * math.pi)))
        log_k = self._split(theta)[0]
        assert log_k is not None and self.event is not None
        k = np.exp(log_k)[:, None]
        log_t = np.log(y)
        z = k * (log_t - eta)
        delta = np.asarray(data[self.event], dtype=np.float64)[None, :]
        return np.asarray(delta * (log_k[:, None] + z - log_t) - np.exp(z), dtype=np.float64)

    # ---- public bounds (replace-one) ---------------------------------------------------------------------

    def extent(self, beta: F64, u: F64 | None) -> tuple[F64, F64]:
        """(min, max) over every record the schema allows of β·z + u_registry, per proposal (exact)."""
        lin = beta @ self.parsed.corners.T  # (proposals, corners)
        lo, hi = lin.min(axis=1), lin.max(axis=1)
        if u is not None:
            lo, hi = lo + u.min(axis=1), hi + u.max(axis=1)
        return np.asarray(lo), np.asarray(hi)

    def sup_abs(self, beta: F64, u: F64 | None) -> F64:
        lo, hi = self.extent(beta, u)
        return np.asarray(np.maximum(hi, -lo), dtype=np.float64)

    def _bound(self, col: str, which: int) -> float:
        return float(next(c[which] for c in self.columns if c[0] == col))

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        """sup over records the schema allows of |log p(x | θ*) − log p(x | θ)| (the module docstring), raised
        by a relative 1e-12 so that float rounding of a bound that is attained (bernoulli) never leaves it
        below the evaluated change; +inf where an exponential term overflows (no finite bound claimed)."""
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._ratio_bound(theta, theta_star)
        return np.asarray(np.where(np.isnan(out), np.inf, out) * (1.0 + 1e-12), dtype=np.float64)

    def _ratio_bound(self, theta: F64, theta_star: F64) -> F64:
        k0, b0, u0 = self._split(theta)
        k1, b1, u1 = self._split(theta_star)
        du = None if u0 is None or u1 is None else u1 - u0
        fam, y = self.family, self.parsed.outcome
        if fam == "weibull":
            assert k0 is not None and k1 is not None
            e0, e1 = np.exp(k0), np.exp(k1)
            cu = None if u0 is None or u1 is None else e1[:, None] * u1 - e0[:, None] * u0
            lin = self.sup_abs(e1[:, None] * b1 - e0[:, None] * b0, cu)
            t_lo, t_hi = self._bound(y, 1), self._bound(y, 2)
            log_t = max(abs(math.log(t_lo)), abs(math.log(t_hi)))
            pairs = ((e0, b0, u0), (e1, b1, u1))
            surv = [np.exp(kk * (math.log(t_hi) - self.extent(b, u)[0])) for kk, b, u in pairs]
            top = np.maximum(surv[0], surv[1])  # e^Z: the largest (t/λ)^k any allowed record reaches (or inf)
            change = np.abs(e1 - e0) * log_t + lin  # sup |z* - z|, z = k (log t - η)
            survival = np.where(change == 0.0, 0.0, np.minimum(top, top * change))
            out = np.abs(k1 - k0) + change + survival  # |Δ log k| + |Δz| + sup |e^{z*} - e^z|
            return np.asarray(out, dtype=np.float64)
        d = self.sup_abs(b1 - b0, du)
        if fam == "bernoulli":
            return d
        if fam == "poisson":
            t_hi = self._bound(self.offset, 2) if self.offset is not None else 1.0
            h = np.maximum(self.extent(b0, u0)[1], self.extent(b1, u1)[1])
            rate = np.where(d == 0.0, 0.0, t_hi * np.exp(h) * d)  # t_max e^H D (inf when e^H overflows)
            return np.asarray(np.maximum(self._bound(y, 2) * d, rate), dtype=np.float64)
        su = None if u0 is None or u1 is None else u1 + u0
        lo, hi = self.extent(b1 + b0, su)
        level = np.maximum(2.0 * self._bound(y, 2) - lo, hi - 2.0 * self._bound(y, 1))
        return np.asarray(d * level / (2.0 * float(self.sigma) ** 2), dtype=np.float64)  # type: ignore[arg-type]

    def record_replace_range(self, theta: F64, theta_star: F64) -> F64 | None:
        """bernoulli only: the replace-one range of a record's log-ratio (``mechanisms.models.replace_range``)
        over the points (η, η*) of the allowed records, which lie in the hull of the design's corners'
        points (the design is multilinear in the numeric columns: a record's row is a convex combination of
        the corners' rows with the same weights for β and β*), shifted by each registry's (u_j, u*_j) with
        the random intercept (the union over registries: a superset of each one's). Kept between the
        add-remove bound B and 2B (the truth is at least B: r(x, 1) − r(x, 0) = Δη)."""
        if self.family != "bernoulli":
            return None
        from mechanisms.models.replace_range import convex_hull, ratio_ranges

        _, b0, u0 = self._split(theta)
        _, b1, u1 = self._split(theta_star)
        bound = np.asarray(self.record_ratio_bound(theta, theta_star), dtype=np.float64)
        a, b = b0 @ self.parsed.corners.T, b1 @ self.parsed.corners.T  # (proposals, corners)
        polys = []
        for i in range(a.shape[0]):
            ai, bi = a[i], b[i]
            if u0 is not None and u1 is not None:
                ai = (ai[:, None] + u0[i][None, :]).ravel()
                bi = (bi[:, None] + u1[i][None, :]).ravel()
            polys.append(convex_hull(np.column_stack([ai, bi])))
        out = ratio_ranges(polys)
        return np.asarray(np.maximum(bound, np.minimum(2.0 * bound, out)), dtype=np.float64)

    def record_loglik_range(self, theta: F64) -> F64 | None:
        """bernoulli only: log p(y | η) over the allowed records has a range of sup |η| (as the built-in
        logistic model); the other families have none here (rejection sampling under a budget refuses)."""
        if self.family != "bernoulli":
            return None
        _, beta, u = self._split(theta)
        return self.sup_abs(beta, u)

    def public_log_bound(self, n_records: int) -> float | None:
        """0 for bernoulli (every record's likelihood is at most 1); None otherwise."""
        return 0.0 if self.family == "bernoulli" else None

    # ---- the DP warm start's score releases (mechanisms.warmstart) -----------------------------------------

    def _eta_gradients(self, theta: F64 | None) -> F64 | None:
        """v = ∂η/∂θ at every corner of the declared box (and, with the random intercept, for every registry:
        σ_u z_g for log σ_u and σ_u for z_g; weibull's log_shape a 0 here), rows (corners x registries, d);
        None when it depends on θ (the random intercept) and ``theta`` is None."""
        p = self.parsed
        i = 1 if self.family == "weibull" else 0
        head = np.zeros((p.corners.shape[0], i))
        if p.group is None:
            return np.asarray(np.hstack([head, p.corners]), dtype=np.float64)
        if theta is None:
            return None
        th = as_batch(theta, self.d)[0]
        s, z, g = math.exp(float(th[i + self.k])), th[i + self.k + 1 :], len(p.levels)
        rows = []
        for j in range(g):
            extra = np.zeros((p.corners.shape[0], 1 + g))
            extra[:, 0], extra[:, 1 + j] = s * z[j], s
            rows.append(np.hstack([head, p.corners, extra]))
        return np.asarray(np.vstack(rows), dtype=np.float64)

    def _residual_bound(self, theta: F64 | None) -> float | None:
        """sup over allowed records of |∂ log p / ∂η| at θ: 1 (bernoulli: |y − σ(η)|), max(y_max, t_max e^H)
        (poisson: |y − t e^η|, both terms >= 0; H the largest η), max(y_max − η_min, η_max − y_min) / σ²
        (gaussian); None when it depends on θ and ``theta`` is None."""
        if self.family == "bernoulli":
            return 1.0
        if theta is None:
            return None
        _, beta, u = self._split(theta)
        lo, hi = (float(v[0]) for v in self.extent(beta, u))
        y = self.parsed.outcome
        if self.family == "poisson":
            t_hi = self._bound(self.offset, 2) if self.offset is not None else 1.0
            with np.errstate(over="ignore"):
                return max(self._bound(y, 2), t_hi * float(np.exp(hi)))
        level = max(self._bound(y, 2) - lo, hi - self._bound(y, 1), 0.0)
        return level / float(self.sigma) ** 2  # type: ignore[arg-type]

    def score_norm_bound(self, theta: F64 | None = None, basis: F64 | None = None) -> float | None:
        """sup over every record the schema allows of ‖Bᵀ ∇_θ log p(x | θ)‖₂ (B = ``basis``, default the
        identity), for the DP warm start's score releases (``mechanisms.warmstart``: no record's score is
        then clipped). The score is r(x, θ) v(x, θ), r = ∂ log p/∂η bounded by :meth:`_residual_bound` and
        v = ∂η/∂θ affine in each numeric column (the design is multilinear in them, :meth:`_eta_gradients`),
        so ‖Bᵀv‖ is convex in each column and its sup over the box is at a corner: the bound is
        sup r x max over corners of ‖Bᵀv‖. A number at ``theta`` None: the same at every θ (bernoulli
        without a random intercept); None at ``theta`` None: it depends on θ. Weibull (:meth:`_weibull_score`)
        adds its log_shape's score."""
        if self.family == "weibull":
            return self._weibull_score(theta, basis)
        r, v = self._residual_bound(theta), self._eta_gradients(theta)
        if r is None or v is None:
            return None
        if basis is not None:
            v = v @ np.asarray(basis, dtype=np.float64)
        return float(r * np.max(np.linalg.norm(v, axis=1))) * (1.0 + 1e-12)

    def _weibull_score(self, theta: F64 | None, basis: F64 | None) -> float | None:
        """Weibull's score bound at θ: with k = e^{log_shape} and z = k (log t − η) in [z_lo, z_hi] over the
        box (t in the outcome's bounds, η in its extent), ∂ℓ/∂η = k (e^z − δ) in [−k, k e^{z_hi}] and
        ∂ℓ/∂log k = δ (1 + z) − z e^z, at most 1 + |z|_max (1 + e^{z_hi}) in size; the score is
        (∂ℓ/∂log k) e₀ + (∂ℓ/∂η) v, so ‖Bᵀs‖ <= that x ‖Bᵀe₀‖ + k max(1, e^{z_hi}) x max ‖Bᵀv‖ (+inf where
        e^{z_hi} overflows: no finite bound claimed)."""
        v = self._eta_gradients(theta)
        if theta is None or v is None:
            return None
        log_k, beta, u = self._split(theta)
        assert log_k is not None
        k = math.exp(float(log_k[0]))
        lo, hi = (float(x[0]) for x in self.extent(beta, u))
        y = self.parsed.outcome
        z_hi = k * (math.log(self._bound(y, 2)) - lo)
        z_lo = k * (math.log(self._bound(y, 1)) - hi)
        z_abs = max(abs(z_hi), abs(z_lo))
        e_hi = math.exp(z_hi) if z_hi < 700.0 else math.inf
        b = np.eye(self.d) if basis is None else np.asarray(basis, dtype=np.float64)
        v = v @ b
        shape_part = (1.0 + z_abs * (1.0 + e_hi)) * float(np.linalg.norm(b[0]))
        eta_part = k * max(1.0, e_hi) * float(np.max(np.linalg.norm(v, axis=1)))
        return (shape_part + eta_part) * (1.0 + 1e-12)

    def warm_start_jump(self, theta: F64, grad: F64, fisher: F64, n: int) -> tuple[F64, F64] | None:
        """bernoulli with an intercept: the built-in logistic model's public jump from θ = 0
        (``mechanisms.models.logistic.BayesLogistic.warm_start_jump``: at θ = 0 every record's score is
        (y − ½) v, so the intercept's component of the first score release is Σy − n/2; the intercept goes
        to the prevalence's logit, where every record has p = ȳ and the curvature is 4ȳ(1 − ȳ) times the
        released Fisher). None otherwise, away from θ = 0, or for a prevalence between 15 % and 85 %."""
        names = self.parsed.names
        th = np.asarray(theta, dtype=np.float64).reshape(-1)
        if self.family != "bernoulli" or "Intercept" not in names or n < 1 or np.any(th != 0.0):
            return None
        i = names.index("Intercept")
        ybar = float(np.clip(grad[i] / n + 0.5, 0.5 / n, 1.0 - 0.5 / n))
        if 4.0 * ybar * (1.0 - ybar) >= 0.5:
            return None
        out = np.zeros_like(th)
        out[i] = math.log(ybar / (1.0 - ybar))
        return out, np.asarray(4.0 * ybar * (1.0 - ybar) * fisher, dtype=np.float64)


def corner_records(model: FormulaModel) -> dict[str, F64]:
    """Every corner of the declared box as records (tests: the brute force the bound is checked against),
    with every value of the outcome's, the offset's and the event's bounds or values."""
    schema = model.schema
    axes = [sorted(c.values) if c.values is not None else [c.lower, c.upper] for c in schema]
    names = [c.name for c in schema]
    grid = np.array(list(itertools.product(*axes)), dtype=np.float64)
    return {n: np.ascontiguousarray(grid[:, i]) for i, n in enumerate(names)}


__all__ = ["FAMILIES", "FormulaModel", "corner_records"]
