"""WorkerAgent: statuses around a strategy (hooks, read-only check, time limit) and tool wiring."""

from __future__ import annotations

import json

import pytest

from researcher.propose import set_yaml_value
from worker_agent.agent import WorkerAgent, build_tools, expand_name
from worker_agent.kg import OxigraphKG
from worker_agent.spec import AgentSpec, seed_spec_path
from worker_agent.strategies import StrategyResult
from worker_agent.trace import load_trace

TTL = """@prefix ex: <http://example.org/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
ex:a rdfs:label "Alpha" ; ex:name "Alpha Centauri" ; ex:p ex:b .
ex:b rdfs:label "Beta" .
"""


@pytest.fixture()
def kg(tmp_path):
    path = tmp_path / "kg.ttl"
    path.write_text(TTL)
    return OxigraphKG([path])


class Fixed:
    def __init__(self, result: StrategyResult) -> None:
        self.result = result

    def answer(self, question, trace, *, lang=None, deadline=None):
        trace.step("fixed", query=self.result.query)
        return StrategyResult(self.result.query, self.result.status, self.result.detail)


def agent_with(kg, tmp_path, result, files=None):
    spec = AgentSpec.from_files(files) if files else AgentSpec.load(seed_spec_path())
    agent = WorkerAgent(spec, kg, [], traces_dir=tmp_path / "traces")
    agent.strategy = Fixed(result)
    return agent


def test_answered_query_gets_rules_enforced_and_a_trace(kg, tmp_path):
    agent = agent_with(kg, tmp_path, StrategyResult("SELECT ?x WHERE { ?x rdfs:label ?l }", "answered"))
    answer = agent.ask("What has a label?", uid="t:1-en")
    assert answer.status == "answered"
    assert answer.query.startswith("PREFIX rdfs:")  # add_prefixes enforcement
    trace = load_trace(answer.trace_path)
    assert trace["status"] == "answered" and [s["kind"] for s in trace["steps"]][:1] == ["fixed"]


def test_update_query_is_invalid(kg, tmp_path):
    answer = agent_with(kg, tmp_path, StrategyResult("DELETE WHERE { ?s ?p ?o }", "answered")).ask("q")
    assert answer.status == "invalid_query" and answer.query is None
    assert "update" in answer.detail.lower()


def test_raising_hook_ends_the_question_with_tool_error(kg, tmp_path):
    files = AgentSpec.load(seed_spec_path()).files()
    files["hooks.py"] = "def postprocess_query(sparql):\n    return 1 / 0\n"
    answer = agent_with(kg, tmp_path, StrategyResult("ASK {}", "answered"), files).ask("q")
    assert answer.status == "tool_error" and "hook" in answer.detail


def test_strategy_crash_is_contained(kg, tmp_path):
    agent = agent_with(kg, tmp_path, StrategyResult("ASK {}", "answered"))

    class Boom:
        def answer(self, *a, **k):
            raise RuntimeError("bug in a strategy")

    agent.strategy = Boom()
    answer = agent.ask("q", uid="t:2-en")
    assert answer.status == "tool_error" and "bug in a strategy" in answer.detail
    assert json.loads(answer.trace_path.read_text())["status"] == "tool_error"


def test_tools_follow_the_spec(kg):
    files = AgentSpec.load(seed_spec_path()).files()
    text = files["agent.yaml"].replace("label_predicates: []", 'label_predicates: ["http://example.org/name"]')
    text = set_yaml_value(text, "tools.surface_forms.k", 3)
    tools = build_tools(AgentSpec.from_files({**files, "agent.yaml": text}), kg)
    assert tools.k == 3 and "http://example.org/name" in tools.label_predicates
    assert [c.iri for c in tools.surface_forms("Alpha Centauri")][:1] == ["http://example.org/a"]
    assert expand_name("rdfs:label") == "http://www.w3.org/2000/01/rdf-schema#label"
    assert expand_name("http://x.org/p") == "http://x.org/p"
