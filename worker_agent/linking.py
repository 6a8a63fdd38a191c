"""Entity linking: from a surface form ("Ms. Brant", "Jürgen Muller") to the IRIs it may name.

The concept covers text normalization (casefolding, accent folding, IRI local names read as
words), the scored lookup itself and its results (:class:`Candidate`, :class:`Span`), and the
reverse direction, the display label of an IRI (:class:`Labeler`). Lookup backends:

* embedded stores get a :class:`LabelIndex`, built once per KG fingerprint and label-predicate
  set: every label-like literal plus the IRI's local name, an inverted token index and rapidfuzz
  scoring, fast enough to scan whole questions for mentions (:meth:`LabelIndex.match_spans`);
* remote endpoints are searched with SPARQL (:class:`SparqlLookup`: case-insensitive
  ``CONTAINS``/``REGEX`` on label predicates, or Virtuoso's ``bif:contains``), or through a
  DBpedia-Lookup-style HTTP service (:class:`ServiceLookup`).

Every backend scores candidates with the same token-alignment scorer, so scores (0-100) mean
the same thing everywhere. Data is read only through ``KnowledgeGraph.query``.
"""

from __future__ import annotations

import heapq
import re
import threading
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from operator import itemgetter
from typing import Any, ClassVar, Literal
from urllib.parse import unquote

from rapidfuzz import fuzz, process

from worker_agent.kg import KNOWN_PREFIXES, KGError, KnowledgeGraph, Term

__all__ = [
    "DEFAULT_LABEL_PREDICATES",
    "IRI_RE",
    "STOPWORDS",
    "TITLES",
    "WHOLE_RESULT_ROWS",
    "MAX_OBJECT_IRIS",
    "Candidate",
    "LabelIndex",
    "Labeler",
    "ServiceLookup",
    "Span",
    "SparqlLookup",
    "ToolError",
    "compact_iri",
    "fold_accents",
    "iri_values",
    "label_rank",
    "local_name",
    "local_name_surface",
    "ordered_label_predicates",
    "scan_spans",
    "tokenize",
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
# Local names that make a literal-valued domain predicate label-like (e.g. CK25's pv:name).
_AUTO_LABEL_LOCAL_NAMES = frozenset({"name", "label", "title"})

# Surface-form weights: a local name or a bare surname is weaker evidence than a real label.
_W_LABEL = 1.0
_W_VARIANT = 0.97  # label without a trailing "(qualifier)"
_W_ALT = 0.98
_W_SURNAME = 0.95
_W_LOCAL = 0.9
# IRIs used only as objects, with no label and no type (CK25's dbpedia:Poland): their local name
# is all there is. Same weight as any local name, so a real label that matches as well wins.
_W_OBJECT_LOCAL = _W_LOCAL
# Above this many such IRIs the KG is too large to index them all (memory, build time); the
# index then leaves them out and says so in its stats.
MAX_OBJECT_IRIS = 500_000
# Predicates of these namespaces (rdf:type, rdfs:range, owl:sameAs...) point at vocabulary terms
# (owl:Class, xsd:date, foaf:Person), not at entities a question names.
_SCHEMA_NAMESPACES = (RDF, RDFS, OWL)
# Objects that are files or web pages (foaf:depiction icons), not things.
_DOCUMENT_RE = re.compile(
    r"\.(?:svg|png|jpe?g|gif|webp|bmp|tiff?|ico|pdf|html?|php|aspx?|xml|json|rdf|ttl|owl|nt|zip)$",
    re.IGNORECASE,
)

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
IRI_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:[^\s<>\"{}|^`\\]*$")
_SAFE_LOCAL_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


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
# SPARQL helpers shared by the lookups, the labeler and the ontology tool
# --------------------------------------------------------------------------------------------

# Readers of whole result sets (the label index, schema counts) pass this as max_rows so the
# KG's default row cap cannot silently cut them.
WHOLE_RESULT_ROWS = 1_000_000_000


def iri_values(iris: Iterable[str]) -> str:
    """IRIs as the body of a SPARQL ``VALUES`` block: ``<a> <b>``."""
    return " ".join(f"<{i}>" for i in iris)


def label_rank(pred: str, lang: str | None, predicates: Sequence[str],
               langs: Sequence[str]) -> tuple[int, int]:
    """Sort key of a label: wanted language first, then the predicate's preference order."""
    lang_rank = 0 if not lang or any(lang.lower().startswith(l) for l in langs) else 1
    pred_rank = predicates.index(pred) if pred in predicates else len(predicates)
    return lang_rank, pred_rank


def ordered_label_predicates(extra: Iterable[str]) -> list[str]:
    """Label predicates in display-preference order: rdfs:label ... custom ... skos:altLabel."""
    ordered = [p for p in DEFAULT_LABEL_PREDICATES if p != _ALT_LABEL]
    ordered += sorted(set(extra) - set(DEFAULT_LABEL_PREDICATES))
    ordered.append(_ALT_LABEL)
    return ordered


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _chunked_rows(kg: KnowledgeGraph, iris: Sequence[str], size: int,
                  query: Callable[[Sequence[str]], str], *, timeout: float | None,
                  max_rows: int) -> Iterator[tuple[Sequence[str], list[tuple[Term | None, ...]]]]:
    """``(chunk, rows)`` per chunk of ``iris``; a chunk whose query fails is skipped, because
    every caller fetches optional extras (types, degrees, labels) that only refine an answer."""
    for chunk in _chunks(iris, size):
        try:
            result = kg.query(query(chunk), timeout=timeout, max_rows=max_rows)
        except KGError:
            continue
        yield chunk, result.rows


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


class _EntityTable:
    """Entities as parallel lists (IRI, display label, types, degree) plus their surface forms;
    turns per-entity form scores into ranked candidates the same way for every backend."""

    iris: list[str]
    labels: list[str]
    entity_types: Sequence[Sequence[str]]
    degrees: list[int]
    forms: list[_Form]

    def _candidate(self, eid: int, score: float, fid: int) -> Candidate:
        return Candidate(iri=self.iris[eid], label=self.labels[eid],
                         types=list(self.entity_types[eid]), score=round(min(score, 100.0), 1),
                         popularity=self.degrees[eid], matched_label=self.forms[fid].text)

    def _rank(self, best: Mapping[int, tuple[float, int]], k: int, threshold: float) -> list[Candidate]:
        """Candidates scoring >= threshold: best score first, then popularity, then label."""
        hits = [(round(s, 1), self.degrees[e], e, f) for e, (s, f) in best.items() if s >= threshold]
        hits.sort(key=lambda h: (-h[0], -h[1], self.labels[h[2]]))
        return [self._candidate(e, s, f) for s, _, e, f in hits[:k]]


# --------------------------------------------------------------------------------------------
# Embedded label index
# --------------------------------------------------------------------------------------------


class LabelIndex(_EntityTable):
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
                 build_seconds: float = 0.0, stats: Mapping[str, Any] | None = None) -> None:
        self.iris = iris
        self.labels = labels
        self.entity_types = types
        self.degrees = popularity
        self.forms = forms
        self.predicates = tuple(predicates)
        self.build_seconds = build_seconds
        # What the build saw and left out: counts plus ``notes`` (human-readable lines).
        self.stats: dict[str, Any] = {"entities": len(iris), "forms": len(forms), "notes": [],
                                      **(stats or {})}
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
              timeout: float | None = 300.0,
              max_object_iris: int = MAX_OBJECT_IRIS) -> LabelIndex:
        """Read labels, types and degrees from ``kg`` (four or five queries) and index them.

        Entities are the IRIs with a label or a type, plus IRIs that occur as objects of a
        data predicate (not rdf:/rdfs:/owl:) with neither, such as CK25's external
        ``dbpedia:Poland``: those are found by their local name only ("Poland",
        "United States"). When there are more than ``max_object_iris`` of them, none is indexed
        and ``stats["notes"]`` says so."""
        started = time.perf_counter()

        def rows(sparql: str) -> list[tuple[Term | None, ...]]:
            result = kg.query(sparql, timeout=timeout, max_rows=WHOLE_RESULT_ROWS)
            if result.truncated:
                raise KGError(f"{kg.name}: label index query was truncated; the KG is too large to index")
            return result.rows

        extra = set(label_predicates)
        if auto_label_predicates:
            for (p,) in rows("SELECT DISTINCT ?p WHERE { ?s ?p ?o FILTER(isLiteral(?o)) }"):
                if p is not None and local_name(p.value).casefold() in _AUTO_LABEL_LOCAL_NAMES:
                    extra.add(p.value)
        predicates = ordered_label_predicates(extra)

        labels: dict[str, list[tuple[tuple[int, int], str, str]]] = defaultdict(list)
        for s, p, o in rows(
            f"SELECT ?s ?p ?o WHERE {{ VALUES ?p {{ {iri_values(predicates)} }} "
            "?s ?p ?o FILTER(isIRI(?s) && isLiteral(?o)) }"
        ):
            if s and p and o and o.value.strip():
                rank = label_rank(p.value, o.lang, predicates, langs)
                labels[s.value].append((rank, p.value, o.value.strip()))
        types: dict[str, list[str]] = defaultdict(list)
        for s, t in rows("SELECT ?s ?t WHERE { ?s a ?t FILTER(isIRI(?s) && isIRI(?t)) }"):
            if s and t:
                types[s.value].append(t.value)
        degree: dict[str, int] = defaultdict(int)
        for e, n in rows("SELECT ?e (COUNT(*) AS ?n) WHERE { ?e ?p ?o FILTER(isIRI(?e)) } GROUP BY ?e"):
            if e and n:
                degree[e.value] += int(n.value)
        data_objects: list[str] = []  # IRIs some data predicate points at
        for e, n, d in rows(_IN_DEGREE_QUERY):
            if e and n:
                degree[e.value] += int(n.value)
                if d and int(d.value) > 0:
                    data_objects.append(e.value)

        iris = sorted(set(labels) | set(types))
        display: list[str] = []
        forms: list[_Form] = []
        for eid, iri in enumerate(iris):
            entity_labels = sorted(labels.get(iri, []))
            local = local_name_surface(iri)
            display.append(entity_labels[0][2] if entity_labels else (local or local_name(iri)))
            forms.extend(_entity_forms(eid, iri, entity_labels, types.get(iri, ()), local))
        objects, stats = _object_only_entities(data_objects, labels, types, max_object_iris)
        for iri, local in objects:
            forms.append(_Form(len(iris), local, "local", _W_OBJECT_LOCAL))
            iris.append(iri)
            display.append(local)
        index = cls(
            iris=iris, labels=display, types=[tuple(sorted(set(types.get(i, ())))) for i in iris],
            popularity=[degree.get(i, 0) for i in iris], forms=forms, predicates=predicates,
            stats=stats,
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


_IN_DEGREE_QUERY = (
    "SELECT ?e (COUNT(*) AS ?n) (SUM(IF(" + " || ".join(
        f'STRSTARTS(STR(?p), "{ns}")' for ns in _SCHEMA_NAMESPACES) + ", 0, 1)) AS ?d) "
    "WHERE { ?s ?p ?e FILTER(isIRI(?e)) } GROUP BY ?e"
)


def _object_only_entities(objects: Iterable[str], labels: Mapping[str, Any],
                          types: Mapping[str, Any], cap: int) -> tuple[list[tuple[str, str]], dict[str, Any]]:
    """``(iri, local-name surface)`` of object IRIs with no label and no type, and index stats.

    Only http(s) IRIs whose local name reads as words count: namespaces (trailing ``/`` or
    ``#``), files and pages (``icon.svg``, query strings) and opaque ids name nothing a question
    would say. More than ``cap`` of them: none (a note in the stats says why)."""
    found: list[tuple[str, str]] = []
    for iri in objects:
        if iri in labels or iri in types or not iri.startswith(("http://", "https://")):
            continue
        if iri.endswith(("/", "#")) or "?" in iri or _DOCUMENT_RE.search(iri):
            continue
        local = local_name_surface(iri)
        if local:
            found.append((iri, local))
    stats: dict[str, Any] = {"object_only_iris": len(found), "object_only_indexed": len(found)}
    if len(found) > cap:
        stats["object_only_indexed"] = 0
        stats["notes"] = [f"{len(found)} IRIs used only as objects, without label or type, were not "
                          f"indexed (more than {cap}); link them with SPARQL instead"]
        return [], stats
    found.sort()
    return found, stats


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


class _AdHocIndex(_EntityTable):
    """Scores a handful of entities fetched remotely with the same scorer as LabelIndex."""

    def __init__(self) -> None:
        self.iris: list[str] = []
        self.labels: list[str] = []
        self.entity_types: list[list[str]] = []
        self.degrees: list[int] = []
        self.forms: list[_Form] = []

    def add(self, iri: str, labels: Sequence[str], types: Sequence[str], popularity: int) -> None:
        eid = len(self.iris)
        self.iris.append(iri)
        self.labels.append(labels[0] if labels else (local_name_surface(iri) or local_name(iri)))
        self.entity_types.append(list(types))
        self.degrees.append(popularity)
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
        return self._rank(best, k, threshold)


class SparqlLookup:
    """Entity lookup on any SPARQL endpoint: label predicates filtered by case-insensitive
    ``CONTAINS`` (``REGEX`` with accent classes when folding accents), or Virtuoso's
    ``bif:contains`` full-text index; candidates re-scored locally."""

    def __init__(self, kg: KnowledgeGraph, label_predicates: Iterable[str] = (), *,
                 langs: Sequence[str] = ("en",), virtuoso: bool = False, limit: int = 200,
                 timeout: float | None = 10.0) -> None:
        self.kg = kg
        self.predicates = ordered_label_predicates(label_predicates)
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
            f"SELECT DISTINCT ?s ?label WHERE {{ VALUES ?p {{ {iri_values(self.predicates)} }} "
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
        """Types refine ranking only: a failed chunk leaves its entities untyped."""
        out: dict[str, list[str]] = defaultdict(list)
        for _, rows in _chunked_rows(
            self.kg, iris, 100, lambda c: f"SELECT ?s ?t WHERE {{ VALUES ?s {{ {iri_values(c)} }} ?s a ?t }}",
            timeout=self.timeout, max_rows=10_000,
        ):
            for s, t in rows:
                if s and t and t.kind == "iri":
                    out[s.value].append(t.value)
        return out

    def _degrees(self, iris: Sequence[str]) -> dict[str, int]:
        """Popularity is a tie-breaker: 0 for a failed chunk is an honest "unknown"."""
        out: dict[str, int] = {}
        for _, rows in _chunked_rows(
            self.kg, iris, 50, lambda c: (f"SELECT ?s (COUNT(*) AS ?n) WHERE {{ VALUES ?s {{ {iri_values(c)} }} "
                                          "{ ?s ?p ?o } UNION { ?x ?p ?s } } GROUP BY ?s"),
            timeout=self.timeout, max_rows=10_000,
        ):
            for s, n in rows:
                if s and n:
                    out[s.value] = int(n.value)
        return out


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


def scan_spans(text: str, lookup: Callable[[str], list[Candidate]], *, max_ngram: int,
               max_lookups: int, cache: dict[str, list[Candidate]]) -> list[Span]:
    """Entity mentions in ``text`` through a per-surface ``lookup`` (remote KGs, where no index
    can score every n-gram at once): n-grams not starting or ending with a stopword, longest
    first, each looked up unless it overlaps a mention already found. At most ``max_lookups``
    lookups run; ``cache`` (keyed by surface) carries answers across calls."""
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
        if surface not in cache:
            lookups += 1
            cache[surface] = lookup(surface)
        cands = cache[surface]
        if cands:
            taken.update(range(i, j + 1))
            spans.append(Span(words[i][0], words[j][1], surface, cands))
    return sorted(spans, key=lambda s: s.start)


# --------------------------------------------------------------------------------------------
# Labels for IRIs shown in ontology answers and previews
# --------------------------------------------------------------------------------------------


class Labeler:
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

    def label(self, iri: str) -> str | None:
        return self.labels([iri]).get(iri)

    def labels(self, iris: Iterable[str]) -> dict[str, str]:
        """IRI -> display label for the given IRIs that have one."""
        wanted = list(dict.fromkeys(iris))
        if self.index is not None:
            found = {i: self.index.label(i) for i in wanted}
            return {i: l for i, l in found.items() if l}
        missing = [i for i in wanted if i not in self._cache and IRI_RE.match(i)]
        # Labels are a courtesy: a chunk that fails stays uncached (retried next time), its IRIs unlabelled.
        for chunk, rows in _chunked_rows(
            self.kg, missing, 50, lambda c: (f"SELECT ?s ?p ?l WHERE {{ VALUES ?s {{ {iri_values(c)} }} "
                                             f"VALUES ?p {{ {iri_values(self.predicates)} }} "
                                             "?s ?p ?l FILTER(isLiteral(?l)) }"),
            timeout=self.timeout, max_rows=5_000,
        ):
            best: dict[str, tuple[tuple[int, int], str]] = {}
            for s, p, l in rows:
                if s and p and l:
                    rank = label_rank(p.value, l.lang, self.predicates, self.langs)
                    if s.value not in best or rank < best[s.value][0]:
                        best[s.value] = (rank, l.value)
            with self._lock:
                for iri in chunk:
                    self._cache[iri] = best[iri][1] if iri in best else None
        return {i: self._cache[i] for i in wanted if self._cache.get(i)}  # type: ignore[misc]
