"""Tests for worker_agent/spec.py and the shipped seed spec (versions/v1)."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import pytest
from jinja2 import Environment, meta

from worker_agent import spec as spec_module
from worker_agent.kg import KGError, open_kg
from worker_agent.spec import (
    ENFORCEMENTS,
    PROMPT_VARIABLES,
    AgentSpec,
    HookError,
    SpecError,
    enforce_add_prefixes,
    enforce_alias_aggregates,
    enforce_select_distinct,
    seed_spec_path,
    validate_spec_files,
)

SEED_RULES = {
    "ask_for_yes_no": True,
    "project_iris": True,
    "alias_aggregates": True,
    "ontology_namespace": True,
    "select_distinct": False,
    "answer_type_constraint": False,
    "triple_direction": False,
    "unicode_fallback": False,
    "surname_linking": False,
    "verify_nonempty": False,
    "expected_shape": False,
    "add_prefixes": True,
}
TOOLS = [
    {"name": "surface_forms", "description": "Find IRIs by name."},
    {"name": "ontology", "description": "Describe a class or property."},
    {"name": "test_sparql", "description": "Run a draft query and preview its rows."},
]
QUESTION_VARS: dict[str, object] = {
    "question": "In which department is Ms. Brant?",
    "lang": "en",
    "examples": [{"question": "Who is the manager of Heinrich Hoch?", "sparql": "SELECT ?r WHERE { ?s ?p ?r }"}],
    "dataset_name": "ck25",
    "default_namespace": "http://ld.company.org/prod-vocab/",
    "prefixes": {"pv": "http://ld.company.org/prod-vocab/"},
}


@pytest.fixture(scope="module")
def seed() -> AgentSpec:
    return AgentSpec.load(seed_spec_path())


def seed_files() -> dict[str, str]:
    return AgentSpec.load(seed_spec_path()).files()


def with_file(path: str, text: str | None) -> dict[str, str]:
    """The seed's files with one replaced (text) or removed (None)."""
    files = seed_files()
    if text is None:
        files.pop(path)
    else:
        files[path] = text
    return files


def spec_with_hooks(source: str) -> AgentSpec:
    return AgentSpec.from_files(with_file("hooks.py", source))


# ------------------------------------------------------------------ the seed spec as shipped


def test_seed_loads_as_shipped(seed: AgentSpec) -> None:
    assert seed_spec_path() == Path(__file__).resolve().parents[1] / "versions" / "v1"
    assert seed.config.name == "seed" and seed.config.strategy == "offline"
    assert {r.id: r.enabled for r in seed.rules} == SEED_RULES
    assert set(seed.prompts) == {"system", "question", "repair"}
    assert seed.hooks_source is not None
    assert set(seed.files()) == {"agent.yaml", "rules.yaml", "hooks.py",
                                 "prompts/system.j2", "prompts/question.j2", "prompts/repair.j2"}
    validate_spec_files(seed.files())
    # The shipped prompts also satisfy the llm_agent contract (all three prompts, known variables).
    agent = seed.files()["agent.yaml"].replace("strategy: offline", "strategy: llm_agent")
    assert AgentSpec.from_files(with_file("agent.yaml", agent)).config.strategy == "llm_agent"


def test_seed_prompts_render_with_enabled_rules_only(seed: AgentSpec) -> None:
    system = seed.render("system", tools=TOOLS)
    for rule in seed.rules:
        assert (rule.text in system) == rule.enabled, rule.id
    assert "within 8 turns" in system and "`test_sparql`" in system
    without_tools = seed.render("system.j2", tools=[])
    assert "`surface_forms`" not in without_tools
    question = seed.render("question", **QUESTION_VARS)
    assert question.rstrip().endswith("Question: In which department is Ms. Brant?")
    assert "PREFIX pv: <http://ld.company.org/prod-vocab/>" in question
    assert "SELECT ?r WHERE { ?s ?p ?r }" in question
    assert 'language "es"' in seed.render("question", **{**QUESTION_VARS, "lang": "es"})
    repair = seed.render("repair", question="Q?", sparql="SELECT ?x {}", problem="empty result", preview="")
    assert "Problem: empty result" in repair and "Result preview" not in repair


def test_seed_prompt_headers_list_their_variables(seed: AgentSpec) -> None:
    env = Environment()
    for name, text in seed.prompts.items():
        header = re.match(r"\{#-?(.*?)-?#\}", text, re.DOTALL)
        assert header, f"{name}.j2 must start with a Jinja comment listing its variables"
        used = meta.find_undeclared_variables(env.parse(text))
        assert used <= PROMPT_VARIABLES[name] | {"rules", "config"}
        for variable in used | PROMPT_VARIABLES[name]:
            assert re.search(rf"\b{variable}\b", header.group(1)), f"{name}.j2 header lacks {variable}"


def test_seed_hooks_work(seed: AgentSpec) -> None:
    post = seed.hook("postprocess_query")
    fmt = seed.hook("format_tool_result")
    assert post is not None and fmt is not None
    assert post("```sparql\nSELECT ?x WHERE { ?x ?p ?o } ;\n```\nDone.") == "SELECT ?x WHERE { ?x ?p ?o }"
    # Works whichever runs first: enforcement may already have put PREFIX lines before the fence.
    fenced = seed.enforce("Here it is:\n```sparql\nSELECT COUNT(?d) WHERE { ?d a pv:Department }\n```")
    assert post(fenced) == (
        "PREFIX pv: <http://ld.company.org/prod-vocab/>\nSELECT (COUNT(?d) AS ?count) WHERE { ?d a pv:Department }"
    )
    assert seed.enforce(post(fenced)) == post(fenced)
    text = fmt("surface_forms", [{"iri": "http://ex/Zürich", "score": 91}] * 20)
    assert text.splitlines()[0] == '{"iri": "http://ex/Zürich", "score": 91}'
    assert text.splitlines()[-1] == "... 5 more not shown"
    assert fmt("surface_forms", []) == "surface_forms: no results"
    with pytest.raises(ValueError, match="unknown hook"):
        seed.hook("postprocess")


# ------------------------------------------------------------------ agent.yaml / rules.yaml errors


def copy_seed(tmp_path: Path) -> Path:
    target = tmp_path / "versions" / "v9"
    shutil.copytree(seed_spec_path(), target)
    return target


def test_unknown_field_rejected_with_file_and_field(tmp_path: Path) -> None:
    root = copy_seed(tmp_path)
    agent = root / "agent.yaml"
    agent.write_text(agent.read_text().replace("    k: 10", "    k: 10\n    kk: 3"))
    with pytest.raises(SpecError) as info:
        AgentSpec.load(root)
    assert str(info.value) == f"{root}/agent.yaml: tools.surface_forms.kk: Extra inputs are not permitted"
    assert info.value.field == "tools.surface_forms.kk"


def test_wrong_type_names_file_and_field() -> None:
    agent = seed_files()["agent.yaml"].replace("    k: 10", "    k: ten")
    with pytest.raises(SpecError) as info:
        AgentSpec.from_files(with_file("agent.yaml", agent), origin="versions/v1")
    assert str(info.value).startswith("versions/v1/agent.yaml: tools.surface_forms.k: Input should be a valid integer")


@pytest.mark.parametrize(
    ("replace", "by", "expected"),
    [
        ("strategy: offline", "strategy: magic", "agent.yaml: strategy: Input should be 'offline' or 'llm_agent'"),
        ("few_shot: 1", "few_shot: -1", "agent.yaml: few_shot: Input should be greater than or equal to 0"),
        ("strategy: offline", "strategy: llm_agent\nmodel: null",
         "agent.yaml:"),  # (duplicate key `model` is caught first)
        ("label_predicates: []", "label_predicates: ['<http://x/label>']", "tools.surface_forms.label_predicates: '<http://x/label>' is not an IRI"),
    ],
)
def test_config_errors(replace: str, by: str, expected: str) -> None:
    agent = seed_files()["agent.yaml"]
    assert replace in agent
    with pytest.raises(SpecError, match=re.escape(expected)):
        AgentSpec.from_files(with_file("agent.yaml", agent.replace(replace, by)))


def test_llm_agent_needs_model_and_prompts() -> None:
    agent = "name: x\nstrategy: llm_agent\n"
    with pytest.raises(SpecError, match=r"^agent\.yaml: model: required when strategy is llm_agent$"):
        AgentSpec.from_files({"agent.yaml": agent, "rules.yaml": "[]"})
    agent += "model: {provider: openai, name: gpt-4o-mini}\n"
    with pytest.raises(SpecError, match=r"prompts/system\.j2: missing \(strategy llm_agent needs it\)"):
        AgentSpec.from_files({"agent.yaml": agent, "rules.yaml": "[]"})
    minimal = AgentSpec.from_files({"agent.yaml": "name: x\nstrategy: offline\n", "rules.yaml": ""})
    assert minimal.rules == [] and minimal.config.tools.surface_forms.k == 10


def with_model(model: str, strategy: str = "llm_agent") -> dict[str, str]:
    """Seed files with the model section replaced (one flow mapping) and the strategy set."""
    agent = re.sub(r"(?m)^model:.*\n(?:  .*\n)+", f"model: {model}\n", seed_files()["agent.yaml"])
    return with_file("agent.yaml", agent.replace("strategy: offline", f"strategy: {strategy}"))


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("{provider: openai, name: gpt-4o-mini, temprature: 0}", "model.temprature: Extra inputs are not permitted"),
        ("{provider: opnai, name: gpt-4o-mini}",
         "model.provider: Input should be 'openai', 'anthropic' or 'scripted'"),
        ("{provider: openai}", "model.name: Field required"),
        ("{provider: openai, name: m, temperature: 9}", "model.temperature: Input should be less than or equal to 2"),
        ("{provider: openai, name: m, script: [{content: hi}]}", "model: script is only allowed with provider"),
        ("{provider: scripted, name: s, script: [{content: hi, bogus: 1}]}",
         "model.script[0].bogus: Extra inputs are not permitted"),
    ],
)
def test_model_section_validated_at_load(model: str, expected: str) -> None:
    for strategy in ("llm_agent", "offline"):  # a present section is checked whatever the strategy
        with pytest.raises(SpecError) as info:
            validate_spec_files(with_model(model, strategy), origin="v3")
        assert str(info.value).startswith(f"v3/agent.yaml: {expected}")
        assert info.value.file == "v3/agent.yaml"


def test_model_validation_needs_no_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "T2S_SPEC_TEST_KEY"):
        monkeypatch.delenv(var, raising=False)
    for model in ("{provider: openai, name: gpt-4o-mini}", "{provider: anthropic, name: claude-haiku-4-5}",
                  "{provider: openai, name: m, api_key: '${T2S_SPEC_TEST_KEY}', base_url: 'http://localhost:8000/v1'}"):
        spec = AgentSpec.from_files(with_model(model))
        assert spec.config.strategy == "llm_agent" and isinstance(spec.config.model, dict)
    # A literal key is rejected by ModelConfig, without echoing it.
    with pytest.raises(SpecError, match=r"^agent\.yaml: model\.api_key: must be a \$\{ENV_VAR\} reference") as info:
        AgentSpec.from_files(with_model("{provider: openai, name: m, api_key: sk-secret-123}"))
    assert "sk-secret-123" not in str(info.value)


def test_bad_yaml_names_line() -> None:
    with pytest.raises(SpecError) as info:
        AgentSpec.from_files(with_file("agent.yaml", "name: seed\nstrategy: [offline\nfew_shot: 1\n"))
    assert str(info.value).startswith("agent.yaml:")
    assert "invalid YAML" in str(info.value) and info.value.line is not None
    with pytest.raises(SpecError, match=r"^agent\.yaml:3: invalid YAML: duplicate key 'name'"):
        AgentSpec.from_files(with_file("agent.yaml", "name: a\nstrategy: offline\nname: b\n"))
    with pytest.raises(SpecError, match=r"^agent\.yaml: expected a mapping of fields, got list"):
        AgentSpec.from_files(with_file("agent.yaml", "- name: a\n"))


def test_duplicate_rule_ids_rejected() -> None:
    rules = seed_files()["rules.yaml"] + "\n- id: ask_for_yes_no\n  enabled: false\n  text: again\n"
    with pytest.raises(SpecError, match=r"^rules\.yaml: \[12\]\.id: duplicate rule id 'ask_for_yes_no'$"):
        AgentSpec.from_files(with_file("rules.yaml", rules))


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("- id: r1\n  text: t\n  enabled: true\n  enforce: uppercase\n", "rules.yaml: r1.enforce: Input should be"),
        ("- id: r1\n  text: t\n", "rules.yaml: r1.enabled: Field required"),
        ("- id: r1\n  text: t\n  enabled: true\n  weight: 2\n", "rules.yaml: r1.weight: Extra inputs"),
        ("- id: Bad-Id\n  text: t\n  enabled: true\n", "rules.yaml: Bad-Id.id: String should match pattern"),
        ("rules: []\n", "rules.yaml: expected a list of rules, got dict"),
    ],
)
def test_rule_errors(rules: str, expected: str) -> None:
    with pytest.raises(SpecError, match="^" + re.escape(expected)):
        AgentSpec.from_files(with_file("rules.yaml", rules))


def test_paths_gate() -> None:
    with pytest.raises(SpecError, match=r"^v3@abc/notes\.md: file not allowed in a spec"):
        validate_spec_files({**seed_files(), "notes.md": "hi"}, origin="v3@abc")
    with pytest.raises(SpecError, match=r"^prompts/sub/x\.j2: file not allowed"):
        validate_spec_files({**seed_files(), "prompts/sub/x.j2": "hi"})
    with pytest.raises(SpecError, match=r"^rules\.yaml: missing$"):
        validate_spec_files(with_file("rules.yaml", None))


def test_load_ignores_hidden_and_cache_but_rejects_stray_files(tmp_path: Path) -> None:
    root = copy_seed(tmp_path)
    (root / ".DS_Store").write_text("x")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "hooks.cpython-311.pyc").write_bytes(b"\0\1")
    assert AgentSpec.load(root).files() == AgentSpec.load(seed_spec_path()).files()
    (root / "README.md").write_text("notes")
    with pytest.raises(SpecError, match=re.escape(f"{root}/README.md: file not allowed")):
        AgentSpec.load(root)
    with pytest.raises(SpecError, match="not a spec directory"):
        AgentSpec.load(tmp_path / "missing")


# ------------------------------------------------------------------ prompts


def test_render_missing_and_undefined_variables(seed: AgentSpec) -> None:
    prefix = f"{seed_spec_path()}/prompts/"
    with pytest.raises(SpecError, match="^" + re.escape(prefix + "repair.j2: missing variables: preview, problem") + "$"):
        seed.render("repair", question="Q?", sparql="SELECT * {}")
    # An attribute missing on a provided value: StrictUndefined raises at render time.
    bad_example = {**QUESTION_VARS, "examples": [{"question": "Q"}]}
    with pytest.raises(SpecError) as info:
        seed.render("question", **bad_example)
    assert str(info.value).startswith(prefix + "question.j2:")
    assert "has no attribute 'sparql'" in str(info.value) and info.value.line is not None
    with pytest.raises(SpecError, match="no such prompt"):
        seed.render("critique")


def test_prompt_using_unprovided_variable_rejected_at_load() -> None:
    system = seed_files()["prompts/system.j2"] + "\n{{ question }}\n"
    with pytest.raises(SpecError, match=r"^prompts/system\.j2: uses variables the strategy does not provide: question"):
        AgentSpec.from_files(with_file("prompts/system.j2", system))


def test_prompt_syntax_error_names_line() -> None:
    with pytest.raises(SpecError, match=r"^prompts/repair\.j2:2: template syntax error"):
        AgentSpec.from_files(with_file("prompts/repair.j2", "{# v #}\n{{ question }\n{{ sparql }}\n"))


@pytest.mark.parametrize(
    ("template", "line", "tag"),
    [
        ("{{ sparql }} {{ problem }} {{ preview }}\n{% include 'tips.j2' %}", 2, "{% include %}"),
        ("{% include 'missing.j2' ignore missing %}{{ sparql }}", 1, "{% include %}"),
        ("{# m #}\n\n{% import 'macros.j2' as m %}{{ m.tip() }}", 3, "{% import %}"),
        ("{% if sparql %}\n{% from 'macros.j2' import tip %}{{ tip() }}\n{% endif %}", 2, "{% from ... import %}"),
        ("{% extends 'base.j2' %}", 1, "{% extends %}"),
    ],
)
def test_prompts_must_be_self_contained(template: str, line: int, tag: str) -> None:
    # Even when the named template exists, an include could need variables the strategy does not
    # pass (here `undefined_here`), which would only fail at render time.
    files = {**seed_files(), "prompts/tips.j2": "Tip: {{ undefined_here }}",
             "prompts/macros.j2": "{% macro tip() %}{{ undefined_here }}{% endmacro %}",
             "prompts/base.j2": "{{ undefined_here }}", "prompts/repair.j2": template}
    with pytest.raises(SpecError) as info:
        validate_spec_files(files, origin="v4")
    assert str(info.value) == (f"v4/prompts/repair.j2:{line}: {tag} not allowed: prompts are self-contained "
                               "(use a {% macro %} in the same file)")
    assert info.value.line == line


def test_macros_within_one_prompt_are_fine() -> None:
    template = ("{% macro row(label, value) %}{{ label }}={{ value }}{% endmacro %}"
                "{{ row('q', sparql) }} {{ row('p', problem) }}{{ preview }}")
    extra = "An extra prompt, rendered only by name: {{ anything }}"
    spec = AgentSpec.from_files({**seed_files(), "prompts/repair.j2": template, "prompts/extra.j2": extra})
    assert spec.render("repair", question="Q", sparql="S", problem="P", preview="") == "q=S p=P"
    assert spec.render("extra", anything="x").endswith("by name: x")
    with pytest.raises(SpecError, match=r"^prompts/extra\.j2: missing variables: anything$"):
        spec.render("extra")


def test_prompts_are_sandboxed() -> None:
    files = with_file("prompts/repair.j2", "{{ question.__class__.__mro__ }}{{ sparql }}{{ problem }}{{ preview }}")
    with pytest.raises(SpecError, match=r"^prompts/repair\.j2:1: render failed"):
        AgentSpec.from_files(files).render("repair", question="Q", sparql="", problem="", preview="")


# ------------------------------------------------------------------ enforcements


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT ?x WHERE { ?x a ?c }", "SELECT DISTINCT ?x WHERE { ?x a ?c }"),
        ("select ?x { ?x a ?c }", "select distinct ?x { ?x a ?c }"),
        ("SELECT DISTINCT ?x WHERE { ?x a ?c }", None),
        ("SELECT REDUCED ?x WHERE { ?x a ?c }", None),
        ("SELECT (COUNT(?x) AS ?n) WHERE { ?x a ?c }", None),
        ("SELECT ?c (MAX(?p) AS ?m) WHERE { ?x a ?c ; ?q ?p } GROUP BY ?c", None),
        ("ASK { ?x a ?c }", None),
        # only the outermost SELECT; the sub-select keeps its own semantics
        ("SELECT ?x WHERE { { SELECT ?x WHERE { ?x ?p ?o } LIMIT 5 } }",
         "SELECT DISTINCT ?x WHERE { { SELECT ?x WHERE { ?x ?p ?o } LIMIT 5 } }"),
        ("CONSTRUCT { ?x ?p ?o } WHERE { { SELECT ?x WHERE { ?x ?p ?o } } }", None),
        # keywords inside comments, strings and IRIs are not keywords
        ("# SELECT ?y\nSELECT ?x WHERE { ?x <http://ex/SELECT> \"SELECT ?z {\" }",
         "# SELECT ?y\nSELECT DISTINCT ?x WHERE { ?x <http://ex/SELECT> \"SELECT ?z {\" }"),
        ("PREFIX ex: <http://ex/{x}>\nASK { ?x ex:select 'SELECT ?y' }", None),
    ],
)
def test_select_distinct(query: str, expected: str | None) -> None:
    assert enforce_select_distinct(query) == (expected or query)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("SELECT COUNT(?x) WHERE { ?x a ?c }", "SELECT (COUNT(?x) AS ?count) WHERE { ?x a ?c }"),
        ("SELECT COUNT(DISTINCT ?uri) WHERE { ?uri ?p ?o }",
         "SELECT (COUNT(DISTINCT ?uri) AS ?count) WHERE { ?uri ?p ?o }"),
        ("select count(*) { ?s ?p ?o }", "select (count(*) as ?count) { ?s ?p ?o }"),
        ("SELECT ?c COUNT(?x) AVG(?v) WHERE { ?x a ?c ; ?p ?v } GROUP BY ?c",
         "SELECT ?c (COUNT(?x) AS ?count) (AVG(?v) AS ?avg) WHERE { ?x a ?c ; ?p ?v } GROUP BY ?c"),
        # the alias avoids variables already in the query
        ("SELECT COUNT(?count) WHERE { ?s ?p ?count }", "SELECT (COUNT(?count) AS ?count2) WHERE { ?s ?p ?count }"),
        ("SELECT (COUNT(?x)) WHERE { ?x a ?c }", "SELECT (COUNT(?x) AS ?count) WHERE { ?x a ?c }"),
        ("SELECT COUNT(?x) AS ?n WHERE { ?x a ?c }", "SELECT (COUNT(?x) AS ?n) WHERE { ?x a ?c }"),
        ("SELECT (COUNT(?x) AS ?n) WHERE { ?x a ?c }", None),
        ("SELECT (MAX(?p) - MIN(?p) AS ?range) WHERE { ?x ?q ?p }", None),
        # sub-selects too; aggregates in HAVING/ORDER BY are not projections
        ("SELECT ?x WHERE { { SELECT ?x SUM(?v) WHERE { ?x ?p ?v } GROUP BY ?x } } ORDER BY DESC(COUNT(?x))",
         "SELECT ?x WHERE { { SELECT ?x (SUM(?v) AS ?sum) WHERE { ?x ?p ?v } GROUP BY ?x } } ORDER BY DESC(COUNT(?x))"),
        # strings and IRIs untouched
        ("SELECT ?x WHERE { ?x <http://ex/COUNT(?x)> \"SELECT COUNT(?x)\" }", None),
        ("SELECT ?x WHERE { ?x ?p ?o", None),  # malformed: left for the parser
        ("SELECT COUNT(?x WHERE { ?x ?p ?o }", None),
    ],
)
def test_alias_aggregates(query: str, expected: str | None) -> None:
    result = enforce_alias_aggregates(query)
    assert result == (expected or query)
    assert enforce_alias_aggregates(result) == result  # idempotent


def test_add_prefixes_ignores_strings_and_iris() -> None:
    query = 'SELECT ?x WHERE { ?x dbo:birthPlace dbr:Berlin ; <http://ex/foaf:name> "skos:x" }'
    result = enforce_add_prefixes(query)
    assert result.endswith(query)
    header = result[: -len(query)]
    assert "PREFIX dbo: <http://dbpedia.org/ontology/>" in header
    assert "PREFIX dbr: <http://dbpedia.org/resource/>" in header
    assert "foaf" not in header and "skos" not in header
    assert enforce_add_prefixes(result) == result


def test_enforce_applies_enabled_rules_only(seed: AgentSpec) -> None:
    query = "SELECT COUNT(?d) WHERE { ?d a pv:Department }"
    expected = "PREFIX pv: <http://ld.company.org/prod-vocab/>\nSELECT (COUNT(?d) AS ?count) WHERE { ?d a pv:Department }"
    assert seed.enforce(query) == expected
    assert seed.enforce("SELECT ?d WHERE { ?d ?p ?o }") == "SELECT ?d WHERE { ?d ?p ?o }"  # select_distinct is off
    rules = seed.files()["rules.yaml"].replace(
        "- id: select_distinct\n  enabled: false", "- id: select_distinct\n  enabled: true"
    ).replace("- id: add_prefixes\n  enabled: true", "- id: add_prefixes\n  enabled: false")
    toggled = AgentSpec.from_files(with_file("rules.yaml", rules))
    assert toggled.rule_enabled("select_distinct") and not toggled.rule_enabled("add_prefixes")
    assert toggled.enforce("SELECT ?d WHERE { ?d ?p ?o }") == "SELECT DISTINCT ?d WHERE { ?d ?p ?o }"
    assert toggled.enforce(query) == "SELECT (COUNT(?d) AS ?count) WHERE { ?d a pv:Department }"
    assert list(ENFORCEMENTS) == ["alias_aggregates", "select_distinct", "add_prefixes"]


def test_enforced_queries_run_on_a_real_store(seed: AgentSpec, tmp_path: Path) -> None:
    ttl = tmp_path / "kg.ttl"
    ttl.write_text(
        "@prefix pv: <http://ld.company.org/prod-vocab/> .\n"
        "@prefix ex: <http://ex/> .\n"
        "ex:d1 a pv:Department . ex:d2 a pv:Department .\n"
        "ex:e1 pv:memberOf ex:d1 . ex:e2 pv:memberOf ex:d1 . ex:e3 pv:memberOf ex:d2 .\n"
    )
    kg = open_kg([ttl])
    raw = "SELECT COUNT(DISTINCT ?d) WHERE { ?e pv:memberOf ?d . ?d a pv:Department }"
    with pytest.raises(KGError):
        kg.query(raw)  # unaliased aggregate and undeclared prefix: not SPARQL 1.1
    result = kg.query(seed.enforce(raw))
    assert result.variables == ["count"] and result.rows[0][0].value == "2"
    rules = seed.files()["rules.yaml"].replace(
        "- id: select_distinct\n  enabled: false", "- id: select_distinct\n  enabled: true")
    distinct = AgentSpec.from_files(with_file("rules.yaml", rules))
    query = distinct.enforce("SELECT ?d WHERE { ?e pv:memberOf ?d }")
    assert len(kg.query(query).rows) == 2 and len(kg.query(seed.enforce("SELECT ?d WHERE { ?e pv:memberOf ?d }")).rows) == 3


# ------------------------------------------------------------------ hooks


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import os\n", r"^hooks\.py:1: import of 'os' not allowed"),
        ("import re\nimport os.path\n", r"^hooks\.py:2: import of 'os\.path' not allowed"),
        ("from subprocess import run\n", r"^hooks\.py:1: import from 'subprocess' not allowed"),
        ("from json import *\n", r"^hooks\.py:1: import of '\*' from json not allowed"),
        ("def postprocess_query(q):\n    return open('/etc/passwd').read()\n",
         r"^hooks\.py:2: name 'open' not allowed"),
        ("def postprocess_query(q):\n    return q.__class__\n", r"^hooks\.py:2: attribute '\.__class__' not allowed"),
        ("def postprocess_query(q):\n    return __builtins__\n", r"^hooks\.py:2: name '__builtins__' not allowed"),
        ("def postprocess_query(q):\n    return '{0.__class__}'.format(q)\n",
         r"^hooks\.py:2: attribute '\.format' not allowed"),
        ("def postprocess_query(q):\n    return eval(q)\n", r"^hooks\.py:2: name 'eval' not allowed"),
        ("def postprocess_query(q):\n    return getattr(q, 'upper')()\n", r"name 'getattr' not allowed"),
        ("def postprocess_query(q):\n    while True:\n        pass\n", r"^hooks\.py:2: while loops not allowed"),
        ("class A:\n    pass\n", r"^hooks\.py:1: module-level code may only be imports, function definitions"),
        ("def postprocess_query(q):\n    class A:\n        pass\n    return q\n", r"^hooks\.py:2: class definitions"),
        ("def postprocess_query(q):\n    return (x for x in q).gi_frame\n", r"attribute '\.gi_frame' not allowed"),
        ("def postprocess_query(q):\n    q.upper = 1\n    return q\n", r"^hooks\.py:2: assigning attribute"),
        ("def postprocess_querry(q):\n    return q\n", r"^hooks\.py:1: unknown hook 'postprocess_querry'"),
        ("def postprocess_query(q, extra):\n    return q\n", r"^hooks\.py:1: hook postprocess_query must take exactly 1"),
        ("def postprocess_query(q):\n    return prnt(q)\n", r"^hooks\.py:2: unknown name 'prnt'"),
        ("def postprocess_query(q):\n    return q +\n", r"^hooks\.py:2: syntax error"),
        ("import re\nPATTERN = re.compile('(')\n", r"^hooks\.py:2: failed to load: (re\.)?error"),
    ],
)
def test_hook_restrictions(source: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_with_hooks(source)
    with pytest.raises(SpecError, match=message.replace("^hooks", "^v7/hooks")):
        validate_spec_files(with_file("hooks.py", source), origin="v7")


def test_allowed_hook_works() -> None:
    source = (
        '"""Fold accents and upper-case keywords."""\n'
        "import unicodedata\n"
        "from re import sub\n"
        "import math, json, string\n"
        "_WORDS = ['select', 'where']\n"
        "\n"
        "def _fold(text):\n"
        "    return ''.join(c for c in unicodedata.normalize('NFKD', text) if not unicodedata.combining(c))\n"
        "\n"
        "def postprocess_query(sparql):\n"
        "    for word in _WORDS:\n"
        "        sparql = sub(rf'\\b{word}\\b', word.upper(), sparql)\n"
        "    return _fold(sparql)\n"
        "\n"
        "def format_tool_result(tool_name, result):\n"
        "    return f'{tool_name}: ' + json.dumps({'n': len(result), 'log': round(math.log10(100))})\n"
    )
    spec = spec_with_hooks(source)
    assert spec.hook("postprocess_query")("select ?x where { ?x ?p 'Zürich' }") == "SELECT ?x WHERE { ?x ?p 'Zurich' }"
    assert spec.hook("format_tool_result")("ontology", [1, 2]) == 'ontology: {"n": 2, "log": 2}'
    assert spec_with_hooks("def postprocess_query(q):\n    return q\n").hook("format_tool_result") is None
    assert AgentSpec.from_files(with_file("hooks.py", None)).hook("postprocess_query") is None


def test_raising_hook_becomes_hook_error() -> None:
    source = (
        "def _check(q):\n"
        "    if not q:\n"
        "        raise ValueError('empty query')\n"
        "    return q\n"
        "\n"
        "def postprocess_query(q):\n"
        "    return _check(q)\n"
        "\n"
        "def format_tool_result(tool_name, result):\n"
        "    return len(result)\n"
    )
    spec = spec_with_hooks(source)
    assert spec.hook("postprocess_query")("ASK {}") == "ASK {}"
    with pytest.raises(HookError, match=r"^hooks\.py:3: postprocess_query raised ValueError: empty query$"):
        spec.hook("postprocess_query")("")
    with pytest.raises(HookError, match=r"^hooks\.py: format_tool_result returned int, expected str$"):
        spec.hook("format_tool_result")("ontology", [])


def test_runtime_escapes_are_closed() -> None:
    # Module proxies expose no submodules (json.codecs.open would reach the file system).
    spec = spec_with_hooks("import json\ndef postprocess_query(q):\n    return json.codecs.open(q).read()\n")
    with pytest.raises(HookError, match="AttributeError"):
        spec.hook("postprocess_query")("/etc/hostname")
    spec = spec_with_hooks("import string\ndef postprocess_query(q):\n    return string.Formatter()\n")
    with pytest.raises(HookError, match="AttributeError"):
        spec.hook("postprocess_query")("x")
    spec = spec_with_hooks("def postprocess_query(q):\n    return postprocess_query(q)\n")
    with pytest.raises(HookError, match=r"^hooks\.py:1: hook postprocess_query exceeded the call depth limit"):
        spec.hook("postprocess_query")("x")


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("_X = sum(range(10**12))\n", 1),
        ("_X = 'x' * 10**12\n", 1),
        ("import re\n_N = 3\n_P = re.compile('a' * 10**9)\n", 3),
        ("import re\n_S = 'a+'\n_P = re.compile(_S)\n", 3),
        ("import re\n_P = re.compile('a', flags=len('x' * 10**9))\n", 2),
        ("_X = [0]\n_X[len('x' * 10**9)] = 1\n", 2),
        ("_X = [n for n in range(10**12)]\n", 1),
        ("_F = lambda q: q\n", 1),
        ("for _ in range(10**12):\n    pass\n", 1),
        ("if True:\n    _X = 1\n", 1),
        ("import json\njson.dumps(1)\n", 2),
        ("_X: sum(range(10**12)) = 1\n", 1),
        ("def postprocess_query(q, _n=sum(range(10**12))):\n    return q\n", 1),
        ("def postprocess_query(q: sum(range(10**12))):\n    return q\n", 1),
        ('"""Doc."""\n\ndef postprocess_query(q) -> len("x" * 10**9):\n    return q\n', 3),
    ],
)
def test_module_level_code_is_literal_only(source: str, line: int) -> None:
    with pytest.raises(SpecError) as info:
        validate_spec_files(with_file("hooks.py", source), origin="v5")
    assert str(info.value).startswith(f"v5/hooks.py:{line}: module-level code may only be imports, function "
                                      "definitions, docstrings and assignments of literals or re.compile(")
    assert info.value.line == line


def test_module_level_literals_and_compiled_patterns_load() -> None:
    source = (
        '"""Docstring."""\n'
        "import re\n"
        "import re as regex\n"
        "_LIMIT = -3\n"
        "_A, _B = 'a', b'b'\n"
        "_TABLE: dict = {'x': (1, 2.5, None), 'y': [True, {'z'}]}\n"
        "_P = re.compile(r'^\\s*(select|ask)\\b', re.IGNORECASE | re.DOTALL)\n"
        "_Q = regex.compile('x+', flags=regex.M)\n"
        "_R = re.compile(b'y', 2)\n"
        '"""A later string constant."""\n'
        "\n"
        "def postprocess_query(sparql: str, /) -> str | None:\n"
        "    return _P.sub(lambda m: m.group(1).upper(), sparql) + str(_LIMIT + _TABLE['x'][0])\n"
        "\n"
        "def format_tool_result(tool_name: str, result: list[dict] = None) -> str:\n"
        "    return tool_name + _A\n"
    )
    spec = spec_with_hooks(source)
    assert spec.hook("postprocess_query")("  select ?x {}") == "SELECT ?x {}-2"
    assert spec.hook("format_tool_result")("ontology", []) == "ontologya"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("    try:\n        return q\n    except:\n        return q\n", r"^hooks\.py:5: bare 'except:' not allowed"),
        ("    try:\n        return q\n    finally:\n        pass\n", r"^hooks\.py:3: 'try \.\.\. finally' not allowed"),
    ],
)
def test_hooks_cannot_outlive_the_limits_statically(body: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_with_hooks("import re\ndef postprocess_query(q):\n" + body)


def test_endless_loop_stops_at_the_line_budget() -> None:
    # The review's case, with the shipped limits: it must end in well under the wall-clock limit.
    spec = spec_with_hooks("def postprocess_query(q):\n    for _ in (0 for _a in range(10**6) for _b in range(10**6)):\n        pass\n    return q\n")
    start = time.perf_counter()
    with pytest.raises(HookError, match=r"^hooks\.py:[23]: hook postprocess_query exceeded the line budget "
                                        r"\(2,000,000 Python lines per call\)$"):
        spec.hook("postprocess_query")("x")
    assert time.perf_counter() - start < spec_module.HOOK_TIMEOUT_S


def test_line_budget_counts_lines_of_every_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_module, "HOOK_LINE_BUDGET", 5_000)
    source = (
        "def _twice(c):\n"
        "    return c + c\n"
        "\n"
        "def postprocess_query(q):\n"
        "    n = int(q)\n"
        "    return str(len(''.join(map(lambda c: _twice(c), 'x' * n))))\n"
    )
    hook = spec_with_hooks(source).hook("postprocess_query")
    assert hook("1000") == "2000"  # about 2,000 lines: under the budget
    with pytest.raises(HookError, match=r"exceeded the line budget \(5,000 Python lines per call\)"):
        hook("3000")  # single-line lambdas and helpers count too
    # One-line comprehensions count every iteration (a backward jump is a line event).
    with pytest.raises(HookError, match="line budget"):
        spec_with_hooks("def postprocess_query(q):\n    return str(sum(1 for _ in (0 for _a in range(10**6) for _b in range(10**6))))\n") \
            .hook("postprocess_query")("x")


def test_hooks_cannot_swallow_the_limits() -> None:
    source = (
        "def _deep(n):\n"
        "    try:\n"
        "        return _deep(n + 1)\n"
        "    except Exception:\n"
        "        return _deep(n + 1)\n"
        "\n"
        "def _spin():\n"
        "    for _ in (0 for _a in range(10**6) for _b in range(10**6)):\n"
        "        pass\n"
        "\n"
        "def postprocess_query(q):\n"
        "    try:\n"
        "        _deep(0) if q == 'deep' else _spin()\n"
        "    except Exception:\n"
        "        pass\n"
        "    for _ in (0 for _a in range(10**6) for _b in range(10**6)):\n"
        "        pass\n"
        "    return 'swallowed'\n"
    )
    hook = spec_with_hooks(source).hook("postprocess_query")
    start = time.perf_counter()
    with pytest.raises(HookError, match=r"^hooks\.py:1: hook postprocess_query exceeded the call depth limit "
                                        r"\(200 nested calls\)$"):
        hook("deep")  # stopped before a RecursionError could switch the trace function off
    with pytest.raises(HookError, match=r"^hooks\.py:[89]: hook postprocess_query exceeded the line budget"):
        hook("spin")
    assert time.perf_counter() - start < 2 * spec_module.HOOK_TIMEOUT_S


def _hook_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spec-hook"]


def test_wall_clock_limit_abandons_slow_call_and_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_module, "HOOK_TIMEOUT_S", 0.3)
    # Few lines (well under the budget), each a few milliseconds of C work: only the clock stops it.
    source = ("def postprocess_query(q):\n"
              "    for _ in range(10**6):\n"
              "        _x = sorted(range(100000), reverse=True)\n"
              "    return q\n")
    spec = spec_with_hooks(source)
    start = time.perf_counter()
    with pytest.raises(HookError, match=r"^hooks\.py: hook postprocess_query exceeded 0\.3 s$"):
        spec.hook("postprocess_query")("x")
    assert time.perf_counter() - start < 1.5
    # The abandoned worker (in no pool) stops at its next line instead of running on.
    deadline = time.perf_counter() + 2
    while len(_hook_threads()) > len(spec_module._idle_threads) and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert len(_hook_threads()) == len(spec_module._idle_threads)
    # Later calls get a fresh worker and work normally.
    fast = spec_with_hooks("def postprocess_query(q):\n    return q.upper()\n").hook("postprocess_query")
    assert fast("ask {}") == "ASK {}"


def test_limited_calls_are_cheap_and_thread_safe(seed: AgentSpec) -> None:
    post = seed.hook("postprocess_query")
    fenced = "Here:\n```sparql\nSELECT ?x WHERE { ?x ?p ?o }\n```\n"
    post(fenced)
    start = time.perf_counter()
    for _ in range(300):
        assert post(fenced) == "SELECT ?x WHERE { ?x ?p ?o }"
    # Generous bound (measured ~70 us per call): the guard must not cost milliseconds per call.
    assert (time.perf_counter() - start) / 300 < 0.002
    results: list[str] = []

    def worker(i: int) -> None:
        results.extend(post(f"```sparql\nASK {{ <x:{i}> ?p ?o }}\n```") for _ in range(20))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(f"ASK {{ <x:{i}> ?p ?o }}" for i in range(8) for _ in range(20))
    assert len(_hook_threads()) <= 8  # idle workers are reused, not piled up


def test_runaway_hook_ends_one_question_and_the_run_goes_on(tmp_path: Path) -> None:
    from worker_agent.agent import WorkerAgent
    from worker_agent.kg import OxigraphKG
    from worker_agent.strategies import StrategyResult

    class Fixed:
        def answer(self, question: str, trace: object, *, lang: str | None = None,
                   deadline: float | None = None) -> StrategyResult:
            return StrategyResult(question, "answered")

    ttl = tmp_path / "kg.ttl"
    ttl.write_text("<http://example.org/a> <http://example.org/p> <http://example.org/b> .\n")
    source = ("def postprocess_query(q):\n"
              "    if 'loop' in q:\n"
              "        for _ in (0 for _a in range(10**6) for _b in range(10**6)):\n"
              "            pass\n"
              "    return q\n")
    agent = WorkerAgent(spec_with_hooks(source), OxigraphKG([ttl]), [])
    agent.strategy = Fixed()
    looping = agent.ask("ASK { ?s ?p ?o } # loop")
    assert looping.status == "tool_error" and "exceeded the line budget" in looping.detail
    fine = agent.ask("ASK { ?s ?p ?o }")
    assert fine.status == "answered" and fine.query is not None and fine.query.startswith("ASK")


# ------------------------------------------------------------------ features and round trip


def test_features(seed: AgentSpec) -> None:
    features = seed.features()
    for rule_id, enabled in SEED_RULES.items():
        assert features[f"rule:{rule_id}"] is enabled
    assert features["strategy"] == "offline"
    assert features["few_shot"] == 1 and features["max_iterations"] == 8
    assert features["retrieval"] == "tfidf" and features["answer_timeout_s"] == 60
    assert features["tools.surface_forms.k"] == 10 and features["tools.surface_forms.fuzzy_threshold"] == 85
    assert features["tools.surface_forms.label_predicates"] == ""
    assert features["tools.ontology.group_namespaces"] is False and features["tools.test_sparql.preview_rows"] == 10
    assert features["model.provider"] == "openai" and features["model.name"] == "gpt-4o-mini"
    assert {"prompt:system", "prompt:question", "prompt:repair", "hooks"} <= features.keys()
    assert "name" not in features
    assert all(not isinstance(v, (list, dict)) for v in features.values())

    agent = seed.files()["agent.yaml"].replace("    k: 10", "    k: 25").replace(
        "  name: gpt-4o-mini", "  name: gpt-4o-mini\n  api_key: ${OPENAI_API_KEY}")
    changed = AgentSpec.from_files({**with_file("agent.yaml", agent),
                                    "prompts/repair.j2": seed.prompts["repair"] + "\nBe brief.\n"})
    diff = {k for k in features.keys() | changed.features().keys() if features.get(k) != changed.features().get(k)}
    assert diff == {"tools.surface_forms.k", "prompt:repair"}  # secrets never become features
    assert AgentSpec.from_files(with_file("hooks.py", None)).features()["hooks"] is None


def test_from_files_round_trip(seed: AgentSpec, tmp_path: Path) -> None:
    files = seed.files()
    copy = AgentSpec.from_files(files, origin="v1@abc1234")
    assert copy.files() == files and copy.root is None
    assert copy.features() == seed.features()
    assert copy.config == seed.config and copy.rules == seed.rules and copy.prompts == seed.prompts
    assert copy.render("system", tools=TOOLS) == seed.render("system", tools=TOOLS)
    # Written back to disk, the files load to the same spec (comments and formatting preserved).
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert AgentSpec.load(tmp_path).files() == files
    files["prompts/system.j2"] = "{{ tools }"
    with pytest.raises(SpecError, match=r"^v1@abc1234/prompts/system\.j2:1: template syntax error"):
        AgentSpec.from_files(files, origin="v1@abc1234")


@pytest.mark.parametrize("body", [
    "    return str(sum(range(10**12)))",
    "    return str(max(map(abs, range(10**12))))",
    "    import re\n    return str(re.match('(a+)+$', 'a' * 40 + 'b'))",
])
def test_uninterruptible_c_level_work_is_refused_fast(body: str) -> None:
    """Work done inside one C call can't be stopped by the line budget or the time limit (it never
    releases the GIL), so hooks get a bounded range and regexes without nested quantifiers."""
    spec = spec_with_hooks(f"def postprocess_query(sparql):\n{body}\n")
    started = time.perf_counter()
    with pytest.raises(HookError):
        spec.hook("postprocess_query")("SELECT * WHERE { ?s ?p ?o }")
    assert time.perf_counter() - started < 1.0
