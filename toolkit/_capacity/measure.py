"""Measuring a server's capacity at an SLO: the search of :mod:`toolkit._capacity.search`, each step an
open-loop replay (:func:`toolkit.replay_trace`) of arrivals generated at the step's rate."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pandas as pd

from toolkit._args import check_number
from toolkit._capacity.result import CapacityResult, build_result
from toolkit._capacity.search import StopSearch, search
from toolkit._capacity.spec import Spec, check_spec, step_deadline_s, step_fits, step_seed, step_trace
from toolkit._capacity.step import judge_step

__all__ = ["find_capacity"]


def find_capacity(
    base_url: str | None = None,
    model: str | None = None,
    *,
    server: Any = None,
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
    budget_s: float = 1800.0,
    rate_low_rps: float = 1.0,
    rate_high_rps: float | None = None,
    rel_tolerance: float = 0.1,
    repeats: int = 2,
    drain_s: float | None = None,
    exact_output: bool = True,
    seed: int = 0,
    api_key: str | None = None,
    api_key_env: str | None = "TOOLKIT_API_KEY",
    extra_body: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> CapacityResult:
    """Measure the highest open-loop arrival rate a server sustains within its latency SLOs.

    A rate passes when, over a step of at least ``min_requests`` measured requests sent open loop at
    that rate, the ``percentile``-th percentile of every metric given an SLO is within it and the
    queue is not unstable (TTFT growing through the step by more than the simulator's
    ``UNSTABLE_GROWTH``, 0.05 s per s). The search brackets the capacity by doubling (or halving)
    the rate from ``rate_low_rps``, bisects the bracket to ``rel_tolerance``, and runs the last
    passing rate until it has ``repeats`` steps, all of which must pass. Each step is
    :func:`toolkit.replay_trace` of a generated arrival sequence: its first tenth is warm-up, left
    out of the percentiles. A request unfinished ``drain_s`` after the step's last arrival is
    cancelled and counts as infinitely slow.

    Parameters
    ----------
    base_url : str or None
        The server's root, ``http://host:port``. With neither ``base_url`` nor ``server`` a local
        :class:`toolkit.LlamaServer` is started for the search and stopped after it.
    model : str or None
        Model name sent with every request; None takes the first one ``/v1/models`` lists.
    server : toolkit.LlamaServer or None
        A running server to measure (instead of ``base_url``).
    slo_ttft_ms, slo_tpot_ms, slo_e2e_ms : float or None
        Latency targets in ms (> 0): time to first token, time per output token after the first,
        end-to-end. At least one is required; None leaves that metric unchecked.
    percentile : float
        The percentile each SLO applies to (50 to 99.99).
    prompt_tokens, output_tokens : int, tuple or callable
        Lengths of the generated requests, as :func:`toolkit.simulate` takes them (an int, or
        ``("geometric", mean)``, ``("lognormal", mean, cv)``, ``callable(rng, n)``); None is 128 and
        64 without a ``trace``, and must be None with one.
    trace : pandas.DataFrame or None
        A request trace (``arrival_s``, ``prompt_tokens``, ``output_tokens``; see
        :func:`toolkit.load_trace`) whose lengths and burst shape each step replays, its rate scaled
        to the step's (thinned or superposed, as ``load_trace``'s ``rate_scale``).
    arrivals : {"poisson", "gamma"}
        Inter-arrival law of generated requests; ``ca2`` is the gamma's squared coefficient of
        variation (> 0; 1 is Poisson).
    ca2 : float
        See ``arrivals``.
    min_requests : int or None
        Measured requests per step (30 to 10**6); None takes the rule's minimum for ``percentile``
        (473 for p99, 46 for p90: see ``CapacityResult.summary['rule_requests']``). Fewer than the
        rule is allowed, with a warning.
    budget_s : float
        Limit on the whole search in seconds from the call (> 0): a step that would not end within it
        is not started, and the result keeps every step measured so far and says it stopped early.
    rate_low_rps : float
        The first rate tried (req/s, > 0).
    rate_high_rps : float or None
        The highest rate tried (> ``rate_low_rps``); None doubles until a step fails.
    rel_tolerance : float
        Bisection stops when the first failing rate is within this fraction above the last passing
        one (0.001 to 1).
    repeats : int
        Steps the last passing rate must pass (1 to 100).
    drain_s : float or None
        Wait after a step's last arrival for its requests to finish (s, >= 0); None is twice the
        latency the SLOs allow one request, at least 2 s.
    exact_output : bool
        Ask for exactly ``output_tokens`` (see :func:`toolkit.replay_trace`).
    seed : int
        Seed of arrivals, lengths and prompt words (0 to 2**61); step ``i`` uses ``seed + i * 2**24``,
        so no two steps send the same prompt.
    api_key, api_key_env, extra_body, progress
        As for :func:`toolkit.replay_trace`.

    Returns
    -------
    CapacityResult
        ``steps`` (one row per step), ``summary`` (one row: ``capacity_rps``, ``failed_rps``, the
        interval, ``binding_slo``, ``wall_s``, ``stopped_early``, ``reason`` ...), ``params`` and
        ``warnings``; the columns are listed on :class:`toolkit.CapacityResult`.

    Raises
    ------
    ValueError
        No SLO, or an argument out of range (the message names it).
    ConnectionError
        Nothing answered at ``<base_url>/v1/models`` for the first step. A server that stops
        answering later ends the search early instead, keeping the steps measured.
    """
    started = time.perf_counter()
    spec = check_spec(dict(locals()))
    budget = check_number("budget_s", budget_s, low=0, low_inclusive=False, high=7 * 86_400)
    for name, value in (("exact_output", exact_output), ("progress", progress)):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    if server is not None and base_url is not None:
        raise ValueError("give base_url or server, not both")
    target = base_url if server is None else server.base_url
    send = dict(
        model=model, exact_output=exact_output, api_key=api_key, api_key_env=api_key_env,
        extra_body=extra_body, progress=progress,
    )  # fmt: skip
    if target is None:
        from toolkit._sweep.llama_server import LlamaServer

        with LlamaServer() as local:
            return _search(spec, local.base_url, send, started, budget)
    return _search(spec, target, send, started, budget)


def _search(spec: Spec, base_url: str, send: dict, started: float, budget: float) -> CapacityResult:
    from toolkit._sweep.replay import replay_trace

    warnings: list[str] = []

    def measure(rate: float, phase: str) -> dict[str, Any] | None:
        seed = step_seed(spec, len(steps_run))
        trace = step_trace(spec, rate, seed)
        deadline = step_deadline_s(spec, trace)
        if not step_fits(spec, trace, elapsed_s=time.perf_counter() - started, budget_s=budget):
            return None
        t0 = time.perf_counter()
        try:
            replay = replay_trace(
                trace, base_url, timeout_s=deadline, deadline_s=deadline, max_lateness_ms=50.0, seed=seed, **send
            )
        except OSError as exc:  # ConnectionError and TimeoutError among them
            if not steps_run:
                raise  # nothing measured: the server is not there, a user error
            raise StopSearch(f"the server stopped answering ({exc}); every step measured so far is kept") from exc
        steps_run.append(rate)
        req = replay.requests
        frame = pd.DataFrame(
            {
                "arrival_s": req["sent_s"].fillna(req["arrival_s"]),
                "ttft_ms": req["ttft_ms"],
                "tpot_ms": req["tpot_ms"],
                "e2e_ms": req["e2e_ms"],
                "finished": req["outcome"].eq("ok"),
            }
        )
        end_s = float(req["end_s"].max()) if req["end_s"].notna().any() else deadline
        row = judge_step(frame, spec, rate_rps=rate, end_s=end_s)
        fell_behind = bool(replay.summary["fell_behind"].iloc[0])
        if fell_behind:
            warnings.append(f"at {rate:.4g} req/s the client sent late: that step's arrivals were smoother")
        errors = int((~req["outcome"].eq("ok")).sum())
        return {"seed": seed, **row, "client_fell_behind": fell_behind, "errors": errors,
                "wall_s": time.perf_counter() - t0}  # fmt: skip

    steps_run: list[float] = []
    outcome = search(
        measure,
        rate_low_rps=spec.rate_low_rps,
        rate_high_rps=spec.rate_high_rps,
        rel_tolerance=spec.rel_tolerance,
        repeats=spec.repeats,
    )
    params = {"base_url": base_url, "model": send["model"], "drain_s": spec.drain_s, "seed": spec.seed}
    return build_result(
        outcome, spec, wall_s=time.perf_counter() - started, budget_s=budget, params=params, warnings=warnings
    )
