"""Benchmark the worker-agent tools on CK25: label-index build time, lookup and span latency.

Usage: python benchmarks/bench_tools.py [--datasets ../shared/datasets] [--lookups 500] [--seed 0]

Prints the label index build time (cold, through KnowledgeGraph.query), median and p95 latency
of surface-form lookups (exact labels, typo'd labels, surnames with a title) and of
match_spans over every CK25 question (cold caches first, then warm), and the generic SPARQL
lookup path for comparison.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from worker_agent.kg import OxigraphKG
from worker_agent.tools import LabelIndex, Tools


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _timed(fn: Callable[[str], object], inputs: Sequence[str]) -> list[float]:
    timings = []
    for text in inputs:
        started = time.perf_counter()
        fn(text)
        timings.append(time.perf_counter() - started)
    return timings


def _report(name: str, timings: Sequence[float]) -> None:
    print(f"{name:<34} n={len(timings):<5} median={statistics.median(timings) * 1000:7.2f} ms"
          f"  p95={_percentile(timings, 0.95) * 1000:7.2f} ms  max={max(timings) * 1000:7.2f} ms")


def _typo(text: str, rng: random.Random) -> str:
    """Swap two adjacent letters inside the longest word (a typical typing error)."""
    words = text.split()
    i = max(range(len(words)), key=lambda j: len(words[j]))
    word = words[i]
    if len(word) >= 4:
        p = rng.randrange(1, len(word) - 2)
        words[i] = word[:p] + word[p + 1] + word[p] + word[p + 2 :]
    return " ".join(words)


def main() -> None:
    default = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=Path, default=default)
    parser.add_argument("--lookups", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ck25 = args.datasets / "ck25"
    if not (ck25 / "prod-inst.ttl").is_file():
        sys.exit(f"{ck25}: CK25 data not found (pass --datasets)")

    started = time.perf_counter()
    kg = OxigraphKG([ck25 / "prod-vocab.ttl", ck25 / "prod-inst.ttl"])
    print(f"KG load: {time.perf_counter() - started:.3f} s ({len(kg)} triples)")
    index = LabelIndex.build(kg)
    print(f"label index build: {index.build_seconds:.3f} s "
          f"({len(index)} entities, {len(index.forms)} surface forms, {len(index.predicates)} label predicates)")

    rng = random.Random(args.seed)
    labels = rng.sample(index.labels, min(args.lookups, len(index.labels)))
    people = [index.labels[i] for i, types in enumerate(index.entity_types)
              if any(t.endswith(("Employee", "Manager")) for t in types)]
    surnames = [f"Ms. {name.split()[-1]}" for name in people]
    _report("lookup: exact labels", _timed(lambda t: index.lookup(t), labels))
    _report("lookup: labels with a typo", _timed(lambda t: index.lookup(t), [_typo(t, rng) for t in labels]))
    _report("lookup: title + surname", _timed(lambda t: index.lookup(t, surname=True), surnames))

    questions = [q["question"]["en"] for q in yaml.safe_load((ck25 / "questions.yml").read_text())["questions"]]
    _report("match_spans (cold caches)", _timed(lambda t: index.match_spans(t, surname=True), questions))
    _report("match_spans (warm caches)", _timed(lambda t: index.match_spans(t, surname=True), questions))

    remote = Tools(kg, use_index=False, label_predicates=["http://ld.company.org/prod-vocab/name"])
    _report("lookup via SPARQL (generic path)", _timed(lambda t: remote.surface_forms(t), labels[:50]))


if __name__ == "__main__":
    main()
