"""The ``researcher`` command line: scoring, evaluation, the improvement loop, review and deploy.

Every command prints human tables by default and JSON with ``--json``. Expected failures (bad
files, broken queries, unreachable endpoints) end with one line on stderr and exit status 1.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Self-improving Text-to-SPARQL agents: evaluate, improve, review and deploy.",
)
console = Console()
if not console.is_terminal:  # piped or captured output: don't squeeze tables into 80 columns
    console = Console(width=200)
err_console = Console(stderr=True)


class CLIError(Exception):
    """An expected failure: printed as one line, exit status 1."""


def _expected_errors() -> tuple[type[BaseException], ...]:
    from researcher.datasets import DatasetError
    from researcher.evaluate import PredictionsError
    from worker_agent.kg import KGError

    # OSError: unwritable output paths, full disks, permissions: a one-line message says which file
    errors: list[type[BaseException]] = [CLIError, DatasetError, PredictionsError, KGError, OSError]
    for module, name in (
        ("worker_agent.spec", "SpecError"),
        ("worker_agent.llm", "LLMError"),
        ("researcher.versions", "VersionStoreError"),
        ("researcher.workspace", "WorkspaceError"),
        ("researcher.ledger", "LedgerError"),
        ("researcher.versions", "PatchError"),
        ("researcher.serve", "ServeError"),
        ("researcher.propose", "ProposalError"),
        ("researcher.loop", "WorkerUnavailable"),
    ):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except _expected_errors() as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def print_summary(summary: dict[str, Any], title: str) -> None:
    """Summary tables: overall, per family, per feature, per language, outcomes."""
    overall = summary["overall"]
    table = Table(title=title)
    for col in ("scope", "n", "set_P", "set_recall", "set_F", "set_F_ndcg"):
        table.add_column(col, justify="right" if col != "scope" else "left")
    table.add_row("overall", *(_fmt(overall.get(m)) for m in ("n", "set_P", "set_recall", "set_F", "set_F_ndcg")))
    for group in ("per_language", "per_feature"):
        for key, vals in summary[group].items():
            label = f"{'lang' if group == 'per_language' else 'feature'}: {key}"
            table.add_row(label, *(_fmt(vals.get(m)) for m in ("n", "set_P", "set_recall", "set_F", "set_F_ndcg")))
    console.print(table)
    fam = Table(title="Structure (per-family component F1, exact match, schema hit@5)")
    for col in (*summary["families"].keys(), "exact_match", "schema_hit@5"):
        fam.add_column(col, justify="right")
    fam.add_row(*(_fmt(v) for v in summary["families"].values()),
                _fmt(overall.get("exact_match")), _fmt(overall.get("schema_hit@5")))
    console.print(fam)
    out = Table(title="Outcomes")
    out.add_column("outcome")
    out.add_column("questions", justify="right")
    for k, v in summary["outcomes"].items():
        out.add_row(k, str(v))
    console.print(out)
    if summary["gold_unavailable"]:
        console.print("[yellow]gold unavailable (left out of averages):[/]")
        for item in summary["gold_unavailable"]:
            console.print(f"  {item['uid']}: {item['reason']}", highlight=False)


def write_results(report: Any, out_dir: Path) -> tuple[Path, Path]:
    """Per-question JSONL and summary JSON, each written atomically."""
    from worker_agent.trace import atomic_write_text

    results_path = out_dir / "results.jsonl"
    summary_path = out_dir / "summary.json"
    atomic_write_text(results_path, "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in report.results))
    atomic_write_text(summary_path, json.dumps(report.summary, indent=2, ensure_ascii=False))
    return results_path, summary_path


def _check_out_dir(out: Path) -> None:
    """Fail before any work when results could not be written there."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"{out}: exists and is not a directory (--out needs a directory)")


def open_kg_from_options(kg: list[Path] | None, endpoint: str | None) -> Any:
    from worker_agent.kg import open_kg

    if bool(kg) == bool(endpoint):
        raise CLIError("give the knowledge graph either as --kg FILE (repeatable) or as --endpoint URL")
    from researcher.data import probe_endpoint

    graph = open_kg(files=kg or (), endpoint=endpoint)
    if endpoint:
        probe_endpoint(graph)
    return graph


@app.command()
@handle_errors
def score(
    questions: Path = typer.Argument(..., help="Questions file (TEXT2SPARQL YAML or QALD JSON)."),
    predictions: Path = typer.Argument(..., help="Predictions: `text2sparql ask` answers JSON or {uid: query}."),
    kg: Optional[list[Path]] = typer.Option(None, "--kg", help="RDF file of the KG (repeatable)."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="SPARQL endpoint URL."),
    gold: Optional[Path] = typer.Option(None, "--gold", help="Official true_result_set.json (else gold queries are executed)."),
    out: Path = typer.Option(Path("score-results"), "--out", help="Directory for results.jsonl and summary.json."),
    timeout: float = typer.Option(30.0, help="Per-query timeout in seconds."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Score a predictions file against a question set with the official metrics."""
    from researcher.datasets import load_gold_answers, load_order_required, load_questions
    from researcher.evaluate import check_gold_covers, load_predictions, resolve_gold, score_predictions

    _check_out_dir(out)
    qs = load_questions(questions)
    preds = load_predictions(predictions)
    unknown = sorted(set(preds) - {q.uid for q in qs.questions})
    if unknown and len(unknown) == len(preds):
        raise CLIError(f"{predictions}: no prediction matches a question id of {questions} (e.g. {unknown[0]!r})")
    graph = open_kg_from_options(kg, endpoint)
    official = load_gold_answers(gold) if gold else None
    if official is not None:
        check_gold_covers(qs.questions, official, gold)
    # as the official client: with an official answer file, nDCG only where it lists order_required
    order = load_order_required(gold) if gold else load_order_required(questions)
    gold_sets = resolve_gold(qs.questions, graph, official, order, timeout=timeout)
    report = score_predictions(qs.questions, preds, graph, gold_sets, timeout=timeout)
    report.summary["unknown_predictions"] = unknown
    results_path, summary_path = write_results(report, out)
    if as_json:
        sys.stdout.write(json.dumps(report.summary, indent=2, ensure_ascii=False) + "\n")
        return
    print_summary(report.summary, f"{qs.dataset_id}: {len(qs.questions)} questions")
    if unknown:
        console.print(f"[yellow]{len(unknown)} predictions name no question of the set (ignored)[/]")
    console.print(f"results: {results_path}  summary: {summary_path}", highlight=False)



# --------------------------------------------------------------------------- workspace commands


def _workspace() -> Any:
    from researcher.workspace import find_workspace

    return find_workspace()


@app.command()
@handle_errors
def init(
    directory: Path = typer.Argument(..., help="Workspace directory to create."),
    questions: Optional[Path] = typer.Option(None, "--questions", help="Questions file (default: bundled demo)."),
    kg: Optional[list[Path]] = typer.Option(None, "--kg", help="RDF file of the KG (repeatable)."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="SPARQL endpoint URL."),
    gold: Optional[Path] = typer.Option(None, "--gold", help="Official true_result_set.json."),
    splits: Optional[Path] = typer.Option(None, "--splits", help="A split file to use as is."),
    seed: int = typer.Option(0, help="Seed of the split when none is given."),
) -> None:
    """Create a workspace: config, version store seeded with v1, traces/, split file."""
    from researcher.workspace import init_workspace

    ws = init_workspace(directory, questions=str(questions) if questions else None,
                        kg=[str(k) for k in kg or []], endpoint=endpoint,
                        gold=str(gold) if gold else None, splits=str(splits) if splits else None, seed=seed)
    sizes = {s: len(ws.data.split(s)) for s in ("train", "validation", "test")}
    console.print(f"workspace {ws.root}: {ws.data.questions.dataset_id}, "
                  f"{len(ws.data.questions.questions)} questions (train {sizes['train']}, "
                  f"validation {sizes['validation']}, test {sizes['test']}); v1 = seed spec", highlight=False)


def _run_loop(ws: Any, iterations: Optional[int], budget_usd: Optional[float], max_hours: Optional[float],
              patience: Optional[int], as_json: bool, final_test: bool = True) -> Any:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from researcher.loop import Researcher

    with ws.lock(), Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                             TimeElapsedColumn(), console=err_console, transient=True, disable=as_json) as progress:
        task = progress.add_task("starting", total=None)

        def on_event(kind: str, **d: Any) -> None:
            if kind == "evaluate":
                progress.update(task, description=f"evaluating {d['version']} on {d['split']}", completed=0, total=None)
            elif kind == "question":
                progress.update(task, completed=d["done"], total=d["total"])
            elif kind == "proposal":
                progress.console.print(f"proposal from {d['parent']}: {d['summary']}", highlight=False)
            elif kind == "recorded":
                f = d.get("set_F")
                progress.console.print(f"  {d['version']}: {d['status']} (set_F {f:.3f}) {d.get('reason') or ''}"
                                       if f is not None else f"  {d['version']}: {d['status']}", highlight=False)
            elif kind == "invalid":
                progress.console.print(f"  invalid: {d['reason']}", highlight=False)

        researcher = Researcher(ws, on_event=on_event)
        if researcher.ledger.warning:
            err_console.print(f"[yellow]warning:[/] {researcher.ledger.warning}", highlight=False)
        result = researcher.run(iterations=iterations, budget_usd=budget_usd,
                                                       max_hours=max_hours, patience=patience,
                                                       final_test=final_test)
    return result


def _override_loop_config(ws: Any, **options: Any) -> None:
    """Command-line options go through the same validation as researcher.yaml."""
    from pydantic import ValidationError

    from researcher.workspace import LoopConfig

    given = {k: v for k, v in options.items() if v is not None}
    try:
        ws.config.loop = LoopConfig.model_validate({**ws.config.loop.model_dump(), **given})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise CLIError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None


def _print_run(result: Any, as_json: bool) -> None:
    from dataclasses import asdict

    if as_json:
        sys.stdout.write(json.dumps(asdict(result), indent=2, default=str) + "\n")
        return
    test = (result.test or {}).get("test", {}).get("set_F")
    t = Table(title="Loop run", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    for key, value in (
        ("iterations", str(result.iterations)),
        ("accepted", ", ".join(result.accepted) or "-"),
        ("rejected", ", ".join(result.rejected) or "-"),
        ("invalid proposals", str(result.invalid)),
        ("stopped because", result.stop_reason),
        ("v1 validation set_F", _fmt(result.baseline_validation)),
        ("best version", str(result.best)),
        ("best validation set_F", _fmt(result.best_validation)),
        ("best sealed-test set_F", _fmt(test)),
        ("wall time", f"{result.wall_s:.1f} s"),
    ):
        t.add_row(key, value)
    console.print(t)


@app.command()
@handle_errors
def loop(
    iterations: Optional[int] = typer.Option(None, "--iterations", "-n", help="Candidates to propose."),
    budget_usd: Optional[float] = typer.Option(None, "--budget-usd", help="Stop at this LLM cost."),
    max_hours: Optional[float] = typer.Option(None, "--max-hours", help="Stop after this wall time."),
    patience: Optional[int] = typer.Option(None, "--patience", help="Stop after P candidates without improvement."),
    repeats: Optional[int] = typer.Option(None, "--repeats", help="Evaluations per version (mean and CI)."),
    no_test: bool = typer.Option(False, "--no-test", help="Skip the final sealed-test evaluation."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run the improvement loop in the current workspace (resumable; one lock per workspace)."""
    ws = _workspace()
    _override_loop_config(ws, iterations=iterations, budget_usd=budget_usd, max_hours=max_hours,
                          patience=patience, repeats=repeats)
    result = _run_loop(ws, iterations, budget_usd, max_hours, patience, as_json, final_test=not no_test)
    _print_run(result, as_json)
    if result.stop_reason == "interrupted":
        raise typer.Exit(130)


@app.command()
@handle_errors
def demo(
    directory: Path = typer.Argument(Path("demo-workspace"), help="Workspace to create (or reuse)."),
    iterations: int = typer.Option(12, "--iterations", "-n", help="Candidates to propose."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The main job on the embedded default: bundled demo KG, offline strategy and offline search."""
    from researcher.workspace import CONFIG_NAME, Workspace, init_workspace

    ws = Workspace(directory) if (directory / CONFIG_NAME).is_file() else init_workspace(directory)
    _override_loop_config(ws, iterations=iterations)
    result = _run_loop(ws, iterations, None, None, None, as_json)
    _print_run(result, as_json)
    if result.stop_reason == "interrupted":
        raise typer.Exit(130)
    if not as_json:
        _print_ledger(ws, "text", all_features=False)
        console.print(f"workspace: {ws.root} (cd there and try `researcher log`, `researcher diff v1 {result.best}`, "
                      f"`researcher report`, `researcher serve`)", highlight=False)


def _comparable_records(ws: Any) -> list[Any]:
    """Versions measured in the latest eval context (dataset, split, KG): only those compare."""
    records = ws.ledger.versions()
    if not records:
        return []
    latest = records[-1].eval_context
    others = [r for r in records if not r.eval_context.comparable(latest)]
    if others:
        err_console.print(f"{len(others)} versions measured on another dataset/split/KG are not shown")
    return [r for r in records if r.eval_context.comparable(latest)]


def _print_ledger(ws: Any, fmt: str, all_features: bool, which: str = "both") -> None:
    from researcher.ledger import DEFAULT_METRICS, feature_table, format_cell, metric_table, render_table

    records = _comparable_records(ws)
    metrics = list(DEFAULT_METRICS)
    if any(r.repeats for r in records):  # --repeats k: mean and 95% CI of set_F per version
        metrics += ["repeats.n", "repeats.mean", "repeats.ci95"]
    tables = []
    if which in ("both", "features"):
        tables.append(("features", "Features x versions", feature_table(records, all_features=all_features)))
    if which in ("both", "metrics"):
        tables.append(("metrics", "Metrics x versions (validation)", metric_table(records, metrics)))
    if fmt == "json":  # one document, so `json.load` reads it
        sys.stdout.write(json.dumps({key: json.loads(render_table(table, "json")) for key, _, table in tables},
                                    indent=2, ensure_ascii=False) + "\n")
        return
    if not records:
        console.print("ledger is empty: run `researcher loop`")
        return
    if fmt == "text":
        for _, title, table in tables:
            t = Table(title=title)
            for i, col in enumerate(table.header):
                t.add_column(str(col), no_wrap=i == 0)
            for row in table.rows:
                t.add_row(*(format_cell(c) for c in row))
            console.print(t)
        return
    for _, title, table in tables:
        if fmt == "md":
            sys.stdout.write(f"### {title}\n\n")
        sys.stdout.write(render_table(table, fmt) + "\n")


@app.command()
@handle_errors
def ledger(
    fmt: str = typer.Option("text", "--format", help="text | md | csv | json"),
    which: str = typer.Option("both", "--table", help="both | features | metrics (csv holds one table)"),
    all_features: bool = typer.Option(False, "--all-features", help="Also show features that never changed."),
) -> None:
    """Print the features x versions and metrics x versions tables."""
    if fmt not in ("text", "md", "csv", "json"):
        raise CLIError(f"unknown format {fmt!r} (text, md, csv or json)")
    if which not in ("both", "features", "metrics"):
        raise CLIError(f"unknown table {which!r} (both, features or metrics)")
    if fmt == "csv" and which == "both":
        raise CLIError("a CSV file holds one table: pass --table features or --table metrics")
    _print_ledger(_workspace(), fmt, all_features, which)


@app.command()
@handle_errors
def log(as_json: bool = typer.Option(False, "--json")) -> None:
    """Lineage: which version came from which, and whether it was accepted."""
    ws = _workspace()
    statuses = {r.version: r for r in ws.ledger.versions()}
    records = {r.version: r for r in _comparable_records(ws)}
    best, deployed = ws.versions.marked("best"), ws.versions.marked("deployed")
    rows = []
    for v in ws.versions.versions():
        r, any_r = records.get(v.name), statuses.get(v.name)
        rows.append({"version": v.name, "parent": v.parent, "status": any_r.status if any_r else "unrecorded",
                     "set_F": ((r.scores.get("overall") or {}).get("set_F") if r else None),
                     "feature": v.feature, "summary": v.summary, "commit": v.commit[:10],
                     "marks": [m for m, n in (("best", best), ("deployed", deployed)) if n == v.name]})
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    t = Table(title="Version lineage")
    for col in ("version", "parent", "status", "set_F", "feature", "summary", "marks"):
        t.add_column(col)
    for row in rows:
        t.add_row(row["version"], row["parent"] or "-", row["status"], _fmt(row["set_F"]), row["feature"] or "-",
                  row["summary"], ", ".join(row["marks"]))
    console.print(t)


@app.command()
@handle_errors
def diff(a: str = typer.Argument(...), b: str = typer.Argument(...)) -> None:
    """Unified diff between two versions' specs."""
    ws = _workspace()
    sys.stdout.write(ws.versions.diff(a, b))


@app.command()
@handle_errors
def show(version: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
    """A version: spec files, scores, rationale, parent."""
    ws = _workspace()
    v = ws.versions.get(version)
    rec = next((r for r in reversed(ws.ledger.versions()) if r.version == version), None)
    files = ws.versions.files(version)
    if as_json:
        sys.stdout.write(json.dumps({"version": v.name, "parent": v.parent, "commit": v.commit, "summary": v.summary,
                                     "rationale": v.rationale, "feature": v.feature, "files": files,
                                     "record": rec.model_dump(mode="json") if rec else None}, indent=2) + "\n")
        return
    console.print(f"[bold]{v.name}[/] (parent {v.parent or '-'}, commit {v.commit[:10]}): {v.summary}", highlight=False)
    console.print(f"feature: {v.feature}\nrationale: {v.rationale}", highlight=False)
    if rec:
        o = rec.scores.get("overall") or {}
        console.print(f"status: {rec.status} ({rec.reason or ''}); validation set_F {_fmt(o.get('set_F'))}, "
                      f"set_P {_fmt(o.get('set_P'))}, set_recall {_fmt(o.get('set_recall'))}", highlight=False)
    for path, text in sorted(files.items()):
        console.rule(path)
        console.print(text, highlight=False, markup=False)



# --------------------------------------------------------------------------- worker commands


def _load_context(spec_dir: Optional[Path], version: Optional[str], questions: Optional[Path],
                  kg: Optional[list[Path]], endpoint: Optional[str], gold: Optional[Path],
                  split_seed: int = 0) -> tuple[Any, Any, str, Optional[str], Path]:
    """(data, spec, version label, commit, traces root) from a workspace or from direct options."""
    from researcher.data import load_data
    from worker_agent.spec import AgentSpec, seed_spec_path

    direct = questions is not None or kg or endpoint
    if direct:
        if questions is None:
            raise CLIError("--questions FILE is required with --kg/--endpoint")
        if version:
            raise CLIError("--version needs a workspace; use --spec DIR with direct data options")
        graph_opts_ok = bool(kg) != bool(endpoint)
        if not graph_opts_ok:
            raise CLIError("give the knowledge graph either as --kg FILE (repeatable) or as --endpoint URL")
        data = load_data(questions=questions, kg=list(kg or []), endpoint=endpoint, gold=gold,
                         splits=None, split_seed=split_seed)
        spec = AgentSpec.load(spec_dir or seed_spec_path())
        label = spec_dir.name if spec_dir else "v1"
        return data, spec, label, None, Path("traces")
    ws = _workspace()
    if spec_dir is not None:
        return ws.data, AgentSpec.load(spec_dir), spec_dir.name, None, ws.traces_dir
    name = version or ws.versions.marked("best") or "v1"
    return ws.data, AgentSpec.from_files(ws.versions.files(name)), name, ws.versions.get(name).commit, ws.traces_dir


def _cache_path(traces_root: Path) -> Optional[Path]:
    """Inside a workspace, its response cache; else the user-level default (None)."""
    from researcher.workspace import CONFIG_NAME

    root = traces_root.parent
    return root / ".cache" / "responses.sqlite" if (root / CONFIG_NAME).is_file() else None


def _examples(data: Any) -> list[Any]:
    from worker_agent.strategies import Example

    return [Example(q.uid, q.text, q.sparql, q.lang, tuple(q.features)) for q in data.split("train") if q.sparql]


@app.command("eval")
@handle_errors
def eval_command(
    split: str = typer.Option("validation", "--split", help="train | validation | test"),
    spec_dir: Optional[Path] = typer.Option(None, "--spec", help="A spec directory to evaluate."),
    version: Optional[str] = typer.Option(None, "--version", help="A version of the workspace (default: best)."),
    questions: Optional[Path] = typer.Option(None, "--questions", help="Questions file (direct mode, no workspace)."),
    kg: Optional[list[Path]] = typer.Option(None, "--kg", help="RDF file (direct mode, repeatable)."),
    endpoint: Optional[str] = typer.Option(None, "--endpoint", help="SPARQL endpoint (direct mode)."),
    gold: Optional[Path] = typer.Option(None, "--gold", help="Official true_result_set.json (direct mode)."),
    concurrency: int = typer.Option(4, help="Questions answered at once."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for traces, results.jsonl and summary.json."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Run a spec over a split and score it with the evaluation core's metrics."""
    from rich.progress import Progress

    from researcher.evaluate import AgentAnswer, evaluate_agent
    from worker_agent.agent import WorkerAgent

    if split not in ("train", "validation", "test"):
        raise CLIError(f"unknown split {split!r} (train, validation or test)")
    if out is not None:
        _check_out_dir(out)
    data, spec, label, commit, traces_root = _load_context(spec_dir, version, questions, kg, endpoint, gold)
    qs = data.split(split)
    if not qs:
        raise CLIError(f"the {split} split is empty")
    out_dir = out or traces_root / f"eval-{label}-{split}"
    agent = WorkerAgent(spec, data.kg, _examples(data), traces_dir=out_dir, spec_version=label, spec_commit=commit,
                        dataset=data.dataset_info(), cache_path=_cache_path(traces_root))
    with Progress(console=err_console, transient=True, disable=as_json) as progress:
        task = progress.add_task(f"{label} on {split}", total=len(qs))

        def answer(q: Any) -> AgentAnswer:
            a = agent.ask(q.text, uid=q.uid, lang=q.lang)
            return AgentAnswer(a.query, a.status, a.time_s, a.cost_usd, a.tokens)

        report = evaluate_agent(answer, qs, data.kg, data.gold(), concurrency=concurrency,
                                progress=lambda q, a: progress.advance(task))
    report.summary["context"] = {**data.context(split), "version": label, "spec_commit": commit}
    write_results(report, out_dir)
    from researcher.loop import check_worker_health

    check_worker_health(report, f"{label} on {split} (results in {out_dir})")
    if as_json:
        sys.stdout.write(json.dumps(report.summary, indent=2, ensure_ascii=False) + "\n")
        return
    print_summary(report.summary, f"{label} on {split}: {len(qs)} questions")
    statuses = ", ".join(f"{k} {v}" for k, v in report.summary["statuses"].items())
    console.print(f"exit statuses: {statuses}\ntraces and results: {out_dir}", highlight=False)


@app.command()
@handle_errors
def ask(
    question: str = typer.Argument(..., help="A natural-language question."),
    spec_dir: Optional[Path] = typer.Option(None, "--spec"),
    version: Optional[str] = typer.Option(None, "--version"),
    questions: Optional[Path] = typer.Option(None, "--questions", help="Questions file whose train split gives examples (direct mode)."),
    kg: Optional[list[Path]] = typer.Option(None, "--kg"),
    endpoint: Optional[str] = typer.Option(None, "--endpoint"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Answer one question: print the query, its answers and a short trace summary."""
    from worker_agent.agent import WorkerAgent

    if not question.strip():
        raise CLIError("the question is empty")

    data, spec, label, commit, traces_root = _load_context(spec_dir, version, questions, kg, endpoint, None)
    agent = WorkerAgent(spec, data.kg, _examples(data), traces_dir=traces_root / f"ask-{label}",
                        spec_version=label, spec_commit=commit, dataset=data.dataset_info(),
                        cache_path=_cache_path(traces_root))
    import hashlib

    uid = "ask-" + hashlib.sha1(question.encode()).hexdigest()[:10]
    a = agent.ask(question, uid=uid)
    preview = agent.tools.test_sparql(a.query).to_dict() if a.query else None
    if as_json:
        sys.stdout.write(json.dumps({"question": question, "query": a.query, "status": a.status, "detail": a.detail,
                                     "answers": preview, "trace": str(a.trace_path)}, indent=2, default=str) + "\n")
        if a.status in ("llm_error", "tool_error"):
            raise typer.Exit(1)
        return
    console.print(f"[bold]status:[/] {a.status}  ({a.time_s:.2f}s, {label})"
                  + (f"  {a.detail}" if a.detail and a.status != "answered" else ""), highlight=False)
    console.print(a.query or "(no query)", markup=False, highlight=False)
    if preview:
        if preview.get("error"):
            console.print(f"error: {preview['error']}", highlight=False)
        elif preview.get("boolean") is not None:
            console.print(f"answer: {preview['boolean']}")
        else:
            t = Table(title=f"answers ({preview.get('total')} rows)")
            for v in preview.get("variables", []):
                t.add_column(v)
            for row in preview.get("rows", []):
                t.add_row(*(str(c) for c in row))
            console.print(t)
    console.print(f"trace: {a.trace_path}", highlight=False)
    if a.status in ("llm_error", "tool_error"):  # the worker broke, not merely failed to answer
        raise typer.Exit(1)



# --------------------------------------------------------------------------- deploy and review


@app.command()
@handle_errors
def deploy(version: str = typer.Argument(..., help="Version to deploy (vN or 'best').")) -> None:
    """Mark a version as deployed (a ref in the version store, recorded in the ledger)."""
    from researcher.serve import deploy as do_deploy

    ws = _workspace()
    name = ws.versions.marked("best") if version == "best" else version
    if not name:
        raise CLIError("no best version yet: run `researcher loop` first")
    console.print(f"deployed {do_deploy(ws, name)}")


@app.command()
@handle_errors
def export(version: str = typer.Argument(...), directory: Path = typer.Argument(...)) -> None:
    """Write a standalone copy of a version's spec (spec/ + manifest.json)."""
    from researcher.serve import export as do_export

    ws = _workspace()
    console.print(f"exported {version} to {do_export(ws, version, directory)}", highlight=False)


@app.command()
@handle_errors
def serve(
    version: str = typer.Option("deployed", "--version", help="deployed | best | vN"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    timeout: float = typer.Option(30.0, "--timeout", help="Per-request time limit (then a fallback query)."),
) -> None:
    """Serve a version as a TEXT2SPARQL-conformant HTTP API (GET / and /text2sparql)."""
    from researcher.serve import run_server

    if not 0 < port < 65536:
        raise CLIError(f"--port {port}: not a TCP port (1-65535)")
    ws = _workspace()
    if version == "deployed" and not ws.versions.marked("deployed"):
        raise CLIError("no deployed version: run `researcher deploy vN` or pass --version best")
    run_server(ws, host=host, port=port, version=version, timeout_s=timeout)


@app.command()
@handle_errors
def report(out: Path = typer.Option(Path("report"), "--out", help="Output directory.")) -> None:
    """Write a static, offline HTML report of the ledger, lineage, diffs and outcomes."""
    from researcher.report import write_report

    ws = _workspace()
    target = out if out.is_absolute() else ws.root / out
    _check_out_dir(target)
    path = write_report(ws, target)
    console.print(f"report: {path}", highlight=False)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
