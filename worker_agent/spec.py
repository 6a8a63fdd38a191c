"""The agent spec: everything the researcher may change about the worker agent, in one directory.

A spec is a directory (or the same files at a git revision)::

    agent.yaml        AgentConfig: strategy, model, knobs, tools (unknown fields rejected)
    rules.yaml        list of Rule: id, text shown to the model, enabled, optional enforcement
    prompts/*.j2      self-contained Jinja2 templates (no include/import/extends), rendered with
                      StrictUndefined in a sandbox
    hooks.py          optional wiring code, run restricted (see "Hooks" below)

Loading validates everything up front, so a candidate that loads is one the strategies can run;
:func:`validate_spec_files` is the same check used as a gate before a version is committed.
Every :class:`SpecError` names the file (and the field or line) in one line.

Rule enforcements are deterministic rewrites of the final query, applied by
:meth:`AgentSpec.enforce` for enabled rules that name one. They work on SPARQL tokens, so IRIs,
string literals and comments are never rewritten.

Hooks are small functions the strategies call (``format_tool_result``, ``postprocess_query``).
They are checked against an AST allow-list and executed with a whitelist of builtins and a few
pure modules. This guards against accidental side effects and the usual escapes (dunder
attributes, frame objects, format-string attribute lookup); it is not a hardened sandbox, and
hooks remain reviewed code in git. Module-level code is limited to imports, function definitions,
docstrings and assignments of literals or ``re.compile(<literal>)``, so loading does bounded work.
Nothing guarantees that a hook *call* finishes, so each call runs under limits (see
``HOOK_LINE_BUDGET``, ``HOOK_MAX_DEPTH``, ``HOOK_TIMEOUT_S``) and breaking one raises HookError.
One C-level call that holds the GIL (a catastrophically backtracking regex, ``sum(range(10**12))``)
cannot be interrupted in-process: the caller only gets control back when that call returns.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import queue
import re
import sys
import threading
import traceback
import types
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from jinja2 import (
    FunctionLoader,
    StrictUndefined,
    Template,
    TemplateError,
    TemplateSyntaxError,
    meta,
    nodes,
)
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from worker_agent import sparql_lexer
from worker_agent.kg import add_missing_prefixes

__all__ = [
    "ENFORCEMENTS",
    "HOOK_LINE_BUDGET",
    "HOOK_MAX_DEPTH",
    "HOOK_SIGNATURES",
    "HOOK_TIMEOUT_S",
    "PROMPT_VARIABLES",
    "SPEC_PROVIDED_VARIABLES",
    "AgentConfig",
    "AgentSpec",
    "HookError",
    "OntologyToolConfig",
    "Rule",
    "SpecError",
    "SurfaceFormsConfig",
    "TestSparqlConfig",
    "ToolsConfig",
    "enforce_add_prefixes",
    "enforce_alias_aggregates",
    "enforce_select_distinct",
    "seed_spec_path",
    "validate_spec_files",
]

AGENT_FILE = "agent.yaml"
RULES_FILE = "rules.yaml"
HOOKS_FILE = "hooks.py"
_PROMPT_PATH = re.compile(r"^prompts/([A-Za-z0-9][A-Za-z0-9_\-]*)\.j2$")
_ALLOWED_PATHS_TEXT = "agent.yaml, rules.yaml, prompts/<name>.j2, hooks.py"


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 600) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SpecError(Exception):
    """An invalid spec. ``str(e)`` is one line: ``<file>[:<line>]: [<field>: ]<problem>``."""

    def __init__(self, file: str, message: str, *, field: str | None = None, line: int | None = None):
        self.file = file
        self.field = field
        self.line = line
        location = f"{file}:{line}" if line else file
        text = f"{location}: {field}: {message}" if field else f"{location}: {message}"
        super().__init__(_one_line(text))


class HookError(Exception):
    """A hook raised, returned the wrong type or broke a limit at call time (strategies report
    ``tool_error``)."""

    def __init__(self, message: str):
        super().__init__(_one_line(message))


# --------------------------------------------------------------------------------------------
# agent.yaml and rules.yaml models
# --------------------------------------------------------------------------------------------


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


# A label predicate is a full IRI or a prefixed name the tools module can expand.
_PREDICATE_NAME = re.compile(r"^[^\s<>\"{}|^`\\]+:[^\s<>\"{}|^`\\]*$")


class SurfaceFormsConfig(_Config):
    """Entity/class/property lookup by name (labels and IRI local names)."""

    enabled: bool = Field(default=True, description="Offer the surface-form lookup tool.")
    k: int = Field(default=10, ge=1, le=100, description="Candidates returned per lookup.")
    fuzzy_threshold: int = Field(
default=85, ge=0, le=100, description="Minimum rapidfuzz similarity (0-100) for a fuzzy label match."
    )
    label_predicates: list[str] = Field(
        default_factory=list,
        description="Extra label predicates (full IRIs or prefixed names) searched beyond "
        "rdfs:label, skos:prefLabel/altLabel, foaf:name and schema:name.",
    )

    lookup_url: str | None = Field(
        default=None,
        description="Remote KGs: a DBpedia-Lookup-style JSON service queried for candidates "
        "instead of SPARQL label search.",
    )
    virtuoso: bool = Field(
        default=False, description="Remote KGs on Virtuoso: use its full-text index (bif:contains)."
    )

    @field_validator("label_predicates")
    @classmethod
    def _predicates_are_names(cls, value: list[str]) -> list[str]:
        for item in value:
            if not _PREDICATE_NAME.match(item):
                raise ValueError(f"{item!r} is not an IRI or prefixed name (write it without <>)")
        return value


class OntologyToolConfig(_Config):
    """Schema lookup: what a class or property is and how it connects."""

    enabled: bool = Field(default=True, description="Offer the ontology lookup tool.")
    group_namespaces: bool = Field(
default=False, description="Group a class's properties by namespace (e.g. dbo: apart from dbp:)."
    )
    examples: int = Field(default=3, ge=0, le=50, description="Example triples shown per class or property.")


class TestSparqlConfig(_Config):
    """Running a draft query against the KG and previewing its result."""

    enabled: bool = Field(default=True, description="Offer the test-SPARQL tool.")
    timeout_s: float = Field(default=10.0, gt=0, le=600, description="Time limit per test query, in seconds.")
    preview_rows: int = Field(default=10, ge=1, le=1000, description="Result rows shown in a preview.")


class ToolsConfig(_Config):
    """The tools the worker may use and their knobs."""

    surface_forms: SurfaceFormsConfig = Field(
        default_factory=SurfaceFormsConfig, description="Surface-form (label) lookup tool."
    )
    ontology: OntologyToolConfig = Field(
        default_factory=OntologyToolConfig, description="Ontology (schema) lookup tool."
    )
    test_sparql: TestSparqlConfig = Field(
        default_factory=TestSparqlConfig, description="Test-SPARQL tool."
    )


StrategyName = Literal["offline", "llm_agent"]
RetrievalName = Literal["tfidf", "fuzzy", "embeddings"]


class AgentConfig(_Config):
    """agent.yaml: which strategy runs, with which model, knobs and tools."""

    name: str = Field(min_length=1, description="Human name of the spec (shown in reports).")
    strategy: StrategyName = Field(
        description="How a question becomes a query: 'offline' (deterministic, no LLM) or "
        "'llm_agent' (tool-calling LLM loop)."
    )
    # Kept as a plain mapping (features stay flat, offline specs may keep one), but checked
    # against worker_agent.llm.ModelConfig at load: see _check_model.
    model: dict[str, Any] | None = Field(
default=None, description="Model settings for llm_agent (provider, name, ...): a worker_agent.llm.ModelConfig."
    )
    few_shot: int = Field(
default=1, ge=0, le=50,
        description="Training examples retrieved per question (LLM: shown in the prompt; "
        "offline: candidate templates tried).",
    )
    max_iterations: int = Field(default=8, ge=1, le=100, description="Tool-calling turns allowed to llm_agent.")
    retrieval: RetrievalName = Field(
default="tfidf", description="How similar training questions are retrieved: tfidf, fuzzy or embeddings."
    )
    tools: ToolsConfig = Field(default_factory=ToolsConfig, description="Tool settings.")
    answer_timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Time limit per question, in seconds.")

    @model_validator(mode="after")
    def _llm_needs_model(self) -> AgentConfig:
        if self.strategy == "llm_agent" and not self.model:
            raise ValueError("model: required when strategy is llm_agent")
        return self


Enforcement = Literal["alias_aggregates", "select_distinct", "add_prefixes"]


class Rule(BaseModel):
    """One rule of rules.yaml. Strategies refer to rules by id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Stable identifier (snake_case).")
    text: str = Field(min_length=1, description="Instruction shown to the model when enabled.")
    enabled: bool = Field(description="Whether the rule is in force.")
    enforce: Enforcement | None = Field(
default=None, description="Deterministic rewrite applied to the final query when enabled."
    )


# --------------------------------------------------------------------------------------------
# YAML with errors that name the line, and duplicate keys rejected
# --------------------------------------------------------------------------------------------


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (PyYAML silently keeps the last one)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable key: let the default constructor report it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def _parse_yaml(text: str, label: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(label, f"invalid YAML: {problem}", line=mark.line + 1 if mark else None) from None


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validation_error(label: str, exc: ValidationError, prefix: str = "") -> SpecError:
    def where(loc: tuple[Any, ...]) -> str:
        field = _loc(loc)
        if prefix:
            return f"{prefix}{'' if field.startswith('[') else '.'}{field}" if field else prefix
        return field

    errors = exc.errors()
    message = errors[0]["msg"].removeprefix("Value error, ")
    if len(errors) > 1:
        others = ", ".join(where(e["loc"]) or "(root)" for e in errors[1:4])
        message += f" (and {len(errors) - 1} more: {others})"
    return SpecError(label, message, field=where(errors[0]["loc"]) or None)


def _parse_config(text: str, label: str) -> AgentConfig:
    data = _parse_yaml(text, label)
    if not isinstance(data, dict):
        raise SpecError(label, f"expected a mapping of fields, got {type(data).__name__}")
    try:
        config = AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(label, exc) from None
    if config.model is not None:
        _check_model(config.model, label)
    return config


def _check_model(model: dict[str, Any], label: str) -> None:
    """Validate the model section as worker_agent.llm.ModelConfig, so a misspelled field fails at
    load naming the file. Structure only: ModelConfig keeps api_key as a ``${ENV}`` reference
    (make_model resolves it), so the key need not be set here."""
    from worker_agent.llm import ModelConfig  # lazy: the LLM module is not needed to load a spec

    try:
        ModelConfig.model_validate(model)
    except ValidationError as exc:
        raise _validation_error(label, exc, prefix="model") from None


def _parse_rules(text: str, label: str) -> list[Rule]:
    data = _parse_yaml(text, label)
    if data is None:
        return []
    if not isinstance(data, list):
        raise SpecError(label, f"expected a list of rules, got {type(data).__name__}")
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise SpecError(label, f"expected a mapping, got {type(item).__name__}", field=f"[{index}]")
        raw_id = item.get("id")
        name = raw_id if isinstance(raw_id, str) else f"[{index}]"
        try:
            rule = Rule.model_validate(item)
        except ValidationError as exc:
            raise _validation_error(label, exc, prefix=name) from None
        if rule.id in seen:
            raise SpecError(label, f"duplicate rule id {rule.id!r}", field=f"[{index}].id")
        seen.add(rule.id)
        rules.append(rule)
    return rules


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

#: Variables each known prompt receives from the strategy (the strategy passes all of them).
PROMPT_VARIABLES: dict[str, frozenset[str]] = {
    "system": frozenset({"tools"}),
    "question": frozenset({"question", "lang", "examples", "dataset_name", "default_namespace", "prefixes"}),
    "repair": frozenset({"question", "sparql", "problem", "preview"}),
}
#: Variables every prompt receives from the spec itself: enabled rules and the AgentConfig.
SPEC_PROVIDED_VARIABLES = frozenset({"rules", "config"})
#: Prompts a strategy cannot run without.
REQUIRED_PROMPTS: dict[str, tuple[str, ...]] = {
    "offline": (),
    "llm_agent": ("system", "question", "repair"),
}


def _traceback_line(tb: types.TracebackType | None, filename: str) -> int | None:
    """Line of the innermost frame executing ``filename`` (a template or hooks.py)."""
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == filename:
            line = lineno
    return line


# Prompts are self-contained: a template pulled in by name could be missing or need variables
# the strategy does not pass, and that would surface only at render time.
_CROSS_TEMPLATE_TAGS: dict[type[nodes.Node], str] = {
    nodes.Include: "{% include %}", nodes.Import: "{% import %}",
    nodes.FromImport: "{% from ... import %}", nodes.Extends: "{% extends %}",
}


def _check_self_contained(tree: nodes.Template, path: str) -> None:
    node = next(tree.find_all(tuple(_CROSS_TEMPLATE_TAGS)), None)
    if node is not None:
        raise SpecError(path, f"{_CROSS_TEMPLATE_TAGS[type(node)]} not allowed: prompts are "
                        "self-contained (use a {% macro %} in the same file)", line=node.lineno)


class _Prompts:
    """Compiled templates of one spec, each self-contained."""

    def __init__(self, sources: Mapping[str, str], label: Callable[[str], str]):
        self._label = label
        self._sources = dict(sources)
        self._env = ImmutableSandboxedEnvironment(
            loader=FunctionLoader(self._load),
            undefined=StrictUndefined,
            autoescape=False,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
        )
        self.templates: dict[str, Template] = {}
        self.variables: dict[str, frozenset[str]] = {}
        for name, source in sorted(self._sources.items()):
            path = self._label(f"prompts/{name}.j2")
            try:
                tree = self._env.parse(source)
            except TemplateSyntaxError as exc:
                raise SpecError(path, f"template syntax error: {exc.message}", line=exc.lineno) from None
            _check_self_contained(tree, path)
            self.variables[name] = frozenset(meta.find_undeclared_variables(tree))
            self.templates[name] = self._env.get_template(f"{name}.j2")

    def _load(self, template_name: str) -> tuple[str, str, Callable[[], bool]] | None:
        # Only get_template in __init__ uses the loader (include/import/extends are rejected): the
        # label as file name makes Jinja's tracebacks point at the spec file and line.
        name = template_name.removesuffix(".j2")
        if name not in self._sources:
            return None
        return self._sources[name], self._label(f"prompts/{name}.j2"), lambda: True

    def render(self, name: str, context: dict[str, Any]) -> str:
        path = self._label(f"prompts/{name}.j2")
        missing = self.variables[name] - context.keys()
        if missing:
            raise SpecError(path, f"missing variables: {', '.join(sorted(missing))}")
        try:
            return self.templates[name].render(context)
        except TemplateError as exc:
            line = _traceback_line(exc.__traceback__, path)
            raise SpecError(path, f"render failed: {exc.message or exc}", line=line) from None
        except Exception as exc:  # noqa: BLE001 - a filter or method raised inside the template
            line = _traceback_line(exc.__traceback__, path)
            raise SpecError(path, f"render failed: {type(exc).__name__}: {exc}", line=line) from None


# --------------------------------------------------------------------------------------------
# Hooks: restricted wiring code
# --------------------------------------------------------------------------------------------

#: Hook name -> number of positional parameters.
HOOK_SIGNATURES: dict[str, int] = {"format_tool_result": 2, "postprocess_query": 1}

_ALLOWED_MODULES = frozenset({"re", "json", "math", "unicodedata", "string"})
# string.Formatter resolves "{0.__class__}"-style fields, i.e. attribute access by string.
_MODULE_EXCLUDES: dict[str, frozenset[str]] = {"string": frozenset({"Formatter"})}

_SAFE_BUILTINS = (
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "int", "isinstance", "len", "list", "map", "max", "min", "next", "ord", "range",
    "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "zip",
    "Exception", "ValueError", "TypeError", "KeyError", "IndexError", "LookupError",
    "RuntimeError", "ArithmeticError", "ZeroDivisionError", "AttributeError", "StopIteration",
)
_BANNED_NAMES = frozenset({
    "open", "exec", "eval", "compile", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "hasattr", "input", "print", "breakpoint", "help", "exit", "quit", "type",
    "object", "super", "memoryview", "dir", "id", "classmethod", "staticmethod", "property",
})
# Attributes that reach frames, code or string-driven attribute lookup.
_BANNED_ATTRIBUTES = frozenset({
    "format", "format_map", "vformat", "get_field", "mro", "gi_frame", "gi_code", "gi_yieldfrom",
    "cr_frame", "cr_code", "ag_frame", "ag_code", "f_back", "f_globals", "f_locals", "f_builtins",
    "f_code", "tb_frame", "tb_next",
})
_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Module, ast.Expr, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign,
    ast.AugAssign, ast.AnnAssign, ast.If, ast.For, ast.Break, ast.Continue, ast.Pass, ast.Try,
    ast.ExceptHandler, ast.Raise, ast.Assert, ast.Delete, ast.Import, ast.ImportFrom, ast.alias,
    ast.BoolOp, ast.NamedExpr, ast.BinOp, ast.UnaryOp, ast.Lambda, ast.IfExp, ast.Dict, ast.Set,
    ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Compare,
    ast.Call, ast.keyword, ast.FormattedValue, ast.JoinedStr, ast.Constant, ast.Attribute,
    ast.Subscript, ast.Starred, ast.Name, ast.List, ast.Tuple, ast.Slice,
    ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop,
)
# Friendlier names for what people most often try; wiring code needs none of them. Excluding
# `while` does not make hooks terminate (`for _ in range(10**12)` does not): the call limits do.
_NODE_NAMES = {
    ast.While: "while loops", ast.ClassDef: "class definitions", ast.Global: "global statements",
    ast.Nonlocal: "nonlocal statements", ast.With: "with statements", ast.AsyncFunctionDef:
    "async functions", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Await: "await",
}
_MODULE_LEVEL_TEXT = ("module-level code may only be imports, function definitions, docstrings and "
                      "assignments of literals or re.compile(<literal>[, <re flags>]) (it runs at load, "
                      "outside the call limits)")


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name the module binds anywhere (scope-insensitive, enough to catch typos)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)):
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
            a = node.args
            names.update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs))
            names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _check_node(node: ast.AST, label: str) -> None:
    line = getattr(node, "lineno", None)
    if not isinstance(node, _ALLOWED_NODES):
        what = _NODE_NAMES.get(type(node), f"'{type(node).__name__}'")
        raise SpecError(label, f"{what} not allowed in hooks", line=line)
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in _ALLOWED_MODULES:
                raise SpecError(label, f"import of {alias.name!r} not allowed (allowed: "
                                f"{', '.join(sorted(_ALLOWED_MODULES))})", line=line)
    elif isinstance(node, ast.ImportFrom):
        if node.level or node.module not in _ALLOWED_MODULES:
            raise SpecError(label, f"import from {node.module!r} not allowed (allowed: "
                            f"{', '.join(sorted(_ALLOWED_MODULES))})", line=line)
        for alias in node.names:
            if alias.name == "*" or alias.name.startswith("_"):
                raise SpecError(label, f"import of {alias.name!r} from {node.module} not allowed", line=line)
    elif isinstance(node, ast.Name):
        if node.id.startswith("__") or node.id in _BANNED_NAMES:
            raise SpecError(label, f"name {node.id!r} not allowed in hooks", line=line)
    elif isinstance(node, ast.Attribute):
        if node.attr.startswith("_") or node.attr in _BANNED_ATTRIBUTES:
            raise SpecError(label, f"attribute '.{node.attr}' not allowed in hooks", line=line)
        if not isinstance(node.ctx, ast.Load):
            raise SpecError(label, f"assigning attribute '.{node.attr}' not allowed in hooks", line=line)
    elif isinstance(node, ast.arg) and node.arg.startswith("__"):
        raise SpecError(label, f"parameter name {node.arg!r} not allowed in hooks", line=line)
    elif isinstance(node, ast.FunctionDef) and node.decorator_list:
        raise SpecError(label, "decorators not allowed in hooks", line=line)
    # The call limits stop a hook with an exception outside the Exception hierarchy; a bare except
    # could catch it and a finally clause would run after it, both beyond the limits' reach.
    elif isinstance(node, ast.ExceptHandler) and node.type is None:
        raise SpecError(label, "bare 'except:' not allowed in hooks (name the exception, e.g. "
                        "'except Exception:')", line=line)
    elif isinstance(node, ast.Try) and node.finalbody:
        raise SpecError(label, "'try ... finally' not allowed in hooks", line=line)


def _is_literal(node: ast.expr | None) -> bool:
    """What ast.literal_eval accepts, minus arithmetic (`'x' * 10**12` is an expression)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float, complex))
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_is_literal(item) for item in node.elts)
    if isinstance(node, ast.Dict):
        return all(key is not None and _is_literal(key) for key in node.keys) and all(map(_is_literal, node.values))
    return False


def _is_re_flags(node: ast.expr, re_names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int)
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id in re_names and node.attr.isupper()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_re_flags(node.left, re_names) and _is_re_flags(node.right, re_names)
    return False


def _is_re_compile(node: ast.expr, re_names: set[str]) -> bool:
    """`re.compile(<str literal>[, <flags>])` with flags like `re.I | re.DOTALL` or an int."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
            and isinstance(node.func.value, ast.Name) and node.func.value.id in re_names):
        return False
    flags = [*node.args[1:], *(k.value for k in node.keywords if k.arg == "flags")]
    return (len(node.args) in (1, 2) and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, (str, bytes))
            and all(k.arg == "flags" for k in node.keywords) and len(flags) <= 1
            and all(_is_re_flags(flag, re_names) for flag in flags))


def _is_annotation(node: ast.expr | None) -> bool:
    """Annotations are evaluated at definition time: names, attributes, subscripts, `X | None`."""
    if node is None or isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):
        return _is_annotation(node.value)
    if isinstance(node, ast.Subscript):
        return _is_annotation(node.value) and _is_annotation(node.slice)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(map(_is_annotation, node.elts))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_annotation(node.left) and _is_annotation(node.right)
    return False


def _is_name_target(node: ast.expr) -> bool:
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(map(_is_name_target, node.elts))
    return isinstance(node, ast.Name)


def _module_level_offender(stmt: ast.stmt, re_names: set[str]) -> ast.AST | None:
    """The part of a module-level statement that would run unbounded code at load, if any."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return None
    if isinstance(stmt, ast.Expr):  # docstrings and other string constants
        return None if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str) else stmt
    if isinstance(stmt, ast.FunctionDef):  # defaults and annotations are evaluated by `def`
        a = stmt.args
        defaults = [d for d in (*a.defaults, *a.kw_defaults) if d is not None]
        annotations = [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
                       if x is not None] + [stmt.returns]
        bad = [d for d in defaults if not _is_literal(d)] + [x for x in annotations if not _is_annotation(x)]
        return bad[0] if bad else None
    if isinstance(stmt, ast.Assign):
        targets_ok = all(map(_is_name_target, stmt.targets))
        value_ok = _is_literal(stmt.value) or _is_re_compile(stmt.value, re_names)
        return None if targets_ok and value_ok else stmt
    if isinstance(stmt, ast.AnnAssign):
        value_ok = stmt.value is None or _is_literal(stmt.value) or _is_re_compile(stmt.value, re_names)
        ok = isinstance(stmt.target, ast.Name) and _is_annotation(stmt.annotation) and value_ok
        return None if ok else stmt
    return stmt


def _check_top_level(tree: ast.Module, label: str) -> None:
    re_names = {alias.asname or alias.name for stmt in tree.body if isinstance(stmt, ast.Import)
                for alias in stmt.names if alias.name == "re"}
    for stmt in tree.body:
        offender = _module_level_offender(stmt, re_names)
        if offender is not None:
            raise SpecError(label, _MODULE_LEVEL_TEXT, line=getattr(offender, "lineno", stmt.lineno))
        if not isinstance(stmt, ast.FunctionDef) or stmt.name.startswith("_"):
            continue
        if stmt.name not in HOOK_SIGNATURES:
            raise SpecError(label, f"unknown hook {stmt.name!r} (known: {', '.join(HOOK_SIGNATURES)}; "
                            "name helper functions with a leading underscore)", line=stmt.lineno)
        a = stmt.args
        positional = len(a.posonlyargs) + len(a.args)
        if positional != HOOK_SIGNATURES[stmt.name] or a.vararg or a.kwarg or a.kwonlyargs:
            raise SpecError(label, f"hook {stmt.name} must take exactly {HOOK_SIGNATURES[stmt.name]} "
                            "positional parameter(s)", line=stmt.lineno)


def _check_hooks_source(source: str, label: str) -> ast.Module:
    """Static checks: syntax, node allow-list, imports, names, attributes, hook signatures."""
    try:
        tree = ast.parse(source, filename=label)
    except SyntaxError as exc:
        raise SpecError(label, f"syntax error: {exc.msg}", line=exc.lineno) from None
    _check_top_level(tree, label)
    for node in ast.walk(tree):
        _check_node(node, label)
    known = _bound_names(tree) | set(_SAFE_BUILTINS) | {"True", "False", "None"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known:
            raise SpecError(label, f"unknown name {node.id!r} (not defined and not an allowed builtin)",
                            line=node.lineno)
    return tree


#: Elements a hook's ``range`` may produce: bounds C-level loops (``sum(range(10**12))``) that
#: neither the line budget nor the time limit can stop, since they never yield the GIL.
HOOK_MAX_RANGE = 1_000_000

# A group that repeats something repeatable, repeated again: `(a+)+`, `(\w*\s?)*`, `(x+){2,}`.
# Such patterns backtrack exponentially in Python's regex engine (C code, uninterruptible).
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")
_RE_PATTERN_FUNCS = ("compile", "match", "fullmatch", "search", "sub", "subn", "split", "findall", "finditer")


def _bounded_range(*args: int) -> range:
    r = range(*args)
    if len(r) > HOOK_MAX_RANGE:
        raise ValueError(f"range of {len(r):,} elements is too large for a hook (max {HOOK_MAX_RANGE:,})")
    return r


def _checked_pattern(func: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(pattern: Any, *args: Any, **kwargs: Any) -> Any:
        text = pattern.pattern if hasattr(pattern, "pattern") else pattern
        if isinstance(text, str) and _NESTED_QUANTIFIER.search(text):
            raise ValueError(f"regular expression {text!r} nests quantifiers (catastrophic backtracking)")
        return func(pattern, *args, **kwargs)

    return wrapper


def _module_proxy(name: str) -> types.SimpleNamespace:
    """A module's public, non-module attributes: `json.codecs.open` and the like stay out of reach."""
    module = importlib.import_module(name)
    excluded = _MODULE_EXCLUDES.get(name, frozenset())
    public = {
        attr: value
        for attr, value in vars(module).items()
        if not attr.startswith("_") and attr not in excluded and not isinstance(value, types.ModuleType)
    }
    if name == "re":
        public.update({f: _checked_pattern(getattr(module, f)) for f in _RE_PATTERN_FUNCS if f in public})
    return types.SimpleNamespace(**public)


def _restricted_import(
    name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0
) -> types.SimpleNamespace:
    if level or name not in _ALLOWED_MODULES:
        raise ImportError(f"import of {name!r} not allowed in hooks")
    return _module_proxy(name)


def _restricted_builtins() -> dict[str, Any]:
    import builtins

    table = {name: getattr(builtins, name) for name in _SAFE_BUILTINS}
    table["range"] = _bounded_range
    table["__import__"] = _restricted_import
    return table


def _load_hooks(source: str, label: str) -> dict[str, Callable[..., Any]]:
    tree = _check_hooks_source(source, label)
    namespace: dict[str, Any] = {"__builtins__": _restricted_builtins(), "__name__": "spec_hooks"}
    try:
        exec(compile(tree, label, "exec"), namespace)  # noqa: S102 - restricted, see module docstring
    except Exception as exc:  # noqa: BLE001 - any load failure is a spec error
        line = _traceback_line(exc.__traceback__, label)
        raise SpecError(label, f"failed to load: {type(exc).__name__}: {exc}", line=line) from None
    return {name: namespace[name] for name in HOOK_SIGNATURES if callable(namespace.get(name))}


# ---- call limits

#: Python lines one hook call may execute, counted by a trace function. Wiring code runs a few
#: hundred; a runaway loop reaches the budget within about a second.
HOOK_LINE_BUDGET = 2_000_000
#: Nested Python calls one hook call may make. Kept well under the interpreter's recursion limit:
#: a RecursionError raised inside the trace function would switch tracing off for good.
HOOK_MAX_DEPTH = 200
#: Wall-clock limit of one hook call, in seconds (slow lines that stay under the line budget).
HOOK_TIMEOUT_S = 2.0
_MAX_IDLE_THREADS = 8


class _HookLimit(BaseException):
    """Raised by the trace function. Not an Exception, so a hook's `except Exception` cannot catch
    it (bare except and finally are rejected statically for the same reason)."""


class _HookTimeout(Exception):
    """The caller stopped waiting for a hook call (HOOK_TIMEOUT_S)."""


class _HookCall:
    """One hook call handed to a worker thread; ``lock`` decides finished-vs-abandoned once."""

    __slots__ = ("function", "args", "budget", "max_depth", "result", "error", "finished", "cancelled",
                 "lock", "done")

    def __init__(self, function: Callable[..., Any], args: tuple[Any, ...]):
        self.function = function
        self.args = args
        self.budget = HOOK_LINE_BUDGET
        self.max_depth = min(HOOK_MAX_DEPTH, sys.getrecursionlimit() // 2)
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self.cancelled = False
        self.lock = threading.Lock()
        self.done = threading.Event()


def _execute(call: _HookCall) -> None:
    """Run the call in this thread under a trace function that counts lines and call depth and
    stops the hook once the caller has given up on it."""
    lines = depth = 0

    def on_line(frame: types.FrameType, event: str, arg: Any) -> Any:
        nonlocal lines, depth
        if event == "line":
            lines += 1
            if lines > call.budget:
                raise _HookLimit(f"exceeded the line budget ({call.budget:,} Python lines per call)")
            if call.cancelled:
                raise _HookLimit("abandoned after the wall-clock limit")
        elif event == "return":
            depth -= 1
        return on_line

    def on_call(frame: types.FrameType, event: str, arg: Any) -> Any:
        nonlocal depth
        depth += 1
        if depth > call.max_depth:
            raise _HookLimit(f"exceeded the call depth limit ({call.max_depth} nested calls)")
        return on_line

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        call.result = call.function(*call.args)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
        call.error = exc
    finally:
        sys.settrace(previous)


class _HookThread:
    """A reusable daemon worker. Daemon, because an abandoned call stuck in C code must not keep
    the interpreter from exiting."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[_HookCall | None] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="spec-hook", daemon=True).start()

    def _serve(self) -> None:
        while (call := self.inbox.get()) is not None:
            _execute(call)
            with call.lock:
                call.finished = True
                abandoned = call.cancelled
            call.done.set()
            if abandoned:  # the caller left without this thread; it is in no pool
                return


_idle_threads: list[_HookThread] = []
_idle_lock = threading.Lock()


def _run_limited(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Call ``function(*args)`` in a worker thread under the line, depth and wall-clock limits;
    return its result or raise its exception (a _HookLimit for a broken limit, _HookTimeout)."""
    with _idle_lock:
        worker = _idle_threads.pop() if _idle_threads else None
    worker = worker or _HookThread()
    call = _HookCall(function, args)
    worker.inbox.put(call)
    if not call.done.wait(HOOK_TIMEOUT_S):
        with call.lock:
            call.cancelled = not call.finished
        if call.cancelled:
            # The worker is abandoned: its Python code stops at the next line (the trace function
            # sees `cancelled`). A single C call that holds the GIL (a catastrophic regex,
            # sum(range(10**12))) cannot be interrupted in-process; even this wait only times out
            # once that call returns. Only running hooks in a subprocess would bound that case.
            raise _HookTimeout
    with _idle_lock:
        if len(_idle_threads) < _MAX_IDLE_THREADS:
            _idle_threads.append(worker)
            worker = None
    if worker is not None:
        worker.inbox.put(None)
    if call.error is not None:
        raise call.error
    return call.result


def _guarded(name: str, function: Callable[..., Any], label: str) -> Callable[..., str]:
    """Call a hook under the limits; an exception, a broken limit or a non-str result becomes a
    HookError naming hook and line (strategies then end the question with ``tool_error``)."""

    def call(*args: Any) -> str:
        try:
            result = _run_limited(function, args)
        except _HookTimeout:
            raise HookError(f"{label}: hook {name} exceeded {HOOK_TIMEOUT_S:g} s") from None
        except _HookLimit as exc:
            line = _traceback_line(exc.__traceback__, label)
            where = f"{label}:{line}" if line else label
            raise HookError(f"{where}: hook {name} {exc}") from None
        except Exception as exc:
            line = _traceback_line(exc.__traceback__, label)
            where = f"{label}:{line}" if line else label
            raise HookError(f"{where}: {name} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(result, str):
            raise HookError(f"{label}: {name} returned {type(result).__name__}, expected str")
        return result

    call.__name__ = name
    call.__doc__ = function.__doc__
    return call


# --------------------------------------------------------------------------------------------
# Rule enforcements: token-level rewrites that never touch IRIs, strings or comments
# --------------------------------------------------------------------------------------------

_AGGREGATES = frozenset({"COUNT", "SUM", "AVG", "MIN", "MAX", "SAMPLE", "GROUP_CONCAT"})
_Token = tuple[str, str]


def _lex(sparql: str) -> list[_Token]:
    """Every character in exactly one token, so joining is lossless; an unterminated string runs
    to the end of its line, so a rewrite never edits inside it."""
    return [(t.kind, t.text) for t in sparql_lexer.tokens(sparql, open_strings=True)]


def _is_word(token: _Token, *words: str) -> bool:
    return token[0] == "word" and token[1].upper() in words


def _next_sig(tokens: list[_Token], start: int) -> int | None:
    for i in range(start, len(tokens)):
        if tokens[i][0] not in ("ws", "comment"):
            return i
    return None


def _match_paren(tokens: list[_Token], open_index: int) -> int | None:
    depth = 0
    for i in range(open_index, len(tokens)):
        if tokens[i] == ("punct", "("):
            depth += 1
        elif tokens[i] == ("punct", ")"):
            depth -= 1
            if depth == 0:
                return i
    return None


def _projection_end(tokens: list[_Token], start: int) -> int:
    """Index of the WHERE / FROM / '{' that ends the projection of a SELECT starting at start."""
    depth = 0
    for i in range(start, len(tokens)):
        kind, text = tokens[i]
        if kind == "punct" and text in "()":
            depth += 1 if text == "(" else -1
        elif depth <= 0 and (tokens[i] == ("punct", "{") or _is_word(tokens[i], "WHERE", "FROM")):
            return i
    return len(tokens)


def _aggregate_at(tokens: list[_Token], i: int, end: int) -> int | None:
    """If tokens[i] is an aggregate name followed by '(', the index of that '('."""
    if not _is_word(tokens[i], *_AGGREGATES):
        return None
    j = _next_sig(tokens, i + 1)
    return j if j is not None and j < end and tokens[j] == ("punct", "(") else None


def _first_aggregate(tokens: list[_Token], start: int, end: int) -> str | None:
    for i in range(start, end):
        if _aggregate_at(tokens, i, end) is not None:
            return tokens[i][1].lower()
    return None


def _has_word_at_depth0(tokens: list[_Token], start: int, end: int, word: str) -> bool:
    depth = 0
    for i in range(start, end):
        if tokens[i] == ("punct", "("):
            depth += 1
        elif tokens[i] == ("punct", ")"):
            depth -= 1
        elif depth == 0 and _is_word(tokens[i], word):
            return True
    return False


def _join(tokens: list[_Token], before: Mapping[int, str], after: Mapping[int, str]) -> str:
    return "".join(before.get(i, "") + text + after.get(i, "") for i, (_, text) in enumerate(tokens))


def _keyword(word: str, like: str) -> str:
    """Match the case style of the surrounding query (`select` -> `distinct`)."""
    return word.lower() if like.islower() else word


def enforce_select_distinct(sparql: str) -> str:
    """SELECT -> SELECT DISTINCT on the outermost SELECT, unless it is already DISTINCT/REDUCED or
    projects an aggregate. Sub-selects (inside braces) are left alone."""
    tokens = _lex(sparql)
    depth = 0
    for i, (kind, text) in enumerate(tokens):
        if kind == "punct" and text in "{}":
            depth += 1 if text == "{" else -1
        elif depth == 0 and _is_word(tokens[i], "SELECT"):
            j = _next_sig(tokens, i + 1)
            if j is not None and _is_word(tokens[j], "DISTINCT", "REDUCED"):
                return sparql
            if _first_aggregate(tokens, i + 1, _projection_end(tokens, i + 1)):
                return sparql
            return _join(tokens, {}, {i: " " + _keyword("DISTINCT", text)})
    return sparql


def _fresh_name(base: str, taken: set[str]) -> str:
    name, n = base, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


def _alias_projection(
    tokens: list[_Token], start: int, end: int, taken: set[str],
    before: defaultdict[int, str], after: defaultdict[int, str],
) -> None:
    i = start
    while i < end:
        open_index = _aggregate_at(tokens, i, end)
        if open_index is not None:  # bare `COUNT(?x)` in the projection
            close = _match_paren(tokens, open_index)
            if close is None or close >= end:
                return  # malformed: leave it for the parser to report
            k = _next_sig(tokens, close + 1)
            v = _next_sig(tokens, k + 1) if k is not None and _is_word(tokens[k], "AS") else None
            if v is not None and v < end and tokens[v][0] == "var":  # Virtuoso's `COUNT(?x) AS ?c`
                before[i] += "("
                after[v] += ")"
                i = v + 1
                continue
            alias = _fresh_name(tokens[i][1].lower(), taken)
            before[i] += "("
            after[close] += f" {_keyword('AS', tokens[i][1])} ?{alias})"
            i = close + 1
            continue
        if tokens[i] == ("punct", "("):  # `(COUNT(?x))` without AS
            close = _match_paren(tokens, i)
            if close is None or close >= end:
                return
            aggregate = _first_aggregate(tokens, i + 1, close)
            if aggregate and not _has_word_at_depth0(tokens, i + 1, close, "AS"):
                before[close] += f" AS ?{_fresh_name(aggregate, taken)}"
            i = close + 1
            continue
        i += 1


def enforce_alias_aggregates(sparql: str) -> str:
    """Alias unaliased aggregate projections in every SELECT (sub-selects included):
    `SELECT COUNT(?x)` -> `SELECT (COUNT(?x) AS ?count)`; the alias avoids existing variables."""
    tokens = _lex(sparql)
    taken = {text[1:] for kind, text in tokens if kind == "var"}
    before: defaultdict[int, str] = defaultdict(str)
    after: defaultdict[int, str] = defaultdict(str)
    for i, token in enumerate(tokens):
        if _is_word(token, "SELECT"):
            _alias_projection(tokens, i + 1, _projection_end(tokens, i + 1), taken, before, after)
    return _join(tokens, before, after) if before or after else sparql


def enforce_add_prefixes(sparql: str) -> str:
    """Declare missing standard prefixes (worker_agent.kg.add_missing_prefixes, KNOWN_PREFIXES)."""
    return add_missing_prefixes(sparql)


#: Enforcement name -> rewrite, in application order (aliasing first: DISTINCT skips aggregates).
ENFORCEMENTS: dict[str, Callable[[str], str]] = {
    "alias_aggregates": enforce_alias_aggregates,
    "select_distinct": enforce_select_distinct,
    "add_prefixes": enforce_add_prefixes,
}
assert set(ENFORCEMENTS) == set(get_args(Enforcement))


# --------------------------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------------------------

_SECRET_KEY = re.compile(r"api_?key|secret|password", re.IGNORECASE)


def _flatten(prefix: str, value: Any, out: dict[str, object]) -> None:
    """Flat scalar features; lists become comma-joined strings so values stay hashable."""
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            if not _SECRET_KEY.search(str(key)):
                _flatten(f"{prefix}.{key}" if prefix else str(key), value[key], out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = ",".join(str(v) for v in value)
    else:
        out[prefix] = value


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class AgentSpec:
    """A loaded, validated spec. Build it with :meth:`load` or :meth:`from_files`."""

    def __init__(self, files: Mapping[str, str], *, root: Path | None = None, origin: str | None = None):
        self.root = root
        self.origin = origin
        self._files = {path: files[path] for path in sorted(files)}
        _check_paths(self._files, self._label)
        self.config: AgentConfig = _parse_config(self._files[AGENT_FILE], self._label(AGENT_FILE))
        self.rules: list[Rule] = _parse_rules(self._files[RULES_FILE], self._label(RULES_FILE))
        self.prompts: dict[str, str] = {
            match.group(1): text
            for path, text in self._files.items()
            if (match := _PROMPT_PATH.match(path))
        }
        self._prompts = _Prompts(self.prompts, self._label)
        self._check_prompt_contract()
        self.hooks_source: str | None = self._files.get(HOOKS_FILE)
        self._hooks = _load_hooks(self.hooks_source, self._label(HOOKS_FILE)) if self.hooks_source else {}

    # ---- construction

    @classmethod
    def load(cls, path: str | Path) -> AgentSpec:
        """Load the spec directory ``path`` (hidden files and __pycache__ are ignored)."""
        root = Path(path)
        if not root.is_dir():
            raise SpecError(str(root), "not a spec directory")
        files: dict[str, str] = {}
        for file in sorted(root.rglob("*")):
            relative = file.relative_to(root)
            if not file.is_file() or any(p.startswith(".") or p == "__pycache__" for p in relative.parts):
                continue
            try:
                files[relative.as_posix()] = file.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                raise SpecError(str(file), "not UTF-8 text") from None
        return cls(files, root=root, origin=str(root))

    @classmethod
    def from_files(cls, files: Mapping[str, str], *, origin: str | None = None) -> AgentSpec:
        """Build a spec from relative path -> text (e.g. a git revision); ``origin`` prefixes the
        file names in error messages (e.g. ``"v3@1a2b3c4"``)."""
        return cls(files, origin=origin)

    def _label(self, relative: str) -> str:
        return f"{self.origin.rstrip('/')}/{relative}" if self.origin else relative

    def _check_prompt_contract(self) -> None:
        for name in REQUIRED_PROMPTS[self.config.strategy]:
            if name not in self.prompts:
                raise SpecError(self._label(f"prompts/{name}.j2"),
                                f"missing (strategy {self.config.strategy} needs it)")
        for name, used in self._prompts.variables.items():
            if name not in PROMPT_VARIABLES:
                continue  # extra prompts: render() checks their variables when called
            unknown = used - PROMPT_VARIABLES[name] - SPEC_PROVIDED_VARIABLES
            if unknown:
                available = sorted(PROMPT_VARIABLES[name] | SPEC_PROVIDED_VARIABLES)
                raise SpecError(self._label(f"prompts/{name}.j2"),
                                f"uses variables the strategy does not provide: {', '.join(sorted(unknown))} "
                                f"(available: {', '.join(available)})")

    # ---- queries

    def files(self) -> dict[str, str]:
        """Relative path -> text, exactly as loaded (what a version commits)."""
        return dict(self._files)

    def render(self, prompt: str, **variables: Any) -> str:
        """Render ``prompts/<prompt>.j2``; the spec adds ``rules`` (enabled) and ``config``."""
        name = prompt.removesuffix(".j2")
        if name not in self.prompts:
            raise SpecError(self._label(f"prompts/{name}.j2"),
                            f"no such prompt (available: {', '.join(sorted(self.prompts)) or 'none'})")
        context = {"rules": self.enabled_rules(), "config": self.config, **variables}
        return self._prompts.render(name, context)

    def prompt_variables(self, prompt: str) -> frozenset[str]:
        """Variables the template references that the caller or the spec must provide."""
        return self._prompts.variables[prompt.removesuffix(".j2")]

    def enabled_rules(self) -> list[Rule]:
        return [rule for rule in self.rules if rule.enabled]

    def rule_enabled(self, rule_id: str) -> bool:
        """True if a rule with this id exists and is enabled (a removed rule counts as off)."""
        return any(rule.id == rule_id and rule.enabled for rule in self.rules)

    def enforce(self, sparql: str) -> str:
        """Apply the enforcements of the enabled rules, in the fixed order of ENFORCEMENTS."""
        wanted = {rule.enforce for rule in self.enabled_rules() if rule.enforce}
        for name, rewrite in ENFORCEMENTS.items():
            if name in wanted:
                sparql = rewrite(sparql)
        return sparql

    def features(self) -> dict[str, object]:
        """Flat features for the ledger: knobs (``few_shot``, ``tools.surface_forms.k``, ...),
        ``rule:<id>`` -> enabled, ``prompt:<name>`` -> content digest, ``hooks`` -> digest/None."""
        out: dict[str, object] = {}
        _flatten("", self.config.model_dump(mode="json", exclude={"name"}), out)
        for rule in self.rules:
            out[f"rule:{rule.id}"] = rule.enabled
        for name in sorted(self.prompts):
            out[f"prompt:{name}"] = _digest(self.prompts[name])
        out["hooks"] = _digest(self.hooks_source) if self.hooks_source else None
        return out

    def hook(self, name: str) -> Callable[..., str] | None:
        """The named hook wrapped so failures raise HookError, or None if the spec has none."""
        if name not in HOOK_SIGNATURES:
            raise ValueError(f"unknown hook {name!r} (known: {', '.join(HOOK_SIGNATURES)})")
        function = self._hooks.get(name)
        return _guarded(name, function, self._label(HOOKS_FILE)) if function else None

    def __repr__(self) -> str:
        where = self.origin or "<files>"
        return f"AgentSpec({self.config.name!r}, strategy={self.config.strategy!r}, from {where})"


def _check_paths(files: Mapping[str, str], label: Callable[[str], str]) -> None:
    for path in files:
        if path not in (AGENT_FILE, RULES_FILE, HOOKS_FILE) and not _PROMPT_PATH.match(path):
            raise SpecError(label(path), f"file not allowed in a spec (allowed: {_ALLOWED_PATHS_TEXT})")
        if not isinstance(files[path], str):
            raise SpecError(label(path), f"expected text, got {type(files[path]).__name__}")
    for required in (AGENT_FILE, RULES_FILE):
        if required not in files:
            raise SpecError(label(required), "missing")


def validate_spec_files(files: Mapping[str, str], *, origin: str | None = None) -> None:
    """Gate before committing a candidate: allowed paths only, config and rules valid, every
    prompt compiles and uses only provided variables, hooks pass the restrictions and load."""
    AgentSpec.from_files(files, origin=origin)


def seed_spec_path() -> Path:
    """The shipped seed spec (versions/v1 in the repository)."""
    return Path(__file__).resolve().parents[1] / "versions" / "v1"
