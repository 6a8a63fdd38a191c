"""Tests for researcher.datasets: question files, gold answers, features and splits."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

from researcher.datasets import (
    DatasetError,
    QuestionSet,
    Splits,
    derive_features,
    load_gold_answers,
    load_order_required,
    load_questions,
    load_splits,
    make_splits,
    qald_gold_answers,
    save_splits,
    split_hash,
)

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
CK25 = DATASETS / "ck25"
DB25 = DATASETS / "db25"
needs_shared = pytest.mark.skipif(not (CK25 / "questions.yml").exists(), reason="shared datasets absent")

PV = "http://ld.company.org/prod-vocab/"


@pytest.fixture(scope="module")
def ck25() -> QuestionSet:
    if not (CK25 / "questions.yml").exists():
        pytest.skip("shared datasets absent")
    return load_questions(CK25 / "questions.yml")


@pytest.fixture(scope="module")
def db25() -> QuestionSet:
    if not (DB25 / "questions.yml").exists():
        pytest.skip("shared datasets absent")
    return load_questions(DB25 / "questions.yml")


def raises_one_line(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(DatasetError, match=match) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------- shared sets


def test_ck25_loads_with_official_uids_and_expanded_iris(ck25: QuestionSet) -> None:
    assert len(ck25.questions) == 38
    assert ck25.prefix == "ck25"
    assert ck25.dataset_id == "https://text2sparql.aksw.org/2025/corporate/"
    assert ck25.default_namespace == PV
    first = ck25.questions[0]
    assert (first.uid, first.qid, first.lang) == ("ck25:1-en", "1", "en")
    assert first.text == "In which department is Ms. Brant?"
    assert first.classes == (PV + "Department", PV + "Employee")
    assert first.properties == (PV + "memberOf",)
    assert first.sparql and first.sparql.startswith("PREFIX pv:")
    by_qid = {q.qid: q for q in ck25.questions}
    # A prefixed name in the annotations is expanded with a well-known prefix.
    assert "http://www.w3.org/2000/01/rdf-schema#subClassOf" in by_qid["38"].properties
    # Features listed in the file are kept as written, including the order annotation.
    assert by_qid["27"].features == ("SELECT", "OPTIONAL", "EXISTS", "ORDER", "RESULT_ORDER_MATTERS")
    assert all(iri.startswith("http") for q in ck25.questions for iri in q.classes + q.properties)


def test_db25_has_100_ids_in_two_languages(db25: QuestionSet) -> None:
    assert len(db25.questions) == 200
    assert len(db25.qids()) == 100
    assert Counter(q.lang for q in db25.questions) == {"en": 100, "es": 100}
    assert [q.uid for q in db25.questions[:2]] == ["db25:1-en", "db25:1-es"]
    assert len({q.uid for q in db25.questions}) == 200
    es = next(q for q in db25.questions if q.uid == "db25:1-es")
    assert es.text.startswith("¿Cuántos autores")


def test_db25_features_are_derived_from_the_gold_query(db25: QuestionSet) -> None:
    by_uid = {q.uid: q for q in db25.questions}
    assert by_uid["db25:1-en"].features == ("SELECT", "DISTINCT", "COUNT")
    assert by_uid["db25:2-en"].features == ("SELECT", "ORDER", "LIMIT")
    assert by_uid["db25:93-es"].features == ("ASK",)
    # The file lists only the annotation for 46: derived structure plus the annotation.
    assert by_uid["db25:46-en"].features == ("SELECT", "COUNT", "GROUP", "ORDER", "RESULT_ORDER_MATTERS")
    assert all(q.features for q in db25.questions)


@needs_shared
def test_derived_features_agree_with_ck25_annotations() -> None:
    raw = yaml.safe_load((CK25 / "questions.yml").read_text(encoding="utf-8"))
    # ck25 does not tag DISTINCT/NOT_EXISTS; questions 4 and 21 have a FILTER the file omits.
    untagged = {"DISTINCT", "NOT_EXISTS", "RESULT_ORDER_MATTERS"}
    mismatches = {}
    for q in raw["questions"]:
        derived = set(derive_features(q["query"]["sparql"])) - untagged
        listed = set(q["features"]) - untagged
        if derived != listed:
            mismatches[q["id"]] = (derived - listed, listed - derived)
    assert mismatches == {4: ({"FILTER"}, set()), 21: ({"FILTER"}, set())}


def test_gold_answers_match_uids(ck25: QuestionSet, db25: QuestionSet) -> None:
    for qs, folder in ((ck25, CK25), (db25, DB25)):
        gold = load_gold_answers(folder / "true_result_set.json")
        assert set(gold) == {q.uid for q in qs.questions}
        assert all(isinstance(v, int) for answers in gold.values() for v in answers.values())
    gold = load_gold_answers(DB25 / "true_result_set.json")
    assert gold["db25:8-en"] == {"true": 1}
    assert gold["db25:93-en"] == {"true": 0}  # ASK false keeps the "true" key with relevance 0
    assert gold["db25:1-es"] == {"2892": 1}


@needs_shared
def test_order_required_from_question_file_and_gold_file(tmp_path: Path) -> None:
    assert load_order_required(DB25 / "questions.yml") == {"db25:46-en", "db25:46-es", "db25:96-en", "db25:96-es"}
    assert load_order_required(CK25 / "questions.yml") == {"ck25:27-en", "ck25:37-en"}
    assert load_order_required(CK25 / "true_result_set.json") == set()
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps({"x:1-en": {"a": 1}, "order_required": ["x:1-en"]}), encoding="utf-8")
    assert load_order_required(gold) == {"x:1-en"}
    assert load_gold_answers(gold) == {"x:1-en": {"a": 1}}


# ---------------------------------------------------------------------------------- features


def test_keywords_in_iris_strings_comments_and_names_do_not_count() -> None:
    sparql = """
    PREFIX order: <http://example.org/ORDER/BY/>
    # LIMIT 10 OPTIONAL { } UNION
    SELECT ?count ?limit WHERE {
      <http://example.org/FILTER/GROUP_BY/count(> order:optional ?count .
      ?x <http://x.org/a#MINUS> "ORDER BY ?x LIMIT 3", '''VALUES
      BIND(''' , 'HAVING' .
      ?y order:union $limit .
    }
    """
    assert derive_features(sparql) == ("SELECT",)


def test_derive_features_vocabulary() -> None:
    query = """SELECT DISTINCT ?a (COUNT(?b) AS ?n) (sum (?c) AS ?s) (AVG(?d) AS ?m)
      (MIN(?e) AS ?lo) (MAX(?e) AS ?hi) (ROUND(?f) AS ?r) WHERE {
        { SELECT ?a WHERE { ?a ?p ?o } }
        OPTIONAL { ?a ?q ?b } { ?a ?r ?c } UNION { ?a ?s ?c }
        MINUS { ?a ?t ?d } FILTER(?c > 1) FILTER NOT EXISTS { ?a ?u ?e }
        BIND(1 AS ?f) VALUES ?g { 1 2 }
      } GROUP BY ?a HAVING (COUNT(?b) > 1) ORDER BY ?a LIMIT 5 OFFSET 2"""
    assert derive_features(query) == (
        "SELECT", "DISTINCT", "COUNT", "SUM", "AVG", "MIN", "MAX", "ROUND", "GROUP", "HAVING", "ORDER",
        "LIMIT", "OFFSET", "FILTER", "OPTIONAL", "UNION", "MINUS", "EXISTS", "NOT_EXISTS", "SUBSELECT",
        "BIND", "VALUES",
    )
    # The query form is the outer one; the inner SELECT is a subselect.
    assert derive_features("ASK { { SELECT ?x WHERE { ?x ?p ?o } } }") == ("ASK", "SUBSELECT")
    # FILTER [NOT] EXISTS is tagged EXISTS only (ck25 convention); GROUP_CONCAT is not GROUP BY.
    assert derive_features("SELECT ?x { ?x ?p ?o FILTER EXISTS { ?x ?q ?r } }") == ("SELECT", "EXISTS")
    assert derive_features("SELECT (GROUP_CONCAT(?o) AS ?l) { ?x ?p ?o }") == ("SELECT",)
    assert derive_features("CONSTRUCT { ?s ?p ?o } WHERE { ?s ?p ?o }") == ("CONSTRUCT",)


# ---------------------------------------------------------------------------------- malformed


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


GOOD_YAML = """
dataset: {id: "https://example.org/ds/", prefix: ex, defaultNamespace: "http://example.org/v/"}
questions:
  - id: 1
    question: {en: "Who?"}
    query: {sparql: "SELECT ?x WHERE { ?x a <http://example.org/v/C> }"}
"""


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("bad.yml", "dataset: [unclosed\n", r"bad\.yml: invalid YAML at line"),
        ("bad.json", '{"questions": [', r"bad\.json: invalid JSON at line 1"),
        ("other.yml", "foo: 1\n", r"other\.yml: unknown question file format"),
        ("odd.yml", "dataset: {id: x, prefix: p}\nquestions:\n  - id: 1\n    question: hello\n",
         "unknown question file format"),
        ("empty.yml", "dataset: {id: x, prefix: p}\nquestions: []\n", "'questions' list is empty"),
        ("noprefix.yml", GOOD_YAML.replace("prefix: ex, ", ""), r"noprefix\.yml: missing 'dataset\.prefix'"),
        ("nodataset.yml", "questions:\n  - id: 1\n    question: {en: a}\n", "missing 'dataset' mapping"),
        ("noid.yml", GOOD_YAML.replace("id: 1", "qid: 1"), r"question #1: missing or invalid 'id'"),
        ("dup.yml", GOOD_YAML + GOOD_YAML.split("questions:")[1].replace('"Who?"', '"Again?"'),
         r"dup\.yml: question 1: duplicate id"),
        ("notext.yml", GOOD_YAML.replace('{en: "Who?"}', "{en: 3}"), "question 1: text for language 'en'"),
        ("feat.yml", GOOD_YAML.replace("    query:", "    features: SELECT\n    query:"),
         "question 1: 'features' must be a list"),
        ("prefix.yml", GOOD_YAML.replace("    query:", "    classes: [foo:Bar]\n    query:"),
         r"question 1: cannot expand 'foo:Bar': unknown prefix 'foo'"),
        ("nons.yml", GOOD_YAML.replace(', defaultNamespace: "http://example.org/v/"', "").replace(
            "    query:", "    classes: [':C']\n    query:"), "question 1: cannot expand ':C': the dataset has no"),
        ("query.yml", GOOD_YAML.replace('query: {sparql: "SELECT ?x WHERE { ?x a <http://example.org/v/C> }"}',
                                        "query: [1]"), "question 1: 'query' must be a mapping"),
    ],
)
def test_malformed_question_files(tmp_path: Path, name: str, text: str, match: str) -> None:
    path = write(tmp_path, name, text)
    message = raises_one_line(match, load_questions, path)
    assert str(path) in message


def test_missing_files_and_bad_gold(tmp_path: Path) -> None:
    raises_one_line(r"nope\.yml: file not found", load_questions, tmp_path / "nope.yml")
    raises_one_line("file not found", load_gold_answers, tmp_path / "nope.json")
    bad = write(tmp_path, "gold.json", json.dumps({"x:1-en": {"a": "1"}}))
    raises_one_line(r"gold\.json: question x:1-en: answers must map values to integer", load_gold_answers, bad)
    listed = write(tmp_path, "list.json", "[]")
    raises_one_line("expected a JSON object", load_gold_answers, listed)


def test_good_yaml_and_expansion_rules(tmp_path: Path) -> None:
    text = GOOD_YAML.replace(
        "    query:",
        "    features: [select]\n"
        "    classes: [':C', '<http://other.org/D>', 'http://other.org/E', 'ex2:F', 'owl:Thing']\n"
        "    query:",
    ).replace('"SELECT ?x', '"PREFIX ex2: <http://ex2.org/> SELECT ?x')
    qs = load_questions(write(tmp_path, "q.yaml", text))
    (q,) = qs.questions
    assert q.features == ("SELECT",)
    assert q.classes == ("http://example.org/v/C", "http://other.org/D", "http://other.org/E",
                         "http://ex2.org/F", "http://www.w3.org/2002/07/owl#Thing")
    # The prefix argument overrides the file; the content decides the format, not the suffix.
    as_json = write(tmp_path, "q.data", json.dumps(yaml.safe_load(GOOD_YAML)))
    assert load_questions(as_json, prefix="zz").questions[0].uid == "zz:1-en"


# ---------------------------------------------------------------------------------- QALD

QALD = {
    "dataset": {"id": "qald-9-test"},
    "questions": [
        {
            "id": "1",
            "question": [
                {"language": "en", "string": "Who founded Intel?"},
                {"language": "de", "string": "Wer gründete Intel?"},
                {"language": "fr", "string": ""},
            ],
            "query": {"sparql": "SELECT DISTINCT ?uri WHERE { <http://dbpedia.org/resource/Intel> "
                                "<http://dbpedia.org/ontology/foundedBy> ?uri }"},
            "answers": [{"head": {"vars": ["uri", "n"]}, "results": {"bindings": [
                {"uri": {"type": "uri", "value": "http://dbpedia.org/resource/Robert_Noyce"},
                 "n": {"type": "literal", "value": "2"}},
                {"uri": {"type": "uri", "value": "http://dbpedia.org/resource/Gordon_Moore"}},
            ]}}],
        },
        {"id": 2, "question": [{"language": "en", "string": "Is Berlin big?"}],
         "query": {"sparql": "ASK WHERE { ?s ?p ?o }"}, "answers": [{"head": {}, "boolean": True}]},
        {"id": 3, "question": [{"language": "en", "string": "Is Bonn the capital?"}],
         "query": {"sparql": "ASK WHERE { ?s ?p ?o }"}, "answers": [{"head": {}, "boolean": False}]},
        {"id": 4, "question": [{"language": "en", "string": "No answers here?"}],
         "query": {"sparql": "SELECT ?x WHERE { ?x ?p ?o } LIMIT 1"}},
    ],
}


def test_qald_questions_and_gold(tmp_path: Path) -> None:
    path = write(tmp_path, "qald9.json", json.dumps(QALD))
    qs = load_questions(path)
    assert qs.prefix == "qald-9-test"
    assert [q.uid for q in qs.questions] == ["qald-9-test:1-en", "qald-9-test:1-de", "qald-9-test:2-en",
                                           "qald-9-test:3-en", "qald-9-test:4-en"]
    assert qs.questions[0].features == ("SELECT", "DISTINCT")
    assert qs.questions[2].features == ("ASK",)
    gold = qald_gold_answers(path)
    assert gold["qald-9-test:1-de"] == {
        "http://dbpedia.org/resource/Robert_Noyce": 1, "http://dbpedia.org/resource/Gordon_Moore": 1, "2": 1,
    }
    assert list(gold["qald-9-test:1-en"])[:2] == ["http://dbpedia.org/resource/Robert_Noyce",
                                                  "http://dbpedia.org/resource/Gordon_Moore"]
    assert gold["qald-9-test:2-en"] == {"true": 1}
    assert gold["qald-9-test:3-en"] == {"true": 0}
    assert "qald-9-test:4-en" not in gold
    assert set(qald_gold_answers(path, prefix="q9")) == {"q9:1-en", "q9:1-de", "q9:2-en", "q9:3-en"}


def test_qald_prefix_falls_back_to_file_stem_and_rejects_bad_entries(tmp_path: Path) -> None:
    data = json.loads(json.dumps(QALD))
    data["dataset"]["id"] = "https://example.org/qald/"
    assert load_questions(write(tmp_path, "my qald.json", json.dumps(data))).prefix == "my-qald"
    data["questions"][1]["question"] = [{"language": "en"}]
    raises_one_line(r"qald\.json: question 2: each 'question' entry needs", load_questions,
                    write(tmp_path, "qald.json", json.dumps(data)))
    data = json.loads(json.dumps(QALD))
    data["questions"][3]["id"] = 1
    raises_one_line("question 1: duplicate id", load_questions, write(tmp_path, "dup.json", json.dumps(data)))
    data = json.loads(json.dumps(QALD))
    data["questions"][1]["answers"] = [{"head": {}}]
    raises_one_line("question 2: answer lacks", qald_gold_answers, write(tmp_path, "ans.json", json.dumps(data)))
    raises_one_line("not a QALD file", qald_gold_answers, write(tmp_path, "t2s.yml", GOOD_YAML))


# ---------------------------------------------------------------------------------- splits


def tiny_set(tmp_path: Path, n: int, langs: tuple[str, ...] = ("en",)) -> QuestionSet:
    questions = [
        {"id": i, "question": {lang: f"question {i} in {lang}" for lang in langs},
         "query": {"sparql": "ASK { ?s ?p ?o }" if i % 3 == 0 else "SELECT ?s { ?s ?p ?o } LIMIT 1"}}
        for i in range(1, n + 1)
    ]
    data = {"dataset": {"id": "tiny", "prefix": "t"}, "questions": questions}
    return load_questions(write(tmp_path, f"tiny{n}.yml", yaml.safe_dump(data)))


def test_splits_are_deterministic_sized_and_seeded(db25: QuestionSet) -> None:
    a, b = make_splits(db25, seed=7), make_splits(db25, seed=7)
    assert a == b and split_hash(a) == split_hash(b)
    assert Counter(a.assignment.values()) == {"train": 50, "validation": 25, "test": 25}
    other = make_splits(db25, seed=8)
    assert other.assignment != a.assignment and split_hash(other) != split_hash(a)
    custom = make_splits(db25, seed=7, ratios=(0.6, 0.2, 0.2))
    assert Counter(custom.assignment.values()) == {"train": 60, "validation": 20, "test": 20}
    assert custom.ratios == pytest.approx((0.6, 0.2, 0.2))
    with pytest.raises(DatasetError, match="invalid split ratios"):
        make_splits(db25, ratios=(1.0, -0.5, 0.5))


def test_no_language_leaks_across_splits(db25: QuestionSet) -> None:
    splits = make_splits(db25, seed=3)
    parts = {name: splits.select(db25, name) for name in ("train", "validation", "test")}
    uids = [q.uid for part in parts.values() for q in part]
    assert sorted(uids) == sorted(q.uid for q in db25.questions)
    qid_to_split = {}
    for name, part in parts.items():
        for q in part:
            assert qid_to_split.setdefault(q.qid, name) == name
    assert all(len([q for q in parts[n] if q.lang == "en"]) == len([q for q in parts[n] if q.lang == "es"])
               for n in parts)


def test_splits_are_stratified(db25: QuestionSet, ck25: QuestionSet) -> None:
    for seed in range(5):
        splits = make_splits(db25, seed=seed)
        ask = Counter(splits.assignment[q.qid] for q in db25.questions if q.lang == "en" and "ASK" in q.features)
        count = Counter(splits.assignment[q.qid] for q in db25.questions
                        if q.lang == "en" and "COUNT" in q.features)
        assert set(ask) == set(count) == {"train", "validation", "test"}
        assert ask["train"] >= 4 and count["train"] >= 5
    order = Counter(make_splits(ck25).assignment[q.qid] for q in ck25.questions if "ORDER" in q.features)
    assert set(order) == {"train", "validation", "test"}


def test_splits_stable_under_reordering(db25: QuestionSet) -> None:
    shuffled = list(db25.questions)
    random.Random(1).shuffle(shuffled)
    reordered = db25.model_copy(update={"questions": shuffled})
    assert make_splits(reordered, seed=5).assignment == make_splits(db25, seed=5).assignment


@pytest.mark.parametrize("ratios", [(0.5, 0.25, 0.25), (0.8, 0.1, 0.1), (0.98, 0.01, 0.01)])
def test_tiny_datasets_fill_every_split(tmp_path: Path, ratios: tuple[float, float, float]) -> None:
    for n in (3, 4, 5):
        splits = make_splits(tiny_set(tmp_path, n, ("en", "de")), seed=0, ratios=ratios)
        assert set(splits.assignment.values()) == {"train", "validation", "test"}
    assert set(make_splits(tiny_set(tmp_path, 1)).assignment.values()) == {"train"}
    no_test = make_splits(tiny_set(tmp_path, 4), ratios=(1, 1, 0))
    assert Counter(no_test.assignment.values()) == {"train": 2, "validation": 2}


def test_save_and_load_round_trip(tmp_path: Path, db25: QuestionSet) -> None:
    splits = make_splits(db25, seed=11)
    path = tmp_path / "sub" / "splits.yaml"
    save_splits(splits, path)
    assert [p.name for p in path.parent.iterdir()] == ["splits.yaml"]  # no temp file left behind
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert document["seed"] == 11
    assert document["dataset_id"] == db25.dataset_id
    assert document["ratios"] == [0.5, 0.25, 0.25]
    assert document["questions_hash"] and document["split_hash"] == split_hash(splits)
    assert document["assignment"]["1"] in ("train", "validation", "test")
    loaded = load_splits(path, db25)
    assert loaded == splits and split_hash(loaded) == split_hash(splits)


def test_load_splits_validates(tmp_path: Path, db25: QuestionSet) -> None:
    splits = make_splits(db25, seed=0)
    path = tmp_path / "splits.yaml"
    save_splits(splits, path)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))

    document["assignment"]["1"] = "dev"
    write(tmp_path, "bad_name.yaml", yaml.safe_dump(document))
    raises_one_line(r"bad_name\.yaml: unknown split name 'dev' for question 1", load_splits,
                    tmp_path / "bad_name.yaml")

    document["assignment"]["1"] = "train"
    del document["assignment"]["2"]
    write(tmp_path, "edited.yaml", yaml.safe_dump(document))
    raises_one_line("questions_hash does not match", load_splits, tmp_path / "edited.yaml")

    del document["questions_hash"]
    write(tmp_path, "missing.yaml", yaml.safe_dump(document))
    assert "2" not in load_splits(tmp_path / "missing.yaml").assignment
    raises_one_line(r"missing\.yaml: question\(s\) missing from the assignment: 2", load_splits,
                    tmp_path / "missing.yaml", db25)
    raises_one_line("assignment lacks 1 question", load_splits(tmp_path / "missing.yaml").select, db25, "train")

    document["dataset_id"] = "other"
    document["assignment"]["2"] = "test"
    write(tmp_path, "other.yaml", yaml.safe_dump(document))
    raises_one_line("made for dataset 'other'", load_splits, tmp_path / "other.yaml", db25)


def test_hand_written_split_lists(tmp_path: Path) -> None:
    qs = tiny_set(tmp_path, 5, ("en", "es"))
    path = write(tmp_path, "mine.yml", "train: [1, 2, 3]\nvalidation: ['4']\ntest: [5]\n")
    splits = load_splits(path, qs)
    assert splits.seed is None
    assert [q.uid for q in splits.select(qs, "validation")] == ["t:4-en", "t:4-es"]
    assert isinstance(splits, Splits)
    raises_one_line("unknown split name 'dev'", load_splits, write(tmp_path, "dev.yml", "train: [1]\ndev: [2]\n"))
    raises_one_line("question 2 is in both train and test", load_splits,
                    write(tmp_path, "twice.yml", "train: [1, 2]\ntest: [2]\n"))
    raises_one_line("not in tiny: 9", load_splits,
                    write(tmp_path, "extra.yml", "train: [1, 2, 3, 9]\nvalidation: [4]\ntest: [5]\n"), qs)
    raises_one_line("invalid YAML", load_splits, write(tmp_path, "broken.yml", "train: [1\n"))
    with pytest.raises(DatasetError, match="unknown split 'dev'"):
        splits.select(qs, "dev")  # type: ignore[arg-type]
