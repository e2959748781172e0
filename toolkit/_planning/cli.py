"""The ``plan`` subcommand of ``python -m toolkit``.

The table it prints is the one ``pandas.DataFrame.to_string`` gives for the plans (a test compares
them), laid out here from the planner's columns: a planning question answers in about the time
pandas alone takes to import, so only ``--json`` loads pandas (and its JSON writer).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from toolkit._vocab.metrics import quantile_column

if TYPE_CHECKING:  # numpy and the planner load when a plan runs, not for --help or a usage error
    import numpy as np

__all__: list[str] = []

# the command line's table: floats to 4 significant digits
_FLOAT = "{:.4g}"


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
    p.add_argument(
        "--arrival-rate",
        "--rate",
        dest="rate",
        type=float,
        required=True,
        help="fleet arrival rate, requests per second (> 0); plan()'s arrival_rate",
    )
    p.add_argument("--prompt-tokens", type=int, required=True, help="prompt tokens per request (1 to 10**9)")
    p.add_argument("--output-tokens", type=int, required=True, help="output tokens per request (1 to 10**9)")
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


def _question(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of :func:`toolkit.plan` the command line sets."""
    return dict(
        arrival_rate=args.rate,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
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


def _run_cli(args: argparse.Namespace) -> int:
    import numpy as np

    from toolkit._args import check_int
    from toolkit._planning.pareto import _front
    from toolkit._planning.planner import _plan_columns

    check_int("--top", args.top, low=1)
    latency = quantile_column("e2e", args.percentile, "ms")
    if args.json:
        return _print_json(args, latency)
    columns, bar, _ = _plan_columns(**_question(args), calibration=None, verify=None)
    bar.close()
    if not args.all:
        columns = _take(columns, np.flatnonzero(columns["meets_slo"]))
    if args.pareto:
        rows, picks = _front(
            [columns["cost_usd_month"], columns[latency]], [columns["quality"]], ["cost_usd_month", latency, "quality"]
        )
        columns = _take(columns, rows)
        labels = {pick: None for pick in picks}
        position = {pick: i for i, pick in enumerate(labels)}
        columns["pick"] = (np.array(list(labels), dtype=object), np.array([position[p] for p in picks], dtype=np.intp))
    plans = len(columns["meets_slo"])
    shown, groups = _compact(columns, args.top)
    print(_to_string(shown))
    print(
        f"{plans} plan(s) in {groups} groups of equal latency and cost (backends and batch limits "
        f"that behave alike are merged); showing {len(shown['meets_slo'])}; --json lists every row"
    )
    return 0


def _print_json(args: argparse.Namespace, latency: str) -> int:
    from toolkit._planning.pareto import pareto
    from toolkit._planning.planner import plan

    table = plan(**_question(args))
    if not args.all:
        table = table[table["meets_slo"]]
    if args.pareto:
        table = pareto(table, minimize=("cost_usd_month", latency))
    print(json.dumps(json.loads(table.to_json(orient="records")), indent=1))
    return 0


def _take(columns: dict[str, Any], rows: np.ndarray) -> dict[str, Any]:
    """The ``rows`` of columns that are arrays or, for text, (distinct values, per row a position there)."""
    return {k: (v[0], v[1][rows]) if isinstance(v, tuple) else v[rows] for k, v in columns.items()}


# multiplier of the row hash (odd, so no bits are lost)
_MIX = 0x9E3779B97F4A7C15


def _groups(keys: list[np.ndarray]) -> np.ndarray:
    """Per row its group number, groups numbered in order of first appearance: rows equal on every
    key (unsigned 64-bit codes) share one. Rows are grouped by a hash of their keys, checked against
    the keys themselves; should two rows differ yet share a hash, by a sort of the keys instead."""
    import numpy as np

    n = keys[0].size
    mixed = np.zeros(n, dtype=np.uint64)
    for key in keys:
        mixed = (mixed ^ key) * np.uint64(_MIX)
        mixed ^= mixed >> np.uint64(29)
    _, first, label = np.unique(mixed, return_index=True, return_inverse=True)
    label = label.reshape(-1)
    if not all(np.array_equal(key, key[first[label]]) for key in keys):
        order = np.lexsort(keys)
        new = np.ones(n, dtype=bool)
        new[1:] = np.any([key[order][1:] != key[order][:-1] for key in keys], axis=0)
        label = np.empty(n, dtype=np.intp)
        label[order] = np.cumsum(new) - 1
        first = np.full(int(label.max(initial=-1)) + 1, n)
        np.minimum.at(first, label, np.arange(n))
    rank = np.empty(first.size, dtype=np.intp)
    rank[np.argsort(first)] = np.arange(first.size)
    return rank[label]


def _key(column: Any) -> np.ndarray:
    """A column as unsigned 64-bit codes, equal exactly where its values are (NaN equal to NaN)."""
    import numpy as np

    if isinstance(column, tuple):  # text: one code per distinct string
        values, codes = column
        seen: dict[object, int] = {}
        canonical = np.array([seen.setdefault(v, len(seen)) for v in values.tolist()], dtype=np.uint64)
        return canonical[codes]
    if column.dtype.kind == "f":  # -0.0 as 0.0 and one NaN, then the bits
        return np.where(np.isnan(column), np.nan, column + 0.0).view(np.uint64)
    return column.astype(np.int64).view(np.uint64)


def _compact(columns: dict[str, Any], top: int) -> tuple[dict[str, Any], int]:
    """(the first ``top`` groups, the number of groups) of the rows that differ only in backend or
    batch limit but plan the same latency and cost: one row per group (in order of first
    appearance) with its backends ``|``-joined in order of appearance, its batch limit or range, and
    its highest utilization."""
    import numpy as np

    merged = ("backend", "batch", "utilization")
    shown = [c for c in columns if c not in ("binding_constraint", "warnings")]
    n = len(columns["meets_slo"])
    group = _groups([_key(columns[c]) for c in shown if c not in merged]) if n else np.zeros(0, dtype=np.intp)
    groups = int(group.max(initial=-1)) + 1
    first = np.unique(group, return_index=True)[1][:top]
    shown_rows = group < first.size  # the rows of the groups shown
    out = _take({c: columns[c] for c in shown}, first)
    sub = group[shown_rows]
    names, codes = columns["backend"]
    backends: dict[int, dict[str, None]] = {}
    for g, name in zip(sub.tolist(), names[codes[shown_rows]].tolist()):
        backends.setdefault(g, {})[name] = None
    batch = columns["batch"][shown_rows]
    low = np.full(first.size, np.iinfo(np.int64).max)
    high = np.full(first.size, np.iinfo(np.int64).min)
    np.minimum.at(low, sub, batch)
    np.maximum.at(high, sub, batch)
    utilization = np.full(first.size, -np.inf)
    np.maximum.at(utilization, sub, columns["utilization"][shown_rows])
    out["backend"] = ["|".join(backends[g]) for g in range(first.size)]
    out["batch"] = [str(a) if a == b else f"{a}-{b}" for a, b in zip(low.tolist(), high.tolist())]
    out["utilization"] = utilization
    return out, groups


def _cells(column: Any) -> tuple[bool, list[str]]:
    """(whether pandas counts the column numeric, its cells as ``DataFrame.to_string`` writes them
    with ``float_format`` ``_FLOAT`` and no index)."""
    if isinstance(column, tuple):
        values, codes = column
        return False, [str(v) for v in values[codes].tolist()]
    if isinstance(column, list):
        return False, [str(v) for v in column]
    if column.dtype.kind == "f":
        return True, ["NaN" if v != v else _FLOAT.format(v) for v in column.tolist()]
    return True, [str(v) for v in column.tolist()]  # integers and booleans


def _to_string(columns: dict[str, Any]) -> str:
    """``pandas.DataFrame(columns).to_string(index=False, float_format=_FLOAT)``: every column
    right-aligned under its name (numeric ones' names after a space), one space apart."""
    cells = {name: _cells(column) for name, column in columns.items()}
    if not any(rows for _, rows in cells.values()):
        return f"Empty DataFrame\nColumns: [{', '.join(columns)}]\nIndex: []"
    laid = []
    for name, (numeric, rows) in cells.items():
        header = f" {name}" if numeric else name
        width = max(len(header), *map(len, rows))
        laid.append([header.rjust(width)] + [row.rjust(width) for row in rows])
    return "\n".join(" ".join(line) for line in zip(*laid))
