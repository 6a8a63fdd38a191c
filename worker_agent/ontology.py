"""Ontology lookup: what the KG says about one IRI, and the KG's classes and predicates.

``describe_iri`` decides whether an IRI is an entity, a class or a property (by how triples use
it) and answers accordingly: an entity's types and outgoing/incoming predicates with counts and
example values; a class's instance count, sub/superclasses and the predicates its instances
use; a property's triple count, declared and observed domain and range, and example pairs. The
answer is an :class:`OntologyInfo`; every sub-query that fails (a timeout on a large endpoint)
only adds a note, so a partial answer still comes back. ``class_counts`` and
``predicate_counts`` list the whole schema with usage counts.

Data is read only through ``KnowledgeGraph.query``; IRIs are labelled by a
:class:`~worker_agent.linking.Labeler`.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple

from worker_agent.kg import KGError, KnowledgeGraph, Term
from worker_agent.linking import (
    OWL,
    RDF,
    RDF_TYPE,
    RDFS,
    SKOS,
    WHOLE_RESULT_ROWS,
    XSD,
    Labeler,
    compact_iri,
    iri_values,
    label_rank,
    local_name,
)

__all__ = [
    "ExampleValue",
    "OntologyInfo",
    "PredicateInfo",
    "SchemaItem",
    "class_counts",
    "describe_iri",
    "predicate_counts",
    "schema_items",
]

_COMMENT_PREDICATES = (
    RDFS + "comment",
    SKOS + "definition",
    "http://purl.org/dc/terms/description",
    "http://schema.org/description",
)
_CLASS_TYPES = (OWL + "Class", RDFS + "Class")
_PROPERTY_TYPES = (
    RDF + "Property",
    OWL + "ObjectProperty",
    OWL + "DatatypeProperty",
    OWL + "AnnotationProperty",
)
_NUMERIC_TYPES = frozenset(
    XSD + t for t in ("integer", "int", "long", "short", "decimal", "double", "float",
                      "nonNegativeInteger", "positiveInteger", "boolean")
)


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class ExampleValue:
    """An RDF term shown as an example, with its label when it is a labelled IRI."""

    value: str
    kind: Literal["iri", "literal", "bnode"] = "iri"
    label: str | None = None
    datatype: str | None = None
    lang: str | None = None

    @classmethod
    def of(cls, term: Term, label: str | None = None) -> ExampleValue:
        return cls(term.value, term.kind, label, term.datatype, term.lang)

    def text(self) -> str:
        """Compact SPARQL-like rendering: ``<iri> (Label)``, ``"text"@en``, ``42``."""
        if self.kind == "iri":
            shown = compact_iri(self.value)
            return f"{shown} ({self.label})" if self.label else shown
        if self.kind == "bnode":
            return f"_:{self.value}"
        if self.datatype in _NUMERIC_TYPES:
            return self.value
        shown = json.dumps(self.value, ensure_ascii=False)
        if self.lang:
            return f"{shown}@{self.lang}"
        if self.datatype:
            return f"{shown}^^{compact_iri(self.datatype)}"
        return shown

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class PredicateInfo:
    """A predicate around an entity or a class's instances, with its triple count."""

    iri: str
    label: str | None
    direction: Literal["out", "in"]
    count: int
    examples: list[ExampleValue] = field(default_factory=list)
    same_as: list[str] = field(default_factory=list)  # same local name, other namespaces

    def to_dict(self) -> dict[str, Any]:
        return {"iri": self.iri, "label": self.label, "direction": self.direction,
                "count": self.count, "examples": [e.to_dict() for e in self.examples],
                "same_as": list(self.same_as)}

    def compact(self) -> dict[str, Any]:
        out: dict[str, Any] = {"p": compact_iri(self.iri)}
        if self.label:
            out["label"] = self.label
        out["n"] = self.count
        if self.examples:
            out["e.g."] = [e.text() for e in self.examples]
        if self.same_as:
            out["same_as"] = [compact_iri(i) for i in self.same_as]
        return out


class SchemaItem(NamedTuple):
    """A class, predicate or type: IRI, label, count (None when not counted)."""

    iri: str
    label: str | None
    count: int | None  # type: ignore[assignment]  # shadows tuple.count on purpose: reads naturally


@dataclass
class OntologyInfo:
    """What the KG says about one IRI, shaped by what the IRI is (entity, class, property)."""

    iri: str
    kind: Literal["entity", "class", "property", "unknown"]
    label: str | None = None
    comment: str | None = None
    types: list[SchemaItem] = field(default_factory=list)
    predicates: list[PredicateInfo] = field(default_factory=list)
    instance_count: int | None = None  # class
    subclasses: list[SchemaItem] = field(default_factory=list)
    superclasses: list[SchemaItem] = field(default_factory=list)
    count: int | None = None  # property: triples using it
    domain: list[SchemaItem] = field(default_factory=list)  # property: declared, then observed
    range: list[SchemaItem] = field(default_factory=list)
    same_as: list[str] = field(default_factory=list)  # property: same local name elsewhere
    examples: list[ExampleValue] = field(default_factory=list)  # class: sample instances
    example_pairs: list[tuple[ExampleValue, ExampleValue]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # partial results (timeouts) and hints

    def predicate(self, iri: str, direction: str = "out") -> PredicateInfo | None:
        return next((p for p in self.predicates if p.iri == iri and p.direction == direction), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "iri": self.iri, "kind": self.kind, "label": self.label, "comment": self.comment,
            "types": [list(t) for t in self.types],
            "predicates": [p.to_dict() for p in self.predicates],
            "instance_count": self.instance_count,
            "subclasses": [list(t) for t in self.subclasses],
            "superclasses": [list(t) for t in self.superclasses],
            "count": self.count,
            "domain": [list(t) for t in self.domain], "range": [list(t) for t in self.range],
            "same_as": list(self.same_as),
            "examples": [e.to_dict() for e in self.examples],
            "example_pairs": [[s.to_dict(), o.to_dict()] for s, o in self.example_pairs],
            "notes": list(self.notes),
        }

    def compact(self, max_predicates: int = 40) -> dict[str, Any]:
        def items(xs: list[SchemaItem]) -> list[str]:
            return [_item_text(x) for x in xs]

        out: dict[str, Any] = {"iri": self.iri, "kind": self.kind}
        for key, value in (("label", self.label), ("comment", self.comment)):
            if value:
                out[key] = value[:300]
        if self.types:
            out["types"] = items(self.types)
        if self.instance_count is not None:
            out["instances"] = self.instance_count
        if self.count is not None:
            out["triples"] = self.count
        for key, xs in (("superclasses", self.superclasses), ("subclasses", self.subclasses),
                        ("domain", self.domain), ("range", self.range)):
            if xs:
                out[key] = items(xs)
        if self.same_as:
            out["same_as"] = [compact_iri(i) for i in self.same_as]
        for direction in ("out", "in"):
            preds = [p.compact() for p in self.predicates if p.direction == direction]
            if preds:
                out[direction] = preds[:max_predicates]
        if self.examples:
            out["examples"] = [e.text() for e in self.examples]
        if self.example_pairs:
            out["examples"] = [f"{s.text()} -> {o.text()}" for s, o in self.example_pairs]
        if self.notes:
            out["notes"] = self.notes
        return out


def _item_text(item: SchemaItem) -> str:
    text = compact_iri(item.iri)
    if item.label:
        text += f" ({item.label})"
    if item.count is not None:
        text += f" x{item.count}"
    return text


# --------------------------------------------------------------------------------------------
# The whole schema
# --------------------------------------------------------------------------------------------


def schema_items(labeler: Labeler, counts: Mapping[str, int | None]) -> list[SchemaItem]:
    """``counts`` (IRI -> count or None) as labelled schema items, in the given order."""
    labels = labeler.labels(counts)
    return [SchemaItem(i, labels.get(i), n) for i, n in counts.items()]


def class_counts(kg: KnowledgeGraph, timeout: float | None) -> dict[str, int]:
    """Every class -> its instance count; declared classes without instances count 0."""
    counts: dict[str, int] = {}
    for c, n in _all_rows(kg, "SELECT ?c (COUNT(?s) AS ?n) WHERE { ?s a ?c FILTER(isIRI(?c)) } "
                              "GROUP BY ?c ORDER BY DESC(?n)", timeout):
        if c and n:
            counts[c.value] = int(n.value)
    for (c,) in _all_rows(kg, f"SELECT DISTINCT ?c WHERE {{ VALUES ?k {{ {iri_values(_CLASS_TYPES)} }} "
                              "?c a ?k FILTER(isIRI(?c)) }", timeout):
        if c:
            counts.setdefault(c.value, 0)
    return counts


def predicate_counts(kg: KnowledgeGraph, timeout: float | None) -> dict[str, int]:
    """Every predicate -> its triple count."""
    return {p.value: int(n.value) for p, n in _all_rows(
        kg, "SELECT ?p (COUNT(*) AS ?n) WHERE { ?s ?p ?o } GROUP BY ?p ORDER BY DESC(?n)", timeout)
        if p and n}


def _all_rows(kg: KnowledgeGraph, sparql: str, timeout: float | None) -> list[tuple[Term | None, ...]]:
    return kg.query(sparql, timeout=timeout, max_rows=WHOLE_RESULT_ROWS).rows


# --------------------------------------------------------------------------------------------
# One IRI
# --------------------------------------------------------------------------------------------


def describe_iri(
    kg: KnowledgeGraph,
    iri: str,
    *,
    labeler: Labeler,
    timeout: float,
    examples: int = 3,
    max_predicates: int = 40,
    group_namespaces: bool = False,
    all_predicates: Callable[[], list[SchemaItem]] | None = None,
) -> OntologyInfo:
    """Describe the entity, class or property ``iri`` (a full IRI); partial results carry notes.

    ``examples`` values are shown per predicate, at most ``max_predicates`` predicates per
    direction are counted, each query gets ``timeout`` seconds. With ``group_namespaces``
    predicates sharing a local name across namespaces are merged, and a property lists its
    namesakes from ``all_predicates`` (the KG's predicate list, usually cached by the caller).
    """
    return _OntologyBrowser(kg, iri, labeler, timeout, examples, max_predicates,
                            group_namespaces, all_predicates).describe()


@dataclass
class _OntologyBrowser:
    """Answers one ``describe_iri`` call; each sub-query failing only adds a note."""

    kg: KnowledgeGraph
    iri: str
    labeler: Labeler
    timeout: float
    n: int  # example values per predicate
    limit: int  # predicates counted per direction
    group_namespaces: bool
    all_predicates: Callable[[], list[SchemaItem]] | None

    def __post_init__(self) -> None:
        self.ref = f"<{self.iri}>"
        self.info = OntologyInfo(iri=self.iri, kind="unknown")

    def _select(self, what: str, sparql: str, max_rows: int = 10_000) -> list[tuple[Term | None, ...]]:
        try:
            return self.kg.query(sparql, timeout=self.timeout, max_rows=max_rows).rows
        except KGError as exc:
            self.info.notes.append(f"{what} unavailable: {exc}")
            return []

    def _number(self, what: str, sparql: str) -> int | None:
        """The single number a COUNT query returns; None when it failed."""
        rows = self._select(what, sparql)
        return int(rows[0][0].value) if rows and rows[0][0] is not None else None

    def _kind(self) -> Literal["entity", "class", "property", "unknown"]:
        r = self.ref
        rows = self._select("kind", f"""SELECT ?kind WHERE {{
          {{ SELECT ("property" AS ?kind) WHERE {{ ?s {r} ?o }} LIMIT 1 }}
          UNION {{ SELECT ("property" AS ?kind) WHERE {{ {r} a ?t VALUES ?t {{ {iri_values(_PROPERTY_TYPES)} }} }} LIMIT 1 }}
          UNION {{ SELECT ("class" AS ?kind) WHERE {{ ?s a {r} }} LIMIT 1 }}
          UNION {{ SELECT ("class" AS ?kind) WHERE {{ {r} a ?t VALUES ?t {{ {iri_values(_CLASS_TYPES)} }} }} LIMIT 1 }}
          UNION {{ SELECT ("entity" AS ?kind) WHERE {{ {r} ?p ?o }} LIMIT 1 }}
          UNION {{ SELECT ("entity" AS ?kind) WHERE {{ ?s ?p {r} }} LIMIT 1 }}
        }}""")
        kinds = {row[0].value for row in rows if row[0] is not None}
        for kind in ("property", "class", "entity"):
            if kind in kinds:
                return kind  # type: ignore[return-value]
        return "unknown"

    def describe(self) -> OntologyInfo:
        info = self.info
        info.kind = self._kind()
        if info.kind == "unknown":
            if not info.notes:
                info.notes.append("the KG has no triple mentioning this IRI; check it with surface_forms")
            return info
        self._label_and_comment()
        types = [t.value for (t,) in self._select("types", f"SELECT DISTINCT ?t WHERE {{ {self.ref} a ?t }}")
                 if t is not None and t.kind == "iri"]
        info.types = schema_items(self.labeler, {t: None for t in types})
        if info.kind == "entity":
            self._entity()
        elif info.kind == "class":
            self._class()
        else:
            self._property()
        if self.group_namespaces:
            info.predicates = _group_namespaces(info.predicates, self.n)
        self._label_examples()
        return info

    def _label_and_comment(self) -> None:
        self.info.label = self.labeler.label(self.iri)
        rows = self._select("comment", f"SELECT ?p ?c WHERE {{ VALUES ?p {{ {iri_values(_COMMENT_PREDICATES)} }} "
                                       f"{self.ref} ?p ?c FILTER(isLiteral(?c)) }}")
        ranked = sorted((label_rank(p.value, c.lang, _COMMENT_PREDICATES, self.labeler.langs), c.value)
                        for p, c in rows if p and c)
        if ranked:
            self.info.comment = ranked[0][1]

    def _predicate_counts(self, what: str, pattern: str, direction: Literal["out", "in"]) -> list[PredicateInfo]:
        rows = self._select(what, f"SELECT ?p (COUNT(*) AS ?n) WHERE {{ {pattern} }} "
                                  f"GROUP BY ?p ORDER BY DESC(?n) LIMIT {self.limit}")
        return [PredicateInfo(p.value, None, direction, int(n.value)) for p, n in rows if p and n]

    def _entity(self) -> None:
        r = self.ref
        out = self._predicate_counts("outgoing predicates", f"{r} ?p ?o FILTER(?p != <{RDF_TYPE}>)", "out")
        inc = self._predicate_counts("incoming predicates", f"?s ?p {r}", "in")
        self._sample_examples(out, f"SELECT ?p ?v WHERE {{ {r} ?p ?v }} LIMIT 2000")
        self._sample_examples(inc, f"SELECT ?p ?v WHERE {{ ?v ?p {r} }} LIMIT 2000")
        self._fill_examples(out, lambda p: f"SELECT DISTINCT ?v WHERE {{ {r} <{p}> ?v }} LIMIT {self.n}")
        self._fill_examples(inc, lambda p: f"SELECT DISTINCT ?v WHERE {{ ?v <{p}> {r} }} LIMIT {self.n}")
        self.info.predicates = out + inc

    def _class(self) -> None:
        r, info = self.ref, self.info
        info.instance_count = self._number("instance count", f"SELECT (COUNT(DISTINCT ?s) AS ?n) WHERE {{ ?s a {r} }}")
        subs = self._select("subclasses", f"SELECT DISTINCT ?c WHERE {{ ?c <{RDFS}subClassOf> {r} FILTER(?c != {r}) }} LIMIT 100")
        sups = self._select("superclasses", f"SELECT DISTINCT ?c WHERE {{ {r} <{RDFS}subClassOf> ?c FILTER(?c != {r}) }} LIMIT 100")
        info.subclasses = schema_items(self.labeler, {c.value: None for (c,) in subs if c is not None})
        info.superclasses = schema_items(self.labeler, {c.value: None for (c,) in sups if c is not None})
        out = self._predicate_counts("instance predicates", f"?s a {r} . ?s ?p ?o FILTER(?p != <{RDF_TYPE}>)", "out")
        inc = self._predicate_counts("incoming predicates", f"?s a {r} . ?x ?p ?s", "in")
        self._fill_examples(out, lambda p: f"SELECT DISTINCT ?v WHERE {{ ?s a {r} ; <{p}> ?v }} LIMIT {self.n}")
        self._fill_examples(inc, lambda p: f"SELECT DISTINCT ?v WHERE {{ ?s a {r} . ?v <{p}> ?s }} LIMIT {self.n}")
        info.predicates = out + inc
        info.examples = [ExampleValue.of(s) for (s,) in self._select(
            "instances", f"SELECT ?s WHERE {{ ?s a {r} }} LIMIT {self.n}") if s is not None]

    def _property(self) -> None:
        r, info = self.ref, self.info
        info.count = self._number("triple count", f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s {r} ?o }}")
        domain: dict[str, int | None] = {}
        range_: dict[str, int | None] = {}
        for target, which in ((domain, "domain"), (range_, "range")):
            for (d,) in self._select(f"declared {which}",
                                     f"SELECT ?d WHERE {{ {r} <{RDFS}{which}> ?d FILTER(isIRI(?d)) }}"):
                if d:
                    target[d.value] = None
        observed = (
            (domain, f"SELECT ?t (COUNT(*) AS ?n) WHERE {{ ?s {r} ?o . ?s a ?t }} GROUP BY ?t ORDER BY DESC(?n) LIMIT 5"),
            (range_, f"SELECT ?t (COUNT(*) AS ?n) WHERE {{ ?s {r} ?o . ?o a ?t }} GROUP BY ?t ORDER BY DESC(?n) LIMIT 5"),
            (range_, (f"SELECT ?t (COUNT(*) AS ?n) WHERE {{ ?s {r} ?o FILTER(isLiteral(?o)) "
                      f"BIND(DATATYPE(?o) AS ?t) }} GROUP BY ?t ORDER BY DESC(?n) LIMIT 5")),
        )
        for target, query in observed:
            for t, n in self._select("observed domain/range", query):
                if t and n:
                    target[t.value] = int(n.value)
        info.domain = schema_items(self.labeler, domain)
        info.range = schema_items(self.labeler, range_)
        info.example_pairs = [(ExampleValue.of(s), ExampleValue.of(o)) for s, o in self._select(
            "examples", f"SELECT ?s ?o WHERE {{ ?s {r} ?o }} LIMIT {self.n}") if s and o]
        if self.group_namespaces and self.all_predicates is not None:
            name = local_name(self.iri).casefold()
            try:
                info.same_as = [p.iri for p in self.all_predicates()
                                if p.iri != self.iri and local_name(p.iri).casefold() == name]
            except KGError as exc:
                info.notes.append(f"namespace grouping unavailable: {exc}")

    def _sample_examples(self, preds: list[PredicateInfo], sparql: str) -> None:
        by_iri = {p.iri: p for p in preds}
        for p, v in self._select("examples", sparql, max_rows=2000):
            info = by_iri.get(p.value) if p else None
            if info is not None and v is not None and len(info.examples) < self.n:
                info.examples.append(ExampleValue.of(v))

    def _fill_examples(self, preds: list[PredicateInfo], query: Callable[[str], str]) -> None:
        """Per-predicate example queries for predicates still without examples, within budget."""
        deadline = time.monotonic() + max(self.timeout, 1.0)
        for info in preds:
            if info.examples:
                continue
            if time.monotonic() > deadline:
                self.info.notes.append("some examples omitted (time budget)")
                return
            info.examples = [ExampleValue.of(v) for (v,) in self._select("examples", query(info.iri))
                             if v is not None]

    def _label_examples(self) -> None:
        info = self.info
        values = [e for p in info.predicates for e in p.examples] + info.examples
        values += [v for pair in info.example_pairs for v in pair]
        iris = [e.value for e in values if e.kind == "iri"] + [p.iri for p in info.predicates]
        labels = self.labeler.labels(iris)
        for e in values:
            if e.kind == "iri":
                e.label = labels.get(e.value)
        for p in info.predicates:
            p.label = labels.get(p.iri)


def _group_namespaces(preds: list[PredicateInfo], n: int) -> list[PredicateInfo]:
    """Merge predicates with the same direction and local name from different namespaces
    (dbo:birthPlace + dbp:birthPlace): the most used one leads, counts add up."""
    groups: dict[tuple[str, str], list[PredicateInfo]] = defaultdict(list)
    for p in preds:
        groups[(p.direction, local_name(p.iri).casefold())].append(p)
    merged: list[PredicateInfo] = []
    for members in groups.values():
        members.sort(key=lambda p: -p.count)
        lead = members[0]
        examples = list(lead.examples)
        for other in members[1:]:
            examples += [e for e in other.examples if e not in examples]
        merged.append(PredicateInfo(lead.iri, lead.label, lead.direction,
                                    sum(p.count for p in members), examples[:n],
                                    [p.iri for p in members[1:]]))
    merged.sort(key=lambda p: (p.direction != "out", -p.count))
    return merged
