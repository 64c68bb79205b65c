"""The ``sparql`` source: a SELECT query against a SPARQL 1.1 endpoint (the SPARQL protocol over HTTP(S),
results as ``application/sparql-results+json``; standard library only).

    [data]
    source = "sparql"
    endpoint = "https://registry.example.org/sparql"
    query_file = "cohort.rq"                      # or query = "..."
    default_graph = ["urn:registry:cohort-2024"]  # optional: default-graph-uri (the dataset to query)
    named_graph = []                              # optional: named-graph-uri (for GRAPH ?g { ... })
    page_size = 10000                             # optional: LIMIT/OFFSET paging (needs ORDER BY)
    timeout_s = 60                                # per HTTP request
    tls_cert = "certs/party-3.pem"                # optional: TLS client certificate for the endpoint,
    tls_key = "certs/party-3.key"                 #   with its key (both or neither)
    tls_ca = "certs/endpoint-ca.pem"              # optional: CA of the endpoint (default: the system's)
    username = "confar"                           # optional: HTTP basic authentication (https, or a
    password_env = "REGISTRY_SPARQL_PASSWORD"     #   loopback http endpoint), the password from
                                                  #   password_file or password_env (never inline)

Each projected variable is a column (``?age`` -> ``age``), named as the model's schema columns. Values:
typed literals are converted by their datatype (``xsd:integer``, ``xsd:decimal``, ``xsd:double``, ... ->
numbers; ``xsd:boolean`` -> 1 / 0; ``xsd:date``, ``xsd:dateTime`` -> days since 1970-01-01; ``xsd:gYear``
-> the year); an unbound variable is a missing value, refused by the schema's rule (write ``OPTIONAL`` for
every value, so that an incomplete record is reported rather than dropped silently by the join); plain
strings and ``xsd:string`` literals are text, taken only by a column the schema declares with text labels
(``parties.sources.base.to_codes``); IRIs, blank nodes, language-tagged strings, text in a number column and
other datatypes are refused, naming the column, the rows and the datatype (never the value).

Paging: with ``page_size``, the query is sent repeatedly with ``LIMIT page_size OFFSET k`` appended, until a
page comes back short; the query must then have an ``ORDER BY`` (without it, pages of a SPARQL result may
overlap or skip solutions) and no LIMIT / OFFSET of its own. Set ``page_size`` at or below the endpoint's
own result cap (many endpoints truncate silently past it), and no smaller: an endpoint evaluates and sorts
the whole query again for every page (50,000 records from a local Oxigraph server: 1.7 s in one request,
7.3 s in pages of 10,000). The pages are separate requests: an endpoint
whose data changes while they are read can give an inconsistent result; load registries in a way that
replaces a graph at once, or read a versioned graph (``default_graph``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parties.sources.base import Bad, RawTable, SourceError, too_many
from parties.sources.sql import read_password

XSD = "http://www.w3.org/2001/XMLSchema#"
NUMERIC = {
    XSD + t
    for t in (
        "integer",
        "decimal",
        "double",
        "float",
        "int",
        "long",
        "short",
        "byte",
        "nonNegativeInteger",
        "positiveInteger",
        "nonPositiveInteger",
        "negativeInteger",
        "unsignedLong",
        "unsignedInt",
        "unsignedShort",
        "unsignedByte",
    )
}
MAX_ERROR_BODY = 300


def short_datatype(iri: str) -> str:
    return "xsd:" + iri[len(XSD) :] if iri.startswith(XSD) else f"<{iri}>"


def literal_value(term: dict[str, Any]) -> Any:
    """The Python value of one SPARQL JSON result term (see the module docstring), or :class:`Bad`."""
    kind = term.get("type")
    if kind in ("uri", "bnode"):
        return Bad("IRIs or blank nodes where a literal is expected")
    if kind not in ("literal", "typed-literal"):
        return Bad(f"result terms of unknown type {str(kind)[:40]!r}")
    text = str(term.get("value", ""))
    dtype = term.get("datatype")
    if dtype is None:
        what = "language-tagged strings" if "xml:lang" in term else "plain strings"
        label = None if "xml:lang" in term else text  # a labelled column's text (sources.base.to_codes)
        return Bad(f"{what} where a typed literal is expected (give the value a numeric datatype)", label)
    if dtype == XSD + "string":
        return Bad("xsd:string literals where a number is expected (give the value a numeric datatype)", text)
    try:
        if dtype in NUMERIC:
            return float(text.strip())
        if dtype == XSD + "boolean":
            v = text.strip()
            if v in ("true", "1"):
                return True
            if v in ("false", "0"):
                return False
            raise ValueError(v)
        if dtype == XSD + "date":
            m = re.fullmatch(r"(-?\d{4,}-\d{2}-\d{2})(Z|[+-]\d{2}:\d{2})?", text.strip())
            if m is None:
                raise ValueError(text)
            return dt.date.fromisoformat(m.group(1))
        if dtype == XSD + "dateTime":
            return dt.datetime.fromisoformat(text.strip())
        if dtype == XSD + "gYear":
            m = re.fullmatch(r"(-?\d{4,})(Z|[+-]\d{2}:\d{2})?", text.strip())
            if m is None:
                raise ValueError(text)
            return int(m.group(1))
    except ValueError:
        return Bad(f"malformed {short_datatype(dtype)} literals")
    return Bad(f"literals of unsupported datatype {short_datatype(dtype)}")


def strip_sparql(query: str) -> str:
    """The query without comments, strings and IRIs (so its keywords can be read)."""
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c == "#":
            j = query.find("\n", i)
            i = n if j < 0 else j
        elif c == "<" and re.match(r"<[^<>\"{}|^`\\\s]*>", query[i:]):
            j = query.index(">", i)
            out.append("<>")
            i = j + 1
        elif c in "'\"":
            quote = c * 3 if query.startswith(c * 3, i) else c
            j = i + len(quote)
            while j < n and not query.startswith(quote, j):
                j += 2 if query[j] == "\\" else 1
            if j >= n:
                raise ValueError(f"unterminated {quote} string")
            out.append('""')
            i = j + len(quote)
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_query(query: str, key: str, paging: bool) -> None:
    """A SELECT query (after PREFIX / BASE declarations); with paging, ORDER BY and no LIMIT / OFFSET."""
    try:
        bare = strip_sparql(query)
    except ValueError as exc:
        raise SourceError(key, f"cannot read the query: {exc}") from exc
    body = re.sub(r"(?is)^\s*((PREFIX\s+[A-Za-z0-9_.-]*:\s*<>|BASE\s+<>)\s*)*", "", bare)
    first = re.match(r"[A-Za-z]+", body)
    word = first.group(0).upper() if first else ""
    if word != "SELECT":
        raise SourceError(key, f"must be a SPARQL SELECT query, not {word or 'empty'}")
    if paging:
        if not re.search(r"(?i)\bORDER\s+BY\b", bare):
            raise SourceError(
                "data.page_size",
                "paging needs an ORDER BY in the query (without one, pages may overlap or skip records)",
            )
        if re.search(r"(?i)\b(LIMIT|OFFSET)\s+\d+\s*$", bare.strip()):
            raise SourceError("data.page_size", "with paging the query must not have its own LIMIT / OFFSET")


@dataclass(frozen=True)
class SparqlSource:
    endpoint: str
    query: str
    query_key: str = "data.query"
    page_size: int | None = None
    default_graphs: tuple[str, ...] = ()
    named_graphs: tuple[str, ...] = ()
    timeout_s: float = 60.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    username: str | None = None
    password_file: Path | None = None
    password_env: str | None = None
    kind: str = "sparql"

    @property
    def key(self) -> str:
        return self.query_key

    def describe(self) -> str:
        graphs = f" (graphs {', '.join(self.default_graphs)})" if self.default_graphs else ""
        return f"sparql {self.endpoint}{graphs}"

    def _context(self) -> ssl.SSLContext | None:
        if not self.endpoint.lower().startswith("https:"):
            return None
        try:
            ctx = ssl.create_default_context(cafile=str(self.tls_ca) if self.tls_ca else None)
        except (OSError, ssl.SSLError) as exc:
            raise SourceError("data.tls_ca", f"cannot load {self.tls_ca}: {exc}") from exc
        if self.tls_cert is not None:
            try:
                ctx.load_cert_chain(str(self.tls_cert), str(self.tls_key) if self.tls_key else None)
            except (OSError, ssl.SSLError) as exc:
                raise SourceError(
                    "data.tls_cert", f"cannot load the client certificate and key: {exc}"
                ) from exc
        return ctx

    def _tls_error(self, reason: ssl.SSLError, where: str) -> SourceError:
        """Our check of the endpoint's certificate failed (``data.tls_ca``), or the endpoint refused the
        handshake, which after that check means it did not take our client certificate (``data.tls_cert``)."""
        if getattr(reason, "reason", "") == "CERTIFICATE_VERIFY_FAILED":
            return SourceError("data.tls_ca", f"TLS with {where} failed: {reason}")
        hint = (
            ""
            if self.tls_cert
            else " (does it require a client certificate? set data.tls_cert, data.tls_key)"
        )
        return SourceError("data.tls_cert", f"TLS with {where} failed: {reason}{hint}")

    def _request(self, query: str, ctx: ssl.SSLContext | None, auth: str | None) -> dict[str, Any]:
        form = [("query", query)]
        form += [("default-graph-uri", g) for g in self.default_graphs]
        form += [("named-graph-uri", g) for g in self.named_graphs]
        req = urllib.request.Request(
            self.endpoint,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                "Accept": "application/sparql-results+json",
                "Content-Type": "application/x-www-form-urlencoded",
                **({"Authorization": auth} if auth else {}),
            },
            method="POST",
        )
        where = self.describe()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=ctx) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = " ".join(exc.read(MAX_ERROR_BODY).decode(errors="replace").split())
            if exc.code in (401, 403):
                key = "data.password_env" if self.password_env else "data.password_file"
                key = key if self.username else "data.endpoint"
                raise SourceError(key, f"{where} refused the credentials (HTTP {exc.code})") from exc
            if exc.code == 400:
                raise SourceError(self.query_key, f"{where} refused the query (HTTP 400): {detail}") from exc
            raise SourceError("data.endpoint", f"{where} answered HTTP {exc.code}: {detail}") from exc
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLError):
                raise self._tls_error(reason, where) from exc
            raise SourceError("data.endpoint", f"cannot reach {where}: {reason}") from exc
        except ssl.SSLError as exc:
            raise self._tls_error(exc, where) from exc
        except (TimeoutError, OSError) as exc:
            raise SourceError("data.endpoint", f"cannot reach {where}: {exc}") from exc
        try:
            doc = json.loads(body)
            assert isinstance(doc["head"]["vars"], list) and isinstance(doc["results"]["bindings"], list)
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise SourceError(
                "data.endpoint", f"{where} did not answer with SPARQL JSON results ({len(body)} bytes)"
            ) from exc
        return doc  # type: ignore[no-any-return]

    def fetch(self, max_records: int) -> RawTable:
        check_query(self.query, self.query_key, self.page_size is not None)
        if self.tls_cert is not None and not self.endpoint.lower().startswith("https:"):
            raise SourceError("data.tls_cert", "a TLS client certificate needs an https:// endpoint")
        ctx = self._context()
        auth = None
        if self.username is not None:
            password, _ = read_password(self.password_file, self.password_env)
            token = base64.b64encode(f"{self.username}:{password or ''}".encode()).decode()
            auth = f"Basic {token}"
        names: tuple[str, ...] | None = None
        bindings: list[dict[str, Any]] = []
        if self.page_size is None:
            doc = self._request(self.query, ctx, auth)
            names = tuple(doc["head"]["vars"])
            bindings = doc["results"]["bindings"]
            if len(bindings) > max_records:
                raise too_many(max_records)
        else:
            offset = 0
            while True:
                limit = min(self.page_size, max_records + 1 - offset)
                doc = self._request(f"{self.query.rstrip()}\nLIMIT {limit} OFFSET {offset}", ctx, auth)
                names = names or tuple(doc["head"]["vars"])
                page = doc["results"]["bindings"]
                bindings.extend(page)
                offset += len(page)
                if offset > max_records:
                    raise too_many(max_records)
                if len(page) < limit:
                    break
        assert names is not None
        cols: dict[str, list[Any]] = {
            v: [literal_value(b[v]) if v in b else None for b in bindings] for v in names
        }
        return RawTable(names, cols, len(bindings))
