"""Running a grid's chunks on Dask: which client, how many scenarios per task, and collecting rows.

Dask is optional (``pip install 'llm-serving-capacity-toolkit[dask]'``); nothing here imports it until a client is asked
for. Each task runs ``run_chunk`` on a list of scenarios. Trace frames are scattered to every worker
once, before any task, and reach the tasks as futures; traces given by name are loaded from the
package data on the worker, once per process. Tasks are pure functions of their arguments, so a task
lost with its worker is simply run again elsewhere (Dask reschedules it; ``RETRIES`` more attempts
cover an error raised by the task itself), with the same result.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Callable
from typing import Any

import pandas as pd

from toolkit._scale.scenarios import run_chunk

__all__: list[str] = []

SCHEDULER_ENV = "TOOLKIT_DASK_SCHEDULER"
INSTALL = "pip install 'llm-serving-capacity-toolkit[dask]' (from a clone of the project: pip install '.[dask]')"
# attempts after the first when a task raises (a worker dying is rescheduled by Dask without counting)
RETRIES = 2
# tasks per worker thread: enough that an uneven chunk or a lost worker does not idle the others
TASKS_PER_SLOT = 4


def _distributed(asked: str) -> Any:
    try:
        import dask.distributed as distributed
    except ImportError:
        raise ValueError(f"{asked} needs Dask, which is not installed: {INSTALL}") from None
    return distributed


def _nothing() -> None:
    return None


def resolve_client(client: object) -> tuple[Any, Callable[[], None]]:
    """(the Dask client to run on, or None for in-process; what closes what this call opened).

    ``None``: in-process, unless the ``TOOLKIT_DASK_SCHEDULER`` environment variable names a
    scheduler address; ``"local"``: a local cluster of worker processes, one per CPU, for this
    call; another string: a scheduler address; a ``dask.distributed.Client``: that client.
    """
    if client is None:
        address = os.environ.get(SCHEDULER_ENV, "").strip()
        if not address:
            return None, _nothing
        connected = _distributed(f"{SCHEDULER_ENV}={address!r}").Client(address)
        return connected, connected.close
    distributed = _distributed(f"client={client!r}")
    if isinstance(client, str) and client == "local":
        cluster = distributed.LocalCluster(
            n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        local = distributed.Client(cluster)

        def close() -> None:
            local.close()
            cluster.close()

        return local, close
    if isinstance(client, str) and client:
        connected = distributed.Client(client)
        return connected, connected.close
    if isinstance(client, distributed.Client):
        return client, _nothing
    raise ValueError(
        f"client must be None (in-process), 'local', a scheduler address or a dask.distributed.Client; got {client!r}"
    )


def chunk_size_for(n_scenarios: int, slots: int) -> int:
    """Scenarios per task: ``ceil(n_scenarios / (4 x slots))``, at least 1 (``slots``: worker threads)."""
    return max(1, math.ceil(n_scenarios / (TASKS_PER_SLOT * max(slots, 1))))


def run_on_dask(
    client: Any,
    chunks: list[list[tuple[int, dict[str, Any]]]],
    frames: dict[int, pd.DataFrame],
    percentiles: tuple[float, ...],
    advance: Callable[[int], object],
) -> list[tuple[int, dict[str, Any]]]:
    """Every chunk's rows; a chunk whose task failed for good gives an error row per scenario."""
    import dask.distributed as distributed

    # a list, not the dict: scattered data takes unique keys (a dict's keys would become task keys)
    shared = dict(zip(frames, client.scatter(list(frames.values()), broadcast=True, hash=False))) if frames else {}
    tag = uuid.uuid4().hex
    futures = {
        client.submit(
            run_chunk, chunk, shared, percentiles, key=f"simulate_grid-{tag}-{i}", retries=RETRIES, pure=False
        ): chunk
        for i, chunk in enumerate(chunks)
    }
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        for future in distributed.as_completed(list(futures)):
            chunk = futures[future]
            try:
                rows.extend(future.result())
            except Exception as exc:  # the task failed on every attempt: its scenarios are error rows
                error = f"{type(exc).__name__}: {exc}"
                rows.extend((position, {"error": error}) for position, _ in chunk)
            advance(len(chunk))
    finally:
        client.cancel(list(futures) + list(shared.values()))
    return rows
