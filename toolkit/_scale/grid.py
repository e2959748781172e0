"""``simulate_grid``: many simulations in one call, in-process or spread over a Dask cluster."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from toolkit._args import check_int, check_number
from toolkit._scale.dask_backend import chunk_size_for, resolve_client, run_on_dask
from toolkit._scale.scenarios import (
    BOOLEAN_COLUMNS,
    INTEGER_COLUMNS,
    SUMMARY_COLUMNS,
    label,
    run_chunk,
    scenario_rows,
    scenario_seed,
    ship_frames,
)
from toolkit._vocab.metrics import SIMULATED_METRICS, quantile_column

__all__ = ["simulate_grid"]

MAX_SEED = 2**63 - 1


def simulate_grid(
    scenarios: pd.DataFrame | Iterable[Mapping[str, Any]],
    *,
    client: object = None,
    seed: int = 0,
    percentiles: Sequence[float] | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Simulate every scenario of a grid and return one tidy row per scenario.

    Each scenario is one call of :func:`toolkit.simulate`. The same call runs in this process (the
    default: no cluster needed), on a Dask cluster, or on a local cluster of worker processes, with
    the same results: each scenario's seed depends only on ``seed`` and its position, never on the
    number of workers or the order in which tasks finish.

    Parameters
    ----------
    scenarios : pandas.DataFrame or iterable of dict
        One row (or dict) per scenario, keyed by :func:`toolkit.simulate` argument names (``model``,
        ``gpu``, ``quant``, ``prompt_tokens``, ``arrival_rate``, ``replicas``, ``seed``, ...). A
        missing value (None, NaN) leaves that argument at its default. ``trace`` is a trace frame,
        or the name of a shipped trace (``"azure-conv-2023"``, ``"azure-code-2023"``) or the path of
        a file every worker can read, sliced and scaled by the :func:`toolkit.load_trace` options
        ``trace_start_s``, ``trace_duration_s``, ``trace_time_scale``, ``trace_rate_scale``,
        ``trace_seed`` and ``trace_token_scale``; with a trace, ``prompt_tokens``, ``output_tokens``
        and ``num_requests`` default to None. Other keys raise ``ValueError``.
    client : None, "local", str or dask.distributed.Client
        Where to run. None: in this process, unless the environment variable
        ``TOOLKIT_DASK_SCHEDULER`` holds a scheduler address, which is then connected to. ``"local"``:
        a ``dask.distributed.LocalCluster`` of one single-threaded worker process per CPU, started
        and closed by this call. Another string: a scheduler address (``"tcp://host:8786"``). A
        ``Client``: its cluster. Anything but None needs the ``dask`` extra (``pip install
        'llm-serving-capacity-toolkit[dask]'``; a ValueError says so when it is missing); the workers only need this
        package installed.
    seed : int
        Base seed (0 to 2**63 - 1). A scenario without its own ``seed`` gets the first 64-bit word
        of ``numpy.random.SeedSequence(seed, spawn_key=(i,))`` shifted right one bit, ``i`` its
        position in ``scenarios`` (0-based): the ``i``-th child of ``SeedSequence(seed).spawn``.
    percentiles : sequence of float, optional
        Extra quantiles, each in (0, 1), of the per-request ``queue_wait``, ``ttft``, ``tpot`` and
        ``e2e`` times (s, measured requests), as columns ``{metric}_p{100 x q}_s`` (``e2e_p99.9_s``).
    chunk_size : int, optional
        Scenarios per Dask task (1 to 10**6). Default: ``ceil(len(scenarios) / (4 x slots))``,
        at least 1, ``slots`` the worker threads of the cluster when the grid is submitted: about
        four tasks per slot, so that scheduling costs little next to the simulations and a slow
        chunk or a lost worker leaves the others busy. In-process, scenarios run one by one.
    progress : bool
        Show a tqdm bar of completed scenarios.

    Returns
    -------
    pandas.DataFrame
        One row per scenario, in the order (and with the index) of ``scenarios``: the scenario
        columns as given (a trace frame shown by its name and size), ``seed`` (the seed used), the
        summary columns of :func:`toolkit.simulate` (``requests``, ``{metric}_{mean,p50,p95,p99}_s``,
        ``throughput_rps``, ``output_tok_s``, ``achieved_concurrency``, ``preemptions``,
        ``prefix_hit_rate``, ``prefill_tokens_saved``, ``utilization``, ``kv_budget_tokens``, ``queue_wait_growth``, ``stable``: nullable boolean),
        the ``percentiles`` columns, and ``error``: None, or
        ``"ExceptionType: message"`` for a scenario that raised (its numbers are then missing). A
        scenario whose Dask task failed on every attempt is an error row too: no row is ever lost.

    Notes
    -----
    Trace frames are scattered to every worker once, before the tasks; traces given by name are
    loaded from the package data on each worker, once per worker process (cached), as are the
    catalogs. Tasks are pure, so Dask reruns the tasks of a worker that dies on the others.
    """
    base_seed = check_int("seed", seed, low=0, high=MAX_SEED)
    quantiles = _quantiles(percentiles)
    size = None if chunk_size is None else check_int("chunk_size", chunk_size, low=1, high=10**6)
    rows, index, columns = scenario_rows(scenarios)
    carried = pd.DataFrame([{k: label(v) for k, v in row.items()} for row in rows], index=index, columns=columns)
    seeds = [row.setdefault("seed", scenario_seed(base_seed, i)) for i, row in enumerate(rows)]
    frames = ship_frames(rows)
    work = list(enumerate(rows))

    dask_client, close = resolve_client(client)
    bar = tqdm(total=len(work), desc="simulate_grid", unit="scenario", leave=False, disable=not progress)
    try:
        if dask_client is None:
            results = []
            for item in work:
                results += run_chunk([item], frames, quantiles)
                bar.update(1)
        else:
            per_task = size or chunk_size_for(len(work), sum(dask_client.nthreads().values()))
            chunks = [work[i : i + per_task] for i in range(0, len(work), per_task)]
            results = run_on_dask(dask_client, chunks, frames, quantiles, bar.update)
    finally:
        bar.close()
        close()
    return _table(carried, seeds, dict(results), quantiles)


def _quantiles(percentiles: Sequence[float] | None) -> tuple[float, ...]:
    if percentiles is None:
        return ()
    if isinstance(percentiles, (str, bytes)) or not isinstance(percentiles, Iterable):
        raise ValueError(f"percentiles must be a list of quantiles in (0, 1) or None, got {percentiles!r}")
    values = tuple(
        check_number("percentiles", q, low=0, high=1, low_inclusive=False, high_inclusive=False) for q in percentiles
    )
    if not values:
        raise ValueError("percentiles must list at least one quantile in (0, 1), or be None")
    return tuple(dict.fromkeys(values))


def _table(
    carried: pd.DataFrame, seeds: list[object], results: dict[int, dict[str, Any]], quantiles: tuple[float, ...]
) -> pd.DataFrame:
    extra = [quantile_column(metric, q, "s") for q in quantiles for metric in SIMULATED_METRICS]
    numbers = [*SUMMARY_COLUMNS, *(c for c in extra if c not in SUMMARY_COLUMNS)]
    body = pd.DataFrame([results[i] for i in range(len(carried))], index=carried.index)
    body = body.reindex(columns=[*numbers, "error"])
    for column in numbers:
        kind = "Int64" if column in INTEGER_COLUMNS else "boolean" if column in BOOLEAN_COLUMNS else float
        body[column] = body[column].astype(kind)
    body["error"] = body["error"].astype(object).where(body["error"].notna(), None)
    scenario = carried.drop(columns="seed", errors="ignore").assign(seed=seeds)
    return pd.concat([scenario, body], axis=1)
