"""Run resume on the party side: the persisted record of each run's last completed run step.

A coordinator that crashes after the parties completed a step but before it used the result must not make
the parties pay the privacy cost of that step twice. A session can therefore name a *run* (``run_id``) and
the run step its first step is (``first_run_step``); each party keeps, per run, its **last completed run
step**: the run step, a SHA-256 digest of what the step was asked (:func:`step_digest`), the id of the
session that computed it, and this party's final messages to the receiver. When a later session of the
same run asks for that run step again with the same digest, and *every* party holds it from the same
session (the coordinator forwards each party's :class:`RunRecord` summary at ConnectSession), the parties
return the stored messages: no recomputation, no new charge, the coordinator reconstructs the same
decisions. Returning the stored messages again reveals nothing new: the coordinator may have kept them
the first time. A different digest for the held run step is refused (FAILED_PRECONDITION naming the step);
if not every party holds it from one session (shares only combine within the session that made them), it
is evaluated afresh in the new session. Evaluated afresh, it is **not charged again** by a party whose
privacy ledger shows it charged with the same digest under the same run noise key (below), when the reveal
mode makes the revealed result a function of the inputs and the parties' noise only (sum, blinded, sign
without a lazy coin; ``parties.daemon.reproducible``): the re-evaluation then releases exactly what the
first evaluation released (or would have), so the release is counted once. Otherwise it is charged again:
conservative, never under-charged.

A run step of a federated ABCDP run (reveal mode ``svt``) also records the public part of the party's sparse-
vector state (:class:`SvtStep`: the run's plan digest, the SVT counters before the step, the step's revealed
bits), from which ``parties.abcdp`` rebuilds the state before or after the step in a later session (the
threshold share from the run noise key, the feature sum from the records), in the same atomic write.

A run step of a blocked run (a model with a registry random intercept, ``mechanisms.samplers.blocked``) also
records this registry's own block (:class:`LocalStep`: its effect's local state before and after the sweep
and the sweep's public request), secret to the registry, in the same atomic write, so that a later session
continues the registry's local chain where the run is, a replayed step moves it past the step, and the held
step evaluated afresh starts from the same state with the same local randomness (it draws the same).

The record also holds the SHA-256 of the records snapshot the step ran on (``parties.sources``): a daemon
restarted on changed records refuses to continue the run (FAILED_PRECONDITION naming both hashes), since a
chain whose later steps see other data is no longer exact.

Storage: ``<state_dir>/runs/<sha256(run_id)[:32]>.json``, one file per run, bounded (only the last completed
run step counts; earlier run steps asked again are evaluated afresh, since the party cannot verify them,
and charged unless the ledger's charge record covers them). The file is a sequence of records, one JSON
document a line, each with a SHA-256 checksum of its content; the **last whole line** is the run's record.
A save is durable before it returns and happens after the step's charge and before its messages leave the
party: one line appended and fdatasynced (issue 26: no temporary file, rename or directory fsync per run
step; the file and its directory entry were made durable when it was first written), or, for the first
record of a run, once the file holds ``REWRITE_BYTES`` or more, or when its last byte is not a newline,
the whole file replaced by that one line (0600, :func:`proto.files.write_durable`: temporary file, fsync,
atomic rename, directory fsync). A crash mid-append can leave a **torn last line** (no newline): its save
never returned, so no message of its step left the party, and it is ignored (the line before it is the
record; the next save rewrites the file). :meth:`ReplayStore.compact` (at a session's close and the
daemon's stop) rewrites a file that was appended to as its record alone, so the file is one JSON document
whenever no session of its run is open. A file without any newline is read whole, as one document (the
format of older versions, which the next save replaces). An unreadable, corrupt, foreign or mismatched
record is refused with :class:`ReplayFileError` naming the file (never deleted silently: the operator moves
it away, after which the run step is evaluated afresh).

**Run noise key** (:meth:`ReplayStore.run_key`): ``<state_dir>/runs/<sha256(run_id)[:32]>.key``, this party's
secret key of the run, 32 bytes from ``os.urandom``, created durably (0600, fsync) when the run's first
session opens here and read by every later one; it never leaves the party and is never derived from anything
the coordinator sends (only with the testing-only ``fixed_rng_key`` is it derived from that key and the run
id, so that two test consortia can draw the same noise). The noise of run step s is keyed by it and by the
step's digest (:func:`run_step_keys`), so a re-evaluation of run step s with the same inputs, in any later
session, reproduces exactly the same noise terms and therefore the same revealed result: charging it again
would count one release twice. Different inputs for run step s get independent noise (a different digest),
so noise is never reused across different queries. The key's :func:`key_id` (a hash, not the key) is
recorded with each charge (:class:`proto.records.RunCharge`): a key that was lost and re-created
no longer matches, and its run steps are charged again.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from hss.randomness import derive_key
from proto.files import make_private, write_durable
from proto.records import RunStepRef
from proto.spec import SECURITY, SessionSpec, check_run_id

RUNS_DIR = "runs"
REWRITE_BYTES = 256 * 1024  # a run's file is rewritten with its last record alone once it holds this much
FORMAT_VERSION = 1
KEY_FORMAT_VERSION = 1
_DIGEST_DOMAIN = b"confar/run-step/v1"
_KEY_ID_DOMAIN = b"confar/run-noise-key-id/v1"


class ReplayFileError(RuntimeError):
    """A run record that cannot be read or trusted (the message names the file and what is wrong)."""


SVT_COUNTERS = ("count", "epoch", "n_decided", "done")


@dataclass(frozen=True)
class SvtStep:
    """What a completed run step of a federated ABCDP run (reveal mode svt) leaves of this party's sparse-
    vector state, all of it public: the run's plan digest (:func:`step_digest` of run step 0 without inputs),
    the SVT counters before the step (``mechanisms.abcdp.svt_state.SvtCounters.to_dict()``) and the step's
    revealed bits. The secret parts are not kept: the threshold share of an epoch is drawn again from the run
    noise key, the feature sum S_j is computed again from the records (whose snapshot hash the record holds),
    so the state before and after the step can be rebuilt (``parties.abcdp``)."""

    plan_digest: bytes
    before: dict[str, int | bool]
    revealed: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class LocalStep:
    """What a completed run step of a blocked run (``mechanisms.samplers.blocked``) leaves of this registry's
    own block, all of it secret to the registry (it never leaves the party): the sweep, its local state before
    and after the sweep (``mechanisms.samplers.local.LocalState.to_json``: the effect's coordinate per chain,
    the coordinates chosen, the local scales), and the public parts of the sweep's request and of the one
    before it (every chain's state, the asked chains and their proposals), against which the next sweep's
    chain states are checked (each is its chain's state or its proposal). A session of the run continues
    from ``after``; the held step evaluated afresh starts again from ``before`` with the same local
    randomness (keyed by the step), so it draws the same."""

    sweep: int
    before: dict[str, Any]
    after: dict[str, Any]
    request: dict[str, Any]  # {"states": [[...]], "chain": [...], "theta_star": [[...]]}
    previous: dict[str, Any] | None = None  # the sweep before's request (None at sweep 0)


@dataclass(frozen=True)
class RunRecord:
    """One party's last completed run step of a run, with its final messages to the receiver."""

    ref: RunStepRef
    batch: int
    rounds: int  # protocol rounds the step took (reported again on replay)
    messages: tuple[tuple[int, npt.NDArray[np.uint64]], ...]  # this party's (round, payload) to the receiver
    data_sha256: str = ""  # the snapshot of this party's records the step ran on ("": none, or older file)
    svt: SvtStep | None = None  # reveal mode svt: the SVT state the step started from and its bits
    security: str = "semi-honest"  # the session's security: the stored messages decode only under it
    local: LocalStep | None = None  # a blocked run: this registry's own block before and after the step

    @property
    def run_step(self) -> int:
        return self.ref.run_step


def step_digest(
    spec: SessionSpec, run_step: int, batch: int, inputs: Mapping[str, npt.NDArray[Any]]
) -> bytes:
    """SHA-256 over everything that determines a run step's output except the session's keys and noise
    (the session id is left out: a resumed session has a new one):
    the run id and step, the batch size, the inputs (names, dtypes, shapes, bytes), and the session's
    model, model parameters, reveal mode, threshold, fixed-point format and party identities."""
    h = hashlib.sha256()

    def put(b: bytes) -> None:
        h.update(struct.pack("<Q", len(b)))
        h.update(b)

    put(_DIGEST_DOMAIN)
    put(spec.run_id.encode())
    put(struct.pack("<QQ", run_step, batch))
    session = {
        "model": spec.model,
        "model_params": spec.model_params,
        "reveal_mode": spec.reveal_mode,
        "t": spec.t,
        "fmt": dataclasses.asdict(spec.fmt),
        "parties": [[p.id, p.identity] for p in spec.parties],
    }
    put(json.dumps(session, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(inputs):
        a = np.ascontiguousarray(inputs[name])
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        a = a.astype(dt, copy=False)
        put(name.encode())
        put(dt.str.encode())
        put(json.dumps(list(a.shape)).encode())
        put(a.tobytes())
    return h.digest()


def plan_digest(spec: SessionSpec) -> bytes:
    """The digest of a run's plan: :func:`step_digest` of run step 0 without inputs (the run id and the
    session's model, model_params, reveal mode, threshold, format and parties; no session id). A reveal mode
    charged once per run records that charge under it (as run step 0, ``parties.privacy_budget``); an ABCDP
    run step's record keeps it (:class:`SvtStep`)."""
    return step_digest(spec, 0, 0, {})


def key_id(key: bytes) -> str:
    """A public name of a run noise key (32 hex digits of a domain-separated SHA-256; not the key)."""
    return hashlib.sha256(_KEY_ID_DOMAIN + key).hexdigest()[:32]


def run_step_keys(run_key: bytes, run_step: int, digest: bytes) -> tuple[bytes, bytes]:
    """The keys of run step ``run_step`` asked with ``digest``: (its noise terms, its reveal-side randomness,
    e.g. blinded mode's E term). Same run key, step and digest: same keys, in any session."""
    if len(digest) != 32:
        raise ValueError("a run step's noise is keyed by its 32-byte step digest")
    return (
        derive_key(run_key, digest, b"run-step/%d/noise" % run_step),
        derive_key(run_key, digest, b"run-step/%d/reveal" % run_step),
    )


def _body(rec: RunRecord, identity: str) -> dict[str, Any]:
    return {
        "version": FORMAT_VERSION,
        "party": identity,
        "run_id": rec.ref.run_id,
        "run_step": rec.ref.run_step,
        "digest": rec.ref.digest.hex(),
        "execution": rec.ref.execution.hex(),
        "batch": rec.batch,
        "rounds": rec.rounds,
        "messages": [
            {"round": r, "payload": base64.b64encode(np.ascontiguousarray(p, dtype="<u8").tobytes()).decode()}
            for r, p in rec.messages
        ],
        **({"data_sha256": rec.data_sha256} if rec.data_sha256 else {}),
        **({"svt": _svt_body(rec.svt)} if rec.svt is not None else {}),
        **({"security": rec.security} if rec.security != "semi-honest" else {}),
        **({"local": dataclasses.asdict(rec.local)} if rec.local is not None else {}),
    }


def _local_parse(doc: Any) -> LocalStep:
    """A stored :class:`LocalStep`, its states checked by ``LocalState.from_json`` (ValueError)."""
    from mechanisms.samplers.local import LocalState

    keys = {"sweep", "before", "after", "request", "previous"}
    if not isinstance(doc, dict) or set(doc) != keys:
        raise ValueError(f"local must hold exactly {sorted(keys)}")
    if type(doc["sweep"]) is not int or doc["sweep"] < 0:
        raise ValueError("local.sweep must be an integer >= 0")
    LocalState.from_json(doc["before"])
    LocalState.from_json(doc["after"])
    for key in ("request", "previous"):
        req = doc[key]
        if req is None and key == "previous":
            continue
        if not isinstance(req, dict) or set(req) != {"states", "chain", "theta_star"}:
            raise ValueError(f"local.{key} must hold exactly states, chain, theta_star")
    return LocalStep(doc["sweep"], doc["before"], doc["after"], doc["request"], doc["previous"])


def _svt_body(svt: SvtStep) -> dict[str, Any]:
    bits = np.packbits(np.asarray(svt.revealed, dtype=bool), bitorder="little")
    return {
        "plan_digest": svt.plan_digest.hex(),
        "before": dict(svt.before),
        "revealed": base64.b64encode(bits.tobytes()).decode(),
    }


def _svt_parse(doc: Any, batch: int) -> SvtStep:
    if not isinstance(doc, dict) or set(doc) != {"plan_digest", "before", "revealed"}:
        raise ValueError("svt must hold exactly plan_digest, before, revealed")
    plan_digest = bytes.fromhex(doc["plan_digest"])
    if len(plan_digest) != 32:
        raise ValueError("svt.plan_digest must be 32 bytes")
    before = doc["before"]
    if not isinstance(before, dict) or sorted(before) != sorted(SVT_COUNTERS):
        raise ValueError(f"svt.before must hold exactly {list(SVT_COUNTERS)}")
    if not all(type(before[k]) is int and before[k] >= 0 for k in SVT_COUNTERS[:3]) or not isinstance(
        before["done"], bool
    ):
        raise ValueError("svt.before: count, epoch, n_decided must be integers >= 0 and done a bool")
    raw = base64.b64decode(doc["revealed"], validate=True)
    if len(raw) != (batch + 7) // 8:
        raise ValueError(f"svt.revealed holds {len(raw)} bytes, not the {(batch + 7) // 8} of {batch} bits")
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")
    if bits[batch:].any():
        raise ValueError("svt.revealed has bits past the batch")
    return SvtStep(plan_digest, dict(before), bits[:batch].astype(bool))


def _checksum(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ReplayStore:
    """The run records of one party, one file per run under ``<state_dir>/runs``."""

    def __init__(self, state_dir: Path, identity: str) -> None:
        self.root = state_dir / RUNS_DIR
        self.identity = identity
        self._appended: set[Path] = set()  # run files appended to since they were last written whole

    def path_for(self, run_id: str) -> Path:
        return self.root / f"{hashlib.sha256(run_id.encode()).hexdigest()[:32]}.json"

    def load(self, run_id: str) -> RunRecord | None:
        """The last completed run step of ``run_id`` (None: none completed here).

        Raises :class:`ReplayFileError` naming the file if it cannot be read or trusted."""
        check_run_id(run_id)
        path = self.path_for(run_id)
        if not path.exists():
            return None
        doc = _read_last_record(path)
        try:
            return self._parse(doc, run_id)
        except (ValueError, KeyError, TypeError) as exc:
            raise ReplayFileError(f"run record {path} is corrupt ({exc}){_ADVICE}") from exc

    def _parse(self, doc: Any, run_id: str) -> RunRecord:
        _check_envelope(doc, FORMAT_VERSION, "run record", "record", self.identity, run_id)
        step, batch, rounds = doc["run_step"], doc["batch"], doc["rounds"]
        if not all(type(v) is int and v >= 1 for v in (step, batch, rounds)):
            raise ValueError(f"run_step {step!r}, batch {batch!r}, rounds {rounds!r}: need positive integers")
        digest, execution = bytes.fromhex(doc["digest"]), bytes.fromhex(doc["execution"])
        if len(digest) != 32 or not 16 <= len(execution) <= 64:
            raise ValueError("digest must be 32 bytes and execution a 16..64 byte session id")
        messages = []
        for msg in doc["messages"]:
            raw = base64.b64decode(msg["payload"], validate=True)
            if len(raw) % 8:
                raise ValueError("a stored payload is not a whole number of uint64 words")
            messages.append((int(msg["round"]), np.frombuffer(raw, dtype="<u8").astype(np.uint64)))
        if not messages:
            raise ValueError("no stored messages")
        data = doc.get("data_sha256", "")
        if not isinstance(data, str) or (data and len(bytes.fromhex(data)) != 32):
            raise ValueError("data_sha256 must be a SHA-256 in hex")
        ref = RunStepRef(run_id, step, digest, execution)
        svt = _svt_parse(doc["svt"], batch) if "svt" in doc else None
        security = doc.get("security", "semi-honest")
        if security not in SECURITY:
            raise ValueError(f"security {security!r} is not one of {SECURITY}")
        local = _local_parse(doc["local"]) if "local" in doc else None
        return RunRecord(
            ref, batch, rounds, tuple(messages), data_sha256=data, svt=svt, security=security, local=local
        )

    def save(self, rec: RunRecord) -> None:
        """Make ``rec`` the run's record, durably before this returns: one line appended and fdatasynced,
        or the file replaced by that line (see the module docstring for when)."""
        check_run_id(rec.ref.run_id)
        body = _body(rec, self.identity)
        line = (json.dumps({**body, "checksum": _checksum(body)}) + "\n").encode("utf-8")
        path = self.path_for(rec.ref.run_id)
        if _append_durable(path, line):
            self._appended.add(path)
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            write_durable(path, line)
            self._appended.discard(path)

    def compact(self) -> None:
        """Rewrite each run file appended to since it was last written whole as its last whole line alone
        (``write_durable``: the file reads the same before, during and after; a session's close and the
        daemon's stop call it, so a run's file is one JSON document whenever no session of it is open)."""
        for path in sorted(self._appended):
            try:
                data = path.read_bytes()
            except FileNotFoundError:  # moved away meanwhile: nothing to rewrite
                continue
            end = data.rfind(b"\n")
            if end >= 0 and (data.count(b"\n") > 1 or end + 1 < len(data)):
                write_durable(path, data[data.rfind(b"\n", 0, end) + 1 : end + 1])
        self._appended.clear()

    def key_path_for(self, run_id: str) -> Path:
        return self.root / f"{hashlib.sha256(run_id.encode()).hexdigest()[:32]}.key"

    def run_key(self, run_id: str, fixed: bytes | None = None) -> tuple[bytes, bool]:
        """This party's secret noise key of ``run_id`` and whether it was created now.

        Read from ``<hash>.key`` if it exists, else created from ``os.urandom(32)`` (with the testing-only
        ``fixed``: derived from it and the run id) and written durably (0600, fsync, atomic rename) before it
        is used. Raises :class:`ReplayFileError` naming the file if it cannot be read or trusted (never
        replaced silently: a new key would make the run's completed steps unreproducible)."""
        check_run_id(run_id)
        path = self.key_path_for(run_id)
        if path.exists():
            return self._read_key(path, run_id), False
        key = derive_key(fixed, b"run/" + run_id.encode(), b"noise") if fixed is not None else os.urandom(32)
        self.root.mkdir(parents=True, exist_ok=True)
        body = {
            "version": KEY_FORMAT_VERSION,
            "party": self.identity,
            "run_id": run_id,
            "key": key.hex(),
        }
        write_durable(path, json.dumps({**body, "checksum": _checksum(body)}).encode("utf-8"))
        return key, True

    def _read_key(self, path: Path, run_id: str) -> bytes:
        make_private(path)
        doc = _read_json(path, "run noise key", _KEY_ADVICE)
        try:
            _check_envelope(doc, KEY_FORMAT_VERSION, "run key", "key", self.identity, run_id)
            key = bytes.fromhex(doc["key"])
            if len(key) != 32:
                raise ValueError(f"the key is {len(key)} bytes, not 32")
        except (ValueError, KeyError, TypeError) as exc:
            raise ReplayFileError(f"run noise key {path} is corrupt ({exc}){_KEY_ADVICE}") from exc
        return key


def _append_durable(path: Path, line: bytes) -> bool:
    """Append ``line`` to the run file at ``path`` and fdatasync it; False (nothing written) when the file
    is missing, holds ``REWRITE_BYTES`` or more, or does not end in a newline (a torn or older-format
    file): the caller then replaces it whole. An append that fails is cut back off before raising."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size == 0 or size >= REWRITE_BYTES or os.pread(fd, 1, size - 1) != b"\n":
            return False
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        except OSError:
            os.ftruncate(fd, size)  # never leave a partial line for the next append to continue
            raise
        return True
    finally:
        os.close(fd)


def _read_last_record(path: Path) -> Any:
    """The run file's record as parsed JSON: its last whole line (a torn last line ignored), or the whole
    file when it holds no newline (older format). ReplayFileError naming the file if it cannot be read or
    is not JSON."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ReplayFileError(f"run record {path} cannot be read ({exc.strerror})") from exc
    end = data.rfind(b"\n")
    if end >= 0:
        data = data[data.rfind(b"\n", 0, end) + 1 : end]
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReplayFileError(f"run record {path} is corrupt (not JSON: {exc}){_ADVICE}") from exc


def _read_json(path: Path, what: str, advice: str) -> Any:
    """A state file's JSON; ReplayFileError naming ``what`` and the path if it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayFileError(f"{what} {path} cannot be read ({exc.strerror})") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReplayFileError(f"{what} {path} is corrupt (not JSON: {exc}){advice}") from exc


def _check_envelope(doc: Any, version: int, kind: str, noun: str, identity: str, run_id: str) -> None:
    """The checksummed envelope both run files share: version, checksum, owning party and run (ValueError)."""
    if not isinstance(doc, dict) or doc.get("version") != version:
        raise ValueError(f"expected a version {version} {kind} object")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if doc.get("checksum") != _checksum(body):
        raise ValueError("checksum mismatch: the file was altered or damaged")
    if doc["party"] != identity:
        raise ValueError(f"it belongs to party {doc['party']!r}, not to {identity!r}")
    if doc["run_id"] != run_id:
        raise ValueError(f"it is the {noun} of run {doc['run_id']!r}, not of {run_id!r}")

_ADVICE = "; refusing to use it. Move it away to have this run's last step evaluated afresh"
_KEY_ADVICE = (
    "; refusing to open the run's sessions. Restore it from a backup; moving it away makes a new key, and "
    "the run steps charged under the old one are then charged again if asked"
)


def agreed_record(own: RunRecord | None, reported: Sequence[RunStepRef]) -> RunRecord | None:
    """``own`` if every party reported the same run step, digest and computing session (so the stored
    messages of all parties combine into the step's output), else None."""
    if own is None or any(r != own.ref for r in reported):
        return None
    return own
