"""``blinded`` under security with abort (hss.abort_blinded): the semi-honest release when honest, abort or
the correct release when not.

Honest runs reveal bit for bit what the semi-honest mode reveals for the same terms, blinding shares and E
draws; every alteration of a corrupt party's messages (the tamper kinds of tests.hss.test_authenticated, in
every round, the receiver's messages included) ends in AbortError at the receiver or in exactly the honest
run's release; a party dealing inputs out of range (a W_j made negative, an e_j too wide, a term bit that is
not a bit) is caught by its proof that they are bits; the coalition's view does not depend on the honest
inputs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from hss import abort_blinded, abort_modes
from hss import field as F
from hss.abort_blinded import (
    BLINDED_ABORT_ROUNDS,
    blinded_bit_widths,
    blinded_party_abort,
    blinded_receiver_abort,
)
from hss.authenticated import AbortError
from hss.modes import TermsBatch, reveal_mode
from hss.protocols import Decisions, blinded_party, blinded_receiver, plaintext_decisions
from hss.runtime import RECEIVER, Machine, Payload, run_in_memory
from hss.session import SessionParams
from tests.hss.conftest import fixed_rng, make_session
from tests.hss.test_abort_modes import run_with_receiver
from tests.hss.test_authenticated import Prev, Tamper, honest, make_tamper

N = 4  # decisions per tampered batch
ROUNDS = 7


def inputs(
    m: int, n: int, seed: int
) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.float64], list[npt.NDArray[np.float64]]]:
    """Terms, public terms and blinding shares W_j ~ Gamma(1/m, 1) (public test data)."""
    gen = np.random.default_rng(seed)
    vals = [gen.normal(0.0, 2.0, n) for _ in range(m)]
    pub = gen.normal(0.0, 1.0, n)
    blind = [gen.gamma(1.0 / m, 1.0, n) for _ in range(m)]
    return vals, pub, blind


def machines_abort(
    m: int, seed: str, vals: list[Any], pub: Any, blind: list[Any], step: int = 7
) -> dict[int, Machine[Any]]:
    _params, ctxs, rngs = make_session(m, seed=seed)
    return {
        p: blinded_party_abort(c, vals[p - 1], pub, step, rngs[p], blind[p - 1], fixed_rng(f"{seed}/E{p}"))
        for p, c in ctxs.items()
    }


def semi_honest(m: int, seed: str, vals: list[Any], pub: Any, blind: list[Any]) -> Decisions:
    """The semi-honest mode's release for the same inputs and E streams (another session: its own shares)."""
    params, ctxs, rngs = make_session(m, seed=f"{seed}/semi-honest")
    machines = {
        p: blinded_party(c, vals[p - 1], pub, 2, rngs[p], blind[p - 1], fixed_rng(f"{seed}/E{p}"))
        for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines)
    return blinded_receiver(params, tr.to_receiver[-1], len(pub))


@pytest.mark.parametrize("m", [3, 4, 5, 7])
def test_honest_blinded_under_abort_reveals_the_semi_honest_value_bit_for_bit(m: int) -> None:
    n = 60
    vals, pub, blind = inputs(m, n, seed=m)
    vals[0][:4] = [1e6, -1e6, 131071.9, -131071.9]  # clamped and extreme terms
    vals[1][4] = -(sum(v[4] for i, v in enumerate(vals) if i != 1) + pub[4])  # S = 0 (to the resolution)
    blind[0][5], blind[1][6] = 1e3, 0.0  # a clamped blinding share (W_CLAMP) and a zero one
    seed = f"honest-{m}"
    params = make_session(m, seed=seed)[0]
    res, tr = run_in_memory(machines_abort(m, seed, vals, pub, blind, step=3))
    got = blinded_receiver_abort(params, tr.to_receiver[-1], n, 3)
    want = plaintext_decisions(vals, pub, params.fmt)
    assert np.array_equal(got.accept, want)
    assert 0.2 < want.mean() < 0.8
    semi = semi_honest(m, seed, vals, pub, blind)
    assert got.revealed is not None and semi.revealed is not None
    assert np.array_equal(got.revealed, semi.revealed)  # bit for bit
    assert np.array_equal(semi.accept, want)
    assert tr.rounds == BLINDED_ABORT_ROUNDS == ROUNDS
    assert res[1].clamped[:2].all() and not res[1].clamped[2:].any()


def test_the_mode_table_runs_blinded_under_abort() -> None:
    m, n = 3, 20
    vals, pub, blind = inputs(m, n, seed=5)
    params, ctxs, rngs = make_session(m, seed="table")
    entry = reveal_mode("blinded")
    assert entry.rounds(params, "inline", "abort") == ROUNDS
    machines = {
        p: entry.machine(
            c,
            TermsBatch(
                vals[p - 1],
                pub,
                4,
                rngs[p],
                blind=blind[p - 1],
                reveal_rng=fixed_rng(f"t/E{p}"),
                security="abort",
            ),
        )
        for p, c in ctxs.items()
    }
    assert machines[1].name == "decide[blinded, abort]"
    _, tr = run_in_memory(machines)
    got = entry.decode(params, tr.to_receiver[-1], n, 4, "abort")
    assert np.array_equal(got.accept, plaintext_decisions(vals, pub, params.fmt))
    with pytest.raises(ValueError, match="needs this party's blinding share"):
        entry.machine(ctxs[1], TermsBatch(vals[0], pub, 4, rngs[1], security="abort"))
    with pytest.raises(AbortError, match=r"abort at step 4, round 7 \(receiver: outputs\)"):
        entry.decode(params, {j: v for j, v in tr.to_receiver[-1].items() if j != 2}, n, 4, "abort")


def test_an_empty_batch_runs_its_rounds_and_decides_nothing() -> None:
    params, ctxs, rngs = make_session(3, seed="empty")
    empty = np.zeros(0)
    machines = {p: blinded_party_abort(c, empty, None, 1, rngs[p], empty) for p, c in ctxs.items()}
    _, tr = run_in_memory(machines)
    got = blinded_receiver_abort(params, tr.to_receiver[-1], 0, 1)
    assert tr.rounds == ROUNDS and got.accept.shape == (0,)


def test_refusals_name_what_is_wrong() -> None:
    _params, ctxs, rngs = make_session(2, t=0, seed="m2")
    with pytest.raises(ValueError, match="honest majority"):
        blinded_party_abort(ctxs[1], [0.0], None, 1, rngs[1], [1.0])
    _params, ctxs, rngs = make_session(3, seed="shape")
    with pytest.raises(ValueError, match="blinding shares have shape"):
        blinded_party_abort(ctxs[1], np.zeros(2), None, 1, rngs[1], np.ones(3))


def test_bit_widths_hold_every_honest_input() -> None:
    params: SessionParams = make_session(5, seed="w")[0]
    nb, nw, ne = blinded_bit_widths(params)
    assert (nb, nw, ne) == (38, 77, 57)
    w, _ = params.fmt.encode_blind([1e9, 63.999])
    assert max(F.to_ints(w)) < 2**nw
    bits = abort_blinded.field_bits(F.from_ints([2**nw - 1, 5, 2**64 + 3]), nw)
    assert [sum(b << i for i, b in enumerate(F.to_ints(bits[:, k]))) for k in range(3)] == [
        2**nw - 1,
        5,
        2**64 + 3,
    ]


def element_counts(m: int, seed: str) -> dict[int, int]:
    vals, pub, blind = inputs(m, N, seed=3)
    _, tr = run_in_memory(machines_abort(m, seed, vals, pub, blind), keep_log=True)
    return {rnd: payload.size // 2 for rnd, src, _dst, payload in tr.log if src == 1}


@pytest.mark.slow
@pytest.mark.parametrize("m", [3, 4, 5, 7])
def test_every_tampered_blinded_message_aborts_or_yields_the_honest_release(m: int) -> None:
    """Party 1 corrupt; each kind of alteration in each of the 7 rounds (an additive error at three positions
    of the message); the receiver's messages (round 7) are tampered too."""
    seed = f"tamper-blinded-{m}"
    vals, pub, blind = inputs(m, N, seed=3)
    _, tr = run_in_memory(machines_abort(m, seed, vals, pub, blind))
    clean = blinded_receiver_abort(make_session(m, seed=seed)[0], tr.to_receiver[-1], N, 7)
    assert np.array_equal(clean.accept, plaintext_decisions(vals, pub, make_session(m, seed=seed)[0].fmt))
    tally: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    counts = element_counts(m, seed)
    assert sorted(counts) == list(range(1, ROUNDS + 1))
    nb, nw, _ = blinded_bit_widths(make_session(m, seed=seed)[0])
    # round 1 carries (mask, N bits, N + 1 proof values) x N decisions: also hit a term, a W and an e bit
    bit_rows = [N * 1, N * (1 + nb) + 2, N * (1 + nb + nw) + 1]
    for rnd, k in sorted(counts.items()):
        dst = RECEIVER if rnd == ROUNDS else 2
        kinds = [("additive", i) for i in sorted({0, k // 2, k - 1, *(bit_rows if rnd == 1 else [])})]
        others = ("inconsistent", "replace", "drop", "duplicate", "replay", "noncanonical")
        kinds += [(kind, 0) for kind in others]
        for kind, index in kinds:
            outcome, decided = run_with_receiver(
                machines_abort(m, seed, vals, pub, blind),
                {1},
                make_tamper(kind, rnd, dst, index),
                N,
                receiver=blinded_receiver_abort,
            )
            if isinstance(decided, AbortError):
                tally[rnd][0] += 1
                continue
            assert np.array_equal(decided.accept, clean.accept), (kind, rnd, index)
            assert decided.revealed is not None and clean.revealed is not None
            assert np.array_equal(decided.revealed, clean.revealed), (kind, rnd, index)
            assert not any(isinstance(o, AbortError) for p, o in outcome.items() if p != 1)
            tally[rnd][1] += 1
    for rnd, (aborted, correct) in tally.items():  # all caught but what changes nothing the others use
        assert aborted >= 7, (rnd, aborted, correct)


def test_two_corrupt_parties_at_m5_are_caught_in_every_round() -> None:
    m, seed = 5, "two-corrupt-blinded"
    vals, pub, blind = inputs(m, N, seed=3)
    for rnd in range(1, ROUNDS + 1):
        first = make_tamper("additive", rnd, 3 if rnd < ROUNDS else RECEIVER, 0)
        second = make_tamper("inconsistent", rnd, 4, 0)

        def both(
            r: int, src: int, dst: int, payload: Payload, prev: Prev, a: Tamper = first, b: Tamper = second
        ) -> Payload | None:
            return a(r, src, dst, payload, prev) if src == 1 else b(r, src, dst, payload, prev)

        _, decided = run_with_receiver(
            machines_abort(m, seed, vals, pub, blind), {1, 2}, both, N, receiver=blinded_receiver_abort
        )
        assert isinstance(decided, AbortError), rnd


@pytest.mark.parametrize("n_bits", [1, 5, 173])
def test_the_bit_proof_holds_exactly_for_bits(n_bits: int) -> None:
    """The dealer's proof (f through the mask and the bits, q = f (f - 1) / V at N+1..2N+1) holds at random
    points when every value is a bit, and fails when one is not (a bit replaced by 2, p - 1 or 2^100)."""
    gen = np.random.default_rng(n_bits)
    n = 6
    bits = F.from_int64(gen.integers(0, 2, (n_bits, n)))
    mask = fixed_rng(f"mask-{n_bits}").field((n,))
    bad = bits.copy()
    bad[n_bits // 2, 1] = F.const(2)
    bad[n_bits - 1, 3] = F.const(F.P - 1)
    bad[0, 5] = F.const(1 << 100)
    for x in (10**30 + n_bits, F.P - 3, 2 * n_bits + 2):
        for values, holds in ((bits, [True] * n), (bad, [True, False, True, False, True, False])):
            dealt = np.concatenate([mask[None], values, abort_modes.bits_proof(values, mask)])[None]
            opened = abort_modes.proof_openings(dealt, x)  # the values as a degree-0 "sharing"
            assert abort_modes.proof_holds(opened, x, n_bits)[0].tolist() == holds, (x, n_bits)


def _skip_proofs(opened: F.FieldArray, x: int, n_bits: int, step: int, rnd: int) -> None:
    """A bit-proof check that checks nothing (the counterfactual: what the deviation would do unchecked)."""


@pytest.mark.parametrize("bad", ["negative W", "wide e", "term not a bit"])
@pytest.mark.parametrize("checked", [True, False])
def test_a_party_dealing_inputs_out_of_range_is_caught_by_its_proof(
    bad: str, checked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Party 1 deals a top 'bit' of W_1 worth -1 (p - 1: W_1 about -2^76, so W + w0 < 0 and every
    decision would flip), an e_1 with a 'bit' worth 2^110 (E would swamp the product) or a term bit worth 2,
    with the proof made honestly from these values: every honest party aborts at the proofs' check (round 3).
    Unchecked, nothing else catches it (verify passes) and the release would be wrong: the proof matters."""
    m, seed = 3, f"bad-{bad}"
    vals, pub, blind = inputs(m, N, seed=3)
    nb, nw, _ = blinded_bit_widths(make_session(m, seed=seed)[0])
    real = abort_blinded.dealt_bits
    calls = {"n": 0}

    def deviating(params: SessionParams, x: Any, w: F.FieldArray, e: F.FieldArray) -> F.FieldArray:
        calls["n"] += 1
        out = real(params, x, w, e)
        if calls["n"] == 1:  # party 1's machine is built first
            if bad == "negative W":
                out[nb + nw - 1] = F.const(F.P - 1)
            elif bad == "wide e":  # the lowest bit of e_1
                out[nb + nw] = F.const(1 << 110)
            else:
                out[0] = F.const(2)
        return out

    monkeypatch.setattr(abort_blinded, "dealt_bits", deviating)
    if not checked:
        monkeypatch.setattr(abort_blinded, "check_proofs", _skip_proofs)
    outcome, decided = run_with_receiver(
        machines_abort(m, seed, vals, pub, blind), set(), honest, N, receiver=blinded_receiver_abort
    )
    if checked:
        assert isinstance(decided, AbortError)
        for p in (1, 2, 3):
            assert isinstance(outcome[p], AbortError)
            assert outcome[p].what == "product and bit proofs" and outcome[p].round == 3
        return
    assert isinstance(decided, Decisions) and decided.revealed is not None
    want = plaintext_decisions(vals, pub, make_session(m, seed=seed)[0].fmt)
    if bad == "negative W":
        assert np.array_equal(decided.accept, ~want)  # every decision flipped
    elif bad == "wide e":
        assert np.all(decided.accept)  # E > 0 swamps the product: every decision an accept
    else:
        assert not np.array_equal(decided.revealed, semi_honest(m, seed, vals, pub, blind).revealed)


def low_bits(words: Payload) -> npt.NDArray[np.int64]:
    return (words[0::2] & np.uint64(15)).astype(np.int64)


def coalition_views(sign_of_honest: float, n: int = 150) -> dict[int, npt.NDArray[np.int64]]:
    """What party 1 of the coalition {1, 2} of m = 5 receives from the honest parties in each round, as the
    low 4 bits of every element."""
    m, coalition = 5, {1, 2}
    gen = np.random.default_rng(11)
    vals = [
        np.full(n, -0.5) if p in coalition else sign_of_honest * gen.uniform(50, 60, n)
        for p in range(1, m + 1)
    ]
    blind = [gen.gamma(1.0 / m, 1.0, n) for _ in range(m)]
    machines = machines_abort(m, f"views-{sign_of_honest}", vals, None, blind)
    _, tr = run_in_memory(machines, keep_log=True)
    seen: dict[int, list[npt.NDArray[np.int64]]] = defaultdict(list)
    for rnd, src, dst, payload in tr.log:
        if dst == 1 and src not in coalition:  # (party 2 receives the same opened shares: counted once)
            seen[rnd].append(low_bits(payload))
    return {r: np.concatenate(v) for r, v in seen.items()}


@pytest.mark.slow
def test_coalition_view_of_blinded_under_abort_does_not_depend_on_honest_inputs() -> None:
    """Honest terms of opposite signs (every decision flips) and other blinding shares: the coalition's view,
    round by round, has the same distribution (chi-square on the low bits of every element received,
    false-failure rate 1e-3 per round)."""
    va, vb = coalition_views(1.0), coalition_views(-1.0)
    assert va.keys() == vb.keys() and len(va) == ROUNDS - 1
    for rnd in va:
        table = np.stack([np.bincount(va[rnd], minlength=16), np.bincount(vb[rnd], minlength=16)])
        table = table[:, table.sum(axis=0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, rnd
