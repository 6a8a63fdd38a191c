"""Benchmark of the offline strategy (no LLM).

Prints official-equivalent set_F and per-family component scores (``researcher.evaluate``, the
same evaluation as ``researcher eval``) of the offline strategy, for the seed
spec v1 as shipped and for the same spec with every rule enabled and ``few_shot: 5``:

* on the bundled demo dataset (its ``splits.yml``; training split as examples);
* on CK25 (``researcher.datasets.make_splits(seed=0)``; training split as examples), when
  ``../shared/datasets/ck25`` next to the repository (or ``--ck25``) exists;

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
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from researcher.datasets import (
    Question,
    QuestionSet,
    Splits,
    load_gold_answers,
    load_order_required,
    load_questions,
    load_splits,
    make_splits,
)
from researcher.evaluate import AgentAnswer, EvalReport, Gold, evaluate_agent, resolve_gold
from researcher.propose import set_rule_enabled, set_yaml_value
from worker_agent.agent import WorkerAgent
from worker_agent.kg import KnowledgeGraph, open_kg
from worker_agent.spec import AgentSpec, seed_spec_path
from worker_agent.strategies import Example

DEMO = ROOT / "worker_agent" / "data" / "demo"
ORDER: dict[str, set[str]] = {}  # questions whose answer order matters, per dataset
CK25 = ROOT.parent / "shared" / "datasets" / "ck25"


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


def run(spec: AgentSpec, kg: KnowledgeGraph, train: Sequence[Question], evaluate: Sequence[Question],
        gold: dict[str, Gold]) -> EvalReport:
    """The same evaluation `researcher eval` runs: official set metrics plus per-family scores."""
    agent = WorkerAgent(spec, kg, examples_of(train))

    def answer(q: Question) -> AgentAnswer:
        a = agent.ask(q.text, uid=q.uid, lang=q.lang)
        return AgentAnswer(a.query, a.status, a.time_s)

    return evaluate_agent(answer, evaluate, kg, gold, concurrency=1)


def report(name: str, result: EvalReport, show: bool) -> None:
    s = result.summary
    per_q = statistics.fmean(r.time_s for r in result.results) if result.results else 0.0
    fam = "  ".join(f"{k} {v:.2f}" for k, v in s["families"].items() if v is not None)
    print(f"{name:<42} set_F {s['overall']['set_F']:.3f}  ({s['n_scored']} scored of {s['n_questions']})  "
          f"{per_q * 1000:.0f} ms/question")
    print(f"{'':<44}families: {fam}")
    if show:
        for r in result.results:
            shown = "  -  " if not r.counted else f"{r.scores.get('set_F', 0.0):.2f}"
            print(f"   {shown}  {r.uid:<12} {r.status:<10} {r.outcome:<18} {r.question}")


def dataset(questions: QuestionSet, splits: Splits, split: str) -> tuple[list[Question], list[Question]]:
    return splits.select(questions, "train"), splits.select(questions, split)  # type: ignore[arg-type]


def bench(name: str, load: Callable[[], tuple[KnowledgeGraph, QuestionSet, Splits, dict | None]],
          specs: Sequence[tuple[str, AgentSpec]], split: str, show: bool) -> None:
    started = time.perf_counter()
    kg, questions, splits, official = load()
    train, evaluate = dataset(questions, splits, split)
    gold = resolve_gold(evaluate, kg, official, ORDER.get(name, set()))
    print(f"{name}: {len(train)} training examples, {len(evaluate)} {split} questions "
          f"(KG loaded in {time.perf_counter() - started:.1f} s)")
    for label, spec in specs:
        report(f"  {label}", run(spec, kg, train, evaluate, gold), show)


def load_demo() -> tuple[KnowledgeGraph, QuestionSet, Splits, None]:
    return open_kg([DEMO / "kg.ttl"]), load_questions(DEMO / "questions.yml"), load_splits(DEMO / "splits.yml"), None


def load_ck25(root: Path) -> Callable[[], tuple[KnowledgeGraph, QuestionSet, Splits, dict]]:
    def load() -> tuple[KnowledgeGraph, QuestionSet, Splits, dict]:
        questions = load_questions(root / "questions.yml")
        ORDER["ck25"] = load_order_required(root / "questions.yml")
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
