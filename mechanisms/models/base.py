"""The model plug-in interface: what a statistical model must provide to run on the party network.

A model is public code with public hyperparameters. It owns:

* ``param_names`` and box ``lower`` / ``upper`` bounds of the parameter θ (d = len(param_names));
* ``schema``: the columns a party's records must have, each with declared *public* bounds (and whether it
  is integer / which values it may take). Data outside the schema is refused at load time
  (:func:`validate_columns`), because every sensitivity bound below assumes it;
* ``record_log_likelihood(data, theta)`` of shape (proposals, records) and ``log_likelihood(data, theta)``
  of shape (proposals,), vectorised over records and proposals (θ has shape (proposals, d));
* ``log_prior(theta)`` (−inf outside the bounds) and ``sample_prior(rng, n)``;
* ``record_ratio_bound(theta, theta_star)``: a *public* bound, valid for every record the schema allows,
  on |log p(x_i | θ*) − log p(x_i | θ)| (one bound per proposal). The Yıldırım–Ermiş penalty uses
  c(θ, θ*) = 2 × this bound (replace-one). ``None`` means the model has none; use per-record clipping;
* ``record_ratio_range(theta, theta_star)`` (optional): per proposal, sup over records x, x' the schema
  allows of |r(x) − r(x')|, r(x) = log p(x | θ*) − log p(x | θ): how much one replaced record moves ℓ_j,
  never more than 2 × ``record_ratio_bound``. A model that gives it has the penalty use it as c(θ, θ*)
  (``mechanisms.samplers.requests.record_sensitivity``); ``None`` (the default): c = 2 × the bound;
* ``record_replace_range(theta, theta_star)`` (optional): the same sup, certified and tighter than
  2 × the bound, for the replace-one privacy charge only (the penalty's c and its cap are unchanged);
* ``max_log_likelihood(data)``: sup_θ log p(X | θ) for a party's own records (the party's private
  rejection-sampling bound log M_j; it never leaves the party).

Optional, for rejection sampling under a privacy budget (each returns ``None`` when the model has none, and
a registry with a budget then refuses the analysis, naming the method):

* ``record_loglik_range(theta)``: per proposal, sup over records x, x' the schema allows of
  |log p(x | θ) − log p(x' | θ)| — how much one replaced record moves ℓ_j(θ*);
* ``public_log_bound(n)``: an upper bound on sup_θ log p(X | θ) valid for *every* dataset of n records the
  schema allows (a rejection bound that depends on nothing private; 0 for discrete outcomes);
* ``max_log_likelihood_within(data, max_range)``: sup of log p(X | θ) over the θ in the bounds with
  ``record_loglik_range(θ) <= max_range`` (the set a capped rejection sampler proposes from). As a bound it
  moves by at most ``max_range`` when one record is replaced (|sup F − sup F'| ≤ sup |F − F'|), which is
  what lets a registry keep a data-dependent rejection bound and still account for it.

A user adds a model in one file: subclass :class:`Model` (a frozen dataclass whose fields are the model's
public arguments) and name it as ``"package.module:ClassName"`` wherever a model is named (a party's
``allow.models``, a session's model, :func:`load_model`). Pure: no I/O, randomness passed in.
"""

from __future__ import annotations

import importlib
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from mechanisms.models.hierarchy import RandomIntercept

F64 = npt.NDArray[np.float64]
Data = Mapping[str, F64]

MAX_ROWS_SHOWN = 10


class SchemaError(ValueError):
    """Records that do not match a model's schema; the message names the columns and the rows."""


LABEL_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")  # a category's text label: it appears in parameter names


def label_problem(label: object) -> str | None:
    """None if ``label`` can be a category's text label (``F``, ``never-smoker``, ``g.2``), else why not."""
    if isinstance(label, str) and LABEL_RE.match(label):
        return None
    return f"{label!r} is not a usable label (letters, digits, _ . - only: it appears in parameter names)"


@dataclass(frozen=True)
class Column:
    """One column of a party's records, with its declared public bounds.

    ``labels``: a categorical column whose records hold text (``"F"``, ``"M"``): the record's label
    ``labels[k]`` is held as the code k, so ``values`` are the codes 0, 1, ..., len(labels) - 1 (integer,
    within [0, len - 1]); a data source maps the labels to the codes and refuses any other text
    (``parties.sources.base``), :func:`validate_columns` does the same for text columns given in memory and
    takes numbers as the codes (a registry's records once read)."""

    name: str
    lower: float = -np.inf
    upper: float = np.inf
    integer: bool = False
    values: tuple[float, ...] | None = None  # allowed values (e.g. (0, 1) for a binary outcome)
    labels: tuple[str, ...] | None = None  # text labels of the codes in values (None: numbers)

    def __post_init__(self) -> None:
        if self.labels is None:
            return
        codes = tuple(float(k) for k in range(len(self.labels)))
        if not self.labels or self.values != codes or not self.integer:
            raise ValueError(
                f"column {self.name!r}: labels {list(self.labels)} need values = their codes {list(codes)} "
                "and integer = true"
            )
        bad = [why for why in map(label_problem, self.labels) if why is not None]
        if bad or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"column {self.name!r}: {bad[0] if bad else 'a label given twice'}")


def _rows(mask: npt.NDArray[np.bool_]) -> str:
    idx = np.flatnonzero(mask) + 1
    shown = ", ".join(str(int(i)) for i in idx[:MAX_ROWS_SHOWN])
    more = f" and {idx.size - MAX_ROWS_SHOWN} more" if idx.size > MAX_ROWS_SHOWN else ""
    return f"row{'s' if idx.size > 1 else ''} {shown}{more}"


@dataclass(frozen=True)
class Problem:
    """One problem of a party's records: ``what`` is wrong in ``column`` (None: the table as a whole), in the
    rows of ``rows`` (a boolean mask over the records; None: not row-specific). It never holds a value of a
    record except in ``example`` (set only by :func:`validate_columns` for text that is not a number, or not a
    declared label)."""

    column: str | None
    what: str
    rows: npt.NDArray[np.bool_] | None = None
    example: str | None = None

    def text(self) -> str:
        where = f" in {_rows(self.rows)}" if self.rows is not None else ""
        eg = f" (e.g. {self.example!r})" if self.example is not None else ""
        return f"column {self.column!r}: {self.what}{where}{eg}" if self.column is not None else self.what


def _to_float(
    name: str, raw: Any, problems: list[Problem], labels: tuple[str, ...] | None = None
) -> tuple[F64, npt.NDArray[np.bool_]] | None:
    """The column as floats and the mask of its non-numeric rows (reported here; the caller still checks the
    numeric rows, so one bad value does not hide the column's other problems). A labelled column's text is
    its labels' codes; numbers there are taken as the codes."""
    arr = np.asarray(raw)
    if arr.ndim != 1:
        problems.append(Problem(name, f"expected one value per row, got shape {arr.shape}"))
        return None
    if arr.dtype.kind in "fiub":
        return arr.astype(np.float64), np.zeros(arr.shape[0], dtype=bool)
    if labels is not None:
        code = {label: float(k) for k, label in enumerate(labels)}
        items = arr.tolist()
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in items)
        if not numbers:
            out = np.array([code.get(v, 0.0) if isinstance(v, str) else 0.0 for v in items], dtype=np.float64)
            bad = np.array([not (isinstance(v, str) and v in code) for v in items], dtype=bool)
            if bad.any():
                example = str(arr[np.flatnonzero(bad)[0]])
                what = f"labels outside the declared labels {list(labels)}"
                problems.append(Problem(name, what, bad, example))
            return out, bad
    out = np.empty(arr.shape[0], dtype=np.float64)
    bad = np.zeros(arr.shape[0], dtype=bool)
    for i, v in enumerate(arr.tolist()):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            bad[i] = True
            out[i] = 0.0
    if bad.any():
        example = str(arr[np.flatnonzero(bad)[0]])
        problems.append(Problem(name, "non-numeric values", bad, example))
    return out, bad


def schema_problems(
    raw: Mapping[str, Any], schema: Sequence[Column]
) -> tuple[dict[str, F64], list[Problem]]:
    """The float64 columns of ``raw`` that the schema names, and every problem of ``raw`` against the schema
    (see :func:`validate_columns`); the columns are usable only when the list is empty."""
    problems: list[Problem] = []
    out: dict[str, F64] = {}
    lengths = {name: len(np.asarray(col)) for name, col in raw.items()}
    missing = [c.name for c in schema if c.name not in raw]
    if missing:
        problems.append(
            Problem(None, f"missing column{'s' if len(missing) > 1 else ''} {missing}; found {sorted(raw)}")
        )
    needed = {c.name for c in schema if c.name in raw}
    if len({lengths[n] for n in needed}) > 1:
        problems.append(
            Problem(None, f"columns have different lengths: { {n: lengths[n] for n in sorted(needed)} }")
        )
    for col in schema:
        if col.name not in raw:
            continue
        got = _to_float(col.name, raw[col.name], problems, col.labels)
        if got is None:
            continue
        x, non_numeric = got
        nonfinite = ~np.isfinite(x) & ~non_numeric
        if nonfinite.any():
            problems.append(Problem(col.name, "NaN or infinite values", nonfinite))
        ok = ~nonfinite & ~non_numeric  # the rows the remaining checks apply to
        fin = np.where(ok, x, 0.0)
        if col.integer:
            frac = ok & (fin != np.round(fin))
            if frac.any():
                problems.append(Problem(col.name, "non-integer values", frac))
        if col.values is not None:
            bad = ok & ~np.isin(fin, np.asarray(col.values, dtype=np.float64))
            if bad.any():
                allowed = f"codes of the labels {list(col.labels)}" if col.labels else "allowed set"
                problems.append(Problem(col.name, f"values outside the {allowed} {list(col.values)}", bad))
        out_of = ok & ((fin < col.lower) | (fin > col.upper))
        if out_of.any():
            what = f"values outside the declared public bounds [{col.lower:g}, {col.upper:g}]"
            problems.append(Problem(col.name, what, out_of))
        out[col.name] = x
    return out, problems


def validate_columns(raw: Mapping[str, Any], schema: Sequence[Column], where: str = "data") -> dict[str, F64]:
    """Check raw columns (numbers or strings) against a schema; return float64 columns or raise SchemaError.

    Rows are numbered from 1 (the first record; a CSV header is not counted). Every problem is listed:
    missing columns, non-numeric values, NaN / infinity, non-integers in integer columns, values outside
    the declared bounds or the allowed value set. Extra columns are ignored.
    """
    out, problems = schema_problems(raw, schema)
    if problems:
        raise SchemaError(f"{where}: refused: " + "; ".join(p.text() for p in problems))
    return out


class Model(ABC):
    """Base class of model plug-ins (subclasses are frozen dataclasses of public arguments)."""

    name: ClassVar[str] = "model"

    # ---- public description --------------------------------------------------------------------------

    @property
    @abstractmethod
    def param_names(self) -> tuple[str, ...]: ...

    @property
    def d(self) -> int:
        return len(self.param_names)

    @property
    def lower(self) -> F64:
        return np.full(self.d, -np.inf)

    @property
    def upper(self) -> F64:
        return np.full(self.d, np.inf)

    @property
    @abstractmethod
    def schema(self) -> tuple[Column, ...]: ...

    def config(self) -> dict[str, Any]:
        """Provenance: the model's reference and its public arguments."""
        args = asdict(self) if hasattr(self, "__dataclass_fields__") else {}  # type: ignore[call-overload]
        return {"model": f"{type(self).__module__}:{type(self).__qualname__}", "args": args}

    def in_bounds(self, theta: F64) -> npt.NDArray[np.bool_]:
        th = as_batch(theta, self.d)
        return np.all((th > self.lower) & (th < self.upper), axis=1)

    # ---- prior ---------------------------------------------------------------------------------------

    @abstractmethod
    def log_prior(self, theta: F64) -> F64: ...

    @abstractmethod
    def sample_prior(self, rng: np.random.Generator, n: int) -> F64: ...

    # ---- likelihood (party side) ---------------------------------------------------------------------

    @abstractmethod
    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        """log p(x_i | θ_k), shape (proposals, records)."""

    def log_likelihood(self, data: Data, theta: F64) -> F64:
        """Σ_i log p(x_i | θ_k), shape (proposals,). Override with sufficient statistics when possible."""
        return np.asarray(self.record_log_likelihood(data, theta).sum(axis=1), dtype=np.float64)

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        """Public bound on |log p(x | θ*) − log p(x | θ)| over every x the schema allows, per proposal."""
        return None

    def record_ratio_range(self, theta: F64, theta_star: F64) -> F64 | None:
        """Public bound on |r(x) − r(x')| over every x, x' the schema allows, per proposal (None: use 2 × the
        bound), r(x) = log p(x | θ*) − log p(x | θ)."""
        return None

    def record_replace_range(self, theta: F64, theta_star: F64) -> F64 | None:
        """A certified bound on sup over allowed records x, x' of |r(x) − r(x')| per proposal, between the
        add-remove bound and 2 × it, used only by the replace-one privacy charge
        (``requests.step_sensitivity``), never as the penalty's c(θ, θ*) (the sampler is unchanged). None
        (the default): the charge is c(θ, θ*)."""
        return None

    def max_log_likelihood(self, data: Data) -> float | None:
        """sup_θ log p(X | θ) over θ in the bounds (a party's private rejection bound log M_j); optional: only
        rejection sampling with ``bound = "data"`` needs it, and a model without it (None, the default) is
        refused there, naming the method."""
        return None

    def record_loglik_range(self, theta: F64) -> F64 | None:
        """Per proposal: sup over schema-allowed records x, x' of |log p(x | θ) − log p(x' | θ)|."""
        return None

    def public_log_bound(self, n_records: int) -> float | None:
        """A bound on sup_θ log p(X | θ) for every dataset of ``n_records`` records the schema allows."""
        return None

    def max_log_likelihood_within(self, data: Data, max_range: float) -> float | None:
        """sup of log p(X | θ) over θ in the bounds with ``record_loglik_range(θ) <= max_range``."""
        return None

    def likelihood_coordinates(self, theta: F64) -> F64:
        """What the likelihood depends on, per proposal: ψ (n, k) with log p(X | θ) a function of ψ(θ) alone;
        θ itself by default. A model parameterised for its prior says so here: a non-centred random intercept
        (σ, z) enters the likelihood only through u = σ z. Optional: the plain reference posterior of a
        simulation (``simulations.reference``) fits a quadratic to the pooled records' log-likelihood in ψ,
        where it is close to one; with the default it fits one in θ."""
        return as_batch(theta, self.d)

    def from_likelihood_coordinates(self, psi: F64) -> F64:
        """A θ (n, d) with ``likelihood_coordinates(θ) == ψ`` (any one; a right inverse of that map)."""
        return as_batch(psi, self.d)

    def n_records(self, data: Data) -> int:
        return len(data[self.schema[0].name])

    # ---- a registry random intercept (optional: blocked sampling) --------------------------------------

    def random_intercept(self) -> RandomIntercept | None:
        """Where the model's registry random intercept u_j = σ_u z_j sits in θ
        (:class:`mechanisms.models.hierarchy.RandomIntercept`), or None (the default: the model has none).
        A model that returns one is sampled in blocks (``mechanisms.samplers.blocked``): each registry
        updates its own z_j, the coordinator the rest; it must then also give :meth:`covariate_means`."""
        return None

    def offset_uniform_bound(self) -> bool:
        """Whether :meth:`record_ratio_bound` holds uniformly in an additive offset of the linear predictor:
        for every offset o, sup over allowed records of |log p(x | θ*; η + o) − log p(x | θ; η + o)| is at
        most the bound at (θ, θ*) with the random intercept held fixed (e.g. bernoulli: the log-likelihood is
        1-Lipschitz in η, so the bound sup |Δη| does not see the level of η). A blocked run under a privacy
        budget needs it: each registry's terms are evaluated at its own effect, which the coordinator does
        not see (``mechanisms.privacy.charge``). False (the default): no such claim."""
        return False

    def linear_predictor(self, data: Data, theta: F64) -> F64 | None:
        """Optional (blocked sampling's fast path): the linear predictor of every record without the random
        intercept, (proposals, records), such that the log-likelihood is ``log_likelihood_eta`` at it plus
        u_j; None (the default): the registry evaluates ``log_likelihood`` at the full θ instead."""
        return None

    def log_likelihood_eta(self, data: Data, theta: F64, eta: F64) -> F64:
        """Σ_i log p(x_i | η_i, θ) (proposals,) at a given linear predictor η (proposals, records); θ gives
        the parameters other than the coefficients (a shape). Only with :meth:`linear_predictor`."""
        raise NotImplementedError(f"model {self.name!r} has no linear_predictor")

    def record_log_likelihood_eta(self, data: Data, theta: F64, eta: F64) -> F64:
        """log p(x_i | η_i, θ) (proposals, records) at a given linear predictor; with
        :meth:`linear_predictor`."""
        raise NotImplementedError(f"model {self.name!r} has no linear_predictor")

    def covariate_means(self, data: Data, weights: F64 | None = None) -> F64:
        """The mean over ``data``'s records of the design row whose dot product with the coefficients at
        ``random_intercept().beta`` is the linear predictor without u_j (1 for an intercept column), or with
        ``weights`` (rows, records) one weighted mean per row (rows, k): a registry's private centring of
        its own effect. Only a model with a random intercept."""
        raise NotImplementedError(f"model {self.name!r} has no random intercept")

    # ---- synthetic registries (optional) -------------------------------------------------------------

    def synthetic_data(self, rng: np.random.Generator, sizes: tuple[int, ...]) -> list[dict[str, F64]] | None:
        """Public synthetic registries, one dict of schema columns per entry of ``sizes``, drawn from ``rng``
        (the experiment's public data seed) for ``confar run --simulate`` and tests. None (the default):
        the model has none, and ``--simulate`` needs ``[simulate] data`` (one CSV file per registry)."""
        return None

    def check_data(self, raw: Mapping[str, Any], where: str = "data") -> dict[str, F64]:
        """The records as float columns, checked against the schema (:class:`SchemaError` naming the columns
        and rows) and clipped to the model's public bound (:meth:`clip_records`)."""
        return self.check_records(raw, where)[0]

    def check_records(self, raw: Mapping[str, Any], where: str = "data") -> tuple[dict[str, F64], int]:
        """:meth:`check_data` and the number of records the public clipping moved (for a registry's own audit
        log only: a count sent out would be a release)."""
        return self.clip_records(validate_columns(raw, self.schema, where))

    def clip_records(self, data: Data) -> tuple[dict[str, F64], int]:
        """Records moved into the model's public per-record bound (e.g. covariates into a public ellipsoid,
        :mod:`mechanisms.models.ellipsoid`) and how many moved; the default clips nothing. Clipping is a
        modelling choice: the posterior is the posterior of the clipped records."""
        return dict(data), 0


LOGLIK_RECORDS = 5  # likelihood_problem evaluates the model on this many records ...
LOGLIK_DRAWS = 3  # ... at this many parameter values drawn from its prior (public seed 0)


def likelihood_problem(model: Model, columns: Mapping[str, F64]) -> str | None:
    """The model's per-record log-likelihood on the first records at a few prior draws (``confar-party
    check-config``, ``confar run --check``): None if it is a finite (draws, records) array, else what is
    wrong (row numbers, never a record's value)."""
    k = min(LOGLIK_RECORDS, model.n_records(dict(columns))) if columns else 0
    if k == 0:
        return None
    head = {name: np.asarray(col)[:k] for name, col in columns.items()}
    try:
        theta = np.asarray(model.sample_prior(np.random.default_rng(0), LOGLIK_DRAWS), dtype=np.float64)
        ll = np.asarray(model.record_log_likelihood(head, theta), dtype=np.float64)
    except Exception as exc:  # a plug-in's own error, reported with its type
        return f"the log-likelihood at prior draws raised {type(exc).__name__}: {exc}"
    want = (LOGLIK_DRAWS, k)
    if ll.shape != want:
        return f"record_log_likelihood returned shape {ll.shape}, expected (proposals, records) = {want}"
    bad: npt.NDArray[np.bool_] = np.asarray(~np.isfinite(ll).all(axis=0), dtype=bool)
    if bad.any():
        return f"record_log_likelihood is not finite at prior draws in {_rows(bad)}"
    return None


def softplus(x: F64) -> F64:
    """log(1 + e^x) elementwise, as log1p(e^−|x|) + max(x, 0) (exact in floating point where e^x overflows;
    about 2.5x faster than ``np.logaddexp(0, x)`` on large arrays)."""
    out = np.abs(x)
    np.negative(out, out=out)
    np.exp(out, out=out)
    np.log1p(out, out=out)
    out += np.maximum(x, 0.0)
    return np.asarray(out, dtype=np.float64)


def as_batch(theta: npt.ArrayLike, d: int) -> F64:
    """θ as a (proposals, d) float64 array (a single θ of shape (d,) becomes (1, d))."""
    th = np.asarray(theta, dtype=np.float64)
    if th.ndim == 1 and d == th.shape[0]:
        th = th[None, :]
    elif th.ndim == 1 and d == 1:
        th = th[:, None]
    if th.ndim != 2 or th.shape[1] != d:
        raise ValueError(f"theta must have shape (proposals, {d}), got {np.shape(theta)}")
    return th


BUILTIN: dict[str, str] = {
    "beta-bernoulli": "mechanisms.models.beta_bernoulli:BetaBernoulli",
    "gaussian-mean": "mechanisms.models.gaussian_mean:GaussianMean",
    "bayes-logistic": "mechanisms.models.logistic:BayesLogistic",
    "linear-regression": "mechanisms.models.linear:LinearRegression",
    "weibull-regression": "mechanisms.models.weibull:WeibullRegression",
    "logistic-random-intercept": "mechanisms.models.random_effects:LogisticRandomIntercept",
    "formula": "mechanisms.models.formula:FormulaModel",
}


def add_import_path(folders: Sequence[str | Path]) -> None:
    """Put model plug-in folders at the front of this process's import path (``[model] path`` of an
    experiment, ``[allow] model_path`` of a registry), so ``"module:ClassName"`` imports from them."""
    for folder in reversed([str(Path(f).resolve()) for f in folders]):
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    importlib.invalidate_caches()


def resolve_model_class(ref: str) -> type[Model]:
    """A built-in name (``BUILTIN``) or ``"package.module:ClassName"`` -> the Model subclass."""
    target = BUILTIN.get(ref, ref)
    if ":" not in target:
        raise ValueError(
            f"unknown model {ref!r}: use a built-in name {sorted(BUILTIN)} or 'package.module:ClassName'"
        )
    mod_name, _, cls_name = target.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise ValueError(
            f"model {ref!r}: cannot import module {mod_name!r}: {exc} (a plug-in's folder goes in the "
            "experiment's [model] path and in each registry's [allow] model_path, or install it as a package)"
        ) from exc
    cls = getattr(mod, cls_name, None)
    if cls is None:
        known = sorted(
            n for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, Model) and v is not Model
        )
        raise ValueError(
            f"model {ref!r}: module {mod_name} has no class {cls_name!r}"
            + (f" (its Model subclasses: {', '.join(known)})" if known else " (it defines no Model subclass)")
        )
    if not isinstance(cls, type) or not issubclass(cls, Model):
        raise ValueError(
            f"model {ref!r}: {cls_name!r} in {mod_name} is not a mechanisms.models.Model subclass"
        )
    return cls


def load_model(ref: str, args: Mapping[str, Any] | None = None) -> Model:
    """Instantiate a model from its reference and public arguments (e.g. from a config)."""
    cls = resolve_model_class(ref)
    try:
        return cls(**dict(args or {}))
    except TypeError as exc:
        raise ValueError(f"model {ref!r}: bad arguments {dict(args or {})}: {exc}") from exc
