"""Evaluation: score predicted queries (or run a worker agent) on a question set.

``score_predictions`` is the single place where a prediction becomes numbers: it executes the
predicted query on the KG, pools its answers the official way, compares them with the gold answer
set and adds the structural metrics (exact match, per-family component scores, schema hit@k) and an
outcome category. ``evaluate_agent`` runs a worker agent over questions (concurrently, bounded)
and scores what it produced. Questions whose gold cannot be obtained are reported as
``gold_unavailable`` with the reason and are left out of every average.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from researcher import metrics
from researcher.datasets import DatasetError, Question
from worker_agent.kg import (
    KGError,
    KnowledgeGraph,
    QuerySyntaxError,
    QueryTimeout,
    UpdateNotAllowed,
)

#: Metrics averaged in summaries (official names first).
ANSWER_METRICS = ("set_P", "set_recall", "set_F", "set_F_ndcg")
SCHEMA_K = 5
SCORING_MAX_ROWS = 2_000_000


@dataclass
class Gold:
    """The gold answer set of one question, or why there is none."""

    answers: dict[str, int] | None
    order_matters: bool = False
    source: str = "official"  # "official" | "query"
    reason: str | None = None  # set when answers is None

    @property
    def available(self) -> bool:
        return self.answers is not None


@dataclass
class Execution:
    answers: dict[str, int] | None
    error_kind: str | None = None  # syntax | execution | timeout
    error: str | None = None
    n_rows: int = 0


@dataclass
class QuestionResult:
    """Everything measured for one question (one JSONL line of a results file)."""

    uid: str
    qid: str
    lang: str
    question: str
    features: list[str]
    predicted_query: str | None
    gold_query: str | None
    outcome: str
    status: str | None = None  # the worker's exit status when a worker produced the query
    scores: dict[str, float] = field(default_factory=dict)
    components: dict[str, float | None] = field(default_factory=dict)
    exact_match: bool | None = None
    schema_hit: float | None = None
    error: str | None = None
    gold_reason: str | None = None
    predicted_answers: list[str] = field(default_factory=list)
    gold_answers: list[str] = field(default_factory=list)
    time_s: float = 0.0
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0})

    @property
    def counted(self) -> bool:
        return self.outcome != "gold_unavailable"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvalReport:
    results: list[QuestionResult]
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "results": [r.to_dict() for r in self.results]}


# --------------------------------------------------------------------------- gold


def execute(kg: KnowledgeGraph, sparql: str, *, timeout: float | None = None) -> Execution:
    """Run a query and pool its answers; errors are classified, never raised."""
    try:
        # Scoring sees every row, as the official client does (the KG's interactive row cap
        # would silently inflate precision); beyond SCORING_MAX_ROWS the answer is an error.
        result = kg.query(sparql, timeout=timeout, max_rows=SCORING_MAX_ROWS)
    except (QuerySyntaxError, UpdateNotAllowed) as exc:
        return Execution(None, "syntax", str(exc))
    except QueryTimeout as exc:
        return Execution(None, "timeout", str(exc))
    except KGError as exc:
        return Execution(None, "execution", str(exc))
    if result.truncated:
        return Execution(None, "execution", f"more than {SCORING_MAX_ROWS:,} result rows: not scored")
    return Execution(metrics.answer_set(result), None, None, len(result.rows))


def check_gold_covers(questions: Sequence[Question], official: Mapping[str, Any], path: Any) -> None:
    """An official answer file that names none of the questions is a mix-up, not missing gold."""
    uids = {q.uid for q in questions}
    if uids and not uids & set(official):
        example = next((k for k in official if k != "order_required"), None)
        raise DatasetError(f"{path}: answer sets name none of the questions (it has {example!r}, "
                           f"the questions are like {next(iter(sorted(uids)))!r}): wrong gold file?")


def resolve_gold(
    questions: Sequence[Question],
    kg: KnowledgeGraph | None,
    official: Mapping[str, Mapping[str, int]] | None = None,
    order_required: Iterable[str] = (),
    *,
    timeout: float | None = None,
) -> dict[str, Gold]:
    """Gold per question: the official answer set when given, else the gold query's answers.

    ``order_required`` names the questions whose answer order matters (the official client reads
    them from the ``RESULT_ORDER_MATTERS`` feature of the questions file); only they get nDCG.
    """
    ordered = set(order_required)
    gold: dict[str, Gold] = {}
    cache: dict[str, Execution] = {}
    for q in questions:
        order = q.uid in ordered
        if official is not None and q.uid in official:
            answers = dict(official[q.uid])
            reason = metrics.gold_unavailable_reason(answers)
            gold[q.uid] = Gold(None if reason else answers, order, "official", reason)
            continue
        if not q.sparql:
            gold[q.uid] = Gold(None, order, "query", "no gold query and no official answer set")
            continue
        if kg is None:
            gold[q.uid] = Gold(None, order, "query", "no knowledge graph to execute the gold query")
            continue
        run = cache.get(q.sparql) or execute(kg, q.sparql, timeout=timeout)
        cache[q.sparql] = run
        if run.answers is None:
            gold[q.uid] = Gold(None, order, "query", f"gold query failed: {run.error}")
        else:
            reason = metrics.gold_unavailable_reason(run.answers)
            gold[q.uid] = Gold(None if reason else run.answers, order, "query", reason)
    return gold


# --------------------------------------------------------------------------- scoring


def _schema_items(sparql: str) -> list[str]:
    """IRIs a query uses, in order of first appearance (a ranking for schema hit@k)."""
    try:
        return metrics.query_iris(sparql)
    except Exception:  # an unparsable prediction simply ranks nothing
        return []


def _zero_components(gold_sparql: str) -> dict[str, float | None]:
    """0.0 per family, None where the gold query itself cannot be parsed (as component_scores)."""
    reference = metrics.component_scores(gold_sparql, gold_sparql)
    return {fam: (None if value is None else 0.0) for fam, value in reference.items()}


def score_one(
    q: Question,
    predicted: str | None,
    gold: Gold,
    kg: KnowledgeGraph,
    *,
    timeout: float | None = None,
    status: str | None = None,
) -> QuestionResult:
    res = QuestionResult(
        uid=q.uid, qid=q.qid, lang=q.lang, question=q.text, features=list(q.features),
        predicted_query=predicted, gold_query=q.sparql, outcome="wrong_answer", status=status,
    )
    if gold.answers is not None:
        res.gold_answers = sorted(gold.answers)[:50]
    # No prediction scores 0 on every structural measure (not "unknown"): otherwise a version that
    # gives up on hard questions would look better than one that tries.
    if q.sparql:
        res.exact_match = bool(predicted) and metrics.exact_match(predicted, q.sparql)
        res.components = (metrics.component_scores(predicted, q.sparql) if predicted
                          else _zero_components(q.sparql))
    gold_schema = list(q.classes) + list(q.properties)
    if gold_schema:
        res.schema_hit = metrics.schema_hit_at_k(_schema_items(predicted) if predicted else [], gold_schema, SCHEMA_K)
    run = execute(kg, predicted, timeout=timeout) if predicted else Execution({}, None, None)
    if run.answers is not None:
        res.predicted_answers = sorted(run.answers)[:50]
    res.error = run.error
    if not gold.available:
        res.gold_reason = gold.reason
        res.outcome = "gold_unavailable"
        return res
    if run.answers is not None:
        res.scores = metrics.score_question(run.answers, gold.answers, order_matters=gold.order_matters)
    elif predicted:
        res.scores = metrics.score_question({}, gold.answers, order_matters=gold.order_matters)
    res.outcome = metrics.categorize(
        gold_available=True, error_kind=run.error_kind, pred=run.answers, scores=res.scores or None,
    )
    return res


def score_predictions(
    questions: Sequence[Question],
    predictions: Mapping[str, str | None],
    kg: KnowledgeGraph,
    gold: Mapping[str, Gold],
    *,
    timeout: float | None = None,
    statuses: Mapping[str, str] | None = None,
) -> EvalReport:
    """Score a ``{uid: query}`` map; a missing prediction counts as an empty answer."""
    results = [
        score_one(q, predictions.get(q.uid), gold[q.uid], kg, timeout=timeout,
                  status=(statuses or {}).get(q.uid))
        for q in questions
    ]
    return EvalReport(results, summarize(results))


# --------------------------------------------------------------------------- summaries


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.fmean(vals), 6) if vals else None


def _answer_means(results: Sequence[QuestionResult]) -> dict[str, float | None]:
    """Averages exactly as the official client computes them (numpy's summation, its set_F_ndcg)."""
    scored = [r.scores for r in results if r.scores]
    out: dict[str, Any] = {"n": len(results)}
    if not scored:
        return {**out, **{m: None for m in ANSWER_METRICS}}
    for m in ("set_P", "set_recall", "set_F"):
        out[m] = metrics._numpy_mean([s[m] for s in scored])
    ordered = [s["ndcg"] for s in scored if "ndcg" in s]
    if ordered:
        # official quirk: the overall ndcg average is pooled as one more value (see metrics docs)
        out["ndcg"] = metrics._numpy_mean(ordered)
        combined = [s.get("ndcg", s["set_F"]) for s in scored] + [out["ndcg"]]
        out["set_F_ndcg"] = statistics.fmean(combined)
    else:
        out["set_F_ndcg"] = out["set_F"]
    return out


def summarize(results: Sequence[QuestionResult]) -> dict[str, Any]:
    counted = [r for r in results if r.counted]
    overall: dict[str, Any] = _answer_means(counted)
    overall["exact_match"] = _mean(float(r.exact_match) for r in counted if r.exact_match is not None)
    overall["schema_hit@5"] = _mean(r.schema_hit for r in counted)
    families = {f: _mean(r.components.get(f) for r in counted) for f in metrics.FAMILIES}
    by_feature: dict[str, list[QuestionResult]] = defaultdict(list)
    by_lang: dict[str, list[QuestionResult]] = defaultdict(list)
    for r in counted:
        for feat in r.features:
            by_feature[feat].append(r)
        by_lang[r.lang].append(r)
    statuses = Counter(r.status for r in results if r.status)
    return {
        "n_questions": len(results),
        "n_scored": len(counted),
        "overall": overall,
        "families": families,
        "per_feature": {k: _answer_means(v) for k, v in sorted(by_feature.items())},
        "per_language": {k: _answer_means(v) for k, v in sorted(by_lang.items())},
        "outcomes": dict(sorted(Counter(r.outcome for r in results).items())),
        "statuses": dict(sorted(statuses.items())),
        "gold_unavailable": [
            {"uid": r.uid, "reason": r.gold_reason} for r in results if not r.counted
        ],
        "cost_usd": round(sum(r.cost_usd for r in results), 6),
        "tokens": {
            "input": sum(r.tokens["input"] for r in results),
            "output": sum(r.tokens["output"] for r in results),
        },
        "time_s": round(sum(r.time_s for r in results), 3),
    }


# --------------------------------------------------------------------------- agents


@dataclass
class AgentAnswer:
    """What a worker produced for one question (the subset evaluation needs)."""

    query: str | None
    status: str
    time_s: float = 0.0
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0})


def evaluate_agent(
    answer: Callable[[Question], AgentAnswer],
    questions: Sequence[Question],
    kg: KnowledgeGraph,
    gold: Mapping[str, Gold],
    *,
    concurrency: int = 4,
    timeout: float | None = None,
    progress: Callable[[Question, AgentAnswer], None] | None = None,
) -> EvalReport:
    """Run ``answer`` on every question (bounded concurrency) and score the queries."""

    def run(q: Question) -> AgentAnswer:
        start = time.perf_counter()
        out = answer(q)
        out.time_s = out.time_s or round(time.perf_counter() - start, 4)
        if progress is not None:
            progress(q, out)
        return out

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        answers = list(pool.map(run, questions))
    results = []
    for q, a in zip(questions, answers):
        r = score_one(q, a.query, gold[q.uid], kg, timeout=timeout, status=a.status)
        r.time_s, r.cost_usd, r.tokens = a.time_s, a.cost_usd, dict(a.tokens)
        results.append(r)
    return EvalReport(results, summarize(results))


# --------------------------------------------------------------------------- predictions files


class PredictionsError(ValueError):
    """A predictions file that cannot be read; the message names the file and the problem."""


def load_predictions(path: str | Path) -> dict[str, str | None]:
    """Read predictions: the answers JSON of the official ``text2sparql ask`` or ``{uid: query}``.

    The official file is a list of ``{"dataset", "question", "query", "qname", ...}`` objects;
    entries without ``query`` are kept as ``None`` (the official evaluation scores them 0).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PredictionsError(f"{p}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PredictionsError(f"{p}: not a JSON predictions file ({exc})") from None
    if isinstance(data, dict):
        bad = [k for k, v in data.items() if v is not None and not isinstance(v, str)]
        if bad:
            raise PredictionsError(f"{p}: prediction for {bad[0]!r} is not a query string")
        return dict(data)
    if isinstance(data, list):
        out: dict[str, str | None] = {}
        for i, item in enumerate(data):
            if not isinstance(item, dict) or "qname" not in item:
                raise PredictionsError(f"{p}: entry {i} has no 'qname' (expected text2sparql ask output)")
            if item["qname"] in out:  # the official evaluation keeps the first answer
                continue
            query = item.get("query")
            out[item["qname"]] = query if isinstance(query, str) else None
        return out
    raise PredictionsError(f"{p}: expected a JSON object {{uid: query}} or a list of answers")
