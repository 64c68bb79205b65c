"""Security with abort for the reveal modes (issue 25): the session option, what it offers, ``sum``, and the
checked inputs the other modes deal.

A session with ``security = "abort"`` runs the machines of this module and of hss.abort_sign instead of
hss.protocols' for its decisions. Up to t < m/2 parties may deviate in any message; every honest party then
either raises :class:`hss.authenticated.AbortError` before any output leaves it, or the receiver gets exactly
the decisions of the inputs the parties chose. What the receiver learns is what the semi-honest mode reveals.

Checked inputs (:func:`int_bits`, :func:`bits_value`, :func:`bitness_products`, :func:`claim_bits`): a value
that must lie in [0, 2^B) is dealt as its B bits, each bit authenticated by one GRR round of its MAC, and one
dot product sum_k gamma_k d_k^2 (two field elements per batch) checks them all to be bits at verify. Why:
the comparisons are exact only for inputs in range, and a check of the range on the output would abort
depending on the honest parties' data (hss.abort_sign explains it for sign).

sum (1 round, unchanged): each party sends x_j + z_j to the receiver. A deviating party can only change its
own contribution, which is choosing another term (the ideal model allows it); the receiver refuses missing,
malformed or non-canonical messages (:class:`AbortError`) and decides on the signed representative of the
sum. The revealed S is what ``sum`` reveals anyway, so no range check is needed: any function of S is
post-processing of the release the registries are charged for.

``sign`` under abort is hss.abort_sign, ``svt`` hss.abort_svt (its rounds depend on the batch:
hss.abort_svt.abort_svt_rounds).

Not offered under abort yet (refused by :func:`check_abort_supported`, naming it): the modes not in
``_ROUNDS`` and a sign precompute made ahead (``precompute_ahead``).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.authenticated import AbortError, Auth, AuthParty, checked_messages, sub
from hss.protocols import Decisions, PartyReport, sum_party
from hss.runtime import Inbox, Machine
from hss.session import PartyContext, SessionParams, check_precompute

__all__ = [
    "SECURITY",
    "abort_rounds",
    "check_abort_supported",
    "check_security",
    "sum_party_abort",
    "sum_receiver_abort",
]

#: The session option: "semi-honest" (hss.protocols, the default) or "abort" (this module).
SECURITY = ("semi-honest", "abort")

#: rounds of a batch under abort, per mode offered (sign: with the inline precompute, see SIGN_ROUNDS; 0: set
#: by the batch, svt: hss.abort_svt.abort_svt_rounds)
_ROUNDS = {"sum": 1, "sign": 12, "blinded": 7, "svt": 0}
#: rounds of a sign batch under abort per sign precompute (hss.abort_sign); + 1 with a lazy coin
SIGN_ROUNDS = {"inline": 12, "pooled": 13, "blocks4": 11}


def check_security(security: str) -> None:
    if security not in SECURITY:
        raise ValueError(f"security {security!r} is not one of {SECURITY}")


def check_abort_supported(
    mode: str, precompute: str = "inline", lazy: bool = False, ahead: bool = False
) -> None:
    """ValueError naming what is not offered under ``security = "abort"`` yet."""
    if mode not in _ROUNDS:
        raise ValueError(
            f"reveal mode {mode!r} is not offered with security 'abort' yet (offered: {tuple(_ROUNDS)}); "
            "use security 'semi-honest' or another reveal mode"
        )
    check_precompute(precompute)
    if ahead:
        raise ValueError(
            "precompute_ahead is not offered with security 'abort' yet: the sign protocol under abort makes "
            "its authenticated mask bits in the step (with the dealt terms' bits)"
        )
    if lazy and precompute != "inline":
        raise ValueError(f"a lazy coin with sign_precompute {precompute!r} is not offered (inline only)")


def abort_rounds(mode: str, precompute: str = "inline", lazy: bool = False) -> int:
    """Rounds of a batch of ``mode`` under abort (sign: with ``precompute`` and a lazy coin or not);
    ValueError for svt, whose rounds the batch sets (hss.abort_svt.abort_svt_rounds)."""
    check_abort_supported(mode, precompute, lazy)
    if mode == "sign":
        return SIGN_ROUNDS[precompute] + (1 if lazy else 0)
    if not _ROUNDS[mode]:
        raise ValueError(f"rounds of {mode!r} under security 'abort' are set by the batch: see hss.abort_svt")
    return _ROUNDS[mode]


def term_bits(params: SessionParams) -> int:
    """B: the bits a party deals for its encoded term x + 2^(B-1), |x| <= fmt.term_bound < 2^(B-1)."""
    fmt = params.fmt
    return fmt.term_int_bits + fmt.frac_bits + 1


# ---------------------------------------------------------------------------------------------------------
# sum


def sum_party_abort(
    ctx: PartyContext, values: npt.ArrayLike, public: npt.ArrayLike | None, step: int
) -> Machine[PartyReport]:
    """``sum`` under abort: the semi-honest machine (a deviating party can only change its own term)."""
    machine = sum_party(ctx, values, public, step)
    machine.name = "decide[sum, abort]"
    return machine


def sum_receiver_abort(params: SessionParams, inbox: Inbox, n: int, step: int) -> Decisions:
    """The receiver's decoding of a ``sum`` batch under abort: all m messages, canonical field elements
    (else :class:`AbortError` naming the step and round 1), S decided on its signed representative."""
    try:
        got = checked_messages(inbox, {j: n for j in range(1, params.m + 1)})
    except ValueError as exc:
        raise AbortError(step, 1, "receiver: sum", str(exc)) from exc
    total = F.lincomb(F.from_ints([1] * params.m), np.stack([got[j] for j in range(1, params.m + 1)]))
    ints = [v - F.P if v > F.P // 2 else v for v in F.to_ints(total)] if n else []
    s = np.array(ints, dtype=object)
    accept = np.array([v >= 0 for v in ints], dtype=bool)
    revealed = np.array([float(v) / 2.0**params.fmt.frac_bits for v in s], dtype=np.float64)
    return Decisions(accept=accept, revealed=revealed)


# ---------------------------------------------------------------------------------------------------------
# checked inputs: values dealt as bits (the range by construction), shared by the modes under abort


def int_bits(v: npt.NDArray[np.uint64], nbits: int) -> F.FieldArray:
    """The low ``nbits`` bits of non-negative integers ``v`` (n,), shape (nbits, n), as field elements: what a
    party deals for a value that must lie in [0, 2^nbits)."""
    bits = (v[None, :] >> np.arange(nbits, dtype=np.uint64)[:, None]) & np.uint64(1)
    return F.from_int64(bits.astype(np.int64))


def bits_value(d: Auth, nbits: int) -> Auth:
    """sum_i 2^i d_i over the bit axis of dealt bits ``d`` of shape (..., nbits, n) -> (..., n)."""
    pow2 = F.from_ints([1 << i for i in range(nbits)])
    x, mac = (np.ascontiguousarray(np.moveaxis(a, -3, 0)) for a in (d.x, d.mac))
    return Auth(F.lincomb(pow2, x), F.lincomb(pow2, mac))


def bitness_products(d: Auth, gamma: F.FieldArray) -> list[F.FieldArray]:
    """The degree-2t shares of y = sum_k gamma_k d_k^2 over every dealt bit d_k (flattened) and of its MAC
    sum_k gamma_k (r d_k) d_k: GRR-reshare both in one round, then :func:`claim_bits`. ``gamma``: public
    coins opened after the bits were dealt (one per flattened element)."""
    x, mac = d.x.reshape(-1, 2), d.mac.reshape(-1, 2)
    return [F.lincomb(gamma, F.mul(x, x))[None], F.lincomb(gamma, F.mul(mac, x))[None]]


def claim_bits(auth: AuthParty, d: Auth, gamma: F.FieldArray, y: F.FieldArray, y_mac: F.FieldArray) -> None:
    """Add the reshared (y, r y) of :func:`bitness_products` to the check and claim y - sum_k gamma_k d_k = 0:
    a dealt value that is not a bit fails verify except with probability 2/p (gamma fixed after the bits)."""
    y_auth = Auth(y, y_mac)
    auth.track([y_auth])
    x, mac = d.x.reshape(-1, 2), d.mac.reshape(-1, 2)
    auth.claim_zero(sub(y_auth, Auth(F.lincomb(gamma, x)[None], F.lincomb(gamma, mac)[None])))
