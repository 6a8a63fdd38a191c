"""Proposers: read a failure analysis and return a diff to the agent spec, with a rationale.

Two proposers share one interface (``Proposer.propose``):

* ``OfflineSearchProposer`` (the embedded default, no LLM): chooses among concrete spec edits
  (toggle a rule, change a knob, switch a tool option), scoring each by how much of the observed
  failure (per family shortfall and per outcome category) it targets, and never repeating an edit
  already tried from the same parent.
* ``LLMProposer``: renders ``prompts/propose.j2`` with the spec files, the analysis and the
  ledger history, and parses the model's summary, feature label, rationale and unified diff.
"""

from __future__ import annotations

import difflib
import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from jinja2 import Environment, FileSystemLoader, StrictUndefined

PROMPTS = Path(__file__).resolve().parent / "prompts"


class ProposalError(Exception):
    """A proposer could not produce a usable proposal (one line)."""


class SearchExhausted(ProposalError):
    """Nothing is left to propose from this parent: the loop stops instead of retrying."""


@dataclass
class Proposal:
    summary: str
    rationale: str
    feature_label: str
    diff: str
    proposer: str
    edit_key: str | None = None  # canonical id of an offline edit (repeat detection)
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0})


class Proposer(Protocol):
    name: str

    def propose(self, files: Mapping[str, str], analysis: Mapping[str, Any],
                tried: Sequence[str]) -> Proposal: ...


def unified_diff(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """A git-style unified diff between two spec file maps."""
    chunks: list[str] = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        lines = difflib.unified_diff(
            (a or "").splitlines(keepends=True), (b or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if a is not None else "/dev/null",
            tofile=f"b/{path}" if b is not None else "/dev/null",
        )
        text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
        chunks.append(f"diff --git a/{path} b/{path}\n{text}")
    return "".join(chunks)


# --------------------------------------------------------------------------- YAML line edits


def set_yaml_value(text: str, dotted: str, value: Any) -> str:
    """Change one scalar in a YAML document in place, keeping comments and layout.

    ``dotted`` is a key path (``tools.surface_forms.k``); the key must already exist. The result
    is re-parsed to check that exactly that value changed.
    """
    keys = dotted.split(".")
    lines = text.splitlines(keepends=True)
    start, end, indent = 0, len(lines), -1
    for depth, key in enumerate(keys):
        pattern = re.compile(rf"^(\s*){re.escape(key)}\s*:(.*)$")
        for i in range(start, end):
            m = pattern.match(lines[i].rstrip("\n"))
            if m and len(m.group(1)) > indent:
                indent = len(m.group(1))
                if depth == len(keys) - 1:
                    comment = ""
                    rest = m.group(2)
                    if " #" in rest:
                        comment = "  #" + rest.split(" #", 1)[1]
                    rendered = json.dumps(value) if isinstance(value, str) else yaml.safe_dump(value).strip().removesuffix("...").strip()
                    lines[i] = f"{m.group(1)}{key}: {rendered}{comment}\n"
                    new = "".join(lines)
                    check = yaml.safe_load(new)
                    for k in keys:
                        check = check[k]
                    if check != value:
                        raise ProposalError(f"could not set {dotted} to {value!r}")
                    return new
                # the block of this key: following lines indented deeper
                j = i + 1
                while j < end and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
                                   or lines[j].lstrip().startswith("#")):
                    j += 1
                start, end = i + 1, j
                break
        else:
            raise ProposalError(f"key {dotted} not found")
    raise ProposalError(f"key {dotted} not found")


def set_rule_enabled(text: str, rule_id: str, enabled: bool) -> str:
    """Flip the ``enabled`` flag of one rule in rules.yaml, keeping the rest of the file."""
    lines = text.splitlines(keepends=True)
    id_re = re.compile(rf"^(\s*)(-\s*)?id\s*:\s*['\"]?{re.escape(rule_id)}['\"]?\s*(#.*)?$")
    for i, line in enumerate(lines):
        if id_re.match(line.rstrip("\n")):
            for j in range(i + 1, len(lines)):
                if re.match(r"^\s*-\s", lines[j]) or re.match(r"^\s*-?\s*id\s*:", lines[j]):
                    break
                m = re.match(r"^(\s*)enabled\s*:\s*\S+(.*)$", lines[j].rstrip("\n"))
                if m:
                    lines[j] = f"{m.group(1)}enabled: {'true' if enabled else 'false'}{m.group(2)}\n"
                    return "".join(lines)
            break
    raise ProposalError(f"rule {rule_id!r} has no enabled flag in rules.yaml")


# --------------------------------------------------------------------------- offline search

#: What each edit is meant to fix: weights over failure signals (outcomes and family shortfalls).
RULE_TARGETS: dict[str, dict[str, float]] = {
    "unicode_fallback": {"nodes": 1.0, "empty_result": 0.6, "wrong_answer": 0.3},
    "surname_linking": {"nodes": 1.0, "empty_result": 0.6, "wrong_answer": 0.4},
    "verify_nonempty": {"empty_result": 1.0, "execution_error": 0.5, "syntax_error": 0.3},
    "expected_shape": {"outer_operators": 1.0, "wrong_answer": 0.5},
    "ask_for_yes_no": {"outer_operators": 0.8, "wrong_answer": 0.3},
    "triple_direction": {"empty_result": 0.8, "predicates": 0.5},
    "answer_type_constraint": {"partially_correct": 1.0, "nodes": 0.2},
    "select_distinct": {"outer_operators": 0.3},
    "project_iris": {"partially_correct": 0.6, "wrong_answer": 0.3},
    "ontology_namespace": {"predicates": 0.6},
    "alias_aggregates": {"syntax_error": 0.5, "execution_error": 0.3},
    "add_prefixes": {"syntax_error": 0.8},
}
KNOB_CHOICES: dict[str, tuple[Any, ...]] = {
    "few_shot": (1, 2, 3, 5, 8),
    "retrieval": ("tfidf", "fuzzy"),
    "tools.surface_forms.fuzzy_threshold": (70, 75, 80, 85, 90),
    "tools.surface_forms.k": (5, 10, 20),
    "tools.ontology.group_namespaces": (False, True),
}
KNOB_TARGETS: dict[str, dict[str, float]] = {
    "few_shot": {"empty_result": 0.9, "wrong_answer": 0.7, "outer_operators": 0.5, "predicates": 0.4},
    "retrieval": {"outer_operators": 0.5, "predicates": 0.4, "wrong_answer": 0.3},
    "tools.surface_forms.fuzzy_threshold": {"nodes": 0.7, "empty_result": 0.3},
    "tools.surface_forms.k": {"nodes": 0.4},
    "tools.ontology.group_namespaces": {"predicates": 0.4},
}


@dataclass
class Edit:
    key: str  # canonical, e.g. "rule:verify_nonempty=on" or "few_shot=3"
    label: str
    targets: dict[str, float]
    apply: Any  # callable(files) -> files

    def score(self, signals: Mapping[str, float]) -> float:
        return sum(w * signals.get(name, 0.0) for name, w in self.targets.items())


def failure_signals(analysis: Mapping[str, Any]) -> dict[str, float]:
    """Normalized failure signals: outcome shares and family shortfalls, each in [0, 1]."""
    outcomes = analysis.get("outcomes") or {}
    total = sum(v for k, v in outcomes.items() if k != "gold_unavailable") or 1
    signals = {k: v / total for k, v in outcomes.items() if k not in ("correct", "gold_unavailable")}
    for fam, gap in (analysis.get("family_shortfall") or {}).items():
        signals[fam] = float(gap)
    return signals


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for k in dotted.split("."):
        node = node[k]
    return node


def candidate_edits(files: Mapping[str, str]) -> list[Edit]:
    agent = yaml.safe_load(files["agent.yaml"]) or {}
    rules = yaml.safe_load(files.get("rules.yaml", "")) or []
    rule_list = rules.get("rules", rules) if isinstance(rules, dict) else rules
    edits: list[Edit] = []
    for rule in rule_list:
        rid, enabled = rule["id"], bool(rule.get("enabled", True))
        new = not enabled

        def flip(fs: Mapping[str, str], rid: str = rid, new: bool = new) -> dict[str, str]:
            out = dict(fs)
            out["rules.yaml"] = set_rule_enabled(fs["rules.yaml"], rid, new)
            return out

        edits.append(Edit(f"rule:{rid}={'on' if new else 'off'}",
                          f"{'enable' if new else 'disable'} rule {rid}",
                          RULE_TARGETS.get(rid, {"wrong_answer": 0.1}) if new else
                          {k: 0.25 * v for k, v in RULE_TARGETS.get(rid, {"wrong_answer": 0.1}).items()},
                          flip))
    for dotted, choices in KNOB_CHOICES.items():
        try:
            current = _get(agent, dotted)
        except (KeyError, TypeError):
            continue
        for value in choices:
            if value == current:
                continue

            def change(fs: Mapping[str, str], dotted: str = dotted, value: Any = value) -> dict[str, str]:
                out = dict(fs)
                out["agent.yaml"] = set_yaml_value(fs["agent.yaml"], dotted, value)
                return out

            # prefer small steps: the farther from the current value, the lower the prior
            distance = abs(choices.index(value) - choices.index(current)) if current in choices else 1
            edits.append(Edit(f"{dotted}={value}", f"set {dotted} to {value}",
                              {k: v / distance for k, v in KNOB_TARGETS[dotted].items()}, change))
    return edits


class OfflineSearchProposer:
    """Guided search over concrete spec edits; deterministic for a given seed."""

    name = "offline-search"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, files: Mapping[str, str], analysis: Mapping[str, Any],
                tried: Sequence[str]) -> Proposal:
        signals = failure_signals(analysis)
        tried_set = set(tried)
        # An edit rejected from another parent may still help here, but is worth less: try it later.
        rejected_elsewhere = {h.get("feature") for h in analysis.get("history") or []
                              if h.get("status") in ("rejected", "invalid")}
        rng = random.Random(f"{self.seed}:{analysis.get('version')}:{len(tried_set)}")
        ranked = []
        for edit in candidate_edits(files):
            if edit.key in tried_set:
                continue
            penalty = 0.3 if edit.key in rejected_elsewhere else 1.0
            ranked.append((edit.score(signals) * penalty + rng.random() * 1e-3, edit))
        if not ranked:
            raise SearchExhausted(f"offline search exhausted: every edit from {analysis.get('version')} was tried")
        ranked.sort(key=lambda x: -x[0])
        score, edit = ranked[0]
        new_files = edit.apply(files)
        top = sorted(signals.items(), key=lambda kv: -kv[1])[:3]
        why = ", ".join(f"{k}={v:.2f}" for k, v in top) or "no failures observed"
        rationale = (f"Failure signals of {analysis.get('version')}: {why}. Edit '{edit.label}' targets "
                     f"{', '.join(sorted(edit.targets))} (priority {score:.3f}); "
                     f"{len(tried_set)} edits from this parent were tried before.")
        return Proposal(summary=edit.label, rationale=rationale, feature_label=edit.key,
                        diff=unified_diff(files, new_files), proposer=self.name, edit_key=edit.key)


# --------------------------------------------------------------------------- LLM researcher


_DIFF_RE = re.compile(r"```(?:diff|patch)?\s*\n(.*?)```", re.S)


def parse_llm_proposal(text: str) -> tuple[str, str, str, str]:
    """(summary, feature_label, rationale, diff) from the researcher model's reply."""

    def field_value(name: str) -> str | None:
        m = re.search(rf"^\s*{name}\s*:\s*(.+)$", text, re.M | re.I)
        return m.group(1).strip() if m else None

    summary, feature = field_value("SUMMARY"), field_value("FEATURE")
    rationale_m = re.search(r"^\s*RATIONALE\s*:\s*(.+?)(?=^\s*(?:SUMMARY|FEATURE|DIFF)\s*:|```|\Z)", text, re.M | re.S | re.I)
    diff_m = _DIFF_RE.search(text)
    missing = [n for n, v in (("SUMMARY", summary), ("FEATURE", feature), ("diff block", diff_m)) if not v]
    if missing:
        raise ProposalError(f"researcher model reply lacks {', '.join(missing)}")
    diff = diff_m.group(1)  # type: ignore[union-attr]
    if "@@" not in diff:
        raise ProposalError("researcher model reply has no unified diff hunk (@@)")
    return summary, feature, (rationale_m.group(1).strip() if rationale_m else ""), diff  # type: ignore[return-value]


class LLMProposer:
    """An LLM researcher: any provider from worker_agent.llm; its own model and budget."""

    name = "llm-researcher"

    def __init__(self, model: Any, *, max_spec_chars: int = 20_000) -> None:
        self.model = model
        self.max_spec_chars = max_spec_chars
        env = Environment(loader=FileSystemLoader(PROMPTS), undefined=StrictUndefined,
                          keep_trailing_newline=True, autoescape=False)
        self.template = env.get_template("propose.j2")

    def propose(self, files: Mapping[str, str], analysis: Mapping[str, Any],
                tried: Sequence[str]) -> Proposal:
        from worker_agent.llm import Message

        prompt = self.template.render(
            files={k: v[: self.max_spec_chars] for k, v in sorted(files.items())},
            analysis=analysis,
            analysis_json=json.dumps({k: v for k, v in analysis.items() if k != "failures"}, indent=1, default=str),
            tried=list(tried),
            invalid=list(analysis.get("invalid_attempts") or []),
        )
        completion = self.model.complete([Message(role="user", content=prompt)])
        try:
            summary, feature, rationale, diff = parse_llm_proposal(completion.message.content or "")
        except ProposalError as exc:  # the reply was paid for: the loop records it as invalid
            exc.cost_usd = completion.cost_usd  # type: ignore[attr-defined]
            raise
        return Proposal(summary=summary, rationale=rationale, feature_label=feature, diff=diff,
                        proposer=f"{self.name}:{self.model.name}", edit_key=feature,
                        cost_usd=completion.cost_usd,
                        tokens={"input": completion.input_tokens, "output": completion.output_tokens})


def make_proposer(kind: str, *, seed: int = 0, model_config: Mapping[str, Any] | None = None,
                  cache: Any = None) -> Proposer:
    if kind == "offline":
        return OfflineSearchProposer(seed)
    if kind == "llm":
        from worker_agent.llm import ModelConfig, make_model

        return LLMProposer(make_model(ModelConfig.model_validate(dict(model_config or {})), cache=cache))
    raise ProposalError(f"unknown proposer {kind!r} (expected offline or llm)")
