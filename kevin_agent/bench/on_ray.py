"""``--ray [ADDRESS]``: the bench's tasks spread over a Ray cluster, a Ray task per task file.

Each asks for one GPU (on the cpu device, one CPU) and runs where one is free (``ray_task``); the
model's side comes from the one OpenAI-compatible endpoint every task reaches, or from the task's
own script. The head keeps as many tasks in flight as the cluster has slots, so "running" means
running, and records each result as it comes back (its run directory unpacked under ``runs/``,
its kernel kept, the table rewritten), once per task id. A node that dies takes only its tasks in
flight with it: Ray runs them again elsewhere (``max_retries``), and a task that still comes back
without a result is submitted again, up to ``RESUBMITS`` times, before its row says it was lost.

An interrupt stops the tasks in flight through an actor of the head's (``ray_task.Stop``): each
one's run ends as an interrupted run does and comes back as the task's return value, unpacked
under ``runs/`` (a task that does not come back within ``CUT_SHORT_S`` is cancelled, and its
run is lost: it starts again from its first turn). Every finished task is kept, and ``resume``
ships each unfinished run with its task, which goes on from its last finished turn, on Ray or here.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ..config import RunConfig
from ..errors import EnvironmentUnavailable, KevinError
from ..protocols import BenchSink
from ..results.bench import BenchTask, TaskResult
from ..task import load_task
from .driver import device_name_of, finish_task
from .one_task import failed, unfinished_run
from .ray_task import Stop, pack, run_payload, unpack
from .store import BenchStore

RAY_EXTRA = "pip install 'kevin-opt[ray]'"
MAX_RETRIES = 3
"""Ray's own retries of a task whose worker or node died."""
RESUBMITS = 2
"""Further submissions of a task that came back as an error (its retries spent)."""
CONNECT_TIMEOUT_S = 5.0
WAIT_S = 1.0
CUT_SHORT_S = 60.0
"""How long an interrupt waits for the tasks in flight to bring their runs back."""


def _host_port(address: str) -> tuple[str, int]:
    rest = address.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise EnvironmentUnavailable(f"--ray {address}: not an address of a Ray cluster's head",
                                     "give HOST:PORT (ray start --head prints it: 10.0.0.1:6379) or ray://HOST:10001")
    return host, int(port)


class RayCluster:
    """Where the tasks run: a Ray cluster (ADDRESS), or one started on this machine (``local``)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.ray = None

    @property
    def where(self) -> str:
        return f"ray {self.address}"

    def connect(self) -> None:
        """Ray imported and the cluster joined, before any task starts: Ray missing, or a head that
        does not answer, is the environment's problem (exit 3)."""
        try:
            import ray
        except ImportError:
            raise EnvironmentUnavailable("--ray needs Ray, which is not installed", RAY_EXTRA) from None
        env = {k: v for k, v in os.environ.items() if k.startswith("KEVIN_") and k != "KEVIN_CACHE_DIR"}
        # Every node reads the head's KEVIN_* settings; its build cache is its own.
        runtime_env = {"env_vars": env} if env else None
        if self.address == "local":
            ray.init(include_dashboard=False, log_to_driver=False, runtime_env=runtime_env,
                     object_store_memory=200 * 2**20)
        else:
            host, port = _host_port(self.address)
            # ray.init waits minutes for a head that is not there; a plain connection says at once.
            try:
                socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
            except OSError as exc:
                raise EnvironmentUnavailable(f"cannot reach the Ray cluster at {self.address} ({exc.strerror or exc})",
                                             "start its head with `ray start --head`, or check the address") from None
            try:
                ray.init(address=self.address, log_to_driver=False, runtime_env=runtime_env)
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; each is "cannot join"
                raise EnvironmentUnavailable(f"cannot join the Ray cluster at {self.address}: {exc}",
                                             "check that it runs the same Ray version (ray status on its head)") from None
        self.ray = ray

    def slots(self, device: str) -> int:
        """Tasks that can run at once: the cluster's GPUs (cuda) or CPUs, at least one."""
        resources = self.ray.cluster_resources()
        return max(1, int(resources.get("GPU" if device == "cuda" else "CPU", 0)))

    def _payload(self, store: BenchStore, task: BenchTask, config: RunConfig, registry_replaying: bool) -> dict:
        path = Path(task.path)
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise _Unreadable(f"{path}: cannot read the task file ({exc.strerror})") from None
        load_task(path, config.class_name)  # a file that does not load is its row, as on one machine
        script = None
        if registry_replaying and config.responses is not None:
            from ..backends.scripted import script_for

            chosen = script_for(config.responses, [path.stem]) if config.responses.is_dir() else config.responses
            script = chosen.read_text(encoding="utf-8")
        previous = unfinished_run(store.runs_root, path)
        settings = {k: v for k, v in store.info.settings.items() if k != "responses"}
        return {"task": task.model_dump(), "source": source, "script": script, "settings": settings,
                "api_key": config.api_key.get_secret_value() if config.api_key else None,
                "partial": pack(previous.dir) if previous is not None else None}

    def run(self, store: BenchStore, config: RunConfig, sink: BenchSink, signals, *, replaying: bool) -> bool:
        """Run the bench's pending tasks on the cluster; False when a signal stopped it."""
        ray = self.ray
        remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(run_payload)
        stop = ray.remote(num_cpus=0)(Stop).remote()
        resources = {"num_gpus": 1} if config.device == "cuda" else {"num_cpus": 1}
        queue = list(store.pending())
        submits: dict[str, int] = {}
        flight: dict = {}

        def submit(task: BenchTask) -> None:
            try:
                payload = self._payload(store, task, config, replaying)
            except (KevinError, _Unreadable) as exc:  # the row says why, the bench goes on
                finish_task(store, failed(task, str(exc)), sink, device_name=device_name_of(store))
                return
            submits[task.task_id] = submits.get(task.task_id, -1) + 1
            flight[remote.options(**resources).remote(payload, stop)] = task
            sink.task_started(task.task_id)

        try:
            while queue or flight:
                if signals.signum is not None:
                    self._keep_cut_short(store, flight, submits, stop, sink)
                    return False
                while queue and len(flight) < self.slots(config.device):
                    submit(queue.pop(0))
                if not flight:
                    continue
                ready, _ = ray.wait(list(flight), num_returns=1, timeout=WAIT_S)
                for ref in ready:
                    task = flight.pop(ref)
                    try:
                        reply = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - a worker or node lost, retries spent
                        if submits[task.task_id] < RESUBMITS:
                            sink.note(f"[{task.task_id}] was lost ({type(exc).__name__}); running it again")
                            queue.insert(0, task)
                        else:
                            lost = failed(task, f"lost {submits[task.task_id] + 1} times: {exc}",
                                          attempt=submits[task.task_id])
                            finish_task(store, lost, sink, device_name=device_name_of(store))
                        continue
                    if not self._keep(store, task, reply, submits[task.task_id], sink):
                        queue.insert(0, task)  # interrupted on its node: run (resume) it again
            return signals.signum is None
        finally:
            for ref in flight:
                ray.cancel(ref, force=True)

    def _keep(self, store: BenchStore, task: BenchTask, reply: dict, attempt: int, sink: BenchSink) -> bool:
        """A task's reply kept: its run unpacked under ``runs/`` and its row recorded; False when
        it has no row (its run was interrupted, and is resumed from there)."""
        if reply["run"] is not None:
            unpack(reply["run"], store.runs_root, Path(task.path))
        if reply["result"] is None:
            return False
        result = TaskResult.model_validate_json(reply["result"])
        result = result.model_copy(update={"path": task.path, "attempt": attempt})
        finish_task(store, result, sink, device_name=device_name_of(store))
        return True

    def _keep_cut_short(self, store: BenchStore, flight: dict, submits: dict[str, int], stop,
                        sink: BenchSink) -> None:
        """Stop the tasks in flight and keep the runs they bring back: each task's run ends as an
        interrupted run does (its evaluation's workers killed) and is unpacked under ``runs/``;
        one that ended before it heard keeps its row."""
        ray = self.ray
        if not flight:
            return
        sink.note(f"stopping {len(flight)} tasks in flight; their finished turns are kept")
        try:
            ray.get(stop.set.remote(), timeout=CUT_SHORT_S)
            ready, _ = ray.wait(list(flight), num_returns=len(flight), timeout=CUT_SHORT_S)
        except Exception:  # noqa: BLE001 - the runs are lost, not the bench: resume starts them again
            return
        for ref in ready:
            task = flight.pop(ref)
            try:
                reply = ray.get(ref)
            except Exception:  # noqa: BLE001 - lost on its node: resume starts it again
                continue
            self._keep(store, task, reply, submits[task.task_id], sink)

    def close(self) -> None:
        if self.ray is not None:
            self.ray.shutdown()


class _Unreadable(Exception):
    pass
