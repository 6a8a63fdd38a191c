"""The data an evaluation runs on: questions, KG, gold answers and splits, loaded together.

``Data.context(split)`` is the identity of an evaluation (dataset, split, split hash, KG
fingerprint): scores are only ever compared within one context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from researcher.datasets import (
    Question,
    QuestionSet,
    Splits,
    load_gold_answers,
    load_order_required,
    load_questions,
    load_splits,
    make_splits,
    save_splits,
    split_hash,
)
from researcher.evaluate import Gold, check_gold_covers, resolve_gold
from worker_agent.kg import KnowledgeGraph, open_kg


@dataclass
class Data:
    questions: QuestionSet
    kg: KnowledgeGraph
    splits: Splits
    official: dict[str, dict[str, int]] | None = None
    order_required: set[str] = field(default_factory=set)
    timeout: float | None = 30.0

    def split(self, name: str) -> list[Question]:
        return self.splits.select(self.questions, name)  # type: ignore[arg-type]

    @cached_property
    def _gold(self) -> dict[str, Gold]:
        return resolve_gold(self.questions.questions, self.kg, self.official, self.order_required,
                            timeout=self.timeout)

    def gold(self) -> dict[str, Gold]:
        return self._gold

    def dataset_info(self) -> dict[str, Any]:
        """What a worker may be told about the dataset (no questions, no answers)."""
        return {"dataset_name": self.questions.dataset_id,
                "default_namespace": self.questions.default_namespace}

    def context(self, split: str) -> dict[str, Any]:
        return {
            "dataset_id": self.questions.dataset_id,
            "split": split,
            "split_hash": split_hash(self.splits),
            "kg_fingerprint": self.kg.fingerprint,
            "n_questions": len(self.split(split)),
        }


def probe_endpoint(graph: KnowledgeGraph) -> None:
    """Fail fast, with one line, when a remote endpoint is unreachable (EndpointError)."""
    graph.query("ASK { }", timeout=15)


def load_data(
    *,
    questions: Path,
    kg: list[Path] | None = None,
    endpoint: str | None = None,
    gold: Path | None = None,
    splits: Path | None = None,
    split_seed: int = 0,
    store_dir: Path | None = None,
) -> Data:
    """Load everything; a missing split file is created (once) and saved next to the workspace."""
    qs = load_questions(questions)
    graph = open_kg(files=kg or (), endpoint=endpoint, **({"store_dir": store_dir} if store_dir and kg else {}))
    if endpoint:
        probe_endpoint(graph)
    if splits is not None and splits.exists():
        sp = load_splits(splits, qs)
    else:
        sp = make_splits(qs, seed=split_seed)
        if splits is not None:
            save_splits(sp, splits)
    official = load_gold_answers(gold) if gold else None
    if official is not None:
        check_gold_covers(qs.questions, official, gold)
    # as the official client: with an official answer file, nDCG only where it lists order_required
    order = load_order_required(gold) if gold else load_order_required(questions)
    return Data(qs, graph, sp, official, order)
