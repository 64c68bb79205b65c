"""The experiment file of ``confar run``: one TOML that says what to fit, with whom, how, and at what privacy.

Everything is checked here before any party is contacted: unknown keys, wrong types, out-of-range numbers
and impossible combinations are refused with :class:`ExperimentError`, whose message names the file and
the dotted key path (``confar run`` exits with code 2). Relative paths resolve against the file's folder.
The ``[coordinator]`` and ``[[parties]]`` tables are those of PLAN.toml (``coordinator/privacy.py``), read
by the same functions (:func:`read_coordinator`, :func:`read_parties`).

EXPERIMENT.toml::

    [experiment]
    name = "logistic-mh"            # letters, digits, . _ - (used in file names)
    output_dir = "out/logistic-mh"  # where outputs and the checkpoint go
    seed = 2025                     # PUBLIC seed: starting points and proposals only. Secret noise (the
                                    # parties' Gamma / Gaussian / Laplace shares) never comes from it.

    [coordinator]                   # as in PLAN.toml
    identity = "coordinator"        # optional, default "coordinator"
    cert = "certs/coordinator.pem"  # cert / key / ca: required unless insecure = true
    key = "certs/coordinator.key"
    ca = "certs/ca.pem"
    insecure = false                # plaintext gRPC (local experiments only)
    rpc_timeout_s = 30.0

    [[parties]]                     # one per party, ids 1..m without gaps or repeats, 2 <= m <= 15
    id = 1
    identity = "party-1"            # optional, default "party-<id>"
    address = "127.0.0.1:50051"

    [model]                         # not used by kind = "abcdp" (its model is sampler.simulator)
    name = "bayes-logistic"         # built-in (beta-bernoulli, bayes-logistic, linear-regression,
                                    # weibull-regression, logistic-random-intercept)
                                    # or a plug-in "package.module:ClassName" (docs/MODELS.md)
    path = "models"                 # optional: folder(s) of plug-in modules, put on the import path
                                    # (relative to this file; --simulate gives the daemons the same)
    [model.params]                  # THE place of the model's public arguments (checked by the model
    p = 4                           # class); a registry whose [data] names the same model with other
                                    # [data.model_args] refuses the session, naming both

    [sampler]
    kind = "mh"                     # mh | adaptive-mh | penalty | rejection | abcdp
    # mh, adaptive-mh, penalty (random-walk Metropolis-Hastings, one Evaluate step per iteration; every
    # chain's decision of an iteration travels in the same batch):
    chains = 16                     # 1..4096
    iterations = 2000               # per chain, including warmup
    warmup = 1000                   # first draws kept as warmup (alias: burn_in); default iterations // 2
    proposal_scale = 0.1            # random-walk sd (cov = scale^2 I), or:
    # proposal_cov = [[...], ...]   # a d x d symmetric positive-definite covariance
    init = "prior"                  # "prior" (a draw from the prior per chain, from the public seed),
                                    # [theta] for every chain, or [[theta], ...] one per chain
    init_scale = 0.1                # with init = "prior": start at init_scale x the prior draw (default 1)
    # adaptive-mh (Haario et al.; mechanisms.samplers.AdaptiveMH): adapt_start (default iterations // 10),
    #   adapt_every (iterations // 40), adapt_stop (iterations // 2), history_from (iterations // 20);
    #   warmup must be >= adapt_stop (only draws of the frozen kernel are posterior draws); final =
    #   "random-walk" (default) | "independence" (from adapt_stop on, proposals N(mean, k^2 cov) fitted to
    #   the history, k = independence_scale, default 1: nearly independent draws per decision). The penalty
    #   kind takes these keys too (then it is adaptive).
    # mh, adaptive-mh: lazy = 0.5 (optional; reveal sign, sign_precompute inline): accept only if the MH
    #   test passes AND a secret coin with P(1) = lazy comes up, made inside the protocol (gamma = k / 2^L,
    #   L <= 16); the chain stays exact (lazy MH is reversible), mixing slows by 1/gamma, and each step is
    #   charged at a bounded accept-bit loss. Needs max_sensitivity (the public cap on c(theta, theta*) =
    #   2 x the model's per-record bound; larger steps are rejected without asking the parties).
    # penalty (Yildirim-Ermis; each party adds N(0, sigma^2), sigma = tau n^alpha c(theta, theta*)):
    #   tau (required: the noise scale), alpha (default 0), n_records (required: public total n),
    #   c = "bound" (default; the model's public per-record bound) | "clip" (needs b > 0),
    #   max_sensitivity (optional: a public cap on c(theta, theta*); larger steps are rejected without
    #   asking the parties, which keeps the posterior, and the registries then charge each step at its
    #   confidential amplification, not only the Gaussian bound).
    # rejection (proposals from the prior; each party's bound stays private):
    #   n_accept, max_proposals, batch_size (proposals per Evaluate step), log_bound_margin (default 0:
    #   each party inflates its bound by e^margin, so a <= -m margin; the acceptance rate falls by
    #   e^(m margin)), bound = "data" (each party's maximum likelihood) | "public" (the model's bound for
    #   any data of that size: leaks nothing, accepts far less), max_sensitivity (a public cap on a
    #   proposal's per-record log-likelihood range; proposals beyond it are rejected publicly, so the draws
    #   are exact for the prior restricted to that set; needed by a registry with a budget), lazy (gamma:
    #   lazy rejection sampling = rejection sampling with bound M / gamma, sign reveal).
    # abcdp (federated ABCDP with the sparse vector technique; reveal.mode must be "svt"):
    #   simulator ("toy": ABCDP section 6.1 mixture), eps_abc, eps_total (inf: no noise), c (accepts),
    #   resample (bool), n_features (even), bandwidth, n_records (public total N; also the simulated
    #   data size), batch_size, max_proposals. Resumable like the samplers (checkpoint after every step;
    #   each registry charges the run's eps once per run and keeps its SVT state per run step).

    [reveal]
    mode = "sign"                   # sum | blinded | sign | svt  (blinded, sign and svt need m >= 3)
    topology = "mesh"               # mesh | relay
    threshold = 1                   # optional; default (m - 1) // 2; blinded/sign/svt need 1 <= t < m / 2
    sign_precompute = "inline"      # sign only: inline (7 rounds, default) | pooled (9 rounds, each public
                                    # square root computed once: less CPU per decision, two more rounds)

    [privacy]                       # optional: the target this run must fit, checked with every party's
    gdp_mu = 1.0                    # PlanPrivacy dry run before the session opens; gdp_mu, or
    # epsilon = 3.0                 # epsilon and delta (0 < delta < 1).
    # delta = 1e-6                  # Only a sampler with a privacy bound can have a target
                                    # (penalty, abcdp); each party's own budget applies in any case.

    [output]
    formats = ["netcdf", "csv", "summary", "plots", "privacy", "provenance"]   # default: all

    [simulate]                      # optional: what `confar run --simulate` starts locally (LocalConsortium)
    parties = 7                     # m (default: the number of [[parties]], else 3)
    records = 2000                  # records per party (an integer, or one per party)
    data_seed = 7                   # seed of the synthetic data (default: experiment.seed)
    fixed_noise_keys = false        # TESTING ONLY: parties' noise repeatable (never for real data)
    party_gdp_mu = 2.0              # optional: each simulated party's GDP budget, or
    # party_epsilon = 50.0          # its eps-at-delta budget (with party_delta); else none
    # party_delta = 1e-5
    # party_colluding = 3           # optional: [budget] colluding of every party (default "all": m - 1)
    sources = ["csv", "postgresql", "sparql"]   # optional: where each registry keeps its records (one per
                                    # party, or one for all; default "csv"): csv, parquet, sqlite,
                                    # postgresql (a throwaway local cluster), sparql (a local Oxigraph
                                    # server, FAIRVASC-like RDF); read by each daemon through [data]
    data = ["r1.csv", "r2.csv", "r3.csv"]  # optional: each registry's records from these files (CSV with a
                                    # header, or Parquet; one per party, not with records); default: the
                                    # model's synthetic_data(rng, sizes), which a plug-in may define

With ``[simulate]`` present, ``[coordinator]`` and ``[[parties]]`` may be left out (a simulated consortium
brings its own certificates and addresses).
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import PartyEndpoint
from hss.fixedpoint import max_threshold
from hss.modes import FEATURES, REVEAL_MODES, reveal_mode
from hss.protocols import SIGN_PRECOMPUTE
from mechanisms.models.base import Model, add_import_path, load_model
from mechanisms.samplers.requests import Lazy, Penalty
from proto.spec import default_identity, identity_problem
from proto.tls import TlsError, TlsMaterial

F64 = npt.NDArray[np.float64]

KINDS = ("mh", "adaptive-mh", "penalty", "rejection", "abcdp")
MH_KINDS = ("mh", "adaptive-mh", "penalty")
TOPOLOGIES = ("mesh", "relay")
FORMATS = ("netcdf", "csv", "summary", "plots", "privacy", "provenance")
SIMULATORS = ("toy",)  # federated ABCDP simulators wired to `confar run`
SIMULATOR_DIMS = {"toy": 1}  # dimension of one record of Y*
M_MIN, M_MAX = 2, 15
MAX_CHAINS = 4096
MAX_BATCH = 2**20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

SIMULATE_SOURCES = ("csv", "parquet", "sqlite", "postgresql", "sparql")  # simulations/registries.py
TABLES = (
    "experiment",
    "coordinator",
    "parties",
    "model",
    "sampler",
    "reveal",
    "privacy",
    "output",
    "simulate",
)
MH_KEYS = {
    "kind",
    "chains",
    "iterations",
    "warmup",
    "burn_in",
    "proposal_scale",
    "proposal_cov",
    "init",
    "init_scale",
}
LAZY_KEYS = {"lazy", "max_sensitivity"}
ADAPT_KEYS = {"adapt_start", "adapt_every", "adapt_stop", "history_from", "final", "independence_scale"}
SAMPLER_KEYS: dict[str, set[str]] = {
    "mh": MH_KEYS | LAZY_KEYS,
    "adaptive-mh": MH_KEYS | LAZY_KEYS | ADAPT_KEYS,
    "penalty": MH_KEYS | ADAPT_KEYS | {"tau", "alpha", "n_records", "c", "b", "max_sensitivity"},
    "rejection": {
        "kind",
        "n_accept",
        "max_proposals",
        "batch_size",
        "log_bound_margin",
        "bound",
        "max_sensitivity",
        "lazy",
    },
    "abcdp": {
        "kind",
        "simulator",
        "eps_abc",
        "eps_total",
        "c",
        "resample",
        "n_features",
        "bandwidth",
        "n_records",
        "batch_size",
        "max_proposals",
    },
}


class ExperimentError(ValueError):
    """A problem in the experiment file; the message names the file and the dotted key path."""


Err = Callable[[str, str], ExperimentError]


# ---- shared with PLAN.toml (coordinator/privacy.py) --------------------------------------------------------


class Reader:
    """Typed access to TOML tables with errors naming ``<file>: <dotted.key>: <problem>``."""

    def __init__(self, source: Path, base_dir: Path, error: type[ValueError] = ExperimentError) -> None:
        self.source, self.base_dir, self.error = source, base_dir, error

    def err(self, key: str, msg: str) -> ValueError:
        return self.error(f"{self.source}: {key}: {msg}")

    def table(self, doc: dict[str, Any], key: str, required: bool = False) -> dict[str, Any] | None:
        v = doc.get(key)
        if v is None:
            if required:
                raise self.err(key, "missing table (required)")
            return None
        if not isinstance(v, dict):
            raise self.err(key, "must be a table")
        return v

    def only(self, tbl: dict[str, Any], where: str, allowed: set[str] | tuple[str, ...]) -> None:
        extra = sorted(set(tbl) - set(allowed))
        if extra:
            raise self.err(f"{where}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def get(
        self, tbl: dict[str, Any], where: str, key: str, typ: type | tuple[type, ...], default: Any = ...
    ) -> Any:
        if key not in tbl:
            if default is ...:
                raise self.err(f"{where}.{key}", "missing (required)")
            return default
        v = tbl[key]
        ok = isinstance(v, typ) and not (isinstance(v, bool) and typ is not bool and bool not in _tuple(typ))
        if not ok:
            raise self.err(f"{where}.{key}", f"has the wrong type: {v!r} (expected {_type_name(typ)})")
        return v

    def number(
        self,
        tbl: dict[str, Any],
        where: str,
        key: str,
        default: Any = ...,
        *,
        gt: float | None = None,
        ge: float | None = None,
        lt: float | None = None,
        allow_inf: bool = False,
    ) -> Any:
        v = self.get(tbl, where, key, (int, float), default)
        if v is None or (key not in tbl and default is not ...):
            return v
        x = float(v)
        if math.isnan(x) or (math.isinf(x) and not allow_inf):
            raise self.err(f"{where}.{key}", f"must be a finite number, got {v!r}")
        if gt is not None and not x > gt:
            raise self.err(f"{where}.{key}", f"must be > {gt:g}, got {v!r}")
        if ge is not None and not x >= ge:
            raise self.err(f"{where}.{key}", f"must be >= {ge:g}, got {v!r}")
        if lt is not None and not x < lt:
            raise self.err(f"{where}.{key}", f"must be < {lt:g}, got {v!r}")
        return x

    def integer(
        self,
        tbl: dict[str, Any],
        where: str,
        key: str,
        default: Any = ...,
        *,
        lo: int = 0,
        hi: int | None = None,
    ) -> Any:
        v = self.get(tbl, where, key, int, default)
        if v is None or (key not in tbl and default is not ...):
            return v
        if v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise self.err(f"{where}.{key}", f"must be in {rng}, got {v}")
        return int(v)

    def choice(
        self, tbl: dict[str, Any], where: str, key: str, choices: tuple[str, ...], default: Any = ...
    ) -> str:
        v = self.get(tbl, where, key, str, default)
        if v not in choices:
            raise self.err(f"{where}.{key}", f"must be one of {', '.join(choices)}, got {v!r}")
        return str(v)

    def path(self, value: str) -> Path:
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def _tuple(typ: type | tuple[type, ...]) -> tuple[type, ...]:
    return typ if isinstance(typ, tuple) else (typ,)


def _type_name(typ: type | tuple[type, ...]) -> str:
    names = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "table"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(typ))


@dataclass(frozen=True)
class CoordinatorSettings:
    identity: str = "coordinator"
    insecure: bool = False
    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    rpc_timeout_s: float = 30.0

    def tls(self, error: type[ValueError] = ExperimentError, source: str = "") -> TlsMaterial | None:
        """Load the coordinator's TLS material (None when insecure); errors name coordinator.<key>."""
        if self.insecure:
            return None
        pre = f"{source}: " if source else ""
        for k, p in (("cert", self.cert), ("key", self.key), ("ca", self.ca)):
            if p is None:
                raise error(f"{pre}coordinator.{k}: missing (required unless insecure = true)")
            if not p.is_file():
                raise error(f"{pre}coordinator.{k}: file {p} does not exist")
        assert self.cert is not None and self.key is not None and self.ca is not None
        try:
            return TlsMaterial.load(self.cert, self.key, self.ca, expect_identity=self.identity)
        except TlsError as exc:
            raise error(f"{pre}coordinator: {exc}") from exc


def read_coordinator(r: Reader, coord: dict[str, Any] | None, need_files: bool = True) -> CoordinatorSettings:
    """The ``[coordinator]`` table (PLAN.toml and EXPERIMENT.toml)."""
    coord = coord or {}
    r.only(coord, "coordinator", ("identity", "cert", "key", "ca", "insecure", "rpc_timeout_s"))
    identity = r.get(coord, "coordinator", "identity", str, "coordinator")
    if identity_problem(identity) is not None:
        raise r.err("coordinator.identity", f"{identity!r} is not a valid certificate name")
    insecure = r.get(coord, "coordinator", "insecure", bool, False)
    timeout = r.number(coord, "coordinator", "rpc_timeout_s", 30.0, gt=0.0)
    files: dict[str, Path | None] = {}
    for k in ("cert", "key", "ca"):
        v = r.get(coord, "coordinator", k, str, None)
        if v is None and not insecure and need_files:
            raise r.err(f"coordinator.{k}", "missing (required unless insecure = true)")
        files[k] = None if v is None else r.path(v)
    return CoordinatorSettings(identity, insecure, files["cert"], files["key"], files["ca"], float(timeout))


def read_parties(r: Reader, raw: Any, required: bool = True) -> list[PartyEndpoint]:
    """The ``[[parties]]`` array (PLAN.toml and EXPERIMENT.toml): ids 1..m without gaps or repeats."""
    if raw is None and not required:
        return []
    if not isinstance(raw, list) or not raw:
        raise r.err("parties", "needs at least one [[parties]] table")
    parties: list[PartyEndpoint] = []
    for i, pt in enumerate(raw):
        where = f"parties[{i}]"
        if not isinstance(pt, dict):
            raise r.err(where, "must be a table")
        r.only(pt, where, ("id", "identity", "address"))
        pid = r.integer(pt, where, "id", lo=1)
        ident = r.get(pt, where, "identity", str, default_identity(pid))
        if identity_problem(ident) is not None:
            raise r.err(f"{where}.identity", f"{ident!r} is not a valid certificate name")
        addr = r.get(pt, where, "address", str)
        if ":" not in addr or not addr.rsplit(":", 1)[1].isdigit():
            raise r.err(f"{where}.address", f"must be host:port, got {addr!r}")
        parties.append(PartyEndpoint(pid, ident, addr))
    ids = [p.id for p in parties]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise r.err("parties", f"duplicate party id {dup[0]}")
    if sorted(ids) != list(range(1, len(ids) + 1)):
        raise r.err("parties", f"ids must be 1..m without gaps, got {sorted(ids)}")
    names = [p.identity for p in parties]
    if len(set(names)) != len(names):
        raise r.err("parties", f"party identities must be distinct, got {names}")
    return sorted(parties, key=lambda p: p.id)


# ---- the experiment ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplerSettings:
    kind: str
    # MH kinds
    chains: int = 1
    iterations: int = 0
    warmup: int = 0
    proposal_cov: F64 | None = None
    init: str | F64 = "prior"  # "prior" or (chains, d)
    init_scale: float = 1.0  # init = "prior": chains start at init_scale x a prior draw
    adapt_start: int = 0
    adapt_every: int = 1
    adapt_stop: int = 0
    final: str = "random-walk"  # adaptive: the fixed kernel after adapt_stop (random-walk | independence)
    independence_scale: float = 1.0
    history_from: int = 0
    penalty: Penalty | None = None
    lazy: Lazy | None = None  # lazy acceptance (sign reveal): a secret coin of probability gamma
    # rejection
    n_accept: int = 0
    max_proposals: int = 0
    batch_size: int = 0
    log_bound_margin: float = 0.0
    rejection_bound: str = "data"  # "data" (each party's maximum likelihood) | "public" (the model's)
    max_sensitivity: float | None = None  # rejection: public cap on a proposal's per-record range
    # abcdp: the public run parameters (FederatedSvtPlan keys; see coordinator/abcdp.py)
    abcdp: dict[str, Any] = field(default_factory=dict)
    simulator: str = ""

    @property
    def adaptive(self) -> bool:
        """Adaptive MH (kind adaptive-mh, or penalty with the adapt_* keys)."""
        return self.adapt_stop > 0

    @property
    def batches(self) -> int:
        """Upper bound on the Evaluate steps of the whole run (the privacy plan's batch count)."""
        if self.kind in MH_KINDS:
            return self.iterations
        return -(-self.max_proposals // self.batch_size)

    @property
    def decisions_per_batch(self) -> int:
        return self.chains if self.kind in MH_KINDS else self.batch_size


@dataclass(frozen=True)
class PrivacyTarget:
    gdp_mu: float | None = None
    epsilon: float | None = None
    delta: float | None = None

    def text(self) -> str:
        if self.gdp_mu is not None:
            return f"mu = {self.gdp_mu:g} GDP"
        return f"eps = {self.epsilon:g} at delta = {self.delta:g}"


@dataclass(frozen=True)
class SimulateSettings:
    parties: int
    records: tuple[int, ...]
    data_seed: int
    fixed_noise_keys: bool = False
    party_gdp_mu: float | None = None
    party_epsilon: float | None = None
    party_delta: float | None = None
    party_colluding: int | None = None  # None: the daemon's default ("all": m - 1)
    sources: tuple[str, ...] = ()  # per party (SIMULATE_SOURCES); empty: every party reads a CSV file
    data: tuple[Path, ...] = ()  # per party: its records (CSV or Parquet), not the model's synthetic data

    def source(self, pid: int) -> str:
        return self.sources[pid - 1] if self.sources else "csv"

    def budget(self) -> dict[str, Any]:
        """Each simulated party's ``[budget]`` table entries (empty: no budget)."""
        out: dict[str, Any] = {}
        if self.party_gdp_mu is not None:
            out["gdp_mu"] = self.party_gdp_mu
        if self.party_epsilon is not None:
            out.update(epsilon=self.party_epsilon, delta=self.party_delta)
        if self.party_colluding is not None:
            out["colluding"] = self.party_colluding
        return out


@dataclass(frozen=True)
class Experiment:
    source: Path  # the file it was read from (or the checkpoint copy)
    base_dir: Path  # relative paths were resolved against this folder
    text: str  # the file's text (provenance; saved with the checkpoint)
    name: str
    output_dir: Path
    seed: int
    coordinator: CoordinatorSettings
    parties: list[PartyEndpoint]
    model_name: str
    model_params: dict[str, Any]
    sampler: SamplerSettings
    reveal_mode: str
    topology: str
    threshold: int | None
    privacy: PrivacyTarget | None
    formats: tuple[str, ...]
    simulate: SimulateSettings | None
    sign_precompute: str = "inline"  # reveal.sign_precompute (hss.protocols.SIGN_PRECOMPUTE)
    model_path: tuple[Path, ...] = ()  # model.path: folders of model plug-ins (on the import path)

    @property
    def m(self) -> int:
        return self.simulate.parties if self.simulate is not None else len(self.parties)

    @property
    def t(self) -> int:
        return max_threshold(self.m) if self.threshold is None else self.threshold

    def model(self) -> Model:
        return load_model(self.model_name, self.model_params)

    def analysis(self) -> str:
        """The party analysis the session names."""
        return "abcdp-rff" if self.sampler.kind == "abcdp" else self.model_name

    def session_params(self) -> dict[str, Any]:
        """The session's public ``model_params`` (parties/models_bridge.py; FederatedSvtPlan for abcdp)."""
        s = self.sampler
        if s.kind == "abcdp":
            return dict(s.abcdp)
        out: dict[str, Any] = {"model_args": dict(self.model_params)}
        out["kind"] = "rejection" if s.kind == "rejection" else "mh"
        if s.penalty is not None:
            out["penalty"] = s.penalty.to_params()
        if s.lazy is not None:
            out["lazy"] = s.lazy.to_params()
        if s.kind == "rejection" and s.log_bound_margin:
            out["log_bound_margin"] = s.log_bound_margin
        if s.kind == "rejection" and s.rejection_bound != "data":
            out["bound"] = s.rejection_bound
        if s.kind == "rejection" and s.max_sensitivity is not None:
            out["max_sensitivity"] = s.max_sensitivity
        return out

    def with_parties(self, parties: list[PartyEndpoint]) -> Experiment:
        """The same experiment against other endpoints (a simulated consortium's)."""
        from dataclasses import replace

        return replace(self, parties=sorted(parties, key=lambda p: p.id))


def check_model(exp: Experiment) -> list[str]:
    """``confar run --check`` on the model's public side: its prior at the ``[model.params]`` given draws
    the right shape, inside the model's bounds, with a finite log prior. Problems, each naming its key."""
    if exp.sampler.kind == "abcdp":
        return []
    model = exp.model()
    key = "model.params" if exp.model_params else "model.name"
    k = 8
    try:
        th = np.asarray(model.sample_prior(np.random.default_rng(0), k), dtype=np.float64)
    except Exception as exc:  # a plug-in's own error, reported with its type
        return [f"{key}: sample_prior raised {type(exc).__name__}: {exc}"]
    if th.shape != (k, model.d):
        return [f"{key}: sample_prior(rng, {k}) returned shape {th.shape}, expected {(k, model.d)}"]
    problems = []
    if not np.isfinite(th).all():
        problems.append(f"{key}: sample_prior returned NaN or infinite values")
    elif not model.in_bounds(th).all():
        problems.append(f"{key}: prior draws outside the model's bounds (lower/upper)")
    else:
        try:
            lp = np.asarray(model.log_prior(th), dtype=np.float64)
        except Exception as exc:  # a plug-in's own error
            return [f"{key}: log_prior raised {type(exc).__name__}: {exc}"]
        if lp.shape != (k,) or not np.isfinite(lp).all():
            problems.append(f"{key}: log_prior at prior draws is not a finite array of shape ({k},)")
    return problems


def load_experiment(path: str | Path, base_dir: Path | None = None, text: str | None = None) -> Experiment:
    """Read and validate an experiment file (schema in the module docstring).

    ``base_dir`` (default: the file's folder) is where relative paths resolve; ``text`` overrides the
    file's content (a resumed run re-reads the copy saved in its output folder, with the original folder).
    """
    path = Path(path)
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ExperimentError(f"{path}: cannot read: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ExperimentError(f"{path}: not UTF-8 text: {exc}") from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from exc
    base = (base_dir or path.resolve().parent).resolve()
    return parse_experiment(doc, Reader(path, base), text)


def parse_experiment(doc: dict[str, Any], r: Reader, text: str = "") -> Experiment:
    extra = sorted(set(doc) - set(TABLES))
    if extra:
        raise r.err(extra[0], f"unknown table (allowed: {', '.join(TABLES)})")

    ex = r.table(doc, "experiment", required=True)
    assert ex is not None
    r.only(ex, "experiment", ("name", "output_dir", "seed"))
    name = r.get(ex, "experiment", "name", str)
    if not _NAME.match(name):
        raise r.err("experiment.name", f"{name!r}: use 1..64 letters, digits, '.', '_' or '-'")
    output_dir = r.path(r.get(ex, "experiment", "output_dir", str))
    seed = r.integer(ex, "experiment", "seed", lo=0, hi=2**63 - 1)

    sim_tbl = r.table(doc, "simulate")
    simulate = _simulate(r, sim_tbl, doc, seed) if sim_tbl is not None else None
    coordinator = read_coordinator(r, r.table(doc, "coordinator"), need_files=simulate is None)
    if simulate is None and "parties" not in doc:
        raise r.err("parties", "needs at least one [[parties]] table (or a [simulate] table)")
    parties = read_parties(r, doc.get("parties"), required=simulate is None)
    m = simulate.parties if simulate is not None else len(parties)
    if not M_MIN <= m <= M_MAX:
        raise r.err("parties", f"m = {m} parties: must be in {M_MIN}..{M_MAX}")
    if simulate is not None and parties and len(parties) != simulate.parties:
        raise r.err(
            "simulate.parties", f"{simulate.parties} disagrees with the {len(parties)} [[parties]] tables"
        )

    samp = r.table(doc, "sampler", required=True)
    assert samp is not None
    kind = r.choice(samp, "sampler", "kind", KINDS)
    r.only(samp, "sampler", SAMPLER_KEYS[kind])

    model_tbl = r.table(doc, "model")
    model: Model | None = None
    model_name, model_params = "", {}
    model_path: tuple[Path, ...] = ()
    if kind == "abcdp":
        if model_tbl is not None:
            raise r.err(
                "model", "sampler.kind = 'abcdp' takes its model from sampler.simulator; remove [model]"
            )
    else:
        if model_tbl is None:
            raise r.err("model", "missing table (required)")
        r.only(model_tbl, "model", ("name", "params", "path"))
        model_name = r.get(model_tbl, "model", "name", str)
        model_params = dict(r.get(model_tbl, "model", "params", dict, {}))
        model_path = _folders(r, model_tbl, "model", "path")
        add_import_path(model_path)
        try:
            model = load_model(model_name, model_params)
        except ValueError as exc:
            key = "model.params" if model_params else "model.name"
            raise r.err(key, str(exc)) from exc

    sampler = _sampler(r, samp, kind, model, seed)

    rv = r.table(doc, "reveal", required=True)
    assert rv is not None
    r.only(rv, "reveal", ("mode", "topology", "threshold", "sign_precompute"))
    mode = r.choice(rv, "reveal", "mode", REVEAL_MODES)
    entry = reveal_mode(mode)
    topology = r.choice(rv, "reveal", "topology", TOPOLOGIES, "mesh")
    threshold = r.integer(rv, "reveal", "threshold", None, lo=0, hi=M_MAX)
    sign_precompute = r.choice(rv, "reveal", "sign_precompute", SIGN_PRECOMPUTE, "inline")
    if sign_precompute != "inline" and not entry.sign_precompute:
        raise r.err("reveal.sign_precompute", f"applies to reveal mode 'sign' only, not {mode!r}")
    if entry.honest_majority and m < 3:
        raise r.err(
            "reveal.mode",
            f"{mode!r} needs an honest majority of m >= 3 parties (m = {m}); use 'sum' with m = 2",
        )
    if threshold is not None and entry.honest_majority and not 1 <= threshold <= max_threshold(m):
        raise r.err("reveal.threshold", f"{mode!r} needs 1 <= t < m/2 = {m / 2:g}, got {threshold}")
    if threshold is not None and not entry.honest_majority and threshold > m - 1:
        raise r.err("reveal.threshold", f"must be <= m - 1 = {m - 1}, got {threshold}")
    if kind == "abcdp" and entry.inputs != FEATURES:
        raise r.err("reveal.mode", f"sampler.kind = 'abcdp' requires reveal 'svt', got {mode!r}")
    if entry.inputs == FEATURES and kind != "abcdp":
        raise r.err("reveal.mode", f"'svt' is federated ABCDP's reveal; sampler.kind {kind!r} cannot use it")

    if sampler.lazy is not None and (not entry.lazy_coin or sign_precompute != "inline"):
        raise r.err(
            "sampler.lazy",
            "lazy acceptance ANDs a secret coin with the accept bit inside the sign protocol: it needs "
            f"reveal mode 'sign' with sign_precompute 'inline', got {mode!r} / {sign_precompute!r}",
        )
    privacy = _privacy(r, r.table(doc, "privacy"), kind, sampler.lazy is not None)

    out = r.table(doc, "output") or {}
    r.only(out, "output", ("formats",))
    formats = r.get(out, "output", "formats", list, list(FORMATS))
    for i, f in enumerate(formats):
        if f not in FORMATS:
            raise r.err(f"output.formats[{i}]", f"unknown format {f!r} (allowed: {', '.join(FORMATS)})")
    if len(set(formats)) != len(formats):
        raise r.err("output.formats", f"repeats a format: {formats}")

    return Experiment(
        source=r.source,
        base_dir=r.base_dir,
        text=text,
        name=name,
        output_dir=output_dir,
        seed=seed,
        coordinator=coordinator,
        parties=parties,
        model_name=model_name,
        model_params=model_params,
        model_path=model_path,
        sampler=sampler,
        reveal_mode=mode,
        topology=topology,
        threshold=threshold,
        privacy=privacy,
        formats=tuple(formats),
        simulate=simulate,
        sign_precompute=sign_precompute,
    )


def _folders(r: Reader, tbl: dict[str, Any], where: str, key: str) -> tuple[Path, ...]:
    """An optional folder or list of folders (relative to the experiment file), each of which must exist."""
    raw = r.get(tbl, where, key, (str, list), [])
    items = [raw] if isinstance(raw, str) else raw
    out: list[Path] = []
    for i, item in enumerate(items):
        at = f"{where}.{key}" if isinstance(raw, str) else f"{where}.{key}[{i}]"
        if not isinstance(item, str) or not item:
            raise r.err(at, f"must be a folder path, got {item!r}")
        folder = r.path(item)
        if not folder.is_dir():
            raise r.err(at, f"no such folder: {folder}")
        out.append(folder)
    return tuple(out)


def _simulate(r: Reader, tbl: dict[str, Any], doc: dict[str, Any], seed: int) -> SimulateSettings:
    r.only(
        tbl,
        "simulate",
        (
            "parties",
            "records",
            "data_seed",
            "fixed_noise_keys",
            "party_gdp_mu",
            "party_epsilon",
            "party_delta",
            "party_colluding",
            "sources",
            "data",
        ),
    )
    raw_parties = doc.get("parties")
    default_m = len(raw_parties) if isinstance(raw_parties, list) and raw_parties else 3
    m = r.integer(tbl, "simulate", "parties", default_m, lo=M_MIN, hi=M_MAX)
    rec = r.get(tbl, "simulate", "records", (int, list), 500)
    records = [rec] * m if isinstance(rec, int) else rec
    if len(records) != m:
        raise r.err("simulate.records", f"needs one count per party ({m}), got {len(records)}")
    for i, n in enumerate(records):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10_000_000:
            raise r.err(
                f"simulate.records[{i}]" if isinstance(rec, list) else "simulate.records",
                f"must be an integer in 1..10000000, got {n!r}",
            )
    gdp_mu = r.number(tbl, "simulate", "party_gdp_mu", None, gt=0.0)
    eps = r.number(tbl, "simulate", "party_epsilon", None, gt=0.0)
    delta = r.number(tbl, "simulate", "party_delta", None, gt=0.0, lt=1.0)
    if gdp_mu is not None and (eps is not None or delta is not None):
        raise r.err("simulate.party_gdp_mu", "give party_gdp_mu, or party_epsilon and party_delta, not both")
    if (eps is None) != (delta is None):
        missing = "party_delta" if delta is None else "party_epsilon"
        raise r.err(
            f"simulate.{missing}", "missing: an eps-at-delta budget needs party_epsilon and party_delta"
        )
    colluding = r.integer(tbl, "simulate", "party_colluding", None, lo=0, hi=m - 1)
    raw_src = r.get(tbl, "simulate", "sources", (str, list), "csv")
    srcs = [raw_src] * m if isinstance(raw_src, str) else raw_src
    if len(srcs) != m:
        raise r.err("simulate.sources", f"needs one source per party ({m}), got {len(srcs)}")
    for i, src in enumerate(srcs):
        if src not in SIMULATE_SOURCES:
            where = f"simulate.sources[{i}]" if isinstance(raw_src, list) else "simulate.sources"
            raise r.err(where, f"{src!r} is not one of {list(SIMULATE_SOURCES)}")
    files: tuple[Path, ...] = ()
    if "data" in tbl:
        raw_files = r.get(tbl, "simulate", "data", list)
        if len(raw_files) != m:
            raise r.err("simulate.data", f"needs one file per party ({m}), got {len(raw_files)}")
        for i, f in enumerate(raw_files):
            if not isinstance(f, str) or not f:
                raise r.err(f"simulate.data[{i}]", f"must be a file path, got {f!r}")
            path = r.path(f)
            if not path.is_file():
                raise r.err(f"simulate.data[{i}]", f"no such file: {path}")
            if path.suffix.lower() not in (".csv", ".parquet"):
                raise r.err(f"simulate.data[{i}]", f"must be a .csv or .parquet file, got {path.name!r}")
            files += (path,)
        if "records" in tbl:
            raise r.err("simulate.records", "not with simulate.data (the files hold the records)")
    return SimulateSettings(
        parties=m,
        records=tuple(int(n) for n in records),
        data_seed=r.integer(tbl, "simulate", "data_seed", seed, lo=0, hi=2**63 - 1),
        fixed_noise_keys=r.get(tbl, "simulate", "fixed_noise_keys", bool, False),
        party_gdp_mu=gdp_mu,
        party_epsilon=eps,
        party_delta=delta,
        party_colluding=colluding,
        sources=tuple(srcs),
        data=files,
    )


def _init(r: Reader, s: dict[str, Any], chains: int, model: Model) -> str | F64:
    v = s.get("init", "prior")
    if v == "prior":
        return "prior"
    if not isinstance(v, list) or not v:
        raise r.err("sampler.init", f"must be 'prior', [theta] or [[theta], ...], got {v!r}")
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise r.err("sampler.init", f"must be numbers: {exc}") from exc
    d = model.d
    if arr.ndim == 1 and arr.shape == (d,):
        arr = np.tile(arr, (chains, 1))
    if arr.shape != (chains, d):
        raise r.err("sampler.init", f"must be {d} numbers or {chains} lists of {d}, got shape {arr.shape}")
    lp = model.log_prior(arr)
    bad = np.flatnonzero(~np.isfinite(lp))
    if bad.size:
        raise r.err(
            "sampler.init", f"chain {int(bad[0])} starts outside the prior's support: {arr[bad[0]].tolist()}"
        )
    return arr


def _init_scale(r: Reader, s: dict[str, Any], model: Model) -> float:
    scale = float(r.number(s, "sampler", "init_scale", 1.0, gt=0.0))
    if "init_scale" in s and s.get("init", "prior") != "prior":
        raise r.err("sampler.init_scale", "applies to init = 'prior' only")
    th = scale * model.sample_prior(np.random.default_rng(0), 64)
    if scale != 1.0 and not np.isfinite(model.log_prior(th)).all():
        raise r.err("sampler.init_scale", f"scaled prior draws leave the support of {model.name!r}")
    return scale


def _proposal(r: Reader, s: dict[str, Any], d: int) -> F64:
    if "proposal_scale" in s and "proposal_cov" in s:
        raise r.err("sampler.proposal_cov", "give proposal_scale or proposal_cov, not both")
    if "proposal_cov" in s:
        raw = r.get(s, "sampler", "proposal_cov", list)
        try:
            cov = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise r.err("sampler.proposal_cov", f"must be a {d} x {d} array of numbers: {exc}") from exc
        if cov.shape != (d, d):
            raise r.err("sampler.proposal_cov", f"must be {d} x {d}, got shape {cov.shape}")
        if not np.isfinite(cov).all() or not np.allclose(cov, cov.T):
            raise r.err("sampler.proposal_cov", "must be finite and symmetric")
        try:
            np.linalg.cholesky(cov)
        except np.linalg.LinAlgError as exc:
            raise r.err("sampler.proposal_cov", "must be positive definite") from exc
        return cov
    scale = r.number(s, "sampler", "proposal_scale", gt=0.0)
    return np.asarray(scale**2 * np.eye(d), dtype=np.float64)


def _sampler(r: Reader, s: dict[str, Any], kind: str, model: Model | None, seed: int) -> SamplerSettings:
    if kind in MH_KINDS:
        assert model is not None
        chains = r.integer(s, "sampler", "chains", lo=1, hi=MAX_CHAINS)
        iterations = r.integer(s, "sampler", "iterations", lo=1, hi=10**8)
        if "warmup" in s and "burn_in" in s:
            raise r.err("sampler.burn_in", "give warmup or burn_in (the same thing), not both")
        wkey = "burn_in" if "burn_in" in s else "warmup"
        adapt: dict[str, Any] = {}
        if kind == "adaptive-mh" or (kind == "penalty" and ADAPT_KEYS & set(s)):
            adapt = {
                "adapt_start": r.integer(s, "sampler", "adapt_start", max(iterations // 10, 1), lo=1),
                "adapt_every": r.integer(s, "sampler", "adapt_every", max(iterations // 40, 1), lo=1),
                "adapt_stop": r.integer(s, "sampler", "adapt_stop", max(iterations // 2, 2), lo=1),
                "history_from": r.integer(s, "sampler", "history_from", iterations // 20, lo=0),
            }
            if not adapt["adapt_start"] < adapt["adapt_stop"] <= iterations:
                raise r.err(
                    "sampler.adapt_stop",
                    f"need adapt_start < adapt_stop <= iterations, got {adapt['adapt_start']}, "
                    f"{adapt['adapt_stop']}, {iterations}",
                )
            if adapt["history_from"] > adapt["adapt_start"]:
                raise r.err(
                    "sampler.history_from", "must be <= adapt_start (the history feeds the first adaptation)"
                )
            adapt["final"] = r.choice(s, "sampler", "final", ("random-walk", "independence"), "random-walk")
            adapt["independence_scale"] = r.number(s, "sampler", "independence_scale", 1.0, gt=0.0)
            if "independence_scale" in s and adapt["final"] != "independence":
                raise r.err("sampler.independence_scale", "applies to final = 'independence' only")
        default_warmup = adapt["adapt_stop"] if adapt else iterations // 2
        warmup = r.integer(s, "sampler", wkey, default_warmup, lo=0, hi=iterations - 1)
        if adapt and warmup < adapt["adapt_stop"]:
            raise r.err(
                f"sampler.{wkey}",
                f"must be >= adapt_stop = {adapt['adapt_stop']}: draws made while the proposal still adapts "
                "are not draws of a fixed posterior-invariant kernel",
            )
        penalty = None
        if kind == "penalty":
            if "tau" not in s:
                raise r.err("sampler.tau", "missing: the penalty method needs a noise scale tau > 0")
            tau = r.number(s, "sampler", "tau", gt=0.0)
            alpha = r.number(s, "sampler", "alpha", 0.0, ge=0.0)
            n_records = r.integer(s, "sampler", "n_records", lo=1)
            c = r.choice(s, "sampler", "c", ("bound", "clip"), "bound")
            b = r.number(s, "sampler", "b", None, gt=0.0)
            if c == "clip" and b is None:
                raise r.err("sampler.b", "c = 'clip' needs the clip constant b > 0")
            if c == "bound" and b is not None:
                raise r.err("sampler.b", "b is the clip constant: only with c = 'clip'")
            th = model.sample_prior(np.random.default_rng(0), 2)
            if c == "bound" and model.record_ratio_bound(th[:1], th[1:]) is None:
                raise r.err(
                    "sampler.c", f"model {model.name!r} has no public per-record bound: use c = 'clip'"
                )
            cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
            penalty = Penalty(tau=tau, alpha=alpha, n=n_records, c=c, b=b, max_sensitivity=cap)
        lazy = _lazy(r, s, model)
        return SamplerSettings(
            kind=kind,
            chains=chains,
            iterations=iterations,
            warmup=warmup,
            proposal_cov=_proposal(r, s, model.d),
            init=_init(r, s, chains, model),
            init_scale=_init_scale(r, s, model),
            penalty=penalty,
            lazy=lazy,
            **adapt,
        )
    if kind == "rejection":
        n_accept = r.integer(s, "sampler", "n_accept", lo=1, hi=10**8)
        max_proposals = r.integer(s, "sampler", "max_proposals", lo=1, hi=10**12)
        if max_proposals < n_accept:
            raise r.err("sampler.max_proposals", f"must be >= n_accept = {n_accept}, got {max_proposals}")
        batch_size = r.integer(s, "sampler", "batch_size", min(1000, max_proposals), lo=1, hi=MAX_BATCH)
        margin = r.number(s, "sampler", "log_bound_margin", 0.0, ge=0.0)
        bound = r.choice(s, "sampler", "bound", ("data", "public"), "data")
        cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
        assert model is not None
        probe = model.sample_prior(np.random.default_rng(0), 1)
        if cap is not None and model.record_loglik_range(probe) is None:
            raise r.err("sampler.max_sensitivity", f"model {model.name!r} declares no record_loglik_range")
        lazy = None
        if "lazy" in s:
            try:
                lazy = Lazy(r.number(s, "sampler", "lazy", gt=0.0, lt=1.0))
            except ValueError as exc:
                raise r.err("sampler.lazy", str(exc)) from exc
        return SamplerSettings(
            kind=kind,
            n_accept=n_accept,
            max_proposals=max_proposals,
            batch_size=batch_size,
            log_bound_margin=margin,
            rejection_bound=bound,
            max_sensitivity=cap,
            lazy=lazy,
        )
    # abcdp: the public run parameters become a FederatedSvtPlan (its own checks name the key)
    from mechanisms.abcdp.federated import FederatedSvtPlan

    simulator = r.choice(s, "sampler", "simulator", SIMULATORS)
    vals: dict[str, Any] = {
        "eps_abc": r.number(s, "sampler", "eps_abc", gt=0.0),
        "eps_total": r.number(s, "sampler", "eps_total", gt=0.0, allow_inf=True),
        "c": r.integer(s, "sampler", "c", lo=1, hi=10**6),
        "resample": r.get(s, "sampler", "resample", bool, True),
        "n_records": r.integer(s, "sampler", "n_records", lo=1),
        "n_features": r.integer(s, "sampler", "n_features", lo=2, hi=100_000),
        "bandwidth": r.number(s, "sampler", "bandwidth", gt=0.0),
    }
    if vals["n_features"] % 2:
        raise r.err("sampler.n_features", f"must be even (cos/sin pairs), got {vals['n_features']}")
    try:
        plan = FederatedSvtPlan(dim=SIMULATOR_DIMS[simulator], map_seed=seed % 2**63, **vals)
    except ValueError as exc:
        key = next((k for k in vals if str(exc).startswith(k)), "")
        raise r.err(f"sampler.{key}" if key else "sampler", str(exc)) from exc
    batch_size = r.integer(s, "sampler", "batch_size", 100, lo=1, hi=MAX_BATCH)
    max_proposals = r.integer(s, "sampler", "max_proposals", lo=1, hi=10**12)
    if max_proposals < vals["c"]:
        raise r.err("sampler.max_proposals", f"must be >= c = {vals['c']}, got {max_proposals}")
    return SamplerSettings(
        kind=kind,
        batch_size=batch_size,
        max_proposals=max_proposals,
        abcdp=plan.to_params(),
        simulator=simulator,
    )


def _lazy(r: Reader, s: dict[str, Any], model: Model) -> Lazy | None:
    """sampler.lazy (gamma = k / 2^L, L <= 16) with sampler.max_sensitivity (MH: required with lazy)."""
    if "lazy" not in s:
        if "max_sensitivity" in s and s.get("kind") != "penalty":
            raise r.err("sampler.max_sensitivity", "caps the step of lazy MH: only with sampler.lazy")
        return None
    gamma = r.number(s, "sampler", "lazy", gt=0.0, lt=1.0)
    cap = r.number(s, "sampler", "max_sensitivity", None, gt=0.0)
    if cap is None:
        raise r.err(
            "sampler.max_sensitivity",
            "missing: lazy MH charges every step at a public cap on the per-record sensitivity c(theta, "
            "theta*) = 2 x the model's per-record bound (larger steps are rejected without asking)",
        )
    th = model.sample_prior(np.random.default_rng(0), 2)
    if model.record_ratio_bound(th[:1], th[1:]) is None:
        raise r.err("sampler.lazy", f"model {model.name!r} has no public per-record bound for the cap")
    try:
        return Lazy(gamma, cap)
    except ValueError as exc:
        raise r.err("sampler.lazy", str(exc)) from exc


def _privacy(r: Reader, tbl: dict[str, Any] | None, kind: str, lazy: bool = False) -> PrivacyTarget | None:
    if tbl is None:
        return None
    r.only(tbl, "privacy", ("gdp_mu", "epsilon", "delta"))
    if not tbl:
        raise r.err("privacy", "give gdp_mu, or epsilon and delta (or remove the table)")
    if kind not in ("penalty", "abcdp", "rejection") and not lazy:
        raise r.err(
            "privacy",
            f"sampler.kind {kind!r} has no privacy bound (exact accept/reject decisions: the per-step loss "
            "is unbounded), so no target can be met; use kind 'penalty' or 'abcdp', sampler.lazy, or remove "
            "[privacy]",
        )
    if "gdp_mu" in tbl:
        if "epsilon" in tbl or "delta" in tbl:
            raise r.err("privacy.gdp_mu", "give gdp_mu, or epsilon and delta, not both")
        return PrivacyTarget(gdp_mu=r.number(tbl, "privacy", "gdp_mu", gt=0.0))
    if "epsilon" not in tbl:
        raise r.err("privacy.epsilon", "missing (with delta; or give gdp_mu)")
    if "delta" not in tbl:
        raise r.err("privacy.delta", "missing (epsilon needs delta)")
    eps = r.number(tbl, "privacy", "epsilon", gt=0.0)
    delta = r.number(tbl, "privacy", "delta", gt=0.0, lt=1.0)
    return PrivacyTarget(epsilon=eps, delta=delta)
