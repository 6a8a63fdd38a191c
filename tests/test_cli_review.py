"""`researcher deploy / export / report` and `demo` through the CLI."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from researcher.cli import app
from researcher.workspace import find_workspace
from worker_agent.spec import AgentSpec

runner = CliRunner()


def test_demo_then_deploy_export_report(tmp_path, monkeypatch):
    ws_dir = tmp_path / "demo-ws"
    result = runner.invoke(app, ["demo", str(ws_dir), "-n", "3", "--json"])
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["iterations"] == 3 and run["best"] and run["test"]["test"]["set_F"] is not None
    monkeypatch.chdir(ws_dir)
    assert runner.invoke(app, ["serve"]).exit_code == 1  # nothing deployed yet: one clear line
    result = runner.invoke(app, ["deploy", "best"])
    assert result.exit_code == 0, result.output
    ws = find_workspace(ws_dir)
    assert ws.versions.marked("deployed") == run["best"]
    assert ws.ledger.events("deployed")[-1].version == run["best"]
    result = runner.invoke(app, ["export", run["best"], str(tmp_path / "exported")])
    assert result.exit_code == 0, result.output
    spec = AgentSpec.load(tmp_path / "exported" / "spec")
    assert spec.files() == ws.versions.files(run["best"])
    manifest = json.loads((tmp_path / "exported" / "manifest.json").read_text())
    assert manifest["version"] == run["best"]
    result = runner.invoke(app, ["report", "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "<svg" in html and run["best"] in html
    # running demo again on the same workspace resumes instead of failing
    again = runner.invoke(app, ["demo", str(ws_dir), "-n", "1", "--json"])
    assert again.exit_code == 0, again.output
    assert runner.invoke(app, ["deploy", "v999"]).exit_code == 1
