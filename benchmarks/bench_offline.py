"""Benchmark of the offline strategy (no LLM).

Prints official-equivalent set_F (``researcher.metrics``) of the offline strategy, for the seed
spec v1 as shipped and for the same spec with every rule enabled and ``few_shot: 5``:

* on the bundled demo dataset (its ``splits.yml``; training split as examples);
* on CK25 (``researcher.datasets.make_splits(seed=0)``; training split as examples), when
  ``/work/shared/datasets/ck25`` (or ``--ck25``) exists;

each on the validation and the test split (``--split`` picks), with the time per question.
``--show`` prints every question with its outcome.

    python benchmarks/bench_offline.py [--split validation test] [--show] [--ck25 DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from researcher import metrics
from researcher.datasets import (
    Question,
    QuestionSet,
    Splits,
    load_gold_answers,
    load_questions,
    load_splits,
    make_splits,
)
from researcher.propose import set_rule_enabled, set_yaml_value
from worker_agent.agent import WorkerAgent
from worker_agent.kg import KGError, KnowledgeGraph, open_kg
from worker_agent.spec import AgentSpec, seed_spec_path
from worker_agent.strategies import Example

DEMO = ROOT / "worker_agent" / "data" / "demo"
CK25 = ROOT.parent / "shared" / "datasets" / "ck25"


@dataclass
class Row:
    uid: str
    question: str
    status: str
    set_f: float | None
    time_s: float
    query: str | None
    detail: str | None


def examples_of(questions: Sequence[Question]) -> list[Example]:
    return [Example(q.uid, q.text, q.sparql, q.lang, tuple(q.features)) for q in questions if q.sparql]


def spec_variant(all_rules: bool = False, **config: Any) -> AgentSpec:
    """The seed spec, optionally with every rule on and some config fields changed
    (``tools__surface_forms__k=3`` for nested fields)."""
    files = AgentSpec.load(seed_spec_path()).files()
    if all_rules:
        for rule in yaml.safe_load(files["rules.yaml"]):
            files["rules.yaml"] = set_rule_enabled(files["rules.yaml"], rule["id"], True)
    for dotted, value in config.items():
        files["agent.yaml"] = set_yaml_value(files["agent.yaml"], dotted.replace("__", "."), value)
    return AgentSpec.from_files(files)


def gold_answers(kg: KnowledgeGraph, questions: Sequence[Question],
                 official: dict[str, dict[str, int]] | None) -> dict[str, dict[str, int]]:
    out = {}
    for q in questions:
        if official is not None and q.uid in official:
            out[q.uid] = official[q.uid]
        elif q.sparql:
            out[q.uid] = metrics.answer_set(kg.query(q.sparql))
    return out


def predicted(kg: KnowledgeGraph, query: str | None) -> dict[str, int]:
    if not query:
        return {}
    try:
        return metrics.answer_set(kg.query(query, timeout=30))
    except KGError:
        return {}


def run(spec: AgentSpec, kg: KnowledgeGraph, train: Sequence[Question], evaluate: Sequence[Question],
        gold: dict[str, dict[str, int]]) -> list[Row]:
    agent = WorkerAgent(spec, kg, examples_of(train))
    rows = []
    for q in evaluate:
        answer = agent.ask(q.text, uid=q.uid, lang=q.lang)
        scores = metrics.score_question(predicted(kg, answer.query), gold[q.uid], order_matters=False)
        rows.append(Row(q.uid, q.text, answer.status, scores.get("set_F"), answer.time_s, answer.query,
                        answer.detail))
    return rows


def summary(rows: Sequence[Row]) -> tuple[float, float]:
    scored = [r.set_f for r in rows if r.set_f is not None]
    return (statistics.fmean(scored) if scored else float("nan"),
            statistics.fmean(r.time_s for r in rows) if rows else 0.0)


def report(name: str, rows: Sequence[Row], show: bool) -> None:
    set_f, per_q = summary(rows)
    scored = sum(1 for r in rows if r.set_f is not None)
    print(f"{name:<42} set_F {set_f:.3f}  ({scored} scored of {len(rows)})  {per_q * 1000:.0f} ms/question")
    if show:
        for r in rows:
            shown = "  -  " if r.set_f is None else f"{r.set_f:.2f}"
            print(f"   {shown}  {r.uid:<12} {r.status:<10} {r.question}")


def dataset(questions: QuestionSet, splits: Splits, split: str) -> tuple[list[Question], list[Question]]:
    return splits.select(questions, "train"), splits.select(questions, split)  # type: ignore[arg-type]


def bench(name: str, load: Callable[[], tuple[KnowledgeGraph, QuestionSet, Splits, dict | None]],
          specs: Sequence[tuple[str, AgentSpec]], split: str, show: bool) -> None:
    started = time.perf_counter()
    kg, questions, splits, official = load()
    train, evaluate = dataset(questions, splits, split)
    gold = gold_answers(kg, evaluate, official)
    print(f"{name}: {len(train)} training examples, {len(evaluate)} {split} questions "
          f"(KG loaded in {time.perf_counter() - started:.1f} s)")
    for label, spec in specs:
        report(f"  {label}", run(spec, kg, train, evaluate, gold), show)


def load_demo() -> tuple[KnowledgeGraph, QuestionSet, Splits, None]:
    return open_kg([DEMO / "kg.ttl"]), load_questions(DEMO / "questions.yml"), load_splits(DEMO / "splits.yml"), None


def load_ck25(root: Path) -> Callable[[], tuple[KnowledgeGraph, QuestionSet, Splits, dict]]:
    def load() -> tuple[KnowledgeGraph, QuestionSet, Splits, dict]:
        questions = load_questions(root / "questions.yml")
        kg = open_kg([root / "prod-vocab.ttl", root / "prod-inst.ttl"])
        return kg, questions, make_splits(questions, seed=0), load_gold_answers(root / "true_result_set.json")
    return load


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", nargs="+", default=["validation", "test"], choices=("validation", "test"))
    parser.add_argument("--show", action="store_true", help="print every question")
    parser.add_argument("--ck25", type=Path, default=CK25, help="CK25 directory")
    args = parser.parse_args(argv)
    seed = AgentSpec.load(seed_spec_path())
    best = spec_variant(all_rules=True, few_shot=5)
    specs = [("v1 (seed, rules as shipped)", seed), ("all rules on, few_shot 5", best)]
    for split in args.split:
        bench("demo", load_demo, specs, split, args.show)
        if (args.ck25 / "questions.yml").exists():
            bench("ck25", load_ck25(args.ck25), specs, split, args.show)
        else:
            print(f"ck25: skipped ({args.ck25} not found)")


if __name__ == "__main__":
    main()
