"""Hostile numbers into every public function: a ValueError naming the argument, or a sane result.

For each public callable in ``toolkit.__all__`` that takes numbers, the numeric parameters are read
from its signature (a numeric annotation or default) and each is fed, one at a time, with every other
argument valid:

- values no argument may take (NaN, +-inf, negative numbers, non-integral floats for an ``int``,
  strings, booleans, ``None`` where the annotation does not allow it): the call must raise
  ``ValueError`` whose message names the parameter;
- values that may be legal (zero, huge numbers): the call must either raise that ``ValueError`` or
  return a result whose numbers are finite, except in the columns its docstring says may be infinite
  or missing (``NONFINITE_OK``).

Any other exception (TypeError, OverflowError, ZeroDivisionError, MemoryError ...), a hang, or an
attempt to allocate gigabytes on a huge input fails the property. A name in ``__all__`` must appear
either in ``SPECS`` or in ``NOT_NUMERIC`` (with the reason), so a new public function cannot escape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import re
import resource
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fault_server import FaultServer
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import toolkit

# --- what every spec may rely on --------------------------------------------------------------------
MODEL = "Llama-3.1-8B"
GPU = "H100 SXM"
QUANT = "fp16"
SERVING = {"model": MODEL, "gpu": GPU, "quant": QUANT}
SPECULATION = {"method": "draft_model", "model": "Llama-3.2-1B", "num_speculative_tokens": 4, "acceptance_rate": 0.7}
# a sweep folder the toolkit wrote (tests/data/toolkit_sweep/README.md)
SWEEP_FOLDER = Path(__file__).parent / "data" / "toolkit_sweep"
# a calibrate() row in its smallest form: the fitted parameters with their standard errors
CALIBRATION = {
    "fitted": "mbu,step_overhead_ms",
    "mbu": 0.6,
    "mbu_fit_se": 0.03,
    "step_overhead_ms": 1.0,
    "step_overhead_ms_fit_se": 0.1,
}
# a few finished lanes, shaped like SweepResult.lanes, for calibrate
LANES = pd.DataFrame(
    {
        "in_flight": [1, 1, 2, 2],
        "lane": [0, 1, 0, 1],
        "ttft_ms": [20.0, 21.0, 30.0, 31.0],
        "tpot_ms": [10.0, 10.5, 14.0, 14.5],
        "prompt_tokens": [100.0] * 4,
        "output_tokens": [50.0] * 4,
        "cached_tokens": [0.0] * 4,
        "outcome": ["ok"] * 4,
        "final": [True] * 4,
    }
)


@dataclasses.dataclass
class Spec:
    """How to call one public callable with valid arguments."""

    call: Callable[[], Callable[..., Any]] | None = None  # defaults to getattr(toolkit, name)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)  # valid values for required args
    # params annotated `object`: "array" (a number or an array of them; a mean token count may be
    # fractional) or "int" (integral only); a trailing "?" means None is allowed
    numeric: dict[str, str] = dataclasses.field(default_factory=dict)
    skip_params: dict[str, str] = dataclasses.field(default_factory=dict)  # param -> why not fed
    examples: int = 30
    needs_server: bool = False


def _cost_model_method(method: str) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        return getattr(toolkit.cost_model(**SERVING), method)(**kwargs)

    call.__signature__ = inspect.signature(getattr(toolkit.CostModel, method))  # type: ignore[attr-defined]
    call.__name__ = f"CostModel.{method}"
    return call


SPECS: dict[str, Spec] = {
    "kv_bytes_per_token": Spec(kwargs={"model": MODEL}, numeric={"context_tokens": "array?"}),
    "memory": Spec(kwargs={**SERVING, "context_tokens": 4096}),
    "kv_transfer_ms": Spec(
        kwargs={"model": MODEL, "prompt_tokens": 512},
        numeric={"prompt_tokens": "array"},
        skip_params={
            "gpu": "a catalog name or spec",
            "kv_dtype": "a catalog name or spec",
            "link_gb_s": "math.inf is valid (an ideal link); negatives: test_disaggregation.py",
        },
    ),
    "cost_model": Spec(kwargs=SERVING),
    "CostModel.step_ms": Spec(
        call=lambda: _cost_model_method("step_ms"),
        kwargs={"decode_seqs": 4, "kv_tokens": 4096},
        numeric={
            "decode_seqs": "array",
            "kv_tokens": "array",
            "prefill_tokens": "array",
            "prefill_context_tokens": "array",
        },
    ),
    "CostModel.ttft_ms": Spec(
        call=lambda: _cost_model_method("ttft_ms"),
        kwargs={"prompt_tokens": 512},
        numeric={"prompt_tokens": "array", "cached_tokens": "array"},
    ),
    "CostModel.max_concurrent_seqs": Spec(
        call=lambda: _cost_model_method("max_concurrent_seqs"),
        kwargs={"context_tokens": 4096},
        numeric={"context_tokens": "array"},
    ),
    "ttft_ms": Spec(
        kwargs={**SERVING, "prompt_tokens": 512}, numeric={"prompt_tokens": "array", "cached_tokens": "array"}
    ),
    "batching_curve": Spec(kwargs={**SERVING, "context_tokens": 4096}, numeric={"batch_sizes": "array?"}),
    "expected_accepted_tokens": Spec(
        kwargs={"acceptance_rate": 0.6, "num_speculative_tokens": 3}, numeric={"acceptance_rate": "array"}
    ),
    "speculative_decoding": Spec(
        kwargs={
            "cost": toolkit.cost_model(**SERVING),
            "speculation": SPECULATION,
            "batch_sizes": [1, 8],
            "context_tokens": 1000,
        },
        numeric={"batch_sizes": "array"},
    ),
    "speculation_crossover_batch": Spec(
        kwargs={"cost": toolkit.cost_model(**SERVING), "speculation": SPECULATION, "context_tokens": 1000}
    ),
    "erlang_c": Spec(kwargs={"servers": 2, "offered_load": 1.0}, numeric={"servers": "int", "offered_load": "array"}),
    "queue_wait": Spec(
        kwargs={"arrival_rate": 1.0, "service_time_s": 0.5},
        numeric={"arrival_rate": "array", "service_time_s": "array", "servers": "int", "ca2": "array", "cs2": "array"},
    ),
    "simulate": Spec(
        kwargs={**SERVING, "prompt_tokens": 256, "output_tokens": 32, "num_requests": 30, "arrival_rate": 2.0},
        numeric={"prompt_tokens": "array", "output_tokens": "array"},
        examples=10,
    ),
    "simulate_grid": Spec(
        kwargs={
            "scenarios": [
                {**SERVING, "prompt_tokens": 256, "output_tokens": 32, "num_requests": 30, "arrival_rate": 2.0}
            ],
            "progress": False,
        },
        examples=10,
    ),
    "compare_wait_models": Spec(
        kwargs={"utilizations": (0.5,), "cs2_values": (1.0,), "num_requests": 2000, "replications": 2}, examples=10
    ),
    "plan": Spec(
        kwargs={
            "arrival_rate": 1.0,
            "prompt_tokens": 512,
            "output_tokens": 128,
            "models": [MODEL],
            "gpus": [GPU],
            "quants": [QUANT],
            "backends": ["vllm"],
            "tensor_parallel": (1,),
            "max_replicas": 4,
        },
        examples=10,
    ),
    "calibrate": Spec(
        kwargs={
            "lanes_or_levels": LANES,
            "model": "Gemma-3-270M",
            "gpu": "RTX 4090",
            "quant": "q4_k_m",
            "fit": ("mbu",),
        },
        skip_params={"bounds": "a mapping of (low, high) pairs, not a sequence of numbers"},
        examples=10,
    ),
    "run_sweep": Spec(
        kwargs={"model": "fault-model", "prompts": ["one two three"], "progress": False, "tag_levels": False},
        examples=10,
        needs_server=True,
    ),
    "replay_trace": Spec(
        kwargs={
            "trace": pd.DataFrame({"arrival_s": [0.0, 0.01], "prompt_tokens": [4, 6], "output_tokens": [2, 1]}),
            "progress": False,
        },
        examples=10,
        needs_server=True,
    ),
    "profile": Spec(
        kwargs={
            "model": "fault-model",
            "repeats": 1,
            "context_tokens": (4, 8),
            "prompt_tokens": (4, 6, 8),
            "batch_sizes": (1, 2, 3),
            "output_tokens": 2,
            "progress": False,
        },
        examples=10,
        needs_server=True,
    ),
    "predict_sweep": Spec(
        kwargs={**SERVING, "prompt_tokens": 256, "output_tokens": 16, "lanes": 4, "limits": (1, 2)},
        numeric={"prompt_tokens": "array", "output_tokens": "array", "cached_tokens": "array"},
        examples=10,
    ),
    "reference_sweep": Spec(kwargs={"lanes": 32}, numeric={"lanes": "int"}),
    "load_trace": Spec(kwargs={"name_or_path": "azure-code-2023", "duration_s": 60.0}, examples=10),
    "describe_workload": Spec(
        kwargs={"trace": pd.DataFrame({"arrival_s": [0.0, 1.0, 3.0], "prompt_tokens": 5, "output_tokens": 2})},
        examples=10,
    ),
    "scrape_metrics": Spec(needs_server=True),
    "simulate_intervals": Spec(
        kwargs={
            **SERVING,
            "calibration": CALIBRATION,
            "draws": 3,
            "prompt_tokens": 256,
            "output_tokens": 32,
            "num_requests": 30,
            "arrival_rate": 2.0,
        },
        examples=5,
    ),
    "predict_sweep_intervals": Spec(
        kwargs={
            **SERVING,
            "calibration": CALIBRATION,
            "draws": 3,
            "prompt_tokens": 256,
            "output_tokens": 16,
            "lanes": 4,
            "limits": (1, 2),
        },
        examples=5,
    ),
    "compare_runs": Spec(
        kwargs={"a": str(SWEEP_FOLDER), "b": str(SWEEP_FOLDER), "n_resamples": 100}, numeric={}, examples=5
    ),
    "launch_config": Spec(
        kwargs={
            "plan_row": {
                "model": MODEL,
                "gpu": GPU,
                "quant": "bf16",
                "backend": "vllm",
                "tensor_parallel": 1,
                "batch": 64,
                "replicas": 1,
            },
            "engine": "vllm",
        },
        examples=10,
    ),
    "session_workload": Spec(kwargs={"num_sessions": 5, "session_rate": 1.0}, examples=10),
    "predict_capacity": Spec(
        kwargs={**SERVING, "slo_ttft_ms": 2000.0, "prompt_tokens": 256, "output_tokens": 32, "rate_high_rps": 64.0},
        numeric={"prompt_tokens": "array?", "output_tokens": "array?"},
        examples=5,
    ),
    "find_capacity": Spec(
        kwargs={
            "model": "fault-model",
            "slo_ttft_ms": 1000.0,
            "percentile": 50.0,
            "prompt_tokens": 4,
            "output_tokens": 2,
            "min_requests": 30,
            "rate_high_rps": 40.0,
            "budget_s": 4.0,
            "progress": False,
        },
        numeric={"prompt_tokens": "int?", "output_tokens": "int?"},
        examples=5,
        needs_server=True,
    ),
    "LlamaServer": Spec(),
    "queueing_chart": Spec(
        kwargs={"closed_form": pd.DataFrame({"utilization": [0.5, 0.9], "cs2": [1.0, 1.0], "wait_p95_s": [0.1, 1.0]})}
    ),
}

NOT_NUMERIC: dict[str, str] = {
    "gpus": "catalog listing, no argument",
    "models": "catalog listing, no argument",
    "quantizations": "catalog listing, no argument",
    "kv_dtypes": "catalog listing, no argument",
    "backends": "catalog listing, no argument",
    "efficiency_defaults": "catalog listing, no argument",
    "speculative_methods": "catalog listing, no argument",
    "workload_presets": "catalog listing, no argument",
    "CostModel": "a frozen record built by cost_model (which validates); its methods are covered as CostModel.*",
    "SimulationResult": "a result record returned by simulate",
    "Disaggregation": "a frozen record of pool sizes and link figures; simulate validates each field "
    "(tests/test_disaggregation.py::test_bad_disaggregation_names_the_field)",
    "kv_links": "catalog listing, no argument",
    "SweepResult": "a result record returned by run_sweep",
    "ReplayResult": "a result record returned by replay_trace",
    "sweep": "the coroutine twin of run_sweep, sharing its validation; covered through run_sweep",
    "pareto": "takes a DataFrame; hostile objective values: test_pareto_survives_hostile_frames",
    "decode_throughput_chart": "takes DataFrames and strings",
    "decomposition_chart": "takes DataFrames and strings",
    "batching_chart": "takes a DataFrame and a string",
    "frontier_chart": "takes DataFrames and column names",
    "build_report": "takes paths and strings",
    "measure_host": "measures this machine, no argument",
    "accuracy": "takes two DataFrames",
    "compare_with_chimeraforge": "a fixed comparison table, no argument",
    "gpu_reference_check": "a fixed comparison table; its calibration is cost_model's, checked there",
    "accuracy_against_published": "takes a DataFrame or path; a bad split is a ValueError (test_the_split_is_respected)",
    "accuracy_summary": "takes a DataFrame",
    "accuracy_by_source": "takes DataFrames; an id missing from the measurements is a ValueError (test_by_source.py)",
    "publisher_of": "takes a source string; an empty one is a ValueError (test_by_source.py)",
    "term_provenance": "catalog listing, no argument",
    "source_provenance": "takes a DataFrame or path; a missing column is a ValueError (test_by_source.py)",
    "engine_scheduling": "catalog listing by engine name; an unknown one is a ValueError (test_by_source.py)",
    "model_from_hf_config": "takes a config mapping or path; each bad field is a ValueError (test_hf_config.py)",
    "published_accuracy_chart": "takes a DataFrame and a string",
    "stat_tiles": "takes a DataFrame",
    "decomposition_note": "takes a DataFrame",
    "notebook_levels": "takes a URL, a model name and a folder",
    "WorkloadDescription": "a result record returned by describe_workload",
    "read_run": "takes a path; an unrecognised or partial file is a ValueError or NaN with a reason (test_interop_read)",
    "RunComparison": "a result record returned by compare_runs",
    "compare_chart": "takes a RunComparison (or two runs) and strings",
    "run_workload": "takes a run or a path; a run without requests or with rate levels is a ValueError (test_interop_predict)",
    "CapacityResult": "a result record returned by find_capacity and predict_capacity",
    "notebook_setup": "takes a renderer name; a bad one is a ValueError (test_notebook_setup_refuses_an_unknown_renderer)",
}

_CAPACITY_NONFINITE = (
    "excess",
    # the summary: NaN where no rate passed or failed, an SLO not given, or no budget (a prediction)
    *("capacity_rps", "failed_rps", "interval_low_rps", "interval_high_rps", "budget_s"),
    *(f"slo_{m}_ms" for m in ("ttft", "tpot", "e2e")),
    *(f"{m}_alone_rps" for m in ("ttft", "tpot", "e2e")),
    *(
        f"{metric}_p{q}{bound}_ms"
        for metric in ("ttft", "tpot", "e2e")
        for q in (50, 99)
        for bound in ("", "_low", "_high")
    ),
)
# fields a docstring documents as possibly infinite or missing
NONFINITE_OK: dict[str, tuple[str, ...]] = {
    "cost_model": ("max_batch",),  # CostModel: "the backend's cap on decoded sequences (inf when none)"
    # SimulationResult: "NaN for a closed loop and for fewer than MIN_GROWTH_REQUESTS measured requests"
    "simulate": ("queue_wait_growth",),
    "simulate_grid": ("queue_wait_growth",),
    "simulate_intervals": ("queue_wait_growth",),
    # RunComparison.metrics: a run's levels are set by in-flight or by rate, the other NaN; no interval: NaN
    "compare_runs": ("in_flight", "rate_rps", "a", "b", "diff", "ci_low", "ci_high"),
    # CapacityResult: a percentile counts an unfinished request as infinitely slow, its bounds are -inf/inf
    # where the sample is too small, ``excess`` is NaN for a step that passed; the summary's NaNs above
    **{name: _CAPACITY_NONFINITE for name in ("find_capacity", "predict_capacity")},
}
# results that document NaN as "cannot be known" throughout (SweepResult); infinities still fail
NAN_MEANS_UNKNOWN = {"run_sweep", "replay_trace", "profile", "find_capacity"}


# --- discovering numeric parameters -------------------------------------------------------------------
_NUM = re.compile(r"\b(int|float|Real|Integral|number)\b")
_SEQ = re.compile(r"\b(Sequence|Iterable|tuple|list)\[")


def _resolve(name: str) -> Callable[..., Any] | None:
    spec = SPECS.get(name, Spec())
    try:
        return spec.call() if spec.call is not None else getattr(toolkit, name)
    except (ImportError, AttributeError):
        return None


def _kind(param: inspect.Parameter) -> tuple[str, bool] | None:
    """('int' | 'float' | 'seq', None allowed) for a numeric parameter, else None. A sequence whose
    default is empty ('seq' with an empty default, e.g. no prefill breaks) may be empty: 'seq0'."""
    ann = "" if param.annotation is inspect.Parameter.empty else str(param.annotation)
    default = param.default
    optional = "None" in ann or "Optional" in ann or default is None
    if "bool" in ann and not _NUM.search(ann.replace("bool", "")):
        return None
    if ann and _NUM.search(ann):
        if _SEQ.search(ann) and not re.search(r"(^|\|)\s*(int|float)\s*($|\|)", ann):
            return ("seq0" if default == () or default == [] else "seq"), optional
        return ("int" if "float" not in ann else "float"), optional
    if not ann and isinstance(default, (int, float)) and not isinstance(default, bool):
        return ("int" if isinstance(default, int) else "float"), optional
    return None


def _cases() -> list[Any]:
    cases = []
    for name in sorted(SPECS):
        fn = _resolve(name)
        if fn is None:
            cases.append(pytest.param(name, "-", "int", False, marks=pytest.mark.skip(f"{name} not implemented yet")))
            continue
        target = fn.__init__ if inspect.isclass(fn) else fn
        for pname, param in inspect.signature(target).parameters.items():
            if pname in ("self", "cls") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            declared = SPECS[name].numeric.get(pname)
            kind = (declared.rstrip("?"), declared.endswith("?")) if declared else _kind(param)
            if kind is None:
                continue
            marks = []
            if pname in SPECS[name].skip_params:
                marks.append(pytest.mark.skip(SPECS[name].skip_params[pname]))
            cases.append(pytest.param(name, pname, *kind, marks=marks, id=f"{name}-{pname}"))
    return cases


CASES = _cases()


# --- the hostile values ---------------------------------------------------------------------------
def _reject_values(kind: str, optional: bool) -> st.SearchStrategy[Any]:
    """Values no numeric parameter may accept.

    Booleans count as a wrong type for scalar parameters; array parameters go through numpy, which
    reads them as 0 and 1, so they are not fed there.
    """
    scalar = st.one_of(
        st.sampled_from([math.nan, math.inf, -math.inf]),
        st.floats(max_value=-1e-6, allow_nan=False, allow_infinity=False),
        st.integers(max_value=-1),
        st.text(max_size=4),
        st.builds(object),
    )
    if kind != "array":
        scalar = st.one_of(scalar, st.booleans())
    if not optional:
        scalar = st.one_of(scalar, st.none())
    if kind == "int":
        scalar = st.one_of(scalar, st.floats(min_value=0.01, max_value=1e6).filter(lambda x: not x.is_integer()))
    if kind in ("seq", "seq0"):
        bad = st.lists(scalar, min_size=1, max_size=3).map(lambda xs: [1, *xs])
        return bad if kind == "seq0" else st.one_of(st.just([]), bad)
    if kind == "array":
        return st.one_of(scalar, st.lists(scalar, min_size=1, max_size=3).map(lambda xs: [1, *xs]))
    return scalar


def _edge_values(kind: str) -> st.SearchStrategy[Any]:
    """Values that may be legal: the result must then be sane.

    Huge integers go past int64 (a crash in numpy is not a ValueError); huge floats stop at 1e100,
    so that a quadratic term of a sane formula still fits in a double.
    """
    scalar = st.one_of(
        st.just(0),
        st.integers(min_value=10**12, max_value=10**30),
        st.floats(min_value=1e12, max_value=1e100) if kind != "int" else st.integers(min_value=10**12),
    )
    if kind in ("seq", "seq0"):
        return st.lists(scalar, min_size=1, max_size=2)
    return scalar


# --- bounding one call --------------------------------------------------------------------------------
class _Hung(Exception):
    pass


@contextlib.contextmanager
def _bounded(seconds: float = 2.0, extra_bytes: int = 1 << 30):
    """Fail (not hang, not swap) when a call runs for minutes or allocates gigabytes."""

    def alarm(signum: int, frame: Any) -> None:
        raise _Hung(f"still running after {seconds} s")

    old_handler = signal.signal(signal.SIGALRM, alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * resource.getpagesize()
    limit = vm_bytes + extra_bytes if hard == resource.RLIM_INFINITY else min(hard, vm_bytes + extra_bytes)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _call(name: str, pname: str, value: Any, server: FaultServer | None) -> Any:
    spec = SPECS[name]
    kwargs = dict(spec.kwargs)
    if name in ("run_sweep", "replay_trace", "profile", "find_capacity"):
        kwargs.setdefault("base_url", server.base_url)
        if name != "find_capacity":  # bounded by its budget_s
            kwargs.setdefault("timeout_s", 5)
        if name == "run_sweep":
            kwargs.setdefault("limits", (1,))
    elif name == "scrape_metrics":
        kwargs.setdefault("metrics_url", f"{server.root_url}/metrics")
    kwargs[pname] = value
    fn = _resolve(name)
    with _bounded():
        return fn(**kwargs)


def _assert_names(exc: ValueError, pname: str, value: Any) -> None:
    assert pname in str(exc), f"ValueError for {pname}={value!r} does not name {pname!r}: {exc}"


def _numbers(result: Any, name: str) -> list[tuple[str, float]]:
    """(where, value) for every number a result carries, skipping documented non-finite columns."""
    allowed = NONFINITE_OK.get(name, ())
    out: list[tuple[str, float]] = []
    if isinstance(result, pd.DataFrame):
        if "stable" in result.columns:  # an unstable queue's waits are documented as inf
            waits = [c for c in result.columns if c.startswith("wait_")]
            stable = result["stable"].astype(object).fillna(False).astype(bool)  # unknown: not stable
            result = result.assign(**{c: result[c].where(stable, 0.0) for c in waits})
        for col in result.select_dtypes(include=[np.number]).columns:
            if col not in allowed:
                out += [(col, float(v)) for v in result[col].to_numpy(dtype=float)]
    elif isinstance(result, pd.Series):
        out += [(str(k), float(v)) for k, v in result.items() if isinstance(v, (int, float, np.number))]
    elif isinstance(result, np.ndarray):
        out += [("array", float(v)) for v in np.asarray(result, dtype=float).ravel()]
    elif isinstance(result, (int, float, np.number)) and not isinstance(result, bool):
        out.append(("value", float(result)))
    elif dataclasses.is_dataclass(result):
        for f in dataclasses.fields(result):
            if f.name not in allowed:
                out += _numbers(getattr(result, f.name), name)
    elif hasattr(result, "summary") and isinstance(result.summary, pd.DataFrame):
        out += _numbers(result.summary, name)
    return out


def _assert_sane(result: Any, name: str, pname: str, value: Any) -> None:
    bad = [(where, v) for where, v in _numbers(result, name) if not math.isfinite(v)]
    if name in NAN_MEANS_UNKNOWN:
        bad = [(where, v) for where, v in bad if not math.isnan(v)]
    assert not bad, f"{name}({pname}={value!r}) returned non-finite {bad[:5]} without documenting it"


# --- the properties -------------------------------------------------------------------------------
_SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a hang or slow failure is reported once
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def server():
    with FaultServer(tokens=2, token_delay_s=0) as srv:
        yield srv


@pytest.mark.parametrize(("name", "pname", "kind", "optional"), CASES)
def test_impossible_values_raise_value_error_naming_the_argument(name, pname, kind, optional, server):
    @settings(max_examples=SPECS[name].examples, **_SETTINGS)
    @given(value=_reject_values(kind, optional))
    def prop(value):
        with pytest.raises(ValueError) as info:
            _call(name, pname, value, server)
        _assert_names(info.value, pname, value)

    prop()


@pytest.mark.parametrize(("name", "pname", "kind", "optional"), CASES)
def test_edge_values_give_value_error_or_a_finite_result(name, pname, kind, optional, server):
    @settings(max_examples=max(5, SPECS[name].examples // 2), **_SETTINGS)
    @given(value=_edge_values(kind))
    def prop(value):
        try:
            result = _call(name, pname, value, server)
        except ValueError as exc:
            _assert_names(exc, pname, value)
            return
        _assert_sane(result, name, pname, value)

    prop()


def test_every_public_name_is_covered():
    missing = [n for n in toolkit.__all__ if n not in SPECS and n not in NOT_NUMERIC]
    assert not missing, f"public names with neither a property spec nor a reason: {missing}"
    stale = [n for n in [*SPECS, *NOT_NUMERIC] if n.split(".")[0] not in toolkit.__all__]
    assert not stale, f"specs for names that are not public: {stale}"


@pytest.mark.parametrize("name", sorted(NOT_NUMERIC))
def test_names_declared_non_numeric_take_no_numbers(name):
    fn = _resolve(name)
    if fn is None:
        pytest.skip(f"{name} not implemented yet")
    if not callable(fn) or (inspect.isclass(fn) and dataclasses.is_dataclass(fn)):
        return
    target = fn.__init__ if inspect.isclass(fn) else fn
    numeric = [p for p, param in inspect.signature(target).parameters.items() if p != "self" and _kind(param)]
    assert not numeric or name in ("sweep",), f"{name} takes numbers {numeric}: give it a spec in SPECS"


@settings(max_examples=30, **_SETTINGS)
@given(
    values=st.lists(
        st.tuples(
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**12), 10**12)),
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**12), 10**12)),
            st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none()),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_pareto_survives_hostile_frames(values):
    df = pd.DataFrame(values, columns=["cost_usd_month", "e2e_p95_ms", "quality"]).astype(float)
    try:
        front = toolkit.pareto(df)
    except ValueError as exc:
        assert any(c in str(exc) for c in df.columns), exc
        return
    assert set(front.index) <= set(df.index) and len(front) >= 1
    assert front["pick"].map(lambda p: isinstance(p, str)).all()
