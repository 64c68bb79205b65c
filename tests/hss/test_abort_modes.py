"""The reveal modes under security with abort (hss.abort_modes): exact when honest, abort or correct when not.

The harness runs the party machines round by round with the receiver, lets the corrupt parties' outgoing
messages be altered (tests.hss.test_authenticated.make_tamper: additive error, inconsistent errors to
different peers, replaced, dropped, duplicated, replayed, non-canonical), and checks for every case that the
receiver either raises AbortError or decodes exactly the plaintext decisions of the parties' inputs.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from hss import abort_sign
from hss import field as F
from hss.abort_modes import SIGN_MASK_ROUNDS, sum_party_abort, sum_receiver_abort, term_bits
from hss.abort_sign import precompute_sign_abort, sign_abort_rounds, sign_party_abort, sign_receiver_abort
from hss.authenticated import AbortError, AuthParty
from hss.lazy_coin import LazyCoin
from hss.modes import reveal_mode
from hss.protocols import Decisions, plaintext_decisions, root_chunks
from hss.runtime import RECEIVER, Inbox, Machine, Outbox, Payload, run_in_memory
from hss.session import SessionParams
from hss.sharing import recombine
from tests.hss.conftest import make_session
from tests.hss.test_authenticated import Prev, Tamper, consistent_shift, honest, make_tamper, run_rounds

N = 4  # decisions per tampered batch


def terms(m: int, n: int, seed: int) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.float64]]:
    gen = np.random.default_rng(seed)
    vals = [gen.normal(0.0, 2.0, n) for _ in range(m)]
    pub = gen.normal(0.0, 1.0, n)
    return vals, pub


#: the sign variants under abort: (sign precompute, lazy coin, mask made ahead)
VARIANTS: dict[str, tuple[str, LazyCoin | None, bool]] = {
    "inline": ("inline", None, False),
    "pooled": ("pooled", None, False),
    "blocks4": ("blocks4", None, False),
    "lazy": ("inline", LazyCoin(3, 2), False),  # gamma = 3/4
    "inline-ahead": ("inline", None, True),
    "pooled-ahead": ("pooled", None, True),
    "blocks4-ahead": ("blocks4", None, True),
}


def _drive(machine: Machine[Any]) -> Generator[Outbox, Inbox, Any]:
    """A machine's rounds inside another machine's generator (to run two machines as one)."""
    out = machine.start()
    while not machine.done:
        out = machine.step((yield out))
    return machine.result


def _ahead_then_online(
    ctx: Any, rng: Any, val: Any, pub: Any, step: int, pre: str
) -> Generator[Outbox, Inbox, Any]:
    """One party's rounds of a step whose mask is made ahead (precompute_sign_abort, rounds 1 to 5) and its
    online rounds (sign_party_abort with the material), as one machine: what a daemon runs as the pool of
    the previous step and then the step (parties.ahead)."""
    n = np.asarray(val).shape[0]
    material = yield from _drive(precompute_sign_abort(ctx, n, step, rng, pre))
    return (yield from _drive(sign_party_abort(ctx, val, pub, step, rng, pre, material=material)))


def sign_machines(
    m: int, seed: str, vals: list[Any], pub: Any, step: int = 7, variant: str = "inline"
) -> dict[int, Machine[Any]]:
    _params, ctxs, rngs = make_session(m, seed=seed)
    pre, lazy, ahead = VARIANTS[variant]
    if ahead:
        return {
            p: Machine(p, _ahead_then_online(c, rngs[p], vals[p - 1], pub, step, pre))
            for p, c in ctxs.items()
        }
    return {p: sign_party_abort(c, vals[p - 1], pub, step, rngs[p], pre, lazy) for p, c in ctxs.items()}


def rounds_of(variant: str) -> int:
    pre, lazy, ahead = VARIANTS[variant]
    return sign_abort_rounds(pre, lazy is not None, ahead)


Receiver = Callable[[SessionParams, Inbox, int, int], Decisions]


def run_with_receiver(
    machines: dict[int, Machine[Any]],
    corrupt: set[int],
    tamper: Tamper,
    n: int,
    step: int = 7,
    receiver: Receiver = sign_receiver_abort,
) -> tuple[dict[int, Any], Decisions | AbortError]:
    """Each party's result or AbortError, and the receiver's decisions (``receiver``: the mode's decoder under
    abort) or AbortError."""
    outcome, to_receiver = run_rounds(machines, corrupt, tamper)
    params = make_session(len(machines), seed="receiver")[0]  # the receiver needs m, t and the format
    try:
        decided: Decisions | AbortError = receiver(params, to_receiver, n, step)
    except AbortError as exc:
        decided = exc
    return outcome, decided


@pytest.mark.parametrize(
    "variant", ["inline", "pooled", "blocks4", "inline-ahead", "pooled-ahead", "blocks4-ahead"]
)
@pytest.mark.parametrize("m", [3, 4, 5, 7])
def test_honest_sign_under_abort_equals_the_plaintext_decisions(m: int, variant: str) -> None:
    n = 60
    vals, pub = terms(m, n, seed=m)
    vals[0][:4] = [1e6, -1e6, 131071.9, -131071.9]  # clamped and extreme terms
    vals[1][4] = -(sum(v[4] for i, v in enumerate(vals) if i != 1) + pub[4])  # S = 0 (to the resolution)
    params = make_session(m, seed=f"honest-{m}")[0]
    machines = sign_machines(m, f"honest-{m}", vals, pub, 3, variant)
    res, tr = run_in_memory(machines)
    got = sign_receiver_abort(params, tr.to_receiver[-1], n, 3)
    want = plaintext_decisions(vals, pub, params.fmt)
    assert np.array_equal(got.accept, want)
    assert 0.2 < want.mean() < 0.8
    want_rounds = {"inline": 15, "pooled": 15, "blocks4": 14}[VARIANTS[variant][0]] + VARIANTS[variant][2]
    assert tr.rounds == rounds_of(variant) == want_rounds  # made ahead: one round more, 5 of them ahead
    assert res[1].clamped[:2].all() and not res[1].clamped[2:].any()  # 1e6 and -1e6 clamped, 131071.9 not


def test_lazy_sign_under_abort_accepts_only_where_the_test_passes_at_the_coin_rate() -> None:
    """The lazy coin (gamma = 3/4) ANDed with the bit: never an accept where S < 0, and among S >= 0 the
    accept count is Binomial(k, 3/4) (two-sided test at 1e-4; 13 rounds)."""
    m, n = 3, 400
    vals, pub = terms(m, n, seed=21)
    params = make_session(m, seed="lazy")[0]
    _, tr = run_in_memory(sign_machines(m, "lazy", vals, pub, 3, "lazy"))
    got = sign_receiver_abort(params, tr.to_receiver[-1], n, 3).accept
    plain = plaintext_decisions(vals, pub, params.fmt)
    assert tr.rounds == rounds_of("lazy") == 16
    assert not (got & ~plain).any()
    k = int(plain.sum())
    assert stats.binomtest(int(got.sum()), k, 0.75).pvalue > 1e-4


@pytest.mark.parametrize("m", [2, 3, 5])
def test_honest_sum_under_abort_reveals_the_sum(m: int) -> None:
    n = 30
    vals, pub = terms(m, n, seed=10 + m)
    params, ctxs, _ = make_session(m, t=1 if m > 2 else 0, seed=f"sum-{m}")
    _, tr = run_in_memory({p: sum_party_abort(c, vals[p - 1], pub, 2) for p, c in ctxs.items()})
    got = sum_receiver_abort(params, tr.to_receiver[-1], n, 2)
    assert np.array_equal(got.accept, plaintext_decisions(vals, pub, params.fmt))
    assert got.revealed is not None
    assert np.allclose(got.revealed, sum(vals) + pub, atol=m * 2.0**-20)


def test_sum_receiver_refuses_a_missing_or_malformed_message() -> None:
    m, n = 3, 5
    vals, pub = terms(m, n, seed=1)
    params, ctxs, _ = make_session(m, seed="sum-bad")
    _, tr = run_in_memory({p: sum_party_abort(c, vals[p - 1], pub, 4) for p, c in ctxs.items()})
    inbox = dict(tr.to_receiver[-1])
    with pytest.raises(AbortError, match=r"abort at step 4, round 1 \(receiver: sum\)"):
        sum_receiver_abort(params, {j: v for j, v in inbox.items() if j != 2}, n, 4)
    bad = inbox[2].copy()
    bad[1] = np.uint64(2**64 - 1)
    with pytest.raises(AbortError, match="non-canonical"):
        sum_receiver_abort(params, {**inbox, 2: bad}, n, 4)


def element_counts(m: int, seed: str, variant: str = "inline") -> dict[int, int]:
    vals, pub = terms(m, N, seed=3)
    _, tr = run_in_memory(sign_machines(m, seed, vals, pub, variant=variant), keep_log=True)
    counts: dict[int, int] = {}
    for rnd, src, _dst, payload in tr.log:
        if src == 1:
            counts[rnd] = payload.size // 2
    return counts


@pytest.mark.parametrize(
    ("m", "variant"),
    [
        (3, "inline"),
        (4, "inline"),
        (5, "inline"),
        (7, "inline"),
        (3, "pooled"),
        (4, "blocks4"),
        (3, "lazy"),
        (3, "inline-ahead"),
        (4, "pooled-ahead"),
        (3, "blocks4-ahead"),
    ],
)
@pytest.mark.slow
def test_every_tampered_sign_message_aborts_or_yields_the_plaintext_decisions(m: int, variant: str) -> None:
    """Party 1 corrupt; each kind of alteration in each round, at three positions of the message for an
    additive error; the receiver's messages (the last round) are tampered too. The correct decisions: the
    plaintext ones (lazy: the untampered run's, the coin being fixed by the session's seeds)."""
    seed = f"tamper-sign-{m}-{variant}"
    vals, pub = terms(m, N, seed=3)
    params = make_session(m, seed=seed)[0]
    _, clean = run_in_memory(sign_machines(m, seed, vals, pub, variant=variant))
    want = sign_receiver_abort(params, clean.to_receiver[-1], N, 7).accept
    if variant != "lazy":
        assert np.array_equal(want, plaintext_decisions(vals, pub, params.fmt))
    tally: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for rnd, k in sorted(element_counts(m, seed, variant).items()):
        dst = RECEIVER if rnd == rounds_of(variant) else 2
        kinds = [("additive", i) for i in sorted({0, k // 2, k - 1})]
        others = ("inconsistent", "replace", "drop", "duplicate", "replay", "noncanonical")
        kinds += [(kind, 0) for kind in others]
        for kind, index in kinds:
            outcome, decided = run_with_receiver(
                sign_machines(m, seed, vals, pub, variant=variant), {1}, make_tamper(kind, rnd, dst, index), N
            )
            if isinstance(decided, AbortError):
                tally[rnd][0] += 1
                continue
            assert np.array_equal(decided.accept, want), (kind, rnd, index)
            assert not any(isinstance(o, AbortError) for p, o in outcome.items() if p != 1)
            tally[rnd][1] += 1
    # every round's alterations were all caught, except the ones that change nothing the others use
    for rnd, (aborted, correct) in tally.items():
        assert aborted >= 7, (rnd, aborted, correct)


@pytest.mark.slow
def test_two_corrupt_parties_at_m5_are_caught_in_every_round() -> None:
    m, seed = 5, "two-corrupt"
    vals, pub = terms(m, N, seed=3)
    for rnd in range(1, sign_abort_rounds() + 1):
        first = make_tamper("additive", rnd, 3, 0)
        second = make_tamper("inconsistent", rnd, 4, 0)

        def both(
            r: int, src: int, dst: int, payload: Payload, prev: Prev, a: Tamper = first, b: Tamper = second
        ) -> Payload | None:
            return a(r, src, dst, payload, prev) if src == 1 else b(r, src, dst, payload, prev)

        _, decided = run_with_receiver(sign_machines(m, seed, vals, pub), {1, 2}, both, N)
        assert isinstance(decided, AbortError), rnd


@pytest.mark.parametrize("bad", ["two", "wide"])
def test_a_party_dealing_a_term_that_is_not_bits_is_caught_by_its_proof(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deviating party deals its term as values that are not all bits (a 2, or one 'bit' worth 2^40,
    which would put its term far out of the comparison's range): its own proof that the values are bits fails
    at the random point, and every honest party aborts in round 3, before anything depends on honest data."""
    m, seed = 3, f"bad-bits-{bad}"
    vals, pub = terms(m, N, seed=3)
    real = abort_sign._term_bits
    calls = {"n": 0}

    def deviating(x: npt.NDArray[np.int64], nbits: int) -> F.FieldArray:
        calls["n"] += 1
        out = real(x, nbits)
        if calls["n"] == 1:  # party 1's machine starts first
            out[0, 0] = F.const(2) if bad == "two" else F.const(1 << 40)
        return out

    monkeypatch.setattr(abort_sign, "_term_bits", deviating)
    outcome, decided = run_with_receiver(sign_machines(m, seed, vals, pub), set(), honest, N)
    assert isinstance(decided, AbortError)
    for p in (2, 3):
        assert isinstance(outcome[p], AbortError)
        assert outcome[p].what == "term bit proofs" and outcome[p].round == 3


@pytest.mark.parametrize("bad", ["two", "wide"])
def test_a_term_that_is_not_bits_is_caught_before_the_output_when_the_mask_is_made_ahead(
    bad: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mask made ahead (rounds 1-5): the terms are dealt in round 6, c is opened with the proofs' seed in
    round 7 (c masks any term: a term that is not bits only changes c), and the proofs are opened with the
    tree's first product and checked in round 8, long before verify and the output."""
    m, seed = 3, f"bad-bits-ahead-{bad}"
    vals, pub = terms(m, N, seed=3)
    real = abort_sign._term_bits
    calls = {"n": 0}

    def deviating(x: npt.NDArray[np.int64], nbits: int) -> F.FieldArray:
        calls["n"] += 1
        out = real(x, nbits)
        if calls["n"] == 1:  # party 1's machine deals first
            out[0, 0] = F.const(2) if bad == "two" else F.const(1 << 40)
        return out

    monkeypatch.setattr(abort_sign, "_term_bits", deviating)
    outcome, decided = run_with_receiver(
        sign_machines(m, seed, vals, pub, variant="inline-ahead"), set(), honest, N
    )
    assert isinstance(decided, AbortError)
    for p in (2, 3):
        assert isinstance(outcome[p], AbortError)
        assert (outcome[p].what, outcome[p].round) == ("term bit proofs", SIGN_MASK_ROUNDS + 3)


def test_a_mask_made_ahead_is_taken_once_by_its_own_step() -> None:
    """The material binds its step, batch size and precompute, and a second take is refused: a mask used
    twice would open two masked terms under the same r (their difference: the difference of the sums)."""
    m, n = 3, 2
    _params, ctxs, rngs = make_session(m, seed="take-once")
    machines = {p: precompute_sign_abort(c, n, 4, rngs[p]) for p, c in ctxs.items()}
    made, tr = run_in_memory(machines)
    assert tr.rounds == SIGN_MASK_ROUNDS
    mat = made[1]
    with pytest.raises(
        ValueError, match="made for step 4, 2 decisions, precompute 'inline'; the batch is step 5"
    ):
        mat.take(5, n, "inline")
    with pytest.raises(ValueError, match="the batch is step 4, 3 decisions"):
        mat.take(4, 3, "inline")
    with pytest.raises(ValueError, match="'blocks4'"):
        mat.take(4, n, "blocks4")
    with pytest.raises(
        ValueError, match="the batch is step 4, 3 decisions"
    ):  # refused when the machine is made
        sign_party_abort(ctxs[1], [0.0, 1.0, 2.0], None, 4, rngs[1], material=mat)
    sign_party_abort(ctxs[1], [0.0, 1.0], None, 4, rngs[1], material=mat)  # taken here
    with pytest.raises(ValueError, match="taken by a batch already"):
        mat.take(4, n, "inline")
    with pytest.raises(ValueError, match="another party context"):
        sign_party_abort(ctxs[2], [0.0, 1.0], None, 4, rngs[2], material=made[3])
    with pytest.raises(ValueError, match="lazy decision makes its coin in the step"):
        sign_party_abort(ctxs[2], [0.0, 1.0], None, 4, rngs[2], lazy=LazyCoin(3, 2), material=made[2])


def test_a_step_after_a_discarded_pool_opens_no_coin_of_the_pool_again() -> None:
    """A pool made for another batch size (or before a link probe) is discarded, and the step runs the inline
    schedule with the same step's PRSS values. The check before the masked term must then draw coins the
    pool never opened: a coalition that knew them before fixing its reshare errors could make the errors
    cancel (a check passing or failing on a guessed secret). Party 1's round-3 opening starts with its share
    of the check's seed: the pool's is drawn under its own PRSS purpose, the step's under another."""
    m, step = 3, 6
    vals, pub = terms(m, N, seed=3)
    _params, ctxs, rngs = make_session(m, seed="discarded-pool")
    pools = {p: precompute_sign_abort(c, N + 1, step, rngs[p]) for p, c in ctxs.items()}
    _, pool = run_in_memory(pools, keep_log=True)
    machines = {p: sign_party_abort(c, vals[p - 1], pub, step, rngs[p]) for p, c in ctxs.items()}
    _, inline = run_in_memory(machines, keep_log=True)

    def seed_share(log: Any) -> Payload:
        return next(payload[:2] for r, src, dst, payload in log if (r, src, dst) == (3, 1, 2))

    drawn = {
        purpose: ctxs[1].prss.random(purpose, step, (4, 1))[0].reshape(-1)
        for purpose in (abort_sign.P_SIGN_PRE_AHEAD, abort_sign.P_SIGN_PRE)
    }
    assert np.array_equal(seed_share(pool.log), drawn[abort_sign.P_SIGN_PRE_AHEAD])
    assert np.array_equal(seed_share(inline.log), drawn[abort_sign.P_SIGN_PRE])
    assert not np.array_equal(seed_share(pool.log), seed_share(inline.log))


def _pool_discarded_then_in_step(
    ctx: Any, rng: Any, val: Any, pub: Any, step: int, pre: str
) -> Generator[Outbox, Inbox, Any]:
    """A pool made for another batch size (3 more decisions), discarded, then the step's in-step schedule at
    the same step (what a daemon does when the next step asks another n: parties.ahead)."""
    yield from _drive(precompute_sign_abort(ctx, np.asarray(val).shape[0] + 3, step, rng, pre))
    machine = sign_party_abort(ctx, val, pub, step, rng, pre, rounds_before=SIGN_MASK_ROUNDS)
    return (yield from _drive(machine))


@pytest.mark.slow
@pytest.mark.parametrize("pre", ["inline", "blocks4"])
def test_a_step_after_a_discarded_pool_aborts_or_is_right_in_every_round(pre: str) -> None:
    """The fallback schedule as the daemons run it (a discarded pool's 5 rounds, then the in-step rounds of
    the same step): honest, the plaintext decisions in 5 + 15 rounds (blocks4 5 + 14); party 1 altering its
    messages in any round (an additive error, inconsistent errors, a dropped message), every honest party
    aborts or the receiver gets the plaintext decisions, and an abort names the step's round it happened in
    (never one before the altered message: the in-step rounds count on from the pool's)."""
    m, seed, step = 3, f"fallback-{pre}", 7
    vals, pub = terms(m, N, seed=3)
    params = make_session(m, seed=seed)[0]

    def machines() -> dict[int, Machine[Any]]:
        fresh = make_session(m, seed=seed)
        gens = {
            p: _pool_discarded_then_in_step(c, fresh[2][p], vals[p - 1], pub, step, pre)
            for p, c in fresh[1].items()
        }
        return {p: Machine(p, g) for p, g in gens.items()}

    _, clean = run_in_memory(machines())
    total = SIGN_MASK_ROUNDS + sign_abort_rounds(pre)
    assert clean.rounds == total
    want = plaintext_decisions(vals, pub, params.fmt)
    assert np.array_equal(sign_receiver_abort(params, clean.to_receiver[-1], N, step).accept, want)
    for rnd in range(1, total + 1):
        dst = RECEIVER if rnd == total else 2
        for kind in ("additive", "inconsistent", "drop"):
            outcome, decided = run_with_receiver(machines(), {1}, make_tamper(kind, rnd, dst, 0), N, step)
            if isinstance(decided, AbortError):
                for p in range(2, m + 1):
                    o = outcome[p]
                    assert not isinstance(o, AbortError) or rnd <= o.round <= total, (kind, rnd, o)
                continue
            assert np.array_equal(decided.accept, want), (kind, rnd)
    outcome, _ = run_with_receiver(machines(), {1}, make_tamper("drop", 8, 2, 0), N, step)
    assert isinstance(outcome[2], AbortError) and outcome[2].round == 8, outcome[2]  # the frame's number


def test_unsupported_combinations_are_refused_with_the_reason() -> None:
    sign = reveal_mode("sign")
    semi_only = dataclasses.replace(
        reveal_mode("sum"), securities={"semi-honest": reveal_mode("sum").securities["semi-honest"]}
    )
    with pytest.raises(ValueError, match="'sum' is not offered with security 'abort' yet"):
        semi_only.under("abort")
    semi_only.under("semi-honest")
    with pytest.raises(ValueError, match="security 'byzantine' is not one of"):
        sign.under("byzantine")
    with pytest.raises(ValueError, match="a lazy coin with sign_precompute 'blocks4' is not offered"):
        sign.under("abort", precompute="blocks4", lazy=True)
    with pytest.raises(ValueError, match="a lazy coin is made in the step: precompute_ahead is not offered"):
        sign.under("abort", ahead=True, lazy=True)
    _params, ctxs, rngs = make_session(3, seed="ahead")
    made = sign.under("abort", "blocks4", ahead=True).ahead_machine(ctxs[1], 2, 1, rngs[1])
    assert made.name == "precompute_sign[abort]"
    with pytest.raises(ValueError, match="makes no material ahead"):
        sign.under("abort").ahead_machine(ctxs[1], 2, 1, rngs[1])
    with pytest.raises(ValueError, match="semi-honest sign material given to a batch under security 'abort'"):
        from hss.modes import TermsBatch
        from hss.protocols import SignMaterial

        empty = SignMaterial(F.zeros((0, 1)), F.zeros((0, 1)), F.zeros((1,)))
        batch = TermsBatch([0.0], None, 1, rngs[1], material=empty, security="abort")
        sign.under("abort", ahead=True).machine(ctxs[1], batch)
    with pytest.raises(ValueError, match="sign precompute 'eager' is not one of"):
        sign.under("abort", precompute="eager")
    with pytest.raises(ValueError, match="lazy coin is ANDed with the accept bit in reveal mode 'sign' only"):
        reveal_mode("sum").under("abort", lazy=True)
    three = make_session(3, seed="r")[0]
    for pre in ("inline", "pooled", "blocks4"):
        assert sign.under("abort", precompute=pre).rounds(three) == sign_abort_rounds(pre)
    assert sign.under("abort", lazy=True).rounds(three) == sign_abort_rounds(lazy=True) == 16
    sign.under("semi-honest", precompute="blocks4", lazy=True)  # semi-honest refuses none of these
    reveal_mode("sum").under("abort")
    reveal_mode("blinded").under("abort")
    _params, ctxs, rngs = make_session(2, t=0, seed="m2")
    with pytest.raises(ValueError, match="honest majority"):
        sign_party_abort(ctxs[1], [0.0], None, 1, rngs[1])


def low_bits(words: Payload) -> npt.NDArray[np.int64]:
    return (words[0::2] & np.uint64(15)).astype(np.int64)


def coalition_views(
    sign_of_honest: float, n: int = 150, variant: str = "inline"
) -> dict[int, npt.NDArray[np.int64]]:
    """What party 1 of the coalition {1, 2} of m = 5 receives from the honest parties in each round, as the
    low 4 bits of every element."""
    m, coalition = 5, {1, 2}
    gen = np.random.default_rng(11)
    vals = [
        np.full(n, -0.5) if p in coalition else sign_of_honest * gen.uniform(50, 60, n)
        for p in range(1, m + 1)
    ]
    machines = sign_machines(m, f"views-{sign_of_honest}-{variant}", vals, None, variant=variant)
    _, tr = run_in_memory(machines, keep_log=True)
    seen: dict[int, list[npt.NDArray[np.int64]]] = defaultdict(list)
    for rnd, src, dst, payload in tr.log:
        if dst == 1 and src not in coalition:  # (party 2 receives the same opened shares: counted once)
            seen[rnd].append(low_bits(payload))
    return {r: np.concatenate(v) for r, v in seen.items()}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_coalition_view_of_sign_under_abort_does_not_depend_on_honest_terms(variant: str) -> None:
    """Honest terms of opposite signs (every decision flips): the coalition's view, round by round, has the
    same distribution (chi-square on the low bits of every element received, false-failure rate 1e-3 per
    round)."""
    va, vb = coalition_views(1.0, variant=variant), coalition_views(-1.0, variant=variant)
    assert va.keys() == vb.keys() and len(va) == rounds_of(variant) - 1
    for rnd in va:
        table = np.stack([np.bincount(va[rnd], minlength=16), np.bincount(vb[rnd], minlength=16)])
        table = table[:, table.sum(axis=0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, rnd


def test_pooled_roots_of_the_other_sign_to_one_peer_are_caught() -> None:
    """pooled: the root computer sends -v (also a valid inverse root: u v^2 = 1 holds) to one peer and v to
    the others, so that peer's bits of that chunk would be complemented, and its share of the masked term
    with them (a rushing holder could make that opening pass and read the chunk's mask from the peer's
    share, as an independent review showed). Roots travel in one canonical form (below 2^126), so the peer
    that gets -v aborts on arrival (round 3) and every honest party aborts before the masked term."""
    m, seed = 3, "pooled-sign-flip"
    vals, pub = terms(m, N, seed=3)
    params = make_session(m, seed=seed)[0]
    lo, hi = dict(enumerate(root_chunks(params.fmt.compare_bits * N, m), start=1))[1]

    def flip(rnd: int, src: int, dst: int, payload: Payload, prev: Prev) -> Payload:
        if rnd != 3 or dst != 2:
            return payload
        arr = payload.reshape(-1, 2).copy()
        arr[-(hi - lo) :] = F.neg(arr[-(hi - lo) :])  # party 1's roots, packed last
        return arr.reshape(-1)

    outcome, decided = run_with_receiver(sign_machines(m, seed, vals, pub, variant="pooled"), {1}, flip, N)
    assert isinstance(decided, AbortError)
    assert all(isinstance(outcome[p], AbortError) and outcome[p].round <= 5 for p in (2, 3)), outcome
    assert outcome[2].what == "roots broadcast", outcome[2]


@pytest.mark.parametrize(
    ("m", "variant"),
    [
        (3, "inline"),
        (5, "inline"),
        (3, "blocks4"),
        (3, "lazy"),
        (3, "pooled"),
        (4, "pooled"),
        (3, "inline-ahead"),
        (4, "pooled-ahead"),
    ],
)
def test_a_shifted_square_is_caught_before_anything_is_masked_by_its_bit(m: int, variant: str) -> None:
    """The additive attack on a mask bit's square: party 1 reshares its part of s_0^2 (decision 0, bit 0) as
    a consistent degree-t sharing shifted by c (its sub-share to party j moved by c (j - 1), its own
    untouched), so every party opens u_0 = s_0^2 + w c for a weight w != 0 that party 1 knows. A u_0 that is
    not a square aborts when its root is taken; one that is a square would make b_0 one of two field elements
    party 1 can compute (s_0^2 = u_0 - w c), and a c opened over it would give away the low bits of S (found
    by an independent review, 2026-11-30: docs/SECURITY_ABORT.md). The check before the masked terms
    (rounds 4-5) catches it before they are opened (round 6): every honest party aborts in a round <= 5 for
    every c, both ways occur over c = 1..24, and the receiver gets no decision."""
    seed = f"shifted-square-{m}-{variant}"
    vals, pub = terms(m, N, seed=3)
    params = make_session(m, seed=seed)[0]
    coin = VARIANTS[variant][1]
    nrows = params.fmt.compare_bits + (coin.bits if coin is not None else 0)
    dealt = 0 if VARIANTS[variant][2] else (2 * term_bits(params) + 2) * N  # made ahead: no terms in round 1
    first_square = dealt + nrows * N  # after the dealt bits and the r s reshares
    where: dict[str, int] = defaultdict(int)
    for c in range(1, 25):
        machines = sign_machines(m, seed, vals, pub, variant=variant)
        outcome, decided = run_with_receiver(machines, {1}, consistent_shift(first_square, c), N)
        assert isinstance(decided, AbortError), c
        honest_ones = [outcome[p] for p in range(2, m + 1)]
        assert all(isinstance(o, AbortError) and o.round <= 5 for o in honest_ones), (c, outcome)
        caught = any(o.what == "check before the masked terms" for o in honest_ones)
        where["check" if caught else "not a square"] += 1
    assert set(where) == {"not a square", "check"}, where


@pytest.mark.parametrize("variant", ["inline", "pooled", "inline-ahead"])
def test_a_mac_error_covered_for_guessed_signs_is_caught_before_the_masked_terms(variant: str) -> None:
    """The second review's attack on the first form of the check (2026-11-30): party 1 puts an error into its
    reshare of r s_0 (round 1); rushing, it knows u_i = s_i^2 in round 2 and shifts its reshares of the MACs
    that used r s_0, the square's (r s_0) s_0 and the pair's (r s_0) s_1, by the error times guesses of s_0
    and s_1 (roots of u_0, u_1), so that those pairs are consistent exactly when the guesses are right. A
    check whose outcome depended on that would pass for one guess in four and tell party 1 the signs, hence
    the mask bits and, from the masked terms, bits of S. The check before the masked terms covers the pair
    (s_0, r s_0) itself, whose error depends on no secret: for every guess every honest party aborts before
    round 6 (with that pair left out of the check, the right guess passes it: checked by mutation)."""
    m, cc, seed, step = 3, 5, f"mac-guess-{variant}", 7
    vals, pub = terms(m, N, seed=3)
    params, ctxs, _ = make_session(m, seed=seed)
    nrows = params.fmt.compare_bits
    drawn = {p: ctxs[p].prss.random(abort_sign.P_SIGN_S, step, (nrows, N)) for p in ctxs}
    s0 = recombine({p: d[0, 0] for p, d in drawn.items()}, params.t)  # known up to sign once u is opened
    s1 = recombine({p: d[1, 0] for p, d in drawn.items()}, params.t)
    rs_0 = 0 if VARIANTS[variant][2] else (2 * term_bits(params) + 2) * N  # round 1: (dealt bits,) r s
    pair_0 = nrows * N  # party 1's round-2 message: (r s) s, then the pairs' MACs (r s_0) s_1 first
    for g0, g1 in [(s0, s1), (F.neg(s0), s1), (s0, F.neg(s1)), (F.neg(s0), F.neg(s1))]:

        def attack(
            rnd: int, src: int, dst: int, payload: Payload, prev: Prev, g0: Any = g0, g1: Any = g1
        ) -> Payload:
            if rnd not in (1, 2) or dst == RECEIVER:
                return payload
            arr, j = payload.reshape(-1, 2).copy(), F.const(dst - 1)
            if rnd == 1:
                arr[rs_0] = F.add(arr[rs_0], F.mul(F.const(cc), j))
            else:
                arr[0] = F.sub(arr[0], F.mul(F.mul(F.const(cc), g0), j))
                arr[pair_0] = F.sub(arr[pair_0], F.mul(F.mul(F.const(cc), g1), j))
            return arr.reshape(-1)

        outcome, decided = run_with_receiver(sign_machines(m, seed, vals, pub, step, variant), {1}, attack, N)
        assert isinstance(decided, AbortError)
        for p in range(2, m + 1):
            assert isinstance(outcome[p], AbortError) and outcome[p].round <= 5, (variant, outcome[p])


def test_the_pad_of_the_check_before_the_masked_terms_is_checked_by_it() -> None:
    """The check before the masked terms opens beta T - e w when r beta carries an error e, w the coin
    combination of every pair it checks; a pad (rho, r rho) of a fresh PRSS rho among them makes w uniform
    (AuthParty.check_upto). That only holds if the pad is tracked before the check's seed: an error in the
    pad's MAC reshare (round 1) must make every honest party abort at that check (round 5), before c."""
    m, seed = 3, "pad-checked"
    vals, pub = terms(m, N, seed=3)
    params = make_session(m, seed=seed)[0]
    kbits = params.fmt.compare_bits
    # party 1's round-1 message: dealt bits, then r s, s^2, the pairs, r r_hi, r beta, r rho
    r_pad = (2 * term_bits(params) + 2) * N + 2 * kbits * N + (kbits // 2) * N + N + 1

    machines = sign_machines(m, seed, vals, pub)
    outcome, decided = run_with_receiver(machines, {1}, consistent_shift(r_pad, 7), N)
    assert isinstance(decided, AbortError)
    for p in (2, 3):
        assert isinstance(outcome[p], AbortError), outcome[p]
        assert (outcome[p].round, outcome[p].what) == (5, "check before the masked terms"), outcome[p]


@pytest.mark.parametrize("m", [3, 4])
def test_pooled_wrong_roots_broadcast_alike_to_everyone_are_caught_on_arrival(
    m: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pooled: party 1 computes the roots of its chunk as 2 / sqrt(u) and broadcasts them to every party
    alike (and uses them itself), so the bits of its chunk would be (1 + 2 s / sqrt(u)) / 2, not bits. Every
    party holds u (opened to all) and checks every broadcast root: u v^2 = 4 != 1, so every honest party
    aborts when the roots arrive (round 3), before anything is masked by them; the receiver gets nothing."""
    real = AuthParty.inverse_roots

    def doubled(self: AuthParty, u: F.FieldArray) -> F.FieldArray:
        v = real(self, u)
        return F.mul(v, F.const(2)) if self.ctx.party == 1 else v

    monkeypatch.setattr(AuthParty, "inverse_roots", doubled)
    vals, pub = terms(m, N, seed=3)
    outcome, decided = run_with_receiver(
        sign_machines(m, f"pooled-doubled-{m}", vals, pub, variant="pooled"), set(), honest, N
    )
    assert isinstance(decided, AbortError)
    for p in range(2, m + 1):
        assert isinstance(outcome[p], AbortError) and outcome[p].what == "roots broadcast", outcome[p]
        assert outcome[p].round == 3


@pytest.mark.parametrize("m", [3, 5])
def test_key_setup_check_catches_a_dealer_giving_different_prss_keys(m: int) -> None:
    """security 'abort' adds one round to the key setup: the holders of each PRSS key compare its hash. A
    dealer that sends another key to one holder than to the others: every honest party that compares with
    that holder aborts (round 2), and the honest run gives the keys of the plain key setup."""
    from hss.authenticated import key_setup_checked
    from hss.session import SessionParams, key_setup
    from tests.hss.conftest import fixed_rng

    params = SessionParams(m=m, t=(m - 1) // 2, session_id=b"key-check-session")
    plain, _ = run_in_memory({p: key_setup(params, p, fixed_rng(f"k{p}")) for p in range(1, m + 1)})
    parties = range(1, m + 1)
    checked, tr = run_in_memory({p: key_setup_checked(params, p, fixed_rng(f"k{p}")) for p in parties})
    assert tr.rounds == 2 and all(checked[p] == plain[p] for p in plain)

    def other_key_to_the_last(rnd: int, src: int, dst: int, payload: Payload, prev: Prev) -> Payload:
        if rnd == 1 and dst == m:  # party 1 deals: its first key to party m is replaced
            out = payload.copy()
            out[0] ^= np.uint64(1)
            return out
        return payload

    outcome = run_adversarial_setup(params, {1}, other_key_to_the_last)
    assert isinstance(outcome[m], AbortError) and outcome[m].what == "key setup check"
    # m = 5: the altered key has two honest holders, who catch it between them too; m = 3: its only other
    # holder is the dealer
    assert sum(isinstance(outcome[p], AbortError) for p in range(2, m)) >= (1 if m == 5 else 0)


def run_adversarial_setup(params: Any, corrupt: set[int], tamper: Tamper) -> dict[int, Any]:
    from hss.authenticated import key_setup_checked
    from tests.hss.conftest import fixed_rng
    from tests.hss.test_authenticated import run_adversarial

    machines = {p: key_setup_checked(params, p, fixed_rng(f"k{p}")) for p in range(1, params.m + 1)}
    return run_adversarial(machines, corrupt, tamper)
