"""Deploy a spec version as a TEXT2SPARQL challenge API.

The contract (what the official ``text2sparql ask`` client relies on):

* ``GET /`` and ``GET /text2sparql`` with the query parameters ``question`` and ``dataset``
  answer ``{"dataset", "question", "query"}`` as JSON.
* The client skips replies without ``query`` and aborts on a non-JSON body, so for the served
  dataset the API *always* answers 200 with a query: when the agent fails, finds nothing or
  exceeds the per-request time limit it answers :data:`FALLBACK_QUERY` (valid SPARQL, no rows),
  says so in the ``X-Text2SPARQL-Fallback`` header and records the failure in a trace.
* Another dataset id is a 404; a missing, empty, oversized or binary (control characters,
  undecodable bytes) parameter is a 422; every error body is JSON ``{"detail": ...}``.
* A deployed version that no longer loads (spec error, missing model settings) does not stop the
  server: question routes answer 503 and ``/health`` reports the problem.

Concurrency: one :class:`~worker_agent.agent.WorkerAgent` (and so one KG and one label index) is
shared read-only by all requests; agents run in a bounded thread pool and the event loop only
waits on them, so a slow question never blocks ``/health`` or other requests.

Traces: the agent writes ``<workspace>/traces/serve-<version>/<request id>.json``; when the server
has to answer the fallback because the agent raised or timed out, it also writes
``<request id>.fallback.json`` with the reason.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import unicodedata
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, Self

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FALLBACK_QUERY",
    "QUESTION_ROUTES",
    "Answerer",
    "BackgroundServer",
    "ServeError",
    "ServedAgent",
    "create_app",
    "deploy",
    "detect_language",
    "export",
    "load_served_agent",
    "question_problem",
    "resolve_version",
    "run_server",
    "serving",
]

#: Answered when the agent produces no query: parses everywhere, returns no rows, scores 0.
FALLBACK_QUERY = "SELECT ?result WHERE { FILTER(false) }"
QUESTION_ROUTES = ("/", "/text2sparql")
FALLBACK_HEADER = "X-Text2SPARQL-Fallback"
STATUS_HEADER = "X-Text2SPARQL-Status"
VERSION_HEADER = "X-Text2SPARQL-Version"
REQUEST_ID_HEADER = "X-Request-Id"
MARK_NAMES = ("deployed", "best")
MANIFEST_NAME = "manifest.json"
EXPORT_SPEC_DIR = "spec"


class ServeError(Exception):
    """A version cannot be deployed, exported or served; one line naming the workspace/version."""


class Answerer(Protocol):
    """What the server needs from an agent (``WorkerAgent`` satisfies it)."""

    def ask(self, question: str, *, uid: str = ..., lang: str | None = None) -> Any: ...


@dataclass
class ServedAgent:
    """Everything one server instance serves: a version's agent and the dataset it answers for.

    ``problem`` set (and ``agent`` None) means the version cannot answer: question routes 503.
    """

    dataset_id: str
    version: str
    commit: str | None = None
    agent: Answerer | None = None
    traces_dir: Path | None = None
    problem: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------
# versions: resolve, load, deploy, export


def resolve_version(ws: Any, version: str) -> str:
    """``deployed``/``best`` -> the version the mark points to; ``vN`` -> itself (must exist)."""
    from researcher.versions import VersionStoreError

    if version in MARK_NAMES:
        name = ws.versions.marked(version)
        if name is None:
            hint = "run `researcher deploy vN` first" if version == "deployed" else "run `researcher loop` first"
            raise ServeError(f"{ws.root}: no version is marked {version!r}; {hint}")
        return str(name)
    try:
        ws.versions.get(version)
    except VersionStoreError as exc:
        raise ServeError(str(exc)) from None
    return version


def _one_line(text: object) -> str:
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def load_served_agent(ws: Any, version: str = "deployed", *, traces: bool = True) -> ServedAgent:
    """Build the agent of ``version`` exactly as evaluation does (same spec, KG and examples).

    A spec that no longer loads is reported in ``problem`` instead of raising, so the server can
    start and say what is wrong; an unknown version or unloadable data raise ServeError.
    """
    from researcher.loop import Researcher
    from researcher.propose import make_proposer

    name = resolve_version(ws, version)
    meta = ws.versions.get(name)
    try:
        dataset_id = ws.data.questions.dataset_id
    except Exception as exc:
        raise ServeError(f"{ws.root}: cannot load the workspace data: {_one_line(exc)}") from exc
    traces_dir = ws.traces_dir / f"serve-{name}" if traces else None
    served = ServedAgent(dataset_id=dataset_id, version=name, commit=meta.commit, traces_dir=traces_dir,
                         info={"summary": meta.summary, "mark": version if version in MARK_NAMES else None})
    try:
        # Serving never proposes: the offline proposer avoids building an LLM researcher model.
        researcher = Researcher(ws, proposer=make_proposer("offline"))
        agent = researcher.agent(name, traces=traces_dir)
        served.agent = agent
        served.info["strategy"] = agent.spec.config.strategy
    except Exception as exc:  # noqa: BLE001 - SpecError, LLM settings, hooks: not servable
        served.problem = f"version {name} ({meta.commit[:10]}) cannot be served: {_one_line(exc)}"
    return served


def deploy(ws: Any, version: str) -> str:
    """Mark ``version`` as deployed and record a ``deployed`` ledger event; returns its name.

    Refuses a version whose spec does not load (the server would only answer 503).
    """
    from worker_agent.spec import AgentSpec

    name = resolve_version(ws, version)
    meta = ws.versions.get(name)
    try:
        AgentSpec.from_files(ws.versions.files(name), origin=f"{name}@{meta.commit[:10]}")
    except Exception as exc:
        raise ServeError(f"{ws.root}: refusing to deploy {name}: {_one_line(exc)}") from exc
    previous = ws.versions.marked("deployed")
    ws.versions.mark(name, "deployed")
    ws.ledger.append_event("deployed", name, {"commit": meta.commit, "previous": previous})
    return name


def export(ws: Any, version: str, out_dir: str | Path) -> Path:
    """Write a standalone copy of ``version``: ``spec/`` (loadable with ``AgentSpec.load``) and
    ``manifest.json`` (version, commit, parent, scores and where they were measured).

    ``out_dir`` must not exist or be empty; returns it.
    """
    from researcher.ledger import Ledger
    from worker_agent.trace import atomic_write_text

    name = resolve_version(ws, version)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ServeError(f"{out}: export directory exists and is not empty")
    meta = ws.versions.get(name)
    files = ws.versions.files(name)
    record = Ledger(ws.ledger_path, recover=False).get(name)
    manifest = {
        "format": 1,
        "version": name,
        "commit": meta.commit,
        "parent": meta.parent,
        "summary": meta.summary,
        "feature": meta.feature,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "status": record.status if record else None,
        "scores": record.scores.model_dump(mode="json") if record and record.scores else None,
        "eval_context": record.eval_context.model_dump(mode="json") if record and record.eval_context else None,
        "files": sorted(files),
    }
    for rel, text in files.items():
        atomic_write_text(out / EXPORT_SPEC_DIR / rel, text)
    atomic_write_text(out / MANIFEST_NAME, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return out


# ----------------------------------------------------------------------------------------------
# request checks


_ALLOWED_CONTROLS = frozenset("\t\n\r")


def question_problem(name: str, value: str | None, max_chars: int) -> str | None:
    """Why a query parameter is unacceptable (None if fine)."""
    if value is None:
        return f"missing query parameter {name!r}"
    if not value.strip():
        return f"query parameter {name!r} is empty"
    if len(value) > max_chars:
        return f"query parameter {name!r} is too long ({len(value)} > {max_chars} characters)"
    for ch in value:
        # U+FFFD is what undecodable percent-encoded bytes become: binary garbage, not a question.
        if ch == "\ufffd" or (unicodedata.category(ch) in ("Cc", "Cs") and ch not in _ALLOWED_CONTROLS):
            return f"query parameter {name!r} contains a control or undecodable character (U+{ord(ch):04X})"
    return None


_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
# Function words: frequent, short, and rarely shared between the three challenge languages.
_LANG_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset({
        "the", "and", "is", "are", "was", "were", "who", "what", "which", "how", "many", "much", "of",
        "with", "for", "does", "did", "where", "when", "list", "give", "me", "show", "all", "an", "that",
        "have", "has", "by", "from"
    }),
    "de": frozenset({
        "der", "die", "das", "und", "ist", "sind", "war", "wer", "was", "welche", "welcher", "welches",
        "wie", "viele", "von", "mit", "für", "wo", "wann", "gibt", "es", "hat", "haben", "ein", "eine",
        "einen", "dem", "den", "des", "im", "zum", "zur", "nicht", "alle", "auf"
    }),
    "es": frozenset({
        "el", "la", "los", "las", "y", "es", "son", "fue", "quién", "quien", "qué", "que", "cuál", "cuáles",
        "cuántos", "cuántas", "cuánto", "de", "del", "con", "para", "por", "dónde", "donde", "cuándo",
        "hay", "tiene", "un", "una", "al", "se", "lo"
    }),
}
_LANG_CHARS = {"de": "äöüß", "es": "ñ¿¡áéíóú"}


def detect_language(text: str) -> str:
    """en / de / es from function words and telltale characters (the API is not told)."""
    lowered = text.lower()
    words = _WORD.findall(lowered)
    scores = {lang: sum(w in vocab for w in words) for lang, vocab in _LANG_WORDS.items()}
    for lang, chars in _LANG_CHARS.items():
        scores[lang] += 2 * sum(lowered.count(c) for c in chars)
    best = max(scores, key=lambda lang: (scores[lang], lang == "en"))
    return best if scores[best] > 0 else "en"


def _same_dataset(requested: str, served: str) -> bool:
    return requested.strip().rstrip("/") == served.strip().rstrip("/")


# ----------------------------------------------------------------------------------------------
# the app


class T2SAnswer(BaseModel):
    """The TEXT2SPARQL challenge response."""

    model_config = ConfigDict(extra="forbid")
    dataset: str = Field(description="The dataset id of the request.")
    question: str = Field(description="The question as received.")
    query: str = Field(description="The SPARQL query answering the question (a no-rows query on failure).")


class ErrorBody(BaseModel):
    detail: str = Field(description="One line: what is wrong with the request or the server.")


class Health(BaseModel):
    status: str = Field(description="'ok' or 'unavailable'.")
    version: str
    commit: str | None
    dataset: str
    problem: str | None = Field(description="Why question routes answer 503, if they do.")
    timeout_s: float
    info: dict[str, Any] = Field(default_factory=dict)


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _header_value(text: str, limit: int = 300) -> str:
    """HTTP header values must be Latin-1 and one line: agent messages may be neither."""
    flat = " ".join(text.split())[:limit]
    return flat.encode("ascii", "backslashreplace").decode("ascii")


def _request_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:6]}"


def _write_fallback_trace(served: ServedAgent, rid: str, question: str, lang: str, status: str,
                          reason: str) -> None:
    """The server's own record when the agent could not finish (its trace may be incomplete)."""
    from worker_agent.trace import Trace, trace_filename

    if served.traces_dir is None:
        return
    trace = Trace(served.traces_dir / trace_filename(f"{rid}.fallback"), uid=rid, question=question,
                  spec_version=served.version, spec_commit=served.commit)
    trace.step("fallback", reason=reason, lang=lang, agent_trace=trace_filename(rid))
    trace.finish(status, FALLBACK_QUERY, detail=reason, fallback=True)


def _source(ws_or_agent_bundle: Any, version: str) -> ServedAgent:
    if isinstance(ws_or_agent_bundle, ServedAgent):
        return ws_or_agent_bundle
    return load_served_agent(ws_or_agent_bundle, version)


def create_app(
    ws_or_agent_bundle: Any,
    *,
    version: str = "deployed",
    timeout_s: float = 30.0,
    max_question_chars: int = 2000,
    max_workers: int = 8,
) -> Any:
    """A FastAPI app serving one version (a Workspace + ``version``, or a ready ServedAgent)."""
    if timeout_s <= 0 or max_question_chars < 1 or max_workers < 1:
        raise ServeError("timeout_s, max_question_chars and max_workers must be positive")
    served = _source(ws_or_agent_bundle, version)
    if served.traces_dir is not None:
        served.traces_dir.mkdir(parents=True, exist_ok=True)
    pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="t2s-agent")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> Any:
        yield
        # Agents that overran their time limit may still run; do not wait for them on shutdown.
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="TEXT2SPARQL agent",
        version=served.version,
        description=f"Answers questions about {served.dataset_id} with SPARQL (spec version {served.version}).",
        lifespan=lifespan,
    )
    app.state.served = served
    app.state.pool = pool

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Same one-line body as our own checks (FastAPI's default is a list of error objects).
        err = exc.errors()[0] if exc.errors() else {}
        name = str(err.get("loc", ("", "request"))[-1])
        if err.get("type") == "missing":
            return _error(422, f"missing query parameter {name!r}")
        return _error(422, f"query parameter {name!r}: {err.get('msg', 'invalid')}")

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        # The official client aborts on a non-JSON body; even a bug must answer JSON.
        return _error(500, f"internal error: {type(exc).__name__}: {_one_line(exc)}")

    async def answer(question: str, dataset: str) -> JSONResponse:
        for name, value in (("question", question), ("dataset", dataset)):
            problem = question_problem(name, value, max_question_chars)
            if problem:
                return _error(422, problem)
        if not _same_dataset(dataset, served.dataset_id):
            return _error(404, f"dataset {dataset!r} is not served here (serving {served.dataset_id})")
        if served.problem is not None or served.agent is None:
            return _error(503, served.problem or "no agent loaded", {VERSION_HEADER: served.version})
        rid = _request_id()
        lang = detect_language(question)
        query, status, fallback = await _ask(served, pool, rid, question.strip(), lang, timeout_s)
        headers = {STATUS_HEADER: status, VERSION_HEADER: served.version, REQUEST_ID_HEADER: rid}
        if fallback:
            headers[FALLBACK_HEADER] = _header_value(fallback)
        body = T2SAnswer(dataset=dataset, question=question, query=query)
        return JSONResponse(body.model_dump(), headers=headers)

    responses: dict[int | str, dict[str, Any]] = {
        404: {"model": ErrorBody, "description": "The dataset is not served here."},
        422: {"model": ErrorBody, "description": "Missing, empty, oversized or binary parameter."},
        503: {"model": ErrorBody, "description": "The deployed version cannot answer (see /health)."},
    }
    question_doc = Query(description="The natural-language question (any language; not sent separately).")
    dataset_doc = Query(description=f"The dataset id, e.g. {served.dataset_id}")

    for path in QUESTION_ROUTES:
        @app.get(path, response_model=T2SAnswer, responses=responses, summary="Answer a question with SPARQL",
                 name=f"text2sparql{path.replace('/', '_')}")
        async def route(question: str = question_doc, dataset: str = dataset_doc) -> JSONResponse:
            return await answer(question, dataset)

    @app.get("/health", response_model=Health, responses={503: {"model": Health}}, summary="Version and status")
    async def health() -> JSONResponse:
        body = Health(status="unavailable" if served.problem else "ok", version=served.version,
                      commit=served.commit, dataset=served.dataset_id, problem=served.problem,
                      timeout_s=timeout_s, info=served.info)
        return JSONResponse(body.model_dump(), status_code=503 if served.problem else 200)

    return app


async def _ask(served: ServedAgent, pool: ThreadPoolExecutor, rid: str, question: str, lang: str,
               timeout_s: float) -> tuple[str, str, str | None]:
    """(query, status, fallback reason or None). Never raises: a failure becomes the fallback."""
    agent = served.agent
    assert agent is not None
    start = time.perf_counter()
    future: Future[Any] | None = None
    try:
        future = pool.submit(agent.ask, question, uid=rid, lang=lang)
        result = await asyncio.wait_for(asyncio.wrap_future(future), timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure becomes the fallback answer
        # Our time limit expired iff the agent's future is still pending (or was never started);
        # a TimeoutError raised by the agent itself is an agent error like any other.
        if isinstance(exc, TimeoutError) and future is not None and (not future.done() or future.cancelled()):
            status, reason = "timeout", f"timeout: no answer within {timeout_s:g} s"
        else:  # the agent raised (WorkerAgent normally catches everything) or the pool is shut down
            status, reason = "tool_error", f"agent error: {type(exc).__name__}: {_one_line(exc)}"
        try:
            await asyncio.to_thread(_write_fallback_trace, served, rid, question, lang, status, reason)
        except OSError as err:  # a full disk must not cost the client its answer
            reason += f" (fallback trace not written: {err})"
        return FALLBACK_QUERY, status, reason
    status = str(getattr(result, "status", "answered"))
    query = getattr(result, "query", None)
    if isinstance(query, str) and query.strip():
        return query, status, None
    # The agent finished without a query: its own trace already says why (status, detail).
    detail = _one_line(getattr(result, "detail", "") or "") or "no query"
    elapsed = time.perf_counter() - start
    return FALLBACK_QUERY, status, f"{status}: {detail} ({elapsed:.1f} s)"


# ----------------------------------------------------------------------------------------------
# running


def run_server(
    ws_or_agent_bundle: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    version: str = "deployed",
    timeout_s: float = 30.0,
    max_question_chars: int = 2000,
    max_workers: int = 8,
    log_level: str = "info",
) -> None:
    """Serve in the foreground with uvicorn until interrupted."""
    import uvicorn

    app = create_app(ws_or_agent_bundle, version=version, timeout_s=timeout_s,
                     max_question_chars=max_question_chars, max_workers=max_workers)
    uvicorn.run(app, host=host, port=port, log_level=log_level)


class BackgroundServer:
    """uvicorn in a daemon thread on ``host`` (port 0 = a free port); for tests and benchmarks.

    Use as a context manager; ``url`` is ``http://host:port/`` once started.
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                                     lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="t2s-uvicorn", daemon=True)
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def start(self, timeout: float = 20.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ServeError(f"server on {self.host}:{self.port} did not start within {timeout:g} s")
            time.sleep(0.02)
        sockets = [s for server in self._server.servers for s in server.sockets]
        self.port = int(sockets[0].getsockname()[1])
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def serving(app: Any, **kw: Any) -> Iterator[str]:
    """``with serving(app) as url:`` — a BackgroundServer yielding its URL."""
    with BackgroundServer(app, **kw) as server:
        yield server.url
