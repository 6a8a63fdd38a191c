"""Failure analysis: what the proposer reads about a version before editing it.

Built only from validation results and the ledger. The test split is sealed: this module never
receives test questions (``build_analysis`` refuses results whose uid is in the sealed set), so
no test question, gold query or answer can reach a proposer.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from researcher import metrics

FAILING = ("partially_correct", "wrong_answer", "empty_result", "syntax_error", "execution_error", "timeout")


class SealedSplitError(RuntimeError):
    """A test-split question reached the analysis: a bug, never a user error."""


def load_results(path: Path) -> list[dict[str, Any]]:
    """Per-question results written by an evaluation (results.jsonl)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _trace_excerpt(trace_dir: Path | None, uid: str, max_steps: int = 6) -> list[str]:
    if trace_dir is None:
        return []
    from worker_agent.trace import trace_filename

    path = trace_dir / trace_filename(uid)
    if not path.is_file():
        return []
    try:
        steps = json.loads(path.read_text(encoding="utf-8")).get("steps", [])
    except (OSError, json.JSONDecodeError):
        return []
    lines = []
    for step in steps[-max_steps:]:
        items = {k: v for k, v in step.items() if k not in ("kind", "t")}
        lines.append(f"{step.get('kind')}: {json.dumps(items, ensure_ascii=False, default=str)[:300]}")
    return lines


def family_failures(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean shortfall (1 - F1) per structural family over counted questions."""
    gaps: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r.get("outcome") == "gold_unavailable":
            continue
        for fam in metrics.FAMILIES:
            value = (r.get("components") or {}).get(fam)
            if value is not None:
                gaps[fam].append(1.0 - float(value))
    return {fam: round(sum(v) / len(v), 4) for fam, v in gaps.items() if v}


def build_analysis(
    *,
    version: str,
    results: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    sealed_uids: Iterable[str] = (),
    previous_outcomes: Mapping[str, Mapping[str, Any]] | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    trace_dir: Path | None = None,
    samples: int = 8,
) -> dict[str, Any]:
    sealed = set(sealed_uids)
    leaked = [r["uid"] for r in results if r["uid"] in sealed]
    if leaked:
        raise SealedSplitError(f"sealed test question {leaked[0]} reached the failure analysis")
    failing = [r for r in results if r.get("outcome") in FAILING]
    # worst first, then by uid for determinism
    failing.sort(key=lambda r: ((r.get("scores") or {}).get("set_F", 0.0), r["uid"]))
    sample = []
    for r in failing[:samples]:
        sample.append({
            "uid": r["uid"],
            "question": r["question"],
            "outcome": r["outcome"],
            "status": r.get("status"),
            "set_F": (r.get("scores") or {}).get("set_F", 0.0),
            "predicted_query": r.get("predicted_query"),
            "gold_query": r.get("gold_query"),
            "predicted_answers": list(r.get("predicted_answers") or [])[:5],
            "gold_answers": list(r.get("gold_answers") or [])[:5],
            "error": r.get("error"),
            "trace": _trace_excerpt(trace_dir, r["uid"]),
        })
    broken, fixed = [], []
    if previous_outcomes:
        for r in results:
            before = previous_outcomes.get(r["uid"])
            if before is None:
                continue
            was, now = before.get("outcome") == "correct", r.get("outcome") == "correct"
            if was and not now:
                broken.append(r["uid"])
            elif now and not was:
                fixed.append(r["uid"])
    by_feature_fail: Counter[str] = Counter()
    for r in failing:
        for f in r.get("features") or []:
            by_feature_fail[f] += 1
    return {
        "version": version,
        "overall": dict(summary.get("overall", {})),
        "families": dict(summary.get("families", {})),
        "family_shortfall": family_failures(results),
        "outcomes": dict(Counter(r.get("outcome") for r in results)),
        "statuses": dict(Counter(r.get("status") for r in results if r.get("status"))),
        "failing_features": dict(by_feature_fail.most_common()),
        "n_failing": len(failing),
        "failures": sample,
        "broken": sorted(broken),
        "fixed": sorted(fixed),
        "history": [dict(h) for h in history],
    }
