"""The worker agent: one agent spec + one KG + training examples -> a query per question.

``WorkerAgent.ask`` wraps a strategy with what every strategy needs: a trace saved after every
step, the spec's deterministic rule enforcements and post-processing hook, a read-only check of
the final query, a per-question time limit and a closed set of exit statuses.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker_agent.kg import KNOWN_PREFIXES, KGError, KnowledgeGraph, check_read_only
from worker_agent.spec import AgentSpec, HookError
from worker_agent.strategies import Example, StrategyResult, make_strategy
from worker_agent.tools import Tools
from worker_agent.trace import Trace, trace_filename


@dataclass
class Answer:
    uid: str
    question: str
    query: str | None
    status: str
    detail: str | None = None
    time_s: float = 0.0
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0})
    trace_path: Path | None = None


def expand_name(name: str) -> str:
    """``pv:name`` -> full IRI with the known prefixes; full IRIs pass through."""
    head, sep, local = name.partition(":")
    if sep and head in KNOWN_PREFIXES and not local.startswith("//"):
        return KNOWN_PREFIXES[head] + local
    return name


def build_tools(spec: AgentSpec, kg: KnowledgeGraph) -> Tools:
    """Tools configured by the spec's ``tools`` section."""
    t = spec.config.tools
    return Tools(
        kg,
        label_predicates=tuple(expand_name(p) for p in t.surface_forms.label_predicates),
        lookup_url=t.surface_forms.lookup_url,
        virtuoso=t.surface_forms.virtuoso,
        k=t.surface_forms.k,
        fuzzy_threshold=t.surface_forms.fuzzy_threshold,
        group_namespaces=t.ontology.group_namespaces,
        examples=t.ontology.examples,
        timeout_s=t.test_sparql.timeout_s,
        preview_rows=t.test_sparql.preview_rows,
    )


class WorkerAgent:
    def __init__(
        self,
        spec: AgentSpec,
        kg: KnowledgeGraph,
        examples: Sequence[Example] = (),
        *,
        model: Any = None,
        traces_dir: Path | None = None,
        spec_version: str | None = None,
        spec_commit: str | None = None,
        tools: Tools | None = None,
        dataset: dict[str, Any] | None = None,
        cache_path: Path | None = None,
        use_cache: bool = True,
    ) -> None:
        self.spec = spec
        self.kg = kg
        self.examples = list(examples)
        self.tools = tools or build_tools(spec, kg)
        self.strategy = make_strategy(spec, self.tools, self.examples, model, dataset, cache_path,
                                      use_cache)
        self.traces_dir = traces_dir
        self.spec_version = spec_version
        self.spec_commit = spec_commit

    def _trace(self, uid: str, question: str) -> Trace:
        path = self.traces_dir / trace_filename(uid) if self.traces_dir else None
        return Trace(path, uid=uid, question=question, spec_version=self.spec_version,
                     spec_commit=self.spec_commit, config=self.spec.config.model_dump(mode="json"))

    def ask(self, question: str, *, uid: str = "question", lang: str | None = None) -> Answer:
        trace = self._trace(uid, question)
        start = time.perf_counter()
        deadline = start + float(self.spec.config.answer_timeout_s)
        try:
            result = self.strategy.answer(question, trace, lang=lang, deadline=deadline)
            result = self._finalize(result, trace)
        except HookError as exc:
            result = StrategyResult(None, "tool_error", f"spec hook failed: {exc}")
        except Exception as exc:  # a strategy bug must end this question, not the run
            result = StrategyResult(None, "tool_error", f"{type(exc).__name__}: {exc}")
            trace.step("error", error=result.detail)
        if result.status == "answered" and time.perf_counter() > deadline:
            result.status = "timeout"
        trace.finish(result.status, result.query, detail=result.detail)
        data = trace.to_dict()
        return Answer(uid, question, result.query, result.status, result.detail,
                      round(time.perf_counter() - start, 4), data["cost_usd"], dict(data["tokens"]),
                      trace.path)

    def _finalize(self, result: StrategyResult, trace: Trace) -> StrategyResult:
        """Apply rule enforcements and the post-processing hook; the query must stay read-only."""
        if not result.query:
            return result
        # The hook first (it may strip fences or prose), then the deterministic rule enforcements.
        query = result.query
        hook = self.spec.hook("postprocess_query")
        if hook is not None:
            query = hook(query)
        query = self.spec.enforce(query)
        if query != result.query:
            trace.step("postprocess", before=result.query, after=query)
        try:
            check_read_only(query)
        except KGError as exc:
            return StrategyResult(None, "invalid_query", str(exc))
        result.query = query
        return result
