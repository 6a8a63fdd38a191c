"""The git-backed version store: every candidate agent spec is a tagged commit v1, v2, ...

A store is a plain git repository (a workspace's ``versions/`` folder) that only this module
writes. Each version is one commit whose tree is exactly the spec files and whose git parent is
the parent version's commit, so ``git log --graph --all`` shows the lineage, branching where two
candidates share a parent. The commit message carries the metadata in a parseable trailer block::

    v2: enable the COUNT rule

    <rationale, free text>

    Version: v2
    Parent: v1
    Feature: rule:count-distinct

Crash safety: a version is built with object plumbing only (blobs, a tree in a temporary index,
a commit) and becomes visible when its tag is written. A write-ahead ref
(``refs/sparql-researcher/pending``) is set before the tag and removed after it, so an interrupted
``create`` is reported by :meth:`VersionStore.check` and finished or discarded by
:meth:`VersionStore.repair`. The work tree is a courtesy copy of the newest version for people
browsing the folder; ``create`` refuses to run while it is dirty.

Marks ("best", "deployed") are lightweight refs under ``refs/sparql-researcher/``.
"""

from __future__ import annotations

import io
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Self, get_args

import git
from git.index.typ import BaseIndexEntry
from git.objects import Commit
from gitdb import IStream
from gitdb.util import hex_to_bin

__all__ = [
    "MARKS",
    "Mark",
    "PatchError",
    "Version",
    "VersionStore",
    "VersionStoreError",
]

Mark = Literal["best", "deployed"]
MARKS: tuple[str, ...] = get_args(Mark)

_REF_PREFIX = "refs/sparql-researcher/"
_PENDING_REF = _REF_PREFIX + "pending"
_FORMAT_KEY = ("sparql-researcher", "format")
_FORMAT = "1"
_IDENTITY = ("sparql-researcher", "sparql-researcher@localhost")
_VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")
_TRAILER_KEYS = ("Version", "Parent", "Feature")
_FILE_MODE = 0o100644


class VersionStoreError(Exception):
    """A version store operation failed; the message is one line naming the store or version."""


class PatchError(VersionStoreError):
    """A unified diff does not apply cleanly to a version, or touches paths outside the spec."""


@dataclass(frozen=True)
class Version:
    """One stored spec version, as read back from its tagged commit."""

    name: str
    commit: str
    parent: str | None
    summary: str
    rationale: str
    feature: str
    created_at: datetime

    @property
    def number(self) -> int:
        return _version_number(self.name)


# ----------------------------------------------------------------------------------------------
# helpers: names, paths, commit messages


def _version_number(name: str) -> int:
    match = _VERSION_RE.match(name)
    if match is None:
        raise VersionStoreError(f"invalid version name {name!r}: expected v1, v2, ...")
    return int(match.group(1))


def _path_problem(path: object) -> str | None:
    """Why ``path`` may not be a spec file path (relative POSIX, inside the spec), or None."""
    if not isinstance(path, str) or not path:
        return "empty or non-string path"
    if "\\" in path or "\0" in path or "\n" in path:
        return "backslash, NUL or newline in path"
    if path.startswith("/"):
        return "absolute path"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "path with empty, '.' or '..' component"
    if any(part.lower() == ".git" for part in parts):
        return "path inside .git"
    return None


def _validated_files(files: Mapping[str, str], *, what: str) -> dict[str, str]:
    if not files:
        raise VersionStoreError(f"{what}: a version needs at least one file")
    out: dict[str, str] = {}
    for path, content in files.items():
        problem = _path_problem(path)
        if problem is not None:
            raise VersionStoreError(f"{what}: file {path!r} rejected: {problem}")
        if not isinstance(content, str):
            raise VersionStoreError(f"{what}: file {path!r} content must be text (str)")
        out[path] = content
    # A file and a directory of the same name cannot coexist in one git tree.
    dirs = {"/".join(p.split("/")[:i]) for p in out for i in range(1, p.count("/") + 1)}
    clash = sorted(dirs & out.keys())
    if clash:
        raise VersionStoreError(f"{what}: {clash[0]!r} is both a file and a directory")
    return out


def _one_line(value: str, *, field: str, allow_empty: bool = False) -> str:
    line = " ".join(str(value).split())
    if not line and not allow_empty:
        raise VersionStoreError(f"version {field} must not be empty")
    return line


def _format_message(name: str, parent: str | None, summary: str, rationale: str, feature: str) -> str:
    body = rationale.replace("\r\n", "\n").strip()
    trailers = f"Version: {name}\nParent: {parent or 'none'}\nFeature: {feature or 'none'}"
    parts = [f"{name}: {summary}"] + ([body] if body else []) + [trailers]
    return "\n\n".join(parts) + "\n"


def _parse_message(message: str) -> dict[str, str] | None:
    """Split a version commit message into subject, rationale and trailers (None if foreign)."""
    text = message.strip("\n")
    head, sep, trailer_block = text.rpartition("\n\n")
    if not sep:
        return None
    trailers: dict[str, str] = {}
    for line in trailer_block.splitlines():
        key, colon, value = line.partition(": ")
        if not colon or key not in _TRAILER_KEYS:
            return None
        trailers[key] = value.strip()
    if set(trailers) != set(_TRAILER_KEYS):
        return None
    subject, _, rationale = head.partition("\n\n")
    name = trailers["Version"]
    prefix = f"{name}: "
    summary = subject.removeprefix(prefix)
    return {
        "name": name,
        "parent": trailers["Parent"],
        "feature": trailers["Feature"],
        "summary": summary,
        "rationale": rationale.strip(),
    }


def _message(commit: Commit) -> str:
    message = commit.message
    return message if isinstance(message, str) else message.decode("utf-8", "replace")


def _first_error_line(exc: git.GitCommandError) -> str:
    stderr = exc.stderr if isinstance(exc.stderr, str) else str(exc.stderr or "")
    lines = [ln.strip().strip("'").strip() for ln in stderr.replace("stderr:", "").splitlines()]
    lines = [ln for ln in lines if ln]
    for line in lines:
        if line.startswith(("error:", "fatal:")):
            return line.split(":", 1)[1].strip()
    return lines[0] if lines else f"git exited with status {exc.status}"


# ----------------------------------------------------------------------------------------------
# patch header inspection (paths are checked before git ever sees the patch)

_HEADER_PREFIXES = ("rename from ", "rename to ", "copy from ", "copy to ")


def _header_path(raw: str) -> str:
    path = raw.split("\t", 1)[0].rstrip("\r")
    if len(path) >= 2 and path.startswith('"') and path.endswith('"'):
        path = path[1:-1]
    return path


def _patch_file_paths(patch: str) -> tuple[list[str], list[str]]:
    """Return (---/+++ header paths, rename/copy header paths) of a unified diff."""
    lines = patch.splitlines()
    diff_paths: list[str] = []
    other_paths: list[str] = []
    for i, line in enumerate(lines):
        # A removed line "-- x" also starts with "--- "; a real header is followed by "+++ ".
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            diff_paths.append(_header_path(line[4:]))
            diff_paths.append(_header_path(lines[i + 1][4:]))
        elif line.startswith(_HEADER_PREFIXES):
            other_paths.append(_header_path(line.split(" ", 2)[2]))
        elif line.startswith("diff --git "):
            # Only used for path checks: names with spaces are not expected in a spec.
            for token in line[len("diff --git ") :].split():
                other_paths.append(token[2:] if token.startswith(("a/", "b/")) else token)
    return diff_paths, other_paths


def _strip_level(diff_paths: list[str]) -> int:
    real = [p for p in diff_paths if p != "/dev/null"]
    prefixed = all(p.startswith(("a/", "b/")) for p in real)
    return 1 if real and prefixed else 0


def _check_patch_paths(name: str, patch: str) -> int:
    """Reject patches that leave the spec; return the -p strip level for git apply."""
    diff_paths, other_paths = _patch_file_paths(patch)
    if not diff_paths and not other_paths:
        raise PatchError(f"patch for {name} is not a unified diff: no '---'/'+++' file headers")
    level = _strip_level(diff_paths)
    for raw in diff_paths:
        if raw == "/dev/null":
            continue
        path = raw.split("/", 1)[1] if level == 1 else raw
        problem = _path_problem(path)
        if problem is not None:
            raise PatchError(f"patch for {name} touches {raw!r} outside the spec: {problem}")
    for raw in other_paths:
        problem = _path_problem(raw)
        if problem is not None:
            raise PatchError(f"patch for {name} touches {raw!r} outside the spec: {problem}")
    return level


# ----------------------------------------------------------------------------------------------


class VersionStore:
    """A narrow wrapper around one git repository holding the spec versions."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not (self.root / ".git").exists():
            raise VersionStoreError(f"{self.root}: not a version store (no git repository here)")
        try:
            self._repo = git.Repo(self.root, search_parent_directories=False)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise VersionStoreError(f"{self.root}: not a version store ({exc})") from exc
        with self._repo.config_reader() as reader:
            fmt = reader.get_value(*_FORMAT_KEY, default="")
        if str(fmt) != _FORMAT:
            raise VersionStoreError(
                f"{self.root}: git repository is not a version store (missing config "
                f"{_FORMAT_KEY[0]}.{_FORMAT_KEY[1]} = {_FORMAT})"
            )

    # -- creation ------------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        root: str | Path,
        seed_files: Mapping[str, str],
        *,
        summary: str = "seed spec",
        rationale: str = "The seed spec the improvement loop starts from.",
    ) -> VersionStore:
        """Create a new store at ``root`` (missing or empty directory) with v1 = ``seed_files``."""
        root = Path(root)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise VersionStoreError(f"{root}: cannot create a version store: path exists and is not empty")
        files = _validated_files(seed_files, what=f"{root} v1")
        root.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(root)
        with repo.config_writer() as writer:
            # Local identity and settings, so the store works without any global git config.
            writer.set_value("user", "name", _IDENTITY[0])
            writer.set_value("user", "email", _IDENTITY[1])
            writer.set_value("core", "autocrlf", "false")
            writer.set_value("commit", "gpgsign", "false")
            writer.set_value("tag", "gpgsign", "false")
            writer.set_value(*_FORMAT_KEY, _FORMAT)
        repo.close()
        store = cls(root)
        store._commit_version("v1", files, parent=None, summary=summary, rationale=rationale, feature="seed")
        return store

    def create(
        self,
        files: Mapping[str, str],
        *,
        parent: str,
        summary: str,
        rationale: str,
        feature: str,
    ) -> Version:
        """Store ``files`` (the complete spec) as the next version, child of ``parent``."""
        problems = self.check()
        if problems:
            raise VersionStoreError(f"{self.root}: refusing to create a version: {problems[0]}")
        self.get(parent)
        name = f"v{self._max_number() + 1}"
        checked = _validated_files(files, what=f"{self.root} {name}")
        return self._commit_version(name, checked, parent=parent, summary=summary, rationale=rationale, feature=feature)

    def _commit_version(
        self,
        name: str,
        files: dict[str, str],
        *,
        parent: str | None,
        summary: str,
        rationale: str,
        feature: str,
    ) -> Version:
        message = _format_message(
            name,
            parent,
            _one_line(summary, field="summary"),
            rationale,
            _one_line(feature, field="feature", allow_empty=True),
        )
        parents = [self._tag_commit(parent)] if parent is not None else []
        tree = self._write_tree(files)
        commit = Commit.create_from_tree(self._repo, tree, message, parent_commits=parents, head=False)
        # Write-ahead marker: if we die before the tag exists, check()/repair() find the commit.
        self._git("update-ref", _PENDING_REF, commit.hexsha)
        self._git("tag", name, commit.hexsha)
        self._git("update-ref", "-d", _PENDING_REF)
        self._git("checkout", "-q", "--detach", self._tag_ref(name))
        return self.get(name)

    def _write_tree(self, files: dict[str, str]) -> str:
        """Write blobs and a tree object for ``files`` without touching the work tree."""
        with tempfile.TemporaryDirectory(dir=self._repo.git_dir, prefix="tmp-index-") as tmp:
            index = git.IndexFile(self._repo, str(Path(tmp) / "index"))
            entries = []
            for path, content in sorted(files.items()):
                data = content.encode("utf-8")
                stream = self._repo.odb.store(IStream("blob", len(data), io.BytesIO(data)))
                entries.append(BaseIndexEntry((_FILE_MODE, stream.binsha, 0, path)))
            index.add(entries, write=False)
            return index.write_tree().hexsha

    # -- reading -------------------------------------------------------------------------------

    def versions(self) -> list[Version]:
        """All versions, ordered by number."""
        names = sorted((t.name for t in self._repo.tags if _VERSION_RE.match(t.name)), key=_version_number)
        return [self.get(n) for n in names]

    def get(self, name: str) -> Version:
        commit = self._tag_commit(name)
        meta = _parse_message(_message(commit))
        if meta is None or meta["name"] != name:
            raise VersionStoreError(f"{self.root}: tag {name} points to a commit that is not version {name}")
        return Version(
            name=name,
            commit=commit.hexsha,
            parent=None if meta["parent"] == "none" else meta["parent"],
            summary=meta["summary"],
            rationale=meta["rationale"],
            feature="" if meta["feature"] == "none" else meta["feature"],
            created_at=commit.committed_datetime.astimezone(UTC),
        )

    def files(self, name: str) -> dict[str, str]:
        """The spec files of version ``name``, read from the git tree (no checkout)."""
        return self._tree_files(self._tag_commit(name).tree, what=name)

    def checkout_files(self, name: str) -> dict[str, str]:
        """Alias of :meth:`files` (the name used in docs/ARCHITECTURE.md)."""
        return self.files(name)

    def lineage(self) -> list[tuple[str, str | None]]:
        """(version, parent) pairs, ordered by version number."""
        return [(v.name, v.parent) for v in self.versions()]

    def diff(self, a: str, b: str) -> str:
        """Unified diff from version ``a`` to version ``b`` (a/ b/ prefixes, no renames)."""
        ref_a, ref_b = self._tag_ref(a), self._tag_ref(b)
        out = self._git(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            ref_a,
            ref_b,
            "--",
        )
        return out + "\n" if out else ""

    def diff_stats(self, a: str, b: str) -> dict[str, int]:
        """{"files", "insertions", "deletions"} between two versions."""
        out = self._git("diff", "--numstat", "--no-renames", self._tag_ref(a), self._tag_ref(b), "--")
        stats = {"files": 0, "insertions": 0, "deletions": 0}
        for line in out.splitlines():
            added, deleted, _ = line.split("\t", 2)
            stats["files"] += 1
            stats["insertions"] += int(added) if added.isdigit() else 0
            stats["deletions"] += int(deleted) if deleted.isdigit() else 0
        return stats

    def find(self, files: Mapping[str, str]) -> list[str]:
        """Names of versions whose files are exactly ``files`` (detects duplicate proposals)."""
        tree = self._write_tree(_validated_files(files, what=f"{self.root} candidate"))
        return [v.name for v in self.versions() if self._tag_commit(v.name).tree.hexsha == tree]

    # -- patches -------------------------------------------------------------------------------

    def apply_patch(self, name: str, patch: str) -> dict[str, str]:
        """Apply a unified diff to version ``name``'s files in memory and return the result.

        Nothing is written to the work tree, the index or any ref; git applies the patch to a
        throwaway index. Raises PatchError (one line) if it does not apply cleanly or leaves the
        spec.
        """
        self._tag_commit(name)
        if not patch.strip():
            raise PatchError(f"patch for {name} is empty")
        level = _check_patch_paths(name, patch)
        with tempfile.TemporaryDirectory(dir=self._repo.git_dir, prefix="tmp-apply-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            patch_file = Path(tmp) / "patch.diff"
            patch_file.write_text(patch if patch.endswith("\n") else patch + "\n", encoding="utf-8")
            self._git("read-tree", self._tag_ref(name), env=env)
            try:
                # --recount: LLM-written hunks often have wrong line counts; context must still match.
                self._git(
                    "apply",
                    "--cached",
                    f"-p{level}",
                    "--recount",
                    "--whitespace=nowarn",
                    str(patch_file),
                    env=env,
                )
            except git.GitCommandError as exc:
                raise PatchError(f"patch does not apply to {name}: {_first_error_line(exc)}") from exc
            tree = self._git("write-tree", env=env)
        root_tree = git.Tree(self._repo, hex_to_bin(tree.strip()), mode=git.Tree.tree_id << 12, path="")
        files = self._tree_files(root_tree, what=f"{name}+patch")
        for path in files:
            problem = _path_problem(path)
            if problem is not None:
                raise PatchError(f"patch for {name} produces {path!r}: {problem}")
        if not files:
            raise PatchError(f"patch for {name} deletes every file of the spec")
        return files

    # -- marks ---------------------------------------------------------------------------------

    def mark(self, name: str, ref: Mark) -> None:
        """Point mark ``ref`` ("best" or "deployed") at version ``name``."""
        commit = self._tag_commit(name)
        self._git("update-ref", self._mark_ref(ref), commit.hexsha)

    def unmark(self, ref: Mark) -> None:
        if self.marked(ref) is not None:
            self._git("update-ref", "-d", self._mark_ref(ref))

    def marked(self, ref: Mark) -> str | None:
        """The version mark ``ref`` points to, or None."""
        sha = self._rev_parse(self._mark_ref(ref))
        if sha is None:
            return None
        meta = _parse_message(_message(self._repo.commit(sha)))
        if meta is None:
            raise VersionStoreError(f"{self.root}: mark {ref} points to {sha[:12]}, which is not a version")
        return meta["name"]

    def _mark_ref(self, ref: str) -> str:
        if ref not in MARKS:
            raise VersionStoreError(f"unknown mark {ref!r}: expected one of {', '.join(MARKS)}")
        return _REF_PREFIX + ref

    # -- health --------------------------------------------------------------------------------

    def is_dirty(self) -> bool:
        """True if the work tree has modified, deleted or untracked files."""
        return bool(self._dirty_paths())

    def check(self) -> list[str]:
        """Problems that make the store unsafe to extend (empty list = healthy)."""
        problems: list[str] = []
        pending = self._rev_parse(_PENDING_REF)
        if pending is not None:
            problems.append(f"interrupted create: commit {pending[:12]} was written but maybe not tagged; run repair()")
        dirty = self._dirty_paths()
        if dirty:
            shown = ", ".join(dirty[:3]) + (", ..." if len(dirty) > 3 else "")
            problems.append(f"work tree is dirty ({shown}); commit or remove the changes by hand (git -C {self.root} status); the loop never discards them")
        if not any(_VERSION_RE.match(t.name) for t in self._repo.tags):
            problems.append("store has no versions (init was interrupted); delete it and init again")
        return problems

    def repair(self, *, discard_worktree_changes: bool = False) -> list[str]:
        """Finish or discard an interrupted create; optionally reset a dirty work tree.

        Returns one line per action taken or problem left in place.
        """
        actions: list[str] = []
        pending = self._rev_parse(_PENDING_REF)
        if pending is not None:
            actions.append(self._repair_pending(pending))
        if self._dirty_paths():
            if discard_worktree_changes:
                self._git("reset", "-q", "--hard", "HEAD")
                self._git("clean", "-q", "-f", "-d")
                actions.append("reset the work tree to HEAD and removed untracked files")
            else:
                actions.append("work tree is dirty; left alone (pass discard_worktree_changes=True)")
        return actions

    def _repair_pending(self, sha: str) -> str:
        commit = self._repo.commit(sha)
        meta = _parse_message(_message(commit))
        name = meta["name"] if meta and _VERSION_RE.match(meta["name"]) else None
        existing = self._rev_parse(f"refs/tags/{name}") if name else None
        parent_ok = meta is not None and (
            meta["parent"] == "none" or self._rev_parse(f"refs/tags/{meta['parent']}") is not None
        )
        if name and existing == sha:
            action = f"{name} was already tagged; cleared the pending marker"
        elif name and existing is None and parent_ok and _version_number(name) == self._max_number() + 1:
            self._git("tag", name, sha)
            action = f"tagged interrupted commit {sha[:12]} as {name}"
        else:
            action = f"discarded interrupted commit {sha[:12]} (its version name is taken or invalid)"
        self._git("update-ref", "-d", _PENDING_REF)
        if not self._dirty_paths() and name and self._rev_parse(f"refs/tags/{name}") == sha:
            self._git("checkout", "-q", "--detach", self._tag_ref(name))
        return action

    # -- internals -----------------------------------------------------------------------------

    def _git(self, *args: str, env: dict[str, str] | None = None) -> str:
        return self._repo.git.execute(["git", *args], env=env)  # type: ignore[call-overload]

    def _rev_parse(self, ref: str) -> str | None:
        try:
            return self._git("rev-parse", "--verify", "-q", ref + "^{commit}").strip() or None
        except git.GitCommandError:
            return None

    def _tag_ref(self, name: str) -> str:
        """The full ref of an existing version's tag (full refs: never ambiguous with a path)."""
        self._tag_commit(name)
        return f"refs/tags/{name}"

    def _tag_commit(self, name: str) -> Commit:
        _version_number(name)
        sha = self._rev_parse(f"refs/tags/{name}")
        if sha is None:
            raise VersionStoreError(f"{self.root}: unknown version {name}")
        return self._repo.commit(sha)

    def _max_number(self) -> int:
        numbers = [_version_number(t.name) for t in self._repo.tags if _VERSION_RE.match(t.name)]
        return max(numbers, default=0)

    def _dirty_paths(self) -> list[str]:
        out = self._git("status", "--porcelain", "--untracked-files=all")
        return [line[3:] for line in out.splitlines() if line.strip()]

    def _tree_files(self, tree: git.Tree, *, what: str) -> dict[str, str]:
        files: dict[str, str] = {}
        for item in tree.traverse():
            if not isinstance(item, git.Blob):
                continue
            try:
                files[str(item.path)] = item.data_stream.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise VersionStoreError(f"{self.root}: {what}: file {item.path} is not UTF-8 text") from exc
        return files

    def close(self) -> None:
        """Stop gitpython's helper processes (also happens at garbage collection)."""
        self._repo.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VersionStore({str(self.root)!r})"
