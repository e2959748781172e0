"""Discrete-event simulator of a continuous-batching LLM server.

The engine is scheduled per iteration, the way vLLM's is. At the start of every step a replica
1. makes room for this step's decode tokens: while the KV cache cannot take one more token for every decoding sequence
   it preempts the most recently admitted running request (recompute: its KV is freed and it re-enters the front of
   the queue; on readmission it prefills prompt plus generated tokens again), counting each preemption;
2. spends a token budget of ``max_num_batched_tokens``: one token per decoding sequence, then prompt chunks of the
   requests still prefilling (admission order), then admits waiting requests (FCFS, stopping at the first that does
   not fit) while fewer than ``max_batch`` run, their whole prompt fits in the KV cache and budget is left;
3. takes the step's duration from the toolkit's one cost model, ``CostModel.step_ms(decode_seqs, kv_tokens,
   prefill_tokens, prefill_context_tokens, last_chunks)``, summed over graph passes of ``ubatch_tokens`` where given.
A request whose last prompt chunk is prefilled emits its first token at the end of that step, then decodes one token
per step until ``output_tokens``. KV is counted in tokens; each running sequence is also charged
``kv_block_tokens - 1`` tokens of paging slack (its last, partly filled block).

Speed: between events (an arrival that can be admitted, a prefill chunk, a completion, the KV cache filling up) the
batch does not change, so a whole run of decode steps is advanced at once. Its duration is the sum of
``step_ms(n, K + i n)`` over the steps, in closed form from a piecewise-linear fit of ``step_ms`` in ``kv_tokens``
(per batch size ``n``), exact wherever ``step_ms`` is piecewise linear in ``kv_tokens``, as the roofline
``max(memory, compute)`` of linear terms is: each piece is accepted only when 9 probes lie on its chord to 1e-10
relative. Steps that prefill are computed one call each."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from toolkit._args import check_choice, check_int, check_number
from toolkit._model.efficiency import MAX_BATCH, MAX_TOKENS
from toolkit._model.resolve import resolve_backend
from toolkit._model.validity import simulation_flag
from toolkit._progress import check_progress, progress_bar
from toolkit._queueing.clock import _Clock
from toolkit._queueing.disaggregated import simulate_disaggregated
from toolkit._queueing.engine import _Engine
from toolkit._queueing.prefix_segments import SLOT_PROMPT_SIMILARITY, host_cache_tokens, prefix_caches
from toolkit._queueing.sim_result import SimulationResult, request_records, summarize
from toolkit._queueing.speculative import speculative_engine
from toolkit._queueing.workload import _cached_tokens, _cost, _draw_tokens, _load, check_breaks, check_fits
from toolkit._vocab.keywords import positional_deprecated

__all__ = ["simulate"]

_ROUTING = ("round_robin", "least_loaded", "shared_queue", "prefix_affinity")
# Validation ceilings: a Python record per request and per replica, within memory and minutes.
MAX_REPLICAS = 10**4
# runs from this many requests show a progress bar by default (on a terminal): a few seconds
LONG_REQUESTS = 200_000

# Default spread of a fixed output length in a closed loop: real runs end requests at EOS or at
# slightly different lengths, so clients drift out of phase; issue 17's 70B FP8 TP2 runs at 25-50
# clients came out +160-197% on TTFT in lock-step and about half that with a 5% spread.
CLOSED_LOOP_OUTPUT_CV = 0.05


@positional_deprecated
def simulate(
    model: object = None,
    gpu: object = None,
    quant: object = None,
    *,
    prompt_tokens: object = None,
    output_tokens: object = None,
    num_requests: int | None = None,
    arrival_rate: float | None = None,
    concurrency: int | None = None,
    max_batch: int = 256,
    max_num_batched_tokens: int = 2048,
    tensor_parallel: int = 1,
    replicas: int = 1,
    seed: int = 0,
    arrivals: str = "poisson",
    ca2: float = 1.0,
    trace: pd.DataFrame | None = None,
    routing: str = "round_robin",
    kv_dtype: object = "fp16",
    calibration: object = None,
    cost: object = None,
    warmup_fraction: float | None = None,
    backend: object = None,
    progress: bool | None = None,
    output_cv: float | None = None,
    prefill_breaks: Sequence[int] = (),
    prefill_start_breaks: Sequence[int] = (),
    ubatch_tokens: int | None = None,
    slot_prompt_similarity: float = SLOT_PROMPT_SIMILARITY,
    prompt_cache_mib: float | None = None,
    speculation: object = None,
    disaggregation: object = None,
) -> SimulationResult:
    """Simulate requests through replicas of a continuous-batching LLM server.

    Each replica schedules iteration by iteration like vLLM (see the module docstring): FCFS
    admission bounded by ``max_batch`` and the KV cache, chunked prefill within a per-step token
    budget alongside one decode token per running sequence, recompute preemption when the KV cache
    runs out. Step durations come from :func:`toolkit.cost_model` (``CostModel.step_ms``), the same
    model as ``batching_curve`` and ``ttft_ms``. Each request also pays ``request_overhead_ms``
    (HTTP, tokenisation) before it reaches the engine's queue; it counts in TTFT and end-to-end
    latency but occupies no engine time. Results are reproducible for a given ``seed``.

    Parameters
    ----------
    model, gpu, quant : str or spec
        As for :func:`toolkit.cost_model`; left out when ``cost`` is given. Every other argument
        is keyword-only.
    prompt_tokens, output_tokens : int, tuple or callable
        Tokens per request: an int (fixed), ``("geometric", mean)`` (1, 2, ... with that mean: geometric output
        lengths make the service time nearly exponential), ``("lognormal", mean, cv)`` (rounded, at least 1), or
        ``callable(rng, n)`` returning ``n`` integers >= 1. Every count, and a mean, is at most 10**9. Left out with a
        ``trace``.
    num_requests : int
        Requests to simulate (1 to 10**7); left out with a ``trace`` (its rows are the requests).
    arrival_rate : float, optional
        Open loop: mean arrival rate in requests per second over all replicas.
    concurrency : int, optional
        Closed loop: this many clients, each sending its next request as soon as the previous one completes (from 0 s).
    max_batch : int
        Most sequences running at once per replica (vLLM ``max_num_seqs``; 1 to 10**6); also a ``backend``'s own cap.
    max_num_batched_tokens : int
        Token budget of one step (decode tokens plus prefill chunks; from ``max_batch`` to 10**9).
        It also sizes the activation reserve of the KV budget, so a large one leaves less KV cache.
    tensor_parallel : int
        GPUs per replica.
    replicas : int
        Identical engine replicas (1 to 10**4).
    seed : int
        Seed of the numpy ``Generator`` drawing arrivals and token counts.
    arrivals : {"poisson", "gamma"}
        Open-loop inter-arrival distribution: exponential, or gamma with squared coefficient of
        variation ``ca2``.
    ca2 : float
        cv^2 of gamma inter-arrival times (> 0 and at most 10,000; 1 is Poisson, larger is burstier;
        under 25 x ca2 requests warn that the run's rate spreads). Only with ``arrivals="gamma"``.
    trace : pandas.DataFrame, optional
        Open loop from a trace: columns ``arrival_s`` (seconds from start), ``prompt_tokens``, ``output_tokens``
        (integers, 1 to 10**9); one request per row, at most 10**7. An optional ``cached_tokens`` column (0 to
        ``prompt_tokens - 1``) gives the prompt tokens the server finds in its cache: they hold KV and are attended to
        but never prefilled (a preempted request finds them again). Or a ``prefix_blocks`` column (each prompt's block
        ids, blocks of ``trace.attrs["prefix_block_tokens"]`` tokens; equal leading ids are a shared prefix): each
        replica then runs a prefix cache with its engine's rules (``toolkit._queueing.prefix_cache``): llama.cpp's
        slots for ``backend="llamacpp"`` (or ``"ollama"``), else vLLM's block cache (LRU eviction of the blocks no
        running sequence holds, within the KV budget); with ``answer_blocks`` (``session_workload``'s) a finished
        request's answer stays cached after its prompt. A found prefix is not prefilled, so TTFT and the engine's
        work fall; the cache holds only KV memory the running batch leaves free (a fuller engine finds less).
    routing : {"round_robin", "least_loaded", "shared_queue", "prefix_affinity"}
        How requests reach replicas: in turn; to the replica with the fewest requests waiting plus
        running; held in one central FIFO queue and taken by the first replica with room (c
        replicas of ``max_batch=1`` are then an M/G/c queue); or, with ``prefix_blocks``, SGLang
        router's cache-aware rule (the replica caching the longest prefix unless loads are out of
        balance; ``_Engine.route``).
    kv_dtype : str or spec
        KV-cache format.
    calibration : dict, Series or one-row DataFrame, optional
        Efficiency overrides; a calibrate() row's measured range adds ``summary``'s ``extrapolated[_reason]``.
    cost : object, optional
        Replaces the cost model: any object with ``step_ms(decode_seqs, kv_tokens, prefill_tokens,
        prefill_context_tokens)`` (ms, numpy-broadcasting; given ``last_chunks`` too where its ``step_ms`` takes that
        argument), ``kv_budget_tokens`` and ``request_overhead_ms`` (optional ``kv_block_tokens``, ``max_batch``).
        Lets tests inject exact service times.
    output_cv : float, optional
        Coefficient of variation given to a fixed (int) ``output_tokens`` in a closed loop: lengths are drawn
        lognormal with that mean and spread (rounded, >= 1). Default 0.05 for a closed loop (identical lengths keep
        every client in lock-step, each wave prefilling all prompts together, which a real benchmark does not do) and
        0 otherwise; recorded in ``config``.
    warmup_fraction : float, optional
        Fraction of the requests (the first ones sent) left out of ``summary`` as warm-up, in [0, 1). Default 0.1,
        except 0 for a closed loop with at least as many clients as requests: every request is sent at time 0, so none
        arrives at a warmed-up engine and dropping the first 10% would under-report ``output_tok_s`` by 10%.
    backend : str or spec, optional
        Serving backend passed to the cost model (its memory reservation and batch cap).
    progress : bool, optional
        A tqdm bar of the requests reaching the engine: True shows it, False never; None (default)
        shows it for runs of 200,000 requests or more when stderr is a terminal.
    prefill_breaks : sequence of int
        Offsets from a prompt's end at which the engine ends a prefill chunk (each >= 1): a prompt
        with ``left`` tokens still to prefill gets at most ``left - b`` of them in a step, ``b`` the
        largest offset below ``left``. Empty (default): a prompt is cut only by the token budget, as
        vLLM does. llama-server on a sliding-window model (Gemma 3) prefills the last 4 and the last
        4 + ``n_ubatch`` tokens of a prompt in steps of their own, to checkpoint the state before
        them (``toolkit._sweep.llama_server.SCHEDULING``).
    prefill_start_breaks : sequence of int
        Positions from a prompt's start at which the engine ends a prefill chunk (each >= 1): a
        chunk that starts before position ``s`` ends there. Positions count a trace's
        ``cached_tokens``, so a prompt found in the cache past ``s`` is not cut. Empty (default):
        none. llama-server with context checkpoints stops a prompt's chunk at the start of its last
        user message, position 1 (after BOS) in a chat of one user message
        (``toolkit._sweep.llama_server.SCHEDULING``).
    ubatch_tokens : int, optional
        Tokens per graph pass (1 to ``max_num_batched_tokens``; None, the default: a step is one pass): a step of more
        runs as several, each priced by ``step_ms`` (llama-server's ``--ubatch-size``; ``chunking.iteration_ms``).
    slot_prompt_similarity : float
        llama-server's ``--slot-prompt-similarity`` (0 to 1; default 0.1, the server's): a request
        takes the idle slot sharing the largest fraction of its prompt above it. Used with
        ``prefix_blocks`` and a llama.cpp backend.
    prompt_cache_mib : float, optional
        llama-server's host-memory prompt cache of saved prompts (``--cache-ram``, 0 to 2**30 MiB; 0: none; None: the
        backend's, 8192 for llama.cpp): its bytes over the cost's ``kv_bytes_per_token`` (``_queueing.slot_cache``).
    speculation : dict, optional
        Speculative decoding, as for :func:`toolkit.speculative_decoding`: every step is priced as a speculative
        one; each decoding sequence gains its drawn accepted length per step (:mod:`toolkit._queueing.speculative`).
    disaggregation : Disaggregation or dict, optional
        An xPyD deployment (:class:`toolkit.Disaggregation`, open loop only): a prefill pool gives each request
        its first token (TTFT), its KV crosses the link, a decode pool admits it once the KV has arrived and
        memory allows and emits the rest (TPOT); ``.requests`` adds ``prefill_replica``, ``transfer_s`` and
        ``decode_wait_s`` (``toolkit._queueing.disaggregated``). None (default): one aggregated pool.

    Returns
    -------
    SimulationResult
        ``.requests``: one row per request, in sending order: ``arrival_s`` (s, when the client sent
        it), ``queue_wait_s`` (s from reaching the engine to first admission), ``ttft_s`` (s to the
        first token, including the request overhead), ``tpot_s`` (s per output token after the
        first; NaN for one-token outputs), ``e2e_s`` (s), ``prompt_tokens``, ``output_tokens``,
        ``replica`` (the replica that finished it), ``preempted`` (times preempted), ``cached_tokens``
        (prompt tokens found in the cache, not prefilled; at its last admission), ``warmup`` (bool).
        ``.summary``: one row with ``requests`` (measured, after warm-up), ``{metric}_mean_s``,
        ``{metric}_p50_s``, ``{metric}_p95_s``, ``{metric}_p99_s`` for queue_wait, ttft, tpot and e2e;
        ``throughput_rps`` and ``output_tok_s`` (measured requests and their output tokens over the
        span from the first measured arrival to the last measured completion), ``achieved_concurrency``
        (mean requests in flight, client side: throughput times mean e2e, by Little's law),
        ``preemptions`` (all requests), ``prefix_hit_rate`` (measured requests' cached prompt tokens
        over their prompt tokens), ``prefill_tokens_saved`` (their cached tokens), ``utilization`` (fraction of the time from the first measured
        request reaching the engine to the end of the simulation that the replicas spent computing
        steps, averaged over replicas), ``kv_budget_tokens`` (per replica), ``queue_wait_growth`` (s of
        queue wait gained per s of arrivals, first third to last: about rho - 1 when offered rho times what
        the engine serves) and ``stable`` (False above 0.05: latencies that grow with the run's length).
        ``.config``: the settings used.
    """
    if disaggregation is not None:
        return simulate_disaggregated(simulate, dict(locals()))
    batch = check_int("max_batch", max_batch, low=1, high=MAX_BATCH)
    token_budget = check_int("max_num_batched_tokens", max_num_batched_tokens, low=1, high=MAX_TOKENS)
    if token_budget < batch:
        why = "so every running sequence can decode each step"
        raise ValueError(f"max_num_batched_tokens must be >= max_batch ({batch}) {why}; got {token_budget}")
    n_replicas = check_int("replicas", replicas, low=1, high=MAX_REPLICAS)
    check_choice("routing", routing, _ROUTING)
    seed = check_int("seed", seed, low=0)
    check_progress(progress)
    rng = np.random.default_rng(seed)
    arrival, prompt, output = _load(
        rng, prompt_tokens, output_tokens, num_requests, arrival_rate, concurrency, arrivals, ca2, trace
    )
    if output_cv is None:
        output_cv = CLOSED_LOOP_OUTPUT_CV if concurrency is not None else 0.0
    spread = check_number("output_cv", output_cv, low=0)
    if spread > 0 and concurrency is not None and isinstance(output_tokens, int | np.integer):
        output = _draw_tokens("output_tokens", ("lognormal", int(output_tokens), spread), rng, output.size)
    if warmup_fraction is None:
        all_at_once = concurrency is not None and concurrency >= prompt.size
        warmup_fraction = 0.0 if all_at_once else 0.1
    warm = check_number("warmup_fraction", warmup_fraction, low=0, high=1, high_inclusive=False)
    breaks = check_breaks(prefill_breaks)
    starts = check_breaks(prefill_start_breaks, "prefill_start_breaks")
    ubatch = None if ubatch_tokens is None else check_int("ubatch_tokens", ubatch_tokens, low=1, high=token_budget)
    cached = _cached_tokens(trace, prompt)
    cm = _cost(cost, model, gpu, quant, tensor_parallel, kv_dtype, calibration, backend, token_budget)
    kv_budget = int(cm.kv_budget_tokens)
    slack = max(int(getattr(cm, "kv_block_tokens", 1)) - 1, 0)
    cap = getattr(cm, "max_batch", math.inf)
    batch = min(batch, int(cap)) if cap is not None and math.isfinite(cap) else batch
    check_fits(prompt + output, cm, kv_budget, slack, token_budget)
    overhead_s = float(cm.request_overhead_ms) / 1e3
    n = len(prompt)
    order = None if arrival is None else np.argsort(arrival, kind="stable")
    # requests are numbered in sending order, so warm-up is simply the first ones
    if order is not None:
        arrival, prompt, output = arrival[order], prompt[order], output[order]
        cached = None if cached is None else cached[order]
    similarity = check_number("slot_prompt_similarity", slot_prompt_similarity, low=0, high=1)
    spec = None if backend is None else resolve_backend(backend)
    host = host_cache_tokens(spec, prompt_cache_mib, cm)  # tokens (0: none)
    caches = prefix_caches(trace, order, spec and spec["name"], n_replicas, batch, slack + 1, similarity, host)
    if caches is not None and cached is not None:
        raise ValueError("trace: give cached_tokens or prefix_blocks, not both (prefix_blocks simulates the cache)")
    if routing == "prefix_affinity" and caches is None:
        raise ValueError("routing='prefix_affinity' needs a trace with prefix_blocks")
    clock_cost, draw = speculative_engine(cm, speculation, rng)
    engine = _Engine(
        _Clock(clock_cost, kv_budget, ubatch),
        kv_budget,
        slack,
        batch,
        token_budget,
        n_replicas,
        routing,
        overhead_s,
        prompt,
        output,
        arrival,
        closed_loop=arrival is None,
        prefill_breaks=breaks,
        cached=cached,
        prefill_starts=starts,
        caches=caches,
    )
    n_warm = int(warm * n)
    engine.window_request, engine.draw = n_warm, draw
    bar = progress_bar(progress, long=n >= LONG_REQUESTS, total=n, desc="simulate", unit="req")
    try:
        end = engine.run(None if concurrency is None else int(concurrency), bar)
        bar.update(n - bar.n)
    finally:
        bar.close()

    requests = request_records(engine, overhead_s, n_warm)
    summary = summarize(requests, engine, end, n_replicas, kv_budget)
    summary.update(simulation_flag(calibration, requests, batch, overhead_s))  # above the calibration's range?
    config = dict(
        arrival_rate=arrival_rate, concurrency=concurrency, arrivals=arrivals, ca2=ca2, max_batch=batch,
        max_num_batched_tokens=token_budget, replicas=n_replicas, routing=routing, tensor_parallel=tensor_parallel,
        kv_budget_tokens=kv_budget, request_overhead_ms=cm.request_overhead_ms, seed=seed, warmup_fraction=warm,
        output_cv=spread, prefill_breaks=breaks, prefill_start_breaks=starts, ubatch_tokens=ubatch,
        prefix_cache=None if caches is None else type(caches[0]).__name__.strip("_"), speculation=speculation,
        prompt_cache_tokens=(host or None) if caches else None,
    )  # fmt: skip
    return SimulationResult(requests, pd.DataFrame([summary]), config)
