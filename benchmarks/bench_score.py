"""Benchmark: score all CK25 gold queries as predictions (load + gold + scoring), one run.

Target (issue #2): loading CK25 under one second and scoring all 38 questions under two seconds
on a 2-core machine. Prints the figures and whether the targets are met.

    python benchmarks/bench_score.py
"""

from __future__ import annotations

import time
from pathlib import Path

from researcher.datasets import load_gold_answers, load_order_required, load_questions
from researcher.evaluate import resolve_gold, score_predictions
from worker_agent.kg import OxigraphKG

CK25 = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "ck25"


def main() -> None:
    t0 = time.perf_counter()
    kg = OxigraphKG([CK25 / "prod-vocab.ttl", CK25 / "prod-inst.ttl"])
    t_load = time.perf_counter() - t0
    qs = load_questions(CK25 / "questions.yml")
    official = load_gold_answers(CK25 / "true_result_set.json")
    order = load_order_required(CK25 / "questions.yml")
    t1 = time.perf_counter()
    gold = resolve_gold(qs.questions, kg, official, order)
    report = score_predictions(qs.questions, {q.uid: q.sparql for q in qs.questions}, kg, gold)
    t_score = time.perf_counter() - t1
    s = report.summary
    print(f"CK25 load (embedded Oxigraph): {t_load:.3f} s  target < 1 s: {'met' if t_load < 1 else 'MISSED'}")
    print(f"score {len(qs.questions)} questions (execute, pool, official metrics, structure metrics): "
          f"{t_score:.3f} s  target < 2 s: {'met' if t_score < 2 else 'MISSED'}")
    print(f"gold-as-prediction: set_F {s['overall']['set_F']:.4f} over {s['n_scored']} scored; outcomes {s['outcomes']}")


if __name__ == "__main__":
    main()
