"""The simulated requests: token counts drawn from a distribution or taken from a trace, and their arrival times."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int, check_number
from toolkit._model.efficiency import MAX_TOKENS
from toolkit._model.resolve import window_message, within_window
from toolkit._model.serving import cost_model
from toolkit._queueing.arrivals import ARRIVALS, MAX_CA2, check_burst, inter_arrival_gaps_s

__all__: list[str] = []

# The simulator keeps a record per request: this ceiling keeps one call within memory and minutes.
MAX_REQUESTS = 10**7


def _draw_tokens(name: str, spec: object, rng: np.random.Generator, n: int) -> np.ndarray:
    if callable(spec):
        values = np.asarray(spec(rng, n))
        if values.shape != (n,):
            raise ValueError(f"{name}: the callable must return {n} values, got shape {values.shape}")
    elif isinstance(spec, (tuple, list)) and spec and isinstance(spec[0], str):
        kind = spec[0]
        if kind == "geometric" and len(spec) == 2:
            mean = check_number(f"{name} geometric mean", spec[1], low=1, high=MAX_TOKENS)
            values = rng.geometric(1.0 / mean, n)
        elif kind == "lognormal" and len(spec) == 3:
            mean = check_number(f"{name} lognormal mean", spec[1], low=1, high=MAX_TOKENS)
            cv = check_number(f"{name} lognormal cv", spec[2], low=0)
            sigma2 = math.log1p(cv * cv)
            values = np.maximum(np.rint(rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)), 1)
        else:
            raise ValueError(
                f"{name} must be an int >= 1, a callable(rng, n), ('geometric', mean) or "
                f"('lognormal', mean, cv); got {spec!r}"
            )
    else:
        return np.full(n, check_int(name, spec, low=1, high=MAX_TOKENS), dtype=np.int64)
    return token_counts(name, values)


def token_counts(name: str, values: np.ndarray) -> np.ndarray:
    """``values`` as int64 token counts, or a ValueError naming ``name``: whole numbers, 1 to 10**9."""
    if not (
        np.all(np.isfinite(values))
        and np.all(values == np.round(values))
        and np.all(values >= 1)
        and np.all(values <= MAX_TOKENS)
    ):
        raise ValueError(f"{name} must all be integers (>= 1 and <= {MAX_TOKENS:g})")
    return values.astype(np.int64)


def _trace_columns(trace: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not isinstance(trace, pd.DataFrame) or len(trace) == 0:
        raise ValueError("trace must be a non-empty DataFrame with arrival_s, prompt_tokens, output_tokens")
    if len(trace) > MAX_REQUESTS:
        raise ValueError(f"trace must have at most {MAX_REQUESTS:.0e} requests (as num_requests), got {len(trace)}")
    missing = {"arrival_s", "prompt_tokens", "output_tokens"} - set(trace.columns)
    if missing:
        raise ValueError(f"trace is missing columns {sorted(missing)}")
    arrival = trace["arrival_s"].to_numpy(dtype=float)
    if not np.all(np.isfinite(arrival)) or np.any(arrival < 0):
        raise ValueError("trace arrival_s must be finite seconds (>= 0)")
    tokens = []
    for col in ("prompt_tokens", "output_tokens"):
        tokens.append(token_counts(f"trace {col}", trace[col].to_numpy(dtype=float)))
    return arrival, tokens[0], tokens[1]


def _cached_tokens(trace: pd.DataFrame | None, prompt: np.ndarray) -> np.ndarray | None:
    """A trace's ``cached_tokens`` (0 to ``prompt_tokens - 1`` each), or None without that column."""
    if trace is None or "cached_tokens" not in trace.columns:
        return None
    cached = trace["cached_tokens"].to_numpy(dtype=float)
    if not (np.all(cached == np.round(cached)) and np.all(cached >= 0) and np.all(cached < prompt)):
        raise ValueError("trace cached_tokens must all be integers from 0 to prompt_tokens - 1")
    return cached.astype(np.int64)


def check_fits(request_tokens: np.ndarray, cm: object, kv_tokens: int, slack_tokens: int, token_budget: int) -> None:
    """Check every request's ``prompt_tokens + output_tokens`` against the model's context window
    and ``kv_tokens``, the KV budget of a replica (each request also holds ``slack_tokens`` of paging slack).

    Requests longer than the window, which a server refuses, raise ``ValueError`` when every request
    is one (lengths given beyond the window) and warn when some are (the tail of a distribution, or
    of a trace): the simulation then serves them as if the window allowed it.
    """
    spec = getattr(cm, "model", None)
    window = spec.get("max_context", math.nan) if isinstance(spec, dict) else math.nan
    largest = int(request_tokens.max())
    over = int(np.count_nonzero(~within_window(window, request_tokens)))
    if over:
        message = (
            f"{window_message(spec, 'prompt_tokens + output_tokens')}: {over} of {request_tokens.size} "
            f"requests exceed it, the longest {largest} tokens"
        )
        if over == request_tokens.size:
            raise ValueError(message)
        warnings.warn(
            f"{message}; simulated as served, where a server refuses them (cap the distribution or leave "
            "them out of the trace)",
            UserWarning,
            stacklevel=4,  # simulate's caller, past its keyword wrapper (toolkit._vocab.keywords)
        )
    if largest + slack_tokens > kv_tokens:
        raise ValueError(
            f"prompt_tokens + output_tokens of a request ({largest}) must fit in the KV budget of "
            f"{kv_tokens} tokens per replica (model, gpu, quant or tensor_parallel too small, or "
            f"max_num_batched_tokens={token_budget} reserving too much activation memory)"
        )


def _load(rng, prompt_tokens, output_tokens, num_requests, arrival_rate, concurrency, arrivals, ca2, trace):
    """Arrival times (None for a closed loop) and token counts, validated."""
    given = [x is not None for x in (arrival_rate, concurrency, trace)]
    if sum(given) != 1:
        raise ValueError("give exactly one of arrival_rate (open loop), concurrency (closed loop) or trace")
    check_choice("arrivals", arrivals, ARRIVALS)
    ca2 = check_number("ca2", ca2, low=0, low_inclusive=False, high=MAX_CA2)
    if arrivals == "poisson" and ca2 != 1.0:
        raise ValueError("ca2 applies to arrivals='gamma' only (Poisson inter-arrivals have cv^2 = 1)")
    if trace is not None:
        if prompt_tokens is not None or output_tokens is not None or num_requests is not None:
            raise ValueError("with a trace, leave out prompt_tokens, output_tokens and num_requests (None)")
        arrival, prompt, output = _trace_columns(trace)
        return arrival, prompt, output
    n = check_int("num_requests", num_requests, low=1, high=MAX_REQUESTS)
    if arrival_rate is not None:
        rate = check_number("arrival_rate", arrival_rate, low=0, low_inclusive=False)
        arrival = np.cumsum(inter_arrival_gaps_s(rng, n, rate, arrivals=arrivals, ca2=ca2))
        if arrivals == "gamma":
            check_burst(n, rate, ca2, n / arrival[-1] if arrival[-1] > 0 else np.inf)
    else:
        check_int("concurrency", concurrency, low=1)
        arrival = None
    prompt = _draw_tokens("prompt_tokens", prompt_tokens, rng, n)
    output = _draw_tokens("output_tokens", output_tokens, rng, n)
    return arrival, prompt, output


def check_breaks(prefill_breaks: object, name: str = "prefill_breaks") -> tuple[int, ...]:
    """``prefill_breaks`` as a tuple of distinct ints >= 1 (ValueError naming the argument ``name``)."""
    if isinstance(prefill_breaks, (str, bytes)) or not isinstance(prefill_breaks, Sequence):
        raise ValueError(f"{name} must be a sequence of integers >= 1, got {prefill_breaks!r}")
    return tuple(sorted({check_int(name, b, low=1, high=MAX_TOKENS) for b in prefill_breaks}))


def _cost(cost, model, gpu, quant, tensor_parallel, kv_dtype, calibration, backend, token_budget):
    if cost is None:
        return cost_model(
            model,
            gpu,
            quant,
            tensor_parallel=tensor_parallel,
            kv_dtype=kv_dtype,
            calibration=calibration,
            backend=backend,
            max_num_batched_tokens=token_budget,
        )
    missing = [a for a in ("step_ms", "kv_budget_tokens", "request_overhead_ms") if not hasattr(cost, a)]
    if missing:
        raise ValueError(f"cost must provide step_ms, kv_budget_tokens and request_overhead_ms; missing {missing}")
    return cost
