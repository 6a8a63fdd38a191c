"""Tests for worker_agent.tools on the real CK25 KG (embedded Oxigraph) and small Turtle files."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
import respx
import yaml

from worker_agent.kg import OxigraphKG, QueryResult, QueryTimeout, Term
from worker_agent.tools import (
    Candidate,
    LabelIndex,
    OntologyInfo,
    Preview,
    ServiceLookup,
    SparqlLookup,
    ToolError,
    Tools,
    fit_json,
    local_name_surface,
    tokenize,
)

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
CK25 = DATASETS / "ck25"
PV = "http://ld.company.org/prod-vocab/"
PRODI = "http://ld.company.org/prod-instances/"
KAREN = PRODI + "empl-Karen.Brant%40company.org"
U990 = PRODI + "hw-U990-5234138"
MARKETING = PRODI + "dept-85880"
DBR = "http://dbpedia.org/resource/"

@pytest.fixture(scope="module")
def ck25() -> OxigraphKG:
    if not (CK25 / "prod-inst.ttl").is_file():
        pytest.skip("CK25 data not available")
    return OxigraphKG([CK25 / "prod-vocab.ttl", CK25 / "prod-inst.ttl"])

@pytest.fixture(scope="module")
def tools(ck25: OxigraphKG) -> Tools:
    return Tools(ck25)

SMALL_TTL = """
@prefix ex: <http://example.org/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix foaf: <http://xmlns.com/foaf/0.1/> .
@prefix dbo: <http://dbpedia.org/ontology/> .
@prefix dbp: <http://dbpedia.org/property/> .

ex:JM a foaf:Person ; rdfs:label "Jürgen Müller"@de ; dbo:birthPlace ex:Bonn ; dbp:birthPlace ex:Bonn ;
      ex:knows ex:Barack_Obama .
ex:Bonn a ex:City ; rdfs:label "Bonn"@en .
ex:Barack_Obama a foaf:Person .
ex:W1 a ex:Widget ; ex:title "Quantum Widget" .
"""

@pytest.fixture()
def small_kg(tmp_path: Path) -> OxigraphKG:
    path = tmp_path / "small.ttl"
    path.write_text(SMALL_TTL, encoding="utf-8")
    return OxigraphKG([path])

def iris(cands: list[Candidate]) -> list[str]:
    return [c.iri for c in cands]

# -- normalization ------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("iri", "surface"),
    [
        (KAREN, "Karen Brant"),
        (PRODI + "prod-cat-Transistor", "Transistor"),
        ("http://dbpedia.org/resource/Barack_Obama", "Barack Obama"),
        ("http://dbpedia.org/ontology/birthPlace", "birth Place"),
        (PRODI + "suppl-0058fc5e-e9e8-46eb-ac6d-673e436a5d7a", None),
        ("http://www.wikidata.org/entity/Q42", None),
        (PRODI + "dept-85880", None),
    ],
)
def test_local_name_surface(iri: str, surface: str | None) -> None:
    assert local_name_surface(iri) == surface

def test_tokenize_folds_accents_only_when_asked() -> None:
    assert tokenize("Jürgen MÜLLER-Lüdenscheidt") == ["jurgen", "muller", "ludenscheidt"]
    assert tokenize("Jürgen Müller", fold=False) == ["jürgen", "müller"]

# -- surface forms on CK25 ----------------------------------------------------------------------

def test_full_name_links_to_employee(tools: Tools) -> None:
    top = tools.surface_forms("Karen Brant")[0]
    assert top.iri == KAREN
    assert top.score == 100.0 and top.label == "Karen Brant"
    assert PV + "Employee" in top.types
    assert top.popularity > 10  # degree: her own triples plus hasProductManager links

def test_surname_with_title_needs_surname_mode(tools: Tools) -> None:
    with_surname = tools.surface_forms("Ms. Brant", surname=True)
    assert with_surname[0].iri == KAREN and with_surname[0].matched_label == "Brant"
    assert KAREN not in iris(tools.surface_forms("Ms. Brant", surname=False))

def test_product_department_supplier_and_typo(tools: Tools) -> None:
    assert tools.surface_forms("U990 LCD Inductor")[0].iri == U990
    marketing = tools.surface_forms("Marketing")
    assert marketing[0].iri == MARKETING and PV + "Department" in marketing[0].types
    assert marketing[0].score > marketing[1].score  # "IoT Data Marketing" ranks below
    assert tools.surface_forms("Allen-Short")[0].iri == PRODI + "suppl-0058fc5e-e9e8-46eb-ac6d-673e436a5d7a"
    assert tools.surface_forms("Karen Brnat")[0].iri == KAREN
    assert tools.surface_forms("Transistors")[0].iri == PRODI + "prod-cat-Transistor"
    assert tools.surface_forms("xyzzy plugh") == []

def test_k_threshold_and_iri_passthrough(tools: Tools) -> None:
    assert len(tools.surface_forms("Inductor", 3)) == 3
    assert all(c.score >= 95 for c in tools.surface_forms("Inductor", 50, threshold=95))
    assert tools.surface_forms(f"<{KAREN}>")[0].iri == KAREN

def test_index_is_cached_per_fingerprint(ck25: OxigraphKG, tools: Tools) -> None:
    assert LabelIndex.for_kg(ck25) is LabelIndex.for_kg(ck25)
    assert tools.index is LabelIndex.for_kg(ck25)
    index = tools.index
    assert PV + "name" in index.predicates  # auto-detected CK25 name predicate
    assert index.label(MARKETING) == "Marketing" and index.popularity(KAREN) > 0

def test_object_only_iris_link_by_local_name(tools: Tools) -> None:
    """CK25 suppliers point at external dbpedia:Poland etc., which have no label and no type."""
    poland = tools.surface_forms("Poland")
    assert poland[0].iri == DBR + "Poland" and poland[0].label == "Poland" and poland[0].types == []
    assert poland[0].popularity == 3  # its in-degree: three suppliers
    us = tools.surface_forms("United States")
    assert us[0].iri == DBR + "United_States" and us[0].score == 90.0  # a weaker, local-name form
    assert us[0].popularity == 33
    # Labelled suppliers named "... (United States)" are still found, just below the country.
    assert any(c.label.endswith("(United States)") for c in us[1:])
    assert tools.surface_forms("France")[0].iri == DBR + "France"
    index = tools.index
    assert index is not None and index.label(DBR + "United_States") == "United States"
    assert index.stats["object_only_indexed"] == index.stats["object_only_iris"] > 60
    assert index.stats["notes"] == []
    # Vocabulary terms (rdf:type / rdfs:range objects) and icon files (foaf:depiction) are not entities.
    for term in ("http://www.w3.org/2002/07/owl#Class", "http://www.w3.org/2001/XMLSchema#string",
                 "http://xmlns.com/foaf/0.1/Person"):
        assert term not in index
    assert not any("iconify" in iri for iri in index.iris)
    spans = tools.match_spans("How many suppliers do we have in France?")
    assert [s.candidates[0].iri for s in spans if s.surface == "France"] == [DBR + "France"]

# -- small in-memory KGs --------------------------------------------------------------------------

def test_accent_folding(small_kg: OxigraphKG) -> None:
    index = LabelIndex.build(small_kg)
    folded = index.lookup("Jurgen Muller", fold_accents=True)
    assert folded[0].iri == "http://example.org/JM" and folded[0].score == 100.0
    assert "http://example.org/JM" not in iris(index.lookup("Jurgen Muller", fold_accents=False, threshold=90))

def test_local_name_and_auto_label_predicates(small_kg: OxigraphKG) -> None:
    auto = LabelIndex.build(small_kg)
    obama = auto.lookup("Barack Obama")
    assert obama[0].iri == "http://example.org/Barack_Obama" and obama[0].score == 90.0  # weaker form
    assert auto.lookup("Quantum Widget")[0].iri == "http://example.org/W1"
    plain = LabelIndex.build(small_kg, auto_label_predicates=False)
    assert "http://example.org/W1" not in iris(plain.lookup("Quantum Widget"))
    explicit = LabelIndex.build(small_kg, ["http://example.org/title"], auto_label_predicates=False)
    assert explicit.lookup("Quantum Widget")[0].iri == "http://example.org/W1"

OBJECTS_TTL = """
@prefix ex: <http://example.org/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
ex:A a ex:Company ; rdfs:label "Acme" ; ex:country ex:New_Zealand , <http://example.org/S%C3%A3o_Tom%C3%A9> ;
     ex:logo <http://example.org/img/acme.png> ; ex:seeAlso <http://example.org/page?id=7> .
ex:B a ex:Company ; rdfs:label "Bolt" ; ex:country ex:New_Zealand .
"""

def test_object_only_iris_and_their_cap(tmp_path: Path) -> None:
    path = tmp_path / "objects.ttl"
    path.write_text(OBJECTS_TTL, encoding="utf-8")
    kg = OxigraphKG([path])
    index = LabelIndex.build(kg)
    nz = index.lookup("New Zealand")
    assert nz[0].iri == "http://example.org/New_Zealand" and nz[0].popularity == 2
    assert index.lookup("Sao Tome")[0].iri == "http://example.org/S%C3%A3o_Tom%C3%A9"  # percent-decoded
    assert index.stats["object_only_iris"] == 2  # not the logo file, not the page with a query string
    assert "http://example.org/Company" not in index  # a type object, not an entity
    capped = LabelIndex.build(kg, max_object_iris=1)
    assert capped.lookup("New Zealand") == [] and capped.lookup("Acme")[0].iri == "http://example.org/A"
    assert capped.stats["object_only_indexed"] == 0
    assert "not indexed" in capped.stats["notes"][0] and "more than 1" in capped.stats["notes"][0]

def test_group_namespaces(small_kg: OxigraphKG) -> None:
    jm = "http://example.org/JM"
    grouped = Tools(small_kg, group_namespaces=True).ontology(jm)
    birth = [p for p in grouped.predicates if p.iri.endswith("birthPlace")]
    assert len(birth) == 1 and birth[0].count == 2 and len(birth[0].same_as) == 1
    assert birth[0].examples[0].label == "Bonn"
    plain = Tools(small_kg).ontology(jm)
    assert len([p for p in plain.predicates if p.iri.endswith("birthPlace")]) == 2

# -- match_spans --------------------------------------------------------------------------------

def test_match_spans_on_questions(tools: Tools) -> None:
    text = "In which department is Ms. Brant?"
    spans = tools.match_spans(text, surname=True)
    by_surface = {s.surface: s for s in spans}
    assert by_surface["Ms. Brant"].candidates[0].iri == KAREN
    assert all(text[s.start : s.end] == s.surface for s in spans)
    assert by_surface["department"].candidates[0].iri == PV + "Department"

    spans = tools.match_spans("What products are compatible with the U990 LCD Inductor?")
    assert any(s.surface == "U990 LCD Inductor" and s.candidates[0].iri == U990 for s in spans)
    spans = tools.match_spans("Which department is responsible for the Sensor Switch M558-2275045?")
    assert any(s.surface == "Sensor Switch M558-2275045" and s.candidates[0].iri == PRODI + "hw-M558-2275045"
               for s in spans)
    spans = tools.match_spans("What is the name of the Network expert from the Marketing Department?")
    assert [s.candidates[0].iri for s in spans if s.surface == "Marketing"] == [MARKETING]

def test_match_spans_is_fast(ck25: OxigraphKG) -> None:
    index = LabelIndex.build(ck25)  # fresh caches: measure cold lookups
    questions = [q["question"]["en"] for q in yaml.safe_load((CK25 / "questions.yml").read_text())["questions"]]
    timings = []
    for text in questions:
        started = time.perf_counter()
        index.match_spans(text, surname=True)
        timings.append(time.perf_counter() - started)
    assert statistics.median(timings) < 0.020

# -- remote lookups (SPARQL on a store forced through the generic path, service via respx) --------

def test_sparql_lookup_through_generic_path(ck25: OxigraphKG) -> None:
    remote = Tools(ck25, use_index=False, label_predicates=[PV + "name"])
    assert remote.lookup_mode == "sparql" and remote.index is None
    assert remote.surface_forms("Karen Brant")[0].iri == KAREN
    assert remote.surface_forms("Ms. Brant")[0].iri == KAREN  # surname mode is on by default
    assert remote.surface_forms("U990 LCD Inductor")[0].iri == U990
    spans = remote.match_spans("In which department is Ms. Brant?")
    assert any(s.candidates[0].iri == KAREN for s in spans)

def test_sparql_lookup_accent_regex(small_kg: OxigraphKG) -> None:
    lookup = SparqlLookup(small_kg, langs=())
    assert lookup.lookup("Jurgen Muller")[0].iri == "http://example.org/JM"
    assert lookup.lookup("Jurgen Muller", fold_accents=False, threshold=90) == []

class RecordingKG:
    """A fake endpoint that records queries and answers from a canned table."""

    name = "fake"
    fingerprint = "fake"

    def __init__(self, error: Exception | None = None) -> None:
        self.queries: list[str] = []
        self.error = error

    def query(self, sparql: str, *, timeout: float | None = None, max_rows: int | None = None) -> QueryResult:
        self.queries.append(sparql)
        if self.error is not None:
            raise self.error
        if "bif:contains" in sparql:
            return QueryResult(["s", "label"], [(Term("iri", "http://dbpedia.org/resource/Berlin"),
                                                 Term.literal("Berlin", lang="en"))])
        return QueryResult(["s", "t"], [])

def test_virtuoso_full_text_query() -> None:
    kg = RecordingKG()
    tools = Tools(kg, virtuoso=True)  # type: ignore[arg-type]
    assert tools.lookup_mode == "virtuoso"
    assert tools.surface_forms("Berlin")[0].iri == "http://dbpedia.org/resource/Berlin"
    assert "?label bif:contains '\"berlin\"'" in kg.queries[0]

@respx.mock
def test_lookup_service() -> None:
    url = "https://lookup.example.org/api/search"
    route = respx.get(url).mock(return_value=httpx.Response(200, json={"docs": [
        {"resource": ["http://dbpedia.org/resource/Angela_Merkel"], "label": ["<B>Angela</B> Merkel"],
         "type": ["http://dbpedia.org/ontology/Person"], "refCount": ["4321"]},
        {"resource": ["http://dbpedia.org/resource/Merkel_cell"], "label": ["Merkel cell"], "refCount": ["12"]},
    ]}))
    tools = Tools(RecordingKG(), lookup_url=url)  # type: ignore[arg-type]
    cands = tools.surface_forms("Angela Merkel")
    assert route.called and route.calls[0].request.url.params["query"] == "Angela Merkel"
    assert cands[0].iri == "http://dbpedia.org/resource/Angela_Merkel"
    assert cands[0].label == "Angela Merkel" and cands[0].popularity == 4321
    assert iris(tools.surface_forms("Merkel"))[0] == "http://dbpedia.org/resource/Angela_Merkel"  # surname

    respx.get(url).mock(return_value=httpx.Response(503))
    with pytest.raises(ToolError, match="lookup service"):
        ServiceLookup(url).lookup("Angela Merkel")
    assert tools.call("surface_forms", {"text": "Angela Merkel"}).startswith("error: surface_forms failed")

# -- ontology -----------------------------------------------------------------------------------

def test_ontology_of_employee(tools: Tools) -> None:
    info = tools.ontology(KAREN)
    assert info.kind == "entity" and info.label == "Karen Brant"
    assert [t.iri for t in info.types] == [PV + "Employee"]
    member = info.predicate(PV + "memberOf", "out")
    assert member is not None and member.count == 1 and member.label == "member of"
    assert member.examples[0].value == PRODI + "dept-73191" and member.examples[0].label == "Engineering"
    managed = info.predicate(PV + "hasProductManager", "in")
    assert managed is not None and managed.count == 17 and len(managed.examples) == 3
    json.dumps(info.to_dict())

def test_ontology_of_class_and_property(tools: Tools) -> None:
    employee = tools.ontology("pv:Employee")
    assert employee.kind == "class" and employee.instance_count == 47
    assert [c.iri for c in employee.superclasses] == [PV + "Agent"]
    assert [c.iri for c in employee.subclasses] == [PV + "Manager"]
    member = employee.predicate(PV + "memberOf", "out")
    assert member is not None and member.count == 47 and member.examples

    prop = tools.ontology(f"<{PV}memberOf>")
    assert prop.kind == "property" and prop.count == 53
    assert prop.domain[0].iri == PV + "Agent" and prop.domain[0].count is None  # declared first
    assert (PV + "Department", "Department", 53) in prop.range
    assert len(prop.example_pairs) == 3

def test_ontology_unknown_and_invalid(tools: Tools) -> None:
    assert tools.ontology("http://example.org/nothing").kind == "unknown"
    with pytest.raises(ToolError):
        tools.ontology("Karen Brant")

def test_classes_and_predicates(tools: Tools) -> None:
    classes = tools.classes()
    assert (PV + "Employee", "Employee", 47) in classes
    assert (classes[0].count or 0) >= (classes[-1].count or 0)
    predicates = {p.iri: p for p in tools.predicates()}
    assert predicates[PV + "memberOf"].count == 53 and predicates[PV + "memberOf"].label == "member of"

# -- test_sparql --------------------------------------------------------------------------------

def test_preview_with_labels_and_prefixes(tools: Tools) -> None:
    preview = tools.test_sparql(f"SELECT ?d WHERE {{ <{KAREN}> pv:memberOf ?d }}")
    assert preview.ok and preview.total == 1 and preview.variables == ["d"]
    assert preview.rows == [["prodi:dept-73191 (Engineering)"]]
    assert preview.query is not None and preview.query.startswith("PREFIX pv:")
    many = tools.test_sparql("SELECT ?e ?n WHERE { ?e a pv:Employee ; pv:name ?n }")
    assert many.total == 47 and len(many.rows) == 10
    assert tools.test_sparql("ASK { ?x a pv:Employee }").boolean is True

def test_preview_errors(tools: Tools, ck25: OxigraphKG) -> None:
    cases = {
        "SELEC ?x WHERE { ?x ?p ?o }": "syntax",
        "INSERT DATA { <http://a/b> <http://a/c> <http://a/d> }": "update_rejected",
        'SELECT ?x WHERE { BIND(xsd:token("3") AS ?x) }': "unsupported_function",
    }
    for query, kind in cases.items():
        preview = tools.test_sparql(query)
        assert not preview.ok and preview.error_kind == kind and preview.error
    capped = Tools(ck25, count_limit=5).test_sparql("SELECT ?x WHERE { ?x a pv:Employee }")
    assert capped.ok and capped.total is None and len(capped.rows) == 5
    timeout = Tools(RecordingKG(QueryTimeout("too slow")), use_index=False).test_sparql("SELECT * { ?s ?p ?o }")  # type: ignore[arg-type]
    assert timeout.error_kind == "timeout" and timeout.error == "too slow"
    assert tools.test_sparql("  ").error_kind == "syntax"

def test_preview_compact_fits_by_dropping_rows() -> None:
    rows = [[f"prodi:item-{i} (Item {i})", '"' + "x" * 500 + '"'] for i in range(100)]
    preview = Preview(ok=True, variables=["s", "d"], rows=rows, total=1234)
    assert preview.compact()["rows"] == rows  # no limit: everything
    fitted = preview.compact(2_000)
    assert len(json.dumps(fitted, ensure_ascii=False, separators=(",", ":"))) <= 2_000
    assert fitted["truncated"] is True and fitted["total"] == 1234
    assert 0 < fitted["shown"] == len(fitted["rows"]) < 100
    assert fitted["rows"][0][0] == rows[0][0] and len(fitted["rows"][0][1]) == 200  # long value cut
    assert "of the first 100 rows (1234 in total)" in fitted["note"]
    small = Preview(ok=True, variables=["s"], rows=[["a"]], total=1)
    assert small.compact(2_000) == small.compact()  # fits: untouched, no marker
    wide = Preview(ok=True, variables=[f"v{i}" for i in range(400)], rows=[["y" * 30] * 400], total=1)
    squeezed = wide.compact(1_000)
    assert squeezed["shown"] == 0 and squeezed["truncated"] and squeezed["total"] == 1
    assert len(json.dumps(squeezed, separators=(",", ":"))) <= 1_000

def test_large_test_sparql_output_stays_valid_json(ck25: OxigraphKG) -> None:
    tools = Tools(ck25, preview_rows=100)
    query = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"
    text = tools.call("test_sparql", {"sparql": query})
    assert len(text) <= 8_000
    data = json.loads(text)  # was cut mid-JSON at the character limit
    assert data["ok"] and data["truncated"] is True and data["vars"] == ["s", "p", "o"]
    assert 10 < data["shown"] == len(data["rows"]) < 100
    out = tools.run_call("test_sparql", {"sparql": query})
    assert out.text == text and out.data == data and out.error is None
    assert out.preview is not None and len(out.preview.rows) == 100  # the whole preview behind it
    # Other tools' big answers are fitted the same way: valid JSON marked as truncated.
    assert fit_json([{"iri": "x" * 50}] * 400, 1_000)["shown"] < 400
    onto = fit_json({"iri": "x", "out": [{"p": "y" * 80}] * 200, "in": [1, 2]}, 1_000)
    assert onto["truncated"] and onto["omitted"]["out"] > 100 and onto["in"] == [1, 2]
    assert tools.run_call("test_sparql", {"sparq": query}).error == "arguments"

# -- LLM interface ------------------------------------------------------------------------------

def test_schemas_are_valid_json_schemas(tools: Tools) -> None:
    schemas = tools.schemas()
    assert [s["name"] for s in schemas] == ["surface_forms", "ontology", "test_sparql"]
    for schema in schemas:
        assert set(schema) == {"name", "description", "parameters"}
        jsonschema.Draft202012Validator.check_schema(schema["parameters"])
    json.dumps(schemas)

def test_call_dispatch_and_garbage(tools: Tools) -> None:
    found = json.loads(tools.call("surface_forms", {"text": "Karen Brant", "k": 2}))
    assert found[0]["iri"] == KAREN
    assert KAREN in tools.call("surface_forms", json.dumps({"text": "Karen Brant"}))  # JSON-string args
    onto = json.loads(tools.call("ontology", {"iri": "pv:Employee"}))
    assert onto["kind"] == "class" and onto["instances"] == 47
    preview = json.loads(tools.call("test_sparql", {"sparql": "SELECT ?x WHERE { ?x a pv:Department }"}))
    assert preview["ok"] and preview["total"] == 6
    garbage = [
        ("nope", {}),
        ("surface_forms", {"txt": "x"}),
        ("surface_forms", {"text": 42}),
        ("surface_forms", {"text": "x", "k": -1}),
        ("ontology", "{not json"),
        ("ontology", ["iri"]),
        ("ontology", {"iri": "not an iri"}),
        ("test_sparql", None),
    ]
    for name, args in garbage:
        out = tools.call(name, args)  # type: ignore[arg-type]
        assert isinstance(out, str) and out.startswith("error:"), (name, args, out)
    assert json.loads(tools.call("test_sparql", {"sparql": "SELEC"}))["error_kind"] == "syntax"

def test_results_serialize(tools: Tools) -> None:
    payload = {
        "cands": [c.to_dict() for c in tools.surface_forms("Karen Brant")],
        "spans": [s.to_dict() for s in tools.match_spans("Who is the manager of Heinrich Hoch?")],
        "onto": tools.ontology(PV + "memberOf").to_dict(),
        "preview": tools.test_sparql("SELECT * WHERE { ?s pv:memberOf ?o } LIMIT 2").to_dict(),
    }
    restored = json.loads(json.dumps(payload))
    assert restored["cands"][0]["iri"] == KAREN
    assert isinstance(OntologyInfo(iri="x", kind="unknown").to_dict(), dict)
    assert Preview(ok=False, error="e", error_kind="syntax").to_dict()["error_kind"] == "syntax"
