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
    "gpus": "_model.catalog",
    "models": "_model.catalog",
    "quantizations": "_model.catalog",
    "kv_dtypes": "_model.catalog",
    "backends": "_model.catalog",
    "engine_scheduling": "_model.catalog",
    "model_from_hf_config": "_model.hf_config",
    # serving model
    "kv_bytes_per_token": "_model.memory",
    "memory": "_model.memory",
    "CostModel": "_model.cost",
    "kv_transfer_ms": "_model.kv_transfer",
    "kv_links": "_model.kv_transfer",
    "cost_model": "_model.serving",
    "ttft_ms": "_model.serving",
    "batching_curve": "_model.curves",
    "efficiency_defaults": "_model.efficiency",
    # speculative decoding
    "expected_accepted_tokens": "_model.speculation",
    "speculative_decoding": "_model.speculative_table",
    "speculation_crossover_batch": "_model.speculative_table",
    "speculative_methods": "_model.speculative_table",
    # queueing
    "erlang_c": "_queueing.closed_forms",
    "queue_wait": "_queueing.closed_forms",
    "workload_presets": "_queueing.closed_forms",
    "simulate": "_queueing.simulator",
    "SimulationResult": "_queueing.sim_result",
    "Disaggregation": "_queueing.disaggregated",
    "compare_wait_models": "_queueing.wait_check",
    # scale-out
    "simulate_grid": "_scale.grid",
    # real traffic
    "load_trace": "_workload.traces",
    "describe_workload": "_workload.describe",
    "WorkloadDescription": "_workload.describe",
    "session_workload": "_workload.sessions",
    # planner
    "plan": "_planning.planner",
    "pareto": "_planning.pareto",
    # sweep harness
    "run_sweep": "_sweep.api",
    "sweep": "_sweep.api",
    "SweepResult": "_sweep.result",
    "scrape_metrics": "_sweep.metrics",
    "LlamaServer": "_sweep.llama_server",
    "replay_trace": "_sweep.replay",
    "profile": "_sweep.profile",
    "ReplayResult": "_sweep.replay_result",
    # charts and report
    "decode_throughput_chart": "_report.charts",
    "decomposition_chart": "_report.charts",
    "batching_chart": "_report.charts",
    "queueing_chart": "_report.charts",
    "frontier_chart": "_report.charts",
    "build_report": "_report.build",
    "notebook_levels": "_report.measure",
    "notebook_setup": "_report.notebook",
    "stat_tiles": "_report.tiles",
    "decomposition_note": "_report.tiles",
    # calibration
    "measure_host": "_model.host",
    "calibrate": "_calibration.calibrate",
    "accuracy": "_calibration.calibrate",
    "predict_sweep": "_calibration.predict",
    "simulate_intervals": "_calibration.intervals",
    "predict_sweep_intervals": "_calibration.intervals",
    # checks against published runs
    "reference_sweep": "_validation.reference_check",
    "compare_with_chimeraforge": "_validation.chimeraforge",
    "accuracy_against_published": "_validation.published",
    "accuracy_summary": "_validation.published",
    "accuracy_by_source": "_validation.by_source",
    "publisher_of": "_validation.by_source",
    "source_provenance": "_validation.by_source",
    "term_provenance": "_validation.by_source",
    "gpu_reference_check": "_validation.gpu_reference",
    "published_accuracy_chart": "_report.accuracy_chart",
    # capacity at an SLO
    "find_capacity": "_capacity.measure",
    "predict_capacity": "_capacity.predict",
    "CapacityResult": "_capacity.result",
    # other tools' runs
    "read_run": "_interop.read",
    "compare_runs": "_interop.compare",
    "RunComparison": "_interop.compare",
    "launch_config": "_interop.launch",
    "run_workload": "_interop.workload",
    "compare_chart": "_report.compare_chart",
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
