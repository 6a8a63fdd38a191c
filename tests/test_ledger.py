"""Ledger: append-only JSONL records, crash recovery, eval-context-aware best(), tables."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from researcher.ledger import (
    DiffStats,
    EvalContext,
    EventRecord,
    Ledger,
    LedgerError,
    QuestionOutcome,
    Scores,
    Table,
    Tokens,
    VersionRecord,
    feature_table,
    format_cell,
    metric_table,
    render_table,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
CTX = EvalContext(dataset_id="ck25", split="validation", split_hash="abc", kg_fingerprint="kg1", n_questions=10)


def record(
    version: str,
    set_f: float | None,
    *,
    status: str = "accepted",
    parent: str | None = "v1",
    ctx: EvalContext | None = CTX,
    features: dict | None = None,
) -> VersionRecord:
    scores = None
    if set_f is not None:
        scores = Scores(
            overall={"set_F": set_f, "set_P": set_f + 0.05, "set_recall": set_f - 0.05, "exact_match": 0.1},
            families={"nodes": 0.8},
            per_feature={"COUNT": {"n": 3, "set_F": set_f / 2}},
            per_language={"en": {"n": 5, "set_F": set_f}},
        )
    return VersionRecord(
        version=version,
        parent=parent,
        commit="0123456789abcdef",
        created_at=T0,
        status=status,  # type: ignore[arg-type]
        reason="r",
        summary=f"summary of {version}",
        feature_label="rule:count",
        proposer="search",
        diff_stats=DiffStats(files=1, insertions=2, deletions=1),
        features=features if features is not None else {"rule:count": False, "few_shot": 2},
        eval_context=ctx if scores is not None else None,
        scores=scores,
        outcomes={"ck25:1-en": QuestionOutcome(outcome="correct", set_F=1.0)} if scores else {},
        repeats=[0.5, 0.6] if scores else [],
        cost_usd=0.01,
        tokens=Tokens(input=100, output=20),
        wall_s=1.5,
    )


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ws" / "ledger.jsonl")


def test_append_and_read_back(ledger: Ledger) -> None:
    assert ledger.records() == [] and ledger.warning is None
    v1 = record("v1", 0.5, status="baseline", parent=None)
    ledger.append(v1)
    ledger.append(EventRecord(event="run_started", at=T0, data={"budget": 3}))
    ledger.append(record("v2", 0.6))
    lines = ledger.path.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["schema_version"] == 1 for line in lines)
    reread = Ledger(ledger.path)
    assert reread.versions()[0] == v1
    assert [r.version for r in reread.versions()] == ["v1", "v2"]
    assert [e.event for e in reread.events()] == ["run_started"]
    assert reread.events()[0].data == {"budget": 3}
    assert reread.get("v2").scores.overall["set_F"] == 0.6
    assert reread.get("v9") is None
    assert [r.version for r in reread.versions(status=["baseline"])] == ["v1"]


def test_append_never_rewrites_earlier_lines(ledger: Ledger) -> None:
    ledger.append(record("v1", 0.5, status="baseline", parent=None))
    before = ledger.path.read_bytes()
    ledger.append(record("v2", 0.6))
    assert ledger.path.read_bytes().startswith(before)


def test_truncated_last_line_is_moved_aside(ledger: Ledger) -> None:
    ledger.append(record("v1", 0.5, status="baseline", parent=None))
    ledger.append(record("v2", 0.6))
    complete = ledger.path.read_bytes()
    fragment = record("v3", 0.7).model_dump_json().encode()[:57]
    with open(ledger.path, "ab") as fh:
        fh.write(fragment)  # a crash in the middle of an append
    reader = Ledger(ledger.path, recover=False)
    assert "incomplete last line" in reader.warning
    assert [r.version for r in reader.versions()] == ["v1", "v2"]
    assert ledger.path.read_bytes() == complete + fragment  # readers touch nothing

    writer = Ledger(ledger.path)
    assert writer.warning is not None and "moved to ledger.jsonl.corrupt-" in writer.warning
    assert writer.corrupt_path is not None and writer.corrupt_path.read_bytes() == fragment
    assert ledger.path.read_bytes() == complete
    writer.append(record("v3", 0.7))
    assert [r.version for r in Ledger(ledger.path).versions()] == ["v1", "v2", "v3"]


def test_append_recovers_tail_written_after_open(ledger: Ledger) -> None:
    ledger.append(record("v1", 0.5, status="baseline", parent=None))
    with open(ledger.path, "ab") as fh:
        fh.write(b'{"kind": "ver')
    ledger.append(record("v2", 0.6))
    assert [r.version for r in Ledger(ledger.path).versions()] == ["v1", "v2"]
    assert len(list(ledger.path.parent.glob("ledger.jsonl.corrupt-*"))) == 1


def test_extra_field_and_bad_lines_rejected(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        VersionRecord(**record("v1", 0.5).model_dump(), surprise=1)
    with pytest.raises(ValueError, match="Extra inputs"):
        EvalContext(**CTX.model_dump(), model="gpt")
    with pytest.raises(ValueError, match="accepted records need scores.overall and eval_context"):
        record("v2", None, status="accepted")
    ledger.append(record("v1", 0.5, status="baseline", parent=None))
    obj = json.loads(ledger.path.read_text())
    obj["surprise"] = True
    with open(ledger.path, "a") as fh:
        fh.write(json.dumps(obj) + "\n")
    with pytest.raises(LedgerError, match=r"ledger.jsonl:2: invalid record: version.surprise: Extra inputs"):
        Ledger(ledger.path).records()
    bad_version = ledger.path.with_name("other.jsonl")
    bad_version.write_text(
        json.dumps({**json.loads(ledger.path.read_text().splitlines()[0]), "schema_version": 2}) + "\n"
    )
    with pytest.raises(LedgerError, match="other.jsonl:1: schema_version 2 is not supported"):
        Ledger(bad_version).records()
    bad_version.write_text("not json\n")
    with pytest.raises(LedgerError, match="other.jsonl:1: not valid JSON"):
        Ledger(bad_version).records()


def test_invalid_record_without_scores_is_fine(ledger: Ledger) -> None:
    ledger.append(record("v2", None, status="invalid"))
    [r] = Ledger(ledger.path).versions()
    assert r.status == "invalid" and not r.scores and r.scores.overall == {} and r.eval_context is None


def test_json_shaped_input_and_dict_style_reads(ledger: Ledger) -> None:
    """Callers may build records from plain dicts (the JSON shape) and read sections like dicts."""
    raw = {
        "version": "v2",
        "parent": "v1",
        "commit": "abcdef12",
        "created_at": "2025-01-01T00:00:00+00:00",
        "status": "invalid",
        "reason": None,
        "diff_stats": {"files": 1, "insertions": 0, "deletions": 3},
        "eval_context": CTX.model_dump(),
        "scores": {},
        "repeats": None,
        "tokens": {"input": 1, "output": 2},
    }
    ledger.append(VersionRecord(**raw))
    scored = {
        **raw,
        "version": "v3",
        "status": "accepted",
        "scores": {
            "overall": {"set_F": 0.4, "exact_match": None},
            "per_feature": {"COUNT": {"n": 2, "set_F": None}},
            "outcome_counts": {"correct": 3, "timeout": 1},
        },
        "outcomes": {"ck25:1-en": {"outcome": "gold_unavailable", "set_F": None}},
    }
    ledger.append(VersionRecord(**scored))
    v2, v3 = Ledger(ledger.path).versions()
    assert v2.reason == "" and v2.repeats == [] and not v2.scores
    assert v2.scores.get("overall") == {} and v2.eval_context.get("split") == "validation"
    assert v3.scores.get("overall")["set_F"] == 0.4 and v3.scores["outcome_counts"]["timeout"] == 1
    assert v3.outcomes["ck25:1-en"].get("set_F") is None and v3.tokens["input"] == 1
    assert v3.scores.get("nope", 7) == 7
    with pytest.raises(KeyError):
        v3.scores["nope"]
    assert ledger.best(eval_context=CTX).version == "v3"
    assert metric_table([v2, v3], ["set_F", "exact_match"]).rows == [["set_F", None, 0.4], ["exact_match", None, None]]


def test_append_event(ledger: Ledger) -> None:
    event = ledger.append_event("best_changed", "v2", {"previous": "v1"})
    assert event.at.tzinfo is not None
    ledger.append_event("run_started")
    assert [(e.event, e.version) for e in Ledger(ledger.path).events()] == [
        ("best_changed", "v2"),
        ("run_started", None),
    ]
    assert [e.data for e in ledger.events("best_changed")] == [{"previous": "v1"}]
    with pytest.raises(LedgerError, match="invalid 'Bad Name' event"):
        ledger.append_event("Bad Name")
    with pytest.raises(LedgerError, match="can only append"):
        ledger.append({"kind": "event"})  # type: ignore[arg-type]


def test_best_respects_eval_context(ledger: Ledger) -> None:
    other_kg = CTX.model_copy(update={"kg_fingerprint": "kg2"})
    test_split = CTX.model_copy(update={"split": "test", "split_hash": "zzz"})
    ledger.append(record("v1", 0.50, status="baseline", parent=None))
    ledger.append(record("v2", 0.70))
    ledger.append(record("v3", 0.95, ctx=other_kg))  # better, but on another KG
    ledger.append(record("v4", 0.99, status="rejected"))  # rejected never counts
    ledger.append(record("v5", 0.70))  # tie: earlier record wins
    ledger.append(record("v6", 0.99, ctx=test_split))
    # spec_commit differs per version and does not affect comparability.
    assert ledger.best(eval_context=CTX.model_copy(update={"spec_commit": "deadbeef"})).version == "v2"
    assert ledger.best(eval_context=other_kg).version == "v3"
    assert ledger.best(eval_context=CTX, metric="set_recall").version == "v2"
    assert ledger.best(eval_context=CTX.model_copy(update={"n_questions": 5})) is None
    assert ledger.get("v3", eval_context=CTX) is None
    assert ledger.get("v3", eval_context=other_kg).version == "v3"


def test_feature_table_only_varying_features() -> None:
    records = [
        record("v1", 0.5, status="baseline", parent=None, features={"rule:count": False, "few_shot": 2, "model": "m"}),
        record("v2", 0.6, features={"rule:count": True, "few_shot": 2, "model": "m"}),
        record("v3", 0.6, features={"rule:count": True, "few_shot": 4, "model": "m", "rule:new": True}),
    ]
    table = feature_table(records)
    assert table.header == ["feature", "v1", "v2", "v3"]
    assert table.rows == [
        ["rule:count", False, True, True],
        ["few_shot", 2, 2, 4],
        ["rule:new", None, None, True],
    ]
    assert [row[0] for row in feature_table(records, all_features=True).rows] == [
        "rule:count",
        "few_shot",
        "model",
        "rule:new",
    ]
    text = render_table(table, "text")
    assert "✓" in text and "–" in text


def test_metric_table_and_context_guard() -> None:
    records = [
        record("v1", 0.5, status="baseline", parent=None),
        record("v2", 0.75),
        record("v3", None, status="invalid"),
    ]
    table = metric_table(
        records,
        metrics=[
            "set_F",
            "families.nodes",
            "per_feature.COUNT.set_F",
            "per_language.en.n",
            "status",
            "tokens.input",
            "repeats.mean",
            "missing",
        ],
    )
    assert table.header == ["metric", "v1", "v2", "v3"]
    rows = {row[0]: row[1:] for row in table.rows}
    assert rows["set_F"] == [0.5, 0.75, None]
    assert rows["families.nodes"] == [0.8, 0.8, None]
    assert rows["per_feature.COUNT.set_F"] == [0.25, 0.375, None]
    assert rows["per_language.en.n"] == [5, 5, None]
    assert rows["status"] == ["baseline", "accepted", "invalid"]
    assert rows["tokens.input"] == [100, 100, 100]
    assert rows["repeats.mean"][0] == pytest.approx(0.55) and rows["repeats.mean"][2] is None
    assert rows["missing"] == [None, None, None]
    mixed = records + [record("v4", 0.9, ctx=CTX.model_copy(update={"kg_fingerprint": "kg2"}))]
    with pytest.raises(LedgerError, match="2 different eval contexts"):
        metric_table(mixed)
    assert metric_table(mixed, allow_mixed_contexts=True).header[-1] == "v4"
    # A version recorded twice gets distinct column labels.
    assert metric_table([records[1], records[1]]).header == ["metric", "v2", "v2#2"]


def test_renderings() -> None:
    table = Table(
        header=["metric", "v1", "v2"], rows=[["set_F", 0.5, 0.75125], ["rule:x", True, False], ["gap", None, 3]]
    )
    md = render_table(table, "md").splitlines()
    assert md[0] == "| metric | v1 | v2 |"
    assert md[1] == "|---|---|---|"
    assert md[2] == "| set_F | 0.500 | 0.751 |"
    assert md[3] == "| rule:x | ✓ |  |"
    assert md[4] == "| gap | – | 3 |"
    rows = list(csv.reader(io.StringIO(render_table(table, "csv"))))
    assert rows == [["metric", "v1", "v2"], ["set_F", "0.5", "0.75125"], ["rule:x", "true", "false"], ["gap", "", "3"]]
    data = json.loads(render_table(table, "json"))
    assert data["header"] == table.header and data["rows"][1] == ["rule:x", True, False] and data["rows"][2][1] is None
    text = render_table(table, "text").splitlines()
    assert text[0].split() == ["metric", "v1", "v2"]
    assert text[2].split() == ["set_F", "0.500", "0.751"]
    assert text[0].index("v2") == text[2].index("0.751") == text[1].rindex(" ") + 1  # aligned columns
    with pytest.raises(LedgerError, match="unknown table format 'html'"):
        render_table(table, "html")


def test_numeric_columns_right_aligned() -> None:
    table = Table(header=["metric", "v1"], rows=[["set_F", 0.5], ["n", 12]])
    assert render_table(table, "md").splitlines()[1] == "|---|---:|"
    lines = render_table(table, "text").splitlines()
    assert lines[2].endswith("0.500") and lines[3].endswith("   12")


def test_format_cell() -> None:
    assert [format_cell(c) for c in (True, False, None, 0.12345, 7, "x")] == ["✓", "", "–", "0.123", "7", "x"]


def test_naive_timestamps_rejected() -> None:
    with pytest.raises(ValueError, match="timezone"):
        EventRecord(event="note", at=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="String should match pattern"):
        EventRecord(event="Deployed!")
