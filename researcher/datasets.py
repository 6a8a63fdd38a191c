"""Question sets, gold answers and train/validation/test splits.

Two question-file formats are read, detected from content (and the file suffix for parsing):

* TEXT2SPARQL YAML (``dataset: {id, prefix, defaultNamespace}``, ``questions: [{id, question:
  {lang: text}, features?, classes?, properties?, query: {sparql}}]``). One :class:`Question` per
  (id, language), named like the official client: ``"<prefix>:<id>-<lang>"``.
* QALD JSON (``questions: [{id, question: [{language, string}], query: {sparql}, answers?}]``).
  Its embedded answers are exposed by :func:`qald_gold_answers` in the official answer-dict shape.

Gold answers (``true_result_set.json``) map a uid to ``{value: relevance}``; ASK questions are
``{"true": 1}`` / ``{"true": 0}`` exactly as the official client writes them. Questions whose
result order matters (feature ``RESULT_ORDER_MATTERS``, or an ``order_required`` list in a gold
file) come from :func:`load_order_required`.

Splits assign question *ids* (not uids) so every language of a question lands in the same split;
they are deterministic for a seed, stratified by a feature signature and stored as YAML.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field

from worker_agent import sparql_lexer
from worker_agent.kg import KNOWN_PREFIXES

__all__ = [
    "DatasetError",
    "Question",
    "QuestionSet",
    "load_questions",
    "load_gold_answers",
    "load_order_required",
    "qald_gold_answers",
    "derive_features",
    "FEATURE_VOCABULARY",
    "ORDER_MATTERS",
    "Split",
    "SPLIT_NAMES",
    "Splits",
    "make_splits",
    "load_splits",
    "save_splits",
    "split_hash",
]


class DatasetError(Exception):
    """A question, gold-answer or split file is missing or invalid; str(e) is one line."""


# ---------------------------------------------------------------------------------------------
# Models


class Question(BaseModel):
    """One question in one language."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uid: str = Field(description='"<prefix>:<id>-<lang>", e.g. "ck25:1-en" (official naming)')
    qid: str = Field(description='question id shared by all languages, e.g. "1"')
    lang: str = Field(description='language code, e.g. "en"')
    text: str = Field(description="the natural-language question")
    sparql: str | None = Field(description="gold query, None when the file has none")
    features: tuple[str, ...] = Field(description="from the file, else derived from the query")
    classes: tuple[str, ...] = Field(description="full IRIs of the classes the query uses")
    properties: tuple[str, ...] = Field(description="full IRIs of the properties the query uses")


class QuestionSet(BaseModel):
    """All questions of one file, in file order (languages in file order within a question)."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(description="dataset IRI or name, sent to TEXT2SPARQL APIs")
    prefix: str = Field(description='uid prefix, e.g. "ck25"')
    default_namespace: str | None = Field(description='namespace for ":Local" names')
    questions: list[Question] = Field(description="one entry per (question id, language)")

    def qids(self) -> list[str]:
        """Distinct question ids in file order."""
        return list(dict.fromkeys(q.qid for q in self.questions))


# ---------------------------------------------------------------------------------------------
# Reading files


def _read_text(path: Path) -> str:
    if not path.exists():
        raise DatasetError(f"{path}: file not found")
    if not path.is_file():
        raise DatasetError(f"{path}: not a file")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read file: {exc}") from exc


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _parse_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}") from exc


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise DatasetError(f"{path}: invalid YAML{where}: {_one_line(problem)}") from exc


def _parse_structured(path: Path) -> Any:
    """Parse JSON or YAML: by suffix, else by the first character (JSON documents are objects)."""
    text = _read_text(path)
    suffix = path.suffix.lower()
    if suffix == ".json" or (suffix not in (".yml", ".yaml") and text.lstrip().startswith(("{", "["))):
        return _parse_json(path, text)
    return _parse_yaml(path, text)


def _detect_format(path: Path, data: Any) -> Literal["text2sparql", "qald"]:
    """TEXT2SPARQL questions carry ``question: {lang: text}``, QALD ``question: [{language, string}]``."""
    if not isinstance(data, Mapping) or not isinstance(data.get("questions"), list):
        raise DatasetError(f"{path}: unknown question file format: expected a mapping with a 'questions' list")
    questions = data["questions"]
    if not questions:
        raise DatasetError(f"{path}: the 'questions' list is empty")
    first = questions[0]
    if isinstance(first, Mapping) and isinstance(first.get("question"), list):
        return "qald"
    if isinstance(first, Mapping) and isinstance(first.get("question"), Mapping):
        return "text2sparql"
    raise DatasetError(
        f"{path}: unknown question file format: 'question' is neither a language mapping "
        "(TEXT2SPARQL) nor a list of {language, string} (QALD)"
    )


def load_questions(path: str | Path, *, prefix: str | None = None) -> QuestionSet:
    """Load a TEXT2SPARQL YAML or QALD JSON question file, auto-detected.

    ``prefix`` overrides the uid prefix (default: the file's ``dataset.prefix``; for QALD the
    dataset id when it is a plain name, else the file stem).
    """
    path = Path(path)
    data = _parse_structured(path)
    if _detect_format(path, data) == "qald":
        return _load_qald(path, data, prefix)
    return _load_text2sparql(path, data, prefix)


def _question_id(path: Path, raw: Mapping[str, Any], index: int) -> str:
    qid = raw.get("id")
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or str(qid).strip() == "":
        raise DatasetError(f"{path}: question #{index + 1}: missing or invalid 'id'")
    return str(qid).strip()


def _check_unique(path: Path, qid: str, seen: set[str]) -> None:
    if qid in seen:
        raise DatasetError(f"{path}: question {qid}: duplicate id")
    seen.add(qid)


def _string_list(path: Path, qid: str, raw: Mapping[str, Any], key: str) -> list[str]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DatasetError(f"{path}: question {qid}: '{key}' must be a list of non-empty strings")
    return [v.strip() for v in value]


def _gold_sparql(path: Path, qid: str, raw: Mapping[str, Any]) -> str | None:
    query = raw.get("query")
    if query is None:
        return None
    if isinstance(query, str):  # some old QALD releases store the query directly
        sparql: Any = query
    elif isinstance(query, Mapping):
        sparql = query.get("sparql")
    else:
        raise DatasetError(f"{path}: question {qid}: 'query' must be a mapping with 'sparql'")
    if sparql is None:
        return None
    if not isinstance(sparql, str):
        raise DatasetError(f"{path}: question {qid}: 'query.sparql' must be a string")
    return sparql.strip() or None


def _load_text2sparql(path: Path, data: Mapping[str, Any], prefix: str | None) -> QuestionSet:
    dataset = data.get("dataset")
    if not isinstance(dataset, Mapping):
        raise DatasetError(f"{path}: missing 'dataset' mapping (id, prefix, defaultNamespace)")
    dataset_id = dataset.get("id")
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise DatasetError(f"{path}: missing 'dataset.id'")
    prefix = prefix or dataset.get("prefix")
    if not isinstance(prefix, str) or not prefix.strip():
        raise DatasetError(f"{path}: missing 'dataset.prefix' (needed to name questions like 'ck25:1-en')")
    namespace = dataset.get("defaultNamespace")
    if namespace is not None and not isinstance(namespace, str):
        raise DatasetError(f"{path}: 'dataset.defaultNamespace' must be a string")

    questions: list[Question] = []
    seen: set[str] = set()
    for index, raw in enumerate(data["questions"]):
        if not isinstance(raw, Mapping):
            raise DatasetError(f"{path}: question #{index + 1}: expected a mapping")
        qid = _question_id(path, raw, index)
        _check_unique(path, qid, seen)
        texts = raw.get("question")
        if not isinstance(texts, Mapping) or not texts:
            raise DatasetError(f"{path}: question {qid}: 'question' must map languages to texts")
        shared = _shared_fields(path, qid, raw, namespace)
        for lang, text in texts.items():
            if not isinstance(lang, str) or not isinstance(text, str) or not text.strip():
                raise DatasetError(f"{path}: question {qid}: text for language {lang!r} is missing or not a string")
            questions.append(Question(uid=f"{prefix}:{qid}-{lang}", qid=qid, lang=lang, text=text.strip(), **shared))
    return QuestionSet(dataset_id=dataset_id, prefix=prefix, default_namespace=namespace, questions=questions)


def _shared_fields(path: Path, qid: str, raw: Mapping[str, Any], namespace: str | None) -> dict[str, Any]:
    """Fields common to all languages of one question: query, features, classes, properties."""
    sparql = _gold_sparql(path, qid, raw)
    prefixes = {**BUILTIN_PREFIXES, **_declared_prefixes(sparql or "")}
    where = f"{path}: question {qid}"
    return {
        "sparql": sparql,
        "features": _features(_string_list(path, qid, raw, "features"), sparql),
        "classes": tuple(_expand(t, namespace, prefixes, where) for t in _string_list(path, qid, raw, "classes")),
        "properties": tuple(
            _expand(t, namespace, prefixes, where) for t in _string_list(path, qid, raw, "properties")
        ),
    }


def _features(listed: Sequence[str], sparql: str | None) -> tuple[str, ...]:
    """File features when they name the query form; otherwise derive them from the query.

    db25 lists only the annotation RESULT_ORDER_MATTERS for two questions, which would leave those
    questions without structural features, so annotations are merged into the derived ones.
    """
    listed = [f.upper() for f in listed]
    if not sparql or any(f in _QUERY_FORMS for f in listed):
        return tuple(dict.fromkeys(listed))
    return tuple(dict.fromkeys([*derive_features(sparql), *listed]))


def _qald_prefix(path: Path, dataset_id: str | None) -> str:
    if dataset_id and re.fullmatch(r"[A-Za-z0-9_.-]+", dataset_id):
        return dataset_id
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-") or "qald"


def _load_qald(path: Path, data: Mapping[str, Any], prefix: str | None) -> QuestionSet:
    dataset = data.get("dataset")
    if dataset is not None and not isinstance(dataset, Mapping):
        raise DatasetError(f"{path}: 'dataset' must be a mapping")
    raw_id = dataset.get("id") if dataset else None
    if raw_id is not None and not isinstance(raw_id, str):
        raise DatasetError(f"{path}: 'dataset.id' must be a string")
    prefix = prefix or _qald_prefix(path, raw_id)
    dataset_id = raw_id or path.stem

    questions: list[Question] = []
    seen: set[str] = set()
    for index, raw in enumerate(data["questions"]):
        if not isinstance(raw, Mapping):
            raise DatasetError(f"{path}: question #{index + 1}: expected a mapping")
        qid = _question_id(path, raw, index)
        _check_unique(path, qid, seen)
        sparql = _gold_sparql(path, qid, raw)
        features = _features([], sparql)
        for lang, text in _qald_texts(path, qid, raw.get("question")):
            questions.append(
                Question(
                    uid=f"{prefix}:{qid}-{lang}", qid=qid, lang=lang, text=text,
                    sparql=sparql, features=features, classes=(), properties=(),
                )
            )
    return QuestionSet(dataset_id=dataset_id, prefix=prefix, default_namespace=None, questions=questions)


def _qald_texts(path: Path, qid: str, entries: Any) -> list[tuple[str, str]]:
    if not isinstance(entries, list) or not entries:
        raise DatasetError(f"{path}: question {qid}: 'question' must be a non-empty list of {{language, string}}")
    texts: dict[str, str] = {}
    for entry in entries:
        lang = entry.get("language") if isinstance(entry, Mapping) else None
        text = entry.get("string") if isinstance(entry, Mapping) else None
        if not isinstance(lang, str) or not lang.strip() or not isinstance(text, str):
            raise DatasetError(f"{path}: question {qid}: each 'question' entry needs 'language' and 'string'")
        if lang in texts:
            raise DatasetError(f"{path}: question {qid}: language {lang!r} appears twice")
        # QALD-9 keeps empty strings for untranslated languages: those are not questions.
        if text.strip():
            texts[lang] = text.strip()
    if not texts:
        raise DatasetError(f"{path}: question {qid}: no non-empty question text")
    return list(texts.items())


# ---------------------------------------------------------------------------------------------
# IRIs in classes/properties

# Prefixes that annotation lists use without declaring them (e.g. ck25 lists "rdfs:subClassOf").
# Prefixes declared in the question's own query take precedence.
BUILTIN_PREFIXES = KNOWN_PREFIXES  # one prefix table for the whole project

_PREFIX_DECL = re.compile(r"\bPREFIX\s+([A-Za-z][\w.-]*)?:\s*<([^>]*)>", re.IGNORECASE)
_ABSOLUTE_IRI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(//|[^/]*@)|^(urn|mailto|tag):", re.IGNORECASE)


def _declared_prefixes(sparql: str) -> dict[str, str]:
    return {(m.group(1) or ""): m.group(2) for m in _PREFIX_DECL.finditer(sparql)}


def _expand(term: str, namespace: str | None, prefixes: Mapping[str, str], where: str) -> str:
    """``:Local`` -> defaultNamespace, ``pre:Local`` -> known prefix, ``<iri>``/absolute IRIs kept."""
    if term.startswith("<") and term.endswith(">"):
        return term[1:-1]
    head, sep, local = term.partition(":")
    if not sep or head == "":
        if namespace is None:
            raise DatasetError(f"{where}: cannot expand {term!r}: the dataset has no defaultNamespace")
        return namespace + (local if sep else term)
    if head in prefixes:
        return prefixes[head] + local
    if _ABSOLUTE_IRI.match(term):
        return term
    raise DatasetError(f"{where}: cannot expand {term!r}: unknown prefix {head!r} (declare it in the query)")


# ---------------------------------------------------------------------------------------------
# Gold answers


def load_gold_answers(path: str | Path) -> dict[str, dict[str, int]]:
    """The official ``true_result_set.json``: ``{uid: {value: relevance}}``.

    A top-level ``order_required`` list, if present, is not an answer (see :func:`load_order_required`).
    """
    path = Path(path)
    data = _parse_json(path, _read_text(path))
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object mapping question uids to answer dicts")
    gold: dict[str, dict[str, int]] = {}
    for uid, answers in data.items():
        if uid == "order_required":
            continue
        if not isinstance(answers, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in answers.values()
        ):
            raise DatasetError(f"{path}: question {uid}: answers must map values to integer relevances")
        gold[uid] = dict(answers)
    return gold


def load_order_required(path: str | Path) -> set[str]:
    """Uids whose result order is scored (nDCG), as the official client decides.

    Accepts a gold file with an ``order_required`` list, or a question file, where questions
    flagged ``RESULT_ORDER_MATTERS`` count (this is where the official client reads the flag).
    """
    path = Path(path)
    data = _parse_structured(path)
    if isinstance(data, Mapping) and "questions" in data:
        return {q.uid for q in load_questions(path).questions if ORDER_MATTERS in q.features}
    if not isinstance(data, Mapping):
        raise DatasetError(f"{path}: expected a JSON object")
    listed = data.get("order_required", [])
    if not isinstance(listed, list) or not all(isinstance(uid, str) for uid in listed):
        raise DatasetError(f"{path}: 'order_required' must be a list of question uids")
    return set(listed)


def qald_gold_answers(path: str | Path, *, prefix: str | None = None) -> dict[str, dict[str, int]]:
    """Answers embedded in a QALD file, one entry per uid, in the official answer-dict shape.

    Only questions with an ``answers`` key are included. Values of all variables are pooled as
    strings with relevance 1; ASK answers become ``{"true": 1}`` or ``{"true": 0}``.
    """
    path = Path(path)
    data = _parse_structured(path)
    if _detect_format(path, data) != "qald":
        raise DatasetError(f"{path}: not a QALD file (questions need [{{language, string}}] lists)")
    qs = _load_qald(path, data, prefix)
    by_qid: dict[str, dict[str, int]] = {}
    for index, raw in enumerate(data["questions"]):
        if "answers" in raw:
            qid = _question_id(path, raw, index)
            by_qid[qid] = _flatten_qald_answers(path, qid, raw["answers"])
    return {q.uid: dict(by_qid[q.qid]) for q in qs.questions if q.qid in by_qid}


def _flatten_qald_answers(path: Path, qid: str, answers: Any) -> dict[str, int]:
    """Mirror the official flattening: per variable, then per row, ``value -> 1``."""
    results = answers if isinstance(answers, list) else [answers]
    flat: dict[str, int] = {}
    for result in results:
        if not isinstance(result, Mapping):
            raise DatasetError(f"{path}: question {qid}: each answer must be a SPARQL JSON result object")
        if "boolean" in result:
            if not isinstance(result["boolean"], bool):
                raise DatasetError(f"{path}: question {qid}: 'boolean' answer must be true or false")
            flat["true"] = 1 if result["boolean"] else 0
            continue
        bindings = result.get("results", {}).get("bindings") if isinstance(result.get("results"), Mapping) else None
        if not isinstance(bindings, list) or not all(isinstance(b, Mapping) for b in bindings):
            raise DatasetError(f"{path}: question {qid}: answer lacks 'results.bindings' or 'boolean'")
        head = result.get("head") if isinstance(result.get("head"), Mapping) else {}
        variables = head.get("vars") or list(dict.fromkeys(v for b in bindings for v in b))
        if not isinstance(variables, list):
            raise DatasetError(f"{path}: question {qid}: 'head.vars' must be a list")
        for var in variables:
            for row in bindings:
                cell = row.get(var)
                if isinstance(cell, Mapping) and "value" in cell:
                    flat[str(cell["value"])] = 1
    return flat


# ---------------------------------------------------------------------------------------------
# Features

ORDER_MATTERS = "RESULT_ORDER_MATTERS"  # annotation, not derivable from the query
_QUERY_FORMS = ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE")

#: Every feature :func:`derive_features` can report, in the order it reports them. Names follow
#: the ck25 questions.yml vocabulary; EXISTS is set for NOT EXISTS too, as ck25 does.
FEATURE_VOCABULARY: tuple[str, ...] = (
    *_QUERY_FORMS,
    "DISTINCT", "COUNT", "SUM", "AVG", "MIN", "MAX", "ROUND",
    "GROUP", "HAVING", "ORDER", "LIMIT", "OFFSET",
    "FILTER", "OPTIONAL", "UNION", "MINUS", "EXISTS", "NOT_EXISTS", "SUBSELECT", "BIND", "VALUES",
)


def _keyword(word: str, suffix: str = "") -> re.Pattern[str]:
    # Not part of a longer word; the ?/$/: guards are kept though code_only blanks names already.
    return re.compile(rf"(?<![\w?$:]){word}(?![\w:]){suffix}", re.IGNORECASE)


_FEATURE_PATTERNS: dict[str, re.Pattern[str]] = {
    **{name: _keyword(name) for name in ("DISTINCT", "HAVING", "LIMIT", "OFFSET",
                                         "OPTIONAL", "UNION", "MINUS", "EXISTS", "VALUES")},
    # ck25 tags FILTER [NOT] EXISTS as EXISTS only; FILTER means a value filter.
    "FILTER": _keyword("FILTER", r"(?!\s*(?:NOT\s+)?EXISTS\b)"),
    **{name: _keyword(name, r"\s*\(") for name in ("COUNT", "SUM", "AVG", "MIN", "MAX", "ROUND", "BIND")},
    "GROUP": _keyword("GROUP", r"\s+BY\b"),
    "ORDER": _keyword("ORDER", r"\s+BY\b"),
    "NOT_EXISTS": _keyword("NOT", r"\s+EXISTS\b"),
}
_FORM_PATTERN = _keyword("(SELECT|ASK|CONSTRUCT|DESCRIBE)")
_SELECT_PATTERN = _keyword("SELECT")


def derive_features(sparql: str) -> tuple[str, ...]:
    """Structural features of a query, in :data:`FEATURE_VOCABULARY` order.

    The query form (first of SELECT/ASK/CONSTRUCT/DESCRIBE) is one feature; any further SELECT is
    a SUBSELECT. Keywords inside IRIs, string literals, comments, variables and prefixed names
    do not count.
    """
    code = sparql_lexer.code_only(sparql)  # bare words only: no strings, IRIs, names, comments
    found: set[str] = {name for name, pattern in _FEATURE_PATTERNS.items() if pattern.search(code)}
    form = _FORM_PATTERN.search(code)
    if form:
        found.add(form.group(1).upper())
    selects = len(_SELECT_PATTERN.findall(code))
    if selects > (1 if "SELECT" in found else 0):
        found.add("SUBSELECT")
    return tuple(name for name in FEATURE_VOCABULARY if name in found)


# ---------------------------------------------------------------------------------------------
# Splits

Split = Literal["train", "validation", "test"]
SPLIT_NAMES: tuple[Split, ...] = get_args(Split)


class Splits(BaseModel):
    """Assignment of question ids to splits; every language of a question is in the same split."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = Field(description="seed used by make_splits; None for a hand-written split")
    assignment: dict[str, Split] = Field(description="question id -> split")
    ratios: tuple[float, float, float] | None = Field(
        default=None, description="train/validation/test ratios used by make_splits"
    )
    dataset_id: str | None = Field(default=None, description="dataset the split was made for")
    questions_hash: str | None = Field(default=None, description="content hash of the assigned question ids")

    def select(self, qs: QuestionSet, split: Split) -> list[Question]:
        """Questions of ``qs`` in ``split``, in file order; every question must be assigned."""
        if split not in SPLIT_NAMES:
            raise DatasetError(f"unknown split {split!r}; expected one of {', '.join(SPLIT_NAMES)}")
        missing = [qid for qid in qs.qids() if qid not in self.assignment]
        if missing:
            raise DatasetError(
                f"split assignment lacks {len(missing)} question(s) of {qs.dataset_id}: {_preview(missing)}"
            )
        return [q for q in qs.questions if self.assignment[q.qid] == split]

    def check_covers(self, qs: QuestionSet, source: str = "splits") -> None:
        """Raise unless the assignment names exactly the question ids of ``qs``."""
        ids = set(qs.qids())
        missing = sorted(ids - self.assignment.keys(), key=_natural)
        unknown = sorted(self.assignment.keys() - ids, key=_natural)
        if missing:
            raise DatasetError(f"{source}: question(s) missing from the assignment: {_preview(missing)}")
        if unknown:
            raise DatasetError(f"{source}: assignment names question(s) not in {qs.dataset_id}: {_preview(unknown)}")


def _preview(items: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def _natural(qid: str) -> tuple[int, int, str]:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _ids_hash(qids: Iterable[str]) -> str:
    return _digest("\n".join(sorted(set(qids))))


def split_hash(splits: Splits) -> str:
    """Stable hash of the assignment alone (seed and metadata excluded): ties scores to a split."""
    return _digest(json.dumps(sorted(splits.assignment.items()), separators=(",", ":")))


def _normalise_ratios(ratios: Sequence[float]) -> tuple[float, float, float]:
    values = tuple(float(r) for r in ratios)
    if len(values) != 3 or any(not math.isfinite(r) or r < 0 for r in values) or sum(values) <= 0:
        raise DatasetError(f"invalid split ratios {tuple(ratios)!r}: need three non-negative numbers, not all zero")
    total = sum(values)
    return (values[0] / total, values[1] / total, values[2] / total)


def _target_counts(n: int, ratios: tuple[float, float, float]) -> list[int]:
    """Largest-remainder counts; each split with a positive ratio gets >= 1 when n allows it."""
    exact = [r * n for r in ratios]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(3), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    positive = [i for i in range(3) if ratios[i] > 0]
    if n >= len(positive):
        for i in positive:
            if counts[i] == 0:
                donor = max(range(3), key=lambda j: (counts[j], -j))
                counts[donor] -= 1
                counts[i] = 1
    return counts


def _signatures(qs: QuestionSet, min_count: int) -> dict[str, str]:
    """qid -> "FORM/feature": the query form plus the rarest feature shared by >= min_count ids.

    Rarer features would make singleton strata, which cannot be spread over the splits.
    """
    features: dict[str, set[str]] = {}
    for q in qs.questions:
        features.setdefault(q.qid, set()).update(q.features)
    counts = Counter(f for fs in features.values() for f in fs if f not in _QUERY_FORMS)
    signatures: dict[str, str] = {}
    for qid, fs in features.items():
        form = next((f for f in _QUERY_FORMS if f in fs), "-")
        usable = [f for f in fs if f not in _QUERY_FORMS and counts[f] >= min_count]
        rarest = min(usable, key=lambda f: (counts[f], f)) if usable else "-"
        signatures[qid] = f"{form}/{rarest}"
    return signatures


def make_splits(qs: QuestionSet, seed: int = 0, ratios: Sequence[float] = (0.5, 0.25, 0.25)) -> Splits:
    """Deterministic, stratified train/validation/test assignment of question ids.

    Strata (by feature signature) are laid out one after another, each shuffled by a seeded hash
    of the id, and positions are dealt to splits in proportion to the ratios, so every stratum is
    spread over the splits. Only ids and features matter, so reordering the file changes nothing.
    """
    norm = _normalise_ratios(ratios)
    qids = qs.qids()
    if not qids:
        raise DatasetError(f"{qs.dataset_id}: no questions to split")
    signatures = _signatures(qs, min_count=sum(r > 0 for r in norm))
    strata = sorted(set(signatures.values()), key=lambda s: _digest(f"{seed}/stratum/{s}"))
    order = [
        qid
        for stratum in strata
        for qid in sorted((q for q in qids if signatures[q] == stratum), key=lambda q: _digest(f"{seed}/qid/{q}"))
    ]
    counts = _target_counts(len(order), norm)
    assigned = [0, 0, 0]
    assignment: dict[str, Split] = {}
    for k, qid in enumerate(order):
        # Pick the split furthest behind its proportional share of the first k+1 positions.
        open_splits = [i for i in range(3) if assigned[i] < counts[i]]
        best = max(open_splits, key=lambda i: (counts[i] * (k + 1) / len(order) - assigned[i], -i))
        assigned[best] += 1
        assignment[qid] = SPLIT_NAMES[best]
    return Splits(
        seed=seed,
        assignment={qid: assignment[qid] for qid in sorted(assignment, key=_natural)},
        ratios=norm,
        dataset_id=qs.dataset_id,
        questions_hash=_ids_hash(assignment),
    )


def save_splits(splits: Splits, path: str | Path) -> None:
    """Write ``splits`` as YAML atomically (temporary file in the same directory, then rename)."""
    path = Path(path)
    document = {
        "dataset_id": splits.dataset_id,
        "seed": splits.seed,
        "ratios": list(splits.ratios) if splits.ratios else None,
        "questions_hash": _ids_hash(splits.assignment),
        "split_hash": split_hash(splits),
        "assignment": {qid: splits.assignment[qid] for qid in sorted(splits.assignment, key=_natural)},
    }
    text = "# Question splits (researcher.datasets). Hand edits: keep every question assigned.\n"
    text += yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_splits(path: str | Path, questions: QuestionSet | None = None) -> Splits:
    """Read a split file written by :func:`save_splits`, or a hand-written
    ``{train: [ids], validation: [ids], test: [ids]}``. With ``questions``, also check that the
    assignment covers exactly its question ids.
    """
    path = Path(path)
    data = _parse_yaml(path, _read_text(path))
    if not isinstance(data, Mapping):
        raise DatasetError(f"{path}: expected a mapping with 'assignment' or train/validation/test lists")
    splits = _splits_from_document(path, data) if "assignment" in data else _splits_from_lists(path, data)
    if questions is not None:
        if splits.dataset_id and splits.dataset_id != questions.dataset_id:
            raise DatasetError(
                f"{path}: split was made for dataset {splits.dataset_id!r}, not {questions.dataset_id!r}"
            )
        splits.check_covers(questions, source=str(path))
    return splits


def _split_name(path: Path, name: Any, qid: str | None = None) -> Split:
    if name not in SPLIT_NAMES:
        where = f" for question {qid}" if qid is not None else ""
        raise DatasetError(f"{path}: unknown split name {name!r}{where}; expected one of {', '.join(SPLIT_NAMES)}")
    return name  # type: ignore[no-any-return]


def _splits_from_document(path: Path, data: Mapping[str, Any]) -> Splits:
    unknown_keys = set(data) - {"dataset_id", "seed", "ratios", "questions_hash", "split_hash", "assignment"}
    if unknown_keys:
        raise DatasetError(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown_keys)))}")
    raw = data["assignment"]
    if not isinstance(raw, Mapping) or not raw:
        raise DatasetError(f"{path}: 'assignment' must be a non-empty mapping of question id to split")
    assignment = {str(qid): _split_name(path, name, str(qid)) for qid, name in raw.items()}
    stored = data.get("questions_hash")
    if stored is not None and stored != _ids_hash(assignment):
        raise DatasetError(
            f"{path}: questions_hash does not match the assigned ids (edited by hand? remove questions_hash)"
        )
    seed, ratios = data.get("seed"), data.get("ratios")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise DatasetError(f"{path}: 'seed' must be an integer")
    try:
        return Splits(
            seed=seed,
            assignment=assignment,
            ratios=_normalise_ratios(ratios) if ratios is not None else None,
            dataset_id=data.get("dataset_id"),
            questions_hash=_ids_hash(assignment),
        )
    except (DatasetError, ValueError) as exc:
        raise DatasetError(f"{path}: {_one_line(exc)}") from exc


def _splits_from_lists(path: Path, data: Mapping[str, Any]) -> Splits:
    assignment: dict[str, Split] = {}
    for name, ids in data.items():
        split = _split_name(path, name)
        if not isinstance(ids, list) or not all(isinstance(i, (int, str)) and not isinstance(i, bool) for i in ids):
            raise DatasetError(f"{path}: '{name}' must be a list of question ids")
        for qid in map(str, ids):
            if qid in assignment:
                raise DatasetError(f"{path}: question {qid} is in both {assignment[qid]} and {split}")
            assignment[qid] = split
    if not assignment:
        raise DatasetError(f"{path}: no question ids in any split")
    return Splits(seed=None, assignment=assignment, questions_hash=_ids_hash(assignment))
