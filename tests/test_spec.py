"""Tests for worker_agent/spec.py and the shipped seed spec (versions/v1)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from jinja2 import Environment, meta

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


def test_extra_prompt_can_be_included() -> None:
    files = {**seed_files(), "prompts/tips.j2": "Tip for {{ question }}.",
             "prompts/repair.j2": "{% include 'tips.j2' %} {{ sparql }} {{ problem }} {{ preview }}"}
    spec = AgentSpec.from_files(files)
    assert spec.render("repair", question="Q", sparql="S", problem="P", preview="") == "Tip for Q. S P "


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
        ("class A:\n    pass\n", r"^hooks\.py:1: top-level statements must be"),
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
    with pytest.raises(HookError, match="RecursionError"):
        spec.hook("postprocess_query")("x")


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
