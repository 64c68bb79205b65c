"""The fixed-point format of the federated SVT test (hss.svt): encoding, bit budget, rounds.

:class:`SvtFormat` puts every quantity on the scale of a mean with f fraction bits: s_j = round(2^f S_j / N),
phi_i = round(2^f phibar_i), tau_j = round(2^f tau_j) clamped to |tau_j| < 2^(t_int_bits + f) (the mask is
reported to the party), e = round(2^f eps_abc) (refused out of range). Its constructor checks the bit budget
K + kappa + 1 + ceil(log2 C(m, t)) <= 126 of the masked comparisons, and :meth:`SvtFormat.rounds` counts the
rounds of a batch from the compared bits (radix-4 first carry level, both carry trees in parallel, the fused
AND, the gate). The derivation and the protocol are in hss.svt's module docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hss.fixedpoint import SIGNED_LIMIT_BITS, max_threshold, prss_sets

I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

DEFAULT_FRAC_BITS = 16
DEFAULT_T_INT_BITS = 6
MAX_FRAC_BITS = 24
GROUP = 4  # mask bits per first-level carry node (radix 4)
_NORM_SLACK = 1e-6  # relative tolerance on ||S_j|| <= N and ||phibar_i|| <= 1 (float rounding)


def prss_bits(m: int) -> int:
    """ceil(log2 C(m, t)) at the largest threshold t < m/2: the bits PRSS adds to a masked value."""
    c = prss_sets(m, max_threshold(m))
    return math.ceil(math.log2(c)) if c > 1 else 0


@dataclass(frozen=True)
class SvtFormat:
    """Fixed-point format of the federated SVT test, with a checked bit budget.

    ``frac_bits`` f: resolution 2^-f of S_j/N, phibar, tau_j and eps_abc. ``n_records``: the public N.
    ``dim``: D. ``t_int_bits``: each party's |tau_j| < 2^t_int_bits (clamped with a mask) and
    |eps_abc| < 2^t_int_bits (refused otherwise), so |t| < (m+1) 2^t_int_bits. ``max_parties``: the
    largest m this format serves. ``kappa``: statistical security of the masked openings.

    Derived: ``t_bits`` = K_T and ``b_bits`` = K_b, the compared bits of [T >= 0] and [b >= 0]
    (|T| < 2^K_T, |b| < 2^K_b). Budget: K + kappa + 1 + ceil(log2 C(m, t)) <= 126 for every m <= max_parties
    (the masked value x + 2^K + r must not wrap mod 2^127 - 1), checked at construction.

    Ranges: the budget does not depend on N (any N >= 1 works). f = 16, t_int_bits = 6 fits up to
    m = 10 parties at kappa = 64 (K_T = 26, K_b = 51: 51 + 64 + 1 + 8 = 124); :meth:`for_plan` picks the
    largest f (at most 24) for a given m and noise scale.
    """

    frac_bits: int
    n_records: int
    dim: int
    t_int_bits: int = DEFAULT_T_INT_BITS
    max_parties: int = 10
    kappa: int = 64
    t_bits: int = field(init=False)
    b_bits: int = field(init=False)

    def __post_init__(self) -> None:
        for name in ("frac_bits", "n_records", "dim", "t_int_bits", "max_parties", "kappa"):
            v = getattr(self, name)
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 1:
                raise ValueError(f"SvtFormat.{name} must be a positive integer, got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.frac_bits > MAX_FRAC_BITS:
            raise ValueError(f"SvtFormat.frac_bits = {self.frac_bits} exceeds {MAX_FRAC_BITS}")
        if self.max_parties < 3:
            raise ValueError(
                f"the SVT protocol needs an honest majority with m >= 3; max_parties = {self.max_parties}"
            )
        if self.kappa < 40:
            raise ValueError(f"statistical security kappa must be >= 40, got {self.kappa}")
        m = self.max_parties
        t_max = (m + 1) * ((1 << (self.t_int_bits + self.frac_bits)) - 1)
        u_max = (m + 1) * ((1 << self.frac_bits) + math.isqrt(self.dim) + 1)
        object.__setattr__(self, "t_bits", t_max.bit_length())
        object.__setattr__(self, "b_bits", max(t_max * t_max, u_max * u_max).bit_length())
        if self.b_bits > 63:
            raise ValueError(
                f"bit budget exceeded: b needs {self.b_bits} compared bits (f = {self.frac_bits}, "
                f"t_int_bits = {self.t_int_bits}, m = {self.max_parties}); at most 63 are supported"
            )
        prss = prss_bits(m)
        need = self.b_bits + self.kappa + 1 + prss
        if need > SIGNED_LIMIT_BITS:
            raise ValueError(
                f"bit budget exceeded: K_b = {self.b_bits} compared bits (|b| < ((m+1) 2^(t_int_bits+f))^2 "
                f"with m = {m}, t_int_bits = {self.t_int_bits}, f = {self.frac_bits}) + kappa = {self.kappa} "
                "+ 1 + "
                f"log2 C(m,t) = {prss} is {need} > {SIGNED_LIMIT_BITS}; lower frac_bits, t_int_bits, kappa "
                "or max_parties"
            )

    @classmethod
    def for_plan(
        cls, n_records: int, dim: int, m: int, laplace_scale: float, eps_abc: float, kappa: int = 64
    ) -> SvtFormat:
        """The format for one federated ABCDP run: t_int_bits covers the noise, f as large as fits.

        Each party's tau_j is m_j - nu_j with m_j = b (G - G'), nu_j = 2b (G'' - G''') and G ~ Gamma(a, 1),
        a <= 1; P(G > 40) <= e^-40, so |tau_j| <= 120 b except with probability below 2e-17 per candidate.
        2^t_int_bits is the smallest power of two above max(|eps_abc|, 120 b); f is then the largest value
        <= 24 for which the budget holds at m parties (ValueError if even f = 8 does not fit).
        """
        if not (math.isfinite(laplace_scale) and laplace_scale >= 0):
            raise ValueError(f"laplace_scale must be finite and >= 0, got {laplace_scale}")
        if not math.isfinite(eps_abc):
            raise ValueError(f"eps_abc must be finite, got {eps_abc}")
        need = max(abs(eps_abc), 120.0 * laplace_scale, 1.0)
        t_int = 1
        while 2.0**t_int <= need:
            t_int += 1
        last: ValueError | None = None
        for f in range(MAX_FRAC_BITS, 7, -1):
            try:
                return cls(frac_bits=f, n_records=n_records, dim=dim, t_int_bits=t_int, max_parties=m,
                           kappa=kappa)
            except ValueError as exc:
                if "bit budget" not in str(exc):
                    raise
                last = exc
        raise ValueError(f"no SvtFormat with frac_bits >= 8 fits: {last}")

    # -- encoding --------------------------------------------------------------------------------

    @property
    def tau_bound(self) -> int:
        """Largest |tau_j| and |eps_abc| in integer units."""
        return (1 << (self.t_int_bits + self.frac_bits)) - 1

    def margin(self, m: int) -> float:
        """Real-valued decisions equal the encoded ones whenever |rho - t| exceeds this (no clamping)."""
        return (m + 1) * (math.sqrt(self.dim) + 1.0) * 2.0 ** -(self.frac_bits + 1) * (1 + 1e-9) + 1e-12

    def encode_feature_sum(self, feature_sum: npt.ArrayLike) -> I64:
        """s_j = round(2^f S_j / N); refuses NaN/inf, a wrong shape or ||S_j|| > N."""
        s = np.asarray(feature_sum, dtype=np.float64)
        if s.shape != (self.dim,):
            raise ValueError(f"feature_sum must have shape ({self.dim},), got {s.shape}")
        if not np.isfinite(s).all():
            raise ValueError("feature_sum has NaN or infinite entries")
        norm = float(np.linalg.norm(s))
        if norm > self.n_records * (1 + _NORM_SLACK):
            raise ValueError(
                f"||feature_sum|| = {norm:.6g} exceeds N = {self.n_records}: a sum of unit-norm features "
                "over at most N records cannot; check the feature map and n_records"
            )
        return np.rint(np.ldexp(s / self.n_records, self.frac_bits)).astype(np.int64)

    def encode_phibar(self, phibar: npt.ArrayLike) -> I64:
        """phi_i = round(2^f phibar_i); refuses NaN/inf, a wrong shape or a row norm above 1."""
        p = np.asarray(phibar, dtype=np.float64)
        if p.ndim != 2 or p.shape[1] != self.dim or p.shape[0] < 1:
            raise ValueError(f"phibar must have shape (n, {self.dim}) with n >= 1, got {p.shape}")
        if not np.isfinite(p).all():
            raise ValueError("phibar has NaN or infinite entries")
        norms = np.linalg.norm(p, axis=1)
        if (norms > 1 + _NORM_SLACK).any():
            i = int(np.argmax(norms))
            raise ValueError(
                f"phibar row {i} has norm {norms[i]:.6g} > 1: mean embeddings of unit-norm features "
                "have norm <= 1"
            )
        return np.rint(np.ldexp(p, self.frac_bits)).astype(np.int64)

    def encode_tau(self, tau: npt.ArrayLike, n: int | None = None) -> tuple[I64, BoolArray]:
        """round(2^f tau_j), clamped to +-tau_bound with a mask; refuses NaN/inf and a wrong shape."""
        v = np.asarray(tau, dtype=np.float64)
        if v.ndim != 1 or (n is not None and v.shape[0] != n):
            raise ValueError(f"tau must have shape ({n if n is not None else 'n'},), got {v.shape}")
        if not np.isfinite(v).all():
            idx = np.flatnonzero(~np.isfinite(v))[:5].tolist()
            raise ValueError(f"tau has NaN or infinite entries at {idx}")
        scaled = np.rint(np.ldexp(v, self.frac_bits))
        lim = float(self.tau_bound)
        clamped = np.abs(scaled) > lim
        return np.clip(scaled, -lim, lim).astype(np.int64), clamped

    def encode_eps(self, eps_abc: float) -> int:
        e = float(eps_abc)
        if not math.isfinite(e):
            raise ValueError(f"eps_abc must be finite, got {eps_abc}")
        v = int(np.rint(math.ldexp(e, self.frac_bits)))
        if abs(v) > self.tau_bound:
            raise ValueError(
                f"|eps_abc| = {abs(e)} must be below 2^t_int_bits = {2**self.t_int_bits}: widen t_int_bits"
            )
        return v

    # -- rounds ----------------------------------------------------------------------------------

    def gate_bits(self, n: int) -> int:
        """Compared bits of the gate (remaining - 1 - P_i lies in [-(n-1), n-2])."""
        return max(1, (n - 1).bit_length())

    def rounds(self, n: int, remaining: int) -> int:
        """Rounds of :func:`hss.svt.svt_decide_party` for a batch of n with ``remaining`` accepts left."""
        total = 2 + _and_rounds(_nodes(self.t_bits), _nodes(self.b_bits)) + 1
        if n > remaining:
            total += 1 + _and_rounds(0, _nodes(self.gate_bits(n)))
        return total


# -- rounds of the carry trees and the fused AND (hss.svt) --------------------------------------------


def _nodes(kbits: int) -> int:
    return -(-kbits // GROUP)


def _level(nodes: int) -> int:
    """Node count after one carry-tree round (2 nodes -> the bit itself, counted as 0)."""
    return 0 if nodes <= 2 else -(-nodes // 2)


def _and_rounds(nx: int, ny: int) -> int:
    """Rounds of hss.svt's ``_and_gen`` for comparisons with nx, ny carry nodes (0: the bit, at degree t)."""
    rounds = 0
    while True:
        nx, ny = (0 if nx == 1 else nx), (0 if ny == 1 else ny)
        if nx == 0 and ny == 0:
            return rounds
        if (nx == 0 and ny <= 3) or (ny == 0 and nx <= 3) or (nx == 2 and ny == 2):
            return rounds + 1
        nx, ny = _level(nx), _level(ny)
        rounds += 1
