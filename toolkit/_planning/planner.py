"""Capacity planner: the cheapest fleets that serve a request rate under TTFT, TPOT and end-to-end SLOs.

For every model x GPU x weight format x backend x tensor-parallel degree that fits, the planner evaluates a grid of
per-replica batch limits ``batch`` (the engine's ``max_num_seqs``: powers of two up to the cap set by the KV cache,
the backend or ``max_batch_grid``, plus the cap itself; 1 for a single-stream backend) and, for each, finds the
fewest replicas that meet every SLO given. So each configuration contributes one row per batch, which is what the
Pareto frontier trades along.

The model of one replica (every step time from :class:`toolkit.CostModel`, every wait from
:func:`toolkit.queue_wait`; no formula for either is re-derived here):

* Each replica is a ``c``-server FIFO queue, ``c = batch`` slots. Requests are spread round robin, so a replica sees
  every ``replicas``-th arrival of the Poisson stream: Erlang inter-arrival times with ``ca2 = 1 / replicas``. The
  service-time variance ``cs2`` is the workload preset.
* Mean service ``S = ttft + output_tokens x tpot``. ``ttft`` is ``CostModel.ttft_ms(prompt, cached = hit_rate x
  prompt)``. The mean ``tpot`` is one decode step, ``CostModel.step_ms(n, n x (prompt + output / 2))``, at the batch
  ``n`` a request sees: itself plus the mean number of others in service, ``n = min(c, 1 + lambda_r x S)`` (the
  M/G/inf count an arrival sees), solved by fixed-point iteration from ``n = c``, each iterate an upper bound. With
  more than one slot, other requests' prefills pause decoding: steps stretch by ``1 / (1 - f)``, ``f = lambda_r x
  prefill`` the share of time spent prefilling (vLLM without chunked prefill; an upper bound when prefill chunks
  ride along decode steps, as the simulator schedules them).
* Stable when ``rho = lambda_r x S / c < 1`` (and ``f < 1``); ``utilization`` is that ``rho``.
* Latency columns are at the SLO ``percentile`` ``p``: ``ttft_ms`` = the p-quantile queue wait + ``ttft``;
  ``tpot_ms`` = the decode step at the p-quantile batch (``1 +`` the Poisson p-quantile of the others in service,
  capped at ``c``) plus the p-quantile number of other prefills (Poisson with mean ``lambda_r x`` decode time)
  spread over the output tokens; ``e2e_p{pct}_ms`` = ``ttft_ms + q x output_tokens x tpot_ms`` with ``q`` the
  p-quantile of a request's length over its mean (gamma with the workload's ``cs2``: 1 for steady, ``-ln(1 - p)``
  for chatbot). Adding quantiles errs high: against :func:`toolkit.simulate`, within ~20% for fixed-length requests
  and up to ~50% high for exponential lengths (tests/test_planner.py).

Replicas are found by a vectorised galloping search over ``1..max_replicas`` (every check is monotone in the
per-replica load); batch, replicas and every latency are numpy array math over all candidates at once, each distinct
(configuration, batch) searched once for all the backends that share it. The candidate grid itself is array math
too: every catalog row is resolved and validated once, and the cost model's formulas (:mod:`toolkit._model.terms`,
the ones :class:`CostModel` evaluates) run over all model x GPU x format x tensor-parallel configurations at once,
for their KV-bound batch caps, their TTFT and their decode step over batch 0..cap (each element computed where a
plan first reads it), cached across calls per specs and request shape; waits from :func:`toolkit.queue_wait`'s core."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from toolkit._args import check_choice, check_int, check_number, is_pandas
from toolkit._data import load_rows
from toolkit._model.efficiency import MAX_TOKENS
from toolkit._model.resolve import resolve_backend, resolve_gpu, resolve_model, resolve_quant
from toolkit._planning.evaluate import _Evaluator
from toolkit._planning.fleets import _text, fleet_columns
from toolkit._planning.grid import _build_grid, _calibration_key, _freeze
from toolkit._planning.inputs import _constants, _degrees, _specs
from toolkit._planning.no_plan import no_plan_reason
from toolkit._planning.prefix import capacity_curve
from toolkit._planning.speculation import check_speculation, speculation_columns
from toolkit._progress import check_progress, progress_bar
from toolkit._vocab.keywords import positional_deprecated
from toolkit._vocab.load import Load
from toolkit._vocab.metrics import LATENCY_METRICS, quantile_column

if TYPE_CHECKING:  # pandas loads for the table plan() returns, not for the command line's
    import pandas as pd

__all__ = ["plan"]

# plans over more model x GPU x format x TP combinations than this show a progress bar by default
LONG_GRID = 2000


@positional_deprecated
def plan(
    arrival_rate: float,
    prompt_tokens: int,
    output_tokens: int,
    *,
    slo_ttft_ms: float | None = None,
    slo_tpot_ms: float | None = None,
    slo_e2e_ms: float | None = None,
    percentile: float = 0.95,
    models: object = None,
    gpus: object = None,
    quants: object = None,
    backends: object = None,
    tensor_parallel: Iterable[int] = (1, 2, 4, 8),
    max_replicas: int = 64,
    workload: str | pd.DataFrame = "chatbot",
    prefix_cache_hit_rate: float = 0.0,
    budget_usd_month: float | None = None,
    calibration: object = None,
    verify: str | None = None,
    client: object = None,
    progress: bool | None = None,
    speculation: object = None,
    layouts: object = ("aggregated",),
) -> pd.DataFrame:
    """Every fleet that can serve ``arrival_rate`` requests/s, with its latency, cost and SLO verdict.

    See the module docstring for the queueing and batching model. Each model x GPU x format x backend
    x tensor-parallel combination that fits contributes one row per batch of its batch grid, with the
    fewest replicas that meet every SLO given (or, where no count up to ``max_replicas`` does, the
    fewest that keep the queue stable, flagged ``meets_slo=False``). Combinations that cannot be
    stable even with ``max_replicas`` replicas are left out.

    Parameters
    ----------
    arrival_rate : float
        Arrival rate of the whole fleet, requests per second (> 0).
    prompt_tokens, output_tokens : int
        Tokens per request in and out (1 to 10**9, as for :func:`toolkit.simulate`).
    slo_ttft_ms, slo_tpot_ms, slo_e2e_ms : float, optional
        Targets for the time to first token, the time per output token and the end-to-end latency,
        each at ``percentile``, in ms (> 0); None leaves that latency unconstrained.
    percentile : float
        Quantile of the latency SLOs, in (0, 1); names the ``e2e_p{100 x percentile}_ms`` column.
    models, gpus, quants, backends : name, spec or list of them, optional
        Candidates; None takes the whole catalog (``toolkit.models()``, ``gpus()``,
        ``quantizations()``, ``backends()``). Backends only meet the formats they load
        (``data/backend_support.csv``).
    tensor_parallel : iterable of int
        Tensor-parallel degrees to try (each 1..64). Used where it divides the model's attention
        heads, the GPU has an interconnect figure, and the backend shards models.
    max_replicas : int
        Most replicas considered per candidate (1..100000).
    workload : str or pandas.DataFrame
        Service-time variance preset of :func:`toolkit.workload_presets` (steady, chatbot, bursty,
        agent), or a trace frame (:func:`toolkit.load_trace`): then the service variance is the cs2
        of its output tokens, the arrivals' ca2 is its gaps' (Poisson: 1), and the cheapest frontier
        plans are also replayed on the trace in the simulator (columns ``sim_*`` below).
    prefix_cache_hit_rate : float
        Fraction of each prompt served from the prefix cache, in [0, 1). With a trace whose requests
        carry ``prefix_blocks``, 0: each candidate's own comes from the trace's reuse curve at the
        cache its KV budget leaves free (:mod:`toolkit._planning.prefix`), column ``prefix_hit_rate``.
    budget_usd_month : float, optional
        Monthly budget in USD (> 0); dearer plans get ``meets_slo=False``, binding ``budget``.
    calibration : dict, Series or one-row DataFrame, optional
        Efficiencies (``mbu``, ``mfu``, ``step_overhead_ms``, ``request_overhead_ms``) replacing the
        defaults of the serving model, e.g. the row :func:`toolkit.calibrate` returns.
    verify : {"simulate"}, optional
        ``"simulate"``: simulate the 8 cheapest cost-latency frontier plans of each backend (the
        trace, or 4,000 Poisson arrivals at ``arrival_rate`` with the preset's output variance) and
        add the ``sim_*`` columns. None: only a trace workload is simulated, on 8 frontier plans.
    client : None, "local", str or dask.distributed.Client
        Where those simulations run, as for :func:`toolkit.simulate_grid` (default in-process);
        unused when nothing is simulated.
    progress : bool, optional
        A tqdm bar over the stages (candidate grid, fleet search, each trace replay): True shows it,
        False never; None (default) shows it when stderr is a terminal and the plan is long (a trace
        to replay, or more than ``LONG_GRID`` model x GPU x format x TP combinations to evaluate).
    speculation : dict, optional
        As for :func:`toolkit.speculative_decoding`: adds ``speculation_batch``, ``speculation_speedup`` and
        ``speculation_pays`` at each candidate's operating batch (:mod:`toolkit._planning.speculation`).
    layouts : {"aggregated", "disaggregated"} or both
        ``"disaggregated"`` adds per configuration its cheapest xPyD split into prefill and decode pools over
        NVLink, or PCIe without it (:mod:`toolkit._planning.disaggregation`), columns ``layout``, ``prefill_replicas``,
        ``decode_replicas``, ``binding_pool`` and ``cheaper_layout``. Default: aggregated only, as before.

    Returns
    -------
    pandas.DataFrame
        One row per candidate, cheapest first among those meeting the SLOs: ``model``, ``gpu``,
        ``quant``, ``backend``, ``tensor_parallel`` (GPUs per replica), ``replicas``, ``batch``
        (concurrent sequences allowed per replica), ``utilization`` (mean busy slots / batch, 0-1),
        ``ttft_ms`` (queue wait at the percentile + prefill, ms), ``tpot_ms`` (time per output token
        at the percentile batch and prefill interruptions, ms), ``e2e_p{pct}_ms`` (``ttft_ms + q x
        output_tokens x tpot_ms``, ``q`` the percentile request length over the mean for the
        workload: 1 for steady; ms), ``cost_usd_month`` (price x tensor_parallel x replicas x ``hours_per_month``),
        ``cost_usd_per_1m_tokens`` (USD per million output tokens at the planned load),
        ``quality`` (MMLU % x format recovery, NaN when unknown), ``prefix_hit_rate`` (share of the
        prompt the prefix cache serves), ``meets_slo`` (bool: stable, every
        SLO met, within budget), ``binding_constraint`` (``capacity``, ``kv_memory``,
        ``max_batch``, ``slo_ttft``, ``slo_tpot``, ``slo_e2e`` or ``budget``: for plans that need
        more than one replica the constraint the plan with one replica fewer breaks, with
        ``kv_memory`` / ``max_batch`` when capacity fails at the largest batch those allow; for
        single-replica plans the constraint with the least relative headroom; for failing plans the
        first one broken), ``warnings`` (``"; "``-separated). With a trace as ``workload``
        or with ``verify``, also ``sim_ttft_ms``, ``sim_tpot_ms``, ``sim_e2e_ms`` (simulated on that
        configuration, at ``percentile``, ms), ``sim_meets_slo`` (False, and said in ``warnings``, where
        the simulated queue grew through the run) and ``sim_disagrees`` (closed form and simulation more than 25%
        apart on the end-to-end percentile), filled for the frontier
        plans simulated and missing (NaN / NA) for the others. No rows, with a ``UserWarning`` saying
        which condition nothing asked for meets (context window, weight format, memory, replicas),
        where no configuration can serve the load.
        With a ``calibration`` that records its measured range (:func:`toolkit.calibrate`), also ``extrapolated``
        (bool) and ``extrapolated_reason``: the candidate's ``batch``, the prompt or the context (``prompt_tokens
        + output_tokens``) above that range, each quantity also named once in a ``UserWarning``.
    """
    args = {k: v for k, v in locals().items() if k not in ("client", "speculation", "layouts")}  # _plan_columns's
    from toolkit._planning.disaggregation import check_layouts, with_disaggregated  # pandas: plan() returns a table

    chosen, spec = check_layouts(layouts), check_speculation(speculation)
    columns, bar, replay = _plan_columns(**args)
    try:
        import pandas as pd  # not at the top: the command line prints the columns without pandas

        from toolkit._model.validity import candidate_flags  # loads pandas too

        texts = {name: _text(*column) for name, column in columns.items() if isinstance(column, tuple)}
        table = pd.DataFrame({name: texts.get(name, column) for name, column in columns.items()}, copy=False)
        if replay is not None:
            from toolkit._planning.verify import verify_plans  # the simulator loads only when needed

            load, pct, slos = replay
            table = verify_plans(table, load, verify is not None, pct, slos, calibration=calibration, client=client)
            bar.update()
        flags = candidate_flags(calibration, table["batch"], prompt_tokens=prompt_tokens, output_tokens=output_tokens)
        table = speculation_columns(table.assign(**flags), spec, prompt_tokens, output_tokens, calibration)
    finally:
        bar.close()
    if chosen == ("aggregated",):
        return table
    slos = dict(zip((f"slo_{m}" for m in LATENCY_METRICS), (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)))
    inputs = dict(args, pct=percentile, slos=slos)
    return with_disaggregated(table, chosen, inputs)


def _plan_columns(
    arrival_rate: float,
    prompt_tokens: int,
    output_tokens: int,
    *,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    slo_e2e_ms: float | None,
    percentile: float,
    models: object,
    gpus: object,
    quants: object,
    backends: object,
    tensor_parallel: Iterable[int],
    max_replicas: int,
    workload: object,
    prefix_cache_hit_rate: float,
    budget_usd_month: float | None,
    calibration: object,
    verify: str | None,
    progress: bool | None,
) -> tuple[dict[str, Any], Any, tuple | None]:
    """:func:`plan`'s arguments checked and its table computed as columns, without pandas (the command line
    prints them as they are): (the columns of :func:`fleet_columns`; the progress bar, still open, where a stage
    is left; for a trace or ``verify``, the replay's (load, percentile, SLOs), else None)."""
    rate = check_number("arrival_rate", arrival_rate, low=0, low_inclusive=False)
    prompt = check_int("prompt_tokens", prompt_tokens, low=1, high=MAX_TOKENS)
    output = check_int("output_tokens", output_tokens, low=1, high=MAX_TOKENS)
    slos = {
        name: None if value is None else check_number(f"{name}_ms", value, low=0, low_inclusive=False)
        for name, value in zip((f"slo_{m}" for m in LATENCY_METRICS), (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms))
    }
    pct = check_number("percentile", percentile, low=0, high=1, low_inclusive=False, high_inclusive=False)
    tps = _degrees(tensor_parallel)
    replicas_max = check_int("max_replicas", max_replicas, low=1, high=100_000)
    trace = workload if is_pandas(workload, "DataFrame") else None
    workload, cs2, ca2, underestimated = _variability(workload)
    if verify is not None:
        check_choice("verify", verify, ("simulate",))
    hit = check_number("prefix_cache_hit_rate", prefix_cache_hit_rate, low=0, high=1, high_inclusive=False)
    curve = None if trace is None else capacity_curve(trace)
    if curve is not None and hit:
        raise ValueError("prefix_cache_hit_rate must be 0 with a trace of prefix_blocks (its reuse curve gives it)")
    budget = budget_usd_month
    if budget is not None:
        budget = check_number("budget_usd_month", budget, low=0, low_inclusive=False)
    check_progress(progress)
    frozen = lambda *args: tuple(_freeze(spec) for spec in _specs(*args))
    specs = (
        frozen("models", models, "models.csv", resolve_model),
        frozen("gpus", gpus, "gpus.csv", resolve_gpu),
        frozen("quants", quants, "quantizations.csv", resolve_quant),
        frozen("backends", backends, "backends.csv", resolve_backend),
    )
    replays = 0 if trace is None and verify is None else 1
    long = replays > 0 or math.prod(len(s) for s in specs[:3]) * len(tps) > LONG_GRID
    bar = progress_bar(progress, long=long, total=2 + replays, desc="plan", unit="stage")
    try:
        grid = _build_grid(
            *specs,
            tuple(tps),
            prompt,
            output,
            hit * prompt,
            _calibration_key(calibration),
            int(_constants()["max_batch_grid"]),
            curve,
        )
        bar.update()
        const = _constants()
        ev = _Evaluator(grid, rate, output, cs2, pct, slos, int(const["implied_batch_iterations"]), ca2)
        e2e = quantile_column("e2e", pct, "ms")
        columns = fleet_columns(ev, grid, replicas_max, output, budget, const, e2e, (workload, cs2, underestimated))
        if not len(columns["meets_slo"]):
            reason = no_plan_reason(specs, tuple(tps), prompt + output, grid.cfg.size, replicas_max, rate)
            warnings.warn(f"no plan: {reason}", UserWarning, stacklevel=4)  # plan's caller, past its wrapper
        bar.update()
    except BaseException:
        bar.close()
        raise
    load = Load(arrival_rate=rate, prompt_tokens=prompt, output_tokens=output, ca2=ca2, cs2=cs2, trace=trace)
    replay = None if not replays else (load, pct, slos)
    return columns, bar, replay


def _variability(workload: str | pd.DataFrame) -> tuple[str, float, float, bool]:
    """(label, service cs2, arrival ca2, whether the closed form under-estimates its tail)."""
    if is_pandas(workload, "DataFrame"):
        from toolkit._planning.workload import trace_variability  # pandas: only a trace's frame needs it

        cs2, ca2 = trace_variability(workload)
        return "trace", cs2, ca2, True  # the trace is replayed in the simulator afterwards
    presets = {row["preset"]: row for row in load_rows("workloads.csv")}  # workload_presets(), as rows
    check_choice("workload", workload, tuple(presets))
    underestimated = str(presets[workload]["tail_underestimated"]).lower() == "true"
    return workload, float(presets[workload]["cs2"]), 1.0, underestimated
