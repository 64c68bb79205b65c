"""Security with abort (hss.authenticated): honest runs are correct, and a deviating party is caught.

The tampering harness runs the party machines round by round like ``run_in_memory`` but lets the corrupt
parties' outgoing messages be altered (an additive error on one field element, a replaced payload, a
dropped, duplicated or replayed message, different errors to different peers, a word that is not a
reduced field element) and lets each honest party
abort on its own. The property checked for every case: each honest party either raises AbortError or
outputs the correct values (the honest inputs, products consistent with the opened inputs, bits that are
bits), and the honest parties that output agree.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from hss import field as F
from hss import primitives as prim
from hss.authenticated import AbortError, Auth, AuthParty, add, mul_public, receive_checked, sub
from hss.runtime import RECEIVER, Inbox, Machine, PartyGen, Payload, run_in_memory
from tests.hss.conftest import make_session

N = 3  # values per party in the tampering runs


def composite(
    ap: AuthParty, own: F.FieldArray, n: int
) -> PartyGen[dict[str, list[F.FieldArray]]]:
    """Inputs, products, random bits, a depth-2 product after linear ops, verify, open: 10 rounds."""
    m = ap.ctx.params.m
    xs = yield from ap.share_inputs(own, {j: (n,) for j in range(1, m + 1)})
    x = [xs[j] for j in range(1, m + 1)]
    prods = yield from ap.multiply([(x[j], x[(j + 1) % m]) for j in range(m)])
    bits = yield from ap.random_bits(n)
    lin = add(sub(mul_public(prods[0], 3), x[1]), ap.add_public(bits, 5))  # 3 x1 x2 - x2 + b + 5
    deep = yield from ap.multiply([(bits, x[0]), (lin, bits)])
    yield from ap.verify()
    opened = yield from ap.open([*x, *prods, bits, lin, *deep])
    return {"x": opened[:m], "prods": opened[m : 2 * m], "rest": opened[2 * m :]}


def ints(a: F.FieldArray) -> list[int]:
    return F.to_ints(a)


def check_outputs(
    out: dict[str, list[F.FieldArray]], inputs: dict[int, list[int]], corrupt: set[int]
) -> None:
    """The oracle: honest inputs open to themselves, every product and bit agrees with the opened inputs."""
    p = F.P
    m = len(out["x"])
    xs = [ints(a) for a in out["x"]]
    for j in range(1, m + 1):
        if j not in corrupt:
            assert xs[j - 1] == [v % p for v in inputs[j]], f"honest input {j} changed"
    for j in range(m):
        assert ints(out["prods"][j]) == [a * b % p for a, b in zip(xs[j], xs[(j + 1) % m], strict=True)]
    bits, lin, bx, lb = (ints(a) for a in out["rest"])
    assert set(bits) <= {0, 1}
    prod0 = ints(out["prods"][0])
    assert lin == [(3 * a - b + c + 5) % p for a, b, c in zip(prod0, xs[1], bits, strict=True)]
    assert bx == [b * a % p for b, a in zip(bits, xs[0], strict=True)]
    assert lb == [a * b % p for a, b in zip(lin, bits, strict=True)]


Prev = dict[tuple[int, int], Payload]
Tamper = Callable[[int, int, int, Payload, Prev], Payload | None]


def run_rounds(
    machines: dict[int, Machine[Any]], corrupt: set[int], tamper: Tamper
) -> tuple[dict[int, Any], Inbox]:
    """Run the machines round by round, the corrupt parties' messages rewritten by ``tamper`` (None: dropped):
    each party's result or AbortError, and the last messages each party sent to the receiver."""
    outcome: dict[int, Any] = {}
    outboxes = {p: mc.start() for p, mc in machines.items()}
    previous: dict[tuple[int, int], Payload] = {}
    live, rnd = set(machines), 0
    to_receiver: Inbox = {}
    while live or any(outboxes.values()):
        rnd += 1
        assert rnd < 100, "no termination"
        inboxes: dict[int, Inbox] = {p: {} for p in machines}
        sent: dict[tuple[int, int], Payload] = {}
        for src, box in outboxes.items():
            for dst, payload in box.items():
                sent[(src, dst)] = payload
                out = tamper(rnd, src, dst, payload, previous) if src in corrupt else payload
                if out is None:
                    continue
                if dst == RECEIVER:
                    to_receiver[src] = out
                else:
                    inboxes[dst][src] = out
        previous = sent
        outboxes = {}
        for p in sorted(live):
            try:
                outboxes[p] = machines[p].step(inboxes[p])
            except AbortError as exc:
                outcome[p] = exc
                live.discard(p)
                continue
            if machines[p].done:
                outcome[p] = machines[p].result
                live.discard(p)
    return outcome, to_receiver


def run_adversarial(
    machines: dict[int, Machine[Any]], corrupt: set[int], tamper: Tamper
) -> dict[int, Any]:
    """Each party's result or AbortError; ``tamper(rnd, src, dst, payload, previous)`` rewrites (None:
    drops) each message a corrupt party sends; ``previous`` holds each link's payload of the round before."""
    return run_rounds(machines, corrupt, tamper)[0]


def setup(m: int, seed: str, n: int = N) -> tuple[dict[int, Machine[Any]], dict[int, list[int]]]:
    _params, ctxs, rngs = make_session(m, seed=seed)
    gen = np.random.default_rng(7)
    inputs = {p: [int(v) for v in gen.integers(-(10**6), 10**6, n)] for p in ctxs}
    machines: dict[int, Machine[Any]] = {
        p: Machine(p, composite(AuthParty(c, rngs[p], step=3), F.from_ints(inputs[p]), n), "composite")
        for p, c in ctxs.items()
    }
    return machines, inputs


def honest_outcome(outcome: dict[int, Any], corrupt: set[int], inputs: dict[int, list[int]]) -> int:
    """Check the property for every honest party; return how many aborted."""
    results = [outcome[p] for p in outcome if p not in corrupt]
    finished = [r for r in results if not isinstance(r, AbortError)]
    for r in finished:
        check_outputs(r, inputs, corrupt)
        assert all(ints(a) == ints(b) for k in r for a, b in zip(r[k], finished[0][k], strict=True))
    return len(results) - len(finished)


def honest(rnd: int, src: int, dst: int, payload: Payload, prev: Prev) -> Payload:
    return payload


@pytest.mark.parametrize("m", [3, 4, 5, 7])
def test_honest_runs_give_correct_products_and_bits(m: int) -> None:
    machines, inputs = setup(m, f"honest-{m}", n=40)
    outcome = run_adversarial(machines, set(), honest)
    assert honest_outcome(outcome, set(), inputs) == 0
    assert all(mc.rounds == 10 for mc in machines.values())
    bits = ints(outcome[1]["rest"][0])
    assert 0 < sum(bits) < 40  # both values occur (fails with probability 2^-39)


def test_run_in_memory_counts_and_matches() -> None:
    machines, inputs = setup(3, "memory", n=5)
    res, tr = run_in_memory(machines)
    check_outputs(res[1], inputs, set())
    assert tr.rounds == 10 and tr.messages == 10 * 3 * 2


def element_count(m: int, seed: str) -> dict[int, int]:
    """Field elements per message from party 1 to party 2, by round (honest run)."""
    machines, _ = setup(m, seed)
    _, tr = run_in_memory(machines, keep_log=True)
    return {rnd: pl.size // 2 for rnd, src, dst, pl in tr.log if src == 1 and dst == 2}


def make_tamper(kind: str, target_round: int, target_dst: int, index: int = 0) -> Tamper:
    gen = np.random.default_rng(target_round * 1000 + index)

    def tamper(rnd: int, src: int, dst: int, payload: Payload, prev: Prev) -> Payload | None:
        if rnd != target_round:
            return payload
        arr = payload.reshape(-1, 2).copy()
        if kind == "additive" and dst == target_dst:
            arr[index] = F.add(arr[index], F.const(1 + index))
        elif kind == "inconsistent":  # a different error to every peer
            arr[index] = F.add(arr[index], F.const(1 << (5 * dst)))
        elif kind == "replace" and dst == target_dst:
            arr = F.from_random_bytes(gen.bytes(16 * arr.shape[0]), arr.shape[0])
        elif kind == "noncanonical" and dst == target_dst:  # 2^128 - 1: not a reduced field element
            arr[index] = np.uint64(2**64 - 1)
        elif kind == "drop" and dst == target_dst:
            return None
        elif kind == "duplicate" and dst == target_dst:
            return np.concatenate([payload, payload])
        elif kind == "replay" and dst == target_dst:
            return prev.get((src, dst), payload[:0])
        return arr.reshape(-1)

    return tamper


def consistent_shift(at: int, c: int, rnd: int = 1) -> Tamper:
    """The corrupt party's GRR sub-share at position ``at`` of round ``rnd`` moved by c (j - 1) for party j:
    a consistent degree-t sharing (its own sub-share, at x = 1, untouched) of its value shifted by a weight
    times c, the additive attack a reshare allows."""

    def tamper(r: int, src: int, dst: int, payload: Payload, prev: Prev) -> Payload:
        if r != rnd or dst == RECEIVER:
            return payload
        arr = payload.reshape(-1, 2).copy()
        arr[at] = F.add(arr[at], F.const(c * (dst - 1)))
        return arr.reshape(-1)

    return tamper


def cases(m: int, seed: str, every_index: bool) -> list[tuple[str, int, int]]:
    counts = element_count(m, seed)
    out = []
    for rnd, k in sorted(counts.items()):
        indexes = range(k) if every_index else sorted({0, k // 2, k - 1})
        out += [("additive", rnd, i) for i in indexes]
        out += [("inconsistent", rnd, 0), ("replace", rnd, 0), ("drop", rnd, 0)]
        out += [("duplicate", rnd, 0), ("replay", rnd, 0), ("noncanonical", rnd, 0)]
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("m", "every_index"), [(3, True), (4, False), (5, False), (7, False)])
def test_every_tampered_message_aborts_or_yields_the_correct_output(m: int, every_index: bool) -> None:
    corrupt = {1}
    seed = f"tamper-{m}"
    tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for kind, rnd, index in cases(m, seed, every_index):
        machines, inputs = setup(m, seed)
        outcome = run_adversarial(machines, corrupt, make_tamper(kind, rnd, 2, index))
        aborted = honest_outcome(outcome, corrupt, inputs)
        tally[kind][0 if aborted else 1] += 1
        if rnd > 1:  # after the input round every alteration changes something checked
            assert aborted, (kind, rnd, index)
    # the only undetected changes are the corrupt party's own input shares (its choice of input), at odd m
    assert sum(v[1] for v in tally.values()) <= (0 if m % 2 == 0 else N + 2)


def test_a_tampered_reshare_is_caught_by_the_mac_check() -> None:
    """An additive error on one GRR reshare of the first multiplication round: every honest party computes
    on, and the check of verify (round 9 of 10, the CheckZero opening) aborts."""
    for m in (3, 5):
        machines, _inputs = setup(m, f"reshare-{m}")
        outcome = run_adversarial(machines, {1}, make_tamper("additive", 3, 2, index=0))
        for p in range(2, m + 1):
            err = outcome[p]
            assert isinstance(err, AbortError)
            assert (err.round, err.what) == (9, "verify"), err
            assert "MAC check" in str(err) and "step 3" in str(err)


def test_two_corrupt_parties_at_m5_are_caught() -> None:
    machines, inputs = setup(5, "two")
    t1 = make_tamper("additive", 3, 3, 1)
    t2 = make_tamper("inconsistent", 6, 4, 0)

    def both(rnd: int, src: int, dst: int, pl: Payload, prev: Prev) -> Payload | None:
        return (t1 if src == 1 else t2)(rnd, src, dst, pl, prev)

    outcome = run_adversarial(machines, {1, 2}, both)
    assert honest_outcome(outcome, {1, 2}, inputs) == 3


def test_verify_refuses_reuse_and_open_needs_verify() -> None:
    _params, ctxs, rngs = make_session(3, seed="reuse")
    aps = {p: AuthParty(c, rngs[p], step=1) for p, c in ctxs.items()}
    with pytest.raises(ValueError, match="after verify"):
        next(aps[1].open([aps[1].constant(F.from_ints([1]))]))
    run_in_memory({p: Machine(p, ap.verify()) for p, ap in aps.items()})
    assert all(ap.verified for ap in aps.values())
    with pytest.raises(ValueError, match="closed"):
        next(aps[1].multiply([]))
    with pytest.raises(ValueError, match="closed"):  # the public round: openings only, after verify
        next(aps[1].round("late product", grrs=[F.from_ints([1])]))
    assert isinstance(next(aps[1].round("late opening", opens=[F.from_ints([1])])), dict)


def test_a_check_keeping_the_key_covers_its_pad_or_refuses_to_run() -> None:
    """AuthParty.check_upto with the pad (AuthParty.arm) inside its checkpoint passes on honest values; a
    checkpoint taken before the pad was tracked is refused: a failing check would open beta T - e w with w
    not masked by the pad (SECURITY_ABORT.md, "Known limits")."""
    _params, ctxs, rngs = make_session(3, seed="pad")

    def party(ap: AuthParty, early: bool) -> PartyGen[bool]:
        check = ap.kept_key_check(299)
        x = ap.draw((4,))
        grrs = [*check.reshares(ap.key), F.mul(ap.key, x)]
        _, (r_beta, r_pad, rx), _ = yield from ap.round("reshares", grrs=grrs)
        ap.track([Auth(x, rx)])
        before = ap.checkpoint()
        armed = ap.arm(check, r_beta, r_pad)
        _, _, (seed,) = yield from ap.round("coin", opens=[check.seed_share])
        yield from ap.check_upto(armed, seed, before if early else ap.checkpoint(), "pad test")
        return True

    aps = {p: AuthParty(c, rngs[p], step=1) for p, c in ctxs.items()}
    done, _ = run_in_memory({p: Machine(p, party(ap, early=False)) for p, ap in aps.items()})
    assert done == {1: True, 2: True, 3: True}
    aps = {p: AuthParty(c, rngs[p], step=2) for p, c in ctxs.items()}
    with pytest.raises(ValueError, match="before the check's pad was tracked"):
        run_in_memory({p: Machine(p, party(ap, early=True)) for p, ap in aps.items()})


# -- views: what a coalition receives does not depend on the honest parties' secrets ------------------------


def low_bits(words: Payload) -> npt.NDArray[np.int64]:
    return (words[0::2] & np.uint64(15)).astype(np.int64)


def coalition_views(secret: int, n: int = 2000) -> dict[int, npt.NDArray[np.int64]]:
    m, coalition = 5, {1, 2}
    _params, ctxs, rngs = make_session(m, seed=f"views-{secret}")

    def proto(ap: AuthParty, own: F.FieldArray) -> PartyGen[None]:
        xs = yield from ap.share_inputs(own, {j: (n,) for j in range(1, m + 1)})
        prods = yield from ap.multiply([(xs[3], xs[4]), (xs[5], xs[1])])
        yield from ap.random_bits(n)
        yield from ap.multiply([(prods[0], xs[5])])
        yield from ap.verify()

    gen = np.random.default_rng(5)
    machines = {
        p: Machine(
            p,
            proto(
                AuthParty(c, rngs[p], 1),
                F.from_int64(np.full(n, -3) if p in coalition else gen.integers(secret, secret + 4, n)),
            ),
        )
        for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines, keep_log=True)
    seen: dict[int, list[npt.NDArray[np.int64]]] = defaultdict(list)
    for rnd, src, dst, payload in tr.log:
        if dst == 1 and src not in coalition:
            seen[rnd].append(low_bits(payload))
    return {r: np.concatenate(v) for r, v in seen.items()}


@pytest.mark.slow
def test_coalition_view_does_not_depend_on_honest_inputs() -> None:
    va, vb = coalition_views(0), coalition_views(10**9)
    assert va.keys() == vb.keys()
    for rnd in va:
        table = np.stack([np.bincount(va[rnd], minlength=16), np.bincount(vb[rnd], minlength=16)])
        table = table[:, table.sum(axis=0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, rnd


def test_semi_honest_multiply_is_still_one_round() -> None:
    """The baseline the benchmark compares with: GRR multiplication, 1 round, m(m-1) messages."""
    _params, ctxs, rngs = make_session(3, seed="base")
    x = {p: F.from_ints([p]) for p in ctxs}
    _, tr = run_in_memory({p: prim.multiply(c, x[p], x[p], rngs[p]) for p, c in ctxs.items()})
    assert (tr.rounds, tr.messages) == (1, 6)



def test_even_m_inconsistent_input_is_caught_by_the_degree_test() -> None:
    """m = 4, t = 1: party 1 deals shares of its input that are not on one line (its share to party 2 is
    shifted) and only the products x1 x2 and x1 x3 are opened. Without verify's degree test the two products
    would imply two different x1 (x1 x2 / x2 != x1 x3 / x3); with it every honest party aborts in verify's
    second round. (Here the MAC check of round 6 also fails without it; the degree test is what the soundness
    argument for even m rests on.)"""
    m, n = 4, N
    _params, ctxs, rngs = make_session(m, seed="even")
    inputs = {p: F.from_ints([10 * p + i for i in range(n)]) for p in ctxs}

    def proto(ap: AuthParty, own: F.FieldArray) -> PartyGen[list[F.FieldArray]]:
        xs = yield from ap.share_inputs(own, {j: (n,) for j in range(1, m + 1)})
        prods = yield from ap.multiply([(xs[1], xs[2]), (xs[1], xs[3])])
        yield from ap.verify()
        return (yield from ap.open(prods))

    machines: dict[int, Machine[Any]] = {
        p: Machine(p, proto(AuthParty(c, rngs[p], 1), inputs[p])) for p, c in ctxs.items()
    }
    outcome = run_adversarial(machines, {1}, make_tamper("additive", 1, 2, 0))
    for p in (2, 3, 4):
        assert isinstance(outcome[p], AbortError), outcome[p]
        assert outcome[p].round == 5 and "polynomial of degree t" in str(outcome[p])


def test_a_non_canonical_word_is_refused_on_receipt() -> None:
    """The C kernels assume reduced operands: a word pair >= p is refused in the round it arrives."""
    machines, _inputs = setup(3, "noncanonical")
    outcome = run_adversarial(machines, {1}, make_tamper("noncanonical", 3, 2, 1))
    err = outcome[2]
    assert isinstance(err, AbortError) and err.round == 3 and "non-canonical" in err.reason


def test_t_colluders_cannot_shift_an_opening_together() -> None:
    """m = 7, t = 3: parties 1, 2, 3 shift their shares of the final opening by g(j), a degree-t polynomial
    that vanishes on t of the 4 honest parties, to every recipient: the shares then agree with a shifted
    polynomial everywhere but at the fourth honest party, so every honest party sees m shares on no degree-t
    polynomial and aborts in round 10."""
    m, corrupt = 7, {1, 2, 3}
    machines, _inputs = setup(m, "collude")

    def g(j: int) -> int:
        return 12345 * (j - 4) * (j - 5) * (j - 6)

    def shift(rnd: int, src: int, dst: int, pl: Payload, prev: Prev) -> Payload | None:
        if rnd != 10:
            return pl
        arr = pl.reshape(-1, 2)
        return F.add(arr, F.const(g(src))).reshape(-1)

    outcome = run_adversarial(machines, corrupt, shift)
    for p in range(4, m + 1):
        assert isinstance(outcome[p], AbortError) and outcome[p].round == 10, outcome[p]


def test_an_opening_to_all_can_abort_selectively() -> None:
    """What docs/SECURITY_ABORT.md states: a bad share in the final opening sent to party 2 only makes party 2
    abort while the other honest parties output the correct values (security with selective abort)."""
    machines, inputs = setup(5, "selective")
    outcome = run_adversarial(machines, {1}, make_tamper("additive", 10, 2, 0))
    assert isinstance(outcome[2], AbortError) and outcome[2].round == 10
    assert honest_outcome(outcome, {1}, inputs) == 1


def test_outputs_to_the_receiver_are_checked() -> None:
    """open_to_receiver / receive_checked: the receiver gets the products, and aborts on a shifted, missing or
    non-canonical share (it needs all m shares on one degree-t polynomial)."""
    m, n = 5, 4
    params, ctxs, rngs = make_session(m, seed="receiver")
    vals = {p: F.from_ints([p * 100 + i for i in range(n)]) for p in ctxs}

    def proto(ap: AuthParty) -> PartyGen[None]:
        own = vals[ap.ctx.party] if ap.ctx.party in (1, 2) else None
        xs = yield from ap.share_inputs(own, {1: (n,), 2: (n,)})
        (prod,) = yield from ap.multiply([(xs[1], xs[2])])
        yield from ap.verify()
        yield from ap.open_to_receiver([prod, xs[1]])

    def run(tamper: Callable[[int, int, int, Payload], Payload] | None = None) -> Inbox:
        machines = {p: Machine(p, proto(AuthParty(c, rngs[p], 4))) for p, c in ctxs.items()}
        _, tr = run_in_memory(machines, tamper=tamper)
        assert tr.rounds == 7
        return tr.to_receiver[-1]

    prod, x1 = receive_checked(params, run(), [(n,), (n,)], step=4, rnd=7)
    assert ints(prod) == [(100 + i) * (200 + i) for i in range(n)] and ints(x1) == [100 + i for i in range(n)]

    def shifted(rnd: int, src: int, dst: int, pl: Payload) -> Payload:
        if dst == RECEIVER and src == 3:
            return F.add(pl.reshape(-1, 2), F.const(1)).reshape(-1)
        return pl

    with pytest.raises(AbortError, match=re.escape("round 7 (receiver: outputs): shares do not lie")):
        receive_checked(params, run(shifted), [(n,), (n,)], step=4, rnd=7)
    inbox = run()
    del inbox[2]
    with pytest.raises(AbortError, match=re.escape("1 message(s) missing")):
        receive_checked(params, inbox, [(n,), (n,)], step=4, rnd=7)
    inbox = run()
    inbox[2] = inbox[2].copy()
    inbox[2][1] = np.uint64(2**64 - 1)
    with pytest.raises(AbortError, match="non-canonical"):
        receive_checked(params, inbox, [(n,), (n,)], step=4, rnd=7)
