"""AUDIT.toml: the audit's configuration, read and checked in named steps; errors name the file and the key.

AUDIT.toml::

    [audit]
    name = "penalty-sign"     # used in file names
    runs = 20000              # mechanism runs per dataset, in memory
    daemon_runs = 0           # confirmation runs per dataset over real daemons (outside observer only)
    steps = 1                 # K decisions per run (a K-step transcript at the same public proposal)
    confidence = 0.95         # joint confidence of all Clopper-Pearson bounds (Bonferroni)
    delta = 1e-5              # the delta of the stated and the empirical epsilon
    seed = 11                 # the audit's own public sampling (data, canary); recorded in the output
    accountant = "pld"        # pld | renyi: which accountant's reading of the ledger's events is the claim
    # renyi_order = 8.0       # renyi only: the one order of the claim (default: the smallest ε over ORDERS)

    [model]                   # beta-bernoulli or bayes-logistic (synthetic registries, public seed)
    name = "beta-bernoulli"
    [model.params]

    [data]
    parties = 3
    records = 40              # per registry
    data_seed = 7

    [mechanism]
    kind = "mh"               # mh | rejection | abcdp (see svt.py) | warm-start (below)
    reveal = "sign"           # sum | blinded | sign
    # threshold = 1           # the session's Shamir threshold (default (m - 1) // 2)
    # theta = [0.3]           # the current state (mh); default: a pair placed around a = 0 (worst for sign)
    # theta_star = [0.33]
    [mechanism.params]        # the session's model_params as a registry sees them (penalty, lazy, caps, ...)

    [threat]
    colluding = 0             # q: 0 = the coordinator; q >= 1 colluders who know their own noise

``accountant = "pld"`` (the default) claims ε(δ) of the PLD/GDP composition of the events registry 1's
ledger would charge (``mechanisms.privacy.compose_events``); ``"renyi"`` claims what a registry with
``[budget] accountant = "renyi"`` would: the events its ledger charges with ``rdp_orders`` (a fixed-sd
penalty's accept bit in the ``sign`` reveal gets its Rényi bound), spent by ``RDPBudget`` at one order
(``simulations.privacy_audit.claim``). With ``renyi_order`` that order; without it every order of
``renyi.ORDERS`` and the smallest ε — valid for the FIXED, non-adaptive sequence of decisions an audit
runs (a registry's filter fixes its order before the run, ``renyi.budget_order``; the smallest ε is the
strictest claim any of them could back). Kinds ``mh`` and ``rejection`` only.

Kind ``warm-start`` audits one release of the DP warm start (``simulations.privacy_audit.release``): the
noisy sums each registry adds its Gaussian share to, observed as their total (reveal ``sum``), registry 1
holding D or D plus a canary (add-remove). Its noise is what ``confar run`` sets for the ``[warm_start]``
table below (the experiment file's table, the same keys and checks; ``n_records`` defaults to parties x
records), the claim the release's μ as registry 1 charges it (``mechanisms.warmstart.release_mu``)::

    [mechanism]
    kind = "warm-start"
    release = "score"         # moments | score | gradient: which of the warm start's releases
    # theta = [-0.5, 0.3, -0.2]   # the public θ a score or gradient release is evaluated at (default 0)
    [warm_start]
    mu = 1.0                  # the whole warm start's μ against the coordinator (each release gets a share)

It takes ``[model] name = "bayes-logistic"``, ``reveal = "sum"``, ``steps = 1`` and no daemon runs, no
``theta_star`` and no ``[mechanism.params]``; ``[audit] noise_scale`` scales every registry's noise while
the claim stays (TESTING ONLY: a deliberately under-noised registry).

Kind ``worst-record`` audits a registry charging a run at its worst record (``[budget] per_run =
"worst-record"``; ``simulations.privacy_audit.worst``): ``steps`` decisions of an independence sampler's run
(public, fixed before any output) at a fixed-sd penalty, observed in the ``sum`` reveal; registry 1 holds D
or D plus the canary that the run moves most. ``[mechanism] charge = "average-record"`` (TESTING ONLY) claims
the average record's charge instead of the worst's: a broken accountant the audit must flag::

    [mechanism]
    kind = "worst-record"
    # charge = "average-record"
    [mechanism.params]
    penalty = {sd = 1.5, max_sensitivity = 4.0}
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.tables import Reader
from coordinator.warm_start import WarmStartSettings, read_warm_start

F64 = npt.NDArray[np.float64]
MODELS = ("beta-bernoulli", "bayes-logistic")
KINDS = ("mh", "rejection", "abcdp", "warm-start", "worst-record")
CHARGES = ("worst-record", "average-record")
ACCOUNTANTS = ("pld", "renyi")
RELEASES = ("moments", "score", "gradient")


class AuditConfigError(ValueError):
    """A problem in AUDIT.toml, naming the file and the key."""


@dataclass(frozen=True)
class AuditConfig:
    source: Path
    name: str
    runs: int
    daemon_runs: int
    steps: int
    confidence: float
    delta: float
    seed: int
    model_name: str
    model_args: dict[str, Any]
    parties: int
    records: int
    data_seed: int
    kind: str
    reveal: str
    threshold: int
    theta: F64 | None
    theta_star: F64 | None
    params: dict[str, Any]
    colluding: int
    noise_scale: float = 1.0  # TESTING ONLY: each registry's noise multiplied by this (a broken mechanism)
    protocol_runs: int = 0  # abcdp: runs through the SVT protocol in memory (the bulk uses its specification)
    release: str | None = None  # warm-start: the audited release (moments, score or gradient)
    warm_start: WarmStartSettings | None = None  # warm-start: the [warm_start] table that sets its noise
    accountant: str = "pld"  # whose reading of the ledger's events is the claim: "pld" or "renyi"
    charge: str = "worst-record"  # worst-record kind: the claim's charge ("average-record": TESTING ONLY)
    renyi_order: float | None = None  # renyi: the claim's one order (None: the smallest eps over ORDERS)

    @property
    def m(self) -> int:
        return self.parties


@dataclass(frozen=True)
class _Doc:
    """AUDIT.toml as parsed, with typed look-ups whose errors name the file and the key."""

    path: Path
    doc: dict[str, Any]

    def err(self, key: str, msg: str) -> AuditConfigError:
        return AuditConfigError(f"{self.path}: {key}: {msg}")

    def table(self, name: str) -> dict[str, Any]:
        t = self.doc.get(name, {})
        if not isinstance(t, dict):
            raise self.err(name, "must be a table")
        return t

    def get(
        self, t: dict[str, Any], where: str, key: str, typ: type | tuple[type, ...], default: Any = ...
    ) -> Any:
        if key not in t:
            if default is ...:
                raise self.err(f"{where}.{key}", "missing (required)")
            return default
        v = t[key]
        if isinstance(v, bool) and typ is not bool:
            raise self.err(f"{where}.{key}", f"must be {typ}, got {v!r}")
        if typ is float and isinstance(v, int):
            v = float(v)
        if not isinstance(v, typ):
            raise self.err(f"{where}.{key}", f"wrong type: got {type(v).__name__}")
        return v

    def only(self, t: dict[str, Any], where: str, keys: set[str]) -> None:
        extra = sorted(set(t) - keys)
        if extra:
            raise self.err(f"{where}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(keys))})")


def _read(path: Path) -> _Doc:
    """The parsed file, its top-level tables checked."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AuditConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise AuditConfigError(f"{path}: not valid TOML: {exc}") from exc
    r = _Doc(path, doc)
    allowed = {"audit", "model", "data", "mechanism", "threat", "warm_start"}
    for k in doc:
        if k not in allowed:
            raise r.err(k, f"unknown table (allowed: {', '.join(sorted(allowed))})")
    return r


def _check_keys(r: _Doc) -> None:
    """Every table is a table and holds only the keys of the schema."""
    a, mo, da, me, th = (r.table(name) for name in ("audit", "model", "data", "mechanism", "threat"))
    r.only(
        a,
        "audit",
        {"name", "runs", "daemon_runs", "protocol_runs", "steps", "confidence", "delta", "seed"}
        | {"noise_scale", "accountant", "renyi_order"},
    )
    r.only(mo, "model", {"name", "params"})
    r.only(da, "data", {"parties", "records", "data_seed"})
    r.only(
        me, "mechanism", {"kind", "reveal", "threshold", "theta", "theta_star", "params", "release", "charge"}
    )
    r.only(th, "threat", {"colluding"})


def _sampling(r: _Doc) -> dict[str, Any]:
    """[audit]: runs, daemon_runs, steps, confidence, delta and noise_scale, each in its range."""
    a = r.table("audit")
    runs = r.get(a, "audit", "runs", int, 20_000)
    if not 100 <= runs <= 10_000_000:
        raise r.err("audit.runs", f"must be in 100..10000000, got {runs}")
    daemon_runs = r.get(a, "audit", "daemon_runs", int, 0)
    if not 0 <= daemon_runs <= 1_000_000:
        raise r.err("audit.daemon_runs", f"must be in 0..1000000, got {daemon_runs}")
    steps = r.get(a, "audit", "steps", int, 1)
    if not 1 <= steps <= 1000:
        raise r.err("audit.steps", f"must be in 1..1000, got {steps}")
    confidence = r.get(a, "audit", "confidence", float, 0.95)
    if not 0.5 <= confidence < 1:
        raise r.err("audit.confidence", f"must lie in [0.5, 1), got {confidence}")
    delta = r.get(a, "audit", "delta", float, 1e-5)
    if not 0 < delta < 1:
        raise r.err("audit.delta", f"must lie in (0, 1), got {delta}")
    noise_scale = r.get(a, "audit", "noise_scale", float, 1.0)
    if not 0 < noise_scale <= 10:
        raise r.err("audit.noise_scale", f"must lie in (0, 10], got {noise_scale}")
    return {
        "runs": runs,
        "daemon_runs": daemon_runs,
        "steps": steps,
        "confidence": confidence,
        "delta": delta,
        "noise_scale": noise_scale,
    }


def _model_and_data(r: _Doc) -> dict[str, Any]:
    """[mechanism] kind, [model] and [data] sizes."""
    mo, da = r.table("model"), r.table("data")
    kind = r.get(r.table("mechanism"), "mechanism", "kind", str, "mh")
    if kind not in KINDS:
        raise r.err("mechanism.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "abcdp" and mo:
        raise r.err("model", "kind 'abcdp' audits federated ABCDP on 1-d records: remove [model]")
    model_name = r.get(mo, "model", "name", str, "beta-bernoulli" if kind == "abcdp" else ...)
    if model_name not in MODELS:
        raise r.err("model.name", f"the audit builds synthetic registries for {MODELS}, got {model_name!r}")
    if kind in ("warm-start", "worst-record") and model_name != "bayes-logistic":
        raise r.err("model.name", f"kind {kind!r} audits bayes-logistic, got {model_name!r}")
    model_args = dict(r.get(mo, "model", "params", dict, {}))
    parties = r.get(da, "data", "parties", int, 3)
    if not 2 <= parties <= 15:
        raise r.err("data.parties", f"must be in 2..15, got {parties}")
    records = r.get(da, "data", "records", int, 40)
    if not 2 <= records <= 100_000:
        raise r.err("data.records", f"must be in 2..100000, got {records}")
    return {
        "kind": kind,
        "model_name": model_name,
        "model_args": model_args,
        "parties": parties,
        "records": records,
    }


def _reveal_and_threat(r: _Doc, kind: str, parties: int, steps: int) -> dict[str, Any]:
    """[mechanism] reveal and threshold, [audit] protocol_runs and [threat], checked against each other."""
    a, me, th = r.table("audit"), r.table("mechanism"), r.table("threat")
    default = {"abcdp": "svt", "warm-start": "sum", "worst-record": "sum"}.get(kind, "sign")
    reveal = r.get(me, "mechanism", "reveal", str, default)
    allowed = {"abcdp": ("svt",), "warm-start": ("sum",), "worst-record": ("sum",)}.get(
        kind, ("sum", "blinded", "sign")
    )
    if reveal not in allowed:
        want = "sum, blinded or sign" if len(allowed) > 1 else allowed[0]
        raise r.err("mechanism.reveal", f"must be {want}, got {reveal!r}")
    protocol_runs = r.get(a, "audit", "protocol_runs", int, 0)
    if not 0 <= protocol_runs <= 1_000_000 or (protocol_runs and kind != "abcdp"):
        raise r.err("audit.protocol_runs", "abcdp only: runs through the SVT protocol in memory, 0..1000000")
    threshold = r.get(me, "mechanism", "threshold", int, (parties - 1) // 2)
    if kind == "abcdp" and bool(th.get("colluding", 0)):
        raise r.err("threat.colluding", "the ABCDP audit observes the SVT bits of the coordinator only")
    if reveal != "sum" and not 1 <= threshold <= (parties - 1) // 2:
        raise r.err("mechanism.threshold", f"{reveal!r} needs 1 <= t < m/2, got {threshold}")
    colluding = r.get(th, "threat", "colluding", int, 0)
    if not 0 <= colluding <= parties - 1:
        raise r.err("threat.colluding", f"must be in 0..{parties - 1}, got {colluding}")
    if colluding and reveal == "blinded":
        raise r.err("threat.colluding", "the audit observes colluders' noise for sum and sign only")
    if steps > 1 and reveal == "blinded":
        raise r.err("audit.steps", "multi-step audits take sum or sign (their per-step laws are known)")
    return {"reveal": reveal, "protocol_runs": protocol_runs, "threshold": threshold, "colluding": colluding}


def _thetas(r: _Doc) -> dict[str, F64 | None]:
    """[mechanism] theta and theta_star: lists of numbers, or absent."""
    me = r.table("mechanism")
    arrs: dict[str, F64 | None] = {}
    for key in ("theta", "theta_star"):
        v = me.get(key)
        if v is None:
            arrs[key] = None
            continue
        if not (isinstance(v, list) and v and all(isinstance(x, int | float) for x in v)):
            raise r.err(f"mechanism.{key}", "must be a list of numbers")
        arrs[key] = np.asarray(v, dtype=np.float64)
    return arrs


def _warm_start(r: _Doc, kind: str, parties: int, records: int, sampling: dict[str, Any]) -> dict[str, Any]:
    """[mechanism] release and [warm_start] (read as the experiment file's table) for kind warm-start;
    refused for the other kinds, as are the keys a release audit does not take."""
    me, ws = r.table("mechanism"), r.table("warm_start")
    if kind != "warm-start":
        for where, present in (("mechanism.release", "release" in me), ("warm_start", bool(ws))):
            if present:
                raise r.err(where, "kind 'warm-start' only")
        return {}
    release = r.get(me, "mechanism", "release", str)
    if release not in RELEASES:
        raise r.err("mechanism.release", f"must be one of {', '.join(RELEASES)}, got {release!r}")
    for key in ("theta_star", "params"):
        if key in me:
            raise r.err(f"mechanism.{key}", "a warm-start audit takes none ([warm_start] sets its noise)")
    if "theta" in me and release == "moments":
        raise r.err("mechanism.theta", "a moments release is evaluated at no theta")
    if sampling["steps"] != 1:
        raise r.err("audit.steps", "a warm-start audit observes one release per run: must be 1")
    if sampling["daemon_runs"]:
        raise r.err("audit.daemon_runs", "a warm-start audit runs in memory only: must be 0")
    if not ws:
        raise r.err("warm_start", "missing table: kind 'warm-start' needs the [warm_start] of its noise")
    settings = read_warm_start(Reader(r.path, r.path.parent, AuditConfigError), ws, parties * records)
    if release == "moments" and settings.ellipsoid is None:
        raise r.err("mechanism.release", "warm_start.ellipsoid = false: the warm start releases no moments")
    if release == "gradient" and settings.steps < 3:
        raise r.err("mechanism.release", "only a warm start of 3 or more steps releases gradients")
    return {"release": release, "warm_start": settings}


def _accountant(r: _Doc, kind: str) -> dict[str, Any]:
    """[audit] accountant and renyi_order: which accountant's ε is the claim (and at which Rényi order)."""
    a = r.table("audit")
    accountant = r.get(a, "audit", "accountant", str, "pld")
    if accountant not in ACCOUNTANTS:
        raise r.err("audit.accountant", f'must be "pld" or "renyi", got {accountant!r}')
    if accountant == "renyi" and kind not in ("mh", "rejection"):
        why = f"'renyi' audits the ledger's events of kinds mh and rejection, not {kind!r}"
        raise r.err("audit.accountant", why)
    order = r.get(a, "audit", "renyi_order", float, None)
    if order is not None and accountant != "renyi":
        raise r.err("audit.renyi_order", 'only with accountant = "renyi"')
    if order is not None and not (1 < order <= 1000):
        raise r.err("audit.renyi_order", f"must lie in (1, 1000], got {order}")
    return {"accountant": accountant, "renyi_order": order}


def _worst_record(r: _Doc, kind: str, sampling: dict[str, Any]) -> dict[str, Any]:
    """[mechanism] charge for kind worst-record (refused for the other kinds), and what that kind takes."""
    me = r.table("mechanism")
    if kind != "worst-record":
        if "charge" in me:
            raise r.err("mechanism.charge", "kind 'worst-record' only")
        return {}
    charge = r.get(me, "mechanism", "charge", str, "worst-record")
    if charge not in CHARGES:
        raise r.err("mechanism.charge", f"must be one of {', '.join(CHARGES)}, got {charge!r}")
    for key in ("theta", "theta_star"):
        if key in me:
            raise r.err(f"mechanism.{key}", "a worst-record audit's steps are an independence sampler's run")
    if sampling["steps"] < 2:
        raise r.err("audit.steps", "a worst-record audit observes a run of decisions: must be >= 2")
    if sampling["daemon_runs"]:
        raise r.err("audit.daemon_runs", "a worst-record audit runs in memory only: must be 0")
    penalty = me.get("params", {}).get("penalty") if isinstance(me.get("params"), dict) else None
    if not (isinstance(penalty, dict) and "sd" in penalty and "max_sensitivity" in penalty):
        raise r.err(
            "mechanism.params.penalty", "kind 'worst-record' needs a penalty with sd and max_sensitivity"
        )
    return {"charge": charge}


def load_audit(path: str | Path) -> AuditConfig:
    """Read and check AUDIT.toml (schema in the module docstring); errors name the file and the key."""
    path = Path(path)
    r = _read(path)
    _check_keys(r)
    sampling = _sampling(r)
    md = _model_and_data(r)
    rt = _reveal_and_threat(r, md["kind"], md["parties"], sampling["steps"])
    thetas = _thetas(r)
    ws = _warm_start(r, md["kind"], md["parties"], md["records"], sampling)
    acc = _accountant(r, md["kind"])
    wr = _worst_record(r, md["kind"], sampling)
    params = dict(r.get(r.table("mechanism"), "mechanism", "params", dict, {}))
    a = r.table("audit")
    return AuditConfig(
        source=path,
        name=r.get(a, "audit", "name", str, path.stem),
        seed=r.get(a, "audit", "seed", int, 11),
        data_seed=r.get(r.table("data"), "data", "data_seed", int, 7),
        params=params,
        **sampling,
        **md,
        **rt,
        theta=thetas["theta"],
        theta_star=thetas["theta_star"],
        **ws,
        **acc,
        **wr,
    )
