"""Federated ABCDP: noise shares, per-party SVT state, plan serialisation, features, candidate queue."""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from hss.randomness import SecureRandom
from mechanisms.abcdp.candidates import CandidateQueue, gate, reference_decisions
from mechanisms.abcdp.federated import (
    FederatedSvtPlan,
    candidate_embeddings,
    laplace_share,
    party_feature_sum,
)
from mechanisms.abcdp.svt_state import PartySvtState, SvtCounters, SvtStateError

KS_ALPHA = 1e-3  # false-failure rate of each KS test (fixed seeds make the outcome repeatable)


def srng(label: str) -> SecureRandom:
    """Repeatable CSPRNG stream for tests (a real run uses SecureRandom.from_os())."""
    return SecureRandom.from_key(hashlib.sha256(label.encode()).digest())


def make_plan(**kw: Any) -> FederatedSvtPlan:
    base: dict[str, Any] = dict(
        eps_abc=0.1, eps_total=1.0, c=5, resample=False, n_records=500, n_features=20, bandwidth=0.6,
        dim=1, map_seed=7, noise_shares="exact",
    )
    base.update(kw)
    return FederatedSvtPlan(**base)


# -- noise shares -------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [3, 7])
def test_gamma_difference_shares_sum_to_laplace(m: int) -> None:
    n, b = 20000, 0.37
    shares = [laplace_share(srng(f"lap/{m}/{j}"), m, b, n) for j in range(m)]
    assert stats.kstest(sum(shares), stats.laplace(scale=b).cdf).pvalue > KS_ALPHA
    # the test has power: one share alone, or m - 1 of them, is not Lap(b)
    assert stats.kstest(shares[0], stats.laplace(scale=b).cdf).pvalue < 1e-10
    partial = sum(shares[:-1])
    assert stats.kstest(partial, stats.laplace(scale=b).cdf).pvalue < 1e-6


def test_robust_shares_any_honest_subset_is_laplace() -> None:
    m, n, b = 7, 20000, 0.5
    plan = make_plan(noise_shares="robust")
    h = plan.share_parties(m)
    assert h == 4 and plan.noise_std_factor(m) == pytest.approx(math.sqrt(7 / 4))
    shares = [laplace_share(srng(f"rob/{j}"), h, b, n) for j in range(m)]
    # the 4 parties outside a 3-party coalition: exactly Lap(b)
    assert stats.kstest(sum(shares[3:]), stats.laplace(scale=b).cdf).pvalue > KS_ALPHA
    # all 7: b (Gamma(7/4) - Gamma(7/4)), variance 2 (7/4) b^2; KS against a direct simulation
    ref = np.random.default_rng(1)
    direct = b * (ref.gamma(7 / 4, size=n) - ref.gamma(7 / 4, size=n))
    assert stats.ks_2samp(sum(shares), direct).pvalue > KS_ALPHA
    assert make_plan(noise_shares="exact").share_parties(m) == m


def test_laplace_share_zero_scale_and_bad_scale() -> None:
    assert np.all(laplace_share(srng("z"), 3, 0.0, 5) == 0.0)
    with pytest.raises(ValueError, match="scale"):
        laplace_share(srng("z"), 3, -1.0, 5)


# -- per-party SVT state ------------------------------------------------------------------------


def test_threshold_share_constant_within_epoch_without_resample() -> None:
    st = PartySvtState(make_plan(c=4, resample=False), 3, srng("st"))
    thr = st._threshold
    tau1 = st.noise_for_batch(6)
    assert st.update(np.array([0, 1, 0, 0, 1, 0], dtype=bool)) == 2
    tau2 = st.noise_for_batch(3)
    assert st._threshold == thr and st.epoch == 0
    assert not np.allclose(tau1[:3], tau2)  # query noise is fresh per candidate
    assert st.remaining == 2


def test_threshold_share_redrawn_after_accept_only_with_resample() -> None:
    st = PartySvtState(make_plan(c=3, resample=True), 3, srng("rs"))
    thr0 = st._threshold
    assert st.remaining == 1
    st.noise_for_batch(4)
    st.update(np.zeros(4, dtype=bool))
    assert st._threshold == thr0 and st.epoch == 0  # no accept: same epoch
    st.noise_for_batch(4)
    st.update(np.array([False, True, False, False]))
    assert st._threshold != thr0 and st.epoch == 1 and st.count == 1
    thr1 = st._threshold
    st.noise_for_batch(2)
    st.update(np.array([False, False]))
    assert st._threshold == thr1


def test_update_refuses_over_reveal_and_aborts() -> None:
    st = PartySvtState(make_plan(c=3, resample=True), 3, srng("ov"))
    st.noise_for_batch(3)
    with pytest.raises(SvtStateError, match="at most 1"):
        st.update(np.array([True, True, False]))
    assert st.aborted
    with pytest.raises(SvtStateError, match="aborted"):
        st.noise_for_batch(1)
    st2 = PartySvtState(make_plan(c=3, resample=False), 3, srng("ov2"))
    st2.noise_for_batch(5)
    with pytest.raises(SvtStateError, match="at most 3"):
        st2.update(np.array([1, 1, 1, 1, 0]))


def test_count_stops_at_exactly_c_and_refuses_after_done() -> None:
    st = PartySvtState(make_plan(c=3, resample=False), 5, srng("c"))
    st.noise_for_batch(4)
    assert st.update(np.array([True, False, True, False])) == 2
    assert st.remaining == 1 and not st.done
    st.noise_for_batch(4)
    assert st.update(np.array([False, True, False, False])) == 1  # gated: the rest were suppressed
    assert st.count == 3 and st.done and st.remaining == 0
    assert st.n_decided == 4 + 2
    with pytest.raises(SvtStateError, match="done"):
        st.noise_for_batch(1)
    with pytest.raises(SvtStateError, match="done"):
        st.update(np.array([False]))


def test_state_call_order_and_input_checks() -> None:
    st = PartySvtState(make_plan(), 3, srng("o"))
    with pytest.raises(SvtStateError, match="no batch pending"):
        st.update(np.array([False]))
    st.noise_for_batch(2)
    with pytest.raises(SvtStateError, match="not settled"):
        st.noise_for_batch(2)
    with pytest.raises(ValueError, match="shape"):
        st.update(np.array([False, False, False]))
    with pytest.raises(ValueError, match="booleans"):
        st.update(np.array([0.5, 0.0]))
    with pytest.raises(ValueError, match="m must be"):
        PartySvtState(make_plan(), 0, srng("o"))
    assert "threshold" not in repr(st)


def _keyed(plan: FederatedSvtPlan, label: str, counters: SvtCounters | None = None) -> PartySvtState:
    return PartySvtState.keyed(plan, 3, lambda e: srng(f"{label}/epoch/{e}"), counters)


@pytest.mark.parametrize("resample", [False, True])
def test_keyed_state_rebuilt_at_its_counters_draws_the_same_noise(resample: bool) -> None:
    """A keyed state (threshold share per epoch from its key, query shares from the batch's stream) rebuilt
    from its public counters alone draws exactly the noise the uninterrupted state draws: the basis of
    resuming a party's SVT state after a crash from a record that holds no secret."""
    plan = make_plan(c=3, resample=resample)
    bits = [np.array([False, True, False]), np.array([False, False]), np.array([True, False, False])]
    full = _keyed(plan, "k")
    taus, before = [], []
    for s, b in enumerate(bits, start=1):
        before.append(full.counters)
        taus.append(full.noise_for_batch(b.shape[0], srng(f"k/step/{s}")))
        full.update(b)
    assert full.counters == SvtCounters(count=2, epoch=2 if resample else 0, n_decided=5 if resample else 8)
    for s, b in enumerate(bits, start=1):  # rebuilt before each step: the same tau, bit for bit
        again = _keyed(plan, "k", before[s - 1])
        np.testing.assert_array_equal(again.noise_for_batch(b.shape[0], srng(f"k/step/{s}")), taus[s - 1])
        again.update(b)
        assert again.counters == (before[s] if s < len(bits) else full.counters)
    # advance: a step whose bits are known (replayed) moves the counters and the epoch's threshold
    skip = _keyed(plan, "k", before[0])
    assert skip.advance(bits[0]) == 1 and skip.counters == before[1]
    np.testing.assert_array_equal(skip.noise_for_batch(2, srng("k/step/2")), taus[1])
    # another key, or another query stream: other noise
    assert not np.array_equal(_keyed(plan, "other").noise_for_batch(3, srng("k/step/1")), taus[0])
    assert not np.array_equal(_keyed(plan, "k").noise_for_batch(3, srng("k/step/9")), taus[0])
    for c in before:
        assert SvtCounters.from_dict(c.to_dict()) == c


def test_keyed_state_checks() -> None:
    plan = make_plan(c=2, resample=True)
    one = PartySvtState(plan, 3, srng("o"))
    keyed = _keyed(plan, "k")
    with pytest.raises(ValueError, match="query-noise rng"):
        keyed.noise_for_batch(2)
    with pytest.raises(ValueError, match="query-noise rng"):
        one.noise_for_batch(2, srng("x"))
    with pytest.raises(SvtStateError, match="only a keyed state"):
        one.advance(np.array([False]))
    with pytest.raises(ValueError, match="exactly one noise source"):
        PartySvtState(plan, 3, srng("o"), threshold_rng=lambda e: srng("t"))
    with pytest.raises(ValueError, match="exactly one noise source"):
        PartySvtState(plan, 3, None)
    with pytest.raises(ValueError, match="no counters"):
        PartySvtState(plan, 3, srng("o"), counters=SvtCounters())
    for bad, msg in [
        (SvtCounters(count=3, epoch=2, n_decided=3, done=True), "inconsistent with c = 2"),
        (SvtCounters(count=1, epoch=0, n_decided=1), "epoch must be 1"),
        (SvtCounters(count=2, epoch=1, n_decided=1, done=True), "inconsistent"),
        (SvtCounters(count=1, epoch=1, n_decided=2, done=True), "inconsistent"),
    ]:
        with pytest.raises(ValueError, match=msg):
            _keyed(plan, "k", bad)
    done = _keyed(plan, "k", SvtCounters(count=2, epoch=1, n_decided=5, done=True))
    with pytest.raises(SvtStateError, match="done"):
        done.noise_for_batch(1, srng("x"))
    with pytest.raises(SvtStateError, match="at most 1"):
        _keyed(plan, "k").advance(np.array([True, True]))
    with pytest.raises(ValueError, match="keys"):
        SvtCounters.from_dict({"count": 0})
    with pytest.raises(ValueError, match="types"):
        SvtCounters.from_dict({"count": 0, "epoch": 0, "n_decided": 0, "done": 0})


def test_non_private_plan_has_no_noise() -> None:
    st = PartySvtState(make_plan(eps_total=math.inf), 3, srng("np"))
    assert np.all(st.noise_for_batch(5) == 0.0)


# -- the plan -----------------------------------------------------------------------------------


@pytest.mark.parametrize("eps_total", [0.5, math.inf])
@pytest.mark.parametrize("noise_shares", ["robust", "exact"])
def test_plan_params_round_trip(eps_total: float, noise_shares: str) -> None:
    plan = make_plan(eps_total=eps_total, noise_shares=noise_shares, resample=True)
    d = plan.to_params()
    text = json.dumps(d, allow_nan=False)  # strict JSON: no Infinity
    assert FederatedSvtPlan.from_params(json.loads(text)) == plan
    assert set(d) == {
        "eps_abc", "eps_total", "c", "resample", "n_records", "n_features", "bandwidth", "dim", "map_seed",
        "noise_shares",
    }


def test_plan_from_params_refusals_name_the_key() -> None:
    good = make_plan().to_params()
    cases: list[tuple[dict[str, Any], str]] = [
        ({k: v for k, v in good.items() if k != "c"}, "'c'|\\['c'\\]"),
        ({**good, "extra": 1}, "extra"),
        ({**good, "c": "10"}, "'c'"),
        ({**good, "c": 2.0}, "'c'"),
        ({**good, "resample": 1}, "resample"),
        ({**good, "eps_total": "lots"}, "eps_total"),
        ({**good, "eps_total": -1.0}, "eps_total"),
        ({**good, "n_features": 21}, "n_features"),
        ({**good, "bandwidth": 0.0}, "bandwidth"),
        ({**good, "map_seed": -3}, "map_seed"),
        ({**good, "noise_shares": "some"}, "noise_shares"),
        ({**good, "eps_abc": math.nan}, "eps_abc"),
    ]
    for d, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            FederatedSvtPlan.from_params(d)
    no_mode = {k: v for k, v in good.items() if k != "noise_shares"}
    assert FederatedSvtPlan.from_params(no_mode).noise_shares == "robust"


def test_plan_derived_values_and_event() -> None:
    plan = make_plan(c=10, resample=True, eps_total=2.0, n_records=5000)
    assert plan.sensitivity == pytest.approx(2 / 5000)
    assert plan.laplace_scale == pytest.approx(2 * 10 * (2 / 5000) / 2.0)
    cfg = plan.svt_config()
    assert cfg.threshold_scale == plan.laplace_scale and cfg.distance_scale == 2 * plan.laplace_scale
    ev = plan.privacy_event()
    assert ev.eps == pytest.approx(2.0) and ev.delta == 0.0 and ev.params["federated"] is True
    assert ev.to_ledger_event().eps == pytest.approx(2.0)
    json.dumps(ev.to_dict(), allow_nan=False)
    with pytest.raises(ValueError, match="non-private"):
        make_plan(eps_total=math.inf).privacy_event().to_ledger_event()
    a, b = plan.rff(), make_plan(map_seed=7).rff()
    assert np.array_equal(a.frequencies, b.frequencies)  # public map: same seed, same map
    assert not np.array_equal(a.frequencies, make_plan(map_seed=8).rff().frequencies)


# -- features -----------------------------------------------------------------------------------


def test_party_feature_sums_over_shards_equal_single_owner_sum() -> None:
    plan = make_plan(dim=2, n_features=64, n_records=300)
    data = np.random.default_rng(3).normal(size=(300, 2))
    cuts = [0, 40, 41, 200, 300]
    parts = [party_feature_sum(plan, data[a:b]) for a, b in itertools.pairwise(cuts)]
    whole = party_feature_sum(plan, data)
    np.testing.assert_allclose(sum(parts), whole, rtol=0, atol=1e-10)
    feats = plan.rff().features(data)
    np.testing.assert_allclose(np.linalg.norm(feats, axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(party_feature_sum(plan, np.zeros((0, 2))) == 0.0)
    with pytest.raises(ValueError, match="shape"):
        party_feature_sum(plan, data[:, :1])
    with pytest.raises(ValueError, match="exceed"):
        party_feature_sum(plan, np.zeros((301, 2)))
    with pytest.raises(ValueError, match="finite"):
        party_feature_sum(plan, np.full((3, 2), np.nan))


def test_candidate_embeddings_match_rffmmd_distance() -> None:
    from mechanisms.abcdp.distances import RFFMMD

    plan = make_plan(n_records=200, n_features=50)
    rng = np.random.default_rng(4)
    obs = rng.uniform(0, 5, size=200)
    sims = rng.uniform(0, 5, size=(6, 200))
    phibar = candidate_embeddings(plan, sims)
    assert phibar.shape == (6, 50)
    s = party_feature_sum(plan, obs)
    ref = RFFMMD.from_observed(plan.rff(), obs)(sims)
    taus = np.zeros((1, 6))
    rho = np.linalg.norm(s / 200 - phibar, axis=1)
    np.testing.assert_allclose(rho, ref, rtol=1e-12)
    dec = reference_decisions(plan, s[None], phibar, taus, remaining=10)
    np.testing.assert_array_equal(dec, rho <= plan.eps_abc)


def test_gate_keeps_first_remaining_accepts() -> None:
    a = np.array([0, 1, 1, 0, 1, 1], dtype=bool)
    np.testing.assert_array_equal(gate(a, 2), [0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(gate(a, 10), a)
    np.testing.assert_array_equal(gate(a, 0), np.zeros(6, dtype=bool))


# -- candidate queue ----------------------------------------------------------------------------


def test_candidate_queue_pushes_back_suppressed_with_resample() -> None:
    plan = make_plan(c=2, resample=True, n_features=4)
    q = CandidateQueue(plan)
    q.push(np.arange(6.0), np.zeros((6, 4)))
    th, _ = q.next_batch(4)
    np.testing.assert_array_equal(th[:, 0], [0, 1, 2, 3])
    assert q.settle(np.array([False, True, False, False])) == 1
    assert q.n_evaluated == 2 and q.n_suppressed == 2 and q.pending == 4
    th, _ = q.next_batch(10)
    np.testing.assert_array_equal(th[:, 0], [2, 3, 4, 5])  # the suppressed candidates come first
    q.settle(np.array([False, False, True, False]))
    assert q.done and q.count == 2 and q.n_evaluated == 5
    np.testing.assert_array_equal(q.accepted_thetas[:, 0], [1, 4])
    np.testing.assert_array_equal(q.decided_ids, [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(q.decisions, [0, 1, 0, 0, 1])
    with pytest.raises(SvtStateError, match="done"):
        q.next_batch(1)


def test_candidate_queue_export_restore_is_bit_exact() -> None:
    plan = make_plan(c=3, resample=True, n_features=4)
    rng = np.random.default_rng(3)
    q = CandidateQueue(plan)
    assert CandidateQueue.restore(plan, q.export()).export()["theta_dim"] is None
    q.push(rng.random((6, 2)), rng.random((6, 4)) / 4)
    q.next_batch(4)
    q.settle(np.array([False, True, False, False]))  # two suppressed candidates stay at the front
    snap = q.export()
    r = CandidateQueue.restore(plan, snap)
    for k, v in r.export().items():
        np.testing.assert_array_equal(v, snap[k])
        if isinstance(v, np.ndarray):
            assert v.dtype == np.asarray(snap[k]).dtype, k
    for queue in (q, r):  # the same next batch and the same continuation
        queue.next_batch(4)
        queue.settle(np.array([False, False, True, False]))
    np.testing.assert_array_equal(q.accepted_thetas, r.accepted_thetas)
    for name in ("count", "n_proposed", "n_suppressed", "pending", "n_evaluated"):
        assert getattr(q, name) == getattr(r, name), name
    q.next_batch(1)
    with pytest.raises(SvtStateError, match="in flight"):
        q.export()
    for change, msg in [
        ({"count": 2}, "count 2"),
        ({"n_proposed": 7}, "proposed"),
        ({"done": True}, "done True"),
        ({"thetas": snap["thetas"][:1]}, "pending thetas"),
        ({"accepted": np.zeros((1, 3))}, "accepted thetas"),
        ({"phibars": np.full((2, 4), np.nan)}, "non-finite"),
    ]:
        with pytest.raises(ValueError, match=msg):
            CandidateQueue.restore(plan, {**snap, **change})
    with pytest.raises(ValueError, match="KeyError"):
        CandidateQueue.restore(plan, {k: v for k, v in snap.items() if k != "ids"})


def test_candidate_queue_refusals() -> None:
    plan = make_plan(c=2, resample=False, n_features=4)
    q = CandidateQueue(plan)
    with pytest.raises(SvtStateError, match="empty"):
        q.next_batch(1)
    with pytest.raises(ValueError, match="phibars"):
        q.push(np.zeros((3, 2)), np.zeros((3, 5)))
    q.push(np.zeros((3, 2)), np.zeros((3, 4)))
    with pytest.raises(SvtStateError, match="no batch"):
        q.settle(np.zeros(3, dtype=bool))
    q.next_batch(3)
    with pytest.raises(SvtStateError, match="not settled"):
        q.next_batch(3)
    with pytest.raises(SvtStateError, match="at most 2"):
        q.settle(np.ones(3, dtype=bool))


# -- the in-memory federated runner -------------------------------------------------------------

from mechanisms.abcdp.federated_run import (  # noqa: E402
    InMemoryAbcdpResult,
    InMemoryOptions,
    run_abcdp_in_memory,
    summed_noise_by_candidate,
)
from mechanisms.abcdp.svt import SVTNoise, svt_batch, svt_init, svt_step  # noqa: E402
from mechanisms.simulators.toy import ToyMixtureModel  # noqa: E402

THETA_TRUE = np.array([0.25, 0.04, 0.33, 0.04, 0.34])


def _backends() -> list[str]:
    try:
        import hss.svt  # noqa: F401
    except ImportError:
        return ["plaintext"]
    return ["plaintext", "mpc"]


class ToyStream:
    """Public toy candidates: θ from the prior, φ̄ of a data set simulated at θ (kept for the checks)."""

    def __init__(self, plan: FederatedSvtPlan, seed: int, n_sim: int) -> None:
        self.plan, self.rng, self.n_sim = plan, np.random.default_rng(seed), n_sim
        self.model = ToyMixtureModel()
        self.thetas: list[np.ndarray] = []
        self.phibars: list[np.ndarray] = []

    def __call__(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        th = self.model.sample_prior(self.rng, n)
        ph = candidate_embeddings(self.plan, self.model.simulate(th, self.n_sim, self.rng))
        self.thetas.append(th)
        self.phibars.append(ph)
        return th, ph

    def all_phibars(self) -> np.ndarray:
        return np.concatenate(self.phibars)


def _toy_setup(
    n_obs: int = 600, seed: int = 0, m: int = 3, **kw: Any
) -> tuple[FederatedSvtPlan, list[np.ndarray], np.ndarray]:
    plan = make_plan(**{"n_records": n_obs, "n_features": 40, **kw})
    obs = ToyMixtureModel().simulate(THETA_TRUE, n_obs, np.random.default_rng(seed))[0]
    cuts = np.linspace(0, n_obs, m + 1).astype(int)
    shards = [obs[a:b] for a, b in itertools.pairwise(cuts)]
    return plan, shards, party_feature_sum(plan, obs)


def _run(
    plan: FederatedSvtPlan, shards: list[np.ndarray], stream: ToyStream, backend: str, batch: int,
    label: str, max_candidates: int = 5000, adaptive: bool = True,
) -> InMemoryAbcdpResult:
    m = len(shards)
    return run_abcdp_in_memory(
        plan,
        shards,
        stream,
        m,
        batch,
        np.random.default_rng(99),
        {p: srng(f"{label}/{p}") for p in range(1, m + 1)},
        InMemoryOptions(
            max_candidates=max_candidates,
            backend=backend,
            keep_trace=True,
            adaptive_batch=adaptive,
        ),
    )


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize(
    ("resample", "m", "shares"), [(False, 3, "exact"), (True, 3, "exact"), (True, 7, "robust")]
)
def test_federated_and_single_owner_agree_for_identical_noise(
    backend: str, resample: bool, m: int, shares: str
) -> None:
    plan, shards, s_total = _toy_setup(
        c=6, resample=resample, eps_abc=0.2, eps_total=5.0, m=m, noise_shares=shares
    )
    stream = ToyStream(plan, seed=5, n_sim=300)
    res = _run(plan, shards, stream, backend, batch=16, label=f"agree/{backend}/{resample}/{m}")
    assert res.halted and res.n_accepted == plan.c
    # each candidate is decided at most once, in proposal order, suppressed ones included
    np.testing.assert_array_equal(res.decided_ids, np.arange(res.n_evaluated))
    if resample:
        assert res.n_suppressed > 0
    total_noise = summed_noise_by_candidate(res)  # Σ_j τ_j = (threshold noise) − (query noise)
    rho = np.linalg.norm(s_total / plan.n_records - stream.all_phibars(), axis=1)
    # single owner, step by step, with the same Laplace draws: ρ + ν ≤ ε_abc + m with ν − m = −Σ τ
    config = plan.svt_config()
    state = svt_init(config, 0.0)
    single: list[bool] = []
    for i in range(res.n_evaluated):
        state, acc = svt_step(config, state, float(rho[i]), -float(total_noise[i]), 0.0)
        single.append(acc)
        if state.halted:
            break
    assert state.halted and len(single) == res.n_evaluated  # same number of revealed decisions
    disagree = np.flatnonzero(np.array(single) != res.decisions)
    if backend == "plaintext":
        assert disagree.size == 0
    else:
        # hss.svt: the encoded decision equals the real one whenever |ρ − t| > fmt.margin(m)
        t = plan.eps_abc + total_noise
        margin = plan.svt_format(len(shards)).margin(len(shards))
        assert all(abs(rho[i] - t[i]) <= margin for i in disagree), "a disagreement outside the margin"
        assert disagree.size <= 1, f"{disagree.size} disagreements (each inside the encoding margin)"
    # the vectorised single-owner batch driver makes the same decisions from the same draws
    n_ev = res.n_evaluated
    noise = SVTNoise(distance_noise=-total_noise[:n_ev], resample_noise=np.zeros(n_ev))
    _, dec2 = svt_batch(config, svt_init(config, 0.0), rho[:n_ev], noise)
    np.testing.assert_array_equal(dec2, res.decisions)
    assert res.party_events[1].eps == pytest.approx(5.0) and len(res.party_events) == len(shards)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("resample", [False, True])
def test_stops_at_exactly_c_when_batch_has_more_accepts(backend: str, resample: bool) -> None:
    plan, shards, _ = _toy_setup(c=3, resample=resample, eps_abc=5.0, eps_total=math.inf)  # accepts all
    stream = ToyStream(plan, seed=6, n_sim=50)
    res = _run(plan, shards, stream, backend, batch=10, label=f"stop/{backend}", adaptive=False)
    assert res.n_accepted == 3 and res.n_evaluated == 3 and res.halted
    assert res.n_batches == (3 if resample else 1)
    assert res.n_suppressed == (9 + 9 + 9 if resample else 7)
    np.testing.assert_array_equal(res.thetas, np.concatenate(stream.thetas)[:3])


def test_runner_input_checks() -> None:
    plan, shards, _ = _toy_setup()
    stream = ToyStream(plan, seed=1, n_sim=10)
    rngs = {p: srng(f"x/{p}") for p in (1, 2, 3)}
    with pytest.raises(ValueError, match="shards"):
        run_abcdp_in_memory(plan, shards[:2], stream, 3, 8, np.random.default_rng(0), rngs)
    with pytest.raises(ValueError, match="n_records"):
        run_abcdp_in_memory(
            plan, [shards[0], shards[1], shards[2][:5]], stream, 3, 8, np.random.default_rng(0), rngs
        )
    with pytest.raises(ValueError, match=r"keys 1\.\.3"):
        run_abcdp_in_memory(plan, shards, stream, 3, 8, np.random.default_rng(0), {1: rngs[1]})
    with pytest.raises(ValueError, match="honest majority"):
        run_abcdp_in_memory(plan, shards[:2], stream, 2, 8, np.random.default_rng(0), rngs)


def test_federated_repro_command_smoke(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.abcdp_repro.cli import main

    argv = ["federated", "--out", str(tmp_path), "--parties", "3", "--reps", "2", "--n-obs", "300",
            "--c", "2", "--eps-abc", "0.3", "--features", "20", "--backend", "plaintext", "--seeded-noise"]
    assert main(argv) == 0
    for ext in ("png", "csv", "md"):
        assert (tmp_path / f"federated.{ext}").stat().st_size > 0
    out = capsys.readouterr().out
    assert "single-owner vs federated" in out
    rows = list(csv.DictReader((tmp_path / "federated.csv").open()))
    assert len(rows) == 4
    for r in rows:
        if r["eps_total"] == "inf":
            assert r["identical"] == "2/2"  # no noise: both samplers accept the same candidates
