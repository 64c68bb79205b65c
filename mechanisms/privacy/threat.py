"""Threat models for the revealed value of a confidential accept-reject step (DESIGN.md §1–2).

Owns ``ThreatModel``: who looks at the revealed value and which noise shares they already know.
In a step every party j adds V_j ~ Gamma(1/m, 1) (so Σ_j V_j ~ Exp(1)) and, for the penalty method,
λ_j ~ N(0, σ²). An observer who knows t parties' shares can subtract them, so the noise still
protecting an honest party's record is Gamma((m − t)/m, 1) (plus N(0, (m − t)σ²)):

* ``colluding = 0``: the outside observer (the coordinator; it never colludes with parties);
* ``colluding = 1``: one party that knows its own noise;
* ``colluding = t``: t colluding parties pooling their noise.

Assumptions: the MPC reveals nothing but the stated value (sum / blinded product / sign), which
needs at most t < m/2 corrupted parties for Shamir-based protocols and t ≤ m − 1 for additive
secure aggregation — that is the secret-sharing layer's statement, not this module's. A party's
own records need no protection from itself, so the record at risk belongs to an honest party.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "REVEAL_PRIVACY",
    "SHAMIR_MODES",
    "RevealPrivacy",
    "RevealView",
    "ThreatModel",
    "coalition_view",
    "reveal_privacy",
]


@dataclass(frozen=True)
class ThreatModel:
    """``m`` parties, of which ``colluding`` pool their noise shares (0 = outside observer)."""

    m: int
    colluding: int = 0

    def __post_init__(self) -> None:
        if self.m < 1:
            raise ValueError(f"need at least one party, got m={self.m}")
        if not 0 <= self.colluding <= self.m - 1:
            raise ValueError(
                f"colluding must be in [0, m-1] = [0, {self.m - 1}] (at least one honest party holds "
                f"the record), got {self.colluding}"
            )

    @classmethod
    def single_party(cls, m: int) -> ThreatModel:
        """One party that knows its own noise shares V_j (and λ_j, W_j)."""
        return cls(m, 1)

    @property
    def residual_parties(self) -> int:
        """Number of parties whose noise the observer does not know."""
        return self.m - self.colluding

    @property
    def residual_shape(self) -> float:
        """Shape k of the unknown part of Σ_j V_j: Gamma(k, 1) with k = (m − t)/m."""
        return self.residual_parties / self.m

    @property
    def name(self) -> str:
        if self.colluding == 0:
            return f"outside observer (coordinator), m={self.m}"
        if self.colluding == 1:
            return f"one party knowing its own noise, m={self.m}"
        return f"{self.colluding} colluding parties, m={self.m}"


# What a coalition of registries observes in each reveal mode, and the noise left protecting an honest
# registry's record (DESIGN.md §2; ``hss/protocols.py`` and ``hss/svt.py`` for the protocols). ``t`` is
# the *session's* Shamir threshold (the degree of every sharing), ``q`` the number of colluding registries
# a registry's accounting assumes (its ``[budget] colluding``), q = 0 the coordinator alone:
#
# ======== ========= ============================================ =======================================
# mode     q         the coalition observes                       residual noise (``ThreatModel``)
# ======== ========= ============================================ =======================================
# any      0         the revealed value (S, S·W, the bit)         every party's: ThreatModel(m, 0)
# sum      1..m-1    S (opened to the coordinator only; assumed   the other m - q parties' noise
#                    to reach the coalition: conservative)
# sign     1..t      the accept bit                               the other m - q parties' noise
# sign     t+1..m-1  S: q > t shares rebuild the Shamir mask r,   the other m - q parties' noise
#                    and c = S + 2^K + r is opened to all; the
#                    pairwise zero-sharing still hides each
#                    honest party's own term from the sum
# blinded  1..t      the blinded product                          the other m - q parties' noise
# blinded  t+1..m-1  each honest party's own term x_j (it is      that party's own noise only:
#                    Shamir-shared with degree t)                 ThreatModel(m, m - 1)
# svt      1..t      the SVT output bits                          the other m - q parties' noise shares
# svt      t+1..m-1  every honest party's feature sum and noise   none that backs an epsilon: refused
# ======== ========= ============================================ =======================================


@dataclass(frozen=True)
class Observation:
    """What a coalition sees of one decision, as the accounting asks it: the charge and the planner ask these
    properties of the view (``RevealView.observation``), never the mode's name (issue 38).

    ``name``: the reveal mode whose output it is, or ``"everything"`` (no noise the accounting can rely on).
    ``noisy_sum``: the noisy sum S itself (a warm-start or effects release is accounted only so). ``of_sum``:
    S or a post-processing of it, so the sum-reveal curve bounds it; ``sum_bound`` says how, in the words a
    ledger's label carries. ``only_bit``: the accept bit alone, so its Bernoulli cover and its Rényi bound
    apply and a lazy coin stays secret.
    """

    name: str
    noisy_sum: bool = False
    of_sum: bool = False
    only_bit: bool = False
    sum_bound: str = "post-processing"


#: the view of a coalition that rebuilds every honest party's inputs (svt beyond its threshold): nothing holds
EVERYTHING = Observation("everything")


@dataclass(frozen=True)
class RevealView:
    """What a coalition sees of one decision (``observed``) and the noise protecting a record (``threat``).

    ``observed`` is one of ``"sum"``, ``"blinded"``, ``"sign"``, ``"svt"`` or ``"everything"`` (no noise
    the accounting can rely on: refuse); ``note`` says why, in words that name t and q;
    ``session_threshold`` is the t the view was derived for (``threat.colluding`` is q).
    """

    observed: str
    threat: ThreatModel
    note: str
    session_threshold: int

    @property
    def observation(self) -> Observation:
        """What ``observed`` is, as the accounting asks it (:class:`Observation`)."""
        return observation(self.observed)


def _sign_beyond(m: int, t: int, threat: ThreatModel, beyond: str) -> RevealView:
    return RevealView(
        "sum", threat, f"{beyond}: they rebuild the Shamir-shared mask, so learn S, not just the bit", t
    )


def _blinded_beyond(m: int, t: int, threat: ThreatModel, beyond: str) -> RevealView:
    return RevealView(
        "sum",
        ThreatModel(m, m - 1),
        f"{beyond}: they rebuild each honest party's Shamir-shared term, protected by its own noise only",
        t,
    )


def _svt_beyond(m: int, t: int, threat: ThreatModel, beyond: str) -> RevealView:
    return RevealView(
        "everything",
        threat,
        f"{beyond}: they rebuild every honest party's Shamir-shared feature sum and noise share",
        t,
    )


@dataclass(frozen=True)
class RevealPrivacy:
    """The privacy side of one reveal mode (the protocol side is ``hss.modes.RevealMode``, same name).

    ``beyond(m, t, threat, beyond)``: what q > t colluding registries observe (the rows ``t+1..m-1`` of
    the table above), or None when the coalition sees the revealed value whatever q (additive sum: it
    shares nothing with degree t). ``sees``: the within-threshold observation in words, default "the
    <mode> output". ``charged_per_run``: a party charges its budget once for the whole run (federated
    ABCDP's SVT: one event per run), not once per batch. ``observation``: what its output is to the
    accounting (within the threshold; beyond it ``beyond`` names another).
    """

    name: str
    beyond: Callable[[int, int, ThreatModel, str], RevealView] | None
    observation: Observation
    sees: str | None = None
    charged_per_run: bool = False


#: The rows of the table above by mode: the privacy side of the reveal-mode table, keyed by the names of
#: ``hss.modes.REVEAL`` (a test checks both have the same keys). The per-mode privacy functions are
#: ``reveal_sum``, ``reveal_blinded``, ``reveal_sign`` (and ``mechanisms.abcdp`` for svt); this table says
#: which observation they are fed.
REVEAL_PRIVACY: dict[str, RevealPrivacy] = {
    "sum": RevealPrivacy(
        "sum",
        None,
        Observation("sum", noisy_sum=True, of_sum=True),
        sees="S (conservative: it goes to the coordinator only)",
    ),
    "blinded": RevealPrivacy(
        "blinded",
        _blinded_beyond,
        Observation("blinded", of_sum=True, sum_bound="post-processing; not tight"),
    ),
    "sign": RevealPrivacy("sign", _sign_beyond, Observation("sign", of_sum=True, only_bit=True)),
    # the SVT's bits are accounted by mechanisms.abcdp (charged once per run), not by these properties
    "svt": RevealPrivacy("svt", _svt_beyond, Observation("svt"), charged_per_run=True),
}
#: the modes whose sharings are Shamir (degree t): a coalition beyond t sees more than the revealed value
SHAMIR_MODES: tuple[str, ...] = tuple(k for k, e in REVEAL_PRIVACY.items() if e.beyond is not None)


def reveal_privacy(mode: str) -> RevealPrivacy:
    """The privacy entry of reveal ``mode``; ``ValueError`` naming it and the known modes if there is none."""
    entry = REVEAL_PRIVACY.get(mode) if isinstance(mode, str) else None
    if entry is None:
        raise ValueError(f"unknown reveal mode {mode!r}; expected one of {tuple(REVEAL_PRIVACY)}")
    return entry


#: every observation a view can name: each mode's output, and "everything"
OBSERVATIONS: dict[str, Observation] = {
    **{k: e.observation for k, e in REVEAL_PRIVACY.items()},
    EVERYTHING.name: EVERYTHING,
}


def observation(name: str) -> Observation:
    """The observation named ``name`` (a reveal mode's output, or "everything"); ``ValueError`` naming the
    known ones if there is none."""
    found = OBSERVATIONS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown observation {name!r}; expected one of {tuple(OBSERVATIONS)}")
    return found


def coalition_view(mode: str, m: int, t: int, colluding: int) -> RevealView:
    """The row of the table above for reveal ``mode``, m parties, session threshold ``t``, q = ``colluding``.

    Raises ``ValueError`` for an unknown mode or out-of-range numbers (q in [0, m - 1], t in [0, m - 1]).
    """
    entry = reveal_privacy(mode)
    if not 0 <= t <= m - 1:
        raise ValueError(f"session threshold t = {t} must lie in [0, m - 1] = [0, {m - 1}]")
    q = colluding
    threat = ThreatModel(m, q)  # checks 0 <= q <= m - 1
    if q == 0:
        return RevealView(mode, threat, f"outside observer (the coordinator): it sees the {mode} output", t)
    if entry.beyond is None or q <= t:
        what = entry.sees or f"the {mode} output"
        return RevealView(
            mode, threat, f"{q} colluding parties (session threshold t = {t}) see {what} and own noise", t
        )
    return entry.beyond(m, t, threat, f"{q} colluding parties exceed the session threshold t = {t}")


def plain_threat_sentence(
    *, neighbours: str, colluding: int | None, m: int | None, t: int | None, security: str | None
) -> str:
    """The threat model a registry's accounting assumes, in sentences a lawyer can read (issue 37: the
    study request and the custodian's report print it). ``colluding`` None: every other registry (m - 1);
    ``m`` / ``t`` / ``security`` None: not one session's (the report's, over many)."""
    who = "one person's record was replaced by another's" if neighbours == "replace-one" else (
        "one person's record was added or removed"
    )
    if colluding is None:
        pool = "all the other registries together"
    elif colluding == 0:
        pool = "the coordinator alone, with no registry helping it"
    else:
        others = "registry" if colluding == 1 else "registries"
        pool = f"the coordinator together with up to {colluding} other {others}"
    parts = [
        f"What leaves this registry is noisy enough that anyone seeing it ({pool}) can tell only within the "
        f"stated epsilon and delta whether {who} (differential privacy)."
    ]
    parts.append(
        "The coordinator is trusted to follow the protocol but not to keep secrets: it sees only the "
        "released results (accept bits or noisy sums), never a record."
    )
    if security == "abort":
        parts.append(
            f"Registries that break the protocol{'' if t is None else f' (up to {t})'} are caught: every "
            "honest registry stops the step before anything is released."
        )
    elif security is not None:
        parts.append("The registries are trusted to follow the protocol (honest but curious).")
    if t is not None and m is not None:
        parts.append(
            f"More than {t} of the {m} registries acting together could rebuild the others' shares; the "
            "guarantee assumes they do not."
        )
    return " ".join(parts)
