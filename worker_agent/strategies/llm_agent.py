"""The tool-using LLM agent: plan, link, draft and verify with native tool calling.

One question is one conversation. The system prompt (``system.j2``: tools and enabled rules) and
the user prompt (``question.j2``: the question and the ``few_shot`` most similar *training*
examples) open it; then, for at most ``max_iterations`` model turns, every tool call is run
through :meth:`Tools.run_call` (JSON that always fits the tool-result size limit, plus the same
result as data), shown to the model via the spec's ``format_tool_result`` hook (which gets the
data) and appended to the conversation. Test queries are graded on the whole preview.

The model finishes by calling the fourth tool, ``submit_query(sparql)``, or by replying with a
```` ```sparql ```` block. A final query is accepted only when it runs and its result has the shape
the question expects (:func:`expected_shape`: one number for "how many", a boolean for yes/no,
otherwise at least one row). Otherwise ``repair.j2`` tells the model what is wrong and the loop
goes on. Every non-accepted exit returns the best query seen (submitted or tested), so a run that
ran out of turns still scores what it found.

Exit statuses (a subset of :data:`worker_agent.trace.STATUSES`): ``answered``,
``budget_exhausted``, ``invalid_query`` (out of turns and no query seen ever ran),
``tool_error`` (a spec hook raised), ``llm_error`` (the provider failed, or two turns in a row
brought only malformed tool calls or neither a tool call nor a query) and ``timeout``.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from worker_agent.llm import LLMError, Message, Model, ToolCall
from worker_agent.retrieval import Retriever, make_retriever, normalize_text
from worker_agent.spec import PROMPT_VARIABLES, AgentSpec, HookError
from worker_agent.strategies import Example, StrategyResult
from worker_agent.tools import ToolOutput, Tools
from worker_agent.trace import Trace

__all__ = [
    "SUBMIT_SCHEMA",
    "SUBMIT_TOOL",
    "LLMAgentStrategy",
    "Shape",
    "check_result",
    "expected_shape",
    "extract_query",
    "guess_language",
    "select_examples",
]

SUBMIT_TOOL = "submit_query"
SUBMIT_SCHEMA: dict[str, Any] = {
    "name": SUBMIT_TOOL,
    "description": (
        "Submit your final SPARQL query. It is run on the knowledge graph and accepted when it "
        "returns answers of the kind the question asks for; otherwise you get the problem back "
        "and can repair the query."
    ),
    "parameters": {
        "type": "object",
        "properties": {"sparql": {"type": "string", "description": "The complete final query."}},
        "required": ["sparql"],
        "additionalProperties": False,
    },
}

# Said when a reply contains neither a tool call nor a query; fixed protocol text, not a prompt
# the researcher tunes (the tunable wording lives in system.j2 and repair.j2).
NUDGE = ("Your reply contained no tool call and no query. Call a tool, or give the final query "
         f"with `{SUBMIT_TOOL}` or alone in one ```sparql code block.")
# Two bad turns in a row mean the model is not following the protocol; more turns only cost money.
MAX_BAD_TURNS = 2

Shape = Literal["boolean", "count", "rows"]
_SHAPE_TEXT = {"boolean": "a yes/no answer (use an ASK query)",
               "count": "a single number (one row, one column)",
               "rows": "a list of answers (SELECT returning at least one row)"}

# Grades of a candidate query: higher is better; the best one is returned when no query passes.
ERROR, EMPTY, WRONG_SHAPE, ACCEPTED = 0, 1, 2, 3


# --------------------------------------------------------------------------------------------
# Question analysis: language and expected answer shape
# --------------------------------------------------------------------------------------------

def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOPWORDS: dict[str, frozenset[str]] = {
    "en": _words("the of in is are was were what which who how many does did do and for with "
                    "to from by all list give me show"),
    "es": _words("el la los las de del en es son fue qué cuál cuáles quién quiénes cómo "
                    "cuántos cuántas y por para con que una un se enumere dónde cuándo"),
    "de": _words("der die das ist sind war wer wie viele welche welcher und von mit im für "
                    "ein eine gib zeige"),
    "fr": _words("le la les des du est sont était qui quel quelle quels combien et pour avec "
                    "dans une un donne"),
}


def guess_language(text: str) -> str:
    """A best guess at the question's language ("en", "es", "de", "fr"); "en" when unsure.

    Used only when the caller does not know the language: the prompt says which language the
    question is in, and the answer-shape check reads question words of that language.
    """
    if "¿" in text or "ñ" in text.lower():
        return "es"
    words = re.findall(r"[^\W\d_]+", text.casefold())
    votes = Counter({lang: sum(w in stop for w in words) for lang, stop in _STOPWORDS.items()})
    lang, hits = votes.most_common(1)[0]
    return lang if hits and hits > votes["en"] else "en"


_EN_AUX = re.compile(r"^(is|are|was|were|do|does|did|has|have|had|can|could|will|would|should|"
                     r"shall|may|might|must)\b")
# "Can you list ...", "Could you give me ..." are requests, not yes/no questions.
_EN_REQUEST = re.compile(r"^(can|could|would|will)\s+(you|u)\b")
_EN_COUNT = re.compile(r"^(how many|how much|what is the (total )?number of|what's the number of|"
                       r"count (the|all|how)\b)")
_ES_COUNT = re.compile(r"^(cu[aá]nt[oa]s?\b|cu[aá]l es el n[uú]mero de|cu[aá]l es la cantidad de)")
_ES_WH = re.compile(r"\b(qu[eé]|cu[aá]l(es)?|qui[eé]n(es)?|d[oó]nde|cu[aá]ndo|c[oó]mo|cu[aá]nt[oa]s?|"
                    r"enumere|enumera|lista|liste|dame|muestre|muestra|nombre|tod[oa]s)\b")
_DE_COUNT = re.compile(r"^(wie viele|wie viel|anzahl)\b")
_DE_AUX = re.compile(r"^(ist|sind|war|waren|hat|haben|hatte|gibt es|kann|wurde|wurden)\b")
_FR_COUNT = re.compile(r"^(combien)\b")
_FR_AUX = re.compile(r"^(est-ce|est|sont|était|a-t-il|y a-t-il)\b")
# A count "per X" returns one number per group, not one number.
_PER_GROUP = re.compile(r"\b(each|per|every|cada|por cada|jede[rsn]?|pro|chaque|par)\b")


def expected_shape(question: str, lang: str) -> Shape | None:
    """What the answer should look like, or None when the question words are not understood
    (then any non-empty result passes: a wrong guess must not reject a right query)."""
    text = question.strip().casefold().lstrip("¿¡\"'( ").strip()
    if not text:
        return None
    if lang == "en":
        if _EN_COUNT.match(text):
            return "rows" if _PER_GROUP.search(text) else "count"
        if _EN_AUX.match(text) and not _EN_REQUEST.match(text):
            return "boolean"
        return "rows"
    if lang == "es":
        if _ES_COUNT.match(text):
            return "rows" if _PER_GROUP.search(text) else "count"
        if question.strip().startswith("¿") and not _ES_WH.search(text):
            return "boolean"  # "¿Fue Emma Watson parte del elenco ...?": no question word
        return "rows"
    if lang == "de":
        if _DE_COUNT.match(text):
            return "rows" if _PER_GROUP.search(text) else "count"
        return "boolean" if _DE_AUX.match(text) else None
    if lang == "fr":
        if _FR_COUNT.match(text):
            return "rows" if _PER_GROUP.search(text) else "count"
        return "boolean" if _FR_AUX.match(text) else None
    return None


# --------------------------------------------------------------------------------------------
# Final queries and their checks
# --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\n(.*?)```", re.DOTALL)
_QUERY_START = re.compile(r"^\s*(PREFIX|BASE|SELECT|ASK|CONSTRUCT|DESCRIBE)\b", re.IGNORECASE)


def extract_query(text: str) -> str | None:
    """The query in a reply: the last ```sparql block (or last unlabelled block that looks like
    SPARQL), or the whole reply when it is a bare query; None when there is none."""
    blocks = [(lang.lower(), body.strip()) for lang, body in _FENCE.findall(text or "")]
    for lang, body in reversed(blocks):
        if body and (lang in ("sparql", "rq") or (not lang and _QUERY_START.match(body))):
            return body
    stripped = (text or "").strip()
    if not blocks and _QUERY_START.match(stripped):
        return stripped
    return None


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _is_number(value: str | None) -> bool:
    if value is None:
        return False
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':  # a number stored as a string literal
        text = text[1:-1]
    text = text.split("^^", 1)[0].strip('"')
    return bool(_NUMBER.match(text))


def check_result(result: Mapping[str, Any], shape: Shape | None) -> tuple[int, str | None]:
    """Grade a test result (the compact form of :class:`worker_agent.tools.Preview`) against the
    expected shape: ``(grade, problem)``; ``problem`` is None exactly when the grade is ACCEPTED."""
    if not result.get("ok"):
        kind = result.get("error_kind") or "execution"
        return ERROR, f"{kind} error: {result.get('error') or 'the query failed'}"
    if result.get("boolean") is not None:
        if shape in ("boolean", None):
            return ACCEPTED, None
        return WRONG_SHAPE, f"the query is an ASK query, but the question asks for {_SHAPE_TEXT[shape]}"
    rows = [row for row in result.get("rows") or [] if any(v is not None for v in row)]
    # A preview cut to fit a message may show no row of a non-empty result.
    hidden = bool(result.get("truncated")) and result.get("total") != 0
    if not rows and not hidden:
        hint = "; the question is a yes/no question, so use an ASK query" if shape == "boolean" else ""
        return EMPTY, f"empty result: the query returns no answers{hint}"
    if shape == "boolean":
        return WRONG_SHAPE, "the question is a yes/no question, but the query returns rows: use an ASK query"
    if shape == "count":
        total = result.get("total")
        values = [v for v in rows[0] if v is not None] if rows else []
        if total != 1 or len(values) != 1 or not _is_number(values[0]):
            columns = len(result.get("vars") or (rows[0] if rows else []))
            return WRONG_SHAPE, (f"the question asks for {_SHAPE_TEXT['count']}, but the query returns "
                                 f"{total if isinstance(total, int) else 'many'} row(s) with {columns} "
                                 "column(s)" + ("" if len(values) != 1 or _is_number(values[0])
                                                else " and the value is not a number"))
    return ACCEPTED, None


def _preview_text(result: Mapping[str, Any], limit: int = 10) -> str:
    """Rows of a result as plain lines for repair.j2 ("" when there are none)."""
    if not result.get("ok"):
        return ""
    if result.get("boolean") is not None:
        return f"ASK result: {str(result['boolean']).lower()}"
    rows = result.get("rows") or []
    if not rows:
        return ""
    header = " | ".join(f"?{v}" for v in result.get("vars") or [])
    lines = [" | ".join("(unbound)" if v is None else str(v) for v in row) for row in rows[:limit]]
    total = result.get("total")
    footer = f"({total} row(s) in total)" if isinstance(total, int) else "(more rows than counted)"
    return "\n".join(([header] if header else []) + lines + [footer])


# --------------------------------------------------------------------------------------------
# Few-shot retrieval (training examples only: the strategy never sees other questions)
# --------------------------------------------------------------------------------------------


def select_examples(retriever: Retriever, question: str, k: int) -> list[Example]:
    """The ``k`` training examples most similar to ``question``.

    An example with the very same text is skipped: when a training question is itself asked
    (e.g. evaluating on the train split), showing its gold query would only measure copying.
    """
    if k <= 0:
        return []
    target = normalize_text(question)
    hits = retriever.rank(question, k + 1)
    return [h.example for h in hits if normalize_text(h.example.text) != target][:k]


_PREFIX_DECL = re.compile(r"\bPREFIX\s+([A-Za-z][\w.-]*)?:\s*<([^>\s]*)>", re.IGNORECASE)


def _declared_prefixes(queries: Sequence[str]) -> dict[str, str]:
    """Prefixes the training queries declare: the dataset's own naming conventions."""
    found: dict[str, str] = {}
    for query in queries:
        for prefix, iri in _PREFIX_DECL.findall(query):
            found.setdefault(prefix, iri)
    return found


# --------------------------------------------------------------------------------------------
# The strategy
# --------------------------------------------------------------------------------------------


@dataclass
class _Candidate:
    query: str
    grade: int
    problem: str | None
    source: str  # "submit_query", "reply" or "test_sparql"


class _Stop(Exception):
    """Ends the conversation with a result (raised from deep inside a turn)."""

    def __init__(self, result: StrategyResult) -> None:
        super().__init__(result.status)
        self.result = result


class LLMAgentStrategy:
    """Tool-calling LLM loop over one spec, one tool set, the training examples and a model.

    ``dataset_name``, ``default_namespace`` and ``prefixes`` feed ``question.j2``; by default they
    come from the KG's name, nothing, and the prefixes the training queries declare.
    """

    def __init__(self, spec: AgentSpec, tools: Tools, examples: Sequence[Example], model: Model,
                 *, dataset_name: str | None = None, default_namespace: str | None = None,
                 prefixes: Mapping[str, str] | None = None) -> None:
        self.spec = spec
        self.tools = tools
        self.examples = list(examples)
        self.model = model
        self.dataset_name = dataset_name or getattr(tools.kg, "name", "") or "knowledge graph"
        self.default_namespace = default_namespace
        self.prefixes = dict(prefixes) if prefixes is not None else _declared_prefixes(
            [e.sparql for e in self.examples])
        self.tool_schemas = self._offered_tools()
        # Built once from the training examples only: nothing else can reach a prompt. Texts are
        # compared unmasked (masking entities would need KG lookups for every example).
        self.retriever, self.retrieval_note = make_retriever(
            spec.config.retrieval, self.examples, [e.text for e in self.examples])

    def _offered_tools(self) -> list[dict[str, Any]]:
        """The spec's enabled tools plus ``submit_query``, as neutral JSON schemas."""
        settings = self.spec.config.tools
        enabled = [s for s in self.tools.schemas()
                   if getattr(getattr(settings, s["name"], None), "enabled", False)]
        return enabled + [json.loads(json.dumps(SUBMIT_SCHEMA))]

    def answer(self, question: str, trace: Trace, *, lang: str | None = None,
               deadline: float | None = None) -> StrategyResult:
        return _Conversation(self, question, trace, lang, deadline).run()

    # -- prompts (all variables of PROMPT_VARIABLES are passed, as the spec contract requires)

    def system_prompt(self) -> str:
        tools = [{"name": s["name"], "description": s["description"]} for s in self.tool_schemas]
        return self.spec.render("system", **_only("system", tools=tools))

    def question_prompt(self, question: str, lang: str, examples: Sequence[Example]) -> str:
        shown = [{"question": e.text, "sparql": e.sparql} for e in examples]
        return self.spec.render("question", **_only(
            "question", question=question, lang=lang, examples=shown,
            dataset_name=self.dataset_name, default_namespace=self.default_namespace,
            prefixes=self.prefixes))

    def repair_prompt(self, question: str, sparql: str, problem: str, preview: str) -> str:
        return self.spec.render("repair", **_only("repair", question=question, sparql=sparql,
                                                  problem=problem, preview=preview))


def _only(prompt: str, **variables: Any) -> dict[str, Any]:
    """Guard: the strategy passes exactly the variables the spec contract lists for a prompt."""
    if set(variables) != PROMPT_VARIABLES[prompt]:
        raise RuntimeError(f"llm_agent passes {sorted(variables)} to prompts/{prompt}.j2, but the "
                           f"spec contract lists {sorted(PROMPT_VARIABLES[prompt])}")
    return variables


class _Conversation:
    """The state of one question: messages, candidates, counters. ``run`` never raises for
    model, tool or hook failures; they end as statuses."""

    def __init__(self, strategy: LLMAgentStrategy, question: str, trace: Trace,
                 lang: str | None, deadline: float | None) -> None:
        self.s = strategy
        self.question = question
        self.trace = trace
        self.lang = lang or guess_language(question)
        self.lang_source = "given" if lang else "guessed"
        self.shape = expected_shape(question, self.lang)
        self.deadline = deadline
        self.messages: list[Message] = []
        self.candidates: list[_Candidate] = []
        self.bad_turns = 0
        self.turns = 0
        self.format_hook = strategy.spec.hook("format_tool_result")

    # -- driver

    def run(self) -> StrategyResult:
        try:
            self._open()
            for _ in range(self.s.spec.config.max_iterations):
                self._check_deadline()
                self._turn()
            return self._out_of_turns()
        except _Stop as stop:
            return stop.result

    def _open(self) -> None:
        k = self.s.spec.config.few_shot
        shown = select_examples(self.s.retriever, self.question, k)
        self.trace.step("examples", method=self.s.retriever.name, k=k,
                        uids=[e.uid for e in shown], note=self.s.retrieval_note)
        self.trace.step("analysis", lang=self.lang, lang_source=self.lang_source,
                        expected_shape=self.shape)
        system = Message("system", self.s.system_prompt())
        user = Message("user", self.s.question_prompt(self.question, self.lang, shown))
        self.messages = [system, user]
        self.trace.step("prompt", role="system", content=system.content,
                        tools=[t["name"] for t in self.s.tool_schemas])
        self.trace.step("prompt", role="user", content=user.content)

    def _turn(self) -> None:
        self.turns += 1
        try:
            completion = self.s.model.complete(self.messages, self.s.tool_schemas)
        except LLMError as exc:
            self.trace.step("llm_error", turn=self.turns, error=str(exc))
            raise _Stop(self._result("llm_error", str(exc))) from exc
        message = completion.message
        self.trace.add_usage(completion.input_tokens, completion.output_tokens, completion.cost_usd)
        self.trace.step("llm", turn=self.turns, message=message.to_dict(),
                        input_tokens=completion.input_tokens,
                        output_tokens=completion.output_tokens, cost_usd=completion.cost_usd,
                        cached=completion.cached, model=completion.model or self.s.model.name,
                        finish_reason=completion.finish_reason)
        self.messages.append(message)
        usable = self._tool_calls(message.tool_calls) if message.tool_calls else \
            self._reply(message.content)
        self._count_bad(usable)

    def _count_bad(self, usable: bool) -> None:
        self.bad_turns = 0 if usable else self.bad_turns + 1
        if self.bad_turns >= MAX_BAD_TURNS:
            raise _Stop(self._result("llm_error", f"the model sent only malformed tool calls or "
                                                  f"no query for {self.bad_turns} turns in a row"))

    # -- tool calls

    def _tool_calls(self, calls: list[ToolCall]) -> bool:
        """Run every call of one turn; True when at least one was well formed."""
        usable = False
        for call in calls:
            self._check_deadline()
            started = time.perf_counter()
            text, well_formed, done = self._run_call(call)
            usable = usable or well_formed
            self.messages.append(Message("tool", text, tool_call_id=call.id))
            self.trace.step("tool", turn=self.turns, call_id=call.id, name=call.name,
                            arguments=call.arguments, malformed=not well_formed, result=text,
                            seconds=round(time.perf_counter() - started, 4))
            if done is not None:
                raise _Stop(done)
        return usable

    def _run_call(self, call: ToolCall) -> tuple[str, bool, StrategyResult | None]:
        """-> (text for the model, well formed?, the final result when a submission passed)."""
        offered = [t["name"] for t in self.s.tool_schemas]
        if call.malformed:
            raw = str(call.arguments.get("_raw", ""))[:300]
            return (f"error: the arguments of {call.name} are not a JSON object ({raw!r}); "
                    "send a JSON object matching the tool's schema"), False, None
        if call.name not in offered:
            return (f"error: unknown tool {call.name!r}; available tools: {', '.join(offered)}",
                    False, None)
        if call.name == SUBMIT_TOOL:
            sparql = call.arguments.get("sparql")
            if not isinstance(sparql, str) or not sparql.strip() or set(call.arguments) - {"sparql"}:
                return (f"error: bad arguments for {SUBMIT_TOOL}: expected "
                        '{"sparql": "<the final query>"}'), False, None
            text, done = self._submit(sparql, SUBMIT_TOOL)
            return text, True, done
        out = self.s.tools.run_call(call.name, call.arguments)
        if out.error == "arguments":
            return out.text, False, None
        if out.preview is not None:
            # Graded on the whole preview, not on the rows that fit in the model's message.
            grade, problem = check_result(out.preview.compact(), self.shape)
            self.candidates.append(_Candidate(call.arguments["sparql"], grade, problem, "test_sparql"))
        return self._format(call.name, out), True, None

    def _format(self, tool: str, out: ToolOutput) -> str:
        if self.format_hook is None:
            return out.text
        try:
            return self.format_hook(tool, out.data)
        except HookError as exc:
            self.trace.step("hook_error", hook="format_tool_result", error=str(exc))
            raise _Stop(self._result("tool_error", str(exc))) from exc

    # -- final answers

    def _reply(self, content: str) -> bool:
        """A reply without tool calls: a final query, or nothing usable (nudge the model)."""
        query = extract_query(content)
        if query is None:
            self._say(NUDGE)
            return False
        repair, done = self._submit(query, "reply")
        if done is not None:
            raise _Stop(done)
        self._say(repair)
        return True

    def _submit(self, sparql: str, source: str) -> tuple[str, StrategyResult | None]:
        """Verify a final query -> (repair.j2 text, None), or (a receipt, the final result)."""
        try:
            final = self._finalize(sparql)
        except HookError as exc:
            self.trace.step("hook_error", hook="postprocess_query", error=str(exc))
            raise _Stop(self._result("tool_error", str(exc))) from exc
        self._check_deadline()
        preview = self.s.tools.test_sparql(final)
        result = preview.compact()
        grade, problem = check_result(result, self.shape)
        ran = preview.query or final
        self.candidates.append(_Candidate(ran if grade > ERROR else sparql, grade, problem, source))
        self.trace.step("verify", turn=self.turns, source=source, query=ran, grade=grade,
                        accepted=problem is None, problem=problem, result=result)
        if problem is None:
            return "accepted", StrategyResult(ran, "answered", extra=self._extra())
        return self.s.repair_prompt(self.question, final, problem, _preview_text(result)), None

    def _finalize(self, sparql: str) -> str:
        """The query as the worker will deliver it: rule enforcements, then postprocess_query."""
        query = self.s.spec.enforce(sparql.strip())
        hook = self.s.spec.hook("postprocess_query")
        return hook(query) if hook is not None else query

    def _say(self, text: str) -> None:
        self.messages.append(Message("user", text))
        self.trace.step("message", turn=self.turns, role="user", content=text)

    # -- endings

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise _Stop(self._result("timeout", f"time limit reached after {self.turns} turn(s)"))

    def _out_of_turns(self) -> StrategyResult:
        best = self._best()
        if best is not None and best.grade == ERROR:
            return self._result("invalid_query", f"no query ran within {self.turns} turns; "
                                                 f"last problem: {best.problem}")
        return self._result("budget_exhausted", f"no acceptable query within {self.turns} turns")

    def _best(self) -> _Candidate | None:
        """Highest grade wins; among equals the latest (later drafts refine earlier ones)."""
        if not self.candidates:
            return None
        return max(reversed(self.candidates), key=lambda c: c.grade)

    def _result(self, status: str, detail: str) -> StrategyResult:
        best = self._best()
        if best is not None:
            detail += f"; returning the best {best.source} query (grade {best.grade})"
        return StrategyResult(best.query if best else None, status, detail, extra=self._extra())

    def _extra(self) -> dict[str, Any]:
        return {"turns": self.turns, "lang": self.lang, "expected_shape": self.shape,
                "candidates": len(self.candidates)}

