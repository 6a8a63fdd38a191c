"""The one SPARQL lexer: what it treats as a keyword, and what it hides inside IRIs, strings and
comments, for every module that reads query text through it."""

from __future__ import annotations

import random

import pytest

from researcher.datasets import derive_features
from researcher.metrics import normalize_query, query_iris
from worker_agent.kg import check_read_only
from worker_agent.sparql_lexer import Token, code_only, keywords, significant, tokens
from worker_agent.spec import enforce_select_distinct


def kinds(sparql: str, **kw: bool) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in significant(sparql, **kw)]


# ------------------------------------------------------------------------------ the token grammar


def test_keywords_inside_iris_are_not_keywords():
    q = "SELECT * WHERE { <http://ex.org/delete#select> <http://ex.org/p?x=INSERT> ?o }"
    assert keywords(q) == ["SELECT", "WHERE"]
    assert [t.text for t in significant(q) if t.kind == "iri"] == [
        "<http://ex.org/delete#select>", "<http://ex.org/p?x=INSERT>"]


def test_a_less_than_with_spaces_is_not_an_iri():
    assert kinds("FILTER(?a < ?b && ?c >= 2)") == [
        ("word", "FILTER"), ("punct", "("), ("var", "?a"), ("punct", "<"), ("var", "?b"),
        ("op", "&&"), ("var", "?c"), ("op", ">="), ("number", "2"), ("punct", ")")]


@pytest.mark.parametrize("literal", [
    r'"say \"DELETE\" now"',
    r"'it\'s a SELECT'",
    r'"back\\slash"',
    '"""one\nline "quoted" and ""twice"" SELECT"""',
    "'''it's\n'' DROP'''",
])
def test_strings_with_escapes_and_long_strings_are_one_token(literal):
    q = f"SELECT ?x WHERE {{ ?x ?p {literal} }}"
    strings = [t.text for t in significant(q) if t.kind == "string"]
    assert strings == [literal]
    assert keywords(q) == ["SELECT", "WHERE"]


def test_comments_run_to_the_end_of_the_line():
    q = "# DELETE everything\nSELECT ?x # INSERT here\r\nWHERE { ?x ?p ?o }"
    assert keywords(q) == ["SELECT", "WHERE"]
    assert [t.text for t in tokens(q) if t.kind == "comment"] == ["# DELETE everything", "# INSERT here"]
    assert "#" not in code_only(q)


def test_a_hash_inside_an_iri_or_string_is_not_a_comment():
    q = 'SELECT ?x WHERE { ?x <http://ex.org/#p> "#notacomment" } LIMIT 1'
    assert [t.kind for t in tokens(q)].count("comment") == 0
    assert keywords(q) == ["SELECT", "WHERE", "LIMIT"]


@pytest.mark.parametrize(("text", "expected"), [
    ("ex:a.b", [("pname", "ex:a.b")]),
    ("ex:C.", [("pname", "ex:C"), ("punct", ".")]),  # the triple's dot is not part of the name
    ("ex:caf%C3%A9", [("pname", "ex:caf%C3%A9")]),
    (r"ex:a\#b", [("pname", r"ex:a\#b")]),  # an escaped '#' is not a comment
    ("my.ns:x", [("pname", "my.ns:x")]),
    (":x", [("pname", ":x")]),
    ("ex:", [("pname", "ex:")]),
    ("_:b0", [("pname", "_:b0")]),
    ("été:x", [("pname", "été:x")]),
    ("ex:order", [("pname", "ex:order")]),
])
def test_prefixed_names(text, expected):
    assert kinds(text) == expected
    assert keywords(text) == []


def test_variables_with_either_sigil_are_not_keywords():
    q = "SELECT ?delete $insert ?select_2 WHERE { ?delete ?p $insert }"
    assert [t.text for t in significant(q) if t.kind == "var"] == [
        "?delete", "$insert", "?select_2", "?delete", "?p", "$insert"]
    assert keywords(q) == ["SELECT", "WHERE"]
    assert kinds("? x") == [("punct", "?"), ("word", "x")]  # a lone sigil is not a variable


@pytest.mark.parametrize(("text", "expected"), [
    ("42", [("number", "42")]),
    ("1.5", [("number", "1.5")]),
    (".5", [("number", ".5")]),
    ("1e5", [("number", "1e5")]),
    ("1.0E-3", [("number", "1.0E-3")]),
    ("5.", [("number", "5"), ("punct", ".")]),
    ("-3", [("punct", "-"), ("number", "3")]),
])
def test_numbers(text, expected):
    assert kinds(text) == expected


def test_language_tags_and_datatypes_follow_their_string():
    q = '?x rdfs:label "chat"@fr , "colour"@en-GB , "as"@as ; ex:n "1"^^xsd:int .'
    assert kinds(q)[2:5] == [("string", '"chat"'), ("lang", "@fr"), ("punct", ",")]
    assert ("lang", "@en-GB") in kinds(q)
    assert kinds(q)[-4:] == [("string", '"1"'), ("op", "^^"), ("pname", "xsd:int"), ("punct", ".")]
    assert keywords(q) == []  # the Assamese tag @as is not the keyword AS


def test_words_keep_their_case_and_keywords_are_upper_cased():
    q = "select distinct ?x where { ?x a ex:C } order by ?x"
    assert keywords(q) == ["SELECT", "DISTINCT", "WHERE", "A", "ORDER", "BY"]
    assert [t.text for t in significant(q) if t.kind == "word"][:2] == ["select", "distinct"]


def test_unterminated_strings_are_a_stray_quote_by_default():
    q = 'SELECT ?x WHERE { ?x ?p "oops } DELETE'
    assert ("punct", '"') in kinds(q)
    assert keywords(q)[-1] == "DELETE"  # a strict lexer still sees the keyword after the quote
    assert kinds('"""abc')[0] == ("string", '""')


def test_open_strings_run_to_the_end_of_the_line_or_text():
    q = 'SELECT ?x WHERE { ?x ?p "oops } DELETE\nLIMIT 1'
    open_kinds = kinds(q, open_strings=True)
    assert ("string", '"oops } DELETE') in open_kinds
    assert [text for kind, text in open_kinds if kind == "word"] == ["SELECT", "WHERE", "LIMIT"]
    assert kinds('ASK { ?x ?p """never closed\nSELECT', open_strings=True)[-1] == (
        "string", '"""never closed\nSELECT')


def test_tokens_carry_their_span():
    q = 'SELECT ?x # c\nWHERE { ?x ex:p "v"@en }'
    toks = tokens(q)
    assert all(isinstance(t, Token) and q[t.start:t.end] == t.text for t in toks)
    assert [t.start for t in toks[1:]] == [t.end for t in toks[:-1]]
    assert toks[0] == Token("word", "SELECT", 0, 6)


def test_the_lexer_is_lossless_on_any_text():
    pieces = ['"', "'", '"""', "'''", "\\", "#", "<", ">", "?", "$", "@", ":", ".", "-", "1", "e5",
              "ex:a", "SELECT", " ", "\n", "\r", "\x00", "\u00a0", "é", "{", "}", "^^", "&&"]
    rng = random.Random(1)
    for _ in range(2000):
        q = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        for open_strings in (False, True):
            toks = tokens(q, open_strings=open_strings)
            assert "".join(t.text for t in toks) == q
            assert all(t.text for t in toks)


def test_code_only_keeps_bare_words_numbers_and_punctuation():
    q = 'SELECT ?order WHERE { ?order <http://e/ORDER> "GROUP BY"@as, ex:a.LIMIT } # LIMIT 5\nORDER BY ?order'
    assert code_only(q, fill="_") == "SELECT _ WHERE { _ _ __, _ } _\nORDER BY _"
    assert code_only("LIMIT 10", fill="") == "LIMIT 10"


# ------------------------------------------------------------------ the modules that read through it

BAIT = (
    "PREFIX ex: <http://ex.org/delete#>\n"
    "# DELETE { ?s ?p ?o } -- a comment\n"
    "SELECT ?insert WHERE {\n"
    '  ?insert ex:order "INSERT DATA { <a> <b> <c> } GROUP BY"@as ;\n'
    r"         ex:a\#LIMIT <http://ex.org/select?DROP=1> ."
    "\n}"
)


def test_every_module_agrees_on_where_the_keywords_are():
    assert keywords(BAIT) == ["PREFIX", "SELECT", "WHERE"]
    check_read_only(BAIT)  # no update keyword outside IRIs, strings and comments
    assert derive_features(BAIT) == ("SELECT",)
    distinct = enforce_select_distinct(BAIT)
    assert distinct == BAIT.replace("SELECT ?insert", "SELECT DISTINCT ?insert")
    assert query_iris(BAIT) == [
        "http://ex.org/delete#order", "http://ex.org/delete#a#LIMIT", "http://ex.org/select?DROP=1"]
    normalized = normalize_query(BAIT)
    assert '"INSERT DATA { <a> <b> <c> } GROUP BY"@as' in normalized
    assert "DELETE" not in normalized.replace("delete#", "")
