"""`researcher init / eval / ask`: workspace and direct modes, traces, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from researcher.cli import app
from researcher.workspace import PKG_DATA
from worker_agent.trace import STATUSES, TRACE_FORMAT

CK25 = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "ck25"
runner = CliRunner()
DEMO = PKG_DATA / "demo"


def test_eval_direct_mode_on_demo(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--questions", str(DEMO / "questions.yml"), "--kg", str(DEMO / "kg.ttl"),
                                 "--split", "validation", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_questions"] > 0 and summary["overall"]["set_F"] is not None
    assert set(summary["statuses"]) <= set(STATUSES)
    traces = sorted(out.glob("demo_*.json"))
    assert len(traces) == summary["n_questions"]
    trace = json.loads(traces[0].read_text())
    assert trace["format"] == TRACE_FORMAT and trace["status"] in STATUSES and trace["steps"]
    assert trace["config"]["strategy"] == "offline"
    assert (out / "results.jsonl").is_file() and (out / "summary.json").is_file()


def test_workspace_init_eval_and_ask(tmp_path, monkeypatch):
    ws_dir = tmp_path / "ws"
    result = runner.invoke(app, ["init", str(ws_dir)])
    assert result.exit_code == 0, result.output
    assert (ws_dir / "researcher.yaml").is_file() and (ws_dir / "splits.yml").is_file()
    assert (ws_dir / "versions" / ".git").is_dir()
    monkeypatch.chdir(ws_dir)
    result = runner.invoke(app, ["eval", "--version", "v1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["context"]["version"] == "v1"
    result = runner.invoke(app, ["ask", "How many books did Ingrid Lindqvist write?", "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["status"] in STATUSES and answer["query"]
    assert Path(answer["trace"]).is_file()
    # a second init on the same directory is refused with one line
    again = runner.invoke(app, ["init", str(ws_dir)])
    assert again.exit_code == 1 and "already a workspace" in again.output


@pytest.mark.skipif(not CK25.is_dir(), reason="shared CK25 data not present")
def test_init_with_user_data_and_ask_direct(tmp_path):
    ws_dir = tmp_path / "ck"
    result = runner.invoke(app, ["init", str(ws_dir), "--questions", str(CK25 / "questions.yml"),
                                 "--kg", str(CK25 / "prod-vocab.ttl"), "--kg", str(CK25 / "prod-inst.ttl"),
                                 "--gold", str(CK25 / "true_result_set.json")])
    assert result.exit_code == 0, result.output
    assert "38 questions" in result.output
    result = runner.invoke(app, ["ask", "What is the telephone of Baldwin Dirksen?", "--questions",
                                 str(CK25 / "questions.yml"), "--kg", str(CK25 / "prod-vocab.ttl"),
                                 "--kg", str(CK25 / "prod-inst.ttl"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["query"]


@pytest.mark.parametrize("args,needle", [
    (["eval", "--kg", "x.ttl"], "--questions"),
    (["eval", "--questions", str(DEMO / "questions.yml")], "--kg"),
    (["eval", "--questions", str(DEMO / "questions.yml"), "--kg", str(DEMO / "kg.ttl"), "--split", "dev"], "split"),
    (["eval", "--questions", str(DEMO / "questions.yml"), "--kg", str(DEMO / "kg.ttl"), "--spec", "/nonexistent"],
     "nonexistent"),
    (["init", "x", "--kg", "a.ttl"], "--questions"),
])
def test_bad_invocations(tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert needle in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.skipif(not CK25.is_dir(), reason="shared CK25 data not present")
def test_failed_init_leaves_nothing_behind(tmp_path):
    target = tmp_path / "ws"
    result = runner.invoke(app, ["init", str(target), "--questions", str(CK25 / "questions.yml"),
                                 "--endpoint", "http://127.0.0.1:9/sparql"])
    assert result.exit_code == 1 and "127.0.0.1:9" in result.output
    assert not target.exists() and list(tmp_path.iterdir()) == []
    bad_gold = runner.invoke(app, ["init", str(target), "--questions", str(CK25 / "questions.yml"),
                                   "--kg", str(CK25 / "prod-vocab.ttl"), "--gold",
                                   str(CK25.parent / "db25" / "true_result_set.json")])
    assert bad_gold.exit_code == 1 and "wrong gold file" in bad_gold.output
    assert list(tmp_path.iterdir()) == []
    ok = runner.invoke(app, ["init", str(target), "--questions", str(CK25 / "questions.yml"),
                             "--kg", str(CK25 / "prod-vocab.ttl"), "--kg", str(CK25 / "prod-inst.ttl")])
    assert ok.exit_code == 0, ok.output


def test_ask_rejects_an_empty_question(tmp_path):
    result = runner.invoke(app, ["ask", "  ", "--questions", str(DEMO / "questions.yml"), "--kg", str(DEMO / "kg.ttl")])
    assert result.exit_code == 1 and "empty" in result.output


def test_output_path_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["eval", "--questions", str(DEMO / "questions.yml"), "--kg", str(DEMO / "kg.ttl"),
                                 "--out", str(blocker)])
    assert result.exit_code == 1 and "not a directory" in result.output
