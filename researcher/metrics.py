"""Scoring: official TEXT2SPARQL answer-set metrics plus structural query metrics.

Answer-set metrics reproduce ``text2sparql-client==2.1.0`` (``text2sparql query`` +
``text2sparql evaluate``, which delegate to ``pytrec_eval`` / trec_eval 9) in pure Python, figure
for figure. The official behaviour has quirks; we copy them on purpose, so a number here is the
number the challenge would publish:

Answer sets (``answer_set``; official ``DBpediaDict2PytrecDict.tranform``)
  * Every projected variable (in head order) of every row contributes the bare ``value`` string of
    its binding: the kind (IRI / literal / blank node), datatype and language tag are dropped, so
    ``"3"^^xsd:integer``, ``"3"`` and ``"3"@en`` are the same item. Unbound cells are skipped, and
    duplicates collapse: an answer set is a flat set of strings, each weighted 1. Extra projected
    columns (labels, counts) therefore add items and lower precision.
  * ASK gives ``{"true": 1}`` when true and ``{"true": 0}`` when false (the key is always
    ``"true"``).
  * A query that fails (syntax error, timeout, endpoint error) yields empty bindings, i.e. ``{}``,
    which scores 0 everywhere.

Per question (``set_scores``, ``ndcg``; trec_eval ``set_P``, ``set_recall``, ``set_F``, ``ndcg``)
  * A gold item is relevant when its value is >= 1; a predicted item is *retrieved* whatever its
    value. Consequences for ASK: gold ``{"true": 0}`` (ASK false) has nothing relevant, so every
    prediction, including the correct ``false``, scores 0; gold ``{"true": 1}`` gives 1.0 to *any*
    ASK prediction, ``false`` included, because ``"true"`` is retrieved either way.
  * ``set_P = rel_ret/|pred|`` (0 for an empty prediction), ``set_recall = rel_ret/|relevant|``
    (0 when nothing is relevant), ``set_F = 2PR/(P+R)`` and 0 when nothing relevant is retrieved.
  * nDCG ranks the prediction the trec_eval way: score (as float32) descending, ties broken by the
    item string *descending* (``strcmp``). Official scores are all 1, so the order in which the
    query returned its rows is ignored: nDCG only rewards which items are returned, weighted by
    where they fall in reverse lexicographic order. Gain = gold relevance, discount
    ``log2(rank+1)``, no cutoff; the ideal ranking holds every relevant item.
  * An empty gold answer set ``{}`` is not scored at all: pytrec_eval drops a query without
    judgements, so the question disappears from the results and from every average
    (``score_question`` returns ``{}``; ``gold_unavailable_reason`` says why).

Aggregation (``official_evaluation``; ``Evaluation.evaluate`` and ``commands/evaluate.py``)
  * Only questions present in the *predictions* are evaluated (the official ``query`` command
    emits one entry per question, empty when the system gave no query); a prediction whose
    question has no gold entry crashes the official client (here: ``MetricsError``).
  * ``average`` holds numpy means (pairwise summation, replicated bit for bit) over the scored
    questions; ``nan`` when none is scored.
  * nDCG exists only when the gold file has an ``order_required`` list (the official ``query``
    command adds the questions with feature ``RESULT_ORDER_MATTERS``; the shipped CK25/DB25 gold
    files have none, so their official scores never include nDCG). Then each listed question gets
    ``ndcg``, ``average.ndcg`` is the mean over those, and ``average.set_F_ndcg`` is
    ``statistics.fmean`` over *every entry of the results, the "average" entry included*: ndcg
    where present, else set_F. The average entry, which by then carries ``ndcg``, thus counts as
    one more question with the mean nDCG. Without ``order_required`` there is no ``set_F_ndcg``.
    A listed question missing from the predictions crashes the official client (``MetricsError``).
  * With several languages, ``average-<lang>`` averages every entry whose key *contains* the
    language code as a substring (fmean), and fails when some metric has no value for a language
    (always the case for ndcg without ``order_required``); its ``set_F_ndcg`` is computed over all
    entries, not only that language's.

``score_question`` gives the per-question view: set_P, set_recall, set_F, ndcg (when order
matters) and set_F_ndcg (ndcg when order matters, else set_F: the question's element of the
official combined mean).

Structural metrics (ours, deterministic, never official): ``normalize_query``/``exact_match``,
``component_scores`` (per-family F1 over rdflib parse trees; variable names never matter),
``query_iris`` and ``schema_hit_at_k``; ``categorize`` maps one scored question to an ``Outcome``.
"""

from __future__ import annotations

import math
import re
import statistics
import struct
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache, partial
from typing import Any, Literal
from urllib.parse import urljoin

from rdflib.plugins.sparql.algebra import translatePName, translatePrologue, traverse
from rdflib.plugins.sparql.parser import parseQuery
from rdflib.plugins.sparql.parserutils import CompValue
from rdflib.term import BNode, URIRef, Variable
from rdflib.term import Literal as RDFLiteral

from worker_agent import sparql_lexer
from worker_agent.kg import QueryResult, add_missing_prefixes

__all__ = [
    "FAMILIES",
    "OUTCOMES",
    "SET_METRICS",
    "MetricsError",
    "Outcome",
    "answer_set",
    "categorize",
    "component_scores",
    "exact_match",
    "gold_unavailable_reason",
    "ndcg",
    "normalize_query",
    "official_evaluation",
    "query_iris",
    "schema_hit_at_k",
    "score_question",
    "set_scores",
]

RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
SET_METRICS = ("set_P", "set_recall", "set_F")
FAMILIES = ("nodes", "predicates", "inner_operators", "outer_operators")
Outcome = Literal[
    "correct",
    "partially_correct",
    "wrong_answer",
    "empty_result",
    "syntax_error",
    "execution_error",
    "timeout",
    "gold_unavailable",
]
OUTCOMES: tuple[str, ...] = Outcome.__args__  # type: ignore[attr-defined]
_ERROR_OUTCOMES: dict[str, Outcome] = {
    "syntax": "syntax_error",
    "execution": "execution_error",
    "timeout": "timeout",
}


class MetricsError(ValueError):
    """Inputs the official evaluation cannot score (where the official client would crash)."""


# ============================================================================ answer sets


def answer_set(result: QueryResult) -> dict[str, int]:
    """The official answer dict of a query result (see the module doc for the pooling rules)."""
    if result.boolean is not None:
        return {"true": 1 if result.boolean else 0}
    pooled: dict[str, int] = {}
    # Variable-major order, as the official loop; only the keys matter for scoring.
    for col in range(len(result.variables)):
        for row in result.rows:
            term = row[col] if col < len(row) else None
            if term is not None:
                pooled[term.value] = 1
    return pooled


def _relevant(gold: Mapping[str, int]) -> int:
    return sum(1 for rel in gold.values() if rel >= 1)


def set_scores(pred: Mapping[str, float], gold: Mapping[str, int]) -> dict[str, float]:
    """trec_eval set_P, set_recall and set_F (beta 1) of one question.

    A gold without relevant items scores 0 everywhere; note the official evaluation does not score
    an *empty* gold at all (use :func:`score_question`).
    """
    num_ret = len(pred)
    num_rel = _relevant(gold)
    rel_ret = sum(1 for item in pred if gold.get(item, 0) >= 1)
    precision = rel_ret / num_ret if num_ret else 0.0
    recall = rel_ret / num_rel if num_rel else 0.0
    f_measure = 0.0
    if rel_ret:
        # Same operation order as trec_eval's m_set_F.c, so the doubles are identical.
        x = 1.0
        f_measure = (x + 1.0) * precision * recall / (x * precision + recall)
    return {"set_P": float(precision), "set_recall": float(recall), "set_F": f_measure}


def _float32(value: float) -> float:
    """trec_eval stores run scores as C ``float``: ties must be judged at that precision."""
    return struct.unpack("f", struct.pack("f", float(value)))[0]


def _trec_ranking(pred: Mapping[str, float]) -> list[str]:
    """trec_eval's order: score descending, ties by ``strcmp(b, a)``, i.e. item descending."""
    by_item = sorted(pred, reverse=True)
    # sorted() is stable, so equal scores keep the descending item order
    return sorted(by_item, key=lambda item: -_float32(pred[item]))


def ndcg(pred_ranked: Mapping[str, float], gold_ranked: Mapping[str, int]) -> float:
    """trec_eval ``ndcg`` of one question: ``pred`` maps item -> score, ``gold`` item -> relevance.

    The ranking is trec_eval's (score descending, then item string descending), not the order of
    the mapping; see the module doc.
    """
    ranking = _trec_ranking(pred_ranked)
    results_dcg = 0.0
    for i, item in enumerate(ranking):
        gain = float(max(gold_ranked.get(item, 0), 0))
        if gain != 0:
            results_dcg += gain / math.log2(i + 2)
    ideal_dcg = 0.0
    ideal = sorted((rel for rel in gold_ranked.values() if rel > 0), reverse=True)
    for i, rel in enumerate(ideal):
        ideal_dcg += float(rel) / math.log2(i + 2)
    return results_dcg / ideal_dcg if ideal_dcg > 0.0 else 0.0


def gold_unavailable_reason(gold: Mapping[str, int] | None) -> str | None:
    """Why the official evaluation would not score a question with this gold, or None."""
    if gold is None:
        return "no gold answer set"
    if not gold:
        return "empty gold answer set: the official evaluation does not score this question"
    return None


def score_question(
    pred: Mapping[str, float], gold: Mapping[str, int], *, order_matters: bool
) -> dict[str, float]:
    """Official per-question figures; ``{}`` when the official evaluation skips the question."""
    if gold_unavailable_reason(gold):
        return {}
    scores = set_scores(pred, gold)
    if order_matters:
        scores["ndcg"] = ndcg(pred, gold)
        scores["set_F_ndcg"] = scores["ndcg"]
    else:
        scores["set_F_ndcg"] = scores["set_F"]
    return scores


# ---------------------------------------------------------------------------- aggregation


def _pairwise_sum(values: Sequence[float], start: int, n: int) -> float:
    """numpy's float64 pairwise summation (8-way unrolled, blocks of 128), bit for bit."""
    if n < 8:
        total = 0.0
        for i in range(start, start + n):
            total += values[i]
        return total
    if n <= 128:
        acc = list(values[start : start + 8])
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                acc[j] += values[start + i + j]
            i += 8
        total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + (
            (acc[4] + acc[5]) + (acc[6] + acc[7])
        )
        for k in range(i, n):
            total += values[start + k]
        return total
    half = n // 2
    half -= half % 8
    return _pairwise_sum(values, start, half) + _pairwise_sum(
        values, start + half, n - half
    )


def _numpy_mean(values: Sequence[float]) -> float:
    """``float(numpy.mean(values))`` as pytrec_eval aggregates (nan for no values)."""
    if not values:
        return math.nan
    return _pairwise_sum([float(v) for v in values], 0, len(values)) / len(values)


def _evaluate(
    preds: Mapping[str, Mapping[str, float]],
    golds: Mapping[str, Any],
    metric: Literal["set", "ndcg"],
) -> dict[str, dict[str, float]]:
    """The official ``Evaluation.evaluate``: per question, then the ``average`` entry."""
    results: dict[str, dict[str, float]] = {}
    for uid, pred in preds.items():
        if uid not in golds:
            raise MetricsError(
                f"{uid}: prediction has no gold answer set (the official client fails)"
            )
        gold = golds[uid]
        if not gold:
            continue  # pytrec_eval drops questions without judgements
        results[uid] = (
            set_scores(pred, gold) if metric == "set" else {"ndcg": ndcg(pred, gold)}
        )
    names = SET_METRICS if metric == "set" else ("ndcg",)
    results["average"] = {
        m: _numpy_mean([r[m] for r in results.values()]) for m in names
    }
    return results


def _combine_averages(results: dict[str, dict[str, float]], average_field: str) -> None:
    combined = [value.get("ndcg", value.get("set_F")) for value in results.values()]
    results[average_field]["set_F_ndcg"] = statistics.fmean(combined)  # type: ignore[arg-type]


def _language_averages(
    results: dict[str, dict[str, float]], languages: Sequence[str]
) -> None:
    metrics = (*SET_METRICS, "ndcg")
    collected: dict[str, dict[str, list[float]]] = {
        lang: {m: [] for m in metrics} for lang in languages
    }
    for key, value in results.items():
        for metric in metrics:
            if metric in value:
                for lang in languages:
                    if lang in key:  # substring test, as the official client
                        collected[lang][metric].append(value[metric])
    for lang in languages:
        empty = [m for m, scores in collected[lang].items() if not scores]
        if empty:
            raise MetricsError(
                f"language {lang!r}: no {empty[0]} values to average (the official client fails)"
            )
        results[f"average-{lang}"] = {
            m: statistics.fmean(s) for m, s in collected[lang].items()
        }


def official_evaluation(
    predictions: Mapping[str, Mapping[str, float]],
    gold: Mapping[str, Any],
    *,
    languages: Sequence[str] = ("en",),
) -> dict[str, dict[str, float]]:
    """What ``text2sparql evaluate`` writes, for predicted and true result-set dicts.

    ``gold`` is a ``true_result_set.json`` mapping (optionally with ``order_required``);
    ``predictions`` maps question uid -> answer dict (see :func:`answer_set`).
    """
    results = _evaluate(predictions, gold, "set")
    if "order_required" in gold:
        order_required = list(gold["order_required"])
        missing = [uid for uid in order_required if uid not in predictions]
        if missing:
            raise MetricsError(
                f"{missing[0]}: listed in order_required but has no prediction (the official client fails)"
            )
        ordered = _evaluate(
            {uid: predictions[uid] for uid in order_required}, gold, "ndcg"
        )
        for key, value in ordered.items():
            results[key]["ndcg"] = value["ndcg"]
        _combine_averages(results, "average")
    if len(languages) > 1:
        _language_averages(results, languages)
        for lang in languages:
            _combine_averages(results, f"average-{lang}")
    return results


# ============================================================================ query text


def _expanded_tokens(sparql: str) -> list[tuple[str, str]]:
    """Tokens of the query body: prologue removed, prefixed names and ``a`` as full ``<IRI>``s.

    ``a`` becomes ``("a", <rdf:type>)`` so callers can tell it from a written IRI.
    """
    tokens = [(t.kind, t.text) for t in sparql_lexer.significant(sparql)]
    prefixes: dict[str, str] = {}
    base: str | None = None
    body: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        upper = text.upper() if kind == "word" else ""
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if (
            upper == "PREFIX"
            and nxt[0] == "pname"
            and i + 2 < len(tokens)
            and tokens[i + 2][0] == "iri"
        ):
            prefixes[nxt[1].removesuffix(":")] = tokens[i + 2][1][1:-1]
            i += 3
            continue
        if upper == "BASE" and nxt[0] == "iri":
            base = nxt[1][1:-1]
            i += 2
            continue
        if kind == "pname":
            prefix, _, local = text.partition(":")
            if prefix in prefixes:
                local = re.sub(r"\\(.)", r"\1", local)
                body.append(("iri", f"<{prefixes[prefix]}{local}>"))
            else:
                body.append((kind, text))
        elif kind == "iri" and base and not re.match(r"[A-Za-z][\w+.\-]*:", text[1:-1]):
            body.append(("iri", f"<{urljoin(base, text[1:-1])}>"))
        elif kind == "word" and text == "a":
            body.append(("a", f"<{RDF_TYPE}>"))
        else:
            body.append((kind, text))
        i += 1
    return body


def normalize_query(sparql: str) -> str:
    """A canonical text of a query, for exact match.

    Comments and whitespace collapsed (tokens joined by one space), PREFIX/BASE declarations
    expanded into full IRIs (``a`` too), variables renamed ``?v0, ?v1, ...`` and blank-node labels
    ``_:b0, ...`` in order of first appearance, keywords and function names upper-cased
    (``true``/``false`` lower-cased), language tags lower-cased, single-quoted strings double-quoted,
    and the optional ``.`` before ``}`` dropped. Works on any text, parsable or not.
    """
    variables: dict[str, str] = {}
    bnodes: dict[str, str] = {}
    out: list[str] = []
    for kind, text in _expanded_tokens(sparql):
        if kind == "var":
            text = variables.setdefault(text[1:], f"?v{len(variables)}")
        elif kind == "pname" and text.startswith("_:"):
            text = bnodes.setdefault(text, f"_:b{len(bnodes)}")
        elif kind == "word":
            text = text.lower() if text.lower() in ("true", "false") else text.upper()
        elif kind == "lang" and out and out[-1][-1:] in ("'", '"'):
            out[-1] += text.lower()  # a language tag belongs to its string
            continue
        elif kind == "string" and text.startswith("'") and not text.startswith("'''"):
            if '"' not in text and "\\'" not in text:
                text = f'"{text[1:-1]}"'
        elif text == "}" and out and out[-1] == ".":
            out.pop()
        out.append(text)
    return " ".join(out)


def exact_match(pred: str, gold: str) -> bool:
    """Whether two queries are the same text up to :func:`normalize_query`."""
    return normalize_query(pred) == normalize_query(gold)


def query_iris(sparql: str) -> list[str]:
    """IRIs written in the query body (prefixes expanded), in order of first appearance.

    The ``a`` keyword is not counted (it is syntax, not a schema choice); an explicit
    ``rdf:type`` is.
    """
    seen: dict[str, None] = {}
    for kind, text in _expanded_tokens(sparql):
        if kind == "iri":
            seen.setdefault(text[1:-1], None)
    return list(seen)


def schema_hit_at_k(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Fraction of the (distinct) gold items among the first ``k`` distinct ranked items."""
    if k < 1:
        raise ValueError(f"schema_hit_at_k: k must be >= 1, got {k}")
    wanted = set(gold)
    if not wanted:
        raise ValueError(
            "schema_hit_at_k: the gold list is empty, the hit rate is undefined"
        )
    top = list(dict.fromkeys(ranked))[:k]
    return len(wanted.intersection(top)) / len(wanted)


# ============================================================================ components


def _node_name(node: Any) -> str:
    return str(getattr(node, "name", ""))


def _get(node: Any, key: str) -> Any:
    """A parse-tree field or None (``CompValue.get`` returns the *key* when it is missing)."""
    return dict.get(node, key) if isinstance(node, dict) else None


def _children(node: Any) -> Iterable[Any]:
    if isinstance(node, CompValue):
        return dict.values(node)
    if isinstance(node, (list, tuple)) or type(node).__name__ == "ParseResults":
        return node
    return ()


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in _children(node):
        yield from _walk(child)


def _path_iris(path: Any) -> tuple[list[str], bool]:
    """IRIs in a predicate position and whether it is a non-trivial property path."""
    iris = [str(n) for n in _walk(path) if isinstance(n, URIRef)]
    steps = _get(path, "part") if _node_name(path) == "PathAlternative" else None
    seq = _get(steps[0], "part") if steps and len(steps) == 1 else None
    elt = seq[0] if seq and len(seq) == 1 else None
    simple = (
        _node_name(elt) == "PathElt"
        and isinstance(_get(elt, "part"), URIRef)
        and not _get(elt, "mod")
    )
    return iris, not simple


def _triples(where: Any) -> Iterator[tuple[Any, Any, Any]]:
    for node in _walk(where):
        if _node_name(node) == "TriplesBlock":
            for flat in node["triples"]:
                flat = list(flat)
                for i in range(0, len(flat) - 2, 3):
                    yield flat[i], flat[i + 1], flat[i + 2]


_INNER = {
    "OptionalGraphPattern": "OPTIONAL",
    "MinusGraphPattern": "MINUS",
    "Filter": "FILTER",
    "Bind": "BIND",
    "InlineData": "VALUES",
    "ValuesClause": "VALUES",
    "SubSelect": "SUBQUERY",
    "Builtin_EXISTS": "EXISTS",
    "Builtin_NOTEXISTS": "NOT_EXISTS",
    "GraphGraphPattern": "GRAPH",
    "ServiceGraphPattern": "SERVICE",
}


def _inner_operators(query: Any) -> Counter[str]:
    ops: Counter[str] = Counter()
    for part in (_get(query, "where"), _get(query, "valuesClause")):
        for node in _walk(part):
            name = _node_name(node)
            if name in _INNER:
                ops[_INNER[name]] += 1
            elif name == "GroupOrUnionGraphPattern" and len(node["graph"]) > 1:
                ops["UNION"] += len(node["graph"]) - 1
    return ops


def _outer_operators(query: Any) -> Counter[str]:
    ops: Counter[str] = Counter()
    ops["FORM:" + _node_name(query).removesuffix("Query").upper()] += 1
    if _get(query, "modifier"):
        ops[str(query["modifier"]).upper()] += 1
    if _node_name(query) == "SelectQuery":
        projection = _get(query, "projection")
        ops[f"PROJECTION={len(projection) if projection else '*'}"] += 1
    for clause in ("projection", "having", "orderby"):
        for node in _walk(_get(query, clause)):
            if _node_name(node).startswith("Aggregate_"):
                agg = "AGG:" + _node_name(node).removeprefix("Aggregate_").upper()
                ops[agg] += 1
                if _get(node, "distinct"):
                    ops[agg + ":DISTINCT"] += 1
    if _get(query, "groupby") is not None:
        ops["GROUP_BY"] += 1
        ops[f"GROUP_BY={len(query['groupby']['condition'])}"] += 1
    if _get(query, "having") is not None:
        ops["HAVING"] += len(query["having"]["condition"])
    if _get(query, "orderby") is not None:
        ops["ORDER_BY"] += 1
        for cond in query["orderby"]["condition"]:
            order = (
                _get(cond, "order") if _node_name(cond) == "OrderCondition" else None
            )
            ops[f"ORDER:{str(order or 'ASC').upper()}"] += 1
    limits = _get(query, "limitoffset")
    if limits is not None:
        for key in ("limit", "offset"):
            if _get(limits, key) is not None:
                ops[key.upper()] += 1
                ops[f"{key.upper()}={int(limits[key])}"] += 1
    return ops


def _parse(sparql: str) -> Any:
    """The rdflib parse tree of the query with prefixed names resolved to IRIs."""
    tree = parseQuery(add_missing_prefixes(sparql))  # as the KG layer runs it
    prologue = translatePrologue(tree[0], None)
    return traverse(tree[1], visitPost=partial(translatePName, prologue=prologue))


Features = tuple[tuple[tuple[str, int], ...], ...]


@lru_cache(maxsize=4096)
def _features(sparql: str) -> Features | None:
    """Per-family multisets of a query (cached: gold queries are scored over and over)."""
    try:
        query = _parse(sparql)
    except Exception:  # noqa: BLE001 - rdflib raises bare Exception for unknown prefixes
        return None
    nodes: Counter[str] = Counter()
    predicates: Counter[str] = Counter()
    inner = _inner_operators(query)
    for subj, pred, obj in _triples(_get(query, "where")):
        for node in (subj, obj):
            if isinstance(node, RDFLiteral) and node.language:
                node = RDFLiteral(
                    str(node), lang=node.language.lower()
                )  # tags are case-insensitive
            if isinstance(node, (URIRef, RDFLiteral)) and not isinstance(
                node, (Variable, BNode)
            ):
                nodes[node.n3()] += 1
        if isinstance(pred, URIRef):
            predicates[str(pred)] += 1
        elif not isinstance(pred, Variable):
            iris, is_path = _path_iris(pred)
            predicates.update(iris)
            if is_path:
                inner["PATH"] += 1
    families = (nodes, predicates, inner, _outer_operators(query))
    return tuple(tuple(sorted(c.items())) for c in families)


def _f1(pred: Counter[str], gold: Counter[str]) -> float:
    if not pred and not gold:
        return 1.0  # both lack the family entirely: they agree
    overlap = sum((pred & gold).values())
    if not overlap:
        return 0.0
    precision = overlap / sum(pred.values())
    recall = overlap / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def component_scores(pred: str, gold: str) -> dict[str, float | None]:
    """F1 per family (``FAMILIES``) between the parsed prediction and gold, over multisets.

    nodes: IRIs and literals in subject/object position of triple patterns; predicates: IRIs in
    predicate position (inside property paths too); inner_operators: FILTER, OPTIONAL, UNION,
    MINUS, BIND, VALUES, SUBQUERY, EXISTS, NOT_EXISTS, GRAPH, SERVICE, PATH; outer_operators: query
    form, DISTINCT/REDUCED, projection width, aggregates (with DISTINCT), GROUP BY (+ key count),
    HAVING, ORDER BY with each key's direction, LIMIT/OFFSET (+ value). Variable names never
    matter. A family empty in both queries scores 1.0. An unparsable prediction scores 0.0 in
    every family; a gold query rdflib cannot parse gives None for every family.
    """
    gold_features = _features(gold)
    if gold_features is None:
        return {family: None for family in FAMILIES}
    pred_features = _features(pred)
    if pred_features is None:
        return {family: 0.0 for family in FAMILIES}
    return {
        family: _f1(Counter(dict(p)), Counter(dict(g)))
        for family, p, g in zip(FAMILIES, pred_features, gold_features)
    }


# ============================================================================ outcomes


def categorize(
    *,
    gold_available: bool,
    error_kind: str | None,
    pred: Mapping[str, float] | None,
    scores: Mapping[str, float] | None,
) -> Outcome:
    """The outcome category of one question.

    correct: set_F == 1 (and ndcg == 1 when scored, i.e. when order matters); partially_correct:
    0 < set_F < 1, or a perfect set in the wrong order; empty_result: the prediction returned no
    answers; wrong_answer: answers, but set_F == 0. Errors take precedence over answers.
    """
    if not gold_available:
        return "gold_unavailable"
    if error_kind is not None:
        if error_kind not in _ERROR_OUTCOMES:
            raise ValueError(
                f"categorize: unknown error_kind {error_kind!r} (expected syntax, execution or timeout)"
            )
        return _ERROR_OUTCOMES[error_kind]
    if not pred:
        return "empty_result"
    if not scores or "set_F" not in scores:
        raise ValueError(
            "categorize: a question with gold and answers needs its scores (set_F)"
        )
    f_measure = scores["set_F"]
    if f_measure == 1.0:
        return "correct" if scores.get("ndcg", 1.0) == 1.0 else "partially_correct"
    return "partially_correct" if f_measure > 0.0 else "wrong_answer"
