"""A workspace: configuration, the version store, the ledger, traces and the split file.

Layout of a workspace directory::

    researcher.yaml     typed configuration (WorkspaceConfig)
    splits.yml          the train/validation/test split (never regenerated silently)
    versions/           the git-backed version store (v1 = the shipped seed spec)
    ledger.jsonl        the append-only ledger
    traces/             run traces, one folder per evaluation
    .lock               held by a running loop

Commands find the workspace from the current directory upwards, like git.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

CONFIG_NAME = "researcher.yaml"
PKG_PREFIX = "pkg:"
PKG_DATA = Path(__file__).resolve().parents[1] / "worker_agent" / "data"


class WorkspaceError(Exception):
    """A workspace that is missing, locked or misconfigured (one line)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetConfig(_Strict):
    questions: str = Field(description="Questions file (TEXT2SPARQL YAML or QALD JSON); `pkg:` = bundled data.")
    gold: str | None = Field(None, description="Official true_result_set.json; without it gold queries are executed.")
    kg: list[str] = Field(default_factory=list, description="RDF files of an embedded KG.")
    endpoint: str | None = Field(None, description="SPARQL endpoint URL (instead of kg files).")
    store_dir: str | None = Field(".store", description="Persistent Oxigraph store cache (relative to the workspace); null = in memory.")


class EvaluationConfig(_Strict):
    concurrency: int = Field(4, ge=1, le=64, description="Questions answered at once.")
    timeout_s: float = Field(30.0, gt=0, description="Time limit per SPARQL execution during scoring.")


class LoopConfig(_Strict):
    iterations: int = Field(6, ge=0, description="Candidates proposed per `researcher loop` run.")
    patience: int = Field(6, ge=1, description="Stop after this many candidates in a row without improvement.")
    budget_usd: float | None = Field(None, ge=0, description="Stop when the run's LLM cost reaches this.")
    max_hours: float | None = Field(None, gt=0, description="Stop after this wall time.")
    repeats: int = Field(1, ge=1, le=20, description="Evaluations per version (non-deterministic models).")
    min_gain: float = Field(0.0, ge=0, description="Mean set_F gain a candidate must exceed to be accepted.")
    parent_policy: Literal["best", "latest"] = Field("best", description="Which version the next proposal edits.")
    proposer: Literal["offline", "llm"] = Field("offline", description="Offline search or an LLM researcher.")
    proposer_model: dict[str, Any] | None = Field(None, description="ModelConfig of the LLM researcher.")
    smoke_questions: int = Field(2, ge=0, description="Training questions run as a gate before evaluation.")
    failure_samples: int = Field(8, ge=0, description="Failing validation questions shown to the proposer.")
    seed: int = Field(0, description="Seed of the offline search's tie-breaking.")


class WorkspaceConfig(_Strict):
    dataset: DatasetConfig
    splits: str = Field("splits.yml", description="Split file, relative to the workspace.")
    split_seed: int = Field(0, description="Seed used when the split file is created.")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    loop: LoopConfig = Field(default_factory=LoopConfig)


def resolve_path(root: Path, value: str) -> Path:
    if value.startswith(PKG_PREFIX):
        return PKG_DATA / value[len(PKG_PREFIX):]
    p = Path(value).expanduser()
    return p if p.is_absolute() else (root / p)


def load_config(path: Path) -> WorkspaceConfig:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkspaceError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise WorkspaceError(f"{path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    try:
        return WorkspaceConfig.model_validate(raw or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "(top level)"
        raise WorkspaceError(f"{path}: {field}: {err['msg']}") from None


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.config_path = self.root / CONFIG_NAME
        self.config = load_config(self.config_path)

    # --- locations
    @property
    def versions_dir(self) -> Path:
        return self.root / "versions"

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger.jsonl"

    @property
    def traces_dir(self) -> Path:
        return self.root / "traces"

    @property
    def cache_path(self) -> Path:
        """The workspace's persistent LLM response cache (worker and researcher models)."""
        return self.root / ".cache" / "responses.sqlite"

    @property
    def splits_path(self) -> Path:
        return self.root / self.config.splits

    def path(self, value: str) -> Path:
        return resolve_path(self.root, value)

    # --- components (opened lazily: `researcher log` need not load a KG)
    @cached_property
    def versions(self) -> Any:
        from researcher.versions import VersionStore

        return VersionStore(self.versions_dir)

    @cached_property
    def ledger(self) -> Any:
        """The ledger for reading and for occasional appends (deploy). Opening it never rewrites
        the file: only the loop, holding the workspace lock, recovers an interrupted append."""
        from researcher.ledger import Ledger

        return Ledger(self.ledger_path, recover=False)

    @cached_property
    def data(self) -> Any:
        from researcher.data import load_data

        d = self.config.dataset
        return load_data(
            questions=self.path(d.questions),
            kg=[self.path(k) for k in d.kg],
            endpoint=d.endpoint,
            gold=self.path(d.gold) if d.gold else None,
            splits=self.splits_path,
            split_seed=self.config.split_seed,
            store_dir=self.path(d.store_dir) if d.store_dir and d.kg else None,
        )

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One running loop per workspace (an OS lock: released even on kill -9)."""
        handle = open(self.root / ".lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise WorkspaceError(f"{self.root}: another researcher loop holds the workspace lock") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


def find_workspace(start: Path | None = None) -> Workspace:
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / CONFIG_NAME).is_file():
            return Workspace(candidate)
    raise WorkspaceError(
        f"not inside a researcher workspace (no {CONFIG_NAME} in {here} or its parents); run `researcher init DIR` first"
    )


def init_workspace(
    root: Path,
    *,
    questions: str | None = None,
    kg: list[str] | None = None,
    endpoint: str | None = None,
    gold: str | None = None,
    splits: str | None = None,
    seed: int = 0,
) -> Workspace:
    """Create a workspace; without data options it uses the bundled demo dataset."""
    root = root.resolve()
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"{root}: exists and is not a directory")
    if (root / CONFIG_NAME).exists():
        raise WorkspaceError(f"{root}: already a workspace")
    if root.exists() and any(root.iterdir()):
        raise WorkspaceError(f"{root}: directory exists and is not empty")
    if questions is None and (kg or endpoint):
        raise WorkspaceError("--questions is required when --kg or --endpoint is given")
    if questions is not None and not (kg or endpoint):
        raise WorkspaceError("--kg FILE or --endpoint URL is required with --questions")
    demo = questions is None
    dataset = DatasetConfig(
        questions=f"{PKG_PREFIX}demo/questions.yml" if demo else str(Path(questions).resolve()),
        kg=[f"{PKG_PREFIX}demo/kg.ttl"] if demo else [str(Path(k).resolve()) for k in (kg or [])],
        endpoint=endpoint,
        gold=str(Path(gold).resolve()) if gold else None,
    )
    config = WorkspaceConfig(dataset=dataset, split_seed=seed)
    # Build in a sibling folder and rename it into place: a failed init (bad data, unreachable
    # endpoint) leaves nothing behind, so the same command can simply be run again.
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.init-", dir=root.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private; a workspace is an ordinary folder
    try:
        _populate(staging, config, splits, demo)
        _ = Workspace(staging).data  # creates the split file when none was given; checks the data loads
        if root.exists():
            root.rmdir()  # empty (checked above)
        os.rename(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Workspace(root)


def _populate(root: Path, config: WorkspaceConfig, splits: str | None, demo: bool) -> None:
    from researcher.versions import VersionStore
    from worker_agent.spec import AgentSpec, seed_spec_path
    from worker_agent.trace import atomic_write_text

    (root / "traces").mkdir()
    split_source = Path(splits) if splits else (PKG_DATA / "demo" / "splits.yml" if demo else None)
    if split_source is not None:
        if not split_source.is_file():
            raise WorkspaceError(f"{split_source}: split file not found")
        atomic_write_text(root / config.splits, split_source.read_text(encoding="utf-8"))
    VersionStore.init(root / "versions", AgentSpec.load(seed_spec_path()).files())
    atomic_write_text(root / ".gitignore", ".lock\n.store/\n.cache/\ntraces/\n")
    atomic_write_text(
        root / CONFIG_NAME,
        "# researcher workspace configuration (fields documented in researcher/workspace.py)\n"
        + yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True),
    )
