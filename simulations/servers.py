"""Throwaway database servers on loopback for the local consortium (``confar run --simulate``) and the tests:
a PostgreSQL cluster in a temporary folder, and an Oxigraph SPARQL server. Each is a real server process
started here and stopped by its PID (SIGINT / SIGTERM, then SIGKILL after a grace period); its folder is
removed when it stops. Both listen on 127.0.0.1 only.

* :class:`PostgresServer` runs ``initdb`` and ``postgres`` (found on PATH, or in /usr/lib/postgresql/*/bin;
  ``PG_BINDIR`` overrides). PostgreSQL refuses to run as root, so as root the cluster belongs to the
  ``postgres`` system user (or ``nobody``). Password authentication (SCRAM) on TCP only; the admin password
  is random and kept in memory. ``add_registry`` creates a database, a table of float64 columns (text for a
  column of labels) in a given order and a login role that can only SELECT it.
* :class:`SparqlServer` loads RDF (TriG / Turtle / N-Quads) into an Oxigraph store and serves it read-only
  (``oxigraph serve-read-only``, from the ``oxigraph`` PyPI package, found next to the running Python or on
  PATH).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

STOP_GRACE_S = 10.0


class ServerError(RuntimeError):
    """A server binary is missing, or a server did not start (the message has the tail of its log)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def postgres_bindir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``, or None when PostgreSQL's server is not installed."""
    env = os.environ.get("PG_BINDIR")
    if env:
        return Path(env) if (Path(env) / "initdb").is_file() else None
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def oxigraph_binary() -> Path | None:
    """The ``oxigraph`` command (PyPI package ``oxigraph``), or None."""
    here = Path(sys.executable).parent / "oxigraph"
    if here.is_file():
        return here
    found = shutil.which("oxigraph")
    return Path(found) if found else None


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _stop(proc: subprocess.Popen[bytes] | None, sig: int) -> None:
    """Stop one process we started, by its PID: ``sig``, then SIGKILL after STOP_GRACE_S."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)


@dataclass
class PostgresServer:
    """A PostgreSQL cluster in a temporary folder, listening on 127.0.0.1:``port`` (see the module doc)."""

    bindir: Path
    root: Path = field(default_factory=Path)
    port: int = 0
    admin: str = "confar_admin"
    admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(18), repr=False)
    proc: subprocess.Popen[bytes] | None = None
    _user: str | None = None

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[PostgresServer]:
        srv = cls.start()
        try:
            yield srv
        finally:
            srv.stop()

    @classmethod
    def start(cls) -> PostgresServer:
        bindir = postgres_bindir()
        if bindir is None:
            raise ServerError("PostgreSQL server binaries (initdb, postgres) not found; set PG_BINDIR")
        srv = cls(bindir=bindir, root=Path(tempfile.mkdtemp(prefix="confar-pg-")))
        try:
            srv._init()
            for _attempt in range(3):  # another process may take the free port first
                if srv._serve():
                    return srv
            raise ServerError(f"postgres did not start: {_tail(srv.root / 'postgres.log')}")
        except BaseException:
            srv.stop()
            raise

    def _init(self) -> None:
        if os.geteuid() == 0:  # PostgreSQL will not run as root
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    pw = pwd.getpwnam(name)
                    self._user = name
                    os.chown(self.root, pw.pw_uid, pw.pw_gid)
                    break
        pwfile = self.root / "pw"
        pwfile.write_text(self.admin_password + "\n")
        pwfile.chmod(0o600)
        if self._user:
            pw = pwd.getpwnam(self._user)
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        log = self.root / "initdb.log"
        with open(log, "wb") as fh:
            rc = subprocess.run(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.root / "data"),
                    "-U",
                    self.admin,
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--no-sync",
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                timeout=120,
                user=self._user,
            ).returncode
        pwfile.unlink()
        if rc != 0:
            raise ServerError(f"initdb failed (exit {rc}): {_tail(log)}")

    def _serve(self) -> bool:
        self.port = free_port()
        log = open(self.root / "postgres.log", "ab")
        self.proc = subprocess.Popen(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.root / "data"),
                "-p",
                str(self.port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=40",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            start_new_session=True,
            user=self._user,
        )
        log.close()
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False
            try:
                with self.connect("postgres"):
                    return True
            except Exception:
                time.sleep(0.1)
        raise ServerError(f"postgres did not accept connections in 60 s: {_tail(self.root / 'postgres.log')}")

    def connect(self, database: str, user: str | None = None, password: str | None = None) -> Any:
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=user or self.admin,
            password=password if user else self.admin_password,
            dbname=database,
            connect_timeout=5,
            autocommit=True,
        )

    def url(self, database: str, user: str) -> str:
        """A SQLAlchemy URL for ``user`` (without a password: the daemon reads it from a file or variable)."""
        return f"postgresql+psycopg://{user}@127.0.0.1:{self.port}/{database}"

    def add_registry(
        self,
        database: str,
        table: str,
        columns: Mapping[str, npt.ArrayLike],
        reader: str,
        reader_password: str,
        *,
        id_column: str = "record_id",
    ) -> None:
        """A database with ``table`` (``id_column`` 1..n, then one double precision column per entry, values
        exactly as given, NaN as NULL) and a login role ``reader`` that can only SELECT it."""
        from psycopg import sql

        names = list(columns)
        text = {k for k in names if np.asarray(columns[k]).dtype.kind in "USO"}  # labels: text columns
        data = [np.asarray(columns[k], dtype=object if k in text else np.float64) for k in names]
        with self.connect("postgres") as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(reader), sql.Literal(reader_password)
                )
            )
        with self.connect(database) as db:
            cols = sql.SQL(", ").join(
                [sql.SQL("{} integer PRIMARY KEY").format(sql.Identifier(id_column))]
                + [
                    sql.SQL("{} text" if k in text else "{} double precision").format(sql.Identifier(k))
                    for k in names
                ]
            )
            db.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(table), cols))
            with db.cursor() as cur:
                copy = sql.SQL("COPY {} ({}) FROM STDIN").format(
                    sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(k) for k in [id_column, *names])
                )
                with cur.copy(copy) as cp:
                    for i, row in enumerate(zip(*(a.tolist() for a in data), strict=True), start=1):
                        cp.write_row([i, *(None if v != v else v for v in row)])  # NaN -> NULL
            db.execute(sql.SQL("REVOKE ALL ON SCHEMA public FROM PUBLIC"))
            db.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(reader)))
            db.execute(
                sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), sql.Identifier(reader))
            )

    def stop(self) -> None:
        _stop(self.proc, signal.SIGINT)  # fast shutdown: the cluster is thrown away
        self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class SparqlServer:
    """An Oxigraph SPARQL server on 127.0.0.1:``port`` serving the RDF it was started with, read-only."""

    root: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/query"

    @classmethod
    @contextlib.contextmanager
    def running(cls, rdf_files: list[Path]) -> Iterator[SparqlServer]:
        srv = cls.start(rdf_files)
        try:
            yield srv
        finally:
            srv.stop()

    @classmethod
    def start(cls, rdf_files: list[Path]) -> SparqlServer:
        exe = oxigraph_binary()
        if exe is None:
            raise ServerError("the oxigraph command was not found (pip install oxigraph)")
        srv = cls(root=Path(tempfile.mkdtemp(prefix="confar-sparql-")))
        try:
            store = srv.root / "store"
            for f in rdf_files:
                done = subprocess.run(
                    [str(exe), "load", "--location", str(store), "--file", str(f)],
                    capture_output=True,
                    timeout=300,
                )
                if done.returncode != 0:
                    err = done.stderr.decode(errors="replace")[-2000:]
                    raise ServerError(f"oxigraph load {f} failed: {err}")
            for _attempt in range(3):
                if srv._serve(exe, store):
                    return srv
            raise ServerError(f"oxigraph did not start: {_tail(srv.root / 'oxigraph.log')}")
        except BaseException:
            srv.stop()
            raise

    def _serve(self, exe: Path, store: Path) -> bool:
        self.port = free_port()
        log = open(self.root / "oxigraph.log", "ab")
        self.proc = subprocess.Popen(
            [str(exe), "serve-read-only", "--location", str(store), "--bind", f"127.0.0.1:{self.port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + 60.0
        probe = f"{self.endpoint}?query=ASK%7B%7D"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                return False
            try:
                with urllib.request.urlopen(probe, timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise ServerError(f"oxigraph did not answer in 60 s: {_tail(self.root / 'oxigraph.log')}")

    def stop(self) -> None:
        _stop(self.proc, signal.SIGTERM)
        self.proc = None
        shutil.rmtree(self.root, ignore_errors=True)
