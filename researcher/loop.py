"""The improvement loop: one iteration = pick parent -> propose -> gate -> commit -> evaluate -> record.

Crash safety: a candidate is committed to the version store before it is evaluated and recorded in
the ledger. On start, ``reconcile`` evaluates and records any committed version the ledger lacks,
so after a crash or ``kill -9`` a new run continues with no lost or duplicated versions.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from researcher.analysis import build_analysis, load_results
from researcher.evaluate import AgentAnswer, EvalReport, evaluate_agent
from researcher.propose import Proposal, ProposalError, Proposer, SearchExhausted, make_proposer
from worker_agent.strategies import Example

Event = Callable[..., None]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class GateError(Exception):
    """A candidate failed a gate before evaluation (recorded as invalid with this reason)."""


class WorkerUnavailable(Exception):
    """The worker's model (or KG) failed on most questions: an outage, not a property of the spec.
    Nothing is recorded, so the outage never enters the research record."""


#: Fraction of questions ending in ``llm_error`` above which an evaluation counts as an outage.
OUTAGE_SHARE = 0.5


def check_worker_health(report: EvalReport, label: str) -> None:
    failed = [r for r in report.results if r.status == "llm_error"]
    if report.results and len(failed) / len(report.results) >= OUTAGE_SHARE:
        detail = next((r.error for r in failed if r.error), None) or "see the traces"
        raise WorkerUnavailable(f"{label}: the worker's model failed on {len(failed)} of "
                                f"{len(report.results)} questions ({detail}); nothing was recorded")


# --------------------------------------------------------------------------- acceptance


@dataclass
class Decision:
    accepted: bool
    reason: str
    mean_gain: float
    wins: int
    losses: int
    ci: tuple[float, float] | None = None


def paired_decision(candidate: Mapping[str, float], best: Mapping[str, float], *, min_gain: float = 0.0,
                    candidate_repeats: Sequence[float] = (), best_repeats: Sequence[float] = ()) -> Decision:
    """Accept only if the candidate beats the best by more than noise.

    Per question, paired: mean gain > ``min_gain`` and more questions improved than worsened. With
    repeated evaluations (non-deterministic models) the 95% confidence interval of the difference
    of the repeat means must also lie above zero.
    """
    common = sorted(set(candidate) & set(best))
    diffs = [candidate[u] - best[u] for u in common]
    wins = sum(d > 1e-9 for d in diffs)
    losses = sum(d < -1e-9 for d in diffs)
    gain = statistics.fmean(diffs) if diffs else 0.0
    ci = None
    if len(candidate_repeats) > 1 and len(best_repeats) > 1:
        m = statistics.fmean(candidate_repeats) - statistics.fmean(best_repeats)
        se = math.sqrt(statistics.variance(candidate_repeats) / len(candidate_repeats)
                       + statistics.variance(best_repeats) / len(best_repeats))
        ci = (m - 1.96 * se, m + 1.96 * se)
    if gain <= min_gain:
        return Decision(False, f"mean paired gain {gain:+.4f} <= {min_gain}", gain, wins, losses, ci)
    if wins <= losses:
        return Decision(False, f"improved {wins} questions but worsened {losses}", gain, wins, losses, ci)
    if ci is not None and ci[0] <= 0:
        return Decision(False, f"gain within noise (95% CI {ci[0]:+.4f}..{ci[1]:+.4f})", gain, wins, losses, ci)
    return Decision(True, f"mean paired gain {gain:+.4f}, improved {wins}, worsened {losses}", gain, wins, losses, ci)


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = 1.96 * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


# --------------------------------------------------------------------------- leak guard

_TOKEN_RES = (
    re.compile(r"<[^<>\s]+>"),  # IRIs
    re.compile(r"\b[A-Za-z][\w-]*:[A-Za-z_][\w.%-]*"),  # prefixed names
    re.compile(r"\"([^\"\n]{3,})\"|'([^'\n]{3,})'"),  # quoted literals
)


def gold_tokens(queries: Sequence[str | None], answers: Sequence[Mapping[str, int] | None]) -> set[str]:
    tokens: set[str] = set()
    for q in queries:
        if not q:
            continue
        for rx in _TOKEN_RES:
            for m in rx.finditer(q):
                tokens.add(next((g for g in m.groups() if g), m.group(0)) if m.groups() else m.group(0))
    for a in answers:
        for value in a or {}:
            # booleans and tiny values (ASK answers, small counts) say nothing about a question
            if value.lower() in ("true", "false") or len(value) < 3:
                continue
            if value.isdigit() and len(value) < 3:
                continue
            tokens.add(value)
    return tokens


def check_leak(diff: str, sealed_tokens: set[str], train_tokens: set[str]) -> str | None:
    """A reason when the diff adds a token known only from validation/test gold, else None."""
    added = "\n".join(line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    for token in sorted(sealed_tokens - train_tokens, key=len, reverse=True):
        # whole-token matches only: "Paris" must not flag "Parisian", "12" must not flag "2012"
        if token and re.search(rf"(?<![\w]){re.escape(token)}(?![\w])", added):
            return f"leak: the diff adds {token[:80]!r}, which occurs only in validation/test gold"
    return None


# --------------------------------------------------------------------------- the loop


@dataclass
class RunSummary:
    iterations: int = 0
    accepted: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    invalid: int = 0
    stop_reason: str = "iterations"
    best: str | None = None
    best_validation: float | None = None
    baseline_validation: float | None = None
    test: dict[str, Any] | None = None
    cost_usd: float = 0.0
    wall_s: float = 0.0


class Researcher:
    """Runs the loop on one workspace (the caller holds the workspace lock)."""

    def __init__(self, ws: Any, *, proposer: Proposer | None = None, worker_model: Any = None,
                 on_event: Event | None = None) -> None:
        self.ws = ws
        cfg = ws.config.loop
        self.cfg = cfg
        self.proposer = proposer or self._make_proposer()
        self.worker_model = worker_model
        self.on_event = on_event or (lambda kind, **data: None)
        self.data = ws.data
        self.store = ws.versions
        from researcher.ledger import Ledger

        # the loop holds the workspace lock: it alone may set aside an interrupted append
        self.ledger = Ledger(ws.ledger_path, recover=True)
        self.spent = 0.0  # USD spent by this run: worker evaluations and proposals, valid or not

    def _make_proposer(self) -> Proposer:
        cache = None
        if self.cfg.proposer == "llm":
            from worker_agent.llm import ResponseCache

            cache = ResponseCache(self.ws.cache_path)
        return make_proposer(self.cfg.proposer, seed=self.cfg.seed, model_config=self.cfg.proposer_model,
                             cache=cache)

    # ---------------------------------------------------------------- evaluation
    def examples(self) -> list[Example]:
        return [Example(q.uid, q.text, q.sparql, q.lang, tuple(q.features))
                for q in self.data.split("train") if q.sparql]

    def agent(self, name: str, files: Mapping[str, str] | None = None, traces: Path | None = None,
              *, use_cache: bool = True) -> Any:
        from worker_agent.agent import WorkerAgent
        from worker_agent.spec import AgentSpec

        spec = AgentSpec.from_files(files if files is not None else self.store.files(name))
        commit = self.store.get(name).commit if files is None else None
        return WorkerAgent(spec, self.data.kg, self.examples(), model=self.worker_model,
                           traces_dir=traces, spec_version=name, spec_commit=commit,
                           dataset=self.data.dataset_info(),
                           cache_path=self.ws.cache_path if use_cache else None, use_cache=use_cache)

    def evaluate(self, name: str, split: str, *, repeats: int = 1,
                 files: Mapping[str, str] | None = None) -> tuple[EvalReport, list[float]]:
        questions = self.data.split(split)
        gold = self.data.gold()
        runs: list[EvalReport] = []
        for r in range(repeats):
            out_dir = self.ws.traces_dir / (f"{name}-{split}" + (f"-r{r + 1}" if repeats > 1 else ""))
            # repeats measure a model's variance: only the first may be served from the cache
            agent = self.agent(name, files, out_dir, use_cache=r == 0)
            done = {"n": 0}

            def progress(q: Any, a: AgentAnswer, total: int = len(questions)) -> None:
                done["n"] += 1
                self.on_event("question", version=name, split=split, done=done["n"], total=total,
                              uid=q.uid, status=a.status)

            def answer(q: Any, agent: Any = agent) -> AgentAnswer:
                a = agent.ask(q.text, uid=q.uid, lang=q.lang)
                return AgentAnswer(a.query, a.status, a.time_s, a.cost_usd, a.tokens)

            report = evaluate_agent(answer, questions, self.data.kg, gold,
                                    concurrency=self.ws.config.evaluation.concurrency,
                                    timeout=self.ws.config.evaluation.timeout_s, progress=progress)
            from researcher.cli import write_results

            write_results(report, out_dir)
            self.spent += float(report.summary["cost_usd"])
            check_worker_health(report, f"{name} on {split}")
            runs.append(report)
        set_fs = [float(r.summary["overall"]["set_F"] or 0.0) for r in runs]
        return runs[0] if len(runs) == 1 else _average_reports(runs), set_fs

    # ---------------------------------------------------------------- records
    def _record(self, name: str, *, status: str, reason: str | None, report: EvalReport | None,
                repeats: Sequence[float], proposal: Proposal | None, wall_s: float,
                eval_cost: float = 0.0) -> Any:
        from researcher.ledger import VersionRecord
        from worker_agent.spec import AgentSpec

        version = self.store.get(name)
        files = self.store.files(name)
        try:
            features = AgentSpec.from_files(files).features()
        except Exception:  # invalid specs still get a record, without features
            features = {}
        summary = report.summary if report else None
        tokens = dict(summary["tokens"]) if summary else {"input": 0, "output": 0}
        if proposal:
            tokens = {k: tokens.get(k, 0) + proposal.tokens.get(k, 0) for k in ("input", "output")}
        record = VersionRecord(
            version=name,
            parent=version.parent,
            commit=version.commit,
            created_at=_now(),
            status=status,
            reason=reason,
            summary=version.summary,
            rationale=version.rationale,
            feature_label=version.feature,
            proposer=proposal.proposer if proposal else ("seed" if version.parent is None else "unknown"),
            diff_stats=self.store.diff_stats(version.parent, name) if version.parent else {"files": 0, "insertions": 0, "deletions": 0},
            features=features,
            eval_context={**self.data.context("validation"), "spec_commit": version.commit},
            scores=({"overall": summary["overall"], "families": summary["families"],
                     "per_feature": summary["per_feature"], "per_language": summary["per_language"],
                     "outcome_counts": summary["outcomes"]} if summary else {}),
            outcomes=({r.uid: {"outcome": r.outcome, "set_F": r.scores.get("set_F", 0.0)} for r in report.results}
                      if report else {}),
            repeats=list(repeats) if len(repeats) > 1 else None,
            cost_usd=round((summary["cost_usd"] if summary else 0.0) + (proposal.cost_usd if proposal else 0.0) + eval_cost, 6),
            tokens=tokens,
            wall_s=round(wall_s, 3),
        )
        self.ledger.append(record)
        self.on_event("recorded", version=name, status=status, reason=reason,
                      set_F=(summary or {}).get("overall", {}).get("set_F"))
        return record

    def _comparable(self) -> list[Any]:
        ctx = self.data.context("validation")
        keys = ("dataset_id", "split", "split_hash", "kg_fingerprint")
        return [r for r in self.ledger.versions()
                if all(r.eval_context.get(k) == ctx[k] for k in keys)]

    def best(self) -> Any:
        scored = [r for r in self._comparable() if r.status in ("baseline", "accepted")]
        return scored[-1] if scored else None

    @staticmethod
    def _per_question(record: Any) -> dict[str, float]:
        return {u: float(o.get("set_F", 0.0)) for u, o in record.outcomes.items()
                if o.get("outcome") != "gold_unavailable"}

    # ---------------------------------------------------------------- steps
    def ensure_baseline(self) -> Any:
        best = self.best()
        if best is not None:
            return best
        start = time.perf_counter()
        self.on_event("evaluate", version="v1", split="validation")
        report, reps = self.evaluate("v1", "validation", repeats=self.cfg.repeats)
        record = self._record("v1", status="baseline", reason="seed spec", report=report, repeats=reps,
                              proposal=None, wall_s=time.perf_counter() - start)
        self.store.mark("v1", "best")
        return record

    def reconcile(self) -> list[str]:
        """Evaluate and record committed versions the ledger does not know (after a crash)."""
        self.store.repair()
        known = {r.version for r in self.ledger.versions()}
        done = []
        from worker_agent.spec import validate_spec_files

        for v in self.store.versions():
            if v.name in known or v.name == "v1":
                continue
            self.on_event("reconcile", version=v.name)
            try:
                validate_spec_files(self.store.files(v.name))
            except Exception as exc:  # committed by hand or by an older run: record, don't block
                self._record(v.name, status="invalid", reason=f"spec does not validate: {exc}", report=None,
                             repeats=[], proposal=None, wall_s=0.0)
            else:
                self._evaluate_and_decide(v.name, proposal=None, start=time.perf_counter())
            done.append(v.name)
        return done

    def _sync_best_mark(self) -> None:
        """The ledger is the record; the git ref follows it (a crash may fall between the two)."""
        best = self.best()
        if best is not None and self.store.marked("best") != best.version:
            self.store.mark(best.version, "best")

    def tried_from(self, parent: str) -> list[str]:
        tried = [r.feature_label for r in self.ledger.versions() if r.parent == parent and r.feature_label]
        tried += [e.data.get("feature_label") for e in self.ledger.events()
                  if e.event == "invalid_proposal" and e.version == parent and e.data.get("feature_label")]
        return tried

    def pick_parent(self) -> Any:
        if self.cfg.parent_policy == "latest":
            valid = [r for r in self._comparable() if r.status in ("baseline", "accepted", "rejected")]
            if valid:
                return valid[-1]
        return self.best()

    def analysis_for(self, parent: Any) -> dict[str, Any]:
        trace_dir = self.ws.traces_dir / f"{parent.version}-validation"
        results = load_results(trace_dir / "results.jsonl")
        if not results:  # traces were cleaned: re-evaluate the parent (cheap offline; cached online)
            report, _ = self.evaluate(parent.version, "validation")
            results = [r.to_dict() for r in report.results]
        summary = {"overall": parent.scores.get("overall", {}), "families": parent.scores.get("families", {})}
        grand = self.ledger.get(parent.parent) if parent.parent else None
        history = [
            {"version": r.version, "parent": r.parent, "feature": r.feature_label, "summary": r.summary,
             "status": r.status, "reason": r.reason,
             "set_F": (r.scores.get("overall") or {}).get("set_F")}
            for r in self.ledger.versions()
        ]
        sealed = {q.uid for q in self.data.split("test")}
        invalid = [e.data.get("reason") for e in self.ledger.events("invalid_proposal")
                   if e.version == parent.version]
        analysis = build_analysis(version=parent.version, results=results, summary=summary, sealed_uids=sealed,
                              previous_outcomes=grand.outcomes if grand else None, history=history,
                              trace_dir=trace_dir, samples=self.cfg.failure_samples)
        analysis["invalid_attempts"] = [str(r) for r in invalid if r][-10:]
        return analysis

    def gate(self, parent: str, proposal: Proposal) -> dict[str, str]:
        from worker_agent.spec import validate_spec_files

        try:
            files = self.store.apply_patch(parent, proposal.diff)
        except Exception as exc:
            raise GateError(f"diff does not apply: {exc}") from None
        try:
            validate_spec_files(files)
        except Exception as exc:
            raise GateError(f"spec does not validate: {exc}") from None
        leak = check_leak(proposal.diff, *self._leak_tokens())
        if leak:
            raise GateError(leak)
        smoke = [q for q in self.data.split("train") if q.sparql][: self.cfg.smoke_questions]
        if smoke:
            agent = self.agent(parent, files, None)
            for q in smoke:
                a = agent.ask(q.text, uid=q.uid, lang=q.lang)
                self.spent += a.cost_usd
                if a.status == "llm_error":  # the provider, not the candidate, failed
                    raise WorkerUnavailable(f"smoke run of a candidate from {parent}: the worker's model "
                                            f"failed ({a.detail}); nothing was recorded")
                if a.status == "tool_error":
                    raise GateError(f"smoke run failed on {q.uid}: {a.status}: {a.detail}")
        return files

    def _leak_tokens(self) -> tuple[set[str], set[str]]:
        if not hasattr(self, "_leak_cache"):
            gold = self.data.gold()

            def toks(split: str) -> set[str]:
                qs = self.data.split(split)
                return gold_tokens([q.sparql for q in qs], [gold[q.uid].answers for q in qs])

            self._leak_cache = (toks("validation") | toks("test"), toks("train"))
        return self._leak_cache

    def _evaluate_and_decide(self, name: str, *, proposal: Proposal | None, start: float) -> Any:
        best = self.best()
        self.on_event("evaluate", version=name, split="validation")
        report, reps = self.evaluate(name, "validation", repeats=self.cfg.repeats)
        cand = {r.uid: r.scores.get("set_F", 0.0) for r in report.results if r.counted}
        decision = paired_decision(cand, self._per_question(best), min_gain=self.cfg.min_gain,
                                   candidate_repeats=reps, best_repeats=best.repeats or [])
        record = self._record(name, status="accepted" if decision.accepted else "rejected",
                              reason=f"vs {best.version}: {decision.reason}", report=report, repeats=reps,
                              proposal=proposal, wall_s=time.perf_counter() - start)
        if decision.accepted:
            self.store.mark(name, "best")
            self.ledger.append_event("best_changed", name, {"previous": best.version})
        return record

    def iteration(self) -> tuple[str, Any]:
        """One proposal. Returns (kind, record-or-reason) with kind in accepted/rejected/invalid."""
        start = time.perf_counter()
        parent = self.pick_parent()
        analysis = self.analysis_for(parent)
        try:
            proposal = self.proposer.propose(self.store.files(parent.version), analysis,
                                             self.tried_from(parent.version))
        except SearchExhausted:
            raise
        except ProposalError as exc:  # garbage from a researcher model: recorded, the loop goes on
            cost = float(getattr(exc, "cost_usd", 0.0))
            self.spent += cost
            self.ledger.append_event("invalid_proposal", parent.version, {
                "reason": f"unusable proposal: {exc}", "proposer": self.proposer.name, "cost_usd": cost})
            self.on_event("invalid", parent=parent.version, reason=str(exc))
            return "invalid", str(exc)
        self.spent += proposal.cost_usd
        self.on_event("proposal", parent=parent.version, summary=proposal.summary, feature=proposal.feature_label)
        try:
            files = self.gate(parent.version, proposal)
        except GateError as exc:
            self.ledger.append_event("invalid_proposal", parent.version, {
                "feature_label": proposal.feature_label, "summary": proposal.summary,
                "reason": str(exc), "diff": proposal.diff[:20_000], "proposer": proposal.proposer,
                "cost_usd": proposal.cost_usd})
            self.on_event("invalid", parent=parent.version, reason=str(exc))
            return "invalid", str(exc)
        version = self.store.create(files, parent=parent.version, summary=proposal.summary,
                                    rationale=proposal.rationale, feature=proposal.feature_label)
        record = self._evaluate_and_decide(version.name, proposal=proposal, start=start)
        return record.status, record

    def final_test(self) -> dict[str, Any]:
        best = self.best()
        report, reps = self.evaluate(best.version, "test", repeats=1)
        data = {
            "test": report.summary["overall"],
            "validation": best.scores.get("overall", {}),
            "test_context": self.data.context("test"),
        }
        self.ledger.append_event("test_evaluation", best.version, data)
        return {"version": best.version, **data}

    def run(self, *, iterations: int | None = None, budget_usd: float | None = None,
            max_hours: float | None = None, patience: int | None = None,
            final_test: bool = True) -> RunSummary:
        iterations = self.cfg.iterations if iterations is None else iterations
        budget_usd = self.cfg.budget_usd if budget_usd is None else budget_usd
        max_hours = self.cfg.max_hours if max_hours is None else max_hours
        patience = self.cfg.patience if patience is None else patience
        t0 = time.perf_counter()
        out = RunSummary()
        self.store.repair()  # finish an interrupted create before checking health
        problems = self.store.check()
        if problems:  # refuse before any work, not after the first evaluation
            from researcher.versions import VersionStoreError

            raise VersionStoreError(f"{self.store.root}: {problems[0]}")
        self.ledger.append_event("run_started", None, {"iterations": iterations, "proposer": self.proposer.name})
        try:
            self.ensure_baseline()
            self.reconcile()
            self._sync_best_mark()
            out.baseline_validation = (self.ledger.get("v1").scores.get("overall") or {}).get("set_F")
            stale = 0
            while out.iterations < iterations:
                if budget_usd is not None and self.spent >= budget_usd:
                    out.stop_reason = "budget"
                    break
                if max_hours is not None and time.perf_counter() - t0 >= max_hours * 3600:
                    out.stop_reason = "max_hours"
                    break
                if stale >= patience:
                    out.stop_reason = "patience"
                    break
                try:
                    kind, rec = self.iteration()
                except SearchExhausted as exc:
                    out.stop_reason = f"proposer: {exc}"
                    break
                out.iterations += 1
                if kind == "accepted":
                    out.accepted.append(rec.version)
                    stale = 0
                else:
                    stale += 1
                    if kind == "rejected":
                        out.rejected.append(rec.version)
                    else:
                        out.invalid += 1
        except KeyboardInterrupt:
            out.stop_reason = "interrupted"
        best = self.best()
        out.best = best.version if best else None
        out.best_validation = (best.scores.get("overall") or {}).get("set_F") if best else None
        if final_test and best is not None and out.stop_reason != "interrupted" and self.data.split("test"):
            self.on_event("evaluate", version=best.version, split="test")
            out.test = self.final_test()
        out.cost_usd = round(self.spent, 6)
        out.wall_s = round(time.perf_counter() - t0, 2)
        self.ledger.append_event("run_interrupted" if out.stop_reason == "interrupted" else "run_finished",
                                 out.best, {
            "iterations": out.iterations, "stop_reason": out.stop_reason, "accepted": out.accepted,
            "rejected": out.rejected, "invalid": out.invalid, "wall_s": out.wall_s, "cost_usd": out.cost_usd})
        return out


def _average_reports(reports: Sequence[EvalReport]) -> EvalReport:
    """Mean per-question set_F over repeats (first report's structure, averaged scores)."""
    base = reports[0]
    for i, r in enumerate(base.results):
        vals = [rep.results[i].scores.get("set_F", 0.0) for rep in reports]
        if r.scores:
            r.scores = {**r.scores, "set_F": statistics.fmean(vals)}
    from researcher.evaluate import summarize

    return EvalReport(base.results, summarize(base.results))
