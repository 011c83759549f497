"""Where a change to the person's model file goes, so that the original is never lost.

A model file that git holds as HEAD has it (``clean``) is changed in place: git restores it, and
the commit's diff is the change. One in a repository that git does not track is committed first,
as it is, in a commit of its own, and the change goes on top: ``git diff HEAD~1`` shows it and
``git revert HEAD`` undoes it. Where no such commit can be made (outside a repository,
``--no-commit``, a file git ignores, a repository that cannot take a commit now) the person's file
is never rewritten: the model with the change is written beside it as ``<stem>_kevin_model.py``,
which imports the kernel modules beside it just as the original would.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from ..errors import GitError
from . import gitops

if TYPE_CHECKING:
    import git

Keeping = Literal["in place", "commit first", "beside"]
"""``in place``: git restores the original; ``commit first``: the original gets a commit of its own
before the change; ``beside``: the original is left untouched and the change written beside it."""


class ModelTarget(BaseModel):
    """Where the model with the kernels is written, and how the original stays."""

    original: Path
    path: Path
    keeping: Keeping
    why: str = ""
    """Why the original is left untouched (``beside``), in words."""

    def words(self, commit: str | None = None, branch: str | None = None) -> str:
        """How the original was kept, for stderr, the record and the TUI (empty: in place, as git
        restores it)."""
        name = self.original.name
        if self.keeping == "commit first":
            ref = branch or "HEAD"
            return (f"{name} was not in git: committed first as it was" + (f" ({commit[:12]})" if commit else "")
                    + f", then the kernels on top: `git diff {ref}~1 {ref} -- {name}` shows the change, "
                    f"`git revert {ref}` undoes it")
        if self.keeping == "beside":
            return (f"{name} left untouched ({self.why}); the model with the kernels is {self.path.name} beside it "
                    f"(`diff {name} {self.path.name}` shows the change)")
        return ""


SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the ``kevin_agent`` package: a checkout of kevin-opt where it is installed
from one (``pip install -e .``), else site-packages."""


def own_checkout(repo: git.Repo | None) -> bool:
    """Whether ``repo`` is the checkout kevin-opt itself runs from: its examples are there to be
    copied, and an optimize never commits into the tool's own history."""
    if repo is None or repo.bare:
        return False
    return Path(repo.working_tree_dir).resolve() == SOURCE_ROOT


def beside_path(model_path: Path) -> Path:
    return model_path.with_name(f"{model_path.stem}_kevin_model.py")


def model_target(model_path: Path, repo: git.Repo | None, *, commit: bool, branch: str | None = None) -> ModelTarget:
    """Where the change to ``model_path`` goes when the delivery commits (``commit``) or only writes."""
    state = gitops.path_states(repo, [model_path])[model_path]
    if repo is None or repo.bare:
        return ModelTarget(original=model_path, path=beside_path(model_path), keeping="beside",
                           why="it is in no git repository, so nothing could restore it")
    if state != "untracked":  # clean (git restores it) or modified (refused before anything is written)
        return ModelTarget(original=model_path, path=model_path, keeping="in place")
    if gitops.is_ignored(repo, model_path):
        why = "git ignores it, so it is not committed and nothing could restore it"
    elif not commit:
        why = "git does not track it and nothing is committed, so nothing could restore it"
    elif problems := gitops.commit_problems(repo, [model_path], branch=branch):
        why = "git does not track it and it cannot be committed now: " + "; ".join(problems)
    else:
        return ModelTarget(original=model_path, path=model_path, keeping="commit first")
    return ModelTarget(original=model_path, path=beside_path(model_path), keeping="beside", why=why)


def commit_original(repo: git.Repo, target: ModelTarget, message: str, *,
                    branch: str | None = None) -> tuple[ModelTarget, str | None]:
    """For ``commit first``: the original committed as it is, before anything is written. A commit
    that fails (a hook rejects it) turns the target into ``beside``: the original stays untouched.
    Returns the target and the commit's sha."""
    if target.keeping != "commit first":
        return target, None
    try:
        done = gitops.commit_paths(repo, [target.original], message, branch=branch)
    except GitError as exc:
        why = exc.message.splitlines()[0]
        return ModelTarget(original=target.original, path=beside_path(target.original), keeping="beside",
                           why=f"git does not track it and committing it failed: {why}"), None
    return target, done.sha


def original_message(model_name: str, what: str) -> str:
    """The message of the original's own commit."""
    return (f"kevin-opt: {model_name} as it was, before {what}\n\n"
            f"{model_name} was not in git. It is committed unchanged so that the next commit's diff is the change "
            "kevin-opt made and reverting that commit restores this file.\n")
