"""The worker agent's three tools: surface-form lookup, ontology lookup and test-SPARQL.

Every tool is a plain Python method of :class:`Tools` (deterministic strategies call them
directly) and also an LLM tool: :meth:`Tools.schemas` lists JSON tool schemas and
:meth:`Tools.call` dispatches a tool call to compact text, turning every failure into an error
string.

This module is the facade and holds test-SPARQL (:class:`Preview`). The lookups live in their
own modules and their public names are re-exported here: entity linking (surface forms ->
IRIs: :class:`LabelIndex`, :class:`SparqlLookup`, :class:`ServiceLookup`, :class:`Candidate`,
:class:`Span`, text normalization) in :mod:`worker_agent.linking`, ontology lookup
(:class:`OntologyInfo`, :class:`PredicateInfo`, :class:`ExampleValue`, :class:`SchemaItem`) in
:mod:`worker_agent.ontology`.

Data is read only through ``KnowledgeGraph.query`` so the tools work on embedded stores and
remote endpoints alike.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from worker_agent.kg import (
    KNOWN_PREFIXES,
    KGError,
    KnowledgeGraph,
    OxigraphKG,
    QuerySyntaxError,
    QueryTimeout,
    UnsupportedFunction,
    UpdateNotAllowed,
    add_missing_prefixes,
    check_read_only,
)
from worker_agent.linking import (
    DEFAULT_LABEL_PREDICATES,
    IRI_RE,
    OWL,
    RDF,
    RDF_TYPE,
    RDFS,
    RDFS_LABEL,
    SKOS,
    STOPWORDS,
    TITLES,
    XSD,
    Candidate,
    Labeler,
    LabelIndex,
    ServiceLookup,
    Span,
    SparqlLookup,
    ToolError,
    compact_iri,
    fold_accents,
    local_name,
    local_name_surface,
    ordered_label_predicates,
    scan_spans,
    tokenize,
)
from worker_agent.ontology import (
    ExampleValue,
    OntologyInfo,
    PredicateInfo,
    SchemaItem,
    class_counts,
    describe_iri,
    predicate_counts,
    schema_items,
)

__all__ = [
    "ToolError",
    "Candidate",
    "Span",
    "ExampleValue",
    "PredicateInfo",
    "SchemaItem",
    "OntologyInfo",
    "Preview",
    "ErrorKind",
    "LabelIndex",
    "SparqlLookup",
    "ServiceLookup",
    "Tools",
    "DEFAULT_LABEL_PREDICATES",
    "tokenize",
    "fold_accents",
    "local_name",
    "local_name_surface",
    # Defined in linking since the split; still importable from here (the offline strategy
    # imports STOPWORDS from this module).
    "STOPWORDS",
    "TITLES",
    "compact_iri",
    "RDF",
    "RDFS",
    "OWL",
    "SKOS",
    "XSD",
    "RDF_TYPE",
    "RDFS_LABEL",
]

ErrorKind = Literal["syntax", "execution", "timeout", "update_rejected", "unsupported_function"]
# How a failed test query is reported; any other KGError is an "execution" error.
_ERROR_KINDS: tuple[tuple[type[KGError], ErrorKind], ...] = (
    (UpdateNotAllowed, "update_rejected"),
    (QuerySyntaxError, "syntax"),
    (UnsupportedFunction, "unsupported_function"),
    (QueryTimeout, "timeout"),
)


# --------------------------------------------------------------------------------------------
# Test-SPARQL result
# --------------------------------------------------------------------------------------------


@dataclass
class Preview:
    """Outcome of a test query: a preview of the rows, or an error as text (never raised)."""

    ok: bool
    variables: list[str] = field(default_factory=list)
    rows: list[list[str | None]] = field(default_factory=list)
    total: int | None = None  # row count; None when the count cap truncated the result
    boolean: bool | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    query: str | None = None  # the query as run (known prefixes added)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def compact(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "error_kind": self.error_kind, "error": self.error}
        if self.boolean is not None:
            return {"ok": True, "boolean": self.boolean}
        return {"ok": True, "vars": self.variables, "rows": self.rows,
                "total": self.total if self.total is not None else "more than counted"}


# --------------------------------------------------------------------------------------------
# The facade
# --------------------------------------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SurfaceFormsArgs(_Args):
    text: str = Field(min_length=1, max_length=500, description="a name as written in the question")
    k: int | None = Field(default=None, ge=1, le=50, description="how many candidates")


class OntologyArgs(_Args):
    iri: str = Field(min_length=1, max_length=2000, description="full IRI or known prefixed name")


class TestSparqlArgs(_Args):
    sparql: str = Field(min_length=1, max_length=20_000, description="a read-only SPARQL query")


_SCHEMAS: list[dict[str, Any]] = [
    {
        "name": "surface_forms",
        "description": (
            "Find knowledge-graph entities whose labels match a name from the question (a person, "
            "product, place, department...). Fuzzy and accent-insensitive; a bare surname with a "
            "title (\"Ms. Brant\") works. Returns ranked candidates: IRI, label, types, match score "
            "(0-100) and popularity (number of triples)."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "The name as written in the question."},
                "k": {"type": "integer", "minimum": 1, "maximum": 50,
                      "description": "Maximum number of candidates (default: configured k)."},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    },
    {
        "name": "ontology",
        "description": (
            "Describe an IRI. For an entity: its types and its outgoing/incoming predicates with "
            "triple counts and example values. For a class: instance count, predicates its "
            "instances use, sub/superclasses. For a property: domain, range, count, examples."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "iri": {"type": "string",
                        "description": "A full IRI, or a prefixed name with a well-known prefix (rdfs:, dbo:, ...)."},
            },
            "required": ["iri"],
            "additionalProperties": False,
        },
    },
    {
        "name": "test_sparql",
        "description": (
            "Run a read-only SPARQL query with a time limit and preview the result: variables, the "
            "first rows (IRIs with their labels) and the row count, or the error. Well-known "
            "prefixes (rdf, rdfs, xsd, owl, skos, foaf, schema, dbo, dbr, dbp, wd, wdt, ...) are "
            "added when missing."
        ),
        "parameters": {
            "type": "object",
            "properties": {"sparql": {"type": "string", "description": "The SPARQL query."}},
            "required": ["sparql"],
            "additionalProperties": False,
        },
    },
]

_ARG_MODELS: dict[str, type[_Args]] = {
    "surface_forms": SurfaceFormsArgs,
    "ontology": OntologyArgs,
    "test_sparql": TestSparqlArgs,
}
_MAX_CALL_CHARS = 8_000

LookupMode = Literal["index", "sparql", "virtuoso", "service"]


class Tools:
    """The worker agent's tools over one KG, built once per (KG, spec).

    Entity lookup uses a :class:`LabelIndex` on embedded stores (``use_index=None`` decides by
    type), else SPARQL (``virtuoso=True`` for ``bif:contains``) or the HTTP lookup service at
    ``lookup_url``. ``classes()`` / ``predicates()`` are cached per KG fingerprint.
    """

    _schema_cache: ClassVar[dict[tuple[str, str], list[SchemaItem]]] = {}
    _schema_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        kg: KnowledgeGraph,
        *,
        label_predicates: Sequence[str] = (),
        k: int = 10,
        fuzzy_threshold: float = 85,
        group_namespaces: bool = False,
        examples: int = 3,
        timeout_s: float = 10,
        preview_rows: int = 10,
        lookup_url: str | None = None,
        virtuoso: bool = False,
        use_index: bool | None = None,
        auto_label_predicates: bool = True,
        fold_accents: bool = True,
        surname: bool = True,
        langs: Sequence[str] = ("en",),
        prefixes: Mapping[str, str] | None = None,
        max_predicates: int = 40,
        count_limit: int = 10_000,
        http_client: Any = None,
    ) -> None:
        self.kg = kg
        self.k = k
        self.fuzzy_threshold = float(fuzzy_threshold)
        self.group_namespaces = group_namespaces
        self.examples = examples
        self.timeout_s = timeout_s
        self.preview_rows = preview_rows
        self.fold_accents = fold_accents
        self.surname = surname
        self.max_predicates = max_predicates
        self.count_limit = count_limit
        self.prefixes = {**KNOWN_PREFIXES, **(prefixes or {})}
        self.label_predicates = tuple(label_predicates)
        self._auto_labels = auto_label_predicates
        if use_index is None:
            use_index = isinstance(kg, OxigraphKG) and lookup_url is None
        self._use_index = use_index
        self._index: LabelIndex | None = None
        self._index_lock = threading.Lock()
        self.lookup_mode: LookupMode = (
            "service" if lookup_url else "index" if use_index else "virtuoso" if virtuoso else "sparql"
        )
        self._remote: SparqlLookup | ServiceLookup | None = None
        if lookup_url:
            self._remote = ServiceLookup(lookup_url, timeout=timeout_s, client=http_client)
        elif not use_index:
            self._remote = SparqlLookup(kg, label_predicates, langs=langs, virtuoso=virtuoso,
                                        timeout=timeout_s)
        self._langs = tuple(langs)
        self._labeler: Labeler | None = None
        self._remote_span_cache: dict[str, list[Candidate]] = {}

    # -- plumbing --------------------------------------------------------------------------

    @property
    def index(self) -> LabelIndex | None:
        """The label index (built on first use) when this KG is searched through one."""
        if not self._use_index:
            return None
        if self._index is None:
            with self._index_lock:
                if self._index is None:
                    self._index = LabelIndex.for_kg(self.kg, self.label_predicates,
                                                    auto_label_predicates=self._auto_labels)
        return self._index

    @property
    def labeler(self) -> Labeler:
        if self._labeler is None:
            index = self.index
            predicates = index.predicates if index else ordered_label_predicates(self.label_predicates)
            self._labeler = Labeler(self.kg, index, predicates, self._langs, self.timeout_s)
        return self._labeler

    def label(self, iri: str) -> str | None:
        return self.labeler.label(iri)

    def expand_iri(self, text: str) -> str:
        """``<iri>``, a full IRI or a prefixed name with a known prefix -> the full IRI."""
        value = text.strip()
        if value.startswith("<") and value.endswith(">"):
            value = value[1:-1].strip()
        prefix, sep, local = value.partition(":")
        if sep and prefix in self.prefixes and not local.startswith("//"):
            value = self.prefixes[prefix] + local
        if not IRI_RE.match(value):
            raise ToolError(f"{text!r} is not an IRI; use surface_forms to find the IRI of a name")
        return value

    # -- tool 1: surface forms -------------------------------------------------------------

    def surface_forms(self, text: str, k: int | None = None, *, threshold: float | None = None,
                      fold_accents: bool | None = None, surname: bool | None = None) -> list[Candidate]:
        """Ranked entities a surface form may refer to (score >= threshold)."""
        if not text or not text.strip():
            return []
        lookup = self.index.lookup if self.index is not None else self._remote_lookup()
        return lookup(
            text,
            k=k or self.k,
            threshold=self.fuzzy_threshold if threshold is None else threshold,
            fold_accents=self.fold_accents if fold_accents is None else fold_accents,
            surname=self.surname if surname is None else surname,
        )

    def _remote_lookup(self) -> Callable[..., list[Candidate]]:
        assert self._remote is not None  # set whenever there is no index
        return self._remote.lookup

    def match_spans(self, text: str, *, threshold: float | None = None, max_ngram: int = 6,
                    k: int = 5, fold_accents: bool | None = None,
                    surname: bool | None = None, max_lookups: int = 24) -> list[Span]:
        """Entity mentions in a whole question (see :meth:`LabelIndex.match_spans`). Remote KGs
        get the same longest-first scan through the remote lookup, capped at ``max_lookups``."""
        threshold = self.fuzzy_threshold if threshold is None else threshold
        fold = self.fold_accents if fold_accents is None else fold_accents
        surname = self.surname if surname is None else surname
        index = self.index
        if index is not None:
            return index.match_spans(text, threshold=threshold, fold_accents=fold,
                                     surname=surname, max_ngram=max_ngram, k=k)
        return scan_spans(
            text,
            lambda surface: self.surface_forms(surface, k, threshold=threshold, fold_accents=fold,
                                               surname=surname),
            max_ngram=max_ngram, max_lookups=max_lookups, cache=self._remote_span_cache,
        )

    # -- tool 2: ontology ------------------------------------------------------------------

    def ontology(self, iri: str) -> OntologyInfo:
        """Describe an entity, class or property (partial results carry ``notes``)."""
        return describe_iri(self.kg, self.expand_iri(iri), labeler=self.labeler,
                            timeout=self.timeout_s, examples=self.examples,
                            max_predicates=self.max_predicates,
                            group_namespaces=self.group_namespaces, all_predicates=self.predicates)

    def classes(self) -> list[SchemaItem]:
        """Every class with its instance count (declared classes without instances count 0)."""
        return self._cached_schema("classes", class_counts)

    def predicates(self) -> list[SchemaItem]:
        """Every predicate with its triple count."""
        return self._cached_schema("predicates", predicate_counts)

    def _cached_schema(self, what: str,
                       count: Callable[[KnowledgeGraph, float], Mapping[str, int]]) -> list[SchemaItem]:
        """Labelled schema items, most used first, computed once per KG fingerprint."""
        key = (self.kg.fingerprint, what)
        with self._schema_lock:
            if key in self._schema_cache:
                return list(self._schema_cache[key])
        # Whole-schema aggregates are slow on big KGs: at least 30 s whatever the tool timeout.
        counts = count(self.kg, max(self.timeout_s, 30.0))
        items = sorted(schema_items(self.labeler, counts), key=lambda x: (-(x.count or 0), x.iri))
        with self._schema_lock:
            self._schema_cache[key] = items
        return list(items)

    # -- tool 3: test SPARQL ---------------------------------------------------------------

    def test_sparql(self, sparql: str) -> Preview:
        """Run ``sparql`` read-only with the time limit; errors come back in the Preview."""
        if not isinstance(sparql, str) or not sparql.strip():
            return Preview(ok=False, error="empty query", error_kind="syntax", query=sparql or None)
        query = sparql
        try:
            query = add_missing_prefixes(sparql, self.prefixes)
            check_read_only(query)
            result = self.kg.query(query, timeout=self.timeout_s, max_rows=self.count_limit)
        except KGError as exc:
            kind: ErrorKind = next((k for cls, k in _ERROR_KINDS if isinstance(exc, cls)), "execution")
            return _failed(query, kind, exc)
        except Exception as exc:  # a tool must never crash the agent loop
            return _failed(query, "execution", f"{type(exc).__name__}: {exc}")
        if result.is_ask:
            return Preview(ok=True, boolean=result.boolean, total=None, query=query)
        shown = result.rows[: self.preview_rows]
        iris = [t.value for row in shown for t in row if t is not None and t.kind == "iri"]
        labels = self.labeler.labels(iris) if iris else {}
        rows = [[None if t is None else ExampleValue.of(t, labels.get(t.value)).text() for t in row]
                for row in shown]
        return Preview(ok=True, variables=list(result.variables), rows=rows,
                       total=None if result.truncated else len(result.rows), query=query)

    # -- LLM interface ---------------------------------------------------------------------

    def schemas(self) -> list[dict[str, Any]]:
        """JSON tool schemas ``{"name", "description", "parameters"}`` for the three tools."""
        return json.loads(json.dumps(_SCHEMAS))  # a deep copy callers may adapt per provider

    def call(self, name: str, arguments: Mapping[str, Any] | str | None) -> str:
        """Run one LLM tool call; returns compact JSON text, or ``"error: ..."``; never raises."""
        model = _ARG_MODELS.get(name)
        if model is None:
            return f"error: unknown tool {name!r}; available tools: {', '.join(_ARG_MODELS)}"
        try:
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, Mapping):
                return f"error: arguments for {name} must be a JSON object"
            args = model.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                                 for e in exc.errors())
            return f"error: bad arguments for {name}: {problems}"
        except ValueError as exc:  # json.JSONDecodeError
            return f"error: arguments for {name} are not valid JSON: {exc}"
        try:
            payload: Any
            if isinstance(args, SurfaceFormsArgs):
                cands = self.surface_forms(args.text, args.k)
                payload = [c.compact() for c in cands] or f"no entity matches {args.text!r}"
            elif isinstance(args, OntologyArgs):
                payload = self.ontology(args.iri).compact(self.max_predicates)
            else:
                assert isinstance(args, TestSparqlArgs)
                payload = self.test_sparql(args.sparql).compact()
        except (KGError, ToolError) as exc:
            return f"error: {name} failed: {exc}"
        except Exception as exc:  # never let a tool crash the agent loop
            return f"error: {name} failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
        text = payload if isinstance(payload, str) else json.dumps(
            payload, ensure_ascii=False, separators=(",", ":"))
        if len(text) > _MAX_CALL_CHARS:
            text = text[:_MAX_CALL_CHARS] + " ...(truncated)"
        return text


def _failed(query: str, kind: ErrorKind, error: object) -> Preview:
    return Preview(ok=False, error=" ".join(str(error).split()), error_kind=kind, query=query)
