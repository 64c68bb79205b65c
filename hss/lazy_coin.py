"""The lazy coin of the sign protocol: the receiver learns [S >= 0] AND a secret coin of probability gamma.

gamma = k / 2^L with k odd and L <= :data:`MAX_COIN_BITS` (:class:`LazyCoin`). The coin is made inside the
sign protocol: its L uniform secret bits u come from the same inline precompute as the mask bits (PRSS with
purpose ``P_COIN``, opened squares, pair products by GRR), and [u < k] is a carry tree over them
(:func:`coin_carry_tree`, first level local) that advances one level in each of the comparison's rounds
(:func:`coin_rows`, :func:`coin_advance`). Once the coin is ready (degree t), hss.protocols puts it on top
of the comparison's tree as the node (G, P) = (0, coin), so the root is coin * u and the AND costs no round
unless the coin is late for the root level. Private against any coalition of t < m/2 honest-but-curious
parties, like sign: no such coalition learns anything about the coin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hss import field as F
from hss.primitives import CarryTree, grr_combine, grr_deal
from hss.randomness import SecureRandom
from hss.session import PartyContext

MAX_COIN_BITS = 16


@dataclass(frozen=True)
class LazyCoin:
    """A secret coin with P(1) = gamma = k / 2^bits (public k odd, 1 <= bits <= 16), made inside the sign
    protocol: ``bits`` PRSS random bits u (like the mask bits) and [u < k] by a carry tree; the receiver
    learns only [S >= 0] AND coin. No coalition of at most t parties learns anything about the coin."""

    k: int
    bits: int

    def __post_init__(self) -> None:
        if not (isinstance(self.bits, int) and 1 <= self.bits <= MAX_COIN_BITS):
            raise ValueError(f"lazy coin bits must be an integer in 1..{MAX_COIN_BITS}, got {self.bits!r}")
        if not (isinstance(self.k, int) and 0 < self.k < (1 << self.bits) and self.k % 2 == 1):
            raise ValueError(f"lazy coin k must be odd in 1..2^bits - 1 (gamma = k / 2^bits), got {self.k!r}")

    @property
    def gamma(self) -> float:
        return self.k / (1 << self.bits)

    @classmethod
    def from_gamma(cls, gamma: float) -> LazyCoin:
        """The exact dyadic coin for gamma = k / 2^L with L <= 16; ValueError otherwise (naming gamma)."""
        if not (isinstance(gamma, int | float) and not isinstance(gamma, bool) and 0.0 < gamma < 1.0):
            raise ValueError(f"lazy gamma must be a number strictly between 0 and 1, got {gamma!r}")
        scaled = gamma * (1 << MAX_COIN_BITS)
        k = round(scaled)
        if k != scaled:
            raise ValueError(
                f"lazy gamma = {gamma!r} is not k / 2^L with L <= {MAX_COIN_BITS} (the coin is made from "
                f"L random bits); e.g. {k / (1 << MAX_COIN_BITS)!r}"
            )
        bits = MAX_COIN_BITS
        while k % 2 == 0:
            k //= 2
            bits -= 1
        return cls(k, bits)



def coin_carry_tree(
    lazy: LazyCoin, u: F.FieldArray, uu: F.FieldArray, one: F.FieldArray | None = None
) -> CarryTree:
    """First level (local) of [u < k] over the coin's L random bits u (LSB first) and their pair products.

    Per bit: lt_i = [u_i < k_i] = k_i (1 - u_i), eq_i = [u_i == k_i] (linear in u_i, k public). A pair (h, l)
    gives G = lt_h + eq_h lt_l and P = eq_h eq_l, linear in u_h, u_l and [u_h u_l]. Affine: ``one`` is what
    the constant 1 contributes (the MAC key's share when the call computes MACs, hss.abort_modes)."""
    one = F.const(1) if one is None else one
    kb = [(lazy.k >> i) & 1 for i in range(lazy.bits)]

    def lt(i: int) -> F.FieldArray:
        return F.sub(np.broadcast_to(one, u[i].shape), u[i]) if kb[i] else F.zeros(u[i].shape[:-1])

    def eq(i: int) -> F.FieldArray:
        return u[i] if kb[i] else F.sub(np.broadcast_to(one, u[i].shape), u[i])

    gs, ps = [], []
    for a in range(lazy.bits // 2):
        h, lo, w = 2 * a + 1, 2 * a, uu[a]
        uh, ul = u[h], u[lo]
        ones = np.broadcast_to(one, uh.shape)
        # eq_h * lt_l and eq_h * eq_l, expanded with w = u_h u_l
        if not kb[lo]:
            eh_ltl = F.zeros(uh.shape[:-1])
        elif kb[h]:
            eh_ltl = F.sub(uh, w)
        else:
            eh_ltl = F.add(F.sub(F.sub(ones, uh), ul), w)
        eq_pair = {
            (1, 1): w,
            (1, 0): F.sub(uh, w),
            (0, 1): F.sub(ul, w),
            (0, 0): F.add(F.sub(F.sub(ones, uh), ul), w),
        }[(kb[h], kb[lo])]
        gs.append(F.add(lt(h), eh_ltl))
        ps.append(eq_pair)
    if lazy.bits % 2:
        top = lazy.bits - 1
        gs.append(lt(top))
        ps.append(eq(top))
    return CarryTree(np.stack(gs), np.stack(ps))


def coin_rows(ctx: PartyContext, coin_tree: CarryTree | None, rng: SecureRandom) -> F.FieldArray | None:
    """This round's GRR rows of the coin tree's products, while the coin is not ready."""
    if coin_tree is None or coin_tree.done:
        return None
    return grr_deal(ctx, coin_tree.products(), rng)


def coin_advance(
    ctx: PartyContext,
    coin_tree: CarryTree | None,
    rows: F.FieldArray | None,
    msgs: dict[int, npt.NDArray[np.uint64]],
) -> None:
    """Take the coin tree one level up from the rows received for it (when it has sent any)."""
    if rows is not None and coin_tree is not None:
        coin_tree.advance(grr_combine(ctx, rows[ctx.party - 1], msgs))
