"""Capacity at the SLO on the local llama-server: measured by :func:`toolkit.find_capacity`, predicted by
:func:`toolkit.predict_capacity` from the model calibrated on the report's own profile.

The SLO pair is derived, never typed in: the calibrated model's unloaded TTFT and TPOT of the capacity
workload (one request alone on the server), times ``SLO_MULTIPLES``. The multiples put the capacity at
the knee of the latency curve, where the queue starts to grow: there a rate a tenth too high fails by far
more than the sampling error of a step's slowest request, so the capacity follows the server's service
rate, which the model predicts best. At smaller multiples (TTFT 4 x) the SLO bound on the flat part of
the curve, where p99 TTFT rose by a third while the rate doubled: a tenth off in a tail latency moved the
capacity by a quarter, and 40 simulated runs of the same short search spread over +-40%. TPOT gets a
multiple that binds only near saturation: on this server a request's TPOT is set by the prefills that join
its decode steps, so any second request in flight stretches it, and a small multiple binds on the flat
part again. TTFT therefore binds first (about 4 to 7 requests per second on the hosts that chose them).

The search is cut to fit the report's time (``CAPACITY_SEARCH``, about a minute): short requests, 30
measured requests a step (the p99 of 30 is their slowest; the rule asks 473), one step at the last
passing rate, an 8% bisection tolerance, and a first rate at ``START_SHARE`` of the prediction so the
bracket needs few steps (the prediction only chooses where to start; every verdict is measured), but no
lower than where a step's arrivals take a quarter of the budget.

A step of 30 requests judges its p99 by its slowest request, whose median is the 97.7th percentile of
the latency's distribution, not the 99th, and it starts from an idle server: near capacity its queue
has not grown to its steady state by the step's last request, so a search of short steps finds a
higher rate than a long one. The prediction compared with the measured search is therefore that same
search simulated on the calibrated model, on the same requests: its step size, repeats, tolerance, first
rate, budget and seed, so that each of its steps sends what the measured step at that rate sent (the
search's seed gives each step its arrivals and lengths). The same search with ``SEARCH_REPLICAS`` other
seeds gives the spread of ``SEARCH_QUANTILES``: how far another run of it may land. Two steady-state
predictions (2000 simulated requests a step) are shown beside it: at the percentile a step resolves
(``resolved_percentile``: the median of the order statistic the rule reads) and at the true p99, the
stricter number a long search would approach.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from toolkit._calibration.calibrate import calibrate
from toolkit._capacity.measure import find_capacity
from toolkit._capacity.predict import predict_capacity
from toolkit._capacity.result import CapacityResult
from toolkit._capacity.spec import WARMUP_FRACTION
from toolkit._model.serving import cost_model
from toolkit._queueing.simulator import simulate
from toolkit._report.held_out import MODEL, QUANT
from toolkit._sweep.llama_server import SCHEDULING

__all__: list[str] = []

# the capacity workload: prompts as the server counts them (its chat template's ~25 tokens included)
# and exact outputs; short, so a step of 30 requests at a few req/s takes seconds
CAPACITY_WORKLOAD = {"prompt_tokens": 32, "output_tokens": 8}
# the SLO of each metric, as a multiple of the calibrated model's unloaded value (module docstring)
SLO_MULTIPLES = {"ttft": 12.0, "tpot": 15.0}
CAPACITY_SEARCH = {"percentile": 99.0, "min_requests": 30, "repeats": 1, "rel_tolerance": 0.08, "budget_s": 70.0}
# the measured search's first rate, as a share of the predicted capacity ...
START_SHARE = 0.7
# ... but no lower than the rate at which a step's arrivals take 1/START_FLOOR_STEPS of the budget, so a
# prediction far too low (a fit on a busy host's profile) still leaves the search room for a few steps
START_FLOOR_STEPS = 4
# a chat's first token (BOS) stays in the server's cache from the request before
CACHED_TOKENS = 1
# the measured search's design is simulated this many times with other seeds, and its spread read at these quantiles
SEARCH_REPLICAS = 40
SEARCH_QUANTILES = (0.1, 0.9)
# the measured and predicted capacities agree when they differ by at most this share of the measured
AGREEMENT = 0.15
CSV = "capacity.csv"
STRICT = "predicted_p99"
PAIRED = "predicted_search"


@dataclass(frozen=True)
class CapacityRun:
    """The measured and predicted searches, the SLOs (ms) and the unloaded latencies they derive from."""

    measured: CapacityResult
    paired: CapacityResult  # the measured search simulated on its own requests (module docstring)
    predicted: CapacityResult  # steady state, at the percentile the measured steps resolve
    predicted_strict: CapacityResult  # steady state, at the percentile asked
    slos_ms: dict[str, float]
    unloaded_ms: dict[str, float]
    replicated_rps: tuple[float, ...]  # the capacity each simulated run of the search with another seed found
    # the calibration on the profile that predicted it (calibrate's row), which the trust check reuses
    calibration: pd.DataFrame | None = None


def unloaded_ms(cm: object, *, max_batch: int) -> dict[str, float]:
    """The TTFT and TPOT (ms) the cost model ``cm`` gives one request of ``CAPACITY_WORKLOAD`` alone."""
    lone = pd.DataFrame({"arrival_s": [0.0], **{k: [v] for k, v in CAPACITY_WORKLOAD.items()}})
    lone["cached_tokens"] = CACHED_TOKENS
    sim = simulate(trace=lone, cost=cm, max_batch=max_batch, warmup_fraction=0.0, progress=False, **SCHEDULING)
    return {m: float(sim.requests[f"{m}_s"].iloc[0]) * 1e3 for m in SLO_MULTIPLES}


def resolved_percentile(percentile: float, requests: int) -> float:
    """The percentile a step of ``requests`` resolves when it reads the ``percentile``-th one: the
    median of its order statistic of rank ``ceil(q n)``, a Beta(k, n - k + 1) quantile of the
    distribution (97.7 for the p99 of 30 requests, whose rank-30 statistic is their slowest)."""
    rank = max(math.ceil(percentile / 100 * requests), 1)
    return 100 * float(stats.beta.median(rank, requests - rank + 1))


def measure_capacity(
    server: object, profile: pd.DataFrame, host: pd.DataFrame, *, max_batch: int, search: dict | None = None
) -> CapacityRun:
    """Calibrate on ``profile`` as the trust check does, derive the SLO pair, predict the capacity,
    then search the running ``server`` for it within ``search['budget_s']``. ``search`` (keys of
    ``CAPACITY_SEARCH``) defaults to the report's cut-down search; a benchmark passes a longer one."""
    search = dict(CAPACITY_SEARCH if search is None else search)
    breaks = {key: SCHEDULING[key] for key in ("prefill_breaks", "prefill_start_breaks", "ubatch_tokens")}
    fitted = calibrate(profile, MODEL, host, QUANT, **breaks)
    cm = cost_model(MODEL, host, QUANT, calibration=fitted, max_num_batched_tokens=SCHEDULING["max_num_batched_tokens"])
    unloaded = unloaded_ms(cm, max_batch=max_batch)
    slos = {m: round(SLO_MULTIPLES[m] * unloaded[m], 1) for m in SLO_MULTIPLES}
    common = {f"slo_{m}_ms": v for m, v in slos.items()} | CAPACITY_WORKLOAD
    asked = search["percentile"]
    engine = {"cost": cm, "max_batch": max_batch, "cached_tokens": CACHED_TOKENS, "rate_low_rps": 0.5, **SCHEDULING}
    resolved = resolved_percentile(asked, search["min_requests"])
    predicted = predict_capacity(percentile=resolved, **engine, **common)
    strict = predict_capacity(percentile=asked, **engine, **common)
    common["percentile"] = asked
    measured_requests = search["min_requests"]
    step_requests = measured_requests + math.ceil(measured_requests * WARMUP_FRACTION / (1 - WARMUP_FRACTION))
    floor = step_requests * START_FLOOR_STEPS / search["budget_s"]
    start = predicted.summary["capacity_rps"].iloc[0]
    start = max(START_SHARE * start, floor) if math.isfinite(start) else floor
    steps = {k: v for k, v in search.items() if k != "percentile"}
    measured = find_capacity(server=server, rate_low_rps=start, progress=False, **steps, **common)
    # the measured search's own design, from the rate it started at and within its budget
    design = {k: search[k] for k in ("min_requests", "repeats", "rel_tolerance", "budget_s")}
    design |= {**engine, "rate_low_rps": start}
    paired = predict_capacity(seed=measured.params["seed"], **design, **common)
    replicated = tuple(
        float(predict_capacity(seed=(r + 1) * 2**32, **design, **common).summary["capacity_rps"].iloc[0])
        for r in range(SEARCH_REPLICAS)
    )
    return CapacityRun(measured, paired, predicted, strict, slos, unloaded, replicated, fitted)


def search_spread_rps(cap: CapacityRun) -> tuple[float, float, float]:
    """The median capacity over the simulated runs of the measured search with other seeds, and its
    ``SEARCH_QUANTILES`` (req/s; NaN when no run found a passing rate)."""
    found = np.array([r for r in cap.replicated_rps if math.isfinite(r)])
    if not len(found):
        return math.nan, math.nan, math.nan
    low, high = np.quantile(found, SEARCH_QUANTILES)
    return float(np.median(found)), float(low), float(high)


def capacity_steps(cap: CapacityRun) -> pd.DataFrame:
    """Every step of the four searches, tidy: ``source`` (``measured``; ``predicted_search``, the measured
    search simulated on its own requests; ``predicted`` at steady state at the resolved percentile,
    ``predicted_p99`` at the one asked), ``percentile`` (the one judged), the steps' columns
    (:class:`toolkit.CapacityResult`; the percentile columns renamed ``ttft_q_ms`` ...), then
    ``slo_ttft_ms`` and ``slo_tpot_ms`` (the pair, the same on every row); written as ``capacity.csv``."""
    frames = []
    searches = (
        ("measured", cap.measured), (PAIRED, cap.paired), ("predicted", cap.predicted), (STRICT, cap.predicted_strict)
    )  # fmt: skip
    for source, result in searches:
        q = float(result.summary["percentile"].iloc[0])
        named = {c: c.replace(f"_p{q:g}_", "_q_") for c in result.steps.columns}
        frames.append(result.steps.rename(columns=named).assign(source=source, percentile=q))
    steps = pd.concat(frames, ignore_index=True).assign(**{f"slo_{m}_ms": v for m, v in cap.slos_ms.items()})
    return steps[["source", "percentile", *[c for c in steps.columns if c not in ("source", "percentile")]]]


def capacity_error(cap: CapacityRun) -> float:
    """The capacity the measured search simulated on its own requests found (``cap.paired``) over the
    measured one, minus 1 (NaN when either is missing)."""
    measured = float(cap.measured.summary["capacity_rps"].iloc[0])
    predicted = float(cap.paired.summary["capacity_rps"].iloc[0])
    if not (math.isfinite(measured) and measured > 0 and math.isfinite(predicted)):
        return math.nan
    return predicted / measured - 1
