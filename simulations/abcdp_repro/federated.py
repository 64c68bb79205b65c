"""``abcdp_repro federated``: the toy grid run by the single-owner sampler and by federated ABCDP over m
parties (the in-memory protocol of ``hss.svt``) on the same public candidates;
MAE distributions compared by a two-sample KS test."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mechanisms.abcdp import (
    RandomFourierFeatures,
    c_sample_abcdp,
)
from mechanisms.simulators import (
    ToyMixtureModel,
)
from simulations.abcdp_repro.common import (
    FloatArray,
    Row,
    generators,
    load_shared_json,
    pyplot,
    save_outputs,
    standard_error,
)


class ToyCandidateCache:
    """One rep's public candidates (θ from the prior, φ̄ of an N-point simulated data set), made lazily.

    Every setting of the grid, single-owner and federated alike, reads the same stream from its start, so
    the two samplers see identical candidates and differ only in their (independent) noise.
    """

    def __init__(
        self, model: ToyMixtureModel, features: RandomFourierFeatures, n_sim: int, rng: np.random.Generator,
        chunk: int = 250,
    ) -> None:
        self.model, self.features, self.n_sim, self.rng, self.chunk = model, features, n_sim, rng, chunk
        self.thetas = np.zeros((0, model.n_components))
        self.phibars = np.zeros((0, features.n_features))

    def ensure(self, n: int) -> None:
        while self.thetas.shape[0] < n:
            th = self.model.sample_prior(self.rng, self.chunk)
            sims = self.model.simulate(th, self.n_sim, self.rng)
            ph = self.features.mean_embedding(sims, dtype=np.float32)  # public data: single precision is fine
            self.thetas = np.concatenate([self.thetas, th])
            self.phibars = np.concatenate([self.phibars, ph])

    def cursor(self) -> Any:
        """A ``propose(n)`` that hands out the stream from its start: (θ, φ̄)."""
        pos = 0

        def propose(n: int) -> tuple[FloatArray, FloatArray]:
            nonlocal pos
            self.ensure(pos + n)
            out = self.thetas[pos:pos + n], self.phibars[pos:pos + n]
            pos += n
            return out

        return propose


@dataclass(frozen=True)
class FederatedGrid:
    """The single-owner vs federated grid's settings: parties, repetitions, the grid of c, eps_abc, eps_total
    and resampling, observations, features, bandwidth, batch size, the candidates' cap, how the noise is
    shared, the backend, the public seed, whether the noise is secure, the data's folder."""

    parties: int = 7
    reps: int = 10
    cs: Sequence[int] = (10,)
    eps_abcs: Sequence[float] = (0.1, 0.2)
    eps_totals: Sequence[float] = (1.0, math.inf)
    resamples: Sequence[bool] = (False, True)
    n_obs: int | None = None
    n_features: int = 100
    bandwidth: float = 0.6
    batch_size: int = 128
    max_candidates: int = 20000
    noise_shares: str = "exact"
    backend: str = "mpc"
    seed: int = 0
    secure_noise: bool = True
    data_dir: Path | None = None


def federated_repro(out_dir: Path, settings: FederatedGrid | None = None) -> list[Row]:
    """Toy grid, single-owner vs federated ABCDP (m parties, in-memory protocol): MAE distributions and KS.

    Per rep: one private data set of N points (split over the parties), one public feature map and one
    public candidate stream; every setting runs the single-owner sampler (``c_sample_abcdp`` on the
    RFF-MMD distances) and the federated one (``run_abcdp_in_memory``) on the same candidates with
    independent noise. Per setting, a two-sample KS test compares the MAE of the posterior means over
    the reps (with ``noise_shares="exact"`` both have the same law, so small p-values would flag a bug;
    with ``"robust"`` the federated noise is √(m/h) times larger by design). With ε_total = ∞ the two
    are deterministic given the candidates and must accept the same θ's (``identical`` column; a
    difference can only come from a fixed-point tie inside the encoding margin).
    """
    _s = settings if settings is not None else FederatedGrid()
    parties, reps, cs = _s.parties, _s.reps, _s.cs
    eps_abcs, eps_totals, resamples = _s.eps_abcs, _s.eps_totals, _s.resamples
    n_obs, n_features, bandwidth = _s.n_obs, _s.n_features, _s.bandwidth
    batch_size, max_candidates, noise_shares = _s.batch_size, _s.max_candidates, _s.noise_shares
    backend, seed, secure_noise = _s.backend, _s.seed, _s.secure_noise
    data_dir = _s.data_dir
    from mechanisms.abcdp.federated import FederatedSvtPlan, distances_from_sum, party_feature_sum
    from mechanisms.abcdp.federated_run import InMemoryOptions, run_abcdp_in_memory

    cfg = load_shared_json("abcdp_toy.json", data_dir)
    theta_true = np.asarray(cfg["theta_true"], dtype=np.float64)
    n_obs = int(cfg["n_observed"]) if n_obs is None else n_obs
    model = ToyMixtureModel(n_components=theta_true.shape[0])
    keys = [(c, ea, et, rs) for c in cs for ea in eps_abcs for et in eps_totals for rs in resamples]
    mae, cnt = _columns(keys)
    t0 = time.time()
    for r in range(reps):
        public, noise = generators(seed * 100003 + r, secure_noise)
        observed = model.simulate(theta_true, n_obs, public)[0]
        shards = np.array_split(observed[public.permutation(n_obs)], parties)
        map_seed = int(public.integers(0, 2**62))
        base = FederatedSvtPlan(
            eps_abc=eps_abcs[0], eps_total=eps_totals[0], c=cs[0], resample=resamples[0], n_records=n_obs,
            n_features=n_features, bandwidth=bandwidth, dim=1, map_seed=map_seed, noise_shares=noise_shares,
        )
        cache = ToyCandidateCache(model, base.rff(), n_obs, public)
        s_total = party_feature_sum(base, observed)
        for c, ea, et, rs in keys:
            plan = dataclasses.replace(base, eps_abc=ea, eps_total=et, c=c, resample=rs)
            fed_propose = cache.cursor()
            single_stream = cache.cursor()

            def single_propose(
                n: int, stream: Any = single_stream, plan: Any = plan, s: FloatArray = s_total
            ) -> tuple[Any, Any]:
                th, ph = stream(n)
                return th, distances_from_sum(plan, s, ph)

            res_s = c_sample_abcdp(single_propose, plan.svt_config(), noise, max_candidates, batch_size)
            ts = time.time()
            secret = _party_randomness(parties, secure_noise, seed, r)
            res_f = run_abcdp_in_memory(
                plan,
                shards,
                fed_propose,
                parties,
                batch_size,
                public,
                secret,
                InMemoryOptions(
                    max_candidates=max_candidates,
                    backend=backend,  # type: ignore[arg-type]
                ),
            )
            k = (c, ea, et, rs)
            cnt[k]["secs"].append(time.time() - ts)
            _record(mae[k], cnt[k], res_s, res_f, model, theta_true)
        print(f"federated: rep {r + 1}/{reps} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    rows = _federated_rows(keys, mae, cnt, reps)
    fig = _plot_federated(keys, mae, parties, backend, noise_shares, reps, n_obs)
    title = (f"Toy grid: single-owner vs federated ABCDP, m = {parties}, {reps} reps "
             f"(KS two-sample test on the MAE per setting)")
    save_outputs(fig, rows, out_dir, "federated", title)
    return rows


Columns = dict[tuple[Any, ...], dict[str, list[float]]]


def _columns(keys: Sequence[tuple[Any, ...]]) -> tuple[Columns, Columns]:
    """Empty per-setting columns: the MAEs (single owner, federated) and the counts."""
    mae: Columns = {k: {"single": [], "fed": []} for k in keys}
    cnt: Columns = {
        k: {"single": [], "fed": [], "supp": [], "same": [], "secs": [], "bytes": [], "clamped": []}
        for k in keys
    }
    return mae, cnt


def _party_randomness(parties: int, secure_noise: bool, seed: int, rep: int) -> dict[int, Any]:
    """Each party's secret randomness: the OS CSPRNG, or (``--seeded-noise``) keys derived from the seed."""
    from hss.randomness import SecureRandom

    return {
        p: SecureRandom.from_os() if secure_noise
        else SecureRandom.from_key(np.random.default_rng([seed, rep, p]).bytes(32))
        for p in range(1, parties + 1)
    }


def _record(
    mae: dict[str, list[float]],
    cnt: dict[str, list[float]],
    res_s: Any,
    res_f: Any,
    model: ToyMixtureModel,
    theta_true: FloatArray,
) -> None:
    """One rep of one setting into the MAE and count columns (single owner and federated)."""
    for name, res in (("single", res_s), ("fed", res_f)):
        cnt[name].append(res.n_evaluated)
        if res.n_accepted:
            mae[name].append(model.mean_absolute_error(res.posterior_mean(), theta_true))
    cnt["supp"].append(res_f.n_suppressed)
    cnt["bytes"].append(res_f.bytes_sent / max(1, res_f.n_evaluated + res_f.n_suppressed))
    cnt["clamped"].append(res_f.n_clamped)
    same = res_s.thetas.shape == res_f.thetas.shape and np.array_equal(res_s.thetas, res_f.thetas)
    cnt["same"].append(float(same))


def _federated_rows(
    keys: Sequence[tuple[Any, ...]],
    mae: dict[tuple[Any, ...], dict[str, list[float]]],
    cnt: dict[tuple[Any, ...], dict[str, list[float]]],
    reps: int,
) -> list[Row]:
    """One table row per setting: both samplers' MAE, the KS test between them, counts and costs."""
    from scipy import stats

    rows: list[Row] = []
    for k in keys:
        c, ea, et, rs = k
        ms, mf = mae[k]["single"], mae[k]["fed"]
        ks = stats.ks_2samp(ms, mf) if len(ms) > 1 and len(mf) > 1 else None
        rows.append(
            {
                "c": c, "eps_abc": ea, "eps_total": et, "resample": rs, "reps": reps,
                "mae_single": float(np.mean(ms)) if ms else math.nan, "mae_single_se": standard_error(ms),
                "mae_fed": float(np.mean(mf)) if mf else math.nan, "mae_fed_se": standard_error(mf),
                "ks_stat": float(ks.statistic) if ks else math.nan,
                "ks_p": float(ks.pvalue) if ks else math.nan,
                "evaluated_single": float(np.mean(cnt[k]["single"])),
                "evaluated_fed": float(np.mean(cnt[k]["fed"])),
                "suppressed_fed": float(np.mean(cnt[k]["supp"])),
                "identical": (f"{int(sum(cnt[k]['same']))}/{reps}" if math.isinf(et) else "-"),
                "bytes_per_eval": float(np.mean(cnt[k]["bytes"])),
                "clamped": int(sum(cnt[k]["clamped"])),
                "fed_seconds": float(np.mean(cnt[k]["secs"])),
            }
        )
    return rows


def _plot_federated(
    keys: Sequence[tuple[Any, ...]],
    mae: dict[tuple[Any, ...], dict[str, list[float]]],
    parties: int,
    backend: str,
    noise_shares: str,
    reps: int,
    n_obs: int,
) -> Any:
    """Box plots of the MAE per setting, single owner beside federated."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(keys)), 4.2))
    pos = np.arange(len(keys)) * 3.0
    b1 = ax.boxplot([mae[k]["single"] or [math.nan] for k in keys], positions=pos - 0.55, widths=0.9,
                    patch_artist=True, showfliers=True)
    b2 = ax.boxplot([mae[k]["fed"] or [math.nan] for k in keys], positions=pos + 0.55, widths=0.9,
                    patch_artist=True, showfliers=True)
    for patch in b1["boxes"]:
        patch.set_facecolor("#9ecae1")
    for patch in b2["boxes"]:
        patch.set_facecolor("#fdae6b")
    labels = [f"c={c}\nε_abc={ea:g}\nε={et:g}\n{'RS' if rs else 'no RS'}" for c, ea, et, rs in keys]
    ax.set_xticks(pos, labels, fontsize=7)
    ax.set_ylabel("MAE of posterior mean")
    ax.legend([b1["boxes"][0], b2["boxes"][0]], ["single owner", f"federated, m = {parties}"], fontsize=8)
    ax.set_title(
        f"ABCDP toy, single owner vs federated ({backend}, {noise_shares} noise shares): {reps} reps, "
        f"N = {n_obs}", fontsize=9,
    )
    return fig
