"""The party daemon's configuration file (TOML), validated at startup.

Every problem raises :class:`ConfigError` naming the file, the key and what is wrong; ``confar-party
serve`` prints it and exits with code 2. Relative paths are resolved against the config file's folder.

Example (all keys; optional ones marked)::

    [party]
    id = 3                         # 1..64
    identity = "party-3"           # optional, default "party-<id>"; must equal the certificate's CN
    listen = "127.0.0.1:0"         # host:port; port 0 = ephemeral
    state_dir = "state"            # audit log, ledger
    address_file = "addr.txt"      # optional: write the bound host:port here once serving

    [tls]                          # required unless the daemon runs with --insecure
    cert = "certs/party-3.pem"
    key = "certs/party-3.key"
    ca = "certs/ca.pem"

    [coordinator]
    identity = "coordinator"       # optional; the only identity allowed to open sessions

    [[peers]]                      # the consortium (the other parties); address optional (relay / given
    id = 1                         # by the coordinator at session open)
    identity = "party-1"
    address = "127.0.0.1:50051"

    [data]                         # optional: where this registry's records live (parties/sources)
    source = "csv"                 # csv | parquet (default: from the path's suffix) | sql | sparql: the
                                   # keys of each are in parties/sources/ (database URL, query, endpoint...)
    path = "registry.csv"          # CSV (header row) or Parquet (needs pyarrow)
    model = "bayes-logistic"       # optional: check the records against this model's schema at start-up
    max_records = 10000000         # optional: a larger result is refused (nothing is loaded)
    [data.model_args]              # optional: the model's public arguments (its schema depends on them);
    p = 4                          # the experiment's [model.params] is where they are set: a session of
                                   # this model whose model_args build another model is refused, naming both

    [allow]
    models = ["gaussian-mean"]     # analyses: built-in names or model plug-ins "module:ClassName"
    model_path = ["models"]        # optional: folders the plug-ins are imported from (relative to this
                                   # file); only code the registry has vetted belongs there
    reveal_modes = ["sign", "blinded"]  # of sum, blinded, sign, svt (federated ABCDP, parties/abcdp.py)
    topologies = ["mesh", "relay"] # optional, default both
    security = ["abort"]           # optional, default both "semi-honest" and "abort": the sessions' security
                                   # this party joins ("abort": t deviating parties are caught, issue 25)
    release_effects = false        # optional (default false): at the end of a blocked run (a model with a
                                   # registry random intercept, docs/MODELS.md "Blocked sampling"), release
                                   # this registry's draws of its own effect z_j to the coordinator; without
                                   # it they never leave the registry (no privacy charge backs the release)
    [allow.bounds.gaussian-mean]   # optional: numeric model parameter -> [low, high]
    sigma = [0.1, 100.0]

    [budget]
    max_decisions = 1000000        # refuse batches past this (persisted in state_dir/ledger.json)
    # optional privacy budget (at most one kind), enforced by this party (parties/privacy_budget.py) with a
    # ledger persisted in state_dir/privacy_ledger.json; batches past it get RESOURCE_EXHAUSTED:
    gdp_mu = 2.0                   # a GDP filter: sqrt(sum_t mu_t^2) <= gdp_mu (fully adaptive composition)
    # epsilon = 10.0               # or an eps-at-delta budget (PLD composition): eps(delta) <= epsilon ...
    # delta = 1e-6                 # ... at this delta, 0 < delta < 1 (required with epsilon)
    # accountant = "renyi"         # optional with epsilon/delta: a Renyi filter at the order the budget
                                   # fixes (mechanisms.privacy.renyi; valid under adaptive steps, charges a
                                   # fixed-sd penalty's accept bit below its Gaussian); default "pld"
    # per_run = "worst-record"     # optional: a fixed-sd penalty run of a model linear in a predictor
                                   # (bayes-logistic, formula bernoulli) charged at its worst record over
                                   # the run, not each decision's (mechanisms.privacy.worst_record; never
                                   # more than per decision); default "per-decision"
    neighbours = "add-remove"      # optional: the neighbouring datasets the budget protects, "add-remove"
                                   # (one record more or less) or "replace-one" (default: one record
                                   # replaced; about twice the add-remove charge for the same release)
    colluding = "all"              # optional: threat model of the accounting, how many other parties may
                                   # pool their noise: an integer >= 0 or "all" (default: m - 1, i.e. only
                                   # this party's own noise is relied on)

    [governance]                   # optional (issue 37)
    require_approval = true        # admit only sessions of a study this registry's custodian approved
                                   # (confar-party study approve; parties/governance.py): needs a privacy
                                   # budget, which each study's cap is charged by; default false

    [admin]                        # optional (issue 37): the custodian's report served read-only over plain
    listen = "127.0.0.1:8470"      # HTTP on a loopback address only (127.0.0.0/8, [::1], localhost), never
                                   # the consortium's port; off without this table (parties/admin.py)

    [limits]                       # optional
    round_timeout_s = 30.0
    max_batch = 100000
    max_sessions = 4
    max_message_bytes = 67108864

    [testing]                      # optional, never in production
    fixed_rng_key = "<64 hex>"     # repeatable noise for contract tests; the daemon warns loudly
    freeze_at = ["after-charge@3"] # fault injection: the daemon stops itself (SIGSTOP) at that point of
                                   # run step 3 (of any run), for a test to SIGKILL it there (FREEZE_PHASES)
    deviate = ["additive@3"]       # this daemon sends wrong frames in round 3 of every decision step, to
                                   # test security with abort over real links (parties/deviate.py)
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechanisms.samplers.requests import NEIGHBOURS
from parties import deviate as deviations
from parties.sources import DataConfig, read_data_config
from proto.spec import (
    REVEAL_MODES,
    SECURITY,
    TOPOLOGIES,
    PartyEntry,
    address_problem,
    default_identity,
    identity_problem,
)

#: how a registry charges a fixed-sd penalty run: each decision at its own worst record, or the run at its one
PER_RUN = ("per-decision", "worst-record")

#: testing.freeze_at phases of a run step, in order: the Evaluate request checked but nothing charged; the
#: step charged and persisted but no share sent; this party's first exchange round sent to every peer; the
#: step done and its run record kept but the answer not sent
FREEZE_PHASES = ("before-charge", "after-charge", "mid-exchange", "before-answer")


class ConfigError(ValueError):
    """A config problem, naming the key."""


@dataclass(frozen=True)
class PartyConfig:
    source: Path
    id: int
    identity: str
    listen: str
    state_dir: Path
    address_file: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    tls_ca: Path | None
    coordinator_identity: str
    peers: tuple[PartyEntry, ...]  # the other parties (proto.spec: the one party-entry type)
    data: DataConfig | None  # where the records live (parties.sources); None: no records
    allow_models: tuple[str, ...]
    allow_modes: tuple[str, ...]
    allow_topologies: tuple[str, ...]
    allow_security: tuple[str, ...] = ("semi-honest", "abort")  # [allow] security: sessions this party joins
    release_effects: bool = False  # [allow] release_effects: a blocked run's effect draws leave at its end
    model_path: tuple[Path, ...] = ()  # [allow] model_path: folders of model plug-ins (import path)
    bounds: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    max_decisions: int = 1_000_000
    epsilon: float | None = None
    delta: float | None = None
    gdp_mu: float | None = None
    colluding: int | None = None  # None = "all" (m - 1 at each session)
    neighbours: str = "replace-one"  # the neighbouring datasets protected: "add-remove" | "replace-one"
    accountant: str = "pld"  # with epsilon/delta: "pld" (EpsDeltaBudget) or "renyi" (RDPBudget)
    per_run: str = "per-decision"  # "per-decision" | "worst-record" (mechanisms.privacy.worst_record)
    round_timeout_s: float = 30.0
    max_batch: int = 100_000
    max_sessions: int = 4
    max_message_bytes: int = 64 * 1024 * 1024
    fixed_rng_key: bytes | None = None
    freeze_at: frozenset[tuple[str, int]] = frozenset()  # testing: (phase, run step), see FREEZE_PHASES
    deviate: frozenset[tuple[str, int]] = frozenset()  # testing: (kind, round) this daemon deviates at
    require_approval: bool = False  # [governance] require_approval: only sessions of an approved study
    admin_listen: str | None = None  # [admin] listen: the read-only report on a loopback port (parties.admin)

    @property
    def has_tls(self) -> bool:
        return self.tls_cert is not None


class _Reader:
    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path, self.doc = path, doc

    def err(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {msg}")

    def table(self, name: str, required: bool = True) -> dict[str, Any]:
        v = self.doc.get(name)
        if v is None:
            if required:
                raise self.err(f"[{name}]", "missing table")
            return {}
        if not isinstance(v, dict):
            raise self.err(f"[{name}]", "must be a table")
        return v

    def get(
        self, tbl: dict[str, Any], where: str, key: str, typ: type | tuple[type, ...], default: Any = ...
    ) -> Any:
        full = f"{where}.{key}"
        if key not in tbl:
            if default is ...:
                raise self.err(full, "missing (required)")
            return default
        v = tbl[key]
        if isinstance(v, bool) and bool not in (typ if isinstance(typ, tuple) else (typ,)):
            raise self.err(full, f"expected {_tname(typ)}, got a boolean")
        if not isinstance(v, typ):
            raise self.err(full, f"expected {_tname(typ)}, got {type(v).__name__} {v!r}")
        return v

    def path_of(self, value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else (self.path.parent / p)


def _tname(typ: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


def _check_unknown(r: _Reader, tbl: dict[str, Any], where: str, allowed: set[str]) -> None:
    extra = sorted(set(tbl) - allowed)
    if extra:
        raise r.err(f"{where}.{extra[0]}", f"unknown key (allowed: {', '.join(sorted(allowed))})")


def load_config(path: str | Path, insecure: bool = False) -> PartyConfig:
    """Read and check the party's config file, section by section in file order."""
    path = Path(path)
    r = _Reader(path, _read_toml(path))
    _check_unknown(
        r,
        r.doc,
        "(top level)",
        {
            "party",
            "tls",
            "coordinator",
            "peers",
            "data",
            "allow",
            "budget",
            "governance",
            "admin",
            "limits",
            "testing",
        },
    )
    pid, identity, listen, state_dir, af = _party_section(r)  # listen: also checked against [admin]
    tls_cert, tls_key, tls_ca = _tls_section(r, insecure)
    coord = r.table("coordinator", required=False)
    _check_unknown(r, coord, "coordinator", {"identity"})
    coordinator_identity = r.get(coord, "coordinator", "identity", str, "coordinator")
    peers = _peers_section(r, pid, identity, coordinator_identity)
    data = read_data_config(r.table("data", required=False), path, r.err)  # parties.sources
    allow = _allow_section(r)
    budget = r.table("budget")
    keys = {"max_decisions", "epsilon", "delta", "gdp_mu", "colluding", "neighbours", "accountant", "per_run"}
    _check_unknown(r, budget, "budget", keys)
    max_decisions = r.get(budget, "budget", "max_decisions", int)
    if max_decisions < 0:
        raise r.err("budget.max_decisions", f"must be >= 0, got {max_decisions}")
    eps, delta, gdp_mu, colluding = _privacy_budget(r, budget)
    neighbours = r.get(budget, "budget", "neighbours", str, "replace-one")
    if neighbours not in NEIGHBOURS:
        raise r.err("budget.neighbours", f"must be one of {list(NEIGHBOURS)}, got {neighbours!r}")
    if "neighbours" in budget and gdp_mu is None and eps is None:
        raise r.err("budget.neighbours", "only used with a privacy budget (gdp_mu or epsilon/delta)")
    accountant = r.get(budget, "budget", "accountant", str, "pld")
    if accountant not in ("pld", "renyi"):
        raise r.err("budget.accountant", f'must be "pld" or "renyi", got {accountant!r}')
    if "accountant" in budget and eps is None:
        raise r.err("budget.accountant", "only used with an eps-at-delta budget (epsilon and delta)")
    per_run = r.get(budget, "budget", "per_run", str, "per-decision")
    if per_run not in PER_RUN:
        raise r.err("budget.per_run", f"must be one of {list(PER_RUN)}, got {per_run!r}")
    if "per_run" in budget and gdp_mu is None and eps is None:
        raise r.err("budget.per_run", "only used with a privacy budget (gdp_mu or epsilon/delta)")
    require_approval = _governance_section(r, eps is not None or gdp_mu is not None)
    return PartyConfig(
        source=path,
        id=pid,
        identity=identity,
        listen=listen,
        state_dir=state_dir,
        address_file=r.path_of(af) if af else None,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        coordinator_identity=coordinator_identity,
        peers=peers,
        data=data,
        max_decisions=max_decisions,
        epsilon=eps,
        delta=delta,
        gdp_mu=gdp_mu,
        colluding=colluding,
        neighbours=neighbours,
        accountant=accountant,
        per_run=per_run,
        require_approval=require_approval,
        admin_listen=_admin_section(r, listen),
        **allow,
        **_limits_section(r),
        **_testing_section(r),
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from exc
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def _party_section(r: _Reader) -> tuple[int, str, str, Path, str | None]:
    """[party]: id, identity, listen, state_dir, address_file (as written, resolved by the caller)."""
    party = r.table("party")
    _check_unknown(r, party, "party", {"id", "identity", "listen", "state_dir", "address_file"})
    pid = r.get(party, "party", "id", int)
    if not 1 <= pid <= 64:
        raise r.err("party.id", f"must be in 1..64, got {pid}")
    identity = r.get(party, "party", "identity", str, default_identity(pid))
    if identity_problem(identity) is not None:
        raise r.err("party.identity", f"{identity!r} is not a valid certificate name")
    listen = r.get(party, "party", "listen", str)
    _check_addr(r, "party.listen", listen)
    state_dir = r.path_of(r.get(party, "party", "state_dir", str))
    af = r.get(party, "party", "address_file", str, None)
    return pid, identity, listen, state_dir, af


def _tls_section(r: _Reader, insecure: bool) -> tuple[Path | None, Path | None, Path | None]:
    """[tls]: cert, key, ca (each an existing file), or three Nones without the table."""
    tls = r.table("tls", required=not insecure)
    _check_unknown(r, tls, "tls", {"cert", "key", "ca"})
    tls_paths: list[Path | None] = [None, None, None]
    if tls:
        for i, k in enumerate(("cert", "key", "ca")):
            p = r.path_of(r.get(tls, "tls", k, str))
            if not p.is_file():
                raise r.err(f"tls.{k}", f"file {p} does not exist")
            tls_paths[i] = p
    return tls_paths[0], tls_paths[1], tls_paths[2]


def _peers_section(r: _Reader, pid: int, identity: str, coordinator_identity: str) -> tuple[PartyEntry, ...]:
    """[[peers]]: the other parties; ids and identities distinct from each other and from this party's."""
    peers_raw = r.doc.get("peers", [])
    if not isinstance(peers_raw, list):
        raise r.err("peers", "must be an array of tables ([[peers]])")
    peers: list[PartyEntry] = []
    for i, pr in enumerate(peers_raw):
        where = f"peers[{i}]"
        if not isinstance(pr, dict):
            raise r.err(where, "must be a table")
        _check_unknown(r, pr, where, {"id", "identity", "address"})
        qid = r.get(pr, where, "id", int)
        if not 1 <= qid <= 64 or qid == pid:
            raise r.err(f"{where}.id", f"must be in 1..64 and differ from party.id ({pid}), got {qid}")
        qident = r.get(pr, where, "identity", str, default_identity(qid))
        if identity_problem(qident) is not None:
            raise r.err(f"{where}.identity", f"{qident!r} is not a valid certificate name")
        addr = r.get(pr, where, "address", str, "")
        if addr:
            _check_addr(r, f"{where}.address", addr)
        peers.append(PartyEntry(qid, qident, addr))
    ids = [p.id for p in peers]
    if len(set(ids)) != len(ids):
        raise r.err("peers", f"duplicate peer ids {sorted(ids)}")
    names = [p.identity for p in peers] + [identity, coordinator_identity]
    if len(set(names)) != len(names):
        raise r.err("peers", "identities of the party, its peers and the coordinator must all differ")
    return tuple(peers)


def _allow_section(r: _Reader) -> dict[str, Any]:
    """[allow]: the PartyConfig fields allow_models, model_path, allow_modes, allow_topologies,
    allow_security, bounds."""
    allow = r.table("allow")
    known = {"models", "reveal_modes", "topologies", "security", "bounds", "model_path", "release_effects"}
    _check_unknown(r, allow, "allow", known)
    models = _str_list(r, allow, "allow.models", None)
    model_path: list[Path] = []
    if "model_path" in allow:
        for i, item in enumerate(_str_list(r, allow, "allow.model_path", None)):
            folder = Path(item).expanduser()
            folder = folder if folder.is_absolute() else r.path.parent / folder
            if not folder.is_dir():
                raise r.err(f"allow.model_path[{i}]", f"no such folder: {folder}")
            model_path.append(folder.resolve())
    modes = _str_list(r, allow, "allow.reveal_modes", REVEAL_MODES)
    topos = _str_list(r, allow, "allow.topologies", TOPOLOGIES) if "topologies" in allow else TOPOLOGIES
    security = _str_list(r, allow, "allow.security", SECURITY) if "security" in allow else SECURITY
    return {
        "allow_models": tuple(models),
        "model_path": tuple(model_path),
        "allow_modes": tuple(modes),
        "allow_topologies": tuple(topos),
        "allow_security": tuple(security),
        "bounds": _allow_bounds(r, allow),
        "release_effects": r.get(allow, "allow", "release_effects", bool, False),
    }


def _allow_bounds(r: _Reader, allow: dict[str, Any]) -> dict[str, dict[str, tuple[float, float]]]:
    """[allow.bounds.<model>]: parameter = [low, high], low <= high."""
    bounds: dict[str, dict[str, tuple[float, float]]] = {}
    for model, tbl in (r.get(allow, "allow", "bounds", dict, {}) or {}).items():
        if not isinstance(tbl, dict):
            raise r.err(f"allow.bounds.{model}", "must be a table of parameter = [low, high]")
        bounds[model] = {}
        for key, lohi in tbl.items():
            ok = (
                isinstance(lohi, list)
                and len(lohi) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in lohi)
            )
            if not ok or lohi[0] > lohi[1]:
                raise r.err(
                    f"allow.bounds.{model}.{key}", f"must be [low, high] with low <= high, got {lohi!r}"
                )
            bounds[model][key] = (float(lohi[0]), float(lohi[1]))
    return bounds


def _governance_section(r: _Reader, has_privacy_budget: bool) -> bool:
    """[governance] require_approval (issue 37): a study's cap is charged by the privacy budget's accountant,
    so requiring approval needs a privacy budget."""
    gov = r.table("governance", required=False)
    _check_unknown(r, gov, "governance", {"require_approval"})
    required = bool(r.get(gov, "governance", "require_approval", bool, False))
    if required and not has_privacy_budget:
        raise r.err(
            "governance.require_approval",
            "needs a privacy budget in [budget] (epsilon and delta, or gdp_mu): each approved study's cap is "
            "charged by the budget's accountant",
        )
    return required


LOOPBACK_NAMES = ("localhost",)


def loopback_problem(address: str) -> str | None:
    """Why ``address`` (host:port) is not on a loopback interface, or None."""
    import ipaddress

    host = address.rsplit(":", 1)[0].strip("[]")
    if host in LOOPBACK_NAMES:
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        return f"{host!r} is a name, not a loopback address (use 127.0.0.1, [::1] or localhost)"
    return f"{host} is not a loopback address: the report is served to this machine only"


def _admin_section(r: _Reader, listen: str) -> str | None:
    """[admin] listen (issue 37): a loopback host:port, not the consortium's port."""
    admin = r.table("admin", required=False)
    _check_unknown(r, admin, "admin", {"listen"})
    if "listen" not in admin:
        if admin:
            raise r.err("admin.listen", "missing (required in [admin])")
        return None
    value = r.get(admin, "admin", "listen", str)
    _check_addr(r, "admin.listen", value)
    why = loopback_problem(value)
    if why is not None:
        raise r.err("admin.listen", why)
    port = value.rsplit(":", 1)[1]
    if port != "0" and port == listen.rsplit(":", 1)[1]:
        raise r.err("admin.listen", f"port {port} is party.listen's, the port the consortium reaches")
    return value


def _limits_section(r: _Reader) -> dict[str, Any]:
    """[limits]: the PartyConfig fields round_timeout_s, max_batch, max_sessions, max_message_bytes."""
    lim = r.table("limits", required=False)
    _check_unknown(r, lim, "limits", {"round_timeout_s", "max_batch", "max_sessions", "max_message_bytes"})
    limits = {
        "round_timeout_s": float(r.get(lim, "limits", "round_timeout_s", (int, float), 30.0)),
        "max_batch": r.get(lim, "limits", "max_batch", int, 100_000),
        "max_sessions": r.get(lim, "limits", "max_sessions", int, 4),
        "max_message_bytes": r.get(lim, "limits", "max_message_bytes", int, 64 * 1024 * 1024),
    }
    for key, lo in (
        ("round_timeout_s", 0.01),
        ("max_batch", 1),
        ("max_sessions", 1),
        ("max_message_bytes", 1024),
    ):
        if limits[key] < lo:
            raise r.err(f"limits.{key}", f"must be >= {lo}, got {limits[key]}")
    return limits


def _testing_section(r: _Reader) -> dict[str, Any]:
    """[testing]: the PartyConfig fields fixed_rng_key, freeze_at, deviate."""
    testing = r.table("testing", required=False)
    _check_unknown(r, testing, "testing", {"fixed_rng_key", "freeze_at", "deviate"})
    fixed = None
    if "fixed_rng_key" in testing:
        hx = r.get(testing, "testing", "fixed_rng_key", str)
        try:
            fixed = bytes.fromhex(hx)
        except ValueError as exc:
            raise r.err("testing.fixed_rng_key", "must be 64 hex digits") from exc
        if len(fixed) != 32:
            raise r.err("testing.fixed_rng_key", f"must be 32 bytes (64 hex digits), got {len(fixed)} bytes")
    freeze_at: set[tuple[str, int]] = set()
    for raw in r.get(testing, "testing", "freeze_at", list) if "freeze_at" in testing else []:
        phase, _, step = raw.partition("@") if isinstance(raw, str) else ("", "", "")
        if phase not in FREEZE_PHASES or not step.isdigit() or not 1 <= int(step) <= 2**53:
            raise r.err(
                "testing.freeze_at", f"must be a list of '<phase>@<run step>' with a phase in {FREEZE_PHASES}"
            )
        freeze_at.add((phase, int(step)))
    try:
        deviate = deviations.parse(r.get(testing, "testing", "deviate", list) if "deviate" in testing else [])
    except ValueError as exc:
        raise r.err("testing.deviate", str(exc)) from exc
    return {"fixed_rng_key": fixed, "freeze_at": frozenset(freeze_at), "deviate": deviate}


def _privacy_budget(
    r: _Reader, budget: dict[str, Any]
) -> tuple[float | None, float | None, float | None, int | None]:
    """[budget] gdp_mu | (epsilon, delta), colluding: validated (see the module docstring)."""
    eps = r.get(budget, "budget", "epsilon", (int, float), None)
    delta = r.get(budget, "budget", "delta", (int, float), None)
    mu = r.get(budget, "budget", "gdp_mu", (int, float), None)
    if eps is not None and not (0 < eps < math.inf):
        raise r.err("budget.epsilon", f"must be a finite number > 0, got {eps}")
    if delta is not None and not 0 < delta < 1:
        raise r.err("budget.delta", f"must lie strictly between 0 and 1, got {delta}")
    if mu is not None and not (0 < mu < math.inf):
        raise r.err("budget.gdp_mu", f"must be a finite number > 0, got {mu}")
    if eps is not None and delta is None:
        raise r.err("budget.epsilon", "an eps-at-delta budget needs budget.delta as well")
    if delta is not None and eps is None:
        raise r.err("budget.delta", "budget.delta is only used with budget.epsilon (eps-at-delta budget)")
    if mu is not None and eps is not None:
        raise r.err("budget.gdp_mu", "configure either gdp_mu (GDP filter) or epsilon/delta, not both")
    raw = budget.get("colluding", "all")
    colluding: int | None
    if raw == "all":
        colluding = None
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        colluding = raw
    else:
        raise r.err("budget.colluding", f'must be an integer >= 0 or "all", got {raw!r}')
    if "colluding" in budget and mu is None and eps is None:
        raise r.err("budget.colluding", "only used with a privacy budget (gdp_mu or epsilon/delta)")
    return (
        float(eps) if eps is not None else None,
        float(delta) if delta is not None else None,
        float(mu) if mu is not None else None,
        colluding,
    )


def _check_addr(r: _Reader, key: str, value: str) -> None:
    if address_problem(value, allow_port_0=True) is not None:
        raise r.err(key, f"expected host:port, got {value!r}")


def _str_list(r: _Reader, tbl: dict[str, Any], key: str, choices: tuple[str, ...] | None) -> list[str]:
    name = key.split(".")[-1]
    v = r.get(tbl, key.rsplit(".", 1)[0], name, list)
    for item in v:
        if not isinstance(item, str):
            raise r.err(key, f"entries must be strings, got {item!r}")
        if choices is not None and item not in choices:
            raise r.err(key, f"{item!r} is not one of {list(choices)}")
    return v
