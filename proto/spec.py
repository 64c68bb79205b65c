"""The session a coordinator opens with the parties, as plain frozen data (no protobuf here).

A session binds: its id, the m parties and their certificate identities, the threshold t, the fixed-point
format, the reveal mode, the model and its public parameters, the share-exchange topology, and (kept by
each side) a step counter that every later message carries. :mod:`proto.serde` converts to and from
the wire. A session may belong to a *run* (``run_id``): its step k is then run step ``first_run_step + k - 1``
of that run, which is what parties key their replay records and privacy charges on (:mod:`parties.replay`).
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hss.abort_modes import SECURITY
from hss.fixedpoint import FixedPoint
from hss.modes import REVEAL_MODES, SessionMode, reveal_mode
from hss.session import SIGN_PRECOMPUTE, SessionParams

TOPOLOGIES = ("mesh", "relay")
# REVEAL_MODES (from hss.modes, the reveal-mode table): the names a session may carry; parties.config too.
# SECURITY (from hss.abort_modes): "semi-honest" | "abort", a session's security; parties.config too
#: the one identity rule: a party's or the coordinator's certificate name (CN), see :func:`identity_problem`
_IDENTITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,127}$")


#: how much of a received string an error message (or an audit line) echoes back
SHOWN_CHARS = 80
MAX_ADDRESS_CHARS = 255  # a DNS name's limit
MAX_MODEL_CHARS = 256
#: run steps are kept in JSON files (ledgers, replay records) that any reader must read exactly: at most 2^53
MAX_RUN_STEP = 2**53
_ADDRESS = re.compile(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([0-9]{1,5})")


def address_problem(value: str, allow_port_0: bool = False) -> str | None:
    """Why ``value`` is not a ``host:port`` address (a DNS name, an IPv4 address or a bracketed IPv6
    address, and a port 1..65535, or 0 with ``allow_port_0``), or None if it is one."""
    if len(value) > MAX_ADDRESS_CHARS:
        return f"is {len(value)} characters long; an address has at most {MAX_ADDRESS_CHARS}"
    mt = _ADDRESS.fullmatch(value)
    if mt is None:
        return "is not host:port (a DNS name, an IPv4 address or a bracketed IPv6 address, then a port)"
    host, port = mt.group(1), int(mt.group(2))
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"has no valid IPv6 address in brackets ({host})"
    if not (0 if allow_port_0 else 1) <= port <= 65535:
        return f"has port {port}, outside {0 if allow_port_0 else 1}..65535"
    return None


def identity_problem(name: object) -> str | None:
    """Why ``name`` is not a valid identity (the certificate CN of a party or the coordinator), or None. The
    one rule for every identity confar reads: a party's config, a session spec, an experiment file, a
    certificate request."""
    if isinstance(name, str) and _IDENTITY.fullmatch(name):
        return None
    return "must be 1-63 characters of letters, digits, '.', '_' or '-', starting with a letter or digit"


def default_identity(pid: int) -> str:
    """The identity of party ``pid`` when a config or experiment file names none."""
    return f"party-{pid}"


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with the full length noted, so a
    long input is never echoed back whole (a 100 KB echo overflows the caller's header limit)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:limit]}… ({size} chars)"


class SpecError(ValueError):
    """A session description that cannot be run (says which field and why)."""


@dataclass(frozen=True)
class PartyEntry:
    """One party of a consortium: its id (1..m), its certificate identity and, where known, its address
    (host:port; empty when the coordinator gives it at session open, or the party only dials out). The one
    type for a session's parties (:class:`SessionSpec`) and a party's configured peers
    (``parties.config.PartyConfig.peers``); its identity follows :func:`identity_problem`."""

    id: int
    identity: str
    address: str = ""


@dataclass(frozen=True)
class SessionSpec:
    session_id: bytes
    parties: tuple[PartyEntry, ...]
    t: int
    reveal_mode: str
    model: str  # the ANALYSIS the session runs (a model plug-in, or abcdp-rff); the wire field's name
    model_params: dict[str, Any] = field(default_factory=dict)  # public parameters (a model's DecisionPlan)
    fmt: FixedPoint = field(default_factory=FixedPoint)
    topology: str = "mesh"
    relay_address: str = ""
    coordinator_identity: str = "coordinator"
    run_id: str = ""  # empty: the session belongs to no run
    first_run_step: int = 1  # the run step of the session's step 1
    sign_precompute: str = "inline"  # sign mode: hss.session.SIGN_PRECOMPUTE (the same at every party)
    precompute_ahead: bool = False  # sign mode: step k + 1's sign material made after step k (parties.ahead)
    security: str = "semi-honest"  # hss.modes.SECURITY: "abort" catches up to t deviating parties (#25)
    study: str = ""  # issue 37: the study document's canonical text (proto.study), "" for none

    def __post_init__(self) -> None:
        if self.run_id:
            check_run_id(self.run_id)
        if not isinstance(self.first_run_step, int) or not 1 <= self.first_run_step <= MAX_RUN_STEP:
            got = shown(self.first_run_step)
            raise SpecError(f"first_run_step must be an integer >= 1 and <= 2^53, got {got}")
        if not self.run_id and self.first_run_step != 1:
            raise SpecError(f"first_run_step = {self.first_run_step} needs a run_id")
        if not 16 <= len(self.session_id) <= 64:
            raise SpecError(f"session_id must be 16..64 bytes, got {len(self.session_id)}")
        ids = [p.id for p in self.parties]
        if sorted(ids) != list(range(1, len(ids) + 1)):
            raise SpecError(f"parties must be numbered 1..m without gaps, got {sorted(ids)}")
        names = [p.identity for p in self.parties]
        if len(set(names)) != len(names) or self.coordinator_identity in names:
            raise SpecError(f"party identities must be distinct and differ from the coordinator's: {names}")
        for n in [*names, self.coordinator_identity]:
            if identity_problem(n) is not None:
                raise SpecError(f"identity {shown(n)} is not a valid certificate name")
        if self.reveal_mode not in REVEAL_MODES:
            raise SpecError(f"reveal_mode {shown(self.reveal_mode)} is not one of {REVEAL_MODES}")
        if self.sign_precompute not in SIGN_PRECOMPUTE:
            raise SpecError(f"sign_precompute {shown(self.sign_precompute)} is not one of {SIGN_PRECOMPUTE}")
        if not isinstance(self.precompute_ahead, bool):
            raise SpecError(f"precompute_ahead must be true or false, got {shown(self.precompute_ahead)}")
        if self.precompute_ahead and not reveal_mode(self.reveal_mode).sign_precompute:
            raise SpecError(f"precompute_ahead applies to reveal_mode 'sign' only, not {self.reveal_mode!r}")
        if self.topology not in TOPOLOGIES:
            raise SpecError(f"topology {shown(self.topology)} is not one of {TOPOLOGIES}")
        if self.topology == "relay" and not self.relay_address:
            raise SpecError("topology 'relay' needs relay_address (the coordinator's relay endpoint)")
        for where, addr in [("relay_address", self.relay_address)] + [
            (f"party {p.id} address", p.address) for p in self.parties
        ]:
            why = address_problem(addr) if addr else None
            if why is not None:
                raise SpecError(f"{where} {shown(addr)} {why}")
        if not self.model:
            raise SpecError("model must be named")
        if len(self.model) > MAX_MODEL_CHARS or not self.model.isprintable():
            raise SpecError(
                f"model {shown(self.model)} must be at most {MAX_MODEL_CHARS} printable characters"
            )
        try:
            json.dumps(self.model_params)
        except TypeError as exc:
            raise SpecError(f"model_params must be JSON-serialisable: {exc}") from exc
        try:
            params = self.params()
            reveal_mode(self.reveal_mode).check_supported(params)
        except ValueError as exc:
            raise SpecError(str(exc)) from exc
        if self.lazy_coin:
            if not reveal_mode(self.reveal_mode).lazy_coin or self.sign_precompute != "inline":
                raise SpecError(
                    "model_params.lazy (a secret coin ANDed with the accept bit inside the protocol) needs "
                    f"reveal_mode 'sign' with sign_precompute 'inline', got {self.reveal_mode!r} / "
                    f"{self.sign_precompute!r}"
                )
            if self.precompute_ahead:
                raise SpecError("model_params.lazy makes its coin in the step: no precompute_ahead")
        if self.security not in SECURITY:
            raise SpecError(f"security {shown(self.security)} is not one of {SECURITY}")
        try:
            self.protocol  # resolved once, here, and kept  # noqa: B018
        except ValueError as exc:
            raise SpecError(str(exc)) from exc

    @functools.cached_property
    def protocol(self) -> SessionMode:
        """The session's reveal mode resolved once for its security, sign precompute, lazy coin and
        precompute ahead (``hss.modes.RevealMode.under``): the party machine, decoder and rounds every batch
        of the session runs; the spec refuses at construction a combination that is not offered."""
        return reveal_mode(self.reveal_mode).under(
            self.security, self.sign_precompute, self.lazy_coin, self.precompute_ahead
        )

    @property
    def m(self) -> int:
        return len(self.parties)

    @property
    def lazy_coin(self) -> bool:
        """Whether the protocol ANDs a secret lazy coin with the accept bit: ``model_params.lazy`` is set.
        That key of the session's decision plan (``mechanisms.kinds.plan``) is the one the protocol layer
        acts on; the analysis parses the plan itself."""
        return isinstance(self.model_params, dict) and self.model_params.get("lazy") is not None

    def params(self) -> SessionParams:
        return SessionParams(m=self.m, t=self.t, session_id=self.session_id, fmt=self.fmt)

    def party(self, pid: int) -> PartyEntry:
        for p in self.parties:
            if p.id == pid:
                return p
        raise SpecError(f"party {pid} is not in this session")

    def run_step(self, step: int) -> int:
        """The run step of session step ``step`` (0 without a run_id)."""
        return self.first_run_step + step - 1 if self.run_id else 0

    def id_of(self, identity: str) -> int | None:
        for p in self.parties:
            if p.identity == identity:
                return p.id
        return None


def check_run_id(run_id: str) -> None:
    """Raise :class:`SpecError` unless ``run_id`` is a valid run id (1..128 printable characters)."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise SpecError(
            f"run_id {str(run_id)[:40]!r} must be 1..128 characters of letters, digits and ._:/+=-, "
            "starting with a letter or digit"
        )
