"""Knowledge graphs behind one small interface: ``KnowledgeGraph.query(sparql) -> QueryResult``.

Two backends:

* :class:`OxigraphKG` — an embedded pyoxigraph store loaded from RDF files (in memory, or a
  persistent on-disk store keyed by the files' contents so later starts skip parsing);
* :class:`EndpointKG` — a remote SPARQL endpoint through SPARQLWrapper, with retries.

Both are read-only by construction: :func:`check_read_only` rejects SPARQL Update before a store
or endpoint ever sees the request. Results are normalized into :class:`Term` rows so strategies,
metrics and traces never depend on which backend answered.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import os
import re
import shutil
import socket
import threading
import time
import traceback
import urllib.error
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol, cast, runtime_checkable

import pyoxigraph as ox

from worker_agent import sparql_lexer

__all__ = [
    "KNOWN_PREFIXES",
    "EndpointError",
    "EndpointKG",
    "KGError",
    "KnowledgeGraph",
    "OxigraphKG",
    "QueryResult",
    "QuerySyntaxError",
    "QueryTimeout",
    "Term",
    "UnsupportedFunction",
    "UpdateNotAllowed",
    "add_missing_prefixes",
    "check_read_only",
    "open_kg",
]

XSD = "http://www.w3.org/2001/XMLSchema#"
XSD_STRING = XSD + "string"
RDF_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
USER_AGENT = "sparql-researcher/0.1 (+text2sparql)"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 500) -> str:
    """Collapse whitespace so every error message is exactly one line (traces, CLI tables)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class KGError(Exception):
    """Base class of every knowledge-graph error; ``str(e)`` is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


class QuerySyntaxError(KGError):
    """The query does not parse (locally, or the endpoint answered HTTP 400)."""


class UpdateNotAllowed(KGError):
    """The request is a SPARQL Update (INSERT/DELETE/LOAD/CLEAR/DROP/CREATE/ADD/MOVE/COPY)."""


class UnsupportedFunction(KGError):
    """The query calls a function the store does not implement; ``.function`` names it."""

    def __init__(self, function: str, message: str | None = None) -> None:
        self.function = function
        super().__init__(
            message
            or f"function {function} is not supported by the embedded Oxigraph store"
        )


class QueryTimeout(KGError):
    """The query did not finish within its time budget."""


class EndpointError(KGError):
    """The endpoint is unreachable or kept failing (HTTP errors) after the retries."""


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


def _escape_literal(value: str) -> str:
    return (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )


@dataclass(frozen=True)
class Term:
    """One RDF term of a result row.

    Literals are normalized the RDF 1.1 way both backends agree on: a plain string has
    ``datatype=None`` (not ``xsd:string``) and a language-tagged string has ``lang`` set and
    ``datatype=None`` (not ``rdf:langString``); every other literal carries its datatype IRI.
    """

    kind: Literal["iri", "literal", "bnode"]
    value: str
    datatype: str | None = None
    lang: str | None = None

    def n3(self) -> str:
        """The term in N-Triples/SPARQL syntax, e.g. ``<http://x>``, ``"a"@en``, ``_:b0``."""
        if self.kind == "iri":
            return f"<{self.value}>"
        if self.kind == "bnode":
            return f"_:{self.value}"
        text = f'"{_escape_literal(self.value)}"'
        if self.lang:
            return f"{text}@{self.lang}"
        if self.datatype:
            return f"{text}^^<{self.datatype}>"
        return text

    def to_sparql_json(self) -> dict[str, str]:
        """The term as one binding of the W3C SPARQL 1.1 JSON results format."""
        if self.kind == "iri":
            return {"type": "uri", "value": self.value}
        if self.kind == "bnode":
            return {"type": "bnode", "value": self.value}
        out = {"type": "literal", "value": self.value}
        if self.lang:
            out["xml:lang"] = self.lang
        elif self.datatype:
            out["datatype"] = self.datatype
        return out

    @classmethod
    def literal(
        cls, value: str, datatype: str | None = None, lang: str | None = None
    ) -> Term:
        """A normalized literal (drops ``xsd:string`` / ``rdf:langString``, see class doc)."""
        if lang:
            return cls("literal", value, None, lang.lower())
        if datatype in (XSD_STRING, RDF_LANG_STRING):
            datatype = None
        return cls("literal", value, datatype, None)


Row = tuple[Term | None, ...]


@dataclass
class QueryResult:
    """Normalized result of one query: rows for SELECT (and CONSTRUCT/DESCRIBE as
    ``subject/predicate/object`` rows), or a boolean for ASK."""

    variables: list[str]
    rows: list[Row] = field(default_factory=list)
    boolean: bool | None = None
    truncated: bool = False

    @property
    def is_ask(self) -> bool:
        return self.boolean is not None

    def to_sparql_json(self) -> dict[str, Any]:
        """W3C SPARQL 1.1 Query Results JSON; unbound variables are omitted from a binding."""
        if self.is_ask:
            return {"head": {}, "boolean": bool(self.boolean)}
        bindings = [
            {
                var: term.to_sparql_json()
                for var, term in zip(self.variables, row)
                if term is not None
            }
            for row in self.rows
        ]
        return {
            "head": {"vars": list(self.variables)},
            "results": {"bindings": bindings},
        }


@runtime_checkable
class KnowledgeGraph(Protocol):
    """Anything that answers read-only SPARQL queries with normalized results."""

    name: str
    fingerprint: str

    def query(
        self, sparql: str, *, timeout: float | None = None, max_rows: int | None = None
    ) -> QueryResult: ...


# --------------------------------------------------------------------------------------------
# Keywords and prefixes, found outside IRIs, strings and comments (worker_agent.sparql_lexer)
# --------------------------------------------------------------------------------------------

_UPDATE_KEYWORDS = frozenset(
    {
        "INSERT",
        "DELETE",
        "LOAD",
        "CLEAR",
        "DROP",
        "CREATE",
        "ADD",
        "MOVE",
        "COPY",
        "WITH",
    }
)
_QUERY_FORMS = frozenset({"SELECT", "ASK", "CONSTRUCT", "DESCRIBE"})


def check_read_only(sparql: str) -> None:
    """Raise :class:`UpdateNotAllowed` if ``sparql`` is (or contains) a SPARQL Update operation.

    Only bare keywords count: words inside IRIs, string literals, comments, variables
    (``?delete``) and prefixed names (``ex:insert``) are ignored. None of the update keywords
    is a keyword of the SPARQL 1.1 query language, so a bare one can only mean an update.
    """
    for word in sparql_lexer.keywords(sparql):
        if word in _UPDATE_KEYWORDS:
            raise UpdateNotAllowed(
                f"SPARQL update keyword {word} is not allowed: the knowledge graph is read-only"
            )


def _query_form(sparql: str) -> str | None:
    """SELECT / ASK / CONSTRUCT / DESCRIBE, whichever comes first outside the prologue."""
    return next((word for word in sparql_lexer.keywords(sparql) if word in _QUERY_FORMS), None)


def _prefix_usage(sparql: str) -> tuple[set[str], list[str]]:
    """(declared prefixes, used prefixes in first-use order); ``""`` is the empty prefix."""
    declared: set[str] = set()
    used: list[str] = []
    expect_decl = False
    for kind, text, _, _ in sparql_lexer.significant(sparql):
        if kind == "word" and text.upper() == "PREFIX":
            expect_decl = True
            continue
        if kind == "pname":
            prefix = text.split(":", 1)[0]
            if expect_decl:
                declared.add(prefix)
            elif prefix != "_" and prefix not in used:  # "_:" is a blank node label
                used.append(prefix)
        expect_decl = False
    return declared, used


def _undeclared_prefixes(sparql: str) -> list[str]:
    declared, used = _prefix_usage(sparql)
    return [p for p in used if p not in declared]


KNOWN_PREFIXES: dict[str, str] = {
    "rdf": "http://www.w3.org/1999/02/22-rdf-syntax-ns#",
    "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
    "xsd": XSD,
    "owl": "http://www.w3.org/2002/07/owl#",
    "skos": "http://www.w3.org/2004/02/skos/core#",
    "foaf": "http://xmlns.com/foaf/0.1/",
    "schema": "http://schema.org/",
    "dc": "http://purl.org/dc/elements/1.1/",
    "dct": "http://purl.org/dc/terms/",
    "dcterms": "http://purl.org/dc/terms/",
    "prov": "http://www.w3.org/ns/prov#",
    "geo": "http://www.w3.org/2003/01/geo/wgs84_pos#",
    "vcard": "http://www.w3.org/2006/vcard/ns#",
    "sh": "http://www.w3.org/ns/shacl#",
    # DBpedia (TEXT2SPARQL db25)
    "dbo": "http://dbpedia.org/ontology/",
    "dbr": "http://dbpedia.org/resource/",
    "res": "http://dbpedia.org/resource/",
    "dbp": "http://dbpedia.org/property/",
    "dbc": "http://dbpedia.org/resource/Category:",
    "yago": "http://dbpedia.org/class/yago/",
    # Wikidata
    "wd": "http://www.wikidata.org/entity/",
    "wdt": "http://www.wikidata.org/prop/direct/",
    "p": "http://www.wikidata.org/prop/",
    "ps": "http://www.wikidata.org/prop/statement/",
    "pq": "http://www.wikidata.org/prop/qualifier/",
    "wikibase": "http://wikiba.se/ontology#",
    "bd": "http://www.bigdata.com/rdf#",
    # Corporate knowledge graph (TEXT2SPARQL ck25)
    "pv": "http://ld.company.org/prod-vocab/",
    "prodi": "http://ld.company.org/prod-instances/",
}


def add_missing_prefixes(
    sparql: str, prefixes: Mapping[str, str] = KNOWN_PREFIXES
) -> str:
    """Prepend ``PREFIX`` declarations for prefixes the query uses but does not declare.

    Only prefixes found in ``prefixes`` are added; declared ones are never duplicated and
    unknown ones are left for the parser to report. The query is returned unchanged when
    nothing is missing.
    """
    missing = [p for p in _undeclared_prefixes(sparql) if p in prefixes]
    if not missing:
        return sparql
    header = "".join(f"PREFIX {p}: <{prefixes[p]}>\n" for p in missing)
    return header + sparql


# --------------------------------------------------------------------------------------------
# Embedded Oxigraph store
# --------------------------------------------------------------------------------------------

_FORMATS: dict[str, ox.RdfFormat] = {
    ".ttl": ox.RdfFormat.TURTLE,
    ".turtle": ox.RdfFormat.TURTLE,
    ".nt": ox.RdfFormat.N_TRIPLES,
    ".ntriples": ox.RdfFormat.N_TRIPLES,
    ".nq": ox.RdfFormat.N_QUADS,
    ".nquads": ox.RdfFormat.N_QUADS,
    ".trig": ox.RdfFormat.TRIG,
    ".n3": ox.RdfFormat.N3,
    ".rdf": ox.RdfFormat.RDF_XML,
    ".owl": ox.RdfFormat.RDF_XML,
    ".xml": ox.RdfFormat.RDF_XML,
    ".jsonld": ox.RdfFormat.JSON_LD,
    ".json": ox.RdfFormat.JSON_LD,
}

# Bump when the on-disk layout or loading semantics change, so old stores are not reused.
_STORE_LAYOUT = "1"

# pyoxigraph reports an unimplemented function (e.g. the xsd:int cast) as a RuntimeError
# "The custom function <IRI> is not supported" when the query is prepared.
_UNSUPPORTED_FN_RE = re.compile(
    r"function\s+(<[^>]*>|\S+)\s+is not supported", re.IGNORECASE
)


def _rdf_format(path: Path) -> tuple[ox.RdfFormat, bool]:
    """(format, gzipped) guessed from the suffix, e.g. ``data.ttl`` or ``dump.nt.gz``."""
    suffixes = [s.lower() for s in path.suffixes]
    gzipped = bool(suffixes) and suffixes[-1] == ".gz"
    suffix = (
        suffixes[-2]
        if gzipped and len(suffixes) > 1
        else (suffixes[-1] if suffixes else "")
    )
    fmt = _FORMATS.get(suffix)
    if fmt is None or (gzipped and len(suffixes) < 2):
        known = ", ".join(sorted(_FORMATS))
        raise KGError(
            f"{path}: cannot guess the RDF format from the file name (known suffixes: {known}, optionally + .gz)"
        )
    return fmt, gzipped


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _term(node: Any) -> Term | None:
    if node is None:
        return None
    if isinstance(node, ox.NamedNode):
        return Term("iri", node.value)
    if isinstance(node, ox.BlankNode):
        return Term("bnode", node.value)
    if isinstance(node, ox.Literal):
        return Term.literal(node.value, node.datatype.value, node.language)
    # RDF-star quoted triples have no place in SPARQL 1.1 JSON; keep them readable as text.
    return Term("literal", str(node))


class OxigraphKG:
    """An embedded, read-only Oxigraph store loaded from RDF files.

    All triples are loaded into the default graph (quads keep their graph, and queries use the
    union of all graphs as the default graph), so queries see everything that was loaded.

    With ``store_dir`` the store lives on disk under ``store_dir/<key>`` where ``key`` hashes the
    files' names and contents; the first start builds it in a temporary directory and renames
    it into place (a crash never leaves a half-loaded store that later starts would trust),
    later starts reopen it read-only without parsing. ``loaded_from_cache`` tells which happened.
    """

    def __init__(
        self,
        files: Sequence[str | Path],
        *,
        store_dir: str | Path | None = None,
        timeout: float = 30.0,
        max_rows: int = 10_000,
    ) -> None:
        self.files = [
            Path(f) for f in ([files] if isinstance(files, (str, Path)) else files)
        ]
        if not self.files:
            raise KGError("OxigraphKG needs at least one RDF file")
        for path in self.files:
            if not path.is_file():
                raise KGError(f"{path}: RDF file not found")
            _rdf_format(path)  # fail on an unknown suffix before doing any work
        self.timeout = timeout
        self.max_rows = max_rows
        self.name = ", ".join(p.name for p in self.files)
        digests = [_file_digest(p) for p in self.files]
        # Order-independent: the same set of files is the same KG, however it was listed.
        self.fingerprint = hashlib.sha256(
            "\n".join(sorted(digests)).encode()
        ).hexdigest()
        self.loaded_from_cache = False
        self.store_path: Path | None = None
        started = time.perf_counter()
        if store_dir is None:
            self._store = ox.Store()
            self._load_into(self._store)
        else:
            key_material = (
                "\n".join(sorted(f"{p.name}\t{d}" for p, d in zip(self.files, digests)))
                + f"\nlayout={_STORE_LAYOUT}"
            )
            key = hashlib.sha256(key_material.encode()).hexdigest()
            self._store = self._open_persistent(Path(store_dir), key)
        self.load_seconds = time.perf_counter() - started

    # -- loading -------------------------------------------------------------------------

    def _load_into(self, store: ox.Store) -> None:
        for path in self.files:
            fmt, gzipped = _rdf_format(path)
            before = len(store)
            try:
                if gzipped:
                    with gzip.open(path, "rb") as fh:
                        store.bulk_load(input=cast(IO[bytes], fh), format=fmt)
                else:
                    store.bulk_load(path=str(path), format=fmt)
            except (SyntaxError, ValueError) as exc:
                raise KGError(f"{path}: cannot parse as {fmt.name}: {exc}") from exc
            except OSError as exc:
                raise KGError(f"{path}: cannot load: {exc}") from exc
            if len(store) == before:
                # e.g. a JSON file that is not JSON-LD parses to nothing: a silent empty KG would
                # make every gold answer empty and every score meaningless
                raise KGError(f"{path}: no RDF triples could be read from this file (is it {fmt.name}?)")

    def _open_persistent(self, store_dir: Path, key: str) -> ox.Store:
        final = store_dir / key
        self.store_path = final
        if final.is_dir():
            self.loaded_from_cache = True
            return self._open_read_only(final)
        store_dir.mkdir(parents=True, exist_ok=True)
        tmp = store_dir / f".tmp-{key[:16]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            store = ox.Store(str(tmp))
            self._load_into(store)
            store.flush()
            del store  # closes RocksDB so the directory can be renamed and reopened
            try:
                os.rename(tmp, final)
            except OSError:
                # Another process finished the same store first; theirs is equally good.
                if not final.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return self._open_read_only(final)

    @staticmethod
    def _open_read_only(path: Path) -> ox.Store:
        # Read-only opening lets several evaluation processes share one store concurrently.
        try:
            return ox.Store.read_only(str(path))
        except OSError as exc:
            raise KGError(
                f"{path}: cannot open the persistent Oxigraph store: {exc}"
            ) from exc

    def __len__(self) -> int:
        return len(self._store)

    # -- querying ------------------------------------------------------------------------

    def query(
        self, sparql: str, *, timeout: float | None = None, max_rows: int | None = None
    ) -> QueryResult:
        """Run a read-only query; raises QuerySyntaxError, UnsupportedFunction, QueryTimeout,
        UpdateNotAllowed. ``timeout``/``max_rows`` default to the instance settings."""
        check_read_only(sparql)
        budget = self.timeout if timeout is None else timeout
        cap = self.max_rows if max_rows is None else max_rows
        # pyoxigraph has no query timeout and no way to cancel a running query. Evaluation
        # runs in a daemon thread (pyoxigraph releases the GIL while evaluating) so the caller
        # gets QueryTimeout after ``budget`` seconds even if the store is blocked inside one
        # step (e.g. a big aggregate or sort). The abandoned thread stops at its next result
        # row, but a step that never yields a row keeps burning one CPU core until it ends
        # on its own: that is the honest limit of timeouts on the embedded store.
        deadline = time.monotonic() + budget if budget and budget > 0 else None
        cancel = threading.Event()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = self._evaluate(sparql, cap, deadline, cancel)
            except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
                _release_frames(exc)
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="oxigraph-query", daemon=True)
        worker.start()
        worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            cancel.set()
            raise QueryTimeout(
                f"query exceeded the {budget:g} s timeout on {self.name}"
            )
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    def _evaluate(
        self, sparql: str, cap: int, deadline: float | None, cancel: threading.Event
    ) -> QueryResult:
        try:
            solutions = self._store.query(sparql, use_default_graph_as_union=True,
                                          custom_functions=XSD_CASTS)
        except SyntaxError as exc:
            raise QuerySyntaxError(_syntax_message(sparql, str(exc))) from exc
        except RuntimeError as exc:
            raise _translate_runtime_error(exc) from exc
        if isinstance(solutions, ox.QueryBoolean):
            return QueryResult(variables=[], rows=[], boolean=bool(solutions))
        if isinstance(solutions, ox.QuerySolutions):
            variables = [v.value for v in solutions.variables]
            rows_iter: Iterable[Any] = (
                tuple(_term(t) for t in sol) for sol in solutions
            )
        else:  # CONSTRUCT / DESCRIBE
            variables = ["subject", "predicate", "object"]
            rows_iter = (
                (_term(t.subject), _term(t.predicate), _term(t.object))
                for t in solutions
            )
        return _collect(rows_iter, variables, cap, deadline, cancel, self.name)


def _collect(
    rows_iter: Iterable[Row],
    variables: list[str],
    cap: int,
    deadline: float | None,
    cancel: threading.Event,
    kg_name: str,
) -> QueryResult:
    rows: list[Row] = []
    truncated = False
    iterator = iter(rows_iter)
    while True:
        if cancel.is_set() or (deadline is not None and time.monotonic() > deadline):
            raise QueryTimeout(f"query exceeded its timeout on {kg_name}")
        try:
            row = next(iterator)
        except StopIteration:
            break
        except RuntimeError as exc:  # evaluation errors surface lazily, while iterating
            raise _translate_runtime_error(exc) from exc
        if cap is not None and cap >= 0 and len(rows) >= cap:
            truncated = True
            break
        rows.append(row)
    return QueryResult(variables=variables, rows=rows, truncated=truncated)


def _release_frames(exc: BaseException) -> None:
    """Drop the locals of the frames an exception (and its causes) keep alive.

    pyoxigraph result iterators are thread-bound: they must be dropped on the thread that
    created them, but a traceback would carry them over to the caller's thread."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def _translate_runtime_error(exc: Exception) -> KGError:
    match = _UNSUPPORTED_FN_RE.search(str(exc))
    if match:
        return UnsupportedFunction(match.group(1))
    return KGError(f"query evaluation failed: {exc}")


def _syntax_message(sparql: str, parser_message: str) -> str:
    """The parser message, plus a hint when undeclared prefixes are the likely cause (the
    parser itself reports those confusingly, e.g. 'expected ENCODE_FOR_URI')."""
    missing = _undeclared_prefixes(sparql)
    # the hint goes first: error messages are cut to one line of bounded length
    hint = ("undeclared prefix(es): " + ", ".join(f"{p}:" for p in missing) + "; ") if missing else ""
    return f"SPARQL syntax error: {hint}{parser_message}"


# --------------------------------------------------------------------------------------------
# XSD casts Oxigraph lacks
# --------------------------------------------------------------------------------------------

# SPARQL 1.1 requires casts to the primitive XSD types only; real queries (CK25's among them) also
# cast to derived integer types such as xsd:int. Oxigraph implements the primitive ones natively;
# these follow the XPath casting rules for the derived types (truncate numbers towards zero,
# accept integer lexical forms from strings, range-check), and give an error (unbound) otherwise.
_INTEGER_RANGES: dict[str, tuple[int | None, int | None]] = {
    "int": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
    "short": (-(2**15), 2**15 - 1),
    "byte": (-128, 127),
    "nonNegativeInteger": (0, None),
    "positiveInteger": (1, None),
    "nonPositiveInteger": (None, 0),
    "negativeInteger": (None, -1),
    "unsignedInt": (0, 2**32 - 1),
    "unsignedLong": (0, 2**64 - 1),
    "unsignedShort": (0, 2**16 - 1),
    "unsignedByte": (0, 255),
}
_NUMERIC = {XSD + t for t in ("integer", "decimal", "double", "float", *_INTEGER_RANGES)}


def _integer_cast(local: str) -> Any:
    low, high = _INTEGER_RANGES[local]
    datatype = ox.NamedNode(XSD + local)

    def cast(value: Any) -> ox.Literal | None:
        if not isinstance(value, ox.Literal):
            return None
        text, dtype = value.value.strip(), value.datatype.value
        try:
            if dtype == XSD + "boolean":
                number = 1 if text in ("true", "1") else 0
            elif dtype in _NUMERIC:
                number = int(float(text)) if any(c in text for c in ".eE") else int(text)
            elif dtype == XSD_STRING:
                number = int(text)
            else:
                return None
        except (ValueError, OverflowError):
            return None
        if (low is not None and number < low) or (high is not None and number > high):
            return None
        return ox.Literal(str(number), datatype=datatype)

    return cast


XSD_CASTS: dict[Any, Any] = {ox.NamedNode(XSD + local): _integer_cast(local) for local in _INTEGER_RANGES}


# --------------------------------------------------------------------------------------------
# Remote SPARQL endpoint
# --------------------------------------------------------------------------------------------


class _HTTPFailure(Exception):
    """Internal: one failed attempt, classified for the retry policy."""

    def __init__(
        self,
        kind: Literal["transient", "timeout", "bad_request", "client"],
        detail: str,
    ):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def _response_body(exc: Exception) -> str:
    """SPARQLWrapper keeps the server's answer only inside its message, as a bytes repr."""
    text = str(exc)
    marker = "Response:\n"
    if marker not in text:
        return ""
    raw = text.split(marker, 1)[1]
    try:
        body = ast.literal_eval(raw)
        return body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    except (ValueError, SyntaxError):
        return raw


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return True
    return isinstance(exc, urllib.error.URLError) and isinstance(
        exc.reason, (TimeoutError, socket.timeout)
    )


def _json_term(binding: Mapping[str, Any]) -> Term:
    kind = binding.get("type")
    value = str(binding.get("value", ""))
    if kind == "uri":
        return Term("iri", value)
    if kind == "bnode":
        return Term("bnode", value)
    if kind in ("literal", "typed-literal"):
        return Term.literal(value, binding.get("datatype"), binding.get("xml:lang"))
    # RDF-star "triple" bindings and unknown types: keep the raw JSON, readable in traces.
    return Term("literal", json.dumps(binding, sort_keys=True))


class EndpointKG:
    """A remote SPARQL endpoint (SPARQLWrapper), read-only, with retries and a row cap.

    Transient failures (HTTP 5xx/429, connection errors, timeouts) are retried ``retries``
    times with exponential backoff starting at ``backoff`` seconds; HTTP 400 becomes
    :class:`QuerySyntaxError` carrying the endpoint's message, other 4xx fail at once.
    ``timeout`` applies to each attempt. The row cap is applied client-side: the query is sent
    unchanged, so its semantics (and its LIMIT) are exactly what the caller wrote.
    """

    def __init__(
        self,
        url: str,
        *,
        method: Literal["GET", "POST"] = "POST",
        timeout: float = 30.0,
        retries: int = 3,
        max_rows: int = 10_000,
        default_graph: str | None = None,
        backoff: float = 0.5,
    ) -> None:
        if method.upper() not in ("GET", "POST"):
            raise KGError(f"{url}: HTTP method must be GET or POST, not {method!r}")
        if not url.startswith(("http://", "https://")):
            raise KGError(f"{url}: endpoint URL must start with http:// or https://")
        self.url = url
        self.method = method.upper()
        self.timeout = timeout
        self.retries = max(0, retries)
        self.max_rows = max_rows
        self.default_graph = default_graph
        self.backoff = backoff
        self.name = url
        self.fingerprint = (
            url if default_graph is None else f"{url} default-graph={default_graph}"
        )

    def query(
        self, sparql: str, *, timeout: float | None = None, max_rows: int | None = None
    ) -> QueryResult:
        """Run a read-only query remotely; raises QuerySyntaxError, QueryTimeout, EndpointError,
        UpdateNotAllowed. ``timeout``/``max_rows`` default to the instance settings."""
        check_read_only(sparql)
        budget = self.timeout if timeout is None else timeout
        cap = self.max_rows if max_rows is None else max_rows
        graph_form = _query_form(sparql) in ("CONSTRUCT", "DESCRIBE")
        body, content_type = self._request_with_retries(sparql, budget, graph_form)
        if graph_form:
            return self._parse_graph(body, content_type, cap)
        return self._parse_json(body, cap)

    # -- HTTP ----------------------------------------------------------------------------

    def _request_with_retries(
        self, sparql: str, budget: float, graph_form: bool
    ) -> tuple[bytes, str]:
        import tenacity  # imported lazily: only endpoint users pay for it

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries + 1),
            wait=tenacity.wait_exponential(
                multiplier=self.backoff, max=max(self.backoff, 10.0)
            ),
            retry=tenacity.retry_if_exception(
                lambda e: (
                    isinstance(e, _HTTPFailure) and e.kind in ("transient", "timeout")
                )
            ),
            reraise=True,
        )
        attempts = self.retries + 1
        try:
            return retrying(self._request_once, sparql, budget, graph_form)
        except _HTTPFailure as failure:
            if failure.kind == "bad_request":
                raise QuerySyntaxError(
                    f"endpoint {self.url} rejected the query (HTTP 400): {failure.detail}"
                ) from None
            if failure.kind == "timeout":
                raise QueryTimeout(
                    f"endpoint {self.url} did not answer within {budget:g} s ({attempts} attempt(s))"
                ) from None
            if failure.kind == "client":
                raise EndpointError(
                    f"endpoint {self.url} refused the request: {failure.detail}"
                ) from None
            raise EndpointError(
                f"endpoint {self.url} failed after {attempts} attempt(s): {failure.detail}"
            ) from None

    def _request_once(
        self, sparql: str, budget: float, graph_form: bool
    ) -> tuple[bytes, str]:
        from SPARQLWrapper import GET, JSON, POST, TURTLE, SPARQLWrapper
        from SPARQLWrapper.SPARQLExceptions import (
            QueryBadFormed,
            SPARQLWrapperException,
        )

        wrapper = SPARQLWrapper(self.url, agent=USER_AGENT)
        wrapper.setMethod(POST if self.method == "POST" else GET)
        wrapper.setReturnFormat(TURTLE if graph_form else JSON)
        wrapper.setQuery(sparql)
        # setTimeout() truncates to int (0.5 s would mean no timeout); urlopen takes a float.
        wrapper.timeout = budget if budget and budget > 0 else None  # type: ignore[assignment]
        if self.default_graph:
            wrapper.addParameter("default-graph-uri", self.default_graph)
        try:
            response = wrapper.query().response
            return response.read(), response.headers.get("Content-Type", "") or ""
        except QueryBadFormed as exc:
            raise _HTTPFailure(
                "bad_request", _response_body(exc) or "bad request"
            ) from exc
        except SPARQLWrapperException as exc:
            # 500 is transient-looking; 401/404/414 will not improve by retrying.
            name = type(exc).__name__
            kind: Literal["transient", "client"] = (
                "transient" if name == "EndPointInternalError" else "client"
            )
            detail = f"{name}: {_response_body(exc)[:300]}".rstrip(": ")
            raise _HTTPFailure(kind, detail) from exc
        except urllib.error.HTTPError as exc:
            kind = "transient" if exc.code >= 500 or exc.code == 429 else "client"
            raise _HTTPFailure(kind, f"HTTP {exc.code} {exc.reason}") from exc
        except Exception as exc:
            # Connection refused, DNS, resets, timeouts, truncated bodies: all worth a retry.
            if _is_timeout(exc):
                raise _HTTPFailure("timeout", "timed out") from exc
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise _HTTPFailure("transient", f"unreachable ({reason})") from exc

    # -- parsing -------------------------------------------------------------------------

    def _parse_json(self, body: bytes, cap: int) -> QueryResult:
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise EndpointError(
                f"endpoint {self.url} returned invalid SPARQL JSON: {exc}"
            ) from exc
        if "boolean" in data:
            return QueryResult(variables=[], rows=[], boolean=bool(data["boolean"]))
        variables = list(data.get("head", {}).get("vars", []))
        bindings = data.get("results", {}).get("bindings", [])
        truncated = cap is not None and cap >= 0 and len(bindings) > cap
        if truncated:
            bindings = bindings[:cap]
        rows = [
            tuple(_json_term(b[v]) if v in b else None for v in variables)
            for b in bindings
        ]
        return QueryResult(variables=variables, rows=rows, truncated=truncated)

    def _parse_graph(self, body: bytes, content_type: str, cap: int) -> QueryResult:
        media_type = content_type.split(";", 1)[0].strip()
        fmt = ox.RdfFormat.from_media_type(media_type) if media_type else None
        try:
            triples = ox.parse(body, format=fmt or ox.RdfFormat.TURTLE)
            rows_iter = (
                (_term(q.subject), _term(q.predicate), _term(q.object)) for q in triples
            )
            return _collect(
                rows_iter,
                ["subject", "predicate", "object"],
                cap,
                None,
                threading.Event(),
                self.name,
            )
        except SyntaxError as exc:
            raise EndpointError(
                f"endpoint {self.url} returned unparsable RDF: {exc}"
            ) from exc


# --------------------------------------------------------------------------------------------
# Choosing a backend
# --------------------------------------------------------------------------------------------


def open_kg(
    files: Sequence[str | Path] = (), endpoint: str | None = None, **kw: Any
) -> KnowledgeGraph:
    """An :class:`OxigraphKG` over ``files`` or an :class:`EndpointKG` at ``endpoint``; exactly
    one of the two must be given. ``kw`` goes to the backend's constructor."""
    if isinstance(files, (str, Path)):
        files = [files]
    if bool(files) == bool(endpoint):
        raise KGError("open_kg needs exactly one of files=... or endpoint=...")
    if endpoint:
        return EndpointKG(endpoint, **kw)
    return OxigraphKG(files, **kw)
