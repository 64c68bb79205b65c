"""A TLS front for a local HTTP server, as its own process: ``python -m simulations.tls_front --listen PORT
--upstream http://127.0.0.1:PORT --cert C --key K --ca CA``. It requires a client certificate signed by
``--ca`` (mutual TLS), and with ``--basic-auth-file`` HTTP basic authentication, and forwards each request to
the upstream unchanged. It stands in, in the tests, for an
endpoint that a registry protects with client certificates (the Oxigraph server itself speaks plain HTTP).
Listens on 127.0.0.1 only; stops on SIGTERM."""

from __future__ import annotations

import argparse
import base64
import http.server
import ssl
import urllib.error
import urllib.request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--basic-auth-file", help="a file 'user:password': require HTTP basic authentication")
    args = ap.parse_args()
    upstream = args.upstream.rstrip("/")
    expected = None
    if args.basic_auth_file:
        with open(args.basic_auth_file, encoding="utf-8") as fh:
            expected = "Basic " + base64.b64encode(fh.read().strip().encode()).decode()

    class Forward(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            if expected is not None and self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size) if size else None
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "content-type")}
            url = upstream + self.path
            req = urllib.request.Request(url, data=body, headers=headers, method=self.command)
            try:
                with urllib.request.urlopen(req, timeout=60) as resp:
                    status, data, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
            except urllib.error.HTTPError as exc:
                status, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    ctx.load_verify_locations(args.ca)
    ctx.verify_mode = ssl.CERT_REQUIRED
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.listen), Forward)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("listening", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
