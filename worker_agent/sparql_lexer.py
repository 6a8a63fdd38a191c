"""SPARQL text tokens: the one lexer every module uses to look at query text without being fooled
by IRIs, strings and comments.

Modules that need to find keywords (read-only check, query form, features), prefixed names
(missing-prefix repair), or to rewrite a query token by token (rule enforcements) all read the text
through :func:`tokens`, so ``<http://x/delete>``, ``"select me"``, ``# DELETE later``, ``?insert``
and ``ex:order`` never count as keywords anywhere.

The lexer is total and lossless: every character of the input lands in exactly one token, so
``"".join(t.text for t in tokens(q)) == q`` for any text, parsable or not.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple, cast

__all__ = ["Kind", "Token", "code_only", "keywords", "significant", "tokens"]

Kind = Literal["ws", "comment", "string", "iri", "var", "lang", "number", "pname", "word", "op", "punct"]

# Alternatives are tried in order at each position, so a '#' or a keyword inside an IRI or a
# string is consumed with that IRI/string, never mistaken for a comment or a keyword. The string
# alternatives are split into groups so an unterminated string (the `open_*` groups) can be told
# from a closed one; their order matters: a closed long string first, then an unterminated long
# one (else `"""abc` would lex as the empty string `""`), then short strings.
_TOKEN_RE = re.compile(
    r"""
      (?P<ws>\s+)
    | (?P<comment>\#[^\n\r]*)
    | (?P<long_string>\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\"
                    |'''(?:[^'\\]|\\.|'(?!''))*''')
    | (?P<open_long>\"\"\"[\s\S]*|'''[\s\S]*)
    | (?P<short_string>"(?:[^"\\\n\r]|\\.)*"
                     |'(?:[^'\\\n\r]|\\.)*')
    | (?P<open_short>["'][^\n\r]*)
    | (?P<iri><[^<>"{}|^`\\\x00-\x20]*>)
    | (?P<var>[?$][\w\u00B7\u0300-\u036F\u203F-\u2040]+)
    | (?P<lang>@[A-Za-z]+(?:-[A-Za-z0-9]+)*)
    | (?P<number>\d+\.\d*[eE][+-]?\d+|\.?\d+[eE][+-]?\d+|\d*\.\d+|\d+)
    | (?P<pname>(?:[^\W\d][\w\-.]*)?:(?:[\w\-:%]|\\.|\.(?=[\w\-:%]))*)
    | (?P<word>[^\W\d]\w*)
    | (?P<op>&&|\|\||!=|<=|>=|\^\^)
    | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_GROUP_KIND = dict.fromkeys(("long_string", "open_long", "short_string", "open_short"), "string")
_LAYOUT: frozenset[str] = frozenset({"ws", "comment"})
# Tokens whose text may look like a keyword without being one.
_OPAQUE: frozenset[str] = frozenset({"comment", "string", "iri", "var", "pname", "lang"})


class Token(NamedTuple):
    """One token: its kind, its exact text and its span ``sparql[start:end] == text``.

    Kinds: ``ws`` (whitespace), ``comment`` (``# ...`` to the end of the line), ``string`` (any
    quoted literal, without its language tag or datatype), ``iri`` (``<...>``), ``var`` (``?x``,
    ``$x``), ``lang`` (``@en-GB``), ``number``, ``pname`` (prefixed name or blank-node label:
    ``ex:a.b``, ``:x``, ``_:b0``, ``ex:caf%C3%A9``), ``word`` (keyword, function name, ``a``,
    ``true``), ``op`` (``&& || != <= >= ^^``) and ``punct`` (any other single character).
    """

    kind: Kind
    text: str
    start: int
    end: int


def tokens(sparql: str, *, open_strings: bool = False) -> list[Token]:
    """All tokens of ``sparql``, whitespace and comments included, in order.

    ``open_strings`` decides what an unterminated string is. False (the default, the reading of a
    strict SPARQL lexer): its quote is a lone ``punct`` token (an unterminated ``\"\"\"`` starts
    with the empty string ``""``) and the text after it is lexed as usual, so a keyword after a
    stray quote still counts. True: the string runs to the end of its line (to the end of the text for ``\"\"\"`` or
    ``'''``), which is what a rewriter wants so it never edits inside a literal the author forgot
    to close.
    """
    out: list[Token] = []
    pos, end = 0, len(sparql)
    while pos < end:
        match = _TOKEN_RE.match(sparql, pos)
        assert match is not None  # the last alternative matches any character
        group, text = match.lastgroup or "punct", match.group()
        if group == "open_long" and not open_strings:
            # What a lexer without the unterminated alternatives finds here: the empty string
            # `""` at the start of `"""...`, else (below) the quote alone.
            text = text[:2]
        elif group == "open_short" and not open_strings:
            group, text = "punct", text[0]
        kind = cast(Kind, _GROUP_KIND.get(group, group))
        out.append(Token(kind, text, pos, pos + len(text)))
        pos += len(text)
    return out


def significant(sparql: str, *, open_strings: bool = False) -> list[Token]:
    """The tokens of ``sparql`` without whitespace and comments."""
    return [t for t in tokens(sparql, open_strings=open_strings) if t.kind not in _LAYOUT]


def keywords(sparql: str) -> list[str]:
    """Bare words of ``sparql``, upper-cased, in order: keywords, function names, ``A``, ``TRUE``.

    Words inside IRIs, strings and comments, variables (``?delete``) and prefixed names
    (``ex:insert``) are not words.
    """
    return [t.text.upper() for t in tokens(sparql) if t.kind == "word"]


def code_only(sparql: str, fill: str = " ") -> str:
    """``sparql`` reduced to its bare words, numbers and punctuation: every string, IRI, comment,
    variable, prefixed name and language tag is replaced by ``fill``.

    For regex scans over keyword sequences (``GROUP\\s+BY``, ``COUNT\\s*\\(``) that must not
    match inside a literal, an IRI, ``?order`` or ``ex:a.LIMIT``.
    """
    return "".join(fill if t.kind in _OPAQUE else t.text for t in tokens(sparql))
