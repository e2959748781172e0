"""Benchmark: the local llama-server's capacity at a p99 TTFT and TPOT pair, measured against predicted.

Does what ``make report``'s "Capacity at the SLO" phase does (:mod:`toolkit._report.capacity`), with a
longer search (``BENCH_SEARCH``: 120 measured requests a step where the report takes 30): starts
the local llama-server as the report does (8 slots), samples the host twice and profiles it in two
passes with the second host sample between them (:func:`toolkit.profile`; the report calibrates on
several passes spread over its run, and one pass left the fitted cost of this workload's short prompts
a fifth either way from run to run), calibrates the serving model on that profile,
derives the SLO pair from the calibrated model's unloaded TTFT and TPOT, predicts the capacity
(:func:`toolkit.predict_capacity`) and measures it (:func:`toolkit.find_capacity`, within its budget).
Writes reports/bench/capacity.json:

- the SLO pair and the unloaded latencies it is derived from, the measured capacity with the search's
  bracket (last passing rate, first failing rate) and its clear-verdict interval, the binding SLO, every
  measured step (rate, p99s, verdict, reason), the search's wall time against its budget;
- the prediction compared: the measured search's own design (step size, repeats, tolerance, first rate,
  budget and seed, so each step's requests are those the measured step at that rate sent) simulated on
  the calibrated model, with its steps; the same design with ``SEARCH_REPLICAS`` other seeds, its
  median and 10-90% spread; beside them the steady-state predictions (2000 simulated requests a step) at
  the percentile the measured steps resolve and at the true p99, with each SLO's binding rate alone;
  ``error`` (predicted over measured, minus 1) with ``within_15_percent``, whether the prediction lies
  in the measured bracket, and whether that bracket is narrow enough to judge 15%;
- the host: load average before the server started and before and after the search, other processes'
  CPU share over the search (toolkit._sweep.host_state); busy by the bench scripts' rule
  (:func:`toolkit._validation.refusal.bench_host_busy`) is marked ``host_busy: true`` and its numbers
  are indicative only; ``fit_refused`` says why the report's trust check would present no fit from
  this profile (a busy or unsteady profile), empty when it would.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "reports" / "bench"


def _number(value: object) -> object:
    """A JSON-safe number: NaN and infinities as None, numpy scalars as Python ones."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    value = float(value)
    return round(value, 4) if math.isfinite(value) else None


# The report's search is cut to about a minute (30 requests a step, whose p99 is their slowest, one
# pass at the boundary): one slow request moves its answer by a third. The benchmark takes the time a
# p99 needs: 120 measured requests a step (the p99 is the second slowest), the boundary repeated.
BENCH_SEARCH = {"percentile": 99.0, "min_requests": 120, "repeats": 2, "rel_tolerance": 0.1, "budget_s": 420.0}


def main() -> dict:
    from toolkit._model.host import best_of_hosts, measure_host
    from toolkit._report.capacity import (
        AGREEMENT,
        CAPACITY_SEARCH,
        CAPACITY_WORKLOAD,
        SEARCH_REPLICAS,
        capacity_error,
        measure_capacity,
        search_spread_rps,
    )
    from toolkit._sweep import host_state
    from toolkit._sweep.llama_server import LlamaServer
    from toolkit._sweep.profile import profile
    from toolkit._sweep.profile_cells import combine_passes
    from toolkit._validation.refusal import bench_host_busy, busy_reason, unsteady_reason

    started = dt.datetime.now().isoformat(timespec="seconds")
    load_before = os.getloadavg()[0]  # before the server starts: none of it is the server's
    samples = [measure_host()]
    with LlamaServer(parallel=8) as server:
        passes = [profile(server=server, repeats=1, progress=False)]
        samples.append(measure_host())
        passes.append(profile(server=server, repeats=1, progress=False))
        profiled = combine_passes(passes)
        before = host_state.sample(server.pid)
        t0 = time.perf_counter()
        cap = measure_capacity(server, profiled, best_of_hosts(samples), max_batch=8, search=BENCH_SEARCH)
        phase_s = time.perf_counter() - t0
        state = host_state.conditions(before, host_state.sample(server.pid))
    others = {"capacity search": state["other_cpu_share"]}
    busy = bench_host_busy(load_before, profiled, others, os.cpu_count() or 1)
    m = cap.measured.summary.iloc[0]
    p = cap.predicted.summary.iloc[0]
    strict = cap.predicted_strict.summary.iloc[0]
    error = capacity_error(cap)
    paired = cap.paired.summary.iloc[0]
    predicted = paired["capacity_rps"]
    median, low, high = search_spread_rps(cap)
    steps = cap.measured.steps
    q = f"p{m['percentile']:g}"
    result = {
        "date": started,
        "cpu_count": os.cpu_count(),
        "workload": CAPACITY_WORKLOAD,
        "search": BENCH_SEARCH,
        "report_search": CAPACITY_SEARCH,
        "slo_ms": cap.slos_ms,
        "unloaded_ms": {k: _number(v) for k, v in cap.unloaded_ms.items()},
        "measured": {
            "capacity_rps": _number(m["capacity_rps"]),
            "failed_rps": _number(m["failed_rps"]),
            "interval_rps": [_number(m["interval_low_rps"]), _number(m["interval_high_rps"])],
            "binding_slo": m["binding_slo"],
            "steps": int(m["steps"]),
            "wall_s": _number(m["wall_s"]),
            "budget_s": _number(m["budget_s"]),
            "within_budget": bool(m["wall_s"] <= m["budget_s"]),
            "stopped_early": bool(m["stopped_early"]),
            "reason": m["reason"],
            "warnings": list(cap.measured.warnings),
        },
        "measured_steps": [
            {
                "phase": s["phase"],
                "rate_rps": _number(s["rate_rps"]),
                f"ttft_{q}_ms": _number(s[f"ttft_{q}_ms"]),
                f"tpot_{q}_ms": _number(s[f"tpot_{q}_ms"]),
                "passed": bool(s["passed"]),
                "reason": s["reason"],
                "wall_s": _number(s["wall_s"]),
            }
            for _, s in steps.iterrows()
        ],
        "predicted": {
            "capacity_rps": _number(predicted),
            "failed_rps": _number(paired["failed_rps"]),
            "steps": int(paired["steps"]),
            "stopped_early": bool(paired["stopped_early"]),
            "predicted_steps": [
                {
                    "rate_rps": _number(s["rate_rps"]),
                    f"ttft_{q}_ms": _number(s[f"ttft_{q}_ms"]),
                    f"tpot_{q}_ms": _number(s[f"tpot_{q}_ms"]),
                    "passed": bool(s["passed"]),
                }
                for _, s in cap.paired.steps.iterrows()
            ],  # fmt: skip
        },
        "other_seeds": {
            "median_rps": _number(median),
            "spread_10_90_rps": [_number(low), _number(high)],
            "search_replicas": SEARCH_REPLICAS,
            "replicated_rps": [_number(r) for r in cap.replicated_rps],
        },
        "predicted_steady": {
            "percentile": _number(p["percentile"]),
            "capacity_rps": _number(p["capacity_rps"]),
            "binding_slo": p["binding_slo"],
            "ttft_alone_rps": _number(p["ttft_alone_rps"]),
            "tpot_alone_rps": _number(p["tpot_alone_rps"]),
        },
        "predicted_p99": {
            "capacity_rps": _number(strict["capacity_rps"]),
            "binding_slo": strict["binding_slo"],
            "ttft_alone_rps": _number(strict["ttft_alone_rps"]),
            "tpot_alone_rps": _number(strict["tpot_alone_rps"]),
        },
        "error": _number(error),
        "within_15_percent": bool(abs(error) <= AGREEMENT) if math.isfinite(error) else False,
        "predicted_in_bracket": bool(m["capacity_rps"] <= predicted <= m["failed_rps"]),
        # whether the bracket (first failing over last passing rate) is narrow enough to judge 15% at all
        "bracket_ratio": _number(m["failed_rps"] / m["capacity_rps"]),
        "bracket_resolves_15_percent": bool(m["failed_rps"] <= (1 + AGREEMENT) * m["capacity_rps"]),
        "phase_s": _number(phase_s),
        "host_load_1m_before_server": _number(load_before),
        "host_load_1m_before": _number(state["load_1m_before"]),
        "host_load_1m_after": _number(state["load_1m_after"]),
        "other_cpu_share": _number(state["other_cpu_share"]),
        "host_busy": bool(busy),
        # why the report would present no fit from this profile (its trust check's rule), or ""
        "fit_refused": busy_reason(profiled, others) or unsteady_reason(profiled),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "capacity.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"measured {m['capacity_rps']:.3g} req/s (first failing {m['failed_rps']:.3g}), predicted {predicted:.3g}"
        f" ({error:+.0%}; other seeds: 10-90% {low:.3g}-{high:.3g}); steady state {p['capacity_rps']:.3g}"
        f" at p{p['percentile']:.3g}, {strict['capacity_rps']:.3g} at p99;"
        f" search {m['wall_s']:.0f} s of {m['budget_s']:.0f} s; host busy: {busy}"
    )
    return result


if __name__ == "__main__":
    main()
