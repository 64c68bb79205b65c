"""The tuberculosis birth–death model of Lintusaari et al. (2019), its prior, summaries and distance.

Owns a simulator written from the model's description in J. Lintusaari, P. Blomstedt, T. Sivula,
M. U. Gutmann, S. Kaski, J. Corander, "Resolving outbreak dynamics using approximate Bayesian computation
for stochastic birth–death models", Wellcome Open Research 4:14 (2019), used by the ABCDP paper (Park,
Vinaroz, Jitkrittum, Entropy 23 (2021) 961) for its TB experiment, and the San Francisco data of Small et
al. (NEJM 1994) as tabulated there (``shared/data/tb_sf_1994.json``, read by the caller).

Model. Active TB cases (hosts) carry a pathogen genotype; hosts with one genotype form a cluster. New
clusters of size one appear at the burden rate β (reactivations, immigration), each with a new genotype.
A host is compliant with therapy (probability p = 0.95) or not. A compliant host transmits at rate
a_c and is removed ("dies": treated, dead or moved) at rate d_c = 5.95/year; a non-compliant host at rates
a_nc and d_nc. A transmission adds a host to the same cluster; the new host's compliance is drawn afresh.
Each removal during the two-year observation window is observed with probability 0.8 and recorded in its
cluster. The run starts empty and a warm-up precedes the window.

Parameters θ = (R1, t1, R2, β), the order of the ABCDP paper: R1 = a_nc/d_nc and t1 = a_nc − d_nc (the
non-compliant reproductive number and net transmission rate), R2 = a_c/d_c (compliant), β the burden.

Prior (the joint prior of the authors' published model): β ~ N(200, 30²) — standard deviation 30, as in
the original model (``normal(200, 30)`` there is location/scale); the ABCDP reference code draws
200 + √30·N(0, 1), i.e. reads 30 as a variance, which we do not reproduce — R1 ~ U(1.01, 1/(1−p)),
t1 ~ U(0.01, 30), R2 = U(0.01, 1)·(1 − (1−p) R1)/p (so that the population has a stationary size), and
the joint draw is kept only if a_nc < 40 and the stationary mean number of observations per year lies
in (0, 350).

Simulation. Because every rate is per host and transmissions stay inside the cluster, clusters evolve
independently: the whole process is a superposition of independent two-type linear birth–death processes
started at the points of a Poisson(β) process. We draw the founding times on [−W, 2] (W the warm-up) and
run an exact event-driven (Gillespie) simulation of every cluster, vectorised across clusters and across
simulations: this is the same law as the one-population event loop, at a small fraction of the cost. The
warm-up W = clip(5 τ, 15, 300) years, τ = 1/|λ_max| the relaxation time of the mean dynamics (so the
population is within e^{−5} of its stationary mean when the window opens); the authors' code instead
stopped the warm-up when the simulated population first reached its analytical mean.

Summaries and distance (those of the authors' published model): number of observed cases, number of
clusters, size of the largest cluster, mean gap between the four largest cluster sizes, the numbers of
clusters of size one and two (compared as fractions of the cases, by relative error), and, for the largest
cluster, the number of months between its first and last observation and the number of months with an
observation. The distance is the Euclidean norm of the differences weighted (1, 1, 2, 10, 100, 100, 10, 10).

No I/O; all randomness from the caller's (public) generator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Column names of a summary matrix (one row per data set).
SUMMARY_NAMES = (
    "n_obs", "n_clusters", "largest", "mean_largest_gap", "n_size1", "n_size2", "obs_period", "obs_months",
)
#: Parameter names, in the order of θ.
PARAM_NAMES = ("R1", "t1", "R2", "burden")
#: Weights of the summary differences in the distance (authors' published model).
DISTANCE_WEIGHTS = np.array([1.0, 1.0, 2.0, 10.0, 100.0, 100.0, 10.0, 10.0])


@dataclass(frozen=True)
class TBRates:
    """Per-simulation event rates (arrays of shape (B,))."""

    burden: FloatArray
    trans_c: FloatArray
    death_c: FloatArray
    trans_nc: FloatArray
    death_nc: FloatArray


@dataclass(frozen=True)
class TuberculosisModel:
    """Settings of the TB birth–death model, its prior and its observation process (years as time unit)."""

    p_compliance: float = 0.95
    p_observed: float = 0.80
    death_compliant: float = 5.95
    observation_years: int = 2
    burden_mean: float = 200.0
    burden_std: float = 30.0
    t1_bound: float = 30.0
    trans_nc_bound: float = 40.0
    mean_obs_bounds: tuple[float, float] = (0.0, 350.0)
    warmup_min: float = 15.0
    warmup_max: float = 300.0
    warmup_relaxation_times: float = 5.0

    def __post_init__(self) -> None:
        if not (0.0 < self.p_compliance < 1.0 and 0.0 <= self.p_observed <= 1.0):
            raise ValueError("p_compliance must be in (0, 1) and p_observed in [0, 1]")
        if self.burden_std <= 0 or self.death_compliant <= 0 or self.observation_years < 1:
            raise ValueError("burden_std, death_compliant must be > 0 and observation_years >= 1")
        if not 0 <= self.warmup_min <= self.warmup_max:
            raise ValueError("need 0 <= warmup_min <= warmup_max")

    # -- parameters and mean dynamics -------------------------------------------------------------

    def rates(self, theta: npt.ArrayLike) -> TBRates:
        """θ = (R1, t1, R2, β) rows -> event rates."""
        th = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        if th.shape[1] != 4:
            raise ValueError(f"theta must be (R1, t1, R2, burden) rows, got shape {th.shape}")
        r1, t1, r2, burden = th.T
        if np.any(r1 <= 1.0) or np.any(t1 <= 0) or np.any(r2 < 0) or np.any(burden < 0):
            raise ValueError("need R1 > 1, t1 > 0, R2 >= 0 and burden >= 0")
        death_nc = t1 / (r1 - 1.0)
        d_c = np.full_like(r2, self.death_compliant)
        return TBRates(burden=burden, trans_c=r2 * d_c, death_c=d_c, trans_nc=r1 * death_nc,
                       death_nc=death_nc)

    def _mean_matrix(self, r: TBRates) -> FloatArray:
        p = self.p_compliance
        m = np.empty((r.burden.shape[0], 2, 2))
        m[:, 0, 0] = p * r.trans_c - r.death_c
        m[:, 0, 1] = p * r.trans_nc
        m[:, 1, 0] = (1 - p) * r.trans_c
        m[:, 1, 1] = (1 - p) * r.trans_nc - r.death_nc
        return m

    def stationary_means(self, theta: npt.ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Stationary mean numbers of compliant and non-compliant hosts and observed cases per year.

        From d n/dt = M n + β (p, 1−p) = 0 (NaN where the mean dynamics are not stable).
        """
        r = self.rates(theta)
        m = self._mean_matrix(r)
        p = self.p_compliance
        rhs0, rhs1 = -r.burden * p, -r.burden * (1 - p)
        det = m[:, 0, 0] * m[:, 1, 1] - m[:, 0, 1] * m[:, 1, 0]
        stable = (det > 0) & (m[:, 0, 0] + m[:, 1, 1] < 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            n_c = (rhs0 * m[:, 1, 1] - m[:, 0, 1] * rhs1) / det
            n_nc = (m[:, 0, 0] * rhs1 - m[:, 1, 0] * rhs0) / det
        n_obs = self.p_observed * (r.death_c * n_c + r.death_nc * n_nc)
        bad = ~stable | (n_c < 0) | (n_nc < 0)
        return (np.where(bad, np.nan, n_c), np.where(bad, np.nan, n_nc), np.where(bad, np.nan, n_obs))

    def warmup_years(self, theta: npt.ArrayLike) -> FloatArray:
        """W = clip(k τ, warmup_min, warmup_max) with τ the relaxation time of the mean dynamics."""
        m = self._mean_matrix(self.rates(theta))
        lam_max = np.max(np.linalg.eigvals(m).real, axis=1)
        with np.errstate(divide="ignore"):
            tau = np.where(lam_max < 0, 1.0 / np.abs(lam_max), np.inf)
        return np.clip(self.warmup_relaxation_times * tau, self.warmup_min, self.warmup_max)

    # -- prior ------------------------------------------------------------------------------------

    def sample_prior(self, rng: np.random.Generator, n: int) -> FloatArray:
        """n draws of θ = (R1, t1, R2, β) from the joint prior (vectorised rejection)."""
        p = self.p_compliance
        out = np.empty((0, 4))
        r1_hi = 1.0 / (1.0 - p)
        while out.shape[0] < n:
            k = max(2 * (n - out.shape[0]), 64)
            burden = rng.normal(self.burden_mean, self.burden_std, size=k)
            r1 = rng.uniform(1.01, r1_hi, size=k)
            t1 = rng.uniform(0.01, self.t1_bound, size=k)
            r2 = rng.uniform(0.01, 1.0, size=k) * (1.0 - (1.0 - p) * r1) / p
            cand = np.stack([r1, t1, r2, burden], axis=1)
            ok = (burden > 0) & (r2 > 0)
            cand = cand[ok]
            rates = self.rates(cand)
            _, _, mean_obs = self.stationary_means(cand)
            lo, hi = self.mean_obs_bounds
            keep = (rates.trans_nc < self.trans_nc_bound) & (mean_obs > lo) & (mean_obs < hi)
            out = np.concatenate([out, cand[keep]], axis=0)
        return out[:n]

    # -- simulation -------------------------------------------------------------------------------

    def simulate(
        self, theta: npt.ArrayLike, rng: np.random.Generator, max_clusters: int = 1_500_000
    ) -> FloatArray:
        """Summary matrix (B, 8) (columns ``SUMMARY_NAMES``), one simulated data set per row of θ.

        Simulations are processed in chunks holding about ``max_clusters`` clusters at a time.
        """
        th = np.atleast_2d(np.asarray(theta, dtype=np.float64))
        rates = self.rates(th)
        warmup = self.warmup_years(th)
        expected = rates.burden * (warmup + self.observation_years)
        out = np.empty((th.shape[0], len(SUMMARY_NAMES)))
        start = 0
        while start < th.shape[0]:
            stop = start + 1
            total = expected[start]
            while stop < th.shape[0] and total + expected[stop] <= max_clusters:
                total += expected[stop]
                stop += 1
            sl = slice(start, stop)
            chunk = TBRates(rates.burden[sl], rates.trans_c[sl], rates.death_c[sl], rates.trans_nc[sl],
                            rates.death_nc[sl])
            out[sl] = self._simulate_chunk(chunk, warmup[sl], rng)
            start = stop
        return out

    def _simulate_chunk(self, r: TBRates, warmup: FloatArray, rng: np.random.Generator) -> FloatArray:
        n_sims = r.burden.shape[0]
        t_end = float(self.observation_years)
        n_clusters = rng.poisson(r.burden * (warmup + t_end))
        sim = np.repeat(np.arange(n_sims), n_clusters)
        total = sim.shape[0]
        observed = np.zeros(total, dtype=np.int64)
        ev_cluster: list[IntArray] = []
        ev_time: list[FloatArray] = []

        # per-active-cluster state, compacted as clusters die or leave the window
        ids = np.arange(total)
        t = rng.uniform(-warmup[sim], t_end)
        comp = rng.random(total) < self.p_compliance
        n_c = comp.astype(np.int64)
        n_nc = 1 - n_c
        a_c, d_c, a_nc, d_nc = r.trans_c[sim], r.death_c[sim], r.trans_nc[sim], r.death_nc[sim]
        while ids.shape[0]:
            b_c, x_c = a_c * n_c, d_c * n_c
            b_nc, x_nc = a_nc * n_nc, d_nc * n_nc
            rate = b_c + x_c + b_nc + x_nc
            t = t + rng.standard_exponential(ids.shape[0]) / rate
            keep = t < t_end
            if not keep.all():
                ids, t, n_c, n_nc = ids[keep], t[keep], n_c[keep], n_nc[keep]
                a_c, d_c, a_nc, d_nc = a_c[keep], d_c[keep], a_nc[keep], d_nc[keep]
                b_c, x_c, b_nc, rate = b_c[keep], x_c[keep], b_nc[keep], rate[keep]
            u = rng.random(ids.shape[0]) * rate
            birth_c = u < b_c
            death_c = ~birth_c & (u < b_c + x_c)
            birth_nc = ~birth_c & ~death_c & (u < b_c + x_c + b_nc)
            death_nc = ~(birth_c | death_c | birth_nc)
            birth = birth_c | birth_nc
            new_comp = rng.random(ids.shape[0]) < self.p_compliance
            n_c = n_c + (birth & new_comp) - death_c
            n_nc = n_nc + (birth & ~new_comp) - death_nc
            seen = (death_c | death_nc) & (t >= 0.0) & (rng.random(ids.shape[0]) < self.p_observed)
            if seen.any():
                observed[ids[seen]] += 1  # each cluster has at most one event per round
                ev_cluster.append(ids[seen])
                ev_time.append(t[seen])
            alive = (n_c + n_nc) > 0
            if not alive.all():
                ids, t, n_c, n_nc = ids[alive], t[alive], n_c[alive], n_nc[alive]
                a_c, d_c, a_nc, d_nc = a_c[alive], d_c[alive], a_nc[alive], d_nc[alive]
        events_cluster = np.concatenate(ev_cluster) if ev_cluster else np.zeros(0, dtype=np.int64)
        events_time = np.concatenate(ev_time) if ev_time else np.zeros(0)
        return summarise_clusters(sim, observed, events_cluster, events_time, n_sims, self.observation_years)


# -- summaries -----------------------------------------------------------------------------------


def summarise_clusters(
    sim: IntArray, sizes: IntArray, event_cluster: IntArray, event_time: FloatArray, n_sims: int,
    observation_years: int = 2,
) -> FloatArray:
    """Summary matrix (n_sims, 8) from per-cluster observed sizes and the observation events.

    ``sim[k]``, ``sizes[k]``: simulation index and observed size of cluster k; ``event_cluster``,
    ``event_time``: cluster index and time in years (from the window start) of each observation.
    """
    out = np.zeros((n_sims, len(SUMMARY_NAMES)))
    seen = sizes > 0
    s_sim, s_size, s_id = sim[seen], sizes[seen], np.flatnonzero(seen)
    out[:, 0] = np.bincount(s_sim, weights=s_size, minlength=n_sims)
    out[:, 1] = np.bincount(s_sim, minlength=n_sims)
    out[:, 4] = np.bincount(s_sim[s_size == 1], minlength=n_sims)
    out[:, 5] = np.bincount(s_sim[s_size == 2], minlength=n_sims)
    if s_sim.size == 0:
        return out
    order = np.lexsort((-s_size, s_sim))  # by simulation, largest first
    o_sim, o_size, o_id = s_sim[order], s_size[order], s_id[order]
    first = np.r_[True, o_sim[1:] != o_sim[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(o_sim.size), 0))
    rank = np.arange(o_sim.size) - group_start
    top = np.zeros((n_sims, 4))
    sel = rank < 4
    top[o_sim[sel], rank[sel]] = o_size[sel]
    out[:, 2] = top[:, 0]
    out[:, 3] = (top[:, 0] - top[:, 3]) / 3.0  # mean of the three gaps between the four largest
    largest_id = np.full(n_sims, -1)
    largest_id[o_sim[first]] = o_id[first]
    # observation months of each simulation's largest cluster
    is_largest = np.zeros(sim.shape[0] + 1, dtype=bool)
    is_largest[largest_id[largest_id >= 0]] = True
    pick = is_largest[event_cluster]
    e_sim = sim[event_cluster[pick]]
    n_months = 12 * observation_years
    months = np.clip(np.floor(event_time[pick] * 12.0).astype(np.int64), 0, n_months - 1)
    hist = np.zeros((n_sims, n_months), dtype=np.int64)
    np.add.at(hist, (e_sim, months), 1)
    out[:, 6], out[:, 7] = months_summary(hist)
    return out


def months_summary(month_hist: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """(observation period in months = last − first + 1, number of months with observations) per row."""
    h = np.atleast_2d(np.asarray(month_hist)) > 0
    any_obs = h.any(axis=1)
    first = np.argmax(h, axis=1)
    last = h.shape[1] - 1 - np.argmax(h[:, ::-1], axis=1)
    period = np.where(any_obs, last - first + 1, 0).astype(np.float64)
    return period, h.sum(axis=1).astype(np.float64)


def observed_summary(
    cluster_size_counts: Mapping[int | str, int],
    largest_cluster_months: Sequence[int],
    observation_years: int = 2,
) -> FloatArray:
    """Summary vector (8,) of tabulated data: {cluster size: number of clusters} and the observation months
    of the largest cluster (the form of ``tb_sf_1994.json``)."""
    sizes = np.concatenate([np.full(int(k), int(s)) for s, k in cluster_size_counts.items()]).astype(np.int64)
    if sizes.size == 0 or np.any(sizes < 1):
        raise ValueError("cluster sizes must be >= 1 and at least one cluster is needed")
    largest = int(sizes.max())
    months = np.asarray(largest_cluster_months, dtype=np.int64)
    if months.size != largest:
        raise ValueError(f"the largest cluster has {largest} cases but {months.size} observation months")
    n_months = 12 * observation_years
    if np.any(months < 0) or np.any(months >= n_months):
        raise ValueError(f"observation months must be in [0, {n_months})")
    top = np.zeros(4)
    srt = np.sort(sizes)[::-1][:4]
    top[: srt.size] = srt
    hist = np.bincount(months, minlength=n_months)[None, :]
    period, n_m = months_summary(hist)
    return np.array([sizes.sum(), sizes.size, largest, (top[0] - top[3]) / 3.0, np.sum(sizes == 1),
                     np.sum(sizes == 2), period[0], n_m[0]], dtype=np.float64)


def _fractions(s: FloatArray) -> FloatArray:
    """Fractions (clusters of size 1, 2) / cases, 0 when there are no cases."""
    n = s[..., 0:1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, s[..., 4:6] / np.where(n > 0, n, 1.0), 0.0)


def tb_distance(simulated: npt.ArrayLike, observed: npt.ArrayLike) -> FloatArray:
    """Weighted distance between summary rows: (B, 8) x (8,) -> (B,), or (B, 8) x (N, 8) -> (B, N).

    The size-1 and size-2 cluster fractions are compared by relative error; an observed fraction of 0 is
    replaced by 1/(observed cases) (or 1 if there are none) in the denominator.
    """
    s = np.atleast_2d(np.asarray(simulated, dtype=np.float64))
    o = np.asarray(observed, dtype=np.float64)
    single = o.ndim == 1
    o = np.atleast_2d(o)
    if s.shape[1] != len(SUMMARY_NAMES) or o.shape[1] != len(SUMMARY_NAMES):
        raise ValueError(f"summaries must have {len(SUMMARY_NAMES)} columns")
    diff = s[:, None, :] - o[None, :, :]  # (B, N, 8)
    f_s, f_o = _fractions(s)[:, None, :], _fractions(o)[None, :, :]
    floor = 1.0 / np.maximum(o[None, :, 0:1], 1.0)
    diff[..., 4:6] = (f_s - f_o) / np.maximum(f_o, floor)
    d = np.sqrt(np.sum((diff * DISTANCE_WEIGHTS) ** 2, axis=-1))
    return d[:, 0] if single else d
