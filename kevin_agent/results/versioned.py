"""``schema``: which layout of its fields a record has, first in every JSON record the tool writes
(``Versioned``). A file written before its kind was numbered has none and reads as layout 1."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field

RUN_SCHEMA = 1
"""The layout of a run directory's files: ``run.json``, each line of ``turns.jsonl``, the lock."""
RUN_SCHEMAS_READ = frozenset({1})
"""The layouts of a run directory this version reads (and so resumes); a run of another was written
by another version of kevin-opt."""


class Versioned(BaseModel):
    """A record that says its layout: ``schema`` first (a subclass sets its own number)."""

    schema_: int = Field(1, alias="schema")

    model_config = {"populate_by_name": True, "serialize_by_alias": True}


def schema_field(number: int, *old_names: str):
    """The ``schema`` field of a record at layout ``number``; ``old_names``: what files written
    before it had that name called it."""
    return Field(number, alias="schema", validation_alias=AliasChoices("schema", *old_names) if old_names else None)
