"""VersionStore against a real git repository in tmp_path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from researcher.versions import PatchError, Version, VersionStore, VersionStoreError

SEED = {
    "agent.yaml": "strategy: offline\nfew_shot: 2\n",
    "rules.yaml": "- id: count\n  text: use COUNT\n  enabled: false\n",
    "prompts/system.j2": "You write SPARQL.\nBe brief.\n",
}


@pytest.fixture
def store(tmp_path: Path) -> VersionStore:
    return VersionStore.init(tmp_path / "versions", SEED)


def git_out(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def test_init_creates_v1_with_trailers(store: VersionStore) -> None:
    [v1] = store.versions()
    assert isinstance(v1, Version)
    assert (v1.name, v1.parent, v1.feature, v1.summary) == ("v1", None, "seed", "seed spec")
    assert v1.created_at.tzinfo is not None
    message = git_out(store.root, "log", "-1", "--format=%B", "v1")
    assert "Version: v1\nParent: none\nFeature: seed" in message
    assert store.files("v1") == SEED
    # The work tree is a browsable copy of the newest version and is clean.
    assert (store.root / "prompts" / "system.j2").read_text() == SEED["prompts/system.j2"]
    assert not store.is_dirty() and store.check() == []
    # Identity is local to the store.
    assert git_out(store.root, "config", "--local", "user.name").strip() == "sparql-researcher"


def test_init_refuses_non_empty_dir_and_open_errors(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("hi")
    with pytest.raises(VersionStoreError, match="not empty"):
        VersionStore.init(tmp_path / "x", SEED)
    with pytest.raises(VersionStoreError, match="not a version store"):
        VersionStore(tmp_path / "missing")
    git.Repo.init(tmp_path / "plain").close()
    with pytest.raises(VersionStoreError, match="not a version store"):
        VersionStore(tmp_path / "plain")


def test_reopen_existing_store(store: VersionStore) -> None:
    with VersionStore(store.root) as again:
        assert [v.name for v in again.versions()] == ["v1"]
    assert not list((store.root / ".git").glob("tmp-*"))  # temporary indexes are cleaned up


def test_create_lineage_with_branching(store: VersionStore) -> None:
    rules_on = SEED["rules.yaml"].replace("false", "true")
    v2 = store.create(
        {**SEED, "rules.yaml": rules_on},
        parent="v1",
        summary="enable count",
        rationale="COUNT questions fail.\n\nSecond paragraph.",
        feature="rule:count",
    )
    v3 = store.create(
        {**SEED, "agent.yaml": "strategy: offline\nfew_shot: 4\n"},
        parent="v1",
        summary="more shots",
        rationale="",
        feature="few_shot",
    )
    v4 = store.create(
        {**SEED, "rules.yaml": rules_on, "prompts/extra.j2": "x\n"},
        parent="v2",
        summary="add prompt\nwith newline",
        rationale="r",
        feature="prompt:extra",
    )
    assert [v.name for v in store.versions()] == ["v1", "v2", "v3", "v4"]
    assert store.lineage() == [("v1", None), ("v2", "v1"), ("v3", "v1"), ("v4", "v2")]
    assert v2.rationale == "COUNT questions fail.\n\nSecond paragraph."
    assert v3.rationale == ""
    assert v4.summary == "add prompt with newline"  # summaries are one line
    # git history mirrors lineage: v2 and v3 share v1 as their git parent.
    v1 = store.get("v1")
    parents = {name: git_out(store.root, "rev-parse", f"{name}^").strip() for name in ("v2", "v3")}
    assert parents == {"v2": v1.commit, "v3": v1.commit}
    assert git_out(store.root, "rev-parse", "v4^").strip() == v2.commit
    # Trees are exactly the given files, read back without checkout.
    assert store.files("v3") == {**SEED, "agent.yaml": "strategy: offline\nfew_shot: 4\n"}
    assert "prompts/extra.j2" in store.files("v4") and "prompts/extra.j2" not in store.files("v3")
    # The work tree follows the newest version.
    assert (store.root / "prompts" / "extra.j2").exists()
    assert not store.is_dirty()


def test_create_validation(store: VersionStore) -> None:
    with pytest.raises(VersionStoreError, match="unknown version v9"):
        store.create(SEED, parent="v9", summary="s", rationale="", feature="f")
    with pytest.raises(VersionStoreError, match="invalid version name"):
        store.get("latest")
    for bad in ("../x", "/etc/passwd", ".git/config", "a//b"):
        with pytest.raises(VersionStoreError, match="rejected"):
            store.create({**SEED, bad: "x"}, parent="v1", summary="s", rationale="", feature="f")
    with pytest.raises(VersionStoreError, match="summary must not be empty"):
        store.create(SEED, parent="v1", summary="  ", rationale="", feature="f")
    assert [v.name for v in store.versions()] == ["v1"]


def test_diff_and_stats(store: VersionStore) -> None:
    store.create(
        {**SEED, "agent.yaml": "strategy: offline\nfew_shot: 4\n", "prompts/new.j2": "a\nb\n"},
        parent="v1",
        summary="s",
        rationale="",
        feature="f",
    )
    diff = store.diff("v1", "v2")
    assert "--- a/agent.yaml\n+++ b/agent.yaml" in diff
    assert "-few_shot: 2\n+few_shot: 4\n" in diff
    assert "+++ b/prompts/new.j2" in diff and diff.endswith("\n")
    assert store.diff_stats("v1", "v2") == {"files": 2, "insertions": 3, "deletions": 1}
    assert store.diff("v2", "v2") == ""


def test_apply_patch_round_trip_and_in_memory(store: VersionStore) -> None:
    target = {**SEED, "agent.yaml": "strategy: offline\nfew_shot: 4\n"}
    store.create(target, parent="v1", summary="s", rationale="", feature="f")
    patch = store.diff("v1", "v2")
    head_before = git_out(store.root, "rev-parse", "HEAD")
    assert store.apply_patch("v1", patch) == target
    # Dry run: nothing in the store changed.
    assert git_out(store.root, "rev-parse", "HEAD") == head_before
    assert [v.name for v in store.versions()] == ["v1", "v2"] and not store.is_dirty()


def test_apply_patch_hand_written_forms(store: VersionStore) -> None:
    no_prefix = "--- agent.yaml\n+++ agent.yaml\n@@ -2 +2 @@\n-few_shot: 2\n+few_shot: 3\n"
    assert store.apply_patch("v1", no_prefix)["agent.yaml"] == "strategy: offline\nfew_shot: 3\n"
    new_file = "--- /dev/null\n+++ b/prompts/fix.j2\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    assert store.apply_patch("v1", new_file)["prompts/fix.j2"] == "one\ntwo\n"
    # Wrong hunk line counts (common in LLM output) are tolerated; context must still match.
    wrong_counts = "--- a/rules.yaml\n+++ b/rules.yaml\n@@ -1,9 +1,9 @@\n - id: count\n   text: use COUNT\n-  enabled: false\n+  enabled: true\n"
    assert "enabled: true" in store.apply_patch("v1", wrong_counts)["rules.yaml"]
    delete = "--- a/prompts/system.j2\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-You write SPARQL.\n-Be brief.\n"
    assert "prompts/system.j2" not in store.apply_patch("v1", delete)


def test_apply_patch_failures(store: VersionStore) -> None:
    stale = "--- a/agent.yaml\n+++ b/agent.yaml\n@@ -2 +2 @@\n-few_shot: 7\n+few_shot: 3\n"
    with pytest.raises(PatchError, match="does not apply to v1") as info:
        store.apply_patch("v1", stale)
    assert "\n" not in str(info.value)
    with pytest.raises(PatchError, match="empty"):
        store.apply_patch("v1", "  \n")
    with pytest.raises(PatchError, match="not a unified diff"):
        store.apply_patch("v1", "please set few_shot to 3")
    missing = "--- a/nope.yaml\n+++ b/nope.yaml\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(PatchError, match="does not apply"):
        store.apply_patch("v1", missing)


@pytest.mark.parametrize(
    "old,new",
    [
        ("a/../x", "b/../x"),
        ("/etc/passwd", "/etc/passwd"),
        ("a//etc/passwd", "b//etc/passwd"),
        ("/dev/null", "b/.git/hooks/post-checkout"),
        ("../outside.txt", "../outside.txt"),
    ],
)
def test_apply_patch_rejects_paths_outside_spec(store: VersionStore, tmp_path: Path, old: str, new: str) -> None:
    patch = f"--- {old}\n+++ {new}\n@@ -0,0 +1 @@\n+pwned\n"
    with pytest.raises(PatchError, match="outside the spec"):
        store.apply_patch("v1", patch)
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "x").exists()


def test_apply_patch_rejects_escaping_rename(store: VersionStore) -> None:
    patch = (
        "diff --git a/agent.yaml b/../agent.yaml\nsimilarity index 100%\n"
        "rename from agent.yaml\nrename to ../agent.yaml\n"
    )
    with pytest.raises(PatchError, match="outside the spec"):
        store.apply_patch("v1", patch)


def test_dirty_store_refuses_create_and_repair(store: VersionStore) -> None:
    (store.root / "agent.yaml").write_text("edited by hand\n")
    (store.root / "stray.txt").write_text("x")
    assert store.is_dirty()
    assert any("dirty" in p for p in store.check())
    with pytest.raises(VersionStoreError, match="refusing to create a version: work tree is dirty"):
        store.create(SEED, parent="v1", summary="s", rationale="", feature="f")
    assert store.repair() == ["work tree is dirty; left alone (pass discard_worktree_changes=True)"]
    assert store.is_dirty()
    store.repair(discard_worktree_changes=True)
    assert not store.is_dirty() and not (store.root / "stray.txt").exists()
    assert store.create(SEED, parent="v1", summary="s", rationale="", feature="f").name == "v2"


def test_interrupted_create_is_reported_and_repaired(store: VersionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    real_git = store._git

    def crash_on_tag(*args: str, env: dict[str, str] | None = None) -> str:
        if args[0] == "tag":
            raise KeyboardInterrupt  # simulates dying between the commit and its tag
        return real_git(*args, env=env)

    monkeypatch.setattr(store, "_git", crash_on_tag)
    with pytest.raises(KeyboardInterrupt):
        store.create({**SEED, "agent.yaml": "x: 1\n"}, parent="v1", summary="s", rationale="", feature="f")
    monkeypatch.undo()
    assert [v.name for v in store.versions()] == ["v1"]
    assert any("interrupted create" in p for p in store.check())
    with pytest.raises(VersionStoreError, match="interrupted create"):
        store.create(SEED, parent="v1", summary="s", rationale="", feature="f")
    [action] = store.repair()
    assert "tagged interrupted commit" in action and "as v2" in action
    assert store.check() == []
    assert store.files("v2")["agent.yaml"] == "x: 1\n" and store.get("v2").parent == "v1"
    assert (store.root / "agent.yaml").read_text() == "x: 1\n"


def test_marks(store: VersionStore) -> None:
    store.create(SEED, parent="v1", summary="same files", rationale="", feature="f")
    assert store.marked("best") is None
    store.mark("v1", "best")
    store.mark("v2", "deployed")
    assert (store.marked("best"), store.marked("deployed")) == ("v1", "v2")
    store.mark("v2", "best")  # marks move
    assert VersionStore(store.root).marked("best") == "v2"
    store.unmark("deployed")
    assert store.marked("deployed") is None
    with pytest.raises(VersionStoreError, match="unknown mark"):
        store.mark("v1", "favourite")  # type: ignore[arg-type]
    with pytest.raises(VersionStoreError, match="unknown version"):
        store.mark("v7", "best")
    # Marks are refs, not version tags: they do not add versions.
    assert [v.name for v in store.versions()] == ["v1", "v2"]
    assert store.find(SEED) == ["v1", "v2"]


def test_versions_ordered_numerically(store: VersionStore) -> None:
    for i in range(10):
        store.create({**SEED, "agent.yaml": f"n: {i}\n"}, parent="v1", summary=f"s{i}", rationale="", feature="f")
    names = [v.name for v in store.versions()]
    assert names == [f"v{i}" for i in range(1, 12)]
    assert store.checkout_files("v11")["agent.yaml"] == "n: 9\n"
