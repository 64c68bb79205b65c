"""The experiment file of ``confar run``: one TOML that says what to fit, with whom, how, and at what privacy.

Everything is checked here before any party is contacted: unknown keys, wrong types, out-of-range numbers
and impossible combinations are refused with :class:`ExperimentError`, whose message names the file and
the dotted key path (``confar run`` exits with code 2). Relative paths resolve against the file's folder.
The ``[coordinator]`` and ``[[parties]]`` tables have the shape of PLAN.toml's (``coordinator/privacy.py``)
and are read by :func:`coordinator.tables.read_coordinator` and :func:`coordinator.tables.read_parties`;
``[sampler]`` by :mod:`coordinator.sampler_settings`.

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
    # or a formula (docs/MODELS.md, "Formulas"; mechanisms/models/formula.py) instead of name:
    # formula = "deaths ~ age + C(sex) + (1 | registry)"
    # family = "poisson"            # bernoulli | poisson | gaussian | weibull
    # columns = { deaths = { lower = 0, upper = 30, integer = true }, age = [18, 100], ... }
    #                               # every column's public bounds: the schema and the per-record bound;
    #                               # a category's values may be text labels: sex = { values = ["F", "M"] }
    # [model.params] then holds the rest: offset, event, sigma, prior_sd, sigma_u_scale

    [sampler]
    kind = "mh"                     # mh | adaptive-mh | penalty | rejection | abcdp
    # mh, adaptive-mh, penalty (random-walk Metropolis-Hastings, one Evaluate step per iteration; every
    # chain's decision of an iteration travels in the same batch):
    chains = 16                     # 1..4096
    iterations = 2000               # per chain, including warmup
    warmup = 1000                   # first draws kept as warmup (alias: burn_in); default iterations // 2
                                    # (adapt_stop when the proposal adapts)
    # proposal_scale = 0.1          # optional: a fixed random-walk sd (cov = scale^2 I), or:
    # proposal_cov = [[...], ...]   # a d x d symmetric positive-definite covariance; with neither (the
                                    # default) the proposal is tuned automatically (below)
    init = "prior"                  # "prior" (a draw from the prior per chain, from the public seed),
                                    # [theta] for every chain, or [[theta], ...] one per chain
    init_scale = 0.1                # with init = "prior": start at init_scale x the prior draw (default 1)
    # automatic proposal (mh, adaptive-mh, penalty with the random-walk proposal and no proposal_scale /
    #   proposal_cov): adaptive MH from a public start (2.38^2 / d) diag(0.1 x the prior's spread)^2; until
    #   adapt_stop each chain's scale follows its own accept bits (Robbins-Monro) to target_accept
    #   (optional, 0 < x < 1; default 0.44 for d = 1, 0.35 for d = 2..4, 0.234 for d >= 5; lower with lazy
    #   or a penalty sd) and the covariance is Haario's (adapt_* keys below) from the later states only
    #   (the history restarts in doubling windows, as Stan's); from adapt_stop on the kernel is frozen.
    #   With kind = "mh", giving proposal_scale / proposal_cov switches it off (a plain random walk, no
    #   adapt_* / target_accept keys).
    # blocked = true                # mh, adaptive-mh with the automatic proposal: the default (true) for a
                                    # model with a registry random intercept ("(1 | registry)",
                                    # logistic-random-intercept): each registry updates its own effect z_j
                                    # where its records are, the shared parameters by the confidential
                                    # decision (docs/MODELS.md, "Blocked sampling"); false: one random walk
                                    # over every parameter
    # penalty with sd and blocked (a budget can charge it; docs/PRIVACY.md "Blocked sampling under a
    #   budget"): local_sd (each registry's own noise sd on a local log ratio), local_max_step (the cap on a
    #   local move of u_j), local_steps (default 3); blocked is then the default. Bernoulli models only.
    #   With [privacy] target_epsilon (a planned blocked run) sd, local_sd, local_max_step and
    #   max_sensitivity may be left out: the plan chooses them and the sweeps (mechanisms/planning_blocked.py)
    # adaptive-mh (Haario et al.; mechanisms.samplers.AdaptiveMH): adapt_start (default iterations // 10),
    #   adapt_every (iterations // 40), adapt_stop (iterations // 2), history_from (iterations // 20);
    #   warmup must be >= adapt_stop (only draws of the frozen kernel are posterior draws); final =
    #   "random-walk" (default) | "independence" (from adapt_stop on, proposals N(mean, k^2 cov) fitted to
    #   the history, k = independence_scale, default 1: nearly independent draws per decision). The penalty
    #   kind takes these keys too (then it is adaptive); target_accept with a given proposal_scale also
    #   tunes the scale.
    # mh, adaptive-mh: lazy = 0.5 (optional; reveal sign, sign_precompute inline): accept only if the MH
    #   test passes AND a secret coin with P(1) = lazy comes up, made inside the protocol (gamma = k / 2^L,
    #   L <= 16); the chain stays exact (lazy MH is reversible), mixing slows by 1/gamma, and each step is
    #   charged at a bounded accept-bit loss. Needs max_sensitivity (the public cap on c(theta, theta*) =
    #   2 x the model's per-record bound; larger steps are rejected without asking the parties).
    # penalty (Yildirim-Ermis; each party adds N(0, sigma^2)): either sd (a fixed total noise sd on the log
    #   acceptance ratio, each registry adding N(0, sd^2 / m); each decision charged at its own per-record
    #   sensitivity; needs max_sensitivity), or sigma = tau n^alpha c(theta, theta*):
    #   tau (the noise scale), alpha (default 0), n_records (required: public total n),
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

    # penalty with sd: proposal = "laplace" (default "random-walk"): an independence sampler from the DP
    #   Laplace approximation of [warm_start] (no proposal_scale / proposal_cov /
    #   adapt_* / target_accept keys). refit = true (the default with "laplace"): the proposal is refitted
    #   to the chains' pooled states at half the warm-up and at its end (inflated by 1.5 in the warm-up,
    #   by [warm_start] inflate after it) and frozen for the draws (mechanisms.samplers.RefitIndependenceMH:
    #   exact after the freeze; a DP approximation a few sds off costs the warm-up, not the run); a planned
    #   run's warm-up is then at least 80 (d + 1) / chains iterations. refit = false: the DP proposal
    #   throughout (and the pilot's re-plan from the warm-up's accept bits).

    [warm_start]                    # optional, before MCMC: a differentially private warm start (the keys
    mu = 0.3                        # are in coordinator/warm_start.py): noisy sums on secret shares (reveal
    steps = 5                       # sum), the covariates' public ellipsoid, a DP Laplace approximation
                                    # (a formula model: no ellipsoid, its box bound is exact; its scores are
                                    # released in the basis of the pilot's covariance, coordinator/planner.py)

    [reveal]
    mode = "sign"                   # sum | blinded | sign | svt  (blinded, sign and svt need m >= 3)
    topology = "mesh"               # mesh | relay
    threshold = 1                   # optional; default (m - 1) // 2; blinded/sign/svt need 1 <= t < m / 2
    sign_precompute = "inline"      # sign only: inline (7 rounds, default) | pooled (9 rounds, each public
                                    # square root computed once: less CPU per decision, two more rounds)
                                    # | blocks4 (5 online rounds after 2 precompute rounds; no lazy coin)
                                    # | prefix (3 online rounds after 2: for batch 1 on a WAN; semi-honest)
    precompute_ahead = false        # sign only (no lazy coin): each registry makes step k + 1's precompute
                                    # right after answering step k, so a step runs its online rounds only
    security = "semi-honest"        # | abort (sum, blinded, sign, svt; sign's precompute ahead too):
                                    # up to t deviating registries are caught (docs/SECURITY_ABORT.md)

    [privacy]                       # optional: the target this run must fit, checked with every party's
    gdp_mu = 1.0                    # PlanPrivacy dry run before the session opens; gdp_mu, or
    # epsilon = 3.0                 # epsilon and delta (0 < delta < 1).
    # delta = 1e-6                  # Only a sampler with a privacy bound can have a target
                                    # (penalty, abcdp); each party's own budget applies in any case.
    # Or a planned run (penalty with sd, proposal "laplace", [warm_start]; coordinator/planner.py):
    # target_epsilon = 18.0         # the run's length is what this buys (with delta, neighbours =
    #                               # "add-remove" | "replace-one", colluding, min_ess = 100: refused below,
    #                               # accountant = "pld" | "renyi": the registries' [budget] accountant);
    #                               # [sampler] max_sensitivity may then be left out: the plan chooses the
    #                               # cap (the 99.9 % quantile of c under the approximation).
    #                               # With a registry random intercept (kind penalty, bernoulli): a planned
    #                               # blocked run, no warm start, accountant "pld" (docs/PRIVACY.md,
    #                               # "Planned blocked runs")
    # stop_at_budget = true         # not with target_epsilon or abcdp (default false): accept a run whose
                                    # privacy dry run passes a registry's budget (for a penalty with sd:
                                    # at the cap, an upper bound); it is told where it may stop, and stops
                                    # there when the registry refuses a batch (exit code 3; in the warm-up:
                                    # no posterior, the warm-up's draws). Without it such a run is refused
                                    # before anything is released, naming the registry and the figures

    [design]                        # optional, a formula model's planned run: public guesses its pilot's
                                    # design dataset is drawn at (mechanisms/models/formula_design.py;
                                    # stated with the plan as the assumptions they are). Default: numeric
                                    # columns normal, centred in their bounds, sd = range/6, truncated;
                                    # categories equal shares; every coefficient 0 (the prior's centre)
    rate = 0.007                    # the outcome's expected level, sets the intercept: bernoulli the
                                    # prevalence, poisson the events per unit of exposure, gaussian the
                                    # outcome's mean, weibull the share of records with an event
    coefficients = { age = 0.04, "sex[M]" = 0.4 }   # design values of parameters, by output name
    columns = { biomarker = { mean = 2.3, sd = 1.2 }, sex = { shares = [0.52, 0.48] } }

    [output]
    formats = ["netcdf", "csv", "summary", "plots", "privacy", "provenance"]   # default: all

    [reference]                     # optional; MH samplers under --simulate: the plain (not private) fit of
    max_seconds = 120.0             # the pooled simulated records the run is compared with
                                    # (simulations/reference.py) stops after this many seconds (> 0; default
                                    # 120) with what it has, and a warning says so when it is not converged;
                                    # `confar run --no-reference` (study.fit(..., reference=False)) skips it

    [simulate]                      # optional: what `confar run --simulate` starts locally (LocalConsortium)
    parties = 7                     # m (default: the number of [[parties]], else 3)
    records = 2000                  # records per party (an integer, or one per party)
    data_seed = 7                   # seed of the synthetic data (default: experiment.seed)
    fixed_noise_keys = false        # TESTING ONLY: parties' noise repeatable (never for real data)
    party_gdp_mu = 2.0              # optional: each simulated party's GDP budget, or
    # party_epsilon = 50.0          # its eps-at-delta budget (with party_delta); else none
    # party_delta = 1e-5
    # party_colluding = 3           # optional: [budget] colluding of every party (default "all": m - 1)
    # party_neighbours = "add-remove"  # optional: [budget] neighbours of every party (default replace-one)
    # party_accountant = "renyi"    # optional with party_epsilon: [budget] accountant of every party
                                    # (default "pld"; a planned run's [privacy] accountant must match it)
    # party_per_run = "worst-record"  # optional with a budget: [budget] per_run of every party (default
                                    # "per-decision"; a run so charged spends at most what its plan priced)
    # party_require_approval = true # optional: every party's [governance] require_approval (issue 37): the
                                    # run needs [study], approved at each registry (confar-party study
                                    # approve --config <output_dir>/simulation/party-N/party.toml ...),
                                    # then continues with confar run --resume <output_dir>
    sources = ["csv", "postgresql", "sparql"]   # optional: where each registry keeps its records (one per
                                    # party, or one for all; default "csv"): csv, parquet, sqlite,
                                    # postgresql (a throwaway local cluster), sparql (a local Oxigraph
                                    # server, FAIRVASC-like RDF); read by each daemon through [data]
    data = ["r1.csv", "r2.csv", "r3.csv"]  # optional: each registry's records from these files (CSV with a
                                    # header, or Parquet; one per party, not with records); default: the
                                    # model's synthetic_data(rng, sizes), which a plug-in may define

    [study]                         # optional: the study registries approve (coordinator/study_request.py)
    title = "Mortality after ANCA vasculitis"
    reference = "AC-2026-017"       # the access committee's reference
    expires = "2027-06-30"          # the end asked for; `confar study request` writes the document

With ``[simulate]`` present, ``[coordinator]`` and ``[[parties]]`` may be left out (a simulated consortium
brings its own certificates and addresses).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.planner import BudgetTarget, check_accountant, read_target
from coordinator.sampler_settings import KINDS, MH_KINDS, SAMPLER_KEYS, SamplerSettings, read_sampler
from coordinator.simulate_settings import SimulateSettings, read_simulate
from coordinator.study_request import StudySettings, read_study, study_document
from coordinator.tables import (
    M_MAX,
    M_MIN,
    CoordinatorSettings,
    ExperimentError,
    Reader,
    read_coordinator,
    read_parties,
)
from coordinator.warm_start import WarmStartSettings, read_warm_start
from hss.abort_modes import SECURITY
from hss.fixedpoint import max_threshold
from hss.modes import FEATURES, REVEAL_MODES, reveal_mode
from hss.session import SIGN_PRECOMPUTE
from mechanisms.kinds import DecisionPlan
from mechanisms.models.base import Model, add_import_path, load_model
from mechanisms.models.ellipsoid import CovariateRegion
from mechanisms.models.formula import FormulaModel
from mechanisms.models.formula_design import DesignGuess
from mechanisms.samplers.local import LocalSettings
from proto.spec import PartyEntry
from proto.study import Study

F64 = npt.NDArray[np.float64]

TOPOLOGIES = ("mesh", "relay")
FORMATS = ("netcdf", "csv", "summary", "plots", "privacy", "provenance")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

TABLES = (
    "experiment",
    "coordinator",
    "parties",
    "model",
    "warm_start",
    "sampler",
    "reveal",
    "privacy",
    "output",
    "reference",
    "simulate",
    "study",
    "design",
)
REFERENCE_MAX_SECONDS = 120.0  # [reference] max_seconds by default


# ---- the experiment ----------------------------------------------------------------------------------------


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
class ReferenceSettings:
    """``[reference]``: the plain reference posterior of a simulated MH run (``simulations.reference``)."""

    max_seconds: float = REFERENCE_MAX_SECONDS  # wall time; then it stops with what it has


@dataclass(frozen=True)
class Experiment:
    source: Path  # the file it was read from (or the checkpoint copy)
    base_dir: Path  # relative paths were resolved against this folder
    text: str  # the file's text (provenance; saved with the checkpoint)
    name: str
    output_dir: Path
    seed: int
    coordinator: CoordinatorSettings
    parties: list[PartyEntry]
    model_name: str
    model_params: dict[str, Any]
    sampler: SamplerSettings
    reveal_mode: str
    topology: str
    threshold: int | None
    privacy: PrivacyTarget | None
    formats: tuple[str, ...]
    simulate: SimulateSettings | None
    sign_precompute: str = "inline"  # reveal.sign_precompute (hss.session.SIGN_PRECOMPUTE)
    precompute_ahead: bool = False  # reveal.precompute_ahead (parties.ahead, issue 16)
    security: str = "semi-honest"  # reveal.security (hss.modes.SECURITY, issue 25)
    model_path: tuple[Path, ...] = ()  # model.path: folders of model plug-ins (on the import path)
    warm_start: WarmStartSettings | None = None  # [warm_start]: the DP warm start (coordinator.warm_start)
    budget_target: BudgetTarget | None = None  # [privacy] target_epsilon: a planned run (coordinator.planner)
    design: DesignGuess | None = None  # [design]: a formula model's design dataset guesses (the pilot's)
    stop_at_budget: bool = False  # [privacy] stop_at_budget: a run that passes a registry's budget may start
    study: StudySettings | None = None  # [study]: the study request sent with every session (issue 37)
    reference: ReferenceSettings = ReferenceSettings()  # [reference]: the simulation's plain reference fit

    @property
    def study_text(self) -> str:
        """The study document's canonical text every session of the run carries ("" without [study])."""
        return self.study.text if self.study is not None else ""

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
        return "abcdp-rff" if self.sampler.simulator_run else self.model_name

    def decision_plan(self) -> DecisionPlan:
        """The public meaning of the run's decisions, sent as ``model_params``: the sampler's
        (``SamplerSettings.decision_plan``) with the model's arguments."""
        return self.sampler.decision_plan(self.model_params)

    def local_settings(self) -> LocalSettings:
        """A blocked run's local settings (``SamplerSettings.local_settings``)."""
        return self.sampler.local_settings()

    def session_params(self) -> dict[str, Any]:
        """The session's public ``model_params``: the decision plan's (``DecisionPlan.to_params``), or the
        run plan of federated ABCDP (``FederatedSvtPlan``)."""
        if self.sampler.simulator_run:
            return dict(self.sampler.abcdp)
        return self.decision_plan().to_params()

    def with_parties(self, parties: list[PartyEntry]) -> Experiment:
        """The same experiment against other endpoints (a simulated consortium's)."""
        from dataclasses import replace

        return replace(self, parties=sorted(parties, key=lambda p: p.id))


def check_model(exp: Experiment) -> list[str]:
    """``confar run --check`` on the model's public side: its prior at the ``[model.params]`` given draws
    the right shape, inside the model's bounds, with a finite log prior. Problems, each naming its key."""
    if exp.sampler.simulator_run:
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
    simulate = read_simulate(r, sim_tbl, doc, seed) if sim_tbl is not None else None
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

    model, model_name, model_params, model_path = _model(r, r.table(doc, "model"), kind)

    raw_privacy = doc.get("privacy")
    planned = isinstance(raw_privacy, dict) and "target_epsilon" in raw_privacy
    sampler = read_sampler(r, samp, kind, model, seed, planned)
    if sampler.penalty is not None and sampler.penalty_total_sd is not None:  # sd: each registry's share
        per = sampler.penalty_total_sd / math.sqrt(m)
        sampler = dataclasses.replace(sampler, penalty=dataclasses.replace(sampler.penalty, sd=per))
    warm_tbl = r.table(doc, "warm_start")
    warm = None
    if warm_tbl is not None:
        if kind not in MH_KINDS:
            raise r.err("warm_start", f"a warm start precedes MCMC (mh, adaptive-mh, penalty), not {kind!r}")
        n_default = sum(simulate.records) if simulate is not None and simulate.records else None
        warm = read_warm_start(r, warm_tbl, n_default)
        if model is not None and not isinstance(model, CovariateRegion) and warm.ellipsoid is not None:
            if "ellipsoid" in warm_tbl:  # the moments release fixes a covariate ellipsoid: not this model's
                raise r.err(
                    "warm_start.ellipsoid",
                    f"model {model_name!r} has no covariate ellipsoid (a formula's bound over its declared "
                    "box is exact): remove the key, or set it false",
                )
            warm = dataclasses.replace(warm, ellipsoid=None)
    if sampler.proposal == "laplace" and warm is None:
        raise r.err("sampler.proposal", "'laplace' is the warm start's approximation: add [warm_start]")

    reveal_tbl = r.table(doc, "reveal", required=True)
    mode, topology, threshold, sign_precompute, ahead = _reveal(r, reveal_tbl, kind, m)
    security = r.choice(reveal_tbl or {}, "reveal", "security", SECURITY, "semi-honest")
    try:
        reveal_mode(mode).require_security(security, sign_precompute, sampler.lazy is not None, ahead)
    except ValueError as exc:
        raise r.err("reveal.security", str(exc)) from exc

    if sampler.lazy is not None and (not reveal_mode(mode).lazy_coin or sign_precompute != "inline"):
        raise r.err(
            "sampler.lazy",
            "lazy acceptance ANDs a secret coin with the accept bit inside the sign protocol: it needs "
            f"reveal mode 'sign' with sign_precompute 'inline', got {mode!r} / {sign_precompute!r}",
        )
    if sampler.lazy is not None and ahead:
        raise r.err("reveal.precompute_ahead", "lazy acceptance makes its coin in the step: not offered")
    privacy_tbl = r.table(doc, "privacy")
    stop_at_budget = _stop_at_budget(r, privacy_tbl, kind)
    if privacy_tbl is not None and "stop_at_budget" in privacy_tbl:  # the rest of the table is the target
        privacy_tbl = {k: v for k, v in privacy_tbl.items() if k != "stop_at_budget"} or None
    budget_target = None
    if privacy_tbl is not None and "target_epsilon" in privacy_tbl:
        budget_target = read_target(r, privacy_tbl, m)
        pen = sampler.penalty
        if sampler.blocked:
            _check_blocked_target(r, budget_target, sampler, model, warm)
            assert pen is not None
        elif pen is None or not pen.fixed or sampler.proposal != "laplace" or warm is None:
            raise r.err(
                "privacy.target_epsilon",
                "a planned run needs [sampler] kind = 'penalty' with sd, proposal = 'laplace' and a "
                "[warm_start] (the plan prices decisions charged at their own sensitivity)",
            )
        if pen.max_sensitivity is None:  # left to the plan: the 99.9 % quantile of c (coordinator.planner)
            budget_target = dataclasses.replace(budget_target, choose_cap=True)
        check_accountant(
            r, budget_target, simulate, mode, m, max_threshold(m) if threshold is None else threshold
        )
        privacy = None
    else:
        privacy = _privacy(r, privacy_tbl, kind, sampler.lazy is not None)
    pen = sampler.penalty
    if pen is not None and pen.fixed and pen.max_sensitivity is None and budget_target is None:
        raise r.err(
            "sampler.max_sensitivity",
            "missing: a penalty with sd needs a public cap on c (or a planned run, [privacy] target_epsilon, "
            "whose plan chooses it)",
        )
    design = _design(r, r.table(doc, "design"), model, model_name)

    formats = _formats(r, r.table(doc, "output") or {})
    study_tbl = r.table(doc, "study")
    study = read_study(r, study_tbl) if study_tbl is not None else None
    reference = _reference(r, r.table(doc, "reference"), kind)

    exp = Experiment(
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
        precompute_ahead=ahead,
        security=security,
        warm_start=warm,
        budget_target=budget_target,
        design=design,
        stop_at_budget=stop_at_budget,
        reference=reference,
    )
    if study is None:
        return exp
    text = Study.from_doc(study_document(exp, study, r)).text()  # made once, from the file as written
    return dataclasses.replace(exp, study=dataclasses.replace(study, text=text))


def _check_blocked_target(
    r: Reader, target: BudgetTarget, sampler: SamplerSettings, model: Model | None, warm: object
) -> None:
    """A planned blocked run (``[privacy] target_epsilon`` with a registry random intercept): the plan
    prices the sweeps' GaussianEvents (``mechanisms.planning_blocked``) as the registries' ε-at-δ or GDP
    ledgers compose them, for a model whose bound holds at any offset of η; refused otherwise, naming why."""
    assert model is not None
    pen = sampler.penalty
    if pen is None or not pen.fixed:
        raise r.err(
            "privacy.target_epsilon",
            "a planned blocked run needs [sampler] kind = 'penalty' (its sd, local_sd and local_max_step may "
            "be left to the plan): the registries charge the penalty's noisy decisions and local steps",
        )
    if not model.offset_uniform_bound():
        family = f" (family {model.family!r})" if isinstance(model, FormulaModel) else ""
        raise r.err(
            "privacy.target_epsilon",
            f"a blocked run of model {model.name!r}{family} has no privacy bound (its per-record bound grows "
            "with the level of the linear predictor, which each registry's effect offsets): only family "
            "bernoulli (or logistic-random-intercept) can be planned under a budget with (1 | registry) "
            "(docs/PRIVACY.md, 'Blocked sampling under a budget')",
        )
    if target.accountant != "pld":
        raise r.err(
            "privacy.accountant",
            "'renyi' prices the accept bits of independent decisions; a blocked run's sweeps are charged as "
            "Gaussian events (shared block and own effect), which the plan prices by the GDP composition: "
            "use 'pld'",
        )
    if target.per_run != "per-decision":
        raise r.err(
            "privacy.per_run",
            "a blocked run's sweeps are charged per sweep (shared block and own effect); 'worst-record' is "
            "not offered for it: use 'per-decision'",
        )
    if warm is not None:
        raise r.err(
            "warm_start",
            "a blocked run starts its chains from the prior and tunes its own proposal: a planned blocked "
            "run takes no warm start (remove the table)",
        )


def _design(
    r: Reader, tbl: dict[str, Any] | None, model: Model | None, model_name: str
) -> DesignGuess | None:
    """``[design]``: a formula model's design-dataset guesses (``mechanisms.models.formula_design``),
    checked against the model (keys named)."""
    if tbl is None:
        return None
    if not isinstance(model, FormulaModel):
        raise r.err(
            "design",
            f"is a formula model's design dataset; model {model_name or 'abcdp'!r} plans from its own "
            "synthetic registries (remove the table)",
        )
    r.only(tbl, "design", ("rate", "coefficients", "columns"))
    rate = r.number(tbl, "design", "rate", None)
    coefficients: dict[str, float] = {}
    for name in r.get(tbl, "design", "coefficients", dict, {}):
        coefficients[name] = r.number(tbl["coefficients"], "design.coefficients", name)
    columns: dict[str, tuple[float, float]] = {}
    shares: dict[str, tuple[float, ...]] = {}
    for name, spec in r.get(tbl, "design", "columns", dict, {}).items():
        where = f"design.columns.{name}"
        if not isinstance(spec, dict):
            raise r.err(where, f"give {{mean, sd}} (a numeric column) or {{shares}} (values), got {spec!r}")
        r.only(spec, where, ("mean", "sd") if "shares" not in spec else ("shares",))
        if "shares" in spec:
            raw = r.get(spec, where, "shares", list)
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw):
                raise r.err(f"{where}.shares", f"must be numbers, got {raw!r}")
            shares[name] = tuple(float(v) for v in raw)
        else:
            columns[name] = (r.number(spec, where, "mean"), r.number(spec, where, "sd", gt=0.0))
    guess = DesignGuess(rate=rate, coefficients=coefficients, columns=columns, shares=shares)
    problems = guess.problems(model)
    if problems:
        key, why = problems[0]
        raise r.err(f"design.{key}", why)
    return guess


FORMULA_KEYS = frozenset({"formula", "family", "columns"})  # [model] keys of mechanisms.models.formula


def _model(
    r: Reader, model_tbl: dict[str, Any] | None, kind: str
) -> tuple[Model | None, str, dict[str, Any], tuple[Path, ...]]:
    """``[model]`` (none for abcdp): the model loaded from its name and params, its plug-in folders."""
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
        r.only(model_tbl, "model", ("name", "params", "path", *FORMULA_KEYS))
        model_params = dict(r.get(model_tbl, "model", "params", dict, {}))
        if FORMULA_KEYS & set(model_tbl):  # [model] formula = "y ~ x", family, columns: the formula model
            if model_tbl.get("name", "formula") != "formula":
                raise r.err("model.formula", "a formula is the model: remove model.name")
            for key in sorted(FORMULA_KEYS & set(model_tbl)):
                if key in model_params:
                    raise r.err(f"model.params.{key}", f"given twice: as model.{key} and model.params.{key}")
                model_params[key] = model_tbl[key]
            model_name = "formula"
        else:
            model_name = r.get(model_tbl, "model", "name", str)
        model_path = _folders(r, model_tbl, "model", "path")
        add_import_path(model_path)
        try:
            model = load_model(model_name, model_params)
        except ValueError as exc:
            key = "model.params" if model_params else "model.name"
            key = "model" if FORMULA_KEYS & set(model_tbl) else key
            raise r.err(key, str(exc)) from exc
    return model, model_name, model_params, model_path


def _reveal(
    r: Reader, rv: dict[str, Any] | None, kind: str, m: int
) -> tuple[str, str, int | None, str, bool]:
    """``[reveal]``: mode, topology, threshold, sign_precompute and precompute_ahead, checked against m and
    the sampler."""
    assert rv is not None
    r.only(rv, "reveal", ("mode", "topology", "threshold", "sign_precompute", "precompute_ahead", "security"))
    mode = r.choice(rv, "reveal", "mode", REVEAL_MODES)
    entry = reveal_mode(mode)
    topology = r.choice(rv, "reveal", "topology", TOPOLOGIES, "mesh")
    threshold = r.integer(rv, "reveal", "threshold", None, lo=0, hi=M_MAX)
    sign_precompute = r.choice(rv, "reveal", "sign_precompute", SIGN_PRECOMPUTE, "inline")
    if sign_precompute != "inline" and not entry.sign_precompute:
        raise r.err("reveal.sign_precompute", f"applies to reveal mode 'sign' only, not {mode!r}")
    ahead = r.get(rv, "reveal", "precompute_ahead", bool, False)
    if ahead and not entry.sign_precompute:
        raise r.err("reveal.precompute_ahead", f"applies to reveal mode 'sign' only, not {mode!r}")
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
    return mode, topology, threshold, sign_precompute, ahead


def _formats(r: Reader, out: dict[str, Any]) -> list[str]:
    """``[output] formats`` (default: all)."""
    r.only(out, "output", ("formats",))
    formats = r.get(out, "output", "formats", list, list(FORMATS))
    for i, f in enumerate(formats):
        if f not in FORMATS:
            raise r.err(f"output.formats[{i}]", f"unknown format {f!r} (allowed: {', '.join(FORMATS)})")
    if len(set(formats)) != len(formats):
        raise r.err("output.formats", f"repeats a format: {formats}")
    return list(formats)


def _reference(r: Reader, tbl: dict[str, Any] | None, kind: str) -> ReferenceSettings:
    """``[reference]`` (optional): the time cap of a simulated MH run's plain reference posterior."""
    if tbl is None:
        return ReferenceSettings()
    r.only(tbl, "reference", ("max_seconds",))
    if kind not in MH_KINDS:
        raise r.err(
            "reference",
            f"a reference posterior is fitted for simulated MH runs ({', '.join(MH_KINDS)}), not for "
            f"sampler.kind {kind!r}; remove [reference]",
        )
    return ReferenceSettings(r.number(tbl, "reference", "max_seconds", REFERENCE_MAX_SECONDS, gt=0.0))


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


def _stop_at_budget(r: Reader, tbl: dict[str, Any] | None, kind: str) -> bool:
    """``[privacy] stop_at_budget``: accept a run whose dry run passes a registry's privacy budget (it stops
    where the registry refuses a batch, without a posterior when that is in the warm-up)."""
    if tbl is None or "stop_at_budget" not in tbl:
        return False
    value = bool(r.get(tbl, "privacy", "stop_at_budget", bool))
    if value and kind == "abcdp":
        raise r.err(
            "privacy.stop_at_budget",
            "federated ABCDP is charged its whole-run epsilon once, when it starts: it cannot stop at a "
            "budget partway (remove the key)",
        )
    if value and "target_epsilon" in tbl:
        raise r.err(
            "privacy.stop_at_budget",
            "a planned run (target_epsilon) is sized to fit the budget at its expected charge and is not "
            "refused for its dry run at the cap; stop_at_budget is for a run without target_epsilon",
        )
    return value


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
