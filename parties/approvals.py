"""The registry's study approvals (issue 37): its custodian's decisions, in ``<state_dir>/approvals.log``.

``confar-party study approve FILE --max-epsilon E --expires DATE`` appends one record approving the study
document FILE (``proto.study``) with a cap: at most ε = E (at δ) charged to the study's sessions, by this
registry's own accountant, until the end of DATE (UTC); ``confar-party study revoke`` appends one that
revokes it. A later approval of the same study replaces the earlier one (a new cap or expiry); an approval
after a revocation makes the study live again. The daemon reads the file when it changes
(:class:`ApprovalStore`, by its size and modification time) and never writes it.

**Format** (version 1): one JSON object a line, keys sorted, each with ``"sha256"`` as in the ledger journal
(``parties.journal.encode_line``); line 1 the header ``{"confar_approvals": 1, "registry": <identity>}``,
then records ``{"seq": k, "action": "approve" | "revoke", "registry": <identity>, "study": <digest>, "at":
<UTC time>, "by": <custodian>, ...}``; an approval also holds the whole study document (``"doc"``),
``"max_epsilon"``, ``"delta"``, ``"expires"`` (a date) and ``"note"``; a revocation its ``"reason"``.

**The registry's own.** The file lives in the registry's state folder (0600) and every record names the
registry; a registry with TLS signs each record with its own TLS key (ECDSA P-256, SHA-256, over the
record's canonical form without ``signature`` and ``sha256``) and records its certificate's fingerprint
(``"cert_sha256"``); reading checks each signature against the registry's current certificate. So a record
that names another registry, or was signed with another key (another registry's, or this one's before its
certificate was renewed: approve again), or was edited (its checksum or signature fails), is refused naming
the file, the line and what is wrong (:class:`ApprovalError`); nothing is skipped. A registry without TLS
(``--insecure``, local experiments) writes and accepts unsigned records, checksummed only.

**Crash safety.** A record is one ``os.write`` of the whole line, then ``fsync``; the command says
"approved" only after that. A crash before can leave a torn last line (no newline): it never counted and is
dropped when read, and cut off before the next record is appended. Writers (the commands) hold an exclusive
``flock`` on the file while they read and append; the daemon only reads.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from parties.config import PartyConfig
from parties.journal import encode_line
from proto.files import PRIVATE_MODE, fsync_dir, make_private
from proto.spec import shown
from proto.study import Study, StudyError

APPROVALS_FILE = "approvals.log"
APPROVALS_VERSION = 1
ACTIONS = ("approve", "revoke")


class ApprovalError(RuntimeError):
    """The approvals file cannot be read or trusted, or an approval cannot be made (names file and line)."""


def _canonical(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def time_text(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Signer:
    """The registry's identity and, with TLS, its key (to sign) and certificate (to verify)."""

    identity: str
    cert_pem: bytes | None = None
    key_pem: bytes | None = None

    @property
    def fingerprint(self) -> str:
        if self.cert_pem is None:
            return ""
        cert = x509.load_pem_x509_certificate(self.cert_pem)
        return cert.fingerprint(hashes.SHA256()).hex()

    def sign(self, body: dict[str, Any]) -> str:
        if self.key_pem is None:
            return ""
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ApprovalError("this registry's TLS key must be an EC key to sign approvals")
        return base64.b64encode(key.sign(_canonical(body), ec.ECDSA(hashes.SHA256()))).decode()

    def verify(self, body: dict[str, Any], signature: str) -> str | None:
        """Why ``signature`` is not this registry's over ``body``, or None."""
        if self.cert_pem is None:
            return None
        if not signature:
            return "it is not signed (this registry signs its approvals with its TLS key)"
        cert = x509.load_pem_x509_certificate(self.cert_pem)
        if body.get("cert_sha256") != self.fingerprint:
            return (
                f"it was signed with the key of certificate {shown(body.get('cert_sha256'))}, not this "
                f"registry's current certificate {self.fingerprint[:16]}… (another registry's, or this one's "
                "before it was renewed: approve the study again)"
            )
        public = cert.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            return "this registry's certificate has no EC key to verify approvals with"
        try:
            public.verify(
                base64.b64decode(signature, validate=True), _canonical(body), ec.ECDSA(hashes.SHA256())
            )
        except (InvalidSignature, ValueError):
            return "its signature does not verify under this registry's certificate (the record was altered)"
        return None


@dataclass(frozen=True)
class Approval:
    """A study's approval here: the study, the cap, the expiry, who and when; ``revoked``: the revocation
    that followed it (its time and reason), if any."""

    study: Study
    seq: int
    at: str
    by: str
    max_epsilon: float
    delta: float
    expires: dt.date
    note: str = ""
    revoked: tuple[str, str, str] | None = None  # (at, by, reason)

    @property
    def ends(self) -> dt.datetime:
        """The first instant it no longer holds: midnight UTC after its expiry date."""
        return dt.datetime.combine(self.expires + dt.timedelta(days=1), dt.time(), dt.UTC)

    def expired(self, now: dt.datetime | None = None) -> bool:
        return (now or utc_now()) >= self.ends

    def live(self, now: dt.datetime | None = None) -> bool:
        return self.revoked is None and not self.expired(now)

    def status(self, now: dt.datetime | None = None) -> str:
        if self.revoked is not None:
            return f"revoked {self.revoked[0]} by {self.revoked[1]}: {self.revoked[2]}"
        if self.expired(now):
            return f"expired (ended {self.expires.isoformat()})"
        return f"live until the end of {self.expires.isoformat()} (UTC)"

    def to_dict(self, now: dt.datetime | None = None) -> dict[str, Any]:
        return {
            "study": self.study.digest,
            "title": self.study.title,
            "reference": self.study.reference,
            "approved_at": self.at,
            "approved_by": self.by,
            "max_epsilon": self.max_epsilon,
            "delta": self.delta,
            "expires": self.expires.isoformat(),
            "note": self.note,
            "revoked": None
            if self.revoked is None
            else {"at": self.revoked[0], "by": self.revoked[1], "reason": self.revoked[2]},
            "live": self.live(now),
            "status": self.status(now),
        }


@dataclass(frozen=True)
class ApprovalBook:
    """What the file holds: each study's latest approval (with its revocation, if any), in file order."""

    path: Path
    approvals: dict[str, Approval]
    torn: bool = False
    records: int = 0

    def get(self, digest: str) -> Approval | None:
        return self.approvals.get(digest)


def _parse_line(line: bytes, path: Path, number: int) -> dict[str, Any]:
    where = f"approval file {path} line {number}"
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApprovalError(f"{where} is corrupt (not JSON: {exc}); restore the file from a backup") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("sha256"), str):
        raise ApprovalError(f"{where} is corrupt (not a checksummed record); restore the file from a backup")
    stated = obj.pop("sha256")
    if stated != hashlib.sha256(_canonical(obj)).hexdigest():
        raise ApprovalError(
            f"{where} was altered or damaged (checksum mismatch): an approval is changed only by a new "
            "record (`confar-party study approve` / `revoke`); restore the file from a backup"
        )
    return obj


def read_approvals(path: Path, signer: Signer) -> ApprovalBook:
    """The approvals at ``path`` (an empty book when there is no file), every line checked; raises
    :class:`ApprovalError` naming the file and the line for anything but a torn last line."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return ApprovalBook(path, {})
    except OSError as exc:
        raise ApprovalError(f"approval file {path} cannot be read ({exc.strerror})") from exc
    if not data:  # made by a command that stopped before its first write: nothing was approved
        return ApprovalBook(path, {})
    lines = data.split(b"\n")
    tail = lines.pop()
    if not lines:
        if tail:
            return ApprovalBook(path, {}, torn=True)  # a header whose write never completed
        raise ApprovalError(f"approval file {path} is empty (no header line); restore it from a backup")
    header = _parse_line(lines[0], path, 1)
    if header.get("confar_approvals") != APPROVALS_VERSION:
        raise ApprovalError(f"approval file {path} line 1 is not a version {APPROVALS_VERSION} header")
    if header.get("registry") != signer.identity:
        raise ApprovalError(
            f"approval file {path} belongs to registry {shown(header.get('registry'))}, not to this registry "
            f"{signer.identity!r}: an approval is the registry's own; approve the study here"
        )
    approvals: dict[str, Approval] = {}
    for number, line in enumerate(lines[1:], start=2):
        rec = _parse_line(line, path, number)
        where = f"approval file {path} line {number}"
        if rec.get("seq") != number - 1:
            raise ApprovalError(f"{where}: record {shown(rec.get('seq'))} where record {number - 1} belongs")
        if rec.get("registry") != signer.identity:
            raise ApprovalError(
                f"{where} is an approval of registry {shown(rec.get('registry'))}, not of this registry "
                f"{signer.identity!r}: an approval is the registry's own (no other party can approve for it)"
            )
        signature = rec.pop("signature", "")
        why = signer.verify(rec, signature if isinstance(signature, str) else "")
        if why is not None:
            raise ApprovalError(f"{where}: {why}")
        try:
            _apply(approvals, rec, where)
        except (StudyError, KeyError, TypeError, ValueError) as exc:
            raise ApprovalError(f"{where} is not a valid record: {exc}") from exc
    return ApprovalBook(path, approvals, torn=bool(tail), records=len(lines) - 1)


def _apply(approvals: dict[str, Approval], rec: dict[str, Any], where: str) -> None:
    action, digest = rec.get("action"), rec.get("study")
    if action not in ACTIONS or not isinstance(digest, str):
        raise ValueError(f"action must be one of {ACTIONS} with a study digest, got {shown(action)}")
    if action == "revoke":
        old = approvals.get(digest)
        if old is None:
            raise ValueError(f"it revokes study {digest[:16]}…, which was never approved here")
        approvals[digest] = _replace_revoked(old, (str(rec["at"]), str(rec["by"]), str(rec["reason"])))
        return
    study = Study.from_doc(rec["doc"], f"{where} study")
    if study.digest != digest:
        raise ValueError(f"its study document hashes to {study.digest[:16]}…, not to {digest[:16]}…")
    cap, delta = float(rec["max_epsilon"]), float(rec["delta"])
    if not (math.isfinite(cap) and cap > 0 and 0 < delta < 1):
        raise ValueError(f"max_epsilon must be > 0 and delta in (0, 1), got {cap} and {delta}")
    approvals[digest] = Approval(
        study=study,
        seq=int(rec["seq"]),
        at=str(rec["at"]),
        by=str(rec["by"]),
        max_epsilon=cap,
        delta=delta,
        expires=dt.date.fromisoformat(str(rec["expires"])),
        note=str(rec.get("note", "")),
    )


def _replace_revoked(a: Approval, revoked: tuple[str, str, str]) -> Approval:
    import dataclasses

    return dataclasses.replace(a, revoked=revoked)


def append_record(path: Path, signer: Signer, fields: dict[str, Any]) -> tuple[ApprovalBook, int]:
    """Append one record durably (under an exclusive lock: the file is read and checked first, a torn last
    line cut off, the header written if the file is new); returns the book as it was and the record's seq.
    ``fields`` are the record's own (action, study, ...); this adds seq, registry, signature, checksum."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_MODE)
    try:
        make_private(path)
        fcntl.flock(fd, fcntl.LOCK_EX)
        book = read_approvals(path, signer)
        size = os.fstat(fd).st_size
        good = size - _torn_bytes(path) if book.torn else size
        if good != size:
            os.ftruncate(fd, good)
        out = b""
        if good == 0:
            out += encode_line({"confar_approvals": APPROVALS_VERSION, "registry": signer.identity})
        seq = book.records + 1
        body = {**fields, "seq": seq, "registry": signer.identity}
        if signer.cert_pem is not None:
            body["cert_sha256"] = signer.fingerprint
        signature = signer.sign(body)
        out += encode_line({**body, "signature": signature} if signature else body)
        os.lseek(fd, good, os.SEEK_SET)
        view = memoryview(out)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if good == 0:
        fsync_dir(path.parent)
    return book, seq


def _torn_bytes(path: Path) -> int:
    data = path.read_bytes()
    return len(data) - (data.rfind(b"\n") + 1)


def signer_of(cfg: PartyConfig) -> Signer:
    """The registry's identity and, with TLS, its certificate and key."""
    if not cfg.has_tls:
        return Signer(cfg.identity)
    assert cfg.tls_cert is not None and cfg.tls_key is not None
    return Signer(cfg.identity, cfg.tls_cert.read_bytes(), cfg.tls_key.read_bytes())


def approval_store(cfg: PartyConfig) -> ApprovalStore:
    """The daemon's (or a command's) reader of ``<state_dir>/approvals.log``."""
    return ApprovalStore(cfg.state_dir / APPROVALS_FILE, signer_of(cfg))


class ApprovalStore:
    """The daemon's view of ``approvals.log``: read again whenever its size or modification time changes
    (the custodian's commands append while the daemon runs), never written."""

    def __init__(self, path: Path, signer: Signer) -> None:
        self.path, self.signer = path, signer
        self._stamp: tuple[int, int] | None = None
        self._book = ApprovalBook(path, {})

    def book(self) -> ApprovalBook:
        """The current approvals; :class:`ApprovalError` when the file cannot be trusted."""
        try:
            st = self.path.stat()
            stamp: tuple[int, int] | None = (st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp or stamp is None:
            self._book = read_approvals(self.path, self.signer)
            self._stamp = stamp
        return self._book
