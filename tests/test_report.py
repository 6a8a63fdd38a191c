"""The static HTML report: content from a real version store + ledger, rendered by headless Chromium."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import struct
import subprocess
import zlib
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest

from researcher.ledger import QuestionOutcome, VersionRecord
from researcher.report import (
    VersionInfo,
    changes,
    line_plot_svg,
    lineage_svg,
    question_change,
    write_report,
)
from researcher.workspace import Workspace, init_workspace

EVIL = "<script>alert('x')</script>"


def _ctx(ws: Workspace) -> dict[str, object]:
    return {**ws.data.context("validation"), "spec_commit": None}


def _record(ws: Workspace, name: str, status: str, set_f: float, outcomes: dict[str, str | tuple[str, float]],
            **extra: object) -> VersionRecord:
    """``outcomes``: uid -> outcome (set_F 1 if correct else 0) or (outcome, set_F)."""
    v = ws.versions.get(name)
    scored = status != "invalid"
    return VersionRecord(
        version=name, parent=v.parent, commit=v.commit, created_at=datetime.now(UTC), status=status,
        reason=f"{name} reason", summary=v.summary, rationale=v.rationale, feature_label=v.feature,
        proposer="search", features={"few_shot": 1, "rule:select_distinct": name in ("v2", "v3")},
        eval_context=_ctx(ws) if scored else None,
        scores=({"overall": {"set_F": set_f, "set_P": set_f, "set_recall": set_f, "exact_match": 0.1},
                 "families": {"nodes": set_f / 2, "predicates": 0.8, "inner_operators": 0.5, "outer_operators": 0.9}}
                if scored else {}),
        outcomes={u: ({"outcome": o[0], "set_F": o[1]} if isinstance(o, tuple)
                      else {"outcome": o, "set_F": 1.0 if o == "correct" else 0.0}) for u, o in outcomes.items()},
        **extra,
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = init_workspace(tmp_path_factory.mktemp("ws") / "w")
    store = ws.versions
    seed = store.files("v1")
    distinct = seed["rules.yaml"].replace("- id: select_distinct\n  enabled: false",
                                          "- id: select_distinct\n  enabled: true")
    assert distinct != seed["rules.yaml"]
    store.create({**seed, "rules.yaml": distinct}, parent="v1", summary="enable select_distinct",
                 rationale=f"Duplicates hurt precision {EVIL}", feature="rule:select_distinct")
    store.create({**seed, "rules.yaml": distinct + "\n# tweak\n"}, parent="v2", summary="comment tweak",
                 rationale="A no-op that should be rejected.", feature="none")
    store.create({**seed, "rules.yaml": seed["rules.yaml"] + "\n# other\n"}, parent="v1", summary="other branch",
                 rationale="An invalid branch.", feature="none")
    uids = [q.uid for q in ws.data.split("validation")][:4]
    a, b, c, d = uids
    ws.ledger.append(_record(ws, "v1", "baseline", 0.5,
                             {a: "correct", b: "wrong_answer", c: "correct", d: "empty_result"}))
    ws.ledger.append(_record(ws, "v2", "accepted", 0.75,
                             {a: "correct", b: "correct", c: "syntax_error", d: ("partially_correct", 0.5)}))
    ws.ledger.append(_record(ws, "v3", "rejected", 0.7,
                             {a: "partially_correct", b: "correct", c: "correct", d: "wrong_answer"}))
    ws.ledger.append(_record(ws, "v4", "invalid", 0.0, {}))
    ws.ledger.append_event("test_evaluation", "v2", {"test": {"set_F": 0.6125, "set_P": 0.7, "n": 12},
                                                     "validation": {"set_F": 0.75}, "test_context": {"split": "test"}})
    ws.ledger.append_event("deployed", "v2", {"commit": ws.versions.get("v2").commit})
    ws.versions.mark("v2", "best")
    ws.versions.mark("v2", "deployed")
    ws.__dict__["uids"] = uids  # for the assertions below
    return ws


@pytest.fixture(scope="module")
def report(workspace: Workspace, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(workspace, tmp_path_factory.mktemp("report"))


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.captions: list[str] = []
        self._in_caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_caption = tag == "caption"

    def handle_data(self, data: str) -> None:
        if self._in_caption:
            self.captions.append(data)
            self._in_caption = False


def test_report_content(workspace: Workspace, report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    parser = _Collect()
    parser.feed(page)
    tags = [t for t, _ in parser.tags]
    # offline: no script, no stylesheet links, nothing loaded from elsewhere
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert not any((attrs.get("src") or "").startswith("http") for _, attrs in parser.tags)
    assert EVIL not in page and html_escaped(EVIL) in page  # rationale escaped
    assert {"features by version", "metrics by version", "lineage", "questions x versions (outcome)",
            "sealed test evaluation"} <= set(parser.captions)
    assert tags.count("svg") == 2  # lineage graph + score plot
    for name in ("v1", "v2", "v3", "v4"):
        assert f'id="{name}"' in page and f'data-version="{name}"' in page
    # lineage edges, including the branch v1 -> v4
    assert {"v1-v2", "v2-v3", "v1-v4"} <= set(re.findall(r'data-edge="([^"]+)"', page))
    # metrics table shows the scores, features table the changed rule
    assert "0.750" in page and "rule:select_distinct" in page
    # score plot has the overall series and one per family
    assert set(re.findall(r'data-series="([^"]+)"', page)) == {"set_F", "nodes", "predicates", "inner_operators",
                                                               "outer_operators"}
    # the diff of v2 is shown, colored
    assert '<span class="add">+  enabled: true</span>' in page
    # sealed test figures
    assert "0.613" in page  # 0.6125 formatted with three decimals
    assert "enable select_distinct" in page and "v2 reason" in page


def html_escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_outcome_matrix_marks_changes_by_set_f(workspace: Workspace, report: Path) -> None:
    a, b, c, d = workspace.__dict__["uids"]
    page = report.read_text(encoding="utf-8")
    cells = re.findall(r'<td class="cell ([a-z_]+) ?([a-z]*)" style="background:(#[0-9a-f]+);color:#[0-9a-f]+" '
                       r'title="([^"]*)">([^<]*)</td>', page)
    by_title = {t.split(": ")[0]: (o, f, col, mark) for o, f, col, t, mark in cells}
    assert by_title[f"{b} v2"] == ("correct", "fixed", "#2e7d32", "▲")
    assert by_title[f"{c} v2"] == ("syntax_error", "broke", "#8e24aa", "▼")
    assert by_title[f"{d} v2"][:2] == ("partially_correct", "improved")  # empty_result 0 -> 0.5
    assert by_title[f"{a} v3"][:2] == ("partially_correct", "broke")  # relative to v2, its parent
    assert by_title[f"{c} v3"][:2] == ("correct", "fixed")
    # partially_correct -> wrong_answer: never correct on either side, yet a regression
    assert by_title[f"{d} v3"][:2] == ("wrong_answer", "worsened")
    assert by_title[f"{d} v3"][3] == "↓" and by_title[f"{d} v2"][3] == "↑"
    assert by_title[f"{a} v2"] == ("correct", "", "#2e7d32", "")
    assert len(cells) == 12  # 4 questions x 3 evaluated versions; the invalid v4 has no column
    counts = re.findall(r'<small class="counts">([^<]*)</small>', page)
    assert counts == ["+0 / −0", "+2 / −1", "+1 / −2"]  # v1; v2 fixed b, improved d, broke c; v3
    tip = re.search(rf'title="({re.escape(d)} v3: [^"]*)"', page)
    assert tip and "worsened vs v2: partially_correct, set_F 0.500 → 0.000" in tip.group(1)
    # the legend explains every marker
    legend = re.search(r'<p class="legend change-legend">(.*?)</p>', page, re.DOTALL)
    assert legend and all(f"<b>{m}</b> {k}" in legend.group(1) for k, m in
                          (("fixed", "▲"), ("improved", "↑"), ("worsened", "↓"), ("broke", "▼")))
    # the version section of v3 lists its changes by kind
    section = page[page.index('id="v3"'):page.index('id="v4"')]
    assert f"<b>↓ worsened</b> (1): {d}" in section and f"<b>▼ broke</b> (1): {a}" in section


def test_changes_against_parent(workspace: Workspace) -> None:
    recs = {r.version: r for r in workspace.ledger.versions()}
    a, b, c, d = workspace.__dict__["uids"]
    v2 = changes(recs["v2"], recs["v1"])
    assert (v2.of("fixed"), v2.of("improved"), v2.of("worsened"), v2.of("broke")) == ([b], [d], [], [c])
    assert set(v2.better) == {b, d} and v2.worse == [c]
    v3 = changes(recs["v3"], recs["v2"])
    assert v3.kinds == {a: "broke", c: "fixed", d: "worsened"}
    assert changes(recs["v1"], None).kinds == {}


@pytest.mark.parametrize(("before", "now", "kind"), [
    (("partially_correct", 0.4), ("wrong_answer", 0.0), "worsened"),
    (("partially_correct", 0.4), ("partially_correct", 0.2), "worsened"),
    (("wrong_answer", 0.0), ("partially_correct", 0.3), "improved"),
    (("empty_result", 0.0), ("partially_correct", 0.3), "improved"),
    (("partially_correct", 1.0), ("correct", 1.0), "fixed"),  # right set, now in the right order
    (("wrong_answer", 0.0), ("correct", 1.0), "fixed"),
    (("correct", 1.0), ("partially_correct", 0.9), "broke"),
    (("correct", 1.0), ("timeout", 0.0), "broke"),
    (("wrong_answer", 0.0), ("empty_result", 0.0), None),  # same set_F: no change
    (("partially_correct", 0.5), ("partially_correct", 0.5), None),
    (("correct", 1.0), ("correct", 1.0), None),
    (("gold_unavailable", None), ("correct", 1.0), None),  # nothing to compare against
    (("partially_correct", None), ("partially_correct", 0.5), None),
])
def test_question_change(before: tuple[str, float | None], now: tuple[str, float | None], kind: str | None) -> None:
    def outcome(o: tuple[str, float | None]) -> QuestionOutcome:
        return QuestionOutcome(outcome=o[0], set_F=o[1])

    assert question_change(outcome(now), outcome(before)) == kind
    assert question_change(outcome(now), None) is None and question_change(None, outcome(before)) is None


# ------------------------------------------------------------------------------------ SVG layout

_XTICK = re.compile(r'<text x="([0-9.]+)" y="([0-9.]+)" text-anchor="(middle|end)"( transform="rotate\(-(\d+) '
                    r'[0-9.]+ [0-9.]+\)")? class="tick xtick">([^<]*)</text>')


def _svg_size(svg: str) -> tuple[int, int]:
    m = re.search(r'<svg [^>]*width="(\d+)" height="(\d+)"', svg)
    assert m
    return int(m.group(1)), int(m.group(2))


def _xticks(svg: str) -> list[tuple[float, str, int]]:
    """(x, label, slant in degrees) of every x-axis label, left to right."""
    return [(float(m.group(1)), m.group(6), int(m.group(5) or 0)) for m in _XTICK.finditer(svg)]


def _labels(n: int) -> list[str]:
    return [f"v{i}" for i in range(1, n + 1)]


def test_plot_x_labels_of_thirty_versions_all_present_flat_and_apart() -> None:
    labels = _labels(31)
    svg = line_plot_svg(labels, {"set_F": [0.5] * 31}, title="t")
    ticks = _xticks(svg)
    assert [t[1] for t in ticks] == labels and {t[2] for t in ticks} == {0}
    # "v10".."v31": 3 glyphs of at most 0.64 em at 11 px = 21 px; 6 px of white space between
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ticks)]
    assert min(gaps) >= 27
    width, _ = _svg_size(svg)
    assert 760 < width <= 1320  # grew past the default to make room
    assert ticks[-1][0] + 12 < width - 120  # the last label stays clear of the legend column


def test_plot_few_labels_keep_the_default_size() -> None:
    svg = line_plot_svg(["v1", "v2", "v3"], {"set_F": [0.1, 0.2, 0.3]}, title="t")
    assert _svg_size(svg) == (760, 300) and len(_xticks(svg)) == 3


@pytest.mark.parametrize("n", [45, 70])
def test_plot_crowded_labels_slant_and_all_stay(n: int) -> None:
    labels = _labels(n)
    svg = line_plot_svg(labels, {"set_F": [0.5] * n}, title="t")
    ticks = _xticks(svg)
    assert [t[1] for t in ticks] == labels and {t[2] for t in ticks} == {60}
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ticks)]
    assert min(gaps) >= 15.9  # 13.8 px across the 60° slant: more than an 11 px line
    width, height = _svg_size(svg)
    assert width <= 1320 and height > 300  # the slanted labels get their own room below


def test_plot_very_crowded_labels_are_thinned_but_every_column_keeps_a_tick() -> None:
    labels = _labels(300)
    svg = line_plot_svg(labels, {"set_F": [0.5] * 300}, title="t")
    ticks = _xticks(svg)
    shown = [t[1] for t in ticks]
    assert shown[0] == "v1" and 15 < len(shown) < 300
    step = labels.index(shown[1])
    assert shown == labels[::step]  # a regular stride
    assert min(b[0] - a[0] for a, b in itertools.pairwise(ticks)) >= 15.9
    assert _svg_size(svg)[0] <= 1320
    assert svg.count('class="axis"/>') == 300 + 2  # a tick mark per column, plus the two axes
    assert svg.count("<title>set_F v300: 0.500</title>") == 1  # unlabelled columns keep their tooltip


def test_plot_long_labels_and_legend_names_widen_the_margins() -> None:
    long = ["v1-experimental-branch", "v2-experimental-branch"]
    svg = line_plot_svg(long, {"a_really_long_series_name_for_the_legend": [0.2, 0.4]}, title="t")
    ticks = _xticks(svg)
    assert len(ticks) == 2 and ticks[1][0] - ticks[0][0] >= 0.6 * 11 * len(long[0])
    legend_x = float(re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" class="legend">', svg)[0])
    assert _svg_size(svg)[0] - legend_x >= 0.6 * 12 * len("a_really_long_series_name_for_the_legend")


def _info(name: str, parent: str | None, summary: str) -> VersionInfo:
    return VersionInfo(name, parent, "0" * 40, summary, "", "", None)


def test_lineage_width_grows_with_the_longest_label() -> None:
    short = lineage_svg([_info("v1", None, "seed"), _info("v2", "v1", "few_shot 2")], {})
    summary = "set tools.surface_forms.fuzzy_threshold to 90 and WWW MMM"
    long = lineage_svg([_info("v1", None, "seed"), _info("v2", "v1", summary)], {"best": "v2"})
    (w_short, _), (w_long, _) = _svg_size(short), _svg_size(long)
    label = f"v2 unrecorded [best] {summary}"
    assert w_long - w_short >= 0.6 * 12 * (len(summary) - len("few_shot 2"))
    text_x = int(re.search(r'<text x="(\d+)"', long).group(1))  # type: ignore[union-attr]
    assert w_long >= text_x + 0.6 * 12 * len(label)  # room for the whole label, not a fixed 420 px
    assert summary in long  # shown whole
    deep = lineage_svg([_info(f"v{i}", f"v{i - 1}" if i > 1 else None, summary) for i in range(1, 9)],
                       {"best": "v8"})
    assert _svg_size(deep)[0] >= w_long + 6 * 34  # deeper trees push the labels right, and the width


def test_lineage_cuts_only_very_long_summaries() -> None:
    svg = lineage_svg([_info("v1", None, "x" * 300)], {})
    assert "x" * 89 + "…" in svg and "x" * 90 not in svg.split("<title>version lineage</title>")[1].split("</title>")[1]
    assert _svg_size(svg)[0] < 1200


def test_plot_gaps_and_escaping() -> None:
    svg = line_plot_svg(["v1", "<v2>", "v3"], {"s&F": [0.1, None, 0.9]}, title="t<1>", hollow=[False, False, True])
    assert svg.count("<polyline") == 2  # the None splits the line
    assert "&lt;v2&gt;" in svg and "s&amp;F" in svg and "t&lt;1&gt;" in svg
    assert 'fill="#ffffff"' in svg  # hollow marker


def test_empty_workspace_report(tmp_path: Path) -> None:
    ws = init_workspace(tmp_path / "w")
    page = write_report(ws, tmp_path / "out").read_text(encoding="utf-8")
    assert "No scored versions yet" in page and "ledger has no version records" in page
    assert "<svg" in page  # the lineage still shows v1


# ------------------------------------------------------------------------------------ chromium

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Measures what the browser actually laid out; injected into a copy, the report itself has no JS.
_PROBE = """<script>
window.addEventListener('load', () => {
  const box = el => { const r = el.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; };
  const out = {
    svgs: [...document.querySelectorAll('svg')].map(box),
    tables: Object.fromEntries([...document.querySelectorAll('table')].map(
        t => [t.querySelector('caption').textContent, box(t)])),
    polylines: [...document.querySelectorAll('polyline')].map(p => p.getTotalLength()),
    matrixColor: getComputedStyle(document.querySelector('td.cell.correct')).backgroundColor,
  };
  document.body.setAttribute('data-probe', JSON.stringify(out));
});
</script>"""


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}"]
    return subprocess.run(base + args, check=False, capture_output=True, text=True, timeout=60)


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) into rows of raw pixels."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, ul = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if ftype == 1:
                line[i] = (line[i] + left) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + up) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif ftype == 4:
                p = left + up - ul
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else ul)) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(b for j, b in enumerate(line) if j % 4 != 3))
        prev = line
    return width, height, rows


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    probed = tmp_path / "probe.html"
    probed.write_text(report.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    run = _chromium(["--virtual-time-budget=3000", "--dump-dom", probed.as_uri()], tmp_path / "profile")
    assert run.returncode == 0, run.stderr[-2000:]
    match = re.search(r'data-probe="([^"]+)"', run.stdout)
    assert match, "the layout probe did not run"
    import html

    probe = json.loads(html.unescape(match.group(1)))
    assert len(probe["svgs"]) == 2 and all(w > 200 and h > 80 for w, h in probe["svgs"])
    for caption in ("features by version", "metrics by version", "lineage", "questions x versions (outcome)",
                    "sealed test evaluation"):
        w, h = probe["tables"][caption]
        assert w > 100 and h > 40, caption
    assert probe["polylines"] and all(length > 10 for length in probe["polylines"])  # lines actually drawn
    assert probe["matrixColor"] == "rgb(46, 125, 50)"

    shot = tmp_path / "shot.png"
    run = _chromium(["--window-size=1300,1600", f"--screenshot={shot}", report.as_uri()], tmp_path / "profile2")
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    width, height, rows = _png_pixels(shot)
    assert (width, height) == (1300, 1600)
    colors = {row[i:i + 3] for row in rows[::4] for i in range(0, len(row), 12)}
    # the lineage nodes and plot lines are drawn: status/series colors appear on screen
    assert bytes.fromhex("2e7d32") in colors or bytes.fromhex("1565c0") in colors
    assert len(colors) > 20


# Measures every SVG of the page as laid out: text outside its SVG box, x labels that touch.
_SVG_PROBE = """<script>
window.addEventListener('load', () => {
  const out = [...document.querySelectorAll('svg')].map(svg => {
    const s = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')];
    const outside = texts.filter(t => {
      const r = t.getBoundingClientRect();
      return r.left < s.left - 0.5 || r.right > s.right + 0.5 || r.top < s.top - 0.5 || r.bottom > s.bottom + 0.5;
    }).map(t => t.textContent);
    const ticks = [...svg.querySelectorAll('text.xtick')];
    const crowded = [];
    for (let i = 1; i < ticks.length; i++) {
      const a = ticks[i - 1], b = ticks[i];
      const slant = /rotate\\(-(\\d+)/.exec(a.getAttribute('transform') || '');
      if (slant) {  // parallel slanted lines: their distance across the slant must exceed a line box
        const dx = b.x.baseVal[0].value - a.x.baseVal[0].value;
        if (dx * Math.sin(slant[1] * Math.PI / 180) < a.getBBox().height) crowded.push(a.textContent);
      } else if (a.getBoundingClientRect().right + 2 > b.getBoundingClientRect().left) {
        crowded.push(a.textContent);
      }
    }
    const labels = [...svg.querySelectorAll('text.node-label')].map(t => t.getBoundingClientRect().right - s.left);
    return {outside, crowded, ticks: ticks.length, width: s.width, labelRight: Math.max(0, ...labels)};
  });
  document.body.setAttribute('data-probe', JSON.stringify(out));
});
</script>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install -y chromium)")
def test_svg_text_fits_when_rendered(report: Path, tmp_path: Path) -> None:
    import html

    style = re.search(r"<style>.*?</style>", report.read_text(encoding="utf-8"), re.DOTALL)
    assert style  # the report's own CSS sets the SVG font sizes
    plots = [line_plot_svg(_labels(n), {"set_F": [0.5] * n, "nodes": [0.2] * n}, title=f"{n} versions")
             for n in (31, 70, 300)]
    plots.append(line_plot_svg(["v1-Experimental-WMW", "v2-Experimental-WMW"],
                               {"A_Really_Wide_Series_Name_WWW": [0.2, 0.4]}, title="long labels"))
    wide = "Set TOOLS.SURFACE_FORMS.FUZZY_THRESHOLD to 90 — MWMWMW @@@ %%% wwwmmm " * 2
    lineage = lineage_svg([_info("v1", None, "seed"), _info("v2", "v1", "set few_shot to 2"),
                           _info("v3", "v2", wide), _info("v4", "v1", "set tools.surface_forms.fuzzy_threshold to 90"),
                           _info("v5", "v4", "enable rule verify_nonempty")], {"best": "v3", "deployed": "v3"})
    page = tmp_path / "svg.html"
    page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8">{style.group(0)}</head><body>'
                    f'{"".join(plots)}{lineage}{_SVG_PROBE}</body></html>', encoding="utf-8")
    run = _chromium(["--virtual-time-budget=3000", "--window-size=1500,1200", "--dump-dom", page.as_uri()],
                    tmp_path / "profile")
    assert run.returncode == 0, run.stderr[-2000:]
    match = re.search(r'data-probe="([^"]+)"', run.stdout)
    assert match, "the layout probe did not run"
    probe = json.loads(html.unescape(match.group(1)))
    assert len(probe) == 5
    for svg in probe:
        assert svg["outside"] == [] and svg["crowded"] == [], svg
    assert [svg["ticks"] for svg in probe[:3]] == [31, 70, probe[2]["ticks"]] and 15 < probe[2]["ticks"] < 300
    # the lineage is as wide as its widest label needs, give or take a generous margin
    lin = probe[4]
    assert lin["labelRight"] > 700 and lin["width"] - lin["labelRight"] < 0.35 * lin["labelRight"]
