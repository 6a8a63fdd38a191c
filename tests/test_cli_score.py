"""`researcher score`: summary tables, result files, and one-line errors on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from researcher.cli import app

CK25 = Path(__file__).resolve().parents[1].parent / "shared" / "datasets" / "ck25"
pytestmark = pytest.mark.skipif(not CK25.is_dir(), reason="shared CK25 data not present")
runner = CliRunner()


def kg_args() -> list[str]:
    return ["--kg", str(CK25 / "prod-vocab.ttl"), "--kg", str(CK25 / "prod-inst.ttl")]


@pytest.fixture()
def gold_predictions(tmp_path: Path) -> Path:
    data = yaml.safe_load((CK25 / "questions.yml").read_text())
    preds = {f"ck25:{q['id']}-en": q["query"]["sparql"] for q in data["questions"]}
    path = tmp_path / "preds.json"
    path.write_text(json.dumps(preds))
    return path


def test_score_gold_predictions_json(tmp_path, gold_predictions):
    out = tmp_path / "out"
    result = runner.invoke(app, ["score", str(CK25 / "questions.yml"), str(gold_predictions), *kg_args(),
                                 "--gold", str(CK25 / "true_result_set.json"), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_questions"] == 38 and summary["n_scored"] == 37
    assert summary["outcomes"]["correct"] == 35  # 33 in the dataset README + the two xsd:int queries
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 38 and json.loads(lines[0])["uid"] == "ck25:1-en"
    assert json.loads((out / "summary.json").read_text())["overall"]["set_F"] == summary["overall"]["set_F"]


def test_score_human_table(tmp_path, gold_predictions):
    result = runner.invoke(app, ["score", str(CK25 / "questions.yml"), str(gold_predictions), *kg_args(),
                                 "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "overall" in result.output and "Outcomes" in result.output and "feature: COUNT" in result.output


@pytest.mark.parametrize("case", ["bad_yaml", "missing_questions", "bad_predictions", "no_kg", "unknown_ids",
                                  "bad_kg"])
def test_bad_input_gives_one_line_and_nonzero_exit(tmp_path, gold_predictions, case):
    questions, preds, kgs = str(CK25 / "questions.yml"), str(gold_predictions), kg_args()
    if case == "bad_yaml":
        bad = tmp_path / "q.yml"
        bad.write_text("dataset: [unclosed\n")
        questions = str(bad)
    elif case == "missing_questions":
        questions = str(tmp_path / "nope.yml")
    elif case == "bad_predictions":
        p = tmp_path / "p.json"
        p.write_text("[1, 2")
        preds = str(p)
    elif case == "no_kg":
        kgs = []
    elif case == "unknown_ids":
        p = tmp_path / "p.json"
        p.write_text(json.dumps({"other:1-en": "ASK {}"}))
        preds = str(p)
    elif case == "bad_kg":
        ttl = tmp_path / "broken.ttl"
        ttl.write_text("<a> <b> .\n")
        kgs = ["--kg", str(ttl)]
    out = tmp_path / "out"
    result = runner.invoke(app, ["score", questions, preds, *kgs, "--out", str(out)])
    assert result.exit_code == 1
    lines = [line for line in result.output.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert not out.exists(), "nothing half-written"


def test_unreachable_endpoint(tmp_path, gold_predictions):
    result = runner.invoke(app, ["score", str(CK25 / "questions.yml"), str(gold_predictions),
                                 "--endpoint", "http://127.0.0.1:9/sparql", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "error:" in result.output and "127.0.0.1:9" in result.output
