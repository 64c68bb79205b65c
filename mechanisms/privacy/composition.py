"""Composition of per-step privacy over many steps.

Owns ``compose_events``: given the events of T steps (``events``), the guarantee of running them
all. Two routes:

* all events μ_t-GDP Gaussian: the closed form ``μ = sqrt(Σ_t μ_t²)`` (Dong, Roth, Su 2022,
  Corollary 3.3), exact;
* otherwise: dp_accounting privacy-loss distributions with pessimistic discretisation (mass at
  infinity where supports differ), identical mechanisms grouped and self-composed by FFT
  (Koskela et al.; Doroshenko et al. connect-the-dots). The result's δ(ε) is an upper bound up to
  dp_accounting's tail truncation (1e-15 per composition, pessimistically added).
  When every event also has a GDP bound (``gdp_mu``: the amplified penalty steps, pure-ε events by their
  conversion), the composition keeps both readings and answers with the smaller: each is an upper bound on
  the same composed curve, so their minimum is too. The PLD route rounds each step's loss up to the
  discretisation (1e-3), which for steps far smaller than that (a penalty step with μ = 2.6e-4) charged
  100 steps ε = 0.046 at δ = 1e-5 where their GDP bound gives 0.006 (7.7× over, issue 23): with both
  readings a composed charge is never above the GDP bound of the same steps.

Validity: composition holds for adaptively chosen *inputs* (each step's data-dependent quantities
may depend on earlier outputs) when each step's event is a fixed worst-case description, e.g. a
worst case over a and over Δ ≤ Δ_max. If the *privacy parameters themselves* are chosen from earlier
outputs (fully adaptive composition) only the GDP route stays valid as a filter (Smith & Thakurta,
2022; Koskela, Tobaben, Honkela, 2023); see ``ledger``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._numeric import FloatArray
from .conversions import gdp_delta, gdp_eps
from .events import GaussianEvent, PrivacyEvent

if TYPE_CHECKING:  # imported where used: dp_accounting brings scipy.signal and .stats (~0.7 s of CPU per
    # process), which a daemon whose charges compose in closed form never needs
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = ["Composition", "compose_events", "compose_gdp", "composed_delta", "composed_eps"]


def compose_gdp(mus: Iterable[float]) -> float:
    """``sqrt(Σ μ_t²)``: composition of μ_t-GDP mechanisms (exact)."""
    total = 0.0
    for mu in mus:
        if not (mu >= 0 and math.isfinite(mu)):
            raise ValueError(f"GDP mu must be finite and >= 0, got {mu}")
        total += mu * mu
    return math.sqrt(total)


@dataclass(frozen=True)
class Composition:
    """The composed guarantee: ``mu`` (the GDP reading), ``pld`` (the PLD reading) or both; with both, every
    answer is the smaller of the two (each bounds the same composed curve)."""

    method: str
    mu: float | None = None
    pld: pld_lib.PrivacyLossDistribution | None = None

    def __post_init__(self) -> None:
        if self.mu is None and self.pld is None:
            raise ValueError("a composition needs a GDP mu, a PLD or both")

    @property
    def gdp_only(self) -> bool:
        """True when the guarantee is exactly ``mu``-GDP (no PLD reading to take a minimum with)."""
        return self.pld is None

    def eps_at(self, delta: float) -> float:
        """ε at this δ (``inf`` when no finite ε works)."""
        if not 0.0 <= delta <= 1.0:
            raise ValueError(f"delta must lie in [0, 1], got {delta}")
        out = math.inf
        if self.mu is not None:
            out = gdp_eps(self.mu, delta)
        if self.pld is not None:
            out = min(out, pld_eps(self.pld, delta))
        return out

    def delta_at_many(self, eps: npt.ArrayLike) -> FloatArray:
        """δ at each ε of an array, in one pass (the PLD route evaluates all of them together)."""
        e = np.atleast_1d(np.asarray(eps, dtype=np.float64))
        if np.any(e < 0) or np.any(np.isnan(e)):
            raise ValueError("eps must be >= 0")
        gdp = None if self.mu is None else np.asarray(gdp_delta(self.mu, e), dtype=np.float64)
        if self.pld is None:
            assert gdp is not None
            return gdp
        out = pld_deltas(self.pld, e)
        return out if gdp is None else np.minimum(out, gdp)

    def delta_at(self, eps: float) -> float:
        """δ at this ε."""
        if not eps >= 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        if self.pld is None:
            assert self.mu is not None
            return gdp_delta(self.mu, eps)
        return float(self.delta_at_many([eps])[0])


def _dense_layout(pmf: object) -> tuple[int, FloatArray, float, float] | None:
    """(lower loss index, probabilities, discretisation, mass at infinity) of a dp_accounting PMF made dense,
    or None when it does not expose that layout (the callers then fall back to dp_accounting's methods)."""
    dense = getattr(pmf, "to_dense_pmf", None)
    if dense is None:
        return None
    d = dense()
    try:
        return d._lower_loss, d._probs, d._discretization, d._infinity_mass
    except AttributeError:
        return None


def _pmf_deltas(pmf: object, eps: FloatArray) -> FloatArray | None:
    """δ(ε) of one dense dp_accounting PMF for sorted ε, vectorised: δ(ε) = inf_mass + Σ_{loss > ε} p −
    e^ε Σ_{loss > ε} p e^{−loss} (dp_accounting's own routine loops over every loss bin in Python: seconds
    for a long composition). None when the PMF does not expose the dense layout (then the caller falls
    back to the public method). Terms with e^{−loss} below the double range are dropped, which only raises δ.
    """
    layout = _dense_layout(pmf)
    if layout is None:
        return None
    lower, probs, disc, inf_mass = layout
    losses = (np.arange(len(probs)) + lower) * disc
    p = np.asarray(probs, dtype=np.float64)
    # suffix sums over loss > eps: index of the first loss strictly above each eps
    upper = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    with np.errstate(over="ignore", under="ignore"):
        lower_terms = p * np.exp(-losses)
    lower_sum = np.concatenate([np.cumsum(lower_terms[::-1])[::-1], [0.0]])
    idx = np.searchsorted(losses, eps, side="right")
    with np.errstate(over="ignore", invalid="ignore"):
        out = inf_mass + upper[idx] - np.exp(eps) * lower_sum[idx]
    safe = np.where(np.isfinite(out), np.maximum(out, 0.0), inf_mass + upper[idx])
    return np.asarray(safe, dtype=np.float64)


def _pmf_eps(pmf: object, delta: float) -> float | None:
    """The smallest ε with δ(ε) ≤ ``delta`` of one dense dp_accounting PMF, vectorised: dp_accounting's
    routine walks the loss bins from the top in a Python loop (9 s of the 34 a registry's dry run of 20,000
    rejection decisions took). The same scan as prefix sums over the bins in descending order: before bin k,
    U = inf_mass + Σ_{j<k} p_j and L = Σ_{j<k} p_j e^{−loss_j} (in logs, so a loss past the double range
    does not underflow L to 0, where dp_accounting falls back to the larger ε = loss); the answer is
    log((U − δ)/L) at the first bin whose loss that does not exceed, else over all bins; 0 when U ≤ L + δ.
    None when the PMF does not expose the dense layout."""
    layout = _dense_layout(pmf)
    if layout is None:
        return None
    lower, probs, disc, inf_mass = layout
    if inf_mass > delta:
        return math.inf
    p = np.asarray(probs, dtype=np.float64)[::-1]
    losses = (np.arange(len(p))[::-1] + lower) * disc
    with np.errstate(divide="ignore"):
        log_terms = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), -np.inf) - losses
    upper = inf_mass + np.concatenate([[0.0], np.cumsum(p)])  # before bin k, and after the last
    log_lower = np.concatenate([[-np.inf], np.logaddexp.accumulate(log_terms)])
    with np.errstate(divide="ignore", invalid="ignore"):
        cand = np.log(upper - delta) - log_lower  # log((U - δ)/L) before each bin, then after all
    ok = (upper[:-1] > delta) & np.isfinite(log_lower[:-1]) & (cand[:-1] >= losses)
    k = int(np.argmax(ok)) if ok.any() else len(p)
    lower_mass = math.exp(log_lower[k]) if math.isfinite(log_lower[k]) else 0.0
    if upper[k] <= lower_mass + delta:
        return 0.0
    return max(0.0, float(cand[k]))


def pld_eps(pld: pld_lib.PrivacyLossDistribution, delta: float) -> float:
    """ε at ``delta`` of a dp_accounting PLD (both directions when it is not symmetric), as its own
    ``get_epsilon_for_delta`` computes it but vectorised (``_pmf_eps``)."""
    pmfs = [getattr(pld, "_pmf_remove", None)]
    if not getattr(pld, "_symmetric", True):
        pmfs.append(getattr(pld, "_pmf_add", None))
    parts = [_pmf_eps(pmf, delta) if pmf is not None else None for pmf in pmfs]
    if any(part is None for part in parts):
        return float(pld.get_epsilon_for_delta(delta))
    return max(part for part in parts if part is not None)


def pld_deltas(pld: pld_lib.PrivacyLossDistribution, eps: FloatArray) -> FloatArray:
    """δ at each ε (sorted ascending) of a dp_accounting PLD, both directions when it is not symmetric."""
    e = np.asarray(eps, dtype=np.float64)
    if np.any(np.diff(e) < 0):
        raise ValueError("eps must be sorted in ascending order")
    pmfs = [getattr(pld, "_pmf_remove", None)]
    if not getattr(pld, "_symmetric", True):
        pmfs.append(getattr(pld, "_pmf_add", None))
    parts = [_pmf_deltas(pmf, e) if pmf is not None else None for pmf in pmfs]
    if any(part is None for part in parts):
        return np.asarray(pld.get_delta_for_epsilon(list(e)), dtype=np.float64)
    return np.asarray(np.maximum.reduce([part for part in parts if part is not None]), dtype=np.float64)


def _grouped(events: Iterable[PrivacyEvent]) -> dict[PrivacyEvent, int]:
    counts: dict[PrivacyEvent, int] = {}
    for e in events:
        key = e.mechanism_key()
        counts[key] = counts.get(key, 0) + e.count
    return counts


def compose_events(
    events: Sequence[PrivacyEvent], discretization: float = 1e-3, method: str = "auto"
) -> Composition:
    """Compose a list of events.

    Args:
        events: the per-step mechanism descriptions (with their counts).
        discretization: PLD loss-grid spacing (smaller is tighter and slower).
        method: ``"auto"`` (GDP closed form if every event is a ``GaussianEvent``, else PLD),
            ``"gdp"`` (require the closed form) or ``"pld"`` (force PLDs, e.g. to cross-check).
    """
    if method not in ("auto", "gdp", "pld"):
        raise ValueError(f"method must be 'auto', 'gdp' or 'pld', got {method!r}")
    return _composed(tuple(_grouped(events).items()), discretization, method)


# A registry asks its ledger whether a batch fits (the ledger's events and the batch's) and then spends it
# (the same events): the second composition is the first's. The key is the grouped events themselves (a
# mechanism, equal as the grouping above compares them, and its count); a composition is never modified once
# made (its PLD is only read). Four kept: a long run's PLD can hold megabytes, and a daemon keeps it.
@functools.lru_cache(maxsize=4)
def _composed(items: tuple[tuple[PrivacyEvent, int], ...], discretization: float, method: str) -> Composition:
    groups = dict(items)
    all_gaussian = all(isinstance(k, GaussianEvent) for k in groups)
    if method == "gdp" and not all_gaussian:  # raised, never cached
        raise ValueError("method='gdp' needs every event to be a GaussianEvent; use 'pld' or 'auto'")
    if method != "pld" and all_gaussian:
        mu = compose_gdp(math.sqrt(n) * k.mu for k, n in groups.items() if isinstance(k, GaussianEvent))
        return Composition("gdp closed form", mu=mu)
    total: pld_lib.PrivacyLossDistribution | None = None
    for key, n in groups.items():
        one = key.pld(discretization)
        block = one.self_compose(n) if n > 1 else one
        total = block if total is None else total.compose(block)
    if total is None:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        total = pld_lib.identity(discretization)
    mus = [(k.gdp_mu(), n) for k, n in groups.items()]
    if method == "pld" or any(mu is None for mu, _ in mus):
        return Composition("pld", pld=total)
    mu = compose_gdp(math.sqrt(n) * m for m, n in mus if m is not None)
    return Composition("pld and gdp (the smaller)", mu=mu, pld=total)


def composed_eps(events: Sequence[PrivacyEvent], delta: float, discretization: float = 1e-3) -> float:
    """ε at ``delta`` after composing ``events`` (see ``compose_events``)."""
    return compose_events(events, discretization).eps_at(delta)


def composed_delta(events: Sequence[PrivacyEvent], eps: float, discretization: float = 1e-3) -> float:
    """δ at ``eps`` after composing ``events`` (see ``compose_events``)."""
    return compose_events(events, discretization).delta_at(eps)
