"""The ``plan`` subcommand of ``python -m toolkit``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy, pandas and the planner load when a plan runs, not for --help or a usage error
    import pandas as pd

__all__: list[str] = []


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``plan`` subcommand: ``python -m toolkit plan --rate 3 --prompt-tokens 512 ...``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The ``add_subparsers()`` object of the toolkit's command line.

    Returns
    -------
    None
        The subparser's ``func`` prints the plans (or their Pareto frontier) and returns 0.
    """
    p = subparsers.add_parser("plan", help="cheapest fleets meeting a request rate under latency SLOs")
    p.add_argument("--rate", type=float, required=True, help="fleet arrival rate, requests per second (> 0)")
    p.add_argument("--prompt-tokens", type=int, required=True, help="prompt tokens per request (>= 1)")
    p.add_argument("--output-tokens", type=int, required=True, help="output tokens per request (>= 1)")
    p.add_argument("--slo-ttft-ms", type=float, help="time-to-first-token target at --percentile, ms")
    p.add_argument("--slo-tpot-ms", type=float, help="time-per-output-token target at --percentile, ms")
    p.add_argument("--slo-e2e-ms", type=float, help="end-to-end latency target at --percentile, ms")
    p.add_argument("--percentile", type=float, default=0.95, help="quantile of the SLOs, in (0, 1); default 0.95")
    p.add_argument("--model", action="append", dest="models", help="repeatable; default: whole catalog")
    p.add_argument("--gpu", action="append", dest="gpus", help="repeatable; default: whole catalog")
    p.add_argument("--quant", action="append", dest="quants", help="weight format, repeatable; default: all")
    p.add_argument("--backend", action="append", dest="backends", help="serving engine, repeatable; default: all")
    p.add_argument("--tensor-parallel", type=int, action="append", help="repeatable; default 1 2 4 8")
    p.add_argument("--max-replicas", type=int, default=64, help="largest fleet considered (default 64)")
    p.add_argument("--workload", default="chatbot", help="variance preset: steady, chatbot, bursty, agent")
    p.add_argument(
        "--prefix-cache-hit-rate", type=float, default=0.0, help="share of prompt tokens served from cache, [0, 1)"
    )
    p.add_argument("--budget-usd-month", type=float, help="monthly budget in USD (plans above it are flagged)")
    p.add_argument("--pareto", action="store_true", help="show only the Pareto frontier of plans meeting the SLOs")
    p.add_argument("--all", action="store_true", help="include plans that miss the SLOs")
    p.add_argument("--top", type=int, default=20, help="groups of rows to print (table output)")
    p.add_argument("--json", action="store_true", help="JSON records instead of a table")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: for long plans, when stderr is a terminal)",
    )
    p.set_defaults(func=_run_cli)


def _run_cli(args: argparse.Namespace) -> int:
    import pandas as pd

    from toolkit._planning.inputs import _percentile_label
    from toolkit._planning.pareto import pareto
    from toolkit._planning.planner import plan

    table = plan(
        args.rate,
        args.prompt_tokens,
        args.output_tokens,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
        slo_e2e_ms=args.slo_e2e_ms,
        percentile=args.percentile,
        models=args.models,
        gpus=args.gpus,
        quants=args.quants,
        backends=args.backends,
        tensor_parallel=args.tensor_parallel or (1, 2, 4, 8),
        max_replicas=args.max_replicas,
        workload=args.workload,
        prefix_cache_hit_rate=args.prefix_cache_hit_rate,
        budget_usd_month=args.budget_usd_month,
        progress=args.progress,
    )
    if not args.all:
        table = table[table["meets_slo"]]
    if args.pareto:
        latency = f"e2e_p{_percentile_label(args.percentile)}_ms"
        table = pareto(table, minimize=("cost_usd_month", latency))
    if args.json:
        print(json.dumps(json.loads(table.to_json(orient="records")), indent=1))
        return 0
    shown, groups = _compact(table, args.top)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 40):
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(
        f"{len(table)} plan(s) in {groups} groups of equal latency and cost (backends and batch limits "
        f"that behave alike are merged); showing {len(shown)}; --json lists every row"
    )
    return 0


def _compact(table: pd.DataFrame, top: int) -> tuple[pd.DataFrame, int]:
    """(the first ``top`` groups, the number of groups) of the rows that differ only in backend or
    batch limit but plan the same latency and cost: one row per group (in order of first
    appearance) with its backends ``|``-joined in order of appearance, its batch limit or range, and
    its highest utilization."""
    import numpy as np
    import pandas as pd

    merged = ("backend", "batch", "utilization")
    keys = [c for c in table.columns if c not in (*merged, "binding_constraint", "warnings")]
    # group numbers in order of first appearance, NaN equal to NaN: the columns' codes folded in one
    # at a time (pandas' factorize hashes; a groupby over every key column sorts and is slower)
    group = np.zeros(len(table), dtype=np.int64)
    for key in keys:
        codes, uniques = pd.factorize(table[key], use_na_sentinel=False)
        group = pd.factorize(group * len(uniques) + codes)[0]
    groups = int(group.max(initial=-1)) + 1
    first = np.unique(group, return_index=True)[1][:top]
    shown_rows = group < first.size  # the rows of the groups shown
    out = table.iloc[first][[c for c in table.columns if c not in ("binding_constraint", "warnings")]]
    out = out.reset_index(drop=True)
    sub = group[shown_rows]
    backends: dict[int, dict[str, None]] = {}
    for g, name in zip(sub.tolist(), table["backend"].to_numpy()[shown_rows].tolist()):
        backends.setdefault(g, {})[name] = None
    batch = table["batch"].to_numpy()[shown_rows]
    low = np.full(first.size, np.iinfo(np.int64).max)
    high = np.full(first.size, np.iinfo(np.int64).min)
    np.minimum.at(low, sub, batch)
    np.maximum.at(high, sub, batch)
    utilization = np.full(first.size, -np.inf)
    np.maximum.at(utilization, sub, table["utilization"].to_numpy()[shown_rows])
    out["backend"] = ["|".join(backends[g]) for g in range(first.size)]
    out["batch"] = [str(a) if a == b else f"{a}-{b}" for a, b in zip(low.tolist(), high.tolist())]
    out["utilization"] = utilization
    return out, groups
