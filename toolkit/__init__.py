"""LLM-serving capacity research toolkit.

Pure, DataFrame-returning functions for the serving model (memory, prefill, decode, the
continuous-batching curve), queueing (closed forms and a discrete-event simulator), the capacity
planner and its Pareto frontier, a concurrency-sweep harness for OpenAI-compatible servers, charts,
calibration and reports. Everything public is listed in ``__all__``; the private modules behind it
may change.

Names are imported lazily, so ``import toolkit`` stays fast and a notebook that only plans never
loads the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> private module that defines it
_EXPORTS: dict[str, str] = {
    # catalogs
    "gpus": "_catalog",
    "models": "_catalog",
    "quantizations": "_catalog",
    "kv_dtypes": "_catalog",
    "backends": "_catalog",
    # serving model
    "kv_bytes_per_token": "_memory",
    "memory": "_memory",
    "CostModel": "_serving",
    "cost_model": "_serving",
    "ttft_ms": "_serving",
    "batching_curve": "_serving",
    "efficiency_defaults": "_serving",
    # queueing
    "erlang_c": "_queueing",
    "queue_wait": "_queueing",
    "workload_presets": "_queueing",
    "simulate": "_simulator",
    "SimulationResult": "_simulator",
    "compare_wait_models": "_wait_check",
    # planner
    "plan": "_planner",
    "pareto": "_pareto",
    # sweep harness
    "run_sweep": "_sweep",
    "sweep": "_sweep",
    "SweepResult": "_sweep",
    "scrape_metrics": "_metrics",
    "LlamaServer": "_llama_server",
    # charts and report
    "decode_throughput_chart": "_charts",
    "decomposition_chart": "_charts",
    "batching_chart": "_charts",
    "queueing_chart": "_charts",
    "frontier_chart": "_charts",
    "build_report": "_report",
    # calibration
    "measure_host": "_calibrate",
    "calibrate": "_calibrate",
    "accuracy": "_calibrate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"toolkit.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
