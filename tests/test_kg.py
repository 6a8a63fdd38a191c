"""Tests for worker_agent.kg: a real Oxigraph store (CK25 and tiny files) and a real local
HTTP server standing in for a SPARQL endpoint."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from worker_agent import kg as kgmod
from worker_agent.kg import (
    KNOWN_PREFIXES,
    EndpointError,
    EndpointKG,
    KGError,
    KnowledgeGraph,
    OxigraphKG,
    QueryResult,
    QuerySyntaxError,
    QueryTimeout,
    Term,
    UnsupportedFunction,
    UpdateNotAllowed,
    add_missing_prefixes,
    check_read_only,
    open_kg,
)

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
CK25 = DATASETS / "ck25"
CK25_FILES = [CK25 / "prod-vocab.ttl", CK25 / "prod-inst.ttl"]
XSD_INT = "http://www.w3.org/2001/XMLSchema#int"

needs_ck25 = pytest.mark.skipif(
    not (CK25 / "prod-inst.ttl").is_file(), reason="CK25 data absent"
)


@pytest.fixture(scope="module")
def ck25() -> OxigraphKG:
    if not (CK25 / "prod-inst.ttl").is_file():
        pytest.skip("CK25 data absent")
    return OxigraphKG(CK25_FILES)


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.ttl"
    path.write_text(
        "@prefix ex: <http://example.org/> .\n"
        'ex:a ex:name "Alice"@en ; ex:age 42 ; ex:knows ex:b , [ ex:name "anon" ] .\n'
        'ex:b ex:name "Bob" .\n',
        encoding="utf-8",
    )
    return path


def _values(result: QueryResult) -> set[str]:
    return {t.value for row in result.rows for t in row if t is not None}


# ---------------------------------------------------------------- CK25 on the embedded store


@needs_ck25
def test_ck25_loads_all_triples(ck25: OxigraphKG) -> None:
    assert len(ck25) == 26_903
    count = ck25.query("SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o }")
    assert count.rows[0][0] == Term(
        "literal", "26903", "http://www.w3.org/2001/XMLSchema#integer"
    )
    assert ck25.name == "prod-vocab.ttl, prod-inst.ttl"
    assert len(ck25.fingerprint) == 64
    assert isinstance(ck25, KnowledgeGraph)


@needs_ck25
def test_ck25_gold_queries_return_the_official_answers(ck25: OxigraphKG) -> None:
    questions = {
        str(q["id"]): q
        for q in yaml.safe_load((CK25 / "questions.yml").read_text())["questions"]
    }
    gold = json.loads((CK25 / "true_result_set.json").read_text())
    for qid in ("1", "2", "5", "29"):
        result = ck25.query(questions[qid]["query"]["sparql"])
        assert _values(result) == set(gold[f"ck25:{qid}-en"]), qid
        assert not result.truncated


@needs_ck25
def test_ask_queries(ck25: OxigraphKG) -> None:
    yes = ck25.query(
        "PREFIX pv: <http://ld.company.org/prod-vocab/> ASK { ?d a pv:Department }"
    )
    no = ck25.query("ASK { <http://example.org/none> ?p ?o }")
    assert yes.is_ask and yes.boolean is True and yes.rows == []
    assert no.is_ask and no.boolean is False
    assert yes.to_sparql_json() == {"head": {}, "boolean": True}


@needs_ck25
def test_row_cap_sets_truncated(ck25: OxigraphKG) -> None:
    capped = ck25.query("SELECT ?s WHERE { ?s ?p ?o }", max_rows=7)
    assert len(capped.rows) == 7 and capped.truncated
    exact = ck25.query("SELECT ?s WHERE { ?s ?p ?o } LIMIT 7", max_rows=7)
    assert len(exact.rows) == 7 and not exact.truncated
    default_cap = OxigraphKG(CK25_FILES, max_rows=3).query(
        "SELECT ?s WHERE { ?s ?p ?o }"
    )
    assert len(default_cap.rows) == 3 and default_cap.truncated


@needs_ck25
def test_unsupported_function_names_the_function(ck25: OxigraphKG) -> None:
    token = "http://www.w3.org/2001/XMLSchema#token"
    query = (
        "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
        "SELECT ?s WHERE { ?s ?p ?o FILTER(xsd:token(?o) = 'x') } LIMIT 3"
    )
    with pytest.raises(UnsupportedFunction) as info:
        ck25.query(query)
    assert info.value.function == f"<{token}>"
    assert (
        str(info.value)
        == f"function <{token}> is not supported by the embedded Oxigraph store"
    )


@needs_ck25
def test_derived_integer_casts_follow_xpath_rules(ck25: OxigraphKG) -> None:
    """xsd:int and friends are not SPARQL 1.1 built-ins, but real queries (CK25 q37, q42) use them."""
    row = ck25.query(
        "PREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
        'SELECT (xsd:int("12") AS ?a) (xsd:int(12.7) AS ?b) (xsd:int("x") AS ?c) (xsd:byte(300) AS ?d)'
        " (xsd:nonNegativeInteger(-1) AS ?e) (xsd:long(true) AS ?f) WHERE {}"
    ).rows[0]
    assert [t.value if t else None for t in row] == ["12", "12", None, None, None, "1"]
    assert XSD_INT  # the cast the embedded store lacked natively


@needs_ck25
def test_syntax_error_is_one_line_with_parser_message(ck25: OxigraphKG) -> None:
    with pytest.raises(QuerySyntaxError) as info:
        ck25.query("SELECT ?x WHERE {\n ?x ?p \n")
    message = str(info.value)
    assert "\n" not in message and message.startswith("SPARQL syntax error: error at")
    with pytest.raises(QuerySyntaxError, match="undeclared prefix.*xsd:"):
        ck25.query('SELECT (xsd:int("3") AS ?x) WHERE {}')


@needs_ck25
def test_persistent_store_is_built_once_then_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = OxigraphKG(CK25_FILES, store_dir=tmp_path)
    assert (
        not first.loaded_from_cache
        and first.store_path is not None
        and first.store_path.is_dir()
    )
    assert [p.name for p in tmp_path.iterdir()] == [
        first.store_path.name
    ]  # no temp dir left
    del first

    def no_parsing(self: OxigraphKG, store: Any) -> None:
        raise AssertionError("the persistent store was re-parsed")

    monkeypatch.setattr(OxigraphKG, "_load_into", no_parsing)
    again = OxigraphKG(
        list(reversed(CK25_FILES)), store_dir=tmp_path
    )  # order does not matter
    assert again.loaded_from_cache and len(again) == 26_903
    assert again.query("ASK { ?s ?p ?o }").boolean is True


def test_persistent_store_build_failure_leaves_nothing(
    tmp_path: Path, tiny: Path
) -> None:
    bad = tmp_path / "bad.ttl"
    bad.write_text("<http://a> <http://b> .\n")
    store_dir = tmp_path / "stores"
    with pytest.raises(KGError, match="bad.ttl: cannot parse as"):
        OxigraphKG([tiny, bad], store_dir=store_dir)
    assert list(store_dir.iterdir()) == []
    # A different file set gets its own store.
    assert OxigraphKG([tiny], store_dir=store_dir).loaded_from_cache is False


# ---------------------------------------------------------------- small files, formats, terms


def test_formats_load_into_one_queryable_graph(tmp_path: Path, tiny: Path) -> None:
    (tmp_path / "a.nt").write_text("<http://e/x> <http://e/p> <http://e/y> .\n")
    with gzip.open(tmp_path / "b.nq.gz", "wt") as fh:
        fh.write('<http://e/x> <http://e/q> "in a graph" <http://e/g> .\n')
    (tmp_path / "c.trig").write_text(
        '<http://e/g2> { <http://e/x> <http://e/r> "trig" . }\n'
    )
    (tmp_path / "d.rdf").write_text(
        '<?xml version="1.0"?>\n<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"'
        ' xmlns:e="http://e/"><rdf:Description rdf:about="http://e/x"><e:s>xml</e:s>'
        "</rdf:Description></rdf:RDF>\n"
    )
    (tmp_path / "e.jsonld").write_text('{"@id": "http://e/x", "http://e/t": "jsonld"}')
    files = [
        tiny,
        *(tmp_path / n for n in ("a.nt", "b.nq.gz", "c.trig", "d.rdf", "e.jsonld")),
    ]
    kg = OxigraphKG(files)
    result = kg.query("SELECT ?o WHERE { <http://e/x> ?p ?o }")
    assert _values(result) == {"http://e/y", "in a graph", "trig", "xml", "jsonld"}


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(KGError, match="missing.ttl: RDF file not found"):
        OxigraphKG([tmp_path / "missing.ttl"])
    odd = tmp_path / "data.csv"
    odd.write_text("a,b\n")
    with pytest.raises(KGError, match="data.csv: cannot guess the RDF format"):
        OxigraphKG([odd])
    broken = tmp_path / "broken.ttl"
    broken.write_text("@prefix ex: <http://e/> .\nex:a ex:b \n")
    with pytest.raises(KGError, match=r"broken.ttl: cannot parse as Turtle") as info:
        OxigraphKG([broken])
    assert "\n" not in str(info.value)
    with pytest.raises(KGError):
        OxigraphKG([])


def test_terms_are_normalized_and_serialized(tiny: Path) -> None:
    kg = OxigraphKG([tiny])
    result = kg.query(
        "PREFIX ex: <http://example.org/> SELECT ?name ?age ?other WHERE { ?x ex:name ?name "
        "OPTIONAL { ?x ex:age ?age } OPTIONAL { ?x ex:knows ?other FILTER(isBlank(?other)) } } ORDER BY ?name"
    )
    assert result.variables == ["name", "age", "other"]
    alice = next(r for r in result.rows if r[0] and r[0].value == "Alice")
    bob = next(r for r in result.rows if r[0] and r[0].value == "Bob")
    assert (
        alice[0] == Term("literal", "Alice", None, "en")
        and alice[0].n3() == '"Alice"@en'
    )
    assert alice[1] == Term("literal", "42", "http://www.w3.org/2001/XMLSchema#integer")
    assert (
        alice[2] is not None
        and alice[2].kind == "bnode"
        and alice[2].n3().startswith("_:")
    )
    assert bob[0] == Term("literal", "Bob") and bob[1] is None
    binding = result.to_sparql_json()["results"]["bindings"][result.rows.index(bob)]
    assert binding == {"name": {"type": "literal", "value": "Bob"}}
    assert Term("literal", 'say "hi"\n').n3() == '"say \\"hi\\"\\n"'
    assert Term("iri", "http://e/x").to_sparql_json() == {
        "type": "uri",
        "value": "http://e/x",
    }
    construct = kg.query("CONSTRUCT WHERE { ?s <http://example.org/age> ?o }")
    assert (
        construct.variables == ["subject", "predicate", "object"]
        and len(construct.rows) == 1
    )


def test_timeout_on_blocking_and_streaming_queries(tmp_path: Path) -> None:
    data = tmp_path / "grid.nt"
    data.write_text(
        "".join(f"<http://e/s{i}> <http://e/p> <http://e/o{i}> .\n" for i in range(180))
    )
    kg = OxigraphKG([data])
    # ~6 M joined rows: about a second of work, all of it before the first (only) row.
    blocking = "SELECT (COUNT(*) AS ?n) WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"
    started = time.monotonic()
    with pytest.raises(QueryTimeout, match="timeout"):
        kg.query(blocking, timeout=0.2)
    assert time.monotonic() - started < 1.0
    streaming = "SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }"
    with pytest.raises(QueryTimeout):
        kg.query(streaming, timeout=0.2, max_rows=10**9)
    time.sleep(0.3)  # the abandoned streaming worker stops at its next row
    busy = [t for t in threading.enumerate() if t.name == "oxigraph-query"]
    assert len(busy) <= 1  # at most the blocking aggregate, which cannot be interrupted


# ---------------------------------------------------------------- read-only guard, prefixes


@pytest.mark.parametrize(
    "update",
    [
        "INSERT DATA { <http://a> <http://b> <http://c> }",
        "delete where { ?s ?p ?o }",
        "PREFIX ex: <http://e/>\nDELETE { ?s ex:p ?o } INSERT { ?s ex:q ?o } WHERE { ?s ex:p ?o }",
        "WITH <http://g> DELETE { ?s ?p ?o } WHERE { ?s ?p ?o }",
        "LOAD <http://example.org/data.ttl>",
        "CLEAR ALL",
        "DROP GRAPH <http://g>",
        "CREATE GRAPH <http://g>",
        "ADD <http://a> TO <http://b>",
        "MOVE DEFAULT TO <http://g>",
        "COPY <http://a> TO <http://b>",
        "SELECT * { ?s ?p ?o } ;\n# sneaky\ninsert data { <http://a> <http://b> <http://c> }",
    ],
)
def test_updates_are_rejected_before_any_store(update: str, tiny: Path) -> None:
    with pytest.raises(UpdateNotAllowed, match="read-only"):
        check_read_only(update)
    with pytest.raises(UpdateNotAllowed):
        OxigraphKG([tiny]).query(update)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT ?delete ?insert WHERE { ?delete <http://e/drop#clear> ?insert }",
        "PREFIX ex: <http://e/> SELECT * { ?s ex:load ?o ; ex:DELETE _:copy }",
        'SELECT * { ?s ?p "INSERT DATA { <a> <b> <c> }" }  # DELETE WHERE { ?s ?p ?o }',
        "SELECT * { ?s ?p '''multi\nDROP ALL\nline''' FILTER(?o < 3) }",
        "SELECT * { ?s ?p ?o FILTER(lang(?o) = 'en') } ORDER BY ?o",
    ],
)
def test_read_queries_with_update_words_pass(query: str) -> None:
    check_read_only(query)


def test_add_missing_prefixes() -> None:
    query = "SELECT ?x WHERE { ?x a pv:Employee ; rdfs:label 'dbo:x' ; <http://a#xsd:y> ?o ; foo:bar _:b } # owl:c"
    fixed = add_missing_prefixes(query)
    assert fixed == (
        f"PREFIX pv: <{KNOWN_PREFIXES['pv']}>\nPREFIX rdfs: <{KNOWN_PREFIXES['rdfs']}>\n"
        + query
    )
    assert add_missing_prefixes(fixed) == fixed  # never duplicates
    declared = "PREFIX rdfs: <http://other/> SELECT ?l { ?x rdfs:label ?l }"
    assert add_missing_prefixes(declared) == declared
    assert add_missing_prefixes(
        "SELECT * { ?s ex:p ?o }", {"ex": "http://e/"}
    ).startswith("PREFIX ex: <http://e/>\n")
    assert {
        "rdf",
        "rdfs",
        "xsd",
        "owl",
        "skos",
        "foaf",
        "schema",
        "dbo",
        "dbr",
        "dbp",
        "wd",
        "wdt",
    } <= set(KNOWN_PREFIXES)


def test_open_kg_chooses_the_backend(tiny: Path) -> None:
    assert isinstance(open_kg(files=[tiny], max_rows=5), OxigraphKG)
    assert isinstance(
        open_kg(endpoint="http://127.0.0.1:9/sparql", retries=0), EndpointKG
    )
    with pytest.raises(KGError, match="exactly one"):
        open_kg()
    with pytest.raises(KGError, match="exactly one"):
        open_kg(files=[tiny], endpoint="http://127.0.0.1:9/sparql")


def test_public_names_match_the_contract() -> None:
    for name in kgmod.__all__:
        assert hasattr(kgmod, name), name


# ---------------------------------------------------------------- remote endpoint, real HTTP


SELECT_JSON = {
    "head": {"vars": ["x", "label", "n", "b"]},
    "results": {
        "bindings": [
            {
                "x": {"type": "uri", "value": "http://e/x"},
                "label": {"type": "literal", "value": "Ex", "xml:lang": "en"},
                "n": {
                    "type": "typed-literal",
                    "value": "3",
                    "datatype": "http://www.w3.org/2001/XMLSchema#integer",
                },
                "b": {"type": "bnode", "value": "b0"},
            },
            {
                "x": {"type": "uri", "value": "http://e/y"},
                "label": {"type": "literal", "value": "plain"},
            },
        ]
    },
}


class FakeEndpoint:
    """A real HTTP server on 127.0.0.1 answering from a script of (status, body, delay)."""

    def __init__(self) -> None:
        self.script: list[tuple[int, bytes | str | dict, float]] = []
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body_params: str) -> None:
                url = urlsplit(self.path)
                params = {**parse_qs(url.query), **parse_qs(body_params)}
                endpoint.requests.append(
                    {
                        "method": self.command,
                        "params": params,
                        "agent": self.headers.get("User-Agent"),
                    }
                )
                status, body, delay = (
                    endpoint.script.pop(0)
                    if endpoint.script
                    else (200, SELECT_JSON, 0.0)
                )
                time.sleep(delay)
                ctype = (
                    "text/turtle"
                    if isinstance(body, str)
                    else "application/sparql-results+json"
                )
                payload = (
                    body.encode()
                    if isinstance(body, str)
                    else body
                    if isinstance(body, bytes)
                    else json.dumps(body).encode()
                )
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout test)

            def do_GET(self) -> None:
                self._answer("")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                self._answer(self.rfile.read(length).decode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sparql"
        threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.02},
            daemon=True,
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def endpoint() -> Any:
    server = FakeEndpoint()
    yield server
    server.close()


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_endpoint_select_is_normalized(
    endpoint: FakeEndpoint, method: Literal["GET", "POST"]
) -> None:
    kg = EndpointKG(endpoint.url, method=method, default_graph="http://g", retries=0)
    result = kg.query("SELECT * WHERE { ?x ?p ?o }")
    assert result.variables == ["x", "label", "n", "b"]
    assert result.rows[0] == (
        Term("iri", "http://e/x"),
        Term("literal", "Ex", lang="en"),
        Term("literal", "3", "http://www.w3.org/2001/XMLSchema#integer"),
        Term("bnode", "b0"),
    )
    assert result.rows[1] == (
        Term("iri", "http://e/y"),
        Term("literal", "plain"),
        None,
        None,
    )
    request = endpoint.requests[0]
    assert request["method"] == method
    assert request["params"]["query"] == ["SELECT * WHERE { ?x ?p ?o }"]
    assert request["params"]["default-graph-uri"] == ["http://g"]
    assert request["agent"] == "sparql-researcher/0.1 (+text2sparql)"
    assert kg.name == endpoint.url and kg.fingerprint.startswith(endpoint.url)


def test_endpoint_ask_row_cap_and_construct(endpoint: FakeEndpoint) -> None:
    kg = EndpointKG(endpoint.url, retries=0, max_rows=1)
    endpoint.script = [
        (200, {"head": {}, "boolean": True}, 0.0),
        (200, SELECT_JSON, 0.0),
    ]
    assert kg.query("ASK { ?s ?p ?o }").boolean is True
    capped = kg.query("SELECT * { ?s ?p ?o }")
    assert len(capped.rows) == 1 and capped.truncated
    endpoint.script = [(200, '<http://e/x> <http://e/p> "v"@de .\n', 0.0)]
    graph = kg.query("CONSTRUCT WHERE { ?s ?p ?o }")
    assert graph.rows == [
        (
            Term("iri", "http://e/x"),
            Term("iri", "http://e/p"),
            Term("literal", "v", lang="de"),
        )
    ]


def test_endpoint_retries_5xx_then_succeeds(endpoint: FakeEndpoint) -> None:
    endpoint.script = [
        (500, b"boom", 0.0),
        (503, b"busy", 0.0),
        (200, SELECT_JSON, 0.0),
    ]
    result = EndpointKG(endpoint.url, retries=3, backoff=0.01).query(
        "SELECT * { ?s ?p ?o }"
    )
    assert len(result.rows) == 2 and len(endpoint.requests) == 3


def test_endpoint_gives_up_after_retries(endpoint: FakeEndpoint) -> None:
    endpoint.script = [(500, b"down", 0.0)] * 5
    with pytest.raises(EndpointError, match="failed after 3 attempt"):
        EndpointKG(endpoint.url, retries=2, backoff=0.01).query("SELECT * { ?s ?p ?o }")
    assert len(endpoint.requests) == 3


def test_endpoint_400_is_a_syntax_error_without_retry(endpoint: FakeEndpoint) -> None:
    endpoint.script = [(400, b"Parse error: line 1\nunexpected token '}'", 0.0)]
    with pytest.raises(QuerySyntaxError) as info:
        EndpointKG(endpoint.url, retries=3, backoff=0.01).query("SELECT * { ?s ?p }")
    assert "HTTP 400" in str(info.value) and "unexpected token '}'" in str(info.value)
    assert "\n" not in str(info.value) and len(endpoint.requests) == 1


def test_endpoint_timeout(endpoint: FakeEndpoint) -> None:
    endpoint.script = [(200, SELECT_JSON, 1.0)]
    with pytest.raises(QueryTimeout, match="did not answer within 0.2 s"):
        EndpointKG(endpoint.url, retries=0).query("SELECT * { ?s ?p ?o }", timeout=0.2)


def test_endpoint_update_never_sent(endpoint: FakeEndpoint) -> None:
    with pytest.raises(UpdateNotAllowed):
        EndpointKG(endpoint.url).query("DROP ALL")
    assert endpoint.requests == []


def test_unreachable_endpoint_names_the_url() -> None:
    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/sparql"
    with pytest.raises(EndpointError) as info:
        EndpointKG(url, retries=1, backoff=0.01).query("SELECT * { ?s ?p ?o }")
    assert (
        url in str(info.value)
        and "unreachable" in str(info.value)
        and "\n" not in str(info.value)
    )


def test_a_file_without_triples_is_an_error_not_an_empty_graph(tmp_path: Path) -> None:
    not_rdf = tmp_path / "answers.json"
    not_rdf.write_text('{"answers": [1, 2], "ok": true}')
    empty = tmp_path / "empty.ttl"
    empty.write_text("# nothing here\n")
    for path in (not_rdf, empty):
        with pytest.raises(KGError, match="no RDF triples"):
            OxigraphKG([path])
