"""Predicting a server's capacity at an SLO: the same search as :func:`toolkit.find_capacity`, each step
a run of :func:`toolkit.simulate` on the same generated requests, judged by the same rule."""

from __future__ import annotations

import math
import time
from typing import Any

import pandas as pd

from toolkit._args import check_int, check_number
from toolkit._capacity.result import CapacityResult, build_result
from toolkit._capacity.search import search
from toolkit._capacity.spec import (
    METRICS,
    STEP_SETUP_S,
    Spec,
    check_spec,
    step_deadline_s,
    step_fits,
    step_seed,
    step_trace,
)  # fmt: skip
from toolkit._capacity.step import judge_step

__all__ = ["predict_capacity"]

# simulated steps are cheap: each measures at least this many requests, whatever the rule's minimum
PREDICT_REQUESTS = 2000


def predict_capacity(
    model: object = None,
    gpu: object = None,
    quant: object = None,
    *,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    slo_e2e_ms: float | None = None,
    percentile: float = 99.0,
    prompt_tokens: Any = None,
    output_tokens: Any = None,
    trace: pd.DataFrame | None = None,
    arrivals: str = "poisson",
    ca2: float = 1.0,
    min_requests: int | None = None,
    rate_low_rps: float = 1.0,
    rate_high_rps: float | None = None,
    rel_tolerance: float = 0.02,
    repeats: int = 2,
    drain_s: float | None = None,
    budget_s: float | None = None,
    calibration: object = None,
    cost: object = None,
    max_batch: int = 256,
    max_num_batched_tokens: int = 2048,
    tensor_parallel: int = 1,
    kv_dtype: object = "fp16",
    backend: object = None,
    prefill_breaks: tuple[int, ...] = (),
    prefill_start_breaks: tuple[int, ...] = (),
    ubatch_tokens: int | None = None,
    cached_tokens: int = 0,
    seed: int = 0,
) -> CapacityResult:
    """Predict the highest open-loop arrival rate a server sustains within its latency SLOs.

    The search, the steps' requests and the pass rule are those of :func:`toolkit.find_capacity`
    (see there); each step is :func:`toolkit.simulate` of the step's requests on one replica, and a
    request still running ``drain_s`` after the step's last arrival counts as unfinished, as a
    measured step cancels it. The same search is then run with each SLO alone: the rate at which
    that SLO would bind by itself. Deterministic for a ``seed``.

    Parameters
    ----------
    model, gpu, quant : str or spec
        As for :func:`toolkit.cost_model`; ignored (may be None) when ``cost`` is given.
    slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, percentile, prompt_tokens, output_tokens, trace, arrivals, ca2
        As for :func:`toolkit.find_capacity`.
    min_requests : int or None
        Measured requests per step (30 to 10**6); None takes the larger of the rule's minimum for
        ``percentile`` and 2000 (a simulated step is cheap).
    rate_low_rps, rate_high_rps, rel_tolerance, repeats, drain_s
        As for :func:`toolkit.find_capacity` (``rel_tolerance`` defaults finer, 0.02).
    budget_s : float or None
        None: the search runs to its end. Else the seconds a measured search would have (> 0), to
        predict what a search cut by its budget finds: before each step the search stops, as
        :func:`toolkit.find_capacity` does, when the seconds simulated so far plus the step's arrivals,
        its drain and a step's set-up allowance would pass ``budget_s``; each step counts the time to
        its last answer (or its drain's end) plus that allowance, more than a measured step's set-up
        takes, so where the model's steps last as long as the server's the simulated search stops no
        later than the measured one.
    calibration, cost, max_batch, max_num_batched_tokens, tensor_parallel, kv_dtype, backend
        As for :func:`toolkit.simulate`.
    prefill_breaks, prefill_start_breaks, ubatch_tokens
        How the server cuts a prompt's prefill into chunks and a step into graph passes, as for
        :func:`toolkit.simulate` (the local llama-server's are ``toolkit._sweep.llama_server.SCHEDULING``'s).
    cached_tokens : int
        Tokens at the start of every generated prompt the server finds in its prefix cache (0 to
        10**6; at most the prompt's length less one), as a trace's ``cached_tokens``: a llama-server
        keeps a chat's first token (BOS) from the request before, so 1 there. Ignored with a ``trace``,
        which carries its own.
    seed : int
        Seed of the steps' requests (0 to 2**61); step ``i`` uses ``seed + i * 2**24``, as
        :func:`toolkit.find_capacity`'s steps do.

    Returns
    -------
    CapacityResult
        As :func:`toolkit.find_capacity` returns, with ``ttft_alone_rps``, ``tpot_alone_rps`` and
        ``e2e_alone_rps`` in the summary (NaN for an SLO not given).

    Raises
    ------
    ValueError
        No SLO, or an argument out of range (the message names it).
    """
    from toolkit._model.serving import cost_model

    started = time.perf_counter()
    spec = check_spec(dict(locals()))
    budget = math.inf
    if budget_s is not None:
        budget = check_number("budget_s", budget_s, low=0, low_inclusive=False, high=7 * 86_400)
    cached = check_int("cached_tokens", cached_tokens, low=0, high=10**6)
    if min_requests is None:
        spec = Spec(**{**spec.__dict__, "min_requests": max(spec.rule_requests, PREDICT_REQUESTS)})
    if cost is None:
        cost = cost_model(
            model, gpu, quant, tensor_parallel=tensor_parallel, kv_dtype=kv_dtype, calibration=calibration,
            backend=backend, max_num_batched_tokens=max_num_batched_tokens,
        )  # fmt: skip
    engine = {
        "cost": cost, "max_batch": max_batch, "max_num_batched_tokens": max_num_batched_tokens,
        "prefill_breaks": tuple(prefill_breaks), "prefill_start_breaks": tuple(prefill_start_breaks),
        "ubatch_tokens": ubatch_tokens,
    }  # fmt: skip
    outcome = _search(spec, engine, cached, budget)
    alone = {f"{m}_alone_rps": math.nan for m in METRICS}
    for metric, slo in spec.slos.items():
        if len(spec.slos) == 1:
            alone[f"{metric}_alone_rps"] = outcome.capacity_rps
        else:
            only = Spec(**{**spec.__dict__, "slos": {metric: slo}})
            alone[f"{metric}_alone_rps"] = _search(only, engine, cached, budget).capacity_rps
    params = {"model": model, "gpu": gpu, "quant": quant, "drain_s": spec.drain_s, "seed": spec.seed, **engine}
    params["cached_tokens"] = cached
    result = build_result(
        outcome, spec, wall_s=time.perf_counter() - started, budget_s=budget, params=params, warnings=[]
    )
    for column, value in alone.items():
        result.summary[column] = value
    return result


def _search(spec: Spec, engine: dict[str, Any], cached_tokens: int, budget_s: float):
    from toolkit._queueing.simulator import simulate

    runs: list[float] = []
    simulated_s = [0.0]  # the seconds the steps so far would have taken a measured search

    def measure(rate: float, phase: str) -> dict[str, Any] | None:
        seed = step_seed(spec, len(runs))
        t0 = time.perf_counter()
        trace = step_trace(spec, rate, seed)
        if not step_fits(spec, trace, elapsed_s=simulated_s[0], budget_s=budget_s):
            return None
        runs.append(rate)
        if spec.trace is None and cached_tokens:
            trace["cached_tokens"] = (trace["prompt_tokens"] - 1).clip(lower=0, upper=cached_tokens)
        sim = simulate(
            model=None, gpu=None, quant=None, prompt_tokens=None, output_tokens=None, num_requests=None,
            trace=trace, seed=seed, progress=False, **engine,
        )  # fmt: skip
        req = sim.requests
        end_s = step_deadline_s(spec, trace)
        answered = (req["arrival_s"] + req["e2e_s"]).to_numpy()
        done = answered <= end_s
        frame = pd.DataFrame(
            {
                "arrival_s": req["arrival_s"],
                **{f"{m}_ms": req[f"{m}_s"].where(done) * 1e3 for m in METRICS},
                "finished": done,
            }
        )
        row = judge_step(frame, spec, rate_rps=rate, end_s=end_s)
        simulated_s[0] += min(float(answered.max()), end_s) + STEP_SETUP_S
        return {"seed": seed, **row, "wall_s": time.perf_counter() - t0}

    return search(
        measure,
        rate_low_rps=spec.rate_low_rps,
        rate_high_rps=spec.rate_high_rps,
        rel_tolerance=spec.rel_tolerance,
        repeats=spec.repeats,
    )
