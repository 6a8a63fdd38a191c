"""The bundled demo dataset (worker_agent/data/demo): graph, questions, splits and generator."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pyoxigraph as ox
import pytest
import yaml

DEMO = Path(__file__).resolve().parents[1] / "worker_agent" / "data" / "demo"
ONT = "http://demo.sparql-researcher.org/ontology/"
RES = "http://demo.sparql-researcher.org/resource/"
OWL = "http://www.w3.org/2002/07/owl#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
REQUIRED_FEATURES = {"SELECT", "ASK", "COUNT", "ORDER", "LIMIT", "FILTER", "GROUP", "HAVING", "OPTIONAL"}
GENERATED = ("kg.ttl", "questions.yml", "splits.yml")


@pytest.fixture(scope="module")
def store() -> ox.Store:
    s = ox.Store()
    s.load(path=str(DEMO / "kg.ttl"), format=ox.RdfFormat.TURTLE)
    return s


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    return yaml.safe_load((DEMO / "questions.yml").read_text(encoding="utf-8"))["questions"]


@pytest.fixture(scope="module")
def splits() -> dict:
    return yaml.safe_load((DEMO / "splits.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_generate", DEMO / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def specs(generator: ModuleType) -> list:
    return generator.build_questions(generator.build_world())


def run(store: ox.Store, sparql: str) -> bool | list[list[ox.Term | None]]:
    result = store.query(sparql)
    if isinstance(result, ox.QueryBoolean):
        return bool(result)
    return [list(solution) for solution in result]


def values(store: ox.Store, sparql: str) -> set[str]:
    rows = run(store, sparql)
    assert isinstance(rows, list)
    return {row[0].value for row in rows if row[0] is not None}


# --- graph ---------------------------------------------------------------------------------


def test_kg_parses_with_a_few_thousand_triples(store: ox.Store) -> None:
    assert 2000 <= len(store) <= 6000


def test_ontology_declares_classes_and_properties_with_label_domain_range(store: ox.Store) -> None:
    classes = values(store, f"SELECT ?c WHERE {{ ?c a <{OWL}Class> }}")
    assert 8 <= len(classes) <= 12
    props = values(store, f"SELECT ?p WHERE {{ VALUES ?k {{ <{OWL}ObjectProperty> <{OWL}DatatypeProperty> }} ?p a ?k }}")
    assert 20 <= len(props) <= 30
    for kind in ("ObjectProperty", "DatatypeProperty"):
        assert values(store, f"SELECT ?p WHERE {{ ?p a <{OWL}{kind}> }}"), kind
    incomplete = values(store, f"""SELECT ?p WHERE {{
        VALUES ?k {{ <{OWL}ObjectProperty> <{OWL}DatatypeProperty> }} ?p a ?k .
        FILTER NOT EXISTS {{ ?p <{RDFS}label> ?l ; <{RDFS}domain> ?d ; <{RDFS}range> ?r }} }}""")
    assert not incomplete
    assert all(iri.startswith(ONT) for iri in classes | props)


def test_graph_is_messy_like_real_kgs(store: ox.Store) -> None:
    subjects = values(store, "SELECT DISTINCT ?s WHERE { ?s ?p ?o FILTER(isIRI(?s)) }")
    assert f"{RES}person-Zo%C3%AB.M%C3%BCller" in subjects
    assert sum("%C3%" in s for s in subjects) >= 20
    names = values(store, f"SELECT ?n WHERE {{ ?p a <{ONT}Author> ; <{ONT}name> ?n }}")
    assert {"Zoë Müller", "Lars Ødegaard", "Björk Sigurðardóttir", "José Almeida"} <= names
    # people (typed only with the subclasses: no inference) are named with do:name, all else with rdfs:label
    people = f"VALUES ?k {{ <{ONT}Author> <{ONT}Librarian> }} ?p a ?k ."
    assert not run(store, f"ASK {{ {people} FILTER NOT EXISTS {{ ?p <{ONT}name> ?n }} }}")
    assert not run(store, f"ASK {{ {people} ?p <{RDFS}label> ?l }}")
    assert not run(store, f"ASK {{ ?x a <{ONT}Book> FILTER NOT EXISTS {{ ?x <{RDFS}label> ?l }} }}")
    # optional properties are missing for some entities
    for cls, prop in (("Book", "pageCount"), ("Book", "isbn"), ("Author", "birthDate"), ("City", "population")):
        assert run(store, f"ASK {{ ?x a <{ONT}{cls}> FILTER NOT EXISTS {{ ?x <{ONT}{prop}> ?v }} }}"), prop
    datatypes = values(store, "SELECT DISTINCT ?d WHERE { ?s ?p ?o FILTER(isLiteral(?o)) BIND(DATATYPE(?o) AS ?d) }")
    xsd = "http://www.w3.org/2001/XMLSchema#"
    assert {xsd + "integer", xsd + "date", xsd + "decimal"} <= datatypes


# --- questions -----------------------------------------------------------------------------


def test_question_file_header_and_ids(questions: list[dict]) -> None:
    header = yaml.safe_load((DEMO / "questions.yml").read_text(encoding="utf-8"))["dataset"]
    assert header == {"id": "https://demo.sparql-researcher.org/2026/libraries/", "prefix": "demo",
                      "defaultNamespace": ONT}
    ids = [q["id"] for q in questions]
    assert 48 <= len(ids) <= 60
    assert ids == list(range(1, len(ids) + 1))
    for q in questions:
        assert set(q) == {"id", "question", "features", "classes", "properties", "query"}
        assert q["question"]["en"].strip()
        assert q["query"]["sparql"].startswith("PREFIX ")


def test_every_gold_query_returns_an_answer(store: ox.Store, questions: list[dict]) -> None:
    booleans = []
    for q in questions:
        result = run(store, q["query"]["sparql"])
        if "ASK" in q["features"]:
            assert isinstance(result, bool), q["id"]
            booleans.append(result)
        else:
            assert isinstance(result, list) and result, f"question {q['id']} has an empty answer"
            assert any(cell is not None for row in result for cell in row), q["id"]
    assert True in booleans and False in booleans


def test_features_cover_required_kinds_and_match_queries(questions: list[dict]) -> None:
    seen = Counter(f for q in questions for f in q["features"])
    assert REQUIRED_FEATURES <= set(seen)
    markers = {"SELECT": "SELECT", "ASK": "ASK", "COUNT": "COUNT(", "ORDER": "ORDER BY", "LIMIT": "LIMIT",
               "FILTER": "FILTER", "GROUP": "GROUP BY", "HAVING": "HAVING", "OPTIONAL": "OPTIONAL"}
    for q in questions:
        text = q["query"]["sparql"]
        for feature, marker in markers.items():
            assert (feature in q["features"]) == (marker in text), f"question {q['id']}: {feature}"


def test_aggregates_are_aliased_and_selects_project_iris(store: ox.Store, questions: list[dict]) -> None:
    for q in questions:
        text = q["query"]["sparql"]
        for match in re.finditer(r"\((COUNT\([^)]*\))\s*(AS\s+\?\w+)?\)", text):
            if "SELECT" in text[: match.start()].rsplit("\n", 1)[-1]:
                assert match.group(2), f"question {q['id']}: unaliased {match.group(1)}"
        if q["features"] == ["SELECT"] or "OPTIONAL" in q["features"] or "FILTER" in q["features"]:
            rows = run(store, text)
            assert isinstance(rows, list)
            assert all(isinstance(row[0], ox.NamedNode) for row in rows), f"question {q['id']}"


def test_superlatives_have_a_unique_top_answer(store: ox.Store, questions: list[dict]) -> None:
    for q in questions:
        text = q["query"]["sparql"]
        match = re.search(r"ORDER BY (ASC|DESC)\((\?\w+)\)\nLIMIT 1", text)
        if not match:
            continue
        key = match.group(2)
        unlimited = text.replace("SELECT DISTINCT ?result", f"SELECT DISTINCT ?result {key}").replace("\nLIMIT 1", "")
        rows = run(store, unlimited)
        assert isinstance(rows, list) and len(rows) >= 2
        first, second = (float(rows[i][1].value) for i in (0, 1))
        assert first != second, f"question {q['id']}: tie at the top"


def test_classes_and_properties_named_in_questions_exist(store: ox.Store, questions: list[dict]) -> None:
    declared = values(store, f"""SELECT ?t WHERE {{
        VALUES ?k {{ <{OWL}Class> <{OWL}ObjectProperty> <{OWL}DatatypeProperty> }} ?t a ?k }}""")
    for q in questions:
        for term in q["classes"] + q["properties"]:
            assert term.startswith(":") and ONT + term[1:] in declared, f"question {q['id']}: {term}"
        used = {ONT + m for m in re.findall(r"\bdo:(\w+)", q["query"]["sparql"])}
        assert used <= declared, f"question {q['id']}: {used - declared}"
        assert used <= {ONT + t[1:] for t in q["classes"] + q["properties"]}, f"question {q['id']}: unlisted term"


def test_hard_linking_cases_are_present(store: ox.Store, questions: list[dict]) -> None:
    texts = " ".join(q["question"]["en"] for q in questions)
    names = values(store, f"SELECT ?n WHERE {{ ?p <{ONT}name> ?n }}")
    for unaccented, accented in (("Muller", "Müller"), ("Odegaard", "Ødegaard"), ("Wrobel", "Wróbel")):
        assert unaccented in texts and not any(unaccented in n for n in names)
        assert any(accented in n for n in names)
    assert "Ms. Lindqvist" in texts and "Dr. Okafor" in texts
    titles = values(store, f"SELECT ?t WHERE {{ ?b a <{ONT}Book> ; <{RDFS}label> ?t }}")
    assert {"Harbour", "Harbour Lights", "Winter", "Winter Orchards"} <= titles


# --- families and splits -------------------------------------------------------------------


def test_generator_specs_match_the_committed_questions(specs: list, questions: list[dict]) -> None:
    assert [s.text for s in specs] == [q["question"]["en"] for q in questions]
    assert [s.query for s in specs] == [q["query"]["sparql"] for q in questions]


def test_template_families_have_siblings_across_splits(generator: ModuleType, specs: list, splits: dict) -> None:
    families = generator.families(specs)
    assert 12 <= len(families) <= 16
    assignment = {int(qid): split for qid, split in splits["assignment"].items()}
    for name, ids in families.items():
        assert 3 <= len(ids) <= 5, name
        placed = Counter(assignment[i] for i in ids)
        assert placed["train"] >= 1, name
        assert placed["validation"] + placed["test"] >= 1, name
    # texts within a family differ (paraphrases with different entities, not copies)
    for ids in families.values():
        assert len({specs[i - 1].text for i in ids}) == len(ids)


def test_every_question_is_in_exactly_one_split(questions: list[dict], splits: dict) -> None:
    assert splits["seed"] == 0
    assignment = splits["assignment"]
    assert sorted(int(q) for q in assignment) == [q["id"] for q in questions]
    assert set(assignment.values()) == {"train", "validation", "test"}
    share = Counter(assignment.values())
    assert 0.45 <= share["train"] / len(assignment) <= 0.6
    assert min(share["validation"], share["test"]) / len(assignment) >= 0.2


def test_splits_and_questions_load_with_researcher_datasets() -> None:
    datasets = pytest.importorskip("researcher.datasets")
    qs = datasets.load_questions(DEMO / "questions.yml")
    assert qs.prefix == "demo" and qs.questions[0].uid == "demo:1-en"
    loaded = datasets.load_splits(DEMO / "splits.yml", qs)
    assert sum(len(loaded.select(qs, s)) for s in ("train", "validation", "test")) == len(qs.questions)


# --- generator -----------------------------------------------------------------------------


def test_generator_is_deterministic_and_matches_committed_files(tmp_path: Path) -> None:
    completed = subprocess.run([sys.executable, str(DEMO / "generate.py"), "--out", str(tmp_path)],
                               capture_output=True, text=True, timeout=60, check=True)
    assert "triples" in completed.stdout
    for name in GENERATED:
        assert (tmp_path / name).read_bytes() == (DEMO / name).read_bytes(), name


def test_generator_uses_only_the_standard_library() -> None:
    source = (DEMO / "generate.py").read_text(encoding="utf-8")
    imported = set(re.findall(r"^(?:from|import) (\w+)", source, flags=re.MULTILINE))
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_other_seed_changes_filler_but_keeps_answers(generator: ModuleType, tmp_path: Path) -> None:
    generator.generate(tmp_path, seed=7)
    assert (tmp_path / "kg.ttl").read_bytes() != (DEMO / "kg.ttl").read_bytes()
    other = ox.Store()
    other.load(path=str(tmp_path / "kg.ttl"), format=ox.RdfFormat.TURTLE)
    for q in yaml.safe_load((tmp_path / "questions.yml").read_text(encoding="utf-8"))["questions"]:
        result = run(other, q["query"]["sparql"])
        assert result is not None and (isinstance(result, bool) or result), q["id"]
