"""Fixed-point format with a checked bit budget.

A real value v is encoded as the integer round(v * 2^frac_bits). The decision protocols add up to
``max_terms`` terms (m parties' terms plus the public term), so each term is limited to
``|v| < 2^term_int_bits`` and the sum to ``|S| < 2^(k-1)`` units with

    k = term_int_bits + frac_bits + ceil(log2 max_terms) + 1          (value bits, sign included).

Out-of-range terms are clamped to the largest representable magnitude and reported in a mask the caller
sees (never silent wrap-around); NaN and infinities are refused with ValueError. Clamping keeps the sign
of the clamped term, so a decision can only change when a clamped term is not the one that dominates the
sum; the caller (the party) gets the mask and decides (log it, refuse, or widen the format).

Budget (checked at construction, ValueError naming the numbers):

* comparison (Catrina & de Hoogh 2010): the opened value b + r with b < 2^k and a mask r whose random
  high part is a sum of C(m, t) pseudorandom pieces of kappa + 1 bits must not wrap mod p, so
  k + kappa + 1 + ceil(log2 C(m, t)) <= 126 for every supported (m, t); kappa >= 40;
* blinded product: Z = (2S + 1) * W' + E with W' = W + 2^(blind_e_bits - blind_frac_bits) and
  0 <= E < 2^blind_e_bits must stay below p/2 in magnitude.

Defaults: frac_bits = 20 (decisions exact up to ties within (max_terms/2) * 2^-20 ~ 1.5e-5 of zero),
term_int_bits = 17 (|term| < 131072, covering log ratios of -10^4 and +10^3 with room), max_terms = 16
(up to 15 parties plus the public term), so k = 42; kappa = 64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FIELD_BITS = 127  # p = 2^127 - 1
SIGNED_LIMIT_BITS = 126  # |x| < 2^126 < p / 2 decodes unambiguously
W_CLAMP = 64.0  # each party's blinding share W_j ~ Gamma(1/m, 1) is clamped to [0, 64); P(W_j >= 64) < e^-63
#: A round cap above what can fit: with the smallest k and kappa = 40, the PRSS mask's log2 C(m, (m-1)/2)
#: bits exceed the budget from m = 79 on. Checked first, so that building a format costs the same whatever
#: numbers it is given (a request's max_parties = 2^32 - 2 must not mean 2^32 big binomials).
MAX_FORMAT_PARTIES = 128


def max_threshold(m: int) -> int:
    """The largest threshold with an honest majority: t < m / 2."""
    return (m - 1) // 2


def prss_sets(m: int, t: int) -> int:
    return math.comb(m, t)


@dataclass(frozen=True)
class FixedPoint:
    frac_bits: int = 20
    term_int_bits: int = 17
    max_terms: int = 16
    kappa: int = 64
    max_parties: int = 15
    blind_frac_bits: int = 71
    blind_e_bits: int = 60
    k: int = field(init=False)

    def __post_init__(self) -> None:
        for name in ("frac_bits", "term_int_bits", "max_terms", "kappa", "max_parties"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"FixedPoint.{name} must be a positive integer, got {v!r}")
        if self.max_parties > MAX_FORMAT_PARTIES:
            raise ValueError(
                f"FixedPoint.max_parties = {self.max_parties} exceeds {MAX_FORMAT_PARTIES}: no format for "
                "that many parties fits the field's bit budget (the PRSS mask alone needs log2 C(m, t) bits)"
            )
        if self.max_terms < self.max_parties + 1:
            raise ValueError(
                f"max_terms ({self.max_terms}) must be at least max_parties + 1 ({self.max_parties + 1}): "
                "each party contributes a term and the public term is one more"
            )
        k = self.term_int_bits + self.frac_bits + math.ceil(math.log2(self.max_terms)) + 1
        object.__setattr__(self, "k", k)
        if self.kappa < 40:
            raise ValueError(f"statistical security kappa must be >= 40, got {self.kappa}")
        if k - 1 > 63:
            raise ValueError(
                f"value bits k = {k} exceed 64: the comparison reads c mod 2^(k-1) from one word"
            )
        # C(m, max_threshold(m)) never decreases with m, so the worst supported m is max_parties itself
        worst_sets = prss_sets(self.max_parties, max_threshold(self.max_parties))
        prss_bits = math.ceil(math.log2(worst_sets)) if worst_sets > 1 else 0
        need = k + self.kappa + 1 + prss_bits
        if need > SIGNED_LIMIT_BITS:
            raise ValueError(
                f"bit budget exceeded: value bits k={k} (term_int_bits={self.term_int_bits} + "
                f"frac_bits={self.frac_bits} + log2(max_terms={self.max_terms}) + sign) + kappa={self.kappa} "
                f"+ 1 + log2 C(m,t)={prss_bits} for up to {self.max_parties} parties = {need} bits, "
                f"but the field 2^127-1 allows {SIGNED_LIMIT_BITS}; lower frac_bits, term_int_bits or kappa"
            )
        if not self.blind_e_bits < self.blind_frac_bits:
            raise ValueError(
                f"blind_e_bits ({self.blind_e_bits}) must be below blind_frac_bits ({self.blind_frac_bits}) "
                "so that the lower bound on W stays below 1"
            )
        if self.blind_e_bits < k + 1 + 16:
            raise ValueError(
                f"blind_e_bits ({self.blind_e_bits}) must exceed the bits of 2S+1 ({k + 1}) by at least 16 "
                "so that the additive term hides the divisors of the opened product"
            )
        w_bits = math.ceil(math.log2(self.max_parties * W_CLAMP)) + self.blind_frac_bits + 1
        z_bits = (k + 1) + w_bits + 1
        if z_bits > SIGNED_LIMIT_BITS:
            raise ValueError(
                f"blinded product needs {z_bits} bits ((2S+1): {k + 1}, W': {w_bits}, carry 1) but the field "
                f"allows {SIGNED_LIMIT_BITS}; lower blind_frac_bits ({self.blind_frac_bits}) or frac_bits"
            )

    @property
    def compare_bits(self) -> int:
        """K = k - 1: bits of the mask's low part, compared bitwise in the sign protocol."""
        return self.k - 1

    @property
    def term_bound(self) -> int:
        """Largest |term| in integer units."""
        return (1 << (self.term_int_bits + self.frac_bits)) - 1

    @property
    def resolution(self) -> float:
        return 2.0**-self.frac_bits

    @property
    def w_shift(self) -> float:
        """Lower bound added to W in the blinded product: W' = W + 2^(e_bits - blind_frac_bits)."""
        return 2.0 ** (self.blind_e_bits - self.blind_frac_bits)

    def encode(self, x: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Round to the nearest multiple of 2^-frac_bits; clamp to +-term_bound with a visible mask."""
        v = np.asarray(x, dtype=np.float64)
        bad = ~np.isfinite(v)
        if bad.any():
            idx = np.flatnonzero(bad)[:5].tolist()
            raise ValueError(f"cannot encode NaN or infinity (flat indices {idx}): every term must be finite")
        scaled = np.rint(v * (1 << self.frac_bits))
        lim = float(self.term_bound)
        clamped = np.abs(scaled) > lim
        return np.clip(scaled, -lim, lim).astype(np.int64), clamped

    def decode(self, ints: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.asarray(ints, dtype=np.float64) * self.resolution

    def encode_blind(self, w: npt.ArrayLike) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.bool_]]:
        """A party's blinding share W_j >= 0 as an integer with blind_frac_bits fraction bits (two words)."""
        v = np.asarray(w, dtype=np.float64)
        if (~np.isfinite(v)).any() or (v < 0).any():
            raise ValueError("blinding shares must be finite and non-negative")
        clamped = v >= W_CLAMP
        v = np.minimum(v, np.nextafter(W_CLAMP, 0.0))
        # v * 2^blind_frac_bits < 2^(6 + blind_frac_bits) as two exact 64-bit words (scaling by powers of
        # two and taking a fractional part are exact in binary floating point; bits below 2^-f are dropped).
        y = v * 2.0 ** (self.blind_frac_bits - 64)
        hi = np.floor(y)
        lo = np.floor((y - hi) * 2.0**64)
        out = np.empty((*v.shape, 2), dtype=np.uint64)
        out[..., 0] = lo.astype(np.uint64)
        out[..., 1] = hi.astype(np.uint64)
        return out, clamped
