"""simulate_grid: in-process, on a real Dask LocalCluster of two worker processes, and plan(verify=)."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

import toolkit

H100 = {"model": "Llama-3.1-8B", "gpu": "H100 SXM", "quant": "fp16"}
CHAT = {**H100, "prompt_tokens": ("lognormal", 512, 1.0), "output_tokens": ("geometric", 128)}


def _scenarios() -> list[dict]:
    """A mixed grid: synthetic loads, a closed loop, an explicit seed, a shipped trace slice, a trace
    frame twice, and a scenario that raises."""
    frame = toolkit.load_trace("azure-conv-2023", start_s=600.0, duration_s=60.0)
    return [
        {**CHAT, "num_requests": 400, "arrival_rate": 5.0},
        {**CHAT, "num_requests": 400, "arrival_rate": 20.0, "replicas": 2, "routing": "least_loaded"},
        {**CHAT, "num_requests": 300, "concurrency": 16},
        {**CHAT, "num_requests": 300, "arrival_rate": 8.0, "seed": 11},
        {**H100, "trace": "azure-code-2023", "trace_start_s": 300.0, "trace_duration_s": 120.0},
        {**H100, "trace": frame},
        {**H100, "trace": frame, "replicas": 2},
        {**CHAT, "num_requests": 50, "arrival_rate": -1.0},
    ]


def _derived_seed(base: int, position: int) -> int:
    """The documented rule, written out: the position-th child of SeedSequence(base).spawn, first
    64-bit word, shifted right one bit."""
    child = np.random.SeedSequence(base).spawn(position + 1)[position]
    return int(child.generate_state(1, dtype=np.uint64)[0]) >> 1


# --- in-process ---------------------------------------------------------------------------------------
def test_each_row_is_simulate_with_the_documented_seed():
    scenarios = _scenarios()
    grid = toolkit.simulate_grid(scenarios, seed=7, percentiles=(0.9,), progress=False)
    assert list(grid.index) == list(range(len(scenarios)))
    for i in (0, 2, 3):
        seed = 11 if i == 3 else _derived_seed(7, i)
        assert grid.loc[i, "seed"] == seed
        alone = toolkit.simulate(**{**scenarios[i], "seed": seed})
        for column, value in alone.summary.iloc[0].items():
            assert grid.loc[i, column] == pytest.approx(value, nan_ok=True), column
        measured = alone.requests[~alone.requests["warmup"]]
        assert grid.loc[i, "e2e_p90_s"] == pytest.approx(np.percentile(measured["e2e_s"], 90))
    # the shipped trace, sliced on the worker side, is the slice load_trace gives
    window = toolkit.load_trace("azure-code-2023", start_s=300.0, duration_s=120.0)
    replayed = toolkit.simulate(**H100, prompt_tokens=None, output_tokens=None, num_requests=None, trace=window)
    assert grid.loc[4, "requests"] == replayed.summary.loc[0, "requests"]
    assert grid.loc[4, "ttft_p99_s"] == pytest.approx(replayed.summary.loc[0, "ttft_p99_s"])
    assert grid.loc[5, "trace"] == f"azure-conv-2023 ({len(scenarios[5]['trace'])} requests)"


def test_a_scenario_that_raises_is_a_row_with_its_error():
    grid = toolkit.simulate_grid(_scenarios(), progress=False)
    assert len(grid) == 8
    bad = grid.iloc[7]
    assert bad["error"].startswith("ValueError: arrival_rate")
    assert pd.isna(bad["requests"]) and math.isnan(bad["e2e_p95_s"])
    assert grid["error"].iloc[:7].isna().all() and (grid["requests"].iloc[:7] > 0).all()


def test_a_frame_of_scenarios_keeps_its_index_and_reads_missing_values_as_defaults():
    frame = pd.DataFrame(
        {
            "model": H100["model"],
            "gpu": H100["gpu"],
            "quant": H100["quant"],
            "prompt_tokens": 256,
            "output_tokens": 64,
            "num_requests": 200,
            "arrival_rate": [4.0, np.nan],
            "concurrency": [np.nan, 8],
            "output_cv": 0.0,  # identical lengths in the closed loop too (its default spreads them 5%)
        },
        index=["open", "closed"],
    )
    grid = toolkit.simulate_grid(frame, seed=3, progress=False)
    assert list(grid.index) == ["open", "closed"] and grid["error"].isna().all()
    closed = toolkit.simulate(
        **H100,
        prompt_tokens=256,
        output_tokens=64,
        num_requests=200,
        concurrency=8,
        output_cv=0.0,
        seed=int(grid.loc["closed", "seed"]),
    )
    assert grid.loc["closed", "e2e_mean_s"] == pytest.approx(closed.summary.loc[0, "e2e_mean_s"])
    # 8 clients back to back, fixed lengths: every request sees the same batch, so e2e is constant
    assert grid.loc["closed", "e2e_p99_s"] == pytest.approx(grid.loc["closed", "e2e_p50_s"], rel=0.05)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"scenarios": []}, "scenarios"),
        ({"scenarios": {"model": "x"}}, "scenarios"),
        ({"scenarios": [{**CHAT, "num_requests": 10, "arrival_rate": 1.0, "rate": 2}]}, "scenarios"),
        ({"scenarios": [CHAT], "seed": -1}, "seed"),
        ({"scenarios": [CHAT], "seed": 2**63}, "seed"),
        ({"scenarios": [CHAT], "percentiles": []}, "percentiles"),
        ({"scenarios": [CHAT], "percentiles": [0.5, 1.0]}, "percentiles"),
        ({"scenarios": [CHAT], "chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, named):
    with pytest.raises(ValueError, match=named):
        toolkit.simulate_grid(**kwargs, progress=False)


def test_trace_options_without_a_named_trace_are_an_error_row():
    grid = toolkit.simulate_grid(
        [{**CHAT, "num_requests": 20, "arrival_rate": 1.0, "trace_duration_s": 5.0}], progress=False
    )
    assert "trace_duration_s" in grid.loc[0, "error"]


@pytest.mark.parametrize("client", ["local", "tcp://127.0.0.1:8786", object()])
def test_without_dask_a_client_says_what_to_install(client, monkeypatch):
    for name in [m for m in sys.modules if m == "dask" or m.startswith(("dask.", "distributed"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "dask", None)  # import dask now raises ImportError
    with pytest.raises(ValueError, match=r"client=.*pip install 'llm-serving-capacity-toolkit\[dask\]'"):
        toolkit.simulate_grid([CHAT], client=client, progress=False)
    monkeypatch.setenv("TOOLKIT_DASK_SCHEDULER", "tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match=r"TOOLKIT_DASK_SCHEDULER.*pip install"):
        toolkit.simulate_grid([CHAT], progress=False)


# --- on a LocalCluster of two worker processes -----------------------------------------------------------
def _cluster():
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        pytest.fail("dask[distributed] is missing: make install installs the dask extra", pytrace=False)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    return cluster, Client(cluster)


@pytest.fixture(scope="module")
def dask_client():
    cluster, client = _cluster()
    yield client
    client.close()
    cluster.close()


def test_workers_are_separate_processes(dask_client):
    pids = dask_client.run(os.getpid)
    assert len(pids) == 2 and len(set(pids.values())) == 2 and os.getpid() not in pids.values()


def test_a_cluster_gives_the_same_frame_as_in_process(dask_client):
    scenarios = _scenarios()
    here = toolkit.simulate_grid(scenarios, seed=5, percentiles=(0.5, 0.999), progress=False)
    there = toolkit.simulate_grid(scenarios, seed=5, percentiles=(0.5, 0.999), client=dask_client, progress=False)
    pd.testing.assert_frame_equal(here, there)
    assert there["error"].iloc[7].startswith("ValueError: arrival_rate")
    # one task per scenario, and three per task: the same frame again
    for size in (1, 3):
        again = toolkit.simulate_grid(
            scenarios, seed=5, percentiles=(0.5, 0.999), client=dask_client, chunk_size=size, progress=False
        )
        pd.testing.assert_frame_equal(here, again)


def test_tasks_follow_the_chunk_rule(dask_client):
    from dask.distributed import get_task_stream

    scenarios = [{**CHAT, "num_requests": 20, "arrival_rate": 1.0}] * 10
    with get_task_stream(dask_client) as stream:
        toolkit.simulate_grid(scenarios, client=dask_client, progress=False)
    tasks = [t for t in stream.data if str(t["key"]).startswith("simulate_grid")]
    # 2 worker threads: ceil(10 / (4 x 2)) = 2 scenarios per task, so 5 tasks
    assert len(tasks) == 5


def test_traces_reach_each_worker_once(dask_client, monkeypatch):
    from toolkit._scale.scenarios import named_trace

    dask_client.run(named_trace.cache_clear)
    named = {**H100, "trace": "azure-code-2023", "trace_duration_s": 30.0}
    toolkit.simulate_grid(
        [{**named, "replicas": r} for r in (1, 2, 3, 4, 5, 6)], client=dask_client, chunk_size=1, progress=False
    )
    info = dask_client.run(lambda: named_trace.cache_info())
    assert sum(i.hits + i.misses for i in info.values()) == 6
    assert all(i.misses <= 1 for i in info.values())
    # a frame is scattered once, however many scenarios replay it
    scattered = []
    scatter = dask_client.scatter
    monkeypatch.setattr(dask_client, "scatter", lambda data, **kw: scattered.append(data) or scatter(data, **kw))
    frame = toolkit.load_trace("azure-conv-2023", duration_s=30.0)
    grid = toolkit.simulate_grid(
        [{**H100, "trace": frame, "replicas": r} for r in (1, 2, 3)], client=dask_client, progress=False
    )
    assert grid["error"].isna().all()
    assert len(scattered) == 1 and len(scattered[0]) == 1


def test_the_scheduler_address_in_the_environment_is_used(dask_client, monkeypatch):
    from toolkit._scale.scenarios import named_trace

    dask_client.run(named_trace.cache_clear)
    monkeypatch.setenv("TOOLKIT_DASK_SCHEDULER", dask_client.scheduler.address)
    scenarios = [{**H100, "trace": "azure-code-2023", "trace_duration_s": 20.0, "replicas": r} for r in (1, 2)]
    grid = toolkit.simulate_grid(scenarios, progress=False)
    # the named trace was loaded in the workers, not here
    assert sum(i.misses for i in dask_client.run(lambda: named_trace.cache_info()).values()) >= 1
    monkeypatch.delenv("TOOLKIT_DASK_SCHEDULER")
    pd.testing.assert_frame_equal(grid, toolkit.simulate_grid(scenarios, progress=False))


def test_a_scheduler_address_and_a_local_cluster_give_the_same_frame(dask_client):
    scenarios = [{**CHAT, "num_requests": 200, "arrival_rate": rate} for rate in (2.0, 6.0, 10.0)]
    here = toolkit.simulate_grid(scenarios, progress=False)
    pd.testing.assert_frame_equal(
        here, toolkit.simulate_grid(scenarios, client=dask_client.scheduler.address, progress=False)
    )
    pd.testing.assert_frame_equal(here, toolkit.simulate_grid(scenarios, client="local", progress=False))


def test_a_client_that_is_not_one_is_refused(dask_client):
    with pytest.raises(ValueError, match="client"):
        toolkit.simulate_grid([CHAT], client=42, progress=False)


def test_killing_a_worker_mid_grid_still_returns_every_row():
    cluster, client = _cluster()
    try:
        frame = toolkit.load_trace("azure-conv-2023", duration_s=300.0)
        scenarios = [{**CHAT, "num_requests": 6000, "arrival_rate": float(rate)} for rate in range(4, 20)]
        scenarios += [{**H100, "trace": frame, "replicas": r} for r in (1, 2)]  # scattered data outlives the worker
        expected = toolkit.simulate_grid(scenarios, seed=2, progress=False)
        done: dict[str, pd.DataFrame] = {}
        run = threading.Thread(
            target=lambda: done.update(
                grid=toolkit.simulate_grid(scenarios, seed=2, client=client, chunk_size=2, progress=False)
            )
        )
        victim = cluster.workers[0]
        address, pid = victim.worker_address, victim.pid
        run.start()
        deadline = time.monotonic() + 60
        while not client.processing(workers=[address]).get(address):
            assert time.monotonic() < deadline, "no task ever reached the worker"
            time.sleep(0.01)
        assert run.is_alive()
        os.kill(pid, signal.SIGKILL)
        run.join(timeout=300)
        assert not run.is_alive() and "grid" in done
        grid = done["grid"]
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert len(grid) == len(scenarios) and grid["error"].isna().all()
        pd.testing.assert_frame_equal(grid, expected)
    finally:
        client.close()
        cluster.close()


# --- plan(verify="simulate") -------------------------------------------------------------------------------
PLAN = {
    "arrival_rate": 4.0,
    "prompt_tokens": 512,
    "output_tokens": 64,
    "slo_e2e_ms": 5000,
    "models": "Llama-3.1-8B",
    "gpus": ["H100 SXM", "L40S"],
    "quants": "bf16",
    "backends": ["vllm", "sglang"],
    "tensor_parallel": (1, 2),
    "workload": "steady",
}


def test_verify_simulates_the_cheapest_frontier_plans_of_each_backend(dask_client):
    plans = toolkit.plan(**PLAN, verify="simulate")
    simulated = plans[plans["sim_e2e_ms"].notna()]
    assert len(simulated) and simulated["meets_slo"].all()
    assert simulated.groupby("backend").size().max() <= 8 and set(simulated["backend"]) == {"vllm", "sglang"}
    front = toolkit.pareto(plans[plans["meets_slo"]], minimize=("cost_usd_month", "e2e_p95_ms"), maximize=())
    assert set(simulated.index) <= set(front.index)
    # fixed lengths at light load: the closed form and the simulation agree at the 95th percentile
    assert not simulated["sim_disagrees"].any() and simulated["sim_meets_slo"].all()
    assert (simulated["sim_e2e_ms"] / simulated["e2e_p95_ms"]).between(0.75, 1.25).all()
    # without verify, a preset workload is not simulated
    assert "sim_e2e_ms" not in toolkit.plan(**PLAN).columns
    # the same check on the cluster gives the same table
    pd.testing.assert_frame_equal(plans, toolkit.plan(**PLAN, verify="simulate", client=dask_client))


def test_a_plan_whose_simulation_is_unstable_does_not_meet_its_slos(monkeypatch):
    # the simulations as they come, but each one's queue reported as growing through the run: the
    # latencies then depend on the run's length and no SLO is met, whatever they read
    from toolkit._planning import verify

    real = verify.simulate_grid

    def growing(*args, **kwargs):
        sims = real(*args, **kwargs)
        return sims.assign(stable=pd.array([False] * len(sims), dtype="boolean"))

    monkeypatch.setattr(verify, "simulate_grid", growing)
    plans = toolkit.plan(**PLAN, verify="simulate")
    simulated = plans[plans["sim_e2e_ms"].notna()]
    assert len(simulated) and not simulated["sim_meets_slo"].any()
    assert simulated["warnings"].str.contains("simulation unstable").all()


def test_verify_takes_simulate_or_none():
    with pytest.raises(ValueError, match="verify"):
        toolkit.plan(**PLAN, verify="closed_form")
