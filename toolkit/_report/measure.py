"""The run a report shows: the recorded llama-server run, a fresh local measurement, or a named server's."""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pandas as pd

from toolkit._data import load_csv
from toolkit._model.host import best_of_hosts, measure_host
from toolkit._report.held_out import HELD_OUT_TRACE, HELD_OUT_TRACE_NAME, HELD_OUT_UTILISATION, held_out_time_scale
from toolkit._sweep import host_state
from toolkit._sweep.host_state import BUSY_OPENING, BUSY_OTHER_SHARE
from toolkit._sweep.profile_cells import combine_passes as combine_profile_passes
from toolkit._sweep.prompts import lane_prompts
from toolkit._sweep.result import combine_passes
from toolkit._validation.closed_loop import RECORDED_HOST, RECORDED_LANES, RECORDED_LEVELS
from toolkit._workload.traces import load_trace

__all__ = ["notebook_levels"]


# The local sweep has the recorded one's lanes and limits (data/llamacpp_sweep_gemma3_270m_conditions.csv)
# with half its output tokens (64, not 128), run twice so that each level has a spread: about two minutes
# on 2 cores. Half the tokens keep the report inside its time (the sweep was a third of it) and still give
# each lane 63 decode steps, twice the profile's decode cells (32 tokens). Its two passes alternate with
# the profile's (_measure_local says why).
LOCAL_SWEEP = {"lanes": 8, "limits": (1, 2, 4, 8), "max_tokens": 64, "repeats": 2}
RECORDED_CONDITIONS = "llamacpp_sweep_gemma3_270m_conditions.csv"


RECORDED_SHOWN = (
    "date",
    "cpu_model",
    "cpu_cores",
    "load_average_1min_before",
    "llama_server_version",
    "server_command",
    "model",
    "lanes",
    "limits",
    "max_tokens",
    "temperature",
)


REMOTE_SWEEP = {"lanes": 32, "limits": (1, 2, 4, 8, 16, 32), "max_tokens": 256}


@dataclass
class _Run:
    """One measured (or recorded) sweep and how it was obtained."""

    levels: pd.DataFrame
    lanes: pd.DataFrame | None
    label: str
    conditions: dict[str, str] = field(default_factory=dict)
    # the machine a local Gemma-3-270M llama-server ran on (a measure_host() row): set only for runs
    # the serving model can predict, which get the predicted-against-measured section
    host: pd.DataFrame | None = None
    # the local server's profile (toolkit.profile), the held-out trace replay (ReplayResult), and the
    # share of the host's CPU other processes used during the sweep and the replay
    profile: pd.DataFrame | None = None
    replay: object = None
    others: dict[str, float] = field(default_factory=dict)
    # the replay's stretch and the utilisation the calibrated model predicted for it
    replay_load: dict[str, float] = field(default_factory=dict)
    # the profile passes right before and right after the replay, which its prediction is calibrated on
    replay_passes: tuple[pd.DataFrame, pd.DataFrame] | None = None
    # the capacity at the SLO, measured and predicted (toolkit._report.capacity.CapacityRun)
    capacity: object = None
    # seconds each phase of obtaining the run took (``server``, ``profile``, ``sweep``, ``host``,
    # ``replay_stretch``, ``replay``, ``capacity``), summed over its passes; build_report adds its own phases
    phase_s: dict[str, float] = field(default_factory=dict)
    # tokens every lane's prompt shares and each lane's prompt tokens, untagged, as the server counts them
    # (toolkit._report.prefix_check); None: not recorded (a server without llama-server's tokenizer
    # endpoints, or an older run)
    shared_prefix_tokens: tuple[int, list[int]] | None = None


def _recorded_run() -> _Run:
    """The llama-server sweep recorded in the package data (by the sweep harness, with its host)."""
    recorded = load_csv(RECORDED_CONDITIONS).set_index("key")["value"]
    conditions = {"source": f"the run recorded in the package data ({RECORDED_LEVELS}); no server was started"}
    conditions.update({key: str(recorded[key]) for key in RECORDED_SHOWN if key in recorded.index})
    levels = load_csv(RECORDED_LEVELS).drop(columns=["source"], errors="ignore")
    label = "llama-server, Gemma-3-270M (recorded)"
    return _Run(levels, load_csv(RECORDED_LANES), label, conditions, host=load_csv(RECORDED_HOST))


def _measure_local(out: Path) -> _Run:
    """Profile the local llama-server, sweep it, and replay a held-out trace slice against it.

    The sweep's passes and the profile's passes alternate over the run (sweep, profile, sweep,
    profile: a profile pass after each of the ``LOCAL_SWEEP["repeats"]`` sweep passes), then the
    replay and one more profile pass, so that a pass brackets the replay on each side
    (:mod:`toolkit._validation.replay_drift`). The server warms itself up when it loads the model, so
    the run opens with the sweep rather than a profile pass: three passes of the profile hold the
    drift the fit's intervals need, and a fourth cost half a minute of the report's eight. The
    intervals of the fit (the drift between the profile's passes, :mod:`toolkit._calibration.fit`)
    and of the verdicts (the spread of a level's repeats, :mod:`toolkit._sweep.verdict_interval`)
    are measured from repeats; run back to back, repeats a few seconds apart miss the drift of the
    server's speed over minutes (about 10% on an idle 2-core VM), which moves consecutive runs apart
    by several of those intervals. Spread over the run, the repeats sample
    the same minutes another run would, at the same cost.

    Last, the capacity at the SLO is searched (:mod:`toolkit._report.capacity`), predicted by the model
    calibrated on the whole profile, as the trust check calibrates it.
    """
    # the HTTP client (httpx) loads only when a server is measured, not for a recorded report
    from toolkit._report.capacity import measure_capacity
    from toolkit._sweep.llama_server import LlamaServer, server_version
    from toolkit._sweep.profile import profile
    from toolkit._sweep.replay import replay_trace

    # the host's rates are the best of samples spread over the run (best_of_hosts says why): one before
    # the server starts, one after the first sweep pass and one after the last, each while the server
    # is idle
    phase_s: dict[str, float] = {}

    def timed(phase: str, fn: Callable, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            phase_s[phase] = phase_s.get(phase, 0.0) + time.perf_counter() - start

    samples = [timed("host", measure_host)]
    label = "llama-server, Gemma-3-270M (this machine)"
    started = time.perf_counter()
    with LlamaServer(parallel=LOCAL_SWEEP["lanes"]) as server:
        phase_s["server"] = time.perf_counter() - started
        pid = server.pid
        passes: list[pd.DataFrame] = []
        phase_s["profile"] = 0.0

        def between_sweep_passes() -> None:
            passes.append(timed("profile", profile, server=server, repeats=1, progress=False))
            samples.append(timed("host", measure_host))

        # the sweep's own time: its passes less the profile passes and host samples run between them
        before = time.perf_counter() - phase_s["profile"] - phase_s["host"]
        run = _measure(server.base_url, out, LOCAL_SWEEP, label, server_pid=pid, between=between_sweep_passes)
        phase_s["sweep"] = time.perf_counter() - phase_s["profile"] - phase_s["host"] - before
        profiled = combine_profile_passes(passes)
        host = best_of_hosts(samples)
        swept = host_state.sample(pid)
        scale, load = timed("replay_stretch", held_out_time_scale, profiled, host, max_batch=LOCAL_SWEEP["lanes"])
        trace = load_trace(HELD_OUT_TRACE_NAME, **HELD_OUT_TRACE, time_scale=scale)
        run.replay = timed("replay", replay_trace, trace, server=server, progress=False)
        replayed = host_state.sample(pid)
        passes.append(timed("profile", profile, server=server, repeats=1, progress=False))
        run.profile = combine_profile_passes(passes)
        run.capacity = timed("capacity", measure_capacity, server, run.profile, host, max_batch=LOCAL_SWEEP["lanes"])
        threads = server.threads
    run.conditions["server"] = (
        f"llama.cpp llama-server ({server_version()}), --parallel {server.parallel}, --threads {threads}"
        " (one core left to the client)"
    )
    run.conditions["profile"] = (
        f"toolkit.profile, {len(passes)} passes over its design: one after each of the sweep's passes (the"
        " last of them right before the replay) and one right after the replay"
    )
    run.conditions["held-out traffic"] = (
        f"{len(trace)} requests: {HELD_OUT_TRACE_NAME} from {HELD_OUT_TRACE['start_s']} s for"
        f" {HELD_OUT_TRACE['duration_s']} s, times x{scale:g}, lengths x{HELD_OUT_TRACE['token_scale']}; the"
        f" stretch puts the calibrated model's utilisation at {load:.0%} (target {HELD_OUT_UTILISATION:.0%})"
    )
    run.replay_load = {"time_scale": scale, "predicted_utilisation": load}
    run.host = host
    run.replay_passes = (passes[-2], passes[-1])
    run.others["trace replay"] = host_state.conditions(swept, replayed)["other_cpu_share"]
    run.phase_s = phase_s
    return run


def _measure(
    base_url: str,
    out: Path,
    settings: dict,
    label: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    server_pid: int | None = None,
    between: Callable[[], None] | None = None,
) -> _Run:
    """Sweep ``base_url`` with the standard lane set; the sweep's own files go to ``out/sweep``.

    With ``between``, the sweep's repeats run as separate passes over every level (files in
    ``out/sweep/pass<k>``), ``between()`` called after each, and are combined into one sweep
    (:func:`toolkit._sweep.result.combine_passes` says why); else the sweep runs its repeats itself.

    Whether the host was busy is judged by :mod:`toolkit._sweep.host_state` over the sweep: the CPU
    time other processes took (``server_pid``'s and this client's own excluded), or, where that
    cannot be told (no ``/proc``, or no ``server_pid``: a server not started here), the load average.
    """
    from toolkit._sweep.api import run_sweep  # the HTTP client loads only when a server is swept

    system_prompt, prompts = lane_prompts(settings["lanes"])
    started = dt.datetime.now().isoformat(timespec="seconds")
    cores = os.cpu_count() or 1
    before = host_state.sample(server_pid)
    repeats = settings.get("repeats", 1)
    common = {
        "limits": settings["limits"],
        "max_tokens": settings["max_tokens"],
        "system_prompt": system_prompt,
        "api_key": api_key,
    }
    if between is None:
        result = run_sweep(base_url, model, prompts, out_dir=out / "sweep", repeats=repeats, **common)
    else:
        passes = []
        for k in range(repeats):
            passes.append(run_sweep(base_url, model, prompts, out_dir=out / "sweep" / f"pass{k + 1}", **common))
            between()
        result = combine_passes(passes)
    state = host_state.conditions(before, host_state.sample(server_pid))
    load, other = state["load_1m_before"], state["other_cpu_share"]
    conditions = {
        "source": f"measured {started}" + (f" (stopped early: {result.stopped})" if result.stopped else ""),
        "server": _display_url(base_url),
        "model": str(result.params.get("model", model)),
        "sweep": f"{settings['lanes']} lanes at in-flight limits {', '.join(map(str, settings['limits']))},"
        f" max {settings['max_tokens']} output tokens, {repeats} run(s) per level"
        + (", each a pass over every level, spread over the run," if between is not None else ",")
        + " prompts from toolkit._sweep.prompts",
        "host load": f"{load:.2f} (1-minute load average when the sweep started, the server's and this"
        f" client's threads included where they run here; {cores} cores)",
    }
    if math.isfinite(other):
        conditions["other processes"] = (
            f"{other:.1%} of the host's CPU during the sweep (CPU steal included; the server's and this client's"
            f" own CPU time excluded; above {BUSY_OTHER_SHARE:.0%} counts as busy)"
        )
    if state["busy"]:
        what = (
            f"other processes took {other:.0%} of the host's CPU during the sweep (above {BUSY_OTHER_SHARE:.0%})"
            if math.isfinite(other)
            else f"the load average was {max(load, state['load_1m_after']):.2f} on {cores} cores during the sweep"
        )
        conditions["warning"] = (
            BUSY_OPENING + f"{what}, so other work competed with the server and the client; treat every figure"
            " here as indicative only."
        )
    from toolkit._report.prefix_check import shared_prefix_tokens

    run = _Run(result.levels, result.lanes, label, conditions)
    run.others["sweep"] = other
    run.shared_prefix_tokens = shared_prefix_tokens(base_url, system_prompt, prompts, api_key)
    return run


def _display_url(url: str) -> str:
    """``url`` without any user:password part."""
    parts = urlsplit(url)
    if not parts.hostname:
        return url
    return urlunsplit(parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else "")))


async def notebook_levels(
    base_url: str | None = None, model: str | None = None, sweep_dir: str | Path | None = None
) -> tuple[pd.DataFrame, str]:
    """The sweep levels a notebook draws, and their label: a folder's, a fresh sweep's or the recorded run's.

    Parameters
    ----------
    base_url : str, optional
        A server to sweep now (8 lanes, limits 1, 2, 4, 8, 64 output tokens) when no ``sweep_dir``.
    model : str, optional
        Model name the server expects (None: the first ``/v1/models`` lists).
    sweep_dir : str or pathlib.Path, optional
        A folder holding a sweep's ``levels.csv`` (a sweep's ``out_dir`` or a report folder); wins
        over ``base_url``.

    Returns
    -------
    tuple of (pandas.DataFrame, str)
        ``SweepResult.levels`` columns (``in_flight``, ``wall_s`` in s, ``dec_tok_s`` in tokens/s,
        ...) and a label naming the run. With neither argument: the recorded llama-server run.
    """
    if sweep_dir:
        return pd.read_csv(Path(sweep_dir) / "levels.csv", comment="#"), f"the run in {Path(sweep_dir).name}"
    if base_url:
        from toolkit._sweep.api import sweep  # the HTTP client loads only when a server is swept

        system_prompt, prompts = lane_prompts(LOCAL_SWEEP["lanes"])
        result = await sweep(
            base_url,
            model,
            prompts,
            limits=LOCAL_SWEEP["limits"],
            max_tokens=LOCAL_SWEEP["max_tokens"],
            system_prompt=system_prompt,
        )
        return result.levels, f"{result.params.get('model', model)} at {_display_url(base_url)}"
    run = _recorded_run()
    return run.levels, run.label
