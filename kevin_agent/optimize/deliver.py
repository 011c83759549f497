"""An optimize's end: the whole model with every verified kernel (``delivery.e2e``: fresh workers,
each kernel's effect found by leaving it out), the ones that break the outputs or slow the model
dropped with the reason, and the rest delivered once: the kernel modules beside the model, the
change to the model file that installs them (``delivery.install``: ``get_model()`` wrapped, or a
KernelBench file's block), and the model report, in one commit of exactly those files.

The consent rules are a run's: a target with uncommitted changes is never written (refused
before the profile, and again before the writing), one git could not restore is overwritten
only with ``--replace``, and ``--no-commit`` writes the files only. The model file itself is never
lost (``delivery.original``): untracked in a repository, it is committed first as it was; where
no commit can hold it, it stays untouched and the model with the kernels is written beside it.
The kept kernels are kept or dropped on the whole model's one speedup, by its 95% interval.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..delivery import gitops
from ..delivery.e2e import DEFAULT_ROUNDS, measure
from ..delivery.hub_layer import write_layer
from ..delivery.install import plan_change
from ..delivery.original import ModelTarget, commit_original, model_target, original_message, own_checkout
from ..delivery.plan import shown_path
from ..errors import ExitCode, GitError
from ..model.marks import read_envelope
from ..model.modelfile import ModelFile
from ..model.records import ModelProfile
from ..protocols import OptimizeProgress
from ..results.optimize import OptimizeRecord
from .report import report_paths, speedup_words, write_model_report


def targets(model_file: ModelFile, kernels: list[Path], model_out: Path | None = None) -> list[Path]:
    """Every file the delivery writes: the kernel modules, the model with the kernels (``model_out``:
    the model file, or the file beside it where the original is kept untouched), the report."""
    return [*kernels, model_out or model_file.path, *report_paths(model_file.path)]


def where_the_model_goes(model_file: ModelFile, *, commit: bool, branch: str | None = None) -> ModelTarget:
    with gitops.opened(model_file.path) as repo:
        return model_target(model_file.path, repo, commit=commit, branch=branch)


def refusals(model_file: ModelFile, kernels: list[Path], *, replace: bool, commit: bool = True,
             branch: str | None = None) -> list[str]:
    """Why the delivery would write nothing: a target with uncommitted changes (the person's), one
    git could not restore (without --replace). Said before the first run; with no ``kernels`` (the
    plan not made yet), before the profile."""
    with gitops.opened(model_file.path) as repo:
        target = model_target(model_file.path, repo, commit=commit, branch=branch)
        paths = list(dict.fromkeys([model_file.path, *targets(model_file, kernels, target.path)]))
        states = gitops.path_states(repo, paths)
        if commit and own_checkout(repo):
            return [f"{shown_path(model_file.path)} is in kevin-opt's own checkout ({repo.working_tree_dir}), and an "
                    "optimize commits into the repository that holds the model: copy the model into a repository "
                    "of yours first (as the README's demo does), or pass --no-commit"]
    out = [f"{shown_path(p)} has uncommitted changes: commit or stash them first (they are never overwritten)"
           for p in paths if states[p] == "modified"]
    if not replace:
        # The model file itself is never overwritten when git cannot restore it (``delivery.original``).
        out += [f"{shown_path(p)} exists and git does not track it: pass --replace to overwrite it"
                for p in paths if states[p] == "untracked" and p != model_file.path]
    return out


def combine_and_deliver(session, model_file: ModelFile, profile: ModelProfile,
                        progress: OptimizeProgress) -> OptimizeRecord:
    """The whole model with the verified kernels of ``session`` (an ``OptimizeSession``), the
    ones that hurt it dropped, the rest delivered."""
    record = session.record
    verified = [g for g in record.groups if g.state in ("verified", "kept")]
    kernels = [Path(g.kernel_file) for g in verified]
    # A kernel already moved beside the model (a delivery interrupted) is measured from the optimize's copy.
    kernels = [k if k.is_file() else session.store.tasks / k.name for k in kernels]
    several = len(kernels) > 1
    progress.note(f"running the whole model {model_file.given} without and with the "
                  f"{len(kernels)} kernel{'s' if several else ''}" + (" (each left out in turn)" if several else "")
                  + ", in fresh workers")
    result = measure(model_file, kernels, session.settings(), profile=profile, rounds=DEFAULT_ROUNDS,
                     timeout_s=session.timeout_s)
    effects = {Path(e.kernel_file).name: e for e in result.kernels}
    for g, kernel in zip(verified, kernels):
        g.kernel_file = str(kernel)
        effect = effects.get(kernel.name)
        if effect is not None:
            g.contribution, g.contribution_interval = effect.contribution, effect.contribution_interval
            g.kernel_calls, g.fallback_calls = effect.kernel_calls, effect.fallback_calls
        else:  # alone: the whole model's numbers are its own
            g.contribution, g.kernel_calls, g.fallback_calls = result.speedup, result.kernel_calls, result.fallback_calls
        why = effect.dropped if effect is not None else ""
        if not why and not result.outputs_match:
            why = f"the whole model's outputs differ with it: {result.mismatch}"
        if not why and result.slower and not session.config.accept_slower:
            them = "them" if several else "it"
            # Compiled, the verdict is one median with no interval to call it beyond the noise.
            why = (f"under torch.compile the whole model is slower with {them} ({result.speedup:.2f}x)"
                   if result.mode == "compile" else f"the whole model is slower with {them}, beyond the noise "
                   f"({speedup_words(result.speedup, result.speedup_interval)})")
        g.state, g.why = ("dropped", why) if why else ("kept", "")
        session.save(progress, g)
    record.e2e = result
    kept = record.kept
    record.measured = result.speedup if kept else None
    record.measured_interval = result.speedup_interval if kept else None
    record.predicted = result.predicted if kept else None
    session.store.save()
    progress.combined(record)
    if not kept:
        return session._end("nothing", ExitCode.NONE, "every kernel was dropped: " +
                            "; ".join(f"{g.name}: {g.why}" for g in record.groups if g.state == "dropped"))
    return _deliver(session, model_file)


def _deliver(session, model_file: ModelFile) -> OptimizeRecord:
    record, config = session.record, session.config
    kept = record.kept
    beside = [model_file.path.parent / Path(g.kernel_file).name for g in kept]
    refused = refusals(model_file, beside, replace=True, commit=config.commit, branch=config.branch)
    if refused:
        return session._end("refused", ExitCode.NONE, "nothing written: " + "; ".join(refused))
    target = where_the_model_goes(model_file, commit=config.commit, branch=config.branch)
    record.original = target.words(branch=config.branch)  # what the question says; the commit's sha follows
    if session.consent is not None and not session.consent(record, targets(model_file, beside, target.path)):
        record.notes.append("declined: nothing written, nothing committed; the kernels stay in the optimize's folder")
        record.original = ""
        return session._end("nothing", ExitCode.NONE, "declined: nothing written")
    for g, path in zip(kept, beside):
        if Path(g.kernel_file).resolve() != path.resolve():
            shutil.copyfile(g.kernel_file, path)
        g.kernel_file = str(path)
    # a kernel for a Hugging Face kernels layer: its layer repository beside it too
    layers = [f for path in beside if (env := read_envelope(path)) is not None for f in write_layer(path, env)]
    change = plan_change(model_file, beside)
    if change.new_text is not None and not change.done:
        with gitops.opened(model_file.path) as repo:
            # Before the change is written: a model file git does not hold gets its own commit, as it is.
            target, record.original_commit = commit_original(
                repo, target, original_message(model_file.name, "kevin-opt installs its kernels"),
                branch=config.branch)
        record.original = target.words(record.original_commit, config.branch)
        target.path.write_text(change.new_text, encoding="utf-8")
        record.model_change = change.diff.replace(f"+++ b/{model_file.name}", f"+++ b/{target.path.name}", 1)
    else:
        target = target.model_copy(update={"path": model_file.path})  # nothing is written into it
        record.original = ""
        if not change.done:
            record.notes.append(f"the model file is not changed ({change.why_not}); add by hand: "
                                + "; ".join(change.usage()))
    paths = [*targets(model_file, beside, target.path), *layers]
    write_model_report(record, model_file.path)
    with gitops.opened(model_file.path) as repo:
        root = Path(repo.working_tree_dir) if repo is not None and not repo.bare else None
        record.written = [shown_path(p, root) for p in paths]
        record.model_written = shown_path(target.path, root)
        record.notes.append(f"wrote {', '.join(record.written)}")
        if not config.commit:
            record.notes.append("not committed (--no-commit)")
            return _said_original(session, "written", ExitCode.OK)
        if repo is None or repo.bare:
            record.notes.append("not committed: not in a git repository")
            return _said_original(session, "written", ExitCode.OK)
        try:
            result = gitops.commit_paths(repo, paths, commit_message(record), branch=config.branch,
                                         grow=record.original_commit is not None)
        except GitError as exc:
            record.notes.append(f"not committed: {exc.message}")
            return _said_original(session, "written", ExitCode.NONE, exc.message)
    record.commit, record.branch = result.sha, result.branch
    record.notes.append(f"committed {result.sha[:12]} on {result.branch}: {', '.join(result.paths)}")
    return _said_original(session, "delivered", ExitCode.OK)


def _said_original(session, status: str, code: int, why: str = "") -> OptimizeRecord:
    """The end, the last note saying how the original model file was kept where git did not hold it."""
    if session.record.original:
        session.record.notes.append(session.record.original)
    return session._end(status, code, why)


def commit_message(record: OptimizeRecord) -> str:
    kept = record.kept
    name = Path(record.model_file).name
    head = (f"kevin-opt: {len(kept)} kernel{'s' if len(kept) != 1 else ''} into {name}, the whole model "
            f"{speedup_words(record.measured, record.measured_interval)}"
            + (f" (Amdahl predicts {record.predicted:.2f}x)" if record.predicted else "")
            + f" on {record.device_name or record.device}")
    lines = [f"- {g.name}: {g.speedup:.2f}x on its task, run {g.run_id}" for g in kept]
    return head + "\n\n" + "\n".join(lines) + f"\n\noptimize {record.optimize_id}\n"
