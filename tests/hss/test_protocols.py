from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from hss import field as F
from hss.fixedpoint import FixedPoint
from hss.modes import TERMS_MODES, TermsBatch, reveal_mode
from hss.primitives import multiply, open_to_all, open_to_receiver, random_bits, receive_opened
from hss.protocols import Decisions, blinded_party, plaintext_decisions, sign_party, sign_receiver
from hss.randomness import SecureRandom
from hss.runtime import ProtocolError, Transcript, run_in_memory
from hss.session import PartyContext, SessionParams
from hss.sharing import recombine, split
from mechanisms.noise import gamma_shares
from tests.hss.conftest import fixed_rng, make_session


def decide(
    mode: str,
    params: SessionParams,
    ctxs: dict[int, PartyContext],
    rngs: dict[int, SecureRandom],
    values: Sequence[npt.NDArray[np.float64]],
    public: npt.NDArray[np.float64] | None,
    step: int = 1,
    blind: Sequence[npt.NDArray[np.float64]] | None = None,
) -> tuple[Decisions, Transcript]:
    entry = reveal_mode(mode)
    machines = {
        p: entry.machine(
            c, TermsBatch(values[p - 1], public, step, rngs[p], blind=None if blind is None else blind[p - 1])
        )
        for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines)
    return entry.decode(params, tr.to_receiver[-1], len(values[0]), 1, "semi-honest"), tr


def test_rounds_match_documentation() -> None:
    params, ctxs, rngs = make_session(7)
    vals = [np.zeros(3)] * 7
    blind = [np.ones(3)] * 7
    assert params.sign_rounds == (1, 6)
    for mode in TERMS_MODES:
        _, tr = decide(mode, params, ctxs, rngs, vals, None, blind=blind)
        assert tr.rounds == reveal_mode(mode).rounds(params), mode
    assert [reveal_mode(k).rounds(params) for k in ("sign", "blinded", "sum")] == [7, 2, 1]
    small = SessionParams(m=3, t=1, session_id=b"12345678", fmt=FixedPoint(frac_bits=12, term_int_bits=12))
    assert small.sign_rounds == (1, 5)  # K = 29 bits -> 15 pair nodes -> 4 levels


@pytest.mark.parametrize("m", [3, 4, 5, 7])
def test_all_modes_equal_plaintext_on_edge_cases(m: int) -> None:
    params, ctxs, rngs = make_session(m, seed=f"edge{m}")
    fmt = params.fmt
    res = fmt.resolution
    big = fmt.term_bound * res
    # party 1 carries the edge value, others zero; public term zero
    edge = np.array(
        [
            0.0,
            res,
            -res,
            2 * res,
            -2 * res,
            big,
            -big,
            big * 0.999,
            -big * 0.999,
            1e9,
            -1e9,
            0.4 * res,
            -0.6 * res,
        ]
    )
    values = [edge] + [np.zeros_like(edge) for _ in range(m - 1)]
    want = plaintext_decisions(values, None, fmt)
    assert want.tolist()[:5] == [True, True, False, True, False]
    blind = [np.full_like(edge, 0.3) for _ in range(m)]
    for mode in TERMS_MODES:
        d, _ = decide(mode, params, ctxs, rngs, values, None, blind=blind)
        assert (d.accept == want).all(), (mode, d.accept, want)
    # all parties at the extremes at once: the sum spans the whole range without wrapping
    for sign in (1.0, -1.0):
        values = [np.full(4, sign * big) for _ in range(m)]
        pub = np.full(4, sign * big)
        d, _ = decide("sign", params, ctxs, rngs, values, pub)
        assert (d.accept == (sign > 0)).all()


@pytest.mark.slow
@pytest.mark.parametrize(("m", "n"), [(3, 50_000), (7, 10_000)])
def test_sign_on_100k_random_decisions_with_gamma_noise(m: int, n: int) -> None:
    """10^5 decisions at m = 3 (2 x 50,000) and 2 x 10^4 at m = 7, on sums of noisy terms."""
    params, ctxs, rngs = make_session(m, seed=f"bulk{m}")
    gen = np.random.default_rng(m)  # public test data; the noise comes from a CSPRNG
    noise_rng = fixed_rng("noise")
    mismatches = 0
    for step in (1, 2):
        loglik = [gen.normal(0, 1, n) * gen.choice([0.01, 1.0, 100.0], n) - 1.0 / m for _ in range(m)]
        values = [loglik[j] + gamma_shares(noise_rng, m, n) for j in range(m)]
        pub = gen.normal(0, 0.5, n)
        d, _ = decide("sign", params, ctxs, rngs, values, pub, step=step)
        mismatches += int((d.accept != plaintext_decisions(values, pub, params.fmt)).sum())
    assert mismatches == 0


def test_sum_and_blinded_reveal_what_they_claim() -> None:
    params, ctxs, rngs = make_session(5, seed="reveal")
    gen = np.random.default_rng(3)
    n = 2000
    values = [gen.normal(0, 2, n) for _ in range(5)]
    pub = gen.normal(0, 1, n)
    blind = [gen.gamma(0.2, 1, n) for _ in range(5)]
    s_int = sum(params.fmt.encode(v)[0] for v in values) + params.fmt.encode(pub)[0]
    d, _ = decide("sum", params, ctxs, rngs, values, pub)
    assert d.revealed is not None and (d.revealed == s_int * params.fmt.resolution).all()
    d, _ = decide("blinded", params, ctxs, rngs, values, pub, blind=blind)
    assert d.revealed is not None and (d.accept == (s_int >= 0)).all()
    w = sum(blind) + params.fmt.w_shift
    s_half = (s_int + 0.5) * params.fmt.resolution
    # revealed = (S + half ulp) * W' + E * 2^-(f+1+f_w) with E < 2^e_bits: relative error below 2^-50
    assert np.allclose(
        d.revealed,
        s_half * w,
        rtol=1e-9,
        atol=2.0 ** (params.fmt.blind_e_bits - params.fmt.frac_bits - 1 - params.fmt.blind_frac_bits),
    )


def test_blinded_product_hides_divisors_and_zero() -> None:
    """Z = (2S+1)W' + E: S = 0 never opens as 0, and Z mod d is uniform for small candidate divisors d."""
    from scipy import stats

    params, ctxs, rngs = make_session(3, seed="divisors")
    fmt = params.fmt
    n = 6000
    for s_val in (0.0, 3 * fmt.resolution, 1.5):
        values = [np.full(n, s_val), np.zeros(n), np.zeros(n)]
        blind = [np.full(n, 0.7), np.full(n, 0.2), np.full(n, 0.1)]  # fixed W: the worst case for hiding
        machines = {
            p: blinded_party(c, values[p - 1], None, 5, rngs[p], blind[p - 1]) for p, c in ctxs.items()
        }
        _, tr = run_in_memory(machines)
        z = F.to_ints(receive_opened(params, tr.to_receiver[-1], (n,)))
        assert min(z) > 0  # all accept; S = 0 does not open as 0
        s_int = int(fmt.encode([s_val])[0][0])
        for d in (2, 3, 7, 2 * s_int + 1 if s_int else 5):
            counts = np.bincount([v % d for v in z], minlength=d)
            assert stats.chisquare(counts).pvalue > 1e-4, (s_val, d, counts)
        # without the additive term, every Z would be a multiple of 2S+1: check that this is not so
        assert any(v % (2 * s_int + 1) for v in z) if s_int else True


def test_standalone_open_multiply_and_random_bits() -> None:
    params, ctxs, rngs = make_session(5, seed="standalone")
    t, rng = params.t, fixed_rng("dealer")
    x, y = F.from_ints(list(range(1, 101))), F.from_ints([F.P - 2] * 100)
    sx, sy = split(x, t, 5, rng), split(y, t, 5, rng)
    res, tr = run_in_memory({p: multiply(c, sx[p - 1], sy[p - 1], rngs[p]) for p, c in ctxs.items()})
    assert tr.rounds == 1
    assert F.to_ints(recombine(res, t)) == [(-2 * v) % F.P for v in range(1, 101)]
    res, tr = run_in_memory({p: open_to_all(c, F.mul(sx[p - 1], sy[p - 1]), 3) for p, c in ctxs.items()})
    assert tr.rounds == 1 and all(F.to_ints(v) == F.to_ints(F.mul(x, y)) for v in res.values())
    _, tr = run_in_memory({p: open_to_receiver(c, sx[p - 1], 4) for p, c in ctxs.items()})
    assert F.to_ints(receive_opened(params, tr.to_receiver[-1], (100,))) == list(range(1, 101))
    bits, tr = run_in_memory({p: random_bits(c, 4000, 6) for p, c in ctxs.items()})
    assert tr.rounds == 1
    b = F.to_ints(recombine(bits, t))
    assert set(b) == {0, 1}
    assert abs(sum(b) - 2000) < 4 * np.sqrt(1000)  # binomial(4000, 1/2): 4 standard deviations


def test_bad_inputs_and_modes_are_refused() -> None:
    _params, ctxs, rngs = make_session(3, seed="bad")
    with pytest.raises(ValueError, match="NaN"):
        sign_party(ctxs[1], np.array([np.nan]), None, 1, rngs[1])
    with pytest.raises(ValueError, match="blinding share"):
        reveal_mode("blinded").machine(ctxs[1], TermsBatch(np.zeros(2), None, 1, rngs[1]))
    with pytest.raises(ValueError, match="blinding shares have shape"):
        blinded_party(ctxs[1], np.zeros(2), None, 1, rngs[1], np.ones(3))
    with pytest.raises(ValueError, match="public terms exceed"):
        sign_party(ctxs[1], np.zeros(2), np.array([0.0, 1e9]), 1, rngs[1])
    with pytest.raises(ValueError, match="1-D batch"):
        reveal_mode("sum").machine(ctxs[1], TermsBatch(np.zeros((2, 2)), None, 1, rngs[1]))
    with pytest.raises(ValueError, match="unknown reveal mode"):
        reveal_mode("max")
    two = SessionParams(m=2, t=0, session_id=b"two-party")
    assert [reveal_mode(k).supported_by(two) for k in ("sum", "sign", "blinded")] == [True, False, False]
    assert not two.honest_majority and all(c.params.honest_majority for c in ctxs.values())
    with pytest.raises(ValueError, match="honest majority"):
        reveal_mode("sign").check_supported(two)
    _, two_ctxs, two_rngs = make_session(2, t=0, seed="bad-two")
    for refused in (
        lambda: sign_party(two_ctxs[1], np.zeros(2), None, 1, two_rngs[1]),
        lambda: blinded_party(two_ctxs[1], np.zeros(2), None, 1, two_rngs[1], np.ones(2)),
        lambda: multiply(two_ctxs[1], F.zeros((2,)), F.zeros((2,)), two_rngs[1]),
        lambda: random_bits(two_ctxs[1], 2, 1),
    ):
        with pytest.raises(ValueError, match="needs an honest majority with t >= 1"):
            refused()
    reveal_mode("sum").machine(two_ctxs[1], TermsBatch(np.zeros(2), None, 1, two_rngs[1]))  # any m >= 2
    with pytest.raises(ValueError, match="threshold"):
        SessionParams(m=4, t=2, session_id=b"12345678")


def test_corrupted_or_missing_messages_are_detected() -> None:
    params, ctxs, rngs = make_session(3, seed="corrupt")
    values = [np.array([1.0, -1.0])] * 3

    def drop(rnd: int, src: int, dst: int, payload: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        return payload[:-2] if (rnd, src) == (2, 2) else payload

    with pytest.raises(ProtocolError, match="party 2 sent"):
        run_in_memory(
            {p: sign_party(c, values[p - 1], None, 1, rngs[p]) for p, c in ctxs.items()},
            tamper=drop,
        )

    def flip(rnd: int, src: int, dst: int, payload: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        out = payload.copy()
        if dst == 0:
            out[0] ^= np.uint64(1 << 40)
        return out

    machines = {p: sign_party(c, values[p - 1], None, 1, rngs[p]) for p, c in ctxs.items()}
    _, tr = run_in_memory(machines, tamper=flip)
    with pytest.raises(ProtocolError, match="not a bit"):
        sign_receiver(params, tr.to_receiver[-1], 2)


@pytest.mark.parametrize("m", [3, 4, 7])
def test_pooled_precompute_then_six_online_rounds(m: int) -> None:
    from hss.protocols import precompute_sign

    params, ctxs, rngs = make_session(m, seed=f"pool{m}")
    n = 500
    gen = np.random.default_rng(m)
    values = [gen.normal(0, 2, n) for _ in range(m)]
    pub = gen.normal(0, 1, n)
    mats, tr_pre = run_in_memory({p: precompute_sign(c, n, 40, rngs[p]) for p, c in ctxs.items()})
    assert tr_pre.rounds == 3
    machines = {p: sign_party(c, values[p - 1], pub, 41, rngs[p], material=mats[p]) for p, c in ctxs.items()}
    _, tr = run_in_memory(machines)
    assert tr.rounds == params.sign_rounds[1] == 6
    d = sign_receiver(params, tr.to_receiver[-1], n)
    assert (d.accept == plaintext_decisions(values, pub, params.fmt)).all()
    with pytest.raises(ValueError, match="material is for 500"):
        sign_party(ctxs[1], values[0][:10], None, 42, rngs[1], material=mats[1])


@pytest.mark.parametrize("m", [3, 5])
def test_pooled_precompute_equals_plaintext_in_nine_rounds(m: int) -> None:
    """precompute="pooled": the distributed precompute runs in front of the online rounds inside one machine
    (each public root computed by one party); same decisions as plaintext, 3 + 6 rounds."""
    params, ctxs, rngs = make_session(m, seed=f"pooled{m}")
    g = np.random.default_rng(40 + m)
    n = 300
    values = [g.normal(0.0, 2.0, n) for _ in range(m)]
    values[0][:3] = [0.0, params.fmt.resolution, -params.fmt.resolution]  # edges: S = 0, +res, -res
    for v in values[1:]:
        v[:3] = 0.0
    public = np.zeros(n)
    machines = {
        p: sign_party(c, values[p - 1], public, 1, rngs[p], precompute="pooled") for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines)
    dec = sign_receiver(params, tr.to_receiver[-1], n)
    np.testing.assert_array_equal(dec.accept, plaintext_decisions(values, public, params.fmt))
    assert dec.accept[:3].tolist() == [True, True, False]
    assert tr.rounds == reveal_mode("sign").rounds(params, "pooled") == 9
    with pytest.raises(ValueError, match="sign precompute 'eager'"):
        sign_party(ctxs[1], values[0], public, 2, rngs[1], precompute="eager")
    with pytest.raises(ValueError, match="sign precompute 'eager'"):  # the batch refuses it in any mode
        TermsBatch(values[0], public, 2, rngs[1], precompute="eager")


@pytest.mark.parametrize("precompute", ["pooled", "inline"])
def test_a_pool_made_ahead_and_the_steps_own_precompute_never_share_a_zero_sharing(
    precompute: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool made ahead for one batch size is discarded when the step asks another (parties.ahead), and the
    step makes its own precompute with the same step's PRSS keys. The pooled precompute deals fresh s each
    time: under one zero-sharing, an honest party's two contributions to a chunk holder would differ by
    lambda (s_i^2 - s'_i^2) of its own shares, which with the opened squares gives away signs of s, the mask
    bits. So the pool's openings draw zero-sharings the step's never do (and the decisions stay right)."""
    import hss.protocols as protocols_module

    m, step = 3, 5
    params, ctxs, rngs = make_session(m, seed=f"pool-zero-{precompute}")
    drawn: list[tuple[str, int]] = []
    real = protocols_module.masked_contribution
    phase = {"now": "pool"}

    def recording(ctx: Any, share: Any, purpose: int, stp: int) -> Any:
        if ctx.party == 2:
            drawn.append((phase["now"], purpose))
        return real(ctx, share, purpose, stp)

    monkeypatch.setattr(protocols_module, "masked_contribution", recording)
    mode = reveal_mode("sign").under("semi-honest", precompute, ahead=True)
    run_in_memory({p: mode.ahead_machine(c, 1, step, rngs[p]) for p, c in ctxs.items()})
    phase["now"] = "step"
    values = [np.array([1.5, -2.0]) * p for p in range(1, m + 1)]
    machines = {
        p: sign_party(c, values[p - 1], None, step, rngs[p], precompute=precompute) for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines)
    pool = {purpose for when, purpose in drawn if when == "pool"}
    own = {purpose for when, purpose in drawn if when == "step"}
    assert pool and own and not pool & own, (pool, own)
    got = sign_receiver(params, tr.to_receiver[-1], 2).accept
    np.testing.assert_array_equal(got, plaintext_decisions(values, None, params.fmt))


def test_a_coalition_cannot_read_the_steps_mask_signs_from_a_discarded_pooled_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attack on the pooled fallback, run: m = 3, party 1 alone (t = 1). A pool made ahead for one
    decision is discarded and the step makes its own pooled precompute for two at the same step. Party 1
    knows its shares s(1), s'(1) of both runs' dealt values (degree 1: s(2) = 2 s(1) - s), the squares of its
    chunk (it is their root holder) and party 2's two contributions to them. Under one zero-sharing their
    difference was lambda_2 (s(2)^2 - s'(2)^2), and of the four signs (e, e') with s = e sqrt(s^2) one fits:
    it read the sign of every s' of its chunk, the step's mask bits (13 of 13 before the fix). Now nothing
    fits uniquely."""
    import hss.protocols as protocols_module

    m, step = 3, 5
    params, ctxs, rngs = make_session(m, seed="pooled-leak")
    seen: dict[tuple[str, int], Any] = {}
    real = protocols_module.sum_contributions
    run = {"now": "pool"}

    def recording(ctx: Any, own: Any, msgs: Any) -> Any:
        out = real(ctx, own, msgs)
        seen.setdefault((run["now"], ctx.party), out)  # the precompute's first opening: the dealt s
        return out

    monkeypatch.setattr(protocols_module, "sum_contributions", recording)
    mode = reveal_mode("sign").under("semi-honest", "pooled", ahead=True)
    _, pool = run_in_memory(
        {p: mode.ahead_machine(c, 1, step, rngs[p]) for p, c in ctxs.items()}, keep_log=True
    )
    run["now"] = "step"
    values = [np.array([0.7, -1.1]) * p for p in range(1, m + 1)]
    machines = {
        p: sign_party(c, values[p - 1], None, step, rngs[p], precompute="pooled") for p, c in ctxs.items()
    }
    _, own = run_in_memory(machines, keep_log=True)

    def ints(a: Any) -> list[int]:
        return [int(x) for x in F.to_ints(np.ascontiguousarray(a).reshape(-1, 2))]

    kbits, p_ = params.fmt.compare_bits, F.P

    def from_party_2(log: Any, n: int) -> list[int]:  # its round-2 contributions to party 1's chunk
        lo, hi = protocols_module.root_chunks(kbits * n, m)[0]
        payload = next(x for r, s, d, x in log if (r, s, d) == (2, 2, 1))
        return ints(payload.reshape(-1, 2)[: hi - lo])

    cp, cs = from_party_2(pool.log, 1), from_party_2(own.log, 2)
    s1p, s1s = ints(seen[("pool", 1)]), ints(seen[("step", 1)])
    s_pool = ints(recombine({p: seen[("pool", p)] for p in ctxs}, params.t))  # party 1 opens their squares
    s_step = ints(recombine({p: seen[("step", p)] for p in ctxs}, params.t))
    inv_lam2 = pow((-3) % p_, p_ - 2, p_)  # party 2's Lagrange coefficient at 0 over {1, 2, 3}
    determined = 0
    for q in range(len(cp)):
        diff = (cp[q] - cs[q]) * inv_lam2 % p_
        rp, rs = pow(s_pool[q] ** 2 % p_, (p_ + 1) // 4, p_), pow(s_step[q] ** 2 % p_, (p_ + 1) // 4, p_)
        fits = {
            e2
            for e1 in (1, -1)
            for e2 in (1, -1)
            if ((2 * s1p[q] - e1 * rp) ** 2 - (2 * s1s[q] - e2 * rs) ** 2 - diff) % p_ == 0
        }
        determined += len(fits) == 1
    assert len(cp) == 13 and determined == 0, determined
    np.testing.assert_array_equal(
        sign_receiver(params, own.to_receiver[-1], 2).accept, plaintext_decisions(values, None, params.fmt)
    )
