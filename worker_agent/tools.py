"""The worker agent's three tools: surface-form lookup, ontology lookup and test-SPARQL.

Every tool is a plain Python method (deterministic strategies call them directly) and also an
LLM tool: :meth:`Tools.schemas` lists JSON tool schemas and :meth:`Tools.call` dispatches a tool
call to compact text, turning every failure into an error string.

Data is read only through ``KnowledgeGraph.query`` so the tools work on embedded stores and
remote endpoints alike. What differs is entity lookup:

* embedded stores (:class:`~worker_agent.kg.OxigraphKG`) get a :class:`LabelIndex`, built once
  per KG fingerprint and label-predicate set: every label-like literal plus the IRI's local
  name, an inverted token index and rapidfuzz scoring, fast enough to scan whole questions
  for mentions (:meth:`LabelIndex.match_spans`);
* remote endpoints are searched with SPARQL (case-insensitive ``CONTAINS``/``REGEX`` on label
  predicates, or Virtuoso's ``bif:contains``), or through a DBpedia-Lookup-style HTTP service.

Both paths score candidates with the same token-alignment scorer, so scores (0-100) mean the
same thing everywhere.
"""

from __future__ import annotations

import heapq
import json
import re
import threading
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from typing import Any, ClassVar, Literal, NamedTuple
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rapidfuzz import fuzz, process

from worker_agent.kg import (
    KNOWN_PREFIXES,
    KGError,
    KnowledgeGraph,
    OxigraphKG,
    QuerySyntaxError,
    QueryTimeout,
    Term,
    UnsupportedFunction,
    UpdateNotAllowed,
    add_missing_prefixes,
    check_read_only,
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
]

RDF = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL = "http://www.w3.org/2002/07/owl#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
XSD = "http://www.w3.org/2001/XMLSchema#"
RDF_TYPE = RDF + "type"
RDFS_LABEL = RDFS + "label"

# Order matters: it ranks which label is shown when an entity has several.
DEFAULT_LABEL_PREDICATES: tuple[str, ...] = (
    RDFS_LABEL,
    SKOS + "prefLabel",
    "http://xmlns.com/foaf/0.1/name",
    "http://schema.org/name",
    "https://schema.org/name",
    SKOS + "altLabel",
)
_ALT_LABEL = SKOS + "altLabel"
_COMMENT_PREDICATES = (
    RDFS + "comment",
    SKOS + "definition",
    "http://purl.org/dc/terms/description",
    "http://schema.org/description",
)
# Local names that make a literal-valued domain predicate label-like (e.g. CK25's pv:name).
_AUTO_LABEL_LOCAL_NAMES = frozenset({"name", "label", "title"})
_CLASS_TYPES = (OWL + "Class", RDFS + "Class")
_PROPERTY_TYPES = (
    RDF + "Property",
    OWL + "ObjectProperty",
    OWL + "DatatypeProperty",
    OWL + "AnnotationProperty",
)

# Surface-form weights: a local name or a bare surname is weaker evidence than a real label.
_W_LABEL = 1.0
_W_VARIANT = 0.97  # label without a trailing "(qualifier)"
_W_ALT = 0.98
_W_SURNAME = 0.95
_W_LOCAL = 0.9

_TOKEN_CUTOFF = 80.0  # rapidfuzz ratio for two tokens to count as the same word (typos, plurals)
_SHORTLIST = 400  # forms fully scored per lookup, chosen by token overlap

TITLES = frozenset(
    {"mr", "mrs", "ms", "miss", "mx", "dr", "prof", "professor", "sir", "dame", "herr", "frau",
     "sr", "sra", "srta", "madame", "mme", "monsieur"}
)
_NAME_SUFFIXES = frozenset({"jr", "sr", "ii", "iii", "iv", "phd", "md"})
# Function words never start or end a mention. "us" and "it" are left out on purpose: they are
# also "US" (suppliers) and "IT" (department).
STOPWORDS = frozenset(
    """a an the of in on at to for from by with and or not no is are was were be been being do
    does did has have had what which who whom whose where when why how many much all any each
    every some this that these those there their our my your his her its me we you they them i
    give show list tell find name names please can could would should will shall may might must
    than then also only just about into over under between more most less least per as if
    el la los las un una unos unas de del y o en por para con que cual cuales quien quienes
    donde cuando como cuantos cuantas es son fue fueron su sus al lo le les se
    der die das ein eine und oder von zu mit im ist sind wer wie was welche welcher""".split()
)
_PERSON_TYPE_RE = re.compile(
    r"person|people|human|employee|manager|staff|author|writer|actor|actress|artist|athlete|"
    r"politician|scientist|musician|singer|player|officeholder|philosopher|engineer|student|"
    r"professor|researcher|president|painter|director",
    re.IGNORECASE,
)
_WIKIDATA_HUMAN = "http://www.wikidata.org/entity/Q5"

_WORD_RE = re.compile(r"[^\W_]+")
_ID_PREFIX_RE = re.compile(r"^[a-z]{1,12}(?:-[a-z]{1,12}){0,2}-(?=[A-Z0-9])")
_OPAQUE_RE = re.compile(
    r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[QPL]\d+)$", re.IGNORECASE
)
_CAMEL_RE = re.compile(r"(?<=[a-z])(?=[A-Z])")
_TRAILING_QUALIFIER_RE = re.compile(r"\s*\([^()]*\)\s*$")
_IRI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|^`\\]*$")
_SAFE_LOCAL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_NUMERIC_TYPES = frozenset(
    XSD + t for t in ("integer", "int", "long", "short", "decimal", "double", "float",
                      "nonNegativeInteger", "positiveInteger", "boolean")
)

ErrorKind = Literal["syntax", "execution", "timeout", "update_rejected", "unsupported_function"]


class ToolError(Exception):
    """A tool could not do its job (bad input, lookup service down); ``str(e)`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


# --------------------------------------------------------------------------------------------
# Text normalization
# --------------------------------------------------------------------------------------------


def fold_accents(text: str) -> str:
    """Strip combining marks after NFKD decomposition: ``"Müller" -> "Muller"``."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def tokenize(text: str, *, fold: bool = True) -> list[str]:
    """Casefolded word tokens (letters and digits); accents stripped when ``fold``."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if fold:
        text = fold_accents(text)
    return _WORD_RE.findall(text)


def local_name(iri: str) -> str:
    """The part after the last ``#`` or ``/`` (the previous segment for a trailing slash)."""
    stripped = iri.rstrip("/#") or iri
    cut = max(stripped.rfind("#"), stripped.rfind("/"))
    return stripped[cut + 1 :] if cut >= 0 else stripped


def local_name_surface(iri: str) -> str | None:
    """The IRI's local name as words, or None when it carries no words.

    ``.../empl-Karen.Brant%40company.org -> "Karen Brant"``: percent-decoded, an e-mail domain
    dropped, a lowercase type prefix (``empl-``, ``prod-cat-``) dropped, separators and
    camelCase split. UUIDs and Wikidata ids (``Q42``) name nothing and give None.
    """
    name = unquote(local_name(iri))
    if "@" in name:  # e-mail shaped ids: the mailbox names the entity, the domain does not
        name = name.split("@", 1)[0]
    name = _ID_PREFIX_RE.sub("", name)
    if not name or _OPAQUE_RE.match(name):
        return None
    name = _CAMEL_RE.sub(" ", name)
    words = _WORD_RE.findall(name)
    if not any(ch.isalpha() for ch in "".join(words)):
        return None
    return " ".join(words)


def _query_tokens(text: str, fold: bool, surname: bool) -> list[str]:
    """Tokens of a lookup query: leading titles dropped in surname mode, edge stopwords dropped."""
    toks = tokenize(text, fold=fold)
    if surname:
        while len(toks) > 1 and toks[0] in TITLES:
            toks.pop(0)
    return _trim_stopwords(toks)


def _trim_stopwords(toks: list[str]) -> list[str]:
    start, end = 0, len(toks)
    while start < end and toks[start] in STOPWORDS:
        start += 1
    while end > start and toks[end - 1] in STOPWORDS:
        end -= 1
    return toks[start:end] if start < end else toks


def _is_person(types: Iterable[str]) -> bool:
    return any(t == _WIKIDATA_HUMAN or _PERSON_TYPE_RE.search(local_name(t)) for t in types)


def _surname(label: str) -> str | None:
    words = _TRAILING_QUALIFIER_RE.sub("", label).replace(",", " ").split()
    while words and words[-1].strip(".").casefold() in _NAME_SUFFIXES:
        words.pop()
    if len(words) < 2:
        return None
    last = words[-1].strip(".")
    return last if len(last) >= 2 and any(ch.isalpha() for ch in last) else None


def compact_iri(iri: str, prefixes: Mapping[str, str] = KNOWN_PREFIXES) -> str:
    """``prefix:local`` when a known prefix fits and the local part is plain, else ``<iri>``."""
    best = ""
    for prefix, ns in prefixes.items():
        if iri.startswith(ns) and len(ns) > len(prefixes.get(best, "")):
            local = iri[len(ns) :]
            if _SAFE_LOCAL_RE.match(local):
                best = prefix
    return f"{best}:{iri[len(prefixes[best]):]}" if best else f"<{iri}>"


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class Candidate:
    """One entity a surface form may refer to; ``score`` is 0-100, ``popularity`` its degree."""

    iri: str
    label: str
    types: list[str]
    score: float
    popularity: int
    matched_label: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def compact(self) -> dict[str, Any]:
        out: dict[str, Any] = {"iri": self.iri, "label": self.label}
        if self.matched_label != self.label:
            out["matched"] = self.matched_label
        out["types"] = [compact_iri(t) for t in self.types[:4]]
        out["score"] = self.score
        out["popularity"] = self.popularity
        return out


@dataclass
class Span:
    """A mention found in a question: ``text[start:end] == surface``."""

    start: int
    end: int
    surface: str
    candidates: list[Candidate]

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "surface": self.surface,
                "candidates": [c.to_dict() for c in self.candidates]}


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
# Matching core, shared by the label index and the remote lookups
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Form:
    entity: int
    text: str
    kind: Literal["label", "variant", "alt", "local", "surname"]
    weight: float


class _FormTable:
    """Surface forms tokenized in one normalization mode, with an inverted token index."""

    def __init__(self, forms: Sequence[_Form], fold: bool) -> None:
        self.fold = fold
        self.tokens: list[tuple[str, ...]] = []
        self.joined: list[str] = []
        postings: dict[str, list[int]] = defaultdict(list)
        for i, form in enumerate(forms):
            toks = tuple(tokenize(form.text, fold=fold))
            self.tokens.append(toks)
            self.joined.append(" ".join(toks))
            for tok in set(toks):
                postings[tok].append(i)
        self.postings = dict(postings)
        # Fuzzy token matching only for words: codes and numbers must match exactly.
        self.fuzzy_vocab = [t for t in self.postings if len(t) >= 4 and t.isalpha()]
        self._similar: dict[str, dict[str, float]] = {}
        self._forms_with: dict[str, dict[int, float]] = {}

    def similar(self, tok: str) -> dict[str, float]:
        """Vocabulary tokens that count as ``tok`` (itself, typos, plural forms) -> similarity."""
        hit = self._similar.get(tok)
        if hit is not None:
            return hit
        sims: dict[str, float] = {}
        if tok in self.postings:
            sims[tok] = 1.0
        if len(tok) >= 4 and tok.isalpha():
            for other, score, _ in process.extract(
                tok, self.fuzzy_vocab, scorer=fuzz.ratio, score_cutoff=_TOKEN_CUTOFF, limit=None
            ):
                sims.setdefault(other, score / 100.0)
        if len(self._similar) > 100_000:  # bounded memory; refilled on demand
            self._similar.clear()
        self._similar[tok] = sims
        return sims

    def forms_with(self, tok: str) -> dict[int, float]:
        """Form ids containing ``tok`` or a similar token -> best similarity."""
        hit = self._forms_with.get(tok)
        if hit is not None:
            return hit
        out: dict[int, float] = {}
        for other, sim in self.similar(tok).items():
            for fid in self.postings[other]:
                if out.get(fid, 0.0) < sim:
                    out[fid] = sim
        if len(self._forms_with) > 20_000:
            self._forms_with.clear()
        self._forms_with[tok] = out
        return out


def _align_score(q_toks: Sequence[str], q_sims: Sequence[dict[str, float]],
                 f_toks: Sequence[str]) -> float:
    """0-100: 70% how much of the query the form explains, 30% how much of the form is matched
    (by characters). "U990 LCD Inductor" vs "U990-5234138 - LCD Inductor" scores 90, "Marketing"
    vs "IoT Data Marketing" 80, so exact and near-exact names win over partial overlaps."""
    q_total = sum(len(q) for q in q_toks)
    f_total = sum(len(t) for t in f_toks)
    if not q_total or not f_total:
        return 0.0
    q_best = [0.0] * len(q_toks)
    f_cov = 0.0
    for tok in f_toks:
        best = 0.0
        for i, sims in enumerate(q_sims):
            sim = sims.get(tok)
            if sim:
                if sim > q_best[i]:
                    q_best[i] = sim
                if sim > best:
                    best = sim
        f_cov += len(tok) * best
    rq = sum(len(q) * b for q, b in zip(q_toks, q_best)) / q_total
    return 100.0 * (0.7 * rq + 0.3 * f_cov / f_total)


def _score_forms(table: _FormTable, forms: Sequence[_Form], fids: Iterable[int],
                 q_toks: Sequence[str], q_sims: Sequence[dict[str, float]],
                 surname: bool) -> dict[int, tuple[float, int]]:
    """entity -> (best score, form id) over the given forms."""
    q_joined = " ".join(q_toks)
    best: dict[int, tuple[float, int]] = {}
    for fid in fids:
        form = forms[fid]
        if form.kind == "surname" and not surname:
            continue
        raw = _align_score(q_toks, q_sims, table.tokens[fid])
        if raw < 100.0:  # character-level similarity rescues split/merged words ("allenshort")
            raw = max(raw, fuzz.ratio(q_joined, table.joined[fid]))
        score = raw * form.weight
        prev = best.get(form.entity)
        if prev is None or score > prev[0]:
            best[form.entity] = (score, fid)
    return best


# --------------------------------------------------------------------------------------------
# Embedded label index
# --------------------------------------------------------------------------------------------

_BUILD_ROWS = 1_000_000_000  # the index reads whole result sets; the KG's row cap must not cut them


def _values(iris: Iterable[str]) -> str:
    return " ".join(f"<{i}>" for i in iris)


def _label_rank(pred: str, lang: str | None, predicates: Sequence[str],
                langs: Sequence[str]) -> tuple[int, int]:
    lang_rank = 0 if not lang or any(lang.lower().startswith(l) for l in langs) else 1
    pred_rank = predicates.index(pred) if pred in predicates else len(predicates)
    return lang_rank, pred_rank


def _ordered_predicates(extra: Iterable[str]) -> list[str]:
    """Label predicates in display-preference order: rdfs:label ... custom ... skos:altLabel."""
    ordered = [p for p in DEFAULT_LABEL_PREDICATES if p != _ALT_LABEL]
    ordered += sorted(set(extra) - set(DEFAULT_LABEL_PREDICATES))
    ordered.append(_ALT_LABEL)
    return ordered


class LabelIndex:
    """Entity lookup over an embedded KG: label-like literals + local names, fuzzy-matched.

    Build with :meth:`for_kg` (cached per KG fingerprint and label-predicate set) or
    :meth:`build`. Immutable after the build except for lazily built per-mode token tables and
    bounded caches, so one index serves concurrent evaluations.
    """

    _cache: ClassVar[dict[tuple[str, frozenset[str], bool], LabelIndex]] = {}
    _cache_lock: ClassVar[threading.Lock] = threading.Lock()
    _build_locks: ClassVar[dict[tuple[str, frozenset[str], bool], threading.Lock]] = {}

    def __init__(self, *, iris: list[str], labels: list[str], types: list[tuple[str, ...]],
                 popularity: list[int], forms: list[_Form], predicates: Sequence[str],
                 build_seconds: float = 0.0) -> None:
        self.iris = iris
        self.labels = labels
        self.entity_types = types
        self.degrees = popularity
        self.forms = forms
        self.predicates = tuple(predicates)
        self.build_seconds = build_seconds
        self._ids = {iri: i for i, iri in enumerate(iris)}
        self._tables: dict[bool, _FormTable] = {}
        self._table_lock = threading.Lock()
        self._span_cache: dict[tuple[Any, ...], dict[int, tuple[float, int]]] = {}

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def for_kg(cls, kg: KnowledgeGraph, label_predicates: Iterable[str] = (), *,
               auto_label_predicates: bool = True) -> LabelIndex:
        """The cached index of ``kg`` for these predicates, built on first use."""
        key = (kg.fingerprint, frozenset(label_predicates), auto_label_predicates)
        with cls._cache_lock:
            if key in cls._cache:
                return cls._cache[key]
            lock = cls._build_locks.setdefault(key, threading.Lock())
        with lock:  # one build per key even when evaluations start concurrently
            with cls._cache_lock:
                if key in cls._cache:
                    return cls._cache[key]
            index = cls.build(kg, label_predicates, auto_label_predicates=auto_label_predicates)
            with cls._cache_lock:
                if len(cls._cache) >= 8:  # a handful of KGs per process; drop the oldest
                    cls._cache.pop(next(iter(cls._cache)))
                cls._cache[key] = index
            return index

    @classmethod
    def clear_cache(cls) -> None:
        with cls._cache_lock:
            cls._cache.clear()

    @classmethod
    def build(cls, kg: KnowledgeGraph, label_predicates: Iterable[str] = (), *,
              auto_label_predicates: bool = True, langs: Sequence[str] = ("en",),
              timeout: float | None = 300.0) -> LabelIndex:
        """Read labels, types and degrees from ``kg`` (four or five queries) and index them."""
        started = time.perf_counter()

        def rows(sparql: str) -> list[tuple[Term | None, ...]]:
            result = kg.query(sparql, timeout=timeout, max_rows=_BUILD_ROWS)
            if result.truncated:
                raise KGError(f"{kg.name}: label index query was truncated; the KG is too large to index")
            return result.rows

        extra = set(label_predicates)
        if auto_label_predicates:
            for (p,) in rows("SELECT DISTINCT ?p WHERE { ?s ?p ?o FILTER(isLiteral(?o)) }"):
                if p is not None and local_name(p.value).casefold() in _AUTO_LABEL_LOCAL_NAMES:
                    extra.add(p.value)
        predicates = _ordered_predicates(extra)

        labels: dict[str, list[tuple[tuple[int, int], str, str]]] = defaultdict(list)
        for s, p, o in rows(
            f"SELECT ?s ?p ?o WHERE {{ VALUES ?p {{ {_values(predicates)} }} "
            "?s ?p ?o FILTER(isIRI(?s) && isLiteral(?o)) }"
        ):
            if s and p and o and o.value.strip():
                rank = _label_rank(p.value, o.lang, predicates, langs)
                labels[s.value].append((rank, p.value, o.value.strip()))
        types: dict[str, list[str]] = defaultdict(list)
        for s, t in rows("SELECT ?s ?t WHERE { ?s a ?t FILTER(isIRI(?s) && isIRI(?t)) }"):
            if s and t:
                types[s.value].append(t.value)
        degree: dict[str, int] = defaultdict(int)
        for query in ("SELECT ?e (COUNT(*) AS ?n) WHERE { ?e ?p ?o FILTER(isIRI(?e)) } GROUP BY ?e",
                      "SELECT ?e (COUNT(*) AS ?n) WHERE { ?s ?p ?e FILTER(isIRI(?e)) } GROUP BY ?e"):
            for e, n in rows(query):
                if e and n:
                    degree[e.value] += int(n.value)

        iris = sorted(set(labels) | set(types))
        display: list[str] = []
        forms: list[_Form] = []
        for eid, iri in enumerate(iris):
            entity_labels = sorted(labels.get(iri, []))
            local = local_name_surface(iri)
            display.append(entity_labels[0][2] if entity_labels else (local or local_name(iri)))
            forms.extend(_entity_forms(eid, iri, entity_labels, types.get(iri, ()), local))
        index = cls(
            iris=iris, labels=display, types=[tuple(sorted(set(types.get(i, ())))) for i in iris],
            popularity=[degree.get(i, 0) for i in iris], forms=forms, predicates=predicates,
        )
        index._table(True)  # the default (accent-folding) mode is built up front, not on first lookup
        index.build_seconds = time.perf_counter() - started
        return index

    # -- accessors -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.iris)

    def __contains__(self, iri: object) -> bool:
        return iri in self._ids

    def label(self, iri: str) -> str | None:
        eid = self._ids.get(iri)
        return None if eid is None else self.labels[eid]

    def types(self, iri: str) -> list[str]:
        eid = self._ids.get(iri)
        return [] if eid is None else list(self.entity_types[eid])

    def popularity(self, iri: str) -> int:
        eid = self._ids.get(iri)
        return 0 if eid is None else self.degrees[eid]

    def _table(self, fold: bool) -> _FormTable:
        table = self._tables.get(fold)
        if table is None:
            with self._table_lock:
                table = self._tables.get(fold)
                if table is None:
                    table = self._tables[fold] = _FormTable(self.forms, fold)
        return table

    def _candidate(self, eid: int, score: float, fid: int) -> Candidate:
        return Candidate(iri=self.iris[eid], label=self.labels[eid],
                         types=list(self.entity_types[eid]), score=round(min(score, 100.0), 1),
                         popularity=self.degrees[eid], matched_label=self.forms[fid].text)

    def _rank(self, best: Mapping[int, tuple[float, int]], k: int, threshold: float) -> list[Candidate]:
        hits = [(round(s, 1), self.degrees[e], e, f) for e, (s, f) in best.items() if s >= threshold]
        hits.sort(key=lambda h: (-h[0], -h[1], self.labels[h[2]]))
        return [self._candidate(e, s, f) for s, _, e, f in hits[:k]]

    # -- lookup ----------------------------------------------------------------------------

    def lookup(self, text: str, *, k: int = 10, threshold: float = 85.0,
               fold_accents: bool = True, surname: bool = False) -> list[Candidate]:
        """Entities whose surface forms match ``text``, best first (score, then popularity)."""
        stripped = text.strip().strip("<>")
        if stripped in self._ids:  # an IRI names itself
            eid = self._ids[stripped]
            return [Candidate(stripped, self.labels[eid], list(self.entity_types[eid]), 100.0,
                              self.degrees[eid], stripped)]
        table = self._table(fold_accents)
        q_toks = _query_tokens(text, fold_accents, surname)
        if not q_toks:
            return []
        q_sims = [table.similar(t) for t in q_toks]
        overlap: dict[int, float] = defaultdict(float)
        for tok in q_toks:
            for fid, sim in table.forms_with(tok).items():
                overlap[fid] += len(tok) * sim
        shortlist = [fid for fid, _ in heapq.nlargest(_SHORTLIST, overlap.items(), key=itemgetter(1))]
        if not shortlist:  # no shared word: fall back to whole-string similarity
            shortlist = [i for _, _, i in process.extract(
                " ".join(q_toks), table.joined, scorer=fuzz.ratio,
                score_cutoff=threshold * 0.9, limit=50)]
        best = _score_forms(table, self.forms, shortlist, q_toks, q_sims, surname)
        return self._rank(best, k, threshold)

    def match_spans(self, text: str, *, threshold: float = 85.0, fold_accents: bool = True,
                    surname: bool = False, max_ngram: int = 6, k: int = 5) -> list[Span]:
        """Entity mentions in a whole question, longest non-overlapping matches first.

        Every n-gram (up to ``max_ngram`` words, not starting or ending with a stopword) whose
        words all occur (fuzzily) in one surface form is scored; spans are chosen by length,
        then score. ``text`` should be NFC (the usual case); offsets index ``text``.
        """
        table = self._table(fold_accents)
        words: list[tuple[int, int, str]] = []
        for m in _WORD_RE.finditer(text):
            toks = tokenize(m.group(), fold=fold_accents)
            if toks:  # a word may normalize to several tokens (ligatures): the first carries it
                words.append((m.start(), m.end(), toks[0]))
        found: list[tuple[int, float, int, int, list[Candidate]]] = []
        for i, (_, _, first) in enumerate(words):
            if first in STOPWORDS:
                continue
            lead_title = surname and first in TITLES
            shared: set[int] | None = None
            for j in range(i, min(len(words), i + max_ngram)):
                tok = words[j][2]
                if tok in STOPWORDS or (lead_title and j == i):
                    continue
                with_tok = table.forms_with(tok)
                shared = set(with_tok) if shared is None else shared.intersection(with_tok)
                if not shared:
                    break
                q_toks = [w[2] for w in words[i + (1 if lead_title else 0) : j + 1]]
                best = self._ngram_scores(table, q_toks, shared, fold_accents, surname)
                cands = self._rank(best, k, threshold)
                if cands:
                    found.append((j - i + 1, cands[0].score, i, j, cands))
        found.sort(key=lambda f: (-f[0], -f[1], f[2]))
        taken: set[int] = set()
        spans: list[Span] = []
        for _, _, i, j, cands in found:
            if taken.isdisjoint(range(i, j + 1)):
                taken.update(range(i, j + 1))
                start, end = words[i][0], words[j][1]
                spans.append(Span(start, end, text[start:end], cands))
        spans.sort(key=lambda s: s.start)
        return spans

    def _ngram_scores(self, table: _FormTable, q_toks: list[str], fids: set[int],
                      fold: bool, surname: bool) -> dict[int, tuple[float, int]]:
        key = (tuple(q_toks), fold, surname)
        hit = self._span_cache.get(key)
        if hit is None:
            q_sims = [table.similar(t) for t in q_toks]
            hit = _score_forms(table, self.forms, fids, q_toks, q_sims, surname)
            if len(self._span_cache) > 50_000:
                self._span_cache.clear()
            self._span_cache[key] = hit
        return hit


def _entity_forms(eid: int, iri: str, labels: Sequence[tuple[Any, str, str]],
                  types: Sequence[str], local: str | None) -> list[_Form]:
    """Surface forms of one entity: labels, labels without a trailing qualifier, surnames of
    person-like entities, and the local name (weakest)."""
    forms: list[_Form] = []
    seen: set[str] = set()

    def add(text: str, kind: Literal["label", "variant", "alt", "local", "surname"], weight: float) -> None:
        key = " ".join(tokenize(text))
        if key and key not in seen:
            seen.add(key)
            forms.append(_Form(eid, text, kind, weight))

    person = _is_person(types)
    for _, pred, text in labels:
        add(text, "alt" if pred == _ALT_LABEL else "label", _W_ALT if pred == _ALT_LABEL else _W_LABEL)
    for _, _, text in labels:
        variant = _TRAILING_QUALIFIER_RE.sub("", text)
        if variant and variant != text:
            add(variant, "variant", _W_VARIANT)
    if person:
        for _, _, text in labels:
            last = _surname(text)
            if last:
                add(last, "surname", _W_SURNAME)
    if local:
        add(local, "local", _W_LOCAL)
    return forms


# --------------------------------------------------------------------------------------------
# Remote lookups
# --------------------------------------------------------------------------------------------

# The letters that carry most accents in Latin-script names; others match only themselves.
_ACCENT_CLASSES = {
    "a": "aàáâãäåāăą", "c": "cçćč", "e": "eèéêëēėęě", "i": "iìíîïīı", "n": "nñńň",
    "o": "oòóôõöøōő", "u": "uùúûüūůű", "y": "yýÿ", "s": "sśşš", "z": "zźżž",
}


def _accent_regex(token: str) -> str:
    """A regex matching ``token`` with or without accents: ``muller -> m[uùúûü...]ller``."""
    return "".join(f"[{_ACCENT_CLASSES[ch]}]" if ch in _ACCENT_CLASSES else ch for ch in token)


class _AdHocIndex:
    """Scores a handful of entities fetched remotely with the same scorer as LabelIndex."""

    def __init__(self) -> None:
        self.iris: list[str] = []
        self.labels: list[str] = []
        self.types: list[list[str]] = []
        self.popularity: list[int] = []
        self.forms: list[_Form] = []

    def add(self, iri: str, labels: Sequence[str], types: Sequence[str], popularity: int) -> None:
        eid = len(self.iris)
        self.iris.append(iri)
        self.labels.append(labels[0] if labels else (local_name_surface(iri) or local_name(iri)))
        self.types.append(list(types))
        self.popularity.append(popularity)
        ranked = [((0, i), RDFS_LABEL, text) for i, text in enumerate(labels)]
        self.forms.extend(_entity_forms(eid, iri, ranked, types, local_name_surface(iri)))

    def rank(self, text: str, *, k: int, threshold: float, fold: bool,
             surname: bool) -> list[Candidate]:
        if not self.forms:
            return []
        table = _FormTable(self.forms, fold)
        q_toks = _query_tokens(text, fold, surname)
        if not q_toks:
            return []
        q_sims = [table.similar(t) for t in q_toks]
        best = _score_forms(table, self.forms, range(len(self.forms)), q_toks, q_sims, surname)
        hits = [(round(min(s, 100.0), 1), self.popularity[e], e, f)
                for e, (s, f) in best.items() if s >= threshold]
        hits.sort(key=lambda h: (-h[0], -h[1], self.labels[h[2]]))
        return [Candidate(self.iris[e], self.labels[e], self.types[e], s, p, self.forms[f].text)
                for s, p, e, f in hits[:k]]


class SparqlLookup:
    """Entity lookup on any SPARQL endpoint: label predicates filtered by case-insensitive
    ``CONTAINS`` (``REGEX`` with accent classes when folding accents), or Virtuoso's
    ``bif:contains`` full-text index; candidates re-scored locally."""

    def __init__(self, kg: KnowledgeGraph, label_predicates: Iterable[str] = (), *,
                 langs: Sequence[str] = ("en",), virtuoso: bool = False, limit: int = 200,
                 timeout: float | None = 10.0) -> None:
        self.kg = kg
        self.predicates = _ordered_predicates(label_predicates)
        self.langs = tuple(langs)
        self.virtuoso = virtuoso
        self.limit = limit
        self.timeout = timeout

    def build_query(self, terms: Sequence[str], *, conjunctive: bool, fold: bool) -> str:
        """The candidate query for search ``terms`` (tokens: letters and digits only)."""
        lang_filter = ""
        if self.langs:
            tests = " || ".join(f'LANGMATCHES(LANG(?label), "{l}")' for l in self.langs)
            lang_filter = f'FILTER(LANG(?label) = "" || {tests})'
        if self.virtuoso:
            joiner = " AND " if conjunctive else " OR "
            expr = joiner.join(f'"{t}"' for t in terms)
            match = f"?label bif:contains '{expr}' ."
        else:
            checks = [
                f'REGEX(STR(?label), "{_accent_regex(t)}", "i")'
                if fold and any(ch in _ACCENT_CLASSES for ch in t)
                else f'CONTAINS(LCASE(STR(?label)), "{t}")'
                for t in terms
            ]
            match = f"FILTER({(' && ' if conjunctive else ' || ').join(checks)})"
        return (
            f"SELECT DISTINCT ?s ?label WHERE {{ VALUES ?p {{ {_values(self.predicates)} }} "
            f"?s ?p ?label . {match} FILTER(isIRI(?s)) {lang_filter} }} LIMIT {self.limit}"
        )

    def lookup(self, text: str, *, k: int = 10, threshold: float = 85.0,
               fold_accents: bool = True, surname: bool = False) -> list[Candidate]:
        q_toks = _query_tokens(text, fold_accents, surname)
        terms = sorted({t for t in q_toks if t not in STOPWORDS and len(t) >= 2},
                       key=lambda t: (-len(t), t))[:3]
        if not terms:
            return []
        found: dict[str, list[str]] = {}
        for conjunctive in ((True, False) if len(terms) > 1 else (True,)):
            query = self.build_query(terms, conjunctive=conjunctive, fold=fold_accents)
            for s, label in self.kg.query(query, timeout=self.timeout, max_rows=self.limit).rows:
                if s is not None and label is not None:
                    found.setdefault(s.value, []).append(label.value)
            if len(found) >= k:
                break
        return self._score(text, found, k=k, threshold=threshold, fold=fold_accents, surname=surname)

    def _score(self, text: str, found: Mapping[str, list[str]], *, k: int, threshold: float,
               fold: bool, surname: bool) -> list[Candidate]:
        iris = list(found)
        types = self._types(iris)
        index = _AdHocIndex()
        for iri in iris:
            index.add(iri, found[iri], types.get(iri, []), 0)
        ranked = index.rank(text, k=len(iris), threshold=threshold, fold=fold, surname=surname)
        degrees = self._degrees([c.iri for c in ranked[: max(k * 3, 30)]])
        for cand in ranked:
            cand.popularity = degrees.get(cand.iri, 0)
        ranked.sort(key=lambda c: (-c.score, -c.popularity, c.label))
        return ranked[:k]

    def _types(self, iris: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for chunk in _chunks(iris, 100):
            try:
                result = self.kg.query(f"SELECT ?s ?t WHERE {{ VALUES ?s {{ {_values(chunk)} }} ?s a ?t }}",
                                       timeout=self.timeout, max_rows=10_000)
            except KGError:
                continue  # types only refine ranking; the lookup still answers without them
            for s, t in result.rows:
                if s and t and t.kind == "iri":
                    out[s.value].append(t.value)
        return out

    def _degrees(self, iris: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for chunk in _chunks(iris, 50):
            query = (f"SELECT ?s (COUNT(*) AS ?n) WHERE {{ VALUES ?s {{ {_values(chunk)} }} "
                     "{ ?s ?p ?o } UNION { ?x ?p ?s } } GROUP BY ?s")
            try:
                result = self.kg.query(query, timeout=self.timeout, max_rows=10_000)
            except KGError:
                continue  # popularity is a tie-breaker; 0 is an honest "unknown"
            for s, n in result.rows:
                if s and n:
                    out[s.value] = int(n.value)
        return out


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


_HTML_TAG_RE = re.compile(r"<[^>]+>")


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


class ServiceLookup:
    """A DBpedia-Lookup-style HTTP service: ``GET url?query=...&maxResults=...&format=json``.

    Understands the current response shape (``{"docs": [{"resource": [...], "label": [...],
    "type": [...], "refCount": [...]}]}``) and the legacy one (``{"results": [{"uri", "label",
    "classes": [{"uri"}], "refCount"}]}``); candidates are re-scored with the shared scorer.
    """

    def __init__(self, url: str, *, timeout: float = 10.0, client: Any = None,
                 params: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.params = dict(params or {})
        self._client = client

    def lookup(self, text: str, *, k: int = 10, threshold: float = 85.0,
               fold_accents: bool = True, surname: bool = False) -> list[Candidate]:
        import httpx

        params = {"query": text, "maxResults": str(max(k * 3, 10)), "format": "json", **self.params}
        try:
            if self._client is not None:
                response = self._client.get(self.url, params=params, timeout=self.timeout)
            else:
                with httpx.Client(timeout=self.timeout) as client:
                    response = client.get(self.url, params=params, headers={"Accept": "application/json"})
            response.raise_for_status()
            data = response.json()
        except httpx.HTTPError as exc:
            raise ToolError(f"lookup service {self.url} failed: {exc}") from exc
        except ValueError as exc:
            raise ToolError(f"lookup service {self.url} returned invalid JSON: {exc}") from exc
        index = _AdHocIndex()
        for iri, label, types, refs in _service_docs(data):
            index.add(iri, [label] if label else [], types, refs)
        return index.rank(text, k=k, threshold=threshold, fold=fold_accents, surname=surname)


def _service_docs(data: Any) -> Iterable[tuple[str, str | None, list[str], int]]:
    if not isinstance(data, Mapping):
        raise ToolError("lookup service answer is not a JSON object")
    for doc in data.get("docs") or data.get("results") or []:
        if not isinstance(doc, Mapping):
            continue
        iri = _first(doc.get("resource")) or doc.get("uri")
        if not isinstance(iri, str):
            continue
        label = _first(doc.get("label"))
        label = _HTML_TAG_RE.sub("", label) if isinstance(label, str) else None
        types = [t for t in doc.get("type") or [] if isinstance(t, str)]
        types += [c["uri"] for c in doc.get("classes") or [] if isinstance(c, Mapping) and "uri" in c]
        try:
            refs = int(_first(doc.get("refCount")) or 0)
        except (TypeError, ValueError):
            refs = 0
        yield iri, label, types, refs


# --------------------------------------------------------------------------------------------
# Labels for IRIs shown in ontology answers and previews
# --------------------------------------------------------------------------------------------


class _Labeler:
    """Labels for IRIs: from the label index when there is one, else one VALUES query."""

    def __init__(self, kg: KnowledgeGraph, index: LabelIndex | None, predicates: Sequence[str],
                 langs: Sequence[str], timeout: float | None) -> None:
        self.kg = kg
        self.index = index
        self.predicates = list(predicates)
        self.langs = langs
        self.timeout = timeout
        self._cache: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def labels(self, iris: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(iris))
        if self.index is not None:
            found = {i: self.index.label(i) for i in wanted}
            return {i: l for i, l in found.items() if l}
        missing = [i for i in wanted if i not in self._cache and _IRI_RE.match(i)]
        for chunk in _chunks(missing, 50):
            best: dict[str, tuple[tuple[int, int], str]] = {}
            try:
                result = self.kg.query(
                    f"SELECT ?s ?p ?l WHERE {{ VALUES ?s {{ {_values(chunk)} }} "
                    f"VALUES ?p {{ {_values(self.predicates)} }} ?s ?p ?l FILTER(isLiteral(?l)) }}",
                    timeout=self.timeout, max_rows=5_000)
            except KGError:
                continue  # labels are a courtesy; an IRI without one is still usable
            for s, p, l in result.rows:
                if s and p and l:
                    rank = _label_rank(p.value, l.lang, self.predicates, self.langs)
                    if s.value not in best or rank < best[s.value][0]:
                        best[s.value] = (rank, l.value)
            with self._lock:
                for iri in chunk:
                    self._cache[iri] = best[iri][1] if iri in best else None
        return {i: self._cache[i] for i in wanted if self._cache.get(i)}  # type: ignore[misc]


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
        self._labeler: _Labeler | None = None
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
    def labeler(self) -> _Labeler:
        if self._labeler is None:
            index = self.index
            predicates = index.predicates if index else _ordered_predicates(self.label_predicates)
            self._labeler = _Labeler(self.kg, index, predicates, self._langs, self.timeout_s)
        return self._labeler

    def label(self, iri: str) -> str | None:
        return self.labeler.labels([iri]).get(iri)

    def expand_iri(self, text: str) -> str:
        """``<iri>``, a full IRI or a prefixed name with a known prefix -> the full IRI."""
        value = text.strip()
        if value.startswith("<") and value.endswith(">"):
            value = value[1:-1].strip()
        prefix, sep, local = value.partition(":")
        if sep and prefix in self.prefixes and not local.startswith("//"):
            value = self.prefixes[prefix] + local
        if not _IRI_RE.match(value):
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
        return self._remote_spans(text, threshold, fold, surname, max_ngram, k, max_lookups)

    def _remote_spans(self, text: str, threshold: float, fold: bool, surname: bool,
                      max_ngram: int, k: int, max_lookups: int) -> list[Span]:
        words = [(m.start(), m.end(), m.group().casefold()) for m in _WORD_RE.finditer(text)]
        grams = [(j - i + 1, i, j) for i in range(len(words))
                 for j in range(i, min(len(words), i + max_ngram))
                 if words[i][2] not in STOPWORDS and words[j][2] not in STOPWORDS]
        grams.sort(key=lambda g: (-g[0], g[1]))
        taken: set[int] = set()
        spans: list[Span] = []
        lookups = 0
        for _, i, j in grams:
            if not taken.isdisjoint(range(i, j + 1)) or lookups >= max_lookups:
                continue
            surface = text[words[i][0] : words[j][1]]
            if surface not in self._remote_span_cache:
                lookups += 1
                self._remote_span_cache[surface] = self.surface_forms(
                    surface, k, threshold=threshold, fold_accents=fold, surname=surname)
            cands = self._remote_span_cache[surface]
            if cands:
                taken.update(range(i, j + 1))
                spans.append(Span(words[i][0], words[j][1], surface, cands))
        return sorted(spans, key=lambda s: s.start)

    # -- tool 2: ontology ------------------------------------------------------------------

    def ontology(self, iri: str) -> OntologyInfo:
        """Describe an entity, class or property (partial results carry ``notes``)."""
        full = self.expand_iri(iri)
        return _OntologyBrowser(self, full).describe()

    def classes(self) -> list[SchemaItem]:
        """Every class with its instance count (declared classes without instances count 0)."""
        def compute() -> list[SchemaItem]:
            counts: dict[str, int] = {}
            for c, n in self._rows("SELECT ?c (COUNT(?s) AS ?n) WHERE { ?s a ?c FILTER(isIRI(?c)) } "
                                   "GROUP BY ?c ORDER BY DESC(?n)"):
                if c and n:
                    counts[c.value] = int(n.value)
            for (c,) in self._rows(f"SELECT DISTINCT ?c WHERE {{ VALUES ?k {{ {_values(_CLASS_TYPES)} }} "
                                   "?c a ?k FILTER(isIRI(?c)) }"):
                if c:
                    counts.setdefault(c.value, 0)
            return self._items(counts)

        return self._cached_schema("classes", compute)

    def predicates(self) -> list[SchemaItem]:
        """Every predicate with its triple count."""
        def compute() -> list[SchemaItem]:
            counts = {p.value: int(n.value) for p, n in self._rows(
                "SELECT ?p (COUNT(*) AS ?n) WHERE { ?s ?p ?o } GROUP BY ?p ORDER BY DESC(?n)") if p and n}
            return self._items(counts)

        return self._cached_schema("predicates", compute)

    def _items(self, counts: Mapping[str, int]) -> list[SchemaItem]:
        labels = self.labeler.labels(counts)
        items = [SchemaItem(i, labels.get(i), n) for i, n in counts.items()]
        return sorted(items, key=lambda x: (-(x.count or 0), x.iri))

    def _cached_schema(self, what: str, compute: Callable[[], list[SchemaItem]]) -> list[SchemaItem]:
        key = (self.kg.fingerprint, what)
        with self._schema_lock:
            if key in self._schema_cache:
                return list(self._schema_cache[key])
        items = compute()
        with self._schema_lock:
            self._schema_cache[key] = items
        return list(items)

    def _rows(self, sparql: str, timeout: float | None = None) -> list[tuple[Term | None, ...]]:
        budget = max(self.timeout_s, 30.0) if timeout is None else timeout
        return self.kg.query(sparql, timeout=budget, max_rows=_BUILD_ROWS).rows

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
        except UpdateNotAllowed as exc:
            return _failed(query, "update_rejected", exc)
        except QuerySyntaxError as exc:
            return _failed(query, "syntax", exc)
        except UnsupportedFunction as exc:
            return _failed(query, "unsupported_function", exc)
        except QueryTimeout as exc:
            return _failed(query, "timeout", exc)
        except KGError as exc:
            return _failed(query, "execution", exc)
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


# --------------------------------------------------------------------------------------------
# Ontology lookup
# --------------------------------------------------------------------------------------------


class _OntologyBrowser:
    """Answers one ``ontology(iri)`` call; each sub-query failing only adds a note."""

    def __init__(self, tools: Tools, iri: str) -> None:
        self.tools = tools
        self.kg = tools.kg
        self.iri = iri
        self.ref = f"<{iri}>"
        self.n = tools.examples
        self.limit = tools.max_predicates
        self.info = OntologyInfo(iri=iri, kind="unknown")

    def _select(self, what: str, sparql: str, max_rows: int = 10_000) -> list[tuple[Term | None, ...]]:
        try:
            return self.kg.query(sparql, timeout=self.tools.timeout_s, max_rows=max_rows).rows
        except KGError as exc:
            self.info.notes.append(f"{what} unavailable: {exc}")
            return []

    def _kind(self) -> Literal["entity", "class", "property", "unknown"]:
        r = self.ref
        rows = self._select("kind", f"""SELECT ?kind WHERE {{
          {{ SELECT ("property" AS ?kind) WHERE {{ ?s {r} ?o }} LIMIT 1 }}
          UNION {{ SELECT ("property" AS ?kind) WHERE {{ {r} a ?t VALUES ?t {{ {_values(_PROPERTY_TYPES)} }} }} LIMIT 1 }}
          UNION {{ SELECT ("class" AS ?kind) WHERE {{ ?s a {r} }} LIMIT 1 }}
          UNION {{ SELECT ("class" AS ?kind) WHERE {{ {r} a ?t VALUES ?t {{ {_values(_CLASS_TYPES)} }} }} LIMIT 1 }}
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
        info.types = self._schema_items({t: None for t in types})
        if info.kind == "entity":
            self._entity()
        elif info.kind == "class":
            self._class()
        else:
            self._property()
        if self.tools.group_namespaces:
            info.predicates = _group_namespaces(info.predicates, self.n)
        self._label_examples()
        return info

    def _label_and_comment(self) -> None:
        self.info.label = self.tools.label(self.iri)
        rows = self._select("comment", f"SELECT ?p ?c WHERE {{ VALUES ?p {{ {_values(_COMMENT_PREDICATES)} }} "
                                       f"{self.ref} ?p ?c FILTER(isLiteral(?c)) }}")
        ranked = sorted((_label_rank(p.value, c.lang, _COMMENT_PREDICATES, self.tools._langs), c.value)
                        for p, c in rows if p and c)
        if ranked:
            self.info.comment = ranked[0][1]

    def _schema_items(self, counts: Mapping[str, int | None]) -> list[SchemaItem]:
        labels = self.tools.labeler.labels(counts)
        return [SchemaItem(i, labels.get(i), n) for i, n in counts.items()]

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
        rows = self._select("instance count", f"SELECT (COUNT(DISTINCT ?s) AS ?n) WHERE {{ ?s a {r} }}")
        info.instance_count = int(rows[0][0].value) if rows and rows[0][0] is not None else None
        subs = self._select("subclasses", f"SELECT DISTINCT ?c WHERE {{ ?c <{RDFS}subClassOf> {r} FILTER(?c != {r}) }} LIMIT 100")
        sups = self._select("superclasses", f"SELECT DISTINCT ?c WHERE {{ {r} <{RDFS}subClassOf> ?c FILTER(?c != {r}) }} LIMIT 100")
        info.subclasses = self._schema_items({c.value: None for (c,) in subs if c is not None})
        info.superclasses = self._schema_items({c.value: None for (c,) in sups if c is not None})
        out = self._predicate_counts("instance predicates", f"?s a {r} . ?s ?p ?o FILTER(?p != <{RDF_TYPE}>)", "out")
        inc = self._predicate_counts("incoming predicates", f"?s a {r} . ?x ?p ?s", "in")
        self._fill_examples(out, lambda p: f"SELECT DISTINCT ?v WHERE {{ ?s a {r} ; <{p}> ?v }} LIMIT {self.n}")
        self._fill_examples(inc, lambda p: f"SELECT DISTINCT ?v WHERE {{ ?s a {r} . ?v <{p}> ?s }} LIMIT {self.n}")
        info.predicates = out + inc
        info.examples = [ExampleValue.of(s) for (s,) in self._select(
            "instances", f"SELECT ?s WHERE {{ ?s a {r} }} LIMIT {self.n}") if s is not None]

    def _property(self) -> None:
        r, info = self.ref, self.info
        rows = self._select("triple count", f"SELECT (COUNT(*) AS ?n) WHERE {{ ?s {r} ?o }}")
        info.count = int(rows[0][0].value) if rows and rows[0][0] is not None else None
        domain: dict[str, int | None] = {}
        range_: dict[str, int | None] = {}
        for (d,) in self._select("declared domain", f"SELECT ?d WHERE {{ {r} <{RDFS}domain> ?d FILTER(isIRI(?d)) }}"):
            if d:
                domain[d.value] = None
        for (d,) in self._select("declared range", f"SELECT ?d WHERE {{ {r} <{RDFS}range> ?d FILTER(isIRI(?d)) }}"):
            if d:
                range_[d.value] = None
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
        info.domain = self._schema_items(domain)
        info.range = self._schema_items(range_)
        info.example_pairs = [(ExampleValue.of(s), ExampleValue.of(o)) for s, o in self._select(
            "examples", f"SELECT ?s ?o WHERE {{ ?s {r} ?o }} LIMIT {self.n}") if s and o]
        if self.tools.group_namespaces:
            name = local_name(self.iri).casefold()
            try:
                info.same_as = [p.iri for p in self.tools.predicates()
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
        deadline = time.monotonic() + max(self.tools.timeout_s, 1.0)
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
        labels = self.tools.labeler.labels(iris)
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
