"""Federated c-sample ABCDP: the pure per-party and coordinator-side state of one run.

The private data Y* = Y^(1) ∪ ... ∪ Y^(m) are split by records over m parties (N records in total, N
public). With a public random-feature map φ (‖φ(x)‖ = 1), the observed mean embedding is
μ* = S/N with S = Σ_j S_j, S_j = Σ_{i ∈ party j} φ(y_i), and the RFF-MMD distance of a candidate with
simulated mean embedding φ̄ is ρ = ‖S/N − φ̄‖ (Δ_ρ = 2/N, ρ ≤ 2). The sparse-vector test of Algorithm 1
(Park, Vinaroz, Jitkrittum, Entropy 23 (2021) 961), ρ + ν ≤ ε_abc + m, is evaluated on secret shares in
its square-root-free form

    t = ε_abc + Σ_j τ_j ≥ 0  ∧  ρ² ≤ t²,        τ_j = m_j − ν_j,

where party j's noise shares are differences of Gamma(1/h, 1) variables: m_j = b (G_j − G'_j) and
ν_j = 2b (H_j − H'_j). Any h parties' G's sum to Gamma(1, 1) = Exp(1), and the difference of two
independent Exp(1) variables is Lap(1); so the shares of any h parties sum to Lap(b) (threshold) and
Lap(2b) (query), the single-owner noise (infinite divisibility of the Laplace law). The threshold share
m_j is kept for an epoch (the whole run without RESAMPLE, until the next accept with RESAMPLE); ν_j is
fresh per evaluated candidate. h depends on the plan's ``noise_shares``:

* ``"exact"``: h = m. The m shares sum to exactly Lap(b) and Lap(2b): the federated run has the same
  output distribution as the single-owner sampler.
* ``"robust"`` (default): h = m − t with t = ⌊(m − 1)/2⌋, the largest coalition the honest-majority
  protocol tolerates. The shares of the ≥ m − t parties outside any such coalition still sum to Lap(b)
  plus independent extra noise, so the SVT bound holds against the coalition too; the price is more noise
  in total (all m shares sum to b·(Gamma(m/h) − Gamma(m/h)): standard deviation √(m/h) times the
  single-owner one, 1.32× for m = 7, 1.22× for m = 3).

This module owns (pure, no I/O, secret randomness passed in):

* :class:`FederatedSvtPlan`: the public run parameters (serialisable with ``to_params``/``from_params``).
* :class:`PartySvtState`: one party's secret SVT state (threshold share, counters); its noise comes from one
  CSPRNG stream, or keyed (threshold share per epoch, query shares per batch) so that the state can be
  rebuilt from its public :class:`SvtCounters` and the keys after a crash (a run's resume).
* :func:`party_feature_sum`, :func:`candidate_embeddings`: S_j and φ̄ under the public map.
* :class:`CandidateQueue`: the coordinator's queue of public candidates, with suppressed candidates
  pushed back for re-evaluation (exported and restored bit for bit for the coordinator's checkpoint).
* :func:`reference_decisions`: the float reference of the revealed bits (the semantics of
  ``hss.svt.svt_plaintext``).

Batches and gating. A batch of n candidates is decided in one protocol run; only the bits up to and
including the ``remaining``-th accept are revealed (``remaining`` = c − count without RESAMPLE, 1 with
RESAMPLE because the threshold changes after an accept), later ones are revealed as 0 ("suppressed":
never decided). Suppressed candidates go back to the front of the queue and are evaluated again with
fresh noise under the current threshold. The revealed sequence is therefore exactly the decision
sequence of the sequential Algorithm 1 on the stream of candidates in proposal order: every candidate is
revealed at most once, and re-asking a query whose answer was never released costs nothing.

Privacy (threat model). Every party charges, once per run and whatever the number of candidates, the
whole-run SVT guarantee ε_total = (c+1)Δ/b (2cΔ/b with RESAMPLE), Δ = 2/N, pure DP under replace-one
(:meth:`FederatedSvtPlan.privacy_event`). Parties are honest-but-curious, the coordinator does not
collude with them, and the decision protocol (``hss.svt``) opens only the gated accept bits; Shamir shares
of degree t < m/2 seen by a coalition of at most t parties are independent of the other parties' inputs.

* Against the coordinator, the guarantee holds in both modes: it sees the bits only, and the noise in t is
  Lap(b) − Lap(2b) (``exact``) or that plus independent noise (``robust``); conditioning on independent
  noise that does not depend on the data leaves an SVT with a data-independent shift of the threshold and
  of each query, which keeps the bound.
* Against a coalition of q ≤ t < m/2 parties, which also knows its own q noise shares: with ``robust``
  the other ≥ m − t parties' shares still contain a full Lap(b) / Lap(2b), and the bound holds. With
  ``exact`` the noise left is a difference of Gamma((m − q)/m) variables, which is NOT Laplace; for
  q < m/2 its privacy loss is bounded but larger than the Laplace one, and we do not state a number: the
  charged ε is then valid against the coordinator only.
* Against K − 1 colluding parties out of K = m (or any coalition of ≥ m/2): a lone Gamma(1/K)-difference
  share is strongly concentrated at 0 (shape 1/K ≤ 1/2: its density is unbounded at 0) and
  gives no DP guarantee; worse, ≥ m/2 parties hold enough Shamir shares to reconstruct every shared
  value, including the honest party's feature sum S_j. No guarantee is claimed against such coalitions.

Further caveats: the Mironov (2012) floating-point caveat of ``noise.py`` applies; decisions are made on a
fixed-point encoding (``hss.svt``), which can differ from the real-valued test only inside its encoding
margin, and a party's τ_j clamped to the format's range would distort its noise (the protocol reports
clamping; with the format from :meth:`FederatedSvtPlan.svt_format` it has negligible probability). The
plan's N must be the true total number of records: the sensitivity 2/N is only as good as that number.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from mechanisms.abcdp import accounting, events
from mechanisms.abcdp.distances import RandomFourierFeatures
from mechanisms.abcdp.svt import SVTConfig
from mechanisms.noise import gamma_shares

if TYPE_CHECKING:
    from hss.randomness import SecureRandom
    from hss.svt import SvtFormat

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

#: Keys of :meth:`FederatedSvtPlan.to_params`, in order.
PLAN_KEYS = (
    "eps_abc", "eps_total", "c", "resample", "n_records", "n_features", "bandwidth", "dim", "map_seed",
    "noise_shares",
)

#: How the Laplace noise is split into shares (see the module docstring).
NOISE_SHARES = ("robust", "exact")

#: Threat model stated in every federated ABCDP privacy event, by ``noise_shares``.
THREAT_MODEL = {
    "robust": (
        "honest-but-curious; valid against the coordinator (sees the revealed accept bits only) and any "
        "coalition of fewer than m/2 parties; none against m/2 or more colluding parties"
    ),
    "exact": (
        "honest-but-curious; valid against the coordinator (sees the revealed accept bits only); not "
        "against colluding parties, who remove their own noise shares"
    ),
}


class SvtStateError(RuntimeError):
    """A party's SVT state was asked to do something the run does not allow (over-reveal, after done)."""


# -- noise shares -------------------------------------------------------------------------------


def laplace_share(rng: SecureRandom, h: int, scale: float, shape: int | tuple[int, ...]) -> FloatArray:
    """One party's share scale·(G − G'), G, G' ~ Gamma(1/h, 1) from a CSPRNG; h shares sum to Lap(scale).

    Zeros when ``scale == 0`` (non-private run; no randomness consumed).
    """
    if not (scale >= 0.0) or not math.isfinite(scale):
        raise ValueError(f"Laplace scale must be finite and >= 0, got {scale}")
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    if scale == 0.0:
        return np.zeros(shp)
    return scale * (gamma_shares(rng, h, shp) - gamma_shares(rng, h, shp))


# -- the public plan ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _public_map(map_seed: int, dim: int, n_features: int, bandwidth: float) -> RandomFourierFeatures:
    rff = RandomFourierFeatures.draw(np.random.default_rng(map_seed), dim, n_features, bandwidth)
    rff.frequencies.flags.writeable = False  # shared by every caller: keep it immutable
    return rff


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class FederatedSvtPlan:
    """Public parameters of one federated c-sample ABCDP run (every party and the coordinator agree on it).

    Attributes:
        eps_abc: ABC threshold ε_abc (finite, >= 0).
        eps_total: target ε of the whole run (> 0; ``math.inf`` for a non-private run, which a party with
            a budget must refuse).
        c: number of accepts after which the run halts.
        resample: redraw the threshold noise after every accept (RESAMPLE).
        n_records: N, the total number of private records over all parties (public).
        n_features: D, the number of random Fourier features (even).
        bandwidth: the Gaussian-kernel bandwidth h (public; never tuned on the private data).
        dim: dimension d of one record.
        map_seed: public seed of the feature map's frequencies (0 <= seed < 2^63, TOML-safe).
        noise_shares: "robust" (default: any m − ⌊(m−1)/2⌋ parties' shares sum to Lap(b), so the bound
            holds against coalitions of fewer than m/2 parties; more noise in total) or "exact" (the m
            shares sum to exactly Lap(b), as the single-owner sampler; the bound then holds against the
            coordinator only). Optional in ``from_params`` (default "robust").

    Derived: ``sensitivity`` Δ = 2/N, ``laplace_scale`` b (threshold noise Lap(b), query noise Lap(2b)).
    """

    eps_abc: float
    eps_total: float
    c: int
    resample: bool
    n_records: int
    n_features: int
    bandwidth: float
    dim: int
    map_seed: int
    noise_shares: str = "robust"

    def __post_init__(self) -> None:
        if not _is_real(self.eps_abc) or not math.isfinite(self.eps_abc) or self.eps_abc < 0:
            raise ValueError(f"eps_abc must be a finite number >= 0, got {self.eps_abc!r}")
        if not _is_real(self.eps_total) or math.isnan(self.eps_total) or not self.eps_total > 0:
            raise ValueError(f"eps_total must be a number > 0 (or inf), got {self.eps_total!r}")
        if not _is_int(self.c) or self.c < 1:
            raise ValueError(f"c must be a positive integer, got {self.c!r}")
        if not isinstance(self.resample, (bool, np.bool_)):
            raise ValueError(f"resample must be a bool, got {self.resample!r}")
        if not _is_int(self.n_records) or self.n_records < 1:
            raise ValueError(f"n_records must be a positive integer, got {self.n_records!r}")
        if not _is_int(self.n_features) or self.n_features < 2 or self.n_features % 2:
            raise ValueError(f"n_features must be an even integer >= 2, got {self.n_features!r}")
        if not _is_real(self.bandwidth) or not math.isfinite(self.bandwidth) or not self.bandwidth > 0:
            raise ValueError(f"bandwidth must be a finite number > 0, got {self.bandwidth!r}")
        if not _is_int(self.dim) or self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        if not _is_int(self.map_seed) or not 0 <= self.map_seed < 2**63:
            raise ValueError(f"map_seed must be an integer in [0, 2^63), got {self.map_seed!r}")
        if self.noise_shares not in NOISE_SHARES:
            raise ValueError(f"noise_shares must be one of {NOISE_SHARES}, got {self.noise_shares!r}")
        for name in ("eps_abc", "eps_total", "bandwidth"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("c", "n_records", "n_features", "dim", "map_seed"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "resample", bool(self.resample))

    # derived public values

    @property
    def sensitivity(self) -> float:
        """Δ_ρ = 2/N for the RFF-MMD with ‖φ‖ = 1 (replace-one)."""
        return 2.0 / self.n_records

    @property
    def laplace_scale(self) -> float:
        """b: (c+1)Δ/ε_total, or 2cΔ/ε_total with RESAMPLE; 0 for ε_total = inf."""
        return accounting.svt_laplace_scale(self.eps_total, self.sensitivity, self.c, self.resample)

    @property
    def is_private(self) -> bool:
        return math.isfinite(self.eps_total)

    def share_parties(self, m: int) -> int:
        """h: the number of parties whose noise shares sum to one Lap(b) (m, or m − ⌊(m−1)/2⌋ if robust)."""
        if not _is_int(m) or m < 1:
            raise ValueError(f"number of parties m must be a positive integer, got {m!r}")
        return int(m) if self.noise_shares == "exact" else int(m) - (int(m) - 1) // 2

    def noise_std_factor(self, m: int) -> float:
        """Standard deviation of the summed noise relative to the single-owner Laplace noise: √(m/h)."""
        return math.sqrt(m / self.share_parties(m))

    # serialisation

    def to_params(self) -> dict[str, Any]:
        """JSON- and TOML-safe dict of the public parameters (ε_total = inf as the string "inf")."""
        return {
            "eps_abc": self.eps_abc,
            "eps_total": self.eps_total if math.isfinite(self.eps_total) else "inf",
            "c": self.c,
            "resample": self.resample,
            "n_records": self.n_records,
            "n_features": self.n_features,
            "bandwidth": self.bandwidth,
            "dim": self.dim,
            "map_seed": self.map_seed,
            "noise_shares": self.noise_shares,
        }

    @classmethod
    def from_params(cls, d: dict[str, Any]) -> FederatedSvtPlan:
        """Inverse of :meth:`to_params`; ValueError naming the missing, unknown or ill-typed key."""
        if not isinstance(d, dict):
            raise ValueError(f"federated ABCDP parameters must be a dict, got {type(d).__name__}")
        missing = [k for k in PLAN_KEYS if k not in d and k != "noise_shares"]
        if missing:
            raise ValueError(f"federated ABCDP parameters: missing key(s) {missing}")
        unknown = sorted(set(d) - set(PLAN_KEYS))
        if unknown:
            raise ValueError(f"federated ABCDP parameters: unknown key(s) {unknown}")
        vals: dict[str, Any] = {}
        for k in ("eps_abc", "bandwidth"):
            if not _is_real(d[k]):
                raise ValueError(f"federated ABCDP parameter {k!r} must be a number, got {d[k]!r}")
            vals[k] = float(d[k])
        et = d["eps_total"]
        if isinstance(et, str) and et.strip().lower() in ("inf", "infinity"):
            vals["eps_total"] = math.inf
        elif _is_real(et):
            vals["eps_total"] = float(et)
        else:
            raise ValueError(f"federated ABCDP parameter 'eps_total' must be a number or 'inf', got {et!r}")
        for k in ("c", "n_records", "n_features", "dim", "map_seed"):
            if not _is_int(d[k]):
                raise ValueError(f"federated ABCDP parameter {k!r} must be an integer, got {d[k]!r}")
            vals[k] = int(d[k])
        if not isinstance(d["resample"], bool):
            raise ValueError(f"federated ABCDP parameter 'resample' must be a bool, got {d['resample']!r}")
        vals["resample"] = d["resample"]
        ns = d.get("noise_shares", "robust")
        if not isinstance(ns, str) or ns not in NOISE_SHARES:
            raise ValueError(
                f"federated ABCDP parameter 'noise_shares' must be one of {NOISE_SHARES}, got {ns!r}"
            )
        vals["noise_shares"] = ns
        try:
            return cls(**vals)
        except ValueError as exc:
            raise ValueError(f"federated ABCDP parameters: {exc}") from exc

    # public objects derived from the plan

    def rff(self) -> RandomFourierFeatures:
        """The public random-feature map (frequencies from ``map_seed``; identical for every caller)."""
        return _public_map(self.map_seed, self.dim, self.n_features, self.bandwidth)

    def svt_config(self) -> SVTConfig:
        """The single-owner configuration with the same noise (Lap(b) threshold, Lap(2b) queries)."""
        return SVTConfig.laplace(self.eps_total, self.sensitivity, self.c, self.eps_abc, self.resample)

    def privacy_event(self) -> events.AbcdpPrivacyEvent:
        """The event every party charges once per run: ε_total of the whole run, δ = 0 (see module doc)."""
        cfg = self.svt_config()
        return events.AbcdpPrivacyEvent(
            name=events.SVT_LAPLACE,
            eps=cfg.eps_total(),
            delta=0.0,
            params={
                "federated": True,
                "c": self.c,
                "resample": self.resample,
                "eps_abc": self.eps_abc,
                "n_records": self.n_records,
                "sensitivity": self.sensitivity,
                "threshold_scale": cfg.threshold_scale,
                "distance_scale": cfg.distance_scale,
                "noise_shares": self.noise_shares,
                "charged": "once per run",
                "threat_model": THREAT_MODEL[self.noise_shares],
            },
        )

    def svt_format(self, m: int) -> SvtFormat:
        """The fixed-point format of ``hss.svt`` for this plan and m parties."""
        from hss.svt import SvtFormat

        return SvtFormat.for_plan(
            n_records=self.n_records, dim=self.n_features, m=m, laplace_scale=self.laplace_scale,
            eps_abc=self.eps_abc,
        )


# -- one party's secret state -------------------------------------------------------------------


@dataclass(frozen=True)
class SvtCounters:
    """The public counters of a party's SVT state: functions of the revealed bits only, so every party and
    the coordinator agree on them, and they can be written down (a run's resume record) without any secret.

    ``count``: accepts revealed so far; ``epoch``: threshold epoch (0 without RESAMPLE; with RESAMPLE the
    number of accepts, except that the c-th accept starts no new epoch); ``n_decided``: candidates whose
    decision was revealed; ``done``: c accepts reached.
    """

    count: int = 0
    epoch: int = 0
    n_decided: int = 0
    done: bool = False

    def check(self, plan: FederatedSvtPlan) -> None:
        """ValueError unless these counters are reachable under ``plan`` (a state written by another run,
        or damaged, is refused before any noise is drawn from it)."""
        ints = (self.count, self.epoch, self.n_decided)
        if not all(_is_int(v) and v >= 0 for v in ints) or not isinstance(self.done, bool):
            raise ValueError(f"SVT counters {self} must be integers >= 0 and a bool")
        if self.count > plan.c or self.done != (self.count >= plan.c) or self.n_decided < self.count:
            raise ValueError(f"SVT counters {self} are inconsistent with c = {plan.c}")
        epoch = (self.count - int(self.done)) if plan.resample else 0
        if self.epoch != epoch:
            raise ValueError(
                f"SVT counters {self}: epoch must be {epoch} after {self.count} accepts "
                f"(resample = {plan.resample})"
            )

    def remaining(self, plan: FederatedSvtPlan) -> int:
        """How many accepts the next batch may reveal: 1 with RESAMPLE, c − count without; 0 when done."""
        if self.done:
            return 0
        return 1 if plan.resample else plan.c - self.count

    def after(self, plan: FederatedSvtPlan, revealed: npt.ArrayLike) -> SvtCounters:
        """The counters after a batch whose opened bits are ``revealed``. SvtStateError if the bits reveal
        more than :meth:`remaining` accepts (or the run is done), ValueError if they are not bits."""
        bits = _as_bits(revealed)
        if self.done:
            raise SvtStateError(f"the run is done after {self.count} accepts (c = {plan.c})")
        k = int(bits.sum())
        rem = self.remaining(plan)
        if k > rem:
            raise SvtStateError(
                f"{k} accepts revealed but at most {rem} may be (count {self.count}, c = {plan.c}, "
                f"resample = {plan.resample})"
            )
        # decisions actually revealed: up to the last accept if the batch was gated, else all
        decided = int(np.flatnonzero(bits)[-1]) + 1 if (k and k == rem) else int(bits.shape[0])
        count = self.count + k
        done = count >= plan.c
        epoch = self.epoch + 1 if (k and plan.resample and not done) else self.epoch
        return SvtCounters(count, epoch, self.n_decided + decided, done)

    def to_dict(self) -> dict[str, int | bool]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> SvtCounters:
        keys = {"count", "epoch", "n_decided", "done"}
        if not isinstance(d, dict) or set(d) != keys:
            raise ValueError(f"SVT counters need exactly the keys {sorted(keys)}")
        if not all(type(d[k]) is int for k in ("count", "epoch", "n_decided")) or type(d["done"]) is not bool:
            raise ValueError(f"SVT counters {d!r} have wrong types")
        return cls(d["count"], d["epoch"], d["n_decided"], d["done"])


def _as_bits(revealed: npt.ArrayLike) -> BoolArray:
    bits = np.asarray(revealed)
    if bits.dtype != np.bool_:
        if not np.issubdtype(bits.dtype, np.integer) or not np.isin(bits, (0, 1)).all():
            raise ValueError("revealed must be booleans (or 0/1 integers)")
        bits = bits.astype(bool)
    if bits.ndim != 1:
        raise ValueError(f"revealed must be one-dimensional, got shape {bits.shape}")
    return bits


#: ``threshold_rng(epoch)``: the CSPRNG this party draws its threshold share of that epoch from.
ThresholdSource = Callable[[int], "SecureRandom"]


class PartySvtState:
    """One party's secret SVT state for one run: its threshold share and the public counters.

    Usage per batch: ``tau = state.noise_for_batch(n)`` (this party's τ_j = m_j − ν_j for the n
    candidates), run the decision protocol, then ``state.update(revealed)`` with the opened bits. Calls
    must alternate; a run whose protocol failed between the two must be abandoned (the state refuses to
    continue), never retried with the same state. The threshold share is secret: it is not in the repr.

    Two sources of noise:

    * one stream, ``PartySvtState(plan, m, rng)``: every threshold and query share is drawn from ``rng`` in
      turn (a session's CSPRNG; the state cannot be rebuilt once lost);
    * keyed, :meth:`keyed`: the threshold share of epoch e is drawn from ``threshold_rng(e)`` and each
      batch's query shares from the CSPRNG passed to :meth:`noise_for_batch` (e.g. keyed by the run step
      and its inputs). The state is then a function of the public :class:`SvtCounters` and the keys, so it
      can be rebuilt at any counters (``keyed(..., counters=c)``): asked the same batch with the same
      query stream from the same counters it draws exactly the same τ_j.
    """

    def __init__(
        self,
        plan: FederatedSvtPlan,
        m: int,
        rng: SecureRandom | None,
        *,
        threshold_rng: ThresholdSource | None = None,
        counters: SvtCounters | None = None,
    ) -> None:
        if not _is_int(m) or m < 1:
            raise ValueError(f"number of parties m must be a positive integer, got {m!r}")
        if (rng is None) == (threshold_rng is None):
            raise ValueError("give exactly one noise source: rng (one stream) or threshold_rng (keyed)")
        if rng is not None and not callable(getattr(rng, "uniform", None)):
            raise ValueError("rng must be a CSPRNG with uniform(shape) (hss.randomness.SecureRandom)")
        if rng is not None and counters is not None:
            raise ValueError("a one-stream state starts at the beginning of the run (no counters)")
        start = counters if counters is not None else SvtCounters()
        start.check(plan)
        self.plan = plan
        self.m = int(m)
        self.h = plan.share_parties(self.m)
        self._rng = rng
        self._threshold_rng = threshold_rng
        self._b = plan.laplace_scale
        self._set(start)
        self.aborted = False
        self._pending: int | None = None
        self._threshold = math.nan if self.done else self._draw_threshold()

    @classmethod
    def keyed(
        cls,
        plan: FederatedSvtPlan,
        m: int,
        threshold_rng: ThresholdSource,
        counters: SvtCounters | None = None,
    ) -> PartySvtState:
        """A keyed state (see the class docstring) at ``counters`` (default: the start of the run)."""
        return cls(plan, m, None, threshold_rng=threshold_rng, counters=counters)

    def __repr__(self) -> str:
        return (
            f"PartySvtState(m={self.m}, count={self.count}, epoch={self.epoch}, "
            f"n_decided={self.n_decided}, done={self.done})"
        )

    @property
    def counters(self) -> SvtCounters:
        """The public counters (what a resume record keeps; never the threshold share)."""
        return SvtCounters(self.count, self.epoch, self.n_decided, self.done)

    def _draw_threshold(self) -> float:
        rng = self._rng if self._rng is not None else self._threshold_rng(self.epoch)  # type: ignore[misc]
        return float(laplace_share(rng, self.h, self._b, 1)[0])

    @property
    def remaining(self) -> int:
        """How many accepts the next batch may reveal: 1 with RESAMPLE, c − count without; 0 when done."""
        return self.counters.remaining(self.plan)

    def _check_live(self, what: str) -> None:
        if self.aborted:
            raise SvtStateError(f"{what}: this run was aborted after an inconsistent reveal")
        if self.done:
            raise SvtStateError(f"{what}: the run is done after {self.count} accepts (c = {self.plan.c})")

    def noise_for_batch(self, n: int, rng: SecureRandom | None = None) -> FloatArray:
        """τ_j for n candidates: this epoch's threshold share minus fresh Lap(2b) query-noise shares.

        ``rng``: the batch's query-noise stream; required by a keyed state, refused by a one-stream one."""
        self._check_live("noise_for_batch")
        if self._pending is not None:
            raise SvtStateError(
                f"noise_for_batch: the previous batch of {self._pending} was not settled with update()"
            )
        if not _is_int(n) or n < 1:
            raise ValueError(f"batch size n must be a positive integer, got {n!r}")
        if (rng is None) != (self._rng is not None):
            raise ValueError(
                "noise_for_batch: a keyed state needs the batch's query-noise rng; a one-stream state "
                "draws from its own"
            )
        nu = laplace_share(rng if rng is not None else self._rng, self.h, 2.0 * self._b, int(n))  # type: ignore[arg-type]
        self._pending = int(n)
        return self._threshold - nu

    def update(self, revealed: npt.ArrayLike) -> int:
        """Apply the opened bits of the pending batch; returns the number of accepts.

        Redraws the threshold share after an accept with RESAMPLE (new epoch); marks the run done at c.
        Raises :class:`SvtStateError` if more than ``remaining`` accepts are revealed (the state is then
        aborted), if no batch is pending, or after done.
        """
        self._check_live("update")
        if self._pending is None:
            raise SvtStateError("update: no batch pending (call noise_for_batch first)")
        bits = _as_bits(revealed)
        if bits.shape != (self._pending,):
            raise ValueError(f"revealed has shape {bits.shape}; the pending batch has {self._pending}")
        return self._apply(bits)

    def advance(self, revealed: npt.ArrayLike) -> int:
        """Apply the bits of a batch this state did not draw noise for: a run step whose result is already
        known (a replayed run step). Keyed states only (the next epoch's threshold comes from its key)."""
        self._check_live("advance")
        if self._rng is not None:
            raise SvtStateError("advance: only a keyed state can skip a batch (its noise is keyed)")
        if self._pending is not None:
            raise SvtStateError(f"advance: a batch of {self._pending} is pending")
        return self._apply(_as_bits(revealed))

    def _set(self, c: SvtCounters) -> None:
        self.count, self.epoch, self.n_decided, self.done = c.count, c.epoch, c.n_decided, c.done

    def _apply(self, bits: BoolArray) -> int:
        before = self.counters
        try:
            after = before.after(self.plan, bits)
        except SvtStateError as exc:
            self.aborted = True
            raise SvtStateError(f"update: {exc}; run aborted") from exc
        self._pending = None
        self._set(after)
        if self.done:
            self._threshold = math.nan
        elif after.epoch != before.epoch:
            self._threshold = self._draw_threshold()
        return after.count - before.count


# -- features -----------------------------------------------------------------------------------


def party_feature_sum(plan: FederatedSvtPlan, records: npt.ArrayLike) -> FloatArray:
    """S_j = Σ_i φ(y_i) over this party's records, (n_j, d) (or (n_j,) for d = 1) -> (D,)."""
    x = np.asarray(records, dtype=np.float64)
    if x.ndim == 1 and plan.dim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != plan.dim:
        raise ValueError(f"records must have shape (n_j, {plan.dim}), got {np.shape(records)}")
    if x.shape[0] > plan.n_records:
        raise ValueError(f"{x.shape[0]} records exceed the plan's total n_records = {plan.n_records}")
    if not np.isfinite(x).all():
        raise ValueError("records must be finite (no NaN or inf)")
    if x.shape[0] == 0:
        return np.zeros(plan.n_features)
    return np.asarray(plan.rff().features(x).sum(axis=0), dtype=np.float64)


def candidate_embeddings(plan: FederatedSvtPlan, simulated: npt.ArrayLike) -> FloatArray:
    """φ̄ of each candidate's simulated data set: (n, n_sim, d) (or (n, n_sim) for d = 1) -> (n, D)."""
    sim = np.asarray(simulated, dtype=np.float64)
    if not np.isfinite(sim).all():
        raise ValueError("simulated data must be finite (no NaN or inf)")
    return plan.rff().mean_embedding(sim, dtype=np.float64)


def distances_from_sum(
    plan: FederatedSvtPlan, feature_sum: npt.ArrayLike, phibar: npt.ArrayLike
) -> FloatArray:
    """ρ_i = ‖S/N − φ̄_i‖ (float reference, e.g. for the single-owner comparison)."""
    s = np.asarray(feature_sum, dtype=np.float64)
    e = np.atleast_2d(np.asarray(phibar, dtype=np.float64))
    if s.shape != (plan.n_features,) or e.shape[1] != plan.n_features:
        raise ValueError(f"feature_sum must be ({plan.n_features},) and phibar (n, {plan.n_features})")
    return np.asarray(np.linalg.norm(s / plan.n_records - e, axis=1), dtype=np.float64)


def gate(accept: npt.ArrayLike, remaining: int) -> BoolArray:
    """Keep the first ``remaining`` accepts, zero the rest (the revealed bits of a batch)."""
    a = np.array(accept, dtype=bool)
    if remaining < 0:
        raise ValueError(f"remaining must be >= 0, got {remaining}")
    hits = np.flatnonzero(a)
    if hits.size > remaining:
        a[hits[remaining]:] = False
    return a


def reference_decisions(
    plan: FederatedSvtPlan,
    feature_sums: npt.ArrayLike,
    phibar: npt.ArrayLike,
    taus: npt.ArrayLike,
    remaining: int,
) -> BoolArray:
    """Float reference of the revealed bits (the semantics of ``hss.svt.svt_plaintext``).

    ``feature_sums`` (m, D), ``phibar`` (n, D), ``taus`` (m, n): accept_i iff t_i ≥ 0 ∧ ρ_i² ≤ t_i² with
    t_i = ε_abc + Σ_j τ_j[i], ρ_i² = ‖S/N − φ̄_i‖²; gated to the first ``remaining`` accepts.
    """
    fs = np.atleast_2d(np.asarray(feature_sums, dtype=np.float64))
    tau = np.atleast_2d(np.asarray(taus, dtype=np.float64))
    rho = distances_from_sum(plan, fs.sum(axis=0), phibar)
    if tau.shape != (fs.shape[0], rho.shape[0]):
        raise ValueError(f"taus must have shape (m, n) = ({fs.shape[0]}, {rho.shape[0]}), got {tau.shape}")
    t = plan.eps_abc + tau.sum(axis=0)
    return gate((t >= 0.0) & (rho * rho <= t * t), remaining)


# -- the coordinator's candidate queue ----------------------------------------------------------


@dataclass
class CandidateQueue:
    """Public candidates (θ, φ̄) waiting for a decision, on the coordinator's side.

    ``push`` appends proposals; ``next_batch(n)`` hands out (up to) n from the front; ``settle(revealed)``
    consumes the candidates whose bits were revealed (up to and including the last accept if the batch was
    gated, else all), records the accepted θ's, and puts the suppressed ones back at the front. The counters
    mirror :class:`PartySvtState` (both are functions of the public revealed bits).
    """

    plan: FederatedSvtPlan
    count: int = 0
    n_proposed: int = 0
    n_suppressed: int = 0
    done: bool = False
    _thetas: FloatArray | None = field(default=None, repr=False)
    _phibars: FloatArray | None = field(default=None, repr=False)
    _ids: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    _in_flight: int | None = field(default=None, repr=False)
    _decisions: list[BoolArray] = field(default_factory=list, repr=False)
    _decided_ids: list[npt.NDArray[np.int64]] = field(default_factory=list, repr=False)
    _accepted: list[FloatArray] = field(default_factory=list, repr=False)

    @property
    def pending(self) -> int:
        """Candidates in the queue (including any batch in flight)."""
        return int(self._ids.shape[0])

    @property
    def remaining(self) -> int:
        if self.done:
            return 0
        return 1 if self.plan.resample else self.plan.c - self.count

    @property
    def n_evaluated(self) -> int:
        """Revealed decisions so far (suppressed evaluations are not counted)."""
        return int(sum(d.shape[0] for d in self._decisions))

    @property
    def decisions(self) -> BoolArray:
        return np.concatenate(self._decisions) if self._decisions else np.zeros(0, dtype=bool)

    @property
    def decided_ids(self) -> npt.NDArray[np.int64]:
        """Proposal-order ids of the decided candidates, in decision order."""
        return np.concatenate(self._decided_ids) if self._decided_ids else np.zeros(0, dtype=np.int64)

    @property
    def accepted_thetas(self) -> FloatArray:
        if not self._accepted:
            d = 0 if self._thetas is None else self._thetas.shape[1]
            return np.zeros((0, d))
        return np.concatenate(self._accepted, axis=0)

    @property
    def batch_ids(self) -> npt.NDArray[np.int64]:
        """Proposal-order ids of the batch in flight (empty if none)."""
        return self._ids[: self._in_flight or 0].copy()

    def push(self, thetas: npt.ArrayLike, phibars: npt.ArrayLike) -> None:
        """Append proposed candidates: θ (n, p) (or (n,)) and their simulated mean embeddings (n, D)."""
        th = np.asarray(thetas, dtype=np.float64)
        if th.ndim == 1:
            th = th[:, None]
        ph = np.asarray(phibars, dtype=np.float64)
        if th.ndim != 2 or ph.shape != (th.shape[0], self.plan.n_features):
            raise ValueError(
                f"push: thetas must be (n, p) and phibars (n, {self.plan.n_features}); "
                f"got {th.shape}, {ph.shape}"
            )
        if not (np.isfinite(th).all() and np.isfinite(ph).all()):
            raise ValueError("push: candidates must be finite")
        ids = np.arange(self.n_proposed, self.n_proposed + th.shape[0], dtype=np.int64)
        if self._thetas is None or self._phibars is None:
            self._thetas, self._phibars = th, ph
        else:
            if th.shape[1] != self._thetas.shape[1]:
                raise ValueError(f"push: theta dimension {th.shape[1]} != {self._thetas.shape[1]}")
            self._thetas = np.concatenate([self._thetas, th])
            self._phibars = np.concatenate([self._phibars, ph])
        self._ids = np.concatenate([self._ids, ids])
        self.n_proposed += th.shape[0]

    def next_batch(self, n: int) -> tuple[FloatArray, FloatArray]:
        """The (up to) n candidates at the front: (θ (k, p), φ̄ (k, D)); one batch in flight at a time."""
        if self.done:
            raise SvtStateError(f"next_batch: the run is done after {self.count} accepts")
        if self._in_flight is not None:
            raise SvtStateError("next_batch: the previous batch was not settled")
        if not _is_int(n) or n < 1:
            raise ValueError(f"batch size must be a positive integer, got {n!r}")
        k = min(int(n), self.pending)
        if k == 0 or self._thetas is None or self._phibars is None:
            raise SvtStateError("next_batch: the queue is empty (push candidates first)")
        self._in_flight = k
        return self._thetas[:k].copy(), self._phibars[:k].copy()

    def settle(self, revealed: npt.ArrayLike) -> int:
        """Consume the batch in flight given its opened bits; returns the number of accepts."""
        if self._in_flight is None or self._thetas is None or self._phibars is None:
            raise SvtStateError("settle: no batch in flight")
        bits = np.asarray(revealed, dtype=bool)
        k_in = self._in_flight
        if bits.shape != (k_in,):
            raise ValueError(f"settle: revealed has shape {bits.shape}, the batch has {k_in} candidates")
        k = int(bits.sum())
        if k > self.remaining:
            raise SvtStateError(f"settle: {k} accepts revealed but at most {self.remaining} may be")
        used = int(np.flatnonzero(bits)[-1]) + 1 if (k and k == self.remaining) else k_in
        self._decisions.append(bits[:used].copy())
        self._decided_ids.append(self._ids[:used].copy())
        self._accepted.append(self._thetas[:used][bits[:used]])
        self.n_suppressed += k_in - used
        # the decided candidates leave; the suppressed ones stay at the front (re-evaluated next)
        self._thetas, self._phibars, self._ids = self._thetas[used:], self._phibars[used:], self._ids[used:]
        self._in_flight = None
        self.count += k
        if self.count >= self.plan.c:
            self.done = True
        return k

    # checkpoints (public state only: the coordinator writes it after every settled batch)

    def export(self) -> dict[str, Any]:
        """The queue between batches as plain values and numpy arrays (bit-exact; no batch in flight):
        counters, the pending candidates (θ, φ̄, proposal ids), and the decisions, decided ids and accepted
        θ's so far. :meth:`restore` is its inverse."""
        if self._in_flight is not None:
            raise SvtStateError("export: a batch is in flight (settle it first)")
        p = self._thetas.shape[1] if self._thetas is not None else None
        return {
            "count": self.count,
            "n_proposed": self.n_proposed,
            "n_suppressed": self.n_suppressed,
            "done": self.done,
            "theta_dim": p,
            "thetas": self._thetas.copy() if self._thetas is not None else np.zeros((0, 0)),
            "phibars": np.zeros((0, self.plan.n_features)) if self._phibars is None else self._phibars.copy(),
            "ids": self._ids.copy(),
            "decisions": self.decisions.copy(),
            "decided_ids": self.decided_ids.copy(),
            "accepted": self.accepted_thetas.copy(),
        }

    @classmethod
    def restore(cls, plan: FederatedSvtPlan, d: dict[str, Any]) -> CandidateQueue:
        """The queue :meth:`export` wrote; ValueError naming what is inconsistent (another plan's queue, a
        damaged checkpoint)."""
        try:
            count, n_proposed, n_suppressed = (int(d[k]) for k in ("count", "n_proposed", "n_suppressed"))
            done, p = bool(d["done"]), d["theta_dim"]
            thetas = np.asarray(d["thetas"], dtype=np.float64)
            phibars = np.asarray(d["phibars"], dtype=np.float64)
            ids = np.asarray(d["ids"], dtype=np.int64)
            decisions = np.asarray(d["decisions"], dtype=bool)
            decided_ids = np.asarray(d["decided_ids"], dtype=np.int64)
            accepted = np.asarray(d["accepted"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"candidate queue checkpoint: {type(exc).__name__}: {exc}") from exc
        k = ids.shape[0]
        problems = []
        if p is not None and (not _is_int(p) or p < 1):
            problems.append(f"theta_dim {p!r}")
        if p is not None and (thetas.shape != (k, p) or phibars.shape != (k, plan.n_features)):
            problems.append(f"pending thetas {thetas.shape} / phibars {phibars.shape} for {k} ids")
        if p is None and (k or n_proposed):
            problems.append("candidates without a theta dimension")
        if decisions.ndim != 1 or decided_ids.shape != decisions.shape:
            problems.append(f"decisions {decisions.shape} vs decided ids {decided_ids.shape}")
        hits = int(decisions.sum())
        if count != hits or accepted.shape[0] != count or count > plan.c:
            problems.append(f"count {count}, {hits} accepts decided, {accepted.shape[0]} kept")
        elif count and (accepted.ndim != 2 or accepted.shape[1] != p):
            problems.append(f"accepted thetas {accepted.shape} for theta_dim {p}")
        decided = decided_ids.shape[0]
        if done != (count >= plan.c) or not 0 <= n_suppressed or n_proposed != k + decided:
            problems.append(f"done {done}, {n_proposed} proposed, {k} pending, {decided} decided")
        if not (np.isfinite(thetas).all() and np.isfinite(phibars).all() and np.isfinite(accepted).all()):
            problems.append("non-finite candidates")
        if problems:
            raise ValueError("candidate queue checkpoint is inconsistent: " + "; ".join(problems))
        q = cls(plan, count=count, n_proposed=n_proposed, n_suppressed=n_suppressed, done=done)
        if p is not None:
            q._thetas, q._phibars = thetas.copy(), phibars.copy()
        q._ids = ids.copy()
        if decisions.shape[0]:
            q._decisions, q._decided_ids = [decisions.copy()], [decided_ids.copy()]
        if accepted.shape[0]:
            q._accepted = [accepted.reshape(count, -1).copy()]
        return q
