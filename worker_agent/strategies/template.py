"""SPARQL templates: a training example's gold query taken apart so that it can be adapted.

The project lexer's tokens (:mod:`worker_agent.sparql_lexer`) and a structural parser of the
WHERE clause turn a query into *pieces*: raw tokens, with every triple block expanded into
:class:`Triple` objects (``;`` and ``,`` shorthand spelled out). A :class:`Template` adds what
adaptation needs: the query form, the projection, the features (ORDER, LIMIT, COUNT, ...) and
the *slots* (entities, classes, properties and literals the training question names; found by
the strategy, which has the KG tools). A :class:`Variant` is one editable copy of a template's
pieces; the edits here (relaxing a constraint, flipping an order or a comparison, turning a
query into ASK or COUNT, typing the answer, choosing the projection) are purely structural: no
KG, no question wording.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from worker_agent import sparql_lexer
from worker_agent.kg import KNOWN_PREFIXES
from worker_agent.strategies import Example

__all__ = [
    "RDF_TYPE",
    "Piece",
    "Slot",
    "SlotKind",
    "Template",
    "TemplateError",
    "Tok",
    "Triple",
    "Variant",
    "add_column",
    "add_patterns",
    "add_type",
    "declared_prefixes",
    "expand",
    "flip_comparisons",
    "flip_order",
    "form_index",
    "literal_value",
    "parse_template",
    "relax",
    "render_pieces",
    "reproject",
    "requote",
    "to_ask",
    "to_count",
    "tokenize_sparql",
    "triple_vars",
    "uncount",
    "var_class",
    "walk_terms",
    "where_close",
    "where_open",
]

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
XSD = "http://www.w3.org/2001/XMLSchema#"

# --------------------------------------------------------------------------------------------
# Tokens and the structural parser
# --------------------------------------------------------------------------------------------


class TemplateError(Exception):
    """A gold query the offline strategy cannot take apart (one line, names the example)."""


# A lone character the template parser knows; any other (a stray quote, ``@``, ``$``, ``~``...)
# is not SPARQL a template can hold.
_PUNCT = frozenset("{}()[].;,*/|^+?!=<>-")
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
    """The tokens of ``sparql`` as the template parser reads them: the project lexer's
    (:func:`worker_agent.sparql_lexer.tokens`), regrouped for structural edits. Whitespace and
    comments become the ``pre`` of the next token (so a rendered template keeps its layout); a
    literal takes along the language tag or datatype right after it (a slot is the whole
    literal); ``_:b`` is a ``bnode``; operators (``&&``, ``^^``...) are ``punct``."""
    lexed = sparql_lexer.tokens(sparql)
    toks: list[Tok] = []
    pre = ""
    i = 0
    while i < len(lexed):
        tok = lexed[i]
        kind: str = tok.kind
        text = tok.text
        i += 1
        if kind in ("ws", "comment"):
            pre += text
            continue
        if kind == "string":
            if i < len(lexed) and lexed[i].kind == "lang":
                text += lexed[i].text
                i += 1
            elif i + 1 < len(lexed) and lexed[i].text == "^^" and lexed[i + 1].kind in ("iri", "pname"):
                text += lexed[i].text + lexed[i + 1].text
                i += 2
        elif kind == "pname" and text.startswith("_:"):
            kind = "bnode"
        elif kind == "op":
            kind = "punct"
        elif kind == "lang" or (kind == "punct" and text not in _PUNCT):
            raise TemplateError(f"cannot tokenize at {sparql[tok.start:tok.start + 20]!r}")
        toks.append(Tok(kind, text, pre))
        pre = ""
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


def render_pieces(pieces: Sequence[Piece]) -> str:
    out: list[str] = []
    for piece in pieces:
        if isinstance(piece, Triple):
            out.append(piece.pre + piece.text())
        elif piece.text:
            out.append(piece.pre + piece.text)
    return "".join(out).strip() + "\n"


def declared_prefixes(toks: Sequence[Tok]) -> dict[str, str]:
    out = dict(KNOWN_PREFIXES)
    for i, tok in enumerate(toks[:-2]):
        if tok.upper == "PREFIX" and toks[i + 1].kind == "pname" and toks[i + 2].kind == "iri":
            out[toks[i + 1].text.rstrip(":")] = toks[i + 2].text[1:-1]
    return out


def expand(tok: Tok, prefixes: dict[str, str]) -> str | None:
    if tok.kind == "iri":
        return tok.text[1:-1]
    if tok.kind == "pname":
        prefix, _, local = tok.text.partition(":")
        ns = prefixes.get(prefix)
        return ns + local if ns is not None else None
    if tok.kind == "word" and tok.text == "a":
        return RDF_TYPE
    return None


def literal_value(tok: Tok) -> str:
    """The lexical value of a string token (quotes, language tag and datatype removed)."""
    text = tok.text
    for q in ('"""', "'''", '"', "'"):
        if text.startswith(q):
            end = text.rfind(q)
            return text[len(q):end] if end >= len(q) else text
    return text



# --------------------------------------------------------------------------------------------
# Templates and slots
# --------------------------------------------------------------------------------------------

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
        return render_pieces(self.pieces)

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
    form_at = form_index(pieces)
    if form_at is None:
        raise TemplateError(f"{example.uid}: no SELECT/ASK/CONSTRUCT/DESCRIBE")
    open_at = where_open(pieces, form_at)
    if open_at is None:
        raise TemplateError(f"{example.uid}: no WHERE clause")
    close_at = _matching_brace(pieces, open_at)
    if close_at is None:
        raise TemplateError(f"{example.uid}: unbalanced braces")
    form = pieces[form_at].upper  # type: ignore[union-attr]
    tpl = Template(example, pieces, structured, form, declared_prefixes(toks), form_at, open_at, close_at)
    head = [p for p in pieces[form_at + 1:open_at] if isinstance(p, Tok)]
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


def walk_terms(tpl: Template) -> Iterator[tuple[Tok, str, Triple | None]]:
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


# --------------------------------------------------------------------------------------------
# Where things are in a list of pieces
# --------------------------------------------------------------------------------------------


def form_index(pieces: Sequence[Piece]) -> int | None:
    """Index of the query form keyword (SELECT, ASK, CONSTRUCT, DESCRIBE)."""
    return next((i for i, p in enumerate(pieces) if isinstance(p, Tok)
                 and p.upper in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")), None)


def where_open(pieces: Sequence[Piece], start: int) -> int | None:
    """Index of the first ``{`` at or after ``start``."""
    return next((i for i in range(start, len(pieces))
                 if isinstance(pieces[i], Tok) and pieces[i].text == "{"), None)  # type: ignore[union-attr]


def _matching_brace(pieces: Sequence[Piece], open_: int) -> int | None:
    depth = 0
    for i in range(open_, len(pieces)):
        p = pieces[i]
        if isinstance(p, Tok) and p.text == "{":
            depth += 1
        elif isinstance(p, Tok) and p.text == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def head_end(pieces: Sequence[Piece], start: int) -> int:
    """Index just past the projection of the query form at ``start``: the WHERE keyword, or
    the WHERE clause's ``{`` when the keyword is left out."""
    open_ = where_open(pieces, start)
    if open_ is None:
        return start
    before = pieces[open_ - 1]
    return open_ - 1 if open_ - 1 > start and isinstance(before, Tok) and before.upper == "WHERE" else open_


def where_close(pieces: Sequence[Piece]) -> int:
    """Index of the ``}`` closing the WHERE clause (the last piece if it is unbalanced)."""
    open_ = where_open(pieces, form_index(pieces) or 0)
    close = _matching_brace(pieces, open_) if open_ is not None else None
    return len(pieces) - 1 if close is None else close


def var_class(pieces: Sequence[Piece], var: str, prefixes: dict[str, str]) -> str | None:
    """The class a variable is typed with (``?var a <Class>``), if any."""
    for p in pieces:
        if isinstance(p, Triple) and p.is_type() and p.s_var == var and len(p.o) == 1:
            iri = expand(p.o[0], prefixes)
            if iri is not None:
                return iri
    return None


def triple_vars(pieces: Sequence[Piece]) -> list[str]:
    """Subject and object variables of the triple patterns, in order of appearance."""
    out: list[str] = []
    for p in pieces:
        if isinstance(p, Triple):
            out += [t.text for t in (*p.s, *p.o) if t.kind == "var"]
    return list(dict.fromkeys(out))



# --------------------------------------------------------------------------------------------
# Variants and structural edits
# --------------------------------------------------------------------------------------------


@dataclass
class Variant:
    """One executable adaptation of a template, with how it was made."""

    tpl: Template
    pieces: list[Piece]
    notes: list[str]
    substituted: list[Tok] = field(default_factory=list)  # tokens that now hold new entities
    typed: bool = False  # carries an answer-type constraint (a soft one: dropped when empty)

    @classmethod
    def of(cls, tpl: Template) -> tuple[Variant, dict[int, Tok]]:
        """A fresh copy of the template's pieces, and the memo (id of an old token -> its copy)
        that locates a slot's tokens in the copy."""
        pieces, memo = copy_pieces(tpl.pieces)
        return cls(tpl, pieces, []), memo

    def render(self) -> str:
        return render_pieces(self.pieces)

    def fork(self, note: str) -> Variant:
        pieces, memo = copy_pieces(self.pieces)
        subs = [memo.get(id(t), t) for t in self.substituted]
        return Variant(self.tpl, pieces, [*self.notes, note], subs, self.typed)

    def head(self) -> list[Tok]:
        """The tokens between the form keyword and the WHERE clause (the projection)."""
        start = form_index(self.pieces) or 0
        return [p for p in self.pieces[start + 1:head_end(self.pieces, start)] if isinstance(p, Tok)]

    @property
    def projection(self) -> list[str]:
        """The plain variables projected now (outside aggregates and expressions)."""
        depth, out = 0, []
        for tok in self.head():
            if tok.text == "(":
                depth += 1
            elif tok.text == ")":
                depth -= 1
            elif tok.kind == "var" and depth == 0:
                out.append(tok.text)
        return out

    @property
    def answer(self) -> str | None:
        """The answer variable: the first projected, else the template's (a counted one)."""
        plain = self.projection
        return plain[0] if plain else self.tpl.answer_var


def copy_pieces(pieces: Sequence[Piece]) -> tuple[list[Piece], dict[int, Tok]]:
    """A copy of ``pieces`` (new tokens and triples) and the memo: id of an old token -> its
    copy. (Hand-written: ``copy.deepcopy`` made adaptation several times slower.)"""
    memo: dict[int, Tok] = {}

    def tok(t: Tok) -> Tok:
        new = memo.get(id(t))
        if new is None:
            new = memo[id(t)] = Tok(t.kind, t.text, t.pre)
        return new

    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, Triple):
            out.append(Triple([tok(t) for t in p.s], [tok(t) for t in p.p], [tok(t) for t in p.o], p.pre))
        else:
            out.append(tok(p))
    return out, memo


def relax(variant: Variant, toks: list[Tok]) -> bool:
    """Drop the triple patterns holding ``toks``, then those left dangling (holding a variable
    only the dropped patterns connected). False when no triple pattern would be left."""
    ids = {id(t) for t in toks}
    dropped = [p for p in variant.pieces if isinstance(p, Triple) and any(id(t) in ids for t in (*p.s, *p.o))]
    freed: set[str] = set().union(*(t.vars() for t in dropped)) if dropped else set()
    pieces = [p for p in variant.pieces if not any(p is d for d in dropped)]
    pieces = _prune(pieces, freed, set(variant.tpl.projection) | set(variant.projection))
    if not any(isinstance(p, Triple) for p in pieces):
        return False
    variant.pieces = pieces
    return True


def _prune(pieces: list[Piece], freed: set[str], projected: set[str]) -> list[Piece]:
    """``pieces`` without the triple patterns left dangling: those holding a variable of
    ``freed`` that nothing else uses (not projected, not in FILTER/ORDER BY, no other triple)."""
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
            return pieces
        freed |= set().union(*(t.vars() for t in dangling))
        pieces = [p for p in pieces if not any(p is d for d in dangling)]


def reproject(variant: Variant, keep: Sequence[str], note: str) -> Variant | None:
    """The variant projecting exactly the plain variables ``keep`` (its head must hold plain
    variables only); triple patterns that only served a dropped variable go too."""
    head = variant.head()
    if not keep or any(t.text == "(" for t in head) or any(t.text == "*" for t in head):
        return None
    out = variant.fork(note)
    start = form_index(out.pieces) or 0
    end = head_end(out.pieces, start)
    distinct = [t for t in out.pieces[start + 1:end] if isinstance(t, Tok) and t.upper in ("DISTINCT", "REDUCED")]
    dropped = set(variant.projection) - set(keep)
    out.pieces[start + 1:end] = [*distinct, *(Tok("var", v) for v in keep)]
    out.pieces = _prune(out.pieces, dropped, set(keep))
    return out if any(isinstance(p, Triple) for p in out.pieces) else None


def add_patterns(variant: Variant, patterns: Sequence[str], note: str) -> Variant:
    """Triple patterns (``"?x <p> <o> ."``, three terms each) added at the end of the WHERE clause."""
    out = variant.fork(note)
    close = where_close(out.pieces)
    triples: list[Piece] = []
    for pattern in patterns:
        toks = [t for t in tokenize_sparql(pattern) if t.text != "."]
        if len(toks) != 3:
            raise TemplateError(f"not a single triple pattern: {pattern!r}")
        triples.append(Triple([toks[0]], [toks[1]], [toks[2]]))
    out.pieces[close:close] = triples
    return out


def add_column(variant: Variant, subject: str, predicate: str, var: str, note: str) -> Variant:
    """``OPTIONAL { subject <predicate> var }`` added, and ``var`` projected after the others."""
    out = variant.fork(note)
    close = where_close(out.pieces)
    out.pieces[close:close] = [Tok("word", "OPTIONAL", "\n  "), Tok("punct", "{"),
                               Triple([Tok("var", subject)], [Tok("iri", f"<{predicate}>")], [Tok("var", var)], " "),
                               Tok("punct", "}")]
    start = form_index(out.pieces) or 0
    end = head_end(out.pieces, start)
    out.pieces.insert(end, Tok("var", var))
    return out


def flip_order(variant: Variant) -> None:
    """The first ``ORDER BY`` key turned round: DESC becomes ASC and back."""
    in_order = False
    for piece in variant.pieces[where_close(variant.pieces) + 1:]:
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


_FLIPPED = {">": "<", "<": ">", ">=": "<=", "<=": ">="}


def flip_comparisons(variant: Variant) -> None:
    """Every comparison with a number turned round (``> 2020`` becomes ``< 2020``)."""
    for piece, nxt in zip(variant.pieces, variant.pieces[1:]):
        if isinstance(piece, Tok) and piece.text in _FLIPPED and isinstance(nxt, Tok) and nxt.kind == "number":
            piece.text = _FLIPPED[piece.text]
            variant.notes.append(f"comparison flipped to {piece.text}")


def to_ask(variant: Variant) -> Variant:
    """The variant as an ASK query over the same WHERE clause."""
    out = variant.fork("converted to ASK")
    start = form_index(out.pieces) or 0
    head = out.pieces[start]
    assert isinstance(head, Tok)
    head.text = "ASK"
    open_, close = where_open(out.pieces, start) or start, where_close(out.pieces)
    out.pieces = [*out.pieces[: start + 1], *out.pieces[open_: close + 1]]
    return out


def to_count(variant: Variant) -> Variant | None:
    """Count the answers: the query becomes a sub-query, so grouping and filters still hold."""
    var = variant.answer
    if var is None:
        return None
    out = variant.fork(f"answer counted: COUNT(DISTINCT {var})")
    start = form_index(out.pieces) or 0
    head = Tok("word", f"SELECT (COUNT(DISTINCT {var}) AS ?count) WHERE {{ {{", out.pieces[start].pre)
    out.pieces = [*out.pieces[:start], head, *out.pieces[start:], Tok("punct", "} }", "\n")]
    return out


def uncount(variant: Variant) -> Variant | None:
    """A count turned into the list it counts: ``SELECT (COUNT(DISTINCT ?x) AS ?n)`` becomes
    ``SELECT DISTINCT ?x`` (only for a plain count: no grouping)."""
    tpl = variant.tpl
    var = tpl.answer_var
    if var is None or variant.projection or not tpl.aggregate or "COUNT" not in tpl.features or "GROUP" in tpl.features:
        return None
    out = variant.fork(f"count turned into the list of {var}")
    start = form_index(out.pieces) or 0
    end = head_end(out.pieces, start)
    out.pieces[start + 1:end] = [Tok("word", f"DISTINCT {var}")]
    return out


def add_type(variant: Variant, var: str, cls: str, note: str) -> Variant:
    """``var a/rdfs:subClassOf* <cls>`` added first in the WHERE clause (instances are often
    typed with a subclass only)."""
    out = variant.fork(note)
    open_ = where_open(out.pieces, form_index(out.pieces) or 0) or 0
    path = [Tok("word", "a"), Tok("punct", "/"), Tok("iri", f"<{RDFS}subClassOf>"), Tok("punct", "*")]
    out.pieces.insert(open_ + 1, Triple([Tok("var", var)], path, [Tok("iri", f"<{cls}>")]))
    return out


def requote(token: str, value: str) -> str:
    """A string token with a new lexical value, keeping its quotes, language tag or datatype."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    suffix = ""
    for q in ('"""', "'''", '"', "'"):
        if token.startswith(q):
            end = token.rfind(q)
            suffix = token[end + len(q):] if end >= len(q) else ""
            break
    return f'"{escaped}"{suffix}'
