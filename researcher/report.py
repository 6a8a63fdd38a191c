"""A static, offline HTML report of a workspace: what was tried, what worked, what broke.

``write_report(ws, out_dir)`` writes one self-contained ``index.html`` (inline CSS and inline SVG
generated here; no JavaScript, no fonts or scripts from a CDN; SVG text is sized by a generous
width estimate so labels are never cut) with:

* the lineage: every version, its parent, its verdict, as a table and as an SVG graph;
* an SVG plot of the scores per version (overall set_F and the component F1 of each structural
  family);
* the features x versions and metrics x versions tables (``ledger.feature_table`` /
  ``ledger.metric_table``);
* a questions x versions outcome matrix, cells colored by outcome, marking per question what
  each version fixed, improved, worsened or broke relative to its parent (by outcome and set_F);
* per version: verdict, reason, rationale and the diff from its parent (all text escaped);
* the sealed test-split evaluation (``test_evaluation`` events) and the other ledger events.

The report only reads: the version store, the ledger (opened with ``recover=False`` so a running
loop's half-written line is ignored, never repaired) and, for question texts, the questions file.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from researcher.ledger import (
    DEFAULT_METRICS,
    EventRecord,
    Ledger,
    LedgerError,
    QuestionOutcome,
    Table,
    VersionRecord,
    feature_table,
    format_cell,
    metric_table,
)
from researcher.metrics import FAMILIES, OUTCOMES

__all__ = ["CHANGE_KINDS", "CHANGE_MARKS", "OUTCOME_COLORS", "Changes", "ReportData", "VersionInfo", "changes",
           "collect", "line_plot_svg", "lineage_svg", "question_change", "render_report", "write_report"]

REPORT_NAME = "index.html"
OUTCOME_COLORS: dict[str, str] = {
    "correct": "#2e7d32",
    "partially_correct": "#9ccc65",
    "wrong_answer": "#e53935",
    "empty_result": "#ffb300",
    "syntax_error": "#8e24aa",
    "execution_error": "#6d4c41",
    "timeout": "#546e7a",
    "gold_unavailable": "#d5d5d5",
}
STATUS_COLORS = {"baseline": "#1565c0", "accepted": "#2e7d32", "rejected": "#e53935",
                 "invalid": "#757575", "unrecorded": "#bdbdbd"}
SERIES_COLORS = ("#111111", "#1e88e5", "#fb8c00", "#8e24aa", "#00897b", "#c0ca33", "#6d4c41")
REPORT_METRICS = (*DEFAULT_METRICS, *(f"families.{f}" for f in FAMILIES), "status", "cost_usd", "wall_s")


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# ----------------------------------------------------------------------------------------------
# data


@dataclass
class VersionInfo:
    """One version as the report shows it: store metadata + its latest record in the context."""

    name: str
    parent: str | None
    commit: str
    summary: str
    rationale: str
    feature: str
    record: VersionRecord | None
    diff: str = ""

    @property
    def status(self) -> str:
        return self.record.status if self.record else "unrecorded"


@dataclass
class ReportData:
    title: str
    versions: list[VersionInfo]
    records: list[VersionRecord]  # every version record of the main context, file order
    context: dict[str, Any] | None  # the main eval context (where the compared scores come from)
    other_contexts: int
    events: list[EventRecord]
    marks: dict[str, str | None]
    questions: dict[str, str] = field(default_factory=dict)  # uid -> text
    warning: str | None = None


def _main_context(records: Sequence[VersionRecord]) -> tuple[Any, int]:
    """The comparable context holding the most records (ties: the latest), and how many others."""
    keys = Counter(r.eval_context.comparable_key() for r in records if r.eval_context is not None)
    if not keys:
        return None, 0
    last_seen = {r.eval_context.comparable_key(): i for i, r in enumerate(records) if r.eval_context is not None}
    main = max(keys, key=lambda k: (keys[k], last_seen[k]))
    return main, len(keys) - 1


def _question_texts(ws: Any) -> dict[str, str]:
    """uid -> text from the questions file only (no KG load); empty if unavailable."""
    try:
        from researcher.datasets import load_questions

        qs = load_questions(ws.path(ws.config.dataset.questions))
    except Exception:  # noqa: BLE001 - the report still works with bare uids
        return {}
    return {q.uid: q.text for q in qs.questions}


def collect(store: Any, ledger: Ledger, *, title: str = "Researcher report",
            questions: dict[str, str] | None = None) -> ReportData:
    """Gather what the report shows from a version store and a ledger."""
    all_records = ledger.versions()
    key, others = _main_context(all_records)
    # Invalid versions have no context: they belong to every table (their scores are empty).
    records = [r for r in all_records if r.eval_context is None or r.eval_context.comparable_key() == key]
    latest = {r.version: r for r in records}
    infos: list[VersionInfo] = []
    for v in store.versions():
        info = VersionInfo(v.name, v.parent, v.commit, v.summary, v.rationale, v.feature, latest.get(v.name))
        if v.parent:
            info.diff = store.diff(v.parent, v.name)
        infos.append(info)
    context = next((r.eval_context.model_dump() for r in reversed(records) if r.eval_context is not None), None)
    return ReportData(
        title=title,
        versions=infos,
        records=records,
        context=context,
        other_contexts=others,
        events=ledger.events(),
        marks={m: store.marked(m) for m in ("best", "deployed")},
        questions=dict(questions or {}),
        warning=ledger.warning,
    )


# ----------------------------------------------------------------------------------------------
# SVG


def _fmt_num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


# Advance widths in em, rounded up from DejaVu Sans (what system-ui resolves to on a bare Linux,
# and one of the widest sans fonts), so text laid out with them fits in any common font.
_NARROW_CHARS = frozenset("fijlrtI.,:;'|!()[]{}")
_WIDE_CHARS = frozenset("mwMW@%")


def _char_em(ch: str) -> float:
    if ch == " ":
        return 0.34
    if ch in _NARROW_CHARS:
        return 0.42
    if ch in _WIDE_CHARS:
        return 1.02
    if ord(ch) >= 0x2E80:  # CJK and other full-width scripts
        return 1.05
    if ch.isupper():
        return 0.80
    return 0.66


def _text_width(text: str, font_px: float) -> float:
    """A generous estimate of the rendered width of ``text`` (SVG has no layout of its own)."""
    return font_px * sum(_char_em(ch) for ch in text)


_TICK_PX = 11  # svg .tick font size (CSS below)
_LEGEND_PX = 12
_TITLE_PX = 13
_FLAT_GAP = 8  # px of white space between two horizontal x labels
# Slanted x labels: 60° steep, 16 px apart, so neighbours are 16 * sin 60° = 13.9 px apart across
# the slant, more than the 12.8 px line box of an 11 px DejaVu Sans label.
_SLANT_DEG = 60
_SLANT_PITCH = 16
_SIN, _COS = math.sin(math.radians(_SLANT_DEG)), math.cos(math.radians(_SLANT_DEG))


@dataclass(frozen=True)
class _XAxis:
    """Where the x labels go: the chart width they need, their slant, and which columns get one."""

    width: int
    left: int
    bottom: int
    rotated: bool
    every: int  # a label on every ``every``-th column (1: all of them)


def _x_axis(labels: Sequence[str], *, width: int, max_width: int, left: int, right: int) -> _XAxis:
    """Grow the chart until every label fits flat; past ``max_width`` slant them, then thin them."""
    n = max(len(labels), 1)
    label_w = max((_text_width(label, _TICK_PX) for label in labels), default=0.0)
    cap = max(width, max_width)
    flat = left + right + math.ceil(n * (label_w + _FLAT_GAP))
    if flat <= cap:
        return _XAxis(width=max(width, flat), left=left, bottom=46, rotated=False, every=1)
    # Rotated and anchored at their end, labels hang down-left of their column.
    drop = math.ceil((label_w + 6) * _SIN + _TICK_PX * _COS)
    reach = math.ceil((label_w + 6) * _COS)
    wide = min(cap, max(width, left + right + n * _SLANT_PITCH))
    pitch = (wide - left - right) / n
    every = max(1, math.ceil(_SLANT_PITCH / pitch - 1e-9))
    left = max(left, math.ceil(reach - pitch / 2) + 4)
    return _XAxis(width=wide, left=left, bottom=drop + 24, rotated=True, every=every)


def line_plot_svg(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    title: str,
    hollow: Sequence[bool] = (),
    width: int = 760,
    height: int = 300,
    max_width: int = 1320,
) -> str:
    """A line chart on a 0..1 axis: one polyline per series, gaps where a value is None.

    ``hollow[i]`` draws the markers of column i unfilled (e.g. rejected versions). ``width`` and
    ``height`` are the minimum size: the chart widens (up to ``max_width``) so that every x label
    fits flat; beyond that the labels are slanted 60°, and if they still crowd only every k-th
    column is labelled (each marker keeps its label in its tooltip). The legend and the plot
    height are kept, the bottom margin grows with slanted labels.
    """
    legend_w = max((_text_width(name, _LEGEND_PX) for name in series), default=0.0)
    right = max(120, math.ceil(42 + legend_w + 12))
    axis = _x_axis(labels, width=width, max_width=max_width, left=48, right=right)
    left, top, bottom = axis.left, 30, axis.bottom
    width = max(axis.width, math.ceil(left + _text_width(title, _TITLE_PX) * 1.1 + 12))  # title is bold
    ph = height - top - 46
    height = top + ph + bottom
    pw = width - left - right
    n = max(len(labels), 1)

    def x(i: int) -> float:
        return left + (pw * (i + 0.5) / n)

    def y(v: float) -> float:
        return top + ph * (1 - max(0.0, min(1.0, v)))

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" aria-label="{_e(title)}">'),
           f'<title>{_e(title)}</title>',
           f'<text x="{left}" y="18" class="svg-title">{_e(title)}</text>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        ty = y(tick)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{ty:.1f}" y2="{ty:.1f}" class="grid"/>')
        out.append(f'<text x="{left - 6}" y="{ty + 4:.1f}" text-anchor="end" class="tick">{tick:.2f}</text>')
    base = top + ph
    for i, label in enumerate(labels):
        out.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{base}" y2="{base + 4}" class="axis"/>')
        if i % axis.every:
            continue
        if axis.rotated:
            lx, ly = x(i) + 4, base + 12
            out.append(f'<text x="{lx:.1f}" y="{ly}" text-anchor="end" transform="rotate(-{_SLANT_DEG} {lx:.1f} {ly})" '
                       f'class="tick xtick">{_e(label)}</text>')
        else:
            out.append(f'<text x="{x(i):.1f}" y="{base + 16}" text-anchor="middle" class="tick xtick">'
                       f'{_e(label)}</text>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{base}" class="axis"/>')
    out.append(f'<line x1="{left}" x2="{left + pw}" y1="{base}" y2="{base}" class="axis"/>')
    for s, (name, values) in enumerate(series.items()):
        color = SERIES_COLORS[s % len(SERIES_COLORS)]
        width_px = 2.5 if s == 0 else 1.5
        segment: list[str] = []
        segments: list[list[str]] = []
        for i, v in enumerate(values):
            if v is None:
                if segment:
                    segments.append(segment)
                segment = []
                continue
            segment.append(f"{x(i):.1f},{y(float(v)):.1f}")
        if segment:
            segments.append(segment)
        for seg in segments:
            out.append(f'<polyline points="{" ".join(seg)}" fill="none" stroke="{color}" '
                       f'stroke-width="{width_px}" class="series" data-series="{_e(name)}"/>')
        for i, v in enumerate(values):
            if v is None:
                continue
            fill = "#ffffff" if i < len(hollow) and hollow[i] else color
            out.append(f'<circle cx="{x(i):.1f}" cy="{y(float(v)):.1f}" r="3.5" fill="{fill}" stroke="{color}">'
                       f'<title>{_e(name)} {_e(labels[i])}: {float(v):.3f}</title></circle>')
        ly = top + 14 + 18 * s
        out.append(f'<line x1="{left + pw + 16}" x2="{left + pw + 36}" y1="{ly - 4}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="{width_px}"/>')
        out.append(f'<text x="{left + pw + 42}" y="{ly}" class="legend">{_e(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


_SUMMARY_CHARS = 90  # longer summaries are cut in the graph; the table and the tooltip keep them whole


def _lineage_label(v: VersionInfo, marks: dict[str, str | None]) -> tuple[str, str]:
    """(label, summary) of a lineage node: name, status, set_F and marks; the summary, shortened."""
    tags = [m for m, name in marks.items() if name == v.name]
    set_f = v.record.scores.overall.get("set_F") if v.record and v.record.scores else None
    label = f"{v.name} {v.status}" + (f" set_F {set_f:.3f}" if isinstance(set_f, (int, float)) else "")
    label += f" [{', '.join(tags)}]" if tags else ""
    summary = v.summary if len(v.summary) <= _SUMMARY_CHARS else v.summary[:_SUMMARY_CHARS - 1] + "…"
    return label, summary


def lineage_svg(versions: Sequence[VersionInfo], marks: dict[str, str | None]) -> str:
    """The version tree: one row per version, indented by depth, edges from parent to child.

    The width is the tree plus the widest label (estimated generously), so no label is cut.
    """
    depth: dict[str, int] = {}
    row = {v.name: i for i, v in enumerate(versions)}
    for v in versions:
        depth[v.name] = depth[v.parent] + 1 if v.parent in depth else 0
    step_x, step_y, left, top = 34, 30, 20, 24
    max_depth = max(depth.values(), default=0)
    text_x = left + step_x * (max_depth + 1)
    labels = {v.name: _lineage_label(v, marks) for v in versions}
    text_w = max((_text_width(f"{label} {summary}", 12) for label, summary in labels.values()), default=0.0)
    width = max(240, math.ceil(text_x + text_w + 16))
    height = top + step_y * max(len(versions), 1)

    def pos(name: str) -> tuple[int, int]:
        return left + step_x * depth[name], top + step_y * row[name]

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" aria-label="version lineage">'), "<title>version lineage</title>"]
    for v in versions:
        if v.parent in row:
            (px, py), (cx, cy) = pos(v.parent), pos(v.name)
            out.append(f'<path d="M{px},{py} L{px},{cy} L{cx},{cy}" fill="none" class="edge" '
                       f'data-edge="{_e(v.parent)}-{_e(v.name)}"/>')
    for v in versions:
        cx, cy = pos(v.name)
        color = STATUS_COLORS.get(v.status, "#bdbdbd")
        label, summary = labels[v.name]
        out.append(f'<circle cx="{cx}" cy="{cy}" r="7" fill="{color}" class="node" data-version="{_e(v.name)}">'
                   f'<title>{_e(v.name)}: {_e(v.summary)}</title></circle>')
        out.append(f'<text x="{text_x}" y="{cy + 4}" class="node-label">{_e(label)}'
                   f'<tspan class="muted"> {_e(summary)}</tspan></text>')
    out.append("</svg>")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------
# HTML sections


def _table_html(table: Table, *, css: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in table.header)
    body = []
    for row in table.rows:
        cells = []
        for i, cell in enumerate(row):
            cls = ' class="num"' if isinstance(cell, (int, float)) and not isinstance(cell, bool) else ""
            tag = "th" if i == 0 else "td"
            cells.append(f"<{tag}{cls}>{_e(format_cell(cell))}</{tag}>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="{css}"><caption>{_e(table.title)}</caption><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _lineage_table(data: ReportData) -> str:
    rows = []
    for v in data.versions:
        r = v.record
        set_f = r.scores.overall.get("set_F") if r and r.scores else None
        tags = " ".join(f'<span class="tag">{_e(m)}</span>' for m, n in data.marks.items() if n == v.name)
        rows.append(
            f'<tr class="status-{_e(v.status)}"><th><a href="#{_e(v.name)}">{_e(v.name)}</a> {tags}</th>'
            f"<td>{_e(v.parent or '–')}</td><td>{_e(v.status)}</td><td class=\"num\">{_e(format_cell(set_f))}</td>"
            f"<td>{_e(v.feature)}</td><td>{_e(v.summary)}</td><td>{_e(r.reason if r else '')}</td></tr>"
        )
    return ('<table class="lineage-table"><caption>lineage</caption><thead><tr><th>version</th><th>parent</th>'
            "<th>status</th><th>set_F</th><th>feature</th><th>summary</th><th>reason</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _scores_plot(data: ReportData) -> str:
    scored = [r for r in data.records if r.scores]
    if not scored:
        return '<p class="muted">No scored versions yet.</p>'
    labels = [r.version for r in scored]
    series: dict[str, list[float | None]] = {"set_F": [_num(r.scores.overall.get("set_F")) for r in scored]}
    for fam in FAMILIES:
        series[fam] = [_num(r.scores.families.get(fam)) for r in scored]
    svg = line_plot_svg(labels, series, title="scores per version (validation): set_F and component F1 by family",
                        hollow=[r.status in ("rejected", "invalid") for r in scored])
    return f'<div class="scroll">{svg}</div>'


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _tables(data: ReportData) -> str:
    if not data.records:
        return '<p class="muted">The ledger has no version records yet.</p>'
    # Wide tables (one column per version) scroll inside the page instead of widening it.
    parts = [f'<div class="scroll">{_table_html(feature_table(data.records), css="features")}</div>']
    try:
        parts.append(f'<div class="scroll">{_table_html(metric_table(data.records, REPORT_METRICS), css="metrics")}'
                     "</div>")
    except LedgerError as exc:  # collect() keeps one context, so this only guards future changes
        parts.append(f'<p class="warning">{_e(exc)}</p>')
    return "\n".join(parts)


CHANGE_KINDS: tuple[str, ...] = ("fixed", "improved", "worsened", "broke")
# Triangles (plus a cell outline) for crossing the correct line, arrows for set_F moves.
CHANGE_MARKS: dict[str, str] = {"fixed": "▲", "improved": "↑", "worsened": "↓", "broke": "▼"}
CHANGE_MEANING: dict[str, str] = {
    "fixed": "correct now, not in the parent",
    "improved": "set_F up vs the parent, not yet correct",
    "worsened": "set_F down vs the parent, was not correct either",
    "broke": "correct in the parent, not now",
}
_BETTER, _WORSE = ("fixed", "improved"), ("worsened", "broke")
_SET_F_EPS = 1e-9  # per-question set_F is a ratio of small counts; this only absorbs float noise


def question_change(now: QuestionOutcome | None, before: QuestionOutcome | None) -> str | None:
    """How one question moved from the parent (``before``) to the child (``now``), if at all.

    Reaching or losing ``correct`` wins (``fixed`` / ``broke``; this catches a wrong answer order,
    where set_F stays 1); otherwise the per-question set_F decides (``improved`` / ``worsened``).
    A question missing on either side, or without gold on either side, has no change.
    """
    if now is None or before is None or "gold_unavailable" in (now.outcome, before.outcome):
        return None
    now_ok, before_ok = now.outcome == "correct", before.outcome == "correct"
    if now_ok != before_ok:
        return "fixed" if now_ok else "broke"
    if now.set_F is None or before.set_F is None:
        return None
    if now.set_F > before.set_F + _SET_F_EPS:
        return "improved"
    if now.set_F < before.set_F - _SET_F_EPS:
        return "worsened"
    return None


@dataclass(frozen=True)
class Changes:
    """Per-question changes of a version relative to its parent: uid -> one of CHANGE_KINDS."""

    kinds: dict[str, str] = field(default_factory=dict)

    def of(self, kind: str) -> list[str]:
        return sorted((u for u, k in self.kinds.items() if k == kind), key=_uid_key)

    @property
    def better(self) -> list[str]:
        """Questions fixed or improved."""
        return sorted((u for u, k in self.kinds.items() if k in _BETTER), key=_uid_key)

    @property
    def worse(self) -> list[str]:
        """Questions worsened or broken."""
        return sorted((u for u, k in self.kinds.items() if k in _WORSE), key=_uid_key)

    def counts(self) -> str:
        return ", ".join(f"{len(self.of(k))} {k}" for k in CHANGE_KINDS)


def changes(child: VersionRecord, parent: VersionRecord | None) -> Changes:
    """Every question whose outcome moved between ``parent`` and ``child`` (see ``question_change``)."""
    if parent is None:
        return Changes()
    kinds = {}
    for uid in set(child.outcomes) | set(parent.outcomes):
        kind = question_change(child.outcomes.get(uid), parent.outcomes.get(uid))
        if kind is not None:
            kinds[uid] = kind
    return Changes(kinds)


def _uid_key(uid: str) -> tuple[str, int, str]:
    prefix, _, rest = uid.partition(":")
    qid, _, lang = rest.partition("-")
    return (prefix, int(qid) if qid.isdigit() else 1 << 30, rest if not qid.isdigit() else lang)


def _ink(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (#rrggbb)."""
    r, g, b = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _fmt_f(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _outcome_matrix(data: ReportData) -> str:
    evaluated = [v for v in data.versions if v.record is not None and v.record.outcomes]
    if not evaluated:
        return '<p class="muted">No per-question outcomes recorded yet.</p>'
    by_name = {v.name: v for v in data.versions}
    uids = sorted({u for v in evaluated for u in v.record.outcomes}, key=_uid_key)  # type: ignore[union-attr]
    moved: dict[str, Changes] = {}
    head = ['<th class="q">question</th>']
    for v in evaluated:
        parent = by_name.get(v.parent or "")
        ch = changes(v.record, parent.record if parent else None)  # type: ignore[arg-type]
        moved[v.name] = ch
        tip = f"{v.status}; vs {v.parent}: {ch.counts()}" if v.parent else v.status
        head.append(f'<th title="{_e(tip)}" class="status-{_e(v.status)}">{_e(v.name)}<br>'
                    f'<small class="counts">+{len(ch.better)} / −{len(ch.worse)}</small></th>')
    rows = []
    for uid in uids:
        text = data.questions.get(uid, "")
        cells = [f'<th class="q" title="{_e(text)}">{_e(uid)} <span class="muted">{_e(text[:70])}</span></th>']
        for v in evaluated:
            o = v.record.outcomes.get(uid)  # type: ignore[union-attr]
            if o is None:
                cells.append('<td class="cell none" title="not evaluated"></td>')
                continue
            flag = moved[v.name].kinds.get(uid, "")
            tip = f"{uid} {v.name}: {o.outcome}" + (f" set_F {o.set_F:.3f}" if o.set_F is not None else "")
            if flag:
                parent_record = by_name[v.parent or ""].record
                before = parent_record.outcomes.get(uid) if parent_record else None
                tip += (f" ({flag} vs {v.parent}: {before.outcome if before else '–'}, "
                        f"set_F {_fmt_f(before.set_F if before else None)} → {_fmt_f(o.set_F)})")
            color = OUTCOME_COLORS.get(o.outcome, "#ffffff")
            cells.append(f'<td class="cell {_e(o.outcome)} {flag}" style="background:{color};color:{_ink(color)}"'
                         f' title="{_e(tip)}">{CHANGE_MARKS.get(flag, "")}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    legend = " ".join(f'<span class="swatch" style="background:{c}"></span>{_e(o)}' for o, c in OUTCOME_COLORS.items()
                      if o in OUTCOMES)
    marks = " ".join(f'<span class="change {k}"><b>{CHANGE_MARKS[k]}</b> {_e(k)}: {_e(CHANGE_MEANING[k])}</span>'
                     for k in CHANGE_KINDS)
    return (f'<p class="legend">{legend}</p>'
            f'<p class="legend change-legend">Change of each question relative to the parent version, by its '
            f"outcome and set_F: {marks}<br>Column heads count <b>+</b> fixed or improved / <b>−</b> worsened "
            f"or broke.</p>"
            f'<div class="scroll"><table class="matrix"><caption>questions x versions (outcome)</caption>'
            f'<thead><tr>{"".join(head)}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def _diff_html(diff: str) -> str:
    if not diff.strip():
        return '<p class="muted">No diff (identical to the parent, or the seed).</p>'
    lines = []
    for line in diff.splitlines():
        cls = ("add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---")
               else "hunk" if line.startswith("@@") else "")
        lines.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def _version_sections(data: ReportData) -> str:
    by_name = {v.name: v for v in data.versions}
    parts = []
    for v in data.versions:
        r = v.record
        parent = by_name.get(v.parent or "")
        moved = changes(r, parent.record if parent else None) if r else Changes()
        facts = [("parent", v.parent or "–"), ("status", v.status), ("commit", v.commit[:12]),
                 ("feature", v.feature or "–"), ("proposer", r.proposer if r else "–"),
                 ("reason", r.reason if r else "–")]
        if r is not None:
            set_f = r.scores.overall.get("set_F") if r.scores else None
            facts += [("set_F", format_cell(set_f)), ("cost", f"${r.cost_usd:.4f}"),
                      ("tokens", f"{r.tokens.input} in / {r.tokens.output} out"), ("wall", f"{r.wall_s:.1f} s")]
            if r.diff_stats:
                facts.append(("diff", f"{r.diff_stats.files} files, +{r.diff_stats.insertions} −{r.diff_stats.deletions}"))
        dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(val)}</dd>" for k, val in facts)
        rationale = (r.rationale if r and r.rationale else v.rationale) or ""
        change_list = ""
        if moved.kinds:
            change_list = "<p>" + "<br>".join(
                f"<b>{CHANGE_MARKS[k]} {_e(k)}</b> ({len(moved.of(k))}): {_e(', '.join(moved.of(k)) or '–')}"
                for k in CHANGE_KINDS) + "</p>"
        parts.append(
            f'<section class="version status-{_e(v.status)}" id="{_e(v.name)}"><h3>{_e(v.name)}: {_e(v.summary)}</h3>'
            f'<dl>{dl}</dl>{change_list}<h4>rationale</h4><pre class="rationale">{_e(rationale or "–")}</pre>'
            f"<details{' open' if len(v.diff) < 4000 else ''}><summary>diff from {_e(v.parent or '–')}</summary>"
            f"{_diff_html(v.diff)}</details></section>"
        )
    return "\n".join(parts)


def _test_section(data: ReportData) -> str:
    tests = [e for e in data.events if e.event == "test_evaluation"]
    if not tests:
        return '<p class="muted">No sealed test evaluation yet (it runs once, at the end of a loop).</p>'
    parts = []
    for e in tests:
        test, val = _as_dict(e.data.get("test")), _as_dict(e.data.get("validation"))
        metrics = [m for m in (*DEFAULT_METRICS, "n") if m in test or m in val]
        rows = "".join(
            f"<tr><th>{_e(m)}</th><td class=\"num\">{_e(format_cell(_cellify(val.get(m))))}</td>"
            f"<td class=\"num\">{_e(format_cell(_cellify(test.get(m))))}</td></tr>"
            for m in metrics
        )
        ctx = e.data.get("test_context")
        parts.append(
            f'<div class="test-eval"><p><b>{_e(e.version or "–")}</b> evaluated on the sealed test split at '
            f"{_e(e.at.isoformat(timespec='seconds'))}</p>"
            f'<table class="test"><caption>sealed test evaluation</caption><thead><tr><th>metric</th>'
            f"<th>validation</th><th>test</th></tr></thead><tbody>{rows}</tbody></table>"
            f'<p class="muted">test context: {_e(json.dumps(ctx, sort_keys=True) if ctx else "–")}</p></div>'
        )
    return "\n".join(parts)


def _as_dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _cellify(value: object) -> Any:
    return value if value is None or isinstance(value, (str, int, float, bool)) else json.dumps(value)


def _events_table(data: ReportData) -> str:
    if not data.events:
        return '<p class="muted">No events.</p>'
    rows = "".join(
        f"<tr><td>{_e(e.at.isoformat(timespec='seconds'))}</td><td>{_e(e.event)}</td><td>{_e(e.version or '')}</td>"
        f"<td><code>{_e(json.dumps(e.data, sort_keys=True)[:300])}</code></td></tr>"
        for e in data.events
    )
    return ('<table class="events"><caption>ledger events</caption><thead><tr><th>at</th><th>event</th>'
            f"<th>version</th><th>data</th></tr></thead><tbody>{rows}</tbody></table>")


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px} h4{font-size:13px;margin:8px 0 4px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
caption{text-align:left;font-weight:600;padding:4px 0;color:#555}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#888} .warning{color:#b71c1c}
.tag{background:#1565c0;color:#fff;border-radius:3px;padding:0 4px;font-size:11px}
tr.status-accepted th:first-child{border-left:4px solid #2e7d32}
tr.status-rejected th:first-child{border-left:4px solid #e53935}
tr.status-baseline th:first-child{border-left:4px solid #1565c0}
tr.status-invalid th:first-child{border-left:4px solid #757575}
.scroll{overflow-x:auto}
table.matrix thead th{white-space:nowrap}
table.matrix td.cell{width:26px;min-width:26px;height:18px;text-align:center;color:#fff;font-size:11px;padding:0}
table.matrix td.cell.none{background:#fff}
table.matrix td.cell{font-size:13px;font-weight:bold;line-height:18px}
table.matrix td.broke{outline:2px solid #000;outline-offset:-2px}
table.matrix td.fixed{outline:2px dashed #000;outline-offset:-2px}
p.change-legend span.change{white-space:nowrap;margin-right:14px}
p.change-legend span.fixed,p.change-legend span.broke{border:1px dashed #000;padding:0 3px}
p.change-legend span.broke{border-style:solid}
table.matrix th.q{font-weight:normal;white-space:nowrap;max-width:520px;overflow:hidden;text-overflow:ellipsis}
.swatch{display:inline-block;width:12px;height:12px;margin:0 3px 0 10px;vertical-align:middle;border:1px solid #999}
pre{background:#f8f8f8;border:1px solid #e4e4e4;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
pre.diff .add{color:#1b5e20;background:#e8f5e9} pre.diff .del{color:#b71c1c;background:#ffebee}
pre.diff .hunk{color:#6a1b9a}
section.version{border-left:4px solid #ccc;padding-left:12px;margin:12px 0}
section.status-accepted{border-color:#2e7d32} section.status-rejected{border-color:#e53935}
section.status-baseline{border-color:#1565c0}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:4px 0} dt{color:#666} dd{margin:0}
svg{background:#fff;border:1px solid #eee;margin:6px 0}
svg .grid{stroke:#eee} svg .axis{stroke:#999} svg .tick{font-size:11px;fill:#666}
svg .legend{font-size:12px;fill:#333} svg .svg-title{font-size:13px;font-weight:600;fill:#333}
svg .edge{stroke:#999;stroke-width:1.5} svg .node-label{font-size:12px;fill:#222} svg .muted{fill:#888}
"""


def render_report(data: ReportData) -> str:
    """The complete HTML document (a string; no external resources)."""
    ctx = data.context
    ctx_line = (f"dataset {ctx['dataset_id']}, split {ctx['split']} ({ctx['n_questions']} questions), "
                f"KG {ctx['kg_fingerprint']}" if ctx else "no evaluation yet")
    marks = ", ".join(f"{m}: {n or '–'}" for m, n in data.marks.items())
    notes = []
    if data.other_contexts:
        notes.append(f"{data.other_contexts} other evaluation context(s) in the ledger are not shown in the tables.")
    if data.warning:
        notes.append(data.warning)
    counts = Counter(v.status for v in data.versions)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    body = f"""
<h1>{_e(data.title)}</h1>
<p class="muted">{_e(len(data.versions))} versions ({_e(summary)}) · {_e(ctx_line)} · marks: {_e(marks)} · generated {_e(generated)}</p>
{''.join(f'<p class="warning">{_e(n)}</p>' for n in notes)}
<h2 id="lineage">Lineage</h2>
<div class="scroll">{lineage_svg(data.versions, data.marks)}</div>
{_lineage_table(data)}
<h2 id="scores">Scores per version</h2>
{_scores_plot(data)}
<h2 id="tables">Features and metrics</h2>
{_tables(data)}
<h2 id="outcomes">Questions x versions</h2>
{_outcome_matrix(data)}
<h2 id="test">Sealed test evaluation</h2>
{_test_section(data)}
<h2 id="versions">Versions</h2>
{_version_sections(data)}
<h2 id="events">Events</h2>
{_events_table(data)}
"""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(data.title)}</title><style>{_CSS}</style></head><body>{body}</body></html>\n")


def write_report(ws: Any, out_dir: str | Path) -> Path:
    """Render the report of workspace ``ws`` to ``out_dir/index.html``; returns that path."""
    from worker_agent.trace import atomic_write_text

    ledger = Ledger(ws.ledger_path, recover=False)
    data = collect(ws.versions, ledger, title=f"Researcher report: {ws.root.name}", questions=_question_texts(ws))
    path = Path(out_dir) / REPORT_NAME
    atomic_write_text(path, render_report(data))
    return path
