"""Strategies: how an agent spec turns a question into a SPARQL query.

A strategy has one method, ``answer``. ``make_strategy`` picks one by the spec's ``strategy`` key:
``offline`` (deterministic retrieval-and-adaptation, no LLM) or ``llm_agent`` (tool-using LLM loop).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from worker_agent.llm import Model
    from worker_agent.spec import AgentSpec
    from worker_agent.tools import Tools
    from worker_agent.trace import Trace


@dataclass(frozen=True)
class Example:
    """A training question with its gold query: the only material strategies may learn from."""

    uid: str
    text: str
    sparql: str
    lang: str = "en"
    features: tuple[str, ...] = ()


@dataclass
class StrategyResult:
    query: str | None
    status: str  # one of worker_agent.trace.STATUSES
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Strategy(Protocol):
    def answer(self, question: str, trace: "Trace", *, lang: str | None = None,
               deadline: float | None = None) -> StrategyResult: ...


def make_strategy(spec: "AgentSpec", tools: "Tools", examples: list[Example],
                  model: "Model | None" = None, dataset: dict[str, Any] | None = None,
                  cache_path: Path | None = None, use_cache: bool = True) -> Strategy:
    """``dataset`` (optional): ``dataset_name`` and ``default_namespace`` shown to an LLM.

    ``cache_path``: the persistent LLM response cache (default: ``llm.default_cache_path()``), so
    an unchanged request is never paid twice. ``use_cache=False``: every call goes to the model
    (repeated evaluations that measure a model's variance).
    """
    name = spec.config.strategy
    if name == "offline":
        from worker_agent.strategies.offline import OfflineStrategy

        return OfflineStrategy(spec, tools, examples)
    if name == "llm_agent":
        from worker_agent.strategies.llm_agent import LLMAgentStrategy

        if model is None:
            from worker_agent.llm import ModelConfig, ResponseCache, default_cache_path, make_model

            path = (cache_path or default_cache_path()) if use_cache else None
            model = make_model(ModelConfig.model_validate(spec.config.model or {}),
                               cache=ResponseCache(path) if path else None)
        return LLMAgentStrategy(spec, tools, examples, model, **(dataset or {}))
    raise ValueError(f"unknown strategy {name!r}")
