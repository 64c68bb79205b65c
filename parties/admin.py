"""The operator's live view (issue 37): the custodian's report served by the daemon on a separate
loopback-only port, read-only.

With ``[admin] listen = "127.0.0.1:PORT"`` (``parties.config``: a loopback address only, never the port the
consortium reaches; off without the table) the daemon answers plain HTTP/1.1 ``GET`` (and ``HEAD``) on that
address with the page of ``confar-party report`` (``parties.report``), made afresh from the state folder for
each request and reloading itself every ``REFRESH_S`` seconds (a meta tag: the page has no script), and with
its JSON at ``/report.json``. Nothing else: any other path is 404, any other method 405, a request line or
headers past ``MAX_REQUEST_BYTES`` or slower than ``READ_TIMEOUT_S`` are dropped; nothing it receives is
acted on, no state is written. Responses forbid the page to fetch anything (``Content-Security-Policy:
default-src 'none'; style-src 'unsafe-inline'``) and to be cached. A report that cannot be made (a ledger
being rewritten at that instant: tried again up to ``ATTEMPTS`` times; or state that cannot be trusted) is
a 503 naming why.

It is plain HTTP because it never leaves the machine: anyone who can reach a loopback port already runs
on the registry's host; the page shows the registry's own ledger, not its records.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from parties.config import PartyConfig

REFRESH_S = 10
MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_S = 5.0
ATTEMPTS = 3
_HEADERS = (
    "Cache-Control: no-store\r\n"
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Connection: close\r\n"
)


def _response(status: str, ctype: str, body: bytes, head_only: bool = False) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{_HEADERS}\r\n"
    return head.encode() + (b"" if head_only else body)


class AdminServer:
    """The loopback HTTP server of the live view (module docstring)."""

    def __init__(self, cfg: PartyConfig, on_request: Callable[[str, str, int], None] | None = None) -> None:
        assert cfg.admin_listen is not None
        self.cfg = cfg
        self.on_request = on_request
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        host, port = self.cfg.admin_listen.rsplit(":", 1)  # type: ignore[union-attr]
        self.server = await asyncio.start_server(self._serve, host.strip("[]"), int(port))
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status = "400 Bad Request"
        method = path = ""
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            if len(head) > MAX_REQUEST_BYTES:
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                writer.write(_response(status, "text/plain", b"bad request\n"))
                return
            method, path = parts[0], parts[1].split("?", 1)[0]
            status, ctype, body = await self._answer(method, path)
            writer.write(_response(status, ctype, body, head_only=method == "HEAD"))
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if self.on_request is not None and method:
                self.on_request(method, path, int(status.split(" ", 1)[0]))
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain; charset=utf-8", b"read-only: GET only\n"
        if path not in ("/", "/report.html", "/report.json"):
            return "404 Not Found", "text/plain; charset=utf-8", b"not found: / or /report.json\n"
        try:
            doc = await asyncio.to_thread(self._collect)
        except Exception as exc:  # never stop the daemon over its view; say why
            return "503 Service Unavailable", "text/plain; charset=utf-8", f"no report: {exc}\n".encode()
        from parties.report import render_html, render_json

        if path == "/report.json":
            return "200 OK", "application/json", render_json(doc).encode()
        return "200 OK", "text/html; charset=utf-8", render_html(doc, refresh_s=REFRESH_S).encode()

    def _collect(self) -> dict[str, Any]:
        from parties.report import ReportError, collect

        for attempt in range(ATTEMPTS):
            try:
                return collect(self.cfg)
            except ReportError:  # a ledger file replaced or a line written at that instant: read again
                if attempt == ATTEMPTS - 1:
                    raise
                time.sleep(0.05)
        raise AssertionError("unreachable")
