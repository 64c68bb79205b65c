"""Federated ABCDP, party side: the analysis ``abcdp-rff`` of the ``svt`` reveal mode.

c-sample ABCDP (Park, Vinaroz, Jitkrittum, Entropy 2021; DESIGN.md §1), the observed data Y* split by records
across the parties. The coordinator proposes θ's from the prior (public randomness) and sends the public mean
embeddings φ̄_i of their simulated data (random Fourier features, a public map); the parties decide, on
secret shares (``hss.svt``), the sparse-vector test

    accept_i  ⟺  t_i ≥ 0 ∧ ‖S/N − φ̄_i‖² ≤ t_i²,    t_i = ε_abc + Σ_j τ_j[i],   S = Σ_j S_j,

where S_j = Σ_{y ∈ party j} φ(y) is this party's feature sum (once per session) and τ_j = m_j − ν_j its
shares of the threshold noise Lap(b) and the query noise Lap(2b) (``PartySvtState``, the party's CSPRNG).
Only the SVT output bits are revealed, to the coordinator and to every party (which advances its own state
with them: count, RESAMPLE epochs, the halt after c accepts).

Runs (a session with a ``run_id``, as ``confar run`` opens them) resume after the coordinator or any registry
died. Their noise comes from the run noise key (``parties.replay``: secret, never leaves the party): the
threshold share of epoch e from a key of the run key, the plan digest (``parties.replay.plan_digest``) and e
(:func:`threshold_source`); the query shares of run step s from the key of s and its step digest
(``parties.replay.run_step_keys``). Each completed run step is recorded durably before the answer leaves, with
the SVT counters before it, its revealed bits (``parties.replay.SvtStep``, public) and the records' hash.
A later session from run step f continues after the recorded step s if f = s + 1, or before it if f = s
(:func:`resume_at_open`): the step is replayed or evaluated again with the same inputs only (another digest
is refused), so the same noise from the same state reveals the same bits (checked); anything else, changed
records or a damaged record are refused. Without a ``run_id`` the noise is keyed by the session.

Session ``model_params`` (public, JSON): ``FederatedSvtPlan.to_params()`` (ε_abc, ε_total, c, RESAMPLE,
N, the RFF map) and optionally ``columns`` (the columns holding this party's Y*, in order; default: all),
checked by ``FederatedSvtPlan.from_params``; a bad key is refused with INVALID_ARGUMENT naming it.

Privacy (replace-one neighbours on the pooled Y*, N public): the run is one sparse-vector mechanism whose ε is
fixed in advance by the plan, ``plan.privacy_event()`` (ε_total = (c+1)Δ/b, 2cΔ/b with RESAMPLE, Δ = 2/N),
however many candidates are evaluated. The daemon charges it ONCE per run (per session without a ``run_id``),
checked at open and committed durably at the first Evaluate before the records are read; the ledger records it
as run step 0 of the run with the plan digest and the run key's id (``proto.records.RunCharge``), and later
sessions of the run charge nothing (a crash between the charge and the first step's record charges once).
Threat model (coordinator not colluding): it holds against the coordinator and any outside observer of the
bits; the MPC (``hss.svt``, t < m/2) shows a coalition of parties nothing but the same bits, but it knows its
own noise shares, so only the others' shares protect a record. The plan splits the noise so that any
``plan.share_parties(m)`` parties' shares already sum to the full Laplace noise: the number is backed against
up to :func:`tolerated_colluders` colluders; a party whose ``[budget] colluding`` assumes more refuses.

The session's ABCDP state (:class:`SvtResume`, the secret :class:`SvtRun`) belongs to its :class:`AbcdpRff`
(``parties.run_state.RunStateAnalysis``); under security "abort" a batch runs ``hss.abort_svt``'s machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from hss.abort_svt import abort_bits, svt_decide_party_abort
from hss.randomness import SecureRandom, derive_key
from hss.runtime import Machine
from hss.session import PartyContext
from hss.svt import SvtFormat, SvtPartyResult, svt_decide_party
from mechanisms.samplers.terms import Terms
from parties.analyses import AnalysisError, Dataset, Unaccountable
from parties.replay import SvtStep, plan_digest
from parties.run_state import ResumeError, RunStateError

if TYPE_CHECKING:  # imported when first used: mechanisms.abcdp pulls in dp_accounting and scipy.stats,
    # which every daemon would otherwise load at start-up whatever its allowlist
    from pathlib import Path

    from mechanisms.abcdp.federated import FederatedSvtPlan
    from mechanisms.abcdp.svt_state import PartySvtState
    from mechanisms.privacy import PrivacyEvent, RevealView
    from parties.replay import RunRecord
    from proto.spec import SessionSpec

F64 = npt.NDArray[np.float64]

ANALYSIS = "abcdp-rff"
SVT_MODE = "svt"
MIN_PARTIES = 3
EXTRA_PARAMS = ("columns",)


@dataclass(frozen=True)
class AbcdpPlan:
    """A session's public ABCDP plan, parsed once from its ``model_params``: the run's ``FederatedSvtPlan``
    and the columns holding this party's Y* (None: all, in file order)."""

    svt: FederatedSvtPlan
    columns: tuple[str, ...] | None = None

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> AbcdpPlan:
        """AnalysisError naming the bad key."""
        from mechanisms.abcdp.federated import FederatedSvtPlan

        if not isinstance(params, dict):
            raise AnalysisError(f"{ANALYSIS}: model_params refused: must be an object, got {params!r}")
        plan_params = {k: v for k, v in params.items() if k not in EXTRA_PARAMS}
        try:
            svt = FederatedSvtPlan.from_params(plan_params)
        except (ValueError, TypeError, KeyError) as exc:
            raise AnalysisError(f"{ANALYSIS}: model_params refused: {exc}") from exc
        cols = params.get("columns")
        if cols is not None and (
            not isinstance(cols, list)
            or not cols
            or not all(isinstance(c, str) and c for c in cols)
            or len(set(cols)) != len(cols)
        ):
            raise AnalysisError(
                f"{ANALYSIS}: model_params refused: columns must be a non-empty list of distinct column "
                f"names, got {cols!r}"
            )
        return cls(svt, None if cols is None else tuple(cols))


class AbcdpRff:
    """The ``abcdp-rff`` analysis (see the module docstring). Runs only in reveal mode ``svt``.

    One instance per session (``parties.registry.get_analysis``) holds that session's ABCDP state at this
    party, behind the run-state seam (``parties.run_state.RunStateAnalysis``): where a run resumes (set at
    open) and the secret SVT state (made at the first evaluated step)."""

    name = ANALYSIS
    whole_run = "the ABCDP run"

    def __init__(self, params: dict[str, Any]) -> None:
        self.plan = AbcdpPlan.from_params(params)  # the session's, parsed once
        self._resume: SvtResume | None = None  # a run's: the counters it starts from (and the step to redo)
        self._run: SvtRun | None = None  # the secret state, from the session's first evaluated step on
        self._before: dict[str, int | bool] = {}  # the counters before the step being evaluated

    def lazy_coin(self) -> None:
        """ABCDP reveals SVT bits: no lazy coin."""
        return None

    def public_numbers(self) -> dict[str, float]:
        """The run plan's numbers (eps_abc, eps_total, c, n_records, ...)."""
        raw = self.plan.svt.to_params()
        return {k: float(v) for k, v in raw.items() if isinstance(v, int | float) and not isinstance(v, bool)}

    def privacy_events(
        self,
        mode: str,
        view: RevealView,
        n: int,
        batch: dict[str, npt.NDArray[Any]] | None = None,
        neighbours: str = "replace-one",
        rdp_orders: tuple[float, ...] | None = None,
    ) -> list[PrivacyEvent]:
        """The whole run's event (count 1, whatever ``n``; ``rdp_orders`` changes nothing: a Rényi budget
        reads its pure ε): the daemon charges it once per run, for either
        neighbour relation: the plan's ε is for the replace-one sensitivity Δ_ρ = 2/N of the mean embedding,
        and adding or removing a record moves it by at most 1/N (it divides by the public N), so the same
        charge bounds add-remove too.

        ``view`` says what the coalition this party's accounting assumes (``[budget] colluding``, default
        m - 1) observes given the session threshold t. :class:`Unaccountable` (refused under a budget) when
        the plan's ε is not backed against that coalition (:func:`threat_refusal`) or the run has no noise.
        """
        if mode != SVT_MODE:
            raise Unaccountable(f"{ANALYSIS} runs only in reveal mode {SVT_MODE!r}, not {mode!r}")
        plan = self.plan.svt
        why = threat_refusal(plan, view)
        if why is not None:
            raise Unaccountable(why)
        event = _ledger_event(plan, view)
        if event is None:
            raise Unaccountable(f"{ANALYSIS}: the plan has no finite epsilon")
        return [event]

    def terms(
        self,
        data: Dataset,
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        raise AnalysisError(f"{ANALYSIS} runs only in reveal mode {SVT_MODE!r}, not {mode!r}")

    # ---- its run state (parties.run_state.RunStateAnalysis) ----------------------------------------------

    def open_run(self, spec: SessionSpec, held: RunRecord | None, key_path: Path) -> dict[str, Any]:
        """Where the session of ABCDP run ``spec.run_id`` starts (:func:`resume_at_open`); refused when the
        state cannot be rebuilt, also when the run noise key ``key_path`` is missing although a run step is
        recorded (another key draws other threshold noise)."""
        resume = resume_at_open(spec, held, self.plan.svt)
        if held is not None and not key_path.exists():
            raise SvtResumeError(
                f"the run noise key {key_path} of ABCDP run {spec.run_id!r} is missing although run "
                f"step {held.run_step} is recorded here: the run's sparse-vector state cannot be "
                "rebuilt without it (another key draws other threshold noise); restore the key from "
                "a backup, or start a new run"
            )
        self._resume = resume
        return {"abcdp_start": resume.counters}

    def replayed(self) -> dict[str, Any]:
        """The session's first step, the run step completed here last, was replayed: the state after it."""
        resumed = self._resume
        if resumed is None or resumed.after_redo is None:
            return {}
        self._resume = SvtResume(resumed.after_redo)
        return {"abcdp_count": resumed.after_redo["count"]}

    def finished(self, spec: SessionSpec) -> str | None:
        """Once c accepts have been revealed the session decides no further candidate."""
        start = self._resume
        now = self._run.state.counters.to_dict() if self._run is not None else start.counters if start else {}
        if not now.get("done"):
            return None
        return (
            f"the ABCDP run is finished: c accepts reached ({now['count']} of "
            f"c = {self.plan.svt.c}); no further candidate is decided in this session "
            "(close it)"
        )

    def step_input(self, spec: SessionSpec, inputs: dict[str, npt.NDArray[Any]], n: int) -> F64:
        return phibar_input(self.plan.svt, spec.m, inputs, n)

    @property
    def started(self) -> bool:
        return self._run is not None

    def start(self, spec: SessionSpec, data: Dataset, noise_key: bytes) -> None:
        """The feature sum S_j and the SVT noise state: for a run keyed by the run noise key and the plan
        digest (threshold shares per epoch), from the counters the run resumes at; else from the session's
        key."""
        if spec.run_id:
            assert self._resume is not None  # set at open for every session of a run
            self._run = SvtRun.start(
                self.plan,
                data,
                spec.m,
                None,
                threshold_rng=threshold_source(noise_key, plan_digest(spec)),
                counters=self._resume.counters,
            )
        else:
            key = derive_key(noise_key, spec.session_id, b"svt-state")
            self._run = SvtRun.start(self.plan, data, spec.m, SecureRandom(key))
        self._run.security = spec.security  # "abort": hss.abort_svt's machine (issue 25)

    def machine(
        self, ctx: PartyContext, public: F64, step: int, rng: SecureRandom, query_rng: SecureRandom | None
    ) -> Machine[SvtPartyResult]:
        assert self._run is not None
        self._before = self._run.state.counters.to_dict()
        return self._run.machine(ctx, public, step, rng, query_rng)

    def _redo(self, run_step: int) -> RunRecord | None:
        """The record of ``run_step`` when the session re-evaluates it (only its first step can)."""
        redo = self._resume.redo if self._resume is not None else None
        return redo if redo is not None and redo.run_step == run_step else None

    def repeats(self, run_step: int) -> bool:
        return self._redo(run_step) is not None

    def settle(
        self, spec: SessionSpec, run_step: int, revealed: npt.NDArray[np.bool_]
    ) -> tuple[int, SvtStep | None]:
        """Advance the state with the revealed bits; a re-evaluated run step must reveal the bits it revealed
        the first time. The record part: the plan digest, the counters before the step and its bits."""
        assert self._run is not None
        accepts = self._run.settle(revealed)
        redo = self._redo(run_step)
        first = redo.svt.revealed if redo is not None and redo.svt is not None else None
        if first is not None and not np.array_equal(revealed, first):
            raise SvtRunError(
                f"run step {run_step} of run {spec.run_id!r}, evaluated again with the same inputs "
                "from the same state, revealed other bits than the first time; not answering"
            )
        if not run_step:
            return accepts, None
        bits = np.asarray(revealed, dtype=bool)
        return accepts, SvtStep(plan_digest(spec), self._before, bits)

    def audit(self) -> dict[str, Any]:
        assert self._run is not None
        return self._run.audit()


def tolerated_colluders(plan: FederatedSvtPlan, m: int, t: int) -> int:
    """How many colluding parties the plan's ε holds against (besides the coordinator and outsiders), in a
    session of ``m`` parties with Shamir threshold ``t``.

    The whole-run ε needs the noise an observer does not know to contain a full Lap(b) threshold and Lap(2b)
    query noise. The plan splits the noise so that any h = ``plan.share_parties(m)`` parties' shares sum to
    it ("robust": h = m - floor((m - 1)/2); "exact": h = m), so the bound holds against coalitions of up to
    m - h parties, and never beyond the session threshold t: a coalition of more than t parties reconstructs
    the Shamir-shared feature sums and noise shares (``hss.svt``). With "exact" shares a coalition that
    removes its own shares leaves a Gamma-difference noise that is not Laplace (one share of shape 1/m <= 1/2
    has a density unbounded at 0), so the number is backed against the coordinator only (0)."""
    return max(0, min(m - plan.share_parties(m), t))


def threat_refusal(plan: FederatedSvtPlan, view: RevealView) -> str | None:
    """Why a party whose accounting assumes the coalition of ``view`` cannot account for this plan (None:
    it can). The message names the coalition size, the session threshold and the noise plan."""
    if not plan.is_private:
        return (
            f"{ANALYSIS}: eps_total = inf is a non-private run (no noise); this party has a privacy budget "
            "and refuses it"
        )
    m, q = view.threat.m, view.threat.colluding
    t = view.session_threshold
    ok = tolerated_colluders(plan, m, t)
    if q > ok:
        limit = "the session threshold" if ok == t and m - plan.share_parties(m) > t else "the noise plan"
        return (
            f"{ANALYSIS}: the run's epsilon holds against at most {ok} colluding parties (m = {m}, session "
            f"threshold t = {t}, noise_shares = {plan.noise_shares!r}; the limit is {limit}), but this "
            f"party's [budget] colluding assumes {q}; set colluding <= {ok}, or open the session with a "
            "threshold and a noise plan that tolerate the coalition"
        )
    return None


def _ledger_event(plan: FederatedSvtPlan, view: RevealView) -> PrivacyEvent | None:
    """``plan.privacy_event()`` as a ledger event (None for a non-private run: eps_total = inf); its label
    says against how many colluding parties the number holds, so every report carries its threat model."""
    from mechanisms.privacy import EpsDeltaEvent, PrivacyEvent

    ev: Any = plan.privacy_event()
    if isinstance(ev, PrivacyEvent):
        return ev
    eps, delta = float(ev.eps), float(getattr(ev, "delta", 0.0))
    if not math.isfinite(eps):
        return None
    m = view.threat.m
    ok = tolerated_colluders(plan, m, view.session_threshold)
    scope = (
        f"holds against the coordinator and up to {ok} colluding parties, not more"
        if ok
        else "holds against the coordinator only, not against colluding parties"
    )
    label = f"{ANALYSIS} SVT run ({plan.noise_shares} noise shares, m = {m}: {scope})"
    return EpsDeltaEvent(eps, delta, label=label)


def check_session(spec: SessionSpec, data: Dataset, analysis: object) -> None:
    """Checks at OpenSession that need no record values: mode and analysis pair, m >= 3, the plan (of the
    session's ``analysis``), and the data's column names against the plan's data dimension (schema only)."""
    if (spec.reveal_mode == SVT_MODE) != (spec.model == ANALYSIS):
        raise AnalysisError(
            f"reveal mode {SVT_MODE!r} runs exactly the analysis {ANALYSIS!r}; got reveal mode "
            f"{spec.reveal_mode!r} with analysis {spec.model!r}"
        )
    if spec.m < MIN_PARTIES:
        raise AnalysisError(
            f"{ANALYSIS}: needs m >= {MIN_PARTIES} parties (honest-majority secure comparison), got {spec.m}"
        )
    if not isinstance(analysis, AbcdpRff):
        raise AnalysisError(f"reveal mode {SVT_MODE!r} runs the analysis {ANALYSIS!r}, not {spec.model!r}")
    plan = analysis.plan.svt
    if spec.security == "abort":  # inputs dealt as bits need a wider [b >= 0] comparison (hss.abort_svt)
        try:
            abort_bits(plan.svt_format(spec.m), spec.m)
        except ValueError as exc:
            raise AnalysisError(f"{ANALYSIS} with security 'abort': {exc}") from exc
    cols = analysis.plan.columns
    have = list(data.columns)
    use = list(cols) if cols is not None else have
    missing = [c for c in use if c not in data.columns]
    if missing:
        raise AnalysisError(f"{ANALYSIS}: this party's data has no column(s) {missing}; columns: {have}")
    if len(use) != plan.dim:
        raise AnalysisError(
            f"{ANALYSIS}: the plan's data dimension is {plan.dim} but this party's records have {len(use)} "
            f"column(s) {use}; name the columns with model_params.columns"
        )


def records_of(data: Dataset, plan: AbcdpPlan) -> F64:
    """This party's records of Y*, shape (n_j, dim): the named columns, or all columns in file order."""
    cols = list(plan.columns or data.columns)
    arr = np.column_stack([data.column(c) for c in cols]) if cols else np.zeros((0, 0))
    if not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))[:10].tolist()
        raise AnalysisError(f"{ANALYSIS}: records with NaN or infinite values (rows {bad}) are refused")
    return np.asarray(arr, dtype=np.float64)


def phibar_input(plan: FederatedSvtPlan, m: int, inputs: dict[str, npt.NDArray[Any]], n: int) -> F64:
    """The step's public candidate embeddings ``inputs["phibar"]``, (n, D), checked without any record:
    only that key, the shape, finite values and row norms <= 1 (mean embeddings of unit-norm features);
    ``m``: the session's parties (the SVT format's)."""
    d = plan.n_features
    extra = sorted(set(inputs) - {"phibar"})
    if extra:
        raise AnalysisError(f"unexpected inputs {extra} ({ANALYSIS} takes only 'phibar')")
    if "phibar" not in inputs:
        raise AnalysisError(f"input 'phibar' is required (float array of shape ({n}, {d}))")
    a = np.asarray(inputs["phibar"], dtype=np.float64)
    if a.shape != (n, d):
        raise AnalysisError(f"input 'phibar' must have shape ({n}, {d}), got {a.shape}")
    if not np.isfinite(a).all():
        raise AnalysisError("input 'phibar' has NaN or infinite entries")
    try:
        plan.svt_format(m).encode_phibar(a)
    except ValueError as exc:
        raise AnalysisError(f"input 'phibar' refused: {exc}") from exc
    return a


class SvtRunError(RunStateError):
    """This session's ABCDP run cannot continue (its noise state is mid-batch or inconsistent): fail it."""


class SvtResumeError(ResumeError):
    """A session of an ABCDP run cannot start where it asks to (the message names the run and both steps)."""


def threshold_source(run_key: bytes, plan: bytes) -> Callable[[int], SecureRandom]:
    """This party's threshold-noise stream of each epoch of a run: keyed by the run noise key, the run's plan
    digest and the epoch only, so every session of the run draws the same threshold share for an epoch."""

    def rng(epoch: int) -> SecureRandom:
        return SecureRandom(derive_key(run_key, plan, b"abcdp-svt/threshold/epoch/%d" % epoch))

    return rng


@dataclass(frozen=True)
class SvtResume:
    """Where a session of an ABCDP run starts at this party: the SVT counters before its first step and, when
    that step is the run step this party completed last (re-evaluated or replayed), that step's record."""

    counters: dict[str, int | bool]
    redo: RunRecord | None = None
    after_redo: dict[str, int | bool] | None = None  # the counters after ``redo`` (when it is replayed)


def resume_at_open(spec: SessionSpec, held: RunRecord | None, plan: FederatedSvtPlan) -> SvtResume:
    """The start of a session of ABCDP run ``spec.run_id`` at its ``first_run_step`` f, given this party's
    last completed run step ``held`` of the run (parties.replay). f = held + 1 continues from the state after
    it; f = held starts from the state before it (the step is then replayed or evaluated again, with the same
    inputs only: parties.steps refuses other inputs by the step digest); anything else is refused
    (:class:`SvtResumeError`), as is a record of another plan or of a session in another reveal mode."""
    from mechanisms.abcdp.svt_state import SvtCounters

    run, f = spec.run_id, spec.first_run_step
    if held is None:
        if f != 1:
            raise SvtResumeError(
                f"this party holds no completed run step of ABCDP run {run!r} (its sparse-vector state of "
                "the run was never made here, or its run record was moved away), but the session starts at "
                f"run step {f}: it can only start at run step 1; start a new run"
            )
        return SvtResume(SvtCounters().to_dict())
    if held.svt is None:
        raise SvtResumeError(
            f"run {run!r} is not an ABCDP run at this party: its run step {held.run_step} was a session in "
            "another reveal mode; a run keeps its reveal mode"
        )
    want = plan_digest(spec)
    if held.svt.plan_digest != want:
        raise SvtResumeError(
            f"ABCDP run {run!r} ran here with other session parameters (plan digest "
            f"{held.svt.plan_digest.hex()[:16]}…, now {want.hex()[:16]}…): a run continues only with the "
            "plan, threshold and parties it started with"
        )
    try:
        before = SvtCounters.from_dict(held.svt.before)
        before.check(plan)
        after = before.after(plan, held.svt.revealed)
    except (ValueError, RuntimeError) as exc:
        raise SvtResumeError(
            f"the record of run step {held.run_step} of ABCDP run {run!r} does not fit the run's plan: {exc}"
        ) from exc
    if f == held.run_step + 1:
        return SvtResume(after.to_dict())
    if f == held.run_step:
        return SvtResume(before.to_dict(), redo=held, after_redo=after.to_dict())
    raise SvtResumeError(
        f"this party's last completed run step of ABCDP run {run!r} is {held.run_step}, but the session "
        f"starts at run step {f}: a session of the run must start at run step {held.run_step} (evaluated "
        f"again with the same candidates, or replayed) or {held.run_step + 1}"
    )


@dataclass
class SvtRun:
    """One session's secret ABCDP state at this party: plan, feature sum S_j and the SVT noise state.

    Never logged or sent: ``feature_sum`` is a function of the records and ``state`` holds noise shares.
    """

    plan: FederatedSvtPlan
    fmt: SvtFormat
    feature_sum: F64 = field(repr=False)
    state: PartySvtState = field(repr=False)
    n_records: int
    steps: int = 0
    evaluated: int = 0  # candidates whose bit was revealed (including suppressed ones, which reveal 0)
    accepts: int = 0
    security: str = "semi-honest"  # the session's: "abort" runs hss.abort_svt.svt_decide_party_abort

    @classmethod
    def start(
        cls,
        session_plan: AbcdpPlan,
        data: Dataset,
        m: int,
        rng: SecureRandom | None,
        *,
        threshold_rng: Callable[[int], SecureRandom] | None = None,
        counters: dict[str, int | bool] | None = None,
    ) -> SvtRun:
        """Read the records and compute S_j once (the privacy charge must be committed before this).

        The noise state draws from ``rng`` (a session's stream; no run), or, for a session of a run, is keyed
        (``threshold_rng`` per epoch, query noise per step passed to :meth:`machine`) and starts at
        ``counters`` (:func:`resume_at_open`)."""
        from mechanisms.abcdp.federated import party_feature_sum
        from mechanisms.abcdp.svt_state import PartySvtState, SvtCounters

        plan = session_plan.svt
        records = records_of(data, session_plan)
        if records.shape[0] > plan.n_records:
            raise AnalysisError(
                f"{ANALYSIS}: this party holds {records.shape[0]} records but the plan's N (all parties "
                f"together) is {plan.n_records}"
            )
        fsum = np.asarray(party_feature_sum(plan, records), dtype=np.float64)
        if threshold_rng is not None:
            start = SvtCounters.from_dict(counters) if counters is not None else None
            state = PartySvtState.keyed(plan, m, threshold_rng, start)
        else:
            state = PartySvtState(plan, m, rng)
        return cls(
            plan=plan,
            fmt=plan.svt_format(m),
            feature_sum=fsum,
            state=state,
            n_records=int(records.shape[0]),
        )

    @property
    def done(self) -> bool:
        return bool(self.state.done)

    def machine(
        self,
        ctx: PartyContext,
        phibar: F64,
        step: int,
        rng: SecureRandom,
        query_rng: SecureRandom | None = None,
    ) -> Machine[SvtPartyResult]:
        """This step's secure SVT machine: noise from the state (a keyed state's query noise from
        ``query_rng``), remaining accepts from the state; ``rng`` is the protocol's own (masks).

        Bad inputs raise ValueError before any noise is drawn (the step may be retried); a failure after
        that raises :class:`SvtRunError` (the state has a batch pending: the session cannot continue)."""
        n = int(phibar.shape[0])
        self.fmt.encode_phibar(phibar)  # (phibar_input checked it) refuse before any noise is drawn
        try:
            tau = np.asarray(self.state.noise_for_batch(n, query_rng), dtype=np.float64)
            decide = svt_decide_party_abort if self.security == "abort" else svt_decide_party
            return decide(
                ctx,
                self.fmt,
                self.feature_sum,
                phibar,
                tau,
                float(self.plan.eps_abc),
                int(self.state.remaining),
                step,
                rng,
            )
        except Exception as exc:
            raise SvtRunError(f"SVT step {step} could not start: {type(exc).__name__}: {exc}") from exc

    def settle(self, revealed: npt.NDArray[np.bool_]) -> int:
        """Advance the state with the revealed bits (opened to every party); returns the number of accepts.

        Raises :class:`SvtRunError` when the bits are inconsistent with the state (more accepts than
        ``remaining``: a party deviated or messages were corrupted); the session cannot continue."""
        bits = np.asarray(revealed, dtype=bool)
        try:
            k = int(self.state.update(bits))
        except (ValueError, RuntimeError) as exc:
            raise SvtRunError(f"revealed bits refused by the SVT state: {exc}") from exc
        self.steps += 1
        self.accepts += k
        self.evaluated += int(bits.shape[0])
        return k

    def audit(self) -> dict[str, Any]:
        """Public counters for the audit log (never noise or feature sums); ``abcdp_accepts``: this session's,
        ``abcdp_count``: the run's."""
        return {
            "abcdp_accepts": self.accepts,
            "abcdp_count": int(self.state.count),
            "abcdp_c": int(self.plan.c),
            "abcdp_done": self.done,
        }

