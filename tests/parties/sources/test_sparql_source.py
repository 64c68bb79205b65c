"""The ``sparql`` source against a real SPARQL server (Oxigraph, started by this module on loopback and
stopped by PID) holding a small FAIRVASC-like registry in named graphs: typed literals converted, missing
bindings refused by the schema's rule, named graphs, paging, a TLS client certificate (through a TLS front
process that requires one), and every bad input refused with its key, nothing loaded."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization

from parties.config import ConfigError, load_config
from parties.sources import DataConfig, DataProblems, SourceError, content_hash, snapshot
from parties.sources.sparql import SparqlSource
from simulations.launcher import PartyOptions, party_config_text
from simulations.registries import FV, registry_graph, sparql_query, write_trig
from simulations.servers import SparqlServer, free_port, oxigraph_binary

pytestmark = pytest.mark.skipif(
    oxigraph_binary() is None, reason="oxigraph (pip install oxigraph) not installed"
)
ARGS = {"p": 2}
BASIC_PASSWORD = "endpoint-pw-42"
PREFIX = f"PREFIX fv: <{FV}>\nPREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
TYPED = f"""@prefix fv: <{FV}> .
@prefix xsd: <http://www.w3.org/2001/XMLSchema#> .
<urn:test:typed> {{
  <urn:p1> fv:n 1 ; fv:i "3"^^xsd:integer ; fv:d "0.5"^^xsd:decimal ; fv:b true ;
           fv:day "2020-01-02"^^xsd:date ;
           fv:t "1970-01-02T12:00:00Z"^^xsd:dateTime ; fv:yr "1961"^^xsd:gYear ; fv:s "1.5" ; fv:iri <urn:x> .
  <urn:p2> fv:n 2 ; fv:i "-2"^^xsd:int ; fv:d "1e3"^^xsd:double ; fv:b "0"^^xsd:boolean ;
           fv:day "1969-12-31Z"^^xsd:date ; fv:t "1970-01-01T00:00:00"^^xsd:dateTime ;
           fv:yr "2001"^^xsd:gYear ;
           fv:s "secret"@en ; fv:iri "x"^^<urn:custom> .
  <urn:p3> fv:n 3 .
}}
"""


def records(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x1": np.clip(rng.normal(0, 1, n), -3, 3),
        "x2": np.clip(rng.normal(0, 1, n), -3, 3),
        "y": (rng.random(n) < 0.4).astype(np.float64),
    }


REG = {2: records(37, 2), 3: records(21, 3)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparqlServer]:
    d = tmp_path_factory.mktemp("rdf")
    files = []
    for pid, cols in REG.items():
        write_trig(d / f"r{pid}.trig", pid, cols, "y", seed=pid)
        files.append(d / f"r{pid}.trig")
    (d / "typed.trig").write_text(TYPED)
    with SparqlServer.running([*files, d / "typed.trig"]) as srv:
        yield srv


QUERY = sparql_query(["x1", "x2", "y"], "y")


def snap(src: SparqlSource, max_records: int = 1000, model: str | None = "bayes-logistic") -> object:
    return snapshot(DataConfig(src, model, ARGS if model else {}, max_records))


def test_named_graphs_and_paging(server: SparqlServer) -> None:
    for pid, cols in REG.items():
        whole = snap(SparqlSource(server.endpoint, QUERY, default_graphs=(registry_graph(pid),)))
        assert whole.records == len(cols["y"]) and whole.sha256 == content_hash(cols)  # type: ignore[attr-defined]
        for page in (1, 5, len(cols["y"]), 100):  # a last page that is full, short, or the only one
            paged = snap(
                SparqlSource(server.endpoint, QUERY, page_size=page, default_graphs=(registry_graph(pid),))
            )
            assert paged.sha256 == whole.sha256, page  # type: ignore[attr-defined]
    # the registry's graph selected in the query instead (named-graph-uri + GRAPH)
    q = QUERY.replace("WHERE {", "WHERE { GRAPH <" + registry_graph(3) + "> {", 1).replace(
        "\n}\nORDER BY", "\n} }\nORDER BY"
    )
    inq = snap(SparqlSource(server.endpoint, q, named_graphs=(registry_graph(3),)))
    assert inq.sha256 == content_hash(REG[3])  # type: ignore[attr-defined]
    # no graph: Oxigraph's default graph is empty
    with pytest.raises(DataProblems, match="no records"):
        snap(SparqlSource(server.endpoint, QUERY))


def test_typed_literals(server: SparqlServer) -> None:
    q = (
        PREFIX
        + "SELECT ?i ?d ?b ?day ?t ?yr WHERE { ?p fv:n ?n ; fv:i ?i ; fv:d ?d ; fv:b ?b ; fv:day ?day ;"
    )
    q += " fv:t ?t ; fv:yr ?yr } ORDER BY ?n"
    s = snap(SparqlSource(server.endpoint, q, default_graphs=("urn:test:typed",)), model=None)
    c = s.dataset.columns  # type: ignore[attr-defined]
    np.testing.assert_array_equal(c["i"], [3.0, -2.0])
    np.testing.assert_array_equal(c["d"], [0.5, 1000.0])
    np.testing.assert_array_equal(c["b"], [1.0, 0.0])
    np.testing.assert_array_equal(c["day"], [(dt.date(2020, 1, 2) - dt.date(1970, 1, 1)).days, -1.0])
    np.testing.assert_array_equal(c["t"], [1.5, 0.0])
    np.testing.assert_array_equal(c["yr"], [1961.0, 2001.0])


def test_wrong_terms_and_missing_bindings(server: SparqlServer) -> None:
    q = PREFIX + "SELECT ?s ?iri ?i WHERE { ?p fv:n ?n . OPTIONAL { ?p fv:s ?s } OPTIONAL { ?p fv:iri ?iri }"
    q += " OPTIONAL { ?p fv:i ?i } } ORDER BY ?n"
    with pytest.raises(DataProblems) as ei:
        snap(SparqlSource(server.endpoint, q, default_graphs=("urn:test:typed",)), model=None)
    msg = str(ei.value)
    assert ei.value.key == "data.query"
    assert "column 's': plain strings where a typed literal is expected" in msg
    assert "column 's': language-tagged strings where a typed literal is expected" in msg
    assert "column 'iri': IRIs or blank nodes where a literal is expected in row 1" in msg
    assert "column 'iri': literals of unsupported datatype <urn:custom> in row 2" in msg
    assert "column 'i': missing values (empty, NULL or unbound) in row 3" in msg
    assert "secret" not in msg and "1.5" not in msg
    assert [r for r, _ in ei.value.rows] == [1, 2, 3]
    # a registry's outcome unbound for one patient: refused by the schema's rule, naming the row
    q = QUERY.replace("?out fv:y ?y", "?out fv:y ?y . FILTER(?record != 4)")
    with pytest.raises(DataProblems, match=r"column 'y': missing values \(empty, NULL or unbound\) in row 4"):
        snap(SparqlSource(server.endpoint, q, default_graphs=(registry_graph(2),)))
    # wrong variable names
    with pytest.raises(DataProblems, match=r"missing column \['y'\]"):
        snap(SparqlSource(server.endpoint, QUERY.replace("?y", "?died"), default_graphs=(registry_graph(2),)))


def refused(src: SparqlSource, key: str, match: str, **kw: object) -> None:
    with pytest.raises(SourceError) as ei:
        snap(src, **kw)  # type: ignore[arg-type]
    assert ei.value.key == key, str(ei.value)
    assert match in str(ei.value), str(ei.value)


def test_bad_inputs(server: SparqlServer) -> None:
    g = (registry_graph(2),)
    ep = server.endpoint
    refused(
        SparqlSource(ep, PREFIX + "CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }"), "data.query", "not CONSTRUCT"
    )
    refused(SparqlSource(ep, "ASK { ?s ?p ?o }"), "data.query", "must be a SPARQL SELECT query, not ASK")
    refused(SparqlSource(ep, PREFIX + "DELETE WHERE { ?s ?p ?o }"), "data.query", "not DELETE")
    refused(SparqlSource(ep, "SELECT ?x WHERE { ?x ?y }"), "data.query", "refused the query (HTTP 400)")
    refused(
        SparqlSource(ep, QUERY.replace("ORDER BY ?record", ""), page_size=10),
        "data.page_size",
        "needs an ORDER BY",
    )
    refused(
        SparqlSource(ep, QUERY + " LIMIT 5", page_size=10), "data.page_size", "must not have its own LIMIT"
    )
    refused(
        SparqlSource(ep, QUERY, default_graphs=g), "data.max_records", "more than 36 records", max_records=36
    )
    refused(
        SparqlSource(ep, QUERY, default_graphs=g, page_size=10),
        "data.max_records",
        "more than 36 records",
        max_records=36,
    )
    assert snap(SparqlSource(ep, QUERY, default_graphs=g, page_size=10), max_records=37).records == 37  # type: ignore[attr-defined]
    down = f"http://127.0.0.1:{free_port()}/query"
    refused(SparqlSource(down, QUERY), "data.endpoint", f"cannot reach sparql {down}")
    refused(
        SparqlSource(f"http://127.0.0.1:{server.port}/nothing-here", QUERY),
        "data.endpoint",
        "answered HTTP 404",
    )


def test_config_keys(tmp_path: Path, server: SparqlServer) -> None:
    def cfg(*lines: str) -> Path:
        p = tmp_path / "party.toml"
        text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(models=("bayes-logistic",)))
        p.write_text(text + '\n[data]\nsource = "sparql"\n' + "\n".join(lines) + "\n")
        return p

    (tmp_path / "q.rq").write_text(QUERY)
    ep = f'endpoint = "{server.endpoint}"'
    ok = load_config(
        cfg(ep, 'query_file = "q.rq"', 'default_graph = ["urn:g"]', "page_size = 100"), insecure=True
    )
    assert ok.data is not None and isinstance(ok.data.source, SparqlSource)
    assert ok.data.source.page_size == 100 and ok.data.source.query == QUERY
    for lines, match in (
        ([ep, 'query_file = "q.rq"', "page_size = 0"], "data.page_size: must be >= 1"),
        (
            ['endpoint = "ftp://h/q"', 'query_file = "q.rq"'],
            "data.endpoint: must be an http:// or https:// URL",
        ),
        (
            ['endpoint = "https://u:pw@h/q"', 'query_file = "q.rq"'],
            "data.endpoint: must not contain a password",
        ),
        (
            [ep, 'query_file = "q.rq"', "default_graph = [1]"],
            "data.default_graph: must be a list of graph IRIs",
        ),
        ([ep, 'query_file = "q.rq"', 'tls_cert = "q.rq"'], "data.tls_cert: give both"),
        ([ep, 'query_file = "q.rq"', 'tls_cert = "q.rq"', 'tls_key = "q.rq"'], "needs an https:// endpoint"),
        ([ep, 'query_file = "q.rq"', 'password_env = "X"'], "data.password_env: given without data.username"),
        (
            ['endpoint = "http://registry.example/q"', 'query_file = "q.rq"', 'username = "u"'],
            "data.username: basic authentication over plain http would send the password in clear",
        ),
    ):
        with pytest.raises(ConfigError, match=match.replace("(", r"\(").replace(")", r"\)")):
            load_config(cfg(*lines), insecure=True)


def _write_pem(path: Path, key: object, cert: object) -> None:
    from cryptography import x509

    assert isinstance(cert, x509.Certificate)
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(  # type: ignore[attr-defined]
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@pytest.fixture(scope="module")
def tls_front(server: SparqlServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A TLS front (own process) that requires a client certificate from the consortium CA."""
    from cryptography import x509

    from coordinator.certs import make_ca, make_leaf

    d = tmp_path_factory.mktemp("tls")
    ca_key, ca_cert = make_ca("endpoint CA")
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_pem(d / "localhost", *make_leaf("localhost", ca_key, ca_cert))
    _write_pem(d / "party-2", *make_leaf("party-2", ca_key, ca_cert))
    other_key, other_cert = make_ca("some other CA")
    _write_pem(d / "stranger", *make_leaf("party-2", other_key, other_cert))
    assert isinstance(ca_cert, x509.Certificate)
    (d / "basic").write_text("confar:" + BASIC_PASSWORD)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulations.tls_front",
            "--listen",
            str(port),
            "--upstream",
            f"http://127.0.0.1:{server.port}",
            "--cert",
            str(d / "localhost.pem"),
            "--key",
            str(d / "localhost.key"),
            "--ca",
            str(d / "ca.pem"),
            "--basic-auth-file",
            str(d / "basic"),
        ],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"listening"
        yield f"https://localhost:{port}/query", d
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def test_tls_client_certificate_and_basic_auth(
    tls_front: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, d = tls_front
    g = (registry_graph(2),)
    monkeypatch.setenv("SPARQL_PW", BASIC_PASSWORD)
    tls = {"tls_cert": d / "party-2.pem", "tls_key": d / "party-2.key", "tls_ca": d / "ca.pem"}
    good = SparqlSource(endpoint, QUERY, default_graphs=g, username="confar", password_env="SPARQL_PW", **tls)
    assert snap(good).sha256 == content_hash(REG[2])  # type: ignore[attr-defined]
    # wrong or no credentials: refused by the endpoint, the key named, the password in no message
    monkeypatch.setenv("SPARQL_PW", "wrong-pw")
    with pytest.raises(SourceError) as ei:
        snap(good)
    assert ei.value.key == "data.password_env" and "refused the credentials (HTTP 401)" in str(ei.value)
    assert "wrong-pw" not in str(ei.value)
    with pytest.raises(SourceError, match=r"data\.endpoint: .*refused the credentials \(HTTP 401\)"):
        snap(SparqlSource(endpoint, QUERY, default_graphs=g, **tls))
    monkeypatch.setenv("SPARQL_PW", BASIC_PASSWORD)
    # no client certificate, or one from another CA: the endpoint refuses the handshake
    for src in (
        SparqlSource(endpoint, QUERY, default_graphs=g, tls_ca=d / "ca.pem"),
        SparqlSource(
            endpoint,
            QUERY,
            default_graphs=g,
            tls_cert=d / "stranger.pem",
            tls_key=d / "stranger.key",
            tls_ca=d / "ca.pem",
        ),
    ):
        with pytest.raises(SourceError) as ei:
            snap(src)
        assert ei.value.key == "data.tls_cert", str(ei.value)
    # the endpoint's certificate not from the CA the config names: refused by this side
    with pytest.raises(
        SourceError,
        match=r"data\.tls_ca: TLS with sparql https://localhost:\d+/query .*CERTIFICATE_VERIFY_FAILED",
    ):
        snap(
            SparqlSource(
                endpoint, QUERY, default_graphs=g, tls_cert=d / "party-2.pem", tls_key=d / "party-2.key"
            )
        )


def test_check_config_against_the_endpoint(
    server: SparqlServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from parties.cli import main

    (tmp_path / "q.rq").write_text(QUERY)
    p = tmp_path / "party.toml"
    text = party_config_text(1, 3, tmp_path, None, None, PartyOptions(models=("bayes-logistic",)))
    data = (
        '[data]\nsource = "sparql"\nquery_file = "q.rq"\nmodel = "bayes-logistic"\nmodel_args = { p = 2 }\n'
    )
    data += f'default_graph = ["{registry_graph(3)}"]\npage_size = 8\n'
    p.write_text(f'{text}\n{data}endpoint = "{server.endpoint}"\n')
    assert main(["check-config", "--config", str(p), "--insecure"]) == 0
    out = capsys.readouterr().out
    assert "data: 21 records, columns x1, x2, y" in out and content_hash(REG[3]) in out
    down = f"http://127.0.0.1:{free_port()}/query"
    p.write_text(f'{text}\n{data}endpoint = "{down}"\n')
    assert main(["check-config", "--config", str(p), "--insecure"]) == 2
    assert f"data.endpoint: cannot reach sparql {down}" in capsys.readouterr().err
