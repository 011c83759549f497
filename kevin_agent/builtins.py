"""The built-in backends, devices and checks, registered through the plugin hooks."""

from __future__ import annotations

from .hookspecs import hookimpl


def _backend_factory(name: str):
    def factory(config, *, skip: int = 0):
        from .backends import make_backend

        return make_backend(config.model_copy(update={"backend": name}), skip=skip)

    return factory


@hookimpl
def register_backends(register):
    for name in ("vllm", "openai", "scripted"):
        register(name, _backend_factory(name))


@hookimpl
def register_devices(register):
    def local(task, settings):
        from .evaluate import LocalEvaluator

        return LocalEvaluator(task, settings)

    register("cpu", local)
    register("cuda", local)
