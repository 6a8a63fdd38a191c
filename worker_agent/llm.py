"""LLM providers behind one small interface: ``Model.complete(messages, tools) -> Completion``.

Providers: ``OpenAIModel`` (the official ``openai`` SDK, chat completions with native tool calling;
also any OpenAI-compatible ``base_url`` such as vLLM, Ollama, llama.cpp, OpenRouter or DeepSeek),
``AnthropicModel`` (the official ``anthropic`` SDK, messages API with native tool use) and
``ScriptedModel`` (deterministic playback for tests and replays). SDKs are imported lazily, so a
user of one provider never needs the other package.

Messages, tool calls and completions are provider-neutral dataclasses. Tool schemas are given in
one neutral form ``{"name", "description", "parameters": <JSON schema>}``, converted per provider.

Accounting: every ``Completion`` carries its token counts and its cost in USD from a price table
(``PRICES``, extendable by ``ModelConfig.prices`` or by a YAML file named in the environment
variable ``SPARQL_RESEARCHER_PRICES``). An unknown model costs 0.0 with ``cost_known=False``.

Caching: with a ``ResponseCache`` (SQLite), an unchanged request is answered from disk and costs
nothing (``cached=True``, ``cost_usd=0.0``). The cache key hashes the full request (provider, model,
base_url, sampling parameters, messages, tools) and never the API key.

Secrets: ``ModelConfig.api_key`` is a ``${ENV_VAR}`` reference, resolved when the model is made.
The resolved key lives only inside the SDK client and a masked holder used to scrub error text;
it is never written to the cache, reprs, logs or error messages.

Errors: every failure surfaces as ``LLMError`` with a one-line message. Garbage from a model does
not raise: tool-call arguments that are not a JSON object become ``{"_raw": "<text>"}`` with
``ToolCall.malformed=True``, and an empty reply becomes an assistant message with content "".
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import json
import logging
import os
import random
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

__all__ = [
    "AnthropicModel",
    "Completion",
    "LLMError",
    "Message",
    "Model",
    "ModelConfig",
    "ModelStats",
    "OpenAIModel",
    "PRICES",
    "PRICES_ENV_VAR",
    "Price",
    "ResponseCache",
    "Role",
    "ScriptedModel",
    "ScriptedRequest",
    "ScriptedToolCall",
    "ScriptedTurn",
    "ToolCall",
    "compute_cost",
    "load_price_file",
    "make_model",
    "parse_tool_arguments",
    "price_for",
    "to_anthropic_tools",
    "to_openai_tools",
    "validate_tool_schemas",
]

log = logging.getLogger(__name__)

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
PRICES_ENV_VAR = "SPARQL_RESEARCHER_PRICES"
DEFAULT_KEY_REFS: dict[str, str | None] = {
    "openai": "${OPENAI_API_KEY}",
    "anthropic": "${ANTHROPIC_API_KEY}",
    "scripted": None,
}
# The messages API requires max_tokens; this is used when the config leaves it unset.
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096
# Bumped when the request record or the stored response format changes, so old rows never match.
CACHE_FORMAT = 1
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# SDKs insist on some key; local OpenAI-compatible servers ignore it. Passing a placeholder also
# stops the SDK from picking up OPENAI_API_KEY from the environment and sending it to that server.
_NO_KEY_PLACEHOLDER = "no-key-configured"


class LLMError(Exception):
    """A provider call failed (after retries), or a request/config is unusable. One-line message."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(" ".join(str(message).split()))
        self.status = status


# --------------------------------------------------------------------------- messages


@dataclass
class ToolCall:
    """One tool call requested by the model. ``malformed``: arguments were not a JSON object;
    then ``arguments == {"_raw": <the text the model sent>}`` so a strategy can report it."""

    id: str
    name: str
    arguments: dict[str, Any]
    malformed: bool = False

    @classmethod
    def from_raw(cls, id: str, name: str, raw_arguments: str | None) -> ToolCall:
        arguments, malformed = parse_tool_arguments(raw_arguments)
        return cls(id=id, name=name, arguments=arguments, malformed=malformed)

    def raw_arguments(self) -> str:
        """The arguments as the model would send them (the original text when malformed)."""
        if self.malformed and isinstance(self.arguments.get("_raw"), str):
            return self.arguments["_raw"]
        return json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments,
                "malformed": self.malformed}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(id=str(data["id"]), name=str(data["name"]),
                   arguments=dict(data.get("arguments") or {}),
                   malformed=bool(data.get("malformed", False)))


@dataclass
class Message:
    """A provider-neutral chat message. ``tool`` messages answer ``tool_call_id``."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise LLMError(f"message role {self.role!r} is not one of {', '.join(ROLES)}")
        if self.content is None:  # providers send null content next to tool calls
            self.content = ""

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content,
                "tool_calls": [tc.to_dict() for tc in self.tool_calls],
                "tool_call_id": self.tool_call_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        return cls(role=data["role"], content=data.get("content") or "",
                   tool_calls=[ToolCall.from_dict(t) for t in data.get("tool_calls") or ()],
                   tool_call_id=data.get("tool_call_id"))


@dataclass
class Completion:
    """One model reply with its accounting.

    ``input_tokens``/``output_tokens`` are what the request consumed when it was paid for (kept on
    cache hits for context-size analysis); ``cost_usd`` is what *this* call cost (0.0 when cached).
    """

    message: Message
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    cost_known: bool = True
    retries: int = 0
    finish_reason: str | None = None
    model: str = ""


@runtime_checkable
class Model(Protocol):
    name: str

    def complete(self, messages: list[Message], tools: list[dict] | None = None) -> Completion:
        ...


@dataclass
class ModelStats:
    """Running totals of one model object (all threads)."""

    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, completion: Completion) -> None:
        self.calls += 1
        self.cache_hits += int(completion.cached)
        self.retries += completion.retries
        self.input_tokens += completion.input_tokens
        self.output_tokens += completion.output_tokens
        self.cost_usd += completion.cost_usd


def parse_tool_arguments(raw: str | None) -> tuple[dict[str, Any], bool]:
    """Parse tool-call arguments text -> (arguments, malformed). Never raises."""
    if raw is None or not raw.strip():
        return {}, False  # no-argument tools: some servers send "" instead of "{}"
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {"_raw": raw}, True
    if not isinstance(value, dict):
        return {"_raw": raw}, True
    return value, False


def _stable_call_id(index: int, name: str, raw: str) -> str:
    # Some OpenAI-compatible servers omit ids. A random id would change the next request and so
    # defeat the response cache on re-runs; a content hash keeps replays identical.
    digest = hashlib.sha256(f"{index}\0{name}\0{raw}".encode()).hexdigest()[:16]
    return f"call_{digest}"


# --------------------------------------------------------------------------- tool schemas


def validate_tool_schemas(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Check neutral tool schemas ``{name, description, parameters}``; return normalized copies."""
    result: list[dict[str, Any]] = []
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, Mapping):
            raise LLMError(f"tool schema #{i} is a {type(tool).__name__}, expected a mapping")
        unknown = set(tool) - {"name", "description", "parameters"}
        if unknown:
            raise LLMError(f"tool schema #{i} has unknown keys {sorted(unknown)}; expected the "
                           "neutral form {name, description, parameters}")
        name = tool.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise LLMError(f"tool schema #{i} needs a name of 1-64 letters, digits, _ or -")
        parameters = tool.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise LLMError(f"tool schema {name!r}: parameters must be a JSON schema of type object")
        result.append({"name": name, "description": str(tool.get("description", "")),
                       "parameters": copy.deepcopy(dict(parameters))})
    return result


def to_openai_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": dict(t)} for t in validate_tool_schemas(tools)]


def to_anthropic_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in validate_tool_schemas(tools)]


# --------------------------------------------------------------------------- prices


class Price(BaseModel):
    """USD per one million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float = Field(ge=0, description="USD per 1M input (prompt) tokens.")
    output: float = Field(ge=0, description="USD per 1M output (completion) tokens.")


def _p(inp: float, out: float) -> Price:
    return Price(input=inp, output=out)


# List prices of the providers' public APIs (standard tier, no prompt-cache discounts; cached
# input tokens are billed here at the full input rate, so costs are a slight upper bound).
PRICES: dict[str, Price] = {
    "gpt-5": _p(1.25, 10.0), "gpt-5-mini": _p(0.25, 2.0), "gpt-5-nano": _p(0.05, 0.40),
    "gpt-4.1": _p(2.0, 8.0), "gpt-4.1-mini": _p(0.40, 1.60), "gpt-4.1-nano": _p(0.10, 0.40),
    "gpt-4o": _p(2.50, 10.0), "gpt-4o-mini": _p(0.15, 0.60),
    "gpt-4-turbo": _p(10.0, 30.0), "gpt-4": _p(30.0, 60.0), "gpt-3.5-turbo": _p(0.50, 1.50),
    "o1": _p(15.0, 60.0), "o1-mini": _p(1.10, 4.40), "o3": _p(2.0, 8.0),
    "o3-mini": _p(1.10, 4.40), "o4-mini": _p(1.10, 4.40),
    "claude-opus-4-5": _p(5.0, 25.0), "claude-opus-4-1": _p(15.0, 75.0),
    "claude-opus-4": _p(15.0, 75.0), "claude-opus-4-0": _p(15.0, 75.0),
    "claude-sonnet-4-5": _p(3.0, 15.0), "claude-sonnet-4": _p(3.0, 15.0),
    "claude-sonnet-4-0": _p(3.0, 15.0), "claude-3-7-sonnet": _p(3.0, 15.0),
    "claude-3-5-sonnet": _p(3.0, 15.0), "claude-haiku-4-5": _p(1.0, 5.0),
    "claude-3-5-haiku": _p(0.80, 4.0), "claude-3-haiku": _p(0.25, 1.25),
    "claude-3-opus": _p(15.0, 75.0),
}

_SNAPSHOT_SUFFIX = re.compile(r"(-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


def _name_variants(model: str) -> list[str]:
    # "openai/gpt-4o-mini" (OpenRouter), "gpt-4o-2024-08-06", "claude-3-5-haiku-20241022",
    # "claude-3-5-sonnet-latest" all price as their base model.
    variants = [model]
    short = model.rsplit("/", 1)[-1]
    for name in (model, short):
        variants += [name, _SNAPSHOT_SUFFIX.sub("", name)]
    return list(dict.fromkeys(variants))


def price_for(model: str, *, override: Price | None = None,
              extra: Mapping[str, Price] | None = None) -> Price | None:
    """The price of ``model``: ``override`` first, then ``extra`` (user file), then ``PRICES``."""
    if override is not None:
        return override
    for table in (extra or {}, PRICES):
        for name in _name_variants(model):
            if name in table:
                return table[name]
    return None


def compute_cost(price: Price | None, input_tokens: int, output_tokens: int) -> float:
    if price is None:
        return 0.0
    return (input_tokens * price.input + output_tokens * price.output) / 1_000_000


def load_price_file(path: str | Path) -> dict[str, Price]:
    """Read a YAML mapping ``model-name: {input: USD/1M, output: USD/1M}``."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LLMError(f"prices file {path}: cannot be read ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        raise LLMError(f"prices file {path}: not valid YAML ({exc})") from exc
    if not isinstance(data, Mapping):
        raise LLMError(f"prices file {path}: expected a mapping of model name to {{input, output}}")
    prices: dict[str, Price] = {}
    for name, value in data.items():
        try:
            prices[str(name)] = Price.model_validate(value)
        except ValidationError as exc:
            raise LLMError(f"prices file {path}: model {name!r}: {_first_error(exc)}") from exc
    return prices


def _env_prices() -> dict[str, Price]:
    path = os.environ.get(PRICES_ENV_VAR)
    return load_price_file(path) if path else {}


# --------------------------------------------------------------------------- config


class ScriptedToolCall(BaseModel):
    """A tool call in a scripted turn (provider ``scripted`` only)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, description="Name of the tool to call.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Tool arguments.")
    id: str | None = Field(default=None, description="Call id; generated when omitted.")


class ScriptedTurn(BaseModel):
    """One assistant reply played back by the scripted provider."""

    model_config = ConfigDict(extra="forbid")
    content: str = Field(default="", description="Assistant text of this turn.")
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list,
                                               description="Tool calls requested in this turn.")


class ModelConfig(BaseModel):
    """Which model to call and how. YAML is only its serialization."""

    # hide_input_in_errors: a literal key pasted into api_key must not be echoed by error text.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    provider: Literal["openai", "anthropic", "scripted"] = Field(
        description="Provider adapter: 'openai' (also any OpenAI-compatible server via base_url), "
                    "'anthropic', or 'scripted' (deterministic playback for tests and replays).")
    name: str = Field(min_length=1, description="Model name as the provider knows it, "
                                                "e.g. 'gpt-4o-mini' or 'claude-sonnet-4-5'.")
    base_url: str | None = Field(
        default=None, description="API base URL for OpenAI-compatible servers (vLLM, Ollama, "
                                  "llama.cpp, OpenRouter, DeepSeek) or a proxy; "
                                  "None = the official API.")
    api_key: str | None = Field(
        default=None, description="A ${ENV_VAR} reference resolved when the model is made; literal "
                                  "keys are rejected. Default ${OPENAI_API_KEY} / "
                                  "${ANTHROPIC_API_KEY} by provider for the provider's own API; "
                                  "with a third-party base_url no key is sent unless named here "
                                  "(e.g. ${OPENROUTER_API_KEY}); explicit null = no key.")
    temperature: float | None = Field(
        default=0.0, ge=0.0, le=2.0,
        description="Sampling temperature; null omits it (reasoning models reject the parameter).")
    max_tokens: int | None = Field(
        default=None, gt=0,
        description="Cap on output tokens; null = provider default "
                    f"(Anthropic requires one: {ANTHROPIC_DEFAULT_MAX_TOKENS}).")
    timeout_s: float = Field(default=60.0, gt=0,
                             description="Timeout of one HTTP attempt, seconds.")
    max_retries: int = Field(default=3, ge=0, le=20,
                             description="Retries after the first attempt on 429, 5xx, connection "
                                         "errors and timeouts.")
    retry_initial_wait_s: float = Field(default=1.0, ge=0, description="First backoff wait, "
                                        "seconds; doubles per retry, with jitter.")
    retry_max_wait_s: float = Field(default=30.0, ge=0, description="Longest single backoff "
                                    "wait, seconds (also caps a server's Retry-After).")
    prices: Price | None = Field(default=None, description="Price override for this model "
                                 "(USD per 1M input/output tokens); else the built-in table and "
                                 f"the YAML file named by ${PRICES_ENV_VAR}.")
    script: list[ScriptedTurn] = Field(default_factory=list,
                                       description="Provider 'scripted' only: the assistant turns "
                                                   "to play back, in order.")

    @field_validator("api_key")
    @classmethod
    def _key_is_reference(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_REF.match(value):
            raise ValueError("must be a ${ENV_VAR} reference such as ${OPENAI_API_KEY}; "
                             "literal keys are not accepted")
        return value

    @model_validator(mode="after")
    def _defaults_and_checks(self) -> ModelConfig:
        if "api_key" not in self.model_fields_set:  # explicit null keeps "no key"
            # The provider's own key goes only to the provider's own API: a third-party base_url
            # (vLLM, Ollama, OpenRouter, ...) gets no key unless api_key names one explicitly.
            official = not self.base_url or "api.openai.com" in self.base_url or "api.anthropic.com" in self.base_url
            self.api_key = DEFAULT_KEY_REFS[self.provider] if official else None
        if self.script and self.provider != "scripted":
            raise ValueError("script is only allowed with provider 'scripted'")
        return self

    @property
    def api_key_env(self) -> str | None:
        """The environment variable named by ``api_key`` (None when no key is used)."""
        match = _ENV_REF.match(self.api_key or "")
        return match.group(1) if match else None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "value"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {msg}"


class _Secret:
    """Holds a resolved key; every textual form is masked so it cannot leak via repr/vars/logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        return text.replace(self._value, "***") if len(self._value) >= 4 else text

    def __repr__(self) -> str:
        return "<secret>"

    __str__ = __repr__


def _resolve_key(config: ModelConfig) -> _Secret | None:
    var = config.api_key_env
    if var is None:
        return None
    value = os.environ.get(var, "")
    if not value.strip():
        raise LLMError(f"environment variable {var} is not set (needed by model {config.name})")
    return _Secret(value.strip())


# --------------------------------------------------------------------------- cache


class ResponseCache:
    """Persistent response cache in one SQLite file; every write is one transaction.

    Rows hold the request record (for inspection) and the reply; API keys are never part of either.
    A connection per operation keeps it safe across threads and processes.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(self._connect()) as conn, conn:
                conn.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, "
                             "created_at REAL NOT NULL, provider TEXT NOT NULL, "
                             "model TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL)")
        except sqlite3.Error as exc:
            raise LLMError(f"response cache {self.path}: cannot be opened ({exc})") from exc

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.path)!r})"

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30.0)

    @staticmethod
    def key(request: Mapping[str, Any]) -> str:
        """sha256 of the canonical JSON of a request record."""
        canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def get(self, key: str) -> Completion | None:
        """The stored reply as a free, cached Completion; None on a miss."""
        try:
            with closing(self._connect()) as conn:
                row = conn.execute("SELECT response FROM responses WHERE key = ?",
                                   (key,)).fetchone()
        except sqlite3.Error as exc:
            raise LLMError(f"response cache {self.path}: read failed ({exc})") from exc
        if row is None:
            return None
        data = json.loads(row[0])
        return Completion(message=Message.from_dict(data["message"]),
                          input_tokens=data["input_tokens"], output_tokens=data["output_tokens"],
                          cost_usd=0.0, cached=True, cost_known=data["cost_known"],
                          finish_reason=data["finish_reason"], model=data["model"])

    def put(self, key: str, request: Mapping[str, Any], completion: Completion) -> None:
        response = {"message": completion.message.to_dict(),
                    "input_tokens": completion.input_tokens,
                    "output_tokens": completion.output_tokens,
                    "cost_usd": completion.cost_usd, "cost_known": completion.cost_known,
                    "finish_reason": completion.finish_reason, "model": completion.model}
        row = (key, time.time(), str(request.get("provider", "")), str(request.get("model", "")),
               json.dumps(request, sort_keys=True, ensure_ascii=False),
               json.dumps(response, sort_keys=True, ensure_ascii=False))
        try:
            with closing(self._connect()) as conn, conn:
                conn.execute("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", row)
        except sqlite3.Error as exc:
            raise LLMError(f"response cache {self.path}: write failed ({exc})") from exc

    def __len__(self) -> int:
        with closing(self._connect()) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0])


# --------------------------------------------------------------------------- providers


def _check_messages(messages: Sequence[Message]) -> list[Message]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise LLMError(f"messages must be a list of Message, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise LLMError(f"messages[{i}] is a {type(message).__name__}, expected Message")
    return list(messages)


class _ProviderModel:
    """Shared machinery of the HTTP providers: caching, retries, accounting, error mapping."""

    provider: ClassVar[str]
    sdk_package: ClassVar[str]
    sdk_root_error: ClassVar[str]  # the SDK's base exception: every SDK failure maps to LLMError

    def __init__(self, config: ModelConfig, *, cache: ResponseCache | None = None) -> None:
        if config.provider != self.provider:
            raise LLMError(f"model {config.name}: provider is {config.provider!r}, "
                           f"not {self.provider!r}")
        self.config = config
        self.name = config.name
        self.cache = cache
        self.stats = ModelStats()
        self._lock = threading.Lock()
        self._price = price_for(config.name, override=config.prices, extra=_env_prices())
        self._secret = _resolve_key(config)
        self._sdk = self._import_sdk()
        self._client = self._make_client(self._secret.reveal() if self._secret
                                         else _NO_KEY_PLACEHOLDER)

    def __repr__(self) -> str:
        base = f", base_url={self.config.base_url!r}" if self.config.base_url else ""
        return f"{type(self).__name__}(name={self.name!r}{base})"

    __str__ = __repr__

    # -- provider hooks -----------------------------------------------------------------------
    def _make_client(self, api_key: str) -> Any:
        raise NotImplementedError

    def _build_kwargs(self, messages: list[Message], tools: list[dict]) -> dict[str, Any]:
        raise NotImplementedError

    def _send(self, kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _parse(self, raw: Any) -> tuple[Message, int, int, str | None]:
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------
    def _import_sdk(self) -> Any:
        try:
            return __import__(self.sdk_package)
        except ImportError as exc:
            raise LLMError(f"the {self.sdk_package} package is not installed (needed by model "
                           f"{self.name}); pip install {self.sdk_package}") from exc

    def request_record(self, messages: list[Message], tools: list[dict]) -> dict[str, Any]:
        """Everything that determines the reply (the cache key hashes it); never the API key."""
        return {"cache_format": CACHE_FORMAT, "provider": self.provider, "model": self.name,
                "base_url": self.config.base_url,
                "params": {"temperature": self.config.temperature,
                           "max_tokens": self.config.max_tokens},
                "messages": [m.to_dict() for m in messages], "tools": tools}

    def complete(self, messages: list[Message], tools: list[dict] | None = None) -> Completion:
        messages = _check_messages(messages)
        schemas = validate_tool_schemas(tools)
        record = self.request_record(messages, schemas)
        key = ResponseCache.key(record) if self.cache is not None else None
        completion = self.cache.get(key) if self.cache is not None and key else None
        if completion is None:
            completion = self._call(messages, schemas)
            if self.cache is not None and key:
                self.cache.put(key, record, completion)
        with self._lock:
            self.stats.add(completion)
        return completion

    def _call(self, messages: list[Message], tools: list[dict]) -> Completion:
        kwargs = self._build_kwargs(messages, tools)
        raw, retries = self._send_with_retries(kwargs)
        try:
            message, input_tokens, output_tokens, finish = self._parse(raw)
        except Exception as exc:  # a malformed payload must become an LLMError, not a crash
            raise LLMError(f"{self.provider} model {self.name}: unreadable response "
                           f"({type(exc).__name__}: {exc})") from exc
        return Completion(message=message, input_tokens=input_tokens, output_tokens=output_tokens,
                          cost_usd=compute_cost(self._price, input_tokens, output_tokens),
                          cost_known=self._price is not None, retries=retries,
                          finish_reason=finish, model=self.name)

    def _send_with_retries(self, kwargs: dict[str, Any]) -> tuple[Any, int]:
        import tenacity  # a dependency of the project; imported here to keep module import light

        attempts = 0

        def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            return self._send(kwargs)

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.config.max_retries + 1),
            wait=self._backoff, retry=tenacity.retry_if_exception(self._retryable),
            before_sleep=self._log_retry, reraise=True)
        try:
            return retrying(attempt), attempts - 1
        except self._sdk_base_error() as exc:
            raise LLMError(f"{self.provider} model {self.name}: {self._describe(exc)} "
                           f"(after {attempts} attempt{'s' if attempts != 1 else ''})",
                           status=getattr(exc, "status_code", None)) from exc

    def _sdk_base_error(self) -> type[BaseException]:
        return getattr(self._sdk, self.sdk_root_error)

    def _retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, self._sdk.APIConnectionError):  # includes timeouts
            return True
        if isinstance(exc, self._sdk.APIStatusError):
            # 408/409 are transient per both providers' own retry policies; 529 = overloaded.
            return exc.status_code in (408, 409, 429) or exc.status_code >= 500
        return False

    def _backoff(self, state: Any) -> float:
        base = self.config.retry_initial_wait_s * 2 ** (state.attempt_number - 1)
        delay = base / 2 + random.uniform(0, base / 2)  # jitter spreads concurrent workers
        exc = state.outcome.exception() if state.outcome else None
        delay = max(delay, _retry_after(exc))
        return min(delay, self.config.retry_max_wait_s)

    def _log_retry(self, state: Any) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("%s model %s: %s; retry %d/%d", self.provider, self.name,
                    self._describe(exc) if exc else "failed", state.attempt_number,
                    self.config.max_retries)

    def _describe(self, exc: BaseException) -> str:
        status = getattr(exc, "status_code", None)
        detail = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        text = f"HTTP {status} {type(exc).__name__}: {detail}" if status else \
            f"{type(exc).__name__}: {detail}"
        text = " ".join(text.split())
        if self._secret is not None:
            text = self._secret.scrub(text)
        return text[:400]

    def close(self) -> None:
        """Release the SDK client's connections."""
        close = getattr(self._client, "close", None)
        if callable(close):
            close()


def _retry_after(exc: BaseException | None) -> float:
    """Seconds a server asked us to wait (Retry-After / retry-after-ms), else 0."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return 0.0
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP date; our exponential backoff is good enough
    return 0.0


class OpenAIModel(_ProviderModel):
    """OpenAI chat completions (or any OpenAI-compatible server) with native tool calling."""

    provider = "openai"
    sdk_package = "openai"
    sdk_root_error = "OpenAIError"

    def _make_client(self, api_key: str) -> Any:
        # max_retries=0: retries are ours (tenacity), so counts and backoff are accounted here.
        return self._sdk.OpenAI(api_key=api_key, base_url=self.config.base_url,
                                timeout=self.config.timeout_s, max_retries=0)

    @property
    def _official_api(self) -> bool:
        return self.config.base_url is None or "api.openai.com" in self.config.base_url

    def _build_kwargs(self, messages: list[Message], tools: list[dict]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.name, "messages": _openai_messages(messages)}
        if tools:
            kwargs["tools"] = [{"type": "function", "function": t} for t in tools]
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            # OpenAI deprecated max_tokens (reasoning models reject it); compatible servers such as
            # older vLLM/Ollama/llama.cpp only know max_tokens.
            param = "max_completion_tokens" if self._official_api else "max_tokens"
            kwargs[param] = self.config.max_tokens
        return kwargs

    def _send(self, kwargs: dict[str, Any]) -> Any:
        return self._client.chat.completions.create(**kwargs)

    def _parse(self, raw: Any) -> tuple[Message, int, int, str | None]:
        usage = getattr(raw, "usage", None)
        input_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        choices = getattr(raw, "choices", None) or []
        if not choices:
            return Message("assistant", ""), input_tokens, output_tokens, "no_choices"
        choice = choices[0]
        msg = choice.message
        calls = [_openai_tool_call(i, tc) for i, tc in enumerate(msg.tool_calls or [])]
        message = Message("assistant", msg.content or "", tool_calls=calls)
        return message, input_tokens, output_tokens, choice.finish_reason


def _openai_tool_call(index: int, tc: Any) -> ToolCall:
    function = getattr(tc, "function", None)
    if function is None:  # a non-function tool type we never offered
        raw = str(tc)
        return ToolCall(_stable_call_id(index, "", raw), str(getattr(tc, "type", "unknown")),
                        {"_raw": raw}, malformed=True)
    name = function.name or ""
    raw = function.arguments if isinstance(function.arguments, str) else \
        json.dumps(function.arguments)
    return ToolCall.from_raw(tc.id or _stable_call_id(index, name, raw), name, raw)


def _openai_messages(messages: list[Message]) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role == "tool":
            if not m.tool_call_id:
                raise LLMError(f"messages[{i}]: a tool message needs tool_call_id")
            converted.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            converted.append({"role": "assistant", "content": m.content or None, "tool_calls": [
                {"id": tc.id, "type": "function",
                 "function": {"name": tc.name, "arguments": tc.raw_arguments()}}
                for tc in m.tool_calls]})
        else:
            converted.append({"role": m.role, "content": m.content})
    return converted


class AnthropicModel(_ProviderModel):
    """Anthropic messages API with native tool use (system prompt separate, tool_result blocks)."""

    provider = "anthropic"
    sdk_package = "anthropic"
    sdk_root_error = "AnthropicError"

    def _make_client(self, api_key: str) -> Any:
        # max_retries=0: retries are ours (tenacity), so counts and backoff are accounted here.
        return self._sdk.Anthropic(api_key=api_key, base_url=self.config.base_url,
                                   timeout=self.config.timeout_s, max_retries=0)

    def _build_kwargs(self, messages: list[Message], tools: list[dict]) -> dict[str, Any]:
        system, converted = _anthropic_messages(messages)
        kwargs: dict[str, Any] = {
            "model": self.name, "messages": converted,
            "max_tokens": self.config.max_tokens or ANTHROPIC_DEFAULT_MAX_TOKENS}
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = [{"name": t["name"], "description": t["description"],
                                "input_schema": t["parameters"]} for t in tools]
        if self.config.temperature is not None and self._sdk_takes_temperature:
            kwargs["temperature"] = self.config.temperature
        return kwargs

    @functools.cached_property
    def _sdk_takes_temperature(self) -> bool:
        # Recent anthropic SDKs dropped `temperature` from messages.create (the API no longer
        # takes it); older ones accept it. Sending it through extra_body would risk a 400.
        params = inspect.signature(self._client.messages.create).parameters
        return "temperature" in params

    def _send(self, kwargs: dict[str, Any]) -> Any:
        return self._client.messages.create(**kwargs)

    def _parse(self, raw: Any) -> tuple[Message, int, int, str | None]:
        usage = getattr(raw, "usage", None)
        # Prompt-cache reads/writes are reported apart from input_tokens; all were consumed.
        input_tokens = sum(int(getattr(usage, f, 0) or 0) for f in
                           ("input_tokens", "cache_creation_input_tokens",
                            "cache_read_input_tokens"))
        output_tokens = int(getattr(usage, "output_tokens", 0) or 0)
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in getattr(raw, "content", None) or []:
            kind = getattr(block, "type", None)
            if kind == "text" and block.text:
                texts.append(block.text)
            elif kind == "tool_use":
                calls.append(_anthropic_tool_call(len(calls), block))
        message = Message("assistant", "\n".join(texts), tool_calls=calls)
        return message, input_tokens, output_tokens, getattr(raw, "stop_reason", None)


def _anthropic_tool_call(index: int, block: Any) -> ToolCall:
    name = getattr(block, "name", "") or ""
    value = getattr(block, "input", None)
    if isinstance(value, dict):
        raw = json.dumps(value, sort_keys=True)
        return ToolCall(block.id or _stable_call_id(index, name, raw), name, value)
    raw = value if isinstance(value, str) else json.dumps(value)
    return ToolCall.from_raw(block.id or _stable_call_id(index, name, raw), name, raw)


def _anthropic_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Split out the system prompt; turn tool results into user tool_result blocks.

    Consecutive same-role turns are merged because every tool_result answering one assistant
    turn must sit in the single user message that follows it.
    """
    system_parts: list[str] = []
    converted: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if m.role == "system":
            system_parts.append(m.content)
            continue
        blocks = _anthropic_blocks(i, m)
        if not blocks:
            continue  # the API rejects empty turns (e.g. an empty reply kept in the history)
        role = "assistant" if m.role == "assistant" else "user"
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"].extend(blocks)
        else:
            converted.append({"role": role, "content": blocks})
    return "\n\n".join(p for p in system_parts if p), converted


def _anthropic_blocks(i: int, m: Message) -> list[dict[str, Any]]:
    if m.role == "tool":
        if not m.tool_call_id:
            raise LLMError(f"messages[{i}]: a tool message needs tool_call_id")
        return [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}]
    blocks: list[dict[str, Any]] = []
    if m.content:
        blocks.append({"type": "text", "text": m.content})
    for tc in m.tool_calls:
        blocks.append({"type": "tool_use", "id": tc.id, "name": tc.name, "input": tc.arguments})
    return blocks


# --------------------------------------------------------------------------- scripted


@dataclass
class ScriptedRequest:
    """A request a ScriptedModel received (deep copies, so later mutation does not alter it)."""

    messages: list[Message]
    tools: list[dict] | None


class ScriptedModel:
    """Deterministic model: plays back a queue of replies and records the requests it received.

    Product code (not a test double hidden in tests): used by tests, offline demos and replays of
    recorded traces. Raises LLMError when the script is exhausted. Scripted replies cost nothing.
    """

    provider = "scripted"

    def __init__(self, script: Iterable[Completion | Message | str], *,
                 name: str = "scripted") -> None:
        self.name = name
        self._queue: list[Completion] = [self._to_completion(i, item)
                                         for i, item in enumerate(script)]
        self._total = len(self._queue)
        self.requests: list[ScriptedRequest] = []
        self.stats = ModelStats()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, remaining={self.remaining})"

    def _to_completion(self, i: int, item: Completion | Message | str) -> Completion:
        if isinstance(item, str):
            item = Message("assistant", item)
        if isinstance(item, Message):
            item = Completion(message=item, model=self.name)
        if not isinstance(item, Completion):
            raise LLMError(f"scripted model {self.name}: script item #{i} is a "
                           f"{type(item).__name__}, expected Completion, Message or str")
        if item.message.role != "assistant":
            raise LLMError(f"scripted model {self.name}: script item #{i} has role "
                           f"{item.message.role!r}, expected 'assistant'")
        return item

    @classmethod
    def from_trace(cls, messages: Iterable[Message | Mapping[str, Any]], *,
                   name: str = "replay") -> ScriptedModel:
        """Replay a recorded conversation: its assistant messages are played back in order."""
        parsed = [m if isinstance(m, Message) else Message.from_dict(m) for m in messages]
        return cls([m for m in parsed if m.role == "assistant"], name=name)

    @classmethod
    def from_turns(cls, turns: Sequence[ScriptedTurn], *, name: str = "scripted") -> ScriptedModel:
        """Build from config turns (``ModelConfig.script``)."""
        messages = [Message("assistant", t.content, tool_calls=[
            ToolCall(tc.id or f"call_{i}_{j}", tc.name, dict(tc.arguments))
            for j, tc in enumerate(t.tool_calls)]) for i, t in enumerate(turns)]
        return cls(messages, name=name)

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def complete(self, messages: list[Message], tools: list[dict] | None = None) -> Completion:
        messages = _check_messages(messages)
        validate_tool_schemas(tools)
        with self._lock:
            self.requests.append(ScriptedRequest(copy.deepcopy(messages), copy.deepcopy(tools)))
            if not self._queue:
                raise LLMError(f"scripted model {self.name}: script exhausted after "
                               f"{self._total} replies (call #{len(self.requests)})")
            completion = copy.deepcopy(self._queue.pop(0))
            self.stats.add(completion)
        return completion


# --------------------------------------------------------------------------- factory


CACHE_ENV_VAR = "SPARQL_RESEARCHER_CACHE"


def default_cache_path() -> Path | None:
    """Where responses are cached when no workspace says otherwise; ``off`` disables caching."""
    value = os.environ.get(CACHE_ENV_VAR)
    if value and value.strip().lower() in ("off", "0", "none", "false"):
        return None
    if value:
        return Path(value).expanduser()
    return Path("~/.cache/sparql-researcher/responses.sqlite").expanduser()


def make_model(config: ModelConfig | Mapping[str, Any], *,
               cache: ResponseCache | None = None) -> Model:
    """Build the model a config names; resolves the API key from the environment now."""
    if not isinstance(config, ModelConfig):
        try:
            config = ModelConfig.model_validate(config)
        except ValidationError as exc:
            raise LLMError(f"invalid model config: {_first_error(exc)}") from exc
    if config.provider == "scripted":
        return ScriptedModel.from_turns(config.script, name=config.name)
    if config.provider == "anthropic":
        return AnthropicModel(config, cache=cache)
    return OpenAIModel(config, cache=cache)
