"""Measure this machine as if it were an accelerator, so the serving model can be run on it."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from toolkit._data import load_csv
from toolkit._stats import pooled_sd

__all__ = ["measure_host"]

# A 256 MiB source array: larger than any per-core cache, and one copy moves 512 MiB (read + write),
# so a best-of-a-few measurement stays well under a second.
_COPY_BYTES = 256 * 2**20
_GEMM_N = 2048
_REPEATS = 3
# A sample whose rate lies more than this share below the best sample's fell in a dip (best_of_hosts):
# on a 2-core VM the GEMM's dips read 135-234 GFLOP/s against 288-317 outside them.
DIP_SHARE = 0.2
# the host probe's bests in pairs of report runs in a row (best_of_hosts)
RECORDED_PROBE_RUNS = "host_probe_runs.csv"


def measure_host() -> pd.DataFrame:
    """Measure this machine's memory bandwidth and matrix throughput as a device spec.

    The row can be passed wherever a GPU name is accepted (``gpu=`` of ``cost_model``,
    ``batching_curve``, ``ttft_ms``, ``simulate`` and ``plan``), so the serving model can predict what
    a CPU server such as llama.cpp's ``llama-server`` does on this host.

    Takes about a second: a few 512 MiB copies and a few 2048^3 float32 products.

    Returns
    -------
    pandas.DataFrame
        One row with the columns

        - ``name``: ``"host-cpu: <CPU model name>"``.
        - ``bandwidth_gb_s``: memory bandwidth in GB/s (1e9 bytes), the best of a few copies of a
          256 MiB float64 array with ``numpy.copyto``, counting bytes read plus bytes written. The
          copy runs on one thread, so it is a floor on what all cores together can stream.
        - ``matmul_gflops``: float32 GEMM throughput in GFLOP/s, ``2 n^3`` over the best time of a
          few ``2048 x 2048`` products through numpy's BLAS (all its threads).
        - ``fp16_tflops``: ``matmul_gflops / 1000``. The serving model's compute term divides FLOPs
          by ``fp16_tflops``; on a CPU the float32 GEMM rate is the matrix rate that is actually
          available, so it stands in for the accelerator's dense FP16 rate.
        - ``bandwidth_gb_s_se``, ``fp16_tflops_se``: the standard uncertainty of ``bandwidth_gb_s``
          and ``fp16_tflops`` (same units); NaN from one sample, whose spread over minutes is not
          measured (:func:`best_of_hosts` estimates it from several).
        - ``fp8_tflops``: NaN (no FP8 matrix unit is measured).
        - ``memory_gb``: physical memory in GB (1e9 bytes), from ``os.sysconf``.
        - ``cores``: CPUs this process may run on.
        - ``price_usd_hour``: NaN. A machine one already runs has no on-demand price; NaN makes
          every cost computed from it NaN rather than a misleading zero.
        - ``source``: ``"measured on this machine <ISO date>"``.
    """
    bandwidth = _copy_bandwidth_gb_s()
    gflops = _gemm_gflops()
    return pd.DataFrame(
        [
            {
                "name": f"host-cpu: {_cpu_model_name()}",
                "bandwidth_gb_s": bandwidth,
                "matmul_gflops": gflops,
                "fp16_tflops": gflops / 1000.0,
                "bandwidth_gb_s_se": float("nan"),
                "fp16_tflops_se": float("nan"),
                "fp8_tflops": float("nan"),
                "memory_gb": _memory_bytes() / 1e9,
                "cores": _cores(),
                "price_usd_hour": float("nan"),
                "source": f"measured on this machine {_dt.date.today().isoformat()}",
            }
        ]
    )


def best_of_hosts(rows: list[pd.DataFrame]) -> pd.DataFrame:
    """One host row from several ``measure_host()`` rows of the same machine: the best rate of each,
    with its uncertainty.

    A rate measured on a shared or virtual machine dips for seconds at a time (on a 2-core VM, 2 of
    15 GEMM samples taken 5 s apart fell from 300-317 to 165-210 GFLOP/s, one dip, while the copy held
    within 10%). A peak spec is the machine's capability, not one moment's dip, so the best of samples
    spread over a run is the reference efficiencies are shares of: a run whose single sample fell in
    a dip would otherwise report a higher ``mfu`` for the same server.

    That best still moves from run to run, and an efficiency fitted against it moves with it. Its
    standard uncertainty (type A) is the standard deviation of the samples that did not fall in a
    dip (those at least ``1 - DIP_SHARE`` of the best): the spread of the machine's rate over the
    minutes the samples span, with the dips, which say nothing about the capability, left out. The
    best of ``n`` samples from that spread varies less than one sample does (about 0.75 of the
    standard deviation for 3 normal samples), so this errs on the wide side. The data it rests on
    (``tests/benchmarks/bench_host_probe.py``, 12 samples 15 s apart on an idle 2-core VM, recorded
    in reports/bench/host_probe.json): GEMM 291-312 GFLOP/s outside one dip
    at 234, copies 20.0-23.2 GB/s; the spread of all of them 2.3% (GEMM) and 3.6% (copy) of the
    best; each window of 3 consecutive samples, as the report takes them, got 0.6-3.8% and
    2.0-6.5%, while the windows' bests moved by 0.4% and 0.9% (standard deviation over the 4
    windows), so over minutes the estimate is wide, as the small number of samples (2 degrees of
    freedom from 3) makes prudent; consecutive report runs see their GEMM bests a few percent apart
    (3.6-4.6% in ``host_probe_runs.csv``), drift over longer than a window that this estimate does
    not promise to cover.

    So that spread, from 2 degrees of freedom, is never taken below the run-to-run spread of a best
    measured beforehand (:func:`run_to_run_rel_sd`): the pooled variance of a well-characterised
    measurement stands in for a small sample's own (GUM, JCGM 100:2008, 4.2.4). Over the pairs of
    consecutive report runs in ``host_probe_runs.csv`` the GEMM's best moved by 4.0% and the copy's
    by 1.8% (relative standard deviations), while single runs' own spreads ranged from 0.8% to 13%: a
    run whose few samples happened to agree claimed an interval the next run's ``mfu`` fell outside
    (GEMM bests 0.303 and 0.329 TFLOPS, the first with 0.8% of its own).

    Parameters
    ----------
    rows : list of pandas.DataFrame
        One or more rows as :func:`measure_host` returns them, taken on one machine.

    Returns
    -------
    pandas.DataFrame
        The first row with ``bandwidth_gb_s``, ``matmul_gflops`` and ``fp16_tflops`` replaced by their
        maxima over ``rows``; ``bandwidth_gb_s_se`` and ``fp16_tflops_se`` their standard
        uncertainties (the larger of the samples' spread outside a dip and the recorded run-to-run
        spread; the latter alone with fewer than two samples outside a dip); ``source`` saying how
        many samples it is the best of.
    """
    if not rows:
        raise ValueError("rows: at least one measure_host() row is required, got none")
    names = {str(row["name"].iloc[0]) for row in rows}
    if len(names) > 1:
        raise ValueError(f"rows: every row must come from one machine, got {sorted(names)}")
    best = rows[0].copy()
    for column in ("bandwidth_gb_s", "matmul_gflops", "fp16_tflops"):
        best[column] = max(float(row[column].iloc[0]) for row in rows)
    floor = run_to_run_rel_sd()
    for column in ("bandwidth_gb_s", "fp16_tflops"):
        own = probe_se([float(row[column].iloc[0]) for row in rows])
        best[f"{column}_se"] = float(np.fmax(own, floor[column] * float(best[column].iloc[0])))
    best["source"] = f"{best['source'].iloc[0]}; best of {len(rows)} samples"
    return best


def probe_se(rates: list[float]) -> float:
    """The standard uncertainty of the best of ``rates`` (:func:`best_of_hosts`): the standard
    deviation (``ddof=1``) of the rates at least ``1 - DIP_SHARE`` of the best; NaN with fewer than
    two of them."""
    x = np.asarray(rates, dtype=float)
    top = x[x >= (1 - DIP_SHARE) * x.max()] if x.size else x
    return float(np.std(top, ddof=1)) if top.size >= 2 else float("nan")


@cache
def run_to_run_rel_sd() -> dict[str, float]:
    """The relative standard deviation of a best rate between report runs in a row, per column
    (``bandwidth_gb_s``, ``fp16_tflops``), pooled over the pairs of ``RECORDED_PROBE_RUNS``: with
    ``d`` the difference of a pair's natural logs, ``sqrt(sum(d**2) / (2 k))`` over its ``k`` pairs
    (the standard deviation of the logs pooled over the pairs)."""
    runs = load_csv(RECORDED_PROBE_RUNS)
    return {
        column: pooled_sd(np.log(runs[column].astype(float)).groupby(runs["pair"]))[0]
        for column in ("bandwidth_gb_s", "fp16_tflops")
    }


def _copy_bandwidth_gb_s() -> float:
    src = np.ones(_COPY_BYTES // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch: page faults are not bandwidth
    best = min(_timed(np.copyto, dst, src) for _ in range(_REPEATS))
    return 2 * src.nbytes / best / 1e9


def _gemm_gflops() -> float:
    rng = np.random.default_rng(0)
    a = rng.random((_GEMM_N, _GEMM_N), dtype=np.float32)
    b = rng.random((_GEMM_N, _GEMM_N), dtype=np.float32)
    a @ b  # warm-up: BLAS thread pool start-up
    best = min(_timed(np.matmul, a, b) for _ in range(_REPEATS))
    return 2 * _GEMM_N**3 / best / 1e9


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _cpu_model_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def _memory_bytes() -> float:
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
