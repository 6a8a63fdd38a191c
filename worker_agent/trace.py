"""Run traces: one self-describing JSON document per answered question.

A trace is rewritten atomically (temporary file, then rename) after every step, so a crash loses at
most the step in progress and a reader never sees a half-written file. The format is versioned by
``TRACE_FORMAT``; docs/TRACES.md documents the fields.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

TRACE_FORMAT = 1

#: Closed vocabulary of a worker's exit statuses (countable across runs).
STATUSES = (
    "answered",  # a query was produced and ran without error
    "no_answer",  # the strategy found no query at all
    "budget_exhausted",  # the iteration budget ran out before an acceptable query
    "invalid_query",  # the final query does not parse or is not read-only
    "tool_error",  # a tool or a spec hook failed
    "llm_error",  # the model provider failed (after retries) or returned garbage
    "timeout",  # the per-question time limit was reached
)

_SECRET = re.compile(r"(sk-[A-Za-z0-9_\-]{8,}|sk-ant-[A-Za-z0-9_\-]{8,})")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _scrub(value: Any) -> Any:
    """Drop anything that looks like an API key: traces are shared, keys never are."""
    if isinstance(value, str):
        return _SECRET.sub("[redacted]", value)
    if isinstance(value, dict):
        return {k: ("[redacted]" if "api_key" in str(k).lower() else _scrub(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see either the old or the new content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def trace_filename(uid: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", uid)
    return f"{safe}.json"


class Trace:
    """Accumulates the steps of one question and saves itself after each one."""

    def __init__(
        self,
        path: Path | None,
        *,
        uid: str,
        question: str,
        spec_version: str | None = None,
        spec_commit: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.path = path
        self._start = time.perf_counter()
        self.data: dict[str, Any] = {
            "format": TRACE_FORMAT,
            "uid": uid,
            "question": question,
            "spec_version": spec_version,
            "spec_commit": spec_commit,
            "config": _scrub(config or {}),
            "started_at": _now(),
            "steps": [],
            "tokens": {"input": 0, "output": 0},
            "cost_usd": 0.0,
            "status": None,
            "query": None,
            "wall_s": None,
        }
        self.save()

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.data["steps"]

    def step(self, kind: str, **data: Any) -> dict[str, Any]:
        """Record one step (a message, a tool call and its result, a candidate...)."""
        entry = {"kind": kind, "t": round(time.perf_counter() - self._start, 4), **_scrub(data)}
        self.data["steps"].append(entry)
        self.save()
        return entry

    def add_usage(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.data["tokens"]["input"] += int(input_tokens)
        self.data["tokens"]["output"] += int(output_tokens)
        self.data["cost_usd"] = round(self.data["cost_usd"] + float(cost_usd), 8)

    def finish(self, status: str, query: str | None, **extra: Any) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown exit status {status!r}; expected one of {', '.join(STATUSES)}")
        self.data.update(status=status, query=query, wall_s=round(time.perf_counter() - self._start, 4))
        self.data.update(_scrub(extra))
        self.data["finished_at"] = _now()
        self.save()

    def save(self) -> None:
        if self.path is not None:
            atomic_write_text(self.path, json.dumps(self.data, ensure_ascii=False, indent=1, default=str))

    def to_dict(self) -> dict[str, Any]:
        return self.data


def load_trace(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("format") != TRACE_FORMAT:
        raise ValueError(f"{path}: unsupported trace format {data.get('format')!r}")
    return data
