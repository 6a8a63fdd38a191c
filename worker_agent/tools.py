"""The worker agent's three tools: surface-form lookup, ontology lookup and test-SPARQL.

Every tool is a plain Python method of :class:`Tools` (deterministic strategies call them
directly) and also an LLM tool: :meth:`Tools.schemas` lists JSON tool schemas and
:meth:`Tools.call` dispatches a tool call to compact text, turning every failure into an error
string. That text is always whole JSON within a size limit (:func:`fit_json`,
:meth:`Preview.compact`: rows dropped, long values shortened, ``"truncated": true``);
:meth:`Tools.run_call` returns it together with the same result as data.

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
    "ToolOutput",
    "ErrorKind",
    "LabelIndex",
    "SparqlLookup",
    "ServiceLookup",
    "Tools",
    "fit_json",
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

    def compact(self, max_chars: int | None = None) -> dict[str, Any]:
        """The preview as JSON data; with ``max_chars``, data whose JSON text fits in that many
        characters: rows dropped from the end and long values shortened, marked with
        ``"truncated": true``, ``"shown"`` (rows kept) and a ``"note"``; ``total`` stays the
        count of the whole result."""
        if not self.ok:
            return {"ok": False, "error_kind": self.error_kind,
                    "error": _shorten(self.error, max_chars // 2) if max_chars else self.error}
        if self.boolean is not None:
            return {"ok": True, "boolean": self.boolean}
        total: int | str = self.total if self.total is not None else "more than counted"
        full = {"ok": True, "vars": self.variables, "rows": self.rows, "total": total}
        if max_chars is None or _json_size(full) <= max_chars:
            return full
        return self._fitted(total, max_chars)

    def _fitted(self, total: int | str, max_chars: int) -> dict[str, Any]:
        """As many rows as fit; values cut ever shorter until at least one row fits."""
        for cap in _CELL_CAPS:
            rows = [[_shorten(v, cap) for v in row] for row in self.rows]

            def shown(n: int) -> dict[str, Any]:
                return _truncated_preview(self.variables, rows, n, total, len(self.rows), cap)

            n = _most_that_fit(shown, len(rows), max_chars)
            if n:
                return shown(n)
        # Not one row fits even with short values: hundreds of columns. List what fits of them.
        variables = list(self.variables)
        while True:
            out = {"ok": True, "vars": variables, "rows": [], "total": total, "truncated": True,
                   "shown": 0, "note": f"the result is too wide to show; {len(variables)} of "
                                       f"{len(self.variables)} variables listed"}
            if not variables or _json_size(out) <= max_chars:
                return out
            variables = variables[: len(variables) // 2]


# Shortening limits tried in turn for cell values of a preview that is too long to show whole.
_CELL_CAPS = (200, 60, 20)


def _json_size(data: Any) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


def _shorten(value: Any, cap: int) -> Any:
    """A string of at most ``cap`` characters (an ellipsis marks the cut); other values as is."""
    if isinstance(value, str) and len(value) > cap:
        return value[: max(cap - 1, 0)] + "…"
    return value


def _most_that_fit(build: Callable[[int], Any], n_max: int, max_chars: int) -> int | None:
    """The largest ``n <= n_max`` whose ``build(n)`` fits in ``max_chars`` (size grows with n),
    or None when not even ``build(0)`` fits."""
    if _json_size(build(0)) > max_chars:
        return None
    lo, hi = 0, n_max
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _json_size(build(mid)) <= max_chars:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _truncated_preview(variables: list[str], rows: list[list[Any]], n: int, total: int | str,
                       previewed: int, cap: int) -> dict[str, Any]:
    cut = any(isinstance(v, str) and v.endswith("…") for row in rows[:n] for v in row)
    note = f"showing {n} of the first {previewed} rows ({total} in total)"
    if cut:
        note += f"; long values cut to {cap} characters"
    return {"ok": True, "vars": variables, "rows": rows[:n], "total": total, "truncated": True,
            "shown": n, "note": note}


def fit_json(data: Any, max_chars: int) -> Any:
    """``data`` (JSON-able) reduced until its compact JSON text fits in ``max_chars``.

    A list keeps its first items and becomes ``{"items", "truncated", "shown", "total"}``; a
    mapping has long strings shortened, then items dropped from the end of its longest lists
    (counted per key in ``"omitted"``) and gets ``"truncated": true``. The result is always
    valid JSON data, so nothing downstream has to read a cut-off text."""
    if _json_size(data) <= max_chars:
        return data
    if isinstance(data, list):
        for cap in (300, 100, 40):
            items = [_shorten_all(x, cap) for x in data]

            def listing(n: int) -> dict[str, Any]:
                return {"items": items[:n], "truncated": True, "shown": n, "total": len(data)}

            n = _most_that_fit(listing, len(items), max_chars)
            if n:
                return listing(n)
    elif isinstance(data, Mapping):
        for cap in (300, 100, 40):
            out = _fit_mapping(_shorten_all(dict(data), cap), max_chars)
            if out is not None:
                return out
    elif isinstance(data, str):
        return _shorten(data, max(max_chars - 2, 1) // 2)  # escapes may double the length
    return {"truncated": True, "error": f"the result is too large to show ({_json_size(data)} characters)"}


def _shorten_all(data: Any, cap: int) -> Any:
    if isinstance(data, Mapping):
        return {k: _shorten_all(v, cap) for k, v in data.items()}
    if isinstance(data, list):
        return [_shorten_all(v, cap) for v in data]
    return _shorten(data, cap)


def _fit_mapping(data: dict[str, Any], max_chars: int) -> dict[str, Any] | None:
    """Drop the last item of the longest list value until ``data`` fits; None if it never does."""
    data["truncated"] = True
    omitted: dict[str, int] = {}
    while _json_size(data) > max_chars:
        lists = [(k, _json_size(v)) for k, v in data.items() if isinstance(v, list) and v]
        if not lists:
            return None
        key = max(lists, key=lambda kv: kv[1])[0]
        data[key] = data[key][:-1]
        omitted[key] = omitted.get(key, 0) + 1
        data["omitted"] = dict(omitted)
    return data


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
        return self.run_call(name, arguments).text

    def run_call(self, name: str, arguments: Mapping[str, Any] | str | None) -> ToolOutput:
        """Run one LLM tool call: the text :meth:`call` returns plus the same result as data
        (and, for test_sparql, the whole :class:`Preview`); never raises."""
        model = _ARG_MODELS.get(name)
        if model is None:
            return _error_output(f"error: unknown tool {name!r}; available tools: {', '.join(_ARG_MODELS)}",
                                 "arguments")
        try:
            if isinstance(arguments, str):
                arguments = json.loads(arguments) if arguments.strip() else {}
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, Mapping):
                return _error_output(f"error: arguments for {name} must be a JSON object", "arguments")
            args = model.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                                 for e in exc.errors())
            return _error_output(f"error: bad arguments for {name}: {problems}", "arguments")
        except ValueError as exc:  # json.JSONDecodeError
            return _error_output(f"error: arguments for {name} are not valid JSON: {exc}", "arguments")
        preview: Preview | None = None
        try:
            payload: Any
            if isinstance(args, SurfaceFormsArgs):
                cands = self.surface_forms(args.text, args.k)
                payload = [c.compact() for c in cands] or f"no entity matches {args.text!r}"
            elif isinstance(args, OntologyArgs):
                payload = self.ontology(args.iri).compact(self.max_predicates)
            else:
                assert isinstance(args, TestSparqlArgs)
                preview = self.test_sparql(args.sparql)
                # Fitted by dropping rows, so the model always gets JSON it can read.
                payload = preview.compact(_MAX_CALL_CHARS)
        except (KGError, ToolError) as exc:
            return _error_output(f"error: {name} failed: {exc}", "failed")
        except Exception as exc:  # never let a tool crash the agent loop
            return _error_output(f"error: {name} failed: {type(exc).__name__}: {' '.join(str(exc).split())}",
                                 "failed")
        if isinstance(payload, str):
            return ToolOutput(payload, payload, None, preview)
        payload = fit_json(payload, _MAX_CALL_CHARS)
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        return ToolOutput(text, payload, None, preview)


@dataclass
class ToolOutput:
    """One tool call's outcome: ``text`` for the model (compact JSON within the size limit, a
    plain message, or ``"error: ..."``), ``data`` the same as JSON data (the text itself for
    messages and errors), ``error`` whether the arguments were unusable (``"arguments"``) or
    the tool failed (``"failed"``), and for test_sparql the whole ``preview`` behind the data."""

    text: str
    data: Any
    error: Literal["arguments", "failed"] | None = None
    preview: Preview | None = None


def _error_output(text: str, kind: Literal["arguments", "failed"]) -> ToolOutput:
    return ToolOutput(text, text, kind)


def _failed(query: str, kind: ErrorKind, error: object) -> Preview:
    return Preview(ok=False, error=" ".join(str(error).split()), error_kind=kind, query=query)
