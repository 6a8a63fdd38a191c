"""worker_agent.llm: the real OpenAI/Anthropic SDK clients against intercepted HTTP (respx)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import httpx
import pytest
import respx

from worker_agent import llm
from worker_agent.llm import (
    AnthropicModel,
    Completion,
    LLMError,
    Message,
    ModelConfig,
    OpenAIModel,
    Price,
    ResponseCache,
    ScriptedModel,
    ToolCall,
    make_model,
)

OPENAI_URL = "https://api.openai.com/v1/chat/completions"
ANTHROPIC_URL = "https://api.anthropic.com/v1/messages"
OPENAI_KEY = "sk-test-OPENAI-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-ANTHROPIC-0123456789"

SEARCH_TOOL = {
    "name": "surface_forms",
    "description": "Find IRIs whose labels match a text.",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                   "required": ["text"]},
}


# --------------------------------------------------------------------------- HTTP interception



@pytest.fixture
def http(respx_using):
    with respx.mock(using=respx_using, assert_all_called=False) as router:
        yield router


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.delenv(llm.PRICES_ENV_VAR, raising=False)


def openai_config(**kw) -> ModelConfig:
    return ModelConfig(**{"provider": "openai", "name": "gpt-4o-mini", "max_retries": 2,
                          "retry_initial_wait_s": 0.0, **kw})


def anthropic_config(**kw) -> ModelConfig:
    return ModelConfig(**{"provider": "anthropic", "name": "claude-haiku-4-5-20251001",
                          "max_retries": 2, "retry_initial_wait_s": 0.0, **kw})


def openai_body(message: dict, *, prompt=1000, completion=500, finish="stop") -> dict:
    return {"id": "chatcmpl-abc", "object": "chat.completion", "created": 1730000000,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "finish_reason": finish, "logprobs": None,
                         "message": {"role": "assistant", "refusal": None, **message}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion}}


def anthropic_body(content: list, *, inp=2000, out=100, stop="end_turn") -> dict:
    return {"id": "msg_01", "type": "message", "role": "assistant",
            "model": "claude-haiku-4-5-20251001", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": inp, "output_tokens": out}}


def sent_json(route, n: int = -1) -> dict:
    return json.loads(route.calls[n].request.content)


QUESTION = [Message("system", "You write SPARQL."), Message("user", "How many departments?")]


# --------------------------------------------------------------------------- OpenAI

def test_openai_tool_call_request_and_response(http):
    route = http.post(OPENAI_URL).mock(return_value=httpx.Response(200, json=openai_body(
        {"content": None, "tool_calls": [
            {"id": "call_A", "type": "function",
             "function": {"name": "surface_forms", "arguments": "{\"text\": \"department\"}"}}]},
        finish="tool_calls")))
    model = make_model(openai_config(max_tokens=256))
    result = model.complete(QUESTION, tools=[SEARCH_TOOL])

    assert result.message == Message("assistant", "", tool_calls=[
        ToolCall("call_A", "surface_forms", {"text": "department"})])
    assert result.finish_reason == "tool_calls"
    assert (result.input_tokens, result.output_tokens) == (1000, 500)
    assert result.cost_usd == pytest.approx((1000 * 0.15 + 500 * 0.60) / 1e6)
    assert result.cost_known and not result.cached and result.retries == 0

    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    body = sent_json(route)
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [{"role": "system", "content": "You write SPARQL."},
                                {"role": "user", "content": "How many departments?"}]
    assert body["tools"] == [{"type": "function", "function": SEARCH_TOOL}]
    assert body["max_completion_tokens"] == 256 and "max_tokens" not in body
    assert body["temperature"] == 0.0
    assert model.stats.calls == 1 and model.stats.cost_usd == pytest.approx(result.cost_usd)


def test_openai_final_answer_after_tool_round_trip(http):
    route = http.post(OPENAI_URL).mock(return_value=httpx.Response(200, json=openai_body(
        {"content": "SELECT (COUNT(?d) AS ?n) WHERE { ?d a :Department }"})))
    history = QUESTION + [
        Message("assistant", "", tool_calls=[ToolCall("call_A", "surface_forms", {"text": "dep"})]),
        Message("tool", "[\":Department\"]", tool_call_id="call_A"),
    ]
    result = make_model(openai_config()).complete(history, tools=[SEARCH_TOOL])

    assert result.message.content.startswith("SELECT (COUNT")
    assert result.message.tool_calls == []
    sent = sent_json(route)["messages"]
    assert sent[2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_A", "type": "function",
         "function": {"name": "surface_forms", "arguments": "{\"text\": \"dep\"}"}}]}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_A", "content": "[\":Department\"]"}


def test_openai_garbage_is_represented_not_raised(http):
    http.post(OPENAI_URL).mock(side_effect=[
        httpx.Response(200, json=openai_body({"content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "test_sparql", "arguments": "{\"sparql\": \"SELECT"}},
            {"id": "call_2", "type": "function",
             "function": {"name": "ontology", "arguments": "[1, 2]"}},
            {"id": "call_3", "type": "function", "function": {"name": "schemas", "arguments": ""}},
        ]})),
        httpx.Response(200, json=openai_body({"content": ""})),
    ])
    model = make_model(openai_config())
    calls = model.complete(QUESTION).message.tool_calls
    assert [(c.malformed, c.arguments) for c in calls] == [
        (True, {"_raw": "{\"sparql\": \"SELECT"}), (True, {"_raw": "[1, 2]"}), (False, {})]
    assert calls[0].raw_arguments() == "{\"sparql\": \"SELECT"  # sent back verbatim
    empty = model.complete(QUESTION)
    assert empty.message == Message("assistant", "")


def test_openai_retries_429_then_succeeds(http):
    route = http.post(OPENAI_URL).mock(side_effect=[
        httpx.Response(429, json={"error": {"message": "Rate limit reached", "type": "requests"}},
                       headers={"retry-after": "0"}),
        httpx.Response(200, json=openai_body({"content": "ok"})),
    ])
    model = make_model(openai_config())
    result = model.complete(QUESTION)
    assert result.message.content == "ok"
    assert route.call_count == 2 and result.retries == 1 and model.stats.retries == 1


def test_openai_5xx_until_failure_raises_llm_error(http):
    route = http.post(OPENAI_URL).mock(return_value=httpx.Response(
        500, json={"error": {"message": "The server had an error", "type": "server_error"}}))
    with pytest.raises(LLMError) as err:
        make_model(openai_config(max_retries=2)).complete(QUESTION)
    assert route.call_count == 3
    message = str(err.value)
    assert "\n" not in message and "HTTP 500" in message and "after 3 attempts" in message
    assert err.value.status == 500


def test_openai_connection_error_and_timeout_are_retried(http):
    route = http.post(OPENAI_URL).mock(side_effect=[
        httpx.ConnectError("connection refused"), httpx.ReadTimeout("slow"),
        httpx.Response(200, json=openai_body({"content": "ok"})),
    ])
    result = make_model(openai_config(max_retries=2)).complete(QUESTION)
    assert result.retries == 2 and route.call_count == 3

    route.reset()
    route.mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(LLMError, match="APITimeoutError.*after 2 attempts"):
        make_model(openai_config(max_retries=1)).complete(QUESTION)
    assert route.call_count == 2


def test_openai_client_error_is_not_retried_and_key_is_scrubbed(http):
    route = http.post(OPENAI_URL).mock(return_value=httpx.Response(401, json={"error": {
        "message": f"Incorrect API key provided: {OPENAI_KEY}.", "type": "invalid_request_error"}}))
    with pytest.raises(LLMError) as err:
        make_model(openai_config()).complete(QUESTION)
    assert route.call_count == 1
    assert "HTTP 401" in str(err.value) and OPENAI_KEY not in str(err.value)


def test_openai_compatible_server_unknown_model_costs_zero(http, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    route = http.post("http://localhost:8000/v1/chat/completions").mock(
        return_value=httpx.Response(200, json=openai_body({"content": "hi"}, prompt=10,
                                                          completion=2)))
    model = make_model(openai_config(name="Qwen/Qwen2.5-7B-Instruct", max_tokens=64, api_key=None,
                                     base_url="http://localhost:8000/v1"))
    result = model.complete(QUESTION)
    assert result.cost_usd == 0.0 and result.cost_known is False
    assert sent_json(route)["max_tokens"] == 64  # compatible servers know max_tokens
    assert OPENAI_KEY not in route.calls.last.request.headers.get("authorization", "")


# --------------------------------------------------------------------------- Anthropic

def test_anthropic_tool_use_request_and_response(http):
    route = http.post(ANTHROPIC_URL).mock(return_value=httpx.Response(200, json=anthropic_body([
        {"type": "text", "text": "Let me look up the class."},
        {"type": "tool_use", "id": "toolu_01", "name": "surface_forms",
         "input": {"text": "department"}},
    ], stop="tool_use")))
    model = make_model(anthropic_config())
    result = model.complete(QUESTION, tools=[SEARCH_TOOL])

    assert isinstance(model, AnthropicModel)
    assert result.message.content == "Let me look up the class."
    assert result.message.tool_calls == [ToolCall("toolu_01", "surface_forms",
                                                  {"text": "department"})]
    assert result.finish_reason == "tool_use"
    assert result.cost_usd == pytest.approx((2000 * 1.0 + 100 * 5.0) / 1e6)  # snapshot name

    request = route.calls.last.request
    # SDK releases differ in how they send the key (x-api-key, or a bearer token).
    sent_keys = {request.headers.get("x-api-key"),
                 request.headers.get("authorization", "").removeprefix("Bearer ")}
    assert ANTHROPIC_KEY in sent_keys
    body = sent_json(route)
    assert body["system"] == "You write SPARQL."
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "How many departments?"}]}]
    assert body["tools"] == [{"name": "surface_forms", "description": SEARCH_TOOL["description"],
                              "input_schema": SEARCH_TOOL["parameters"]}]
    assert body["max_tokens"] == llm.ANTHROPIC_DEFAULT_MAX_TOKENS


def test_anthropic_history_uses_tool_result_blocks(http):
    route = http.post(ANTHROPIC_URL).mock(return_value=httpx.Response(200, json=anthropic_body(
        [{"type": "text", "text": "SELECT ?d WHERE { ?d a :Department }"}])))
    history = QUESTION + [
        Message("assistant", "Two lookups.", tool_calls=[
            ToolCall("toolu_1", "surface_forms", {"text": "dep"}),
            ToolCall("toolu_2", "ontology", {"iri": ":Department"})]),
        Message("tool", "[\":Department\"]", tool_call_id="toolu_1"),
        Message("tool", "class :Department", tool_call_id="toolu_2"),
        Message("user", "Now answer."),
    ]
    result = make_model(anthropic_config()).complete(history, tools=[SEARCH_TOOL])
    assert result.message.content.startswith("SELECT ?d")
    assert sent_json(route)["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Two lookups."},
            {"type": "tool_use", "id": "toolu_1", "name": "surface_forms",
             "input": {"text": "dep"}},
            {"type": "tool_use", "id": "toolu_2", "name": "ontology",
             "input": {"iri": ":Department"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "[\":Department\"]"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "class :Department"},
            {"type": "text", "text": "Now answer."}]},
    ]


def test_anthropic_retries_429_and_fails_on_persistent_overload(http):
    route = http.post(ANTHROPIC_URL).mock(side_effect=[
        httpx.Response(429, json={"type": "error", "error": {"type": "rate_limit_error",
                                                             "message": "slow down"}}),
        httpx.Response(200, json=anthropic_body([{"type": "text", "text": "ok"}])),
    ])
    assert make_model(anthropic_config()).complete(QUESTION).retries == 1
    assert route.call_count == 2

    route.reset()
    route.mock(side_effect=None, return_value=httpx.Response(529, json={
        "type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    with pytest.raises(LLMError, match="anthropic model .*HTTP 529.*after 3 attempts"):
        make_model(anthropic_config()).complete(QUESTION)
    assert route.call_count == 3


# --------------------------------------------------------------------------- cache and secrets

def test_cache_hit_costs_nothing_and_persists(http, tmp_path):
    route = http.post(OPENAI_URL).mock(return_value=httpx.Response(200, json=openai_body(
        {"content": None, "tool_calls": [{"id": "call_A", "type": "function", "function": {
            "name": "surface_forms", "arguments": "{\"text\": \"x\"}"}}]})))
    db = tmp_path / "cache" / "llm.sqlite"
    first = make_model(openai_config(), cache=ResponseCache(db)).complete(QUESTION, [SEARCH_TOOL])
    # A new process would build new objects: same file, same request -> no HTTP call.
    model = make_model(openai_config(), cache=ResponseCache(db))
    again = model.complete(QUESTION, [SEARCH_TOOL])
    assert route.call_count == 1
    assert again.cached and again.cost_usd == 0.0 and first.cost_usd > 0
    assert again.message == first.message and again.input_tokens == first.input_tokens
    assert model.stats.cache_hits == 1 and model.stats.cost_usd == 0.0

    model.complete(QUESTION + [Message("user", "more")], [SEARCH_TOOL])  # changed request
    make_model(openai_config(temperature=0.7), cache=ResponseCache(db)).complete(QUESTION,
                                                                                [SEARCH_TOOL])
    assert route.call_count == 3 and len(ResponseCache(db)) == 3


def test_key_never_in_cache_db_or_reprs(http, tmp_path):
    http.post(OPENAI_URL).mock(return_value=httpx.Response(200, json=openai_body({"content": "a"})))
    http.post(ANTHROPIC_URL).mock(return_value=httpx.Response(200, json=anthropic_body(
        [{"type": "text", "text": "b"}])))
    db = tmp_path / "llm.sqlite"
    cache = ResponseCache(db)
    texts = []
    for config in (openai_config(), anthropic_config()):
        model = make_model(config, cache=cache)
        model.complete(QUESTION)
        texts += [repr(model), str(model), repr(config), str(config), config.model_dump_json(),
                  repr(vars(model))]
    dumped = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    with sqlite3.connect(db) as conn:
        rows = json.dumps(conn.execute("SELECT * FROM responses").fetchall())
    for key in (OPENAI_KEY, ANTHROPIC_KEY):
        assert key.encode() not in dumped and key not in rows
        assert all(key not in text for text in texts)


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(LLMError) as err:
        make_model(openai_config())
    assert str(err.value) == ("environment variable OPENAI_API_KEY is not set "
                              "(needed by model gpt-4o-mini)")
    monkeypatch.setenv("MY_KEY", "")
    with pytest.raises(LLMError, match="environment variable MY_KEY is not set"):
        make_model(anthropic_config(api_key="${MY_KEY}"))


def test_config_defaults_and_validation():
    assert openai_config().api_key == "${OPENAI_API_KEY}"
    assert anthropic_config().api_key == "${ANTHROPIC_API_KEY}"
    assert openai_config(api_key=None).api_key is None
    literal = "sk-literal-secret-key-123"
    with pytest.raises(Exception) as err:
        ModelConfig(provider="openai", name="gpt-4o", api_key=literal)
    assert literal not in str(err.value)
    with pytest.raises(LLMError, match="invalid model config: api_key") as err:
        make_model({"provider": "openai", "name": "gpt-4o", "api_key": literal})
    assert literal not in str(err.value)
    with pytest.raises(LLMError, match="invalid model config: tempreature"):
        make_model({"provider": "openai", "name": "gpt-4o", "tempreature": 0.2})
    with pytest.raises(LLMError, match="script is only allowed"):
        make_model({"provider": "openai", "name": "gpt-4o", "script": [{"content": "x"}]})
    undocumented = [n for n, f in ModelConfig.model_fields.items() if not f.description]
    assert undocumented == []


# --------------------------------------------------------------------------- prices

def test_price_lookup_overrides_and_user_file(tmp_path, monkeypatch):
    assert llm.price_for("gpt-4o-2024-08-06") == Price(input=2.5, output=10.0)
    assert llm.price_for("openai/gpt-4o-mini") == Price(input=0.15, output=0.60)
    assert llm.price_for("claude-3-5-haiku-latest") == Price(input=0.8, output=4.0)
    assert llm.price_for("gpt-4o-mini-tts-unknown") is None
    assert llm.price_for("my-model", override=Price(input=1, output=2)) == Price(input=1, output=2)

    prices = tmp_path / "prices.yaml"
    prices.write_text("my-model: {input: 1.0, output: 3.0}\ngpt-4o-mini: {input: 9, output: 9}\n")
    monkeypatch.setenv(llm.PRICES_ENV_VAR, str(prices))
    model = make_model(openai_config(name="my-model"))
    assert model._price == Price(input=1.0, output=3.0)
    assert make_model(openai_config()).\
        _price == Price(input=9, output=9)  # the user's file beats the built-in table
    assert make_model(openai_config(prices={"input": 5, "output": 6}))._price.input == 5

    prices.write_text("my-model: {input: 1.0}\n")
    with pytest.raises(LLMError, match=r"prices file .*prices.yaml: model 'my-model': output"):
        make_model(openai_config())
    assert llm.compute_cost(Price(input=2, output=4), 500_000, 250_000) == pytest.approx(2.0)


# --------------------------------------------------------------------------- scripted

def test_scripted_model_plays_back_records_and_exhausts():
    model = ScriptedModel([
        Message("assistant", "", tool_calls=[ToolCall("c1", "surface_forms", {"text": "x"})]),
        "SELECT * WHERE { ?s ?p ?o }",
        Completion(Message("assistant", "done"), input_tokens=5, output_tokens=1, cost_usd=0.01),
    ])
    history = list(QUESTION)
    first = model.complete(history, tools=[SEARCH_TOOL])
    assert first.message.tool_calls[0].name == "surface_forms"
    history.append(Message("user", "mutated later"))
    assert model.complete(history).message.content.startswith("SELECT")
    assert model.complete(history).cost_usd == 0.01
    assert len(model.requests) == 3 and len(model.requests[0].messages) == 2
    assert model.requests[0].tools == [SEARCH_TOOL] and model.requests[1].tools is None
    with pytest.raises(LLMError, match="script exhausted after 3 replies"):
        model.complete(history)
    with pytest.raises(LLMError, match="role 'user'"):
        ScriptedModel([Message("user", "no")])


def test_scripted_replay_from_trace_and_config():
    recorded = [m.to_dict() for m in QUESTION + [
        Message("assistant", "", tool_calls=[ToolCall("c1", "ontology", {"iri": ":A"})]),
        Message("tool", "info", tool_call_id="c1"),
        Message("assistant", "SELECT 1 {}"),
    ]]
    replay = ScriptedModel.from_trace(recorded)
    assert replay.remaining == 2
    assert replay.complete(QUESTION).message.tool_calls[0].arguments == {"iri": ":A"}
    assert replay.complete(QUESTION).message.content == "SELECT 1 {}"

    model = make_model({"provider": "scripted", "name": "demo", "script": [
        {"tool_calls": [{"name": "surface_forms", "arguments": {"text": "dep"}}]},
        {"content": "SELECT ?x {}"}]})
    assert isinstance(model, ScriptedModel) and isinstance(model, llm.Model)
    assert model.complete(QUESTION).message.tool_calls == [
        ToolCall("call_0_0", "surface_forms", {"text": "dep"})]


# --------------------------------------------------------------------------- schemas and types

def test_tool_schema_conversion_and_validation():
    assert llm.to_openai_tools([SEARCH_TOOL]) == [{"type": "function", "function": SEARCH_TOOL}]
    assert llm.to_anthropic_tools([{"name": "schemas"}]) == [
        {"name": "schemas", "description": "",
         "input_schema": {"type": "object", "properties": {}}}]
    with pytest.raises(LLMError, match="unknown keys"):
        llm.validate_tool_schemas([{"type": "function", "function": SEARCH_TOOL}])
    with pytest.raises(LLMError, match="needs a name"):
        llm.validate_tool_schemas([{"name": "has space"}])
    with pytest.raises(LLMError, match="type object"):
        llm.validate_tool_schemas([{"name": "t", "parameters": {"type": "string"}}])


def test_message_round_trip_and_input_checks():
    msg = Message("assistant", "x", tool_calls=[ToolCall.from_raw("c", "t", "{bad")])
    assert msg.tool_calls[0].malformed and Message.from_dict(msg.to_dict()) == msg
    assert Message("assistant", None).content == ""  # type: ignore[arg-type]
    with pytest.raises(LLMError, match="role 'robot'"):
        Message("robot", "x")  # type: ignore[arg-type]
    with pytest.raises(LLMError, match=r"messages\[0\] is a dict"):
        ScriptedModel(["x"]).complete([{"role": "user", "content": "q"}])  # type: ignore[list-item]


def test_openai_model_requires_openai_config():
    with pytest.raises(LLMError, match="provider is 'anthropic'"):
        OpenAIModel(anthropic_config())


def test_public_names():
    for name in llm.__all__:
        assert hasattr(llm, name), name
    assert Path(llm.__file__).name == "llm.py"


def test_provider_key_never_goes_to_a_third_party_base_url(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-REALSECRET-0123456789")
    local = llm.ModelConfig(provider="openai", name="qwen", base_url="http://127.0.0.1:18750/v1")
    assert local.api_key is None
    official = llm.ModelConfig(provider="openai", name="gpt-4o-mini")
    assert official.api_key == "${OPENAI_API_KEY}"
    named = llm.ModelConfig(provider="openai", name="x", base_url="https://openrouter.ai/api/v1",
                            api_key="${OPENROUTER_API_KEY}")
    assert named.api_key == "${OPENROUTER_API_KEY}"
