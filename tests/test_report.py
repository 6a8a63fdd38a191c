"""The static HTML report: content from a real version store + ledger, rendered by headless Chromium."""

from __future__ import annotations

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

from researcher.ledger import VersionRecord
from researcher.report import changes, line_plot_svg, write_report
from researcher.workspace import Workspace, init_workspace

EVIL = "<script>alert('x')</script>"


def _ctx(ws: Workspace) -> dict[str, object]:
    return {**ws.data.context("validation"), "spec_commit": None}


def _record(ws: Workspace, name: str, status: str, set_f: float, outcomes: dict[str, str], **extra: object
            ) -> VersionRecord:
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
        outcomes={u: {"outcome": o, "set_F": 1.0 if o == "correct" else 0.0} for u, o in outcomes.items()},
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
                             {a: "correct", b: "correct", c: "syntax_error", d: "correct"}))
    ws.ledger.append(_record(ws, "v3", "rejected", 0.7,
                             {a: "partially_correct", b: "correct", c: "correct", d: "correct"}))
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


def test_outcome_matrix_marks_fixed_and_broken(workspace: Workspace, report: Path) -> None:
    a, b, c, _ = workspace.__dict__["uids"]
    page = report.read_text(encoding="utf-8")
    cells = re.findall(r'<td class="cell ([a-z_]+) ?([a-z]*)" style="background:(#[0-9a-f]+)" title="([^"]*)"', page)
    by_title = {t.split(": ")[0]: (o, f, col) for o, f, col, t in cells}
    assert by_title[f"{b} v2"] == ("correct", "fixed", "#2e7d32")
    assert by_title[f"{c} v2"] == ("syntax_error", "broke", "#8e24aa")
    assert by_title[f"{a} v3"][:2] == ("partially_correct", "broke")  # relative to v2, its parent
    assert by_title[f"{c} v3"][:2] == ("correct", "fixed")
    assert by_title[f"{a} v2"][:2] == ("correct", "")
    assert len(cells) == 12  # 4 questions x 3 evaluated versions; the invalid v4 has no column
    assert "+2 / −1" in page  # v2 fixed b, d and broke c


def test_changes_against_parent(workspace: Workspace) -> None:
    recs = {r.version: r for r in workspace.ledger.versions()}
    _, b, c, d = workspace.__dict__["uids"]
    assert changes(recs["v2"], recs["v1"]) == (sorted([b, d]), [c])
    assert changes(recs["v1"], None) == ([], [])


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
