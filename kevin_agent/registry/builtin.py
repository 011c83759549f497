"""The built-in backends, devices and checks, registered through the plugin hooks like any plugin's."""

from __future__ import annotations

from ..errors import ConfigError
from .hookspecs import hookimpl


def _scripted(config, *, skip: int = 0):
    from ..backends.scripted import ScriptedBackend

    if config.responses is None:
        raise ConfigError("--backend scripted needs --responses PATH",
                          'point it at a JSONL file with one {"text": ...} per line, e.g. examples/rmsnorm.cpu.jsonl, '
                          "or at a folder holding <task file stem>.jsonl for each task")
    return ScriptedBackend(config.responses, skip=skip)


def _openai(config):
    from ..backends.openai import OpenAIBackend

    return OpenAIBackend(config)


def _vllm(config):
    from ..backends.vllm import VLLMBackend

    return VLLMBackend(config)


@hookimpl
def register_backends(register):
    register("vllm", _vllm)
    register("openai", _openai)
    register("scripted", _scripted, replays=True)


def _independent(config):
    from ..engine.search import IndependentSearch

    return IndependentSearch()


def _beam(config):
    from ..engine.search import BeamSearch, default_beam_width

    width = config.beam_width or default_beam_width(config.trajectories)
    if width > config.trajectories:
        raise ConfigError(f"--beam-width {width} is more than --trajectories {config.trajectories}",
                          "keep at most as many trajectories as there are")
    return BeamSearch(width)


@hookimpl
def register_searches(register):
    register("independent", _independent)
    register("beam", _beam)


@hookimpl
def register_devices(register):
    def local(task, settings):
        from ..evaluate import LocalEvaluator

        return LocalEvaluator(task, settings)

    register("cpu", local)
    register("cuda", local)


@hookimpl
def register_checks(register):
    from ..checks import RULES, run_checks

    register("kevin-opt", "the built-in rules: " + ", ".join(RULES),
             lambda tree, source, device, language="cuda": run_checks(source, device, language).violations)
