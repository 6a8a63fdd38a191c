"""The offline strategy: deterministic text-to-SPARQL by retrieving, adapting and composing queries.

No LLM. For a new question the strategy

1. **links** mentions in the question with the surface-form tool (entities, classes, properties;
   a compound that only partly names its best candidate is split into the things its words name
   exactly), finds numbers and quoted strings, and looks up capitalized words the KG holds as
   values ("... vendors in Spain" -> "Spain");
2. **retrieves** the most similar training questions (:mod:`worker_agent.retrieval`, mentions
   masked so that template wording dominates);
3. **adapts** each retrieved gold query (:mod:`worker_agent.strategies.template`): its *slots*
   (entity IRIs, classes, properties, string and number literals that the training question
   mentions) are aligned with the new mentions by kind, type compatibility, order and word
   alignment (:mod:`worker_agent.strategies.wording`), then substituted; a slot the new question
   has no filler for is relaxed; entities and values the template lacks are joined to its answer;
   superlatives and comparisons that point the other way flip ``ORDER BY`` and the comparison;
4. **composes** queries from the question's own mentions and the ontology when no template
   fits (:mod:`worker_agent.strategies.composition`): every entity or value joined to the
   answer by the predicate the question's words name (or the only one reaching the class it
   asks for), in one or two hops;
5. **orders** the candidates (clean adaptations, well-supported compositions, adaptations that
   use every mention, other compositions, the rest), **executes** them with the test-SPARQL tool,
   repairs empty ones (inverse directions, re-linked predicates), shapes them as the question
   asks (ASK, COUNT or a list; the answer's kind, columns and names) and **verifies** them,
   falling back to the next candidate.

The agent spec steers all of it. Knobs: ``few_shot`` (templates tried), ``retrieval``,
``tools.surface_forms.k`` (candidates per mention) and ``fuzzy_threshold`` (linking threshold).
Rules (by id, see ``versions/v1/rules.yaml``): ``unicode_fallback`` (accent folding while
linking), ``surname_linking`` (titles dropped, surnames linked; off: partial person names are
rejected), ``verify_nonempty`` (empty results are rejected), ``expected_shape`` (a number for
"how many", a boolean for yes/no, a list rather than a count otherwise; mismatches are repaired
or rejected), ``ask_for_yes_no`` (ASK templates for yes/no questions), ``triple_direction``
(inverse triple patterns on empty results), ``answer_type_constraint`` (``?answer a <Class>`` for
the class the question names, and the variable holding the asked-for kind projected),
``project_iris`` (entities instead of their labels unless names are asked for; only the columns
the question asks for) and ``ontology_namespace`` (ontology-namespace predicates first when
re-linking).

Every retrieval hit, linking decision, candidate query and execution is a trace step. The
strategy only ever sees the training examples it was built with.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rapidfuzz import fuzz

from worker_agent.kg import KGError
from worker_agent.retrieval import Hit, Retriever, make_retriever, normalize_text
from worker_agent.strategies import Example, StrategyResult
from worker_agent.strategies.composition import Anchor, Composition, Join
from worker_agent.strategies.template import (
    RDF_TYPE,
    XSD,
    Slot,
    Template,
    TemplateError,
    Tok,
    Triple,
    Variant,
    add_column,
    add_patterns,
    add_type,
    expand,
    flip_comparisons,
    flip_order,
    literal_value,
    parse_template,
    relax,
    reproject,
    requote,
    to_ask,
    to_count,
    triple_vars,
    uncount,
    var_class,
    walk_terms,
    where_close,
)
from worker_agent.strategies.wording import (
    HINTS,
    Mention,
    QuestionKind,
    align_words,
    asks_for_names,
    asks_several,
    asks_who,
    comparison_direction,
    find_numbers,
    find_quoted,
    is_number,
    mentions_names,
    norm,
    overlapping,
    question_kind,
    same_number,
    singulars,
    snap,
    split_camel,
    superlative_polarity,
    word_sim,
)
from worker_agent.tools import (
    STOPWORDS,
    Candidate,
    Span,
    local_name,
    local_name_surface,
    tokenize,
)

if TYPE_CHECKING:
    from worker_agent.spec import AgentSpec
    from worker_agent.tools import Tools
    from worker_agent.trace import Trace

__all__ = [
    "OfflineStrategy", "Template", "TemplateError", "comparison_direction", "find_numbers",
    "parse_template", "question_kind", "superlative_polarity",
]

RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL = "http://www.w3.org/2002/07/owl#"
_CLASS_TYPES = frozenset({OWL + "Class", RDFS + "Class"})
_PROPERTY_TYPES = frozenset({OWL + "ObjectProperty", OWL + "DatatypeProperty", OWL + "AnnotationProperty",
                             "http://www.w3.org/1999/02/22-rdf-syntax-ns#Property"})
_SCHEMA_TYPES = _CLASS_TYPES | _PROPERTY_TYPES | {OWL + "Ontology"}
_GENERIC_TYPES = frozenset({OWL + "Thing", RDFS + "Resource", OWL + "NamedIndividual"})
_PERSON_RE = re.compile(r"person|people|human|employee|manager|staff|author|writer|librarian|actor|"
                        r"artist|politician|scientist|player|athlete|member|agent", re.IGNORECASE)
_NUMERIC_DATATYPES = frozenset(XSD + t for t in (
    "integer", "int", "long", "short", "byte", "decimal", "double", "float", "nonNegativeInteger",
    "positiveInteger", "negativeInteger", "nonPositiveInteger", "unsignedInt", "unsignedLong"))


# ============================================================================================
# Linking
# ============================================================================================


@dataclass
class Link:
    """A mention in the new question and its acceptable KG candidates."""

    start: int
    end: int
    surface: str
    candidates: list[Candidate]

    def kind_candidates(self, kind: str) -> list[Candidate]:
        return [c for c in self.candidates if _candidate_kind(c) == kind]


def _candidate_kind(c: Candidate) -> str:
    types = set(c.types)
    if types & _CLASS_TYPES:
        return "class"
    if types & _PROPERTY_TYPES:
        return "property"
    if types & _SCHEMA_TYPES:
        return "schema"
    return "entity"


def _person_like(types: Iterable[str]) -> bool:
    return any(_PERSON_RE.search(local_name(t)) for t in types)




# ============================================================================================
# The strategy
# ============================================================================================


@dataclass
class Execution:
    query: str
    ok: bool
    empty: bool
    shape: str  # boolean | number | list | error
    rows: int | None
    error: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class _Question:
    """Everything about the question being answered (strategies answer concurrently, so none
    of it lives on the strategy)."""

    text: str
    kind: QuestionKind
    links: list[Link]
    words: list[str]
    trace: Trace
    deadline: float | None
    several: str | None = None  # what it asks for besides the answer ("... with their year")
    who: bool = False  # it asks for a person
    asked: str | None = None  # the class it asks for ("Which *teams* ...")
    anchors: list[Anchor] = field(default_factory=list)  # its entities and KG values
    joins: dict[tuple[str, str | None], list[Join]] = field(default_factory=dict)  # anchor, kind -> joins
    executed: set[str] = field(default_factory=set)  # queries already run for this question

    def late(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


class OfflineStrategy(Composition):
    """Retrieve-and-adapt text-to-SPARQL over the worker's tools (see the module doc)."""

    def __init__(self, spec: AgentSpec, tools: Tools, examples: Sequence[Example]) -> None:
        self.spec = spec
        self.tools = tools
        self.examples = list(examples)
        cfg = spec.config
        self.few_shot = cfg.few_shot
        self.k = cfg.tools.surface_forms.k
        self.threshold = float(cfg.tools.surface_forms.fuzzy_threshold)
        self.rules = {r.id for r in spec.enabled_rules()}
        # Caches shared by concurrent answers: plain dicts, filled idempotently.
        self._templates: dict[str, Template | TemplateError] = {}
        self._ontology: dict[str, Any] = {}
        self._pred_values: dict[str, list[tuple[str, int]]] = {}
        self._labels = set(tools.index.predicates) if tools.index is not None else set()
        self._classes: dict[str, str] | None = None
        self._named: dict[str, list[str]] = {}
        self._name_words: dict[str, frozenset[str]] = {}
        masked = [self.mask(e.text, self.link(e.text)) for e in self.examples]
        self.retriever: Retriever
        self.retriever, self.retrieval_note = make_retriever(cfg.retrieval, self.examples, masked)

    def on(self, rule_id: str) -> bool:
        return rule_id in self.rules

    # ---------------------------------------------------------------- linking

    def link(self, text: str) -> list[Link]:
        """Mentions of KG things in ``text``, linked as the spec says (threshold, k, rules)."""
        fold = self.on("unicode_fallback")
        surname = self.on("surname_linking")
        spans = self.tools.match_spans(text, threshold=self.threshold, k=self.k,
                                       fold_accents=fold, surname=surname)
        spans = self._refine(text, spans, fold, surname)
        spans = self._split_compounds(text, spans, fold)
        spans = sorted(spans + self._plural_classes(text, spans), key=lambda sp: sp.start)
        links = []
        for span in spans:
            cands = [c for c in span.candidates if surname or not _partial_person(span, c)]
            if cands:
                links.append(Link(span.start, span.end, span.surface, cands))
        return links

    def _refine(self, text: str, spans: list[Span], fold: bool, surname: bool) -> list[Span]:
        """Shrink a span to the part its best candidate explains ("Lagos at the Lagos State
        Library" -> "Lagos State Library") and look for mentions in what is left over."""
        refined: list[Span] = []
        leftovers = False
        for span in spans:
            best = span.candidates[0]
            if len(tokenize(span.surface)) > len(tokenize(best.matched_label)) + 1:
                surface = norm(span.surface, fold)
                al = fuzz.partial_ratio_alignment(norm(best.matched_label, fold), surface)
                if al is not None and al.score >= 85:
                    start, end = snap(surface, al.dest_start, al.dest_end)
                    if end - start < len(surface):
                        span = Span(span.start + start, span.start + end,
                                    text[span.start + start: span.start + end], span.candidates)
                        leftovers = True
            refined.append(span)
        if not leftovers:
            return spans
        blanked = list(text)
        for span in refined:
            blanked[span.start:span.end] = " " * (span.end - span.start)
        extra = self.tools.match_spans("".join(blanked), threshold=self.threshold, k=self.k,
                                       fold_accents=fold, surname=surname)
        extra = [Span(s.start, s.end, text[s.start:s.end], s.candidates) for s in extra]
        return sorted(refined + extra, key=lambda s: s.start)

    def _split_compounds(self, text: str, spans: list[Span], fold: bool) -> list[Span]:
        """A mention that names only part of its best candidate ("Valve Pumps" in "VP-100 Valve
        Pump") split into words that each name a thing exactly ("Valve", "Pump"):
        a compound of categories, not a partial name."""
        out: list[Span] = []
        for span in spans:
            words = list(re.finditer(r"[^\W_]+", span.surface))
            said = {x for w in words for x in singulars(norm(w.group(), True))}
            label = set(tokenize(span.candidates[0].label))
            parts: list[Span] = []
            if 1 < len(words) <= 3 and len(label) > len(words) and not label >= said | label:
                for w in words:
                    exact: list[Candidate] = []
                    for form in singulars(w.group()):  # "Switches" names the category "Switch"
                        exact = [c for c in self.tools.surface_forms(form, self.k, threshold=95.0, fold_accents=fold)
                                 if len(tokenize(c.matched_label)) == 1]
                        if exact:
                            break
                    if not exact:
                        break
                    parts.append(Span(span.start + w.start(), span.start + w.end(), w.group(), exact))
            out += parts if parts and len(parts) == len(words) else [span]
        return out

    def _plural_classes(self, text: str, spans: Sequence[Span]) -> list[Span]:
        """Class names in irregular plurals the fuzzy matcher misses ("cities", "libraries")."""
        labels = self._class_labels()
        out = []
        for m in re.finditer(r"[^\W\d_]{4,}", text):
            if any(sp.start < m.end() and m.start() < sp.end for sp in spans):
                continue
            word = m.group().casefold()
            for singular in singulars(word):
                cls = labels.get(singular)
                if cls is not None:
                    out.append(Span(m.start(), m.end(), m.group(), [Candidate(
                        cls, self.tools.label(cls) or singular, [OWL + "Class"], 100.0, 0, singular)]))
                    break
        return out

    def _class_labels(self) -> dict[str, str]:
        if self._classes is None:
            try:
                items = self.tools.classes()
            except KGError:
                items = []
            labels: dict[str, str] = {}
            for item in items:
                for name in (item.label, local_name_surface(item.iri)):
                    if name and " " not in name.strip():
                        labels.setdefault(name.strip().casefold(), item.iri)
            self._classes = labels
        return self._classes

    @staticmethod
    def mask(text: str, links: Sequence[Link]) -> str:
        """``text`` with entity mentions, numbers and quoted strings replaced by placeholders."""
        marks: list[tuple[int, int, str]] = []
        for link in links:
            if _candidate_kind(link.candidates[0]) == "entity":
                marks.append((link.start, link.end, " ENT "))
        marks += [(m.start, m.end, " STR ") for m in find_quoted(text)]
        marks += [(m.start, m.end, " NUM ") for m in find_numbers(text)]
        out, pos = [], 0
        for start, end, placeholder in sorted(marks):
            if start < pos:
                continue
            out += [text[pos:start], placeholder]
            pos = end
        out.append(text[pos:])
        return "".join(out)

    # ---------------------------------------------------------------- answering

    def answer(self, question: str, trace: Trace, *, lang: str | None = None,
               deadline: float | None = None) -> StrategyResult:
        if self.retrieval_note:
            trace.step("note", text=self.retrieval_note)
        links = self.link(question)
        q = _Question(question, question_kind(question), links,
                      [w for w in normalize_text(question).split() if w not in STOPWORDS], trace, deadline,
                      several=asks_several(self.mask(question, links)), who=asks_who(question),
                      asked=_asked_class(question, links))
        q.anchors = self._anchors(q)
        trace.step("linking", question_kind=q.kind, mentions=[_link_dict(l) for l in links],
                   values=[a.term for a in q.anchors if a.values is not None])
        hits = self._candidates(q)
        trace.step("retrieval", retriever=self.retriever.name, few_shot=self.few_shot,
                   hits=[{"uid": h.example.uid, "text": h.example.text, "score": h.score} for h in hits])
        fallback: Execution | None = None
        error: Execution | None = None
        for rank, variant in self._ordered(q, hits):
            if q.late():
                return StrategyResult(fallback.query if fallback else None, "timeout",
                                      "time limit reached while trying candidates")
            ex = self._execute(variant, q, rank)
            if ex is None:
                continue
            if not ex.ok:
                error = error or ex
                continue
            if self._accept(ex, q, rank):
                uid = variant.tpl.example.uid
                trace.step("accepted", rank=rank, uid=uid, query=ex.query)
                how = "composed" if rank < 0 else f"adapted {uid}"
                return StrategyResult(ex.query, "answered", f"{how}: " + ("; ".join(ex.notes) or "as is"))
            fallback = fallback or ex
        if fallback is not None:
            trace.step("fallback", query=fallback.query)
            return StrategyResult(fallback.query, "answered",
                                  "no candidate passed verification; returning the first that executed")
        if error is not None:
            return StrategyResult(None, "tool_error", f"every candidate query failed: {error.error}")
        if not hits:
            return StrategyResult(None, "no_answer", "no training example to adapt (few_shot=0 or empty pool) "
                                  "and no query could be composed")
        return StrategyResult(None, "no_answer", "no candidate query could be built")

    def _ordered(self, q: _Question, hits: Sequence[Hit]) -> Iterator[tuple[int, Variant]]:
        """Candidates in the order they are tried, with their rank (-1: composed): adaptations
        that fit cleanly (well-typed fillers, every entity and value of the question used, the
        asked-for kind answered), then composed queries whose every join the question supports,
        then adaptations that use every entity and value of the question, then the other
        composed queries, then adaptations that leave some of the question out."""
        graded: dict[int, list[tuple[int, Variant]]] = {2: [], 1: [], 0: []}
        for rank, hit in enumerate(hits):
            tpl = self.template(hit.example)
            if isinstance(tpl, TemplateError):
                q.trace.step("candidate", rank=rank, uid=hit.example.uid, skipped=str(tpl))
                continue
            for variant, grade in self._variants(tpl, q, rank):
                graded[grade].append((rank, variant))
        yield from graded[2]
        composed = self._composed(q) if not q.late() else []
        yield from ((-1, v) for sure, v in composed if sure)
        yield from graded[1]
        yield from ((-1, v) for sure, v in composed if not sure)
        yield from graded[0]

    def _candidates(self, q: _Question) -> list[Hit]:
        """The ``few_shot`` templates to try, in order."""
        if self.few_shot <= 0:
            return []
        hits = self.retriever.rank(self.mask(q.text, q.links))
        expected = self._expected_features(q)
        entities = sum(1 for l in q.links if _candidate_kind(l.candidates[0]) == "entity")

        def fit(hit: Hit) -> float:
            """Similarity, plus the query features the wording calls for, minus specific ones it
            does not, minus a mismatch in how many entities are named."""
            tpl = self.template(hit.example)
            if not isinstance(tpl, Template):
                return hit.score - 1.0
            have = tpl.features
            named = sum(1 for s in tpl.slots if s.kind == "entity" and s.mention is not None)
            return (hit.score + 0.1 * len(expected & have) - 0.1 * len(_EXCLUSIVE & (have - expected))
                    - 0.05 * abs(named - entities))

        hits = sorted(hits, key=lambda h: (-round(fit(h), 9), h.example.uid))
        if q.kind == "boolean" and self.on("ask_for_yes_no"):
            asks = [h for h in hits if self._form(h.example) == "ASK"]
            hits = asks + [h for h in hits if self._form(h.example) != "ASK"]
        return hits[: self.few_shot]

    def _expected_features(self, q: _Question) -> frozenset[str]:
        """Query features the question's wording calls for: superlatives -> ORDER/LIMIT,
        comparisons with a number -> FILTER (HAVING when a class is counted: "more than 30
        books"); counts -> COUNT when expected_shape is on."""
        out: set[str] = set()
        if superlative_polarity(q.text):
            out |= {"ORDER", "LIMIT"}
        numbers = find_numbers(q.text)
        if numbers and comparison_direction(q.text, numbers[0].start):
            after = [l for l in q.links if l.start >= numbers[0].end and l.kind_candidates("class")]
            counted = bool(after) and after[0].start - numbers[0].end <= 12
            out.add("HAVING" if counted else "FILTER")
        if q.kind == "count" and self.on("expected_shape"):
            out.add("COUNT")
        return frozenset(out)

    def _form(self, example: Example) -> str:
        tpl = self.template(example)
        return "" if isinstance(tpl, TemplateError) else tpl.form

    def template(self, example: Example) -> Template | TemplateError:
        """The parsed template of a training example (cached), or why there is none."""
        if example.uid not in self._templates:
            try:
                tpl = parse_template(example)
                self._find_slots(tpl)
                self._templates[example.uid] = tpl
            except TemplateError as exc:
                self._templates[example.uid] = exc
        return self._templates[example.uid]

    # ---------------------------------------------------------------- slots of a template

    def _find_slots(self, tpl: Template) -> None:
        by_value: dict[tuple[str, str], Slot] = {}
        for tok, role, triple in walk_terms(tpl):
            found = self._slot_of(tok, role, tpl)
            if found is None:
                continue
            slot = by_value.setdefault(found, Slot(found[0], found[1], []))  # type: ignore[arg-type]
            slot.toks.append(tok)
            slot.in_triples |= triple is not None
            slot.in_raw |= triple is None
        text = tpl.example.text
        spans = self._example_links(text)
        used: list[tuple[int, int]] = []
        # Entities first: their labels are the most specific evidence of where a mention is.
        order = {"entity": 0, "string": 1, "number": 2, "class": 3, "property": 4}
        for slot in sorted(by_value.values(), key=lambda s: order[s.kind]):
            slot.mention = self._example_mention(slot, text, used, spans)
            if slot.kind in ("entity", "class", "property") and self.tools.index is not None:
                slot.types = tuple(self.tools.index.types(slot.value))
            if slot.mention is not None:
                used.append(slot.mention)
            elif slot.kind == "property":
                continue  # an unmentioned predicate is part of the template's fixed wording
            tpl.slots.append(slot)
        if tpl.structured:
            tpl.slots += self._implicit_classes(tpl, spans, used)
        tpl.slots.sort(key=lambda s: (s.rank_key, s.kind))
        tpl.polarity = superlative_polarity(text)
        number = next((s for s in tpl.slots if s.kind == "number" and s.mention), None)
        tpl.comparison = comparison_direction(text, number.mention[0] if number and number.mention else None)

    def _implicit_classes(self, tpl: Template, spans: Sequence[Span], used: list[tuple[int, int]]) -> list[Slot]:
        """Classes the training question names that the query expresses only through a
        predicate's range or domain ("Which *publishers* ..." -> ``?book do:publishedBy ?result``)."""
        explicit = {s.value for s in tpl.slots if s.kind == "class"}
        out: list[Slot] = []
        for span in spans:
            if any(a < span.end and span.start < b for a, b in used):
                continue
            classes = [c.iri for c in span.candidates if _candidate_kind(c) == "class" and c.iri not in explicit]
            slot = self._implicit_slot(tpl, classes[:3])
            if slot is not None:
                slot.mention = (span.start, span.end)
                used.append(slot.mention)
                out.append(slot)
        return out

    def _implicit_slot(self, tpl: Template, classes: Sequence[str]) -> Slot | None:
        for triple in tpl.triples:
            if triple.is_type() or len(triple.p) != 1 or triple.p[0].kind not in ("iri", "pname"):
                continue
            pred = expand(triple.p[0], tpl.prefixes)
            info = self._ontology_of(pred) if pred else None
            if info is None:
                continue
            for cls in classes:
                if triple.o_var and cls in {r.iri for r in info.range}:
                    return Slot("class", cls, [triple.p[0]], types=(cls,), in_triples=True, side="o")
                if triple.s_var and cls in {d.iri for d in info.domain}:
                    return Slot("class", cls, [triple.p[0]], types=(cls,), in_triples=True, side="s")
        return None

    def _slot_of(self, tok: Tok, role: str, tpl: Template) -> tuple[str, str] | None:
        if tok.kind in ("iri", "pname"):
            value = expand(tok, tpl.prefixes)
            if value is None or value.startswith(XSD):
                return None
            if role == "type":
                return ("class", value)
            if role == "p":
                return ("property", value)
            if role == "raw" and self._is_schema(value):
                return None
            return ("entity", value)
        if tok.kind == "string":
            return ("string", literal_value(tok))
        if tok.kind == "number":
            return ("number", tok.text)
        return None

    def _is_schema(self, iri: str) -> bool:
        types = set(self.tools.index.types(iri)) if self.tools.index is not None else set()
        return bool(types & _SCHEMA_TYPES)

    def _example_links(self, text: str) -> list[Span]:
        """Mentions in a training question, linked permissively: the gold query says which
        entity is meant, so only where it is mentioned is in question (rules do not apply)."""
        spans = self.tools.match_spans(text, threshold=min(self.threshold, 85.0), k=max(self.k, 20),
                                       fold_accents=True, surname=True)
        return self._refine(text, spans, True, True)

    def _example_mention(self, slot: Slot, text: str, used: list[tuple[int, int]],
                         spans: Sequence[Span]) -> tuple[int, int] | None:
        """Where the training question names the slot's value, if it does."""
        def free(start: int, end: int) -> bool:
            return all(end <= a or start >= b for a, b in used)

        if slot.kind == "number":
            return next(((m.start, m.end) for m in find_numbers(text)
                         if same_number(m.value, slot.value) and free(m.start, m.end)), None)
        if slot.kind != "string":
            for span in spans:
                if any(c.iri == slot.value for c in span.candidates) and free(span.start, span.end):
                    return (span.start, span.end)
        forms = [slot.value] if slot.kind == "string" else self._surface_forms_of(slot.value)
        folded = norm(text, True)
        for form in forms:
            f = norm(form, True).strip()
            if len(f) < 2:
                continue
            for m in re.finditer(rf"(?<!\w){re.escape(f)}", folded):
                if free(m.start(), m.end()):
                    return snap(folded, m.start(), m.end())
            acronym = "".join(w[0] for w in tokenize(form) if w not in STOPWORDS)
            if len(acronym) >= 2:
                m2 = re.search(rf"\b{re.escape(acronym)}\b", folded)
                if m2 and free(m2.start(), m2.end()):
                    return (m2.start(), m2.end())
        if slot.kind == "string":
            for form in forms:
                al = fuzz.partial_ratio_alignment(norm(form, True), folded)
                if al is not None and al.score >= 90 and free(al.dest_start, al.dest_end):
                    return snap(folded, al.dest_start, al.dest_end)
        return None

    def _surface_forms_of(self, iri: str) -> list[str]:
        forms = [self.tools.label(iri), local_name_surface(iri)]
        if self.tools.index is not None:
            forms += [c.matched_label for c in self.tools.surface_forms(iri, 1)]
        out = [f for f in dict.fromkeys(forms) if f]
        out += [re.sub(r"\s*\([^()]*\)\s*$", "", f) for f in out if f.endswith(")")]
        return out

    # ---------------------------------------------------------------- variants

    def _variants(self, tpl: Template, q: _Question, rank: int) -> Iterator[tuple[Variant, int]]:
        """Adaptations of ``tpl`` to the question, most plausible first, each graded: 2 clean
        (see :meth:`_fits`), 1 using every entity and value of the question, 0 leaving some out."""
        assignments = self._assign(tpl, q)
        q.trace.step("candidate", rank=rank, uid=tpl.example.uid, example=tpl.example.text,
                     template=tpl.render(), slots=[_slot_dict(s, tpl) for s in tpl.slots],
                     assignments=[[f"{s.kind} {s.value} -> {v}" for s, v in a.items()] for a in assignments[:3]])
        for fills in assignments[:3]:
            base = self._substitute(tpl, q, fills)
            if base is None:
                continue
            # A template that orders, limits or filters where the question does not ask to
            # ("Which is the longest river?" for "Where was X born?") fits at best loosely.
            fits = self._fits(tpl, q, fills) and not (_EXCLUSIVE & tpl.features) - self._expected_features(q)
            measured = self._measured(base, q) if tpl.structured else None
            ranked = self._superlative(base, q) if tpl.structured else None
            for adapted in [v for v in (ranked, measured) if v is not None] + [base]:
                focused = self._focus(adapted, q)
                constrained = self._constrain(focused, q)
                for done in ([constrained] if constrained is not None else []) + [focused]:
                    rendered = done.render()
                    used = sum(a.used_in(rendered) for a in q.anchors)
                    if fits and used == len(q.anchors) and self._holds_asked(done, q) is not False:
                        grade = 2
                    else:
                        grade = 1 if used == len(q.anchors) else 0
                    for typed in self._typed(done, q):
                        yield typed, grade

    def _constrain(self, variant: Variant, q: _Question) -> Variant | None:
        """The variant with the question's entities and values that it leaves out joined to its
        answer ("Which vendor *in Spain* sells X?" adapted from "Which vendors sell Y?":
        ``?result <country> "Spain"``), when the question's words or the value itself say
        how; None when nothing is left out or nothing can be joined."""
        answer = variant.answer
        rendered = variant.render()
        unused = [a for a in q.anchors if not a.used_in(rendered)]
        if answer is None or not unused or variant.tpl.form != "SELECT" or not variant.tpl.structured:
            return None
        classes = self._var_classes(variant, answer)
        target = classes[0] if classes else q.asked
        patterns: list[str] = []
        for anchor in unused:
            key = (anchor.term, target)
            if key not in q.joins:
                q.joins[key] = self._joins(anchor, target, q.words, q.who)
            joins = [j for j in q.joins[key] if j.sure and len(j.triples) == 1]
            if not joins:
                return None
            patterns += [t.replace("?result", answer) for t in joins[0].triples]
        try:
            return add_patterns(variant, patterns, "constrained: " + ", ".join(a.term for a in unused))
        except TemplateError:
            return None

    def _fits(self, tpl: Template, q: _Question, fills: dict[Slot, str | None]) -> bool:
        """The fillers fit cleanly when every new entity has the type of the one it replaces (or
        a related one) and every number and quoted string of the question is used (relaxing a
        constraint the question does not repeat is fine; entities and values are checked on
        the finished variant)."""
        used: set[str] = set()
        for slot, value in fills.items():
            if value is None:
                continue
            used.add(value)
            if slot.kind == "entity" and value != slot.value:
                cand = next((c for l in q.links for c in l.candidates if c.iri == value), None)
                if cand is None or self._compat(slot, cand) < 0.5:
                    return False
        literals = [m.value for m in find_quoted(q.text)] + [n.value for n in self._free_numbers(q)]
        return all(v in used or any(same_number(v, u) for u in used if is_number(u)) for v in literals)

    def _free_numbers(self, q: _Question) -> list[Mention]:
        """Numbers of the question that are not part of a linked name."""
        linked = [(l.start, l.end) for l in q.links]
        return [n for n in find_numbers(q.text) if not any(a <= n.start < b for a, b in linked)]

    def _assign(self, tpl: Template, q: _Question) -> list[dict[Slot, str | None]]:
        """Fillers for the mentioned slots, best assignment first. A filler is an IRI or a
        literal's value; None relaxes the slot."""
        slots = [s for s in tpl.slots if s.mention is not None]
        options = [self._options(slot, slots, tpl, q) for slot in slots]
        scored: list[tuple[float, int, dict[Slot, str | None]]] = []
        for n, combo in enumerate(itertools.product(*options)):
            if n > 5000:
                break
            spans = [o[1] for o in combo if o[1] is not None]
            if overlapping(spans):
                continue
            fills = {slot: _carry_case(slot, o[2], tpl.example.text) for slot, o in zip(slots, combo)}
            scored.append((sum(o[0] for o in combo), n, fills))
        scored.sort(key=lambda x: (-round(x[0], 6), x[1]))
        return [fills for _, _, fills in scored] or [{}]

    def _options(self, slot: Slot, slots: list[Slot], tpl: Template,
                 q: _Question) -> list[tuple[float, tuple[int, int] | None, str | None]]:
        """(score, span in the question, filler) choices for one slot, plus relaxing it."""
        opts: list[tuple[float, tuple[int, int] | None, str | None]] = []
        rank = [s for s in slots if s.kind == slot.kind].index(slot)
        if slot.kind in ("entity", "class", "property"):
            kind_links = [l for l in q.links if l.kind_candidates(slot.kind)]
            for j, link in enumerate(kind_links):
                for c in link.kind_candidates(slot.kind)[: self.k]:
                    order = 0.15 if j == rank else 0.0
                    opts.append((c.score / 100.0 + self._compat(slot, c) + order, (link.start, link.end), c.iri))
            if slot.kind == "property":
                opts += self._aligned_property(slot, tpl, q)
        elif slot.kind == "number":
            numbers = self._free_numbers(q)
            opts += [(1.0 + (0.15 if j == rank else 0.0), (n.start, n.end), n.value) for j, n in enumerate(numbers)]
        else:
            opts += [(1.5 + (0.15 if j == rank else 0.0), (m.start, m.end), m.value)
                     for j, m in enumerate(find_quoted(q.text))]
            aligned = align_words(tpl.example.text, slot.mention, q.text)
            if aligned is not None:
                opts.append((1.2, (aligned.start, aligned.end), aligned.value))
        opts.sort(key=lambda o: -o[0])
        keep = 0.0 if slot.kind in ("entity", "string") else 0.3  # relax entities, keep the rest
        return opts[:4] + [(keep, None, None)]

    def _aligned_property(self, slot: Slot, tpl: Template,
                          q: _Question) -> list[tuple[float, tuple[int, int] | None, str | None]]:
        """A predicate the training question names, refilled from the words standing in its
        place in the new question ("Who is the *author* of X?" -> "Who is the *publisher* of
        Y?": author -> publishedBy); the same words keep it."""
        assert slot.mention is not None
        aligned = align_words(tpl.example.text, slot.mention, q.text)
        if aligned is None:
            return []
        span = (aligned.start, aligned.end)
        now = [w for w in normalize_text(aligned.value).split() if w not in STOPWORDS]
        if now == normalize_text(tpl.example.text[slot.mention[0]:slot.mention[1]]).split():
            return [(1.5, span, slot.value)]
        return [(1.2 - 0.1 * i, span, pred) for i, pred in enumerate(self._named_predicates(now)) if now]

    def _compat(self, slot: Slot, cand: Candidate) -> float:
        """How well a candidate's types fit the slot's: 1 same type, 0.5 related, 0 unrelated
        (classes and properties: 1 unchanged, 0.5 another one)."""
        if slot.kind != "entity":
            return 1.0 if cand.iri == slot.value else 0.5
        a = set(slot.types) - _GENERIC_TYPES
        b = set(cand.types) - _GENERIC_TYPES
        if not a or not b:
            return 0.25
        if a & b:
            return 1.0
        if self._supers(a) & self._supers(b):
            return 0.5
        return 0.0

    def _supers(self, classes: set[str]) -> set[str]:
        out: set[str] = set()
        for c in classes:
            info = self._ontology_of(c)
            out |= {s.iri for s in getattr(info, "superclasses", [])} - _GENERIC_TYPES
        return out

    def _ontology_of(self, iri: str) -> Any:
        if iri not in self._ontology:
            try:
                self._ontology[iri] = self.tools.ontology(iri)
            except Exception:  # noqa: BLE001 -- ontology lookups only refine choices; never fail a question
                self._ontology[iri] = None
        return self._ontology[iri]

    def _substitute(self, tpl: Template, q: _Question, fills: dict[Slot, str | None]) -> Variant | None:
        variant, memo = Variant.of(tpl)
        relaxed: list[Tok] = []
        for slot, value in fills.items():
            toks = [memo[id(t)] for t in slot.toks]
            if value is None:
                if slot.kind in ("entity", "string") and slot.in_triples and not slot.in_raw and tpl.structured:
                    relaxed += toks
                    variant.notes.append(f"relaxed {slot.kind} {_short(slot.value)}")
                continue
            if value == slot.value:
                continue
            if slot.side is not None:  # implicit class: re-link the predicate that implied it
                pred = self._implicit_relink(slot, value, tpl, q)
                if pred is None:
                    continue
                for tok in toks:
                    tok.text, tok.kind = f"<{pred}>", "iri"
                variant.notes.append(f"class {_short(slot.value)} -> {_short(value)} "
                                     f"(predicate -> {_short(pred)})")
                continue
            for tok in toks:
                if slot.kind in ("entity", "class", "property"):
                    tok.text, tok.kind = f"<{value}>", "iri"
                    if slot.kind == "entity":
                        variant.substituted.append(tok)
                elif slot.kind == "number":
                    tok.text = value
                else:
                    tok.text = requote(tok.text, value)
            variant.notes.append(f"{slot.kind} {_short(slot.value)} -> {_short(value)}")
        if relaxed and not relax(variant, relaxed):
            return None
        self._flip_directions(variant, q, fills)
        return variant

    @staticmethod
    def _flip_directions(variant: Variant, q: _Question, fills: dict[Slot, str | None]) -> None:
        """"shortest" adapted from "most pages" flips ORDER BY; "before 1950" adapted from
        "after 2020" flips the comparison."""
        polarity = superlative_polarity(q.text)
        if polarity and variant.tpl.polarity and polarity != variant.tpl.polarity:
            flip_order(variant)
        number = next((s for s in fills if s.kind == "number" and fills[s] is not None), None)
        if number is None or not variant.tpl.comparison:
            return
        where = next((n.start for n in find_numbers(q.text) if n.value == fills[number]), None)
        direction = comparison_direction(q.text, where)
        if direction and direction != variant.tpl.comparison:
            flip_comparisons(variant)

    def _implicit_relink(self, slot: Slot, cls: str, tpl: Template, q: _Question) -> str | None:
        """The predicate that connects the same kind of thing to ``cls`` as the template's
        predicate connected to ``slot.value`` ("published by" a Publisher -> "genre" a Genre)."""
        current = expand(slot.toks[0], tpl.prefixes)
        if current is None:
            return None
        direction = "in" if slot.side == "o" else "out"
        found = [(p.iri, p.count) for p in getattr(self._ontology_of(cls), "predicates", [])
                 if p.direction == direction]
        other_end = "domain" if slot.side == "o" else "range"
        want = {i.iri for i in getattr(self._ontology_of(current), other_end, [])}
        fitting = [(p, n) for p, n in found
                   if want & {i.iri for i in getattr(self._ontology_of(p), other_end, [])}]
        ranked = self._rank_predicates(fitting or found, current, q, same_kind=False)
        return ranked[0] if ranked else None

    def _measured(self, variant: Variant, q: _Question) -> Variant | None:
        """A variant whose ordered or compared property is re-linked when the question's wording
        points to another property of the same subject ("the shortest book" adapted from "the
        highest-rated book": rating -> page count)."""
        pieces = variant.pieces
        close = where_close(pieces)
        tail = [p.text for p in pieces[close + 1:] if isinstance(p, Tok) and p.kind == "var"]
        compared = [a.text for a, b in itertools.pairwise(pieces) if isinstance(a, Tok) and a.kind == "var"
                    and isinstance(b, Tok) and b.text in (">", "<", ">=", "<=")]
        targets = tail + compared
        for i, piece in enumerate(pieces):
            if not (isinstance(piece, Triple) and piece.o_var in targets and piece.s_var and len(piece.p) == 1):
                continue
            current = expand(piece.p[0], variant.tpl.prefixes)
            cls = var_class(pieces, piece.s_var, variant.tpl.prefixes)
            if current is None or cls is None:
                continue
            found = self._class_predicates(cls)
            ranked = self._rank_predicates(found, current, q, old_weight=0.0)
            if not ranked:
                continue
            best = max(ranked, key=lambda p: (self._wording(p, q, current, 0.0), -ranked.index(p)))
            score = self._wording(best, q, current, 0.0)
            now = self._wording(current, q, current, 0.0) if any(p == current for p, _ in found) else -1.0
            if score < 80 or score <= now + 10:
                continue
            out = variant.fork(f"measured property {local_name(current)} -> {local_name(best)}")
            t = out.pieces[i]
            assert isinstance(t, Triple)
            t.p = [Tok("iri", f"<{best}>")]
            return out
        return None

    def _superlative(self, variant: Variant, q: _Question) -> Variant | None:
        """A superlative the template lacks ("the vendor of the lightest pump" adapted from "the
        vendors of valves"): order by the numeric property of one of its variables that the
        question's wording names, and keep the first answer."""
        tpl = variant.tpl
        polarity = superlative_polarity(q.text)
        if not polarity or tpl.form != "SELECT" or tpl.aggregate or tpl.features & {"ORDER", "LIMIT", "GROUP"}:
            return None
        best: tuple[float, str, str] | None = None
        for var in triple_vars(variant.pieces):
            for cls in self._var_classes(variant, var):
                for pred, _ in self._class_predicates(cls):
                    if self._value_kind(pred) != "number":
                        continue
                    score = self._wording(pred, q, pred, 0.0)
                    if score >= 80 and (best is None or score > best[0]):
                        best = (score, var, pred)
        if best is None:
            return None
        _, var, pred = best
        out = variant.fork(f"{'highest' if polarity > 0 else 'lowest'} {local_name(pred)} of {var}")
        close = where_close(out.pieces)
        measure = Tok("var", "?superlative_measure")
        out.pieces.insert(close, Triple([Tok("var", var)], [Tok("iri", f"<{pred}>")], [measure]))
        order = "DESC" if polarity > 0 else "ASC"
        out.pieces.insert(close + 2, Tok("word", f"ORDER BY {order}(?superlative_measure) LIMIT 1", "\n"))
        return out

    def _holds_literals(self, variant: Variant, var: str) -> bool:
        """``var`` is the object of a predicate whose values are literals (names, numbers...)."""
        for t in variant.pieces:
            if isinstance(t, Triple) and t.o_var == var and len(t.p) == 1 and not t.is_type():
                pred = expand(t.p[0], variant.tpl.prefixes)
                if pred is not None and self._value_kind(pred) in ("string", "number", "date"):
                    return True
        return False

    def _var_classes(self, variant: Variant, var: str) -> list[str]:
        """Classes of a variable: its rdf:type, else the domains/ranges of its predicates."""
        prefixes = variant.tpl.prefixes
        explicit = var_class(variant.pieces, var, prefixes)
        if explicit:
            return [explicit]
        out: list[str] = []
        for t in variant.pieces:
            if not isinstance(t, Triple) or t.is_type() or len(t.p) != 1:
                continue
            pred = expand(t.p[0], prefixes)
            info = self._ontology_of(pred) if pred else None
            if info is None:
                continue
            items = info.domain if t.s_var == var else info.range if t.o_var == var else []
            out += [i.iri for i in items if not i.iri.startswith(XSD)]
        return list(dict.fromkeys(out))[:4]

    # ---------------------------------------------------------------- shape (ASK / COUNT)

    def _shape(self, variant: Variant, q: _Question) -> Variant:
        """The variant in the shape the question asks for (expected_shape, ask_for_yes_no): ASK
        for a yes/no question, COUNT for "how many", a list (not a count) otherwise; then the
        columns the question asks for (project_iris)."""
        tpl = variant.tpl
        if q.kind == "boolean" and tpl.form == "SELECT" and (self.on("ask_for_yes_no") or self.on("expected_shape")):
            return to_ask(variant)
        if q.kind == "count" and tpl.form == "SELECT" and not tpl.aggregate and self.on("expected_shape"):
            return to_count(variant) or variant
        if q.kind == "list" and self.on("expected_shape"):
            variant = uncount(variant) or variant  # "Which books ..." adapted from "How many books ..."
        return self._project(variant, q)

    def _project(self, variant: Variant, q: _Question) -> Variant:
        """project_iris: entities instead of their labels (unless the question speaks of names),
        and only the columns the question asks for: one, unless it asks for several values per
        answer, then also the attributes it names ("films ... with their year"); the answer's
        name instead of the answer when that is what it asks for ("What is the name of ...")."""
        tpl = variant.tpl
        if not self.on("project_iris") or tpl.form != "SELECT":
            return variant
        if not mentions_names(q.text):
            variant = self._entities_not_labels(variant)
        plain = variant.projection
        if tpl.aggregate or not plain:
            return variant
        if q.several is None and len(plain) > 1:
            keep = self._best_column(variant, q)
            variant = reproject(variant, [keep], f"only {keep} projected") or variant
        elif q.several is not None and len(plain) == 1:
            variant = self._extra_columns(variant, q, q.several)
        if asks_for_names(q.text):
            variant = self._names_not_entities(variant, q)
        return variant

    def _label_of(self, variant: Variant) -> dict[str, str]:
        """Label variables -> the variables of the things they label."""
        label_of: dict[str, str] = {}
        for t in variant.pieces:
            if (isinstance(t, Triple) and len(t.p) == 1 and t.s_var and t.o_var
                    and expand(t.p[0], variant.tpl.prefixes) in self._labels):
                label_of[t.o_var] = t.s_var
        return label_of

    def _entities_not_labels(self, variant: Variant) -> Variant:
        label_of = self._label_of(variant)
        plain = variant.projection
        targets = [v for v in plain if v in label_of and label_of[v] not in plain]
        if not targets:
            return variant
        out = variant.fork("entities projected instead of labels: " + ", ".join(targets))
        for piece in out.head():
            if piece.kind == "var" and piece.text in targets:
                piece.text = label_of[piece.text]
        return out

    def _names_not_entities(self, variant: Variant, q: _Question) -> Variant:
        """"What is the name of ...": the answer's label projected instead of the answer (by the
        label predicate its class uses that the question's words name best)."""
        answer = variant.answer
        if answer is None or self._holds_literals(variant, answer):
            return variant
        labels = {p for cls in self._var_classes(variant, answer) for p, _ in self._class_predicates(cls)
                  if p in self._labels}
        if not labels:
            return variant
        words = normalize_text(q.text).split()
        pred = max(sorted(labels), key=lambda p: self._name_score(p, words))
        name = "?" + re.sub(r"\W", "_", local_name(pred))
        if name in variant.render():
            name += "_of_answer"
        named = add_patterns(variant, [f"{answer} <{pred}> {name} ."], f"answer named by {local_name(pred)}")
        for tok in named.head():
            if tok.kind == "var" and tok.text == answer:
                tok.text = name
        return named

    def _best_column(self, variant: Variant, q: _Question) -> str:
        """The projected variable whose property the question names best (the first when the
        question names none of them)."""
        plain = variant.projection
        scores = {v: 0.0 for v in plain}
        for t in variant.pieces:
            if isinstance(t, Triple) and t.o_var in scores and len(t.p) == 1:
                pred = expand(t.p[0], variant.tpl.prefixes)
                if pred is not None and pred != RDF_TYPE:
                    scores[t.o_var] = max(scores[t.o_var], self._name_score(pred, q.words))
        best = max(plain, key=lambda v: (scores[v] >= 80, scores[v] if scores[v] >= 80 else 0, -plain.index(v)))
        return best

    def _extra_columns(self, variant: Variant, q: _Question, request: str) -> Variant:
        """Attributes of the answer the question asks for after "and"/"with their" ("... and
        when did they start?" -> OPTIONAL { ?result :startDate ?startDate })."""
        answer = variant.answer
        if answer is None:
            return variant
        words = [w for w in normalize_text(request).split() if w not in STOPWORDS or w in HINTS]
        used = {expand(t.p[0], variant.tpl.prefixes) for t in variant.pieces
                if isinstance(t, Triple) and len(t.p) == 1 and t.s_var == answer}
        found: dict[str, float] = {}
        for cls in self._var_classes(variant, answer):
            for pred, _ in self._class_predicates(cls):
                if pred not in used and pred != RDF_TYPE and pred not in self._labels:
                    found[pred] = max(found.get(pred, 0.0), self._name_score(pred, words))
        if question_kind(request) == "count":  # "... and how many ...": an aggregate, not an attribute
            return variant
        # "... and when did they start": a date; "... and where": a place (an IRI).
        kind = {"when": "date", "where": "iri"}.get(words[0]) if words else None
        out = variant
        for pred, score in sorted(found.items(), key=lambda x: (-x[1], x[0]))[:4]:
            if score < 85:
                break
            if kind is not None and self._value_kind(pred) not in (None, kind):
                continue
            name = "?" + re.sub(r"\W", "_", local_name(pred)) or "?extra"
            if name in out.render():
                continue
            out = add_column(out, answer, pred, name, f"column {local_name(pred)} added")
        return out

    def _focus(self, variant: Variant, q: _Question) -> Variant:
        """answer_type_constraint: when the question asks for a person ("Who ...") or for a class
        ("Which teams ...") and the template's answer variable holds something else, the
        variable that does hold it is projected instead ("Who coaches in X?" adapted from "Which
        teams have coaches in X?")."""
        answer = variant.answer
        if not self.on("answer_type_constraint") or answer is None or len(variant.projection) != 1 \
                or self._holds_asked(variant, q, answer) is not False:
            return variant
        others = [v for v in triple_vars(variant.pieces) if v != answer and self._holds_asked(variant, q, v)]
        if not others:
            return variant
        return reproject(variant, others[:1], f"answer {others[0]} (the asked-for kind) instead of {answer}") or variant

    def _holds_asked(self, variant: Variant, q: _Question, var: str | None = None) -> bool | None:
        """Whether ``var`` (default: the answer) holds what the question asks for: the class it
        names ("Which teams ...") or a person ("Who ..."); None when either is unknown."""
        var = var or variant.answer
        tpl = variant.tpl
        if var is None or tpl.form != "SELECT" or tpl.aggregate:
            return None
        asked = q.asked
        if asked is None and not q.who:
            return None
        named = self._label_of(variant).get(var)
        if named is not None:  # a name stands for the thing it names (project_iris may swap them)
            var = named
        if self._holds_literals(variant, var):
            return False
        classes = self._var_classes(variant, var)
        if not classes:
            return None
        if asked is None:
            return _person_like(classes)
        return self._of_kind(classes, asked)

    def _typed(self, variant: Variant, q: _Question) -> Iterator[Variant]:
        """answer_type_constraint: first with ``?answer a <Class>`` for the class the question
        asks for, then without it."""
        tpl = variant.tpl
        var = variant.answer
        if self.on("answer_type_constraint") and tpl.form == "SELECT" and var and not tpl.aggregate \
                and variant.render().count("COUNT(") == 0:
            cls = q.asked
            if cls and var_class(variant.pieces, var, tpl.prefixes) != cls:
                typed = add_type(variant, var, cls, f"answer typed {local_name(cls)}")
                typed.typed = True
                yield typed
        yield variant

    # ---------------------------------------------------------------- the asked-for kind (composition joins)

    def _fit(self, pred: str, direction: str, asked: str | None, who: bool) -> float:
        """+1 when the far end of ``pred`` (its range going out, its domain coming in) is the
        asked class (or a person for "who"), -1 when it is known to be something else, 0 when
        unknown or nothing is asked."""
        if asked is None and not who:
            return 0.0
        info = self._ontology_of(pred)
        ends = [c.iri for c in getattr(info, "range" if direction == "out" else "domain", [])]
        if not ends:
            return 0.0
        if asked is None:
            return 1.0 if _person_like(ends) else -1.0
        return 1.0 if self._of_kind(ends, asked) else -1.0

    def _of_kind(self, classes: Iterable[str], asked: str) -> bool:
        """One of ``classes`` is ``asked``, a superclass or a subclass of it."""
        related = {asked} | self._supers({asked})
        return any(c in related or asked in self._supers({c}) for c in classes)

    # ---------------------------------------------------------------- execution and checks

    def _run(self, variant: Variant, q: _Question, rank: int) -> Execution:
        query = variant.render()
        q.executed.add(query)
        preview = self.tools.test_sparql(query)
        if not preview.ok:
            ex = Execution(query, False, True, "error", None, preview.error)
        elif preview.boolean is not None:
            ex = Execution(query, True, False, "boolean", None)
        else:
            numeric = (len(preview.rows) == 1 and len(preview.variables) == 1
                       and preview.rows[0][0] is not None and is_number(preview.rows[0][0]))
            rows = preview.total if preview.total is not None else len(preview.rows)
            # A count of zero says the counted pattern matched nothing: as empty as no rows.
            empty = not preview.rows or (numeric and float(str(preview.rows[0][0]).strip('"')) == 0)
            ex = Execution(query, True, empty, "number" if numeric else "list", rows)
        ex.notes = list(variant.notes)
        q.trace.step("execution", rank=rank, query=query, notes=ex.notes, ok=ex.ok, shape=ex.shape,
                     rows=ex.rows, error=ex.error)
        return ex

    def _execute(self, variant: Variant, q: _Question, rank: int) -> Execution | None:
        """Run a variant in the shape the question asks for. A list or count is first run as the
        plain pattern: while that is empty, its repairs are run (inverse directions when
        triple_direction is on, re-linked predicates), and the first that returns answers is
        shaped instead. None: nothing new to judge (the query was already run for this question,
        or a typed variant came back empty: the untyped one follows)."""
        if q.kind == "boolean":  # an ASK is never empty: repairs would only bias it to "yes"
            return self._run_new(self._shape(variant, q), q, rank)
        if variant.render() in q.executed:
            return None  # the same query from another assignment or template: already judged
        ex = self._run(variant, q, rank)
        if not ex.ok:
            return ex
        if ex.empty:
            if variant.typed:
                return None
            fixed = self._repaired(variant, q, rank)
            if fixed is not None:
                variant, ex = fixed
        shaped = self._shape(variant, q)
        if shaped.render() == variant.render():
            return ex
        return self._run_new(shaped, q, rank)

    def _run_new(self, variant: Variant, q: _Question, rank: int) -> Execution | None:
        return None if variant.render() in q.executed else self._run(variant, q, rank)

    def _repaired(self, variant: Variant, q: _Question, rank: int) -> tuple[Variant, Execution] | None:
        """The first repair of an empty variant that returns answers, with its execution."""
        if not variant.tpl.structured:
            return None
        repairs = self._inverse(variant) if self.on("triple_direction") else []
        repairs += self._relink(variant, q)
        for repaired in repairs[:6]:
            if q.late():
                break
            if repaired.render() in q.executed:
                continue
            rex = self._run(repaired, q, rank)
            if rex.ok and not rex.empty:
                return repaired, rex
        return None

    def _accept(self, ex: Execution, q: _Question, rank: int) -> bool:
        if self.on("expected_shape") and not _shape_fits(q.kind, ex):
            q.trace.step("rejected", rank=rank, reason=f"a {ex.shape} does not answer a {q.kind} question")
            return False
        if self.on("verify_nonempty") and ex.empty:
            q.trace.step("rejected", rank=rank, reason="empty result")
            return False
        return True

    def _inverse(self, variant: Variant) -> list[Variant]:
        """The variant with subject and object swapped in triples holding a new entity."""
        subs = {id(t) for t in variant.substituted}
        idx = [i for i, p in enumerate(variant.pieces) if isinstance(p, Triple) and not p.is_type()
               and len(p.p) == 1 and any(id(t) in subs for t in (*p.s, *p.o))
               and all(t.kind not in ("string", "number") for t in p.o)]
        if not idx:
            return []
        flipped = variant.fork("inverse triple direction")
        for i in idx:
            t = flipped.pieces[i]
            assert isinstance(t, Triple)
            t.s, t.o = t.o, t.s
        return [flipped]

    # ---------------------------------------------------------------- predicate re-linking

    def _relink(self, variant: Variant, q: _Question) -> list[Variant]:
        """Predicates that no longer fit a substituted entity, class or literal, replaced by
        ones that do (closest in wording to the question and to the old predicate first)."""
        out: list[Variant] = []
        subs = {id(t) for t in variant.substituted}
        prefixes = variant.tpl.prefixes
        for i, piece in enumerate(variant.pieces):
            if not isinstance(piece, Triple) or piece.is_type() or len(piece.p) != 1:
                continue
            current = expand(piece.p[0], prefixes)
            if current is None:
                continue
            found: list[tuple[str, int]] | None = None
            if piece.o[0].kind == "iri" and any(id(t) in subs for t in piece.o):
                found = self._entity_predicates(piece.o[0].text[1:-1], "in")
            elif piece.s[0].kind == "iri" and any(id(t) in subs for t in piece.s):
                found = self._entity_predicates(piece.s[0].text[1:-1], "out")
            elif piece.o[0].kind == "string":
                found = self._value_predicates(piece.o[0].text)
            elif piece.s_var and (cls := var_class(variant.pieces, piece.s_var, prefixes)) is not None:
                found = self._class_predicates(cls)
            if not found or any(p == current for p, _ in found):
                continue
            ranked = [p for p in self._rank_predicates(found, current, q)
                      if self._wording(p, q, current, 0.8) >= _MIN_WORDING]  # no blind guesses
            for pred in ranked[:2]:
                fixed = variant.fork(f"predicate {local_name(current)} -> {local_name(pred)}")
                t = fixed.pieces[i]
                assert isinstance(t, Triple)
                t.p = [Tok("iri", f"<{pred}>")]
                out.append(fixed)
        return out

    def _rank_predicates(self, found: list[tuple[str, int]], current: str, q: _Question, *,
                         same_kind: bool = True, old_weight: float = 0.8) -> list[str]:
        """Candidate predicates for ``current``: the same kind of value (unless ``same_kind`` is
        off); ontology namespace first when that rule is on; then wording closest to the question
        (with hints for superlative adjectives) or to ``current``; then usage."""
        ns = current[: len(current) - len(local_name(current))]
        want = self._value_kind(current) if same_kind else None

        def key(item: tuple[str, int]) -> tuple[float, float, float, str]:
            iri, count = item
            in_ns = 1.0 if self.on("ontology_namespace") and iri.startswith(ns) else 0.0
            return (-in_ns, -self._wording(iri, q, current, old_weight), -count, iri)

        usable = [p for p in found if p[0] not in (current, RDF_TYPE)
                  and (want is None or self._value_kind(p[0]) in (None, want))]
        return [p for p, _ in sorted(usable, key=key)]

    def _wording(self, iri: str, q: _Question, current: str, old_weight: float) -> float:
        """0-100: how close a predicate's name is to the question's words (or to ``current``)."""
        lex = self._name_score(iri, q.words)
        if old_weight:
            names = self._names(iri)
            old = set(tokenize(split_camel(local_name(current))))
            lex = max(lex, old_weight * max((word_sim(w, x) for w in old for x in names), default=0.0))
        return lex

    def _names(self, iri: str) -> frozenset[str]:
        """The words of a predicate's label and local name, and each name run together
        ("birthPlace" -> birth, place, birthplace); cached."""
        if iri not in self._name_words:
            out: set[str] = set()
            for name in (self.tools.label(iri) or "", local_name(iri)):
                words = tokenize(split_camel(name))
                out |= {x for x in words if len(x) > 2}
                if len(words) > 1:
                    out.add("".join(words))
            self._name_words[iri] = frozenset(out)
        return self._name_words[iri]

    def _named_predicates(self, words: Sequence[str]) -> list[str]:
        """Predicates of the KG whose name ``words`` give (score >= 80), best first."""
        key = " ".join(words)
        if key not in self._named:
            try:
                items = self.tools.predicates()
            except KGError:
                items = []
            scored = [(self._name_score(i.iri, words), i.count or 0, i.iri) for i in items
                      if i.iri != RDF_TYPE and i.iri not in self._labels]
            self._named[key] = [iri for score, _, iri in sorted(scored, key=lambda x: (-x[0], -x[1], x[2]))
                                if score >= 80][:3]
        return self._named[key]

    def _name_score(self, iri: str, words: Iterable[str]) -> float:
        """0-100: how close a predicate's name is to ``words`` (superlative adjectives and
        question words count through the property words they hint at)."""
        names = self._names(iri)
        words = set(words)
        words |= {h for w in words for h in HINTS.get(w, ())}
        return max((word_sim(w, x) for w in words for x in names), default=0.0)

    def _value_kind(self, predicate: str) -> str | None:
        """iri | number | date | string: what the predicate's values are (from the KG)."""
        info = self._ontology_of(predicate)
        pairs = getattr(info, "example_pairs", None) or []
        for _, value in pairs:
            return _kind_of_value(value.kind, value.datatype)
        return None

    def _entity_predicates(self, iri: str, direction: str) -> list[tuple[str, int]]:
        info = self._ontology_of(iri)
        return [(p.iri, p.count) for p in getattr(info, "predicates", []) if p.direction == direction]

    def _class_predicates(self, cls: str) -> list[tuple[str, int]]:
        info = self._ontology_of(cls)
        return [(p.iri, p.count) for p in getattr(info, "predicates", []) if p.direction == "out"]

    def _value_predicates(self, literal: str) -> list[tuple[str, int]]:
        if literal not in self._pred_values:
            rows: list[tuple[str, int]] = []
            try:
                result = self.tools.kg.query(
                    f"SELECT ?p (COUNT(*) AS ?n) WHERE {{ ?s ?p {literal} }} GROUP BY ?p ORDER BY DESC(?n) LIMIT 20",
                    timeout=self.tools.timeout_s)
                rows = [(p.value, int(n.value)) for p, n in result.rows if p is not None and n is not None]
            except (KGError, ValueError):
                rows = []
            self._pred_values[literal] = rows
        return self._pred_values[literal]




# ============================================================================================
# Helpers
# ============================================================================================

_MIN_WORDING = 70.0  # a re-linked predicate must be named (or hinted) by the question

def _partial_person(span: Span, cand: Candidate) -> bool:
    """A person named by part of the name ("Bergström" for "Anna Bergström")."""
    if not _person_like(cand.types):
        return False
    mention = set(tokenize(span.surface))
    return bool(mention) and mention < set(tokenize(cand.label))


def _link_dict(link: Link) -> dict[str, Any]:
    return {"surface": link.surface, "start": link.start, "end": link.end,
            "candidates": [{"iri": c.iri, "label": c.label, "score": c.score,
                            "types": [local_name(t) for t in c.types[:3]]} for c in link.candidates]}


def _slot_dict(slot: Slot, tpl: Template) -> dict[str, Any]:
    said = tpl.example.text[slot.mention[0]:slot.mention[1]] if slot.mention else None
    return {"kind": slot.kind, "value": slot.value, "mentioned": said}


def _short(value: str) -> str:
    return local_name(value) if value.startswith("http") else value




def _carry_case(slot: Slot, value: str | None, example_text: str) -> str | None:
    """The training literal's casing carried over to the new literal ("Winter" -> "winter")."""
    if value is None or slot.kind != "string" or slot.mention is None:
        return value
    said = example_text[slot.mention[0]:slot.mention[1]]
    if slot.value == said.lower() and said != said.lower():
        return value.lower()
    if slot.value == said.upper() and said != said.upper():
        return value.upper()
    return value


def _kind_of_value(kind: str, datatype: str | None) -> str:
    if kind != "literal":
        return "iri"
    if datatype in _NUMERIC_DATATYPES:
        return "number"
    if datatype and datatype.startswith(XSD) and ("date" in datatype or "time" in datatype or "gYear" in datatype):
        return "date"
    return "string"


_EXCLUSIVE = frozenset({"ORDER", "LIMIT", "HAVING", "FILTER"})  # a template with these does
# something specific the question must ask for

_ASKED_BEFORE = frozenset({"which", "what", "many", "all", "list", "the", "me", "show", "our", "every", "each"})


def _asked_class(question: str, links: Sequence[Link]) -> str | None:
    """The class the question asks for: "Which *books* ...", "In which *city* ..."."""
    for link in links:
        classes = link.kind_candidates("class")
        if not classes:
            continue
        before = normalize_text(question[: link.start]).split()
        if before and before[-1] in _ASKED_BEFORE:
            return classes[0].iri
    return None


def _shape_fits(kind: QuestionKind, ex: Execution) -> bool:
    if kind == "boolean":
        return ex.shape == "boolean"
    if kind == "count":
        return ex.shape == "number"
    return ex.shape != "boolean"
