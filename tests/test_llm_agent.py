"""worker_agent.strategies.llm_agent: the tool-calling loop on the real CK25 graph and real tools,
driven by a ScriptedModel and by the real OpenAI/Anthropic SDKs over intercepted HTTP (respx)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import respx
import yaml

from researcher.datasets import load_gold_answers, load_questions, make_splits
from researcher.metrics import answer_set
from worker_agent import llm
from worker_agent.agent import WorkerAgent
from worker_agent.kg import OxigraphKG
from worker_agent.llm import Completion, Message, ScriptedModel, ToolCall
from worker_agent.spec import AgentSpec, seed_spec_path
from worker_agent.strategies import Example, make_strategy
from worker_agent.strategies.llm_agent import (
    SUBMIT_TOOL,
    LLMAgentStrategy,
    check_result,
    expected_shape,
    extract_query,
    guess_language,
    select_examples,
)
from worker_agent.tools import Tools
from worker_agent.trace import Trace, load_trace

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
CK25 = DATASETS / "ck25"
DB25 = DATASETS / "db25"
pytestmark = pytest.mark.skipif(not (CK25 / "prod-inst.ttl").exists(),
                                reason="shared CK25 data not available")

QUESTION = "What is the telephone of Baldwin Dirksen?"
UID = "ck25:2-en"
BALDWIN = "http://ld.company.org/prod-instances/empl-Baldwin.Dirksen%40company.org"
PHONE = "+49-6200-33069465"
GOLD_QUERY = ("PREFIX pv: <http://ld.company.org/prod-vocab/>\n"
              f"SELECT DISTINCT ?result WHERE {{ <{BALDWIN}> pv:phone ?result . }}")
EMPTY_QUERY = ("PREFIX pv: <http://ld.company.org/prod-vocab/>\n"
               f"SELECT DISTINCT ?result WHERE {{ <{BALDWIN}> pv:fax ?result . }}")
BROKEN_QUERY = f"SELECT ?result WHERE {{ <{BALDWIN}> pv:phone ?result "  # unclosed brace


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def kg() -> OxigraphKG:
    return OxigraphKG([CK25 / "prod-vocab.ttl", CK25 / "prod-inst.ttl"])


@pytest.fixture(scope="module")
def tools(kg: OxigraphKG) -> Tools:
    return Tools(kg)


@pytest.fixture(scope="module")
def questions():
    return load_questions(CK25 / "questions.yml")


@pytest.fixture(scope="module")
def gold() -> dict[str, dict[str, int]]:
    return load_gold_answers(CK25 / "true_result_set.json")


@pytest.fixture(scope="module")
def examples(questions) -> list[Example]:
    """Every CK25 question except the ones the tests ask, as training examples."""
    asked = {"2", "13"}
    return [Example(q.uid, q.text, q.sparql, q.lang, q.features)
            for q in questions.questions if q.qid not in asked and q.sparql]


def make_spec(hooks: str | None = None, **config) -> AgentSpec:
    """The shipped seed spec switched to llm_agent (plus config changes)."""
    files = AgentSpec.load(seed_spec_path()).files()
    data = yaml.safe_load(files["agent.yaml"])
    data.update({"strategy": "llm_agent", **config})
    files["agent.yaml"] = yaml.safe_dump(data, sort_keys=False)
    if hooks is not None:
        files["hooks.py"] = hooks
    return AgentSpec.from_files(files, origin="test-spec")


def call(name: str, cid: str, **arguments) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(cid, name, arguments)])


def run(spec: AgentSpec, tools: Tools, examples, model, question: str = QUESTION,
        deadline: float | None = None):
    strategy = LLMAgentStrategy(spec, tools, examples, model)
    trace = Trace(None, uid="q", question=question)
    return strategy.answer(question, trace, lang="en", deadline=deadline), trace


def tool_steps(trace) -> list[dict]:
    steps = trace["steps"] if isinstance(trace, dict) else trace.steps
    return [s for s in steps if s["kind"] == "tool"]


def request_text(request) -> str:
    return "\n".join(m.content for m in request.messages)


# --------------------------------------------------------------------------- (1) end to end

def test_scripted_model_answers_a_ck25_question_end_to_end(kg, tools, examples, gold, tmp_path):
    model = ScriptedModel([
        Message("assistant", "First I link the person.", tool_calls=[
            ToolCall("c1", "surface_forms", {"text": "Baldwin Dirksen"})]),
        call("ontology", "c2", iri=BALDWIN),
        call("test_sparql", "c3", sparql=GOLD_QUERY),
        call(SUBMIT_TOOL, "c4", sparql=GOLD_QUERY),
    ])
    agent = WorkerAgent(make_spec(few_shot=2), kg, examples, model=model, traces_dir=tmp_path,
                        tools=tools)
    answer = agent.ask(QUESTION, uid=UID, lang="en")

    assert answer.status == "answered", answer.detail
    assert answer_set(kg.query(answer.query)) == gold[UID] == {PHONE: 1}
    assert model.remaining == 0 and len(model.requests) == 4

    # Prompts: the seed templates, with tools, enabled rules and the retrieved training examples.
    system, user = model.requests[0].messages
    assert system.role == "system" and "`submit_query`" in system.content
    assert "`surface_forms`" in system.content
    assert "ASK query, never with a SELECT" in system.content  # rule ask_for_yes_no (enabled)
    assert "SELECT DISTINCT" not in system.content.split("## Rules")[1]  # select_distinct is off
    assert user.content.rstrip().endswith(f"Question: {QUESTION}")
    assert "Solved questions on the same knowledge graph" in user.content
    assert [t["name"] for t in model.requests[0].tools] == [
        "surface_forms", "ontology", "test_sparql", SUBMIT_TOOL]

    # Every tool result went back to the model, formatted by the seed spec's hook.
    second = model.requests[1].messages
    assert second[-1].role == "tool" and second[-1].tool_call_id == "c1"
    assert f'"iri": "{BALDWIN}"' in second[-1].content  # hook: one sorted JSON line per item
    assert "pv:phone" in model.requests[2].messages[-1].content
    assert PHONE in model.requests[3].messages[-1].content

    trace = load_trace(answer.trace_path)
    assert trace["status"] == "answered" and trace["query"] == answer.query
    assert [s["name"] for s in tool_steps(trace)] == [
        "surface_forms", "ontology", "test_sparql", SUBMIT_TOOL]
    kinds = [s["kind"] for s in trace["steps"]]
    assert kinds.count("llm") == 4 and kinds.count("prompt") == 2
    examples_step = next(s for s in trace["steps"] if s["kind"] == "examples")
    assert len(examples_step["uids"]) == 2 and UID not in examples_step["uids"]
    verify = [s for s in trace["steps"] if s["kind"] == "verify"]
    assert len(verify) == 1 and verify[0]["accepted"] and verify[0]["result"]["total"] == 1
    assert trace["steps"][kinds.index("llm")]["message"]["content"] == "First I link the person."


# --------------------------------------------------------------------------- (2) budget

def test_budget_exhausted_returns_the_best_query_seen(tools, examples):
    model = ScriptedModel([
        call("test_sparql", "c1", sparql=EMPTY_QUERY),
        call("test_sparql", "c2", sparql=GOLD_QUERY),
        call("surface_forms", "c3", text="Dirksen"),
        call("surface_forms", "never", text="not reached"),
    ])
    result, trace = run(make_spec(max_iterations=3), tools, examples, model)
    assert result.status == "budget_exhausted"
    assert result.query == GOLD_QUERY  # the tested draft with answers beats the empty one
    assert len(model.requests) == 3 and model.remaining == 1
    assert "3 turns" in result.detail and result.extra["turns"] == 3
    assert [s["kind"] for s in trace.steps].count("llm") == 3 and len(tool_steps(trace)) == 3


def test_out_of_turns_without_a_working_query(tools, examples):
    model = ScriptedModel([call("test_sparql", "c1", sparql=BROKEN_QUERY),
                           call(SUBMIT_TOOL, "c2", sparql=BROKEN_QUERY)])
    result, trace = run(make_spec(max_iterations=2), tools, examples, model)
    assert result.status == "invalid_query" and result.query is not None
    assert [s["accepted"] for s in trace.steps if s["kind"] == "verify"] == [False]
    assert "syntax error" in result.detail

    nothing, _ = run(make_spec(max_iterations=1), tools, examples,
                     ScriptedModel([call("surface_forms", "c1", text="Baldwin")]))
    assert nothing.status == "budget_exhausted" and nothing.query is None


def test_large_test_results_are_valid_json_and_graded(kg, examples):
    """preview_rows: 100 makes a result longer than the tool-result limit: the model still gets
    JSON (rows dropped, marked truncated), and the query is recorded and graded."""
    big = Tools(kg, preview_rows=100)
    wide = "SELECT ?s ?p ?o WHERE { ?s ?p ?o }"
    no_format = make_spec(hooks="def postprocess_query(q):\n    return q\n")
    model = ScriptedModel([call("test_sparql", "c1", sparql=wide)])  # then the script runs out
    result, trace = run(no_format, big, examples, model)
    assert result.status == "llm_error" and result.query == wide  # recorded as a candidate
    assert "grade 3" in result.detail  # graded on the whole preview: rows, as the question wants
    shown = json.loads(tool_steps(trace)[0]["result"])
    assert shown["truncated"] is True and 0 < shown["shown"] < 100 and len(shown["rows"]) == shown["shown"]

    seen = ("def format_tool_result(tool_name, result):\n"
            "    return 'dict' if isinstance(result, dict) and result.get('truncated') else 'other'\n")
    model = ScriptedModel([call("test_sparql", "c1", sparql=wide), call(SUBMIT_TOOL, "c2", sparql=GOLD_QUERY)])
    result, _ = run(make_spec(hooks=seen), big, examples, model)
    assert result.status == "answered"
    assert model.requests[1].messages[-1].content == "dict"  # the hook gets data, not cut text


# --------------------------------------------------------------------------- (3) malformed calls

def test_malformed_tool_arguments_are_reported_to_the_model(tools, examples):
    model = ScriptedModel([
        Message("assistant", "", tool_calls=[
            ToolCall.from_raw("c1", "surface_forms", '{"text": "Baldwin Dirks')]),
        Message("assistant", "", tool_calls=[
            ToolCall("c2", "surface_forms", {"query": "Baldwin Dirksen"}),  # wrong key
            ToolCall("c3", "surface_forms", {"text": "Baldwin Dirksen"})]),
        call(SUBMIT_TOOL, "c4", sparql=GOLD_QUERY),
    ])
    result, trace = run(make_spec(), tools, examples, model)
    assert result.status == "answered"
    replies = {m.tool_call_id: m.content for m in model.requests[2].messages if m.role == "tool"}
    assert "not a JSON object" in replies["c1"] and "Baldwin Dirks" in replies["c1"]
    assert replies["c2"].startswith("error: bad arguments for surface_forms")
    assert BALDWIN in replies["c3"]
    assert [s["malformed"] for s in tool_steps(trace)] == [True, True, False, False]


@pytest.mark.parametrize("turns", [
    [Message("assistant", "", tool_calls=[ToolCall.from_raw("c1", "test_sparql", "SELECT")]),
     call("lookup_entity", "c2", entity="Baldwin")],  # a tool that was never offered
    ["I think the answer is a phone number.", "Still thinking about it."],
    [call(SUBMIT_TOOL, "c1", query=GOLD_QUERY), "no tool, no query"],
])
def test_two_garbage_turns_in_a_row_end_as_llm_error(tools, examples, turns):
    model = ScriptedModel(turns + [call(SUBMIT_TOOL, "c9", sparql=GOLD_QUERY)])
    result, trace = run(make_spec(), tools, examples, model)
    assert result.status == "llm_error" and "2 turns in a row" in result.detail
    told = [s for s in trace.steps if s["kind"] in ("tool", "message")]
    assert len(told) == 2 and all("error:" in s.get("result", "") or "no tool call" in
                                  s.get("content", "") for s in told)
    assert len(model.requests) == 2


def test_provider_failure_is_llm_error_with_the_best_query(tools, examples):
    model = ScriptedModel([call("test_sparql", "c1", sparql=GOLD_QUERY)])  # then exhausted
    result, trace = run(make_spec(), tools, examples, model)
    assert result.status == "llm_error" and "script exhausted" in result.detail
    assert result.query == GOLD_QUERY
    assert any(s["kind"] == "llm_error" for s in trace.steps)


# --------------------------------------------------------------------------- (4) repair

def test_empty_result_triggers_a_repair_turn(kg, tools, examples, gold):
    model = ScriptedModel([
        call(SUBMIT_TOOL, "c1", sparql=EMPTY_QUERY),
        f"Fixed the property:\n```sparql\n{GOLD_QUERY}\n```",
    ])
    result, trace = run(make_spec(), tools, examples, model)
    assert result.status == "answered" and len(model.requests) == 2
    repair = model.requests[1].messages[-1]
    assert repair.role == "tool" and repair.tool_call_id == "c1"
    assert "Problem: empty result" in repair.content and "pv:fax" in repair.content
    assert "Diagnose before you edit" in repair.content  # the spec's repair.j2
    assert answer_set(kg.query(result.query)) == gold[UID]
    assert [s["accepted"] for s in trace.steps if s["kind"] == "verify"] == [False, True]


def test_wrong_answer_shape_is_repaired_for_a_count_question(kg, tools, examples, gold):
    question = "How many suppliers do we have in France?"
    listing = ("PREFIX pv: <http://ld.company.org/prod-vocab/>\nSELECT DISTINCT ?s WHERE { "
               "?p pv:hasSupplier ?s . ?s pv:addressCountry \"France\" }")
    count = listing.replace("SELECT DISTINCT ?s", "SELECT (COUNT(DISTINCT ?s) AS ?result)")
    model = ScriptedModel([f"```sparql\n{listing}\n```", call(SUBMIT_TOOL, "c2", sparql=count)])
    result, _ = run(make_spec(), tools, examples, model, question=question)
    assert result.status == "answered"
    repair = model.requests[1].messages[-1]
    assert repair.role == "user" and "a single number" in repair.content
    assert "Result preview:" in repair.content
    assert answer_set(kg.query(result.query)) == gold["ck25:13-en"] == {"8": 1}


# --------------------------------------------------------------------------- hooks and time

def test_raising_format_hook_is_a_tool_error(tools, examples):
    hooks = "def format_tool_result(tool_name, result):\n    return result['missing']\n"
    model = ScriptedModel([call("surface_forms", "c1", text="Baldwin Dirksen")])
    result, trace = run(make_spec(hooks=hooks), tools, examples, model)
    assert result.status == "tool_error" and "format_tool_result raised" in result.detail
    assert any(s["kind"] == "hook_error" for s in trace.steps)


def test_deadline_passed_is_a_timeout(tools, examples):
    model = ScriptedModel([call(SUBMIT_TOOL, "c1", sparql=GOLD_QUERY)])
    result, _ = run(make_spec(), tools, examples, model, deadline=time.perf_counter() - 1)
    assert result.status == "timeout" and model.requests == []


# --------------------------------------------------------------------------- (5) real SDKs

OPENAI_URL = "https://api.openai.com/v1/chat/completions"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"




@pytest.fixture
def http(monkeypatch, respx_using):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-OPENAI-0123456789abcdef")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-ANTHROPIC-0123456789")
    monkeypatch.delenv(llm.PRICES_ENV_VAR, raising=False)
    with respx.mock(using=respx_using, assert_all_called=False) as router:
        yield router


PLAN = [("surface_forms", {"text": "Baldwin Dirksen"}), ("ontology", {"iri": BALDWIN}),
        ("test_sparql", {"sparql": GOLD_QUERY}), (SUBMIT_TOOL, {"sparql": GOLD_QUERY})]
USAGE = [(900, 40), (1400, 35), (2600, 60), (2900, 55)]


def openai_reply(i: int) -> dict:
    name, arguments = PLAN[i]
    prompt, completion = USAGE[i]
    return {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 1730000000 + i,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                         "message": {"role": "assistant", "content": None, "refusal": None,
                                     "tool_calls": [{"id": f"call_{i}", "type": "function",
                                                     "function": {"name": name,
                                                                  "arguments": json.dumps(arguments)}}]}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def anthropic_reply(i: int) -> dict:
    name, arguments = PLAN[i]
    inp, out = USAGE[i]
    return {"id": f"msg_0{i}", "type": "message", "role": "assistant",
            "model": "claude-haiku-4-5-20251001", "stop_reason": "tool_use", "stop_sequence": None,
            "content": [{"type": "text", "text": f"Step {i + 1}."},
                        {"type": "tool_use", "id": f"toolu_0{i}", "name": name, "input": arguments}],
            "usage": {"input_tokens": inp, "output_tokens": out}}


@pytest.mark.parametrize("provider, name, url, reply, price", [
    ("openai", "gpt-4o-mini", OPENAI_URL, openai_reply, (0.15, 0.60)),
    ("anthropic", "claude-haiku-4-5-20251001", ANTHROPIC_URL, anthropic_reply, (1.0, 5.0)),
])
def test_real_sdk_through_intercepted_http(http, kg, tools, examples, gold, tmp_path,
                                           provider, name, url, reply, price):
    route = http.post(url).mock(side_effect=[httpx.Response(200, json=reply(i))
                                             for i in range(len(PLAN))])
    spec = make_spec(model={"provider": provider, "name": name, "max_retries": 0})
    agent = WorkerAgent(spec, kg, examples, traces_dir=tmp_path, tools=tools)  # make_model
    assert type(agent.strategy.model).__name__ == ("OpenAIModel" if provider == "openai"
                                                   else "AnthropicModel")
    answer = agent.ask(QUESTION, uid=UID, lang="en")

    assert answer.status == "answered", answer.detail
    assert answer_set(kg.query(answer.query)) == gold[UID]
    assert route.call_count == 4
    inp, out = sum(u[0] for u in USAGE), sum(u[1] for u in USAGE)
    expected_cost = (inp * price[0] + out * price[1]) / 1e6
    assert answer.tokens == {"input": inp, "output": out}
    assert answer.cost_usd == pytest.approx(expected_cost)
    trace = load_trace(answer.trace_path)
    llm_steps = [s for s in trace["steps"] if s["kind"] == "llm"]
    assert [(s["input_tokens"], s["output_tokens"]) for s in llm_steps] == USAGE
    assert sum(s["cost_usd"] for s in llm_steps) == pytest.approx(expected_cost)
    assert "sk-test" not in answer.trace_path.read_text()

    # What the provider received: four tools, then the tool results in its own wire format.
    first = json.loads(route.calls[0].request.content)
    last = json.loads(route.calls[3].request.content)
    if provider == "openai":
        assert [t["function"]["name"] for t in first["tools"]][-1] == SUBMIT_TOOL
        results = [m for m in last["messages"] if m["role"] == "tool"]
        assert [m["tool_call_id"] for m in results] == ["call_0", "call_1", "call_2"]
        assert BALDWIN in results[0]["content"] and PHONE in results[2]["content"]
    else:
        assert [t["name"] for t in first["tools"]][-1] == SUBMIT_TOOL
        assert "submit_query" in first["system"]
        blocks = [b for m in last["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                  for b in m["content"] if b.get("type") == "tool_result"]
        assert [b["tool_use_id"] for b in blocks] == ["toolu_00", "toolu_01", "toolu_02"]
        assert BALDWIN in blocks[0]["content"] and PHONE in blocks[2]["content"]


# --------------------------------------------------------------------------- (6) no leakage

def test_held_out_questions_never_reach_a_prompt(kg, tools, questions):
    splits = make_splits(questions, seed=0)
    train = splits.select(questions, "train")
    held_out = splits.select(questions, "validation") + splits.select(questions, "test")
    assert train and held_out
    examples = [Example(q.uid, q.text, q.sparql, q.lang, q.features) for q in train]
    asked = splits.select(questions, "validation")[:4]
    model = ScriptedModel([f"```sparql\n{GOLD_QUERY}\n```"] * len(asked))
    spec = make_spec(few_shot=8, max_iterations=1)
    agent = WorkerAgent(spec, kg, examples, model=model, tools=tools)
    for q in asked:
        agent.ask(q.text, uid=q.uid, lang=q.lang)

    assert len(model.requests) == len(asked)
    train_sparql = {q.sparql.strip() for q in train}
    shown_train = 0
    for q, request in zip(asked, model.requests):
        text = request_text(request)
        assert f"Question: {q.text}" in text
        shown_train += sum(f"Question: {t.text}\n" in text for t in train)
        for other in held_out:
            if other.qid != q.qid:
                assert other.text not in text, (q.uid, other.uid)
            if other.sparql and other.sparql.strip() not in train_sparql:
                assert other.sparql.strip() not in text, (q.uid, other.uid)
    assert shown_train >= len(asked) * 8  # the few-shot examples did reach the prompts


# --------------------------------------------------------------------------- helpers

def test_make_strategy_builds_the_llm_agent(tools, examples):
    model = ScriptedModel([])
    strategy = make_strategy(make_spec(), tools, examples, model)
    assert isinstance(strategy, LLMAgentStrategy) and strategy.model is model
    disabled = make_spec(tools={"ontology": {"enabled": False}})
    names = [t["name"] for t in LLMAgentStrategy(disabled, tools, examples, model).tool_schemas]
    assert names == ["surface_forms", "test_sparql", SUBMIT_TOOL]
    assert "`ontology`" not in LLMAgentStrategy(disabled, tools, examples, model).system_prompt()


def test_examples_are_similar_training_questions_never_the_question_itself(tools, examples):
    pool = examples + [Example("x:1-en", QUESTION, GOLD_QUERY)]
    for method in ("tfidf", "fuzzy"):
        strategy = LLMAgentStrategy(make_spec(retrieval=method), tools, pool, ScriptedModel([]))
        shown = select_examples(strategy.retriever, QUESTION, 3)
        assert len(shown) == 3 and all(e.text != QUESTION for e in shown)
        hoch = select_examples(strategy.retriever, "Who is the boss of Heinrich Hoch?", 1)
        assert [e.text for e in hoch] == ["Who is the manager of Heinrich Hoch?"]
        assert select_examples(strategy.retriever, QUESTION, 0) == []


def test_expected_shape_agrees_with_the_gold_queries():
    for path in (CK25 / "questions.yml", DB25 / "questions.yml"):
        if not path.exists():
            continue
        for q in load_questions(path).questions:
            shape = expected_shape(q.text, guess_language(q.text))
            assert (shape == "boolean") == ("ASK" in q.features), q.uid
            if "COUNT" in q.features and "GROUP" not in q.features:
                assert shape == "count", q.uid
            assert guess_language(q.text) == q.lang, q.uid


def test_extract_query_and_check_result():
    assert extract_query(f"Here:\n```sparql\n{GOLD_QUERY}\n```\nDone.") == GOLD_QUERY
    assert extract_query(f"```\n{GOLD_QUERY}\n```") == GOLD_QUERY
    assert extract_query("```python\nprint(1)\n```") is None
    assert extract_query("  ASK { ?s ?p ?o }") == "ASK { ?s ?p ?o }"
    assert extract_query("The phone is +49.") is None
    assert check_result({"ok": True, "boolean": False}, "boolean")[1] is None
    assert check_result({"ok": True, "vars": ["n"], "rows": [["8"]], "total": 1}, "count")[1] is None
    assert check_result({"ok": True, "vars": ["n"], "rows": [['"8"']], "total": 1}, "count")[1] is None
    assert "single number" in check_result(
        {"ok": True, "vars": ["s"], "rows": [["<a>"]], "total": 1}, "count")[1]
    assert "ASK" in check_result({"ok": True, "vars": ["s"], "rows": [["<a>"]], "total": 1},
                                 "boolean")[1]
    assert check_result({"ok": True, "vars": ["s"], "rows": [[None]], "total": 1}, "rows")[0] == 1
    assert check_result({"ok": False, "error_kind": "syntax", "error": "bad"}, None) == (
        0, "syntax error: bad")


def test_completion_accounting_of_scripted_costs(tools, examples):
    model = ScriptedModel([Completion(call(SUBMIT_TOOL, "c1", sparql=GOLD_QUERY),
                                      input_tokens=120, output_tokens=30, cost_usd=0.002)])
    result, trace = run(make_spec(), tools, examples, model)
    assert result.status == "answered"
    assert trace.data["tokens"] == {"input": 120, "output": 30}
    assert trace.data["cost_usd"] == pytest.approx(0.002)


def test_unchanged_requests_are_never_paid_twice(http, kg, tools, examples, gold, tmp_path):
    """The default persistent response cache: the same question again costs no HTTP call."""
    route = http.post(OPENAI_URL).mock(side_effect=[httpx.Response(200, json=openai_reply(i))
                                                    for i in range(len(PLAN))])
    spec = make_spec(model={"provider": "openai", "name": "gpt-4o-mini", "max_retries": 0})
    first = WorkerAgent(spec, kg, examples, traces_dir=tmp_path / "a", tools=tools).ask(QUESTION, uid=UID)
    again = WorkerAgent(spec, kg, examples, traces_dir=tmp_path / "b", tools=tools).ask(QUESTION, uid=UID)
    assert first.status == again.status == "answered" and first.query == again.query
    assert route.call_count == len(PLAN)  # the second run was served from the cache
    assert first.cost_usd > 0 and again.cost_usd == 0
    assert (tmp_path / "llm-cache.sqlite").is_file()
