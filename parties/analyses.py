"""Analyses a party can allow: each turns the party's own records and a batch of public proposals into
its private terms of the decisions, S = public + sum_j (l_j + V_j).

An :class:`Analysis` is registered by name (``register``); a party's config allowlists names and bounds
their numeric parameters. ``terms`` is vectorised over records and proposals and gets this party's
secret noise generator (never the experiment's public seed). Built in:

* ``gaussian-mean`` — x_i ~ N(theta, sigma^2) with sigma known; for MH proposals theta -> theta_star,
  l_j = sum_{i in party j} [log N(x_i; theta*, sigma) - log N(x_i; theta, sigma)], computed from the
  party's sufficient statistics. Noise ``"exp"`` (default) adds V_j ~ Gamma(1/m, 1), so that summed over
  the parties V ~ Exp(1) = -log U and ``S >= 0`` is exactly the MH accept event (confidential
  accept-reject identity); ``"none"`` adds nothing (sum-mode tests, where S itself is revealed). Blinded
  mode also draws W_j ~ Gamma(1/m, 1).

Statistical models proper (and the vetted noise samplers of ``mechanisms/``) are expected to be added
here by registration; this module only fixes the seam.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hss.protocols import LazyCoin
from hss.randomness import SecureRandom
from mechanisms import noise

if TYPE_CHECKING:
    from mechanisms.privacy import PrivacyEvent, RevealView

F64 = npt.NDArray[np.float64]


class AnalysisError(ValueError):
    """Parameters or inputs an analysis refuses (says which and why)."""


@dataclass(frozen=True)
class Dataset:
    """A party's records: named float64 columns of equal length."""

    columns: dict[str, F64]

    @property
    def n(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def column(self, name: str) -> F64:
        if name not in self.columns:
            raise AnalysisError(f"data has no column {name!r}; columns: {sorted(self.columns)}")
        return self.columns[name]


@dataclass(frozen=True)
class Terms:
    values: F64  # this party's l_j + V_j, one per decision
    public: F64 | None  # the public term (the same at every party) or None
    blind: F64 | None  # W_j for blinded mode
    clipped_records: int | None = None  # record log-ratios clipped (penalty c = "clip"): for the audit line


class Unaccountable(AnalysisError):
    """The analysis cannot back a per-step privacy bound for this session (``reason`` says why, in words
    that name the numbers); a party with a privacy budget refuses the session with that reason."""


class Analysis(Protocol):
    """An analysis a party can run. Besides these two methods an analysis may define the optional

        privacy_events(params, mode, view, n) -> list[PrivacyEvent]

    (see :class:`PrivacyAccounted`): the privacy events (``mechanisms.privacy``) that answering one batch of
    ``n`` decisions in reveal ``mode`` adds to this party's ledger, computed from the public parameters only,
    for ``view`` (``mechanisms.privacy.RevealView``: what the coalition this party assumes observes given the
    session threshold, and the noise left protecting a record). It raises :class:`Unaccountable` (with the
    reason) when the per-step privacy loss is unbounded or unknown; an analysis without the method is
    unaccountable too. A party with a privacy budget then refuses the session (``parties.privacy_budget``)."""

    name: str

    def check_params(self, params: dict[str, Any]) -> None: ...

    def terms(
        self,
        data: Dataset,
        params: dict[str, Any],
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms: ...


@runtime_checkable
class PrivacyAccounted(Protocol):
    """The optional privacy method of an :class:`Analysis` (checked with ``isinstance``)."""

    def privacy_events(
        self, params: dict[str, Any], mode: str, view: RevealView, n: int
    ) -> list[PrivacyEvent]: ...




def lazy_coin(params: dict[str, Any]) -> LazyCoin | None:
    """The session's secret lazy coin (``model_params.lazy``, the same at every party), or None."""
    raw = params.get("lazy")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise AnalysisError(f"lazy must be an object like {{'gamma': 0.5}}, got {raw!r}")
    from mechanisms.samplers.requests import Lazy

    try:
        return Lazy.from_params(raw).coin()
    except ValueError as exc:
        raise AnalysisError(f"bad lazy {raw!r}: {exc}") from exc


def _unbounded_reason(mode: str) -> str:
    if mode in ("sign", "blinded"):
        return (
            f"the {mode} reveal of exact MH has unbounded privacy loss (a reject is impossible on one "
            "dataset whenever r >= 1 on it); use penalty noise (gaussian-mean: tau with clip)"
        )
    return (
        "the revealed sum has no noise calibrated to a bounded per-record sensitivity; use penalty noise "
        "(gaussian-mean: tau with clip)"
    )


def gamma_shares(rng: SecureRandom, m: int, n: int) -> F64:
    """n draws of Gamma(1/m, 1): one party's share of an Exp(1) variable, from the party's CSPRNG."""
    return noise.gamma_shares(rng, m, n)


def batch_input(inputs: dict[str, npt.NDArray[Any]], name: str, n: int, required: bool = True) -> F64 | None:
    if name not in inputs:
        if required:
            raise AnalysisError(f"input {name!r} is required (a float array of length {n})")
        return None
    a = np.asarray(inputs[name], dtype=np.float64)
    if a.shape != (n,):
        raise AnalysisError(f"input {name!r} must have shape ({n},), got {a.shape}")
    if not np.isfinite(a).all():
        raise AnalysisError(f"input {name!r} has NaN or infinite entries")
    return a


class GaussianMean:
    """x_i ~ N(theta, sigma^2), sigma known (see the module docstring).

    Optional privacy parameters (both public, chosen by the coordinator, bounded by each party's
    ``[allow.bounds.gaussian-mean]`` and its privacy budget):

    * ``clip = [lo, hi]``: every record is clipped to [lo, hi] before use, so the chain targets the posterior
      of the *clipped* data (exactly). Sensitivity assumption: replace-one neighbouring datasets (n_j is
      public and fixed); the log-ratio of one record is (theta* - theta)(x_i - (theta + theta*)/2)/sigma^2,
      so replacing one record changes l_j (hence log r) by at most c = |theta* - theta| (hi - lo)/sigma^2.
    * ``tau > 0`` (needs ``clip``): Yildirim-Ermis penalty noise. Each party adds lambda_j ~ N(0, s^2) with
      s = tau * c(theta, theta*) (symmetric in theta, theta*) and its share -s^2/2 of the public correction
      -m s^2/2, so the chain stays exact (penalty method; with the Gamma shares the decision is
      accept iff log r + lambda - m s^2/2 + Exp(1) >= 0). What a coalition of q parties sees is a
      post-processing of log r + N(0, r s^2), r the number of parties whose noise it does not know
      (``mechanisms.privacy.coalition_view``: r = m - q, or r = 1 in blinded mode when q exceeds the
      session threshold), hence each decision is mu = c / (s sqrt(r)) = 1/(tau sqrt(r))-GDP
      (``mechanisms.privacy.penalty_gdp_mu``), whatever theta, theta* are (theta = theta* reveals nothing:
      l_j = 0 and s = 0).

    Without ``tau`` the per-step loss is unbounded (``privacy_events`` raises :class:`Unaccountable`): the
    sum reveal has no noise that scales with the unclipped, proposal-dependent sensitivity, and the sign /
    blinded reveals of exact MH leak a reject with infinite loss whenever r >= 1 is possible
    (``mechanisms.privacy.reveal_sign``).
    """

    name = "gaussian-mean"

    def check_params(self, params: dict[str, Any]) -> None:
        extra = set(params) - {"sigma", "column", "noise", "clip", "tau"}
        if extra:
            raise AnalysisError(f"gaussian-mean: unknown parameters {sorted(extra)}")
        sigma = params.get("sigma", 1.0)
        if not isinstance(sigma, int | float) or isinstance(sigma, bool) or not sigma > 0:
            raise AnalysisError(f"gaussian-mean: sigma must be a positive number, got {sigma!r}")
        if params.get("noise", "exp") not in ("exp", "none"):
            raise AnalysisError(f"gaussian-mean: noise must be 'exp' or 'none', got {params.get('noise')!r}")
        clip = params.get("clip")
        if clip is not None:
            ok = (
                isinstance(clip, list | tuple)
                and len(clip) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in clip)
                and all(math.isfinite(v) for v in clip)
            )
            if not ok or not clip[0] < clip[1]:
                raise AnalysisError(f"gaussian-mean: clip must be [lo, hi] with finite lo < hi, got {clip!r}")
        tau = params.get("tau")
        if tau is not None:
            if not isinstance(tau, int | float) or isinstance(tau, bool) or not 0 < tau < math.inf:
                raise AnalysisError(f"gaussian-mean: tau must be a finite number > 0, got {tau!r}")
            if clip is None:
                raise AnalysisError(
                    "gaussian-mean: tau (penalty noise) needs clip = [lo, hi]: without clipped records the "
                    "sensitivity of the log-ratio to one record is unbounded"
                )

    def privacy_events(
        self, params: dict[str, Any], mode: str, view: RevealView, n: int
    ) -> list[PrivacyEvent]:
        """n decisions, each 1/(tau sqrt(m - q))-GDP with penalty noise (q from ``view``); unaccountable
        without it."""
        from mechanisms.privacy import GaussianEvent, penalty_gdp_mu

        tau = params.get("tau")
        if tau is None or params.get("clip") is None:
            raise Unaccountable(_unbounded_reason(mode))
        # penalty_gdp_mu(Delta, s, threat) = Delta / (s sqrt(m - q)) with s = tau * Delta: scale-free
        mu = penalty_gdp_mu(1.0, float(tau), view.threat)
        return [GaussianEvent(mu, count=n, label=f"gaussian-mean penalty tau={float(tau):g} {mode}")]

    def terms(
        self,
        data: Dataset,
        params: dict[str, Any],
        inputs: dict[str, npt.NDArray[Any]],
        n: int,
        m: int,
        mode: str,
        rng: SecureRandom,
    ) -> Terms:
        sigma = float(params.get("sigma", 1.0))
        x = data.column(str(params.get("column", "x")))
        clip = params.get("clip")
        if clip is not None:
            x = np.clip(x, float(clip[0]), float(clip[1]))
        theta = batch_input(inputs, "theta", n)
        theta_star = batch_input(inputs, "theta_star", n)
        assert theta is not None and theta_star is not None
        public = batch_input(inputs, "public", n, required=False)
        sx, nj = float(x.sum()), x.shape[0]
        ell = ((theta_star - theta) * sx - 0.5 * nj * (theta_star**2 - theta**2)) / sigma**2
        if params.get("noise", "exp") == "exp":
            ell = ell + gamma_shares(rng, m, n)
        tau = params.get("tau")
        if tau is not None and clip is not None:
            c = np.abs(theta_star - theta) * (float(clip[1]) - float(clip[0])) / sigma**2
            s = float(tau) * c
            ell = ell + noise.normal(rng, s, n) - 0.5 * s**2  # this party's share of -m s^2 / 2
        blind = gamma_shares(rng, m, n) if mode == "blinded" else None
        return Terms(values=ell, public=public, blind=blind)
