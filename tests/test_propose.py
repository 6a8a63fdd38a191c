"""Proposers: offline search over spec edits, the LLM researcher's reply parsing, YAML edits."""

from __future__ import annotations

import pytest
import yaml

from researcher.propose import (
    LLMProposer,
    OfflineSearchProposer,
    ProposalError,
    candidate_edits,
    parse_llm_proposal,
    set_rule_enabled,
    set_yaml_value,
    unified_diff,
)
from researcher.versions import VersionStore
from worker_agent.llm import ScriptedModel
from worker_agent.spec import AgentSpec, seed_spec_path, validate_spec_files


@pytest.fixture()
def seed_files() -> dict[str, str]:
    return AgentSpec.load(seed_spec_path()).files()


def analysis(version: str = "v1", **outcomes: int) -> dict:
    return {"version": version, "outcomes": outcomes or {"correct": 5, "empty_result": 5},
            "family_shortfall": {"nodes": 0.5, "predicates": 0.1, "inner_operators": 0.0, "outer_operators": 0.1}}


def test_yaml_edits_keep_comments_and_change_one_value(seed_files):
    text = seed_files["agent.yaml"]
    new = set_yaml_value(text, "tools.surface_forms.fuzzy_threshold", 75)
    assert yaml.safe_load(new)["tools"]["surface_forms"]["fuzzy_threshold"] == 75
    assert "# rapidfuzz score" in new
    assert sum(a != b for a, b in zip(text.splitlines(), new.splitlines())) == 1
    assert yaml.safe_load(set_yaml_value(text, "few_shot", 3))["few_shot"] == 3
    assert yaml.safe_load(set_yaml_value(text, "retrieval", "fuzzy"))["retrieval"] == "fuzzy"
    with pytest.raises(ProposalError):
        set_yaml_value(text, "tools.nothing.k", 1)


def test_rule_toggle(seed_files):
    new = set_rule_enabled(seed_files["rules.yaml"], "verify_nonempty", True)
    rules = {r["id"]: r for r in yaml.safe_load(new)}
    assert rules["verify_nonempty"]["enabled"] is True
    assert rules["select_distinct"]["enabled"] is False  # neighbours untouched
    with pytest.raises(ProposalError):
        set_rule_enabled(seed_files["rules.yaml"], "no_such_rule", True)


def test_every_candidate_edit_yields_a_valid_spec(seed_files):
    edits = candidate_edits(seed_files)
    keys = [e.key for e in edits]
    assert len(keys) == len(set(keys)) and len(keys) > 15
    for edit in edits:
        files = edit.apply(seed_files)
        assert files != seed_files, edit.key
        validate_spec_files(files)


def test_offline_search_is_guided_and_never_repeats(seed_files, tmp_path):
    proposer = OfflineSearchProposer(seed=0)
    linking = proposer.propose(seed_files, {"version": "v1", "outcomes": {"correct": 2, "empty_result": 1},
                                            "family_shortfall": {"nodes": 0.9}}, [])
    assert linking.feature_label in ("rule:unicode_fallback=on", "rule:surname_linking=on")
    shape = proposer.propose(seed_files, {"version": "v1", "outcomes": {"correct": 2, "wrong_answer": 3},
                                          "family_shortfall": {"outer_operators": 0.9}}, [])
    assert shape.feature_label == "rule:expected_shape=on"
    tried: list[str] = []
    for _ in range(6):
        p = proposer.propose(seed_files, analysis(), tried)
        assert p.feature_label not in tried
        tried.append(p.feature_label)
    # the diff applies to the version it was made from and only touches spec files
    store = VersionStore.init(tmp_path / "versions", seed_files)
    files = store.apply_patch("v1", p.diff)
    validate_spec_files(files)
    assert files != seed_files


def test_offline_search_exhaustion(seed_files):
    keys = [e.key for e in candidate_edits(seed_files)]
    with pytest.raises(ProposalError, match="exhausted"):
        OfflineSearchProposer().propose(seed_files, analysis(), keys)


REPLY = """SUMMARY: enable verify_nonempty
FEATURE: rule:verify_nonempty=on
RATIONALE: Five validation questions return empty results; falling back to the next candidate
should fix most of them.
```diff
{diff}```
"""


def test_llm_proposer_with_scripted_model(seed_files, tmp_path):
    after = dict(seed_files)
    after["rules.yaml"] = set_rule_enabled(seed_files["rules.yaml"], "verify_nonempty", True)
    diff = unified_diff(seed_files, after)
    model = ScriptedModel([REPLY.format(diff=diff)])
    proposal = LLMProposer(model).propose(seed_files, {**analysis(), "failures": [
        {"uid": "demo:1-en", "question": "Who wrote X?", "outcome": "empty_result", "status": "answered",
         "set_F": 0.0, "predicted_query": "SELECT ...", "gold_query": "SELECT ...", "predicted_answers": [],
         "gold_answers": ["a"], "error": None, "trace": ["candidate: {}"]}], "broken": [], "fixed": [],
        "history": []}, ["few_shot=2"])
    assert proposal.feature_label == "rule:verify_nonempty=on"
    assert "empty results" in proposal.rationale
    store = VersionStore.init(tmp_path / "versions", seed_files)
    assert store.apply_patch("v1", proposal.diff)["rules.yaml"] == after["rules.yaml"]
    # the prompt carried the spec, the failures and what was tried
    assert len(model.requests) == 1
    prompt = model.requests[0].messages[0].content
    assert "Who wrote X?" in prompt and "few_shot=2" in prompt and "verify_nonempty" in prompt


@pytest.mark.parametrize("reply", ["", "I think you should enable a rule.",
                                   "SUMMARY: x\nFEATURE: y\n```diff\nno hunks here\n```"])
def test_garbage_from_the_researcher_model(reply):
    with pytest.raises(ProposalError):
        parse_llm_proposal(reply)
