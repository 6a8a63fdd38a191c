"""The offline strategy: deterministic text-to-SPARQL by retrieving and adapting training queries.

No LLM. For a new question the strategy

1. **links** mentions in the question with the surface-form tool (entities, classes, properties),
   and finds numbers and quoted strings;
2. **retrieves** the most similar training questions (:mod:`worker_agent.retrieval`, mentions
   masked so that template wording dominates);
3. **adapts** each retrieved gold query: its *slots* (entity IRIs, classes, properties, string
   and number literals that the training question mentions) are aligned with the new mentions
   by kind, type compatibility and order, then substituted; a slot the new question has no
   filler for is relaxed (its triple patterns dropped); superlatives and comparisons that point
   the other way flip ``ORDER BY`` and the comparison operator; predicates that no longer fit a
   substituted entity or class are re-linked through the ontology tool;
4. **executes** every variant with the test-SPARQL tool and **verifies** it, falling back to the
   next variant and the next template.

The agent spec steers all of it. Knobs: ``few_shot`` (templates tried), ``retrieval``,
``tools.surface_forms.k`` (candidates per mention) and ``fuzzy_threshold`` (linking threshold).
Rules (by id, see ``versions/v1/rules.yaml``): ``unicode_fallback`` (accent folding while
linking), ``surname_linking`` (titles dropped, surnames linked; off: partial person names are
rejected), ``verify_nonempty`` (empty results are rejected), ``expected_shape`` (a number for
"how many", a boolean for yes/no; mismatches are repaired or rejected), ``ask_for_yes_no`` (ASK
templates for yes/no questions), ``triple_direction`` (inverse triple patterns on empty results),
``answer_type_constraint`` (``?answer a <Class>`` for the class the question names),
``project_iris`` (entities instead of their labels unless names are asked for) and
``ontology_namespace`` (ontology-namespace predicates first when re-linking).

Every retrieval hit, linking decision, candidate query and execution is a trace step. The
strategy only ever sees the training examples it was built with.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rapidfuzz import fuzz

from worker_agent.kg import KNOWN_PREFIXES, KGError
from worker_agent.retrieval import Hit, Retriever, make_retriever, normalize_text
from worker_agent.strategies import Example, StrategyResult
from worker_agent.tools import (
    STOPWORDS,
    Candidate,
    Span,
    fold_accents,
    local_name,
    local_name_surface,
    tokenize,
)

if TYPE_CHECKING:
    from worker_agent.spec import AgentSpec
    from worker_agent.tools import Tools
    from worker_agent.trace import Trace

__all__ = ["OfflineStrategy", "Template", "TemplateError", "parse_template", "question_kind"]

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL = "http://www.w3.org/2002/07/owl#"
_CLASS_TYPES = frozenset({OWL + "Class", RDFS + "Class"})
_PROPERTY_TYPES = frozenset({OWL + "ObjectProperty", OWL + "DatatypeProperty", OWL + "AnnotationProperty",
                             "http://www.w3.org/1999/02/22-rdf-syntax-ns#Property"})
_SCHEMA_TYPES = _CLASS_TYPES | _PROPERTY_TYPES | {OWL + "Ontology"}
_GENERIC_TYPES = frozenset({OWL + "Thing", RDFS + "Resource", OWL + "NamedIndividual"})
_PERSON_RE = re.compile(r"person|people|human|employee|manager|staff|author|writer|librarian|actor|"
                        r"artist|politician|scientist|player|athlete|member|agent", re.IGNORECASE)
_XSD = "http://www.w3.org/2001/XMLSchema#"
_NUMERIC_DATATYPES = frozenset(_XSD + t for t in (
    "integer", "int", "long", "short", "byte", "decimal", "double", "float", "nonNegativeInteger",
    "positiveInteger", "negativeInteger", "nonPositiveInteger", "unsignedInt", "unsignedLong"))

# ============================================================================================
# SPARQL templates: a small tokenizer and a structural parser of the WHERE clause
# ============================================================================================


class TemplateError(Exception):
    """A gold query the offline strategy cannot take apart (one line, names the example)."""


_TOKEN_RE = re.compile(
    r"""(?P<ws>(?:\s+|\#[^\n]*)+)
    |(?P<iri><[^<>"{}|^`\\\s]*>)
    |(?P<string>(?:\"\"\"(?:[^\\]|\\.)*?\"\"\"|'''(?:[^\\]|\\.)*?'''|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
        (?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|\^\^(?:<[^<>"{}|^`\\\s]*>|[A-Za-z][\w\-]*:[\w\-]*))?)
    |(?P<var>[?$][A-Za-z0-9_\u00B7\u00C0-\uFFFF]+)
    |(?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
    |(?P<bnode>_:[A-Za-z0-9_\-]+)
    |(?P<pname>(?:[A-Za-z][\w\-]*(?:\.[\w\-]+)*)?:(?:[\w\-%:]+(?:\.[\w\-%:]+)*)?)
    |(?P<word>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<punct>\^\^|&&|\|\||!=|<=|>=|[{}()\[\].;,*/|^+?!=<>\-])
    """,
    re.VERBOSE | re.DOTALL,
)
_TERM_KINDS = frozenset({"iri", "pname", "var", "string", "number", "bnode"})
_GROUP_KEYWORDS = frozenset({"OPTIONAL", "MINUS", "UNION", "GRAPH", "SERVICE", "SILENT"})
_EXPR_KEYWORDS = frozenset({"FILTER", "BIND"})
_MODIFIER_KEYWORDS = frozenset({"GROUP", "ORDER", "HAVING", "LIMIT", "OFFSET"})


@dataclass
class Tok:
    kind: str  # iri | pname | string | var | number | bnode | word | punct
    text: str
    pre: str = " "

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


@dataclass
class Triple:
    """One expanded triple pattern ``s p o .`` (``;`` and ``,`` shorthand is expanded)."""

    s: list[Tok]
    p: list[Tok]
    o: list[Tok]
    pre: str = "\n  "

    def text(self) -> str:
        return " ".join(t.text for t in (*self.s, *self.p, *self.o)) + " ."

    @property
    def s_var(self) -> str | None:
        return self.s[0].text if len(self.s) == 1 and self.s[0].kind == "var" else None

    @property
    def o_var(self) -> str | None:
        return self.o[0].text if len(self.o) == 1 and self.o[0].kind == "var" else None

    def is_type(self) -> bool:
        return len(self.p) == 1 and self.p[0].text in ("a", "rdf:type", f"<{RDF_TYPE}>")

    def vars(self) -> set[str]:
        return {t.text for t in (*self.s, *self.p, *self.o) if t.kind == "var"}


Piece = Tok | Triple


def tokenize_sparql(sparql: str) -> list[Tok]:
    toks: list[Tok] = []
    pre = ""
    pos = 0
    while pos < len(sparql):
        m = _TOKEN_RE.match(sparql, pos)
        if m is None:
            raise TemplateError(f"cannot tokenize at {sparql[pos:pos + 20]!r}")
        kind = m.lastgroup or "punct"
        if kind == "ws":
            pre += m.group()
        else:
            toks.append(Tok(kind, m.group(), pre))
            pre = ""
        pos = m.end()
    return toks


class _Parser:
    """Turns the token list into pieces: raw tokens, with every triple block of every group
    pattern replaced by expanded :class:`Triple` objects. Unsupported syntax (collections,
    blank-node property lists, negated paths) makes the template *opaque*: still usable for
    plain substitution, not for structural edits."""

    def __init__(self, toks: list[Tok]) -> None:
        self.toks = toks
        self.i = 0
        self.pieces: list[Piece] = []

    def peek(self, ahead: int = 0) -> Tok | None:
        j = self.i + ahead
        return self.toks[j] if j < len(self.toks) else None

    def raw(self) -> None:
        self.pieces.append(self.toks[self.i])
        self.i += 1

    def raw_balanced(self, open_: str, close: str) -> None:
        depth = 0
        while self.i < len(self.toks):
            tok = self.toks[self.i]
            if tok.text == open_:
                depth += 1
            elif tok.text == close:
                depth -= 1
            self.raw()
            if depth <= 0:
                return

    def parse(self) -> tuple[list[Piece], bool]:
        """Pieces and whether the WHERE clause was fully understood."""
        depth = 0
        while self.i < len(self.toks):
            tok = self.toks[self.i]
            if tok.text == "{":
                depth += 1
                self.raw()
                try:
                    self.group_body()
                except TemplateError:
                    return [*self.pieces, *self.toks[self.i:]], False
                continue
            self.raw()
        return self.pieces, True

    def group_body(self) -> None:
        """Inside ``{ ... }`` (the opening brace consumed); returns after the closing brace."""
        while self.i < len(self.toks):
            tok = self.toks[self.i]
            up = tok.upper
            if tok.text == "}":
                self.raw()
                return
            if tok.text == "{":
                self.raw()
                self.group_body()
            elif tok.text == ".":
                self.raw()
            elif up in _EXPR_KEYWORDS:
                self.raw()
                self.expression()
            elif up in _GROUP_KEYWORDS:
                self.raw()
                nxt = self.peek()
                if up in ("GRAPH", "SERVICE") and nxt is not None and nxt.kind in _TERM_KINDS:
                    self.raw()
            elif up == "VALUES":
                while self.i < len(self.toks) and self.toks[self.i].text != "{":
                    self.raw()
                self.raw_balanced("{", "}")
            elif up == "SELECT":  # sub-query: its head runs up to its own group
                while self.i < len(self.toks) and self.toks[self.i].text != "{":
                    if self.toks[self.i].text == "(":
                        self.raw_balanced("(", ")")
                    else:
                        self.raw()
            elif up in _MODIFIER_KEYWORDS or up == "BY":  # a sub-query's modifiers
                while self.i < len(self.toks) and self.toks[self.i].text not in ("}", "{"):
                    if self.toks[self.i].text == "(":
                        self.raw_balanced("(", ")")
                    else:
                        self.raw()
            elif tok.kind in _TERM_KINDS or tok.text == "[" or (tok.kind == "word" and tok.text in ("true", "false")):
                self.triples_block()
            else:
                raise TemplateError(f"unexpected {tok.text!r} in a group pattern")
        raise TemplateError("unbalanced braces")

    def expression(self) -> None:
        nxt = self.peek()
        if nxt is None:
            raise TemplateError("FILTER/BIND without an expression")
        if nxt.text == "(":
            self.raw_balanced("(", ")")
        elif nxt.upper in ("NOT", "EXISTS"):
            while self.i < len(self.toks) and self.toks[self.i].text != "{":
                self.raw()
        elif nxt.kind in ("word", "pname", "iri"):  # FILTER regex(...), FILTER <fn>(...)
            self.raw()
            if self.peek() is not None and self.peek().text == "(":  # type: ignore[union-attr]
                self.raw_balanced("(", ")")
        else:
            raise TemplateError(f"unexpected {nxt.text!r} after FILTER/BIND")

    def term(self) -> list[Tok]:
        tok = self.peek()
        if tok is None:
            raise TemplateError("a triple pattern ends early")
        if tok.kind in _TERM_KINDS or (tok.kind == "word" and tok.text in ("true", "false")):
            self.i += 1
            return [tok]
        nxt = self.peek(1)
        if tok.text == "[" and nxt is not None and nxt.text == "]":
            self.i += 2
            return [tok, nxt]
        raise TemplateError(f"unsupported term {tok.text!r}")

    def path(self) -> list[Tok]:
        out: list[Tok] = []
        while True:
            tok = self.peek()
            if tok is None:
                raise TemplateError("a triple pattern ends early")
            if tok.text == "^":
                out.append(tok)
                self.i += 1
                continue
            if tok.kind in ("iri", "pname", "var") or (tok.kind == "word" and tok.text == "a"):
                out.append(tok)
                self.i += 1
            else:
                raise TemplateError(f"unsupported property path at {tok.text!r}")
            nxt = self.peek()
            if nxt is not None and nxt.text in ("*", "+", "?") and nxt.kind == "punct":
                out.append(nxt)
                self.i += 1
                nxt = self.peek()
            if nxt is not None and nxt.text in ("/", "|"):
                out.append(nxt)
                self.i += 1
                continue
            return out

    def triples_block(self) -> None:
        first = self.toks[self.i]
        subject = self.term()
        pre = first.pre
        while True:
            predicate = self.path()
            while True:
                obj = self.term()
                self.pieces.append(Triple(list(subject), list(predicate), obj, pre))
                pre = "\n  "
                if self.peek() is not None and self.peek().text == ",":  # type: ignore[union-attr]
                    self.i += 1
                    continue
                break
            nxt = self.peek()
            if nxt is not None and nxt.text == ";":
                self.i += 1
                after = self.peek()
                if after is not None and after.text in (".", "}"):
                    break
                continue
            break
        nxt = self.peek()
        if nxt is not None and nxt.text == ".":
            self.i += 1


def _render(pieces: Sequence[Piece]) -> str:
    out: list[str] = []
    for piece in pieces:
        if isinstance(piece, Triple):
            out.append(piece.pre + piece.text())
        elif piece.text:
            out.append(piece.pre + piece.text)
    return "".join(out).strip() + "\n"


def _prefixes(toks: Sequence[Tok]) -> dict[str, str]:
    out = dict(KNOWN_PREFIXES)
    for i, tok in enumerate(toks[:-2]):
        if tok.upper == "PREFIX" and toks[i + 1].kind == "pname" and toks[i + 2].kind == "iri":
            out[toks[i + 1].text.rstrip(":")] = toks[i + 2].text[1:-1]
    return out


def _expand(tok: Tok, prefixes: dict[str, str]) -> str | None:
    if tok.kind == "iri":
        return tok.text[1:-1]
    if tok.kind == "pname":
        prefix, _, local = tok.text.partition(":")
        ns = prefixes.get(prefix)
        return ns + local if ns is not None else None
    if tok.kind == "word" and tok.text == "a":
        return RDF_TYPE
    return None


def _literal_value(tok: Tok) -> str:
    """The lexical value of a string token (quotes, language tag and datatype removed)."""
    text = tok.text
    for q in ('"""', "'''", '"', "'"):
        if text.startswith(q):
            end = text.rfind(q)
            return text[len(q):end] if end >= len(q) else text
    return text


# ============================================================================================
# Templates and slots
# ============================================================================================

SlotKind = Literal["entity", "class", "property", "string", "number"]


@dataclass(eq=False)  # identity: slots key the fill dictionaries
class Slot:
    """Something in a gold query that the training question names, and may be replaced."""

    kind: SlotKind
    value: str  # full IRI, or the literal's lexical value
    toks: list[Tok]  # every occurrence in the template (same objects as in the pieces)
    mention: tuple[int, int] | None = None  # where the training question names it
    types: tuple[str, ...] = ()
    in_triples: bool = False  # occurs in a triple pattern (relaxable)
    in_raw: bool = False  # occurs outside triple patterns (FILTER, VALUES, LIMIT, ...)
    # An *implicit* class: named by the question, present in the query only as the range
    # ("o") or domain ("s") of the predicate in ``toks``; filling it re-links that predicate.
    side: Literal["s", "o"] | None = None

    @property
    def rank_key(self) -> int:
        return self.mention[0] if self.mention else 10**6


@dataclass
class Template:
    """A training example's gold query taken apart for adaptation."""

    example: Example
    pieces: list[Piece]
    structured: bool
    form: str  # SELECT | ASK | CONSTRUCT | DESCRIBE
    prefixes: dict[str, str]
    form_index: int  # piece index of the form keyword
    where_open: int  # piece index of the WHERE clause's "{"
    where_close: int  # piece index of its "}"
    projection: list[str] = field(default_factory=list)  # plain projected variables
    aggregate: bool = False
    slots: list[Slot] = field(default_factory=list)
    features: frozenset[str] = frozenset()  # ASK, COUNT, ORDER, LIMIT, FILTER, HAVING, ...
    polarity: int = 0  # superlative direction of the training question (+1 most, -1 least)
    comparison: int = 0  # comparison direction of the training question (+1 more, -1 less)

    @property
    def triples(self) -> list[Triple]:
        return [p for p in self.pieces if isinstance(p, Triple)]

    def render(self) -> str:
        return _render(self.pieces)

    @property
    def answer_var(self) -> str | None:
        return self.projection[0] if self.projection else None


def parse_template(example: Example) -> Template:
    """Tokenize and parse ``example.sparql``; raises :class:`TemplateError`."""
    try:
        toks = tokenize_sparql(example.sparql)
    except TemplateError as exc:
        raise TemplateError(f"{example.uid}: {exc}") from None
    pieces, structured = _Parser(toks).parse()
    form_index = next((i for i, p in enumerate(pieces) if isinstance(p, Tok)
                       and p.upper in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")), None)
    if form_index is None:
        raise TemplateError(f"{example.uid}: no SELECT/ASK/CONSTRUCT/DESCRIBE")
    where_open = next((i for i in range(form_index, len(pieces)) if isinstance(pieces[i], Tok)
                       and pieces[i].text == "{"), None)  # type: ignore[union-attr]
    if where_open is None:
        raise TemplateError(f"{example.uid}: no WHERE clause")
    depth, where_close = 0, None
    for i in range(where_open, len(pieces)):
        piece = pieces[i]
        if isinstance(piece, Tok) and piece.text == "{":
            depth += 1
        elif isinstance(piece, Tok) and piece.text == "}":
            depth -= 1
            if depth == 0:
                where_close = i
                break
    if where_close is None:
        raise TemplateError(f"{example.uid}: unbalanced braces")
    form = pieces[form_index].upper  # type: ignore[union-attr]
    tpl = Template(example, pieces, structured, form, _prefixes(toks), form_index, where_open, where_close)
    head = [p for p in pieces[form_index + 1:where_open] if isinstance(p, Tok)]
    depth = 0
    for tok in head:
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        elif tok.kind == "var" and depth == 0:
            tpl.projection.append(tok.text)
        elif tok.upper in ("COUNT", "SUM", "AVG", "MIN", "MAX", "GROUP_CONCAT", "SAMPLE"):
            tpl.aggregate = True
    words = {p.upper for p in pieces if isinstance(p, Tok) and p.kind == "word"}
    tpl.features = frozenset(words & {"ASK", "COUNT", "ORDER", "LIMIT", "FILTER", "HAVING", "GROUP", "OPTIONAL"})
    if tpl.aggregate and not tpl.projection:  # SELECT (COUNT(?x) AS ?n): the counted variable
        inner = [t.text for t in head if t.kind == "var"]
        tpl.projection = inner[:1]
    return tpl


def _walk_terms(tpl: Template) -> Iterator[tuple[Tok, str, Triple | None]]:
    """Every term token with its role: s, p, o, type (object of rdf:type) or raw."""
    for piece in tpl.pieces[tpl.where_open:]:
        if isinstance(piece, Triple):
            for tok in piece.s:
                yield tok, "s", piece
            for tok in piece.p:
                yield tok, "p", piece
            for tok in piece.o:
                yield tok, "type" if piece.is_type() else "o", piece
        else:
            yield piece, "raw", None


# ============================================================================================
# Question analysis: kinds, numbers, strings, superlatives, comparisons
# ============================================================================================

_YES_NO_START = frozenset(["is", "are", "was", "were", "does", "do", "did", "has", "have", "had", "can", "could", "will", "would", "should", "shall", "may", "might", "am"])
_COUNT_RE = re.compile(r"^(?:\W*\w+\W+){0,2}?(how many|how much|count|(?:what is |what's )?the number of)\b",
                       re.IGNORECASE)
_NAME_RE = re.compile(r"\b(names?|called|titles?|labels?)\b", re.IGNORECASE)

QuestionKind = Literal["count", "boolean", "list"]


def question_kind(text: str) -> QuestionKind:
    """What shape of answer the question asks for."""
    words = normalize_text(text).split()
    if words and words[0] in _YES_NO_START:
        return "boolean"
    if _COUNT_RE.search(text):
        return "count"
    return "list"


_UNITS = {w: i for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"])}
_TENS = {w: 10 * i for i, w in enumerate(["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]) if w != "_"}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_NUMBER_WORDS = frozenset(_UNITS) | frozenset(_TENS) | frozenset(_SCALES)
_DIGITS_RE = re.compile(
    r"(?<![A-Za-z0-9\-.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:st|nd|rd|th|%)?(?![A-Za-z0-9\-])"  # 800, 6th
    r"|(?<![A-Za-z0-9\-.])(\d+(?:\.\d+)?)(?=x\d)"  # the first 15 of 15x15
    r"|(?<=\dx)(\d+(?:\.\d+)?)(?![A-Za-z0-9\-])"  # the second one
)
_QUOTED_RE = re.compile(r"""(?:^|(?<=[\s(]))(?:'([^']+)'|"([^"]+)"|‘([^’]+)’|“([^”]+)”)""")


@dataclass(frozen=True)
class Mention:
    """A number or string found in a question."""

    start: int
    end: int
    value: str


def find_numbers(text: str) -> list[Mention]:
    """Numbers written in digits (``800``, ``1,000,000``, ``6th``, ``15x15``) or words
    (``one million``, ``twenty``)."""
    found: list[Mention] = []
    for m in _DIGITS_RE.finditer(text):
        group = next(g for g in (1, 2, 3) if m.group(g))
        found.append(Mention(m.start(group), m.end(group), m.group(group).replace(",", "")))
    words = [(m.start(), m.end(), m.group().lower()) for m in re.finditer(r"[A-Za-z]+", text)]
    i = 0
    while i < len(words):
        j, total, current = i, 0, 0
        while j < len(words) and words[j][2] in _NUMBER_WORDS:
            w = words[j][2]
            if w in _UNITS:
                current += _UNITS[w]
            elif w in _TENS:
                current += _TENS[w]
            elif w in _SCALES:
                current = max(current, 1) * _SCALES[w]
                if _SCALES[w] >= 1000:
                    total, current = total + current, 0
            j += 1
        # "one" alone is usually a pronoun ("the one that ..."), not a number.
        if j > i and not (j - i == 1 and words[i][2] == "one"):
            found.append(Mention(words[i][0], words[j - 1][1], str(total + current)))
            i = j
        else:
            i += 1
    return sorted(found, key=lambda m: m.start)


def find_quoted(text: str) -> list[Mention]:
    out = []
    for m in _QUOTED_RE.finditer(text):
        g = next(i for i in range(1, 5) if m.group(i) is not None)
        out.append(Mention(m.start(g), m.end(g), m.group(g)))
    return out


_HIGH = ("most", "largest", "biggest", "highest", "greatest", "maximum", "longest", "latest", "newest",
         "recent", "recently", "youngest", "heaviest", "top", "best", "tallest", "richest", "priciest",
         "costliest", "busiest", "widest", "deepest")
_LOW = ("least", "fewest", "smallest", "lowest", "minimum", "shortest", "earliest", "oldest", "lightest",
        "cheapest", "worst", "poorest", "narrowest", "shallowest")
_GT = ("more than", "greater than", "larger than", "bigger than", "higher than", "longer than",
       "heavier than", "later than", "newer than", "over", "above", "after", "exceeding", "exceeds",
       "exceed", "at least", "since", "beyond")
_LT = ("less than", "fewer than", "smaller than", "lower than", "shorter than", "lighter than",
       "earlier than", "older than", "cheaper than", "under", "below", "before", "at most",
       "not exceed", "does not exceed", "up to", "until")


def _fuzzy_word_in(word: str, lexicon: Iterable[str]) -> bool:
    if word in lexicon:
        return True
    return len(word) >= 6 and any(len(w) >= 6 and fuzz.ratio(word, w) >= 88 for w in lexicon)


def superlative_polarity(text: str) -> int:
    """+1 for "most/largest/latest...", -1 for "least/smallest/oldest...", 0 for neither."""
    for word in normalize_text(text).split():
        if _fuzzy_word_in(word, _HIGH):
            return 1
        if _fuzzy_word_in(word, _LOW):
            return -1
    return 0


def comparison_direction(text: str, before: int | None = None) -> int:
    """+1 for "more than/after/over...", -1 for "less than/before/under...", 0 for neither;
    the phrase closest before character ``before`` wins."""
    scope = normalize_text(text[:before] if before is not None else text)
    best, where = 0, -1
    for phrases, sign in ((_LT, -1), (_GT, 1)):
        for phrase in phrases:
            for m in re.finditer(rf"\b{re.escape(phrase)}\b", scope):
                # Longer phrases ("does not exceed") beat the shorter ones they contain.
                if m.end() > where or (m.end() == where and sign == -1):
                    best, where = sign, m.end()
    return best


# ============================================================================================
# Linking
# ============================================================================================


@dataclass
class Link:
    """A mention in the new question and its acceptable KG candidates."""

    start: int
    end: int
    surface: str
    candidates: list[Candidate]

    def kind_candidates(self, kind: str) -> list[Candidate]:
        return [c for c in self.candidates if _candidate_kind(c) == kind]


def _candidate_kind(c: Candidate) -> str:
    types = set(c.types)
    if types & _CLASS_TYPES:
        return "class"
    if types & _PROPERTY_TYPES:
        return "property"
    if types & _SCHEMA_TYPES:
        return "schema"
    return "entity"


def _person_like(types: Iterable[str]) -> bool:
    return any(_PERSON_RE.search(local_name(t)) for t in types)


# ============================================================================================
# The strategy
# ============================================================================================


@dataclass
class Variant:
    """One executable adaptation of a template, with how it was made."""

    tpl: Template
    pieces: list[Piece]
    notes: list[str]
    substituted: list[Tok] = field(default_factory=list)  # tokens that now hold new entities
    typed: bool = False  # carries an answer-type constraint (a soft one: dropped when empty)

    def render(self) -> str:
        return _render(self.pieces)

    def fork(self, note: str) -> Variant:
        memo: dict[int, Any] = {}
        pieces = copy.deepcopy(self.pieces, memo)
        subs = [memo.get(id(t), t) for t in self.substituted]
        return Variant(self.tpl, pieces, [*self.notes, note], subs, self.typed)


@dataclass
class Execution:
    query: str
    ok: bool
    empty: bool
    shape: str  # boolean | number | list | error
    rows: int | None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Question:
    """Everything about the question being answered (strategies answer concurrently, so none
    of it lives on the strategy)."""

    text: str
    kind: QuestionKind
    links: list[Link]
    words: list[str]
    trace: Trace
    deadline: float | None
    executed: set[str] = field(default_factory=set)  # queries already run for this question

    def late(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


class OfflineStrategy:
    """Retrieve-and-adapt text-to-SPARQL over the worker's tools (see the module doc)."""

    def __init__(self, spec: AgentSpec, tools: Tools, examples: Sequence[Example]) -> None:
        self.spec = spec
        self.tools = tools
        self.examples = list(examples)
        cfg = spec.config
        self.few_shot = cfg.few_shot
        self.k = cfg.tools.surface_forms.k
        self.threshold = float(cfg.tools.surface_forms.fuzzy_threshold)
        self.rules = {r.id for r in spec.enabled_rules()}
        # Caches shared by concurrent answers: plain dicts, filled idempotently.
        self._templates: dict[str, Template | TemplateError] = {}
        self._ontology: dict[str, Any] = {}
        self._pred_values: dict[str, list[tuple[str, int]]] = {}
        self._labels = set(tools.index.predicates) if tools.index is not None else set()
        self._classes: dict[str, str] | None = None
        masked = [self.mask(e.text, self.link(e.text)) for e in self.examples]
        self.retriever: Retriever
        self.retriever, self.retrieval_note = make_retriever(cfg.retrieval, self.examples, masked)

    def on(self, rule_id: str) -> bool:
        return rule_id in self.rules

    # ---------------------------------------------------------------- linking

    def link(self, text: str) -> list[Link]:
        """Mentions of KG things in ``text``, linked as the spec says (threshold, k, rules)."""
        fold = self.on("unicode_fallback")
        surname = self.on("surname_linking")
        spans = self.tools.match_spans(text, threshold=self.threshold, k=self.k,
                                       fold_accents=fold, surname=surname)
        spans = self._refine(text, spans, fold, surname)
        spans = sorted(spans + self._plural_classes(text, spans), key=lambda sp: sp.start)
        links = []
        for span in spans:
            cands = [c for c in span.candidates if surname or not _partial_person(span, c)]
            if cands:
                links.append(Link(span.start, span.end, span.surface, cands))
        return links

    def _refine(self, text: str, spans: list[Span], fold: bool, surname: bool) -> list[Span]:
        """Shrink a span to the part its best candidate explains ("Lagos at the Lagos State
        Library" -> "Lagos State Library") and look for mentions in what is left over."""
        refined: list[Span] = []
        leftovers = False
        for span in spans:
            best = span.candidates[0]
            if len(tokenize(span.surface)) > len(tokenize(best.matched_label)) + 1:
                surface = _norm(span.surface, fold)
                al = fuzz.partial_ratio_alignment(_norm(best.matched_label, fold), surface)
                if al is not None and al.score >= 85:
                    start, end = _snap(surface, al.dest_start, al.dest_end)
                    if end - start < len(surface):
                        span = Span(span.start + start, span.start + end,
                                    text[span.start + start: span.start + end], span.candidates)
                        leftovers = True
            refined.append(span)
        if not leftovers:
            return spans
        blanked = list(text)
        for span in refined:
            blanked[span.start:span.end] = " " * (span.end - span.start)
        extra = self.tools.match_spans("".join(blanked), threshold=self.threshold, k=self.k,
                                       fold_accents=fold, surname=surname)
        extra = [Span(s.start, s.end, text[s.start:s.end], s.candidates) for s in extra]
        return sorted(refined + extra, key=lambda s: s.start)

    def _plural_classes(self, text: str, spans: Sequence[Span]) -> list[Span]:
        """Class names in irregular plurals the fuzzy matcher misses ("cities", "libraries")."""
        labels = self._class_labels()
        out = []
        for m in re.finditer(r"[^\W\d_]{4,}", text):
            if any(sp.start < m.end() and m.start() < sp.end for sp in spans):
                continue
            word = m.group().casefold()
            for singular in _singulars(word):
                cls = labels.get(singular)
                if cls is not None:
                    out.append(Span(m.start(), m.end(), m.group(), [Candidate(
                        cls, self.tools.label(cls) or singular, [OWL + "Class"], 100.0, 0, singular)]))
                    break
        return out

    def _class_labels(self) -> dict[str, str]:
        if self._classes is None:
            try:
                items = self.tools.classes()
            except KGError:
                items = []
            labels: dict[str, str] = {}
            for item in items:
                for name in (item.label, local_name_surface(item.iri)):
                    if name and " " not in name.strip():
                        labels.setdefault(name.strip().casefold(), item.iri)
            self._classes = labels
        return self._classes

    @staticmethod
    def mask(text: str, links: Sequence[Link]) -> str:
        """``text`` with entity mentions, numbers and quoted strings replaced by placeholders."""
        marks: list[tuple[int, int, str]] = []
        for link in links:
            if _candidate_kind(link.candidates[0]) == "entity":
                marks.append((link.start, link.end, " ENT "))
        marks += [(m.start, m.end, " STR ") for m in find_quoted(text)]
        marks += [(m.start, m.end, " NUM ") for m in find_numbers(text)]
        out, pos = [], 0
        for start, end, placeholder in sorted(marks):
            if start < pos:
                continue
            out += [text[pos:start], placeholder]
            pos = end
        out.append(text[pos:])
        return "".join(out)

    # ---------------------------------------------------------------- answering

    def answer(self, question: str, trace: Trace, *, lang: str | None = None,
               deadline: float | None = None) -> StrategyResult:
        if self.retrieval_note:
            trace.step("note", text=self.retrieval_note)
        links = self.link(question)
        q = _Question(question, question_kind(question), links,
                      [w for w in normalize_text(question).split() if w not in STOPWORDS], trace, deadline)
        trace.step("linking", question_kind=q.kind, mentions=[_link_dict(l) for l in links])
        hits = self._candidates(q)
        trace.step("retrieval", retriever=self.retriever.name, few_shot=self.few_shot,
                   hits=[{"uid": h.example.uid, "text": h.example.text, "score": h.score} for h in hits])
        if not hits:
            return StrategyResult(None, "no_answer", "no training example to adapt (few_shot=0 or empty pool)")
        fallback: Execution | None = None
        error: Execution | None = None
        for rank, hit in enumerate(hits):
            tpl = self.template(hit.example)
            if isinstance(tpl, TemplateError):
                trace.step("candidate", rank=rank, uid=hit.example.uid, skipped=str(tpl))
                continue
            for variant in self._variants(tpl, q, rank):
                if q.late():
                    return StrategyResult(fallback.query if fallback else None, "timeout",
                                          "time limit reached while trying candidates")
                ex = self._execute(variant, q, rank)
                if ex is None:
                    continue
                if not ex.ok:
                    error = error or ex
                    continue
                if self._accept(ex, q, rank):
                    trace.step("accepted", rank=rank, uid=tpl.example.uid, query=ex.query)
                    return StrategyResult(ex.query, "answered",
                                          f"adapted {tpl.example.uid}: " + ("; ".join(ex.notes) or "as is"))
                fallback = fallback or ex
        if fallback is not None:
            trace.step("fallback", query=fallback.query)
            return StrategyResult(fallback.query, "answered",
                                  "no candidate passed verification; returning the first that executed")
        if error is not None:
            return StrategyResult(None, "tool_error", f"every candidate query failed: {error.error}")
        return StrategyResult(None, "no_answer", "no candidate query could be built")

    def _candidates(self, q: _Question) -> list[Hit]:
        """The ``few_shot`` templates to try, in order."""
        if self.few_shot <= 0:
            return []
        hits = self.retriever.rank(self.mask(q.text, q.links))
        expected = self._expected_features(q)
        entities = sum(1 for l in q.links if _candidate_kind(l.candidates[0]) == "entity")

        def fit(hit: Hit) -> float:
            """Similarity, plus the query features the wording calls for, minus specific ones it
            does not, minus a mismatch in how many entities are named."""
            tpl = self.template(hit.example)
            if not isinstance(tpl, Template):
                return hit.score - 1.0
            have = tpl.features
            named = sum(1 for s in tpl.slots if s.kind == "entity" and s.mention is not None)
            return (hit.score + 0.1 * len(expected & have) - 0.1 * len(_EXCLUSIVE & (have - expected))
                    - 0.05 * abs(named - entities))

        hits = sorted(hits, key=lambda h: (-round(fit(h), 9), h.example.uid))
        if q.kind == "boolean" and self.on("ask_for_yes_no"):
            asks = [h for h in hits if self._form(h.example) == "ASK"]
            hits = asks + [h for h in hits if self._form(h.example) != "ASK"]
        return hits[: self.few_shot]

    def _expected_features(self, q: _Question) -> frozenset[str]:
        """Query features the question's wording calls for: superlatives -> ORDER/LIMIT,
        comparisons with a number -> FILTER (HAVING when a class is counted: "more than 30
        books"); counts -> COUNT when expected_shape is on."""
        out: set[str] = set()
        if superlative_polarity(q.text):
            out |= {"ORDER", "LIMIT"}
        numbers = find_numbers(q.text)
        if numbers and comparison_direction(q.text, numbers[0].start):
            after = [l for l in q.links if l.start >= numbers[0].end and l.kind_candidates("class")]
            counted = bool(after) and after[0].start - numbers[0].end <= 12
            out.add("HAVING" if counted else "FILTER")
        if q.kind == "count" and self.on("expected_shape"):
            out.add("COUNT")
        return frozenset(out)

    def _form(self, example: Example) -> str:
        tpl = self.template(example)
        return "" if isinstance(tpl, TemplateError) else tpl.form

    def template(self, example: Example) -> Template | TemplateError:
        """The parsed template of a training example (cached), or why there is none."""
        if example.uid not in self._templates:
            try:
                tpl = parse_template(example)
                self._find_slots(tpl)
                self._templates[example.uid] = tpl
            except TemplateError as exc:
                self._templates[example.uid] = exc
        return self._templates[example.uid]

    # ---------------------------------------------------------------- slots of a template

    def _find_slots(self, tpl: Template) -> None:
        by_value: dict[tuple[str, str], Slot] = {}
        for tok, role, triple in _walk_terms(tpl):
            found = self._slot_of(tok, role, tpl)
            if found is None:
                continue
            slot = by_value.setdefault(found, Slot(found[0], found[1], []))  # type: ignore[arg-type]
            slot.toks.append(tok)
            slot.in_triples |= triple is not None
            slot.in_raw |= triple is None
        text = tpl.example.text
        spans = self._example_links(text)
        used: list[tuple[int, int]] = []
        # Entities first: their labels are the most specific evidence of where a mention is.
        order = {"entity": 0, "string": 1, "number": 2, "class": 3, "property": 4}
        for slot in sorted(by_value.values(), key=lambda s: order[s.kind]):
            slot.mention = self._example_mention(slot, text, used, spans)
            if slot.kind in ("entity", "class", "property") and self.tools.index is not None:
                slot.types = tuple(self.tools.index.types(slot.value))
            if slot.mention is not None:
                used.append(slot.mention)
            elif slot.kind == "property":
                continue  # an unmentioned predicate is part of the template's fixed wording
            tpl.slots.append(slot)
        if tpl.structured:
            tpl.slots += self._implicit_classes(tpl, spans, used)
        tpl.slots.sort(key=lambda s: (s.rank_key, s.kind))
        tpl.polarity = superlative_polarity(text)
        number = next((s for s in tpl.slots if s.kind == "number" and s.mention), None)
        tpl.comparison = comparison_direction(text, number.mention[0] if number and number.mention else None)

    def _implicit_classes(self, tpl: Template, spans: Sequence[Span], used: list[tuple[int, int]]) -> list[Slot]:
        """Classes the training question names that the query expresses only through a
        predicate's range or domain ("Which *publishers* ..." -> ``?book do:publishedBy ?result``)."""
        explicit = {s.value for s in tpl.slots if s.kind == "class"}
        out: list[Slot] = []
        for span in spans:
            if any(a < span.end and span.start < b for a, b in used):
                continue
            classes = [c.iri for c in span.candidates if _candidate_kind(c) == "class" and c.iri not in explicit]
            slot = self._implicit_slot(tpl, classes[:3])
            if slot is not None:
                slot.mention = (span.start, span.end)
                used.append(slot.mention)
                out.append(slot)
        return out

    def _implicit_slot(self, tpl: Template, classes: Sequence[str]) -> Slot | None:
        for triple in tpl.triples:
            if triple.is_type() or len(triple.p) != 1 or triple.p[0].kind not in ("iri", "pname"):
                continue
            pred = _expand(triple.p[0], tpl.prefixes)
            info = self._ontology_of(pred) if pred else None
            if info is None:
                continue
            for cls in classes:
                if triple.o_var and cls in {r.iri for r in info.range}:
                    return Slot("class", cls, [triple.p[0]], types=(cls,), in_triples=True, side="o")
                if triple.s_var and cls in {d.iri for d in info.domain}:
                    return Slot("class", cls, [triple.p[0]], types=(cls,), in_triples=True, side="s")
        return None

    def _slot_of(self, tok: Tok, role: str, tpl: Template) -> tuple[str, str] | None:
        if tok.kind in ("iri", "pname"):
            value = _expand(tok, tpl.prefixes)
            if value is None or value.startswith(_XSD):
                return None
            if role == "type":
                return ("class", value)
            if role == "p":
                return ("property", value)
            if role == "raw" and self._is_schema(value):
                return None
            return ("entity", value)
        if tok.kind == "string":
            return ("string", _literal_value(tok))
        if tok.kind == "number":
            return ("number", tok.text)
        return None

    def _is_schema(self, iri: str) -> bool:
        types = set(self.tools.index.types(iri)) if self.tools.index is not None else set()
        return bool(types & _SCHEMA_TYPES)

    def _example_links(self, text: str) -> list[Span]:
        """Mentions in a training question, linked permissively: the gold query says which
        entity is meant, so only where it is mentioned is in question (rules do not apply)."""
        spans = self.tools.match_spans(text, threshold=min(self.threshold, 85.0), k=max(self.k, 20),
                                       fold_accents=True, surname=True)
        return self._refine(text, spans, True, True)

    def _example_mention(self, slot: Slot, text: str, used: list[tuple[int, int]],
                         spans: Sequence[Span]) -> tuple[int, int] | None:
        """Where the training question names the slot's value, if it does."""
        def free(start: int, end: int) -> bool:
            return all(end <= a or start >= b for a, b in used)

        if slot.kind == "number":
            return next(((m.start, m.end) for m in find_numbers(text)
                         if _same_number(m.value, slot.value) and free(m.start, m.end)), None)
        if slot.kind != "string":
            for span in spans:
                if any(c.iri == slot.value for c in span.candidates) and free(span.start, span.end):
                    return (span.start, span.end)
        forms = [slot.value] if slot.kind == "string" else self._surface_forms_of(slot.value)
        folded = _norm(text, True)
        for form in forms:
            f = _norm(form, True).strip()
            if len(f) < 2:
                continue
            for m in re.finditer(rf"(?<!\w){re.escape(f)}", folded):
                if free(m.start(), m.end()):
                    return _snap(folded, m.start(), m.end())
            acronym = "".join(w[0] for w in tokenize(form) if w not in STOPWORDS)
            if len(acronym) >= 2:
                m2 = re.search(rf"\b{re.escape(acronym)}\b", folded)
                if m2 and free(m2.start(), m2.end()):
                    return (m2.start(), m2.end())
        if slot.kind == "string":
            for form in forms:
                al = fuzz.partial_ratio_alignment(_norm(form, True), folded)
                if al is not None and al.score >= 90 and free(al.dest_start, al.dest_end):
                    return _snap(folded, al.dest_start, al.dest_end)
        return None

    def _surface_forms_of(self, iri: str) -> list[str]:
        forms = [self.tools.label(iri), local_name_surface(iri)]
        if self.tools.index is not None:
            forms += [c.matched_label for c in self.tools.surface_forms(iri, 1)]
        out = [f for f in dict.fromkeys(forms) if f]
        out += [re.sub(r"\s*\([^()]*\)\s*$", "", f) for f in out if f.endswith(")")]
        return out

    # ---------------------------------------------------------------- variants

    def _variants(self, tpl: Template, q: _Question, rank: int) -> Iterator[Variant]:
        """Adaptations of ``tpl`` to the question, most plausible first."""
        assignments = self._assign(tpl, q)
        q.trace.step("candidate", rank=rank, uid=tpl.example.uid, example=tpl.example.text,
                     template=tpl.render(), slots=[_slot_dict(s, tpl) for s in tpl.slots],
                     assignments=[[f"{s.kind} {s.value} -> {v}" for s, v in a.items()] for a in assignments[:3]])
        for fills in assignments[:3]:
            base = self._substitute(tpl, q, fills)
            if base is None:
                continue
            measured = self._measured(base, q) if tpl.structured else None
            ranked = self._superlative(base, q) if tpl.structured else None
            for adapted in [v for v in (ranked, measured) if v is not None] + [base]:
                for shaped in self._shape(adapted, q):
                    yield from self._typed(shaped, q)

    def _assign(self, tpl: Template, q: _Question) -> list[dict[Slot, str | None]]:
        """Fillers for the mentioned slots, best assignment first. A filler is an IRI or a
        literal's value; None relaxes the slot."""
        slots = [s for s in tpl.slots if s.mention is not None]
        options = [self._options(slot, slots, tpl, q) for slot in slots]
        scored: list[tuple[float, int, dict[Slot, str | None]]] = []
        for n, combo in enumerate(itertools.product(*options)):
            if n > 5000:
                break
            spans = [o[1] for o in combo if o[1] is not None]
            if _overlapping(spans):
                continue
            fills = {slot: _carry_case(slot, o[2], tpl.example.text) for slot, o in zip(slots, combo)}
            scored.append((sum(o[0] for o in combo), n, fills))
        scored.sort(key=lambda x: (-round(x[0], 6), x[1]))
        return [fills for _, _, fills in scored] or [{}]

    def _options(self, slot: Slot, slots: list[Slot], tpl: Template,
                 q: _Question) -> list[tuple[float, tuple[int, int] | None, str | None]]:
        """(score, span in the question, filler) choices for one slot, plus relaxing it."""
        opts: list[tuple[float, tuple[int, int] | None, str | None]] = []
        rank = [s for s in slots if s.kind == slot.kind].index(slot)
        if slot.kind in ("entity", "class", "property"):
            kind_links = [l for l in q.links if l.kind_candidates(slot.kind)]
            for j, link in enumerate(kind_links):
                for c in link.kind_candidates(slot.kind)[: self.k]:
                    order = 0.15 if j == rank else 0.0
                    opts.append((c.score / 100.0 + self._compat(slot, c) + order, (link.start, link.end), c.iri))
        elif slot.kind == "number":
            linked = [(l.start, l.end) for l in q.links]
            numbers = [n for n in find_numbers(q.text) if not any(a <= n.start < b for a, b in linked)]
            opts += [(1.0 + (0.15 if j == rank else 0.0), (n.start, n.end), n.value) for j, n in enumerate(numbers)]
        else:
            opts += [(1.5 + (0.15 if j == rank else 0.0), (m.start, m.end), m.value)
                     for j, m in enumerate(find_quoted(q.text))]
            aligned = _align_string(tpl.example.text, slot, q.text)
            if aligned is not None:
                opts.append((1.2, (aligned.start, aligned.end), aligned.value))
        opts.sort(key=lambda o: -o[0])
        keep = 0.0 if slot.kind in ("entity", "string") else 0.3  # relax entities, keep the rest
        return opts[:4] + [(keep, None, None)]

    def _compat(self, slot: Slot, cand: Candidate) -> float:
        """How well a candidate's types fit the slot's: 1 same type, 0.5 related, 0 unrelated
        (classes and properties: 1 unchanged, 0.5 another one)."""
        if slot.kind != "entity":
            return 1.0 if cand.iri == slot.value else 0.5
        a = set(slot.types) - _GENERIC_TYPES
        b = set(cand.types) - _GENERIC_TYPES
        if not a or not b:
            return 0.25
        if a & b:
            return 1.0
        if self._supers(a) & self._supers(b):
            return 0.5
        return 0.0

    def _supers(self, classes: set[str]) -> set[str]:
        out: set[str] = set()
        for c in classes:
            info = self._ontology_of(c)
            out |= {s.iri for s in getattr(info, "superclasses", [])} - _GENERIC_TYPES
        return out

    def _ontology_of(self, iri: str) -> Any:
        if iri not in self._ontology:
            try:
                self._ontology[iri] = self.tools.ontology(iri)
            except Exception:  # ontology lookups only refine choices; never fail a question
                self._ontology[iri] = None
        return self._ontology[iri]

    def _substitute(self, tpl: Template, q: _Question, fills: dict[Slot, str | None]) -> Variant | None:
        memo: dict[int, Any] = {}
        variant = Variant(tpl, copy.deepcopy(tpl.pieces, memo), [])
        relaxed: list[Tok] = []
        for slot, value in fills.items():
            toks = [memo[id(t)] for t in slot.toks]
            if value is None:
                if slot.kind in ("entity", "string") and slot.in_triples and not slot.in_raw and tpl.structured:
                    relaxed += toks
                    variant.notes.append(f"relaxed {slot.kind} {_short(slot.value)}")
                continue
            if value == slot.value:
                continue
            if slot.side is not None:  # implicit class: re-link the predicate that implied it
                pred = self._implicit_relink(slot, value, tpl, q)
                if pred is None:
                    continue
                for tok in toks:
                    tok.text, tok.kind = f"<{pred}>", "iri"
                variant.notes.append(f"class {_short(slot.value)} -> {_short(value)} "
                                     f"(predicate -> {_short(pred)})")
                continue
            for tok in toks:
                if slot.kind in ("entity", "class", "property"):
                    tok.text, tok.kind = f"<{value}>", "iri"
                    if slot.kind == "entity":
                        variant.substituted.append(tok)
                elif slot.kind == "number":
                    tok.text = value
                else:
                    tok.text = _requote(tok.text, value)
            variant.notes.append(f"{slot.kind} {_short(slot.value)} -> {_short(value)}")
        if relaxed and not _relax(variant, relaxed):
            return None
        _flip_polarity(variant, q.text)
        _flip_comparison(variant, q.text, fills)
        return variant

    def _implicit_relink(self, slot: Slot, cls: str, tpl: Template, q: _Question) -> str | None:
        """The predicate that connects the same kind of thing to ``cls`` as the template's
        predicate connected to ``slot.value`` ("published by" a Publisher -> "genre" a Genre)."""
        current = _expand(slot.toks[0], tpl.prefixes)
        if current is None:
            return None
        direction = "in" if slot.side == "o" else "out"
        found = [(p.iri, p.count) for p in getattr(self._ontology_of(cls), "predicates", [])
                 if p.direction == direction]
        other_end = "domain" if slot.side == "o" else "range"
        want = {i.iri for i in getattr(self._ontology_of(current), other_end, [])}
        fitting = [(p, n) for p, n in found
                   if want & {i.iri for i in getattr(self._ontology_of(p), other_end, [])}]
        ranked = self._rank_predicates(fitting or found, current, q, same_kind=False)
        return ranked[0] if ranked else None

    def _measured(self, variant: Variant, q: _Question) -> Variant | None:
        """A variant whose ordered or compared property is re-linked when the question's wording
        points to another property of the same subject ("the shortest book" adapted from "the
        highest-rated book": rating -> page count)."""
        pieces = variant.pieces
        close = _where_close(pieces)
        tail = [p.text for p in pieces[close + 1:] if isinstance(p, Tok) and p.kind == "var"]
        compared = [a.text for a, b in itertools.pairwise(pieces) if isinstance(a, Tok) and a.kind == "var"
                    and isinstance(b, Tok) and b.text in (">", "<", ">=", "<=")]
        targets = tail + compared
        for i, piece in enumerate(pieces):
            if not (isinstance(piece, Triple) and piece.o_var in targets and piece.s_var and len(piece.p) == 1):
                continue
            current = _expand(piece.p[0], variant.tpl.prefixes)
            cls = _var_class(pieces, piece.s_var, variant.tpl.prefixes)
            if current is None or cls is None:
                continue
            found = self._class_predicates(cls)
            ranked = self._rank_predicates(found, current, q, old_weight=0.0)
            if not ranked:
                continue
            best = max(ranked, key=lambda p: (self._wording(p, q, current, 0.0), -ranked.index(p)))
            score = self._wording(best, q, current, 0.0)
            now = self._wording(current, q, current, 0.0) if any(p == current for p, _ in found) else -1.0
            if score < 80 or score <= now + 10:
                continue
            out = variant.fork(f"measured property {local_name(current)} -> {local_name(best)}")
            t = out.pieces[i]
            assert isinstance(t, Triple)
            t.p = [Tok("iri", f"<{best}>")]
            return out
        return None

    def _superlative(self, variant: Variant, q: _Question) -> Variant | None:
        """A superlative the template lacks ("the most reliable Inductor" adapted from "suppliers
        of Compensators"): order by the numeric property of one of its variables that the
        question's wording names, and keep the first answer."""
        tpl = variant.tpl
        polarity = superlative_polarity(q.text)
        if not polarity or tpl.form != "SELECT" or tpl.aggregate or tpl.features & {"ORDER", "LIMIT", "GROUP"}:
            return None
        best: tuple[float, str, str] | None = None
        for var in _triple_vars(variant.pieces):
            for cls in self._var_classes(variant, var):
                for pred, _ in self._class_predicates(cls):
                    if self._value_kind(pred) != "number":
                        continue
                    score = self._wording(pred, q, pred, 0.0)
                    if score >= 80 and (best is None or score > best[0]):
                        best = (score, var, pred)
        if best is None:
            return None
        _, var, pred = best
        out = variant.fork(f"{'highest' if polarity > 0 else 'lowest'} {local_name(pred)} of {var}")
        close = _where_close(out.pieces)
        measure = Tok("var", "?superlative_measure")
        out.pieces.insert(close, Triple([Tok("var", var)], [Tok("iri", f"<{pred}>")], [measure]))
        order = "DESC" if polarity > 0 else "ASC"
        out.pieces.insert(close + 2, Tok("word", f"ORDER BY {order}(?superlative_measure) LIMIT 1", "\n"))
        return out

    def _var_classes(self, variant: Variant, var: str) -> list[str]:
        """Classes of a variable: its rdf:type, else the domains/ranges of its predicates."""
        prefixes = variant.tpl.prefixes
        explicit = _var_class(variant.pieces, var, prefixes)
        if explicit:
            return [explicit]
        out: list[str] = []
        for t in variant.pieces:
            if not isinstance(t, Triple) or t.is_type() or len(t.p) != 1:
                continue
            pred = _expand(t.p[0], prefixes)
            info = self._ontology_of(pred) if pred else None
            if info is None:
                continue
            items = info.domain if t.s_var == var else info.range if t.o_var == var else []
            out += [i.iri for i in items if not i.iri.startswith(_XSD)]
        return list(dict.fromkeys(out))[:4]

    # ---------------------------------------------------------------- shape (ASK / COUNT)

    def _shape(self, variant: Variant, q: _Question) -> Iterator[Variant]:
        tpl = variant.tpl
        if q.kind == "boolean" and tpl.form == "SELECT" and (self.on("ask_for_yes_no") or self.on("expected_shape")):
            yield _to_ask(variant)
            return
        if q.kind == "count" and tpl.form == "SELECT" and not tpl.aggregate and self.on("expected_shape"):
            counted = _to_count(variant)
            if counted is not None:
                yield counted
                return
        yield self._project(variant, q)

    def _project(self, variant: Variant, q: _Question) -> Variant:
        """project_iris: a label column becomes the entity it names, unless names are asked for."""
        tpl = variant.tpl
        if not self.on("project_iris") or tpl.form != "SELECT" or _NAME_RE.search(q.text):
            return variant
        label_of: dict[str, str] = {}
        for t in variant.pieces:
            if (isinstance(t, Triple) and len(t.p) == 1 and t.s_var and t.o_var
                    and _expand(t.p[0], tpl.prefixes) in self._labels):
                label_of[t.o_var] = t.s_var
        targets = [v for v in tpl.projection if v in label_of and label_of[v] not in tpl.projection]
        if not targets:
            return variant
        out = variant.fork("entities projected instead of labels: " + ", ".join(targets))
        start = _form_index(out.pieces) or 0
        for piece in out.pieces[start:_where_open(out.pieces, start)]:
            if isinstance(piece, Tok) and piece.kind == "var" and piece.text in targets:
                piece.text = label_of[piece.text]
        return out

    def _typed(self, variant: Variant, q: _Question) -> Iterator[Variant]:
        """answer_type_constraint: first with ``?answer a <Class>`` for the class the question
        asks for, then without it."""
        tpl = variant.tpl
        var = tpl.answer_var
        if self.on("answer_type_constraint") and tpl.form == "SELECT" and var and not tpl.aggregate \
                and variant.render().count("COUNT(") == 0:
            cls = _asked_class(q.text, q.links)
            if cls and _var_class(variant.pieces, var, tpl.prefixes) != cls:
                typed = variant.fork(f"answer typed {local_name(cls)}")
                typed.typed = True
                open_ = _where_open(typed.pieces, _form_index(typed.pieces) or 0)
                # a/rdfs:subClassOf*: instances are often typed with a subclass only.
                path = [Tok("word", "a"), Tok("punct", "/"), Tok("iri", f"<{RDFS}subClassOf>"), Tok("punct", "*")]
                typed.pieces.insert(open_ + 1, Triple([Tok("var", var)], path, [Tok("iri", f"<{cls}>")]))
                yield typed
        yield variant

    # ---------------------------------------------------------------- execution and checks

    def _run(self, variant: Variant, q: _Question, rank: int) -> Execution:
        query = variant.render()
        q.executed.add(query)
        preview = self.tools.test_sparql(query)
        if not preview.ok:
            ex = Execution(query, False, True, "error", None, preview.error)
        elif preview.boolean is not None:
            ex = Execution(query, True, False, "boolean", None)
        else:
            numeric = (len(preview.rows) == 1 and len(preview.variables) == 1
                       and preview.rows[0][0] is not None and _is_number(preview.rows[0][0]))
            rows = preview.total if preview.total is not None else len(preview.rows)
            ex = Execution(query, True, not preview.rows, "number" if numeric else "list", rows)
        ex.notes = list(variant.notes)
        q.trace.step("execution", rank=rank, query=query, notes=ex.notes, ok=ex.ok, shape=ex.shape,
                     rows=ex.rows, error=ex.error)
        return ex

    def _execute(self, variant: Variant, q: _Question, rank: int) -> Execution | None:
        """Run a variant; while its result is empty, run its repairs (inverse directions when
        triple_direction is on, re-linked predicates). None: nothing new to judge (the query was
        already run for this question, or a typed variant came back empty: the untyped follows)."""
        if variant.render() in q.executed:
            return None  # the same query from another assignment or template: already judged
        ex = self._run(variant, q, rank)
        if not ex.ok or not ex.empty:
            return ex
        if variant.typed:
            return None
        if not variant.tpl.structured:
            return ex
        repairs = self._inverse(variant) if self.on("triple_direction") else []
        repairs += self._relink(variant, q)
        for repaired in repairs[:6]:
            if q.late():
                break
            if repaired.render() in q.executed:
                continue
            rex = self._run(repaired, q, rank)
            if rex.ok and not rex.empty:
                return rex
        return ex

    def _accept(self, ex: Execution, q: _Question, rank: int) -> bool:
        if self.on("expected_shape") and not _shape_fits(q.kind, ex):
            q.trace.step("rejected", rank=rank, reason=f"a {ex.shape} does not answer a {q.kind} question")
            return False
        if self.on("verify_nonempty") and ex.empty:
            q.trace.step("rejected", rank=rank, reason="empty result")
            return False
        return True

    def _inverse(self, variant: Variant) -> list[Variant]:
        """The variant with subject and object swapped in triples holding a new entity."""
        subs = {id(t) for t in variant.substituted}
        idx = [i for i, p in enumerate(variant.pieces) if isinstance(p, Triple) and not p.is_type()
               and len(p.p) == 1 and any(id(t) in subs for t in (*p.s, *p.o))
               and all(t.kind not in ("string", "number") for t in p.o)]
        if not idx:
            return []
        flipped = variant.fork("inverse triple direction")
        for i in idx:
            t = flipped.pieces[i]
            assert isinstance(t, Triple)
            t.s, t.o = t.o, t.s
        return [flipped]

    # ---------------------------------------------------------------- predicate re-linking

    def _relink(self, variant: Variant, q: _Question) -> list[Variant]:
        """Predicates that no longer fit a substituted entity, class or literal, replaced by
        ones that do (closest in wording to the question and to the old predicate first)."""
        out: list[Variant] = []
        subs = {id(t) for t in variant.substituted}
        prefixes = variant.tpl.prefixes
        for i, piece in enumerate(variant.pieces):
            if not isinstance(piece, Triple) or piece.is_type() or len(piece.p) != 1:
                continue
            current = _expand(piece.p[0], prefixes)
            if current is None:
                continue
            found: list[tuple[str, int]] | None = None
            if piece.o[0].kind == "iri" and any(id(t) in subs for t in piece.o):
                found = self._entity_predicates(piece.o[0].text[1:-1], "in")
            elif piece.s[0].kind == "iri" and any(id(t) in subs for t in piece.s):
                found = self._entity_predicates(piece.s[0].text[1:-1], "out")
            elif piece.o[0].kind == "string":
                found = self._value_predicates(piece.o[0].text)
            elif piece.s_var and (cls := _var_class(variant.pieces, piece.s_var, prefixes)) is not None:
                found = self._class_predicates(cls)
            if not found or any(p == current for p, _ in found):
                continue
            ranked = [p for p in self._rank_predicates(found, current, q)
                      if self._wording(p, q, current, 0.8) >= _MIN_WORDING]  # no blind guesses
            for pred in ranked[:2]:
                fixed = variant.fork(f"predicate {local_name(current)} -> {local_name(pred)}")
                t = fixed.pieces[i]
                assert isinstance(t, Triple)
                t.p = [Tok("iri", f"<{pred}>")]
                out.append(fixed)
        return out

    def _rank_predicates(self, found: list[tuple[str, int]], current: str, q: _Question, *,
                         same_kind: bool = True, old_weight: float = 0.8) -> list[str]:
        """Candidate predicates for ``current``: the same kind of value (unless ``same_kind`` is
        off); ontology namespace first when that rule is on; then wording closest to the question
        (with hints for superlative adjectives) or to ``current``; then usage."""
        ns = current[: len(current) - len(local_name(current))]
        want = self._value_kind(current) if same_kind else None

        def key(item: tuple[str, int]) -> tuple[float, float, float, str]:
            iri, count = item
            in_ns = 1.0 if self.on("ontology_namespace") and iri.startswith(ns) else 0.0
            return (-in_ns, -self._wording(iri, q, current, old_weight), -count, iri)

        usable = [p for p in found if p[0] not in (current, RDF_TYPE)
                  and (want is None or self._value_kind(p[0]) in (None, want))]
        return [p for p, _ in sorted(usable, key=key)]

    def _wording(self, iri: str, q: _Question, current: str, old_weight: float) -> float:
        """0-100: how close a predicate's name is to the question's words (or to ``current``)."""
        names = {x for x in tokenize(_split_camel(self.tools.label(iri) or "")) if len(x) > 2}
        names |= {x for x in tokenize(_split_camel(local_name(iri))) if len(x) > 2}
        words = set(q.words) | {h for w in q.words for h in _HINTS.get(w, ())}
        lex = max((_word_sim(w, x) for w in words for x in names), default=0.0)
        if old_weight:
            old = set(tokenize(_split_camel(local_name(current))))
            lex = max(lex, old_weight * max((_word_sim(w, x) for w in old for x in names), default=0.0))
        return lex

    def _value_kind(self, predicate: str) -> str | None:
        """iri | number | date | string: what the predicate's values are (from the KG)."""
        info = self._ontology_of(predicate)
        pairs = getattr(info, "example_pairs", None) or []
        for _, value in pairs:
            return _kind_of_value(value.kind, value.datatype)
        return None

    def _entity_predicates(self, iri: str, direction: str) -> list[tuple[str, int]]:
        info = self._ontology_of(iri)
        return [(p.iri, p.count) for p in getattr(info, "predicates", []) if p.direction == direction]

    def _class_predicates(self, cls: str) -> list[tuple[str, int]]:
        info = self._ontology_of(cls)
        return [(p.iri, p.count) for p in getattr(info, "predicates", []) if p.direction == "out"]

    def _value_predicates(self, literal: str) -> list[tuple[str, int]]:
        if literal not in self._pred_values:
            rows: list[tuple[str, int]] = []
            try:
                result = self.tools.kg.query(
                    f"SELECT ?p (COUNT(*) AS ?n) WHERE {{ ?s ?p {literal} }} GROUP BY ?p ORDER BY DESC(?n) LIMIT 20",
                    timeout=self.tools.timeout_s)
                rows = [(p.value, int(n.value)) for p, n in result.rows if p is not None and n is not None]
            except (KGError, ValueError):
                rows = []
            self._pred_values[literal] = rows
        return self._pred_values[literal]


# ============================================================================================
# Helpers: query edits
# ============================================================================================

_MIN_WORDING = 70.0  # a re-linked predicate must be named (or hinted) by the question

# Adjectives of superlatives and comparisons -> words of the properties they are about.
_HINTS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("old", "oldest", "older", "young", "youngest", "younger", "new", "newest", "newer",
                     "recent", "recently", "latest", "earliest", "founded", "established"),
                    ("year", "date", "founding", "birth")),
    **dict.fromkeys(("large", "largest", "larger", "big", "biggest", "small", "smallest", "populous",
                     "inhabitants", "people"), ("population", "size", "area")),
    **dict.fromkeys(("long", "longest", "short", "shortest", "pages", "thick", "thickest"), ("page", "length")),
    **dict.fromkeys(("heavy", "heaviest", "light", "lightest"), ("weight",)),
    **dict.fromkeys(("expensive", "cheap", "cheapest", "costly", "pricey"), ("price", "cost", "amount")),
    **dict.fromkeys(("rated", "rating", "popular"), ("rating", "score")),
}


def _relax(variant: Variant, toks: list[Tok]) -> bool:
    """Drop the triple patterns holding ``toks``, then those left dangling (holding a variable
    only the dropped patterns connected). False when no triple pattern would be left."""
    projected = set(variant.tpl.projection)
    ids = {id(t) for t in toks}
    dropped = [p for p in variant.pieces if isinstance(p, Triple) and any(id(t) in ids for t in (*p.s, *p.o))]
    freed: set[str] = set().union(*(t.vars() for t in dropped)) if dropped else set()
    pieces = [p for p in variant.pieces if not any(p is d for d in dropped)]
    while True:
        uses: dict[str, int] = {}
        for p in pieces:
            if isinstance(p, Triple):
                for v in p.vars():
                    uses[v] = uses.get(v, 0) + 1
            elif p.kind == "var":  # used in FILTER, ORDER BY, the projection...: never dangling
                uses[p.text] = uses.get(p.text, 0) + 100
        dangling = [p for p in pieces if isinstance(p, Triple) and any(
            v in freed and v not in projected and uses.get(v, 0) == 1 for v in p.vars())]
        if not dangling:
            break
        freed |= set().union(*(t.vars() for t in dangling))
        pieces = [p for p in pieces if not any(p is d for d in dangling)]
    if not any(isinstance(p, Triple) for p in pieces):
        return False
    variant.pieces = pieces
    return True


def _flip_polarity(variant: Variant, question: str) -> None:
    """"shortest" adapted from "most pages": ORDER BY DESC becomes ASC (and back)."""
    polarity = superlative_polarity(question)
    if not polarity or not variant.tpl.polarity or polarity == variant.tpl.polarity:
        return
    in_order = False
    for piece in variant.pieces[_where_close(variant.pieces) + 1:]:
        if not isinstance(piece, Tok):
            continue
        if piece.upper == "ORDER":
            in_order = True
        elif piece.upper in ("LIMIT", "OFFSET", "GROUP", "HAVING"):
            in_order = False
        elif in_order and piece.upper in ("ASC", "DESC"):
            piece.text = "DESC" if piece.upper == "ASC" else "ASC"
            variant.notes.append(f"order flipped to {piece.text}")
            return
        elif in_order and piece.kind == "var":
            piece.text = f"DESC({piece.text})"
            variant.notes.append("order flipped to DESC")
            return


def _flip_comparison(variant: Variant, question: str, fills: dict[Slot, str | None]) -> None:
    """"before 1950" adapted from "after 2020": the comparison operator is inverted."""
    number = next((s for s in fills if s.kind == "number" and fills[s] is not None), None)
    if number is None or not variant.tpl.comparison:
        return
    where = next((n.start for n in find_numbers(question) if n.value == fills[number]), None)
    direction = comparison_direction(question, where)
    if not direction or direction == variant.tpl.comparison:
        return
    flip = {">": "<", "<": ">", ">=": "<=", "<=": ">="}
    pieces = variant.pieces
    for piece, nxt in itertools.pairwise(pieces):
        if isinstance(piece, Tok) and piece.text in flip and isinstance(nxt, Tok) and nxt.kind == "number":
            piece.text = flip[piece.text]
            variant.notes.append(f"comparison flipped to {piece.text}")


def _to_ask(variant: Variant) -> Variant:
    out = variant.fork("converted to ASK")
    start = _form_index(out.pieces) or 0
    head = out.pieces[start]
    assert isinstance(head, Tok)
    head.text = "ASK"
    open_, close = _where_open(out.pieces, start), _where_close(out.pieces)
    out.pieces = [*out.pieces[: start + 1], *out.pieces[open_: close + 1]]
    return out


def _to_count(variant: Variant) -> Variant | None:
    """Count the answers: the query becomes a sub-query, so grouping and filters still hold."""
    var = variant.tpl.answer_var
    if var is None:
        return None
    out = variant.fork(f"answer counted: COUNT(DISTINCT {var})")
    start = _form_index(out.pieces) or 0
    head = Tok("word", f"SELECT (COUNT(DISTINCT {var}) AS ?count) WHERE {{ {{", out.pieces[start].pre)
    out.pieces = [*out.pieces[:start], head, *out.pieces[start:], Tok("punct", "} }", "\n")]
    return out


def _partial_person(span: Span, cand: Candidate) -> bool:
    """A person named by part of the name ("Bergström" for "Anna Bergström")."""
    if not _person_like(cand.types):
        return False
    mention = set(tokenize(span.surface))
    return bool(mention) and mention < set(tokenize(cand.label))


def _link_dict(link: Link) -> dict[str, Any]:
    return {"surface": link.surface, "start": link.start, "end": link.end,
            "candidates": [{"iri": c.iri, "label": c.label, "score": c.score,
                            "types": [local_name(t) for t in c.types[:3]]} for c in link.candidates]}


def _slot_dict(slot: Slot, tpl: Template) -> dict[str, Any]:
    said = tpl.example.text[slot.mention[0]:slot.mention[1]] if slot.mention else None
    return {"kind": slot.kind, "value": slot.value, "mentioned": said}


def _short(value: str) -> str:
    return local_name(value) if value.startswith("http") else value


def _norm(text: str, fold: bool) -> str:
    text = text.casefold()
    return fold_accents(text) if fold else text


def _carry_case(slot: Slot, value: str | None, example_text: str) -> str | None:
    """The training literal's casing carried over to the new literal ("Winter" -> "winter")."""
    if value is None or slot.kind != "string" or slot.mention is None:
        return value
    said = example_text[slot.mention[0]:slot.mention[1]]
    if slot.value == said.lower() and said != said.lower():
        return value.lower()
    if slot.value == said.upper() and said != said.upper():
        return value.upper()
    return value


def _kind_of_value(kind: str, datatype: str | None) -> str:
    if kind != "literal":
        return "iri"
    if datatype in _NUMERIC_DATATYPES:
        return "number"
    if datatype and datatype.startswith(_XSD) and ("date" in datatype or "time" in datatype or "gYear" in datatype):
        return "date"
    return "string"


# ============================================================================================
# Helpers: text and structure
# ============================================================================================


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def _is_number(text: str) -> bool:
    try:
        float(text.strip('"'))
        return True
    except ValueError:
        return False


def _snap(text: str, start: int, end: int) -> tuple[int, int]:
    """Widen a character range to whole words."""
    while start > 0 and text[start - 1].isalnum():
        start -= 1
    while end < len(text) and text[end].isalnum():
        end += 1
    return (start, end)


def _overlapping(spans: Sequence[tuple[int, int]]) -> bool:
    ordered = sorted(spans)
    return any(b[0] < a[1] for a, b in itertools.pairwise(ordered))


def _requote(token: str, value: str) -> str:
    """A string token with a new lexical value, keeping its quotes, language tag or datatype."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    suffix = ""
    for q in ('"""', "'''", '"', "'"):
        if token.startswith(q):
            end = token.rfind(q)
            suffix = token[end + len(q):] if end >= len(q) else ""
            break
    return f'"{escaped}"{suffix}'


def _word_sim(a: str, b: str) -> float:
    """0-100 similarity of two words; a long shared stem counts ("reliable" ~ "reliability")."""
    stem = len(os.path.commonprefix([a, b]))
    if stem >= 4 and stem >= 0.7 * min(len(a), len(b)):
        return max(90.0, fuzz.ratio(a, b))
    return fuzz.ratio(a, b)


def _triple_vars(pieces: Sequence[Piece]) -> list[str]:
    out: list[str] = []
    for p in pieces:
        if isinstance(p, Triple):
            out += [t.text for t in (*p.s, *p.o) if t.kind == "var"]
    return list(dict.fromkeys(out))


def _singulars(word: str) -> list[str]:
    out = [word]
    if word.endswith("ies"):
        out.append(word[:-3] + "y")
    if word.endswith(("ses", "xes", "ches", "shes")):
        out.append(word[:-2])
    if word.endswith("s"):
        out.append(word[:-1])
    return out


def _split_camel(text: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text)


def _align_string(example_text: str, slot: Slot, question: str) -> Mention | None:
    """The words of ``question`` standing where the training question names the slot: the
    question is aligned word by word with the training question. A capitalized mention must be
    replaced by capitalized words ("the word Winter" -> "Public"), at most three of them."""
    assert slot.mention is not None
    ex_words = [(m.start(), m.end(), normalize_text(m.group())) for m in re.finditer(r"[^\W_]+", example_text)]
    q_words = [(m.start(), m.end(), normalize_text(m.group())) for m in re.finditer(r"[^\W_]+", question)]
    inside = [i for i, w in enumerate(ex_words) if w[0] >= slot.mention[0] and w[1] <= slot.mention[1]]
    if not inside:
        return None
    said = example_text[slot.mention[0]:slot.mention[1]]
    matcher = difflib.SequenceMatcher(None, [w[2] for w in ex_words], [w[2] for w in q_words], autojunk=False)
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if not (a0 <= inside[0] and inside[-1] < a1):
            continue
        if op == "equal":
            j0, j1 = b0 + inside[0] - a0, b0 + inside[-1] - a0
            return Mention(q_words[j0][0], q_words[j1][1], question[q_words[j0][0]:q_words[j1][1]])
        if op != "replace":
            return None
        others = [ex_words[i][2] for i in range(a0, a1) if i not in inside]
        words = [w for w in q_words[b0:b1] if not any(fuzz.ratio(w[2], o) >= 80 for o in others)]
        while words and words[0][2] in STOPWORDS:
            words.pop(0)
        while words and words[-1][2] in STOPWORDS:
            words.pop()
        if not words or len(words) > 3:
            return None
        if said[:1].isupper() and not all(question[w[0]].isupper() or question[w[0]].isdigit() for w in words):
            return None
        return Mention(words[0][0], words[-1][1], question[words[0][0]:words[-1][1]])
    return None


def _form_index(pieces: Sequence[Piece]) -> int | None:
    return next((i for i, p in enumerate(pieces) if isinstance(p, Tok)
                 and p.upper in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")), None)


def _where_open(pieces: Sequence[Piece], start: int) -> int:
    return next(i for i in range(start, len(pieces)) if isinstance(pieces[i], Tok) and pieces[i].text == "{")  # type: ignore[union-attr]


def _where_close(pieces: Sequence[Piece]) -> int:
    open_ = _where_open(pieces, _form_index(pieces) or 0)
    depth = 0
    for i in range(open_, len(pieces)):
        p = pieces[i]
        if isinstance(p, Tok) and p.text == "{":
            depth += 1
        elif isinstance(p, Tok) and p.text == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(pieces) - 1


def _var_class(pieces: Sequence[Piece], var: str, prefixes: dict[str, str]) -> str | None:
    for p in pieces:
        if isinstance(p, Triple) and p.is_type() and p.s_var == var and len(p.o) == 1:
            iri = _expand(p.o[0], prefixes)
            if iri is not None:
                return iri
    return None


_EXCLUSIVE = frozenset({"ORDER", "LIMIT", "HAVING", "FILTER"})  # a template with these does
# something specific the question must ask for

_ASKED_BEFORE = frozenset({"which", "what", "many", "all", "list", "the", "me", "show", "our", "every", "each"})


def _asked_class(question: str, links: Sequence[Link]) -> str | None:
    """The class the question asks for: "Which *books* ...", "In which *department* ..."."""
    for link in links:
        classes = link.kind_candidates("class")
        if not classes:
            continue
        before = normalize_text(question[: link.start]).split()
        if before and before[-1] in _ASKED_BEFORE:
            return classes[0].iri
    return None


def _shape_fits(kind: QuestionKind, ex: Execution) -> bool:
    if kind == "boolean":
        return ex.shape == "boolean"
    if kind == "count":
        return ex.shape == "number"
    return ex.shape != "boolean"
