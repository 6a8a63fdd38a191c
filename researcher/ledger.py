"""The ledger: an append-only JSONL record of every spec version and of notable events.

One line per record (``ledger.jsonl`` in a workspace); see docs/LEDGER.md for every field.
Records are pydantic models with ``extra="forbid"`` and ``schema_version: 1``. Scores are always
stored together with the eval context they were measured in (dataset, split, split hash, KG
fingerprint, question count), and :meth:`Ledger.best` and :func:`metric_table` never compare
numbers from different contexts.

Crash safety: an append is one ``os.write`` of a complete line on an ``O_APPEND`` descriptor
followed by ``os.fsync``. A crash mid-write can only leave a partial last line (no trailing
newline); opening the ledger (or the next append) moves that fragment to
``ledger.jsonl.corrupt-<timestamp>`` and truncates the file back to its last complete record.
Earlier lines are never rewritten. The module takes no lock: the loop holds the workspace lock.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = [
    "DEFAULT_METRICS",
    "KNOWN_EVENTS",
    "SCHEMA_VERSION",
    "TABLE_FORMATS",
    "DiffStats",
    "EvalContext",
    "EventRecord",
    "Ledger",
    "LedgerError",
    "QuestionOutcome",
    "Record",
    "Scores",
    "Status",
    "Table",
    "TableFormat",
    "Tokens",
    "VersionRecord",
    "feature_table",
    "format_cell",
    "metric_table",
    "render_table",
]

SCHEMA_VERSION = 1
Status = Literal["baseline", "accepted", "rejected", "invalid"]
# Events are log entries, not statuses: the vocabulary may grow without breaking old ledgers.
KNOWN_EVENTS: tuple[str, ...] = (
    "run_started",
    "run_finished",
    "run_interrupted",
    "best_changed",
    "invalid_proposal",
    "deployed",
    "test_evaluation",
    "store_repaired",
    "note",
)
DEFAULT_METRICS: tuple[str, ...] = ("set_F", "set_P", "set_recall", "set_F_ndcg", "exact_match")
TableFormat = Literal["md", "csv", "json", "text"]
TABLE_FORMATS: tuple[str, ...] = get_args(TableFormat)

_VERSION_PATTERN = r"^v[1-9][0-9]*$"
# None: the metric is undefined for this evaluation (e.g. no scorable question in a group).
Number = int | float | None


class LedgerError(Exception):
    """The ledger file is unreadable or a request is invalid; one line naming file and line."""


def _now() -> datetime:
    return datetime.now(UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Section(_Model):
    """A nested record section; also reads like the JSON object it serializes to.

    ``record.scores.overall`` and ``record.scores.get("overall")`` are the same, so code written
    against the JSON shape keeps working.
    """

    def get(self, key: str, default: object = None) -> object:
        return getattr(self, key) if key in type(self).model_fields else default

    def __getitem__(self, key: str) -> object:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)


# ----------------------------------------------------------------------------------------------
# record models


class EvalContext(_Section):
    """Where scores were measured. Scores are comparable only within one comparable_key()."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset_id: str = Field(description="question set id, e.g. 'ck25'")
    split: str = Field(description="'train', 'validation' or 'test'")
    split_hash: str = Field(description="hash of the evaluated question uids (the split as used)")
    kg_fingerprint: str = Field(description="KnowledgeGraph.fingerprint of the KG queried")
    n_questions: int = Field(ge=0, description="number of questions evaluated")
    spec_commit: str | None = Field(default=None, description="git commit of the evaluated spec")

    def comparable_key(self) -> tuple[str, str, str, str, int]:
        # spec_commit differs per version by design, so it is not part of comparability.
        return (self.dataset_id, self.split, self.split_hash, self.kg_fingerprint, self.n_questions)

    def comparable(self, other: EvalContext) -> bool:
        return self.comparable_key() == other.comparable_key()


class DiffStats(_Section):
    """Size of the diff from the parent version."""

    files: int = Field(ge=0)
    insertions: int = Field(ge=0)
    deletions: int = Field(ge=0)


class Scores(_Section):
    """Aggregated scores of one evaluation; empty (no ``overall``) means "not evaluated"."""

    overall: dict[str, Number] = Field(
        default_factory=dict, description="set_P, set_recall, set_F, set_F_ndcg, exact_match, ..."
    )
    families: dict[str, Number] = Field(default_factory=dict, description="component F1 per family")
    per_feature: dict[str, dict[str, Number]] = Field(
        default_factory=dict, description="query feature (COUNT, ...) -> metric -> value (incl. n)"
    )
    per_language: dict[str, dict[str, Number]] = Field(
        default_factory=dict, description="language -> metric -> value (incl. n)"
    )
    outcome_counts: dict[str, int] = Field(default_factory=dict, description="outcome -> number of questions")

    def __bool__(self) -> bool:
        return bool(self.overall)


class QuestionOutcome(_Section):
    """Per-question result; outcome is metrics.Outcome, stored as text so old lines stay valid."""

    outcome: str
    set_F: float | None = Field(default=None, description="None when the question is not scorable")


class Tokens(_Section):
    input: int = Field(default=0, ge=0)
    output: int = Field(default=0, ge=0)


class VersionRecord(_Model):
    """One spec version and its verdict."""

    kind: Literal["version"] = "version"
    schema_version: Literal[1] = 1
    version: str = Field(pattern=_VERSION_PATTERN)
    parent: str | None = Field(default=None, pattern=_VERSION_PATTERN)
    commit: str = Field(min_length=4, description="git commit of the version")
    created_at: AwareDatetime
    status: Status
    reason: str = Field(default="", description="one line: why accepted/rejected/invalid")
    summary: str = ""
    rationale: str = ""
    feature_label: str = Field(default="", description="the one feature this version changes")
    proposer: str = Field(default="", description="e.g. 'seed', 'llm:gpt-4o', 'search'")
    diff_stats: DiffStats | None = None
    features: dict[str, JsonValue] = Field(
        default_factory=dict, description="AgentSpec.features(): rule:<id> -> bool, knobs -> values"
    )
    eval_context: EvalContext | None = None
    scores: Scores = Field(default_factory=Scores)
    outcomes: dict[str, QuestionOutcome] = Field(default_factory=dict, description="uid -> outcome")
    repeats: list[float] = Field(default_factory=list, description="overall set_F of each repeat")
    cost_usd: float = Field(default=0.0, ge=0)
    tokens: Tokens = Field(default_factory=Tokens)
    wall_s: float = Field(default=0.0, ge=0)

    @field_validator("reason", "summary", "rationale", "feature_label", "proposer", mode="before")
    @classmethod
    def _none_is_empty_text(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("scores", "tokens", mode="before")
    @classmethod
    def _none_is_empty_section(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("repeats", mode="before")
    @classmethod
    def _none_is_no_repeats(cls, value: object) -> object:
        return [] if value is None else value

    @field_validator("outcomes", "features", mode="before")
    @classmethod
    def _none_is_empty_mapping(cls, value: object) -> object:
        return {} if value is None else value

    @model_validator(mode="after")
    def _scored_when_compared(self) -> VersionRecord:
        # Baseline and accepted versions are what best() compares: they must carry their numbers.
        if self.status in ("baseline", "accepted") and (not self.scores or self.eval_context is None):
            raise ValueError(f"{self.status} records need scores.overall and eval_context")
        if self.scores and self.eval_context is None:
            raise ValueError("scores without eval_context cannot be compared")
        return self


class EventRecord(_Model):
    """Something that happened to the run or a version (deploy, test evaluation, ...)."""

    kind: Literal["event"] = "event"
    schema_version: Literal[1] = 1
    event: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="see KNOWN_EVENTS")
    version: str | None = Field(default=None, pattern=_VERSION_PATTERN)
    at: AwareDatetime = Field(default_factory=_now)
    data: dict[str, JsonValue] = Field(default_factory=dict)


Record = Annotated[VersionRecord | EventRecord, Field(discriminator="kind")]
_RECORD: TypeAdapter[VersionRecord | EventRecord] = TypeAdapter(Record)


def _one_line_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"]) or "record"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}{more}"


# ----------------------------------------------------------------------------------------------
# the file


class Ledger:
    """Append-only JSONL ledger at ``path``.

    ``recover=True`` (writers) moves a partial last line aside on open; readers that may run
    while a loop is appending pass ``recover=False`` and simply ignore an incomplete last line.
    Either way ``warning`` says what was found.
    """

    def __init__(self, path: str | Path, *, recover: bool = True) -> None:
        self.path = Path(path)
        self.warning: str | None = None
        self.corrupt_path: Path | None = None
        if recover:
            with self._write_lock():
                self._inspect_tail(recover=True)
        else:
            self._inspect_tail(recover=False)

    @contextmanager
    def _write_lock(self) -> Iterator[None]:
        """Serialize appends (and tail recovery) across processes: a loop and a `deploy` may both
        write, and neither may ever see the other's line half-written."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- writing -------------------------------------------------------------------------------

    def append(self, record: VersionRecord | EventRecord) -> None:
        """Append one record as one line, durably (single write, then fsync)."""
        if not isinstance(record, (VersionRecord, EventRecord)):
            raise LedgerError(f"{self.path}: can only append VersionRecord or EventRecord, got {type(record).__name__}")
        # Re-validate: models built with model_construct() or mutated later skip validation.
        try:
            record = type(record).model_validate(record.model_dump())
        except ValidationError as exc:
            raise LedgerError(f"{self.path}: refusing to append invalid record: {_one_line_error(exc)}") from exc
        data = (record.model_dump_json() + "\n").encode("utf-8")
        with self._write_lock():
            self._inspect_tail(recover=True)
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:  # one write in practice; loop only guards against short writes
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.path.parent)

    def append_event(
        self, event: str, version: str | None = None, data: dict[str, JsonValue] | None = None
    ) -> EventRecord:
        """Build, append and return an EventRecord stamped now."""
        try:
            record = EventRecord(event=event, version=version, data=data or {})
        except ValidationError as exc:
            raise LedgerError(f"{self.path}: invalid {event!r} event: {_one_line_error(exc)}") from exc
        self.append(record)
        return record

    def _inspect_tail(self, *, recover: bool) -> None:
        """Detect a partial last line; if ``recover``, move it aside and truncate the file."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size == 0:
            return
        with open(self.path, "rb") as fh:
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            fh.seek(0)
            content = fh.read()
        cut = content.rfind(b"\n") + 1
        fragment = content[cut:]
        if not recover:
            self.warning = f"{self.path}: ignoring an incomplete last line ({len(fragment)} bytes)"
            return
        self.corrupt_path = _write_aside(self.path, fragment)
        with open(self.path, "r+b") as fh:
            fh.truncate(cut)
            fh.flush()
            os.fsync(fh.fileno())
        self.warning = (
            f"{self.path}: truncated last line ({len(fragment)} bytes, an interrupted append) "
            f"moved to {self.corrupt_path.name}"
        )

    # -- reading -------------------------------------------------------------------------------

    def records(self) -> list[VersionRecord | EventRecord]:
        """All complete records in file order."""
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return []
        complete = content[: content.rfind(b"\n") + 1]
        return [self._parse_line(n, line) for n, line in enumerate(complete.splitlines(), start=1)]

    def _parse_line(self, lineno: int, line: bytes) -> VersionRecord | EventRecord:
        where = f"{self.path}:{lineno}"
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LedgerError(f"{where}: not valid JSON ({exc.__class__.__name__})") from exc
        if not isinstance(obj, dict):
            raise LedgerError(f"{where}: a record must be a JSON object")
        if obj.get("schema_version") != SCHEMA_VERSION:
            raise LedgerError(
                f"{where}: schema_version {obj.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
            )
        try:
            return _RECORD.validate_python(obj)
        except ValidationError as exc:
            raise LedgerError(f"{where}: invalid record: {_one_line_error(exc)}") from exc

    def versions(self, *, status: Iterable[str] | None = None) -> list[VersionRecord]:
        """Version records in file order (a re-evaluated version appears more than once)."""
        wanted = set(status) if status is not None else None
        return [r for r in self.records() if isinstance(r, VersionRecord) and (wanted is None or r.status in wanted)]

    def get(self, version: str, *, eval_context: EvalContext | None = None) -> VersionRecord | None:
        """The latest record of ``version`` (in a comparable eval context if one is given)."""
        for record in reversed(self.versions()):
            if record.version != version:
                continue
            if eval_context is None or (
                record.eval_context is not None and record.eval_context.comparable(eval_context)
            ):
                return record
        return None

    def events(self, event: str | None = None) -> list[EventRecord]:
        return [r for r in self.records() if isinstance(r, EventRecord) and (event is None or r.event == event)]

    def best(
        self,
        *,
        eval_context: EvalContext,
        metric: str = "set_F",
        statuses: Sequence[str] = ("baseline", "accepted"),
    ) -> VersionRecord | None:
        """Highest ``metric`` among ``statuses`` records measured in a comparable context.

        Ties go to the earliest record (the simpler, older spec wins).
        """
        best: VersionRecord | None = None
        best_value = float("-inf")
        for record in self.versions(status=statuses):
            if record.eval_context is None or not record.scores:
                continue
            if not record.eval_context.comparable(eval_context):
                continue
            value = record.scores.overall.get(metric)
            if value is not None and value > best_value:
                best, best_value = record, float(value)
        return best

    def __repr__(self) -> str:
        return f"Ledger({str(self.path)!r})"


def _write_aside(path: Path, fragment: bytes) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    for attempt in range(100):
        target = path.with_name(f"{path.name}.corrupt-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        try:
            os.write(fd, fragment)
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(path.parent)
        return target
    raise LedgerError(f"{path}: cannot find a free name to keep the corrupt last line")


def _fsync_dir(directory: Path) -> None:
    # Makes a newly created file's directory entry durable; not supported on every platform.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------
# tables

Cell = str | int | float | bool | None


@dataclass
class Table:
    """A rectangular table: ``header`` names the columns, each row has one cell per column."""

    header: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    title: str = ""


def _column_labels(records: Sequence[VersionRecord]) -> list[str]:
    seen: dict[str, int] = {}
    labels = []
    for record in records:
        seen[record.version] = seen.get(record.version, 0) + 1
        count = seen[record.version]
        labels.append(record.version if count == 1 else f"{record.version}#{count}")
    return labels


def feature_table(records: Sequence[VersionRecord], *, all_features: bool = False) -> Table:
    """Features x versions. Only features whose value differs somewhere, unless ``all_features``.

    Cells are the raw values: booleans for rules, knob values, None where a version lacks the
    feature (render_table shows a check mark, the value, or a dash).
    """
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record.features))
    rows: list[list[Cell]] = []
    for name in names:
        values = [record.features.get(name) for record in records]
        distinct = {
            json.dumps(v, sort_keys=True) if name in r.features else "<absent>" for v, r in zip(values, records)
        }
        if all_features or len(distinct) > 1:
            rows.append([name, *(_cell(v) for v in values)])
    return Table(header=["feature", *_column_labels(records)], rows=rows, title="features by version")


def _cell(value: JsonValue) -> Cell:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return json.dumps(value, sort_keys=True)


def metric_table(
    records: Sequence[VersionRecord],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    allow_mixed_contexts: bool = False,
) -> Table:
    """Metrics x versions.

    A metric is an overall score name (``set_F``), ``families.<name>``,
    ``per_feature.<feature>.<metric>``, ``per_language.<lang>.<metric>``, ``repeats.mean``,
    ``repeats.std``, ``tokens.input``, ``tokens.output`` or a record field (``status``,
    ``cost_usd``, ``wall_s``, ``parent``, ``proposer``, ``feature_label``). Missing values are None.
    Raises LedgerError if the records were scored in different eval contexts, unless allowed.
    """
    contexts = {r.eval_context.comparable_key() for r in records if r.eval_context is not None}
    if len(contexts) > 1 and not allow_mixed_contexts:
        raise LedgerError(
            f"metric table: records come from {len(contexts)} different eval contexts "
            "(dataset/split/KG); their scores are not comparable"
        )
    rows = [[metric, *(_metric_value(r, metric) for r in records)] for metric in metrics]
    return Table(header=["metric", *_column_labels(records)], rows=rows, title="metrics by version")


_RECORD_FIELDS = ("status", "reason", "parent", "proposer", "feature_label", "summary", "cost_usd", "wall_s")


def _metric_value(record: VersionRecord, metric: str) -> Cell:
    if metric in _RECORD_FIELDS:
        return getattr(record, metric)
    head, _, rest = metric.partition(".")
    if head == "tokens" and rest in ("input", "output"):
        return getattr(record.tokens, rest)
    if head == "repeats" and rest in ("mean", "std", "n", "ci95"):
        return _repeat_stat(record.repeats, rest)
    scores = record.scores
    if head == "families" and rest:
        return scores.families.get(rest)
    if head in ("per_feature", "per_language") and rest:
        group, _, name = rest.rpartition(".")
        return getattr(scores, head).get(group, {}).get(name) if group else None
    return scores.overall.get(metric)


def _repeat_stat(values: list[float], stat: str) -> Cell:
    if stat == "n":
        return len(values)
    if stat == "mean":
        return statistics.fmean(values) if values else None
    if stat == "ci95":  # half-width of the normal-approximation 95% interval of the mean
        return 1.96 * statistics.stdev(values) / len(values) ** 0.5 if len(values) >= 2 else None
    return statistics.stdev(values) if len(values) >= 2 else None


def format_cell(value: Cell) -> str:
    """How md/text (and the CLI's rich tables) show a cell: ✓ / blank / – / 3 decimals."""
    if value is True:
        return "✓"
    if value is False:
        return ""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _csv_cell(value: Cell) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _numeric_columns(table: Table) -> list[bool]:
    numeric = []
    for col in range(len(table.header)):
        cells = [row[col] for row in table.rows if row[col] is not None]
        numeric.append(bool(cells) and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in cells))
    return numeric


def render_table(table: Table, fmt: TableFormat | str = "text") -> str:
    """Render a table as Markdown, CSV, JSON or aligned plain text."""
    if fmt == "json":
        return (
            json.dumps({"title": table.title, "header": table.header, "rows": table.rows}, indent=2, ensure_ascii=False)
            + "\n"
        )
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(table.header)
        writer.writerows([[_csv_cell(c) for c in row] for row in table.rows])
        return buffer.getvalue()
    if fmt == "md":
        return _render_markdown(table)
    if fmt == "text":
        return _render_text(table)
    raise LedgerError(f"unknown table format {fmt!r}: expected one of {', '.join(TABLE_FORMATS)}")


def _render_markdown(table: Table) -> str:
    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    align = ["---:" if numeric else "---" for numeric in _numeric_columns(table)]
    out = [line(table.header), "|" + "|".join(align) + "|"]
    out += [line(format_cell(c) for c in row) for row in table.rows]
    return "\n".join(out) + "\n"


def _render_text(table: Table) -> str:
    cells = [list(table.header)] + [[format_cell(c) for c in row] for row in table.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(table.header))]
    numeric = _numeric_columns(table)

    def line(row: list[str]) -> str:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells[1:]]
    return "\n".join(out) + "\n"
