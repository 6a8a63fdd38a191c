"""The TEXT2SPARQL API: contract unit tests (TestClient) and a conformance run of the official client."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from researcher.serve import (
    FALLBACK_HEADER,
    FALLBACK_QUERY,
    STATUS_HEADER,
    BackgroundServer,
    ServedAgent,
    ServeError,
    create_app,
    deploy,
    detect_language,
    export,
)
from researcher.workspace import Workspace, init_workspace

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
CK25 = DATASETS / "ck25"
DATASET = "https://example.org/2025/test/"


@dataclass
class FakeAnswer:
    query: str | None
    status: str = "answered"
    detail: str | None = None


class FakeAgent:
    """Answers a query naming the question; optionally slow, failing or empty-handed."""

    def __init__(self, *, delay: float = 0.0, fail: bool = False, empty: bool = False) -> None:
        self.delay, self.fail, self.empty = delay, fail, empty
        self.calls: list[tuple[str, str, str | None]] = []
        self.active = self.max_active = 0
        self._lock = threading.Lock()

    def ask(self, question: str, *, uid: str = "question", lang: str | None = None) -> FakeAnswer:
        with self._lock:
            self.calls.append((question, uid, lang))
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.delay)
            if self.fail:
                raise RuntimeError(f"model exploded on {question}\nsecond line")
            if self.empty:
                return FakeAnswer(None, "no_answer", "no template matched")
            return FakeAnswer(f'SELECT ?result WHERE {{ BIND("{question}" AS ?result) }}')
        finally:
            with self._lock:
                self.active -= 1


def bundle(agent: Any, tmp_path: Path) -> ServedAgent:
    return ServedAgent(dataset_id=DATASET, version="v7", commit="abc1234", agent=agent,
                       traces_dir=tmp_path / "traces" / "serve-v7")


def client(agent: Any, tmp_path: Path, **kw: Any) -> TestClient:
    return TestClient(create_app(bundle(agent, tmp_path), **kw))


# ------------------------------------------------------------------------------------ contract


def test_answers_on_both_routes(tmp_path: Path) -> None:
    agent = FakeAgent()
    with client(agent, tmp_path) as c:
        for route in ("/", "/text2sparql"):
            r = c.get(route, params={"question": "Who wrote Harbour?", "dataset": DATASET})
            assert r.status_code == 200
            assert r.json() == {"dataset": DATASET, "question": "Who wrote Harbour?",
                                "query": 'SELECT ?result WHERE { BIND("Who wrote Harbour?" AS ?result) }'}
            assert r.headers[STATUS_HEADER] == "answered" and FALLBACK_HEADER not in r.headers
        # the dataset id is matched with or without its trailing slash
        assert c.get("/", params={"question": "Wer ist das?", "dataset": DATASET.rstrip("/")}).status_code == 200
    assert [lang for _, _, lang in agent.calls] == ["en", "en", "de"]
    assert len({uid for _, uid, _ in agent.calls}) == 3  # one trace per request


def test_unknown_dataset_is_404_json(tmp_path: Path) -> None:
    agent = FakeAgent()
    with client(agent, tmp_path) as c:
        r = c.get("/", params={"question": "Who?", "dataset": "https://text2sparql.aksw.org/2025/dbpedia/"})
    assert r.status_code == 404
    assert "not served here" in r.json()["detail"] and DATASET in r.json()["detail"]
    assert agent.calls == []


@pytest.mark.parametrize(
    ("query_string", "problem"),
    [
        (f"dataset={DATASET}", "missing query parameter 'question'"),
        ("question=Who", "missing query parameter 'dataset'"),
        (f"question=&dataset={DATASET}", "'question' is empty"),
        (f"question=%20%20%09&dataset={DATASET}", "'question' is empty"),
        (f"question={'x' * 51}&dataset={DATASET}", "too long (51 > 50"),
        (f"question=abc%00def&dataset={DATASET}", "U+0000"),
        (f"question=ab%07c&dataset={DATASET}", "U+0007"),
        (f"question=%ff%fe%fd%89PNG&dataset={DATASET}", "undecodable"),
        ("question=Who&dataset=%1b%5b31m", "'dataset' contains a control"),
    ],
)
def test_bad_parameters_are_422_json(tmp_path: Path, query_string: str, problem: str) -> None:
    agent = FakeAgent()
    with client(agent, tmp_path, max_question_chars=50) as c:
        for route in ("/", "/text2sparql"):
            r = c.get(f"{route}?{query_string}")
            assert r.status_code == 422, r.text
            assert problem in r.json()["detail"]
    assert agent.calls == []


def test_newlines_and_exactly_max_length_are_accepted(tmp_path: Path) -> None:
    with client(FakeAgent(), tmp_path, max_question_chars=50) as c:
        assert c.get("/", params={"question": "x" * 50, "dataset": DATASET}).status_code == 200
        assert c.get("/", params={"question": "Which\nbooks?\t", "dataset": DATASET}).status_code == 200


def test_health_and_openapi(tmp_path: Path) -> None:
    with client(FakeAgent(), tmp_path, timeout_s=12.5) as c:
        h = c.get("/health")
        spec = c.get("/openapi.json").json()
        unknown = c.get("/nope")
    assert h.status_code == 200
    assert h.json() | {"info": {}} == {"status": "ok", "version": "v7", "commit": "abc1234", "dataset": DATASET,
                                       "problem": None, "timeout_s": 12.5, "info": {}}
    for path in ("/", "/text2sparql"):
        op = spec["paths"][path]["get"]
        assert {(p["name"], p["required"]) for p in op["parameters"]} == {("question", True), ("dataset", True)}
        assert {"200", "404", "422", "503"} <= set(op["responses"])
        schema = op["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith("/T2SAnswer")
    assert set(spec["components"]["schemas"]["T2SAnswer"]["required"]) == {"dataset", "question", "query"}
    assert "/health" in spec["paths"] and spec["info"]["version"] == "v7"
    assert unknown.status_code == 404 and unknown.json() == {"detail": "Not Found"}


def _fallback_trace(tmp_path: Path) -> dict[str, Any]:
    traces = list((tmp_path / "traces" / "serve-v7").glob("*.fallback.json"))
    assert len(traces) == 1
    return json.loads(traces[0].read_text(encoding="utf-8"))


def test_fallback_when_the_agent_raises(tmp_path: Path) -> None:
    with client(FakeAgent(fail=True), tmp_path) as c:
        r = c.get("/text2sparql", params={"question": "Who?", "dataset": DATASET})
        # a non-Latin-1 message must not break the header (and so the 200 answer)
        tokyo = c.get("/", params={"question": "Wer wohnt in 東京 — Bergström?", "dataset": DATASET})
    assert r.status_code == 200 and r.json()["query"] == FALLBACK_QUERY
    assert r.headers[FALLBACK_HEADER] == "agent error: RuntimeError: model exploded on Who?"
    assert tokyo.status_code == 200 and tokyo.json()["query"] == FALLBACK_QUERY
    assert tokyo.headers[FALLBACK_HEADER].isascii() and "\\u6771" in tokyo.headers[FALLBACK_HEADER]
    assert r.headers[STATUS_HEADER] == "tool_error"
    traces = sorted((tmp_path / "traces" / "serve-v7").glob("*.fallback.json"))
    assert len(traces) == 2
    trace = json.loads(traces[0].read_text(encoding="utf-8"))
    assert trace["status"] == "tool_error" and trace["query"] == FALLBACK_QUERY and trace["fallback"] is True
    assert trace["question"] == "Who?" and trace["spec_version"] == "v7" and "model exploded" in trace["detail"]


def test_fallback_on_timeout_answers_in_time(tmp_path: Path) -> None:
    agent = FakeAgent(delay=3.0)
    with client(agent, tmp_path, timeout_s=0.3) as c:
        start = time.perf_counter()
        r = c.get("/", params={"question": "Slow?", "dataset": DATASET})
        elapsed = time.perf_counter() - start
        assert c.get("/health").status_code == 200  # the server is not blocked by the stuck agent
    assert elapsed < 2.0
    assert r.status_code == 200 and r.json()["query"] == FALLBACK_QUERY
    assert r.headers[FALLBACK_HEADER].startswith("timeout") and r.headers[STATUS_HEADER] == "timeout"
    assert _fallback_trace(tmp_path)["status"] == "timeout"


def test_fallback_when_the_agent_finds_no_query(tmp_path: Path) -> None:
    with client(FakeAgent(empty=True), tmp_path) as c:
        r = c.get("/", params={"question": "Huh?", "dataset": DATASET})
    assert r.status_code == 200 and r.json()["query"] == FALLBACK_QUERY
    assert r.headers[STATUS_HEADER] == "no_answer" and "no template matched" in r.headers[FALLBACK_HEADER]


def test_fallback_query_is_valid_sparql_with_no_rows() -> None:
    from rdflib.plugins.sparql import prepareQuery

    from worker_agent.data import __file__ as data_init
    from worker_agent.kg import OxigraphKG

    prepareQuery(FALLBACK_QUERY)
    result = OxigraphKG([Path(data_init).parent / "demo" / "kg.ttl"]).query(FALLBACK_QUERY)
    assert result.variables == ["result"] and result.rows == []


def test_concurrent_requests_over_http(tmp_path: Path) -> None:
    agent = FakeAgent(delay=0.25)
    app = create_app(bundle(agent, tmp_path), max_workers=8)
    questions = [f"Question number {i}?" for i in range(16)]
    results: dict[str, httpx.Response] = {}

    with BackgroundServer(app) as server:
        def send(q: str) -> None:
            with httpx.Client(timeout=10) as http:
                results[q] = http.get(server.url + "text2sparql", params={"question": q, "dataset": DATASET})

        threads = [threading.Thread(target=send, args=(q,)) for q in questions]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
    assert all(r.status_code == 200 for r in results.values())
    assert all(q in r.json()["query"] and r.json()["question"] == q for q, r in results.items())  # no cross-talk
    assert agent.max_active > 1 and elapsed < 16 * 0.25 / 2


def test_language_detection() -> None:
    from researcher.datasets import load_questions

    db25 = DATASETS / "db25" / "questions.yml"
    if db25.is_file():
        qs = load_questions(db25).questions
        right = sum(detect_language(q.text) == q.lang for q in qs)
        assert right / len(qs) >= 0.95
    assert detect_language("Wie viele Bücher hat Frau Bergström geschrieben?") == "de"
    assert detect_language("Welche Abteilung leitet Herr Brant?") == "de"
    assert detect_language("¿Dónde nació Keanu Reeves?") == "es"
    assert detect_language("In which department is Ms. Brant?") == "en"
    assert detect_language("Keanu Reeves") == "en"  # nothing to go on: the challenge default


# ------------------------------------------------------------------------------------ workspaces


def _break_spec(ws: Workspace) -> str:
    files = ws.versions.files("v1")
    files["agent.yaml"] = files["agent.yaml"].replace("strategy: offline", "strategy: psychic")
    return ws.versions.create(files, parent="v1", summary="broken", rationale="", feature="none").name


def test_invalid_deployed_version_starts_and_answers_503(tmp_path: Path) -> None:
    ws = init_workspace(tmp_path / "w")
    name = _break_spec(ws)
    with pytest.raises(ServeError, match=f"refusing to deploy {name}: .*agent.yaml"):
        deploy(ws, name)
    ws.versions.mark(name, "deployed")  # e.g. the spec format changed after it was deployed
    dataset = ws.data.questions.dataset_id
    with TestClient(create_app(ws)) as c:
        h = c.get("/health")
        r = c.get("/", params={"question": "Who wrote Harbour?", "dataset": dataset})
        other = c.get("/", params={"question": "Who?", "dataset": "https://elsewhere.org/"})
    assert h.status_code == 503
    assert h.json()["status"] == "unavailable" and h.json()["version"] == name
    assert "cannot be served" in h.json()["problem"] and "agent.yaml" in h.json()["problem"]
    assert r.status_code == 503 and r.json()["detail"] == h.json()["problem"]
    assert other.status_code == 404


def test_serving_needs_a_deployed_version(tmp_path: Path) -> None:
    ws = init_workspace(tmp_path / "w")
    with pytest.raises(ServeError, match="no version is marked 'deployed'.*researcher deploy"):
        create_app(ws)
    with pytest.raises(ServeError, match="unknown version v9"):
        create_app(ws, version="v9")


@pytest.fixture(scope="module")
def demo_ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    ws = init_workspace(tmp_path_factory.mktemp("demo") / "w")
    assert deploy(ws, "v1") == "v1"
    return ws


def test_deploy_marks_and_records(demo_ws: Workspace) -> None:
    assert demo_ws.versions.marked("deployed") == "v1"
    event = demo_ws.ledger.events("deployed")[-1]
    assert event.version == "v1" and event.data == {"commit": demo_ws.versions.get("v1").commit, "previous": None}


def test_export_is_standalone(demo_ws: Workspace, tmp_path: Path) -> None:
    from worker_agent.spec import AgentSpec

    out = export(demo_ws, "deployed", tmp_path / "export")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["version"] == "v1" and manifest["commit"] == demo_ws.versions.get("v1").commit
    assert manifest["files"] == sorted(demo_ws.versions.files("v1"))
    assert AgentSpec.load(out / "spec").files() == demo_ws.versions.files("v1")
    with pytest.raises(ServeError, match="not empty"):
        export(demo_ws, "v1", out)


def test_real_agent_answers_like_evaluation(demo_ws: Workspace) -> None:
    from researcher.loop import Researcher
    from researcher.propose import make_proposer

    dataset = demo_ws.data.questions.dataset_id
    questions = demo_ws.data.split("validation")[:3]
    direct = Researcher(demo_ws, proposer=make_proposer("offline")).agent("v1")
    with TestClient(create_app(demo_ws)) as c:
        assert c.get("/health").json()["info"]["strategy"] == "offline"
        for q in questions:
            r = c.get("/", params={"question": q.text, "dataset": dataset})
            assert r.status_code == 200
            expected = direct.ask(q.text, uid=q.uid, lang=q.lang).query or FALLBACK_QUERY
            assert r.json()["query"] == expected
    traces = sorted((demo_ws.traces_dir / "serve-v1").glob("*.json"))
    assert len(traces) == len(questions)
    trace = json.loads(traces[0].read_text(encoding="utf-8"))
    assert trace["spec_version"] == "v1" and trace["status"] is not None


def test_real_agent_concurrent_answers_equal_sequential(demo_ws: Workspace) -> None:
    """The shared KG, label index and agent give the same queries under concurrency."""
    dataset = demo_ws.data.questions.dataset_id
    questions = [q.text for q in demo_ws.data.split("validation")]
    with BackgroundServer(create_app(demo_ws, max_workers=8)) as server, httpx.Client(timeout=30) as http:
        sequential = {q: http.get(server.url, params={"question": q, "dataset": dataset}).json()["query"]
                      for q in questions}
        concurrent: list[tuple[str, int, str]] = []

        def send(q: str) -> None:
            with httpx.Client(timeout=30) as own:
                r = own.get(server.url + "text2sparql", params={"question": q, "dataset": dataset})
                concurrent.append((q, r.status_code, r.json()["query"]))

        threads = [threading.Thread(target=send, args=(q,)) for q in questions * 3]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(concurrent) == 3 * len(questions)
    assert all(status == 200 and query == sequential[q] for q, status, query in concurrent)


# ------------------------------------------------------------------------------------ conformance

TEXT2SPARQL = shutil.which("text2sparql")


def sparql_endpoint(kg: Any) -> FastAPI:
    """A minimal SPARQL protocol endpoint over the workspace KG, for `text2sparql query`."""
    app = FastAPI()

    @app.api_route("/sparql", methods=["GET", "POST"])
    async def sparql(request: Request) -> JSONResponse:
        form = await request.form() if request.method == "POST" else {}
        query = request.query_params.get("query") or form.get("query")
        return JSONResponse(kg.query(str(query)).to_sparql_json(), media_type="application/sparql-results+json")

    return app


def _cli(*args: str, cwd: Path) -> None:
    run = subprocess.run([TEXT2SPARQL, *args], check=False, cwd=cwd, capture_output=True, text=True, timeout=120)  # type: ignore[list-item]
    assert run.returncode == 0, f"text2sparql {args[0]} failed: {run.stderr[-3000:]}"


@pytest.mark.skipif(TEXT2SPARQL is None, reason="official client missing: pip install --no-deps text2sparql-client==2.1.0")
@pytest.mark.skipif(not CK25.is_dir(), reason=f"{CK25} not available")
def test_official_client_conformance(tmp_path: Path) -> None:
    from researcher.evaluate import load_predictions, score_predictions

    ws = init_workspace(tmp_path / "ck25", questions=str(CK25 / "questions.yml"),
                        kg=[str(CK25 / "prod-vocab.ttl"), str(CK25 / "prod-inst.ttl")],
                        gold=str(CK25 / "true_result_set.json"))
    deploy(ws, "v1")
    gold = ws.data.gold()
    # three questions the offline strategy has seen (train) and three it has not (validation)
    picked = [q for q in ws.data.split("train") if gold[q.uid].available][:3]
    picked += [q for q in ws.data.split("validation") if gold[q.uid].available][:3]
    ids = {int(q.qid) for q in picked}
    raw = yaml.safe_load((CK25 / "questions.yml").read_text(encoding="utf-8"))
    raw["questions"] = [q for q in raw["questions"] if q["id"] in ids]
    (tmp_path / "questions.yml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    true_set = json.loads((CK25 / "true_result_set.json").read_text(encoding="utf-8"))
    (tmp_path / "true.json").write_text(json.dumps({q.uid: true_set[q.uid] for q in picked}), encoding="utf-8")

    with BackgroundServer(create_app(ws)) as api, BackgroundServer(sparql_endpoint(ws.data.kg)) as kg:
        _cli("ask", "questions.yml", api.url, "--answers-db", "answers.db", "--retries", "0",
             "--timeout", "60", "-o", "answers.json", cwd=tmp_path)
        _cli("query", "questions.yml", "-a", "answers.json", "-e", kg.url + "sparql", "-o", "pred.json",
             cwd=tmp_path)
    _cli("evaluate", "t2s-agent", "true.json", "pred.json", "-o", "eval.json", cwd=tmp_path)

    answers = json.loads((tmp_path / "answers.json").read_text(encoding="utf-8"))
    assert sorted(a["qname"] for a in answers) == sorted(q.uid for q in picked)
    assert all(a["dataset"] == ws.data.questions.dataset_id and a["query"] for a in answers)
    official = json.loads((tmp_path / "eval.json").read_text(encoding="utf-8"))
    ours = score_predictions(picked, load_predictions(tmp_path / "answers.json"), ws.data.kg, gold)

    for metric in ("set_P", "set_recall", "set_F"):
        assert official["average"][metric] == pytest.approx(ours.summary["overall"][metric], abs=1e-4), metric
    for result in ours.results:
        assert official[result.uid]["set_F"] == pytest.approx(result.scores["set_F"], abs=1e-4), result.uid
    # the figures are not trivially equal: the agent gets some right and (the unseen ones) some wrong
    assert 0.0 < ours.summary["overall"]["set_F"]
    # the server answered what the deployed agent answers when asked directly
    from researcher.loop import Researcher
    from researcher.propose import make_proposer

    direct = Researcher(ws, proposer=make_proposer("offline")).agent("v1")
    served = {a["qname"]: a["query"] for a in answers}
    for q in picked:
        assert served[q.uid] == (direct.ask(q.text, uid=q.uid, lang=q.lang).query or FALLBACK_QUERY)
