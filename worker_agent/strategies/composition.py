"""Composition: building a query from the question's own entities and values when no training
template fits.

A composed query does not start from a gold query. It starts from the question's *anchors* (the
best entity of every entity mention, and quoted strings or capitalized words the KG holds as a
value: "... vendors in Spain" -> ``"Spain"``) and joins each of them to one answer variable
``?result`` by a predicate the ontology says the anchor has: the one whose name the question's
other words support best, or the only one reaching the class the question asks for ("Which
*teams* ...", "Who ..."); when no predicate reaches that class directly, a two-predicate path
through a class in between. The answer is typed with the asked-for class when there is one.

A *join* is *sure* when the question's words name its predicate (or the anchor is a value the
predicate holds, or it is the only way to the asked-for kind). A composed query is sure when
every anchor has a sure join and the question has no number it would ignore; the strategy tries
sure ones before adaptations that leave part of the question out, the others after them. Joins also serve adaptation: an entity or value a template leaves out is
joined to its answer the same way (``OfflineStrategy._constrain``).

:class:`Composition` is a mixin of :class:`~worker_agent.strategies.offline.OfflineStrategy`: it
shares the strategy's cached ontology lookups and predicate-name scores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from worker_agent.retrieval import normalize_text
from worker_agent.strategies import Example
from worker_agent.strategies.template import (
    RDF_TYPE,
    RDFS,
    XSD,
    TemplateError,
    Triple,
    Variant,
    parse_template,
)
from worker_agent.strategies.wording import Mention, find_quoted
from worker_agent.tools import STOPWORDS, local_name

if TYPE_CHECKING:
    from worker_agent.strategies.offline import _Question

__all__ = ["Anchor", "Composition", "Join"]


@dataclass
class Anchor:
    """Where a composed query starts: an entity (``<iri>``) or a literal, and where the
    question names it; ``values``: the predicates holding the literal."""

    start: int
    end: int
    term: str
    values: list[tuple[str, int]] | None
    terms: frozenset[str] = frozenset()  # the term and its alternatives (other candidates)

    def used_in(self, query: str) -> bool:
        return any(t in query for t in self.terms | {self.term})


@dataclass
class Join:
    """Triple patterns joining an anchor to ``?result``, scored; ``sure``: the question's words
    name the predicate (or the anchor is a value the predicate holds)."""

    score: float
    sure: bool
    triples: list[str]
    note: str


_PROPER_RE = re.compile(r"\b[A-Z][\w\-]*(?:\s+[A-Z][\w\-]*)*")  # capitalized words: a name or a value


class Composition:
    """The composition half of the offline strategy (see the module doc), mixed into it."""

    if TYPE_CHECKING:  # what the strategy provides (OfflineStrategy; cached KG lookups)
        _labels: set[str]

        def _ontology_of(self, iri: str) -> Any: ...
        def _name_score(self, iri: str, words: Iterable[str]) -> float: ...
        def _value_predicates(self, literal: str) -> list[tuple[str, int]]: ...
        def _fit(self, pred: str, direction: str, asked: str | None, who: bool) -> float: ...
        def _free_numbers(self, q: _Question) -> list[Mention]: ...

    def _composed(self, q: _Question) -> list[tuple[bool, Variant]]:
        """Queries composed from the question's own mentions, for questions no training template
        fits: each linked entity or literal value is joined to the answer variable by the
        predicate (or two-predicate path) whose name the question's other words support best and
        whose far end holds what the question asks for ("Which teams ...", "Who ...").
        Best first, each with whether every join is supported by the wording (or a value)."""
        if q.kind == "boolean":
            return []
        asked = q.asked
        anchors = q.anchors
        if not anchors and asked is None:
            return []
        taken = [(a.start, a.end) for a in anchors] + [(l.start, l.end) for l in q.links
                                                      if l.kind_candidates("class") and asked in
                                                      {c.iri for c in l.kind_candidates("class")}]
        words = [w for m in re.finditer(r"[^\W_]+", q.text)
                 if not any(a <= m.start() < b for a, b in taken)
                 and (w := normalize_text(m.group())) and w not in STOPWORDS]
        joins = [self._joins(a, asked, words, q.who)[:3] for a in anchors]
        joins = [j for j in joins if j]
        if anchors and not joins:
            return []
        combos = [[j[0] for j in joins]]
        if joins:
            combos += [[alt, *(j[0] for j in joins[1:])] for alt in joins[0][1:]]
        out: list[tuple[bool, Variant]] = []
        for combo in combos:
            patterns = [t for join in combo for t in join.triples]
            if asked is not None:
                patterns.insert(0, f"?result a/<{RDFS}subClassOf>* <{asked}> .")
            sparql = "SELECT DISTINCT ?result WHERE {\n  " + "\n  ".join(patterns) + "\n}\n"
            try:
                tpl = parse_template(Example("composed", q.text, sparql))
            except TemplateError:
                continue
            variant, _ = Variant.of(tpl)
            variant.notes = [j.note for j in combo] or [f"instances of {local_name(asked or '')}"]
            anchored = {a.term for a in anchors}
            variant.substituted = [t for p in variant.pieces if isinstance(p, Triple)
                                   for t in (*p.s, *p.o) if t.text in anchored]
            # Sure only when every anchor is joined by a supported predicate, and the question
            # has no numbers the composition would ignore ("... more than 5 ...").
            sure = bool(combo) and len(combo) == len(anchors) and all(j.sure for j in combo) \
                and not self._free_numbers(q)
            out.append((sure, variant))
        q.trace.step("composed", asked=asked, anchors=[a.term for a in anchors],
                     queries=[v.render() for _, v in out], sure=[sure for sure, _ in out])
        return out

    def _anchors(self, q: _Question) -> list[Anchor]:
        """What a composed query starts from: the best entity of every entity mention, quoted
        strings, and capitalized words the linker left alone that the KG holds as a value
        ("... vendors in Spain" -> "Spain")."""
        out = [Anchor(l.start, l.end, f"<{c[0].iri}>", None, frozenset(f"<{x.iri}>" for x in c)) for l in q.links
               if (c := l.kind_candidates("entity")) and c[0] is l.candidates[0]]
        spans = [(l.start, l.end) for l in q.links]
        values = [(m.start, m.end, m.value) for m in find_quoted(q.text)]
        values += [(m.start(), m.end(), m.group()) for m in _PROPER_RE.finditer(q.text) if m.start() > 0]
        for start, end, value in values:
            if any(a < end and start < b for a, b in spans):
                continue
            literal = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
            preds = self._value_predicates(literal)
            if preds:
                out.append(Anchor(start, end, literal, preds))
                spans.append((start, end))
        return sorted(out, key=lambda a: a.start)

    def _joins(self, anchor: Anchor, asked: str | None, words: Sequence[str], who: bool) -> list[Join]:
        """Ways to join ``anchor`` to ``?result``, best first."""
        found: list[Join] = []
        if anchor.values is not None:  # a literal: ?result <p> "value"
            for pred, _ in anchor.values[:5]:
                fit = self._fit(pred, "in", asked, who)
                name = self._name_score(pred, words)
                found.append(Join(0.5 + _signal(name) + 0.5 * fit, fit >= 0, [f"?result <{pred}> {anchor.term} ."],
                                   f"{local_name(pred)} = {anchor.term}"))
            return sorted(found, key=lambda j: -j.score)
        iri = anchor.term[1:-1]
        info = getattr(self._ontology_of(iri), "predicates", [])
        preds = [(p.iri, p.direction) for p in info if p.iri != RDF_TYPE and p.iri not in self._labels]
        usage = {(p.iri, p.direction): p.count for p in info}
        top = max(usage.values(), default=1) or 1
        fits = {(pred, direction): self._fit(pred, direction, asked, who) for pred, direction in preds}
        only = [pd for pd, fit in fits.items() if fit > 0]
        for pred, direction in preds:
            fit = fits[(pred, direction)]
            name = self._name_score(pred, words)
            triple = f"{anchor.term} <{pred}> ?result ." if direction == "out" else f"?result <{pred}> {anchor.term} ."
            # Sure: the question names the predicate, or it is the only one reaching the asked kind.
            sure = (name >= 80 and fit >= 0) or only == [(pred, direction)]
            # Usage breaks ties: the predicate most used with this entity is its usual relation.
            score = _signal(name) + 0.5 * fit + 0.05 * usage[(pred, direction)] / top
            found.append(Join(score, sure, [triple], f"{local_name(pred)} of {local_name(iri)}"))
        if asked is not None and not only:  # no predicate reaches the asked kind directly
            found += self._two_hops(anchor, preds, asked, words)
        return sorted(found, key=lambda j: -j.score)

    def _two_hops(self, anchor: Anchor, preds: Sequence[tuple[str, str]], asked: str,
                  words: Sequence[str]) -> list[Join]:
        """``anchor -p1- ?x -p2- ?result``: through a class the anchor's predicate reaches and
        that has a predicate reaching the asked class ("vendors of valves": valve <- category -
        ?item - vendor -> ?result)."""
        out: list[Join] = []
        first = sorted(preds, key=lambda pd: -self._name_score(pd[0], words))[:4]
        for pred, direction in first:
            info = self._ontology_of(pred)
            middle = [c.iri for c in getattr(info, "range" if direction == "out" else "domain", [])
                      if not c.iri.startswith(XSD)][:2]
            hop1 = f"{anchor.term} <{pred}> ?x ." if direction == "out" else f"?x <{pred}> {anchor.term} ."
            for cls in middle:
                for p2 in getattr(self._ontology_of(cls), "predicates", []):
                    if p2.iri in (RDF_TYPE, pred) or p2.iri in self._labels:
                        continue
                    back = "out" if p2.direction == "out" else "in"
                    if self._fit(p2.iri, back, asked, False) <= 0:
                        continue
                    hop2 = f"?x <{p2.iri}> ?result ." if back == "out" else f"?result <{p2.iri}> ?x ."
                    name = max(self._name_score(pred, words), self._name_score(p2.iri, words))
                    out.append(Join(0.2 + _signal(name), name >= 80, [hop1, hop2],
                                     f"{local_name(pred)}/{local_name(p2.iri)} of {local_name(anchor.term[1:-1])}"))
        if len(out) == 1:  # the only path to the asked kind
            out[0].sure = True
        return out


def _signal(name_score: float) -> float:
    """A name score as evidence (0-1): below 60 two words merely share letters."""
    return name_score / 100 if name_score >= 60 else 0.0
