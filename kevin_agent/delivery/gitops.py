"""Commit the tool's own files, and nothing else, into the person's repository.

The commit is built on a temporary index (a copy of HEAD's tree plus the named paths), so
whatever the person has staged or left unstaged is never swept up and their index is never
rewritten wholesale; afterwards only the committed paths are refreshed in their index so
``git status`` shows them clean. Hooks run as ``git commit`` would run them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

# GitPython refuses to import without a git executable; without one there is simply no
# repository to commit to, which find_repo reports as None.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
import git  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from ..errors import GitError  # noqa: E402

HOOK_TIMEOUT_S = 600.0
IN_PROGRESS = (
    ("MERGE_HEAD", "a merge", "finish it with `git commit` or abort it with `git merge --abort`"),
    ("rebase-merge", "a rebase", "finish it with `git rebase --continue` or `git rebase --abort`"),
    ("rebase-apply", "a rebase or `git am`", "finish or abort it (`git rebase --abort` / `git am --abort`)"),
    ("CHERRY_PICK_HEAD", "a cherry-pick", "finish it or run `git cherry-pick --abort`"),
    ("REVERT_HEAD", "a revert", "finish it or run `git revert --abort`"),
)
# Pathspecs are file names here, never globs: a kernel file called `a[1].py` is that file.
LITERAL = {"GIT_LITERAL_PATHSPECS": "1"}


class CommitResult(BaseModel):
    sha: str
    branch: str | None
    """The branch the commit is on (the current one, or the new one with ``branch=``)."""
    message: str
    paths: list[str]
    """Committed paths, relative to the repository root."""


def find_repo(path: Path) -> git.Repo | None:
    """The repository holding ``path`` (which need not exist yet), or None."""
    start = Path(path).absolute()
    while not start.exists() and start != start.parent:
        start = start.parent
    if start.is_file():
        start = start.parent
    try:
        return git.Repo(start, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


@contextlib.contextmanager
def opened(path: Path) -> Iterator[git.Repo | None]:
    """``find_repo(path)`` for the ``with`` block, closed after it: GitPython keeps `git cat-file`
    processes running per open repository."""
    repo = find_repo(path)
    try:
        yield repo
    finally:
        if repo is not None:
            repo.close()


def _git_path(repo: git.Repo, name: str) -> Path:
    """``git rev-parse --git-path``: right for linked worktrees and core.hooksPath too."""
    out = Path(repo.git.rev_parse("--git-path", name))
    return out if out.is_absolute() else Path(repo.working_tree_dir or repo.git_dir) / out


def ensure_excluded(repo: git.Repo, pattern: str = ".kevin/") -> None:
    """Add ``pattern`` to ``.git/info/exclude`` once (the run store stays out of ``git status``)."""
    exclude = _git_path(repo, "info/exclude")
    text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    if pattern in (line.strip() for line in text.splitlines()):
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    prefix = "" if not text or text.endswith("\n") else "\n"
    with open(exclude, "a", encoding="utf-8") as fh:
        fh.write(f"{prefix}{pattern}\n")


# --- checks ------------------------------------------------------------------------------
def relpaths(repo: git.Repo, paths: Sequence[Path]) -> tuple[list[str], list[str]]:
    """Paths relative to the work tree (posix), and a problem for each one outside it."""
    root = Path(repo.working_tree_dir).resolve()
    rels, problems = [], []
    for p in paths:
        try:
            rels.append(Path(p).resolve().relative_to(root).as_posix())
        except ValueError:
            problems.append(f"{p} is outside the repository at {root}")
    return rels, problems


TargetState = Literal["new", "clean", "modified", "untracked"]
"""What a path the tool would write holds now: nothing (``new``); what HEAD has, so git can
restore it (``clean``); uncommitted changes, staged or not, deletion included (``modified``);
a file git does not track or ignores, which nothing could restore (``untracked``)."""


def path_states(repo: git.Repo | None, paths: Sequence[Path]) -> dict[Path, TargetState]:
    """The state of each path (inside ``repo``'s work tree, or anywhere when ``repo`` is None),
    from one ``git status``."""
    rel_of: dict[Path, str] = {}
    if repo is not None and not repo.bare:
        root = Path(repo.working_tree_dir).resolve()
        for p in paths:
            if Path(p).resolve().is_relative_to(root):
                rel_of[p] = Path(p).resolve().relative_to(root).as_posix()
    found: dict[str, str] = {}
    if rel_of:
        out = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all", "--ignored=matching",
                              "--", *rel_of.values(), env=LITERAL)
        tokens = iter(out.split("\0"))
        for entry in tokens:
            if len(entry) < 4:
                continue
            found[entry[3:]] = entry[:2]
            if entry[0] in "RC":  # a rename's source follows as its own token, and changed too
                found[next(tokens, "")] = "R "
    states: dict[Path, TargetState] = {}
    for p in paths:
        code = found.get(rel_of[p]) if p in rel_of else "??"
        if code in ("??", "!!"):
            states[p] = "untracked" if Path(p).exists() else "new"
        else:
            states[p] = "modified" if code is not None else "clean" if Path(p).exists() else "new"
    return states


def is_ignored(repo: git.Repo | None, path: Path) -> bool:
    """Whether git ignores ``path`` (a .gitignore or exclude rule): such a file is the person's to
    keep out of history, so the tool never commits it."""
    if repo is None or repo.bare:
        return False
    try:
        # (no GIT_LITERAL_PATHSPECS: check-ignore refuses it; it takes a path, never a glob, anyway)
        repo.git.check_ignore("-q", "--no-index", "--", relpaths(repo, [path])[0][0])
    except (git.GitCommandError, IndexError):
        return False
    return True


def state_problems(repo: git.Repo, *, branch: str | None = None, grow: bool = False) -> list[str]:
    """Why the repository cannot take a commit right now (empty: it can). ``grow``: ``branch`` is
    one this delivery just made, and the commit goes on its tip."""
    if repo.bare:
        return [f"{repo.git_dir} is a bare repository: there is no working tree to deliver into"]
    problems = []
    if repo.head.is_detached and branch is None:
        problems.append("HEAD is detached: check out a branch first, or pass --branch NAME to commit on a new branch")
    for name, what, how in IN_PROGRESS:
        if _git_path(repo, name).exists():
            problems.append(f"{what} is in progress: {how}, then deliver again")
    if _git_path(repo, "index.lock").exists():
        problems.append("another git process is running (index.lock exists): wait for it, or remove a stale lock")
    if branch is not None:
        try:
            repo.git.check_ref_format("--branch", branch)
        except git.GitCommandError:
            problems.append(f"{branch!r} is not a valid branch name")
        else:
            if grow and branch not in repo.heads:
                problems.append(f"branch {branch!r} is gone")
            elif branch in repo.heads and not grow:
                problems.append(f"branch {branch!r} already exists: pick a new name for --branch")
    return problems


def commit_problems(repo: git.Repo, paths: Sequence[Path], *, branch: str | None = None,
                    grow: bool = False) -> list[str]:
    """Why a commit of ``paths`` would be refused by the repository's state (empty: it would
    not). What the paths hold is ``path_states``'s business."""
    problems = state_problems(repo, branch=branch, grow=grow)
    if not repo.bare:
        problems += relpaths(repo, paths)[1]
    return problems


# --- the commit --------------------------------------------------------------------------
def _run_hook(repo: git.Repo, name: str, args: Sequence[str], env: dict[str, str]) -> tuple[bool, str]:
    """Run a hook if it is there and executable; (passed, combined output)."""
    hook = _git_path(repo, f"hooks/{name}")
    if not (hook.is_file() and os.access(hook, os.X_OK)):
        return True, ""
    try:
        proc = subprocess.run(
            [str(hook), *args], cwd=repo.working_tree_dir, env={**os.environ, **env},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", timeout=HOOK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False, f"the {name} hook did not finish within {HOOK_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return False, f"the {name} hook could not be run: {exc}"
    return proc.returncode == 0, proc.stdout.strip()


def _hook_failed(name: str, output: str) -> GitError:
    tail = output[-4000:] if output else "(no output)"
    return GitError(
        f"the {name} hook rejected the commit:\n{tail}",
        "the files are written and nothing was committed; fix what the hook reports and commit them yourself",
    )


def commit_paths(repo: git.Repo, paths: Sequence[Path], message: str, *, branch: str | None = None,
                 grow: bool = False) -> CommitResult:
    """Commit exactly ``paths`` (as they are in the working tree) on HEAD's branch, or on the
    new branch ``branch`` created from HEAD without switching the checkout (with ``grow``, on the
    tip of ``branch``, made by the commit just before)."""
    problems = commit_problems(repo, paths, branch=branch, grow=grow)
    rels = relpaths(repo, paths)[0] if not repo.bare else []
    if problems:
        raise GitError("cannot commit: " + "; ".join(problems), "the files are written; nothing was committed")
    if grow and branch is not None:
        parent = repo.heads[branch].commit.hexsha
    else:
        parent = None if not repo.head.is_valid() else repo.head.commit.hexsha
    target_branch = branch or (None if repo.head.is_detached else repo.active_branch.name)

    git_dir = Path(repo.git_dir)
    fd, tmp_name = tempfile.mkstemp(prefix="kevin-index-", dir=git_dir)
    os.close(fd)
    index_file = Path(tmp_name)
    msg_file = git_dir / f"KEVIN_COMMIT_EDITMSG-{os.getpid()}"
    tmp_env = {"GIT_INDEX_FILE": str(index_file)}
    try:
        index_file.unlink()  # git refuses an empty file as an index; it creates its own
        if parent:
            repo.git.read_tree(parent, env=tmp_env)
        else:
            repo.git.read_tree("--empty", env=tmp_env)
        repo.git.update_index("--add", "--", *rels, env={**tmp_env, **LITERAL})

        hook_env = {**tmp_env, "GIT_EDITOR": ":"}
        ok, output = _run_hook(repo, "pre-commit", [], hook_env)
        if not ok:
            raise _hook_failed("pre-commit", output)
        msg_file.write_text(message.rstrip("\n") + "\n", encoding="utf-8")
        ok, output = _run_hook(repo, "commit-msg", [str(msg_file)], hook_env)
        if not ok:
            raise _hook_failed("commit-msg", output)
        message = msg_file.read_text(encoding="utf-8").rstrip() + "\n"
        if not message.strip():
            raise GitError("the commit-msg hook left an empty message", "nothing was committed")

        tree = repo.git.write_tree(env=tmp_env)
        sha = repo.git.commit_tree(tree, *(["-p", parent] if parent else []), "-F", str(msg_file))
        subject = message.splitlines()[0]
        if branch is not None and grow:
            repo.git.update_ref("-m", f"commit: {subject}", f"refs/heads/{branch}", sha, parent)
        elif branch is not None:
            repo.git.update_ref("-m", "branch: Created from HEAD", f"refs/heads/{branch}", sha, "")
        else:
            # Compare-and-swap: refuse if HEAD moved while the hooks ran.
            repo.git.update_ref("-m", f"commit: {subject}", "HEAD", sha, parent or "")
    except git.GitCommandError as exc:
        detail = (exc.stderr or exc.stdout or str(exc)).strip()
        raise GitError(f"git failed while committing: {detail}", "the files are written; nothing was committed") from None
    finally:
        index_file.unlink(missing_ok=True)
        msg_file.unlink(missing_ok=True)

    if branch is None:
        try:
            # Only these entries of the person's index change, to exactly what was committed.
            repo.git.update_index("--add", "--", *rels, env=LITERAL)
        except git.GitCommandError as exc:
            raise GitError(
                f"committed {sha[:12]}, but the index could not be updated: {(exc.stderr or '').strip()}",
                f"run `git reset -q -- {' '.join(rels)}` to make `git status` agree with the commit",
            ) from None
        _run_hook(repo, "post-commit", [], {"GIT_EDITOR": ":"})
    return CommitResult(sha=sha, branch=target_branch, message=message, paths=rels)
