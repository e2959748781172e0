"""What a capacity search is asked, checked once, and the open-loop requests of each of its steps.

Measured and predicted searches share this: the same SLOs, percentile, request counts and workload,
so a step at a given rate and seed sends (or simulates) the same requests either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int, check_number
from toolkit._queueing.arrivals import ARRIVALS, arrival_offsets_s
from toolkit._queueing.workload import MAX_REQUESTS, _draw_tokens, _trace_columns
from toolkit._workload.traces import _rescale

__all__: list[str] = []

METRICS = ("ttft", "tpot", "e2e")
# the first requests of a step are its warm-up, left out of its percentiles (as in toolkit.simulate):
# they meet an empty queue, which the rest of an open-loop run does not
WARMUP_FRACTION = 0.1
MAX_RATE_RPS = 1e6
# step i's seed is seed + i * SEED_STRIDE: a replay words request j's prompt from its seed + j, so
# steps one apart would otherwise send the same prompts shifted by one request, and a server's prefix
# cache would serve a later step's prompts from an earlier step's (the stride exceeds MAX_REQUESTS)
SEED_STRIDE = 2**24
MAX_SEED = 2**61
# a step's own set-up (the session's model and prompt-length look-ups) on top of its arrivals and drain:
# find_capacity keeps it free in its budget before a step, and predict_capacity counts it after each one
STEP_SETUP_S = 2.0
# lengths of the generated requests when neither they nor a trace are given
DEFAULT_PROMPT_TOKENS, DEFAULT_OUTPUT_TOKENS = 128, 64


@dataclass(frozen=True)
class Spec:
    """A checked search: SLOs (ms, by metric), percentile, requests per step and the workload."""

    slos: dict[str, float]
    percentile: float
    min_requests: int
    rule_requests: int
    rate_low_rps: float
    rate_high_rps: float | None
    rel_tolerance: float
    repeats: int
    prompt_tokens: Any
    output_tokens: Any
    trace: pd.DataFrame | None
    arrivals: str
    ca2: float
    drain_s: float
    seed: int

    @property
    def warmup_requests(self) -> int:
        return math.ceil(self.min_requests * WARMUP_FRACTION / (1 - WARMUP_FRACTION))

    @property
    def step_requests(self) -> int:
        """Requests sent per step: ``min_requests`` measured plus the warm-up before them."""
        return self.min_requests + self.warmup_requests


def check_spec(a: dict[str, Any]) -> Spec:
    """The search's arguments from ``a`` (a call's locals), each checked; ValueError naming the bad one."""
    from toolkit._capacity.rule import rule_requests

    slos = {m: a[f"slo_{m}_ms"] for m in METRICS if a[f"slo_{m}_ms"] is not None}
    if not slos:
        raise ValueError("give at least one SLO: slo_ttft_ms, slo_tpot_ms or slo_e2e_ms (ms, > 0)")
    slos = {m: check_number(f"slo_{m}_ms", v, low=0, low_inclusive=False, high=1e9) for m, v in slos.items()}
    percentile = check_number("percentile", a["percentile"], low=50, high=99.99)
    rule = rule_requests(percentile)
    n = rule if a["min_requests"] is None else check_int("min_requests", a["min_requests"], low=30, high=10**6)
    low = check_number("rate_low_rps", a["rate_low_rps"], low=0, low_inclusive=False, high=MAX_RATE_RPS)
    high = a["rate_high_rps"]
    if high is not None:
        high = check_number("rate_high_rps", high, low=low, low_inclusive=False, high=MAX_RATE_RPS)
    trace = a["trace"]
    if trace is not None:
        _trace_columns(trace)
        if a["prompt_tokens"] is not None or a["output_tokens"] is not None:
            raise ValueError("give prompt_tokens and output_tokens, or a trace, not both")
        if len(trace) < 2 or float(trace["arrival_s"].max()) <= float(trace["arrival_s"].min()):
            raise ValueError("trace must hold at least 2 requests at different arrival_s to have a rate")
    else:
        rng = np.random.default_rng(0)
        for name, default in (("prompt_tokens", DEFAULT_PROMPT_TOKENS), ("output_tokens", DEFAULT_OUTPUT_TOKENS)):
            a[name] = default if a[name] is None else a[name]
            _draw_tokens(name, a[name], rng, 1)
    arrivals = check_choice("arrivals", a["arrivals"], ARRIVALS)
    ca2 = check_number("ca2", a["ca2"], low=0, low_inclusive=False, high=1e3)
    spec = Spec(
        slos=slos,
        percentile=percentile,
        min_requests=n,
        rule_requests=rule,
        rate_low_rps=low,
        rate_high_rps=high,
        rel_tolerance=check_number("rel_tolerance", a["rel_tolerance"], low=0.001, high=1.0),
        repeats=check_int("repeats", a["repeats"], low=1, high=100),
        prompt_tokens=a["prompt_tokens"],
        output_tokens=a["output_tokens"],
        trace=trace,
        arrivals=arrivals,
        ca2=ca2,
        drain_s=0.0,
        seed=check_int("seed", a["seed"], low=0, high=MAX_SEED),
    )
    if spec.step_requests > MAX_REQUESTS:
        raise ValueError(f"min_requests gives {spec.step_requests} requests a step, above {MAX_REQUESTS}")
    drain = a.get("drain_s")
    drain = default_drain_s(spec) if drain is None else check_number("drain_s", drain, low=0, high=86_400)
    return Spec(**{**spec.__dict__, "drain_s": drain})


def default_drain_s(spec: Spec) -> float:
    """How long a step waits after its last arrival for requests to finish: twice the latency the SLOs
    allow one request (TTFT plus TPOT for each further token of the longest output, or E2E), at least
    2 s. A request still running then has missed its SLO anyway."""
    longest = _longest_output(spec)
    allowed = [spec.slos["e2e"]] if "e2e" in spec.slos else []
    if "ttft" in spec.slos or "tpot" in spec.slos:
        allowed.append(spec.slos.get("ttft", 0.0) + spec.slos.get("tpot", 0.0) * (longest - 1))
    return max(2.0, 2 * max(allowed) / 1e3)


def _longest_output(spec: Spec) -> int:
    if spec.trace is not None:
        return int(spec.trace["output_tokens"].max())
    drawn = _draw_tokens("output_tokens", spec.output_tokens, np.random.default_rng(spec.seed), 1000)
    return int(drawn.max())


def step_fits(spec: Spec, trace: pd.DataFrame, *, elapsed_s: float, budget_s: float) -> bool:
    """Whether a step of ``trace`` (its arrivals, then ``spec.drain_s``) and its set-up allowance end
    within ``budget_s`` after ``elapsed_s``: the rule that stops a measured search and its prediction."""
    return elapsed_s + step_deadline_s(spec, trace) + STEP_SETUP_S <= budget_s


def step_deadline_s(spec: Spec, trace: pd.DataFrame) -> float:
    """When a step stops waiting for its requests: its last arrival plus ``spec.drain_s`` (s from its start)."""
    return float(trace["arrival_s"].iloc[-1]) + spec.drain_s


def step_seed(spec: Spec, step: int) -> int:
    """The seed of step ``step`` (0, 1, ...): of its arrivals, lengths and prompt words."""
    return spec.seed + step * SEED_STRIDE


def step_trace(spec: Spec, rate_rps: float, seed: int) -> pd.DataFrame:
    """The ``spec.step_requests`` requests of one step at ``rate_rps``: ``arrival_s`` (s from the
    step's start), ``prompt_tokens``, ``output_tokens`` (and a trace's ``cached_tokens``).

    Lengths: drawn from ``prompt_tokens`` and ``output_tokens``, with gaps from ``arrivals``/``ca2``
    scaled so their mean is exactly ``1 / rate_rps``.
    A trace: repeated end to end until long enough, then its rate scaled to ``rate_rps`` without
    changing its time axis, as :func:`toolkit.load_trace`'s ``rate_scale`` does (thinned below the
    trace's own rate, superposed with shifted copies above it), so its bursts keep their shape.
    """
    n = spec.step_requests
    rng = np.random.default_rng(seed)
    if spec.trace is None:
        gaps = np.diff(arrival_offsets_s(n + 1, rate_rps, arrivals=spec.arrivals, ca2=spec.ca2, seed=seed))
        # scaled so the step offers exactly its rate: Poisson arrivals given their count in a window
        # are uniform in it, so this is still a Poisson sequence, minus the noise of its count
        arrival = np.concatenate([[0.0], np.cumsum(gaps * (n / (rate_rps * gaps.sum())))[:-1]])
        prompt = _draw_tokens("prompt_tokens", spec.prompt_tokens, rng, n)
        output = _draw_tokens("output_tokens", spec.output_tokens, rng, n)
        return pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output})
    kept = ["arrival_s", "prompt_tokens", "output_tokens", "cached_tokens"]
    base = spec.trace[[c for c in kept if c in spec.trace]]
    start = float(base["arrival_s"].min())
    # the trace's window: its span plus one mean gap, so copies end to end keep its rate
    window = (float(base["arrival_s"].max()) - start) * len(base) / (len(base) - 1)
    factor = rate_rps / (len(base) / window)
    copies = math.ceil(1.05 * n / (factor * len(base))) + 1  # thinning keeps about factor * rows
    tiled = pd.concat(
        [base.assign(arrival_s=base["arrival_s"] - start + i * window) for i in range(copies)], ignore_index=True
    )
    scaled, _ = _rescale(tiled, factor, copies * window, rng)
    scaled = scaled.sort_values("arrival_s", kind="stable").head(n).reset_index(drop=True)
    scaled["arrival_s"] -= float(scaled["arrival_s"].iloc[0])
    return scaled
