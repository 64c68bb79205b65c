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
* :func:`laplace_share`: one party's Laplace noise share.
* ``mechanisms.abcdp.svt_state``: :class:`PartySvtState`, one party's secret SVT state (threshold share,
  counters); its noise comes from one CSPRNG stream, or keyed (threshold share per epoch, query shares per
  batch) so that the state can be rebuilt from its public :class:`SvtCounters` and the keys after a crash.
* :func:`party_feature_sum`, :func:`candidate_embeddings`: S_j and φ̄ under the public map.
* ``mechanisms.abcdp.candidates``: :class:`CandidateQueue`, the coordinator's queue of public candidates,
  with suppressed candidates pushed back for re-evaluation (exported and restored bit for bit for the
  coordinator's checkpoint); :func:`gate` and :func:`reference_decisions`, the float reference of the
  revealed bits (the semantics of ``hss.svt.svt_plaintext``).

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

import functools
import math
from dataclasses import dataclass
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


def is_int(v: Any) -> bool:
    """An integer (numpy ones too) that is not a bool."""
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
        if not is_int(self.c) or self.c < 1:
            raise ValueError(f"c must be a positive integer, got {self.c!r}")
        if not isinstance(self.resample, (bool, np.bool_)):
            raise ValueError(f"resample must be a bool, got {self.resample!r}")
        if not is_int(self.n_records) or self.n_records < 1:
            raise ValueError(f"n_records must be a positive integer, got {self.n_records!r}")
        if not is_int(self.n_features) or self.n_features < 2 or self.n_features % 2:
            raise ValueError(f"n_features must be an even integer >= 2, got {self.n_features!r}")
        if not _is_real(self.bandwidth) or not math.isfinite(self.bandwidth) or not self.bandwidth > 0:
            raise ValueError(f"bandwidth must be a finite number > 0, got {self.bandwidth!r}")
        if not is_int(self.dim) or self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        if not is_int(self.map_seed) or not 0 <= self.map_seed < 2**63:
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
        if not is_int(m) or m < 1:
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
            if not is_int(d[k]):
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
