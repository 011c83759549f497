"""The commit, on real repositories: only the tool's paths, the person's work untouched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kevin_agent.errors import GitError
from kevin_agent.delivery.gitops import commit_paths, commit_problems, ensure_excluded, find_repo, path_states

from ..conftest import git_init

MESSAGE = (
    "kevin-opt: my_relu MyRelu kernel, 1.83x faster on Test CPU\n\n"
    "Kevin-Run: run-1\nKevin-Model: cognition-ai/Kevin-32B\nKevin-Speedup: 1.83x eager, 1.21x torch.compile\n"
)
TOOL_FILES = ["my_relu_kevin.py", "my_relu_kevin_report.md", "my_relu_kevin_report.json", "my_relu_kevin_report.png"]


def git(repo: Path, *args: str, check: bool = True) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    root = git_init(tmp_path / "proj")
    (root / "my_relu.py").write_text("class MyRelu: ...\n")
    (root / "other.py").write_text("a = 1\n")
    (root / "README.md").write_text("# project\n")
    (root / "partly.py").write_text("x = 1\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "initial")
    return root


def person_work(root: Path) -> None:
    """Staged, unstaged, partly staged, staged-new and untracked changes."""
    (root / "other.py").write_text("a = 2\n")
    git(root, "add", "other.py")
    (root / "README.md").write_text("# project\n\nunstaged edit\n")
    (root / "partly.py").write_text("x = 2\n")
    git(root, "add", "partly.py")
    (root / "partly.py").write_text("x = 3\n")
    (root / "new_staged.py").write_text("n = 1\n")
    git(root, "add", "new_staged.py")
    (root / "scratch.txt").write_text("untracked\n")


def snapshot(root: Path) -> dict:
    entries = [ln for ln in git(root, "ls-files", "-s").splitlines() if ln.split("\t")[1] not in TOOL_FILES]
    return {
        "diff": git(root, "diff"),
        "cached": git(root, "diff", "--cached"),
        "index": entries,
        "files": {p: (root / p).read_text() for p in ("other.py", "README.md", "partly.py", "new_staged.py", "scratch.txt")},
    }


def write_tool_files(root: Path) -> list[Path]:
    paths = [root / name for name in TOOL_FILES]
    for p in paths:
        p.write_bytes(b"\x89PNG\r\n\x1a\n" if p.suffix == ".png" else f"content of {p.name}\n".encode())
    return paths


def test_commits_only_the_tools_paths_and_leaves_the_persons_work(repo):
    person_work(repo)
    before = snapshot(repo)
    head_before = git(repo, "rev-parse", "HEAD").strip()
    r = find_repo(repo / "my_relu.py")
    assert commit_problems(r, [repo / n for n in TOOL_FILES]) == []
    result = commit_paths(r, write_tool_files(repo), MESSAGE)

    assert git(repo, "rev-parse", "HEAD").strip() == result.sha
    assert git(repo, "rev-parse", "HEAD^").strip() == head_before
    assert sorted(git(repo, "show", "--name-only", "--format=", "HEAD").split()) == sorted(TOOL_FILES)
    assert result.paths == TOOL_FILES and result.branch == "main"
    assert git(repo, "show", "HEAD:my_relu_kevin.py") == "content of my_relu_kevin.py\n"
    # The person's staged, unstaged and untracked work: exactly as before.
    assert snapshot(repo) == before
    # The committed paths are clean; the index holds what was committed.
    assert git(repo, "status", "--porcelain", "--", *TOOL_FILES) == ""
    status = git(repo, "status", "--porcelain").splitlines()
    assert sorted(status) == sorted(["M  other.py", " M README.md", "MM partly.py", "A  new_staged.py", "?? scratch.txt"])


def test_message_and_trailers(repo):
    r = find_repo(repo)
    commit_paths(r, write_tool_files(repo), MESSAGE)
    body = git(repo, "log", "-1", "--format=%B")
    assert body.splitlines()[0] == "kevin-opt: my_relu MyRelu kernel, 1.83x faster on Test CPU"
    assert body.splitlines()[1] == ""
    trailers = git(repo, "log", "-1", "--format=%(trailers:only,unfold)").strip().splitlines()
    assert trailers == ["Kevin-Run: run-1", "Kevin-Model: cognition-ai/Kevin-32B",
                        "Kevin-Speedup: 1.83x eager, 1.21x torch.compile"]
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Test Person <test@example.com>"
    assert git(repo, "reflog", "-1", "--format=%gs").strip().startswith("commit: kevin-opt: my_relu")


def test_branch_commit_leaves_checkout_and_index_alone(repo):
    person_work(repo)
    head_before = git(repo, "rev-parse", "HEAD").strip()
    index_before = git(repo, "ls-files", "-s")
    before = snapshot(repo)
    r = find_repo(repo)
    result = commit_paths(r, write_tool_files(repo), MESSAGE, branch="kevin/my-relu")

    assert result.branch == "kevin/my-relu"
    assert git(repo, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git(repo, "rev-parse", "HEAD").strip() == head_before
    assert git(repo, "rev-parse", "kevin/my-relu").strip() == result.sha
    assert git(repo, "rev-parse", "kevin/my-relu^").strip() == head_before
    assert sorted(git(repo, "show", "--name-only", "--format=", "kevin/my-relu").split()) == sorted(TOOL_FILES)
    assert git(repo, "ls-files", "-s") == index_before
    assert snapshot(repo) == before
    assert all((repo / n).exists() for n in TOOL_FILES)  # still written in the working tree

    with pytest.raises(GitError, match="branch 'kevin/my-relu' already exists"):
        commit_paths(r, [repo / n for n in TOOL_FILES], MESSAGE, branch="kevin/my-relu")
    assert commit_problems(r, [repo / n for n in TOOL_FILES], branch="bad..name") == [
        "'bad..name' is not a valid branch name"]


def test_path_states(repo):
    r = find_repo(repo)
    commit_paths(r, write_tool_files(repo), MESSAGE)
    kernel, md, js, png = (repo / n for n in TOOL_FILES)
    kernel.write_text("# my own edit\n")
    assert path_states(r, [kernel, md]) == {kernel: "modified", md: "clean"}
    # Staged-only changes, deletions and renames away count as changes too.
    git(repo, "add", "my_relu_kevin.py")
    kernel.write_text(git(repo, "show", "HEAD:my_relu_kevin.py"))
    js.unlink()
    git(repo, "mv", "my_relu_kevin_report.png", "moved.png")
    assert path_states(r, [kernel, js, png]) == {kernel: "modified", js: "modified", png: "modified"}
    # Files git does not track, or ignores, could not be restored; absent ones are new.
    (repo / "scratch_kevin.py").write_text("x\n")
    (repo / ".gitignore").write_text("ignored_kevin.py\n")
    (repo / "ignored_kevin.py").write_text("y\n")
    fresh = repo / "sub" / "new_kevin.py"
    assert path_states(r, [repo / "scratch_kevin.py", repo / "ignored_kevin.py", fresh]) == {
        repo / "scratch_kevin.py": "untracked", repo / "ignored_kevin.py": "untracked", fresh: "new"}
    # Outside a repository, every existing file is one git could not restore.
    assert path_states(None, [kernel, fresh]) == {kernel: "untracked", fresh: "new"}


def test_detached_head(repo):
    git(repo, "checkout", "-q", "--detach")
    r = find_repo(repo)
    paths = write_tool_files(repo)
    assert "HEAD is detached" in commit_problems(r, paths)[0]
    with pytest.raises(GitError, match="HEAD is detached"):
        commit_paths(r, paths, MESSAGE)
    # On a new branch the commit does not need a checked-out branch.
    head = git(repo, "rev-parse", "HEAD").strip()
    result = commit_paths(r, paths, MESSAGE, branch="kevin/detached")
    assert git(repo, "rev-parse", "kevin/detached^").strip() == head
    assert git(repo, "rev-parse", "HEAD").strip() == head and result.branch == "kevin/detached"


def test_merge_in_progress(repo):
    git(repo, "checkout", "-q", "-b", "side")
    (repo / "other.py").write_text("a = 'side'\n")
    git(repo, "commit", "-q", "-am", "side")
    git(repo, "checkout", "-q", "main")
    (repo / "other.py").write_text("a = 'main'\n")
    git(repo, "commit", "-q", "-am", "main")
    assert subprocess.run(["git", "-C", str(repo), "merge", "-q", "side"], capture_output=True).returncode != 0
    head = git(repo, "rev-parse", "HEAD").strip()
    r = find_repo(repo)
    paths = write_tool_files(repo)
    with pytest.raises(GitError, match="a merge is in progress"):
        commit_paths(r, paths, MESSAGE)
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert (Path(r.git_dir) / "MERGE_HEAD").exists()  # the merge is left as it was


def test_rebase_in_progress_is_refused(repo):
    (Path(find_repo(repo).git_dir) / "rebase-merge").mkdir()
    assert "a rebase is in progress" in commit_problems(find_repo(repo), [repo / "my_relu_kevin.py"])[0]


def _hook(repo: Path, name: str, body: str) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.write_text("#!/bin/sh\n" + body)
    hook.chmod(0o755)


def test_failing_pre_commit_hook_commits_nothing_and_loses_nothing(repo):
    person_work(repo)
    before = snapshot(repo)
    index_before = git(repo, "ls-files", "-s")
    head = git(repo, "rev-parse", "HEAD").strip()
    _hook(repo, "pre-commit", 'echo "lint: trailing whitespace in my_relu_kevin.py"\necho "stderr line" >&2\nexit 1\n')
    r = find_repo(repo)
    paths = write_tool_files(repo)
    with pytest.raises(GitError) as err:
        commit_paths(r, paths, MESSAGE)
    assert "pre-commit hook rejected the commit" in err.value.message
    assert "lint: trailing whitespace in my_relu_kevin.py" in err.value.message
    assert "stderr line" in err.value.message
    assert "files are written" in err.value.hint
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "ls-files", "-s") == index_before
    assert snapshot(repo) == before
    assert all(p.exists() for p in paths)
    assert not list(Path(r.git_dir).glob("kevin-index-*"))  # no temporary index left behind


def test_hooks_see_exactly_the_commit_being_made(repo, tmp_path):
    person_work(repo)
    seen = tmp_path / "staged.txt"
    # Like `git commit`, the hook sees the index being committed: the tool's paths, not the person's.
    _hook(repo, "pre-commit", f'git diff --cached --name-only > "{seen}"\n')
    _hook(repo, "commit-msg", 'printf "\\nSigned-off-by: Hook <hook@example.com>\\n" >> "$1"\n')
    result = commit_paths(find_repo(repo), write_tool_files(repo), MESSAGE)
    assert sorted(seen.read_text().split()) == sorted(TOOL_FILES)
    assert "Signed-off-by: Hook <hook@example.com>" in git(repo, "log", "-1", "--format=%B")
    assert result.message.rstrip().endswith("Signed-off-by: Hook <hook@example.com>")


def test_failing_commit_msg_hook(repo):
    _hook(repo, "commit-msg", 'echo "message must reference a ticket"\nexit 1\n')
    head = git(repo, "rev-parse", "HEAD").strip()
    with pytest.raises(GitError, match="commit-msg hook rejected the commit:\nmessage must reference a ticket"):
        commit_paths(find_repo(repo), write_tool_files(repo), MESSAGE)
    assert git(repo, "rev-parse", "HEAD").strip() == head


def test_core_hooks_path_is_honoured(repo):
    hooks = repo / "githooks"
    hooks.mkdir()
    (hooks / "pre-commit").write_text("#!/bin/sh\necho from-hooks-path\nexit 1\n")
    (hooks / "pre-commit").chmod(0o755)
    git(repo, "config", "core.hooksPath", "githooks")
    with pytest.raises(GitError, match="from-hooks-path"):
        commit_paths(find_repo(repo), write_tool_files(repo), MESSAGE)


def test_first_commit_of_an_empty_repository(tmp_path):
    root = git_init(tmp_path / "empty")
    (root / "staged.py").write_text("s = 1\n")
    git(root, "add", "staged.py")
    result = commit_paths(find_repo(root), write_tool_files(root), MESSAGE)
    assert git(root, "rev-list", "--count", "HEAD").strip() == "1"
    assert sorted(git(root, "show", "--name-only", "--format=", result.sha).split()) == sorted(TOOL_FILES)
    assert git(root, "status", "--porcelain", "--", "staged.py").strip() == "A  staged.py"


def test_path_outside_the_repository(repo, tmp_path):
    outside = tmp_path / "elsewhere.py"
    outside.write_text("x\n")
    with pytest.raises(GitError, match="outside the repository"):
        commit_paths(find_repo(repo), [outside], MESSAGE)


def test_not_a_repository_and_ensure_excluded(repo, tmp_path):
    lone = tmp_path / "lone"
    lone.mkdir()
    assert find_repo(lone / "task.py") is None
    assert find_repo(repo / "sub" / "not_yet_written.py").working_tree_dir == str(repo)
    r = find_repo(repo)
    ensure_excluded(r)
    ensure_excluded(r)
    exclude = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert exclude.count(".kevin/") == 1
    (repo / ".kevin" / "runs").mkdir(parents=True)
    (repo / ".kevin" / "runs" / "run.json").write_text("{}")
    assert git(repo, "status", "--porcelain") == ""


def test_special_characters_in_paths(repo):
    weird = repo / "dir with space" / "k[1]*.py"
    weird.parent.mkdir()
    weird.write_text("k = 1\n")
    (repo / "dir with space" / "k1x.py").write_text("not mine\n")  # a glob would match this
    result = commit_paths(find_repo(repo), [weird], MESSAGE)
    assert git(repo, "show", "--name-only", "--format=", result.sha, "-z").strip("\0").split("\0") == [
        "dir with space/k[1]*.py"
    ]
    assert "?? " in git(repo, "status", "--porcelain")  # k1x.py still untracked

