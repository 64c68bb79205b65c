"""Statistical checks that what a coalition of t parties, or the receiver, sees is independent of secrets.

Two runs share the coalition's own inputs and differ in the honest parties' secrets. For every round we
compare histograms of the low 4 bits of each field element the coalition received (and of the values opened
to all) with a chi-square homogeneity test at level 1e-3 (fixed seeds, so the outcome is repeatable). A
power control shows the same test flags data that does depend on the secrets.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from hss import field as F
from hss.modes import TermsBatch, reveal_mode
from hss.runtime import RECEIVER, Payload, Transcript, run_in_memory
from tests.hss.conftest import make_session

ALPHA = 1e-3


def low_bits(words: Payload) -> npt.NDArray[np.int64]:
    return (words[0::2] & np.uint64(15)).astype(np.int64)  # low word of each field element


def homogeneous(a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> float:
    table = np.stack([np.bincount(a, minlength=16), np.bincount(b, minlength=16)])
    table = table[:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table).pvalue)


def views(
    mode: str, secrets: float, coalition: set[int], m: int = 5, n: int = 3000
) -> tuple[dict[int, npt.NDArray[np.int64]], Transcript]:
    _params, ctxs, rngs = make_session(m, seed=f"views-{mode}-{secrets}")
    gen = np.random.default_rng(11)
    values = {p: (np.full(n, -0.75) if p in coalition else gen.normal(secrets, 3.0, n)) for p in ctxs}
    blind = {p: np.full(n, 0.5) for p in ctxs}
    entry = reveal_mode(mode)
    machines = {
        p: entry.machine(c, TermsBatch(values[p], None, 1, rngs[p], blind=blind[p])) for p, c in ctxs.items()
    }
    _, tr = run_in_memory(machines, keep_log=True)
    seen: dict[int, list[npt.NDArray[np.int64]]] = defaultdict(list)
    # a broadcast reaches every member: count what one member (the lowest) receives, so no sample repeats
    first = min(coalition)
    for rnd, src, dst, payload in tr.log:
        if dst == first and src not in coalition:
            seen[rnd].append(low_bits(payload))
        if dst == RECEIVER:
            seen[-1].append(low_bits(payload))
    return {r: np.concatenate(v) for r, v in seen.items()}, tr


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sign", "blinded", "sum"])
@pytest.mark.parametrize("coalition", [{1, 2}, {4, 5}])
def test_coalition_and_receiver_views_do_not_depend_on_secrets(mode: str, coalition: set[int]) -> None:
    va, tra = views(mode, -4.0, coalition)
    vb, trb = views(mode, +4.0, coalition)
    assert va.keys() == vb.keys()
    for rnd in va:
        p = homogeneous(va[rnd], vb[rnd])
        assert p > ALPHA, (mode, rnd, p)
    if mode == "sign":
        # the masked value c = S + 2^K + r that round 2 opens to everyone, low bits and high part
        for tr_pair in ((tra, trb),):
            cs = []
            for tr in tr_pair:
                contrib = [pl for rnd, src, dst, pl in tr.log if rnd == 2 and dst == (1 if src != 1 else 2)]
                c = F.lincomb(F.from_ints([1] * 5), np.stack([x.reshape(-1, 2) for x in contrib]))
                cs.append(c)
            assert homogeneous(low_bits(cs[0].reshape(-1)), low_bits(cs[1].reshape(-1))) > ALPHA
            hi = [low_bits(F.shift_right(c, 41).reshape(-1)) for c in cs]
            assert homogeneous(hi[0], hi[1]) > ALPHA


def test_power_control_detects_dependence() -> None:
    """The same test rejects when the compared data do depend on the secrets (here: the plaintext sign)."""
    gen = np.random.default_rng(5)
    a = (gen.normal(-0.3, 1, 20_000) > 0).astype(np.int64)
    b = (gen.normal(+0.3, 1, 20_000) > 0).astype(np.int64)
    assert homogeneous(a, b) < ALPHA
