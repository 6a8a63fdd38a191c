"""The researcher loop on the bundled demo dataset: versions, ledger, gates, resume, sealing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from researcher.analysis import SealedSplitError, build_analysis
from researcher.cli import app
from researcher.loop import Researcher, check_leak, gold_tokens, paired_decision
from researcher.propose import Proposal, unified_diff
from researcher.workspace import WorkspaceError, find_workspace, init_workspace

runner = CliRunner()


@pytest.fixture()
def ws(tmp_path: Path):
    return init_workspace(tmp_path / "ws")


def fixed_proposer(*proposals: Proposal):
    class Fixed:
        name = "fixed"

        def __init__(self) -> None:
            self.queue = list(proposals)
            self.seen: list[dict] = []

        def propose(self, files, analysis, tried):
            self.seen.append(analysis)
            return self.queue.pop(0)

    return Fixed()


def test_paired_decision():
    best = {"a": 0.0, "b": 1.0, "c": 0.5}
    assert paired_decision({"a": 1.0, "b": 1.0, "c": 0.5}, best).accepted
    assert not paired_decision(dict(best), best).accepted
    mixed = paired_decision({"a": 1.0, "b": 0.5, "c": 0.5}, best)  # gain > 0 but 1 win vs 1 loss
    assert not mixed.accepted and "worsened 1" in mixed.reason
    assert not paired_decision({"a": 0.6, "b": 0.0, "c": 0.5}, best).accepted
    assert not paired_decision({"a": 0.2, "b": 1.0, "c": 0.5}, best, min_gain=0.1).accepted
    noisy = paired_decision({"a": 1.0, "b": 1.0, "c": 0.5}, best, candidate_repeats=[0.5, 0.9, 0.2],
                            best_repeats=[0.5, 0.4, 0.6])
    assert not noisy.accepted and "CI" in noisy.reason


def test_loop_improves_the_demo_and_records_everything(ws):
    summary = Researcher(ws).run(iterations=5)
    records = ws.ledger.versions()
    names = [r.version for r in records]
    assert names == [v.name for v in ws.versions.versions()]  # every version recorded once
    assert records[0].status == "baseline"
    statuses = {r.status for r in records[1:]}
    assert "accepted" in statuses and "rejected" in statuses
    assert summary.best_validation > summary.baseline_validation
    assert ws.versions.marked("best") == summary.best
    # features are derived from the spec, scores tied to their eval context
    assert any(k.startswith("rule:") for k in records[0].features)
    ctx = records[0].eval_context
    assert ctx.split == "validation" and ctx.kg_fingerprint
    # the sealed test evaluation is recorded as an event, not as per-question outcomes
    test_events = ws.ledger.events("test_evaluation")
    assert test_events and test_events[-1].version == summary.best
    test_uids = {q.uid for q in ws.data.split("test")}
    for r in records:
        assert not set(r.outcomes) & test_uids


def test_proposer_never_sees_the_test_split(ws):
    seed = ws.versions.files("v1")
    proposer = fixed_proposer(Proposal("noop edit", "why", "prompt:noop", unified_diff(seed, {
        **seed, "prompts/repair.j2": seed["prompts/repair.j2"] + "\n"}), "fixed"))
    Researcher(ws, proposer=proposer).run(iterations=1, final_test=False)
    blob = json.dumps(proposer.seen, default=str)
    for q in ws.data.split("test"):
        assert q.uid not in blob and q.text not in blob
        if q.sparql:
            assert q.sparql.strip() not in blob
    with pytest.raises(SealedSplitError):
        build_analysis(version="v1", results=[{"uid": next(iter(q.uid for q in ws.data.split("test")))}],
                       summary={}, sealed_uids={q.uid for q in ws.data.split("test")})


def test_gates_record_invalid_candidates(ws):
    seed = ws.versions.files("v1")
    bad_yaml = {**seed, "agent.yaml": seed["agent.yaml"].replace("few_shot: 1", "few_shot: many")}
    outside = "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n"
    val_q = ws.data.split("validation")[0]
    gold = ws.data.gold()[val_q.uid]
    leaked = [a for a in (gold.answers or {}) if len(a) > 8][:1] or ["<http://example.org/none>"]
    leak_files = {**seed, "prompts/system.j2": seed["prompts/system.j2"] + f"\n{{# hint: {leaked[0]} #}}\n"}
    proposer = fixed_proposer(
        Proposal("break yaml", "r", "bad:yaml", unified_diff(seed, bad_yaml), "fixed"),
        Proposal("escape", "r", "bad:path", outside, "fixed"),
        Proposal("leak", "r", "bad:leak", unified_diff(seed, leak_files), "fixed"),
    )
    summary = Researcher(ws, proposer=proposer).run(iterations=3, final_test=False)
    assert summary.invalid == 3
    reasons = [e.data["reason"] for e in ws.ledger.events("invalid_proposal")]
    assert "spec does not validate" in reasons[0] and "few_shot" in reasons[0]
    assert "diff does not apply" in reasons[1]
    assert not leaked[0].startswith("<http://example.org"), "the demo validation split has answers to leak"
    assert reasons[2].startswith("leak")
    assert [v.name for v in ws.versions.versions()] == ["v1"]  # nothing committed for invalid ones


def test_leak_guard_tokens():
    train = gold_tokens(["SELECT ?x WHERE { ?x <http://ex.org/p> <http://ex.org/A> }"], [{"http://ex.org/A": 1}])
    sealed = gold_tokens(["SELECT ?x WHERE { ?x <http://ex.org/p> <http://ex.org/B> }"], [{"Secret Answer": 1}])
    assert check_leak("+++ b/x\n+uses <http://ex.org/p> only\n", sealed, train) is None
    assert check_leak("+++ b/x\n+mention <http://ex.org/B>\n", sealed, train)
    assert check_leak("+++ b/x\n+the Secret Answer\n", sealed, train)
    ask = gold_tokens([], [{"true": 1}, {"7": 1}])
    assert check_leak("+++ b/rules.yaml\n+  enabled: true\n+  k: 7\n", ask, set()) is None


def test_resume_records_committed_but_unrecorded_versions(ws):
    r = Researcher(ws)
    r.ensure_baseline()
    seed = ws.versions.files("v1")
    files = {**seed, "rules.yaml": seed["rules.yaml"].replace(
        "- id: surname_linking\n  enabled: false", "- id: surname_linking\n  enabled: true")}
    assert files != seed
    ws.versions.create(files, parent="v1", summary="crash after commit", rationale="r", feature="rule:surname_linking=on")
    done = Researcher(ws).reconcile()
    assert done == ["v2"]
    assert [x.version for x in ws.ledger.versions()] == ["v1", "v2"]
    assert Researcher(ws).reconcile() == []  # idempotent: no duplicates


def test_kill_minus_9_then_resume(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "researcher", "loop", "-n", "40", "--patience", "40", "--no-test"],
                            cwd=ws.root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:  # wait until it has committed a few candidates
        if len(ws.versions.__class__(ws.versions_dir).versions()) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    result = subprocess.run([sys.executable, "-m", "researcher", "loop", "-n", "1", "--no-test", "--json"],
                            cwd=ws.root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    fresh = find_workspace(ws.root)
    recorded = [r.version for r in fresh.ledger.versions()]
    committed = [v.name for v in fresh.versions.versions()]
    assert recorded == committed and len(recorded) == len(set(recorded))
    assert not fresh.versions.is_dirty()


def test_one_loop_per_workspace(ws):
    with ws.lock():
        with pytest.raises(WorkspaceError, match="lock"):
            with find_workspace(ws.root).lock():
                pass


def test_cli_outside_a_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["log"])
    assert result.exit_code == 1
    assert "not inside a researcher workspace" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_cli_review_commands(ws, monkeypatch):
    monkeypatch.chdir(ws.root)
    Researcher(ws).run(iterations=2, final_test=False)
    for args in (["log"], ["ledger"], ["ledger", "--format", "csv", "--table", "metrics"],
                 ["ledger", "--format", "json"],
                 ["show", "v2"], ["diff", "v1", "v2"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    assert "+++ b/" in runner.invoke(app, ["diff", "v1", "v2"]).output
    tables = json.loads(runner.invoke(app, ["ledger", "--format", "json"]).output)
    assert set(tables) == {"features", "metrics"}
    assert runner.invoke(app, ["ledger", "--format", "csv"]).exit_code == 1  # one table per CSV
    assert runner.invoke(app, ["show", "v99"]).exit_code == 1


def test_dirty_store_is_refused_before_any_work(ws, monkeypatch):
    (ws.versions_dir / "stray.txt").write_text("edited by hand")
    monkeypatch.chdir(ws.root)
    result = runner.invoke(app, ["loop", "-n", "1"])
    assert result.exit_code == 1 and "dirty" in result.output and "stray.txt" in result.output
    assert ws.ledger.versions() == []  # nothing was evaluated or recorded
    assert (ws.versions_dir / "stray.txt").read_text() == "edited by hand"  # and nothing discarded


def test_truncated_ledger_line_is_set_aside_with_a_warning(ws, monkeypatch):
    Researcher(ws).run(iterations=1, final_test=False)
    before = [r.version for r in ws.ledger.versions()]
    with open(ws.ledger_path, "ab") as handle:
        handle.write(b'{"kind": "version", "trunc')
    monkeypatch.chdir(ws.root)
    result = runner.invoke(app, ["loop", "-n", "1", "--no-test"])
    assert result.exit_code == 0, result.output
    assert "truncated last line" in result.output
    after = [r.version for r in find_workspace(ws.root).ledger.versions()]
    assert after[: len(before)] == before and len(after) == len(before) + 1
    assert list(ws.root.glob("ledger.jsonl.corrupt-*"))


def test_llm_researcher_through_the_real_openai_sdk(ws, monkeypatch, respx_using):
    """The LLM proposer with the real SDK over intercepted HTTP: its diff becomes version v2."""
    import httpx
    import respx

    from researcher.propose import set_rule_enabled

    seed = ws.versions.files("v1")
    diff = unified_diff(seed, {**seed, "rules.yaml": set_rule_enabled(seed["rules.yaml"], "surname_linking", True)})
    reply = (f"SUMMARY: match people by surname\nFEATURE: rule:surname_linking=on\n"
             f"RATIONALE: Several failing questions name people by title and surname.\n```diff\n{diff}```\n")
    body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": reply, "refusal": None}}],
            "usage": {"prompt_tokens": 5000, "completion_tokens": 300, "total_tokens": 5300}}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    ws.config.loop.proposer = "llm"
    ws.config.loop.proposer_model = {"provider": "openai", "name": "gpt-4o-mini", "max_retries": 0}
    with respx.mock(using=respx_using, assert_all_called=False) as router:
        route = router.post("https://api.openai.com/v1/chat/completions").mock(
            return_value=httpx.Response(200, json=body))
        summary = Researcher(ws).run(iterations=1, final_test=False)
    assert route.call_count == 1
    prompt = json.loads(route.calls[0].request.content)["messages"][0]["content"]
    assert "rules.yaml" in prompt and "Failing validation questions" in prompt
    record = ws.ledger.get("v2")
    assert record.proposer.startswith("llm-researcher") and record.feature_label == "rule:surname_linking=on"
    assert record.cost_usd > 0 and record.tokens.input >= 5000
    assert summary.iterations == 1
    assert "sk-test" not in ws.ledger_path.read_text()


def test_repeats_give_mean_and_interval_per_version(ws, monkeypatch):
    monkeypatch.chdir(ws.root)
    result = runner.invoke(app, ["loop", "-n", "1", "--repeats", "2", "--no-test"])
    assert result.exit_code == 0, result.output
    records = find_workspace(ws.root).ledger.versions()
    assert all(len(r.repeats) == 2 for r in records)
    table = runner.invoke(app, ["ledger", "--format", "csv", "--table", "metrics"]).output
    assert "repeats.mean" in table and "repeats.ci95" in table


def _openai_text_reply(text: str) -> dict:
    return {"id": "chatcmpl-x", "object": "chat.completion", "created": 1730000000, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": 100000, "completion_tokens": 1000, "total_tokens": 101000}}


def test_garbage_from_the_llm_researcher_is_recorded_and_paid_for(ws, monkeypatch, respx_using):
    import httpx
    import respx

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    ws.config.loop.proposer = "llm"
    ws.config.loop.proposer_model = {"provider": "openai", "name": "gpt-4o-mini", "max_retries": 0}
    with respx.mock(using=respx_using, assert_all_called=False) as router:
        route = router.post("https://api.openai.com/v1/chat/completions").mock(
            return_value=httpx.Response(200, json=_openai_text_reply("I would enable a rule, I think.")))
        summary = Researcher(ws).run(iterations=5, budget_usd=0.04, patience=10, final_test=False)
    invalid = ws.ledger.events("invalid_proposal")
    assert invalid and "SUMMARY" in invalid[0].data["reason"]
    # every attempt told the model why the previous one failed: no cached garbage replayed forever
    prompts = [json.loads(c.request.content)["messages"][0]["content"] for c in route.calls]
    assert len(set(prompts)) == len(prompts)
    assert "failed before evaluation" in prompts[-1]
    # 100k input tokens at $0.15/M = $0.015 per reply: the $0.04 budget stops the run at 3 replies
    assert summary.stop_reason == "budget" and route.call_count == 3
    assert summary.cost_usd >= 0.04


def test_worker_model_outage_records_nothing(ws, monkeypatch):
    files = ws.versions.files("v1")
    files["agent.yaml"] = files["agent.yaml"].replace("strategy: offline ", "strategy: llm_agent")
    files["agent.yaml"] = files["agent.yaml"].replace("  name: gpt-4o-mini", "  name: gpt-4o-mini\n  base_url: http://127.0.0.1:9/v1\n  max_retries: 0\n  api_key: null")
    ws2 = init_workspace(ws.root.parent / "ws-llm")
    # make v1 itself an LLM worker whose server is down
    import shutil

    shutil.rmtree(ws2.versions_dir)
    from researcher.versions import VersionStore

    VersionStore.init(ws2.versions_dir, files)
    monkeypatch.chdir(ws2.root)
    result = runner.invoke(app, ["loop", "-n", "2"])
    assert result.exit_code == 1 and "worker's model failed" in result.output
    assert find_workspace(ws2.root).ledger.versions() == []


def test_hand_committed_invalid_version_is_recorded_not_blocking(ws):
    Researcher(ws).ensure_baseline()
    seed = ws.versions.files("v1")
    ws.versions.create({**seed, "agent.yaml": seed["agent.yaml"].replace("few_shot: 1", 'few_shot: "lots"')},
                       parent="v1", summary="by hand", rationale="r", feature="manual")
    summary = Researcher(ws).run(iterations=1, final_test=False)
    rec = ws.ledger.get("v2")
    assert rec.status == "invalid" and "few_shot" in rec.reason
    assert summary.iterations == 1


def test_best_mark_follows_the_ledger(ws):
    Researcher(ws).run(iterations=3, final_test=False)
    best = Researcher(ws).best().version
    ws.versions.unmark("best")
    Researcher(ws).run(iterations=0, final_test=False)
    assert ws.versions.marked("best") == best


@pytest.mark.parametrize("args", [["--repeats", "0"], ["-n", "-3"], ["--budget-usd", "-1"], ["--max-hours", "0"]])
def test_loop_options_are_validated(ws, monkeypatch, args):
    monkeypatch.chdir(ws.root)
    result = runner.invoke(app, ["loop", *args])
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, result.output
    assert ws.ledger.versions() == [] and [v.name for v in ws.versions.versions()] == ["v1"]


def test_ctrl_c_stops_cleanly_with_status_130(tmp_path):
    ws = init_workspace(tmp_path / "ws")
    proc = subprocess.Popen([sys.executable, "-m", "researcher", "loop", "-n", "40", "--patience", "40"],
                            cwd=ws.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(ws.versions.__class__(ws.versions_dir).versions()) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    fresh = find_workspace(ws.root)
    assert fresh.ledger.events("run_interrupted")
    assert [r.version for r in fresh.ledger.versions()] == [v.name for v in fresh.versions.versions()] or \
        len(fresh.versions.versions()) == len(fresh.ledger.versions()) + 1  # at most one awaits reconcile
