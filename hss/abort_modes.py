"""Security with abort for the reveal modes (issue 25): the session option, what it offers, ``sum``, and the
checked inputs the other modes deal.

A session with ``security = "abort"`` runs the machines of this module and of hss.abort_sign instead of
hss.protocols' for its decisions. Up to t < m/2 parties may deviate in any message; every honest party then
either raises :class:`hss.authenticated.AbortError` before any output leaves it, or the receiver gets exactly
the decisions of the inputs the parties chose. What the receiver learns is what the semi-honest mode reveals.

Checked inputs (:func:`int_bits`, :func:`bits_proof`, :func:`proof_openings`, :func:`proof_holds`): a value
that must lie in [0, 2^B) is dealt as its B bits with the dealer's proof that they are bits (below, and
hss.abort_blinded's docstring for the argument): no MAC per bit, 2B + 2 dealt elements, checked at a random
point opened after the dealing, before anything nonlinear in the inputs is opened. Why: the comparisons are
exact only for inputs in range, and a check of the range on the output would abort depending on the honest
parties' data (hss.abort_sign explains it for sign); and a value nonlinear in the inputs opened before the
check shows honest data times a huge non-bit (hss.abort_svt).

sum (1 round, unchanged): each party sends x_j + z_j to the receiver. A deviating party can only change its
own contribution, which is choosing another term (the ideal model allows it); the receiver refuses missing,
malformed or non-canonical messages (:class:`AbortError`) and decides on the signed representative of the
sum. The revealed S is what ``sum`` reveals anyway, so no range check is needed: any function of S is
post-processing of the release the registries are charged for.

``sign`` under abort is hss.abort_sign, ``svt`` hss.abort_svt (its rounds depend on the batch:
hss.abort_svt.abort_svt_rounds).

Not offered under abort yet (refused by ``hss.modes.RevealMode.under``, naming it): a reveal mode without
an "abort" entry in its ``securities`` (every mode has one today), a sign precompute made ahead
(``precompute_ahead``) with a lazy coin, and a lazy coin with a sign precompute other than inline
(:func:`abort_refuses`).
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.authenticated import AbortError, checked_messages
from hss.protocols import Decisions, PartyReport, sum_party
from hss.runtime import Inbox, Machine
from hss.session import PartyContext, SessionParams, check_precompute

__all__ = [
    "SECURITY",
    "SIGN_MASK_ROUNDS",
    "SIGN_ROUNDS",
    "SUM_ABORT_ROUNDS",
    "abort_refuses",
    "bits_proof",
    "check_security",
    "int_bits",
    "lagrange_at",
    "proof_holds",
    "proof_openings",
    "sum_party_abort",
    "sum_receiver_abort",
]

#: The session option: "semi-honest" (hss.protocols, the default) or "abort" (this module).
SECURITY = ("semi-honest", "abort")

#: rounds of a sum batch under abort (its checked opening)
SUM_ABORT_ROUNDS = 1
#: rounds of a sign batch under abort per sign precompute (hss.abort_sign); + 1 with a lazy coin
SIGN_ROUNDS = {"inline": 15, "pooled": 15, "blocks4": 14}
#: rounds of a sign batch under abort that make and check its mask (hss.abort_sign.precompute_sign_abort):
#: run ahead of the terms with ``precompute_ahead``, the batch then runs SIGN_ROUNDS + 1 - SIGN_MASK_ROUNDS
SIGN_MASK_ROUNDS = 5


def check_security(security: str) -> None:
    if security not in SECURITY:
        raise ValueError(f"security {security!r} is not one of {SECURITY}")


def abort_refuses(precompute: str = "inline", lazy: bool = False, ahead: bool = False) -> str | None:
    """Why a session's sign precompute, lazy coin or precompute ahead is not offered under security "abort"
    yet, or None (the same for every reveal mode offered with it: ``hss.modes.RevealMode.securities``)."""
    check_precompute(precompute)
    if precompute == "prefix":
        return (
            "sign_precompute 'prefix' (a one-round carry by masked openings of products) has no version "
            "with abort yet: use inline, pooled or blocks4 under security 'abort'"
        )
    if ahead and lazy:
        return "a lazy coin is made in the step: precompute_ahead is not offered with it"
    if lazy and precompute != "inline":
        return f"a lazy coin with sign_precompute {precompute!r} is not offered (inline only)"
    return None


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


# ---------------------------------------------------------------------------------------------------------
# the dealer's proof that its values are bits: f through (0, mask), (k, d_k) for k = 1..N; q of degree N
# given at N+1..2N+1 with prod_{k=1..N} (X - k) q(X) = f(X) (f(X) - 1); checked at one random point x


def _inverses(vals: list[int]) -> list[int]:
    """Inverses mod p of nonzero ints (batch inversion: one exponentiation)."""
    p = F.P
    prefix, acc = [], 1
    for v in vals:
        prefix.append(acc)
        acc = acc * v % p
    inv_acc, out = pow(acc, p - 2, p), [0] * len(vals)
    for k in range(len(vals) - 1, -1, -1):
        out[k] = inv_acc * prefix[k] % p
        inv_acc = inv_acc * vals[k] % p
    return out


def lagrange_at(x: int, start: int, count: int) -> list[int]:
    """The Lagrange weights at x (not one of the points) of the points start, ..., start + count - 1."""
    p, n = F.P, count - 1
    diffs = [(x - start - i) % p for i in range(count)]
    whole = 1
    for dv in diffs:
        whole = whole * dv % p
    inv_d = _inverses(diffs)
    facts = [1] * count
    for i in range(1, count):
        facts[i] = facts[i - 1] * i % p
    inv_f = _inverses(facts)
    # l_i(x) = prod_{j != i} (x - x_j) / (x_i - x_j) = whole / (x - x_i) / (i! (n - i)! (-1)^(n - i))
    return [
        whole * inv_d[i] % p * inv_f[i] % p * inv_f[n - i] % p * (1 if (n - i) % 2 == 0 else p - 1) % p
        for i in range(count)
    ]


def _vanishing(x: int, n: int) -> int:
    """prod_{k=1..n} (x - k) mod p."""
    out = 1
    for k in range(1, n + 1):
        out = out * (x - k) % F.P
    return out


@functools.lru_cache(maxsize=8)
def _extension(n: int) -> tuple[F.FieldArray, F.FieldArray]:
    """For f given at 0..n: the (n+1, n+1) matrix of its values at n+1..2n+1, and 1 / prod_{k=1..n} (y - k)
    at those points y."""
    ys = range(n + 1, 2 * n + 2)
    ext = F.from_ints([w for y in ys for w in lagrange_at(y, 0, n + 1)]).reshape(n + 1, n + 1, 2)
    return ext, F.from_ints(_inverses([_vanishing(y, n) for y in ys]))


def bits_proof(bits: F.FieldArray, mask: F.FieldArray) -> F.FieldArray:
    """What a dealer deals beside its bits (N, n) and its random ``mask`` (n,): q's values at N+1..2N+1,
    shape (N + 1, n), for f through (0, mask) and (k, bits[k-1]); q is a polynomial exactly when every
    value is a bit."""
    f = np.concatenate([mask[None], bits])
    ext, inv_v = _extension(bits.shape[0])
    fy = F.matmul(ext, f)
    return F.mul(F.mul(fy, F.sub(fy, F.const(1))), inv_v[:, None])


def proof_openings(dealt: F.FieldArray, x: int) -> F.FieldArray:
    """This party's shares of (f_j(x), q_j(x)) for every dealer's (mask, N bits, N + 1 values of q), dealt
    (m, 2N + 2, n): shape (2, m, n)."""
    n_bits = (dealt.shape[1] - 2) // 2
    f_w = F.from_ints(lagrange_at(x, 0, n_bits + 1))
    q_w = F.from_ints(lagrange_at(x, n_bits + 1, n_bits + 1))
    rows = np.moveaxis(dealt, 1, 0)  # (2N + 2, m, n, 2)
    return np.stack([F.lincomb(f_w, rows[: n_bits + 1]), F.lincomb(q_w, rows[n_bits + 1 :])])


def proof_holds(opened: F.FieldArray, x: int, n_bits: int) -> npt.NDArray[np.bool_]:
    """prod_{k=1..N} (x - k) q(x) = f(x) (f(x) - 1) for each opened pair (2, ...)."""
    fx, qx = opened[0], opened[1]
    return F.equal(F.mul_scalar(qx, _vanishing(x, n_bits)), F.mul(fx, F.sub(fx, F.const(1))))
