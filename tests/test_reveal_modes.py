"""The reveal-mode table (issue 13): the protocol side (``hss.modes.REVEAL``) and the privacy side
(``mechanisms.privacy.REVEAL_PRIVACY``) name the same modes, and every layer lists modes from it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coordinator import experiment
from hss.abort_modes import SECURITY
from hss.modes import FEATURES, REVEAL, REVEAL_MODES, TERMS, TERMS_MODES, reveal_mode
from hss.session import SessionParams
from mechanisms.privacy import REVEAL_PRIVACY, SHAMIR_MODES, coalition_view, reveal_privacy
from proto import spec


def test_both_tables_have_the_same_keys() -> None:
    assert list(REVEAL) == list(REVEAL_PRIVACY)
    for name, entry in REVEAL.items():
        assert entry.name == name and REVEAL_PRIVACY[name].name == name


def test_every_layer_lists_the_table() -> None:
    assert REVEAL_MODES == ("sum", "blinded", "sign", "svt")
    assert spec.REVEAL_MODES == experiment.REVEAL_MODES == REVEAL_MODES
    assert TERMS_MODES == ("sum", "blinded", "sign")
    assert all(e.inputs in (TERMS, FEATURES) for e in REVEAL.values())
    # a mode that takes decision terms registers its party factory under every security it is offered
    # with; one with other inputs starts its own; every mode is offered semi-honest
    for e in REVEAL.values():
        assert "semi-honest" in e.securities and set(e.securities) <= set(SECURITY)
        assert all((s.party is not None) == (e.inputs == TERMS) for s in e.securities.values()), e.name


def test_shamir_modes_need_an_honest_majority() -> None:
    """A mode is Shamir-shared (a coalition beyond t sees more) exactly when it needs 1 <= t < m/2."""
    assert SHAMIR_MODES == tuple(k for k, e in REVEAL.items() if e.honest_majority)


@pytest.mark.parametrize(
    "lookup",
    [
        reveal_mode,
        reveal_privacy,
        lambda mode: reveal_mode(mode).supported_by(SessionParams(3, 1, b"s" * 16)),
        lambda mode: coalition_view(mode, 3, 1, 0),
    ],
)
def test_unknown_mode_is_named_with_the_known_ones(lookup: Callable[[str], object]) -> None:
    with pytest.raises(ValueError, match=r"unknown reveal mode 'nope'; expected one of \('sum', 'blinded'"):
        lookup("nope")


def test_rounds_and_support_come_from_the_entries() -> None:
    three, two = SessionParams(3, 1, b"s" * 16), SessionParams(2, 0, b"s" * 16)
    assert {k: e.supported_by(three) for k, e in REVEAL.items()} == {k: True for k in REVEAL}
    assert {k: e.supported_by(two) for k, e in REVEAL.items()} == {
        "sum": True, "blinded": False, "sign": False, "svt": False
    }
    assert [reveal_mode(k).rounds(three) for k in TERMS_MODES] == [1, 2, 7]
    assert reveal_mode("sign").rounds(three, "pooled") == 9
    assert reveal_mode("sign").rounds(three, "blocks4") == 7 and three.sign_rounds_with("blocks4") == (2, 5)
    with pytest.raises(ValueError, match="set by the batch, not the session"):
        reveal_mode("svt").rounds(three)
    for k, e in REVEAL.items():  # the check names the mode, and the modes a 2-party session can run
        if e.honest_majority:
            with pytest.raises(ValueError, match=rf"reveal mode '{k}' needs .* only 'sum' is available"):
                e.check_supported(two)
        else:
            e.check_supported(two)


def test_a_session_resolves_its_mode_once_and_refuses_a_batch_that_differs() -> None:
    """SessionSpec.protocol is the mode resolved for the session's security, precompute and lazy coin; a
    batch asking another security, precompute or an unrequested lazy coin is refused, not run."""
    import numpy as np

    from hss.lazy_coin import LazyCoin
    from hss.modes import TermsBatch
    from proto.spec import PartyEntry, SessionSpec
    from tests.hss.conftest import make_session

    parties = tuple(PartyEntry(i, f"party-{i}") for i in (1, 2, 3))
    s = SessionSpec(b"s" * 16, parties, 1, reveal_mode="sign", model="m", security="abort")
    assert s.protocol is s.protocol  # resolved once and kept
    assert (s.protocol.mode.name, s.protocol.security, s.protocol.precompute) == ("sign", "abort", "inline")
    assert s.protocol.rounds(s.params()) == 15 and reveal_mode("sign").rounds(s.params()) == 7
    ahead = SessionSpec(b"s" * 16, parties, 1, "sign", "m", security="abort", precompute_ahead=True)
    assert ahead.protocol.ahead and ahead.protocol.rounds(ahead.params()) == 16
    _params, ctxs, rngs = make_session(3, seed="resolved")
    semi = reveal_mode("sign").under("semi-honest")
    ok = TermsBatch(np.zeros(2), None, 1, rngs[1])
    assert semi.machine(ctxs[1], ok) is not None
    for bad, why in [
        (TermsBatch(np.zeros(2), None, 1, rngs[1], security="abort"), "differ from the session's"),
        (TermsBatch(np.zeros(2), None, 1, rngs[1], precompute="pooled"), "differ from the session's"),
        (TermsBatch(np.zeros(2), None, 1, rngs[1], lazy=LazyCoin.from_gamma(0.5)), "session that asks"),
    ]:
        with pytest.raises(ValueError, match=why):
            semi.machine(ctxs[1], bad)


def test_what_each_view_is_to_the_accounting() -> None:
    """The charge asks a view's observation (issue 38), so its properties are the table's rows: the outside
    observer sees each mode's own output; q > t colluders of a Shamir mode see S (sign, blinded) or
    everything (svt); a bit and a blinded product are post-processings of S, and only the sum is S."""
    from mechanisms.privacy.threat import OBSERVATIONS, observation

    seen = {k: coalition_view(k, 5, 2, 0).observation for k in REVEAL}
    assert {k: (o.name, o.noisy_sum, o.of_sum, o.only_bit) for k, o in seen.items()} == {
        "sum": ("sum", True, True, False),
        "blinded": ("blinded", False, True, False),
        "sign": ("sign", False, True, True),
        "svt": ("svt", False, False, False),
    }
    beyond = {k: coalition_view(k, 5, 2, 3).observation.name for k in REVEAL}
    assert beyond == {"sum": "sum", "blinded": "sum", "sign": "sum", "svt": "everything"}
    for o in OBSERVATIONS.values():
        assert o.of_sum or not (o.noisy_sum or o.only_bit), o  # the sum and the bit are bounded by S's curve
    with pytest.raises(ValueError, match=r"unknown observation 'nope'; expected one of \('sum', 'blinded'"):
        observation("nope")
