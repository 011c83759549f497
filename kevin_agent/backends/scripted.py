"""The scripted backend: replays hand-written responses from a JSONL file.

Used by the tests and the demos, and by anyone who wants to see the whole loop without a
model. Each line is ``{"text": ...}`` with an optional ``"reasoning"`` (thinking that a server
would return apart from the answer). Responses are served in order across calls: a batch of N
prompts takes the next N lines. A folder of such files serves many tasks, each run from its own
(``script_for``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import BackendError, UsageError
from ..protocols import DoneCallback, Generation
from .streaming import BatchBackend, SerialCallback, ThinkSplitter

#: Characters per streamed chunk: small enough that the TUI visibly streams.
CHUNK_CHARS = 24


class ScriptedBackend(BatchBackend):
    """Serves the responses of a JSONL file in order."""

    name = "scripted"
    calls_on_done = True

    def __init__(
        self, path: Path, *, skip: int = 0, model: str = "scripted", chunk_delay_s: float = 0.0
    ) -> None:
        self.source = Path(path)
        """What ``--responses`` named: a script, or a folder of them (one chosen as each run starts)."""
        self.path = self.source
        self.model = f"{model} (hand-written responses)"
        self.responses = [] if self.source.is_dir() else _load(self.source)
        if skip < 0:
            raise ValueError("skip must be >= 0")
        #: Index of the next response to serve; ``skip`` resumes after responses already used.
        self.position = skip
        self.chunk_delay_s = chunk_delay_s
        """Pause between streamed chunks, so that a demo streams at a readable pace."""

    def cue(self, names: Sequence[str], skip: int) -> None:
        """Serve the run about to start from response ``skip`` on; from a folder, the script
        filed under the first of ``names`` that has one (``Replaying``)."""
        if self.source.is_dir():
            self.path = script_for(self.source, names)
            self.responses = _load(self.path)
        self.position = skip

    def _answer(self, prompts: Sequence[str], emit: SerialCallback, cancel: threading.Event | None,
                on_done: DoneCallback | None) -> list[Generation]:
        if not self.responses:
            raise BackendError(f"{self.source} is a folder of scripts and no run has chosen one",
                               "start runs through kevin-opt, which picks each task's script")
        needed = self.position + len(prompts)
        if needed > len(self.responses):
            turn = self.position // len(prompts) + 1
            raise BackendError(
                f"the script {self.path} has {len(self.responses)} response{'' if len(self.responses) == 1 else 's'} and turn {turn} "
                f"needs more (responses {self.position + 1} to {needed})",
                "lower --turns or add responses",
            )
        batch = self.responses[self.position:needed]
        self.position = needed
        out = []
        for i, item in enumerate(batch):
            out.append(self._stream(i, item, emit, cancel))
            if on_done is not None:
                on_done(i, out[-1])
        return out

    def _stream(
        self, index: int, item: dict[str, str], emit: SerialCallback, cancel: threading.Event | None
    ) -> Generation:
        reasoning, text = item.get("reasoning", ""), item["text"]
        sent_reasoning, sent_text = "", ""
        for chunk in _chunks(reasoning):
            if cancel is not None and cancel.is_set():
                return Generation(text="", reasoning=sent_reasoning, cancelled=True)
            emit(index, "reasoning", chunk)
            sent_reasoning += chunk
            self._pause()
        splitter = ThinkSplitter()
        for chunk in _chunks(text):
            if cancel is not None and cancel.is_set():
                return Generation(text=sent_text, reasoning=sent_reasoning, cancelled=True)
            for channel, part in splitter.feed(chunk):
                emit(index, channel, part)
            sent_text += chunk
            self._pause()
        for channel, part in splitter.flush():
            emit(index, channel, part)
        return Generation(
            text=text,
            reasoning=reasoning,
            prompt_tokens=None,
            completion_tokens=self.count_tokens(reasoning + text),
            finish_reason="stop",
        )

    def _pause(self) -> None:
        if self.chunk_delay_s > 0:
            time.sleep(self.chunk_delay_s)

    def count_tokens(self, text: str) -> int:
        # About four characters a token for English and code; the budget only needs an estimate.
        return (len(text) + 3) // 4

    def close(self) -> None:
        pass


def _chunks(text: str) -> list[str]:
    return [text[i:i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]


def script_for(folder: Path, names: Sequence[str]) -> Path:
    """A task's script in a folder of them: ``<name>.jsonl`` for the first of ``names`` that has
    one (a task file's stem; for a module group of a model, its members' module paths as the
    profile prints them, ``layers.0.norm``, then its class name, ``RowNorm``)."""
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if (folder / f"{name}.jsonl").is_file():
            return folder / f"{name}.jsonl"
    raise UsageError(f"the folder {folder} given as --responses has no script for this task: looked for "
                     + ", ".join(f"{name}.jsonl" for name in wanted),
                     "add one of those files, or pass --responses FILE.jsonl")


def check_script(source: Path, names: Sequence[str], *, turns: int, trajectories: int) -> Path:
    """The script a run of ``turns`` x ``trajectories`` will replay (``source``, or its file in a
    folder for the first of ``names`` that has one), checked before the run starts: it exists, reads,
    and holds an answer for every turn asked for (``UsageError`` otherwise, exit 2), rather than a
    run that stops at the turn it runs out, after the work before it was spent."""
    source = Path(source)
    path = script_for(source, names) if source.is_dir() else source
    have, needed = len(_load(path)), turns * trajectories
    if have < needed:
        per = f" x {trajectories} trajectories" if trajectories != 1 else ""
        fits = have // trajectories
        raise UsageError(f"the script {path} has {have} response{'' if have == 1 else 's'}; {turns} turns{per} "
                         f"need {needed}",
                         f"pass --turns {fits} or fewer, or add responses" if fits else "add responses")
    return path


def _load(path: Path) -> list[dict[str, str]]:
    """The script's responses; a script that cannot be read is bad input (exit 2), like a bad flag."""
    if not path.is_file():
        raise UsageError(
            f"the response script {path} does not exist",
            'pass --responses PATH: a JSONL file with one {"text": ...} per line, or a folder of them',
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the response script {path}: {exc}") from None
    responses: list[dict[str, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"{path}, line {number}: not valid JSON ({exc.msg}, column {exc.colno})",
                'each line must be one JSON object such as {"text": "..."}',
            ) from None
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise UsageError(
                f'{path}, line {number}: expected an object with a "text" string',
                'each line must be one JSON object such as {"text": "..."}',
            )
        if not isinstance(item.get("reasoning", ""), str):
            raise UsageError(f'{path}, line {number}: "reasoning" must be a string')
        responses.append({"text": item["text"], "reasoning": item.get("reasoning", "")})
    if not responses:
        raise UsageError(f"the response script {path} has no responses", 'add {"text": ...} lines')
    return responses
